//! Markdown views of entries and task records for the faces: the documents an editor opens
//! (`tandem://memory/ID`, `tandem://task/ID`), hovers, MCP resources and `tandem memory
//! show`. The core gives plain data; how people read it is decided here, as ripgrep keeps
//! printing out of its searcher.

use std::fmt::Write;

use tandem_core::memory::EntryDetails;
use tandem_core::tasks::{TaskRecord, TaskState};

/// An entry as a readable Markdown document (MCP resources, the editor's documents and
/// hovers, `tandem memory show`).
pub fn entry_markdown(d: &EntryDetails) -> String {
    let mut s = format!("# {}\n\n", d.title);
    s.push_str(&format!(
        "`{}` · {} · {} · confidence {}/5 · {}\n",
        d.id, d.entry_type, d.memory_type, d.confidence, d.status
    ));
    if !d.tags.is_empty() {
        s.push_str(&format!("tags: {}\n", d.tags.join(", ")));
    }
    if let Some(p) = &d.project {
        s.push_str(&format!("project: {p}\n"));
    }
    if let Some(a) = &d.author {
        s.push_str(&format!("author: {a}\n"));
    }
    s.push_str(&format!(
        "created {} · updated {} · accessed {} times\n\n",
        d.created_at, d.updated_at, d.access_count
    ));
    s.push_str(&d.content);
    s.push('\n');
    if !d.links.outgoing.is_empty() || !d.links.incoming.is_empty() {
        s.push_str("\n## Links\n");
        for l in &d.links.outgoing {
            s.push_str(&format!(
                "- {} → [{}] {}\n",
                l.relation_type, l.target_id, l.target_title
            ));
        }
        for l in &d.links.incoming {
            s.push_str(&format!(
                "- ← {} [{}] {}\n",
                l.relation_type, l.source_id, l.source_title
            ));
        }
    }
    if let Some(c) = &d.context {
        s.push_str("\n## Context\n");
        s.push_str(c);
        s.push('\n');
    }
    s
}

/// A task record as a readable Markdown document (the editor's `tandem://task/ID`).
pub fn task_markdown(r: &TaskRecord) -> String {
    let mut s = format!("# Task: {}\n\n", r.name);
    let mut line = format!(
        "`{}` · {} · {}s",
        r.task_id,
        state_label(r.status),
        r.duration_seconds
    );
    if let Some(p) = r.progress {
        let _ = write!(line, " · {p:.0}%");
    }
    if let Some(m) = r
        .last_message
        .as_deref()
        .filter(|_| r.status == TaskState::Running)
    {
        let _ = write!(line, " · {m}");
    }
    let _ = writeln!(s, "{line}\n\n**Goal:** {}\n", r.goal);
    if !r.areas.is_empty() {
        let _ = writeln!(s, "**Areas:** {}\n", r.areas.join(", "));
    }
    let _ = writeln!(
        s,
        "Started {}{} from {} snapshot `{}`{}\n",
        r.started_at,
        r.author
            .as_deref()
            .map(|a| format!(" by {a}"))
            .unwrap_or_default(),
        r.snapshot_type,
        r.snapshot_id,
        r.completed_at
            .as_deref()
            .map(|c| format!(", completed {c}"))
            .unwrap_or_default()
    );
    if let Some(o) = &r.outcome {
        let _ = writeln!(s, "## Outcome\n\n{}\n", o.summary);
        for a in &o.achievements {
            let _ = writeln!(s, "- ✓ {a}");
        }
        for l in &o.limitations {
            let _ = writeln!(s, "- ✗ {l}");
        }
        if o.manual_review_needed {
            let reason = o
                .manual_review_reason
                .as_deref()
                .unwrap_or("no reason given");
            let _ = writeln!(s, "\n**Manual review needed:** {reason}");
        }
        for n in &o.next_steps {
            let _ = writeln!(s, "- next: {n}");
        }
        s.push('\n');
    }
    if let Some(f) = &r.files_changed {
        let _ = writeln!(s, "## Files changed\n");
        for (mark, list) in [("A", &f.added), ("M", &f.modified), ("D", &f.deleted)] {
            for p in list {
                let _ = writeln!(s, "- {mark} {p}");
            }
        }
        for r in &f.renamed {
            let _ = writeln!(s, "- R {} → {}", r.from, r.to);
        }
        s.push('\n');
    }
    if let Some(v) = &r.verification
        && !v.warnings.is_empty()
    {
        let _ = writeln!(s, "## Warnings\n");
        for w in &v.warnings {
            let _ = writeln!(s, "- {w}");
        }
        s.push('\n');
    }
    let _ = writeln!(s, "## Decisions\n");
    if r.decisions.is_empty() {
        let _ = writeln!(s, "(none)");
    }
    for d in &r.decisions {
        let _ = writeln!(
            s,
            "### [{}] {}\n\nChosen: **{}**. {}",
            d.category, d.question, d.chosen, d.reasoning
        );
        if !d.options_considered.is_empty() {
            let _ = writeln!(
                s,
                "Options considered: {}.",
                d.options_considered.join(", ")
            );
        }
        if let Some(t) = &d.trade_offs {
            let _ = writeln!(s, "Trade-offs: {t}");
        }
        s.push('\n');
    }
    if !r.issues.is_empty() {
        let _ = writeln!(s, "\n## Issues\n");
        for i in &r.issues {
            let review = if i.requires_human_review {
                " **(needs human review)**"
            } else {
                ""
            };
            let _ = writeln!(
                s,
                "- [{}]{review} {} → {}",
                i.issue_type, i.description, i.resolution
            );
        }
    }
    if !r.milestones.is_empty() {
        let _ = writeln!(s, "\n## Milestones\n");
        for m in &r.milestones {
            let p = m
                .progress
                .map(|p| format!(" ({p:.0}%)"))
                .unwrap_or_default();
            let _ = writeln!(s, "- {}{p} {}", m.created_at, m.message);
        }
    }
    if !r.subtasks.is_empty() {
        let _ = writeln!(s, "\n## Subtasks\n");
        for t in &r.subtasks {
            let _ = writeln!(
                s,
                "- {} · {} (`{}`)",
                t.name,
                state_label(t.status),
                t.task_id
            );
        }
    }
    s
}

/// How editors say where a task is in its life.
pub fn state_label(state: TaskState) -> &'static str {
    match state {
        TaskState::Running => "in progress",
        TaskState::Success => "success",
        TaskState::PartialSuccess => "partial success",
        TaskState::Failed => "failed",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn task(overrides: serde_json::Value) -> TaskRecord {
        let mut record = json!({
            "task_id": "01TASK", "workflow_id": "01FLOW", "parent_task_id": null,
            "name": "Setup JWT", "goal": "Sign tokens", "areas": [], "status": "running",
            "snapshot_type": "git", "snapshot_id": "abc123", "started_at": "2025-01-01T00:00:00Z",
            "completed_at": null, "duration_seconds": 42, "progress": null, "last_message": null,
            "outcome": null, "metadata": null, "files_changed": null, "verification": null,
            "decisions": [], "issues": [], "milestones": [], "subtasks": [],
        });
        for (k, v) in overrides.as_object().unwrap() {
            record[k] = v.clone();
        }
        serde_json::from_value(record).unwrap()
    }

    #[test]
    fn a_running_task_shows_its_progress_and_last_message() {
        let md = task_markdown(&task(json!({
            "progress": 75.0, "last_message": "Running tests", "areas": ["src/auth"],
        })));
        assert_eq!(
            md,
            "# Task: Setup JWT\n\n\
             `01TASK` · in progress · 42s · 75% · Running tests\n\n\
             **Goal:** Sign tokens\n\n\
             **Areas:** src/auth\n\n\
             Started 2025-01-01T00:00:00Z from git snapshot `abc123`\n\n\
             ## Decisions\n\n(none)\n"
        );
    }

    #[test]
    fn a_completed_task_shows_its_outcome_files_and_logs() {
        let md = task_markdown(&task(json!({
            "status": "partial_success", "completed_at": "2025-01-01T00:01:00Z",
            "last_message": "not shown once completed",
            "outcome": {"summary": "Half done", "achievements": ["signing"],
                        "limitations": ["no refresh"], "manual_review_needed": true,
                        "manual_review_reason": "expiry", "next_steps": ["refresh"]},
            "files_changed": {"added": ["a.rs"], "modified": ["b.rs"], "deleted": [],
                              "renamed": [{"from": "c.rs", "to": "d.rs"}]},
            "verification": {"scope_match": false, "unexpected_files": ["b.rs"],
                             "warnings": ["b.rs is outside the areas"]},
            "decisions": [{"id": "1", "category": "architecture", "question": "Which lib?",
                           "options_considered": ["jose", "jwt"], "chosen": "jwt",
                           "reasoning": "Smaller.", "trade_offs": "Fewer algorithms",
                           "created_at": "t"}],
            "issues": [{"id": "2", "type": "bug_encountered", "description": "Clock skew",
                        "resolution": "Leeway", "requires_human_review": true, "created_at": "t"}],
            "milestones": [{"id": "3", "message": "Half way", "progress": 50.0, "created_at": "t1"}],
            "subtasks": [task(json!({"task_id": "01SUB", "name": "Keys", "status": "success"}))],
        })));
        assert_eq!(
            md,
            "# Task: Setup JWT\n\n\
             `01TASK` · partial success · 42s\n\n\
             **Goal:** Sign tokens\n\n\
             Started 2025-01-01T00:00:00Z from git snapshot `abc123`, completed 2025-01-01T00:01:00Z\n\n\
             ## Outcome\n\nHalf done\n\n\
             - ✓ signing\n- ✗ no refresh\n\n**Manual review needed:** expiry\n- next: refresh\n\n\
             ## Files changed\n\n- A a.rs\n- M b.rs\n- R c.rs → d.rs\n\n\
             ## Warnings\n\n- b.rs is outside the areas\n\n\
             ## Decisions\n\n\
             ### [architecture] Which lib?\n\nChosen: **jwt**. Smaller.\n\
             Options considered: jose, jwt.\nTrade-offs: Fewer algorithms\n\n\
             \n## Issues\n\n- [bug_encountered] **(needs human review)** Clock skew → Leeway\n\
             \n## Milestones\n\n- t1 (50%) Half way\n\
             \n## Subtasks\n\n- Keys · success (`01SUB`)\n"
        );
    }

    #[test]
    fn an_entry_shows_its_facts_links_and_context() {
        let entry: EntryDetails = serde_json::from_value(json!({
            "id": "01ENTRY", "type": "bug", "title": "Token expiry", "content": "Use UTC.",
            "tags": ["jwt", "time"], "project": "api", "confidence": 4, "status": "active",
            "memory_type": "episodic", "created_at": "c", "updated_at": "u", "access_count": 2,
            "consolidation_score": 0.5, "embeddings": {"summary": false, "context": false},
            "links": {
                "outgoing": [{"target_id": "01B", "target_title": "Clocks", "relation_type": "related"}],
                "incoming": [{"source_id": "01C", "source_title": "Old", "relation_type": "supersedes"}],
            },
            "context": "while fixing login",
        }))
        .unwrap();
        assert_eq!(
            entry_markdown(&entry),
            "# Token expiry\n\n\
             `01ENTRY` · bug · episodic · confidence 4/5 · active\n\
             tags: jwt, time\nproject: api\n\
             created c · updated u · accessed 2 times\n\n\
             Use UTC.\n\n## Links\n- related → [01B] Clocks\n- ← supersedes [01C] Old\n\
             \n## Context\nwhile fixing login\n"
        );
    }
}
