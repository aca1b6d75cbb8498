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

/// The sequence number `id` was last written under, read record by record from the
/// newest: for an entry whose own record cannot be read to say it (a damaged pack).
pub(super) fn seq_of(tree: &sled::Tree, id: Ulid) -> Result<Option<u64>> {
    for item in tree.iter().rev() {
        let (key, record) = item?;
        if let Some((seq, _)) = ids(&key, &record)?.into_iter().find(|(_, i)| *i == id) {
            return Ok(Some(seq));
        }
    }
    Ok(None)
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

    fn put_all(tree: &sled::Tree, writes: &[(u64, Ulid, Option<u64>)]) {
        tree.transaction(|tx| {
            for &(seq, id, replaced) in writes {
                put(tx, seq, id, replaced)?;
            }
            Ok::<_, sled::transaction::ConflictableTransactionError<()>>(())
        })
        .unwrap();
    }

    /// A replaced version's slot is emptied, in the transaction that writes the new one
    /// (in the same record or another): the entry is listed once, where it was written
    /// last, and the writes after a seq are those after it.
    #[test]
    fn an_entry_written_again_is_listed_once_where_it_was_written_last() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let tree = db.open_tree(TREE).unwrap();
        let ids: Vec<Ulid> = (0..70).map(|i| Ulid::from_parts(i, 7)).collect();
        put_all(
            &tree,
            &ids.iter()
                .enumerate()
                .map(|(i, id)| (i as u64 + 1, *id, None))
                .collect::<Vec<_>>(),
        );
        // The 3rd written again as the 71st (another record), the 65th as the 72nd (the
        // same record).
        put_all(&tree, &[(71, ids[2], Some(3)), (72, ids[64], Some(65))]);
        let newest: Vec<Ulid> = newest_first(&tree).map(Result::unwrap).collect();
        assert_eq!(newest.len(), 70);
        assert_eq!(&newest[..3], &[ids[64], ids[2], ids[69]]);
        assert_eq!(newest.iter().filter(|id| **id == ids[2]).count(), 1);
        assert_eq!(
            after(&tree, 68).unwrap(),
            [ids[68], ids[69], ids[2], ids[64]]
        );
        assert_eq!(after(&tree, 72).unwrap(), []);
        assert_eq!(seq_of(&tree, ids[2]).unwrap(), Some(71));
        assert_eq!(seq_of(&tree, ids[5]).unwrap(), Some(6));
        assert_eq!(seq_of(&tree, Ulid::from_parts(1, 1)).unwrap(), None);
    }

    /// Format 3's `memory.by_seq` (a record a write, the id as text) becomes this tree and
    /// is dropped; a conversion cut short (a part of the tree written, `memory.by_seq`
    /// still there) is done again from the start and gives the same tree.
    #[test]
    fn by_seq_is_converted_and_a_conversion_cut_short_is_done_again() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let by_seq = db.open_tree(BY_SEQ).unwrap();
        let ids: Vec<Ulid> = (0..100).map(|i| Ulid::from_parts(i, 9)).collect();
        // seq 5 was replaced by seq 101: format 3 removed its key.
        for (i, id) in ids.iter().enumerate() {
            if i != 4 {
                by_seq
                    .insert((i as u64 + 1).to_be_bytes(), id.to_string().as_bytes())
                    .unwrap();
            }
        }
        by_seq
            .insert(101u64.to_be_bytes(), ids[4].to_string().as_bytes())
            .unwrap();
        // A conversion cut short: the first record written, with one slot of it only.
        let tree = db.open_tree(TREE).unwrap();
        tree.insert(key(1), with_slot(None, 1, Some(ids[0])))
            .unwrap();

        convert_by_seq(&db).unwrap();
        assert!(!db.tree_names().iter().any(|n| n == BY_SEQ.as_bytes()));
        let mut expected: Vec<Ulid> = ids
            .iter()
            .rev()
            .filter(|id| **id != ids[4])
            .copied()
            .collect();
        expected.insert(0, ids[4]);
        let newest: Vec<Ulid> = newest_first(&tree).map(Result::unwrap).collect();
        assert_eq!(newest, expected);
        // Nothing left to convert.
        convert_by_seq(&db).unwrap();
        assert_eq!(newest_first(&tree).count(), 100);
    }
}
