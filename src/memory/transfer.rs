//! Export and import (`tandem memory export`/`import`): every entry, then every link, as
//! JSON Lines; an import is checked whole before anything is written.

use std::collections::HashMap;
use std::io::{BufRead, Write};

use ulid::Ulid;

use sled::Transactional;
use sled::transaction::ConflictableTransactionError;

use super::model::{MAX_TITLE_CHARS, normalize_tags};
use super::{
    Entry, ExportReport, ImportReport, Link, META_COUNT, META_SEQ, Memory, MemoryError, Result,
    decode, encode, link_key,
};

impl Memory {
    /// Writes every entry, then every link, as JSON Lines.
    pub fn export(&self, out: &mut dyn Write) -> Result<ExportReport> {
        let mut report = ExportReport::default();
        for entry in self.iter_entries() {
            let line = serde_json::to_string(&Record::Entry(entry?)).expect("plain data");
            writeln!(out, "{line}")?;
            report.entries += 1;
        }
        for item in self.links.iter().values() {
            let link: Link = decode(&item?)?;
            let line = serde_json::to_string(&Record::Link(link)).expect("plain data");
            writeln!(out, "{line}")?;
            report.links += 1;
        }
        out.flush()?;
        Ok(report)
    }

    /// Reads JSON Lines written by [`Self::export`]. The whole input is checked before
    /// anything is written: one bad line imports nothing and names its line number. An
    /// entry that exists is replaced only when the incoming one was updated later.
    pub fn import(&self, input: &mut dyn BufRead) -> Result<ImportReport> {
        let mut records = Vec::new();
        for (i, line) in input.lines().enumerate() {
            let line = line?;
            if line.trim().is_empty() {
                continue;
            }
            records.push(parse_line(i + 1, &line)?);
        }
        let mut report = ImportReport::default();
        let mut guard = self.lock_writes();
        guard.clear_entries();
        let mut seq = self.current_seq()?;
        let mut count = self.entry_count()?;
        // What to write, in order; an id met twice in the input is written once.
        let mut writes: Vec<Pending> = Vec::new();
        let mut written: HashMap<Ulid, usize> = HashMap::new();
        for record in &records {
            let Record::Entry(incoming) = record else {
                continue;
            };
            let mut incoming = incoming.clone();
            incoming.tags = normalize_tags(&incoming.tags);
            if let Some(&i) = written.get(&incoming.id) {
                let earlier = &mut writes[i].entry;
                if earlier.updated_at >= incoming.updated_at {
                    report.entries_unchanged += 1;
                } else {
                    report.entries_updated += 1;
                    incoming.seq = earlier.seq;
                    *earlier = incoming;
                }
                continue;
            }
            let existing = self.get(&incoming.id)?;
            match &existing {
                Some(old) if old.updated_at >= incoming.updated_at => {
                    report.entries_unchanged += 1;
                    continue;
                }
                Some(_) => report.entries_updated += 1,
                None => {
                    report.entries_added += 1;
                    count += 1;
                }
            }
            seq += 1;
            incoming.seq = seq;
            written.insert(incoming.id, writes.len());
            writes.push(Pending {
                entry: incoming,
                replaces_seq: existing.map(|o| o.seq),
                count,
            });
        }
        // The vectors of replaced entries go first: none outlives the text it was made of.
        let replaced: Vec<Ulid> = writes
            .iter()
            .filter(|w| w.replaces_seq.is_some())
            .map(|w| w.entry.id)
            .collect();
        self.semantic.forget(&replaced)?;
        for chunk in writes.chunks(IMPORT_CHUNK) {
            let encoded: Vec<(String, Vec<u8>)> = chunk
                .iter()
                .map(|w| (w.entry.id.to_string(), encode(&w.entry)))
                .collect();
            let last = chunk.last().expect("chunks are not empty");
            (&self.entries, &self.by_seq, &self.meta).transaction(|(entries, by_seq, meta)| {
                for (w, (id, value)) in chunk.iter().zip(&encoded) {
                    if let Some(old) = w.replaces_seq {
                        by_seq.remove(&old.to_be_bytes())?;
                    }
                    entries.insert(id.as_bytes(), value.as_slice())?;
                    by_seq.insert(&w.entry.seq.to_be_bytes(), id.as_bytes())?;
                }
                meta.insert(META_SEQ, &last.entry.seq.to_be_bytes())?;
                meta.insert(META_COUNT, &last.count.to_be_bytes())?;
                Ok::<_, ConflictableTransactionError<MemoryError>>(())
            })?;
        }
        let to_index: Vec<Entry> = writes.into_iter().map(|w| w.entry).collect();
        let to_embed: Vec<Ulid> = to_index.iter().map(|e| e.id).collect();
        for record in &records {
            let Record::Link(link) = record else { continue };
            let key = link_key(&link.source, &link.target, link.relation);
            if self.links.contains_key(&key)? {
                report.links_unchanged += 1;
                continue;
            }
            let (Some(source), Some(target)) = (self.get(&link.source)?, self.get(&link.target)?)
            else {
                return Err(MemoryError::invalid_argument(
                    "input",
                    format!(
                        "link {} names an entry that is neither stored nor imported",
                        link.id
                    ),
                ));
            };
            self.create_link(&source, &target, link.relation)?;
            report.links_added += 1;
        }
        self.store.flush()?;
        if let Err(e) = self.idx().upsert_batch(&to_index) {
            tracing::error!(
                "indexing the import failed ({e}); it is stored and will be indexed at the next start"
            );
        }
        drop(guard);
        self.embed_later(to_embed)?;
        Ok(report)
    }
}

/// What a line of an import holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImportLine {
    Entry,
    Link,
}

/// Checks line `number` (from 1) of an import as [`Memory::import`] does, writing nothing:
/// what a client that sends a large import in parts checks first, so one bad line still
/// imports nothing.
pub fn check_import_line(number: usize, line: &str) -> Result<ImportLine> {
    Ok(match parse_line(number, line)? {
        Record::Entry(_) => ImportLine::Entry,
        Record::Link(_) => ImportLine::Link,
    })
}

fn parse_line(number: usize, line: &str) -> Result<Record> {
    let bad = |message: String| {
        MemoryError::invalid_argument("input", format!("line {number}: {message}"))
    };
    let value: serde_json::Value = serde_json::from_str(line).map_err(|e| bad(e.to_string()))?;
    crate::limits::check(&value).map_err(|e| bad(format!("field '{}' has {e}", e.field)))?;
    let record: Record = serde_json::from_value(value).map_err(|e| bad(e.to_string()))?;
    if let Record::Entry(e) = &record {
        let n = e.title.chars().count();
        if e.title.trim().is_empty() || n > MAX_TITLE_CHARS || e.confidence > 5 {
            return Err(bad(format!(
                "entry {} has an empty or over-long title or a confidence over 5",
                e.id
            )));
        }
    }
    Ok(record)
}

/// Entries written in one transaction by an import: large enough that a transaction's
/// cost is spread, small enough that its writes are a few MB in memory.
const IMPORT_CHUNK: usize = 2_000;

/// An entry an import writes: the seq of the version it replaces (whose `by_seq` key goes),
/// and the entry count once it is written.
struct Pending {
    entry: Entry,
    replaces_seq: Option<u64>,
    count: u64,
}

/// One line of an export.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(tag = "record", rename_all = "snake_case")]
enum Record {
    Entry(Entry),
    Link(Link),
}
