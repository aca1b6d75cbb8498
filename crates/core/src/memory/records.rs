//! The memory's data: entries, links and suggestions as they are stored in sled.
//!
//! These are plain data. Their serde form is the storage format (JSON in sled) and, for the
//! enums, the spelling of the spec-003 contract.

use std::fmt;
use std::str::FromStr;

use jiff::Timestamp;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tandem_search::{AsDocument, Document, Kind, Kinds};
use ulid::Ulid;

use super::error::MemoryError;

/// The longest title an entry may have, in characters (spec 003).
pub const MAX_TITLE_CHARS: usize = 100;
/// A `context` longer than this many characters is cut (spec 003)...
pub const CONTEXT_LIMIT_CHARS: usize = 10_000;
/// ...to its first this many characters.
pub const CONTEXT_TRUNCATED_CHARS: usize = 8_000;
pub use crate::store::MIN_ID_PREFIX;

macro_rules! string_enum {
    (
        $(#[$meta:meta])*
        $name:ident, $err:expr, { $($variant:ident => $text:literal),+ $(,)? }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
        #[serde(rename_all = "snake_case")]
        pub enum $name {
            $($variant),+
        }

        impl $name {
            /// Every value, in the order the spec lists them.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            /// Their spellings, in the same order.
            pub const NAMES: &'static [&'static str] = &[$($text),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }

            /// The spellings, for error messages and help.
            pub fn names() -> Vec<&'static str> {
                Self::ALL.iter().map(|v| v.as_str()).collect()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = MemoryError;

            fn from_str(s: &str) -> Result<Self, MemoryError> {
                let wanted = s.trim().to_ascii_lowercase();
                Self::ALL
                    .iter()
                    .copied()
                    .find(|v| v.as_str() == wanted)
                    .ok_or_else(|| $err(s.to_string()))
            }
        }
    };
}

string_enum!(
    /// What kind of knowledge an entry holds.
    EntryType,
    |value| MemoryError::InvalidEntryType { value },
    {
        Bug => "bug",
        Pattern => "pattern",
        Decision => "decision",
        Pitfall => "pitfall",
        Config => "config",
        Reference => "reference",
    }
);

string_enum!(
    /// Episodic: one occurrence, as it happened. Semantic: a generalised, reusable fact.
    MemoryType,
    |value| MemoryError::invalid_argument("memory_type", format!("unknown memory_type '{value}'; expected one of: episodic, semantic")),
    {
        Episodic => "episodic",
        Semantic => "semantic",
    }
);

string_enum!(
    /// How a link's source relates to its target.
    RelationType,
    |value| MemoryError::InvalidRelationType { value },
    {
        Related => "related",
        Supersedes => "supersedes",
        DerivedFrom => "derived_from",
        Contradicts => "contradicts",
    }
);

string_enum!(
    /// An entry's lifecycle state. An entry becomes `superseded` when another entry links
    /// to it with `supersedes`.
    EntryStatus,
    |value| MemoryError::invalid_argument("status", format!("unknown status '{value}'")),
    {
        Active => "active",
        Superseded => "superseded",
    }
);

string_enum!(
    /// What accepting a suggestion does: create a link, generalise a group of entries, or
    /// add the entry it proposes (learned from a completed task).
    SuggestionKind,
    |value| MemoryError::invalid_argument("kind", format!("unknown suggestion kind '{value}'; expected link, generalize or entry")),
    {
        Link => "link",
        Generalize => "generalize",
        Entry => "entry",
    }
);

string_enum!(
    /// Where a suggestion is in its life. Rejected ones are kept so they never come back.
    SuggestionStatus,
    |value| MemoryError::invalid_argument("status", format!("unknown suggestion status '{value}'")),
    {
        Pending => "pending",
        Accepted => "accepted",
        Rejected => "rejected",
        Superseded => "superseded",
    }
);

/// A byte for each value of the suggestions' enums, as their records and indexes store
/// them: the first letter of its name, which no two values of one enum share.
macro_rules! tagged {
    ($($name:ident),+) => {$(
        impl $name {
            pub fn tag(self) -> u8 {
                self.as_str().as_bytes()[0]
            }

            pub fn from_tag(tag: u8) -> Option<$name> {
                Self::ALL.iter().copied().find(|v| v.tag() == tag)
            }
        }
    )+};
}
tagged!(SuggestionKind, SuggestionStatus);

/// One knowledge-base entry, exactly as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub id: Ulid,
    #[serde(rename = "type")]
    pub entry_type: EntryType,
    pub title: String,
    #[serde(default)]
    pub content: String,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    pub confidence: u8,
    pub memory_type: MemoryType,
    pub status: EntryStatus,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    #[serde(default)]
    pub last_accessed: Option<Timestamp>,
    #[serde(default)]
    pub access_count: u64,
    /// The write sequence number of the last change to an indexed field. The search index
    /// records the highest one it holds, which is how a stale index is detected.
    #[serde(default)]
    pub seq: u64,
    /// Who wrote it: a token's user on a shared server (the HTTP face); absent for local
    /// writes and in entries made before authors were kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
}

/// The entry types as the search engine's kinds. The indexes store a kind by its name or
/// its place among these, so the order of [`EntryType::ALL`] is part of the on-disk format.
pub const ENTRY_KINDS: Kinds = Kinds(EntryType::NAMES);

impl EntryType {
    pub fn kind(self) -> Kind {
        Kind(self as u8)
    }

    /// The entry type of a kind the engine read back (the first for one it does not
    /// know, as the vector base always read it).
    pub fn of_kind(kind: Kind) -> EntryType {
        EntryType::ALL
            .get(usize::from(kind.0))
            .copied()
            .unwrap_or(EntryType::ALL[0])
    }
}

/// An entry as the search engine indexes it: the content is the document's body and the
/// project its group.
impl AsDocument for Entry {
    fn as_document(&self) -> Document<'_> {
        Document {
            id: self.id,
            seq: self.seq,
            kind: self.entry_type.kind(),
            group: self.project.as_deref(),
            title: &self.title,
            tags: &self.tags,
            body: &self.content,
            context: self.context.as_deref(),
        }
    }
}

impl Entry {
    /// An active, episodic entry of confidence 3 written now, with a new id and no context,
    /// project or use yet: what validation, imports and tests start from.
    pub fn new(
        entry_type: EntryType,
        title: impl Into<String>,
        content: impl Into<String>,
        tags: Vec<String>,
    ) -> Entry {
        let now = Timestamp::now();
        Entry {
            id: Ulid::new(),
            entry_type,
            title: title.into(),
            content: content.into(),
            tags,
            context: None,
            project: None,
            confidence: 3,
            memory_type: MemoryType::Episodic,
            status: EntryStatus::Active,
            created_at: now,
            updated_at: now,
            last_accessed: None,
            access_count: 0,
            seq: 0,
            author: None,
        }
    }
}

/// A directed, typed link between two entries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Link {
    pub id: Ulid,
    pub source: Ulid,
    pub target: Ulid,
    pub relation: RelationType,
    pub created_at: Timestamp,
}

/// A pending (or resolved) proposal: computed when an entry is added (a link, a
/// generalisation), or when a task completes (an entry).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Suggestion {
    pub id: Ulid,
    pub kind: SuggestionKind,
    /// Two entries for a link suggestion (new entry first), three or more for a
    /// generalisation; none for an entry suggestion until it is accepted, then the entry
    /// it made.
    pub entries: Vec<Ulid>,
    pub score: f32,
    /// Why, in a line: stored for an entry suggestion (and for every suggestion format 4
    /// wrote); empty for a link or a generalisation made since, whose reason is said when
    /// it is shown, from what its entries share then (`suggestions::reason`).
    pub reason: String,
    /// A link found by meaning (the model's vectors), not by words.
    #[serde(default)]
    pub by_meaning: bool,
    pub status: SuggestionStatus,
    pub created_at: Timestamp,
    #[serde(default)]
    pub resolved_at: Option<Timestamp>,
    /// The entry an `entry` suggestion proposes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proposal: Option<Proposal>,
}

impl Suggestion {
    /// The key this suggestion is remembered by in `memory.suggestion_keys`, so that it is
    /// never suggested again: an entry suggestion's proposal's ([`Proposal::key`]). A link
    /// or a generalisation needs none: each names the entry whose add made it, and an
    /// entry is added once.
    pub fn remembered_key(&self) -> Option<Vec<u8>> {
        match (&self.kind, &self.proposal) {
            (SuggestionKind::Entry, Some(p)) => Some(p.key()),
            _ => None,
        }
    }

    /// The suggestion as `memory.suggestions` stores it: [`RECORD_VERSION`], the id, the
    /// kind's and the status's tags, whether it is by meaning (a byte), the score, when it
    /// was made (seconds and nanoseconds) and resolved (a byte saying whether), the entries
    /// (a count, then 16 bytes each), the reason and the proposal (JSON), each after its
    /// length; numbers big-endian. Format 4 stored JSON, ~2.5 times the size.
    pub fn to_record(&self) -> Vec<u8> {
        fn time(out: &mut Vec<u8>, t: &Timestamp) {
            out.extend_from_slice(&t.as_second().to_be_bytes());
            out.extend_from_slice(&t.subsec_nanosecond().to_be_bytes());
        }
        fn bytes(out: &mut Vec<u8>, b: &[u8]) {
            out.extend_from_slice(&(b.len() as u32).to_be_bytes());
            out.extend_from_slice(b);
        }
        let mut out = Vec::with_capacity(64 + 16 * self.entries.len() + self.reason.len());
        out.push(RECORD_VERSION);
        out.extend_from_slice(&self.id.to_bytes());
        out.push(self.kind.tag());
        out.push(self.status.tag());
        out.push(u8::from(self.by_meaning));
        out.extend_from_slice(&self.score.to_be_bytes());
        time(&mut out, &self.created_at);
        out.push(u8::from(self.resolved_at.is_some()));
        if let Some(t) = &self.resolved_at {
            time(&mut out, t);
        }
        out.extend_from_slice(&(self.entries.len() as u32).to_be_bytes());
        for id in &self.entries {
            out.extend_from_slice(&id.to_bytes());
        }
        bytes(&mut out, self.reason.as_bytes());
        let proposal = self
            .proposal
            .as_ref()
            .map(|p| serde_json::to_vec(p).expect("a proposal serialises"));
        bytes(&mut out, proposal.as_deref().unwrap_or_default());
        out
    }

    /// The record of a superseded suggestion: [`Suggestion::to_record`]'s without its
    /// entries, reason and proposal. Nothing reads them again (it is never listed, nor
    /// weighed by an add); accepting or rejecting it reads its status, and its key stays
    /// in `memory.suggestion_keys`. The same format, so an older binary of this format
    /// reads it too.
    pub fn superseded_record(&self) -> Vec<u8> {
        Suggestion {
            entries: Vec::new(),
            reason: String::new(),
            proposal: None,
            ..self.clone()
        }
        .to_record()
    }

    /// A record of `memory.suggestions`: [`Suggestion::to_record`]'s, or format 4's JSON.
    /// `None` when it is neither.
    pub fn from_record(record: &[u8]) -> Option<Suggestion> {
        if record.first() == Some(&b'{') {
            return serde_json::from_slice(record).ok();
        }
        let mut r = Reader(record.strip_prefix(&[RECORD_VERSION])?);
        let id = Ulid::from_bytes(r.array()?);
        let kind = SuggestionKind::from_tag(r.byte()?)?;
        let status = SuggestionStatus::from_tag(r.byte()?)?;
        let by_meaning = r.flag()?;
        let score = f32::from_be_bytes(r.array()?);
        let created_at = r.time()?;
        let resolved_at = match r.flag()? {
            false => None,
            true => Some(r.time()?),
        };
        let count = u32::from_be_bytes(r.array()?) as usize;
        let entries = (0..count)
            .map(|_| Some(Ulid::from_bytes(r.array()?)))
            .collect::<Option<Vec<_>>>()?;
        let reason = String::from_utf8(r.bytes()?.to_vec()).ok()?;
        let proposal = match r.bytes()? {
            [] => None,
            json => Some(serde_json::from_slice(json).ok()?),
        };
        r.0.is_empty().then_some(Suggestion {
            id,
            kind,
            entries,
            score,
            reason,
            by_meaning,
            status,
            created_at,
            resolved_at,
            proposal,
        })
    }
}

/// The first byte of a suggestion's record ([`Suggestion::to_record`]); format 4's JSON
/// starts with `{`.
const RECORD_VERSION: u8 = 1;

/// What is left of a record to read.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(head)
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }

    fn byte(&mut self) -> Option<u8> {
        Some(self.array::<1>()?[0])
    }

    /// A byte [`Suggestion::to_record`] writes as `u8::from(bool)`: anything else is
    /// corrupt.
    fn flag(&mut self) -> Option<bool> {
        match self.byte()? {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }

    fn bytes(&mut self) -> Option<&'a [u8]> {
        let len = u32::from_be_bytes(self.array()?) as usize;
        self.take(len)
    }

    fn time(&mut self) -> Option<Timestamp> {
        let seconds = i64::from_be_bytes(self.array()?);
        let nanos = i32::from_be_bytes(self.array()?);
        Timestamp::new(seconds, nanos).ok()
    }
}

/// The entry an `entry` suggestion proposes, validated and normalised as an add would
/// (tags in kebab-case, the context cut): accepting it adds exactly this.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Proposal {
    #[serde(rename = "type")]
    pub entry_type: EntryType,
    pub title: String,
    #[serde(default)]
    pub content: String,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    pub confidence: u8,
}

impl Proposal {
    /// What the proposal says, independent of where it came from: its type, title and
    /// content, lower-cased with runs of whitespace as one space, hashed. The same
    /// decision logged by two tasks has one key (their contexts differ), so it is
    /// suggested once.
    /// The key is the entry kind's tag, then the hash (16 bytes).
    pub fn key(&self) -> Vec<u8> {
        let said = format!(
            "{}\n{}\n{}",
            self.entry_type,
            fold_text(&self.title),
            fold_text(&self.content)
        );
        let mut key = vec![SuggestionKind::Entry.tag()];
        key.extend_from_slice(&xxhash_rust::xxh3::xxh3_128(said.as_bytes()).to_be_bytes());
        key
    }
}

/// Lower case, with every run of whitespace one space.
fn fold_text(text: &str) -> String {
    text.split_whitespace()
        .map(str::to_lowercase)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Normalises one tag to kebab-case: lowercase ASCII letters and digits joined by single
/// dashes. Returns `None` when nothing is left.
pub fn normalize_tag(tag: &str) -> Option<String> {
    let mut out = String::with_capacity(tag.len());
    let mut dash = false;
    for c in tag.trim().chars() {
        let c = fold_char(c);
        if c.is_ascii_alphanumeric() {
            if dash && !out.is_empty() {
                out.push('-');
            }
            dash = false;
            out.push(c.to_ascii_lowercase());
        } else {
            // Separators, punctuation and anything else become one dash.
            dash = true;
        }
    }
    (!out.is_empty()).then_some(out)
}

/// Normalises a tag list: kebab-case, empty ones dropped, duplicates removed, order kept.
pub fn normalize_tags<S: AsRef<str>>(tags: &[S]) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(tags.len());
    for tag in tags {
        if let Some(t) = normalize_tag(tag.as_ref())
            && !out.contains(&t)
        {
            out.push(t);
        }
    }
    out
}

/// Folds the common accented Latin letters to ASCII so `sécurité` tags as `securite`.
fn fold_char(c: char) -> char {
    match c {
        'à' | 'á' | 'â' | 'ã' | 'ä' | 'å' | 'À' | 'Á' | 'Â' | 'Ã' | 'Ä' | 'Å' => 'a',
        'ç' | 'Ç' => 'c',
        'è' | 'é' | 'ê' | 'ë' | 'È' | 'É' | 'Ê' | 'Ë' => 'e',
        'ì' | 'í' | 'î' | 'ï' | 'Ì' | 'Í' | 'Î' | 'Ï' => 'i',
        'ñ' | 'Ñ' => 'n',
        'ò' | 'ó' | 'ô' | 'õ' | 'ö' | 'Ò' | 'Ó' | 'Ô' | 'Õ' | 'Ö' => 'o',
        'ù' | 'ú' | 'û' | 'ü' | 'Ù' | 'Ú' | 'Û' | 'Ü' => 'u',
        'ý' | 'ÿ' | 'Ý' => 'y',
        other => other,
    }
}

/// Cuts `context` as spec 003 says: over 10,000 characters, keep the first 8,000.
/// Returns the text to store and whether it was cut.
pub fn limit_context(context: String) -> (String, bool) {
    if context.chars().count() <= CONTEXT_LIMIT_CHARS {
        return (context, false);
    }
    let cut: String = context.chars().take(CONTEXT_TRUNCATED_CHARS).collect();
    (cut, true)
}

/// An id as typed by a user: a full ULID or a prefix, normalised to the canonical
/// Crockford alphabet (upper case; `I`/`L` read as `1`, `O` as `0`).
pub fn normalize_id_input(input: &str) -> String {
    input
        .trim()
        .chars()
        .map(|c| match c.to_ascii_uppercase() {
            'I' | 'L' => '1',
            'O' => '0',
            other => other,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_suggestion_record_reads_back_as_written_and_format_4_json_still_reads() {
        let at = |s: &str| s.parse::<Timestamp>().unwrap();
        let ids: Vec<Ulid> = (0..10).map(|_| Ulid::new()).collect();
        let link = Suggestion {
            id: Ulid::new(),
            kind: SuggestionKind::Link,
            entries: ids[..2].to_vec(),
            score: 0.4321,
            reason: String::new(),
            by_meaning: true,
            status: SuggestionStatus::Pending,
            created_at: at("2026-11-27T13:07:24.817123456Z"),
            resolved_at: None,
            proposal: None,
        };
        let group = Suggestion {
            kind: SuggestionKind::Generalize,
            entries: ids.clone(),
            status: SuggestionStatus::Superseded,
            resolved_at: Some(at("2026-11-28T01:02:03Z")),
            reason: "10 similar bug entries (mean similarity 0.61) share: é, ß".into(),
            ..link.clone()
        };
        let entry = Suggestion {
            kind: SuggestionKind::Entry,
            entries: Vec::new(),
            status: SuggestionStatus::Rejected,
            proposal: Some(Proposal {
                entry_type: EntryType::Decision,
                title: "Keep the count in the index".into(),
                content: "So a listing reads a page.".into(),
                tags: vec!["sled".into()],
                context: None,
                project: Some("tandem".into()),
                confidence: 4,
            }),
            ..link.clone()
        };
        for s in [&link, &group, &entry] {
            let record = s.to_record();
            assert_eq!(Suggestion::from_record(&record).as_ref(), Some(s));
            let json = serde_json::to_vec(s).unwrap();
            assert_eq!(Suggestion::from_record(&json).as_ref(), Some(s));
            assert!(
                record.len() * 3 < json.len() * 2,
                "{} vs {}",
                record.len(),
                json.len()
            );
            // Cut short, or with a byte too many: not a record.
            assert_eq!(Suggestion::from_record(&record[..record.len() - 1]), None);
            assert_eq!(Suggestion::from_record(&[&record[..], &[0]].concat()), None);
            // Its two flags (by meaning, resolved) are a byte each, 0 or 1.
            for at in [19, 36] {
                let mut bad = record.clone();
                bad[at] = 2;
                assert_eq!(Suggestion::from_record(&bad), None, "flag at {at}");
            }
        }
    }

    #[test]
    fn tags_are_kebab_case() {
        let cases: &[(&str, Option<&str>)] = &[
            ("CORS", Some("cors")),
            ("  Safari iOS ", Some("safari-ios")),
            ("snake_case_tag", Some("snake-case-tag")),
            ("--Already-Kebab--", Some("already-kebab")),
            ("sécurité", Some("securite")),
            ("C++", Some("c")),
            ("???", None),
            ("", None),
        ];
        for (input, want) in cases {
            assert_eq!(normalize_tag(input).as_deref(), *want, "tag {input:?}");
        }
        assert_eq!(
            normalize_tags(&["Auth", "auth", " AUTH ", "api"]),
            ["auth", "api"]
        );
    }

    #[test]
    fn enums_parse_case_insensitively_and_reject_typos() {
        assert_eq!("Bug".parse::<EntryType>().unwrap(), EntryType::Bug);
        assert_eq!(
            "derived_from".parse::<RelationType>().unwrap(),
            RelationType::DerivedFrom
        );
        assert!(matches!(
            "bugg".parse::<EntryType>(),
            Err(MemoryError::InvalidEntryType { .. })
        ));
        assert!(matches!(
            "parent".parse::<RelationType>(),
            Err(MemoryError::InvalidRelationType { .. })
        ));
    }

    #[test]
    fn context_is_cut_over_the_limit_only() {
        let exact = "x".repeat(CONTEXT_LIMIT_CHARS);
        assert_eq!(limit_context(exact.clone()), (exact, false));
        let long = "é".repeat(CONTEXT_LIMIT_CHARS + 1);
        let (cut, truncated) = limit_context(long);
        assert!(truncated);
        assert_eq!(cut.chars().count(), CONTEXT_TRUNCATED_CHARS);
    }
}
