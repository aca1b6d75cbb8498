//! The calls' parameters as they arrive on the wire (the MCP tools' arguments, the `cli`
//! face's params), and their JSON Schemas. The CLI builds them to make its requests.
//!
//! Enum-valued arguments are read as strings and parsed by the core, so a typo gets the
//! spec's code (`INVALID_ENTRY_TYPE`, ...) rather than a generic deserialisation error; the
//! schema still lists the allowed values (`schemars(with = ...)`). Integers are read wide
//! and range-checked by the core, for the same reason.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::memory::{EntryType, MemoryType, RelationType};

/// The help topics (schema only).
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum HelpTopic {
    Search,
    Capture,
    Links,
    Citations,
    All,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HelpParams {
    /// Section to return (optional, 'all' by default).
    #[schemars(with = "Option<HelpTopic>", extend("default" = "all"))]
    pub topic: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchParams {
    /// Search terms (keywords or a natural-language question).
    pub query: String,
    /// Conversation context, used to enrich the search.
    pub context: Option<String>,
    /// Maximum number of results.
    #[schemars(range(min = 1, max = 20), extend("default" = 5))]
    pub limit: Option<i64>,
    /// Filter by entry type.
    #[serde(rename = "type")]
    #[schemars(with = "Option<EntryType>")]
    pub entry_type: Option<String>,
    /// Filter by project.
    pub project: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AddParams {
    /// Entry type.
    #[serde(rename = "type")]
    #[schemars(with = "EntryType")]
    pub entry_type: String,
    /// Entry title (max 100 characters).
    #[schemars(length(max = 100))]
    pub title: String,
    /// Detailed content of the entry.
    #[serde(default)]
    pub content: Option<String>,
    /// Kebab-case tags (2-5 recommended).
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    /// Full conversation context (over 10,000 characters, only the first 8,000 are kept).
    pub context: Option<String>,
    /// Associated project name (optional).
    pub project: Option<String>,
    /// Confidence level (0-5).
    #[schemars(range(min = 0, max = 5), extend("default" = 3))]
    pub confidence: Option<i64>,
    /// Memory type.
    #[schemars(with = "Option<MemoryType>", extend("default" = "episodic"))]
    pub memory_type: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShowParams {
    /// Entry ID (full ULID or a prefix of 5+ characters).
    pub id: String,
}

/// `memory/recent`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RecentParams {
    /// Maximum number of entries.
    #[schemars(range(min = 1, max = 100), extend("default" = 20))]
    pub limit: Option<i64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SuggestParams {
    /// Maximum number of suggestions.
    #[schemars(range(min = 1, max = 50), extend("default" = 10))]
    pub limit: Option<i64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LinkParams {
    /// Source entry ID.
    pub source_id: String,
    /// Target entry ID.
    pub target_id: String,
    /// Relation type.
    #[schemars(with = "Option<RelationType>", extend("default" = "related"))]
    pub relation_type: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SuggestionsParams {
    /// Which suggestions: `link`, `generalize`, `entry` or `all` (the default).
    pub kind: Option<String>,
    /// Maximum number of suggestions of each kind.
    pub limit: Option<i64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SuggestionParams {
    /// ID of the suggestion.
    pub suggestion_id: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GeneralizeParams {
    /// Two or more entry IDs (full ULIDs or prefixes of 5+ characters).
    pub entry_ids: Vec<String>,
    /// Title of the new semantic entry (default: derived from the sources).
    pub title: Option<String>,
    /// Content of the new entry (default: derived from the sources).
    pub content: Option<String>,
    /// Type of the new entry (default: the sources' type).
    #[serde(rename = "type")]
    #[schemars(with = "Option<EntryType>")]
    pub entry_type: Option<String>,
}

/// `memory/reindex`: the search index always; every entry's vectors too when `embeddings`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReindexParams {
    #[serde(default)]
    pub embeddings: bool,
}

/// No parameters.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

/// `memory/export`: the whole export, or one page of it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExportParams {
    /// Where the page starts: the `next` of the previous page (none: the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// At most this many lines (none: every line, in one answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ImportParams {
    /// JSON Lines, as `memory/export` gives them.
    pub jsonl: String,
    /// More parts of the same import follow this one: its entries are durable and
    /// searchable at once, and the search index's segments are merged after the last.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub more: bool,
}

// ---- task tracking (spec 004) ----

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TasksListParams {
    /// Every workspace's workflows, not only the session's.
    #[serde(default)]
    pub all: bool,
    /// At most this many workflows, the newest, each with at most this many top-level
    /// tasks, the newest (everything when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskShowParams {
    /// Task ID (full ULID or a prefix of 5+ characters).
    pub id: String,
}

/// `tasks/focus`: the task an editor of the session's workspace shows.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskFocusParams {
    /// How long (s) a completed task stays in focus; default 1800.
    #[serde(default)]
    pub recent_secs: Option<u64>,
}

/// `tasks/live_changes`: what a task changed since it started, now.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LiveChangesParams {
    /// Task ID (full ULID or a prefix of 5+ characters).
    pub id: String,
    /// Only these paths (relative to the snapshot's root); every changed file by default.
    #[serde(default)]
    pub paths: Option<Vec<String>>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StartWorkflowParams {
    /// Short workflow name (e.g., 'Auth system refactor').
    pub name: String,
    /// Detailed description of the workflow goal.
    pub description: Option<String>,
    /// Optional implementation plan as steps.
    pub plan: Option<Vec<crate::tasks::PlanStep>>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StartTaskParams {
    /// Parent workflow ID.
    pub workflow_id: String,
    /// Parent task ID (null if top-level task).
    pub parent_task_id: Option<String>,
    /// Task name (e.g., 'Implement Stripe integration').
    pub name: String,
    /// Precise goal of this task.
    pub goal: String,
    /// Code areas this task will touch (e.g., ['auth', 'api']): path segments, path prefixes or globs.
    pub areas: Option<Vec<String>>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LogDecisionParams {
    pub task_id: String,
    /// Kind of decision.
    #[schemars(with = "crate::tasks::DecisionCategory")]
    pub category: String,
    /// The decision question (e.g., 'Which auth library to use?').
    pub question: String,
    /// Options evaluated (e.g., ['NextAuth', 'Clerk', 'Custom']).
    pub options_considered: Option<Vec<String>>,
    /// Chosen option.
    pub chosen: String,
    /// Why this choice (1-2 sentences).
    pub reasoning: String,
    /// Accepted compromises (optional).
    pub trade_offs: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LogIssueParams {
    pub task_id: String,
    /// Kind of issue.
    #[serde(rename = "type")]
    #[schemars(with = "crate::tasks::IssueType")]
    pub issue_type: String,
    /// Description of the issue.
    pub description: String,
    /// How the issue was resolved/worked around.
    pub resolution: String,
    /// Does a human need to review this resolution?
    pub requires_human_review: Option<bool>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LogMilestoneParams {
    pub task_id: String,
    /// Short message (e.g., 'Running tests...').
    pub message: String,
    /// Estimated progress (0-100).
    #[schemars(range(min = 0, max = 100))]
    pub progress: Option<f64>,
    /// Optional additional data.
    pub metadata: Option<serde_json::Map<String, serde_json::Value>>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OutcomeParams {
    /// Summary of what was accomplished (2-4 sentences).
    pub summary: String,
    /// Concrete achievements (empty array if none).
    pub achievements: Option<Vec<String>>,
    /// Limitations/compromises (empty array if none).
    pub limitations: Option<Vec<String>>,
    /// Does a human need to review before continuing?
    pub manual_review_needed: Option<bool>,
    /// Why manual review is needed.
    pub manual_review_reason: Option<String>,
    /// Suggested next steps (optional).
    pub next_steps: Option<Vec<String>>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CompletionMetadataParams {
    pub packages_added: Option<Vec<String>>,
    pub packages_removed: Option<Vec<String>>,
    pub commands_executed: Option<Vec<String>>,
    /// How the tests went.
    #[schemars(with = "Option<crate::tasks::TestsStatus>")]
    pub tests_status: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CompleteTaskParams {
    pub task_id: String,
    /// How the task ended.
    #[schemars(with = "crate::tasks::CompletionStatus")]
    pub status: String,
    pub outcome: OutcomeParams,
    pub metadata: Option<CompletionMetadataParams>,
}

/// `hub/servers`, `hub/prompts`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HubListParams {
    /// Wait for servers that began starting less than this long ago (ms) to be ready or
    /// fail; default 10000.
    #[serde(default)]
    pub wait_ms: Option<u64>,
}

/// `hub/get_prompt`: a downstream prompt's messages, from a command line
/// (`/server:prompt name=value ...`) or from its parts.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetPromptParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// Values are strings; other JSON values are passed as their JSON text.
    #[serde(default)]
    pub arguments: serde_json::Map<String, Value>,
}

/// `hub/complete`: completions at `cursor` (a byte offset; default: the end) of a command
/// line being typed.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CompleteParams {
    pub line: String,
    #[serde(default)]
    pub cursor: Option<usize>,
}

/// `hub/parse_command`: a command line (`/server:prompt name=value ...` or `/server:prompt
/// --args {json}`) read by the hub's grammar, with `append`ed arguments added at its end.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ParseCommandParams {
    pub line: String,
    /// Arguments to add after the line's own, in this order, each quoted so that it reads
    /// back as given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub append: Vec<NamedValue>,
}

/// A prompt argument given by name.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NamedValue {
    pub name: String,
    pub value: String,
}

/// `hub/inject`: the conventional prompts injection.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InjectParams {
    /// The chat thread's own system prompt, merged as spec 000 shows.
    #[serde(default)]
    pub thread_system: Option<String>,
    /// The model the messages are for: prompts limited to models (`models` in the settings)
    /// apply only when it matches.
    #[serde(default)]
    pub model: Option<String>,
    /// The chat thread's id or name: prompts limited to threads (`threads` in the settings)
    /// apply only when it matches.
    #[serde(default)]
    pub thread: Option<String>,
    /// The conversation so far (OpenAI chat messages): the answer's `with_conversation` is
    /// the injected messages followed by it. A leading system message is the thread's
    /// system prompt.
    #[serde(default)]
    pub conversation: Option<Vec<Value>>,
}

/// `hub/own_prompt`: one of Tandem's own conventional prompts (`system_prompt`,
/// `tool_call:memory_index`, `tool_result:memory_index`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OwnPromptParams {
    pub name: String,
}

/// `hub/conventional_set`: one conventional prompt's settings, written to the user's config.
/// The prompt is `command` (`/server:prompt name=value ...`, whose arguments are set) or
/// `server` and `prompt`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConventionalSetParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// Arguments to set (a string; other JSON values as their JSON text) or remove (null).
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub arguments: serde_json::Map<String, Value>,
    /// Arguments to remove.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unset: Vec<String>,
    /// Turn the prompt on or off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

/// `hub/trust`: the workspace's `.mcp.json` as it is now.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TrustParams {
    /// `show` (default), `approve` or `revoke`.
    #[serde(default)]
    pub action: Option<String>,
    /// For `approve`: the `sha256` the file had when it was shown. A file that has another
    /// now is not approved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// `hub/login`: sign in to a remote server (`tandem servers login`, `tandem.servers.login`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HubLoginParams {
    /// The server's name.
    pub name: String,
    /// Wait for the approval and for the server to connect before answering; default:
    /// answer once the URL to approve at is known (the sign-in goes on).
    #[serde(default)]
    pub wait: bool,
    /// With `wait`: the sign-in to wait for, as an earlier answer numbered it (default:
    /// the one under way, else a new one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u64>,
}

/// `hub/logout`: forget a remote server's sign-in (`tandem servers logout`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HubLogoutParams {
    /// The server's name.
    pub name: String,
}

/// `hub/import`: servers read from an agent's config files (`tandem servers import`),
/// merged into the user's `config.json`. Their entries carry values (variables, headers);
/// the answer, the plan, carries only their names.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HubImportParams {
    /// The servers to import, translated into Tandem's entries.
    #[serde(default)]
    pub servers: Vec<crate::hub::config::import::FoundServer>,
    /// Servers found but not importable, listed in the plan as they are.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<crate::hub::config::import::Skipped>,
    /// Replace a server of the same name that runs something else (default: keep it and
    /// report the conflict).
    #[serde(default)]
    pub overwrite: bool,
}
