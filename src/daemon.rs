//! The daemon: one process that owns the data dir and serves many clients over a unix socket
//! inside it (`tandem.sock`, mode 0600, in the 0700 data dir).
//!
//! Protocol: a client connects and sends one line of JSON, the hello:
//! `{"face": "mcp", "workspace": "/abs/root", "client": "tandem mcp", "version": "0.1.0"}`.
//! The daemon answers one line, the [`Welcome`]: `{"ok": true, "version", "pid", "home",
//! "log_file", ...}` or `{"ok": false, "error"}` (a client of another version is refused
//! with an error that begins with [`VERSION_MISMATCH`]). Then, by face:
//!
//! - `mcp`: the connection carries MCP (newline-delimited JSON-RPC) until either side closes
//!   it. The hello must name the session's workspace (an absolute path).
//! - `cli`: the connection carries newline-delimited JSON-RPC 2.0 requests for
//!   [`tandem_core::calls`], answered in order, until the client closes it:
//!   `{"jsonrpc": "2.0", "id": 1, "method": "memory/search", "params": {"query": "cors"}}` →
//!   `{"jsonrpc": "2.0", "id": 1, "result": {...}}`, or an error `{"code", "message",
//!   "data"}` whose `data` is the spec's error object (`{"error": {"code": "ENTRY_NOT_FOUND",
//!   ...}}`) and whose code is `-32601` for an unknown method, `-32603` for an internal error
//!   and `-32602` for every other failure of a call. A line that is not JSON gets `-32700`,
//!   one that is not a request `-32600`; the connection goes on. A request without an `id` is
//!   a notification: it runs, unanswered. The workspace (for `tasks/list`) is optional. This
//!   is how `tandem memory ...` and `tandem tasks ...` reach a running daemon.
//! - `control`: one command (`status`, `stop`, `stop_if_idle`), answered with one line.
//!
//! The daemon exits after an idle time with no client, on `stop`, and on SIGTERM/SIGINT; it
//! then stops accepting, ends the sessions and drops the core (the index commits, sled
//! flushes). Idle, it compacts the data dir's database once the core is closed, when that
//! is worth it (`tandem daemon`, [`tandem_core::store::compact`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::watch;

use crate::mcp::TandemServer;
use crate::mcp::transport::{Line, error_line, read_line};
use tandem_core::calls::{self, CallError};
use tandem_core::core::Core;
use tandem_core::core::LazyCore;

/// The socket's file name in the data dir.
pub const SOCKET: &str = "tandem.sock";
/// How a refused hello of another version begins.
pub const VERSION_MISMATCH: &str = "version mismatch";
/// The longest hello accepted.
const MAX_HELLO: usize = 64 * 1024;
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest request on the `cli` face (an import carries a whole knowledge base).
pub const MAX_CALL_BYTES: usize = 256 * 1024 * 1024;

pub fn socket_path(home: &Path) -> PathBuf {
    home.join(SOCKET)
}

/// Where a daemon that cannot open its data dir writes why (it has no stderr once
/// detached), for the client that started it: `daemon.error` in the data dir, removed by
/// the client before it starts one.
pub fn start_error_path(home: &Path) -> PathBuf {
    home.join("daemon.error")
}

/// What a client says first.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Hello {
    /// `mcp`, `lsp`, `cli` or `control`.
    pub face: String,
    #[serde(default)]
    pub workspace: Option<PathBuf>,
    #[serde(default)]
    pub client: Option<String>,
    pub version: String,
    /// For the `control` face: `status`, `stop` or `stop_if_idle`.
    #[serde(default)]
    pub command: Option<String>,
}

/// The daemon's answer to a hello (and to a control command).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Welcome {
    pub ok: bool,
    #[serde(default)]
    pub error: Option<String>,
    pub version: String,
    pub pid: u32,
    /// Connected sessions (`mcp`, `lsp` and `cli`), this one excluded.
    pub clients: usize,
    #[serde(default)]
    pub stopping: bool,
    #[serde(default)]
    pub uptime_seconds: u64,
    /// The data dir the daemon serves.
    #[serde(default)]
    pub home: Option<PathBuf>,
    /// Where the daemon logs.
    #[serde(default)]
    pub log_file: Option<PathBuf>,
}

/// The daemon's settings.
#[derive(Debug, Clone)]
pub struct DaemonConfig {
    pub home: PathBuf,
    /// Where the daemon logs (shown in its status).
    pub log_file: PathBuf,
    /// Exit after this long with no client; `None`: serve until stopped (`tandem serve`).
    pub idle: Option<Duration>,
}

/// The Streamable HTTP face a daemon serves beside its socket (`tandem serve --http`): the
/// bound listener and its settings.
#[derive(Debug)]
pub struct HttpFace {
    pub listener: std::net::TcpListener,
    pub config: crate::http::HttpConfig,
}

struct State {
    /// Connected `mcp`, `lsp` and `cli` sessions.
    sessions: AtomicUsize,
    /// Set to true to stop the daemon; sessions watch it.
    stop: watch::Sender<bool>,
    started: Instant,
    config: DaemonConfig,
}

impl State {
    fn welcome(&self, ok: bool, error: Option<String>) -> Welcome {
        Welcome {
            ok,
            error,
            version: env!("CARGO_PKG_VERSION").into(),
            pid: std::process::id(),
            clients: self.sessions.load(Ordering::SeqCst),
            stopping: *self.stop.borrow(),
            uptime_seconds: self.started.elapsed().as_secs(),
            home: Some(self.config.home.clone()),
            log_file: Some(self.config.log_file.clone()),
        }
    }

    /// Counts a session until the guard drops.
    fn session(self: &Arc<Self>) -> SessionGuard {
        self.sessions.fetch_add(1, Ordering::SeqCst);
        SessionGuard(self.clone())
    }
}

/// Why a daemon stopped serving.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// No client for the idle time: nobody waits for it, the moment to compact the data
    /// dir ([`tandem_core::store::compact`]).
    Idle,
    /// `stop`, or a signal: someone waits for it to go.
    Stopped,
}

/// Serves until stopped, idle, or signalled, with the HTTP face too when `http` is given.
/// `core` is opened first: a data dir held by another process is an error before any socket
/// is touched.
pub async fn run(
    config: DaemonConfig,
    core: Core,
    http: Option<HttpFace>,
) -> std::io::Result<Exit> {
    let core = LazyCore::ready(Arc::new(core));
    let path = socket_path(&config.home);
    // We hold the data dir's lock, so a socket file left here is stale.
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    }
    tracing::info!(
        "daemon {} listening on {}",
        std::process::id(),
        path.display()
    );
    let (stop_tx, mut stop_rx) = watch::channel(false);
    let idle = config.idle;
    let state = Arc::new(State {
        sessions: AtomicUsize::new(0),
        stop: stop_tx,
        started: Instant::now(),
        config,
    });
    let http = match http {
        Some(face) => {
            face.listener.set_nonblocking(true)?;
            let listener = tokio::net::TcpListener::from_std(face.listener)?;
            let (home, core, stop) = (
                state.config.home.clone(),
                core.clone(),
                state.stop.subscribe(),
            );
            Some(tokio::spawn(async move {
                let served =
                    crate::http::serve(listener, face.config, &home, core, stopped(stop)).await;
                if let Err(e) = served {
                    tracing::error!("the HTTP face stopped: {e}");
                }
            }))
        }
        None => None,
    };
    /// How long the memory's vectors go unread, clients connected, before the daemon
    /// gives back the pages searches read ([`tandem_core::memory::Memory::release_idle_pages`]).
    const PAGES_QUIET: Duration = Duration::from_secs(30);
    let mut idle_since = Some(Instant::now());
    let signal = shutdown_signal();
    tokio::pin!(signal);
    let exit = loop {
        let idle_left = idle_since
            .zip(idle)
            .map(|(t, idle)| idle.saturating_sub(t.elapsed()));
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let (core, state) = (core.clone(), state.clone());
                tokio::spawn(async move {
                    if let Err(e) = serve_connection(stream, core, state).await {
                        tracing::warn!("daemon connection ended with an error: {e}");
                    }
                });
            }
            _ = stop_rx.changed() => {
                tracing::info!("daemon stop requested");
                break Exit::Stopped;
            }
            _ = &mut signal => {
                tracing::info!("daemon signalled; stopping");
                break Exit::Stopped;
            }
            _ = tokio::time::sleep(idle_left.unwrap_or(Duration::from_secs(3600))), if idle_left.is_some() => {
                if state.sessions.load(Ordering::SeqCst) == 0 {
                    tracing::info!("daemon idle for {:?}; exiting", idle.unwrap_or_default());
                    break Exit::Idle;
                }
            }
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
        let sessions = state.sessions.load(Ordering::SeqCst);
        idle_since = match (sessions, idle_since) {
            (0, None) => Some(Instant::now()),
            (0, Some(t)) => Some(t),
            _ => None,
        };
        // The pages of the vectors' base that searches read go back to the page cache
        // once no client is left, or after a quiet spell while clients stay.
        if let Some(core) = core.opened() {
            let quiet = if sessions == 0 {
                Duration::ZERO
            } else {
                PAGES_QUIET
            };
            core.memory.release_idle_pages(quiet);
        }
    };
    let _ = state.stop.send(true);
    drop(listener);
    if let Some(http) = http {
        let _ = http.await;
    }
    let _ = std::fs::remove_file(&path);
    // Give sessions a moment to see the stop and close; in-flight writes finish in sled.
    let deadline = Instant::now() + Duration::from_secs(2);
    while state.sessions.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Downstream servers stop with the daemon (their children are killed on the runtime).
    if let Some(core) = core.opened() {
        core.hub.shutdown();
    }
    Ok(exit)
}

/// What a connection asked for in its hello, checked: the session faces work in a
/// workspace, an absolute root (the `cli` face may omit it).
enum Face {
    Control { command: String },
    Mcp { workspace: PathBuf },
    Lsp { workspace: PathBuf },
    Cli { workspace: Option<PathBuf> },
}

impl Face {
    fn of(hello: &Hello) -> Result<Face, String> {
        let workspace = match &hello.workspace {
            Some(w) if !w.is_absolute() => {
                return Err("the workspace must be an absolute path".into());
            }
            w => w.clone(),
        };
        let session_root = |face: &str| {
            workspace
                .clone()
                .ok_or_else(|| format!("the {face} face needs a workspace"))
        };
        Ok(match hello.face.as_str() {
            "control" => Face::Control {
                command: hello.command.clone().unwrap_or_else(|| "status".into()),
            },
            "mcp" => Face::Mcp {
                workspace: session_root("mcp")?,
            },
            "lsp" => Face::Lsp {
                workspace: session_root("lsp")?,
            },
            "cli" => Face::Cli { workspace },
            other => return Err(format!("unknown face '{other}'")),
        })
    }
}

type ReadHalf = BufReader<tokio::net::unix::OwnedReadHalf>;
type WriteHalf = tokio::net::unix::OwnedWriteHalf;

async fn serve_connection(
    stream: UnixStream,
    core: Arc<LazyCore>,
    state: Arc<State>,
) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    let hello = match tokio::time::timeout(HELLO_TIMEOUT, read_hello(&mut read)).await {
        Ok(Ok(h)) => h,
        Ok(Err(e)) => return reply(&mut write, &state.welcome(false, Some(e))).await,
        Err(_) => {
            let error = "no hello within 10 s".to_string();
            return reply(&mut write, &state.welcome(false, Some(error))).await;
        }
    };
    let face = match Face::of(&hello) {
        Ok(face) => face,
        Err(error) => return reply(&mut write, &state.welcome(false, Some(error))).await,
    };
    let client = hello.client.as_deref().unwrap_or("unknown client");
    match face {
        Face::Control { command } => serve_control(&state, &command, write).await,
        Face::Mcp { workspace } => {
            reply(&mut write, &state.welcome(true, None)).await?;
            let _session = state.session();
            tracing::info!("mcp session for {} ({client})", workspace.display());
            serve_mcp(core, workspace, &state, read, write).await;
            Ok(())
        }
        Face::Lsp { workspace } => {
            reply(&mut write, &state.welcome(true, None)).await?;
            let _session = state.session();
            tracing::info!("lsp session for {} ({client})", workspace.display());
            let host = crate::lsp::Host {
                log_file: state.config.log_file.clone(),
                home: state.config.home.clone(),
                daemon: true,
            };
            tokio::select! {
                _ = crate::lsp::serve(core, host, workspace, after_hello(read), write) => {}
                _ = stopped(state.stop.subscribe()) => {}
            }
            Ok(())
        }
        Face::Cli { workspace } => {
            let core = match core.get().await {
                Ok(core) => core,
                Err(e) => {
                    return reply(&mut write, &state.welcome(false, Some(e.to_string()))).await;
                }
            };
            reply(&mut write, &state.welcome(true, None)).await?;
            let _session = state.session();
            tracing::debug!("cli session ({client})");
            let handler: CallHandler = Arc::new(move |method: &str, params: Value| {
                calls::call(&core, workspace.as_deref(), method, params)
            });
            serve_calls(read, write, handler, state.stop.subscribe()).await
        }
    }
}

/// The `control` face: one command, answered with one welcome line.
async fn serve_control(state: &State, command: &str, mut write: WriteHalf) -> std::io::Result<()> {
    let welcome = match command {
        "status" => state.welcome(true, None),
        "stop" => {
            let _ = state.stop.send(true);
            state.welcome(true, None)
        }
        "stop_if_idle" if state.sessions.load(Ordering::SeqCst) == 0 => {
            let _ = state.stop.send(true);
            state.welcome(true, None)
        }
        "stop_if_idle" => state.welcome(false, Some("other clients are connected".into())),
        other => state.welcome(false, Some(format!("unknown command '{other}'"))),
    };
    reply(&mut write, &welcome).await
}

/// The `mcp` face: an MCP session on the shared core until either side closes it or the
/// daemon stops.
async fn serve_mcp(
    core: Arc<LazyCore>,
    workspace: PathBuf,
    state: &State,
    read: ReadHalf,
    write: WriteHalf,
) {
    let io = crate::mcp::transport::framed(after_hello(read), write);
    let service = match rmcp::ServiceExt::serve(TandemServer::new(core, workspace), io).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("mcp session failed to start: {e}");
            return;
        }
    };
    let cancel = service.cancellation_token();
    let stop = state.stop.subscribe();
    tokio::spawn(async move {
        stopped(stop).await;
        cancel.cancel();
    });
    let _ = service.waiting().await;
}

/// The connection's input after the hello line, starting with what the hello reader had
/// already buffered past it.
fn after_hello<R: tokio::io::AsyncRead + Unpin>(
    read: BufReader<R>,
) -> impl tokio::io::AsyncRead + Unpin {
    let buffered = read.buffer().to_vec();
    std::io::Cursor::new(buffered).chain(read.into_inner())
}

/// Resolves once the daemon is stopping.
async fn stopped(mut stop: watch::Receiver<bool>) {
    if !*stop.borrow() {
        let _ = stop.changed().await;
    }
}

/// What answers the `cli` face's requests: a method name and its params in, a result out.
pub type CallHandler = Arc<dyn Fn(&str, Value) -> Result<Value, CallError> + Send + Sync>;

/// Serves the `cli` face: newline-delimited JSON-RPC 2.0 requests on `input`, each run by
/// `handler` on the blocking pool (a panic answers `-32603`) and answered in order on
/// `output`. Ends when `input` closes or `stop` turns true.
pub async fn serve_calls<R, W>(
    input: BufReader<R>,
    mut output: W,
    handler: CallHandler,
    mut stop: watch::Receiver<bool>,
) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut input = input;
    loop {
        if *stop.borrow() {
            return Ok(());
        }
        let line = tokio::select! {
            line = read_line(&mut input, MAX_CALL_BYTES) => line,
            _ = stop.changed() => return Ok(()),
        };
        let answer = match line {
            Line::Eof => return Ok(()),
            Line::TooLong => Some(error_line(
                -32600,
                &format!("Invalid request: message larger than {MAX_CALL_BYTES} bytes"),
            )),
            Line::Message(line) if line.iter().all(u8::is_ascii_whitespace) => None,
            Line::Message(line) => answer_call(&line, &handler).await,
        };
        if let Some(answer) = answer {
            output.write_all(&answer).await?;
            output.flush().await?;
        }
    }
}

/// Runs one request line; its answer, or `None` for a notification.
async fn answer_call(line: &[u8], handler: &CallHandler) -> Option<Vec<u8>> {
    let request: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => return Some(error_line(-32700, &format!("Parse error: {e}"))),
    };
    let id = request.get("id").cloned();
    let method = request.get("method").and_then(Value::as_str);
    let (Some(method), Some("2.0")) = (method, request.get("jsonrpc").and_then(Value::as_str))
    else {
        let message =
            "Invalid request: a JSON-RPC 2.0 request has \"jsonrpc\": \"2.0\" and a \"method\"";
        return Some(response(
            id.unwrap_or(Value::Null),
            Err((-32600, message.into(), None)),
        ));
    };
    let params = request.get("params").cloned().unwrap_or(Value::Null);
    let (handler, name) = (handler.clone(), method.to_string());
    let what = format!("call {method}");
    let result = calls::spawn_call(&what, move || handler(&name, params)).await;
    let id = id?;
    Some(response(
        id,
        result.map_err(|e| {
            let code = match e.code() {
                calls::UNKNOWN_METHOD => -32601,
                "INTERNAL_ERROR" => -32603,
                _ => -32602,
            };
            (code, e.message().to_string(), Some(e.to_json()))
        }),
    ))
}

fn response(id: Value, result: Result<Value, (i64, String, Option<Value>)>) -> Vec<u8> {
    let body = match result {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err((code, message, data)) => {
            let mut error = json!({"code": code, "message": message});
            if let Some(data) = data {
                error["data"] = data;
            }
            json!({"jsonrpc": "2.0", "id": id, "error": error})
        }
    };
    let mut line = serde_json::to_vec(&body).expect("a JSON value serialises");
    line.push(b'\n');
    line
}

struct SessionGuard(Arc<State>);

impl Drop for SessionGuard {
    fn drop(&mut self) {
        self.0.sessions.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn read_hello<R: tokio::io::AsyncBufRead + Unpin>(read: &mut R) -> Result<Hello, String> {
    let mut line = Vec::new();
    let n = (&mut *read)
        .take(MAX_HELLO as u64)
        .read_until(b'\n', &mut line)
        .await
        .map_err(|e| e.to_string())?;
    if n == 0 {
        return Err("closed before the hello".into());
    }
    let hello: Hello = serde_json::from_slice(&line).map_err(|e| format!("bad hello: {e}"))?;
    // Control commands work across versions: they are how a newer client replaces a daemon.
    if hello.face != "control" && hello.version != env!("CARGO_PKG_VERSION") {
        return Err(format!(
            "{VERSION_MISMATCH}: client {}, daemon {}",
            hello.version,
            env!("CARGO_PKG_VERSION")
        ));
    }
    Ok(hello)
}

async fn reply<W: tokio::io::AsyncWrite + Unpin>(
    write: &mut W,
    welcome: &Welcome,
) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(welcome).expect("plain data");
    line.push(b'\n');
    write.write_all(&line).await?;
    write.flush().await
}

/// Resolves on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

// ---- the client side -------------------------------------------------------------------

/// Connects to the daemon of `home`, sends `hello` and returns the stream ready for the
/// face, with the daemon's welcome. Errors when no daemon listens.
pub async fn connect(home: &Path, hello: &Hello) -> std::io::Result<(UnixStream, Welcome)> {
    let mut stream = UnixStream::connect(socket_path(home)).await?;
    let mut line = serde_json::to_vec(hello).expect("plain data");
    line.push(b'\n');
    stream.write_all(&line).await?;
    // Read the welcome byte by byte so nothing after it is consumed.
    let mut reply = Vec::new();
    loop {
        let mut byte = [0u8; 1];
        let n = tokio::time::timeout(HELLO_TIMEOUT, stream.read(&mut byte))
            .await
            .map_err(|_| std::io::Error::other("the daemon did not answer the hello"))??;
        if n == 0 {
            return Err(std::io::Error::other("the daemon closed the connection"));
        }
        if byte[0] == b'\n' {
            break;
        }
        reply.push(byte[0]);
        if reply.len() > MAX_HELLO {
            return Err(std::io::Error::other("the daemon's answer is too long"));
        }
    }
    let welcome: Welcome = serde_json::from_slice(&reply).map_err(std::io::Error::other)?;
    Ok((stream, welcome))
}

/// A hello for this binary.
pub fn hello(face: &str, workspace: Option<PathBuf>, command: Option<&str>) -> Hello {
    Hello {
        face: face.into(),
        workspace,
        client: Some(format!("tandem {face} {}", std::process::id())),
        version: env!("CARGO_PKG_VERSION").into(),
        command: command.map(str::to_string),
    }
}
