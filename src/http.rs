//! The Streamable HTTP face: the MCP server of [`crate::mcp`] served over HTTP at `/mcp`
//! with rmcp's `StreamableHttpService` (both protocol generations: sessions opened by
//! `initialize`, and the stateless `2026-07-28` requests), beside the daemon's socket, on the
//! daemon's core.
//!
//! A connection is accepted only while the face holds fewer than its limits, in total and
//! from the peer's address, both kept below the process's open-files limit so the daemon's
//! socket, store and downstream servers always have files left. A connection has
//! [`HEADER_TIMEOUT`] to send each request's headers and [`BODY_TIMEOUT`] for its body, and
//! may idle between requests no longer than the first.
//!
//! Every request passes [`Guard`] before rmcp sees it, in this order:
//! 1. `Host` and `Origin` against the allow-lists (403): a page in a browser cannot reach a
//!    local server by rebinding a name to 127.0.0.1. A request without `Origin` (not a
//!    browser) passes that half.
//! 2. The bearer token (401) once any token exists, or always on a non-loopback bind
//!    (which [`check_bind`] refuses to start while no token exists). A token's name becomes
//!    the request's [`Caller`]: the author of what it writes, and whether it is read-only.
//! 3. The rate limit per token (429 with `Retry-After`).
//! 4. A session (`Mcp-Session-Id`) only for the token that opened it; another's is not
//!    found (404).
//!
//! Then rmcp: the body limit (413, while streaming), the protocol. Nothing here logs a
//! header's value, a token or a session id; a refusal is logged with its reason and the
//! token's name, at most [`REFUSALS_LOGGED_PER_SEC`] a second (the rest are counted).

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::mcp::{Caller, TandemServer};
use crate::tokens::TokenSet;
use tandem_core::core::LazyCore;
use tandem_core::log_rate::LogBudget;

/// Where the face listens when `--http` names no address.
pub const DEFAULT_ADDR: &str = "127.0.0.1:7370";
/// The MCP endpoint's path.
pub const ENDPOINT: &str = "/mcp";
/// The largest request body accepted (an import over MCP is not a thing; 4 MiB holds any
/// tool call).
pub const DEFAULT_MAX_BODY: usize = 4 * 1024 * 1024;
/// Requests a minute per token (or for everyone together, without tokens).
pub const DEFAULT_RATE_PER_MINUTE: u32 = 1200;
/// Connections held at once, from everyone.
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;
/// Connections held at once from one address. Behind a reverse proxy every client has the
/// proxy's address: raise it there, and let the proxy bound each client.
pub const DEFAULT_MAX_CONNECTIONS_PER_PEER: usize = 64;
/// How long a client has to send a request's headers, and how long a connection may wait
/// for its next request: a peer that sends half a header, or nothing, lets go of its
/// connection after this.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client has to send a request's body, once its headers are in: a peer that
/// trickles a body lets go of its connection after this.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// Open files the HTTP face leaves to the rest of the daemon (its socket and clients, the
/// store, the index, downstream servers' pipes), whatever its connections.
const FILES_KEPT_FOR_THE_DAEMON: u64 = 256;
/// Refusals logged a second; the rest are counted, and the count logged.
pub const REFUSALS_LOGGED_PER_SEC: u32 = 10;
/// The session header of the Streamable HTTP transport.
const SESSION_HEADER: &str = "mcp-session-id";

/// The face's settings.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// Extra `Host` names (a name matches any port; `name:port` only that port), beside
    /// loopback's and the bound address.
    pub allowed_hosts: Vec<String>,
    /// Extra browser origins (`scheme://host[:port]`), beside the loopback origins of the
    /// bound port.
    pub allowed_origins: Vec<String>,
    pub max_body_bytes: usize,
    pub rate_per_minute: u32,
    pub max_connections: usize,
    pub max_connections_per_peer: usize,
    /// The workspace the HTTP sessions track tasks in.
    pub workspace: PathBuf,
}

/// Why the face does not start.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error(
        "refusing to listen on {0} without a token: anyone who can reach it could read and write the knowledge base. Make one with `tandem token add NAME`, or bind to loopback (127.0.0.1)"
    )]
    PublicWithoutToken(SocketAddr),
    #[error(
        "cannot read the tokens, so no request could be authenticated: {0}. Fix the file, or remove it and make the tokens again with `tandem token add NAME`"
    )]
    Tokens(#[from] crate::tokens::TokenError),
}

/// A non-loopback address is refused while no token exists; a tokens file that cannot be
/// read is refused on any address.
pub fn check_bind(addr: SocketAddr, home: &Path) -> Result<(), HttpError> {
    let tokens = crate::tokens::list(home)?;
    if !addr.ip().is_loopback() && tokens.is_empty() {
        return Err(HttpError::PublicWithoutToken(addr));
    }
    Ok(())
}

type Body = BoxBody<Bytes, Infallible>;
type Service = StreamableHttpService<TandemServer, LocalSessionManager>;

/// Serves MCP on `listener` until `stop` resolves.
pub async fn serve(
    listener: TcpListener,
    config: HttpConfig,
    home: &Path,
    core: Arc<LazyCore>,
    stop: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    let cancel = CancellationToken::new();
    // One checker of Host and Origin, ours (`Guard`), so rmcp's is off.
    let rmcp_config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .disable_allowed_origins()
        .with_max_request_body_bytes(config.max_body_bytes)
        .with_cancellation_token(cancel.child_token());
    let workspace = config.workspace.clone();
    let sessions = Arc::new(LocalSessionManager::default());
    // A stateless request gets a server of its own: the tasks it gets outlive it.
    let tasks = Arc::new(crate::mcp::tasks::Tasks::default());
    let service = StreamableHttpService::new(
        move || Ok(TandemServer::new(core.clone(), workspace.clone()).with_tasks(tasks.clone())),
        sessions.clone(),
        rmcp_config,
    );
    let guard = Arc::new(Guard::new(&config, addr, home, sessions));
    let connections = Arc::new(Connections::new(
        connection_cap(config.max_connections),
        config.max_connections_per_peer.max(1),
    ));
    tracing::info!("serving MCP over HTTP at http://{addr}{ENDPOINT}");
    tokio::pin!(stop);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of files (or another passing failure): wait, so as not to spin.
                    warn_bounded(&guard.log, format_args!("http accept failed: {e}"));
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut stop => break,
        };
        let Some(permit) = connections.admit(peer.ip()) else {
            refuse_connection(&stream);
            warn_bounded(
                &guard.log,
                format_args!(
                    "http connection refused: the face holds its limit of connections ({} in all, {} from one address)",
                    connections.total, connections.per_peer
                ),
            );
            continue;
        };
        let (service, guard, cancel) = (service.clone(), guard.clone(), cancel.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let handler = hyper::service::service_fn(move |request| {
                let (service, guard) = (service.clone(), guard.clone());
                async move { Ok::<_, Infallible>(handle(&guard, &service, request).await) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), handler);
            tokio::pin!(connection);
            tokio::select! {
                done = connection.as_mut() => {
                    if let Err(e) = done {
                        tracing::debug!("http connection from {peer} ended: {e}");
                    }
                }
                _ = cancel.cancelled() => connection.as_mut().graceful_shutdown(),
            }
        });
    }
    cancel.cancel();
    Ok(())
}

/// Says 503 to a connection past the limits, if its socket takes it at once, and closes it.
fn refuse_connection(stream: &TcpStream) {
    let _ = stream.try_write(
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\nRetry-After: 1\r\n\r\n",
    );
}

/// `wanted` connections, or fewer when the open-files limit could not hold them beside
/// what the daemon keeps. The soft limit is raised to the hard one first.
fn connection_cap(wanted: usize) -> usize {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.maximum != limit.current {
        let raised = rustix::process::Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        if let Err(e) = setrlimit(Resource::Nofile, raised) {
            tracing::debug!("could not raise the open-files limit: {e}");
        }
    }
    let Some(files) = getrlimit(Resource::Nofile).current else {
        return wanted.max(1);
    };
    let room = files.saturating_sub(FILES_KEPT_FOR_THE_DAEMON);
    let cap = usize::try_from(room)
        .unwrap_or(usize::MAX)
        .min(wanted)
        .max(1);
    if cap < wanted {
        tracing::warn!(
            "the HTTP face holds at most {cap} connections, not {wanted}: the open-files limit is {files}"
        );
    }
    cap
}

/// The connections the face holds, in total and by peer address.
struct Connections {
    total: usize,
    per_peer: usize,
    held: Mutex<(usize, HashMap<IpAddr, usize>)>,
}

/// One held connection; dropping it lets go of its place.
struct Held {
    connections: Arc<Connections>,
    peer: IpAddr,
}

impl Connections {
    fn new(total: usize, per_peer: usize) -> Connections {
        Connections {
            total,
            per_peer,
            held: Mutex::new((0, HashMap::new())),
        }
    }

    fn admit(self: &Arc<Self>, peer: IpAddr) -> Option<Held> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let (all, by_peer) = &mut *held;
        let mine = by_peer.entry(peer).or_insert(0);
        if *all >= self.total || *mine >= self.per_peer {
            if *mine == 0 {
                by_peer.remove(&peer);
            }
            return None;
        }
        *mine += 1;
        *all += 1;
        Some(Held {
            connections: self.clone(),
            peer,
        })
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut held = self
            .connections
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let (all, by_peer) = &mut *held;
        *all -= 1;
        if let Some(mine) = by_peer.get_mut(&self.peer) {
            *mine -= 1;
            if *mine == 0 {
                by_peer.remove(&self.peer);
            }
        }
    }
}

async fn handle(
    guard: &Guard,
    service: &Service,
    mut request: Request<hyper::body::Incoming>,
) -> Response<Body> {
    if request.uri().path() != ENDPOINT {
        return refusal(
            StatusCode::NOT_FOUND,
            &format!("Not found: MCP is at {ENDPOINT}"),
        );
    }
    let caller = match guard.admit(request.headers()) {
        Ok(caller) => caller,
        Err(refused) => return refused.response(&guard.log),
    };
    let session = request
        .headers()
        .get(SESSION_HEADER)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    if let Some(id) = &session
        && !guard.owners.is_owner(id, &caller)
    {
        // Another token's session, or none: not found either way, so that a session's
        // existence is not told to anyone but its owner.
        return Refusal::new(
            StatusCode::NOT_FOUND,
            "Not found: no such session for this token".to_string(),
        )
        .response(&guard.log);
    }
    let method = request.method().clone();
    request.extensions_mut().insert(caller.clone());
    let response = service.handle(request.map(BodyDeadline::new)).await;
    match (&session, response.headers().get(SESSION_HEADER)) {
        (None, Some(opened)) => {
            let opened = String::from_utf8_lossy(opened.as_bytes()).into_owned();
            guard.owners.opened(opened, caller).await;
        }
        (Some(id), _) if method == Method::DELETE && response.status().is_success() => {
            guard.owners.closed(id);
        }
        _ => {}
    }
    response
}

/// A request's body that fails once [`BODY_TIMEOUT`] has passed.
struct BodyDeadline {
    body: hyper::body::Incoming,
    deadline: std::pin::Pin<Box<tokio::time::Sleep>>,
}

impl BodyDeadline {
    fn new(body: hyper::body::Incoming) -> BodyDeadline {
        BodyDeadline {
            body,
            deadline: Box::pin(tokio::time::sleep(BODY_TIMEOUT)),
        }
    }
}

impl hyper::body::Body for BodyDeadline {
    type Data = Bytes;
    type Error = String;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, String>>> {
        use std::future::Future;
        if self.deadline.as_mut().poll(cx).is_ready() {
            let why = format!("the body did not come within {} s", BODY_TIMEOUT.as_secs());
            return std::task::Poll::Ready(Some(Err(why)));
        }
        std::pin::Pin::new(&mut self.body)
            .poll_frame(cx)
            .map_err(|e| e.to_string())
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// Why the guard refused a request: its status, a message for people, and the header
/// that goes with it.
#[derive(Debug)]
struct Refusal {
    status: StatusCode,
    message: String,
    /// `Retry-After` seconds (429).
    retry_after: Option<u64>,
}

impl Refusal {
    fn new(status: StatusCode, message: String) -> Refusal {
        Refusal {
            status,
            message,
            retry_after: None,
        }
    }

    /// The answer, the refusal logged when the budget allows. The message holds no
    /// header's value, so the log does not either.
    fn response(self, log: &LogBudget) -> Response<Body> {
        warn_bounded(
            log,
            format_args!(
                "http request refused ({}): {}",
                self.status.as_u16(),
                self.message
            ),
        );
        let mut response = refusal(self.status, &self.message);
        let headers = response.headers_mut();
        if self.status == StatusCode::UNAUTHORIZED {
            headers.insert(
                http::header::WWW_AUTHENTICATE,
                http::HeaderValue::from_static("Bearer realm=\"tandem\""),
            );
        }
        if let Some(seconds) = self.retry_after {
            headers.insert(http::header::RETRY_AFTER, http::HeaderValue::from(seconds));
        }
        response
    }
}

fn refusal(status: StatusCode, message: &str) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(format!("{message}\n"))).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// What every request passes before rmcp: Host and Origin, the token, the rate limit, the
/// session's owner.
struct Guard {
    /// Names allowed with any port (`--allow-host NAME`).
    any_port: Vec<String>,
    /// `name:port` allowed (loopback's names and the bound address with the bound port;
    /// `--allow-host NAME:PORT`).
    with_port: Vec<String>,
    origins: Vec<String>,
    tokens: TokenSet,
    /// Bound to a non-loopback address: a token is needed even if the file empties.
    public: bool,
    rate_per_minute: u32,
    buckets: Mutex<HashMap<String, Bucket>>,
    owners: Owners,
    log: LogBudget,
}

/// A token bucket: a minute's requests at most, refilled continuously.
struct Bucket {
    left: f64,
    at: Instant,
}

impl Guard {
    fn new(
        config: &HttpConfig,
        addr: SocketAddr,
        home: &Path,
        sessions: Arc<LocalSessionManager>,
    ) -> Guard {
        let port = addr.port();
        let mut names = vec!["localhost".to_string(), "127.0.0.1".into(), "::1".into()];
        if !addr.ip().is_unspecified() {
            names.push(addr.ip().to_string());
        }
        let mut with_port: Vec<String> = names.iter().map(|n| format!("{n}:{port}")).collect();
        let mut any_port = Vec::new();
        for host in &config.allowed_hosts {
            let host = host.to_ascii_lowercase();
            match parse_host(&host) {
                Ok((name, Some(port))) => with_port.push(format!("{name}:{port}")),
                Ok((name, None)) => any_port.push(name),
                Err(why) => tracing::warn!("--allow-host '{host}' is ignored: {why}"),
            }
        }
        let mut origins: Vec<String> = ["localhost", "127.0.0.1", "[::1]"]
            .iter()
            .map(|h| format!("http://{h}:{port}"))
            .collect();
        origins.extend(
            config
                .allowed_origins
                .iter()
                .map(|o| o.trim_end_matches('/').to_ascii_lowercase()),
        );
        Guard {
            any_port,
            with_port,
            origins,
            tokens: TokenSet::new(home),
            public: !addr.ip().is_loopback(),
            rate_per_minute: config.rate_per_minute.max(1),
            buckets: Mutex::new(HashMap::new()),
            owners: Owners::new(sessions),
            log: LogBudget::new(REFUSALS_LOGGED_PER_SEC),
        }
    }

    fn admit(&self, headers: &HeaderMap) -> Result<Caller, Refusal> {
        if let Err(why) = self.check_host_origin(headers) {
            return Err(Refusal::new(
                StatusCode::FORBIDDEN,
                format!("Forbidden: {why}"),
            ));
        }
        let caller = self.authenticate(headers)?;
        let key = caller.user.clone().unwrap_or_default();
        if let Err(wait) = self.take(&key) {
            let seconds = wait.as_secs().max(1);
            let mut refused = Refusal::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "Too many requests from {}: at most {} a minute; retry in {seconds} s",
                    caller.user.as_deref().unwrap_or("anonymous callers"),
                    self.rate_per_minute,
                ),
            );
            refused.retry_after = Some(seconds);
            return Err(refused);
        }
        Ok(caller)
    }

    /// `Host` must be an allowed name and port, exactly; `Origin`, when sent, an allowed
    /// origin. What is refused is said without the header's value.
    fn check_host_origin(&self, headers: &HeaderMap) -> Result<(), String> {
        let host = headers
            .get(http::header::HOST)
            .and_then(|h| h.to_str().ok())
            .ok_or("no readable Host header")?;
        let (name, port) = parse_host(&host.to_ascii_lowercase())
            .map_err(|why| format!("the Host header {why}"))?;
        let allowed = match port {
            Some(port) => {
                self.any_port.contains(&name) || self.with_port.contains(&format!("{name}:{port}"))
            }
            // No port: the scheme's default, which only a name allowed with any port covers.
            None => self.any_port.contains(&name),
        };
        if !allowed {
            return Err("the Host header names a host this server does not serve (add it with --allow-host)".to_string());
        }
        if let Some(origin) = headers.get(http::header::ORIGIN) {
            let allowed = origin
                .to_str()
                .is_ok_and(|o| self.origins.contains(&o.to_ascii_lowercase()));
            if !allowed {
                return Err(
                    "the Origin header names an origin this server does not serve (add it with --allow-origin)"
                        .to_string(),
                );
            }
        }
        Ok(())
    }

    /// The caller: anonymous on loopback while no token exists, else the token's.
    fn authenticate(&self, headers: &HeaderMap) -> Result<Caller, Refusal> {
        let presented = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer ").or(v.strip_prefix("bearer ")))
            .map(str::trim);
        let tokens = match self.tokens.current() {
            Ok(tokens) => tokens,
            Err(e) => {
                return Err(Refusal::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!(
                        "Service unavailable: the server cannot read its tokens, so it refuses every request until its owner fixes them ({e})"
                    ),
                ));
            }
        };
        if !self.public && tokens.is_empty() {
            return Ok(Caller::default());
        }
        let unauthorized =
            |why: &str| Refusal::new(StatusCode::UNAUTHORIZED, format!("Unauthorized: {why}"));
        let Some(presented) = presented else {
            return Err(unauthorized(
                "this server needs a bearer token (Authorization: Bearer ...; `tandem token add NAME` makes one)",
            ));
        };
        match tokens.verify(presented) {
            Some(token) => Ok(Caller {
                user: Some(token.name),
                read_only: token.read_only,
            }),
            None => Err(unauthorized(
                "the token is not valid (revoked, or mistyped)",
            )),
        }
    }

    /// Takes one request from `key`'s bucket, or says how long until one is left.
    fn take(&self, key: &str) -> Result<(), Duration> {
        let capacity = f64::from(self.rate_per_minute);
        let per_second = capacity / 60.0;
        let mut buckets = self
            .buckets
            .lock()
            .expect("the rate limiter is never poisoned");
        let now = Instant::now();
        let bucket = buckets.entry(key.to_string()).or_insert(Bucket {
            left: capacity,
            at: now,
        });
        bucket.left =
            (bucket.left + now.duration_since(bucket.at).as_secs_f64() * per_second).min(capacity);
        bucket.at = now;
        if bucket.left >= 1.0 {
            bucket.left -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - bucket.left) / per_second))
        }
    }
}

/// A `Host` value as a name and its port, or why it is not one: no user info, a port of
/// digits that fits, an IPv6 address in brackets.
fn parse_host(host: &str) -> Result<(String, Option<u16>), &'static str> {
    if host.contains(['@', '/', '?', '#', ' ']) {
        return Err("is not a host and port");
    }
    let (name, port) = match host.strip_prefix('[') {
        Some(v6) => {
            let (address, rest) = v6.split_once(']').ok_or("has an unclosed '['")?;
            let port = match rest {
                "" => None,
                _ => Some(rest.strip_prefix(':').ok_or("is not a host and port")?),
            };
            (address, port)
        }
        None => match host.rsplit_once(':') {
            Some((_, _)) if host.matches(':').count() > 1 => {
                return Err("has an IPv6 address without brackets");
            }
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        },
    };
    if name.is_empty() {
        return Err("has no host");
    }
    let port = match port {
        None => None,
        Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
            Some(p.parse::<u16>().map_err(|_| "has a port out of range")?)
        }
        Some(_) => return Err("has a port that is not a number"),
    };
    Ok((name.to_string(), port))
}

/// Which token opened each session. A session answers only its owner; the ids rmcp has
/// let go of are forgotten when the map has grown.
struct Owners {
    sessions: Arc<LocalSessionManager>,
    owners: Mutex<(HashMap<String, Option<String>>, usize)>,
}

impl Owners {
    /// The map is pruned of ended sessions when it reaches this many, then at twice what
    /// is left.
    const PRUNE_FROM: usize = 1024;

    fn new(sessions: Arc<LocalSessionManager>) -> Owners {
        Owners {
            sessions,
            owners: Mutex::new((HashMap::new(), Self::PRUNE_FROM)),
        }
    }

    fn is_owner(&self, id: &str, caller: &Caller) -> bool {
        let owners = self.owners.lock().unwrap_or_else(|p| p.into_inner());
        owners.0.get(id).is_some_and(|owner| *owner == caller.user)
    }

    async fn opened(&self, id: String, caller: Caller) {
        let prune = {
            let mut owners = self.owners.lock().unwrap_or_else(|p| p.into_inner());
            owners.0.insert(id, caller.user);
            owners.0.len() >= owners.1
        };
        if prune {
            let live: std::collections::HashSet<String> = {
                let sessions = self.sessions.sessions.read().await;
                sessions.keys().map(|id| id.to_string()).collect()
            };
            let mut owners = self.owners.lock().unwrap_or_else(|p| p.into_inner());
            owners.0.retain(|id, _| live.contains(id));
            owners.1 = (owners.0.len() * 2).max(Self::PRUNE_FROM);
        }
    }

    fn closed(&self, id: &str) {
        let mut owners = self.owners.lock().unwrap_or_else(|p| p.into_inner());
        owners.0.remove(id);
    }
}

/// Logs `line` as a warning if the face's budget allows, after a count of the lines it
/// did not allow in the seconds before.
fn warn_bounded(log: &LogBudget, line: std::fmt::Arguments<'_>) {
    if let Some(n) = log.suppressed() {
        tracing::warn!(
            "{n} more lines of the HTTP face were not logged (at most {REFUSALS_LOGGED_PER_SEC} a second)"
        );
    }
    if log.allow() {
        tracing::warn!("{line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(extra_hosts: &[&str], extra_origins: &[&str]) -> Guard {
        let config = HttpConfig {
            allowed_hosts: extra_hosts.iter().map(|s| s.to_string()).collect(),
            allowed_origins: extra_origins.iter().map(|s| s.to_string()).collect(),
            max_body_bytes: DEFAULT_MAX_BODY,
            rate_per_minute: 3,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_peer: DEFAULT_MAX_CONNECTIONS_PER_PEER,
            workspace: PathBuf::from("/"),
        };
        Guard::new(
            &config,
            "127.0.0.1:8000".parse().unwrap(),
            Path::new("/nonexistent"),
            Arc::new(LocalSessionManager::default()),
        )
    }

    fn headers(host: &str, origin: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(http::header::HOST, host.parse().unwrap());
        if let Some(o) = origin {
            h.insert(http::header::ORIGIN, o.parse().unwrap());
        }
        h
    }

    #[test]
    fn hosts_and_origins() {
        let g = guard(&["team.example.com:443"], &["https://app.example.com"]);
        let ok = |host, origin| g.check_host_origin(&headers(host, origin)).is_ok();
        assert!(ok("127.0.0.1:8000", None));
        assert!(ok("localhost:8000", Some("http://localhost:8000")));
        assert!(ok("[::1]:8000", Some("http://[::1]:8000")));
        assert!(ok("team.example.com:443", Some("https://app.example.com")));
        assert!(!ok("team.example.com:8443", None), "only the listed port");
        assert!(!ok("evil.example:8000", None), "a rebound name");
        assert!(!ok("localhost:8000", Some("http://evil.example")));
        assert!(!ok("localhost:8000", Some("http://localhost:9999")));
        assert!(!ok("localhost:8000", Some("null")));
        assert!(
            !ok("localhost:9000", None),
            "loopback only on the bound port"
        );
        assert!(
            !ok("localhost", None),
            "no port is port 80, not the bound one"
        );
    }

    #[test]
    fn host_is_parsed_as_an_authority() {
        let g = guard(&["team.example.com"], &[]);
        let ok = |host| g.check_host_origin(&headers(host, None)).is_ok();
        assert!(ok("team.example.com"), "a name allowed with any port");
        assert!(ok("team.example.com:8443"));
        for bad in [
            "evil.com@127.0.0.1:8000",
            "127.0.0.1:99999",
            "127.0.0.1:8000:8000",
            "127.0.0.1:",
            "127.0.0.1:+8000",
            "[::1:8000",
            "::1:8000",
            ":8000",
        ] {
            assert!(!ok(bad), "{bad} must be refused");
        }
        assert_eq!(
            parse_host("[::1]:8000"),
            Ok(("::1".to_string(), Some(8000)))
        );
        assert_eq!(
            parse_host("Example.com"),
            Ok(("Example.com".to_string(), None))
        );
    }

    #[test]
    fn refusals_hold_no_header_value() {
        let g = guard(&[], &[]);
        let long = format!("{}.example:8000", "h".repeat(300_000));
        let why = g.check_host_origin(&headers(&long, None)).unwrap_err();
        assert!(why.len() < 200 && !why.contains("hhhh"), "{why}");
        let why = g
            .check_host_origin(&headers("127.0.0.1:8000", Some("http://evil.example")))
            .unwrap_err();
        assert!(!why.contains("evil"), "{why}");
    }

    #[test]
    fn connections_are_bounded_in_all_and_by_peer() {
        let c = Arc::new(Connections::new(3, 2));
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let a1 = c.admit(a).unwrap();
        let _a2 = c.admit(a).unwrap();
        assert!(c.admit(a).is_none(), "two from one address");
        let _b1 = c.admit(b).unwrap();
        assert!(c.admit(b).is_none(), "three in all");
        drop(a1);
        let _b2 = c.admit(b).expect("a place let go is taken again");
        assert!(c.admit(a).is_none());
    }

    #[test]
    fn rate_limit_per_key() {
        let g = guard(&[], &[]);
        for _ in 0..3 {
            g.take("ada").unwrap();
        }
        let wait = g.take("ada").unwrap_err();
        assert!(wait > Duration::from_secs(10) && wait <= Duration::from_secs(20));
        g.take("bob").expect("another token has its own bucket");
    }
}
