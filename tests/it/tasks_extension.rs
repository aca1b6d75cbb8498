//! The MCP tasks extension (SEP-2663) through Tandem's gateway: the real binary through its
//! daemon, the fixture server running tools as tasks (`--tasks`), agents that declare the
//! extension (they get the task and poll it through Tandem) or not (Tandem drives the task
//! and answers with its result), and a real Neovim showing a task's progress.

use std::path::PathBuf;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientCapabilities, ClientConfig,
    ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationCapability, ErrorCode,
    ErrorData, GetTaskParams, GetTaskResult, Implementation, ProtocolVersion, TaskPayload,
    TaskStatus, UpdateTaskParams,
};
use rmcp::service::{RequestContext, RoleClient};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::nvim::Nvim;
use crate::util::{DaemonGuard, McpClient, TestHome, fixture_bin, home_with_servers};

/// An agent's client: declares the tasks extension (or not) and form elicitation, and
/// answers a form with a name, reporting the question's message.
#[derive(Clone)]
struct Agent {
    tasks: bool,
    asked: mpsc::UnboundedSender<String>,
    /// Speaks 2026-07-28, which is asked in its calls' results, not by requests.
    modern: bool,
}

impl Agent {
    fn new(tasks: bool) -> (Agent, mpsc::UnboundedReceiver<String>) {
        let (asked, rx) = mpsc::unbounded_channel();
        (
            Agent {
                tasks,
                asked,
                modern: false,
            },
            rx,
        )
    }
}

impl rmcp::ClientHandler for Agent {
    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        if let ElicitRequestParams::FormElicitationParams { message, .. } = request {
            let _ = self.asked.send(message);
        }
        let mut result = ElicitResult::new(ElicitationAction::Accept);
        result.content = Some(json!({"name": "Ada Lovelace"}));
        Ok(result)
    }

    fn get_info(&self) -> ClientConfig {
        let mut capabilities = if self.tasks {
            ClientCapabilities::builder().enable_tasks().build()
        } else {
            ClientCapabilities::default()
        };
        capabilities.elicitation = Some(ElicitationCapability::new().with_form(Default::default()));
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

/// A home whose one server is the fixture with `--tasks` (a boot server named `fixture`),
/// and its workspace.
fn home_with_tasks() -> (TestHome, PathBuf) {
    home_with_servers(json!({"fixture": {"command": fixture_bin(), "args": ["--tasks"]}}))
}

/// An agent (declaring the extension or not) through the home's daemon, and the messages
/// of the questions its client is asked.
async fn connect(
    home: &TestHome,
    ws: &std::path::Path,
    tasks: bool,
) -> (McpClient<Agent>, mpsc::UnboundedReceiver<String>) {
    let (handler, asked) = Agent::new(tasks);
    (home.mcp_daemon_with(ws, &[], handler).await, asked)
}

fn call(tool: &str, args: Value) -> CallToolRequestParams {
    let Value::Object(args) = args else {
        panic!("arguments are an object")
    };
    CallToolRequestParams::new(tool.to_string()).with_arguments(args)
}

/// Calls `tool` as an agent that takes tasks: the task it gets.
async fn task_of(agent: &McpClient<Agent>, tool: &str, args: Value) -> rmcp::model::Task {
    match agent.client.peer().call_tool_once(call(tool, args)).await {
        Ok(CallToolResponse::Task(created)) => created.task,
        other => panic!("{tool} should answer with a task, got {other:?}"),
    }
}

async fn get(agent: &McpClient<Agent>, id: &str) -> Result<GetTaskResult, rmcp::ServiceError> {
    agent.client.peer().get_task(GetTaskParams::new(id)).await
}

/// Polls task `id` through Tandem until it ends: its status messages on the way, and the
/// end.
async fn poll_to_end(agent: &McpClient<Agent>, id: &str) -> (Vec<String>, GetTaskResult) {
    let mut messages = Vec::new();
    for _ in 0..2000 {
        let got = get(agent, id).await.unwrap();
        assert_eq!(got.task.task.task_id, id, "the agent sees Tandem's id");
        if let Some(m) = &got.task.task.status_message
            && messages.last() != Some(m)
        {
            messages.push(m.clone());
        }
        if got.task.status().is_terminal() {
            return (messages, got);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("task {id} did not end");
}

fn text(result: &rmcp::model::CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

fn invalid_params(outcome: Result<GetTaskResult, rmcp::ServiceError>) -> String {
    match outcome {
        Err(rmcp::ServiceError::McpError(e)) if e.code == ErrorCode::INVALID_PARAMS => {
            e.message.to_string()
        }
        other => panic!("expected -32602, got {other:?}"),
    }
}

/// Waits until the fixture's task log has `line`.
async fn logged<H: rmcp::ClientHandler>(agent: &McpClient<H>, line: &str) {
    for _ in 0..1000 {
        let log = agent
            .try_call("fixture__task_log", json!({}))
            .await
            .unwrap();
        if text(&log).lines().any(|l| l == line) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the fixture never logged {line:?}");
}

#[tokio::test]
async fn an_agent_with_the_extension_gets_the_task_and_polls_it_through_tandem() {
    let (home, ws) = home_with_tasks();
    let _daemon = DaemonGuard(&home);
    let (agent, _) = connect(&home, &ws, true).await;

    let task = task_of(&agent, "fixture__task_steps", json!({"steps": 2})).await;
    assert!(task.task_id.starts_with("fixture:"), "{}", task.task_id);
    assert_eq!(task.status, TaskStatus::Working);
    assert_eq!(task.status_message.as_deref(), Some("starting"));
    let (messages, end) = poll_to_end(&agent, &task.task_id).await;
    assert_eq!(messages, ["step 1 of 2", "step 2 of 2"]);
    let TaskPayload::Completed { result } = end.task.payload else {
        panic!("the task should complete: {:?}", end.task)
    };
    let result: rmcp::model::CallToolResult =
        serde_json::from_value(Value::Object(result)).unwrap();
    assert_eq!(text(&result), "task_steps from fixture: 2 steps done");
    // An ended task can still be read.
    assert!(
        get(&agent, &task.task_id)
            .await
            .unwrap()
            .task
            .status()
            .is_terminal()
    );

    // The task's question reaches the agent in tasks/get; its tasks/update the server.
    let ask = task_of(&agent, "fixture__task_ask", json!({})).await;
    let mut questions = None;
    for _ in 0..2000 {
        let got = get(&agent, &ask.task_id).await.unwrap();
        if let TaskPayload::InputRequired { input_requests } = got.task.payload {
            questions = Some(input_requests);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let questions = questions.expect("the task never asked its question");
    let asked = serde_json::to_value(&questions["name"]).unwrap();
    assert_eq!(asked["params"]["message"], "What is your name?");
    let answer = json!({"action": "accept", "content": {"name": "Grace Hopper"}});
    let update = UpdateTaskParams::new(ask.task_id.clone(), [("name".to_string(), answer)].into());
    agent.client.peer().update_task(update).await.unwrap();
    let (_, end) = poll_to_end(&agent, &ask.task_id).await;
    let TaskPayload::Completed { result } = end.task.payload else {
        panic!("the task should complete: {:?}", end.task)
    };
    let result: rmcp::model::CallToolResult =
        serde_json::from_value(Value::Object(result)).unwrap();
    assert_eq!(text(&result), "task_ask from fixture: hello Grace Hopper");

    // tasks/cancel reaches the server, which ends the task cancelled.
    let slow = task_of(&agent, "fixture__task_slow", json!({})).await;
    agent
        .client
        .peer()
        .cancel_task(CancelTaskParams::new(slow.task_id.clone()))
        .await
        .unwrap();
    let (_, end) = poll_to_end(&agent, &slow.task_id).await;
    assert_eq!(end.task.status(), TaskStatus::Cancelled);
    logged(&agent, "task_slow cancelled").await;

    // An id no task of this session has is -32602: unknown, or another session's.
    let message = invalid_params(get(&agent, "fixture:01NOTATASK").await);
    assert!(message.contains("unknown task"), "{message}");
    let (other, _) = connect(&home, &ws, true).await;
    let theirs = task_of(&other, "fixture__task_slow", json!({})).await;
    invalid_params(get(&agent, &theirs.task_id).await);
    let cancel = agent
        .client
        .peer()
        .cancel_task(CancelTaskParams::new(theirs.task_id.clone()))
        .await;
    assert!(
        matches!(&cancel, Err(rmcp::ServiceError::McpError(e)) if e.code == ErrorCode::INVALID_PARAMS),
        "{cancel:?}"
    );
    // Theirs still runs: the other session's cancel was refused.
    let theirs_now = get(&other, &theirs.task_id).await.unwrap();
    assert_eq!(theirs_now.task.status(), TaskStatus::Working);
    other.close().await;
    agent.close().await;
}

#[tokio::test]
async fn an_agent_without_the_extension_gets_the_result_and_answers_its_question() {
    let (home, ws) = home_with_tasks();
    let _daemon = DaemonGuard(&home);
    let (agent, mut asked) = connect(&home, &ws, false).await;

    // Tandem drives the task: one call, the final result.
    let r = agent
        .try_call("fixture__task_steps", json!({"steps": 3}))
        .await
        .unwrap();
    assert_ne!(r.is_error, Some(true), "{r:?}");
    assert_eq!(text(&r), "task_steps from fixture: 3 steps done");

    // The task's question reaches this agent's client, and its answer the server.
    let r = agent
        .try_call("fixture__task_ask", json!({}))
        .await
        .unwrap();
    assert_eq!(text(&r), "task_ask from fixture: hello Ada Lovelace");
    assert_eq!(asked.try_recv().unwrap(), "What is your name?");

    // A task that asks without end is given up on, and cancelled.
    let r = agent
        .try_call("fixture__task_ask_forever", json!({}))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(true), "{r:?}");
    let said = serde_json::to_string(&r.structured_content).unwrap();
    assert!(said.contains("more than 32 questions"), "{said}");
    logged(&agent, "task_ask_forever cancelled").await;

    // The agent cancels its call: Tandem cancels the task on the server.
    let request = rmcp::model::ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(
        CallToolRequestParams::new("fixture__task_slow"),
    ));
    let handle = agent
        .client
        .send_cancellable_request(request, rmcp::service::PeerRequestOptions::no_options())
        .await
        .unwrap();
    // Once Tandem polls the task, it drives it.
    logged(&agent, "task_slow polled").await;
    handle
        .cancel(Some("the user stopped".into()))
        .await
        .unwrap();
    logged(&agent, "task_slow cancelled").await;
    agent.close().await;
}

#[tokio::test]
async fn what_a_server_says_of_its_tasks_is_bounded() {
    let (home, ws) = home_with_tasks();
    let _daemon = DaemonGuard(&home);
    let (agent, _) = connect(&home, &ws, true).await;

    // A status message of 10 000 characters with an escape sequence: cut, printable.
    let hostile = task_of(&agent, "fixture__task_hostile", json!({})).await;
    let got = get(&agent, &hostile.task_id).await.unwrap();
    for message in [hostile.status_message, got.task.task.status_message] {
        let message = message.unwrap();
        assert!(message.chars().count() < 400, "{} chars", message.len());
        assert!(!message.chars().any(char::is_control), "{message:?}");
        assert!(message.contains("evil"), "{message}");
    }

    // A task id past the bound is refused, with the reason.
    let r = agent
        .client
        .peer()
        .call_tool_once(call("fixture__task_long_id", json!({})))
        .await
        .unwrap();
    let CallToolResponse::Complete(r) = r else {
        panic!("a task id of 5000 bytes is not followed: {r:?}")
    };
    assert_eq!(r.is_error, Some(true));
    let said = serde_json::to_string(&r.structured_content).unwrap();
    assert!(said.contains("longer than 256 bytes"), "{said}");

    // A session keeps a bounded number of tasks: the oldest goes.
    let first = task_of(&agent, "fixture__task_slow", json!({})).await;
    for _ in 0..tandem::mcp::tasks::MAX_TASKS {
        task_of(&agent, "fixture__task_slow", json!({})).await;
    }
    invalid_params(get(&agent, &first.task_id).await);
    agent.close().await;
}

#[tokio::test]
async fn neovim_shows_a_downstream_task_as_progress() {
    let (home, ws) = home_with_tasks();
    let _daemon = DaemonGuard(&home);
    let (agent, _) = connect(&home, &ws, false).await;
    let nvim = Nvim::start(&home, &ws).await;
    nvim.lua(&format!(
        r#"
        _G.progress = {{}}
        vim.api.nvim_create_autocmd('LspProgress', {{ callback = function(ev)
            local v = ev.data.params.value
            table.insert(_G.progress, {{ token = ev.data.params.token, kind = v.kind, title = v.title, message = v.message }})
        end }})
        require('tandem').setup({{ cmd = {{ '{bin}' }} }})
        vim.cmd.edit('README.md')
        "#,
        bin = crate::util::tandem_bin(),
    ))
    .await;
    // Tandem's own task shows once the editor follows the workspace's events.
    let w = agent
        .ok(
            "start_workflow",
            json!({"name": "Docs", "description": "docs"}),
        )
        .await;
    agent
        .ok(
            "start_task",
            json!({"workflow_id": w["workflow_id"], "name": "Write docs", "goal": "docs"}),
        )
        .await;
    nvim.wait("the editor to follow", 20, "return _G.progress", |v| {
        v.as_array()
            .unwrap()
            .iter()
            .any(|p| p["title"] == "Task: Write docs")
    })
    .await;

    let r = agent
        .try_call("fixture__task_steps", json!({"steps": 2}))
        .await
        .unwrap();
    assert_eq!(text(&r), "task_steps from fixture: 2 steps done");
    let shown = nvim
        .wait(
            "the downstream task's progress to end",
            20,
            r#"local out = {}
            for _, p in ipairs(_G.progress) do
                if tostring(p.token):find('^tandem%-downstream%-fixture:') then
                    table.insert(out, { p.kind, p.title or vim.NIL, p.message or vim.NIL })
                end
            end
            return out"#,
            |v| v.as_array().unwrap().iter().any(|p| p[0] == "end"),
        )
        .await;
    // Neovim carries the title of the `begin` into the `report`s and the `end`.
    assert_eq!(
        shown,
        json!([
            ["begin", "fixture: task_steps", "working · starting"],
            ["report", "fixture: task_steps", "working · step 1 of 2"],
            ["report", "fixture: task_steps", "working · step 2 of 2"],
            ["end", "fixture: task_steps", "completed · step 2 of 2"],
        ])
    );
    nvim.quit().await;
    agent.close().await;
}

#[tokio::test]
async fn a_2026_agent_answers_in_its_call_then_gets_the_task() {
    // The server asks its client before it makes the task; the agent, on 2026-07-28, takes
    // no request: it is asked in its call's first result, and gets the task on its retry.
    let (home, ws) = home_with_tasks();
    let _daemon = DaemonGuard(&home);
    let (mut handler, _) = Agent::new(true);
    handler.modern = true;
    let agent = home.mcp_daemon_discovering(&ws, handler).await;
    let first = agent
        .client
        .call_tool_once(call("fixture__task_after_question", json!({})))
        .await
        .unwrap();
    let CallToolResponse::InputRequired(asked) = first else {
        panic!("the first round should ask: {first:?}");
    };
    let questions = asked.input_requests.unwrap();
    assert_eq!(questions.len(), 1, "{questions:?}");
    let mut retry = call("fixture__task_after_question", json!({}));
    retry.request_state = asked.request_state;
    retry.input_responses = Some(
        questions
            .into_keys()
            .map(|k| (k, json!({"action": "accept", "content": {"name": "Ada"}})))
            .collect(),
    );
    let task = match agent.client.call_tool_once(retry).await.unwrap() {
        CallToolResponse::Task(created) => created.task,
        other => panic!("the retry should get the task: {other:?}"),
    };
    assert!(task.task_id.starts_with("fixture:"), "{}", task.task_id);
    let (_, end) = poll_to_end(&agent, &task.task_id).await;
    let TaskPayload::Completed { result } = end.task.payload else {
        panic!("the task should complete: {:?}", end.task)
    };
    let result: rmcp::model::CallToolResult =
        serde_json::from_value(Value::Object(result)).unwrap();
    assert_eq!(text(&result), "task_after_question from fixture: hello Ada");
    agent.close().await;
}
