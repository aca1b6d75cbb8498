//! A hybrid search's work once its plans are made ([`Hybrid::run`]): BM25's top hits, its
//! count of matches and its snippet generators on one side, the vectors' nearest on the
//! other; then each candidate's coverage of the query and, for BM25's candidates the
//! vectors did not bring, its cosine; then the results shown. What a result is, how a
//! candidate is scored and how it is shown belong to the caller (the knowledge base), which
//! passes them in.
//!
//! BM25's top hits, its count, the snippet generators and the vectors' nearest do not depend
//! on each other. With both sides and a large vector table, a helper thread
//! ([`text::helpers`]) embeds the query and scores the first of the vectors' two parts
//! ([`vectors::Parted`]) while the searching thread finds BM25's top hits; each then takes
//! the index's segments ([`TopSearch::work`]) and the vectors' part the other has not begun.
//! Two threads, not three on two cores: BM25's own second thread beside the vectors' made
//! the slowest searches slower. On a base large enough for BM25 to read two halves, a
//! thread beside that took its half only after the whole vectors' search ended well after
//! the searching thread; so the two take the segments one at a time, under one floor
//! (`cargo bench --bench scale`, docs/benchmarks.md). The count goes to whichever thread is
//! free first; the searching thread makes the snippet generators. It waits for the helper
//! spinning, not asleep on the scope's end (a thread put to sleep there wakes late), and
//! the helper stays for the steps after, coverage and showing ([`crate::stages`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use tantivy::{DocAddress, Searcher, TantivyError};
use ulid::Ulid;

use crate::quantised::Quantised;
use crate::stages::{Flag, Stage};
use crate::text::{self, Hit, SearchPlan, Snippets, TextIndex, TopSearch};
use crate::vectors::{self, Filter, VectorIndex};

/// A hybrid search, its plans made: its two sides, the query's words for coverage, and
/// how many candidates and results it takes.
pub struct Hybrid<'a> {
    pub index: &'a TextIndex,
    pub searcher: &'a Searcher,
    pub text: TextSide<'a>,
    /// `None` without an embedding model: BM25 alone.
    pub vectors: Option<VectorSide<'a>>,
    pub coverage: Coverage<'a>,
    /// The candidates each side brings: BM25's top hits, the vectors' nearest.
    pub pool: usize,
    /// The results shown.
    pub limit: usize,
    /// A snippet's length, in characters.
    pub snippet_chars: usize,
}

/// BM25's side of a [`Hybrid`] search.
pub struct TextSide<'a> {
    /// The top hits' search, of the narrowed plan when there is one; `None` when BM25 does
    /// not rank (the query has no word, or the ranking is by meaning alone).
    pub top: Option<TopSearch<'a>>,
    /// The plan whose matches the total counts and whose words the snippets highlight;
    /// `None` when the query has no word.
    pub counted: Option<&'a SearchPlan>,
    /// With a narrowed plan: the full plan and the plan counted with it, searched instead
    /// when the narrowed plan finds fewer hits than the pool.
    pub fallback: Option<(&'a SearchPlan, &'a SearchPlan)>,
}

/// The vectors' side of a [`Hybrid`] search.
pub struct VectorSide<'a> {
    /// Makes the query's vector, on whichever thread comes to it first.
    pub vector: &'a (dyn Fn() -> Quantised + Sync),
    pub filter: Filter<'a>,
    /// The vectors' candidates below this cosine are no match by meaning.
    pub cosine_min: f32,
    /// The table, held for the whole search when a thread beside searches it with this
    /// one: both score its lists, and the candidates' cosines are read from it, so it is
    /// read once. `None` on a small table, searched by this thread alone. Held only when
    /// the text side has a plan to count, the thread beside's share.
    pub held: Option<&'a VectorIndex>,
    /// The table read under its owner's lock, each time: when it is not held.
    pub table: &'a (dyn Table + Sync),
}

/// A vector table its owner reads under a lock of its own.
pub trait Table {
    /// [`VectorIndex::nearest`], no document skipped.
    fn nearest(&self, query: &Quantised, k: usize, filter: Filter<'_>) -> Vec<(Ulid, f32)>;
    /// [`VectorIndex::cosines`].
    fn cosines(&self, query: &Quantised, ids: &[Ulid]) -> Vec<Option<f32>>;
}

/// The query's words as coverage counts them: analysed terms, each with its weight (its
/// idf). A candidate's coverage is the weight of the words it holds over the weight of all.
pub struct Coverage<'a> {
    pub terms: &'a [&'a str],
    pub weights: &'a [f32],
}

/// The candidates of a [`Hybrid`] search, for its caller to score and rank.
pub struct Candidates {
    /// BM25's hits, best first, then the vectors' others, nearest first.
    pub ids: Vec<Ulid>,
    /// BM25's raw score of each of its hits.
    pub bm25: HashMap<Ulid, f32>,
    /// The best BM25 score; `None` without hits.
    pub best_bm25: Option<f32>,
    /// Each candidate's coverage of the query, 0..1; missing is 0.
    pub coverage: HashMap<Ulid, f32>,
    /// Each candidate's cosine with the query's vector (0 without a row) when the vectors
    /// were searched; else empty.
    pub cosines: HashMap<Ulid, f32>,
}

/// What a [`Hybrid`] search found.
pub struct HybridResults<T> {
    /// BM25's matches (every word counted) and the vectors' other candidates.
    pub total: u64,
    /// The results shown, up to the limit; `None` when the search found no candidate.
    pub shown: Option<Vec<T>>,
}

impl Hybrid<'_> {
    /// Runs the search: the two sides (with a thread beside when [`VectorSide::held`]),
    /// coverage, `rank` (the candidates' scores and order, on this thread), and `show` on
    /// the first [`Hybrid::limit`] ranked (on both threads; an item it finds gone makes room
    /// for the next).
    pub fn run<T, E, R, S>(
        &self,
        rank: impl FnOnce(&Candidates) -> R,
        show: &S,
    ) -> Result<HybridResults<T>, E>
    where
        T: Send,
        E: From<TantivyError> + Send,
        R: IntoIterator<Item = (f32, Ulid)>,
        S: Fn(&(f32, Ulid), Option<&Snippets>) -> Result<Option<T>, E> + Sync,
    {
        let run = Run::new(self);
        let show_item =
            |item: &(f32, Ulid)| show(item, run.snippets.get().and_then(Option::as_ref));
        match (self.beside(), text::helpers()) {
            (Some(beside), Some(helpers)) if helpers.current_thread_index().is_none() => helpers
                .in_place_scope(|scope| {
                    let _end = run.ended.raise_on_drop();
                    scope.spawn(|_| run.help(beside, &show_item));
                    let here = run.search_here();
                    run.beside_done.wait();
                    run.finish(here, rank, &show_item)
                }),
            (Some(beside), _) => {
                let here = run.search_here();
                run.search_beside(beside);
                run.finish(here, rank, &show_item)
            }
            (None, _) => {
                let here = run.search_here();
                run.finish(here, rank, &show_item)
            }
        }
    }

    /// The vectors' side and the table a thread beside searches, and the plan it may
    /// count, when the table is held.
    fn beside(&self) -> Option<Beside<'_>> {
        let vectors = self.vectors.as_ref()?;
        Some(Beside {
            vectors,
            table: vectors.held?,
            counted: self.text.counted?,
        })
    }
}

/// The share of a thread beside: the vectors' side, its table, and the plan to count.
#[derive(Clone, Copy)]
struct Beside<'h> {
    vectors: &'h VectorSide<'h>,
    table: &'h VectorIndex,
    counted: &'h SearchPlan,
}

/// The vectors' search: in two parts through the table's lists, or found whole.
enum Nearest<'a> {
    Parted(vectors::Parted<'a>),
    Found(Vec<(Ulid, f32)>),
}

/// The query's vector and the vectors' nearest documents, with their cosines.
type Nearby = (Quantised, Vec<(Ulid, f32)>);

/// What the searching thread's share gives: the snippet generators, and the count unless
/// the thread beside took it.
struct Here {
    generators: tantivy::Result<Option<Snippets>>,
    total: Option<tantivy::Result<u64>>,
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

/// One run of a [`Hybrid`] search: what its threads share.
struct Run<'h, T, E> {
    search: &'h Hybrid<'h>,
    /// The sum of the coverage weights.
    weight_total: f32,
    /// The query's vector and the vectors' search, by whichever thread comes to it first.
    nearest: OnceLock<(Quantised, Nearest<'h>)>,
    /// Raised by the thread that takes the count.
    counting: AtomicBool,
    /// The count, when the thread beside took it.
    counted_beside: Mutex<Option<tantivy::Result<u64>>>,
    covering: Stage<Cover, Result<Covered, E>>,
    snippets: OnceLock<Option<Snippets>>,
    showing: Stage<(f32, Ulid), Result<Option<T>, E>>,
    /// Raised when the search ends, on every way out: the helper stops waiting for a step.
    ended: Flag,
    /// Raised when the thread beside is done with its share of the searches.
    beside_done: Flag,
}

impl<'h, T: Send, E: From<TantivyError> + Send> Run<'h, T, E> {
    fn new(search: &'h Hybrid<'h>) -> Run<'h, T, E> {
        Run {
            search,
            weight_total: search.coverage.weights.iter().sum(),
            nearest: OnceLock::new(),
            counting: AtomicBool::new(false),
            counted_beside: Mutex::new(None),
            covering: Stage::new(),
            snippets: OnceLock::new(),
            showing: Stage::new(),
            ended: Flag::default(),
            beside_done: Flag::default(),
        }
    }

    /// The searching thread's share. With a thread beside, the two share BM25's segments
    /// and the vectors' parts, and this one prepares the vectors' search if the other has
    /// not begun it (a thread woken on the other core may start late); else BM25 may start
    /// one of its own ([`TopSearch::work_parted`]).
    fn search_here(&self) -> Here {
        let beside = self.search.beside();
        match (&self.search.text.top, beside) {
            (Some(top), Some(_)) => top.work(),
            (Some(top), None) => top.work_parted(),
            (None, _) => {}
        }
        if let Some(beside) = beside {
            let nearest = self.nearest(beside);
            vector_part(nearest);
            vector_part(nearest);
        }
        let counted = self.search.text.counted;
        Here {
            generators: counted.map_or(Ok(None), |plan| self.generators(plan)),
            total: counted.and_then(|plan| self.count_unless_taken(plan)),
        }
    }

    /// The thread beside's share: the first part of the lists, then the segments of BM25
    /// not yet begun, then the second part unless the other thread took it, so that the
    /// two threads end about together (`cargo bench --bench scale`); then the count, unless
    /// taken.
    fn search_beside(&self, beside: Beside<'h>) {
        let nearest = self.nearest(beside);
        vector_part(nearest);
        if let Some(top) = &self.search.text.top {
            top.work();
        }
        vector_part(nearest);
        *lock(&self.counted_beside) = self.count_unless_taken(beside.counted);
    }

    /// The helper thread: its share of the searches, then the steps after.
    fn help(
        &self,
        beside: Beside<'h>,
        show: &(impl Fn(&(f32, Ulid)) -> Result<Option<T>, E> + Sync),
    ) {
        {
            let _done = self.beside_done.raise_on_drop();
            self.search_beside(beside);
        }
        self.covering
            .help(&self.ended, &|item: &Cover| self.cover(item));
        self.showing.help(&self.ended, show);
    }

    /// The query's vector and the vectors' search, prepared by the first thread to ask.
    fn nearest(&self, beside: Beside<'h>) -> &(Quantised, Nearest<'h>) {
        self.nearest.get_or_init(|| {
            let (pool, filter) = (self.search.pool, beside.vectors.filter);
            let vector = (beside.vectors.vector)();
            let search = match beside.table.parted(&vector, pool, filter, None) {
                Some(parted) => Nearest::Parted(parted),
                None => Nearest::Found(beside.table.nearest(&vector, pool, filter, None)),
            };
            (vector, search)
        })
    }

    fn count(&self, plan: &SearchPlan) -> tantivy::Result<u64> {
        self.search.index.total(self.search.searcher, plan)
    }

    /// The count, by the first thread to ask.
    fn count_unless_taken(&self, plan: &SearchPlan) -> Option<tantivy::Result<u64>> {
        (!self.counting.swap(true, Ordering::AcqRel)).then(|| self.count(plan))
    }

    fn generators(&self, plan: &SearchPlan) -> tantivy::Result<Option<Snippets>> {
        let search = self.search;
        search
            .index
            .snippets(search.searcher, plan, search.snippet_chars)
            .map(Some)
    }

    /// Once both sides are searched: the candidates, their coverage and cosines, ranked
    /// by `rank`, and the first shown.
    fn finish<R: IntoIterator<Item = (f32, Ulid)>>(
        &self,
        here: Here,
        rank: impl FnOnce(&Candidates) -> R,
        show: &(impl Fn(&(f32, Ulid)) -> Result<Option<T>, E> + Sync),
    ) -> Result<HybridResults<T>, E> {
        let (hits, mut total, nearest) = self.gather(here)?;
        let (mut candidates, cosines_left) = self.candidates(&hits, nearest, &mut total);
        if candidates.ids.is_empty() {
            return Ok(HybridResults { total, shown: None });
        }
        self.cover_all(&hits, &mut candidates, cosines_left)?;
        let shown = self.show(rank(&candidates), show)?;
        Ok(HybridResults {
            total,
            shown: Some(shown),
        })
    }

    /// Both sides' findings: BM25's hits, the total, and the vectors' nearest with the
    /// query's vector (searched now on this thread when no thread beside did). The snippet
    /// generators are kept for [`Run::show`]. A narrowed plan that finds fewer hits than
    /// the pool gives way to the full plan.
    #[allow(clippy::type_complexity)]
    fn gather(
        &self,
        here: Here,
    ) -> Result<(Vec<Hit>, u64, Option<(Quantised, Vec<(Ulid, f32)>)>), E> {
        let search = self.search;
        let counted_beside = std::mem::take(&mut *lock(&self.counted_beside));
        let total = here.total.or(counted_beside).unwrap_or(Ok(0));
        let nearest = match self.nearest.get() {
            Some((vector, Nearest::Parted(parted))) => Some((vector.clone(), parted.results())),
            Some((vector, Nearest::Found(found))) => Some((vector.clone(), found.clone())),
            None => search.vectors.as_ref().map(|side| {
                let vector = (side.vector)();
                let nearest = side.table.nearest(&vector, search.pool, side.filter);
                (vector, nearest)
            }),
        };
        let hits = search
            .text
            .top
            .as_ref()
            .map_or(Ok(Vec::new()), TopSearch::hits);
        let (mut hits, mut total, mut generators) = (hits?, total?, here.generators?);
        if let Some((full, counted_full)) = search.text.fallback
            && hits.len() < search.pool
        {
            hits = search.index.top(search.searcher, full, search.pool)?;
            total = self.count(counted_full)?;
            generators = self.generators(counted_full)?;
        }
        let _ = self.snippets.set(generators);
        Ok((hits, total, nearest))
    }

    /// BM25's hits, then the vectors' nearest at [`VectorSide::cosine_min`] or above that
    /// BM25 did not bring (each counted in `total`); and the cosines still to find, of
    /// BM25's hits the vectors did not bring.
    fn candidates(
        &self,
        hits: &[Hit],
        nearest: Option<Nearby>,
        total: &mut u64,
    ) -> (Candidates, Option<Cover>) {
        let bm25: HashMap<Ulid, f32> = hits.iter().map(|h| (h.id, h.score)).collect();
        let mut ids: Vec<Ulid> = hits.iter().map(|h| h.id).collect();
        let mut cosines: HashMap<Ulid, f32> = HashMap::new();
        let mut cosines_left = None;
        if let (Some(side), Some((vector, nearest))) = (&self.search.vectors, nearest) {
            for (id, cosine) in nearest {
                if cosine < side.cosine_min {
                    continue;
                }
                if !bm25.contains_key(&id) {
                    *total += 1;
                    ids.push(id);
                }
                cosines.insert(id, cosine);
            }
            let lexical_only: Vec<Ulid> = ids
                .iter()
                .filter(|id| !cosines.contains_key(id))
                .copied()
                .collect();
            if !lexical_only.is_empty() {
                cosines_left = Some(Cover::Cosines(vector, lexical_only));
            }
        }
        let candidates = Candidates {
            ids,
            bm25,
            best_bm25: hits.first().map(|h| h.score),
            coverage: HashMap::new(),
            cosines,
        };
        (candidates, cosines_left)
    }

    /// Each candidate's coverage, the weighted share of the query's words it holds, from
    /// the index's postings: BM25's hits say where they are, the vectors' are looked up in
    /// each segment. The segments first, the most documents first, the cosines left last.
    fn cover_all(
        &self,
        hits: &[Hit],
        candidates: &mut Candidates,
        cosines_left: Option<Cover>,
    ) -> Result<(), E> {
        let mut items = Vec::new();
        if self.weight_total > 0.0 {
            let unplaced: Vec<Ulid> = candidates
                .ids
                .iter()
                .filter(|id| !candidates.bm25.contains_key(id))
                .copied()
                .collect();
            for ord in text::largest_first(self.search.searcher) {
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
        items.extend(cosines_left);
        for covered in self.covering.run(items, &|item: &Cover| self.cover(item)) {
            match covered? {
                // An entry has one live document: in one segment.
                Covered::Segment(found) => {
                    for (id, share) in found {
                        candidates.coverage.entry(id).or_insert(share);
                    }
                }
                Covered::Cosines(found) => candidates.cosines.extend(found),
            }
        }
        Ok(())
    }

    /// One item of coverage's step, on either thread.
    fn cover(&self, item: &Cover) -> Result<Covered, E> {
        let (index, searcher) = (self.search.index, self.search.searcher);
        match item {
            Cover::Segment {
                ord,
                placed,
                unplaced,
            } => {
                let mut docs = placed.clone();
                docs.extend(index.docs_in_segment(searcher, *ord, unplaced)?);
                let addresses: Vec<DocAddress> = docs.iter().map(|(_, d)| *d).collect();
                let coverage = &self.search.coverage;
                let present = index.terms_present(searcher, &addresses, coverage.terms)?;
                let covered = docs
                    .into_iter()
                    .zip(present)
                    .map(|((id, _), flags)| {
                        let weight: f32 = flags
                            .iter()
                            .zip(coverage.weights)
                            .filter(|(present, _)| **present)
                            .map(|(_, w)| w)
                            .sum();
                        (id, weight / self.weight_total)
                    })
                    .collect();
                Ok(Covered::Segment(covered))
            }
            Cover::Cosines(vector, ids) => Ok(Covered::Cosines(
                ids.iter()
                    .copied()
                    .zip(self.cosines(vector, ids))
                    .map(|(id, cosine)| (id, cosine.unwrap_or(0.0)))
                    .collect(),
            )),
        }
    }

    /// The cosines of `ids`: from the table held for the search, not read again, or
    /// under the table's lock.
    fn cosines(&self, vector: &Quantised, ids: &[Ulid]) -> Vec<Option<f32>> {
        match &self.search.vectors {
            Some(VectorSide {
                held: Some(table), ..
            }) => table.cosines(vector, ids),
            Some(side) => side.table.cosines(vector, ids),
            None => vec![None; ids.len()],
        }
    }

    /// The first [`Hybrid::limit`] of `ranked` shown side by side; an item `show` finds
    /// gone makes room for the next.
    fn show(
        &self,
        ranked: impl IntoIterator<Item = (f32, Ulid)>,
        show: &(impl Fn(&(f32, Ulid)) -> Result<Option<T>, E> + Sync),
    ) -> Result<Vec<T>, E> {
        let limit = self.search.limit;
        let mut ranked = ranked.into_iter();
        let first: Vec<(f32, Ulid)> = ranked.by_ref().take(limit).collect();
        let mut results = Vec::with_capacity(limit);
        for result in self.showing.run(first, show) {
            results.extend(result?);
        }
        for next in ranked {
            if results.len() == limit {
                break;
            }
            results.extend(show(&next)?);
        }
        Ok(results)
    }
}

/// Scores a part of the vectors' search that no thread took, if any is left.
fn vector_part((_, nearest): &(Quantised, Nearest<'_>)) {
    if let Nearest::Parted(parted) = nearest {
        parted.work();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
