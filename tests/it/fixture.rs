//! `examples/mcp_fixture`, the downstream MCP server of our own, proven through the rmcp
//! client: its prompts, completions, list changes and each fault switch behave as its doc
//! says, so the hub's tests can rely on them.

use std::time::{Duration, Instant};

use rmcp::model::{ContentBlock, ProtocolVersion, ServerNotification, SubscriptionFilter};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
use serde_json::json;
use tokio::io::AsyncReadExt;

use crate::util::{Downstream, ListChanged, fixture, fixture_bin};

const CONVENTIONAL: [&str; 10] = [
    "system_prompt",
    "tool_instructions",
    "user_prompt",
    "User_Prompt",
    "assistant_prompt",
    "tool_call:memory_index",
    "tool_result:memory_index",
    "tool_answer:weather",
    "tool_call:weather",
    "tool_call:orphan",
];

#[tokio::test]
async fn lists_and_gets_every_kind_of_prompt() {
    let s = Downstream::start(fixture(&[
        "--name",
        "alpha",
        "--conventional",
        "--prompt-args",
        "--media",
        "--prompts",
        "3",
    ]))
    .await;
    let info = s.client.peer_info().unwrap();
    assert_eq!(info.server_info.as_ref().unwrap().name, "alpha");
    let caps = &info.capabilities;
    assert_eq!(caps.prompts.as_ref().unwrap().list_changed, Some(true));
    assert_eq!(caps.tools.as_ref().unwrap().list_changed, Some(true));
    assert!(caps.completions.is_some());

    let mut expected: Vec<&str> = CONVENTIONAL.to_vec();
    expected.extend(["greet", "media", "prompt-000", "prompt-001", "prompt-002"]);
    assert_eq!(s.prompt_names().await, expected);

    let session = &s;
    let text =
        |name: &'static str| async move { session.prompt_texts(name, json!({})).await.unwrap() };
    assert_eq!(
        text("system_prompt").await,
        ["System instructions from alpha."]
    );
    assert_eq!(
        text("User_Prompt").await,
        ["Second user context from alpha."]
    );
    assert_eq!(
        text("tool_call:weather").await,
        [r#"{"function":"weather","args":{"city":"Paris"}}"#]
    );
    let answer: serde_json::Value =
        serde_json::from_str(&text("tool_answer:weather").await[0]).unwrap();
    assert_eq!(
        answer,
        json!({"temp": 15, "conditions": "sunny", "server": "alpha"})
    );
    for name in CONVENTIONAL {
        let texts = s.prompt_texts(name, json!({})).await.unwrap();
        assert!(
            name == "tool_call:weather" || texts[0].contains("alpha"),
            "{name}: {texts:?}"
        );
    }

    // Generated prompts: prompt-002 has arg0 (optional) and arg1 (required).
    let p2 = s
        .client
        .list_all_prompts()
        .await
        .unwrap()
        .into_iter()
        .find(|p| p.name == "prompt-002")
        .unwrap();
    let required: Vec<(String, Option<bool>)> = p2
        .arguments
        .unwrap()
        .into_iter()
        .map(|a| (a.name, a.required))
        .collect();
    assert_eq!(
        required,
        [("arg0".into(), Some(false)), ("arg1".into(), Some(true))]
    );
    assert_eq!(
        s.prompt_texts("prompt-002", json!({"arg1": "x"}))
            .await
            .unwrap(),
        ["prompt-002 from alpha (arg1=x)"]
    );
    let missing = s.prompt_texts("prompt-002", json!({})).await.unwrap_err();
    assert!(missing.to_string().contains("arg1"), "{missing}");
    let unknown = s.prompt_texts("nope", json!({})).await.unwrap_err();
    assert!(unknown.to_string().contains("unknown prompt"), "{unknown}");

    assert_eq!(
        s.prompt_texts("greet", json!({"name": "Ann", "style": "pirate"}))
            .await
            .unwrap(),
        ["Ahoy, Ann! (alpha)"]
    );

    let media = s
        .client
        .get_prompt(rmcp::model::GetPromptRequestParams::new("media"))
        .await
        .unwrap();
    let kinds: Vec<&str> = media
        .messages
        .iter()
        .map(|m| match &m.content {
            ContentBlock::Text(_) => "text",
            ContentBlock::Image(i) => {
                assert_eq!(i.mime_type, "image/png");
                "image"
            }
            ContentBlock::Resource(_) => "resource",
            _ => "other",
        })
        .collect();
    assert_eq!(kinds, ["text", "image", "resource"]);
    s.client.cancel().await.unwrap();
}

#[tokio::test]
async fn completes_greet_arguments_from_the_context() {
    let s = Downstream::start(fixture(&["--prompt-args", "--prompts", "2"])).await;
    let complete = |arg: &'static str, value: &'static str, style: Option<&'static str>| {
        let context = style.map(|style| {
            rmcp::model::CompletionContext::with_arguments(
                [("style".to_string(), style.to_string())].into(),
            )
        });
        let client = &s.client;
        async move {
            client
                .complete_prompt_argument("greet", arg, value, context)
                .await
                .unwrap()
                .values
        }
    };
    assert_eq!(complete("style", "p", None).await, ["pirate"]);
    assert_eq!(
        complete("style", "", None).await,
        ["formal", "casual", "pirate"]
    );
    assert_eq!(complete("name", "", None).await, ["Alice", "Bob", "Carol"]);
    assert_eq!(
        complete("name", "", Some("formal")).await,
        ["Dr. Watson", "Madam President", "Sir Lancelot"]
    );
    assert_eq!(
        complete("name", "lo", Some("pirate")).await,
        ["Long John Silver"]
    );
    // Arguments that do not complete answer nothing, like server-everything.
    let other = s
        .client
        .complete_prompt_argument("prompt-001", "arg0", "", None)
        .await
        .unwrap();
    assert!(other.values.is_empty());
    s.client.cancel().await.unwrap();

    // Without --prompt-args, completion is not advertised and not answered.
    let plain = Downstream::start(fixture(&["--prompts", "2"])).await;
    assert!(
        plain
            .client
            .peer_info()
            .unwrap()
            .capabilities
            .completions
            .is_none()
    );
    assert!(
        plain
            .client
            .complete_prompt_argument("prompt-001", "arg0", "", None)
            .await
            .is_err()
    );
}

#[tokio::test]
async fn tools_change_the_lists_and_notify_before_answering() {
    let mut s = Downstream::start(fixture(&["--name", "beta", "--prompts", "2"])).await;
    assert_eq!(s.tool_names().await, ["set_prompts", "touch_tools", "echo"]);
    assert_eq!(s.call_text("echo", json!({"text": "hi"})).await, "beta: hi");

    let names = s
        .call_text(
            "set_prompts",
            json!({"count": 3, "add": ["late"], "remove": ["prompt-000"]}),
        )
        .await;
    // The notification was written before the result.
    assert_eq!(s.changes.try_recv(), Ok(ListChanged::Prompts));
    let expected = ["prompt-001", "prompt-002", "late"];
    assert_eq!(
        serde_json::from_str::<Vec<String>>(&names).unwrap(),
        expected
    );
    assert_eq!(s.prompt_names().await, expected);
    assert_eq!(
        s.prompt_texts("late", json!({})).await.unwrap(),
        ["beta says hello from late"]
    );
    // A removed prompt comes back in its place.
    s.call_text("set_prompts", json!({"add": ["prompt-000"]}))
        .await;
    assert_eq!(s.next_change().await, ListChanged::Prompts);
    assert_eq!(
        s.prompt_names().await,
        ["prompt-000", "prompt-001", "prompt-002", "late"]
    );

    assert_eq!(s.call_text("touch_tools", json!({})).await, "extra-1");
    assert_eq!(s.changes.try_recv(), Ok(ListChanged::Tools));
    assert_eq!(
        s.tool_names().await,
        ["set_prompts", "touch_tools", "echo", "extra-1"]
    );
    assert_eq!(s.call_text("extra-1", json!({})).await, "extra-1 from beta");
    s.client.cancel().await.unwrap();
}

#[tokio::test]
async fn changes_its_prompt_list_by_itself() {
    let mut s = Downstream::start(fixture(&["--change-every-ms", "40"])).await;
    assert_eq!(s.next_change().await, ListChanged::Prompts);
    assert_eq!(s.next_change().await, ListChanged::Prompts);
    let names = s.prompt_names().await;
    assert_eq!(names.len(), 1, "{names:?}");
    let tick: u64 = names[0].strip_prefix("tick-").unwrap().parse().unwrap();
    assert!(tick >= 2, "{names:?}");
    s.client.cancel().await.unwrap();
}

#[tokio::test]
async fn pages_its_lists_when_asked() {
    let s = Downstream::start(fixture(&["--prompts", "7", "--page-size", "3"])).await;
    let first = s.client.list_prompts(None).await.unwrap();
    assert_eq!(first.prompts.len(), 3);
    assert_eq!(first.next_cursor.as_deref(), Some("3"));
    assert_eq!(s.prompt_names().await.len(), 7);
    assert_eq!(s.tool_names().await.len(), 3);
    s.client.cancel().await.unwrap();
}

/// A 2026-07-28 session (`server/discover`, no `initialize`) hears of changes through
/// `subscriptions/listen`, and only of the kinds it asked for.
#[tokio::test]
async fn subscriptions_listen_gets_list_changed() {
    let transport = rmcp::transport::TokioChildProcess::new(fixture(&["--prompts", "1"])).unwrap();
    let (tx, mut legacy) = tokio::sync::mpsc::unbounded_channel();
    let client = crate::util::Watcher(tx)
        .serve_with_lifecycle(
            transport,
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .unwrap();
    assert_eq!(
        client.peer_info().unwrap().protocol_version,
        ProtocolVersion::V_2026_07_28
    );
    let mut sub = client
        .listen(SubscriptionFilter::builder().prompts_list_changed().build())
        .await
        .unwrap();
    let call =
        |tool: &str| client.call_tool(rmcp::model::CallToolRequestParams::new(tool.to_string()));
    // A tool change was not asked for: only the prompt change arrives. rmcp acknowledges a
    // listen before it hands it to the fixture's handler, so a change made in that gap
    // reaches nobody: make both changes again until one is heard.
    let mut next = None;
    for _ in 0..20 {
        call("touch_tools").await.unwrap();
        call("set_prompts").await.unwrap();
        if let Ok(heard) = tokio::time::timeout(Duration::from_millis(500), sub.next()).await {
            next = Some(heard.unwrap());
            break;
        }
    }
    let next = next.expect("no list_changed arrived on the subscription");
    assert!(
        matches!(
            next,
            Some(ServerNotification::PromptListChangedNotification(_))
        ),
        "{next:?}"
    );
    // Nothing went the legacy way.
    assert!(legacy.try_recv().is_err());
    sub.cancel().await.unwrap();
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn crash_after_n_responses() {
    let s = Downstream::start(fixture(&["--crash-after", "2", "--prompts", "1"])).await;
    // initialize was the first response; this is the second, answered in full.
    assert_eq!(s.prompt_names().await, ["prompt-000"]);
    let after = tokio::time::timeout(Duration::from_secs(10), s.client.list_tools(None)).await;
    assert!(after.unwrap().is_err(), "the server should be gone");
}

#[tokio::test]
async fn crash_and_hang_on_get() {
    let s = Downstream::start(fixture(&["--hang-on-get", "--prompts", "1"])).await;
    let hung = tokio::time::timeout(
        Duration::from_millis(300),
        s.prompt_texts("hang", json!({})),
    )
    .await;
    assert!(hung.is_err(), "hang answered: {hung:?}");
    // The rest of the server still answers.
    assert_eq!(
        s.prompt_texts("prompt-000", json!({})).await.unwrap(),
        ["prompt-000 from fixture"]
    );
    // Not cancel(): with a request in flight the server outlives stdin's end (rmcp drains
    // for ~5 s), so the client's graceful shutdown would wait 3 s before SIGTERM. Dropping
    // kills it.
    drop(s);

    let s = Downstream::start(fixture(&["--crash-on-get", "--prompts", "1"])).await;
    assert_eq!(s.prompt_names().await, ["crash", "prompt-000"]);
    let crashed =
        tokio::time::timeout(Duration::from_secs(10), s.prompt_texts("crash", json!({}))).await;
    assert!(crashed.unwrap().is_err());
    assert!(s.client.list_tools(None).await.is_err());
}

#[tokio::test]
async fn delays_every_answer() {
    let started = Instant::now();
    let s = Downstream::start(fixture(&["--delay-ms", "150"])).await;
    s.prompt_names().await;
    // initialize and prompts/list, 150 ms each.
    assert!(started.elapsed() >= Duration::from_millis(300));
    s.client.cancel().await.unwrap();
}

#[tokio::test]
async fn cannot_start_and_says_why() {
    let out = std::process::Command::new(fixture_bin())
        .arg("--exit-at-start")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());

    let out = std::process::Command::new(fixture_bin())
        .args(["--require-env", "TANDEM_FIXTURE_UNSET"])
        .env_remove("TANDEM_FIXTURE_UNSET")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "mcp_fixture: environment variable TANDEM_FIXTURE_UNSET is required\n"
    );

    // Through the client: initialize fails, it does not hang.
    let (session, _stderr) = Downstream::start_capturing(fixture(&["--exit-at-start"])).await;
    assert!(session.is_err());
}

#[tokio::test]
async fn prints_its_environment_and_directory() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = fixture(&[
        "--require-env",
        "FIXTURE_TOKEN",
        "--print-env",
        "FIXTURE_TOKEN",
        "--print-cwd",
    ]);
    cmd.env("FIXTURE_TOKEN", "s3cret").current_dir(dir.path());
    let s = Downstream::start(cmd).await;
    assert_eq!(s.prompt_texts("env", json!({})).await.unwrap(), ["s3cret"]);
    let cwd = s.prompt_texts("cwd", json!({})).await.unwrap();
    assert_eq!(
        std::fs::canonicalize(&cwd[0]).unwrap(),
        std::fs::canonicalize(dir.path()).unwrap()
    );
    s.client.cancel().await.unwrap();
}

#[tokio::test]
async fn stderr_noise_is_separate_from_the_protocol() {
    let (session, mut stderr) =
        Downstream::start_capturing(fixture(&["--name", "loud", "--stderr-noise"])).await;
    let s = session.unwrap();
    s.prompt_names().await;
    s.client.cancel().await.unwrap();
    let mut log = String::new();
    stderr.read_to_string(&mut log).await.unwrap();
    assert!(
        log.contains("mcp_fixture loud: noise at start 1/3"),
        "{log}"
    );
    assert!(
        log.contains("mcp_fixture loud: request initialize"),
        "{log}"
    );
    assert!(
        log.contains("mcp_fixture loud: request prompts/list"),
        "{log}"
    );
}
