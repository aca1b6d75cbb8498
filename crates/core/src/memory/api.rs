//! What the memory takes and gives: typed requests and results.
//!
//! The results serialise to exactly the output fields of spec 003 (plus a few documented
//! extras), so every face emits them as they are: MCP as `structuredContent`, the CLI with
//! `--json`. Their JSON Schema is derived here once and is what MCP declares as
//! `outputSchema` (made flat by `calls::schema`). A field with no value is left out rather
//! than sent as `null` (the spec's output schemas require no field): a flat schema cannot
//! say "a string or null" to every validator.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::records::{EntryType, MemoryType};

/// A new entry, as `rekall_add` and `tandem memory add` take it.
#[derive(Debug, Clone, Default)]
pub struct NewEntry {
    pub entry_type: Option<EntryType>,
    pub title: String,
    pub content: String,
    pub tags: Vec<String>,
    pub context: Option<String>,
    pub project: Option<String>,
    /// 0..=5, default 3.
    pub confidence: Option<i64>,
    pub memory_type: Option<MemoryType>,
    /// Who writes it: a user of a shared server (the HTTP face's token); `None` locally.
    pub author: Option<String>,
}

/// An entry proposed to the memory from outside it (a completed task's decision or issue),
/// as [`crate::memory::Memory::suggest_entries`] takes it: suggested for review, unless the
/// memory already says the same thing.
#[derive(Debug, Clone, Default)]
pub struct NewProposal {
    /// What accepting the suggestion adds, checked as an add checks it.
    pub entry: NewEntry,
    /// Where it comes from, in a line (the suggestion's reason starts with it).
    pub source: String,
    /// What the entry says beyond its subject (a decision's choice and reasoning, an
    /// issue's resolution): an existing entry on the same subject is the same entry only
    /// if it says this too. `None`: the subject is the whole entry.
    pub answer: Option<String>,
}

/// What [`crate::memory::Memory::suggest_entries`] did with each proposal.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProposalsOutcome {
    /// The entry suggestions made, in the order proposed.
    pub suggested: Vec<SuggestedEntry>,
    /// The proposals not suggested, each with why: the memory already has an entry saying
    /// the same thing, or the same entry was suggested before (whatever became of it).
    pub skipped: Vec<SkippedProposal>,
}

/// An entry suggestion just made: `{suggestion_id, type, title}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SuggestedEntry {
    pub suggestion_id: String,
    #[serde(rename = "type")]
    pub entry_type: String,
    pub title: String,
}

/// A proposal that was not suggested, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct SkippedProposal {
    pub title: String,
    pub because: String,
}

/// A search, as `rekall_search` and `tandem memory search` take it.
#[derive(Debug, Clone, Default)]
pub struct SearchQuery {
    pub query: String,
    /// Conversation context: its most distinctive words enrich the query with a lower weight.
    pub context: Option<String>,
    /// 1..=20, default 5.
    pub limit: Option<i64>,
    pub entry_type: Option<EntryType>,
    pub project: Option<String>,
}

/// Which ranking a search uses ([`crate::memory::Memory::search_ranked`]). Agents and
/// editors get [`Ranking::Hybrid`]; the others exist to measure it against its parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ranking {
    /// BM25 over the words only.
    Lexical,
    /// The entries' summary vectors only (cosine to the query's vector).
    Semantic,
    /// Both, fused; BM25 alone while no embedding model is loaded.
    Hybrid,
}

/// [`crate::memory::Memory::overview`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Overview {
    pub total: u64,
    pub by_type: std::collections::BTreeMap<String, u64>,
    pub recent: Vec<OverviewEntry>,
    pub most_used: Vec<OverviewEntry>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OverviewEntry {
    pub id: String,
    #[serde(rename = "type", skip_serializing_if = "String::is_empty", default)]
    pub entry_type: String,
    pub title: String,
    pub access_count: u64,
}

/// `{id, title}` of an entry, where a result names one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EntryRef {
    pub id: String,
    pub title: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SimilarEntry {
    pub id: String,
    pub title: String,
    /// Lexical similarity, 0..1 (tf-idf cosine over title, tags and content).
    pub score: f64,
}

/// The answer to an add.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AddOutcome {
    pub id: String,
    pub title: String,
    #[serde(rename = "type")]
    pub entry_type: String,
    pub created: bool,
    /// Whether the entry's vectors were made (the embedding model was ready); if not, they
    /// are made once it is.
    pub embeddings_calculated: bool,
    pub similar_entries: Vec<SimilarEntry>,
    pub suggestions_created: u32,
    /// True when `context` was over 10,000 characters and only its first 8,000 were kept.
    pub context_truncated: bool,
    /// The tags as stored, after kebab-case normalisation.
    pub tags: Vec<String>,
}

/// One compact search result (progressive disclosure: no full content).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SearchResult {
    pub id: String,
    #[serde(rename = "type")]
    pub entry_type: String,
    pub title: String,
    /// Relevance 0..1.
    pub score: f64,
    /// About 100 characters from the best-matching field.
    pub snippet: String,
    pub tags: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SearchOutcome {
    pub query: String,
    /// How many entries match, of which `results` are the best: exact up to 1,000, past
    /// that an estimate to two significant figures.
    pub total: u64,
    pub results: Vec<SearchResult>,
    /// What to do next.
    pub hint: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EmbeddingsInfo {
    pub summary: bool,
    pub context: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OutgoingLink {
    pub target_id: String,
    pub target_title: String,
    pub relation_type: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct IncomingLink {
    pub source_id: String,
    pub source_title: String,
    pub relation_type: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EntryLinks {
    pub outgoing: Vec<OutgoingLink>,
    pub incoming: Vec<IncomingLink>,
}

/// Everything about one entry: what `rekall_show` returns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EntryDetails {
    pub id: String,
    #[serde(rename = "type")]
    pub entry_type: String,
    pub title: String,
    pub content: String,
    pub tags: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    pub confidence: u8,
    pub status: String,
    pub memory_type: String,
    /// RFC 3339.
    pub created_at: String,
    pub updated_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_accessed: Option<String>,
    pub access_count: u64,
    /// 0..1: how established this entry is (use, links, confidence, recency).
    pub consolidation_score: f64,
    pub embeddings: EmbeddingsInfo,
    pub links: EntryLinks,
    /// The conversation context saved with the entry, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// Who wrote the entry, on a shared server (a token's user); absent for local writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LinkOutcome {
    pub created: bool,
    pub link_id: String,
    pub source: EntryRef,
    pub target: EntryRef,
    pub relation_type: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LinkSuggestionView {
    pub id: String,
    pub entry_a: EntryRef,
    pub entry_b: EntryRef,
    pub score: f64,
    pub reason: String,
    pub created_at: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LinkSuggestions {
    pub suggestions: Vec<LinkSuggestionView>,
    pub total_pending: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GeneralizeSuggestionView {
    pub id: String,
    pub entries: Vec<EntryRef>,
    pub score: f64,
    pub reason: String,
    pub created_at: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GeneralizeSuggestions {
    pub suggestions: Vec<GeneralizeSuggestionView>,
    pub total_pending: u64,
}

/// The entry an entry suggestion proposes, as its review shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProposedEntry {
    #[serde(rename = "type")]
    pub entry_type: String,
    pub title: String,
    pub content: String,
    pub tags: Vec<String>,
    /// Where it was learned: the task, its workflow, the files it changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    pub confidence: u8,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EntrySuggestionView {
    pub id: String,
    /// What accepting it adds.
    pub entry: ProposedEntry,
    /// 0..1: how new it is to the memory (1 − its similarity to the closest entry).
    pub score: f64,
    pub reason: String,
    pub created_at: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EntrySuggestions {
    pub suggestions: Vec<EntrySuggestionView>,
    pub total_pending: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LinkCreated {
    pub source_id: String,
    pub target_id: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AcceptOutcome {
    pub accepted: bool,
    /// `link`, `generalize` or `entry`.
    pub suggestion_type: String,
    pub action_taken: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link_created: Option<LinkCreated>,
    /// For a generalisation: the command that creates the semantic entry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generalize_command: Option<String>,
    /// For an entry suggestion: the entry added, as `rekall_add` answers (its id, its
    /// similar entries, the suggestions it made).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry_created: Option<AddOutcome>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RejectOutcome {
    pub rejected: bool,
    pub suggestion_id: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HelpOutcome {
    pub guide: String,
    pub topics_available: Vec<String>,
}

/// The answer to `tandem memory generalize`: the new semantic entry and its links.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GeneralizeOutcome {
    pub entry: AddOutcome,
    pub derived_from: Vec<EntryRef>,
}

/// The answer to an import.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ImportReport {
    pub entries_added: u64,
    pub entries_updated: u64,
    pub entries_unchanged: u64,
    pub links_added: u64,
    pub links_unchanged: u64,
}

/// The answer to an export.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ExportReport {
    pub entries: u64,
    pub links: u64,
}
