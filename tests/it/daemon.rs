//! The daemon: one process per data dir, shared by every `tandem mcp` client.

use serde_json::{Value, json};

use crate::util::{
    DaemonGuard, TestHome, daemon_status as status, lock_pid, repo_with, wait_until, write_files,
};

#[tokio::test]
async fn clients_share_one_daemon_and_stop_ends_it() {
    let home = TestHome::new();
    let _guard = DaemonGuard(&home);
    let ws = home.path().join("ws");
    let a = home.mcp_daemon(&ws, 60).await;
    let b = home.mcp_daemon(&ws, 60).await;
    // What one client writes, the other reads at once: one process, one memory.
    a.ok(
        "rekall_add",
        json!({"type": "decision", "title": "Shared through the daemon", "content": "one process"}),
    )
    .await;
    let found = b.ok("rekall_search", json!({"query": "daemon"})).await;
    assert_eq!(found["total"], 1);

    let s = status(&home);
    assert_eq!(s["ok"], true);
    assert_eq!(s["clients"], 2);
    let pid = s["pid"].as_u64().unwrap() as u32;
    assert_eq!(lock_pid(&home), Some(pid), "the daemon owns the data dir");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&home.tandem_home().join("tandem.sock")), 0o600);
        assert_eq!(mode(&home.tandem_home()), 0o700);
    }
    a.close().await;
    b.close().await;
    let out = home
        .std_command()
        .args(["daemon", "stop"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("daemon {pid} stopped")));
    assert!(!home.tandem_home().join("tandem.sock").exists());
    // "stopped" means done: the data dir is free (index committed, sled flushed) already.
    assert!(!tandem_core::store::is_held(&home.tandem_home()));
    wait_until(|| lock_pid(&home).is_none(), "the daemon exits").await;
    assert_eq!(status(&home)["ok"], false);
}

#[tokio::test]
async fn concurrent_starters_end_up_with_one_daemon() {
    let home = TestHome::new();
    let _guard = DaemonGuard(&home);
    let ws = home.path().join("ws");
    let clients = futures_join(&home, &ws).await;
    for c in &clients {
        c.ok("rekall_search", json!({"query": "anything"})).await;
    }
    let s = status(&home);
    assert_eq!(s["clients"], 4);
    assert_eq!(lock_pid(&home), Some(s["pid"].as_u64().unwrap() as u32));
    for c in clients {
        c.close().await;
    }
}

async fn futures_join(home: &TestHome, ws: &std::path::Path) -> Vec<crate::util::McpClient> {
    let (a, b, c, d) = tokio::join!(
        home.mcp_daemon(ws, 60),
        home.mcp_daemon(ws, 60),
        home.mcp_daemon(ws, 60),
        home.mcp_daemon(ws, 60)
    );
    vec![a, b, c, d]
}

#[tokio::test]
async fn a_killed_daemon_is_restarted_by_the_next_client() {
    let home = TestHome::new();
    let _guard = DaemonGuard(&home);
    let ws = home.path().join("ws");
    let a = home.mcp_daemon(&ws, 60).await;
    a.ok(
        "rekall_add",
        json!({"type": "bug", "title": "Survives the daemon's death", "content": "flushed"}),
    )
    .await;
    let first = status(&home)["pid"].as_u64().unwrap();
    std::process::Command::new("kill")
        .args(["-9", &first.to_string()])
        .status()
        .unwrap();
    wait_until(|| lock_pid(&home).is_none(), "the killed daemon is gone").await;
    let b = home.mcp_daemon(&ws, 60).await;
    let found = b
        .ok("rekall_search", json!({"query": "daemon death"}))
        .await;
    assert_eq!(found["total"], 1, "the acknowledged add survived");
    let second = status(&home)["pid"].as_u64().unwrap();
    assert_ne!(first, second);
    drop(a);
    b.close().await;
}

#[tokio::test]
async fn an_idle_daemon_exits_by_itself() {
    let home = TestHome::new();
    let _guard = DaemonGuard(&home);
    let c = home.mcp_daemon(&home.path().join("ws"), 1).await;
    c.ok("rekall_help", json!({})).await;
    assert_eq!(status(&home)["ok"], true);
    c.close().await;
    wait_until(|| lock_pid(&home).is_none(), "the idle daemon exits").await;
    assert!(!home.tandem_home().join("tandem.sock").exists());
}

#[tokio::test]
async fn two_workspaces_at_once() {
    let home = TestHome::new();
    let _guard = DaemonGuard(&home);
    let (one, two) = (home.path().join("one"), home.path().join("two"));
    repo_with(&one, &[("a.txt", "a\n")]);
    repo_with(&two, &[("b.txt", "b\n")]);
    let c1 = home.mcp_daemon(&one, 60).await;
    let c2 = home.mcp_daemon(&two, 60).await;
    let mut ids = Vec::new();
    for c in [&c1, &c2] {
        let wf = c.ok("start_workflow", json!({"name": "W"})).await;
        let t = c
            .ok(
                "start_task",
                json!({"workflow_id": wf["workflow_id"], "name": "T", "goal": "G"}),
            )
            .await;
        ids.push(t["task_id"].as_str().unwrap().to_string());
    }
    write_files(&one, &[("a.txt", "a2\n")]);
    write_files(&two, &[("new.txt", "n\n")]);
    let done1 = c1
        .ok(
            "complete_task",
            json!({"task_id": ids[0], "status": "success", "outcome": {"summary": "s"}}),
        )
        .await;
    let done2 = c2
        .ok(
            "complete_task",
            json!({"task_id": ids[1], "status": "success", "outcome": {"summary": "s"}}),
        )
        .await;
    assert_eq!(done1["files_changed"]["modified"], json!(["a.txt"]));
    assert_eq!(done2["files_changed"]["added"], json!(["new.txt"]));
    c1.close().await;
    c2.close().await;
}

#[tokio::test]
async fn sigterm_stops_the_daemon_cleanly_and_keeps_every_write() {
    let home = TestHome::new();
    let _guard = DaemonGuard(&home);
    let ws = home.path().join("ws");
    let c = home.mcp_daemon(&ws, 60).await;
    for i in 0..20 {
        c.ok("rekall_add", json!({"type": "config", "title": format!("Setting number {i} kept"), "content": "value"})).await;
    }
    let pid = status(&home)["pid"].as_u64().unwrap();
    std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    wait_until(|| lock_pid(&home).is_none(), "the daemon exits on SIGTERM").await;
    assert!(
        !home.tandem_home().join("tandem.sock").exists(),
        "the socket is removed"
    );
    drop(c);
    // Everything is there, and the index was committed on the way out: no repair needed.
    let out = home
        .std_command()
        .args(["memory", "search", "setting kept", "-n", "20", "--json"])
        .output()
        .unwrap();
    let found: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(found["total"], 20);
    let log = home.log();
    let (_, after) = log
        .split_once("daemon signalled; stopping")
        .expect("the daemon logged the signal");
    assert!(
        !after.contains("search index behind") && !after.contains("rebuilding the search index"),
        "{after}"
    );
}

/// One LSP message, framed.
fn lsp_frame(message: Value) -> Vec<u8> {
    let body = message.to_string();
    format!("Content-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
}

#[tokio::test]
async fn clients_end_when_their_session_ends_though_stdin_stays_open() {
    use tokio::io::AsyncWriteExt;
    let home = TestHome::new();
    let _guard = DaemonGuard(&home);
    let ws = home.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();

    // An LSP client that says `exit` (the spec's last word) and keeps its pipe open.
    let mut lsp = home
        .command()
        .arg("lsp")
        .current_dir(&ws)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = lsp.stdin.take().unwrap();
    for m in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {}}}),
        json!({"jsonrpc": "2.0", "method": "initialized", "params": {}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "shutdown"}),
        json!({"jsonrpc": "2.0", "method": "exit"}),
    ] {
        stdin.write_all(&lsp_frame(m)).await.unwrap();
    }
    stdin.flush().await.unwrap();
    assert!(exits_within(&mut lsp).await.success());
    drop(stdin);

    // An MCP client whose daemon is stopped under it.
    let mut mcp = home
        .command()
        .arg("mcp")
        .current_dir(&ws)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdin = mcp.stdin.take().unwrap();
    wait_until(|| status(&home)["clients"] == 1, "the mcp session").await;
    let out = home
        .std_command()
        .args(["daemon", "stop"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exits_within(&mut mcp).await;
    drop(stdin);
}

async fn exits_within(child: &mut tokio::process::Child) -> std::process::ExitStatus {
    tokio::time::timeout(std::time::Duration::from_secs(10), child.wait())
        .await
        .expect("the client did not exit")
        .unwrap()
}
