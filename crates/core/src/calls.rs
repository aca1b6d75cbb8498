//! The core's operations by name: JSON in, JSON out.
//!
//! Each operation is a [`Method`]: a name (`memory/search`, `tasks/show`, ...), a parameter
//! type from [`params`] (the MCP tools' arguments, same names) and a result type from the
//! core (whose JSON is the spec's). [`call`] runs one by name. Every face that routes by name
//! goes through here: the MCP tools, the daemon's `cli` face (`tandem memory ...` through a
//! daemon), the CLI run in-process, and the LSP face's commands; so a face only translates.
//! The CLI keeps the types: it builds a method's parameters and reads its result with
//! [`Method`]'s type parameters, whichever way the call travels. A face that has the types
//! in hand (the LSP face's hover, symbols and focus; the MCP face's resources and prompts)
//! runs a method with them, [`Method::run`], with no JSON in between. No face reaches the
//! core's operations any other way.
//!
//! A call is synchronous (sled and tantivy block): async callers use [`spawn_call`].
//! Every failure is a [`CallError`] carrying the spec's code; a call never writes a file
//! (`memory/export` and `memory/import` carry the JSON Lines in the JSON).

pub mod params;
pub mod schema;

use std::path::Path;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::core::Core;
use crate::memory::{
    self, AddOutcome, EntryDetails, EntrySuggestions, ExportReport, GeneralizeOutcome,
    GeneralizeSuggestions, ImportReport, LinkSuggestions, MemoryError, NewEntry, SearchQuery,
};
use crate::tasks::{self, TaskError, TaskRecord, WorkflowRecord};
use params::*;

/// The code of an unknown method (the spec has none).
pub const UNKNOWN_METHOD: &str = "UNKNOWN_METHOD";

/// Why a call failed: the spec's error code, a message for people, and machine-readable
/// details. Its JSON ([`CallError::to_json`]) is the error object every face answers with.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct CallError {
    code: &'static str,
    message: String,
    details: Value,
}

impl CallError {
    pub fn new(code: &'static str, message: impl Into<String>, details: Value) -> CallError {
        CallError {
            code,
            message: message.into(),
            details,
        }
    }

    /// `INVALID_ARGUMENT`, naming the field.
    pub fn invalid_argument(field: impl Into<String>, message: impl Into<String>) -> CallError {
        let field = field.into();
        CallError::new(
            "INVALID_ARGUMENT",
            format!("Invalid argument '{field}': {}", message.into()),
            serde_json::json!({ "field": field }),
        )
    }

    /// `INTERNAL_ERROR`: something broke that the caller cannot fix.
    pub fn internal(message: impl Into<String>) -> CallError {
        CallError::new("INTERNAL_ERROR", message, Value::Object(Default::default()))
    }

    pub fn unknown_method(method: &str) -> CallError {
        CallError::new(
            UNKNOWN_METHOD,
            format!("Unknown method '{method}'"),
            serde_json::json!({ "method": method, "known": methods().collect::<Vec<_>>() }),
        )
    }

    pub fn code(&self) -> &'static str {
        self.code
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    pub fn details(&self) -> &Value {
        &self.details
    }

    /// The spec's error object, `{"error": {"code", "message", "details"}}`: what every
    /// face answers a failure with, built here and nowhere else.
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "error": { "code": self.code, "message": self.message, "details": self.details }
        })
    }
}

impl From<MemoryError> for CallError {
    fn from(e: MemoryError) -> CallError {
        CallError::new(e.code(), e.to_string(), e.details())
    }
}

/// The core did not open: its part's error where it has a code, else `INTERNAL_ERROR`.
impl From<crate::core::CoreError> for CallError {
    fn from(e: crate::core::CoreError) -> CallError {
        use crate::core::CoreError;
        match e {
            CoreError::Memory(e) => e.into(),
            CoreError::Tasks(e) => e.into(),
            e @ (CoreError::Store(_) | CoreError::Panicked(_)) => {
                CallError::new(e.code(), e.to_string(), Value::Object(Default::default()))
            }
        }
    }
}

/// A field past its size limit: `INVALID_ARGUMENT` naming the field and the limit.
impl From<crate::limits::TooLarge> for CallError {
    fn from(e: crate::limits::TooLarge) -> CallError {
        let mut error = CallError::invalid_argument(&e.field, e.to_string());
        error.details["limit"] = Value::String(e.limit);
        error
    }
}

/// A store failure (trust records): nothing the caller can fix.
impl From<crate::store::StoreError> for CallError {
    fn from(e: crate::store::StoreError) -> CallError {
        CallError::internal(e.to_string())
    }
}

impl From<crate::hub::HubError> for CallError {
    fn from(e: crate::hub::HubError) -> CallError {
        CallError::new(e.code(), e.to_string(), e.details())
    }
}

impl From<TaskError> for CallError {
    fn from(e: TaskError) -> CallError {
        CallError::new(e.code(), e.to_string(), e.details())
    }
}

/// Where a call comes from: the session's workspace root (for the methods that snapshot or
/// filter by it) and who makes it (a user named by the HTTP face's token; `None` for the
/// local user), which the methods that write entries and tasks record as their author.
#[derive(Debug, Clone, Copy, Default)]
pub struct Session<'a> {
    pub workspace: Option<&'a Path>,
    pub author: Option<&'a str>,
}

impl<'a> Session<'a> {
    /// The local user's session in `workspace`.
    pub fn local(workspace: Option<&'a Path>) -> Session<'a> {
        Session {
            workspace,
            author: None,
        }
    }

    fn author(&self) -> Option<String> {
        self.author.map(str::to_string)
    }
}

/// One operation: its name, what it takes (`P`) and what it gives (`R`).
pub struct Method<P, R> {
    pub name: &'static str,
    run: fn(&Core, &Session, P) -> Result<R, CallError>,
}

impl<P, R> Method<P, R> {
    const fn new(
        name: &'static str,
        run: fn(&Core, &Session, P) -> Result<R, CallError>,
    ) -> Method<P, R> {
        Method { name, run }
    }

    /// Runs the method with its own types: the same operation, result and errors (the
    /// size limits too) as [`call`] by name, for a face that has the parameters as `P` and
    /// wants an `R`.
    pub fn run(&self, core: &Core, workspace: Option<&Path>, params: P) -> Result<R, CallError>
    where
        P: Serialize,
    {
        let json = serde_json::to_value(&params).map_err(|e| CallError::internal(e.to_string()))?;
        crate::limits::check(&json)?;
        (self.run)(core, &Session::local(workspace), params)
    }
}

/// A method with its types erased, run on JSON: what [`METHODS`] and the faces' tables
/// hold, so that a face that found its row runs the method without looking it up again.
pub trait AnyMethod: Sync {
    fn name(&self) -> &'static str;
    fn params_schema(&self) -> Value;
    /// Runs the method on `params` (`null` is taken as `{}`) in `session`.
    fn call(&self, core: &Core, session: &Session, params: Value) -> Result<Value, CallError>;
}

impl<P: DeserializeOwned + JsonSchema, R: Serialize> AnyMethod for Method<P, R> {
    fn name(&self) -> &'static str {
        self.name
    }

    fn params_schema(&self) -> Value {
        schema::settings(schema::Contract::Input)
            .into_generator()
            .into_root_schema_for::<P>()
            .to_value()
    }

    fn call(&self, core: &Core, session: &Session, params: Value) -> Result<Value, CallError> {
        let result = (self.run)(core, session, parse(params)?)?;
        Ok(serde_json::to_value(result).expect("core results serialise to JSON"))
    }
}

/// Runs the method `method` on `core` with `params` (`null` is taken as `{}`). `workspace`
/// is the session's root, for the methods that snapshot or filter by it.
pub fn call(
    core: &Core,
    workspace: Option<&Path>,
    method: &str,
    params: Value,
) -> Result<Value, CallError> {
    call_in(core, &Session::local(workspace), method, params)
}

/// [`call`] in a session: its workspace, and its author.
pub fn call_in(
    core: &Core,
    session: &Session,
    method: &str,
    params: Value,
) -> Result<Value, CallError> {
    match METHODS.iter().find(|m| m.name() == method) {
        Some(m) => m.call(core, session, params),
        None => Err(CallError::unknown_method(method)),
    }
}

/// Runs `f` on the blocking pool (the core blocks on sled, tantivy and git). A panic in it
/// is logged and answers `INTERNAL_ERROR`; the caller goes on serving. Every face runs its
/// core work through here.
pub async fn run_blocking<T: Send + 'static>(
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, CallError> {
    tokio::task::spawn_blocking(f).await.map_err(|join| {
        tracing::error!("{what} panicked: {join}");
        CallError::internal(format!("{what} failed unexpectedly"))
    })
}

/// Runs a call on the blocking pool ([`run_blocking`]).
pub async fn spawn_call(
    what: &str,
    call: impl FnOnce() -> Result<Value, CallError> + Send + 'static,
) -> Result<Value, CallError> {
    run_blocking(what, call).await?
}

/// Every method's name.
pub fn methods() -> impl Iterator<Item = &'static str> {
    METHODS.iter().map(|m| m.name())
}

/// The JSON Schema of `method`'s parameters (subschemas inlined, as schemars writes it: not
/// the MCP tools' flat form); `None` for an unknown method.
pub fn params_schema(method: &str) -> Option<Value> {
    METHODS
        .iter()
        .find(|m| m.name() == method)
        .map(|m| m.params_schema())
}

static METHODS: &[&dyn AnyMethod] = &[
    &MEMORY_ADD,
    &MEMORY_SEARCH,
    &MEMORY_SHOW,
    &MEMORY_RECENT,
    &MEMORY_LINK,
    &MEMORY_LINK_SUGGESTIONS,
    &MEMORY_GENERALIZE_SUGGESTIONS,
    &MEMORY_ENTRY_SUGGESTIONS,
    &MEMORY_SUGGESTIONS,
    &MEMORY_ACCEPT,
    &MEMORY_REJECT,
    &MEMORY_GENERALIZE,
    &MEMORY_REINDEX,
    &MEMORY_EXPORT,
    &MEMORY_IMPORT,
    &TASKS_LIST,
    &TASKS_SHOW,
    &TASKS_FOCUS,
    &TASKS_LIVE_CHANGES,
    &TASKS_START_WORKFLOW,
    &TASKS_START_TASK,
    &TASKS_LOG_DECISION,
    &TASKS_LOG_ISSUE,
    &TASKS_LOG_MILESTONE,
    &TASKS_COMPLETE_TASK,
    &HUB_SERVERS,
    &HUB_PROMPTS,
    &HUB_GET_PROMPT,
    &HUB_COMPLETE,
    &HUB_PARSE_COMMAND,
    &HUB_INJECT,
    &HUB_OWN_PROMPT,
    &HUB_CONVENTIONAL,
    &HUB_CONVENTIONAL_SET,
    &HUB_TRUST,
    &HUB_IMPORT,
    &HUB_LOGIN,
    &HUB_LOGOUT,
];

/// Parameters as the method's type; a wrong one, or one past its size limit
/// ([`crate::limits`]), is `INVALID_ARGUMENT` naming the field.
pub fn parse<P: DeserializeOwned>(params: Value) -> Result<P, CallError> {
    let params = match params {
        Value::Null => Value::Object(Default::default()),
        other => other,
    };
    crate::limits::check(&params)?;
    serde_path_to_error::deserialize(params).map_err(|e| {
        let path = e.path().to_string();
        // Missing and unknown fields are errors of the whole object; serde names them.
        let field = if path == "." {
            "arguments".into()
        } else {
            path
        };
        CallError::invalid_argument(field, e.into_inner().to_string())
    })
}

// ---- memory ---------------------------------------------------------------------------

pub const MEMORY_ADD: Method<AddParams, AddOutcome> =
    Method::new("memory/add", |core, session, p| {
        let new = NewEntry {
            entry_type: Some(p.entry_type.parse()?),
            title: p.title,
            content: p.content.unwrap_or_default(),
            tags: p.tags.unwrap_or_default(),
            context: p.context,
            project: p.project,
            confidence: p.confidence,
            memory_type: p.memory_type.as_deref().map(str::parse).transpose()?,
            author: session.author(),
        };
        Ok(core.memory.add(new)?)
    });

pub const MEMORY_SEARCH: Method<SearchParams, memory::SearchOutcome> =
    Method::new("memory/search", |core, _, p| {
        let q = SearchQuery {
            query: p.query,
            context: p.context,
            limit: p.limit,
            entry_type: p.entry_type.as_deref().map(str::parse).transpose()?,
            project: p.project,
        };
        Ok(core.memory.search(&q)?)
    });

pub const MEMORY_SHOW: Method<ShowParams, EntryDetails> =
    Method::new("memory/show", |core, _, p| Ok(core.memory.show(&p.id)?));

/// `memory/recent`'s `limit`: bounds and default.
const RECENT_LIMIT: (i64, i64, i64) = (1, 100, 20);

/// The most recently created entries, newest first (what an editor lists before any query,
/// and the MCP face's resources).
pub const MEMORY_RECENT: Method<RecentParams, Vec<memory::Entry>> =
    Method::new("memory/recent", |core, _, p| {
        let (min, max, default) = RECENT_LIMIT;
        let limit = p.limit.unwrap_or(default);
        if !(min..=max).contains(&limit) {
            return Err(CallError::invalid_argument(
                "limit",
                format!("limit must be between {min} and {max} (got {limit})"),
            ));
        }
        Ok(core.memory.recent(limit as usize)?)
    });

pub const MEMORY_LINK: Method<LinkParams, memory::LinkOutcome> =
    Method::new("memory/link", |core, _, p| {
        let relation = match p.relation_type.as_deref() {
            Some(r) => r.parse()?,
            None => memory::RelationType::Related,
        };
        Ok(core.memory.link(&p.source_id, &p.target_id, relation)?)
    });

pub const MEMORY_LINK_SUGGESTIONS: Method<SuggestParams, LinkSuggestions> =
    Method::new("memory/link_suggestions", |core, _, p| {
        Ok(core.memory.link_suggestions(p.limit)?)
    });

pub const MEMORY_GENERALIZE_SUGGESTIONS: Method<SuggestParams, GeneralizeSuggestions> =
    Method::new("memory/generalize_suggestions", |core, _, p| {
        Ok(core.memory.generalize_suggestions(p.limit)?)
    });

/// Pending entry suggestions: entries learned from completed tasks, to accept or reject.
pub const MEMORY_ENTRY_SUGGESTIONS: Method<SuggestParams, EntrySuggestions> =
    Method::new("memory/entry_suggestions", |core, _, p| {
        Ok(core.memory.entry_suggestions(p.limit)?)
    });

/// Pending suggestions of one kind, or of every kind (`memory/suggestions`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Suggestions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub links: Option<LinkSuggestions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generalize: Option<GeneralizeSuggestions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entries: Option<EntrySuggestions>,
}

pub const MEMORY_SUGGESTIONS: Method<SuggestionsParams, Suggestions> =
    Method::new("memory/suggestions", |core, _, p| {
        let kind = p.kind.as_deref().unwrap_or("all");
        let all = kind == "all";
        let wanted: memory::SuggestionKind = match kind {
            "all" => memory::SuggestionKind::Link,
            other => other.parse().map_err(|_| {
                CallError::invalid_argument(
                    "kind",
                    format!("'{other}'; expected one of: link, generalize, entry, all"),
                )
            })?,
        };
        let asked = |k: memory::SuggestionKind| all || wanted == k;
        Ok(Suggestions {
            links: asked(memory::SuggestionKind::Link)
                .then(|| core.memory.link_suggestions(p.limit))
                .transpose()?,
            generalize: asked(memory::SuggestionKind::Generalize)
                .then(|| core.memory.generalize_suggestions(p.limit))
                .transpose()?,
            entries: asked(memory::SuggestionKind::Entry)
                .then(|| core.memory.entry_suggestions(p.limit))
                .transpose()?,
        })
    });

pub const MEMORY_ACCEPT: Method<SuggestionParams, memory::AcceptOutcome> =
    Method::new("memory/accept", |core, session, p| {
        Ok(core.memory.accept_by(&p.suggestion_id, session.author)?)
    });

pub const MEMORY_REJECT: Method<SuggestionParams, memory::RejectOutcome> =
    Method::new("memory/reject", |core, _, p| {
        Ok(core.memory.reject(&p.suggestion_id)?)
    });

pub const MEMORY_GENERALIZE: Method<GeneralizeParams, GeneralizeOutcome> =
    Method::new("memory/generalize", |core, _, p| {
        let entry_type = p.entry_type.as_deref().map(str::parse).transpose()?;
        Ok(core
            .memory
            .generalize(&p.entry_ids, p.title, p.content, entry_type)?)
    });

/// The answer to `memory/reindex`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reindexed {
    pub indexed: u64,
    /// Entries whose vectors were made again, when asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embedded: Option<u64>,
}

pub const MEMORY_REINDEX: Method<ReindexParams, Reindexed> =
    Method::new("memory/reindex", |core, _, p| {
        let indexed = core.memory.reindex(&LogProgress)?;
        let embedded = if p.embeddings {
            Some(core.memory.reembed()?)
        } else {
            None
        };
        Ok(Reindexed { indexed, embedded })
    });

/// The answer to `memory/export`: entries and links as JSON Lines, how many, and where
/// the next page starts (none: this was the last).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Exported {
    pub jsonl: String,
    #[serde(flatten)]
    pub report: ExportReport,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

pub const MEMORY_EXPORT: Method<ExportParams, Exported> =
    Method::new("memory/export", |core, _, p| {
        let limit = match p.limit {
            None => usize::MAX,
            Some(0) => {
                return Err(
                    memory::MemoryError::invalid_argument("limit", "must be at least 1").into(),
                );
            }
            Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
        };
        let mut jsonl = Vec::new();
        let (report, next) = core
            .memory
            .export_page(p.after.as_deref(), limit, &mut jsonl)?;
        let jsonl = String::from_utf8(jsonl)
            .map_err(|e| CallError::internal(format!("export is not UTF-8: {e}")))?;
        Ok(Exported {
            jsonl,
            report,
            next,
        })
    });

pub const MEMORY_IMPORT: Method<ImportParams, ImportReport> =
    Method::new("memory/import", |core, _, p| {
        let part = if p.more {
            memory::ImportPart::More
        } else {
            memory::ImportPart::Last
        };
        Ok(core.memory.import_part(&mut p.jsonl.as_bytes(), part)?)
    });

/// Index rebuilds of a call go to the log: the caller may be anywhere.
pub struct LogProgress;

impl memory::Progress for LogProgress {
    fn start(&self, total: u64, reason: &str) {
        tracing::info!("rebuilding the search index ({total} entries): {reason}");
    }
    fn finish(&self) {
        tracing::info!("search index rebuilt");
    }
}

// ---- tasks ----------------------------------------------------------------------------

/// The session's workspace, which the method needs.
fn workspace_of<'a>(session: &Session<'a>) -> Result<&'a Path, CallError> {
    session.workspace.ok_or_else(|| {
        CallError::invalid_argument(
            "workspace",
            "this session has no workspace (give one in the hello)",
        )
    })
}

pub const TASKS_LIST: Method<TasksListParams, Vec<WorkflowRecord>> =
    Method::new("tasks/list", |core, workspace, p| {
        let filter = if p.all {
            None
        } else {
            Some(workspace_of(workspace)?)
        };
        Ok(core.tasks.list(filter, p.limit)?)
    });

pub const TASKS_SHOW: Method<TaskShowParams, TaskRecord> =
    Method::new("tasks/show", |core, _, p| Ok(core.tasks.record(&p.id)?));

/// How long a completed task stays in focus (`tasks/focus`), unless the call says.
pub const FOCUS_RECENT: std::time::Duration = std::time::Duration::from_secs(30 * 60);

/// The task an editor of a workspace shows ([`tasks::Tasks::focus`]) and what it shows of
/// it. The LSP face's view of it (diagnostics, lenses) is `lsp::view`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskFocus {
    pub task: tasks::Task,
    pub decisions: usize,
    pub review_issues: Vec<tasks::IssueRecord>,
    /// Live changes of a running task (empty once completed: its record says what changed).
    pub files: Vec<tasks::LiveFile>,
}

impl TaskFocus {
    pub fn root(&self) -> &Path {
        tasks::Tasks::root_of(&self.task)
    }

    pub fn running(&self) -> bool {
        self.task.state == tasks::TaskState::Running
    }

    /// Paths (relative to the root) of files the task touched that still exist.
    pub fn touched(&self) -> Vec<&str> {
        if self.running() {
            self.files
                .iter()
                .filter(|f| f.change != "deleted")
                .map(|f| f.path.as_str())
                .collect()
        } else {
            self.task
                .files_changed
                .as_ref()
                .map(|f| {
                    f.added
                        .iter()
                        .chain(&f.modified)
                        .map(String::as_str)
                        .collect()
                })
                .unwrap_or_default()
        }
    }
}

pub const TASKS_FOCUS: Method<TaskFocusParams, Option<TaskFocus>> =
    Method::new("tasks/focus", |core, workspace, p| {
        let recent = p
            .recent_secs
            .map_or(FOCUS_RECENT, std::time::Duration::from_secs);
        let Some(task) = core.tasks.focus(workspace_of(workspace)?, recent)? else {
            return Ok(None);
        };
        let files = if task.state == tasks::TaskState::Running {
            core.tasks.live_files(&task, None)?
        } else {
            Vec::new()
        };
        Ok(Some(TaskFocus {
            decisions: core.tasks.decision_count(&task)?,
            review_issues: core.tasks.review_issues(&task)?,
            files,
            task,
        }))
    });

pub const TASKS_LIVE_CHANGES: Method<LiveChangesParams, tasks::LiveChanges> =
    Method::new("tasks/live_changes", |core, _, p| {
        let task = core.tasks.task(&p.id)?;
        Ok(tasks::LiveChanges {
            task_id: task.id.to_string(),
            files: core.tasks.live_files(&task, p.paths.as_deref())?,
        })
    });

pub const TASKS_START_WORKFLOW: Method<StartWorkflowParams, tasks::WorkflowStarted> =
    Method::new("tasks/start_workflow", |core, workspace, p| {
        let new = tasks::NewWorkflow {
            name: p.name,
            description: p.description,
            plan: p.plan.unwrap_or_default(),
        };
        Ok(core.tasks.start_workflow(workspace_of(workspace)?, new)?)
    });

pub const TASKS_START_TASK: Method<StartTaskParams, tasks::TaskStarted> =
    Method::new("tasks/start_task", |core, workspace, p| {
        let new = tasks::NewTask {
            workflow_id: p.workflow_id,
            parent_task_id: p.parent_task_id,
            name: p.name,
            goal: p.goal,
            areas: p.areas.unwrap_or_default(),
            author: workspace.author(),
        };
        Ok(core.tasks.start_task(workspace_of(workspace)?, new)?)
    });

pub const TASKS_LOG_DECISION: Method<LogDecisionParams, tasks::Logged> =
    Method::new("tasks/log_decision", |core, _, p| {
        Ok(core.tasks.log_decision(tasks::NewDecision {
            task_id: p.task_id,
            category: p.category.parse()?,
            question: p.question,
            options_considered: p.options_considered.unwrap_or_default(),
            chosen: p.chosen,
            reasoning: p.reasoning,
            trade_offs: p.trade_offs,
        })?)
    });

pub const TASKS_LOG_ISSUE: Method<LogIssueParams, tasks::Logged> =
    Method::new("tasks/log_issue", |core, _, p| {
        Ok(core.tasks.log_issue(tasks::NewIssue {
            task_id: p.task_id,
            issue_type: p.issue_type.parse()?,
            description: p.description,
            resolution: p.resolution,
            requires_human_review: p.requires_human_review.unwrap_or(false),
        })?)
    });

pub const TASKS_LOG_MILESTONE: Method<LogMilestoneParams, tasks::Logged> =
    Method::new("tasks/log_milestone", |core, _, p| {
        Ok(core.tasks.log_milestone(tasks::NewMilestone {
            task_id: p.task_id,
            message: p.message,
            progress: p.progress,
            metadata: p.metadata.map(Value::Object),
        })?)
    });

/// Completes a task, then suggests its decisions and issues to the memory
/// ([`crate::learn`], where memory and tasks meet).
pub const TASKS_COMPLETE_TASK: Method<CompleteTaskParams, crate::learn::TaskCompletion> =
    Method::new("tasks/complete_task", |core, _, p| {
        let status: tasks::CompletionStatus = p.status.parse()?;
        let metadata = match p.metadata {
            Some(m) => Some(tasks::CompletionMetadata {
                packages_added: m.packages_added.unwrap_or_default(),
                packages_removed: m.packages_removed.unwrap_or_default(),
                commands_executed: m.commands_executed.unwrap_or_default(),
                tests_status: m.tests_status.as_deref().map(str::parse).transpose()?,
            }),
            None => None,
        };
        let completion = tasks::Completion {
            task_id: p.task_id,
            status,
            outcome: tasks::Outcome {
                summary: p.outcome.summary,
                achievements: p.outcome.achievements.unwrap_or_default(),
                limitations: p.outcome.limitations.unwrap_or_default(),
                manual_review_needed: p.outcome.manual_review_needed.unwrap_or(false),
                manual_review_reason: p.outcome.manual_review_reason,
                next_steps: p.outcome.next_steps.unwrap_or_default(),
            },
            metadata,
        };
        Ok(crate::learn::complete_task(
            &core.tasks,
            &core.memory,
            completion,
        )?)
    });

// ---- hub ------------------------------------------------------------------------------

/// Runs a future of the hub from a call (calls run on blocking threads, never on the
/// runtime's workers, so this may block).
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Handle::current().block_on(f)
}

fn hub_workspace(
    core: &Core,
    workspace: &Session,
) -> Result<std::sync::Arc<crate::hub::Workspace>, CallError> {
    let ws = workspace_of(workspace)?;
    let w = core.hub.workspace(ws);
    block_on(w.refresh_config());
    Ok(w)
}

fn settle(w: &crate::hub::Workspace, wait_ms: Option<u64>) {
    block_on(w.settle(std::time::Duration::from_millis(wait_ms.unwrap_or(10_000))));
}

pub const HUB_SERVERS: Method<HubListParams, crate::hub::ServersReport> =
    Method::new("hub/servers", |core, workspace, p| {
        let w = hub_workspace(core, workspace)?;
        settle(&w, p.wait_ms);
        Ok(core.hub.servers_report(&w))
    });

pub const HUB_PROMPTS: Method<HubListParams, Vec<crate::hub::PromptInfo>> =
    Method::new("hub/prompts", |core, workspace, p| {
        let w = hub_workspace(core, workspace)?;
        settle(&w, p.wait_ms);
        Ok(w.prompts())
    });

pub const HUB_GET_PROMPT: Method<GetPromptParams, crate::hub::PromptRun> = Method::new(
    "hub/get_prompt",
    |core, workspace, p| {
        let w = hub_workspace(core, workspace)?;
        let run = match (p.command, p.server, p.prompt) {
            (Some(line), None, None) if p.arguments.is_empty() => block_on(w.run_command(&line)),
            (None, Some(server), Some(prompt)) => {
                let arguments = p
                    .arguments
                    .into_iter()
                    .map(|(k, v)| (k, argument_text(v)))
                    .collect();
                block_on(w.run(&server, &prompt, arguments))
            }
            _ => {
                return Err(CallError::invalid_argument(
                    "command",
                    "give either 'command' (a /server:prompt line) or 'server', 'prompt' and 'arguments'",
                ));
            }
        };
        run.map_err(CallError::from)
    },
);

/// A prompt argument's value as MCP takes it: a string as is, any other JSON as its text.
fn argument_text(value: Value) -> String {
    match value {
        Value::String(s) => s,
        other => other.to_string(),
    }
}

pub const HUB_COMPLETE: Method<CompleteParams, Vec<crate::hub::PromptCompletion>> =
    Method::new("hub/complete", |core, workspace, p| {
        // Completion answers with what is ready now: it never waits for starting servers.
        let w = hub_workspace(core, workspace)?;
        let cursor = p.cursor.unwrap_or(p.line.len());
        if cursor > p.line.len() || !p.line.is_char_boundary(cursor) {
            return Err(CallError::invalid_argument(
                "cursor",
                format!(
                    "{cursor} is not a character boundary of the {}-byte line",
                    p.line.len()
                ),
            ));
        }
        block_on(w.complete(&p.line, cursor)).map_err(CallError::from)
    });

/// A command line as the hub reads it: what `hub/parse_command` answers.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ParsedCommand {
    pub server: String,
    pub prompt: String,
    /// `/server:prompt`.
    pub command: String,
    /// The arguments, unquoted (`--args` values that are not strings as their JSON text).
    pub arguments: std::collections::BTreeMap<String, String>,
    /// The line, trimmed, with the appended arguments.
    pub line: String,
}

pub const HUB_PARSE_COMMAND: Method<ParseCommandParams, ParsedCommand> =
    Method::new("hub/parse_command", |_core, _workspace, p| {
        let added: Vec<(String, String)> =
            p.append.into_iter().map(|a| (a.name, a.value)).collect();
        let (line, cmd) = crate::hub::prompts::command::append_arguments(&p.line, &added)
            .map_err(crate::hub::HubError::from)?;
        Ok(ParsedCommand {
            command: crate::hub::prompts::command::command_name(&cmd.server, &cmd.prompt),
            server: cmd.server,
            prompt: cmd.prompt,
            arguments: cmd.arguments,
            line,
        })
    });

pub const HUB_INJECT: Method<InjectParams, crate::hub::prompts::inject::Injection> =
    Method::new("hub/inject", |core, workspace, p| {
        let w = hub_workspace(core, workspace)?;
        settle(&w, None);
        let request = crate::hub::InjectRequest {
            thread_system: p.thread_system,
            model: p.model,
            thread: p.thread,
            conversation: p.conversation,
        };
        request
            .check()
            .map_err(|(field, message)| CallError::invalid_argument(&field, message))?;
        let own = core.hub.own_prompts(&core.memory)?;
        Ok(block_on(w.injection(own, &request)))
    });

/// One of Tandem's own conventional prompts, with its text now.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OwnPrompt {
    pub name: String,
    pub description: String,
    pub text: String,
}

pub const HUB_OWN_PROMPT: Method<OwnPromptParams, OwnPrompt> =
    Method::new("hub/own_prompt", |core, _, p| {
        use crate::hub::prompts::own;
        let Some((name, description)) = own::PROMPTS.iter().find(|(n, _)| *n == p.name) else {
            let known: Vec<&str> = own::PROMPTS.iter().map(|(n, _)| *n).collect();
            return Err(CallError::invalid_argument(
                "name",
                format!("unknown prompt '{}' (known: {})", p.name, known.join(", ")),
            ));
        };
        Ok(OwnPrompt {
            name: name.to_string(),
            description: description.to_string(),
            text: own::text(name, &core.memory)?.unwrap_or_default(),
        })
    });

pub const HUB_CONVENTIONAL: Method<HubListParams, Vec<crate::hub::ConventionalPrompt>> =
    Method::new("hub/conventional", |core, workspace, p| {
        let w = hub_workspace(core, workspace)?;
        settle(&w, p.wait_ms);
        Ok(w.conventional_list())
    });

pub const HUB_CONVENTIONAL_SET: Method<ConventionalSetParams, crate::hub::ConventionalPrompt> =
    Method::new("hub/conventional_set", |core, workspace, p| {
        use crate::hub::PromptTarget;
        let w = hub_workspace(core, workspace)?;
        let target = match (p.command, p.server, p.prompt) {
            (Some(line), None, None) => PromptTarget::Line(line),
            (None, Some(server), Some(prompt)) => PromptTarget::Named { server, prompt },
            _ => {
                return Err(CallError::invalid_argument(
                    "command",
                    "give either 'command' (a /server:prompt line) or 'server' and 'prompt'",
                ));
            }
        };
        let mut change = crate::hub::config::PromptSettingsChange {
            enabled: p.enabled,
            arguments: Default::default(),
        };
        for (name, value) in p.arguments {
            let value = (!value.is_null()).then(|| argument_text(value));
            change.arguments.insert(name, value);
        }
        for name in p.unset {
            change.arguments.insert(name, None);
        }
        block_on(w.edit_conventional(target, change)).map_err(CallError::from)
    });

pub const HUB_TRUST: Method<TrustParams, crate::hub::config::trust::TrustReport> =
    Method::new("hub/trust", |core, workspace, p| {
        let ws = workspace_of(workspace)?;
        use crate::hub::config::trust::{TrustAction, TrustError};
        let action = match (p.action.as_deref().unwrap_or("show"), p.sha256) {
            ("show", _) => TrustAction::Show,
            ("revoke", _) => TrustAction::Revoke,
            ("approve", Some(shown)) => TrustAction::Approve { shown },
            ("approve", None) => {
                return Err(CallError::invalid_argument(
                    "sha256",
                    "approving needs the sha256 of the file as it was shown (`show` gives it), \
                     so that a file changed since is not approved",
                ));
            }
            (name, _) => {
                return Err(CallError::invalid_argument(
                    "action",
                    format!("unknown action '{name}' (show, approve or revoke)"),
                ));
            }
        };
        match core.hub.trust_workspace(ws, action) {
            Ok(report) => Ok(report),
            Err(TrustError::Store(e)) => Err(e.into()),
            Err(e) => Err(CallError::new(
                e.code(),
                e.to_string(),
                Value::Object(Default::default()),
            )),
        }
    });

/// Imports servers into the user's `config.json`, through the hub so that it never races
/// another edit of that file (the daemon's, when one runs).
pub const HUB_IMPORT: Method<HubImportParams, crate::hub::config::import::Plan> =
    Method::new("hub/import", |core, _, p| {
        core.hub
            .import(&p.servers, &p.skipped, p.overwrite)
            .map_err(|e| CallError::from(crate::hub::HubError::ConfigInvalid(e.to_string())))
    });

/// Signs in to a remote server: answers the URL to approve at once it is known, or (with
/// `wait`) once the approval came and the server connected.
pub const HUB_LOGIN: Method<HubLoginParams, crate::hub::SignInReport> =
    Method::new("hub/login", |core, workspace, p| {
        let w = hub_workspace(core, workspace)?;
        let s = w.server(&p.name)?;
        if p.wait {
            let attempt = block_on(s.sign_in(p.attempt))?;
            Ok(crate::hub::SignInReport::of(&s, attempt, None))
        } else {
            let (attempt, url) = block_on(s.sign_in_url())?;
            Ok(crate::hub::SignInReport::of(&s, attempt, Some(url)))
        }
    });

/// Forgets a remote server's tokens and disconnects it.
pub const HUB_LOGOUT: Method<HubLogoutParams, crate::hub::SignOutReport> =
    Method::new("hub/logout", |core, workspace, p| {
        let w = hub_workspace(core, workspace)?;
        let s = w.server(&p.name)?;
        let forgot = s.sign_out()?;
        Ok(crate::hub::SignOutReport {
            server: p.name,
            forgot,
        })
    });

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::prompts::command::{self, ArgumentSpec};

    /// A refused command line reaches the client with its code and its particulars.
    #[test]
    fn hub_errors_carry_their_details() {
        let spec = [ArgumentSpec {
            name: "name".into(),
            description: None,
            required: true,
        }];
        let cases: [(&str, &str, Value); 3] = [
            (
                "/fx:greet",
                "MISSING_ARGUMENT",
                serde_json::json!({"command": "/fx:greet", "missing": ["name"]}),
            ),
            (
                "/fx:greet name=a nme=b",
                "UNKNOWN_ARGUMENT",
                serde_json::json!({"command": "/fx:greet", "unknown": ["nme"], "accepted": ["name"]}),
            ),
            (
                "/fx:greet name=\"open",
                "INVALID_COMMAND",
                serde_json::json!({"column": 16}),
            ),
        ];
        for (line, code, details) in cases {
            let refused = command::parse(line)
                .and_then(|cmd| command::validate(&cmd, &spec))
                .expect_err(line);
            let e = CallError::from(crate::hub::HubError::from(refused));
            assert_eq!(e.code(), code, "{line}");
            assert_eq!(e.to_json()["error"]["details"], details, "{line}");
        }
        let e = CallError::from(crate::hub::HubError::ServerNotFound("no 'x'".into()));
        assert_eq!(e.code(), "SERVER_NOT_FOUND");
        assert_eq!(e.to_json()["error"]["details"], serde_json::json!({}));
    }

    /// The methods the LSP and MCP faces run with their own types: the same answers typed
    /// and by name, their arguments checked.
    #[tokio::test(flavor = "multi_thread")]
    async fn the_faces_methods_run_typed() {
        let home = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let ws = ws.path();
        let core = Core::open(home.path(), &LogProgress).unwrap();
        let ok = |method: &str, params: Value| call(&core, Some(ws), method, params).unwrap();
        let code =
            |method: &str, params: Value| call(&core, Some(ws), method, params).unwrap_err().code();

        // memory/recent: newest first, at most `limit`.
        for title in ["Older entry", "Newer entry"] {
            ok(
                "memory/add",
                serde_json::json!({"type": "pattern", "title": title}),
            );
        }
        let recent = MEMORY_RECENT
            .run(&core, None, RecentParams { limit: Some(1) })
            .unwrap();
        assert_eq!(recent.len(), 1);
        assert_eq!(recent[0].title, "Newer entry");
        assert_eq!(
            ok("memory/recent", Value::Null).as_array().unwrap().len(),
            2
        );
        assert_eq!(
            code("memory/recent", serde_json::json!({"limit": 0})),
            "INVALID_ARGUMENT"
        );

        // tasks/focus and tasks/live_changes: none before a task; the running one, with the
        // files it changed.
        let focus = TaskFocusParams::default();
        assert!(
            TASKS_FOCUS
                .run(&core, Some(ws), focus.clone())
                .unwrap()
                .is_none()
        );
        let no_workspace = TASKS_FOCUS.run(&core, None, focus.clone()).unwrap_err();
        assert_eq!(no_workspace.code(), "INVALID_ARGUMENT");
        let wf = ok("tasks/start_workflow", serde_json::json!({"name": "W"}));
        let task = ok(
            "tasks/start_task",
            serde_json::json!({"workflow_id": wf["workflow_id"], "name": "T", "goal": "G"}),
        );
        std::fs::write(ws.join("a.txt"), "a\n").unwrap();
        std::fs::write(ws.join("b.txt"), "b\n").unwrap();
        let shown = TASKS_FOCUS.run(&core, Some(ws), focus).unwrap().unwrap();
        assert_eq!(Value::String(shown.task.id.to_string()), task["task_id"]);
        assert_eq!((shown.decisions, shown.review_issues.len()), (0, 0));
        let paths =
            |files: &[tasks::LiveFile]| files.iter().map(|f| f.path.clone()).collect::<Vec<_>>();
        assert_eq!(paths(&shown.files), ["a.txt", "b.txt"]);
        let only = LiveChangesParams {
            id: shown.task.id.to_string(),
            paths: Some(vec!["b.txt".into()]),
        };
        let changes = TASKS_LIVE_CHANGES.run(&core, Some(ws), only).unwrap();
        assert_eq!(paths(&changes.files), ["b.txt"]);
        for outside in ["../b.txt", "/etc/passwd"] {
            let only = LiveChangesParams {
                id: shown.task.id.to_string(),
                paths: Some(vec!["a.txt".into(), outside.into()]),
            };
            let refused = TASKS_LIVE_CHANGES.run(&core, Some(ws), only).unwrap_err();
            assert_eq!(refused.code(), "INVALID_ARGUMENT", "{outside}");
            assert_eq!(refused.details()["field"], "paths[1]");
        }
        assert_eq!(
            code(
                "tasks/live_changes",
                serde_json::json!({"id": "01NOSUCHTASK"})
            ),
            "TASK_NOT_FOUND"
        );

        // hub/own_prompt: Tandem's own prompts by name.
        let system = HUB_OWN_PROMPT
            .run(
                &core,
                None,
                OwnPromptParams {
                    name: "system_prompt".into(),
                },
            )
            .unwrap();
        assert!(system.text.contains("Tandem"), "{}", system.text);
        let index = ok(
            "hub/own_prompt",
            serde_json::json!({"name": "tool_result:memory_index"}),
        );
        assert!(
            index["text"].as_str().unwrap().contains("memory_index"),
            "{index}"
        );
        assert_eq!(
            code("hub/own_prompt", serde_json::json!({"name": "nope"})),
            "INVALID_ARGUMENT"
        );
    }
}
