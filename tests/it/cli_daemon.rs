//! The CLI through a running daemon (its `cli` face), the face itself on the wire, and the
//! default `tandem mcp`, which starts the daemon.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::process::Output;

use serde_json::{Value, json};

use crate::util::{DaemonGuard, TestHome, daemon_status, lock_pid, repo_with, succeeds_json};

/// `tandem ARGS` in `dir` (where `tandem tasks` finds its workspace).
fn command(home: &TestHome, dir: &Path, args: &[&str]) -> std::process::Command {
    let mut cmd = home.std_command();
    cmd.current_dir(dir).args(args);
    cmd
}

/// Runs `tandem ARGS` in `dir`.
fn cli(home: &TestHome, dir: &Path, args: &[&str]) -> Output {
    command(home, dir, args).output().unwrap()
}

/// Runs a command that must succeed with `--json`; its output.
fn cli_json(home: &TestHome, dir: &Path, args: &[&str]) -> Value {
    succeeds_json(command(home, dir, args))
}

#[tokio::test]
async fn the_default_mcp_starts_a_daemon_that_owns_the_data_dir() {
    let home = TestHome::new();
    let _guard = DaemonGuard(&home);
    let c = home.mcp_daemon(&home.path().join("ws"), 60).await;
    c.ok("rekall_search", json!({"query": "anything"})).await;
    let s = daemon_status(&home);
    let pid = s["pid"].as_u64().unwrap() as u32;
    assert_ne!(Some(pid), c.pid, "the daemon is not the agent's child");
    assert_eq!(lock_pid(&home), Some(pid));
    assert_eq!(s["home"], home.tandem_home().to_str().unwrap());
    let log = home.tandem_home().join("logs/tandem.log");
    assert_eq!(s["log_file"], log.to_str().unwrap());
    c.close().await;
}

#[tokio::test]
async fn memory_and_tasks_commands_go_through_a_running_daemon() {
    let home = TestHome::new();
    let _guard = DaemonGuard(&home);
    let ws = home.path().join("ws");
    repo_with(&ws, &[("a.txt", "a\n")]);
    let agent = home.mcp_daemon(&ws, 60).await;
    let by_agent = agent
        .ok(
            "rekall_add",
            json!({"type": "pitfall", "title": "Mutex held across await", "content": "Deadlocks under load."}),
        )
        .await;
    let wf = agent
        .ok("start_workflow", json!({"name": "Refactor"}))
        .await;
    let task = agent
        .ok(
            "start_task",
            json!({"workflow_id": wf["workflow_id"], "name": "Split the parser", "goal": "Smaller files"}),
        )
        .await;
    let task_id = task["task_id"].as_str().unwrap();

    // The daemon holds the data dir; the CLI works all the same, through it.
    let found = cli_json(&home, &ws, &["memory", "search", "mutex await"]);
    assert_eq!(found["results"][0]["id"], by_agent["id"]);
    let by_cli = cli_json(
        &home,
        &ws,
        &[
            "memory",
            "add",
            "-t",
            "decision",
            "--title",
            "Parser split by grammar rule",
            "--content",
            "One file per rule.",
            "--tag",
            "Parser",
        ],
    );
    assert_eq!(by_cli["tags"], json!(["parser"]));
    let seen = agent
        .ok("rekall_search", json!({"query": "grammar rule"}))
        .await;
    assert_eq!(
        seen["results"][0]["id"], by_cli["id"],
        "the agent sees the CLI's add"
    );
    let shown = cli_json(
        &home,
        &ws,
        &["memory", "show", by_agent["id"].as_str().unwrap()],
    );
    assert_eq!(shown["title"], "Mutex held across await");
    let table = cli(&home, &ws, &["memory", "search", "parser"]);
    assert!(String::from_utf8_lossy(&table.stdout).contains("1 of 1 matching entries"));

    let tree = cli_json(&home, &ws, &["tasks"]);
    assert_eq!(tree[0]["tasks"][0]["task_id"], task_id);
    let elsewhere = home.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    assert_eq!(cli_json(&home, &elsewhere, &["tasks"]), json!([]));
    assert_eq!(
        cli_json(&home, &elsewhere, &["tasks", "--all"])
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let record = cli_json(&home, &ws, &["tasks", "show", task_id]);
    assert_eq!(record["name"], "Split the parser");
    assert_eq!(record["status"], "running");

    let s = daemon_status(&home);
    assert_eq!(lock_pid(&home), Some(s["pid"].as_u64().unwrap() as u32));
    assert_eq!(s["clients"], 1, "the CLI's sessions are over");
    agent.close().await;
}

#[tokio::test]
async fn errors_come_through_the_daemon_with_their_codes() {
    let home = TestHome::new();
    let _guard = DaemonGuard(&home);
    let agent = home.mcp_daemon(&home.path().join("ws"), 60).await;
    agent.ok("rekall_help", json!({})).await;
    crate::cli::check_errors(&home);
    agent.close().await;
}

#[tokio::test]
async fn export_then_import_through_daemons() {
    let (alice, bob) = (TestHome::new(), TestHome::new());
    let (_a, _b) = (DaemonGuard(&alice), DaemonGuard(&bob));
    let ws = alice.path().join("ws");
    let agent = alice.mcp_daemon(&ws, 60).await;
    for (t, title) in [
        ("decision", "Use sled for storage"),
        ("pitfall", "Index commits cost 12 ms"),
    ] {
        agent
            .ok(
                "rekall_add",
                json!({"type": t, "title": title, "content": "Shared with the team."}),
            )
            .await;
    }
    let file = alice.path().join("team.jsonl");
    let out = cli(&alice, &ws, &["memory", "export", file.to_str().unwrap()]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("exported 2 entries and 0 links"));
    assert_eq!(std::fs::read_to_string(&file).unwrap().lines().count(), 2);
    let to_stdout = cli(&alice, &ws, &["memory", "export"]);
    assert_eq!(to_stdout.stdout, std::fs::read(&file).unwrap());
    // Importing it back changes nothing.
    let again = cli_json(&alice, &ws, &["memory", "import", file.to_str().unwrap()]);
    assert_eq!(again["entries_unchanged"], 2);

    let bob_ws = bob.path().join("ws");
    let bob_agent = bob.mcp_daemon(&bob_ws, 60).await;
    let report = cli_json(&bob, &bob_ws, &["memory", "import", file.to_str().unwrap()]);
    assert_eq!(report["entries_added"], 2);
    let found = bob_agent
        .ok("rekall_search", json!({"query": "sled storage"}))
        .await;
    assert_eq!(found["total"], 1, "bob's agent sees the import at once");
    agent.close().await;
    bob_agent.close().await;
}

/// An import larger than one call goes in parts (entries, then links), through the daemon:
/// a bad last line still imports nothing; a link across parts, and an entry given twice in
/// different parts, land as in one call.
#[tokio::test]
async fn a_large_import_goes_in_parts_and_a_bad_line_still_imports_nothing() {
    let home = TestHome::new();
    let _guard = DaemonGuard(&home);
    let ws = home.path().join("ws");
    let agent = home.mcp_daemon(&ws, 60).await;
    const N: u64 = 12_001;
    let id = |i: u64| ulid::Ulid::from_parts(1_700_000_000_000 + i, i.into()).to_string();
    let entry = |i: u64, title: String, updated: &str| {
        json!({"record": "entry", "id": id(i), "type": "reference", "title": title,
            "content": format!("Imported entry number {i}."), "confidence": 3,
            "memory_type": "episodic", "status": "active",
            "created_at": "2026-01-01T00:00:00Z", "updated_at": updated})
        .to_string()
    };
    let old = "2026-01-01T00:00:00Z";
    let link = json!({"record": "link", "id": id(N + 1), "source": id(0), "target": id(N - 1),
        "relation": "related", "created_at": old});
    // The link first: the CLI sends it after every entry.
    let mut lines = vec![link.to_string()];
    lines.extend((0..N).map(|i| entry(i, format!("Entry {i}"), old)));
    lines.push(entry(
        7,
        "Entry seven, revised".into(),
        "2026-06-01T00:00:00Z",
    ));
    let file = home.path().join("big.jsonl");
    std::fs::write(&file, format!("{}\nnot json\n", lines.join("\n"))).unwrap();
    let out = cli(&home, &ws, &["memory", "import", file.to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("line {}", N + 3)), "{stderr}");
    assert!(stderr.contains("INVALID_ARGUMENT"), "{stderr}");
    let none = agent
        .ok("rekall_search", json!({"query": "imported"}))
        .await;
    assert_eq!(none["total"], 0, "nothing imported: {none}");

    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let report = cli_json(&home, &ws, &["memory", "import", file.to_str().unwrap()]);
    assert_eq!(report["entries_added"], N);
    assert_eq!(report["entries_updated"], 1);
    assert_eq!(report["links_added"], 1);
    let shown = agent.ok("rekall_show", json!({"id": id(0)})).await;
    assert_eq!(
        shown["links"]["outgoing"][0]["target_id"],
        id(N - 1),
        "{shown}"
    );
    let seven = agent.ok("rekall_show", json!({"id": id(7)})).await;
    assert_eq!(seven["title"], "Entry seven, revised");
    let last = agent
        .ok(
            "rekall_search",
            json!({"query": format!("number {}", N - 1)}),
        )
        .await;
    assert_eq!(last["results"][0]["id"], id(N - 1), "{last}");
    // The export comes through the daemon in pages: every entry once, then the link.
    let exported = cli(&home, &ws, &["memory", "export"]);
    let exported = String::from_utf8_lossy(&exported.stdout);
    let lines: Vec<serde_json::Value> = exported
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len() as u64, N + 1);
    let ids: std::collections::BTreeSet<&str> = lines[..N as usize]
        .iter()
        .map(|l| l["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len() as u64, N);
    assert_eq!(lines[N as usize]["record"], "link", "{}", lines[N as usize]);
    let file = home.path().join("export.jsonl");
    let out = cli(&home, &ws, &["memory", "export", file.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), exported);
    assert!(!home.path().join("export.jsonl.partial").exists());
    agent.close().await;
}

#[tokio::test]
async fn standalone_while_a_daemon_runs_says_how_to_use_it() {
    let home = TestHome::new();
    let _guard = DaemonGuard(&home);
    let ws = home.path().join("ws");
    let agent = home.mcp_daemon(&ws, 60).await;
    agent.ok("rekall_help", json!({})).await;
    let pid = daemon_status(&home)["pid"].as_u64().unwrap();
    let standalone = home.mcp_in(&ws).await;
    let (is_error, v) = standalone
        .call("rekall_search", json!({"query": "x"}))
        .await;
    assert!(is_error);
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("a tandem daemon (pid {pid}) holds the data dir"))
            && message.contains("run without --standalone")
            && message.contains("tandem daemon stop"),
        "{message}"
    );
    standalone.close().await;
    agent.close().await;
}

#[tokio::test]
async fn a_daemon_started_while_the_data_dir_is_held_waits_for_it() {
    let home = TestHome::new();
    let _guard = DaemonGuard(&home);
    // This test process holds the data dir, as a CLI command run in-process would.
    let held = home.memory();
    // Released once the starting daemon has said it waits for it.
    let log_file = home.tandem_home().join("logs/tandem.log");
    let waiting = format!("the data dir is held by pid {}", std::process::id());
    let release = tokio::spawn(async move {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
        while !std::fs::read_to_string(&log_file).is_ok_and(|l| l.contains(&waiting)) {
            assert!(
                std::time::Instant::now() < deadline,
                "the daemon never waited"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        drop(held);
    });
    let agent = home.mcp_daemon(&home.path().join("ws"), 60).await;
    let found = agent
        .ok("rekall_search", json!({"query": "anything"}))
        .await;
    assert_eq!(found["total"], 0);
    release.await.unwrap();
    let log = home.log();
    assert!(
        log.contains(&format!(
            "the data dir is held by pid {}",
            std::process::id()
        )),
        "{log}"
    );
    agent.close().await;
}

/// A `cli` session opened by hand on the daemon's socket.
struct RawSession {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl RawSession {
    fn open(home: &TestHome, hello: Value) -> (RawSession, Value) {
        let writer = UnixStream::connect(home.tandem_home().join("tandem.sock")).unwrap();
        let mut session = RawSession {
            reader: BufReader::new(writer.try_clone().unwrap()),
            writer,
        };
        let welcome = session.send(&format!("{hello}\n"));
        (session, welcome)
    }

    /// Writes `raw` and reads one line back.
    fn send(&mut self, raw: &str) -> Value {
        self.writer.write_all(raw.as_bytes()).unwrap();
        let mut line = String::new();
        self.reader.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap()
    }
}

#[tokio::test]
async fn the_cli_face_answers_broken_lines_and_goes_on() {
    let home = TestHome::new();
    let _guard = DaemonGuard(&home);
    let agent = home.mcp_daemon(&home.path().join("ws"), 60).await;
    agent.ok("rekall_help", json!({})).await;
    let version = env!("CARGO_PKG_VERSION");
    let (mut s, welcome) = RawSession::open(&home, json!({"face": "cli", "version": version}));
    assert_eq!(welcome["ok"], true, "{welcome}");

    // (line sent, JSON-RPC error code, spec code in `data`)
    let cases: &[(&str, i64, Option<&str>)] = &[
        ("this is { not json", -32700, None),
        (r#"{"id": 1, "params": {}}"#, -32600, None),
        (
            r#"{"jsonrpc": "2.0", "id": 2, "method": "memory/nope"}"#,
            -32601,
            Some("UNKNOWN_METHOD"),
        ),
        (
            r#"{"jsonrpc": "2.0", "id": 3, "method": "memory/search", "params": {"query": 5}}"#,
            -32602,
            Some("INVALID_ARGUMENT"),
        ),
        (
            r#"{"jsonrpc": "2.0", "id": 4, "method": "memory/show", "params": {"id": "01ARZ3NDEKTSV4RRFFQ69G5FAV"}}"#,
            -32602,
            Some("ENTRY_NOT_FOUND"),
        ),
    ];
    for (line, code, spec) in cases {
        let answer = s.send(&format!("{line}\n"));
        assert_eq!(answer["error"]["code"], *code, "{line}: {answer}");
        if let Some(spec) = spec {
            assert_eq!(answer["error"]["data"]["error"]["code"], *spec, "{answer}");
        }
    }
    let wrong = s.send(
        "{\"jsonrpc\": \"2.0\", \"id\": 5, \"method\": \"memory/search\", \"params\": {\"query\": 5}}\n",
    );
    assert_eq!(wrong["error"]["data"]["error"]["details"]["field"], "query");

    // The session still works.
    let added = s.send(
        "{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":\"memory/add\",\"params\":{\"type\":\"bug\",\"title\":\"Raw session\"}}\n",
    );
    assert_eq!(added["id"], "a");
    assert_eq!(added["result"]["title"], "Raw session");

    // Another version is refused, saying so.
    let (_, refused) = RawSession::open(&home, json!({"face": "cli", "version": "0.0.1"}));
    assert_eq!(refused["ok"], false);
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .starts_with("version mismatch")
    );
    agent.close().await;
}

#[test]
fn a_daemon_of_another_version_is_a_clear_error() {
    let home = TestHome::new();
    std::fs::create_dir_all(home.tandem_home()).unwrap();
    // A fake daemon of another version, refusing every hello as a real one does.
    let listener = UnixListener::bind(home.tandem_home().join("tandem.sock")).unwrap();
    let fake = std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut hello = String::new();
        BufReader::new(&stream).read_line(&mut hello).unwrap();
        let refusal = json!({"ok": false, "error": "version mismatch: client 0.1.0, daemon 9.9.9",
            "version": "9.9.9", "pid": 4242, "clients": 0});
        (&stream)
            .write_all(format!("{refusal}\n").as_bytes())
            .unwrap();
        serde_json::from_str::<Value>(&hello).unwrap()
    });
    let out = cli(&home, home.path(), &["memory", "search", "x"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("daemon (pid 4242) is version 9.9.9")
            && stderr.contains("tandem daemon stop"),
        "{stderr}"
    );
    assert_eq!(fake.join().unwrap()["face"], "cli");
    assert!(
        lock_pid(&home).is_none(),
        "the CLI did not open the data dir"
    );
}

#[tokio::test]
async fn a_panicking_call_is_answered_and_the_face_goes_on() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let handler: tandem::daemon::CallHandler =
        std::sync::Arc::new(|method: &str, _| match method {
            "boom" => panic!("a bug in a call"),
            _ => Ok(json!("fine")),
        });
    let (client, server) = tokio::io::duplex(1 << 16);
    let (server_read, server_write) = tokio::io::split(server);
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let face = tokio::spawn(tandem::daemon::serve_calls(
        tokio::io::BufReader::new(server_read),
        server_write,
        handler,
        stop,
    ));
    let (client_read, mut client_write) = tokio::io::split(client);
    let mut lines = tokio::io::BufReader::new(client_read).lines();
    client_write
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"boom\"}\n{\"jsonrpc\":\"2.0\",\"method\":\"ok\"}\n{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ok\"}\n")
        .await
        .unwrap();
    let first: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
    assert_eq!(first["id"], 1);
    assert_eq!(first["error"]["code"], -32603);
    assert_eq!(first["error"]["data"]["error"]["code"], "INTERNAL_ERROR");
    // The notification got no answer; the next request did.
    let second: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
    assert_eq!(second, json!({"jsonrpc": "2.0", "id": 2, "result": "fine"}));
    stop_tx.send(true).unwrap();
    face.await.unwrap().unwrap();
}
