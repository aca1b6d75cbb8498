//! Suggestions on a clustered knowledge base (every entry like many others): the caps per
//! entry hold, nothing is suggested twice, rejected suggestions stay rejected, and a data
//! dir written before the index by entry gets it at open.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use tandem_core::memory::{
    MAX_GENERALIZE_MEMBERS, MAX_PENDING_GENERALIZATIONS, MAX_PENDING_LINKS, Memory, NoProgress,
    Suggestion, SuggestionKind, SuggestionStatus,
};
use tandem_core::store::Store;
use ulid::Ulid;

use crate::util::TestHome;

#[path = "../../benches/common/clustered.rs"]
mod clustered;
use clustered::Clustered;

fn open(home: &TestHome) -> (Arc<Store>, Memory) {
    let store = Arc::new(Store::open(&home.tandem_home()).unwrap());
    let memory = Memory::open(store.clone(), &NoProgress).unwrap();
    (store, memory)
}

fn add_clustered(memory: &Memory, corpus: &mut Clustered, n: usize) -> u64 {
    (0..n)
        .map(|_| memory.add(corpus.entry()).unwrap().suggestions_created as u64)
        .sum()
}

/// Every suggestion as stored.
fn stored(store: &Store) -> Vec<Suggestion> {
    let tree = store.db().open_tree("memory.suggestions").unwrap();
    tree.iter()
        .values()
        .map(|v| Suggestion::from_record(&v.unwrap()).unwrap())
        .collect()
}

/// What the index by entry holds: (entry, suggestion). A row is an entry's id (16 bytes,
/// big-endian) → 22 bytes a suggestion, its id first.
fn by_entry_rows(store: &Store) -> HashSet<(Ulid, Ulid)> {
    let tree = store.db().open_tree("memory.suggestions_of_entry").unwrap();
    let id = |b: &[u8]| Ulid::from_bytes(b[..16].try_into().unwrap());
    let mut rows = HashSet::new();
    for item in tree.iter() {
        let (entry, touches) = item.unwrap();
        assert_eq!(touches.len() % 22, 0, "{touches:?}");
        rows.extend(touches.chunks(22).map(|t| (id(&entry), id(t))));
    }
    rows
}

/// The invariants of the stored suggestions, whatever the adds were.
fn check_invariants(store: &Store) {
    let all = stored(store);
    let mut keys = HashSet::new();
    let mut pending: HashMap<(Ulid, SuggestionKind), usize> = HashMap::new();
    let mut want_rows = HashSet::new();
    for s in &all {
        if s.status == SuggestionStatus::Superseded {
            // Kept as what resolving it says.
            assert!(s.entries.is_empty() && s.proposal.is_none(), "{s:?}");
            continue;
        }
        let mut entries = s.entries.clone();
        entries.sort();
        let what = (s.kind, entries, s.remembered_key());
        assert!(keys.insert(what), "suggested twice: {s:?}");
        let distinct: HashSet<&Ulid> = s.entries.iter().collect();
        assert_eq!(distinct.len(), s.entries.len(), "an entry twice in {s:?}");
        if s.kind == SuggestionKind::Generalize {
            assert!(s.entries.len() <= MAX_GENERALIZE_MEMBERS, "{s:?}");
        }
        if s.status == SuggestionStatus::Pending {
            for e in &s.entries {
                *pending.entry((*e, s.kind)).or_default() += 1;
            }
        }
        if s.status != SuggestionStatus::Superseded {
            want_rows.extend(s.entries.iter().map(|e| (*e, s.id)));
        }
    }
    for ((entry, kind), n) in &pending {
        let cap = match kind {
            SuggestionKind::Link => MAX_PENDING_LINKS,
            SuggestionKind::Generalize => MAX_PENDING_GENERALIZATIONS,
            SuggestionKind::Entry => usize::MAX,
        };
        assert!(*n <= cap, "{entry} has {n} pending {kind} suggestions");
    }
    assert_eq!(
        by_entry_rows(store),
        want_rows,
        "the index by entry holds every suggestion not superseded, and only those"
    );
    // Each entry suggestion under a key of its own, and nothing else: a link or a
    // generalisation names the entry whose add made it, so none comes back.
    let key_tree = store.db().open_tree("memory.suggestion_keys").unwrap();
    let mut keyed: Vec<Ulid> = key_tree
        .iter()
        .values()
        .map(|id| Ulid::from_string(std::str::from_utf8(&id.unwrap()).unwrap()).unwrap())
        .collect();
    keyed.sort();
    let mut ids: Vec<Ulid> = all
        .iter()
        .filter(|s| s.kind == SuggestionKind::Entry)
        .map(|s| s.id)
        .collect();
    ids.sort();
    assert_eq!(keyed, ids, "a key for every entry suggestion, and one only");
    for (_, _, key) in keys {
        assert!(key.is_none_or(|k| key_tree.contains_key(k).unwrap()));
    }
}

/// A link's or a generalisation's key as data dirs kept them before
/// `Suggestion::remembered_key`: the kind's tag, then the ids sorted.
fn key_of_format_5(kind: SuggestionKind, entries: &[Ulid]) -> Vec<u8> {
    let mut ids = entries.to_vec();
    ids.sort();
    let mut key = vec![kind.tag()];
    ids.iter()
        .for_each(|id| key.extend_from_slice(&id.to_bytes()));
    key
}

#[test]
fn clustered_adds_keep_suggestions_capped_and_unique() {
    // (seed, adds): two different corpora.
    for (seed, adds) in [(1, 300), (99, 150)] {
        let home = TestHome::new();
        let (store, memory) = open(&home);
        let mut corpus = Clustered::new(seed);
        let created = add_clustered(&memory, &mut corpus, adds);
        check_invariants(&store);
        let all = stored(&store);
        assert_eq!(all.len() as u64, created, "seed {seed}");
        let superseded = all
            .iter()
            .filter(|s| s.status == SuggestionStatus::Superseded)
            .count();
        assert!(
            superseded > 0,
            "seed {seed}: a clustered corpus reaches the caps"
        );
        let links = memory.link_suggestions(None).unwrap().total_pending;
        let gens = memory.generalize_suggestions(None).unwrap().total_pending;
        assert!(links > 0 && gens > 0, "seed {seed}: {links} {gens}");
        assert!(
            links as usize <= adds * MAX_PENDING_LINKS / 2,
            "seed {seed}: {links} pending links"
        );
    }
}

#[test]
fn rejected_suggestions_stay_rejected_and_never_come_back() {
    let home = TestHome::new();
    let (store, memory) = open(&home);
    let mut corpus = Clustered::new(5);
    add_clustered(&memory, &mut corpus, 100);
    let mut rejected = HashSet::new();
    for s in stored(&store) {
        if s.status == SuggestionStatus::Pending {
            memory.reject(&s.id.to_string()).unwrap();
            rejected.insert(s.id);
        }
    }
    assert!(!rejected.is_empty());
    add_clustered(&memory, &mut corpus, 150);
    check_invariants(&store);
    let all = stored(&store);
    let rejected_groups: Vec<&Suggestion> =
        all.iter().filter(|s| rejected.contains(&s.id)).collect();
    for s in &rejected_groups {
        assert_eq!(s.status, SuggestionStatus::Rejected, "{s:?}");
    }
    // A rejected group comes back only grown by two entries.
    for s in all.iter().filter(|s| s.status == SuggestionStatus::Pending) {
        for r in rejected_groups
            .iter()
            .filter(|r| r.kind == SuggestionKind::Generalize && s.kind == r.kind)
        {
            let subset = r.entries.iter().all(|e| s.entries.contains(e));
            assert!(
                !subset || s.entries.len() >= r.entries.len() + 2,
                "{s:?} repeats the rejected {r:?}"
            );
        }
    }
}

#[test]
fn a_data_dir_without_the_index_by_entry_gets_it_at_open() {
    let home = TestHome::new();
    let (store, memory) = open(&home);
    let mut corpus = Clustered::new(3);
    add_clustered(&memory, &mut corpus, 60);
    let ids: Vec<String> = memory
        .recent(60)
        .unwrap()
        .into_iter()
        .map(|e| e.id.to_string())
        .collect();
    drop(memory);
    // What a data dir of an earlier version holds: no index by entry (format 4's rows a
    // suggestion and entry, which the open drops, or none), no markers, a key for each
    // link (forgotten at open), and an entry with more pending links than the cap (scores 0.40, 0.41, ...; the suggestions of the
    // adds are forgotten, so that these are all there is).
    let db = store.db();
    db.drop_tree("memory.suggestions_of_entry").unwrap();
    let meta = db.open_tree("memory.meta").unwrap();
    meta.remove("suggestions_of_entry").unwrap();
    meta.remove("suggestion_keys_of_proposals_only").unwrap();
    meta.insert("suggestions_by_entry", &[1u8]).unwrap();
    let legacy = db.open_tree("memory.suggestions_by_entry").unwrap();
    legacy
        .insert(format!("{}/{}", ids[0], Ulid::new()), &b"{}"[..])
        .unwrap();
    let suggestions = db.open_tree("memory.suggestions").unwrap();
    let keys = db.open_tree("memory.suggestion_keys").unwrap();
    suggestions.clear().unwrap();
    keys.clear().unwrap();
    let crowded = Ulid::from_string(&ids[0]).unwrap();
    let extra = MAX_PENDING_LINKS + 3;
    let mut old: Vec<(Ulid, f32)> = Vec::new();
    for (i, other) in ids[1..].iter().enumerate().take(extra) {
        let pair = vec![crowded, Ulid::from_string(other).unwrap()];
        let key = key_of_format_5(SuggestionKind::Link, &pair);
        let s = Suggestion {
            id: Ulid::new(),
            kind: SuggestionKind::Link,
            entries: pair,
            score: 0.40 + i as f32 / 100.0,
            reason: "written by an earlier version".into(),
            by_meaning: false,
            status: SuggestionStatus::Pending,
            created_at: jiff::Timestamp::now(),
            resolved_at: None,
            proposal: None,
        };
        suggestions
            .insert(s.id.to_string(), serde_json::to_vec(&s).unwrap())
            .unwrap();
        keys.insert(key, s.id.to_string().as_bytes()).unwrap();
        old.push((s.id, s.score));
    }
    db.flush().unwrap();
    drop((suggestions, keys, meta, legacy));
    drop(store);

    let (store, memory) = open(&home);
    check_invariants(&store);
    let names = store.db().tree_names();
    assert!(
        !names.iter().any(|n| n == b"memory.suggestions_by_entry"),
        "{names:?}"
    );
    // The crowded entry keeps its strongest pending links.
    let pending_of_crowded: Vec<Suggestion> = stored(&store)
        .into_iter()
        .filter(|s| {
            s.status == SuggestionStatus::Pending
                && s.kind == SuggestionKind::Link
                && s.entries.contains(&crowded)
        })
        .collect();
    assert_eq!(pending_of_crowded.len(), MAX_PENDING_LINKS);
    let weakest_kept = pending_of_crowded
        .iter()
        .map(|s| s.score)
        .fold(f32::INFINITY, f32::min);
    let all = stored(&store);
    for (id, score) in &old {
        let s = all.iter().find(|s| s.id == *id).unwrap();
        let kept = s.status == SuggestionStatus::Pending;
        assert_eq!(kept, *score >= weakest_kept, "{s:?}");
    }
    // And adds go on under the caps.
    add_clustered(&memory, &mut corpus, 40);
    check_invariants(&store);
}
