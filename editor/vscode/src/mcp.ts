// Tandem as an MCP server for VS Code's own agent (`mcpServerDefinitionProviders` in
// package.json, `vscode.lm.registerMcpServerDefinitionProvider`, VS Code 1.101+): Copilot's
// agent mode gets Tandem's tools and the gateway's servers with no `mcp.json` edit. On builds
// without the API this registers nothing and says so in the log.

import * as vscode from "vscode";

import { bundledBinary, findBinary } from "./bootstrap.ts";
import type { Ctx } from "./ctx.ts";

/// The provider's id, as package.json's `mcpServerDefinitionProviders` declares it.
const PROVIDER_ID = "tandem.mcp";

/// The slice of the 1.101 API used here; `@types/vscode` is pinned to `engines.vscode`.
interface McpApi {
    registerMcpServerDefinitionProvider(
        id: string,
        provider: { onDidChangeMcpServerDefinitions?: vscode.Event<void>; provideMcpServerDefinitions(token: vscode.CancellationToken): unknown[] },
    ): vscode.Disposable;
}
type McpStdioServerDefinition = new (label: string, command: string, args?: string[], env?: Record<string, string | number | null>, version?: string) => { cwd?: vscode.Uri };

export function registerMcpProvider(ctx: Ctx): boolean {
    const api = (vscode as unknown as { lm?: Partial<McpApi> }).lm;
    const Definition = (vscode as unknown as { McpStdioServerDefinition?: McpStdioServerDefinition }).McpStdioServerDefinition;
    if (typeof api?.registerMcpServerDefinitionProvider !== "function" || typeof Definition !== "function") {
        ctx.log.info(`VS Code ${vscode.version} has no MCP server definition API: Tandem is not offered to its agent`);
        return false;
    }
    const changed = new vscode.EventEmitter<void>();
    ctx.push(
        changed,
        ctx.onDidChangeState((s) => {
            if (s.kind === "running" || s.kind === "failed") changed.fire();
        }),
        vscode.workspace.onDidChangeWorkspaceFolders(() => changed.fire()),
        api.registerMcpServerDefinitionProvider(PROVIDER_ID, {
            onDidChangeMcpServerDefinitions: changed.event,
            provideMcpServerDefinitions: () => {
                const state = ctx.state;
                // The binary the editor runs, so the agent and the editor share one daemon.
                const bin =
                    state.kind === "running"
                        ? state.server.path
                        : ctx.config.path?.trim()
                          ? findBinary(ctx.config.path, process.env.PATH, ctx.folder?.uri.fsPath)
                          : (bundledBinary(ctx.bundled) ?? findBinary(null, process.env.PATH, undefined));
                const folder = ctx.folder;
                if (!bin || !folder) return [];
                const version = state.kind === "running" ? state.server.version : undefined;
                const def = new Definition("Tandem", bin, ["mcp", "--workspace", folder.uri.fsPath], ctx.config.serverEnv(), version);
                def.cwd = folder.uri;
                return [def];
            },
        }),
    );
    ctx.log.info("registered Tandem as an MCP server for VS Code's agent");
    return true;
}
