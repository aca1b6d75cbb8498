//! Export and import (`tandem memory export`/`import`): every entry, then every link, as
//! JSON Lines; an import is checked whole before anything is written.

use std::collections::HashMap;
use std::io::{BufRead, Write};

use ulid::Ulid;

use sled::Transactional;
use sled::transaction::ConflictableTransactionError;

use super::records::{MAX_TITLE_CHARS, normalize_tags};
use super::{
    Entry, ExportReport, ImportReport, Link, META_COUNT, META_SEQ, Memory, MemoryError, Result,
    decode, link_key,
};
use crate::limits::{self, TooLarge};

impl Memory {
    /// Writes every entry, then every link, as JSON Lines.
    pub fn export(&self, out: &mut dyn Write) -> Result<ExportReport> {
        Ok(self.export_page(None, usize::MAX, out)?.0)
    }

    /// Writes at most `max_lines` lines of the export after cursor `after` (`None`: from
    /// the start), and the cursor to go on from, `None` once every line is written. A
    /// client that cannot hold the whole export (a daemon's answer is one JSON line) asks
    /// for it in pages. The pages are not one snapshot: what is written meanwhile may or
    /// may not be in them.
    pub fn export_page(
        &self,
        after: Option<&str>,
        max_lines: usize,
        out: &mut dyn Write,
    ) -> Result<(ExportReport, Option<String>)> {
        let bad = || {
            MemoryError::invalid_argument(
                "after",
                "not a cursor of this export (give back the `next` of the previous page)",
            )
        };
        let (entries_after, links_after) = match after {
            None => (Some(Vec::new()), None),
            Some(cursor) => match cursor.split_once(':') {
                Some((EXPORT_ENTRIES, id)) if Ulid::from_string(id).is_ok() => {
                    (Some(id.as_bytes().to_vec()), None)
                }
                Some((EXPORT_LINKS, key)) if !key.is_empty() => {
                    (None, Some(key.as_bytes().to_vec()))
                }
                _ => return Err(bad()),
            },
        };
        let mut report = ExportReport::default();
        let mut written = 0;
        let mut write = |out: &mut dyn Write, record: &ExportLine| -> Result<bool> {
            if written == max_lines {
                return Ok(false);
            }
            let text = serde_json::to_string(record).expect("plain data");
            writeln!(out, "{text}")?;
            written += 1;
            Ok(true)
        };
        // Each tree from just after its cursor's key; a full page's cursor is the key of
        // its last line.
        let after_key = |from: &[u8]| {
            let mut start = from.to_vec();
            if !start.is_empty() {
                start.push(0);
            }
            start
        };
        let cursor = |tree: &str, key: &[u8]| format!("{tree}:{}", String::from_utf8_lossy(key));
        // The cursor of the last line written (none yet: the one given).
        let mut next = after.map(str::to_string);
        if let Some(from) = entries_after {
            for item in self.entries.range(after_key(&from)..) {
                let (key, value) = item?;
                if !write(out, &ExportLine::Entry(self.decode_entry(&value)?))? {
                    out.flush()?;
                    return Ok((report, next));
                }
                report.entries += 1;
                next = Some(cursor(EXPORT_ENTRIES, &key));
            }
        }
        let from = links_after.unwrap_or_default();
        for item in self.links.range(after_key(&from)..) {
            let (key, value) = item?;
            if !write(out, &ExportLine::Link(decode(&value)?))? {
                out.flush()?;
                return Ok((report, next));
            }
            report.links += 1;
            next = Some(cursor(EXPORT_LINKS, &key));
        }
        out.flush()?;
        Ok((report, None))
    }

    /// Reads JSON Lines written by [`Self::export`]. The whole input is checked before
    /// anything is written: one bad line imports nothing and names its line number. An
    /// entry that exists is replaced only when the incoming one was updated later, or when
    /// its stored record cannot be read (an export is the repair of a damaged record).
    pub fn import(&self, input: &mut dyn BufRead) -> Result<ImportReport> {
        self.import_part(input, ImportPart::Last)
    }

    /// [`Self::import`] of one part of a larger import. A part that more follow is durable
    /// in sled like any, but its entries are left in the search index's writer: the index
    /// commits them with the last part (or when no part followed within 5 s, or a search
    /// asks), and its segments are merged once, then, where merging after each part wrote
    /// the whole index again each time.
    pub fn import_part(&self, input: &mut dyn BufRead, part: ImportPart) -> Result<ImportReport> {
        let (entries, links) = read_import(input)?;
        let mut report = ImportReport::default();
        let mut guard = self.lock_writes();
        guard.clear_entries();
        let (writes, count) = self.plan_import(entries, &mut report)?;
        let incoming: Vec<&Entry> = writes.iter().map(|w| &w.entry).collect();
        self.train_dictionary_for_import(&incoming, count)?;
        // The vectors of replaced entries go first: none outlives the text it was made of.
        let replaced: Vec<Ulid> = writes
            .iter()
            .filter(|w| w.replaces_seq.is_some())
            .map(|w| w.entry.id)
            .collect();
        self.semantic.forget(&replaced)?;
        let index_failed = self.write_import(&writes)?;
        let to_embed: Vec<Ulid> = writes.iter().map(|w| w.entry.id).collect();
        self.import_links(&links, &mut report)?;
        self.store.flush()?;
        self.commit_import_index(part, index_failed);
        self.train_dictionary_when_due(count, &super::NoProgress)?;
        drop(guard);
        // A large import leaves several segments (the writer cuts one each time its buffer
        // fills, and each commit one); a search opens each apart. Once its last part is
        // in, the smaller ones are merged, while writes go on, as when writes pause.
        if part == ImportPart::Last
            && let Err(e) = self.idx().merge_segments()
        {
            tracing::warn!("merging the search index after the import failed: {e}");
        }
        self.embed_later(to_embed)?;
        Ok(report)
    }

    /// What an import writes, in order, and the entry count after it; an id met twice in
    /// the input is written once. Counts the entries added, updated and left unchanged
    /// into `report`. Called with the write lock held.
    fn plan_import(
        &self,
        entries: Vec<Entry>,
        report: &mut ImportReport,
    ) -> Result<(Vec<Pending>, u64)> {
        let mut seq = self.current_seq()?;
        let mut count = self.entry_count()?;
        let mut writes: Vec<Pending> = Vec::new();
        let mut written: HashMap<Ulid, usize> = HashMap::new();
        for mut incoming in entries {
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
            let replaces_seq = match self.get(&incoming.id) {
                Ok(Some(old)) if old.updated_at >= incoming.updated_at => {
                    report.entries_unchanged += 1;
                    continue;
                }
                Ok(Some(old)) => Some(old.seq),
                Ok(None) => None,
                // A stored record that cannot be read (a damaged pack, a bad frame) is
                // replaced whatever its time: the import is how it is repaired.
                Err(MemoryError::Corrupt(why)) => {
                    tracing::warn!(
                        "entry {} could not be read ({why}); the import replaces it",
                        incoming.id
                    );
                    Some(self.stored_seq(incoming.id)?)
                }
                Err(e) => return Err(e),
            };
            match replaces_seq {
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
                replaces_seq,
                count,
            });
        }
        Ok((writes, count))
    }

    /// The write sequence number of a stored entry whose record cannot be read.
    fn stored_seq(&self, id: Ulid) -> Result<u64> {
        super::writes::seq_of(&self.writes, id)?.ok_or_else(|| {
            MemoryError::Corrupt(format!(
                "entry {id} is stored but not in {}",
                super::writes::TREE
            ))
        })
    }

    /// Writes the planned entries to sled, durable chunk by chunk, and to the search
    /// index's writer (not committed). Returns the index's error, if any: the entries are
    /// stored all the same, and indexed at the next start.
    fn write_import(&self, writes: &[Pending]) -> Result<Option<tantivy::TantivyError>> {
        let mut index_failed = None;
        // The records of the next chunk are encoded on another thread while sled writes
        // this one's.
        std::thread::scope(|scope| -> Result<()> {
            let (encoded_tx, encoded_rx) = std::sync::mpsc::sync_channel(1);
            scope.spawn(move || {
                for chunk in writes.chunks(IMPORT_CHUNK) {
                    let encoded: Vec<(String, Vec<u8>)> = chunk
                        .iter()
                        .map(|w| (w.entry.id.to_string(), self.encode_entry(&w.entry)))
                        .collect();
                    // The writer gone (it failed) stops the encoding.
                    if encoded_tx.send(encoded).is_err() {
                        break;
                    }
                }
            });
            for (chunk, encoded) in writes.chunks(IMPORT_CHUNK).zip(encoded_rx) {
                let last = chunk.last().expect("chunks are not empty");
                (&self.entries, &self.writes, &self.meta).transaction(
                    |(entries, order, meta)| {
                        for (w, (id, value)) in chunk.iter().zip(&encoded) {
                            entries.insert(id.as_bytes(), value.as_slice())?;
                            super::writes::put(order, w.entry.seq, w.entry.id, w.replaces_seq)?;
                        }
                        meta.insert(META_SEQ, &last.entry.seq.to_be_bytes())?;
                        meta.insert(META_COUNT, &last.count.to_be_bytes())?;
                        Ok::<_, ConflictableTransactionError<MemoryError>>(())
                    },
                )?;
                // Durable, then indexed while the next part is written (committed at the end:
                // the index is never ahead of sled).
                self.store.flush()?;
                if index_failed.is_none() {
                    index_failed = self
                        .idx()
                        .write_batch(chunk.iter().map(|w| (&w.entry, w.replaces_seq.is_some())))
                        .err();
                }
            }
            Ok(())
        })?;
        Ok(index_failed)
    }

    /// Creates the import's links that are not stored yet. A link must name entries that
    /// are stored, or were imported just before it.
    fn import_links(&self, links: &[Link], report: &mut ImportReport) -> Result<()> {
        for link in links {
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
        Ok(())
    }

    /// Commits the import's entries to the search index with its last part; a part that
    /// more follow leaves them in the writer. An index that failed is logged: the entries
    /// are stored, and indexed at the next start.
    fn commit_import_index(&self, part: ImportPart, index_failed: Option<tantivy::TantivyError>) {
        let commit = || match part {
            ImportPart::Last => self.idx().commit().err(),
            ImportPart::More => {
                self.idx().expect_more_writes();
                None
            }
        };
        if let Some(e) = index_failed.map_or_else(commit, Some) {
            tracing::error!(
                "indexing the import failed ({e}); it is stored and will be indexed at the next start"
            );
        }
    }
}

/// The entries and the links of an import's JSON Lines, every line checked.
fn read_import(input: &mut dyn BufRead) -> Result<(Vec<Entry>, Vec<Link>)> {
    let lines: Vec<String> = input.lines().collect::<std::io::Result<_>>()?;
    let mut entries: Vec<Entry> = Vec::new();
    let mut links: Vec<Link> = Vec::new();
    for record in parse_lines(1, &lines, parse_line)?.into_iter().flatten() {
        match record {
            ExportLine::Entry(e) => entries.push(e),
            ExportLine::Link(l) => links.push(l),
        }
    }
    Ok((entries, links))
}

/// Whether more parts of one import follow ([`Memory::import_part`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImportPart {
    More,
    Last,
}

/// What a line of an import holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImportLine {
    Entry,
    Link,
}

/// What line `number` (from 1) of an import holds, checked as [`Memory::import`] does.
fn check_import_line(number: usize, line: &str) -> Result<ImportLine> {
    Ok(match parse_line(number, line)? {
        ExportLine::Entry(_) => ImportLine::Entry,
        ExportLine::Link(_) => ImportLine::Link,
    })
}

/// Checks lines of an import as [`Memory::import`] does, writing nothing, on every core:
/// what a client that sends a large import in parts checks first, so one bad line still
/// imports nothing. `lines[0]` is line `first`; `None` for a blank line; the error of the
/// first bad line.
pub fn check_import_lines(first: usize, lines: &[String]) -> Result<Vec<Option<ImportLine>>> {
    parse_lines(first, lines, check_import_line)
}

/// `parse` of each line not blank (`lines[0]` numbered `first`), on as many threads as
/// there are cores for a large input; the error of the first bad line.
fn parse_lines<T: Send>(
    first: usize,
    lines: &[String],
    parse: impl Fn(usize, &str) -> Result<T> + Sync,
) -> Result<Vec<Option<T>>> {
    let parse = &parse;
    let run = |from: usize, lines: &[String]| -> Result<Vec<Option<T>>> {
        let mut out = Vec::with_capacity(lines.len());
        for (i, line) in lines.iter().enumerate() {
            out.push(if line.trim().is_empty() {
                None
            } else {
                Some(parse(from + i, line)?)
            });
        }
        Ok(out)
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    if threads == 1 || lines.len() < PARALLEL_PARSE_MIN {
        return run(first, lines);
    }
    let per_thread = lines.len().div_ceil(threads);
    // Each part stops at its first bad line; the parts in order, the first error is the
    // first bad line's.
    let parts: Vec<Result<Vec<Option<T>>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = lines
            .chunks(per_thread)
            .enumerate()
            .map(|(i, part)| scope.spawn(move || run(first + i * per_thread, part)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let mut out = Vec::with_capacity(lines.len());
    for part in parts {
        out.extend(part?);
    }
    Ok(out)
}

/// Fewer lines than this are parsed on one thread.
const PARALLEL_PARSE_MIN: usize = 1_000;

fn parse_line(number: usize, line: &str) -> Result<ExportLine> {
    let bad = |message: String| {
        MemoryError::invalid_argument("input", format!("line {number}: {message}"))
    };
    // The tag, then the record typed from the same text (which skips the tag): much quicker
    // than reading it through a `serde_json::Value`, or serde's tagged enum, which buffer
    // the whole line (`benches/scale.rs` times the import).
    #[derive(serde::Deserialize)]
    #[serde(expecting = "a JSON object")]
    struct Tag {
        record: Option<serde_json::Value>,
    }
    let typed = |e: serde_json::Error| bad(e.to_string());
    let tag: Tag = serde_json::from_str(line).map_err(typed)?;
    let record = match tag.record {
        Some(serde_json::Value::String(tag)) if tag == "entry" => {
            let entry: Entry = serde_json::from_str(line).map_err(typed)?;
            check_limits(&entry).map_err(|e| bad(format!("field '{}' has {e}", e.field)))?;
            ExportLine::Entry(entry)
        }
        Some(serde_json::Value::String(tag)) if tag == "link" => {
            ExportLine::Link(serde_json::from_str(line).map_err(typed)?)
        }
        Some(other) => {
            return Err(bad(format!(
                "unknown record {other}, expected \"entry\" or \"link\""
            )));
        }
        None => return Err(bad("missing field `record`".into())),
    };
    if let ExportLine::Entry(e) = &record {
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

/// An entry's texts within their limits ([`crate::limits`]), as in a call: what
/// [`limits::check`](crate::limits::check) finds in the entry's line. A link's fields are
/// all ids, a relation and a time, which its parse bounds.
fn check_limits(entry: &Entry) -> std::result::Result<(), TooLarge> {
    limits::check_text("title", &entry.title)?;
    limits::check_text("content", &entry.content)?;
    limits::check_texts("tags", &entry.tags)?;
    let optional = [
        ("context", &entry.context),
        ("project", &entry.project),
        ("author", &entry.author),
    ];
    for (field, text) in optional {
        if let Some(text) = text {
            limits::check_text(field, text)?;
        }
    }
    Ok(())
}

/// The cursors of a paged export: after this entry, or (every entry written) after this
/// link's key.
const EXPORT_ENTRIES: &str = "entry";
const EXPORT_LINKS: &str = "link";

/// Entries written in one transaction by an import: large enough that a transaction's
/// cost is spread, small enough that its writes are a few MB in memory.
const IMPORT_CHUNK: usize = 2_000;

/// An entry an import writes: the seq of the version it replaces (whose slot in
/// `memory.writes` is emptied),
/// and the entry count once it is written.
struct Pending {
    entry: Entry,
    replaces_seq: Option<u64>,
    count: u64,
}

/// One line of an export.
#[derive(serde::Serialize)]
#[serde(tag = "record", rename_all = "snake_case")]
enum ExportLine {
    Entry(Entry),
    Link(Link),
}
