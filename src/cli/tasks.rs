//! `tandem tasks ...`: workflows and tasks from the shell.

use clap::{Args, Subcommand};

use tandem_core::calls::{
    self,
    params::{TaskShowParams, TasksListParams},
};
use tandem_core::config::Config;
use tandem_core::tasks::{TaskRecord, TaskState, WorkflowRecord};

use super::backend::Backend;

#[derive(Args)]
pub struct TasksArgs {
    #[command(subcommand)]
    command: Option<TasksCommand>,
    /// Every workspace's workflows, not only the current one's.
    #[arg(long, global = true)]
    all: bool,
    /// At most this many workflows, the newest, each with at most this many top-level
    /// tasks, the newest.
    #[arg(long, global = true, value_name = "N")]
    limit: Option<usize>,
    /// Print JSON instead of a tree.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Subcommand)]
enum TasksCommand {
    /// The tree of workflows and tasks (the default).
    List,
    /// One task in full: outcome, files changed, decisions, issues, milestones, subtasks.
    Show {
        /// Task ID (full ULID or a prefix of 5+ characters).
        id: String,
    },
}

pub fn run(config: &Config, args: TasksArgs) -> anyhow::Result<()> {
    let mut backend = Backend::open(config)?;
    match args.command.unwrap_or(TasksCommand::List) {
        TasksCommand::List => {
            let params = TasksListParams {
                all: args.all,
                limit: args.limit,
            };
            let workflows = backend.call(&calls::TASKS_LIST, &params)?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&workflows)?);
            } else if workflows.is_empty() {
                println!(
                    "no workflows{}",
                    if args.all {
                        ""
                    } else {
                        " in this workspace (--all for every workspace)"
                    }
                );
            } else {
                for w in &workflows {
                    print!("{}", render_workflow(w));
                }
            }
        }
        TasksCommand::Show { id } => {
            let record = backend.call(&calls::TASKS_SHOW, &TaskShowParams { id })?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&record)?);
            } else {
                print!("{}", render_task_details(&record));
            }
        }
    }
    Ok(())
}

fn render_workflow(w: &WorkflowRecord) -> String {
    let mut s = format!("● {}  {}  {}\n", w.name, w.workflow_id, w.created_at);
    for t in &w.tasks {
        render_task_line(t, 1, &mut s);
    }
    if w.omitted_tasks > 0 {
        s.push_str(&format!("  … {} earlier tasks\n", w.omitted_tasks));
    }
    s
}

fn render_task_line(t: &TaskRecord, depth: usize, s: &mut String) {
    let mark = match t.status {
        TaskState::Running => "▸",
        TaskState::Success => "✓",
        TaskState::PartialSuccess => "◐",
        TaskState::Failed => "✗",
    };
    let mut line = format!(
        "{}{mark} {} · {} · {}s",
        "  ".repeat(depth),
        t.name,
        state(t.status),
        t.duration_seconds
    );
    if let Some(p) = t.progress {
        line.push_str(&format!(" · {p:.0}%"));
    }
    if t.status == TaskState::Running
        && let Some(m) = &t.last_message
    {
        line.push_str(&format!(" · {m}"));
    }
    if let Some(a) = &t.author {
        line.push_str(&format!(" · by {a}"));
    }
    s.push_str(&format!("{line}  ({})\n", t.task_id));
    for sub in &t.subtasks {
        render_task_line(sub, depth + 1, s);
    }
}

fn state(s: TaskState) -> &'static str {
    match s {
        TaskState::Running => "running",
        TaskState::Success => "success",
        TaskState::PartialSuccess => "partial_success",
        TaskState::Failed => "failed",
    }
}

fn render_task_details(t: &TaskRecord) -> String {
    let mut s = format!(
        "# {}\n{} · {} · {}s",
        t.task_id,
        t.name,
        state(t.status),
        t.duration_seconds
    );
    if let Some(p) = t.progress {
        s.push_str(&format!(" · {p:.0}%"));
    }
    s.push_str(&format!("\ngoal: {}\n", t.goal));
    if !t.areas.is_empty() {
        s.push_str(&format!("areas: {}\n", t.areas.join(", ")));
    }
    s.push_str(&format!(
        "snapshot: {} {}\nstarted: {}\n",
        t.snapshot_type, t.snapshot_id, t.started_at
    ));
    if let Some(a) = &t.author {
        s.push_str(&format!("author: {a}\n"));
    }
    if let Some(o) = &t.outcome {
        s.push_str(&format!("\nsummary: {}\n", o.summary));
        for a in &o.achievements {
            s.push_str(&format!("  + {a}\n"));
        }
        for l in &o.limitations {
            s.push_str(&format!("  - {l}\n"));
        }
        if o.manual_review_needed {
            s.push_str(&format!(
                "manual review needed: {}\n",
                o.manual_review_reason
                    .as_deref()
                    .unwrap_or("(no reason given)")
            ));
        }
    }
    if let Some(f) = &t.files_changed {
        s.push_str("\nfiles changed:\n");
        for (mark, list) in [("A", &f.added), ("M", &f.modified), ("D", &f.deleted)] {
            for p in list {
                s.push_str(&format!("  {mark} {p}\n"));
            }
        }
    }
    if let Some(v) = &t.verification {
        for w in &v.warnings {
            s.push_str(&format!("{w}\n"));
        }
    }
    for d in &t.decisions {
        s.push_str(&format!(
            "\ndecision [{}] {} → {} ({})\n",
            d.category, d.question, d.chosen, d.reasoning
        ));
    }
    for i in &t.issues {
        let review = if i.requires_human_review {
            " [needs review]"
        } else {
            ""
        };
        s.push_str(&format!(
            "\nissue [{}]{review} {} → {}\n",
            i.issue_type, i.description, i.resolution
        ));
    }
    for m in &t.milestones {
        let p = m.progress.map(|p| format!(" {p:.0}%")).unwrap_or_default();
        s.push_str(&format!("milestone{p}: {}\n", m.message));
    }
    if !t.subtasks.is_empty() {
        s.push_str("\nsubtasks:\n");
        for sub in &t.subtasks {
            render_task_line(sub, 1, &mut s);
        }
    }
    s
}
