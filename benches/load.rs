//! The load test: one daemon (`tandem serve --http`, its Streamable HTTP face beside its
//! socket) under 8 MCP agents (6 through `tandem mcp` on stdio, 2 over HTTP: one of each
//! protocol generation) and 2 editors (`tandem lsp`), for `--seconds` (default 600) or
//! `--rounds` rounds per client, whichever ends first; loopback only.
//!
//! Each agent adds an entry, finds it by search, shows an older one, and every fifth round
//! runs a task (start, a decision, a milestone, completion). Each editor cites the newest
//! entry in a document and hovers on it, searches workspace symbols, asks for code lenses,
//! `tandem.status` and the task list. Afterwards a fresh MCP session finds every
//! acknowledged entry by id and by search, and `tandem tasks --all --json` (a `cli`
//! session) every acknowledged task, decision and completion.
//!
//! Printed: latency percentiles per operation and face, the daemon's resident memory over
//! time. It fails (exit 1) on any error, any lost write, or anonymous memory that still
//! grows once warm (see [`growth`]). No figure of time is asserted.
//!
//! The HTTP face's rate limit (1,200 requests a minute per token) would throttle two busy
//! agents: the daemon runs with `--rate-limit 1000000000`.
//!
//! `cargo bench --bench load` (release, 10 minutes); `scripts/test` runs
//! `cargo bench --profile dev --bench load -- --seconds 60`.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

#[allow(dead_code)]
#[path = "../tests/it/util.rs"]
mod util;

mod common;
use common::home::{DaemonGuard, Home};
use common::load::{Agent, Ledger, verify_entries, verify_tasks};
use common::lsp::{Editor, file_uri};
use common::{Stats, ms, section};

const STDIO_AGENTS: usize = 6;
const HTTP_AGENTS: usize = 2;
const EDITORS: usize = 2;
/// Once warm (after the first third of the run), the last third's highest anonymous
/// memory may exceed the middle third's by this fraction, plus [`GROWTH_SLACK_KB`]...
const GROWTH_FRACTION: f64 = 0.10;
/// ...for the allocator's and caches' small steps.
const GROWTH_SLACK_KB: u64 = 8 * 1024;

struct Args {
    seconds: u64,
    rounds: usize,
}

fn args() -> Args {
    let mut args = Args {
        seconds: 600,
        rounds: 1_000_000,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().and_then(|v| v.parse().ok());
        match arg.as_str() {
            "--seconds" => args.seconds = value().expect("--seconds N"),
            "--rounds" => args.rounds = value().expect("--rounds N") as usize,
            // `cargo bench` passes --bench to every bench target.
            _ => {}
        }
    }
    args
}

#[tokio::main]
async fn main() {
    let args = args();
    let home = Home::new("tandem-bench-load");
    util::repo_with(
        &home.workspace,
        &[("src/lib.rs", "pub fn f() {}\n"), ("notes.md", "notes\n")],
    );
    let ws = home.workspace.to_str().unwrap().to_string();
    let (mut server, url) = serve(&home, &ws).await;
    let pid = server.id().expect("the server runs");
    // Stops it however the bench ends (the child itself is killed on drop).
    let guard = DaemonGuard {
        home: &home,
        pid: None,
    };
    eprintln!(
        "bench: daemon pid {pid} at {url}; {STDIO_AGENTS} stdio agents, {HTTP_AGENTS} HTTP agents, {EDITORS} editors for {} s",
        args.seconds
    );

    let ledger = Arc::new(Ledger::default());
    let mut agents = Vec::new();
    for i in 0..STDIO_AGENTS {
        let cmd = home.tandem(&["mcp", "--workspace", &ws]);
        agents.push(Agent::stdio(&format!("loads{i}"), cmd).await.unwrap());
    }
    for i in 0..HTTP_AGENTS {
        agents.push(
            Agent::http(&format!("loadh{i}"), &url, i % 2 == 1)
                .await
                .unwrap(),
        );
    }
    let mut editors = Vec::new();
    for _ in 0..EDITORS {
        editors.push(editor(&home, &ws).await);
    }

    let start = Instant::now();
    let until = start + Duration::from_secs(args.seconds);
    let sampler = tokio::spawn(sample_memory(pid, until));
    let mut work = tokio::task::JoinSet::new();
    for agent in agents {
        let ledger = ledger.clone();
        work.spawn(async move {
            let _ = agent.work(&ledger, until, args.rounds).await;
            agent.close().await;
        });
    }
    for (i, mut editor) in editors.into_iter().enumerate() {
        let (ledger, doc) = (ledger.clone(), home.workspace.join(format!("note{i}.md")));
        work.spawn(async move {
            if let Err(e) = edit(&mut editor, &ledger, &doc, until, args.rounds).await {
                ledger.error(e);
            }
            editor.stop().await;
        });
    }
    while let Some(done) = work.join_next().await {
        if let Err(e) = done {
            ledger.error(format!("a client panicked: {e}"));
        }
    }
    let ran = start.elapsed();
    let samples = sampler.await.unwrap();

    eprintln!("bench: verifying through fresh sessions");
    let entries = ledger.acked_entries();
    let tasks = ledger.tasks.lock().unwrap().clone();
    let fresh = Agent::stdio("verify", home.tandem(&["mcp", "--workspace", &ws]))
        .await
        .unwrap();
    let mut lost = verify_entries(&fresh, &entries).await;
    fresh.close().await;
    let listed = home
        .tandem(&["tasks", "--all", "--json"])
        .output()
        .await
        .unwrap();
    let workflows = serde_json::from_slice(&listed.stdout).unwrap_or_default();
    lost.extend(verify_tasks(&workflows, &tasks));
    drop(guard);
    let stopped = tokio::time::timeout(Duration::from_secs(15), server.wait()).await;
    if !matches!(stopped, Ok(Ok(status)) if status.success()) {
        eprintln!("bench: the daemon did not stop cleanly: {stopped:?}");
    }

    let errors = ledger.errors.lock().unwrap().clone();
    report(&ledger, ran, entries.len(), tasks.len(), &samples);
    let growth = growth(&samples);
    let mut failed = false;
    for (what, problems) in [("error", &errors), ("lost write", &lost)] {
        for p in problems.iter().take(20) {
            eprintln!("load: {what}: {p}");
        }
        failed |= !problems.is_empty();
    }
    if let Err(e) = growth {
        eprintln!("load: {e}");
        failed = true;
    }
    println!(
        "\n{} errors, {} lost writes, memory {}",
        errors.len(),
        lost.len(),
        if failed {
            "see above"
        } else {
            "flat once warm"
        }
    );
    if failed {
        // exit skips destructors: the temp dir goes first.
        drop(home);
        std::process::exit(1);
    }
}

/// Starts `tandem serve --http` on a free loopback port: the process and its endpoint.
async fn serve(home: &Home, ws: &str) -> (tokio::process::Child, String) {
    let mut cmd = home.tandem(&[
        "serve",
        "--http",
        "127.0.0.1:0",
        "--workspace",
        ws,
        "--rate-limit",
        "1000000000",
    ]);
    let mut child = cmd.stdout(std::process::Stdio::piped()).spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines
        .next_line()
        .await
        .unwrap()
        .expect("the server listens");
    let url = first
        .strip_prefix("tandem: serving MCP at ")
        .unwrap_or_else(|| panic!("unexpected first line: {first}"))
        .to_string();
    // The rest of its stdout is drained, so it never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, url)
}

async fn editor(home: &Home, ws: &str) -> Editor {
    Editor::start(
        home.tandem(&["lsp", "--workspace", ws]),
        &home.workspace,
        None,
    )
    .await
}

/// An LSP request timed into `ledger` as `lsp METHOD` (with `what` for a command): its
/// result, or the error response.
async fn timed(
    editor: &mut Editor,
    ledger: &Ledger,
    what: &str,
    method: &str,
    params: Value,
) -> Result<Value, String> {
    let t = Instant::now();
    let mut response = editor.request(method, params).await;
    let took = t.elapsed();
    if let Some(e) = response.get("error") {
        return Err(format!("{what}: {e}"));
    }
    ledger.time(format!("lsp {what}"), took);
    Ok(response["result"].take())
}

/// An editor's rounds: the newest acknowledged entry cited in `doc` and hovered, workspace
/// symbols for its word, code lenses, `tandem.status`, the task list.
async fn edit(
    editor: &mut Editor,
    ledger: &Ledger,
    doc: &std::path::Path,
    until: Instant,
    rounds: usize,
) -> Result<(), String> {
    let uri = file_uri(doc);
    editor.open_text(&uri, "markdown", "notes\n").await;
    let doc_id = json!({"uri": uri});
    for round in 0..rounds {
        if Instant::now() >= until {
            break;
        }
        let newest = ledger.entries.lock().unwrap().last().cloned();
        if let Some(entry) = &newest {
            let text = format!("See [{}] here.\n", entry.id);
            editor.change_text(&uri, round as i64 + 2, &text).await;
            let hover = timed(
                editor,
                ledger,
                "textDocument/hover",
                "textDocument/hover",
                json!({"textDocument": doc_id, "position": {"line": 0, "character": 6}}),
            )
            .await?;
            let shown = hover["contents"]["value"].as_str().unwrap_or_default();
            if !shown.contains(&entry.word) {
                return Err(format!("hover on {} shows {hover}", entry.id));
            }
        }
        let query = newest.map_or("load".to_string(), |e| e.word);
        let symbols = timed(
            editor,
            ledger,
            "workspace/symbol",
            "workspace/symbol",
            json!({"query": query}),
        )
        .await?;
        if !symbols.is_array() {
            return Err(format!("workspace/symbol for {query}: {symbols}"));
        }
        timed(
            editor,
            ledger,
            "textDocument/codeLens",
            "textDocument/codeLens",
            json!({"textDocument": doc_id}),
        )
        .await?;
        // As the editors ask: the task list of their view, the newest 50 workflows.
        for (command, arguments) in [
            ("tandem.status", json!([])),
            ("tandem.tasks.list", json!([{"all": false, "limit": 50}])),
        ] {
            timed(
                editor,
                ledger,
                command,
                "workspace/executeCommand",
                json!({"command": command, "arguments": arguments}),
            )
            .await?;
        }
    }
    Ok(())
}

/// A sample of the daemon's memory: seconds since the start, `VmRSS` and `RssAnon` in kB.
#[derive(Clone, Copy)]
struct Sample {
    at: f64,
    rss_kb: u64,
    anon_kb: u64,
}

/// Samples the daemon's memory (`/proc/PID/status`) once a second until `until`.
async fn sample_memory(pid: u32, until: Instant) -> Vec<Sample> {
    let start = Instant::now();
    let mut samples = Vec::new();
    while Instant::now() < until {
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            break;
        };
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .unwrap_or(0)
        };
        samples.push(Sample {
            at: start.elapsed().as_secs_f64(),
            rss_kb: field("VmRSS:"),
            anon_kb: field("RssAnon:"),
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    samples
}

/// The highest anonymous memory of each third of the run, in kB.
fn thirds(samples: &[Sample]) -> [u64; 3] {
    let n = samples.len();
    let max = |from: usize, to: usize| {
        samples[from..to]
            .iter()
            .map(|s| s.anon_kb)
            .max()
            .unwrap_or(0)
    };
    [max(0, n / 3), max(n / 3, 2 * n / 3), max(2 * n / 3, n)]
}

/// No growth once warm: the last third's highest anonymous memory (the heap: sled's cache,
/// tantivy's writer, sessions; not the mapped files the kernel may drop) within
/// [`GROWTH_FRACTION`] plus [`GROWTH_SLACK_KB`] of the middle third's.
fn growth(samples: &[Sample]) -> Result<(), String> {
    if samples.len() < 6 {
        return Err(format!("only {} memory samples: run longer", samples.len()));
    }
    let [_, middle, last] = thirds(samples);
    let bound = (middle as f64 * (1.0 + GROWTH_FRACTION)) as u64 + GROWTH_SLACK_KB;
    if last > bound {
        return Err(format!(
            "the daemon's anonymous memory still grows once warm: {} MB in the last third, over {} MB (the middle third's {} MB + {:.0}% + {} MB)",
            last / 1024,
            bound / 1024,
            middle / 1024,
            GROWTH_FRACTION * 100.0,
            GROWTH_SLACK_KB / 1024
        ));
    }
    Ok(())
}

fn report(ledger: &Ledger, ran: Duration, entries: usize, tasks: usize, samples: &[Sample]) {
    let latencies = ledger.latencies();
    let calls: usize = latencies.values().map(Vec::len).sum();
    section(
        "Load",
        &format!(
            "`cargo bench --bench load` (10 minutes; `-- --seconds N` or `-- --rounds N`). \
             `scripts/test` runs it for 60 s on the dev profile. One daemon (`tandem serve \
             --http`, run with `--rate-limit 1000000000`, since two busy HTTP agents would \
             pass the default 1,200 requests a minute per token) under {STDIO_AGENTS} agents \
             through `tandem mcp`, {HTTP_AGENTS} over Streamable HTTP (an `initialize` session \
             and a stateless 2026-07-28 client) and {EDITORS} editors through `tandem lsp`, \
             all on loopback, on the same machine as the daemon.\n\n\
             - An agent's round: `rekall_add`, `rekall_search` for the entry's unique word (it \
             must come first: read-your-writes), `rekall_show` of an older one, and every fifth \
             round a task (`start_task`, `log_decision`, `log_milestone`, `complete_task`).\n\
             - An editor's round: the newest entry cited in a document and hovered, \
             `workspace/symbol` for its word, code lenses, `tandem.status`, \
             `tandem.tasks.list`.\n\
             - Afterwards every acknowledged entry is found by id and by search through a fresh \
             session, and every task, decision and completion by `tandem tasks --all --json`.\n\
             - It fails on any error, any lost write, or memory that grows once warm: the \
             daemon's anonymous resident memory (`RssAnon`) may not exceed in the last third of \
             the run its highest in the middle third by more than {:.0} % + {} MB.\n\n\
             Adds are serialised (one write lock), so agents adding at once queue behind each \
             other: an add's latency here is mostly its wait.",
            GROWTH_FRACTION * 100.0,
            GROWTH_SLACK_KB / 1024
        ),
    );
    println!(
        "A run of {:.0} s: {calls} calls ({:.0}/s), {entries} entries and {tasks} tasks \
         acknowledged.\n",
        ran.as_secs_f64(),
        calls as f64 / ran.as_secs_f64()
    );
    println!("| operation | n | p50 | p90 | p99 | max |");
    println!("|---|---|---|---|---|---|");
    for (op, samples) in latencies {
        let s = Stats::of(samples);
        println!(
            "| {op} | {} | {} | {} | {} | {} |",
            s.n,
            ms(s.p50),
            ms(s.p90),
            ms(s.p99),
            ms(s.max)
        );
    }
    println!("\nThe daemon's memory (VmRSS / RssAnon, MB) over time:\n");
    let step = (samples.len() / 10).max(1);
    let points: Vec<String> = samples
        .iter()
        .step_by(step)
        .chain(samples.last())
        .map(|s| format!("{:.0} s: {} / {}", s.at, s.rss_kb / 1024, s.anon_kb / 1024))
        .collect();
    println!("{}", points.join(", "));
    let [first, middle, last] = thirds(samples);
    println!(
        "\nThe highest RssAnon per third of the run: {} MB, {} MB, {} MB.",
        first / 1024,
        middle / 1024,
        last / 1024
    );
}
