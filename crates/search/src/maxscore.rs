//! The top hits of a union of weighted terms by MaxScore (Turtle and Flood, 1995): the
//! terms are ordered by the most each can add to a document's BM25 score; once the hits found
//! hold a score that the weakest terms together cannot reach, those terms' postings only
//! complete the score of documents the others bring, and a document whose bound falls short is
//! left before they are read. A query of a distinctive word and common ones then reads the
//! distinctive word's postings and looks the others up, where tantivy's block-max WAND over
//! the union moved every posting list to every candidate (`cargo bench --bench scale`
//! compares the two on a large base).
//!
//! [`WithOptional`] serves words required beside optional ones (a search's context
//! beside words most documents hold): it reads the optional words' postings and looks up the
//! required ones, where tantivy's scorer for that scored every document holding the required.
//! [`Intersection`] finds the top hits of the required words themselves when they have two
//! lists a word (in a document's words and its context).
//!
//! All three search a segment at a time, for the segments to be searched side by side
//! (`index.rs`, `TopSearch`), their hits then [`merge`]d. The scores are tantivy's own (the
//! same `Bm25Weight` per clause, the statistics of the whole index), and ties go to the
//! lower `DocAddress`, as `TopDocs` breaks them; the tests below hold the hits to
//! `TopDocs`'s over a generated index.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU32, Ordering as AtomicOrdering};

use tantivy::fieldnorm::FieldNormReader;
use tantivy::postings::{Postings, SegmentPostings};
use tantivy::query::{Bm25Weight, BooleanQuery, BoostQuery, Occur, Query, TermQuery};
use tantivy::schema::{Field, IndexRecordOption};
use tantivy::{DocAddress, DocId, DocSet, Searcher, SegmentReader, TERMINATED, Term};

/// One alternative of the union: a term of a field, its score scaled by `boost`.
#[derive(Debug, Clone)]
pub struct Clause {
    pub field: Field,
    pub term: String,
    pub boost: f32,
}

impl Clause {
    /// The clause as tantivy's query: its term's BM25, boosted.
    pub fn query(&self) -> Box<dyn Query> {
        let term = TermQuery::new(
            Term::from_field_text(self.field, &self.term),
            IndexRecordOption::WithFreqs,
        );
        Box::new(BoostQuery::new(Box::new(term), self.boost))
    }
}

/// Each group of `groups` (a word's alternatives) required, as tantivy's clauses: their
/// union, a must.
pub fn each_required(groups: &[Vec<Clause>]) -> Vec<(Occur, Box<dyn Query>)> {
    groups
        .iter()
        .map(|group| -> (Occur, Box<dyn Query>) {
            let any = group.iter().map(|c| (Occur::Should, c.query())).collect();
            (Occur::Must, Box::new(BooleanQuery::new(any)))
        })
        .collect()
}

/// Top hits, `(score, address)`, best first.
pub type Top = Vec<(f32, DocAddress)>;

/// The hits a segment's search keeps: the `k` best, none scoring less than what `k` hits
/// of other segments score (`floor`, when segments are searched side by side).
#[derive(Debug, Clone, Copy)]
pub struct HitLimits<'a> {
    pub k: usize,
    pub floor: Option<&'a Floor>,
}

/// The highest `k`-th score of the segments of a search, as they are searched (side by
/// side, each reading the others' as it goes): a hit of another segment that scores less
/// cannot rank. A half searched with a `k`-th score from the start prunes from its first
/// block (`cargo bench --bench scale`).
#[derive(Debug, Default)]
pub struct Floor(AtomicU32);

impl Floor {
    /// What a hit must score more than: a tie with another segment's `k`-th may rank (the
    /// lower address wins it).
    fn get(&self) -> f32 {
        let kth = f32::from_bits(self.0.load(AtomicOrdering::Relaxed));
        if kth > 0.0 {
            kth.next_down()
        } else {
            f32::NEG_INFINITY
        }
    }

    /// A segment's `k`-th score so far.
    fn raise(&self, kth: f32) {
        if kth > 0.0 {
            // Non-negative floats order as their bits.
            self.0.fetch_max(kth.to_bits(), AtomicOrdering::Relaxed);
        }
    }
}

/// The union of clauses, weighed for MaxScore: the best `(score, address)` of a segment,
/// best first ([`Union::segment`]).
pub struct Union {
    weights: Vec<(Term, Bm25Weight)>,
}

impl Union {
    /// `None` when fewer than two of the clauses' words are held by any document: a single
    /// word's postings are best skipped block by block on their own maxima, as tantivy's
    /// block-max WAND does.
    pub fn new(searcher: &Searcher, clauses: &[Clause]) -> tantivy::Result<Option<Union>> {
        let mut weights: Vec<(Term, Bm25Weight)> = Vec::with_capacity(clauses.len());
        let mut words: Vec<&str> = Vec::with_capacity(clauses.len());
        for c in clauses {
            if let Some(weighed) = weigh(searcher, c)? {
                weights.push(weighed);
                words.push(&c.term);
            }
        }
        words.sort_unstable();
        words.dedup();
        Ok((words.len() >= 2).then_some(Union { weights }))
    }

    pub fn segment(
        &self,
        ord: u32,
        reader: &SegmentReader,
        want: HitLimits<'_>,
    ) -> tantivy::Result<Top> {
        let mut best = BestHits::new(want);
        let mut cursors = cursors(reader, &self.weights)?;
        let alive = reader.alive_bitset();
        segment(&mut cursors, ord, &mut best, |doc| {
            alive.is_none_or(|a| a.is_alive(doc))
        });
        Ok(best.into_sorted())
    }
}

/// Clauses of every group of `required` (a word's alternatives) and optional ones,
/// weighed: [`WithOptional::segment`] finds the `k` best `(score, address)` of a segment
/// among the documents holding a clause of each group and an optional one at least, scored
/// by every clause they hold, best first. Read from the optional clauses' postings, each
/// document looked up in the required ones: for optional clauses of rare words (a search's
/// context), where the documents holding every required word are many.
pub struct WithOptional {
    required: Vec<Vec<(Term, Bm25Weight)>>,
    optional: Vec<(Term, Bm25Weight)>,
}

impl WithOptional {
    pub fn new(
        searcher: &Searcher,
        required: &[Vec<Clause>],
        optional: &[Clause],
    ) -> tantivy::Result<WithOptional> {
        Ok(WithOptional {
            required: weigh_groups(searcher, required)?,
            optional: weigh_all(searcher, optional)?,
        })
    }

    pub fn segment(
        &self,
        ord: u32,
        reader: &SegmentReader,
        want: HitLimits<'_>,
    ) -> tantivy::Result<Top> {
        let Some(mut required) = groups(reader, &self.required)? else {
            return Ok(Vec::new());
        };
        let mut optional = Group::new(cursors(reader, &self.optional)?);
        let mut best = BestHits::new(want);
        let alive = reader.alive_bitset();
        'docs: loop {
            let doc = optional.doc();
            if doc == TERMINATED {
                break;
            }
            let mut score = optional.take(doc);
            for group in required.iter_mut() {
                match group.at(doc) {
                    Ok(part) => score += part,
                    Err(_) => continue 'docs,
                }
            }
            if alive.is_none_or(|a| a.is_alive(doc)) {
                best.offer(score, DocAddress::new(ord, doc));
            }
        }
        Ok(best.into_sorted())
    }
}

/// Each group of clauses (a word's alternatives) required, weighed:
/// [`Intersection::segment`] finds the `k` best `(score, address)` of a segment among the
/// documents holding a clause of every group, scored by every clause they hold, best first.
/// It reads the rarest group's postings and looks each document up in the others', unless its
/// score so far and the most the other groups add cannot reach the hits found. For words
/// most documents hold in either of two fields (a document's words and its context): tantivy
/// scores an intersection of unions without pruning, each union's postings gathered window
/// by window, where it prunes an intersection of single terms block by block.
pub struct Intersection {
    groups: Vec<Vec<(Term, Bm25Weight)>>,
}

/// A group of [`Intersection`] in one segment.
struct Group {
    cursors: Vec<Cursor>,
    /// The most its clauses add together.
    most: f32,
    postings: u32,
}

impl Group {
    fn new(cursors: Vec<Cursor>) -> Group {
        Group {
            most: cursors.iter().map(|c| c.most).sum(),
            postings: cursors.iter().map(|c| c.postings.doc_freq()).sum(),
            cursors,
        }
    }

    /// The document of the group's that comes first.
    fn doc(&self) -> DocId {
        self.cursors
            .iter()
            .map(|c| c.postings.doc())
            .min()
            .unwrap_or(TERMINATED)
    }

    /// The parts of the clauses holding `doc`, the group's first, those cursors moved on.
    fn take(&mut self, doc: DocId) -> f32 {
        let mut score = 0.0;
        for c in self.cursors.iter_mut() {
            if c.postings.doc() == doc {
                score += c.score();
                c.postings.advance();
            }
        }
        score
    }

    /// Every cursor moved to `doc` or past it (none moves back).
    fn seek(&mut self, doc: DocId) {
        for c in self.cursors.iter_mut() {
            if c.postings.doc() < doc {
                c.postings.seek(doc);
            }
        }
    }

    /// The parts of the clauses holding `doc`, the cursors moved to it or past; `Err`
    /// with the group's next document when none holds it.
    fn at(&mut self, doc: DocId) -> Result<f32, DocId> {
        self.seek(doc);
        let (mut score, mut held, mut next) = (0.0, false, TERMINATED);
        for c in &self.cursors {
            if c.postings.doc() == doc {
                score += c.score();
                held = true;
            } else {
                next = next.min(c.postings.doc());
            }
        }
        if held { Ok(score) } else { Err(next) }
    }
}

impl Intersection {
    /// `None` when each group has one list at most in the index: see
    /// [`Intersection::segment`].
    pub fn new(
        searcher: &Searcher,
        required: &[Vec<Clause>],
    ) -> tantivy::Result<Option<Intersection>> {
        let groups = weigh_groups(searcher, required)?;
        Ok(groups
            .iter()
            .any(|g| g.len() > 1)
            .then_some(Intersection { groups }))
    }

    /// `None` when each group has one list at most in the segment: tantivy's block-max
    /// intersection of single terms reads less then (`cargo bench --bench scale`).
    pub fn segment(
        &self,
        ord: u32,
        reader: &SegmentReader,
        want: HitLimits<'_>,
    ) -> tantivy::Result<Option<Top>> {
        let Some(mut groups) = groups(reader, &self.groups)? else {
            return Ok(Some(Vec::new()));
        };
        if groups.iter().all(|g| g.cursors.len() == 1) {
            return Ok(None);
        }
        groups.sort_by_key(|g| g.postings);
        // `rest[i]`: the most the groups from the `i + 1`-th on add together.
        let mut rest = vec![0.0f32; groups.len()];
        for i in (0..groups.len().saturating_sub(1)).rev() {
            rest[i] = rest[i + 1] + groups[i + 1].most;
        }
        let Some((first, others)) = groups.split_first_mut() else {
            return Ok(Some(Vec::new()));
        };
        let mut best = BestHits::new(want);
        let alive = reader.alive_bitset();
        let mut doc = first.doc();
        'docs: while doc != TERMINATED {
            let threshold = best.threshold();
            let mut score = first.take(doc);
            for (i, group) in others.iter_mut().enumerate() {
                if score + rest[i] <= threshold {
                    doc = first.doc();
                    continue 'docs;
                }
                match group.at(doc) {
                    Ok(part) => score += part,
                    Err(TERMINATED) => break 'docs,
                    Err(next) => {
                        // No document before `next` holds every group.
                        first.seek(next);
                        doc = first.doc();
                        continue 'docs;
                    }
                }
            }
            if alive.is_none_or(|a| a.is_alive(doc)) {
                best.offer(score, DocAddress::new(ord, doc));
            }
            doc = first.doc();
        }
        Ok(Some(best.into_sorted()))
    }
}

/// The best `k` of lists of hits, best first, ties to the lower address; an address in
/// several counts once.
pub fn merge(
    lists: impl IntoIterator<Item = Vec<(f32, DocAddress)>>,
    k: usize,
) -> Vec<(f32, DocAddress)> {
    let mut all: Vec<Ranked> = lists
        .into_iter()
        .flatten()
        .map(|(s, d)| Ranked(s, d))
        .collect();
    all.sort_by(|x, y| y.cmp(x));
    let mut seen = std::collections::HashSet::new();
    all.into_iter()
        .filter(|r| seen.insert(r.1))
        .take(k)
        .map(|Ranked(s, d)| (s, d))
        .collect()
}

/// A clause's term and its BM25 weight, boosted; `None` when no document holds the term.
fn weigh(searcher: &Searcher, c: &Clause) -> tantivy::Result<Option<(Term, Bm25Weight)>> {
    let term = Term::from_field_text(c.field, &c.term);
    if searcher.doc_freq(&term)? == 0 {
        return Ok(None);
    }
    let weight = Bm25Weight::for_terms(searcher, std::slice::from_ref(&term))?;
    Ok(Some((term, weight.boost_by(c.boost))))
}

/// Clauses weighed, those no document holds left out.
fn weigh_all(searcher: &Searcher, clauses: &[Clause]) -> tantivy::Result<Vec<(Term, Bm25Weight)>> {
    let mut weights = Vec::with_capacity(clauses.len());
    for c in clauses {
        weights.extend(weigh(searcher, c)?);
    }
    Ok(weights)
}

/// Each group of clauses (a word's alternatives) weighed.
fn weigh_groups(
    searcher: &Searcher,
    groups: &[Vec<Clause>],
) -> tantivy::Result<Vec<Vec<(Term, Bm25Weight)>>> {
    groups.iter().map(|g| weigh_all(searcher, g)).collect()
}

/// The groups of weighed clauses in one segment; `None` when a group has no list there:
/// no document of the segment holds every group.
fn groups(
    reader: &SegmentReader,
    weights: &[Vec<(Term, Bm25Weight)>],
) -> tantivy::Result<Option<Vec<Group>>> {
    let mut groups = Vec::with_capacity(weights.len());
    for group in weights {
        let cursors = cursors(reader, group)?;
        if cursors.is_empty() {
            return Ok(None);
        }
        groups.push(Group::new(cursors));
    }
    Ok(Some(groups))
}

/// The cursors of weighed clauses in one segment (none for a term the segment lacks).
fn cursors(reader: &SegmentReader, weights: &[(Term, Bm25Weight)]) -> tantivy::Result<Vec<Cursor>> {
    let mut cursors = Vec::with_capacity(weights.len());
    for (term, weight) in weights {
        let inverted = reader.inverted_index(term.field())?;
        if let Some(postings) = inverted.read_postings(term, IndexRecordOption::WithFreqs)? {
            cursors.push(Cursor {
                postings,
                norms: reader.get_fieldnorms_reader(term.field())?,
                most: weight.max_score(),
                weight: weight.clone(),
            });
        }
    }
    Ok(cursors)
}

struct Cursor {
    postings: SegmentPostings,
    norms: FieldNormReader,
    weight: Bm25Weight,
    /// The most this clause adds to a score.
    most: f32,
}

impl Cursor {
    fn score(&self) -> f32 {
        let doc = self.postings.doc();
        self.weight
            .score(self.norms.fieldnorm_id(doc), self.postings.term_freq())
    }
}

/// One segment's hits into `best`.
fn segment(cursors: &mut [Cursor], ord: u32, best: &mut BestHits, alive: impl Fn(DocId) -> bool) {
    cursors.sort_by(|a, b| a.most.total_cmp(&b.most));
    // `upto[i]`: the most the clauses before `i` add together.
    let mut upto = Vec::with_capacity(cursors.len() + 1);
    upto.push(0.0f32);
    for c in cursors.iter() {
        upto.push(upto.last().copied().unwrap_or(0.0) + c.most);
    }
    // The clauses before `essential` cannot bring a hit alone: a document is a candidate
    // when an essential clause holds it.
    let mut essential = 0;
    loop {
        let threshold = best.threshold();
        while essential < cursors.len() && upto[essential + 1] <= threshold {
            essential += 1;
        }
        let Some(doc) = cursors[essential..]
            .iter()
            .map(|c| c.postings.doc())
            .min()
            .filter(|d| *d != TERMINATED)
        else {
            return;
        };
        let mut score = 0.0f32;
        for c in cursors[essential..].iter_mut() {
            if c.postings.doc() == doc {
                score += c.score();
                c.postings.advance();
            }
        }
        let mut reaches = true;
        for i in (0..essential).rev() {
            if score + upto[i + 1] <= threshold {
                reaches = false;
                break;
            }
            let c = &mut cursors[i];
            if c.postings.doc() < doc {
                c.postings.seek(doc);
            }
            if c.postings.doc() == doc {
                score += c.score();
            }
        }
        if reaches && alive(doc) {
            best.offer(score, DocAddress::new(ord, doc));
        }
    }
}

/// A hit ordered as `TopDocs` orders them: the higher score first, on a tie the lower
/// address.
#[derive(Debug, Clone, Copy)]
struct Ranked(f32, DocAddress);

impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0
            .total_cmp(&other.0)
            .then_with(|| other.1.cmp(&self.1))
    }
}

impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Ranked {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Ranked {}

/// The best `k` hits offered, the worst on top of a min-heap.
pub struct BestHits<'a> {
    k: usize,
    heap: BinaryHeap<std::cmp::Reverse<Ranked>>,
    /// The segments' [`Floor`], which this one's `k`-th score raises.
    floor: Option<&'a Floor>,
}

impl<'a> BestHits<'a> {
    pub fn new(want: HitLimits<'a>) -> BestHits<'a> {
        let k = want.k.max(1);
        BestHits {
            k,
            heap: BinaryHeap::with_capacity(k + 1),
            floor: want.floor,
        }
    }

    /// What a hit must score more than to be kept (offered in address order, a tie with
    /// the worst kept loses), at least the floor.
    pub fn threshold(&self) -> f32 {
        let floor = self.floor.map_or(f32::NEG_INFINITY, Floor::get);
        match self.heap.peek() {
            Some(worst) if self.heap.len() == self.k => worst.0.0.max(floor),
            _ => floor,
        }
    }

    pub fn offer(&mut self, score: f32, addr: DocAddress) {
        if score <= self.threshold() {
            return;
        }
        self.heap.push(std::cmp::Reverse(Ranked(score, addr)));
        if self.heap.len() > self.k {
            self.heap.pop();
        }
        if self.heap.len() == self.k
            && let (Some(floor), Some(worst)) = (self.floor, self.heap.peek())
        {
            floor.raise(worst.0.0);
        }
    }

    pub fn into_sorted(self) -> Vec<(f32, DocAddress)> {
        let mut hits: Vec<Ranked> = self.heap.into_iter().map(|r| r.0).collect();
        hits.sort_by(|a, b| b.cmp(a));
        hits.into_iter().map(|Ranked(s, a)| (s, a)).collect()
    }
}

/// Hits found as `expected`, in its order: the same scores (to float rounding), and the
/// same addresses but among hits of equal score. For the tests here and `index.rs`'s.
#[cfg(test)]
pub fn assert_same(q: u64, found: &[(f32, DocAddress)], expected: &[(f32, DocAddress)]) {
    assert_eq!(found.len(), expected.len(), "query {q}");
    for ((s, a), (es, ea)) in found.iter().zip(expected) {
        assert!(
            (s - es).abs() <= es.abs() * 1e-5,
            "query {q}: {s} against {es}"
        );
        if a != ea {
            let tied = expected
                .iter()
                .any(|(x, b)| b == a && (x - s).abs() <= 1e-5);
            assert!(tied, "query {q}: {a:?} found where {ea:?} was expected");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use tantivy::collector::{Collector, TopDocs};
    use tantivy::schema::{STRING, Schema, TEXT};
    use tantivy::{Index, doc};

    fn want(k: usize) -> HitLimits<'static> {
        HitLimits { k, floor: None }
    }

    /// Each segment's hits, merged: as `index.rs` searches them.
    fn merged(
        searcher: &Searcher,
        k: usize,
        segment: impl Fn(u32, &SegmentReader) -> Vec<(f32, DocAddress)>,
    ) -> Vec<(f32, DocAddress)> {
        let found = searcher
            .segment_readers()
            .iter()
            .enumerate()
            .map(|(ord, reader)| segment(ord as u32, reader));
        merge(found, k)
    }

    fn top(searcher: &Searcher, clauses: &[Clause], k: usize) -> Option<Vec<(f32, DocAddress)>> {
        let union = Union::new(searcher, clauses).unwrap()?;
        Some(merged(searcher, k, |ord, reader| {
            union.segment(ord, reader, want(k)).unwrap()
        }))
    }

    fn top_with_optional(
        searcher: &Searcher,
        required: &[Vec<Clause>],
        optional: &[Clause],
        k: usize,
    ) -> Vec<(f32, DocAddress)> {
        let with = WithOptional::new(searcher, required, optional).unwrap();
        merged(searcher, k, |ord, reader| {
            with.segment(ord, reader, want(k)).unwrap()
        })
    }

    /// [`Intersection`]'s hits, each segment's from tantivy's `TopDocs` over `query` where
    /// [`Intersection::segment`] leaves it to tantivy (every word one list); and how many
    /// segments `Intersection` searched itself.
    fn top_each(
        searcher: &Searcher,
        required: &[Vec<Clause>],
        query: &dyn Query,
        k: usize,
    ) -> (Top, usize) {
        let each = Intersection::new(searcher, required).unwrap();
        let weight = query
            .weight(tantivy::query::EnableScoring::enabled_from_searcher(
                searcher,
            ))
            .unwrap();
        let own = std::cell::Cell::new(0);
        let top = merged(searcher, k, |ord, reader| {
            let found = each
                .as_ref()
                .map(|each| each.segment(ord, reader, want(k)).unwrap());
            match found.flatten() {
                Some(top) => {
                    own.set(own.get() + 1);
                    top
                }
                None => {
                    let top = TopDocs::with_limit(k).order_by_score();
                    let found = top.collect_segment(weight.as_ref(), ord, reader).unwrap();
                    top.merge_fruits(vec![found]).unwrap()
                }
            }
        });
        (top, own.get())
    }

    /// A generator of numbers, and of a word from its numbers.
    type Numbers = Box<dyn FnMut() -> u64>;
    type Words = Box<dyn Fn(&mut dyn FnMut() -> u64) -> String>;
    type Generated = (Index, Field, Field, Numbers, Words);

    /// An index of 6,000 generated texts in three segments, one in seven deleted: a
    /// Zipf-like vocabulary of 40 words, so that some are in most documents.
    fn generated() -> Generated {
        let mut schema = Schema::builder();
        let words = schema.add_text_field("words", TEXT);
        let context = schema.add_text_field("context", TEXT);
        let id = schema.add_text_field("id", STRING);
        let index = Index::create_in_ram(schema.build());
        let vocabulary: Vec<String> = (0..40).map(|i| format!("w{i}")).collect();
        let mut state = 7u64;
        let mut next: Numbers = Box::new(move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        });
        // Zipf-like: low numbers far more often, so some words are in most documents.
        let word: Words = Box::new(move |next| {
            let r = (next() % 10_000) as f64 / 10_000.0;
            let i = (40f64.powf(r) - 1.0) as usize;
            vocabulary[i.min(39)].clone()
        });
        let mut writer = index.writer_with_num_threads(1, 15_000_000).unwrap();
        for n in 0..6_000u64 {
            let len = 3 + (next() % 20) as usize;
            let text: Vec<String> = (0..len).map(|_| word(&mut next)).collect();
            let ctx = if n % 3 == 0 {
                word(&mut next)
            } else {
                String::new()
            };
            writer
                .add_document(doc!(words => text.join(" "), context => ctx, id => n.to_string()))
                .unwrap();
            if n % 1_500 == 1_499 {
                writer.commit().unwrap();
            }
        }
        for n in (0..6_000u64).step_by(7) {
            writer.delete_term(Term::from_field_text(id, &n.to_string()));
        }
        writer.commit().unwrap();
        (index, words, context, next, word)
    }

    /// Over an index of generated texts (some documents deleted, several segments), the
    /// hits are `TopDocs`'s over the same union of boosted term queries.
    #[test]
    fn the_hits_are_those_topdocs_finds_for_the_union() {
        let (index, words, context, mut next, word) = generated();
        let searcher = index.reader().unwrap().searcher();
        assert!(searcher.segment_readers().len() > 1);
        for q in 0..200u64 {
            let n = 1 + (next() % 4) as usize;
            let clauses: Vec<Clause> = (0..n)
                .flat_map(|_| {
                    let term = word(&mut next);
                    let boost = if next() % 2 == 0 { 1.0 } else { 0.35 };
                    [(words, boost), (context, boost * 0.5)].map(|(field, boost)| Clause {
                        field,
                        term: term.clone(),
                        boost,
                    })
                })
                .collect();
            let union =
                BooleanQuery::new(clauses.iter().map(|c| (Occur::Should, c.query())).collect());
            let k = 1 + (q % 12) as usize;
            let expected = searcher
                .search(&union, &TopDocs::with_limit(k).order_by_score())
                .unwrap();
            let Some(found) = top(&searcher, &clauses, k) else {
                let held: HashSet<&str> = clauses
                    .iter()
                    .filter(|c| {
                        let term = Term::from_field_text(c.field, &c.term);
                        searcher.doc_freq(&term).unwrap() > 0
                    })
                    .map(|c| c.term.as_str())
                    .collect();
                assert!(held.len() < 2, "query {q}: {clauses:?}");
                continue;
            };
            assert_same(q, &found, &expected);
        }
    }

    /// `found` holds `expected`'s hits: the same scores to a float's rounding (the sums run
    /// in another order), the same documents unless two scores tie.
    /// Words required (each in either field) and optional ones: the best of the required
    /// words' own top hits and of [`WithOptional`]'s are `TopDocs`'s over the query.
    #[test]
    fn required_and_optional_words_find_the_hits_topdocs_finds() {
        let (index, words, context, mut next, word) = generated();
        let searcher = index.reader().unwrap().searcher();
        let group = |term: String, boost: f32| -> Vec<Clause> {
            [(words, boost), (context, boost * 0.5)]
                .map(|(field, boost)| Clause {
                    field,
                    term: term.clone(),
                    boost,
                })
                .to_vec()
        };
        for q in 0..200u64 {
            let required: Vec<Vec<Clause>> = (0..1 + next() % 2)
                .map(|_| group(word(&mut next), 1.0))
                .collect();
            let optional: Vec<Clause> = (0..1 + next() % 3)
                .flat_map(|_| group(word(&mut next), 0.35))
                .collect();
            let mut whole = each_required(&required);
            whole.extend(optional.iter().map(|c| (Occur::Should, c.query())));
            let k = 1 + (q % 12) as usize;
            let top = |query: &BooleanQuery| {
                searcher
                    .search(query, &TopDocs::with_limit(k).order_by_score())
                    .unwrap()
            };
            let expected = top(&BooleanQuery::new(whole));
            let required_only = BooleanQuery::new(each_required(&required));
            let found = merge(
                [
                    top_each(&searcher, &required, &required_only, k).0,
                    top_with_optional(&searcher, &required, &optional, k),
                ],
                k,
            );
            assert_same(q, &found, &expected);
        }
    }

    /// Words all required (each in either field, or in the words only): [`Intersection`]'s
    /// hits are `TopDocs`'s over their intersection.
    #[test]
    fn each_word_required_finds_the_hits_topdocs_finds() {
        let (index, words, context, mut next, word) = generated();
        let searcher = index.reader().unwrap().searcher();
        let (mut own, mut tantivy) = (0, 0);
        for q in 0..300u64 {
            let fields = if q % 4 == 0 {
                vec![(words, 1.0)]
            } else {
                vec![(words, 1.0), (context, 0.5)]
            };
            let required: Vec<Vec<Clause>> = (0..1 + next() % 4)
                .map(|_| {
                    let term = word(&mut next);
                    let boost = if next() % 2 == 0 { 1.0 } else { 0.35 };
                    fields
                        .iter()
                        .map(|&(field, share)| Clause {
                            field,
                            term: term.clone(),
                            boost: boost * share,
                        })
                        .collect()
                })
                .collect();
            let k = 1 + (q % 12) as usize;
            let query = BooleanQuery::new(each_required(&required));
            let expected = searcher
                .search(&query, &TopDocs::with_limit(k).order_by_score())
                .unwrap();
            let (found, searched) = top_each(&searcher, &required, &query, k);
            assert_same(q, &found, &expected);
            own += searched;
            tantivy += searcher.segment_readers().len() - searched;
        }
        assert!(
            own > 500 && tantivy > 100,
            "{own} segments by Intersection, {tantivy} by tantivy"
        );
    }
}
