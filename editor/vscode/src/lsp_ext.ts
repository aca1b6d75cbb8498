// The LSP face's extensions, as `docs/lsp-extensions.md` documents them and `src/lsp/` serves
// them (Rust): the custom requests and notifications (`commands.rs`, `follow.rs`), the
// `workspace/executeCommand` commands (the table in `commands.rs`) and the JSON they answer
// (`crates/core/src/tasks/records.rs`, `crates/core/src/memory/api.rs`, `crates/core/src/hub/`). Only what this extension reads is
// typed here; keep it in step with those files.

/// `tandem/document` (`commands.rs`): a memory entry or a task record as Markdown.
export const DOCUMENT = "tandem/document";
export interface DocumentParams {
    uri: string;
}
export interface DocumentResult {
    uri: string;
    title: string;
    filetype: string;
    text: string;
}

/// `tandem/status` (`commands.rs`).
export const STATUS = "tandem/status";
export interface StatusResult {
    version: string;
    pid: number;
    home: string;
    log_file: string;
    workspace: string;
    daemon: boolean;
    focus_task: string | null;
}

/// `tandem/inject` (`prompts.rs`): the conventional prompts' injection.
export const INJECT = "tandem/inject";
export interface InjectResult {
    total_tokens: number;
    warnings: string[];
    preview: string;
}

/// `tandem/taskChanged` (server → client, `follow.rs`): one per event of a task of the
/// workspace.
export const TASK_CHANGED = "tandem/taskChanged";
export interface TaskChanged {
    task_id: string;
    change: "started" | "decision" | "issue" | "milestone" | "completed";
    progress?: number | null;
    message?: string;
    requires_human_review?: boolean;
}

/// `tandem/promptsChanged` (server → client, `follow.rs`).
export const PROMPTS_CHANGED = "tandem/promptsChanged";

/// `tandem/question` (server → client, `follow.rs`): a downstream server's question that no
/// agent can take, answered with `tandem.answer`.
export const QUESTION = "tandem/question";
export interface Question {
    id: string;
    server: string;
    message: string;
    schema: { properties?: Record<string, QuestionField>; required?: string[] };
}
export interface QuestionField {
    type?: string;
    title?: string;
    description?: string;
    default?: unknown;
    enum?: unknown[];
    enumNames?: string[];
    oneOf?: { const?: unknown; title?: string }[];
    anyOf?: { const?: unknown; title?: string }[];
    items?: QuestionField;
}

/// The `workspace/executeCommand` commands this extension runs or intercepts (`commands.rs`).
export const Cmd = {
    tasksList: "tandem.tasks.list",
    taskShow: "tandem.task.show",
    taskDecisions: "tandem.task.decisions",
    memorySearch: "tandem.memory.search",
    memorySaveSelection: "tandem.memory.saveSelection",
    dismiss: "tandem.diagnostics.dismiss",
    promptsList: "tandem.prompts.list",
    promptRun: "tandem.prompt.run",
    promptComplete: "tandem.prompt.complete",
    promptParse: "tandem.prompt.parse",
    servers: "tandem.servers",
    serversLogin: "tandem.servers.login",
    serversLogout: "tandem.servers.logout",
    trust: "tandem.trust",
    answer: "tandem.answer",
} as const;

/// `TaskRecord` (`crates/core/src/tasks/records.rs`).
export interface TaskRecord {
    task_id: string;
    workflow_id: string;
    parent_task_id: string | null;
    name: string;
    goal: string;
    status: "running" | "success" | "partial_success" | "failed";
    started_at: string;
    completed_at: string | null;
    duration_seconds: number;
    progress: number | null;
    last_message: string | null;
    subtasks: TaskRecord[];
}

/// `WorkflowRecord` (`crates/core/src/tasks/records.rs`).
export interface WorkflowRecord {
    workflow_id: string;
    name: string;
    description: string | null;
    created_at: string;
    tasks: TaskRecord[];
    /// Older top-level tasks a limited list leaves out (absent when none).
    omitted_tasks?: number;
}

/// `SearchOutcome` (`crates/core/src/memory/api.rs`), the answer of `tandem.memory.search`.
export interface SearchOutcome {
    query: string;
    total: number;
    results: SearchResult[];
}
export interface SearchResult {
    id: string;
    type: string;
    title: string;
    score: number;
    snippet: string;
    tags: string[];
}

/// An item of `tandem.prompts.list` (`crates/core/src/hub/`).
export interface PromptInfo {
    server: string;
    name: string;
    command: string;
    title?: string | null;
    description?: string | null;
    arguments: { name: string; description?: string | null; required: boolean }[];
    remembered?: boolean;
}

/// An item of `tandem.prompt.complete`.
export interface Completion {
    label: string;
    insert_text: string;
    kind: "command" | "argument" | "value";
    detail?: string | null;
}

/// The answer of `tandem.prompt.parse`.
export interface ParsedCommand {
    server: string;
    prompt: string;
    command: string;
    arguments: Record<string, string>;
    line: string;
}

/// The answer of `tandem.prompt.run`: MCP's `prompts/get` messages, content as MCP gives it.
export interface PromptMessages {
    server: string;
    prompt: string;
    description?: string | null;
    messages: { role: string; content: PromptContent }[];
}
export type PromptContent =
    | { type: "text"; text: string }
    | { type: "resource"; resource: { uri: string; text?: string; mimeType?: string } }
    | { type: string; [key: string]: unknown };

/// The answer of `tandem.servers` (`crates/core/src/hub/mod.rs`); each server as `hub/client/server.rs` reports it.
export interface ServersReport {
    workspace: string;
    files: string[];
    errors: string[];
    servers: ServerState[];
}
export interface ServerState {
    name: string;
    state?: string;
    /// The command line it runs, or the URL of a remote server.
    runs?: string | null;
    last_error?: string | null;
    [field: string]: unknown;
}
/// The state of a server that waits for the user to sign in (`hub/client/server.rs`).
export const NEEDS_SIGN_IN = "needs_sign_in";

/// The answer of `tandem.servers.login` (`SignInReport`, `crates/core/src/hub/mod.rs`): with
/// `{name}`, once the URL to approve at is known; with `{name, wait: true, attempt}`, once
/// signed in and connected.
export interface SignInReport {
    server: string;
    attempt: number;
    url?: string;
    status: string;
    server_info?: string;
    tools: number;
}

/// The answer of `tandem.servers.logout`.
export interface SignOutReport {
    server: string;
    forgot: boolean;
}

/// The answer of `tandem.trust`.
export interface TrustReport {
    file: string | null;
    sha256: string | null;
    trusted: boolean;
    servers: { name: string; runs: string | null; error?: string | null }[];
    done: string | null;
}

/// The memory's entry types (`crates/core/src/memory/records.rs`), as `tandem.memory.saveSelection` takes them.
export const ENTRY_TYPES = ["pattern", "pitfall", "decision", "bug", "config", "reference"] as const;
