//! The task tracker through its Rust API: live changes with line ranges.

use std::sync::Arc;

use tandem::store::Store;
use tandem::tasks::{NewTask, NewWorkflow, Tasks};

use crate::util::{TestHome, git, repo_with, write_files};

fn tasks(home: &TestHome) -> Tasks {
    Tasks::open(Arc::new(Store::open(&home.tandem_home()).unwrap())).unwrap()
}

#[test]
fn live_changes_give_files_and_line_ranges() {
    let home = TestHome::new();
    let repo = home.path().join("repo");
    let ten: String = (1..=10).map(|i| format!("line {i}\n")).collect();
    repo_with(&repo, &[("src/lib.rs", &ten), ("README.md", "readme\n")]);
    let t = tasks(&home);
    let wf = t
        .start_workflow(
            &repo,
            NewWorkflow {
                name: "W".into(),
                ..Default::default()
            },
        )
        .unwrap();
    let task = t
        .start_task(
            &repo,
            NewTask {
                workflow_id: wf.workflow_id,
                name: "T".into(),
                goal: "G".into(),
                ..Default::default()
            },
        )
        .unwrap();

    // Change line 2 and commit; change line 5 and leave it; add a 3-line file; delete one.
    let mut lines: Vec<String> = ten.lines().map(str::to_string).collect();
    lines[1] = "line two".into();
    write_files(&repo, &[("src/lib.rs", &(lines.join("\n") + "\n"))]);
    git(&repo, &["commit", "-qam", "two"]);
    lines[4] = "line five".into();
    write_files(
        &repo,
        &[
            ("src/lib.rs", &(lines.join("\n") + "\n")),
            ("src/new.rs", "a\nb\nc\n"),
        ],
    );
    std::fs::remove_file(repo.join("README.md")).unwrap();

    let live = t.live_changes(&task.task_id).unwrap();
    type FileSummary = (String, String, Vec<(u32, u32)>);
    let summary: Vec<FileSummary> = live
        .files
        .iter()
        .map(|f| {
            (
                f.path.clone(),
                f.change.clone(),
                f.hunks.iter().map(|h| (h.new_start, h.new_lines)).collect(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("README.md".to_string(), "deleted".to_string(), vec![(0, 0)]),
            (
                "src/lib.rs".to_string(),
                "modified".to_string(),
                vec![(2, 1), (5, 1)]
            ),
            ("src/new.rs".to_string(), "added".to_string(), vec![(1, 3)]),
        ]
    );
    // Unknown ids are clear errors.
    assert_eq!(
        t.live_changes("01ARZ3NDEKTSV4RRFFQ69G5FAV")
            .unwrap_err()
            .code(),
        "TASK_NOT_FOUND"
    );
}
