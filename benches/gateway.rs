//! Gateway benchmark (issue 11, spec 001): prints figures, asserts nothing about time.
//!
//! Measured as an agent sees it: an rmcp client running `tandem mcp --workspace WS` (through
//! the daemon), with the servers in the user's config. Times at the client's end of its pipe:
//! - activation: the `mcp_activate` round trip (spawn + initialize + list) of an
//!   `autostart: false` server, the fixture and `@modelcontextprotocol/server-everything`
//!   (Node), each after an `mcp_deactivate` that stopped it (no other session holds it), so
//!   every sample spawns a process: the bench checks that the pid changes;
//! - a proxied `tools/call` of `fixture__echo` (and the same through `mcp_call`) against the
//!   same `echo` on a fixture the bench spawns itself (an rmcp client over stdio),
//!   interleaved; the difference is what Tandem adds;
//! - `tools/list` of a session with 10 boot servers of 50 tools each (`mcp_fixture --tools
//!   50`, 530 proxied tools), and the proxied `tools/call` again with those in the session;
//!   the same list on a raw JSON-lines session that parses nothing, for Tandem's part apart
//!   from the rmcp client's parsing.
//!
//! A session may activate 5 servers a minute (the spec's rate limit): the bench opens a new
//! agent session every 5 activations. Every process sees a temp `TANDEM_HOME`, `HOME` and
//! XDG dirs; the daemon is stopped at the end.
//!
//! Needs the fixture built beside this bench's profile dir (`cargo build --release
//! --example mcp_fixture`) and server-everything (`TANDEM_TEST_EVERYTHING`, else
//! `.test-deps/npm/node_modules/.bin/mcp-server-everything`); `scripts/bench` does both.
//! Run with `cargo bench --bench gateway`. Sizes: `TANDEM_BENCH_ACTIVATIONS` (default 20
//! a server), `TANDEM_BENCH_CALLS` (500), `TANDEM_BENCH_LISTS` (200),
//! `TANDEM_BENCH_SERVERS` (10) × `TANDEM_BENCH_TOOLS` (50).

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService};
use serde_json::{Value, json};

mod common;
use common::home::{DaemonGuard, Home, env_usize, fixture_bin, signed_ms};
use common::{Stats, ms, section};

/// The config name of the fixture that is activated and called.
const FIXTURE: &str = "fixture";
/// The config name of server-everything.
const EVERYTHING: &str = "everything";

/// `mcp-server-everything`: `TANDEM_TEST_EVERYTHING`, else where `scripts/bench` and
/// `scripts/test` install it.
fn everything_bin() -> PathBuf {
    let bin = match std::env::var_os("TANDEM_TEST_EVERYTHING") {
        Some(path) => PathBuf::from(path),
        None => Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(".test-deps/npm/node_modules/.bin/mcp-server-everything"),
    };
    if !bin.is_file() {
        panic!(
            "mcp-server-everything is not at {}: run scripts/bench (it installs it under \
             .test-deps/npm), or set TANDEM_TEST_EVERYTHING",
            bin.display()
        );
    }
    bin
}

/// The user's config: the fixture and server-everything, both `autostart: false`; and
/// `boot` fixtures `t00`.. serving `tools` generated tools each, boot servers.
fn config(fixture: &Path, everything: &Path, boot: usize, tools: usize) -> String {
    let mut servers = serde_json::Map::new();
    servers.insert(
        FIXTURE.into(),
        json!({"command": fixture, "args": ["--name", "gw-fixture"], "autostart": false}),
    );
    servers.insert(
        EVERYTHING.into(),
        json!({"command": everything, "args": ["stdio"], "autostart": false}),
    );
    for i in 0..boot {
        let name = format!("t{i:02}");
        servers.insert(
            name.clone(),
            json!({"command": fixture, "args": ["--name", name, "--tools", tools.to_string()]}),
        );
    }
    serde_json::to_string_pretty(&json!({"mcpServers": servers})).unwrap()
}

/// An agent session: `tandem mcp --workspace WS` through the daemon, an rmcp client on its
/// stdio that ignores `list_changed`.
struct Agent {
    client: RunningService<RoleClient, ()>,
    /// Activations asked for in this session (the rate limit counts them).
    activations: usize,
}

impl Agent {
    async fn start(home: &Home) -> Agent {
        let ws = home.workspace.display().to_string();
        let (transport, _) =
            rmcp::transport::TokioChildProcess::builder(home.tandem(&["mcp", "--workspace", &ws]))
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
        Agent::ready(().serve(transport).await.unwrap()).await
    }

    /// The same session straight on the daemon's socket, without the `tandem mcp` process
    /// that relays stdio to it: what the relay costs, by difference.
    async fn on_socket(home: &Home) -> Agent {
        let hello = tandem::daemon::hello("mcp", Some(home.workspace.clone()), None);
        let (stream, welcome) = tandem::daemon::connect(&home.tandem_home(), &hello)
            .await
            .unwrap();
        assert!(
            welcome.ok,
            "the daemon refused the mcp session: {welcome:?}"
        );
        Agent::ready(().serve(stream).await.unwrap()).await
    }

    async fn ready(client: RunningService<RoleClient, ()>) -> Agent {
        let agent = Agent {
            client,
            activations: 0,
        };
        // The session's gateway is made on first use: not part of any figure.
        agent.ok("mcp_environment", json!({})).await;
        agent
    }

    async fn call(&self, tool: &str, args: Value) -> CallToolResult {
        let Value::Object(map) = args else {
            panic!("arguments must be an object")
        };
        self.client
            .call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(map))
            .await
            .unwrap()
    }

    /// A call that must succeed: its structured content.
    async fn ok(&self, tool: &str, args: Value) -> Value {
        let r = self.call(tool, args.clone()).await;
        assert_ne!(r.is_error, Some(true), "{tool}({args}) failed: {r:?}");
        r.structured_content.unwrap_or(Value::Null)
    }

    async fn tool_count(&self) -> usize {
        self.client.list_all_tools().await.unwrap().len()
    }

    async fn stop(self) {
        self.client.cancel().await.unwrap();
    }
}

/// A session on the daemon's socket that speaks JSON lines itself and parses nothing of
/// the answers beyond finding their end: the time until the whole answer has arrived,
/// which is Tandem's share of a `tools/list` without any client's parsing.
struct RawSession {
    lines: tokio::io::BufReader<tokio::net::UnixStream>,
    next_id: u64,
}

impl RawSession {
    async fn open(home: &Home) -> RawSession {
        let hello = tandem::daemon::hello("mcp", Some(home.workspace.clone()), None);
        let (stream, welcome) = tandem::daemon::connect(&home.tandem_home(), &hello)
            .await
            .unwrap();
        assert!(
            welcome.ok,
            "the daemon refused the mcp session: {welcome:?}"
        );
        let mut session = RawSession {
            lines: tokio::io::BufReader::new(stream),
            next_id: 0,
        };
        let init = json!({
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "bench-raw", "version": "0"},
        });
        session.request("initialize", init).await;
        session
            .send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        // The session's gateway is made on first use: not part of any figure.
        let environment = json!({"name": "mcp_environment", "arguments": {}});
        session.request("tools/call", environment).await;
        session
    }

    async fn send(&mut self, message: &Value) {
        use tokio::io::AsyncWriteExt;
        let mut line = serde_json::to_vec(message).unwrap();
        line.push(b'\n');
        self.lines.get_mut().write_all(&line).await.unwrap();
    }

    /// Sends a request and reads lines until the answer to it (notifications are skipped):
    /// its bytes, unparsed.
    async fn request(&mut self, method: &str, params: Value) -> Vec<u8> {
        use tokio::io::AsyncBufReadExt;
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        let tag = format!("\"id\":{id},");
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = self.lines.read_until(b'\n', &mut line).await.unwrap();
            assert!(n > 0, "the daemon closed the session");
            // An answer starts with its id or has it near the start; a notification has none.
            let head = &line[..line.len().min(64)];
            if head.windows(tag.len()).any(|w| w == tag.as_bytes()) {
                return line;
            }
        }
    }
}

/// `samples` activations of `name` (one more first, to warm up), each followed by its
/// deactivation and the wait until its process is gone; a new agent session whenever the
/// rate limit would refuse. The times, and how many tools it brought.
async fn activations(
    home: &Home,
    agent: &mut Option<Agent>,
    name: &str,
    marker: &str,
    samples: usize,
) -> (Vec<Duration>, usize) {
    let mut times = Vec::with_capacity(samples);
    let mut tools = 0;
    let mut last_pid = None;
    for i in 0..=samples {
        let fresh = agent
            .as_ref()
            .is_none_or(|a| a.activations >= tandem_core::hub::gateway::ACTIVATIONS_PER_WINDOW);
        if fresh {
            if let Some(old) = agent.take() {
                old.stop().await;
            }
            *agent = Some(Agent::start(home).await);
        }
        let a = agent.as_mut().unwrap();
        assert!(
            home.processes(marker).is_empty(),
            "{name} runs before its activation"
        );
        a.activations += 1;
        let t = Instant::now();
        let activated = a.ok("mcp_activate", json!({"name": name})).await;
        let took = t.elapsed();
        tools = activated["toolsAdded"].as_array().map_or(0, Vec::len);
        assert!(tools > 0, "{name} brought no tools: {activated}");
        let pids = home.processes(marker);
        assert_eq!(pids.len(), 1, "{name}: processes {pids:?} after activation");
        assert_ne!(last_pid, Some(pids[0]), "{name} was not spawned again");
        last_pid = Some(pids[0]);
        if i > 0 {
            times.push(took);
        }
        a.ok("mcp_deactivate", json!({"name": name})).await;
        wait_gone(home, marker, name).await;
    }
    (times, tools)
}

/// Waits (up to 10 s) until no process of this world has `marker` in its command line.
async fn wait_gone(home: &Home, marker: &str, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !home.processes(marker).is_empty() {
        assert!(
            Instant::now() < deadline,
            "{name} still runs 10 s after its deactivation"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `samples` interleaved calls (a tenth more first, to warm up): `echo` straight to
/// `direct`; `server__echo` through the agent; `echo` through `mcp_call`; `server__echo`
/// through the agent session on the daemon's socket.
async fn calls(
    direct: &RunningService<RoleClient, ()>,
    agent: &Agent,
    socket: &Agent,
    server: &str,
    samples: usize,
) -> [Vec<Duration>; 4] {
    let proxied = format!("{server}__echo");
    let args = json!({"text": "hello"});
    let via_mcp_call = json!({"server": server, "tool": "echo", "arguments": args});
    let text = |r: &CallToolResult| {
        r.content[0]
            .as_text()
            .map(|t| t.text.clone())
            .unwrap_or_default()
    };
    let echo =
        || CallToolRequestParams::new("echo").with_arguments(args.as_object().unwrap().clone());
    assert_eq!(
        text(&direct.call_tool(echo()).await.unwrap()),
        "direct: hello"
    );
    let through = agent.call(&proxied, args.clone()).await;
    assert!(text(&through).ends_with(": hello"), "{through:?}");
    let through = agent.call("mcp_call", via_mcp_call.clone()).await;
    assert_ne!(through.is_error, Some(true), "{through:?}");
    let through = socket.call(&proxied, args.clone()).await;
    assert!(text(&through).ends_with(": hello"), "{through:?}");

    let mut out = [Vec::new(), Vec::new(), Vec::new(), Vec::new()];
    for i in 0..samples + samples / 10 {
        let t = Instant::now();
        direct.call_tool(echo()).await.unwrap();
        let d = t.elapsed();
        let t = Instant::now();
        agent.call(&proxied, args.clone()).await;
        let p = t.elapsed();
        let t = Instant::now();
        agent.call("mcp_call", via_mcp_call.clone()).await;
        let m = t.elapsed();
        let t = Instant::now();
        socket.call(&proxied, args.clone()).await;
        let s = t.elapsed();
        if i >= samples / 10 {
            out[0].push(d);
            out[1].push(p);
            out[2].push(m);
            out[3].push(s);
        }
    }
    out
}

struct Row {
    what: String,
    stats: Stats,
}

fn row(what: impl Into<String>, samples: Vec<Duration>) -> Row {
    Row {
        what: what.into(),
        stats: Stats::of(samples),
    }
}

/// The overhead rows of a call table: each through-Tandem row against the direct one.
fn overhead(rows: &[Row]) -> Vec<(String, String, String)> {
    let direct = rows[0].stats;
    rows[1..]
        .iter()
        .map(|r| {
            (
                format!("Tandem's overhead, {}", r.what),
                signed_ms(r.stats.p50, direct.p50),
                signed_ms(r.stats.p99, direct.p99),
            )
        })
        .collect()
}

#[tokio::main]
async fn main() {
    let activation_samples = env_usize("TANDEM_BENCH_ACTIVATIONS", 20);
    let call_samples = env_usize("TANDEM_BENCH_CALLS", 500);
    let list_samples = env_usize("TANDEM_BENCH_LISTS", 200);
    let boot = env_usize("TANDEM_BENCH_SERVERS", 10);
    let tools = env_usize("TANDEM_BENCH_TOOLS", 50);
    assert!(
        activation_samples > 0 && call_samples > 0 && list_samples > 0,
        "nothing to measure"
    );
    let fixture = fixture_bin();
    let everything = everything_bin();
    let home = Home::new("tandem-bench-gateway");
    home.write_config(&config(&fixture, &everything, 0, tools));

    eprintln!("bench: starting the daemon with an agent session");
    let mut agent = Some(Agent::start(&home).await);
    let _daemon = DaemonGuard {
        home: &home,
        pid: home.daemon_pid(),
    };
    assert!(
        _daemon.pid.is_some(),
        "no daemon runs for the agent session"
    );
    let own_tools = agent.as_ref().unwrap().tool_count().await;

    // ---- activation --------------------------------------------------------------------
    eprintln!("bench: {activation_samples} activations of the fixture");
    let (fixture_times, fixture_tools) =
        activations(&home, &mut agent, FIXTURE, "gw-fixture", activation_samples).await;
    eprintln!("bench: {activation_samples} activations of server-everything");
    let (everything_times, everything_tools) = activations(
        &home,
        &mut agent,
        EVERYTHING,
        "mcp-server-everything",
        activation_samples,
    )
    .await;
    let activation_rows = [
        row(
            format!("`mcp_activate` of the fixture ({fixture_tools} tools)"),
            fixture_times,
        ),
        row(
            format!("`mcp_activate` of server-everything, Node ({everything_tools} tools)"),
            everything_times,
        ),
    ];

    // ---- proxied tools/call ------------------------------------------------------------
    eprintln!("bench: {call_samples} echo calls, direct and through Tandem");
    let mut cmd = tokio::process::Command::new(&fixture);
    home.isolate(cmd.as_std_mut());
    cmd.args(["--name", "direct"]).kill_on_drop(true);
    let (transport, _) = rmcp::transport::TokioChildProcess::builder(cmd)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let direct = ().serve(transport).await.unwrap();
    // A session of its own, with only the fixture active.
    if let Some(old) = agent.take() {
        old.stop().await;
    }
    let caller = Agent::start(&home).await;
    caller.ok("mcp_activate", json!({"name": FIXTURE})).await;
    let socket = Agent::on_socket(&home).await;
    socket.ok("mcp_activate", json!({"name": FIXTURE})).await;
    let [d, p, m, s] = calls(&direct, &caller, &socket, FIXTURE, call_samples).await;
    let call_rows = [
        row("`echo` straight to a fixture (rmcp client, stdio)", d),
        row(
            format!("`{FIXTURE}__echo` through Tandem (`tools/call`, {own_tools} own tools + 3)"),
            p,
        ),
        row(
            format!("`mcp_call` of `{FIXTURE}`'s `echo` through Tandem"),
            m,
        ),
        row(
            format!("`{FIXTURE}__echo` on the daemon's socket (no `tandem mcp` relay)"),
            s,
        ),
    ];
    caller.stop().await;
    socket.stop().await;

    // ---- tools/list with many servers --------------------------------------------------
    let proxied_tools = boot * (tools + 3);
    eprintln!("bench: {boot} boot servers of {tools} tools each join the config");
    home.write_config(&config(&fixture, &everything, boot, tools));
    let lister = Agent::start(&home).await;
    let started = Instant::now();
    let want = own_tools + proxied_tools;
    loop {
        let n = lister.tool_count().await;
        if n == want {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{n} of {want} tools listed after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let listed = lister.client.list_tools(None).await.unwrap();
    let pages = if listed.next_cursor.is_some() {
        "paginated"
    } else {
        "one page"
    };
    let list_bytes = serde_json::to_vec(&listed).unwrap().len();
    let socket = Agent::on_socket(&home).await;
    assert_eq!(socket.tool_count().await, want);
    let mut raw = RawSession::open(&home).await;
    let (mut list_times, mut socket_times, mut raw_times) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..list_samples + list_samples / 10 {
        let t = Instant::now();
        let n = lister.client.list_all_tools().await.unwrap().len();
        let took = t.elapsed();
        assert_eq!(n, want);
        let t = Instant::now();
        socket.client.list_all_tools().await.unwrap();
        let on_socket = t.elapsed();
        let t = Instant::now();
        let answer = raw.request("tools/list", json!({})).await;
        let unparsed = t.elapsed();
        assert!(answer.len() > list_bytes / 2, "a short answer: {answer:?}");
        if i >= list_samples / 10 {
            list_times.push(took);
            socket_times.push(on_socket);
            raw_times.push(unparsed);
        }
    }
    drop(raw);
    let answer = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1, "result": listed})).unwrap();
    let parse_times = (0..list_samples)
        .map(|_| {
            let t = Instant::now();
            let message: rmcp::model::ServerJsonRpcMessage =
                serde_json::from_slice(&answer).unwrap();
            std::hint::black_box(message);
            t.elapsed()
        })
        .collect();
    let list_rows = [
        row(
            format!(
                "`tools/list` with {boot} servers × {} tools ({want} tools, {} KB, {pages})",
                tools + 3,
                list_bytes / 1024
            ),
            list_times,
        ),
        row(
            "the same on the daemon's socket (no `tandem mcp` relay)",
            socket_times,
        ),
        row(
            "of which this client's parsing of the answer (rmcp types)",
            parse_times,
        ),
        row(
            "the same on the socket, until the answer's last byte (no parsing)",
            raw_times,
        ),
    ];
    eprintln!("bench: {call_samples} echo calls again, with the {boot} servers in the session");
    lister.ok("mcp_activate", json!({"name": FIXTURE})).await;
    socket.ok("mcp_activate", json!({"name": FIXTURE})).await;
    let [d, p, m, s] = calls(&direct, &lister, &socket, FIXTURE, call_samples).await;
    let crowded_rows = [
        row("`echo` straight to a fixture", d),
        row(
            format!(
                "`{FIXTURE}__echo` through Tandem, {} proxied tools in the session",
                proxied_tools + 3
            ),
            p,
        ),
        row("`mcp_call` through Tandem, the same session", m),
        row("`fixture__echo` on the daemon's socket, the same tools", s),
    ];
    lister.stop().await;
    socket.stop().await;
    direct.cancel().await.unwrap();

    // ---- report ------------------------------------------------------------------------
    section(
        "Gateway",
        &format!(
            "`cargo build --release --example mcp_fixture && cargo bench --bench gateway`. An \
             rmcp client runs `tandem mcp --workspace WS` as an agent does, with the servers \
             in the user's config; times at the client's end of its pipe \
             (`TANDEM_BENCH_ACTIVATIONS`, `TANDEM_BENCH_CALLS`, `TANDEM_BENCH_LISTS`, \
             `TANDEM_BENCH_SERVERS`, `TANDEM_BENCH_TOOLS` change the sizes). An activation is \
             the `mcp_activate` round trip of an `autostart: false` server that the previous \
             `mcp_deactivate` stopped, so each one spawns it, initializes it and lists its \
             tools. The calls of each group run interleaved with the same `echo` on a fixture \
             the bench spawns itself. \"On the daemon's socket\" is the same session without \
             the `tandem mcp` process relaying stdio. The last group has {boot} boot servers \
             (`mcp_fixture --tools {tools}`) in the session."
        ),
    );
    println!("| figure (at the client's end of its pipe) | p50 | p99 | n |");
    println!("|---|---|---|---|");
    let print = |r: &Row| {
        println!(
            "| {} | {} | {} | {} |",
            r.what,
            ms(r.stats.p50),
            ms(r.stats.p99),
            r.stats.n
        )
    };
    activation_rows.iter().for_each(print);
    call_rows.iter().for_each(print);
    for (what, p50, p99) in overhead(&call_rows) {
        println!("| {what} | {p50} | {p99} | |");
    }
    list_rows.iter().for_each(print);
    crowded_rows.iter().for_each(print);
    for (what, p50, p99) in overhead(&crowded_rows) {
        println!("| {what} | {p50} | {p99} | |");
    }
    println!(
        "\nTargets: proxied `tools/call` overhead p50 under 0.3 ms, with few tools in the \
         session and with many; `tools/list` with {boot} × {tools} tools p99 under 5 ms, \
         which is Tandem's part (to the answer's last byte): an rmcp client also spends time \
         turning the answer's schemas into its types. Activating server-everything is nearly \
         all the Node server's own start."
    );
}
