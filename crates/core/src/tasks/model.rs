//! The task tracker's records (spec 004) as stored in sled, and its enums.

use std::collections::BTreeMap;
use std::path::PathBuf;

use jiff::Timestamp;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use ulid::Ulid;

use super::TaskError;

macro_rules! spec_enum {
    ($(#[$m:meta])* $name:ident, $field:literal, $code:literal, { $($v:ident => $t:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
        #[serde(rename_all = "snake_case")]
        pub enum $name { $($v),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$v),+];
            pub fn as_str(self) -> &'static str {
                match self { $($name::$v => $t),+ }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = TaskError;
            fn from_str(s: &str) -> Result<Self, TaskError> {
                let wanted = s.trim().to_ascii_lowercase();
                Self::ALL.iter().copied().find(|v| v.as_str() == wanted).ok_or_else(|| {
                    TaskError::InvalidEnum {
                        field: $field,
                        code: $code,
                        value: s.to_string(),
                        allowed: Self::ALL.iter().map(|v| v.as_str()).collect(),
                    }
                })
            }
        }
    };
}

spec_enum!(
    /// How a task ended (`complete_task.status`).
    CompletionStatus, "status", "INVALID_STATUS", {
        Success => "success",
        PartialSuccess => "partial_success",
        Failed => "failed",
    }
);

spec_enum!(
    /// `log_decision.category`.
    DecisionCategory, "category", "INVALID_CATEGORY", {
        Architecture => "architecture",
        LibraryChoice => "library_choice",
        TradeOff => "trade_off",
        Workaround => "workaround",
        Other => "other",
    }
);

spec_enum!(
    /// `log_issue.type`.
    IssueType, "type", "INVALID_ISSUE_TYPE", {
        DocumentationGap => "documentation_gap",
        BugEncountered => "bug_encountered",
        DependencyConflict => "dependency_conflict",
        UnclearRequirement => "unclear_requirement",
        Other => "other",
    }
);

spec_enum!(
    /// `complete_task.metadata.tests_status`.
    TestsStatus, "tests_status", "INVALID_ARGUMENT", {
        Passed => "passed",
        Failed => "failed",
        NotRun => "not_run",
    }
);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PlanStep {
    pub step: String,
    pub goal: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Workflow {
    pub id: Ulid,
    pub name: String,
    pub description: Option<String>,
    pub plan: Vec<PlanStep>,
    /// The workspace root the workflow was started in.
    pub workspace: PathBuf,
    pub created_at: Timestamp,
}

/// What a task's changes are measured against.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Snapshot {
    /// HEAD's commit at start; `None` in a repository with no commit yet.
    Git {
        repo_root: PathBuf,
        commit: Option<String>,
        /// The branch HEAD pointed to, or `None` when detached or unborn.
        branch: Option<String>,
    },
    /// A checksum of every file (outside git). The map itself is stored apart.
    Checksum {
        root: PathBuf,
        files: usize,
        digest: String,
    },
}

impl Snapshot {
    /// The `snapshot_id` of the spec: the commit id, or the digest of the checksum map.
    pub fn id(&self) -> String {
        match self {
            Snapshot::Git { commit, .. } => commit.clone().unwrap_or_else(|| "unborn".into()),
            Snapshot::Checksum { digest, .. } => digest.clone(),
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Snapshot::Git { .. } => "git",
            Snapshot::Checksum { .. } => "checksum",
        }
    }
}

/// One file in a checksum snapshot: size, modification time (ns) and content hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileStamp {
    pub size: u64,
    pub mtime_ns: i128,
    pub hash: u64,
}

pub type ChecksumMap = BTreeMap<String, FileStamp>;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, Default)]
pub struct Outcome {
    pub summary: String,
    #[serde(default)]
    pub achievements: Vec<String>,
    #[serde(default)]
    pub limitations: Vec<String>,
    #[serde(default)]
    pub manual_review_needed: bool,
    #[serde(default)]
    pub manual_review_reason: Option<String>,
    #[serde(default)]
    pub next_steps: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, Default)]
pub struct CompletionMetadata {
    #[serde(default)]
    pub packages_added: Vec<String>,
    #[serde(default)]
    pub packages_removed: Vec<String>,
    #[serde(default)]
    pub commands_executed: Vec<String>,
    #[serde(default)]
    pub tests_status: Option<TestsStatus>,
}

/// Files a task changed, by kind (paths relative to the repository or snapshot root).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema, Default)]
pub struct FilesChanged {
    pub added: Vec<String>,
    pub modified: Vec<String>,
    pub deleted: Vec<String>,
    /// Renames git detected; each also appears as a delete of `from` and an add of `to`.
    pub renamed: Vec<Rename>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Rename {
    pub from: String,
    pub to: String,
}

#[cfg(test)]
impl FilesChanged {
    /// Asserts the three lists, for the tables of cases.
    pub(crate) fn assert_lists(
        &self,
        case: &str,
        added: &[&str],
        modified: &[&str],
        deleted: &[&str],
    ) {
        assert_eq!(self.added, added, "{case}: added");
        assert_eq!(self.modified, modified, "{case}: modified");
        assert_eq!(self.deleted, deleted, "{case}: deleted");
    }
}

impl FilesChanged {
    pub fn all(&self) -> impl Iterator<Item = &String> {
        self.added.iter().chain(&self.modified).chain(&self.deleted)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, Default)]
pub struct Verification {
    pub scope_match: bool,
    pub unexpected_files: Vec<String>,
    pub warnings: Vec<String>,
}

/// Where a task is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    Running,
    Success,
    PartialSuccess,
    Failed,
}

impl From<CompletionStatus> for TaskState {
    fn from(s: CompletionStatus) -> TaskState {
        match s {
            CompletionStatus::Success => TaskState::Success,
            CompletionStatus::PartialSuccess => TaskState::PartialSuccess,
            CompletionStatus::Failed => TaskState::Failed,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    pub id: Ulid,
    pub workflow_id: Ulid,
    pub parent_task_id: Option<Ulid>,
    pub name: String,
    pub goal: String,
    pub areas: Vec<String>,
    pub snapshot: Snapshot,
    pub started_at: Timestamp,
    pub state: TaskState,
    pub completed_at: Option<Timestamp>,
    pub outcome: Option<Outcome>,
    pub metadata: Option<CompletionMetadata>,
    pub files_changed: Option<FilesChanged>,
    pub verification: Option<Verification>,
    /// The latest milestone's progress, 0..100.
    pub progress: Option<f64>,
    pub last_message: Option<String>,
    /// Who started it: a token's user on a shared server (the HTTP face); absent for local
    /// work and in tasks made before authors were kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Decision {
    pub id: String,
    pub category: DecisionCategory,
    pub question: String,
    pub options_considered: Vec<String>,
    pub chosen: String,
    pub reasoning: String,
    pub trade_offs: Option<String>,
    pub created_at: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct IssueRecord {
    pub id: String,
    #[serde(rename = "type")]
    pub issue_type: IssueType,
    pub description: String,
    pub resolution: String,
    pub requires_human_review: bool,
    pub created_at: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Milestone {
    pub id: String,
    pub message: String,
    pub progress: Option<f64>,
    pub metadata: Option<serde_json::Value>,
    pub created_at: String,
}

/// A log line of a task, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TaskEvent {
    Decision(Decision),
    Issue(IssueRecord),
    Milestone(Milestone),
}
