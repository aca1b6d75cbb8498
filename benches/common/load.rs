//! The load generator, shared by `benches/load.rs` and the fault tests (`tests/it/faults.rs`):
//! MCP agents (rmcp's client over `tandem mcp` on stdio, or over Streamable HTTP) that add,
//! search and show entries and run tasks (start, a decision, a milestone, completion) in
//! rounds; every write the daemon acknowledged is kept in a [`Ledger`] with each call's
//! latency and every error, and [`verify_entries`] finds each acknowledged entry again.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, ProtocolVersion};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};

/// A task is run (started, a decision, a milestone, completed) every this many rounds.
const TASK_EVERY: usize = 5;

/// One MCP agent: its name (which makes its entries' words unique), its face and session.
pub struct Agent {
    pub name: String,
    /// `stdio` or `http`: the latencies are kept per face.
    pub face: &'static str,
    client: RunningService<RoleClient, ()>,
}

/// An entry the daemon acknowledged: its id and the word only it holds.
#[derive(Clone, Debug)]
pub struct AckedEntry {
    pub id: String,
    pub word: String,
}

/// A task as far as the daemon acknowledged it.
#[derive(Clone, Debug, Default)]
pub struct AckedTask {
    pub task_id: String,
    pub decisions: Vec<String>,
    pub completed: bool,
}

/// What the agents were told: acknowledged writes, latencies per operation, errors.
#[derive(Default)]
pub struct Ledger {
    pub entries: Mutex<Vec<AckedEntry>>,
    pub tasks: Mutex<Vec<AckedTask>>,
    latencies: Mutex<BTreeMap<String, Vec<Duration>>>,
    pub errors: Mutex<Vec<String>>,
}

impl Ledger {
    /// Keeps how long `op` took.
    pub fn time(&self, op: String, took: Duration) {
        let mut latencies = self.latencies.lock().unwrap();
        latencies.entry(op).or_default().push(took);
    }

    /// Keeps an error (and returns it, for `?`).
    pub fn error(&self, message: String) -> String {
        self.errors.lock().unwrap().push(message.clone());
        message
    }

    /// The latencies, per operation.
    pub fn latencies(&self) -> BTreeMap<String, Vec<Duration>> {
        self.latencies.lock().unwrap().clone()
    }

    pub fn acked_entries(&self) -> Vec<AckedEntry> {
        self.entries.lock().unwrap().clone()
    }
}

impl Agent {
    /// An agent on `cmd`'s stdio (`tandem mcp ...`).
    pub async fn stdio(name: &str, cmd: tokio::process::Command) -> Result<Agent, String> {
        let transport = rmcp::transport::TokioChildProcess::new(cmd).map_err(|e| e.to_string())?;
        let client = rmcp::ServiceExt::serve((), transport)
            .await
            .map_err(|e| format!("{name}: initialize failed: {e}"))?;
        Ok(Agent {
            name: name.into(),
            face: "stdio",
            client,
        })
    }

    /// An agent over Streamable HTTP at `url`: with `stateless`, the 2026-07-28 generation
    /// (`server/discover`, no session), else a session opened by `initialize`.
    pub async fn http(name: &str, url: &str, stateless: bool) -> Result<Agent, String> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let transport = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(url),
        );
        let lifecycle = if stateless {
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            }
        } else {
            ClientLifecycleMode::Initialize
        };
        let client =
            ().serve_with_lifecycle(transport, lifecycle)
                .await
                .map_err(|e| format!("{name}: initialize failed: {e}"))?;
        Ok(Agent {
            name: name.into(),
            face: "http",
            client,
        })
    }

    /// Calls `tool`, timed into `ledger` as `FACE TOOL`: its structured result, or what
    /// went wrong (a transport error, or the tool's error object).
    pub async fn call(&self, ledger: &Ledger, tool: &str, args: Value) -> Result<Value, String> {
        let Value::Object(map) = args else {
            panic!("arguments must be an object")
        };
        let t = Instant::now();
        let result = self
            .client
            .call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(map))
            .await;
        let took = t.elapsed();
        let result = result.map_err(|e| format!("{}: {tool}: {e}", self.name))?;
        let structured = result.structured_content.unwrap_or_default();
        if result.is_error == Some(true) {
            return Err(format!("{}: {tool} failed: {structured}", self.name));
        }
        ledger.time(format!("{} {tool}", self.face), took);
        Ok(structured)
    }

    /// Rounds of work until `until` or `rounds` rounds, whichever comes first; stops at the
    /// first error, which is kept in the ledger and returned.
    pub async fn work(&self, ledger: &Ledger, until: Instant, rounds: usize) -> Result<(), String> {
        let wf = self
            .call(
                ledger,
                "start_workflow",
                json!({"name": format!("load {}", self.name)}),
            )
            .await
            .map_err(|e| ledger.error(e))?;
        let workflow_id = wf["workflow_id"].as_str().unwrap_or_default().to_string();
        let mut mine: Vec<AckedEntry> = Vec::new();
        for round in 0..rounds {
            if Instant::now() >= until {
                break;
            }
            self.round(ledger, &workflow_id, round, &mut mine)
                .await
                .map_err(|e| ledger.error(e))?;
        }
        Ok(())
    }

    /// One round: add an entry, find it by its word, show an older one; every
    /// [`TASK_EVERY`] rounds, a task.
    async fn round(
        &self,
        ledger: &Ledger,
        workflow_id: &str,
        round: usize,
        mine: &mut Vec<AckedEntry>,
    ) -> Result<(), String> {
        let word = format!("{}r{round}", self.name);
        let added = self
            .call(ledger, "rekall_add", new_entry(&word, &self.name, round))
            .await?;
        let id = added["id"]
            .as_str()
            .ok_or("rekall_add gave no id")?
            .to_string();
        let acked = AckedEntry { id, word };
        ledger.entries.lock().unwrap().push(acked.clone());
        mine.push(acked.clone());

        let found = self
            .call(ledger, "rekall_search", json!({"query": acked.word}))
            .await?;
        if found["results"][0]["id"] != acked.id.as_str() {
            return Err(format!(
                "{}: search for {} did not find {} first: {found}",
                self.name, acked.word, acked.id
            ));
        }
        let older = &mine[round / 2];
        let shown = self
            .call(ledger, "rekall_show", json!({"id": older.id}))
            .await?;
        if shown["title"] != title(&older.word) {
            return Err(format!("{}: {} shows {shown}", self.name, older.id));
        }
        if round.is_multiple_of(TASK_EVERY) {
            self.task(ledger, workflow_id, round).await?;
        }
        Ok(())
    }

    /// A task: started, a decision, a milestone, completed; acknowledged steps go into the
    /// ledger as they come.
    async fn task(&self, ledger: &Ledger, workflow_id: &str, round: usize) -> Result<(), String> {
        let started = self
            .call(
                ledger,
                "start_task",
                json!({"workflow_id": workflow_id, "name": format!("{} task {round}", self.name),
                       "goal": "Keep the daemon busy", "areas": ["src"]}),
            )
            .await?;
        let task_id = started["task_id"]
            .as_str()
            .ok_or("start_task gave no task_id")?
            .to_string();
        let slot = {
            let mut tasks = ledger.tasks.lock().unwrap();
            tasks.push(AckedTask {
                task_id: task_id.clone(),
                ..AckedTask::default()
            });
            tasks.len() - 1
        };
        let decision = self
            .call(
                ledger,
                "log_decision",
                json!({"task_id": task_id, "category": "trade_off", "question": "Which way?",
                       "options_considered": ["this", "that"], "chosen": "this", "reasoning": "Load."}),
            )
            .await?;
        let decision_id = decision["id"].as_str().unwrap_or_default().to_string();
        ledger.tasks.lock().unwrap()[slot]
            .decisions
            .push(decision_id);
        self.call(
            ledger,
            "log_milestone",
            json!({"task_id": task_id, "message": format!("round {round}"), "progress": 50}),
        )
        .await?;
        self.call(
            ledger,
            "complete_task",
            json!({"task_id": task_id, "status": "success",
                   "outcome": {"summary": "Done.", "achievements": ["load"], "limitations": []}}),
        )
        .await?;
        ledger.tasks.lock().unwrap()[slot].completed = true;
        Ok(())
    }

    pub async fn close(self) {
        let _ = self.client.cancel().await;
    }
}

/// The entry an agent adds in a round, found again by `word`.
fn new_entry(word: &str, agent: &str, round: usize) -> Value {
    json!({"type": "pattern", "title": title(word),
           "content": format!("Written under load by agent {agent} in round {round}; its word is {word}."),
           "tags": ["load"]})
}

fn title(word: &str) -> String {
    format!("Load entry {word}")
}

/// Finds every acknowledged entry through `agent` (a fresh session): by id (`rekall_show`,
/// its title) and by its word (`rekall_search`, first), so the index holds it too. What is
/// missing or wrong, one line each.
pub async fn verify_entries(agent: &Agent, acked: &[AckedEntry]) -> Vec<String> {
    let ledger = Ledger::default();
    let mut problems = Vec::new();
    for entry in acked {
        match agent
            .call(&ledger, "rekall_show", json!({"id": entry.id}))
            .await
        {
            Ok(shown) if shown["title"] == title(&entry.word) => {}
            Ok(shown) => problems.push(format!("{} shows {shown}", entry.id)),
            Err(e) => problems.push(format!("{} lost: {e}", entry.id)),
        }
        match agent
            .call(&ledger, "rekall_search", json!({"query": entry.word}))
            .await
        {
            Ok(found) if found["results"][0]["id"] == entry.id.as_str() => {}
            Ok(found) => problems.push(format!("{} not found by search: {found}", entry.word)),
            Err(e) => problems.push(format!("search for {}: {e}", entry.word)),
        }
    }
    problems
}

/// Finds every acknowledged task, its decisions and its completion in `workflows` (what
/// `tandem tasks --all --json` printed, through a fresh session). What is missing or
/// wrong, one line each.
pub fn verify_tasks(workflows: &Value, acked: &[AckedTask]) -> Vec<String> {
    let mut known = std::collections::HashMap::new();
    for workflow in workflows.as_array().into_iter().flatten() {
        for task in workflow["tasks"].as_array().into_iter().flatten() {
            known.insert(task["task_id"].as_str().unwrap_or_default(), task);
        }
    }
    let mut problems = Vec::new();
    for task in acked {
        let Some(record) = known.get(task.task_id.as_str()) else {
            problems.push(format!("task {} lost", task.task_id));
            continue;
        };
        if task.completed && record["status"] == "running" {
            problems.push(format!("task {}'s completion lost", task.task_id));
        }
        let logged: Vec<&str> = record["decisions"]
            .as_array()
            .map(|d| d.iter().filter_map(|d| d["id"].as_str()).collect())
            .unwrap_or_default();
        for d in &task.decisions {
            if !logged.contains(&d.as_str()) {
                problems.push(format!("decision {d} of task {} lost", task.task_id));
            }
        }
    }
    problems
}
