//! The `tandem memory` CLI, run as a user would.

use std::process::Output;

use serde_json::Value;

use crate::util::{TestHome, succeeds, succeeds_json};

fn run(home: &TestHome, args: &[&str]) -> Output {
    home.std_command().args(args).output().unwrap()
}

fn command(home: &TestHome, args: &[&str]) -> std::process::Command {
    let mut cmd = home.std_command();
    cmd.args(args);
    cmd
}

fn ok(home: &TestHome, args: &[&str]) -> String {
    succeeds(command(home, args))
}

fn json(home: &TestHome, args: &[&str]) -> Value {
    succeeds_json(command(home, args))
}

#[test]
fn add_search_show_link_suggest_as_a_user() {
    let home = TestHome::new();
    let a = json(
        &home,
        &[
            "memory",
            "add",
            "-t",
            "bug",
            "--title",
            "Fix CORS Safari header",
            "--content",
            "Safari rejects CORS preflight headers.",
            "--tag",
            "CORS,Safari",
        ],
    );
    assert_eq!(a["tags"], serde_json::json!(["cors", "safari"]));
    let a_id = a["id"].as_str().unwrap();
    let b = json(
        &home,
        &[
            "memory",
            "add",
            "-t",
            "bug",
            "--title",
            "CORS preflight rejected by Safari",
            "--content",
            "Safari rejects the CORS preflight headers again.",
            "--project",
            "web",
        ],
    );
    assert_eq!(b["similar_entries"][0]["id"], a_id);

    let table = ok(&home, &["memory", "search", "safari cors"]);
    assert!(
        table.contains("Fix CORS Safari header") && table.contains("2 of 2 matching entries"),
        "{table}"
    );
    let found = json(&home, &["memory", "search", "cors", "--project", "web"]);
    assert_eq!(found["total"], 1);

    let shown = ok(&home, &["memory", "show", &a_id[..12]]);
    assert!(shown.starts_with("# Fix CORS Safari header"), "{shown}");

    let suggestions = json(&home, &["memory", "suggestions"]);
    let sid = suggestions["links"]["suggestions"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let accepted = json(&home, &["memory", "accept", &sid]);
    assert_eq!(accepted["suggestion_type"], "link");
    let shown = json(&home, &["memory", "show", a_id]);
    assert_eq!(shown["links"]["incoming"].as_array().unwrap().len(), 1);

    let linked = ok(
        &home,
        &[
            "memory",
            "link",
            a_id,
            b["id"].as_str().unwrap(),
            "--relation",
            "contradicts",
        ],
    );
    assert!(linked.contains("-[contradicts]->"), "{linked}");
}

#[test]
fn errors_exit_1_with_the_code_on_stderr() {
    let home = TestHome::new();
    check_errors(&home);
    // An unknown enum value is a usage error (clap), exit 2, naming the allowed values.
    let out = run(&home, &["memory", "add", "-t", "bugg", "--title", "x"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("pitfall"));
}

/// Failing commands exit 1 with `tandem: message (CODE)` on stderr and nothing on stdout,
/// whether they run in-process or through a daemon.
pub fn check_errors(home: &TestHome) {
    let cases: &[(&[&str], &str)] = &[
        (
            &["memory", "show", "01ARZ3NDEKTSV4RRFFQ69G5FAV"],
            "ENTRY_NOT_FOUND",
        ),
        (
            &["memory", "accept", "01ARZ3NDEKTSV4RRFFQ69G5FAV"],
            "SUGGESTION_NOT_FOUND",
        ),
        (
            &["tasks", "show", "01ARZ3NDEKTSV4RRFFQ69G5FAV"],
            "TASK_NOT_FOUND",
        ),
        (&["memory", "search", "x", "-n", "50"], "INVALID_ARGUMENT"),
        (
            &["memory", "add", "-t", "bug", "--title", &"t".repeat(101)],
            "INVALID_ARGUMENT",
        ),
    ];
    for (args, code) in cases {
        let out = run(home, args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.starts_with("tandem: ") && stderr.trim_end().ends_with(&format!("({code})")),
            "{args:?}: {stderr}"
        );
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn export_import_and_reindex_between_homes() {
    let alice = TestHome::new();
    ok(
        &alice,
        &[
            "memory",
            "add",
            "-t",
            "decision",
            "--title",
            "Use sled",
            "--content",
            "Pure Rust storage.",
        ],
    );
    ok(
        &alice,
        &[
            "memory",
            "add",
            "-t",
            "pitfall",
            "--title",
            "Mutex across await",
            "--content",
            "Deadlocks.",
        ],
    );
    let file = alice.path().join("team.jsonl");
    let out = run(&alice, &["memory", "export", file.to_str().unwrap()]);
    assert!(out.status.success());
    assert_eq!(std::fs::read_to_string(&file).unwrap().lines().count(), 2);
    let stdout_export = ok(&alice, &["memory", "export"]);
    assert_eq!(stdout_export.lines().count(), 2);

    let bob = TestHome::new();
    let report = json(&bob, &["memory", "import", file.to_str().unwrap()]);
    assert_eq!(report["entries_added"], 2);
    assert_eq!(json(&bob, &["memory", "search", "sled"])["total"], 1);
    let reindexed = ok(&bob, &["memory", "reindex"]);
    assert_eq!(reindexed.trim(), "indexed 2 entries");
    assert_eq!(json(&bob, &["memory", "search", "deadlocks"])["total"], 1);
}

/// Finding 3 of the security audit: whoever can make Tandem log could fill the disk. A log
/// at its limit is rotated by the next line, and the oldest rotated file dropped. The full
/// files are sparse: their size costs no disk.
#[test]
fn a_full_log_is_rotated_and_the_oldest_dropped() {
    let home = TestHome::new();
    let logs = home.tandem_home().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let full = tandem_core::log_file::Rotation::LOG.max_bytes;
    let names = ["tandem.log", "tandem.log.1", "tandem.log.2", "tandem.log.3"];
    for name in names {
        std::fs::write(logs.join(name), format!("{name}\n")).unwrap();
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(logs.join(name))
            .unwrap();
        file.set_len(full).unwrap();
    }
    let mut cmd = command(&home, &["memory", "search", "anything"]);
    cmd.env("TANDEM_LOG", "debug");
    succeeds(cmd);

    let log = home.log();
    assert!(log.starts_with(|c: char| c.is_ascii_digit()) && log.contains("logging to"));
    assert!((log.len() as u64) < full);
    // Each older file moved one place on; the oldest is gone.
    for (n, was) in names.iter().take(3).enumerate() {
        let path = logs.join(format!("tandem.log.{}", n + 1));
        let text = std::fs::read(&path).unwrap();
        assert!(text.starts_with(format!("{was}\n").as_bytes()), "{path:?}");
        assert_eq!(text.len() as u64, full);
    }
    assert!(!logs.join("tandem.log.4").exists());
}

#[test]
fn data_dir_is_private_and_has_a_format_version() {
    let home = TestHome::new();
    ok(&home, &["memory", "search", "anything"]);
    let dir = home.tandem_home();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
            0o700
        );
    }
    let format: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("format.json")).unwrap()).unwrap();
    assert_eq!(format["format"], tandem_core::store::FORMAT_VERSION);
    assert!(dir.join("logs/tandem.log").exists());
    std::fs::write(
        dir.join("format.json"),
        r#"{"format": 7, "created_by": "tandem 9"}"#,
    )
    .unwrap();
    let out = run(&home, &["memory", "search", "anything"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("format 7, newer than this tandem understands")
    );
}
