//! Document vectors: quantised to int8 ([`crate::quantised`]), kept in a file
//! ([`crate::vector_file`]) over a mapped base ([`crate::vector_base`]) once the table is
//! large, searched in memory.
//!
//! [`VectorIndex`] holds every summary vector with each row's document type and group: a
//! large table's rows as of its last cut in its base, read through a mapping, the rows
//! added or changed since in memory. A small table is searched exactly; a large one (a
//! pass over every row grows with the table) is cut into about √n lists, each the rows nearest one centroid (an inverted file: the centroids
//! are k-means of a sample of the rows), and a search scores the centroids, then the rows
//! of the lists nearest its query only. `benches/embeddings.rs` compares this with every
//! row, with the signs of the values first (a sixteenth of the bytes, then exactly among
//! the nearest by signs) and with an HNSW index (slow to build), on speed and on how many
//! of the exact nearest each finds. The lists are made apart from the table, on a thread of the
//! memory's, written out as the base, and made again as the table grows (`wants_lists`);
//! until they first are, a large table is searched whole. The hot loops run inside [`simd`]'s dispatch, so their plain code is
//! compiled for the machine's vector instructions.

use std::collections::{BinaryHeap, HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};

use ulid::Ulid;

use crate::centroids::{Centroids, NearestCentroids, Sample, list_count};
use crate::group_key;
use crate::quantised::{DocVectors, Quantised, dot, simd};
use crate::vector_base::Base;
use crate::vector_file::{Stored, VectorRecord};
use crate::{AsDocument, Kind};

/// One row's document and filter fields.
#[derive(Debug, Clone)]
struct Row {
    id: Ulid,
    kind: Kind,
    /// The number of the document's [`group_key`] in [`VectorIndex::groups`], 0 for none.
    group: u32,
    /// Whether the document has a context vector too (stored, not searched).
    has_context: bool,
}

/// A search's filters, as `rekall_search` gives them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Filter<'a> {
    pub kind: Option<Kind>,
    pub group: Option<&'a str>,
}

/// Up to this many rows, a search scores every row by its int8 dot product; beyond, the
/// table is cut into lists ([`Lists`]) and a search scores the lists nearest its query.
const EXACT_UP_TO: usize = 4096;
/// The centroids are made from a sample of this many rows a list.
const SAMPLE_PER_LIST: usize = 32;
/// Lists are made again once the table holds this many times the rows they were made of.
const REMAKE_GROWTH: usize = 2;
/// A cut of a table with a base makes new centroids when the table has grown by a quarter
/// since they were made (more rows a list make searches slower), and keeps them below.
const RETRAIN_GROWTH: f64 = 1.25;
/// A search through lists scores the rows the filter keeps in the lists nearest its
/// query, nearest first, until it has scored this many per result asked for...
const PROBE_PER_RESULT: usize = 200;
/// ...and at least this many rows...
const PROBE_MIN_ROWS: usize = 2048;
/// ...in at least this many lists, or in as many rows as this many lists of the mean
/// size hold, whichever comes first (`benches/embeddings.rs` prints the share of the exact
/// nearest found). Where k-means leaves the lists uneven (a clustered corpus), a query
/// among the dense lists stops at the rows of the mean lists, not of its 12 neighbours'
/// dense ones, and still finds nearly the same nearest (`cargo bench --bench scale`,
/// whose default corpus is clustered).
const PROBE_MIN_LISTS: usize = 12;
/// A search that scores more rows than this is worth a thread of its own beside other work
/// (starting one costs a fraction of scoring them): a large table searched through its
/// lists is, one searched whole up to [`EXACT_UP_TO`] rows is not.
const LARGE_SEARCH_ROWS: usize = 4_000;

/// Every document's summary vector, with what filters need: the rows of the last cut in its
/// base ([`crate::vector_base`], mapped), the rows added or changed since in memory.
#[derive(Debug, Default)]
pub struct VectorIndex {
    dims: usize,
    /// The rows in memory: those added or replaced since the base was written (all of
    /// them while there is none).
    rows: Vec<Row>,
    at: HashMap<Ulid, usize>,
    scales: Vec<f32>,
    /// `rows.len() × dims` values, row after row.
    values: Vec<i8>,
    /// The context vectors of the rows in memory that have one (to write the next base).
    contexts: HashMap<Ulid, Quantised>,
    /// The rows by nearest centroid, once the table is large (with a base, its centroids:
    /// the rows in memory are placed among the base's lists).
    lists: Option<Lists>,
    /// While lists are being made apart from the table ([`Self::sample`] to
    /// [`Self::install`] or [`Self::install_base`]): the rows added, replaced or removed
    /// since the sample.
    changed: Option<HashSet<Ulid>>,
    /// Group keys by number (number 0 is no group).
    groups: Vec<String>,
    group_numbers: HashMap<String, u32>,
    /// The base, and which of its rows were replaced or removed since it was written.
    base: Option<Base>,
    dead: Vec<u64>,
    dead_count: usize,
}

/// A row of the base in [`BestRows`]'s heap: its number with this bit set.
const BASE_ROW: usize = 1 << (usize::BITS - 1);
/// The rows in memory that have the base written again: an eighth of the base's rows,
/// at least [`EXACT_UP_TO`], at most this many (the memory they hold, ~300 bytes each);
/// while documents are embedded in bulk, as many as the base ([`VectorIndex::wants_cut`]).
const MAX_ROWS_IN_MEMORY: usize = 65_536;

/// What a cut of the table into lists starts from ([`VectorIndex::begin_cut`]).
pub enum Cut {
    /// Centroids to make, of this sample.
    Train(Sample),
    /// The base's centroids, kept: the table has not grown enough to make new ones.
    Keep(Centroids),
}

/// The lists of a large table: every row belongs to the list of its nearest centroid (an
/// inverted file). A search scores the centroids, then the rows of the nearest lists only.
#[derive(Debug)]
struct Lists {
    centroids: Centroids,
    /// Each list's rows.
    members: Vec<Vec<u32>>,
    /// Each row's list.
    list_of: Vec<u32>,
}

/// Takes `i` out of a list (its order does not matter).
fn take_out(list: &mut Vec<u32>, i: usize) {
    if let Some(at) = list.iter().position(|&r| r as usize == i) {
        list.swap_remove(at);
    }
}

impl VectorIndex {
    pub fn new(dims: usize) -> VectorIndex {
        VectorIndex {
            dims,
            groups: vec![String::new()],
            ..VectorIndex::default()
        }
    }

    /// A table of `base`'s rows (the vector file's records since are given after).
    pub fn with_base(base: Base) -> VectorIndex {
        let centroids = base.centroids().clone();
        let mut index = VectorIndex::new(centroids.dims);
        index.dead = vec![0; base.rows().div_ceil(64)];
        index.lists = Some(Lists {
            members: vec![Vec::new(); centroids.len()],
            centroids,
            list_of: Vec::new(),
        });
        index.base = Some(base);
        index
    }

    pub fn len(&self) -> usize {
        self.rows.len() + self.base.as_ref().map_or(0, |b| b.rows() - self.dead_count)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Maps the base afresh ([`Base::reopen`]), giving back the pages searches read.
    pub fn release_pages(&mut self) {
        if let Some(base) = &self.base {
            match base.reopen() {
                Ok(fresh) => self.base = Some(fresh),
                Err(e) => tracing::warn!("cannot map the vector base again: {e}"),
            }
        }
    }

    /// The generation of the base, 0 when there is none.
    pub fn generation(&self) -> u64 {
        self.base.as_ref().map_or(0, Base::generation)
    }

    /// How many rows are held in memory (not in the base), and how many of the base's
    /// were replaced or removed: what the vector file holds records for.
    pub fn rows_since_base(&self) -> usize {
        self.rows.len() + self.dead_count
    }

    fn is_dead(&self, r: usize) -> bool {
        self.dead[r / 64] & (1 << (r % 64)) != 0
    }

    fn kill(&mut self, r: usize) {
        if !self.is_dead(r) {
            self.dead[r / 64] |= 1 << (r % 64);
            self.dead_count += 1;
        }
    }

    /// The live base row of `id`.
    fn base_row(&self, id: &Ulid) -> Option<usize> {
        let r = self.base.as_ref()?.find(id)?;
        (!self.is_dead(r)).then_some(r)
    }

    /// How many rows a search without filters scores, about.
    fn search_rows(&self) -> usize {
        match &self.lists {
            None => self.len(),
            Some(lists) => {
                let count = lists.members.len();
                count + Probe::new(1, self.len(), count).rows()
            }
        }
    }

    /// Whether a search takes long enough to be worth a thread of its own beside other
    /// work ([`LARGE_SEARCH_ROWS`]).
    pub fn is_large(&self) -> bool {
        self.search_rows() > LARGE_SEARCH_ROWS
    }

    /// The number of lists the table is cut into (0: none, it is searched whole).
    pub fn list_count(&self) -> usize {
        self.lists.as_ref().map_or(0, |l| l.members.len())
    }

    /// Whether the table should be cut into lists: it is larger than [`EXACT_UP_TO`] and
    /// has none, or has grown to [`REMAKE_GROWTH`] times the rows its lists were made of,
    /// or it has a base and holds many rows in memory ([`MAX_ROWS_IN_MEMORY`]).
    pub fn wants_lists(&self) -> bool {
        self.wants_cut(false)
    }

    /// [`Self::wants_lists`], or while documents are embedded `in_bulk`: the rows in memory
    /// may then grow to the base's size (at least [`MAX_ROWS_IN_MEMORY`]) before a cut.
    /// Each cut writes the whole base, so the rows a bulk embed's cuts write grow as the
    /// table, not as its square (at a million rows, a cut each 65,536 rows kept one
    /// running).
    pub fn wants_cut(&self, in_bulk: bool) -> bool {
        let Some(lists) = &self.lists else {
            return self.len() > EXACT_UP_TO;
        };
        if self.len() >= REMAKE_GROWTH * lists.centroids.made_at {
            return true;
        }
        self.base.as_ref().is_some_and(|b| {
            let most = if in_bulk {
                b.rows().max(MAX_ROWS_IN_MEMORY)
            } else {
                (b.rows() / 8).clamp(EXACT_UP_TO, MAX_ROWS_IN_MEMORY)
            };
            self.rows_since_base() > most
        })
    }

    /// Starts a cut: new centroids to make when there are no lists or the table has grown
    /// to [`RETRAIN_GROWTH`] times the rows they were made of, else the base's kept. From
    /// now until the cut is installed, the rows added, replaced or removed are noted.
    pub fn begin_cut(&mut self) -> Cut {
        let keep = self.base.is_some()
            && self
                .lists
                .as_ref()
                .is_some_and(|l| (self.len() as f64) < RETRAIN_GROWTH * l.centroids.made_at as f64);
        match (&self.lists, keep) {
            (Some(lists), true) => {
                let centroids = lists.centroids.clone();
                self.changed = Some(HashSet::new());
                Cut::Keep(centroids)
            }
            _ => Cut::Train(self.sample()),
        }
    }

    /// The values of the `i`th row of the table: the base's rows, then those in memory.
    fn nth_values(&self, i: usize) -> (&[i8], f32) {
        let in_base = self.in_base();
        match &self.base {
            Some(base) if i < in_base => (base.values(i..i + 1), base.scale(i)),
            _ => (self.values_of(i - in_base), self.scales[i - in_base]),
        }
    }

    /// How many rows the base holds, dead ones included.
    fn in_base(&self) -> usize {
        self.base.as_ref().map_or(0, Base::rows)
    }

    /// The values of row `i` in memory.
    #[inline(always)]
    fn values_of(&self, i: usize) -> &[i8] {
        &self.values[i * self.dims..(i + 1) * self.dims]
    }

    /// The summary vector of row `i` in memory.
    fn summary_of(&self, i: usize) -> Quantised {
        Quantised {
            scale: self.scales[i],
            values: self.values_of(i).to_vec(),
        }
    }

    /// Rows spread over the table to make its centroids of ([`Sample::train`]); from now
    /// until the lists are installed, the rows changed are noted.
    pub fn sample(&mut self) -> Sample {
        let n = self.assign_len();
        let lists = list_count(self.len());
        let count = (lists * SAMPLE_PER_LIST).min(n);
        let dims = self.dims;
        let mut sample = Sample {
            dims,
            scales: Vec::with_capacity(count),
            values: Vec::with_capacity(count * dims),
            made_at: self.len(),
            lists,
        };
        for s in 0..count {
            let (values, scale) = self.nth_values(s * n / count);
            sample.scales.push(scale);
            sample.values.extend_from_slice(values);
        }
        self.changed = Some(HashSet::new());
        sample
    }

    /// How many rows [`Self::assign`] goes through: the base's, then those in memory.
    pub fn assign_len(&self) -> usize {
        self.in_base() + self.rows.len()
    }

    /// The list of each of up to `count` rows from row `from` (the base's rows, then those
    /// in memory; a dead row of the base is left out): the ids and their lists, to
    /// [`Self::install`]. Read-only, so a large table is placed a part at a time. The
    /// base's rows keep their list when `centroids` are the base's.
    pub fn assign(&self, centroids: &Centroids, from: usize, count: usize) -> Vec<(Ulid, u32)> {
        let end = from.saturating_add(count).min(self.assign_len());
        if from >= end || centroids.dims != self.dims || centroids.is_empty() {
            return Vec::new();
        }
        let in_base = self.in_base();
        let mut out = Vec::with_capacity(end - from);
        if let Some(base) = &self.base
            && from < in_base
        {
            let rows = from..end.min(in_base);
            let lists = if base.centroids().same_as(centroids) {
                rows.clone().map(|r| base.list_of(r)).collect()
            } else {
                simd().dispatch(NearestCentroids {
                    centroids,
                    values: base.values(rows.clone()),
                })
            };
            for (r, list) in rows.zip(lists) {
                if !self.is_dead(r) {
                    out.push((base.id(r), list));
                }
            }
        }
        let (from, end) = (from.max(in_base) - in_base, end.saturating_sub(in_base));
        if from < end {
            let lists = simd().dispatch(NearestCentroids {
                centroids,
                values: &self.values[from * self.dims..end * self.dims],
            });
            out.extend(self.rows[from..end].iter().map(|r| r.id).zip(lists));
        }
        out
    }

    /// Cuts the table into the lists of `centroids`, `assigned` placing its rows (from
    /// [`Self::assign`]); the rows it does not place (added since the sample) and those
    /// changed since are placed now. Returns false, installing nothing, when the table did
    /// not give the sample (it was made again since) or has a base (a cut of a table with
    /// a base writes the next: [`Self::install_base`]).
    pub fn install(&mut self, centroids: Centroids, assigned: Vec<(Ulid, u32)>) -> bool {
        if self.base.is_some() {
            return false;
        }
        let Some(changed) = self.changed.take() else {
            return false;
        };
        if centroids.dims != self.dims || centroids.is_empty() {
            return false;
        }
        let mut list_of = vec![u32::MAX; self.rows.len()];
        for (id, list) in assigned {
            if let Some(&i) = self.at.get(&id)
                && !changed.contains(&id)
                && (list as usize) < centroids.len()
            {
                list_of[i] = list;
            }
        }
        let unplaced: Vec<usize> = (0..list_of.len())
            .filter(|&i| list_of[i] == u32::MAX)
            .collect();
        for i in unplaced {
            list_of[i] = self.nearest_list(&centroids, i);
        }
        let mut members = vec![Vec::new(); centroids.len()];
        for (i, &list) in list_of.iter().enumerate() {
            members[list as usize].push(i as u32);
        }
        self.lists = Some(Lists {
            centroids,
            members,
            list_of,
        });
        true
    }

    /// Cuts the table into lists at once, in this thread, in memory (the memory cuts it
    /// on a thread of its own into a base: `Semantic`).
    pub fn make_lists(&mut self) {
        let centroids = self.sample().train();
        let assigned = self.assign(&centroids, 0, self.assign_len());
        self.install(centroids, assigned);
    }

    /// What a base written of the table holds of the row of `id`: its type, group,
    /// summary and context. `None` when it has none.
    pub fn row_of(&self, id: &Ulid) -> Option<(Kind, Option<&str>, Quantised, Option<Quantised>)> {
        if let Some(&i) = self.at.get(id) {
            let row = &self.rows[i];
            let group = (row.group != 0).then(|| self.groups[row.group as usize].as_str());
            return Some((
                row.kind,
                group,
                self.summary_of(i),
                self.contexts.get(id).cloned(),
            ));
        }
        let r = self.base_row(id)?;
        let base = self.base.as_ref()?;
        Some((
            base.kind(r),
            base.group_name(r),
            base.summary(r),
            base.context(r),
        ))
    }

    /// Gives up the cut begun by [`Self::begin_cut`].
    pub fn cancel_cut(&mut self) {
        self.changed = None;
    }

    /// Whether the cut begun by [`Self::begin_cut`] can still be installed: the table was
    /// not made again since.
    pub fn cut_pending(&self) -> bool {
        self.changed.is_some()
    }

    /// The vector file's records after a cut into `base` (written of this table from
    /// [`Self::begin_cut`] on): the rows to keep in memory (not in `base`, or changed since
    /// the cut began), and the removal of the rows of `base` removed meanwhile.
    pub fn records_after(&self, base: &Base) -> Vec<VectorRecord> {
        let changed = self.changed.as_ref();
        let mut out = Vec::new();
        for row in &self.rows {
            if base.find(&row.id).is_none() || changed.is_some_and(|c| c.contains(&row.id)) {
                let (kind, group, summary, context) =
                    self.row_of(&row.id).expect("a row in memory");
                out.push(VectorRecord::Put(Stored {
                    id: row.id,
                    kind,
                    group: group.map(str::to_string),
                    vectors: DocVectors { summary, context },
                }));
            }
        }
        for id in changed.into_iter().flatten() {
            if !self.at.contains_key(id) && base.find(id).is_some() {
                out.push(VectorRecord::Drop(*id));
            }
        }
        out
    }

    /// Makes `base` the table's base, with `records` (from [`Self::records_after`]) over
    /// it: what the vector file of its generation holds.
    pub fn install_base(&mut self, base: Base, records: Vec<VectorRecord>) {
        let mut index = VectorIndex::with_base(base);
        for record in &records {
            index.apply(record);
        }
        *self = index;
    }

    /// Applies a record of the vector file: the document's vectors put, or taken out.
    pub fn apply(&mut self, record: &VectorRecord) {
        match record {
            VectorRecord::Put(s) => self.upsert_stored(s),
            VectorRecord::Drop(id) => self.remove(id),
        }
    }

    /// The list of row `i` among `centroids`.
    fn nearest_list(&self, centroids: &Centroids, i: usize) -> u32 {
        simd().dispatch(NearestCentroids {
            centroids,
            values: self.values_of(i),
        })[0]
    }

    fn group_number(&mut self, group: Option<&str>) -> u32 {
        let Some(key) = group.map(group_key) else {
            return 0;
        };
        if let Some(&n) = self.group_numbers.get(&key) {
            return n;
        }
        let n = self.groups.len() as u32;
        self.groups.push(key.clone());
        self.group_numbers.insert(key, n);
        n
    }

    /// Adds or replaces `document`'s summary vector.
    pub fn upsert(&mut self, document: &impl AsDocument, summary: &Quantised) {
        let d = document.as_document();
        self.upsert_row(d.id, d.kind, d.group, summary, None);
    }

    /// Adds or replaces the vectors of what the vector file stores of a document.
    pub fn upsert_stored(&mut self, s: &Stored) {
        self.upsert_row(
            s.id,
            s.kind,
            s.group.as_deref(),
            &s.vectors.summary,
            s.vectors.context.as_ref(),
        );
    }

    /// Adds or replaces the summary vector (and context vector) of document `id` of this type
    /// and group.
    pub fn upsert_row(
        &mut self,
        id: Ulid,
        kind: Kind,
        group: Option<&str>,
        summary: &Quantised,
        context: Option<&Quantised>,
    ) {
        debug_assert_eq!(summary.values.len(), self.dims);
        if let Some(r) = self.base_row(&id) {
            self.kill(r);
        }
        if let Some(changed) = &mut self.changed {
            changed.insert(id);
        }
        match context {
            Some(c) => self.contexts.insert(id, c.clone()),
            None => self.contexts.remove(&id),
        };
        let row = Row {
            id,
            kind,
            group: self.group_number(group),
            has_context: context.is_some(),
        };
        let dims = self.dims;
        let i = match self.at.get(&id) {
            Some(&i) => {
                self.rows[i] = row;
                self.scales[i] = summary.scale;
                self.values[i * dims..(i + 1) * dims].copy_from_slice(&summary.values);
                if let Some(lists) = &mut self.lists {
                    let old = lists.list_of[i] as usize;
                    take_out(&mut lists.members[old], i);
                }
                i
            }
            None => {
                let i = self.rows.len();
                self.at.insert(id, i);
                self.rows.push(row);
                self.scales.push(summary.scale);
                self.values.extend_from_slice(&summary.values);
                i
            }
        };
        if let Some(mut lists) = self.lists.take() {
            let list = self.nearest_list(&lists.centroids, i);
            lists.members[list as usize].push(i as u32);
            match lists.list_of.get_mut(i) {
                Some(slot) => *slot = list,
                None => lists.list_of.push(list),
            }
            self.lists = Some(lists);
        }
    }

    /// Takes `id`'s row out (in memory, the last row takes its place; in the base, it is
    /// marked dead).
    pub fn remove(&mut self, id: &Ulid) {
        if let Some(changed) = &mut self.changed {
            changed.insert(*id);
        }
        if let Some(r) = self.base_row(id) {
            self.kill(r);
        }
        self.contexts.remove(id);
        let Some(i) = self.at.remove(id) else {
            return;
        };
        let dims = self.dims;
        let last = self.rows.len() - 1;
        if let Some(lists) = &mut self.lists {
            take_out(&mut lists.members[lists.list_of[i] as usize], i);
            if i != last {
                let moved = &mut lists.members[lists.list_of[last] as usize];
                if let Some(slot) = moved.iter_mut().find(|r| **r as usize == last) {
                    *slot = i as u32;
                }
            }
            lists.list_of.swap_remove(i);
        }
        if i != last {
            self.at.insert(self.rows[last].id, i);
            self.values
                .copy_within(last * dims..(last + 1) * dims, i * dims);
        }
        self.rows.swap_remove(i);
        self.scales.swap_remove(i);
        self.values.truncate(last * dims);
    }

    /// Whether `id` has a summary vector here, and whether a context vector is stored too.
    pub fn has(&self, id: &Ulid) -> (bool, bool) {
        if let Some(&i) = self.at.get(id) {
            return (true, self.rows[i].has_context);
        }
        match (self.base_row(id), &self.base) {
            (Some(r), Some(base)) => (true, base.context(r).is_some()),
            _ => (false, false),
        }
    }

    /// The type of the document of row `id`.
    pub fn kind(&self, id: &Ulid) -> Option<Kind> {
        if let Some(&i) = self.at.get(id) {
            return Some(self.rows[i].kind);
        }
        Some(self.base.as_ref()?.kind(self.base_row(id)?))
    }

    /// The cosine of `query` with the summary of each of `ids` that has one.
    pub fn cosines(&self, query: &Quantised, ids: &[Ulid]) -> Vec<Option<f32>> {
        ids.iter()
            .map(|id| self.get(id).map(|v| query.cosine(&v)))
            .collect()
    }

    /// The summary vector of `id`.
    pub fn get(&self, id: &Ulid) -> Option<Quantised> {
        if let Some(&i) = self.at.get(id) {
            return Some(self.summary_of(i));
        }
        Some(self.base.as_ref()?.summary(self.base_row(id)?))
    }

    /// What the filter keeps, `skip` left out: `None` when no row can match (a group
    /// no document has).
    fn kept(&self, filter: Filter<'_>, skip: Option<&Ulid>) -> Option<RowFilter> {
        let (group, base_group) = match filter.group {
            None => (None, None),
            Some(p) => {
                let here = self.group_numbers.get(&group_key(p)).copied();
                let there = self.base.as_ref().and_then(|b| b.group_number(p));
                if here.is_none() && there.is_none() {
                    return None;
                }
                (
                    Some(here.unwrap_or(u32::MAX)),
                    Some(there.unwrap_or(u32::MAX)),
                )
            }
        };
        Some(RowFilter {
            kind: filter.kind,
            group,
            base_group,
            skip: skip.and_then(|id| self.at.get(id).copied()),
            skip_base: skip.and_then(|id| self.base_row(id)),
        })
    }

    /// Whether row `i` in memory is one `kept` keeps: a search without filters reads no row.
    #[inline(always)]
    fn keeps(&self, kept: &RowFilter, i: usize) -> bool {
        kept.skip != Some(i)
            && (kept.kind.is_none() && kept.group.is_none() || {
                let row = &self.rows[i];
                kept.kind.is_none_or(|t| t == row.kind) && kept.group.is_none_or(|p| p == row.group)
            })
    }

    /// Whether row `r` of the base is one `kept` keeps.
    #[inline(always)]
    fn keeps_base(&self, base: &Base, kept: &RowFilter, r: usize) -> bool {
        !self.is_dead(r)
            && kept.skip_base != Some(r)
            && (kept.kind.is_none() && kept.base_group.is_none()
                || kept.kind.is_none_or(|t| t == base.kind(r))
                    && kept.base_group.is_none_or(|p| p == base.group(r)))
    }

    /// The `k` documents whose summary is nearest `query` (cosine, best first) among those
    /// the filter keeps, `skip` left out: exactly up to [`EXACT_UP_TO`] rows (and while
    /// lists are being made), beyond in the lists nearest the query.
    pub fn nearest(
        &self,
        query: &Quantised,
        k: usize,
        filter: Filter<'_>,
        skip: Option<&Ulid>,
    ) -> Vec<(Ulid, f32)> {
        self.search(query, k, filter, skip, true)
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

    /// The search of [`Self::nearest`] and [`Self::nearest_exact`], in [`simd`]'s dispatch.
    fn search(
        &self,
        query: &Quantised,
        k: usize,
        filter: Filter<'_>,
        skip: Option<&Ulid>,
        by_lists: bool,
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
            lists: self.lists.as_ref().filter(|_| by_lists),
        })
    }

    /// Offers the rows `rows` of the base the filter keeps to `best`; returns how many.
    #[inline(always)]
    fn offer_base(
        &self,
        base: &Base,
        rows: std::ops::Range<usize>,
        query: &Quantised,
        kept: &RowFilter,
        best: &mut BestRows,
    ) -> usize {
        let mut scored = 0;
        let values = base.values(rows.clone());
        for (r, row) in rows.zip(values.chunks_exact(self.dims)) {
            if self.keeps_base(base, kept, r) {
                let score = Score(dot(&query.values, row) as f32 * base.scale(r));
                best.offer(score, BASE_ROW | r);
                scored += 1;
            }
        }
        scored
    }

    /// Offers row `i` in memory to `best`.
    #[inline(always)]
    fn offer(&self, query: &Quantised, i: usize, best: &mut BestRows) {
        let score = dot(&query.values, self.values_of(i)) as f32 * self.scales[i];
        best.offer(Score(score), i);
    }

    /// [`Self::nearest`] through `lists`, compiled for the machine's vector instructions:
    /// the rows the filter keeps in the lists [`Self::probing`] gives.
    #[inline(always)]
    fn nearest_in_lists(
        &self,
        lists: &Lists,
        query: &Quantised,
        k: usize,
        kept: &RowFilter,
    ) -> Vec<(Ulid, f32)> {
        let mut best = BestRows::new(k);
        let mut probing = self.probing(lists, query, k);
        while let Some(list) = probing.next() {
            probing.count(self.score_list(lists, list, query, kept, &mut best));
        }
        best.into_results(self, query)
    }

    /// The lists a search through `lists` reads: by their centroid's cosine with the
    /// query, nearest first, until [`Probe`] has enough rows the filter keeps.
    #[inline(always)]
    fn probing(&self, lists: &Lists, query: &Quantised, k: usize) -> Probing {
        let c = &lists.centroids;
        // Plain loops: iterator adapters such as `collect` may stay calls that the
        // dispatch's instructions do not reach.
        let mut order: Vec<(Score, u32)> = Vec::with_capacity(c.len());
        for (n, (centroid, &scale)) in c.values.chunks_exact(c.dims).zip(&c.scales).enumerate() {
            order.push((Score(dot(&query.values, centroid) as f32 * scale), n as u32));
        }
        order.sort_unstable_by(|a, b| b.cmp(a));
        Probing {
            order,
            probe: Probe::new(k, self.len(), c.len()),
            given: 0,
            scored: 0,
        }
    }

    /// The lists [`Self::probing`] gives, with how many rows the filter keeps in each,
    /// none scored.
    #[inline(always)]
    fn probed(
        &self,
        lists: &Lists,
        query: &Quantised,
        k: usize,
        kept: &RowFilter,
    ) -> (Vec<u32>, Vec<usize>) {
        let (mut probed, mut rows) = (Vec::new(), Vec::new());
        let mut probing = self.probing(lists, query, k);
        while let Some(list) = probing.next() {
            let mut brings = 0;
            if let Some(base) = &self.base {
                for r in base.list(list as usize) {
                    brings += usize::from(self.keeps_base(base, kept, r));
                }
            }
            for &i in &lists.members[list as usize] {
                brings += usize::from(self.keeps(kept, i as usize));
            }
            probed.push(list);
            rows.push(brings);
            probing.count(brings);
        }
        (probed, rows)
    }

    /// Offers the rows of `list` the filter keeps to `best`; returns how many.
    #[inline(always)]
    fn score_list(
        &self,
        lists: &Lists,
        list: u32,
        query: &Quantised,
        kept: &RowFilter,
        best: &mut BestRows,
    ) -> usize {
        let mut scored = 0;
        if let Some(base) = &self.base {
            scored += self.offer_base(base, base.list(list as usize), query, kept, best);
        }
        for &i in &lists.members[list as usize] {
            let i = i as usize;
            if self.keeps(kept, i) {
                self.offer(query, i, best);
                scored += 1;
            }
        }
        scored
    }

    /// [`Self::nearest`] through the lists, in two parts of about as many rows for two
    /// threads to score side by side ([`Parted`]); `None` when the table has no lists (it
    /// is searched whole) or the filter keeps no row.
    pub fn parted(
        &self,
        query: &Quantised,
        k: usize,
        filter: Filter<'_>,
        skip: Option<&Ulid>,
    ) -> Option<Parted<'_>> {
        let lists = self.lists.as_ref()?;
        if k == 0 || query.values.len() != self.dims || self.dims == 0 {
            return None;
        }
        let kept = self.kept(filter, skip)?;
        let (probed, rows) = simd().dispatch(Probed {
            index: self,
            lists,
            query,
            k,
            kept: &kept,
        });
        // The first part's lists bring half the rows or just more.
        let half = rows.iter().sum::<usize>().div_ceil(2);
        let mut split = 0;
        let mut first = 0;
        while split < rows.len() && first < half {
            first += rows[split];
            split += 1;
        }
        Some(Parted {
            index: self,
            lists,
            query: query.clone(),
            k,
            kept,
            parts: [probed[..split].to_vec(), probed[split..].to_vec()],
            next: AtomicUsize::new(0),
            found: Mutex::new(Vec::with_capacity(2)),
        })
    }

    /// The document of a row [`BestRows`] kept.
    fn id_of(&self, slot: usize) -> Ulid {
        match &self.base {
            Some(base) if slot & BASE_ROW != 0 => base.id(slot & !BASE_ROW),
            _ => self.rows[slot].id,
        }
    }
}

/// When a search through lists has scored enough: [`PROBE_PER_RESULT`] rows a result (at
/// least [`PROBE_MIN_ROWS`]), in [`PROBE_MIN_LISTS`] lists or as many rows as that many
/// lists of the mean size hold.
#[derive(Debug, Clone, Copy)]
struct Probe {
    wanted: usize,
    mean_lists: usize,
}

impl Probe {
    fn new(k: usize, rows: usize, lists: usize) -> Probe {
        Probe {
            wanted: (k * PROBE_PER_RESULT).max(PROBE_MIN_ROWS),
            mean_lists: rows / lists.max(1) * PROBE_MIN_LISTS,
        }
    }

    /// About how many rows a probe scores: it stops at the first list that brings it
    /// both enough rows and, on lists of the mean size, the lists.
    fn rows(&self) -> usize {
        self.wanted.max(self.mean_lists)
    }

    /// Whether `scored` rows in the `probed` nearest lists are enough.
    fn done(&self, probed: usize, scored: usize) -> bool {
        scored >= self.wanted && (probed >= PROBE_MIN_LISTS || scored >= self.mean_lists)
    }
}

/// The lists a search reads, nearest first ([`VectorIndex::probing`]), each told how many
/// rows it brought. A loop over them, not a closure each list is given to: a closure is
/// compiled without the dispatch's vector instructions, and the scoring in it called
/// them one by one (`cargo bench --bench scale` times an add's search by meaning).
struct Probing {
    /// The lists, nearest first.
    order: Vec<(Score, u32)>,
    probe: Probe,
    /// How many lists were given.
    given: usize,
    /// The rows they brought.
    scored: usize,
}

impl Probing {
    /// The next list to read; `None` once the lists given brought enough rows.
    #[inline(always)]
    fn next(&mut self) -> Option<u32> {
        if self.probe.done(self.given, self.scored) {
            return None;
        }
        let &(_, list) = self.order.get(self.given)?;
        self.given += 1;
        Some(list)
    }

    /// The rows the filter keeps in the list given last.
    #[inline(always)]
    fn count(&mut self, rows: usize) {
        self.scored += rows;
    }
}

/// The `k` rows with the greatest int8 dot product with a query among those offered.
struct BestRows {
    k: usize,
    /// A min-heap of the best k: (score, row), the worst on top; a base's row is marked
    /// with [`BASE_ROW`].
    heap: BinaryHeap<std::cmp::Reverse<(Score, usize)>>,
}

impl BestRows {
    fn new(k: usize) -> BestRows {
        BestRows {
            k,
            heap: BinaryHeap::with_capacity(k + 1),
        }
    }

    /// Keeps the row if among the best `k` offered; of rows scoring the same, the higher
    /// slot (so that the rows kept do not depend on the order they were offered in).
    #[inline(always)]
    fn offer(&mut self, score: Score, slot: usize) {
        if self.heap.len() < self.k {
            self.heap.push(std::cmp::Reverse((score, slot)));
        } else if self.heap.peek().is_some_and(|w| (score, slot) > w.0) {
            self.heap.pop();
            self.heap.push(std::cmp::Reverse((score, slot)));
        }
    }

    /// The documents and their cosines, best first.
    fn into_results(self, index: &VectorIndex, query: &Quantised) -> Vec<(Ulid, f32)> {
        let mut out: Vec<(Ulid, f32)> = self
            .heap
            .into_iter()
            .map(|std::cmp::Reverse((s, slot))| (index.id_of(slot), s.0 * query.scale))
            .collect();
        out.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| b.0.cmp(&a.0)));
        out
    }
}

/// A search through the lists in two parts ([`VectorIndex::parted`]): each thread that
/// calls [`Parted::work`] scores a part no other took, and [`Parted::results`] merges
/// their best. The same documents as [`VectorIndex::nearest`]: the same lists, and ties
/// kept by row, whatever the order the rows were scored in.
pub struct Parted<'a> {
    index: &'a VectorIndex,
    lists: &'a Lists,
    query: Quantised,
    k: usize,
    kept: RowFilter,
    /// The lists of each part, nearest first.
    parts: [Vec<u32>; 2],
    /// The next part to score.
    next: AtomicUsize,
    found: Mutex<Vec<BestRows>>,
}

impl Parted<'_> {
    /// Scores a part no other thread took; `false` when none was left.
    pub fn work(&self) -> bool {
        let Some(probed) = self
            .parts
            .get(self.next.fetch_add(1, AtomicOrdering::Relaxed))
        else {
            return false;
        };
        let mut best = BestRows::new(self.k);
        simd().dispatch(ScoreLists {
            index: self.index,
            lists: self.lists,
            probed,
            query: &self.query,
            kept: &self.kept,
            best: &mut best,
        });
        self.found
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(best);
        true
    }

    /// The documents nearest the query and their cosines, best first, once the parts are
    /// scored (those no thread took, on this one).
    pub fn results(&self) -> Vec<(Ulid, f32)> {
        while self.work() {}
        let mut best = BestRows::new(self.k);
        let found = std::mem::take(&mut *self.found.lock().unwrap_or_else(|p| p.into_inner()));
        for part in found {
            for std::cmp::Reverse((score, slot)) in part.heap {
                best.offer(score, slot);
            }
        }
        best.into_results(self.index, &self.query)
    }
}

/// [`VectorIndex::probed`] through [`simd`]'s dispatch.
struct Probed<'a> {
    index: &'a VectorIndex,
    lists: &'a Lists,
    query: &'a Quantised,
    k: usize,
    kept: &'a RowFilter,
}

impl pulp::WithSimd for Probed<'_> {
    type Output = (Vec<u32>, Vec<usize>);

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) -> Self::Output {
        self.index.probed(self.lists, self.query, self.k, self.kept)
    }
}

/// [`VectorIndex::score_list`] of each of `probed`, through [`simd`]'s dispatch.
struct ScoreLists<'a> {
    index: &'a VectorIndex,
    lists: &'a Lists,
    probed: &'a [u32],
    query: &'a Quantised,
    kept: &'a RowFilter,
    best: &'a mut BestRows,
}

impl pulp::WithSimd for ScoreLists<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) {
        for &list in self.probed {
            self.index
                .score_list(self.lists, list, self.query, self.kept, self.best);
        }
    }
}

/// A search of the table, run through [`simd`]'s dispatch: through its lists, or exactly.
struct Search<'a> {
    index: &'a VectorIndex,
    query: &'a Quantised,
    k: usize,
    kept: &'a RowFilter,
    lists: Option<&'a Lists>,
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
            lists,
        } = self;
        if let Some(lists) = lists {
            return index.nearest_in_lists(lists, query, k, kept);
        }
        let mut best = BestRows::new(k);
        if let Some(base) = &index.base {
            index.offer_base(base, 0..base.rows(), query, kept, &mut best);
        }
        for i in 0..index.rows.len() {
            if index.keeps(kept, i) {
                index.offer(query, i, &mut best);
            }
        }
        best.into_results(index, query)
    }
}

/// The rows a search keeps (see [`VectorIndex::kept`]).
struct RowFilter {
    kind: Option<Kind>,
    /// A group's number among the rows in memory, and in the base (`u32::MAX`: none
    /// there has it).
    group: Option<u32>,
    base_group: Option<u32>,
    /// The row left out, in memory or in the base.
    skip: Option<usize>,
    skip_base: Option<usize>,
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
    use crate::test_docs::{BUG, Doc, PATTERN};

    fn unit(v: &[f32]) -> Vec<f32> {
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / n).collect()
    }

    fn document(id: u128, kind: Kind, group: Option<&str>) -> Doc {
        let mut doc = Doc::new(kind, "t", "", Vec::new());
        doc.id = Ulid::from(id);
        doc.group = group.map(str::to_string);
        doc.seq = 1;
        doc
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

    /// The lists scored, list after list, for sizes nearest first.
    fn probed(probe: Probe, sizes: &[usize]) -> (usize, usize) {
        let mut scored = 0;
        for (probed, size) in sizes.iter().enumerate() {
            if probe.done(probed, scored) {
                return (probed, scored);
            }
            scored += size;
        }
        (sizes.len(), scored)
    }

    /// A million rows in 1,000 lists, 20 results wanted (4,000 rows): lists of the mean
    /// size are scored 12 deep; dense ones until 12 mean lists' rows; small ones until the
    /// rows wanted.
    #[test]
    fn a_probe_stops_at_twelve_lists_or_twelve_mean_lists_rows() {
        let probe = Probe::new(20, 1_000_000, 1_000);
        assert_eq!(probed(probe, &[1_000; 40]), (12, 12_000));
        assert_eq!(probed(probe, &[5_000; 40]), (3, 15_000));
        assert_eq!(probed(probe, &[17_000, 10, 10]), (1, 17_000));
        assert_eq!(probed(probe, &[100; 60]), (40, 4_000));
        assert_eq!(probed(probe, &[100; 30]), (30, 3_000));
        // Five results: 2,048 rows at least.
        assert_eq!(
            probed(Probe::new(5, 1_000_000, 1_000), &[300; 20]),
            (12, 3_600)
        );
        assert_eq!(
            probed(Probe::new(5, 1_000_000, 1_000), &[100; 40]),
            (21, 2_100)
        );
        // What a search is expected to score, for `is_large`: on lists of the mean size.
        assert_eq!(probe.rows(), 12_000);
        assert_eq!(Probe::new(5, 100_000, 1_000).rows(), 2_048);
    }

    #[test]
    fn records_round_trip_and_bad_ones_are_refused() {
        let v = DocVectors {
            summary: Quantised::of(&unit(&[1.0, 2.0, -3.0])),
            context: Some(Quantised::of(&unit(&[0.0, 1.0, 1.0]))),
        };
        assert_eq!(DocVectors::decode(&v.encode()), Some(v.clone()));
        let no_context = DocVectors {
            context: None,
            ..v.clone()
        };
        assert_eq!(
            DocVectors::decode(&no_context.encode()),
            Some(no_context.clone())
        );
        let bytes = v.encode();
        for cut in 0..bytes.len() {
            assert_eq!(DocVectors::decode(&bytes[..cut]), None, "cut at {cut}");
        }
        let mut longer = no_context.encode();
        longer.push(0);
        assert_eq!(DocVectors::decode(&longer), None);
        let mut other_version = bytes.clone();
        other_version[0] = 9;
        assert_eq!(DocVectors::decode(&other_version), None);
    }

    #[test]
    fn nearest_ranks_filters_and_replaces() {
        let mut index = VectorIndex::new(3);
        let vectors = [
            (1, BUG, Some("Web"), [1.0, 0.0, 0.0]),
            (2, BUG, None, [0.9, 0.1, 0.0]),
            (3, PATTERN, Some("web"), [0.7, 0.7, 0.0]),
            (4, BUG, Some("api"), [0.0, 0.0, 1.0]),
        ];
        for (id, t, p, v) in vectors {
            index.upsert(&document(id, t, p), &Quantised::of(&unit(&v)));
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
            kind: Some(BUG),
            group: None,
        };
        assert_eq!(ids(index.nearest(&q, 10, bugs, None)), [1, 2, 4]);
        let web = Filter {
            kind: None,
            group: Some(" WEB "),
        };
        assert_eq!(ids(index.nearest(&q, 10, web, None)), [1, 3]);
        assert_eq!(
            ids(index.nearest(&q, 2, Filter::default(), Some(&Ulid::from(1)))),
            [2, 3]
        );
        // Replacing a row moves it.
        index.upsert(
            &document(1, BUG, Some("web")),
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

    /// Random unit vectors around `clusters` centres (so that lists mean something), from
    /// a fixed seed.
    struct Points {
        state: u64,
        centres: Vec<Vec<f32>>,
    }

    impl Points {
        fn new(dims: usize, clusters: usize) -> Points {
            let mut p = Points {
                state: 7,
                centres: Vec::new(),
            };
            p.centres = (0..clusters).map(|_| p.random(dims)).collect();
            p
        }

        fn next(&mut self) -> f32 {
            self.state = self
                .state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((self.state >> 33) as f32 / (1u64 << 31) as f32) - 0.5
        }

        fn random(&mut self, dims: usize) -> Vec<f32> {
            unit(&(0..dims).map(|_| self.next()).collect::<Vec<_>>())
        }

        /// A point near centre `c`.
        fn near(&mut self, c: usize) -> Vec<f32> {
            let centre = self.centres[c].clone();
            unit(
                &centre
                    .iter()
                    .map(|x| x + 0.1 * self.next())
                    .collect::<Vec<_>>(),
            )
        }

        fn moved(&mut self, v: &[f32]) -> Quantised {
            Quantised::of(&unit(
                &v.iter().map(|x| x + 0.01 * self.next()).collect::<Vec<_>>(),
            ))
        }
    }

    fn bug_or_pattern(id: u128) -> Kind {
        if id.is_multiple_of(2) { BUG } else { PATTERN }
    }

    /// Every row is in the list its `list_of` names, once, and the lists hold nothing else.
    fn check_lists(index: &VectorIndex) {
        let lists = index.lists.as_ref().expect("lists");
        assert_eq!(lists.list_of.len(), index.len());
        let mut seen = vec![0; index.len()];
        for (l, members) in lists.members.iter().enumerate() {
            for &i in members {
                assert_eq!(lists.list_of[i as usize] as usize, l, "row {i}");
                seen[i as usize] += 1;
            }
        }
        assert!(seen.iter().all(|&n| n == 1), "every row once");
    }

    /// `v`, a little moved, finds `id` first, as the exact search does, and a filter keeps
    /// its results to what it asks for.
    fn finds(index: &VectorIndex, points: &mut Points, id: u128, v: &[f32]) {
        let q = points.moved(v);
        let found = index.nearest(&q, 5, Filter::default(), None);
        let exact = index.nearest_exact(&q, 5, Filter::default(), None);
        assert_eq!(found[0].0, Ulid::from(id));
        assert_eq!(found[0], exact[0]);
        let bugs = Filter {
            kind: Some(BUG),
            group: None,
        };
        let found = index.nearest(&q, 5, bugs, None);
        assert_eq!(found.len(), 5);
        assert!(found.iter().all(|(id, _)| u128::from(*id) % 2 == 0));
        let unknown = Filter {
            kind: None,
            group: Some("nowhere"),
        };
        assert!(index.nearest(&q, 5, unknown, None).is_empty());
    }

    #[test]
    fn many_centroids_place_rows_through_groups_near_the_nearest() {
        // Topics and their subtopics, as texts' meanings are: 20 centres, 15 near each.
        let dims = 16;
        let mut points = Points::new(dims, 20);
        let subtopics: Vec<Vec<f32>> = (0..300).map(|i| points.near(i % 20)).collect();
        points.centres = subtopics;
        let rows: Vec<Quantised> = (0..2400)
            .map(|i| Quantised::of(&points.near(i % 300)))
            .collect();
        let sample = Sample {
            dims,
            scales: rows.iter().map(|q| q.scale).collect(),
            values: rows.iter().flat_map(|q| q.values.clone()).collect(),
            made_at: rows.len(),
            lists: 240,
        };
        let centroids = sample.train();
        assert_eq!(centroids.len(), 240);
        let groups = centroids
            .groups
            .as_ref()
            .expect("240 centroids are grouped");
        assert_eq!(groups.centres.len(), list_count(240));
        let mut grouped: Vec<u32> = groups.members.concat();
        grouped.sort();
        assert_eq!(
            grouped,
            (0..240).collect::<Vec<u32>>(),
            "each centroid in one group"
        );
        // Placed through the groups: the nearest centroid mostly, and never far from it.
        let cosine = |row: &Quantised, c: u32| {
            let at = c as usize * dims;
            dot(&row.values, &centroids.values[at..at + dims]) as f32
                * row.scale
                * centroids.scales[c as usize]
        };
        let mut same = 0;
        for row in &rows {
            let (placed, nearest) = (centroids.place(&row.values), centroids.nearest(&row.values));
            same += usize::from(placed == nearest);
            let (a, b) = (cosine(row, nearest), cosine(row, placed));
            assert!(a - b < 0.1, "{a} {b}");
        }
        assert!(
            same * 10 >= rows.len() * 9,
            "{same} of {} placed in the nearest",
            rows.len()
        );
        // Few centroids are not grouped.
        let few = Sample {
            lists: 40,
            ..sample
        }
        .train();
        assert!(few.groups.is_none());
    }

    /// A search through the lists in two parts, scored on two threads, finds the documents
    /// the search in one finds: with a filter, with a row left out, over removed rows, and
    /// among rows that score the same (five copies of each vector), which it keeps by row
    /// as the one does, whichever part scored first.
    #[test]
    fn a_search_in_two_parts_finds_what_the_search_in_one_finds() {
        let dims = 64;
        let mut points = Points::new(dims, 40);
        let mut index = VectorIndex::new(dims);
        let mut last = Vec::new();
        for id in 0..3000u128 {
            // Five rows a vector.
            if id % 5 == 0 {
                last = points.near(id as usize / 5 % 40);
            }
            let group = (id % 3 == 0).then_some("tandem");
            index.upsert(
                &document(id, bug_or_pattern(id), group),
                &Quantised::of(&last),
            );
        }
        index.make_lists();
        for id in (0..3000u128).step_by(13) {
            index.remove(&Ulid::from(id));
        }
        let (mut ties, mut split) = (0, 0);
        for q in 0..80usize {
            let near = points.near(q % 40);
            let query = points.moved(&near);
            let filter = match q % 3 {
                0 => Filter::default(),
                1 => Filter {
                    kind: Some(BUG),
                    group: None,
                },
                _ => Filter {
                    kind: None,
                    group: Some("tandem"),
                },
            };
            let skip = (q % 4 == 0).then(|| Ulid::from(q as u128 * 37 + 4));
            let k = 1 + q % 20;
            let expected = index.nearest(&query, k, filter, skip.as_ref());
            let parted = index
                .parted(&query, k, filter, skip.as_ref())
                .expect("lists");
            split += usize::from(parted.parts.iter().all(|p| !p.is_empty()));
            std::thread::scope(|s| {
                s.spawn(|| parted.work());
                parted.work();
            });
            let found = parted.results();
            assert_eq!(found, expected, "query {q}");
            ties += found.windows(2).filter(|w| w[0].1 == w[1].1).count();
        }
        assert!(split > 70, "the lists were cut in two parts: {split}");
        assert!(ties > 0, "rows scoring the same were found");
    }

    #[test]
    fn a_large_table_is_cut_into_lists_and_searched_through_them() {
        for dims in [64, 256] {
            large_table(dims);
        }
    }

    fn large_table(dims: usize) {
        let mut points = Points::new(dims, 40);
        let mut index = VectorIndex::new(dims);
        let mut vectors = Vec::new();
        // Lists are wanted beyond `EXACT_UP_TO` rows; any table can be cut into them.
        let n = 1500;
        for id in 0..n {
            let v = points.near(id as usize % 40);
            index.upsert(&document(id, bug_or_pattern(id), None), &Quantised::of(&v));
            vectors.push(v);
        }
        assert!(!index.wants_lists());
        assert_eq!(index.list_count(), 0);
        finds(&index, &mut points, 7, &vectors[7]);

        index.make_lists();
        assert_eq!(index.list_count(), list_count(n as usize));
        assert!(!index.wants_lists());
        check_lists(&index);
        for id in (3..n).step_by(250) {
            finds(&index, &mut points, id, &vectors[id as usize]);
        }

        // Rows added, replaced and removed keep their lists.
        for id in n..n + 50 {
            let v = points.near(id as usize % 40);
            index.upsert(&document(id, bug_or_pattern(id), None), &Quantised::of(&v));
            vectors.push(v);
        }
        let elsewhere = points.random(dims);
        index.upsert(&document(10, BUG, None), &Quantised::of(&elsewhere));
        vectors[10] = elsewhere;
        for id in [0, 11, n + 49] {
            index.remove(&Ulid::from(id));
        }
        check_lists(&index);
        for id in [10, 12, n, n + 48] {
            finds(&index, &mut points, id, &vectors[id as usize]);
        }
        assert!(
            index
                .nearest(&points.moved(&vectors[11]), 5, Filter::default(), None)
                .iter()
                .all(|(id, _)| *id != Ulid::from(11))
        );

        // Made again apart from the table, while it changes: what changed since the
        // sample is placed again when the lists are installed.
        let sample = index.sample();
        let centroids = sample.train();
        let mut assigned = index.assign(&centroids, 0, 2000);
        for id in 2 * n..2 * n + 20 {
            let v = points.near(id as usize % 40);
            index.upsert(&document(id, bug_or_pattern(id), None), &Quantised::of(&v));
            vectors.resize(id as usize + 1, Vec::new());
            vectors[id as usize] = v;
        }
        let elsewhere = points.random(dims);
        index.upsert(&document(20, BUG, None), &Quantised::of(&elsewhere));
        vectors[20] = elsewhere;
        index.remove(&Ulid::from(21));
        assigned.extend(index.assign(&centroids, 2000, usize::MAX));
        assert!(index.install(centroids.clone(), assigned.clone()));
        check_lists(&index);
        for id in [20, 22, 2 * n + 3, 2 * n + 19] {
            finds(&index, &mut points, id, &vectors[id as usize]);
        }
        // A table that did not give the sample takes no lists of it.
        assert!(!index.install(centroids, assigned));

        // Beyond `EXACT_UP_TO` rows, lists are wanted; then again at twice the rows they
        // were made of.
        let mut large = VectorIndex::new(4);
        for id in 0..=EXACT_UP_TO as u128 {
            large.upsert(
                &document(id, BUG, None),
                &Quantised::of(&[1.0, 0.0, 0.0, 0.0]),
            );
        }
        assert!(large.wants_lists() && large.is_large() == (EXACT_UP_TO > LARGE_SEARCH_ROWS));
        large.make_lists();
        assert!(
            !large.wants_lists() && large.is_large() == (large.search_rows() > LARGE_SEARCH_ROWS)
        );
        assert_eq!(large.list_count(), list_count(EXACT_UP_TO + 1));
        while large.len() < REMAKE_GROWTH * (EXACT_UP_TO + 1) - 1 {
            let id = large.len() as u128;
            large.upsert(
                &document(id, BUG, None),
                &Quantised::of(&[0.0, 1.0, 0.0, 0.0]),
            );
        }
        assert!(!large.wants_lists());
        large.upsert(
            &document(1 << 40, BUG, None),
            &Quantised::of(&[0.0, 0.0, 1.0, 0.0]),
        );
        assert!(large.wants_lists());
        check_lists(&large);
    }
}
