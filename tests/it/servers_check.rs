//! `tandem servers check` through the real binary (the fixture on stdio, server-everything
//! over Streamable HTTP, a server whose name carries escape sequences), its clear refusals
//! (an unknown name, a bad URL, an untrusted workspace file, a server that never answers),
//! and the hub's failures as people read them: an HTTP entry pointing at a closed port, or
//! at a server answering 404 or 500, reported by `tandem servers` and `mcp_activate`
//! without a Rust type name.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::util::{TestHome, everything_bin, fixture_bin, free_port, poll};

/// `tandem ARGS` in `dir`: (exit success, stdout, stderr).
fn run(home: &TestHome, dir: &Path, args: &[&str]) -> (bool, String, String) {
    let out = home
        .std_command()
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

fn json_of(home: &TestHome, dir: &Path, args: &[&str]) -> Value {
    let (ok, stdout, stderr) = run(home, dir, args);
    assert!(ok, "tandem {args:?} failed: {stderr}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// The user's config holding `servers`, and a plain directory as the workspace.
fn with_servers(home: &TestHome, servers: Value) -> PathBuf {
    let ws = home.path().join("plain");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(home.tandem_home()).unwrap();
    std::fs::write(
        home.tandem_home().join("config.json"),
        json!({ "mcpServers": servers }).to_string(),
    )
    .unwrap();
    ws
}

/// A message for people: no Rust path, no generic type.
fn assert_plain(message: &str) {
    assert!(
        !message.contains("::") && !message.contains('<'),
        "not for people: {message}"
    );
}

#[test]
fn check_shows_a_stdio_server_and_calls_a_tool() {
    let home = TestHome::new();
    let ws = with_servers(
        &home,
        json!({"fix": {"command": fixture_bin(), "args": ["--name", "fix", "--prompt-args"],
                       "disabled": true}}),
    );
    let report = json_of(&home, &ws, &["servers", "check", "fix", "--json"]);
    assert_eq!(report["name"], "fix");
    assert_eq!(report["serverInfo"]["name"], "fix", "{report:#}");
    assert!(
        report["protocolVersion"]
            .as_str()
            .unwrap()
            .starts_with("20")
    );
    assert!(report["capabilities"]["tools"].is_object(), "{report:#}");
    let tools: Vec<&str> = report["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["set_prompts", "touch_tools", "echo"]);
    assert_eq!(report["prompts"][0]["name"], "greet");
    assert!(report.get("call").is_none());

    // The human view: the server, its capabilities, and a table each.
    let (ok, text, stderr) = run(&home, &ws, &["servers", "check", "fix"]);
    assert!(ok, "{stderr}");
    for part in [
        "server        fix ",
        "capabilities",
        "tools (3)",
        "echo",
        "text*",
        "prompts (1)",
        "name* style",
        "resources (0)",
    ] {
        assert!(text.contains(part), "{part:?} not in:\n{text}");
    }

    // One call, its result printed; an error answer fails the command.
    let called = json_of(
        &home,
        &ws,
        &[
            "servers",
            "check",
            "fix",
            "--call",
            "echo",
            "--args",
            r#"{"text": "hi"}"#,
            "--json",
        ],
    );
    assert_eq!(called["call"]["tool"], "echo");
    let answer = called["call"]["result"]["content"][0]["text"]
        .as_str()
        .unwrap();
    assert!(answer.contains("hi"), "{called:#}");
    let (ok, text, _) = run(
        &home,
        &ws,
        &[
            "servers",
            "check",
            "fix",
            "--call",
            "echo",
            "--args",
            r#"{"text": "hi"}"#,
        ],
    );
    assert!(
        ok && text.contains("\ncall echo\n") && text.contains("hi"),
        "{text}"
    );
    let (ok, _, stderr) = run(&home, &ws, &["servers", "check", "fix", "--call", "echo"]);
    assert!(!ok, "a call without its required argument must fail");
    assert!(
        stderr.contains("server 'fix' answered tools/call with an error")
            && stderr.contains("(SERVER_ERROR)"),
        "{stderr}"
    );
    let (ok, _, stderr) = run(
        &home,
        &ws,
        &["servers", "check", "fix", "--call", "echo", "--args", "[1]"],
    );
    assert!(
        !ok && stderr.contains("--args must be a JSON object"),
        "{stderr}"
    );
}

#[test]
fn check_reaches_a_streamable_http_server_by_url() {
    let home = TestHome::new();
    let port = free_port();
    let _server = Killed(
        std::process::Command::new(everything_bin())
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    poll(&format!("server-everything on {port}"), 15, || {
        std::net::TcpStream::connect(("127.0.0.1", port))
            .map(drop)
            .map_err(|e| e.to_string())
    });
    let url = format!("http://127.0.0.1:{port}/mcp");
    let ws = with_servers(&home, json!({}));
    let report = json_of(
        &home,
        &ws,
        &[
            "servers",
            "check",
            &url,
            "--call",
            "echo",
            "--args",
            r#"{"message": "over http"}"#,
            "--json",
        ],
    );
    assert_eq!(report["name"], url.as_str());
    assert_eq!(report["runs"], url.as_str());
    assert!(report["instructions"].is_string(), "{report:#}");
    assert!(
        report["resources"].as_array().unwrap().len() > 1,
        "{report:#}"
    );
    assert!(
        report["call"]["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("over http"),
        "{report:#}"
    );
}

#[test]
fn what_a_server_says_cannot_drive_the_terminal() {
    let home = TestHome::new();
    let evil = "evil\u{1b}]0;owned\u{7}\u{1b}[2J\u{9b}31m\u{202e}";
    let ws = with_servers(
        &home,
        json!({"evil": {"command": fixture_bin(), "args": ["--name", evil]}}),
    );
    for args in [
        &[
            "servers",
            "check",
            "evil",
            "--call",
            "echo",
            "--args",
            r#"{"text": "x"}"#,
        ][..],
        &[
            "servers",
            "check",
            "evil",
            "--call",
            "echo",
            "--args",
            r#"{"text": "x"}"#,
            "--json",
        ][..],
    ] {
        let (ok, text, stderr) = run(&home, &ws, args);
        assert!(ok, "{stderr}");
        for c in ['\u{1b}', '\u{7}', '\u{9b}', '\u{202e}'] {
            assert!(
                !text.contains(c),
                "{c:?} reached the terminal in:\n{text:?}"
            );
        }
        assert!(text.contains("evil\\u"), "{text}");
    }
}

#[test]
fn check_refuses_clearly() {
    let home = TestHome::new();
    let ws = home.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    crate::util::git(&ws, &["init", "-q"]);
    let ran = ws.join("RAN");
    std::fs::write(
        ws.join(".mcp.json"),
        json!({"mcpServers": {"local": {"command": "sh", "args": ["-c", format!("touch {}", ran.display())]}}})
            .to_string(),
    )
    .unwrap();

    let (ok, _, stderr) = run(&home, &ws, &["servers", "check", "local"]);
    assert!(!ok);
    assert!(
        stderr.contains("not trusted yet")
            && stderr.contains("tandem trust")
            && stderr.contains("(SERVER_UNTRUSTED)"),
        "{stderr}"
    );
    assert!(!ran.exists(), "an untrusted file's command ran");

    let (ok, _, stderr) = run(&home, &ws, &["servers", "check", "nope"]);
    assert!(!ok);
    assert!(
        stderr.contains("no server 'nope'")
            && stderr.contains("it has local")
            && stderr.contains("(SERVER_NOT_FOUND)"),
        "{stderr}"
    );

    for bad in [
        "http://",
        "ftp://example.com/mcp",
        "http://exa mple.com/mcp",
    ] {
        let (ok, _, stderr) = run(&home, &ws, &["servers", "check", bad]);
        assert!(!ok);
        assert!(stderr.contains("(INVALID_ARGUMENT)"), "{bad}: {stderr}");
        assert_plain(&stderr);
    }

    // A server that takes the connection and never answers: the time limit.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/mcp", silent.local_addr().unwrap());
    let started = std::time::Instant::now();
    let (ok, _, stderr) = run(&home, &ws, &["servers", "check", &url, "--timeout", "1"]);
    assert!(!ok);
    assert!(started.elapsed() < std::time::Duration::from_secs(15));
    assert!(stderr.contains("within 1.0s"), "{stderr}");
    assert_plain(&stderr);
    drop(silent);
}

/// An HTTP server on loopback that answers every request with `status` and a short body,
/// until the test ends.
fn answering(status: &'static str) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            std::thread::spawn(move || {
                let _ = stream.set_read_timeout(Some(std::time::Duration::from_millis(500)));
                let mut buf = [0u8; 8192];
                let _ = stream.read(&mut buf);
                let body = "no MCP here";
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    port
}

#[tokio::test]
async fn http_failures_read_as_sentences_in_servers_and_mcp_activate() {
    let home = TestHome::new();
    let closed = free_port();
    let missing = answering("404 Not Found");
    let broken = answering("500 Internal Server Error");
    let ws = with_servers(
        &home,
        json!({
            "closed": {"url": format!("http://127.0.0.1:{closed}/mcp"), "autostart": false},
            "missing": {"url": format!("http://127.0.0.1:{missing}/mcp"), "autostart": false},
            "broken": {"url": format!("http://127.0.0.1:{broken}/mcp"), "autostart": false},
        }),
    );
    let expected = [
        (
            "closed",
            format!("nothing listens at http://127.0.0.1:{closed}/mcp: is the server running?"),
        ),
        (
            "missing",
            format!(
                "http://127.0.0.1:{missing}/mcp answered HTTP 404 Not Found: is the URL the server's MCP endpoint"
            ),
        ),
        (
            "broken",
            format!("http://127.0.0.1:{broken}/mcp failed with HTTP 500 (Internal Server Error)"),
        ),
    ];

    // The agent's view: each activation fails with the reason, in words.
    let agent = home.mcp_in(&ws).await;
    for (name, reason) in &expected {
        let (is_error, v) = agent.call("mcp_activate", json!({"name": name})).await;
        assert!(is_error, "{v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(reason.as_str()),
            "{reason:?} not in {message:?}"
        );
        assert_plain(message);
    }
    agent.close().await;

    // The shell's: `tandem servers` (each tried once more, the data dir opened here) and
    // `tandem servers check`.
    for (name, reason) in &expected {
        let (ok, _, stderr) = run(&home, &ws, &["servers", "check", name]);
        assert!(!ok);
        assert!(
            stderr.contains(reason.as_str()),
            "{reason:?} not in {stderr:?}"
        );
        assert_plain(&stderr);
    }
    let (ok, stdout, stderr) = run(&home, &ws, &["servers", "--json"]);
    assert!(ok, "{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    for s in report["servers"].as_array().unwrap() {
        if let Some(e) = s["last_error"].as_str() {
            assert_plain(e);
        }
    }
}

struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A server's questions during a check: a form accepted with its defaults on request,
/// declined with no terminal to ask on; sampling declined with the reason.
#[test]
fn check_answers_a_servers_questions() {
    let home = TestHome::new();
    let ws = with_servers(
        &home,
        json!({"everything": {"command": everything_bin(), "args": ["stdio"]}}),
    );
    let form = [
        "servers",
        "check",
        "everything",
        "--call",
        "trigger-elicitation-request",
    ];
    let mut with_defaults = form.to_vec();
    with_defaults.push("--accept-defaults");
    let (ok, text, stderr) = run(&home, &ws, &with_defaults);
    assert!(ok, "{stderr}");
    for default in ["- Favorite Integer: 42", "- Favorite Number: 3.14"] {
        assert!(text.contains(default), "{default} not in {text}");
    }
    // The test's stdin is no terminal: nobody to ask.
    let (ok, text, stderr) = run(&home, &ws, &form);
    assert!(ok, "{stderr}");
    assert!(text.contains("User declined"), "{text}");
    let (ok, text, stderr) = run(
        &home,
        &ws,
        &[
            "servers",
            "check",
            "everything",
            "--call",
            "trigger-sampling-request",
            "--args",
            r#"{"prompt": "hi", "maxTokens": 5}"#,
        ],
    );
    assert!(!ok);
    assert!(
        text.contains("no client connected to Tandem can sample"),
        "{text}\n{stderr}"
    );
}
