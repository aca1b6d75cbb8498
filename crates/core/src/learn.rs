//! Memory learns from tasks (issue 12): when a task completes, the decisions and issues it
//! logged become suggested memory entries, which the agent reviews (`rekall_suggest_entries`)
//! and accepts or rejects like any suggestion; an accepted one is an ordinary entry.
//!
//! Architecture invariant: `memory` and `tasks` do not know each other. This module is where
//! they meet: it reads a completed task (its decisions, issues, workflow and the files it
//! changed) through [`Tasks`], says it in the memory's terms ([`NewProposal`]s: type, title,
//! content, tags, context, project), and hands that to [`Memory::suggest_entries`], which
//! leaves out what it already holds. `calls::TASKS_COMPLETE_TASK` runs [`complete_task`].

use std::path::Path;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::memory::records::MAX_TITLE_CHARS;
use crate::memory::{
    EntryType, Memory, MemoryError, NewEntry, NewProposal, ProposalsOutcome, SuggestedEntry,
};
use crate::tasks::{
    Completion, Decision, FilesChanged, IssueRecord, IssueType, Task, TaskCompleted, TaskError,
    TaskEvent, TaskState, Tasks, Workflow,
};

/// A proposed entry's confidence (the add's default)...
const CONFIDENCE: i64 = 3;
/// ...and when its task failed or its issue asks for a human review.
const CONFIDENCE_UNSURE: i64 = 2;
/// A proposed entry carries at most this many tags (spec 003 recommends 2 to 5).
const MAX_TAGS: usize = 5;
/// A context names at most this many changed files; the rest are counted.
const MAX_CONTEXT_FILES: usize = 40;
/// A decision's title keeps at most this many characters of its choice.
const MAX_CHOICE_CHARS: usize = 40;
/// Words that make an issue of type `other` a bug rather than a pitfall.
const BUG_WORDS: &[&str] = &["bug", "crash", "crashes", "panic", "panics", "regression"];

/// The answer to `complete_task`: spec 004's (the task, its duration, the files changed,
/// the check against its areas) and the memory entries suggested from what it logged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskCompletion {
    #[serde(flatten)]
    pub task: TaskCompleted,
    /// The memory entries suggested from this task's decisions and issues, to review with
    /// `rekall_suggest_entries` and accept or reject.
    pub memory_suggestions: Vec<SuggestedEntry>,
    /// What to do next, when there is something to do.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

/// Why a completed task's entries could not be proposed.
#[derive(Debug, thiserror::Error)]
pub enum LearnError {
    #[error(transparent)]
    Tasks(#[from] TaskError),
    #[error(transparent)]
    Memory(#[from] MemoryError),
}

/// Completes a task (spec 004), then suggests its decisions and issues to the memory. The
/// completion stands whatever the memory does: a failure to suggest is logged and said in
/// the hint, never the call's error (the task is closed by then, and its changes are the
/// answer the agent needs).
pub fn complete_task(
    tasks: &Tasks,
    memory: &Memory,
    completion: Completion,
) -> Result<TaskCompletion, TaskError> {
    let done = tasks.complete_task(completion)?;
    let (memory_suggestions, hint) = match learn_from(tasks, memory, &done.task_id) {
        Ok(learned) => {
            let hint = review_hint(&learned);
            (learned.suggested, hint)
        }
        Err(e) => {
            tracing::error!(
                "task {}: suggesting its decisions and issues to the memory failed: {e}",
                done.task_id
            );
            let hint = format!(
                "The task is completed, but its decisions and issues could not be suggested to the memory: {e}"
            );
            (Vec::new(), Some(hint))
        }
    };
    Ok(TaskCompletion {
        task: done,
        memory_suggestions,
        hint,
    })
}

/// Suggests a task's decisions and issues to the memory ([`proposals`]). Suggesting the same
/// task again suggests nothing new: the memory remembers every proposal it was given.
pub fn learn_from(
    tasks: &Tasks,
    memory: &Memory,
    task_id: &str,
) -> Result<ProposalsOutcome, LearnError> {
    let task = tasks.task(task_id)?;
    let workflow = tasks.workflow(&task.workflow_id)?;
    let events = tasks.events_of(&task.id)?;
    let proposed = proposals(&task, &workflow, &events);
    if proposed.is_empty() {
        return Ok(ProposalsOutcome::default());
    }
    Ok(memory.suggest_entries(proposed)?)
}

/// The entries a task proposes: one per decision and one per issue it logged, in order.
///
/// Every decision and every issue is proposed. The task model requires a decision's
/// `chosen` and an issue's `resolution`, and refuses a blank one (`log_decision`,
/// `log_issue`), so each decision recorded has a choice and each issue was resolved (or
/// worked around, as spec 004 puts it): none is left out for lacking one. Milestones are
/// progress news, not knowledge: none is proposed. A failed task's decisions and issues are
/// proposed too (what went wrong is worth keeping), at a lower confidence, with its status
/// in the context, and the agent decides.
pub fn proposals(task: &Task, workflow: &Workflow, events: &[TaskEvent]) -> Vec<NewProposal> {
    let context = context_of(task, workflow);
    let project = project_of(&workflow.workspace);
    let failed = task.state == TaskState::Failed;
    events
        .iter()
        .filter_map(|event| {
            let (entry_type, title, content, answer, kind_tag, unsure, source) = match event {
                TaskEvent::Decision(d) => (
                    EntryType::Decision,
                    decision_title(d),
                    decision_content(d),
                    decision_answer(d),
                    d.category.as_str(),
                    false,
                    format!("Decision logged in task {} \"{}\"", task.id, task.name),
                ),
                TaskEvent::Issue(i) => (
                    issue_type(i),
                    cut(&i.description, MAX_TITLE_CHARS),
                    issue_content(i),
                    i.resolution.trim().to_string(),
                    i.issue_type.as_str(),
                    i.requires_human_review,
                    format!("Issue logged in task {} \"{}\"", task.id, task.name),
                ),
                TaskEvent::Milestone(_) => return None,
            };
            let mut tags = vec![kind_tag.to_string(), workflow.name.clone()];
            tags.extend(task.areas.iter().cloned());
            let mut tags = crate::memory::records::normalize_tags(&tags);
            tags.truncate(MAX_TAGS);
            Some(NewProposal {
                entry: NewEntry {
                    entry_type: Some(entry_type),
                    title,
                    content,
                    tags,
                    context: Some(context.clone()),
                    project: project.clone(),
                    confidence: Some(if failed || unsure {
                        CONFIDENCE_UNSURE
                    } else {
                        CONFIDENCE
                    }),
                    memory_type: None,
                    author: None,
                },
                source,
                answer: Some(answer),
            })
        })
        .collect()
}

/// What `complete_task`'s answer says to do with the suggestions, if anything.
fn review_hint(learned: &ProposalsOutcome) -> Option<String> {
    let mut hint = String::new();
    let n = learned.suggested.len();
    if n > 0 {
        hint.push_str(&format!(
            "{n} memory suggestion{} from this task's decisions and issues (memory_suggestions): review them with rekall_suggest_entries, then keep each with rekall_accept_suggestion(suggestion_id) (it becomes an ordinary entry) or drop it with rekall_reject_suggestion(suggestion_id).",
            if n == 1 { "" } else { "s" }
        ));
    }
    let skipped = learned.skipped.len();
    if skipped > 0 {
        if !hint.is_empty() {
            hint.push(' ');
        }
        hint.push_str(&format!(
            "{skipped} of its decisions and issues {} already in the memory or suggested before: not suggested again.",
            if skipped == 1 { "was" } else { "were" }
        ));
    }
    (!hint.is_empty()).then_some(hint)
}

/// `{question} → {choice}`, within the title limit: the question is cut first.
fn decision_title(d: &Decision) -> String {
    let choice = format!(" → {}", cut(&d.chosen, MAX_CHOICE_CHARS));
    let room = MAX_TITLE_CHARS - choice.chars().count();
    format!("{}{choice}", cut(&d.question, room))
}

fn decision_content(d: &Decision) -> String {
    let mut c = format!("{}\n\n", d.question.trim());
    if !d.options_considered.is_empty() {
        c.push_str(&format!(
            "Options considered: {}\n",
            d.options_considered.join("; ")
        ));
    }
    c.push_str(&format!("Chosen: {}\n", d.chosen.trim()));
    c.push_str(&format!("Reasoning: {}\n", d.reasoning.trim()));
    if let Some(t) = &d.trade_offs {
        c.push_str(&format!("Trade-offs: {}\n", t.trim()));
    }
    c
}

/// What a decision says beyond its question: the choice, why, and at what cost.
fn decision_answer(d: &Decision) -> String {
    let mut a = format!("{}. {}", d.chosen.trim(), d.reasoning.trim());
    if let Some(t) = &d.trade_offs {
        a.push_str(&format!(". {}", t.trim()));
    }
    a
}

fn issue_content(i: &IssueRecord) -> String {
    let mut c = format!(
        "{}\n\nResolution: {}\n",
        i.description.trim(),
        i.resolution.trim()
    );
    if i.requires_human_review {
        c.push_str("A human review of this resolution was asked for.\n");
    }
    c
}

/// A bug when the issue is a bug met (`bug_encountered`, or `other` in words that say so:
/// a crash, a panic, a regression); else a pitfall (a documentation gap, a dependency
/// conflict, an unclear requirement: something to watch out for).
fn issue_type(i: &IssueRecord) -> EntryType {
    let says_bug = || {
        i.description
            .split(|c: char| !c.is_alphanumeric())
            .any(|w| BUG_WORDS.contains(&w.to_lowercase().as_str()))
    };
    match i.issue_type {
        IssueType::BugEncountered => EntryType::Bug,
        IssueType::Other if says_bug() => EntryType::Bug,
        _ => EntryType::Pitfall,
    }
}

/// Where an entry was learned: the task (id, name, goal, how it ended), its workflow, the
/// files it changed.
fn context_of(task: &Task, workflow: &Workflow) -> String {
    let state = match task.state {
        TaskState::Running => "running",
        TaskState::Success => "success",
        TaskState::PartialSuccess => "partial success",
        TaskState::Failed => "failed",
    };
    let mut c = format!(
        "Learned from task {} \"{}\" (goal: {}; {state}), in workflow {} \"{}\".\n",
        task.id,
        task.name,
        task.goal.trim(),
        workflow.id,
        workflow.name
    );
    c.push_str(&files_line(task.files_changed.as_ref()));
    c
}

/// `Files changed: added a, b; modified c; deleted d.`, at most [`MAX_CONTEXT_FILES`] named.
fn files_line(files: Option<&FilesChanged>) -> String {
    let Some(files) = files else {
        return String::new();
    };
    let mut named = 0;
    let mut parts = Vec::new();
    for (what, paths) in [
        ("added", &files.added),
        ("modified", &files.modified),
        ("deleted", &files.deleted),
    ] {
        let shown: Vec<&str> = paths
            .iter()
            .take(MAX_CONTEXT_FILES.saturating_sub(named))
            .map(String::as_str)
            .collect();
        named += shown.len();
        if !shown.is_empty() {
            parts.push(format!("{what} {}", shown.join(", ")));
        }
    }
    let total = files.added.len() + files.modified.len() + files.deleted.len();
    if total == 0 {
        return "No files changed.\n".into();
    }
    let more = if total > named {
        format!(" (and {} more)", total - named)
    } else {
        String::new()
    };
    format!("Files changed: {}{more}.\n", parts.join("; "))
}

/// The project an entry belongs to: the name of the workflow's workspace (its git
/// toplevel, where there is one).
fn project_of(workspace: &Path) -> Option<String> {
    workspace
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
}

/// `text` on one line, at most `max` characters: cut at a word where one ends near the
/// limit, and ended with `…`.
fn cut(text: &str, max: usize) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() <= max {
        return line;
    }
    let kept: String = line.chars().take(max.saturating_sub(1)).collect();
    let word_ends = line.chars().nth(kept.chars().count()) == Some(' ');
    let at_word = match kept.rfind(' ') {
        _ if word_ends => kept,
        Some(i) if kept[i..].chars().count() <= 20 => kept[..i].trim_end().to_string(),
        _ => kept,
    };
    format!("{at_word}…")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_fit_and_cut_at_words() {
        let long = "word ".repeat(40);
        let cases: &[(&str, usize, &str)] = &[
            ("  Which   JWT library?  ", 100, "Which JWT library?"),
            ("abcdef", 6, "abcdef"),
            ("abcdefg", 6, "abcde…"),
            ("one two three", 10, "one two…"),
        ];
        for (text, max, want) in cases {
            assert_eq!(cut(text, *max), *want, "{text:?} in {max}");
        }
        let cut_long = cut(&long, MAX_TITLE_CHARS);
        assert!(cut_long.chars().count() <= MAX_TITLE_CHARS, "{cut_long}");
        assert!(cut_long.ends_with("word…"), "{cut_long}");

        let d = Decision {
            id: "d".into(),
            category: crate::tasks::DecisionCategory::LibraryChoice,
            question: long.clone(),
            options_considered: vec![],
            chosen: "jose".into(),
            reasoning: "typed".into(),
            trade_offs: None,
            created_at: String::new(),
        };
        let title = decision_title(&d);
        assert!(title.chars().count() <= MAX_TITLE_CHARS, "{title}");
        assert!(title.ends_with("… → jose"), "{title}");
    }

    #[test]
    fn issues_are_bugs_or_pitfalls_by_what_they_say() {
        let issue = |issue_type, description: &str| IssueRecord {
            id: "i".into(),
            issue_type,
            description: description.into(),
            resolution: "r".into(),
            requires_human_review: false,
            created_at: String::new(),
        };
        let cases = [
            (IssueType::BugEncountered, "Slow CI", EntryType::Bug),
            (
                IssueType::Other,
                "The parser crashes on BOMs",
                EntryType::Bug,
            ),
            (IssueType::Other, "Debugging took long", EntryType::Pitfall),
            (
                IssueType::DocumentationGap,
                "A bug in the docs",
                EntryType::Pitfall,
            ),
            (
                IssueType::DependencyConflict,
                "serde twice",
                EntryType::Pitfall,
            ),
            (IssueType::UnclearRequirement, "Which", EntryType::Pitfall),
        ];
        for (t, description, want) in cases {
            assert_eq!(issue_type(&issue(t, description)), want, "{description}");
        }
    }

    #[test]
    fn the_files_line_names_a_bounded_number_of_files() {
        let many: Vec<String> = (0..MAX_CONTEXT_FILES + 3)
            .map(|i| format!("f{i}"))
            .collect();
        let files = FilesChanged {
            added: vec!["a.rs".into()],
            modified: many,
            deleted: vec!["gone.rs".into()],
            renamed: vec![],
        };
        let line = files_line(Some(&files));
        assert!(line.starts_with("Files changed: added a.rs; modified f0, f1"));
        assert!(line.ends_with("(and 5 more).\n"), "{line}");
        assert!(!line.contains("gone.rs"));
        assert_eq!(
            files_line(Some(&FilesChanged::default())),
            "No files changed.\n"
        );
    }
}
