//! `$/progress` of the focus task: `begin` when it runs, a `report` per milestone, `end` on
//! completion with its outcome.

use tower_lsp_server::ls_types::notification::Progress as ProgressNotification;
use tower_lsp_server::ls_types::{
    NumberOrString, ProgressParams, ProgressParamsValue, WorkDoneProgress, WorkDoneProgressBegin,
    WorkDoneProgressEnd, WorkDoneProgressReport,
};
use ulid::Ulid;

use super::TandemLsp;
use tandem_core::calls::{self, CallError, params::TaskShowParams};
use tandem_core::events::TaskChange;
use tandem_core::tasks::{TaskRecord, TaskState};

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
        if let Err(e) = self.client.create_work_done_progress(token.clone()).await {
            tracing::debug!("the client refused a progress token: {e}");
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

    async fn task(&self, id: Ulid) -> Result<TaskRecord, CallError> {
        let params = TaskShowParams { id: id.to_string() };
        self.session.run(&calls::TASKS_SHOW, params).await
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
