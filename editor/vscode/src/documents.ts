// `tandem://` documents: `tandem://task/ID` and `tandem://memory/ID` read with the server's
// `tandem/document`, `tandem://inject/preview.md` with `tandem/inject`. Read-only; a task's
// document follows its events, the preview follows `tandem/promptsChanged`.

import * as vscode from "vscode";

import type { Ctx } from "./ctx.ts";
import { errorText } from "./format.ts";
import { DOCUMENT, type DocumentResult, INJECT, type InjectResult, PROMPTS_CHANGED } from "./lsp_ext.ts";
import type { TaskModel } from "./tasks.ts";

export const SCHEME = "tandem";
export const INJECT_PREVIEW = vscode.Uri.parse(`${SCHEME}://inject/preview.md`);

export class Documents implements vscode.TextDocumentContentProvider, vscode.Disposable {
    private readonly emitter = new vscode.EventEmitter<vscode.Uri>();
    readonly onDidChange = this.emitter.event;
    private readonly subscriptions: vscode.Disposable[];
    private readonly ctx: Ctx;

    constructor(ctx: Ctx, model: TaskModel) {
        this.ctx = ctx;
        this.subscriptions = [
            model.onDidChangeTask((id) => this.changed(taskUri(id))),
            // Documents opened elsewhere (a workspace symbol's location) are Markdown too.
            vscode.workspace.onDidOpenTextDocument((d) => {
                if (d.uri.scheme === SCHEME && d.languageId !== "markdown") void vscode.languages.setTextDocumentLanguage(d, "markdown");
            }),
        ];
        ctx.onNotification(PROMPTS_CHANGED, () => this.changed(INJECT_PREVIEW));
    }

    private changed(uri: vscode.Uri) {
        const key = uri.toString();
        if (vscode.workspace.textDocuments.some((d) => d.uri.toString() === key)) this.emitter.fire(uri);
    }

    async provideTextDocumentContent(uri: vscode.Uri): Promise<string> {
        try {
            if (uri.authority === "inject") {
                const r = await this.ctx.request<InjectResult>(INJECT, {});
                return r.preview;
            }
            const r = await this.ctx.request<DocumentResult>(DOCUMENT, { uri: uri.toString(true) });
            return r.text;
        } catch (e) {
            return `# ${uri.toString(true)}\n\nTandem could not read this document: ${errorText(e)}\n`;
        }
    }

    dispose() {
        for (const d of this.subscriptions) d.dispose();
        this.emitter.dispose();
    }
}

export function taskUri(id: string): vscode.Uri {
    return vscode.Uri.parse(`${SCHEME}://task/${id}`);
}

export function memoryUri(id: string): vscode.Uri {
    return vscode.Uri.parse(`${SCHEME}://memory/${id}`);
}

/// Opens a `tandem://` document as Markdown.
export async function openDocument(uri: vscode.Uri, preview = true): Promise<vscode.TextEditor> {
    let doc = await vscode.workspace.openTextDocument(uri);
    if (doc.languageId !== "markdown") doc = await vscode.languages.setTextDocumentLanguage(doc, "markdown");
    return vscode.window.showTextDocument(doc, { preview });
}
