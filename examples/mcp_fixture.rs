//! `mcp_fixture`: a small downstream MCP server (stdio, rmcp) for the hub's tests and
//! benchmarks, with switches to misbehave. Stdout is the protocol; everything else goes to
//! stderr. Built by `scripts/test` (`cargo build --example mcp_fixture`); the tests find it
//! with `util::fixture_bin()`.
//!
//! Without flags it serves no prompts and three tools (`set_prompts`, `touch_tools`,
//! `echo`). Every prompt text names the server (`--name`), so a test can tell whose prompt
//! came where.
//!
//! Prompts:
//! - `--name NAME`: the server info name (default `fixture`).
//! - `--prompts N`: `prompt-000` .. `prompt-{N-1}`, prompt i with `i % 4` arguments
//!   (`arg0`..`arg2`; `argJ` required when `(i + J) % 3 == 0`) and descriptions. The text
//!   is `prompt-007 from NAME` plus the arguments given (`arg0=x, arg1=y`); a missing
//!   required argument is an invalid-params error.
//! - `--conventional`: the conventional prompts of spec 000, in this list order:
//!   `system_prompt`, `tool_instructions`, `user_prompt`, `User_Prompt` (a second user
//!   prompt, in another case), `assistant_prompt`, `tool_call:memory_index`,
//!   `tool_result:memory_index`, `tool_answer:weather` (listed before its call on purpose),
//!   `tool_call:weather` (the text is exactly `{"function":"weather","args":{"city":"Paris"}}`,
//!   the spec's), and `tool_call:orphan` (no result). The weather answer is
//!   `{"temp":15,"conditions":"sunny","server":"NAME"}`; every other text contains NAME.
//! - `--prompt-args`: `greet` (`name` required, `style` optional), and `completion/complete`:
//!   `style` completes from `formal|casual|pirate` by prefix; `name` from a list that
//!   depends on `context.arguments.style`. Completions are advertised only with this flag
//!   (otherwise `completion/complete` is method-not-found); other arguments complete to `[]`.
//! - `--context-prompt`: `user_prompt` (a conventional prompt) taking `focus` (required) and
//!   `depth` (optional), whose text counts the fetches:
//!   `Context #K from NAME: focus=F, depth=D` (K = 1, 2, ... per `prompts/get`; `depth=-`
//!   when absent). Not with `--conventional`, which has its own `user_prompt`.
//! - `--media`: `media`, one image (a 1×1 PNG) and one embedded text resource.
//! - `--print-env VAR`: `env`, whose text is the value of VAR (an error when VAR is unset).
//! - `--print-cwd`: `cwd`, whose text is the current directory.
//! - `--page-size N`: `prompts/list` and `tools/list` answer N items a page (cursor = the
//!   offset); 0 (the default) answers everything at once.
//!
//! Faults:
//! - `--crash-after N`: exits with status 1, abruptly, once N responses (`initialize`
//!   counts) have been written and flushed to stdout.
//! - `--crash-on-get`: adds a prompt `crash`; `prompts/get` of it exits with status 1.
//! - `--hang-on-get`: adds a prompt `hang`; `prompts/get` of it never answers.
//! - `--delay-ms N`: every request (`initialize` included) is answered N ms late.
//! - `--exit-at-start`: exits with status 1 before reading anything (a server that cannot
//!   start).
//! - `--stderr-noise`: three lines on stderr at start and one per request
//!   (`mcp_fixture NAME: request METHOD`).
//! - `--require-env VAR` (repeatable): exits with status 1 and a message on stderr
//!   (`mcp_fixture: environment variable VAR is required`) when VAR is unset.
//! - `--no-initialize`: reads its stdin to the end and answers nothing (a server that never
//!   answers `initialize`).
//! - `--garbage-lines N`: writes N lines that are not JSON-RPC on stdout
//!   (`garbage K from NAME`), then serves as usual (a server that prints a banner).
//! - `--flood-stderr`: writes lines on stderr without end (`NAME floods stderr: line K`),
//!   from a thread of its own, while it serves as usual.
//! - `--huge-answer-mb N`: a prompt `huge` and a tool `huge` whose answer is one text of
//!   N MiB (`x` repeated), one JSON-RPC line on the wire.
//!
//! List changes (sent to a session opened with `initialize` after its `initialized`
//! notification, and to every `subscriptions/listen` of a 2026-07-28 session that asked for
//! that kind):
//! - tool `set_prompts` `{count?, add?, remove?}`: `count` replaces the generated prompts
//!   by that many, `add` adds prompts of those names (text `NAME says hello from ADDED`),
//!   `remove` removes prompts of any kind by name. It sends
//!   `notifications/prompts/list_changed` *before* its result, so once the call returns the
//!   notification is on the wire. The result's text is the new list of names, as JSON.
//! - tool `touch_tools`: adds a tool `extra-K` (K = 1, 2, ...; calling it answers
//!   `extra-K from NAME`) and sends `notifications/tools/list_changed` before its result.
//! - tool `echo` `{text}`: answers `NAME: text`.
//! - `--tools N`: `tool-000` .. `tool-{N-1}` after the tools above, each with a small
//!   schema (`text`, an optional string) and a description; calling one answers
//!   `tool-007 from NAME`. For the gateway's benchmark (many proxied tools).
//! - `--ref-schemas`: a tool `plot` whose input schema uses `$defs` and `$ref` (a `Point`,
//!   and a recursive `Node` tree), as schemars and many servers write them; calling it
//!   answers its arguments as JSON text.
//! - `--change-every-ms N`: every N ms, replaces the prompt `tick-K` by `tick-{K+1}` (the
//!   first tick adds `tick-1`) and sends `notifications/prompts/list_changed`.
//!
//! Tasks (the MCP tasks extension, SEP-2663), with `--tasks`: the server declares the
//! extension, serves `tasks/get`, `tasks/update` and `tasks/cancel` with rmcp's
//! `TaskManager`, and adds these tools. Each `task_*` tool but `task_log` answers a client
//! that declared the extension with a task (poll interval 10 ms), any other with an
//! `isError` result saying it needs the extension.
//! - `task_steps` `{steps?}` (default 2, at most 10): status message `starting`, then one
//!   step per `tasks/get`: the K-th `tasks/get` moves it to `step K of N` and answers with
//!   it, so every step is seen; the one after ends it with `task_steps from NAME: N steps
//!   done`.
//! - `task_ask`: asks in-task (an `elicitation/create` form, `What is your name?`, field
//!   `name`) and ends with `task_ask from NAME: hello N` (or the action, if not accepted).
//! - `task_after_question`: asks its client first, by a request (`elicitation/create`,
//!   `What is your name?`), then answers with a task that ends at once with
//!   `task_after_question from NAME: hello N` (or the action, if not accepted).
//! - `task_ask_forever`: asks the same question again after each answer (keys `name-1`,
//!   `name-2`, ...), until cancelled.
//! - `task_slow`: waits until cancelled (`tasks/cancel`), then ends `cancelled`.
//! - `task_hostile`: a status message of 10 000 characters with an escape sequence and a
//!   line break; waits until cancelled.
//! - `task_long_id`: a task whose id is 5 000 bytes long (and that `tasks/get` does not
//!   know).
//! - `task_log`: what happened to the tasks so far, one line each (`task_slow started`,
//!   `task_slow polled` at a task's first `tasks/get`, `task_slow cancelled`,
//!   `task_ask answered`, ...).

// Stderr is this fixture's log: tests read it.
#![allow(clippy::print_stderr)]

use std::collections::BTreeSet;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use clap::Parser;
use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ClientNotification,
    ClientRequest, CompleteRequestParams, CompleteResult, CompletionInfo, ContentBlock,
    CreateTaskResult, ErrorData, GetPromptRequestParams, GetPromptResponse, GetPromptResult,
    GetTaskParams, GetTaskResult, Implementation, InputRequest, JsonObject, ListPromptsResult,
    ListToolsResult, PaginatedRequestParams, Prompt, PromptArgument, PromptMessage, Reference,
    Role, ServerCapabilities, ServerConfig, ServerResult, SubscriptionFilter, Task, TaskStatus,
    Tool, UpdateTaskParams,
};
use rmcp::service::{
    NotificationContext, Peer, RequestContext, RoleServer, Service, SubscriptionContext,
    SubscriptionSink,
};
use rmcp::task_manager::{TaskExit, TaskManager, TaskOptions};
use serde_json::{Value, json};
use tokio::io::AsyncWrite;

/// A downstream MCP server for Tandem's tests, with switches to misbehave.
#[derive(Parser, Debug, Clone)]
#[command(name = "mcp_fixture", version)]
struct Args {
    /// The server info name; every prompt text contains it.
    #[arg(long, default_value = "fixture")]
    name: String,
    /// N generated prompts `prompt-000`..., with 0-3 arguments each.
    #[arg(long, default_value_t = 0, value_name = "N")]
    prompts: usize,
    /// The conventional prompts of spec 000 (system_prompt, tool_call:X, ...).
    #[arg(long)]
    conventional: bool,
    /// A prompt `greet` (name required, style optional) with argument completion.
    #[arg(long)]
    prompt_args: bool,
    /// A conventional `user_prompt` with arguments (focus required, depth optional) whose
    /// text counts the fetches.
    #[arg(long, conflicts_with = "conventional")]
    context_prompt: bool,
    /// A prompt `media` returning an image and an embedded resource.
    #[arg(long)]
    media: bool,
    /// A prompt `env` whose text is the value of VAR.
    #[arg(long, value_name = "VAR")]
    print_env: Option<String>,
    /// A prompt `cwd` whose text is the current directory.
    #[arg(long)]
    print_cwd: bool,
    /// Items per page of prompts/list and tools/list (0: all at once).
    #[arg(long, default_value_t = 0, value_name = "N")]
    page_size: usize,
    /// Exit(1) abruptly once N responses (initialize included) are written.
    #[arg(long, value_name = "N")]
    crash_after: Option<usize>,
    /// A prompt `crash` whose prompts/get exits the process.
    #[arg(long)]
    crash_on_get: bool,
    /// A prompt `hang` whose prompts/get never answers.
    #[arg(long)]
    hang_on_get: bool,
    /// Delay every answer by N milliseconds.
    #[arg(long, default_value_t = 0, value_name = "N")]
    delay_ms: u64,
    /// Exit(1) before initialize: a server that cannot start.
    #[arg(long)]
    exit_at_start: bool,
    /// Write lines to stderr at start and on each request.
    #[arg(long)]
    stderr_noise: bool,
    /// A tool `plot` whose input schema uses `$defs`/`$ref` (recursive too).
    #[arg(long)]
    ref_schemas: bool,
    /// N generated tools `tool-000`..., each answering its name.
    #[arg(long, default_value_t = 0, value_name = "N")]
    tools: usize,
    /// Exit(1) with a message on stderr when VAR is unset (repeatable).
    #[arg(long, value_name = "VAR")]
    require_env: Vec<String>,
    /// Change the prompt list every N milliseconds (tick-K), with list_changed.
    #[arg(long, value_name = "N")]
    change_every_ms: Option<u64>,
    /// Read stdin to its end and answer nothing, `initialize` included.
    #[arg(long)]
    no_initialize: bool,
    /// Write N lines that are not JSON-RPC on stdout before serving.
    #[arg(long, default_value_t = 0, value_name = "N")]
    garbage_lines: usize,
    /// Write lines on stderr without end while serving.
    #[arg(long)]
    flood_stderr: bool,
    /// A prompt and a tool `huge` answering one text of N MiB.
    #[arg(long, value_name = "N")]
    huge_answer_mb: Option<usize>,
    /// The tasks extension, and tools that run as tasks (`task_*`).
    #[arg(long)]
    tasks: bool,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    if args.exit_at_start {
        eprintln!(
            "mcp_fixture {}: exiting at start (--exit-at-start)",
            args.name
        );
        return std::process::ExitCode::FAILURE;
    }
    for var in &args.require_env {
        if std::env::var_os(var).is_none() {
            eprintln!("mcp_fixture: environment variable {var} is required");
            return std::process::ExitCode::FAILURE;
        }
    }
    if args.stderr_noise {
        for i in 1..=3 {
            eprintln!("mcp_fixture {}: noise at start {i}/3", args.name);
        }
    }
    if args.no_initialize {
        eprintln!(
            "mcp_fixture {}: answering nothing (--no-initialize)",
            args.name
        );
        for _ in std::io::stdin().lines() {}
        return std::process::ExitCode::SUCCESS;
    }
    if let Err(e) = misbehave(&args) {
        eprintln!("mcp_fixture: {e}");
        return std::process::ExitCode::FAILURE;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match runtime.block_on(serve(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcp_fixture: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// What `--garbage-lines` and `--flood-stderr` write before the server starts.
fn misbehave(args: &Args) -> std::io::Result<()> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    for k in 1..=args.garbage_lines {
        writeln!(stdout, "garbage {k} from {}", args.name)?;
    }
    stdout.flush()?;
    if args.flood_stderr {
        let name = args.name.clone();
        std::thread::spawn(move || {
            let mut stderr = std::io::stderr().lock();
            for k in 1.. {
                if writeln!(stderr, "{name} floods stderr: line {k}").is_err() {
                    return;
                }
            }
        });
    }
    Ok(())
}

async fn serve(args: Args) -> Result<(), String> {
    let fixture = Fixture::new(&args);
    let service = Faults {
        inner: fixture.clone(),
        delay: Duration::from_millis(args.delay_ms),
        noise: args.stderr_noise.then(|| args.name.clone()),
        huge_mb: args.huge_answer_mb,
    };
    let stdout = CrashAfter::new(tokio::io::stdout(), args.crash_after);
    let running = rmcp::ServiceExt::serve(service, (tokio::io::stdin(), stdout))
        .await
        .map_err(|e| format!("the session did not start: {e}"))?;
    if let Some(ms) = args.change_every_ms {
        let fixture = fixture.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_millis(ms.max(1)));
            every.tick().await; // the first tick is immediate
            loop {
                every.tick().await;
                fixture.state.lock().unwrap().tick += 1;
                fixture.notify(Change::Prompts).await;
            }
        });
    }
    let reason = running.waiting().await;
    if args.stderr_noise {
        eprintln!("mcp_fixture {}: session ended: {reason:?}", args.name);
    }
    Ok(())
}

/// The server: its prompt list (which tools change) and who hears of the changes.
#[derive(Clone)]
struct Fixture {
    name: Arc<str>,
    /// Completions are advertised (`--prompt-args`).
    completions: bool,
    page_size: usize,
    /// `prompts/get` of the context prompt so far (`--context-prompt`).
    fetches: Arc<std::sync::atomic::AtomicUsize>,
    state: Arc<Mutex<State>>,
    listeners: Arc<Mutex<Listeners>>,
    /// `--tasks`.
    tasks: Option<Arc<TaskTools>>,
}

/// What changes at run time.
struct State {
    /// The prompts the flags asked for, in list order.
    base: Vec<PromptDef>,
    /// How many `prompt-NNN` there are.
    generated: usize,
    /// Prompts added by `set_prompts`, in order.
    added: Vec<String>,
    /// Names removed by `set_prompts`, of any kind.
    removed: BTreeSet<String>,
    /// The `tick-K` prompt of `--change-every-ms` (0: none yet).
    tick: u64,
    /// How many `extra-K` tools `touch_tools` added.
    extra_tools: usize,
    /// The `plot` tool (`--ref-schemas`).
    ref_schemas: bool,
    /// How many `tool-NNN` there are (`--tools`).
    generated_tools: usize,
    /// The `task_*` tools (`--tasks`).
    tasks: bool,
    /// The size of the `huge` tool's answer, in MiB (`--huge-answer-mb`).
    huge_mb: Option<usize>,
}

/// Who is told of list changes.
#[derive(Default)]
struct Listeners {
    /// The session opened with `initialize`, once it sent `initialized`.
    initialized: Option<Peer<RoleServer>>,
    /// Open `subscriptions/listen` requests (2026-07-28 sessions).
    subscriptions: Vec<SubscriptionSink>,
}

#[derive(Clone, Copy, Debug)]
enum Change {
    Prompts,
    Tools,
}

#[derive(Clone)]
struct PromptDef {
    prompt: Prompt,
    body: Body,
}

/// How a prompt renders.
#[derive(Clone)]
enum Body {
    Text(Role, String),
    Generated,
    Greet,
    Context,
    Media,
    Crash,
    Hang,
    /// `--huge-answer-mb`: one text of that many MiB.
    Huge(usize),
    Env(String),
    Cwd,
}

const STYLES: [&str; 3] = ["formal", "casual", "pirate"];

/// The JSON around the text of a `huge` answer, for a request of it.
fn huge_shape(request: &ClientRequest) -> Option<(&'static str, &'static str)> {
    match request {
        ClientRequest::CallToolRequest(r) if r.params.name == "huge" => {
            Some((r#"{"content":[{"type":"text","text":""#, r#""}]}}"#))
        }
        ClientRequest::GetPromptRequest(r) if r.params.name == "huge" => Some((
            r#"{"messages":[{"role":"user","content":{"type":"text","text":""#,
            r#""}}]}}"#,
        )),
        _ => None,
    }
}

/// Writes one response line whose text is `mb` MiB of `x`, straight to stdout.
fn write_huge(head: &str, tail: &str, mb: usize) -> std::io::Result<()> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(head.as_bytes())?;
    let chunk = [b'x'; 64 * 1024];
    for _ in 0..mb * 16 {
        stdout.write_all(&chunk)?;
    }
    stdout.write_all(tail.as_bytes())?;
    stdout.write_all(b"\n")?;
    stdout.flush()
}

/// The answer of `huge`: `mb` MiB of `x`.
fn huge_text(mb: usize) -> String {
    "x".repeat(mb * 1024 * 1024)
}

/// A 1×1 transparent PNG.
const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0x00, 0x01, 0x00, 0x00,
    0x05, 0x00, 0x01, 0x0d, 0x0a, 0x2d, 0xb4, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae,
    0x42, 0x60, 0x82,
];

fn text_prompt(name: &str, description: &str, role: Role, text: String) -> PromptDef {
    PromptDef {
        prompt: Prompt::new(name, Some(description), None),
        body: Body::Text(role, text),
    }
}

/// The conventional prompts of `--conventional`, in list order: name, description, text
/// (`{server}` is the server's name).
const CONVENTIONAL: [(&str, &str, &str); 10] = [
    (
        "system_prompt",
        "System instructions",
        "System instructions from {server}.",
    ),
    (
        "tool_instructions",
        "How to use the tools",
        "Tool instructions from {server}: call memory_index first.",
    ),
    ("user_prompt", "User context", "User context from {server}."),
    (
        "User_Prompt",
        "More user context, in another case",
        "Second user context from {server}.",
    ),
    (
        "assistant_prompt",
        "Assistant prefill",
        "Assistant prefill from {server}.",
    ),
    (
        "tool_call:memory_index",
        "Simulated call to memory_get_root",
        "Let me check the memory index of {server}.",
    ),
    (
        "tool_result:memory_index",
        "Result of memory_get_root",
        r#"{"success":true,"tool":"memory_get_root","server":"{server}","data":{"id":"root-index","title":"Index","links":["Project A","Ideas"]}}"#,
    ),
    // The answer is listed before its call: pairing must not depend on list order.
    (
        "tool_answer:weather",
        "Simulated weather answer",
        r#"{"temp":15,"conditions":"sunny","server":"{server}"}"#,
    ),
    // Exactly the spec's call.
    (
        "tool_call:weather",
        "Simulated weather call",
        r#"{"function":"weather","args":{"city":"Paris"}}"#,
    ),
    (
        "tool_call:orphan",
        "A call with no result",
        "An orphan call from {server}.",
    ),
];

fn base_prompts(args: &Args) -> Vec<PromptDef> {
    let n = &args.name;
    let mut out = Vec::new();
    if args.conventional {
        for (name, description, text) in CONVENTIONAL {
            let role = if name.starts_with("assistant") || name.starts_with("tool_call") {
                Role::Assistant
            } else {
                Role::User
            };
            out.push(text_prompt(
                name,
                description,
                role,
                text.replace("{server}", n),
            ));
        }
    }
    if args.prompt_args {
        out.push(PromptDef {
            prompt: Prompt::new(
                "greet",
                Some("Greets someone"),
                Some(vec![
                    PromptArgument::new("name")
                        .with_description("Who to greet")
                        .with_required(true),
                    PromptArgument::new("style")
                        .with_description("formal, casual or pirate")
                        .with_required(false),
                ]),
            ),
            body: Body::Greet,
        });
    }
    if args.context_prompt {
        out.push(PromptDef {
            prompt: Prompt::new(
                "user_prompt",
                Some("Context for a focus"),
                Some(vec![
                    PromptArgument::new("focus")
                        .with_description("What to focus on")
                        .with_required(true),
                    PromptArgument::new("depth")
                        .with_description("Level of detail (1-3)")
                        .with_required(false),
                ]),
            ),
            body: Body::Context,
        });
    }
    let print_env = args.print_env.clone();
    let simple = [
        (
            args.media,
            "media",
            "An image and an embedded resource",
            Body::Media,
        ),
        (
            args.crash_on_get,
            "crash",
            "Getting it exits the server",
            Body::Crash,
        ),
        (
            args.hang_on_get,
            "hang",
            "Getting it never answers",
            Body::Hang,
        ),
        (
            print_env.is_some(),
            "env",
            "The value of an environment variable",
            Body::Env(print_env.unwrap_or_default()),
        ),
        (
            args.print_cwd,
            "cwd",
            "The server's current directory",
            Body::Cwd,
        ),
        (
            args.huge_answer_mb.is_some(),
            "huge",
            "One very long text",
            Body::Huge(args.huge_answer_mb.unwrap_or_default()),
        ),
    ];
    for (wanted, name, description, body) in simple {
        if wanted {
            let prompt = Prompt::new(name, Some(description), None);
            out.push(PromptDef { prompt, body });
        }
    }
    out
}

fn generated_prompt(i: usize, server: &str) -> PromptDef {
    let arguments: Vec<PromptArgument> = (0..i % 4)
        .map(|j| {
            PromptArgument::new(format!("arg{j}"))
                .with_description(format!("Argument {j} of prompt {i}"))
                .with_required((i + j).is_multiple_of(3))
        })
        .collect();
    PromptDef {
        prompt: Prompt::new(
            format!("prompt-{i:03}"),
            Some(format!("Generated prompt {i} of {server}")),
            (!arguments.is_empty()).then_some(arguments),
        ),
        body: Body::Generated,
    }
}

impl State {
    /// The prompt list as it is now, in order.
    fn prompts(&self, server: &str) -> Vec<PromptDef> {
        let generated = (0..self.generated).map(|i| generated_prompt(i, server));
        let added = self.added.iter().map(|name| {
            text_prompt(
                name,
                "Added by set_prompts",
                Role::User,
                format!("{server} says hello from {name}"),
            )
        });
        let tick = (self.tick > 0).then(|| {
            let name = format!("tick-{}", self.tick);
            let text = format!("{name} from {server}");
            text_prompt(&name, "Changes by itself", Role::User, text)
        });
        self.base
            .iter()
            .cloned()
            .chain(generated)
            .chain(added)
            .chain(tick)
            .filter(|p| !self.removed.contains(&p.prompt.name))
            .collect()
    }

    fn tools(&self) -> Vec<Tool> {
        let schema = |v: Value| match v {
            Value::Object(m) => Arc::new(m),
            _ => unreachable!("schemas are objects"),
        };
        let mut tools = vec![
            Tool::new(
                "set_prompts",
                "Changes the prompt list and sends notifications/prompts/list_changed",
                schema(json!({
                    "type": "object",
                    "properties": {
                        "count": {"type": "integer", "minimum": 0, "description": "How many generated prompts"},
                        "add": {"type": "array", "items": {"type": "string"}, "description": "Prompt names to add"},
                        "remove": {"type": "array", "items": {"type": "string"}, "description": "Prompt names to remove"},
                    },
                })),
            ),
            Tool::new(
                "touch_tools",
                "Adds a tool and sends notifications/tools/list_changed",
                schema(json!({"type": "object", "properties": {}})),
            ),
            Tool::new(
                "echo",
                "Answers with the text, prefixed by the server name",
                schema(json!({
                    "type": "object",
                    "properties": {"text": {"type": "string"}},
                    "required": ["text"],
                })),
            ),
        ];
        if self.ref_schemas {
            tools.push(Tool::new(
                "plot",
                "Plots a point and a tree (a schema with $defs and $ref)",
                schema(json!({
                    "type": "object",
                    "properties": {
                        "at": {"$ref": "#/$defs/Point", "description": "Where"},
                        "tree": {"$ref": "#/$defs/Node"}
                    },
                    "required": ["at"],
                    "$defs": {
                        "Point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}}, "required": ["x", "y"]},
                        "Node": {"type": "object", "properties": {
                            "label": {"type": "string"},
                            "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}
                        }}
                    }
                })),
            ));
        }
        if self.huge_mb.is_some() {
            tools.push(Tool::new(
                "huge",
                "Answers one very long text",
                schema(json!({"type": "object", "properties": {}})),
            ));
        }
        tools.extend((0..self.generated_tools).map(|i| {
            Tool::new(
                format!("tool-{i:03}"),
                format!("Generated tool {i}: answers its name"),
                schema(json!({
                    "type": "object",
                    "properties": {"text": {"type": "string", "description": "Any text"}},
                })),
            )
        }));
        if self.tasks {
            tools.extend(task_tools());
        }
        tools.extend((1..=self.extra_tools).map(|k| {
            Tool::new(
                format!("extra-{k}"),
                "Added by touch_tools",
                schema(json!({"type": "object", "properties": {}})),
            )
        }));
        tools
    }
}

impl Fixture {
    fn new(args: &Args) -> Fixture {
        Fixture {
            name: args.name.as_str().into(),
            completions: args.prompt_args,
            page_size: args.page_size,
            fetches: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
            state: Arc::new(Mutex::new(State {
                base: base_prompts(args),
                generated: args.prompts,
                added: Vec::new(),
                removed: BTreeSet::new(),
                tick: 0,
                extra_tools: 0,
                ref_schemas: args.ref_schemas,
                generated_tools: args.tools,
                tasks: args.tasks,
                huge_mb: args.huge_answer_mb,
            })),
            listeners: Arc::new(Mutex::new(Listeners::default())),
            tasks: args.tasks.then(|| Arc::new(TaskTools::default())),
        }
    }

    /// Tells every listener that a list changed.
    async fn notify(&self, change: Change) {
        let (peer, sinks) = {
            let l = self.listeners.lock().unwrap();
            (l.initialized.clone(), l.subscriptions.clone())
        };
        if let Some(peer) = peer {
            let sent = match change {
                Change::Prompts => peer.notify_prompt_list_changed().await,
                Change::Tools => peer.notify_tool_list_changed().await,
            };
            if let Err(e) = sent {
                eprintln!(
                    "mcp_fixture {}: {change:?} list_changed not sent: {e}",
                    self.name
                );
            }
        }
        for sink in sinks {
            let wanted = match change {
                Change::Prompts => sink.accepted().prompts_list_changed,
                Change::Tools => sink.accepted().tools_list_changed,
            };
            if wanted != Some(true) {
                continue;
            }
            let sent = match change {
                Change::Prompts => sink.notify_prompt_list_changed().await,
                Change::Tools => sink.notify_tool_list_changed().await,
            };
            if let Err(e) = sent {
                eprintln!(
                    "mcp_fixture {}: {change:?} list_changed not sent to a subscription: {e}",
                    self.name
                );
            }
        }
    }

    fn render(&self, def: &PromptDef, args: &JsonObject) -> Result<GetPromptResult, ErrorData> {
        let server = &*self.name;
        let name = &def.prompt.name;
        let arg = |key: &str| match args.get(key) {
            Some(Value::String(s)) => Some(s.clone()),
            Some(v) => Some(v.to_string()),
            None => None,
        };
        for a in def.prompt.arguments.iter().flatten() {
            if a.required == Some(true) && arg(&a.name).is_none() {
                return Err(ErrorData::invalid_params(
                    format!("prompt {name}: missing required argument {}", a.name),
                    None,
                ));
            }
        }
        let messages = match &def.body {
            Body::Text(role, text) => vec![PromptMessage::new_text(role.clone(), text.clone())],
            Body::Generated => {
                let given: Vec<String> = def
                    .prompt
                    .arguments
                    .iter()
                    .flatten()
                    .filter_map(|a| Some(format!("{}={}", a.name, arg(&a.name)?)))
                    .collect();
                let mut text = format!("{name} from {server}");
                if !given.is_empty() {
                    text.push_str(&format!(" ({})", given.join(", ")));
                }
                vec![PromptMessage::new_text(Role::User, text)]
            }
            Body::Greet => {
                let who = arg("name").unwrap_or_default();
                let text = match arg("style").as_deref() {
                    Some("formal") => format!("Good day, {who}. ({server})"),
                    Some("pirate") => format!("Ahoy, {who}! ({server})"),
                    _ => format!("Hi {who}! ({server})"),
                };
                vec![PromptMessage::new_text(Role::User, text)]
            }
            Body::Context => {
                let k = self
                    .fetches
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
                    + 1;
                let text = format!(
                    "Context #{k} from {server}: focus={}, depth={}",
                    arg("focus").unwrap_or_default(),
                    arg("depth").unwrap_or_else(|| "-".into())
                );
                vec![PromptMessage::new_text(Role::User, text)]
            }
            Body::Media => vec![
                PromptMessage::new_text(Role::User, format!("Media from {server}:")),
                PromptMessage::new_image(Role::User, PNG, "image/png", None, None),
                PromptMessage::new_resource(
                    Role::User,
                    format!("fixture://{server}/readme.txt"),
                    Some("text/plain".into()),
                    Some(format!("An embedded resource of {server}.")),
                    None,
                    None,
                    None,
                ),
            ],
            Body::Crash => {
                eprintln!("mcp_fixture {server}: crashing on prompts/get crash");
                std::process::exit(1);
            }
            Body::Hang => unreachable!("hang is answered by never answering"),
            Body::Huge(mb) => vec![PromptMessage::new_text(Role::User, huge_text(*mb))],
            Body::Env(var) => {
                let value = std::env::var(var).map_err(|_| {
                    ErrorData::internal_error(format!("{var} is not set in {server}"), None)
                })?;
                vec![PromptMessage::new_text(Role::User, value)]
            }
            Body::Cwd => {
                let dir = std::env::current_dir()
                    .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
                vec![PromptMessage::new_text(
                    Role::User,
                    dir.display().to_string(),
                )]
            }
        };
        let description = def.prompt.description.clone().unwrap_or_default();
        Ok(GetPromptResult::new(messages).with_description(description))
    }

    /// `items` from the request's cursor on, a page at a time.
    fn page<T>(
        &self,
        items: Vec<T>,
        request: Option<&PaginatedRequestParams>,
    ) -> Result<(Vec<T>, Option<String>), ErrorData> {
        let start = match request.and_then(|r| r.cursor.as_deref()) {
            None => 0,
            Some(c) => c
                .parse::<usize>()
                .map_err(|_| ErrorData::invalid_params(format!("bad cursor {c:?}"), None))?,
        };
        if self.page_size == 0 {
            return Ok((items, None));
        }
        let end = (start + self.page_size).min(items.len());
        let next = (end < items.len()).then(|| end.to_string());
        Ok((
            items
                .into_iter()
                .skip(start)
                .take(end.saturating_sub(start))
                .collect(),
            next,
        ))
    }

    fn complete_greet(&self, request: &CompleteRequestParams) -> Vec<String> {
        let prefix = request.argument.value.to_lowercase();
        let candidates: &[&str] = match request.argument.name.as_str() {
            "style" => &STYLES,
            "name" => match request
                .context
                .as_ref()
                .and_then(|c| c.get_argument("style"))
                .map(String::as_str)
            {
                Some("formal") => &["Dr. Watson", "Madam President", "Sir Lancelot"],
                Some("pirate") => &["Anne Bonny", "Blackbeard", "Long John Silver"],
                _ => &["Alice", "Bob", "Carol"],
            },
            _ => &[],
        };
        candidates
            .iter()
            .filter(|c| c.to_lowercase().starts_with(&prefix))
            .map(|c| c.to_string())
            .collect()
    }

    fn call(
        &self,
        name: &str,
        args: &JsonObject,
    ) -> Result<(CallToolResult, Option<Change>), ErrorData> {
        let text = |s: String| CallToolResult::success(vec![ContentBlock::text(s)]);
        let mut state = self.state.lock().unwrap();
        match name {
            "set_prompts" => {
                if let Some(count) = args.get("count") {
                    let count = count.as_u64().ok_or_else(|| {
                        ErrorData::invalid_params("count must be a non-negative integer", None)
                    })?;
                    state.generated = count as usize;
                }
                let names = |key: &str| -> Result<Vec<String>, ErrorData> {
                    match args.get(key) {
                        None => Ok(Vec::new()),
                        Some(v) => serde_json::from_value(v.clone()).map_err(|_| {
                            ErrorData::invalid_params(
                                format!("{key} must be a list of names"),
                                None,
                            )
                        }),
                    }
                };
                for name in names("remove")? {
                    state.added.retain(|a| *a != name);
                    state.removed.insert(name);
                }
                for name in names("add")? {
                    // A removed prompt comes back where it was; a new name goes last.
                    state.removed.remove(&name);
                    if !state
                        .prompts(&self.name)
                        .iter()
                        .any(|p| p.prompt.name == name)
                    {
                        state.added.push(name);
                    }
                }
                let names: Vec<String> = state
                    .prompts(&self.name)
                    .into_iter()
                    .map(|p| p.prompt.name)
                    .collect();
                Ok((text(json!(names).to_string()), Some(Change::Prompts)))
            }
            "touch_tools" => {
                state.extra_tools += 1;
                let added = format!("extra-{}", state.extra_tools);
                Ok((text(added), Some(Change::Tools)))
            }
            "huge" if state.huge_mb.is_some() => {
                Ok((text(huge_text(state.huge_mb.unwrap_or_default())), None))
            }
            "plot" if state.ref_schemas => {
                Ok((text(Value::Object(args.clone()).to_string()), None))
            }
            "echo" => {
                let said = args
                    .get("text")
                    .and_then(Value::as_str)
                    .ok_or_else(|| ErrorData::invalid_params("echo needs a string `text`", None))?;
                Ok((text(format!("{}: {said}", self.name)), None))
            }
            generated
                if generated
                    .strip_prefix("tool-")
                    .and_then(|k| k.parse::<usize>().ok())
                    .is_some_and(|k| {
                        k < state.generated_tools && generated == format!("tool-{k:03}")
                    }) =>
            {
                Ok((text(format!("{generated} from {}", self.name)), None))
            }
            extra
                if extra
                    .strip_prefix("extra-")
                    .and_then(|k| k.parse::<usize>().ok())
                    .is_some_and(|k| k >= 1 && k <= state.extra_tools) =>
            {
                Ok((text(format!("{extra} from {}", self.name)), None))
            }
            _ => Err(ErrorData::invalid_params(
                format!("unknown tool {name}"),
                None,
            )),
        }
    }
}

impl ServerHandler for Fixture {
    fn get_info(&self) -> ServerConfig {
        let mut capabilities = ServerCapabilities::builder()
            .enable_completions()
            .enable_prompts()
            .enable_prompts_list_changed()
            .enable_tools()
            .enable_tool_list_changed()
            .build();
        if !self.completions {
            capabilities.completions = None;
        }
        if self.tasks.is_some() {
            capabilities
                .extensions
                .get_or_insert_with(Default::default)
                .insert(
                    rmcp::model::TASKS_EXTENSION_ID.to_string(),
                    JsonObject::new(),
                );
        }
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new(&*self.name, env!("CARGO_PKG_VERSION")))
            .with_instructions(format!("mcp_fixture {}: a test server.", self.name))
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.listeners.lock().unwrap().initialized = Some(context.peer);
    }

    fn accepted_subscription_filter(
        &self,
        _requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(
            SubscriptionFilter::builder()
                .prompts_list_changed()
                .tools_list_changed()
                .build(),
        )
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let id = context.sink().id().clone();
        self.listeners
            .lock()
            .unwrap()
            .subscriptions
            .push(context.sink().clone());
        context.cancelled().await;
        self.listeners
            .lock()
            .unwrap()
            .subscriptions
            .retain(|s| *s.id() != id);
        Ok(())
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let prompts = self.state.lock().unwrap().prompts(&self.name);
        let (page, next) = self.page(
            prompts.into_iter().map(|p| p.prompt).collect(),
            request.as_ref(),
        )?;
        let mut result = ListPromptsResult::with_all_items(page);
        result.next_cursor = next;
        Ok(result)
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let def = self
            .state
            .lock()
            .unwrap()
            .prompts(&self.name)
            .into_iter()
            .find(|p| p.prompt.name == request.name);
        let Some(def) = def else {
            return Err(ErrorData::invalid_params(
                format!("unknown prompt {}", request.name),
                None,
            ));
        };
        if let Body::Hang = def.body {
            eprintln!("mcp_fixture {}: hanging on prompts/get hang", self.name);
            std::future::pending::<()>().await;
        }
        let args = request.arguments.unwrap_or_default();
        self.render(&def, &args).map(Into::into)
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        if !self.completions {
            return Err(ErrorData::method_not_found::<
                rmcp::model::CompleteRequestMethod,
            >());
        }
        let values = match &request.r#ref {
            Reference::Prompt(p) => {
                let known = self
                    .state
                    .lock()
                    .unwrap()
                    .prompts(&self.name)
                    .iter()
                    .any(|d| d.prompt.name == p.name);
                if !known {
                    return Err(ErrorData::invalid_params(
                        format!("unknown prompt {}", p.name),
                        None,
                    ));
                }
                if p.name == "greet" {
                    self.complete_greet(&request)
                } else {
                    Vec::new()
                }
            }
            _ => Vec::new(),
        };
        let info = CompletionInfo::new(values).map_err(|e| ErrorData::internal_error(e, None))?;
        Ok(CompleteResult::new(info))
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self.state.lock().unwrap().tools();
        let (page, next) = self.page(tools, request.as_ref())?;
        let mut result = ListToolsResult::with_all_items(page);
        result.next_cursor = next;
        Ok(result)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        if let Some(tasks) = &self.tasks
            && request.name.starts_with("task_")
        {
            let takes = context
                .client_capabilities()
                .is_some_and(|c| c.supports_tasks());
            if request.name == "task_after_question" && takes {
                return tasks.after_question(&self.name, &context.peer).await;
            }
            return tasks.call(&self.name, &request.name, &args, takes);
        }
        let (result, change) = self.call(&request.name, &args)?;
        if let Some(change) = change {
            // Before the result: once the call returns, the notification is on the wire.
            self.notify(change).await;
        }
        Ok(result.into())
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let tasks = self.tasks.as_ref().ok_or_else(no_tasks)?;
        tasks.step(&request.task_id).await;
        Ok(GetTaskResult::new(
            tasks.manager.get_task(&request.task_id)?,
        ))
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let tasks = self.tasks.as_ref().ok_or_else(no_tasks)?;
        tasks
            .manager
            .update_task(&request.task_id, request.input_responses)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let tasks = self.tasks.as_ref().ok_or_else(no_tasks)?;
        tasks.manager.cancel_task(&request.task_id)
    }
}

fn no_tasks() -> ErrorData {
    ErrorData::method_not_found::<rmcp::model::GetTaskMethod>()
}

/// The `task_*` tools (`--tasks`).
fn task_tools() -> Vec<Tool> {
    let empty = || Arc::new(JsonObject::new());
    let steps = json!({
        "type": "object",
        "properties": {"steps": {"type": "integer", "minimum": 0, "maximum": 10}},
    });
    let Value::Object(steps) = steps else {
        unreachable!("a schema is an object")
    };
    vec![
        Tool::new(
            "task_steps",
            "Runs as a task: one step per tasks/get",
            Arc::new(steps),
        ),
        Tool::new("task_ask", "Runs as a task that asks for a name", empty()),
        Tool::new(
            "task_after_question",
            "Asks for a name, then runs as a task",
            empty(),
        ),
        Tool::new(
            "task_ask_forever",
            "Runs as a task that asks without end",
            empty(),
        ),
        Tool::new("task_slow", "Runs as a task until cancelled", empty()),
        Tool::new(
            "task_hostile",
            "Runs as a task with a hostile status message",
            empty(),
        ),
        Tool::new(
            "task_long_id",
            "Answers with a task whose id is too long",
            empty(),
        ),
        Tool::new("task_log", "What happened to the tasks so far", empty()),
    ]
}

/// The tasks of `--tasks`: rmcp's manager, the gates of `task_steps`, and a log.
#[derive(Default)]
struct TaskTools {
    manager: TaskManager,
    /// The gates of each `task_steps` task, by task id.
    steps: Mutex<std::collections::HashMap<String, Arc<Steps>>>,
    /// The tool of each task not polled yet, by task id.
    unpolled: Mutex<std::collections::HashMap<String, String>>,
    log: Arc<Mutex<Vec<String>>>,
}

/// One `task_steps` task's gates: a `tasks/get` opens `go` and waits for `done`.
struct Steps {
    go: tokio::sync::Semaphore,
    done: tokio::sync::Semaphore,
    finished: std::sync::atomic::AtomicBool,
}

impl TaskTools {
    fn call(
        &self,
        server: &str,
        tool: &str,
        args: &JsonObject,
        takes_tasks: bool,
    ) -> Result<CallToolResponse, ErrorData> {
        let text = |s: String| CallToolResult::success(vec![ContentBlock::text(s)]);
        if tool == "task_log" {
            let log = self.log.lock().unwrap().join("\n");
            return Ok(text(log).into());
        }
        if !takes_tasks {
            let why = format!("{tool} runs as a task: it needs the tasks extension");
            return Ok(CallToolResult::error(vec![ContentBlock::text(why)]).into());
        }
        let options = TaskOptions::new().with_poll_interval_ms(10);
        let (server, log) = (server.to_string(), self.log.clone());
        let task = match tool {
            "task_steps" => {
                let n = args
                    .get("steps")
                    .and_then(Value::as_u64)
                    .unwrap_or(2)
                    .min(10);
                let steps = Arc::new(Steps {
                    go: tokio::sync::Semaphore::new(0),
                    done: tokio::sync::Semaphore::new(0),
                    finished: Default::default(),
                });
                let gates = steps.clone();
                let task = self
                    .manager
                    .spawn(options.with_status_message("starting"), |ctx| {
                        Box::pin(async move {
                            for k in 1..=n {
                                gates.go.acquire().await.map_err(gone)?.forget();
                                ctx.set_status_message(format!("step {k} of {n}"));
                                gates.done.add_permits(1);
                            }
                            gates.go.acquire().await.map_err(gone)?.forget();
                            gates
                                .finished
                                .store(true, std::sync::atomic::Ordering::SeqCst);
                            gates.done.add_permits(1);
                            Ok(text(format!("task_steps from {server}: {n} steps done")))
                        })
                    });
                self.steps
                    .lock()
                    .unwrap()
                    .insert(task.task_id.clone(), steps);
                task
            }
            "task_ask_forever" => self.manager.spawn(options, |ctx| {
                Box::pin(async move {
                    for k in 1.. {
                        if let Err(e) = ctx.request_input(format!("name-{k}"), ask_name()?).await {
                            log.lock()
                                .unwrap()
                                .push("task_ask_forever cancelled".into());
                            return Err(e);
                        }
                    }
                    unreachable!("it asks forever")
                })
            }),
            "task_ask" => self.manager.spawn(options, |ctx| {
                Box::pin(async move {
                    let answer = ctx.request_input("name", ask_name()?).await?;
                    log.lock().unwrap().push("task_ask answered".into());
                    let said = match answer["action"].as_str() {
                        Some("accept") => {
                            format!(
                                "hello {}",
                                answer["content"]["name"].as_str().unwrap_or("?")
                            )
                        }
                        other => other.unwrap_or("no action").to_string(),
                    };
                    Ok(text(format!("task_ask from {server}: {said}")))
                })
            }),
            "task_slow" | "task_hostile" => {
                let options = if tool == "task_hostile" {
                    let hostile = format!("\u{1b}[31mevil\nline {}", "x".repeat(10_000));
                    options.with_status_message(hostile)
                } else {
                    options.with_status_message("waiting to be cancelled")
                };
                let tool = tool.to_string();
                self.manager.spawn(options, |ctx| {
                    Box::pin(async move {
                        log.lock().unwrap().push(format!("{tool} started"));
                        ctx.cancelled().await;
                        log.lock().unwrap().push(format!("{tool} cancelled"));
                        Err(TaskExit::Cancelled)
                    })
                })
            }
            "task_long_id" => {
                let now = rmcp::task_manager::current_timestamp();
                Task::new("x".repeat(5000), TaskStatus::Working, now.clone(), now)
            }
            other => {
                return Err(ErrorData::invalid_params(
                    format!("unknown tool {other}"),
                    None,
                ));
            }
        };
        let unpolled = (task.task_id.clone(), tool.to_string());
        self.unpolled.lock().unwrap().insert(unpolled.0, unpolled.1);
        Ok(CallToolResponse::Task(CreateTaskResult::new(task)))
    }

    /// The first `tasks/get` of a task is logged (`TOOL polled`); one of a `task_steps`
    /// task moves it one step, and waits for the step.
    async fn step(&self, task_id: &str) {
        if let Some(tool) = self.unpolled.lock().unwrap().remove(task_id) {
            self.log.lock().unwrap().push(format!("{tool} polled"));
        }
        let Some(steps) = self.steps.lock().unwrap().get(task_id).cloned() else {
            return;
        };
        if steps.finished.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        steps.go.add_permits(1);
        if let Ok(permit) = steps.done.acquire().await {
            permit.forget();
        }
    }
}

impl TaskTools {
    /// `task_after_question`: the client's answer first, then a task that ends with it.
    async fn after_question(
        &self,
        server: &str,
        peer: &Peer<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let InputRequest::Elicitation(question) = ask_name()? else {
            unreachable!("ask_name is a form")
        };
        let answer = peer
            .create_elicitation(question.params)
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let said = match (&answer.action, &answer.content) {
            (rmcp::model::ElicitationAction::Accept, Some(content)) => {
                format!("hello {}", content["name"].as_str().unwrap_or("?"))
            }
            (action, _) => format!("{action:?}").to_lowercase(),
        };
        let text = format!("task_after_question from {server}: {said}");
        let task = self.manager.spawn(TaskOptions::new(), |_| {
            Box::pin(async move { Ok(CallToolResult::success(vec![ContentBlock::text(text)])) })
        });
        Ok(rmcp::model::CreateTaskResult::new(task).into())
    }
}

/// The question of `task_ask`: a form with a name.
fn ask_name() -> Result<InputRequest, ErrorData> {
    serde_json::from_value(json!({
        "method": "elicitation/create",
        "params": {
            "message": "What is your name?",
            "requestedSchema": {
                "type": "object",
                "properties": {"name": {"type": "string"}},
                "required": ["name"]
            }
        }
    }))
    .map_err(|e| ErrorData::internal_error(e.to_string(), None))
}

fn gone(_: tokio::sync::AcquireError) -> TaskExit {
    TaskExit::Error(ErrorData::internal_error("the task's gate closed", None))
}

/// The fixture behind `--delay-ms` and `--stderr-noise`, which apply to every request.
struct Faults {
    inner: Fixture,
    delay: Duration,
    /// The server name, when each request is to be noted on stderr.
    noise: Option<String>,
    /// `--huge-answer-mb`.
    huge_mb: Option<usize>,
}

impl Service<RoleServer> for Faults {
    async fn handle_request(
        &self,
        request: ClientRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<ServerResult, ErrorData> {
        if let Some(name) = &self.noise {
            eprintln!("mcp_fixture {name}: request {}", request.method());
        }
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        if let (Some(mb), Some((head, tail))) = (self.huge_mb, huge_shape(&request)) {
            // Written here, as it is made: rmcp would build the whole line first, which a
            // debug build takes far too long to do for 100 MiB.
            let id = serde_json::to_string(&context.id).unwrap_or_default();
            let head = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{head}"#);
            let written = tokio::task::spawn_blocking(move || write_huge(&head, tail, mb)).await;
            eprintln!("mcp_fixture: huge answer ended: {written:?}");
            std::future::pending::<()>().await;
        }
        Service::handle_request(&self.inner, request, context).await
    }

    async fn handle_notification(
        &self,
        notification: ClientNotification,
        context: NotificationContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Service::handle_notification(&self.inner, notification, context).await
    }

    fn get_info(&self) -> ServerConfig {
        ServerHandler::get_info(&self.inner)
    }
}

/// Stdout that exits the process once `limit` responses have been written and flushed
/// (`--crash-after`). It sees every byte rmcp writes; a line is a response when it has an
/// `id` and a `result` or an `error`.
struct CrashAfter<W> {
    inner: W,
    limit: Option<usize>,
    answered: usize,
    line: Vec<u8>,
    armed: bool,
}

impl<W> CrashAfter<W> {
    fn new(inner: W, limit: Option<usize>) -> CrashAfter<W> {
        CrashAfter {
            inner,
            limit,
            answered: 0,
            line: Vec::new(),
            armed: false,
        }
    }

    fn observe(&mut self, written: &[u8]) {
        let Some(limit) = self.limit else { return };
        for &b in written {
            if b != b'\n' {
                self.line.push(b);
                continue;
            }
            let message: Value = serde_json::from_slice(&self.line).unwrap_or(Value::Null);
            self.line.clear();
            let is_response = message.get("id").is_some()
                && (message.get("result").is_some() || message.get("error").is_some());
            if is_response {
                self.answered += 1;
                self.armed |= self.answered >= limit;
            }
        }
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for CrashAfter<W> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let n = ready!(Pin::new(&mut this.inner).poll_write(cx, buf))?;
        this.observe(&buf[..n]);
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        ready!(Pin::new(&mut this.inner).poll_flush(cx))?;
        if this.armed {
            eprintln!(
                "mcp_fixture: crashing after {} responses (--crash-after)",
                this.answered
            );
            std::process::exit(1);
        }
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
