// The palette's commands, and the client's middleware: the server's own commands that code
// lenses and code actions run (`tandem.task.show`, `tandem.memory.saveSelection`,
// `tandem.prompt.run`) answer JSON, which the middleware turns into something to see.

import * as vscode from "vscode";
import type { Middleware } from "vscode-languageclient/node";

import type { Ctx } from "./ctx.ts";
import { INJECT_PREVIEW, memoryUri, openDocument, taskUri } from "./documents.ts";
import { debounce, errorText, memoryItem, runningTask } from "./format.ts";
import {
    Cmd,
    ENTRY_TYPES,
    NEEDS_SIGN_IN,
    type PromptMessages,
    STATUS,
    type SearchOutcome,
    type ServerState,
    type ServersReport,
    type SignInReport,
    type SignOutReport,
    type StatusResult,
    type TrustReport,
} from "./lsp_ext.ts";
import { runPrompt, showMessages } from "./prompts.ts";
import type { TaskModel } from "./tasks.ts";

/// Registers every palette command.
export function registerCommands(ctx: Ctx, model: TaskModel) {
    const commands: Record<string, (...args: never[]) => unknown> = {
        "tandem.restart": () => ctx.restart(),
        "tandem.showLog": () => ctx.log.show(),
        "tandem.openLogFile": () => openLogFile(ctx),
        "tandem.refreshTasks": () => model.refresh(),
        "tandem.openTask": (id?: string) => openTask(model, id),
        "tandem.searchMemory": () => searchMemory(ctx),
        "tandem.saveSelectionToMemory": () => saveSelection(ctx),
        "tandem.runPrompt": () => runPrompt(ctx),
        "tandem.previewInjection": () => openDocument(INJECT_PREVIEW, false),
        "tandem.showServers": () => showServers(ctx),
        "tandem.signIn": (name?: string) => signIn(ctx, name),
        "tandem.signOut": (name?: string) => signOut(ctx, name),
        "tandem.trustWorkspace": () => trust(ctx),
        "tandem.dismissReview": () => dismiss(ctx),
    };
    for (const [name, run] of Object.entries(commands)) {
        ctx.push(vscode.commands.registerCommand(name, (...args: never[]) => reportErrors(name, () => run(...args))));
    }
}

/// Runs a command; a failure is an error message (the server's error code and message).
async function reportErrors(name: string, run: () => unknown): Promise<unknown> {
    try {
        return await run();
    } catch (e) {
        void vscode.window.showErrorMessage(`Tandem (${name}): ${errorText(e)}`);
        return undefined;
    }
}

/// The client's middleware: lenses off when the setting says so; the server's commands run
/// from lenses and code actions show their results.
export function middleware(ctx: Ctx): Middleware {
    return {
        provideCodeLenses: (document, token, next) => (ctx.config.codeLens ? next(document, token) : []),
        executeCommand: async (command, args, next) => {
            switch (command) {
                case Cmd.taskShow:
                case Cmd.taskDecisions: {
                    const id = typeof args[0] === "string" ? args[0] : undefined;
                    if (id) return openDocument(taskUri(id));
                    return next(command, args);
                }
                case Cmd.memorySaveSelection: {
                    const a = (args[0] ?? {}) as { uri?: string; range?: unknown; type?: string };
                    if (a.type) return next(command, args);
                    const asked = await askEntry();
                    if (!asked) return undefined;
                    return reportErrors(command, async () => saved(await next(command, [{ ...a, ...asked }])));
                }
                case Cmd.promptRun:
                    return reportErrors(command, async () => showMessages((await next(command, args)) as PromptMessages));
                default:
                    return next(command, args);
            }
        },
    };
}

async function openTask(model: TaskModel, id?: string) {
    const task = id ?? runningTask(model.workflows)?.task_id;
    if (!task) {
        void vscode.window.showInformationMessage("Tandem: no task is running.");
        return;
    }
    await openDocument(taskUri(task));
}

async function openLogFile(ctx: Ctx) {
    const status = await ctx.request<StatusResult>(STATUS, {});
    await vscode.window.showTextDocument(vscode.Uri.file(status.log_file), { preview: true });
}

/// Memory search: a QuickPick that asks the server as the query is typed; an entry opens as
/// its `tandem://memory/ID` document.
async function searchMemory(ctx: Ctx): Promise<void> {
    type Item = vscode.QuickPickItem & { id: string };
    const qp = vscode.window.createQuickPick<Item>();
    qp.title = "Tandem: Search Memory";
    qp.placeholder = "Words to search the memory for";
    qp.matchOnDescription = true;
    qp.matchOnDetail = true;
    let generation = 0;
    const search = debounce(120, async () => {
        const query = qp.value.trim();
        const mine = ++generation;
        if (!query) {
            qp.items = [];
            return;
        }
        qp.busy = true;
        try {
            const r = await ctx.exec<SearchOutcome>(Cmd.memorySearch, { query, limit: 20 });
            if (mine !== generation) return;
            // The server ranks; VS Code's own filter must not hide what it found.
            qp.items = r.results.map((x) => ({ ...memoryItem(x), alwaysShow: true }));
            qp.title = `Tandem: Search Memory · ${r.total} match${r.total === 1 ? "" : "es"}`;
        } catch (e) {
            qp.title = `Tandem: Search Memory · ${errorText(e)}`;
        } finally {
            if (mine === generation) qp.busy = false;
        }
    });
    qp.onDidChangeValue(() => search());
    const picked = await new Promise<Item | undefined>((resolve) => {
        qp.onDidAccept(() => resolve(qp.selectedItems[0] ?? qp.activeItems[0]));
        qp.onDidHide(() => resolve(undefined));
        qp.show();
    });
    search.cancel();
    qp.dispose();
    if (picked) await openDocument(memoryUri(picked.id));
}

/// The entry's type and title, asked; undefined when cancelled.
async function askEntry(): Promise<{ type: string; title?: string } | undefined> {
    const type = await vscode.window.showQuickPick([...ENTRY_TYPES], { title: "Tandem: Save to Memory", placeHolder: "The entry's type" });
    if (!type) return undefined;
    const title = await vscode.window.showInputBox({
        title: "Tandem: Save to Memory",
        prompt: "A title (empty: the selection's first line)",
    });
    if (title === undefined) return undefined;
    return title.trim() ? { type, title: title.trim() } : { type };
}

/// Saves the active editor's selection as a memory entry.
async function saveSelection(ctx: Ctx): Promise<void> {
    const editor = vscode.window.activeTextEditor;
    if (!editor || editor.selection.isEmpty) {
        void vscode.window.showWarningMessage("Tandem: select the text to save first.");
        return;
    }
    const asked = await askEntry();
    if (!asked) return;
    const args = { uri: editor.document.uri.toString(), range: ctx.protocolRange(editor.selection), ...asked };
    saved(await ctx.exec(Cmd.memorySaveSelection, args));
}

/// Says that an entry was added, with a button to open it.
function saved(result: unknown) {
    const id = (result as { id?: string } | undefined)?.id;
    if (!id) return;
    void vscode.window.showInformationMessage(`Tandem: saved to memory as [${id.slice(0, 8)}].`, "Open").then((a) => {
        if (a) void openDocument(memoryUri(id));
    });
}

/// A server's state as a list shows it: `needs sign-in`.
function stateLabel(s: ServerState): string {
    if (s.state === NEEDS_SIGN_IN) return "$(key) needs sign-in";
    return (s.state ?? "").replace(/_/g, " ");
}

/// Whether a server is a remote one (its `runs` is its URL), which may sign in.
function isRemote(s: ServerState): boolean {
    return typeof s.runs === "string" && /^https?:\/\//.test(s.runs);
}

/// The workspace's downstream servers: their state; one picked shows its report, or, when it
/// waits for a sign-in, offers it first (a remote one signed in offers to sign out).
async function showServers(ctx: Ctx): Promise<void> {
    const report = await ctx.exec<ServersReport>(Cmd.servers);
    const items = report.servers.map((s) => ({
        label: s.name,
        description: stateLabel(s),
        detail: s.last_error ?? undefined,
        server: s,
    }));
    if (!items.length) {
        void vscode.window.showInformationMessage(`Tandem: no MCP servers are configured (${report.files.join(", ")}).${report.errors.length ? ` Errors: ${report.errors.join("; ")}` : ""}`);
        return;
    }
    const picked = await vscode.window.showQuickPick(items, { title: `Tandem: Servers of ${report.workspace}`, matchOnDescription: true });
    if (!picked) return;
    const s = picked.server;
    const actions: { label: string; run: () => Promise<void> }[] = [];
    if (s.state === NEEDS_SIGN_IN) actions.push({ label: "$(key) Sign in", run: () => signIn(ctx, s.name) });
    if (actions.length || isRemote(s)) {
        actions.push({ label: "$(json) Show details", run: () => showServer(s) });
        if (isRemote(s) && s.state !== NEEDS_SIGN_IN) actions.push({ label: "$(sign-out) Sign out", run: () => signOut(ctx, s.name) });
        const action = await vscode.window.showQuickPick(actions, { title: `Tandem: ${s.name} · ${stateLabel(s)}` });
        if (action) await action.run();
        return;
    }
    await showServer(s);
}

async function showServer(s: ServerState): Promise<void> {
    const doc = await vscode.workspace.openTextDocument({ language: "json", content: JSON.stringify(s, null, 2) });
    await vscode.window.showTextDocument(doc, { preview: true });
}

/// A server picked among those `keep` holds of (the only one without asking); undefined
/// when there is none (said) or the pick was cancelled.
async function pickServer(ctx: Ctx, title: string, keep: (s: ServerState) => boolean, none: string): Promise<string | undefined> {
    const report = await ctx.exec<ServersReport>(Cmd.servers);
    const servers = report.servers.filter(keep);
    if (!servers.length) {
        void vscode.window.showInformationMessage(`Tandem: ${none}`);
        return undefined;
    }
    const items = servers.map((s) => ({ label: s.name, description: stateLabel(s), detail: s.runs ?? undefined }));
    return (await vscode.window.showQuickPick(items, { title }))?.label;
}

/// Signs in to a remote server (one that needs it, picked, unless named): Tandem opens the
/// browser on its sign-in page; a notification shows the wait, then the result. The
/// server's own offer (a notification with "Sign in") opens the page from VS Code too.
async function signIn(ctx: Ctx, name?: string): Promise<void> {
    name ??= await pickServer(ctx, "Tandem: Sign In to MCP Server", (s) => s.state === NEEDS_SIGN_IN, "no MCP server needs a sign-in.");
    if (!name) return;
    const server = name;
    const done = await vscode.window.withProgress(
        { location: vscode.ProgressLocation.Notification, title: `Tandem: signing in to '${server}'`, cancellable: true },
        async (progress, token) => {
            const started = await ctx.exec<SignInReport>(Cmd.serversLogin, { name: server });
            if (started.url) progress.report({ message: "approve in your browser…" });
            const finished = ctx.exec<SignInReport>(Cmd.serversLogin, { name: server, wait: true, attempt: started.attempt });
            // Cancelling stops the wait here; the sign-in itself waits for the browser until
            // its time limit.
            const cancelled = new Promise<undefined>((resolve) => token.onCancellationRequested(() => resolve(undefined)));
            return Promise.race([finished, cancelled]);
        },
    );
    if (!done) return;
    const info = done.server_info ? ` (${done.server_info})` : "";
    void vscode.window.showInformationMessage(
        `Tandem: signed in to '${server}'${info}: ${done.status.replace(/_/g, " ")}, ${done.tools} tool${done.tools === 1 ? "" : "s"}.`,
    );
}

/// Forgets a remote server's sign-in (its tokens) and disconnects it.
async function signOut(ctx: Ctx, name?: string): Promise<void> {
    name ??= await pickServer(ctx, "Tandem: Sign Out of MCP Server", isRemote, "no remote MCP server to sign out of.");
    if (!name) return;
    const r = await ctx.exec<SignOutReport>(Cmd.serversLogout, { name });
    void vscode.window.showInformationMessage(
        r.forgot ? `Tandem: signed out of '${r.server}': its tokens are forgotten and it is disconnected.` : `Tandem: '${r.server}' had no sign-in to forget; it is disconnected.`,
    );
}

/// Trusts (or revokes) the workspace's `.mcp.json`, after showing what its servers run.
async function trust(ctx: Ctx): Promise<void> {
    const report = await ctx.exec<TrustReport>(Cmd.trust, { action: "show" });
    if (!report.file) {
        void vscode.window.showInformationMessage("Tandem: this workspace has no .mcp.json to trust.");
        return;
    }
    const detail = report.servers.map((s) => `${s.name}: ${s.runs ?? s.error ?? "?"}`).join("\n");
    const action = report.trusted ? "Revoke" : "Trust";
    const answer = await vscode.window.showWarningMessage(
        report.trusted ? `${report.file} is trusted. Revoke it (its servers stop)?` : `Trust ${report.file}? Its servers run these commands:`,
        { modal: true, detail },
        action,
    );
    if (answer !== action) return;
    // An approval names the digest of what was shown: a file changed since is not approved.
    const done = await ctx.exec<TrustReport>(Cmd.trust, answer === "Trust" ? { action: "approve", sha256: report.sha256 } : { action: "revoke" });
    void vscode.window.showInformationMessage(`Tandem: ${done.done ?? (done.trusted ? "trusted" : "not trusted")}.`);
}

/// Dismisses a completed task's review warnings.
async function dismiss(ctx: Ctx): Promise<void> {
    const r = await ctx.exec<{ dismissed: string | null }>(Cmd.dismiss);
    void vscode.window.showInformationMessage(
        r.dismissed ? `Tandem: dismissed the review warnings of task ${r.dismissed.slice(0, 8)}.` : "Tandem: no completed task's warnings to dismiss.",
    );
}
