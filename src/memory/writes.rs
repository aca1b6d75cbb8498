//! The order of the memory's writes (`memory.writes`): the id of each entry written, added
//! or replaced by an import, under its write's sequence number. What reads it: the search
//! index catching up with sled after a crash (the writes after the index's seq), the
//! recent entries, the newest entries a dictionary is trained on, and every id for the
//! embeddings.
//!
//! The ids of [`SLOTS`] consecutive sequence numbers share one record: a bitmap of the
//! slots in use, then 16 bytes (the binary id) a slot up to the last one in use. sled
//! spends ~100 bytes on a record besides its key and value, so a record a write (format 3's
//! `memory.by_seq`) cost ~140 bytes an entry on disk and an insert each; 32 to a record
//! cost ~20 bytes and an insert per 32 imported. A replaced version's slot is emptied.

use sled::transaction::{TransactionalTree, UnabortableTransactionError};
use ulid::Ulid;

use super::{MemoryError, Result};

/// The tree; format 3 kept a record a write in `memory.by_seq` ([`convert_by_seq`]).
pub(super) const TREE: &str = "memory.writes";
const BY_SEQ: &str = "memory.by_seq";

/// Sequence numbers a record holds.
const SLOTS: u64 = 32;
const BITMAP: usize = 4;
const ID: usize = 16;

fn key(seq: u64) -> [u8; 8] {
    (seq / SLOTS).to_be_bytes()
}

/// The record holding `id` under `seq` (`None`: the slot emptied), from the one `old`.
fn with_slot(old: Option<&[u8]>, seq: u64, id: Option<Ulid>) -> Vec<u8> {
    let slot = (seq % SLOTS) as usize;
    let mut record = old.map(<[u8]>::to_vec).unwrap_or_else(|| vec![0; BITMAP]);
    let mut used = u32::from_be_bytes(record[..BITMAP].try_into().expect("four bytes"));
    let at = BITMAP + slot * ID;
    match id {
        Some(id) => {
            if record.len() < at + ID {
                record.resize(at + ID, 0);
            }
            record[at..at + ID].copy_from_slice(&id.to_bytes());
            used |= 1 << slot;
        }
        None => used &= !(1 << slot),
    }
    record[..BITMAP].copy_from_slice(&used.to_be_bytes());
    record
}

/// The ids a record holds, with their sequence numbers, in order.
fn ids(key: &[u8], record: &[u8]) -> Result<Vec<(u64, Ulid)>> {
    let corrupt = || MemoryError::Corrupt(format!("a bad record in {TREE}"));
    let first = u64::from_be_bytes(key.try_into().map_err(|_| corrupt())?) * SLOTS;
    let used = u32::from_be_bytes(
        record
            .get(..BITMAP)
            .ok_or_else(corrupt)?
            .try_into()
            .expect("four bytes"),
    );
    (0..SLOTS as usize)
        .filter(|slot| used & (1 << slot) != 0)
        .map(|slot| {
            let at = BITMAP + slot * ID;
            let bytes: [u8; ID] = record
                .get(at..at + ID)
                .ok_or_else(corrupt)?
                .try_into()
                .expect("sixteen bytes");
            Ok((first + slot as u64, Ulid::from_bytes(bytes)))
        })
        .collect()
}

/// Records, in a transaction, that write `seq` wrote entry `id`; `replaced`, the seq of the
/// version it replaces, if any, is emptied.
pub(super) fn put(
    tree: &TransactionalTree,
    seq: u64,
    id: Ulid,
    replaced: Option<u64>,
) -> std::result::Result<(), UnabortableTransactionError> {
    if let Some(old) = replaced {
        let record = tree.get(key(old))?;
        if let Some(record) = record {
            tree.insert(&key(old), with_slot(Some(&record), old, None))?;
        }
    }
    let record = tree.get(key(seq))?;
    tree.insert(&key(seq), with_slot(record.as_deref(), seq, Some(id)))?;
    Ok(())
}

/// Every id written, newest write first.
pub(super) fn newest_first(tree: &sled::Tree) -> impl Iterator<Item = Result<Ulid>> + '_ {
    tree.iter().rev().flat_map(|item| {
        let ids = item
            .map_err(MemoryError::from)
            .and_then(|(key, record)| ids(&key, &record));
        let ids: Vec<Result<Ulid>> = match ids {
            Ok(ids) => ids.into_iter().rev().map(|(_, id)| Ok(id)).collect(),
            Err(e) => vec![Err(e)],
        };
        ids
    })
}

/// The ids written after write `seq`, oldest first.
pub(super) fn after(tree: &sled::Tree, seq: u64) -> Result<Vec<Ulid>> {
    let mut out = Vec::new();
    for item in tree.range(key(seq + 1)..) {
        let (key, record) = item?;
        out.extend(
            ids(&key, &record)?
                .into_iter()
                .filter(|(s, _)| *s > seq)
                .map(|(_, id)| id),
        );
    }
    Ok(out)
}

/// Moves a format 3 data dir's `memory.by_seq` (a record a write: the seq, then the id as
/// text) into [`TREE`], then drops it. Run again after a crash, it writes the same records.
pub(super) fn convert_by_seq(db: &sled::Db) -> Result<()> {
    if !db.tree_names().iter().any(|n| n == BY_SEQ.as_bytes()) {
        return Ok(());
    }
    let started = std::time::Instant::now();
    let (by_seq, tree) = (db.open_tree(BY_SEQ)?, db.open_tree(TREE)?);
    let mut converted = 0u64;
    let mut batch = sled::Batch::default();
    let mut record: Option<(u64, Vec<u8>)> = None;
    for item in by_seq.iter() {
        let (seq, id) = item?;
        let seq = super::be_u64(&seq);
        let id = super::parse_id_bytes(&id)?;
        let bucket = seq / SLOTS;
        match &mut record {
            Some((b, r)) if *b == bucket => *r = with_slot(Some(r), seq, Some(id)),
            _ => {
                if let Some((b, r)) = record.take() {
                    batch.insert(&b.to_be_bytes(), r);
                }
                record = Some((bucket, with_slot(None, seq, Some(id))));
            }
        }
        converted += 1;
        if converted.is_multiple_of(100_000) {
            tree.apply_batch(std::mem::take(&mut batch))?;
        }
    }
    if let Some((b, r)) = record {
        batch.insert(&b.to_be_bytes(), r);
    }
    tree.apply_batch(batch)?;
    db.flush()?;
    db.drop_tree(BY_SEQ)?;
    db.flush()?;
    tracing::info!(
        "moved the order of {converted} writes into {TREE} in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_holds_the_ids_of_its_slots_and_forgets_an_emptied_one() {
        let (a, b, c) = (Ulid::new(), Ulid::nil(), Ulid::from_parts(1, 2));
        let r = with_slot(None, 64 + 3, Some(a));
        let r = with_slot(Some(&r), 64, Some(b));
        let r = with_slot(Some(&r), 64 + 31, Some(c));
        let key = key(64);
        assert_eq!(ids(&key, &r).unwrap(), [(64, b), (67, a), (95, c)]);
        let r = with_slot(Some(&r), 67, None);
        assert_eq!(ids(&key, &r).unwrap(), [(64, b), (95, c)]);
        assert!(ids(&key, &r[..2]).is_err());
    }
}
