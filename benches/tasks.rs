//! Task-tracking benchmark: prints figures, asserts nothing about time.
//!
//! On a generated repository of 50,000 files (`TANDEM_BENCH_FILES` to change) with a few
//! hundred changed (some committed during the task, some not, some added and deleted), it
//! measures start_task, complete_task and the live "changed hunks" query, beside
//! `git status --porcelain` + `git diff --name-status START` run on the same repository,
//! and the checksum snapshot of the same tree outside git.
//!
//! Run with `cargo bench --bench tasks`.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use tandem_core::store::Store;

// The tests' hermetic `git` runner.
#[allow(dead_code)]
#[path = "../tests/it/util.rs"]
mod util;
use tandem_core::tasks::{
    Completion, CompletionStatus, NewTask, NewWorkflow, Outcome, TaskCompleted, Tasks,
};
use util::git;

mod common;
use common::{file_path, generate, section};

const RUNS: usize = 7;

fn main() {
    let files: usize = std::env::var("TANDEM_BENCH_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50_000);
    let dir = tempfile::Builder::new()
        .prefix("tandem-bench-tasks")
        .tempdir()
        .unwrap();
    let repo = dir.path().join("repo");
    eprintln!("bench: writing {files} files");
    generate(&repo, files);
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "initial"]);
    let start_commit = git(&repo, &["rev-parse", "HEAD"]).trim().to_string();

    let tasks = Tasks::open(Arc::new(Store::open(&dir.path().join("home")).unwrap())).unwrap();
    let wf = tasks
        .start_workflow(
            &repo,
            NewWorkflow {
                name: "bench".into(),
                ..Default::default()
            },
        )
        .unwrap();
    let new_task = || NewTask {
        workflow_id: wf.workflow_id.clone(),
        name: "bench task".into(),
        goal: "measure".into(),
        areas: vec!["d0001".into(), "*.txt".into()],
        ..Default::default()
    };
    let start = median(|| {
        tasks.start_task(&repo, new_task()).unwrap();
    });
    let task = tasks.start_task(&repo, new_task()).unwrap();

    eprintln!("bench: changing files");
    // 300 modified (100 of them committed), 50 added, 50 deleted.
    for i in 0..300 {
        let p = repo.join(file_path(i * 97 % files));
        let mut text = std::fs::read_to_string(&p).unwrap();
        text.push_str("changed line\n");
        std::fs::write(p, text).unwrap();
        if i == 99 {
            git(&repo, &["commit", "-q", "-am", "first hundred"]);
        }
    }
    for i in 0..50 {
        std::fs::write(repo.join(format!("d0001/new{i}.rs")), "fn new() {}\n").unwrap();
        std::fs::remove_file(repo.join(file_path(i * 131 % files + 1))).ok();
    }

    let changes = median(|| {
        let t = tasks.task(&task.task_id).unwrap();
        tasks.changes(&t).unwrap();
    });
    let live = median(|| {
        tasks.live_changes(&task.task_id).unwrap();
    });
    let git_cli = median(|| {
        git(&repo, &["status", "--porcelain"]);
        git(&repo, &["diff", "--name-status", &start_commit]);
    });
    let (done, complete_time) = complete(&tasks, &task.task_id);
    let changed = done.files_changed.added.len()
        + done.files_changed.modified.len()
        + done.files_changed.deleted.len();

    eprintln!("bench: the same tree outside git");
    let plain = dir.path().join("plain");
    generate(&plain, files);
    let wf2 = tasks
        .start_workflow(
            &plain,
            NewWorkflow {
                name: "plain".into(),
                ..Default::default()
            },
        )
        .unwrap();
    let t = Instant::now();
    let plain_task = tasks
        .start_task(
            &plain,
            NewTask {
                workflow_id: wf2.workflow_id,
                name: "t".into(),
                goal: "g".into(),
                ..Default::default()
            },
        )
        .unwrap();
    let checksum_start = t.elapsed();
    std::fs::write(plain.join(file_path(7)), "changed\n").unwrap();
    let (plain_done, checksum_complete) = complete(&tasks, &plain_task.task_id);
    assert_eq!(plain_done.files_changed.modified.len(), 1);

    let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1e3);
    let ratio = |ours: Duration| format!("{:.2}x", ours.as_secs_f64() / git_cli.as_secs_f64());
    section(
        "Task tracking",
        &format!(
            "`cargo bench --bench tasks` (`TANDEM_BENCH_FILES`). A {files}-file git repository \
             with {changed} files changed, the median of {RUNS}, against git's own CLI on the \
             same repository."
        ),
    );
    println!("| figure | time | vs git status + git diff --name-status |");
    println!("|---|---|---|");
    println!("| start_task (git snapshot) | {} | |", ms(start));
    println!(
        "| files changed since start (complete_task's diff) | {} | {} |",
        ms(changes),
        ratio(changes)
    );
    println!(
        "| complete_task (one run, diff + scope + write) | {} | {} |",
        ms(complete_time),
        ratio(complete_time)
    );
    println!("| live changed hunks | {} | {} |", ms(live), ratio(live));
    println!(
        "| git status --porcelain + git diff --name-status | {} | 1.00x |",
        ms(git_cli)
    );
    println!(
        "| start_task outside git (checksum of every file) | {} | |",
        ms(checksum_start)
    );
    println!(
        "| complete_task outside git (size+mtime shortcut) | {} | |",
        ms(checksum_complete)
    );
    println!(
        "\nTarget: within 1.5x of git's own CLI. Completing against a checksum snapshot \
         re-reads only the files whose size or modification time changed."
    );
}

/// Completes a task successfully; returns the answer and how long it took.
fn complete(tasks: &Tasks, task_id: &str) -> (TaskCompleted, Duration) {
    let t = Instant::now();
    let done = tasks
        .complete_task(Completion {
            task_id: task_id.to_string(),
            status: CompletionStatus::Success,
            outcome: Outcome {
                summary: "done".into(),
                ..Default::default()
            },
            metadata: None,
        })
        .unwrap();
    (done, t.elapsed())
}

fn median(mut f: impl FnMut()) -> Duration {
    let mut samples: Vec<Duration> = (0..RUNS)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    samples.sort();
    samples[RUNS / 2]
}
