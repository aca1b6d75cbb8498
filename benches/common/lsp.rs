//! A minimal LSP client for the benchmarks: Content-Length framing over a child's stdio,
//! answers the server's requests with null, hands every message to `rx`.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, Command};
use tokio::sync::{Mutex, mpsc};

/// How long [`Editor::until`] waits for a message.
pub const TIMEOUT: Duration = Duration::from_secs(10);

pub fn file_uri(path: &Path) -> String {
    format!("file://{}", path.display())
}

pub struct Editor {
    stdin: Arc<Mutex<ChildStdin>>,
    pub rx: mpsc::UnboundedReceiver<Value>,
    child: tokio::process::Child,
    next_id: i64,
}

async fn write(stdin: &Mutex<ChildStdin>, msg: &Value) {
    let body = serde_json::to_vec(msg).unwrap();
    let mut w = stdin.lock().await;
    w.write_all(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes())
        .await
        .unwrap();
    w.write_all(&body).await.unwrap();
    w.flush().await.unwrap();
}

impl Editor {
    /// Spawns `cmd` (an LSP server on stdio: `tandem lsp ...`) and initializes a session
    /// for the workspace `root`, with `options` as `initializationOptions`.
    pub async fn start(mut cmd: Command, root: &Path, options: Option<Value>) -> Editor {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = Arc::new(Mutex::new(child.stdin.take().unwrap()));
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::unbounded_channel();
        let replies = stdin.clone();
        tokio::spawn(async move {
            let mut r = BufReader::new(stdout);
            loop {
                let mut len = 0usize;
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).await.unwrap_or(0) == 0 {
                        return;
                    }
                    let line = line.trim();
                    if line.is_empty() {
                        break;
                    }
                    if let Some(v) = line.strip_prefix("Content-Length:") {
                        len = v.trim().parse().unwrap();
                    }
                }
                let mut body = vec![0; len];
                if r.read_exact(&mut body).await.is_err() {
                    return;
                }
                let msg: Value = serde_json::from_slice(&body).unwrap();
                if msg.get("id").is_some() && msg.get("method").is_some() {
                    let reply = json!({"jsonrpc": "2.0", "id": msg["id"], "result": null});
                    write(&replies, &reply).await;
                }
                if tx.send(msg).is_err() {
                    return;
                }
            }
        });
        let mut editor = Editor {
            stdin,
            rx,
            child,
            next_id: 0,
        };
        let root = file_uri(root);
        let mut params = json!({
            "processId": null,
            "rootUri": root,
            "workspaceFolders": [{"uri": root, "name": "repo"}],
            "capabilities": {
                "general": {"positionEncodings": ["utf-8", "utf-16"]},
                "window": {"workDoneProgress": true},
                "workspace": {"codeLens": {"refreshSupport": true}},
            },
        });
        if let Some(options) = options {
            params["initializationOptions"] = options;
        }
        editor.request("initialize", params).await;
        editor.notify("initialized", json!({})).await;
        editor
    }

    pub async fn notify(&mut self, method: &str, params: Value) {
        write(
            &self.stdin,
            &json!({"jsonrpc": "2.0", "method": method, "params": params}),
        )
        .await;
    }

    /// Sends a request and waits for its response (the whole message: `result` or `error`).
    pub async fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        write(
            &self.stdin,
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        )
        .await;
        self.until(|m| m["id"] == id && m.get("method").is_none())
            .await
    }

    /// A request's result; panics on an error response.
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        let mut response = self.request(method, params).await;
        if let Some(e) = response.get("error") {
            panic!("{method} failed: {e}");
        }
        response["result"].take()
    }

    /// `workspace/executeCommand`'s result; panics on an error response.
    pub async fn execute(&mut self, command: &str, arguments: Value) -> Value {
        self.call(
            "workspace/executeCommand",
            json!({"command": command, "arguments": arguments}),
        )
        .await
    }

    /// Opens the file at `path` with its text on disk, as plain text.
    pub async fn open(&mut self, path: &Path) {
        let text = std::fs::read_to_string(path).unwrap();
        self.open_text(&file_uri(path), "text", &text).await;
    }

    /// Opens a document with this text and language id (version 1).
    pub async fn open_text(&mut self, uri: &str, language: &str, text: &str) {
        self.notify(
            "textDocument/didOpen",
            json!({"textDocument": {"uri": uri, "languageId": language, "version": 1, "text": text}}),
        )
        .await;
    }

    /// Replaces a document's whole text (full sync).
    pub async fn change_text(&mut self, uri: &str, version: i64, text: &str) {
        self.notify(
            "textDocument/didChange",
            json!({"textDocument": {"uri": uri, "version": version},
                   "contentChanges": [{"text": text}]}),
        )
        .await;
    }

    /// Waits for the first message matching `want`, dropping others.
    pub async fn until(&mut self, want: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + TIMEOUT;
        loop {
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Ok(Some(m)) if want(&m) => return m,
                Ok(Some(_)) => {}
                Ok(None) => panic!("the LSP server closed the connection"),
                Err(_) => panic!("no expected message within {TIMEOUT:?}"),
            }
        }
    }

    pub async fn stop(mut self) {
        self.request("shutdown", Value::Null).await;
        self.notify("exit", Value::Null).await;
        let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
    }
}
