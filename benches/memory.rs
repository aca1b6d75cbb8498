//! Memory benchmark: prints figures, asserts nothing about time.
//!
//! For each size (default 10,000 and 100,000 entries; `TANDEM_BENCH_SIZES=1000,5000` to
//! change), it loads a generated knowledge base of realistic entries and measures:
//! - in process: bulk load, add latency (durable, with similarity and suggestions), search
//!   latency, index and database size, peak RSS;
//! - over stdio through `tandem mcp`: cold start to the first answered search, search and add
//!   latency, the server's peak RSS;
//! - the same stdio workload against `@modelcontextprotocol/server-memory` (npm, installed
//!   under `.test-deps/npm` by `scripts/bench`), and the ratios.
//!
//! Then a clustered knowledge base (`common::clustered`: every entry like many others, the
//! worst case for suggestions), built by adds from empty (default 1,000 and 100,000
//! entries; `TANDEM_BENCH_CLUSTERED_SIZES`): add latency in the first and the last 10% of
//! the load, so that growth shows, and the suggestions it left. Up to 10,000 entries every
//! add goes over stdio; beyond, all but the last 1,000 are added in process (the same
//! code, durable) and the last 1,000 over stdio. `TANDEM_BENCH_CORPUS=generic` or
//! `clustered` runs one of the two.
//!
//! Run with `scripts/bench` (or `cargo bench --bench memory`).

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use tandem_core::memory::{Memory, NoProgress, SearchQuery};
use tandem_core::store::Store;

mod common;
use common::clustered::Clustered;
use common::corpus::{Corpus, Generated};
use common::{Stats, ms, proc_status_kb, section};

const ADDS: usize = 300;
const SEARCHES: usize = 1000;
const STDIO_SEARCHES: usize = 500;
const STDIO_ADDS: usize = 200;
/// The reference server re-reads its whole file on every call: cap its runs by time.
const REFERENCE_BUDGET: Duration = Duration::from_secs(60);

fn main() {
    let sizes: Vec<usize> = std::env::var("TANDEM_BENCH_SIZES")
        .unwrap_or_else(|_| "10000,100000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let reference =
        reference_server().filter(|_| std::env::var_os("TANDEM_BENCH_NO_REFERENCE").is_none());
    if reference.is_none() {
        eprintln!(
            "bench: @modelcontextprotocol/server-memory not found under .test-deps/npm; run scripts/bench to install it"
        );
    }
    let corpus = std::env::var("TANDEM_BENCH_CORPUS").unwrap_or_default();
    if corpus != "clustered" {
        section(
            "Memory against server-memory",
            "`scripts/bench memory`, or `cargo bench --bench memory` \
             (`TANDEM_BENCH_SIZES=10000,100000` by default). Bulk load, add and search in \
             process; cold start and latency over stdio through `tandem mcp --standalone`; the \
             same stdio workload against `@modelcontextprotocol/server-memory`, with the \
             ratios; then `tandem mcp` through the daemon. server-memory rereads and rewrites \
             its whole JSONL file on every call, and does not fsync. Its runs are capped at \
             60 s each: the `n=` cells say how many calls each side made. The first MCP answer \
             comes before the data dir is open (it opens in the background).",
        );
        for n in sizes {
            let report = runtime.block_on(bench_size(n, reference.as_deref()));
            report.print();
        }
    }
    if corpus != "generic" {
        let sizes: Vec<usize> = std::env::var("TANDEM_BENCH_CLUSTERED_SIZES")
            .unwrap_or_else(|_| "1000,100000".into())
            .split(',')
            .filter_map(|s| s.trim().parse().ok())
            .collect();
        section(
            "Adds on a clustered corpus",
            "`TANDEM_BENCH_CORPUS=clustered cargo bench --bench memory` (sizes in \
             `TANDEM_BENCH_CLUSTERED_SIZES`, default 1,000 and 100,000). Titles of 4 words and \
             contents of 40 words from a 60-word technical vocabulary in six topics \
             (`benches/common/clustered.rs`), added one by one from an empty data dir, so that \
             suggestions pile up as they would. Past 10,000 entries all but the last 1,000 adds \
             run in process. Add p50 / p99 in the first and the last 10 % of the load.\n\n\
             Target: p50 under 2 ms and p99 under 5 ms over stdio, durable, at 1,000 and at \
             100,000 entries.",
        );
        for n in sizes {
            runtime.block_on(bench_clustered(n)).print();
        }
    }
}

struct Report {
    n: usize,
    load: Duration,
    add: Stats,
    search: Stats,
    index_bytes: u64,
    db_bytes: u64,
    rss_in_process_kb: u64,
    tandem: StdioFigures,
    reference: Option<StdioFigures>,
    daemon: DaemonFigures,
}

struct DaemonFigures {
    /// The first `tandem mcp`: starts the daemon, which opens the data dir.
    first_connection_to_search: Duration,
    /// Later connections to a running daemon.
    connect_to_initialize: Stats,
    connect_to_search: Stats,
    idle_rss_kb: u64,
}

struct StdioFigures {
    /// Spawn to the `initialize` answer.
    first_answer: Duration,
    /// Spawn to the first answered search.
    cold_start: Duration,
    search: Stats,
    add: Stats,
    peak_rss_kb: u64,
}

fn ratio(theirs: Duration, ours: Duration) -> String {
    format!(
        "{:.1}x",
        theirs.as_secs_f64() / ours.as_secs_f64().max(1e-9)
    )
}

impl Report {
    fn print(&self) {
        let mb = |b: u64| format!("{:.1} MB", b as f64 / 1e6);
        println!("### {} entries\n", self.n);
        println!("| figure | tandem | server-memory | ratio |");
        println!("|---|---|---|---|");
        println!(
            "| bulk load (import, in process) | {:.2} s | | |",
            self.load.as_secs_f64()
        );
        println!(
            "| add p50 / p99 (in process, durable, n={}) | {} / {} | | |",
            self.add.n,
            ms(self.add.p50),
            ms(self.add.p99)
        );
        println!(
            "| search p50 / p99 (in process, n={}) | {} / {} | | |",
            self.search.n,
            ms(self.search.p50),
            ms(self.search.p99)
        );
        let t = &self.tandem;
        let line = |name: &str, ours: Duration, theirs: Option<Duration>| match theirs {
            Some(th) => println!(
                "| {name} | {} | {} | {} |",
                ms(ours),
                ms(th),
                ratio(th, ours)
            ),
            None => println!("| {name} | {} | n/a | |", ms(ours)),
        };
        let r = self.reference.as_ref();
        line(
            "spawn to first answer (initialize, stdio)",
            t.first_answer,
            r.map(|r| r.first_answer),
        );
        line(
            "spawn to first search answer (stdio)",
            t.cold_start,
            r.map(|r| r.cold_start),
        );
        line(
            &format!(
                "search p50 over stdio (n={}{})",
                t.search.n,
                r.map(|r| format!("/{}", r.search.n)).unwrap_or_default()
            ),
            t.search.p50,
            r.map(|r| r.search.p50),
        );
        line(
            "search p99 over stdio",
            t.search.p99,
            r.map(|r| r.search.p99),
        );
        line(
            &format!(
                "add p50 over stdio (n={}{})",
                t.add.n,
                r.map(|r| format!("/{}", r.add.n)).unwrap_or_default()
            ),
            t.add.p50,
            r.map(|r| r.add.p50),
        );
        line("add p99 over stdio", t.add.p99, r.map(|r| r.add.p99));
        match r {
            Some(r) => println!(
                "| server peak RSS | {} | {} | {:.1}x |",
                mb(t.peak_rss_kb * 1000),
                mb(r.peak_rss_kb * 1000),
                r.peak_rss_kb as f64 / t.peak_rss_kb.max(1) as f64
            ),
            None => println!("| server peak RSS | {} | n/a | |", mb(t.peak_rss_kb * 1000)),
        }
        println!(
            "| bench process peak RSS (in process phase) | {} | | |",
            mb(self.rss_in_process_kb * 1000)
        );
        println!(
            "| index size / database size | {} / {} | | |",
            mb(self.index_bytes),
            mb(self.db_bytes)
        );
        let d = &self.daemon;
        println!(
            "| `tandem mcp`, the first (starts the daemon), to first search answer | {} | | |",
            ms(d.first_connection_to_search)
        );
        println!(
            "| `tandem mcp` to initialize answer, daemon running (p50 / p99, n={}) | {} / {} | | |",
            d.connect_to_initialize.n,
            ms(d.connect_to_initialize.p50),
            ms(d.connect_to_initialize.p99)
        );
        println!(
            "| `tandem mcp` to first search answer, daemon running (p50 / p99) | {} / {} | | |",
            ms(d.connect_to_search.p50),
            ms(d.connect_to_search.p99)
        );
        println!(
            "| daemon RSS, idle after the sessions | {} | | |",
            mb(d.idle_rss_kb * 1000)
        );
        println!();
    }
}

async fn bench_size(n: usize, reference: Option<&Path>) -> Report {
    eprintln!("bench: {n} entries: generating");
    let (dir, home) = temp_home();
    let mut corpus = Corpus::new(42);
    let entries: Vec<Generated> = (0..n).map(|_| corpus.entry()).collect();

    // ---- in process ----
    let export = dir.path().join("entries.jsonl");
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&export).unwrap());
        for (i, e) in entries.iter().enumerate() {
            writeln!(f, "{}", e.tandem_record(i)).unwrap();
        }
    }
    let store = Arc::new(Store::open(&home).unwrap());
    let memory = Memory::open(store, &NoProgress).unwrap();
    eprintln!("bench: {n} entries: loading");
    let t = Instant::now();
    let report = memory
        .import(&mut std::io::BufReader::new(
            std::fs::File::open(&export).unwrap(),
        ))
        .unwrap();
    let load = t.elapsed();
    assert_eq!(report.entries_added as usize, n);

    eprintln!("bench: {n} entries: adds and searches in process");
    let mut adds = Vec::with_capacity(ADDS);
    for _ in 0..ADDS {
        let e = corpus.entry();
        let t = Instant::now();
        memory.add(e.new_entry()).unwrap();
        adds.push(t.elapsed());
    }
    let queries: Vec<String> = (0..SEARCHES).map(|_| corpus.query()).collect();
    // One warm-up search commits what the adds left pending.
    memory
        .search(&SearchQuery {
            query: queries[0].clone(),
            ..Default::default()
        })
        .unwrap();
    let mut searches = Vec::with_capacity(SEARCHES);
    for q in &queries {
        let t = Instant::now();
        memory
            .search(&SearchQuery {
                query: q.clone(),
                ..Default::default()
            })
            .unwrap();
        searches.push(t.elapsed());
    }
    let index_bytes = memory.index_size();
    let rss_in_process_kb = peak_rss_kb(std::process::id());
    drop(memory);
    let db_bytes = tandem_core::store::dir_size(&home.join("db"));

    // ---- over stdio ----
    // Over stdio, both servers get the same one-word queries of distinctive words: the
    // reference server matches the query as one substring and returns every match in full.
    let stdio_queries: Vec<String> = (0..STDIO_SEARCHES + 1)
        .map(|_| corpus.rare_word())
        .collect();
    eprintln!("bench: {n} entries: tandem mcp --standalone over stdio");
    let tandem = stdio_workload(
        standalone_mcp(&home),
        &stdio_queries,
        &mut corpus,
        |q| ("rekall_search", json!({"query": q})),
        |e| ("rekall_add", json!({"type": e.entry_type.as_str(), "title": e.title, "content": e.content, "tags": e.tags})),
        Duration::from_secs(600),
    )
    .await;

    eprintln!("bench: {n} entries: through the daemon");
    let daemon = daemon_workload(&home, &stdio_queries).await;

    let reference = match reference {
        Some(script) => {
            eprintln!("bench: {n} entries: server-memory over stdio");
            let file = dir.path().join("server-memory.jsonl");
            let mut f = std::io::BufWriter::new(std::fs::File::create(&file).unwrap());
            for (i, e) in entries.iter().enumerate() {
                writeln!(f, "{}", e.reference_record(i)).unwrap();
            }
            drop(f);
            let mut cmd = tokio::process::Command::new("node");
            cmd.arg(script)
                .env("MEMORY_FILE_PATH", &file)
                .stderr(Stdio::null());
            let mut k = 0usize;
            Some(
                stdio_workload(
                    cmd,
                    &stdio_queries,
                    &mut corpus,
                    |q| ("search_nodes", json!({"query": q})),
                    |e| {
                        k += 1;
                        (
                            "create_entities",
                            json!({"entities": [{"name": format!("{} #{k}", e.title), "entityType": e.entry_type.as_str(), "observations": [e.content]}]}),
                        )
                    },
                    REFERENCE_BUDGET,
                )
                .await,
            )
        }
        None => None,
    };

    Report {
        n,
        load,
        add: Stats::of(adds),
        search: Stats::of(searches),
        index_bytes,
        db_bytes,
        rss_in_process_kb,
        tandem,
        reference,
        daemon,
    }
}

/// A temp dir, and the data dir to use inside it.
fn temp_home() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("tandem-bench")
        .tempdir()
        .unwrap();
    let home = dir.path().join("tandem-home");
    (dir, home)
}

/// `tandem mcp --standalone` on a data dir.
fn standalone_mcp(home: &Path) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_tandem"));
    cmd.args(["mcp", "--standalone"])
        .env("TANDEM_HOME", home)
        .env("TANDEM_LOG", "warn");
    cmd
}

async fn daemon_workload(home: &Path, queries: &[String]) -> DaemonFigures {
    let connect = |q: &str| {
        let home = home.to_path_buf();
        let q = q.to_string();
        async move {
            let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_tandem"));
            cmd.args(["mcp", "--workspace"])
                .arg(home.parent().unwrap())
                .env("TANDEM_HOME", &home)
                .env("TANDEM_LOG", "warn")
                .env("TANDEM_DAEMON_IDLE_SECS", "120")
                .kill_on_drop(true);
            let start = Instant::now();
            let (transport, _) = rmcp::transport::TokioChildProcess::builder(cmd)
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let client: RunningService<RoleClient, ()> = ().serve(transport).await.unwrap();
            let initialized = start.elapsed();
            call(&client, "rekall_search", json!({"query": q})).await;
            let searched = start.elapsed();
            client.cancel().await.unwrap();
            (initialized, searched)
        }
    };
    let (_, first_connection_to_search) = connect(&queries[0]).await;
    let mut inits = Vec::new();
    let mut searches = Vec::new();
    for q in queries.iter().take(20) {
        let (i, s) = connect(q).await;
        inits.push(i);
        searches.push(s);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let pid: u32 = std::fs::read_to_string(home.join("tandem.lock"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let idle_rss_kb = proc_status_kb(pid, "VmRSS:");
    let stopped = std::process::Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["daemon", "stop"])
        .env("TANDEM_HOME", home)
        .output()
        .unwrap();
    assert!(stopped.status.success());
    DaemonFigures {
        first_connection_to_search,
        connect_to_initialize: Stats::of(inits),
        connect_to_search: Stats::of(searches),
        idle_rss_kb,
    }
}

async fn stdio_workload(
    cmd: tokio::process::Command,
    queries: &[String],
    corpus: &mut Corpus,
    search: impl Fn(&str) -> (&'static str, Value),
    mut add: impl FnMut(&Generated) -> (&'static str, Value),
    budget: Duration,
) -> StdioFigures {
    let start = Instant::now();
    let (client, pid) = spawn_client(cmd).await;
    let first_answer = start.elapsed();
    let (tool, args) = search(&queries[0]);
    call(&client, tool, args).await;
    let cold_start = start.elapsed();

    let mut searches = Vec::new();
    let began = Instant::now();
    for q in queries.iter().cycle().skip(1).take(STDIO_SEARCHES) {
        let (tool, args) = search(q);
        let t = Instant::now();
        call(&client, tool, args).await;
        searches.push(t.elapsed());
        if began.elapsed() > budget && searches.len() >= 10 {
            break;
        }
    }
    let mut adds = Vec::new();
    let began = Instant::now();
    for _ in 0..STDIO_ADDS {
        let e = corpus.entry();
        let (tool, args) = add(&e);
        let t = Instant::now();
        call(&client, tool, args).await;
        adds.push(t.elapsed());
        if began.elapsed() > budget && adds.len() >= 10 {
            break;
        }
    }
    let peak_rss_kb = peak_rss_kb(pid);
    client.cancel().await.unwrap();
    StdioFigures {
        first_answer,
        cold_start,
        search: Stats::of(searches),
        add: Stats::of(adds),
        peak_rss_kb,
    }
}

/// Spawns an MCP server (killed when dropped) and connects to it: the client and its pid.
async fn spawn_client(mut cmd: tokio::process::Command) -> (RunningService<RoleClient, ()>, u32) {
    cmd.kill_on_drop(true);
    let (transport, _) = rmcp::transport::TokioChildProcess::builder(cmd)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = transport.id().unwrap();
    (().serve(transport).await.unwrap(), pid)
}

async fn call(client: &RunningService<RoleClient, ()>, tool: &'static str, args: Value) {
    call_json(client, tool, args).await;
}

/// Calls a tool that must succeed; its structured result.
async fn call_json(
    client: &RunningService<RoleClient, ()>,
    tool: &'static str,
    args: Value,
) -> Value {
    let Value::Object(map) = args else {
        unreachable!()
    };
    let r = client
        .call_tool(CallToolRequestParams::new(tool).with_arguments(map))
        .await
        .unwrap();
    assert_ne!(r.is_error, Some(true), "{tool} failed: {r:?}");
    r.structured_content.unwrap_or(Value::Null)
}

fn peak_rss_kb(pid: u32) -> u64 {
    proc_status_kb(pid, "VmHWM:")
}

fn reference_server() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let script =
        root.join(".test-deps/npm/node_modules/@modelcontextprotocol/server-memory/dist/index.js");
    script.exists().then_some(script)
}

/// Beyond this many entries, the clustered load is added in process but for its last
/// [`CLUSTERED_STDIO_TAIL`] adds.
const CLUSTERED_ALL_STDIO: usize = 10_000;
const CLUSTERED_STDIO_TAIL: usize = 1_000;

/// Add latencies of one phase of the clustered load, in order.
struct Phase {
    name: String,
    adds: Vec<Duration>,
}

impl Phase {
    /// p50 / p99 of the first tenth, the last tenth, and all of it.
    fn slices(&self) -> [Stats; 3] {
        let tenth = (self.adds.len() / 10).max(1);
        [
            Stats::of(self.adds[..tenth].to_vec()),
            Stats::of(self.adds[self.adds.len() - tenth..].to_vec()),
            Stats::of(self.adds.clone()),
        ]
    }
}

struct ClusteredReport {
    n: usize,
    phases: Vec<Phase>,
    suggestions_created: u64,
    pending_links: u64,
    pending_generalizations: u64,
    peak_rss_kb: u64,
}

impl ClusteredReport {
    fn print(&self) {
        println!("### {} entries added from empty\n", self.n);
        println!("| add p50 / p99 | first 10% | last 10% | all |");
        println!("|---|---|---|---|");
        for phase in &self.phases {
            let [first, last, all] = phase.slices();
            let cell = |s: Stats| format!("{} / {}", ms(s.p50), ms(s.p99));
            println!(
                "| {} (n={}) | {} | {} | {} |",
                phase.name,
                all.n,
                cell(first),
                cell(last),
                cell(all)
            );
        }
        println!(
            "\nSuggestions created: {}; pending at the end: {} links, {} generalisations; server peak RSS {:.1} MB.\n",
            self.suggestions_created,
            self.pending_links,
            self.pending_generalizations,
            self.peak_rss_kb as f64 / 1e3
        );
    }
}

async fn bench_clustered(n: usize) -> ClusteredReport {
    let (_dir, home) = temp_home();
    let mut corpus = Clustered::new(7);
    let in_process = if n > CLUSTERED_ALL_STDIO {
        n - CLUSTERED_STDIO_TAIL
    } else {
        0
    };
    let mut phases = Vec::new();
    let mut suggestions_created = 0u64;
    if in_process > 0 {
        eprintln!("bench: clustered, {n} entries: {in_process} adds in process");
        let store = Arc::new(Store::open(&home).unwrap());
        let memory = Memory::open(store, &NoProgress).unwrap();
        let mut adds = Vec::with_capacity(in_process);
        for i in 0..in_process {
            let e = corpus.entry();
            let t = Instant::now();
            let out = memory.add(e).unwrap();
            adds.push(t.elapsed());
            suggestions_created += out.suggestions_created as u64;
            if (i + 1) % 10_000 == 0 {
                eprintln!("bench: clustered: {} added", i + 1);
            }
        }
        phases.push(Phase {
            name: format!("in process, durable, entries 1–{in_process}"),
            adds,
        });
    }

    eprintln!(
        "bench: clustered, {n} entries: {} adds over stdio",
        n - in_process
    );
    let (client, pid) = spawn_client(standalone_mcp(&home)).await;
    // The first call waits for the data dir to open: not an add's cost.
    call(&client, "rekall_search", json!({"query": "cors"})).await;
    let mut adds = Vec::with_capacity(n - in_process);
    for _ in in_process..n {
        let e = corpus.entry();
        let args = json!({
            "type": e.entry_type.unwrap().as_str(),
            "title": e.title,
            "content": e.content,
            "tags": e.tags,
            "project": e.project,
        });
        let t = Instant::now();
        let out = call_json(&client, "rekall_add", args).await;
        adds.push(t.elapsed());
        suggestions_created += out["suggestions_created"].as_u64().unwrap();
    }
    phases.push(Phase {
        name: format!("over stdio, durable, entries {}–{n}", in_process + 1),
        adds,
    });
    let links = call_json(&client, "rekall_suggest_links", json!({"limit": 1})).await;
    let gens = call_json(&client, "rekall_suggest_generalize", json!({"limit": 1})).await;
    let peak_rss_kb = peak_rss_kb(pid);
    client.cancel().await.unwrap();
    ClusteredReport {
        n,
        phases,
        suggestions_created,
        pending_links: links["total_pending"].as_u64().unwrap(),
        pending_generalizations: gens["total_pending"].as_u64().unwrap(),
        peak_rss_kb,
    }
}
