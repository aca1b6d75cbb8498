//! The memory's typed errors, each with its spec-003 code.

use serde_json::{Value, json};

use crate::store::StoreError;

/// Everything a memory operation can fail with. `code()` gives the spec's error code, which
/// every face shows as is.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error("Entry with ID '{id}' not found")]
    EntryNotFound { id: String },

    #[error("ID prefix '{prefix}' matches {} entries; use more characters: {}", candidates.len(), candidate_list(candidates))]
    AmbiguousId {
        prefix: String,
        /// `(id, title)` of every entry the prefix matches (at most a handful are listed).
        candidates: Vec<(String, String)>,
    },

    #[error("Suggestion with ID '{id}' not found")]
    SuggestionNotFound { id: String },

    #[error("Suggestion '{id}' was already {status}")]
    SuggestionAlreadyResolved { id: String, status: String },

    #[error(
        "Invalid entry type '{value}'; expected one of: bug, pattern, decision, pitfall, config, reference"
    )]
    InvalidEntryType { value: String },

    #[error(
        "Invalid relation type '{value}'; expected one of: related, supersedes, derived_from, contradicts"
    )]
    InvalidRelationType { value: String },

    #[error("Invalid argument '{field}': {message}")]
    InvalidArgument { field: String, message: String },

    #[error("Link {source_id} -[{relation}]-> {target_id} already exists ({link_id})")]
    LinkAlreadyExists {
        source_id: String,
        target_id: String,
        relation: String,
        link_id: String,
    },

    #[error("Cannot link entry '{id}' to itself")]
    SelfLink { id: String },

    /// No embedding model is configured (`memory.embeddings.model` is `off`).
    #[error(
        "Embeddings are turned off (memory.embeddings.model or TANDEM_EMBEDDING_MODEL is 'off'); set a model to use them"
    )]
    EmbeddingsDisabled,

    /// The configured model cannot be loaded or fetched, or is still loading.
    #[error("Embedding model '{model}' is not available: {reason}")]
    ModelNotAvailable { model: String, reason: String },

    #[error(transparent)]
    Store(#[from] StoreError),

    #[error("search index error: {0}")]
    Index(#[from] tantivy::TantivyError),

    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),

    #[error("corrupt record in the data dir: {0}")]
    Corrupt(String),
}

fn candidate_list(candidates: &[(String, String)]) -> String {
    candidates
        .iter()
        .map(|(id, title)| format!("{id} ({title})"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl From<sled::Error> for MemoryError {
    fn from(e: sled::Error) -> Self {
        MemoryError::Store(StoreError::Sled(e))
    }
}

impl From<crate::codec::CodecError> for MemoryError {
    fn from(e: crate::codec::CodecError) -> Self {
        match e {
            crate::codec::CodecError::Corrupt(why) => {
                MemoryError::Corrupt(format!("an entry's record {why}"))
            }
            crate::codec::CodecError::Sled(e) => e.into(),
        }
    }
}

impl From<crate::pack::PackError> for MemoryError {
    fn from(e: crate::pack::PackError) -> Self {
        MemoryError::Corrupt(format!("an entry's record {e}"))
    }
}

impl From<sled::transaction::TransactionError<MemoryError>> for MemoryError {
    fn from(e: sled::transaction::TransactionError<MemoryError>) -> Self {
        match e {
            sled::transaction::TransactionError::Abort(e) => e,
            sled::transaction::TransactionError::Storage(e) => e.into(),
        }
    }
}

impl MemoryError {
    pub fn invalid_argument(field: impl Into<String>, message: impl Into<String>) -> Self {
        MemoryError::InvalidArgument {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The error code of spec 003, or one of Tandem's additions (`AMBIGUOUS_ID`,
    /// `INVALID_ARGUMENT`, `SUGGESTION_ALREADY_RESOLVED`) where the spec has none.
    pub fn code(&self) -> &'static str {
        match self {
            MemoryError::EntryNotFound { .. } => "ENTRY_NOT_FOUND",
            MemoryError::AmbiguousId { .. } => "AMBIGUOUS_ID",
            MemoryError::SuggestionNotFound { .. } => "SUGGESTION_NOT_FOUND",
            MemoryError::SuggestionAlreadyResolved { .. } => "SUGGESTION_ALREADY_RESOLVED",
            MemoryError::InvalidEntryType { .. } => "INVALID_ENTRY_TYPE",
            MemoryError::InvalidRelationType { .. } => "INVALID_RELATION_TYPE",
            MemoryError::InvalidArgument { .. } => "INVALID_ARGUMENT",
            MemoryError::LinkAlreadyExists { .. } => "LINK_ALREADY_EXISTS",
            MemoryError::SelfLink { .. } => "SELF_LINK_ERROR",
            MemoryError::EmbeddingsDisabled => "EMBEDDINGS_DISABLED",
            MemoryError::ModelNotAvailable { .. } => "MODEL_NOT_AVAILABLE",
            MemoryError::Store(_)
            | MemoryError::Index(_)
            | MemoryError::Io(_)
            | MemoryError::Corrupt(_) => "INTERNAL_ERROR",
        }
    }

    /// Machine-readable details: the offending values, candidates, allowed values.
    pub fn details(&self) -> Value {
        match self {
            MemoryError::EntryNotFound { id } | MemoryError::SelfLink { id } => json!({ "id": id }),
            MemoryError::SuggestionNotFound { id } => json!({ "suggestion_id": id }),
            MemoryError::SuggestionAlreadyResolved { id, status } => {
                json!({ "suggestion_id": id, "status": status })
            }
            MemoryError::AmbiguousId { prefix, candidates } => json!({
                "prefix": prefix,
                "candidates": candidates
                    .iter()
                    .map(|(id, title)| json!({ "id": id, "title": title }))
                    .collect::<Vec<_>>(),
            }),
            MemoryError::InvalidEntryType { value } => json!({
                "value": value,
                "allowed": super::EntryType::names(),
            }),
            MemoryError::InvalidRelationType { value } => json!({
                "value": value,
                "allowed": super::RelationType::names(),
            }),
            MemoryError::InvalidArgument { field, .. } => json!({ "field": field }),
            MemoryError::EmbeddingsDisabled => json!({}),
            MemoryError::ModelNotAvailable { model, reason } => {
                json!({ "model": model, "reason": reason })
            }
            MemoryError::LinkAlreadyExists {
                source_id,
                target_id,
                relation,
                link_id,
            } => json!({
                "source_id": source_id,
                "target_id": target_id,
                "relation_type": relation,
                "link_id": link_id,
            }),
            MemoryError::Store(_)
            | MemoryError::Index(_)
            | MemoryError::Io(_)
            | MemoryError::Corrupt(_) => json!({}),
        }
    }
}
