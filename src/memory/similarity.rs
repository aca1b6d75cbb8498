//! Lexical similarity between entries: the retriever behind `similar_entries` and the
//! suggestions. BM25 finds candidates in the index; a tf-idf cosine over title, tags and
//! content scores them on an absolute 0..1 scale, so thresholds mean the same thing in a
//! base of ten entries and of a hundred thousand.
//!
//! This is the place a second, semantic retriever (embeddings) plugs in: it would add its
//! candidates and blend its score here.
//!
//! Speed: an add scores ~20 candidates plus the entries not yet committed to the index. Two
//! caches keep that cheap: entries' term frequencies with what a suggestion needs of them
//! (their indexed text only changes on import, which clears it), so scoring reads nothing
//! from sled, and document frequencies (kept while the index grows by less than 2%, so
//! idf weights drift by a negligible amount).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use tantivy::Searcher;
use ulid::Ulid;

use super::index::MemoryIndex;
use super::model::{Entry, EntryType, MemoryType};
use super::{Memory, MemoryError, SIMILAR_MIN};

/// How many BM25 candidates are scored.
const CANDIDATES: usize = 20;
/// How many of the new entry's heaviest terms make the candidate query.
const QUERY_TERMS: usize = 10;
/// The candidate query reads at most about this many postings (the sum of its terms'
/// document frequencies): terms beyond it are left out of the query.
const POSTINGS_BUDGET: u64 = 20_000;
/// When none of the entry's terms fits, candidates are this many most recent entries.
const RECENT: usize = 128;
/// Title and tag words count this many times a content word.
const TITLE_WEIGHT: f32 = 2.0;
/// Cache sizes beyond which a cache starts over.
const MAX_CACHED_ENTRIES: usize = 20_000;
const MAX_CACHED_TERMS: usize = 200_000;

/// What similarity and suggestions need of an entry besides its words.
#[derive(Debug, Clone)]
pub struct Card {
    pub id: Ulid,
    pub entry_type: EntryType,
    pub memory_type: MemoryType,
    pub title: String,
}

impl Card {
    pub(super) fn of(entry: &Entry) -> Card {
        Card {
            id: entry.id,
            entry_type: entry.entry_type,
            memory_type: entry.memory_type,
            title: entry.title.clone(),
        }
    }
}

/// An existing entry similar to a new one.
pub struct Similar {
    pub entry: Card,
    /// Cosine similarity, 0..1.
    pub score: f32,
    /// The words contributing most to the similarity, heaviest first (up to 3).
    pub shared_terms: Vec<String>,
}

/// Term frequencies of an entry's title, tags (weighted) and content.
type Tf = HashMap<String, f32>;

/// An entry as the cache keeps it.
struct Cached {
    card: Card,
    tf: Tf,
}

/// The caches of the similarity computation. Owned by [`Memory`], used under its write lock.
#[derive(Default)]
pub struct SimilarityCache {
    entries: HashMap<Ulid, Arc<Cached>>,
    df: HashMap<String, u64>,
    /// The document count the `df` entries were read at.
    df_docs: u64,
    /// Each entry's tf-idf vector length, valid while `df` is.
    norms: HashMap<Ulid, f32>,
    /// The latest entries, oldest first (at most [`RECENT`]; filled from sled when empty).
    recent: VecDeque<Ulid>,
}

impl SimilarityCache {
    /// Forgets every entry's term frequencies (their text may have changed).
    pub fn clear_entries(&mut self) {
        self.entries.clear();
        self.norms.clear();
    }

    fn doc_freq(&mut self, idx: &MemoryIndex, searcher: &Searcher, n_docs: u64, term: &str) -> u64 {
        if n_docs.abs_diff(self.df_docs) * 50 > self.df_docs.max(1)
            || self.df.len() > MAX_CACHED_TERMS
        {
            self.df.clear();
            self.norms.clear();
            self.df_docs = n_docs;
        }
        if let Some(&df) = self.df.get(term) {
            return df;
        }
        let df = idx.doc_freq(searcher, term);
        self.df.insert(term.to_string(), df);
        df
    }

    fn remember(&mut self, entry: &Entry, tf: Tf) -> Arc<Cached> {
        if self.entries.len() >= MAX_CACHED_ENTRIES {
            self.entries.clear();
            self.norms.clear();
        }
        let cached = Arc::new(Cached {
            card: Card::of(entry),
            tf,
        });
        self.entries.insert(entry.id, cached.clone());
        cached
    }

    /// The latest entries, newest last.
    fn recent(&mut self, memory: &Memory) -> Result<Vec<Ulid>, MemoryError> {
        if self.recent.is_empty() {
            for id in memory.by_seq.iter().values().rev().take(RECENT) {
                self.recent.push_front(super::parse_id_bytes(&id?)?);
            }
        }
        Ok(self.recent.iter().copied().collect())
    }

    fn note_added(&mut self, id: Ulid) {
        if self.recent.len() >= RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back(id);
    }

    /// The length of an entry's tf-idf vector.
    fn norm(
        &mut self,
        idx: &MemoryIndex,
        searcher: &Searcher,
        n_docs: u64,
        id: Ulid,
        tf: &Tf,
    ) -> f32 {
        if let Some(&n) = self.norms.get(&id) {
            return n;
        }
        let n = tf
            .iter()
            .map(|(t, f)| {
                let w = weight(*f, idf(n_docs, self.doc_freq(idx, searcher, n_docs, t)));
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

/// Entries similar to `entry` (which need not be stored yet), best first, at least
/// [`SIMILAR_MIN`]. The entry's term frequencies are cached for the adds that follow.
pub fn find_similar(
    memory: &Memory,
    cache: &mut SimilarityCache,
    entry: &Entry,
) -> Result<Vec<Similar>, MemoryError> {
    let idx = memory.idx();
    let searcher = idx.committed_searcher();
    let pending = idx.pending();
    let n_docs = idx.num_docs(&searcher) + pending.len() as u64 + 1;
    let (my_tf, words) = term_freqs(idx, entry);
    // The new entry's terms with their idf and tf-idf weight.
    let mine: HashMap<&str, (f32, f32)> = my_tf
        .iter()
        .map(|(t, f)| {
            let idf = idf(n_docs, cache.doc_freq(idx, &searcher, n_docs, t));
            (t.as_str(), (idf, weight(*f, idf)))
        })
        .collect();
    let my_norm = mine.values().map(|(_, w)| w * w).sum::<f32>().sqrt();
    if mine.is_empty() || my_norm == 0.0 {
        cache.remember(entry, my_tf);
        cache.note_added(entry.id);
        return Ok(Vec::new());
    }
    let mut heaviest: Vec<(&str, f32)> = mine.iter().map(|(t, (_, w))| (*t, *w)).collect();
    heaviest.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    // The heaviest terms whose postings fit the budget. In a base where every word is
    // common (a clustered vocabulary), a query of common words would cost in proportion
    // to the base: its candidates are then the latest entries.
    let mut budget = POSTINGS_BUDGET;
    let mut query: Vec<(String, f32)> = Vec::new();
    for (t, _) in &heaviest {
        let df = cache.doc_freq(idx, &searcher, n_docs, t);
        if df <= budget {
            budget -= df;
            query.push((t.to_string(), 1.0));
            if query.len() == QUERY_TERMS {
                break;
            }
        }
    }
    let candidates: Vec<Ulid> = if query.is_empty() {
        cache.recent(memory)?
    } else {
        let plan = idx.plan_similar(&query);
        idx.top(&searcher, &plan, CANDIDATES)?
            .into_iter()
            .map(|h| h.id)
            .collect()
    };

    let mut seen: HashSet<Ulid> = HashSet::from([entry.id]);
    let mut out = Vec::new();
    for id in candidates.into_iter().chain(pending) {
        if !seen.insert(id) {
            continue;
        }
        let other = match cache.entries.get(&id) {
            Some(cached) => cached.clone(),
            None => {
                let Some(other) = memory.get(&id)? else {
                    continue;
                };
                let tf = term_freqs(idx, &other).0;
                cache.remember(&other, tf)
            }
        };
        // The dot product only needs the shared terms, whose idf is already known.
        let mut contributions: Vec<(&str, f32)> = other
            .tf
            .iter()
            .filter_map(|(t, f)| {
                mine.get(t.as_str())
                    .map(|(idf, w)| (t.as_str(), w * weight(*f, *idf)))
            })
            .collect();
        if contributions.is_empty() {
            continue;
        }
        let dot: f32 = contributions.iter().map(|(_, c)| c).sum();
        let their_norm = cache.norm(idx, &searcher, n_docs, id, &other.tf);
        let score = (dot / (my_norm * their_norm.max(f32::EPSILON))).clamp(0.0, 1.0);
        if score < SIMILAR_MIN {
            continue;
        }
        contributions.sort_by(|x, y| y.1.total_cmp(&x.1).then_with(|| x.0.cmp(y.0)));
        out.push(Similar {
            entry: other.card.clone(),
            score,
            shared_terms: contributions
                .iter()
                .take(3)
                .map(|(t, _)| words.get(*t).cloned().unwrap_or_else(|| t.to_string()))
                .collect(),
        });
    }
    cache.remember(entry, my_tf);
    cache.note_added(entry.id);
    out.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then(b.entry.id.cmp(&a.entry.id))
    });
    Ok(out)
}

/// Weighted term frequencies of an entry, and for each term the word as first written
/// (lower-cased), to show people words rather than stems.
fn term_freqs(idx: &MemoryIndex, entry: &Entry) -> (Tf, HashMap<String, String>) {
    let mut tf: Tf = HashMap::new();
    let mut words: HashMap<String, String> = HashMap::new();
    let tags = entry.tags.join(" ");
    let weighted = [
        (entry.title.as_str(), TITLE_WEIGHT),
        (tags.as_str(), TITLE_WEIGHT),
        (entry.content.as_str(), 1.0),
    ];
    for (text, weight) in weighted {
        for (term, word) in idx.terms_with_words(text) {
            words
                .entry(term.clone())
                .or_insert_with(|| word.to_lowercase());
            *tf.entry(term).or_default() += weight;
        }
    }
    (tf, words)
}

/// A term's tf-idf weight.
fn weight(tf: f32, idf: f32) -> f32 {
    (1.0 + tf.ln()) * idf
}
