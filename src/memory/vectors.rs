//! Entry vectors: quantised to int8, kept in a file ([`super::vector_file`]), searched in
//! memory by brute force.
//!
//! Each entry has a summary vector (title, tags and content) and, when it has a context, a
//! context vector ([`EntryVectors`]). Both are unit length before quantisation; a vector is
//! kept as `i8` values with one scale (`max |x| / 127`), so a cosine is an integer dot
//! product times two scales. [`EntryVectors::encode`] is one entry's vectors:
//!
//! ```text
//! [version: u8 = 1] [dimensions: u16 LE] [flags: u8, bit 0 = has context]
//! [summary scale: f32 LE] [summary: i8 × dimensions]
//! ([context scale: f32 LE] [context: i8 × dimensions])
//! ```
//!
//! [`VectorIndex`] holds every summary vector in one contiguous table with each row's entry
//! type and project, and the signs of its values (one bit a dimension). A small table is
//! searched exactly; a large one (100,000 entries of 256 dimensions is 25.6 MB of int8,
//! which one pass could not read in under 2 ms here) by the signs first (3.2 MB), then
//! exactly among the few hundred nearest by signs (`benches/embeddings.rs` measured both,
//! and an HNSW index, whose build took minutes and found fewer of the exact nearest). Both
//! passes run inside [`simd`]'s dispatch, so their plain loops are compiled for the
//! machine's vector instructions.

use std::collections::{BinaryHeap, HashMap};

use ulid::Ulid;

use super::index::project_key;
use super::model::{Entry, EntryType};

/// The record format's version byte.
const VERSION: u8 = 1;
/// The flag of a record holding a context vector.
const HAS_CONTEXT: u8 = 1;
/// The header: version, dimensions, flags.
const HEADER: usize = 4;

/// A unit vector quantised to int8.
#[derive(Debug, Clone, PartialEq)]
pub struct Quantised {
    pub scale: f32,
    pub values: Vec<i8>,
}

impl Quantised {
    /// `v` as int8 with one scale: the largest magnitude becomes ±127.
    pub fn of(v: &[f32]) -> Quantised {
        let max = v.iter().fold(0.0_f32, |m, x| m.max(x.abs()));
        if max == 0.0 || !max.is_finite() {
            return Quantised {
                scale: 0.0,
                values: vec![0; v.len()],
            };
        }
        let scale = max / 127.0;
        Quantised {
            scale,
            values: v.iter().map(|x| (x / scale).round() as i8).collect(),
        }
    }

    /// The cosine of two quantised unit vectors.
    pub fn cosine(&self, other: &Quantised) -> f32 {
        dot(&self.values, &other.values) as f32 * self.scale * other.scale
    }
}

/// What one entry's vectors are.
#[derive(Debug, Clone, PartialEq)]
pub struct EntryVectors {
    pub summary: Quantised,
    pub context: Option<Quantised>,
}

impl EntryVectors {
    /// The bytes of these vectors, as the vector file stores them.
    pub fn encode(&self) -> Vec<u8> {
        let dims = self.summary.values.len();
        let mut out = Vec::with_capacity(HEADER + 2 * (4 + dims));
        out.push(VERSION);
        out.extend_from_slice(&(dims as u16).to_le_bytes());
        out.push(if self.context.is_some() {
            HAS_CONTEXT
        } else {
            0
        });
        for q in std::iter::once(&self.summary).chain(&self.context) {
            out.extend_from_slice(&q.scale.to_le_bytes());
            out.extend(q.values.iter().map(|&v| v as u8));
        }
        out
    }

    /// Reads a record; `None` when it is not one this version wrote.
    pub fn decode(bytes: &[u8]) -> Option<EntryVectors> {
        let (&[version, d0, d1, flags], rest) = bytes.split_first_chunk::<HEADER>()?;
        if version != VERSION {
            return None;
        }
        let dims = u16::from_le_bytes([d0, d1]) as usize;
        let one = |at: &[u8]| -> Option<(Quantised, usize)> {
            let (scale, values) = at.split_first_chunk::<4>()?;
            let values = values.get(..dims)?;
            Some((
                Quantised {
                    scale: f32::from_le_bytes(*scale),
                    values: values.iter().map(|&b| b as i8).collect(),
                },
                4 + dims,
            ))
        };
        let (summary, used) = one(rest)?;
        let context = if flags & HAS_CONTEXT != 0 {
            let (context, more) = one(&rest[used..])?;
            (rest.len() == used + more).then_some(())?;
            Some(context)
        } else {
            (rest.len() == used).then_some(())?;
            None
        };
        Some(EntryVectors { summary, context })
    }
}

/// The integer dot product of two int8 vectors of one length. Written for the compiler's
/// vectoriser (see [`simd`]): 32 values at a time into 16 pairwise sums, each pair's
/// products fitting an `i16` (|-128 × -128| = 16384), the shape of AVX2's `vpmaddwd`.
#[inline(always)]
pub fn dot(a: &[i8], b: &[i8]) -> i32 {
    let (a_chunks, a_rest) = a.as_chunks::<32>();
    let (b_chunks, b_rest) = b.as_chunks::<32>();
    let mut lanes = [0i32; 16];
    for (x, y) in a_chunks.iter().zip(b_chunks) {
        for (j, lane) in lanes.iter_mut().enumerate() {
            *lane += (x[2 * j] as i16 * y[2 * j] as i16) as i32
                + (x[2 * j + 1] as i16 * y[2 * j + 1] as i16) as i32;
        }
    }
    lanes.iter().sum::<i32>()
        + a_rest
            .iter()
            .zip(b_rest)
            .map(|(&x, &y)| x as i32 * y as i32)
            .sum::<i32>()
}

/// One row's entry and filter fields.
#[derive(Debug, Clone)]
struct Row {
    id: Ulid,
    entry_type: EntryType,
    /// The number of the entry's [`project_key`] in [`VectorIndex::projects`], 0 for none.
    project: u32,
    /// Whether the entry has a context vector too (stored, not searched).
    has_context: bool,
}

/// A search's filters, as `rekall_search` gives them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Filter<'a> {
    pub entry_type: Option<EntryType>,
    pub project: Option<&'a str>,
}

/// Up to this many rows, a search scores every row by its int8 dot product.
const EXACT_UP_TO: usize = 4096;
/// Beyond, the rows nearest by the signs of their values (a Hamming distance over one bit
/// a dimension, a sixteenth of the bytes) are scored again by their int8 dot product: this
/// many per result asked for...
const RESCORE_PER_RESULT: usize = 20;
/// ...and at least this many. On the embeddings bench (100,000 entries) this finds 9 of
/// the 10 exact nearest or more (`benches/embeddings.rs` prints it).
const RESCORE_MIN: usize = 2000;

/// Every entry's summary vector in one table, with what filters need.
#[derive(Debug, Default)]
pub struct VectorIndex {
    dims: usize,
    rows: Vec<Row>,
    at: HashMap<Ulid, usize>,
    scales: Vec<f32>,
    /// `rows.len() × dims` values, row after row.
    values: Vec<i8>,
    /// `rows.len() × words` sign bits (bit set: the value is positive), row after row.
    signs: Vec<u64>,
    /// Project keys by number (number 0 is no project).
    projects: Vec<String>,
    project_numbers: HashMap<String, u32>,
}

/// How many `u64` hold the sign bits of `dims` values.
fn words(dims: usize) -> usize {
    dims.div_ceil(64)
}

/// The sign bits of a vector.
fn signs_of(values: &[i8]) -> impl Iterator<Item = u64> + '_ {
    values.chunks(64).map(|chunk| {
        chunk
            .iter()
            .enumerate()
            .filter(|(_, v)| **v > 0)
            .fold(0u64, |bits, (i, _)| bits | (1 << i))
    })
}

impl VectorIndex {
    pub fn new(dims: usize) -> VectorIndex {
        VectorIndex {
            dims,
            projects: vec![String::new()],
            ..VectorIndex::default()
        }
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Whether a search takes long enough (the signs first, a millisecond or so at 100,000
    /// rows) to be worth a thread of its own beside other work.
    pub fn is_large(&self) -> bool {
        self.rows.len() > EXACT_UP_TO
    }

    fn project_number(&mut self, project: Option<&str>) -> u32 {
        let Some(key) = project.map(project_key) else {
            return 0;
        };
        if let Some(&n) = self.project_numbers.get(&key) {
            return n;
        }
        let n = self.projects.len() as u32;
        self.projects.push(key.clone());
        self.project_numbers.insert(key, n);
        n
    }

    /// Adds or replaces `entry`'s summary vector.
    pub fn upsert(&mut self, entry: &Entry, summary: &Quantised) {
        self.upsert_row(
            entry.id,
            entry.entry_type,
            entry.project.as_deref(),
            summary,
            false,
        );
    }

    /// Adds or replaces the summary vector of what the vector file stores of an entry.
    pub fn upsert_stored(&mut self, s: &super::vector_file::Stored) {
        self.upsert_row(
            s.id,
            s.entry_type,
            s.project.as_deref(),
            &s.vectors.summary,
            s.vectors.context.is_some(),
        );
    }

    /// Adds or replaces the summary vector of entry `id` of this type and project.
    pub fn upsert_row(
        &mut self,
        id: Ulid,
        entry_type: EntryType,
        project: Option<&str>,
        summary: &Quantised,
        has_context: bool,
    ) {
        debug_assert_eq!(summary.values.len(), self.dims);
        let row = Row {
            id,
            entry_type,
            project: self.project_number(project),
            has_context,
        };
        let (dims, words) = (self.dims, words(self.dims));
        match self.at.get(&id) {
            Some(&i) => {
                self.rows[i] = row;
                self.scales[i] = summary.scale;
                self.values[i * dims..(i + 1) * dims].copy_from_slice(&summary.values);
                for (slot, bits) in self.signs[i * words..(i + 1) * words]
                    .iter_mut()
                    .zip(signs_of(&summary.values))
                {
                    *slot = bits;
                }
            }
            None => {
                self.at.insert(id, self.rows.len());
                self.rows.push(row);
                self.scales.push(summary.scale);
                self.values.extend_from_slice(&summary.values);
                self.signs.extend(signs_of(&summary.values));
            }
        }
    }

    /// Takes `id`'s row out (the last row takes its place).
    pub fn remove(&mut self, id: &Ulid) {
        let Some(i) = self.at.remove(id) else {
            return;
        };
        let (dims, words) = (self.dims, words(self.dims));
        let last = self.rows.len() - 1;
        if i != last {
            self.at.insert(self.rows[last].id, i);
            self.values
                .copy_within(last * dims..(last + 1) * dims, i * dims);
            self.signs
                .copy_within(last * words..(last + 1) * words, i * words);
        }
        self.rows.swap_remove(i);
        self.scales.swap_remove(i);
        self.values.truncate(last * dims);
        self.signs.truncate(last * words);
    }

    /// Whether `id` has a summary vector here, and whether a context vector is stored too.
    pub fn has(&self, id: &Ulid) -> (bool, bool) {
        match self.at.get(id) {
            Some(&i) => (true, self.rows[i].has_context),
            None => (false, false),
        }
    }

    /// The summary vector of `id`.
    pub fn get(&self, id: &Ulid) -> Option<Quantised> {
        let &i = self.at.get(id)?;
        Some(Quantised {
            scale: self.scales[i],
            values: self.values[i * self.dims..(i + 1) * self.dims].to_vec(),
        })
    }

    /// What the filter keeps, `skip` left out: `None` when no row can match (a project
    /// no entry has).
    fn kept(&self, filter: Filter<'_>, skip: Option<&Ulid>) -> Option<Kept> {
        let project = match filter.project {
            None => None,
            Some(p) => Some(*self.project_numbers.get(&project_key(p))?),
        };
        Some(Kept {
            entry_type: filter.entry_type,
            project,
            skip: skip.and_then(|id| self.at.get(id).copied()),
        })
    }

    /// Whether row `i` is one `kept` keeps: a search without filters reads no row.
    #[inline(always)]
    fn keeps(&self, kept: &Kept, i: usize) -> bool {
        kept.skip != Some(i)
            && (kept.entry_type.is_none() && kept.project.is_none() || {
                let row = &self.rows[i];
                kept.entry_type.is_none_or(|t| t == row.entry_type)
                    && kept.project.is_none_or(|p| p == row.project)
            })
    }

    /// The `k` entries whose summary is nearest `query` (cosine, best first) among those
    /// the filter keeps, `skip` left out: exact up to [`EXACT_UP_TO`] rows, beyond by the
    /// signs first, then exact among the [`RESCORE_MIN`] or more nearest by signs.
    pub fn nearest(
        &self,
        query: &Quantised,
        k: usize,
        filter: Filter<'_>,
        skip: Option<&Ulid>,
    ) -> Vec<(Ulid, f32)> {
        self.search(query, k, filter, skip, self.rows.len() > EXACT_UP_TO)
    }

    /// The search of [`Self::nearest`] and [`Self::nearest_exact`], in [`simd`]'s dispatch.
    fn search(
        &self,
        query: &Quantised,
        k: usize,
        filter: Filter<'_>,
        skip: Option<&Ulid>,
        by_signs: bool,
    ) -> Vec<(Ulid, f32)> {
        if k == 0 || query.values.len() != self.dims || self.dims == 0 {
            return Vec::new();
        }
        let Some(kept) = self.kept(filter, skip) else {
            return Vec::new();
        };
        simd().dispatch(Search {
            index: self,
            query,
            k,
            kept: &kept,
            by_signs,
        })
    }

    /// [`Self::nearest`] of a large table, compiled for the machine's vector instructions.
    #[inline(always)]
    fn nearest_by_signs(&self, query: &Quantised, k: usize, kept: &Kept) -> Vec<(Ulid, f32)> {
        let words = words(self.dims);
        let mine: Vec<u64> = signs_of(&query.values).collect();
        // Each row's Hamming distance to the query's signs (at most `dims`; a row the filter
        // drops gets one more), and how many kept rows have each distance: the rows to
        // rescore are those up to the distance at which the count reaches the number wanted
        // (a counting sort, no comparison).
        let dropped = self.dims as u16 + 1;
        let mut counts = vec![0usize; self.dims + 2];
        // Plain loops: iterator adapters such as `collect` may stay calls that the
        // dispatch's instructions do not reach.
        let mut distances: Vec<u16> = Vec::with_capacity(self.rows.len());
        match (words, mine.as_slice()) {
            // 256 dimensions (the default model's): a fixed-size loop the compiler unrolls.
            (4, &[m0, m1, m2, m3]) => {
                let (rows, _) = self.signs.as_chunks::<4>();
                for &[t0, t1, t2, t3] in rows {
                    distances.push(
                        ((m0 ^ t0).count_ones()
                            + (m1 ^ t1).count_ones()
                            + (m2 ^ t2).count_ones()
                            + (m3 ^ t3).count_ones()) as u16,
                    );
                }
            }
            _ => {
                for theirs in self.signs.chunks_exact(words) {
                    let mut d = 0;
                    for (a, b) in mine.iter().zip(theirs) {
                        d += (a ^ b).count_ones();
                    }
                    distances.push(d as u16);
                }
            }
        }
        for (i, d) in distances.iter_mut().enumerate() {
            if !self.keeps(kept, i) {
                *d = dropped;
            }
            counts[*d as usize] += 1;
        }
        let rescore = (k * RESCORE_PER_RESULT).max(RESCORE_MIN);
        let mut seen = 0;
        let within = counts[..=self.dims]
            .iter()
            .position(|&n| {
                seen += n;
                seen >= rescore
            })
            .unwrap_or(self.dims) as u16;
        let mut best = Best::new(k);
        for (i, &d) in distances.iter().enumerate() {
            if d <= within {
                best.offer(self, query, i);
            }
        }
        best.into_results(self, query)
    }

    /// [`Self::nearest`] by the int8 dot product of every row the filter keeps.
    pub fn nearest_exact(
        &self,
        query: &Quantised,
        k: usize,
        filter: Filter<'_>,
        skip: Option<&Ulid>,
    ) -> Vec<(Ulid, f32)> {
        self.search(query, k, filter, skip, false)
    }
}

/// The `k` rows with the greatest int8 dot product with a query among those offered.
struct Best {
    k: usize,
    /// A min-heap of the best k: (score, row), the worst on top.
    heap: BinaryHeap<std::cmp::Reverse<(Score, usize)>>,
}

impl Best {
    fn new(k: usize) -> Best {
        Best {
            k,
            heap: BinaryHeap::with_capacity(k + 1),
        }
    }

    #[inline(always)]
    fn offer(&mut self, index: &VectorIndex, query: &Quantised, i: usize) {
        let values = &index.values[i * index.dims..(i + 1) * index.dims];
        let score = Score(dot(&query.values, values) as f32 * index.scales[i]);
        if self.heap.len() < self.k {
            self.heap.push(std::cmp::Reverse((score, i)));
        } else if self.heap.peek().is_some_and(|w| score > w.0.0) {
            self.heap.pop();
            self.heap.push(std::cmp::Reverse((score, i)));
        }
    }

    /// The entries and their cosines, best first.
    fn into_results(self, index: &VectorIndex, query: &Quantised) -> Vec<(Ulid, f32)> {
        let mut out: Vec<(Ulid, f32)> = self
            .heap
            .into_iter()
            .map(|std::cmp::Reverse((s, i))| (index.rows[i].id, s.0 * query.scale))
            .collect();
        out.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| b.0.cmp(&a.0)));
        out
    }
}

/// A search of the table, run through [`simd`]'s dispatch: by signs then exactly, or
/// exactly.
struct Search<'a> {
    index: &'a VectorIndex,
    query: &'a Quantised,
    k: usize,
    kept: &'a Kept,
    by_signs: bool,
}

impl pulp::WithSimd for Search<'_> {
    type Output = Vec<(Ulid, f32)>;

    // Inlined into the dispatch's function, which is compiled for the instructions found:
    // so is everything this calls inline.
    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) -> Self::Output {
        let Search {
            index,
            query,
            k,
            kept,
            by_signs,
        } = self;
        if by_signs {
            index.nearest_by_signs(query, k, kept)
        } else {
            let mut best = Best::new(k);
            for i in 0..index.rows.len() {
                if index.keeps(kept, i) {
                    best.offer(index, query, i);
                }
            }
            best.into_results(index, query)
        }
    }
}

/// The rows a search keeps (see [`VectorIndex::kept`]).
struct Kept {
    entry_type: Option<EntryType>,
    /// A project's number.
    project: Option<u32>,
    /// The row left out.
    skip: Option<usize>,
}

/// The machine's vector instructions, found once: code run through its `dispatch` is
/// compiled for them (AVX2 and POPCNT on most x86-64 machines, which the baseline target
/// the compiler otherwise assumes lacks) and picked at run time. `benches/embeddings.rs`
/// measures the searches; a 256-dimension table of 100,000 rows is scanned by signs three
/// times faster this way.
fn simd() -> pulp::Arch {
    static ARCH: std::sync::LazyLock<pulp::Arch> = std::sync::LazyLock::new(pulp::Arch::new);
    *ARCH
}

/// An `f32` ordered by `total_cmp`, for the heap.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Score(f32);

impl Eq for Score {}

impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Score {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(v: &[f32]) -> Vec<f32> {
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / n).collect()
    }

    fn entry(id: u128, entry_type: EntryType, project: Option<&str>) -> Entry {
        Entry {
            id: Ulid::from(id),
            entry_type,
            title: "t".into(),
            content: String::new(),
            tags: Vec::new(),
            context: None,
            project: project.map(str::to_string),
            confidence: 3,
            memory_type: super::super::MemoryType::Episodic,
            status: super::super::EntryStatus::Active,
            created_at: jiff::Timestamp::UNIX_EPOCH,
            updated_at: jiff::Timestamp::UNIX_EPOCH,
            last_accessed: None,
            access_count: 0,
            seq: 1,
            author: None,
        }
    }

    #[test]
    fn quantised_cosine_is_close_to_the_float_one() {
        let a = unit(&[0.3, -0.2, 0.9, 0.05, -0.7, 0.1, 0.0, 0.4]);
        let b = unit(&[0.1, -0.3, 0.8, 0.2, -0.5, -0.1, 0.3, 0.2]);
        let exact: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        let approx = Quantised::of(&a).cosine(&Quantised::of(&b));
        assert!((exact - approx).abs() < 0.01, "{exact} vs {approx}");
        let zero = Quantised::of(&[0.0; 8]);
        assert_eq!(zero.cosine(&Quantised::of(&a)), 0.0);
    }

    #[test]
    fn dot_does_not_overflow() {
        assert_eq!(dot(&[-128; 256], &[-128; 256]), 256 * 128 * 128);
        assert_eq!(dot(&[127; 256], &[-128; 256]), -256 * 127 * 128);
    }

    #[test]
    fn records_round_trip_and_bad_ones_are_refused() {
        let v = EntryVectors {
            summary: Quantised::of(&unit(&[1.0, 2.0, -3.0])),
            context: Some(Quantised::of(&unit(&[0.0, 1.0, 1.0]))),
        };
        assert_eq!(EntryVectors::decode(&v.encode()), Some(v.clone()));
        let no_context = EntryVectors {
            context: None,
            ..v.clone()
        };
        assert_eq!(
            EntryVectors::decode(&no_context.encode()),
            Some(no_context.clone())
        );
        let bytes = v.encode();
        for cut in 0..bytes.len() {
            assert_eq!(EntryVectors::decode(&bytes[..cut]), None, "cut at {cut}");
        }
        let mut longer = no_context.encode();
        longer.push(0);
        assert_eq!(EntryVectors::decode(&longer), None);
        let mut other_version = bytes.clone();
        other_version[0] = 9;
        assert_eq!(EntryVectors::decode(&other_version), None);
    }

    #[test]
    fn nearest_ranks_filters_and_replaces() {
        let mut index = VectorIndex::new(3);
        let vectors = [
            (1, EntryType::Bug, Some("Web"), [1.0, 0.0, 0.0]),
            (2, EntryType::Bug, None, [0.9, 0.1, 0.0]),
            (3, EntryType::Pattern, Some("web"), [0.7, 0.7, 0.0]),
            (4, EntryType::Bug, Some("api"), [0.0, 0.0, 1.0]),
        ];
        for (id, t, p, v) in vectors {
            index.upsert(&entry(id, t, p), &Quantised::of(&unit(&v)));
        }
        let q = Quantised::of(&unit(&[1.0, 0.05, 0.0]));
        let ids = |found: Vec<(Ulid, f32)>| {
            found
                .into_iter()
                .map(|(id, _)| u128::from(id))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            ids(index.nearest(&q, 3, Filter::default(), None)),
            [1, 2, 3]
        );
        let scores = index.nearest(&q, 1, Filter::default(), None);
        assert!((scores[0].1 - 0.9988).abs() < 0.01, "{scores:?}");
        let bugs = Filter {
            entry_type: Some(EntryType::Bug),
            project: None,
        };
        assert_eq!(ids(index.nearest(&q, 10, bugs, None)), [1, 2, 4]);
        let web = Filter {
            entry_type: None,
            project: Some(" WEB "),
        };
        assert_eq!(ids(index.nearest(&q, 10, web, None)), [1, 3]);
        assert_eq!(
            ids(index.nearest(&q, 2, Filter::default(), Some(&Ulid::from(1)))),
            [2, 3]
        );
        // Replacing a row moves it.
        index.upsert(
            &entry(1, EntryType::Bug, Some("web")),
            &Quantised::of(&unit(&[0.0, 0.0, 1.0])),
        );
        assert_eq!(index.len(), 4);
        assert_eq!(ids(index.nearest(&q, 2, Filter::default(), None)), [2, 3]);
        // Removing a row moves the last one into its place, searched as before.
        index.remove(&Ulid::from(2));
        index.remove(&Ulid::from(9));
        assert_eq!(index.len(), 3);
        assert_eq!(index.has(&Ulid::from(2)), (false, false));
        assert_eq!(ids(index.nearest(&q, 1, Filter::default(), None)), [3]);
        let mut bug_ids = ids(index.nearest(&q, 10, bugs, None));
        bug_ids.sort();
        assert_eq!(bug_ids, [1, 4]);
        assert!(
            index
                .get(&Ulid::from(4))
                .is_some_and(|v| v.values[2] == 127)
        );
    }

    #[test]
    fn a_large_table_is_searched_by_signs_then_exactly() {
        // 256 dimensions take the fixed-size path, 64 the general one.
        for dims in [64, 256] {
            large_table(dims);
        }
    }

    fn large_table(dims: usize) {
        let mut state = 7u64;
        let mut next = move || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 33) as f32 / (1u64 << 31) as f32) - 0.5
        };
        let mut index = VectorIndex::new(dims);
        let mut kept = Vec::new();
        for id in 0..(EXACT_UP_TO as u128 + 1000) {
            let v = unit(&(0..dims).map(|_| next()).collect::<Vec<_>>());
            let t = if id % 2 == 0 {
                EntryType::Bug
            } else {
                EntryType::Pattern
            };
            index.upsert(&entry(id, t, None), &Quantised::of(&v));
            if id % 500 == 3 {
                kept.push((id, v));
            }
        }
        for (id, v) in &kept {
            // Each vector, a little moved, finds itself first, as the exact search does.
            let moved: Vec<f32> = v.iter().map(|x| x + 0.02 * next()).collect();
            let q = Quantised::of(&unit(&moved));
            let found = index.nearest(&q, 5, Filter::default(), None);
            let exact = index.nearest_exact(&q, 5, Filter::default(), None);
            assert_eq!(found[0].0, Ulid::from(*id));
            assert_eq!(found[0], exact[0]);
            // The filter applies before the signs: an odd id is no bug.
            let bugs = Filter {
                entry_type: Some(EntryType::Bug),
                project: None,
            };
            assert!(
                index
                    .nearest(&q, 5, bugs, None)
                    .iter()
                    .all(|(id, _)| u128::from(*id) % 2 == 0)
            );
            let unknown = Filter {
                entry_type: None,
                project: Some("nowhere"),
            };
            assert!(index.nearest(&q, 5, unknown, None).is_empty());
        }
    }
}
