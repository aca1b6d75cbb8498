//! The MCP face: Tandem's sixteen tools (the memory's ten `rekall_*`, task tracking's
//! six), the gateway's five (`mcp_*`, `gateway.rs`) and the session's proxied
//! `server__tool` tools, the memory's entries as resources, and Tandem's own conventional
//! prompts; served with rmcp.
//!
//! API boundary: this module only translates. Arguments are parsed into the core's request
//! types, results are the core's (whose JSON is the spec-003 contract), and a core error
//! becomes a tool result with `isError` and the spec's error object. Protocol errors are
//! only for requests that cannot be routed (an unknown tool or resource).

pub mod gateway;
mod relay;
pub mod tasks;
use tandem_core::calls::schema;
pub mod transport;

use std::path::PathBuf;
use std::sync::{Arc, LazyLock};

use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, DiscoverResult,
    ErrorData, GetPromptRequestParams, GetPromptResponse, GetPromptResult, GetTaskParams,
    GetTaskResult, Implementation, InitializeRequestParams, InitializeResult, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    Prompt, PromptMessage, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    Resource, ResourceContents, ResourceTemplate, Role, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations, UpdateTaskParams,
};
use rmcp::service::{NotificationContext, RequestContext, RoleServer};
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::render::entry_markdown;
use tandem_core::calls::params::{HelpParams, OwnPromptParams, RecentParams, ShowParams};
use tandem_core::calls::{self, CallError};
use tandem_core::core::LazyCore;
use tandem_core::hub::client::ask::Answerer;
use tandem_core::hub::gateway::Gateway;
use tandem_core::memory;

/// What the agent is told at connection: the spec's "three lines".
pub const INSTRUCTIONS: &str = "Tandem memory: a shared knowledge base of bugs, patterns, decisions, pitfalls, configs and references.\n\
Call `rekall_help()` once at the start of a session: it explains when to search, what to capture and how to cite.\n\
Search (`rekall_search`) before solving a problem; capture (`rekall_add`) what you learned after.\n\
Track each piece of work: `start_workflow`, `start_task` (with the `areas` you will touch), then `complete_task`; Tandem computes the files changed.";

/// URI template of a memory entry resource.
pub const ENTRY_URI_TEMPLATE: &str = "tandem://memory/{id}";
const ENTRY_URI_PREFIX: &str = "tandem://memory/";
/// How many recent entries `resources/list` shows (all are readable through the template).
const LISTED_RESOURCES: i64 = 50;

/// Who makes a request. On the HTTP face, a token's user (the author of what the request
/// writes) and whether that token is read-only, put in the request's extensions by
/// [`crate::http`]; elsewhere (stdio, the daemon's socket) the default: the local user, with
/// every right and no name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caller {
    pub user: Option<String>,
    pub read_only: bool,
}

impl Caller {
    /// The caller of a request: the HTTP face's, else the local user.
    pub fn of(context: &RequestContext<RoleServer>) -> Caller {
        context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Caller>())
            .cloned()
            .unwrap_or_default()
    }
}

/// The error a read-only token gets from a tool that writes.
pub const PERMISSION_DENIED: &str = "PERMISSION_DENIED";

/// Tools a read-only token may call: those annotated read-only, `rekall_show` (which only
/// counts the access) and the gateway's two that only look. Proxied tools and activation
/// are refused: what a downstream tool does is not known.
fn allowed_read_only(name: &str) -> bool {
    matches!(name, "rekall_show" | "mcp_environment" | "mcp_discover")
        || TOOLS.iter().any(|t| {
            t.tool.name == name
                && t.tool
                    .annotations
                    .as_ref()
                    .and_then(|a| a.read_only_hint)
                    .unwrap_or(false)
        })
}

/// The MCP server of one connection. Cheap to clone.
#[derive(Clone)]
pub struct TandemServer {
    core: Arc<LazyCore>,
    /// The workspace root tasks are tracked in (the git toplevel where there is one).
    workspace: Arc<PathBuf>,
    /// The session's gateway, made on first use (it needs the core).
    gateway: Arc<tokio::sync::OnceCell<Arc<Gateway>>>,
    /// Tells the session's notifier that this session changed its tools itself.
    tools_changed: Arc<tokio::sync::Notify>,
    /// The servers' part of the instructions, made once the session's first answer has
    /// waited for the boot servers ([`TandemServer::boot`]).
    boot: Arc<tokio::sync::OnceCell<String>>,
    /// The user's config file, read to know whether to wait for a core not open yet.
    user_config: Option<Arc<PathBuf>>,
    /// The agent, as the servers its calls reach ask it (made from its connection).
    agent: Arc<std::sync::OnceLock<Arc<dyn Answerer>>>,
    /// The downstream tasks this session got (the tasks extension).
    tasks: Arc<tasks::Tasks>,
}

impl TandemServer {
    pub fn new(core: Arc<LazyCore>, workspace: PathBuf) -> TandemServer {
        TandemServer {
            core,
            workspace: Arc::new(workspace),
            gateway: Default::default(),
            tools_changed: Default::default(),
            boot: Default::default(),
            user_config: None,
            agent: Default::default(),
            tasks: Default::default(),
        }
    }

    /// The session's agent, as servers ask it ([`gateway::Agent`]).
    fn agent(&self, peer: &rmcp::service::Peer<RoleServer>) -> Arc<dyn Answerer> {
        self.agent
            .get_or_init(|| Arc::new(gateway::Agent::new(peer.clone())))
            .clone()
    }

    /// Keeps the session's downstream tasks in `tasks`, shared with other sessions (the HTTP
    /// face's, whose stateless requests each make a server of their own).
    pub fn with_tasks(mut self, tasks: Arc<tasks::Tasks>) -> TandemServer {
        self.tasks = tasks;
        self
    }

    /// Where the user's config is, for a session whose core opens in the background: its
    /// first answer waits for the core only when the config has boot servers (else it
    /// answers at once). Without it, that answer waits for the core, within the wait.
    pub fn with_user_config(mut self, file: PathBuf) -> TandemServer {
        self.user_config = Some(Arc::new(file));
        self
    }

    /// Waits, once a session, for what its first answers (`initialize`, the first lists)
    /// should hold: the boot servers still starting, and their conventional system prompts
    /// and tool instructions; within the user's `bootWaitMs` in all, the core's opening
    /// included. Answers the servers' part of the instructions.
    async fn boot(&self) -> &str {
        self.boot.get_or_init(|| self.wait_for_boot()).await
    }

    async fn wait_for_boot(&self) -> String {
        let start = tokio::time::Instant::now();
        let gateway = match self.core.opened() {
            Some(_) => self.gateway().await.ok(),
            None => {
                let wait = match &self.user_config {
                    Some(file) => {
                        let (wait, boots) =
                            tandem_core::hub::config::boot_plan(file, &self.workspace);
                        if !boots {
                            return String::new();
                        }
                        wait
                    }
                    None => tandem_core::hub::config::DEFAULT_BOOT_WAIT,
                };
                match tokio::time::timeout_at(start + wait, self.gateway()).await {
                    Ok(Ok(g)) => Some(g),
                    _ => None,
                }
            }
        };
        let Some(gateway) = gateway else {
            return String::new();
        };
        let wait = gateway.boot_wait();
        let deadline = start + wait;
        // The last quarter of the wait is the ready servers' to give their prompts: a server
        // that hangs at start would otherwise leave them no time at all.
        gateway.settle_boot(deadline - wait / 4).await;
        gateway.servers_part(deadline).await
    }

    /// The session's gateway on its workspace's servers (the core opened first).
    async fn gateway(&self) -> Result<Arc<Gateway>, CallError> {
        let core = self.core.get().await?;
        let gateway = self
            .gateway
            .get_or_init(|| async { Arc::new(Gateway::new(core.hub.workspace(&self.workspace))) })
            .await;
        Ok(gateway.clone())
    }

    /// A gateway tool, or a proxied `server__tool`; anything else is an unknown tool.
    async fn call_gateway(
        &self,
        name: &str,
        arguments: Option<rmcp::model::JsonObject>,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let unknown = || ErrorData::invalid_params(format!("unknown tool '{name}'"), None);
        let gateway_tool = gateway::is_gateway_tool(name);
        if !gateway_tool && !name.contains(tandem_core::hub::gateway::proxy::SEPARATOR) {
            return Err(unknown());
        }
        let g = match self.gateway().await {
            Ok(g) => g,
            Err(e) if gateway_tool => return Ok(tool_error(&e).into()),
            Err(_) => return Err(unknown()),
        };
        let bus = self.core.opened().map(|core| core.bus().clone());
        if name == "mcp_call" && relay::applies(context) {
            let p = match calls::parse::<gateway::CallParams>(Value::Object(
                arguments.unwrap_or_default(),
            )) {
                Ok(p) => p,
                Err(e) => return Ok(tool_error(&e).into()),
            };
            return self
                .relay(g, p.server, p.tool, p.arguments, context, true)
                .await;
        }
        if gateway_tool {
            let args = Value::Object(arguments.unwrap_or_default());
            let agent = self.agent(&context.peer);
            let (result, changed) =
                gateway::run(&g, name, args, context, agent, bus.as_ref()).await;
            if changed {
                self.tools_changed.notify_one();
            }
            return Ok(result.into());
        }
        let Some((server, tool)) = gateway::resolve(&g, name) else {
            return Err(unknown());
        };
        if relay::applies(context) {
            return self.relay(g, server, tool, arguments, context, false).await;
        }
        let agent = self.agent(&context.peer);
        // An agent that takes tasks gets the server's task.
        if tasks::takes_tasks(context) {
            return tasks::call(&self.tasks, &g, &server, &tool, arguments, context, agent).await;
        }
        gateway::answered(
            gateway::forward(&g, &server, &tool, arguments, context, agent, bus.as_ref()).await,
        )
    }

    /// Calls `tool` of `server` for a 2026-07-28 agent, whose questions come back in the
    /// call's result ([`relay`]). An agent that takes tasks gets the server's task
    /// ([`tasks`]), except through `mcp_call`, which answers every failure as a tool error.
    async fn relay(
        &self,
        g: Arc<Gateway>,
        server: String,
        tool: String,
        arguments: Option<rmcp::model::JsonObject>,
        context: &RequestContext<RoleServer>,
        mcp_call: bool,
    ) -> Result<CallToolResponse, ErrorData> {
        let owner = Caller::of(context).user;
        let limit = g.question_timeout(&server);
        let tasks = (!mcp_call && tasks::takes_tasks(context)).then(|| self.tasks.clone());
        let caller = owner.clone();
        relay::start(context, owner, limit, move |agent, progress| async move {
            if let Some(tasks) = tasks {
                return tasks::hand_over(&tasks, &g, &server, &tool, arguments, caller, agent)
                    .await;
            }
            let outcome = g
                .call(&server, &tool, arguments, progress, Some(agent))
                .await;
            if mcp_call {
                return Ok(gateway::proxied(outcome).into());
            }
            gateway::answered(outcome)
        })
        .await
    }

    /// The agent's instructions: the spec's three lines; the servers' own system prompts
    /// and tool instructions, once the session waited for them ([`TandemServer::boot`]);
    /// then, when the core is open, the catalog of servers (spec 001); then how to use the
    /// gateway.
    fn instructions(&self) -> String {
        let catalog = match (self.core.opened(), self.gateway.get()) {
            (_, Some(g)) => Some(g.catalog()),
            (Some(core), None) => {
                let gateway = Gateway::new(core.hub.workspace(&self.workspace));
                let catalog = gateway.catalog();
                let _ = self.gateway.set(Arc::new(gateway));
                Some(catalog)
            }
            (None, None) => None,
        };
        let catalog = catalog.unwrap_or_else(|| {
            "# MCP Server Environment\n\nCall `mcp_environment` to see the MCP servers available through Tandem.\n".to_string()
        });
        let servers = self
            .boot
            .get()
            .filter(|part| !part.is_empty())
            .map(|part| format!("{part}\n"))
            .unwrap_or_default();
        format!(
            "{INSTRUCTIONS}\n\n{servers}{catalog}\n{}",
            tandem_core::hub::gateway::catalog::ORCHESTRATION
        )
    }
}

/// A downstream server's failure on a proxied prompt or resource: its own JSON-RPC error as
/// it gave it, anything else [`internal_error`].
fn downstream_error(e: tandem_core::hub::HubError) -> ErrorData {
    match e {
        tandem_core::hub::HubError::Answered { error, .. } => error,
        e => internal_error(e),
    }
}

/// A failure serving a prompt or a resource, as a protocol error carrying the error object
/// (a tool answers with a tool error instead).
fn internal_error(e: impl Into<CallError>) -> ErrorData {
    let e = e.into();
    ErrorData::internal_error(e.to_string(), Some(e.to_json()))
}

/// A tool: its definition, and the method it runs (none for `rekall_help`, which needs no
/// data).
struct McpTool {
    tool: Tool,
    method: Option<&'static dyn calls::AnyMethod>,
}

/// A tool running `method`, with its parameters' and result's schemas.
fn tool<P, R>(
    name: &'static str,
    description: &'static str,
    method: &'static calls::Method<P, R>,
) -> McpTool
where
    P: DeserializeOwned + JsonSchema + 'static,
    R: Serialize + JsonSchema + 'static,
{
    McpTool {
        tool: definition::<P, R>(name, description),
        method: Some(method),
    }
}

/// A tool's definition: its arguments `P` and its result `R` as flat schemas.
fn definition<P: JsonSchema, R: JsonSchema>(name: &'static str, description: &'static str) -> Tool {
    Tool::new(name, description, schema::input::<P>()).with_raw_output_schema(schema::output::<R>())
}

fn read_only(mut t: McpTool) -> McpTool {
    t.tool = t
        .tool
        .with_annotations(ToolAnnotations::new().read_only(true));
    t
}

/// The tool list, built once: names, descriptions, input and output schemas.
static TOOLS: LazyLock<Vec<McpTool>> = LazyLock::new(|| {
    vec![
        read_only(McpTool {
            tool: definition::<HelpParams, memory::HelpOutcome>(
                "rekall_help",
                "Guide to using the memory: workflows, proactive triggers and citation format. Call once at the start of a session.",
            ),
            method: None,
        }),
        read_only(tool(
            "rekall_search",
            "Search the knowledge base. Returns compact results (id, title, score, snippet); use rekall_show(id) for details.",
            &calls::MEMORY_SEARCH,
        )),
        tool(
            "rekall_add",
            "Add an entry (bug, pattern, decision, pitfall, config, reference). Returns similar entries and how many suggestions were created.",
            &calls::MEMORY_ADD,
        ),
        tool(
            "rekall_show",
            "Full details of an entry: content, metadata, access statistics and links. Use after rekall_search.",
            &calls::MEMORY_SHOW,
        ),
        read_only(tool(
            "rekall_suggest_links",
            "Pending link suggestions between similar entries.",
            &calls::MEMORY_LINK_SUGGESTIONS,
        )),
        read_only(tool(
            "rekall_suggest_generalize",
            "Pending generalisation suggestions: groups of similar entries that could become one semantic entry.",
            &calls::MEMORY_GENERALIZE_SUGGESTIONS,
        )),
        read_only(tool(
            "rekall_suggest_entries",
            "Pending entry suggestions: entries learned from completed tasks' decisions and issues. Accept one to add it as an ordinary entry, or reject it.",
            &calls::MEMORY_ENTRY_SUGGESTIONS,
        )),
        tool(
            "rekall_link",
            "Create a link between two entries.",
            &calls::MEMORY_LINK,
        ),
        tool(
            "rekall_accept_suggestion",
            "Accept a suggestion: creates the link, returns the command that generalises, or adds the suggested entry (its id in entry_created).",
            &calls::MEMORY_ACCEPT,
        ),
        tool(
            "rekall_reject_suggestion",
            "Reject a suggestion; it will not come back.",
            &calls::MEMORY_REJECT,
        ),
        tool(
            "start_workflow",
            "Initialize a new workflow tracking session",
            &calls::TASKS_START_WORKFLOW,
        ),
        tool(
            "start_task",
            "Start a new task (or a subtask, with parent_task_id) and snapshot the workspace (git HEAD, or file checksums outside git)",
            &calls::TASKS_START_TASK,
        ),
        tool(
            "log_decision",
            "Log an important architectural decision (0-3 per task)",
            &calls::TASKS_LOG_DECISION,
        ),
        tool(
            "log_issue",
            "Log an issue encountered during execution (0-3 per task)",
            &calls::TASKS_LOG_ISSUE,
        ),
        tool(
            "log_milestone",
            "Log a milestone for real-time UI updates (max 5 per task)",
            &calls::TASKS_LOG_MILESTONE,
        ),
        tool(
            "complete_task",
            "Complete a task: computes the files changed since start_task (commits, uncommitted and untracked changes) and checks them against the declared areas; its decisions and issues become memory suggestions to review (memory_suggestions)",
            &calls::TASKS_COMPLETE_TASK,
        ),
    ]
});

/// A core error as a tool result: `isError`, the spec's error object as structured content
/// and as text.
fn tool_error(e: &CallError) -> CallToolResult {
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
                .enable_tool_list_changed()
                .enable_resources()
                .enable_resources_list_changed()
                .enable_prompts()
                .enable_prompts_list_changed()
                .enable_tasks()
                .build(),
        )
        .with_server_info(Implementation::new("tandem", env!("CARGO_PKG_VERSION")))
        .with_instructions(self.instructions())
    }

    /// Answered once the boot servers are in (bounded: [`TandemServer::boot`]), so that the
    /// instructions, which no notification updates, hold them.
    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        context.peer.set_peer_info(request.clone());
        self.boot().await;
        self.negotiate_initialize(&request)
    }

    /// A 2026-07-28 client's first request: its instructions too wait for the boot servers.
    async fn discover(
        &self,
        _context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, ErrorData> {
        self.boot().await;
        Ok(DiscoverResult::from_server_info(
            self.supported_protocol_versions().into_owned(),
            self.get_info(),
        ))
    }

    /// Once the client is ready, its proxied tools' changes are sent to it.
    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let this = self.clone();
        tokio::spawn(async move {
            let Ok(gateway) = this.gateway().await else {
                return;
            };
            let Some(core) = this.core.opened() else {
                return;
            };
            let bus = core.bus().clone();
            let weak = Arc::downgrade(&gateway);
            let poke = this.tools_changed.clone();
            // Only the session holds its gateway: `this` (whose cell holds it too) goes
            // here, or the gateway, and the servers it activated, would outlive the session.
            drop((gateway, core, this));
            gateway::notify_changes(weak, bus, context.peer, poke).await;
        });
    }

    /// The agent's roots changed: the session's servers are told, and ask it for them.
    async fn on_roots_list_changed(&self, context: NotificationContext<RoleServer>) {
        let agent = self.agent(&context.peer);
        if let Some(gateway) = self.gateway.get() {
            gateway.roots_changed(&agent).await;
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.boot().await;
        let mut tools: Vec<Tool> = TOOLS.iter().map(|t| t.tool.clone()).collect();
        tools.extend(gateway::tools());
        // The core may not open (the data dir held elsewhere): the tools above still list.
        if let Ok(gateway) = self.gateway().await {
            tools.extend(gateway.tools());
        }
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        let caller = Caller::of(&context);
        if caller.read_only && !allowed_read_only(&name) {
            let user = caller.user.unwrap_or_default();
            let e = CallError::new(
                PERMISSION_DENIED,
                format!("the token '{user}' is read-only: {name} writes, or may write"),
                serde_json::json!({ "tool": name, "user": user }),
            );
            return Ok(tool_error(&e).into());
        }
        if let Some(state) = &request.request_state
            && relay::applies(&context)
        {
            // A 2026-07-28 agent's retry with its answers: the call it made goes on.
            let answers = request.input_responses.clone().unwrap_or_default();
            return relay::resume(&context, caller.user.clone(), state, answers).await;
        }
        let Some(tool) = TOOLS.iter().find(|t| t.tool.name == name) else {
            return self.call_gateway(&name, request.arguments, &context).await;
        };
        let args = Value::Object(request.arguments.unwrap_or_default());
        let Some(method) = tool.method else {
            // The guide needs no data: it answers even while the memory opens.
            let result = calls::parse::<HelpParams>(args)
                .and_then(|p| Ok(memory::help::guide(p.topic.as_deref())?));
            return Ok(match result {
                Ok(v) => CallToolResult::structured(
                    serde_json::to_value(v).expect("the guide serialises to JSON"),
                ),
                Err(e) => tool_error(&e),
            }
            .into());
        };
        let core = match self.core.get().await {
            Ok(c) => c,
            Err(e) => return Ok(tool_error(&e.into()).into()),
        };
        let workspace = self.workspace.clone();
        let what = format!("tool {name}");
        let outcome = calls::spawn_call(&what, move || {
            let session = calls::Session {
                workspace: Some(&workspace),
                author: caller.user.as_deref(),
            };
            method.call(&core, &session, args)
        })
        .await;
        Ok(match outcome {
            Ok(value) => CallToolResult::structured(value),
            Err(e) => tool_error(&e),
        }
        .into())
    }

    /// The tasks extension: the session's downstream tasks ([`tasks::Tasks`]).
    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let owner = Caller::of(&context).user;
        self.tasks.get(&request.task_id, &owner).await
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let owner = Caller::of(&context).user;
        self.tasks
            .update(&request.task_id, &owner, request.input_responses)
            .await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let owner = Caller::of(&context).user;
        self.tasks.cancel(&request.task_id, &owner).await
    }

    /// Tandem's own conventional prompts (spec 000): clients that inject `system_prompt`
    /// and `tool_call:*`/`tool_result:*` pairs pick them up.
    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        self.boot().await;
        let mut prompts: Vec<Prompt> = tandem_core::hub::prompts::own::PROMPTS
            .iter()
            .map(|(name, description)| Prompt::new(*name, Some(*description), None))
            .collect();
        // The active servers' prompts follow, as `server__prompt`.
        if let Ok(gateway) = self.gateway().await {
            prompts.extend(gateway.prompts());
        }
        Ok(ListPromptsResult::with_all_items(prompts))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let Some((name, description)) = tandem_core::hub::prompts::own::PROMPTS
            .iter()
            .find(|(n, _)| *n == request.name)
        else {
            if request
                .name
                .contains(tandem_core::hub::gateway::proxy::SEPARATOR)
                && let Ok(gateway) = self.gateway().await
                && let Some(got) = gateway
                    .get_prompt(
                        &request.name,
                        request.arguments.clone().unwrap_or_default(),
                        Some(self.agent(&context.peer)),
                    )
                    .await
            {
                return match got {
                    Ok(result) => Ok(result.into()),
                    Err(e) => Err(downstream_error(e)),
                };
            }
            return Err(ErrorData::invalid_params(
                format!(
                    "unknown prompt '{}' (known: {})",
                    request.name,
                    tandem_core::hub::prompts::own::PROMPTS
                        .iter()
                        .map(|(n, _)| *n)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                None,
            ));
        };
        let core = self.core.get().await.map_err(internal_error)?;
        let workspace = self.workspace.clone();
        let wanted = OwnPromptParams {
            name: name.to_string(),
        };
        let prompt = calls::run_blocking(&format!("prompt {name}"), move || {
            calls::HUB_OWN_PROMPT.run(&core, Some(&workspace), wanted)
        })
        .await
        .map_err(internal_error)?
        .map_err(internal_error)?;
        // The role of a conventional prompt comes from its name; the message itself says user,
        // except the simulated tool call, which the assistant makes.
        let mut text = prompt.text;
        if *name == tandem_core::hub::prompts::own::SYSTEM_PROMPT
            && let Ok(gateway) = self.gateway().await
        {
            // The conventional system prompt carries the catalog too (spec 001, step 3).
            text = format!(
                "{text}\n\n{}\n{}",
                gateway.catalog(),
                tandem_core::hub::gateway::catalog::ORCHESTRATION
            );
        }
        let role = if *name == tandem_core::hub::prompts::own::MEMORY_INDEX_CALL {
            Role::Assistant
        } else {
            Role::User
        };
        Ok(
            GetPromptResult::new(vec![PromptMessage::new_text(role, text)])
                .with_description(*description)
                .into(),
        )
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
        self.boot().await;
        let core = self.core.get().await.map_err(internal_error)?;
        let workspace = self.workspace.clone();
        let recent = RecentParams {
            limit: Some(LISTED_RESOURCES),
        };
        let recent = calls::run_blocking("listing resources", move || {
            calls::MEMORY_RECENT.run(&core, Some(&workspace), recent)
        })
        .await
        .map_err(internal_error)?
        .map_err(internal_error)?;
        let mut resources: Vec<Resource> = recent
            .into_iter()
            .map(|e| {
                Resource::new(format!("{ENTRY_URI_PREFIX}{}", e.id), e.id.to_string())
                    .with_title(format!("[{}] {}", e.entry_type, e.title))
                    .with_mime_type("text/markdown")
            })
            .collect();
        // The active servers' resources follow, named `server__name`.
        if let Ok(gateway) = self.gateway().await {
            resources.extend(gateway.resources());
        }
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri.clone();
        let Some(id) = uri.strip_prefix(ENTRY_URI_PREFIX).map(str::to_string) else {
            if let Ok(gateway) = self.gateway().await
                && let Some(read) = gateway
                    .read_resource(&uri, Some(self.agent(&context.peer)))
                    .await
            {
                return match read {
                    Ok(result) => Ok(result.into()),
                    Err(e) => Err(downstream_error(e)),
                };
            }
            return Err(ErrorData::resource_not_found(
                format!("no resource '{uri}': memory entries are {ENTRY_URI_TEMPLATE}"),
                None,
            ));
        };
        let core = self.core.get().await.map_err(internal_error)?;
        let workspace = self.workspace.clone();
        let details = calls::run_blocking("reading a resource", move || {
            calls::MEMORY_SHOW.run(&core, Some(&workspace), ShowParams { id })
        })
        .await
        .map_err(internal_error)?;
        match details {
            Ok(d) => Ok(ReadResourceResult::new(vec![
                ResourceContents::text(entry_markdown(&d), uri).with_mime_type("text/markdown"),
            ])
            .into()),
            Err(e) if matches!(e.code(), "ENTRY_NOT_FOUND" | "AMBIGUOUS_ID") => Err(
                ErrorData::resource_not_found(e.to_string(), Some(e.to_json())),
            ),
            Err(e) => Err(ErrorData::invalid_params(e.to_string(), Some(e.to_json()))),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::TOOLS;

    /// The tools advertise the limits the calls enforce: every limited field an agent can
    /// send is found in a tool's schema (a renamed field would leave its limit behind), and
    /// carries its limit.
    #[test]
    fn tool_schemas_advertise_every_limit() {
        let mut found = BTreeSet::new();
        for t in TOOLS.iter() {
            let mut schema = t.tool.input_schema.as_ref().clone();
            found.extend(tandem_core::limits::annotate(&mut schema));
        }
        let missing: Vec<&str> = tandem_core::limits::FIELDS
            .iter()
            .map(|&(name, _)| name)
            .filter(|name| !found.contains(name))
            .collect();
        // Fields of calls that only the editors and the CLI make (suggestion kinds, an
        // import's JSON Lines, a live diff's paths): found in those calls' parameters.
        let elsewhere = ["kind", "entry_ids", "jsonl", "paths"];
        assert_eq!(missing, elsewhere);
        let mut in_calls = BTreeSet::new();
        for method in tandem_core::calls::methods() {
            let schema = tandem_core::calls::params_schema(method).unwrap();
            in_calls.extend(tandem_core::limits::annotate(
                &mut schema.as_object().unwrap().clone(),
            ));
        }
        for name in elsewhere {
            assert!(in_calls.contains(name), "no call has {name}");
        }
        let add = TOOLS.iter().find(|t| t.tool.name == "rekall_add").unwrap();
        let properties = &add.tool.input_schema["properties"];
        assert_eq!(properties["content"]["maxLength"], 100_000);
        assert_eq!(properties["tags"]["maxItems"], 50);
        assert_eq!(properties["tags"]["items"]["maxLength"], 100);
        let complete = TOOLS
            .iter()
            .find(|t| t.tool.name == "complete_task")
            .unwrap();
        let outcome = &complete.tool.input_schema["properties"]["outcome"]["properties"];
        assert_eq!(outcome["summary"]["maxLength"], 20_000);
        assert_eq!(outcome["next_steps"]["items"]["maxLength"], 2_000);
    }
}
