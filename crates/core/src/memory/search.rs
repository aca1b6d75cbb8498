//! Search (`rekall_search`): the query's words, plus its context's most distinctive ones at
//! a lower weight (on a large index, within a budget of postings), searched with BM25 over
//! the index (the fields and filters in [`index::TextIndex::plan`]); each hit scored 0..1
//! from its coverage of the query and its BM25 score relative to the best, and shown with a
//! snippet.
//!
//! With an embedding model ready, the search is hybrid: the query's vector (its context
//! mixed in) brings the entries nearest in meaning, BM25 its best hits, a pool of each a few
//! times the limit (fusing every entry let an incidental word outrank good matches by
//! meaning); every candidate gets both its lexical score and its meaning (the cosine,
//! rescaled to 0..1), and [`fuse`] weighs them. On the labelled set (`benches/
//! memory_quality.rs`), reciprocal rank fusion and a plain weighed sum both let BM25's
//! incidental matches bury the answers to paraphrases (recall@5 6% and 11%, against 46% by
//! meaning alone); counting only the lexical score a keyword query earns keeps both.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use tantivy::DocAddress;
use ulid::Ulid;

use super::{
    Entry, EntryType, Memory, MemoryError, Ranking, Result, SearchOutcome, SearchQuery,
    SearchResult, check_range, round2, semantic, similarity, squash,
};
use tandem_search::embeddings::Embedder;
use tandem_search::quantised::Quantised;
use tandem_search::stages::{Flag, Stage};
use tandem_search::text::{self, TextField};
use tandem_search::vectors::{self, Filter};

/// Search `limit` bounds and default (spec 003).
pub const SEARCH_LIMIT: (i64, i64, i64) = (1, 20, 5);
/// A snippet's length, in characters, on one line.
const SNIPPET_CHARS: usize = 100;
/// A lead (the snippet of a tag-only match) is cut at its last space when that keeps at
/// least this many characters, else mid-word.
const LEAD_MIN_CHARS: usize = SNIPPET_CHARS / 2;
/// Each word of the query weighs this much.
const QUERY_TERM_WEIGHT: f32 = 1.0;
/// A search's context adds at most this many of its most distinctive words to the query...
const CONTEXT_TERMS: usize = 12;
/// ...each weighing this much beside a word of the query.
const CONTEXT_TERM_WEIGHT: f32 = 0.35;
/// A result's score: this share from coverage (the idf-weighted share of the query's words
/// the entry contains), the rest from its BM25 score relative to the best hit.
const COVERAGE_SHARE: f32 = 0.8;
/// With an embedding model, each side (BM25 and vectors) brings this many candidates per
/// result asked for...
const POOL_PER_RESULT: usize = 2;
/// ...and at least this many.
const POOL_MIN: usize = 10;
/// Entries whose summary's cosine with the query is below this are no match by meaning.
const SEARCH_COSINE_MIN: f32 = 0.25;
/// A search's context is mixed into the query's vector at this weight.
const CONTEXT_VECTOR_WEIGHT: f32 = 0.35;
/// In a hybrid score, a lexical score up to this counts for nothing...
const LEXICAL_FLOOR: f32 = 0.4;
/// ...and beyond it weighs this much beside the meaning.
const LEXICAL_WEIGHT: f32 = 0.5;
/// The hint of a search with results.
const HINT: &str = "Use rekall_show(id) for full content and links";
/// The hint of a query that analyses to no word.
const NO_WORDS_HINT: &str =
    "The query has no searchable words (only stop words or punctuation); use distinctive keywords";
/// The hint of a search without results.
const NO_MATCH_HINT: &str =
    "No match: try other keywords, fewer filters, or rekall_add to capture this once solved";

/// The vectors' search of a hybrid one with a thread beside: in two parts through the
/// table's lists, or found whole.
enum Nearest<'a> {
    Parted(vectors::Parted<'a>),
    Found(Vec<(Ulid, f32)>),
}

impl Memory {
    /// Search as agents and editors get it: [`Ranking::Hybrid`].
    pub fn search(&self, q: &SearchQuery) -> Result<SearchOutcome> {
        self.search_ranked(q, Ranking::Hybrid)
    }

    /// Search with the given ranking, filters, normalised scores and snippets.
    /// [`Ranking::Semantic`] without a ready model is `EMBEDDINGS_DISABLED` or
    /// `MODEL_NOT_AVAILABLE`; [`Ranking::Hybrid`] is then BM25 alone.
    pub fn search_ranked(&self, q: &SearchQuery, ranking: Ranking) -> Result<SearchOutcome> {
        let limit = check_range("limit", q.limit, SEARCH_LIMIT)? as usize;
        let query = q.query.trim();
        if query.is_empty() {
            return Err(MemoryError::invalid_argument("query", "the query is empty"));
        }
        let embedder = match ranking {
            Ranking::Lexical => None,
            Ranking::Semantic => Some(self.semantic.require()?),
            Ranking::Hybrid => self.semantic.embedder(),
        };
        let context = q.context.as_deref().filter(|c| !c.trim().is_empty());
        let idx = self.idx();
        let searcher = idx.fresh_searcher()?;
        let n_docs = idx.num_docs(&searcher).max(1);
        let weight = |postings: u64| similarity::idf(n_docs, postings);
        let idf = |term: &str| weight(idx.doc_freq(&searcher, term));

        let mut query_terms: Vec<String> = idx.terms(query);
        dedup_in_order(&mut query_terms);
        let mut weighted: Vec<(String, f32)> = query_terms
            .iter()
            .map(|t| (t.clone(), QUERY_TERM_WEIGHT))
            .collect();
        if let Some(context) = context {
            // The most distinctive first (the highest idf), while their postings fit the
            // index's budget: a dozen context words that many entries hold made a search on
            // a large base read most of the index (`cargo bench --bench scale`).
            let mut extra: Vec<(String, u64)> = idx
                .terms(context)
                .into_iter()
                .filter(|t| !query_terms.contains(t))
                .map(|t| {
                    let postings = idx.doc_freq(&searcher, &t);
                    (t, postings)
                })
                .collect();
            extra.sort_by(|a, b| {
                weight(b.1)
                    .total_cmp(&weight(a.1))
                    .then_with(|| a.0.cmp(&b.0))
            });
            extra.dedup_by(|a, b| a.0 == b.0);
            let mut budget = idx.context_postings(&searcher);
            for (t, postings) in extra {
                if weighted.len() == query_terms.len() + CONTEXT_TERMS {
                    break;
                }
                if let Some(left) = &mut budget {
                    if postings > *left {
                        continue;
                    }
                    *left -= postings;
                }
                weighted.push((t, CONTEXT_TERM_WEIGHT));
            }
        }
        let outcome = |total, results| SearchOutcome {
            query: q.query.clone(),
            total,
            results,
            hint: HINT.to_string(),
        };
        if weighted.is_empty() && embedder.is_none() {
            let mut o = outcome(0, Vec::new());
            o.hint = NO_WORDS_HINT.into();
            return Ok(o);
        }
        // With vectors, each side brings a pool of candidates, and the best of their union
        // by the fused score are shown; BM25 alone shows its own top hits.
        let pool = if embedder.is_some() {
            (limit * POOL_PER_RESULT).max(POOL_MIN)
        } else {
            limit
        };
        let lexical = !weighted.is_empty() && ranking != Ranking::Semantic;
        let scored = if lexical {
            idx.without_ubiquitous(&searcher, &weighted)
        } else {
            Vec::new()
        };
        let full = lexical.then(|| {
            idx.plan(
                &scored,
                q.entry_type.map(EntryType::kind),
                q.project.as_deref(),
            )
        });
        // Every word of the query, those BM25 leaves out too, counts in `total` and is
        // highlighted in the snippets: the full plan of every word, where BM25's leaves
        // some out.
        let every_word = (scored.len() < weighted.len()).then(|| {
            idx.plan(
                &weighted,
                q.entry_type.map(EntryType::kind),
                q.project.as_deref(),
            )
        });
        let counted_full = every_word.as_ref().or(full.as_ref());
        // On a large index, a query of common words only reads the entries holding them
        // all first; the full plan when they are too few.
        let narrowed = full.as_ref().and_then(|_| {
            idx.plan_narrowed(
                &searcher,
                &weighted,
                q.entry_type.map(EntryType::kind),
                q.project.as_deref(),
            )
        });
        let plan = narrowed.as_ref().or(full.as_ref());
        // The narrowed plan holds every word.
        let counted = narrowed.as_ref().or(counted_full);
        let filter = Filter {
            kind: q.entry_type.map(EntryType::kind),
            group: q.project.as_deref(),
        };
        let by_meaning = |embedder: &Embedder| {
            let vector =
                semantic::Semantic::query_vector(embedder, query, context, CONTEXT_VECTOR_WEIGHT);
            let nearest = self.semantic.nearest(&vector, pool, filter, None);
            (vector, nearest)
        };
        // BM25's top hits, its count of matches, the snippet generators and the vectors'
        // nearest are independent. With both sides and a large table, a helper thread
        // (`text::helpers`) embeds the query and scores the first of the vectors' two
        // parts while this one finds the top hits; each then takes the index's segments
        // and the vectors' part the other has not begun (two threads, not three on two
        // cores: BM25's own second thread beside the vectors' made its slowest searches
        // slower). On a base large enough for BM25 to read two halves, the thread beside
        // took the second half after the whole vectors' search and ended well after this
        // one, so the halves share one floor (`index.rs`; `cargo bench --bench scale`,
        // docs/benchmarks.md). The count goes to
        // whichever thread is free first, and this one makes the generators. This one
        // waits for the helper spinning, not asleep on the scope's end (woken late), and
        // the helper stays for the steps after (`stages`).
        let count = |plan: &text::SearchPlan| idx.total(&searcher, plan);
        let make_generators =
            |plan: &text::SearchPlan| idx.snippets(&searcher, plan, SNIPPET_CHARS).map(Some);
        let counting = AtomicBool::new(false);
        let count_unless_taken =
            |plan: &text::SearchPlan| (!counting.swap(true, Ordering::AcqRel)).then(|| count(plan));
        let top_search = plan
            .map(|plan| idx.top_search(&searcher, plan, pool))
            .transpose()?;
        // With a thread beside, the table is read once for the search (both threads score
        // its lists, and the candidates' cosines are read from it).
        let large = self.index.tuning().vectors_always_beside || self.semantic.is_large();
        let beside = match (&embedder, counted) {
            (Some(embedder), Some(counted)) if large => Some((embedder, counted)),
            _ => None,
        };
        let held = beside.map(|_| self.semantic.read_index());
        // The query's vector and the vectors' search, by whichever thread comes to it first:
        // in two parts through the table's lists, or whole.
        let by_vectors = OnceLock::new();
        let prepare = |embedder: &Embedder, table| {
            let table: &vectors::VectorIndex = table;
            let vector =
                semantic::Semantic::query_vector(embedder, query, context, CONTEXT_VECTOR_WEIGHT);
            let search = match table.parted(&vector, pool, filter, None) {
                Some(parted) => Nearest::Parted(parted),
                None => Nearest::Found(table.nearest(&vector, pool, filter, None)),
            };
            (vector, search)
        };
        let vector_part = |(_, search): &(Quantised, Nearest)| {
            if let Nearest::Parted(parted) = search {
                parted.work();
            }
        };
        let counted_beside = Mutex::new(None);
        let beside_work = |embedder: &Embedder, counted, table| {
            // The first part of the lists, then the segments of BM25 not yet begun, then
            // the second part unless the other thread took it: at a million entries, the
            // two threads end about together.
            let prepared = by_vectors.get_or_init(|| prepare(embedder, table));
            vector_part(prepared);
            if let Some(top) = &top_search {
                top.work();
            }
            vector_part(prepared);
            *counted_beside.lock().unwrap_or_else(|p| p.into_inner()) = count_unless_taken(counted);
        };
        let this_work = || {
            // With a thread beside, the two share BM25's segments and the vectors' parts,
            // and this one prepares the vectors' search if the other has not begun it (a
            // thread woken on the other core may start late); else BM25 may start one of
            // its own.
            match (&top_search, beside) {
                (Some(top), Some(_)) => top.work(),
                (Some(top), None) => top.work_parted(),
                (None, _) => {}
            }
            if let (Some((embedder, _)), Some(table)) = (beside, held.as_deref()) {
                let prepared = by_vectors.get_or_init(|| prepare(embedder, table));
                vector_part(prepared);
                vector_part(prepared);
            }
            (
                counted.map_or(Ok(None), make_generators),
                counted.and_then(count_unless_taken),
            )
        };

        // What follows both searches, in two steps the helper shares too (`stages`): each
        // candidate's coverage of the query (the index's segments apart) and, for BM25's
        // candidates the vectors did not bring, its cosine; then the entries shown, read
        // and given their snippets.
        let query_idf: Vec<(String, f32)> =
            query_terms.iter().map(|t| (t.clone(), idf(t))).collect();
        let idf_total: f32 = query_idf.iter().map(|(_, w)| w).sum();
        let query_words: Vec<&str> = query_terms.iter().map(String::as_str).collect();
        let cosines_of = |vector: &Quantised, ids: &[Ulid]| match held.as_deref() {
            // The table read for the search is still held: not read again.
            Some(table) => table.cosines(vector, ids),
            None => self.semantic.cosines(vector, ids),
        };
        let cover = |item: &Cover| -> Result<Covered> {
            match item {
                Cover::Segment {
                    ord,
                    placed,
                    unplaced,
                } => {
                    let mut docs = placed.clone();
                    docs.extend(idx.docs_in_segment(&searcher, *ord, unplaced)?);
                    let addresses: Vec<DocAddress> = docs.iter().map(|(_, d)| *d).collect();
                    let present = idx.terms_present(&searcher, &addresses, &query_words)?;
                    let covered = docs
                        .into_iter()
                        .zip(present)
                        .map(|((id, _), flags)| {
                            let weight: f32 = flags
                                .iter()
                                .zip(&query_idf)
                                .filter(|(present, _)| **present)
                                .map(|(_, (_, w))| w)
                                .sum();
                            (id, weight / idf_total)
                        })
                        .collect();
                    Ok(Covered::Segment(covered))
                }
                Cover::Cosines(vector, ids) => Ok(Covered::Cosines(
                    ids.iter()
                        .copied()
                        .zip(cosines_of(vector, ids))
                        .map(|(id, cosine)| (id, cosine.unwrap_or(0.0)))
                        .collect(),
                )),
            }
        };
        let covering: Stage<Cover, Result<Covered>> = Stage::new();
        let snippets: OnceLock<Option<text::Snippets>> = OnceLock::new();
        let show = |&(score, id): &(f32, Ulid)| -> Result<Option<SearchResult>> {
            let generators = snippets.get().and_then(Option::as_ref);
            Ok(self.get(&id)?.map(|entry| shown(entry, score, generators)))
        };
        let showing: Stage<(f32, Ulid), Result<Option<SearchResult>>> = Stage::new();
        let ended = Flag::default();
        let beside_done = Flag::default();

        let finish = |generators: tantivy::Result<Option<text::Snippets>>,
                      counted_here: Option<tantivy::Result<u64>>|
         -> Result<SearchOutcome> {
            let counted_beside =
                std::mem::take(&mut *counted_beside.lock().unwrap_or_else(|p| p.into_inner()));
            let total = counted_here.or(counted_beside).unwrap_or(Ok(0));
            let by_vectors = match by_vectors.get() {
                Some((vector, Nearest::Parted(parted))) => Some((vector.clone(), parted.results())),
                Some((vector, Nearest::Found(found))) => Some((vector.clone(), found.clone())),
                None => embedder.as_deref().map(by_meaning),
            };
            let hits = top_search
                .as_ref()
                .map_or(Ok(Vec::new()), text::TopSearch::hits);
            let (mut hits, mut total, mut generators) = (hits?, total?, generators?);
            if let (Some(_), Some(full), Some(counted_full)) = (&narrowed, &full, counted_full)
                && hits.len() < pool
            {
                hits = idx.top(&searcher, full, pool)?;
                total = count(counted_full)?;
                generators = make_generators(counted_full)?;
            }
            let _ = snippets.set(generators);
            let bm25: HashMap<Ulid, f32> = hits.iter().map(|h| (h.id, h.score)).collect();
            let top = hits
                .first()
                .map(|h| h.score)
                .unwrap_or(1.0)
                .max(f32::EPSILON);
            let mut candidates: Vec<Ulid> = hits.iter().map(|h| h.id).collect();

            let mut cosines: HashMap<Ulid, f32> = HashMap::new();
            let mut lexical_cosines = None;
            if let Some((vector, nearest)) = by_vectors {
                for (id, cosine) in nearest {
                    if cosine < SEARCH_COSINE_MIN {
                        continue;
                    }
                    if !bm25.contains_key(&id) {
                        total += 1;
                        candidates.push(id);
                    }
                    cosines.insert(id, cosine);
                }
                let lexical_only: Vec<Ulid> = candidates
                    .iter()
                    .filter(|id| !cosines.contains_key(id))
                    .copied()
                    .collect();
                if !lexical_only.is_empty() {
                    lexical_cosines = Some(Cover::Cosines(vector, lexical_only));
                }
            }
            if candidates.is_empty() {
                let mut o = outcome(total, Vec::new());
                o.hint = NO_MATCH_HINT.into();
                return Ok(o);
            }
            // Coverage, the idf-weighted share of the query's words an entry contains,
            // from the index's postings: BM25's hits say where they are, the vectors'
            // are looked up in each segment. The segments first, the most entries
            // first, the cosines last.
            let mut items = Vec::new();
            if idf_total > 0.0 {
                let unplaced: Vec<Ulid> = candidates
                    .iter()
                    .filter(|id| !bm25.contains_key(id))
                    .copied()
                    .collect();
                for ord in text::largest_first(&searcher) {
                    let placed: Vec<(Ulid, DocAddress)> = hits
                        .iter()
                        .filter(|h| h.doc.segment_ord == ord)
                        .map(|h| (h.id, h.doc))
                        .collect();
                    if !placed.is_empty() || !unplaced.is_empty() {
                        items.push(Cover::Segment {
                            ord,
                            placed,
                            unplaced: unplaced.clone(),
                        });
                    }
                }
            }
            items.extend(lexical_cosines);
            let mut coverage: HashMap<Ulid, f32> = HashMap::new();
            for covered in covering.run(items, &cover) {
                match covered? {
                    // An entry has one live document: in one segment.
                    Covered::Segment(found) => {
                        for (id, share) in found {
                            coverage.entry(id).or_insert(share);
                        }
                    }
                    Covered::Cosines(found) => cosines.extend(found),
                }
            }
            let score_of = |id: &Ulid, coverage: f32| {
                let bm25_score = bm25.get(id).copied().unwrap_or(0.0);
                let lexical =
                    COVERAGE_SHARE * coverage + (1.0 - COVERAGE_SHARE) * (bm25_score / top);
                let score = match (&embedder, ranking) {
                    (None, _) => lexical,
                    (Some(_), Ranking::Semantic) => meaning(cosines[id]),
                    (Some(_), _) => fuse(lexical, cosines[id]),
                };
                // BM25 alone ranks by the score as shown, then by BM25; by meaning, the
                // score itself decides (rounding it would hand ties to incidental words).
                let rank = if embedder.is_some() {
                    f64::from(score)
                } else {
                    round2(score)
                };
                (rank, bm25_score, score)
            };
            let mut ranked: Vec<((f64, f32), f32, Ulid)> = candidates
                .iter()
                .map(|id| {
                    let (rank, bm25_score, score) =
                        score_of(id, coverage.get(id).copied().unwrap_or(0.0));
                    ((rank, bm25_score), score, *id)
                })
                .collect();
            ranked.sort_by(|a, b| b.0.0.total_cmp(&a.0.0).then(b.0.1.total_cmp(&a.0.1)));
            // The first `limit` read side by side; an entry removed since the search
            // makes room for the next.
            let mut ranked = ranked.into_iter().map(|(_, score, id)| (score, id));
            let first: Vec<(f32, Ulid)> = ranked.by_ref().take(limit).collect();
            let mut results = Vec::with_capacity(limit);
            for result in showing.run(first, &show) {
                results.extend(result?);
            }
            for next in ranked {
                if results.len() == limit {
                    break;
                }
                results.extend(show(&next)?);
            }
            Ok(outcome(total, results))
        };
        match (beside.zip(held.as_deref()), text::helpers()) {
            (Some(((embedder, counted), table)), Some(helpers))
                if helpers.current_thread_index().is_none() =>
            {
                helpers.in_place_scope(|scope| {
                    let _end = ended.raise_on_drop();
                    scope.spawn(|_| {
                        {
                            let _done = beside_done.raise_on_drop();
                            beside_work(embedder, counted, table);
                        }
                        covering.help(&ended, &cover);
                        showing.help(&ended, &show);
                    });
                    let (generators, counted_here) = this_work();
                    beside_done.wait();
                    finish(generators, counted_here)
                })
            }
            (Some(((embedder, counted), table)), _) => {
                let (generators, counted_here) = this_work();
                beside_work(embedder, counted, table);
                finish(generators, counted_here)
            }
            (None, _) => {
                let (generators, counted_here) = this_work();
                finish(generators, counted_here)
            }
        }
    }
}

/// An item of coverage's step: a segment's candidates (BM25's, already placed, and the
/// vectors', to look up), or the cosines of BM25's candidates the vectors did not bring.
enum Cover {
    Segment {
        ord: u32,
        placed: Vec<(Ulid, DocAddress)>,
        unplaced: Vec<Ulid>,
    },
    Cosines(Quantised, Vec<Ulid>),
}

/// What a [`Cover`] gives: each candidate's coverage, or its cosine.
enum Covered {
    Segment(Vec<(Ulid, f32)>),
    Cosines(Vec<(Ulid, f32)>),
}

/// An entry as a search result: its best snippet, or its lead when no word was found in
/// its texts.
fn shown(entry: Entry, score: f32, generators: Option<&text::Snippets>) -> SearchResult {
    let tags = entry.tags.join(" ");
    // On a tie, content first, then title, context, tags.
    let texts = [
        (TextField::Body, entry.content.as_str()),
        (TextField::Title, entry.title.as_str()),
        (TextField::Context, entry.context.as_deref().unwrap_or("")),
        (TextField::Tags, tags.as_str()),
    ];
    let best = generators.and_then(|g| g.best(&texts));
    let snippet = match best {
        Some((_, s)) => squash(s.fragment()),
        None => lead(&entry.content, &entry.title),
    };
    SearchResult {
        id: entry.id.to_string(),
        entry_type: entry.entry_type.to_string(),
        title: entry.title,
        score: round2(score),
        snippet,
        tags: entry.tags,
    }
}

/// A cosine as a 0..1 relevance: [`SEARCH_COSINE_MIN`] and below is 0, 1 is 1.
fn meaning(cosine: f32) -> f32 {
    ((cosine - SEARCH_COSINE_MIN) / (1.0 - SEARCH_COSINE_MIN)).clamp(0.0, 1.0)
}

/// A hybrid score, 0..1: the meaning, plus the lexical score beyond [`LEXICAL_FLOOR`] at
/// [`LEXICAL_WEIGHT`]. BM25's candidates for a query in other words match incidental words
/// and cover little of it: below the floor, such matches add nothing.
fn fuse(lexical: f32, cosine: f32) -> f32 {
    let lexical = ((lexical - LEXICAL_FLOOR) / (1.0 - LEXICAL_FLOOR)).max(0.0);
    (meaning(cosine) + LEXICAL_WEIGHT * lexical) / (1.0 + LEXICAL_WEIGHT)
}

/// Drops repeated terms, keeping the first of each.
fn dedup_in_order(terms: &mut Vec<String>) {
    let mut seen = HashSet::new();
    terms.retain(|t| seen.insert(t.clone()));
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
        Some(i) if i > LEAD_MIN_CHARS => format!("{}…", &cut[..i]),
        _ => format!("{cut}…"),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::memory::{EntryType, Memory, NewEntry, NoProgress, SearchQuery};
    use crate::store::Store;
    use tandem_search::testing::test_model;
    use tandem_search::text::SearchTuning;

    /// Hybrid searches on several threads at once, each sharing its steps with the one
    /// helper thread (every table has one with [`SearchTuning::every_path`]), find what
    /// each finds alone: ids, scores, snippets and totals, with a filter, a context and
    /// limits.
    #[test]
    fn hybrid_searches_side_by_side_find_what_each_finds_alone() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path()).unwrap());
        let memory = Memory::open_tuned(store, &NoProgress, SearchTuning::every_path()).unwrap();
        let topics = [
            (
                "Safari date parsing",
                "Safari rejects ISO dates without a T",
                "browser",
            ),
            (
                "Postgres deadlock",
                "update rows in primary key order",
                "database",
            ),
            (
                "nginx upload timeout",
                "raise proxy_read_timeout for slow uploads",
                "proxy",
            ),
            (
                "retry with backoff",
                "capped exponential backoff with jitter",
                "network",
            ),
        ];
        for i in 0..40 {
            let (title, content, tag) = topics[i % topics.len()];
            let entry_type = [EntryType::Bug, EntryType::Pattern][i % 2];
            memory
                .add(NewEntry {
                    entry_type: Some(entry_type),
                    title: format!("{title} {i}"),
                    content: format!("{content}, seen in build {}", i * 7 % 13),
                    tags: vec![tag.into()],
                    ..NewEntry::default()
                })
                .unwrap();
        }
        memory.use_embedder(test_model()).unwrap();
        let search = |query: &str| SearchQuery {
            query: query.into(),
            ..SearchQuery::default()
        };
        let queries = [
            search("the Apple web browser rejects our timestamp format"),
            search("nginx timeout"),
            SearchQuery {
                limit: Some(20),
                ..search("backoff build 7")
            },
            SearchQuery {
                context: Some("two jobs updated the same rows and both waited".into()),
                ..search("postgres deadlock")
            },
            SearchQuery {
                entry_type: Some(EntryType::Bug),
                limit: Some(3),
                ..search("dates")
            },
        ];
        let alone: Vec<_> = queries.iter().map(|q| memory.search(q).unwrap()).collect();
        for found in &alone {
            assert!(!found.results.is_empty(), "{found:#?}");
        }
        std::thread::scope(|scope| {
            for t in 0..4 {
                let (memory, queries, alone) = (&memory, &queries, &alone);
                scope.spawn(move || {
                    for _ in 0..10 {
                        for i in (0..queries.len()).map(|i| (i + t) % queries.len()) {
                            let found = memory.search(&queries[i]).unwrap();
                            assert_eq!(found, alone[i], "{:?}", queries[i].query);
                        }
                    }
                });
            }
        });
    }
}
