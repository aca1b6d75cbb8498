//! The MCP face: the memory's nine `rekall_*` tools and its entries as resources, served
//! with rmcp.
//!
//! API boundary: this module only translates. Arguments are parsed into the core's request
//! types, results are the core's (whose JSON is the spec-003 contract), and a core error
//! becomes a tool result with `isError` and the spec's error object. Protocol errors are
//! only for requests that cannot be routed (an unknown tool or resource).

mod params;
pub mod transport;

use std::path::PathBuf;
use std::sync::{Arc, LazyLock};

use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ErrorData, Implementation, JsonObject,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
    ResourceContents, ResourceTemplate, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::core::Core;
pub use crate::core::LazyCore;
pub use crate::memory::render_markdown;
use crate::memory::{self, EntryDetails, MemoryError, NewEntry, SearchQuery};
use crate::tasks::{self, TaskError, Tasks};
use params::*;

/// What the agent is told at connection: the spec's "three lines".
pub const INSTRUCTIONS: &str = "Tandem memory: a shared knowledge base of bugs, patterns, decisions, pitfalls, configs and references.\n\
Call `rekall_help()` once at the start of a session: it explains when to search, what to capture and how to cite.\n\
Search (`rekall_search`) before solving a problem; capture (`rekall_add`) what you learned after.\n\
Track each piece of work: `start_workflow`, `start_task` (with the `areas` you will touch), then `complete_task`; Tandem computes the files changed.";

/// URI template of a memory entry resource.
pub const ENTRY_URI_TEMPLATE: &str = "tandem://memory/{id}";
const ENTRY_URI_PREFIX: &str = "tandem://memory/";
/// How many recent entries `resources/list` shows (all are readable through the template).
const LISTED_RESOURCES: usize = 50;

/// The MCP server of one connection. Cheap to clone.
#[derive(Clone)]
pub struct TandemServer {
    core: Arc<LazyCore>,
    /// The workspace root tasks are tracked in (the git toplevel where there is one).
    workspace: Arc<PathBuf>,
}

impl TandemServer {
    pub fn new(core: Arc<LazyCore>, workspace: PathBuf) -> TandemServer {
        TandemServer {
            core,
            workspace: Arc::new(workspace),
        }
    }
}

/// The tool list, built once: names, descriptions, input and output schemas.
pub static TOOLS: LazyLock<Vec<Tool>> = LazyLock::new(|| {
    let read_only = || ToolAnnotations::new().read_only(true);
    vec![
        Tool::new(
            "rekall_help",
            "Guide to using the memory: workflows, proactive triggers and citation format. Call once at the start of a session.",
            JsonObject::new(),
        )
        .with_input_schema::<HelpParams>()
        .with_output_schema::<memory::HelpOutcome>()
        .with_annotations(read_only()),
        Tool::new(
            "rekall_search",
            "Search the knowledge base. Returns compact results (id, title, score, snippet); use rekall_show(id) for details.",
            JsonObject::new(),
        )
        .with_input_schema::<SearchParams>()
        .with_output_schema::<memory::SearchOutcome>()
        .with_annotations(read_only()),
        Tool::new(
            "rekall_add",
            "Add an entry (bug, pattern, decision, pitfall, config, reference). Returns similar entries and how many suggestions were created.",
            JsonObject::new(),
        )
        .with_input_schema::<AddParams>()
        .with_output_schema::<memory::AddOutcome>(),
        Tool::new(
            "rekall_show",
            "Full details of an entry: content, metadata, access statistics and links. Use after rekall_search.",
            JsonObject::new(),
        )
        .with_input_schema::<ShowParams>()
        .with_output_schema::<EntryDetails>(),
        Tool::new(
            "rekall_suggest_links",
            "Pending link suggestions between similar entries.",
            JsonObject::new(),
        )
        .with_input_schema::<SuggestParams>()
        .with_output_schema::<memory::LinkSuggestions>()
        .with_annotations(read_only()),
        Tool::new(
            "rekall_suggest_generalize",
            "Pending generalisation suggestions: groups of similar entries that could become one semantic entry.",
            JsonObject::new(),
        )
        .with_input_schema::<SuggestParams>()
        .with_output_schema::<memory::GeneralizeSuggestions>()
        .with_annotations(read_only()),
        Tool::new(
            "rekall_link",
            "Create a link between two entries.",
            JsonObject::new(),
        )
        .with_input_schema::<LinkParams>()
        .with_output_schema::<memory::LinkOutcome>(),
        Tool::new(
            "rekall_accept_suggestion",
            "Accept a suggestion: creates the link, or returns the command that generalises.",
            JsonObject::new(),
        )
        .with_input_schema::<SuggestionParams>()
        .with_output_schema::<memory::AcceptOutcome>(),
        Tool::new(
            "rekall_reject_suggestion",
            "Reject a suggestion; it will not come back.",
            JsonObject::new(),
        )
        .with_input_schema::<SuggestionParams>()
        .with_output_schema::<memory::RejectOutcome>(),
        Tool::new("start_workflow", "Initialize a new workflow tracking session", JsonObject::new())
            .with_input_schema::<StartWorkflowParams>()
            .with_output_schema::<tasks::WorkflowStarted>(),
        Tool::new(
            "start_task",
            "Start a new task (or a subtask, with parent_task_id) and snapshot the workspace (git HEAD, or file checksums outside git)",
            JsonObject::new(),
        )
        .with_input_schema::<StartTaskParams>()
        .with_output_schema::<tasks::TaskStarted>(),
        Tool::new("log_decision", "Log an important architectural decision (0-3 per task)", JsonObject::new())
            .with_input_schema::<LogDecisionParams>()
            .with_output_schema::<tasks::Logged>(),
        Tool::new("log_issue", "Log an issue encountered during execution (0-3 per task)", JsonObject::new())
            .with_input_schema::<LogIssueParams>()
            .with_output_schema::<tasks::Logged>(),
        Tool::new("log_milestone", "Log a milestone for real-time UI updates (max 5 per task)", JsonObject::new())
            .with_input_schema::<LogMilestoneParams>()
            .with_output_schema::<tasks::Logged>(),
        Tool::new(
            "complete_task",
            "Complete a task: computes the files changed since start_task (commits, uncommitted and untracked changes) and checks them against the declared areas",
            JsonObject::new(),
        )
        .with_input_schema::<CompleteTaskParams>()
        .with_output_schema::<tasks::TaskCompleted>(),
    ]
});

/// A tool's failure: a core error with its code.
enum ToolError {
    Memory(MemoryError),
    Tasks(TaskError),
}

impl From<MemoryError> for ToolError {
    fn from(e: MemoryError) -> Self {
        ToolError::Memory(e)
    }
}

impl From<TaskError> for ToolError {
    fn from(e: TaskError) -> Self {
        ToolError::Tasks(e)
    }
}

impl ToolError {
    fn code(&self) -> &'static str {
        match self {
            ToolError::Memory(e) => e.code(),
            ToolError::Tasks(e) => e.code(),
        }
    }

    fn to_json(&self) -> Value {
        match self {
            ToolError::Memory(e) => e.to_json(),
            ToolError::Tasks(e) => e.to_json(),
        }
    }
}

/// Runs one tool by name, as an agent would: for other faces that offer the same operation
/// (the editor's memory commands). `None` when no tool has that name; an error is
/// `(code, message, spec error object)`.
pub fn run_tool(
    core: &Core,
    workspace: &std::path::Path,
    name: &str,
    args: JsonObject,
) -> Option<Result<Value, (&'static str, String, Value)>> {
    dispatch(core, workspace, name, args).map(|r| {
        r.map_err(|e| {
            let message = match &e {
                ToolError::Memory(m) => m.to_string(),
                ToolError::Tasks(t) => t.to_string(),
            };
            (e.code(), message, e.to_json())
        })
    })
}

/// Runs one tool on the core. `None` when no tool has that name.
fn dispatch(
    core: &Core,
    workspace: &std::path::Path,
    name: &str,
    args: JsonObject,
) -> Option<Result<Value, ToolError>> {
    let memory = &core.memory;
    if let Some(result) = dispatch_tasks(&core.tasks, workspace, name, &args) {
        return Some(result);
    }
    Some(
        match name {
            "rekall_search" => parse::<SearchParams>(args).and_then(|p| {
                let q = SearchQuery {
                    query: p.query,
                    context: p.context,
                    limit: p.limit,
                    entry_type: p.entry_type.as_deref().map(str::parse).transpose()?,
                    project: p.project,
                };
                memory.search(&q).map(json)
            }),
            "rekall_add" => parse::<AddParams>(args).and_then(|p| {
                let new = NewEntry {
                    entry_type: Some(p.entry_type.parse()?),
                    title: p.title,
                    content: p.content.unwrap_or_default(),
                    tags: p.tags.unwrap_or_default(),
                    context: p.context,
                    project: p.project,
                    confidence: p.confidence,
                    memory_type: p.memory_type.as_deref().map(str::parse).transpose()?,
                };
                memory.add(new).map(json)
            }),
            "rekall_show" => parse::<ShowParams>(args).and_then(|p| memory.show(&p.id).map(json)),
            "rekall_suggest_links" => parse::<SuggestParams>(args)
                .and_then(|p| memory.link_suggestions(p.limit).map(json)),
            "rekall_suggest_generalize" => parse::<SuggestParams>(args)
                .and_then(|p| memory.generalize_suggestions(p.limit).map(json)),
            "rekall_link" => parse::<LinkParams>(args).and_then(|p| {
                let relation = match p.relation_type.as_deref() {
                    Some(r) => r.parse()?,
                    None => memory::RelationType::Related,
                };
                memory.link(&p.source_id, &p.target_id, relation).map(json)
            }),
            "rekall_accept_suggestion" => parse::<SuggestionParams>(args)
                .and_then(|p| memory.accept(&p.suggestion_id).map(json)),
            "rekall_reject_suggestion" => parse::<SuggestionParams>(args)
                .and_then(|p| memory.reject(&p.suggestion_id).map(json)),
            _ => return None,
        }
        .map_err(ToolError::from),
    )
}

/// The task-tracking tools. `None` when `name` is not one of them.
fn dispatch_tasks(
    t: &Tasks,
    workspace: &std::path::Path,
    name: &str,
    args: &JsonObject,
) -> Option<Result<Value, ToolError>> {
    let args = args.clone();
    Some(match name {
        "start_workflow" => parse_tool(args).and_then(|p: StartWorkflowParams| {
            Ok(json(t.start_workflow(
                workspace,
                tasks::NewWorkflow {
                    name: p.name,
                    description: p.description,
                    plan: p.plan.unwrap_or_default(),
                },
            )?))
        }),
        "start_task" => parse_tool(args).and_then(|p: StartTaskParams| {
            Ok(json(t.start_task(
                workspace,
                tasks::NewTask {
                    workflow_id: p.workflow_id,
                    parent_task_id: p.parent_task_id,
                    name: p.name,
                    goal: p.goal,
                    areas: p.areas.unwrap_or_default(),
                },
            )?))
        }),
        "log_decision" => parse_tool(args).and_then(|p: LogDecisionParams| {
            Ok(json(t.log_decision(tasks::NewDecision {
                task_id: p.task_id,
                category: p.category.parse()?,
                question: p.question,
                options_considered: p.options_considered.unwrap_or_default(),
                chosen: p.chosen,
                reasoning: p.reasoning,
                trade_offs: p.trade_offs,
            })?))
        }),
        "log_issue" => parse_tool(args).and_then(|p: LogIssueParams| {
            Ok(json(t.log_issue(tasks::NewIssue {
                task_id: p.task_id,
                issue_type: p.issue_type.parse()?,
                description: p.description,
                resolution: p.resolution,
                requires_human_review: p.requires_human_review.unwrap_or(false),
            })?))
        }),
        "log_milestone" => parse_tool(args).and_then(|p: LogMilestoneParams| {
            Ok(json(t.log_milestone(tasks::NewMilestone {
                task_id: p.task_id,
                message: p.message,
                progress: p.progress,
                metadata: p.metadata.map(Value::Object),
            })?))
        }),
        "complete_task" => parse_tool(args).and_then(|p: CompleteTaskParams| {
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
            Ok(json(t.complete_task(tasks::Completion {
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
            })?))
        }),
        _ => return None,
    })
}

fn parse_tool<T: DeserializeOwned>(args: JsonObject) -> Result<T, ToolError> {
    parse(args).map_err(ToolError::from)
}

fn parse<T: DeserializeOwned>(args: JsonObject) -> Result<T, MemoryError> {
    serde_json::from_value(Value::Object(args))
        .map_err(|e| MemoryError::invalid_argument("arguments", e.to_string()))
}

fn json<T: Serialize>(value: T) -> Value {
    serde_json::to_value(value).expect("core results serialise to JSON")
}

/// A core error as a tool result: `isError`, the spec's error object as structured content
/// and as text.
fn tool_error(e: &ToolError) -> CallToolResult {
    if e.code() == "INTERNAL_ERROR" {
        tracing::error!("tool failed: {}", e.to_json());
    }
    CallToolResult::structured_error(e.to_json())
}

impl ServerHandler for TandemServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new("tandem", env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(TOOLS.clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        if !TOOLS.iter().any(|t| t.name == name) {
            return Err(ErrorData::invalid_params(
                format!("unknown tool '{name}'"),
                None,
            ));
        }
        let args = request.arguments.unwrap_or_default();
        if name == "rekall_help" {
            // The guide needs no data: it answers even while the memory opens.
            let result = parse::<HelpParams>(args)
                .and_then(|p| memory::help::guide(p.topic.as_deref()))
                .map(json);
            return Ok(match result {
                Ok(v) => CallToolResult::structured(v),
                Err(e) => tool_error(&e.into()),
            }
            .into());
        }
        let core = match self.core.get().await {
            Ok(c) => c,
            Err(e) => return Ok(tool_error(&e.into()).into()),
        };
        let tool = name.clone();
        let workspace = self.workspace.clone();
        let outcome =
            tokio::task::spawn_blocking(move || dispatch(&core, &workspace, &tool, args)).await;
        let result = match outcome {
            Ok(Some(Ok(value))) => CallToolResult::structured(value),
            Ok(Some(Err(e))) => tool_error(&e),
            Ok(None) => unreachable!("the tool name was checked against TOOLS"),
            Err(join) => {
                // A panic in the core answers this call with an error; the server goes on.
                tracing::error!("tool {name} panicked: {join}");
                CallToolResult::structured_error(crate::error_object(
                    "INTERNAL_ERROR",
                    &format!("tool {name} failed unexpectedly"),
                    serde_json::json!({}),
                ))
            }
        };
        Ok(result.into())
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            ResourceTemplate::new(ENTRY_URI_TEMPLATE, "memory-entry")
                .with_title("Memory entry")
                .with_description("A knowledge-base entry by ID (full ULID or a prefix of 5+ characters), as Markdown")
                .with_mime_type("text/markdown"),
        ]))
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let core = self
            .core
            .get()
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), Some(e.to_json())))?;
        let recent = tokio::task::spawn_blocking(move || core.memory.recent(LISTED_RESOURCES))
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        Ok(ListResourcesResult::with_all_items(
            recent
                .into_iter()
                .map(|e| {
                    Resource::new(format!("{ENTRY_URI_PREFIX}{}", e.id), e.id.to_string())
                        .with_title(format!("[{}] {}", e.entry_type, e.title))
                        .with_mime_type("text/markdown")
                })
                .collect(),
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri.clone();
        let Some(id) = uri.strip_prefix(ENTRY_URI_PREFIX).map(str::to_string) else {
            return Err(ErrorData::resource_not_found(
                format!("no resource '{uri}': memory entries are {ENTRY_URI_TEMPLATE}"),
                None,
            ));
        };
        let core = self
            .core
            .get()
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), Some(e.to_json())))?;
        let details = tokio::task::spawn_blocking(move || core.memory.show(&id))
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        match details {
            Ok(d) => Ok(ReadResourceResult::new(vec![
                ResourceContents::text(render_markdown(&d), uri).with_mime_type("text/markdown"),
            ])
            .into()),
            Err(e @ (MemoryError::EntryNotFound { .. } | MemoryError::AmbiguousId { .. })) => Err(
                ErrorData::resource_not_found(e.to_string(), Some(e.to_json())),
            ),
            Err(e) => Err(ErrorData::invalid_params(e.to_string(), Some(e.to_json()))),
        }
    }
}
