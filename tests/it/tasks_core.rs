//! The task tracker through its Rust API: live changes with line ranges.

use std::sync::Arc;

use tandem_core::store::Store;
use tandem_core::tasks::{NewTask, NewWorkflow, Tasks};

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

/// Workflows newest first, at most `limit`, with every task of each (one started long
/// after its workflow, subtasks nested); a task's record finds its subtasks; the editor's
/// focus follows every write after it was first asked, and reads the same after a reopen.
#[test]
fn list_limit_records_and_focus_follow_every_write() {
    use tandem_core::tasks::{Completion, CompletionStatus, Outcome};

    let home = TestHome::new();
    let a = home.path().join("a");
    let b = home.path().join("b");
    write_files(&a, &[("a.txt", "a\n")]);
    write_files(&b, &[("b.txt", "b\n")]);
    let t = tasks(&home);
    let workflow = |ws: &std::path::Path, name: &str| {
        t.start_workflow(
            ws,
            NewWorkflow {
                name: name.into(),
                ..Default::default()
            },
        )
        .unwrap()
        .workflow_id
    };
    let task = |ws: &std::path::Path, wf: &str, name: &str, parent: Option<&str>| {
        t.start_task(
            ws,
            NewTask {
                workflow_id: wf.into(),
                parent_task_id: parent.map(str::to_string),
                name: name.into(),
                goal: "G".into(),
                ..Default::default()
            },
        )
        .unwrap()
        .task_id
    };
    let complete = |id: &str| {
        t.complete_task(Completion {
            task_id: id.into(),
            status: CompletionStatus::Success,
            outcome: Outcome {
                summary: "done".into(),
                ..Default::default()
            },
            metadata: None,
        })
        .unwrap();
    };
    let focus = |t: &Tasks, ws: &std::path::Path| {
        t.focus(ws, std::time::Duration::from_secs(600))
            .unwrap()
            .map(|task| task.name)
    };

    // Start times are in whole seconds, and ULIDs made in the same millisecond do not sort
    // by time: a pause between starts, so that ids give the order.
    let pause = || std::thread::sleep(std::time::Duration::from_millis(3));
    let w1 = workflow(&a, "W1");
    let first = task(&a, &w1, "first", None);
    assert_eq!(focus(&t, &a).as_deref(), Some("first"));
    assert_eq!(focus(&t, &b), None);
    pause();
    let w2 = workflow(&b, "W2");
    pause();
    let w3 = workflow(&a, "W3");
    pause();
    let late = task(&a, &w1, "late", None);
    pause();
    let sub = task(&a, &w1, "sub", Some(&late));
    pause();
    task(&b, &w2, "other", None);
    pause();
    let in_w3 = task(&a, &w3, "in W3", None);
    assert_eq!(focus(&t, &a).as_deref(), Some("in W3"), "started last");
    assert_eq!(focus(&t, &b).as_deref(), Some("other"));

    let names = |records: &[tandem_core::tasks::WorkflowRecord]| -> Vec<String> {
        records.iter().map(|w| w.name.clone()).collect()
    };
    let listed = t.list(Some(&a), None).unwrap();
    assert_eq!(names(&listed), ["W3", "W1"]);
    let w1_tasks: Vec<&str> = listed[1].tasks.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(w1_tasks, ["first", "late"]);
    assert_eq!(listed[1].tasks[1].subtasks[0].task_id, sub);
    let one = t.list(Some(&a), Some(1)).unwrap();
    assert_eq!(names(&one), ["W3"]);
    assert_eq!(one[0].omitted_tasks, 0);
    let newest = t.list(Some(&a), Some(2)).unwrap();
    assert_eq!(names(&newest), ["W3", "W1"]);
    assert_eq!(newest[1].tasks.len(), 2);
    let newest_task = t.list(Some(&a), Some(1)).unwrap();
    assert_eq!(newest_task[0].tasks[0].name, "in W3");

    assert_eq!(names(&t.list(None, Some(2)).unwrap()), ["W3", "W2"]);
    assert_eq!(names(&t.list(None, None).unwrap()), ["W3", "W2", "W1"]);
    assert!(
        t.list(Some(&home.path().join("none")), None)
            .unwrap()
            .is_empty()
    );
    let record = t.record(&late).unwrap();
    assert_eq!(record.subtasks.len(), 1);
    assert_eq!(record.subtasks[0].name, "sub");
    assert!(t.record(&sub).unwrap().subtasks.is_empty());

    complete(&in_w3);
    assert_eq!(focus(&t, &a).as_deref(), Some("sub"));
    complete(&sub);
    complete(&late);
    assert_eq!(focus(&t, &a).as_deref(), Some("first"), "the one running");
    // Completion times are in whole seconds.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    complete(&first);
    assert_eq!(focus(&t, &a).as_deref(), Some("first"), "completed last");
    let recent_only = t.focus(&a, std::time::Duration::ZERO).unwrap();
    assert!(
        recent_only.is_none_or(|task| task.name == "first"),
        "nothing completed more than 0 s ago but in this second"
    );
    drop(t);

    let reopened = tasks(&home);
    assert_eq!(focus(&reopened, &a).as_deref(), Some("first"));
    assert_eq!(focus(&reopened, &b).as_deref(), Some("other"));

    // A limited list shows each workflow's newest top-level tasks and counts the rest.
    for name in ["b1", "b2", "b3"] {
        pause();
        reopened
            .start_task(
                &b,
                NewTask {
                    workflow_id: w2.clone(),
                    name: name.into(),
                    goal: "G".into(),
                    ..Default::default()
                },
            )
            .unwrap();
    }
    let limited = reopened.list(Some(&b), Some(2)).unwrap();
    let shown: Vec<&str> = limited[0].tasks.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(shown, ["b2", "b3"]);
    assert_eq!(limited[0].omitted_tasks, 2);
    assert_eq!(reopened.list(Some(&b), None).unwrap()[0].tasks.len(), 4);
}
