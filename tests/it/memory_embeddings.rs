//! The memory with the test embedding model (`TANDEM_TEST_MODEL`, built by `scripts/test`):
//! vectors made and stored, hybrid search finding paraphrases, similarity by meaning, and
//! what happens without a model.

use std::path::PathBuf;

use tandem_core::memory::{Entry, EntryType, Memory, MemoryError, NewEntry, Ranking, SearchQuery};
use tandem_search::embeddings::Embedder;

use crate::util::{TestHome, entry};

pub(crate) fn test_model() -> Embedder {
    let dir = std::env::var_os("TANDEM_TEST_MODEL")
        .map(PathBuf::from)
        .expect(
            "TANDEM_TEST_MODEL is not set: run scripts/test (it builds the test model into \
         .test-deps/model) or set it to a model2vec folder",
        );
    Embedder::load(&dir).unwrap()
}

fn search(query: &str) -> SearchQuery {
    SearchQuery {
        query: query.into(),
        ..SearchQuery::default()
    }
}

const SAFARI: &str = "Safari date parsing fails on ISO strings";
/// The Safari entry in other words: not one word of it is in the entry. (The issue's "Apple
/// browser rejects timestamps" ranks it third among these four with the small test model.)
const PARAPHRASE: &str = "the Apple web browser rejects our timestamp format";

fn knowledge() -> Vec<NewEntry> {
    vec![
        entry(
            EntryType::Bug,
            SAFARI,
            "new Date('2024-01-02 10:00') gives Invalid Date in Safari; put a T between date and time.",
            &["safari", "dates"],
        ),
        entry(
            EntryType::Pitfall,
            "Postgres deadlock when two transactions update rows in different order",
            "Update rows in primary key order so concurrent transactions never wait on each other in a cycle.",
            &["postgres", "locking"],
        ),
        entry(
            EntryType::Config,
            "Increase nginx proxy read timeout for slow uploads",
            "proxy_read_timeout 300s stops the 504s on large uploads.",
            &["nginx", "timeout"],
        ),
        entry(
            EntryType::Pattern,
            "Retry flaky HTTP calls with exponential backoff and jitter",
            "Wrap outbound requests in a capped exponential backoff with random jitter.",
            &["http", "retry"],
        ),
    ]
}

#[test]
fn hybrid_search_finds_a_paraphrase_that_words_miss() {
    let home = TestHome::new();
    let memory = home.memory();
    for e in knowledge() {
        let added = memory.add(e).unwrap();
        assert!(!added.embeddings_calculated, "no model yet: {added:?}");
    }
    let q = search(PARAPHRASE);
    assert!(
        memory.search(&q).unwrap().results.is_empty(),
        "BM25 alone has no word to match"
    );

    // The model arrives: the four entries are embedded.
    assert_eq!(memory.use_embedder(test_model()).unwrap(), 4);
    let found = memory.search(&q).unwrap();
    assert_eq!(found.results[0].title, SAFARI, "{found:#?}");
    assert!(found.results[0].score > 0.0 && found.results[0].score <= 1.0);
    assert!(
        memory
            .search_ranked(&q, Ranking::Lexical)
            .unwrap()
            .results
            .is_empty()
    );
    let by_meaning = memory.search_ranked(&q, Ranking::Semantic).unwrap();
    assert_eq!(by_meaning.results[0].title, SAFARI);

    keywords_and_filters_still_work(&memory);
}

/// With `knowledge()` and the model: a keyword match stays first, and a type filter
/// applies to matches by meaning too.
fn keywords_and_filters_still_work(memory: &Memory) {
    let keyword = memory.search(&search("nginx timeout")).unwrap();
    assert_eq!(
        keyword.results[0].title,
        "Increase nginx proxy read timeout for slow uploads"
    );
    let filtered = memory
        .search(&SearchQuery {
            entry_type: Some(EntryType::Config),
            ..search(PARAPHRASE)
        })
        .unwrap();
    assert!(
        !filtered.results.is_empty() && filtered.results.iter().all(|r| r.entry_type == "config"),
        "{filtered:#?}"
    );
}

/// The Safari entry's knowledge in other words.
fn safari_in_other_words() -> NewEntry {
    entry(
        EntryType::Bug,
        "iPhone web view shows Invalid Date for API timestamps",
        "Mobile Apple browsers refuse '2024-01-02 10:00'; the server now sends RFC 3339 with a T.",
        &["ios", "datetime"],
    )
}

#[test]
fn adds_are_embedded_and_show_says_so() {
    let home = TestHome::new();
    let memory = home.memory();
    assert_eq!(memory.use_embedder(test_model()).unwrap(), 0);
    let plain = memory.add(knowledge().remove(0)).unwrap();
    assert!(plain.embeddings_calculated);
    let shown = memory.show(&plain.id).unwrap();
    assert!(shown.embeddings.summary && !shown.embeddings.context);

    let with_context = memory
        .add(NewEntry {
            context: Some("The user reports that the calendar widget is blank on iPhones.".into()),
            ..knowledge().remove(2)
        })
        .unwrap();
    let shown = memory.show(&with_context.id).unwrap();
    assert!(shown.embeddings.summary && shown.embeddings.context);
}

#[test]
fn vectors_survive_a_restart_and_entries_added_without_a_model_are_embedded_later() {
    let home = TestHome::new();
    let mut entries = knowledge();
    let late = entries.pop().unwrap();
    {
        let memory = home.memory();
        memory.use_embedder(test_model()).unwrap();
        for e in entries {
            memory.add(e).unwrap();
        }
    }
    let late_id = {
        // Opened without a model: the add stores no vectors.
        let memory = home.memory();
        let added = memory.add(late).unwrap();
        assert!(!added.embeddings_calculated);
        assert!(!memory.show(&added.id).unwrap().embeddings.summary);
        added.id
    };
    {
        let memory = home.memory();
        // Only the entry added without the model is embedded again.
        assert_eq!(memory.use_embedder(test_model()).unwrap(), 1);
        assert!(memory.show(&late_id).unwrap().embeddings.summary);
        let found = memory.search(&search(PARAPHRASE)).unwrap();
        assert_eq!(found.results[0].title, SAFARI);
    }
    // Read back from the vector file: nothing embedded again.
    assert_eq!(home.memory().use_embedder(test_model()).unwrap(), 0);

    // The file loses its tail (a torn last record): the entry it held is embedded again.
    let file = vector_file(&home);
    let len = std::fs::metadata(&file).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .unwrap()
        .set_len(len - 10)
        .unwrap();
    let memory = home.memory();
    assert_eq!(memory.use_embedder(test_model()).unwrap(), 1);
    assert!(memory.show(&late_id).unwrap().embeddings.summary);
    let found = memory.search(&search(PARAPHRASE)).unwrap();
    assert_eq!(found.results[0].title, SAFARI);
}

fn vector_file(home: &TestHome) -> PathBuf {
    home.tandem_home().join("index/memory-vectors")
}

/// An import that replaces an entry's text drops its old vectors and embeds the new
/// text: the entry is found by the meaning it has now, not the one it had.
#[test]
fn an_import_replacing_an_entry_embeds_its_new_text() {
    let home = TestHome::new();
    let memory = home.memory();
    memory.use_embedder(test_model()).unwrap();
    let ids: Vec<String> = knowledge()
        .into_iter()
        .map(|e| memory.add(e).unwrap().id)
        .collect();
    let mut exported = Vec::new();
    memory.export(&mut exported).unwrap();
    let exported = String::from_utf8(exported).unwrap();
    // The Safari entry rewritten as a Kubernetes one, updated later.
    let rewritten: String = exported
        .lines()
        .filter(|l| l.contains(&ids[0]))
        .map(|line| {
            let mut v: serde_json::Value = serde_json::from_str(line).unwrap();
            let record = if v.get("entry").is_some() {
                &mut v["entry"]
            } else {
                &mut v
            };
            record["title"] = "Pods restart in a loop when the liveness probe is too eager".into();
            record["content"] =
                "Give the container time to warm up before Kubernetes checks its health.".into();
            record["tags"] = serde_json::json!(["kubernetes"]);
            record["updated_at"] = "2099-01-01T00:00:00Z".into();
            v.to_string() + "\n"
        })
        .collect();
    let report = memory.import(&mut rewritten.as_bytes()).unwrap();
    assert_eq!(report.entries_updated, 1, "{report:?}");
    assert!(memory.show(&ids[0]).unwrap().embeddings.summary);
    let by_meaning = |memory: &Memory, query: &str| {
        let found = memory.search_ranked(&search(query), Ranking::Semantic);
        found.unwrap().results[0].id.clone()
    };
    const PROBES: &str = "containers killed by health checks during startup";
    assert_eq!(by_meaning(&memory, PROBES), ids[0]);
    assert_ne!(by_meaning(&memory, PARAPHRASE), ids[0]);
    drop(memory);
    // The file holds the new vectors, not the old: nothing to embed at the next open.
    let memory = home.memory();
    assert_eq!(memory.use_embedder(test_model()).unwrap(), 0);
    assert_eq!(by_meaning(&memory, PROBES), ids[0]);
}

/// A data dir written before the vector file kept its vectors in sled: they move to it
/// when the model is ready, without embedding anything again.
#[test]
fn vectors_kept_in_sled_move_to_the_file() {
    use tandem_search::quantised::{DocVectors, Quantised};
    let home = TestHome::new();
    let model = test_model();
    let shown: Vec<_> = {
        let memory = home.memory();
        knowledge()
            .into_iter()
            .map(|e| memory.show(&memory.add(e).unwrap().id).unwrap())
            .collect()
    };
    // Each entry's vectors as sled kept them, under its model's fingerprint.
    {
        let store = tandem_core::store::Store::open(&home.tandem_home()).unwrap();
        let legacy = store.db().open_tree("memory.vectors").unwrap();
        for e in &shown {
            let text = tandem_core::memory::summary_text(&e.title, &e.tags, &e.content);
            let vectors = DocVectors {
                summary: Quantised::of(&model.embed(&text)),
                context: None,
            };
            legacy.insert(e.id.as_bytes(), vectors.encode()).unwrap();
        }
        let maker = format!("{}:{:016x}", model.dimensions(), model.fingerprint());
        let meta = store.db().open_tree("memory.meta").unwrap();
        meta.insert("embeddings.model", maker.as_bytes()).unwrap();
        store.db().flush().unwrap();
    }
    assert!(!vector_file(&home).exists());
    {
        let memory = home.memory();
        // Read from sled before a model is ready, as before.
        assert!(memory.show(&shown[0].id).unwrap().embeddings.summary);
        assert_eq!(memory.use_embedder(test_model()).unwrap(), 0);
        let found = memory.search(&search(PARAPHRASE)).unwrap();
        assert_eq!(found.results[0].title, SAFARI);
    }
    assert!(vector_file(&home).exists());
    let store = tandem_core::store::Store::open(&home.tandem_home()).unwrap();
    assert!(store.db().open_tree("memory.vectors").unwrap().is_empty());
    drop(store);
    // From the file now: nothing embedded again.
    let memory = home.memory();
    assert!(memory.show(&shown[0].id).unwrap().embeddings.summary);
    assert_eq!(memory.use_embedder(test_model()).unwrap(), 0);
}

#[test]
fn the_same_knowledge_in_other_words_is_similar_and_suggested_as_a_link() {
    let home = TestHome::new();
    let memory = home.memory();
    memory.use_embedder(test_model()).unwrap();
    for e in knowledge() {
        memory.add(e).unwrap();
    }
    let again = memory.add(safari_in_other_words()).unwrap();
    let similar: Vec<&str> = again
        .similar_entries
        .iter()
        .map(|s| s.title.as_str())
        .collect();
    assert_eq!(similar.first(), Some(&SAFARI), "{again:#?}");
    assert!(again.suggestions_created >= 1, "{again:#?}");
    // The link's reason says it is by meaning, and which words the two share (read for
    // the suggestion alone: scoring them read neither entry's text).
    let links = memory.link_suggestions(None).unwrap().suggestions;
    let link = links
        .iter()
        .find(|l| {
            [&l.entry_a.id, &l.entry_b.id].contains(&&again.id)
                && [&l.entry_a.title, &l.entry_b.title].contains(&&SAFARI.to_string())
        })
        .unwrap_or_else(|| panic!("no link suggested between the two: {links:#?}"));
    assert!(
        link.reason.starts_with("Similar meaning")
            && link.reason.contains("shared terms: ")
            && link.reason.contains("invalid")
            && link.reason.contains("date"),
        "{link:#?}"
    );
    let unrelated = ["nginx", "Postgres", "Retry"];
    assert!(
        similar
            .iter()
            .all(|t| !unrelated.iter().any(|u| t.contains(u))),
        "{similar:?}"
    );
}

/// 5,000 entries of numbers and `knowledge()`, embedded: more than the vector table
/// searches exactly (4,096), so it is cut into lists on a thread of the memory's.
fn large_memory(home: &TestHome) -> Memory {
    let memory = home.memory();
    let mut jsonl = String::new();
    for i in 0..5000 {
        // Numbers: nothing a question about software means.
        let filler = Entry::new(
            EntryType::Reference,
            format!("{i} {}", i * 7919 % 10007),
            format!("{} {} {}", i * 31 % 997, i * 17 % 613, i % 89),
            Vec::new(),
        );
        let mut record = serde_json::to_value(&filler).unwrap();
        record["record"] = "entry".into();
        jsonl.push_str(&format!("{record}\n"));
    }
    memory.import(&mut jsonl.as_bytes()).unwrap();
    for e in knowledge() {
        memory.add(e).unwrap();
    }
    assert_eq!(memory.use_embedder(test_model()).unwrap(), 5004);
    memory
}

/// Hybrid searches of a large memory on several threads at once, each finding what the
/// same search finds alone: ids, scores, snippets and totals, with filters, a context and
/// limits. First as soon as the model is in use (the table may not be cut into lists yet:
/// searched whole, it is searched beside the words on the helper thread,
/// `index::helpers`, which the threads contend for), then through the lists. The unit
/// tests hold the helper's share to this (`search.rs`).
#[test]
fn searches_side_by_side_find_what_each_finds_alone() {
    let home = TestHome::new();
    let memory = large_memory(&home);
    let queries: Vec<SearchQuery> = vec![
        search(PARAPHRASE),
        search("nginx timeout"),
        SearchQuery {
            limit: Some(20),
            ..search("retry backoff 613 89")
        },
        SearchQuery {
            context: Some("the deploy failed when two jobs updated the same rows".into()),
            ..search("postgres deadlock")
        },
        SearchQuery {
            entry_type: Some(EntryType::Reference),
            limit: Some(3),
            ..search("7919 31")
        },
        search("Safari dates"),
    ];
    let alone = || -> Vec<_> { queries.iter().map(|q| memory.search(q).unwrap()).collect() };
    // Each thread starts at another query, ten rounds.
    let side_by_side = || {
        std::thread::scope(|scope| {
            let threads: Vec<_> = (0..4)
                .map(|t| {
                    let (memory, queries) = (&memory, &queries);
                    scope.spawn(move || {
                        let mut found = Vec::new();
                        for _ in 0..10 {
                            for i in (0..queries.len()).map(|i| (i + t) % queries.len()) {
                                found.push((i, memory.search(&queries[i]).unwrap()));
                            }
                        }
                        found
                    })
                })
                .collect();
            threads
                .into_iter()
                .flat_map(|t| t.join().unwrap())
                .collect::<Vec<_>>()
        })
    };
    let before = alone();
    let found_before = side_by_side();
    memory.wait_for_vector_lists();
    let after = alone();
    assert_eq!(after[0].results[0].title, SAFARI, "{:#?}", after[0]);
    // The table may have been cut meanwhile: each search found what one alone found,
    // before the cut or after.
    for (i, found) in &found_before {
        assert!(
            *found == before[*i] || *found == after[*i],
            "{found:#?} is neither {:#?} nor {:#?}",
            before[*i],
            after[*i]
        );
    }
    for (i, found) in side_by_side() {
        assert_eq!(found, after[i], "{:?}", queries[i].query);
    }
}

/// More entries than the vector table searches exactly (4,096): the table is cut into lists
/// on a thread of the memory's, and searched whole until it is (search and similarity then
/// give the vectors a thread of their own beside the words). Both find by meaning.
#[test]
fn a_large_memory_finds_by_meaning_beside_the_words() {
    let home = TestHome::new();
    let memory = large_memory(&home);

    // Before the lists are made (most likely: they take a while), and through them.
    let found = memory.search(&search(PARAPHRASE)).unwrap();
    assert_eq!(found.results[0].title, SAFARI, "{found:#?}");
    keywords_and_filters_still_work(&memory);
    // Cut when the table passed 4,096 rows while the entries were embedded: about √n
    // lists of the n it then held.
    let lists = memory.wait_for_vector_lists();
    assert!((64..=71).contains(&lists), "{lists} lists");
    let found = memory.search(&search(PARAPHRASE)).unwrap();
    assert_eq!(found.results[0].title, SAFARI, "{found:#?}");
    keywords_and_filters_still_work(&memory);
    let again = memory.add(safari_in_other_words()).unwrap();
    assert!(again.embeddings_calculated);
    assert_eq!(
        again.similar_entries.first().map(|s| s.title.as_str()),
        Some(SAFARI),
        "{again:#?}"
    );

    // The cut wrote a base (the rows by list, in a mapped file) and started the vector
    // file over it: only what came after the cut is in the file.
    let bases = base_files(&home);
    assert_eq!(bases.len(), 1, "{bases:?}");
    let len = |path: PathBuf| std::fs::metadata(path).unwrap().len();
    let base = len(home.tandem_home().join("index").join(&bases[0]));
    assert!(
        len(vector_file(&home)) < base / 2,
        "the file repeats the base"
    );
    // Giving back the pages searches read loses nothing.
    assert!(memory.release_idle_pages(std::time::Duration::ZERO));
    assert!(
        !memory.release_idle_pages(std::time::Duration::ZERO),
        "nothing read since"
    );
    let found = memory.search(&search(PARAPHRASE)).unwrap();
    assert!(finds_safari(&found), "{found:#?}");
    drop(memory);

    // Opened again: the base is mapped, the file's few records read over it, nothing is
    // embedded again, and it finds what it found.
    let memory = home.memory();
    assert_eq!(memory.use_embedder(test_model()).unwrap(), 0);
    assert_eq!(memory.wait_for_vector_lists(), lists);
    assert_eq!(base_files(&home), bases);
    let found = memory.search(&search(PARAPHRASE)).unwrap();
    assert!(finds_safari(&found), "{found:#?}");
    keywords_and_filters_still_work(&memory);
    assert!(memory.show(&again.id).unwrap().embeddings.summary);
    // The same words again: the copy is the nearest, Safari's entry next.
    let twice = memory.add(safari_in_other_words()).unwrap();
    let similar: Vec<&str> = twice
        .similar_entries
        .iter()
        .map(|s| s.id.as_str())
        .collect();
    assert_eq!(similar.first(), Some(&again.id.as_str()), "{twice:#?}");
    assert!(
        twice
            .similar_entries
            .iter()
            .take(2)
            .any(|s| s.title == SAFARI),
        "{twice:#?}"
    );
}

/// Whether Safari's entry is among the two best (the same knowledge in other words,
/// added since, may rank first).
fn finds_safari(found: &tandem_core::memory::api::SearchOutcome) -> bool {
    found.results.iter().take(2).any(|r| r.title == SAFARI)
}

/// The vector bases beside the vector file.
fn base_files(home: &TestHome) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(home.tandem_home().join("index"))
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().into_string().ok())
        .filter(|n| n.ends_with(".base"))
        .collect();
    names.sort();
    names
}

#[test]
fn ranking_by_meaning_needs_a_model() {
    let home = TestHome::new();
    let memory = home.memory();
    memory.add(knowledge().remove(0)).unwrap();
    let q = search("Safari dates");
    let err = memory.search_ranked(&q, Ranking::Semantic).unwrap_err();
    assert!(matches!(err, MemoryError::EmbeddingsDisabled), "{err:?}");
    assert_eq!(err.code(), "EMBEDDINGS_DISABLED");
    // The hybrid search is BM25 alone meanwhile.
    assert_eq!(memory.search(&q).unwrap().results[0].title, SAFARI);
}

fn model_dir() -> String {
    std::env::var("TANDEM_TEST_MODEL").expect("TANDEM_TEST_MODEL is not set: run scripts/test")
}

/// Through the daemon, as an agent uses it: the model named by the environment loads in
/// the background, the entries added before it are embedded, and a search finds the
/// paraphrase.
#[tokio::test(flavor = "multi_thread")]
async fn an_agent_finds_by_meaning_once_the_daemon_has_its_model() {
    let home = TestHome::new();
    let ws = home.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let model = model_dir();
    let mcp = home
        .mcp_daemon_env(&ws, 60, &[("TANDEM_EMBEDDING_MODEL", &model)])
        .await;
    let _daemon = crate::util::DaemonGuard(&home);
    let mut ids = Vec::new();
    for e in knowledge() {
        let added = mcp
            .ok(
                "rekall_add",
                serde_json::json!({
                    "type": e.entry_type.unwrap().to_string(),
                    "title": e.title,
                    "content": e.content,
                    "tags": e.tags,
                }),
            )
            .await;
        ids.push(added["id"].as_str().unwrap().to_string());
    }
    // Every entry gets its summary vector, whether added before the model was ready or
    // after.
    for id in &ids {
        let mut shown = serde_json::Value::Null;
        for _ in 0..300 {
            shown = mcp.ok("rekall_show", serde_json::json!({ "id": id })).await;
            if shown["embeddings"]["summary"] == true {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert_eq!(shown["embeddings"]["summary"], true, "{shown}");
        assert_eq!(shown["embeddings"]["context"], false, "{shown}");
    }
    let found = mcp
        .ok("rekall_search", serde_json::json!({ "query": PARAPHRASE }))
        .await;
    assert_eq!(found["results"][0]["title"], SAFARI, "{found}");

    let added = mcp
        .ok(
            "rekall_add",
            serde_json::json!({
                "type": "bug",
                "title": "iPhone web view shows Invalid Date for API timestamps",
                "content": "Mobile Apple browsers refuse '2024-01-02 10:00'; the server now sends RFC 3339 with a T.",
                "context": "The calendar widget was blank on iPhones since the API change.",
            }),
        )
        .await;
    assert_eq!(added["embeddings_calculated"], true, "{added}");
    assert_eq!(added["similar_entries"][0]["title"], SAFARI, "{added}");
    let shown = mcp
        .ok("rekall_show", serde_json::json!({ "id": added["id"] }))
        .await;
    assert_eq!(
        shown["embeddings"],
        serde_json::json!({"summary": true, "context": true})
    );
    mcp.close().await;
}

/// A model that cannot be loaded: the memory works by words, and what needs the model
/// says why; turned off, it says so.
#[tokio::test(flavor = "multi_thread")]
async fn without_a_usable_model_words_still_work_and_reindexing_vectors_says_why() {
    let home = TestHome::new();
    let missing = home.path().join("no-such-model");
    let missing = missing.to_str().unwrap();
    let run = |model: &str, args: &[&str]| {
        let out = home
            .std_command()
            .env("TANDEM_EMBEDDING_MODEL", model)
            .args(args)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (ok, out, err) = run(
        missing,
        &[
            "memory",
            "add",
            "--type",
            "bug",
            "--title",
            SAFARI,
            "--content",
            "Invalid Date",
        ],
    );
    assert!(ok, "{out}{err}");
    let (ok, out, err) = run(missing, &["memory", "search", "Safari"]);
    assert!(ok && out.contains(SAFARI), "{out}{err}");

    let (ok, out, err) = run(missing, &["memory", "reindex", "--embeddings"]);
    assert!(!ok, "{out}");
    assert!(
        err.contains("MODEL_NOT_AVAILABLE") || err.contains("is not available"),
        "{err}"
    );
    assert!(
        err.contains("no-such-model"),
        "the reason names the folder: {err}"
    );

    let (ok, out, err) = run("off", &["memory", "reindex", "--embeddings"]);
    assert!(!ok, "{out}");
    assert!(err.contains("turned off"), "{err}");

    let (ok, out, err) = run(&model_dir(), &["memory", "reindex", "--embeddings"]);
    assert!(ok, "{out}{err}");
    assert!(out.contains("embedded 1 entries"), "{out}");
}
