//! The task tracker's typed errors, each with the code the tools answer with.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::store::StoreError;

/// Everything a task-tracking operation can fail with. `code()` gives the spec's error
/// code (spec 004, or Tandem's additions), which every face shows as is.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    #[error("Workflow with ID '{id}' not found")]
    WorkflowNotFound { id: String },
    #[error("Task with ID '{id}' not found")]
    TaskNotFound { id: String },
    #[error("Task '{id}' was already completed ({state}) at {completed_at}")]
    TaskAlreadyCompleted {
        id: String,
        state: String,
        completed_at: String,
    },
    #[error("Parent task '{parent}' belongs to workflow '{parent_workflow}', not '{workflow}'")]
    ParentInOtherWorkflow {
        parent: String,
        parent_workflow: String,
        workflow: String,
    },
    #[error("Invalid {field} '{value}'; expected one of: {}", allowed.join(", "))]
    InvalidEnum {
        field: &'static str,
        /// The spec's code for a bad value of this field.
        code: &'static str,
        value: String,
        allowed: Vec<&'static str>,
    },
    #[error("Invalid argument '{field}': {message}")]
    InvalidArgument { field: String, message: String },
    #[error("ID '{prefix}' matches several {what}: {}", candidates.join(", "))]
    AmbiguousId {
        prefix: String,
        what: &'static str,
        candidates: Vec<String>,
    },
    #[error("cannot snapshot {path}: {message}")]
    Snapshot { path: PathBuf, message: String },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("corrupt task record: {0}")]
    Corrupt(String),
}

impl From<sled::Error> for TaskError {
    fn from(e: sled::Error) -> Self {
        TaskError::Store(StoreError::Sled(e))
    }
}

impl TaskError {
    /// `INVALID_ARGUMENT`, naming the field.
    pub(super) fn invalid(field: &str, message: impl Into<String>) -> TaskError {
        TaskError::InvalidArgument {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The error code the tools answer with.
    pub fn code(&self) -> &'static str {
        match self {
            TaskError::WorkflowNotFound { .. } => "WORKFLOW_NOT_FOUND",
            TaskError::TaskNotFound { .. } => "TASK_NOT_FOUND",
            TaskError::TaskAlreadyCompleted { .. } => "TASK_ALREADY_COMPLETED",
            TaskError::ParentInOtherWorkflow { .. } => "PARENT_TASK_MISMATCH",
            TaskError::InvalidEnum { code, .. } => code,
            TaskError::InvalidArgument { .. } => "INVALID_ARGUMENT",
            TaskError::AmbiguousId { .. } => "AMBIGUOUS_ID",
            TaskError::Snapshot { .. } => "SNAPSHOT_FAILED",
            TaskError::Store(_) | TaskError::Corrupt(_) => "INTERNAL_ERROR",
        }
    }

    /// Machine-readable details: the offending values, candidates, allowed values.
    pub fn details(&self) -> Value {
        match self {
            TaskError::WorkflowNotFound { id } | TaskError::TaskNotFound { id } => {
                json!({ "id": id })
            }
            TaskError::TaskAlreadyCompleted {
                id,
                state,
                completed_at,
            } => {
                json!({ "task_id": id, "status": state, "completed_at": completed_at })
            }
            TaskError::ParentInOtherWorkflow {
                parent,
                parent_workflow,
                workflow,
            } => json!({
                "parent_task_id": parent, "parent_workflow_id": parent_workflow, "workflow_id": workflow,
            }),
            TaskError::InvalidEnum {
                field,
                value,
                allowed,
                ..
            } => {
                json!({ "field": field, "value": value, "allowed": allowed })
            }
            TaskError::InvalidArgument { field, .. } => json!({ "field": field }),
            TaskError::AmbiguousId {
                prefix, candidates, ..
            } => {
                json!({ "prefix": prefix, "candidates": candidates })
            }
            TaskError::Snapshot { path, .. } => json!({ "path": path }),
            TaskError::Store(_) | TaskError::Corrupt(_) => json!({}),
        }
    }
}
