//! When the memory trains the dictionaries its entries' records are compressed with
//! ([`crate::codec`]): the first at [`FIRST_TRAINING`] entries, re-encoding the records
//! written plain until then, and a new one at each tenfold growth, for what is written
//! after. An upgrade from format 2 trains the first as it copies (`store.rs`).

use crate::codec::{FIRST_TRAINING, TRAINING_SAMPLES, ZSTD_MAGIC};

use super::{Entry, Memory, NoProgress, Progress, Result, encode};

/// A memory trains a new dictionary each time it holds this many times more entries than
/// at the last training.
const RETRAIN_GROWTH: u64 = 10;

impl Memory {
    /// Trains a dictionary when one is due: at [`FIRST_TRAINING`] entries (re-encoding
    /// the records written plain until then) and at each tenfold growth after. Caller
    /// holds the write lock.
    pub(super) fn train_dictionary_when_due(&self, progress: &dyn Progress) -> Result<()> {
        let count = self.entry_count()?;
        let due = match self.codec.trained_at() {
            None => count >= FIRST_TRAINING,
            Some(at) => count >= at.max(1).saturating_mul(RETRAIN_GROWTH),
        };
        if !due {
            return Ok(());
        }
        let mut samples = Vec::with_capacity(TRAINING_SAMPLES);
        for id in self.by_seq.iter().values().rev().take(TRAINING_SAMPLES) {
            if let Some(record) = self.entries.get(id?)? {
                samples.push(self.codec.decode(&record)?.into_owned());
            }
        }
        self.train_dictionary(&samples, count, progress)
    }

    /// Before an import writes `incoming` into a memory with no dictionary yet: trains one
    /// on them when they bring it to [`FIRST_TRAINING`] entries, so that they are written
    /// compressed rather than written plain and rewritten (sled's files would keep both
    /// for a while). Caller holds the write lock.
    pub(super) fn train_dictionary_for_import(
        &self,
        incoming: &[&Entry],
        count: u64,
    ) -> Result<()> {
        if self.codec.trained_at().is_some() || count < FIRST_TRAINING {
            return Ok(());
        }
        let samples: Vec<Vec<u8>> = incoming.iter().take(TRAINING_SAMPLES).map(encode).collect();
        self.train_dictionary(&samples, count, &NoProgress)
    }

    /// Trains a dictionary on `samples` of the `count` entries; the first one compresses
    /// the records written plain until then.
    fn train_dictionary(
        &self,
        samples: &[Vec<u8>],
        count: u64,
        progress: &dyn Progress,
    ) -> Result<()> {
        let started = std::time::Instant::now();
        let first = self.codec.trained_at().is_none();
        if !self.codec.train(samples, count)? {
            return Ok(());
        }
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
