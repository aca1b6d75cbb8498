//! The full-text index: a tantivy index derived from the documents in sled.
//!
//! Invariants:
//! - The index is never the truth. Each commit records, as its payload, the highest document
//!   sequence number it holds; at open, an index behind sled is caught up, and a missing,
//!   corrupt or foreign one is rebuilt.
//! - Read-your-writes without paying a commit per write: writes go to the `IndexWriter` and
//!   mark the index dirty; any read commits first if dirty (one commit covers every write
//!   since the last), and a background thread commits once writes pause.

use std::collections::{HashMap, hash_map};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use tantivy::columnar::Column;
use tantivy::index::SegmentId;
use tantivy::indexer::LogMergePolicy;
use tantivy::query::{BooleanQuery, EnableScoring, Occur, Query, TermQuery, Weight};
use tantivy::schema::{
    FAST, Field, IndexRecordOption, STRING, Schema, TextFieldIndexing, TextOptions,
};
use tantivy::snippet::{Snippet, SnippetGenerator};
use tantivy::tokenizer::{RemoveLongFilter, SimpleTokenizer, TextAnalyzer};
use tantivy::{
    DocAddress, DocSet, Index, IndexReader, IndexWriter, ReloadPolicy, Searcher, SegmentReader,
    TERMINATED, Term, doc,
};
use ulid::Ulid;

use crate::maxscore;
use crate::stages::Flag;
use crate::{AsDocument, Document, Kind, Kinds, group_key};

/// Bump when the schema or the analyzer changes: an index of another version is rebuilt.
/// 3: a document's title, tags and content in one field (`words`), without positions.
const SCHEMA_VERSION: u32 = 3;
const ANALYZER: &str = "tandem_en";
/// The writer's buffer: a segment is cut each time it fills. Only a bulk write fills it (an
/// import, a rebuild; an add is committed within [`MAX_PENDING`] documents), and while it
/// does it is most of the process's memory. A smaller buffer cut many small segments,
/// which a large import then merged level by level before its final merge
/// (`cargo bench --bench scale` times the import).
const WRITER_MEMORY: usize = 256 * 1024 * 1024;
/// Uncommitted writes beyond this are committed at once rather than waiting for a pause.
const MAX_PENDING: usize = 128;
/// A search's word in more than this share of the documents is common
/// ([`TextIndex::plan_narrowed`])...
const COMMON_SHARE: f64 = 0.05;
/// ...once the index holds this many (below, every search reads all its postings fast).
const COMMON_FROM_DOCS: u64 = 10_000;
/// A search's word held by more than this share of the documents weighs next to nothing in
/// BM25 (its idf is at most ln(1 + 0.1 / 0.9) ≈ 0.105, a contribution of at most ~0.23
/// where a distinctive word brings several): it is left out of the scoring query when
/// another word remains ([`TextIndex::without_ubiquitous`]).
const UBIQUITOUS_SHARE: f64 = 0.9;
/// A search's `total` is exact up to this many matches, estimated beyond
/// ([`TextIndex::total`]).
const TOTAL_EXACT_UP_TO: u64 = 1_000;
/// A dirty index is committed by the background thread once writes pause this long.
const IDLE_COMMIT: Duration = Duration::from_millis(150);
/// Its segments are merged ([`idle_merge`]) once writes pause this long.
const IDLE_MERGE: Duration = Duration::from_secs(10);
/// How long the idle commit waits for an import's next part
/// ([`TextIndex::expect_more_writes`]).
const NEXT_PART_WAIT: Duration = Duration::from_secs(5);
/// When idle, the segments besides the largest are merged into one; all of them are once
/// they hold this share of the largest's documents. A search then opens at most two
/// segments, and a document is written again about 1 / this share times over its life. From
/// [`HALVES_FROM`] documents the same share folds the small segments into the two halves.
const MERGE_ALL_SHARE: f64 = 0.125;
/// From this many documents the index is kept in two halves of about as many documents each,
/// which a search reads side by side on two threads ([`TopSearch::work_parted`]): on a
/// large base a search of words most documents hold scores about half the index on each.
/// Below it, a second thread's start costs about what it saves (`cargo bench --bench
/// scale`, docs/benchmarks.md).
pub const HALVES_FROM: u64 = 200_000;
/// A bulk write (an import, a rebuild) cuts a segment each this many documents, for the
/// merge after it to make two halves of (a segment cannot be split).
const BULK_SEGMENT: usize = 100_000;
/// tantivy's own policy merges segments of up to this many documents (the adds' commits);
/// the larger are [`idle_merge`]'s.
const SMALL_SEGMENT: usize = 10_000;

/// A merge under way.
type MergeRunning = tantivy::FutureResult<Option<tantivy::index::SegmentMeta>>;

/// The merges to make when the index is idle, each a set of segments (id, documents).
///
/// Below [`HALVES_FROM`] documents, at most one: none when there are fewer than three
/// segments, else those besides the largest, or all of them once those hold
/// [`MERGE_ALL_SHARE`] of the largest's documents.
///
/// From [`HALVES_FROM`], the two largest are the halves, and the others are merged
/// together until they hold [`MERGE_ALL_SHARE`] of the smaller half; then each of them,
/// the largest first, goes to the half with fewer documents, and each half given one is
/// merged with it. An import's segments of [`BULK_SEGMENT`] documents become two halves at
/// once, and an index that grew in one segment (or was written before the halves) grows
/// its second half from the adds.
fn idle_merge<Id: Copy>(segments: &[(Id, u32)]) -> Vec<Vec<Id>> {
    let documents: u64 = segments.iter().map(|s| u64::from(s.1)).sum();
    let mut by_size = segments.to_vec();
    by_size.sort_by_key(|s| std::cmp::Reverse(s.1));
    let ids = |s: &[(Id, u32)]| s.iter().map(|s| s.0).collect::<Vec<Id>>();
    let weigh = |others: &[(Id, u32)], than: u32| {
        others.iter().map(|s| u64::from(s.1)).sum::<u64>() as f64
            >= MERGE_ALL_SHARE * f64::from(than)
    };
    let [largest, second, others @ ..] = by_size.as_slice() else {
        return Vec::new();
    };
    if documents < HALVES_FROM {
        if weigh(&by_size[1..], largest.1) {
            return vec![ids(&by_size)];
        }
        return if others.is_empty() {
            Vec::new()
        } else {
            vec![ids(&by_size[1..])]
        };
    }
    if others.is_empty() {
        return Vec::new();
    }
    if !weigh(others, second.1) {
        return if others.len() >= 2 {
            vec![ids(others)]
        } else {
            Vec::new()
        };
    }
    let mut halves = [
        (u64::from(largest.1), vec![largest.0]),
        (u64::from(second.1), vec![second.0]),
    ];
    for s in others {
        let half = if halves[0].0 <= halves[1].0 { 0 } else { 1 };
        halves[half].0 += u64::from(s.1);
        halves[half].1.push(s.0);
    }
    halves
        .into_iter()
        .map(|(_, ids)| ids)
        .filter(|ids| ids.len() >= 2)
        .collect()
}

/// A document's title, tags and content are indexed together in one field (`words`), the
/// title this many times and the tags [`TAGS_REPEATS`] times: their words count as often in
/// BM25's term frequency, so a word of the title says more than one of the content. One
/// field, not one a text: a query's term is one posting list to read, not three (the
/// slowest searches, of many common words, read a third of what they did).
const TITLE_REPEATS: usize = 3;
const TAGS_REPEATS: usize = 2;
/// A word of the conversation context (its own field) weighs this much beside one of the
/// document's words.
const CONTEXT_BOOST: f32 = 0.5;

/// The texts of a document a snippet may come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TextField {
    Title,
    Tags,
    Body,
    Context,
}

#[derive(Debug, Clone, Copy)]
struct Fields {
    id: Field,
    /// The ULID's two halves as fast fields: a hit's id without touching the doc store.
    id_hi: Field,
    id_lo: Field,
    kind: Field,
    group: Field,
    /// The title, tags and content ([`TITLE_REPEATS`]).
    words: Field,
    context: Field,
}

fn schema() -> (Schema, Fields) {
    let mut b = Schema::builder();
    let text = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer(ANALYZER)
            .set_index_option(IndexRecordOption::WithFreqs),
    );
    let fields = Fields {
        id: b.add_text_field("id", STRING),
        id_hi: b.add_u64_field("id_hi", FAST),
        id_lo: b.add_u64_field("id_lo", FAST),
        kind: b.add_text_field("type", STRING),
        group: b.add_text_field("project", STRING),
        words: b.add_text_field("words", text.clone()),
        context: b.add_text_field("context", text),
    };
    (b.build(), fields)
}

/// The analyzer for every text field: words, lower-cased, accents folded, English stop
/// words dropped, stemmed (through a cache of the stems: [`crate::stem`]).
pub fn analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(RemoveLongFilter::limit(40))
        .filter(crate::stem::CachedNormalizer::english())
        .build()
}

/// What an open index needs before it can serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexState {
    /// It holds every write up to this sequence number.
    UpTo(u64),
    /// It must be rebuilt from sled, for this reason.
    Rebuild(String),
}

struct WriterState {
    /// Taken only when the index is dropped, to wait for its merges.
    writer: Option<IndexWriter>,
    /// Documents written since the last commit, so that similarity on add can see them.
    pending: Vec<Ulid>,
    /// The highest sequence number handed to the writer.
    applied_seq: u64,
}

/// The derived full-text index of the memory.
pub struct TextIndex {
    dir: PathBuf,
    index: Index,
    reader: IndexReader,
    fields: Fields,
    kinds: Kinds,
    writer: Mutex<WriterState>,
    dirty: AtomicBool,
    /// A rebuild is under way: its writes are shown at its end, and searches meanwhile
    /// read the last commit without waiting for the writer it holds.
    rebuilding: AtomicBool,
    /// Milliseconds since `epoch` at the last write, for the idle commit.
    last_write_ms: AtomicU64,
    /// Milliseconds since `epoch` before which the idle commit waits: an import's next
    /// part is expected ([`TextIndex::expect_more_writes`]).
    more_writes_until_ms: AtomicU64,
    epoch: Instant,
    /// Held while this index merges its segments ([`TextIndex::merge_segments`], the
    /// idle merge): two merges of the same segments side by side, one after a rebuild (or
    /// an import) and one when writes paused, left the files of the one that ended second
    /// behind. Shared, for the idle merge to hold it
    /// without the index.
    merging: Arc<Mutex<()>>,
    /// Each segment's `id_hi` and `id_lo` columns, opened once ([`TextIndex::hits`]):
    /// opening them read their headers at every search. Those of segments gone are let go
    /// (they hold the segment's files) once a search reads fewer segments than they are.
    id_columns: Mutex<HashMap<SegmentId, IdColumns>>,
    tuning: SearchTuning,
}

/// A segment's `id_hi` and `id_lo` columns.
type IdColumns = (Column<u64>, Column<u64>);

/// One hit of a search: the document id and its raw BM25 score.
#[derive(Debug, Clone)]
pub struct Hit {
    pub id: Ulid,
    pub score: f32,
    /// Where it is in the index (for [`TextIndex::terms_present`]).
    pub doc: DocAddress,
}

/// A query ready to run: weighted analysed terms and filters.
pub struct SearchPlan {
    query: Box<dyn Query>,
    /// The query's alternatives when it is their union alone (no filter, nothing
    /// required), for [`TextIndex::top`]'s MaxScore.
    union: Option<Vec<maxscore::Clause>>,
    /// A narrowed plan's words when no filter applies, for [`TextIndex::top`].
    narrowed: Option<Narrowed>,
}

/// Words every hit holds, and optional words that add to its score. The top hits are the
/// best of the required words' own ([`Required`]) and, with optional words, of the
/// documents holding one ([`maxscore::WithOptional`]): a document holding none of the optional
/// words scores by the required ones alone, so it is among their top hits if among the
/// plan's. tantivy's scorer of the plan reads every document holding the required words.
struct Narrowed {
    required_only: Box<dyn Query>,
    required: Vec<Vec<maxscore::Clause>>,
    optional: Vec<maxscore::Clause>,
}

/// A search's top hits ([`TextIndex::top_search`]): prepared once, then searched a
/// segment at a time, the largest first, by each thread that calls [`Self::work`], and
/// merged by [`Self::hits`]. Each segment's own top hits are found apart (the union of
/// theirs holds the index's).
pub struct TopSearch<'s> {
    index: &'s TextIndex,
    searcher: &'s Searcher,
    how: SegmentSearch,
    k: usize,
    /// The segments' ordinals, the most documents first.
    order: Vec<u32>,
    /// The next of `order` to search.
    next: AtomicUsize,
    /// The highest `k`-th score of the segments, as they are searched.
    floor: maxscore::Floor,
    found: Mutex<Vec<tantivy::Result<maxscore::Top>>>,
}

/// How a [`TopSearch`] searches a segment.
enum SegmentSearch {
    /// tantivy's top documents, pruned with block-max WAND.
    Tantivy(Box<dyn Weight>),
    /// MaxScore over a union of terms.
    Union(maxscore::Union),
    /// Words all required ([`Narrowed`]).
    Required(Required),
    /// The best of the required words' own top hits and of the documents holding an optional
    /// word ([`Narrowed`]).
    WithOptional(Required, maxscore::WithOptional),
}

/// The top hits of words all required, in a segment: [`maxscore::Intersection`]'s where a
/// word has two lists there (in the documents' words and their contexts), else tantivy's
/// intersection of single terms, pruned block by block. Documents that all have a context
/// made tantivy's intersection read both lists of each word in full (`cargo bench --bench
/// scale`).
struct Required {
    each: Option<maxscore::Intersection>,
    weight: Box<dyn Weight>,
}

impl TopSearch<'_> {
    /// Searches the segments no thread has taken, one at a time, until none is left.
    pub fn work(&self) {
        loop {
            let next = self.next.fetch_add(1, Ordering::Relaxed);
            let Some(&ord) = self.order.get(next) else {
                return;
            };
            let found = self.segment(ord, self.searcher.segment_reader(ord));
            self.found
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(found);
        }
    }

    /// [`Self::work`] on this thread and, on an index of [`HALVES_FROM`] documents or more
    /// with two segments or more ([`SearchTuning::parted_from`]), on a second one too
    /// (`cargo bench --bench scale`). Below, starting a thread costs more than it saves; on
    /// one core, it saves nothing. A thread that cannot start leaves its share to this one.
    pub fn work_parted(&self) {
        let documents: u64 = self
            .searcher
            .segment_readers()
            .iter()
            .map(|r| u64::from(r.max_doc()))
            .sum();
        match helpers() {
            Some(helpers)
                if self.order.len() >= 2
                    && documents >= self.index.tuning.parted_from
                    && helpers.current_thread_index().is_none() =>
            {
                // Waited for spinning, not on the scope's end: a thread put to sleep there
                // until the helper is done wakes late (`stages`).
                let done = Flag::default();
                helpers.in_place_scope(|scope| {
                    scope.spawn(|_| {
                        let _done = done.raise_on_drop();
                        self.work();
                    });
                    self.work();
                    done.wait();
                });
            }
            _ => self.work(),
        }
    }

    fn segment(&self, ord: u32, reader: &SegmentReader) -> tantivy::Result<maxscore::Top> {
        let want = maxscore::HitLimits {
            k: self.k,
            floor: Some(&self.floor),
        };
        // tantivy's pruned search (block-max WAND, or its block-max intersection), its
        // threshold the floor as the segments raise it.
        let by_tantivy = |weight: &dyn Weight| {
            let mut best = maxscore::BestHits::new(want);
            let alive = reader.alive_bitset();
            weight.for_each_pruning(best.threshold(), reader, &mut |doc, score| {
                if alive.is_none_or(|a| a.is_alive(doc)) {
                    best.offer(score, DocAddress::new(ord, doc));
                }
                best.threshold()
            })?;
            Ok(best.into_sorted())
        };
        let required = |r: &Required| {
            let each = r.each.as_ref().map(|each| each.segment(ord, reader, want));
            match each.transpose()?.flatten() {
                Some(top) => Ok(top),
                None => by_tantivy(r.weight.as_ref()),
            }
        };
        match &self.how {
            SegmentSearch::Tantivy(weight) => by_tantivy(weight.as_ref()),
            SegmentSearch::Union(union) => union.segment(ord, reader, want),
            SegmentSearch::Required(r) => required(r),
            SegmentSearch::WithOptional(r, optional) => Ok(maxscore::merge(
                [required(r)?, optional.segment(ord, reader, want)?],
                self.k,
            )),
        }
    }

    /// The top hits, once every thread that worked on them is done; the segments none
    /// took are searched on this one.
    pub fn hits(&self) -> tantivy::Result<Vec<Hit>> {
        // The segments no thread took, if any.
        self.work();
        let found = std::mem::take(&mut *self.found.lock().unwrap_or_else(|p| p.into_inner()));
        let found: Vec<_> = found.into_iter().collect::<tantivy::Result<_>>()?;
        let top = maxscore::merge(found, self.k);
        self.index.hits(self.searcher, top)
    }
}

/// The ordinals of `searcher`'s segments, the most documents first: the order threads take
/// a search's segments in, so that the largest are not left to the end.
pub fn largest_first(searcher: &Searcher) -> Vec<u32> {
    let readers = searcher.segment_readers();
    let mut order: Vec<u32> = (0..readers.len() as u32).collect();
    order.sort_by_key(|&ord| std::cmp::Reverse(readers[ord as usize].max_doc()));
    order
}

/// A flag raised while this lives, lowered when it is dropped: on a panic too, or the
/// index would skip its commits for good ([`TextIndex::commit`]).
struct Raised<'a>(&'a AtomicBool);

impl<'a> Raised<'a> {
    fn new(flag: &'a AtomicBool) -> Raised<'a> {
        flag.store(true, Ordering::Release);
        Raised(flag)
    }
}

impl Drop for Raised<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// How a search spreads its work over threads, set when the index opens. The default is
/// what production runs; a search on a small base takes the one-thread paths, so the unit
/// tests open with [`SearchTuning::every_path`] to run the paths of a large base too.
#[derive(Debug, Clone, Copy)]
pub struct SearchTuning {
    /// An index of this many documents or more is searched on two threads
    /// ([`TopSearch::work_parted`]).
    pub parted_from: u64,
    /// A hybrid search reads the vectors with a thread beside whatever their number, not
    /// only when the table is large ([`crate::vectors::VectorIndex::is_large`]).
    pub vectors_always_beside: bool,
}

impl Default for SearchTuning {
    fn default() -> SearchTuning {
        SearchTuning {
            parted_from: HALVES_FROM,
            vectors_always_beside: false,
        }
    }
}

impl SearchTuning {
    /// Every index parted and every table searched with a thread beside, so that what the
    /// threads share is held to what one thread finds.
    #[cfg(any(test, feature = "testing"))]
    pub fn every_path() -> SearchTuning {
        SearchTuning {
            parted_from: 0,
            vectors_always_beside: true,
        }
    }
}

/// The threads that take a search's work beside the thread that searches
/// ([`TopSearch::work_parted`], and hybrid search's vectors), kept for the process: one
/// fewer than the cores (as many as the cores left an idle one spinning on a core the
/// search needed); `None` on one core (a second thread saves nothing) or when they cannot
/// start. A thread kept waiting takes its share sooner than one started for each search,
/// which at times began only once the search's own thread was done: the slowest searches
/// are the faster for it (`cargo bench --bench scale`, docs/benchmarks.md).
pub fn helpers() -> Option<&'static rayon::ThreadPool> {
    static HELPERS: std::sync::OnceLock<Option<rayon::ThreadPool>> = std::sync::OnceLock::new();
    HELPERS
        .get_or_init(|| {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            if cores < 2 {
                return None;
            }
            rayon::ThreadPoolBuilder::new()
                .num_threads(cores - 1)
                .thread_name(|i| format!("tandem-search-{i}"))
                .build()
                .inspect_err(|e| {
                    tracing::warn!("no search helper threads ({e}); searches run on one")
                })
                .ok()
        })
        .as_ref()
}

impl TextIndex {
    /// Opens the index in `dir`, creating it when missing and recreating it when it cannot
    /// be read. The returned state says whether it must be rebuilt or caught up.
    pub fn open(
        dir: &Path,
        kinds: Kinds,
        tuning: SearchTuning,
    ) -> Result<(Arc<TextIndex>, IndexState), tantivy::TantivyError> {
        let (schema, fields) = schema();
        let (index, state) = match open_existing(dir, &schema) {
            Ok(Some((index, seq))) => (index, IndexState::UpTo(seq)),
            Ok(None) => (
                create_fresh(dir, &schema)?,
                IndexState::Rebuild("the index is missing".into()),
            ),
            Err(reason) => {
                tracing::warn!("search index at {} unusable: {reason}", dir.display());
                (create_fresh(dir, &schema)?, IndexState::Rebuild(reason))
            }
        };
        index.tokenizers().register(ANALYZER, analyzer());
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()?;
        let writer: IndexWriter = index.writer_with_num_threads(1, WRITER_MEMORY)?;
        // Files no segment holds, which a process left: tantivy deletes them after a
        // commit or a merge, but not after a merge that failed (its segments gone).
        if let Err(e) = writer.garbage_collect_files().wait() {
            tracing::warn!("deleting the search index's unused files failed: {e}");
        }
        let mut small_only = LogMergePolicy::default();
        small_only.set_max_docs_before_merge(SMALL_SEGMENT);
        writer.set_merge_policy(Box::new(small_only));
        let applied_seq = match state {
            IndexState::UpTo(seq) => seq,
            IndexState::Rebuild(_) => 0,
        };
        let this = Arc::new(TextIndex {
            dir: dir.to_path_buf(),
            index,
            reader,
            fields,
            kinds,
            writer: Mutex::new(WriterState {
                writer: Some(writer),
                pending: Vec::new(),
                applied_seq,
            }),
            dirty: AtomicBool::new(false),
            rebuilding: AtomicBool::new(false),
            last_write_ms: AtomicU64::new(0),
            more_writes_until_ms: AtomicU64::new(0),
            epoch: Instant::now(),
            merging: Arc::default(),
            id_columns: Mutex::default(),
            tuning,
        });
        spawn_idle_committer(Arc::downgrade(&this));
        Ok((this, state))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn tuning(&self) -> SearchTuning {
        self.tuning
    }

    fn lock(&self) -> MutexGuard<'_, WriterState> {
        // A panic while holding the writer leaves nothing half-done that sled does not
        // hold: the next commit or rebuild repairs the index.
        self.writer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds or replaces a document's document. Visible to readers after the next commit,
    /// which any read forces.
    pub fn upsert(&self, document: &impl AsDocument) -> tantivy::Result<()> {
        let mut w = self.lock();
        self.write_doc(&mut w, &document.as_document(), true)?;
        if w.pending.len() >= MAX_PENDING {
            self.commit_locked(&mut w)?;
        }
        Ok(())
    }

    /// Adds or replaces many documents, not committed: the indexing threads work on them
    /// while the caller goes on (an import writes its next part), and [`Self::commit`]
    /// makes them visible. Each document comes with whether the index may hold it already:
    /// one its owner did not hold is not (the index is never ahead of its owner, and a
    /// document is never removed but to be replaced), and asking tantivy to delete it
    /// costs a delete at the commit too.
    pub fn write_batch<D: AsDocument>(
        &self,
        documents: impl IntoIterator<Item = (D, bool)>,
    ) -> tantivy::Result<()> {
        let mut w = self.lock();
        for (document, may_be_indexed) in documents {
            self.write_doc(&mut w, &document.as_document(), may_be_indexed)?;
            if w.pending.len() >= BULK_SEGMENT {
                self.commit_locked(&mut w)?;
            }
        }
        Ok(())
    }

    fn write_doc(
        &self,
        w: &mut WriterState,
        document: &Document,
        may_be_indexed: bool,
    ) -> tantivy::Result<()> {
        let f = &self.fields;
        let id = document.id.to_string();
        if may_be_indexed {
            w.tantivy().delete_term(Term::from_field_text(f.id, &id));
        }
        let (hi, lo) = ((document.id.0 >> 64) as u64, document.id.0 as u64);
        let mut doc = doc!(
            f.id => id,
            f.id_hi => hi,
            f.id_lo => lo,
            f.kind => self.kinds.name(document.kind),
            f.words => document.body,
        );
        for _ in 0..TITLE_REPEATS {
            doc.add_text(f.words, document.title);
        }
        let tags = document.tags.join(" ");
        for _ in 0..TAGS_REPEATS {
            doc.add_text(f.words, &tags);
        }
        if let Some(group) = document.group {
            doc.add_text(f.group, group_key(group));
        }
        if let Some(context) = document.context {
            doc.add_text(f.context, context);
        }
        w.tantivy().add_document(doc)?;
        w.pending.push(document.id);
        w.applied_seq = w.applied_seq.max(document.seq);
        self.dirty.store(true, Ordering::Release);
        self.last_write_ms
            .store(self.epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Rebuilds from scratch: every document is dropped and `documents` indexed, then
    /// committed. `progress(done)` is called as it goes. Searches meanwhile read the index
    /// as it was, without waiting ([`Self::commit`]).
    pub fn rebuild<D: AsDocument, E: From<tantivy::TantivyError>>(
        &self,
        documents: impl Iterator<Item = Result<D, E>>,
        seq: u64,
        progress: impl FnMut(u64),
    ) -> Result<u64, E> {
        let mut w = self.lock();
        // The writes made before, committed, are what searches read until the end: no
        // other write comes meanwhile, as this one holds the writer.
        self.commit_locked(&mut w)?;
        let _rebuilding = Raised::new(&self.rebuilding);
        self.rebuild_locked(&mut w, documents, seq, progress)
    }

    fn rebuild_locked<D: AsDocument, E: From<tantivy::TantivyError>>(
        &self,
        w: &mut WriterState,
        documents: impl Iterator<Item = Result<D, E>>,
        seq: u64,
        mut progress: impl FnMut(u64),
    ) -> Result<u64, E> {
        w.tantivy().delete_all_documents()?;
        w.pending.clear();
        let mut n = 0u64;
        for document in documents {
            let document = document?;
            // Every document was dropped, and each comes once.
            self.write_doc(w, &document.as_document(), false)?;
            w.pending.clear();
            n += 1;
            if n.is_multiple_of(1000) {
                progress(n);
            }
            // A segment of its own, which searches do not see before the rebuild's end:
            // they read the index as it was (its files stay while a searcher holds them).
            // A rebuild cut short leaves fewer documents than its owner holds, which the
            // next open rebuilds again.
            if n.is_multiple_of(BULK_SEGMENT as u64) {
                commit_writer(w)?;
            }
        }
        w.applied_seq = seq;
        self.dirty.store(true, Ordering::Release);
        self.commit_locked(w)?;
        progress(n);
        Ok(n)
    }

    /// More writes of the same import follow: the idle commit waits for them, up to
    /// [`NEXT_PART_WAIT`], rather than cutting a segment in the pause between two parts. A
    /// million documents come in 200 parts: committed in each pause, they made as many
    /// segments, merged level by level as they came (a fifth of the import's time), then
    /// again all together. A read still commits at once.
    pub fn expect_more_writes(&self) {
        let until = self.epoch.elapsed() + NEXT_PART_WAIT;
        self.more_writes_until_ms
            .store(until.as_millis() as u64, Ordering::Relaxed);
    }

    /// Commits pending writes, if any, and makes them visible to searches. During a
    /// rebuild, the only writes pending are the rebuild's own, shown at its end: nothing
    /// to commit, and a search does not wait for the writer the rebuild holds.
    pub fn commit(&self) -> tantivy::Result<()> {
        if !self.dirty.load(Ordering::Acquire) || self.rebuilding.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut w = self.lock();
        self.commit_locked(&mut w)
    }

    fn commit_locked(&self, w: &mut WriterState) -> tantivy::Result<()> {
        if !self.dirty.load(Ordering::Acquire) {
            return Ok(());
        }
        commit_writer(w)?;
        self.reader.reload()?;
        w.pending.clear();
        self.dirty.store(false, Ordering::Release);
        Ok(())
    }

    /// How many segments the committed index has.
    pub fn segment_count(&self) -> usize {
        self.reader.searcher().segment_readers().len()
    }

    /// Merges the committed segments [`idle_merge`] picks, and waits for it: a search
    /// opens each segment's postings and scores each apart, so fewer segments search
    /// faster (`cargo bench --bench scale`). Writes go on
    /// meanwhile (into new segments). Returns how many segments were merged (0: nothing
    /// to merge).
    pub fn merge_segments(&self) -> tantivy::Result<usize> {
        let _one = self.merging.lock().unwrap_or_else(|p| p.into_inner());
        let Some((merged, merging)) = self.start_merge()? else {
            return Ok(0);
        };
        wait_all(merging)?;
        self.reload()?;
        Ok(merged)
    }

    /// Starts the merges of [`Self::merge_segments`]: how many segments they merge, and
    /// the merges to wait for (they run on tantivy's merge threads, side by side), then
    /// [`Self::reload`].
    fn start_merge(&self) -> tantivy::Result<Option<(usize, Vec<MergeRunning>)>> {
        // The segments as they are once no rebuild holds the writer.
        let mut w = self.lock();
        let metas = self.index.searchable_segment_metas()?;
        let merges: Vec<Vec<SegmentId>> = idle_merge(
            &metas
                .iter()
                .map(|m| (m.id(), m.num_docs()))
                .collect::<Vec<_>>(),
        );
        if merges.is_empty() {
            return Ok(None);
        }
        let merged = merges.iter().map(Vec::len).sum();
        let running = merges.iter().map(|ids| w.tantivy().merge(ids)).collect();
        Ok(Some((merged, running)))
    }

    /// Makes searchers see the last commit or merge.
    fn reload(&self) -> tantivy::Result<()> {
        self.reader.reload()
    }

    /// A searcher that sees every write made so far.
    pub fn fresh_searcher(&self) -> tantivy::Result<Searcher> {
        self.commit()?;
        Ok(self.reader.searcher())
    }

    /// Ids written but not yet committed (visible to [`Self::fresh_searcher`] only after
    /// its commit). Similarity on add reads them straight from sled instead of committing.
    pub fn pending(&self) -> Vec<Ulid> {
        self.lock().pending.clone()
    }

    /// A searcher over the last commit, and the ids written since ([`Self::pending`]), for
    /// similarity on add. More than [`MAX_PENDING`] of them (an import's parts, between
    /// which the index waits to commit: a million at most) are committed first, and found
    /// through BM25 like the rest, where an add would have read and scored each of them.
    pub fn committed_and_pending(&self) -> tantivy::Result<(Searcher, Vec<Ulid>)> {
        let mut w = self.lock();
        if w.pending.len() > MAX_PENDING {
            self.commit_locked(&mut w)?;
        }
        Ok((self.reader.searcher(), w.pending.clone()))
    }

    /// A searcher over the last commit, without forcing one.
    pub fn committed_searcher(&self) -> Searcher {
        self.reader.searcher()
    }

    pub fn applied_seq(&self) -> u64 {
        self.lock().applied_seq
    }

    /// Analyses `text` into index terms, in order, with repeats.
    pub fn terms(&self, text: &str) -> Vec<String> {
        self.terms_with_words(text)
            .into_iter()
            .map(|(t, _)| t)
            .collect()
    }

    /// Which of `terms` (analysed) each of `docs` holds in its words or its context, one
    /// flag a term: a document's coverage of a query, read from the postings, without
    /// reading or analysing the document's text.
    pub fn terms_present(
        &self,
        searcher: &Searcher,
        docs: &[DocAddress],
        terms: &[&str],
    ) -> tantivy::Result<Vec<Vec<bool>>> {
        let mut present = vec![vec![false; terms.len()]; docs.len()];
        // A posting list is read forward only: the docs of a segment in order.
        let mut order: Vec<usize> = (0..docs.len()).collect();
        order.sort_unstable_by_key(|&i| docs[i]);
        for segment in order.chunk_by(|&a, &b| docs[a].segment_ord == docs[b].segment_ord) {
            let reader = searcher.segment_reader(docs[segment[0]].segment_ord);
            for field in [self.fields.words, self.fields.context] {
                let inverted = reader.inverted_index(field)?;
                for (t, term) in terms.iter().enumerate() {
                    let term = Term::from_field_text(field, term);
                    let Some(mut postings) =
                        inverted.read_postings(&term, IndexRecordOption::Basic)?
                    else {
                        continue;
                    };
                    for &i in segment {
                        let doc = docs[i].doc_id;
                        let at = if postings.doc() < doc {
                            postings.seek(doc)
                        } else {
                            postings.doc()
                        };
                        present[i][t] |= at == doc;
                    }
                }
            }
        }
        Ok(present)
    }

    /// Which of `ids` have a live document in the segment `ord`, and where (a document
    /// has one live document in the index: the others, written before, are deleted).
    pub fn docs_in_segment(
        &self,
        searcher: &Searcher,
        ord: u32,
        ids: &[Ulid],
    ) -> tantivy::Result<Vec<(Ulid, DocAddress)>> {
        let reader = searcher.segment_reader(ord);
        let inverted = reader.inverted_index(self.fields.id)?;
        let mut found = Vec::new();
        for id in ids {
            let term = Term::from_field_text(self.fields.id, &id.to_string());
            let Some(mut postings) = inverted.read_postings(&term, IndexRecordOption::Basic)?
            else {
                continue;
            };
            let mut doc = postings.doc();
            while doc != TERMINATED {
                if !reader.is_deleted(doc) {
                    found.push((*id, DocAddress::new(ord, doc)));
                    break;
                }
                doc = postings.advance();
            }
        }
        Ok(found)
    }

    /// Analyses `text` into `(term, the word as written)` pairs: terms are stemmed, and
    /// what a person reads is the word.
    pub fn terms_with_words<'t>(&self, text: &'t str) -> Vec<(String, &'t str)> {
        let mut analyzer = self
            .index
            .tokenizers()
            .get(ANALYZER)
            .expect("the analyzer is registered at open");
        let mut stream = analyzer.token_stream(text);
        let mut out = Vec::new();
        while let Some(token) = stream.next() {
            let word = text.get(token.offset_from..token.offset_to).unwrap_or("");
            out.push((token.text.clone(), word));
        }
        out
    }

    /// Builds the BM25 query: each `(term, weight)` searched in the document's words and, at
    /// [`CONTEXT_BOOST`], in its context, all as alternatives; filters are required.
    pub fn plan(
        &self,
        terms: &[(String, f32)],
        kind: Option<Kind>,
        group: Option<&str>,
    ) -> SearchPlan {
        self.plan_in(true, terms, kind, group)
    }

    /// `terms` without those more than [`UBIQUITOUS_SHARE`] of the documents hold, once
    /// the index holds [`COMMON_FROM_DOCS`] documents, when a word of the query (weight 1 or
    /// more) is left; else all of them. Block-max WAND reads a ubiquitous word's postings
    /// at every document holding a distinctive one, for a score it barely moves (`cargo bench
    /// --bench scale` shows what leaving them out saves). Coverage, the total and
    /// the snippets still count it.
    pub fn without_ubiquitous(
        &self,
        searcher: &Searcher,
        terms: &[(String, f32)],
    ) -> Vec<(String, f32)> {
        let Some(ubiquitous_at) = share_of_large(searcher, UBIQUITOUS_SHARE) else {
            return terms.to_vec();
        };
        let kept: Vec<(String, f32)> = terms
            .iter()
            .filter(|(t, _)| self.doc_freq(searcher, t) <= ubiquitous_at)
            .cloned()
            .collect();
        if kept.iter().any(|(_, w)| *w >= 1.0) {
            kept
        } else {
            terms.to_vec()
        }
    }

    /// The postings a search's context may add to its query, on an index of
    /// [`COMMON_FROM_DOCS`] documents or more: [`COMMON_SHARE`] of its documents (its words
    /// taken rarest first while they fit). `None` below: no bound.
    pub fn context_postings(&self, searcher: &Searcher) -> Option<u64> {
        share_of_large(searcher, COMMON_SHARE)
    }

    /// A plan for "documents like this one": the document's own words only (not the
    /// conversation context), no filters.
    pub fn plan_similar(&self, terms: &[(String, f32)]) -> SearchPlan {
        self.plan_in(false, terms, None, None)
    }

    /// [`Self::plan`] narrowed to the documents holding every word of the query when all of
    /// them are common, once the index holds [`COMMON_FROM_DOCS`] documents: a word of the
    /// query (weight 1 or more) in more than [`COMMON_SHARE`] of them is common. The
    /// context's words only add to the score, and the scores are the plan's own: only the
    /// documents missing one of the words are left out, which rank below those that hold them
    /// all. Block-max WAND cannot skip the postings of words that most documents hold, so the
    /// full plan would score most of them; this reads the intersection of their postings.
    /// With a distinctive word in the query, WAND skips well (a document without it cannot
    /// reach the top hits' scores) and the full plan is the faster: narrowed to the documents
    /// holding one, every one of those was scored (`cargo bench --bench scale`). `None`
    /// when nothing narrows: a small index, a distinctive word, or a single word.
    pub fn plan_narrowed(
        &self,
        searcher: &Searcher,
        terms: &[(String, f32)],
        kind: Option<Kind>,
        group: Option<&str>,
    ) -> Option<SearchPlan> {
        let common_at = share_of_large(searcher, COMMON_SHARE)?;
        let (own, context): (Vec<_>, Vec<_>) = terms.iter().partition(|(_, w)| *w >= 1.0);
        if own.len() < 2
            || own
                .iter()
                .any(|(t, _)| self.doc_freq(searcher, t) <= common_at)
        {
            return None;
        }
        // Each word of its own in either field.
        let required: Vec<Vec<maxscore::Clause>> = own
            .iter()
            .map(|(term, weight)| self.clauses(true, term, *weight).collect())
            .collect();
        let mut clauses = maxscore::each_required(&required);
        clauses.extend(
            context
                .iter()
                .flat_map(|(t, w)| self.term_clauses(true, t, *w)),
        );
        let mut plan = self.filtered(BooleanQuery::new(clauses), kind, group);
        if kind.is_none() && group.is_none() {
            plan.narrowed = Some(Narrowed {
                required_only: Box::new(BooleanQuery::new(maxscore::each_required(&required))),
                required,
                optional: context
                    .iter()
                    .flat_map(|(term, weight)| self.clauses(true, term, *weight))
                    .collect(),
            });
        }
        Some(plan)
    }

    /// A term's clauses, alternatives of a query: in the document's words and, `with_context`,
    /// in its context at [`CONTEXT_BOOST`].
    fn term_clauses(
        &self,
        with_context: bool,
        term: &str,
        weight: f32,
    ) -> impl Iterator<Item = (Occur, Box<dyn Query>)> {
        self.clauses(with_context, term, weight)
            .map(|c| (Occur::Should, c.query()))
    }

    /// [`Self::term_clauses`] as MaxScore reads them.
    fn clauses(
        &self,
        with_context: bool,
        term: &str,
        weight: f32,
    ) -> impl Iterator<Item = maxscore::Clause> {
        let f = &self.fields;
        let fields = [(f.words, 1.0), (f.context, CONTEXT_BOOST)];
        let term = term.to_string();
        fields
            .into_iter()
            .take(if with_context { 2 } else { 1 })
            .map(move |(field, boost)| maxscore::Clause {
                field,
                term: term.clone(),
                boost: boost * weight,
            })
    }

    fn plan_in(
        &self,
        with_context: bool,
        terms: &[(String, f32)],
        kind: Option<Kind>,
        group: Option<&str>,
    ) -> SearchPlan {
        let should = terms
            .iter()
            .flat_map(|(term, weight)| self.term_clauses(with_context, term, *weight))
            .collect();
        let mut plan = self.filtered(BooleanQuery::new(should), kind, group);
        if kind.is_none() && group.is_none() {
            plan.union = Some(
                terms
                    .iter()
                    .flat_map(|(term, weight)| self.clauses(with_context, term, *weight))
                    .collect(),
            );
        }
        plan
    }

    /// `text` with the filters required.
    fn filtered(&self, text: BooleanQuery, kind: Option<Kind>, group: Option<&str>) -> SearchPlan {
        let f = &self.fields;
        if kind.is_none() && group.is_none() {
            // Unwrapped, a pure disjunction lets tantivy prune with block-max WAND.
            return SearchPlan {
                query: Box::new(text),
                union: None,
                narrowed: None,
            };
        }
        let mut must: Vec<(Occur, Box<dyn Query>)> = vec![(Occur::Must, Box::new(text))];
        if let Some(t) = kind {
            must.push((
                Occur::Must,
                Box::new(TermQuery::new(
                    Term::from_field_text(f.kind, self.kinds.name(t)),
                    IndexRecordOption::Basic,
                )),
            ));
        }
        if let Some(p) = group {
            must.push((
                Occur::Must,
                Box::new(TermQuery::new(
                    Term::from_field_text(f.group, &group_key(p)),
                    IndexRecordOption::Basic,
                )),
            ));
        }
        SearchPlan {
            query: Box::new(BooleanQuery::new(must)),
            union: None,
            narrowed: None,
        }
    }

    /// The number of documents a plan matches, for a search's `total`: exact up to
    /// [`TOTAL_EXACT_UP_TO`]; beyond, an estimate. Asked apart from the top hits: together,
    /// every match is scored; alone, the top hits skip the postings that cannot rank
    /// (block-max WAND) and the count scores nothing.
    pub fn total(&self, searcher: &Searcher, plan: &SearchPlan) -> tantivy::Result<u64> {
        self.total_up_to(searcher, plan, TOTAL_EXACT_UP_TO)
    }

    /// The matches are counted in the index's order until `exact_up_to` are found; the
    /// count is then scaled by the share of the index read to find them, and rounded to two
    /// significant figures, so that it reads as the estimate it is (never below
    /// `exact_up_to`). An exact count of a million documents' common words decoded every
    /// posting of each, the largest part of a search (`cargo bench --bench scale`).
    fn total_up_to(
        &self,
        searcher: &Searcher,
        plan: &SearchPlan,
        exact_up_to: u64,
    ) -> tantivy::Result<u64> {
        let weight = plan
            .query
            .weight(EnableScoring::disabled_from_searcher(searcher))?;
        let (mut found, mut read) = (0u64, 0u64);
        for reader in searcher.segment_readers() {
            let mut matches = weight.scorer(reader, 1.0)?;
            let alive = reader.alive_bitset();
            let mut doc = matches.doc();
            while doc != TERMINATED {
                if alive.is_none_or(|a| a.is_alive(doc)) {
                    found += 1;
                    if found == exact_up_to {
                        read += u64::from(doc) + 1;
                        let all: u64 = searcher
                            .segment_readers()
                            .iter()
                            .map(|r| u64::from(r.max_doc()))
                            .sum();
                        let estimate = found as f64 * all as f64 / read as f64;
                        return Ok(two_figures(estimate).max(exact_up_to));
                    }
                }
                doc = matches.advance();
            }
            read += u64::from(reader.max_doc());
        }
        Ok(found)
    }

    /// The top `limit` hits only: no total, so the search can skip what cannot rank. On a
    /// large index, its segments side by side ([`TopSearch::work_parted`]).
    pub fn top(
        &self,
        searcher: &Searcher,
        plan: &SearchPlan,
        limit: usize,
    ) -> tantivy::Result<Vec<Hit>> {
        let search = self.top_search(searcher, plan, limit)?;
        search.work_parted();
        search.hits()
    }

    /// [`Self::top`] prepared, its segments searched by whichever threads
    /// [`TopSearch::work`]. A union of two words or more on a large index
    /// ([`COMMON_FROM_DOCS`]) is read by MaxScore (`maxscore.rs`), which finds the hits
    /// tantivy's `TopDocs` would.
    pub fn top_search<'s>(
        &'s self,
        searcher: &'s Searcher,
        plan: &SearchPlan,
        limit: usize,
    ) -> tantivy::Result<TopSearch<'s>> {
        let weight =
            |query: &dyn Query| query.weight(EnableScoring::enabled_from_searcher(searcher));
        let large = searcher.num_docs() >= COMMON_FROM_DOCS;
        let union = match &plan.union {
            Some(union) if large => maxscore::Union::new(searcher, union)?,
            _ => None,
        };
        let how = match (union, &plan.narrowed) {
            (Some(union), _) => SegmentSearch::Union(union),
            (None, Some(words)) if large => {
                let required = Required {
                    each: maxscore::Intersection::new(searcher, &words.required)?,
                    weight: weight(words.required_only.as_ref())?,
                };
                if words.optional.is_empty() {
                    SegmentSearch::Required(required)
                } else {
                    SegmentSearch::WithOptional(
                        required,
                        maxscore::WithOptional::new(searcher, &words.required, &words.optional)?,
                    )
                }
            }
            _ => SegmentSearch::Tantivy(weight(plan.query.as_ref())?),
        };
        let order = largest_first(searcher);
        Ok(TopSearch {
            index: self,
            searcher,
            how,
            k: limit.max(1),
            order,
            next: AtomicUsize::new(0),
            floor: maxscore::Floor::default(),
            found: Mutex::new(Vec::new()),
        })
    }

    /// The hits' document ids, from the `id_hi` and `id_lo` fast fields: each segment's two
    /// columns are opened once and kept ([`TextIndex::id_columns`]; opening one reads
    /// its block headers).
    fn hits(&self, searcher: &Searcher, top: Vec<(f32, DocAddress)>) -> tantivy::Result<Vec<Hit>> {
        let mut columns = self.id_columns.lock().unwrap_or_else(|p| p.into_inner());
        let readers = searcher.segment_readers();
        if columns.len() > readers.len() {
            columns.retain(|id, _| readers.iter().any(|r| r.segment_id() == *id));
        }
        let mut hits = Vec::with_capacity(top.len());
        for (score, addr) in top {
            let reader = searcher.segment_reader(addr.segment_ord);
            let (hi, lo) = match columns.entry(reader.segment_id()) {
                hash_map::Entry::Occupied(open) => open.into_mut(),
                hash_map::Entry::Vacant(slot) => {
                    let fast = reader.fast_fields();
                    slot.insert((fast.u64("id_hi")?, fast.u64("id_lo")?))
                }
            };
            if let Some((hi, lo)) = hi.first(addr.doc_id).zip(lo.first(addr.doc_id)) {
                let id = Ulid(((hi as u128) << 64) | lo as u128);
                hits.push(Hit {
                    id,
                    score,
                    doc: addr,
                });
            }
        }
        Ok(hits)
    }

    /// What makes a search's snippets: one generator for the document's words, one for its
    /// context.
    pub fn snippets(
        &self,
        searcher: &Searcher,
        plan: &SearchPlan,
        max_chars: usize,
    ) -> tantivy::Result<Snippets> {
        let generator = |field| -> tantivy::Result<SnippetGenerator> {
            let mut g = SnippetGenerator::create(searcher, &plan.query, field)?;
            g.set_max_num_chars(max_chars);
            Ok(g)
        };
        Ok(Snippets {
            words: generator(self.fields.words)?,
            context: generator(self.fields.context)?,
        })
    }

    /// The number of documents holding `term` in their words or, if more, in their
    /// context: the document frequency used for idf weights.
    pub fn doc_freq(&self, searcher: &Searcher, term: &str) -> u64 {
        [self.fields.words, self.fields.context]
            .into_iter()
            .map(|field| {
                searcher
                    .doc_freq(&Term::from_field_text(field, term))
                    .unwrap_or(0)
            })
            .max()
            .unwrap_or(0)
    }

    pub fn num_docs(&self, searcher: &Searcher) -> u64 {
        searcher.num_docs()
    }

    /// Disk space used by the index, in bytes.
    pub fn size_on_disk(&self) -> u64 {
        crate::files::dir_size(&self.dir)
    }
}

impl WriterState {
    fn tantivy(&mut self) -> &mut IndexWriter {
        self.writer
            .as_mut()
            .expect("the writer lives as long as the index")
    }
}

impl Drop for TextIndex {
    /// Commits, then waits for merges in flight: they write into the index's folder, and
    /// would go on writing there after the memory is closed (and its folder perhaps
    /// removed, which a merge's new files would bring back).
    fn drop(&mut self) {
        if let Err(e) = self.commit() {
            tracing::warn!("final commit of the search index failed: {e}");
        }
        let writer = self
            .writer
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .writer
            .take();
        if let Some(writer) = writer
            && let Err(e) = writer.wait_merging_threads()
        {
            tracing::warn!("waiting for the search index's merges failed: {e}");
        }
    }
}

/// A search's snippet generators ([`TextIndex::snippets`]).
pub struct Snippets {
    words: SnippetGenerator,
    context: SnippetGenerator,
}

impl Snippets {
    /// The best fragment of a document's texts: the one highlighting the most words, the
    /// first of `texts` on a tie; `None` when none highlights any.
    pub fn best(&self, texts: &[(TextField, &str)]) -> Option<(TextField, Snippet)> {
        let mut best: Option<(TextField, Snippet)> = None;
        for &(field, text) in texts {
            if text.is_empty() {
                continue;
            }
            let generator = match field {
                TextField::Context => &self.context,
                TextField::Title | TextField::Tags | TextField::Body => &self.words,
            };
            let s = generator.snippet(text);
            if s.is_empty() {
                continue;
            }
            let better = match &best {
                None => true,
                Some((_, b)) => s.highlighted().len() > b.highlighted().len(),
            };
            if better {
                best = Some((field, s));
            }
        }
        best
    }
}

/// `share` of the documents, on an index of [`COMMON_FROM_DOCS`] documents or more (`None`
/// below): a document frequency beyond which a word is common or ubiquitous, or the
/// postings a search's context may add.
fn share_of_large(searcher: &Searcher, share: f64) -> Option<u64> {
    let docs = searcher.num_docs();
    (docs >= COMMON_FROM_DOCS).then_some((docs as f64 * share) as u64)
}

fn open_existing(dir: &Path, schema: &Schema) -> Result<Option<(Index, u64)>, String> {
    if !dir.join("meta.json").exists() {
        return Ok(None);
    }
    let index = Index::open_in_dir(dir).map_err(|e| format!("cannot open: {e}"))?;
    if index.schema() != *schema {
        return Err("the index was built with another schema".into());
    }
    let metas = index
        .load_metas()
        .map_err(|e| format!("unreadable meta: {e}"))?;
    let payload = metas
        .payload
        .as_deref()
        .ok_or("the index has no commit payload")?;
    let payload: serde_json::Value =
        serde_json::from_str(payload).map_err(|e| format!("bad commit payload: {e}"))?;
    if payload["schema"].as_u64() != Some(SCHEMA_VERSION as u64) {
        return Err(format!(
            "the index has schema version {}, this binary uses {SCHEMA_VERSION}",
            payload["schema"]
        ));
    }
    let seq = payload["seq"]
        .as_u64()
        .ok_or("the commit payload has no seq")?;
    // Make sure the segments the meta names can be read.
    index
        .reader()
        .map_err(|e| format!("unreadable segments: {e}"))?;
    Ok(Some((index, seq)))
}

fn create_fresh(dir: &Path, schema: &Schema) -> tantivy::Result<Index> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    std::fs::create_dir_all(dir)?;
    Index::create_in_dir(dir, schema.clone())
}

/// Merges what [`idle_merge`] picks, once for each set of segments: `settled` is the last
/// set found with nothing to merge, or whose merge failed (say for want of disk), and is
/// not looked at again until the segments change. The index is not held while the merge
/// runs: a memory closed meanwhile closes its writer (and the directory's lock, so the
/// data dir opens again at once), which drops the merge.
fn merge_when_idle(weak: &Weak<TextIndex>, index: Arc<TextIndex>, settled: &mut Vec<SegmentId>) {
    let ids: Vec<SegmentId> = index
        .reader
        .searcher()
        .segment_readers()
        .iter()
        .map(|r| r.segment_id())
        .collect();
    if *settled == ids || index.rebuilding.load(Ordering::Acquire) {
        return;
    }
    // Another merge is under way: this one would merge the same segments.
    let merging = Arc::clone(&index.merging);
    let Ok(_one) = merging.try_lock() else {
        return;
    };
    let started = Instant::now();
    let merged = match index.start_merge() {
        Ok(None) => {
            *settled = ids;
            return;
        }
        Ok(Some((n, merging))) => {
            drop(index);
            wait_all(merging).map(|()| n)
        }
        Err(e) => Err(e),
    };
    let Some(index) = weak.upgrade() else { return };
    match merged.and_then(|n| index.reload().map(|()| n)) {
        Ok(n) => tracing::info!(
            "merged {n} of the search index's {} segments in {:.2} s",
            ids.len(),
            started.elapsed().as_secs_f64()
        ),
        Err(e) => {
            tracing::warn!("merging the search index's segments failed: {e}");
            *settled = ids;
        }
    }
}

/// Commits what the writer holds, with the sequence number it reached; searches see it
/// once the reader reloads.
fn commit_writer(w: &mut WriterState) -> tantivy::Result<()> {
    let payload = serde_json::json!({ "schema": SCHEMA_VERSION, "seq": w.applied_seq });
    let mut prepared = w.tantivy().prepare_commit()?;
    prepared.set_payload(&payload.to_string());
    prepared.commit()?;
    Ok(())
}

/// Waits for every merge, the first error once all have ended.
fn wait_all(merges: Vec<MergeRunning>) -> tantivy::Result<()> {
    let mut first_error = Ok(());
    for merging in merges {
        if let Err(e) = merging.wait() {
            first_error = first_error.and(Err(e));
        }
    }
    first_error
}

fn spawn_idle_committer(weak: Weak<TextIndex>) {
    let spawned = std::thread::Builder::new()
        .name("tandem-index-commit".into())
        .spawn(move || {
            // The segments last found with nothing to merge (or whose merge failed).
            let mut settled: Vec<SegmentId> = Vec::new();
            loop {
                std::thread::sleep(IDLE_COMMIT);
                let Some(index) = weak.upgrade() else { return };
                let idle = index.epoch.elapsed().as_millis() as u64
                    - index.last_write_ms.load(Ordering::Relaxed);
                if !index.dirty.load(Ordering::Acquire) {
                    if idle >= IDLE_MERGE.as_millis() as u64 && index.segment_count() >= 2 {
                        merge_when_idle(&weak, index, &mut settled);
                    }
                    continue;
                }
                let now = index.epoch.elapsed().as_millis() as u64;
                if idle >= IDLE_COMMIT.as_millis() as u64
                    && now >= index.more_writes_until_ms.load(Ordering::Relaxed)
                    && let Err(e) = index.commit()
                {
                    tracing::warn!("background commit of the search index failed: {e}");
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("no background index committer ({e}); reads will commit instead");
    }
}

/// `n` rounded to two significant figures: 183,442 is 180,000.
fn two_figures(n: f64) -> u64 {
    if n < 100.0 {
        return n.round() as u64;
    }
    let unit = 10f64.powi(n.log10().floor() as i32 - 1);
    ((n / unit).round() * unit) as u64
}

#[cfg(test)]
mod tests {
    use super::{MAX_PENDING, SearchTuning, TextIndex, idle_merge, maxscore, two_figures};
    use crate::test_docs::{BUG, Doc, KINDS, PATTERN, REFERENCE};

    #[test]
    fn postings_say_which_live_document_holds_which_terms() {
        let dir = tempfile::tempdir().unwrap();
        let (idx, _) = TextIndex::open(dir.path(), KINDS, SearchTuning::every_path()).unwrap();
        let mut first = Doc::new(
            BUG,
            "Safari rejects dates",
            "ISO strings fail to parse",
            vec!["browser".into()],
        );
        first.context = Some("the user was on a tablet".into());
        let second = Doc::new(
            PATTERN,
            "Retry with backoff",
            "wrap flaky network calls",
            vec![],
        );
        idx.write_batch([(&first, false), (&second, false)])
            .unwrap();
        idx.commit().unwrap();
        // The first document is written again in a later commit: its old document is
        // deleted, and only the new one is found.
        first.body = "ISO strings fail to parse, and timestamps too".into();
        idx.upsert(&first).unwrap();
        let searcher = idx.fresh_searcher().unwrap();
        let unknown = ulid::Ulid::new();
        let mut docs = std::collections::HashMap::new();
        for ord in 0..searcher.segment_readers().len() as u32 {
            for (id, doc) in idx
                .docs_in_segment(&searcher, ord, &[first.id, second.id, unknown])
                .unwrap()
            {
                assert!(docs.insert(id, doc).is_none(), "one live document: {id}");
            }
        }
        assert_eq!(docs.len(), 2, "the unknown id is left out: {docs:?}");
        let terms: Vec<String> = ["timestamps", "safari", "browser", "tablet", "network"]
            .iter()
            .map(|w| idx.terms(w).remove(0))
            .collect();
        let terms: Vec<&str> = terms.iter().map(String::as_str).collect();
        let present = idx
            .terms_present(&searcher, &[docs[&second.id], docs[&first.id]], &terms)
            .unwrap();
        // Content, title, tags and context count; the new text does, not the old.
        assert_eq!(present[1], [true, true, true, true, false]);
        assert_eq!(present[0], [false, false, false, false, true]);
    }

    /// A word nearly every document holds is left out of the scoring query while a word of
    /// the query remains, and kept when the query has no other; a small index keeps all.
    /// The top hits found a segment at a time on two threads are those of tantivy's
    /// `TopDocs` over the whole plan, each way a search is read: tantivy's own, MaxScore's
    /// union, and the required words beside optional ones; over segments holding documents
    /// replaced since (their old documents deleted).
    #[test]
    fn top_hits_found_segment_by_segment_are_topdocs_hits() {
        let dir = tempfile::tempdir().unwrap();
        let (idx, _) = TextIndex::open(dir.path(), KINDS, SearchTuning::every_path()).unwrap();
        let vocabulary = [
            "cache", "retry", "timeout", "auth", "token", "socket", "schema", "deploy", "kernel",
            "safari", "proxy", "render", "query", "thread", "index", "pool",
        ];
        let mut state = 11u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        // Zipf-like: the first words in most documents, the last in few.
        let mut word = move || {
            let r = (next() % 10_000) as f64 / 10_000.0;
            vocabulary[((16f64.powf(r) - 1.0) as usize).min(15)]
        };
        let mut words = |n: usize| (0..n).map(|_| word()).collect::<Vec<_>>().join(" ");
        let n = super::COMMON_FROM_DOCS as usize + 2_000;
        let mut documents: Vec<Doc> = (0..n)
            .map(|i| {
                let mut e = Doc::new(BUG, words(2), words(3 + i % 9), vec![]);
                if i % 3 == 0 {
                    e.context = Some(words(2));
                }
                e
            })
            .collect();
        for part in documents.chunks(n / 3 + 1) {
            idx.write_batch(part.iter().map(|e| (e, false))).unwrap();
            idx.commit().unwrap();
        }
        for e in documents.iter_mut().step_by(97) {
            e.body.push_str(" kernel safari");
            idx.upsert(e).unwrap();
        }
        let searcher = idx.fresh_searcher().unwrap();
        assert!(searcher.segment_readers().len() >= 4);
        let found = |plan: &super::SearchPlan, k| -> Vec<(f32, tantivy::DocAddress)> {
            let hits = idx.top(&searcher, plan, k).unwrap();
            hits.into_iter().map(|h| (h.score, h.doc)).collect()
        };
        let expected = |plan: &super::SearchPlan, k| {
            let top = tantivy::collector::TopDocs::with_limit(k).order_by_score();
            searcher.search(plan.query.as_ref(), &top).unwrap()
        };
        let (mut unions, mut narrowed, mut narrowed_with_context) = (0, 0, 0);
        for q in 0..80u64 {
            let k = 1 + (q % 10) as usize;
            let mut terms: Vec<(String, f32)> = idx
                .terms(&words(2 + (q % 2) as usize))
                .into_iter()
                .map(|t| (t, 1.0))
                .collect();
            if q % 4 == 0 {
                terms.extend(idx.terms(&words(1)).into_iter().map(|t| (t, 0.35)));
            }
            let plan = idx.plan(&terms, None, None);
            unions += usize::from(plan.union.is_some());
            maxscore::assert_same(q, &found(&plan, k), &expected(&plan, k));
            let filtered = idx.plan(&terms, Some(BUG), None);
            maxscore::assert_same(q, &found(&filtered, k), &expected(&filtered, k));
            if let Some(plan) = idx.plan_narrowed(&searcher, &terms, None, None) {
                let words = plan.narrowed.as_ref().expect("no filter");
                narrowed += 1;
                narrowed_with_context += usize::from(!words.optional.is_empty());
                maxscore::assert_same(q, &found(&plan, k), &expected(&plan, k));
            }
        }
        assert!(
            unions > 0 && narrowed > narrowed_with_context && narrowed_with_context > 0,
            "{unions} {narrowed} {narrowed_with_context}"
        );
    }

    #[test]
    fn a_word_nearly_every_entry_holds_is_left_out_of_scoring() {
        let dir = tempfile::tempdir().unwrap();
        let (idx, _) = TextIndex::open(dir.path(), KINDS, SearchTuning::every_path()).unwrap();
        let n = super::COMMON_FROM_DOCS as usize;
        // "cache" in every document, "retry" in 19 of 20 (95 %), "timeout" in one of 2 (50 %),
        // "safari" in one.
        let documents: Vec<Doc> = (0..n)
            .map(|i| {
                let mut words = vec!["cache"];
                if i % 20 != 0 {
                    words.push("retry");
                }
                if i % 2 == 0 {
                    words.push("timeout");
                }
                if i == 7 {
                    words.push("safari");
                }
                Doc::new(BUG, format!("document {i}"), words.join(" "), vec![])
            })
            .collect();
        let term = |w: &str| idx.terms(w).remove(0);
        let query = |words: &[(&str, f32)]| -> Vec<(String, f32)> {
            words.iter().map(|(w, weight)| (term(w), *weight)).collect()
        };
        let kept = |searcher: &tantivy::Searcher, words: &[(&str, f32)]| {
            idx.without_ubiquitous(searcher, &query(words))
        };

        idx.write_batch(documents[..n - 1].iter().map(|e| (e, false)))
            .unwrap();
        idx.commit().unwrap();
        let searcher = idx.fresh_searcher().unwrap();
        let all = [("cache", 1.0), ("retry", 1.0), ("safari", 1.0)];
        assert_eq!(kept(&searcher, &all), query(&all), "below 10,000 documents");
        assert_eq!(
            idx.context_postings(&searcher),
            None,
            "below 10,000 documents"
        );

        idx.write_batch([(&documents[n - 1], false)]).unwrap();
        idx.commit().unwrap();
        let searcher = idx.fresh_searcher().unwrap();
        assert_eq!(kept(&searcher, &all), query(&[("safari", 1.0)]));
        assert_eq!(
            kept(&searcher, &[("cache", 1.0), ("timeout", 1.0)]),
            query(&[("timeout", 1.0)]),
            "a word in half the documents stays"
        );
        // With only a context's word beside them, the query's own words stay.
        let with_context = [("cache", 1.0), ("retry", 1.0), ("safari", 0.35)];
        assert_eq!(kept(&searcher, &with_context), query(&with_context));
        let ubiquitous = [("cache", 1.0), ("retry", 1.0)];
        assert_eq!(kept(&searcher, &ubiquitous), query(&ubiquitous));
        // A search's context adds words holding at most 5 % of the documents' postings.
        assert_eq!(idx.context_postings(&searcher), Some(500));
    }

    /// Similarity on add scores the few documents not yet committed itself; an import's
    /// thousands are committed first.
    #[test]
    fn more_than_a_few_pending_are_committed_for_similarity() {
        let dir = tempfile::tempdir().unwrap();
        let (idx, _) = TextIndex::open(dir.path(), KINDS, SearchTuning::every_path()).unwrap();
        let documents: Vec<Doc> = (0..MAX_PENDING + 1)
            .map(|i| Doc::new(REFERENCE, format!("document {i}"), "", vec![]))
            .collect();
        idx.write_batch(documents.iter().map(|e| (e, false)))
            .unwrap();
        let (searcher, pending) = idx.committed_and_pending().unwrap();
        assert!(pending.is_empty());
        assert_eq!(idx.num_docs(&searcher), MAX_PENDING as u64 + 1);

        let few: Vec<Doc> = (0..3)
            .map(|i| Doc::new(REFERENCE, format!("late {i}"), "", vec![]))
            .collect();
        idx.write_batch(few.iter().map(|e| (e, false))).unwrap();
        let (searcher, pending) = idx.committed_and_pending().unwrap();
        assert_eq!(pending, few.iter().map(|e| e.id).collect::<Vec<_>>());
        assert_eq!(idx.num_docs(&searcher), MAX_PENDING as u64 + 1);
    }

    /// A search during a rebuild reads the index as it was, at once: the writes made
    /// before it (committed when it starts), not the rebuild's part; the rebuild's
    /// documents show at its end.
    #[test]
    fn a_search_during_a_rebuild_reads_the_index_as_it_was_without_waiting() {
        use std::sync::mpsc;
        use std::time::Duration;
        let dir = tempfile::tempdir().unwrap();
        let (idx, _) = TextIndex::open(dir.path(), KINDS, SearchTuning::every_path()).unwrap();
        let old: Vec<Doc> = (0..3)
            .map(|i| Doc::new(REFERENCE, format!("old {i}"), "", vec![]))
            .collect();
        idx.write_batch(old.iter().map(|e| (e, false))).unwrap();
        // Not committed: the rebuild commits them before it drops every document.
        let new: Vec<Doc> = (0..5)
            .map(|i| Doc::new(REFERENCE, format!("new {i}"), "", vec![]))
            .collect();
        let (halfway_tx, halfway) = mpsc::channel();
        let (go_on, go_on_rx) = mpsc::channel::<()>();
        std::thread::scope(|scope| {
            let (idx, new) = (&idx, &new);
            let rebuild = scope.spawn(move || {
                let documents = new.iter().enumerate().map(|(i, e)| {
                    if i == 2 {
                        halfway_tx.send(()).unwrap();
                        go_on_rx.recv().unwrap();
                    }
                    Ok::<Doc, tantivy::TantivyError>(e.clone())
                });
                idx.rebuild(documents, 9, |_| {}).unwrap()
            });
            halfway.recv().unwrap();
            let (found_tx, found) = mpsc::channel();
            scope.spawn(move || {
                let searcher = idx.fresh_searcher().unwrap();
                found_tx.send(idx.num_docs(&searcher)).unwrap();
            });
            let during = found.recv_timeout(Duration::from_secs(30));
            go_on.send(()).unwrap();
            assert_eq!(during, Ok(3), "a search during the rebuild");
            assert_eq!(rebuild.join().unwrap(), 5);
        });
        let searcher = idx.fresh_searcher().unwrap();
        assert_eq!(idx.num_docs(&searcher), 5);
        assert_eq!(idx.applied_seq(), 9);
    }

    /// A rebuild that panics lowers its flag: the writes after it are committed again
    /// when a search asks.
    #[test]
    fn a_rebuild_that_panics_leaves_searches_committing() {
        let dir = tempfile::tempdir().unwrap();
        let (idx, _) = TextIndex::open(dir.path(), KINDS, SearchTuning::every_path()).unwrap();
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let documents = (0..2).map(|i| -> Result<Doc, tantivy::TantivyError> {
                assert!(i < 1, "the documents' source fails");
                Ok(Doc::new(REFERENCE, "rebuilt", "", vec![]))
            });
            idx.rebuild(documents, 1, |_| {})
        }));
        assert!(panicked.is_err());
        let after = Doc::new(REFERENCE, "after the rebuild", "", vec![]);
        idx.write_batch([(&after, false)]).unwrap();
        idx.fresh_searcher().unwrap();
        assert!(
            idx.pending().is_empty(),
            "the write after the rebuild is committed"
        );
    }

    /// Each merge's segments, sorted, the merges sorted.
    fn merges(segments: &[(u32, u32)]) -> Vec<Vec<u32>> {
        let mut merges = idle_merge(segments);
        merges.iter_mut().for_each(|m| m.sort());
        merges.sort();
        merges
    }

    #[test]
    fn idle_merge_keeps_the_largest_apart_until_the_others_weigh() {
        // Fewer than three segments, the others small: nothing.
        assert!(merges(&[]).is_empty());
        assert!(merges(&[(1, 1000)]).is_empty());
        assert!(merges(&[(1, 1000), (2, 10)]).is_empty());
        // Small ones beside a large one: the small ones.
        assert_eq!(
            merges(&[(1, 10), (2, 1000), (3, 20), (4, 5)]),
            [vec![1, 3, 4]]
        );
        // Once the others hold an eighth of the largest: all of them.
        assert_eq!(merges(&[(1, 100), (2, 800), (3, 20)]), [vec![1, 2, 3]]);
        assert_eq!(merges(&[(1, 500), (2, 500)]), [vec![1, 2]]);
    }

    #[test]
    fn a_large_index_is_kept_in_two_halves() {
        let k = 1000;
        // Two halves: nothing to merge, however uneven.
        assert!(merges(&[(1, 500 * k), (2, 500 * k)]).is_empty());
        assert!(merges(&[(1, 900 * k), (2, 10 * k)]).is_empty());
        // Small segments beside them are merged together first...
        assert_eq!(
            merges(&[(1, 500 * k), (2, 480 * k), (3, 20 * k), (4, 30 * k)]),
            [vec![3, 4]]
        );
        assert!(merges(&[(1, 500 * k), (2, 480 * k), (3, 50 * k)]).is_empty());
        // ...and into the smaller half once they hold an eighth of it.
        assert_eq!(
            merges(&[(1, 500 * k), (2, 480 * k), (3, 61 * k)]),
            [vec![2, 3]]
        );
        // An import's equal segments: two halves at once, as even as they come.
        let import: Vec<(u32, u32)> = (1..=40).map(|id| (id, 25 * k)).collect();
        let halves = merges(&import);
        assert_eq!(halves.len(), 2);
        assert_eq!(halves[0].len(), 20);
        assert_eq!(halves[1].len(), 20);
        // An index that grew in one segment grows its second half from the adds.
        assert_eq!(merges(&[(1, 1000 * k), (2, 8 * k), (3, k)]), [vec![2, 3]]);
        assert_eq!(
            merges(&[(1, 1000 * k), (2, 8 * k), (3, 500), (4, 400)]),
            [vec![3, 4]]
        );
    }

    /// The files in the index's folder of segments it no longer holds.
    fn stale_files(idx: &TextIndex) -> Vec<String> {
        let living: std::collections::HashSet<String> = idx
            .index
            .searchable_segment_metas()
            .unwrap()
            .iter()
            .map(|m| m.id().uuid_string())
            .collect();
        std::fs::read_dir(&idx.dir)
            .unwrap()
            .map(|f| f.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| {
                let stem = name.split('.').next().unwrap_or_default();
                stem.len() == 32 && !living.contains(stem)
            })
            .collect()
    }

    /// An index of `parts` segments of 50 documents each.
    fn in_parts(dir: &std::path::Path, parts: usize) -> std::sync::Arc<TextIndex> {
        let (idx, _) = TextIndex::open(dir, KINDS, SearchTuning::every_path()).unwrap();
        for part in 0..parts {
            let documents: Vec<Doc> = (0..50)
                .map(|i| {
                    let text = format!("part {part} document {i}");
                    Doc::new(BUG, text.clone(), text, vec![])
                })
                .collect();
            idx.write_batch(documents.iter().map(|e| (e, false)))
                .unwrap();
            idx.commit().unwrap();
        }
        assert_eq!(idx.segment_count(), parts);
        idx
    }

    /// A search keeps each segment's id columns open, and lets go of those of segments
    /// merged away (they hold the segments' files).
    #[test]
    fn the_id_columns_of_segments_merged_away_are_let_go() {
        let dir = tempfile::tempdir().unwrap();
        let idx = in_parts(dir.path(), 3);
        let search = |idx: &TextIndex| {
            let searcher = idx.fresh_searcher().unwrap();
            let terms: Vec<(String, f32)> = idx
                .terms("document")
                .into_iter()
                .map(|t| (t, 1.0))
                .collect();
            let plan = idx.plan(&terms, None, None);
            // Every document: hits in every segment.
            let hits = idx.top(&searcher, &plan, 150).unwrap();
            assert_eq!(hits.len(), idx.num_docs(&searcher) as usize);
            searcher.segment_readers().len()
        };
        let columns = |idx: &TextIndex| idx.id_columns.lock().unwrap().len();
        assert_eq!(search(&idx), 3);
        assert_eq!(columns(&idx), 3);
        idx.merge_segments().unwrap();
        assert_eq!(search(&idx), 1);
        assert_eq!(columns(&idx), 1);
    }

    /// The idle merge leaves the segments to a merge under way, which would merge them
    /// too: the one of the two that ended second left its files behind.
    #[test]
    fn an_idle_merge_leaves_the_segments_to_a_merge_under_way() {
        let dir = tempfile::tempdir().unwrap();
        let idx = in_parts(dir.path(), 3);
        let weak = std::sync::Arc::downgrade(&idx);
        let mut settled = Vec::new();
        let under_way = idx.merging.lock().unwrap();
        super::merge_when_idle(&weak, idx.clone(), &mut settled);
        assert_eq!(idx.segment_count(), 3);
        drop(under_way);
        super::merge_when_idle(&weak, idx.clone(), &mut settled);
        assert_eq!(idx.segment_count(), 1);
        assert_eq!(stale_files(&idx), Vec::<String>::new());
    }

    /// Two merges of the same segments: the one that ends second fails and leaves its
    /// files, which the index deletes when it next opens.
    #[test]
    fn files_a_failed_merge_left_are_deleted_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let idx = in_parts(dir.path(), 3);
        let ids: Vec<_> = idx
            .index
            .searchable_segment_metas()
            .unwrap()
            .iter()
            .map(|m| m.id())
            .collect();
        let merges: Vec<_> = {
            let mut w = idx.lock();
            (0..2).map(|_| w.tantivy().merge(&ids)).collect()
        };
        let ended: Vec<bool> = merges.into_iter().map(|m| m.wait().is_ok()).collect();
        assert_eq!(ended.iter().filter(|ok| **ok).count(), 1, "{ended:?}");
        assert!(!stale_files(&idx).is_empty());
        drop(idx);
        let (idx, _) = TextIndex::open(dir.path(), KINDS, SearchTuning::every_path()).unwrap();
        assert_eq!(stale_files(&idx), Vec::<String>::new());
        assert_eq!(idx.num_docs(&idx.fresh_searcher().unwrap()), 150);
    }

    #[test]
    fn a_total_is_exact_up_to_its_bound_and_estimated_past_it() {
        let dir = tempfile::tempdir().unwrap();
        let (idx, _) = TextIndex::open(dir.path(), KINDS, SearchTuning::every_path()).unwrap();
        // 400 documents; "retry" in every other one, "backoff" in every tenth.
        let documents: Vec<Doc> = (0..400)
            .map(|i| {
                let mut words = format!("document {i}");
                if i % 2 == 0 {
                    words.push_str(" retry");
                }
                if i % 10 == 0 {
                    words.push_str(" backoff");
                }
                Doc::new(PATTERN, &words, "network calls", vec![])
            })
            .collect();
        idx.write_batch(documents.iter().map(|e| (e, false)))
            .unwrap();
        idx.commit().unwrap();
        let searcher = idx.fresh_searcher().unwrap();
        let plan = |word: &str| idx.plan(&[(idx.terms(word).remove(0), 1.0)], None, None);
        let total = |word: &str, bound| idx.total_up_to(&searcher, &plan(word), bound).unwrap();
        assert_eq!(total("retry", 1_000), 200);
        assert_eq!(total("backoff", 1_000), 40);
        // Past the bound: the matches found, scaled by the share of the index read. The
        // 50th "retry" is the 99th document, 50 × 400 / 99 = 202 (two figures: 200); the 25th
        // "backoff" the 241st, 25 × 400 / 241 = 41.
        assert_eq!(total("retry", 50), 200);
        assert_eq!(total("backoff", 25), 41);
        // Below it, still exact.
        assert_eq!(total("backoff", 41), 40);
        assert_eq!(idx.total(&searcher, &plan("retry")).unwrap(), 200);
    }

    #[test]
    fn an_estimate_keeps_two_significant_figures() {
        assert_eq!(two_figures(0.0), 0);
        assert_eq!(two_figures(99.4), 99);
        assert_eq!(two_figures(1_249.0), 1_200);
        assert_eq!(two_figures(10_400.0), 10_000);
        assert_eq!(two_figures(183_442.0), 180_000);
        assert_eq!(two_figures(1_960_000.0), 2_000_000);
    }
}
