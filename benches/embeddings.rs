//! Embeddings benchmark (issue 12, spec 003): prints figures, asserts nothing about time.
//!
//! With the test model (`TANDEM_TEST_MODEL`, else `.test-deps/model`, which `scripts/test`
//! builds), at 100,000 entries (`TANDEM_BENCH_ENTRIES`) made from the labelled set's
//! entries (`benches/data/memory-labelled.json`, each one again with a number and two words
//! of another, so no two vectors are equal):
//! - the model's load time and the bench process's resident memory before and after;
//! - embedding one entry, and embedding the whole base when the model arrives;
//! - the nearest summaries: exactly (every row's int8 dot product), through the lists nearest the query
//!   (what search does), and by an HNSW index (`instant-distance`, a dev-dependency, on the
//!   first 20,000: `TANDEM_BENCH_HNSW`): time, build time, recall@10 against exact; which
//!   is how the search was chosen;
//! - in process: `search` hybrid and BM25 alone (the labelled set's queries, round robin),
//!   and `add` with both embeddings, similarity, suggestions and durability;
//! - the daemon's resident memory, idle after an agent's session, with no model, with the
//!   model, and with the model and the 100,000 entries' vectors.
//!
//! Run with `cargo bench --bench embeddings`.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::json;
use tandem_core::memory::{
    Entry, EntryType, Memory, NewEntry, NoProgress, Ranking, SearchQuery, summary_text,
};
use tandem_core::store::Store;
use tandem_search::embeddings::Embedder;
use tandem_search::quantised::Quantised;
use tandem_search::vectors::{Filter, VectorIndex};
use ulid::Ulid;

mod common;
use common::home::{DaemonGuard, Home, env_usize};
use common::{Stats, ms, section};

const SEARCHES: usize = 1000;
const ADDS: usize = 300;
const NEAREST: usize = 10;

#[derive(Deserialize)]
struct Set {
    entries: Vec<Labelled>,
    queries: Vec<LabelledQuery>,
}

#[derive(Deserialize)]
struct Labelled {
    #[serde(rename = "type")]
    entry_type: String,
    title: String,
    content: String,
    tags: Vec<String>,
}

#[derive(Deserialize)]
struct LabelledQuery {
    query: String,
}

fn repo_path(relative: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(relative)
}

fn rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn time<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let t = Instant::now();
    let out = f();
    (out, t.elapsed())
}

/// A unit vector for HNSW: its distance is 1 − cosine.
#[derive(Clone)]
struct Point(Vec<f32>);

impl instant_distance::Point for Point {
    fn distance(&self, other: &Self) -> f32 {
        1.0 - self.0.iter().zip(&other.0).map(|(a, b)| a * b).sum::<f32>()
    }
}

/// The resident memory of the daemon of `home` (all, and its anonymous part: without the
/// pages of mapped files, the index's among them) with the embedding model `model`, once an
/// agent's session has seen its adds embedded (or, with no model, made one add) and ended.
async fn daemon_rss(home: &Home, model: &str) -> (u64, u64) {
    let ws = home.workspace.display().to_string();
    let mut cmd = home.tandem(&["mcp", "--workspace", &ws]);
    cmd.env("TANDEM_EMBEDDING_MODEL", model);
    let (transport, _) = rmcp::transport::TokioChildProcess::builder(cmd)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let client = rmcp::ServiceExt::serve((), transport).await.unwrap();
    let mut guard = DaemonGuard { home, pid: None };
    let deadline = Instant::now() + Duration::from_secs(120);
    for i in 0.. {
        let args = json!({
            "type": "bug",
            "title": format!("Warm-up entry {i}"),
            "content": "An entry the bench adds until the daemon embeds what it is given.",
        });
        let serde_json::Value::Object(args) = args else {
            unreachable!()
        };
        let added = client
            .call_tool(rmcp::model::CallToolRequestParams::new("rekall_add").with_arguments(args))
            .await
            .unwrap()
            .structured_content
            .unwrap();
        if model == "off" || added["embeddings_calculated"] == true {
            break;
        }
        assert!(Instant::now() < deadline, "the daemon never loaded {model}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    client.cancel().await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let pid = home.daemon_pid().expect("the daemon runs");
    guard.pid = Some(pid);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |key: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    };
    let kb = (field("VmRSS:"), field("RssAnon:"));
    drop(guard);
    // The next daemon of this home opens its data dir: wait for this one to let it go.
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::path::Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    kb
}

fn main() {
    let n = env_usize("TANDEM_BENCH_ENTRIES", 100_000);
    let model_dir = std::env::var_os("TANDEM_TEST_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_path(".test-deps/model"));
    let set: Set = serde_json::from_slice(
        &std::fs::read(repo_path("benches/data/memory-labelled.json")).unwrap(),
    )
    .unwrap();
    let mut rows: Vec<(String, String)> = Vec::new();

    // ---- the model ----------------------------------------------------------------------
    let rss_before = rss_kb();
    let (embedder, first_load) = time(|| Embedder::load(&model_dir).unwrap());
    let rss_model = rss_kb().saturating_sub(rss_before);
    let loads: Vec<Duration> = (0..5)
        .map(|_| time(|| Embedder::load(&model_dir).unwrap()).1)
        .collect();
    rows.push((
        format!(
            "model load ({} dimensions), first / p50 of 5 more",
            embedder.dimensions()
        ),
        format!("{} / {}", ms(first_load), ms(Stats::of(loads).p50)),
    ));
    rows.push((
        "bench process resident memory added by loading the model".into(),
        format!("{:.1} MB", rss_model as f64 / 1024.0),
    ));

    // ---- the base -----------------------------------------------------------------------
    // Entry i: the title and tags of one labelled entry, the content of another, a few
    // words of a third: 237³ combinations, so neighbours are not copies of each other.
    let m = set.entries.len();
    let entries: Vec<Entry> = (0..n)
        .map(|i| {
            let e = &set.entries[i % m];
            let body = &set.entries[(i / m) % m];
            let other = &set.entries[(i * 7 + 3) % m];
            let extra: Vec<&str> = other.content.split_whitespace().take(3).collect();
            Entry::new(
                e.entry_type.parse::<EntryType>().unwrap(),
                format!("{} ({i})", e.title)
                    .chars()
                    .take(100)
                    .collect::<String>(),
                format!("{} {}", body.content, extra.join(" ")),
                e.tags.clone(),
            )
        })
        .collect();
    let texts: Vec<String> = entries
        .iter()
        .map(|e| summary_text(&e.title, &e.tags, &e.content))
        .collect();
    let per_text: Vec<Duration> = texts
        .iter()
        .take(2000)
        .map(|t| time(|| embedder.embed(t)).1)
        .collect();
    let per_text = Stats::of(per_text);
    rows.push((
        "embedding one entry's summary, p50 / p99".into(),
        format!("{} / {}", ms(per_text.p50), ms(per_text.p99)),
    ));

    // ---- the vector search: exact, through lists, HNSW ----------------------------------
    eprintln!("bench: {n} vectors: exact, through lists, HNSW");
    let floats: Vec<Vec<f32>> = texts.iter().map(|t| embedder.embed(t)).collect();
    let mut table = VectorIndex::new(embedder.dimensions());
    for (e, v) in entries.iter().zip(&floats) {
        table.upsert(e, &Quantised::of(v));
    }
    let ((), cut) = time(|| table.make_lists());
    rows.push((
        format!(
            "cutting the {n} vectors into {} lists (k-means of a sample, every row placed)",
            table.list_count()
        ),
        format!("{:.2} s", cut.as_secs_f64()),
    ));
    let queries: Vec<Vec<f32>> = set
        .queries
        .iter()
        .map(|q| embedder.embed(&q.query))
        .collect();
    let recall = |found: &[Ulid], want: &[Ulid]| {
        found.iter().filter(|id| want.contains(id)).count() as f64 / want.len().max(1) as f64
    };
    let (mut exact_times, mut lists_times, mut exact, mut lists_recall) =
        (Vec::new(), Vec::new(), Vec::new(), 0.0);
    for q in queries.iter().cycle().take(SEARCHES) {
        let q8 = Quantised::of(q);
        let (want, took) = time(|| table.nearest_exact(&q8, NEAREST, Filter::default(), None));
        exact_times.push(took);
        let want: Vec<Ulid> = want.into_iter().map(|(id, _)| id).collect();
        let (found, took) = time(|| table.nearest(&q8, NEAREST, Filter::default(), None));
        lists_times.push(took);
        let found: Vec<Ulid> = found.into_iter().map(|(id, _)| id).collect();
        lists_recall += recall(&found, &want);
        exact.push(want);
    }
    let exact_times = Stats::of(exact_times);
    let lists_times = Stats::of(lists_times);
    rows.push((
        format!("nearest {NEAREST} summaries of {n}: every row's int8 dot product, p50 / p99"),
        format!("{} / {}", ms(exact_times.p50), ms(exact_times.p99)),
    ));
    rows.push((
        format!(
            "the same through the lists nearest the query (what search does), p50 / p99; recall@{NEAREST} against exact"
        ),
        format!(
            "{} / {}; {:.1} %",
            ms(lists_times.p50),
            ms(lists_times.p99),
            100.0 * lists_recall / SEARCHES as f64
        ),
    ));
    rows.push((
        format!(
            "the table in memory ({n} × {} int8, each row's list)",
            embedder.dimensions()
        ),
        format!(
            "{:.1} MB",
            (n * (embedder.dimensions() + 8)) as f64 / (1024.0 * 1024.0)
        ),
    ));
    // HNSW's build is slow: measured on the first entries only (none: 0).
    let hnsw_n = env_usize("TANDEM_BENCH_HNSW", 20_000).min(n);
    let mut subset = VectorIndex::new(embedder.dimensions());
    for (e, v) in entries.iter().zip(&floats).take(hnsw_n) {
        subset.upsert(e, &Quantised::of(v));
    }
    if hnsw_n > 0 {
        let (hnsw, build) = time(|| {
            instant_distance::Builder::default().build(
                floats.iter().take(hnsw_n).cloned().map(Point).collect(),
                entries.iter().take(hnsw_n).map(|e| e.id).collect(),
            )
        });
        let mut search = instant_distance::Search::default();
        let (mut hnsw_times, mut hnsw_recall) = (Vec::new(), 0.0);
        for q in queries.iter().cycle().take(SEARCHES) {
            let want: Vec<Ulid> = subset
                .nearest_exact(&Quantised::of(q), NEAREST, Filter::default(), None)
                .into_iter()
                .map(|(id, _)| id)
                .collect();
            let point = Point(q.clone());
            let (found, took) = time(|| {
                hnsw.search(&point, &mut search)
                    .take(NEAREST)
                    .map(|item| *item.value)
                    .collect::<Vec<Ulid>>()
            });
            hnsw_times.push(took);
            hnsw_recall += recall(&found, &want);
        }
        let hnsw_times = Stats::of(hnsw_times);
        rows.push((
            format!("HNSW (instant-distance, f32, its defaults) of {hnsw_n}: build"),
            format!("{:.1} s", build.as_secs_f64()),
        ));
        rows.push((
            format!(
                "HNSW of {hnsw_n}, nearest {NEAREST}, p50 / p99; recall@{NEAREST} against exact"
            ),
            format!(
                "{} / {}; {:.1} %",
                ms(hnsw_times.p50),
                ms(hnsw_times.p99),
                100.0 * hnsw_recall / SEARCHES as f64
            ),
        ));
    }
    drop((table, floats, exact));

    // ---- the memory ---------------------------------------------------------------------
    eprintln!("bench: {n} entries: loading the memory");
    let big = Home::new("tandem-bench-embeddings");
    let export = big.path().join("entries.jsonl");
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&export).unwrap());
        for e in &entries {
            let mut record = serde_json::to_value(e).unwrap();
            record["record"] = json!("entry");
            writeln!(f, "{record}").unwrap();
        }
    }
    let memory = Memory::open(
        Arc::new(Store::open(&big.tandem_home()).unwrap()),
        &NoProgress,
    )
    .unwrap();
    memory
        .import(&mut std::io::BufReader::new(
            std::fs::File::open(&export).unwrap(),
        ))
        .unwrap();
    eprintln!("bench: {n} entries: embedding them");
    let (embedded, embed_all) = time(|| memory.use_embedder(embedder.clone()).unwrap());
    assert_eq!(embedded as usize, n);
    memory.wait_for_vector_lists();
    rows.push((
        format!("embedding the {n} entries when the model arrives (stored)"),
        format!("{:.1} s", embed_all.as_secs_f64()),
    ));
    // Opened again, the vectors are read, not made.
    drop(memory);
    let memory = Memory::open(
        Arc::new(Store::open(&big.tandem_home()).unwrap()),
        &NoProgress,
    )
    .unwrap();
    let (embedded, reload) = time(|| memory.use_embedder(embedder.clone()).unwrap());
    assert_eq!(embedded, 0);
    let (lists, cut) = time(|| memory.wait_for_vector_lists());
    rows.push((
        format!("then cutting them into {lists} lists, on the memory's own thread"),
        format!("{:.2} s", cut.as_secs_f64()),
    ));
    rows.push((
        format!("reading the {n} entries' vectors at start (model ready)"),
        format!("{:.2} s", reload.as_secs_f64()),
    ));

    eprintln!("bench: {n} entries: searches and adds");
    for (name, ranking) in [
        ("hybrid", Ranking::Hybrid),
        ("BM25 alone", Ranking::Lexical),
    ] {
        let times: Vec<Duration> = set
            .queries
            .iter()
            .cycle()
            .take(SEARCHES)
            .map(|q| {
                let query = SearchQuery {
                    query: q.query.clone(),
                    ..SearchQuery::default()
                };
                time(|| memory.search_ranked(&query, ranking).unwrap()).1
            })
            .collect();
        let s = Stats::of(times);
        rows.push((
            format!("`search` {name} at {n} entries, in process, p50 / p99 (n={SEARCHES})"),
            format!("{} / {}", ms(s.p50), ms(s.p99)),
        ));
    }
    let adds: Vec<Duration> = (0..ADDS)
        .map(|i| {
            let e = &set.entries[(i * 13) % set.entries.len()];
            let new = NewEntry {
                entry_type: Some(e.entry_type.parse().unwrap()),
                title: format!("{} (added {i})", e.title)
                    .chars()
                    .take(100)
                    .collect(),
                content: e.content.clone(),
                tags: e.tags.clone(),
                context: Some(format!("The user asked about {} again.", e.title)),
                ..NewEntry::default()
            };
            let (added, took) = time(|| memory.add(new).unwrap());
            assert!(added.embeddings_calculated);
            took
        })
        .collect();
    let a = Stats::of(adds);
    rows.push((
        format!(
            "`add` at {n} entries with both embeddings, similarity, suggestions, durable, p50 / p99 (n={ADDS})"
        ),
        format!("{} / {}", ms(a.p50), ms(a.p99)),
    ));

    drop(memory);

    // ---- the daemon's memory ------------------------------------------------------------
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let empty = Home::new("tandem-bench-embeddings-empty");
    for (what, home, model) in [
        (
            "an empty memory, no model (`off`)",
            &empty,
            "off".to_string(),
        ),
        (
            "an empty memory, the model loaded",
            &empty,
            model_dir.display().to_string(),
        ),
        (
            &*format!("{n} entries, the model and their vectors loaded"),
            &big,
            model_dir.display().to_string(),
        ),
    ] {
        eprintln!("bench: daemon resident memory: {what}");
        let (all, anonymous) = runtime.block_on(daemon_rss(home, &model));
        rows.push((
            format!("daemon resident memory, idle after a session, all / anonymous: {what}"),
            format!(
                "{:.1} MB / {:.1} MB",
                all as f64 / 1024.0,
                anonymous as f64 / 1024.0
            ),
        ));
    }

    section(
        "Embeddings",
        &format!(
            "`cargo bench --bench embeddings` ({n} entries, `TANDEM_BENCH_ENTRIES`; \
             `TANDEM_BENCH_HNSW=0` skips the HNSW rows). The entries are made from the \
             labelled set's (one's title, another's content, a third's words); the test model."
        ),
    );
    println!("| figure | value |");
    println!("|---|---|");
    for (what, value) in rows {
        println!("| {what} | {value} |");
    }
    println!(
        "\nTargets: hybrid search p99 in process under 2 ms; add p50 under 2 ms with both \
         embeddings and durability."
    );
}
