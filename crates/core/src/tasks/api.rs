//! Typed requests and results of the task tracker: what the agent's tools send, and what
//! they answer, whose JSON is spec 004's output.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::model::{
    CompletionMetadata, CompletionStatus, DecisionCategory, FilesChanged, IssueType, Outcome,
    PlanStep, Verification,
};

/// A workflow to start (`start_workflow`).
#[derive(Debug, Clone, Default)]
pub struct NewWorkflow {
    pub name: String,
    pub description: Option<String>,
    pub plan: Vec<PlanStep>,
}

/// A task (or subtask) to start in a workflow (`start_task`).
#[derive(Debug, Clone, Default)]
pub struct NewTask {
    pub workflow_id: String,
    pub parent_task_id: Option<String>,
    pub name: String,
    pub goal: String,
    pub areas: Vec<String>,
    /// Who starts it: a user of a shared server (the HTTP face's token); `None` locally.
    pub author: Option<String>,
}

/// A decision to log on a running task (`log_decision`).
#[derive(Debug, Clone)]
pub struct NewDecision {
    pub task_id: String,
    pub category: DecisionCategory,
    pub question: String,
    pub options_considered: Vec<String>,
    pub chosen: String,
    pub reasoning: String,
    pub trade_offs: Option<String>,
}

/// An issue met and resolved, to log on a running task (`log_issue`).
#[derive(Debug, Clone)]
pub struct NewIssue {
    pub task_id: String,
    pub issue_type: IssueType,
    pub description: String,
    pub resolution: String,
    pub requires_human_review: bool,
}

/// A milestone to log on a running task (`log_milestone`).
#[derive(Debug, Clone)]
pub struct NewMilestone {
    pub task_id: String,
    pub message: String,
    pub progress: Option<f64>,
    pub metadata: Option<Value>,
}

/// A task's completion: its status and outcome (`complete_task`).
#[derive(Debug, Clone)]
pub struct Completion {
    pub task_id: String,
    pub status: CompletionStatus,
    pub outcome: Outcome,
    pub metadata: Option<CompletionMetadata>,
}

/// The answer to starting a workflow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WorkflowStarted {
    pub workflow_id: String,
    pub created_at: String,
}

/// The answer to starting a task: the snapshot it took.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskStarted {
    pub task_id: String,
    pub snapshot_id: String,
    /// `git` or `checksum`.
    pub snapshot_type: String,
    pub started_at: String,
}

/// The answer to logging a decision, an issue or a milestone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Logged {
    pub logged: bool,
    pub id: String,
    pub task_id: String,
    /// How many of this kind the task has now.
    pub count: u64,
    /// Only past the protocol's guidance (3 decisions, 3 issues, 5 milestones): says so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guidance: Option<String>,
}

/// The answer to completing a task: the files changed and their check against the areas.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskCompleted {
    pub task_id: String,
    pub duration_seconds: u64,
    pub files_changed: FilesChanged,
    pub verification: Verification,
}
