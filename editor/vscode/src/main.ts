// The extension's entry: builds the context, registers the views, providers and commands,
// starts the client. Everything it creates is owned by `Ctx`.

import * as vscode from "vscode";

import { middleware, registerCommands } from "./commands.ts";
import { Ctx } from "./ctx.ts";
import { Documents, SCHEME } from "./documents.ts";
import { registerMcpProvider } from "./mcp.ts";
import { registerQuestions } from "./questions.ts";
import { StatusBar } from "./status.ts";
import { TaskModel, TasksTree } from "./tasks.ts";

let ctx: Ctx | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
    ctx = new Ctx(context);
    const c = ctx;
    c.middleware = middleware(c);
    const model = new TaskModel(c);
    const documents = new Documents(c, model);
    const tree = new TasksTree(model);
    c.push(
        model,
        documents,
        tree,
        new StatusBar(c, model),
        vscode.workspace.registerTextDocumentContentProvider(SCHEME, documents),
        vscode.window.createTreeView("tandem.tasks", { treeDataProvider: tree, showCollapseAll: true }),
        vscode.workspace.onDidChangeConfiguration((e) => {
            if (c.config.needsRestart(e)) void c.restart();
        }),
    );
    registerCommands(c, model);
    registerMcpProvider(c);
    registerQuestions(c);
    await c.start();
}

export async function deactivate(): Promise<void> {
    await ctx?.stop();
    ctx = undefined;
}
