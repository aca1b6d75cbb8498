//! Lexical similarity between entries: the retriever behind `similar_entries` and the
//! suggestions. BM25 finds candidates in the index; a tf-idf cosine over title, tags and
//! content scores them on an absolute 0..1 scale, so thresholds mean the same thing in a
//! base of ten entries and of a hundred thousand.
//!
//! This is the place a second, semantic retriever (embeddings) plugs in: it would add its
//! candidates and blend its score here.

use std::collections::HashMap;

use ulid::Ulid;

use super::model::Entry;
use super::{Memory, MemoryError, SIMILAR_MIN};

/// How many BM25 candidates are scored.
const CANDIDATES: usize = 20;
/// How many of the new entry's heaviest terms make the candidate query.
const QUERY_TERMS: usize = 32;
/// Title and tag words count this many times a content word.
const TITLE_WEIGHT: f32 = 2.0;

/// An existing entry similar to a new one.
pub struct Similar {
    pub entry: Entry,
    /// Cosine similarity, 0..1.
    pub score: f32,
    /// The terms contributing most to the similarity, heaviest first (up to 3).
    pub shared_terms: Vec<String>,
}

/// BM25's idf, always positive.
pub fn idf(n_docs: u64, df: u64) -> f32 {
    let n = n_docs as f32;
    let df = df as f32;
    (1.0 + (n - df + 0.5) / (df + 0.5)).ln().max(0.01)
}

/// Entries similar to `entry` (which need not be stored yet), best first, at least
/// [`SIMILAR_MIN`].
pub fn find_similar(memory: &Memory, entry: &Entry) -> Result<Vec<Similar>, MemoryError> {
    let idx = memory.idx();
    let searcher = idx.committed_searcher();
    let pending = idx.pending();
    let n_docs = idx.num_docs(&searcher) + pending.len() as u64 + 1;
    let mut idf_cache: HashMap<String, f32> = HashMap::new();
    let mut weigh = |tf: HashMap<String, f32>| -> HashMap<String, f32> {
        tf.into_iter()
            .map(|(t, f)| {
                let w = *idf_cache
                    .entry(t.clone())
                    .or_insert_with(|| idf(n_docs, idx.doc_freq(&searcher, &t)));
                (t, (1.0 + f.ln()) * w)
            })
            .collect()
    };
    let (my_tf, words) = term_freqs(memory, entry);
    let mine = weigh(my_tf);
    if mine.is_empty() {
        return Ok(Vec::new());
    }
    let mut heaviest: Vec<(&String, &f32)> = mine.iter().collect();
    heaviest.sort_by(|a, b| b.1.total_cmp(a.1).then_with(|| a.0.cmp(b.0)));
    let query: Vec<(String, f32)> = heaviest
        .iter()
        .take(QUERY_TERMS)
        .map(|(t, _)| ((*t).clone(), 1.0))
        .collect();
    let plan = idx.plan(&query, None, None);
    let (hits, _) = idx.search(&searcher, &plan, CANDIDATES)?;

    let mut seen: Vec<Ulid> = vec![entry.id];
    let mut out = Vec::new();
    for id in hits.iter().map(|h| h.id).chain(pending) {
        if seen.contains(&id) {
            continue;
        }
        seen.push(id);
        let Some(other) = memory.get(&id)? else {
            continue;
        };
        let theirs = weigh(term_freqs(memory, &other).0);
        let (score, shared) = cosine(&mine, &theirs);
        let shared = shared
            .into_iter()
            .map(|t| words.get(&t).cloned().unwrap_or(t))
            .collect();
        if score >= SIMILAR_MIN {
            out.push(Similar {
                entry: other,
                score,
                shared_terms: shared,
            });
        }
    }
    out.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then(b.entry.id.cmp(&a.entry.id))
    });
    Ok(out)
}

/// Weighted term frequencies of an entry, and for each term the word as first written
/// (lower-cased), to show people words rather than stems.
fn term_freqs(memory: &Memory, entry: &Entry) -> (HashMap<String, f32>, HashMap<String, String>) {
    let idx = memory.idx();
    let mut tf: HashMap<String, f32> = HashMap::new();
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

fn cosine(a: &HashMap<String, f32>, b: &HashMap<String, f32>) -> (f32, Vec<String>) {
    let norm = |v: &HashMap<String, f32>| v.values().map(|w| w * w).sum::<f32>().sqrt();
    let (na, nb) = (norm(a), norm(b));
    if na == 0.0 || nb == 0.0 {
        return (0.0, Vec::new());
    }
    let (small, large) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    let mut contributions: Vec<(&String, f32)> = small
        .iter()
        .filter_map(|(t, w)| large.get(t).map(|w2| (t, w * w2)))
        .collect();
    let dot: f32 = contributions.iter().map(|(_, c)| c).sum();
    contributions.sort_by(|x, y| y.1.total_cmp(&x.1).then_with(|| x.0.cmp(y.0)));
    let shared = contributions
        .iter()
        .take(3)
        .map(|(t, _)| (*t).clone())
        .collect();
    ((dot / (na * nb)).clamp(0.0, 1.0), shared)
}
