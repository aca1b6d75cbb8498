//! `$/progress` of the focus task: `begin` when it runs, a `report` per milestone, `end` on
//! completion with its outcome. A downstream server's task (the MCP tasks extension) shows
//! the same way: `begin` titled with its server and tool, a `report` per new status or
//! status message, `end` with how it ended.

use tower_lsp_server::ls_types::notification::Progress as ProgressNotification;
use tower_lsp_server::ls_types::{
    NumberOrString, ProgressParams, ProgressParamsValue, WorkDoneProgress, WorkDoneProgressBegin,
    WorkDoneProgressEnd, WorkDoneProgressReport,
};
use ulid::Ulid;

use super::TandemLsp;
use tandem_core::calls::{self, CallError, params::TaskShowParams};
use tandem_core::events::{DownstreamTask, TaskChange, TaskPhase};
use tandem_core::tasks::{TaskRecord, TaskState};

/// The most downstream tasks a session shows at once (each is a progress token).
const MAX_DOWNSTREAM: usize = 64;

/// A downstream task's status for people.
fn status_label(status: &str) -> &str {
    match status {
        "working" => "working",
        "input_required" => "waiting for input",
        "completed" => "completed",
        "failed" => "failed",
        "cancelled" => "cancelled",
        _ => "no longer followed",
    }
}

impl TandemLsp {
    /// Turns a task event into `$/progress`, at once (diagnostics follow, debounced).
    pub(super) async fn progress(&self, task_id: Ulid, change: &TaskChange) {
        if !self.session.flags().progress {
            return;
        }
        let token = {
            let state = self.session.state.lock().await;
            state.progress.get(&task_id).cloned()
        };
        match (change, token) {
            (TaskChange::Completed, Some(token)) => {
                self.session.state.lock().await.progress.remove(&task_id);
                let summary = self
                    .task(task_id)
                    .await
                    .map(|t| {
                        let files = t.files_changed.map(|f| f.all().count()).unwrap_or(0);
                        format!(
                            "{} · {files} file(s) changed",
                            crate::render::state_label(t.status)
                        )
                    })
                    .unwrap_or_else(|_| "completed".into());
                self.send_progress(
                    token,
                    WorkDoneProgress::End(WorkDoneProgressEnd {
                        message: Some(summary),
                    }),
                )
                .await;
            }
            (TaskChange::Completed, None) => {}
            (TaskChange::Milestone { progress, message }, Some(token)) => {
                self.send_progress(
                    token,
                    WorkDoneProgress::Report(WorkDoneProgressReport {
                        message: Some(message.clone()),
                        percentage: progress.map(|p| p.round() as u32),
                        cancellable: None,
                    }),
                )
                .await;
            }
            (_, Some(_)) => {}
            (_, None) => self.begin_progress(task_id).await,
        }
    }

    /// Begins the progress of a running task (its current state as the first message).
    async fn begin_progress(&self, task_id: Ulid) {
        let Ok(task) = self.task(task_id).await else {
            return;
        };
        if task.status != TaskState::Running {
            return;
        }
        let token = NumberOrString::String(format!("tandem-task-{task_id}"));
        if !self.create_token(&token).await {
            return;
        }
        self.session
            .state
            .lock()
            .await
            .progress
            .insert(task_id, token.clone());
        self.send_progress(
            token,
            WorkDoneProgress::Begin(WorkDoneProgressBegin {
                title: format!("Task: {}", task.name),
                cancellable: Some(false),
                message: Some(task.last_message.unwrap_or(task.goal)),
                percentage: task.progress.map(|p| p.round() as u32),
            }),
        )
        .await;
    }

    /// Turns a downstream task's event into `$/progress`.
    pub(super) async fn downstream_progress(&self, task: &DownstreamTask) {
        if !self.session.flags().progress {
            return;
        }
        // The core made the message printable and short; the status says the rest.
        let message = match &task.message {
            Some(m) => format!("{} · {m}", status_label(&task.status)),
            None => status_label(&task.status).to_string(),
        };
        match task.phase {
            TaskPhase::Started => {
                let shown = self.session.state.lock().await.downstream.len();
                let token = NumberOrString::String(format!("tandem-downstream-{}", task.id));
                if shown >= MAX_DOWNSTREAM || !self.create_token(&token).await {
                    return;
                }
                let mut state = self.session.state.lock().await;
                state.downstream.insert(task.id.clone(), token.clone());
                drop(state);
                let begin = WorkDoneProgressBegin {
                    title: format!("{}: {}", task.server, task.tool),
                    cancellable: Some(false),
                    message: Some(message),
                    percentage: None,
                };
                self.send_progress(token, WorkDoneProgress::Begin(begin))
                    .await;
            }
            TaskPhase::Changed => {
                let token = self
                    .session
                    .state
                    .lock()
                    .await
                    .downstream
                    .get(&task.id)
                    .cloned();
                if let Some(token) = token {
                    let report = WorkDoneProgressReport {
                        message: Some(message),
                        percentage: None,
                        cancellable: None,
                    };
                    self.send_progress(token, WorkDoneProgress::Report(report))
                        .await;
                }
            }
            TaskPhase::Ended => {
                let token = self.session.state.lock().await.downstream.remove(&task.id);
                if let Some(token) = token {
                    let end = WorkDoneProgressEnd {
                        message: Some(message),
                    };
                    self.send_progress(token, WorkDoneProgress::End(end)).await;
                }
            }
        }
    }

    async fn task(&self, id: Ulid) -> Result<TaskRecord, CallError> {
        let params = TaskShowParams { id: id.to_string() };
        self.session.run(&calls::TASKS_SHOW, params).await
    }

    /// Asks the client to take `token` for a progress; `false` when it refuses.
    async fn create_token(&self, token: &NumberOrString) -> bool {
        match self.client.create_work_done_progress(token.clone()).await {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!("the client refused a progress token: {e}");
                false
            }
        }
    }

    async fn send_progress(&self, token: NumberOrString, value: WorkDoneProgress) {
        self.client
            .send_notification::<ProgressNotification>(ProgressParams {
                token,
                value: ProgressParamsValue::WorkDone(value),
            })
            .await;
    }
}
