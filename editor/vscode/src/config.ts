// The extension's settings (`contributes.configuration` in package.json), read in one place.

import * as vscode from "vscode";

export class Config {
    private get cfg(): vscode.WorkspaceConfiguration {
        return vscode.workspace.getConfiguration("tandem");
    }

    /// `tandem.path`: the binary, or null to look on PATH.
    get path(): string | null {
        return this.cfg.get<string | null>("path") ?? null;
    }

    /// `tandem.logLevel`: the server's log filter (`TANDEM_LOG`).
    get logLevel(): string {
        return this.cfg.get<string>("logLevel") ?? "info";
    }

    /// `tandem.codeLens.enable`.
    get codeLens(): boolean {
        return this.cfg.get<boolean>("codeLens.enable") ?? true;
    }

    /// `tandem.daemon.idleSeconds`: how long a daemon this editor starts waits with no client.
    get idleSeconds(): number | null {
        return this.cfg.get<number | null>("daemon.idleSeconds") ?? null;
    }

    /// The environment of the processes the extension starts (`tandem lsp`, and the MCP server
    /// it registers for VS Code's agent).
    serverEnv(): Record<string, string> {
        const env: Record<string, string> = { TANDEM_LOG: this.logLevel };
        const idle = this.idleSeconds;
        if (idle !== null) env.TANDEM_DAEMON_IDLE_SECS = String(idle);
        return env;
    }

    /// Whether `e` changes a setting that needs the client restarted (lenses too: a new client
    /// asks for every visible editor's lenses again).
    needsRestart(e: vscode.ConfigurationChangeEvent): boolean {
        return ["tandem.path", "tandem.logLevel", "tandem.daemon.idleSeconds", "tandem.codeLens.enable"].some((s) => e.affectsConfiguration(s));
    }
}
