//! Records for editors and the CLI: a task with everything it logged and its subtasks,
//! workflows with their task trees, and the live changes of a task, each read in one call.

use std::collections::HashMap;
use std::path::Path;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use ulid::Ulid;

use super::model::{
    CompletionMetadata, Decision, FilesChanged, IssueRecord, Milestone, Outcome, PlanStep,
    Snapshot, Task, TaskEvent, TaskState, Verification, Workflow,
};
use super::{Result, TaskError, Tasks, decode, git, now};

/// A task with everything it logged and its subtasks: what an editor or `tandem tasks show`
/// needs, in one call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskRecord {
    pub task_id: String,
    pub workflow_id: String,
    pub parent_task_id: Option<String>,
    pub name: String,
    pub goal: String,
    pub areas: Vec<String>,
    /// `running`, `success`, `partial_success` or `failed`.
    pub status: TaskState,
    pub snapshot_type: String,
    pub snapshot_id: String,
    pub started_at: String,
    pub completed_at: Option<String>,
    /// Until completion, or until now for a running task.
    pub duration_seconds: u64,
    pub progress: Option<f64>,
    pub last_message: Option<String>,
    pub outcome: Option<Outcome>,
    pub metadata: Option<CompletionMetadata>,
    pub files_changed: Option<FilesChanged>,
    pub verification: Option<Verification>,
    pub decisions: Vec<Decision>,
    pub issues: Vec<IssueRecord>,
    pub milestones: Vec<Milestone>,
    pub subtasks: Vec<TaskRecord>,
    /// Who started the task, on a shared server (a token's user).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
}

/// A workflow with its task tree (`tandem tasks`, the editor's list).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WorkflowRecord {
    pub workflow_id: String,
    pub name: String,
    pub description: Option<String>,
    pub plan: Vec<PlanStep>,
    pub workspace: String,
    pub created_at: String,
    /// Top-level tasks, each with its subtasks (the newest ones when the list is limited).
    pub tasks: Vec<TaskRecord>,
    /// Older top-level tasks a limited list leaves out.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub omitted_tasks: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What a running (or completed) task has changed so far, file by file with line ranges:
/// the live view editors show.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LiveChanges {
    pub task_id: String,
    pub files: Vec<LiveFile>,
}

/// One file a task changed, with its line ranges.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LiveFile {
    pub path: String,
    /// `added`, `modified` or `deleted`.
    pub change: String,
    /// Empty outside git (a checksum snapshot knows files, not lines).
    pub hunks: Vec<git::Hunk>,
}

/// Tasks by their parent (`None`: a workflow's top-level tasks), each list in start order.
type Children<'a> = HashMap<Option<Ulid>, Vec<&'a Task>>;

fn children(tasks: &[Task]) -> Children<'_> {
    let mut by_parent: Children<'_> = HashMap::new();
    for t in tasks {
        by_parent.entry(t.parent_task_id).or_default().push(t);
    }
    by_parent
}

impl Tasks {
    /// One task's whole record, subtasks included.
    pub fn record(&self, id: &str) -> Result<TaskRecord> {
        let task = self.task(id)?;
        let later = self.tasks_since(task.id)?;
        self.build_record(&task, &children(&later))
    }

    /// `task`'s record; `children` has every task's subtasks by parent, in start order.
    fn build_record(&self, task: &Task, children: &Children) -> Result<TaskRecord> {
        let mut decisions = Vec::new();
        let mut issues = Vec::new();
        let mut milestones = Vec::new();
        for e in self.events_of(&task.id)? {
            match e {
                TaskEvent::Decision(d) => decisions.push(d),
                TaskEvent::Issue(i) => issues.push(i),
                TaskEvent::Milestone(m) => milestones.push(m),
            }
        }
        let mut subtasks = Vec::new();
        for child in children.get(&Some(task.id)).into_iter().flatten() {
            subtasks.push(self.build_record(child, children)?);
        }
        let end = task.completed_at.unwrap_or_else(now);
        Ok(TaskRecord {
            task_id: task.id.to_string(),
            workflow_id: task.workflow_id.to_string(),
            parent_task_id: task.parent_task_id.map(|p| p.to_string()),
            name: task.name.clone(),
            goal: task.goal.clone(),
            areas: task.areas.clone(),
            status: task.state,
            snapshot_type: task.snapshot.kind().into(),
            snapshot_id: task.snapshot.id(),
            started_at: task.started_at.to_string(),
            completed_at: task.completed_at.map(|t| t.to_string()),
            duration_seconds: (end.as_second() - task.started_at.as_second()).max(0) as u64,
            progress: task.progress,
            last_message: task.last_message.clone(),
            outcome: task.outcome.clone(),
            metadata: task.metadata.clone(),
            files_changed: task.files_changed.clone(),
            verification: task.verification.clone(),
            decisions,
            issues,
            milestones,
            subtasks,
            author: task.author.clone(),
        })
    }

    /// Workflows, newest first, each with its task tree: only those of `workspace` when
    /// given; with `limit`, the newest `limit` workflows, each with its newest `limit`
    /// top-level tasks (how many older ones are left out in `omitted_tasks`): what an
    /// editor's view shows, whatever the history. Reads the tasks started since the oldest
    /// workflow listed, not every task.
    pub fn list(
        &self,
        workspace: Option<&Path>,
        limit: Option<usize>,
    ) -> Result<Vec<WorkflowRecord>> {
        let mut workflows = Vec::new();
        for v in self.workflows.iter().values().rev() {
            if limit.is_some_and(|n| workflows.len() >= n) {
                break;
            }
            let w: Workflow = decode(&v?)?;
            if workspace.is_none_or(|ws| ws == w.workspace) {
                workflows.push(w);
            }
        }
        let Some(oldest) = workflows.last() else {
            return Ok(Vec::new());
        };
        let later = self.tasks_since(oldest.id)?;
        let children = children(&later);
        let mut tops: HashMap<Ulid, Vec<&Task>> = HashMap::new();
        for t in children.get(&None).into_iter().flatten() {
            tops.entry(t.workflow_id).or_default().push(t);
        }
        let mut out = Vec::with_capacity(workflows.len());
        for w in workflows {
            let mine = tops.get(&w.id).map_or(&[][..], Vec::as_slice);
            let shown = limit.map_or(mine.len(), |n| n.min(mine.len()));
            let mut tasks = Vec::with_capacity(shown);
            for t in &mine[mine.len() - shown..] {
                tasks.push(self.build_record(t, &children)?);
            }
            out.push(WorkflowRecord {
                workflow_id: w.id.to_string(),
                name: w.name,
                description: w.description,
                plan: w.plan,
                workspace: w.workspace.display().to_string(),
                created_at: w.created_at.to_string(),
                tasks,
                omitted_tasks: (mine.len() - shown) as u64,
            });
        }
        Ok(out)
    }

    /// The files and line ranges a task has changed since it started: the net change from
    /// the start to the working tree (a file changed and changed back is not listed).
    pub fn live_changes(&self, id: &str) -> Result<LiveChanges> {
        let task = self.task(id)?;
        Ok(LiveChanges {
            task_id: task.id.to_string(),
            files: self.live_files(&task, None)?,
        })
    }

    /// [`Tasks::live_changes`] of `task`, sorted by path; of these paths only with `only`
    /// (relative to the snapshot's root; in git, a diff limited to them).
    pub fn live_files(&self, task: &Task, only: Option<&[String]>) -> Result<Vec<LiveFile>> {
        if only.is_some_and(|o| o.is_empty()) {
            return Ok(Vec::new());
        }
        for (i, path) in only.unwrap_or_default().iter().enumerate() {
            super::scope::inside_workspace(path).map_err(|why| {
                TaskError::invalid(&format!("paths[{i}]"), format!("'{path}' is {why}"))
            })?;
        }
        let mut out: Vec<LiveFile> = match &task.snapshot {
            Snapshot::Git {
                repo_root, commit, ..
            } => {
                let failed = |e: git2::Error| TaskError::Snapshot {
                    path: repo_root.clone(),
                    message: e.message().to_string(),
                };
                let repo = git2::Repository::open(repo_root).map_err(failed)?;
                git::hunks_since(&repo, commit.as_deref(), only)
                    .map_err(failed)?
                    .into_iter()
                    .map(|f| LiveFile {
                        path: f.path,
                        change: f.change.into(),
                        hunks: f.hunks,
                    })
                    .collect()
            }
            Snapshot::Checksum { .. } => {
                let (files, _) = self.changes(task)?;
                [
                    ("added", &files.added),
                    ("modified", &files.modified),
                    ("deleted", &files.deleted),
                ]
                .into_iter()
                .flat_map(|(change, list)| {
                    list.iter().map(move |path| LiveFile {
                        path: path.clone(),
                        change: change.into(),
                        hunks: Vec::new(),
                    })
                })
                .collect()
            }
        };
        if let Some(paths) = only {
            out.retain(|f| paths.contains(&f.path));
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }
}
