//! The entries' vectors on disk: one append-only file beside the search index.
//!
//! Vectors are derived data (the model and the entry's text make them again), so they live
//! outside sled, as the search index does: sled rewrites its pages and keeps up to twice
//! what it stores, and reading 100,000 vectors through it at start filled its page cache
//! with them (and with every entry, to learn each one's type and project). The file is read
//! once, straight into [`super::vectors::VectorIndex`], when the model is ready.
//!
//! ```text
//! header: "TDMVECS\n" [version: u32 LE] [dimensions: u32 LE] [model fingerprint: u64 LE]
//! record: [body length: u32 LE] [checksum of body: u32 LE, xxh3's low half] [body]
//! body:   [1] [entry id: 16 bytes] [type: u8 length, bytes] [project: u16 length, bytes]
//!         [EntryVectors::encode]                                     the entry's vectors
//!         [2] [entry id: 16 bytes]                                   the entry has none
//! ```
//!
//! The last record of an id wins. Appends are not synced: a record is written after the
//! entry is durable in sled, so a file that lost its tail (a crash of the machine) holds
//! fewer entries than sled counts, and the entries it lost are embedded again at the next
//! start. A torn or corrupt record ends the file: it is cut there.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use ulid::Ulid;

use super::model::EntryType;
use super::vectors::EntryVectors;

const MAGIC: &[u8; 8] = b"TDMVECS\n";
const VERSION: u32 = 1;
const HEADER: usize = 24;
const PUT: u8 = 1;
const DROP: u8 = 2;
/// A record's length and checksum.
const FRAME: usize = 8;
/// At open, a file holding more than this many records for each live one is rewritten.
const REWRITE_RATIO: usize = 2;

/// The vectors of one entry with what a search's filters need.
#[derive(Debug, Clone, PartialEq)]
pub struct Stored {
    pub id: Ulid,
    pub entry_type: EntryType,
    pub project: Option<String>,
    pub vectors: EntryVectors,
}

/// One record of the file.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    Put(Stored),
    Drop(Ulid),
}

impl Record {
    fn id(&self) -> Ulid {
        match self {
            Record::Put(s) => s.id,
            Record::Drop(id) => *id,
        }
    }

    fn encode_into(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&[0; FRAME]);
        match self {
            Record::Put(s) => {
                out.push(PUT);
                out.extend_from_slice(&s.id.to_bytes());
                let kind = s.entry_type.as_str().as_bytes();
                out.push(kind.len() as u8);
                out.extend_from_slice(kind);
                let project = s.project.as_deref().unwrap_or("").as_bytes();
                let project = &project[..project.len().min(u16::MAX as usize)];
                out.extend_from_slice(&(project.len() as u16).to_le_bytes());
                out.extend_from_slice(project);
                out.extend_from_slice(&s.vectors.encode());
            }
            Record::Drop(id) => {
                out.push(DROP);
                out.extend_from_slice(&id.to_bytes());
            }
        }
        let body = &out[start + FRAME..];
        let (len, crc) = (body.len() as u32, checksum(body));
        out[start..start + 4].copy_from_slice(&len.to_le_bytes());
        out[start + 4..start + FRAME].copy_from_slice(&crc.to_le_bytes());
    }

    fn decode(body: &[u8]) -> Option<Record> {
        let (&tag, rest) = body.split_first()?;
        let (id, rest) = rest.split_first_chunk::<16>()?;
        let id = Ulid::from_bytes(*id);
        match tag {
            DROP if rest.is_empty() => Some(Record::Drop(id)),
            PUT => {
                let (&kind_len, rest) = rest.split_first()?;
                let (kind, rest) = rest.split_at_checked(kind_len as usize)?;
                let entry_type = std::str::from_utf8(kind).ok()?.parse().ok()?;
                let (project_len, rest) = rest.split_first_chunk::<2>()?;
                let (project, rest) =
                    rest.split_at_checked(u16::from_le_bytes(*project_len) as usize)?;
                let project = std::str::from_utf8(project).ok()?;
                Some(Record::Put(Stored {
                    id,
                    entry_type,
                    project: (!project.is_empty()).then(|| project.to_string()),
                    vectors: EntryVectors::decode(rest)?,
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

fn header(maker: Maker) -> [u8; HEADER] {
    let mut h = [0; HEADER];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&(maker.dims as u32).to_le_bytes());
    h[16..].copy_from_slice(&maker.fingerprint.to_le_bytes());
    h
}

/// The maker a header names, `None` when it is not a header of this version.
fn maker_of(bytes: &[u8]) -> Option<Maker> {
    let h = bytes.get(..HEADER)?;
    (&h[..8] == MAGIC && h[8..12] == VERSION.to_le_bytes()).then(|| Maker {
        dims: u32::from_le_bytes(h[12..16].try_into().expect("4 bytes")) as usize,
        fingerprint: u64::from_le_bytes(h[16..].try_into().expect("8 bytes")),
    })
}

/// The records after the header, and how many bytes of the file they take: the file is
/// good up to there.
fn records(bytes: &[u8]) -> (Vec<Record>, usize) {
    let mut out = Vec::new();
    let mut at = HEADER;
    while let Some((frame, rest)) = bytes.get(at..).and_then(|b| b.split_first_chunk::<FRAME>()) {
        let len = u32::from_le_bytes(frame[..4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(frame[4..].try_into().expect("4 bytes"));
        let Some(body) = rest.get(..len) else { break };
        if checksum(body) != crc {
            break;
        }
        let Some(record) = Record::decode(body) else {
            break;
        };
        out.push(record);
        at += FRAME + len;
    }
    (out, at)
}

/// What the file holds: each id's last record, in the order first written.
fn live(records: Vec<Record>) -> Vec<Stored> {
    let mut at: HashMap<Ulid, usize> = HashMap::with_capacity(records.len());
    let mut out: Vec<Option<Stored>> = Vec::with_capacity(records.len());
    for record in records {
        let id = record.id();
        let slot = match record {
            Record::Put(s) => Some(s),
            Record::Drop(_) => None,
        };
        match at.get(&id) {
            Some(&i) => out[i] = slot,
            None => {
                at.insert(id, out.len());
                out.push(slot);
            }
        }
    }
    out.into_iter().flatten().collect()
}

/// The file, open for appending.
#[derive(Debug)]
pub struct VectorFile {
    path: PathBuf,
    file: File,
    maker: Maker,
}

/// What [`VectorFile::open`] found.
pub struct Opened {
    pub file: VectorFile,
    /// Every entry's vectors the file holds.
    pub stored: Vec<Stored>,
    /// Why the file's earlier content was set aside, if it was: vectors of another model,
    /// or a damaged tail.
    pub discarded: Option<String>,
}

impl VectorFile {
    /// Opens (or makes) the file at `path` for vectors made by `maker`. A file of another
    /// model is started again; a damaged tail is cut; one mostly superseded records is
    /// rewritten.
    pub fn open(path: &Path, maker: Maker) -> io::Result<Opened> {
        let bytes = match fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        let found = maker_of(&bytes);
        if found != Some(maker) {
            let discarded = match found {
                Some(_) => Some("the vectors were made by another model".to_string()),
                None if bytes.is_empty() => None,
                None => Some("the vector file has no header this version reads".to_string()),
            };
            let file = VectorFile::create(path, maker, &[])?;
            return Ok(Opened {
                file,
                stored: Vec::new(),
                discarded,
            });
        }
        let (records, good) = records(&bytes);
        let discarded = (good < bytes.len()).then(|| {
            format!(
                "the vector file was damaged after {good} of its {} bytes",
                bytes.len()
            )
        });
        let count = records.len();
        let stored = live(records);
        if count > REWRITE_RATIO * stored.len().max(1) {
            let file = VectorFile::create(path, maker, &stored)?;
            return Ok(Opened {
                file,
                stored,
                discarded,
            });
        }
        let file = OpenOptions::new().write(true).open(path)?;
        if good < bytes.len() {
            file.set_len(good as u64)?;
            file.sync_all()?;
        }
        let mut file = VectorFile {
            path: path.to_path_buf(),
            file,
            maker,
        };
        file.seek_end()?;
        Ok(Opened {
            file,
            stored,
            discarded,
        })
    }

    /// Writes a file holding `stored` in place of whatever is at `path` (atomically).
    pub fn create(path: &Path, maker: Maker, stored: &[Stored]) -> io::Result<VectorFile> {
        let mut bytes = header(maker).to_vec();
        for s in stored {
            Record::Put(s.clone()).encode_into(&mut bytes);
        }
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)?;
        }
        crate::store::write_atomically(path, &bytes)?;
        let mut file = VectorFile {
            path: path.to_path_buf(),
            file: OpenOptions::new().write(true).open(path)?,
            maker,
        };
        file.seek_end()?;
        Ok(file)
    }

    fn seek_end(&mut self) -> io::Result<()> {
        use std::io::Seek;
        self.file.seek(io::SeekFrom::End(0)).map(|_| ())
    }

    /// Appends `records` in one write (not synced: see the module's comment).
    pub fn append(&mut self, records: &[Record]) -> io::Result<()> {
        let mut bytes = Vec::new();
        for r in records {
            r.encode_into(&mut bytes);
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
    pub fn append_at(path: &Path, records: &[Record]) -> io::Result<()> {
        let bytes = match fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        let Some(maker) = maker_of(&bytes) else {
            return Ok(());
        };
        let good = self::records(&bytes).1;
        let mut file = VectorFile {
            path: path.to_path_buf(),
            file: OpenOptions::new().write(true).open(path)?,
            maker,
        };
        file.file.set_len(good as u64)?;
        file.seek_end()?;
        file.append(records)?;
        file.sync()
    }

    /// Empties the file (its vectors are being made again).
    pub fn clear(&mut self) -> io::Result<()> {
        *self = VectorFile::create(&self.path, self.maker, &[])?;
        Ok(())
    }

    /// Whether the file at `path` holds vectors for `id`, and whether a context vector
    /// among them: read from the file (used while no model is ready, when nothing of it is
    /// in memory).
    pub fn stored_at(path: &Path, id: &Ulid) -> io::Result<Option<bool>> {
        let bytes = match fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        if maker_of(&bytes).is_none() {
            return Ok(None);
        }
        let found = records(&bytes).0.into_iter().rfind(|r| r.id() == *id);
        Ok(match found {
            Some(Record::Put(s)) => Some(s.vectors.context.is_some()),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::vectors::Quantised;

    const MAKER: Maker = Maker {
        dims: 4,
        fingerprint: 7,
    };

    fn stored(n: u8, project: Option<&str>, context: bool) -> Stored {
        let q = |x: f32| Quantised::of(&[x, 0.5, -0.25, 0.0]);
        Stored {
            id: Ulid::from_parts(1, n as u128),
            entry_type: EntryType::Pitfall,
            project: project.map(str::to_string),
            vectors: EntryVectors {
                summary: q(n as f32 / 10.0),
                context: context.then(|| q(-1.0)),
            },
        }
    }

    #[test]
    fn records_are_read_back_the_last_of_an_id_winning() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vectors");
        let mut file = VectorFile::open(&path, MAKER).unwrap().file;
        let (a, b, b2) = (
            stored(1, Some("web"), true),
            stored(2, None, false),
            stored(2, Some("api"), false),
        );
        file.append(&[Record::Put(a.clone()), Record::Put(b)])
            .unwrap();
        file.append(&[Record::Put(b2.clone())]).unwrap();
        drop(file);
        let opened = VectorFile::open(&path, MAKER).unwrap();
        assert_eq!(opened.stored, vec![a.clone(), b2]);
        assert!(opened.discarded.is_none());
        assert_eq!(VectorFile::stored_at(&path, &a.id).unwrap(), Some(true));

        let mut file = opened.file;
        file.append(&[Record::Drop(a.id)]).unwrap();
        drop(file);
        assert_eq!(VectorFile::open(&path, MAKER).unwrap().stored.len(), 1);
        assert_eq!(VectorFile::stored_at(&path, &a.id).unwrap(), None);
    }

    #[test]
    fn a_torn_tail_is_cut_and_another_models_file_started_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vectors");
        let mut file = VectorFile::open(&path, MAKER).unwrap().file;
        file.append(&[Record::Put(stored(1, None, false))]).unwrap();
        file.append(&[Record::Put(stored(2, None, false))]).unwrap();
        drop(file);
        let full = fs::metadata(&path).unwrap().len();
        OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(full - 3)
            .unwrap();

        let opened = VectorFile::open(&path, MAKER).unwrap();
        assert_eq!(opened.stored, vec![stored(1, None, false)]);
        assert!(opened.discarded.unwrap().contains("damaged"));
        // Cut back to the last whole record, and appended after it.
        let mut file = opened.file;
        file.append(&[Record::Put(stored(3, None, false))]).unwrap();
        drop(file);
        let ids: Vec<Ulid> = VectorFile::open(&path, MAKER)
            .unwrap()
            .stored
            .iter()
            .map(|s| s.id)
            .collect();
        assert_eq!(
            ids,
            vec![stored(1, None, false).id, stored(3, None, false).id]
        );

        let other = Maker {
            fingerprint: 8,
            ..MAKER
        };
        let opened = VectorFile::open(&path, other).unwrap();
        assert!(opened.stored.is_empty());
        assert!(opened.discarded.unwrap().contains("another model"));
        assert_eq!(opened.file.maker, other);
        assert_eq!(fs::metadata(&path).unwrap().len(), HEADER as u64);
    }

    #[test]
    fn a_file_mostly_superseded_is_rewritten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vectors");
        let mut file = VectorFile::open(&path, MAKER).unwrap().file;
        for _ in 0..5 {
            file.append(&[Record::Put(stored(1, None, false))]).unwrap();
        }
        drop(file);
        let before = fs::metadata(&path).unwrap().len();
        let opened = VectorFile::open(&path, MAKER).unwrap();
        assert_eq!(opened.stored, vec![stored(1, None, false)]);
        let after = fs::metadata(&path).unwrap().len();
        assert_eq!(after, HEADER as u64 + (before - HEADER as u64) / 5);
    }
}
