// The status bar item: the server's state, and while a task runs, the task with its progress
// and last milestone; a click opens the task (or the log when the server failed).

import * as vscode from "vscode";

import type { ClientState, Ctx } from "./ctx.ts";
import { runningTask, statusText } from "./format.ts";
import type { TaskModel } from "./tasks.ts";

export class StatusBar implements vscode.Disposable {
    private readonly item: vscode.StatusBarItem;
    private readonly subscriptions: vscode.Disposable[];
    private readonly ctx: Ctx;
    private readonly model: TaskModel;

    constructor(ctx: Ctx, model: TaskModel) {
        this.ctx = ctx;
        this.model = model;
        this.item = vscode.window.createStatusBarItem("status", vscode.StatusBarAlignment.Left, 50);
        this.item.name = "Tandem";
        this.subscriptions = [ctx.onDidChangeState(() => this.update()), model.onDidChange(() => this.update())];
        this.update();
        this.item.show();
    }

    private update() {
        const s: ClientState = this.ctx.state;
        const item = this.item;
        item.backgroundColor = undefined;
        switch (s.kind) {
            case "starting":
                this.set("$(loading~spin) Tandem", "Tandem: starting", "Tandem is starting", "tandem.showLog");
                return;
            case "stopped":
                this.set("$(circle-slash) Tandem", "Tandem: stopped", "Tandem is stopped. Click to restart.", "tandem.restart");
                return;
            case "failed":
                item.backgroundColor = new vscode.ThemeColor("statusBarItem.errorBackground");
                this.set("$(error) Tandem", "Tandem: failed", s.message, "tandem.showLog");
                return;
            case "running": {
                const task = runningTask(this.model.workflows);
                if (!task) {
                    this.set("$(checklist) Tandem", "Tandem: ready", `tandem ${s.server.version} (${s.server.path}): no task running`, "workbench.view.extension.tandem");
                    return;
                }
                const text = statusText(task);
                item.text = `$(sync~spin) ${text}`;
                item.accessibilityInformation = { label: `Tandem task: ${text}` };
                item.tooltip = `Task: ${task.name}\n${task.goal}\nClick to open the task.`;
                item.command = { command: "tandem.openTask", title: "Open Task", arguments: [task.task_id] };
                return;
            }
        }
    }

    private set(text: string, label: string, tooltip: string, command: string) {
        this.item.text = text;
        this.item.accessibilityInformation = { label };
        this.item.tooltip = tooltip;
        this.item.command = command;
    }

    dispose() {
        for (const d of this.subscriptions) d.dispose();
        this.item.dispose();
    }
}
