//! The hub from the shell: downstream servers (our fixture, and the npm reference servers)
//! configured in a workspace's `.mcp.json` and the user's config, trusted, listed, run.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::util::{DaemonGuard, TestHome, everything_bin, filesystem_bin, fixture_bin, poll};

/// `tandem ARGS --json` in `dir`; (success, stdout JSON or stderr text).
pub(crate) fn tandem(home: &TestHome, dir: &Path, args: &[&str]) -> (bool, Value, String) {
    let out = home
        .std_command()
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let json = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    (out.status.success(), json, stderr)
}

pub(crate) fn ok(home: &TestHome, dir: &Path, args: &[&str]) -> Value {
    let (ok, json, stderr) = tandem(home, dir, args);
    assert!(ok, "tandem {args:?} failed: {stderr}");
    json
}

pub(crate) fn workspace(home: &TestHome, mcp_json: Value) -> std::path::PathBuf {
    let ws = home.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    crate::util::git(&ws, &["init", "-q"]);
    std::fs::write(
        ws.join(".mcp.json"),
        serde_json::to_string_pretty(&mcp_json).unwrap(),
    )
    .unwrap();
    ws
}

fn fixture_entry(args: &[&str]) -> Value {
    json!({"command": fixture_bin(), "args": args})
}

pub(crate) fn server<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no server {name} in {report:#}"))
}

#[test]
fn workspace_servers_run_only_once_the_file_is_trusted() {
    let home = TestHome::new();
    let ws = workspace(
        &home,
        json!({"mcpServers": {
            "everything": {"command": everything_bin(), "args": ["stdio"]},
            "files": {"command": filesystem_bin(), "args": ["."]},
        }}),
    );
    let before = ok(&home, &ws, &["servers", "--json"]);
    assert_eq!(server(&before, "everything")["state"], "untrusted");
    assert_eq!(server(&before, "files")["state"], "untrusted");
    let (refused, _, stderr) = tandem(&home, &ws, &["prompt", "/everything:simple-prompt"]);
    assert!(!refused);
    assert!(
        stderr.contains("not trusted yet") && stderr.contains("(SERVER_UNAVAILABLE)"),
        "{stderr}"
    );

    let shown = ok(&home, &ws, &["trust", "--yes", "--json"]);
    assert_eq!(shown["done"], "approved");
    assert!(
        shown["servers"]
            .to_string()
            .contains("mcp-server-everything stdio"),
        "{shown}"
    );

    // Node servers may take more than the listings' 2 s to start on a loaded machine.
    let after = ok(&home, &ws, &["servers", "--json", "--wait", "20"]);
    let everything = server(&after, "everything");
    assert_eq!(everything["state"], "ready", "{after:#}");
    assert_eq!(everything["prompts"], 4);
    assert!(everything["tools"].as_u64().unwrap() > 5);
    assert_eq!(
        server(&after, "files")["prompts"],
        0,
        "a server without prompts is fine"
    );
    let prompts = ok(&home, &ws, &["prompts", "--json", "--wait", "20"]);
    let commands: Vec<&str> = prompts
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["command"].as_str().unwrap())
        .collect();
    assert!(
        commands.contains(&"/everything:args-prompt"),
        "{commands:?}"
    );
    let args = prompts
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "args-prompt")
        .unwrap();
    assert_eq!(
        args["arguments"][0],
        json!({"name": "city", "description": "Name of the city", "required": true})
    );

    let run = ok(
        &home,
        &ws,
        &["prompt", "/everything:args-prompt", "city=Paris", "--json"],
    );
    assert_eq!(run["messages"][0]["role"], "user");
    assert!(
        run["messages"][0]["content"]["text"]
            .as_str()
            .unwrap()
            .contains("Paris"),
        "{run}"
    );

    // Any edit to the file withdraws the trust.
    let mut text = std::fs::read_to_string(ws.join(".mcp.json")).unwrap();
    text.push('\n');
    std::fs::write(ws.join(".mcp.json"), text).unwrap();
    let edited = ok(&home, &ws, &["servers", "--json"]);
    assert_eq!(server(&edited, "everything")["state"], "untrusted");
}

#[test]
fn config_errors_name_the_file_the_server_and_the_field() {
    let home = TestHome::new();
    let ws = workspace(
        &home,
        json!({"mcpServers": {
            "typo": {"command": fixture_bin(), "args": ["--name", 3]},
            "secret": {"command": fixture_bin(), "env": {"TOKEN": "${TANDEM_TEST_UNSET_VAR}"}},
        }}),
    );
    std::fs::create_dir_all(home.tandem_home()).unwrap();
    std::fs::write(home.tandem_home().join("config.json"), "{ not json").unwrap();
    ok(&home, &ws, &["trust", "--yes"]);
    let report = ok(&home, &ws, &["servers", "--json"]);
    let file = ws.join(".mcp.json").canonicalize().unwrap();
    let typo = server(&report, "typo");
    assert_eq!(typo["state"], "misconfigured");
    assert!(
        typo["last_error"].as_str().unwrap().starts_with(&format!(
            "{}: server 'typo', field 'args[1]': ",
            file.display()
        )),
        "{typo}"
    );
    let secret = server(&report, "secret");
    assert!(
        secret["last_error"]
            .as_str()
            .unwrap()
            .ends_with("field 'env.TOKEN': ${TANDEM_TEST_UNSET_VAR} is not set in the environment")
    );
    let user = home.tandem_home().join("config.json");
    assert!(
        report["errors"][0]
            .as_str()
            .unwrap()
            .starts_with(&format!("{}: not valid JSON", user.display())),
        "{report}"
    );
}

#[test]
fn user_config_is_trusted_and_expands_the_environment() {
    let home = TestHome::new();
    let (ws, _) = user_config(
        &home,
        &json!({"mcpServers": {"fx": {"command": fixture_bin(),
            "args": ["--print-env", "GREETING", "--print-cwd"],
            "env": {"GREETING": "hello ${TANDEM_TEST_WHO:-nobody}"}}}})
        .to_string(),
    );
    let out = home
        .std_command()
        .args(["prompt", "/fx:env", "--json"])
        .env("TANDEM_TEST_WHO", "world")
        .current_dir(&ws)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        run["messages"][0]["content"]["text"]
            .as_str()
            .unwrap()
            .contains("hello world"),
        "{run}"
    );
    // The user's servers run in the home, not in the workspace (`hub_trust` has why).
    let user_home = home.path().join("home");
    std::fs::create_dir_all(&user_home).unwrap();
    let cwd = ok(&home, &ws, &["prompt", "/fx:cwd", "--json"]);
    let text = cwd["messages"][0]["content"]["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        text,
        user_home.canonicalize().unwrap().display().to_string(),
        "servers run in the home"
    );
}

#[test]
fn a_crashing_server_is_reported_restarted_and_others_keep_working() {
    let home = TestHome::new();
    let ws = workspace(
        &home,
        json!({"mcpServers": {
            "bad": fixture_entry(&["--name", "bad", "--crash-on-get", "--stderr-noise"]),
            "slow": {"command": fixture_bin(), "args": ["--name", "slow", "--hang-on-get", "--prompts", "1"], "timeout_ms": 400},
            "good": fixture_entry(&["--name", "good", "--prompts", "2"]),
        }}),
    );
    ok(&home, &ws, &["trust", "--yes"]);
    let _daemon = start_daemon(&home);

    // A crash: the call fails with the server's own last words; the server restarts.
    let (crashed, _, stderr) = tandem(&home, &ws, &["prompt", "/bad:crash"]);
    assert!(!crashed);
    assert!(
        stderr.contains("server 'bad' failed during prompts/get"),
        "{stderr}"
    );
    let report = ok(&home, &ws, &["servers", "--json"]);
    let bad = server(&report, "bad");
    assert_eq!(bad["state"], "restarting", "{bad}");
    assert!(
        bad["last_error"]
            .as_str()
            .unwrap()
            .contains("request prompts/get"),
        "its stderr tail: {bad}"
    );
    let (fast_fail, _, stderr) = tandem(&home, &ws, &["prompt", "/bad:crash"]);
    assert!(
        !fast_fail && stderr.contains("is restarting") && stderr.contains("next attempt in"),
        "{stderr}"
    );

    // A hang: the timeout answers, and the other servers are not held up.
    let started = Instant::now();
    let (hung, _, stderr) = tandem(&home, &ws, &["prompt", "/slow:hang"]);
    assert!(!hung);
    assert!(
        stderr.contains("did not answer prompts/get within 0.4s")
            && stderr.contains("(SERVER_TIMEOUT)"),
        "{stderr}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    let good = ok(&home, &ws, &["prompt", "/good:prompt-000", "--json"]);
    assert!(
        good["messages"][0]["content"]["text"]
            .as_str()
            .unwrap()
            .contains("from good")
    );

    // The crashed server comes back by itself after its backoff.
    poll("bad to come back", 15, || {
        let report = ok(&home, &ws, &["servers", "--json"]);
        match server(&report, "bad")["state"] == "ready" {
            true => Ok(()),
            false => Err(format!("{report:#}")),
        }
    });
}

#[test]
fn prompt_list_and_config_changes_apply_without_a_restart() {
    let home = TestHome::new();
    let (ws, user) = user_config(&home, &json!({"mcpServers": {"ticker": fixture_entry(&["--name", "ticker", "--change-every-ms", "300"])}}).to_string());
    let _daemon = start_daemon(&home);
    let names = |home: &TestHome| -> Vec<String> {
        ok(home, &ws, &["prompts", "--json"])
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["command"].as_str().unwrap().to_string())
            .collect()
    };
    // The fixture starts with no prompt and renames its one prompt every 300 ms.
    let first = poll("a first prompt", 10, || {
        let n = names(&home);
        if n.is_empty() {
            Err("none".into())
        } else {
            Ok(n)
        }
    });
    assert_eq!(first.len(), 1, "{first:?}");
    poll("the prompt list to follow list_changed", 10, || {
        let n = names(&home);
        if n == first {
            Err(format!("{n:?}"))
        } else {
            Ok(())
        }
    });
    // A server added to the config file is picked up by the running daemon.
    std::fs::write(
        &user,
        json!({"mcpServers": {
            "ticker": fixture_entry(&["--name", "ticker", "--change-every-ms", "300"]),
            "extra": fixture_entry(&["--name", "extra", "--prompts", "3"]),
        }})
        .to_string(),
    )
    .unwrap();
    poll("the new server's prompts", 10, || {
        let n = names(&home);
        match n.iter().filter(|c| c.starts_with("/extra:")).count() {
            3 => Ok(()),
            _ => Err(format!("{n:?}")),
        }
    });
}

/// A server with `autostart: false` runs only when used; once it has run, its prompts are
/// offered (remembered in the data dir, across daemons) while it is not running.
#[test]
fn a_server_started_on_use_offers_the_prompts_it_last_listed() {
    let home = TestHome::new();
    let mut entry = fixture_entry(&["--name", "lazy", "--prompts", "2"]);
    entry["autostart"] = json!(false);
    let (ws, _) = user_config(&home, &json!({"mcpServers": {"lazy": entry}}).to_string());
    let commands = |home: &TestHome| -> Vec<(String, bool)> {
        ok(home, &ws, &["prompts", "--json"])
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let remembered = p["remembered"].as_bool().unwrap_or(false);
                (p["command"].as_str().unwrap().to_string(), remembered)
            })
            .collect()
    };
    let state =
        |home: &TestHome| server(&ok(home, &ws, &["servers", "--json"]), "lazy")["state"].clone();
    {
        let _daemon = start_daemon(&home);
        // Never run: nothing known, and listing does not start it.
        assert_eq!(commands(&home), []);
        assert_eq!(state(&home), "idle");
        // Running a prompt starts it.
        let run = ok(&home, &ws, &["prompt", "/lazy:prompt-000", "--json"]);
        assert_eq!(run["server"], "lazy", "{run}");
        assert_eq!(state(&home), "ready");
        assert_eq!(
            commands(&home),
            [
                ("/lazy:prompt-000".to_string(), false),
                ("/lazy:prompt-001".to_string(), false)
            ]
        );
    }
    // A new daemon: the server is idle again, its last prompts are offered as remembered.
    let _daemon = start_daemon(&home);
    assert_eq!(state(&home), "idle");
    assert_eq!(
        commands(&home),
        [
            ("/lazy:prompt-000".to_string(), true),
            ("/lazy:prompt-001".to_string(), true)
        ]
    );
    // Running a remembered prompt starts the server; the list is live again.
    ok(&home, &ws, &["prompt", "/lazy:prompt-001", "--json"]);
    assert_eq!(state(&home), "ready");
    assert_eq!(commands(&home)[0], ("/lazy:prompt-000".to_string(), false));
    // Another command line for the server: what the old one listed is not offered.
    let mut other = fixture_entry(&["--name", "lazy", "--prompts", "1"]);
    other["autostart"] = json!(false);
    let config = home.tandem_home().join("config.json");
    std::fs::write(&config, json!({"mcpServers": {"lazy": other}}).to_string()).unwrap();
    poll("the config change to apply", 10, || match state(&home) {
        s if s == "idle" => Ok(()),
        s => Err(s.to_string()),
    });
    assert_eq!(commands(&home), []);
}

/// A plain directory (no git, no `.mcp.json`) as the workspace, and the user's `config.json`
/// (in the data dir) holding `config`: `(workspace, config file)`.
fn user_config(home: &TestHome, config: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let ws = home.path().join("plain");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(home.tandem_home()).unwrap();
    let file = home.tandem_home().join("config.json");
    std::fs::write(&file, config).unwrap();
    (ws, file)
}

/// Starts the home's daemon (detached, as clients do) and waits until it answers.
pub(crate) fn start_daemon(home: &TestHome) -> DaemonGuard<'_> {
    let out = home
        .std_command()
        .args(["daemon", "--spawn"])
        .env("TANDEM_DAEMON_IDLE_SECS", "60")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    poll("the daemon to answer", 20, || {
        let status = crate::util::daemon_status(home);
        if status["ok"] == true {
            Ok(())
        } else {
            Err(status.to_string())
        }
    });
    DaemonGuard(home)
}

#[test]
fn prompt_command_lines_are_parsed_and_checked() {
    let home = TestHome::new();
    let ws = workspace(
        &home,
        json!({"mcpServers": {"fx": fixture_entry(&["--name", "fx", "--prompt-args"])}}),
    );
    ok(&home, &ws, &["trust", "--yes"]);
    let run = ok(
        &home,
        &ws,
        &[
            "prompt",
            "/fx:greet name=\"Ada Lovelace\" style=formal",
            "--json",
        ],
    );
    let text = run["messages"][0]["content"]["text"].as_str().unwrap();
    assert!(text.contains("Ada Lovelace"), "{run}");
    for (line, code, says) in [
        ("/fx:greet", "MISSING_ARGUMENT", "'name'"),
        ("/fx:greet name=x nme=y", "UNKNOWN_ARGUMENT", "'nme'"),
        ("/fx:greet name=\"open", "INVALID_COMMAND", "quote"),
        ("/fx:nope", "PROMPT_NOT_FOUND", "greet"),
        ("/nobody:greet", "SERVER_NOT_FOUND", "fx"),
    ] {
        let (ok, _, stderr) = tandem(&home, &ws, &["prompt", line]);
        assert!(!ok, "{line}");
        assert!(
            stderr.contains(&format!("({code})")) && stderr.contains(says),
            "{line}: {stderr}"
        );
    }
}

#[test]
fn the_injection_follows_the_spec_order_and_the_settings() {
    let home = TestHome::new();
    let ws = workspace(
        &home,
        json!({"mcpServers": {"obs": fixture_entry(&["--name", "obs", "--conventional"])}}),
    );
    ok(&home, &ws, &["trust", "--yes"]);
    let inj = ok(
        &home,
        &ws,
        &["inject", "--thread-system", "Be concise.", "--json"],
    );
    let roles: Vec<&str> = inj["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        [
            "system",
            "user",
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant"
        ],
        "{inj:#}"
    );
    let system = inj["messages"][0]["content"].as_str().unwrap();
    let tandem_at = system
        .find("[System instructions from Server: tandem]")
        .unwrap();
    let obs_at = system
        .find("[System instructions from Server: obs]")
        .unwrap();
    let thread_at = system.find("[Thread System Prompt]\nBe concise.").unwrap();
    assert!(tandem_at < obs_at && obs_at < thread_at, "{system}");
    assert!(system.contains("[Tool instructions from Server: obs]"));
    // Tandem's memory index, then the fixture's tool calls, each with its tool answer.
    assert_eq!(
        inj["messages"][3]["tool_calls"][0]["function"]["name"],
        "memory_index"
    );
    assert_eq!(
        inj["messages"][4]["tool_call_id"],
        inj["messages"][3]["tool_calls"][0]["id"]
    );
    assert!(
        inj["messages"][4]["content"]
            .as_str()
            .unwrap()
            .contains("\"total\":0")
    );
    assert_eq!(
        inj["messages"][7]["tool_calls"][0]["function"],
        json!({"name": "weather", "arguments": "{\"city\":\"Paris\"}"})
    );
    assert!(
        inj["warnings"].to_string().contains("tool_call:orphan"),
        "{}",
        inj["warnings"]
    );
    let counted: u64 = inj["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["tokens"].as_u64().unwrap())
        .sum();
    // The total also counts the headers and separators the injection adds around them.
    let total = inj["total_tokens"].as_u64().unwrap();
    assert!(
        counted > 100 && counted <= total && total - counted < 40,
        "{counted} of {total}"
    );

    // Settings: Tandem's system prompt off, obs's user prompt off, priorities.
    std::fs::create_dir_all(home.tandem_home()).unwrap();
    std::fs::write(
        home.tandem_home().join("config.json"),
        json!({"conventionalPrompts": {"servers": {
            "tandem": {"prompts": {"system_prompt": {"enabled": false}}, "priority": 10},
            "obs": {"prompts": {"User_Prompt": {"enabled": false}}},
        }}})
        .to_string(),
    )
    .unwrap();
    let inj = ok(&home, &ws, &["inject", "--json"]);
    let system = inj["messages"][0]["content"].as_str().unwrap();
    assert!(!system.contains("Server: tandem"), "{system}");
    let users = inj["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .count();
    assert_eq!(users, 1);
    // With priority 10, Tandem's tool call now follows the fixture's.
    let calls: Vec<&str> = inj["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["tool_calls"][0]["id"].as_str())
        .collect();
    assert_eq!(calls.last().unwrap(), &"tandem__memory_index", "{calls:?}");

    // Off entirely.
    std::fs::write(
        home.tandem_home().join("config.json"),
        json!({"conventionalPrompts": {"enabled": false}}).to_string(),
    )
    .unwrap();
    let inj = ok(
        &home,
        &ws,
        &["inject", "--thread-system", "Only this.", "--json"],
    );
    assert_eq!(
        inj["messages"],
        json!([{"role": "system", "content": "Only this."}])
    );
    let preview = home
        .std_command()
        .args(["inject"])
        .current_dir(&ws)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&preview.stdout).contains("tokens"));
}

#[tokio::test]
async fn tandems_own_conventional_prompts_are_mcp_prompts() {
    let home = TestHome::new();
    let mcp = home.mcp().await;
    mcp.ok(
        "rekall_add",
        json!({"type": "pitfall", "title": "Clock skew", "content": "Allow leeway."}),
    )
    .await;
    let prompts = mcp.client.list_all_prompts().await.unwrap();
    let names: Vec<&str> = prompts.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "system_prompt",
            "tool_call:memory_index",
            "tool_result:memory_index"
        ]
    );
    let result = mcp
        .client
        .get_prompt(rmcp::model::GetPromptRequestParams::new(
            "tool_result:memory_index",
        ))
        .await
        .unwrap();
    let text = serde_json::to_value(&result.messages[0].content).unwrap()["text"]
        .as_str()
        .unwrap()
        .to_string();
    let data: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(data["data"]["total"], 1);
    assert_eq!(data["data"]["by_type"]["pitfall"], 1);
    assert_eq!(data["data"]["recent"][0]["title"], "Clock skew");
    let err = mcp
        .client
        .get_prompt(rmcp::model::GetPromptRequestParams::new("nope"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("unknown prompt 'nope'"), "{err}");
    mcp.close().await;
}

/// Kills a child process when the test ends.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn streamable_http_servers_work_like_stdio_ones() {
    let home = TestHome::new();
    let port = crate::util::free_port();
    let _server = Killed(
        std::process::Command::new(everything_bin())
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    poll(
        &format!("server-everything to listen on {port}"),
        15,
        || {
            std::net::TcpStream::connect(("127.0.0.1", port))
                .map(drop)
                .map_err(|e| e.to_string())
        },
    );
    let (ws, _) = user_config(
        &home,
        &json!({"mcpServers": {
            "remote": {"type": "http", "url": format!("http://127.0.0.1:{port}/mcp"),
                       "headers": {"Authorization": "Bearer not-checked", "X-Tandem-Test": "1"}},
            "gone": {"url": "http://127.0.0.1:9/mcp"},
        }})
        .to_string(),
    );
    let report = ok(&home, &ws, &["servers", "--json", "--wait", "20"]);
    let remote = server(&report, "remote");
    assert_eq!(remote["state"], "ready", "{report:#}");
    assert_eq!(remote["prompts"], 4);
    assert_eq!(remote["runs"], format!("http://127.0.0.1:{port}/mcp"));
    let gone = server(&report, "gone");
    assert_eq!(
        gone["state"], "restarting",
        "an unreachable URL is a failure, retried: {gone}"
    );
    let run = ok(
        &home,
        &ws,
        &["prompt", "/remote:args-prompt", "city=Lyon", "--json"],
    );
    assert!(
        run["messages"][0]["content"]["text"]
            .as_str()
            .unwrap()
            .contains("Lyon"),
        "{run}"
    );
}

#[test]
fn conventional_prompts_can_be_limited_to_models() {
    let home = TestHome::new();
    let ws = workspace(
        &home,
        json!({"mcpServers": {"obs": fixture_entry(&["--name", "obs", "--conventional"])}}),
    );
    ok(&home, &ws, &["trust", "--yes"]);
    std::fs::create_dir_all(home.tandem_home()).unwrap();
    std::fs::write(
        home.tandem_home().join("config.json"),
        json!({"conventionalPrompts": {"servers": {
            "obs": {"models": ["claude-*"], "prompts": {"assistant_prompt": {"models": ["gpt-*"]}}},
        }}})
        .to_string(),
    )
    .unwrap();
    let from_obs = |inj: &Value| -> Vec<String> {
        inj["sources"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["server"] == "obs")
            .map(|s| s["prompt"].as_str().unwrap().to_string())
            .collect()
    };
    let none = ok(&home, &ws, &["inject", "--json"]);
    assert!(
        from_obs(&none).is_empty(),
        "no model named: {:?}",
        from_obs(&none)
    );
    let claude = ok(
        &home,
        &ws,
        &["inject", "--model", "Claude-Sonnet", "--json"],
    );
    let names = from_obs(&claude);
    assert!(
        names.contains(&"system_prompt".to_string())
            && !names.contains(&"assistant_prompt".to_string()),
        "{names:?}"
    );
    let gpt = ok(&home, &ws, &["inject", "--model", "gpt-5", "--json"]);
    assert_eq!(from_obs(&gpt), ["assistant_prompt"]);
}

/// The `user_prompt` the fixture's `--context-prompt` serves, as injected (`Context #K ...`).
fn context_text(inj: &Value) -> Option<String> {
    let at = inj["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["server"] == "ctx")?["message"]
        .as_u64()? as usize;
    Some(inj["messages"][at]["content"].as_str()?.to_string())
}

#[test]
fn conventional_prompts_are_configured_from_the_cli() {
    let home = TestHome::new();
    // The user's own layout: four-space indents, a member Tandem does not know, key order.
    let servers = format!(
        r#"{{"ctx": {{"command": {}, "args": ["--name", "ctx", "--context-prompt", "--prompt-args"]}}}}"#,
        json!(fixture_bin())
    );
    let original = format!("{{\n    \"zeta\": [1,  2],\n    \"mcpServers\": {servers}\n}}\n");
    let (ws, user) = user_config(&home, &original);

    // focus is required and not configured: listed as missing, left out with a warning
    // that says how to set it.
    let list = ok(&home, &ws, &["inject", "prompts", "--json"]);
    let ctx = list
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["command"] == "/ctx:user_prompt")
        .unwrap_or_else(|| panic!("{list:#}"));
    assert_eq!(ctx["missing"], json!(["focus"]));
    assert_eq!(ctx["kind"], "user_prompt");
    assert_eq!(ctx["arguments"][1]["name"], "depth");
    assert!(
        list.as_array()
            .unwrap()
            .iter()
            .any(|c| c["command"] == "/tandem:tool_call:memory_index"),
        "{list:#}"
    );
    assert!(!list.to_string().contains("greet"), "not conventional");
    let inj = ok(&home, &ws, &["inject", "--json"]);
    assert_eq!(context_text(&inj), None);
    assert!(
        inj["warnings"]
            .to_string()
            .contains("needs 'focus' (What to focus on)"),
        "{}",
        inj["warnings"]
    );

    // Set it (the shell's quoting), check it, and the file keeps what the user wrote.
    let set = ok(
        &home,
        &ws,
        &[
            "inject",
            "set",
            "/ctx:user_prompt",
            "focus=two words",
            "depth=2",
            "--json",
        ],
    );
    assert_eq!(set["missing"], json!([]));
    assert_eq!(set["arguments"][0]["value"], "two words");
    let written = std::fs::read_to_string(&user).unwrap();
    assert!(
        written.starts_with(&format!(
            "{{\n    \"zeta\": [1,  2],\n    \"mcpServers\": {servers},\n    \"conventionalPrompts\": {{\n        \"servers\""
        )),
        "{written}"
    );
    let inj = ok(&home, &ws, &["inject", "--json"]);
    assert_eq!(
        context_text(&inj).as_deref(),
        Some("Context #1 from ctx: focus=two words, depth=2")
    );

    // Wrong settings are refused and change nothing.
    for (args, code) in [
        (
            &["inject", "set", "/ctx:user_prompt", "nope=1"][..],
            "UNKNOWN_ARGUMENT",
        ),
        (
            &["inject", "set", "/ctx:greet", "name=x"][..],
            "INVALID_ARGUMENT",
        ),
        (
            &["inject", "set", "/ctx:missing", "--disable"][..],
            "PROMPT_NOT_FOUND",
        ),
        (
            &["inject", "set", "/elsewhere:user_prompt", "--disable"][..],
            "SERVER_NOT_FOUND",
        ),
        (
            &["inject", "set", "/tandem:system_prompt", "x=1"][..],
            "UNKNOWN_ARGUMENT",
        ),
        (
            &["inject", "set", "/ctx:user_prompt"][..],
            "INVALID_ARGUMENT",
        ),
    ] {
        let (success, _, stderr) = tandem(&home, &ws, args);
        assert!(!success && stderr.contains(code), "{args:?}: {stderr}");
    }
    assert_eq!(std::fs::read_to_string(&user).unwrap(), written);

    // A one-word command line works too; --unset and --disable.
    ok(
        &home,
        &ws,
        &[
            "inject",
            "set",
            "/ctx:user_prompt focus=\"a b\"",
            "--unset",
            "depth",
        ],
    );
    let inj = ok(&home, &ws, &["inject", "--json"]);
    assert_eq!(
        context_text(&inj).as_deref(),
        Some("Context #1 from ctx: focus=a b, depth=-")
    );
    ok(
        &home,
        &ws,
        &["inject", "set", "/ctx:user_prompt", "--disable"],
    );
    ok(
        &home,
        &ws,
        &["inject", "set", "/tandem:system_prompt", "--disable"],
    );
    let inj = ok(&home, &ws, &["inject", "--json"]);
    assert_eq!(context_text(&inj), None);
    assert!(!inj["messages"].to_string().contains("Server: tandem"));
    let settings: Value = serde_json::from_str(&std::fs::read_to_string(&user).unwrap()).unwrap();
    assert_eq!(
        settings["conventionalPrompts"]["servers"],
        json!({
            "ctx": {"prompts": {"user_prompt": {"arguments": {"focus": "a b"}, "enabled": false}}},
            "tandem": {"prompts": {"system_prompt": {"enabled": false}}},
        })
    );

    // A config file that is not JSON is not overwritten.
    std::fs::write(&user, "{ broken").unwrap();
    let (success, _, stderr) = tandem(
        &home,
        &ws,
        &["inject", "set", "/tandem:system_prompt", "--enable"],
    );
    assert!(!success && stderr.contains("CONFIG_INVALID"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&user).unwrap(), "{ broken");
}

#[test]
fn the_injection_cache_is_kept_until_a_change_or_its_max_age() {
    let home = TestHome::new();
    let config = |max_age: Option<u64>| {
        let mut ctx = json!({"prompts": {"user_prompt": {"arguments": {"focus": "x"}}}});
        if let Some(secs) = max_age {
            ctx["max_age_secs"] = json!(secs);
        }
        json!({
            "mcpServers": {"ctx": fixture_entry(&["--name", "ctx", "--context-prompt"])},
            "conventionalPrompts": {"servers": {"ctx": ctx}},
        })
        .to_string()
    };
    let (ws, user) = user_config(&home, &config(None));
    let _daemon = start_daemon(&home);
    let fetch = |home: &TestHome| context_text(&ok(home, &ws, &["inject", "--json"])).unwrap();
    // Fetched once, then served from the daemon's cache.
    assert!(fetch(&home).starts_with("Context #1 "));
    assert!(fetch(&home).starts_with("Context #1 "));
    // A config change empties the cache; with max_age_secs, the cache expires. The daemon
    // reloads the file when its watch sees the change: until then, the old cache answers.
    std::fs::write(&user, config(Some(1))).unwrap();
    poll("the config change to empty the cache", 10, || {
        let text = fetch(&home);
        if text.starts_with("Context #2 ") {
            return Ok(());
        }
        assert!(text.starts_with("Context #1 "), "{text}");
        Err(text)
    });
    // Kept while younger than a second, then fetched again: #2 until the age passes, then #3.
    let fetched_at = Instant::now();
    poll("the cache to expire", 10, || {
        let text = fetch(&home);
        if text.starts_with("Context #3 ") {
            return Ok(());
        }
        assert!(text.starts_with("Context #2 "), "{text}");
        Err(text)
    });
    assert!(fetched_at.elapsed() >= Duration::from_millis(500));
}

#[test]
fn the_injection_takes_the_conversation_and_threads() {
    let home = TestHome::new();
    let (ws, _) = user_config(
        &home,
        &json!({"conventionalPrompts": {"servers": {"tandem": {
            "prompts": {"system_prompt": {"threads": ["review-*"]}},
        }}}})
        .to_string(),
    );
    let conversation = home.path().join("conversation.json");
    let chat = json!([
        {"role": "system", "content": "Answer in French."},
        {"role": "user", "content": [{"type": "text", "text": "Bonjour"}], "name": "ana"},
    ]);
    std::fs::write(&conversation, chat.to_string()).unwrap();
    let file = conversation.to_str().unwrap();

    // No thread named: the system prompt limited to review threads is left out, and the
    // conversation's system message is the thread's, merged into the first message.
    let inj = ok(&home, &ws, &["inject", "--conversation", file, "--json"]);
    let all = inj["with_conversation"].as_array().unwrap();
    assert_eq!(
        inj["messages"][0],
        json!({"role": "system", "content": "Answer in French."})
    );
    assert_eq!(all.len(), inj["messages"].as_array().unwrap().len() + 1);
    assert_eq!(all[0], inj["messages"][0]);
    // The user's message is passed on exactly as given.
    assert_eq!(all.last().unwrap(), &chat[1]);

    let inj = ok(
        &home,
        &ws,
        &[
            "inject",
            "--conversation",
            file,
            "--thread",
            "Review-7",
            "--json",
        ],
    );
    let system = inj["with_conversation"][0]["content"].as_str().unwrap();
    assert!(
        system.starts_with("[System instructions from Server: tandem]")
            && system.ends_with("[Thread System Prompt]\nAnswer in French."),
        "{system}"
    );
    assert_eq!(inj["sources"][0]["prompt"], "system_prompt");

    // The thread's system prompt twice, and messages that are not messages, are errors.
    for (content, extra, says) in [
        (
            chat.to_string(),
            &["--thread-system", "Be brief."][..],
            "thread_system",
        ),
        ("[1]".to_string(), &[][..], "conversation[0]"),
        (
            r#"[{"content": "no role"}]"#.to_string(),
            &[][..],
            "conversation[0].role",
        ),
    ] {
        std::fs::write(&conversation, content).unwrap();
        let mut args = vec!["inject", "--conversation", file, "--json"];
        args.extend(extra);
        let (success, _, stderr) = tandem(&home, &ws, &args);
        assert!(
            !success && stderr.contains("INVALID_ARGUMENT") && stderr.contains(says),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn the_agents_entry_for_tandem_is_not_a_downstream_server() {
    // The `.mcp.json` an agent reads lists Tandem itself beside the other servers.
    let home = TestHome::new();
    let ws = workspace(
        &home,
        json!({"mcpServers": {
            "tandem": {"command": crate::util::tandem_bin(), "args": ["mcp"]},
            "obs": fixture_entry(&["--name", "obs", "--conventional"]),
        }}),
    );
    ok(&home, &ws, &["trust", "--yes"]);
    let report = ok(&home, &ws, &["servers", "--json"]);
    let names: Vec<&str> = report["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["obs"], "{report:#}");
    // Tandem's own prompts come once: its system prompt and its memory_index pair.
    let inj = ok(&home, &ws, &["inject", "--json"]);
    let own: Vec<&str> = inj["sources"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["server"] == "tandem")
        .map(|s| s["prompt"].as_str().unwrap())
        .collect();
    assert_eq!(
        own,
        [
            "system_prompt",
            "tool_call:memory_index",
            "tool_result:memory_index"
        ]
    );
}

#[test]
fn concurrent_settings_edits_all_land() {
    let home = TestHome::new();
    let (ws, user) = user_config(
        &home,
        &json!({"mcpServers": {"ctx": fixture_entry(&["--name", "ctx", "--context-prompt"])}})
            .to_string(),
    );
    let _daemon = start_daemon(&home);
    // Each edit reads the file, changes one thing and writes it back, all at once through
    // the daemon.
    let edits: &[&[&str]] = &[
        &["inject", "set", "/ctx:user_prompt", "focus=f"],
        &["inject", "set", "/ctx:user_prompt", "depth=3"],
        &["inject", "set", "/tandem:system_prompt", "--disable"],
        &[
            "inject",
            "set",
            "/tandem:tool_call:memory_index",
            "--disable",
        ],
    ];
    std::thread::scope(|s| {
        for args in edits {
            let (home, ws) = (&home, &ws);
            s.spawn(move || ok(home, ws, args));
        }
    });
    let settings: Value = serde_json::from_str(&std::fs::read_to_string(&user).unwrap()).unwrap();
    assert_eq!(
        settings["conventionalPrompts"]["servers"],
        json!({
            "ctx": {"prompts": {"user_prompt": {"arguments": {"focus": "f", "depth": "3"}}}},
            "tandem": {"prompts": {
                "system_prompt": {"enabled": false},
                "tool_call:memory_index": {"enabled": false},
            }},
        })
    );
    assert!(settings["mcpServers"]["ctx"].is_object());
}
