//! Editor latency benchmark: prints figures, asserts nothing about time.
//!
//! An agent (`tandem mcp` through the daemon) works on a task in a generated git repository
//! of 10,000 files (`TANDEM_BENCH_FILES` to change) while an LSP client (`tandem lsp`, same
//! daemon) listens, as an editor would. Measured, from the agent's or the editor's action to
//! the message arriving at the editor's end of the LSP pipe:
//! - `log_milestone` → its `$/progress` report;
//! - a save in the editor (`didSave`) → the file's new diagnostics;
//! - the agent editing a file on disk then logging a milestone → that file's diagnostics;
//! - the agent writing a file on disk, with no call and no save → that file's diagnostics
//!   (the watch of the task's tree), half of them new files at the root, half edits of
//!   tracked files in the tree.
//!
//! Run with `cargo bench --bench editor`.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use serde_json::{Value, json};
use tokio::process::Command;

#[allow(dead_code)]
#[path = "../tests/it/util.rs"]
mod util;
use util::git;

mod common;
use common::lsp::{Editor, file_uri};
use common::{Stats, file_path, generate, ms, section};

const SAMPLES: usize = 100;

#[tokio::main]
async fn main() {
    let files: usize = std::env::var("TANDEM_BENCH_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let dir = tempfile::Builder::new()
        .prefix("tandem-bench-editor")
        .tempdir()
        .unwrap();
    let repo = dir.path().join("repo");
    let home = dir.path().join("home");
    eprintln!("bench: writing {files} files");
    generate(&repo, files);
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "initial"]);
    // Files written in the same second as the index are "racily clean": git and libgit2
    // re-read them on every status until the index is rewritten later. A real repository's
    // index is older than its files; make this one so.
    std::thread::sleep(Duration::from_millis(1100));
    git(&repo, &["status", "--porcelain"]);
    let repo = repo.canonicalize().unwrap();

    let agent = Agent::connect(&home, &repo).await;
    let wf = agent.call("start_workflow", json!({"name": "bench"})).await;
    let task = agent
        .call(
            "start_task",
            json!({"workflow_id": wf["workflow_id"], "name": "bench task", "goal": "measure",
                   "areas": ["d0001"]}),
        )
        .await["task_id"]
        .as_str()
        .unwrap()
        .to_string();

    let mut editor = Editor::start(command(&home, &repo, &["lsp"]), &repo, None).await;
    let open = repo.join(file_path(100));
    editor.open(&open).await;
    editor
        .until(|m| m["method"] == "$/progress" && m["params"]["value"]["kind"] == "begin")
        .await;

    eprintln!("bench: milestone → progress");
    let mut milestone = Vec::new();
    for i in 0..SAMPLES {
        let message = format!("step {i}");
        let t = Instant::now();
        agent
            .call(
                "log_milestone",
                json!({"task_id": task, "message": message, "progress": i % 100}),
            )
            .await;
        editor
            .until(|m| {
                m["method"] == "$/progress" && m["params"]["value"]["message"] == message.as_str()
            })
            .await;
        milestone.push(t.elapsed());
        // Let the debounced refresh that follows each event finish.
        settle(&mut editor).await;
    }

    eprintln!("bench: save → diagnostics");
    let uri = file_uri(&open);
    let mut save = Vec::new();
    let original = std::fs::read_to_string(&open).unwrap();
    for i in 0..SAMPLES {
        // Each save changes the hunk, so each publishes new diagnostics.
        let extra: String = (0..(i % 3 + 1))
            .map(|l| format!("added {i} {l}\n"))
            .collect();
        std::fs::write(&open, format!("{original}{extra}")).unwrap();
        let t = Instant::now();
        editor
            .notify(
                "textDocument/didSave",
                json!({"textDocument": {"uri": uri}}),
            )
            .await;
        editor
            .until(|m| {
                m["method"] == "textDocument/publishDiagnostics"
                    && m["params"]["uri"] == uri.as_str()
            })
            .await;
        save.push(t.elapsed());
    }

    eprintln!("bench: agent edit + milestone → diagnostics");
    let mut agent_edit = Vec::new();
    for i in 0..SAMPLES {
        let path = repo.join(file_path(200 + i * 7 % (files - 200)));
        let target = file_uri(&path);
        let t = Instant::now();
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("agent line\n");
        std::fs::write(&path, text).unwrap();
        agent
            .call(
                "log_milestone",
                json!({"task_id": task, "message": format!("edit {i}")}),
            )
            .await;
        editor
            .until(|m| {
                m["method"] == "textDocument/publishDiagnostics"
                    && m["params"]["uri"] == target.as_str()
            })
            .await;
        agent_edit.push(t.elapsed());
        settle(&mut editor).await;
    }

    eprintln!("bench: agent writes a file (no call, no save) → diagnostics");
    let mut on_disk = Vec::new();
    for i in 0..SAMPLES {
        let path = if i % 2 == 0 {
            repo.join(format!("agent{i}.ts"))
        } else {
            repo.join(file_path((files / 2 + i * 13) % files))
        };
        let target = file_uri(&path);
        let mut text = std::fs::read_to_string(&path).unwrap_or_default();
        text.push_str("written by the agent\n");
        let t = Instant::now();
        std::fs::write(&path, text).unwrap();
        editor
            .until(|m| {
                m["method"] == "textDocument/publishDiagnostics"
                    && m["params"]["uri"] == target.as_str()
            })
            .await;
        on_disk.push(t.elapsed());
        settle(&mut editor).await;
    }

    section(
        "Editor latency",
        &format!(
            "`cargo bench --bench editor` (`TANDEM_BENCH_FILES`). An agent (`tandem mcp`) and \
             an LSP client (`tandem lsp`, as an editor) on the same daemon, in a {files}-file \
             git repository; times from the action to the message arriving at the editor's \
             end of the pipe."
        ),
    );
    println!("| from → to (at the editor's end of the LSP pipe) | p50 | p99 | n |");
    println!("|---|---|---|---|");
    for (what, samples) in [
        ("agent `log_milestone` → `$/progress` report", milestone),
        ("editor `didSave` → that file's diagnostics", save),
        (
            "agent edits a file + `log_milestone` → that file's diagnostics",
            agent_edit,
        ),
        (
            "agent writes a file, no call, no save → that file's diagnostics",
            on_disk,
        ),
    ] {
        let s = Stats::of(samples);
        println!("| {what} | {} | {} | {} |", ms(s.p50), ms(s.p99), s.n);
    }
    println!(
        "\nTarget: p50 under 20 ms and p99 under 100 ms from a milestone or a save; p50 under \
         50 ms and p99 under 150 ms from an agent's write on disk with no call. In the last \
         row, half the files are new at the root and half are edits of tracked files deep in \
         the tree. In the edit + milestone row, the milestone's full refresh (one diff of the \
         whole repository) and the watch's recomputation of the file take turns, so the \
         file's diagnostics often wait for the whole diff."
    );

    editor.stop().await;
    agent.client.cancel().await.unwrap();
    let stopped = std::process::Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["daemon", "stop"])
        .env("TANDEM_HOME", &home)
        .output()
        .unwrap();
    assert!(stopped.status.success());
}

/// Drains what the server sends for a moment.
async fn settle(editor: &mut Editor) {
    let until = tokio::time::Instant::now() + Duration::from_millis(150);
    while tokio::time::timeout_at(until, editor.rx.recv())
        .await
        .is_ok()
    {}
}

fn command(home: &Path, repo: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tandem"));
    cmd.args(args)
        .arg("--workspace")
        .arg(repo)
        .env("TANDEM_HOME", home)
        .env("TANDEM_LOG", "warn")
        .env("TANDEM_DAEMON_IDLE_SECS", "120")
        .kill_on_drop(true);
    cmd
}

struct Agent {
    client: RunningService<rmcp::RoleClient, ()>,
}

impl Agent {
    async fn connect(home: &Path, repo: &Path) -> Agent {
        let cmd = command(home, repo, &["mcp"]);
        let (transport, _) = rmcp::transport::TokioChildProcess::builder(cmd)
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Agent {
            client: ().serve(transport).await.unwrap(),
        }
    }

    async fn call(&self, tool: &'static str, args: Value) -> Value {
        let r = self
            .client
            .call_tool(
                CallToolRequestParams::new(tool).with_arguments(args.as_object().unwrap().clone()),
            )
            .await
            .unwrap();
        assert!(r.is_error != Some(true), "{tool}: {r:?}");
        r.structured_content.unwrap_or(Value::Null)
    }
}
