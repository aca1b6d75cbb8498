//! The gateway's tools on the MCP face (spec 001): `mcp_environment`, `mcp_discover`,
//! `mcp_activate`, `mcp_deactivate`, and `mcp_call` for clients that do not refresh their
//! tool list; and the session's proxied `server__tool` tools.
//!
//! The session's [`Gateway`] (in the hub) holds what this agent session activated, so it
//! lives with the session: the face creates it on first use and calls it directly, the one
//! place the face reaches the hub without `calls` (a call holds no session). Tool lists
//! prompts and resources change as servers are activated, become ready or change theirs;
//! the session is told with `notifications/tools/list_changed`, `prompts/list_changed` and
//! `resources/list_changed`, at most once per [`NOTIFY_WINDOW`].

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolResult, ClientCapabilities, ClientResult, ErrorData, JsonObject,
    ProgressNotificationParam, ProtocolVersion, ServerRequest, Tool, ToolAnnotations,
};
use rmcp::service::{Peer, RequestContext, RoleServer};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::schema;
use tandem_core::calls::{self, CallError};
use tandem_core::events::Event;
use tandem_core::hub::HubError;
use tandem_core::hub::client::ask::{self, Answerer, Kind};
use tandem_core::hub::gateway::catalog::{Discovered, ServerInfo};
use tandem_core::hub::gateway::proxy;
use tandem_core::hub::gateway::{Activated, Deactivated, Gateway};

/// Changes within this window reach the agent as one `tools/list_changed`.
const NOTIFY_WINDOW: Duration = Duration::from_millis(50);

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EnvironmentParams {}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DiscoverParams {
    /// What the user wants done, in a few words ("deploy", "payments", "scrape a site").
    pub intent: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServerParams {
    /// The server's name, as `mcp_environment` lists it.
    pub name: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CallParams {
    /// An active server's name.
    pub server: String,
    /// The tool's name on that server (as the server names it, not `server__tool`).
    pub tool: String,
    /// The tool's arguments.
    #[serde(default)]
    pub arguments: Option<JsonObject>,
}

/// `mcp_environment`'s answer.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Environment {
    pub servers: Vec<ServerInfo>,
}

/// `mcp_discover`'s answer.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Discovery {
    pub intent: String,
    /// At most 5, best first.
    pub servers: Vec<Discovered>,
}

/// The gateway's tools, as listed.
pub fn tools() -> Vec<Tool> {
    let read_only = || ToolAnnotations::new().read_only(true);
    vec![
        definition::<EnvironmentParams, Environment>(
            "mcp_environment",
            "Every MCP server available through Tandem: status (active, available, missing-credentials, disabled, untrusted), category, whether it is core, what it does, and the credential keys it lacks.",
        )
        .with_annotations(read_only()),
        definition::<DiscoverParams, Discovery>(
            "mcp_discover",
            "Find the MCP servers that fit an intent (\"deploy\", \"payments\", \"scraping\"): the top 5 with their readiness.",
        )
        .with_annotations(read_only()),
        definition::<ServerParams, Activated>(
            "mcp_activate",
            "Load an MCP server into this session: its tools become available as server__tool (also callable through mcp_call). Session-scoped; not persisted.",
        ),
        definition::<ServerParams, Deactivated>(
            "mcp_deactivate",
            "Unload an MCP server this session activated, when done (saves tokens). Core and boot servers stay.",
        ),
        rmcp::model::Tool::new(
            "mcp_call",
            "Call a tool of an active MCP server by server and tool name, for clients whose tool list does not refresh after mcp_activate.",
            schema::input::<CallParams>(),
        ),
    ]
}

fn definition<P: JsonSchema, R: JsonSchema>(name: &'static str, description: &'static str) -> Tool {
    Tool::new(name, description, schema::input::<P>()).with_raw_output_schema(schema::output::<R>())
}

/// Whether `name` is one of the gateway's own tools.
pub fn is_gateway_tool(name: &str) -> bool {
    matches!(
        name,
        "mcp_environment" | "mcp_discover" | "mcp_activate" | "mcp_deactivate" | "mcp_call"
    )
}

fn structured(value: impl Serialize) -> CallToolResult {
    CallToolResult::structured(serde_json::to_value(value).expect("plain data"))
}

fn tool_error(e: CallError) -> CallToolResult {
    CallToolResult::structured_error(e.to_json())
}

/// An agent session as the servers its calls reach can ask it ([`ask`]): their questions
/// go to its client as they are, when the client declared it takes them.
pub struct Agent {
    peer: Peer<RoleServer>,
}

impl Agent {
    pub fn new(peer: Peer<RoleServer>) -> Agent {
        Agent { peer }
    }
}

impl Answerer for Agent {
    fn takes(&self, kind: Kind) -> bool {
        let Some(info) = self.peer.peer_info() else {
            return false;
        };
        // A 2026-07-28 client takes no request from a server (rmcp refuses to send one): its
        // calls are asked through their results instead ([`super::relay`]).
        if info.protocol_version >= ProtocolVersion::V_2026_07_28 {
            return false;
        }
        declares(&info.capabilities, kind)
    }

    fn ask(&self, request: ServerRequest) -> ask::Pending<Result<ClientResult, ErrorData>> {
        let peer = self.peer.clone();
        Box::pin(async move {
            let options = rmcp::service::PeerRequestOptions::no_options();
            let mut handle = peer
                .send_request_with_option(request, options)
                .await
                .map_err(|e| {
                    ErrorData::internal_error(
                        format!("the agent's client could not be asked: {e}"),
                        None,
                    )
                })?;
            let mut asked = Asked {
                peer: peer.clone(),
                id: Some(handle.id.clone()),
            };
            let answer = (&mut handle.rx).await;
            asked.id = None;
            match answer {
                Ok(Ok(result)) => Ok(result),
                Ok(Err(rmcp::ServiceError::McpError(e))) => Err(e),
                Ok(Err(e)) => Err(ErrorData::internal_error(
                    format!("the agent's client did not answer: {e}"),
                    None,
                )),
                Err(_) => Err(ErrorData::internal_error(
                    "the agent's session ended before it answered",
                    None,
                )),
            }
        })
    }
}

/// Whether a client that declared `c` takes questions of this kind (form and URL
/// elicitation are separate capabilities).
pub fn declares(c: &ClientCapabilities, kind: Kind) -> bool {
    match kind {
        // An empty `elicitation` object is form mode, as before URL mode existed.
        Kind::Form => c
            .elicitation
            .as_ref()
            .is_some_and(|e| e.form.is_some() || e.url.is_none()),
        Kind::Url => c.elicitation.as_ref().is_some_and(|e| e.url.is_some()),
        Kind::Sampling => c.sampling.is_some(),
        Kind::Roots => c.roots.is_some(),
    }
}

/// A question put to the agent: withdrawn (`notifications/cancelled`) if dropped before
/// its answer.
struct Asked {
    peer: Peer<RoleServer>,
    id: Option<rmcp::model::RequestId>,
}

impl Drop for Asked {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            let peer = self.peer.clone();
            tokio::spawn(async move {
                let why = Some("the call that asked it ended, or it timed out".to_string());
                let cancelled = rmcp::model::CancelledNotificationParam::new(Some(id), why);
                let _ = peer.notify_cancelled(cancelled).await;
            });
        }
    }
}

/// Runs one of the gateway's tools; `true` with it when the session's tools changed.
/// `context` is the agent's request: `mcp_call` forwards its progress and cancellation, and
/// `agent` answers what the server asks meanwhile.
pub async fn run(
    gateway: &Gateway,
    name: &str,
    args: Value,
    context: &RequestContext<RoleServer>,
    agent: Arc<dyn Answerer>,
    bus: Option<&tandem_core::events::Bus>,
) -> (CallToolResult, bool) {
    let result = match name {
        "mcp_environment" => calls::parse::<EnvironmentParams>(args).map(|_| {
            structured(Environment {
                servers: gateway.environment(),
            })
        }),
        "mcp_discover" => calls::parse::<DiscoverParams>(args).map(|p| {
            structured(Discovery {
                servers: gateway.discover(&p.intent),
                intent: p.intent,
            })
        }),
        "mcp_activate" => match calls::parse::<ServerParams>(args) {
            Ok(p) => {
                let activation = gateway.activate(&p.name);
                let outcome =
                    with_url_elicitation(activation, bus, gateway, &p.name, &context.peer, &*agent)
                        .await;
                return match outcome {
                    Ok(activated) => (structured(activated), true),
                    Err(e) => (tool_error(e.into()), false),
                };
            }
            Err(e) => Err(e),
        },
        "mcp_deactivate" => match calls::parse::<ServerParams>(args) {
            Ok(p) => {
                return match gateway.deactivate(&p.name) {
                    Ok(gone) => (structured(gone), true),
                    Err(e) => (tool_error(e.into()), false),
                };
            }
            Err(e) => Err(e),
        },
        "mcp_call" => match calls::parse::<CallParams>(args) {
            Ok(p) => {
                let forwarded = forward(
                    gateway,
                    &p.server,
                    &p.tool,
                    p.arguments,
                    context,
                    agent,
                    bus,
                );
                match forwarded.await {
                    Ok(result) => Ok(result),
                    Err(e) => Err(e.into()),
                }
            }
            Err(e) => Err(e),
        },
        other => Err(CallError::new(
            calls::UNKNOWN_METHOD,
            format!("unknown gateway tool '{other}'"),
            Value::Object(Default::default()),
        )),
    };
    (result.unwrap_or_else(tool_error), false)
}

/// Runs `activation` of `server`; meanwhile, when the agent's client takes URL-mode
/// elicitation, each sign-in to that server that starts is also put to the user through it
/// (`elicitation/create`, mode `url`). The sign-in ends on its loopback redirect either way:
/// the client's answer is only how the user came to the page.
async fn with_url_elicitation<F: std::future::Future>(
    activation: F,
    bus: Option<&tandem_core::events::Bus>,
    gateway: &Gateway,
    server: &str,
    peer: &Peer<RoleServer>,
    agent: &dyn Answerer,
) -> F::Output {
    let Some(bus) = bus.filter(|_| agent.takes(Kind::Url)) else {
        return activation.await;
    };
    let mut events = bus.subscribe();
    tokio::pin!(activation);
    loop {
        tokio::select! {
            done = &mut activation => return done,
            event = events.recv() => match event {
                Ok(Event::SignIn { workspace, server: s, url })
                    if workspace == gateway.root() && s == server =>
                {
                    let peer = peer.clone();
                    let message = format!("Server '{server}' waits for you to sign in");
                    tokio::spawn(async move {
                        let params = rmcp::model::ElicitRequestParams::UrlElicitationParams {
                            meta: None,
                            message,
                            url,
                            elicitation_id: ulid::Ulid::new().to_string(),
                        };
                        if let Err(e) = peer.create_elicitation(params).await {
                            tracing::debug!("the agent's client did not take the sign-in URL: {e}");
                        }
                    });
                }
                Ok(_) => {}
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return activation.await,
            },
        }
    }
}

/// A proxied call's outcome as the agent gets it: the server's result as it is (its
/// `isError` results included); a failure to reach it as a tool error with the hub's code.
pub fn proxied(outcome: Result<CallToolResult, HubError>) -> CallToolResult {
    outcome.unwrap_or_else(|e| tool_error(e.into()))
}

/// A proxied call's outcome as the answer to the agent's `tools/call`: the server's own
/// JSON-RPC error passes through as it gave it; the rest is [`proxied`].
pub fn answered(
    outcome: Result<CallToolResult, HubError>,
) -> Result<rmcp::model::CallToolResponse, ErrorData> {
    match outcome {
        Err(HubError::Answered { error, .. }) => Err(error),
        outcome => Ok(proxied(outcome).into()),
    }
}

/// Calls `tool` of `server` for the agent's request `context`: the server's progress
/// notifications reach the agent under the agent's own progress token (when it gave one),
/// what the server asks meanwhile goes to `agent` (when its client takes it), and the
/// agent's cancellation cancels the call on the server, and its questions. A sign-in the
/// call needs (a step-up) is put to the agent as an activation's is.
pub async fn forward(
    gateway: &Gateway,
    server: &str,
    tool: &str,
    arguments: Option<JsonObject>,
    context: &RequestContext<RoleServer>,
    agent: Arc<dyn Answerer>,
    bus: Option<&tandem_core::events::Bus>,
) -> Result<CallToolResult, HubError> {
    let token = context.meta.get_progress_token();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<ProgressNotificationParam>();
    let progress = token.is_some().then_some(tx);
    let call = gateway.call(server, tool, arguments, progress, Some(agent.clone()));
    let call = with_url_elicitation(call, bus, gateway, server, &context.peer, &*agent);
    tokio::pin!(call);
    // Progress is relayed in this future, and what arrived before the answer is sent
    // before it, so the agent never sees progress of a call already answered.
    let relay = |mut p: ProgressNotificationParam| {
        let peer = context.peer.clone();
        let token = token.clone();
        async move {
            if let Some(token) = token {
                p.progress_token = token;
                let _ = peer.notify_progress(p).await;
            }
        }
    };
    loop {
        tokio::select! {
            biased;
            Some(p) = rx.recv() => relay(p).await,
            outcome = &mut call => {
                while let Ok(p) = rx.try_recv() {
                    relay(p).await;
                }
                return outcome;
            }
            // Dropping the call tells the server `notifications/cancelled`.
            _ = context.ct.cancelled() => {
                return Err(HubError::Server(format!(
                    "the call of {server}'s tool {tool} was cancelled"
                )));
            }
        }
    }
}

/// What the session lists of its active servers: tool names, prompt names, resource URIs.
#[derive(PartialEq)]
struct Listed {
    tools: BTreeSet<String>,
    prompts: BTreeSet<String>,
    resources: BTreeSet<String>,
}

fn listed(gateway: &Gateway) -> Listed {
    Listed {
        tools: gateway
            .tools()
            .into_iter()
            .map(|t| t.name.to_string())
            .collect(),
        prompts: gateway.prompts().into_iter().map(|p| p.name).collect(),
        resources: gateway.resources().into_iter().map(|r| r.uri).collect(),
    }
}

/// Tells the agent whenever its proxied tools change, until the session ends: a server of
/// its workspace changed state or tools, or the config changed, and the names differ from
/// what it was last told.
/// `poke` is notified by the session itself after an activation or a deactivation. The
/// loop ends with the session (its gateway dropped) or the bus.
pub async fn notify_changes(
    gateway: std::sync::Weak<Gateway>,
    bus: tandem_core::events::Bus,
    peer: Peer<RoleServer>,
    poke: Arc<tokio::sync::Notify>,
) {
    let Some(root) = gateway.upgrade().map(|g| g.root().to_path_buf()) else {
        return;
    };
    let mut events = bus.subscribe();
    let mut told = match gateway.upgrade() {
        Some(g) => listed(&g),
        None => return,
    };
    let relevant = |e: &Event| matches!(e, Event::Hub { workspace, .. } if *workspace == root);
    loop {
        tokio::select! {
            event = events.recv() => match event {
                Ok(e) if relevant(&e) => {}
                Ok(_) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            },
            _ = poke.notified() => {}
        }
        // Fold what follows within the window into this one.
        let deadline = tokio::time::Instant::now() + NOTIFY_WINDOW;
        while let Ok(Ok(_)) = tokio::time::timeout_at(deadline, events.recv()).await {}
        let Some(g) = gateway.upgrade() else { return };
        let now = listed(&g);
        drop(g);
        if now == told {
            continue;
        }
        let mut sent = Ok(());
        if now.tools != told.tools {
            sent = sent.and(peer.notify_tool_list_changed().await);
        }
        if now.prompts != told.prompts {
            sent = sent.and(peer.notify_prompt_list_changed().await);
        }
        if now.resources != told.resources {
            sent = sent.and(peer.notify_resource_list_changed().await);
        }
        told = now;
        if sent.is_err() {
            return;
        }
    }
}

/// The proxied tool `name` (`server__tool`) of the session, if it is one.
pub fn resolve(gateway: &Gateway, name: &str) -> Option<(String, String)> {
    if !name.contains(proxy::SEPARATOR) {
        return None;
    }
    gateway.resolve(name)
}
