//! How an entry's record is stored: its JSON, compressed with a zstd dictionary trained on
//! the memory's own entries.
//!
//! sled stores its pages as they are (format 3, `store.rs`): compressing each page
//! fragment it logs, with a new zstd context every time, was two thirds of an add's
//! transaction and ~40% of an import. One entry alone compresses poorly (its JSON keys and
//! the words of its field are what it shares with the others); with a dictionary of what
//! the entries share it compresses 4 to 5 times, in a few microseconds.
//!
//! - A record is either a zstd frame (it starts with zstd's magic number) naming the
//!   dictionary it was made with, or plain JSON (it starts with `{`): what is written
//!   before any dictionary is trained, and by older formats. Readers take both.
//! - Dictionaries are kept in `memory.dictionaries`, by zstd's id for them, and never
//!   removed: a record names its dictionary, and every dictionary ever trained decodes.
//! - The newest dictionary compresses new records. A memory trains its first at
//!   [`FIRST_TRAINING`] entries and re-encodes the plain records then; a new one at each
//!   tenfold growth, for what is written after ([`Memory::train_dictionary_when_due`]).

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use zstd::zstd_safe::{self, CCtx, CDict, DCtx, DDict};

use super::{Memory, MemoryError, Progress, Result, be_u64};

/// zstd's magic number, as a frame starts with it.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];
/// zstd's level: the entries' text gains little past it, and costs more.
const LEVEL: i32 = 3;
/// The dictionary's size: zstd's own default for training (`zstd --train`). On the
/// benches' entries, 16 KB compressed 2.9 times, 64 KB 4.3 and this 5.4.
const DICTIONARY_BYTES: usize = 112_640;
/// A dictionary is trained from the most recent entries, this many at most.
const TRAINING_SAMPLES: usize = 4_000;
/// A memory trains its first dictionary once it holds this many entries...
pub(super) const FIRST_TRAINING: u64 = 1_000;
/// ...and a new one each time it holds this many times more than at the last training.
const RETRAIN_GROWTH: u64 = 10;
/// `memory.meta`: the entry count when the newest dictionary was trained.
const META_TRAINED_AT: &[u8] = b"dictionary_trained_at";

thread_local! {
    static COMPRESSOR: RefCell<CCtx<'static>> = RefCell::new(zstd_safe::create_cctx());
    static DECOMPRESSOR: RefCell<DCtx<'static>> = RefCell::new(zstd_safe::create_dctx());
}

/// The memory's dictionaries, and the encoding and decoding of its entries' records.
pub(super) struct Codec {
    tree: sled::Tree,
    dictionaries: RwLock<Dictionaries>,
}

#[derive(Default)]
struct Dictionaries {
    /// The newest dictionary, which compresses: its id and zstd's prepared form.
    current: Option<(u32, Arc<CDict<'static>>)>,
    /// Every dictionary, by id, prepared for decoding.
    decoders: HashMap<u32, Arc<DDict<'static>>>,
}

impl Codec {
    /// The codec of the dictionaries kept in `tree`.
    pub fn open(tree: sled::Tree) -> Result<Codec> {
        let mut dictionaries = Dictionaries::default();
        let mut newest: Option<(u64, u32, sled::IVec)> = None;
        for item in tree.iter() {
            let (key, dict) = item?;
            let id = zstd_safe::get_dict_id(&dict)
                .ok_or_else(|| MemoryError::Corrupt("a stored dictionary has no id".into()))?;
            let order = stored_order(&key)?;
            dictionaries
                .decoders
                .insert(id, Arc::new(zstd_safe::create_ddict(&dict)));
            if newest.as_ref().is_none_or(|(o, ..)| order > *o) {
                newest = Some((order, id, dict));
            }
        }
        dictionaries.current =
            newest.map(|(_, id, dict)| (id, Arc::new(zstd_safe::create_cdict(&dict, LEVEL))));
        Ok(Codec {
            tree,
            dictionaries: RwLock::new(dictionaries),
        })
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Dictionaries> {
        self.dictionaries.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a dictionary was trained.
    pub fn trained(&self) -> bool {
        self.read().current.is_some()
    }

    /// The record of an entry's JSON: compressed with the newest dictionary, or the JSON
    /// itself while there is none.
    pub fn encode(&self, json: Vec<u8>) -> Vec<u8> {
        let Some((_, cdict)) = self.read().current.clone() else {
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
        let corrupt = |what: &str| MemoryError::Corrupt(format!("an entry's record {what}"));
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

    /// Trains a dictionary on `samples` (entries' JSON) and makes it the one that
    /// compresses. Returns false when zstd could make none of them (too few, too alike).
    pub fn train(&self, samples: &[Vec<u8>]) -> Result<bool> {
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
        self.tree.insert(order.to_be_bytes(), dict.as_slice())?;
        dictionaries
            .decoders
            .insert(id, Arc::new(zstd_safe::create_ddict(&dict)));
        dictionaries.current = Some((id, Arc::new(zstd_safe::create_cdict(&dict, LEVEL))));
        Ok(true)
    }
}

/// A dictionary's key: the order it was trained in.
fn stored_order(key: &[u8]) -> Result<u64> {
    key.try_into()
        .map(u64::from_be_bytes)
        .map_err(|_| MemoryError::Corrupt("a stored dictionary's key is not its order".into()))
}

impl Memory {
    /// Trains a dictionary when one is due: at [`FIRST_TRAINING`] entries (re-encoding
    /// the records written plain until then) and at each tenfold growth after. Caller
    /// holds the write lock.
    pub(super) fn train_dictionary_when_due(&self, progress: &dyn Progress) -> Result<()> {
        let count = self.entry_count()?;
        let trained_at = self.meta.get(META_TRAINED_AT)?.map(|v| be_u64(&v));
        let due = match trained_at {
            _ if !self.codec.trained() => count >= FIRST_TRAINING,
            Some(at) => count >= at.saturating_mul(RETRAIN_GROWTH),
            None => false,
        };
        if !due {
            return Ok(());
        }
        let started = std::time::Instant::now();
        let mut samples = Vec::with_capacity(TRAINING_SAMPLES);
        for id in self.by_seq.iter().values().rev().take(TRAINING_SAMPLES) {
            if let Some(record) = self.entries.get(id?)? {
                samples.push(self.codec.decode(&record)?.into_owned());
            }
        }
        let first = !self.codec.trained();
        if !self.codec.train(&samples)? {
            return Ok(());
        }
        self.meta.insert(META_TRAINED_AT, &count.to_be_bytes())?;
        let encoded = if first {
            self.encode_plain_records(progress)?
        } else {
            0
        };
        self.store.flush()?;
        tracing::info!(
            "trained a dictionary for the entries from {} of {count} in {:.2} s; {encoded} records compressed with it",
            samples.len(),
            started.elapsed().as_secs_f64()
        );
        Ok(())
    }

    /// Compresses every record still plain. A record changed meanwhile (an access
    /// recorded) is left to its writer, who encodes it already.
    fn encode_plain_records(&self, progress: &dyn Progress) -> Result<u64> {
        let plain: Vec<sled::IVec> = self
            .entries
            .iter()
            .filter_map(|item| match item {
                Ok((key, record)) if !record.starts_with(&ZSTD_MAGIC) => Some(Ok(key)),
                Ok(_) => None,
                Err(e) => Some(Err(e)),
            })
            .collect::<std::result::Result<_, _>>()?;
        if plain.len() > 10_000 {
            progress.start(plain.len() as u64, "compressing the entries");
        }
        let mut done = 0;
        for key in &plain {
            if let Some(record) = self.entries.get(key)?
                && !record.starts_with(&ZSTD_MAGIC)
            {
                let encoded = self.codec.encode(record.to_vec());
                // A failed swap is a write since the read, encoded by its writer.
                let _ = self
                    .entries
                    .compare_and_swap(key, Some(record), Some(encoded))?;
            }
            done += 1;
            if done % 10_000 == 0 {
                progress.advance(done);
            }
        }
        if plain.len() > 10_000 {
            progress.finish();
        }
        Ok(done)
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
        assert!(codec.train(&samples()).unwrap());
        let record = codec.encode(samples()[3].clone());
        assert!(record.starts_with(&ZSTD_MAGIC) && record.len() < samples()[3].len() / 2);
        assert_eq!(
            codec.decode(&record).unwrap().as_ref(),
            samples()[3].as_slice()
        );
        assert_eq!(codec.decode(&json).unwrap().as_ref(), json.as_slice());

        for bad in [&record[..record.len() - 3], &record[..6]] {
            assert!(matches!(codec.decode(bad), Err(MemoryError::Corrupt(_))));
        }
        // A dictionary this memory does not have (its records copied from another).
        let other = Codec::open(db.open_tree("e").unwrap()).unwrap();
        assert!(other.train(&samples()[100..]).unwrap());
        let foreign = other.encode(samples()[3].clone());
        let Err(MemoryError::Corrupt(why)) = codec.decode(&foreign) else {
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
