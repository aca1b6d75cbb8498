// The extension's context: owns every disposable, the output channel and the language client
// (`tandem lsp`), starts, restarts and stops it, and runs the server's commands.

import * as path from "node:path";

import * as vscode from "vscode";
import { ExecuteCommandRequest, LanguageClient, type LanguageClientOptions, type Middleware, type ServerOptions, State } from "vscode-languageclient/node";

import { BootstrapError, bootstrap, type Server } from "./bootstrap.ts";
import { Config } from "./config.ts";

export type ClientState = { kind: "stopped" } | { kind: "starting" } | { kind: "running"; server: Server } | { kind: "failed"; message: string };

export class Ctx {
    readonly config = new Config();
    readonly log: vscode.LogOutputChannel;
    private client: LanguageClient | undefined;
    private clientDisposables: vscode.Disposable[] = [];
    private readonly stateEmitter = new vscode.EventEmitter<ClientState>();
    /// Fires on every change of the client's state (the status bar, the task model listen).
    readonly onDidChangeState = this.stateEmitter.event;
    private _state: ClientState = { kind: "stopped" };
    /// When `activate` began (`performance.now()`), for the activation time in the log.
    readonly activatedAt = performance.now();
    /// The client's middleware (`commands.ts`), and the handlers of the server's notifications.
    middleware: Middleware = {};
    private readonly notifications: { method: string; handler: (params: unknown) => void }[] = [];

    readonly extension: vscode.ExtensionContext;
    /// Where a platform-specific package carries the binary (absent from the generic one).
    readonly bundled: string;

    constructor(extension: vscode.ExtensionContext) {
        this.extension = extension;
        this.bundled = extension.asAbsolutePath(path.join("server", process.platform === "win32" ? "tandem.exe" : "tandem"));
        this.log = vscode.window.createOutputChannel("Tandem", { log: true });
        this.push(this.log, this.stateEmitter);
    }

    get state(): ClientState {
        return this._state;
    }

    private setState(s: ClientState) {
        this._state = s;
        this.stateEmitter.fire(s);
    }

    /// Disposed when the extension deactivates.
    push(...d: vscode.Disposable[]) {
        this.extension.subscriptions.push(...d);
    }

    /// Handles a server notification on every client this context starts.
    onNotification<P>(method: string, handler: (params: P) => void) {
        this.notifications.push({ method, handler: handler as (params: unknown) => void });
    }

    /// The workspace folder Tandem serves: the first.
    get folder(): vscode.WorkspaceFolder | undefined {
        return vscode.workspace.workspaceFolders?.[0];
    }

    /// Finds the binary, then starts `tandem lsp` over it. A missing or too old binary is a
    /// message saying what to do, not an exception.
    async start(): Promise<void> {
        if (this.client) return;
        this.setState({ kind: "starting" });
        let server: Server;
        try {
            server = await bootstrap(this.config.path, process.env.PATH, this.folder?.uri.fsPath, this.bundled);
        } catch (e) {
            const message = e instanceof BootstrapError || e instanceof Error ? e.message : String(e);
            this.log.error(message);
            this.setState({ kind: "failed", message });
            void this.showBootstrapError(message);
            return;
        }
        this.log.info(`using ${server.path} (tandem ${server.version})`);
        const serverOptions: ServerOptions = {
            command: server.path,
            args: ["lsp"],
            options: {
                cwd: this.folder?.uri.fsPath,
                env: { ...process.env, ...this.config.serverEnv() },
            },
        };
        const clientOptions: LanguageClientOptions = {
            // Every file: Tandem is not a language server for one language.
            documentSelector: [{ scheme: "file" }, { scheme: "untitled" }],
            outputChannel: this.log,
            middleware: this.middleware,
            markdown: { isTrusted: false },
            // Servers' questions come here as forms (`tandem/question`, questions.ts).
            initializationOptions: { questions: true },
        };
        const client = new LanguageClient("tandem", "Tandem", serverOptions, clientOptions);
        this.client = client;
        for (const n of this.notifications) {
            this.clientDisposables.push(client.onNotification(n.method, n.handler));
        }
        // The server going away (and vscode-languageclient starting it again) shows too.
        this.clientDisposables.push(
            client.onDidChangeState((e) => {
                if (this.client !== client) return;
                if (e.newState === State.Stopped && this._state.kind === "running") {
                    this.setState({ kind: "failed", message: "tandem lsp stopped; Tandem: Show Log says why, Tandem: Restart starts it again" });
                } else if (e.newState === State.Running && this._state.kind === "failed") {
                    this.setState({ kind: "running", server });
                }
            }),
        );
        try {
            await client.start();
        } catch (e) {
            const message = `tandem lsp did not start: ${e instanceof Error ? e.message : String(e)}`;
            this.log.error(message);
            this.client = undefined;
            this.disposeClientHandlers();
            this.setState({ kind: "failed", message });
            void vscode.window.showErrorMessage(`Tandem: ${message}`, "Show Log").then((a) => a && this.log.show());
            return;
        }
        const ms = Math.round(performance.now() - this.activatedAt);
        this.log.info(`client running, ${ms} ms after activation`);
        this.setState({ kind: "running", server });
    }

    private async showBootstrapError(message: string) {
        const action = await vscode.window.showErrorMessage(`Tandem: ${message}`, "Open Settings", "Show Log");
        if (action === "Open Settings") await vscode.commands.executeCommand("workbench.action.openSettings", "tandem.path");
        if (action === "Show Log") this.log.show();
    }

    async stop(): Promise<void> {
        const client = this.client;
        this.client = undefined;
        this.disposeClientHandlers();
        if (client) {
            try {
                await client.stop(5000);
            } catch (e) {
                this.log.warn(`stopping the client: ${e instanceof Error ? e.message : String(e)}`);
            }
        }
        this.setState({ kind: "stopped" });
    }

    async restart(): Promise<void> {
        await this.stop();
        await this.start();
    }

    private disposeClientHandlers() {
        for (const d of this.clientDisposables) d.dispose();
        this.clientDisposables = [];
    }

    /// The running client, or an error saying why there is none.
    running(): LanguageClient {
        if (!this.client || this._state.kind !== "running") {
            const why = this._state.kind === "failed" ? this._state.message : "the Tandem server is not running";
            throw new Error(why);
        }
        return this.client;
    }

    /// Runs a server command (`workspace/executeCommand`), without the middleware.
    exec<T>(command: string, ...args: unknown[]): Promise<T> {
        return this.running().sendRequest(ExecuteCommandRequest.type, { command, arguments: args }) as Promise<T>;
    }

    /// Sends a custom request.
    request<T>(method: string, params: unknown): Promise<T> {
        return this.running().sendRequest<T>(method, params);
    }

    /// Converts a VS Code range to the protocol's.
    protocolRange(r: vscode.Range) {
        return this.running().code2ProtocolConverter.asRange(r);
    }
}
