//! The memory with the test embedding model (`TANDEM_TEST_MODEL`, built by `scripts/test`):
//! vectors made and stored, hybrid search finding paraphrases, similarity by meaning, and
//! what happens without a model.

use std::path::PathBuf;

use tandem::memory::embeddings::Embedder;
use tandem::memory::{EntryType, MemoryError, NewEntry, Ranking, SearchQuery};

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

    // Keywords still work, and the keyword match stays first.
    let keyword = memory.search(&search("nginx timeout")).unwrap();
    assert_eq!(
        keyword.results[0].title,
        "Increase nginx proxy read timeout for slow uploads"
    );
    // Filters apply to matches by meaning too.
    let filtered = memory
        .search(&SearchQuery {
            entry_type: Some(EntryType::Config),
            ..q.clone()
        })
        .unwrap();
    assert!(
        filtered.results.iter().all(|r| r.entry_type == "config"),
        "{filtered:#?}"
    );
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
    let memory = home.memory();
    // Only the entry added without the model is embedded again.
    assert_eq!(memory.use_embedder(test_model()).unwrap(), 1);
    assert!(memory.show(&late_id).unwrap().embeddings.summary);
    let found = memory.search(&search(PARAPHRASE)).unwrap();
    assert_eq!(found.results[0].title, SAFARI);
}

#[test]
fn the_same_knowledge_in_other_words_is_similar_and_suggested_as_a_link() {
    let home = TestHome::new();
    let memory = home.memory();
    memory.use_embedder(test_model()).unwrap();
    for e in knowledge() {
        memory.add(e).unwrap();
    }
    let again = memory
        .add(entry(
            EntryType::Bug,
            "iPhone web view shows Invalid Date for API timestamps",
            "Mobile Apple browsers refuse '2024-01-02 10:00'; the server now sends RFC 3339 with a T.",
            &["ios", "datetime"],
        ))
        .unwrap();
    let similar: Vec<&str> = again
        .similar_entries
        .iter()
        .map(|s| s.title.as_str())
        .collect();
    assert_eq!(similar.first(), Some(&SAFARI), "{again:#?}");
    assert!(again.suggestions_created >= 1, "{again:#?}");
    let unrelated = ["nginx", "Postgres", "Retry"];
    assert!(
        similar
            .iter()
            .all(|t| !unrelated.iter().any(|u| t.contains(u))),
        "{similar:?}"
    );
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
