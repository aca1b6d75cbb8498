//! The MCP tasks extension (SEP-2663, `io.modelcontextprotocol/tasks`) on the hub's side.
//!
//! Tandem declares the extension to its servers, so a server may answer a `tools/call`
//! with a task instead of a result. Each such task is a [`Followed`]: Tandem's own id for
//! it (`server:ULID`, the one an agent sees), the server's id, and what Tandem last saw of
//! it, which goes on the bus ([`crate::events::Event::DownstreamTask`]) when it starts, at
//! each new status or status message, and at its end, for the editors to show as progress.
//!
//! Who polls it: an agent whose client declared the extension gets the task and polls it
//! through Tandem (the MCP face keeps its tasks, by Tandem's id); for any other caller
//! Tandem drives it ([`Downstream::call_tool`] through `drive_task`): it polls `tasks/get`
//! at the server's interval (clamped), puts the task's questions to the same
//! [`super::ask::Channel`] a server's direct questions go to and sends the answers with
//! `tasks/update`, sends `tasks/cancel` when the call is dropped, and gives up, cancelling
//! the task, past [`MAX_DRIVE`] or [`MAX_QUESTIONS`].
//!
//! A server is not trusted: a task id longer than [`MAX_TASK_ID_BYTES`] is refused, a
//! status message is cut to [`STATUS_MESSAGE_CHARS`] and made printable before anyone
//! sees it, and no log line quotes a message whole.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolResult, CancelTaskParams, CreateTaskResult, ErrorData, GetTaskParams, GetTaskResult,
    InputRequests, InputResponses, Task, TaskPayload, TaskStatus, UpdateTaskParams,
};
use serde_json::Value;

use super::describe::printable;
use super::server::{Downstream, HubError};
use crate::events::{DownstreamTask, TaskPhase};

/// The longest task id (or question key) taken from a server; ids are UUIDs and the like.
pub const MAX_TASK_ID_BYTES: usize = 256;
/// How much of a task's status message is passed on (to the agent and the editor).
pub const STATUS_MESSAGE_CHARS: usize = 300;
/// How often Tandem polls a task it drives, at most and at least, whatever the server
/// suggests; and when it suggests nothing.
pub const MIN_POLL: Duration = Duration::from_millis(50);
pub const MAX_POLL: Duration = Duration::from_secs(5);
const DEFAULT_POLL: Duration = Duration::from_secs(1);
/// How long Tandem drives one task before it cancels it and fails the call.
pub const MAX_DRIVE: Duration = Duration::from_secs(60 * 60);
/// How many questions one task Tandem drives may ask before Tandem gives up on it.
pub const MAX_QUESTIONS: usize = 32;
/// How much of a server's failure message an error quotes.
const QUOTED_CHARS: usize = 200;

/// Where a server's tasks are reported: the hub puts them on the bus.
pub type OnTask = Arc<dyn Fn(DownstreamTask) + Send + Sync>;

/// A downstream task Tandem follows.
pub struct Followed {
    /// Tandem's id: the server's name and a ULID.
    pub id: String,
    server: Arc<Downstream>,
    /// The server's id.
    remote: String,
    tool: String,
    /// How long the server keeps it, from its creation (none: as long as it likes).
    ttl: Option<Duration>,
    seen: Mutex<Seen>,
}

/// What Tandem last saw of a task.
struct Seen {
    status: TaskStatus,
    message: Option<String>,
    ended: bool,
}

impl Followed {
    /// Follows the task the server `server` created for a call of `tool`; refuses an id
    /// past [`MAX_TASK_ID_BYTES`].
    pub fn new(
        server: &Arc<Downstream>,
        tool: &str,
        task: &Task,
    ) -> Result<Arc<Followed>, HubError> {
        let name = server.name();
        if task.task_id.is_empty() || task.task_id.len() > MAX_TASK_ID_BYTES {
            return Err(HubError::Server(format!(
                "server '{name}' answered tool {tool} with a task whose id is empty or longer \
                 than {MAX_TASK_ID_BYTES} bytes; Tandem does not follow it"
            )));
        }
        let message = task.status_message.as_deref().map(status_message);
        let followed = Arc::new(Followed {
            id: format!("{name}:{}", ulid::Ulid::new()),
            server: server.clone(),
            remote: task.task_id.clone(),
            tool: tool.to_string(),
            ttl: task.ttl_ms.map(Duration::from_millis),
            seen: Mutex::new(Seen {
                status: task.status,
                message: message.clone(),
                ended: false,
            }),
        });
        tracing::info!(
            "server {name} runs tool {} as task {}",
            printable(tool, QUOTED_CHARS),
            followed.id
        );
        followed.publish(TaskPhase::Started, task.status, message);
        Ok(followed)
    }

    /// The server's name.
    pub fn server(&self) -> &str {
        self.server.name()
    }

    /// How long the server said it keeps the task, from its creation.
    pub fn ttl(&self) -> Option<Duration> {
        self.ttl
    }

    /// Whether it reached a terminal status (or Tandem stopped following it).
    pub fn ended(&self) -> bool {
        self.lock().ended
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The server's `task` as Tandem shows it: Tandem's id in place of the server's, the
    /// status message cut and printable.
    pub fn shown(&self, task: &Task) -> Task {
        let mut task = task.clone();
        task.task_id = self.id.clone();
        task.status_message = task.status_message.as_deref().map(status_message);
        task
    }

    /// `tasks/get` on the server, answered as Tandem shows it ([`Followed::shown`]).
    pub async fn get(&self) -> Result<GetTaskResult, HubError> {
        let params = GetTaskParams::new(self.remote.clone());
        let mut got = self
            .server
            .request("tasks/get", |peer| {
                let params = params.clone();
                async move { peer.get_task(params).await }
            })
            .await?;
        got.task.task = self.shown(&got.task.task);
        self.saw(got.task.status(), got.task.task.status_message.clone());
        Ok(got)
    }

    /// `tasks/update`: answers to the task's questions.
    pub async fn update(&self, responses: InputResponses) -> Result<(), HubError> {
        let params = UpdateTaskParams::new(self.remote.clone(), responses);
        self.server
            .request("tasks/update", |peer| {
                let params = params.clone();
                async move { peer.update_task(params).await }
            })
            .await
    }

    /// `tasks/cancel`. Cancellation is the server's to honour; the next `tasks/get` says.
    pub async fn cancel(&self) -> Result<(), HubError> {
        let params = CancelTaskParams::new(self.remote.clone());
        self.server
            .request("tasks/cancel", |peer| {
                let params = params.clone();
                async move { peer.cancel_task(params).await }
            })
            .await
    }

    /// Records what a `tasks/get` showed, and reports it when it changed.
    fn saw(&self, status: TaskStatus, message: Option<String>) {
        let mut seen = self.lock();
        if seen.ended || (seen.status == status && seen.message == message) {
            return;
        }
        seen.status = status;
        seen.message = message.clone();
        seen.ended = status.is_terminal();
        drop(seen);
        let phase = if status.is_terminal() {
            TaskPhase::Ended
        } else {
            TaskPhase::Changed
        };
        self.publish(phase, status, message);
    }

    /// Stops following the task before its end: reported as ended with `why`.
    pub fn stop(&self, why: &str) {
        let mut seen = self.lock();
        if seen.ended {
            return;
        }
        seen.ended = true;
        drop(seen);
        (self.server.on_task)(DownstreamTask {
            id: self.id.clone(),
            server: self.server.name().to_string(),
            tool: self.tool.clone(),
            phase: TaskPhase::Ended,
            status: "unfollowed".into(),
            message: Some(why.to_string()),
        });
    }

    fn publish(&self, phase: TaskPhase, status: TaskStatus, message: Option<String>) {
        (self.server.on_task)(DownstreamTask {
            id: self.id.clone(),
            server: self.server.name().to_string(),
            tool: self.tool.clone(),
            phase,
            status: label(status).into(),
            message,
        });
    }
}

impl Drop for Followed {
    fn drop(&mut self) {
        self.stop("its session ended, or no longer keeps it");
    }
}

/// The extension's spelling of a status.
pub fn label(status: TaskStatus) -> &'static str {
    match status {
        TaskStatus::Working => "working",
        TaskStatus::InputRequired => "input_required",
        TaskStatus::Completed => "completed",
        TaskStatus::Failed => "failed",
        TaskStatus::Cancelled => "cancelled",
        _ => "unknown",
    }
}

/// A server's status message as Tandem passes it on.
fn status_message(text: &str) -> String {
    printable(text, STATUS_MESSAGE_CHARS)
}

/// How long to wait before the next poll, from what the server suggests.
fn poll_interval(suggested_ms: Option<u64>) -> Duration {
    suggested_ms
        .map_or(DEFAULT_POLL, Duration::from_millis)
        .clamp(MIN_POLL, MAX_POLL)
}

/// Cancels the task on the server if dropped armed: the call it belongs to was dropped
/// (the agent cancelled, or gave up), or Tandem gave up on it.
struct CancelOnDrop(Option<Arc<Followed>>);

impl CancelOnDrop {
    fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(followed) = self.0.take() else {
            return;
        };
        followed.stop("the call was cancelled, or Tandem gave up on it");
        // Only on the live connection: a server stopped meanwhile (the session ended) is not
        // started again to cancel a task it no longer has.
        let Some(peer) = followed.server.live_peer() else {
            return;
        };
        if tokio::runtime::Handle::try_current().is_ok() {
            let limit = followed.server.config.timeout;
            tokio::spawn(async move {
                let params = CancelTaskParams::new(followed.remote.clone());
                match tokio::time::timeout(limit, peer.cancel_task(params)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => tracing::debug!(
                        "task {} not cancelled: {}",
                        followed.id,
                        printable(&e.to_string(), QUOTED_CHARS)
                    ),
                    Err(_) => tracing::debug!("task {} not cancelled in time", followed.id),
                }
            });
        }
    }
}

impl Downstream {
    /// Drives the task the server answered a call of `tool` with, to its result: polls,
    /// answers its questions through the server's [`super::ask::Channel`], and cancels it
    /// if this future is dropped or gives up.
    pub(super) async fn drive_task(
        self: &Arc<Self>,
        tool: &str,
        created: CreateTaskResult,
    ) -> Result<CallToolResult, HubError> {
        let name = self.name().to_string();
        let followed = Followed::new(self, tool, &created.task)?;
        let mut armed = CancelOnDrop(Some(followed.clone()));
        let deadline = tokio::time::Instant::now() + MAX_DRIVE;
        let mut wait = poll_interval(created.task.poll_interval_ms);
        let mut asked = HashSet::new();
        loop {
            if tokio::time::timeout_at(deadline, tokio::time::sleep(wait))
                .await
                .is_err()
            {
                return Err(HubError::Timeout(format!(
                    "server '{name}' ran tool {tool} as a task that did not end within {} \
                     minutes; Tandem cancelled it",
                    MAX_DRIVE.as_secs() / 60
                )));
            }
            let got = followed.get().await?;
            wait = poll_interval(got.task.task.poll_interval_ms);
            match got.task.payload {
                TaskPayload::InputRequired { input_requests } => {
                    let answers = self.answer(tool, input_requests, &mut asked).await?;
                    if !answers.is_empty() {
                        followed.update(answers).await?;
                        wait = MIN_POLL;
                    }
                }
                TaskPayload::Completed { result } => {
                    armed.disarm();
                    return serde_json::from_value(Value::Object(result)).map_err(|e| {
                        HubError::Server(format!(
                            "server '{name}' ended its task of tool {tool} with something \
                             that is not a tool's result: {}",
                            printable(&e.to_string(), QUOTED_CHARS)
                        ))
                    });
                }
                TaskPayload::Failed { error } => {
                    armed.disarm();
                    let error = serde_json::from_value::<ErrorData>(Value::Object(error))
                        .unwrap_or_else(|_| {
                            ErrorData::internal_error("the task failed without a valid error", None)
                        });
                    return Err(HubError::Answered {
                        message: format!(
                            "server '{name}' failed its task of tool {tool}: {}",
                            printable(&error.message, QUOTED_CHARS)
                        ),
                        error,
                    });
                }
                TaskPayload::Cancelled => {
                    armed.disarm();
                    return Err(HubError::Server(format!(
                        "server '{name}' cancelled its task of tool {tool}"
                    )));
                }
                _ => {}
            }
        }
    }

    /// Answers the questions of a task not answered yet (`asked` keeps their keys), as
    /// the server's direct questions are answered.
    async fn answer(
        &self,
        tool: &str,
        questions: InputRequests,
        asked: &mut HashSet<String>,
    ) -> Result<InputResponses, HubError> {
        let name = self.name();
        let mut answers = InputResponses::new();
        for (key, question) in questions {
            if asked.contains(&key) {
                continue;
            }
            if asked.len() >= MAX_QUESTIONS || key.len() > MAX_TASK_ID_BYTES {
                return Err(HubError::Server(format!(
                    "server '{name}' asked more than {MAX_QUESTIONS} questions (or one with a \
                     key past {MAX_TASK_ID_BYTES} bytes) in its task of tool {tool}; Tandem \
                     cancelled it"
                )));
            }
            asked.insert(key.clone());
            let Some(request) = super::ask::request_of(question) else {
                return Err(HubError::Server(format!(
                    "server '{name}' asked a kind of question Tandem does not know in its \
                     task of tool {tool}; Tandem cancelled it"
                )));
            };
            // The call ends the question when it is dropped (the driver with it).
            let answer = self
                .channel
                .answer(request, std::future::pending())
                .await
                .map_err(|e| {
                    HubError::Server(format!(
                        "no one could answer what server '{name}' asked in its task of tool \
                         {tool} ({}); Tandem cancelled it",
                        printable(&e.message, QUOTED_CHARS)
                    ))
                })?;
            let answer = serde_json::to_value(answer).unwrap_or(Value::Null);
            answers.insert(key, answer);
        }
        Ok(answers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polls_within_bounds_whatever_the_server_suggests() {
        assert_eq!(poll_interval(Some(0)), MIN_POLL);
        assert_eq!(poll_interval(Some(u64::MAX)), MAX_POLL);
        assert_eq!(poll_interval(None), DEFAULT_POLL);
        assert_eq!(poll_interval(Some(700)), Duration::from_millis(700));
    }

    #[test]
    fn status_messages_are_cut_and_printable() {
        let hostile = format!("\u{1b}[31mred\nline{}", "x".repeat(10_000));
        let shown = status_message(&hostile);
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
        assert!(shown.chars().count() <= STATUS_MESSAGE_CHARS + 20);
        assert!(shown.ends_with('…'));
    }
}
