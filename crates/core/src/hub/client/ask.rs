//! What a downstream server asks of its client, and who answers: an elicitation (a form or
//! a URL for the user), a sampling request (a completion from the agent's model) or its
//! roots.
//!
//! Tandem declares all three to its servers. Each question goes to the agent session whose
//! call caused it: while a forwarded call (a tool call, a prompt, a resource read) is in
//! flight, the server's [`Channel`] holds its caller ([`Channel::calling`]), and a question
//! goes to the caller of the most recent call in flight that takes it ([`Answerer::takes`]).
//! With none, it goes to the fallback: a form to the [`Asker`] the hub has (the editor's
//! form, when one is plugged in), roots to the last agent that gave roots or else the
//! workspace root; anything else is declined with the reason.
//!
//! A question never hangs a call: it has the server's request timeout, it ends when the
//! call that caused it ends (the agent cancelled, or the call timed out), and it ends when
//! the server withdraws it. An answer larger than [`MAX_ANSWER_BYTES`] is refused.
//!
//! The core knows no agent session: [`Answerer`] is implemented by the MCP face with the
//! agent's connection, [`Asker`] by whoever can show a form.

// Sampling and roots are deprecated by SEP-2577 but still in every protocol version a
// server may speak; Tandem carries them as long as rmcp does.
#![allow(deprecated)]

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use rmcp::model::{
    ClientResult, CreateMessageResult, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationSchema, ErrorCode, ErrorData, InputRequest, ListRootsResult, MetaObject, Root,
    ServerRequest,
};
use tokio::sync::watch;

use super::describe::printable;

/// The largest answer passed back to a server, as JSON: a form's fields, a model's message,
/// a list of roots are far smaller.
pub const MAX_ANSWER_BYTES: usize = 1024 * 1024;
/// The error of a question that ended unanswered: the code the MCP SDKs give a request
/// that timed out.
const REQUEST_ENDED: ErrorCode = ErrorCode(-32001);
/// How much of a server's message a log line quotes.
const LOGGED_CHARS: usize = 200;

/// A boxed future, as the trait objects below return.
pub type Pending<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// What a server asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An elicitation in form mode: fields for the user to fill in.
    Form,
    /// An elicitation in URL mode: a page for the user to visit.
    Url,
    /// A completion from the client's model (`sampling/createMessage`).
    Sampling,
    /// The client's roots (`roots/list`).
    Roots,
}

impl Kind {
    fn of(request: &ServerRequest) -> Option<Kind> {
        match request {
            ServerRequest::ElicitRequest(r) => Some(match r.params {
                ElicitRequestParams::UrlElicitationParams { .. } => Kind::Url,
                _ => Kind::Form,
            }),
            ServerRequest::CreateMessageRequest(_) => Some(Kind::Sampling),
            ServerRequest::ListRootsRequest(_) => Some(Kind::Roots),
            _ => None,
        }
    }
}

/// A question of a 2026-07-28 result (`input_required`, SEP-2322) as the request an older
/// server sends for it; `None` for a kind Tandem does not know.
pub fn request_of(question: InputRequest) -> Option<ServerRequest> {
    match question {
        InputRequest::Elicitation(r) => Some(ServerRequest::ElicitRequest(r)),
        InputRequest::CreateMessage(r) => Some(ServerRequest::CreateMessageRequest(r)),
        InputRequest::ListRoots(r) => Some(ServerRequest::ListRootsRequest(r)),
        _ => None,
    }
}

/// A server's request as the question of a 2026-07-28 result, the reverse of
/// [`request_of`]; `None` for a request that is no question.
pub fn question_of(request: &ServerRequest) -> Option<InputRequest> {
    match request {
        ServerRequest::ElicitRequest(r) => Some(InputRequest::Elicitation(r.clone())),
        ServerRequest::CreateMessageRequest(r) => Some(InputRequest::CreateMessage(r.clone())),
        ServerRequest::ListRootsRequest(r) => Some(InputRequest::ListRoots(r.clone())),
        _ => None,
    }
}

/// An agent session that can be asked a server's question: the MCP face implements it with
/// the agent's connection.
pub trait Answerer: Send + Sync {
    /// Whether the agent's client declared it takes questions of this kind (form and URL
    /// elicitation are separate capabilities).
    fn takes(&self, kind: Kind) -> bool;
    /// Puts the server's request to the agent's client as it is. Dropping the future
    /// withdraws it: the client is told it is cancelled.
    fn ask(&self, request: ServerRequest) -> Pending<Result<ClientResult, ErrorData>>;
}

/// A server's form question for the user.
#[derive(Debug, Clone)]
pub struct Form {
    /// The workspace whose server asks.
    pub workspace: PathBuf,
    /// The server's name, for the user to see who asks.
    pub server: String,
    /// What the server says it needs (the server's text: cut and escape it to show it).
    pub message: String,
    /// The fields it asks for.
    pub schema: ElicitationSchema,
    /// How long the user has to answer.
    pub limit: Duration,
}

/// Who answers a form question when no agent can: the editor's form. Register one with
/// `Hub::set_asker`.
pub trait Asker: Send + Sync {
    /// Shows `form` to the user and answers what they did (accept with the content,
    /// decline, cancel); `None` when there is nobody to ask (no editor open). Dropping the
    /// future withdraws the form.
    fn ask(&self, form: Form) -> Pending<Option<ElicitResult>>;
}

/// Where the hub's [`Asker`] is kept; every server of the hub reads the one it holds at
/// the time of a question.
#[derive(Clone, Default)]
pub struct AskerSlot(Arc<RwLock<Option<Arc<dyn Asker>>>>);

impl AskerSlot {
    pub fn set(&self, asker: Option<Arc<dyn Asker>>) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = asker;
    }

    fn get(&self) -> Option<Arc<dyn Asker>> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// What answers a server when no agent in a call can.
#[derive(Clone)]
pub struct Fallback {
    /// The workspace root, the roots answered when no agent gives its own.
    pub root: PathBuf,
    pub asker: AskerSlot,
}

/// A call in flight and who made it.
struct InCall {
    id: u64,
    caller: Arc<dyn Answerer>,
    /// Its sender is dropped when the call ends.
    ended: watch::Receiver<()>,
}

/// One server's questions: who is calling it now, and what answers when no caller can.
pub struct Channel {
    server: String,
    /// How long a question may wait for its answer: the server's request timeout.
    limit: Duration,
    /// How long a question that a person answers (a form, a URL, a sampling the agent's
    /// user may approve) may wait: the server's `question_timeout_ms`.
    people: Duration,
    fallback: Fallback,
    calls: Mutex<Vec<InCall>>,
    next: AtomicU64,
    /// The last agent that gave roots, for the server's `roots/list` outside a call.
    roots_from: Mutex<Option<Weak<dyn Answerer>>>,
    /// Questions waiting for an answer (a call waiting on one is not late).
    waiting: AtomicUsize,
    /// Bumped as each question ends.
    ended: AtomicU64,
}

/// A call in flight, registered while it lives ([`Channel::calling`]).
pub struct Calling {
    channel: Arc<Channel>,
    id: u64,
    _ended: watch::Sender<()>,
}

impl Drop for Calling {
    fn drop(&mut self) {
        self.channel
            .calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|c| c.id != self.id);
    }
}

/// Counts a question as waiting while it lives.
struct Waiting<'a>(&'a Channel);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.ended.fetch_add(1, Ordering::Relaxed);
        self.0.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Channel {
    pub fn new(
        server: &str,
        limit: Duration,
        people: Duration,
        fallback: Fallback,
    ) -> Arc<Channel> {
        Arc::new(Channel {
            server: server.to_string(),
            limit,
            people,
            fallback,
            calls: Mutex::default(),
            next: AtomicU64::new(0),
            roots_from: Mutex::new(None),
            waiting: AtomicUsize::new(0),
            ended: AtomicU64::new(0),
        })
    }

    /// Registers a call of `caller` in flight until the guard is dropped: the server's
    /// questions meanwhile may go to it, and those still open end with it.
    pub fn calling(self: &Arc<Self>, caller: Arc<dyn Answerer>) -> Calling {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (ended_tx, ended) = watch::channel(());
        if caller.takes(Kind::Roots) {
            self.remember_roots(&caller);
        }
        self.calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(InCall { id, caller, ended });
        Calling {
            channel: self.clone(),
            id,
            _ended: ended_tx,
        }
    }

    /// `caller` gives roots: a `roots/list` outside any call goes to it while it lives.
    pub fn remember_roots(&self, caller: &Arc<dyn Answerer>) {
        *self.roots_from.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::downgrade(caller));
    }

    /// A mark of the questions so far: [`Channel::asked_since`] compares with it.
    pub fn mark(&self) -> u64 {
        self.ended.load(Ordering::Relaxed)
    }

    /// Whether a question of this server waits for its answer, or one ended after `mark`.
    pub fn asked_since(&self, mark: u64) -> bool {
        self.waiting.load(Ordering::Relaxed) > 0 || self.ended.load(Ordering::Relaxed) != mark
    }

    /// How long a question of `kind` may wait: roots are the agent's to give at once; the
    /// rest may wait for a person.
    fn limit_of(&self, kind: Kind) -> Duration {
        match kind {
            Kind::Roots => self.limit,
            Kind::Form | Kind::Url | Kind::Sampling => self.people,
        }
    }

    /// The caller of the most recent call in flight that takes `kind`.
    fn caller_for(&self, kind: Kind) -> Option<(Arc<dyn Answerer>, watch::Receiver<()>)> {
        let calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        calls
            .iter()
            .rev()
            .find(|c| c.caller.takes(kind))
            .map(|c| (c.caller.clone(), c.ended.clone()))
    }

    /// Answers the server's `request`; `withdrawn` resolves when the server cancels it.
    pub async fn answer(
        &self,
        request: ServerRequest,
        withdrawn: impl Future<Output = ()>,
    ) -> Result<ClientResult, ErrorData> {
        let Some(kind) = Kind::of(&request) else {
            return Err(ErrorData::method_not_found::<
                rmcp::model::ElicitationCreateRequestMethod,
            >());
        };
        if let ServerRequest::ElicitRequest(r) = &request {
            let message = match &r.params {
                ElicitRequestParams::FormElicitationParams { message, .. }
                | ElicitRequestParams::UrlElicitationParams { message, .. } => message.as_str(),
                _ => "",
            };
            tracing::info!(
                "server {} asks the user: {}",
                self.server,
                printable(message, LOGGED_CHARS)
            );
        }
        self.waiting.fetch_add(1, Ordering::Relaxed);
        let _waiting = Waiting(self);
        let answered = async {
            match self.caller_for(kind) {
                Some((caller, mut ended)) => {
                    tokio::select! {
                        answer = tokio::time::timeout(self.limit_of(kind), caller.ask(request)) => match answer {
                            Ok(answer) => answer,
                            Err(_) => self.ended(kind, &format!(
                                "the agent did not answer within {:.1}s",
                                self.limit_of(kind).as_secs_f64()
                            )),
                        },
                        // `changed` fails once the call's guard is dropped.
                        _ = ended.changed() => self.ended(kind, "the call that asked it ended"),
                    }
                }
                None => self.fallback(kind, request).await,
            }
        };
        let answer = tokio::select! {
            answer = answered => answer,
            () = withdrawn => self.ended(kind, "the server withdrew it"),
        }?;
        bounded(answer)
    }

    /// The answer to a question that ended unanswered: an elicitation is cancelled, other
    /// questions fail.
    fn ended(&self, kind: Kind, why: &str) -> Result<ClientResult, ErrorData> {
        tracing::info!("a question of server {} ended: {why}", self.server);
        match kind {
            Kind::Form | Kind::Url => Ok(ClientResult::ElicitResult(with_reason(
                ElicitationAction::Cancel,
                why,
            ))),
            Kind::Sampling | Kind::Roots => {
                Err(ErrorData::new(REQUEST_ENDED, why.to_string(), None))
            }
        }
    }

    /// With no agent in a call to ask: the hub's asker for a form, the remembered agent or
    /// the workspace for roots; a decline for the rest.
    async fn fallback(
        &self,
        kind: Kind,
        request: ServerRequest,
    ) -> Result<ClientResult, ErrorData> {
        match (kind, request) {
            (Kind::Form, ServerRequest::ElicitRequest(r)) => {
                let ElicitRequestParams::FormElicitationParams {
                    message,
                    requested_schema,
                    ..
                } = r.params
                else {
                    return Ok(decline("no one to ask"));
                };
                let Some(asker) = self.fallback.asker.get() else {
                    return Ok(decline(NO_ONE_FOR_FORMS));
                };
                let form = Form {
                    workspace: self.fallback.root.clone(),
                    server: self.server.clone(),
                    message,
                    schema: requested_schema,
                    limit: self.people,
                };
                match tokio::time::timeout(self.people, asker.ask(form)).await {
                    Ok(Some(answer)) => Ok(ClientResult::ElicitResult(answer)),
                    Ok(None) => Ok(decline(NO_ONE_FOR_FORMS)),
                    Err(_) => self.ended(kind, "the user did not answer in time"),
                }
            }
            (Kind::Url, _) => Ok(decline(
                "no agent in a call to this server takes URL questions, so no one can be sent to the page",
            )),
            (Kind::Sampling, _) => Err(ErrorData::new(
                ErrorCode::INVALID_REQUEST,
                "no client connected to Tandem can sample: no agent in a call to this server declared sampling",
                None,
            )),
            (Kind::Roots, request) => {
                let remembered = self
                    .roots_from
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .as_ref()
                    .and_then(Weak::upgrade);
                if let Some(agent) = remembered
                    && let Ok(Ok(answer)) =
                        tokio::time::timeout(self.limit, agent.ask(request)).await
                {
                    return Ok(answer);
                }
                Ok(ClientResult::ListRootsResult(self.workspace_roots()))
            }
            (Kind::Form, _) => Ok(decline("no one to ask")),
        }
    }

    /// The workspace root as the one root.
    fn workspace_roots(&self) -> ListRootsResult {
        let root = &self.fallback.root;
        let mut r = Root::new(file_uri(root));
        r.name = root.file_name().map(|n| n.to_string_lossy().into_owned());
        ListRootsResult::new(vec![r])
    }
}

/// Why a form is declined with no agent to ask.
const NO_ONE_FOR_FORMS: &str =
    "no agent in a call to this server takes questions, and no editor is there to show the form";

/// `action` with `why` in the result's `_meta`, for the server (and whoever reads its
/// answer) to see the reason.
fn with_reason(action: ElicitationAction, why: &str) -> ElicitResult {
    let mut meta = serde_json::Map::new();
    meta.insert("reason".into(), serde_json::Value::String(why.to_string()));
    let mut result = ElicitResult::new(action);
    result.meta = Some(MetaObject(meta));
    result
}

fn decline(why: &str) -> ClientResult {
    ClientResult::ElicitResult(with_reason(ElicitationAction::Decline, why))
}

/// `answer` if its JSON is within [`MAX_ANSWER_BYTES`].
fn bounded(answer: ClientResult) -> Result<ClientResult, ErrorData> {
    let size = serde_json::to_vec(&answer).map_or(usize::MAX, |v| v.len());
    if size > MAX_ANSWER_BYTES {
        return Err(ErrorData::new(
            ErrorCode::INTERNAL_ERROR,
            format!(
                "the answer was larger than {} KiB, the most Tandem passes on",
                MAX_ANSWER_BYTES / 1024
            ),
            None,
        ));
    }
    Ok(answer)
}

/// A `file://` URI of an absolute path, its bytes escaped as RFC 3986 wants.
pub fn file_uri(path: &std::path::Path) -> String {
    let mut uri = String::from("file://");
    for b in path.to_string_lossy().bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            uri.push(b as char);
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    uri
}

/// Typed forms of the answers the client handler returns.
pub fn elicit_result(r: Result<ClientResult, ErrorData>) -> Result<ElicitResult, ErrorData> {
    match r? {
        ClientResult::ElicitResult(e) => Ok(e),
        _ => Err(unexpected()),
    }
}

pub fn message_result(
    r: Result<ClientResult, ErrorData>,
) -> Result<CreateMessageResult, ErrorData> {
    match r? {
        ClientResult::CreateMessageResult(m) => Ok(*m),
        _ => Err(unexpected()),
    }
}

pub fn roots_result(r: Result<ClientResult, ErrorData>) -> Result<ListRootsResult, ErrorData> {
    match r? {
        ClientResult::ListRootsResult(l) => Ok(l),
        _ => Err(unexpected()),
    }
}

fn unexpected() -> ErrorData {
    ErrorData::internal_error("the agent's client answered with something else", None)
}

#[cfg(test)]
mod tests {
    use super::file_uri;

    #[test]
    fn file_uris_escape_what_a_uri_cannot_hold() {
        assert_eq!(file_uri("/a/b c/é".as_ref()), "file:///a/b%20c/%C3%A9");
        assert_eq!(file_uri("/x/y-z_1.rs".as_ref()), "file:///x/y-z_1.rs");
    }
}
