//! The scale benchmark (issue 15): a knowledge base of `--entries N` (default 100,000)
//! generated entries of realistic length (`common::corpus`), brought in as a user does,
//! then measured. Prints figures; asserts nothing about time.
//!
//! - `tandem memory import` of the JSON Lines (the release binary, no daemon): entries a
//!   second;
//! - with `TANDEM_TEST_MODEL` (a model folder), `tandem memory reindex --embeddings`:
//!   entries embedded a second;
//! - the data dir on disk per entry, as imported, then at rest after what the daemon's idle
//!   exit does (`store::compact`: the entries' records packed): the database (sled and
//!   the pack), the search index, the vectors, in all;
//! - cold start: `tandem mcp --standalone` spawned to its first answered search (the
//!   median of three), and the same through a daemon already running;
//! - the idle daemon's resident memory after a session's search (its own, and the pages
//!   of the files it maps: the search index, the vectors' base);
//! - in process: with the model, the time to cut the vectors into lists after the open;
//!   then search p50/p99 (hybrid with the model, the same queries each with a context of
//!   20 words, and each side of the hybrid search alone) and add p50/p99 (durable, with
//!   similarity and suggestions), and the page faults of each (minor, and major: read from
//!   the disk); then how much the adds grew the data dir (a memory in use, not as
//!   imported: each add's suggestions are kept too), and what the daemon's compaction at
//!   its idle exit then does, and how long it takes; then the slowest searches, timed
//!   again by each ranking.
//!
//! `cargo bench --bench scale -- --entries 1000000` (release; ~1 GB of JSON Lines in a
//! temp dir at that size). `--corpus diverse` draws the entries from a vocabulary of
//! 40,000 more words (`Corpus::diverse`); the default, `clustered`, from a few hundred
//! stems, each query word in a large share of the entries: search's worst case.
//! `--contexts` gives each entry a context of 20 to 59 words (`Corpus::with_contexts`), as
//! agents write them: a search then finds a word in two fields of most entries.
//! `--home DIR` keeps the bench's world in DIR; a later run with the same `--entries`,
//! `--corpus`, `--contexts` and model finds its memory there and measures it again
//! without generating, importing and embedding it (the adds of each run stay in it);
//! another size or corpus makes it anew there (its adds are new entries each run:
//! `scale.json` counts those made).
//! A world's queries are the same in every run (the next in the corpus's sequence after
//! its entries); its adds are not, and they grow it: to compare builds, run each on a copy
//! of the same kept world.
//! `--searches N` and `--adds N` time that many (default 1,000 and 300), for a profile of
//! them.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::Write;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::CallToolRequestParams;
use rmcp::{RoleClient, ServiceExt, service::RunningService};
use serde_json::{Value, json};
use tandem_core::memory::{Memory, NoProgress, Ranking, SearchQuery};
use tandem_core::store::{CompactWhen, Store};
use tandem_search::embeddings::Embedder;

mod common;
use common::corpus::Corpus;
use common::home::{DaemonGuard, Home};
use common::{Stats, ms, page_faults, proc_status_kb, section};

/// The bench's options.
struct Options {
    entries: usize,
    diverse: bool,
    contexts: bool,
    home: Option<std::path::PathBuf>,
    searches: usize,
    adds: usize,
}
const COLD_STARTS: usize = 3;
/// The words of a search's context, when the bench searches with one.
const CONTEXT_WORDS: usize = 20;

fn main() {
    let mut options = Options {
        entries: 100_000,
        diverse: false,
        contexts: false,
        home: None,
        searches: 1_000,
        adds: 300,
    };
    let mut args = std::env::args().skip(1);
    let count = |v: Option<String>, what| -> usize {
        v.and_then(|v| v.replace('_', "").parse().ok())
            .filter(|n| *n > 0)
            .unwrap_or_else(|| panic!("{what} N, N at least 1"))
    };
    while let Some(a) = args.next() {
        match a.as_str() {
            "--entries" => options.entries = count(args.next(), "--entries"),
            "--searches" => options.searches = count(args.next(), "--searches"),
            "--adds" => options.adds = count(args.next(), "--adds"),
            "--home" => options.home = Some(args.next().expect("--home DIR").into()),
            "--contexts" => options.contexts = true,
            "--corpus" => {
                options.diverse = match args.next().as_deref() {
                    Some("diverse") => true,
                    Some("clustered") => false,
                    _ => panic!("--corpus clustered|diverse"),
                }
            }
            _ => {}
        }
    }
    let model = std::env::var_os("TANDEM_TEST_MODEL").map(std::path::PathBuf::from);
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(run(options, model.as_deref()));
}

async fn run(options: Options, model: Option<&Path>) {
    let (n, diverse, contexts) = (options.entries, options.diverse, options.contexts);
    let home = match &options.home {
        Some(dir) => Home::kept(dir),
        None => Home::new("tandem-scale"),
    };
    // What a kept world holds, once its memory is made, and where the corpus's sequence
    // was when its entries were generated (an earlier bench wrote the world alone).
    let made = home.path().join("scale.json");
    let mut wanted = json!({ "entries": n, "diverse": diverse, "model": model.is_some() });
    if contexts {
        // Absent otherwise, so that the worlds kept before the option stay theirs.
        wanted["contexts"] = json!(true);
    }
    let kept: Option<Value> = std::fs::read_to_string(&made)
        .ok()
        .and_then(|m| serde_json::from_str(&m).ok());
    let reused = kept
        .as_ref()
        .is_some_and(|k| k.get("world").unwrap_or(k) == &wanted);
    let resumed = kept
        .as_ref()
        .filter(|_| reused)
        .and_then(|k| Some((k["corpus_state"].as_u64()?, k["json_bytes"].as_u64()?)));
    // The adds the kept world's earlier runs made: this run's are the entries after them in
    // the corpus's sequence, none the twin of one already added.
    let adds_made = kept
        .as_ref()
        .filter(|_| resumed.is_some())
        .and_then(|k| k["adds_made"].as_u64())
        .unwrap_or(0);
    if !reused {
        // A kept world of another size or corpus: its memory is made again from nothing.
        std::fs::remove_file(&made).ok();
        std::fs::remove_dir_all(home.tandem_home()).ok();
        std::fs::create_dir_all(home.tandem_home()).unwrap();
    }
    let with_model = |cmd: &mut std::process::Command| {
        if let Some(m) = model {
            cmd.env("TANDEM_EMBEDDING_MODEL", m);
        }
    };

    let file = home.path().join("entries.jsonl");
    let mut corpus = if diverse {
        Corpus::diverse(42)
    } else {
        Corpus::new(42)
    };
    if contexts {
        corpus = corpus.with_contexts();
    }
    let mut json_bytes = 0u64;
    if let Some((state, bytes)) = resumed {
        // The queries follow the entries in the corpus's sequence: they go on from there.
        corpus = corpus.resumed(state);
        json_bytes = bytes;
    } else {
        eprintln!("bench: generating {n} entries");
        // A kept memory's entries written by an earlier bench are generated again, to
        // find where the sequence was.
        let mut out =
            (!reused).then(|| std::io::BufWriter::new(std::fs::File::create(&file).unwrap()));
        for i in 0..n {
            let line = corpus.entry().tandem_record(i).to_string();
            json_bytes += line.len() as u64 + 1;
            if let Some(out) = &mut out {
                writeln!(out, "{line}").unwrap();
            }
        }
    }

    // `tandem ARGS` with the model, to its end: how long it took.
    let timed = |args: &[&str]| {
        eprintln!("bench: tandem {}", args.join(" "));
        let mut cmd = home.tandem(args);
        with_model(cmd.as_std_mut());
        async move {
            let started = Instant::now();
            let out = cmd.output().await.unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            started.elapsed()
        }
    };
    let import_time = if reused {
        eprintln!("bench: the memory kept in {}", home.path().display());
        None
    } else {
        let file = file.to_str().expect("a temp path in UTF-8");
        Some(timed(&["memory", "import", file]).await)
    };
    let embed_time = match model {
        Some(_) if !reused => Some(timed(&["memory", "reindex", "--embeddings"]).await),
        _ => None,
    };
    std::fs::remove_file(&file).ok();
    let corpus_state = corpus.state();
    let record_world = |adds_made: u64| {
        if options.home.is_some() {
            let made_now = json!({
                "world": wanted,
                "corpus_state": corpus_state,
                "json_bytes": json_bytes,
                "adds_made": adds_made,
            });
            std::fs::write(&made, made_now.to_string()).unwrap();
        }
    };
    record_world(adds_made);

    let data = home.tandem_home();
    // As the import and the embedding left it; then what a daemon does at its idle exit
    // (the entries' records packed, sled's files copied): the data dir at rest, measured.
    let imported_bytes = tandem_core::store::dir_size(&data);
    eprintln!("bench: the idle exit's compaction");
    let started = Instant::now();
    let at_rest = tandem_core::store::compact(&data, CompactWhen::Idle).unwrap();
    let at_rest_took = started.elapsed();
    let db_bytes = tandem_core::store::dir_size(&data.join("db"));
    let index_bytes = tandem_core::store::dir_size(&data.join("index").join("memory"));
    // The vector file and its base (`memory-vectors.<generation>.base`).
    let vector_bytes: u64 = std::fs::read_dir(data.join("index"))
        .map(|dir| {
            dir.flatten()
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with("memory-vectors")
                })
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0);
    let all_bytes = tandem_core::store::dir_size(&data);

    eprintln!("bench: cold starts");
    let mut cold = Vec::new();
    for i in 0..COLD_STARTS {
        let mut cmd = home.tandem(&["mcp", "--standalone"]);
        with_model(cmd.as_std_mut());
        cold.push(first_search(cmd, &format!("cold start {i}")).await);
    }
    let cold = Stats::of(cold);

    eprintln!("bench: through the daemon");
    let mut guard = DaemonGuard {
        home: &home,
        pid: None,
    };
    let via_daemon = || {
        let mut cmd = home.tandem(&["mcp", "--workspace"]);
        cmd.arg(&home.workspace);
        with_model(cmd.as_std_mut());
        cmd
    };
    let first_via_daemon = first_search(via_daemon(), "daemon start").await;
    guard.pid = home.daemon_pid();
    let warm_via_daemon = first_search(via_daemon(), "daemon running").await;
    // The sessions have ended: the daemon idles with the data open (and the model, if any).
    tokio::time::sleep(Duration::from_secs(3)).await;
    // Resident: the daemon's own memory, and the pages of files it maps (the search
    // index, the vectors' base) that it has touched.
    let daemon_rss_kb = ["VmRSS:", "RssAnon:", "RssFile:"]
        .map(|key| guard.pid.map_or(0, |pid| proc_status_kb(pid, key)));
    drop(guard);

    eprintln!("bench: in process");
    let store = Arc::new(Store::open(&data).unwrap());
    let memory = Memory::open(store, &NoProgress).unwrap();
    // With a model, the vectors are cut into lists on the memory's thread after the open;
    // searches read the whole table meanwhile, beside it. Search is measured once the
    // lists are in, and the cut on its own.
    let lists = model.map(|m| {
        memory.use_embedder(Embedder::load(m).unwrap()).unwrap();
        let started = Instant::now();
        let lists = memory.wait_for_vector_lists();
        (lists, started.elapsed())
    });
    // A kept world holds the segments of its earlier runs' adds, which a daemon merges
    // once writes pause: searched as it keeps them.
    memory.merge_index_segments().unwrap();
    let segments = memory.index_segments();
    let queries: Vec<String> = (0..options.searches).map(|_| corpus.query()).collect();
    let search_ranked = |q: &str, ranking| {
        let query = SearchQuery {
            query: q.to_string(),
            ..Default::default()
        };
        memory.search_ranked(&query, ranking).unwrap()
    };
    let search = |q: &str| search_ranked(q, Ranking::Hybrid);
    search(&queries[0]);
    let mut searches = Vec::with_capacity(options.searches);
    let faults_before = page_faults();
    for q in &queries {
        let t = Instant::now();
        search(q);
        searches.push(t.elapsed());
    }
    let search_faults = faults_since(faults_before, options.searches);
    // The same queries with a context, as agents search: a sentence of the corpus's words
    // (from a generator of its own, so that the adds' entries stay where they were).
    let mut sentences = Corpus::new(7);
    let with_context: Vec<Duration> = queries
        .iter()
        .map(|q| {
            let query = SearchQuery {
                query: q.clone(),
                context: Some(sentences.sentence(CONTEXT_WORDS)),
                ..Default::default()
            };
            let t = Instant::now();
            memory.search(&query).unwrap();
            t.elapsed()
        })
        .collect();
    let with_context = Stats::of(with_context);
    // With the model, each side of the hybrid search alone over the same queries.
    let sides = model.map(|_| {
        [Ranking::Lexical, Ranking::Semantic].map(|ranking| {
            let times = queries
                .iter()
                .map(|q| {
                    let t = Instant::now();
                    search_ranked(q, ranking);
                    t.elapsed()
                })
                .collect();
            Stats::of(times)
        })
    });
    let slowest = slowest_searches(&queries, &searches, |q, ranking| {
        // Without a model there is no meaning to search by, and none is printed.
        if ranking == Ranking::Semantic && model.is_none() {
            return Duration::ZERO;
        }
        let t = Instant::now();
        search_ranked(q, ranking);
        t.elapsed()
    });
    let mut adds = Vec::with_capacity(options.adds);
    for _ in 0..adds_made {
        corpus.entry();
    }
    let entries: Vec<_> = (0..options.adds)
        .map(|_| corpus.entry().new_entry())
        .collect();
    let bytes_before_adds = tandem_core::store::dir_size(&data);
    let mut suggested = 0u64;
    let faults_before = page_faults();
    for e in entries {
        let t = Instant::now();
        suggested += u64::from(memory.add(e).unwrap().suggestions_created);
        adds.push(t.elapsed());
    }
    let add_faults = faults_since(faults_before, options.adds);
    record_world(adds_made + options.adds as u64);
    drop(memory);
    let grown = tandem_core::store::dir_size(&data).saturating_sub(bytes_before_adds);
    // What a daemon does at its idle exit: compacts the database when worth it.
    let started = Instant::now();
    let compaction = tandem_core::store::compact(&data, CompactWhen::Idle).unwrap();
    let compaction_took = started.elapsed();

    let per = |bytes: u64| format!("{:.0} B", bytes as f64 / n as f64);
    let rate = |d: Duration| format!("{:.0}/s", n as f64 / d.as_secs_f64());
    let searches = Stats::of(searches);
    let adds = Stats::of(adds);
    section(
        "Scale",
        "`cargo bench --bench scale -- --entries N [--corpus diverse] [--contexts] [--home \
         DIR]` (100,000 by default; `TANDEM_TEST_MODEL` for the embedding model). A generated \
         knowledge base is brought in with `tandem memory import`, then measured as a user \
         meets it. The `clustered` corpus (the default) draws its words from a few hundred \
         stems, so each query word is in a large share of the entries: search's worst case. \
         The `diverse` corpus draws from 40,000 more words. With `--contexts` each entry has \
         a context of 20 to 59 words, and so two vectors (its summary's and its context's). \
         \"At rest\" is the data dir after what the daemon's idle exit does (a compaction, \
         when worth it). The bench's doc comment (`benches/scale.rs`) lists every figure it \
         prints.\n\n\
         The scale targets (issue 15): at most 1 KB an entry at rest, a cold start under 50 ms \
         at 100,000 entries, hybrid search p99 under 1 ms at 100,000 and 2 ms at a million, \
         add p50 under 2 ms and the idle daemon under 100 MB at a million, and an import of a \
         million at more than 20,000 entries a second.",
    );
    println!(
        "### {n} entries, the {} corpus{} ({} of JSON Lines, {} an entry)\n",
        if diverse { "diverse" } else { "clustered" },
        if contexts {
            ", each entry with a context"
        } else {
            ""
        },
        mb(json_bytes),
        per(json_bytes)
    );
    println!("| figure | value |");
    println!("|---|---|");
    match import_time {
        Some(d) => println!(
            "| `tandem memory import` | {:.1} s ({}) |",
            d.as_secs_f64(),
            rate(d)
        ),
        None => println!(
            "| the memory | kept from an earlier run in {} |",
            home.path().display()
        ),
    }
    if let Some(d) = embed_time {
        println!(
            "| `tandem memory reindex --embeddings` | {:.1} s ({}) |",
            d.as_secs_f64(),
            rate(d)
        );
    }
    println!(
        "| data dir as imported | {} ({} an entry) |",
        mb(imported_bytes),
        per(imported_bytes)
    );
    println!(
        "| the idle exit's compaction after it | {} |",
        describe_compaction(&at_rest, at_rest_took)
    );
    println!(
        "| data dir on disk, at rest | {} ({} an entry) |",
        mb(all_bytes),
        per(all_bytes)
    );
    println!(
        "| of which the database (sled and the pack) | {} ({} an entry) |",
        mb(db_bytes),
        per(db_bytes)
    );
    println!(
        "| of which search index | {} ({} an entry) |",
        mb(index_bytes),
        per(index_bytes)
    );
    if vector_bytes > 0 {
        println!(
            "| of which vectors | {} ({} an entry) |",
            mb(vector_bytes),
            per(vector_bytes)
        );
    }
    println!(
        "| cold start to the first search, `tandem mcp --standalone` | p50 {} (max {}) |",
        ms(cold.p50),
        ms(cold.max)
    );
    println!(
        "| first search through a daemon it starts | {} |",
        ms(first_via_daemon)
    );
    println!(
        "| first search of a new session, daemon running | {} |",
        ms(warm_via_daemon)
    );
    let [rss, anonymous, files] = daemon_rss_kb.map(|kb| kb as f64 / 1024.0);
    println!(
        "| idle daemon RSS after a search | {rss:.1} MB ({anonymous:.1} MB its own, {files:.1} MB of mapped files) |"
    );
    if let Some((lists, took)) = lists {
        println!(
            "| the vectors cut into {lists} lists when the memory opens (its own thread) | {:.2} s |",
            took.as_secs_f64()
        );
    }
    println!("| search index segments when searched | {segments} |");
    println!(
        "| search in process{} | p50 {} / p99 {} |",
        if model.is_some() { " (hybrid)" } else { "" },
        ms(searches.p50),
        ms(searches.p99)
    );
    if let Some([lexical, semantic]) = &sides {
        for (side, stats) in [("BM25", lexical), ("the vectors", semantic)] {
            println!(
                "| of which {side} alone, the same queries | p50 {} / p99 {} |",
                ms(stats.p50),
                ms(stats.p99)
            );
        }
    }
    println!(
        "| the same searches, each with a context of {CONTEXT_WORDS} words | p50 {} / p99 {} |",
        ms(with_context.p50),
        ms(with_context.p99)
    );
    println!(
        "| add in process (durable) | p50 {} / p99 {} |",
        ms(adds.p50),
        ms(adds.p99)
    );
    for (what, (minor, major)) in [("a search", search_faults), ("an add", add_faults)] {
        println!("| page faults {what} (minor / major) | {minor:.1} / {major:.1} |");
    }
    println!(
        "| the data dir grown by the adds ({suggested} suggestions made) | {} ({:.1} KB an add) |",
        mb(grown),
        grown as f64 / options.adds as f64 / 1e3
    );
    println!(
        "| the idle exit's compaction after the adds | {} |",
        describe_compaction(&compaction, compaction_took)
    );
    print_slowest(&slowest, model.is_some());
}

/// What a compaction did, in a table's cell.
fn describe_compaction(c: &tandem_core::store::Compaction, took: Duration) -> String {
    format!(
        "{}: the database's files {} → {} for {} of records ({:.1} s)",
        match (c.rewritten, c.counted) {
            (true, _) => "done",
            (false, true) => "not worth it",
            (false, false) => "not worth it, as the last count found (the records not read)",
        },
        mb(c.before),
        mb(c.after),
        mb(c.record_bytes),
        took.as_secs_f64()
    )
}

/// The searches slower than the p99 (at least [`SLOWEST_SHOWN`]), each timed again as it
/// ran and by each ranking alone (the best of [`SLOWEST_RETRIES`]): where the tail's time
/// goes.
const SLOWEST_SHOWN: usize = 5;
const SLOWEST_RETRIES: usize = 3;

struct Slow<'q> {
    query: &'q str,
    first: Duration,
    again: [Duration; 3],
}

fn slowest_searches<'q>(
    queries: &'q [String],
    times: &[Duration],
    time: impl Fn(&str, Ranking) -> Duration,
) -> Vec<Slow<'q>> {
    let mut order: Vec<usize> = (0..queries.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(times[i]));
    let shown = (queries.len() / 100).max(SLOWEST_SHOWN).min(queries.len());
    order[..shown]
        .iter()
        .map(|&i| {
            let best = |ranking| {
                (0..SLOWEST_RETRIES)
                    .map(|_| time(&queries[i], ranking))
                    .min()
                    .unwrap_or_default()
            };
            Slow {
                query: &queries[i],
                first: times[i],
                again: [
                    best(Ranking::Hybrid),
                    best(Ranking::Lexical),
                    best(Ranking::Semantic),
                ],
            }
        })
        .collect()
}

fn print_slowest(slowest: &[Slow], with_model: bool) {
    println!("\n#### The slowest searches, timed again (the best of {SLOWEST_RETRIES})\n");
    if with_model {
        println!("| query | when measured | again | BM25 alone | vectors alone |");
        println!("|---|---|---|---|---|");
    } else {
        println!("| query | when measured | again |");
        println!("|---|---|---|");
    }
    for s in slowest {
        let [hybrid, lexical, semantic] = s.again.map(ms);
        if with_model {
            println!(
                "| {} | {} | {hybrid} | {lexical} | {semantic} |",
                s.query,
                ms(s.first)
            );
        } else {
            println!("| {} | {} | {lexical} |", s.query, ms(s.first));
        }
    }
    println!();
}

/// The page faults a call since `before` (minor, major), over `calls` calls.
fn faults_since(before: (u64, u64), calls: usize) -> (f64, f64) {
    let (minor, major) = page_faults();
    let per = |n: u64, was: u64| n.saturating_sub(was) as f64 / calls.max(1) as f64;
    (per(minor, before.0), per(major, before.1))
}

/// Spawns an MCP server (`cmd`), searches once; the time from the spawn to the answer.
async fn first_search(mut cmd: tokio::process::Command, what: &str) -> Duration {
    cmd.kill_on_drop(true);
    let started = Instant::now();
    let (transport, _) = rmcp::transport::TokioChildProcess::builder(cmd)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let client: RunningService<RoleClient, ()> = ().serve(transport).await.unwrap();
    let Value::Object(args) = json!({"query": "timeout retry socket"}) else {
        unreachable!()
    };
    let r = client
        .call_tool(CallToolRequestParams::new("rekall_search").with_arguments(args))
        .await
        .unwrap();
    let took = started.elapsed();
    assert_ne!(r.is_error, Some(true), "{what}: {r:?}");
    client.cancel().await.unwrap();
    took
}

fn mb(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}
