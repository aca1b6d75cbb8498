//! Memory search quality (issue 12, spec 003): prints figures, asserts nothing.
//!
//! Loads the labelled set (`benches/data/memory-labelled.json`: entries, and queries each
//! with its relevant entries, marked `paraphrase` when they share no word with them or
//! `keyword`), into a fresh memory with the test model (`TANDEM_TEST_MODEL`, else
//! `.test-deps/model`, which `scripts/test` builds), and prints recall@5 and nDCG@5 of BM25
//! alone, embeddings alone and hybrid, by kind of query; then the cosines of queries with
//! relevant and with other entries, from which the semantic thresholds are chosen.
//!
//! Run with `cargo bench --bench memory_quality`; `TANDEM_BENCH_LABELLED=FILE` reads another
//! set.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde::Deserialize;
use tandem_core::memory::{
    EntryType, Memory, NewEntry, NoProgress, Ranking, SearchQuery, summary_text,
};
use tandem_core::store::Store;
use tandem_search::embeddings::Embedder;

/// Results looked at per query.
const K: usize = 5;

#[derive(Deserialize)]
struct Set {
    entries: Vec<LabelledEntry>,
    queries: Vec<LabelledQuery>,
}

#[derive(Deserialize)]
struct LabelledEntry {
    key: String,
    #[serde(rename = "type")]
    entry_type: String,
    title: String,
    content: String,
    tags: Vec<String>,
    project: Option<String>,
}

#[derive(Deserialize)]
struct LabelledQuery {
    query: String,
    kind: String,
    relevant: Vec<String>,
}

fn repo_path(relative: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(relative)
}

fn model_dir() -> PathBuf {
    std::env::var_os("TANDEM_TEST_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_path(".test-deps/model"))
}

/// recall@K and nDCG@K (binary relevance) of one ranked list.
fn quality(found: &[String], relevant: &[String]) -> (f64, f64) {
    let hits = found.iter().take(K).filter(|id| relevant.contains(id));
    let recall = hits.count() as f64 / relevant.len() as f64;
    let dcg: f64 = found
        .iter()
        .take(K)
        .enumerate()
        .filter(|(_, id)| relevant.contains(id))
        .map(|(i, _)| 1.0 / (i as f64 + 2.0).log2())
        .sum();
    let ideal: f64 = (0..relevant.len().min(K))
        .map(|i| 1.0 / (i as f64 + 2.0).log2())
        .sum();
    (recall, dcg / ideal)
}

fn percentile(sorted: &[f32], q: f64) -> f32 {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn main() {
    let path = std::env::var_os("TANDEM_BENCH_LABELLED")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_path("benches/data/memory-labelled.json"));
    let set: Set = serde_json::from_slice(
        &std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    )
    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let model = model_dir();
    let embedder = Embedder::load(&model).unwrap_or_else(|e| {
        panic!("{e}: build the test model with scripts/test or set TANDEM_TEST_MODEL")
    });

    let dir = tempfile::tempdir().unwrap();
    let memory = Memory::open(Arc::new(Store::open(dir.path()).unwrap()), &NoProgress).unwrap();
    let mut ids: HashMap<String, String> = HashMap::new();
    for e in &set.entries {
        let added = memory
            .add(NewEntry {
                entry_type: Some(e.entry_type.parse::<EntryType>().unwrap()),
                title: e.title.clone(),
                content: e.content.clone(),
                tags: e.tags.clone(),
                project: e.project.clone(),
                ..NewEntry::default()
            })
            .unwrap();
        ids.insert(e.key.clone(), added.id);
    }
    memory.use_embedder(embedder.clone()).unwrap();
    eprintln!(
        "bench: {} entries, {} queries, model {}",
        set.entries.len(),
        set.queries.len(),
        model.display()
    );

    let rankings = [
        ("BM25 alone", Ranking::Lexical),
        ("embeddings alone", Ranking::Semantic),
        ("hybrid", Ranking::Hybrid),
    ];
    let kinds = ["paraphrase", "keyword"];
    println!("## Search quality\n");
    println!(
        "`cargo bench --bench memory_quality`. `benches/data/memory-labelled.json` holds {} \
         entries of software work and {} queries with their relevant entries: {} paraphrases \
         that share no word with them (`scripts/check-labelled-set` checks it; the test \
         command runs it) and {} keyword queries. Top {K}, with the test model (distilled \
         here from all-MiniLM-L6-v2; a real model2vec model should do better by meaning). \
         The hybrid ranking is what search does.\n",
        set.entries.len(),
        set.queries.len(),
        set.queries
            .iter()
            .filter(|q| q.kind == "paraphrase")
            .count(),
        set.queries.iter().filter(|q| q.kind == "keyword").count(),
    );
    println!("| ranking | queries | recall@{K} | nDCG@{K} |");
    println!("|---|---|---|---|");
    for (name, ranking) in rankings {
        for kind in kinds.iter().map(|k| Some(*k)).chain([None]) {
            let (mut recall, mut ndcg, mut n) = (0.0, 0.0, 0);
            for q in set
                .queries
                .iter()
                .filter(|q| kind.is_none_or(|k| q.kind == k))
            {
                let relevant: Vec<String> = q.relevant.iter().map(|k| ids[k].clone()).collect();
                let found: Vec<String> = memory
                    .search_ranked(
                        &SearchQuery {
                            query: q.query.clone(),
                            limit: Some(K as i64),
                            ..SearchQuery::default()
                        },
                        ranking,
                    )
                    .unwrap()
                    .results
                    .into_iter()
                    .map(|r| r.id)
                    .collect();
                let (r, g) = quality(&found, &relevant);
                recall += r;
                ndcg += g;
                n += 1;
            }
            println!(
                "| {name} | {} ({n}) | {:.1} % | {:.3} |",
                kind.unwrap_or("all"),
                100.0 * recall / n as f64,
                ndcg / n as f64
            );
        }
    }

    // Cosines of each query with its relevant entries and with the others.
    let vectors: HashMap<&str, Vec<f32>> = set
        .entries
        .iter()
        .map(|e| {
            let text = summary_text(&e.title, &e.tags, &e.content);
            (e.key.as_str(), embedder.embed(&text))
        })
        .collect();
    let (mut relevant, mut other) = (Vec::new(), Vec::new());
    for q in &set.queries {
        let v = embedder.embed(&q.query);
        for (key, e) in &vectors {
            let c = tandem_search::embeddings::cosine(&v, e);
            if q.relevant.iter().any(|r| r == key) {
                relevant.push(c);
            } else {
                other.push(c);
            }
        }
    }
    // Entries with each other: those answering one query, and all other pairs.
    let (mut together, mut apart) = (Vec::new(), Vec::new());
    let keys: Vec<&str> = set.entries.iter().map(|e| e.key.as_str()).collect();
    for (i, a) in keys.iter().enumerate() {
        for b in &keys[i + 1..] {
            let c = tandem_search::embeddings::cosine(&vectors[a], &vectors[b]);
            let same = set
                .queries
                .iter()
                .any(|q| q.relevant.iter().any(|r| r == a) && q.relevant.iter().any(|r| r == b));
            if same { &mut together } else { &mut apart }.push(c);
        }
    }
    for c in [&mut relevant, &mut other, &mut together, &mut apart] {
        c.sort_by(f32::total_cmp);
    }
    println!(
        "\nThe target: hybrid 15 points of recall@{K} above BM25 on paraphrases, and nothing \
         lost on keywords."
    );
    println!(
        "\nThe cosines of the test model, which the semantic thresholds come from \
         (`SEMANTIC_SIMILAR_MIN` and the rest in `crates/core/src/memory/mod.rs`):\n"
    );
    println!("| pairs | n | p10 | p50 | p90 | p99 |");
    println!("|---|---|---|---|---|---|");
    for (name, c) in [
        ("query, relevant entry", &relevant),
        ("query, other entry", &other),
        ("two entries answering one query", &together),
        ("two other entries", &apart),
    ] {
        println!(
            "| {name} | {} | {:.2} | {:.2} | {:.2} | {:.2} |",
            c.len(),
            percentile(c, 0.10),
            percentile(c, 0.50),
            percentile(c, 0.90),
            percentile(c, 0.99)
        );
    }
}
