//! The entries' records: plain JSON until the memory holds enough entries to train a
//! zstd dictionary on, compressed with it from then on (the plain ones too), with a new
//! dictionary at each tenfold growth; every record reads back after a reopen.

use std::sync::Arc;

use tandem_core::memory::{Entry, EntryType, Memory, NoProgress};
use tandem_core::store::Store;

use crate::util::{TestHome, entry};

const ZSTD_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];

fn open(home: &TestHome) -> (Arc<Store>, Memory) {
    let store = Arc::new(Store::open(&home.tandem_home()).unwrap());
    let memory = Memory::open(store.clone(), &NoProgress).unwrap();
    (store, memory)
}

/// Each record's key and whether it is a zstd frame, with the dictionary it names.
fn records(store: &Store) -> Vec<(String, Option<u32>)> {
    let tree = store.db().open_tree("memory.entries").unwrap();
    tree.iter()
        .map(|item| {
            let (key, record) = item.unwrap();
            let frame = record
                .starts_with(&ZSTD_MAGIC)
                .then(|| zstd::zstd_safe::get_dict_id_from_frame(&record));
            if frame.is_none() {
                assert_eq!(record.first(), Some(&b'{'), "neither a frame nor JSON");
            }
            (String::from_utf8(key.to_vec()).unwrap(), frame)
        })
        .collect()
}

/// `n` entries of the export format, their words varied as a knowledge base's are.
pub(crate) fn jsonl(from: usize, n: usize) -> String {
    let things = ["cache", "parser", "socket", "migration", "token", "index"];
    let failures = [
        "times out",
        "leaks memory",
        "panics on empty input",
        "drops writes",
    ];
    let mut out = String::new();
    for i in from..from + n {
        let (thing, failure) = (things[i % things.len()], failures[i % failures.len()]);
        let e = Entry::new(
            EntryType::Bug,
            format!("The {thing} {failure} under load ({i})"),
            format!(
                "Seen in build {i}: the {thing} {failure} when more than {} requests arrive \
                 at once. Fixed by bounding the queue and retrying with backoff.",
                i % 97
            ),
            vec![thing.to_string(), "load".to_string()],
        );
        let mut record = serde_json::to_value(&e).unwrap();
        record["record"] = "entry".into();
        out.push_str(&format!("{record}\n"));
    }
    out
}

fn dictionaries(store: &Store) -> usize {
    store.db().open_tree("memory.dictionaries").unwrap().len()
}

#[test]
fn records_are_compressed_once_a_dictionary_is_trained_and_read_back_after_a_reopen() {
    let home = TestHome::new();
    let (store, memory) = open(&home);
    memory.import(&mut jsonl(0, 999).as_bytes()).unwrap();
    assert!(records(&store).iter().all(|(_, frame)| frame.is_none()));
    assert_eq!(dictionaries(&store), 0);
    let before: Vec<Entry> = memory.recent(2000).unwrap();

    // The thousandth entry trains the first dictionary, and every record is compressed.
    let added = memory
        .add(entry(
            EntryType::Pattern,
            "Bound every queue",
            "An unbounded queue turns a burst into memory growth.",
            &["queue"],
        ))
        .unwrap();
    assert_eq!(dictionaries(&store), 1);
    let first = records(&store);
    assert_eq!(first.len(), 1000);
    let first_dict = first[0].1.expect("compressed");
    assert!(first.iter().all(|(_, frame)| *frame == Some(first_dict)));
    // An access recorded keeps the record compressed, and the entry whole.
    let shown = memory.show(&before[10].id.to_string()).unwrap();
    assert_eq!(shown.content, before[10].content);
    assert_eq!(memory.resolve(&shown.id).unwrap().access_count, 1);
    let key = before[10].id.to_string();
    assert!(
        records(&store)
            .iter()
            .any(|(k, f)| *k == key && f.is_some())
    );

    // A tenfold growth trains another, beside the writes, for what is written after: the
    // import's records were written with the first.
    memory.import(&mut jsonl(1000, 9000).as_bytes()).unwrap();
    assert!(records(&store).iter().all(|(_, f)| *f == Some(first_dict)));
    memory.wait_for_dictionary();
    assert_eq!(dictionaries(&store), 2);

    drop(memory);
    drop(store);
    let (store, memory) = open(&home);
    assert_eq!(memory.entry_count().unwrap(), 10_000);
    for e in before.iter().step_by(97) {
        let again = memory.resolve(&e.id.to_string()).unwrap();
        assert_eq!(
            (again.title, again.content),
            (e.title.clone(), e.content.clone())
        );
    }
    assert_eq!(
        memory.resolve(&added.id).unwrap().title,
        "Bound every queue"
    );
    let mut exported = Vec::new();
    let report = memory.export(&mut exported).unwrap();
    assert_eq!(report.entries, 10_000);
    // Adds go on with the newest dictionary.
    let later = memory
        .add(entry(
            EntryType::Decision,
            "Retry with backoff",
            "Jitter too.",
            &[],
        ))
        .unwrap();
    let all = records(&store);
    let (_, later_dict) = all.iter().find(|(k, _)| *k == later.id).unwrap();
    assert!(
        later_dict.is_some_and(|d| d != first_dict),
        "{later_dict:?}"
    );
    assert_eq!(memory.resolve(&later.id).unwrap().content, "Jitter too.");
}

/// An import that brings an empty memory past the first training trains on what it
/// brings, and writes every record compressed.
#[test]
fn a_large_first_import_is_written_compressed() {
    let home = TestHome::new();
    let (store, memory) = open(&home);
    memory
        .add(entry(EntryType::Config, "Set the pool size", "To 32.", &[]))
        .unwrap();
    memory.import(&mut jsonl(0, 1500).as_bytes()).unwrap();
    assert_eq!(dictionaries(&store), 1);
    let all = records(&store);
    assert_eq!(all.len(), 1501);
    assert!(
        all.iter().all(|(_, f)| f.is_some()),
        "the earlier add re-encoded too"
    );
    let found = memory.resolve(&all[0].0).unwrap();
    assert!(!found.title.is_empty());
}
