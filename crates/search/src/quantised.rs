//! Quantised vectors: a unit vector kept as int8 values with one scale, and the dot product
//! they are compared by. The lowest of the vector modules: the vector file
//! ([`crate::vector_file`]), its base ([`crate::vector_base`]), the centroids
//! ([`crate::centroids`]) and the table ([`crate::vectors`]) all stand on it.
//!
//! Each document has a summary vector (title, tags and content) and, when it has a context, a
//! context vector ([`DocVectors`]). Both are unit length before quantisation; a vector is
//! kept as `i8` values with one scale (`max |x| / 127`), so a cosine is an integer dot
//! product times two scales. [`DocVectors::encode`] is one document's vectors:
//!
//! ```text
//! [version: u8 = 1] [dimensions: u16 LE] [flags: u8, bit 0 = has context]
//! [summary scale: f32 LE] [summary: i8 × dimensions]
//! ([context scale: f32 LE] [context: i8 × dimensions])
//! ```

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

/// What one document's vectors are.
#[derive(Debug, Clone, PartialEq)]
pub struct DocVectors {
    pub summary: Quantised,
    pub context: Option<Quantised>,
}

impl DocVectors {
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
    pub fn decode(bytes: &[u8]) -> Option<DocVectors> {
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
        Some(DocVectors { summary, context })
    }
}

/// The integer dot product of two int8 vectors of one length: through AVX2's
/// widen-multiply-add (`vpmovsxbw`, `vpmaddwd`) on a machine that has it, else
/// [`dot_portable`]. Inside [`simd`]'s dispatch, where the search's loops run, it inlines
/// to those instructions, where the portable code the compiler vectorised shuffled the
/// bytes into pairs first (`cargo bench --bench embeddings`).
#[inline(always)]
pub fn dot(a: &[i8], b: &[i8]) -> i32 {
    #[cfg(target_arch = "x86_64")]
    if let Some(simd) = *AVX2 {
        return dot_avx2(simd, a, b);
    }
    dot_portable(a, b)
}

/// AVX2 (pulp's x86-64-v3 level), found once.
#[cfg(target_arch = "x86_64")]
static AVX2: std::sync::LazyLock<Option<pulp::x86::V3>> =
    std::sync::LazyLock::new(pulp::x86::V3::try_new);

/// [`dot`] 16 values at a time: each widened to `i16`, multiplied, and adjacent products
/// summed into `i32` lanes (|-128 × -128| × 2 fits).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn dot_avx2(simd: pulp::x86::V3, a: &[i8], b: &[i8]) -> i32 {
    let (a16, a_rest) = a.as_chunks::<16>();
    let (b16, b_rest) = b.as_chunks::<16>();
    let mut sums = simd.splat_i32x8(0);
    for (x, y) in a16.iter().zip(b16) {
        let x = simd.convert_i8x16_to_i16x16(pulp::cast(*x));
        let y = simd.convert_i8x16_to_i16x16(pulp::cast(*y));
        sums = simd.wrapping_add_i32x8(sums, simd.multiply_wrapping_add_adjacent_i16x16(x, y));
    }
    let lanes: [i32; 8] = pulp::cast(sums);
    lanes.iter().sum::<i32>() + dot_portable(a_rest, b_rest)
}

/// [`dot`] without AVX2. Written for the compiler's vectoriser: 32 values at a time into
/// 16 pairwise sums, each pair's products fitting an `i16` (|-128 × -128| = 16384).
#[inline(always)]
pub fn dot_portable(a: &[i8], b: &[i8]) -> i32 {
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

/// The machine's vector instructions, found once: code run through its `dispatch` is
/// compiled for them (AVX2 and POPCNT on most x86-64 machines, which the baseline target
/// the compiler otherwise assumes lacks) and picked at run time. `benches/embeddings.rs`
/// measures the searches this way and the portable way.
pub(super) fn simd() -> pulp::Arch {
    static ARCH: std::sync::LazyLock<pulp::Arch> = std::sync::LazyLock::new(pulp::Arch::new);
    *ARCH
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_does_not_overflow() {
        assert_eq!(dot(&[-128; 256], &[-128; 256]), 256 * 128 * 128);
        assert_eq!(dot(&[127; 256], &[-128; 256]), -256 * 127 * 128);
    }

    #[test]
    fn dot_is_the_same_on_every_path() {
        // Every length around the chunks (16 and 32 values), values over the whole range.
        let mut x: u32 = 12345;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as i8
        };
        for len in [0, 1, 15, 16, 17, 31, 32, 33, 100, 256, 257, 384] {
            let a: Vec<i8> = (0..len).map(|_| next()).collect();
            let b: Vec<i8> = (0..len).map(|_| next()).collect();
            let exact: i32 = a.iter().zip(&b).map(|(&x, &y)| x as i32 * y as i32).sum();
            assert_eq!(dot(&a, &b), exact, "{len}");
            assert_eq!(dot_portable(&a, &b), exact, "{len}");
        }
        assert_eq!(dot_portable(&[-128; 256], &[-128; 256]), 256 * 128 * 128);
    }
}
