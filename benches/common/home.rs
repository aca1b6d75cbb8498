//! The hermetic world of the benchmarks that run the `tandem` binary and its daemon: a temp
//! dir holding the data dir (`TANDEM_HOME`), a home, XDG dirs and a workspace; the fixture
//! MCP server built beside the bench; a guard that stops the daemon.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A temp dir that is the bench's whole world.
pub struct Home {
    dir: PathBuf,
    /// Removes the world when dropped; none for a world kept ([`Home::kept`]).
    _temp: Option<tempfile::TempDir>,
    /// `workspace/` inside, canonical.
    pub workspace: PathBuf,
}

impl Home {
    pub fn new(prefix: &str) -> Home {
        let temp = tempfile::Builder::new().prefix(prefix).tempdir().unwrap();
        let mut home = Home::kept(temp.path());
        home._temp = Some(temp);
        home
    }

    /// A world at `dir`, made if missing, that stays after the bench.
    pub fn kept(dir: &Path) -> Home {
        let workspace = dir.join("workspace");
        std::fs::create_dir_all(&workspace).unwrap();
        std::fs::create_dir_all(dir.join("tandem-home")).unwrap();
        Home {
            dir: dir.canonicalize().unwrap(),
            _temp: None,
            workspace: workspace.canonicalize().unwrap(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    pub fn tandem_home(&self) -> PathBuf {
        self.dir.join("tandem-home")
    }

    /// Writes the user's config (`TANDEM_HOME/config.json`).
    pub fn write_config(&self, text: &str) {
        std::fs::write(self.tandem_home().join("config.json"), text).unwrap();
    }

    /// Only this world's dirs in the environment (the daemon and the servers inherit it).
    pub fn isolate(&self, cmd: &mut std::process::Command) {
        let root = &self.dir;
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("TANDEM_HOME", self.tandem_home())
            .env("HOME", root.join("home"))
            .env("XDG_DATA_HOME", root.join("xdg/data"))
            .env("XDG_CONFIG_HOME", root.join("xdg/config"))
            .env("XDG_STATE_HOME", root.join("xdg/state"))
            .env("XDG_CACHE_HOME", root.join("xdg/cache"))
            .env("TANDEM_LOG", "warn")
            .env("TANDEM_EMBEDDING_MODEL", "off")
            .env("TANDEM_DAEMON_IDLE_SECS", "120");
    }

    /// `tandem ARGS` in this world.
    pub fn tandem(&self, args: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_tandem"));
        self.isolate(cmd.as_std_mut());
        cmd.args(args).kill_on_drop(true);
        cmd
    }

    /// The pid of this world's daemon (`tandem daemon status --json`), if one runs.
    pub fn daemon_pid(&self) -> Option<u32> {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_tandem"));
        self.isolate(&mut cmd);
        let out = cmd.args(["daemon", "status", "--json"]).output().ok()?;
        let status: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        status["pid"].as_u64().map(|p| p as u32)
    }

    /// The live processes started in this world (their `TANDEM_HOME` is this one's) whose
    /// command line contains `marker`.
    pub fn processes(&self, marker: &str) -> Vec<u32> {
        let wanted = format!("TANDEM_HOME={}", self.tandem_home().display());
        let Ok(procs) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        procs
            .filter_map(|p| p.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| {
                let read = |what| std::fs::read(format!("/proc/{pid}/{what}")).unwrap_or_default();
                let stat = String::from_utf8_lossy(&read("stat")).into_owned();
                let zombie = stat
                    .rsplit(')')
                    .next()
                    .and_then(|s| s.split_whitespace().next())
                    .is_none_or(|state| state == "Z" || state == "X");
                !zombie
                    && read("cmdline")
                        .split(|&b| b == 0)
                        .any(|arg| arg.windows(marker.len()).any(|w| w == marker.as_bytes()))
                    && read("environ")
                        .split(|&b| b == 0)
                        .any(|var| var == wanted.as_bytes())
            })
            .collect()
    }
}

/// Stops the world's daemon when the bench ends, however it ends: `tandem daemon stop`,
/// then a kill of its pid if it is still there.
pub struct DaemonGuard<'a> {
    pub home: &'a Home,
    pub pid: Option<u32>,
}

impl Drop for DaemonGuard<'_> {
    fn drop(&mut self) {
        let mut stop = std::process::Command::new(env!("CARGO_BIN_EXE_tandem"));
        self.home.isolate(&mut stop);
        let stopped = stop.args(["daemon", "stop"]).output();
        if !stopped.is_ok_and(|o| o.status.success()) {
            eprintln!("bench: `tandem daemon stop` failed");
        }
        let Some(pid) = self.pid else { return };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if Path::new(&format!("/proc/{pid}")).exists() {
            eprintln!("bench: the daemon (pid {pid}) did not stop; killing it");
            let _ = std::process::Command::new("kill")
                .args(["-9", &pid.to_string()])
                .status();
        }
    }
}

/// The `mcp_fixture` example built beside this bench: `target/PROFILE/deps/BENCH-HASH` →
/// `target/PROFILE/examples/mcp_fixture`.
pub fn fixture_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(Path::parent).unwrap();
    let bin = profile_dir.join("examples").join("mcp_fixture");
    if !bin.is_file() {
        panic!(
            "{} is missing: build it first (scripts/bench does): \
             cargo build --release --example mcp_fixture",
            bin.display()
        );
    }
    bin
}

/// `var` as a number, else `default`.
pub fn env_usize(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `a - b` in milliseconds, signed.
pub fn signed_ms(a: Duration, b: Duration) -> String {
    let d = a.as_secs_f64() - b.as_secs_f64();
    format!("{:+.3} ms", d * 1e3)
}
