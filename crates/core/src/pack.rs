//! The entries' records, packed: one file in the database's folder, written by a
//! compaction of the data dir ([`crate::store::compact`]) and only read after.
//!
//! sled rewrites a page each time one of its records changes and keeps the old versions
//! until at most half of a segment is in use: its files hold 1.6–2.2 times the records
//! they store, whatever order they come in (a copy into a new database too). The entries'
//! records are nine tenths of those bytes. A compaction writes each of them once into the
//! pack, back to back, and leaves in sled a pointer to it in its place; sled then holds
//! small records only. An entry written after (an add, an update, an access counted) is
//! written into sled again, whole, and the next compaction packs it; what it replaced in
//! the pack is left out then.
//!
//! ```text
//! file:    "TDMPACK\n" [version: u32 LE] then the records, back to back
//! pointer: [1] [offset: u64 LE] [length: u32 LE] [checksum: u32 LE, xxh3's low half]
//! ```
//!
//! A record is never empty, and never begins with a 1 (it is JSON, `{`, or a zstd frame),
//! so a value of the entries' tree is either a record or a pointer. The pack sits in the
//! folder of the database that points into it: a compaction writes the new pack beside
//! the copy of the database, synced before the copy is swapped in, and the two folders
//! trade places as one. Nothing writes a pack while a process holds the data dir.

use std::borrow::Cow;
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::Path;

use xxhash_rust::xxh3::xxh3_64;

/// The pack's name in the database's folder.
pub const FILE: &str = "entries.pack";
const MAGIC: &[u8; 8] = b"TDMPACK\n";
const VERSION: u32 = 1;
const HEADER: u64 = 12;
/// The first byte of a pointer...
const POINTER: u8 = 1;
/// ...and its length.
pub const POINTER_LEN: usize = 17;

#[derive(Debug, thiserror::Error)]
pub enum PackError {
    #[error("points into {FILE}, which is missing")]
    Missing,
    #[error("is a pointer of {0} bytes, not {POINTER_LEN}")]
    BadPointer(usize),
    #[error("points past the end of {FILE} ({offset} + {len} > {size} bytes)")]
    OutOfRange { offset: u64, len: u32, size: u64 },
    #[error("fails its checksum in {FILE} (at {0})")]
    Checksum(u64),
    #[error("could not be read from {FILE}: {0}")]
    Io(#[from] io::Error),
}

/// Whether a value of the entries' tree points into the pack.
pub fn is_pointer(value: &[u8]) -> bool {
    value.first() == Some(&POINTER)
}

/// The length of the record a pointer names (for a count of what a copy would hold).
pub fn pointed_len(value: &[u8]) -> Option<u32> {
    parse(value).ok().map(|(_, len, _)| len)
}

fn parse(value: &[u8]) -> Result<(u64, u32, u32), PackError> {
    let bytes: &[u8; POINTER_LEN] = value
        .try_into()
        .map_err(|_| PackError::BadPointer(value.len()))?;
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    let offset = u64::from_le_bytes(bytes[1..9].try_into().expect("8 bytes"));
    Ok((offset, u32_at(9), u32_at(13)))
}

fn checksum(record: &[u8]) -> u32 {
    xxh3_64(record) as u32
}

/// A pack, open for reading.
#[derive(Debug)]
pub struct Pack {
    file: File,
    size: u64,
}

impl Pack {
    /// The pack in the database's folder `db`, if it has one.
    pub fn open(db: &Path) -> io::Result<Option<Pack>> {
        let file = match File::open(db.join(FILE)) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let size = file.metadata()?.len();
        let mut header = [0; HEADER as usize];
        if size < HEADER || read_at(&file, &mut header, 0).is_err() || &header[..8] != MAGIC {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} is not a pack of entries' records",
                    db.join(FILE).display()
                ),
            ));
        }
        let version = u32::from_le_bytes(header[8..].try_into().expect("4 bytes"));
        if version != VERSION {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} is a pack of version {version}, not {VERSION}",
                    db.join(FILE).display()
                ),
            ));
        }
        Ok(Some(Pack { file, size }))
    }

    fn read(&self, offset: u64, len: u32, sum: u32) -> Result<Vec<u8>, PackError> {
        if offset < HEADER || offset.saturating_add(u64::from(len)) > self.size {
            return Err(PackError::OutOfRange {
                offset,
                len,
                size: self.size,
            });
        }
        let mut record = vec![0; len as usize];
        read_at(&self.file, &mut record, offset)?;
        if checksum(&record) != sum {
            return Err(PackError::Checksum(offset));
        }
        Ok(record)
    }
}

/// The record a value of the entries' tree holds: itself, or the one it points to in
/// `pack`.
pub fn resolve<'a>(pack: Option<&Pack>, value: &'a [u8]) -> Result<Cow<'a, [u8]>, PackError> {
    if !is_pointer(value) {
        return Ok(Cow::Borrowed(value));
    }
    let (offset, len, sum) = parse(value)?;
    let pack = pack.ok_or(PackError::Missing)?;
    Ok(Cow::Owned(pack.read(offset, len, sum)?))
}

#[cfg(unix)]
fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
}

#[cfg(windows)]
fn read_at(file: &File, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
    while !buf.is_empty() {
        match std::os::windows::fs::FileExt::seek_read(file, buf, offset)? {
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            n => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
        }
    }
    Ok(())
}

/// A pack being written into a new database's folder: made at the first record.
pub struct PackWriter<'a> {
    db: &'a Path,
    file: Option<BufWriter<File>>,
    at: u64,
}

impl<'a> PackWriter<'a> {
    pub fn new(db: &'a Path) -> PackWriter<'a> {
        PackWriter {
            db,
            file: None,
            at: HEADER,
        }
    }

    /// Appends `record`; the pointer to put in its place.
    pub fn put(&mut self, record: &[u8]) -> io::Result<[u8; POINTER_LEN]> {
        debug_assert!(!record.is_empty() && !is_pointer(record));
        let file = match &mut self.file {
            Some(file) => file,
            None => {
                let file = OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(self.db.join(FILE))?;
                let mut file = BufWriter::with_capacity(1 << 20, file);
                file.write_all(MAGIC)?;
                file.write_all(&VERSION.to_le_bytes())?;
                self.file.insert(file)
            }
        };
        file.write_all(record)?;
        let len = u32::try_from(record.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a record over 4 GiB"))?;
        let mut pointer = [0; POINTER_LEN];
        pointer[0] = POINTER;
        pointer[1..9].copy_from_slice(&self.at.to_le_bytes());
        pointer[9..13].copy_from_slice(&len.to_le_bytes());
        pointer[13..].copy_from_slice(&checksum(record).to_le_bytes());
        self.at += u64::from(len);
        Ok(pointer)
    }

    /// Makes the pack durable, its name in the folder too (before a database pointing
    /// into it is).
    pub fn finish(self) -> io::Result<()> {
        if let Some(file) = self.file {
            file.into_inner().map_err(|e| e.into_error())?.sync_all()?;
            #[cfg(unix)]
            File::open(self.db)?.sync_all()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_read_back_through_their_pointers_and_damage_is_told() {
        let dir = tempfile::tempdir().unwrap();
        assert!(Pack::open(dir.path()).unwrap().is_none());
        let plain = br#"{"title":"a"}"#.to_vec();
        let zstd = [0x28, 0xB5, 0x2F, 0xFD, 9, 9, 9].to_vec();
        let mut writer = PackWriter::new(dir.path());
        let pointers = [writer.put(&plain).unwrap(), writer.put(&zstd).unwrap()];
        writer.finish().unwrap();
        let pack = Pack::open(dir.path()).unwrap().unwrap();
        assert_eq!(resolve(Some(&pack), &pointers[0]).unwrap().as_ref(), plain);
        assert_eq!(resolve(Some(&pack), &pointers[1]).unwrap().as_ref(), zstd);
        assert_eq!(pointed_len(&pointers[1]), Some(7));
        // A record is itself.
        assert!(matches!(resolve(None, &plain).unwrap(), Cow::Borrowed(_)));
        assert!(matches!(
            resolve(None, &pointers[0]),
            Err(PackError::Missing)
        ));
        assert!(matches!(
            resolve(Some(&pack), &pointers[0][..9]),
            Err(PackError::BadPointer(9))
        ));
        let mut past = pointers[1];
        past[9] = 8;
        assert!(matches!(
            resolve(Some(&pack), &past),
            Err(PackError::OutOfRange { len: 8, .. })
        ));
        // A byte of the first record changed on disk.
        let path = dir.path().join(FILE);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[HEADER as usize + 2] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let pack = Pack::open(dir.path()).unwrap().unwrap();
        assert!(matches!(
            resolve(Some(&pack), &pointers[0]),
            Err(PackError::Checksum(12))
        ));
        assert_eq!(resolve(Some(&pack), &pointers[1]).unwrap().as_ref(), zstd);
        // Not a pack.
        std::fs::write(&path, b"TDMVECS\n\x01\0\0\0").unwrap();
        assert!(Pack::open(dir.path()).is_err());
    }

    #[test]
    fn a_writer_with_no_record_makes_no_file() {
        let dir = tempfile::tempdir().unwrap();
        PackWriter::new(dir.path()).finish().unwrap();
        assert!(!dir.path().join(FILE).exists());
    }
}
