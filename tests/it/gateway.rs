//! The gateway (spec 001) through the real binary and the daemon, against real servers:
//! the reference servers `everything` and `filesystem`, and the fixture (core, with `$ref`
//! schemas, lacking credentials, disabled, untrusted). The spec's eight verification steps,
//! a client that ignores `list_changed` (`McpClient<()>`, through `mcp_call`) and one that
//! follows it (`Watcher`), and two sessions on one daemon.

use std::time::Duration;

use serde_json::{Value, json};

use crate::util::{
    DaemonGuard, ListChanged, TestHome, everything_bin, filesystem_bin, fixture_bin,
    home_with_config, poll,
};

/// A home whose user config has the servers of the spec's steps, and a workspace whose
/// `.mcp.json` (not approved) has one more.
fn gateway_home() -> (TestHome, std::path::PathBuf) {
    let home = TestHome::new();
    let ws = home.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    crate::util::git(&ws, &["init", "-q"]);
    std::fs::write(
        ws.join(".mcp.json"),
        json!({"mcpServers": {"local": {"command": fixture_bin(), "args": ["--name", "local"]}}})
            .to_string(),
    )
    .unwrap();
    let fixture = |name: &str, more: &[&str]| {
        let mut args = vec!["--name", name];
        args.extend(more);
        json!({"command": fixture_bin(), "args": args})
    };
    let mut sentry = fixture("sentry", &[]);
    sentry["env"] = json!({"SENTRY_AUTH_TOKEN": "YOUR_SENTRY_TOKEN", "SENTRY_ORG": "acme"});
    sentry["autostart"] = json!(false);
    let mut plotter = fixture("plotter", &["--ref-schemas"]);
    plotter["autostart"] = json!(false);
    // A server that needs a variable nobody set (the fixture refuses to start without it).
    let mut notion = fixture("notion", &["--require-env", "TANDEM_TEST_NOTION_KEY"]);
    notion["env"] = json!({"TANDEM_TEST_NOTION_KEY": "${TANDEM_TEST_NOTION_KEY}"});
    notion["autostart"] = json!(false);
    let mut old = fixture("old", &[]);
    old["disabled"] = json!(true);
    let config = json!({"mcpServers": {
        // A boot server the catalog knows as core.
        "memory": fixture("memory", &[]),
        "everything": {"command": everything_bin(), "args": ["stdio"], "autostart": false},
        "files": {"command": filesystem_bin(), "args": [ws], "autostart": false},
        "plotter": plotter,
        "sentry": sentry,
        "notion": notion,
        "old": old,
    }});
    std::fs::create_dir_all(home.tandem_home()).unwrap();
    std::fs::write(home.tandem_home().join("config.json"), config.to_string()).unwrap();
    (home, ws)
}

fn by_name<'a>(servers: &'a Value, name: &str) -> &'a Value {
    servers
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {servers:#}"))
}

fn names(tools: &[rmcp::model::Tool]) -> Vec<String> {
    tools.iter().map(|t| t.name.to_string()).collect()
}

/// The error message of a failed tool call.
fn message(v: &Value) -> &str {
    v["error"]["message"].as_str().unwrap()
}

#[tokio::test]
async fn the_spec_verification_steps_against_real_servers() {
    let (home, ws) = gateway_home();
    let _daemon = DaemonGuard(&home);
    let (agent, mut changes) = home.mcp_daemon_watching(&ws).await;

    // 1. Awareness: the instructions carry the catalog, and mcp_environment every server.
    let instructions = agent.instructions();
    for part in [
        "# MCP Server Environment",
        // The first session waited for the boot server: it describes itself.
        "| memory | mcp_fixture memory: a test server. [core] |",
        "| sentry | SENTRY_AUTH_TOKEN |",
        "# Dynamic MCP Orchestration",
        "rekall_help()",
    ] {
        assert!(
            instructions.contains(part),
            "{part:?} not in:\n{instructions}"
        );
    }
    let env = agent.ok("mcp_environment", json!({})).await;
    let servers = &env["servers"];
    let status = |name: &str| by_name(servers, name)["status"].clone();
    assert_eq!(status("memory"), "active");
    assert_eq!(by_name(servers, "memory")["isCore"], true);
    assert_eq!(status("everything"), "available");
    assert_eq!(by_name(servers, "everything")["category"], "testing");
    assert_eq!(status("sentry"), "missing-credentials");
    assert_eq!(
        by_name(servers, "sentry")["missingEnvKeys"],
        json!(["SENTRY_AUTH_TOKEN"])
    );
    assert_eq!(status("old"), "disabled");
    assert_eq!(status("local"), "untrusted");
    assert!(
        !env.to_string().contains("YOUR_SENTRY_TOKEN") && !env.to_string().contains("acme"),
        "a value leaked: {env}"
    );

    // 2. Discovery: an intent finds the server for it, with its readiness.
    let found = agent
        .ok("mcp_discover", json!({"intent": "read and write files"}))
        .await;
    assert_eq!(found["servers"][0]["name"], "files", "{found:#}");
    assert_eq!(found["servers"][0]["status"], "available");

    // 3. Activation: the tools are there at once, and the client is told.
    let before = names(&agent.client.list_all_tools().await.unwrap());
    assert!(!before.iter().any(|n| n.starts_with("everything__")));
    let activated = agent
        .ok("mcp_activate", json!({"name": "everything"}))
        .await;
    assert_eq!(activated["status"], "active");
    let added: Vec<&str> = activated["toolsAdded"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(added.contains(&"everything__echo"), "{added:?}");
    let change = tokio::time::timeout(Duration::from_secs(10), changes.recv()).await;
    assert!(
        matches!(change, Ok(Some(ListChanged::Tools))),
        "no tools/list_changed: {change:?}"
    );
    let after = names(&agent.client.list_all_tools().await.unwrap());
    assert!(after.contains(&"everything__echo".to_string()), "{after:?}");

    // 4. Use, in the same turn: by its proxied name, and through mcp_call.
    let echoed = agent
        .client
        .call_tool(
            rmcp::model::CallToolRequestParams::new("everything__echo").with_arguments(
                json!({"message": "through Tandem"})
                    .as_object()
                    .unwrap()
                    .clone(),
            ),
        )
        .await
        .unwrap();
    assert!(
        serde_json::to_string(&echoed.content)
            .unwrap()
            .contains("through Tandem"),
        "{echoed:?}"
    );
    let called = agent
        .client
        .call_tool(
            rmcp::model::CallToolRequestParams::new("mcp_call").with_arguments(
                json!({"server": "everything", "tool": "echo", "arguments": {"message": "by mcp_call"}})
                    .as_object()
                    .unwrap()
                    .clone(),
            ),
        )
        .await
        .unwrap();
    assert!(
        serde_json::to_string(&called.content)
            .unwrap()
            .contains("by mcp_call")
    );

    // Its prompts come along, namespaced like its tools.
    let prompts: Vec<String> = agent
        .client
        .list_all_prompts()
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert!(
        prompts.contains(&"everything__simple-prompt".to_string()),
        "{prompts:?}"
    );
    assert!(
        prompts.contains(&"system_prompt".to_string()),
        "{prompts:?}"
    );
    let got = agent
        .client
        .get_prompt(rmcp::model::GetPromptRequestParams::new(
            "everything__simple-prompt",
        ))
        .await
        .unwrap();
    assert!(!got.messages.is_empty(), "{got:?}");

    // And its resources, their URIs as it wrote them, their names saying whose they are.
    let resources = agent.client.list_all_resources().await.unwrap();
    let theirs = resources
        .iter()
        .find(|r| r.name.starts_with("everything__"))
        .unwrap_or_else(|| panic!("no resource of everything in {resources:#?}"));
    let read = agent
        .client
        .read_resource(rmcp::model::ReadResourceRequestParams::new(
            theirs.uri.clone(),
        ))
        .await
        .unwrap();
    assert!(!read.contents.is_empty(), "{read:?}");

    // 5. Deactivation: the tools leave.
    let gone = agent
        .ok("mcp_deactivate", json!({"name": "everything"}))
        .await;
    assert!(
        gone["toolsRemoved"]
            .as_array()
            .unwrap()
            .contains(&json!("everything__echo"))
    );
    let left = names(&agent.client.list_all_tools().await.unwrap());
    assert!(
        !left.iter().any(|n| n.starts_with("everything__")),
        "{left:?}"
    );

    // 6. Missing credentials.
    let (failed, missing) = agent.call("mcp_activate", json!({"name": "sentry"})).await;
    assert!(failed);
    assert_eq!(missing["error"]["code"], "MISSING_CREDENTIALS");
    assert_eq!(message(&missing), "Missing SENTRY_AUTH_TOKEN");
    let (failed, unset) = agent.call("mcp_activate", json!({"name": "notion"})).await;
    assert!(failed);
    assert_eq!(message(&unset), "Missing TANDEM_TEST_NOTION_KEY");
    assert_eq!(
        unset["error"]["details"]["missingEnvKeys"],
        json!(["TANDEM_TEST_NOTION_KEY"])
    );

    // 7. Core protection.
    let (failed, core) = agent
        .call("mcp_deactivate", json!({"name": "memory"}))
        .await;
    assert!(failed);
    assert_eq!(message(&core), "Cannot deactivate core server 'memory'");

    // The other refusals, each with its code.
    for (tool, name, code) in [
        ("mcp_activate", "nothing", "SERVER_NOT_FOUND"),
        ("mcp_activate", "local", "SERVER_UNTRUSTED"),
        ("mcp_activate", "old", "SERVER_DISABLED"),
        ("mcp_activate", "memory", "ALREADY_ACTIVE"),
        ("mcp_deactivate", "plotter", "NOT_ACTIVE"),
    ] {
        assert_eq!(
            agent.err(tool, json!({"name": name})).await,
            code,
            "{tool} {name}"
        );
    }

    // A server whose schemas use $ref: flat on the way out, and it works.
    let plotter = agent.ok("mcp_activate", json!({"name": "plotter"})).await;
    let plot = plotter["toolsAdded"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "plotter__plot")
        .unwrap_or_else(|| panic!("no plotter__plot in {plotter:#}"));
    let schema = &plot["inputSchema"];
    assert!(!schema.to_string().contains("$ref"), "{schema}");
    assert_eq!(
        schema["properties"]["at"]["properties"]["x"]["type"],
        "number"
    );
    let plotted = agent
        .client
        .call_tool(
            rmcp::model::CallToolRequestParams::new("plotter__plot")
                .with_arguments(json!({"at": {"x": 1, "y": 2}}).as_object().unwrap().clone()),
        )
        .await
        .unwrap();
    assert!(
        serde_json::to_string(&plotted.content)
            .unwrap()
            .contains(r#"\"x\":1"#)
    );

    // 8. Rate limit: the sixth activation within a minute is refused (everything and
    // plotter were the first two).
    for _ in 0..3 {
        agent.ok("mcp_deactivate", json!({"name": "plotter"})).await;
        agent.ok("mcp_activate", json!({"name": "plotter"})).await;
    }
    agent.ok("mcp_deactivate", json!({"name": "plotter"})).await;
    let (failed, limited) = agent.call("mcp_activate", json!({"name": "plotter"})).await;
    assert!(failed);
    assert_eq!(limited["error"]["code"], "RATE_LIMITED");
    assert!(
        message(&limited).starts_with("Rate limit exceeded"),
        "{limited}"
    );
    agent.close().await;
}

#[tokio::test]
async fn sessions_activate_apart_and_a_shared_server_runs_while_one_uses_it() {
    let (home, ws) = gateway_home();
    let _daemon = DaemonGuard(&home);
    let first = home.mcp_daemon(&ws, 60).await;
    let second = home.mcp_daemon(&ws, 60).await;

    first
        .ok("mcp_activate", json!({"name": "everything"}))
        .await;
    let theirs = names(&second.client.list_all_tools().await.unwrap());
    assert!(
        !theirs.iter().any(|n| n.starts_with("everything__")),
        "{theirs:?}"
    );
    let (_, listed) = second.call("mcp_environment", json!({})).await;
    assert_eq!(
        by_name(&listed["servers"], "everything")["status"],
        "available"
    );

    second
        .ok("mcp_activate", json!({"name": "everything"}))
        .await;
    first
        .ok("mcp_deactivate", json!({"name": "everything"}))
        .await;
    let echo = || {
        rmcp::model::CallToolRequestParams::new("everything__echo").with_arguments(
            json!({"message": "still here"})
                .as_object()
                .unwrap()
                .clone(),
        )
    };
    let echoed = second.client.call_tool(echo()).await.unwrap();
    assert_ne!(echoed.is_error, Some(true), "{echoed:?}");
    let refused = first.client.call_tool(echo()).await;
    assert!(
        refused.is_err(),
        "a deactivated tool is unknown to its session: {refused:?}"
    );

    // The last session that used it goes: the server stops.
    second.close().await;
    poll("everything to stop", 15, || {
        let out = home
            .std_command()
            .args(["servers", "--json"])
            .current_dir(&ws)
            .output()
            .unwrap();
        let report: Value = serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())?;
        match by_name(&report["servers"], "everything")["state"].as_str() {
            Some("stopped") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    first.close().await;
}

#[tokio::test]
async fn a_proxied_server_that_dies_is_a_clear_error_and_comes_back() {
    let (home, ws) = gateway_home();
    let config = json!({"mcpServers": {
        "flaky": {"command": fixture_bin(), "args": ["--name", "flaky", "--crash-after", "4"],
                  "autostart": false},
    }});
    std::fs::write(home.tandem_home().join("config.json"), config.to_string()).unwrap();
    let _daemon = DaemonGuard(&home);
    let agent = home.mcp_daemon(&ws, 60).await;
    agent.ok("mcp_activate", json!({"name": "flaky"})).await;
    let echo = || {
        rmcp::model::CallToolRequestParams::new("flaky__echo")
            .with_arguments(json!({"text": "hello"}).as_object().unwrap().clone())
    };
    // It answers at most once more, then exits: the next call says so, with the hub's code.
    let mut failure = None;
    for _ in 0..3 {
        let r = agent.client.call_tool(echo()).await.unwrap();
        if r.is_error == Some(true) {
            failure = r.structured_content;
            break;
        }
    }
    let failure = failure.expect("the crashed server's call did not fail");
    assert_eq!(failure["error"]["code"], "SERVER_UNAVAILABLE", "{failure}");
    assert!(message(&failure).contains("server 'flaky'"), "{failure}");
    // It restarts after its backoff, and the session's tool works again.
    let client = &agent.client;
    let mut answered = false;
    for _ in 0..100 {
        let r = client.call_tool(echo()).await.unwrap();
        if r.is_error != Some(true) {
            answered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(answered, "flaky never came back");
    agent.close().await;
}

fn prompt_names(prompts: &[rmcp::model::Prompt]) -> Vec<String> {
    prompts.iter().map(|p| p.name.clone()).collect()
}

/// The first session of a daemon that is not running yet: its `initialize`, first
/// `tools/list` and first `prompts/list` wait for a boot server that takes its time to
/// start, and the instructions carry that server's conventional system prompt and tool
/// instructions (spec 000), and no one else's: not the user prompt, not an untrusted
/// repository server's.
#[tokio::test]
async fn the_first_session_after_a_cold_start_sees_the_boot_servers() {
    let (home, ws) = home_with_config(json!({
        // Every answer of conv comes late: it is not ready when the daemon first answers.
        "mcpServers": {"conv": {"command": fixture_bin(),
                                "args": ["--name", "conv", "--conventional", "--delay-ms", "700"]}},
        // Far longer than conv needs: the wait ends when conv is ready, not at this bound.
        "bootWaitMs": 30000,
    }));
    std::fs::write(
        ws.join(".mcp.json"),
        json!({"mcpServers": {"repo": {"command": fixture_bin(),
                                       "args": ["--name", "repo", "--conventional"]}}})
        .to_string(),
    )
    .unwrap();
    let _daemon = DaemonGuard(&home);
    let started = std::time::Instant::now();
    let agent = home.mcp_daemon(&ws, 60).await;
    let waited = started.elapsed();

    let instructions = agent.instructions();
    for part in [
        "rekall_help()",
        "# Instructions from the MCP servers",
        "[System instructions from Server: conv]\nSystem instructions from conv.",
        "[Tool instructions from Server: conv]\nTool instructions from conv: call memory_index first.",
        "| conv |",
        "# Dynamic MCP Orchestration",
    ] {
        assert!(
            instructions.contains(part),
            "{part:?} not in:\n{instructions}"
        );
    }
    for absent in [
        "User context from conv",
        "from Server: repo",
        "Still starting",
    ] {
        assert!(
            !instructions.contains(absent),
            "{absent:?} in:\n{instructions}"
        );
    }
    let system = instructions.find("System instructions from conv.").unwrap();
    let catalog = instructions.find("# MCP Server Environment").unwrap();
    assert!(
        system < catalog,
        "the servers' part comes before the catalog"
    );

    let tools = names(&agent.client.list_all_tools().await.unwrap());
    assert!(tools.contains(&"conv__echo".to_string()), "{tools:?}");
    let prompts = prompt_names(&agent.client.list_all_prompts().await.unwrap());
    for p in [
        "conv__system_prompt",
        "conv__tool_instructions",
        "conv__user_prompt",
    ] {
        assert!(prompts.contains(&p.to_string()), "{p} not in {prompts:?}");
    }
    assert!(
        !prompts.iter().any(|p| p.starts_with("repo__")),
        "{prompts:?}"
    );
    // It waited for conv, not for the bound.
    assert!(waited < Duration::from_secs(25), "{waited:?}");
    agent.close().await;
}

/// A boot server that never answers `initialize` holds the first answer up to the user's
/// `bootWaitMs` only (not its own, much longer, start timeout): the answer lists the
/// server that did start and says which one is still starting. A `system_prompt` turned
/// off in the conventional settings stays out of the instructions; the server's tool
/// instructions, still on, go in.
#[tokio::test]
async fn a_hanging_boot_server_holds_the_first_answer_only_for_the_wait() {
    let (home, ws) = home_with_config(json!({
        "mcpServers": {
            "hang": {"command": fixture_bin(), "args": ["--name", "hang", "--no-initialize"],
                     "start_timeout_ms": 120000},
            "conv": {"command": fixture_bin(), "args": ["--name", "conv", "--conventional"]},
        },
        "bootWaitMs": 5000,
        "conventionalPrompts": {"servers": {"conv": {"prompts": {"system_prompt": {"enabled": false}}}}},
    }));
    let _daemon = DaemonGuard(&home);
    let started = std::time::Instant::now();
    let agent = home.mcp_daemon(&ws, 60).await;
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_secs(60),
        "the first answer waited for the hanging server's start timeout: {waited:?}"
    );

    let instructions = agent.instructions();
    assert!(
        instructions.contains("[Tool instructions from Server: conv]"),
        "{instructions}"
    );
    assert!(
        !instructions.contains("System instructions from conv."),
        "a disabled system_prompt was injected:\n{instructions}"
    );
    assert!(
        instructions.contains("Still starting as this session began: hang."),
        "{instructions}"
    );
    let tools = names(&agent.client.list_all_tools().await.unwrap());
    assert!(tools.contains(&"conv__echo".to_string()), "{tools:?}");
    assert!(!tools.iter().any(|t| t.starts_with("hang__")), "{tools:?}");
    agent.close().await;
}

/// `tandem mcp --standalone` opens its data dir in the background: with a boot server in
/// the config, its first answer waits for the data dir, then for the server.
#[tokio::test]
async fn a_standalone_session_waits_for_the_data_dir_when_it_has_boot_servers() {
    let (home, ws) = home_with_config(json!({
        "mcpServers": {"conv": {"command": fixture_bin(), "args": ["--name", "conv", "--conventional"]}},
        "bootWaitMs": 30000,
    }));
    let agent = home.mcp_in(&ws).await;
    let instructions = agent.instructions();
    assert!(
        instructions.contains("System instructions from conv."),
        "{instructions}"
    );
    let tools = names(&agent.client.list_all_tools().await.unwrap());
    assert!(tools.contains(&"conv__echo".to_string()), "{tools:?}");
    agent.close().await;
}
