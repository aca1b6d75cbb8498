//! What a server asks mid-call, put to a 2026-07-28 agent in that generation's form
//! (SEP-2322, multi round-trip requests).
//!
//! Such an agent takes no request from Tandem. So the call it made is answered early with
//! an `input_required` result that holds the server's questions and a request state, and
//! the downstream call waits, parked, for the agent's retry. The retry carries the answers
//! and the state: the answers go to the server, and the same call goes on until it ends or
//! asks again.
//!
//! A parked call is bound to the caller that made it (the HTTP face's user) and lives at
//! most as long as its server's questions may wait for a person (`question_timeout_ms`),
//! and a little more for the agent to come back; at most [`MAX_PARKED`] wait at a time.
//! Dropping one cancels its call on the server, and its questions.

// Sampling and roots are deprecated by SEP-2577 but still asked by servers.
#![allow(deprecated)]

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolResponse, ClientCapabilities, ClientResult, ErrorCode, ErrorData, InputRequests,
    InputRequiredResult, InputResponses, ProgressNotificationParam, ServerRequest,
};
use rmcp::service::{RequestContext, RoleServer};
use tokio::sync::{mpsc, oneshot};

use tandem_core::hub::HubError;
use tandem_core::hub::client::ask::{self, Answerer, Kind};

/// How long a parked call waits for its agent's retry past the time its questions have.
const RETRY_GRACE: Duration = Duration::from_secs(10);
/// The most calls parked at once, across every session.
const MAX_PARKED: usize = 256;
/// Where Tandem's request states start, to tell them from anything else a client sends.
const STATE_PREFIX: &str = "tandem-relay-";

/// A question the server put to the agent, and where its answer goes.
struct Question {
    request: ServerRequest,
    answer: oneshot::Sender<Result<ClientResult, ErrorData>>,
}

/// The agent of one 2026-07-28 call, as the server's channel asks it: its questions go to
/// the call's relay, which puts them in the call's `input_required` answer.
struct Relay {
    capabilities: ClientCapabilities,
    questions: mpsc::UnboundedSender<Question>,
}

impl Answerer for Relay {
    fn takes(&self, kind: Kind) -> bool {
        super::gateway::declares(&self.capabilities, kind)
    }

    fn ask(&self, request: ServerRequest) -> ask::Pending<Result<ClientResult, ErrorData>> {
        let (answer, answered) = oneshot::channel();
        let sent = self.questions.send(Question { request, answer });
        Box::pin(async move {
            sent.map_err(|_| ended("the agent's call ended"))?;
            answered
                .await
                .unwrap_or_else(|_| Err(ended("the agent did not come back with an answer")))
        })
    }
}

fn ended(why: &str) -> ErrorData {
    ErrorData::new(ErrorCode(-32001), why.to_string(), None)
}

type Call = Pin<Box<dyn Future<Output = Result<CallToolResponse, ErrorData>> + Send>>;

/// A downstream call between the agent's rounds.
struct Parked {
    /// Who made it: only the same caller may go on with it.
    owner: Option<String>,
    call: Call,
    questions: mpsc::UnboundedReceiver<Question>,
    progress: mpsc::UnboundedReceiver<ProgressNotificationParam>,
    /// The questions put to the agent in the last round, by their key.
    asked: HashMap<String, Question>,
    /// The key of the next question.
    next: u64,
    /// How long it waits, parked, for the agent's retry.
    limit: Duration,
}

/// The calls waiting for their agents' retries, by request state.
static PARKED: LazyLock<Mutex<HashMap<String, Parked>>> = LazyLock::new(Default::default);

fn waiting() -> std::sync::MutexGuard<'static, HashMap<String, Parked>> {
    PARKED.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether this request is a 2026-07-28 agent's, which is asked through
/// `input_required` results.
pub fn applies(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|v| v >= rmcp::model::ProtocolVersion::V_2026_07_28)
}

/// Starts the call `start` makes with the agent of this request as the one asked: it runs
/// until it ends (its answer, a result or a task, is this round's) or the server asks
/// something, which comes back as `input_required`.
/// `limit` is how long its server's questions may wait for a person.
pub async fn start<F, Fut>(
    context: &RequestContext<RoleServer>,
    owner: Option<String>,
    limit: Duration,
    start: F,
) -> Result<CallToolResponse, ErrorData>
where
    F: FnOnce(Arc<dyn Answerer>, Option<mpsc::UnboundedSender<ProgressNotificationParam>>) -> Fut,
    Fut: Future<Output = Result<CallToolResponse, ErrorData>> + Send + 'static,
{
    let capabilities = context.meta.client_capabilities().unwrap_or_default();
    let (questions_tx, questions) = mpsc::unbounded_channel();
    let (progress_tx, progress) = mpsc::unbounded_channel();
    let relay = Relay {
        capabilities,
        questions: questions_tx,
    };
    let call = Box::pin(start(Arc::new(relay), Some(progress_tx)));
    let parked = Parked {
        owner,
        call,
        questions,
        progress,
        asked: HashMap::new(),
        next: 0,
        limit: limit + RETRY_GRACE,
    };
    drive(parked, context).await
}

/// Goes on with the call parked under `state`, the agent's `answers` given to the questions
/// it was asked.
pub async fn resume(
    context: &RequestContext<RoleServer>,
    owner: Option<String>,
    state: &str,
    answers: InputResponses,
) -> Result<CallToolResponse, ErrorData> {
    let unknown = || {
        ErrorData::invalid_params(
            "no call waits under this request state: it ended, it waited too long, or it is \
             not this client's"
                .to_string(),
            None,
        )
    };
    if !state.starts_with(STATE_PREFIX) {
        return Err(unknown());
    }
    let mut parked = {
        let mut all = waiting();
        match all.get(state) {
            Some(p) if p.owner == owner => {}
            _ => return Err(unknown()),
        }
        all.remove(state).expect("just seen")
    };
    for (key, question) in parked.asked.drain() {
        let answer = match answers.get(&key) {
            Some(value) => typed(&question.request, value.clone()),
            None => Err(ErrorData::invalid_params(
                format!("the agent gave no answer to '{key}'"),
                None,
            )),
        };
        let _ = question.answer.send(answer);
    }
    drive(parked, context).await
}

/// An answer as the result its question expects.
fn typed(request: &ServerRequest, value: serde_json::Value) -> Result<ClientResult, ErrorData> {
    let bad = |e: serde_json::Error| {
        ErrorData::invalid_params(
            format!("the agent's answer does not fit the question: {e}"),
            None,
        )
    };
    Ok(match request {
        ServerRequest::ElicitRequest(_) => {
            ClientResult::ElicitResult(serde_json::from_value(value).map_err(bad)?)
        }
        ServerRequest::CreateMessageRequest(_) => {
            ClientResult::CreateMessageResult(Box::new(serde_json::from_value(value).map_err(bad)?))
        }
        ServerRequest::ListRootsRequest(_) => {
            ClientResult::ListRootsResult(serde_json::from_value(value).map_err(bad)?)
        }
        _ => {
            return Err(ErrorData::invalid_params(
                "not a question for the agent",
                None,
            ));
        }
    })
}

/// Runs the parked call for this round: its progress goes to the agent under this round's
/// token; it ends the round with its result, or with the questions the server asked, when
/// it parks again. The agent cancelling this round cancels the call.
async fn drive(
    mut parked: Parked,
    context: &RequestContext<RoleServer>,
) -> Result<CallToolResponse, ErrorData> {
    let token = context.meta.get_progress_token();
    loop {
        tokio::select! {
            biased;
            Some(mut p) = parked.progress.recv() => {
                if let Some(token) = &token {
                    p.progress_token = token.clone();
                    let _ = context.peer.notify_progress(p).await;
                }
            }
            outcome = &mut parked.call => return outcome,
            Some(first) = parked.questions.recv() => {
                let mut asked = vec![first];
                while let Ok(more) = parked.questions.try_recv() {
                    asked.push(more);
                }
                return park(parked, asked);
            }
            _ = context.ct.cancelled() => {
                let cancelled = HubError::Server("the call was cancelled".to_string());
                return Ok(super::gateway::proxied(Err(cancelled)).into());
            }
        }
    }
}

/// Parks the call with `asked` put to the agent, under a new request state.
fn park(mut parked: Parked, asked: Vec<Question>) -> Result<CallToolResponse, ErrorData> {
    let mut requests = InputRequests::new();
    for question in asked {
        let Some(request) = ask::question_of(&question.request) else {
            let _ = question.answer.send(Err(ErrorData::method_not_found::<
                rmcp::model::ElicitationCreateRequestMethod,
            >()));
            continue;
        };
        let key = format!("q{}", parked.next);
        parked.next += 1;
        requests.insert(key.clone(), request);
        parked.asked.insert(key, question);
    }
    let state = format!("{STATE_PREFIX}{}", ulid::Ulid::new());
    let limit = parked.limit;
    {
        let mut all = waiting();
        if all.len() >= MAX_PARKED {
            return Err(ErrorData::internal_error(
                format!(
                    "{MAX_PARKED} calls already wait for their agents' answers; try again later"
                ),
                None,
            ));
        }
        all.insert(state.clone(), parked);
    }
    // Unclaimed, it goes: its call is cancelled on the server.
    let expired = state.clone();
    tokio::spawn(async move {
        tokio::time::sleep(limit).await;
        waiting().remove(&expired);
    });
    Ok(InputRequiredResult::new(Some(requests), Some(state)).into())
}
