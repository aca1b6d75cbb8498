//! Task tracking (spec 004) through `tandem mcp`, on real git repositories made here.

use serde_json::{Value, json};

use crate::util::{McpClient, TestHome, git, repo_with, succeeds_json, write_files};

async fn start(c: &McpClient, areas: &[&str]) -> (String, Value) {
    let wf = c.ok("start_workflow", json!({"name": "Add authentication", "description": "JWT auth", "plan": [{"step": "1", "goal": "middleware"}]})).await;
    let wid = wf["workflow_id"].as_str().unwrap().to_string();
    assert!(wf["created_at"].as_str().unwrap().ends_with('Z'));
    let task = c
        .ok("start_task", json!({"workflow_id": wid, "name": "Setup JWT middleware", "goal": "Verify JWT tokens", "areas": areas}))
        .await;
    (wid, task)
}

async fn complete(c: &McpClient, task_id: &str) -> Value {
    c.ok(
        "complete_task",
        json!({"task_id": task_id, "status": "success", "outcome": {"summary": "Done.", "achievements": ["it works"], "limitations": []},
               "metadata": {"packages_added": ["jsonwebtoken"], "tests_status": "passed"}}),
    )
    .await
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn the_specs_worked_example_commits_plus_uncommitted_plus_untracked() {
    let home = TestHome::new();
    let repo = home.path().join("repo");
    repo_with(
        &repo,
        &[
            ("auth.ts", "a\n"),
            ("database.ts", "d\n"),
            ("config.ts", "c\n"),
            ("api.ts", "x\n"),
            ("old-jwt.ts", "old\n"),
            (".gitignore", "*.log\n"),
            ("utils.ts", "u\n"),
        ],
    );
    let head = git(&repo, &["rev-parse", "HEAD"]).trim().to_string();
    let c = home.mcp_in(&repo).await;
    let (_, task) = start(&c, &["auth", "api"]).await;
    assert_eq!(task["snapshot_type"], "git");
    assert_eq!(task["snapshot_id"], head.as_str());
    let task_id = task["task_id"].as_str().unwrap().to_string();

    // Commits during the task...
    write_files(&repo, &[("auth.ts", "a2\n"), ("database.ts", "d2\n")]);
    git(&repo, &["commit", "-qam", "auth and database"]);
    // ...then uncommitted edits, a deletion, an untracked file, an ignored one.
    write_files(
        &repo,
        &[
            ("config.ts", "c2\n"),
            ("src/auth/login.ts", "new\n"),
            ("debug.log", "noise\n"),
        ],
    );
    std::fs::remove_file(repo.join("old-jwt.ts")).unwrap();
    // Staged but not committed.
    write_files(&repo, &[("api.ts", "x2\n")]);
    git(&repo, &["add", "api.ts"]);

    let done = complete(&c, &task_id).await;
    assert_eq!(done["task_id"], task_id.as_str());
    let files = &done["files_changed"];
    assert_eq!(strings(&files["added"]), ["src/auth/login.ts"]);
    assert_eq!(
        strings(&files["modified"]),
        ["api.ts", "auth.ts", "config.ts", "database.ts"]
    );
    assert_eq!(strings(&files["deleted"]), ["old-jwt.ts"]);
    let v = &done["verification"];
    assert_eq!(v["scope_match"], false);
    assert_eq!(
        strings(&v["unexpected_files"]),
        ["config.ts", "database.ts", "old-jwt.ts"]
    );
    assert_eq!(
        strings(&v["warnings"]),
        ["⚠️ 3 file(s) modified outside declared scope (auth, api)"]
    );
    assert!(done["duration_seconds"].as_u64().is_some());

    // Completing twice is refused and changes nothing.
    assert_eq!(
        c.err(
            "complete_task",
            json!({"task_id": task_id, "status": "failed", "outcome": {"summary": "again"}})
        )
        .await,
        "TASK_ALREADY_COMPLETED"
    );
    c.close().await;
}

#[tokio::test]
async fn renames_binaries_and_odd_paths() {
    let home = TestHome::new();
    let repo = home.path().join("repo");
    repo_with(
        &repo,
        &[
            (
                "src/api/old name.rs",
                "fn main() { println!(\"hello world, a long enough file to detect renames\"); }\n",
            ),
            ("keep.txt", "k\n"),
        ],
    );
    let c = home.mcp_in(&repo).await;
    let (_, task) = start(&c, &["src/api/**", "*.bin", "données"]).await;
    git(&repo, &["mv", "src/api/old name.rs", "src/api/new name.rs"]);
    git(&repo, &["commit", "-qm", "rename"]);
    std::fs::write(repo.join("blob.bin"), [0u8, 159, 146, 150, 0, 255]).unwrap();
    write_files(&repo, &[("données/été.txt", "unicode\n")]);
    let done = complete(&c, task["task_id"].as_str().unwrap()).await;
    let files = &done["files_changed"];
    assert_eq!(
        strings(&files["added"]),
        ["blob.bin", "données/été.txt", "src/api/new name.rs"]
    );
    assert_eq!(strings(&files["deleted"]), ["src/api/old name.rs"]);
    assert_eq!(
        files["renamed"],
        json!([{"from": "src/api/old name.rs", "to": "src/api/new name.rs"}])
    );
    assert_eq!(done["verification"]["scope_match"], true, "{done}");
    c.close().await;
}

#[tokio::test]
async fn a_directory_outside_git_uses_checksums() {
    let home = TestHome::new();
    let dir = home.path().join("plain");
    write_files(
        &dir,
        &[
            ("a.txt", "a\n"),
            ("b.txt", "b\n"),
            ("gone.txt", "g\n"),
            (".gitignore", "secret.env\n"),
            ("target/debug/x", "build\n"),
            ("node_modules/m/index.js", "dep\n"),
        ],
    );
    let c = home.mcp_in(&dir).await;
    let (_, task) = start(&c, &[]).await;
    assert_eq!(task["snapshot_type"], "checksum");
    assert_eq!(task["snapshot_id"].as_str().unwrap().len(), 16);
    write_files(
        &dir,
        &[
            ("a.txt", "a changed\n"),
            ("new/c.txt", "c\n"),
            ("secret.env", "KEY=1\n"),
            ("target/debug/y", "more build\n"),
            ("node_modules/m/other.js", "dep\n"),
        ],
    );
    std::fs::remove_file(dir.join("gone.txt")).unwrap();
    // Same content rewritten: not a change.
    write_files(&dir, &[("b.txt", "b\n")]);
    let done = complete(&c, task["task_id"].as_str().unwrap()).await;
    let files = &done["files_changed"];
    assert_eq!(strings(&files["added"]), ["new/c.txt"]);
    assert_eq!(strings(&files["modified"]), ["a.txt"]);
    assert_eq!(strings(&files["deleted"]), ["gone.txt"]);
    assert_eq!(
        done["verification"],
        json!({"scope_match": true, "unexpected_files": [], "warnings": []})
    );
    c.close().await;
}

#[tokio::test]
async fn a_repository_with_no_commit_yet() {
    let home = TestHome::new();
    let repo = home.path().join("fresh");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    let c = home.mcp_in(&repo).await;
    let (_, task) = start(&c, &[]).await;
    assert_eq!(task["snapshot_type"], "git");
    assert_eq!(task["snapshot_id"], "unborn");
    write_files(&repo, &[("first.rs", "1\n"), ("second.rs", "2\n")]);
    git(&repo, &["add", "first.rs"]);
    git(&repo, &["commit", "-qm", "first commit during the task"]);
    let done = complete(&c, task["task_id"].as_str().unwrap()).await;
    assert_eq!(
        strings(&done["files_changed"]["added"]),
        ["first.rs", "second.rs"]
    );
    c.close().await;
}

#[tokio::test]
async fn history_rewritten_during_the_task_is_explained() {
    let home = TestHome::new();
    let repo = home.path().join("repo");
    repo_with(&repo, &[("a.txt", "1\n")]);
    write_files(&repo, &[("a.txt", "2\n")]);
    git(&repo, &["commit", "-qam", "second"]);
    let c = home.mcp_in(&repo).await;
    let (_, task) = start(&c, &[]).await;
    // Reset away the start commit and commit something else.
    git(&repo, &["reset", "-q", "--hard", "HEAD~1"]);
    write_files(&repo, &[("b.txt", "b\n")]);
    git(&repo, &["add", "b.txt"]);
    git(&repo, &["commit", "-qm", "other"]);
    let done = complete(&c, task["task_id"].as_str().unwrap()).await;
    let files = &done["files_changed"];
    assert_eq!(strings(&files["added"]), ["b.txt"]);
    assert_eq!(
        strings(&files["modified"]),
        ["a.txt"],
        "a.txt differs from the start commit"
    );
    let warnings = strings(&done["verification"]["warnings"]);
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("does not descend from the start commit")),
        "{warnings:?}"
    );
    c.close().await;
}

#[tokio::test]
async fn subtasks_logs_and_every_error() {
    let home = TestHome::new();
    let repo = home.path().join("repo");
    repo_with(&repo, &[("x.txt", "x\n")]);
    let c = home.mcp_in(&repo).await;
    let (wid, task) = start(&c, &["x"]).await;
    let parent = task["task_id"].as_str().unwrap().to_string();
    let sub = c
        .ok(
            "start_task",
            json!({"workflow_id": wid, "parent_task_id": parent, "name": "Sub", "goal": "Nested"}),
        )
        .await;
    let sub_id = sub["task_id"].as_str().unwrap().to_string();
    let subsub = c.ok("start_task", json!({"workflow_id": wid, "parent_task_id": sub_id, "name": "Subsub", "goal": "Deeper"})).await;
    assert_eq!(subsub["snapshot_type"], "git");

    let d = c.ok("log_decision", json!({"task_id": parent, "category": "library_choice", "question": "Which JWT library?", "options_considered": ["jsonwebtoken", "jose"], "chosen": "jsonwebtoken", "reasoning": "Mature."})).await;
    assert_eq!(d["logged"], true);
    assert_eq!(d["count"], 1);
    let i = c.ok("log_issue", json!({"task_id": parent, "type": "documentation_gap", "description": "Docs stale", "resolution": "Used examples", "requires_human_review": true})).await;
    assert_eq!(i["count"], 1);
    for n in 1..=6 {
        let m = c.ok("log_milestone", json!({"task_id": parent, "message": format!("step {n}"), "progress": n * 15, "metadata": {"n": n}})).await;
        assert_eq!(m["count"], n);
        assert_eq!(
            m["guidance"].is_string(),
            n > 5,
            "guidance only past 5 milestones: {m}"
        );
    }

    let other_wf = c.ok("start_workflow", json!({"name": "Other"})).await;
    let missing = "01ARZ3NDEKTSV4RRFFQ69G5FAV";
    let cases = [
        (
            "start_task",
            json!({"workflow_id": missing, "name": "n", "goal": "g"}),
            "WORKFLOW_NOT_FOUND",
        ),
        (
            "start_task",
            json!({"workflow_id": other_wf["workflow_id"], "parent_task_id": parent, "name": "n", "goal": "g"}),
            "PARENT_TASK_MISMATCH",
        ),
        (
            "start_task",
            json!({"workflow_id": wid, "parent_task_id": missing, "name": "n", "goal": "g"}),
            "TASK_NOT_FOUND",
        ),
        (
            "start_task",
            json!({"workflow_id": wid, "name": "n"}),
            "INVALID_ARGUMENT",
        ),
        ("start_workflow", json!({"name": " "}), "INVALID_ARGUMENT"),
        (
            "log_decision",
            json!({"task_id": parent, "category": "vibes", "question": "q", "chosen": "c", "reasoning": "r"}),
            "INVALID_CATEGORY",
        ),
        (
            "log_issue",
            json!({"task_id": parent, "type": "bug", "description": "d", "resolution": "r"}),
            "INVALID_ISSUE_TYPE",
        ),
        (
            "log_milestone",
            json!({"task_id": parent, "message": "m", "progress": 150}),
            "INVALID_ARGUMENT",
        ),
        (
            "log_milestone",
            json!({"task_id": missing, "message": "m"}),
            "TASK_NOT_FOUND",
        ),
        (
            "complete_task",
            json!({"task_id": parent, "status": "done", "outcome": {"summary": "s"}}),
            "INVALID_STATUS",
        ),
        (
            "complete_task",
            json!({"task_id": parent, "status": "success", "outcome": {"summary": ""}}),
            "INVALID_ARGUMENT",
        ),
        (
            "complete_task",
            json!({"task_id": parent, "status": "success"}),
            "INVALID_ARGUMENT",
        ),
        (
            "complete_task",
            json!({"task_id": parent, "status": "success", "outcome": {"summary": "s"}, "metadata": {"tests_status": "green"}}),
            "INVALID_ARGUMENT",
        ),
    ];
    for (tool, args, code) in cases {
        assert_eq!(c.err(tool, args.clone()).await, code, "{tool}({args})");
    }
    // None of those left anything half-written: the parent is still running and completes.
    let done = complete(&c, &parent).await;
    assert_eq!(done["verification"]["scope_match"], true);
    assert_eq!(
        c.err(
            "log_milestone",
            json!({"task_id": parent, "message": "late"})
        )
        .await,
        "TASK_ALREADY_COMPLETED"
    );
    // Short ids work like the memory's.
    let sub_done = complete(&c, &sub_id[..20]).await;
    assert_eq!(sub_done["task_id"], sub_id.as_str());
    c.close().await;
}

#[tokio::test]
async fn the_cli_shows_the_tree_and_a_whole_record() {
    let home = TestHome::new();
    let repo = home.path().join("repo");
    repo_with(&repo, &[("auth.ts", "a\n")]);
    let c = home.mcp_in(&repo).await;
    let (wid, task) = start(&c, &["auth"]).await;
    let parent = task["task_id"].as_str().unwrap().to_string();
    let sub = c.ok("start_task", json!({"workflow_id": wid, "parent_task_id": parent, "name": "Write tests", "goal": "Cover it"})).await;
    c.ok(
        "log_milestone",
        json!({"task_id": sub["task_id"], "message": "Running tests…", "progress": 75}),
    )
    .await;
    c.ok("log_decision", json!({"task_id": parent, "category": "architecture", "question": "Where?", "chosen": "middleware", "reasoning": "One place."})).await;
    write_files(&repo, &[("auth.ts", "a2\n")]);
    complete(&c, &parent).await;
    c.close().await;

    let out = home
        .std_command()
        .current_dir(&repo)
        .args(["tasks"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8(out.stdout).unwrap();
    assert!(tree.contains("● Add authentication"), "{tree}");
    assert!(tree.contains("✓ Setup JWT middleware · success"), "{tree}");
    assert!(
        tree.contains("    ▸ Write tests · running") && tree.contains("75% · Running tests…"),
        "{tree}"
    );

    // Another workspace sees nothing unless --all.
    let elsewhere = home.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let out = home
        .std_command()
        .current_dir(&elsewhere)
        .args(["tasks"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("no workflows"));
    let out = home
        .std_command()
        .current_dir(&elsewhere)
        .args(["tasks", "--all", "--json"])
        .output()
        .unwrap();
    let all: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(all[0]["tasks"][0]["subtasks"][0]["name"], "Write tests");

    let out = home
        .std_command()
        .args(["tasks", "show", &parent, "--json"])
        .output()
        .unwrap();
    let record: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(record["status"], "success");
    assert_eq!(record["files_changed"]["modified"], json!(["auth.ts"]));
    assert_eq!(record["decisions"][0]["chosen"], "middleware");
    assert_eq!(record["subtasks"][0]["milestones"][0]["progress"], 75.0);
    let out = home
        .std_command()
        .args(["tasks", "show", &parent])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("  M auth.ts")
            && text.contains("decision [architecture] Where? → middleware"),
        "{text}"
    );
    let out = home
        .std_command()
        .args(["tasks", "show", "01ARZ3NDEKTSV4RRFFQ69G5FAV"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("TASK_NOT_FOUND"));
}

#[tokio::test]
async fn a_detached_head_is_tracked_like_a_branch() {
    let home = TestHome::new();
    let repo = home.path().join("repo");
    repo_with(&repo, &[("a.txt", "1\n"), ("b.txt", "1\n")]);
    git(&repo, &["checkout", "-q", "--detach"]);
    let head = git(&repo, &["rev-parse", "HEAD"]).trim().to_string();
    let c = home.mcp_in(&repo).await;
    let (_, task) = start(&c, &[]).await;
    assert_eq!(task["snapshot_id"], head.as_str());
    write_files(&repo, &[("a.txt", "2\n")]);
    git(&repo, &["commit", "-qam", "detached commit"]);
    write_files(&repo, &[("b.txt", "2\n")]);
    let done = complete(&c, task["task_id"].as_str().unwrap()).await;
    assert_eq!(
        strings(&done["files_changed"]["modified"]),
        ["a.txt", "b.txt"]
    );
    assert_eq!(done["verification"]["warnings"], json!([]));
    c.close().await;
}

/// Issue 12 through the real binary: `complete_task` answers with the memory suggestions
/// its decisions and issues made and says how to review them; `rekall_suggest_entries`
/// lists them with the proposed entries; accepting one adds it (`rekall_show` finds it),
/// rejecting one takes it off the list; the CLI lists them by kind.
#[tokio::test]
async fn completed_tasks_suggest_memory_entries_to_review() {
    let home = TestHome::new();
    let repo = home.path().join("repo");
    repo_with(&repo, &[("auth.ts", "a\n")]);
    let c = home.mcp_in(&repo).await;
    let (wid, task) = start(&c, &["auth"]).await;
    let task_id = task["task_id"].as_str().unwrap();
    c.ok("log_decision", json!({"task_id": task_id, "category": "library_choice",
        "question": "Which JWT library should verify tokens?", "options_considered": ["jsonwebtoken", "jose"],
        "chosen": "jose", "reasoning": "Typed API and works in edge runtimes"}))
        .await;
    c.ok("log_issue", json!({"task_id": task_id, "type": "dependency_conflict",
        "description": "Two versions of the crypto package were installed", "resolution": "Pinned one in the lockfile"}))
        .await;
    write_files(&repo, &[("auth.ts", "a2\n")]);

    let done = complete(&c, task_id).await;
    assert_eq!(strings(&done["files_changed"]["modified"]), ["auth.ts"]);
    let mut suggested: Vec<(String, String)> = done["memory_suggestions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            assert!(s["suggestion_id"].as_str().unwrap().len() == 26, "{s}");
            (
                s["type"].as_str().unwrap().to_string(),
                s["title"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    suggested.sort();
    assert_eq!(
        suggested,
        [
            (
                "decision".to_string(),
                "Which JWT library should verify tokens? → jose".to_string()
            ),
            (
                "pitfall".to_string(),
                "Two versions of the crypto package were installed".to_string()
            ),
        ]
    );
    assert!(
        done["hint"]
            .as_str()
            .unwrap()
            .contains("review them with rekall_suggest_entries"),
        "{done}"
    );

    let review = c.ok("rekall_suggest_entries", json!({"limit": 10})).await;
    assert_eq!(review["total_pending"], 2, "{review}");
    let find = |title: &str| {
        review["suggestions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["entry"]["title"].as_str().unwrap().contains(title))
            .unwrap_or_else(|| panic!("no {title} in {review}"))
            .clone()
    };
    let decision = find("JWT");
    let context = decision["entry"]["context"].as_str().unwrap();
    assert!(
        context.contains(task_id) && context.contains(&wid) && context.contains("modified auth.ts"),
        "{context}"
    );
    assert_eq!(
        decision["entry"]["tags"],
        json!(["library-choice", "add-authentication", "auth"])
    );
    assert_eq!(
        c.err("rekall_suggest_entries", json!({"limit": 0})).await,
        "INVALID_ARGUMENT"
    );

    // Accepted: an entry like any other.
    let accepted = c
        .ok(
            "rekall_accept_suggestion",
            json!({"suggestion_id": decision["id"]}),
        )
        .await;
    assert_eq!(accepted["suggestion_type"], "entry");
    let id = accepted["entry_created"]["id"].as_str().unwrap();
    let shown = c.ok("rekall_show", json!({"id": id})).await;
    assert_eq!(shown["type"], "decision");
    assert_eq!(shown["title"], decision["entry"]["title"]);
    assert_eq!(shown["content"], decision["entry"]["content"]);
    let found = c.ok("rekall_search", json!({"query": "JWT library"})).await;
    assert_eq!(found["results"][0]["id"], id, "{found}");

    // Rejected: off the list.
    let pitfall = find("crypto");
    c.ok(
        "rekall_reject_suggestion",
        json!({"suggestion_id": pitfall["id"]}),
    )
    .await;
    let review = c.ok("rekall_suggest_entries", json!({})).await;
    assert_eq!(review["total_pending"], 0, "{review}");
    c.close().await;

    // The CLI lists entry suggestions by kind (none pending now).
    let mut cmd = home.std_command();
    cmd.args(["memory", "suggestions", "--kind", "entry"]);
    let listed = succeeds_json(cmd);
    assert_eq!(listed["entries"]["total_pending"], 0, "{listed}");
    assert!(listed.get("links").is_none(), "{listed}");
}
