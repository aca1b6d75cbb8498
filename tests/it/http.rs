//! The Streamable HTTP face through the real binary over real HTTP: `tandem serve --http`
//! on a free loopback port, the rmcp client in both protocol generations, raw requests for
//! the refusals (401, 403, 413, 429), tokens through the CLI, authors, read-only tokens, and
//! a stdio agent on the same daemon.

use std::path::Path;
use std::time::Duration;

use rmcp::model::ProtocolVersion;
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};

use crate::util::{DaemonGuard, McpClient, TestHome};

/// A running `tandem serve --http 127.0.0.1:0`: the process and its endpoint.
struct Server {
    child: tokio::process::Child,
    /// Kept open: the server prints a second line after its address.
    _stdout: Lines<BufReader<tokio::process::ChildStdout>>,
    url: String,
}

impl Server {
    async fn start(home: &TestHome, args: &[&str]) -> Server {
        let workspace = home.path().join("work");
        std::fs::create_dir_all(&workspace).unwrap();
        let mut cmd = home.command();
        cmd.args(["serve", "--http", "127.0.0.1:0", "--workspace"])
            .arg(&workspace)
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null());
        let mut child = cmd.spawn().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = tokio::time::timeout(Duration::from_secs(30), stdout.next_line())
            .await
            .expect("the server says where it listens")
            .unwrap()
            .expect("the server exited before listening");
        let url = first
            .strip_prefix("tandem: serving MCP at ")
            .unwrap_or_else(|| panic!("unexpected first line: {first}"))
            .to_string();
        Server {
            child,
            _stdout: stdout,
            url,
        }
    }

    /// `tandem daemon stop` reaches it through the socket; it exits cleanly.
    async fn stop(mut self, home: &TestHome) {
        let out = home
            .std_command()
            .args(["daemon", "stop"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let status = tokio::time::timeout(Duration::from_secs(15), self.child.wait())
            .await
            .expect("the server stops")
            .unwrap();
        assert!(status.success(), "{status:?}");
    }

    /// An MCP client of the given generation, with `token` as its bearer token.
    async fn client(&self, token: Option<&str>, discover: bool) -> McpClient {
        self.client_with(token, discover, ()).await
    }

    /// [`Server::client`] whose client is `handler`.
    async fn client_with<H: rmcp::ClientHandler>(
        &self,
        token: Option<&str>,
        discover: bool,
        handler: H,
    ) -> McpClient<H> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut config = StreamableHttpClientTransportConfig::with_uri(self.url.as_str());
        if let Some(token) = token {
            config = config.auth_header(token);
        }
        let transport = StreamableHttpClientTransport::from_config(config);
        let lifecycle = if discover {
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            }
        } else {
            ClientLifecycleMode::Initialize
        };
        let client: RunningService<RoleClient, H> = handler
            .serve_with_lifecycle(transport, lifecycle)
            .await
            .unwrap();
        McpClient { client, pid: None }
    }

    /// A raw `initialize` POST with these extra headers and this much padding: its status.
    async fn raw(&self, headers: &[(&str, &str)], padding: usize) -> reqwest::StatusCode {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1", "padding": "x".repeat(padding)}}});
        let mut request = reqwest::Client::new()
            .post(&self.url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .json(&body);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.send().await.unwrap().status()
    }
}

fn tandem(home: &TestHome, args: &[&str]) -> std::process::Output {
    home.std_command().args(args).output().unwrap()
}

/// `tandem token add`: the token printed once on stdout.
fn add_token(home: &TestHome, name: &str, read_only: bool) -> String {
    let mut args = vec!["token", "add", name];
    if read_only {
        args.push("--read-only");
    }
    let out = tandem(home, &args);
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn entry(title: &str) -> Value {
    json!({"type": "pattern", "title": title, "content": "Streamable HTTP face test entry", "tags": ["http"]})
}

async fn search_titles(agent: &McpClient, query: &str) -> Vec<String> {
    let found = agent.ok("rekall_search", json!({"query": query})).await;
    found["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["title"].as_str().unwrap().to_string())
        .collect()
}

/// Both generations over HTTP (a session opened by `initialize`, and `server/discover` with
/// stateless requests) list the same tools and run them on the daemon's core, which a
/// `tandem mcp` agent on stdio shares.
#[tokio::test]
async fn both_generations_and_a_stdio_agent_share_one_core() {
    let home = TestHome::new();
    let _daemon = DaemonGuard(&home);
    let server = Server::start(&home, &[]).await;
    // It is the data dir's daemon: a second one is refused, saying which runs.
    let second = tandem(&home, &["serve", "--http", "127.0.0.1:0"]);
    assert!(!second.status.success());
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(
        err.contains("already serves") && err.contains("tandem daemon stop"),
        "{err}"
    );

    let legacy = server.client(None, false).await;
    let info = legacy.client.peer_info().unwrap();
    assert_eq!(info.server_info.as_ref().unwrap().name, "tandem");
    assert_eq!(info.protocol_version, ProtocolVersion::V_2025_11_25);
    let tools = legacy.client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    for wanted in [
        "rekall_add",
        "rekall_search",
        "start_task",
        "mcp_environment",
    ] {
        assert!(names.contains(&wanted), "{wanted} missing from {names:?}");
    }
    let added = legacy.ok("rekall_add", entry("Legacy HTTP entry")).await;
    assert!(added["id"].is_string(), "{added}");

    let modern = server.client(None, true).await;
    assert_eq!(
        modern.client.peer_info().unwrap().protocol_version,
        ProtocolVersion::V_2026_07_28
    );
    assert_eq!(
        modern.client.list_all_tools().await.unwrap().len(),
        tools.len()
    );
    assert_eq!(
        search_titles(&modern, "Legacy HTTP entry").await[0],
        "Legacy HTTP entry"
    );
    modern.ok("rekall_add", entry("Modern HTTP entry")).await;

    // An agent through `tandem mcp` reaches the same daemon, and sees both; its write is
    // seen over HTTP.
    let stdio = home.mcp_daemon(&home.path().join("work"), 60).await;
    let seen = search_titles(&stdio, "HTTP entry").await;
    assert!(
        seen.contains(&"Legacy HTTP entry".into()) && seen.contains(&"Modern HTTP entry".into()),
        "{seen:?}"
    );
    stdio.ok("rekall_add", entry("Stdio agent entry")).await;
    assert_eq!(
        search_titles(&legacy, "Stdio agent entry").await[0],
        "Stdio agent entry"
    );
    stdio.close().await;
    legacy.close().await;
    modern.close().await;
    server.stop(&home).await;
}

/// Once a token exists every request needs one (401 otherwise); a token names its user,
/// whose entries and tasks carry it; a read-only token cannot write; a revoked token is
/// refused at once; no secret reaches the log.
#[tokio::test]
async fn tokens_authenticate_name_authors_and_limit_rights() {
    let home = TestHome::new();
    let _daemon = DaemonGuard(&home);
    let server = Server::start(&home, &[]).await;
    // No token yet: loopback serves without authentication.
    assert_eq!(server.raw(&[], 0).await, 200);

    let ada = add_token(&home, "ada", false);
    let bob = add_token(&home, "bob", true);
    assert!(ada.starts_with("tdm_") && ada != bob);
    let listed = tandem(&home, &["token", "list"]);
    let listed = String::from_utf8(listed.stdout).unwrap();
    assert!(listed.contains("ada\tread-write") && listed.contains("bob\tread-only"));
    assert!(!listed.contains(&ada) && !listed.contains(&bob));
    let stored = std::fs::read_to_string(home.tandem_home().join("tokens.json")).unwrap();
    assert!(!stored.contains(&ada), "only the hash is stored");

    // The running server needs a token from now on.
    assert_eq!(server.raw(&[], 0).await, 401);
    // The same token with its last hex digit changed (never equal to it).
    let last = if ada.ends_with('0') { '1' } else { '0' };
    let wrong = format!("Bearer {}{last}", &ada[..ada.len() - 1]);
    assert_eq!(server.raw(&[("Authorization", &wrong)], 0).await, 401);
    let good = format!("Bearer {ada}");
    assert_eq!(server.raw(&[("Authorization", &good)], 0).await, 200);

    let writer = server.client(Some(&ada), false).await;
    let added = writer.ok("rekall_add", entry("Written by ada")).await;
    let id = added["id"].as_str().unwrap().to_string();
    let shown = writer.ok("rekall_show", json!({"id": id})).await;
    assert_eq!(shown["author"], "ada", "{shown}");
    let workflow = writer
        .ok("start_workflow", json!({"name": "Team work"}))
        .await;
    let task = writer
        .ok(
            "start_task",
            json!({"workflow_id": workflow["workflow_id"], "name": "Shared task", "goal": "prove authors"}),
        )
        .await;
    let task_id = task["task_id"].as_str().unwrap();
    // An entry learned from the task and accepted over HTTP is the accepter's.
    writer
        .ok(
            "log_decision",
            json!({"task_id": task_id, "category": "library_choice", "question": "Which HTTP server for the team face?",
                   "options_considered": ["axum", "hyper"], "chosen": "hyper", "reasoning": "Already built for reqwest."}),
        )
        .await;
    let done = writer
        .ok(
            "complete_task",
            json!({"task_id": task_id, "status": "success", "outcome": {"summary": "Authors recorded."}, "metadata": {"tests_status": "passed"}}),
        )
        .await;
    let suggestion = done["memory_suggestions"][0]["suggestion_id"].as_str();
    let accepted = writer
        .ok(
            "rekall_accept_suggestion",
            json!({"suggestion_id": suggestion.unwrap_or_else(|| panic!("no suggestion: {done}"))}),
        )
        .await;
    let learned = accepted["entry_created"]["id"].as_str().unwrap();
    let learned = writer.ok("rekall_show", json!({"id": learned})).await;
    assert_eq!(learned["author"], "ada", "{learned}");
    // The CLI (through the daemon) shows who wrote them.
    let out = tandem(&home, &["memory", "show", &id]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("author: ada"),
        "{out:?}"
    );
    let out = tandem(&home, &["tasks", "show", task_id]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("author: ada"),
        "{out:?}"
    );

    let reader = server.client(Some(&bob), true).await;
    assert_eq!(
        search_titles(&reader, "Written by ada").await[0],
        "Written by ada"
    );
    reader.ok("rekall_show", json!({"id": id})).await;
    for (tool, args) in [
        ("rekall_add", entry("Written by bob")),
        ("start_workflow", json!({"name": "Bob's"})),
        ("mcp_activate", json!({"server": "anything"})),
    ] {
        let (is_error, v) = reader.call(tool, args).await;
        assert!(is_error, "{tool}: {v}");
        assert_eq!(v["error"]["code"], "PERMISSION_DENIED", "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("read-only")
        );
    }
    let titles = search_titles(&reader, "Written by bob").await;
    assert!(!titles.contains(&"Written by bob".into()), "{titles:?}");

    let out = tandem(&home, &["token", "revoke", "ada"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(server.raw(&[("Authorization", &good)], 0).await, 401);
    writer.client.cancel().await.ok();
    reader.close().await;
    server.stop(&home).await;

    let logs = all_logs(&home);
    for secret in [&ada[4..20], &bob[4..20]] {
        assert!(!logs.contains(secret), "a token in the log");
    }
}

/// `Host` and `Origin` outside the allow-list get 403 (DNS rebinding), bodies past the limit
/// 413, requests past the rate 429 with `Retry-After`.
#[tokio::test]
async fn host_origin_size_and_rate_are_checked() {
    let home = TestHome::new();
    let _daemon = DaemonGuard(&home);
    let server = Server::start(
        &home,
        &[
            "--max-body",
            "4096",
            "--allow-origin",
            "https://app.example.com",
            "--rate-limit",
            "5",
        ],
    )
    .await;
    assert_eq!(server.raw(&[("Host", "evil.example")], 0).await, 403);
    let port = server
        .url
        .split(':')
        .nth(2)
        .unwrap()
        .split('/')
        .next()
        .unwrap();
    let rebound = format!("evil.example:{port}");
    assert_eq!(server.raw(&[("Host", &rebound)], 0).await, 403);
    assert_eq!(
        server.raw(&[("Origin", "http://evil.example")], 0).await,
        403
    );
    let local = format!("http://localhost:{port}");
    assert_eq!(server.raw(&[("Origin", &local)], 0).await, 200);
    assert_eq!(
        server
            .raw(&[("Origin", "https://app.example.com")], 0)
            .await,
        200
    );
    assert_eq!(server.raw(&[], 5000).await, 413);
    // Five requests a minute (the refused Host and Origin were not counted): two are left;
    // the next is refused, with when to retry (one comes back every 12 s).
    assert_eq!(server.raw(&[], 0).await, 200);
    assert_eq!(server.raw(&[], 0).await, 200);
    let refused = reqwest::Client::new()
        .post(&server.url)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 429);
    let retry: u64 = refused.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=12).contains(&retry), "{retry}");
    server.stop(&home).await;
}

/// A non-loopback bind is refused while no token exists, and then needs a token for every
/// request, whatever the token file says later.
#[tokio::test]
async fn a_public_bind_needs_a_token() {
    let home = TestHome::new();
    let workspace = home.path().join("work");
    std::fs::create_dir_all(&workspace).unwrap();
    let out = tandem(
        &home,
        &[
            "serve",
            "--http",
            "0.0.0.0:0",
            "--workspace",
            workspace.to_str().unwrap(),
        ],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("without a token") && err.contains("tandem token add"),
        "{err}"
    );
    assert!(!Path::new(&home.tandem_home().join("tandem.sock")).exists());

    let _daemon = DaemonGuard(&home);
    let token = add_token(&home, "team", false);
    let mut cmd = home.command();
    cmd.args(["serve", "--http", "0.0.0.0:0", "--workspace"])
        .arg(&workspace)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    let mut child = cmd.spawn().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = stdout.next_line().await.unwrap().unwrap();
    let port = first.rsplit(':').next().unwrap().trim_end_matches("/mcp");
    let server = Server {
        child,
        _stdout: stdout,
        url: format!("http://127.0.0.1:{port}/mcp"),
    };
    assert_eq!(server.raw(&[], 0).await, 401);
    let auth = format!("Bearer {token}");
    assert_eq!(server.raw(&[("Authorization", &auth)], 0).await, 200);
    tandem(&home, &["token", "revoke", "team"]);
    assert_eq!(server.raw(&[], 0).await, 401, "no token file opens nothing");
    server.stop(&home).await;
}

impl Server {
    /// The port the server listens on.
    fn port(&self) -> u16 {
        self.url
            .rsplit(':')
            .next()
            .and_then(|p| p.strip_suffix("/mcp"))
            .and_then(|p| p.parse().ok())
            .expect("the url has a port")
    }

    /// A raw `initialize` POST: its status and the session it opened, if any.
    async fn open_session(&self, token: &str) -> (reqwest::StatusCode, Option<String>) {
        let response = self
            .post(
                token,
                None,
                json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                    "protocolVersion": "2025-11-25", "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "1"}}}),
            )
            .await;
        let session = response
            .headers()
            .get("mcp-session-id")
            .map(|v| v.to_str().unwrap().to_string());
        (response.status(), session)
    }

    /// A POST of `body` with `token` and, when given, a session.
    async fn post(&self, token: &str, session: Option<&str>, body: Value) -> reqwest::Response {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut request = reqwest::Client::new()
            .post(&self.url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .header("Authorization", format!("Bearer {token}"))
            .json(&body);
        if let Some(session) = session {
            request = request
                .header("Mcp-Session-Id", session)
                .header("Mcp-Protocol-Version", "2025-11-25");
        }
        request.send().await.unwrap()
    }
}

/// The data dir's logs, every file of them.
fn log_files(home: &TestHome) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(home.tandem_home().join("logs"))
        .map(|dir| dir.filter_map(|f| Some(f.ok()?.path())).collect())
        .unwrap_or_default()
}

/// The size of the data dir's logs, all files together.
fn log_bytes(home: &TestHome) -> u64 {
    log_files(home)
        .iter()
        .filter_map(|f| f.metadata().ok())
        .map(|m| m.len())
        .sum()
}

/// The text of the data dir's logs, all files together.
fn all_logs(home: &TestHome) -> String {
    log_files(home)
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap_or_default())
        .collect()
}

/// A connection from `from` (a loopback address of its own) to the server.
async fn connect_from(from: &str, port: u16) -> std::io::Result<tokio::net::TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(format!("{from}:0").parse().unwrap())?;
    socket
        .connect(format!("127.0.0.1:{port}").parse().unwrap())
        .await
}

/// The audit's starvation: hundreds of connections held open, sending half a header or
/// nothing, took every file of the daemon. Now a peer holds at most its share, the rest are
/// answered 503 and closed, a held one is let go once its header is late, and a valid
/// request and a CLI command are answered at once meanwhile.
#[tokio::test]
async fn idle_connections_do_not_starve_the_daemon() {
    let home = TestHome::new();
    let _daemon = DaemonGuard(&home);
    let server = Server::start(&home, &[]).await;
    let port = server.port();
    // The attacker's address is a loopback address of its own (Linux routes 127/8 there).
    let mut held = Vec::new();
    for i in 0..400 {
        let Ok(mut stream) = connect_from("127.0.0.2", port).await else {
            continue;
        };
        if i % 2 == 0 {
            use tokio::io::AsyncWriteExt;
            let _ = stream
                .write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Half: ")
                .await;
        }
        held.push(stream);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Past its share, the attacker's connections were closed by the server.
    let mut closed = 0;
    for stream in &mut held {
        use tokio::io::AsyncReadExt;
        let mut buf = [0u8; 256];
        if let Ok(Ok(n)) =
            tokio::time::timeout(Duration::from_millis(5), stream.read(&mut buf)).await
        {
            assert!(
                n == 0 || buf.starts_with(b"HTTP/1.1 503"),
                "{:?}",
                String::from_utf8_lossy(&buf[..n])
            );
            closed += 1;
        }
    }
    assert!(held.len() >= 300, "only {} connections made", held.len());
    assert!(
        closed >= held.len() - tandem::http::DEFAULT_MAX_CONNECTIONS_PER_PEER,
        "only {closed} of {} connections from one address were refused",
        held.len()
    );

    let started = std::time::Instant::now();
    assert_eq!(server.raw(&[], 0).await, 200, "a valid request is served");
    let out = tandem(&home, &["memory", "search", "anything"]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "answered while the connections are held"
    );

    // The held ones are closed once their header is late.
    tokio::time::sleep(tandem::http::HEADER_TIMEOUT).await;
    for stream in &mut held {
        use tokio::io::AsyncReadExt;
        let mut buf = [0u8; 256];
        let read = tokio::time::timeout(Duration::from_secs(2), stream.read(&mut buf)).await;
        assert!(
            matches!(read, Ok(Ok(_)) | Ok(Err(_))),
            "a connection is still held past the header timeout"
        );
    }
    drop(held);
    server.stop(&home).await;
}

/// The audit filled the disk through refusals that copied the `Host` in. Now no header's
/// value reaches the log, and refusals are logged at a bounded rate: a flood of 300 KB
/// `Host` headers and of plain 401s grows the log by little.
#[tokio::test]
async fn a_refusal_flood_grows_the_log_by_little() {
    let home = TestHome::new();
    let _daemon = DaemonGuard(&home);
    let server = Server::start(&home, &[]).await;
    add_token(&home, "ada", false);
    let before = log_bytes(&home);
    let huge = format!("{}.example", "h".repeat(300 * 1024));
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();
    for _ in 0..200 {
        let status = client
            .post(&server.url)
            .header("Host", &huge)
            .body("{}")
            .send()
            .await
            .map(|r| r.status().as_u16())
            .unwrap_or(0);
        assert_ne!(status, 200);
    }
    for _ in 0..1000 {
        assert_eq!(server.raw(&[], 0).await, 401);
    }
    let grown = log_bytes(&home) - before;
    server.stop(&home).await;
    // 1,200 refusals over a few seconds: ten lines a second and a count of the rest.
    assert!(grown < 64 * 1024, "the log grew by {grown} bytes");
    assert!(
        !all_logs(&home).contains("hhhhhhhh"),
        "a Host header in the log"
    );
}

/// A hand edit left `tokens.json` broken: the server used to start and serve everyone on
/// loopback. Now it does not start, and one already running refuses every request until
/// the file is fixed.
#[tokio::test]
async fn a_broken_tokens_file_closes_the_door() {
    let home = TestHome::new();
    let _daemon = DaemonGuard(&home);
    let token = add_token(&home, "ada", false);
    let file = home.tandem_home().join("tokens.json");
    let good = std::fs::read_to_string(&file).unwrap();
    let broken = good.replacen('}', "},", 1);
    std::fs::write(&file, &broken).unwrap();
    let workspace = home.path().join("work");
    std::fs::create_dir_all(&workspace).unwrap();
    let out = tandem(
        &home,
        &[
            "serve",
            "--http",
            "127.0.0.1:0",
            "--workspace",
            workspace.to_str().unwrap(),
        ],
    );
    assert!(!out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot read the tokens") && err.contains("tokens.json"),
        "{err}"
    );

    std::fs::write(&file, &good).unwrap();
    let server = Server::start(&home, &[]).await;
    let auth = format!("Bearer {token}");
    assert_eq!(server.raw(&[("Authorization", &auth)], 0).await, 200);
    std::fs::write(&file, &broken).unwrap();
    assert_eq!(server.raw(&[], 0).await, 503, "no token: closed");
    assert_eq!(
        server.raw(&[("Authorization", &auth)], 0).await,
        503,
        "not even a valid token can be checked"
    );
    std::fs::write(&file, "").unwrap();
    assert_eq!(
        server.raw(&[], 0).await,
        503,
        "an emptied file is broken too"
    );
    std::fs::write(&file, &good).unwrap();
    assert_eq!(server.raw(&[("Authorization", &auth)], 0).await, 200);
    assert_eq!(server.raw(&[], 0).await, 401);
    server.stop(&home).await;
}

/// The audit's read-only token searched in another user's session, then deleted it. Now a
/// session answers only the token that opened it: to any other it does not exist.
#[tokio::test]
async fn a_session_answers_only_its_token() {
    let home = TestHome::new();
    let _daemon = DaemonGuard(&home);
    let server = Server::start(&home, &[]).await;
    let ada = add_token(&home, "ada", false);
    let bob = add_token(&home, "bob", true);
    let (status, session) = server.open_session(&ada).await;
    assert_eq!(status, 200);
    let session = session.expect("initialize opens a session");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(
        server
            .post(&ada, Some(&session), initialized.clone())
            .await
            .status(),
        202
    );
    let search = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "rekall_search", "arguments": {"query": "anything"}}});
    let stolen = server.post(&bob, Some(&session), search.clone()).await;
    assert_eq!(stolen.status(), 404, "another token's session is not found");
    let _ = rustls::crypto::ring::default_provider().install_default();
    let deleted = reqwest::Client::new()
        .delete(&server.url)
        .header("Authorization", format!("Bearer {bob}"))
        .header("Mcp-Session-Id", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 404);
    // Ada's session is still hers, and serves her.
    let own = server.post(&ada, Some(&session), search).await;
    assert_eq!(own.status(), 200);
    let text = own.text().await.unwrap();
    assert!(text.contains("\"id\":2"), "{text}");
    server.stop(&home).await;
    assert!(
        !all_logs(&home).contains(&session),
        "a session id in the log"
    );
}

/// `Host` is read as an authority: user info and a port out of range are refused, and
/// loopback's names only with the bound port.
#[tokio::test]
async fn host_quirks_are_refused() {
    let home = TestHome::new();
    let _daemon = DaemonGuard(&home);
    let server = Server::start(&home, &[]).await;
    let port = server.port();
    for host in [
        format!("evil.com@127.0.0.1:{port}"),
        "evil.com@127.0.0.1".to_string(),
        "127.0.0.1:99999".to_string(),
        format!("127.0.0.1:{}", if port == 1 { 2 } else { port - 1 }),
    ] {
        let status = server.raw(&[("Host", &host)], 0).await;
        assert!(status == 403 || status == 400, "Host {host}: {status}");
    }
    assert_eq!(
        server
            .raw(&[("Host", &format!("localhost:{port}"))], 0)
            .await,
        200
    );
    server.stop(&home).await;
}

/// A body trickled after its headers holds its connection no longer than the body's time
/// limit: the request is answered with an error, and the connection let go.
#[tokio::test]
async fn a_trickled_body_is_cut_off() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let home = TestHome::new();
    let _daemon = DaemonGuard(&home);
    let server = Server::start(&home, &[]).await;
    let mut stream = connect_from("127.0.0.3", server.port()).await.unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 1000\r\n\r\n{{",
        server.port()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let started = std::time::Instant::now();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(
        tandem::http::BODY_TIMEOUT + Duration::from_secs(10),
        stream.read_to_end(&mut answer),
    )
    .await;
    assert!(read.is_ok(), "the connection is still held");
    assert!(started.elapsed() >= tandem::http::BODY_TIMEOUT - Duration::from_secs(1));
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.is_empty() || !answer.starts_with("HTTP/1.1 200"),
        "{answer}"
    );
    server.stop(&home).await;
}

/// A 2026-07-28 client over HTTP is stateless: each of its requests is served apart. The
/// downstream task one request got is still there for the next, and only for its user.
#[tokio::test]
async fn a_stateless_agent_polls_its_downstream_task_and_no_other_user_can() {
    let home = TestHome::new();
    std::fs::create_dir_all(home.tandem_home()).unwrap();
    std::fs::write(
        home.tandem_home().join("config.json"),
        json!({"mcpServers": {"fixture": {"command": crate::util::fixture_bin(), "args": ["--tasks"]}}})
            .to_string(),
    )
    .unwrap();
    let _daemon = DaemonGuard(&home);
    let server = Server::start(&home, &[]).await;
    let (ada, bob) = (
        add_token(&home, "ada", false),
        add_token(&home, "bob", false),
    );
    let takes_tasks = || {
        let capabilities = rmcp::model::ClientCapabilities::builder()
            .enable_tasks()
            .build();
        rmcp::model::ClientConfig::new(capabilities, rmcp::model::Implementation::new("agent", "1"))
    };
    let ada = server.client_with(Some(&ada), true, takes_tasks()).await;
    let bob = server.client_with(Some(&bob), true, takes_tasks()).await;
    let mut args = serde_json::Map::new();
    args.insert("steps".into(), json!(2));
    let call = rmcp::model::CallToolRequestParams::new("fixture__task_steps").with_arguments(args);
    let task = match ada.client.peer().call_tool_once(call).await.unwrap() {
        rmcp::model::CallToolResponse::Task(created) => created.task,
        other => panic!("no task: {other:?}"),
    };
    let get = |agent: &McpClient<rmcp::model::ClientConfig>| {
        let peer = agent.client.peer().clone();
        let id = task.task_id.clone();
        async move { peer.get_task(rmcp::model::GetTaskParams::new(id)).await }
    };
    // Another user does not reach it, by its id or otherwise.
    let refused = get(&bob).await.unwrap_err().to_string();
    assert!(refused.contains("unknown task"), "{refused}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let got = get(&ada).await.unwrap();
        if got.task.status().is_terminal() {
            assert_eq!(
                got.task.status(),
                rmcp::model::TaskStatus::Completed,
                "{got:?}"
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the task never ended"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    ada.close().await;
    bob.close().await;
    server.stop(&home).await;
}
