//! What a downstream server asks of its client (elicitation, sampling, roots), carried to
//! the agent whose call caused it: the real binary through the daemon, the real
//! server-everything downstream, and an rmcp agent whose handlers answer (or do not).

// Sampling and roots are deprecated by SEP-2577, but servers still ask for them.
#![allow(deprecated)]

use std::time::Duration;

use rmcp::model::{
    ClientCapabilities, ClientConfig, CreateMessageRequestParams, CreateMessageResult,
    ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationCapability, ErrorData,
    Implementation, ListRootsResult, ProtocolVersion, Root, SamplingMessage,
};
use rmcp::service::{RequestContext, RoleClient};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::util::{DaemonGuard, McpClient, TestHome, everything_bin, home_with_servers};

/// The conditional tools server-everything registers for a client that declares
/// elicitation (form and URL), sampling and roots (its async forms need the tasks
/// extension, which neither Tandem nor this agent declares).
const CONDITIONAL: [&str; 4] = [
    "get-roots-list",
    "trigger-elicitation-request",
    "trigger-url-elicitation",
    "trigger-sampling-request",
];
const AGENT_ROOT: &str = "file:///agent/project";
const SAMPLED: &str = "The agent's model answers";

/// What the agent's client was asked.
#[derive(Debug)]
enum Seen {
    Form(String),
    Url(String),
    Sampling,
    Cancelled,
}

/// The agent's client: declares every capability a server may ask for (or none), and
/// answers each question with its own values (or never).
#[derive(Clone)]
struct Agent {
    capable: bool,
    answers: bool,
    /// Fills a form with more than Tandem passes on.
    huge: bool,
    seen: mpsc::UnboundedSender<Seen>,
    /// Told of each `roots/list`, which a server may send at any time.
    roots: mpsc::UnboundedSender<()>,
    /// Speaks 2026-07-28, which takes no request from a server: it is asked in its calls'
    /// `input_required` results instead.
    modern: bool,
}

impl Agent {
    fn new(capable: bool, answers: bool) -> (Agent, mpsc::UnboundedReceiver<Seen>) {
        let (agent, seen, _) = Agent::with_roots(capable, answers);
        (agent, seen)
    }

    fn with_roots(
        capable: bool,
        answers: bool,
    ) -> (
        Agent,
        mpsc::UnboundedReceiver<Seen>,
        mpsc::UnboundedReceiver<()>,
    ) {
        let (seen, seen_rx) = mpsc::unbounded_channel();
        let (roots, roots_rx) = mpsc::unbounded_channel();
        let agent = Agent {
            capable,
            answers,
            huge: false,
            seen,
            roots,
            modern: false,
        };
        (agent, seen_rx, roots_rx)
    }

    /// Returns at once when the agent answers; else when Tandem withdraws the question,
    /// which is reported.
    async fn answered(&self, context: &RequestContext<RoleClient>) {
        if !self.answers {
            context.ct.cancelled().await;
            let _ = self.seen.send(Seen::Cancelled);
        }
    }
}

impl rmcp::ClientHandler for Agent {
    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let content = match request {
            ElicitRequestParams::FormElicitationParams { message, .. } => {
                let _ = self.seen.send(Seen::Form(message));
                let name = if self.huge {
                    "x".repeat(2 * 1024 * 1024)
                } else {
                    "Ada Lovelace".to_string()
                };
                Some(json!({"name": name, "check": true}))
            }
            ElicitRequestParams::UrlElicitationParams { url, .. } => {
                let _ = self.seen.send(Seen::Url(url));
                None
            }
            _ => None,
        };
        self.answered(&context).await;
        let mut result = ElicitResult::new(ElicitationAction::Accept);
        result.content = content;
        Ok(result)
    }

    async fn create_message(
        &self,
        _: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let _ = self.seen.send(Seen::Sampling);
        self.answered(&context).await;
        Ok(CreateMessageResult::new(
            SamplingMessage::assistant_text(SAMPLED),
            "agent-model".into(),
        ))
    }

    async fn list_roots(
        &self,
        _: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        let _ = self.roots.send(());
        Ok(ListRootsResult::new(vec![Root::new(AGENT_ROOT)]))
    }

    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        if self.capable {
            capabilities.elicitation = Some(
                ElicitationCapability::new()
                    .with_form(Default::default())
                    .with_url(Default::default()),
            );
            capabilities.sampling = Some(Default::default());
            let mut roots = rmcp::model::RootsCapabilities::default();
            roots.list_changed = Some(true);
            capabilities.roots = Some(roots);
        }
        // Else the generation before 2026-07-28, which takes requests from the server.
        let version = if self.modern {
            ProtocolVersion::V_2026_07_28
        } else {
            ProtocolVersion::V_2025_11_25
        };
        ClientConfig::new(capabilities, Implementation::new("agent", "1.0"))
            .with_protocol_version(version)
    }
}

/// A home whose one server, server-everything, is a boot server (with `more` in its
/// entry), and its workspace.
fn home_with_everything(more: Value) -> (TestHome, std::path::PathBuf) {
    let mut entry = json!({"command": everything_bin(), "args": ["stdio"]});
    entry
        .as_object_mut()
        .unwrap()
        .extend(more.as_object().unwrap().clone());
    home_with_servers(json!({ "everything": entry }))
}

/// The text of a proxied tool's result.
async fn text_of<H: rmcp::ClientHandler>(agent: &McpClient<H>, tool: &str, args: Value) -> String {
    let r = agent.try_call(tool, args).await.unwrap();
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

async fn next(seen: &mut mpsc::UnboundedReceiver<Seen>) -> Seen {
    tokio::time::timeout(Duration::from_secs(30), seen.recv())
        .await
        .expect("the agent was asked nothing")
        .expect("the agent's handler is gone")
}

/// The server-everything tools that ask something, called by `agent`: each question reaches
/// the agent's handler and its answer reaches the server.
async fn asks_every_kind(
    agent: &McpClient<Agent>,
    seen: &mut mpsc::UnboundedReceiver<Seen>,
    roots: &mut mpsc::UnboundedReceiver<()>,
) {
    // A form: the agent's answer reaches the server.
    let text = text_of(agent, "everything__trigger-elicitation-request", json!({})).await;
    assert!(matches!(next(seen).await, Seen::Form(m) if m.contains("Please provide inputs")));
    assert!(text.contains("- Name: Ada Lovelace"), "{text}");

    // A URL to visit.
    let page = "https://example.com/verify";
    let text = text_of(
        agent,
        "everything__trigger-url-elicitation",
        json!({"url": page}),
    )
    .await;
    assert!(
        matches!(next(seen).await, Seen::Url(u) if u == page),
        "{text}"
    );

    // Sampling: the agent's model answers.
    let text = text_of(
        agent,
        "everything__trigger-sampling-request",
        json!({"prompt": "hello", "maxTokens": 20}),
    )
    .await;
    assert!(matches!(next(seen).await, Seen::Sampling));
    assert!(text.contains(SAMPLED), "{text}");

    // Roots: the agent's, asked for by the server in one of the agent's calls.
    let text = text_of(agent, "everything__get-roots-list", json!({})).await;
    assert!(text.contains(AGENT_ROOT), "{text}");
    assert!(
        roots.try_recv().is_ok(),
        "the agent was not asked its roots"
    );
    while roots.try_recv().is_ok() {}
}

#[tokio::test]
async fn an_agent_with_the_capabilities_sees_and_uses_every_tool() {
    // Connected directly, the agent sees every conditional tool.
    let (direct_agent, _) = Agent::new(true, true);
    let mut cmd = tokio::process::Command::new(everything_bin());
    cmd.arg("stdio").kill_on_drop(true);
    let transport = rmcp::transport::TokioChildProcess::new(cmd).unwrap();
    let direct = rmcp::ServiceExt::serve(direct_agent, transport)
        .await
        .unwrap();
    let mut direct_names: Vec<String> = direct
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    direct_names.sort();
    direct.cancel().await.unwrap();
    for tool in CONDITIONAL {
        assert!(direct_names.iter().any(|n| n == tool), "{direct_names:?}");
    }

    // Through Tandem, the same tools.
    let (home, ws) = home_with_everything(json!({}));
    let _daemon = DaemonGuard(&home);
    let (handler, mut seen, mut roots) = Agent::with_roots(true, true);
    let agent = home.mcp_daemon_with(&ws, &[], handler).await;
    let mut through: Vec<String> = agent
        .client
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .filter_map(|t| t.name.strip_prefix("everything__").map(str::to_string))
        .collect();
    through.sort();
    assert_eq!(through, direct_names);

    asks_every_kind(&agent, &mut seen, &mut roots).await;
    // The agent's roots change: the server is told, and asks the agent again.
    agent.client.notify_roots_list_changed().await.unwrap();
    tokio::time::timeout(Duration::from_secs(30), roots.recv())
        .await
        .expect("the server did not ask for the roots again")
        .unwrap();
    agent.close().await;
}

#[tokio::test]
async fn an_agent_without_the_capabilities_gets_a_decline_with_the_reason() {
    for modern in [false, true] {
        declined_without_the_capabilities(modern).await;
    }
}

/// An agent of either generation that declares nothing is asked nothing.
async fn declined_without_the_capabilities(modern: bool) {
    let (home, ws) = home_with_everything(json!({}));
    let _daemon = DaemonGuard(&home);
    let (mut handler, mut seen) = Agent::new(false, true);
    handler.modern = modern;
    let agent = if modern {
        home.mcp_daemon_discovering(&ws, handler).await
    } else {
        home.mcp_daemon_with(&ws, &[], handler).await
    };
    let text = text_of(&agent, "everything__trigger-elicitation-request", json!({})).await;
    assert!(text.contains("declined"), "{text}");
    assert!(
        text.contains("no editor is there to show the form"),
        "{text}"
    );
    let r = agent
        .try_call(
            "everything__trigger-sampling-request",
            json!({"prompt": "hello", "maxTokens": 20}),
        )
        .await
        .unwrap();
    let text = serde_json::to_string(&r.content).unwrap();
    assert_eq!(r.is_error, Some(true), "{text}");
    assert!(
        text.contains("no client connected to Tandem can sample"),
        "{text}"
    );
    // No agent gives roots: the server has the workspace root.
    let text = text_of(&agent, "everything__get-roots-list", json!({})).await;
    let ws_uri = format!("URI: file://{}", ws.display());
    assert!(text.contains(&ws_uri), "{ws_uri} not in {text}");
    // The agent itself was never asked.
    assert!(seen.try_recv().is_err());
    agent.close().await;
}

#[tokio::test]
async fn a_question_past_its_time_limit_ends() {
    // The server's questions for a person have 2 s.
    let (home, ws) = home_with_everything(json!({"question_timeout_ms": 2000}));
    let _daemon = DaemonGuard(&home);
    let (handler, mut seen) = Agent::new(true, false);
    let agent = home.mcp_daemon_with(&ws, &[], handler).await;
    let text = text_of(&agent, "everything__trigger-elicitation-request", json!({})).await;
    assert!(matches!(next(&mut seen).await, Seen::Form(_)));
    assert!(text.contains("cancelled"), "{text}");
    assert!(
        text.contains("the agent did not answer within 2.0s"),
        "{text}"
    );
    // The agent is told its question is withdrawn.
    assert!(matches!(next(&mut seen).await, Seen::Cancelled));
    // The server waited on the agent, not on itself: it still runs.
    let text = text_of(&agent, "everything__echo", json!({"message": "still here"})).await;
    assert!(text.contains("still here"), "{text}");
    agent.close().await;
}

#[tokio::test]
async fn cancelling_the_call_ends_the_question() {
    let (home, ws) = home_with_everything(json!({}));
    let _daemon = DaemonGuard(&home);
    let (handler, mut seen) = Agent::new(true, false);
    let agent = home.mcp_daemon_with(&ws, &[], handler).await;
    let request = rmcp::model::ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(
        rmcp::model::CallToolRequestParams::new("everything__trigger-elicitation-request"),
    ));
    let handle = agent
        .client
        .send_cancellable_request(request, rmcp::service::PeerRequestOptions::no_options())
        .await
        .unwrap();
    assert!(matches!(next(&mut seen).await, Seen::Form(_)));
    handle
        .cancel(Some("the user stopped".into()))
        .await
        .unwrap();
    // Tandem withdraws the question it put to the agent.
    assert!(matches!(next(&mut seen).await, Seen::Cancelled));
    agent.close().await;
}

#[tokio::test]
async fn an_answer_too_large_is_refused() {
    let (home, ws) = home_with_everything(json!({}));
    let _daemon = DaemonGuard(&home);
    let (mut handler, mut seen) = Agent::new(true, true);
    handler.huge = true;
    let agent = home.mcp_daemon_with(&ws, &[], handler).await;
    let r = agent
        .try_call("everything__trigger-elicitation-request", json!({}))
        .await
        .unwrap();
    assert!(matches!(next(&mut seen).await, Seen::Form(_)));
    let text = serde_json::to_string(&r.content).unwrap();
    assert_eq!(r.is_error, Some(true), "{}", &text[..text.len().min(500)]);
    assert!(
        text.contains("the answer was larger than 1024 KiB"),
        "{}",
        &text[..text.len().min(500)]
    );
    assert!(!text.contains("xxxxxxxx"));
    agent.close().await;
}

#[tokio::test]
async fn a_2026_agent_is_asked_in_its_calls_results() {
    // server-everything asks by requests, the agent takes questions only in its calls'
    // results: Tandem carries them from one form to the other.
    let (home, ws) = home_with_everything(json!({}));
    let _daemon = DaemonGuard(&home);
    let (mut handler, mut seen, mut roots) = Agent::with_roots(true, true);
    handler.modern = true;
    let agent = home.mcp_daemon_discovering(&ws, handler).await;

    asks_every_kind(&agent, &mut seen, &mut roots).await;

    // Through `mcp_call` too.
    let text = text_of(
        &agent,
        "mcp_call",
        json!({"server": "everything", "tool": "trigger-elicitation-request"}),
    )
    .await;
    assert!(matches!(next(&mut seen).await, Seen::Form(_)));
    assert!(text.contains("- Name: Ada Lovelace"), "{text}");
    agent.close().await;
}

/// A 2026-07-28 agent with every capability, through the home's daemon.
async fn modern_agent(home: &TestHome, ws: &std::path::Path) -> McpClient<Agent> {
    let (mut handler, _seen) = Agent::new(true, true);
    handler.modern = true;
    home.mcp_daemon_discovering(ws, handler).await
}

/// The first round of `trigger-elicitation-request`, which asks.
async fn asks_first(agent: &McpClient<Agent>) -> rmcp::model::InputRequiredResult {
    let first = agent
        .client
        .call_tool_once(rmcp::model::CallToolRequestParams::new(
            "everything__trigger-elicitation-request",
        ))
        .await
        .unwrap();
    let rmcp::model::CallToolResponse::InputRequired(asked) = first else {
        panic!("the first round did not ask: {first:?}");
    };
    asked
}

#[tokio::test]
async fn a_retry_with_a_state_tandem_did_not_give_is_refused() {
    let (home, ws) = home_with_everything(json!({}));
    let _daemon = DaemonGuard(&home);
    let agent = modern_agent(&home, &ws).await;
    // A first round that asks: its state is good once, and only for this call.
    let asked = asks_first(&agent).await;
    let state = asked.request_state.clone().unwrap();
    let keys: Vec<String> = asked.input_requests.unwrap().into_keys().collect();
    assert_eq!(keys.len(), 1, "{keys:?}");
    for bad in ["made-up", "tandem-relay-01J00000000000000000000000"] {
        let mut retry =
            rmcp::model::CallToolRequestParams::new("everything__trigger-elicitation-request");
        retry.request_state = Some(bad.to_string());
        retry.input_responses = Some(Default::default());
        let e = agent.client.call_tool_once(retry).await.unwrap_err();
        assert!(
            e.to_string()
                .contains("no call waits under this request state"),
            "{e}"
        );
    }
    // An answer that does not fit its question fails that question, not the session.
    let mut retry =
        rmcp::model::CallToolRequestParams::new("everything__trigger-elicitation-request");
    retry.request_state = Some(state.clone());
    retry.input_responses = Some(
        keys.iter()
            .map(|k| (k.clone(), json!({"not": "an answer"})))
            .collect(),
    );
    // The server is told, and says so in its result.
    let outcome = agent.client.call_tool_once(retry).await.unwrap();
    let rmcp::model::CallToolResponse::Complete(result) = outcome else {
        panic!("the call did not end: {outcome:?}");
    };
    assert_eq!(result.is_error, Some(true));
    let said = serde_json::to_string(&result.content).unwrap();
    assert!(said.contains("does not fit the question"), "{said}");
    // Used once, the state is gone.
    let mut again =
        rmcp::model::CallToolRequestParams::new("everything__trigger-elicitation-request");
    again.request_state = Some(state);
    again.input_responses = Some(Default::default());
    assert!(agent.client.call_tool_once(again).await.is_err());
    agent.close().await;
}

#[tokio::test]
async fn a_2026_call_left_unanswered_ends_with_its_questions_time() {
    // The server's questions for a person have 2 s; the parked call, a little more.
    let (home, ws) = home_with_everything(json!({"question_timeout_ms": 2000}));
    let _daemon = DaemonGuard(&home);
    let agent = modern_agent(&home, &ws).await;
    let asked = asks_first(&agent).await;
    // The agent comes back long after: the call is gone.
    tokio::time::sleep(Duration::from_secs(14)).await;
    let mut late =
        rmcp::model::CallToolRequestParams::new("everything__trigger-elicitation-request");
    late.request_state = asked.request_state;
    late.input_responses = Some(
        asked
            .input_requests
            .unwrap()
            .into_keys()
            .map(|k| (k, json!({"action": "accept", "content": {"name": "Late"}})))
            .collect(),
    );
    let e = agent.client.call_tool_once(late).await.unwrap_err();
    assert!(
        e.to_string()
            .contains("no call waits under this request state"),
        "{e}"
    );
    agent.close().await;
}
