//! Bad input through the real binary: fields past their size limits and paths that would
//! leave the workspace are refused with `INVALID_ARGUMENT` naming the field (and the limit),
//! and nothing is stored; symlinks and `tandem://` URIs never reach outside.

use rmcp::model::ReadResourceRequestParams;
use serde_json::{Value, json};

use crate::util::{McpClient, TestHome, repo_with, succeeds, succeeds_json};

/// Calls a tool that must fail with `INVALID_ARGUMENT` naming `field`; returns the error.
async fn refused(c: &McpClient, tool: &str, args: Value, field: &str) -> Value {
    let (is_error, v) = c.call(tool, args).await;
    assert!(is_error, "{tool} should fail on {field}");
    let error = &v["error"];
    assert_eq!(error["code"], "INVALID_ARGUMENT", "{error}");
    assert_eq!(error["details"]["field"], field, "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains(&format!("'{field}'")), "{message}");
    error.clone()
}

/// Every workflow the CLI lists, over all workspaces.
fn workflows(home: &TestHome) -> Vec<Value> {
    let mut cmd = home.std_command();
    cmd.args(["tasks", "--all"]);
    succeeds_json(cmd).as_array().unwrap().clone()
}

#[tokio::test]
async fn oversized_fields_are_refused_and_nothing_is_stored() {
    let home = TestHome::new();
    let c = home.mcp().await;
    let five_mb = "x".repeat(5 * 1024 * 1024);

    let e = refused(
        &c,
        "rekall_add",
        json!({"type": "bug", "title": "Huge content", "content": five_mb}),
        "content",
    )
    .await;
    assert_eq!(e["details"]["limit"], "100000 characters");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("5242880 characters")
    );

    let tags: Vec<String> = (0..5_000).map(|i| format!("tag-{i}")).collect();
    let e = refused(
        &c,
        "rekall_add",
        json!({"type": "bug", "title": "Many tags", "tags": tags}),
        "tags",
    )
    .await;
    assert_eq!(e["details"]["limit"], "50 items");
    refused(
        &c,
        "rekall_add",
        json!({"type": "bug", "title": "Long tag", "tags": ["ok", "t".repeat(101)]}),
        "tags[1]",
    )
    .await;
    refused(
        &c,
        "rekall_add",
        json!({"type": "bug", "title": "Huge context", "content": "c", "context": five_mb}),
        "context",
    )
    .await;
    refused(
        &c,
        "rekall_search",
        json!({"query": "q".repeat(10_001)}),
        "query",
    )
    .await;

    let e = refused(
        &c,
        "start_workflow",
        json!({"name": "w".repeat(100_000)}),
        "name",
    )
    .await;
    assert_eq!(e["details"]["limit"], "200 characters");
    let plan: Vec<Value> = (0..201)
        .map(|i| json!({"step": format!("step {i}"), "goal": "g"}))
        .collect();
    refused(
        &c,
        "start_workflow",
        json!({"name": "Plan too long", "plan": plan}),
        "plan",
    )
    .await;

    // Within the limits everything is accepted: the spec keeps a long context's first 8,000
    // characters, and a long (not huge) content is kept whole.
    let content = "y".repeat(100_000);
    let added = c
        .ok(
            "rekall_add",
            json!({"type": "bug", "title": "Long but fine", "content": content,
                   "context": "z".repeat(50_000), "tags": vec!["t"; 50]}),
        )
        .await;
    let id = added["id"].as_str().unwrap();
    let shown = c.ok("rekall_show", json!({"id": id})).await;
    assert_eq!(shown["content"].as_str().unwrap().len(), 100_000);

    let workflow = c
        .ok(
            "start_workflow",
            json!({"name": "Limits", "description": "d"}),
        )
        .await;
    let wf = workflow["workflow_id"].as_str().unwrap();
    let task = c
        .ok(
            "start_task",
            json!({"workflow_id": wf, "name": "t", "goal": "g"}),
        )
        .await;
    let task_id = task["task_id"].as_str().unwrap();
    refused(
        &c,
        "log_milestone",
        json!({"task_id": task_id, "message": "m", "metadata": {"blob": "b".repeat(2 * 1024 * 1024)}}),
        "metadata",
    )
    .await;
    refused(
        &c,
        "log_decision",
        json!({"task_id": task_id, "category": "architecture", "question": "q",
               "chosen": "c", "reasoning": "r".repeat(20_001)}),
        "reasoning",
    )
    .await;
    refused(
        &c,
        "complete_task",
        json!({"task_id": task_id, "status": "success",
               "outcome": {"summary": "s", "achievements": ["a", "b".repeat(2_001)]}}),
        "outcome.achievements[1]",
    )
    .await;
    c.close().await;

    // Nothing refused was stored: one entry, one workflow, the task still running.
    let mut cmd = home.std_command();
    cmd.args(["memory", "export"]);
    let export = succeeds(cmd);
    let entries: Vec<&str> = export
        .lines()
        .filter(|l| l.contains(r#""record":"entry""#))
        .collect();
    assert_eq!(entries.len(), 1, "{export:.300}");
    assert!(entries[0].contains("Long but fine"));
    let listed = workflows(&home);
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["name"], "Limits");
    let task_json = serde_json::to_string(&listed[0]).unwrap();
    assert!(!task_json.contains("bbbb"), "{task_json:.300}");
}

#[tokio::test]
async fn an_import_past_a_limit_names_the_line_and_imports_nothing() {
    let home = TestHome::new();
    let fine = json!({"record": "entry", "id": "01JAAAAAAAAAAAAAAAAAAAAAAA", "type": "bug",
        "title": "Fine", "content": "ok", "confidence": 3, "memory_type": "episodic",
        "status": "active", "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z"});
    let mut huge = fine.clone();
    huge["id"] = json!("01JBBBBBBBBBBBBBBBBBBBBBBB");
    huge["content"] = json!("h".repeat(200_000));
    let file = home.path().join("in.jsonl");
    std::fs::write(&file, format!("{fine}\n{huge}\n")).unwrap();

    let out = home
        .std_command()
        .args(["memory", "import"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("line 2"), "{stderr}");
    assert!(stderr.contains("'content'"), "{stderr}");
    assert!(stderr.contains("100000 characters"), "{stderr}");

    let mut cmd = home.std_command();
    cmd.args(["memory", "export"]);
    assert!(
        !succeeds(cmd).contains("Fine"),
        "the good line was not imported either"
    );
}

#[tokio::test]
async fn paths_outside_the_workspace_are_refused_or_contained() {
    let home = TestHome::new();
    let ws = home.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    repo_with(&ws, &[("src/main.rs", "fn main() {}\n")]);
    let outside = home.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "TOP-SECRET-TEXT\n").unwrap();

    let c = home.mcp_in(&ws).await;
    let wf = c.ok("start_workflow", json!({"name": "Paths"})).await;
    let wf = wf["workflow_id"].as_str().unwrap();
    for (areas, field) in [
        (json!(["src", "../outside"]), "areas[1]"),
        (json!(["/etc"]), "areas[0]"),
        (json!(["src/../../outside/**"]), "areas[0]"),
    ] {
        let e = refused(
            &c,
            "start_task",
            json!({"workflow_id": wf, "name": "t", "goal": "g", "areas": areas}),
            field,
        )
        .await;
        assert!(e["message"].as_str().unwrap().contains("workspace"), "{e}");
    }
    let task = c
        .ok(
            "start_task",
            json!({"workflow_id": wf, "name": "Symlinks", "goal": "g", "areas": ["src"]}),
        )
        .await;
    let task_id = task["task_id"].as_str().unwrap();

    // A symlink to a file outside the workspace, and a change inside it: the task sees the
    // link (its target's path), never the outside file's text.
    std::os::unix::fs::symlink(outside.join("secret.txt"), ws.join("src/leak.txt")).unwrap();
    std::fs::write(ws.join("src/main.rs"), "fn main() { println!(\"hi\"); }\n").unwrap();
    let done = c
        .ok(
            "complete_task",
            json!({"task_id": task_id, "status": "success", "outcome": {"summary": "s"}}),
        )
        .await;
    let answer = done.to_string();
    assert!(answer.contains("src/main.rs"), "{answer}");
    assert!(!answer.contains("TOP-SECRET-TEXT"), "{answer}");

    // `tandem://` URIs name entries by ID; a path in their place reads nothing.
    for uri in [
        "tandem://memory/../../../../etc/passwd",
        "tandem://memory/%2e%2e%2f%2e%2e%2fetc%2fpasswd",
        "tandem://task/../../etc/passwd",
    ] {
        let read = c
            .client
            .read_resource(ReadResourceRequestParams::new(uri))
            .await;
        match read {
            Err(e) => assert!(!e.to_string().contains("root:"), "{e}"),
            Ok(r) => panic!("{uri} read {r:?}"),
        }
    }
    c.close().await;
    let mut cmd = home.std_command();
    cmd.args(["tasks", "show", task_id]);
    let shown = succeeds(cmd);
    assert!(shown.contains("src/main.rs"), "{shown}");
    assert!(!shown.contains("TOP-SECRET-TEXT"), "{shown}");
}

#[tokio::test]
async fn a_task_outside_git_does_not_follow_symlinks_out() {
    let home = TestHome::new();
    let ws = home.path().join("plain");
    std::fs::create_dir_all(ws.join("docs")).unwrap();
    std::fs::write(ws.join("docs/a.md"), "a\n").unwrap();
    let outside = home.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("big.txt"), "outside\n").unwrap();

    let c = home.mcp_in(&ws).await;
    let wf = c.ok("start_workflow", json!({"name": "Plain"})).await;
    let task = c
        .ok(
            "start_task",
            json!({"workflow_id": wf["workflow_id"], "name": "t", "goal": "g"}),
        )
        .await;
    std::os::unix::fs::symlink(&outside, ws.join("docs/linked")).unwrap();
    std::fs::write(outside.join("big.txt"), "changed outside\n").unwrap();
    std::fs::write(ws.join("docs/a.md"), "b\n").unwrap();
    let done = c
        .ok(
            "complete_task",
            json!({"task_id": task["task_id"], "status": "success", "outcome": {"summary": "s"}}),
        )
        .await;
    let answer = done.to_string();
    assert!(answer.contains("docs/a.md"), "{answer}");
    assert!(!answer.contains("big.txt"), "{answer}");
    c.close().await;
}
