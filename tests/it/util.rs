//! Shared test helpers: hermetic homes, the memory under test, and the downstream MCP
//! servers (our `mcp_fixture` example and the npm reference servers).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tandem_core::memory::{EntryType, Memory, NewEntry, NoProgress};
use tandem_core::store::Store;

/// Runs `cmd`, a `tandem` command that must succeed: its stdout.
pub fn succeeds(mut cmd: std::process::Command) -> String {
    let out = cmd.output().unwrap();
    let args: Vec<_> = cmd.get_args().collect();
    assert!(
        out.status.success(),
        "tandem {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// [`succeeds`] with `--json` appended: its output, parsed.
pub fn succeeds_json(mut cmd: std::process::Command) -> serde_json::Value {
    cmd.arg("--json");
    serde_json::from_str(&succeeds(cmd)).unwrap()
}

/// A temp dir that is the test's whole world: `TANDEM_HOME`, `HOME` and XDG dirs inside.
pub struct TestHome {
    pub dir: tempfile::TempDir,
}

impl TestHome {
    pub fn new() -> TestHome {
        TestHome {
            dir: tempfile::Builder::new()
                .prefix("tandem-test")
                .tempdir()
                .unwrap(),
        }
    }

    pub fn tandem_home(&self) -> PathBuf {
        self.dir.path().join("tandem-home")
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// What the data dir's log (`logs/tandem.log`) holds so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.tandem_home().join("logs/tandem.log")).unwrap()
    }

    /// Opens the memory in this home.
    pub fn memory(&self) -> Memory {
        let store = Arc::new(Store::open(&self.tandem_home()).unwrap());
        Memory::open(store, &NoProgress).unwrap()
    }
}

pub fn entry(t: EntryType, title: &str, content: &str, tags: &[&str]) -> NewEntry {
    NewEntry {
        entry_type: Some(t),
        title: title.into(),
        content: content.into(),
        tags: tags.iter().map(|t| t.to_string()).collect(),
        ..NewEntry::default()
    }
}

/// The binary under test.
pub fn tandem_bin() -> &'static str {
    env!("CARGO_BIN_EXE_tandem")
}

impl TestHome {
    /// A `tandem` command that sees only this home: `TANDEM_HOME`, `HOME`, XDG dirs.
    pub fn command(&self) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(tandem_bin());
        self.isolate(cmd.as_std_mut());
        cmd.kill_on_drop(true);
        cmd
    }

    /// The same, as a blocking `std` command.
    pub fn std_command(&self) -> std::process::Command {
        let mut cmd = std::process::Command::new(tandem_bin());
        self.isolate(&mut cmd);
        cmd
    }

    pub fn isolate(&self, cmd: &mut std::process::Command) {
        let root = self.dir.path();
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("TANDEM_HOME", self.tandem_home())
            .env("HOME", root.join("home"))
            .env("XDG_DATA_HOME", root.join("xdg/data"))
            .env("XDG_CONFIG_HOME", root.join("xdg/config"))
            .env("XDG_STATE_HOME", root.join("xdg/state"))
            .env("XDG_CACHE_HOME", root.join("xdg/cache"))
            .env("TANDEM_LOG", "debug")
            // No model unless a test asks for one: nothing is fetched, nothing changes with
            // when a model finishes loading.
            .env("TANDEM_EMBEDDING_MODEL", "off");
    }

    /// Starts `tandem mcp --standalone` (the data dir in that process, its pid in `pid`) and
    /// connects the rmcp client to it over stdio.
    pub async fn mcp(&self) -> McpClient {
        self.mcp_in(&self.path().join("home")).await
    }

    /// Starts `tandem mcp --standalone` for the workspace `dir`.
    pub async fn mcp_in(&self, dir: &Path) -> McpClient {
        self.mcp_with(dir, &["--standalone"], &[]).await
    }

    /// Starts `tandem mcp` as an agent does, for the workspace `dir`: through the data dir's
    /// daemon, which it starts when none runs (idle exit after `idle_secs`). Stop the daemon
    /// with a [`DaemonGuard`].
    pub async fn mcp_daemon(&self, dir: &Path, idle_secs: u32) -> McpClient {
        self.mcp_daemon_env(dir, idle_secs, &[]).await
    }

    /// The same, with these variables in the environment of the daemon it starts.
    pub async fn mcp_daemon_env(
        &self,
        dir: &Path,
        idle_secs: u32,
        env: &[(&str, &str)],
    ) -> McpClient {
        self.mcp_with(dir, &["--idle-for-tests", &idle_secs.to_string()], env)
            .await
    }

    /// `tandem mcp` through the daemon, as an agent whose handler passes on every
    /// list_changed (to the receiver returned).
    pub async fn mcp_daemon_watching(
        &self,
        dir: &Path,
    ) -> (
        McpClient<Watcher>,
        tokio::sync::mpsc::UnboundedReceiver<ListChanged>,
    ) {
        let (tx, changes) = tokio::sync::mpsc::unbounded_channel();
        let client = self
            .mcp_with_handler(dir, &["--idle-for-tests", "60"], &[], Watcher(tx))
            .await;
        (client, changes)
    }

    /// `tandem mcp` through the daemon (these variables in its environment), as an agent
    /// whose client is `handler`.
    pub async fn mcp_daemon_with<H: rmcp::ClientHandler>(
        &self,
        dir: &Path,
        env: &[(&str, &str)],
        handler: H,
    ) -> McpClient<H> {
        self.mcp_with_handler(dir, &["--idle-for-tests", "60"], env, handler)
            .await
    }

    /// `tandem mcp` through the daemon, as a 2026-07-28 agent (`server/discover`, no
    /// `initialize`) whose client is `handler`.
    pub async fn mcp_daemon_discovering<H: rmcp::ClientHandler>(
        &self,
        dir: &Path,
        handler: H,
    ) -> McpClient<H> {
        let lifecycle = rmcp::service::ClientLifecycleMode::Discover {
            preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
        };
        self.mcp_in_lifecycle(
            dir,
            &["--idle-for-tests", "60"],
            &[],
            handler,
            Some(lifecycle),
        )
        .await
    }

    async fn mcp_with(&self, dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> McpClient {
        self.mcp_with_handler(dir, extra, env, ()).await
    }

    async fn mcp_with_handler<H: rmcp::ClientHandler>(
        &self,
        dir: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
        handler: H,
    ) -> McpClient<H> {
        self.mcp_in_lifecycle(dir, extra, env, handler, None).await
    }

    async fn mcp_in_lifecycle<H: rmcp::ClientHandler>(
        &self,
        dir: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
        handler: H,
        lifecycle: Option<rmcp::service::ClientLifecycleMode>,
    ) -> McpClient<H> {
        std::fs::create_dir_all(dir).unwrap();
        let mut cmd = self.command();
        cmd.envs(env.iter().copied());
        cmd.arg("mcp").arg("--workspace").arg(dir);
        let mut extra = extra.iter();
        while let Some(arg) = extra.next() {
            if *arg == "--idle-for-tests" {
                cmd.env("TANDEM_DAEMON_IDLE_SECS", extra.next().unwrap());
            } else {
                cmd.arg(arg);
            }
        }
        let transport = rmcp::transport::TokioChildProcess::new(cmd).unwrap();
        let pid = transport.id();
        let client = match lifecycle {
            Some(lifecycle) => {
                rmcp::service::ClientServiceExt::serve_with_lifecycle(handler, transport, lifecycle)
                    .await
            }
            None => rmcp::ServiceExt::serve(handler, transport).await,
        }
        .unwrap();
        McpClient { client, pid }
    }
}

/// Stops the home's daemon when the test ends, whatever happened: asks it to stop, then
/// kills every `tandem daemon` of this home still there (one that clients started at once
/// and that had not reached the lock yet would otherwise take the data dir afterwards).
pub struct DaemonGuard<'a>(pub &'a TestHome);

impl Drop for DaemonGuard<'_> {
    fn drop(&mut self) {
        let _ = self.0.std_command().args(["daemon", "stop"]).output();
        for pid in daemons_of(self.0) {
            let _ = std::process::Command::new("kill")
                .args(["-9", &pid.to_string()])
                .status();
        }
    }
}

/// The `tandem daemon` processes whose `TANDEM_HOME` is this home's.
fn daemons_of(home: &TestHome) -> Vec<u32> {
    let wanted = format!("TANDEM_HOME={}", home.tandem_home().display());
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    procs
        .filter_map(|p| p.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let read = |what| std::fs::read(format!("/proc/{pid}/{what}")).unwrap_or_default();
            let args = read("cmdline");
            let mut args = args.split(|&b| b == 0);
            args.next().is_some_and(|exe| exe.ends_with(b"tandem"))
                && args.next() == Some(b"daemon")
                && read("environ")
                    .split(|&b| b == 0)
                    .any(|var| var == wanted.as_bytes())
        })
        .collect()
}

/// The pid written in the data dir's lock file, if a live (not zombie) process has it.
pub fn lock_pid(home: &TestHome) -> Option<u32> {
    let pid: u32 = std::fs::read_to_string(home.tandem_home().join("tandem.lock"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    is_alive(pid).then_some(pid)
}

/// Whether the process `pid` runs (exists and is not a zombie).
pub fn is_alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the parenthesised command name.
    let state = stat
        .rsplit(')')
        .next()
        .and_then(|s| s.split_whitespace().next());
    !matches!(state, None | Some("Z" | "X"))
}

/// The pid of the daemon serving `home` (one must run).
pub fn daemon_pid(home: &TestHome) -> u32 {
    daemon_status(home)["pid"].as_u64().unwrap() as u32
}

/// `tandem daemon status --json`.
pub fn daemon_status(home: &TestHome) -> serde_json::Value {
    let out = home
        .std_command()
        .args(["daemon", "status", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Waits (up to 10 s) until `cond` holds.
pub async fn wait_until(mut cond: impl FnMut() -> bool, what: &str) {
    for _ in 0..500 {
        if cond() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("timed out waiting until {what}");
}

/// Probes until `probe` gives a value (`Err`: not yet, saying what it saw), for up to `secs`;
/// then panics naming `what` and the last thing seen. For conditions outside the test's
/// reach (a daemon, a downstream server, a config reload) that no event announces to a
/// blocking test: the first probes follow each other closely and the gaps grow (5 ms
/// doubling up to 100 ms), so a condition already met costs no sleep and a slow one few
/// probes.
pub fn poll<T>(what: &str, secs: u64, mut probe: impl FnMut() -> Result<T, String>) -> T {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    let mut gap = std::time::Duration::from_millis(5);
    loop {
        match probe() {
            Ok(v) => return v,
            Err(seen) if std::time::Instant::now() > deadline => {
                panic!("timed out waiting for {what}; last seen: {seen}")
            }
            Err(_) => {
                std::thread::sleep(gap);
                gap = (gap * 2).min(std::time::Duration::from_millis(100));
            }
        }
    }
}

/// A live MCP session with a `tandem mcp` child.
pub struct McpClient<H: rmcp::ClientHandler = ()> {
    pub client: rmcp::service::RunningService<rmcp::RoleClient, H>,
    pub pid: Option<u32>,
}

impl<H: rmcp::ClientHandler> McpClient<H> {
    /// The `instructions` the server gave at `initialize`.
    pub fn instructions(&self) -> String {
        let info = self.client.peer_info().expect("the session is initialized");
        info.instructions
            .clone()
            .expect("the server gave instructions")
    }

    /// Calls a tool; returns `(is_error, structured content)`.
    pub async fn call(&self, tool: &str, args: serde_json::Value) -> (bool, serde_json::Value) {
        let r = self.try_call(tool, args).await.unwrap();
        let structured = r
            .structured_content
            .clone()
            .expect("every result is structured");
        // The text rendering says the same as the structured content.
        let text = r.content[0].as_text().expect("a text block").text.clone();
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&text).unwrap(),
            structured
        );
        (r.is_error == Some(true), structured)
    }

    pub async fn try_call(
        &self,
        tool: &str,
        args: serde_json::Value,
    ) -> Result<rmcp::model::CallToolResult, rmcp::ServiceError> {
        let serde_json::Value::Object(map) = args else {
            panic!("arguments must be an object")
        };
        self.client
            .call_tool(
                rmcp::model::CallToolRequestParams::new(tool.to_string()).with_arguments(map),
            )
            .await
    }

    /// Calls a tool that must succeed.
    pub async fn ok(&self, tool: &str, args: serde_json::Value) -> serde_json::Value {
        let (is_error, v) = self.call(tool, args.clone()).await;
        assert!(!is_error, "{tool}({args}) failed: {v}");
        v
    }

    /// Calls a tool that must fail; returns its error code.
    pub async fn err(&self, tool: &str, args: serde_json::Value) -> String {
        let (is_error, v) = self.call(tool, args.clone()).await;
        assert!(is_error, "{tool}({args}) should fail, got {v}");
        let message = v["error"]["message"].as_str().unwrap_or("");
        assert!(!message.is_empty(), "error without a message: {v}");
        v["error"]["code"].as_str().unwrap().to_string()
    }

    pub async fn close(self) {
        self.client.cancel().await.unwrap();
    }
}

/// A home whose user config is `config`, and its workspace `ws`, a git repository.
pub fn home_with_config(config: serde_json::Value) -> (TestHome, PathBuf) {
    let home = TestHome::new();
    let ws = home.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    git(&ws, &["init", "-q"]);
    std::fs::create_dir_all(home.tandem_home()).unwrap();
    std::fs::write(home.tandem_home().join("config.json"), config.to_string()).unwrap();
    (home, ws)
}

/// A home whose user config has `servers` (its `mcpServers`), and its workspace.
pub fn home_with_servers(servers: serde_json::Value) -> (TestHome, PathBuf) {
    home_with_config(serde_json::json!({ "mcpServers": servers }))
}

/// Runs the real `git` in `dir`, hermetically (no user config, fixed identity).
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "Test")
        .env("GIT_AUTHOR_EMAIL", "test@example.com")
        .env("GIT_COMMITTER_NAME", "Test")
        .env("GIT_COMMITTER_EMAIL", "test@example.com")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Writes `files` (`path`, `content`) under `dir`, creating parent dirs.
pub fn write_files(dir: &Path, files: &[(&str, &str)]) {
    for (path, content) in files {
        let p = dir.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }
}

/// A git repository with `files` committed.
pub fn repo_with(dir: &Path, files: &[(&str, &str)]) {
    std::fs::create_dir_all(dir).unwrap();
    git(dir, &["init", "-q", "-b", "main"]);
    write_files(dir, files);
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "initial"]);
}

/// The `mcp_fixture` example (a downstream MCP server with switches to misbehave), built
/// next to this test binary: `target/debug/deps/it-HASH` → `target/debug/examples/`.
pub fn fixture_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(Path::parent).unwrap();
    let bin = profile_dir.join("examples").join("mcp_fixture");
    if !bin.is_file() {
        panic!(
            "{} is missing: run scripts/test, or cargo build --example mcp_fixture",
            bin.display()
        );
    }
    bin
}

/// A command starting `mcp_fixture` with `args` and only `PATH` in its environment.
pub fn fixture(args: &[&str]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(fixture_bin());
    cmd.args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .kill_on_drop(true);
    cmd
}

/// `mcp-server-everything` (npm, installed by `scripts/test`).
pub fn everything_bin() -> PathBuf {
    npm_bin("TANDEM_TEST_EVERYTHING", "mcp-server-everything")
}

/// `mcp-server-filesystem` (npm, installed by `scripts/test`).
pub fn filesystem_bin() -> PathBuf {
    npm_bin("TANDEM_TEST_FILESYSTEM", "mcp-server-filesystem")
}

/// The `node_modules` the reference servers are installed in; it holds their dependency, the
/// official TypeScript MCP SDK (`@modelcontextprotocol/sdk`).
pub fn npm_modules() -> PathBuf {
    let bin = everything_bin();
    bin.parent()
        .and_then(Path::parent)
        .unwrap_or_else(|| panic!("{} is not in a node_modules/.bin", bin.display()))
        .to_path_buf()
}

/// An npm server's executable: `$var`, else `.test-deps/npm/node_modules/.bin/NAME`.
fn npm_bin(var: &str, name: &str) -> PathBuf {
    let bin = match std::env::var_os(var) {
        Some(path) => PathBuf::from(path),
        None => Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(".test-deps/npm/node_modules/.bin")
            .join(name),
    };
    if !bin.is_file() {
        panic!(
            "{name} is not installed at {}: run scripts/test (it installs the reference MCP \
             servers under .test-deps/npm), or set {var}",
            bin.display()
        );
    }
    bin
}

/// A `notifications/*/list_changed` a downstream server sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListChanged {
    Prompts,
    Tools,
}

/// The test's rmcp client handler: passes on every list_changed it receives.
#[derive(Clone)]
pub struct Watcher(pub tokio::sync::mpsc::UnboundedSender<ListChanged>);

impl rmcp::ClientHandler for Watcher {
    async fn on_prompt_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        let _ = self.0.send(ListChanged::Prompts);
    }

    async fn on_tool_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        let _ = self.0.send(ListChanged::Tools);
    }
}

/// An rmcp client session (opened with `initialize`) with a downstream stdio server.
pub struct Downstream {
    pub client: rmcp::service::RunningService<rmcp::RoleClient, Watcher>,
    /// The list_changed notifications received, in order.
    pub changes: tokio::sync::mpsc::UnboundedReceiver<ListChanged>,
}

impl Downstream {
    /// Starts `cmd` (its stderr inherited) and initializes a session with it.
    pub async fn start(cmd: tokio::process::Command) -> Downstream {
        Self::try_start(cmd, std::process::Stdio::inherit())
            .await
            .0
            .expect("the server did not initialize")
    }

    /// Starts `cmd` with its stderr piped, returned beside the session (or its error).
    pub async fn start_capturing(
        cmd: tokio::process::Command,
    ) -> (
        Result<Downstream, rmcp::service::ClientInitializeError>,
        tokio::process::ChildStderr,
    ) {
        let (session, stderr) = Self::try_start(cmd, std::process::Stdio::piped()).await;
        (session, stderr.expect("stderr is piped"))
    }

    async fn try_start(
        cmd: tokio::process::Command,
        stderr: std::process::Stdio,
    ) -> (
        Result<Downstream, rmcp::service::ClientInitializeError>,
        Option<tokio::process::ChildStderr>,
    ) {
        let (transport, stderr) = rmcp::transport::TokioChildProcess::builder(cmd)
            .stderr(stderr)
            .spawn()
            .unwrap();
        let (tx, changes) = tokio::sync::mpsc::unbounded_channel();
        let session = rmcp::ServiceExt::serve(Watcher(tx), transport)
            .await
            .map(|client| Downstream { client, changes });
        (session, stderr)
    }

    /// The next list_changed notification (waiting up to 10 s).
    pub async fn next_change(&mut self) -> ListChanged {
        tokio::time::timeout(std::time::Duration::from_secs(10), self.changes.recv())
            .await
            .expect("no list_changed notification within 10 s")
            .expect("the session ended")
    }

    pub async fn prompt_names(&self) -> Vec<String> {
        let prompts = self.client.list_all_prompts().await.unwrap();
        prompts.into_iter().map(|p| p.name).collect()
    }

    pub async fn tool_names(&self) -> Vec<String> {
        let tools = self.client.list_all_tools().await.unwrap();
        tools.into_iter().map(|t| t.name.to_string()).collect()
    }

    /// `prompts/get` of `name` with `args`; the text of each message, in order.
    pub async fn prompt_texts(
        &self,
        name: &str,
        args: serde_json::Value,
    ) -> Result<Vec<String>, rmcp::ServiceError> {
        let serde_json::Value::Object(map) = args else {
            panic!("arguments must be an object")
        };
        let params = rmcp::model::GetPromptRequestParams::new(name).with_arguments(map);
        let result = self.client.get_prompt(params).await?;
        Ok(result
            .messages
            .into_iter()
            .map(|m| match m.content {
                rmcp::model::ContentBlock::Text(t) => t.text,
                other => serde_json::to_string(&other).unwrap(),
            })
            .collect())
    }

    /// Calls a tool; the text of its first content block.
    pub async fn call_text(&self, tool: &str, args: serde_json::Value) -> String {
        let serde_json::Value::Object(map) = args else {
            panic!("arguments must be an object")
        };
        let result = self
            .client
            .call_tool(
                rmcp::model::CallToolRequestParams::new(tool.to_string()).with_arguments(map),
            )
            .await
            .unwrap();
        assert_ne!(result.is_error, Some(true), "{tool} failed: {result:?}");
        result.content[0]
            .as_text()
            .expect("a text block")
            .text
            .clone()
    }
}

/// A loopback port nothing listens on now (the OS picked it; another process may take it
/// before the caller binds it, which a test's short life makes unlikely).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
