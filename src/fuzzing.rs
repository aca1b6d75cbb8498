//! Entry points for the fuzz targets (`fuzz/`, cargo-fuzz on nightly) and for the regression
//! tests that replay their inputs on stable (`tests/it/fuzz_regressions.rs`): one function
//! per target, bytes in, a panic when something is wrong. Not part of the product's API.
//!
//! The pure targets ([`command`], [`scan`]) need nothing; the others run on a [`Harness`]: a
//! core opened in a data dir of its own, a workspace beside it, and a runtime. Each target
//! checks what its code promises, beyond "no panic":
//!
//! - [`mcp`]: the stdio framing splits the input into the lines it holds, each whole or
//!   refused as over-long; the whole MCP face (framing, rmcp, the tools) only ever writes
//!   JSON-RPC lines.
//! - [`lsp`]: the LSP face (tower-lsp's Content-Length framing, `initialize`, the handlers:
//!   the input is sent frame by frame, each request answered before the next frame) only
//!   ever writes well-framed JSON-RPC messages, and its session ends when the editor hangs up.
//! - [`command`]: a parsed `/server:prompt` line prints back ([`PromptCommand`]'s `Display`)
//!   to a line that parses to the same command; a quoted value reads back unchanged.
//! - [`scan`]: an object's members are valid JSON, and written back they make the same object.
//! - [`config`]: the config loader, the user file's editors (which never turn a valid file
//!   invalid) and the tokens file reader take any text.
//! - [`calls`]: every method of [`tandem_core::calls`], with JSON built from its parameters' schema,
//!   answers a result or the spec's error object, never an `INTERNAL_ERROR`.
//!
//! [`PromptCommand`]: tandem_core::hub::prompts::command::PromptCommand

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};

use crate::mcp::transport::{self, Line};
use tandem_core::calls::{self, CallError, Session};
use tandem_core::core::{Core, LazyCore};
use tandem_core::hub::prompts::command;
use tandem_core::hub::{config as hub_config, scan as json_scan};

/// How long one input may run a face before it counts as a hang.
const SESSION_LIMIT: Duration = Duration::from_secs(30);

/// A core in a data dir of its own, a workspace, and a runtime: what the targets that reach
/// the core share across inputs.
pub struct Harness {
    core: Arc<Core>,
    home: PathBuf,
    workspace: PathBuf,
    runtime: tokio::runtime::Runtime,
}

impl Harness {
    /// Opens a core in `dir/home` (created), with `dir/workspace` as the sessions' workspace.
    pub fn open(dir: &Path) -> Harness {
        let home = dir.join("home");
        let workspace = dir.join("workspace");
        std::fs::create_dir_all(&workspace).expect("a workspace dir");
        let workspace = workspace.canonicalize().expect("a canonical workspace");
        let core = Core::open(&home, &tandem_core::memory::NoProgress).expect("the core opens");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        Harness {
            core: Arc::new(core),
            home,
            workspace,
            runtime,
        }
    }

    /// [`Harness::open`] in a new dir under the system's temporary dir (a fuzz run's: the
    /// process ends without cleaning up, so `scripts/fuzz` gives it a `TMPDIR` it removes).
    pub fn in_temp_dir() -> Harness {
        let dir = std::env::temp_dir().join(format!("tandem-fuzz-{}", std::process::id()));
        Harness::open(&dir)
    }

    /// Runs `session` on the runtime; a session that outlives [`SESSION_LIMIT`] is a hang.
    fn run<F: std::future::Future>(&self, what: &str, session: F) -> F::Output {
        let _enter = self.runtime.enter();
        self.runtime
            .block_on(tokio::time::timeout(SESSION_LIMIT, session))
            .unwrap_or_else(|_| panic!("{what} still running after {SESSION_LIMIT:?}"))
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.core.hub.shutdown();
    }
}

// ---- the MCP face ---------------------------------------------------------------------

/// The MCP stdio face: first the line framing alone, with a small line limit (so that
/// over-long lines are reached), then a whole session (framing, rmcp, Tandem's tools) on the
/// harness's core with `data` as the client's input. Answers what the face wrote.
pub fn mcp(harness: &Harness, data: &[u8]) -> Vec<u8> {
    harness.run("line framing", check_lines(data));
    let output = harness.run("MCP session", mcp_session(harness, data.to_vec()));
    for line in output.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let message: Value = serde_json::from_slice(line)
            .unwrap_or_else(|e| panic!("MCP face wrote a line that is not JSON ({e}): {line:?}"));
        assert_eq!(message["jsonrpc"], "2.0", "not JSON-RPC: {message}");
    }
    output
}

/// The framing's reader takes `data` apart into exactly its lines: each one whole (at most
/// the limit, plus its newline) or refused as over-long.
async fn check_lines(data: &[u8]) {
    const MAX: usize = 32;
    let mut input = BufReader::new(data);
    let (mut whole, mut too_long) = (0, 0);
    loop {
        match transport::read_line(&mut input, MAX).await {
            Line::Eof => break,
            Line::Message(line) => {
                assert!(line.len() <= MAX + 1, "a line over the limit passed");
                let newlines = line.iter().filter(|&&b| b == b'\n').count();
                assert!(
                    newlines == usize::from(line.ends_with(b"\n")),
                    "not one line"
                );
                whole += 1;
            }
            Line::TooLong => too_long += 1,
        }
    }
    let lines = match data {
        [] => 0,
        _ => data.split(|&b| b == b'\n').count() - usize::from(data.ends_with(b"\n")),
    };
    assert_eq!(whole + too_long, lines, "lines lost or made up");
}

/// One MCP session reading `input`; what it wrote.
async fn mcp_session(harness: &Harness, input: Vec<u8>) -> Vec<u8> {
    let (output, mut written) = tokio::io::duplex(1 << 16);
    let io = transport::framed(std::io::Cursor::new(input), output);
    let server = crate::mcp::TandemServer::new(
        LazyCore::ready(harness.core.clone()),
        harness.workspace.clone(),
    );
    let session = async move {
        // A session that never gets through `initialize` ends with an error: fine.
        if let Ok(service) = rmcp::ServiceExt::serve(server, io).await {
            let _ = service.waiting().await;
        }
    };
    let mut out = Vec::new();
    let read = written.read_to_end(&mut out);
    let (_, read) = tokio::join!(session, read);
    read.expect("reading the face's output");
    out
}

// ---- the LSP face ---------------------------------------------------------------------

/// The LSP face: a session on the harness's core reading `data`, which is sent as it is
/// when it starts with a `Content-Length` header, else taken as JSON messages one a line,
/// each framed here (so that mutations reach the handlers, not only the framing). Answers
/// what the face wrote.
pub fn lsp(harness: &Harness, data: &[u8]) -> Vec<u8> {
    let input = if data.starts_with(b"Content-Length") {
        data.to_vec()
    } else {
        data.split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .flat_map(|l| {
                [
                    format!("Content-Length: {}\r\n\r\n", l.len()).into_bytes(),
                    l.to_vec(),
                ]
            })
            .flatten()
            .collect()
    };
    let output = harness.run("LSP session", lsp_session(harness, input));
    check_lsp_output(&output);
    output
}

/// One LSP session reading `input`; what it wrote. The input is sent frame by frame as an
/// editor sends it: after a request (a frame that parses as one, with an id), the next
/// frame waits for its answer, and the face's own requests are answered (`null`). So
/// requests reach their handlers, instead of racing `initialize` or being cancelled by an
/// `exit` that came before their answer.
async fn lsp_session(harness: &Harness, input: Vec<u8>) -> Vec<u8> {
    let (output, written) = tokio::io::duplex(1 << 16);
    let (feed, input_side) = tokio::io::duplex(1 << 16);
    let host = crate::lsp::Host {
        home: harness.home.clone(),
        log_file: harness.home.join("tandem.log"),
        daemon: false,
    };
    let session = crate::lsp::serve(
        LazyCore::ready(harness.core.clone()),
        host,
        harness.workspace.clone(),
        input_side,
        output,
    );
    let mut editor = Editor {
        feed: Some(feed),
        written,
        out: Vec::new(),
        parsed: 0,
        answered: Vec::new(),
    };
    let drive = async move {
        for frame in lsp_frames(&input) {
            if !editor.send(frame).await {
                break;
            }
            if let Some(id) = request_id(frame) {
                editor.wait_for_answer(&id).await;
            }
        }
        // Hanging up ends the session; what it still writes is read to the end.
        editor.feed = None;
        let mut rest = Vec::new();
        editor
            .written
            .read_to_end(&mut rest)
            .await
            .expect("reading the face's output");
        editor.out.extend_from_slice(&rest);
        editor.out
    };
    tokio::join!(session, drive).1
}

/// The editor's side of an LSP session in [`lsp_session`].
struct Editor {
    /// The face's input; `None` once hung up.
    feed: Option<tokio::io::DuplexStream>,
    /// The face's output, all of it kept in `out`; whole frames up to `parsed` were read.
    written: tokio::io::DuplexStream,
    out: Vec<u8>,
    parsed: usize,
    /// The ids of the answers seen.
    answered: Vec<Value>,
}

impl Editor {
    /// Sends bytes to the face; false once it stopped reading.
    async fn send(&mut self, bytes: &[u8]) -> bool {
        match &mut self.feed {
            Some(feed) => feed.write_all(bytes).await.is_ok(),
            None => false,
        }
    }

    /// Reads the face's output until it answers `id` or ends, answering its requests.
    async fn wait_for_answer(&mut self, id: &Value) {
        let mut chunk = [0u8; 4096];
        while !self.answered.contains(id) {
            match self.written.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => self.out.extend_from_slice(&chunk[..n]),
            }
            while let Some((message, len)) = next_frame(&self.out[self.parsed..]) {
                self.parsed += len;
                match (message.get("method"), message.get("id")) {
                    (Some(_), Some(request)) => {
                        let answer = json!({ "jsonrpc": "2.0", "id": request, "result": null });
                        let text = answer.to_string();
                        let framed = format!("Content-Length: {}\r\n\r\n{text}", text.len());
                        self.send(framed.as_bytes()).await;
                    }
                    (None, Some(answered)) => self.answered.push(answered.clone()),
                    _ => {}
                }
            }
        }
    }
}

/// The input's frames: each `Content-Length` frame whole, then whatever follows the last
/// (a broken header, a short body) as one piece.
fn lsp_frames(mut input: &[u8]) -> Vec<&[u8]> {
    let mut frames = Vec::new();
    while !input.is_empty() {
        let len = frame_bounds(input).map_or(input.len(), |(_, end)| end.min(input.len()));
        let (frame, rest) = input.split_at(len);
        frames.push(frame);
        input = rest;
    }
    frames
}

/// Where the body of the `Content-Length` frame `bytes` starts with begins, and where the
/// frame ends (maybe past `bytes`), when its header is whole and gives its length.
fn frame_bounds(bytes: &[u8]) -> Option<(usize, usize)> {
    let body = bytes.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let length = content_length(std::str::from_utf8(&bytes[..body - 4]).ok()?)?;
    Some((body, body.checked_add(length)?))
}

/// The length a frame's header gives.
fn content_length(header: &str) -> Option<usize> {
    header
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))?
        .trim()
        .parse()
        .ok()
}

/// The JSON message of the whole frame `bytes` starts with, and the frame's length.
fn next_frame(bytes: &[u8]) -> Option<(Value, usize)> {
    let (body, end) = frame_bounds(bytes).filter(|&(_, end)| end <= bytes.len())?;
    let message = serde_json::from_slice(&bytes[body..end]).unwrap_or(Value::Null);
    Some((message, end))
}

/// The id of the request a frame holds, when it holds one.
fn request_id(frame: &[u8]) -> Option<Value> {
    let (message, _) = next_frame(frame)?;
    message.get("method")?;
    message.get("id").cloned()
}

/// Every message the face wrote is `Content-Length: N`, a blank line, and N bytes of a
/// JSON-RPC message.
fn check_lsp_output(mut output: &[u8]) {
    while !output.is_empty() {
        let text = String::from_utf8_lossy(&output[..output.len().min(64)]);
        let header_end = output
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .unwrap_or_else(|| panic!("LSP face wrote no header end: {text}"));
        let header = std::str::from_utf8(&output[..header_end]).expect("an ASCII header");
        let length = content_length(header)
            .unwrap_or_else(|| panic!("LSP face wrote a header without its length: {header}"));
        let body = &output[header_end + 4..];
        assert!(body.len() >= length, "LSP face wrote a short message");
        let message: Value = serde_json::from_slice(&body[..length])
            .unwrap_or_else(|e| panic!("LSP face wrote a body that is not JSON: {e}"));
        assert_eq!(message["jsonrpc"], "2.0", "not JSON-RPC: {message}");
        output = &body[length..];
    }
}

// ---- the hub's grammar and scanner ----------------------------------------------------

/// The `/server:prompt` grammar on `data` (as UTF-8): parsing, completion sites at every
/// character boundary, appending arguments, and the round trips its documentation promises.
pub fn command(data: &[u8]) {
    let Ok(line) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(cmd) = command::parse(line) {
        let printed = cmd.to_string();
        assert_eq!(
            command::parse(&printed).as_ref(),
            Ok(&cmd),
            "{line:?} printed as {printed:?} reads back differently"
        );
    }
    for cursor in (0..=line.len()).filter(|&c| line.is_char_boundary(c)) {
        let _ = command::site_at(line, cursor);
    }
    // The line as a value: quoted, it reads back unchanged.
    let quoted = format!("/s:p v={}", command::quote_value(line));
    let read = command::parse(&quoted)
        .unwrap_or_else(|e| panic!("{line:?} quoted as {quoted:?} is refused: {e}"));
    assert_eq!(read.arguments.get("v").map(String::as_str), Some(line));
    let _ = command::append_arguments(line, &[("fz".into(), line.into())]);
}

/// The JSON scanner on `data` (as UTF-8): spans, compact text, and an object's members,
/// which must each be valid JSON and make the same object when written back.
pub fn scan(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let span = json_scan::value_span(text);
    assert!(span.len <= text.len() && text.is_char_boundary(span.len));
    if let Some(compact) = json_scan::compact(text) {
        assert_eq!(
            serde_json::from_str::<Value>(&compact).ok(),
            serde_json::from_str::<Value>(text).ok(),
            "compacting {text:?} changed it"
        );
    }
    let Some(members) = json_scan::object_members(text) else {
        return;
    };
    for (key, raw) in &members {
        if let Err(e) = json_scan::check(raw) {
            panic!("member {key:?} of {text:?} is not JSON ({e}): {raw:?}");
        }
    }
    let indent = json_scan::member_indent(text).unwrap_or("  ");
    let written = json_scan::object_text(&members, indent);
    assert_eq!(
        serde_json::from_str::<Value>(&written).ok(),
        serde_json::from_str::<Value>(text).ok(),
        "{text:?} written back as {written:?}"
    );
}

// ---- configuration files --------------------------------------------------------------

/// The configuration files on `data`, split at the first NUL byte into the user's
/// `config.json` and the workspace's `.mcp.json`: the loader reads both; the user file's
/// editors (prompt settings, servers) leave a valid JSON object valid and refuse the rest;
/// the tokens file reader and the embedding model setting read the first part.
pub fn config(harness: &Harness, data: &[u8]) {
    let (user, workspace) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let dir = harness.home.join("fuzz-config");
    let ws = dir.join("workspace");
    std::fs::create_dir_all(&ws).expect("a config dir");
    let user_file = tandem_core::user_config::path(&dir);
    std::fs::write(&user_file, user).expect("writing config.json");
    std::fs::write(ws.join(hub_config::WORKSPACE_FILE), workspace).expect("writing .mcp.json");
    std::fs::write(dir.join(crate::tokens::TOKENS_FILE), user).expect("writing tokens.json");

    let env = |name: &str| (name == "SET").then(|| "value".to_string());
    let _ = hub_config::load(&user_file, &ws, &env, &|_, _| true);
    let _ = crate::tokens::list(&dir);
    let settings = tandem_core::config::Config {
        home: dir.clone(),
        log_filter: "info".into(),
        embedding_model: None,
        hf_endpoint: None,
        user_home: None,
    };
    let _ = tandem_core::memory::model_source::resolve(&settings);

    let change = hub_config::PromptSettingsChange {
        enabled: Some(true),
        arguments: [("a".to_string(), Some("b".to_string()))].into(),
    };
    let before = std::fs::read(&user_file).expect("reading config.json");
    let edited = hub_config::edit_prompt_settings(&user_file, "s", "p", &change);
    check_edit(&user_file, &before, edited.is_ok());
    let before = std::fs::read(&user_file).expect("reading config.json");
    let entry = json!({"command": "tandem-fuzz-absent", "args": ["x"]});
    let edited = hub_config::edit_servers(&user_file, &[("fz".to_string(), entry)]);
    check_edit(&user_file, &before, edited.is_ok());
}

/// An edit leaves a JSON object; a refused edit leaves the file as it was.
fn check_edit(file: &Path, before: &[u8], edited: bool) {
    let after = std::fs::read(file).expect("reading config.json back");
    if edited {
        let object = serde_json::from_slice::<Value>(&after).is_ok_and(|v| v.is_object());
        assert!(
            object,
            "an edit of {:?} wrote {:?}",
            String::from_utf8_lossy(before),
            String::from_utf8_lossy(&after)
        );
    } else {
        assert_eq!(after, before, "a refused edit changed the file");
    }
}

// ---- every method's arguments -----------------------------------------------------------

/// Up to four calls chosen by `data`: a method of [`tandem_core::calls`], and JSON built from its
/// parameters' schema (plausible keys, values of the right kind or of any, ids answered by
/// the earlier calls of the same input). Each answers a result or the spec's error object.
pub fn calls(harness: &Harness, data: &[u8]) {
    let methods: Vec<&str> = calls::methods().collect();
    let mut source = Source::new(data);
    let mut ids = Vec::new();
    for _ in 0..4 {
        if source.is_empty() {
            break;
        }
        let method = methods[source.below(methods.len())];
        let schema = calls::params_schema(method).expect("a listed method has a schema");
        let mut params = source.value_for(&schema, &ids, 0);
        if method == calls::HUB_IMPORT.name {
            defang(&mut params);
        }
        let workspace = (source.below(8) > 0).then(|| harness.workspace.clone());
        let core = harness.core.clone();
        let sent = params.clone();
        let answer = harness.run(
            method,
            calls::spawn_call(method, move || {
                let session = Session::local(workspace.as_deref());
                calls::call_in(&core, &session, method, sent)
            }),
        );
        match answer {
            Ok(result) => collect_ids(&result, &mut ids),
            Err(e) => check_error(method, &params, &e),
        }
    }
}

/// Imported servers get a command that does not exist and an address where nothing listens:
/// the hub tries to start them (and fails) but the fuzzer never runs a program it made up.
fn defang(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                match key.as_str() {
                    "command" => *v = json!("tandem-fuzz-absent"),
                    "url" => *v = json!("http://127.0.0.1:9/"),
                    _ => defang(v),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(defang),
        _ => {}
    }
}

/// Every failure is the spec's error object, and none is the core's own fault.
fn check_error(method: &str, params: &Value, e: &CallError) {
    let code = e.code();
    assert!(
        !code.is_empty() && code.chars().all(|c| c.is_ascii_uppercase() || c == '_'),
        "{method} {params}: error code {code:?}"
    );
    assert!(!e.message().is_empty(), "{method} {params}: no message");
    let object = e.to_json();
    assert_eq!(object["error"]["code"], code);
    assert!(object["error"]["details"].is_object(), "{method}: {object}");
    assert_ne!(code, "INTERNAL_ERROR", "{method} {params}: {}", e.message());
}

/// The ids in a result (any string under a key ending in `id`), for later calls to use.
fn collect_ids(value: &Value, ids: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                match v {
                    Value::String(s) if key.ends_with("id") && ids.len() < 64 => {
                        ids.push(s.clone())
                    }
                    _ => collect_ids(v, ids),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_ids(v, ids)),
        _ => {}
    }
}

/// Strings that often break things.
const AWKWARD: &[&str] = &[
    "",
    " ",
    "..",
    "../..",
    "/",
    "/etc/passwd",
    "~",
    "\u{0}",
    "é",
    "🦀",
    "\u{202e}",
    "-1",
    "null",
    "{}",
    "[1]",
    "a\nb",
    "${HOME}",
    "tandem://entry/..",
    "memory/add",
];

/// Picks from fuzz bytes: each choice takes what it needs from the front; once the bytes
/// run out, every choice is the first one (zero).
struct Source<'a> {
    data: &'a [u8],
}

impl<'a> Source<'a> {
    fn new(data: &'a [u8]) -> Source<'a> {
        Source { data }
    }

    fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    /// A number below `n` (`n` > 0).
    fn below(&mut self, n: usize) -> usize {
        let wide = if n > 256 {
            usize::from(self.byte()) << 8 | usize::from(self.byte())
        } else {
            usize::from(self.byte())
        };
        wide % n
    }

    fn take(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.data.split_at(n.min(self.data.len()));
        self.data = rest;
        head
    }

    fn string(&mut self, ids: &[String]) -> String {
        match self.below(8) {
            0 | 1 if !ids.is_empty() => ids[self.below(ids.len())].clone(),
            2 => AWKWARD[self.below(AWKWARD.len())].to_string(),
            3 => {
                let c = char::from(b'a' + (self.byte() % 26));
                c.to_string().repeat(self.below(4096))
            }
            _ => {
                let len = self.below(24);
                String::from_utf8_lossy(self.take(len)).into_owned()
            }
        }
    }

    fn integer(&mut self) -> Value {
        match self.below(8) {
            0 => json!(i64::MIN),
            1 => json!(i64::MAX),
            2 => json!(u64::MAX),
            3 => json!(-1),
            4 => json!(0),
            _ => json!(i64::from(self.byte()) - 16),
        }
    }

    fn number(&mut self) -> Value {
        match self.below(4) {
            0 => json!(f64::MAX),
            1 => json!(-0.5),
            _ => json!(f64::from(self.byte()) / 100.0),
        }
    }

    /// Any JSON value.
    fn any(&mut self, ids: &[String], depth: usize) -> Value {
        let kinds = if depth > 3 { 5 } else { 7 };
        match self.below(kinds) {
            0 => Value::Null,
            1 => Value::Bool(self.byte() % 2 == 1),
            2 => self.integer(),
            3 => self.number(),
            4 => Value::String(self.string(ids)),
            5 => (0..self.below(4))
                .map(|_| self.any(ids, depth + 1))
                .collect(),
            _ => {
                let mut map = Map::new();
                for _ in 0..self.below(4) {
                    map.insert(self.string(ids), self.any(ids, depth + 1));
                }
                Value::Object(map)
            }
        }
    }

    /// A value for `schema`: mostly of its kind, sometimes any value at all.
    fn value_for(&mut self, schema: &Value, ids: &[String], depth: usize) -> Value {
        if self.below(16) == 0 || depth > 4 {
            return self.any(ids, depth);
        }
        for union in ["anyOf", "oneOf"] {
            if let Some(Value::Array(branches)) = schema.get(union)
                && !branches.is_empty()
            {
                let branch = &branches[self.below(branches.len())];
                return self.value_for(branch, ids, depth);
            }
        }
        if let Some(Value::Array(values)) = schema.get("enum")
            && !values.is_empty()
            && self.below(4) > 0
        {
            return values[self.below(values.len())].clone();
        }
        let kind = match schema.get("type") {
            Some(Value::Array(kinds)) if !kinds.is_empty() => {
                kinds[self.below(kinds.len())].clone()
            }
            Some(kind) => kind.clone(),
            None => Value::Null,
        };
        match kind.as_str() {
            Some("object") => self.object_for(schema, ids, depth),
            Some("array") => {
                let items = schema.get("items").cloned().unwrap_or(Value::Bool(true));
                (0..self.below(5))
                    .map(|_| self.value_for(&items, ids, depth + 1))
                    .collect()
            }
            Some("string") => Value::String(self.string(ids)),
            Some("integer") => self.integer(),
            Some("number") => self.number(),
            Some("boolean") => Value::Bool(self.byte() % 2 == 1),
            Some("null") => Value::Null,
            _ => self.any(ids, depth),
        }
    }

    /// An object with the schema's properties (required ones nearly always, others half the
    /// time), now and then a key it does not know.
    fn object_for(&mut self, schema: &Value, ids: &[String], depth: usize) -> Value {
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut object = Map::new();
        if let Some(Value::Object(properties)) = schema.get("properties") {
            for (key, property) in properties {
                let wanted = if required.contains(&key.as_str()) {
                    15
                } else {
                    8
                };
                if self.below(16) < wanted {
                    object.insert(key.clone(), self.value_for(property, ids, depth + 1));
                }
            }
        }
        if self.below(16) == 0 {
            object.insert(self.string(ids), self.any(ids, depth + 1));
        }
        Value::Object(object)
    }
}
