// The extension's own logic that needs no VS Code: versions, what the task tree and the status
// bar say, the live model of workflows and tasks, prompt messages as Markdown. Unit-tested in
// `test/unit/` under plain Node.

import type { PromptMessages, SearchResult, TaskChanged, TaskRecord, WorkflowRecord } from "./lsp_ext.ts";

/// The oldest `tandem` this extension works with: the first with `tandem/taskChanged`.
export const MIN_VERSION = "0.1.0";

/// The version in `tandem --version`'s output (`tandem 0.1.0`), or null.
export function parseVersion(output: string): string | null {
    const m = /^tandem\s+v?(\d+\.\d+\.\d+)/m.exec(output.trim());
    return m ? m[1] : null;
}

/// Compares two `MAJOR.MINOR.PATCH` versions: negative, zero or positive.
export function compareVersions(a: string, b: string): number {
    const pa = a.split(".").map(Number);
    const pb = b.split(".").map(Number);
    for (let i = 0; i < 3; i++) {
        const d = (pa[i] ?? 0) - (pb[i] ?? 0);
        if (d !== 0) return d;
    }
    return 0;
}

/// `95` → `1m 35s`; under a minute in seconds, over an hour in hours and minutes.
export function formatDuration(seconds: number): string {
    const s = Math.max(0, Math.floor(seconds));
    if (s < 60) return `${s}s`;
    if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
    return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
}

/// How long a task ran, or has run until `now` while it runs.
export function taskSeconds(task: TaskRecord, now: Date): number {
    if (task.status !== "running") return task.duration_seconds;
    const started = Date.parse(task.started_at);
    return Number.isNaN(started) ? task.duration_seconds : (now.getTime() - started) / 1000;
}

const STATE_LABELS: Record<TaskRecord["status"], string> = {
    running: "in progress",
    success: "success",
    partial_success: "partial success",
    failed: "failed",
};

/// A task's state as people read it.
export function stateLabel(status: TaskRecord["status"]): string {
    return STATE_LABELS[status] ?? status;
}

/// The tree's description of a task: `in progress · 75% · 1m 35s`.
export function taskDescription(task: TaskRecord, now: Date): string {
    const parts = [stateLabel(task.status)];
    if (task.progress !== null && task.progress !== undefined) parts.push(`${Math.round(task.progress)}%`);
    parts.push(formatDuration(taskSeconds(task, now)));
    return parts.join(" · ");
}

/// Every task of `workflows`, subtasks after their parent.
export function allTasks(workflows: readonly WorkflowRecord[]): TaskRecord[] {
    const out: TaskRecord[] = [];
    const walk = (tasks: readonly TaskRecord[]) => {
        for (const t of tasks) {
            out.push(t);
            walk(t.subtasks ?? []);
        }
    };
    for (const w of workflows) walk(w.tasks);
    return out;
}

/// The running task the status bar shows: the one started last (a running subtask started
/// after its parent, so it wins, as the server's focus does).
export function runningTask(workflows: readonly WorkflowRecord[]): TaskRecord | undefined {
    let best: TaskRecord | undefined;
    for (const t of allTasks(workflows)) {
        if (t.status === "running" && (!best || t.started_at >= best.started_at)) best = t;
    }
    return best;
}

/// The status bar's text for the running task: `Task name · 75% · Running tests`.
export function statusText(task: TaskRecord): string {
    const parts = [task.name];
    if (task.progress !== null && task.progress !== undefined) parts.push(`${Math.round(task.progress)}%`);
    if (task.last_message) parts.push(task.last_message);
    return parts.join(" · ");
}

/// Applies a task event to the tasks as last listed. A milestone of a known task updates it
/// in place (the status bar shows it without a request): `true`. Anything else needs the list
/// again: `false`.
export function applyTaskChanged(workflows: readonly WorkflowRecord[], change: TaskChanged): boolean {
    if (change.change !== "milestone") return false;
    const task = allTasks(workflows).find((t) => t.task_id === change.task_id);
    if (!task) return false;
    if (change.progress !== null && change.progress !== undefined) task.progress = change.progress;
    if (change.message !== undefined) task.last_message = change.message;
    return true;
}

/// A memory search result as a QuickPick row.
export function memoryItem(r: SearchResult): { label: string; description: string; detail: string; id: string } {
    const tags = r.tags.length ? ` · ${r.tags.join(", ")}` : "";
    return { label: r.title, description: `${r.type}${tags}`, detail: r.snippet, id: r.id };
}

/// A prompt's messages as one Markdown document: a heading per message, text as it is, other
/// content (images, resources) as their JSON.
export function messagesMarkdown(result: PromptMessages): string {
    const lines: string[] = [`# /${result.server}:${result.prompt}`, ""];
    if (result.description) lines.push(result.description, "");
    for (const m of result.messages) {
        lines.push(`## ${m.role}`, "");
        const c = m.content;
        if (c.type === "text" && typeof c.text === "string") {
            lines.push(c.text, "");
        } else {
            lines.push("```json", JSON.stringify(c, null, 2), "```", "");
        }
    }
    return lines.join("\n");
}

/// A prompt's messages as plain text for the clipboard: each message's text, in order.
export function messagesText(result: PromptMessages): string {
    return result.messages
        .map((m) => (m.content.type === "text" && typeof m.content.text === "string" ? m.content.text : JSON.stringify(m.content)))
        .join("\n\n");
}

/// What a JSON-RPC error from the server says: the spec's error object (`data.error`) when
/// there is one (`TASK_NOT_FOUND: no task 01AB...`), else the message.
export function errorText(e: unknown): string {
    if (e && typeof e === "object") {
        const err = e as { message?: unknown; data?: { error?: { code?: unknown; message?: unknown } } };
        const spec = err.data?.error;
        if (spec && typeof spec.message === "string") {
            return typeof spec.code === "string" ? `${spec.code}: ${spec.message}` : spec.message;
        }
        if (typeof err.message === "string") return err.message;
    }
    return String(e);
}

/// Calls `f` once `ms` after the last of a burst of calls.
export function debounce(ms: number, f: () => void): { (): void; cancel(): void } {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const call = () => {
        if (timer) clearTimeout(timer);
        timer = setTimeout(() => {
            timer = undefined;
            f();
        }, ms);
    };
    call.cancel = () => {
        if (timer) clearTimeout(timer);
        timer = undefined;
    };
    return call;
}
