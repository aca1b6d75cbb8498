//! The tasks extension (SEP-2663) on the MCP face: an agent whose client declared it gets
//! the task a downstream server answers a proxied call with, and polls it through Tandem.
//!
//! The agent sees Tandem's id of the task (`server:ULID`, [`Followed`]), never the
//! server's. Each session keeps its own tasks ([`Tasks`]); the HTTP face's sessions share
//! one store, as a stateless 2026-07-28 request has no session, and each task there is
//! its caller's (the token's user). `tasks/get`, `tasks/update` and `tasks/cancel` reach
//! the server of a task this session (or caller) got, and any other id (unknown, another
//! session's or user's, or dropped) is `-32602`, as the extension says. A session
//! keeps at most [`MAX_TASKS`]; a task is dropped once its server may have discarded it
//! (its ttl from its creation), or a while after its end ([`KEEP_ENDED`]). An agent that
//! did not declare the extension never sees a task: the hub drives it and the call answers
//! with its result (`hub::client::tasks`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolResponse, CreateTaskResult, ErrorData, GetTaskResult, InputResponses, JsonObject,
};
use rmcp::service::{RequestContext, RoleServer};

use tandem_core::calls::CallError;
use tandem_core::hub::HubError;
use tandem_core::hub::client::ask::Answerer;
use tandem_core::hub::client::describe::printable;
use tandem_core::hub::client::tasks::Followed;
use tandem_core::hub::gateway::Gateway;

/// The most tasks one session keeps; past it, the oldest ended one goes (else the oldest).
pub const MAX_TASKS: usize = 32;
/// How long an ended task stays, at most, for the agent to read its end.
pub const KEEP_ENDED: Duration = Duration::from_secs(10 * 60);
/// How much of an unknown id an error quotes.
const QUOTED_ID_CHARS: usize = 80;

/// Whether the agent's client declared the tasks extension.
pub fn takes_tasks(context: &RequestContext<RoleServer>) -> bool {
    context
        .client_capabilities()
        .is_some_and(|c| c.supports_tasks())
}

/// One session's downstream tasks, by Tandem's id, oldest first.
#[derive(Default)]
pub struct Tasks(Mutex<Vec<Kept>>);

struct Kept {
    followed: Arc<Followed>,
    /// The caller that got it (the HTTP face's user): only it may reach the task.
    owner: Option<String>,
    created: Instant,
    ended: Option<Instant>,
}

impl Kept {
    /// Whether the task's server may have discarded it, or it ended long enough ago.
    fn expired(&self, now: Instant) -> bool {
        let ttl = self.followed.ttl();
        match self.ended {
            Some(at) => now - at >= ttl.map_or(KEEP_ENDED, |t| t.min(KEEP_ENDED)),
            None => ttl.is_some_and(|t| now - self.created >= t),
        }
    }
}

impl Tasks {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Kept>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps a task the agent `owner` got, making room for it.
    fn keep(&self, followed: Arc<Followed>, owner: Option<String>) {
        let now = Instant::now();
        let mut kept = self.lock();
        kept.retain(|k| !k.expired(now));
        while kept.len() >= MAX_TASKS {
            let oldest = kept.iter().position(|k| k.ended.is_some()).unwrap_or(0);
            kept.remove(oldest);
        }
        kept.push(Kept {
            followed,
            owner,
            created: now,
            ended: None,
        });
    }

    /// The task `id` of `owner`, or the extension's error for an unknown one.
    fn find(&self, id: &str, owner: &Option<String>) -> Result<Arc<Followed>, ErrorData> {
        let now = Instant::now();
        let mut kept = self.lock();
        kept.retain(|k| !k.expired(now));
        kept.iter()
            .find(|k| k.followed.id == id && k.owner == *owner)
            .map(|k| k.followed.clone())
            .ok_or_else(|| {
                ErrorData::invalid_params(
                    format!(
                        "unknown task '{}': no task of this session has that id (or it \
                         ended a while ago)",
                        printable(id, QUOTED_ID_CHARS)
                    ),
                    None,
                )
            })
    }

    /// `tasks/get`: the server's answer, as Tandem shows it.
    pub async fn get(&self, id: &str, owner: &Option<String>) -> Result<GetTaskResult, ErrorData> {
        let followed = self.find(id, owner)?;
        let got = followed.get().await.map_err(task_error)?;
        if got.task.status().is_terminal() {
            let now = Instant::now();
            for k in self.lock().iter_mut() {
                if k.followed.id == id && k.ended.is_none() {
                    k.ended = Some(now);
                }
            }
        }
        Ok(got)
    }

    /// `tasks/update`: the agent's answers to the task's questions, to its server.
    pub async fn update(
        &self,
        id: &str,
        owner: &Option<String>,
        answers: InputResponses,
    ) -> Result<(), ErrorData> {
        self.find(id, owner)?
            .update(answers)
            .await
            .map_err(task_error)
    }

    /// `tasks/cancel`, to the task's server.
    pub async fn cancel(&self, id: &str, owner: &Option<String>) -> Result<(), ErrorData> {
        self.find(id, owner)?.cancel().await.map_err(task_error)
    }
}

/// A failure reaching a task's server: the server's own JSON-RPC error as it gave it
/// (`-32602` for a task it no longer has), else an internal error with the error object.
fn task_error(e: HubError) -> ErrorData {
    match e {
        HubError::Answered { error, .. } => error,
        e => {
            let e = CallError::from(e);
            ErrorData::internal_error(e.to_string(), Some(e.to_json()))
        }
    }
}

/// Calls `tool` of `server` for an agent whose client takes tasks: a task the server
/// answers with becomes this session's, under Tandem's id. The agent's cancellation of the
/// call cancels it on the server.
pub async fn call(
    tasks: &Tasks,
    gateway: &Gateway,
    server: &str,
    tool: &str,
    arguments: Option<JsonObject>,
    context: &RequestContext<RoleServer>,
    agent: Arc<dyn Answerer>,
) -> Result<CallToolResponse, ErrorData> {
    let owner = super::Caller::of(context).user;
    tokio::select! {
        outcome = hand_over(tasks, gateway, server, tool, arguments, owner, agent) => outcome,
        // Dropping the call tells the server `notifications/cancelled`.
        _ = context.ct.cancelled() => Ok(super::gateway::proxied(Err(HubError::Server(format!(
            "the call of {server}'s tool {tool} was cancelled"
        )))).into()),
    }
}

/// The call of [`call`], its task kept as `owner`'s: what a 2026-07-28 agent's relayed call
/// runs ([`super::relay`]), where the relay sees to its cancellation.
pub async fn hand_over(
    tasks: &Tasks,
    gateway: &Gateway,
    server: &str,
    tool: &str,
    arguments: Option<JsonObject>,
    owner: Option<String>,
    agent: Arc<dyn Answerer>,
) -> Result<CallToolResponse, ErrorData> {
    let outcome = gateway
        .call_once(server, tool, arguments, Some(agent))
        .await;
    let (s, created) = match outcome {
        Ok((s, CallToolResponse::Task(created))) => (s, created),
        Ok((_, response)) => return Ok(response),
        Err(e) => return super::gateway::answered(Err(e)),
    };
    let followed = match Followed::new(&s, tool, &created.task) {
        Ok(f) => f,
        Err(e) => return Ok(super::gateway::proxied(Err(e)).into()),
    };
    let task = followed.shown(&created.task);
    tasks.keep(followed, owner);
    Ok(CallToolResponse::Task(CreateTaskResult::new(task)))
}
