//! Hub benchmark: prints figures, asserts nothing about time.
//!
//! Ten `mcp_fixture` servers of 50 prompts each (`TANDEM_BENCH_SERVERS`,
//! `TANDEM_BENCH_PROMPTS` to change), configured in the user's config, behind one daemon;
//! an LSP client (`tandem lsp`) as the editor. Measured at the client's end of its pipe:
//! - completion in a `markdown` buffer: `/` (every prompt, from the cache), `/prompt-01`
//!   (filtered), argument names after a command, argument values (asked of the server);
//! - the conventional injection (`tandem.inject`, 3 servers with `--conventional`): the first
//!   call (fetches), calls after a config reload (fetch again), and cached calls;
//! - a `prompts/get` of one prompt: straight to a fixture (an rmcp client spawning it), and
//!   the same prompt through Tandem (`tandem.prompt.run` over LSP, `hub/get_prompt` on the
//!   daemon's `cli` face); the difference is what Tandem adds.
//!
//! Every process sees a temp `TANDEM_HOME`, `HOME` and XDG dirs; the daemon is stopped at
//! the end. The fixture must be built first, next to this bench's profile dir:
//! `cargo build --release --example mcp_fixture` (`scripts/bench` does). Run with
//! `cargo bench --bench hub` (`TANDEM_BENCH_SAMPLES`, default 200, requests a figure).

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::GetPromptRequestParams;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

mod common;
use common::home::{DaemonGuard, Home, env_usize, fixture_bin, signed_ms};
use common::lsp::{Editor, file_uri};
use common::{Stats, ms, section};

/// How many of the servers also serve the conventional prompts (phase 2 on).
const CONVENTIONAL: usize = 3;
/// The conventional prompts a `--conventional` fixture adds.
const CONVENTIONAL_PROMPTS: usize = 10;
/// Injections after a config reload (each fetches every conventional prompt again).
const RELOADS: usize = 20;
/// The prompt measured by `prompts/get` (three arguments, `arg0` required).
const PROMPT: &str = "prompt-003";

/// The bench's world: a temp home, the fixture, the sizes.
struct World {
    home: Home,
    fixture: PathBuf,
    servers: usize,
    prompts: usize,
}

impl World {
    fn new(servers: usize, prompts: usize) -> World {
        World {
            home: Home::new("tandem-bench-hub"),
            fixture: fixture_bin(),
            servers,
            prompts,
        }
    }

    /// Writes the user's config: servers `s00`.., `--prompts N` each; the first `conventional`
    /// with `--conventional`, `s00` with `--prompt-args` when `prompt_args`. `salt` changes
    /// the file (its length) without changing what it says.
    fn write_config(&self, conventional: usize, prompt_args: bool, salt: usize) {
        let mut servers = serde_json::Map::new();
        for i in 0..self.servers {
            let name = server(i);
            let mut args = vec![
                "--name".to_string(),
                name.clone(),
                "--prompts".into(),
                self.prompts.to_string(),
            ];
            if i < conventional {
                args.push("--conventional".into());
            }
            if i == 0 && prompt_args {
                args.push("--prompt-args".into());
            }
            servers.insert(
                name,
                json!({"command": self.fixture.display().to_string(), "args": args}),
            );
        }
        let mut text = serde_json::to_string_pretty(&json!({"mcpServers": servers})).unwrap();
        text.push_str(&"\n".repeat(1 + salt % 2));
        self.home.write_config(&text);
    }
}

fn server(i: usize) -> String {
    format!("s{i:02}")
}

/// A `cli` session on the daemon's socket: newline-delimited JSON-RPC.
struct Cli {
    read: BufReader<OwnedReadHalf>,
    write: OwnedWriteHalf,
    next_id: u64,
}

impl Cli {
    async fn connect(world: &World) -> Cli {
        let hello = tandem::daemon::hello("cli", Some(world.home.workspace.clone()), None);
        let (stream, welcome) = tandem::daemon::connect(&world.home.tandem_home(), &hello)
            .await
            .unwrap();
        assert!(
            welcome.ok,
            "the daemon refused the cli session: {welcome:?}"
        );
        let (read, write) = stream.into_split();
        Cli {
            read: BufReader::new(read),
            write,
            next_id: 0,
        }
    }

    async fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let mut line = serde_json::to_vec(
            &json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}),
        )
        .unwrap();
        line.push(b'\n');
        self.write.write_all(&line).await.unwrap();
        let mut answer = String::new();
        self.read.read_line(&mut answer).await.unwrap();
        let mut answer: Value = serde_json::from_str(&answer).unwrap();
        assert_eq!(answer["id"], self.next_id);
        if let Some(e) = answer.get("error") {
            panic!("{method} failed: {e}");
        }
        answer["result"].take()
    }
}

/// The prompt document the completions are asked in.
struct Doc {
    uri: String,
    version: i64,
}

impl Doc {
    /// Sets the document to `line` and asks for completion at its end: the items.
    async fn complete(&mut self, editor: &mut Editor, line: &str) -> Vec<Value> {
        self.version += 1;
        editor.change_text(&self.uri, self.version, line).await;
        completion(editor, &self.uri, line).await
    }
}

async fn completion(editor: &mut Editor, uri: &str, line: &str) -> Vec<Value> {
    let result = editor
        .call(
            "textDocument/completion",
            json!({"textDocument": {"uri": uri},
                   "position": {"line": 0, "character": line.len()}}),
        )
        .await;
    match result {
        Value::Null => Vec::new(),
        Value::Array(items) => items,
        mut list => list["items"]
            .as_array_mut()
            .map(std::mem::take)
            .unwrap_or_default(),
    }
}

/// `samples` completions of `line` (set once), each timed; the item count of the last.
async fn time_completion(
    editor: &mut Editor,
    doc: &mut Doc,
    line: &str,
    samples: usize,
) -> (Vec<Duration>, usize, usize) {
    let items = doc.complete(editor, line).await;
    let bytes = serde_json::to_vec(&items).unwrap().len();
    let mut times = Vec::with_capacity(samples);
    let mut count = items.len();
    for _ in 0..samples {
        let t = Instant::now();
        let items = completion(editor, &doc.uri, line).await;
        times.push(t.elapsed());
        count = items.len();
    }
    (times, count, bytes)
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

#[tokio::main]
async fn main() {
    let servers = env_usize("TANDEM_BENCH_SERVERS", 10);
    let prompts = env_usize("TANDEM_BENCH_PROMPTS", 50);
    let samples = env_usize("TANDEM_BENCH_SAMPLES", 200);
    assert!(
        servers >= CONVENTIONAL && prompts > 3,
        "too small to measure"
    );
    let total = servers * prompts;
    let world = World::new(servers, prompts);
    world.write_config(0, false, 0);

    // ---- completion --------------------------------------------------------------------
    eprintln!("bench: {servers} servers × {prompts} prompts; starting the editor session");
    let started = Instant::now();
    let ws = world.home.workspace.display().to_string();
    let mut editor = Editor::start(
        world.home.tandem(&["lsp", "--workspace", &ws]),
        &world.home.workspace,
        None,
    )
    .await;
    let status = editor.call("tandem/status", json!({})).await;
    assert_eq!(
        status["daemon"], true,
        "the LSP session is not on the daemon"
    );
    let _daemon = DaemonGuard {
        home: &world.home,
        pid: status["pid"].as_u64().map(|p| p as u32),
    };
    let mut cli = Cli::connect(&world).await;
    let path = world.home.workspace.join("prompt.md");
    std::fs::write(&path, "/").unwrap();
    let mut doc = Doc {
        uri: file_uri(&path),
        version: 1,
    };
    editor.open_text(&doc.uri, "markdown", "/").await;
    // Warm-up: until every server is up and every prompt listed.
    loop {
        let n = completion(&mut editor, &doc.uri, "/").await.len();
        if n == total {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{n} of {total} prompts listed after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let all_listed = started.elapsed();

    let mut rows = Vec::new();
    let mut checks = Vec::new();
    let lines = [
        ("`/`: every prompt".to_string(), "/".to_string(), total),
        (
            "`/prompt-01`: filtered".into(),
            "/prompt-01".into(),
            servers * (10.min(prompts.saturating_sub(10))),
        ),
        (
            format!("`/s01:{PROMPT} `: argument names"),
            format!("/s01:{PROMPT} "),
            3,
        ),
    ];
    for (what, line, expected) in lines {
        eprintln!("bench: completion of {line:?}");
        let (times, count, bytes) = time_completion(&mut editor, &mut doc, &line, samples).await;
        checks.push((line.clone(), count, expected));
        rows.push(row(
            format!("completion {what} ({count} items, {} KB)", bytes / 1024),
            times,
        ));
    }

    // Where the time of `/` goes: the hub's part alone (the `cli` face answers the hub's
    // completions as they are, no LSP items), and this client's parsing of the LSP answer.
    let mut hub_only = Vec::with_capacity(samples);
    for _ in 0..samples {
        let t = Instant::now();
        let got = cli
            .call("hub/complete", json!({"line": "/", "cursor": 1}))
            .await;
        hub_only.push(t.elapsed());
        assert_eq!(got.as_array().map_or(0, Vec::len), total);
    }
    let hub_bytes = serde_json::to_vec(&cli.call("hub/complete", json!({"line": "/"})).await)
        .unwrap()
        .len();
    rows.push(row(
        format!(
            "`hub/complete` of `/` on the daemon's `cli` socket ({total} completions, {} KB)",
            hub_bytes / 1024
        ),
        hub_only,
    ));
    let answer = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1, "result": {
        "isIncomplete": true, "items": completion(&mut editor, &doc.uri, "/").await}}))
    .unwrap();
    let parse = Stats::of(
        (0..samples)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(serde_json::from_slice::<Value>(&answer).unwrap());
                t.elapsed()
            })
            .collect(),
    );

    // ---- injection ---------------------------------------------------------------------
    eprintln!("bench: {CONVENTIONAL} servers restart with --conventional, s00 with --prompt-args");
    world.write_config(CONVENTIONAL, true, 0);
    let with_conventional = total + CONVENTIONAL * CONVENTIONAL_PROMPTS + 1;
    let restart = Instant::now();
    loop {
        let listed = editor.execute("tandem.prompts.list", json!([])).await;
        if listed.as_array().map_or(0, Vec::len) == with_conventional {
            break;
        }
        assert!(
            restart.elapsed() < Duration::from_secs(60),
            "the servers did not restart with their new arguments within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let line = "/s00:greet style=";
    eprintln!("bench: completion of {line:?}");
    let (times, count, bytes) = time_completion(&mut editor, &mut doc, line, samples).await;
    checks.push((line.to_string(), count, 3));
    rows.push(row(
        format!(
            "completion `{line}`: values, asked of the server ({count} items, {} KB)",
            bytes / 1024
        ),
        times,
    ));

    eprintln!("bench: injection");
    let t = Instant::now();
    let first = editor.execute("tandem.inject", json!([{}])).await;
    let first_time = t.elapsed();
    let sources = first["sources"].as_array().map_or(0, Vec::len);
    let tokens = first["total_tokens"].as_u64().unwrap_or(0);
    let injected_bytes = serde_json::to_vec(&first).unwrap().len();
    assert!(sources > 0, "nothing injected: {first}");
    let mut warm = Vec::with_capacity(samples);
    for _ in 0..samples {
        let t = Instant::now();
        editor.execute("tandem.inject", json!([{}])).await;
        warm.push(t.elapsed());
    }
    let mut reloaded = Vec::with_capacity(RELOADS);
    for i in 0..RELOADS {
        // A config file that changed drops the cache (the servers keep running).
        world.write_config(CONVENTIONAL, true, i + 1);
        let t = Instant::now();
        let got = editor.execute("tandem.inject", json!([{}])).await;
        reloaded.push(t.elapsed());
        assert_eq!(got["sources"].as_array().map_or(0, Vec::len), sources);
    }
    let inject_rows = [
        row(
            format!("`tandem.inject`, first call (fetches from {CONVENTIONAL} servers)"),
            vec![first_time],
        ),
        row(
            "`tandem.inject` after a config change (reload + fetch)",
            reloaded,
        ),
        row("`tandem.inject` from the cache", warm),
    ];

    // ---- prompts/get overhead ----------------------------------------------------------
    let target = server(servers - 1);
    eprintln!("bench: prompts/get {PROMPT}: direct, and through Tandem ({target})");
    let mut cmd = tokio::process::Command::new(&world.fixture);
    world.home.isolate(cmd.as_std_mut());
    cmd.args(["--name", "direct", "--prompts", &prompts.to_string()])
        .kill_on_drop(true);
    let (transport, _) = rmcp::transport::TokioChildProcess::builder(cmd)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let direct = ().serve(transport).await.unwrap();
    let arguments = json!({"arg0": "a", "arg1": "b", "arg2": "c"});
    let run_line = format!("/{target}:{PROMPT} arg0=a arg1=b arg2=c");
    let get_params = json!({"server": target, "prompt": PROMPT, "arguments": arguments});
    let direct_params =
        GetPromptRequestParams::new(PROMPT).with_arguments(arguments.as_object().unwrap().clone());

    let via_lsp = editor.execute("tandem.prompt.run", json!([run_line])).await;
    let via_cli = cli.call("hub/get_prompt", get_params.clone()).await;
    let straight = direct.get_prompt(direct_params.clone()).await.unwrap();
    let text = |v: &Value| {
        v["messages"][0]["content"]["text"]
            .as_str()
            .map(str::to_string)
    };
    let straight = serde_json::to_value(&straight).unwrap();
    assert!(text(&via_lsp).is_some_and(|t| t.contains(&format!("{PROMPT} from {target}"))));
    assert_eq!(text(&via_lsp), text(&via_cli));
    assert!(text(&straight).is_some_and(|t| t.contains(&format!("{PROMPT} from direct"))));

    let n = samples * 5 / 2;
    let (mut t_direct, mut t_lsp, mut t_cli) = (Vec::new(), Vec::new(), Vec::new());
    // Interleaved, so each path sees the same machine; the first tenth warms up.
    for i in 0..n + n / 10 {
        let t = Instant::now();
        direct.get_prompt(direct_params.clone()).await.unwrap();
        let d = t.elapsed();
        let t = Instant::now();
        editor
            .execute("tandem.prompt.run", json!([run_line.clone()]))
            .await;
        let l = t.elapsed();
        let t = Instant::now();
        cli.call("hub/get_prompt", get_params.clone()).await;
        let c = t.elapsed();
        if i >= n / 10 {
            t_direct.push(d);
            t_lsp.push(l);
            t_cli.push(c);
        }
    }
    let direct_stats = Stats::of(t_direct.clone());
    let get_rows = [
        row(
            "`prompts/get` straight to the server (rmcp client, stdio)",
            t_direct,
        ),
        row(
            "`tandem.prompt.run` (LSP → `tandem lsp` → daemon → server)",
            t_lsp,
        ),
        row(
            "`hub/get_prompt` (daemon's `cli` socket → daemon → server)",
            t_cli,
        ),
    ];

    // ---- report ------------------------------------------------------------------------
    section(
        "Hub",
        &format!(
            "`cargo build --release --example mcp_fixture && cargo bench --bench hub`. \
             {servers} `mcp_fixture` servers of {prompts} prompts each in the user's config, \
             one daemon, an LSP client (`tandem lsp`) as the editor with a `markdown` buffer; \
             times at the client's end of its pipe (`TANDEM_BENCH_SERVERS`, \
             `TANDEM_BENCH_PROMPTS`, `TANDEM_BENCH_SAMPLES` change the sizes). For the \
             injection and value completion, {CONVENTIONAL} servers restart with \
             `--conventional` and one with `--prompt-args`. The three calls of the \
             `prompts/get` rows run interleaved."
        ),
    );
    println!(
        "Editor session start to all {total} prompts listed: {} (servers start, first lists).\n",
        ms(all_listed)
    );
    println!("| figure (at the client's end of its pipe) | p50 | p99 | n |");
    println!("|---|---|---|---|");
    for r in rows.iter().chain(&inject_rows).chain(&get_rows) {
        let p99 = if r.stats.n > 1 {
            ms(r.stats.p99)
        } else {
            String::new()
        };
        println!(
            "| {} | {} | {p99} | {} |",
            r.what,
            ms(r.stats.p50),
            r.stats.n
        );
    }
    for r in &get_rows[1..] {
        let (p50, p99) = (r.stats.p50, r.stats.p99);
        println!(
            "| Tandem's overhead, {} | {} | {} | |",
            r.what.split(' ').next().unwrap(),
            signed_ms(p50, direct_stats.p50),
            signed_ms(p99, direct_stats.p99),
        );
    }
    println!(
        "\nInjection: {sources} conventional prompts, {tokens} tokens, {} KB as the LSP answers it.",
        injected_bytes / 1024
    );
    println!(
        "This client parses the LSP answer to `/` ({} KB) in {} (p50), inside the figures above.",
        answer.len() / 1024,
        ms(parse.p50)
    );
    let t = Instant::now();
    tandem_core::hub::prompts::inject::count_tokens("warm");
    println!(
        "Loading the token counter's vocabulary (o200k_base), once per process: {} here.",
        ms(t.elapsed())
    );
    println!(
        "\nTargets: completion p99 under 30 ms with 500 prompts, and Tandem's overhead on a \
         `prompts/get` under 1 ms. The first injection of a daemon loads the token counter's \
         vocabulary, hence its longer time."
    );
    for (line, count, expected) in checks {
        if count != expected {
            eprintln!("bench: completion of {line:?} gave {count} items, {expected} expected");
        }
    }

    cli.write.shutdown().await.ok();
    drop(cli);
    direct.cancel().await.unwrap();
    editor.stop().await;
}
