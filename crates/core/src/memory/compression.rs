//! When the memory trains the dictionaries its entries' records are compressed with
//! ([`crate::codec`]): the first at [`FIRST_TRAINING`] entries, re-encoding the records
//! written plain until then, and a new one at each tenfold growth, for what is written
//! after, on a thread of its own: zstd's training is slow enough that the add or the part
//! of an import that made the memory ten times larger waited for it (a large share of an
//! import's writing thread: `benches/scale.rs` times the import), and the writes go on with
//! the previous dictionary meanwhile. An upgrade from format 2 trains the first as it copies
//! (`store.rs`).

use crate::codec::{Codec, FIRST_TRAINING, TRAINING_SAMPLES, ZSTD_MAGIC};
use crate::store::Store;

use super::{Entry, Memory, NoProgress, Progress, Result, encode};

/// A memory trains a new dictionary each time it holds this many times more entries than
/// at the last training.
const RETRAIN_GROWTH: u64 = 10;

impl Memory {
    /// Trains a dictionary when one is due for a memory of `count` entries: at
    /// [`FIRST_TRAINING`] entries (re-encoding the records written plain until then) and
    /// at each tenfold growth after. Caller holds the write lock.
    pub(super) fn train_dictionary_when_due(
        &self,
        count: u64,
        progress: &dyn Progress,
    ) -> Result<()> {
        let due = match self.codec.trained_at() {
            None => count >= FIRST_TRAINING,
            Some(at) => count >= at.max(1).saturating_mul(RETRAIN_GROWTH),
        };
        if !due {
            return Ok(());
        }
        let first = self.codec.trained_at().is_none();
        let mut retraining = self.retraining.lock().unwrap_or_else(|p| p.into_inner());
        if retraining.as_ref().is_some_and(|t| !t.is_finished()) {
            return Ok(());
        }
        if let Some(done) = retraining.take() {
            let _ = done.join();
        }
        if first {
            let samples = newest_records(&self.store, &self.writes, &self.entries, &self.codec)?;
            return self.train_dictionary(&samples, count, progress);
        }
        // The samples are read on the thread too (2,000 records read and decoded). The
        // dictionary is in sled before a record is encoded with it, so a flush that makes
        // such a record durable makes the dictionary durable too.
        let (store, writes, entries, codec) = (
            self.store.clone(),
            self.writes.clone(),
            self.entries.clone(),
            self.codec.clone(),
        );
        let thread = std::thread::Builder::new()
            .name("tandem-dictionary".into())
            .spawn(move || {
                let started = std::time::Instant::now();
                let trained = newest_records(&store, &writes, &entries, &codec)
                    .and_then(|samples| Ok((codec.train(&samples, count)?, samples.len())));
                match trained {
                    Ok((true, samples)) => tracing::info!(
                        "trained a dictionary for the entries from {samples} of {count} in {:.2} s",
                        started.elapsed().as_secs_f64()
                    ),
                    Ok((false, _)) => {}
                    Err(e) => tracing::warn!("training a dictionary failed: {e}"),
                }
            })?;
        *retraining = Some(thread);
        Ok(())
    }

    /// Waits for a dictionary being trained, if any. The memory waits for it as it closes.
    pub fn wait_for_dictionary(&self) {
        let thread = self
            .retraining
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
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

    /// Compresses every record still plain, in one pass. A record changed since it was
    /// read (an access recorded) is left to its writer, who encodes it already. Returns
    /// how many were compressed here.
    fn encode_plain_records(&self, progress: &dyn Progress) -> Result<u64> {
        let total = self.entry_count()?;
        let report = total > 10_000;
        if report {
            progress.start(total, "compressing the entries");
        }
        let (mut seen, mut encoded) = (0u64, 0u64);
        for item in self.entries.iter() {
            let (key, value) = item?;
            // A plain record in the pack (packed before the first dictionary) is written
            // into sled compressed; the next compaction packs it so.
            let record = self.store.record(&value)?;
            if !record.starts_with(&ZSTD_MAGIC) {
                let compressed = self.codec.encode(record.into_owned());
                if self
                    .entries
                    .compare_and_swap(&key, Some(&value), Some(compressed))?
                    .is_ok()
                {
                    encoded += 1;
                }
            }
            seen += 1;
            if report && seen.is_multiple_of(10_000) {
                progress.advance(seen);
            }
        }
        if report {
            progress.finish();
        }
        Ok(encoded)
    }
}

/// The JSON of the newest [`TRAINING_SAMPLES`] entries written, which a dictionary is
/// trained on.
fn newest_records(
    store: &Store,
    writes: &sled::Tree,
    entries: &sled::Tree,
    codec: &Codec,
) -> Result<Vec<Vec<u8>>> {
    let mut samples = Vec::with_capacity(TRAINING_SAMPLES);
    for id in super::writes::newest_first(writes).take(TRAINING_SAMPLES) {
        if let Some(value) = entries.get(id?.to_string())? {
            samples.push(codec.decode(&store.record(&value)?)?.into_owned());
        }
    }
    Ok(samples)
}
