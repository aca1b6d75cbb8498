//! The Streamable HTTP face: the MCP server of [`crate::mcp`] served over HTTP at `/mcp`
//! with rmcp's `StreamableHttpService` (both protocol generations: sessions opened by
//! `initialize`, and the stateless `2026-07-28` requests), beside the daemon's socket, on the
//! daemon's core.
//!
//! Every request passes [`Guard`] before rmcp sees it, in this order:
//! 1. `Host` and `Origin` against the allow-lists (403): a page in a browser cannot reach a
//!    local server by rebinding a name to 127.0.0.1. A request without `Origin` (not a
//!    browser) passes that half.
//! 2. The bearer token (401) once any token exists, or always on a non-loopback bind
//!    (which [`check_bind`] refuses to start while no token exists). A token's name becomes
//!    the request's [`Caller`]: the author of what it writes, and whether it is read-only.
//! 3. The rate limit per token (429 with `Retry-After`).
//!
//! Then rmcp: the body limit (413, while streaming), the protocol. Nothing here logs a
//! request's headers or a token; a refusal is logged with its reason and the token's name.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::core::LazyCore;
use crate::mcp::{Caller, TandemServer};
use crate::tokens::TokenSet;

/// Where the face listens when `--http` names no address.
pub const DEFAULT_ADDR: &str = "127.0.0.1:7370";
/// The MCP endpoint's path.
pub const ENDPOINT: &str = "/mcp";
/// The largest request body accepted (an import over MCP is not a thing; 4 MiB holds any
/// tool call).
pub const DEFAULT_MAX_BODY: usize = 4 * 1024 * 1024;
/// Requests a minute per token (or for everyone together, without tokens).
pub const DEFAULT_RATE_PER_MINUTE: u32 = 1200;

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
    #[error("cannot read the tokens: {0}")]
    Tokens(#[from] crate::tokens::TokenError),
}

/// A non-loopback address is refused while no token exists.
pub fn check_bind(addr: SocketAddr, home: &Path) -> Result<(), HttpError> {
    if !addr.ip().is_loopback() && crate::tokens::list(home)?.is_empty() {
        return Err(HttpError::PublicWithoutToken(addr));
    }
    Ok(())
}

type Body = BoxBody<Bytes, Infallible>;

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
    let service = StreamableHttpService::new(
        move || Ok(TandemServer::new(core.clone(), workspace.clone())),
        Arc::new(LocalSessionManager::default()),
        rmcp_config,
    );
    let guard = Arc::new(Guard::new(&config, addr, home));
    tracing::info!("serving MCP over HTTP at http://{addr}{ENDPOINT}");
    tokio::pin!(stop);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!("http accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut stop => break,
        };
        let (service, guard, cancel) = (service.clone(), guard.clone(), cancel.clone());
        tokio::spawn(async move {
            let handler = hyper::service::service_fn(move |request| {
                let (service, guard) = (service.clone(), guard.clone());
                async move { Ok::<_, Infallible>(handle(&guard, &service, request).await) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
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

async fn handle(
    guard: &Guard,
    service: &StreamableHttpService<TandemServer, LocalSessionManager>,
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
        Err(refused) => return refused.response(),
    };
    request.extensions_mut().insert(caller);
    service.handle(request).await
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
        tracing::warn!("http request refused ({}): {message}", status.as_u16());
        Refusal {
            status,
            message,
            retry_after: None,
        }
    }

    fn response(self) -> Response<Body> {
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

/// What every request passes before rmcp: Host and Origin, the token, the rate limit.
struct Guard {
    hosts: Vec<String>,
    origins: Vec<String>,
    tokens: TokenSet,
    /// Bound to a non-loopback address: a token is needed even if the file empties.
    public: bool,
    rate_per_minute: u32,
    buckets: Mutex<HashMap<String, Bucket>>,
}

/// A token bucket: a minute's requests at most, refilled continuously.
struct Bucket {
    left: f64,
    at: Instant,
}

impl Guard {
    fn new(config: &HttpConfig, addr: SocketAddr, home: &Path) -> Guard {
        let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1"]
            .into_iter()
            .map(String::from)
            .collect();
        if !addr.ip().is_unspecified() {
            hosts.push(addr.ip().to_string());
        }
        hosts.extend(config.allowed_hosts.iter().map(|h| h.to_ascii_lowercase()));
        let port = addr.port();
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
            hosts,
            origins,
            tokens: TokenSet::new(home),
            public: !addr.ip().is_loopback(),
            rate_per_minute: config.rate_per_minute.max(1),
            buckets: Mutex::new(HashMap::new()),
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

    fn check_host_origin(&self, headers: &HeaderMap) -> Result<(), String> {
        let host = headers
            .get(http::header::HOST)
            .and_then(|h| h.to_str().ok())
            .ok_or("no readable Host header")?;
        let authority: http::uri::Authority = host
            .parse()
            .map_err(|_| format!("malformed Host header '{host}'"))?;
        let name = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        let with_port = authority
            .port_u16()
            .map(|p| format!("{name}:{p}"))
            .unwrap_or_else(|| name.clone());
        if !self.hosts.iter().any(|h| *h == name || *h == with_port) {
            return Err(format!(
                "Host '{host}' is not allowed (add it with --allow-host)"
            ));
        }
        if let Some(origin) = headers.get(http::header::ORIGIN) {
            let origin = origin
                .to_str()
                .map_err(|_| "unreadable Origin header".to_string())?;
            if !self.origins.contains(&origin.to_ascii_lowercase()) {
                return Err(format!(
                    "Origin '{origin}' is not allowed (add it with --allow-origin)"
                ));
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
        let tokens = self.tokens.current();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(extra_hosts: &[&str], extra_origins: &[&str]) -> Guard {
        let config = HttpConfig {
            allowed_hosts: extra_hosts.iter().map(|s| s.to_string()).collect(),
            allowed_origins: extra_origins.iter().map(|s| s.to_string()).collect(),
            max_body_bytes: DEFAULT_MAX_BODY,
            rate_per_minute: 3,
            workspace: PathBuf::from("/"),
        };
        Guard::new(
            &config,
            "127.0.0.1:8000".parse().unwrap(),
            Path::new("/nonexistent"),
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
