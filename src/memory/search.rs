//! Search (`rekall_search`): the query's words, plus its context's most distinctive ones at
//! a lower weight, searched with BM25 over the index (field boosts and filters in
//! [`index::MemoryIndex::plan`]); each hit scored 0..1 from its coverage of the query and its
//! BM25 score relative to the best, and shown with a snippet.

use std::collections::{HashMap, HashSet};

use super::index::{self, TextField};
use super::{
    Memory, MemoryError, Ranking, Result, SearchOutcome, SearchQuery, SearchResult, check_range, round2,
    similarity, squash,
};

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
    pub fn search_ranked(&self, q: &SearchQuery, ranking: Ranking) -> Result<SearchOutcome> {
        match ranking {
            Ranking::Lexical | Ranking::Semantic | Ranking::Hybrid => self.search_lexical(q),
        }
    }

    /// BM25 search with field boosts, filters, normalised scores and snippets.
    fn search_lexical(&self, q: &SearchQuery) -> Result<SearchOutcome> {
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
        let mut weighted: Vec<(String, f32)> = query_terms
            .iter()
            .map(|t| (t.clone(), QUERY_TERM_WEIGHT))
            .collect();
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
            o.hint = NO_WORDS_HINT.into();
            return Ok(o);
        }
        let plan = idx.plan(&weighted, q.entry_type, q.project.as_deref());
        let (hits, total) = idx.search(&searcher, &plan, limit)?;
        if hits.is_empty() {
            let mut o = outcome(total as u64, Vec::new());
            o.hint = NO_MATCH_HINT.into();
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
                let mut present: HashSet<String> = idx
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
