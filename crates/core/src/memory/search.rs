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
//!
//! This module makes a search's terms and plans, scores and ranks its candidates and shows
//! the results; the engine's [`Hybrid::run`] runs it, on two threads when the vectors'
//! table is large (`tandem_search::hybrid`).

use std::collections::HashSet;

use tantivy::Searcher;
use ulid::Ulid;

use super::semantic::Semantic;
use super::{
    Entry, EntryType, Memory, MemoryError, Ranking, Result, SearchOutcome, SearchQuery,
    SearchResult, check_range, round2, similarity, squash,
};
use tandem_search::hybrid::{self, Candidates, Coverage, Hybrid, TextSide, VectorSide};
use tandem_search::quantised::Quantised;
use tandem_search::text::{self, SearchPlan, TextField, TextIndex};
use tandem_search::vectors::Filter;

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
        let terms = Terms::new(idx, &searcher, query, context);
        if terms.weighted.is_empty() && embedder.is_none() {
            return Ok(outcome(q, 0, Vec::new(), NO_WORDS_HINT));
        }
        // With vectors, each side brings a pool of candidates, and the best of their union
        // by the fused score are shown; BM25 alone shows its own top hits.
        let pool = if embedder.is_some() {
            (limit * POOL_PER_RESULT).max(POOL_MIN)
        } else {
            limit
        };
        let filter = Filter {
            kind: q.entry_type.map(EntryType::kind),
            group: q.project.as_deref(),
        };
        let lexical = !terms.weighted.is_empty() && ranking != Ranking::Semantic;
        let plans = Plans::new(idx, &searcher, &terms.weighted, lexical, filter);
        let top = plans
            .searched()
            .map(|plan| idx.top_search(&searcher, plan, pool))
            .transpose()?;
        // With a thread beside, the table is read once for the search (both threads score
        // its lists, and the candidates' cosines are read from it).
        let large = self.index.tuning().vectors_always_beside || self.semantic.is_large();
        let held = (large && embedder.is_some() && plans.counted().is_some())
            .then(|| self.semantic.read_index());
        let query_vector = embedder.as_deref().map(|embedder| {
            move || Semantic::query_vector(embedder, query, context, CONTEXT_VECTOR_WEIGHT)
        });
        let coverage_terms: Vec<&str> = terms.query.iter().map(String::as_str).collect();
        let search = Hybrid {
            index: idx,
            searcher: &searcher,
            text: TextSide {
                top,
                counted: plans.counted(),
                fallback: plans.fallback(),
            },
            vectors: query_vector.as_ref().map(|vector| VectorSide {
                vector,
                filter,
                cosine_min: SEARCH_COSINE_MIN,
                held: held.as_deref(),
                table: &self.semantic,
            }),
            coverage: Coverage {
                terms: &coverage_terms,
                weights: &terms.query_idf,
            },
            pool,
            limit,
            snippet_chars: SNIPPET_CHARS,
        };
        let scoring = Scoring::of(embedder.is_some(), ranking);
        let show =
            |item: &(f32, Ulid), generators: Option<&text::Snippets>| self.result(item, generators);
        let found = search.run(|candidates| ranked(candidates, scoring), &show)?;
        Ok(match found.shown {
            Some(results) => outcome(q, found.total, results, HINT),
            None => outcome(q, found.total, Vec::new(), NO_MATCH_HINT),
        })
    }

    /// The entry `id` as a result, `None` when it was removed since the search.
    fn result(
        &self,
        &(score, id): &(f32, Ulid),
        generators: Option<&text::Snippets>,
    ) -> Result<Option<SearchResult>> {
        Ok(self.get(&id)?.map(|entry| shown(entry, score, generators)))
    }
}

fn outcome(q: &SearchQuery, total: u64, results: Vec<SearchResult>, hint: &str) -> SearchOutcome {
    SearchOutcome {
        query: q.query.clone(),
        total,
        results,
        hint: hint.to_string(),
    }
}

/// A search's words: the query's own, each with its idf for coverage, and the weighted
/// terms BM25 searches (the query's, then its context's most distinctive).
struct Terms {
    query: Vec<String>,
    query_idf: Vec<f32>,
    weighted: Vec<(String, f32)>,
}

impl Terms {
    fn new(idx: &TextIndex, searcher: &Searcher, query: &str, context: Option<&str>) -> Terms {
        let n_docs = idx.num_docs(searcher).max(1);
        let mut query_terms: Vec<String> = idx.terms(query);
        dedup_in_order(&mut query_terms);
        let mut weighted: Vec<(String, f32)> = query_terms
            .iter()
            .map(|t| (t.clone(), QUERY_TERM_WEIGHT))
            .collect();
        if let Some(context) = context {
            add_context_terms(idx, searcher, n_docs, context, &query_terms, &mut weighted);
        }
        let query_idf = query_terms
            .iter()
            .map(|t| similarity::idf(n_docs, idx.doc_freq(searcher, t)))
            .collect();
        Terms {
            query: query_terms,
            query_idf,
            weighted,
        }
    }
}

/// Adds to `weighted` up to [`CONTEXT_TERMS`] of the context's at
/// [`CONTEXT_TERM_WEIGHT`]: the most distinctive first (the highest idf), while their
/// postings fit the index's budget. A dozen context words that many entries hold made a
/// search on a large base read most of the index (`cargo bench --bench scale`).
fn add_context_terms(
    idx: &TextIndex,
    searcher: &Searcher,
    n_docs: u64,
    context: &str,
    query_terms: &[String],
    weighted: &mut Vec<(String, f32)>,
) {
    let weight = |postings: u64| similarity::idf(n_docs, postings);
    let mut extra: Vec<(String, u64)> = idx
        .terms(context)
        .into_iter()
        .filter(|t| !query_terms.contains(t))
        .map(|t| {
            let postings = idx.doc_freq(searcher, &t);
            (t, postings)
        })
        .collect();
    extra.sort_by(|a, b| {
        weight(b.1)
            .total_cmp(&weight(a.1))
            .then_with(|| a.0.cmp(&b.0))
    });
    extra.dedup_by(|a, b| a.0 == b.0);
    let mut budget = idx.context_postings(searcher);
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

/// A search's BM25 plans.
struct Plans {
    /// Every weighted term but the ubiquitous ones (`None` when BM25 does not rank).
    full: Option<SearchPlan>,
    /// Every weighted term, when the full plan leaves some out: every word of the query
    /// counts in `total` and is highlighted in the snippets.
    every_word: Option<SearchPlan>,
    /// On a large index, a query of common words only reads the entries holding them all
    /// first; the full plan when they are too few ([`hybrid::TextSide::fallback`]).
    narrowed: Option<SearchPlan>,
}

impl Plans {
    fn new(
        idx: &TextIndex,
        searcher: &Searcher,
        weighted: &[(String, f32)],
        lexical: bool,
        filter: Filter<'_>,
    ) -> Plans {
        let scored = if lexical {
            idx.without_ubiquitous(searcher, weighted)
        } else {
            Vec::new()
        };
        let plan = |terms: &[(String, f32)]| idx.plan(terms, filter.kind, filter.group);
        let full = lexical.then(|| plan(&scored));
        let every_word = (scored.len() < weighted.len()).then(|| plan(weighted));
        let narrowed = full
            .as_ref()
            .and_then(|_| idx.plan_narrowed(searcher, weighted, filter.kind, filter.group));
        Plans {
            full,
            every_word,
            narrowed,
        }
    }

    /// The plan BM25's top hits are searched with.
    fn searched(&self) -> Option<&SearchPlan> {
        self.narrowed.as_ref().or(self.full.as_ref())
    }

    /// The plan the total counts, of every word: the narrowed plan holds every word.
    fn counted(&self) -> Option<&SearchPlan> {
        self.narrowed.as_ref().or(self.counted_full())
    }

    fn counted_full(&self) -> Option<&SearchPlan> {
        self.every_word.as_ref().or(self.full.as_ref())
    }

    /// With a narrowed plan, the full plan and the one counted with it.
    fn fallback(&self) -> Option<(&SearchPlan, &SearchPlan)> {
        self.narrowed.as_ref()?;
        Some((self.full.as_ref()?, self.counted_full()?))
    }
}

/// How a candidate's score is made.
#[derive(Clone, Copy)]
enum Scoring {
    /// BM25 alone (no model): the lexical score.
    Lexical,
    /// By meaning alone: the cosine ([`meaning`]).
    Meaning,
    /// Hybrid: the lexical score and the cosine, fused ([`fuse`]).
    Fused,
}

impl Scoring {
    fn of(with_model: bool, ranking: Ranking) -> Scoring {
        match (with_model, ranking) {
            (false, _) => Scoring::Lexical,
            (true, Ranking::Semantic) => Scoring::Meaning,
            (true, _) => Scoring::Fused,
        }
    }
}

/// The candidates' scores, the best first. The lexical score is [`COVERAGE_SHARE`] from
/// coverage, the rest from BM25 relative to the best hit. BM25 alone ranks by the score as
/// shown, then by BM25; by meaning, the score itself decides (rounding it would hand ties
/// to incidental words).
fn ranked(c: &Candidates, scoring: Scoring) -> impl Iterator<Item = (f32, Ulid)> + use<> {
    let top = c.best_bm25.unwrap_or(1.0).max(f32::EPSILON);
    let score_of = |id: &Ulid, coverage: f32| {
        let bm25_score = c.bm25.get(id).copied().unwrap_or(0.0);
        let lexical = COVERAGE_SHARE * coverage + (1.0 - COVERAGE_SHARE) * (bm25_score / top);
        let score = match scoring {
            Scoring::Lexical => lexical,
            Scoring::Meaning => meaning(c.cosines[id]),
            Scoring::Fused => fuse(lexical, c.cosines[id]),
        };
        let rank = match scoring {
            Scoring::Lexical => round2(score),
            Scoring::Meaning | Scoring::Fused => f64::from(score),
        };
        (rank, bm25_score, score)
    };
    let mut ranked: Vec<((f64, f32), f32, Ulid)> = c
        .ids
        .iter()
        .map(|id| {
            let (rank, bm25_score, score) =
                score_of(id, c.coverage.get(id).copied().unwrap_or(0.0));
            ((rank, bm25_score), score, *id)
        })
        .collect();
    ranked.sort_by(|a, b| b.0.0.total_cmp(&a.0.0).then(b.0.1.total_cmp(&a.0.1)));
    ranked.into_iter().map(|(_, score, id)| (score, id))
}

/// The table as a hybrid search reads it when it does not hold it: under its lock.
impl hybrid::Table for Semantic {
    fn nearest(&self, query: &Quantised, k: usize, filter: Filter<'_>) -> Vec<(Ulid, f32)> {
        Semantic::nearest(self, query, k, filter, None)
    }

    fn cosines(&self, query: &Quantised, ids: &[Ulid]) -> Vec<Option<f32>> {
        Semantic::cosines(self, query, ids)
    }
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
