//! `tandem mcp`, the real binary, driven over stdio by the rmcp client.

use rmcp::model::{ClientCapabilities, Implementation, ProtocolVersion, ReadResourceRequestParams};
use serde_json::json;

use crate::util::{McpClient, TestHome};

const TOOLS: [&str; 21] = [
    "rekall_help",
    "rekall_search",
    "rekall_add",
    "rekall_show",
    "rekall_suggest_links",
    "rekall_suggest_generalize",
    "rekall_suggest_entries",
    "rekall_link",
    "rekall_accept_suggestion",
    "rekall_reject_suggestion",
    "start_workflow",
    "start_task",
    "log_decision",
    "log_issue",
    "log_milestone",
    "complete_task",
    "mcp_environment",
    "mcp_discover",
    "mcp_activate",
    "mcp_deactivate",
    "mcp_call",
];

async fn add(c: &McpClient, t: &str, title: &str, content: &str, tags: &[&str]) -> String {
    let out = c
        .ok(
            "rekall_add",
            json!({"type": t, "title": title, "content": content, "tags": tags}),
        )
        .await;
    out["id"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn initialize_lists_every_tool_with_schemas_and_instructions() {
    let home = TestHome::new();
    let c = home.mcp().await;
    let info = c.client.peer_info().unwrap();
    assert_eq!(info.server_info.as_ref().unwrap().name, "tandem");
    assert!(
        info.instructions
            .as_deref()
            .unwrap()
            .contains("rekall_help()")
    );
    let tools = c.client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, TOOLS);
    for t in &tools {
        // mcp_call answers with what the downstream tool answers.
        if t.name != "mcp_call" {
            assert!(t.output_schema.is_some(), "{} has no outputSchema", t.name);
        }
        assert!(t.description.is_some());
    }
    // What each schema says: tool_schemas.rs, against the specs' own JSON.
    c.close().await;
}

#[tokio::test]
async fn every_tool_end_to_end() {
    let home = TestHome::new();
    let c = home.mcp().await;

    let help = c.ok("rekall_help", json!({})).await;
    assert_eq!(
        help["topics_available"],
        json!(["search", "capture", "links", "citations", "all"])
    );
    for section in [
        "Search workflow",
        "Capture workflow",
        "Links",
        "Citations",
        "Proactive triggers",
    ] {
        assert!(
            help["guide"].as_str().unwrap().contains(section),
            "guide lacks {section}"
        );
    }
    let only_links = c.ok("rekall_help", json!({"topic": "links"})).await;
    assert!(
        !only_links["guide"]
            .as_str()
            .unwrap()
            .contains("Capture workflow")
    );

    let cors = add(&c, "bug", "Fix CORS Safari header", "Safari rejects some CORS headers on preflight; send Access-Control-Allow-Headers explicitly.", &["CORS", "Safari"]).await;
    let added = c
        .ok(
            "rekall_add",
            json!({
                "type": "bug", "title": "CORS preflight fails on Safari iOS",
                "content": "Safari iOS rejects CORS preflight headers; list Access-Control-Allow-Headers explicitly.",
                "tags": ["cors", "safari"], "context": "user: login broken on iPhone",
                "project": "webapp", "confidence": 4, "memory_type": "episodic"
            }),
        )
        .await;
    assert_eq!(added["created"], true);
    assert_eq!(added["embeddings_calculated"], false);
    assert_eq!(added["type"], "bug");
    assert_eq!(added["similar_entries"][0]["id"], cors.as_str());
    assert!(added["suggestions_created"].as_u64().unwrap() >= 1);
    let second = added["id"].as_str().unwrap().to_string();

    let found = c
        .ok(
            "rekall_search",
            json!({"query": "safari preflight", "context": "iPhone login", "limit": 3}),
        )
        .await;
    assert_eq!(found["query"], "safari preflight");
    assert_eq!(found["total"], 2);
    assert_eq!(
        found["results"][0]["id"],
        second.as_str(),
        "context favours the iOS entry: {found}"
    );
    let r = &found["results"][0];
    for field in ["id", "type", "title", "score", "snippet", "tags"] {
        assert!(r.get(field).is_some(), "search result lacks {field}");
    }
    assert!(r.get("content").is_none(), "search results are compact");
    assert!(found["hint"].as_str().unwrap().contains("rekall_show"));
    let filtered = c
        .ok(
            "rekall_search",
            json!({"query": "safari", "type": "pattern"}),
        )
        .await;
    assert_eq!(filtered["total"], 0);

    let shown = c.ok("rekall_show", json!({"id": &second[..12]})).await;
    assert_eq!(shown["id"], second.as_str());
    assert_eq!(shown["project"], "webapp");
    assert_eq!(shown["confidence"], 4);
    assert_eq!(shown["access_count"], 1);
    assert_eq!(
        shown["embeddings"],
        json!({"summary": false, "context": false})
    );

    let links = c.ok("rekall_suggest_links", json!({"limit": 5})).await;
    assert_eq!(links["total_pending"], 1);
    let s = &links["suggestions"][0];
    assert_eq!(s["entry_a"]["id"], second.as_str());
    assert_eq!(s["entry_b"]["id"], cors.as_str());
    // Said when listed: how they are similar, and the words they share.
    let reason = s["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("Lexical similarity ")
            && reason.contains("with a bug entry; shared terms: ")
            && reason.contains("cors"),
        "{reason}"
    );
    let accepted = c
        .ok(
            "rekall_accept_suggestion",
            json!({"suggestion_id": s["id"]}),
        )
        .await;
    assert_eq!(accepted["accepted"], true);
    assert_eq!(accepted["suggestion_type"], "link");
    assert_eq!(
        accepted["link_created"],
        json!({"source_id": second, "target_id": cors})
    );
    assert_eq!(accepted["generalize_command"], json!(null));
    let shown = c.ok("rekall_show", json!({"id": cors})).await;
    assert_eq!(shown["links"]["incoming"][0]["source_id"], second.as_str());
    assert_eq!(shown["links"]["incoming"][0]["relation_type"], "related");

    let third = add(
        &c,
        "bug",
        "Safari CORS headers rejected again",
        "Safari rejects CORS preflight headers again on iOS; list the allowed headers explicitly.",
        &["cors", "safari"],
    )
    .await;
    let gens = c.ok("rekall_suggest_generalize", json!({})).await;
    assert_eq!(gens["total_pending"], 1, "{gens}");
    assert_eq!(
        gens["suggestions"][0]["entries"].as_array().unwrap().len(),
        3
    );
    let reason = gens["suggestions"][0]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("3 similar bug entries (mean similarity ")
            && reason.contains("safari")
            && reason.ends_with("; consider one semantic entry"),
        "{reason}"
    );
    let accepted = c
        .ok(
            "rekall_accept_suggestion",
            json!({"suggestion_id": gens["suggestions"][0]["id"]}),
        )
        .await;
    assert_eq!(accepted["suggestion_type"], "generalize");
    let command = accepted["generalize_command"].as_str().unwrap();
    assert!(command.starts_with("tandem memory generalize") && command.contains(&third));

    let pending = c.ok("rekall_suggest_links", json!({})).await;
    let id = pending["suggestions"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let rejected = c
        .ok("rekall_reject_suggestion", json!({"suggestion_id": id}))
        .await;
    assert_eq!(rejected, json!({"rejected": true, "suggestion_id": id}));
    let after = c.ok("rekall_suggest_links", json!({})).await;
    assert!(
        after["suggestions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["id"] != id.as_str())
    );

    let linked = c
        .ok(
            "rekall_link",
            json!({"source_id": third, "target_id": cors, "relation_type": "supersedes"}),
        )
        .await;
    assert_eq!(linked["created"], true);
    assert_eq!(linked["relation_type"], "supersedes");
    assert_eq!(linked["source"]["id"], third.as_str());
    assert_eq!(linked["target"]["title"], "Fix CORS Safari header");
    assert!(linked["link_id"].as_str().unwrap().len() == 26);
    c.close().await;
}

#[tokio::test]
async fn every_error_code_as_a_tool_error() {
    let home = TestHome::new();
    let c = home.mcp().await;
    let a = add(&c, "bug", "First entry", "alpha", &[]).await;
    let b = add(&c, "pattern", "Second entry", "beta", &[]).await;
    c.ok("rekall_link", json!({"source_id": a, "target_id": b}))
        .await;
    let missing = "01ARZ3NDEKTSV4RRFFQ69G5FAV";
    let cases = [
        ("rekall_show", json!({"id": missing}), "ENTRY_NOT_FOUND"),
        (
            "rekall_link",
            json!({"source_id": a, "target_id": missing}),
            "ENTRY_NOT_FOUND",
        ),
        (
            "rekall_accept_suggestion",
            json!({"suggestion_id": missing}),
            "SUGGESTION_NOT_FOUND",
        ),
        (
            "rekall_reject_suggestion",
            json!({"suggestion_id": "nope"}),
            "SUGGESTION_NOT_FOUND",
        ),
        (
            "rekall_add",
            json!({"type": "bugg", "title": "x"}),
            "INVALID_ENTRY_TYPE",
        ),
        (
            "rekall_search",
            json!({"query": "x", "type": "idea"}),
            "INVALID_ENTRY_TYPE",
        ),
        (
            "rekall_link",
            json!({"source_id": a, "target_id": b, "relation_type": "parent"}),
            "INVALID_RELATION_TYPE",
        ),
        (
            "rekall_link",
            json!({"source_id": a, "target_id": b}),
            "LINK_ALREADY_EXISTS",
        ),
        (
            "rekall_link",
            json!({"source_id": a, "target_id": a}),
            "SELF_LINK_ERROR",
        ),
        (
            "rekall_add",
            json!({"type": "bug", "title": "x".repeat(101)}),
            "INVALID_ARGUMENT",
        ),
        ("rekall_add", json!({"type": "bug"}), "INVALID_ARGUMENT"),
        (
            "rekall_add",
            json!({"type": "bug", "title": "x", "confidence": 9}),
            "INVALID_ARGUMENT",
        ),
        (
            "rekall_add",
            json!({"type": "bug", "title": "x", "tags": "not-a-list"}),
            "INVALID_ARGUMENT",
        ),
        (
            "rekall_add",
            json!({"type": "bug", "title": "x", "memory_type": "dream"}),
            "INVALID_ARGUMENT",
        ),
        (
            "rekall_add",
            json!({"type": "bug", "title": "x", "colour": "red"}),
            "INVALID_ARGUMENT",
        ),
        (
            "rekall_search",
            json!({"query": "x", "limit": 21}),
            "INVALID_ARGUMENT",
        ),
        (
            "rekall_search",
            json!({"query": "x", "limit": "five"}),
            "INVALID_ARGUMENT",
        ),
        ("rekall_search", json!({}), "INVALID_ARGUMENT"),
        ("rekall_show", json!({"id": "01AB"}), "INVALID_ARGUMENT"),
        (
            "rekall_suggest_links",
            json!({"limit": 0}),
            "INVALID_ARGUMENT",
        ),
        (
            "rekall_suggest_generalize",
            json!({"limit": 51}),
            "INVALID_ARGUMENT",
        ),
        (
            "rekall_help",
            json!({"topic": "everything"}),
            "INVALID_ARGUMENT",
        ),
    ];
    for (tool, args, code) in cases {
        assert_eq!(c.err(tool, args.clone()).await, code, "{tool}({args})");
    }
    // The error details say what was wrong.
    let (_, v) = c
        .call("rekall_add", json!({"type": "bugg", "title": "x"}))
        .await;
    assert_eq!(v["error"]["details"]["value"], "bugg");
    // An unknown tool cannot be routed: a protocol error, and the session goes on.
    assert!(c.try_call("rekall_nope", json!({})).await.is_err());
    // Nothing half-written: exactly the two good entries exist.
    let all = c
        .ok("rekall_search", json!({"query": "entry", "limit": 20}))
        .await;
    assert_eq!(all["total"], 2);
    c.close().await;
}

#[tokio::test]
async fn entries_are_resources() {
    let home = TestHome::new();
    let c = home.mcp().await;
    let id = add(
        &c,
        "decision",
        "Use sled for storage",
        "Pure Rust, transactions.",
        &["storage"],
    )
    .await;
    let templates = c.client.list_all_resource_templates().await.unwrap();
    assert_eq!(templates[0].uri_template, "tandem://memory/{id}");
    let listed = c.client.list_all_resources().await.unwrap();
    assert_eq!(listed[0].uri, format!("tandem://memory/{id}"));
    let read = c
        .client
        .read_resource(ReadResourceRequestParams::new(format!(
            "tandem://memory/{}",
            &id[..12]
        )))
        .await
        .unwrap();
    let text = serde_json::to_value(&read.contents[0]).unwrap();
    assert!(
        text["text"]
            .as_str()
            .unwrap()
            .starts_with("# Use sled for storage"),
        "{text}"
    );
    assert_eq!(text["mimeType"], "text/markdown");
    let missing = c
        .client
        .read_resource(ReadResourceRequestParams::new(
            "tandem://memory/01ARZ3NDEKTSV4RRFFQ69G5FAV",
        ))
        .await;
    assert!(missing.is_err());
    c.close().await;
}

#[tokio::test]
async fn restart_keeps_entries_links_and_suggestions() {
    let home = TestHome::new();
    let (a, b) = {
        let c = home.mcp().await;
        let a = add(
            &c,
            "pitfall",
            "Tokio mutex across await",
            "Holding a std mutex across await deadlocks.",
            &["tokio"],
        )
        .await;
        let b = add(
            &c,
            "pitfall",
            "Tokio mutex held across await points",
            "A std mutex guard held across await deadlocks the runtime.",
            &["tokio"],
        )
        .await;
        c.ok(
            "rekall_link",
            json!({"source_id": a, "target_id": b, "relation_type": "contradicts"}),
        )
        .await;
        c.close().await;
        (a, b)
    };
    let c = home.mcp().await;
    let found = c.ok("rekall_search", json!({"query": "mutex await"})).await;
    assert_eq!(found["total"], 2);
    let shown = c.ok("rekall_show", json!({"id": a})).await;
    assert_eq!(shown["links"]["outgoing"][0]["target_id"], b.as_str());
    assert_eq!(
        shown["links"]["outgoing"][0]["relation_type"],
        "contradicts"
    );
    let pending = c.ok("rekall_suggest_links", json!({})).await;
    assert_eq!(pending["total_pending"], 1);
    c.close().await;
}

#[tokio::test]
async fn stateless_2026_client_uses_server_discover() {
    let home = TestHome::new();
    let mut cmd = home.command();
    cmd.args(["mcp", "--standalone"]);
    let transport = rmcp::transport::TokioChildProcess::new(cmd).unwrap();
    let client = rmcp::ClientServiceExt::serve_with_lifecycle(
        (),
        transport,
        rmcp::ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    )
    .await
    .unwrap();
    let mut meta = rmcp::model::RequestMetaObject::new();
    meta.set_protocol_version(ProtocolVersion::V_2026_07_28);
    meta.set_client_info(Implementation::new("stateless-test", "1.0.0"));
    meta.set_client_capabilities(ClientCapabilities::default());
    let discovered = client.discover(meta).await.unwrap();
    assert!(
        discovered
            .supported_versions
            .contains(&ProtocolVersion::V_2026_07_28)
    );
    assert_eq!(discovered.server_info().unwrap().name, "tandem");
    let tools = client.list_all_tools().await.unwrap();
    assert_eq!(tools.len(), TOOLS.len());
    let added = client
        .call_tool(
            rmcp::model::CallToolRequestParams::new("rekall_add").with_arguments(
                json!({"type": "config", "title": "Stateless clients work", "content": "server/discover"})
                    .as_object()
                    .unwrap()
                    .clone(),
            ),
        )
        .await
        .unwrap();
    assert_eq!(added.is_error, Some(false));
    let found = client
        .call_tool(
            rmcp::model::CallToolRequestParams::new("rekall_search")
                .with_arguments(json!({"query": "stateless"}).as_object().unwrap().clone()),
        )
        .await
        .unwrap();
    assert_eq!(found.structured_content.unwrap()["total"], 1);
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_second_process_is_refused_with_the_holders_pid() {
    let home = TestHome::new();
    let c = home.mcp().await;
    c.ok("rekall_help", json!({})).await;
    let out = home
        .std_command()
        .args(["memory", "search", "x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let pid = c.pid.unwrap();
    assert!(stderr.contains(&format!("pid {pid}")), "{stderr}");
    assert!(
        stderr.contains("in use by another tandem process"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
    // A second MCP session on the same data dir starts, and its tools say why they cannot
    // work; its help still answers.
    let second = home.mcp().await;
    second.ok("rekall_help", json!({})).await;
    let (is_error, v) = second.call("rekall_search", json!({"query": "x"})).await;
    assert!(is_error);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&format!("pid {pid}")),
        "{v}"
    );
    second.close().await;
    c.close().await;
}

#[tokio::test]
async fn broken_json_rpc_gets_errors_and_the_session_goes_on() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let home = TestHome::new();
    let mut child = home
        .command()
        .args(["mcp", "--standalone"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}});
    let mut input = format!("{init}\n");
    input.push_str("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n");
    input.push_str("this is { not json\n");
    input.push_str("{\"no\": \"jsonrpc\"}\n");
    input.push_str(&format!("{}\n", "x".repeat(17 * 1024 * 1024)));
    input.push_str("{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"rekall_help\",\"arguments\":{}}}\n");
    stdin.write_all(input.as_bytes()).await.unwrap();
    stdin.flush().await.unwrap();
    let mut codes = Vec::new();
    let mut answered_help = false;
    while let Some(line) = stdout.next_line().await.unwrap() {
        let v: serde_json::Value =
            serde_json::from_str(&line).expect("stdout carries only JSON-RPC");
        if let Some(code) = v["error"]["code"].as_i64() {
            codes.push(code);
        }
        if v["id"] == 2 {
            assert!(v["result"]["structuredContent"]["guide"].is_string());
            answered_help = true;
            break;
        }
    }
    assert!(answered_help);
    codes.sort();
    assert_eq!(
        codes,
        [-32700, -32600, -32600],
        "parse error, wrong shape, oversized"
    );
    drop(stdin);
    let status = child.wait().await.unwrap();
    assert!(status.success(), "stdin closed: a clean exit");
}
