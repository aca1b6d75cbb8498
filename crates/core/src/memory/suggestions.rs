//! Suggestions made on add, under caps per entry, and the index that finds an entry's
//! suggestions without a scan.
//!
//! Four trees: `memory.suggestions` (id → record) holds every suggestion ever made;
//! `memory.suggestion_keys` (an entry suggestion's proposal's key → id; they are made in
//! `proposals.rs`) what each entry suggestion is about, so none is suggested twice (a link
//! or a generalisation never comes back either: each is made by an add and names the
//! entry added);
//! `memory.suggestions_of_entry` (an entry → its [`Touches`]: kind, status and score of
//! each suggestion touching it that is not superseded) what an add weighs, one read an
//! entry, so an add costs the same with ten suggestions stored or a million;
//! `memory.suggestions_pending` ([`PENDING`]) the pending ones in the order they are
//! listed, and how many of each kind, so a listing reads its page, not every suggestion.
//!
//! Caps: an entry has at most [`MAX_PENDING_LINKS`] pending link suggestions and
//! [`MAX_PENDING_GENERALIZATIONS`] pending generalisations. When a new one would pass the
//! cap, the entry's weakest pending one of that kind is superseded if the new one is
//! stronger; otherwise the new one is not made (a link), or goes without that entry (a
//! generalisation). A superseded suggestion keeps its key, so it never comes back, and
//! its record only what accepting or rejecting it says
//! ([`Suggestion::superseded_record`]): on the clustered corpus, most suggestions end
//! superseded, and their entries' lists are a part of the records worth saving
//! (`benches/memory.rs` adds the clustered corpus and prints the suggestions made and left).

use std::collections::{HashMap, HashSet};

use jiff::Timestamp;
use sled::Transactional;
use sled::transaction::{ConflictableTransactionError, TransactionalTree};
use ulid::Ulid;

use super::next_id;
use super::records::{Entry, MemoryType, Suggestion, SuggestionKind, SuggestionStatus};
use super::similarity::Threshold;
use super::similarity::{Lookup, Similar};
use super::{GENERALIZE_GROUP, META, Memory, Result};
use crate::store::Store;

/// Pending link suggestions an entry may have at once.
pub const MAX_PENDING_LINKS: usize = 5;
/// Pending generalisations an entry may be part of at once.
pub const MAX_PENDING_GENERALIZATIONS: usize = 3;
/// The most entries one generalisation groups: the new entry and its most similar.
pub const MAX_GENERALIZE_MEMBERS: usize = 10;
/// Link suggestions one add may make.
const MAX_LINKS_PER_ADD: usize = 3;
/// A generalisation's reason names at most this many of the words its members share with
/// the new entry (the first members' first).
const GENERALIZE_REASON_WORDS: usize = 5;

/// `memory.suggestions`: a suggestion's id → its record.
pub(super) const SUGGESTIONS: &str = "memory.suggestions";
/// `memory.suggestion_keys`: an entry suggestion's key → its id.
pub(super) const KEYS: &str = "memory.suggestion_keys";
/// The `memory.meta` key set once `memory.suggestion_keys` holds binary keys (format 5).
const META_KEYS: &[u8] = b"suggestion_keys";
/// The `memory.meta` key set once `memory.suggestion_keys` holds entry suggestions' keys
/// only ([`Suggestion::remembered_key`]).
const META_PROPOSAL_KEYS_ONLY: &[u8] = b"suggestion_keys_of_proposals_only";

/// `memory.suggestions_of_entry`: an entry's id (16 bytes, big-endian) → [`Touches`].
pub(super) const OF_ENTRY: &str = "memory.suggestions_of_entry";
/// The `memory.meta` key set once `memory.suggestions_of_entry` holds every suggestion.
const META_OF_ENTRY: &[u8] = b"suggestions_of_entry";
/// What format 4 kept instead: a row for each entry and suggestion (`{entry}/{suggestion}`
/// → its [`Touch`] in JSON), ~550 bytes of sled's file a row; dropped once converted.
const LEGACY_BY_ENTRY: &str = "memory.suggestions_by_entry";
const LEGACY_META_BY_ENTRY: &[u8] = b"suggestions_by_entry";

/// What an add needs of a suggestion touching an entry, without reading the suggestion.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Touch {
    kind: SuggestionKind,
    status: SuggestionStatus,
    score: f32,
}

impl Touch {
    fn of(s: &Suggestion) -> Touch {
        Touch {
            kind: s.kind,
            status: s.status,
            score: s.score,
        }
    }

    fn is_pending(&self, kind: SuggestionKind) -> bool {
        self.kind == kind && self.status == SuggestionStatus::Pending
    }
}

/// An entry's suggestions that are not superseded, by id, as `memory.suggestions_of_entry`
/// keeps them: [`TOUCH_LEN`] bytes each (the id, big-endian; the kind's tag; the status's;
/// the score, big-endian), in the order of their ids.
struct Touches(Vec<(Ulid, Touch)>);

const TOUCH_LEN: usize = 16 + 1 + 1 + 4;

impl Touches {
    fn decode(bytes: &[u8]) -> Result<Touches> {
        let corrupt = || super::MemoryError::Corrupt(format!("a bad row in {OF_ENTRY}"));
        if !bytes.len().is_multiple_of(TOUCH_LEN) {
            return Err(corrupt());
        }
        let touch = |b: &[u8]| -> Option<(Ulid, Touch)> {
            let id = Ulid::from_bytes(b[..16].try_into().ok()?);
            let kind = SuggestionKind::from_tag(b[16])?;
            let status =
                SuggestionStatus::from_tag(b[17]).filter(|s| *s != SuggestionStatus::Superseded)?;
            let score = f32::from_be_bytes(b[18..22].try_into().ok()?);
            Some((
                id,
                Touch {
                    kind,
                    status,
                    score,
                },
            ))
        };
        let touches = bytes.chunks(TOUCH_LEN).map(touch).collect::<Option<_>>();
        touches.map(Touches).ok_or_else(corrupt)
    }

    fn read(tree: &sled::Tree, entry: &Ulid) -> Result<Touches> {
        match tree.get(entry.to_bytes())? {
            Some(bytes) => Touches::decode(&bytes),
            None => Ok(Touches(Vec::new())),
        }
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.0.len() * TOUCH_LEN);
        for (id, t) in &self.0 {
            out.extend_from_slice(&id.to_bytes());
            out.push(t.kind.tag());
            out.push(t.status.tag());
            out.extend_from_slice(&t.score.to_be_bytes());
        }
        out
    }

    /// `s` as it touches the entry: put in its place, or taken out once superseded.
    fn set(&mut self, s: &Suggestion) {
        let at = self.0.binary_search_by(|(id, _)| id.cmp(&s.id));
        match (at, s.status) {
            (Ok(i), SuggestionStatus::Superseded) => {
                self.0.remove(i);
            }
            (Err(_), SuggestionStatus::Superseded) => {}
            (Ok(i), _) => self.0[i].1 = Touch::of(s),
            (Err(i), _) => self.0.insert(i, (s.id, Touch::of(s))),
        }
    }
}

/// `memory.suggestions_pending`: a row for each pending suggestion, keyed by its kind's tag
/// ([`SuggestionKind::tag`]), then its score and its id, each stored so that the keys
/// ascend in the order a listing shows them (the best first; of equal scores, the newest);
/// and under the kind's tag alone, how many are pending (a `u64`, big-endian).
pub(super) const PENDING: &str = "memory.suggestions_pending";
/// The `memory.meta` key set once `memory.suggestions_pending` holds every pending one.
const META_PENDING: &[u8] = b"suggestions_pending";
/// A row's key: a kind's tag, a score, an id.
const PENDING_KEY_LEN: usize = 1 + 4 + 16;

/// A pending suggestion's row key. A score's bits are turned so that unsigned order is
/// [`f32::total_cmp`]'s, then inverted with the id's so the keys ascend best first.
fn pending_key(s: &Suggestion) -> [u8; PENDING_KEY_LEN] {
    let bits = s.score.to_bits();
    let ordered = if bits >> 31 == 1 {
        !bits
    } else {
        bits | 1 << 31
    };
    let mut key = [0; PENDING_KEY_LEN];
    key[0] = s.kind.tag();
    key[1..5].copy_from_slice(&(!ordered).to_be_bytes());
    key[5..].copy_from_slice(&(!u128::from(s.id)).to_be_bytes());
    key
}

fn suggestion_of_pending_key(key: &[u8]) -> Option<Ulid> {
    let id: [u8; 16] = key.get(5..PENDING_KEY_LEN)?.try_into().ok()?;
    (key.len() == PENDING_KEY_LEN).then(|| Ulid::from(!u128::from_be_bytes(id)))
}

fn read_count(bytes: Option<&[u8]>) -> u64 {
    bytes
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_be_bytes)
}

/// The suggestion trees, inside a transaction over them (and whatever else it writes).
pub(super) struct Trees<'t> {
    pub suggestions: &'t TransactionalTree,
    pub keys: &'t TransactionalTree,
    pub of_entry: &'t TransactionalTree,
    pub pending: &'t TransactionalTree,
}

/// Writes a suggestion, its key, its place in the rows of `memory.suggestions_of_entry`
/// (taken out once it is superseded) and its row in `memory.suggestions_pending` while it
/// is pending, with its kind's count.
pub(super) fn put(
    t: &Trees<'_>,
    s: &Suggestion,
) -> std::result::Result<(), ConflictableTransactionError<super::MemoryError>> {
    let id = s.id.to_string();
    let record = match s.status {
        SuggestionStatus::Superseded => s.superseded_record(),
        _ => s.to_record(),
    };
    t.suggestions.insert(id.as_bytes(), record)?;
    if let Some(key) = s.remembered_key() {
        t.keys.insert(key, id.as_bytes())?;
    }
    for e in &s.entries {
        let key = e.to_bytes();
        let mut touches = match t.of_entry.get(key)? {
            Some(bytes) => Touches::decode(&bytes).map_err(ConflictableTransactionError::Abort)?,
            None => Touches(Vec::new()),
        };
        touches.set(s);
        if touches.0.is_empty() {
            t.of_entry.remove(&key[..])?;
        } else {
            t.of_entry.insert(&key[..], touches.encode())?;
        }
    }
    let row = pending_key(s);
    let counted: i64 = if s.status == SuggestionStatus::Pending {
        t.pending.insert(&row[..], &[][..])?.is_none().into()
    } else {
        -i64::from(t.pending.remove(&row[..])?.is_some())
    };
    if counted != 0 {
        let tag = [s.kind.tag()];
        let count = read_count(t.pending.get(tag)?.as_deref());
        let count = count.saturating_add_signed(counted);
        t.pending.insert(&tag[..], &count.to_be_bytes()[..])?;
    }
    Ok(())
}

/// Writes `list` in one transaction over the suggestion trees. Caller holds the write lock
/// and flushes.
pub(super) fn store(memory: &Memory, list: &[Suggestion]) -> Result<()> {
    (
        &memory.suggestions,
        &memory.suggestion_keys,
        &memory.suggestions_of_entry,
        &memory.suggestions_pending,
    )
        .transaction(|(suggestions, keys, of_entry, pending)| {
            let trees = Trees {
                suggestions,
                keys,
                of_entry,
                pending,
            };
            for s in list {
                put(&trees, s)?;
            }
            Ok::<_, ConflictableTransactionError<super::MemoryError>>(())
        })?;
    Ok(())
}

/// The first `limit` pending suggestions of `kind` (the best first; of equal scores, the
/// newest), and how many of that kind are pending: the page's rows and records are read,
/// and nothing else.
pub(super) fn pending_page(
    memory: &Memory,
    kind: SuggestionKind,
    limit: usize,
) -> Result<(Vec<Suggestion>, u64)> {
    let tag = [kind.tag()];
    let total = read_count(memory.suggestions_pending.get(tag)?.as_deref());
    let mut page = Vec::new();
    for key in memory.suggestions_pending.scan_prefix(tag).keys() {
        let key = key?;
        if key.len() == tag.len() {
            continue;
        }
        if page.len() == limit {
            break;
        }
        let id = suggestion_of_pending_key(&key)
            .ok_or_else(|| super::MemoryError::Corrupt(format!("a bad key in {PENDING}")))?;
        page.push(load(memory, &id)?);
    }
    Ok((page, total))
}

/// A record of `memory.suggestions` ([`Suggestion::from_record`]).
pub(super) fn decode_record(record: &[u8]) -> Result<Suggestion> {
    Suggestion::from_record(record)
        .ok_or_else(|| super::MemoryError::Corrupt("a bad record in memory.suggestions".into()))
}

/// A stored suggestion, which an index names.
fn load(memory: &Memory, id: &Ulid) -> Result<Suggestion> {
    match memory.suggestions.get(id.to_string())? {
        Some(bytes) => decode_record(&bytes),
        None => Err(super::MemoryError::Corrupt(format!(
            "suggestion {id} is indexed but not stored"
        ))),
    }
}

/// What an add changes: suggestions to create, and existing ones superseded.
#[derive(Default)]
pub(super) struct Plan {
    pub new: Vec<Suggestion>,
    pub superseded: Vec<Suggestion>,
}

/// Plans the suggestions of a new entry, given the entries similar to it (best first).
/// Entries in `no_suggest` get none (the sources of a generalisation). Reads only the
/// suggestions touching the entries concerned. Caller holds the write lock.
pub(super) fn plan(
    memory: &Memory,
    entry: &Entry,
    similar: &[Similar],
    no_suggest: &[Ulid],
    now: Timestamp,
    lookup: &mut Lookup<'_>,
) -> Result<Plan> {
    let mut planner = Planner {
        memory,
        now,
        live: HashMap::new(),
        plan: Plan::default(),
        lookup,
    };
    planner.links(entry, similar, no_suggest)?;
    planner.generalization(entry, similar, no_suggest)?;
    Ok(planner.plan)
}

struct Planner<'m, 'l, 'c> {
    memory: &'m Memory,
    /// The similar entries' cards, read for those a generalisation weighs.
    lookup: &'l mut Lookup<'c>,
    now: Timestamp,
    /// Each entry's suggestions that are not superseded, as this plan leaves them; read
    /// from `memory.suggestions_of_entry` on first use.
    live: HashMap<Ulid, Vec<(Ulid, Touch)>>,
    plan: Plan,
}

impl Planner<'_, '_, '_> {
    fn live(&mut self, entry: Ulid) -> Result<&mut Vec<(Ulid, Touch)>> {
        if !self.live.contains_key(&entry) {
            let mut rows = Touches::read(&self.memory.suggestions_of_entry, &entry)?.0;
            rows.retain(|(id, _)| !self.plan.superseded.iter().any(|s| s.id == *id));
            for s in self.plan.new.iter().filter(|s| s.entries.contains(&entry)) {
                rows.push((s.id, Touch::of(s)));
            }
            self.live.insert(entry, rows);
        }
        Ok(self.live.get_mut(&entry).expect("just filled"))
    }

    /// An entry's pending suggestions of a kind, with their scores.
    fn pending(&mut self, entry: Ulid, kind: SuggestionKind) -> Result<Vec<(Ulid, f32)>> {
        Ok(self
            .live(entry)?
            .iter()
            .filter(|(_, t)| t.is_pending(kind))
            .map(|(id, t)| (*id, t.score))
            .collect())
    }

    fn load(&self, id: &Ulid) -> Result<Suggestion> {
        load(self.memory, id)
    }

    fn supersede(&mut self, id: Ulid) -> Result<()> {
        let mut s = self.load(&id)?;
        s.status = SuggestionStatus::Superseded;
        s.resolved_at = Some(self.now);
        for e in &s.entries {
            if let Some(rows) = self.live.get_mut(e) {
                rows.retain(|(sid, _)| *sid != id);
            }
        }
        self.plan.superseded.push(s);
        Ok(())
    }

    fn create(&mut self, s: Suggestion) -> Result<()> {
        for e in &s.entries {
            let touch = Touch::of(&s);
            self.live(*e)?.push((s.id, touch));
        }
        self.plan.new.push(s);
        Ok(())
    }

    /// The pending suggestion of `kind` that must give way for a new one of `score` to
    /// touch `entry`: `Ok(None)` when there is room, `Err(())` when every pending one is
    /// at least as strong.
    fn weakest_to_drop(
        &mut self,
        entry: Ulid,
        kind: SuggestionKind,
        score: f32,
        cap: usize,
        excluding: &HashSet<Ulid>,
    ) -> Result<std::result::Result<Option<Ulid>, ()>> {
        let pending: Vec<(Ulid, f32)> = self
            .pending(entry, kind)?
            .into_iter()
            .filter(|(id, _)| !excluding.contains(id))
            .collect();
        if pending.len() < cap {
            return Ok(Ok(None));
        }
        // The weakest; of equals, the oldest.
        let weakest = pending
            .iter()
            .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)))
            .expect("cap is at least one");
        Ok(if weakest.1 < score {
            Ok(Some(weakest.0))
        } else {
            Err(())
        })
    }

    fn links(&mut self, entry: &Entry, similar: &[Similar], no_suggest: &[Ulid]) -> Result<()> {
        for s in similar
            .iter()
            .filter(|s| s.counts_for(Threshold::Link) && !no_suggest.contains(&s.id))
            .take(MAX_LINKS_PER_ADD)
        {
            // The new entry has no suggestion yet: only a link made since counts.
            if self.memory.linked_either_way(&entry.id, &s.id)? {
                continue;
            }
            // The new entry has room (it makes at most MAX_LINKS_PER_ADD); the other may not.
            match self.weakest_to_drop(
                s.id,
                SuggestionKind::Link,
                s.score,
                MAX_PENDING_LINKS,
                &HashSet::new(),
            )? {
                Err(()) => continue,
                Ok(Some(weakest)) => self.supersede(weakest)?,
                Ok(None) => {}
            }
            let suggestion = Suggestion {
                id: next_id(),
                kind: SuggestionKind::Link,
                entries: vec![entry.id, s.id],
                score: s.score,
                reason: String::new(),
                by_meaning: s.by_meaning,
                status: SuggestionStatus::Pending,
                created_at: self.now,
                resolved_at: None,
                proposal: None,
            };
            self.create(suggestion)?;
        }
        Ok(())
    }

    /// When the new entry and 2+ similar entries of its type pile up, suggests generalising
    /// the group (the new entry and up to [`MAX_GENERALIZE_MEMBERS`] − 1 most similar).
    /// A pending generalisation of a subset of the group is superseded by it; a rejected
    /// one blocks it unless the group adds at least two entries to it.
    fn generalization(
        &mut self,
        entry: &Entry,
        similar: &[Similar],
        no_suggest: &[Ulid],
    ) -> Result<()> {
        if entry.memory_type != MemoryType::Episodic {
            return Ok(());
        }
        // Episodic entries of the same type: the kind of memory is read of those only.
        let mut candidates: Vec<&Similar> = Vec::new();
        for s in similar.iter().filter(|s| {
            s.counts_for(Threshold::Generalize)
                && s.entry_type == entry.entry_type
                && !no_suggest.contains(&s.id)
        }) {
            if candidates.len() == MAX_GENERALIZE_MEMBERS - 1 {
                break;
            }
            let episodic = self
                .lookup
                .card(s.id)?
                .is_some_and(|c| c.memory_type == MemoryType::Episodic);
            if episodic {
                candidates.push(s);
            }
        }
        if candidates.len() + 1 < GENERALIZE_GROUP {
            return Ok(());
        }
        let tentative = mean(candidates.iter().map(|s| s.score));
        // Admit the candidates that have room, or whose weakest pending generalisation is
        // weaker than this group (that one is then superseded).
        let mut admitted: Vec<&Similar> = Vec::new();
        let mut dropped: HashSet<Ulid> = HashSet::new();
        for s in candidates {
            match self.weakest_to_drop(
                s.id,
                SuggestionKind::Generalize,
                tentative,
                MAX_PENDING_GENERALIZATIONS,
                &dropped,
            )? {
                Err(()) => continue,
                Ok(Some(weakest)) => {
                    dropped.insert(weakest);
                }
                Ok(None) => {}
            }
            admitted.push(s);
        }
        if admitted.len() + 1 < GENERALIZE_GROUP {
            return Ok(());
        }
        let mut members: Vec<Ulid> = vec![entry.id];
        members.extend(admitted.iter().map(|s| s.id));
        // Generalisations of a subset of the group: pending ones are replaced by it; a
        // rejected one stands unless the group adds at least two entries.
        let mut subsets: Vec<Ulid> = Vec::new();
        let mut checked: HashSet<Ulid> = HashSet::new();
        for m in &members[1..] {
            let rows: Vec<(Ulid, Touch)> = self.live(*m)?.clone();
            for (id, touch) in rows {
                if touch.kind != SuggestionKind::Generalize || !checked.insert(id) {
                    continue;
                }
                let s = self.load(&id)?;
                if !s.entries.iter().all(|e| members.contains(e)) {
                    continue;
                }
                match s.status {
                    SuggestionStatus::Pending => subsets.push(id),
                    SuggestionStatus::Rejected if members.len() < s.entries.len() + 2 => {
                        return Ok(());
                    }
                    _ => {}
                }
            }
        }
        for id in dropped.into_iter().chain(subsets) {
            if !self.plan.superseded.iter().any(|s| s.id == id) {
                self.supersede(id)?;
            }
        }
        let suggestion = Suggestion {
            id: next_id(),
            kind: SuggestionKind::Generalize,
            entries: members,
            score: mean(admitted.iter().map(|s| s.score)),
            reason: String::new(),
            by_meaning: false,
            status: SuggestionStatus::Pending,
            created_at: self.now,
            resolved_at: None,
            proposal: None,
        };
        self.create(suggestion)
    }
}

/// Why a suggestion is made, in a line: its stored reason (an entry suggestion's, and
/// those format 4 wrote), or for a link or a generalisation, the words its first entry
/// (the one whose add made it) shares with the others, weighed as an add weighs them, read
/// now: an add made many suggestions that are never shown, and saying why took a large
/// share of its time (each similar entry's text read and analysed; `benches/memory.rs`
/// times the adds of the clustered corpus).
pub(super) fn reason(memory: &Memory, s: &Suggestion) -> Result<String> {
    let said = !s.reason.is_empty() || s.kind == SuggestionKind::Entry;
    let (false, [first, others @ ..]) = (said, s.entries.as_slice()) else {
        return Ok(s.reason.clone());
    };
    let Some(first) = memory.get(first)? else {
        return Ok(s.reason.clone());
    };
    let mut cache = super::similarity::SimilarityCache::default();
    let words = super::similarity::words_of(memory, &mut cache, &first);
    let mut lookup = Lookup::new(memory, &mut cache, &words);
    Ok(match s.kind {
        SuggestionKind::Link => {
            let other = others.first().copied().unwrap_or(first.id);
            let entry_type = lookup
                .card(other)?
                .map_or(first.entry_type, |c| c.entry_type);
            let measure = if s.by_meaning {
                "Similar meaning"
            } else {
                "Lexical similarity"
            };
            let shared = match lookup.shared_words(other)? {
                shared if shared.is_empty() => "no shared terms".to_string(),
                shared => format!("shared terms: {}", shared.join(", ")),
            };
            format!(
                "{measure} {:.2} with a {entry_type} entry; {shared}",
                s.score
            )
        }
        _ => {
            let mut shared: Vec<String> = Vec::new();
            for other in others {
                if shared.len() >= GENERALIZE_REASON_WORDS {
                    break;
                }
                for word in lookup.shared_words(*other)? {
                    if !shared.contains(&word) {
                        shared.push(word);
                    }
                }
            }
            shared.truncate(GENERALIZE_REASON_WORDS);
            let shared = if shared.is_empty() {
                "the same meaning in other words".to_string()
            } else {
                shared.join(", ")
            };
            format!(
                "{} similar {} entries (mean similarity {:.2}) share: {shared}; consider one semantic entry",
                s.entries.len(),
                first.entry_type,
                s.score,
            )
        }
    })
}

fn mean(scores: impl Iterator<Item = f32>) -> f32 {
    let (sum, n) = scores.fold((0.0, 0u32), |(s, n), x| (s + x, n + 1));
    sum / n.max(1) as f32
}

/// Makes `memory.suggestion_keys` hold the entry suggestions' keys and nothing else, and
/// each record format 4 wrote in JSON its binary form, when `memory.meta` lacks its
/// marker: format 4 kept a key for every suggestion as text (`link:{id},{id}`), format 5
/// in binary (the kind's tag and the sorted ids), though only an entry suggestion's is
/// ever looked up ([`Suggestion::remembered_key`]). Runs before the memory opens the
/// tree. The tree is dropped whole and its keys made again from the records: keys removed
/// one by one wrote the tree's pages anew and sled's files grew by what they freed, while
/// a tree dropped whole does not grow them. Runs once; the marker is written
/// after the rest is flushed, so a crash before it does it again.
pub(super) fn rewrite_keys_if_stale(store: &Store) -> Result<()> {
    let db = store.db();
    let meta = db.open_tree(META)?;
    if meta.contains_key(META_PROPOSAL_KEYS_ONLY)? {
        return Ok(());
    }
    let suggestions = db.open_tree(SUGGESTIONS)?;
    let (mut keys, mut records) = (sled::Batch::default(), sled::Batch::default());
    let (mut kept, mut rewritten) = (0u64, 0u64);
    for item in suggestions.iter() {
        let (id, record) = item?;
        let s = decode_record(&record)?;
        if let Some(key) = s.remembered_key() {
            keys.insert(key, id.clone());
            kept += 1;
        }
        if record.first() == Some(&b'{') {
            records.insert(id, s.to_record());
            rewritten += 1;
        }
    }
    let forgotten = (db.open_tree(KEYS)?.len() as u64).saturating_sub(kept);
    if forgotten > 0 {
        tracing::info!(
            "forgetting the keys of {forgotten} links and generalisations suggested (keeping {kept} of entry suggestions)"
        );
    }
    if rewritten > 0 {
        tracing::info!("rewriting {rewritten} suggestions in binary (a data dir from format 4)");
    }
    db.drop_tree(KEYS)?;
    db.open_tree(KEYS)?.apply_batch(keys)?;
    suggestions.apply_batch(records)?;
    store.flush()?;
    // What a binary of format 5 checks before it writes every key again.
    meta.insert(META_KEYS, &[1u8])?;
    meta.insert(META_PROPOSAL_KEYS_ONLY, &[1u8])?;
    store.flush()?;
    Ok(())
}

/// The pending generalisation of exactly the entries `group` (in any order), found among
/// the suggestions touching its first entry.
pub(super) fn pending_generalization_of(
    memory: &Memory,
    group: &[Ulid],
) -> Result<Option<Suggestion>> {
    let Some(first) = group.first() else {
        return Ok(None);
    };
    let wanted: HashSet<&Ulid> = group.iter().collect();
    let touches = Touches::read(&memory.suggestions_of_entry, first)?;
    for (id, touch) in touches.0 {
        if !touch.is_pending(SuggestionKind::Generalize) {
            continue;
        }
        let s = load(memory, &id)?;
        if s.entries.len() == wanted.len() && s.entries.iter().all(|e| wanted.contains(e)) {
            return Ok(Some(s));
        }
    }
    Ok(None)
}

/// Builds `memory.suggestions_of_entry` when it is missing (a data dir written before it
/// existed: format 4's rows a suggestion and entry are dropped after), and brings every
/// entry within the caps: of an entry's pending suggestions of one kind beyond its cap,
/// the weakest are superseded. Runs once; a marker in `memory.meta`, written after the
/// rows are flushed, says it is done.
pub(super) fn build_index_if_missing(memory: &Memory) -> Result<()> {
    if memory.meta.contains_key(META_OF_ENTRY)? {
        return Ok(());
    }
    // What this supersedes leaves `memory.suggestions_pending`: it is built again after.
    memory.meta.remove(META_PENDING)?;
    memory.suggestions_of_entry.clear()?;
    let mut live: Vec<Suggestion> = Vec::new();
    for item in memory.suggestions.iter().values() {
        let s = decode_record(&item?)?;
        if s.status != SuggestionStatus::Superseded {
            live.push(s);
        }
    }
    if !live.is_empty() {
        tracing::info!(
            "indexing {} suggestions by entry (a data dir from before the index)",
            live.len()
        );
    }
    // Strongest first: each pending suggestion is kept while every entry it touches has
    // room for it, else superseded.
    live.sort_by(|a, b| b.score.total_cmp(&a.score).then(b.id.cmp(&a.id)));
    let mut count: HashMap<(Ulid, SuggestionKind), usize> = HashMap::new();
    let now = super::now();
    let mut superseded = 0;
    for s in &mut live {
        if s.status != SuggestionStatus::Pending {
            continue;
        }
        let cap = match s.kind {
            SuggestionKind::Link => MAX_PENDING_LINKS,
            SuggestionKind::Generalize => MAX_PENDING_GENERALIZATIONS,
            // A pending entry suggestion touches no entry.
            SuggestionKind::Entry => continue,
        };
        if s.entries
            .iter()
            .all(|e| count.get(&(*e, s.kind)).copied().unwrap_or(0) < cap)
        {
            for e in &s.entries {
                *count.entry((*e, s.kind)).or_default() += 1;
            }
        } else {
            s.status = SuggestionStatus::Superseded;
            s.resolved_at = Some(now);
            memory
                .suggestions
                .insert(s.id.to_string(), s.superseded_record())?;
            superseded += 1;
        }
    }
    let mut of_entry: HashMap<Ulid, Touches> = HashMap::new();
    for s in live
        .iter()
        .filter(|s| s.status != SuggestionStatus::Superseded)
    {
        for e in &s.entries {
            of_entry.entry(*e).or_insert(Touches(Vec::new())).set(s);
        }
    }
    let mut batch = sled::Batch::default();
    for (entry, touches) in &of_entry {
        batch.insert(&entry.to_bytes()[..], touches.encode());
    }
    memory.suggestions_of_entry.apply_batch(batch)?;
    memory.store.flush()?;
    if superseded > 0 {
        tracing::info!("superseded {superseded} pending suggestions beyond the caps per entry");
    }
    memory.meta.insert(META_OF_ENTRY, &[1u8])?;
    memory.store.flush()?;
    let db = memory.store.db();
    if db
        .tree_names()
        .iter()
        .any(|n| n == LEGACY_BY_ENTRY.as_bytes())
    {
        db.drop_tree(LEGACY_BY_ENTRY)?;
    }
    memory.meta.remove(LEGACY_META_BY_ENTRY)?;
    Ok(())
}

/// Builds `memory.suggestions_pending` when it is missing (a data dir written before it,
/// format 4 or older, or one [`build_index_if_missing`] changed): a row for each pending
/// suggestion, and each kind's count. Runs once; a marker in `memory.meta`, written after
/// the rows are flushed, says it is done, so a crash before it builds them again.
pub(super) fn build_pending_if_missing(memory: &Memory) -> Result<()> {
    if memory.meta.contains_key(META_PENDING)? {
        return Ok(());
    }
    memory.suggestions_pending.clear()?;
    let mut batch = sled::Batch::default();
    let mut counts: HashMap<u8, u64> = HashMap::new();
    for item in memory.suggestions.iter().values() {
        let s = decode_record(&item?)?;
        if s.status == SuggestionStatus::Pending {
            batch.insert(&pending_key(&s)[..], &[][..]);
            *counts.entry(s.kind.tag()).or_default() += 1;
        }
    }
    for (tag, count) in &counts {
        batch.insert(&[*tag][..], &count.to_be_bytes()[..]);
    }
    let pending: u64 = counts.values().sum();
    if pending > 0 {
        tracing::info!("indexing {pending} pending suggestions (a data dir from before the index)");
    }
    memory.suggestions_pending.apply_batch(batch)?;
    memory.store.flush()?;
    memory.meta.insert(META_PENDING, &[1u8])?;
    memory.store.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::memory::encode;
    use crate::memory::records::EntryType;
    use crate::memory::similarity::{SimilarityCache, Words};
    use crate::memory::{MemoryError, NoProgress};
    use crate::store::Store;
    use tandem_search::text::SearchTuning;

    fn entry(entry_type: EntryType) -> Entry {
        Entry::new(entry_type, "t", "", Vec::new())
    }

    /// An entry stored as an add leaves it (a similar entry is a stored one).
    fn stored(memory: &Memory, entry_type: EntryType) -> Entry {
        let e = entry(entry_type);
        memory
            .entries
            .insert(e.id.to_string().as_bytes(), encode(&e))
            .unwrap();
        e
    }

    fn similar(e: &Entry, score: f32) -> Similar {
        Similar {
            id: e.id,
            entry_type: e.entry_type,
            score,
            by_meaning: false,
        }
    }

    /// Plans the suggestions of `new` and stores them, as an add does.
    fn add(memory: &Memory, new: &Entry, similar: &[Similar]) -> Plan {
        let (mut cache, words) = (SimilarityCache::default(), Words::default());
        let mut lookup = Lookup::new(memory, &mut cache, &words);
        let plan = plan(
            memory,
            new,
            similar,
            &[],
            jiff::Timestamp::now(),
            &mut lookup,
        )
        .unwrap();
        let written: Vec<Suggestion> = plan.new.iter().chain(&plan.superseded).cloned().collect();
        store(memory, &written).unwrap();
        plan
    }

    /// The scores of an entry's pending suggestions of a kind, sorted.
    fn pending_scores(memory: &Memory, entry: &Entry, kind: SuggestionKind) -> Vec<f32> {
        let touches = Touches::read(&memory.suggestions_of_entry, &entry.id).unwrap();
        let mut scores: Vec<f32> = touches
            .0
            .iter()
            .filter(|(_, t)| t.is_pending(kind))
            .map(|(_, t)| t.score)
            .collect();
        scores.sort_by(f32::total_cmp);
        scores
    }

    fn memory() -> (tempfile::TempDir, Memory) {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path()).unwrap());
        (
            dir,
            Memory::open_tuned(store, &NoProgress, SearchTuning::every_path()).unwrap(),
        )
    }

    /// The ids of the pending suggestions of `kind` a scan of every suggestion finds, in
    /// the order a listing shows them.
    fn scanned(memory: &Memory, kind: SuggestionKind) -> Vec<Ulid> {
        let mut pending: Vec<Suggestion> = memory
            .suggestions
            .iter()
            .values()
            .map(|v| decode_record(&v.unwrap()).unwrap())
            .filter(|s| s.kind == kind && s.status == SuggestionStatus::Pending)
            .collect();
        pending.sort_by(|a, b| b.score.total_cmp(&a.score).then(b.id.cmp(&a.id)));
        pending.into_iter().map(|s| s.id).collect()
    }

    fn listed(memory: &Memory, kind: SuggestionKind, limit: usize) -> (Vec<Ulid>, u64) {
        let (page, total) = pending_page(memory, kind, limit).unwrap();
        (page.into_iter().map(|s| s.id).collect(), total)
    }

    #[test]
    fn an_entrys_row_keeps_its_suggestions_in_id_order_and_refuses_a_bad_one() {
        let suggestion = |status, score| Suggestion {
            id: next_id(),
            kind: SuggestionKind::Link,
            entries: Vec::new(),
            score,
            reason: String::new(),
            by_meaning: false,
            status,
            created_at: jiff::Timestamp::now(),
            resolved_at: None,
            proposal: None,
        };
        let (a, b, c) = (
            suggestion(SuggestionStatus::Pending, 0.5),
            suggestion(SuggestionStatus::Pending, 0.7),
            suggestion(SuggestionStatus::Rejected, 0.4),
        );
        let mut row = Touches(Vec::new());
        for s in [&c, &a, &b] {
            row.set(s);
        }
        let ids = |row: &Touches| row.0.iter().map(|(id, _)| *id).collect::<Vec<_>>();
        let mut in_order = vec![a.id, b.id, c.id];
        in_order.sort();
        assert_eq!(ids(&row), in_order);
        // A status changed in place; a superseded one leaves the row.
        let accepted = Suggestion {
            status: SuggestionStatus::Accepted,
            ..a.clone()
        };
        row.set(&accepted);
        row.set(&Suggestion {
            status: SuggestionStatus::Superseded,
            ..b.clone()
        });
        let bytes = row.encode();
        assert_eq!(bytes.len(), 2 * TOUCH_LEN);
        let mut left = vec![(a.id, Touch::of(&accepted)), (c.id, Touch::of(&c))];
        left.sort_by_key(|(id, _)| *id);
        assert_eq!(Touches::decode(&bytes).unwrap().0, left);
        // A row cut short, an unknown kind, or a superseded status stored: corrupt.
        let mut unknown_kind = bytes.clone();
        unknown_kind[16] = b'x';
        let mut superseded = bytes.clone();
        superseded[17] = SuggestionStatus::Superseded.tag();
        for bad in [&bytes[..TOUCH_LEN + 3], &unknown_kind, &superseded] {
            let err = Touches::decode(bad).map(|_| ()).unwrap_err();
            assert!(err.to_string().contains(OF_ENTRY), "{err}");
        }
    }

    #[test]
    fn the_pending_index_lists_what_a_scan_of_every_suggestion_finds() {
        let (_dir, memory) = memory();
        let bugs: Vec<Entry> = (0..4).map(|_| stored(&memory, EntryType::Bug)).collect();
        // Scores that repeat, so that equals are listed by id, and enough adds for the caps
        // to supersede the weakest.
        for score in [0.35, 0.5, 0.9, 0.5, 0.7].repeat(5) {
            let near: Vec<Similar> = bugs.iter().map(|b| similar(b, score)).collect();
            add(&memory, &entry(EntryType::Bug), &near);
        }
        let mut rejected: Vec<Suggestion> = scanned(&memory, SuggestionKind::Link)
            .iter()
            .step_by(3)
            .map(|id| load(&memory, id).unwrap())
            .collect();
        for s in &mut rejected {
            s.status = SuggestionStatus::Rejected;
        }
        store(&memory, &rejected).unwrap();
        let check = |memory: &Memory| {
            for kind in [SuggestionKind::Link, SuggestionKind::Generalize] {
                let all = scanned(memory, kind);
                let total = all.len() as u64;
                assert!(all.len() >= 3, "{kind:?}: {all:?}");
                assert_eq!(listed(memory, kind, 1000), (all.clone(), total), "{kind:?}");
                assert_eq!(
                    listed(memory, kind, 2),
                    (all[..2].to_vec(), total),
                    "{kind:?}"
                );
            }
            assert_eq!(listed(memory, SuggestionKind::Entry, 10), (Vec::new(), 0));
        };
        check(&memory);
        let listed_in_all = scanned(&memory, SuggestionKind::Link).len()
            + scanned(&memory, SuggestionKind::Generalize).len()
            + rejected.len();
        assert!(
            memory.suggestions.len() > listed_in_all,
            "some were superseded"
        );

        // A data dir written before the index: it is built as the memory opens, the same.
        let rows = |memory: &Memory| -> Vec<(sled::IVec, sled::IVec)> {
            memory
                .suggestions_pending
                .iter()
                .map(Result::unwrap)
                .collect()
        };
        let kept = rows(&memory);
        memory.meta.remove(META_PENDING).unwrap();
        memory.suggestions_pending.clear().unwrap();
        build_pending_if_missing(&memory).unwrap();
        assert_eq!(rows(&memory), kept);
        check(&memory);
    }

    #[test]
    fn a_full_entry_keeps_its_strongest_links() {
        let (_dir, memory) = memory();
        let x = stored(&memory, EntryType::Bug);
        // (score of a new entry's similarity to x, x's pending link scores after it)
        let cases: &[(f32, &[f32])] = &[
            (0.40, &[0.40]),
            (0.50, &[0.40, 0.50]),
            (0.45, &[0.40, 0.45, 0.50]),
            (0.60, &[0.40, 0.45, 0.50, 0.60]),
            (0.55, &[0.40, 0.45, 0.50, 0.55, 0.60]),
            // Full: a stronger one replaces the weakest...
            (0.42, &[0.42, 0.45, 0.50, 0.55, 0.60]),
            // ...a weaker or equal one is not made.
            (0.41, &[0.42, 0.45, 0.50, 0.55, 0.60]),
            (0.42, &[0.42, 0.45, 0.50, 0.55, 0.60]),
            (0.90, &[0.45, 0.50, 0.55, 0.60, 0.90]),
        ];
        assert_eq!(cases[4].1.len(), MAX_PENDING_LINKS);
        let mut superseded = Vec::new();
        for (score, want) in cases {
            let new = entry(EntryType::Pattern);
            superseded.extend(add(&memory, &new, &[similar(&x, *score)]).superseded);
            assert_eq!(
                pending_scores(&memory, &x, SuggestionKind::Link),
                *want,
                "after a new entry at {score}"
            );
        }
        // What is kept of those replaced: what resolving them says; not their entries.
        assert_eq!(superseded.len(), 2);
        for s in superseded {
            let id = s.id.to_string();
            let kept = load(&memory, &s.id).unwrap();
            assert_eq!(kept.status, SuggestionStatus::Superseded);
            assert!(kept.entries.is_empty() && s.entries.len() == 2, "{kept:?}");
            assert_eq!(kept.kind, s.kind);
            match memory.reject(&id) {
                Err(MemoryError::SuggestionAlreadyResolved { status, .. }) => {
                    assert_eq!(status, "superseded")
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn a_full_entry_keeps_its_strongest_generalisations() {
        let (_dir, memory) = memory();
        let (a, b) = (
            stored(&memory, EntryType::Bug),
            stored(&memory, EntryType::Bug),
        );
        // (the similarity of a new bug to a and b, a's pending generalisation scores after,
        // whether the new group was made)
        let cases: &[(f32, &[f32], bool)] = &[
            (0.50, &[0.50], true),
            (0.60, &[0.50, 0.60], true),
            (0.40, &[0.40, 0.50, 0.60], true),
            // Full: a stronger group replaces the weakest, for both members at once...
            (0.45, &[0.45, 0.50, 0.60], true),
            // ...a weaker one goes without them, which leaves too few: not made.
            (0.30, &[0.45, 0.50, 0.60], false),
        ];
        assert_eq!(cases[2].1.len(), MAX_PENDING_GENERALIZATIONS);
        for (score, want, made) in cases {
            let new = entry(EntryType::Bug);
            let plan = add(&memory, &new, &[similar(&a, *score), similar(&b, *score)]);
            let groups = plan
                .new
                .iter()
                .filter(|s| s.kind == SuggestionKind::Generalize)
                .count();
            assert_eq!(groups == 1, *made, "after a new entry at {score}");
            assert_eq!(
                pending_scores(&memory, &a, SuggestionKind::Generalize),
                *want,
                "a, after a new entry at {score}"
            );
            assert_eq!(
                pending_scores(&memory, &b, SuggestionKind::Generalize),
                pending_scores(&memory, &a, SuggestionKind::Generalize),
            );
        }
    }
}
