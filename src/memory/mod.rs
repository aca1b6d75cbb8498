//! The memory: a developer knowledge base (spec 003).
//!
//! sled holds the truth (entries, links, suggestions); [`index::MemoryIndex`] is a tantivy
//! index derived from it. Every write is in sled, flushed, before it is acknowledged; the
//! index follows in the same call.

pub mod api;
pub mod error;
pub mod help;
pub mod index;
pub mod model;
mod similarity;
mod suggestions;

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex};

use jiff::Timestamp;
use sled::Transactional;
use sled::transaction::ConflictableTransactionError;
use ulid::Ulid;

pub use api::*;
pub use error::MemoryError;
pub use model::{
    Entry, EntryStatus, EntryType, Link, MemoryType, RelationType, Suggestion, SuggestionKind,
    SuggestionStatus,
};

use index::{IndexState, MemoryIndex, TextField};
use model::{MAX_TITLE_CHARS, MIN_ID_PREFIX};
pub use suggestions::{MAX_GENERALIZE_MEMBERS, MAX_PENDING_GENERALIZATIONS, MAX_PENDING_LINKS};

use crate::store::{IdLookup, Store, lookup_id};

type Result<T, E = MemoryError> = std::result::Result<T, E>;

/// Search `limit` bounds and default (spec 003).
pub const SEARCH_LIMIT: (i64, i64, i64) = (1, 20, 5);
/// Suggestion list `limit` bounds and default (spec 003).
pub const SUGGESTION_LIMIT: (i64, i64, i64) = (1, 50, 10);
/// Entries at least this similar are returned as `similar_entries`.
pub const SIMILAR_MIN: f32 = 0.2;
/// Entries at least this similar get a pending link suggestion.
pub const LINK_SUGGESTION_MIN: f32 = 0.35;
/// Entries of one type at least this similar count towards a generalisation...
pub const GENERALIZE_MIN: f32 = 0.3;
/// ...once this many (the new one included) pile up.
pub const GENERALIZE_GROUP: usize = 3;
const MAX_SIMILAR_SHOWN: usize = 5;
const SNIPPET_CHARS: usize = 100;
/// A search's context adds at most this many of its most distinctive words to the query...
const CONTEXT_TERMS: usize = 12;
/// ...each weighing this much beside a word of the query.
const CONTEXT_TERM_WEIGHT: f32 = 0.35;
/// A result's score: this share from coverage (the idf-weighted share of the query's words
/// the entry contains), the rest from its BM25 score relative to the best hit.
const COVERAGE_SHARE: f32 = 0.8;
const HINT: &str = "Use rekall_show(id) for full content and links";

const META_SEQ: &[u8] = b"seq";
const META_COUNT: &[u8] = b"entries";

/// How [`Memory::open`] reports a rebuild of the search index.
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
    by_seq: sled::Tree,
    links: sled::Tree,
    links_in: sled::Tree,
    suggestions: sled::Tree,
    suggestion_keys: sled::Tree,
    /// `{entry}/{suggestion}` for every suggestion not superseded (`suggestions.rs`).
    suggestions_by_entry: sled::Tree,
    meta: sled::Tree,
    index: Arc<MemoryIndex>,
    /// Serialises writers: an add reads the index and the suggestions, then writes.
    write_lock: Mutex<similarity::SimilarityCache>,
}

impl Memory {
    /// Opens the memory of a store. When the search index is missing, stale or corrupt it
    /// is brought up to date from sled first, reporting through `progress`.
    pub fn open(store: Arc<Store>, progress: &dyn Progress) -> Result<Memory> {
        let db = store.db();
        let (index, state) = MemoryIndex::open(&store.dir().join("index").join("memory"))?;
        let memory = Memory {
            entries: db.open_tree("memory.entries")?,
            by_seq: db.open_tree("memory.by_seq")?,
            links: db.open_tree("memory.links")?,
            links_in: db.open_tree("memory.links_in")?,
            suggestions: db.open_tree("memory.suggestions")?,
            suggestion_keys: db.open_tree("memory.suggestion_keys")?,
            suggestions_by_entry: db.open_tree("memory.suggestions_by_entry")?,
            meta: db.open_tree("memory.meta")?,
            index,
            store,
            write_lock: Mutex::new(similarity::SimilarityCache::default()),
        };
        suggestions::build_index_if_missing(&memory)?;
        memory.bring_index_up_to_date(&state, progress)?;
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
                let behind: Vec<Ulid> = self
                    .by_seq
                    .range((indexed + 1).to_be_bytes()..)
                    .values()
                    .map(|v| {
                        v.map_err(MemoryError::from)
                            .and_then(|v| parse_id_bytes(&v))
                    })
                    .collect::<Result<_>>()?;
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
        let _guard = self.lock_writes();
        let total = self.entry_count()?;
        progress.start(total, reason);
        let seq = self.current_seq()?;
        let n = self
            .index
            .rebuild(self.iter_entries(), seq, |done| progress.advance(done))?;
        progress.finish();
        Ok(n)
    }

    /// Rebuilds the search index from sled (`tandem memory reindex`). Returns the number of
    /// entries indexed.
    pub fn reindex(&self, progress: &dyn Progress) -> Result<u64> {
        self.rebuild_index("requested", progress)
    }

    fn idx(&self) -> &MemoryIndex {
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
            Some(bytes) => Ok(Some(decode(&bytes)?)),
            None => Ok(None),
        }
    }

    fn iter_entries(&self) -> impl Iterator<Item = Result<Entry>> + '_ {
        self.entries.iter().values().map(|v| {
            v.map_err(MemoryError::from)
                .and_then(|b| decode::<Entry>(&b))
        })
    }

    /// Finds an entry by full ULID or unique prefix of 5+ characters.
    pub fn resolve(&self, input: &str) -> Result<Entry> {
        let wanted = model::normalize_id_input(input);
        if wanted.is_empty() {
            return Err(MemoryError::invalid_argument("id", "the ID is empty"));
        }
        let not_found = || MemoryError::EntryNotFound {
            id: input.trim().into(),
        };
        match lookup_id(&self.entries, &wanted)? {
            IdLookup::Found(record) => decode(&record),
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
                    .map(|(_, record)| decode::<Entry>(record).map(|e| (e.id.to_string(), e.title)))
                    .collect::<Result<_>>()?,
            }),
        }
    }

    /// The full entry, recording the access (`rekall_show`).
    pub fn show(&self, id: &str) -> Result<EntryDetails> {
        let entry = self.resolve(id)?;
        let entry = self.record_access(entry)?;
        self.details(&entry)
    }

    fn record_access(&self, entry: Entry) -> Result<Entry> {
        let now = now();
        let key = entry.id.to_string();
        let updated = self.entries.update_and_fetch(&key, |old| {
            // Returning None would delete the key: an unreadable record is left as it is.
            let old = old?;
            match decode::<Entry>(old) {
                Ok(mut e) => {
                    e.access_count += 1;
                    e.last_accessed = Some(now);
                    Some(encode(&e))
                }
                Err(_) => Some(old.to_vec()),
            }
        })?;
        // Access statistics are not flushed: losing the last half-second of them in a
        // crash loses no knowledge.
        match updated {
            Some(bytes) => decode(&bytes),
            None => Ok(entry),
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
            embeddings: EmbeddingsInfo {
                summary: false,
                context: false,
            },
            links: EntryLinks { outgoing, incoming },
            context: entry.context.clone(),
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

    /// The most recently created entries, newest first.
    pub fn recent(&self, limit: usize) -> Result<Vec<Entry>> {
        self.entries
            .iter()
            .values()
            .rev()
            .take(limit)
            .map(|v| decode(&v?))
            .collect()
    }

    // ---- search -------------------------------------------------------------------

    /// BM25 search with field boosts, filters, normalised scores and snippets.
    pub fn search(&self, q: &SearchQuery) -> Result<SearchOutcome> {
        let limit = check_range("limit", q.limit, SEARCH_LIMIT)? as usize;
        let query = q.query.trim();
        if query.is_empty() {
            return Err(MemoryError::invalid_argument("query", "the query is empty"));
        }
        let idx = self.idx();
        let searcher = idx.fresh_searcher()?;
        let n_docs = idx.num_docs(&searcher).max(1);
        let idf = |term: &str| similarity::idf(n_docs, idx.doc_freq(&searcher, term));

        let mut query_terms: Vec<String> = idx.terms(query);
        dedup_in_order(&mut query_terms);
        let mut weighted: Vec<(String, f32)> =
            query_terms.iter().map(|t| (t.clone(), 1.0)).collect();
        if let Some(context) = q.context.as_deref().filter(|c| !c.trim().is_empty()) {
            let mut extra: Vec<(String, f32)> = idx
                .terms(context)
                .into_iter()
                .filter(|t| !query_terms.contains(t))
                .map(|t| {
                    let w = idf(&t);
                    (t, w)
                })
                .collect();
            extra.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            extra.dedup_by(|a, b| a.0 == b.0);
            weighted.extend(
                extra
                    .into_iter()
                    .take(CONTEXT_TERMS)
                    .map(|(t, _)| (t, CONTEXT_TERM_WEIGHT)),
            );
        }
        let outcome = |total, results| SearchOutcome {
            query: q.query.clone(),
            total,
            results,
            hint: HINT.to_string(),
        };
        if weighted.is_empty() {
            let mut o = outcome(0, Vec::new());
            o.hint = "The query has no searchable words (only stop words or punctuation); use distinctive keywords".into();
            return Ok(o);
        }
        let plan = idx.plan(&weighted, q.entry_type, q.project.as_deref());
        let (hits, total) = idx.search(&searcher, &plan, limit)?;
        if hits.is_empty() {
            let mut o = outcome(total as u64, Vec::new());
            o.hint = "No match: try other keywords, fewer filters, or rekall_add to capture this once solved".into();
            return Ok(o);
        }
        let generators = idx.snippet_generators(&searcher, &plan, SNIPPET_CHARS)?;
        let query_idf: Vec<(String, f32)> =
            query_terms.iter().map(|t| (t.clone(), idf(t))).collect();
        let idf_total: f32 = query_idf.iter().map(|(_, w)| w).sum();
        let top = hits
            .first()
            .map(|h| h.score)
            .unwrap_or(1.0)
            .max(f32::EPSILON);
        let mut results = Vec::with_capacity(hits.len());
        for hit in &hits {
            let Some(entry) = self.get(&hit.id)? else {
                continue;
            };
            let context = entry.context.as_deref().unwrap_or("");
            let tags = entry.tags.join(" ");
            // Coverage: the idf-weighted share of the query's words this entry contains.
            let coverage = if idf_total > 0.0 {
                let mut present: std::collections::HashSet<String> = idx
                    .terms(&entry.title)
                    .into_iter()
                    .chain(idx.terms(&tags))
                    .chain(idx.terms(&entry.content))
                    .collect();
                if query_idf.iter().any(|(t, _)| !present.contains(t)) {
                    present.extend(idx.terms(context));
                }
                query_idf
                    .iter()
                    .filter(|(t, _)| present.contains(t))
                    .map(|(_, w)| w)
                    .sum::<f32>()
                    / idf_total
            } else {
                0.0
            };
            let score = COVERAGE_SHARE * coverage + (1.0 - COVERAGE_SHARE) * (hit.score / top);
            let texts: HashMap<TextField, &str> = [
                (TextField::Title, entry.title.as_str()),
                (TextField::Content, entry.content.as_str()),
                (TextField::Context, context),
                (TextField::Tags, tags.as_str()),
            ]
            .into_iter()
            .collect();
            let snippet = match index::best_snippet(&generators, &texts) {
                Some((_, s)) => squash(s.fragment()),
                None => lead(&entry.content, &entry.title),
            };
            results.push((
                hit.score,
                SearchResult {
                    id: entry.id.to_string(),
                    entry_type: entry.entry_type.to_string(),
                    title: entry.title,
                    score: round2(score),
                    snippet,
                    tags: entry.tags,
                },
            ));
        }
        results.sort_by(|a, b| b.1.score.total_cmp(&a.1.score).then(b.0.total_cmp(&a.0)));
        Ok(outcome(
            total as u64,
            results.into_iter().map(|(_, r)| r).collect(),
        ))
    }

    // ---- writing ------------------------------------------------------------------

    /// Adds an entry: validated, stored durably, indexed, with similar entries found and
    /// suggestions created.
    pub fn add(&self, new: NewEntry) -> Result<AddOutcome> {
        self.add_inner(new, &[])
    }

    fn add_inner(&self, new: NewEntry, no_suggest: &[Ulid]) -> Result<AddOutcome> {
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
        let tags = model::normalize_tags(&new.tags);
        let (context, context_truncated) = match new.context {
            Some(c) if !c.trim().is_empty() => {
                let (c, cut) = model::limit_context(c);
                (Some(c), cut)
            }
            _ => (None, false),
        };
        let project = new
            .project
            .map(|p| p.trim().to_string())
            .filter(|p| !p.is_empty());

        let mut guard = self.lock_writes();
        let now = now();
        let id = next_id();
        let seq = self.current_seq()? + 1;
        let entry = Entry {
            id,
            entry_type,
            title,
            content: new.content,
            tags,
            context,
            project,
            confidence,
            memory_type: new.memory_type.unwrap_or(MemoryType::Episodic),
            status: EntryStatus::Active,
            created_at: now,
            updated_at: now,
            last_accessed: None,
            access_count: 0,
            seq,
        };

        let similar = similarity::find_similar(self, &mut guard, &entry)?;
        let suggestions = suggestions::plan(self, &entry, &similar, no_suggest, now)?;
        let created = suggestions.new.len() as u32;

        let count = self.entry_count()? + 1;
        (
            &self.entries,
            &self.by_seq,
            &self.meta,
            &self.suggestions,
            &self.suggestion_keys,
            &self.suggestions_by_entry,
        )
            .transaction(|(entries, by_seq, meta, sugg, keys, by_entry)| {
                entries.insert(entry.id.to_string().as_bytes(), encode(&entry))?;
                by_seq.insert(&seq.to_be_bytes(), entry.id.to_string().as_bytes())?;
                meta.insert(META_SEQ, &seq.to_be_bytes())?;
                meta.insert(META_COUNT, &count.to_be_bytes())?;
                for s in suggestions.new.iter().chain(&suggestions.superseded) {
                    suggestions::put(sugg, keys, by_entry, s)?;
                }
                Ok::<_, ConflictableTransactionError<MemoryError>>(())
            })?;
        self.store.flush()?;
        self.index_after_write(&entry);
        drop(guard);

        Ok(AddOutcome {
            id: entry.id.to_string(),
            title: entry.title.clone(),
            entry_type: entry.entry_type.to_string(),
            created: true,
            embeddings_calculated: false,
            similar_entries: similar
                .iter()
                .take(MAX_SIMILAR_SHOWN)
                .map(|s| SimilarEntry {
                    id: s.entry.id.to_string(),
                    title: s.entry.title.clone(),
                    score: round2(s.score),
                })
                .collect(),
            suggestions_created: created,
            context_truncated,
            tags: entry.tags,
        })
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
                        Some(b) => decode(&b).map_err(ConflictableTransactionError::Abort)?,
                        None => t.clone(),
                    };
                    current.status = t.status;
                    current.updated_at = t.updated_at;
                    entries.insert(t.id.to_string().as_bytes(), encode(&current))?;
                }
                Ok::<_, ConflictableTransactionError<MemoryError>>(())
            },
        )?;
        Ok(link)
    }

    // ---- suggestions ----------------------------------------------------------------

    fn pending(&self, kind: SuggestionKind) -> Result<Vec<Suggestion>> {
        let mut out = Vec::new();
        for item in self.suggestions.iter().values() {
            let s: Suggestion = decode(&item?)?;
            if s.kind == kind && s.status == SuggestionStatus::Pending {
                out.push(s);
            }
        }
        out.sort_by(|a, b| b.score.total_cmp(&a.score).then(b.id.cmp(&a.id)));
        Ok(out)
    }

    /// Pending link suggestions, best first (`rekall_suggest_links`).
    pub fn link_suggestions(&self, limit: Option<i64>) -> Result<LinkSuggestions> {
        let limit = check_range("limit", limit, SUGGESTION_LIMIT)? as usize;
        let pending = self.pending(SuggestionKind::Link)?;
        let total_pending = pending.len() as u64;
        let mut suggestions = Vec::new();
        for s in pending.into_iter().take(limit) {
            suggestions.push(LinkSuggestionView {
                id: s.id.to_string(),
                entry_a: self.entry_ref(&s.entries[0])?,
                entry_b: self.entry_ref(&s.entries[1])?,
                score: round2(s.score),
                reason: s.reason,
                created_at: s.created_at.to_string(),
            });
        }
        Ok(LinkSuggestions {
            suggestions,
            total_pending,
        })
    }

    /// Pending generalisation suggestions, best first (`rekall_suggest_generalize`).
    pub fn generalize_suggestions(&self, limit: Option<i64>) -> Result<GeneralizeSuggestions> {
        let limit = check_range("limit", limit, SUGGESTION_LIMIT)? as usize;
        let pending = self.pending(SuggestionKind::Generalize)?;
        let total_pending = pending.len() as u64;
        let mut suggestions = Vec::new();
        for s in pending.into_iter().take(limit) {
            suggestions.push(GeneralizeSuggestionView {
                id: s.id.to_string(),
                entries: s
                    .entries
                    .iter()
                    .map(|id| self.entry_ref(id))
                    .collect::<Result<_>>()?,
                score: round2(s.score),
                reason: s.reason,
                created_at: s.created_at.to_string(),
            });
        }
        Ok(GeneralizeSuggestions {
            suggestions,
            total_pending,
        })
    }

    fn suggestion(&self, id: &str) -> Result<Suggestion> {
        let wanted = model::normalize_id_input(id);
        let not_found = || MemoryError::SuggestionNotFound {
            id: id.trim().into(),
        };
        match lookup_id(&self.suggestions, &wanted)? {
            IdLookup::Found(record) => decode(&record),
            IdLookup::Missing | IdLookup::TooShort | IdLookup::Ambiguous(_) => Err(not_found()),
        }
    }

    /// A pending suggestion, marked `status` (not yet stored). Caller holds the write lock.
    fn resolve_pending(&self, id: &str, status: SuggestionStatus) -> Result<Suggestion> {
        let mut s = self.suggestion(id)?;
        if s.status != SuggestionStatus::Pending {
            return Err(MemoryError::SuggestionAlreadyResolved {
                id: s.id.to_string(),
                status: s.status.to_string(),
            });
        }
        s.status = status;
        s.resolved_at = Some(now());
        Ok(s)
    }

    /// Writes a suggestion whose status changed, with its rows by entry. Caller holds the
    /// write lock and flushes.
    fn store_suggestion(&self, s: &Suggestion) -> Result<()> {
        (
            &self.suggestions,
            &self.suggestion_keys,
            &self.suggestions_by_entry,
        )
            .transaction(|(sugg, keys, by_entry)| {
                suggestions::put(sugg, keys, by_entry, s)?;
                Ok::<_, ConflictableTransactionError<MemoryError>>(())
            })?;
        Ok(())
    }

    /// Accepts a suggestion: creates its link, or returns the command that generalises.
    pub fn accept(&self, suggestion_id: &str) -> Result<AcceptOutcome> {
        let _guard = self.lock_writes();
        let s = self.resolve_pending(suggestion_id, SuggestionStatus::Accepted)?;
        let outcome = match s.kind {
            SuggestionKind::Link => {
                let a = self.get(&s.entries[0])?;
                let b = self.get(&s.entries[1])?;
                let (Some(a), Some(b)) = (a, b) else {
                    return Err(MemoryError::EntryNotFound {
                        id: s
                            .entries
                            .iter()
                            .map(Ulid::to_string)
                            .collect::<Vec<_>>()
                            .join(", "),
                    });
                };
                let action = match self.create_link(&a, &b, RelationType::Related) {
                    Ok(link) => {
                        format!("created link {} ({} -[related]-> {})", link.id, a.id, b.id)
                    }
                    Err(MemoryError::LinkAlreadyExists { link_id, .. }) => {
                        format!("the link already existed ({link_id}); nothing new was created")
                    }
                    Err(e) => return Err(e),
                };
                AcceptOutcome {
                    accepted: true,
                    suggestion_type: s.kind.to_string(),
                    action_taken: action,
                    link_created: Some(LinkCreated {
                        source_id: a.id.to_string(),
                        target_id: b.id.to_string(),
                    }),
                    generalize_command: None,
                }
            }
            SuggestionKind::Generalize => AcceptOutcome {
                accepted: true,
                suggestion_type: s.kind.to_string(),
                action_taken:
                    "Run generalize_command to create one semantic entry derived from these entries"
                        .into(),
                link_created: None,
                generalize_command: Some(generalize_command(&s.entries)),
            },
        };
        self.store_suggestion(&s)?;
        self.store.flush()?;
        Ok(outcome)
    }

    /// Rejects a suggestion; it is remembered so it never comes back.
    pub fn reject(&self, suggestion_id: &str) -> Result<RejectOutcome> {
        let _guard = self.lock_writes();
        let s = self.resolve_pending(suggestion_id, SuggestionStatus::Rejected)?;
        self.store_suggestion(&s)?;
        self.store.flush()?;
        Ok(RejectOutcome {
            rejected: true,
            suggestion_id: s.id.to_string(),
        })
    }

    /// Creates one semantic entry from several entries and links it to each of them with
    /// `derived_from`: what a generalisation suggestion's command runs.
    pub fn generalize(
        &self,
        ids: &[String],
        title: Option<String>,
        content: Option<String>,
        entry_type: Option<EntryType>,
    ) -> Result<GeneralizeOutcome> {
        let mut sources: Vec<Entry> = Vec::new();
        for id in ids {
            let e = self.resolve(id)?;
            if !sources.iter().any(|s| s.id == e.id) {
                sources.push(e);
            }
        }
        if sources.len() < 2 {
            return Err(MemoryError::invalid_argument(
                "ids",
                "give at least two distinct entries to generalise",
            ));
        }
        let first_type = sources[0].entry_type;
        let entry_type =
            entry_type.unwrap_or(if sources.iter().all(|s| s.entry_type == first_type) {
                first_type
            } else {
                EntryType::Pattern
            });
        let title = title.unwrap_or_else(|| {
            let t = format!("Generalised: {}", sources[0].title);
            t.chars().take(MAX_TITLE_CHARS).collect()
        });
        let content = content.unwrap_or_else(|| {
            let mut c = format!("Generalised from {} entries:\n", sources.len());
            for s in &sources {
                let lead: String = s.content.chars().take(300).collect();
                c.push_str(&format!("- [{}] {}: {}\n", s.id, s.title, squash(&lead)));
            }
            c
        });
        let mut tag_count: HashMap<&str, usize> = HashMap::new();
        for s in &sources {
            for t in &s.tags {
                *tag_count.entry(t.as_str()).or_default() += 1;
            }
        }
        let mut tags: Vec<String> = tag_count
            .iter()
            .filter(|(_, n)| **n >= 2)
            .map(|(t, _)| t.to_string())
            .collect();
        tags.sort();
        let source_ids: Vec<Ulid> = sources.iter().map(|s| s.id).collect();
        let projects: Vec<&String> = sources.iter().filter_map(|s| s.project.as_ref()).collect();
        let project = projects
            .first()
            .filter(|p| projects.iter().all(|q| q == *p) && projects.len() == sources.len())
            .map(|p| p.to_string());
        let added = self.add_inner(
            NewEntry {
                entry_type: Some(entry_type),
                title,
                content,
                tags,
                context: None,
                project,
                confidence: Some(
                    sources
                        .iter()
                        .map(|s| s.confidence as i64)
                        .max()
                        .unwrap_or(3),
                ),
                memory_type: Some(MemoryType::Semantic),
            },
            &source_ids,
        )?;
        let new_entry = self.resolve(&added.id)?;
        let guard = self.lock_writes();
        let mut derived_from = Vec::new();
        for s in &sources {
            self.create_link(&new_entry, s, RelationType::DerivedFrom)?;
            derived_from.push(EntryRef {
                id: s.id.to_string(),
                title: s.title.clone(),
            });
        }
        // A pending suggestion for exactly this group is now done.
        let key = Suggestion::key(SuggestionKind::Generalize, &source_ids);
        if let Some(sid) = self.suggestion_keys.get(&key)?
            && let Some(bytes) = self.suggestions.get(&sid)?
        {
            let mut s: Suggestion = decode(&bytes)?;
            if s.status == SuggestionStatus::Pending {
                s.status = SuggestionStatus::Accepted;
                s.resolved_at = Some(now());
                self.store_suggestion(&s)?;
            }
        }
        self.store.flush()?;
        drop(guard);
        Ok(GeneralizeOutcome {
            entry: added,
            derived_from,
        })
    }

    // ---- export / import ----------------------------------------------------------

    /// Writes every entry, then every link, as JSON Lines.
    pub fn export(&self, out: &mut dyn Write) -> Result<ExportReport> {
        let mut report = ExportReport::default();
        for entry in self.iter_entries() {
            let line = serde_json::to_string(&Record::Entry(entry?)).expect("plain data");
            writeln!(out, "{line}")?;
            report.entries += 1;
        }
        for item in self.links.iter().values() {
            let link: Link = decode(&item?)?;
            let line = serde_json::to_string(&Record::Link(link)).expect("plain data");
            writeln!(out, "{line}")?;
            report.links += 1;
        }
        out.flush()?;
        Ok(report)
    }

    /// Reads JSON Lines written by [`Self::export`]. The whole input is checked before
    /// anything is written: one bad line imports nothing and names its line number. An
    /// entry that exists is replaced only when the incoming one was updated later.
    pub fn import(&self, input: &mut dyn BufRead) -> Result<ImportReport> {
        let mut records = Vec::new();
        for (i, line) in input.lines().enumerate() {
            let line = line?;
            if line.trim().is_empty() {
                continue;
            }
            let record: Record = serde_json::from_str(&line).map_err(|e| {
                MemoryError::invalid_argument("input", format!("line {}: {e}", i + 1))
            })?;
            if let Record::Entry(e) = &record {
                let n = e.title.chars().count();
                if e.title.trim().is_empty() || n > MAX_TITLE_CHARS || e.confidence > 5 {
                    return Err(MemoryError::invalid_argument(
                        "input",
                        format!(
                            "line {}: entry {} has an empty or over-long title or a confidence over 5",
                            i + 1,
                            e.id
                        ),
                    ));
                }
            }
            records.push(record);
        }
        let mut report = ImportReport::default();
        let mut guard = self.lock_writes();
        guard.clear_entries();
        let mut seq = self.current_seq()?;
        let mut count = self.entry_count()?;
        let mut to_index = Vec::new();
        for record in &records {
            let Record::Entry(incoming) = record else {
                continue;
            };
            let mut incoming = incoming.clone();
            incoming.tags = model::normalize_tags(&incoming.tags);
            let existing = self.get(&incoming.id)?;
            match &existing {
                Some(old) if old.updated_at >= incoming.updated_at => {
                    report.entries_unchanged += 1;
                    continue;
                }
                Some(_) => report.entries_updated += 1,
                None => {
                    report.entries_added += 1;
                    count += 1;
                }
            }
            seq += 1;
            incoming.seq = seq;
            let old_seq = existing.map(|o| o.seq);
            (&self.entries, &self.by_seq, &self.meta).transaction(|(entries, by_seq, meta)| {
                if let Some(old) = old_seq {
                    by_seq.remove(&old.to_be_bytes())?;
                }
                entries.insert(incoming.id.to_string().as_bytes(), encode(&incoming))?;
                by_seq.insert(&seq.to_be_bytes(), incoming.id.to_string().as_bytes())?;
                meta.insert(META_SEQ, &seq.to_be_bytes())?;
                meta.insert(META_COUNT, &count.to_be_bytes())?;
                Ok::<_, ConflictableTransactionError<MemoryError>>(())
            })?;
            to_index.push(incoming);
        }
        for record in &records {
            let Record::Link(link) = record else { continue };
            let key = link_key(&link.source, &link.target, link.relation);
            if self.links.contains_key(&key)? {
                report.links_unchanged += 1;
                continue;
            }
            let (Some(source), Some(target)) = (self.get(&link.source)?, self.get(&link.target)?)
            else {
                return Err(MemoryError::invalid_argument(
                    "input",
                    format!(
                        "link {} names an entry that is neither stored nor imported",
                        link.id
                    ),
                ));
            };
            self.create_link(&source, &target, link.relation)?;
            report.links_added += 1;
        }
        self.store.flush()?;
        if let Err(e) = self.idx().upsert_batch(&to_index) {
            tracing::error!(
                "indexing the import failed ({e}); it is stored and will be indexed at the next start"
            );
        }
        Ok(report)
    }

    /// Size of the search index on disk, in bytes.
    pub fn index_size(&self) -> u64 {
        self.idx().size_on_disk()
    }
}

/// One line of an export.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(tag = "record", rename_all = "snake_case")]
enum Record {
    Entry(Entry),
    Link(Link),
}

/// The command a generalisation suggestion hands back.
pub fn generalize_command(ids: &[Ulid]) -> String {
    let ids: Vec<String> = ids.iter().map(Ulid::to_string).collect();
    format!("tandem memory generalize {}", ids.join(" "))
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
        .ok_or_else(|| MemoryError::Corrupt("bad id in by_seq".into()))
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

fn dedup_in_order(terms: &mut Vec<String>) {
    let mut seen = std::collections::HashSet::new();
    terms.retain(|t| seen.insert(t.clone()));
}

fn round2(x: f32) -> f64 {
    ((x.clamp(0.0, 1.0) as f64) * 100.0).round() / 100.0
}

/// Collapses runs of whitespace (snippets are one line).
fn squash(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The first ~100 characters of the content, or the title: a snippet when no word matched
/// a text field (a tag-only match).
fn lead(content: &str, title: &str) -> String {
    let source = if content.trim().is_empty() {
        title
    } else {
        content
    };
    let text = squash(source);
    if text.chars().count() <= SNIPPET_CHARS {
        return text;
    }
    let cut: String = text.chars().take(SNIPPET_CHARS).collect();
    match cut.rfind(' ') {
        Some(i) if i > SNIPPET_CHARS / 2 => format!("{}…", &cut[..i]),
        _ => format!("{cut}…"),
    }
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
