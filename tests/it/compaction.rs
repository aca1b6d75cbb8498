//! The data dir's database compacted: by the daemon when it exits idle, and by
//! `tandem memory compact`, with the binary as users run it.

use serde_json::json;
use tandem_core::store::{Store, dir_size};

use crate::util::{DaemonGuard, TestHome, daemon_pid, is_alive, poll, succeeds, succeeds_json};

const CHURN: &str = "test.churn";

/// Leaves sled's files much larger than what they hold, as adds in a burst do: records
/// written without a pause until the files pass 40 MB, nine in ten of them then removed.
/// Returns what the tree holds.
fn churn(home: &TestHome) -> Vec<(Vec<u8>, Vec<u8>)> {
    churn_with(home, 1_000)
}

/// [`churn`] with records of `len` bytes.
fn churn_with(home: &TestHome, len: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
    let store = Store::open(&home.tandem_home()).unwrap();
    let tree = store.db().open_tree(CHURN).unwrap();
    let db = home.tandem_home().join("db");
    let mut written = 0u32;
    while dir_size(&db) < 40 << 20 {
        for _ in 0..2_000 {
            tree.insert(written.to_be_bytes(), vec![written as u8; len])
                .unwrap();
            written += 1;
        }
        store.flush().unwrap();
    }
    for i in (0..written).filter(|i| i % 10 != 0) {
        tree.remove(i.to_be_bytes()).unwrap();
    }
    store.flush().unwrap();
    held(&tree)
}

fn held(tree: &sled::Tree) -> Vec<(Vec<u8>, Vec<u8>)> {
    tree.iter()
        .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())).unwrap())
        .collect()
}

fn churned_tree(home: &TestHome) -> Vec<(Vec<u8>, Vec<u8>)> {
    let store = Store::open(&home.tandem_home()).unwrap();
    held(&store.db().open_tree(CHURN).unwrap())
}

fn gone(pid: u32, what: &str) {
    poll(what, 120, || {
        if is_alive(pid) {
            Err(format!("pid {pid} runs"))
        } else {
            Ok(())
        }
    });
}

fn db_size(home: &TestHome) -> u64 {
    dir_size(&home.tandem_home().join("db"))
}

#[tokio::test]
async fn an_idle_daemon_gives_back_what_a_burst_left() {
    let home = TestHome::new();
    let _guard = DaemonGuard(&home);
    let ws = home.path().join("ws");
    let kept = churn(&home);
    let before = db_size(&home);
    // A session that writes, then leaves: the daemon exits after a second alone.
    let agent = home.mcp_daemon(&ws, 1).await;
    let added = agent
        .ok(
            "rekall_add",
            json!({"type": "pitfall", "title": "Compaction keeps entries",
                   "content": "An entry written before the daemon compacts is found after."}),
        )
        .await;
    let daemon = daemon_pid(&home);
    agent.close().await;
    // The lock file is no witness: the compaction takes the data dir again, and writes its
    // pid there again.
    gone(daemon, "the idle daemon compacts and exits");
    let after = db_size(&home);
    assert!(after * 3 < before, "sled's files {before} B → {after} B");
    let log = home.log();
    assert!(log.contains("compacted the database"), "{log}");
    assert!(!home.tandem_home().join("db.compacting").exists());
    assert_eq!(churned_tree(&home), kept);
    // Not worth doing again: the next idle exit leaves the files as they are, without
    // reading the records again (the files have not grown since the last count).
    let agent = home.mcp_daemon(&ws, 1).await;
    let found = agent
        .ok("rekall_search", json!({"query": "compaction entries"}))
        .await;
    assert_eq!(found["results"][0]["id"], added["id"]);
    let daemon = daemon_pid(&home);
    agent.close().await;
    gone(daemon, "the idle daemon exits");
    let log = home.log();
    assert!(
        log.contains("not grown enough since its last count"),
        "{log}"
    );
    assert_eq!(churned_tree(&home), kept);
}

#[tokio::test]
async fn memory_compact_rewrites_the_database_unless_a_daemon_holds_it() {
    let home = TestHome::new();
    let _guard = DaemonGuard(&home);
    let kept = churn(&home);
    let mut add = home.std_command();
    add.args([
        "memory",
        "add",
        "-t",
        "config",
        "--title",
        "Compacted config",
    ])
    .args(["--content", "Survives a compaction."]);
    let added = succeeds_json(add);
    let before = db_size(&home);

    let mut compact = home.std_command();
    compact.args(["memory", "compact"]);
    let c = succeeds_json(compact);
    assert_eq!(c["rewritten"], true, "{c}");
    assert_eq!(c["before"], before);
    let after = c["after"].as_u64().unwrap();
    assert_eq!(after, db_size(&home));
    assert!(after * 3 < before, "{c}");
    assert!(c["record_bytes"].as_u64().unwrap() < after, "{c}");
    assert_eq!(churned_tree(&home), kept);
    let mut search = home.std_command();
    search.args(["memory", "search", "compacted config"]);
    assert_eq!(succeeds_json(search)["results"][0]["id"], added["id"]);

    // A daemon holds the data dir: the command says what to do, and changes nothing.
    let agent = home.mcp_daemon(&home.path().join("ws"), 60).await;
    agent.ok("rekall_help", json!({})).await;
    let out = home
        .std_command()
        .args(["memory", "compact"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("is held by pid") && stderr.contains("tandem daemon stop"),
        "{stderr}"
    );
    assert!(!home.tandem_home().join("db.compacting").exists());
    let found = agent
        .ok("rekall_search", json!({"query": "compacted config"}))
        .await;
    assert_eq!(found["results"][0]["id"], added["id"]);
    agent.close().await;
}

#[tokio::test]
async fn a_client_that_comes_while_the_idle_daemon_compacts_is_served() {
    let home = TestHome::new();
    let _guard = DaemonGuard(&home);
    let ws = home.path().join("ws");
    // Small records, many of them: the compaction takes a while.
    let kept = churn_with(&home, 60);
    let agent = home.mcp_daemon(&ws, 1).await;
    let added = agent
        .ok(
            "rekall_add",
            json!({"type": "decision", "title": "Served during a compaction",
                   "content": "A client that comes meanwhile is served."}),
        )
        .await;
    let first = daemon_pid(&home);
    agent.close().await;
    let compaction = home.tandem_home().join("db.compacting");
    poll("the idle daemon starts compacting", 60, || {
        if compaction.exists() || !is_alive(first) {
            Ok(())
        } else {
            Err("no compaction yet".into())
        }
    });
    // An agent comes: its daemon waits for the data dir, and asks the compaction to stop.
    let agent = home.mcp_daemon(&ws, 60).await;
    let found = agent
        .ok("rekall_search", json!({"query": "served compaction"}))
        .await;
    assert_eq!(found["results"][0]["id"], added["id"]);
    assert!(!is_alive(first));
    assert!(!compaction.exists());
    assert!(!home.tandem_home().join("db.before-compaction").exists());
    let log = home.log();
    // Which of the two the first daemon did depends on who was quicker (here it gives way
    // within ~20 ms of being asked): either way, the new one serves and nothing is lost.
    assert!(
        log.contains("another process wants the data dir; compacting it another time")
            || log.contains("compacted the database"),
        "{log}"
    );
    agent.close().await;
    let second = daemon_pid(&home);
    let mut stop = home.std_command();
    stop.args(["daemon", "stop"]);
    assert!(stop.status().unwrap().success());
    gone(second, "the second daemon stops");
    assert_eq!(churned_tree(&home), kept);
}

/// A compaction packs the entries' records (`crates/core/src/pack.rs`): every way a user reads them
/// gives what it gave before; an entry written after lives in sled until the next
/// compaction packs it too; a record damaged in the pack is an error that says so, and
/// the other entries still read.
#[test]
fn memory_compact_packs_the_entries_and_they_read_back() {
    let home = TestHome::new();
    {
        let store = std::sync::Arc::new(Store::open(&home.tandem_home()).unwrap());
        let memory =
            tandem_core::memory::Memory::open(store, &tandem_core::memory::NoProgress).unwrap();
        // Past the first dictionary's training: plain and compressed records both.
        memory
            .import(&mut crate::memory_codec::jsonl(0, 1_500).as_bytes())
            .unwrap();
    }
    let run = |args: &[&str]| {
        let mut cmd = home.std_command();
        cmd.args(args);
        cmd
    };
    let export = || succeeds(run(&["memory", "export"]));
    let before = export();
    let pack = home.tandem_home().join("db").join(tandem_core::pack::FILE);
    assert!(!pack.exists());

    let c = succeeds_json(run(&["memory", "compact"]));
    assert_eq!(c["rewritten"], true, "{c}");
    assert!(pack.exists());
    assert!(
        c["after"].as_u64().unwrap() < c["before"].as_u64().unwrap(),
        "{c}"
    );
    assert_eq!(export(), before);
    let found = succeeds_json(run(&["memory", "search", "parser drops writes (43)"]));
    let hit = &found["results"][0];
    assert_eq!(
        hit["title"], "The parser drops writes under load (43)",
        "{found}"
    );
    let id = hit["id"].as_str().unwrap().to_string();
    // Shown: its access is counted, and the entry written into sled again, whole.
    let shown = succeeds_json(run(&["memory", "show", &id]));
    assert!(
        shown["content"].as_str().unwrap().contains("build 43"),
        "{shown}"
    );
    let added = succeeds_json(run(&[
        "memory",
        "add",
        "-t",
        "decision",
        "--title",
        "Packed after the first compaction",
        "--content",
        "Written into sled, packed by the next compaction.",
    ]));
    let between = export();
    assert_ne!(between, before);
    assert_eq!(
        succeeds_json(run(&["memory", "show", &id]))["access_count"],
        2
    );

    let again = succeeds_json(run(&["memory", "compact"]));
    assert_eq!(again["rewritten"], true, "{again}");
    // Each shown again above counted one more access; nothing else changed.
    let after = export();
    assert_eq!(after.lines().count(), 1_501, "1,500 imported and one added");
    assert_eq!(
        after
            .lines()
            .filter(|l| !l.contains(&id))
            .collect::<Vec<_>>(),
        between
            .lines()
            .filter(|l| !l.contains(&id))
            .collect::<Vec<_>>()
    );
    let shown = succeeds_json(run(&["memory", "show", added["id"].as_str().unwrap()]));
    assert_eq!(shown["title"], "Packed after the first compaction");

    // A byte of a record changed on disk: that entry is an error naming the pack.
    let pointer = {
        let store = Store::open(&home.tandem_home()).unwrap();
        let entries = store.db().open_tree("memory.entries").unwrap();
        let value = entries.get(&id).unwrap().unwrap();
        assert!(tandem_core::pack::is_pointer(&value));
        u64::from_le_bytes(value[1..9].try_into().unwrap())
    };
    let mut bytes = std::fs::read(&pack).unwrap();
    bytes[pointer as usize + 5] ^= 0x20;
    std::fs::write(&pack, &bytes).unwrap();
    let out = run(&["memory", "show", &id]).output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("fails its checksum in entries.pack"),
        "{stderr}"
    );
    let shown = succeeds_json(run(&["memory", "show", added["id"].as_str().unwrap()]));
    assert_eq!(shown["title"], "Packed after the first compaction");
    // A compaction reads every record: it names the damaged one and changes nothing.
    let out = run(&["memory", "compact"]).output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("the record of entry {id} fails its checksum")),
        "{stderr}"
    );
    assert_eq!(std::fs::read(&pack).unwrap(), bytes);
    assert!(!home.tandem_home().join("db.compacting").exists());
    let shown = succeeds_json(run(&["memory", "show", added["id"].as_str().unwrap()]));
    assert_eq!(shown["title"], "Packed after the first compaction");

    // The repair: the entry imported again from an export made before, whatever its time.
    let line: String = after.lines().find(|l| l.contains(&id)).unwrap().into();
    let file = home.path().join("repair.jsonl");
    std::fs::write(&file, format!("{line}\n")).unwrap();
    let imported = succeeds_json(run(&["memory", "import", file.to_str().unwrap()]));
    assert_eq!(imported["entries_updated"], 1, "{imported}");
    let shown = succeeds_json(run(&["memory", "show", &id]));
    assert!(
        shown["content"].as_str().unwrap().contains("build 43"),
        "{shown}"
    );
    let found = succeeds_json(run(&["memory", "search", "parser drops writes (43)"]));
    assert_eq!(found["results"][0]["id"], id.as_str(), "{found}");
    let hits = found["results"].as_array().unwrap();
    assert_eq!(
        hits.iter().filter(|h| h["id"] == id.as_str()).count(),
        1,
        "one document for the entry: {found}"
    );
    let log = home.log();
    assert!(
        log.contains(&format!("entry {id} could not be read")),
        "{log}"
    );
    // Its level is logged (the compactions said so), and the index was not found short.
    assert!(log.contains("compacted the database"), "{log}");
    assert!(!log.contains("rebuilding the search index"), "{log}");
    let again = succeeds_json(run(&["memory", "compact"]));
    assert_eq!(again["rewritten"], true, "{again}");
    assert_eq!(export().lines().count(), 1_501);
}
