// The extension's logic that needs no VS Code (src/format.ts), under plain Node.

import assert from "node:assert/strict";
import { test } from "node:test";

import {
    applyTaskChanged,
    compareVersions,
    errorText,
    formatDuration,
    memoryItem,
    messagesMarkdown,
    messagesText,
    parseVersion,
    runningTask,
    statusText,
    taskDescription,
} from "../../src/format.ts";
import type { TaskRecord, WorkflowRecord } from "../../src/lsp_ext.ts";

function task(over: Partial<TaskRecord>): TaskRecord {
    return {
        task_id: "01T",
        workflow_id: "01W",
        parent_task_id: null,
        name: "Setup JWT",
        goal: "verify tokens",
        status: "running",
        started_at: "2026-11-24T10:00:00Z",
        completed_at: null,
        duration_seconds: 0,
        progress: null,
        last_message: null,
        subtasks: [],
        ...over,
    };
}

function workflow(tasks: TaskRecord[]): WorkflowRecord {
    return { workflow_id: "01W", name: "Auth", description: null, created_at: "2026-11-24T10:00:00Z", tasks };
}

test("versions are read from --version and compared", () => {
    const cases: [string, string | null][] = [
        ["tandem 0.1.0\n", "0.1.0"],
        ["tandem 12.3.45", "12.3.45"],
        ["tandem v1.2.3", "1.2.3"],
        ["rust-analyzer 1.0.0", null],
        ["", null],
    ];
    for (const [out, want] of cases) assert.equal(parseVersion(out), want, out);
    assert.ok(compareVersions("0.1.0", "0.1.0") === 0);
    assert.ok(compareVersions("0.0.9", "0.1.0") < 0);
    assert.ok(compareVersions("0.10.0", "0.9.9") > 0);
    assert.ok(compareVersions("1.0.0", "0.99.99") > 0);
});

test("durations read as people read them", () => {
    const cases: [number, string][] = [
        [0, "0s"],
        [59.9, "59s"],
        [95, "1m 35s"],
        [3600, "1h 0m"],
        [7322, "2h 2m"],
        [-4, "0s"],
    ];
    for (const [s, want] of cases) assert.equal(formatDuration(s), want, String(s));
});

test("a task's description: state, progress, duration (running: until now)", () => {
    const now = new Date("2026-11-24T10:01:35Z");
    assert.equal(taskDescription(task({ progress: 74.6 }), now), "in progress · 75% · 1m 35s");
    assert.equal(taskDescription(task({ status: "partial_success", duration_seconds: 12 }), now), "partial success · 12s");
});

test("the status bar shows the running task started last, subtasks included", () => {
    const sub = task({ task_id: "01S", name: "Write tests", started_at: "2026-11-24T10:05:00Z", progress: 50, last_message: "Half way" });
    const parent = task({ subtasks: [sub] });
    const done = task({ task_id: "01D", status: "success", started_at: "2026-11-24T11:00:00Z" });
    const ws = [workflow([parent, done])];
    assert.equal(runningTask(ws)?.task_id, "01S");
    assert.equal(statusText(runningTask(ws)!), "Write tests · 50% · Half way");
    assert.equal(statusText(parent), "Setup JWT");
    assert.equal(runningTask([workflow([done])]), undefined);
});

test("a milestone of a known task applies in place; anything else asks for the list", () => {
    const ws = [workflow([task({})])];
    assert.equal(applyTaskChanged(ws, { task_id: "01T", change: "milestone", progress: 75, message: "Running tests" }), true);
    assert.equal(statusText(ws[0].tasks[0]), "Setup JWT · 75% · Running tests");
    // A milestone without a figure keeps the last one.
    assert.equal(applyTaskChanged(ws, { task_id: "01T", change: "milestone", progress: null, message: "Linting" }), true);
    assert.equal(statusText(ws[0].tasks[0]), "Setup JWT · 75% · Linting");
    assert.equal(applyTaskChanged(ws, { task_id: "01NEW", change: "milestone", progress: 5, message: "x" }), false);
    assert.equal(applyTaskChanged(ws, { task_id: "01T", change: "completed" }), false);
});

test("memory results become QuickPick rows", () => {
    const item = memoryItem({ id: "01E", type: "pitfall", title: "Tokens expire", score: 0.9, snippet: "…clock skew…", tags: ["auth", "jwt"] });
    assert.deepEqual(item, { label: "Tokens expire", description: "pitfall · auth, jwt", detail: "…clock skew…", id: "01E" });
    assert.equal(memoryItem({ id: "01F", type: "bug", title: "t", score: 0, snippet: "", tags: [] }).description, "bug");
});

test("prompt messages as Markdown and as text", () => {
    const result = {
        server: "everything",
        prompt: "args-prompt",
        description: "A prompt with arguments",
        messages: [
            { role: "user", content: { type: "text", text: "What's weather in Paris?" } },
            { role: "user", content: { type: "resource", resource: { uri: "test://1", text: "x" } } },
        ],
    };
    assert.equal(
        messagesMarkdown(result),
        [
            "# /everything:args-prompt",
            "",
            "A prompt with arguments",
            "",
            "## user",
            "",
            "What's weather in Paris?",
            "",
            "## user",
            "",
            "```json",
            JSON.stringify(result.messages[1].content, null, 2),
            "```",
            "",
        ].join("\n"),
    );
    assert.equal(messagesText(result), `What's weather in Paris?\n\n${JSON.stringify(result.messages[1].content)}`);
});

test("server errors say the spec's code and message", () => {
    assert.equal(errorText({ message: "x", data: { error: { code: "TASK_NOT_FOUND", message: "no task 01X" } } }), "TASK_NOT_FOUND: no task 01X");
    assert.equal(errorText({ message: "connection closed" }), "connection closed");
    assert.equal(errorText("plain"), "plain");
});
