//! Following the workspace: the core's events (the task's, the watch's files, the hub's)
//! drive refreshes of the focus task, whose diagnostics and code lenses are published as they
//! change; files saved or changed on disk are recomputed alone.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tower_lsp_server::ls_types::notification::Notification;
use tower_lsp_server::ls_types::{CodeLens, Diagnostic, MessageType, Uri};

use super::TandemLsp;
use super::session::{LspResult, ViewState, call_error, path_uri, uri_path};
use super::view::{self, Focus};
use tandem_core::calls::{
    self,
    params::{LiveChangesParams, TaskFocusParams},
};
use tandem_core::events::{Event, FilesChange, HubChange, TaskChange};
use tandem_core::tasks::TaskState;

/// Refreshes of the focus are at least this far apart (events in between fold into one).
const DEBOUNCE: Duration = Duration::from_millis(30);
/// Hub changes within this window reach the editor as one `tandem/promptsChanged` (a server
/// that starts sends a status change and its prompts together; a config reload, many).
const PROMPTS_DEBOUNCE: Duration = Duration::from_millis(50);

/// `tandem/promptsChanged` (server → client): `{servers, config}`.
enum PromptsChanged {}

impl Notification for PromptsChanged {
    type Params = Value;
    const METHOD: &'static str = "tandem/promptsChanged";
}

/// `tandem/taskChanged` (server → client): `{task_id, change, progress?, message?}`, one per
/// event of a task of the workspace, sent as the event arrives (before the refresh).
enum TaskChanged {}

impl Notification for TaskChanged {
    type Params = Value;
    const METHOD: &'static str = "tandem/taskChanged";
}

/// `tandem/question` (server → client): `{id, server, message, schema}`, a downstream
/// server's question for the user, sent to clients that show forms; answered with the
/// command `tandem.answer`.
enum QuestionAsked {}

impl Notification for QuestionAsked {
    type Params = Value;
    const METHOD: &'static str = "tandem/question";
}

/// Tells the editor that a sign-in to `server` waits for the user; on "Sign in", asks it to
/// open `url` in the browser (`window/showDocument`, external).
async fn offer_sign_in(client: tower_lsp_server::Client, server: String, url: String) {
    use tower_lsp_server::ls_types::{MessageActionItem, ShowDocumentParams};
    let choice = client
        .show_message_request(
            MessageType::INFO,
            format!("Server '{server}' waits for you to sign in"),
            Some(vec![MessageActionItem {
                title: "Sign in".into(),
                properties: Default::default(),
            }]),
        )
        .await;
    if !matches!(&choice, Ok(Some(item)) if item.title == "Sign in") {
        return;
    }
    let Ok(uri) = url.parse::<Uri>() else {
        tracing::warn!("the sign-in URL of server {server} is not a URI the editor takes");
        return;
    };
    let shown = client
        .show_document(ShowDocumentParams {
            uri,
            external: Some(true),
            take_focus: Some(true),
            selection: None,
        })
        .await;
    if !matches!(shown, Ok(true)) {
        client
            .show_message(
                MessageType::WARNING,
                format!("Tandem: the editor did not open the sign-in page of '{server}'"),
            )
            .await;
    }
}

/// The params of `tandem/taskChanged` for `change` of the task `task_id`.
fn task_changed(task_id: ulid::Ulid, change: &TaskChange) -> Value {
    let kind = match change {
        TaskChange::Started => "started",
        TaskChange::Decision => "decision",
        TaskChange::Issue { .. } => "issue",
        TaskChange::Milestone { .. } => "milestone",
        TaskChange::Completed => "completed",
    };
    let mut params = json!({"task_id": task_id.to_string(), "change": kind});
    match change {
        TaskChange::Milestone { progress, message } => {
            params["progress"] = json!(progress);
            params["message"] = json!(message);
        }
        TaskChange::Issue {
            requires_human_review,
        } => params["requires_human_review"] = json!(requires_human_review),
        _ => {}
    }
    params
}

/// Aborts a background task when its owner ends.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl TandemLsp {
    /// Follows the core's events for this workspace until the session ends.
    pub(super) async fn follow(self) {
        let core = match self.session.core().await {
            Ok(c) => c,
            Err(e) => {
                self.client
                    .show_message(MessageType::ERROR, format!("tandem: {}", e.message()))
                    .await;
                return;
            }
        };
        let mut events = core.bus().subscribe();
        // Counted as an editor that shows forms while the session follows.
        let shows_questions = self.session.shows_questions.get() == Some(&true);
        let _attached =
            shows_questions.then(|| core.hub.questions().attach(self.session.workspace()));
        // The trust question waits for the user: it must not hold the follower up.
        let asker = self.clone_handle();
        tokio::spawn(async move { asker.ask_trust().await });
        self.refresh().await;
        let focus_running = {
            let state = self.session.state.lock().await;
            state
                .focus
                .as_ref()
                .filter(|f| f.task.state == TaskState::Running)
                .map(|f| f.task.id)
        };
        if let Some(id) = focus_running {
            self.progress(id, &TaskChange::Started).await;
        }
        // Refreshes run beside the event loop, so progress never waits for a diff: the
        // first event refreshes at once, later ones fold into one refresh per DEBOUNCE.
        // Files changed on disk refresh those files only, at once (a diff limited to them).
        let refresher = {
            let this = self.clone_handle();
            tokio::spawn(async move {
                loop {
                    this.session.wake.notified().await;
                    let pending = this.session.take_pending();
                    if pending.full || pending.files.len() > tandem_core::watch::MAX_PATHS {
                        this.refresh().await;
                        tokio::time::sleep(DEBOUNCE).await;
                    } else if !pending.files.is_empty() {
                        this.files_changed(pending.files).await;
                    }
                }
            })
        };
        let _refresher = AbortOnDrop(refresher);
        let notifier = {
            let this = self.clone_handle();
            tokio::spawn(async move {
                loop {
                    this.session.prompts_notify.notified().await;
                    tokio::time::sleep(PROMPTS_DEBOUNCE).await;
                    this.prompts_changed().await;
                }
            })
        };
        let _notifier = AbortOnDrop(notifier);
        loop {
            match events.recv().await {
                Ok(Event::Task {
                    workspace,
                    task_id,
                    change,
                }) => {
                    if workspace != self.session.workspace() {
                        continue;
                    }
                    if matches!(change, TaskChange::Started) {
                        // A new task takes the focus from a dismissed one.
                        self.session.state.lock().await.dismissed = None;
                    }
                    self.client
                        .send_notification::<TaskChanged>(task_changed(task_id, &change))
                        .await;
                    self.progress(task_id, &change).await;
                    self.session.request_refresh();
                }
                Ok(Event::Files { root, change }) => {
                    if !self.session.watching(&root) {
                        continue;
                    }
                    match change {
                        FilesChange::Paths(paths) => self.session.request_files(paths),
                        FilesChange::Rescan => self.session.request_refresh(),
                    }
                }
                Ok(Event::Hub {
                    workspace,
                    server,
                    change,
                }) => {
                    if workspace == self.session.workspace()
                        && !matches!(change, HubChange::Tools | HubChange::Resources)
                    {
                        self.session.prompts_changed(server);
                    }
                }
                Ok(Event::SignIn {
                    workspace,
                    server,
                    url,
                }) => {
                    if workspace == self.session.workspace() {
                        let client = self.client.clone();
                        tokio::spawn(offer_sign_in(client, server, url));
                    }
                }
                Ok(Event::DownstreamTask { workspace, task }) => {
                    if workspace == self.session.workspace() {
                        self.downstream_progress(&task).await;
                    }
                }
                Ok(Event::Question(question)) => {
                    if shows_questions && question.workspace == self.session.workspace() {
                        let params = serde_json::to_value(&*question).unwrap_or_default();
                        self.client.send_notification::<QuestionAsked>(params).await;
                    }
                }
                Err(RecvError::Lagged(n)) => {
                    tracing::debug!("LSP session lagged {n} events; refreshing");
                    self.session.request_refresh();
                }
                Err(RecvError::Closed) => return,
            }
        }
    }

    /// The focus task now, unless it is a completed one the user dismissed.
    async fn load_focus(&self) -> LspResult<Option<Focus>> {
        let dismissed = self.session.state.lock().await.dismissed;
        let focus = self
            .session
            .run(&calls::TASKS_FOCUS, TaskFocusParams::default())
            .await
            .map_err(call_error)?;
        Ok(focus.filter(|f| f.task.state == TaskState::Running || dismissed != Some(f.task.id)))
    }

    /// Recomputes the focus and publishes what changed.
    pub(super) async fn refresh(&self) {
        let _one = self.session.computing.lock().await;
        let focus = match self.load_focus().await {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!("cannot load the focus task: {}", e.message);
                return;
            }
        };
        let mut state = self.session.state.lock().await;
        let lenses_before = lens_key(state.focus.as_ref());
        state.focus = focus;
        let running_root = state
            .focus
            .as_ref()
            .filter(|f| f.task.state == TaskState::Running)
            .map(|f| f.root().to_path_buf());
        self.session.keep_watch(running_root.as_deref());
        let lenses_changed = lens_key(state.focus.as_ref()) != lenses_before;
        let next = state
            .focus
            .as_ref()
            .map(view::diagnostics)
            .unwrap_or_default();
        self.publish(&mut state, next, None).await;
        drop(state);
        if lenses_changed {
            self.refresh_lenses().await;
        }
    }

    /// Files saved in the editor or changed on disk: recompute the focus task's hunks of
    /// those files only (a diff limited to them), and publish theirs.
    pub(super) async fn files_changed(&self, paths: BTreeSet<PathBuf>) {
        let _one = self.session.computing.lock().await;
        let (task_id, root) = {
            let state = self.session.state.lock().await;
            match &state.focus {
                Some(f) if f.task.state == TaskState::Running => {
                    (f.task.id, f.root().to_path_buf())
                }
                _ => return,
            }
        };
        let rels: Vec<String> = paths
            .iter()
            .filter_map(|p| p.strip_prefix(&root).ok())
            .map(|r| r.to_string_lossy().into_owned())
            .collect();
        if rels.is_empty() {
            return;
        }
        let query = LiveChangesParams {
            id: task_id.to_string(),
            paths: Some(rels.clone()),
        };
        let Ok(changes) = self.session.run(&calls::TASKS_LIVE_CHANGES, query).await else {
            return;
        };
        let mut state = self.session.state.lock().await;
        let Some(focus) = state.focus.as_mut().filter(|f| f.task.id == task_id) else {
            return;
        };
        let before = lens_key(Some(focus));
        focus.files.retain(|f| !rels.contains(&f.path));
        focus.files.extend(changes.files);
        focus.files.sort_by(|a, b| a.path.cmp(&b.path));
        let changed = lens_key(Some(focus)) != before;
        let next = view::diagnostics(focus);
        self.publish(&mut state, next, Some(&paths)).await;
        drop(state);
        if changed {
            self.refresh_lenses().await;
        }
    }

    /// Publishes `next` (all files, or those in `only`), clearing files that had
    /// diagnostics and have none now.
    async fn publish(
        &self,
        state: &mut ViewState,
        mut next: BTreeMap<PathBuf, Vec<Diagnostic>>,
        only: Option<&BTreeSet<PathBuf>>,
    ) {
        let paths: BTreeSet<PathBuf> = state
            .published
            .keys()
            .chain(next.keys())
            .filter(|p| only.is_none_or(|o| o.contains(*p)))
            .cloned()
            .collect();
        for path in paths {
            let new = next.remove(&path).unwrap_or_default();
            let old = state.published.get(&path).cloned().unwrap_or_default();
            if new == old {
                continue;
            }
            let Some(uri) = path_uri(&path) else { continue };
            self.client
                .publish_diagnostics(uri, new.clone(), None)
                .await;
            if new.is_empty() {
                state.published.remove(&path);
            } else {
                state.published.insert(path, new);
            }
        }
    }

    async fn refresh_lenses(&self) {
        if self.session.flags().lens_refresh
            && let Err(e) = self.client.code_lens_refresh().await
        {
            tracing::debug!("codeLens/refresh failed: {e}");
        }
    }

    /// The focus task's lenses on the document `uri`.
    pub(super) async fn code_lenses(&self, uri: &Uri) -> Option<Vec<CodeLens>> {
        let path = uri_path(uri)?;
        let state = self.session.state.lock().await;
        let focus = state.focus.as_ref()?;
        let rel = path.strip_prefix(focus.root()).ok()?;
        let lenses = view::code_lenses(focus, &rel.to_string_lossy());
        (!lenses.is_empty()).then_some(lenses)
    }

    /// Tells the client that the hub's prompts changed (`tandem/promptsChanged`): which
    /// servers, and whether the config was reloaded. The editor lists them again.
    async fn prompts_changed(&self) {
        let servers = self.session.take_prompts_changed();
        if servers.is_empty() {
            return;
        }
        let config = servers.contains("");
        let servers: Vec<String> = servers.into_iter().filter(|s| !s.is_empty()).collect();
        self.client
            .send_notification::<PromptsChanged>(json!({ "servers": servers, "config": config }))
            .await;
    }
}

/// What the lenses depend on: a refresh is sent only when it changes.
fn lens_key(focus: Option<&Focus>) -> Option<String> {
    focus.map(|f| {
        let hunks: Vec<_> = f
            .files
            .iter()
            .map(|x| {
                (
                    x.path.as_str(),
                    x.hunks
                        .iter()
                        .map(|h| (h.new_start, h.new_lines))
                        .collect::<Vec<_>>(),
                )
            })
            .collect();
        format!(
            "{} {} {} {:?}",
            f.task.id,
            super::view::headline(f),
            f.decisions,
            hunks
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_events_become_task_changed_params() {
        let id = ulid::Ulid::from_string("01HX0000000000000000000000").unwrap();
        let cases = [
            (
                TaskChange::Started,
                json!({"task_id": "01HX0000000000000000000000", "change": "started"}),
            ),
            (
                TaskChange::Milestone {
                    progress: Some(75.0),
                    message: "Running tests".into(),
                },
                json!({"task_id": "01HX0000000000000000000000", "change": "milestone",
                       "progress": 75.0, "message": "Running tests"}),
            ),
            (
                TaskChange::Milestone {
                    progress: None,
                    message: "Half way".into(),
                },
                json!({"task_id": "01HX0000000000000000000000", "change": "milestone",
                       "progress": null, "message": "Half way"}),
            ),
            (
                TaskChange::Issue {
                    requires_human_review: true,
                },
                json!({"task_id": "01HX0000000000000000000000", "change": "issue",
                       "requires_human_review": true}),
            ),
            (
                TaskChange::Completed,
                json!({"task_id": "01HX0000000000000000000000", "change": "completed"}),
            ),
        ];
        for (change, want) in cases {
            assert_eq!(task_changed(id, &change), want, "{change:?}");
        }
    }
}
