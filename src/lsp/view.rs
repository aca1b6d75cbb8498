//! What the editor shows of the focus task, computed from core records alone: diagnostics
//! and code lenses per file. No I/O here; the session feeds it and publishes the result.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde_json::json;
use tower_lsp_server::ls_types::{
    CodeLens, Command, Diagnostic, DiagnosticSeverity, NumberOrString, Position, Range,
};

use crate::render::state_label;
use tandem_core::tasks::{Task, scope};

pub const SHOW_TASK: &str = "tandem.task.show";
pub const SHOW_DECISIONS: &str = "tandem.task.decisions";

/// The focus task and what the editor needs of it, as `tasks/focus` gives it.
pub use tandem_core::calls::TaskFocus as Focus;

/// The file's one-line status: `Task: NAME · in progress · 75% · Running tests…`.
pub fn headline(focus: &Focus) -> String {
    let t = &focus.task;
    let mut s = format!("Task: {} · {}", t.name, state_label(t.state));
    if let Some(p) = t.progress {
        s.push_str(&format!(" · {p:.0}%"));
    }
    if let Some(m) = t.last_message.as_deref().filter(|_| focus.running()) {
        s.push_str(&format!(" · {m}"));
    }
    s
}

fn line_range(line: u32) -> Range {
    let p = Position::new(line, 0);
    Range::new(p, p)
}

/// The lines a hunk covers in the new file (0-based, end exclusive); a pure deletion is a
/// zero-width range where the lines were.
fn hunk_range(new_start: u32, new_lines: u32) -> Range {
    if new_lines == 0 {
        // git numbers a deletion's new_start as the line before it (0 at the top).
        return line_range(new_start);
    }
    let start = new_start.saturating_sub(1);
    Range::new(Position::new(start, 0), Position::new(start + new_lines, 0))
}

fn diagnostic(
    range: Range,
    severity: DiagnosticSeverity,
    code: &str,
    message: String,
    task: &Task,
) -> Diagnostic {
    Diagnostic {
        range,
        severity: Some(severity),
        code: Some(NumberOrString::String(code.into())),
        source: Some("tandem".into()),
        message,
        data: Some(json!({ "task_id": task.id.to_string() })),
        ..Diagnostic::default()
    }
}

/// Diagnostics by absolute path, for every file that has some.
pub fn diagnostics(focus: &Focus) -> BTreeMap<PathBuf, Vec<Diagnostic>> {
    let task = &focus.task;
    let root = focus.root();
    let mut out: BTreeMap<PathBuf, Vec<Diagnostic>> = BTreeMap::new();
    if focus.running() {
        let paths: Vec<String> = focus.files.iter().map(|f| f.path.clone()).collect();
        let outside: BTreeSet<String> = scope::verify(&task.areas, paths.iter())
            .unexpected_files
            .into_iter()
            .collect();
        let areas = task.areas.join(", ");
        for f in focus.files.iter().filter(|f| f.change != "deleted") {
            let (severity, code, message) = if outside.contains(&f.path) {
                (
                    DiagnosticSeverity::WARNING,
                    "outside-scope",
                    format!(
                        "Outside declared scope ({areas}): changed by task “{}”",
                        task.name
                    ),
                )
            } else {
                (
                    DiagnosticSeverity::INFORMATION,
                    "task-change",
                    format!(
                        "Changed by task “{}” ({})",
                        task.name,
                        state_label(task.state)
                    ),
                )
            };
            let ranges: Vec<Range> = if f.hunks.is_empty() {
                // Outside git a task knows files, not lines.
                vec![line_range(0)]
            } else {
                f.hunks
                    .iter()
                    .map(|h| hunk_range(h.new_start, h.new_lines))
                    .collect()
            };
            let list = out.entry(root.join(&f.path)).or_default();
            for r in ranges {
                list.push(diagnostic(r, severity, code, message.clone(), task));
            }
        }
    }
    let review_reason = task
        .outcome
        .as_ref()
        .filter(|o| o.manual_review_needed)
        .map(|o| {
            o.manual_review_reason
                .clone()
                .unwrap_or_else(|| "no reason given".into())
        });
    for path in focus.touched() {
        let list = out.entry(root.join(path)).or_default();
        if let Some(reason) = &review_reason {
            list.push(diagnostic(
                line_range(0),
                DiagnosticSeverity::WARNING,
                "review-needed",
                format!("Manual review needed (task “{}”): {reason}", task.name),
                task,
            ));
        }
        for issue in &focus.review_issues {
            list.push(diagnostic(
                line_range(0),
                DiagnosticSeverity::WARNING,
                "human-review",
                format!(
                    "Human review required (task “{}”): {}",
                    task.name, issue.description
                ),
                task,
            ));
        }
    }
    out.retain(|_, v| !v.is_empty());
    out
}

fn lens(range: Range, title: String, command: &str, focus: &Focus) -> CodeLens {
    CodeLens {
        range,
        command: Some(Command {
            title,
            command: command.into(),
            arguments: Some(vec![json!(focus.task.id.to_string())]),
        }),
        data: None,
    }
}

/// Code lenses of one file (relative path): the task's headline on line 1, and on each
/// hunk of a running task its name and its decisions.
pub fn code_lenses(focus: &Focus, path: &str) -> Vec<CodeLens> {
    if !focus.touched().contains(&path) {
        return Vec::new();
    }
    let mut out = vec![lens(line_range(0), headline(focus), SHOW_TASK, focus)];
    if let Some(f) = focus.files.iter().find(|f| f.path == path) {
        for h in &f.hunks {
            let at = line_range(hunk_range(h.new_start, h.new_lines).start.line);
            out.push(lens(
                at,
                format!("Changed by {}", focus.task.name),
                SHOW_TASK,
                focus,
            ));
            out.push(lens(
                at,
                format!("Decisions ({})", focus.decisions),
                SHOW_DECISIONS,
                focus,
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use tandem_core::tasks::TaskState;
    use tandem_core::tasks::git::Hunk;
    use tandem_core::tasks::{FilesChanged, Outcome, Snapshot};
    use tandem_core::tasks::{IssueRecord, LiveFile};

    fn task(state: TaskState, areas: &[&str]) -> Task {
        Task {
            id: ulid::Ulid::new(),
            workflow_id: ulid::Ulid::new(),
            parent_task_id: None,
            name: "Setup JWT middleware".into(),
            goal: "auth".into(),
            areas: areas.iter().map(|a| a.to_string()).collect(),
            snapshot: Snapshot::Git {
                repo_root: "/repo".into(),
                commit: None,
                branch: None,
            },
            started_at: jiff::Timestamp::now(),
            state,
            completed_at: None,
            outcome: None,
            metadata: None,
            files_changed: None,
            verification: None,
            progress: Some(75.0),
            last_message: Some("Running tests…".into()),
            author: None,
        }
    }

    fn file(path: &str, change: &str, hunks: &[(u32, u32)]) -> LiveFile {
        LiveFile {
            path: path.into(),
            change: change.into(),
            hunks: hunks
                .iter()
                .map(|&(new_start, new_lines)| Hunk {
                    old_start: 0,
                    old_lines: 0,
                    new_start,
                    new_lines,
                })
                .collect(),
        }
    }

    fn codes(d: &[Diagnostic]) -> Vec<String> {
        d.iter()
            .map(|d| match &d.code {
                Some(NumberOrString::String(s)) => s.clone(),
                _ => String::new(),
            })
            .collect()
    }

    #[test]
    fn running_task_marks_hunks_and_out_of_scope_files() {
        let focus = Focus {
            task: task(TaskState::Running, &["auth", "api"]),
            decisions: 2,
            review_issues: vec![],
            files: vec![
                file("src/auth/jwt.rs", "modified", &[(3, 2), (10, 0)]),
                file("src/utils.rs", "added", &[(1, 4)]),
                file("old.rs", "deleted", &[]),
            ],
        };
        let d = diagnostics(&focus);
        assert_eq!(d.len(), 2, "deleted files get nothing: {d:?}");
        let jwt = &d[Path::new("/repo/src/auth/jwt.rs")];
        assert_eq!(codes(jwt), ["task-change", "task-change"]);
        assert_eq!(
            jwt[0].range,
            Range::new(Position::new(2, 0), Position::new(4, 0))
        );
        assert_eq!(
            jwt[1].range,
            line_range(10),
            "a deletion is a zero-width range"
        );
        assert_eq!(jwt[0].severity, Some(DiagnosticSeverity::INFORMATION));
        assert_eq!(
            jwt[0].message,
            "Changed by task “Setup JWT middleware” (in progress)"
        );
        let utils = &d[Path::new("/repo/src/utils.rs")];
        assert_eq!(utils[0].severity, Some(DiagnosticSeverity::WARNING));
        assert_eq!(
            utils[0].message,
            "Outside declared scope (auth, api): changed by task “Setup JWT middleware”"
        );
        let lenses = code_lenses(&focus, "src/auth/jwt.rs");
        let titles: Vec<_> = lenses
            .iter()
            .map(|l| l.command.as_ref().unwrap().title.clone())
            .collect();
        assert_eq!(
            titles[0],
            "Task: Setup JWT middleware · in progress · 75% · Running tests…"
        );
        assert_eq!(
            titles[1..3],
            ["Changed by Setup JWT middleware", "Decisions (2)"]
        );
        assert_eq!(lenses.len(), 5);
        assert!(code_lenses(&focus, "README.md").is_empty());
    }

    #[test]
    fn completed_task_keeps_only_review_warnings() {
        let mut t = task(TaskState::Success, &[]);
        t.files_changed = Some(FilesChanged {
            added: vec!["a.rs".into()],
            modified: vec!["b.rs".into()],
            deleted: vec!["c.rs".into()],
            renamed: vec![],
        });
        let clean = Focus {
            task: t.clone(),
            decisions: 0,
            review_issues: vec![],
            files: vec![],
        };
        assert!(diagnostics(&clean).is_empty());
        t.outcome = Some(Outcome {
            summary: "done".into(),
            manual_review_needed: true,
            manual_review_reason: Some("token expiry".into()),
            ..Outcome::default()
        });
        let issue = IssueRecord {
            id: "i".into(),
            issue_type: tandem_core::tasks::IssueType::UnclearRequirement,
            description: "tokens never expire".into(),
            resolution: "left for review".into(),
            requires_human_review: true,
            created_at: String::new(),
        };
        let review = Focus {
            task: t,
            review_issues: vec![issue],
            ..clean
        };
        let d = diagnostics(&review);
        assert_eq!(d.len(), 2);
        let b = &d[Path::new("/repo/b.rs")];
        assert_eq!(codes(b), ["review-needed", "human-review"]);
        assert_eq!(
            b[1].message,
            "Human review required (task “Setup JWT middleware”): tokens never expire"
        );
        assert_eq!(b[1].severity, Some(DiagnosticSeverity::WARNING));
        assert_eq!(
            b[0].message,
            "Manual review needed (task “Setup JWT middleware”): token expiry"
        );
    }
}
