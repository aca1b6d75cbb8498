//! Lexical similarity between entries: the retriever behind `similar_entries` and the
//! suggestions. BM25 finds candidates in the index; a tf-idf cosine over title, tags and
//! content scores them on an absolute 0..1 scale, so thresholds mean the same thing in a
//! base of ten entries and of a hundred thousand.
//!
//! With an embedding model ready, the new entry's summary vector finds candidates too, and
//! every candidate is scored by the cosine of the two summaries instead ([`Similar::by_meaning`]),
//! against the semantic thresholds: entries that say the same thing in other words are
//! found, and the shared words, where there are any, still explain the match. The
//! candidates' text is then not read to score them, only for the few a suggestion names
//! ([`Lookup`]): reading and analysing ~20 entries from sled was the larger
//! part of an add.
//!
//! Speed: an add scores at most ~20 (or [`RECENT`]) candidates plus the entries not yet
//! committed to the index, so its cost does not follow the size of the base. Terms are
//! numbered once, and each entry's term frequencies kept as a list sorted by number with
//! what a suggestion needs of the entry (its indexed text only changes on import, which
//! clears them): scoring a candidate is a merge of two short lists, reading nothing from
//! sled and hashing no string. Document frequencies are kept while the index grows by
//! less than 2%, so idf weights drift by a negligible amount.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use tantivy::Searcher;
use ulid::Ulid;

use super::records::{Entry, EntryType, MemoryType};
use super::{
    DUPLICATE_MIN, GENERALIZE_MIN, LINK_SUGGESTION_MIN, Memory, MemoryError, SAME_ANSWER_MIN,
    SEMANTIC_DUPLICATE_MIN, SEMANTIC_GENERALIZE_MIN, SEMANTIC_LINK_MIN, SEMANTIC_SAME_ANSWER_MIN,
    SEMANTIC_SIMILAR_MIN, SIMILAR_MIN,
};
use tandem_search::quantised::DocVectors;
use tandem_search::text::TextIndex;
use tandem_search::vectors::Filter;

/// How many BM25 candidates are scored.
const CANDIDATES: usize = 20;
/// How many of the new entry's heaviest terms make the candidate query.
const QUERY_TERMS: usize = 10;
/// The candidate query reads at most about this many postings (the sum of its terms'
/// document frequencies): terms beyond it are left out of the query. Rare words are what
/// tell entries apart, and the query's cost follows its postings (a query of common words
/// in a base of 1,000 clustered entries costs more than all the rest of an add).
const POSTINGS_BUDGET: u64 = 1_000;
/// When none of the entry's terms fits, candidates are this many most recent entries.
const RECENT: usize = 128;
/// Title and tag words count this many times a content word.
const TITLE_WEIGHT: f32 = 2.0;
/// How much memory the cached entries (their term frequencies and cards) may take before
/// the cache starts over: ~8,000 entries of ordinary length, fewer long ones. What an add
/// weighs is mostly the entries just written and their neighbours, so a larger cache
/// buys little and is memory a daemon keeps.
const MAX_CACHED_ENTRY_BYTES: usize = 4 * 1024 * 1024;
/// How much the vocabulary (each term twice, its number, its document frequency) may take
/// before it starts over, with the entries, which refer to it: ~25,000 terms.
const MAX_VOCABULARY_BYTES: usize = 4 * 1024 * 1024;
/// What a cached entry or term costs beside its text and term list: the map slot, the
/// allocation headers, the `Arc`.
const CACHE_OVERHEAD_BYTES: usize = 64;

/// What similarity and suggestions need of an entry besides its words.
#[derive(Debug, Clone)]
pub struct Card {
    pub entry_type: EntryType,
    pub memory_type: MemoryType,
    pub title: String,
}

impl Card {
    pub(super) fn of(entry: &Entry) -> Card {
        Card {
            entry_type: entry.entry_type,
            memory_type: entry.memory_type,
            title: entry.title.clone(),
        }
    }
}

/// An existing entry similar to a new one. What else is known of it (its title, its kind
/// of memory, the words it shares) is read when needed, through a [`Lookup`].
pub struct Similar {
    pub id: Ulid,
    pub entry_type: EntryType,
    /// Cosine similarity, 0..1.
    pub score: f32,
    /// The score is the cosine of the two summary vectors, not the lexical one.
    pub by_meaning: bool,
}

impl Similar {
    /// The least score at which this similarity counts for `kind`: the semantic threshold
    /// when it is by meaning, else the lexical one.
    pub fn counts_for(&self, kind: Threshold) -> bool {
        self.score >= kind.min(self.by_meaning)
    }
}

impl Threshold {
    /// The least score that counts: by meaning (a cosine of summary vectors) or by words.
    pub fn min(self, by_meaning: bool) -> f32 {
        match (self, by_meaning) {
            (Threshold::Link, false) => LINK_SUGGESTION_MIN,
            (Threshold::Link, true) => SEMANTIC_LINK_MIN,
            (Threshold::Generalize, false) => GENERALIZE_MIN,
            (Threshold::Generalize, true) => SEMANTIC_GENERALIZE_MIN,
            (Threshold::Duplicate, false) => DUPLICATE_MIN,
            (Threshold::Duplicate, true) => SEMANTIC_DUPLICATE_MIN,
            (Threshold::SameAnswer, false) => SAME_ANSWER_MIN,
            (Threshold::SameAnswer, true) => SEMANTIC_SAME_ANSWER_MIN,
        }
    }
}

/// What a similarity is weighed for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Threshold {
    /// A link suggestion.
    Link,
    /// A member of a generalisation.
    Generalize,
    /// The same thing said again: a proposed entry is not suggested...
    Duplicate,
    /// ...when the entry also says what it answers (a decision's choice and reasoning).
    SameAnswer,
}

/// Whether the entry weighed is about to be stored, so the caches keep it for the adds
/// that follow, or only proposed (an entry suggestion), so they forget it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Weighed {
    Added,
    Proposed,
}

/// A term's number in the cache's vocabulary.
type TermId = u32;

/// Term frequencies of an entry's title, tags (weighted) and content, by term number,
/// sorted: two entries' shared terms are a merge of two short lists.
type Tf = Vec<(TermId, f32)>;

/// A document frequency not read since the document count last moved.
const UNREAD: u64 = u64::MAX;

/// An entry as the cache keeps it.
struct Cached {
    card: Card,
    tf: Tf,
}

/// The caches of the similarity computation. Owned by [`Memory`], used under its write lock.
#[derive(Default)]
pub struct SimilarityCache {
    entries: HashMap<Ulid, Arc<Cached>>,
    /// The vocabulary: each term's number, and each number's term.
    ids: HashMap<String, TermId>,
    terms: Vec<String>,
    /// Document frequencies by term number ([`UNREAD`] when not read at `df_docs`).
    df: Vec<u64>,
    /// The document count the frequencies were read at.
    df_docs: u64,
    /// Each entry's tf-idf vector length, valid while `df` is.
    norms: HashMap<Ulid, f32>,
    /// The latest entries, oldest first (at most [`RECENT`]; filled from sled when empty).
    recent: VecDeque<Ulid>,
    /// What `entries` and the vocabulary take, about ([`Cached::bytes`], [`term_bytes`]).
    entry_bytes: usize,
    vocabulary_bytes: usize,
}

impl SimilarityCache {
    /// Whether entry `id` is cached (its card among it).
    pub fn holds(&self, id: &Ulid) -> bool {
        self.entries.contains_key(id)
    }
}

impl Cached {
    fn bytes(&self) -> usize {
        std::mem::size_of::<Cached>()
            + self.card.title.len()
            + self.tf.len() * std::mem::size_of::<(TermId, f32)>()
            + CACHE_OVERHEAD_BYTES
    }
}

/// What one term of the vocabulary takes: its text in `ids` and `terms`, its number and
/// its document frequency.
fn term_bytes(term: &str) -> usize {
    2 * (term.len() + std::mem::size_of::<String>())
        + std::mem::size_of::<TermId>()
        + std::mem::size_of::<u64>()
        + 2 * CACHE_OVERHEAD_BYTES
}

impl SimilarityCache {
    /// Forgets every entry's term frequencies (their text may have changed).
    pub fn clear_entries(&mut self) {
        self.entries.clear();
        self.norms.clear();
        self.entry_bytes = 0;
    }

    /// Readies the caches for a computation over `n_docs` documents: document
    /// frequencies are read again once the count moved by 2% (idf weights then drift by
    /// a negligible amount), and a vocabulary past its bound starts over.
    fn begin(&mut self, n_docs: u64) {
        if self.vocabulary_bytes > MAX_VOCABULARY_BYTES {
            self.ids.clear();
            self.terms.clear();
            self.df.clear();
            self.vocabulary_bytes = 0;
            self.clear_entries();
        }
        if n_docs.abs_diff(self.df_docs) * 50 > self.df_docs.max(1) {
            self.df.fill(UNREAD);
            self.norms.clear();
            self.df_docs = n_docs;
        }
    }

    fn intern(&mut self, term: String) -> TermId {
        if let Some(&id) = self.ids.get(&term) {
            return id;
        }
        let id = self.terms.len() as TermId;
        self.vocabulary_bytes += term_bytes(&term);
        self.terms.push(term.clone());
        self.ids.insert(term, id);
        self.df.push(UNREAD);
        id
    }

    /// An entry's weighted term frequencies by term number (title and tags count
    /// [`TITLE_WEIGHT`] times a content word), and for each term the word as first written
    /// (lower-cased), to show people words rather than stems.
    fn term_freqs(&mut self, idx: &TextIndex, entry: &Entry) -> (Tf, HashMap<TermId, String>) {
        let mut tf: HashMap<TermId, f32> = HashMap::new();
        let mut words: HashMap<TermId, String> = HashMap::new();
        let tags = entry.tags.join(" ");
        let weighted = [
            (entry.title.as_str(), TITLE_WEIGHT),
            (tags.as_str(), TITLE_WEIGHT),
            (entry.content.as_str(), 1.0),
        ];
        for (text, weight) in weighted {
            for (term, word) in idx.terms_with_words(text) {
                let id = self.intern(term);
                words.entry(id).or_insert_with(|| word.to_lowercase());
                *tf.entry(id).or_default() += weight;
            }
        }
        let mut tf: Tf = tf.into_iter().collect();
        tf.sort_unstable_by_key(|(id, _)| *id);
        (tf, words)
    }

    fn doc_freq(&mut self, idx: &TextIndex, searcher: &Searcher, term: TermId) -> u64 {
        let slot = &mut self.df[term as usize];
        if *slot == UNREAD {
            *slot = idx.doc_freq(searcher, &self.terms[term as usize]);
        }
        *slot
    }

    fn remember(&mut self, entry: &Entry, tf: Tf) -> Arc<Cached> {
        let cached = Arc::new(Cached {
            card: Card::of(entry),
            tf,
        });
        if self.entry_bytes + cached.bytes() > MAX_CACHED_ENTRY_BYTES {
            self.clear_entries();
        }
        self.entry_bytes += cached.bytes();
        if let Some(old) = self.entries.insert(entry.id, cached.clone()) {
            self.entry_bytes -= old.bytes();
        }
        cached
    }

    /// The latest entries, newest last.
    fn recent(&mut self, memory: &Memory) -> Result<Vec<Ulid>, MemoryError> {
        if self.recent.is_empty() {
            for id in super::writes::newest_first(&memory.writes).take(RECENT) {
                self.recent.push_front(id?);
            }
        }
        Ok(self.recent.iter().copied().collect())
    }

    /// Keeps what was read of an entry about to be added; forgets a proposed one.
    fn weighed(&mut self, entry: &Entry, tf: Tf, weighed: Weighed) {
        if weighed == Weighed::Added {
            self.remember(entry, tf);
            self.note_added(entry.id);
        }
    }

    fn note_added(&mut self, id: Ulid) {
        if self.recent.len() >= RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back(id);
    }

    /// An entry's terms with their tf-idf weight and idf (among `n_docs` documents), by
    /// term number, and the length of that vector.
    fn weights(
        &mut self,
        idx: &TextIndex,
        searcher: &Searcher,
        n_docs: u64,
        tf: &Tf,
    ) -> (Vec<(TermId, f32, f32)>, f32) {
        let mine: Vec<(TermId, f32, f32)> = tf
            .iter()
            .map(|&(t, f)| {
                let idf = idf(n_docs, self.doc_freq(idx, searcher, t));
                (t, weight(f, idf), idf)
            })
            .collect();
        let norm = mine.iter().map(|(_, w, _)| w * w).sum::<f32>().sqrt();
        (mine, norm)
    }

    /// A stored entry as the cache keeps it (read and kept on first use); `None` when it
    /// is gone.
    fn entry(
        &mut self,
        memory: &Memory,
        idx: &TextIndex,
        id: Ulid,
    ) -> Result<Option<Arc<Cached>>, MemoryError> {
        if let Some(cached) = self.entries.get(&id) {
            return Ok(Some(cached.clone()));
        }
        let Some(other) = memory.get(&id)? else {
            return Ok(None);
        };
        let tf = self.term_freqs(idx, &other).0;
        Ok(Some(self.remember(&other, tf)))
    }

    /// The tf-idf cosine of an entry (`mine`, of length `my_norm`, from [`Self::weights`])
    /// and a stored one; `None` when they share no term. The dot product only needs the
    /// shared terms, whose idf is already known.
    fn cosine(
        &mut self,
        idx: &TextIndex,
        searcher: &Searcher,
        mine: &[(TermId, f32, f32)],
        my_norm: f32,
        id: Ulid,
        other: &Cached,
    ) -> Option<f32> {
        let dot: f32 = shared(mine, &other.tf).map(|(_, c)| c).sum();
        if dot <= 0.0 {
            return None;
        }
        let their_norm = self.norm(idx, searcher, id, &other.tf);
        Some((dot / (my_norm * their_norm.max(f32::EPSILON))).clamp(0.0, 1.0))
    }

    /// The length of an entry's tf-idf vector.
    fn norm(&mut self, idx: &TextIndex, searcher: &Searcher, id: Ulid, tf: &Tf) -> f32 {
        if let Some(&n) = self.norms.get(&id) {
            return n;
        }
        let n_docs = self.df_docs;
        let n = tf
            .iter()
            .map(|&(t, f)| {
                let w = weight(f, idf(n_docs, self.doc_freq(idx, searcher, t)));
                w * w
            })
            .sum::<f32>()
            .sqrt();
        self.norms.insert(id, n);
        n
    }
}

/// BM25's idf, always positive.
pub fn idf(n_docs: u64, df: u64) -> f32 {
    let n = n_docs as f32;
    let df = df as f32;
    (1.0 + (n - df + 0.5) / (df + 0.5)).ln().max(0.01)
}

/// The shared terms of two entries and each one's part of the dot product: `mine` holds
/// the new entry's `(term, tf-idf weight, idf)`, both sorted by term.
fn shared<'a>(
    mine: &'a [(TermId, f32, f32)],
    theirs: &'a [(TermId, f32)],
) -> impl Iterator<Item = (TermId, f32)> + 'a {
    let (mut i, mut j) = (0, 0);
    std::iter::from_fn(move || {
        while i < mine.len() && j < theirs.len() {
            let (a, w, idf) = mine[i];
            let (b, f) = theirs[j];
            match a.cmp(&b) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    i += 1;
                    j += 1;
                    return Some((a, w * weight(f, idf)));
                }
            }
        }
        None
    })
}

/// What [`find_similar`] found: the similar entries, best first, and the new entry's
/// words, to say which of them each one shares when a suggestion needs it.
pub struct SimilarEntries {
    pub similar: Vec<Similar>,
    pub words: Words,
}

/// An entry's weighted terms and the words they were written as, to say what it shares
/// with a stored entry ([`Lookup::shared_words`]). Valid until the cache's next
/// computation (its term numbers may start over then).
#[derive(Default)]
pub struct Words {
    mine: Vec<(TermId, f32, f32)>,
    words: HashMap<TermId, String>,
}

/// Reads what is known of similar entries beyond their score, when it is needed: an add
/// by meaning scores its candidates without reading their text, and reads only the few
/// entries its answer and suggestions name (reading ~20 entries from sled, each a page to
/// decompress, was the larger part of an add).
pub struct Lookup<'a> {
    memory: &'a Memory,
    cache: &'a mut SimilarityCache,
    words: &'a Words,
    /// Entries read for their card and not cached: their words are weighed from here if
    /// asked for.
    read: HashMap<Ulid, Entry>,
}

impl<'a> Lookup<'a> {
    pub fn new(memory: &'a Memory, cache: &'a mut SimilarityCache, words: &'a Words) -> Self {
        Lookup {
            memory,
            cache,
            words,
            read: HashMap::new(),
        }
    }

    /// An entry's card (from the cache when it holds the entry); `None` when it is gone.
    pub fn card(&mut self, id: Ulid) -> Result<Option<Card>, MemoryError> {
        if let Some(cached) = self.cache.entries.get(&id) {
            return Ok(Some(cached.card.clone()));
        }
        if let Some(entry) = self.read.get(&id) {
            return Ok(Some(Card::of(entry)));
        }
        let Some(entry) = self.memory.get(&id)? else {
            return Ok(None);
        };
        let card = Card::of(&entry);
        self.read.insert(id, entry);
        Ok(Some(card))
    }

    /// The words (as first written) contributing most to the similarity of the new entry
    /// and the stored entry `id`, heaviest first, up to 3; none when it is gone.
    pub fn shared_words(&mut self, id: Ulid) -> Result<Vec<String>, MemoryError> {
        let idx = self.memory.idx();
        let other = match self.read.remove(&id) {
            Some(entry) => {
                let tf = self.cache.term_freqs(idx, &entry).0;
                self.cache.remember(&entry, tf)
            }
            None => match self.cache.entry(self.memory, idx, id)? {
                Some(other) => other,
                None => return Ok(Vec::new()),
            },
        };
        let cache = &*self.cache;
        let mut contributions: Vec<(TermId, f32)> = shared(&self.words.mine, &other.tf).collect();
        let term = |t: TermId| cache.terms[t as usize].as_str();
        contributions.sort_by(|x, y| y.1.total_cmp(&x.1).then_with(|| term(x.0).cmp(term(y.0))));
        Ok(contributions
            .iter()
            .take(3)
            .map(|(t, _)| {
                self.words
                    .words
                    .get(t)
                    .cloned()
                    .unwrap_or_else(|| term(*t).to_string())
            })
            .collect())
    }
}

/// An entry weighed against the index: its terms, their weights, and the entries that
/// may share words with it (BM25's candidates and the entries not yet committed).
struct Weighing {
    my_tf: Tf,
    words: Words,
    my_norm: f32,
    searcher: Searcher,
    candidates: Vec<Ulid>,
}

/// Weighs `entry`'s terms and finds its lexical candidates (their ids only; nothing is
/// read of them).
fn weigh(
    memory: &Memory,
    cache: &mut SimilarityCache,
    entry: &Entry,
) -> Result<Weighing, MemoryError> {
    let idx = memory.idx();
    let (searcher, pending) = idx.committed_and_pending()?;
    let (my_tf, Words { mine, words }, my_norm) =
        weigh_words(memory, cache, &searcher, pending.len(), entry);
    let mut candidates = Vec::new();
    if !mine.is_empty() && my_norm > 0.0 {
        let mut heaviest: Vec<(TermId, f32)> = mine.iter().map(|&(t, w, _)| (t, w)).collect();
        heaviest.sort_by(|a, b| {
            b.1.total_cmp(&a.1)
                .then_with(|| cache.terms[a.0 as usize].cmp(&cache.terms[b.0 as usize]))
        });
        // The heaviest terms whose postings fit the budget. In a base where every word is
        // common (a clustered vocabulary), a query of common words would cost in proportion
        // to the base: its candidates are then the latest entries.
        let mut budget = POSTINGS_BUDGET;
        let mut query: Vec<(String, f32)> = Vec::new();
        for &(t, _) in &heaviest {
            let df = cache.doc_freq(idx, &searcher, t);
            if df <= budget {
                budget -= df;
                query.push((cache.terms[t as usize].clone(), 1.0));
                if query.len() == QUERY_TERMS {
                    break;
                }
            }
        }
        let found: Vec<Ulid> = if query.is_empty() {
            cache.recent(memory)?
        } else {
            let plan = idx.plan_similar(&query);
            // At most `POSTINGS_BUDGET` postings: read on this thread alone, faster than a
            // second one starts.
            idx.top_search(&searcher, &plan, CANDIDATES)?
                .hits()?
                .into_iter()
                .map(|h| h.id)
                .collect()
        };
        let mut seen: HashSet<Ulid> = HashSet::from([entry.id]);
        candidates = found
            .into_iter()
            .chain(pending)
            .filter(|id| seen.insert(*id))
            .collect();
    }
    Ok(Weighing {
        my_tf,
        words: Words { mine, words },
        my_norm,
        searcher,
        candidates,
    })
}

/// `entry`'s terms, counted and weighed against the index as it is (`searcher`'s, and the
/// `pending` entries not yet committed), with the words they were written as and the
/// weights' norm.
fn weigh_words(
    memory: &Memory,
    cache: &mut SimilarityCache,
    searcher: &Searcher,
    pending: usize,
    entry: &Entry,
) -> (Tf, Words, f32) {
    let idx = memory.idx();
    let n_docs = idx.num_docs(searcher) + pending as u64 + 1;
    cache.begin(n_docs);
    let (my_tf, words) = cache.term_freqs(idx, entry);
    let (mine, my_norm) = cache.weights(idx, searcher, n_docs, &my_tf);
    (my_tf, Words { mine, words }, my_norm)
}

/// `entry`'s words as an add weighs them, for [`Lookup::shared_words`] with the entries it
/// was found similar to.
pub fn words_of(memory: &Memory, cache: &mut SimilarityCache, entry: &Entry) -> Words {
    let idx = memory.idx();
    let searcher = idx.committed_searcher();
    weigh_words(memory, cache, &searcher, idx.pending().len(), entry).1
}

/// Entries similar to `entry` (which need not be stored yet), best first: by meaning when
/// `vectors` (the entry's, under the memory's ready model) are given, else by words; each
/// at least its threshold. An entry being added has its term frequencies cached for the
/// adds that follow; a proposed one leaves no trace.
pub fn find_similar(
    memory: &Memory,
    cache: &mut SimilarityCache,
    entry: &Entry,
    vectors: Option<&DocVectors>,
    weighed: Weighed,
) -> Result<SimilarEntries, MemoryError> {
    let Some(vectors) = vectors else {
        return find_similar_lexically(memory, cache, entry, weighed);
    };
    let semantic = &memory.semantic;
    let nearest = || {
        semantic.nearest(
            &vectors.summary,
            CANDIDATES,
            Filter::default(),
            Some(&entry.id),
        )
    };
    // In a large table, the nearest by meaning are found on a second thread while the
    // words are weighed.
    let (weighing, mut scored) = if semantic.is_large() {
        std::thread::scope(|scope| {
            let nearest = scope.spawn(nearest);
            let weighing = weigh(memory, cache, entry);
            let nearest = nearest
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            (weighing, nearest)
        })
    } else {
        (weigh(memory, cache, entry), nearest())
    };
    let Weighing {
        my_tf,
        words,
        candidates,
        ..
    } = weighing?;
    cache.weighed(entry, my_tf, weighed);
    // The lexical candidates are weighed by meaning too: the words found them, the
    // cosine of the summaries decides.
    let lexical_only: Vec<Ulid> = candidates
        .into_iter()
        .filter(|id| !scored.iter().any(|(s, _)| s == id))
        .collect();
    for (id, cosine) in lexical_only
        .iter()
        .zip(semantic.cosines(&vectors.summary, &lexical_only))
    {
        if let Some(cosine) = cosine {
            scored.push((*id, cosine));
        }
    }
    let types = semantic.entry_types(scored.iter().map(|(id, _)| id));
    let mut similar: Vec<Similar> = scored
        .into_iter()
        .zip(types)
        .filter(|((_, score), _)| *score >= SEMANTIC_SIMILAR_MIN)
        .filter_map(|((id, score), entry_type)| {
            Some(Similar {
                id,
                entry_type: entry_type?,
                score: score.clamp(0.0, 1.0),
                by_meaning: true,
            })
        })
        .collect();
    similar.sort_by(|a, b| b.score.total_cmp(&a.score).then(b.id.cmp(&a.id)));
    Ok(SimilarEntries { similar, words })
}

/// How similar `entry` (not stored) is to each of the stored entries `ids`, 0..1: the
/// cosine of the summary vectors when `vectors` (the entry's, under the memory's ready
/// model) are given, else the tf-idf cosine; 0 for an entry with no vector, or gone.
/// Nothing of `entry` is cached.
pub fn scores_against(
    memory: &Memory,
    cache: &mut SimilarityCache,
    entry: &Entry,
    vectors: Option<&DocVectors>,
    ids: &[Ulid],
) -> Result<Vec<f32>, MemoryError> {
    if let Some(vectors) = vectors {
        return Ok(memory
            .semantic
            .cosines(&vectors.summary, ids)
            .into_iter()
            .map(|c| c.unwrap_or(0.0).clamp(0.0, 1.0))
            .collect());
    }
    let idx = memory.idx();
    let searcher = idx.committed_searcher();
    let n_docs = idx.num_docs(&searcher) + idx.pending().len() as u64 + 1;
    cache.begin(n_docs);
    let (my_tf, _) = cache.term_freqs(idx, entry);
    let (mine, my_norm) = cache.weights(idx, &searcher, n_docs, &my_tf);
    let mut scores = Vec::with_capacity(ids.len());
    for &id in ids {
        let score = match cache.entry(memory, idx, id)? {
            Some(other) if my_norm > 0.0 => cache
                .cosine(idx, &searcher, &mine, my_norm, id, &other)
                .unwrap_or(0.0),
            _ => 0.0,
        };
        scores.push(score);
    }
    Ok(scores)
}

/// Entries sharing words with `entry`, best first, at least [`SIMILAR_MIN`].
fn find_similar_lexically(
    memory: &Memory,
    cache: &mut SimilarityCache,
    entry: &Entry,
    weighed: Weighed,
) -> Result<SimilarEntries, MemoryError> {
    let idx = memory.idx();
    let Weighing {
        my_tf,
        words,
        my_norm,
        searcher,
        candidates,
    } = weigh(memory, cache, entry)?;
    let mut similar = Vec::new();
    for id in candidates {
        let Some(other) = cache.entry(memory, idx, id)? else {
            continue;
        };
        let Some(score) = cache.cosine(idx, &searcher, &words.mine, my_norm, id, &other) else {
            continue;
        };
        if score < SIMILAR_MIN {
            continue;
        }
        similar.push(Similar {
            id,
            entry_type: other.card.entry_type,
            score,
            by_meaning: false,
        });
    }
    cache.weighed(entry, my_tf, weighed);
    similar.sort_by(|a, b| b.score.total_cmp(&a.score).then(b.id.cmp(&a.id)));
    Ok(SimilarEntries { similar, words })
}

/// A term's tf-idf weight.
fn weight(tf: f32, idf: f32) -> f32 {
    (1.0 + tf.ln()) * idf
}
