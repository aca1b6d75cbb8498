//! The daemon's own faults, each ending with nothing acknowledged lost and a clear message:
//! `kill -9` under load from agents through `tandem mcp` (the load generator of
//! `benches/common/load.rs`), the disk filling up mid-write (`RLIMIT_FSIZE`), and a
//! corrupt index, `format.json` or sled database.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

#[path = "../../benches/common/load.rs"]
mod load;
use load::{Agent, Ledger, verify_entries, verify_tasks};

use crate::util::{DaemonGuard, TestHome, lock_pid, poll, repo_with, succeeds};

/// The agents of the kill test, and how many entries they must have acknowledged before it.
const AGENTS: usize = 4;
const BEFORE_KILL: usize = 150;

/// `tandem mcp` through the home's daemon (started when none runs) for `workspace`.
async fn via_daemon(home: &TestHome, name: &str, workspace: &Path) -> Agent {
    let mut cmd = home.command();
    cmd.arg("mcp")
        .arg("--workspace")
        .arg(workspace)
        .env("TANDEM_DAEMON_IDLE_SECS", "60");
    Agent::stdio(name, cmd).await.unwrap()
}

/// Every acknowledged task through a fresh `cli` session: `tandem tasks --all --json`.
fn lost_tasks(home: &TestHome, ledger: &Ledger) -> Vec<String> {
    let mut cmd = home.std_command();
    cmd.args(["tasks", "--all", "--json"]);
    let workflows = serde_json::from_str(&succeeds(cmd)).unwrap();
    verify_tasks(&workflows, &ledger.tasks.lock().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_of_the_daemon_under_load_loses_nothing_acknowledged() {
    let home = TestHome::new();
    let _daemon = DaemonGuard(&home);
    let ws = home.path().join("work");
    repo_with(&ws, &[("src/lib.rs", "pub fn f() {}\n")]);
    let ledger = Arc::new(Ledger::default());
    let until = Instant::now() + Duration::from_secs(60);
    let mut work = tokio::task::JoinSet::new();
    for i in 0..AGENTS {
        let (agent, ledger) = (
            via_daemon(&home, &format!("killa{i}"), &ws).await,
            ledger.clone(),
        );
        work.spawn(async move { agent.work(&ledger, until, usize::MAX).await });
    }
    let daemon = poll("the daemon and the first acknowledged entries", 60, || {
        let acked = ledger.entries.lock().unwrap().len();
        match lock_pid(&home) {
            Some(pid) if acked >= BEFORE_KILL => Ok(pid),
            pid => Err(format!("daemon {pid:?}, {acked} entries acknowledged")),
        }
    });
    let killed = std::process::Command::new("kill")
        .args(["-9", &daemon.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    // Every agent's session ends with the daemon: an error, not a hang.
    while let Some(done) = work.join_next().await {
        assert!(done.unwrap().is_err(), "an agent went on after the kill");
    }
    let before = ledger.acked_entries().len();
    assert!(before >= BEFORE_KILL);

    // The agents reconnect: the next `tandem mcp` starts a new daemon, which repairs the
    // index from sled; they go on working.
    let again = via_daemon(&home, "killb", &ws).await;
    again
        .work(&ledger, Instant::now() + Duration::from_secs(60), 10)
        .await
        .unwrap();
    again.close().await;
    assert_ne!(lock_pid(&home), Some(daemon));

    let fresh = via_daemon(&home, "verify", &ws).await;
    let lost = verify_entries(&fresh, &ledger.acked_entries()).await;
    fresh.close().await;
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged entries lost or unsearchable: {lost:#?}",
        lost.len(),
        before + 10
    );
    let lost = lost_tasks(&home, &ledger);
    assert!(lost.is_empty(), "{lost:#?}");
}

/// Adds `n` entries through `tandem mcp --standalone` (closed cleanly: the index committed):
/// their acknowledgements.
async fn seed(home: &TestHome, n: usize) -> Vec<load::AckedEntry> {
    let ledger = Ledger::default();
    let agent = Agent::stdio("seed", standalone(home)).await.unwrap();
    agent
        .work(&ledger, Instant::now() + Duration::from_secs(60), n)
        .await
        .unwrap();
    agent.close().await;
    ledger.acked_entries()
}

/// `tandem mcp --standalone`: the data dir opened in that process.
fn standalone(home: &TestHome) -> tokio::process::Command {
    let mut cmd = home.command();
    cmd.args(["mcp", "--standalone", "--workspace"])
        .arg(home.path());
    cmd
}

/// Each file under `dir` cut to half its length.
fn truncate_files(dir: &Path) -> usize {
    let mut cut = 0;
    for file in std::fs::read_dir(dir).unwrap() {
        let path = file.unwrap().path();
        let len = std::fs::metadata(&path).unwrap().len();
        if path.is_file() && len > 1 {
            std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .unwrap()
                .set_len(len / 2)
                .unwrap();
            cut += 1;
        }
    }
    cut
}

#[tokio::test]
async fn a_truncated_index_is_rebuilt_from_sled() {
    let home = TestHome::new();
    let acked = seed(&home, 30).await;
    let index = home.tandem_home().join("index/memory");
    assert!(truncate_files(&index) > 2, "the index has files to cut");

    let agent = Agent::stdio("after", standalone(&home)).await.unwrap();
    let lost = verify_entries(&agent, &acked).await;
    agent.close().await;
    assert!(lost.is_empty(), "{lost:#?}");
    let log = home.log();
    assert!(
        log.contains("rebuilding the search index"),
        "the rebuild is logged with its reason"
    );
}

/// A data dir that must be refused, and is, saying `reason` (exit 1, no panic): by
/// `tandem memory search` (in-process), by `tandem daemon`, and by an agent's `tandem mcp`,
/// which starts that daemon detached and says why at once.
fn assert_refused(home: &TestHome, reason: &str) {
    for (args, prefix) in [
        (&["memory", "search", "load"][..], "tandem: "),
        (&["daemon"][..], "tandem: "),
        (&["mcp"][..], "tandem: the tandem daemon cannot start: "),
    ] {
        let out = home
            .std_command()
            .args(args)
            .current_dir(home.path())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "tandem {args:?}: {stderr}");
        assert!(
            stderr.starts_with(prefix) && stderr.contains(reason),
            "tandem {args:?}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

#[tokio::test]
async fn a_corrupt_or_foreign_format_file_is_refused_with_the_reason() {
    let home = TestHome::new();
    let _daemon = DaemonGuard(&home);
    let acked = seed(&home, 3).await;
    let format = home.tandem_home().join("format.json");
    let original = std::fs::read_to_string(&format).unwrap();
    for (text, reason) in [
        (
            "{\"format\": 1, \"created_by\"",
            "format.json: EOF while parsing".to_string(),
        ),
        (
            "{\"name\": \"another program\"}",
            "missing field `format`".to_string(),
        ),
        (
            "{\"format\": 99, \"created_by\": \"tandem 99\"}",
            format!(
                "has format 99, newer than this tandem understands ({}); upgrade tandem",
                tandem_core::store::FORMAT_VERSION
            ),
        ),
    ] {
        std::fs::write(&format, text).unwrap();
        assert_refused(&home, &reason);
        assert_eq!(
            std::fs::read_to_string(&format).unwrap(),
            text,
            "the file is left as it was"
        );
    }
    std::fs::write(&format, original).unwrap();
    let agent = Agent::stdio("after", standalone(&home)).await.unwrap();
    let lost = verify_entries(&agent, &acked).await;
    agent.close().await;
    assert!(lost.is_empty(), "{lost:#?}");
}

#[tokio::test]
async fn a_sled_database_of_a_newer_format_is_refused_with_the_reason() {
    let home = TestHome::new();
    let _daemon = DaemonGuard(&home);
    seed(&home, 3).await;
    // sled's own record of its format: `version: MAJOR.MINOR` among its parameters.
    let conf = home.tandem_home().join("db/conf");
    let text = std::fs::read(&conf).unwrap();
    let text = String::from_utf8_lossy(&text[..text.len() - 4]).into_owned();
    assert!(text.contains("version: 0.34"), "{text}");
    let newer = text.replace("version: 0.34", "version: 0.99");
    std::fs::write(&conf, [newer.as_bytes(), &[0; 4]].concat()).unwrap();
    assert_refused(&home, "created using pagecache version 0.99");
}

/// The largest file under `dir` (recursively), in bytes.
fn largest_file(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| {
            if p.is_dir() {
                largest_file(&p)
            } else {
                p.metadata().unwrap().len()
            }
        })
        .max()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_fails_the_write_keeps_earlier_data_and_serves_reads() {
    let home = TestHome::new();
    let _daemon = DaemonGuard(&home);
    let acked = seed(&home, 10).await;
    // The disk is "full" 1 MiB (two of sled's segments) past the largest file the data dir holds now: the daemon
    // runs under RLIMIT_FSIZE (util-linux's prlimit), so a write past it fails with EFBIG.
    // A full disk sends no signal: SIGXFSZ is ignored (and stays so through exec).
    let limit = largest_file(&home.tandem_home()) + 1024 * 1024;
    let mut cmd = std::process::Command::new("sh");
    home.isolate(&mut cmd);
    cmd.args([
        "-c",
        "trap '' XFSZ; exec prlimit --fsize=\"$0\" -- \"$1\" daemon",
    ])
    .arg(limit.to_string())
    .arg(crate::util::tandem_bin())
    .env("TANDEM_DAEMON_IDLE_SECS", "60")
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::null());
    let mut daemon = tokio::process::Command::from(cmd)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let socket = home.tandem_home().join("tandem.sock");
    poll("the limited daemon's socket", 30, || {
        socket.exists().then_some(()).ok_or("no socket".to_string())
    });

    let agent = via_daemon(&home, "full", home.path()).await;
    let ledger = Ledger::default();
    // Text that does not compress (sled compresses its pages): 16 KB of pseudo-random letters.
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut big = || -> String {
        (0..16 * 1024)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                char::from(b'a' + (state % 26) as u8)
            })
            .collect()
    };
    let mut fillers = Vec::new();
    let mut failure = None;
    for i in 0..1000 {
        let args = json!({"type": "reference", "title": format!("Filler {i}"), "content": big()});
        match agent.call(&ledger, "rekall_add", args).await {
            Ok(added) => fillers.push(added["id"].as_str().unwrap().to_string()),
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    let failure = failure.expect("the disk filled up within 16 MB of adds");
    assert!(
        failure.contains("INTERNAL_ERROR")
            && failure
                .contains("the disk is full or a file-size limit is reached (file too large)"),
        "{failure}"
    );
    // Reads still work, in this session and a new one, and find what was there.
    let lost = verify_entries(&agent, &acked).await;
    assert!(lost.is_empty(), "{lost:#?}");
    agent.close().await;
    let reader = via_daemon(&home, "reader", home.path()).await;
    let lost = verify_entries(&reader, &acked).await;
    assert!(lost.is_empty(), "{lost:#?}");
    reader.close().await;
    assert!(
        daemon.try_wait().unwrap().is_none(),
        "the daemon still runs"
    );

    // Room again (a daemon with no limit): every acknowledged write is there.
    let _ = home
        .std_command()
        .args(["daemon", "stop"])
        .output()
        .unwrap();
    let _ = daemon.wait().await;
    let after = via_daemon(&home, "after", home.path()).await;
    let lost = verify_entries(&after, &acked).await;
    assert!(lost.is_empty(), "{lost:#?}");
    for (i, id) in fillers.iter().enumerate() {
        let shown = after
            .call(&ledger, "rekall_show", json!({"id": id}))
            .await
            .unwrap();
        assert_eq!(shown["title"], format!("Filler {i}"));
    }
    after.close().await;
}
