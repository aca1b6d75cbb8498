//! The documents' vectors on disk: one append-only file beside the search index.
//!
//! Vectors are derived data (the model and the document's text make them again), so they live
//! outside sled, as the search index does: sled rewrites its pages and keeps up to twice
//! what it stores, and reading 100,000 vectors through it at start filled its page cache
//! with them (and with every document, to learn each one's type and group). The file is read
//! once, straight into [`crate::vectors::VectorIndex`], when the model is ready.
//!
//! ```text
//! header: "TDMVECS\n" [version: u32 LE] [dimensions: u32 LE] [model fingerprint: u64 LE]
//!         [base generation: u64 LE]          (version 2; version 1 has none: no base)
//! record: [body length: u32 LE] [checksum of body: u32 LE, xxh3's low half] [body]
//! body:   [1] [document id: 16 bytes] [type: u8 length, bytes] [group: u16 length, bytes]
//!         [DocVectors::encode]                                     the document's vectors
//!         [2] [document id: 16 bytes]                                   the document has none
//! ```
//!
//! The records are over the base the header names ([`crate::vector_base`]; none when 0):
//! the rows of a large table as of its last cut, which the file does not repeat. The last
//! record of an id wins, over the base's row too. Appends are not synced: a record is written after the
//! document is durable in sled, so a file that lost its tail (a crash of the machine) holds
//! fewer documents than sled counts, and the documents it lost are embedded again at the next
//! start. A torn or corrupt record ends the file: it is cut there.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use ulid::Ulid;

use crate::quantised::DocVectors;
use crate::{Kind, Kinds};

const MAGIC: &[u8; 8] = b"TDMVECS\n";
const VERSION: u32 = 2;
/// A header of version 1, and of this version.
const HEADER_V1: usize = 24;
const HEADER: usize = 32;
const PUT: u8 = 1;
const DROP: u8 = 2;
/// A record's length and checksum.
const FRAME: usize = 8;
/// At open, a file holding more than this many records for each live one is rewritten.
const REWRITE_RATIO: usize = 2;

/// The vectors of one document with what a search's filters need.
#[derive(Debug, Clone, PartialEq)]
pub struct Stored {
    pub id: Ulid,
    pub kind: Kind,
    pub group: Option<String>,
    pub vectors: DocVectors,
}

/// One record of the file.
#[derive(Debug, Clone, PartialEq)]
pub enum VectorRecord {
    Put(Stored),
    Drop(Ulid),
}

impl VectorRecord {
    fn id(&self) -> Ulid {
        match self {
            VectorRecord::Put(s) => s.id,
            VectorRecord::Drop(id) => *id,
        }
    }

    fn encode_into(&self, kinds: Kinds, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&[0; FRAME]);
        match self {
            VectorRecord::Put(s) => {
                out.push(PUT);
                out.extend_from_slice(&s.id.to_bytes());
                let kind = kinds.name(s.kind).as_bytes();
                out.push(kind.len() as u8);
                out.extend_from_slice(kind);
                let group = s.group.as_deref().unwrap_or("").as_bytes();
                let group = &group[..group.len().min(u16::MAX as usize)];
                out.extend_from_slice(&(group.len() as u16).to_le_bytes());
                out.extend_from_slice(group);
                out.extend_from_slice(&s.vectors.encode());
            }
            VectorRecord::Drop(id) => {
                out.push(DROP);
                out.extend_from_slice(&id.to_bytes());
            }
        }
        let body = &out[start + FRAME..];
        let (len, crc) = (body.len() as u32, checksum(body));
        out[start..start + 4].copy_from_slice(&len.to_le_bytes());
        out[start + 4..start + FRAME].copy_from_slice(&crc.to_le_bytes());
    }

    fn decode(body: &[u8], kinds: Kinds) -> Option<VectorRecord> {
        let (&tag, rest) = body.split_first()?;
        let (id, rest) = rest.split_first_chunk::<16>()?;
        let id = Ulid::from_bytes(*id);
        match tag {
            DROP if rest.is_empty() => Some(VectorRecord::Drop(id)),
            PUT => {
                let (&kind_len, rest) = rest.split_first()?;
                let (kind, rest) = rest.split_at_checked(kind_len as usize)?;
                let kind = kinds.parse(std::str::from_utf8(kind).ok()?)?;
                let (project_len, rest) = rest.split_first_chunk::<2>()?;
                let (group, rest) =
                    rest.split_at_checked(u16::from_le_bytes(*project_len) as usize)?;
                let group = std::str::from_utf8(group).ok()?;
                Some(VectorRecord::Put(Stored {
                    id,
                    kind,
                    group: (!group.is_empty()).then(|| group.to_string()),
                    vectors: DocVectors::decode(rest)?,
                }))
            }
            _ => None,
        }
    }
}

fn checksum(body: &[u8]) -> u32 {
    xxhash_rust::xxh3::xxh3_64(body) as u32
}

/// Who made the vectors: the model's dimensions and fingerprint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Maker {
    pub dims: usize,
    pub fingerprint: u64,
}

fn header(maker: Maker, generation: u64) -> [u8; HEADER] {
    let mut h = [0; HEADER];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&(maker.dims as u32).to_le_bytes());
    h[16..24].copy_from_slice(&maker.fingerprint.to_le_bytes());
    h[24..].copy_from_slice(&generation.to_le_bytes());
    h
}

/// The maker a header's first [`HEADER_V1`] bytes name, and its version: `None` when it
/// is not a header of a version this one reads.
fn maker_of(h: &[u8; HEADER_V1]) -> Option<(Maker, u32)> {
    let version = u32::from_le_bytes(h[8..12].try_into().expect("4 bytes"));
    (&h[..8] == MAGIC && (version == 1 || version == VERSION)).then(|| {
        let maker = Maker {
            dims: u32::from_le_bytes(h[12..16].try_into().expect("4 bytes")) as usize,
            fingerprint: u64::from_le_bytes(h[16..].try_into().expect("8 bytes")),
        };
        (maker, version)
    })
}

/// What a file's header says.
#[derive(Debug, Clone, Copy)]
struct Header {
    maker: Maker,
    /// The base its records are over (0: none; always 0 in version 1).
    generation: u64,
    /// Its length in bytes: where the records start.
    len: usize,
}

/// Reads the header at the start of `reader`: `None` when there is none this version
/// reads (a file shorter than its header included).
fn read_header(reader: &mut impl Read) -> io::Result<Option<Header>> {
    // Whether `buf` was filled: the end of the file is no error here.
    let fill = |reader: &mut dyn Read, buf: &mut [u8]| match reader.read_exact(buf) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(e),
    };
    let mut head = [0; HEADER_V1];
    if !fill(reader, &mut head)? {
        return Ok(None);
    }
    let Some((maker, version)) = maker_of(&head) else {
        return Ok(None);
    };
    if version == 1 {
        return Ok(Some(Header {
            maker,
            generation: 0,
            len: HEADER_V1,
        }));
    }
    let mut generation = [0; HEADER - HEADER_V1];
    if !fill(reader, &mut generation)? {
        return Ok(None);
    }
    Ok(Some(Header {
        maker,
        generation: u64::from_le_bytes(generation),
        len: HEADER,
    }))
}

/// What a read of the file found.
struct Scan {
    /// The maker its header names (`None`: no file, or no header this version reads).
    maker: Option<Maker>,
    /// The base its records are over (0: none).
    generation: u64,
    /// How many records it holds.
    records: usize,
    /// How many bytes the header and those records take: the file is good up to there.
    good: u64,
    /// The file's length.
    len: u64,
}

/// Reads the file at `path` record by record (streamed, nothing kept) into `each`, when its
/// header names `wanted` (any maker when `None`); stops at the first record torn or
/// damaged.
fn scan(
    path: &Path,
    wanted: Option<Maker>,
    kinds: Kinds,
    mut each: impl FnMut(VectorRecord),
) -> io::Result<Scan> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Ok(Scan {
                maker: None,
                generation: 0,
                records: 0,
                good: 0,
                len: 0,
            });
        }
        Err(e) => return Err(e),
    };
    let len = file.metadata()?.len();
    let mut reader = io::BufReader::with_capacity(1 << 16, file);
    let header = read_header(&mut reader)?;
    let maker = header.map(|h| h.maker);
    let mut found = Scan {
        maker,
        generation: header.map_or(0, |h| h.generation),
        records: 0,
        good: 0,
        len,
    };
    if maker.is_none() || wanted.is_some_and(|w| Some(w) != maker) {
        return Ok(found);
    }
    found.good = header.map_or(0, |h| h.len) as u64;
    let mut body = Vec::new();
    loop {
        let mut frame = [0; FRAME];
        match reader.read_exact(&mut frame) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(e),
        }
        let body_len = u32::from_le_bytes(frame[..4].try_into().expect("4 bytes")) as u64;
        let crc = u32::from_le_bytes(frame[4..].try_into().expect("4 bytes"));
        if found.good + (FRAME as u64) + body_len > len {
            break;
        }
        body.resize(body_len as usize, 0);
        reader.read_exact(&mut body)?;
        let Some(record) = (checksum(&body) == crc)
            .then(|| VectorRecord::decode(&body, kinds))
            .flatten()
        else {
            break;
        };
        each(record);
        found.records += 1;
        found.good += FRAME as u64 + body_len;
    }
    Ok(found)
}

/// Each id's last record, in the order first written: what the file holds. A removal is
/// kept when the file is over a base (it removes the base's row), else left out.
fn live(path: &Path, maker: Maker, kinds: Kinds) -> io::Result<Vec<VectorRecord>> {
    let mut at: HashMap<Ulid, usize> = HashMap::new();
    let mut out: Vec<VectorRecord> = Vec::new();
    let found = scan(path, Some(maker), kinds, |record| {
        match at.get(&record.id()) {
            Some(&i) => out[i] = record,
            None => {
                at.insert(record.id(), out.len());
                out.push(record);
            }
        }
    })?;
    if found.generation == 0 {
        out.retain(|r| matches!(r, VectorRecord::Put(_)));
    }
    Ok(out)
}

/// The file, open for appending.
#[derive(Debug)]
pub struct VectorFile {
    path: PathBuf,
    file: File,
    maker: Maker,
    kinds: Kinds,
    /// The base its records are over (0: none).
    generation: u64,
}

/// What [`VectorFile::open`] found.
pub struct Opened {
    pub file: VectorFile,
    /// How many records it holds (a record superseded by a later one of its id counts).
    pub records: usize,
    /// Why the file's earlier content was set aside, if it was: vectors of another model,
    /// or a damaged tail.
    pub discarded: Option<String>,
}

impl VectorFile {
    /// Opens (or makes) the file at `path` for vectors made by `maker`, giving `each` of
    /// its records in order (the last of an id wins; streamed, so loading holds nothing
    /// but what `each` keeps). A file of another model is started again; a damaged tail
    /// is cut.
    pub fn open(
        path: &Path,
        maker: Maker,
        kinds: Kinds,
        each: impl FnMut(VectorRecord),
    ) -> io::Result<Opened> {
        let found = scan(path, Some(maker), kinds, each)?;
        if found.maker != Some(maker) {
            let discarded = match found.maker {
                Some(_) => Some("the vectors were made by another model".to_string()),
                None if found.len == 0 => None,
                None => Some("the vector file has no header this version reads".to_string()),
            };
            return Ok(Opened {
                file: VectorFile::create(path, maker, kinds, 0, &[])?,
                records: 0,
                discarded,
            });
        }
        let discarded = (found.good < found.len).then(|| {
            format!(
                "the vector file was damaged after {} of its {} bytes",
                found.good, found.len
            )
        });
        let file = OpenOptions::new().write(true).open(path)?;
        if found.good < found.len {
            file.set_len(found.good)?;
            file.sync_all()?;
        }
        let mut file = VectorFile {
            path: path.to_path_buf(),
            file,
            maker,
            kinds,
            generation: found.generation,
        };
        file.seek_end()?;
        Ok(Opened {
            file,
            records: found.records,
            discarded,
        })
    }

    /// Rewrites the file with each document's last record only, when it holds more than
    /// [`REWRITE_RATIO`] records for each of the `live` documents it names.
    pub fn compact_if_superseded(&mut self, records: usize, live: usize) -> io::Result<()> {
        if records <= REWRITE_RATIO * live.max(1) {
            return Ok(());
        }
        let kept = self::live(&self.path, self.maker, self.kinds)?;
        *self = VectorFile::create(&self.path, self.maker, self.kinds, self.generation, &kept)?;
        Ok(())
    }

    /// The base the records of the file at `path` are over, when `maker` made them (0:
    /// none, or no such file).
    pub fn generation_at(path: &Path, maker: Maker) -> io::Result<u64> {
        let mut file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(e),
        };
        Ok(read_header(&mut file)?
            .filter(|h| h.maker == maker)
            .map_or(0, |h| h.generation))
    }

    /// The base the records are over (0: none).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn maker(&self) -> Maker {
        self.maker
    }

    /// Writes a file holding `records` over the base of `generation` in place of whatever
    /// is at `path` (atomically: the rename is what makes a new base the file's).
    pub fn create(
        path: &Path,
        maker: Maker,
        kinds: Kinds,
        generation: u64,
        records: &[VectorRecord],
    ) -> io::Result<VectorFile> {
        let mut bytes = header(maker, generation).to_vec();
        for r in records {
            r.encode_into(kinds, &mut bytes);
        }
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)?;
        }
        crate::files::write_atomically(path, &bytes)?;
        let mut file = VectorFile {
            path: path.to_path_buf(),
            file: OpenOptions::new().write(true).open(path)?,
            maker,
            kinds,
            generation,
        };
        file.seek_end()?;
        Ok(file)
    }

    fn seek_end(&mut self) -> io::Result<()> {
        use std::io::Seek;
        self.file.seek(io::SeekFrom::End(0)).map(|_| ())
    }

    /// Appends `records` in one write (not synced: see the module's comment).
    pub fn append(&mut self, records: &[VectorRecord]) -> io::Result<()> {
        let mut bytes = Vec::new();
        for r in records {
            r.encode_into(self.kinds, &mut bytes);
        }
        self.file.write_all(&bytes)
    }

    /// Makes what was appended durable.
    pub fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    /// Appends `records` durably to the file at `path`, whatever model made it, after its
    /// last whole record (a file without a header this version reads is left alone:
    /// nothing in it is read).
    pub fn append_at(path: &Path, kinds: Kinds, records: &[VectorRecord]) -> io::Result<()> {
        let found = scan(path, None, kinds, |_| {})?;
        let Some(maker) = found.maker else {
            return Ok(());
        };
        let mut file = VectorFile {
            path: path.to_path_buf(),
            file: OpenOptions::new().write(true).open(path)?,
            maker,
            kinds,
            generation: found.generation,
        };
        file.file.set_len(found.good)?;
        file.seek_end()?;
        file.append(records)?;
        file.sync()
    }

    /// Empties the file (its vectors are being made again); the caller removes its base,
    /// which the file no longer names.
    pub fn clear(&mut self) -> io::Result<()> {
        *self = VectorFile::create(&self.path, self.maker, self.kinds, 0, &[])?;
        Ok(())
    }

    /// Where the file at `path` leaves the vectors of `id`: read from the file (used while
    /// no model is ready, when nothing of it is in memory).
    pub fn stored_at(path: &Path, kinds: Kinds, id: &Ulid) -> io::Result<StoredAt> {
        // `None`: no record of `id`; `Some(None)`: removed.
        let mut last = None;
        let scanned = scan(path, None, kinds, |record| match record {
            VectorRecord::Put(s) if s.id == *id => last = Some(Some(s.vectors.context.is_some())),
            VectorRecord::Drop(d) if d == *id => last = Some(None),
            _ => {}
        })?;
        Ok(match (last, scanned.maker) {
            (Some(found), _) => StoredAt::Record(found),
            (None, Some(maker)) if scanned.generation != 0 => StoredAt::Base {
                maker,
                generation: scanned.generation,
            },
            (None, _) => StoredAt::Nowhere,
        })
    }
}

/// Where a vector file leaves a document's vectors ([`VectorFile::stored_at`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoredAt {
    /// The file's last record of the document: whether a context vector is among its
    /// vectors; `None` when the record removed them.
    Record(Option<bool>),
    /// No record of the document: the base the header names may hold it.
    Base { maker: Maker, generation: u64 },
    /// No record of the document, and no base.
    Nowhere,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantised::Quantised;
    use crate::test_docs::{KINDS, PITFALL};

    const MAKER: Maker = Maker {
        dims: 4,
        fingerprint: 7,
    };

    /// Opens the file as a memory does, with what it holds.
    fn open(path: &Path, maker: Maker) -> (Opened, Vec<Stored>) {
        let opened = VectorFile::open(path, maker, KINDS, |_| {}).unwrap();
        let stored = live(path, maker, KINDS)
            .unwrap()
            .into_iter()
            .filter_map(|r| match r {
                VectorRecord::Put(s) => Some(s),
                VectorRecord::Drop(_) => None,
            })
            .collect();
        (opened, stored)
    }

    fn stored(n: u8, group: Option<&str>, context: bool) -> Stored {
        let q = |x: f32| Quantised::of(&[x, 0.5, -0.25, 0.0]);
        Stored {
            id: Ulid::from_parts(1, n as u128),
            kind: PITFALL,
            group: group.map(str::to_string),
            vectors: DocVectors {
                summary: q(n as f32 / 10.0),
                context: context.then(|| q(-1.0)),
            },
        }
    }

    #[test]
    fn records_are_read_back_the_last_of_an_id_winning() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vectors");
        let mut file = open(&path, MAKER).0.file;
        let (a, b, b2) = (
            stored(1, Some("web"), true),
            stored(2, None, false),
            stored(2, Some("api"), false),
        );
        file.append(&[VectorRecord::Put(a.clone()), VectorRecord::Put(b)])
            .unwrap();
        file.append(&[VectorRecord::Put(b2.clone())]).unwrap();
        drop(file);
        let (opened, stored) = open(&path, MAKER);
        assert_eq!(stored, vec![a.clone(), b2]);
        assert_eq!(opened.records, 3);
        assert!(opened.discarded.is_none());
        assert_eq!(
            VectorFile::stored_at(&path, KINDS, &a.id).unwrap(),
            StoredAt::Record(Some(true))
        );

        let mut file = opened.file;
        file.append(&[VectorRecord::Drop(a.id)]).unwrap();
        drop(file);
        assert_eq!(open(&path, MAKER).1.len(), 1);
        assert_eq!(
            VectorFile::stored_at(&path, KINDS, &a.id).unwrap(),
            StoredAt::Record(None)
        );
    }

    #[test]
    fn a_torn_tail_is_cut_and_another_models_file_started_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vectors");
        let mut file = open(&path, MAKER).0.file;
        file.append(&[VectorRecord::Put(stored(1, None, false))])
            .unwrap();
        file.append(&[VectorRecord::Put(stored(2, None, false))])
            .unwrap();
        drop(file);
        let full = fs::metadata(&path).unwrap().len();
        OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(full - 3)
            .unwrap();

        let (opened, kept) = open(&path, MAKER);
        assert_eq!(kept, vec![stored(1, None, false)]);
        assert!(opened.discarded.unwrap().contains("damaged"));
        // Cut back to the last whole record, and appended after it.
        let mut file = opened.file;
        file.append(&[VectorRecord::Put(stored(3, None, false))])
            .unwrap();
        drop(file);
        let ids: Vec<Ulid> = open(&path, MAKER).1.iter().map(|s| s.id).collect();
        assert_eq!(
            ids,
            vec![stored(1, None, false).id, stored(3, None, false).id]
        );

        let other = Maker {
            fingerprint: 8,
            ..MAKER
        };
        let (opened, kept) = open(&path, other);
        assert!(kept.is_empty());
        assert!(opened.discarded.unwrap().contains("another model"));
        assert_eq!(opened.file.maker, other);
        assert_eq!(fs::metadata(&path).unwrap().len(), HEADER as u64);
    }

    #[test]
    fn a_file_mostly_superseded_is_rewritten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vectors");
        let mut file = open(&path, MAKER).0.file;
        for _ in 0..5 {
            file.append(&[VectorRecord::Put(stored(1, None, false))])
                .unwrap();
        }
        drop(file);
        let before = fs::metadata(&path).unwrap().len();
        let (mut opened, kept) = open(&path, MAKER);
        assert_eq!(kept, vec![stored(1, None, false)]);
        assert_eq!(opened.records, 5);
        // Twice as many records as documents is kept as it is; more is rewritten.
        opened.file.compact_if_superseded(5, 3).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().len(), before);
        opened.file.compact_if_superseded(5, 1).unwrap();
        opened
            .file
            .append(&[VectorRecord::Put(stored(2, None, false))])
            .unwrap();
        assert_eq!(
            open(&path, MAKER).1,
            vec![stored(1, None, false), stored(2, None, false)]
        );
        let after = fs::metadata(&path).unwrap().len();
        assert_eq!(after, HEADER as u64 + 2 * (before - HEADER as u64) / 5);
    }

    #[test]
    fn a_version_1_file_is_read_and_appended_to_as_one_without_a_base() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vectors");
        // What version 1 wrote: its 24-byte header, then the same records.
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&1u32.to_le_bytes());
        bytes.extend_from_slice(&(MAKER.dims as u32).to_le_bytes());
        bytes.extend_from_slice(&MAKER.fingerprint.to_le_bytes());
        VectorRecord::Put(stored(1, Some("web"), true)).encode_into(KINDS, &mut bytes);
        fs::write(&path, &bytes).unwrap();
        assert_eq!(VectorFile::generation_at(&path, MAKER).unwrap(), 0);

        let (opened, kept) = open(&path, MAKER);
        assert_eq!(kept, vec![stored(1, Some("web"), true)]);
        assert!(opened.discarded.is_none());
        assert_eq!(opened.file.generation(), 0);
        let mut file = opened.file;
        file.append(&[VectorRecord::Put(stored(2, None, false))])
            .unwrap();
        drop(file);
        assert_eq!(open(&path, MAKER).1.len(), 2);
        assert_eq!(
            VectorFile::stored_at(&path, KINDS, &stored(1, None, true).id).unwrap(),
            StoredAt::Record(Some(true))
        );
    }

    #[test]
    fn over_a_base_a_removal_outlives_a_rewrite() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vectors");
        let gone = Ulid::from_parts(9, 9);
        let mut file =
            VectorFile::create(&path, MAKER, KINDS, 4, &[VectorRecord::Drop(gone)]).unwrap();
        for _ in 0..4 {
            file.append(&[VectorRecord::Put(stored(1, None, false))])
                .unwrap();
        }
        assert_eq!(VectorFile::generation_at(&path, MAKER).unwrap(), 4);
        file.compact_if_superseded(5, 1).unwrap();
        assert_eq!(file.generation(), 4);
        assert_eq!(
            live(&path, MAKER, KINDS).unwrap(),
            vec![
                VectorRecord::Drop(gone),
                VectorRecord::Put(stored(1, None, false))
            ]
        );
        // Without a base, a removal has nothing to remove and is left out.
        let mut file =
            VectorFile::create(&path, MAKER, KINDS, 0, &[VectorRecord::Drop(gone)]).unwrap();
        file.append(&[VectorRecord::Put(stored(1, None, false))])
            .unwrap();
        assert_eq!(
            live(&path, MAKER, KINDS).unwrap(),
            vec![VectorRecord::Put(stored(1, None, false))]
        );
        // Another model's vectors name no base.
        let other = Maker {
            fingerprint: 1,
            ..MAKER
        };
        assert_eq!(VectorFile::generation_at(&path, other).unwrap(), 0);
    }
}
