//! The stdio connection to a downstream server's process: Tandem's own transport, so that
//! what a misbehaving process writes is bounded before rmcp sees it.
//!
//! - The process runs in a process group of its own, and the whole group is killed
//!   (`SIGKILL`) when the connection ends or is dropped, then reaped: a server started
//!   through `npx`, `uvx` or a shell leaves no orphan behind, and no zombie.
//! - Its stdout is framed into lines here, each parsed as one JSON-RPC message. A line
//!   longer than [`MAX_LINE_BYTES`] is refused as soon as that many bytes came without a
//!   newline (never buffered whole), and [`MAX_BAD_LINES`] lines in a row that are not
//!   JSON-RPC messages (a banner now and then is tolerated; `yes` is not) end the
//!   connection too. Either way the connection's owner is told why ([`Fault`]) before rmcp
//!   sees the stream end; an exit is reported with the process's exit status.
//! - Its stderr is read in chunks by [`read_stderr`], at most [`STDERR_BYTES_PER_SEC`] (a
//!   process writing faster waits on its pipe), lines cut at [`STDERR_LINE_CHARS`], and at
//!   most [`STDERR_LOGGED_PER_SEC`] lines a second logged.

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use process_wrap::tokio::{ChildWrapper, CommandWrap, ProcessGroup};
use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{ChildStderr, ChildStdin, ChildStdout};

use crate::log_rate::LogBudget;

/// The longest line (one JSON-RPC message) a server may write on stdout: 16 MiB, as rmcp's
/// HTTP client allows for one event.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;
/// How many lines in a row that are not JSON-RPC messages end the connection.
pub const MAX_BAD_LINES: usize = 100;
/// How fast a server's stderr is read; a process writing faster is slowed down by its pipe.
pub const STDERR_BYTES_PER_SEC: usize = 256 * 1024;
/// How many lines of a server's stderr are logged a second (the rest are counted).
pub const STDERR_LOGGED_PER_SEC: u32 = 50;
/// Where a stderr line is cut, for the log and for error messages.
pub const STDERR_LINE_CHARS: usize = 500;
/// How much of a bad line an error message quotes.
const SAMPLE_CHARS: usize = 60;
/// How long a process has to exit after its stdin closed before its group is killed.
const EXIT_GRACE: Duration = Duration::from_secs(1);
/// How long an exit status is waited for once stdout closed.
const EXIT_STATUS_WAIT: Duration = Duration::from_millis(500);
const READ_CHUNK: usize = 64 * 1024;

/// Why a connection ended on the server's side.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Fault {
    #[error(
        "it wrote {lines} lines in a row on stdout that are not JSON-RPC messages (the first: {sample:?}); stdout is for MCP messages only, so its connection was closed"
    )]
    BadLines { lines: usize, sample: String },
    #[error(
        "it wrote a message of more than {} MiB on stdout (the limit of one message), so its connection was closed",
        MAX_LINE_BYTES / (1024 * 1024)
    )]
    Oversized,
    #[error("it exited ({0})")]
    Exited(String),
    #[error("it closed its stdout")]
    Closed,
    #[error("reading its stdout failed: {0}")]
    Read(String),
}

impl Fault {
    /// Whether starting the server again may help: not for a process that does not speak
    /// MCP on stdout at all.
    pub fn retry(&self) -> bool {
        !matches!(self, Fault::BadLines { .. })
    }
}

/// Told once, with the reason, when the server ends the connection.
pub type OnFault = Box<dyn Fn(Fault) + Send + Sync>;

/// A running server process as an rmcp transport.
pub struct ChildTransport {
    /// `None` once reaped.
    child: Option<Box<dyn ChildWrapper>>,
    stdout: ChildStdout,
    stdin: Arc<tokio::sync::Mutex<Option<ChildStdin>>>,
    /// Bytes read and not yet framed.
    buf: BytesMut,
    /// How much of `buf` is known to hold no newline.
    scanned: usize,
    /// Bad lines in a row, and the first of them (cut).
    bad: usize,
    sample: String,
    on_fault: Option<OnFault>,
}

/// Starts `cmd` in a process group of its own, stdin and stdout piped to the transport;
/// its stderr is returned to be read ([`read_stderr`]).
pub fn spawn(
    cmd: tokio::process::Command,
    on_fault: OnFault,
) -> std::io::Result<(ChildTransport, ChildStderr)> {
    let mut cmd = CommandWrap::from(cmd);
    cmd.command_mut()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd.wrap(ProcessGroup::leader());
    let mut child = cmd.spawn()?;
    let missing = || std::io::Error::other("a standard stream of the child is not piped");
    let stdin = child.stdin().take().ok_or_else(missing)?;
    let stdout = child.stdout().take().ok_or_else(missing)?;
    let stderr = child.stderr().take().ok_or_else(missing)?;
    let transport = ChildTransport {
        child: Some(child),
        stdout,
        stdin: Arc::new(tokio::sync::Mutex::new(Some(stdin))),
        buf: BytesMut::new(),
        scanned: 0,
        bad: 0,
        sample: String::new(),
        on_fault: Some(on_fault),
    };
    Ok((transport, stderr))
}

/// What one framed line is.
enum Line {
    Message(Box<RxJsonRpcMessage<RoleClient>>),
    Bad,
}

impl ChildTransport {
    /// The next line in the buffer, parsed; `None` when no whole line is there yet.
    fn next_line(&mut self) -> Result<Option<Line>, Fault> {
        let Some(at) = self.buf[self.scanned..].iter().position(|&b| b == b'\n') else {
            if self.buf.len() > MAX_LINE_BYTES {
                return Err(Fault::Oversized);
            }
            self.scanned = self.buf.len();
            return Ok(None);
        };
        let end = self.scanned + at;
        self.scanned = 0;
        if end > MAX_LINE_BYTES {
            return Err(Fault::Oversized);
        }
        let line = self.buf.split_to(end + 1);
        let text = trim_line(&line);
        match serde_json::from_slice(text) {
            Ok(message) => Ok(Some(Line::Message(Box::new(message)))),
            Err(e) => {
                tracing::debug!("not a JSON-RPC message from a downstream server: {e}");
                if self.bad == 0 {
                    self.sample = cut(&String::from_utf8_lossy(text), SAMPLE_CHARS);
                }
                Ok(Some(Line::Bad))
            }
        }
    }

    /// The next message, or the fault that ends the connection.
    async fn next_message(&mut self) -> Result<RxJsonRpcMessage<RoleClient>, Fault> {
        loop {
            match self.next_line()? {
                Some(Line::Message(m)) => {
                    self.bad = 0;
                    return Ok(*m);
                }
                Some(Line::Bad) => {
                    self.bad += 1;
                    if self.bad >= MAX_BAD_LINES {
                        return Err(Fault::BadLines {
                            lines: self.bad,
                            sample: std::mem::take(&mut self.sample),
                        });
                    }
                    continue;
                }
                None => {}
            }
            self.buf.reserve(READ_CHUNK);
            match self.stdout.read_buf(&mut self.buf).await {
                Ok(0) => return Err(self.exited().await),
                Ok(_) => {}
                Err(e) => return Err(Fault::Read(e.to_string())),
            }
        }
    }

    /// Why stdout closed: the process's exit status if it comes soon.
    async fn exited(&mut self) -> Fault {
        let Some(child) = self.child.as_mut() else {
            return Fault::Closed;
        };
        match tokio::time::timeout(EXIT_STATUS_WAIT, child.wait()).await {
            Ok(Ok(status)) => {
                // What it may have left running goes with it.
                let _ = child.start_kill();
                self.child = None;
                Fault::Exited(status.to_string())
            }
            _ => Fault::Closed,
        }
    }
}

/// A line without its `\n`, a `\r` before it, and a UTF-8 byte order mark.
fn trim_line(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line)
}

/// `text` cut to `max` characters (an ellipsis marks the cut).
pub fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

impl rmcp::transport::Transport<RoleClient> for ChildTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let stdin = self.stdin.clone();
        async move {
            let mut line = serde_json::to_vec(&item)?;
            line.push(b'\n');
            let mut stdin = stdin.lock().await;
            let Some(stdin) = stdin.as_mut() else {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::NotConnected,
                    "the server's stdin is closed",
                ));
            };
            stdin.write_all(&line).await?;
            stdin.flush().await
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        // Cancellation-safe: bytes read stay in `buf`, and a fault is told once.
        self.on_fault.as_ref()?;
        match self.next_message().await {
            Ok(message) => Some(message),
            Err(fault) => {
                if let Some(tell) = self.on_fault.take() {
                    tell(fault);
                }
                None
            }
        }
    }

    /// Closes its stdin (the MCP way to end a stdio session), gives it [`EXIT_GRACE`] to
    /// exit, then kills its group and reaps it.
    async fn close(&mut self) -> Result<(), Self::Error> {
        self.on_fault = None;
        drop(self.stdin.lock().await.take());
        // The child stays in `self` until reaped: if this is dropped halfway, `drop` kills.
        if let Some(child) = self.child.as_mut() {
            let _ = tokio::time::timeout(EXIT_GRACE, child.wait()).await;
            let _ = child.start_kill();
            let _ = child.wait().await;
            self.child = None;
        }
        Ok(())
    }
}

impl Drop for ChildTransport {
    /// Kills the group at once (even with no runtime left: the daemon exiting), and reaps
    /// the process on the runtime when there is one.
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = child.start_kill();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = child.wait().await;
            });
        }
    }
}

/// Reads a server's stderr to its end: each line (cut at [`STDERR_LINE_CHARS`], then passed
/// through `redact`) goes to `line`, at most [`STDERR_BYTES_PER_SEC`] read; at most
/// [`STDERR_LOGGED_PER_SEC`] lines a second are logged under `name`.
pub async fn read_stderr(
    mut stderr: impl AsyncRead + Unpin,
    name: &str,
    redact: impl Fn(&str) -> String,
    mut line: impl FnMut(String),
) {
    let mut buf = BytesMut::new();
    let mut window = Window::new();
    let logged = LogBudget::new(STDERR_LOGGED_PER_SEC);
    let not_logged = |n: u64| {
        tracing::info!(target: "tandem::downstream", "{name}: {n} lines of stderr not logged");
    };
    loop {
        buf.reserve(READ_CHUNK);
        let read = match stderr.read_buf(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        while let Some(at) = buf.iter().position(|&b| b == b'\n') {
            let raw = buf.split_to(at + 1);
            let text = String::from_utf8_lossy(trim_line(&raw));
            let text = cut(&redact(text.trim_end()), STDERR_LINE_CHARS);
            if logged.allow() {
                tracing::info!(target: "tandem::downstream", "{name}: {text}");
            }
            if let Some(n) = logged.suppressed() {
                not_logged(n);
            }
            line(text);
        }
        if buf.len() > STDERR_LINE_CHARS * 4 {
            // A line past any use: keep its start, drop the rest as it comes.
            line(cut(
                &redact(&String::from_utf8_lossy(&buf)),
                STDERR_LINE_CHARS,
            ));
            buf.clear();
        }
        window.read(read).await;
    }
    if let Some(n) = logged.flush() {
        not_logged(n);
    }
}

/// The stderr bytes read in the current second.
struct Window {
    start: Instant,
    bytes: usize,
}

impl Window {
    fn new() -> Window {
        Window {
            start: Instant::now(),
            bytes: 0,
        }
    }

    /// Starts the next second when this one is over.
    fn roll(&mut self) {
        if self.start.elapsed() >= Duration::from_secs(1) {
            *self = Window::new();
        }
    }

    /// Counts `n` bytes read; past the second's budget, waits for the next second.
    async fn read(&mut self, n: usize) {
        self.roll();
        self.bytes += n;
        if self.bytes >= STDERR_BYTES_PER_SEC {
            tokio::time::sleep(Duration::from_secs(1).saturating_sub(self.start.elapsed())).await;
            self.roll();
        }
    }
}
