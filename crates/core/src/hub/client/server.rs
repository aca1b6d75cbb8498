//! One downstream MCP server: its connection (an rmcp client over a stdio child process),
//! its cached prompts and tools, and what happens when it misbehaves.
//!
//! Every request has a timeout. A server that exits or does not answer in time is marked
//! (`restarting`, with the error and the last lines of its stderr), its connection is
//! dropped (the child is killed), and it is started again after a backoff (1 s, 2 s, 4 s ...
//! up to 60 s; after 8 failures in a row it stays `failed` until the config changes or
//! someone asks for it again). Meanwhile its requests fail at once with that error: one
//! broken server never stalls the daemon or another server. A stdio server runs over
//! [`super::stdio`], which bounds what its process may write: one that writes lines that
//! are not MCP on stdout is `failed` at once (starting it again would not help), one that
//! writes a message past the size limit is restarted like a crash.
//!
//! A remote server that answers 401 and has no usable stored token is `needs_sign_in`: it
//! is not retried, and the next activation (or `tandem servers login`) signs in
//! ([`Downstream::sign_in`], through [`super::oauth`]); a stored token is used on connect
//! and renewed by rmcp before it expires and on a 401.
//!
//! A failure's message is shown and logged with the entry's values as written
//! ([`ServerConfig::redact`]): a connect error quotes the URL, and an expanded URL or
//! command line may carry a credential.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::ServerRequest;
use rmcp::model::{
    CallToolResponse, ClientCapabilities, ClientConfig, CompletionContext, GetPromptRequestParams,
    GetPromptResult, Implementation, ProgressNotificationParam, ProgressToken, Prompt, Resource,
    Tool,
};
use rmcp::service::{NotificationContext, Peer, RequestContext, RunningService};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde::Serialize;
use tokio::sync::{Notify, mpsc};

use super::ask;
use super::describe::{self, Endpoint};
use super::oauth::{self, Challenge, HttpTarget, HttpTransport, SignInError};
use super::stdio;
use crate::hub::config::{ServerConfig, Transport};

/// Scheduler turns a tool call with progress waits after its answer, for the server's
/// earlier progress notifications still in rmcp's tasks ([`Downstream::call_tool`]).
const PROGRESS_SETTLE_YIELDS: usize = 8;
const MAX_BACKOFF: Duration = Duration::from_secs(60);
const MAX_ATTEMPTS: u32 = 8;
/// Lines of a server's stderr kept for error messages.
const STDERR_TAIL: usize = 5;
/// How much of a server's error answer the hub's message quotes (the answer itself is
/// passed on whole).
const ANSWERED_CHARS: usize = 1000;

/// Where a server is.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum Status {
    /// From a workspace file that is not trusted: listed, never run.
    Untrusted,
    Disabled,
    /// Its entry is wrong (see the error).
    Misconfigured,
    /// A credential it needs is unset or a placeholder (`missing_env_keys`).
    MissingCredentials,
    /// `autostart: false`, not used yet.
    Idle,
    Starting,
    Ready,
    /// Crashed or hung; next attempt in `retry_in_ms`.
    Restarting {
        retry_in_ms: u64,
    },
    /// Gave up after repeated failures.
    Failed,
    Stopped,
    /// A remote server that asks for a sign-in: not retried until someone signs in.
    NeedsSignIn,
}

impl Status {
    pub fn label(&self) -> &'static str {
        match self {
            Status::Untrusted => "untrusted",
            Status::Disabled => "disabled",
            Status::Misconfigured => "misconfigured",
            Status::MissingCredentials => "missing_credentials",
            Status::Idle => "idle",
            Status::Starting => "starting",
            Status::Ready => "ready",
            Status::Restarting { .. } => "restarting",
            Status::Failed => "failed",
            Status::Stopped => "stopped",
            Status::NeedsSignIn => "needs_sign_in",
        }
    }
}

/// A failure of the hub: a downstream server's, or of what was asked of it.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum HubError {
    /// The server is not running (untrusted, disabled, misconfigured, restarting, failed).
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    Timeout(String),
    /// The server failed a request (not with an error answer).
    #[error("{0}")]
    Server(String),
    /// The server answered a request with this JSON-RPC error (passed on as it is by the
    /// gateway's proxied calls).
    #[error("{message}")]
    Answered {
        message: String,
        error: rmcp::model::ErrorData,
    },
    /// The gateway: a workspace file's server before the user approved the file.
    #[error("{0}")]
    Untrusted(String),
    /// The gateway: a server turned off, or whose entry is wrong.
    #[error("{0}")]
    Disabled(String),
    /// The gateway: credentials a server needs are unset or placeholders.
    #[error("Missing {}", keys.join(", "))]
    MissingCredentials { server: String, keys: Vec<String> },
    #[error("Server '{0}' is already active in this session")]
    AlreadyActive(String),
    #[error("Server '{0}' is not active in this session")]
    NotActive(String),
    #[error(
        "Rate limit exceeded: at most {limit} activations per {per_secs} s in a session; try again in {retry_after_secs} s"
    )]
    RateLimited {
        limit: usize,
        per_secs: u64,
        retry_after_secs: u64,
    },
    #[error("Cannot deactivate core server '{0}'")]
    CoreServer(String),
    #[error(
        "Cannot deactivate boot server '{0}': it is loaded at the start of every session (set \"autostart\": false to load it on demand)"
    )]
    BootServer(String),
    /// The gateway: no active server has this tool.
    #[error("{0}")]
    ToolNotFound(String),
    #[error("{0}")]
    ServerNotFound(String),
    #[error("{0}")]
    PromptNotFound(String),
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0}")]
    UnknownArgument(String),
    /// Writing the user's config was refused (it does not parse, or cannot be written).
    #[error("{0}")]
    ConfigInvalid(String),
    /// A settings edit that sets, unsets and switches nothing.
    #[error(
        "Invalid argument 'arguments': nothing to change: give arguments to set or unset, or enabled"
    )]
    NothingToChange,
    #[error("the hub is shutting down")]
    ShuttingDown,
    /// A remote server that asks for a sign-in nobody did yet.
    #[error("{message}")]
    NeedsSignIn { server: String, message: String },
    /// A sign-in that did not end with tokens: timed out, refused, or failed.
    #[error(
        "Sign-in to server '{server}' failed: {reason}. It stays signed out; activate it again \
         (or run `tandem servers login {server}`) to retry"
    )]
    SignInFailed { server: String, reason: String },
    /// A prompt command line that does not parse.
    #[error(transparent)]
    Command(#[from] crate::hub::prompts::command::CommandError),
}

impl HubError {
    /// The error code of the error object (spec 004).
    pub fn code(&self) -> &'static str {
        match self {
            HubError::Unavailable(_) => "SERVER_UNAVAILABLE",
            HubError::Timeout(_) => "SERVER_TIMEOUT",
            HubError::Server(_) | HubError::Answered { .. } => "SERVER_ERROR",
            HubError::Untrusted(_) => "SERVER_UNTRUSTED",
            HubError::Disabled(_) => "SERVER_DISABLED",
            HubError::MissingCredentials { .. } => "MISSING_CREDENTIALS",
            HubError::AlreadyActive(_) => "ALREADY_ACTIVE",
            HubError::NotActive(_) => "NOT_ACTIVE",
            HubError::RateLimited { .. } => "RATE_LIMITED",
            HubError::CoreServer(_) => "CORE_SERVER",
            HubError::BootServer(_) => "BOOT_SERVER",
            HubError::ToolNotFound(_) => "TOOL_NOT_FOUND",
            HubError::ServerNotFound(_) => "SERVER_NOT_FOUND",
            HubError::PromptNotFound(_) => "PROMPT_NOT_FOUND",
            HubError::InvalidArgument(_) | HubError::NothingToChange => "INVALID_ARGUMENT",
            HubError::UnknownArgument(_) => "UNKNOWN_ARGUMENT",
            HubError::ConfigInvalid(_) => "CONFIG_INVALID",
            HubError::ShuttingDown => "INTERNAL_ERROR",
            HubError::NeedsSignIn { .. } => "NEEDS_SIGN_IN",
            HubError::SignInFailed { .. } => "SIGN_IN_FAILED",
            HubError::Command(e) => e.code(),
        }
    }

    /// The error's particulars, for the `details` of the error object.
    pub fn details(&self) -> serde_json::Value {
        match self {
            HubError::Command(e) => e.details(),
            HubError::NothingToChange => serde_json::json!({"field": "arguments"}),
            HubError::MissingCredentials { server, keys } => {
                serde_json::json!({"server": server, "missingEnvKeys": keys})
            }
            HubError::NeedsSignIn { server, .. } => serde_json::json!({"server": server}),
            HubError::SignInFailed { server, reason } => {
                serde_json::json!({"server": server, "reason": reason})
            }
            HubError::RateLimited {
                limit,
                per_secs,
                retry_after_secs,
            } => serde_json::json!({
                "limit": limit,
                "perSeconds": per_secs,
                "retryAfterSeconds": retry_after_secs
            }),
            HubError::Answered { error, .. } => serde_json::json!({
                "code": error.code.0,
                "message": error.message,
                "data": error.data,
            }),
            _ => serde_json::json!({}),
        }
    }
}

/// What changed, for the hub to publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerChange {
    Status,
    Prompts,
    Tools,
    Resources,
}

pub type OnChange = Arc<dyn Fn(&str, ServerChange) + Send + Sync>;

#[derive(Default)]
struct Lists {
    prompts: Arc<Vec<Prompt>>,
    tools: Arc<Vec<Tool>>,
    resources: Arc<Vec<Resource>>,
}

struct Inner {
    /// The tools as the gateway re-exports them, made from `lists.tools` (that very list).
    proxied: Option<(Arc<Vec<Tool>>, Arc<crate::hub::gateway::proxy::Proxied>)>,
    status: Status,
    peer: Option<Peer<RoleClient>>,
    /// Dropping it ends the session and kills the child.
    service: Option<RunningService<RoleClient, Handler>>,
    lists: Lists,
    server_info: Option<Implementation>,
    instructions: Option<String>,
    failures: u32,
    last_error: Option<String>,
    /// The connection that failed last and its error without the stderr tail: lines its
    /// child writes as it dies, read after the failure was seen, still join the message.
    failed: Option<(u64, String)>,
    stderr: VecDeque<String>,
    /// Bumped on every (re)connection and stop, so a stale task does not touch a newer one.
    generation: u64,
    next_attempt: Option<Instant>,
    /// When the server last became `starting`.
    starting_since: Option<Instant>,
    /// What the server answered when it asked for a sign-in, for the sign-in to start from.
    challenge: Option<Challenge>,
}

impl Inner {
    fn starting(&mut self) {
        self.status = Status::Starting;
        self.starting_since = Some(Instant::now());
    }
}

pub struct Downstream {
    pub config: ServerConfig,
    inner: Mutex<Inner>,
    /// Signalled on every status change (waiters of `Starting`).
    changed: Notify,
    on_change: OnChange,
    /// Where the progress of each forwarded request goes, by the token Tandem sent it with.
    progress: ProgressSinks,
    /// Who answers what the server asks: the callers of its calls in flight, else the
    /// fallback.
    pub(super) channel: Arc<ask::Channel>,
    /// Where its tasks are reported ([`super::tasks`]).
    pub(super) on_task: super::tasks::OnTask,
    /// The tokens, the browser and who hears of a sign-in (a remote server's).
    auth: oauth::Auth,
    /// The sign-in under way or last done: concurrent activations share one.
    signing_in: Mutex<Option<(u64, tokio::sync::watch::Receiver<SignInPhase>)>>,
}

/// Where a sign-in is.
#[derive(Debug, Clone, PartialEq)]
pub enum SignInPhase {
    Starting,
    /// Waiting for the user to approve in the browser, at this URL.
    Waiting(String),
    Done(Result<(), SignInError>),
}

/// Progress notifications of requests in flight, by progress token.
type ProgressSinks = Arc<
    Mutex<
        std::collections::HashMap<ProgressToken, mpsc::UnboundedSender<ProgressNotificationParam>>,
    >,
>;

/// A request to a downstream server in flight: told `notifications/cancelled` if it is
/// dropped before its answer (the agent cancelled, or the timeout struck), and its
/// progress sink removed either way.
struct InFlight {
    peer: Peer<RoleClient>,
    id: Option<rmcp::model::RequestId>,
    token: ProgressToken,
    sinks: ProgressSinks,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.sinks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.token);
        if let Some(id) = self.id.take() {
            let peer = self.peer.clone();
            tokio::spawn(async move {
                let why = Some("cancelled by the client, or timed out".to_string());
                let cancelled = rmcp::model::CancelledNotificationParam::new(Some(id), why);
                let _ = peer.notify_cancelled(cancelled).await;
            });
        }
    }
}

/// A snapshot for listings.
#[derive(Debug, Clone, Serialize)]
pub struct ServerState {
    pub name: String,
    #[serde(flatten)]
    pub status: Status,
    pub origin: crate::hub::config::Origin,
    pub runs: Option<String>,
    pub prompts: usize,
    pub tools: usize,
    pub last_error: Option<String>,
    pub server_info: Option<String>,
    pub description: Option<String>,
    pub category: Option<String>,
    pub core: bool,
    /// The credentials it lacks (names only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing_env_keys: Vec<String>,
}

/// Receives the server's notifications, and answers its requests through its channel.
struct Handler {
    lists: mpsc::UnboundedSender<ServerChange>,
    progress: ProgressSinks,
    channel: Arc<ask::Channel>,
}

impl ClientHandler for Handler {
    async fn on_prompt_list_changed(&self, _: NotificationContext<RoleClient>) {
        let _ = self.lists.send(ServerChange::Prompts);
    }

    async fn on_tool_list_changed(&self, _: NotificationContext<RoleClient>) {
        let _ = self.lists.send(ServerChange::Tools);
    }

    async fn on_resource_list_changed(&self, _: NotificationContext<RoleClient>) {
        let _ = self.lists.send(ServerChange::Resources);
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _: NotificationContext<RoleClient>,
    ) {
        let sinks = self.progress.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(sink) = sinks.get(&params.progress_token) {
            let _ = sink.send(params);
        }
    }

    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        let request = ServerRequest::ElicitRequest(rmcp::model::ElicitRequest::new(request));
        ask::elicit_result(self.channel.answer(request, context.ct.cancelled()).await)
    }

    // Sampling and roots are deprecated by SEP-2577, but servers still ask for them.
    #[allow(deprecated)]
    async fn create_message(
        &self,
        params: rmcp::model::CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::CreateMessageResult, rmcp::ErrorData> {
        let request =
            ServerRequest::CreateMessageRequest(rmcp::model::CreateMessageRequest::new(params));
        ask::message_result(self.channel.answer(request, context.ct.cancelled()).await)
    }

    #[allow(deprecated)]
    async fn list_roots(
        &self,
        context: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ListRootsResult, rmcp::ErrorData> {
        let request = ServerRequest::ListRootsRequest(Default::default());
        ask::roots_result(self.channel.answer(request, context.ct.cancelled()).await)
    }

    /// Tandem asks its agents, or the editor, what a server asks of it ([`ask`]).
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        capabilities.elicitation = Some(
            rmcp::model::ElicitationCapability::new()
                .with_form(Default::default())
                .with_url(Default::default()),
        );
        capabilities.sampling = Some(Default::default());
        let mut roots = rmcp::model::RootsCapabilities::default();
        roots.list_changed = Some(true);
        capabilities.roots = Some(roots);
        // A server may run a call as a task: Tandem follows it ([`super::tasks`]).
        capabilities.extensions = Some(
            [(
                rmcp::model::TASKS_EXTENSION_ID.to_string(),
                Default::default(),
            )]
            .into(),
        );
        ClientConfig::new(
            capabilities,
            Implementation::new("tandem", env!("CARGO_PKG_VERSION")),
        )
    }
}

impl Downstream {
    /// A server in its first state (`trusted`: its file may run).
    pub fn new(
        config: ServerConfig,
        trusted: bool,
        on_change: OnChange,
        auth: oauth::Auth,
        fallback: ask::Fallback,
        on_task: super::tasks::OnTask,
    ) -> Arc<Downstream> {
        let status = if !config.missing_env_keys.is_empty() {
            Status::MissingCredentials
        } else if config.error.is_some() {
            Status::Misconfigured
        } else if !trusted {
            Status::Untrusted
        } else if config.disabled {
            Status::Disabled
        } else {
            Status::Idle
        };
        let channel = ask::Channel::new(
            &config.name,
            config.timeout,
            config.question_timeout,
            fallback,
        );
        Arc::new(Downstream {
            channel,
            on_task,
            config,
            inner: Mutex::new(Inner {
                proxied: None,
                status,
                peer: None,
                service: None,
                lists: Lists::default(),
                server_info: None,
                instructions: None,
                failures: 0,
                last_error: None,
                failed: None,
                stderr: VecDeque::new(),
                generation: 0,
                next_attempt: None,
                starting_since: None,
                challenge: None,
            }),
            changed: Notify::new(),
            on_change,
            progress: Default::default(),
            auth,
            signing_in: Mutex::new(None),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// How long a question of this server that a person answers may wait
    /// (`question_timeout_ms`).
    pub fn question_timeout(&self) -> Duration {
        self.config.question_timeout
    }

    /// What the server said of itself in the handshake of its current connection.
    pub fn peer_info(&self) -> Option<Arc<rmcp::model::ServerPeerInfo>> {
        self.lock().peer.as_ref().and_then(Peer::peer_info)
    }

    /// Where its connection goes, as failures name it.
    fn endpoint(&self) -> Endpoint<'_> {
        match &self.config.transport {
            Some(Transport::Http { url, .. }) => Endpoint::Http(url),
            _ => Endpoint::Stdio,
        }
    }

    pub fn status(&self) -> Status {
        let inner = self.lock();
        match (&inner.status, inner.next_attempt) {
            (Status::Restarting { .. }, Some(at)) => Status::Restarting {
                retry_in_ms: at.saturating_duration_since(Instant::now()).as_millis() as u64,
            },
            (s, _) => s.clone(),
        }
    }

    /// How long the server has been `starting`, if it is.
    pub fn starting_for(&self) -> Option<Duration> {
        let inner = self.lock();
        match (&inner.status, inner.starting_since) {
            (Status::Starting, Some(since)) => Some(since.elapsed()),
            (Status::Starting, None) => Some(Duration::ZERO),
            _ => None,
        }
    }

    pub fn state(&self) -> ServerState {
        let status = self.status();
        let inner = self.lock();
        ServerState {
            name: self.config.name.clone(),
            status,
            origin: self.config.origin.clone(),
            runs: self.config.runs.clone(),
            prompts: inner.lists.prompts.len(),
            tools: inner.lists.tools.len(),
            last_error: inner
                .last_error
                .clone()
                .or_else(|| self.config.error.as_ref().map(|e| e.to_string())),
            // A server may name itself with what it was given.
            server_info: inner
                .server_info
                .as_ref()
                .map(|i| self.config.redact(&format!("{} {}", i.name, i.version))),
            description: self.config.description.clone(),
            category: self.config.category.clone(),
            core: self.config.is_core(),
            missing_env_keys: self.config.missing_env_keys.clone(),
        }
    }

    pub fn prompts(&self) -> Arc<Vec<Prompt>> {
        self.lock().lists.prompts.clone()
    }

    pub fn tools(&self) -> Arc<Vec<Tool>> {
        self.lock().lists.tools.clone()
    }

    /// Its tools as the gateway re-exports them (`server__tool`, schemas without `$ref`),
    /// made once per list the server gives.
    pub fn proxied(&self) -> Arc<crate::hub::gateway::proxy::Proxied> {
        let tools = self.tools();
        if let Some((source, proxied)) = &self.lock().proxied
            && Arc::ptr_eq(source, &tools)
        {
            return proxied.clone();
        }
        let proxied = Arc::new(crate::hub::gateway::proxy::Proxied::new(
            &self.config.name,
            &tools,
        ));
        self.lock().proxied = Some((tools, proxied.clone()));
        proxied
    }

    pub fn resources(&self) -> Arc<Vec<Resource>> {
        self.lock().lists.resources.clone()
    }

    /// Reads one of its resources (`resources/read`) with the server's timeout.
    pub async fn read_resource(
        self: &Arc<Self>,
        uri: &str,
    ) -> Result<rmcp::model::ReadResourceResult, HubError> {
        let params = rmcp::model::ReadResourceRequestParams::new(uri.to_string());
        self.request("resources/read", |peer| {
            let params = params.clone();
            async move { peer.read_resource(params).await }
        })
        .await
    }

    /// What the server says of itself on its current (or last) connection.
    pub fn said(&self) -> super::remembered::Said {
        let inner = self.lock();
        super::remembered::Said {
            prompts: inner.lists.prompts.to_vec(),
            tools: inner.lists.tools.to_vec(),
            server_info: inner.server_info.clone(),
            instructions: inner.instructions.clone(),
        }
    }

    /// Starts the server if it may run and does not yet.
    pub fn start(self: &Arc<Self>) {
        {
            let mut inner = self.lock();
            match inner.status {
                Status::Idle | Status::Failed | Status::Stopped => {}
                Status::Restarting { .. } => return,
                _ => return,
            }
            inner.starting();
            inner.generation += 1;
        }
        self.changed.notify_waiters();
        let this = self.clone();
        tokio::spawn(async move { this.connect().await });
    }

    /// Ends the session and kills the child; the server stays stopped.
    pub fn stop(&self) {
        let service = {
            let mut inner = self.lock();
            inner.generation += 1;
            inner.peer = None;
            if matches!(
                inner.status,
                Status::Starting | Status::Ready | Status::Restarting { .. } | Status::Failed
            ) {
                inner.status = Status::Stopped;
            }
            inner.service.take()
        };
        end(service);
        self.changed.notify_waiters();
    }

    async fn connect(self: Arc<Self>) {
        let generation = self.lock().generation;
        let (tx, rx) = mpsc::unbounded_channel();
        let handler = Handler {
            lists: tx,
            progress: self.progress.clone(),
            channel: self.channel.clone(),
        };
        let started = match self.config.transport.clone() {
            Some(Transport::Stdio {
                command,
                args,
                env,
                cwd,
            }) => {
                let mut cmd = tokio::process::Command::new(&command);
                cmd.args(&args).envs(&env).current_dir(&cwd);
                let (transport, stderr) = match stdio::spawn(cmd, self.on_fault(generation)) {
                    Ok(t) => t,
                    Err(e) => {
                        return self.fail(generation, describe::spawn(&command, &cwd, &e));
                    }
                };
                self.capture_stderr(stderr, generation);
                self.handshake(handler, transport).await
            }
            Some(Transport::Http {
                url,
                headers,
                oauth,
            }) => {
                let target = HttpTarget {
                    url,
                    headers,
                    oauth,
                };
                // Reading the stored sign-in asks the authorization server for its metadata.
                let limit = self.config.start_timeout;
                match tokio::time::timeout(limit, oauth::transport(&target, &self.auth.store)).await
                {
                    Ok(Ok(HttpTransport::Plain(t))) => self.handshake(handler, t).await,
                    Ok(Ok(HttpTransport::Authorized(t))) => self.handshake(handler, t).await,
                    Ok(Err(e)) => Err(Refused::Failed(e)),
                    Err(_) => Err(Refused::Failed(format!(
                        "its authorization server did not answer within {:.1}s",
                        limit.as_secs_f64()
                    ))),
                }
            }
            None => Err(Refused::Failed("the server's entry is not runnable".into())),
        };
        let (service, lists) = match started {
            Ok(s) => s,
            Err(Refused::Failed(e)) => return self.fail(generation, e),
            Err(Refused::NeedsSignIn(challenge)) => {
                return self.needs_sign_in(generation, challenge);
            }
        };
        let mut rx = rx;
        let peer = service.peer().clone();
        {
            let mut inner = self.lock();
            if inner.generation != generation {
                return; // stopped or replaced meanwhile: dropping `service` kills the child
            }
            let info = peer.peer_info();
            inner.server_info = info.as_ref().and_then(|i| i.server_info.clone());
            inner.instructions = info.as_ref().and_then(|i| i.instructions.clone());
            inner.lists = lists;
            inner.peer = Some(peer.clone());
            inner.service = Some(service);
            inner.failures = 0;
            inner.last_error = None;
            inner.status = Status::Ready;
        }
        tracing::info!("downstream server {} ready", self.config.name);
        self.changed.notify_waiters();
        (self.on_change)(&self.config.name, ServerChange::Status);
        (self.on_change)(&self.config.name, ServerChange::Prompts);
        // List changes refresh the cache; the connection's end is a crash unless we stopped.
        let this = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    change = rx.recv() => {
                        let Some(change) = change else { break };
                        tracing::debug!("{}: {change:?} list changed", this.config.name);
                        this.refresh(generation, &peer, change).await;
                    }
                    _ = closed_or_dead(&peer) => break,
                }
            }
            if this.lock().generation == generation {
                this.fail(generation, "the server exited".into());
            }
        });
    }

    /// What the transport of connection `generation` calls when the server ends it: that
    /// connection fails with the reason.
    fn on_fault(self: &Arc<Self>, generation: u64) -> stdio::OnFault {
        let this = Arc::downgrade(self);
        Box::new(move |fault: stdio::Fault| {
            if let Some(this) = this.upgrade() {
                this.fail_as(generation, fault.to_string(), fault.retry());
            }
        })
    }

    /// Keeps the last lines of the stderr of connection `generation`'s child (for error
    /// messages) and logs them (at a bounded rate).
    fn capture_stderr(self: &Arc<Self>, stderr: tokio::process::ChildStderr, generation: u64) {
        let this = self.clone();
        tokio::spawn(async move {
            // A server may print the credential it was given (its URL, a token in its
            // environment): the log and its error show the entry as written.
            let redact = |text: &str| this.config.redact(text);
            stdio::read_stderr(stderr, &this.config.name, redact, |line| {
                let mut inner = this.lock();
                if inner.stderr.len() == STDERR_TAIL {
                    inner.stderr.pop_front();
                }
                inner.stderr.push_back(line);
                if let Some((failed, error)) = &inner.failed
                    && *failed == generation
                {
                    inner.last_error = Some(this.config.redact(&with_tail(error, &inner.stderr)));
                }
            })
            .await;
        });
    }

    /// `initialize`, then the first lists, within the start timeout.
    async fn handshake<T, E, A>(
        &self,
        handler: Handler,
        transport: T,
    ) -> Result<(RunningService<RoleClient, Handler>, Lists), Refused>
    where
        T: rmcp::transport::IntoTransport<RoleClient, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let limit = self.config.start_timeout;
        let started = tokio::time::timeout(limit, async {
            let service =
                handler
                    .serve(transport)
                    .await
                    .map_err(|e| match oauth::challenge_of(&e) {
                        Some(challenge) => Refused::NeedsSignIn(challenge),
                        None => Refused::Failed(describe::handshake(&e, self.endpoint())),
                    })?;
            // A server may take `initialize` without a token and ask for one at its lists.
            let lists = fetch_lists(service.peer(), self.config.timeout, self.endpoint()).await?;
            Ok::<_, Refused>((service, lists))
        })
        .await;
        match started {
            Ok(r) => r,
            Err(_) => Err(Refused::Failed(format!(
                "did not start within {:.1}s (its start_timeout_ms)",
                limit.as_secs_f64()
            ))),
        }
    }

    /// Connection `generation` was refused for want of a sign-in: the server waits for one
    /// (no retry), keeping the challenge for it.
    fn needs_sign_in(self: &Arc<Self>, generation: u64, challenge: Challenge) {
        let service = {
            let mut inner = self.lock();
            if inner.generation != generation {
                return;
            }
            inner.generation += 1;
            inner.peer = None;
            inner.status = Status::NeedsSignIn;
            inner.next_attempt = None;
            inner.challenge = Some(challenge);
            inner.last_error = Some(self.sign_in_hint());
            inner.service.take()
        };
        tracing::info!("downstream server {} asks for a sign-in", self.config.name);
        end(service);
        self.changed.notify_waiters();
        (self.on_change)(&self.config.name, ServerChange::Status);
    }

    /// How to sign in to this server.
    fn sign_in_hint(&self) -> String {
        let name = &self.config.name;
        format!(
            "server '{name}' needs you to sign in: activate it (mcp_activate) and approve in the \
             browser, or run `tandem servers login {name}`"
        )
    }

    /// The remote server this entry reaches, if it is one.
    fn http_target(&self) -> Option<HttpTarget> {
        match &self.config.transport {
            Some(Transport::Http {
                url,
                headers,
                oauth,
            }) => Some(HttpTarget {
                url: url.clone(),
                headers: headers.clone(),
                oauth: oauth.clone(),
            }),
            _ => None,
        }
    }

    /// Starts a sign-in to this server, or joins the one under way: its number and where
    /// it is. Once it ends well, the server connects again with the new tokens.
    pub fn begin_sign_in(
        self: &Arc<Self>,
    ) -> Result<(u64, tokio::sync::watch::Receiver<SignInPhase>), HubError> {
        let name = self.config.name.clone();
        let target = self.sign_in_target()?;
        let mut slot = self.signing_in.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((n, rx)) = slot.as_ref()
            && !matches!(*rx.borrow(), SignInPhase::Done(_))
        {
            return Ok((*n, rx.clone()));
        }
        let number = slot.as_ref().map_or(1, |(n, _)| n + 1);
        let (tx, rx) = tokio::sync::watch::channel(SignInPhase::Starting);
        *slot = Some((number, rx.clone()));
        drop(slot);
        let challenge = self.lock().challenge.clone();
        let this = self.clone();
        tokio::spawn(async move {
            let auth = this.auth.clone();
            let on_url = |url: &str| {
                tx.send_replace(SignInPhase::Waiting(url.to_string()));
                (auth.on_url)(&name, url);
            };
            let result = oauth::sign_in(
                &target,
                &auth.store,
                challenge.as_ref(),
                &auth.browser,
                &on_url,
            )
            .await;
            match &result {
                Ok(()) => this.reconnect(),
                Err(e) => {
                    tracing::warn!("sign-in to server {name} failed: {e}");
                    if this.status() == Status::NeedsSignIn {
                        this.lock().last_error = Some(format!(
                            "{} (the last sign-in failed: {e})",
                            this.sign_in_hint()
                        ));
                        (this.on_change)(&name, ServerChange::Status);
                    }
                }
            }
            tx.send_replace(SignInPhase::Done(result));
        });
        Ok((number, rx))
    }

    /// The target of a sign-in, if this server may sign in.
    fn sign_in_target(&self) -> Result<HttpTarget, HubError> {
        let name = &self.config.name;
        match self.status() {
            Status::Untrusted | Status::Misconfigured | Status::MissingCredentials => {
                return Err(self.unavailable());
            }
            _ => {}
        }
        let Some(target) = self.http_target() else {
            return Err(HubError::InvalidArgument(format!(
                "Invalid argument 'name': server '{name}' runs on this machine; only a remote \
                 (HTTP) server signs in"
            )));
        };
        if target.has_static_credential() {
            return Err(HubError::InvalidArgument(format!(
                "Invalid argument 'name': server '{name}' has its own credential in {} \
                 (oauth.accessToken or an Authorization header); Tandem does not sign in for it",
                self.config.origin.file().display()
            )));
        }
        Ok(target)
    }

    /// Signs in (or joins the sign-in under way, or the one numbered `number` when given),
    /// then waits for the server to be ready.
    pub async fn sign_in(self: &Arc<Self>, number: Option<u64>) -> Result<u64, HubError> {
        let (number, mut rx) = match number {
            None => self.begin_sign_in()?,
            Some(n) => {
                let slot = self.signing_in.lock().unwrap_or_else(|p| p.into_inner());
                match slot.as_ref() {
                    Some((m, rx)) if *m == n => (n, rx.clone()),
                    _ => {
                        return Err(HubError::InvalidArgument(format!(
                            "Invalid argument 'attempt': no sign-in {n} to server '{}'",
                            self.config.name
                        )));
                    }
                }
            }
        };
        let done = rx
            .wait_for(|p| matches!(p, SignInPhase::Done(_)))
            .await
            .map(|p| p.clone());
        match done {
            Ok(SignInPhase::Done(Ok(()))) => self.ready().await.map(|()| number),
            Ok(SignInPhase::Done(Err(e))) => Err(HubError::SignInFailed {
                server: self.config.name.clone(),
                reason: e.to_string(),
            }),
            _ => Err(HubError::SignInFailed {
                server: self.config.name.clone(),
                reason: "it was cut short".into(),
            }),
        }
    }

    /// Starts a sign-in (or joins the one under way) and answers its number and the URL
    /// the user approves at, once known.
    pub async fn sign_in_url(self: &Arc<Self>) -> Result<(u64, String), HubError> {
        let (number, mut rx) = self.begin_sign_in()?;
        let phase = rx
            .wait_for(|p| !matches!(p, SignInPhase::Starting))
            .await
            .map(|p| p.clone());
        match phase {
            Ok(SignInPhase::Waiting(url)) => Ok((number, url)),
            Ok(SignInPhase::Done(Err(e))) => Err(HubError::SignInFailed {
                server: self.config.name.clone(),
                reason: e.to_string(),
            }),
            // Done already: the approval came before anyone asked for the URL.
            Ok(SignInPhase::Done(Ok(()))) => Ok((number, String::new())),
            _ => Err(HubError::SignInFailed {
                server: self.config.name.clone(),
                reason: "it was cut short".into(),
            }),
        }
    }

    /// Forgets the server's tokens and ends its connection; `true` if tokens were kept.
    pub fn sign_out(&self) -> Result<bool, HubError> {
        let Some(target) = self.http_target() else {
            return Err(HubError::InvalidArgument(format!(
                "Invalid argument 'name': server '{}' runs on this machine; only a remote \
                 (HTTP) server signs in",
                self.config.name
            )));
        };
        let forgot = self.auth.store.forget(&target.url).map_err(|e| {
            HubError::Server(format!(
                "cannot forget the sign-in of server '{}' ({}): {e}",
                self.config.name,
                self.auth.store.dir().display()
            ))
        })?;
        self.stop();
        tracing::info!("signed out of server {}", self.config.name);
        (self.on_change)(&self.config.name, ServerChange::Status);
        Ok(forgot)
    }

    /// Ends the connection (or the wait for a sign-in) and connects again: a sign-in ended.
    fn reconnect(self: &Arc<Self>) {
        let service = {
            let mut inner = self.lock();
            inner.generation += 1;
            inner.peer = None;
            inner.failures = 0;
            inner.challenge = None;
            inner.last_error = None;
            inner.status = Status::Stopped;
            inner.service.take()
        };
        end(service);
        self.start();
    }

    async fn refresh(
        self: &Arc<Self>,
        generation: u64,
        peer: &Peer<RoleClient>,
        change: ServerChange,
    ) {
        let (timeout, to) = (self.config.timeout, self.endpoint());
        let result = match change {
            ServerChange::Tools => with_timeout(timeout, "tools/list", to, peer.list_all_tools())
                .await
                .map(|t| (None, Some(t), None)),
            ServerChange::Resources => {
                with_timeout(timeout, "resources/list", to, peer.list_all_resources())
                    .await
                    .map(|r| (None, None, Some(r)))
            }
            _ => with_timeout(timeout, "prompts/list", to, peer.list_all_prompts())
                .await
                .map(|p| (Some(p), None, None)),
        };
        match result {
            Ok((prompts, tools, resources)) => {
                let mut inner = self.lock();
                if inner.generation != generation {
                    return;
                }
                if let Some(p) = prompts {
                    inner.lists.prompts = Arc::new(p);
                }
                if let Some(t) = tools {
                    inner.lists.tools = Arc::new(t);
                }
                if let Some(r) = resources {
                    inner.lists.resources = Arc::new(r);
                }
                drop(inner);
                tracing::debug!("{}: {change:?} list refreshed", self.config.name);
                (self.on_change)(&self.config.name, change);
            }
            Err(Refused::NeedsSignIn(challenge)) => self.needs_sign_in(generation, challenge),
            Err(Refused::Failed(e)) => self.fail(generation, e),
        }
    }

    /// Marks a failure of connection `generation` and schedules the next attempt.
    fn fail(self: &Arc<Self>, generation: u64, error: String) {
        self.fail_as(generation, error, true)
    }

    /// Marks a failure of connection `generation`; then the next attempt, after a backoff,
    /// if `retry` (else the server is `failed` until its entry changes).
    fn fail_as(self: &Arc<Self>, generation: u64, error: String, retry: bool) {
        let (delay, service) = {
            let mut inner = self.lock();
            if inner.generation != generation {
                return;
            }
            inner.generation += 1;
            inner.failures += 1;
            let shown = self.config.redact(&with_tail(&error, &inner.stderr));
            tracing::warn!("downstream server {}: {shown}", self.config.name);
            inner.last_error = Some(shown);
            inner.failed = Some((generation, error));
            inner.peer = None;
            let service = inner.service.take();
            if inner.failures >= MAX_ATTEMPTS || !retry {
                inner.status = Status::Failed;
                inner.next_attempt = None;
                (None, service)
            } else {
                let delay = backoff(inner.failures);
                inner.status = Status::Restarting {
                    retry_in_ms: delay.as_millis() as u64,
                };
                inner.next_attempt = Some(Instant::now() + delay);
                (Some((delay, inner.generation)), service)
            }
        };
        end(service);
        self.changed.notify_waiters();
        (self.on_change)(&self.config.name, ServerChange::Status);
        if let Some((delay, scheduled)) = delay {
            let this = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                {
                    let mut inner = this.lock();
                    if inner.generation != scheduled
                        || !matches!(inner.status, Status::Restarting { .. })
                    {
                        return;
                    }
                    inner.starting();
                    inner.next_attempt = None;
                }
                this.changed.notify_waiters();
                this.connect().await;
            });
        }
    }

    /// The error connection `generation` failed with, if it failed already.
    fn failure_of(&self, generation: u64) -> Option<String> {
        match &self.lock().failed {
            Some((failed, error)) if *failed == generation => Some(error.clone()),
            _ => None,
        }
    }

    /// The live connection, starting or waiting for it when that makes sense; otherwise a
    /// clear error at once.
    async fn peer(self: &Arc<Self>) -> Result<(Peer<RoleClient>, u64), HubError> {
        let deadline = tokio::time::Instant::now() + self.config.start_timeout;
        loop {
            let waiting = self.changed.notified();
            // Decide under the lock, act after it (`start` and `unavailable` take it again).
            let ready = {
                let inner = self.lock();
                match &inner.status {
                    Status::Ready => inner
                        .peer
                        .as_ref()
                        .map(|p| Ok((p.clone(), inner.generation))),
                    Status::Starting => None,
                    Status::Idle | Status::Stopped => Some(Err(true)),
                    _ => Some(Err(false)),
                }
            };
            match ready {
                Some(Ok(peer)) => return Ok(peer),
                Some(Err(true)) => {
                    self.start();
                    continue;
                }
                Some(Err(false)) => return Err(self.unavailable()),
                None => {}
            }
            if tokio::time::timeout_at(deadline, waiting).await.is_err() {
                return Err(HubError::Timeout(format!(
                    "server '{}' did not start within {:.1}s",
                    self.config.name,
                    self.config.start_timeout.as_secs_f64()
                )));
            }
        }
    }

    /// Waits until the server can take requests (starting it if it is idle), or says why it
    /// cannot.
    pub async fn ready(self: &Arc<Self>) -> Result<(), HubError> {
        self.peer().await.map(|_| ())
    }

    /// Why the server cannot answer now.
    fn unavailable(&self) -> HubError {
        let name = &self.config.name;
        let status = self.status();
        if status == Status::NeedsSignIn {
            return HubError::NeedsSignIn {
                server: name.clone(),
                message: self.sign_in_hint(),
            };
        }
        let error = self.lock().last_error.clone().unwrap_or_default();
        let message = match status {
            Status::Untrusted => format!(
                "server '{name}' comes from {}, which is not trusted yet: review it and run `tandem trust`",
                self.config.origin.file().display()
            ),
            Status::Disabled => format!(
                "server '{name}' is disabled in {}",
                self.config.origin.file().display()
            ),
            Status::MissingCredentials => format!(
                "Missing {}: server '{name}' needs {} set in the environment Tandem runs in \
                 (or written in {})",
                self.config.missing_env_keys.join(", "),
                if self.config.missing_env_keys.len() == 1 {
                    "it"
                } else {
                    "them"
                },
                self.config.origin.file().display()
            ),
            Status::Misconfigured => match &self.config.error {
                Some(e) => e.to_string(),
                None => format!("server '{name}' is misconfigured"),
            },
            Status::Restarting { retry_in_ms } => format!(
                "server '{name}' is restarting ({error}); next attempt in {:.1}s",
                retry_in_ms as f64 / 1000.0
            ),
            Status::Failed if self.lock().failures >= MAX_ATTEMPTS => {
                format!("server '{name}' failed {MAX_ATTEMPTS} times and is stopped: {error}")
            }
            Status::Failed => format!(
                "server '{name}' is stopped: {error}; it starts again when its entry in {} changes",
                self.config.origin.file().display()
            ),
            other => format!("server '{name}' is {}", other.label()),
        };
        HubError::Unavailable(message)
    }

    /// The connection while the server is ready; none otherwise (nothing is started).
    pub(super) fn live_peer(&self) -> Option<Peer<RoleClient>> {
        let inner = self.lock();
        (inner.status == Status::Ready)
            .then(|| inner.peer.clone())
            .flatten()
    }

    /// Registers a call of `caller` in flight while the guard lives: what the server asks
    /// meanwhile may go to that agent ([`ask`]).
    pub fn calling(&self, caller: Arc<dyn ask::Answerer>) -> ask::Calling {
        self.channel.calling(caller)
    }

    /// `agent` gave new roots: the server is told, and asks it for them.
    pub async fn roots_changed(&self, agent: &Arc<dyn ask::Answerer>) {
        self.channel.remember_roots(agent);
        let peer = self.lock().peer.clone();
        if let Some(peer) = peer
            && let Err(e) = peer.notify_roots_list_changed().await
        {
            tracing::debug!("server {}: roots change not sent: {e}", self.config.name);
        }
    }

    /// Runs one request with the server's timeout. A timeout or a dead connection marks the
    /// server failed (it restarts with backoff); an error answer is just returned. A remote
    /// server that refuses the request for want of a token, or of a scope (a step-up), gets
    /// one sign-in, as an activation would, and the request is sent again once; asked again
    /// after that, the server waits for the user (`needs_sign_in`) or the call fails, but
    /// nothing loops.
    pub(super) async fn request<T, F, Fut>(
        self: &Arc<Self>,
        method: &str,
        f: F,
    ) -> Result<T, HubError>
    where
        F: Fn(Peer<RoleClient>) -> Fut,
        Fut: std::future::Future<Output = Result<T, rmcp::ServiceError>>,
    {
        let mut signed_in = false;
        loop {
            let (peer, generation) = self.peer().await?;
            let e = match self.answered_in_time(f(peer)).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(rmcp::ServiceError::McpError(e))) => {
                    return Err(HubError::Answered {
                        message: format!(
                            "server '{}' answered {method} with an error: {}",
                            self.config.name,
                            describe::printable(&e.message, ANSWERED_CHARS)
                        ),
                        error: e,
                    });
                }
                Ok(Err(e)) => e,
                Err(_) => {
                    let message = format!(
                        "server '{}' did not answer {method} within {:.1}s",
                        self.config.name,
                        self.config.timeout.as_secs_f64()
                    );
                    self.fail(generation, message.clone());
                    return Err(HubError::Timeout(message));
                }
            };
            if let Some(challenge) = oauth::challenge_of_request(&e)
                && self.sign_in_target().is_ok()
            {
                if signed_in && challenge.insufficient_scope {
                    // The connection is good; only this call lacks what the user granted.
                    return Err(HubError::SignInFailed {
                        server: self.config.name.clone(),
                        reason: format!(
                            "after signing in again, it still refuses {method} for want of a \
                             scope ({})",
                            describe::printable(&challenge.header, ANSWERED_CHARS)
                        ),
                    });
                }
                self.needs_sign_in(generation, challenge);
                if signed_in {
                    return Err(self.unavailable());
                }
                tracing::info!(
                    "server {} asks for a sign-in to answer {method}",
                    self.config.name
                );
                self.sign_in(None).await?;
                signed_in = true;
                continue;
            }
            // The transport may have said why first (an exit, a message past the limit).
            let cause = self
                .failure_of(generation)
                .unwrap_or_else(|| describe::request(&e, method, self.endpoint()));
            let message = self.config.redact(&format!(
                "server '{}' failed during {method}: {cause}",
                self.config.name
            ));
            self.fail(generation, message.clone());
            return Err(HubError::Unavailable(message));
        }
    }

    pub async fn get_prompt(
        self: &Arc<Self>,
        name: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
    ) -> Result<GetPromptResult, HubError> {
        let mut params = GetPromptRequestParams::new(name);
        if !arguments.is_empty() {
            params = params.with_arguments(arguments);
        }
        self.request("prompts/get", |peer| {
            let params = params.clone();
            async move { peer.get_prompt(params).await }
        })
        .await
    }

    /// Calls one of its tools (`tools/call`), as [`Downstream::call_tool_once`]; a task the
    /// server answers with is driven to its result ([`super::tasks`]).
    pub async fn call_tool(
        self: &Arc<Self>,
        params: rmcp::model::CallToolRequestParams,
        progress: Option<mpsc::UnboundedSender<ProgressNotificationParam>>,
    ) -> Result<rmcp::model::CallToolResult, HubError> {
        let tool = params.name.to_string();
        match self.call_tool_once(params, progress).await? {
            CallToolResponse::Task(created) => self.drive_task(&tool, created).await,
            CallToolResponse::Complete(result) => Ok(result),
            _ => Err(HubError::Server(format!(
                "server '{}' answered tools/call with something else than a result",
                self.config.name
            ))),
        }
    }

    /// Calls one of its tools (`tools/call`) with the server's timeout. A result with
    /// `isError` is a result; a task (the tasks extension) is returned as it is; an error
    /// answer is [`HubError::Answered`]. The server's progress notifications for it go to
    /// `progress`; dropping the future (the caller cancelled) tells the server
    /// `notifications/cancelled`.
    pub async fn call_tool_once(
        self: &Arc<Self>,
        params: rmcp::model::CallToolRequestParams,
        progress: Option<mpsc::UnboundedSender<ProgressNotificationParam>>,
    ) -> Result<CallToolResponse, HubError> {
        let sinks = self.progress.clone();
        self.request("tools/call", |peer| {
            let (params, progress, sinks) = (params.clone(), progress.clone(), sinks.clone());
            async move {
                let request = rmcp::model::ClientRequest::CallToolRequest(
                    rmcp::model::CallToolRequest::new(params),
                );
                let options = rmcp::service::PeerRequestOptions::no_options();
                let mut handle = peer.send_request_with_option(request, options).await?;
                let mut in_flight = InFlight {
                    peer: peer.clone(),
                    id: Some(handle.id.clone()),
                    token: handle.progress_token.clone(),
                    sinks: sinks.clone(),
                };
                let relays = progress.is_some();
                if let Some(progress) = progress {
                    sinks
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(handle.progress_token.clone(), progress);
                }
                let answer = (&mut handle.rx)
                    .await
                    .map_err(|_| rmcp::ServiceError::TransportClosed)?;
                in_flight.id = None;
                if relays {
                    // rmcp hands each notification to a task of its own, and the answer straight
                    // here: progress the server sent before its answer may not be relayed yet.
                    // Those tasks were spawned first; a few turns of the scheduler let them
                    // reach the sink before it goes (with the call).
                    for _ in 0..PROGRESS_SETTLE_YIELDS {
                        tokio::task::yield_now().await;
                    }
                }
                match answer? {
                    rmcp::model::ServerResult::CallToolResult(result) => {
                        Ok(CallToolResponse::Complete(result))
                    }
                    rmcp::model::ServerResult::CreateTaskResult(task) => {
                        Ok(CallToolResponse::Task(task))
                    }
                    _ => Err(rmcp::ServiceError::UnexpectedResponse),
                }
            }
        })
        .await
    }

    /// Values for a prompt argument (`completion/complete`); none when the server does not
    /// complete.
    pub async fn complete(
        self: &Arc<Self>,
        prompt: &str,
        argument: &str,
        value: &str,
        context: std::collections::HashMap<String, String>,
    ) -> Result<Vec<String>, HubError> {
        let supports = self
            .lock()
            .peer
            .as_ref()
            .and_then(|p| p.peer_info())
            .map(|i| i.capabilities.completions.is_some());
        if supports == Some(false) {
            return Ok(Vec::new());
        }
        let (prompt, argument, value) =
            (prompt.to_string(), argument.to_string(), value.to_string());
        let context = (!context.is_empty()).then(|| CompletionContext::with_arguments(context));
        self.request("completion/complete", |peer| {
            let (prompt, argument, value) = (prompt.clone(), argument.clone(), value.clone());
            let context = context.clone();
            async move {
                peer.complete_prompt_argument(prompt, argument, value, context)
                    .await
            }
        })
        .await
        .map(|info| info.values)
    }
}

impl Downstream {
    /// `request` within the server's timeout, where a span of it in which the server asked
    /// its client something does not count (a question has the same limit, [`ask`]): a
    /// server waiting on the user is not late.
    async fn answered_in_time<T>(
        &self,
        request: impl std::future::Future<Output = T>,
    ) -> Result<T, tokio::time::error::Elapsed> {
        tokio::pin!(request);
        loop {
            let mark = self.channel.mark();
            match tokio::time::timeout(self.config.timeout, &mut request).await {
                Err(_) if self.channel.asked_since(mark) => continue,
                outcome => return outcome,
            }
        }
    }
}

/// A failure's message with the last lines its server wrote on stderr.
fn with_tail(error: &str, stderr: &VecDeque<String>) -> String {
    if stderr.is_empty() {
        return error.to_string();
    }
    let tail: Vec<&str> = stderr.iter().map(String::as_str).collect();
    format!("{error}; its stderr ended with: {}", tail.join(" | "))
}

/// Why a connection did not start.
enum Refused {
    Failed(String),
    /// The server asks for a sign-in (or a better one).
    NeedsSignIn(Challenge),
}

/// The HTTP client's settings: an `Authorization: Bearer` header becomes its token, other
/// headers are sent as they are.
pub(crate) fn http_config(
    url: &str,
    headers: &std::collections::BTreeMap<String, String>,
) -> Result<rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig, String> {
    // TLS is rustls with ring (no C toolchain beyond cc, no cmake) and the system's roots.
    static PROVIDER: std::sync::Once = std::sync::Once::new();
    PROVIDER.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
    let mut config =
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(url);
    let mut custom = std::collections::HashMap::new();
    for (name, value) in headers {
        if name.eq_ignore_ascii_case("authorization")
            && let Some(token) = value.strip_prefix("Bearer ")
        {
            config = config.auth_header(token.trim());
            continue;
        }
        let n = http::HeaderName::try_from(name.as_str())
            .map_err(|e| format!("header '{name}' is not a valid name: {e}"))?;
        let v = http::HeaderValue::try_from(value.as_str())
            .map_err(|e| format!("the value of header '{name}' is not valid: {e}"))?;
        custom.insert(n, v);
    }
    Ok(config.custom_headers(custom))
}

/// Ends a session: dropping it kills the child, which rmcp does on the runtime. Outside one
/// (a process tearing down after its runtime) the session is let go: the child sees its
/// stdin close when this process exits.
fn end(service: Option<RunningService<RoleClient, Handler>>) {
    if tokio::runtime::Handle::try_current().is_ok() {
        drop(service);
    } else {
        std::mem::forget(service);
    }
}

fn backoff(failures: u32) -> Duration {
    let secs = 1u64 << failures.saturating_sub(1).min(6);
    Duration::from_secs(secs).min(MAX_BACKOFF)
}

/// Resolves when the peer's transport has closed.
async fn closed_or_dead(peer: &Peer<RoleClient>) {
    while !peer.is_transport_closed() {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn with_timeout<T>(
    timeout: Duration,
    method: &str,
    to: Endpoint<'_>,
    f: impl std::future::Future<Output = Result<T, rmcp::ServiceError>>,
) -> Result<T, Refused> {
    match tokio::time::timeout(timeout, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(match oauth::challenge_of_request(&e) {
            Some(challenge) => Refused::NeedsSignIn(challenge),
            None => Refused::Failed(describe::request(&e, method, to)),
        }),
        Err(_) => Err(Refused::Failed(format!(
            "{method} got no answer within {:.1}s",
            timeout.as_secs_f64()
        ))),
    }
}

/// The prompts and tools a server offers (only what its capabilities announce).
async fn fetch_lists(
    peer: &Peer<RoleClient>,
    timeout: Duration,
    to: Endpoint<'_>,
) -> Result<Lists, Refused> {
    let caps = peer.peer_info().map(|i| i.capabilities.clone());
    let mut lists = Lists::default();
    if caps.as_ref().is_some_and(|c| c.prompts.is_some()) {
        lists.prompts =
            Arc::new(with_timeout(timeout, "prompts/list", to, peer.list_all_prompts()).await?);
    }
    if caps.as_ref().is_some_and(|c| c.tools.is_some()) {
        lists.tools =
            Arc::new(with_timeout(timeout, "tools/list", to, peer.list_all_tools()).await?);
    }
    if caps.as_ref().is_some_and(|c| c.resources.is_some()) {
        lists.resources =
            Arc::new(with_timeout(timeout, "resources/list", to, peer.list_all_resources()).await?);
    }
    Ok(lists)
}
