//! Remote servers that sign in (OAuth 2.1), through the real binary and its daemon, against
//! real servers: the TypeScript SDK's own example (`simpleStreamableHttp.js --oauth`, whose
//! demo authorization server approves at once) and `tests/node/oauth_short_tokens.cjs` (the
//! SDK's auth router and bearer check, with short-lived tokens and refresh tokens). The
//! browser is `tests/node/browser.cjs`, which records each URL it is given and follows it,
//! refuses, ignores it or fails, as its mode file says.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::util::{
    DaemonGuard, McpClient, TestHome, free_port, home_with_servers, npm_modules, poll,
};

/// A node server of the test, stopped (killed) with it.
pub(crate) struct Node {
    _child: tokio::process::Child,
}

impl Node {
    async fn start(script: &Path, args: &[&str], env: &[(&str, String)], ports: &[u16]) -> Node {
        let mut cmd = tokio::process::Command::new("node");
        cmd.arg(script)
            .args(args)
            .env("NODE_PATH", npm_modules())
            .envs(env.iter().map(|(k, v)| (*k, v)))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true);
        let child = cmd.spawn().expect("node runs");
        for &port in ports {
            poll(&format!("a server on port {port}"), 20, || {
                std::net::TcpStream::connect(("127.0.0.1", port))
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            });
        }
        Node { _child: child }
    }
}

/// The SDK's example server with its demo authorization server: its MCP URL.
pub(crate) async fn sdk_oauth_server() -> (Node, String) {
    let (mcp, auth) = (free_port(), free_port());
    let script = npm_modules()
        .join("@modelcontextprotocol/sdk/dist/esm/examples/server/simpleStreamableHttp.js");
    let node = Node::start(
        &script,
        &["--oauth"],
        &[
            ("MCP_PORT", mcp.to_string()),
            ("MCP_AUTH_PORT", auth.to_string()),
        ],
        &[mcp, auth],
    )
    .await;
    (node, format!("http://localhost:{mcp}/mcp"))
}

/// The short-token server (`TOKEN_SECS` seconds): its base URL.
async fn short_token_server(token_secs: u32) -> (Node, String) {
    short_token_server_with(token_secs, &[]).await
}

/// The short-token server with more of its settings (`BARE_401`).
async fn short_token_server_with(token_secs: u32, env: &[(&str, &str)]) -> (Node, String) {
    let port = free_port();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/node/oauth_short_tokens.cjs");
    let node = Node::start(
        &script,
        &[],
        &[
            &[
                ("MCP_PORT", port.to_string()),
                ("TOKEN_SECS", token_secs.to_string()),
            ][..],
            &env.iter()
                .map(|(k, v)| (*k, v.to_string()))
                .collect::<Vec<_>>(),
        ]
        .concat(),
        &[port],
    )
    .await;
    (node, format!("http://localhost:{port}"))
}

/// What the short-token server counted: tokens by code and by refresh, POSTs to /mcp.
async fn stats(base: &str) -> Value {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::get(format!("{base}/stats"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// The browser stand-in of a home: `$BROWSER`, its mode file and its log of URLs.
pub(crate) struct Browser {
    pub(crate) command: String,
    mode: PathBuf,
    log: PathBuf,
}

impl Browser {
    pub(crate) fn new(home: &TestHome, mode: &str) -> Browser {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/node/browser.cjs");
        let (mode_file, log) = (
            home.path().join("browser.mode"),
            home.path().join("browser.log"),
        );
        std::fs::write(&mode_file, mode).unwrap();
        Browser {
            command: format!(
                "node '{}' '{}' '{}'",
                script.display(),
                mode_file.display(),
                log.display()
            ),
            mode: mode_file,
            log,
        }
    }

    fn set(&self, mode: &str) {
        std::fs::write(&self.mode, mode).unwrap();
    }

    /// The URLs it was opened on so far.
    pub(crate) fn opened(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }
}

async fn agent(home: &TestHome, ws: &Path, browser: &Browser) -> McpClient {
    home.mcp_daemon_env(ws, 60, &[("BROWSER", &browser.command)])
        .await
}

/// An agent that activated `notes`, which asked for a sign-in that `browser` approved.
async fn signed_in(home: &TestHome, ws: &Path, browser: &Browser) -> McpClient {
    let agent = agent(home, ws, browser).await;
    until_status(&agent, "notes", "needs-sign-in").await;
    agent.ok("mcp_activate", json!({"name": "notes"})).await;
    agent
}

/// The server `name` as `mcp_environment` lists it.
async fn listed(agent: &McpClient, name: &str) -> Value {
    let env = agent.ok("mcp_environment", json!({})).await;
    env["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no {name} in {env:#}"))
}

/// Waits until `mcp_environment` lists `name` with `status`.
async fn until_status(agent: &McpClient, name: &str, status: &str) -> Value {
    for _ in 0..200 {
        let s = listed(agent, name).await;
        if s["status"] == status {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "{name} never became {status}: {}",
        listed(agent, name).await
    );
}

/// Calls the `greet` tool of `notes` through `mcp_call`: the text it answers.
async fn greet(agent: &McpClient, name: &str) -> String {
    let r = agent
        .try_call(
            "mcp_call",
            json!({"server": "notes", "tool": "greet", "arguments": {"name": name}}),
        )
        .await
        .unwrap();
    let text = serde_json::to_string(&r.content).unwrap();
    assert_ne!(r.is_error, Some(true), "greet failed: {text}");
    text
}

/// The files of the token store.
pub(crate) fn token_files(home: &TestHome) -> Vec<PathBuf> {
    match std::fs::read_dir(home.tandem_home().join("oauth")) {
        Ok(dir) => dir.map(|e| e.unwrap().path()).collect(),
        Err(_) => Vec::new(),
    }
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// The access token kept in the store's one file.
fn stored_token(home: &TestHome) -> String {
    let files = token_files(home);
    assert_eq!(files.len(), 1, "{files:?}");
    let file: Value = serde_json::from_slice(&std::fs::read(&files[0]).unwrap()).unwrap();
    file["credentials"]["token_response"]["access_token"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn a_server_that_asks_signs_in_on_activation_and_stays_signed_in() {
    let (_server, url) = sdk_oauth_server().await;
    let (home, ws) = home_with_servers(json!({"notes": {"type": "http", "url": url}}));
    let _daemon = DaemonGuard(&home);
    let browser = Browser::new(&home, "follow");
    let mut answers = Vec::new();

    let agent1 = agent(&home, &ws, &browser).await;
    let notes = until_status(&agent1, "notes", "needs-sign-in").await;
    let problem = notes["problem"].as_str().unwrap();
    assert!(
        problem.contains("tandem servers login notes") && problem.contains("mcp_activate"),
        "{problem}"
    );
    assert!(browser.opened().is_empty(), "the browser opened unasked");

    // Activation signs in: the browser follows the authorization URL back to Tandem.
    let activated = agent1.ok("mcp_activate", json!({"name": "notes"})).await;
    let tools: Vec<&str> = activated["toolsAdded"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(tools.contains(&"notes__greet"), "{activated:#}");
    let opened = browser.opened();
    assert_eq!(opened.len(), 1, "{opened:?}");
    assert!(
        opened[0].contains("code_challenge_method=S256") && opened[0].contains("resource="),
        "{}",
        opened[0]
    );
    let called = greet(&agent1, "Ada").await;
    assert!(called.contains("Hello, Ada"), "{called}");
    answers.push(activated.to_string());
    answers.push(called.clone());
    answers.push(listed(&agent1, "notes").await.to_string());

    // The token is kept privately, and shown nowhere.
    let token = stored_token(&home);
    assert_eq!(mode(&token_files(&home)[0]), 0o600);
    assert_eq!(mode(&home.tandem_home().join("oauth")), 0o700);
    let servers = crate::util::succeeds({
        let mut cmd = home.std_command();
        cmd.current_dir(&ws).args(["servers", "--json"]);
        cmd
    });
    assert!(servers.contains("\"ready\""), "{servers}");
    answers.push(servers);
    agent1.close().await;

    // After a restart of the daemon, the stored token connects it: no browser.
    let out = home
        .std_command()
        .args(["daemon", "stop"])
        .output()
        .unwrap();
    assert!(out.status.success());
    browser.set("fail");
    let agent2 = agent(&home, &ws, &browser).await;
    until_status(&agent2, "notes", "active").await;
    let called = greet(&agent2, "Bo").await;
    assert!(called.contains("Hello, Bo"), "{called}");
    answers.push(called.clone());
    assert_eq!(browser.opened().len(), 1, "the browser was opened again");
    agent2.close().await;

    for answer in &answers {
        assert!(
            !answer.contains(&token),
            "the token is in an answer: {answer}"
        );
    }
    assert!(!home.log().contains(&token), "the token is in the log");
}

#[tokio::test]
async fn a_refused_or_unanswered_sign_in_fails_with_its_code_and_is_not_retried() {
    let (_server, base) = short_token_server(60).await;
    let (home, ws) = home_with_servers(json!({"notes": {
        "type": "http",
        "url": format!("{base}/mcp"),
        "oauth": {"signInTimeoutMs": 1500},
    }}));
    let _daemon = DaemonGuard(&home);
    let browser = Browser::new(&home, "refuse");
    let agent = agent(&home, &ws, &browser).await;
    until_status(&agent, "notes", "needs-sign-in").await;

    let (failed, refused) = agent.call("mcp_activate", json!({"name": "notes"})).await;
    assert!(failed);
    assert_eq!(refused["error"]["code"], "SIGN_IN_FAILED", "{refused:#}");
    assert_eq!(refused["error"]["details"]["server"], "notes");
    let reason = refused["error"]["details"]["reason"].as_str().unwrap();
    assert!(reason.contains("access_denied"), "{reason}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("tandem servers login notes"), "{message}");
    assert_eq!(listed(&agent, "notes").await["status"], "needs-sign-in");

    browser.set("ignore");
    let started = std::time::Instant::now();
    let code = agent.err("mcp_activate", json!({"name": "notes"})).await;
    assert_eq!(code, "SIGN_IN_FAILED");
    assert!(started.elapsed() >= Duration::from_millis(1400));
    assert_eq!(browser.opened().len(), 2);
    assert_eq!(stats(&base).await["byCode"], 0);

    // Nothing tries the server again by itself.
    let posts = stats(&base).await["posts"].clone();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(stats(&base).await["posts"], posts, "the server was retried");
    assert_eq!(listed(&agent, "notes").await["status"], "needs-sign-in");
    agent.close().await;
}

#[tokio::test]
async fn an_expired_token_is_refreshed_without_the_user() {
    let (_server, base) = short_token_server(2).await;
    let (home, ws) =
        home_with_servers(json!({"notes": {"type": "http", "url": format!("{base}/mcp")}}));
    let _daemon = DaemonGuard(&home);
    let browser = Browser::new(&home, "follow");
    let agent = signed_in(&home, &ws, &browser).await;
    let first = stored_token(&home);
    assert_eq!(stats(&base).await["byCode"], 1);

    tokio::time::sleep(Duration::from_secs(3)).await;
    let called = greet(&agent, "Cy").await;
    assert!(called.contains("Hello, Cy"), "{called}");
    let now = stats(&base).await;
    assert_eq!(now["byCode"], 1, "signed in again: {now}");
    assert!(now["byRefresh"].as_u64().unwrap() >= 1, "no refresh: {now}");
    assert_ne!(
        stored_token(&home),
        first,
        "the stored token was not renewed"
    );
    assert_eq!(browser.opened().len(), 1);
    agent.close().await;
}

/// The `scope` a sign-in asked for, from the authorization URL the browser was opened on.
fn asked_scope(url: &str) -> String {
    reqwest::Url::parse(url)
        .unwrap()
        .query_pairs()
        .find(|(k, _)| k == "scope")
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_tool_that_needs_another_scope_signs_in_again_for_it_once() {
    let (_server, base) = short_token_server(600).await;
    let (home, ws) =
        home_with_servers(json!({"notes": {"type": "http", "url": format!("{base}/mcp")}}));
    let _daemon = DaemonGuard(&home);
    let browser = Browser::new(&home, "follow");
    let agent = signed_in(&home, &ws, &browser).await;
    assert!(greet(&agent, "Di").await.contains("Hello, Di"));
    let first = browser.opened();
    assert_eq!(first.len(), 1, "{first:?}");
    assert!(!asked_scope(&first[0]).contains("mcp:write"), "{first:?}");

    // `publish` is refused for want of mcp:write: Tandem signs in again with the scopes it
    // has and the one asked for, and sends the call again.
    let publish = || {
        agent.try_call(
            "mcp_call",
            json!({"server": "notes", "tool": "publish", "arguments": {"text": "hi"}}),
        )
    };
    let r = publish().await.unwrap();
    let text = serde_json::to_string(&r.content).unwrap();
    assert_ne!(r.is_error, Some(true), "{text}");
    assert!(text.contains("Published: hi"), "{text}");
    let opened = browser.opened();
    assert_eq!(opened.len(), 2, "{opened:?}");
    let scope = asked_scope(&opened[1]);
    assert!(
        scope.contains("mcp:write") && scope.contains("mcp:tools"),
        "the step-up asked for {scope:?}"
    );
    let now = stats(&base).await;
    assert_eq!(now["byCode"], 2, "{now}");
    assert_eq!(now["stepUps"], 1, "{now}");

    // The new token has the scope: no more sign-ins.
    let again = publish().await.unwrap();
    assert_ne!(again.is_error, Some(true));
    assert_eq!(browser.opened().len(), 2);
    assert_eq!(stats(&base).await["byCode"], 2);
    agent.close().await;
}

#[tokio::test]
async fn a_step_up_the_user_does_not_approve_fails_the_call_and_loops_not() {
    let (_server, base) = short_token_server(600).await;
    let (home, ws) = home_with_servers(
        json!({"notes": {"type": "http", "url": format!("{base}/mcp"),
        "oauth": {"signInTimeoutMs": 1500}}}),
    );
    let _daemon = DaemonGuard(&home);
    let browser = Browser::new(&home, "follow");
    let agent = signed_in(&home, &ws, &browser).await;
    browser.set("ignore");
    let r = agent
        .try_call(
            "mcp_call",
            json!({"server": "notes", "tool": "publish", "arguments": {"text": "hi"}}),
        )
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(true));
    let error = r.structured_content.clone().unwrap();
    assert_eq!(error["error"]["code"], "SIGN_IN_FAILED", "{error}");
    assert_eq!(browser.opened().len(), 2);
    assert_eq!(stats(&base).await["stepUps"], 1);
    agent.close().await;
}

#[tokio::test]
async fn a_401_with_no_challenge_still_signs_in() {
    let (_server, base) = short_token_server_with(600, &[("BARE_401", "1")]).await;
    let (home, ws) =
        home_with_servers(json!({"notes": {"type": "http", "url": format!("{base}/mcp")}}));
    let _daemon = DaemonGuard(&home);
    let browser = Browser::new(&home, "follow");
    let agent = signed_in(&home, &ws, &browser).await;
    assert!(greet(&agent, "Ed").await.contains("Hello, Ed"));
    assert_eq!(browser.opened().len(), 1);
    agent.close().await;
}

#[tokio::test]
async fn servers_login_and_logout_from_the_shell() {
    let (_server, url) = sdk_oauth_server().await;
    let (home, ws) =
        home_with_servers(json!({"notes": {"type": "http", "url": url, "autostart": false}}));
    let browser = Browser::new(&home, "follow");
    let run = |args: &[&str]| {
        let mut cmd = home.std_command();
        cmd.current_dir(&ws)
            .env("BROWSER", &browser.command)
            .args(args);
        cmd.output().unwrap()
    };

    let out = run(&["servers", "login", "notes"]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let opened = browser.opened();
    assert_eq!(opened.len(), 1);
    assert!(
        stderr.contains(&opened[0]),
        "the URL is not on stderr: {stderr}"
    );
    assert!(
        stdout.contains("Signed in to 'notes'") && stdout.contains("tools"),
        "{stdout}"
    );
    assert_eq!(token_files(&home).len(), 1);

    let out = run(&["servers", "logout", "notes"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("Signed out of 'notes'"), "{stdout}");
    assert!(token_files(&home).is_empty());

    let out = run(&["servers", "logout", "notes"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("had no sign-in"));
}

/// An agent's client that takes URL-mode elicitation: it records each URL it is asked to
/// show, and the user it stands for approves there (it follows the URL).
#[derive(Clone, Default)]
struct UrlClient(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl rmcp::ClientHandler for UrlClient {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        let mut caps = rmcp::model::ClientCapabilities::default();
        caps.elicitation = Some(
            rmcp::model::ElicitationCapability::new()
                .with_url(rmcp::model::UrlElicitationCapability::new()),
        );
        rmcp::model::ClientConfig::new(caps, rmcp::model::Implementation::new("url-client", "1"))
    }

    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        _: rmcp::service::RequestContext<rmcp::RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        let rmcp::model::ElicitRequestParams::UrlElicitationParams { url, message, .. } = request
        else {
            panic!("a form elicitation: {request:?}");
        };
        assert!(message.contains("notes"), "{message}");
        self.0.lock().unwrap().push(url.clone());
        let _ = rustls::crypto::ring::default_provider().install_default();
        reqwest::get(&url).await.unwrap().text().await.unwrap();
        Ok(rmcp::model::ElicitResult::new(
            rmcp::model::ElicitationAction::Accept,
        ))
    }
}

#[tokio::test]
async fn an_agent_that_takes_url_elicitation_is_asked_to_show_the_sign_in() {
    let (_server, base) = short_token_server(60).await;
    let (home, ws) =
        home_with_servers(json!({"notes": {"type": "http", "url": format!("{base}/mcp")}}));
    let _daemon = DaemonGuard(&home);
    // No browser on this machine: the agent's client is the one way to the page.
    let browser = Browser::new(&home, "fail");
    let client = UrlClient::default();
    let agent = home
        .mcp_daemon_with(&ws, &[("BROWSER", &browser.command)], client.clone())
        .await;
    for _ in 0..200 {
        let env = agent.ok("mcp_environment", json!({})).await;
        if env.to_string().contains("needs-sign-in") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    agent.ok("mcp_activate", json!({"name": "notes"})).await;
    let shown = client.0.lock().unwrap().clone();
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert_eq!(
        browser.opened(),
        shown,
        "the browser and the agent got other URLs"
    );
    assert_eq!(stats(&base).await["byCode"], 1);
}
