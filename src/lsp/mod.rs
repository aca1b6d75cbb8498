//! The LSP face (tower-lsp-server 0.23): what the agent does, shown in the editor.
//!
//! One [`serve`] per editor connection (in the daemon, or in-process with `--standalone`).
//! A session follows its workspace's *focus task* (see [`crate::tasks::Tasks::focus`]):
//! diagnostics on the hunks it changed, code lenses, `$/progress` from its milestones. It
//! learns of changes from the core's event bus (never by polling): the task's events, and
//! the files a watch of the task's tree sees change on disk while it runs ([`crate::watch`]);
//! and from `didSave`. Memory is searched with `workspace/symbol`, shown on hover over `[ID]`
//! citations and in `tandem://` documents, and added from a selection with a code action.
//! Every request, command and custom method is documented in `docs/lsp-extensions.md`.

mod prompts;
mod text;
pub mod view;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::broadcast::error::RecvError;
use tower_lsp_server::jsonrpc::{self, ErrorCode};
use tower_lsp_server::ls_types::notification::Progress as ProgressNotification;
use tower_lsp_server::ls_types::*;
use tower_lsp_server::{Client, LanguageServer, LspService, Server};
use ulid::Ulid;

use crate::calls::{self, CallError};
use crate::core::{Core, LazyCore};
use crate::events::{Event, FilesChange, HubChange, TaskChange};
use crate::memory::{EntryDetails, MemoryError, SearchQuery};
use crate::tasks::{TaskError, TaskState};
use crate::watch::Watch;
use text::Encoding;
use view::Focus;

/// How long a completed task stays in focus.
pub const RECENT: Duration = Duration::from_secs(30 * 60);
/// Refreshes of the focus are at least this far apart (events in between fold into one).
const DEBOUNCE: Duration = Duration::from_millis(30);
/// Hub changes within this window reach the editor as one `tandem/promptsChanged` (a server
/// that starts sends a status change and its prompts together; a config reload, many).
const PROMPTS_DEBOUNCE: Duration = Duration::from_millis(50);
const MEMORY_URI: &str = "tandem://memory/";
const TASK_URI: &str = "tandem://task/";
const SYMBOL_LIMIT: i64 = 20;

/// The commands `workspace/executeCommand` takes.
pub const COMMANDS: &[&str] = &[
    "tandem.tasks.list",
    view::SHOW_TASK,
    view::SHOW_DECISIONS,
    "tandem.memory.search",
    "tandem.memory.show",
    "tandem.memory.add",
    "tandem.memory.saveSelection",
    "tandem.diagnostics.dismiss",
    "tandem.status",
];

/// `tandem/promptsChanged` (server → client): `{servers, config}`.
enum PromptsChanged {}

impl tower_lsp_server::ls_types::notification::Notification for PromptsChanged {
    type Params = Value;
    const METHOD: &'static str = "tandem/promptsChanged";
}

/// Facts about the serving process, for `tandem/status`.
#[derive(Debug, Clone)]
pub struct Host {
    pub home: PathBuf,
    pub log_file: PathBuf,
    /// Whether this session is served by the daemon.
    pub daemon: bool,
}

/// Serves one LSP session on `input`/`output` until the client exits or disconnects.
/// `workspace` is the fallback when the client names no root.
pub async fn serve<I, O>(core: Arc<LazyCore>, host: Host, workspace: PathBuf, input: I, output: O)
where
    I: AsyncRead + Unpin,
    O: AsyncWrite,
{
    let session = Arc::new(Session {
        core,
        host,
        fallback_workspace: workspace,
        workspace: OnceLock::new(),
        flags: OnceLock::new(),
        docs: Mutex::new(HashMap::new()),
        languages: Mutex::new(HashMap::new()),
        prompt_filetypes: OnceLock::new(),
        state: tokio::sync::Mutex::new(ViewState::default()),
        pending: Mutex::new(Pending::default()),
        wake: tokio::sync::Notify::new(),
        watch: Mutex::new(None),
        computing: tokio::sync::Mutex::new(()),
        prompts_changed: Mutex::new(BTreeSet::new()),
        prompts_notify: tokio::sync::Notify::new(),
        follower: Mutex::new(None),
    });
    let s = session.clone();
    let (service, socket) = LspService::build(move |client| TandemLsp {
        client,
        session: s.clone(),
    })
    .custom_method("tandem/document", TandemLsp::document)
    .custom_method("tandem/status", TandemLsp::status)
    .custom_method("tandem/inject", TandemLsp::inject_request)
    .finish();
    Server::new(input, output, socket).serve(service).await;
    if let Some(task) = session
        .follower
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take()
    {
        task.abort();
    }
    // The tree's watch stops with its last session.
    session
        .watch
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take();
}

/// What the client can take, from its capabilities.
#[derive(Debug, Clone, Copy)]
struct Flags {
    progress: bool,
    lens_refresh: bool,
    encoding: Encoding,
}

struct Session {
    core: Arc<LazyCore>,
    host: Host,
    fallback_workspace: PathBuf,
    workspace: OnceLock<PathBuf>,
    flags: OnceLock<Flags>,
    /// Open documents' text, by URI.
    docs: Mutex<HashMap<Uri, String>>,
    /// Open documents' language ids (where prompt completion applies).
    languages: Mutex<HashMap<Uri, String>>,
    /// `initializationOptions.promptFiletypes`, if the client gave it.
    prompt_filetypes: OnceLock<Vec<String>>,
    state: tokio::sync::Mutex<ViewState>,
    /// What the refresher is asked to recompute; `wake` tells it.
    pending: Mutex<Pending>,
    wake: tokio::sync::Notify,
    /// The watch of the focus task's tree, held while that task runs.
    watch: Mutex<Option<Arc<Watch>>>,
    /// Held by a refresh or a file recomputation from reading the disk to publishing: one at
    /// a time, so a slow full refresh never publishes what it read over what a later,
    /// quicker recomputation of a file published (a save beside the watch's report).
    computing: tokio::sync::Mutex<()>,
    /// Servers whose prompts or state changed since the last `tandem/promptsChanged` (`""`:
    /// the config as a whole), and the signal that there are some.
    prompts_changed: Mutex<BTreeSet<String>>,
    prompts_notify: tokio::sync::Notify,
    follower: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// Refreshes asked for and not yet run.
#[derive(Default)]
struct Pending {
    /// The whole focus.
    full: bool,
    /// These files only (absolute paths).
    files: BTreeSet<PathBuf>,
}

#[derive(Default)]
struct ViewState {
    focus: Option<Focus>,
    /// What was last published, per document.
    published: BTreeMap<PathBuf, Vec<Diagnostic>>,
    /// Progress tokens begun and not yet ended, by task.
    progress: HashMap<Ulid, NumberOrString>,
    /// A completed task whose warnings the user dismissed.
    dismissed: Option<Ulid>,
}

/// Aborts a background task when its owner ends.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The language server of one editor connection: tower-lsp's handler, over its session.
struct TandemLsp {
    client: Client,
    session: Arc<Session>,
}

type LspResult<T> = jsonrpc::Result<T>;

/// A core error as a JSON-RPC error whose `data` is the spec's error object.
fn rpc_error(e: CallError) -> jsonrpc::Error {
    let code = match e.code() {
        "INTERNAL_ERROR" | "SNAPSHOT_FAILED" => ErrorCode::InternalError,
        _ => ErrorCode::InvalidParams,
    };
    jsonrpc::Error {
        code,
        message: e.message().to_string().into(),
        data: Some(e.to_json()),
    }
}

fn task_error(e: TaskError) -> jsonrpc::Error {
    rpc_error(e.into())
}

fn memory_error(e: MemoryError) -> jsonrpc::Error {
    rpc_error(e.into())
}

fn invalid(message: impl Into<String>) -> jsonrpc::Error {
    rpc_error(CallError::new("INVALID_ARGUMENT", message, json!({})))
}

impl Session {
    fn workspace(&self) -> &Path {
        self.workspace.get().unwrap_or(&self.fallback_workspace)
    }

    fn flags(&self) -> Flags {
        self.flags.get().copied().unwrap_or(Flags {
            progress: false,
            lens_refresh: false,
            encoding: Encoding::Utf16,
        })
    }

    async fn core(&self) -> LspResult<Arc<Core>> {
        self.core
            .get()
            .await
            .map_err(|e| rpc_error(CallError::from(e)))
    }

    /// Runs `f` on the core on a blocking thread; a panic is an internal error, never the
    /// end of the session.
    async fn blocking<T, F>(&self, f: F) -> LspResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Core) -> LspResult<T> + Send + 'static,
    {
        let core = self.core().await?;
        calls::run_blocking("an LSP request", move || f(&core))
            .await
            .map_err(rpc_error)?
    }

    /// Runs one of the core's operations by name (`crate::calls`): the same arguments,
    /// results and error codes as the MCP tools and the CLI.
    async fn call(&self, method: &'static str, params: Value) -> LspResult<Value> {
        let ws = self.workspace().to_path_buf();
        self.blocking(move |core| calls::call(core, Some(&ws), method, params).map_err(rpc_error))
            .await
    }

    /// Asks the refresher to recompute the whole focus.
    fn request_refresh(&self) {
        self.pending.lock().unwrap_or_else(|p| p.into_inner()).full = true;
        self.wake.notify_one();
    }

    /// Asks the refresher to recompute these files of the focus.
    fn request_files(&self, files: impl IntoIterator<Item = PathBuf>) {
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .files
            .extend(files);
        self.wake.notify_one();
    }

    /// Holds the watch of `root` (the running focus task's tree), or none.
    fn keep_watch(&self, root: Option<&Path>) {
        let mut held = self.watch.lock().unwrap_or_else(|p| p.into_inner());
        if held.as_ref().map(|w| w.root()) == root {
            return;
        }
        *held = None;
        if let (Some(root), Some(core)) = (root, self.core.opened()) {
            *held = Some(core.watches.watch(root));
        }
    }

    /// Whether this session holds the watch of `root`.
    fn watching(&self, root: &Path) -> bool {
        self.watch
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .is_some_and(|w| w.root() == root)
    }

    fn text_of(&self, uri: &Uri) -> Option<String> {
        if let Some(t) = self.docs.lock().unwrap_or_else(|p| p.into_inner()).get(uri) {
            return Some(t.clone());
        }
        std::fs::read_to_string(uri.to_file_path()?).ok()
    }
}

/// A file URI's canonical path (the task's paths are canonical).
fn uri_path(uri: &Uri) -> Option<PathBuf> {
    if uri.scheme().as_str() != "file" {
        return None;
    }
    let path = uri.to_file_path()?.into_owned();
    Some(path.canonicalize().unwrap_or(path))
}

/// What a session's mutex holds, leaving it empty (a poisoned lock still gives its data).
fn take<T: Default>(m: &Mutex<T>) -> T {
    std::mem::take(&mut *m.lock().unwrap_or_else(|p| p.into_inner()))
}

fn path_uri(path: &Path) -> Option<Uri> {
    Uri::from_file_path(path)
}

/// Recomputes the focus task and everything shown of it.
fn load_focus(
    core: &Core,
    workspace: &Path,
    dismissed: Option<Ulid>,
) -> Result<Option<Focus>, TaskError> {
    let Some(task) = core.tasks.focus(workspace, RECENT)? else {
        return Ok(None);
    };
    if task.state != TaskState::Running && dismissed == Some(task.id) {
        return Ok(None);
    }
    let files = if task.state == TaskState::Running {
        core.tasks.live_files(&task, None)?
    } else {
        Vec::new()
    };
    Ok(Some(Focus {
        decisions: core.tasks.decision_count(&task)?,
        review_issues: core.tasks.review_issues(&task)?,
        files,
        task,
    }))
}

impl TandemLsp {
    /// Recomputes the focus and publishes what changed.
    async fn refresh(&self) {
        let _one = self.session.computing.lock().await;
        let ws = self.session.workspace().to_path_buf();
        let dismissed = self.session.state.lock().await.dismissed;
        let loaded = self
            .session
            .blocking(move |core| load_focus(core, &ws, dismissed).map_err(task_error))
            .await;
        let focus = match loaded {
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

    /// Publishes `next` (all files, or those in `only`), clearing files that had
    /// diagnostics and have none now.
    async fn publish(
        &self,
        state: &mut ViewState,
        mut next: BTreeMap<PathBuf, Vec<Diagnostic>>,
        only: Option<&BTreeSet<PathBuf>>,
    ) {
        let paths: Vec<PathBuf> = state
            .published
            .keys()
            .chain(next.keys())
            .filter(|p| only.is_none_or(|o| o.contains(*p)))
            .cloned()
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
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

    /// Files saved in the editor or changed on disk: recompute the focus task's hunks of
    /// those files only (a diff limited to them), and publish theirs.
    async fn files_changed(&self, paths: BTreeSet<PathBuf>) {
        let _one = self.session.computing.lock().await;
        let (task, root) = {
            let state = self.session.state.lock().await;
            match &state.focus {
                Some(f) if f.task.state == TaskState::Running => {
                    (f.task.clone(), f.root().to_path_buf())
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
        let query = (task.clone(), rels.clone());
        let files = self
            .session
            .blocking(move |core| {
                core.tasks
                    .live_files(&query.0, Some(&query.1))
                    .map_err(task_error)
            })
            .await;
        let Ok(files) = files else { return };
        let mut state = self.session.state.lock().await;
        let Some(focus) = state.focus.as_mut().filter(|f| f.task.id == task.id) else {
            return;
        };
        let before = lens_key(Some(focus));
        focus.files.retain(|f| !rels.contains(&f.path));
        focus.files.extend(files);
        focus.files.sort_by(|a, b| a.path.cmp(&b.path));
        let changed = lens_key(Some(focus)) != before;
        let next = view::diagnostics(focus);
        self.publish(&mut state, next, Some(&paths)).await;
        drop(state);
        if changed {
            self.refresh_lenses().await;
        }
    }

    /// Turns a task event into `$/progress`, at once (diagnostics follow, debounced).
    async fn progress(&self, task_id: Ulid, change: &TaskChange) {
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
                    .session
                    .blocking(move |core| core.tasks.task(&task_id.to_string()).map_err(task_error))
                    .await
                    .map(|t| {
                        let files = t.files_changed.map(|f| f.all().count()).unwrap_or(0);
                        format!(
                            "{} · {files} file(s) changed",
                            crate::render::state_label(t.state)
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
        let Ok(task) = self
            .session
            .blocking(move |core| core.tasks.task(&task_id.to_string()).map_err(task_error))
            .await
        else {
            return;
        };
        if task.state != TaskState::Running {
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

    async fn send_progress(&self, token: NumberOrString, value: WorkDoneProgress) {
        self.client
            .send_notification::<ProgressNotification>(ProgressParams {
                token,
                value: ProgressParamsValue::WorkDone(value),
            })
            .await;
    }

    /// Follows the core's events for this workspace until the session ends.
    async fn follow(self) {
        let core = match self.session.core().await {
            Ok(c) => c,
            Err(e) => {
                self.client
                    .show_message(MessageType::ERROR, format!("tandem: {}", e.message))
                    .await;
                return;
            }
        };
        let mut events = core.bus().subscribe();
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
                    let pending = take(&this.session.pending);
                    if pending.full || pending.files.len() > crate::watch::MAX_PATHS {
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
                    if workspace == self.session.workspace() && change != HubChange::Tools {
                        self.session
                            .prompts_changed
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .insert(server);
                        self.session.prompts_notify.notify_one();
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

    /// Tells the client that the hub's prompts changed (`tandem/promptsChanged`): which
    /// servers, and whether the config was reloaded. The editor lists them again.
    async fn prompts_changed(&self) {
        let servers = take(&self.session.prompts_changed);
        if servers.is_empty() {
            return;
        }
        let config = servers.contains("");
        let servers: Vec<String> = servers.into_iter().filter(|s| !s.is_empty()).collect();
        self.client
            .send_notification::<PromptsChanged>(json!({ "servers": servers, "config": config }))
            .await;
    }

    fn clone_handle(&self) -> TandemLsp {
        TandemLsp {
            client: self.client.clone(),
            session: self.session.clone(),
        }
    }

    // ---- custom methods --------------------------------------------------------------

    async fn document(&self, params: DocumentParams) -> LspResult<Value> {
        let uri = params.uri;
        if let Some(id) = uri.strip_prefix(MEMORY_URI) {
            let id = id.to_string();
            let entry = self
                .session
                .blocking(move |core| core.memory.show(&id).map_err(memory_error))
                .await?;
            return Ok(json!({
                "uri": uri,
                "title": entry.title,
                "filetype": "markdown",
                "text": crate::render::entry_markdown(&entry),
            }));
        }
        if let Some(id) = uri.strip_prefix(TASK_URI) {
            let id = id.trim_end_matches('/').to_string();
            let record = self
                .session
                .blocking(move |core| core.tasks.record(&id).map_err(task_error))
                .await?;
            return Ok(json!({
                "uri": uri,
                "title": format!("Task: {}", record.name),
                "filetype": "markdown",
                "text": crate::render::task_markdown(&record),
            }));
        }
        Err(invalid(format!(
            "not a tandem document: {uri} (expected {MEMORY_URI}ID or {TASK_URI}ID)"
        )))
    }

    async fn status(&self, _params: Option<Value>) -> LspResult<Value> {
        let focus = self
            .session
            .state
            .lock()
            .await
            .focus
            .as_ref()
            .map(|f| f.task.id.to_string());
        let host = &self.session.host;
        Ok(json!({
            "version": env!("CARGO_PKG_VERSION"),
            "pid": std::process::id(),
            "home": host.home,
            "log_file": host.log_file,
            "workspace": self.session.workspace(),
            "daemon": host.daemon,
            "focus_task": focus,
            "watch": self
                .session
                .watch
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
                .map(|w| w.status()),
        }))
    }

    // ---- commands --------------------------------------------------------------------

    async fn command(&self, name: &str, args: Vec<Value>) -> LspResult<Value> {
        let first = args.into_iter().next();
        if prompts::COMMANDS.contains(&name) {
            return self
                .prompt_command(name, first)
                .await
                .unwrap_or_else(|| Err(invalid(format!("no command {name}"))));
        }
        let id_arg = |v: Option<Value>| -> LspResult<String> {
            match v {
                Some(Value::String(s)) => Ok(s),
                Some(Value::Object(o)) => match o.get("id").or_else(|| o.get("task_id")) {
                    Some(Value::String(s)) => Ok(s.clone()),
                    _ => Err(invalid(format!("{name} needs an id"))),
                },
                _ => Err(invalid(format!("{name} needs an id as its first argument"))),
            }
        };
        match name {
            "tandem.tasks.list" => {
                let all = first
                    .as_ref()
                    .and_then(|v| v.get("all"))
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                self.session
                    .call(calls::TASKS_LIST.name, json!({ "all": all }))
                    .await
            }
            view::SHOW_TASK => {
                let id = id_arg(first)?;
                self.session
                    .call(calls::TASKS_SHOW.name, json!({ "id": id }))
                    .await
            }
            view::SHOW_DECISIONS => {
                let id = id_arg(first)?;
                let r = self
                    .session
                    .call(calls::TASKS_SHOW.name, json!({ "id": id }))
                    .await?;
                Ok(json!({"task_id": r["task_id"], "name": r["name"], "decisions": r["decisions"]}))
            }
            "tandem.memory.search" => match first {
                Some(Value::String(q)) => {
                    self.session
                        .call(calls::MEMORY_SEARCH.name, json!({ "query": q }))
                        .await
                }
                Some(args @ Value::Object(_)) => {
                    self.session.call(calls::MEMORY_SEARCH.name, args).await
                }
                _ => Err(invalid(format!(
                    "{name} takes a query or an object of rekall_search arguments"
                ))),
            },
            "tandem.memory.add" => match first {
                Some(args @ Value::Object(_)) => {
                    self.session.call(calls::MEMORY_ADD.name, args).await
                }
                _ => Err(invalid(format!(
                    "{name} takes an object of rekall_add arguments"
                ))),
            },
            "tandem.memory.show" => {
                let id = id_arg(first)?;
                self.session
                    .call(calls::MEMORY_SHOW.name, json!({ "id": id }))
                    .await
            }
            "tandem.memory.saveSelection" => self.save_selection(first).await,
            "tandem.diagnostics.dismiss" => {
                let dismissed = {
                    let mut state = self.session.state.lock().await;
                    let done = state
                        .focus
                        .as_ref()
                        .filter(|f| f.task.state != TaskState::Running)
                        .map(|f| f.task.id);
                    if done.is_some() {
                        state.dismissed = done;
                    }
                    done
                };
                if dismissed.is_some() {
                    self.refresh().await;
                }
                Ok(json!({"dismissed": dismissed.map(|d| d.to_string())}))
            }
            "tandem.status" => self.status(None).await,
            other => Err(jsonrpc::Error {
                code: ErrorCode::MethodNotFound,
                message: format!("unknown command '{other}' (known: {})", COMMANDS.join(", "))
                    .into(),
                data: None,
            }),
        }
    }

    async fn save_selection(&self, arg: Option<Value>) -> LspResult<Value> {
        let args: SaveSelection = match arg {
            Some(v) => serde_json::from_value(v)
                .map_err(|e| invalid(format!("tandem.memory.saveSelection: {e}")))?,
            None => {
                return Err(invalid(
                    "tandem.memory.saveSelection needs {uri, range, type}",
                ));
            }
        };
        let Some(entry_type) = args.entry_type.filter(|t| !t.trim().is_empty()) else {
            return Err(invalid(
                "tandem.memory.saveSelection needs 'type' (bug, pattern, decision, pitfall, config, reference)",
            ));
        };
        let text = self.session.text_of(&args.uri).ok_or_else(|| {
            invalid(format!(
                "document {} is not open or readable",
                args.uri.as_str()
            ))
        })?;
        let selected = text::slice(&text, args.range, self.session.flags().encoding);
        if selected.trim().is_empty() {
            return Err(invalid("the selection is empty"));
        }
        let path = uri_path(&args.uri);
        let ws = self.session.workspace();
        let shown = path
            .as_deref()
            .map(|p| p.strip_prefix(ws).unwrap_or(p).display().to_string())
            .unwrap_or_else(|| args.uri.as_str().to_string());
        let context = format!(
            "{shown}:L{}-L{}",
            args.range.start.line + 1,
            args.range.end.line + 1
                - u32::from(
                    args.range.end.character == 0 && args.range.end.line > args.range.start.line
                )
        );
        let title = args
            .title
            .filter(|t| !t.trim().is_empty())
            .unwrap_or_else(|| text::first_line(&selected, 80));
        let add = json!({
            "type": entry_type,
            "title": title,
            "content": selected,
            "context": context,
            "tags": args.tags,
            "project": ws.file_name().map(|p| p.to_string_lossy()),
        });
        self.session.call(calls::MEMORY_ADD.name, add).await
    }
}

#[derive(serde::Deserialize)]
struct DocumentParams {
    uri: String,
}

#[derive(serde::Deserialize)]
struct SaveSelection {
    uri: Uri,
    range: Range,
    #[serde(rename = "type")]
    entry_type: Option<String>,
    title: Option<String>,
    tags: Option<Vec<String>>,
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
        format!("{} {} {} {:?}", f.task.id, f.headline(), f.decisions, hunks)
    })
}

fn symbol_kind(entry_type: &str) -> SymbolKind {
    match entry_type {
        "bug" => SymbolKind::EVENT,
        "pattern" => SymbolKind::CLASS,
        "decision" => SymbolKind::CONSTANT,
        "pitfall" => SymbolKind::KEY,
        "config" => SymbolKind::PROPERTY,
        _ => SymbolKind::FILE,
    }
}

fn memory_symbol(
    id: &str,
    title: &str,
    entry_type: &str,
    tags: &[String],
) -> Option<WorkspaceSymbol> {
    let uri: Uri = format!("{MEMORY_URI}{id}").parse().ok()?;
    let container = if tags.is_empty() {
        entry_type.to_string()
    } else {
        format!("{entry_type} · {}", tags.join(", "))
    };
    Some(WorkspaceSymbol {
        name: title.to_string(),
        kind: symbol_kind(entry_type),
        tags: None,
        container_name: Some(container),
        location: OneOf::Left(Location::new(uri, Range::default())),
        data: None,
    })
}

fn hover_markdown(entry: &EntryDetails) -> String {
    const MAX: usize = 1500;
    let mut md = crate::render::entry_markdown(entry);
    if md.len() > MAX {
        let cut = (0..=MAX)
            .rev()
            .find(|&i| md.is_char_boundary(i))
            .unwrap_or(0);
        md.truncate(cut);
        md.push_str(&format!(
            "…\n\n(open `{MEMORY_URI}{}` for the whole entry)",
            entry.id
        ));
    }
    md
}

impl LanguageServer for TandemLsp {
    async fn initialize(&self, params: InitializeParams) -> LspResult<InitializeResult> {
        let root = params
            .workspace_folders
            .as_ref()
            .and_then(|f| f.first())
            .map(|f| f.uri.clone())
            .or_else(|| {
                #[allow(deprecated)]
                params.root_uri.clone()
            })
            .and_then(|u| uri_path(&u));
        if let Some(root) = root {
            let _ = self
                .session
                .workspace
                .set(crate::config::workspace_root(&root));
        }
        if let Some(list) = prompts::prompt_filetypes(params.initialization_options.as_ref()) {
            let _ = self.session.prompt_filetypes.set(list);
        }
        let caps = &params.capabilities;
        let encodings = caps
            .general
            .as_ref()
            .and_then(|g| g.position_encodings.clone())
            .unwrap_or_default();
        let encoding = if encodings.contains(&PositionEncodingKind::UTF8) {
            Encoding::Utf8
        } else {
            Encoding::Utf16
        };
        let _ = self.session.flags.set(Flags {
            progress: caps
                .window
                .as_ref()
                .and_then(|w| w.work_done_progress)
                .unwrap_or(false),
            lens_refresh: caps
                .workspace
                .as_ref()
                .and_then(|w| w.code_lens.as_ref())
                .and_then(|c| c.refresh_support)
                .unwrap_or(false),
            encoding,
        });
        tracing::info!(
            "LSP session for {} ({})",
            self.session.workspace().display(),
            params
                .client_info
                .as_ref()
                .map(|c| c.name.as_str())
                .unwrap_or("unknown client")
        );
        Ok(InitializeResult {
            server_info: Some(ServerInfo {
                name: "tandem".into(),
                version: Some(env!("CARGO_PKG_VERSION").into()),
            }),
            capabilities: ServerCapabilities {
                position_encoding: Some(match encoding {
                    Encoding::Utf8 => PositionEncodingKind::UTF8,
                    Encoding::Utf16 => PositionEncodingKind::UTF16,
                }),
                text_document_sync: Some(TextDocumentSyncCapability::Options(
                    TextDocumentSyncOptions {
                        open_close: Some(true),
                        change: Some(TextDocumentSyncKind::FULL),
                        save: Some(TextDocumentSyncSaveOptions::Supported(true)),
                        ..TextDocumentSyncOptions::default()
                    },
                )),
                hover_provider: Some(HoverProviderCapability::Simple(true)),
                code_lens_provider: Some(CodeLensOptions {
                    resolve_provider: Some(false),
                }),
                workspace_symbol_provider: Some(OneOf::Left(true)),
                code_action_provider: Some(CodeActionProviderCapability::Simple(true)),
                completion_provider: Some(CompletionOptions {
                    trigger_characters: Some(vec!["/".into(), " ".into(), "=".into(), ":".into()]),
                    resolve_provider: Some(false),
                    ..CompletionOptions::default()
                }),
                execute_command_provider: Some(ExecuteCommandOptions {
                    commands: COMMANDS
                        .iter()
                        .chain(prompts::COMMANDS)
                        .map(|c| c.to_string())
                        .collect(),
                    ..ExecuteCommandOptions::default()
                }),
                ..ServerCapabilities::default()
            },
            ..InitializeResult::default()
        })
    }

    async fn initialized(&self, _: InitializedParams) {
        let follower = tokio::spawn(self.clone_handle().follow());
        *self
            .session
            .follower
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(follower);
    }

    async fn shutdown(&self) -> LspResult<()> {
        Ok(())
    }

    async fn did_open(&self, params: DidOpenTextDocumentParams) {
        let d = params.text_document;
        self.session
            .languages
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(d.uri.clone(), d.language_id.clone());
        self.session
            .docs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(d.uri, d.text);
    }

    async fn did_change(&self, params: DidChangeTextDocumentParams) {
        // Full sync: the last change is the whole text.
        if let Some(change) = params.content_changes.into_iter().last() {
            self.session
                .docs
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(params.text_document.uri, change.text);
        }
    }

    async fn did_close(&self, params: DidCloseTextDocumentParams) {
        self.session
            .docs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&params.text_document.uri);
        self.session
            .languages
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&params.text_document.uri);
    }

    async fn did_save(&self, params: DidSaveTextDocumentParams) {
        if let Some(path) = uri_path(&params.text_document.uri) {
            self.files_changed(BTreeSet::from([path])).await;
        }
    }

    async fn code_lens(&self, params: CodeLensParams) -> LspResult<Option<Vec<CodeLens>>> {
        let Some(path) = uri_path(&params.text_document.uri) else {
            return Ok(None);
        };
        let state = self.session.state.lock().await;
        let Some(focus) = &state.focus else {
            return Ok(None);
        };
        let Ok(rel) = path.strip_prefix(focus.root()) else {
            return Ok(None);
        };
        let lenses = view::code_lenses(focus, &rel.to_string_lossy());
        Ok((!lenses.is_empty()).then_some(lenses))
    }

    async fn hover(&self, params: HoverParams) -> LspResult<Option<Hover>> {
        let at = params.text_document_position_params;
        let Some(text) = self.session.text_of(&at.text_document.uri) else {
            return Ok(None);
        };
        let Some((id, range)) =
            text::citation_at(&text, at.position, self.session.flags().encoding)
        else {
            return Ok(None);
        };
        let shown = self
            .session
            .blocking(move |core| Ok(core.memory.show(&id)))
            .await?;
        let markdown = match shown {
            Ok(entry) => hover_markdown(&entry),
            Err(MemoryError::EntryNotFound { .. }) => return Ok(None),
            Err(e @ MemoryError::AmbiguousId { .. }) => format!("**{}**\n\n{}", e.code(), e),
            Err(e) => return Err(memory_error(e)),
        };
        Ok(Some(Hover {
            contents: HoverContents::Markup(MarkupContent {
                kind: MarkupKind::Markdown,
                value: markdown,
            }),
            range: Some(range),
        }))
    }

    async fn symbol(
        &self,
        params: WorkspaceSymbolParams,
    ) -> LspResult<Option<WorkspaceSymbolResponse>> {
        let query = params.query;
        let symbols = self
            .session
            .blocking(move |core| {
                let out: Vec<WorkspaceSymbol> = if query.trim().is_empty() {
                    core.memory
                        .recent(SYMBOL_LIMIT as usize)
                        .map_err(memory_error)?
                        .iter()
                        .filter_map(|e| {
                            memory_symbol(
                                &e.id.to_string(),
                                &e.title,
                                e.entry_type.as_str(),
                                &e.tags,
                            )
                        })
                        .collect()
                } else {
                    let q = SearchQuery {
                        query,
                        limit: Some(SYMBOL_LIMIT),
                        ..SearchQuery::default()
                    };
                    core.memory
                        .search(&q)
                        .map_err(memory_error)?
                        .results
                        .iter()
                        .filter_map(|r| memory_symbol(&r.id, &r.title, &r.entry_type, &r.tags))
                        .collect()
                };
                Ok(out)
            })
            .await?;
        Ok(Some(WorkspaceSymbolResponse::Nested(symbols)))
    }

    async fn completion(&self, params: CompletionParams) -> LspResult<Option<CompletionResponse>> {
        self.prompt_completion(params).await
    }

    async fn code_action(&self, params: CodeActionParams) -> LspResult<Option<CodeActionResponse>> {
        let r = params.range;
        let run = self.prompt_action(&params.text_document.uri, r.start.line);
        if r.start == r.end {
            return Ok(run.map(|a| vec![a]));
        }
        let action = CodeAction {
            title: "Save selection to memory".into(),
            command: Some(Command {
                title: "Save selection to memory".into(),
                command: "tandem.memory.saveSelection".into(),
                arguments: Some(vec![json!({"uri": params.text_document.uri, "range": r})]),
            }),
            ..CodeAction::default()
        };
        Ok(Some(
            std::iter::once(CodeActionOrCommand::CodeAction(action))
                .chain(run)
                .collect(),
        ))
    }

    async fn execute_command(&self, params: ExecuteCommandParams) -> LspResult<Option<LSPAny>> {
        self.command(&params.command, params.arguments)
            .await
            .map(Some)
    }
}
