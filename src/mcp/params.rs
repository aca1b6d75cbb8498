//! The tools' arguments as they arrive on the wire, and their JSON Schemas.
//!
//! Enum-valued arguments are read as strings and parsed by the core, so a typo gets the
//! spec's code (`INVALID_ENTRY_TYPE`, ...) rather than a generic deserialisation error; the
//! schema still lists the allowed values (`schemars(with = ...)`). Integers are read wide
//! and range-checked by the core, for the same reason.

use schemars::JsonSchema;
use serde::Deserialize;

use crate::memory::{EntryType, MemoryType, RelationType};

/// The help topics (schema only).
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum HelpTopic {
    Search,
    Capture,
    Links,
    Citations,
    All,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HelpParams {
    /// Section to return (optional, 'all' by default).
    #[schemars(with = "Option<HelpTopic>", extend("default" = "all"))]
    pub topic: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchParams {
    /// Search terms (keywords or a natural-language question).
    pub query: String,
    /// Conversation context, used to enrich the search.
    pub context: Option<String>,
    /// Maximum number of results.
    #[schemars(range(min = 1, max = 20), extend("default" = 5))]
    pub limit: Option<i64>,
    /// Filter by entry type.
    #[serde(rename = "type")]
    #[schemars(with = "Option<EntryType>")]
    pub entry_type: Option<String>,
    /// Filter by project.
    pub project: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AddParams {
    /// Entry type.
    #[serde(rename = "type")]
    #[schemars(with = "EntryType")]
    pub entry_type: String,
    /// Entry title (max 100 characters).
    #[schemars(length(max = 100))]
    pub title: String,
    /// Detailed content of the entry.
    #[serde(default)]
    pub content: Option<String>,
    /// Kebab-case tags (2-5 recommended).
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    /// Full conversation context (over 10,000 characters, only the first 8,000 are kept).
    pub context: Option<String>,
    /// Associated project name (optional).
    pub project: Option<String>,
    /// Confidence level (0-5).
    #[schemars(range(min = 0, max = 5), extend("default" = 3))]
    pub confidence: Option<i64>,
    /// Memory type.
    #[schemars(with = "Option<MemoryType>", extend("default" = "episodic"))]
    pub memory_type: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShowParams {
    /// Entry ID (full ULID or a prefix of 5+ characters).
    pub id: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SuggestParams {
    /// Maximum number of suggestions.
    #[schemars(range(min = 1, max = 50), extend("default" = 10))]
    pub limit: Option<i64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LinkParams {
    /// Source entry ID.
    pub source_id: String,
    /// Target entry ID.
    pub target_id: String,
    /// Relation type.
    #[schemars(with = "Option<RelationType>", extend("default" = "related"))]
    pub relation_type: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SuggestionParams {
    /// ID of the suggestion.
    pub suggestion_id: String,
}
