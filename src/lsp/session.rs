//! One editor connection's state: its workspace, what the client can take, the documents it
//! has open, the focus shown and what was published of it; and the ways the session reaches
//! the core, which are `tandem_core::calls`' methods only ([`Session::run`], [`Session::call`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::{Value, json};
use tower_lsp_server::jsonrpc::{self, ErrorCode};
use tower_lsp_server::ls_types::{Diagnostic, NumberOrString, Uri};
use ulid::Ulid;

use super::Host;
use super::text::Encoding;
use super::view::Focus;
use tandem_core::calls::{self, CallError, Method};
use tandem_core::core::{Core, LazyCore};
use tandem_core::watch::Watch;

pub(super) type LspResult<T> = jsonrpc::Result<T>;

/// What a failed request is called in the log.
const REQUEST: &str = "an LSP request";

/// A core error as a JSON-RPC error whose `data` is the spec's error object.
pub(super) fn call_error(e: CallError) -> jsonrpc::Error {
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

/// `INVALID_ARGUMENT` with this message.
pub(super) fn invalid(message: impl Into<String>) -> jsonrpc::Error {
    call_error(CallError::new("INVALID_ARGUMENT", message, json!({})))
}

/// What the client can take, from its capabilities.
#[derive(Debug, Clone, Copy)]
pub(super) struct Flags {
    pub progress: bool,
    pub lens_refresh: bool,
    pub encoding: Encoding,
}

pub(super) struct Session {
    core: Arc<LazyCore>,
    pub host: Host,
    fallback_workspace: PathBuf,
    pub workspace: OnceLock<PathBuf>,
    pub flags: OnceLock<Flags>,
    /// Open documents' text, by URI.
    docs: Mutex<HashMap<Uri, String>>,
    /// Open documents' language ids (where prompt completion applies).
    languages: Mutex<HashMap<Uri, String>>,
    /// `initializationOptions.promptFiletypes`, if the client gave it.
    pub prompt_filetypes: OnceLock<Vec<String>>,
    /// `initializationOptions.questions`: the client shows servers' questions as forms
    /// (`tandem/question`, answered with `tandem.answer`).
    pub shows_questions: OnceLock<bool>,
    pub state: tokio::sync::Mutex<ViewState>,
    /// What the refresher is asked to recompute; `wake` tells it.
    pending: Mutex<Pending>,
    pub wake: tokio::sync::Notify,
    /// The watch of the focus task's tree, held while that task runs.
    watch: Mutex<Option<Arc<Watch>>>,
    /// Held by a refresh or a file recomputation from reading the disk to publishing: one at
    /// a time, so a slow full refresh never publishes what it read over what a later,
    /// quicker recomputation of a file published (a save beside the watch's report).
    pub computing: tokio::sync::Mutex<()>,
    /// Servers whose prompts or state changed since the last `tandem/promptsChanged` (`""`:
    /// the config as a whole), and the signal that there are some.
    prompts_changed: Mutex<BTreeSet<String>>,
    pub prompts_notify: tokio::sync::Notify,
    /// The event follower, started once the client is initialized.
    follower: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// Refreshes asked for and not yet run.
#[derive(Default)]
pub(super) struct Pending {
    /// The whole focus.
    pub full: bool,
    /// These files only (absolute paths).
    pub files: BTreeSet<PathBuf>,
}

#[derive(Default)]
pub(super) struct ViewState {
    pub focus: Option<Focus>,
    /// What was last published, per document.
    pub published: BTreeMap<PathBuf, Vec<Diagnostic>>,
    /// Progress tokens begun and not yet ended, by task.
    pub progress: HashMap<Ulid, NumberOrString>,
    /// Progress tokens of downstream tasks begun and not yet ended, by Tandem's id.
    pub downstream: HashMap<String, NumberOrString>,
    /// A completed task whose warnings the user dismissed.
    pub dismissed: Option<Ulid>,
}

impl Session {
    pub fn new(core: Arc<LazyCore>, host: Host, fallback_workspace: PathBuf) -> Session {
        Session {
            core,
            host,
            fallback_workspace,
            workspace: OnceLock::new(),
            flags: OnceLock::new(),
            docs: Mutex::new(HashMap::new()),
            languages: Mutex::new(HashMap::new()),
            prompt_filetypes: OnceLock::new(),
            shows_questions: OnceLock::new(),
            state: tokio::sync::Mutex::new(ViewState::default()),
            pending: Mutex::new(Pending::default()),
            wake: tokio::sync::Notify::new(),
            watch: Mutex::new(None),
            computing: tokio::sync::Mutex::new(()),
            prompts_changed: Mutex::new(BTreeSet::new()),
            prompts_notify: tokio::sync::Notify::new(),
            follower: Mutex::new(None),
        }
    }

    pub fn workspace(&self) -> &Path {
        self.workspace.get().unwrap_or(&self.fallback_workspace)
    }

    pub fn flags(&self) -> Flags {
        self.flags.get().copied().unwrap_or(Flags {
            progress: false,
            lens_refresh: false,
            encoding: Encoding::Utf16,
        })
    }

    /// The core, opened on first use.
    pub async fn core(&self) -> Result<Arc<Core>, CallError> {
        Ok(self.core.get().await?)
    }

    /// Runs `method` with its own types on a blocking thread, for the session's workspace.
    /// A panic is an internal error, never the end of the session.
    pub async fn run<P, R>(&self, method: &'static Method<P, R>, params: P) -> Result<R, CallError>
    where
        P: serde::Serialize + Send + 'static,
        R: Send + 'static,
    {
        let core = self.core().await?;
        let ws = self.workspace().to_path_buf();
        calls::run_blocking(REQUEST, move || method.run(&core, Some(&ws), params)).await?
    }

    /// Runs one of the core's operations (`tandem_core::calls`) on JSON: the same
    /// arguments, results and error codes as the MCP tools and the CLI (the commands).
    pub async fn call(
        &self,
        method: &'static dyn calls::AnyMethod,
        params: Value,
    ) -> LspResult<Value> {
        let core = self.core().await.map_err(call_error)?;
        let ws = self.workspace().to_path_buf();
        calls::spawn_call(REQUEST, move || {
            method.call(&core, &calls::Session::local(Some(&ws)), params)
        })
        .await
        .map_err(call_error)
    }

    /// Keeps the follower, which ends with the session ([`Session::end`]).
    pub fn set_follower(&self, follower: tokio::task::JoinHandle<()>) {
        *lock(&self.follower) = Some(follower);
    }

    /// The connection ended: the follower stops, and so does the watch, with its last session.
    pub fn end(&self) {
        if let Some(task) = lock(&self.follower).take() {
            task.abort();
        }
        lock(&self.watch).take();
    }

    /// Asks the refresher to recompute the whole focus.
    pub fn request_refresh(&self) {
        lock(&self.pending).full = true;
        self.wake.notify_one();
    }

    /// Asks the refresher to recompute these files of the focus.
    pub fn request_files(&self, files: impl IntoIterator<Item = PathBuf>) {
        lock(&self.pending).files.extend(files);
        self.wake.notify_one();
    }

    /// What the refresher was asked since it last looked.
    pub fn take_pending(&self) -> Pending {
        std::mem::take(&mut *lock(&self.pending))
    }

    /// A server's prompts or state changed (`""`: the config as a whole).
    pub fn prompts_changed(&self, server: String) {
        lock(&self.prompts_changed).insert(server);
        self.prompts_notify.notify_one();
    }

    /// The servers whose prompts changed since this was last asked.
    pub fn take_prompts_changed(&self) -> BTreeSet<String> {
        std::mem::take(&mut *lock(&self.prompts_changed))
    }

    /// Holds the watch of `root` (the running focus task's tree), or none.
    pub fn keep_watch(&self, root: Option<&Path>) {
        let mut held = lock(&self.watch);
        if held.as_ref().map(|w| w.root()) == root {
            return;
        }
        *held = None;
        if let (Some(root), Some(core)) = (root, self.core.opened()) {
            *held = Some(core.watches.watch(root));
        }
    }

    /// Whether this session holds the watch of `root`.
    pub fn watching(&self, root: &Path) -> bool {
        lock(&self.watch).as_ref().is_some_and(|w| w.root() == root)
    }

    /// The held watch's state, for `tandem/status`.
    pub fn watch_status(&self) -> Option<Value> {
        lock(&self.watch).as_ref().map(|w| json!(w.status()))
    }

    pub fn open(&self, uri: Uri, language: String, text: String) {
        lock(&self.languages).insert(uri.clone(), language);
        lock(&self.docs).insert(uri, text);
    }

    pub fn changed(&self, uri: Uri, text: String) {
        lock(&self.docs).insert(uri, text);
    }

    pub fn close(&self, uri: &Uri) {
        lock(&self.docs).remove(uri);
        lock(&self.languages).remove(uri);
    }

    /// An open document's language id (`""` when not open).
    pub fn language(&self, uri: &Uri) -> String {
        lock(&self.languages).get(uri).cloned().unwrap_or_default()
    }

    /// An open document's text, else the file's.
    pub fn text_of(&self, uri: &Uri) -> Option<String> {
        if let Some(t) = lock(&self.docs).get(uri) {
            return Some(t.clone());
        }
        std::fs::read_to_string(uri.to_file_path()?).ok()
    }
}

/// A session's mutex, locked (a poisoned lock still gives its data).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A file URI's canonical path (the task's paths are canonical).
pub(super) fn uri_path(uri: &Uri) -> Option<PathBuf> {
    if uri.scheme().as_str() != "file" {
        return None;
    }
    let path = uri.to_file_path()?.into_owned();
    Some(path.canonicalize().unwrap_or(path))
}

pub(super) fn path_uri(path: &Path) -> Option<Uri> {
    Uri::from_file_path(path)
}
