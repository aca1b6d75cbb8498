//! Conventional prompts injection (spec 000): downstream servers' prompts named
//! `system_prompt`, `tool_instructions`, `user_prompt`, `assistant_prompt`, `tool_call:X` and
//! `tool_result:X` / `tool_answer:X` become the OpenAI-format messages that open a
//! conversation, with their token counts and a readable preview.
//!
//! Pure: the hub fetches the prompts (and decides which are enabled, with which arguments and
//! priorities); this module only orders and renders them.
//!
//! # Order (the spec's)
//!
//! 1. one `system` message: every `system_prompt`, each as
//!    `[System instructions from Server: NAME]\n{text}`, joined by `\n\n---\n\n`;
//! 2. then, in the same message and with the same separator, every `tool_instructions` as
//!    `[Tool instructions from Server: NAME]\n{text}` (after all system prompts, so that a
//!    server's tool notes never split the instructions);
//! 3. the thread's own system prompt appended as `\n\n---\n\n[Thread System Prompt]\n{text}`,
//!    or, when no server gave a system text, a `system` message of its own holding just it;
//! 4. every `user_prompt` as a `user` message;
//! 5. every `tool_call:X` paired with the `tool_result:X` (or `tool_answer:X`) of the same
//!    server (X compared case-insensitively): an `assistant` message carrying a `tool_calls`
//!    entry, then the `tool` message answering it. The call's text is either the call itself,
//!    as JSON (`{"function": "weather", "args": {...}}`, content null), or the assistant's words
//!    (content) before calling X with `"{}"`. The `tool` message's `name` is the called
//!    function's (X unless the call's JSON names another), its content the result's text,
//!    compacted when it is a JSON object or array (as the spec shows it). The id is X, or
//!    `server__X` when several pairs call X. An unpaired call or result is not sent, and
//!    [`Injection::warnings`] says so;
//! 6. every `assistant_prompt` as an `assistant` message.
//!
//! Within each step, prompts go by [`Fetched::priority`] (lower first), ties in input order.
//! A pair goes at its call's place. A text that is empty (or only whitespace) is not sent,
//! with a warning, except a tool call's or result's, which are meaningful empty.
//!
//! # Tokens
//!
//! Counted with OpenAI's `o200k_base` encoding (GPT-4o, GPT-4.1, o-series and later), through
//! `tiktoken-rs` (which brings two small crates, `fancy-regex` and `base64`, beside ones
//! already in the graph), with the vocabulary packed by [`super::vocabulary`]. `bpe-openai`, the faster
//! alternative, serialises all three of its vocabularies in a build script (a longer build)
//! and links a 32 MB table for `o200k_base` alone; the prompts injected here are a few
//! kilobytes, which tiktoken-rs counts quickly once loaded (the first count loads the
//! vocabulary: `benches/hub.rs` prints how long). Other models' tokenizers differ: the counts
//! are a close estimate for them.
//!
//! What is counted is the text a message carries: its content, and each tool call's name and
//! arguments. Roles, ids and JSON punctuation (a few tokens per message, depending on the
//! API) are not. A source's count is that of the text it put in its message (its section with
//! its header, for system texts); a message's count is that of its whole text, separators
//! included, and [`Injection::total_tokens`] is the sum over messages.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tiktoken_rs::CoreBPE;

use crate::hub::scan;

/// What a conventional prompt's name says it is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Kind {
    SystemPrompt,
    ToolInstructions,
    UserPrompt,
    AssistantPrompt,
    /// `tool_call:X`: X, the simulated tool, as written.
    ToolCall(String),
    /// `tool_result:X` or `tool_answer:X`.
    ToolResult(String),
}

impl Kind {
    /// The kind's conventional name: `system_prompt`, `tool_instructions`, `user_prompt`,
    /// `assistant_prompt`, `tool_call` or `tool_result` (without the tool).
    pub fn name(&self) -> &'static str {
        match self {
            Kind::SystemPrompt => "system_prompt",
            Kind::ToolInstructions => "tool_instructions",
            Kind::UserPrompt => "user_prompt",
            Kind::AssistantPrompt => "assistant_prompt",
            Kind::ToolCall(_) => "tool_call",
            Kind::ToolResult(_) => "tool_result",
        }
    }
}

/// The kind a prompt's name gives it, if it follows the convention: case-insensitive, spaces
/// around ignored; `tool_call:X`, `tool_result:X` and `tool_answer:X` keep X as written (case
/// included, spaces around removed), and X must not be empty.
pub fn detect(prompt_name: &str) -> Option<Kind> {
    let name = prompt_name.trim();
    for (exact, kind) in [
        ("system_prompt", Kind::SystemPrompt),
        ("tool_instructions", Kind::ToolInstructions),
        ("user_prompt", Kind::UserPrompt),
        ("assistant_prompt", Kind::AssistantPrompt),
    ] {
        if name.eq_ignore_ascii_case(exact) {
            return Some(kind);
        }
    }
    let tool = |prefix: &str| {
        let head = name.get(..prefix.len())?;
        let tool = name[prefix.len()..].trim();
        (head.eq_ignore_ascii_case(prefix) && !tool.is_empty()).then(|| tool.to_owned())
    };
    if let Some(tool) = tool("tool_call:") {
        return Some(Kind::ToolCall(tool));
    }
    tool("tool_result:")
        .or_else(|| tool("tool_answer:"))
        .map(Kind::ToolResult)
}

/// A conventional prompt the hub got from a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// The server's name.
    pub server: String,
    /// The prompt's full name, as the server lists it.
    pub prompt: String,
    pub kind: Kind,
    /// The text content of the prompt's messages, joined with `"\n\n"`.
    pub text: String,
    /// Lower goes first within its step; ties keep input order.
    pub priority: i64,
}

/// A chat message in OpenAI's format: `role`, `content` (a string or null), and, when
/// present, `tool_calls`, `tool_call_id` and `name`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: Role,
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

/// An assistant's tool call: `{"id", "type": "function", "function": {"name", "arguments"}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: ToolCallKind,
    pub function: FunctionCall,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolCallKind {
    Function,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionCall {
    pub name: String,
    /// The arguments as a JSON text (OpenAI's convention), `"{}"` when none.
    pub arguments: String,
}

/// The messages to open a conversation with, where their tokens come from, and what was left
/// out. Its JSON is what editors and `tandem inject --json` get.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Injection {
    pub messages: Vec<ChatMessage>,
    /// Every prompt that went into a message, in message order.
    pub sources: Vec<Source>,
    /// The sum of the messages' tokens (see the module's doc for what is counted).
    pub total_tokens: usize,
    /// What was not sent, and why: unpaired tool calls and results, empty texts; and tool
    /// names an API may refuse.
    pub warnings: Vec<String>,
    /// When the request gave its conversation: `messages` followed by it (its own leading
    /// system message merged into the injected one), what to send to the model. Conversation
    /// messages are kept exactly as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub with_conversation: Option<Vec<serde_json::Value>>,
}

/// One prompt's share of the injection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Source {
    pub server: String,
    pub prompt: String,
    /// [`Kind::name`], or `thread_system_prompt` for the thread's own system prompt (whose
    /// `server` and `prompt` are empty).
    pub kind: String,
    /// Tokens of the text this source put in its message.
    pub tokens: usize,
    /// Index of the message it is in.
    pub message: usize,
}

/// The kind of [`Source`] the thread's own system prompt is.
pub const THREAD_SYSTEM_PROMPT: &str = "thread_system_prompt";

/// The encoding [`count_tokens`] uses.
pub const ENCODING: &str = "o200k_base";

/// Between system sections, as the spec joins them.
const SEPARATOR: &str = "\n\n---\n\n";

/// Tokens of `text` in OpenAI's `o200k_base` encoding (special tokens counted as text). The
/// first call loads the vocabulary ([`vocabulary`]).
pub fn count_tokens(text: &str) -> usize {
    vocabulary().encode_ordinary(text).len()
}

/// The loaded vocabulary is let go after this long unused: it takes tens of megabytes, which
/// a long-lived daemon would otherwise keep for its life after one count.
const VOCABULARY_IDLE: Duration = Duration::from_secs(300);

/// The `o200k_base` vocabulary and when it was last used, while loaded.
static VOCABULARY: Mutex<Option<(Arc<CoreBPE>, Instant)>> = Mutex::new(None);

/// The vocabulary, loaded on first use (`benches/hub.rs` prints how long that takes) and
/// again after it was let go; loading starts a thread that lets it go once unused for
/// [`VOCABULARY_IDLE`].
fn vocabulary() -> Arc<CoreBPE> {
    let mut slot = VOCABULARY.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((bpe, used)) = slot.as_mut() {
        *used = Instant::now();
        return bpe.clone();
    }
    let bpe = Arc::new(super::vocabulary::o200k_base());
    *slot = Some((bpe.clone(), Instant::now()));
    let loaded = Arc::downgrade(&bpe);
    std::thread::Builder::new()
        .name("tandem-vocabulary".into())
        .spawn(move || {
            loop {
                std::thread::sleep(VOCABULARY_IDLE);
                if release_vocabulary(&loaded, VOCABULARY_IDLE) {
                    return;
                }
            }
        })
        .map_err(|e| tracing::warn!("the vocabulary stays loaded: {e}"))
        .ok();
    bpe
}

/// Lets the `loaded` vocabulary go if unused for `idle` (counts in progress keep their own
/// reference); whether it is gone (let go now or before, or replaced by a later load,
/// which has its own thread).
fn release_vocabulary(loaded: &Weak<CoreBPE>, idle: Duration) -> bool {
    let mut slot = VOCABULARY.lock().unwrap_or_else(|p| p.into_inner());
    match slot.as_ref() {
        Some((bpe, used)) if std::ptr::eq(Arc::as_ptr(bpe), loaded.as_ptr()) => {
            if used.elapsed() < idle {
                return false;
            }
            *slot = None;
            true
        }
        _ => true,
    }
}

/// Whether `text` takes at most `budget` tokens. A token is at least one byte, so a text of
/// no more bytes than the budget fits without loading the vocabulary (tens of megabytes
/// resident while loaded, let go after `VOCABULARY_IDLE` unused).
pub fn fits_in_tokens(text: &str, budget: usize) -> bool {
    text.len() <= budget || count_tokens(text) <= budget
}

impl ChatMessage {
    /// Tokens of the text this message carries: content, tool calls' names and arguments.
    pub fn tokens(&self) -> usize {
        self.content.as_deref().map_or(0, count_tokens)
            + self
                .tool_calls
                .iter()
                .map(|c| count_tokens(&c.function.name) + count_tokens(&c.function.arguments))
                .sum::<usize>()
    }

    fn text(role: Role, content: String) -> ChatMessage {
        ChatMessage {
            role,
            content: Some(content),
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
        }
    }
}

/// Builds the injected messages from the fetched conventional prompts and the thread's own
/// system prompt, in the spec's order (see the module's doc).
pub fn build(fetched: &[Fetched], thread_system: Option<&str>) -> Injection {
    let mut ordered: Vec<&Fetched> = fetched.iter().collect();
    ordered.sort_by_key(|f| f.priority);
    let mut out = Builder::default();

    // 1-3. One system message.
    let mut sections = Vec::new();
    for (f, section) in system_sections(&ordered) {
        match section {
            None => out.warnings.push(blank(f)),
            Some(section) => {
                out.source(f, count_tokens(&section));
                sections.push(section);
            }
        }
    }
    let thread = thread_system.filter(|t| !t.trim().is_empty());
    if let Some(thread) = thread {
        let (part, content) = if sections.is_empty() {
            (thread.to_owned(), thread.to_owned())
        } else {
            let part = format!("[Thread System Prompt]\n{thread}");
            sections.push(part.clone());
            (part, sections.join(SEPARATOR))
        };
        out.sources.push(Source {
            server: String::new(),
            prompt: String::new(),
            kind: THREAD_SYSTEM_PROMPT.to_owned(),
            tokens: count_tokens(&part),
            message: 0,
        });
        out.push(ChatMessage::text(Role::System, content));
    } else if !sections.is_empty() {
        out.push(ChatMessage::text(Role::System, sections.join(SEPARATOR)));
    }

    // 4. User prompts.
    for f in ordered.iter().filter(|f| f.kind == Kind::UserPrompt) {
        if !out.skip_if_blank(f) {
            out.source(f, count_tokens(&f.text));
            out.push(ChatMessage::text(Role::User, f.text.clone()));
        }
    }

    // 5. Tool call and result pairs.
    out.tool_pairs(&ordered);

    // 6. Assistant prompts.
    for f in ordered.iter().filter(|f| f.kind == Kind::AssistantPrompt) {
        if !out.skip_if_blank(f) {
            out.source(f, count_tokens(&f.text));
            out.push(ChatMessage::text(Role::Assistant, f.text.clone()));
        }
    }

    out.finish()
}

/// The sections of the system message, in the spec's order: every `system_prompt`, then
/// every `tool_instructions`, each under its header (`None`: a blank text, not sent).
/// `ordered` is sorted by priority already.
fn system_sections<'a>(ordered: &[&'a Fetched]) -> Vec<(&'a Fetched, Option<String>)> {
    let mut sections = Vec::new();
    for (kind, header) in [
        (Kind::SystemPrompt, "System instructions"),
        (Kind::ToolInstructions, "Tool instructions"),
    ] {
        for f in ordered.iter().filter(|f| f.kind == kind) {
            let section = (!f.text.trim().is_empty())
                .then(|| format!("[{header} from Server: {}]\n{}", f.server, f.text));
            sections.push((*f, section));
        }
    }
    sections
}

/// The warning for a prompt with no text.
fn blank(f: &Fetched) -> String {
    format!(
        "prompt '{}' of server '{}' has no text; not sent",
        f.prompt, f.server
    )
}

/// The system message's text alone (the servers' system prompts and tool instructions),
/// within a budget of tokens: what an agent's MCP `instructions` carry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SystemText {
    /// The sections kept, joined as [`build`] joins them; empty when none.
    pub text: String,
    /// The prompts whose sections did not fit, in order.
    pub cut: Vec<Cut>,
    /// Prompts with no text.
    pub warnings: Vec<String>,
}

/// A prompt left out of a [`SystemText`] for its length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cut {
    pub server: String,
    pub prompt: String,
}

/// The system message [`build`] would make of `fetched` (no thread system prompt), within
/// `budget` tokens: sections are taken in order, and one that would pass the budget is left
/// out whole (a later, shorter one may still fit). Counting loads the vocabulary only when
/// the text has more bytes than the budget has tokens ([`fits_in_tokens`]).
pub fn system_text(fetched: &[Fetched], budget: usize) -> SystemText {
    let mut ordered: Vec<&Fetched> = fetched.iter().collect();
    ordered.sort_by_key(|f| f.priority);
    let mut out = SystemText::default();
    for (f, section) in system_sections(&ordered) {
        let Some(section) = section else {
            out.warnings.push(blank(f));
            continue;
        };
        let longer = if out.text.is_empty() {
            section
        } else {
            format!("{}{SEPARATOR}{section}", out.text)
        };
        if fits_in_tokens(&longer, budget) {
            out.text = longer;
        } else {
            out.cut.push(Cut {
                server: f.server.clone(),
                prompt: f.prompt.clone(),
            });
        }
    }
    out
}

#[derive(Default)]
struct Builder {
    messages: Vec<ChatMessage>,
    sources: Vec<Source>,
    warnings: Vec<String>,
}

impl Builder {
    /// Records `f` as a source of the next message, with `tokens`.
    fn source(&mut self, f: &Fetched, tokens: usize) {
        self.sources.push(Source {
            server: f.server.clone(),
            prompt: f.prompt.clone(),
            kind: f.kind.name().to_owned(),
            tokens,
            message: self.messages.len(),
        });
    }

    fn push(&mut self, message: ChatMessage) {
        self.messages.push(message);
    }

    fn skip_if_blank(&mut self, f: &Fetched) -> bool {
        let is_blank = f.text.trim().is_empty();
        if is_blank {
            self.warnings.push(blank(f));
        }
        is_blank
    }

    fn tool_pairs(&mut self, ordered: &[&Fetched]) {
        let calls: Vec<(&Fetched, &str)> = ordered
            .iter()
            .filter_map(|f| match &f.kind {
                Kind::ToolCall(tool) => Some((*f, tool.as_str())),
                _ => None,
            })
            .collect();
        let mut results: Vec<(&Fetched, &str, bool)> = ordered
            .iter()
            .filter_map(|f| match &f.kind {
                Kind::ToolResult(tool) => Some((*f, tool.as_str(), false)),
                _ => None,
            })
            .collect();
        let same = |a: &str, b: &str| a.to_lowercase() == b.to_lowercase();

        let mut pairs = Vec::new();
        for (call, tool) in calls {
            let result = results
                .iter_mut()
                .find(|(r, t, used)| !used && r.server == call.server && same(t, tool));
            match result {
                Some((result, _, used)) => {
                    *used = true;
                    pairs.push((call, tool, *result));
                }
                None => self.warnings.push(format!(
                    "prompt '{}' of server '{}' has no tool_result:{tool} (or tool_answer:{tool}) \
                     on that server; not sent",
                    call.prompt, call.server
                )),
            }
        }
        for (result, tool, _) in results.iter().filter(|(_, _, used)| !used) {
            self.warnings.push(format!(
                "prompt '{}' of server '{}' has no tool_call:{tool} on that server; not sent",
                result.prompt, result.server
            ));
        }

        // Ids: the tool's name, or `server__tool` when several pairs share it.
        let mut uses: HashMap<&str, usize> = HashMap::new();
        for (_, tool, _) in &pairs {
            *uses.entry(tool).or_default() += 1;
        }
        let mut ids = HashSet::new();
        for (call, tool, result) in pairs {
            let base = if uses[tool] > 1 {
                format!("{}__{tool}", call.server)
            } else {
                tool.to_owned()
            };
            let mut id = base.clone();
            for n in 2.. {
                if ids.insert(id.clone()) {
                    break;
                }
                id = format!("{base}_{n}");
            }

            let (content, name, arguments) = read_call(&call.text, tool);
            if !valid_function_name(&name) {
                self.warnings.push(format!(
                    "tool name '{name}' (prompt '{}' of server '{}') is not a valid OpenAI \
                     function name (letters, digits, '_' and '-', at most 64); some APIs refuse it",
                    call.prompt, call.server
                ));
            }
            let message = ChatMessage {
                role: Role::Assistant,
                content,
                tool_calls: vec![ToolCall {
                    id: id.clone(),
                    kind: ToolCallKind::Function,
                    function: FunctionCall {
                        name: name.clone(),
                        arguments,
                    },
                }],
                tool_call_id: None,
                name: None,
            };
            self.source(call, message.tokens());
            self.push(message);

            let answer = scan::compact(&result.text).unwrap_or_else(|| result.text.clone());
            self.source(result, count_tokens(&answer));
            self.push(ChatMessage {
                role: Role::Tool,
                content: Some(answer),
                tool_calls: Vec::new(),
                tool_call_id: Some(id),
                name: Some(name),
            });
        }
    }

    fn finish(self) -> Injection {
        let total_tokens = self.messages.iter().map(ChatMessage::tokens).sum();
        Injection {
            messages: self.messages,
            sources: self.sources,
            total_tokens,
            warnings: self.warnings,
            with_conversation: None,
        }
    }
}

/// A tool call's `(content, function name, arguments)`. A text that is a JSON object naming a
/// function is the call itself (content null): `{"function": "weather", "args": {...}}` as the
/// spec writes it, `{"name": ..., "arguments": ...}`, or OpenAI's
/// `{"function": {"name": ..., "arguments": ...}}`; arguments given as an object are sent as
/// its compact text, as a string as that string. Any other text is the assistant's words
/// before calling `tool` with no arguments.
fn read_call(text: &str, tool: &str) -> (Option<String>, String, String) {
    let plain = || {
        let content = (!text.trim().is_empty()).then(|| text.to_owned());
        (content, tool.to_owned(), "{}".to_owned())
    };
    let Some(members) = scan::object_members(text) else {
        return plain();
    };
    let string = |raw: &str| serde_json::from_str::<String>(raw).ok();
    let (name, arguments) = match get(&members, "function") {
        Some(raw) if raw.starts_with('{') => {
            let inner = scan::object_members(raw).unwrap_or_default();
            (
                get(&inner, "name").and_then(string),
                get(&inner, "arguments").or_else(|| get(&inner, "args")),
            )
        }
        Some(raw) => (
            string(raw),
            get(&members, "args").or_else(|| get(&members, "arguments")),
        ),
        None => (
            get(&members, "name").and_then(string),
            get(&members, "arguments").or_else(|| get(&members, "args")),
        ),
    };
    let Some(name) = name.filter(|n| !n.trim().is_empty()) else {
        return plain();
    };
    let arguments = match arguments {
        None | Some("null") => "{}".to_owned(),
        Some(raw) if raw.starts_with('"') => string(raw).unwrap_or_else(|| "{}".to_owned()),
        Some(raw) => scan::compact(raw).unwrap_or_else(|| raw.to_owned()),
    };
    (None, name, arguments)
}

fn get<'a>(members: &[(String, &'a str)], key: &str) -> Option<&'a str> {
    members.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
}

/// OpenAI's rule for function names: `^[a-zA-Z0-9_-]{1,64}$`.
fn valid_function_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A Markdown preview of an injection, for `:Tandem inject` and `tandem inject`: each message
/// with its role, sources and tokens, then the totals and the warnings.
pub fn render_preview(injection: &Injection) -> String {
    let n = injection.messages.len();
    let mut blocks = vec![if n == 0 {
        "# Injected context: none\n\nNo server gives a conventional prompt.".to_owned()
    } else {
        format!(
            "# Injected context: {n} message{}, {} tokens",
            plural(n),
            injection.total_tokens
        )
    }];
    for (i, message) in injection.messages.iter().enumerate() {
        let role = match message.role {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        };
        let what = match (message.role, message.tool_calls.first()) {
            (Role::Assistant, Some(call)) => format!(": calls `{}`", call.function.name),
            (Role::Tool, _) => format!(
                ": answer to `{}`",
                message.tool_call_id.as_deref().unwrap_or_default()
            ),
            _ => String::new(),
        };
        blocks.push(format!(
            "## {}. {role}{what} ({} tokens)",
            i + 1,
            message.tokens()
        ));
        let from: Vec<String> = injection
            .sources
            .iter()
            .filter(|s| s.message == i)
            .map(|s| {
                if s.kind == THREAD_SYSTEM_PROMPT {
                    format!("the thread's system prompt ({} tokens)", s.tokens)
                } else {
                    format!("{} `{}` ({} tokens)", s.server, s.prompt, s.tokens)
                }
            })
            .collect();
        if !from.is_empty() {
            blocks.push(format!("From: {}", from.join(", ")));
        }
        if let Some(content) = &message.content {
            let lang = match (message.role, scan::compact(content)) {
                (Role::Tool, Some(_)) => "json",
                _ => "text",
            };
            blocks.push(fenced(lang, content));
        }
        for call in &message.tool_calls {
            blocks.push(format!(
                "Tool call `{}` (id `{}`) with arguments:",
                call.function.name, call.id
            ));
            blocks.push(fenced("json", &call.function.arguments));
        }
    }
    let prompts = injection
        .sources
        .iter()
        .filter(|s| s.kind != THREAD_SYSTEM_PROMPT)
        .count();
    blocks.push(format!(
        "---\n\nTotal: {} tokens ({ENCODING}) in {n} message{} from {prompts} prompt{}.",
        injection.total_tokens,
        plural(n),
        plural(prompts),
    ));
    if !injection.warnings.is_empty() {
        blocks.push("## Warnings".to_owned());
        let list: Vec<String> = injection
            .warnings
            .iter()
            .map(|w| format!("- {w}"))
            .collect();
        blocks.push(list.join("\n"));
    }
    blocks.join("\n\n") + "\n"
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// `text` in a fenced block longer than any backtick run inside it.
fn fenced(lang: &str, text: &str) -> String {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    format!("{fence}{lang}\n{text}\n{fence}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fetched(server: &str, prompt: &str, text: &str) -> Fetched {
        Fetched {
            server: server.to_owned(),
            prompt: prompt.to_owned(),
            kind: detect(prompt).expect("a conventional name"),
            text: text.to_owned(),
            priority: 0,
        }
    }

    fn with_priority(f: Fetched, priority: i64) -> Fetched {
        Fetched { priority, ..f }
    }

    fn json(messages: &[ChatMessage]) -> serde_json::Value {
        serde_json::to_value(messages).unwrap()
    }

    #[test]
    fn detect_is_case_insensitive_and_keeps_the_tool_as_written() {
        let tool_call = |t: &str| Some(Kind::ToolCall(t.to_owned()));
        let tool_result = |t: &str| Some(Kind::ToolResult(t.to_owned()));
        let cases = [
            ("system_prompt", Some(Kind::SystemPrompt)),
            ("  System_Prompt ", Some(Kind::SystemPrompt)),
            ("TOOL_INSTRUCTIONS", Some(Kind::ToolInstructions)),
            ("user_prompt", Some(Kind::UserPrompt)),
            ("Assistant_Prompt", Some(Kind::AssistantPrompt)),
            ("tool_call:memory_index", tool_call("memory_index")),
            ("Tool_Call:Weather", tool_call("Weather")),
            ("tool_call: spaced ", tool_call("spaced")),
            ("tool_call:a:b", tool_call("a:b")),
            ("tool_result:x", tool_result("x")),
            ("TOOL_ANSWER:X", tool_result("X")),
            ("tool_answer:météo", tool_result("météo")),
            ("tool_call:", None),
            ("tool_result:  ", None),
            ("tool_call", None),
            ("tool_callx:y", None),
            ("system_prompts", None),
            ("my_system_prompt", None),
            ("system prompt", None),
            ("summarize", None),
            ("", None),
            ("é", None),
        ];
        for (name, expected) in cases {
            assert_eq!(detect(name), expected, "{name:?}");
        }
        assert_eq!(Kind::ToolResult("x".into()).name(), "tool_result");
    }

    /// The instructions' system text is the system message `build` makes, section for
    /// section; past the budget, a section is left out whole and named, and a later one
    /// that fits still goes in.
    #[test]
    fn the_system_text_is_builds_within_its_budget() {
        let prompts = [
            fetched("b", "tool_instructions", "Call b's tools with care."),
            with_priority(fetched("a", "system_prompt", "You know a."), 1),
            fetched("c", "system_prompt", "You know c."),
            fetched("d", "user_prompt", "Not a system text."),
            fetched("e", "system_prompt", "  "),
        ];
        let all = system_text(&prompts, 1_000);
        let built = build(&prompts, None);
        assert_eq!(
            Some(all.text.as_str()),
            built.messages[0].content.as_deref()
        );
        assert_eq!(
            all.text,
            "[System instructions from Server: c]\nYou know c.\n\n---\n\n\
             [System instructions from Server: a]\nYou know a.\n\n---\n\n\
             [Tool instructions from Server: b]\nCall b's tools with care."
        );
        assert!(all.cut.is_empty());
        assert_eq!(
            all.warnings,
            ["prompt 'system_prompt' of server 'e' has no text; not sent"]
        );

        let long = "word ".repeat(400);
        let prompts = [
            fetched("big", "system_prompt", &long),
            fetched("small", "tool_instructions", "Short."),
        ];
        let cut = system_text(&prompts, 50);
        assert_eq!(cut.text, "[Tool instructions from Server: small]\nShort.");
        assert_eq!(
            cut.cut,
            [Cut {
                server: "big".into(),
                prompt: "system_prompt".into()
            }]
        );
        assert!(fits_in_tokens(&cut.text, 50));
        assert_eq!(system_text(&[], 50), SystemText::default());
    }

    /// Spec 000, "Exemple concret: Obsidian Memory", with a real `tool_calls` entry.
    #[test]
    fn obsidian_memory_tool_call_and_result_exact_json() {
        let result = r#"{
  "success": true,
  "tool": "memory_get_root",
  "data": {
    "id": "root-index",
    "links": ["Project A", "Project B"]
  }
}"#;
        let inj = build(
            &[
                fetched("obsidian-memory", "tool_result:memory_index", result),
                fetched(
                    "obsidian-memory",
                    "tool_call:memory_index",
                    "Let me check the memory vault index to understand what information is available.",
                ),
            ],
            Some("Be concise."),
        );
        assert_eq!(
            serde_json::to_string_pretty(&inj.messages).unwrap(),
            r#"[
  {
    "role": "system",
    "content": "Be concise."
  },
  {
    "role": "assistant",
    "content": "Let me check the memory vault index to understand what information is available.",
    "tool_calls": [
      {
        "id": "memory_index",
        "type": "function",
        "function": {
          "name": "memory_index",
          "arguments": "{}"
        }
      }
    ]
  },
  {
    "role": "tool",
    "content": "{\"success\":true,\"tool\":\"memory_get_root\",\"data\":{\"id\":\"root-index\",\"links\":[\"Project A\",\"Project B\"]}}",
    "tool_call_id": "memory_index",
    "name": "memory_index"
  }
]"#
        );
        assert!(inj.warnings.is_empty(), "{:?}", inj.warnings);
        let kinds: Vec<_> = inj
            .sources
            .iter()
            .map(|s| (s.kind.as_str(), s.message))
            .collect();
        assert_eq!(
            kinds,
            [
                (THREAD_SYSTEM_PROMPT, 0),
                ("tool_call", 1),
                ("tool_result", 2)
            ]
        );
    }

    /// Spec 000, "Tool calls simulés": a call written as JSON is the call itself.
    #[test]
    fn weather_tool_call_as_json() {
        let inj = build(
            &[
                fetched(
                    "meteo",
                    "tool_call:weather",
                    r#"{"function":"weather","args":{"city":"Paris","days": 2}}"#,
                ),
                fetched(
                    "meteo",
                    "tool_result:weather",
                    r#"{"temp":15,"conditions":"sunny"}"#,
                ),
            ],
            None,
        );
        assert_eq!(
            json(&inj.messages),
            serde_json::json!([
                {
                    "role": "assistant",
                    "content": null,
                    "tool_calls": [{
                        "id": "weather",
                        "type": "function",
                        "function": {"name": "weather", "arguments": "{\"city\":\"Paris\",\"days\":2}"}
                    }]
                },
                {
                    "role": "tool",
                    "content": "{\"temp\":15,\"conditions\":\"sunny\"}",
                    "tool_call_id": "weather",
                    "name": "weather"
                }
            ])
        );
    }

    #[test]
    fn tool_call_shapes() {
        let cases = [
            // (text, content, name, arguments)
            ("Checking.", Some("Checking."), "x", "{}"),
            ("", None, "x", "{}"),
            (r#"{"function":"f"}"#, None, "f", "{}"),
            (r#"{"function":"f","args":null}"#, None, "f", "{}"),
            (
                r#"{"function":"f","arguments":{"b":1, "a":[2]}}"#,
                None,
                "f",
                r#"{"b":1,"a":[2]}"#,
            ),
            (
                r#"{"name":"g","arguments":"{\"q\": 1}"}"#,
                None,
                "g",
                r#"{"q": 1}"#,
            ),
            (
                r#"{"type":"function","function":{"name":"h","arguments":"{}"}}"#,
                None,
                "h",
                "{}",
            ),
            (
                r#"{"function":{"name":"h","args":{"k":"v w"}}}"#,
                None,
                "h",
                r#"{"k":"v w"}"#,
            ),
            (
                r#"{"note":"no name here"}"#,
                Some(r#"{"note":"no name here"}"#),
                "x",
                "{}",
            ),
            (r#"{"name":""}"#, Some(r#"{"name":""}"#), "x", "{}"),
            ("[1, 2]", Some("[1, 2]"), "x", "{}"),
            (r#"{"function":"f", "args": 3}"#, None, "f", "3"),
        ];
        for (text, content, name, arguments) in cases {
            assert_eq!(
                read_call(text, "x"),
                (
                    content.map(str::to_owned),
                    name.to_owned(),
                    arguments.to_owned()
                ),
                "{text}"
            );
        }
    }

    /// Spec 000, "Multiples serveurs avec system_prompt".
    #[test]
    fn multiple_system_prompts_and_the_thread_prompt_exact_text() {
        let inj = build(
            &[
                fetched(
                    "obsidian-memory",
                    "system_prompt",
                    "Tu as accès à une mémoire Obsidian...",
                ),
                fetched(
                    "code-analyzer",
                    "System_Prompt",
                    "Tu peux analyser du code...",
                ),
            ],
            Some("Réponds de manière concise."),
        );
        assert_eq!(inj.messages.len(), 1);
        assert_eq!(inj.messages[0].role, Role::System);
        assert_eq!(
            inj.messages[0].content.as_deref().unwrap(),
            "[System instructions from Server: obsidian-memory]
Tu as accès à une mémoire Obsidian...

---

[System instructions from Server: code-analyzer]
Tu peux analyser du code...

---

[Thread System Prompt]
Réponds de manière concise."
        );
    }

    #[test]
    fn tool_instructions_follow_every_system_prompt() {
        let inj = build(
            &[
                fetched("a", "system_prompt", "A system."),
                fetched("b", "tool_instructions", "B tools."),
                fetched("c", "system_prompt", "C system."),
            ],
            None,
        );
        assert_eq!(
            inj.messages[0].content.as_deref().unwrap(),
            "[System instructions from Server: a]\nA system.\n\n---\n\n\
             [System instructions from Server: c]\nC system.\n\n---\n\n\
             [Tool instructions from Server: b]\nB tools."
        );
        let only_tools = build(
            &[fetched("b", "tool_instructions", "B tools.")],
            Some("Thread."),
        );
        assert_eq!(
            only_tools.messages[0].content.as_deref().unwrap(),
            "[Tool instructions from Server: b]\nB tools.\n\n---\n\n[Thread System Prompt]\nThread."
        );
    }

    #[test]
    fn thread_prompt_alone_is_its_own_system_message() {
        let inj = build(
            &[fetched("s", "user_prompt", "Context.")],
            Some("Be brief."),
        );
        assert_eq!(
            json(&inj.messages),
            serde_json::json!([
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Context."}
            ])
        );
        assert!(build(&[], Some("  \n")).messages.is_empty());
        assert!(build(&[], None).messages.is_empty());
    }

    #[test]
    fn messages_follow_the_spec_order_whatever_the_input_order() {
        let inj = build(
            &[
                fetched("s", "assistant_prompt", "Prefill."),
                fetched("s", "tool_result:t", "42"),
                fetched("s", "tool_call:t", "Calling."),
                fetched("s", "user_prompt", "Context."),
                fetched("s", "tool_instructions", "Tools."),
                fetched("s", "system_prompt", "System."),
            ],
            Some("Thread."),
        );
        let roles: Vec<Role> = inj.messages.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [
                Role::System,
                Role::User,
                Role::Assistant,
                Role::Tool,
                Role::Assistant
            ]
        );
        assert_eq!(inj.messages[2].tool_calls[0].id, "t");
        assert_eq!(inj.messages[4].content.as_deref(), Some("Prefill."));
        let sources: Vec<(&str, usize)> = inj
            .sources
            .iter()
            .map(|s| (s.kind.as_str(), s.message))
            .collect();
        assert_eq!(
            sources,
            [
                ("system_prompt", 0),
                ("tool_instructions", 0),
                (THREAD_SYSTEM_PROMPT, 0),
                ("user_prompt", 1),
                ("tool_call", 2),
                ("tool_result", 3),
                ("assistant_prompt", 4),
            ]
        );
    }

    #[test]
    fn priorities_order_each_step_and_ties_keep_input_order() {
        let inj = build(
            &[
                with_priority(fetched("a", "user_prompt", "five-first"), 5),
                with_priority(fetched("b", "user_prompt", "minus-one"), -1),
                with_priority(fetched("c", "user_prompt", "five-second"), 5),
                with_priority(fetched("d", "user_prompt", "zero"), 0),
                with_priority(fetched("x", "system_prompt", "X"), 2),
                with_priority(fetched("y", "system_prompt", "Y"), 1),
                with_priority(fetched("late", "tool_call:t", "late"), 9),
                with_priority(fetched("late", "tool_result:t", "r1"), -9),
                with_priority(fetched("early", "tool_call:t", "early"), 3),
                with_priority(fetched("early", "tool_result:t", "r2"), 3),
            ],
            None,
        );
        let contents: Vec<&str> = inj
            .messages
            .iter()
            .filter_map(|m| m.content.as_deref())
            .collect();
        assert_eq!(
            contents,
            [
                "[System instructions from Server: y]\nY\n\n---\n\n[System instructions from Server: x]\nX",
                "minus-one",
                "zero",
                "five-first",
                "five-second",
                "early",
                "r2",
                "late",
                "r1",
            ]
        );
    }

    #[test]
    fn unpaired_calls_and_results_are_reported_not_sent() {
        let inj = build(
            &[
                fetched("a", "tool_call:lonely", "Calling."),
                fetched("b", "tool_result:orphan", "{}"),
                fetched("c", "tool_call:split", "Calling."),
                fetched("d", "tool_answer:split", "Answer."),
                fetched("e", "user_prompt", "Kept."),
            ],
            None,
        );
        assert_eq!(
            json(&inj.messages),
            serde_json::json!([{"role": "user", "content": "Kept."}])
        );
        assert_eq!(
            inj.warnings,
            [
                "prompt 'tool_call:lonely' of server 'a' has no tool_result:lonely (or tool_answer:lonely) on that server; not sent",
                "prompt 'tool_call:split' of server 'c' has no tool_result:split (or tool_answer:split) on that server; not sent",
                "prompt 'tool_result:orphan' of server 'b' has no tool_call:orphan on that server; not sent",
                "prompt 'tool_answer:split' of server 'd' has no tool_call:split on that server; not sent",
            ]
        );
        assert_eq!(inj.sources.len(), 1);
    }

    #[test]
    fn tool_ids_are_unique_across_servers() {
        let inj = build(
            &[
                fetched("a", "tool_call:search", "A searches."),
                fetched("b", "tool_call:search", "B searches."),
                fetched("a", "tool_result:search", "A found."),
                fetched("b", "tool_answer:search", "B found."),
                fetched("c", "tool_call:index", "C indexes."),
                fetched("c", "tool_result:index", "C indexed."),
                fetched("d", "Tool_Call:Weather", "D asks."),
                fetched("d", "tool_answer:weather", "D answered."),
            ],
            None,
        );
        let ids: Vec<(&str, &str)> = inj
            .messages
            .iter()
            .map(|m| match m.role {
                Role::Assistant => (m.tool_calls[0].id.as_str(), m.content.as_deref().unwrap()),
                _ => (
                    m.tool_call_id.as_deref().unwrap(),
                    m.content.as_deref().unwrap(),
                ),
            })
            .collect();
        assert_eq!(
            ids,
            [
                ("a__search", "A searches."),
                ("a__search", "A found."),
                ("b__search", "B searches."),
                ("b__search", "B found."),
                ("index", "C indexes."),
                ("index", "C indexed."),
                ("Weather", "D asks."),
                ("Weather", "D answered."),
            ]
        );
        assert_eq!(inj.messages[7].name.as_deref(), Some("Weather"));
        assert!(inj.warnings.is_empty(), "{:?}", inj.warnings);
    }

    #[test]
    fn blank_texts_and_odd_tool_names_are_warned() {
        let inj = build(
            &[
                fetched("s", "system_prompt", " \n "),
                fetched("s", "user_prompt", ""),
                fetched("s", "assistant_prompt", "\t"),
                fetched("s", "tool_call:memory.index", ""),
                fetched("s", "tool_result:memory.index", ""),
            ],
            None,
        );
        assert_eq!(
            inj.warnings,
            [
                "prompt 'system_prompt' of server 's' has no text; not sent",
                "prompt 'user_prompt' of server 's' has no text; not sent",
                "tool name 'memory.index' (prompt 'tool_call:memory.index' of server 's') is not a valid OpenAI function name (letters, digits, '_' and '-', at most 64); some APIs refuse it",
                "prompt 'assistant_prompt' of server 's' has no text; not sent",
            ]
        );
        assert_eq!(
            json(&inj.messages),
            serde_json::json!([
                {
                    "role": "assistant",
                    "content": null,
                    "tool_calls": [{
                        "id": "memory.index",
                        "type": "function",
                        "function": {"name": "memory.index", "arguments": "{}"}
                    }]
                },
                {"role": "tool", "content": "", "tool_call_id": "memory.index", "name": "memory.index"}
            ])
        );
    }

    #[test]
    fn the_vocabulary_is_let_go_when_unused_and_loaded_again_when_needed() {
        assert_eq!(count_tokens("hello world"), 2);
        let held = vocabulary();
        let loaded = Arc::downgrade(&held);
        assert!(
            !release_vocabulary(&loaded, Duration::from_secs(3600)),
            "just used: kept"
        );
        assert!(
            release_vocabulary(&loaded, Duration::ZERO),
            "unused for 0 s: let go"
        );
        assert!(VOCABULARY.lock().unwrap().is_none());
        // A count in progress keeps its own reference; the next count loads it again, and
        // the first load's thread, finding another loaded, ends.
        assert_eq!(held.encode_ordinary("hello world").len(), 2);
        assert_eq!(count_tokens("Réponds de manière concise."), 7);
        assert!(VOCABULARY.lock().unwrap().is_some());
        assert!(release_vocabulary(&loaded, Duration::from_secs(3600)));
        assert!(VOCABULARY.lock().unwrap().is_some(), "the later load stays");
    }

    #[test]
    fn token_counts_are_real_and_stable() {
        assert_eq!(count_tokens(""), 0);
        assert_eq!(count_tokens("hello world"), 2);
        assert_eq!(count_tokens("Réponds de manière concise."), 7);
        assert_eq!(
            count_tokens("[System instructions from Server: obsidian-memory]"),
            10
        );
        let inj = build(
            &[
                fetched("a", "system_prompt", "You can read the user's notes."),
                fetched("a", "user_prompt", "Notes index: Project A, Project B."),
                fetched("a", "tool_call:memory_index", "Let me look."),
                fetched("a", "tool_result:memory_index", r#"{"ok": true}"#),
            ],
            Some("Be concise."),
        );
        assert!(
            inj.sources.iter().all(|s| s.tokens > 0),
            "{:?}",
            inj.sources
        );
        let per_message: Vec<usize> = inj.messages.iter().map(ChatMessage::tokens).collect();
        assert_eq!(inj.total_tokens, per_message.iter().sum::<usize>());
        assert_eq!(per_message, [24, 9, 7, 5]);
    }

    #[test]
    fn injection_json_round_trips() {
        let inj = build(
            &[
                fetched("a", "system_prompt", "S."),
                fetched("a", "tool_call:t", r#"{"function":"t","args":{"k":1}}"#),
                fetched("a", "tool_result:t", "done"),
            ],
            Some("T."),
        );
        let text = serde_json::to_string(&inj).unwrap();
        assert_eq!(serde_json::from_str::<Injection>(&text).unwrap(), inj);
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            value["sources"][0],
            serde_json::json!({
                "server": "a", "prompt": "system_prompt", "kind": "system_prompt",
                "tokens": inj.sources[0].tokens, "message": 0
            })
        );
    }

    #[test]
    fn preview_shows_roles_sources_tokens_and_warnings() {
        let inj = build(
            &[
                fetched("notes", "system_prompt", "You can read notes."),
                fetched("notes", "user_prompt", "Index:\n```\nA\n```"),
                fetched(
                    "notes",
                    "tool_call:memory_index",
                    r#"{"function":"memory_index","args":{"depth":1}}"#,
                ),
                fetched("notes", "tool_result:memory_index", r#"{"ok": true}"#),
                fetched("notes", "tool_call:lonely", "x"),
            ],
            Some("Be concise."),
        );
        assert_eq!(
            render_preview(&inj),
            r#"# Injected context: 4 messages, 41 tokens

## 1. system (22 tokens)

From: notes `system_prompt` (13 tokens), the thread's system prompt (8 tokens)

```text
[System instructions from Server: notes]
You can read notes.

---

[Thread System Prompt]
Be concise.
```

## 2. user (7 tokens)

From: notes `user_prompt` (7 tokens)

````text
Index:
```
A
```
````

## 3. assistant: calls `memory_index` (7 tokens)

From: notes `tool_call:memory_index` (7 tokens)

Tool call `memory_index` (id `memory_index`) with arguments:

```json
{"depth":1}
```

## 4. tool: answer to `memory_index` (5 tokens)

From: notes `tool_result:memory_index` (5 tokens)

```json
{"ok":true}
```

---

Total: 41 tokens (o200k_base) in 4 messages from 4 prompts.

## Warnings

- prompt 'tool_call:lonely' of server 'notes' has no tool_result:lonely (or tool_answer:lonely) on that server; not sent
"#
        );
    }

    #[test]
    fn preview_of_nothing() {
        assert_eq!(
            render_preview(&Injection::default()),
            "# Injected context: none\n\nNo server gives a conventional prompt.\n\n---\n\n\
             Total: 0 tokens (o200k_base) in 0 messages from 0 prompts.\n"
        );
    }
}
