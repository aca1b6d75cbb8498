//! The memory: a developer knowledge base (spec 003).
//!
//! sled holds the truth (entries, links, suggestions); the search engine's indexes
//! ([`tandem_search::text::TextIndex`], the vectors of `semantic`) are derived from it.
//! Every write is in sled, flushed, before it is acknowledged; the index follows in the
//! same call.
//!
//! Invariants:
//! - **Every entry record decodes.** A record is plain JSON or a zstd frame naming the
//!   dictionary it was made with; dictionaries are only ever added
//!   (`memory.dictionaries`), and every reader goes through `Memory::decode_entry`. A
//!   value of `memory.entries` is a record or a pointer into the pack in the database's
//!   own folder, which only a compaction writes, while it holds the data dir: the pack
//!   and the database that points into it are swapped in together, and a write after
//!   goes into sled whole. Re-encoding a plain record is a compare-and-swap: a
//!   concurrent write (an access recorded) wins.
//! - **The index knows how far it got.** Each tantivy commit carries a payload
//!   `{"schema": N, "seq": S}`: the highest write sequence it holds. At open, an index
//!   behind sled is caught up from `memory.writes`; a missing, corrupt, foreign-schema
//!   or inconsistent one (document count ≠ entry count) is rebuilt from sled. `tandem
//!   memory reindex` forces it.
//! - **Read-your-writes without a commit per write.** A tantivy commit is too costly
//!   for every add. Writes go to the `IndexWriter` and mark the index dirty. Any search
//!   commits first if dirty (one commit covers every write since the last), a
//!   background thread commits once writes pause for 150 ms, and more than 128 pending
//!   writes commit at once. Similarity on add does not force a commit: it scores the
//!   uncommitted entries beside the BM25 candidates, unless there are more than 128:
//!   those are committed first (`committed_and_pending`). An import indexes in one
//!   batch with one commit: between its parts the background thread waits up to 5 s for
//!   the next rather than committing in the pause.
//! - **The index stores no text.** Hits carry their ULID in two u64 fast fields;
//!   titles, snippets and everything shown come from sled.
//! - **Adds are serialised** (one write lock): an add reads the index and existing
//!   suggestions and writes new ones, and two concurrent adds must see each other.
//! - **An add's cost does not grow with the base.** It reads a bounded number of
//!   candidates and only the suggestions touching them (a row each in
//!   `memory.suggestions_of_entry`), never a scan of entries or suggestions.
//! - **Bad input never half-writes.** Arguments are validated before the write lock is
//!   taken; an import checks every line before writing any.
//! - **Access statistics are not flushed.** `show` bumps `access_count` and
//!   `last_accessed` with a compare-and-swap; sled's background flush (500 ms) persists
//!   them, and losing the last half-second of them in a crash loses no knowledge. A
//!   bump that fails (a full disk) is logged and the entry shown all the same.
//! - **sled is the truth; tantivy is derived.** A write is a sled transaction (the
//!   entry, its sequence number in `memory.writes`, counters and any suggestions
//!   together), then `Db::flush` (sled's insert alone is not durable), and only then
//!   acknowledged. The index is written after, in the same call. If indexing fails, the
//!   write still stands and the index catches up at the next start.

pub mod api;
mod compression;
pub mod error;
pub mod help;
pub mod model_source;
mod proposals;
pub mod records;
mod review;
mod search;
mod semantic;
mod similarity;
mod suggestions;
mod transfer;
mod writes;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use jiff::Timestamp;
use sled::Transactional;
use sled::transaction::ConflictableTransactionError;
use ulid::Ulid;

pub use api::*;
pub use error::MemoryError;
pub use records::{
    Entry, EntryStatus, EntryType, Link, MemoryType, Proposal, RelationType, Suggestion,
    SuggestionKind, SuggestionStatus,
};

use records::{ENTRY_KINDS, MAX_TITLE_CHARS, MIN_ID_PREFIX};
pub use review::{SUGGESTION_LIMIT, generalize_command};
pub use search::SEARCH_LIMIT;
pub use semantic::{ModelState, summary_text};
pub use suggestions::{MAX_GENERALIZE_MEMBERS, MAX_PENDING_GENERALIZATIONS, MAX_PENDING_LINKS};
use tandem_search::text::{IndexState, SearchTuning, TextIndex};
pub use transfer::{ImportLine, ImportPart, check_import_lines};

use crate::codec::Codec;
use crate::store::{ENTRIES, ENTRY_DICTIONARIES, IdLookup, Store, lookup_id};

type Result<T, E = MemoryError> = std::result::Result<T, E>;

/// Entries at least this similar are returned as `similar_entries`.
pub const SIMILAR_MIN: f32 = 0.2;
/// Entries at least this similar get a pending link suggestion.
pub const LINK_SUGGESTION_MIN: f32 = 0.35;
/// Entries of one type at least this similar count towards a generalisation...
pub const GENERALIZE_MIN: f32 = 0.3;
/// ...once this many (the new one included) pile up.
pub const GENERALIZE_GROUP: usize = 3;
/// By meaning (the cosine of two summary vectors), entries at least this similar are
/// returned as `similar_entries`... (On the labelled set, with the test model, two entries
/// answering one query have a cosine of 0.77 or more, and nine pairs in ten of the others
/// stay under 0.69, 99 in 100 under 0.76: `benches/memory_quality.rs`.)
pub const SEMANTIC_SIMILAR_MIN: f32 = 0.7;
/// ...get a pending link suggestion...
pub const SEMANTIC_LINK_MIN: f32 = 0.77;
/// ...and count towards a generalisation.
pub const SEMANTIC_GENERALIZE_MIN: f32 = 0.75;
/// A proposed entry (an entry suggestion) is the same as an existing entry, and is not
/// suggested, when the entry is at least this similar to it by words... (Measured with a
/// decision proposed from a task against entries on its question, with the test model: the
/// same decision in other words scores 0.70 by words and 0.91 by meaning; the same question
/// with another choice 0.82 and 0.89; another decision of the same task 0.42 and 0.80.)
pub const DUPLICATE_MIN: f32 = 0.5;
/// ...or by meaning...
pub const SEMANTIC_DUPLICATE_MIN: f32 = 0.85;
/// ...and, for a proposal with an answer (a decision's choice and reasoning, an issue's
/// resolution), when the answer alone is at least this similar to the entry, by words...
/// (The same decision in other words: 0.43 by words, 0.68 by meaning; another choice: 0.04
/// and 0.51; another decision: 0.07 and 0.59.)
pub const SAME_ANSWER_MIN: f32 = 0.25;
/// ...or by meaning.
pub const SEMANTIC_SAME_ANSWER_MIN: f32 = 0.6;
/// An add's answer lists at most this many similar entries.
const MAX_SIMILAR_SHOWN: usize = 5;

/// `memory.meta`: the memory's counters and the markers of its conversions.
const META: &str = "memory.meta";
/// The `memory.meta` key of the highest write sequence.
const META_SEQ: &[u8] = b"seq";
/// The `memory.meta` key of the entry count.
const META_COUNT: &[u8] = b"entries";
/// The entries' vectors ([`vector_file`]), in the data dir's `index` folder.
const VECTOR_FILE: &str = "memory-vectors";

impl Drop for Memory {
    /// Waits for a dictionary being trained: its thread writes into the database.
    fn drop(&mut self) {
        self.wait_for_dictionary();
    }
}

/// How [`Memory::open`] and [`Memory::reindex`] report a rebuild of the search index.
pub trait Progress {
    fn start(&self, _total: u64, _reason: &str) {}
    fn advance(&self, _done: u64) {}
    fn finish(&self) {}
}

/// Reports nothing.
pub struct NoProgress;
impl Progress for NoProgress {}

/// The memory service. Cheap to share behind an `Arc`; every method is synchronous and
/// safe to call from many threads.
pub struct Memory {
    store: Arc<Store>,
    entries: sled::Tree,
    /// The order of the writes (`writes.rs`).
    writes: sled::Tree,
    links: sled::Tree,
    links_in: sled::Tree,
    suggestions: sled::Tree,
    suggestion_keys: sled::Tree,
    /// Each entry's suggestions that are not superseded (`suggestions.rs`).
    suggestions_of_entry: sled::Tree,
    /// The pending suggestions in the order they are listed (`suggestions.rs`).
    suggestions_pending: sled::Tree,
    meta: sled::Tree,
    /// The dictionaries the entries' records are compressed with...
    codec: Arc<Codec>,
    /// ...and the thread training the next one, if any (`compression.rs`).
    retraining: Mutex<Option<std::thread::JoinHandle<()>>>,
    index: Arc<TextIndex>,
    /// The embedding model and the entries' vectors.
    semantic: semantic::Semantic,
    /// Serialises writers: an add reads the index and the suggestions, then writes.
    write_lock: Mutex<similarity::SimilarityCache>,
}

impl Memory {
    /// Opens the memory of a store. When the search index is missing, stale or corrupt it
    /// is brought up to date from sled first, reporting through `progress`.
    pub fn open(store: Arc<Store>, progress: &dyn Progress) -> Result<Memory> {
        Memory::open_tuned(store, progress, SearchTuning::default())
    }

    /// [`Memory::open`], its searches spread over threads as `tuning` says.
    pub fn open_tuned(
        store: Arc<Store>,
        progress: &dyn Progress,
        tuning: SearchTuning,
    ) -> Result<Memory> {
        let db = store.db();
        let (index, state) = TextIndex::open(
            &store.dir().join("index").join("memory"),
            ENTRY_KINDS,
            tuning,
        )?;
        writes::convert_by_seq(db)?;
        suggestions::rewrite_keys_if_stale(&store)?;
        let memory = Memory {
            entries: db.open_tree(ENTRIES)?,
            writes: db.open_tree(writes::TREE)?,
            links: db.open_tree("memory.links")?,
            links_in: db.open_tree("memory.links_in")?,
            suggestions: db.open_tree(suggestions::SUGGESTIONS)?,
            suggestion_keys: db.open_tree(suggestions::KEYS)?,
            suggestions_of_entry: db.open_tree(suggestions::OF_ENTRY)?,
            suggestions_pending: db.open_tree(suggestions::PENDING)?,
            meta: db.open_tree(META)?,
            codec: Arc::new(Codec::open(db.open_tree(ENTRY_DICTIONARIES)?)?),
            retraining: Mutex::new(None),
            index,
            semantic: semantic::Semantic::open(db, &store.dir().join("index").join(VECTOR_FILE))?,
            store,
            write_lock: Mutex::new(similarity::SimilarityCache::default()),
        };
        suggestions::build_index_if_missing(&memory)?;
        suggestions::build_pending_if_missing(&memory)?;
        memory.bring_index_up_to_date(&state, progress)?;
        memory.train_dictionary_when_due(memory.entry_count()?, progress)?;
        Ok(memory)
    }

    fn bring_index_up_to_date(&self, state: &IndexState, progress: &dyn Progress) -> Result<()> {
        let index = &self.index;
        let seq = self.current_seq()?;
        let count = self.entry_count()?;
        let reason = match state {
            IndexState::Rebuild(reason) => Some(reason.clone()),
            IndexState::UpTo(indexed) if *indexed > seq => Some(format!(
                "the index is ahead of the database (index seq {indexed}, database seq {seq})"
            )),
            IndexState::UpTo(indexed) if *indexed < seq => {
                let behind = writes::after(&self.writes, *indexed)?;
                tracing::info!(
                    "search index behind by {} entries (seq {indexed} < {seq}); catching up",
                    behind.len()
                );
                for id in behind {
                    if let Some(entry) = self.get(&id)? {
                        index.upsert(&entry)?;
                    }
                }
                index.commit()?;
                None
            }
            IndexState::UpTo(_) => None,
        };
        let reason = reason.or_else(|| {
            let docs = index.num_docs(&index.committed_searcher());
            (docs != count).then(|| {
                format!("the index holds {docs} documents but the database {count} entries")
            })
        });
        if let Some(reason) = reason {
            if count > 0 || !matches!(state, IndexState::Rebuild(_)) {
                tracing::info!("rebuilding the search index: {reason}");
            }
            self.rebuild_index(&reason, progress)?;
        }
        Ok(())
    }

    fn rebuild_index(&self, reason: &str, progress: &dyn Progress) -> Result<u64> {
        let n = {
            let _guard = self.lock_writes();
            let total = self.entry_count()?;
            progress.start(total, reason);
            let seq = self.current_seq()?;
            self.index
                .rebuild(self.iter_entries(), seq, |done| progress.advance(done))?
        };
        // A rebuild cuts a segment each 100,000 entries: merged at once, as after an
        // import (writes go on meanwhile).
        self.index.merge_segments()?;
        progress.finish();
        Ok(n)
    }

    /// Rebuilds the search index from sled (`tandem memory reindex`). Returns the number of
    /// entries indexed.
    pub fn reindex(&self, progress: &dyn Progress) -> Result<u64> {
        self.rebuild_index("requested", progress)
    }

    /// How many segments the search index has (a search opens each apart; they are
    /// merged after an import, and when writes pause).
    pub fn index_segments(&self) -> usize {
        self.idx().segment_count()
    }

    /// Merges the search index's segments as once writes pause (the same policy), and
    /// waits for the merge: how many segments were merged (0: nothing to merge). For a
    /// measure of a memory as a daemon keeps it, without waiting for the pause.
    pub fn merge_index_segments(&self) -> Result<usize> {
        Ok(self.idx().merge_segments()?)
    }

    fn idx(&self) -> &TextIndex {
        &self.index
    }

    fn lock_writes(&self) -> std::sync::MutexGuard<'_, similarity::SimilarityCache> {
        self.write_lock.lock().unwrap_or_else(|p| p.into_inner())
    }

    // ---- reading ------------------------------------------------------------------

    fn current_seq(&self) -> Result<u64> {
        Ok(self.meta.get(META_SEQ)?.map(|v| be_u64(&v)).unwrap_or(0))
    }

    /// How many entries the memory holds.
    pub fn entry_count(&self) -> Result<u64> {
        Ok(self.meta.get(META_COUNT)?.map(|v| be_u64(&v)).unwrap_or(0))
    }

    fn get(&self, id: &Ulid) -> Result<Option<Entry>> {
        match self.entries.get(id.to_string())? {
            Some(bytes) => Ok(Some(self.decode_entry(&bytes)?)),
            None => Ok(None),
        }
    }

    /// An entry's record: its JSON, compressed ([`crate::codec`]).
    fn encode_entry(&self, entry: &Entry) -> Vec<u8> {
        self.codec.encode(encode(entry))
    }

    /// The entry a value of the entries' tree holds: its record, or a pointer to it in the
    /// pack ([`crate::pack`]).
    fn decode_entry(&self, value: &[u8]) -> Result<Entry> {
        decode(&self.codec.decode(&self.store.record(value)?)?)
    }

    fn iter_entries(&self) -> impl Iterator<Item = Result<Entry>> + '_ {
        self.entries.iter().values().map(|v| {
            v.map_err(MemoryError::from)
                .and_then(|b| self.decode_entry(&b))
        })
    }

    /// Finds an entry by full ULID or unique prefix of 5+ characters.
    pub fn resolve(&self, input: &str) -> Result<Entry> {
        let wanted = records::normalize_id_input(input);
        if wanted.is_empty() {
            return Err(MemoryError::invalid_argument("id", "the ID is empty"));
        }
        let not_found = || MemoryError::EntryNotFound {
            id: input.trim().into(),
        };
        match lookup_id(&self.entries, &wanted)? {
            IdLookup::Found(record) => self.decode_entry(&record),
            IdLookup::Missing => Err(not_found()),
            IdLookup::TooShort => Err(MemoryError::invalid_argument(
                "id",
                format!(
                    "'{input}' is too short: give the full ULID or a prefix of at least {MIN_ID_PREFIX} characters"
                ),
            )),
            IdLookup::Ambiguous(found) => Err(MemoryError::AmbiguousId {
                prefix: input.trim().into(),
                candidates: found
                    .iter()
                    .map(|(_, record)| {
                        self.decode_entry(record)
                            .map(|e| (e.id.to_string(), e.title))
                    })
                    .collect::<Result<_>>()?,
            }),
        }
    }

    /// The full entry, recording the access (`rekall_show`). The access is a statistic: when
    /// it cannot be written (a full disk), the entry is shown all the same.
    pub fn show(&self, id: &str) -> Result<EntryDetails> {
        let entry = self.resolve(id)?;
        let entry = match self.record_access(&entry) {
            Ok(updated) => updated,
            Err(e) => {
                tracing::warn!("recording an access to {} failed: {e}", entry.id);
                entry
            }
        };
        self.details(&entry)
    }

    fn record_access(&self, entry: &Entry) -> Result<Entry> {
        let now = now();
        let key = entry.id.to_string();
        let updated = self.entries.update_and_fetch(&key, |old| {
            // Returning None would delete the key: an unreadable record is left as it is.
            let old = old?;
            match self.decode_entry(old) {
                Ok(mut e) => {
                    e.access_count += 1;
                    e.last_accessed = Some(now);
                    Some(self.encode_entry(&e))
                }
                Err(_) => Some(old.to_vec()),
            }
        })?;
        // Access statistics are not flushed: losing the last half-second of them in a
        // crash loses no knowledge.
        match updated {
            Some(bytes) => self.decode_entry(&bytes),
            None => Ok(entry.clone()),
        }
    }

    fn details(&self, entry: &Entry) -> Result<EntryDetails> {
        let id = entry.id.to_string();
        let mut outgoing = Vec::new();
        for item in self.links.scan_prefix(format!("{id}/")).values() {
            let link: Link = decode(&item?)?;
            outgoing.push(OutgoingLink {
                target_id: link.target.to_string(),
                target_title: self.title_of(&link.target)?,
                relation_type: link.relation.to_string(),
            });
        }
        let mut incoming = Vec::new();
        for item in self.links_in.scan_prefix(format!("{id}/")).keys() {
            let key = item?;
            let (_, source, relation) = split_link_key(&key)?;
            incoming.push(IncomingLink {
                source_id: source.to_string(),
                source_title: self.title_of(&source)?,
                relation_type: relation.to_string(),
            });
        }
        let links = outgoing.len() + incoming.len();
        Ok(EntryDetails {
            id,
            entry_type: entry.entry_type.to_string(),
            title: entry.title.clone(),
            content: entry.content.clone(),
            tags: entry.tags.clone(),
            project: entry.project.clone(),
            confidence: entry.confidence,
            status: entry.status.to_string(),
            memory_type: entry.memory_type.to_string(),
            created_at: entry.created_at.to_string(),
            updated_at: entry.updated_at.to_string(),
            last_accessed: entry.last_accessed.map(|t| t.to_string()),
            access_count: entry.access_count,
            consolidation_score: consolidation_score(entry, links, now()),
            embeddings: {
                let (summary, context) = self.semantic.has(&entry.id)?;
                EmbeddingsInfo { summary, context }
            },
            links: EntryLinks { outgoing, incoming },
            context: entry.context.clone(),
            author: entry.author.clone(),
        })
    }

    fn title_of(&self, id: &Ulid) -> Result<String> {
        Ok(self
            .get(id)?
            .map(|e| e.title)
            .unwrap_or_else(|| "(missing entry)".into()))
    }

    fn entry_ref(&self, id: &Ulid) -> Result<EntryRef> {
        Ok(EntryRef {
            id: id.to_string(),
            title: self.title_of(id)?,
        })
    }

    /// A number that changes whenever an entry is added or imported.
    pub fn version(&self) -> Result<u64> {
        self.current_seq()
    }

    /// What the memory holds, at a glance: counts by type, the newest entries and the most
    /// read ones (one pass over the entries).
    pub fn overview(&self, recent: usize, most_used: usize) -> Result<Overview> {
        let mut by_type: std::collections::BTreeMap<String, u64> = Default::default();
        let mut used: Vec<(u64, EntryRef)> = Vec::new();
        let mut total = 0;
        for e in self.iter_entries() {
            let e = e?;
            total += 1;
            *by_type
                .entry(e.entry_type.as_str().to_string())
                .or_default() += 1;
            if e.access_count > 0 {
                used.push((
                    e.access_count,
                    EntryRef {
                        id: e.id.to_string(),
                        title: e.title.clone(),
                    },
                ));
            }
        }
        used.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.id.cmp(&b.1.id)));
        used.truncate(most_used);
        Ok(Overview {
            total,
            by_type,
            recent: self
                .recent(recent)?
                .into_iter()
                .map(|e| OverviewEntry {
                    id: e.id.to_string(),
                    entry_type: e.entry_type.as_str().to_string(),
                    title: e.title,
                    access_count: e.access_count,
                })
                .collect(),
            most_used: used
                .into_iter()
                .map(|(n, r)| OverviewEntry {
                    id: r.id,
                    entry_type: String::new(),
                    title: r.title,
                    access_count: n,
                })
                .collect(),
        })
    }

    /// The most recently written entries (added, or updated by an import), newest first:
    /// in write order, which ids of one millisecond do not keep.
    pub fn recent(&self, limit: usize) -> Result<Vec<Entry>> {
        let mut out = Vec::with_capacity(limit.min(1024));
        for id in writes::newest_first(&self.writes) {
            if out.len() == limit {
                break;
            }
            if let Some(entry) = self.get(&id?)? {
                out.push(entry);
            }
        }
        Ok(out)
    }

    // ---- writing ------------------------------------------------------------------

    /// Adds an entry: validated, stored durably, indexed, with similar entries found and
    /// suggestions created.
    pub fn add(&self, new: NewEntry) -> Result<AddOutcome> {
        self.add_inner(new, &[])
    }

    fn add_inner(&self, new: NewEntry, no_suggest: &[Ulid]) -> Result<AddOutcome> {
        let valid = validate(new)?;
        let mut guard = self.lock_writes();
        self.add_locked(&mut guard, valid, no_suggest, None)
    }

    /// Adds a validated entry: its similar entries, its suggestions, the durable write,
    /// its vectors and its indexing. `accepting`, the entry suggestion this add accepts,
    /// is written in the same transaction, naming the new entry. Caller holds the write
    /// lock (`cache` is what it guards).
    fn add_locked(
        &self,
        cache: &mut similarity::SimilarityCache,
        valid: Valid,
        no_suggest: &[Ulid],
        accepting: Option<Suggestion>,
    ) -> Result<AddOutcome> {
        let Valid {
            mut entry,
            context_truncated,
        } = valid;
        let now = now();
        let seq = self.current_seq()? + 1;
        entry.seq = seq;
        entry.created_at = now;
        entry.updated_at = now;
        let accepting = accepting.map(|mut s| {
            s.entries = vec![entry.id];
            s
        });

        let stored = self
            .semantic
            .embedder()
            .map(|e| semantic::Semantic::stored(&e, &entry));
        let similarity::SimilarEntries { similar, words } = similarity::find_similar(
            self,
            cache,
            &entry,
            stored.as_ref().map(|s| &s.vectors),
            similarity::Weighed::Added,
        )?;
        // The cards of the similar entries shown: those not cached are read from sled on a
        // second thread while the suggestions are planned and the entry is written (each a
        // page to decompress, a third of a millisecond at a million entries).
        let uncached: Vec<Ulid> = similar
            .iter()
            .take(MAX_SIMILAR_SHOWN)
            .map(|s| s.id)
            .filter(|id| !cache.holds(id))
            .collect();
        let (created, similar_entries) = std::thread::scope(|scope| -> Result<_> {
            let reading = (!uncached.is_empty()).then(|| scope.spawn(|| self.cards_of(&uncached)));
            let mut lookup = similarity::Lookup::new(self, cache, &words);
            let suggestions =
                suggestions::plan(self, &entry, &similar, no_suggest, now, &mut lookup)?;
            let created = suggestions.new.len() as u32;

            let count = self.entry_count()? + 1;
            let record = self.encode_entry(&entry);
            (
                &self.entries,
                &self.writes,
                &self.meta,
                &self.suggestions,
                &self.suggestion_keys,
                &self.suggestions_of_entry,
                &self.suggestions_pending,
            )
                .transaction(
                    |(entries, order, meta, sugg, keys, of_entry, pending)| {
                        let trees = suggestions::Trees {
                            suggestions: sugg,
                            keys,
                            of_entry,
                            pending,
                        };
                        entries.insert(entry.id.to_string().as_bytes(), record.as_slice())?;
                        writes::put(order, seq, entry.id, None)?;
                        meta.insert(META_SEQ, &seq.to_be_bytes())?;
                        meta.insert(META_COUNT, &count.to_be_bytes())?;
                        for s in suggestions
                            .new
                            .iter()
                            .chain(&suggestions.superseded)
                            .chain(&accepting)
                        {
                            suggestions::put(&trees, s)?;
                        }
                        Ok::<_, ConflictableTransactionError<MemoryError>>(())
                    },
                )?;
            self.store.flush()?;
            self.train_dictionary_when_due(count, &NoProgress)?;
            let read = match reading {
                Some(thread) => thread
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))?,
                None => HashMap::new(),
            };
            let mut similar_entries = Vec::new();
            for s in similar.iter().take(MAX_SIMILAR_SHOWN) {
                let card = match read.get(&s.id) {
                    Some(card) => Some(card.clone()),
                    None => lookup.card(s.id)?,
                };
                if let Some(card) = card {
                    similar_entries.push(SimilarEntry {
                        id: s.id.to_string(),
                        title: card.title,
                        score: round2(s.score),
                    });
                }
            }
            Ok((created, similar_entries))
        })?;
        let embeddings_calculated = stored.is_some();
        self.semantic.put(stored.into_iter().collect());
        self.index_after_write(&entry);

        Ok(AddOutcome {
            id: entry.id.to_string(),
            title: entry.title.clone(),
            entry_type: entry.entry_type.to_string(),
            created: true,
            embeddings_calculated,
            similar_entries,
            suggestions_created: created,
            context_truncated,
            tags: entry.tags,
        })
    }

    /// The cards of the entries `ids` as sled holds them (one gone is left out).
    fn cards_of(&self, ids: &[Ulid]) -> Result<HashMap<Ulid, similarity::Card>> {
        let mut cards = HashMap::with_capacity(ids.len());
        for id in ids {
            if let Some(entry) = self.get(id)? {
                cards.insert(*id, similarity::Card::of(&entry));
            }
        }
        Ok(cards)
    }

    /// After sled has a write durably, the index follows. A failure here loses nothing: the
    /// entry is in sled and the index catches up at the next start.
    fn index_after_write(&self, entry: &Entry) {
        if let Err(e) = self.idx().upsert(entry) {
            tracing::error!(
                "indexing {} failed ({e}); it is stored and will be indexed at the next start",
                entry.id
            );
        }
    }

    fn linked_either_way(&self, a: &Ulid, b: &Ulid) -> Result<bool> {
        Ok(self.links.scan_prefix(format!("{a}/{b}/")).next().is_some()
            || self.links.scan_prefix(format!("{b}/{a}/")).next().is_some())
    }

    /// Links two entries.
    pub fn link(&self, source: &str, target: &str, relation: RelationType) -> Result<LinkOutcome> {
        let source = self.resolve(source)?;
        let target = self.resolve(target)?;
        if source.id == target.id {
            return Err(MemoryError::SelfLink {
                id: source.id.to_string(),
            });
        }
        let guard = self.lock_writes();
        let link = self.create_link(&source, &target, relation)?;
        self.store.flush()?;
        drop(guard);
        Ok(LinkOutcome {
            created: true,
            link_id: link.id.to_string(),
            source: EntryRef {
                id: source.id.to_string(),
                title: source.title,
            },
            target: EntryRef {
                id: target.id.to_string(),
                title: target.title,
            },
            relation_type: relation.to_string(),
        })
    }

    /// Writes a link (and, for `supersedes`, the target's status). Caller holds the write
    /// lock and flushes.
    fn create_link(&self, source: &Entry, target: &Entry, relation: RelationType) -> Result<Link> {
        let key = link_key(&source.id, &target.id, relation);
        if let Some(existing) = self.links.get(&key)? {
            let existing: Link = decode(&existing)?;
            return Err(MemoryError::LinkAlreadyExists {
                source_id: source.id.to_string(),
                target_id: target.id.to_string(),
                relation: relation.to_string(),
                link_id: existing.id.to_string(),
            });
        }
        let link = Link {
            id: next_id(),
            source: source.id,
            target: target.id,
            relation,
            created_at: now(),
        };
        let in_key = link_key(&target.id, &source.id, relation);
        let superseded = (relation == RelationType::Supersedes).then(|| {
            let mut t = target.clone();
            t.status = EntryStatus::Superseded;
            t.updated_at = now();
            t
        });
        (&self.links, &self.links_in, &self.entries).transaction(
            |(links, links_in, entries)| {
                links.insert(key.as_bytes(), encode(&link))?;
                links_in.insert(in_key.as_bytes(), link.id.to_string().as_bytes())?;
                if let Some(t) = &superseded {
                    // Re-read inside the transaction so access statistics are not lost.
                    let mut current: Entry = match entries.get(t.id.to_string())? {
                        Some(b) => self
                            .decode_entry(&b)
                            .map_err(ConflictableTransactionError::Abort)?,
                        None => t.clone(),
                    };
                    current.status = t.status;
                    current.updated_at = t.updated_at;
                    entries.insert(t.id.to_string().as_bytes(), self.encode_entry(&current))?;
                }
                Ok::<_, ConflictableTransactionError<MemoryError>>(())
            },
        )?;
        Ok(link)
    }

    /// Size of the search index on disk, in bytes.
    pub fn index_size(&self) -> u64 {
        self.idx().size_on_disk()
    }
}

/// An entry that passed an add's checks, not yet stored: its sequence number and times are
/// set when it is written.
struct Valid {
    entry: Entry,
    /// `context` was over 10,000 characters and only its first 8,000 were kept.
    context_truncated: bool,
}

/// An add's checks, made before the write lock is taken: the type, the title (not empty,
/// at most 100 characters), the confidence; tags normalised, the context cut.
fn validate(new: NewEntry) -> Result<Valid> {
    let entry_type = new
        .entry_type
        .ok_or_else(|| MemoryError::invalid_argument("type", "the entry type is required"))?;
    let title = new.title.trim().to_string();
    if title.is_empty() {
        return Err(MemoryError::invalid_argument("title", "the title is empty"));
    }
    let title_chars = title.chars().count();
    if title_chars > MAX_TITLE_CHARS {
        return Err(MemoryError::invalid_argument(
            "title",
            format!("the title has {title_chars} characters; the maximum is {MAX_TITLE_CHARS}"),
        ));
    }
    let confidence = check_range("confidence", new.confidence, (0, 5, 3))? as u8;
    let tags = records::normalize_tags(&new.tags);
    let (context, context_truncated) = match new.context {
        Some(c) if !c.trim().is_empty() => {
            let (c, cut) = records::limit_context(c);
            (Some(c), cut)
        }
        _ => (None, false),
    };
    let project = new
        .project
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty());
    let now = now();
    Ok(Valid {
        entry: Entry {
            id: next_id(),
            context,
            project,
            confidence,
            memory_type: new.memory_type.unwrap_or(MemoryType::Episodic),
            created_at: now,
            updated_at: now,
            author: new
                .author
                .map(|a| a.trim().to_string())
                .filter(|a| !a.is_empty()),
            ..Entry::new(entry_type, title, new.content, tags)
        },
        context_truncated,
    })
}

fn link_key(a: &Ulid, b: &Ulid, relation: RelationType) -> String {
    format!("{a}/{b}/{relation}")
}

fn split_link_key(key: &[u8]) -> Result<(Ulid, Ulid, RelationType)> {
    let text = std::str::from_utf8(key).map_err(|e| MemoryError::Corrupt(e.to_string()))?;
    let mut parts = text.splitn(3, '/');
    let mut next_id = || {
        parts
            .next()
            .and_then(|p| Ulid::from_string(p).ok())
            .ok_or_else(|| MemoryError::Corrupt(format!("bad link key {text}")))
    };
    let a = next_id()?;
    let b = next_id()?;
    let relation = text
        .rsplit('/')
        .next()
        .unwrap_or("")
        .parse::<RelationType>()
        .map_err(|_| MemoryError::Corrupt(format!("bad link key {text}")))?;
    Ok((a, b, relation))
}

/// A fresh id. Not the monotonic generator: it makes ids of one millisecond differ only
/// in their last character, which would make every short prefix ambiguous.
fn next_id() -> Ulid {
    Ulid::new()
}

fn now() -> Timestamp {
    Timestamp::now()
        .round(jiff::Unit::Millisecond)
        .unwrap_or_else(|_| Timestamp::now())
}

fn encode<T: serde::Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).expect("memory records serialise")
}

fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|e| MemoryError::Corrupt(e.to_string()))
}

fn parse_id_bytes(bytes: &[u8]) -> Result<Ulid> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| Ulid::from_string(s).ok())
        .ok_or_else(|| MemoryError::Corrupt("a bad entry id".into()))
}

fn be_u64(bytes: &[u8]) -> u64 {
    let mut buf = [0u8; 8];
    let n = bytes.len().min(8);
    buf[8 - n..].copy_from_slice(&bytes[bytes.len() - n..]);
    u64::from_be_bytes(buf)
}

/// Checks an optional integer argument against `(min, max, default)`.
fn check_range(
    field: &str,
    value: Option<i64>,
    (min, max, default): (i64, i64, i64),
) -> Result<i64> {
    let v = value.unwrap_or(default);
    if v < min || v > max {
        return Err(MemoryError::invalid_argument(
            field,
            format!("{field} must be between {min} and {max} (got {v})"),
        ));
    }
    Ok(v)
}

/// A score clamped to 0..1 and rounded to two decimals, as answers show it.
fn round2(x: f32) -> f64 {
    ((x.clamp(0.0, 1.0) as f64) * 100.0).round() / 100.0
}

/// Collapses runs of whitespace (snippets are one line).
fn squash(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// How established an entry is, 0..1: use (40%), links (30%), confidence (15%) and recency
/// of use (15%, halving every 30 days).
pub fn consolidation_score(entry: &Entry, links: usize, now: Timestamp) -> f64 {
    let uses = 1.0 - (-(entry.access_count as f64) / 5.0).exp();
    let linked = 1.0 - (-(links as f64) / 3.0).exp();
    let confidence = entry.confidence as f64 / 5.0;
    let last = entry.last_accessed.unwrap_or(entry.created_at);
    let days = (now.as_second() - last.as_second()).max(0) as f64 / 86_400.0;
    let recency = 0.5f64.powf(days / 30.0);
    let score = 0.4 * uses + 0.3 * linked + 0.15 * confidence + 0.15 * recency;
    (score * 100.0).round() / 100.0
}
