//! A downstream connection's failures as sentences for people: what failed and what to do,
//! never a Rust type name. rmcp's errors print their transport's type (`Transport
//! [rmcp::transport::worker::WorkerTransport<...>] error: ...`) and wrap HTTP, DNS and TLS
//! failures several layers deep; every hub path that turns one into a message (the
//! handshake, a request, a list refresh) goes through here.
//!
//! What a server sent (an error's text, a body it answered with) is its own: it is cut and
//! its control characters escaped ([`printable`]) before it joins a message.

use std::error::Error as StdError;

use rmcp::ServiceError;
use rmcp::service::ClientInitializeError;
use rmcp::transport::streamable_http_client::StreamableHttpError;

/// How much of what a server said (an error's message, a body) a message quotes.
const QUOTED_CHARS: usize = 200;

/// Where the connection goes, for the message to name it.
#[derive(Debug, Clone, Copy)]
pub enum Endpoint<'a> {
    /// A Streamable HTTP server at this URL.
    Http(&'a str),
    /// A process on this machine.
    Stdio,
}

impl Endpoint<'_> {
    fn at(&self) -> String {
        match self {
            Endpoint::Http(url) => url.to_string(),
            Endpoint::Stdio => "the server".to_string(),
        }
    }
}

/// Why the MCP handshake (`initialize`) failed.
pub fn handshake(error: &ClientInitializeError, to: Endpoint) -> String {
    match error {
        ClientInitializeError::TransportError { error, .. } => transport(error.error.as_ref(), to),
        ClientInitializeError::LegacyFallbackFailed { fallback, .. } => handshake(fallback, to),
        ClientInitializeError::JsonRpcError(e) => format!(
            "{} refused the MCP handshake: {}",
            to.at(),
            printable(&e.message, QUOTED_CHARS)
        ),
        ClientInitializeError::ConnectionClosed(_) => format!(
            "{} closed the connection before answering the MCP handshake",
            to.at()
        ),
        ClientInitializeError::ExpectedInitResponse(_)
        | ClientInitializeError::ExpectedInitResult(_)
        | ClientInitializeError::ConflictInitResponseId(..)
        | ClientInitializeError::UncorrelatedErrorResponse { .. } => format!(
            "{} did not answer the MCP handshake with its result: is it an MCP server?",
            to.at()
        ),
        ClientInitializeError::NoCompatibleProtocolVersion {
            client_supported,
            server_supported,
        } => format!(
            "{} speaks none of the MCP protocol versions Tandem does (it offers {}; Tandem {})",
            to.at(),
            versions(server_supported),
            versions(client_supported)
        ),
        ClientInitializeError::Cancelled => "the MCP handshake was cancelled".to_string(),
        other => format!(
            "the MCP handshake with {} failed: {}",
            to.at(),
            plain(&other.to_string())
        ),
    }
}

/// Why a request (`method`) on a running connection failed. An error answer
/// ([`ServiceError::McpError`]) is the server's; the callers pass it on as it is.
pub fn request(error: &ServiceError, method: &str, to: Endpoint) -> String {
    match error {
        ServiceError::McpError(e) => format!(
            "{} answered {method} with an error: {}",
            to.at(),
            printable(&e.message, QUOTED_CHARS)
        ),
        ServiceError::TransportSend(e) => transport(e.error.as_ref(), to),
        ServiceError::TransportClosed => {
            format!("the connection to {} closed during {method}", to.at())
        }
        ServiceError::UnexpectedResponse => format!(
            "{} answered {method} with the result of another request",
            to.at()
        ),
        ServiceError::Timeout { timeout } => format!(
            "{} did not answer {method} within {:.1}s",
            to.at(),
            timeout.as_secs_f64()
        ),
        ServiceError::Cancelled { .. } => format!("{method} was cancelled"),
        other => format!("{method} failed: {}", plain(&other.to_string())),
    }
}

/// Why a stdio server's process could not start.
pub fn spawn(command: &str, cwd: &std::path::Path, error: &std::io::Error) -> String {
    let command = printable(command, QUOTED_CHARS);
    match error.kind() {
        std::io::ErrorKind::NotFound if !cwd.is_dir() => format!(
            "cannot start `{command}`: its directory {} does not exist",
            cwd.display()
        ),
        std::io::ErrorKind::NotFound => format!(
            "cannot start `{command}`: no such program (is it installed, and on the PATH \
             Tandem runs with?)"
        ),
        std::io::ErrorKind::PermissionDenied => {
            format!("cannot start `{command}`: permission denied (is it executable?)")
        }
        _ => format!("cannot start `{command}` in {}: {error}", cwd.display()),
    }
}

/// A transport's failure: the streamable HTTP client's, an I/O error, or another's.
pub fn transport(error: &(dyn StdError + 'static), to: Endpoint) -> String {
    if let Some(e) = error.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
        return http(e, to);
    }
    if let Some(e) = error.downcast_ref::<reqwest::Error>() {
        return client(e, to);
    }
    if let Some(e) = error.downcast_ref::<std::io::Error>() {
        return io(e, to);
    }
    format!(
        "the connection to {} failed: {}",
        to.at(),
        plain(&error.to_string())
    )
}

/// The streamable HTTP client's failures.
fn http(error: &StreamableHttpError<reqwest::Error>, to: Endpoint) -> String {
    let at = to.at();
    match error {
        StreamableHttpError::Client(e) => client(e, to),
        StreamableHttpError::Io(e) => io(e, to),
        StreamableHttpError::HttpStatus(e) if e.status == 429 => format!(
            "{at} refused: too many requests (HTTP 429){}; try again later",
            e.retry_after
                .as_deref()
                .map(|r| format!(", retry after {}", printable(r, 40)))
                .unwrap_or_default()
        ),
        StreamableHttpError::HttpStatus(e) => format!(
            "{at} failed with HTTP {} ({}): the server has a problem; see its logs",
            e.status,
            reason(e.status)
        ),
        StreamableHttpError::UnexpectedServerResponse(text) => unexpected_response(text, &at),
        StreamableHttpError::UnexpectedContentType(kind) => format!(
            "{at} answered with {}, not JSON or an event stream: is it an MCP (Streamable HTTP) endpoint?",
            match kind {
                Some(kind) => format!("content type '{}'", printable(kind, 60)),
                None => "no content type".to_string(),
            }
        ),
        StreamableHttpError::Deserialize(e) => format!(
            "{at} sent a message that is not valid JSON-RPC ({}): is it an MCP server?",
            printable(&e.to_string(), QUOTED_CHARS)
        ),
        StreamableHttpError::Sse(e) => format!(
            "the event stream from {at} broke: {}",
            printable(&e.to_string(), QUOTED_CHARS)
        ),
        StreamableHttpError::AuthRequired(_) => format!(
            "{at} asks for authorization (HTTP 401): it needs credentials, such as an \
             Authorization header in its entry"
        ),
        StreamableHttpError::InsufficientScope(e) => format!(
            "{at} refused: the credentials lack a permission it needs (HTTP 403){}",
            e.required_scope
                .as_deref()
                .map(|s| format!("; it asks for scope '{}'", printable(s, 100)))
                .unwrap_or_default()
        ),
        StreamableHttpError::ResponseBodyTooLarge { max_size } => format!(
            "{at} sent an answer larger than {} MiB, the most Tandem reads",
            max_size / (1024 * 1024)
        ),
        StreamableHttpError::UnexpectedEndOfStream => {
            format!("{at} ended its answer before the message was complete")
        }
        StreamableHttpError::TransportChannelClosed => {
            format!("the connection to {at} is closed")
        }
        StreamableHttpError::MissingSessionIdInResponse => {
            format!("{at} gave no session id where one was needed")
        }
        StreamableHttpError::SessionExpired => {
            format!("{at} ended the session (HTTP 404 for it): the server restarted or forgot it")
        }
        StreamableHttpError::SessionRecoveryTimeout => {
            format!("{at} did not take a new session in time after it ended the last one")
        }
        StreamableHttpError::ReinitializationFailed(e) => format!(
            "{at} refused a new session: {}",
            printable(&e.message, QUOTED_CHARS)
        ),
        StreamableHttpError::ReservedHeaderConflict(name) => format!(
            "header '{}' in the entry's headers is one Tandem sets itself: remove it",
            printable(name, 60)
        ),
        StreamableHttpError::ServerDoesNotSupportSse => {
            format!("{at} does not offer an event stream")
        }
        StreamableHttpError::ControlRequestTimeout => {
            format!("{at} did not take a cancellation in time")
        }
        other => format!(
            "the connection to {at} failed: {}",
            plain(&other.to_string())
        ),
    }
}

/// A body rmcp kept of an answer it could not use: `HTTP 404 Not Found: <body>` for a
/// failure status, or a JSON parse failure with a preview of the body.
fn unexpected_response(text: &str, at: &str) -> String {
    if let Some(rest) = text.strip_prefix("HTTP ") {
        let code: u16 = rest.get(..3).and_then(|c| c.parse().ok()).unwrap_or(0);
        let body = rest.split_once(": ").map(|(_, b)| b.trim()).unwrap_or("");
        // An HTML page (a web server's own 404) says nothing a person needs here.
        let said = if body.is_empty() || body.starts_with('<') {
            String::new()
        } else {
            format!(" (it said: {})", printable(body, 120))
        };
        let advice = match code {
            404 => ": is the URL the server's MCP endpoint (it often ends in /mcp)?",
            405 => {
                ": it does not take MCP requests at this URL; is it an MCP (Streamable HTTP) endpoint?"
            }
            401 => ": it needs credentials, such as an Authorization header in its entry",
            403 => ": the credentials are not accepted, or lack a permission",
            400..=499 => ": it refused the request",
            _ => "",
        };
        return format!("{at} answered HTTP {code} {}{advice}{said}", reason(code));
    }
    // rmcp's `could not parse JSON response as <its type>: <why>: <the body>`: only the why.
    if let Some(rest) = text.strip_prefix("could not parse JSON response as ") {
        let why = rest.split(": ").nth(1).unwrap_or("");
        return format!(
            "{at} answered with something that is not a JSON-RPC message ({}): is it an MCP server?",
            printable(why, QUOTED_CHARS)
        );
    }
    format!(
        "{at} answered unexpectedly: {}",
        printable(text, QUOTED_CHARS)
    )
}

/// The HTTP client's failures: connect (refused, DNS, TLS), timeout, redirect, body.
fn client(error: &reqwest::Error, to: Endpoint) -> String {
    let at = to.at();
    let host = host_of(&at);
    let causes = causes(error);
    let io_kind = causes
        .iter()
        .find_map(|e| e.downcast_ref::<std::io::Error>())
        .map(std::io::Error::kind);
    let tls = causes.iter().find_map(|e| {
        e.downcast_ref::<rustls::Error>()
            .map(|t| t.to_string())
            .or_else(|| {
                let io = e.downcast_ref::<std::io::Error>()?;
                io.get_ref()?
                    .downcast_ref::<rustls::Error>()
                    .map(|t| t.to_string())
            })
    });
    // hyper-util says `dns error`, the resolver `failed to lookup address`: the only marks
    // a failed lookup leaves.
    let dns = causes.iter().any(|e| {
        let text = e.to_string();
        text.starts_with("dns error") || text.contains("lookup address")
    });
    if let Some(tls) = tls {
        return format!(
            "cannot make a secure (TLS) connection to {host}: {}; check that the URL's scheme \
             (http or https) and port are right, and the server's certificate",
            plain(&tls)
        );
    }
    if dns {
        return format!(
            "cannot find the host '{host}' (the DNS lookup failed): check the URL and the network"
        );
    }
    if error.is_timeout() || io_kind == Some(std::io::ErrorKind::TimedOut) {
        return format!("{at} did not answer in time: is the host reachable?");
    }
    match io_kind {
        Some(std::io::ErrorKind::ConnectionRefused) => {
            return format!("nothing listens at {at}: is the server running?");
        }
        Some(std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted) => {
            return format!("{at} closed the connection");
        }
        _ => {}
    }
    if error.is_redirect() {
        return format!("{at} redirects elsewhere: put the URL it redirects to in the entry");
    }
    if error.is_body() || error.is_decode() {
        return format!("the answer of {at} could not be read: it broke off or is garbled");
    }
    if error.is_connect() {
        return format!(
            "cannot connect to {at}: {}",
            causes
                .last()
                .map(|e| plain(&e.to_string()))
                .unwrap_or_default()
        );
    }
    format!(
        "the request to {at} failed: {}",
        causes
            .last()
            .map(|e| plain(&e.to_string()))
            .unwrap_or_default()
    )
}

/// An I/O failure of a transport (a pipe to a process, a socket).
fn io(error: &std::io::Error, to: Endpoint) -> String {
    use std::io::ErrorKind::*;
    let at = to.at();
    match error.kind() {
        ConnectionRefused => format!("nothing listens at {at}: is the server running?"),
        BrokenPipe | ConnectionReset | ConnectionAborted | UnexpectedEof => {
            format!("{at} closed the connection")
        }
        TimedOut => format!("{at} did not answer in time"),
        _ => format!(
            "the connection to {at} failed: {}",
            plain(&error.to_string())
        ),
    }
}

/// An error and its sources, outermost first; an I/O error's inner error is one of them
/// (its `source` skips it).
fn causes<'a>(error: &'a (dyn StdError + 'static)) -> Vec<&'a (dyn StdError + 'static)> {
    let mut all = Vec::new();
    let mut next = Some(error);
    while let Some(e) = next {
        all.push(e);
        next = e.source().or_else(|| {
            e.downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .map(|inner| inner as &(dyn StdError + 'static))
        });
        if all.len() > 16 {
            break;
        }
    }
    all
}

/// The host (and port) of a URL, for messages about the host rather than the endpoint.
fn host_of(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
    authority
        .rsplit_once('@')
        .map_or(authority, |(_, h)| h)
        .to_string()
}

fn versions(list: &[rmcp::model::ProtocolVersion]) -> String {
    let all: Vec<String> = list.iter().map(|v| printable(&v.to_string(), 40)).collect();
    if all.is_empty() {
        "none".to_string()
    } else {
        all.join(", ")
    }
}

/// The reason phrase of an HTTP status.
fn reason(status: u16) -> &'static str {
    http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("")
}

/// A library's own message, with any Rust path (`a::b::C<D>`) or bracketed type name in
/// it taken out: the fallback for errors not mapped above.
fn plain(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find(']') else {
            break;
        };
        let inside = &rest[open..open + close];
        out.push_str(&rest[..open]);
        // A Rust path, not an IPv6 address (hex digits, colons and dots).
        let path = inside.contains("::")
            && inside[1..]
                .chars()
                .any(|c| !(c.is_ascii_hexdigit() || c == ':' || c == '.'));
        if !path {
            out.push_str(&rest[open..=open + close]);
        }
        rest = &rest[open + close + 1..];
    }
    out.push_str(rest);
    let words: Vec<&str> = out
        .split(' ')
        .filter(|w| {
            let rust_path = w.contains("::") && !w.contains("://");
            !(w.is_empty() || rust_path || w.contains('<'))
        })
        .collect();
    printable(words.join(" ").trim(), 2 * QUOTED_CHARS)
}

/// Text from elsewhere (a downstream server, an HTTP peer) made safe to show: at most
/// `max_chars` characters (cut with `…`), and no character that a terminal acts on: control
/// characters (escape sequences start with one), and the bidirectional overrides that make
/// text read differently from what it is, are written as `\u{..}` escapes. A line break
/// becomes a space.
pub fn printable(text: &str, max_chars: usize) -> String {
    let mut out = String::new();
    for (count, c) in text.chars().enumerate() {
        if count == max_chars {
            out.push('…');
            break;
        }
        match c {
            '\n' | '\r' | '\t' => out.push(' '),
            c if is_unsafe(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// Whether a terminal may act on `c` rather than show it: C0 and C1 controls, DEL, and the
/// bidirectional embeddings, overrides and isolates.
pub fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::transport::DynamicTransportError;
    use rmcp::transport::streamable_http_client::{
        AuthRequiredError, HttpStatusError, InsufficientScopeError,
    };

    const URL: &str = "http://127.0.0.1:9/mcp";

    /// A message for people: no Rust path, no generic type, no escape character.
    fn assert_plain(message: &str) {
        assert!(
            !message.contains("::") && !message.contains('<') && !message.contains('\u{1b}'),
            "not for people: {message}"
        );
    }

    fn wrapped(error: StreamableHttpError<reqwest::Error>) -> ClientInitializeError {
        ClientInitializeError::TransportError {
            error: DynamicTransportError::from_parts(
                "rmcp::transport::worker::WorkerTransport<rmcp::transport::streamable_http_client::StreamableHttpClientWorker<reqwest::async_impl::client::Client>>",
                std::any::TypeId::of::<()>(),
                Box::new(error),
            ),
            context: "send initialize request".into(),
        }
    }

    fn said(error: StreamableHttpError<reqwest::Error>) -> String {
        let message = handshake(&wrapped(error), Endpoint::Http(URL));
        assert_plain(&message);
        message
    }

    #[test]
    fn each_http_failure_says_what_failed_and_what_to_do() {
        let cases: Vec<(StreamableHttpError<reqwest::Error>, &str)> = vec![
            (
                StreamableHttpError::AuthRequired(AuthRequiredError::new(
                    "Bearer resource_metadata=\"x\"".into(),
                )),
                "asks for authorization (HTTP 401)",
            ),
            (
                StreamableHttpError::InsufficientScope(InsufficientScopeError::new(
                    "Bearer error=\"insufficient_scope\"".into(),
                    Some("files:write".into()),
                )),
                "it asks for scope 'files:write'",
            ),
            (
                StreamableHttpError::HttpStatus(HttpStatusError::new(503, None)),
                "failed with HTTP 503 (Service Unavailable): the server has a problem",
            ),
            (
                StreamableHttpError::HttpStatus(HttpStatusError::new(429, Some("30".into()))),
                "too many requests (HTTP 429), retry after 30",
            ),
            (
                StreamableHttpError::UnexpectedServerResponse(
                    "HTTP 404 Not Found: Cannot POST /mcp".into(),
                ),
                "answered HTTP 404 Not Found: is the URL the server's MCP endpoint (it often ends in /mcp)? (it said: Cannot POST /mcp)",
            ),
            (
                StreamableHttpError::UnexpectedServerResponse(
                    "HTTP 405 Method Not Allowed: ".into(),
                ),
                "answered HTTP 405 Method Not Allowed: it does not take MCP requests",
            ),
            (
                StreamableHttpError::UnexpectedServerResponse(
                    "could not parse JSON response as ServerJsonRpcMessage: expected value: <html>"
                        .into(),
                ),
                "not a JSON-RPC message (expected value): is it an MCP server?",
            ),
            (
                StreamableHttpError::UnexpectedContentType(Some("text/html".into())),
                "answered with content type 'text/html', not JSON or an event stream",
            ),
            (
                StreamableHttpError::Deserialize(
                    serde_json::from_str::<serde_json::Value>("{").unwrap_err(),
                ),
                "not valid JSON-RPC",
            ),
            (
                StreamableHttpError::ResponseBodyTooLarge {
                    max_size: 16 * 1024 * 1024,
                },
                "larger than 16 MiB",
            ),
            (
                StreamableHttpError::SessionExpired,
                "ended the session (HTTP 404 for it)",
            ),
            (
                StreamableHttpError::ReservedHeaderConflict("mcp-session-id".into()),
                "header 'mcp-session-id' in the entry's headers is one Tandem sets itself",
            ),
            (
                StreamableHttpError::Io(std::io::Error::from(
                    std::io::ErrorKind::ConnectionRefused,
                )),
                "nothing listens at http://127.0.0.1:9/mcp: is the server running?",
            ),
            (
                StreamableHttpError::TransportChannelClosed,
                "the connection to http://127.0.0.1:9/mcp is closed",
            ),
        ];
        for (error, expected) in cases {
            let message = said(error);
            assert!(
                message.contains(expected),
                "{expected:?} not in {message:?}"
            );
        }
    }

    #[test]
    fn what_a_server_says_is_cut_and_escaped() {
        let body = format!(
            "HTTP 500 Internal Server Error: \u{1b}]0;owned\u{7}{}",
            "x".repeat(5000)
        );
        let message = said(StreamableHttpError::UnexpectedServerResponse(body.into()));
        assert!(message.contains("\\u{1b}]0;owned\\u{7}"), "{message}");
        assert!(message.chars().count() < 400, "not cut: {message}");
        let refused = handshake(
            &ClientInitializeError::JsonRpcError(rmcp::model::ErrorData::invalid_request(
                "go \u{202e}away\n now",
                None,
            )),
            Endpoint::Http(URL),
        );
        assert_eq!(
            refused,
            "http://127.0.0.1:9/mcp refused the MCP handshake: go \\u{202e}away  now"
        );
    }

    #[test]
    fn handshake_and_request_failures_other_than_http() {
        let versions = handshake(
            &ClientInitializeError::NoCompatibleProtocolVersion {
                client_supported: vec![rmcp::model::ProtocolVersion::V_2025_06_18],
                server_supported: vec![],
            },
            Endpoint::Stdio,
        );
        assert_eq!(
            versions,
            "the server speaks none of the MCP protocol versions Tandem does (it offers none; Tandem 2025-06-18)"
        );
        for (error, expected) in [
            (
                handshake(
                    &ClientInitializeError::ExpectedInitResult(None),
                    Endpoint::Stdio,
                ),
                "the server did not answer the MCP handshake with its result",
            ),
            (
                handshake(
                    &ClientInitializeError::ConnectionClosed("initialize response".into()),
                    Endpoint::Stdio,
                ),
                "the server closed the connection before answering the MCP handshake",
            ),
            (
                request(
                    &ServiceError::TransportClosed,
                    "tools/call",
                    Endpoint::Stdio,
                ),
                "the connection to the server closed during tools/call",
            ),
            (
                request(
                    &ServiceError::Timeout {
                        timeout: std::time::Duration::from_secs(3),
                    },
                    "tools/list",
                    Endpoint::Http(URL),
                ),
                "http://127.0.0.1:9/mcp did not answer tools/list within 3.0s",
            ),
            (
                request(
                    &ServiceError::TransportSend(DynamicTransportError::from_parts(
                        "tandem_core::hub::client::stdio::ChildTransport",
                        std::any::TypeId::of::<()>(),
                        Box::new(std::io::Error::from(std::io::ErrorKind::BrokenPipe)),
                    )),
                    "prompts/get",
                    Endpoint::Stdio,
                ),
                "the server closed the connection",
            ),
            (
                request(
                    &ServiceError::UnexpectedResponse,
                    "tools/call",
                    Endpoint::Stdio,
                ),
                "the server answered tools/call with the result of another request",
            ),
        ] {
            assert_plain(&error);
            assert!(error.contains(expected), "{expected:?} not in {error:?}");
        }
    }

    #[test]
    fn type_names_are_taken_out_of_unmapped_messages() {
        assert_eq!(
            plain("Transport [rmcp::transport::worker::WorkerTransport<a::B<c::D>>] error: gone"),
            "Transport error: gone"
        );
        assert_eq!(
            plain("failed: std::io::Error at http://[::1]:8/mcp"),
            "failed: at http://[::1]:8/mcp"
        );
    }

    /// Real failures of the HTTP client (it cannot be built otherwise), on loopback.
    #[tokio::test]
    async fn refused_timed_out_and_tls_connections_are_told_apart() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        // A port nothing listens on: bound, then closed.
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        let url = format!("http://127.0.0.1:{port}/mcp");
        let error = reqwest::Client::new().get(&url).send().await.unwrap_err();
        let message = handshake(
            &wrapped(StreamableHttpError::Client(error)),
            Endpoint::Http(&url),
        );
        assert_eq!(
            message,
            format!("nothing listens at {url}: is the server running?")
        );

        // A listener that accepts and never answers.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", silent.local_addr().unwrap());
        let error = reqwest::Client::builder()
            .timeout(std::time::Duration::from_millis(200))
            .build()
            .unwrap()
            .get(&url)
            .send()
            .await
            .unwrap_err();
        let message = handshake(
            &wrapped(StreamableHttpError::Client(error)),
            Endpoint::Http(&url),
        );
        assert_eq!(
            message,
            format!("{url} did not answer in time: is the host reachable?")
        );

        // TLS spoken to a plain HTTP server.
        let plain_http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = plain_http.local_addr().unwrap();
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            while let Ok((mut s, _)) = plain_http.accept().await {
                let _ = s
                    .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
                    .await;
            }
        });
        let url = format!("https://{addr}/mcp");
        let error = reqwest::Client::builder()
            .tls_backend_rustls()
            .build()
            .unwrap()
            .get(&url)
            .send()
            .await
            .unwrap_err();
        let message = handshake(
            &wrapped(StreamableHttpError::Client(error)),
            Endpoint::Http(&url),
        );
        assert!(
            message.starts_with(&format!(
                "cannot make a secure (TLS) connection to {addr}: "
            )),
            "{message}"
        );
        assert_plain(&message);
        drop(silent);
    }
}
