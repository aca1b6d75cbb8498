//! The task tracker (spec 004): workflows, tasks and subtasks, their decisions, issues and
//! milestones, a snapshot at start (git commit, or checksums outside git) and, at
//! completion, the files changed since and a check against the declared areas.
//!
//! Records live in sled (written, flushed, then acknowledged), like the memory's.

pub mod api;
pub(crate) mod checksum;
pub mod error;
pub mod git;
pub mod model;
pub mod records;
pub mod scope;

use std::path::Path;
use std::sync::{Arc, Mutex};

use jiff::Timestamp;
use serde::Serialize;
use ulid::Ulid;

pub use api::*;
pub use error::TaskError;
pub use model::*;
pub use records::*;

use crate::events::{Bus, Event, TaskChange};
use crate::store::{IdLookup, Store, lookup_id};

/// Guidance of spec 004, said back to the agent when a task goes past it.
pub const MAX_DECISIONS_HINT: usize = 3;
pub const MAX_ISSUES_HINT: usize = 3;
pub const MAX_MILESTONES_HINT: usize = 5;

/// How far back of a workflow's (or a task's) creation its tasks (or subtasks) are looked
/// for: a system clock set back between the two by less than this loses nothing.
const CLOCK_SLACK_MS: u64 = 60_000;

type Result<T, E = TaskError> = std::result::Result<T, E>;

/// The task tracker. Cheap to share behind an `Arc`; every method is synchronous and safe
/// to call from many threads.
pub struct Tasks {
    store: Arc<Store>,
    workflows: sled::Tree,
    tasks: sled::Tree,
    events: sled::Tree,
    checksums: sled::Tree,
    /// Serialises writers: completion reads a task, diffs, then writes it.
    write_lock: Mutex<()>,
    /// What [`Tasks::focus`] chooses from, read from the tasks once on first use and kept
    /// by every write after (a write updates it after the task is durable).
    focus_index: Mutex<Option<FocusIndex>>,
    bus: Bus,
}

/// The tasks an editor's focus is chosen from, by workspace: the running ones and the one
/// completed last. Small (running tasks are few), so [`Tasks::focus`] reads no other task.
#[derive(Default)]
struct FocusIndex {
    /// Running tasks: their workspace and start.
    running: std::collections::HashMap<Ulid, (std::path::PathBuf, Timestamp)>,
    /// Each workspace's task completed last.
    completed: std::collections::HashMap<std::path::PathBuf, (Timestamp, Ulid)>,
}

impl FocusIndex {
    /// Takes `task` as it now is (idempotent: the same task twice changes nothing).
    fn apply(&mut self, task: &Task, workspace: &Path) {
        match task.completed_at {
            None => {
                self.running
                    .insert(task.id, (workspace.to_path_buf(), task.started_at));
            }
            Some(at) => {
                self.running.remove(&task.id);
                let last = self
                    .completed
                    .entry(workspace.to_path_buf())
                    .or_insert((at, task.id));
                if (at, task.id) > *last {
                    *last = (at, task.id);
                }
            }
        }
    }
}

impl Tasks {
    pub fn open(store: Arc<Store>) -> Result<Tasks> {
        let db = store.db();
        Ok(Tasks {
            workflows: db.open_tree("tasks.workflows")?,
            tasks: db.open_tree("tasks.tasks")?,
            events: db.open_tree("tasks.events")?,
            checksums: db.open_tree("tasks.checksums")?,
            store,
            write_lock: Mutex::new(()),
            focus_index: Mutex::new(None),
            bus: Bus::default(),
        })
    }

    /// Where task changes are published once durable.
    pub fn bus(&self) -> &Bus {
        &self.bus
    }

    /// Publishes a change of `task` (durable by now), tagged with its workflow's workspace,
    /// and keeps the focus index.
    fn publish(&self, task: &Task, change: TaskChange) {
        let workspace = match self.workflows.get(task.workflow_id.to_string()) {
            Ok(Some(v)) => match decode::<Workflow>(&v) {
                Ok(w) => w.workspace,
                Err(_) => return,
            },
            _ => return,
        };
        if let Some(index) = self
            .focus_index
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
        {
            index.apply(task, &workspace);
        }
        self.bus.publish(Event::Task {
            workspace,
            task_id: task.id,
            change,
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.write_lock.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn start_workflow(&self, workspace: &Path, req: NewWorkflow) -> Result<WorkflowStarted> {
        let name = required("name", &req.name)?;
        for (i, s) in req.plan.iter().enumerate() {
            if s.step.trim().is_empty() || s.goal.trim().is_empty() {
                return Err(TaskError::invalid(
                    "plan",
                    format!("step {} needs both step and goal", i + 1),
                ));
            }
        }
        let w = Workflow {
            id: Ulid::new(),
            name,
            description: req.description.filter(|d| !d.trim().is_empty()),
            plan: req.plan,
            workspace: workspace.to_path_buf(),
            created_at: now(),
        };
        self.workflows.insert(w.id.to_string(), encode(&w))?;
        self.store.flush()?;
        Ok(WorkflowStarted {
            workflow_id: w.id.to_string(),
            created_at: w.created_at.to_string(),
        })
    }

    pub fn start_task(&self, workspace: &Path, req: NewTask) -> Result<TaskStarted> {
        let name = required("name", &req.name)?;
        let goal = required("goal", &req.goal)?;
        let author = req.author.clone();
        let workflow: Workflow = self.find(&self.workflows, &req.workflow_id, "workflows")?;
        let parent = match req
            .parent_task_id
            .as_deref()
            .filter(|p| !p.trim().is_empty())
        {
            Some(p) => {
                let parent: Task = self.find(&self.tasks, p, "tasks")?;
                if parent.workflow_id != workflow.id {
                    return Err(TaskError::ParentInOtherWorkflow {
                        parent: parent.id.to_string(),
                        parent_workflow: parent.workflow_id.to_string(),
                        workflow: workflow.id.to_string(),
                    });
                }
                Some(parent.id)
            }
            None => None,
        };
        let areas: Vec<String> = req
            .areas
            .iter()
            .map(|a| a.trim().to_string())
            .filter(|a| !a.is_empty())
            .collect();
        for (i, area) in req.areas.iter().enumerate() {
            scope::inside_workspace(area).map_err(|why| {
                TaskError::invalid(&format!("areas[{i}]"), format!("'{area}' is {why}"))
            })?;
        }
        let id = Ulid::new();
        let (snapshot, map) = take_snapshot(workspace)?;
        let task = Task {
            id,
            workflow_id: workflow.id,
            parent_task_id: parent,
            name,
            goal,
            areas,
            snapshot,
            started_at: now(),
            state: TaskState::Running,
            completed_at: None,
            outcome: None,
            metadata: None,
            files_changed: None,
            verification: None,
            progress: None,
            last_message: None,
            author,
        };
        let _guard = self.lock();
        if let Some(map) = &map {
            self.checksums.insert(id.to_string(), encode(map))?;
        }
        self.tasks.insert(id.to_string(), encode(&task))?;
        self.store.flush()?;
        self.publish(&task, TaskChange::Started);
        Ok(TaskStarted {
            task_id: id.to_string(),
            snapshot_id: task.snapshot.id(),
            snapshot_type: task.snapshot.kind().into(),
            started_at: task.started_at.to_string(),
        })
    }

    pub fn log_decision(&self, req: NewDecision) -> Result<Logged> {
        let decision = Decision {
            id: Ulid::new().to_string(),
            category: req.category,
            question: required("question", &req.question)?,
            options_considered: req.options_considered,
            chosen: required("chosen", &req.chosen)?,
            reasoning: required("reasoning", &req.reasoning)?,
            trade_offs: req.trade_offs.filter(|t| !t.trim().is_empty()),
            created_at: now().to_string(),
        };
        self.log(&req.task_id, TaskEvent::Decision(decision))
    }

    pub fn log_issue(&self, req: NewIssue) -> Result<Logged> {
        let issue = IssueRecord {
            id: Ulid::new().to_string(),
            issue_type: req.issue_type,
            description: required("description", &req.description)?,
            resolution: required("resolution", &req.resolution)?,
            requires_human_review: req.requires_human_review,
            created_at: now().to_string(),
        };
        self.log(&req.task_id, TaskEvent::Issue(issue))
    }

    pub fn log_milestone(&self, req: NewMilestone) -> Result<Logged> {
        if let Some(p) = req.progress
            && !(0.0..=100.0).contains(&p)
        {
            return Err(TaskError::invalid(
                "progress",
                format!("progress must be between 0 and 100 (got {p})"),
            ));
        }
        if let Some(m) = &req.metadata
            && !m.is_object()
        {
            return Err(TaskError::invalid("metadata", "metadata must be an object"));
        }
        let milestone = Milestone {
            id: Ulid::new().to_string(),
            message: required("message", &req.message)?,
            progress: req.progress,
            metadata: req.metadata,
            created_at: now().to_string(),
        };
        self.log(&req.task_id, TaskEvent::Milestone(milestone))
    }

    fn log(&self, task_id: &str, event: TaskEvent) -> Result<Logged> {
        let _guard = self.lock();
        let mut task: Task = self.find(&self.tasks, task_id, "tasks")?;
        // Logging on a completed task is refused: its record is closed.
        if task.state != TaskState::Running {
            return Err(already_completed(&task));
        }
        let (id, kind, limit) = match &event {
            TaskEvent::Decision(d) => (d.id.clone(), "decision", MAX_DECISIONS_HINT),
            TaskEvent::Issue(i) => (i.id.clone(), "issue", MAX_ISSUES_HINT),
            TaskEvent::Milestone(m) => (m.id.clone(), "milestone", MAX_MILESTONES_HINT),
        };
        if let TaskEvent::Milestone(m) = &event {
            task.last_message = Some(m.message.clone());
            if m.progress.is_some() {
                task.progress = m.progress;
            }
            self.tasks.insert(task.id.to_string(), encode(&task))?;
        }
        self.events
            .insert(format!("{}/{id}", task.id), encode(&event))?;
        self.store.flush()?;
        self.publish(
            &task,
            match &event {
                TaskEvent::Decision(_) => TaskChange::Decision,
                TaskEvent::Issue(i) => TaskChange::Issue {
                    requires_human_review: i.requires_human_review,
                },
                TaskEvent::Milestone(m) => TaskChange::Milestone {
                    progress: m.progress,
                    message: m.message.clone(),
                },
            },
        );
        let count = self
            .events_of(&task.id)?
            .iter()
            .filter(|e| event_kind(e) == kind)
            .count() as u64;
        let guidance = (count as usize > limit).then(|| {
            format!("this task now has {count} {kind}s; the protocol suggests at most {limit}: log only what adds real value")
        });
        Ok(Logged {
            logged: true,
            id,
            task_id: task.id.to_string(),
            count,
            guidance,
        })
    }

    pub fn complete_task(&self, req: Completion) -> Result<TaskCompleted> {
        if req.outcome.summary.trim().is_empty() {
            return Err(TaskError::invalid(
                "outcome.summary",
                "the summary is empty",
            ));
        }
        let _guard = self.lock();
        let mut task: Task = self.find(&self.tasks, &req.task_id, "tasks")?;
        if task.state != TaskState::Running {
            return Err(already_completed(&task));
        }
        let (files, notes) = self.changes(&task)?;
        let mut verification = scope::verify(&task.areas, files.all());
        verification.warnings.extend(notes);
        let completed_at = now();
        let duration = (completed_at.as_second() - task.started_at.as_second()).max(0) as u64;
        task.state = req.status.into();
        task.completed_at = Some(completed_at);
        task.outcome = Some(req.outcome);
        task.metadata = req.metadata;
        task.files_changed = Some(files.clone());
        task.verification = Some(verification.clone());
        self.tasks.insert(task.id.to_string(), encode(&task))?;
        self.store.flush()?;
        self.publish(&task, TaskChange::Completed);
        Ok(TaskCompleted {
            task_id: task.id.to_string(),
            duration_seconds: duration,
            files_changed: files,
            verification,
        })
    }

    /// The files a task changed so far (or until it completed), with notes.
    pub fn changes(&self, task: &Task) -> Result<(FilesChanged, Vec<String>)> {
        match &task.snapshot {
            Snapshot::Git {
                repo_root, commit, ..
            } => {
                let repo = git2::Repository::open(repo_root).map_err(|e| TaskError::Snapshot {
                    path: repo_root.clone(),
                    message: e.message().to_string(),
                })?;
                git::changes_since(&repo, commit.as_deref()).map_err(|e| TaskError::Snapshot {
                    path: repo_root.clone(),
                    message: e.message().to_string(),
                })
            }
            Snapshot::Checksum { root, .. } => {
                let before: ChecksumMap = match self.checksums.get(task.id.to_string())? {
                    Some(b) => decode(&b)?,
                    None => {
                        return Err(TaskError::Corrupt(format!(
                            "task {} lost its checksum snapshot",
                            task.id
                        )));
                    }
                };
                let after =
                    checksum::snapshot(root, Some(&before)).map_err(|e| TaskError::Snapshot {
                        path: root.clone(),
                        message: e.to_string(),
                    })?;
                Ok((checksum::compare(&before, &after), Vec::new()))
            }
        }
    }

    /// A task by id (or prefix of 5+ characters).
    pub fn task(&self, id: &str) -> Result<Task> {
        self.find(&self.tasks, id, "tasks")
    }

    /// A workflow by id.
    pub fn workflow(&self, id: &Ulid) -> Result<Workflow> {
        self.find(&self.workflows, &id.to_string(), "workflows")
    }

    /// A task's decisions, issues and milestones, oldest first.
    pub fn events_of(&self, task: &Ulid) -> Result<Vec<TaskEvent>> {
        self.events
            .scan_prefix(format!("{task}/"))
            .values()
            .map(|v| decode(&v?))
            .collect()
    }

    fn find<T: serde::de::DeserializeOwned>(
        &self,
        tree: &sled::Tree,
        input: &str,
        what: &'static str,
    ) -> Result<T> {
        let not_found = || match what {
            "workflows" => TaskError::WorkflowNotFound {
                id: input.trim().into(),
            },
            _ => TaskError::TaskNotFound {
                id: input.trim().into(),
            },
        };
        let wanted = input.trim().to_ascii_uppercase();
        match lookup_id(tree, &wanted)? {
            IdLookup::Found(record) => decode(&record),
            IdLookup::Missing | IdLookup::TooShort => Err(not_found()),
            IdLookup::Ambiguous(found) => Err(TaskError::AmbiguousId {
                prefix: input.trim().into(),
                what,
                candidates: found
                    .iter()
                    .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
                    .collect(),
            }),
        }
    }

    fn all_tasks(&self) -> Result<Vec<Task>> {
        self.tasks.iter().values().map(|v| decode(&v?)).collect()
    }

    /// The tasks started since `id` was made (a ULID holds its time): a task starts after
    /// its workflow and a subtask after its parent, and task keys are ULIDs, which sort by
    /// time. From [`CLOCK_SLACK_MS`] earlier, for a clock set back in between.
    pub(crate) fn tasks_since(&self, id: Ulid) -> Result<Vec<Task>> {
        let from = id.timestamp_ms().saturating_sub(CLOCK_SLACK_MS);
        let from = Ulid::from_parts(from, 0).to_string();
        self.tasks
            .range(from..)
            .values()
            .map(|v| decode(&v?))
            .collect()
    }

    /// The task an editor of `workspace` shows: the running task started last (a subtask
    /// starts after its parent, so it wins), else the task completed last if that was less
    /// than `recent` ago.
    pub fn focus(&self, workspace: &Path, recent: std::time::Duration) -> Result<Option<Task>> {
        let chosen = {
            let mut slot = self.focus_index.lock().unwrap_or_else(|p| p.into_inner());
            if slot.is_none() {
                *slot = Some(self.read_focus_index()?);
            }
            let index = slot.as_ref().expect("just filled");
            let running = index
                .running
                .iter()
                .filter(|(_, (ws, _))| ws == workspace)
                .max_by_key(|(id, (_, started))| (*started, **id))
                .map(|(id, _)| *id);
            let cutoff = now().as_second() - recent.as_secs() as i64;
            running.or_else(|| {
                index
                    .completed
                    .get(workspace)
                    .filter(|(at, _)| at.as_second() >= cutoff)
                    .map(|(_, id)| *id)
            })
        };
        match chosen {
            Some(id) => match self.tasks.get(id.to_string())? {
                Some(v) => Ok(Some(decode(&v)?)),
                None => Ok(None),
            },
            None => Ok(None),
        }
    }

    /// The focus index from every task (once, on the first [`Tasks::focus`]).
    fn read_focus_index(&self) -> Result<FocusIndex> {
        let mut workspaces = std::collections::HashMap::new();
        for v in self.workflows.iter().values() {
            let w: Workflow = decode(&v?)?;
            workspaces.insert(w.id, w.workspace);
        }
        let mut index = FocusIndex::default();
        for task in self.all_tasks()? {
            if let Some(ws) = workspaces.get(&task.workflow_id) {
                index.apply(&task, ws);
            }
        }
        Ok(index)
    }

    /// How many decisions a task logged (for the editor's lenses).
    pub fn decision_count(&self, task: &Task) -> Result<usize> {
        Ok(self
            .events_of(&task.id)?
            .iter()
            .filter(|e| matches!(e, TaskEvent::Decision(_)))
            .count())
    }

    /// The issues a task logged that ask for a human review.
    pub fn review_issues(&self, task: &Task) -> Result<Vec<IssueRecord>> {
        Ok(self
            .events_of(&task.id)?
            .into_iter()
            .filter_map(|e| match e {
                TaskEvent::Issue(i) if i.requires_human_review => Some(i),
                _ => None,
            })
            .collect())
    }

    /// The directory a task's paths are relative to.
    pub fn root_of(task: &Task) -> &Path {
        match &task.snapshot {
            Snapshot::Git { repo_root, .. } => repo_root,
            Snapshot::Checksum { root, .. } => root,
        }
    }
}

/// Snapshots `workspace`: HEAD of its git repository, else checksums of its files.
fn take_snapshot(workspace: &Path) -> Result<(Snapshot, Option<ChecksumMap>)> {
    let failed = |message: String| TaskError::Snapshot {
        path: workspace.to_path_buf(),
        message,
    };
    if let Some(repo) = git::discover(workspace) {
        return git::snapshot(&repo)
            .map(|s| (s, None))
            .map_err(|e| failed(e.message().to_string()));
    }
    if !workspace.is_dir() {
        return Err(failed("not a directory".into()));
    }
    let map = checksum::snapshot(workspace, None).map_err(|e| failed(e.to_string()))?;
    let snapshot = Snapshot::Checksum {
        root: workspace.to_path_buf(),
        files: map.len(),
        digest: checksum::digest(&map),
    };
    Ok((snapshot, Some(map)))
}

fn already_completed(task: &Task) -> TaskError {
    TaskError::TaskAlreadyCompleted {
        id: task.id.to_string(),
        state: serde_json::to_value(task.state)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
        completed_at: task.completed_at.map(|t| t.to_string()).unwrap_or_default(),
    }
}

fn event_kind(e: &TaskEvent) -> &'static str {
    match e {
        TaskEvent::Decision(_) => "decision",
        TaskEvent::Issue(_) => "issue",
        TaskEvent::Milestone(_) => "milestone",
    }
}

fn required(field: &str, value: &str) -> Result<String> {
    let v = value.trim();
    if v.is_empty() {
        return Err(TaskError::invalid(field, format!("{field} is empty")));
    }
    Ok(v.to_string())
}

fn now() -> Timestamp {
    Timestamp::now()
        .round(jiff::Unit::Second)
        .unwrap_or_else(|_| Timestamp::now())
}

fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).expect("task records serialise")
}

fn decode<T: serde::de::DeserializeOwned>(b: &[u8]) -> Result<T> {
    serde_json::from_slice(b).map_err(|e| TaskError::Corrupt(e.to_string()))
}
