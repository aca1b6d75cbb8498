//! The vectors' base: every vector of a large table as of its last cut into lists, in one
//! file read through a mapping (tantivy's, so no `unsafe` here), rows ordered by list.
//!
//! A search touches the pages of the lists it probes only (and the kernel maps the few
//! around them it read ahead), so the table costs the daemon resident memory for what
//! searches read (pages the kernel may take back), not for every row, which as heap grew
//! with the base. The rows added or changed since the
//! cut live in memory ([`crate::vectors::VectorIndex`]) and in the vector file
//! ([`crate::vector_file`]), whose header names the base's generation: a cut writes the
//! base of the next generation, then the vector file of that generation holding only what
//! came meanwhile, and the file's rename is the switch. A base whose generation no vector
//! file names is left over from a cut cut short: removed at open.
//!
//! ```text
//! header (80 bytes): "TDMVBASE" [version: u32] [dimensions: u32] [generation: u64]
//!                    [model fingerprint: u64] [rows: u64] [lists: u64] [contexts: u64]
//!                    [groups' bytes: u64] [rows the centroids were made of: u64]
//!                    [checksum: u64, xxh3 of the header before it, the centroids, the
//!                     list starts, every 64th sorted id and the groups]
//! then each section from an offset a multiple of 8 (all little-endian):
//!   centroid scales f32 × lists · centroid values i8 × lists × dims
//!   list starts u32 × (lists + 1)            list l holds rows starts[l]..starts[l + 1]
//!   row values i8 × rows × dims · row scales f32 × rows · row kinds u8 × rows (their
//!   numbers, `Kind`) · row groups u32 × rows (0: none, n: the nth group)
//!   row ids 16 bytes × rows · the rows in the order of their ids u32 × rows
//!   every 64th id in that order 16 bytes × ⌈rows / 64⌉   (read into memory: an id is
//!                                                 found in one block of 64 rows, by a
//!                                                 binary search through their ids)
//!   context rows u32 × contexts (ascending) · context scales f32 × contexts
//!   context values i8 × contexts × dims · groups: [u16 length, bytes] each
//! ```
//!
//! Version 1 also held the ids in their order (16 bytes × rows, before the rows in that
//! order), which an id's lookup read instead of the rows' ids: 16 bytes a document, 5 % of
//! the vectors' share of the data dir. It is still read.
//!
//! Only the small sections are checksummed (reading every row at open would make them
//! all resident): the file is written beside its final name, synced, then renamed, so a
//! crash leaves no torn base under a name that is read.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, BufWriter, Seek, Write};
use std::path::{Path, PathBuf};

use tantivy::directory::{Directory, MmapDirectory, OwnedBytes};
use ulid::Ulid;
use xxhash_rust::xxh3::Xxh3;

use crate::Kind;
use crate::centroids::Centroids;
use crate::group_key;
use crate::quantised::Quantised;
use crate::vector_file::Maker;

const MAGIC: &[u8; 8] = b"TDMVBASE";
const VERSION: u32 = 2;
const HEADER: usize = 80;
/// Where the checksum sits in the header.
const CHECKSUM_AT: usize = 72;
/// Every this many sorted ids, one is kept in memory to find a block of them by.
const FENCE: usize = 64;

/// The path of the base of `generation` beside the vector file at `log`.
pub fn path_of(log: &Path, generation: u64) -> PathBuf {
    let mut name = log.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{generation}.base"));
    log.with_file_name(name)
}

/// Removes the bases beside the vector file at `log` but the one of `keep` (none when 0),
/// and any left half-written.
pub fn remove_others(log: &Path, keep: u64) {
    let (Some(dir), Some(stem)) = (log.parent(), log.file_name().and_then(|n| n.to_str())) else {
        return;
    };
    let Ok(read) = fs::read_dir(dir) else {
        return;
    };
    let prefix = format!("{stem}.");
    let kept = path_of(log, keep);
    for document in read.flatten() {
        let path = document.path();
        let name = document.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        let is_base = name.starts_with(&prefix)
            && (name.ends_with(".base")
                || name.ends_with(".base.tmp")
                || name.ends_with(".ctx.tmp"));
        if is_base
            && (keep == 0 || path != kept)
            && let Err(e) = fs::remove_file(&path)
        {
            tracing::warn!("cannot remove {}: {e}", path.display());
        }
    }
}

/// The byte ranges of a base's sections.
#[derive(Debug, Clone, Copy)]
struct Layout {
    centroid_scales: usize,
    centroid_values: usize,
    list_starts: usize,
    values: usize,
    scales: usize,
    types: usize,
    groups: usize,
    ids: usize,
    /// Version 1's ids in their order.
    sorted_ids: Option<usize>,
    by_id: usize,
    fences: usize,
    context_rows: usize,
    context_scales: usize,
    context_values: usize,
    project_names: usize,
    end: usize,
}

fn align(at: usize) -> usize {
    at.next_multiple_of(8)
}

impl Layout {
    fn of(
        version: u32,
        dims: usize,
        rows: usize,
        lists: usize,
        contexts: usize,
        names: usize,
    ) -> Layout {
        let mut at = HEADER;
        let mut next = |len: usize| {
            let start = align(at);
            at = start + len;
            start
        };
        let l = Layout {
            centroid_scales: next(4 * lists),
            centroid_values: next(lists * dims),
            list_starts: next(4 * (lists + 1)),
            values: next(rows * dims),
            scales: next(4 * rows),
            types: next(rows),
            groups: next(4 * rows),
            ids: next(16 * rows),
            sorted_ids: (version == 1).then(|| next(16 * rows)),
            by_id: next(4 * rows),
            fences: next(16 * rows.div_ceil(FENCE)),
            context_rows: next(4 * contexts),
            context_scales: next(4 * contexts),
            context_values: next(contexts * dims),
            project_names: next(names),
            end: 0,
        };
        Layout { end: at, ..l }
    }
}

/// A base, mapped.
pub struct Base {
    bytes: OwnedBytes,
    path: PathBuf,
    maker: Maker,
    layout: Layout,
    dims: usize,
    rows: usize,
    contexts: usize,
    generation: u64,
    centroids: Centroids,
    /// Each list's first row, and the end of the last.
    starts: Vec<u32>,
    /// Every [`FENCE`]th id in id order.
    fences: Vec<Ulid>,
    /// Group keys by number (0: none).
    groups: Vec<String>,
    group_numbers: HashMap<String, u32>,
}

impl std::fmt::Debug for Base {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Base")
            .field("rows", &self.rows)
            .field("lists", &(self.starts.len() - 1))
            .field("generation", &self.generation)
            .finish_non_exhaustive()
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn f32_at(b: &[u8], at: usize) -> f32 {
    f32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// The checksum of a base: of its header before the checksum, its centroids' scales and
/// values, its list starts, its fences and its groups, in that order.
fn checksum(parts: [&[u8]; 6]) -> u64 {
    let mut hash = Xxh3::new();
    for part in parts {
        hash.update(part);
    }
    hash.digest()
}

fn invalid(path: &Path, why: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{}: {why}", path.display()),
    )
}

impl Base {
    /// Maps the base at `path`, made by `maker` for `generation`. An error says why it
    /// cannot be used (missing, another model's, damaged).
    pub fn open(path: &Path, maker: Maker, generation: u64) -> io::Result<Base> {
        let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(invalid(path, "not a file path"));
        };
        // The kernel's usual read-ahead, not `Random`'s page at a time: a search reads each
        // list it probes whole, a contiguous run of rows. From a cold page cache, `Random`
        // faults each page in from the disk apart, where this reads the list ahead.
        let directory = MmapDirectory::open_with_madvice(dir, tantivy::directory::Advice::Normal)
            .map_err(|e| io::Error::other(e.to_string()))?;
        let bytes = directory
            .open_read(Path::new(name))
            .map_err(|e| match e {
                tantivy::directory::error::OpenReadError::FileDoesNotExist(_) => io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("{} is missing", path.display()),
                ),
                e => io::Error::other(e.to_string()),
            })?
            .read_bytes()?;
        let b = bytes.as_slice();
        if b.len() < HEADER || &b[..8] != MAGIC || ![1, VERSION].contains(&u32_at(b, 8)) {
            return Err(invalid(path, "not a vector base of this version"));
        }
        let version = u32_at(b, 8);
        let dims = u32_at(b, 12) as usize;
        if dims != maker.dims || u64_at(b, 24) != maker.fingerprint {
            return Err(invalid(path, "made by another model"));
        }
        if u64_at(b, 16) != generation {
            return Err(invalid(path, "of another generation"));
        }
        let count = |at: usize| usize::try_from(u64_at(b, at)).unwrap_or(usize::MAX);
        let (rows, lists, contexts, names) = (count(32), count(40), count(48), count(56));
        let made_at = count(64);
        if [rows, lists, contexts, names].iter().any(|&n| n > b.len()) || lists == 0 {
            return Err(invalid(path, "its counts do not fit its length"));
        }
        let layout = Layout::of(version, dims, rows, lists, contexts, names);
        if layout.end != b.len() {
            return Err(invalid(path, "its length is not its sections'"));
        }
        let fences = &b[layout.fences..layout.fences + 16 * rows.div_ceil(FENCE)];
        let sum = checksum([
            &b[..CHECKSUM_AT],
            &b[layout.centroid_scales..layout.centroid_scales + 4 * lists],
            &b[layout.centroid_values..layout.centroid_values + lists * dims],
            &b[layout.list_starts..layout.list_starts + 4 * (lists + 1)],
            fences,
            &b[layout.project_names..layout.end],
        ]);
        if sum != u64_at(b, CHECKSUM_AT) {
            return Err(invalid(path, "its checksum does not match"));
        }
        let starts: Vec<u32> = (0..=lists)
            .map(|l| u32_at(b, layout.list_starts + 4 * l))
            .collect();
        if starts[0] != 0
            || starts[lists] as usize != rows
            || starts.windows(2).any(|w| w[0] > w[1])
        {
            return Err(invalid(path, "its lists do not cover its rows"));
        }
        let centroids = Centroids::from_parts(
            dims,
            (0..lists)
                .map(|l| f32_at(b, layout.centroid_scales + 4 * l))
                .collect(),
            bytemuck::cast_slice(&b[layout.centroid_values..layout.centroid_values + lists * dims])
                .to_vec(),
            made_at,
        );
        let mut groups = vec![String::new()];
        let mut at = layout.project_names;
        while at < layout.end {
            let len = u16::from_le_bytes([b[at], *b.get(at + 1).unwrap_or(&0)]) as usize;
            let name = b
                .get(at + 2..at + 2 + len)
                .and_then(|n| std::str::from_utf8(n).ok())
                .ok_or_else(|| invalid(path, "a group name is damaged"))?;
            groups.push(name.to_string());
            at += 2 + len;
        }
        let group_numbers = groups
            .iter()
            .enumerate()
            .skip(1)
            .map(|(n, p)| (p.clone(), n as u32))
            .collect();
        let fences = fences
            .chunks_exact(16)
            .map(|id| Ulid::from_bytes(id.try_into().expect("16 bytes")))
            .collect();
        Ok(Base {
            bytes,
            path: path.to_path_buf(),
            maker,
            layout,
            dims,
            rows,
            contexts,
            generation,
            centroids,
            starts,
            fences,
            groups,
            group_numbers,
        })
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The same base mapped afresh: once this one is dropped, the pages searches read
    /// leave the process's resident memory (they stay in the kernel's page cache, so the
    /// next search reads them again without the disk).
    pub fn reopen(&self) -> io::Result<Base> {
        Base::open(&self.path, self.maker, self.generation)
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub fn centroids(&self) -> &Centroids {
        &self.centroids
    }

    /// The rows of list `l`.
    pub fn list(&self, l: usize) -> std::ops::Range<usize> {
        self.starts[l] as usize..self.starts[l + 1] as usize
    }

    /// The list of row `r`.
    pub fn list_of(&self, r: usize) -> u32 {
        (self.starts.partition_point(|&s| s as usize <= r) - 1) as u32
    }

    /// The values of rows `rows`, row after row.
    #[inline(always)]
    pub fn values(&self, rows: std::ops::Range<usize>) -> &[i8] {
        let at = self.layout.values;
        bytemuck::cast_slice(
            &self.bytes.as_slice()[at + rows.start * self.dims..at + rows.end * self.dims],
        )
    }

    #[inline(always)]
    pub fn scale(&self, r: usize) -> f32 {
        f32_at(self.bytes.as_slice(), self.layout.scales + 4 * r)
    }

    pub fn kind(&self, r: usize) -> Kind {
        Kind(self.bytes.as_slice()[self.layout.types + r])
    }

    /// Row `r`'s group number (0: none; see [`Self::group_number`]).
    pub fn group(&self, r: usize) -> u32 {
        u32_at(self.bytes.as_slice(), self.layout.groups + 4 * r)
    }

    /// Row `r`'s group, as its key.
    pub fn group_name(&self, r: usize) -> Option<&str> {
        let n = self.group(r) as usize;
        (n != 0)
            .then(|| self.groups.get(n).map(String::as_str))
            .flatten()
    }

    /// The number rows of `group` carry, `None` when no row has it.
    pub fn group_number(&self, group: &str) -> Option<u32> {
        self.group_numbers.get(&group_key(group)).copied()
    }

    pub fn id(&self, r: usize) -> Ulid {
        let at = self.layout.ids + 16 * r;
        Ulid::from_bytes(
            self.bytes.as_slice()[at..at + 16]
                .try_into()
                .expect("16 bytes"),
        )
    }

    /// The row of `id`: its block of 64 rows in id order found among the fences in
    /// memory, then `id` among their ids by a binary search (a version 1 base: in its copy
    /// of the ids in that order).
    pub fn find(&self, id: &Ulid) -> Option<usize> {
        let block = self.fences.partition_point(|f| f <= id).checked_sub(1)?;
        let b = self.bytes.as_slice();
        let (mut from, mut to) = (block * FENCE, ((block + 1) * FENCE).min(self.rows));
        let wanted = id.to_bytes();
        let row_at = |n: usize| {
            let r = u32_at(b, self.layout.by_id + 4 * n) as usize;
            (r < self.rows).then_some(r)
        };
        if let Some(sorted) = self.layout.sorted_ids {
            let ids = &b[sorted + 16 * from..sorted + 16 * to];
            return row_at(from + ids.chunks_exact(16).position(|s| s == wanted)?);
        }
        // Ids compare as their big-endian bytes do.
        while from < to {
            let mid = from + (to - from) / 2;
            let r = row_at(mid)?;
            let at = self.layout.ids + 16 * r;
            match b[at..at + 16].cmp(&wanted[..]) {
                std::cmp::Ordering::Less => from = mid + 1,
                std::cmp::Ordering::Greater => to = mid,
                std::cmp::Ordering::Equal => return Some(r),
            }
        }
        None
    }

    /// Row `r`'s summary vector.
    pub fn summary(&self, r: usize) -> Quantised {
        Quantised {
            scale: self.scale(r),
            values: self.values(r..r + 1).to_vec(),
        }
    }

    /// Row `r`'s context vector, when it has one.
    pub fn context(&self, r: usize) -> Option<Quantised> {
        let b = self.bytes.as_slice();
        let row = |n: usize| u32_at(b, self.layout.context_rows + 4 * n) as usize;
        let (mut lo, mut hi) = (0, self.contexts);
        while lo < hi {
            let mid = (lo + hi) / 2;
            match row(mid).cmp(&r) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => {
                    let at = self.layout.context_values + mid * self.dims;
                    return Some(Quantised {
                        scale: f32_at(b, self.layout.context_scales + 4 * mid),
                        values: bytemuck::cast_slice(&b[at..at + self.dims]).to_vec(),
                    });
                }
            }
        }
        None
    }
}

/// A base being written: rows are given list after list ([`Self::push`]), then
/// [`Self::finish`] completes it under its name.
pub struct BaseWriter {
    path: PathBuf,
    scratch: Scratch,
    file: BufWriter<File>,
    spill: BufWriter<File>,
    dims: usize,
    generation: u64,
    fingerprint: u64,
    centroids: Centroids,
    starts: Vec<u32>,
    rows: usize,
    scales: Vec<f32>,
    types: Vec<u8>,
    groups: Vec<u32>,
    ids: Vec<Ulid>,
    group_numbers: HashMap<String, u32>,
    project_names: Vec<String>,
    context_rows: Vec<u32>,
    context_scales: Vec<f32>,
    /// [`VERSION`]; 1 in a test that reads a base of that version.
    version: u32,
}

impl BaseWriter {
    /// Starts the base of `generation` beside the vector file at `log`, of `centroids`'
    /// lists holding `sizes` rows each.
    pub fn create(
        log: &Path,
        maker: Maker,
        generation: u64,
        centroids: Centroids,
        sizes: &[u32],
    ) -> io::Result<BaseWriter> {
        let path = path_of(log, generation);
        let tmp = path.with_extension("base.tmp");
        let spill_path = path.with_extension("ctx.tmp");
        let mut starts = Vec::with_capacity(sizes.len() + 1);
        let mut at = 0u32;
        starts.push(0);
        for &s in sizes {
            at += s;
            starts.push(at);
        }
        let rows = at as usize;
        let mut file = BufWriter::with_capacity(1 << 20, File::create(&tmp)?);
        let layout = Layout::of(VERSION, maker.dims, rows, sizes.len(), 0, 0);
        // Header and the centroids' sections now; the header again at the end.
        let mut head = vec![0u8; layout.values];
        let (scales, values) = centroids.parts();
        for (l, s) in scales.iter().enumerate() {
            head[layout.centroid_scales + 4 * l..][..4].copy_from_slice(&s.to_le_bytes());
        }
        head[layout.centroid_values..][..values.len()]
            .copy_from_slice(bytemuck::cast_slice(values));
        for (l, s) in starts.iter().enumerate() {
            head[layout.list_starts + 4 * l..][..4].copy_from_slice(&s.to_le_bytes());
        }
        file.write_all(&head)?;
        let spill = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&spill_path)?;
        Ok(BaseWriter {
            path,
            scratch: Scratch {
                tmp,
                spill: spill_path,
            },
            file,
            spill: BufWriter::new(spill),
            dims: maker.dims,
            generation,
            fingerprint: maker.fingerprint,
            centroids,
            starts,
            rows: 0,
            scales: Vec::with_capacity(rows),
            types: Vec::with_capacity(rows),
            groups: Vec::with_capacity(rows),
            ids: Vec::with_capacity(rows),
            group_numbers: HashMap::new(),
            project_names: Vec::new(),
            context_rows: Vec::new(),
            context_scales: Vec::new(),
            version: VERSION,
        })
    }

    /// The next row, in list order: `None` for a row that was taken out meanwhile (kept
    /// as zeros; the table marks it dead).
    pub fn push(
        &mut self,
        id: Ulid,
        row: Option<(Kind, Option<&str>, &Quantised, Option<&Quantised>)>,
    ) -> io::Result<()> {
        let Some((kind, group, summary, context)) = row else {
            self.file.write_all(&vec![0; self.dims])?;
            self.scales.push(0.0);
            self.types.push(0);
            self.groups.push(0);
            self.ids.push(id);
            self.rows += 1;
            return Ok(());
        };
        debug_assert_eq!(summary.values.len(), self.dims);
        self.file.write_all(bytemuck::cast_slice(&summary.values))?;
        self.scales.push(summary.scale);
        self.types.push(kind.0);
        let group = match group.map(group_key) {
            None => 0,
            Some(key) => match self.group_numbers.get(&key) {
                Some(&n) => n,
                None => {
                    self.project_names.push(key.clone());
                    let n = self.project_names.len() as u32;
                    self.group_numbers.insert(key, n);
                    n
                }
            },
        };
        self.groups.push(group);
        self.ids.push(id);
        if let Some(context) = context {
            self.context_rows.push(self.rows as u32);
            self.context_scales.push(context.scale);
            self.spill
                .write_all(bytemuck::cast_slice(&context.values))?;
        }
        self.rows += 1;
        Ok(())
    }

    /// Writes the rest, syncs and names the base. Fails when fewer or more rows were given
    /// than its lists hold.
    pub fn finish(self) -> io::Result<PathBuf> {
        let rows = self.rows;
        let listed = *self.starts.last().unwrap_or(&0) as usize;
        if rows != listed {
            return Err(io::Error::other(format!(
                "a vector base was given {rows} rows for lists of {listed}"
            )));
        }
        let mut names = Vec::new();
        for name in &self.project_names {
            let name = &name.as_bytes()[..name.len().min(u16::MAX as usize)];
            names.extend_from_slice(&(name.len() as u16).to_le_bytes());
            names.extend_from_slice(name);
        }
        let (dims, lists, contexts) = (self.dims, self.starts.len() - 1, self.context_rows.len());
        let layout = Layout::of(self.version, dims, rows, lists, contexts, names.len());
        let mut out = Sections {
            file: self.file,
            written: layout.values + rows * dims,
        };
        out.put(
            layout.scales,
            &le32(self.scales.iter().map(|s| s.to_le_bytes())),
        )?;
        out.put(layout.types, &self.types)?;
        out.put(
            layout.groups,
            &le32(self.groups.iter().map(|p| p.to_le_bytes())),
        )?;
        let ids: Vec<u8> = self.ids.iter().flat_map(|id| id.to_bytes()).collect();
        out.put(layout.ids, &ids)?;
        let mut by_id: Vec<u32> = (0..rows as u32).collect();
        by_id.sort_unstable_by_key(|&r| self.ids[r as usize]);
        if let Some(at) = layout.sorted_ids {
            let sorted: Vec<u8> = by_id
                .iter()
                .flat_map(|&r| self.ids[r as usize].to_bytes())
                .collect();
            out.put(at, &sorted)?;
        }
        out.put(layout.by_id, &le32(by_id.iter().map(|r| r.to_le_bytes())))?;
        let fences: Vec<u8> = by_id
            .chunks(FENCE)
            .flat_map(|block| self.ids[block[0] as usize].to_bytes())
            .collect();
        out.put(layout.fences, &fences)?;
        out.put(
            layout.context_rows,
            &le32(self.context_rows.iter().map(|r| r.to_le_bytes())),
        )?;
        out.put(
            layout.context_scales,
            &le32(self.context_scales.iter().map(|s| s.to_le_bytes())),
        )?;
        let mut spill = self.spill.into_inner().map_err(|e| e.into_error())?;
        spill.seek(io::SeekFrom::Start(0))?;
        out.put(layout.context_values, &[])?;
        out.written += io::copy(&mut spill, &mut out.file)? as usize;
        out.put(layout.project_names, &names)?;
        if out.written != layout.end {
            return Err(io::Error::other("a vector base's sections do not add up"));
        }
        // The header, its checksum covering the small sections.
        let mut head = [0u8; HEADER];
        head[..8].copy_from_slice(MAGIC);
        head[8..12].copy_from_slice(&self.version.to_le_bytes());
        head[12..16].copy_from_slice(&(dims as u32).to_le_bytes());
        head[16..24].copy_from_slice(&self.generation.to_le_bytes());
        head[24..32].copy_from_slice(&self.fingerprint.to_le_bytes());
        for (at, n) in [(32, rows), (40, lists), (48, contexts), (56, names.len())] {
            head[at..at + 8].copy_from_slice(&(n as u64).to_le_bytes());
        }
        head[64..72].copy_from_slice(&(self.centroids.made_at() as u64).to_le_bytes());
        let (scales, values) = self.centroids.parts();
        let sum = checksum([
            &head[..CHECKSUM_AT],
            &le32(scales.iter().map(|s| s.to_le_bytes())),
            bytemuck::cast_slice(values),
            &le32(self.starts.iter().map(|s| s.to_le_bytes())),
            &fences,
            &names,
        ]);
        head[CHECKSUM_AT..].copy_from_slice(&sum.to_le_bytes());
        let mut file = out.file.into_inner().map_err(|e| e.into_error())?;
        file.seek(io::SeekFrom::Start(0))?;
        file.write_all(&head)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&self.scratch.tmp, &self.path)?;
        if let Some(dir) = self.path.parent() {
            File::open(dir)?.sync_all()?;
        }
        Ok(self.path)
    }
}

/// The little-endian bytes of a section of numbers.
fn le32(values: impl Iterator<Item = [u8; 4]>) -> Vec<u8> {
    values.flatten().collect()
}

/// The sections after the rows' values, written in order.
struct Sections {
    file: BufWriter<File>,
    written: usize,
}

impl Sections {
    /// `bytes` at offset `at`, zeros before it.
    fn put(&mut self, at: usize, bytes: &[u8]) -> io::Result<()> {
        self.file.write_all(&vec![0; at - self.written])?;
        self.file.write_all(bytes)?;
        self.written = at + bytes.len();
        Ok(())
    }
}

/// A writer's scratch files, removed however it ends (a finished base was renamed away).
struct Scratch {
    tmp: PathBuf,
    spill: PathBuf,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.tmp);
        let _ = fs::remove_file(&self.spill);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_docs::{BUG, CONFIG};

    const MAKER: Maker = Maker {
        dims: 4,
        fingerprint: 9,
    };

    fn q(values: [i8; 4]) -> Quantised {
        Quantised {
            scale: 0.01,
            values: values.to_vec(),
        }
    }

    #[test]
    fn a_base_reads_back_what_was_written() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("memory-vectors");
        let centroids =
            Centroids::from_parts(4, vec![0.01, 0.02], vec![1, 2, 3, 4, -1, -2, -3, -4], 3);
        let ids: Vec<Ulid> = (0..3).map(|n| Ulid::from_parts(5, 100 - n)).collect();
        let mut w = BaseWriter::create(&log, MAKER, 3, centroids, &[2, 1]).unwrap();
        w.push(ids[0], Some((BUG, Some("Web"), &q([1, 0, 0, 0]), None)))
            .unwrap();
        w.push(
            ids[1],
            Some((CONFIG, None, &q([0, 1, 0, 0]), Some(&q([5, 5, 5, 5])))),
        )
        .unwrap();
        w.push(ids[2], None).unwrap();
        let path = w.finish().unwrap();
        assert_eq!(path, path_of(&log, 3));
        assert!(!path.with_extension("base.tmp").exists());

        let base = Base::open(&path, MAKER, 3).unwrap();
        assert_eq!((base.rows(), base.list(0), base.list(1)), (3, 0..2, 2..3));
        assert_eq!((base.list_of(1), base.list_of(2)), (0, 1));
        assert_eq!(base.centroids().len(), 2);
        assert_eq!(base.values(1..2), &[0, 1, 0, 0]);
        assert_eq!(base.kind(1), CONFIG);
        assert_eq!(base.group_name(0), Some("web"));
        assert_eq!(base.group_number("web"), Some(1));
        assert_eq!(base.group_name(1), None);
        for (r, id) in ids.iter().enumerate() {
            assert_eq!(base.find(id), Some(r));
            assert_eq!(base.id(r), *id);
        }
        assert_eq!(base.find(&Ulid::from_parts(1, 1)), None);
        assert_eq!(base.context(1), Some(q([5, 5, 5, 5])));
        assert_eq!(base.context(0), None);
        assert_eq!(base.summary(0), q([1, 0, 0, 0]));

        // Another model, another generation, a damaged small section: refused.
        let other = Maker {
            fingerprint: 1,
            ..MAKER
        };
        assert!(Base::open(&path, other, 3).is_err());
        assert!(Base::open(&path, MAKER, 4).is_err());
        let mut bytes = fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        fs::write(&path, &bytes).unwrap();
        let e = Base::open(&path, MAKER, 3).unwrap_err();
        assert!(e.to_string().contains("checksum"), "{e}");

        // Every base but the kept one goes.
        fs::write(path_of(&log, 2), b"old").unwrap();
        remove_others(&log, 3);
        assert!(!path_of(&log, 2).exists() && path_of(&log, 3).exists());
        remove_others(&log, 0);
        assert!(!path_of(&log, 3).exists());
    }

    /// An id is found among many rows (several blocks of 64), in a base of this version
    /// and of version 1 (which held a copy of the ids in their order); an id not there
    /// is not.
    #[test]
    fn every_id_is_found_in_a_base_of_either_version() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("memory-vectors");
        // Ids out of order, as an import's are, none in row order.
        let ids: Vec<Ulid> = (0..300u128)
            .map(|n| Ulid::from_parts(7, (n * 0x9E37_79B9_7F4A_7C15) % (1 << 80)))
            .collect();
        for version in [1, VERSION] {
            let centroids = Centroids::from_parts(4, vec![0.01], vec![1, 2, 3, 4], 300);
            let mut w = BaseWriter::create(&log, MAKER, 5, centroids, &[300]).unwrap();
            w.version = version;
            for id in &ids {
                w.push(*id, Some((BUG, None, &q([1, 2, 3, 4]), None)))
                    .unwrap();
            }
            let path = w.finish().unwrap();
            let base = Base::open(&path, MAKER, 5).unwrap();
            assert_eq!(base.layout.sorted_ids.is_some(), version == 1);
            for (r, id) in ids.iter().enumerate() {
                assert_eq!(base.find(id), Some(r), "version {version}");
            }
            for missing in [Ulid::nil(), Ulid::from_parts(7, 1), Ulid::from_parts(8, 0)] {
                assert_eq!(base.find(&missing), None, "version {version}");
            }
        }
    }

    #[test]
    fn a_writer_given_the_wrong_number_of_rows_names_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("memory-vectors");
        let centroids = Centroids::from_parts(4, vec![0.01], vec![1, 2, 3, 4], 1);
        let mut w = BaseWriter::create(&log, MAKER, 1, centroids, &[2]).unwrap();
        w.push(
            Ulid::from_parts(1, 1),
            Some((BUG, None, &q([1, 1, 1, 1]), None)),
        )
        .unwrap();
        assert!(w.finish().is_err());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
