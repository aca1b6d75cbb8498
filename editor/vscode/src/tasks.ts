// The workflows and tasks of the workspace, live: listed with `tandem.tasks.list`, updated
// on the server's `tandem/taskChanged` (a milestone in place at once, anything else by
// listing again, debounced); and the "Tandem" view's tree over them.

import * as vscode from "vscode";

import type { Ctx } from "./ctx.ts";
import { applyTaskChanged, debounce, errorText, stateLabel, taskDescription } from "./format.ts";
import { Cmd, TASK_CHANGED, type TaskChanged, type TaskRecord, type WorkflowRecord } from "./lsp_ext.ts";

/// Events closer than this fold into one listing.
const RELIST_MS = 50;
/// How many workflows, the newest, the view shows.
const LIST_LIMIT = 50;

export class TaskModel implements vscode.Disposable {
    workflows: WorkflowRecord[] = [];
    private readonly emitter = new vscode.EventEmitter<void>();
    /// Fires when the workflows or a task changed.
    readonly onDidChange = this.emitter.event;
    private readonly taskEmitter = new vscode.EventEmitter<string>();
    /// Fires with a task's id on each of its events (its open document refreshes).
    readonly onDidChangeTask = this.taskEmitter.event;
    private readonly relist = debounce(RELIST_MS, () => void this.refresh());
    private readonly ctx: Ctx;

    constructor(ctx: Ctx) {
        this.ctx = ctx;
        ctx.onNotification<TaskChanged>(TASK_CHANGED, (c) => this.apply(c));
        ctx.push(
            ctx.onDidChangeState((s) => {
                if (s.kind === "running") void this.refresh();
                else if (this.workflows.length) {
                    this.workflows = [];
                    this.emitter.fire();
                }
            }),
        );
    }

    /// Lists the workflows again.
    async refresh(): Promise<void> {
        try {
            this.workflows = await this.ctx.exec<WorkflowRecord[]>(Cmd.tasksList, {
                all: false,
                limit: LIST_LIMIT,
            });
        } catch (e) {
            this.ctx.log.warn(`listing tasks: ${errorText(e)}`);
            return;
        }
        this.emitter.fire();
    }

    private apply(change: TaskChanged) {
        this.ctx.log.debug(`task ${change.task_id}: ${change.change}`);
        if (applyTaskChanged(this.workflows, change)) this.emitter.fire();
        this.taskEmitter.fire(change.task_id);
        // The rest of a task's record (durations, decisions, states) comes with the listing.
        this.relist();
    }

    dispose() {
        this.relist.cancel();
        this.emitter.dispose();
        this.taskEmitter.dispose();
    }
}

type Node = { kind: "workflow"; workflow: WorkflowRecord } | { kind: "task"; task: TaskRecord };

const ICONS: Record<TaskRecord["status"], vscode.ThemeIcon> = {
    running: new vscode.ThemeIcon("sync~spin", new vscode.ThemeColor("charts.blue")),
    success: new vscode.ThemeIcon("pass", new vscode.ThemeColor("testing.iconPassed")),
    partial_success: new vscode.ThemeIcon("warning", new vscode.ThemeColor("list.warningForeground")),
    failed: new vscode.ThemeIcon("error", new vscode.ThemeColor("testing.iconFailed")),
};

/// The "Tandem" view: workflows, newest first, each with its task tree.
export class TasksTree implements vscode.TreeDataProvider<Node>, vscode.Disposable {
    private readonly emitter = new vscode.EventEmitter<Node | undefined>();
    readonly onDidChangeTreeData = this.emitter.event;
    private readonly ticker: ReturnType<typeof setInterval>;
    private readonly model: TaskModel;
    private readonly subscription: vscode.Disposable;

    constructor(model: TaskModel) {
        this.model = model;
        this.subscription = model.onDidChange(() => this.emitter.fire(undefined));
        // Running tasks' durations move on.
        this.ticker = setInterval(() => {
            if (this.model.workflows.some((w) => w.tasks.some(hasRunning))) this.emitter.fire(undefined);
        }, 5000);
    }

    getChildren(node?: Node): Node[] {
        if (!node) return this.model.workflows.map((workflow) => ({ kind: "workflow", workflow }));
        const tasks = node.kind === "workflow" ? node.workflow.tasks : node.task.subtasks;
        return (tasks ?? []).map((task) => ({ kind: "task", task }));
    }

    getTreeItem(node: Node): vscode.TreeItem {
        if (node.kind === "workflow") {
            const w = node.workflow;
            const running = w.tasks.some(hasRunning);
            const item = new vscode.TreeItem(w.name, running || w === this.model.workflows[0] ? vscode.TreeItemCollapsibleState.Expanded : vscode.TreeItemCollapsibleState.Collapsed);
            item.id = `workflow:${w.workflow_id}`;
            const shown = `${w.tasks.length} task${w.tasks.length === 1 ? "" : "s"}`;
            item.description = w.omitted_tasks ? `${shown} (${w.omitted_tasks} earlier not shown)` : shown;
            item.tooltip = w.description ?? w.name;
            item.iconPath = new vscode.ThemeIcon("list-tree");
            item.contextValue = "workflow";
            return item;
        }
        const t = node.task;
        const item = new vscode.TreeItem(t.name, t.subtasks?.length ? vscode.TreeItemCollapsibleState.Expanded : vscode.TreeItemCollapsibleState.None);
        item.id = `task:${t.task_id}`;
        item.description = taskDescription(t, new Date());
        const tip = new vscode.MarkdownString();
        tip.appendMarkdown(`**${escape(t.name)}** · ${stateLabel(t.status)}\n\n`);
        tip.appendText(t.goal);
        if (t.last_message) tip.appendMarkdown("\n\n").appendText(`Last: ${t.last_message}`);
        item.tooltip = tip;
        item.iconPath = ICONS[t.status];
        item.contextValue = "task";
        item.command = { command: "tandem.openTask", title: "Open Task", arguments: [t.task_id] };
        return item;
    }

    dispose() {
        clearInterval(this.ticker);
        this.subscription.dispose();
        this.emitter.dispose();
    }
}

function hasRunning(t: TaskRecord): boolean {
    return t.status === "running" || (t.subtasks ?? []).some(hasRunning);
}

function escape(s: string): string {
    return s.replace(/[\\`*_{}[\]()#+\-.!|]/g, "\\$&");
}
