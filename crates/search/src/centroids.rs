//! The centroids of a large table's lists: spherical k-means of a sample of its rows
//! ([`Sample::train`]), kept as quantised unit vectors ([`crate::quantised`]). The table
//! ([`crate::vectors`]) places its rows by them; its base ([`crate::vector_base`]) stores
//! them, so they stand below both.

use crate::quantised::{Quantised, dot, simd};

/// A table of n rows is cut into about √n lists, at least this many...
const MIN_LISTS: usize = 16;
/// ...and at most this many.
const MAX_LISTS: usize = 4096;
/// The rounds of k-means that make the centroids.
const TRAIN_ROUNDS: usize = 10;

/// The centres of a table's lists: spherical k-means of a sample of its rows, kept as int8
/// unit vectors. Made apart from the table ([`crate::vectors::VectorIndex::sample`],
/// [`Sample::train`]), so that a large table is cut into lists without holding it.
#[derive(Debug, Clone)]
pub struct Centroids {
    pub(super) dims: usize,
    pub(super) scales: Vec<f32>,
    /// `len() × dims` values.
    pub(super) values: Vec<i8>,
    /// The table's rows when the sample was taken.
    pub(super) made_at: usize,
    /// The centroids in groups, when they are many ([`GROUPS_FROM`]).
    pub(super) groups: Option<Box<Groups>>,
}

/// Many centroids in groups, so that a row is placed by scoring the groups' centres, then
/// the centroids of the nearest [`GROUPS_PROBED`] groups, not every centroid: at a million
/// rows (1,000 lists), about 160 dot products a row instead of 1,000. A row whose nearest
/// centroid lies in another group goes to a list a little less near: searches probe
/// several lists, so it is still found.
#[derive(Debug, Clone)]
pub(super) struct Groups {
    /// k-means of the centroids, about √ of them.
    pub(super) centres: Centroids,
    /// Each group's centroids.
    pub(super) members: Vec<Vec<u32>>,
}

/// From this many centroids, rows are placed through [`Groups`].
const GROUPS_FROM: usize = 200;
/// A row is placed among the centroids of this many groups nearest it.
const GROUPS_PROBED: usize = 4;

impl Centroids {
    /// Centroids read back (a base's): `scales` and `values` of `len × dims`, made of a
    /// table of `made_at` rows; grouped when they are many.
    pub fn from_parts(dims: usize, scales: Vec<f32>, values: Vec<i8>, made_at: usize) -> Centroids {
        debug_assert_eq!(scales.len() * dims, values.len());
        let mut centroids = Centroids {
            dims,
            scales,
            values,
            made_at,
            groups: None,
        };
        centroids.group();
        centroids
    }

    /// The scales and the values, centroid after centroid.
    pub fn parts(&self) -> (&[f32], &[i8]) {
        (&self.scales, &self.values)
    }

    /// The table's rows when the centroids were made.
    pub fn made_at(&self) -> usize {
        self.made_at
    }

    /// Whether `other` holds the same centroids.
    pub fn same_as(&self, other: &Centroids) -> bool {
        self.dims == other.dims && self.scales == other.scales && self.values == other.values
    }

    pub fn len(&self) -> usize {
        self.scales.len()
    }

    pub fn is_empty(&self) -> bool {
        self.scales.is_empty()
    }

    /// The number of the centroid nearest the int8 row `values`. Inlined into [`simd`]'s
    /// dispatch by its callers.
    #[inline(always)]
    pub(super) fn nearest(&self, values: &[i8]) -> u32 {
        let mut best = (f32::NEG_INFINITY, 0u32);
        for (c, (centroid, &scale)) in self
            .values
            .chunks_exact(self.dims)
            .zip(&self.scales)
            .enumerate()
        {
            let score = dot(values, centroid) as f32 * scale;
            if score > best.0 {
                best = (score, c as u32);
            }
        }
        best.1
    }

    /// The number of the centroid a row is placed in: the nearest, through the groups when
    /// there are groups. Inlined into [`simd`]'s dispatch by its callers.
    #[inline(always)]
    pub(super) fn place(&self, values: &[i8]) -> u32 {
        let Some(groups) = &self.groups else {
            return self.nearest(values);
        };
        let centres = &groups.centres;
        let mut near = [(f32::NEG_INFINITY, u32::MAX); GROUPS_PROBED];
        for (g, (centre, &scale)) in centres
            .values
            .chunks_exact(centres.dims)
            .zip(&centres.scales)
            .enumerate()
        {
            let score = dot(values, centre) as f32 * scale;
            if score > near[GROUPS_PROBED - 1].0 {
                let mut at = GROUPS_PROBED - 1;
                while at > 0 && near[at - 1].0 < score {
                    near[at] = near[at - 1];
                    at -= 1;
                }
                near[at] = (score, g as u32);
            }
        }
        let mut best = (f32::NEG_INFINITY, 0u32);
        for &(_, g) in near.iter().filter(|(_, g)| *g != u32::MAX) {
            for &c in &groups.members[g as usize] {
                let at = c as usize * self.dims;
                let score =
                    dot(values, &self.values[at..at + self.dims]) as f32 * self.scales[c as usize];
                if score > best.0 {
                    best = (score, c);
                }
            }
        }
        best.1
    }

    /// Puts many centroids in groups ([`Groups`]): k-means of the centroids themselves.
    fn group(&mut self) {
        if self.len() < GROUPS_FROM {
            return;
        }
        let as_sample = Sample {
            dims: self.dims,
            scales: self.scales.clone(),
            values: self.values.clone(),
            made_at: self.len(),
            lists: list_count(self.len()),
        };
        let centres = simd().dispatch(KMeans(&as_sample));
        let mut members = vec![Vec::new(); centres.len()];
        let of = simd().dispatch(NearestCentroids {
            centroids: &centres,
            values: &self.values,
        });
        for (c, g) in of.into_iter().enumerate() {
            members[g as usize].push(c as u32);
        }
        self.groups = Some(Box::new(Groups { centres, members }));
    }
}

/// Rows sampled from a table ([`crate::vectors::VectorIndex::sample`]), to make its lists'
/// centroids of.
pub struct Sample {
    pub(super) dims: usize,
    pub(super) scales: Vec<f32>,
    pub(super) values: Vec<i8>,
    /// The table's rows when the sample was taken.
    pub(super) made_at: usize,
    /// How many lists to make.
    pub(super) lists: usize,
}

impl Sample {
    /// The centroids of the sample's rows: spherical k-means, from rows spread over the
    /// sample, [`TRAIN_ROUNDS`] rounds; a list left empty takes another row of the sample.
    pub fn train(&self) -> Centroids {
        simd().dispatch(KMeans(self))
    }
}

/// How many lists a table of `rows` rows is cut into.
pub(super) fn list_count(rows: usize) -> usize {
    ((rows as f64).sqrt().round() as usize).clamp(MIN_LISTS, MAX_LISTS)
}

/// `v` scaled to unit length (all zeros as it is).
fn unit_length(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}

/// The nearest centroid of each row of `values`, through [`simd`]'s dispatch.
pub(super) struct NearestCentroids<'a> {
    pub(super) centroids: &'a Centroids,
    pub(super) values: &'a [i8],
}

impl pulp::WithSimd for NearestCentroids<'_> {
    type Output = Vec<u32>;

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) -> Self::Output {
        let mut out = Vec::with_capacity(self.values.len() / self.centroids.dims);
        for row in self.values.chunks_exact(self.centroids.dims) {
            out.push(self.centroids.place(row));
        }
        out
    }
}

/// k-means of a [`Sample`], through [`simd`]'s dispatch.
struct KMeans<'a>(&'a Sample);

impl pulp::WithSimd for KMeans<'_> {
    type Output = Centroids;

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) -> Self::Output {
        let sample = self.0;
        let dims = sample.dims;
        let m = sample.scales.len();
        let k = sample.lists.min(m).max(1);
        let row = |r: usize| &sample.values[r * dims..(r + 1) * dims];
        let mut centroids = Centroids {
            dims,
            scales: Vec::with_capacity(k),
            values: Vec::with_capacity(k * dims),
            made_at: sample.made_at,
            groups: None,
        };
        if m == 0 || dims == 0 {
            return centroids;
        }
        for c in 0..k {
            let r = c * m / k;
            centroids.scales.push(sample.scales[r]);
            centroids.values.extend_from_slice(row(r));
        }
        let mut sums = vec![0f32; k * dims];
        let mut sizes = vec![0usize; k];
        for round in 0..TRAIN_ROUNDS {
            sums.fill(0.0);
            sizes.fill(0);
            // Many centroids are grouped again each round: each row is then placed among
            // a few groups' centroids, not all of them.
            centroids.group();
            for r in 0..m {
                let values = row(r);
                let c = centroids.place(values) as usize;
                sizes[c] += 1;
                let scale = sample.scales[r];
                for (sum, &v) in sums[c * dims..(c + 1) * dims].iter_mut().zip(values) {
                    *sum += f32::from(v) * scale;
                }
            }
            for (c, &size) in sizes.iter().enumerate() {
                let slot = c * dims..(c + 1) * dims;
                let centre = if size == 0 {
                    // An empty list starts again from a row of the sample, another each round.
                    let r = (c * m / k + (round + 1) * 7919) % m;
                    Quantised {
                        scale: sample.scales[r],
                        values: row(r).to_vec(),
                    }
                } else {
                    unit_length(&mut sums[slot.clone()]);
                    Quantised::of(&sums[slot.clone()])
                };
                centroids.scales[c] = centre.scale;
                centroids.values[slot].copy_from_slice(&centre.values);
            }
        }
        // Grouped as they end.
        centroids.group();
        centroids
    }
}
