//! Records of JSON compressed with zstd dictionaries trained on the records themselves
//! (the memory's entries: `memory/compression.rs` says when it trains them).
//!
//! sled stores its pages as they are (format 3, `store.rs`): compressing each page
//! fragment it logs, with a new zstd context every time, was most of an add's transaction
//! and much of an import. One record alone compresses poorly (its JSON keys and the words of
//! its fields are what it shares with the others); with a dictionary of what the records
//! share it compresses several times, quickly (`benches/scale.rs` prints the database's
//! bytes an entry, and the add and import times).
//!
//! - A record is either a zstd frame (it starts with zstd's magic number) naming the
//!   dictionary it was made with, or plain JSON (it starts with `{`): what is written
//!   before any dictionary is trained, and by older formats. Readers take both.
//! - Dictionaries are kept in a tree of their own, in the order they were trained, with
//!   the number of records there were then, and never removed: a record names its
//!   dictionary, and every dictionary ever trained decodes.
//! - The newest dictionary compresses new records.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use zstd::zstd_safe::{self, CCtx, CDict, DCtx, DDict};

/// zstd's magic number, as a frame starts with it.
pub const ZSTD_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];
/// zstd's level: the entries' text gains little past it, and costs more.
const LEVEL: i32 = 3;
/// The dictionary's size: zstd's own default for training (`zstd --train`). On the
/// benches' entries, smaller dictionaries compressed less (`benches/scale.rs` prints the
/// database's bytes an entry).
const DICTIONARY_BYTES: usize = 112_640;
/// No record decodes to more: a frame that says it does is corrupt, not an allocation.
/// (The largest entry, every field at its limit and its text escaped, is a few MB.)
const MAX_RECORD_BYTES: u64 = 64 << 20;
/// A dictionary is trained once there are this many records...
pub const FIRST_TRAINING: u64 = 1_000;
/// ...from this many of them at most. zstd's training takes time in proportion: on the
/// benches' entries, twice as many samples took about twice as long and compressed no
/// better, and half as many barely worse (the first dictionary of an import is trained on
/// its writing thread, so it shows in `benches/scale.rs`'s import; fewer samples may miss
/// more of a varied knowledge base).
pub const TRAINING_SAMPLES: usize = 2_000;

#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("a stored record {0}")]
    Corrupt(String),
    #[error(transparent)]
    Sled(#[from] sled::Error),
}

type Result<T, E = CodecError> = std::result::Result<T, E>;

thread_local! {
    static COMPRESSOR: RefCell<CCtx<'static>> = RefCell::new(zstd_safe::create_cctx());
    static DECOMPRESSOR: RefCell<DCtx<'static>> = RefCell::new(zstd_safe::create_dctx());
}

/// The dictionaries of a tree's records, and the encoding and decoding of them.
pub struct Codec {
    tree: sled::Tree,
    dictionaries: RwLock<Dictionaries>,
}

#[derive(Default)]
struct Dictionaries {
    /// The newest dictionary, which compresses.
    newest: Option<Newest>,
    /// Every dictionary, by id, prepared for decoding.
    decoders: HashMap<u32, Arc<DDict<'static>>>,
}

struct Newest {
    /// zstd's prepared form of it, for compressing.
    cdict: Arc<CDict<'static>>,
    /// How many records there were when it was trained.
    trained_at: u64,
}

impl Newest {
    fn of(dict: &[u8], trained_at: u64) -> Newest {
        Newest {
            cdict: Arc::new(zstd_safe::create_cdict(dict, LEVEL)),
            trained_at,
        }
    }
}

impl Codec {
    /// The codec of the dictionaries kept in `tree`.
    pub fn open(tree: sled::Tree) -> Result<Codec> {
        let mut dictionaries = Dictionaries::default();
        // Keys are the order of training: the last is the newest.
        let mut newest: Option<(u64, sled::IVec)> = None;
        for item in tree.iter() {
            let (_, value) = item?;
            let (trained_at, dict) = value
                .split_first_chunk::<8>()
                .map(|(at, dict)| (u64::from_be_bytes(*at), dict))
                .ok_or_else(|| CodecError::Corrupt("dictionary is too short".into()))?;
            let id = zstd_safe::get_dict_id(dict)
                .ok_or_else(|| CodecError::Corrupt("dictionary has no id".into()))?;
            dictionaries
                .decoders
                .insert(id, Arc::new(zstd_safe::create_ddict(dict)));
            newest = Some((trained_at, value));
        }
        dictionaries.newest = newest.map(|(trained_at, value)| Newest::of(&value[8..], trained_at));
        Ok(Codec {
            tree,
            dictionaries: RwLock::new(dictionaries),
        })
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Dictionaries> {
        self.dictionaries.read().unwrap_or_else(|p| p.into_inner())
    }

    /// How many records there were when the newest dictionary was trained; `None` while
    /// none was.
    pub fn trained_at(&self) -> Option<u64> {
        self.read().newest.as_ref().map(|n| n.trained_at)
    }

    /// The record of a JSON document: compressed with the newest dictionary, or the JSON
    /// itself while there is none.
    pub fn encode(&self, json: Vec<u8>) -> Vec<u8> {
        let Some(cdict) = self.read().newest.as_ref().map(|n| n.cdict.clone()) else {
            return json;
        };
        let mut out = Vec::with_capacity(zstd_safe::compress_bound(json.len()));
        COMPRESSOR
            .with_borrow_mut(|cctx| cctx.compress_using_cdict(&mut out, &json, &cdict))
            .expect("the output is as large as zstd's bound for the input");
        out
    }

    /// The JSON of a record [`Codec::encode`] made (or of plain JSON: itself).
    pub fn decode<'a>(&self, record: &'a [u8]) -> Result<Cow<'a, [u8]>> {
        if !record.starts_with(&ZSTD_MAGIC) {
            return Ok(Cow::Borrowed(record));
        }
        let corrupt = |what: &str| CodecError::Corrupt(what.to_string());
        let id = zstd_safe::get_dict_id_from_frame(record);
        let ddict = self
            .read()
            .decoders
            .get(&id)
            .cloned()
            .ok_or_else(|| corrupt(&format!("names the unknown dictionary {id}")))?;
        let size = zstd_safe::get_frame_content_size(record);
        if size == zstd_safe::CONTENTSIZE_UNKNOWN || size == zstd_safe::CONTENTSIZE_ERROR {
            return Err(corrupt("has no size"));
        }
        if size > MAX_RECORD_BYTES {
            return Err(corrupt(&format!("claims {size} bytes")));
        }
        let mut out = Vec::with_capacity(size as usize);
        DECOMPRESSOR
            .with_borrow_mut(|dctx| dctx.decompress_using_ddict(&mut out, record, &ddict))
            .map_err(|code| {
                corrupt(&format!(
                    "does not decompress: {}",
                    zstd_safe::get_error_name(code)
                ))
            })?;
        Ok(Cow::Owned(out))
    }

    /// Trains a dictionary on `samples` (records' JSON) of the `records` there are, and
    /// makes it the one that compresses. Returns false when zstd could make none of them
    /// (too few, too alike).
    pub fn train(&self, samples: &[Vec<u8>], records: u64) -> Result<bool> {
        let dict = match zstd::dict::from_samples(samples, DICTIONARY_BYTES) {
            Ok(dict) => dict,
            Err(e) => {
                tracing::warn!("no dictionary from {} entries: {e}", samples.len());
                return Ok(false);
            }
        };
        let Some(id) = zstd_safe::get_dict_id(&dict) else {
            return Ok(false);
        };
        let mut dictionaries = self.dictionaries.write().unwrap_or_else(|p| p.into_inner());
        if dictionaries.decoders.contains_key(&id) {
            // zstd picks an id at random: a clash is one in four billion, and the
            // dictionary in use stays.
            return Ok(false);
        }
        let order = self.tree.len() as u64 + 1;
        let mut value = records.to_be_bytes().to_vec();
        value.extend_from_slice(&dict);
        self.tree.insert(order.to_be_bytes(), value)?;
        dictionaries
            .decoders
            .insert(id, Arc::new(zstd_safe::create_ddict(&dict)));
        dictionaries.newest = Some(Newest::of(&dict, records));
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples() -> Vec<Vec<u8>> {
        (0..500)
            .map(|i| {
                format!(
                    r#"{{"id":"{i:026}","type":"bug","title":"The parser fails on input {i}","content":"Seen when the file has {} lines; bounded the buffer."}}"#,
                    i * 7
                )
                .into_bytes()
            })
            .collect()
    }

    #[test]
    fn plain_json_passes_and_a_bad_frame_is_corrupt_not_a_panic() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let codec = Codec::open(db.open_tree("d").unwrap()).unwrap();
        let json = br#"{"id":"x"}"#.to_vec();
        assert_eq!(codec.encode(json.clone()), json, "no dictionary: plain");
        assert!(codec.train(&samples(), 500).unwrap());
        let record = codec.encode(samples()[3].clone());
        assert!(record.starts_with(&ZSTD_MAGIC) && record.len() < samples()[3].len() / 2);
        assert_eq!(
            codec.decode(&record).unwrap().as_ref(),
            samples()[3].as_slice()
        );
        assert_eq!(codec.decode(&json).unwrap().as_ref(), json.as_slice());

        for bad in [&record[..record.len() - 3], &record[..6]] {
            assert!(matches!(codec.decode(bad), Err(CodecError::Corrupt(_))));
        }
        // A header naming this dictionary and a terabyte of content (single segment, a
        // 4-byte dictionary id, an 8-byte size).
        let id = zstd_safe::get_dict_id_from_frame(&record);
        let mut huge = ZSTD_MAGIC.to_vec();
        huge.push(0xE3);
        huge.extend_from_slice(&id.to_le_bytes());
        huge.extend_from_slice(&(1u64 << 40).to_le_bytes());
        huge.extend_from_slice(&[1, 0, 0]);
        let Err(CodecError::Corrupt(why)) = codec.decode(&huge) else {
            panic!("a terabyte decoded");
        };
        assert!(why.contains("claims 1099511627776 bytes"), "{why}");
        // A dictionary this memory does not have (its records copied from another).
        let other = Codec::open(db.open_tree("e").unwrap()).unwrap();
        assert!(other.train(&samples()[100..], 400).unwrap());
        let foreign = other.encode(samples()[3].clone());
        let Err(CodecError::Corrupt(why)) = codec.decode(&foreign) else {
            panic!("a foreign dictionary decoded");
        };
        assert!(why.contains("unknown dictionary"), "{why}");
        // Reopened, the dictionary is the stored one.
        drop(codec);
        let codec = Codec::open(db.open_tree("d").unwrap()).unwrap();
        assert_eq!(
            codec.decode(&record).unwrap().as_ref(),
            samples()[3].as_slice()
        );
    }
}
