//! Downstream servers that misbehave, through the real binary: a server that crashes at
//! start, hangs mid-call, never answers `initialize`, floods stdout (`yes`) or stderr,
//! prints a banner, or answers 100 MiB. Each costs one failed call and a restart (or is cut
//! off for good), the daemon and the other servers go on, memory stays bounded, and no
//! process is left behind: the processes are listed from `/proc`, by an environment
//! variable each server's entry sets, and each pid seen must be gone (exited and reaped).

// The time and CPU the faults cost are printed (figures, not assertions).
#![allow(clippy::print_stdout)]

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::hub::{ok, server, start_daemon, tandem, workspace};
use crate::util::{TestHome, fixture_bin, lock_pid, poll};

/// The variable that marks this test's server processes (its value is the test's home).
const MARKER: &str = "TANDEM_TEST_DOWNSTREAM";

/// A server entry running `command args`, marked as the home's.
fn entry(home: &TestHome, command: impl Into<Value>, args: &[&str]) -> Value {
    json!({"command": command.into(), "args": args, "env": {MARKER: home.path()}})
}

fn fixture(home: &TestHome, args: &[&str]) -> Value {
    entry(home, fixture_bin().to_str().unwrap(), args)
}

/// The live processes of this home's servers (their environment has the marker).
fn marked(home: &TestHome) -> Vec<u32> {
    let wanted = format!("{MARKER}={}", home.path().display());
    pids()
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .unwrap_or_default()
                .split(|&b| b == 0)
                .any(|var| var == wanted.as_bytes())
        })
        .collect()
}

fn pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|p| p.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// A process's command name, state letter, parent and CPU time (user + system, in clock
/// ticks), from `/proc/PID/stat`; `None` once it is gone (reaped).
fn stat(pid: u32) -> Option<(String, String, u32, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (head, rest) = stat.rsplit_once(')')?;
    let comm = head.split_once('(')?.1.to_string();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = fields[11].parse::<u64>().ok()? + fields[12].parse::<u64>().ok()?;
    Some((comm, fields[0].to_string(), fields[1].parse().ok()?, ticks))
}

/// The children of `parent`, zombies included: (pid, command name).
fn children(parent: u32) -> Vec<(u32, String)> {
    pids()
        .into_iter()
        .filter_map(|pid| {
            let (comm, _, ppid, _) = stat(pid)?;
            (ppid == parent).then_some((pid, comm))
        })
        .collect()
}

/// Waits until each of `pids` has exited and been reaped (no `/proc` entry, not even a
/// zombie's).
fn all_gone(what: &str, pids: &[u32]) {
    poll(what, 10, || {
        let left: Vec<_> = pids.iter().filter_map(|&p| Some((p, stat(p)?))).collect();
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("{left:?}"))
        }
    });
}

/// Stops the daemon and waits until it and every process of its servers are gone and
/// reaped (before the test's `DaemonGuard`, whose `kill -9` would leave them orphans).
fn stop_daemon(home: &TestHome, daemon: u32) {
    let left = marked(home);
    let stopped = home
        .std_command()
        .args(["daemon", "stop"])
        .output()
        .unwrap();
    assert!(stopped.status.success());
    all_gone("the daemon", &[daemon]);
    all_gone("the servers' processes after the daemon", &left);
}

/// CPU seconds from clock ticks (100 a second on Linux).
fn seconds(ticks: u64) -> f64 {
    ticks as f64 / 100.0
}

/// The CPU time of this test process's children that it waited for (`cutime + cstime`).
fn children_cpu() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    fields[13].parse::<u64>().unwrap() + fields[14].parse::<u64>().unwrap()
}

/// A line of `/proc/PID/status` in kB (`VmHWM`: the peak resident size).
fn status_kb(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with(key)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn prompt_commands(prompts: &Value) -> Vec<&str> {
    let list = prompts.as_array().unwrap();
    list.iter()
        .map(|p| p["command"].as_str().unwrap())
        .collect()
}

fn last_error(report: &Value, name: &str) -> String {
    server(report, name)["last_error"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// `tandem ARGS` run as a child while the marked processes it starts are noted: their pids.
fn run_noting_processes(home: &TestHome, dir: &Path, args: &[&str]) -> (String, Vec<u32>) {
    let mut child = home
        .std_command()
        .args(args)
        .current_dir(dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut seen = Vec::new();
    while child.try_wait().unwrap().is_none() {
        for pid in marked(home) {
            if !seen.contains(&pid) {
                seen.push(pid);
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "tandem {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (String::from_utf8(out.stdout).unwrap(), seen)
}

/// The report: one good server, one that never answers (`sleep`), one that floods
/// stdout with lines that are not JSON-RPC (`yes`). The listings answer with the good
/// server's prompts and mark the others; the flood is cut off, for good.
#[test]
fn a_silent_and_a_flooding_server_do_not_hold_up_the_listings() {
    let home = TestHome::new();
    let ws = workspace(
        &home,
        json!({"mcpServers": {
            "good": fixture(&home, &["--name", "good", "--prompts", "2"]),
            "silent": entry(&home, "sleep", &["1000"]),
            "flood": entry(&home, "yes", &[]),
        }}),
    );
    ok(&home, &ws, &["trust", "--yes"]);

    // Without a daemon, as a new user runs it: the servers start in the command's process.
    let cpu = children_cpu();
    let started = Instant::now();
    let (listed, seen) = run_noting_processes(&home, &ws, &["prompts"]);
    println!(
        "tandem prompts (no daemon): {:.2} s, {:.2} s of CPU",
        started.elapsed().as_secs_f64(),
        seconds(children_cpu() - cpu)
    );
    assert!(listed.contains("/good:prompt-000") && listed.contains("/good:prompt-001"));
    assert!(listed.contains("silent (starting)"), "{listed}");
    assert!(
        listed.contains("flood (failed): it wrote 100 lines in a row on stdout that are not JSON-RPC messages (the first: \"y\")"),
        "{listed}"
    );
    assert!(!seen.is_empty(), "the servers' processes were seen");
    all_gone("the command's servers to be gone", &seen);

    // Through the daemon: the same, and the flood is not started again.
    let _daemon = start_daemon(&home);
    let daemon = lock_pid(&home).unwrap();
    let prompts = ok(&home, &ws, &["prompts", "--json"]);
    assert_eq!(
        prompt_commands(&prompts),
        ["/good:prompt-000", "/good:prompt-001"]
    );
    let report = ok(&home, &ws, &["servers", "--json"]);
    assert_eq!(server(&report, "good")["state"], "ready", "{report:#}");
    let silent = &server(&report, "silent")["state"];
    assert!(silent == "starting" || silent == "restarting", "{report:#}");
    assert_eq!(server(&report, "flood")["state"], "failed", "{report:#}");
    let flood = last_error(&report, "flood");
    assert!(
        flood.contains("it wrote 100 lines in a row on stdout that are not JSON-RPC messages"),
        "{flood}"
    );
    let (_, _, stderr) = tandem(&home, &ws, &["prompt", "/flood:anything"]);
    assert!(
        stderr.contains("(SERVER_UNAVAILABLE)")
            && stderr.contains("not JSON-RPC")
            && stderr.contains("it starts again when its entry in"),
        "{stderr}"
    );
    let yes: Vec<_> = children(daemon)
        .into_iter()
        .filter(|(_, comm)| comm == "yes")
        .collect();
    assert!(yes.is_empty(), "no yes process is left: {yes:?}");
    let (_, _, _, ticks) = stat(daemon).unwrap();
    println!("daemon CPU after its listings: {:.2} s", seconds(ticks));
    stop_daemon(&home, daemon);
}

/// A server that exits at start, one that never answers `initialize`, and one that hangs
/// in a call (started through a shell, so its process has a child of its own): each is
/// restarted after a backoff, its processes killed and reaped, the good server unaffected;
/// when the daemon exits, none of their processes is left.
#[test]
fn crashing_hanging_and_mute_servers_restart_and_leave_no_process() {
    let home = TestHome::new();
    let hang = format!(
        "{} --name hang --hang-on-get --prompts 1; echo unreachable",
        fixture_bin().display()
    );
    let mut hang = entry(&home, "sh", &["-c", &hang]);
    hang["timeout_ms"] = json!(500);
    let mut mute = fixture(&home, &["--name", "mute", "--no-initialize"]);
    mute["start_timeout_ms"] = json!(1000);
    let ws = workspace(
        &home,
        json!({"mcpServers": {
            "good": fixture(&home, &["--name", "good", "--prompts", "2"]),
            "crash": fixture(&home, &["--name", "crash", "--exit-at-start"]),
            "mute": mute,
            "hang": hang,
        }}),
    );
    ok(&home, &ws, &["trust", "--yes"]);
    let _daemon = start_daemon(&home);
    let daemon = lock_pid(&home).unwrap();

    let report = poll("crash and mute to fail", 20, || {
        let report = ok(&home, &ws, &["servers", "--json"]);
        let quiet = |name| last_error(&report, name).is_empty();
        if quiet("crash") || quiet("mute") || server(&report, "hang")["state"] != "ready" {
            Err(format!("{report:#}"))
        } else {
            Ok(report)
        }
    });
    let crash = last_error(&report, "crash");
    // Its exit status, or the closed pipe of `initialize` when it was gone before that was
    // written; its last words either way.
    assert!(
        (crash.contains("it exited (exit status: 1)")
            || crash.contains("the server closed the connection"))
            && crash.contains("exiting at start"),
        "its exit and its last words: {crash}"
    );
    let mute = last_error(&report, "mute");
    assert!(mute.contains("did not start within 1.0s"), "{mute}");
    for name in ["crash", "mute"] {
        let state = &server(&report, name)["state"];
        assert!(
            state == "restarting" || state == "starting",
            "{name} is retried: {report:#}"
        );
    }

    // The hang: the shell and the fixture it started.
    let before = marked(&home);
    let (hang_sh, hang_fixture) = {
        let sh = children(daemon)
            .into_iter()
            .find(|(_, comm)| comm == "sh")
            .expect("the shell of 'hang' runs")
            .0;
        let fixture = children(sh)
            .into_iter()
            .next()
            .expect("the fixture runs under the shell")
            .0;
        (sh, fixture)
    };
    assert!(before.contains(&hang_sh) && before.contains(&hang_fixture));
    let (hung, _, stderr) = tandem(&home, &ws, &["prompt", "/hang:hang"]);
    assert!(!hung);
    assert!(
        stderr.contains("did not answer prompts/get within 0.5s")
            && stderr.contains("(SERVER_TIMEOUT)"),
        "{stderr}"
    );
    all_gone(
        "the hung server's shell and its child",
        &[hang_sh, hang_fixture],
    );
    let good = ok(&home, &ws, &["prompt", "/good:prompt-000", "--json"]);
    assert!(good.to_string().contains("prompt-000 from good"), "{good}");
    poll("hang to be restarted", 15, || {
        let report = ok(&home, &ws, &["servers", "--json"]);
        match server(&report, "hang")["state"] == "ready" {
            true => Ok(()),
            false => Err(format!("{report:#}")),
        }
    });

    // The daemon exits: every process of its servers goes with it.
    assert!(!marked(&home).is_empty());
    stop_daemon(&home, daemon);
}

/// A 100 MiB answer, asked by an agent through the gateway and from the shell: refused
/// once past the line limit (never buffered whole), the connection restarted, the other
/// server answering meanwhile.
#[tokio::test]
async fn a_huge_answer_is_refused_without_being_buffered() {
    let home = TestHome::new();
    let ws = workspace(
        &home,
        json!({"mcpServers": {
            "good": fixture(&home, &["--name", "good"]),
            "big": fixture(&home, &["--name", "big", "--huge-answer-mb", "100"]),
        }}),
    );
    ok(&home, &ws, &["trust", "--yes"]);
    let _daemon = start_daemon(&home);
    let daemon = lock_pid(&home).unwrap();
    ok(&home, &ws, &["servers", "--json", "--wait", "20"]);
    let agent = home.mcp_daemon(&ws, 60).await;
    let peak = status_kb(daemon, "VmHWM:");

    let huge = agent
        .try_call(
            "mcp_call",
            json!({"server": "big", "tool": "huge", "arguments": {}}),
        )
        .await;
    let said = format!("{huge:?}");
    assert!(
        said.contains("failed during tools/call: it wrote a message of more than 16 MiB on stdout"),
        "{said}"
    );
    let echoed = agent
        .try_call("good__echo", json!({"text": "still here"}))
        .await
        .unwrap();
    assert!(format!("{echoed:?}").contains("good: still here"));
    let grew = status_kb(daemon, "VmHWM:").saturating_sub(peak);
    println!(
        "daemon peak RSS grew by {} MiB for a 100 MiB answer",
        grew / 1024
    );
    assert!(
        grew < 100 * 1024,
        "the answer was not buffered whole: the peak grew by {grew} kB"
    );

    // It comes back, and the same answer from the shell fails the same way.
    let report = poll("big to come back", 15, || {
        let report = ok(&home, &ws, &["servers", "--json"]);
        match server(&report, "big")["state"] == "ready" {
            true => Ok(report),
            false => Err(format!("{report:#}")),
        }
    });
    assert!(server(&report, "big")["last_error"].is_null(), "{report:#}");
    let (got, _, stderr) = tandem(&home, &ws, &["prompt", "/big:huge"]);
    assert!(!got);
    assert!(
        stderr.contains("more than 16 MiB") && stderr.contains("(SERVER_UNAVAILABLE)"),
        "{stderr}"
    );
    agent.close().await;
    stop_daemon(&home, daemon);
}

/// A server that floods stderr, and one that prints a few lines that are not JSON-RPC
/// before it serves: both work. The flood is read at a bounded rate and logged at a
/// bounded rate.
#[test]
fn a_stderr_flood_and_a_banner_on_stdout_are_tolerated() {
    let home = TestHome::new();
    let ws = workspace(
        &home,
        json!({"mcpServers": {
            "noisy": fixture(&home, &["--name", "noisy", "--flood-stderr", "--prompts", "1"]),
            "banner": fixture(&home, &["--name", "banner", "--garbage-lines", "3", "--prompts", "1"]),
        }}),
    );
    // Trusting starts the servers in that command's process, which logs to the same file.
    let since = Instant::now();
    ok(&home, &ws, &["trust", "--yes"]);
    let _daemon = start_daemon(&home);
    let daemon = lock_pid(&home).unwrap();
    let report = ok(&home, &ws, &["servers", "--json", "--wait", "20"]);
    for name in ["noisy", "banner"] {
        assert_eq!(server(&report, name)["state"], "ready", "{report:#}");
        let run = ok(
            &home,
            &ws,
            &["prompt", &format!("/{name}:prompt-000"), "--json"],
        );
        assert!(run.to_string().contains(&format!("prompt-000 from {name}")));
    }
    // Let it flood for a few seconds.
    let (_, _, _, before) = stat(daemon).unwrap();
    std::thread::sleep(Duration::from_secs(3));
    let (_, _, _, after) = stat(daemon).unwrap();
    println!(
        "daemon CPU over 3 s of a stderr flood: {:.2} s",
        seconds(after - before)
    );
    let log = home.log();
    let flood_lines = log.lines().filter(|l| l.contains("floods stderr")).count();
    println!(
        "flood lines logged: {flood_lines}; log size {} kB",
        log.len() / 1024
    );
    assert!(flood_lines > 0, "the flood's first lines are logged");
    // At most 50 a second (STDERR_LOGGED_PER_SEC) since the daemon started.
    let bound = 50 * (since.elapsed().as_secs() as usize + 2);
    assert!(
        flood_lines <= bound,
        "{flood_lines} lines logged, more than {bound}"
    );
    assert!(
        log.contains("lines of stderr not logged"),
        "the rest are counted"
    );
    let report = ok(&home, &ws, &["servers", "--json"]);
    assert_eq!(server(&report, "noisy")["state"], "ready", "{report:#}");
    let run = ok(&home, &ws, &["prompt", "/noisy:prompt-000", "--json"]);
    assert!(run.to_string().contains("prompt-000 from noisy"));
    stop_daemon(&home, daemon);
}
