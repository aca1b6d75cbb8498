//! `tandem daemon ...`, and the client side of the protocol faces: `tandem mcp` splices its
//! stdio to a session of the data dir's daemon, starting the daemon when none runs.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use tokio::io::AsyncWriteExt;

use tandem::daemon::{self, DaemonConfig, VERSION_MISMATCH};
use tandem_core::calls::LogProgress;
use tandem_core::config::Config;
use tandem_core::core::Core;
use tandem_core::core::CoreError;
use tandem_core::store::StoreError;

/// The idle time before the daemon exits, in seconds, when neither `--idle` nor
/// `TANDEM_DAEMON_IDLE_SECS` says otherwise.
const DEFAULT_IDLE_SECS: u64 = 600;
/// How long a starting daemon waits for the data dir while another process holds it (a
/// `tandem memory` command run in-process, typically).
const LOCK_WAIT: Duration = Duration::from_secs(10);
/// How long a client waits for the daemon it started: the lock wait, then the open.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long `tandem daemon stop` waits for the daemon to go.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Args)]
pub struct DaemonArgs {
    #[command(subcommand)]
    command: Option<DaemonCommand>,
    /// Exit after this many seconds with no client (also TANDEM_DAEMON_IDLE_SECS).
    #[arg(long, env = "TANDEM_DAEMON_IDLE_SECS", default_value_t = DEFAULT_IDLE_SECS)]
    idle: u64,
    /// Start the daemon in the background and return at once (what clients run).
    #[arg(long, hide = true)]
    spawn: bool,
}

#[derive(Subcommand)]
enum DaemonCommand {
    /// Whether a daemon runs for this data dir: pid, version, clients, uptime.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Ask the running daemon to stop (it finishes in-flight writes first).
    Stop,
}

pub fn run(config: &Config, args: DaemonArgs) -> anyhow::Result<()> {
    if args.spawn {
        // The intermediate process of a double fork: the daemon it starts is not our
        // caller's child, so it never lingers as a zombie of a client.
        return spawn_daemon(config);
    }
    if args.command.is_none() {
        // Started by hand or by a service manager rather than by a client: with the
        // settings a client gives it.
        reexec_with_malloc_settings();
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let exit = runtime.block_on(async {
        match args.command {
            None => {
                let core = match open_core(config).await {
                    Ok(Some(core)) => core,
                    Ok(None) => return Ok(None),
                    Err(e) => {
                        tracing::error!("the daemon cannot open the data dir: {e:#}");
                        let _ = std::fs::write(
                            daemon::start_error_path(&config.home),
                            format!("{e:#}"),
                        );
                        return Err(e);
                    }
                };
                let exit = daemon::run(
                    DaemonConfig {
                        home: config.home.clone(),
                        log_file: config.log_file(),
                        idle: Some(Duration::from_secs(args.idle)),
                    },
                    core,
                    None,
                )
                .await?;
                Ok(Some(exit))
            }
            Some(DaemonCommand::Status { json }) => {
                match (status(&config.home).await, json) {
                    (Some(w), true) => println!("{}", serde_json::to_string_pretty(&w)?),
                    (Some(w), false) => {
                        let shown = |p: Option<std::path::PathBuf>| {
                            p.map(|p| p.display().to_string()).unwrap_or_default()
                        };
                        println!(
                            "daemon running: pid {}, version {}, {} client(s), up {}s\ndata dir: {}\nlog: {}",
                            w.pid,
                            w.version,
                            w.clients,
                            w.uptime_seconds,
                            shown(w.home),
                            shown(w.log_file)
                        );
                    }
                    (None, true) => {
                        println!("{}", serde_json::json!({"ok": false, "running": false}))
                    }
                    (None, false) => println!("no daemon running for {}", config.home.display()),
                }
                Ok(None)
            }
            Some(DaemonCommand::Stop) => {
                let Ok((_, w)) =
                    daemon::connect(&config.home, &daemon::hello("control", None, Some("stop")))
                        .await
                else {
                    println!("no daemon running for {}", config.home.display());
                    return Ok(None);
                };
                wait_gone(&config.home).await?;
                println!("daemon {} stopped", w.pid);
                Ok(None)
            }
        }
    })?;
    // The core's last holders (sessions ending) go with the runtime: the data dir is closed.
    drop(runtime);
    if exit == Some(daemon::Exit::Idle) {
        compact_on_idle(&config.home);
    }
    Ok(())
}

/// Compacts the data dir an idle daemon leaves, when that is worth it: nobody waits for
/// this daemon, and a client that comes meanwhile starts a daemon that asks the compaction
/// to stop and waits for it. A process that took the data dir first (the lock is free
/// between the close and the compaction) keeps it: there is nothing to do then.
fn compact_on_idle(home: &Path) {
    match tandem_core::store::compact(home, tandem_core::store::CompactWhen::Idle) {
        Ok(c) if c.rewritten => {}
        Ok(c) if c.gave_way => {
            tracing::info!("another process wants the data dir; compacting it another time")
        }
        Ok(c) if c.copy > 0 => tracing::info!(
            "a copy of the database took {} B, no less than its files ({} B): kept them",
            c.copy,
            c.before
        ),
        Ok(c) if c.counted => tracing::info!(
            "the database holds {} B of records in {} B of files, a copy would take ~{} B: not worth compacting",
            c.record_bytes,
            c.before,
            c.expected
        ),
        Ok(c) => tracing::info!(
            "the database's files ({} B) have not grown enough since its last count ({} B of records) for a compaction to be worth it",
            c.before,
            c.record_bytes
        ),
        Err(tandem_core::store::StoreError::Locked { pid, .. }) => {
            tracing::info!("pid {pid} took the data dir first; not compacting")
        }
        Err(e) => tracing::error!("compacting the data dir failed: {e}"),
    }
}

/// Opens the core for the daemon. While another process holds the data dir it retries for
/// up to [`LOCK_WAIT`], so a client that started this daemon while a CLI command held the
/// data dir still gets its session; `None` when a daemon already serves the data dir (two
/// clients started one each).
async fn open_core(config: &Config) -> anyhow::Result<Option<Core>> {
    let deadline = Instant::now() + LOCK_WAIT;
    let mut told = false;
    loop {
        let home = config.home.clone();
        match tokio::task::spawn_blocking(move || Core::open(&home, &LogProgress)).await? {
            Ok(core) => {
                core.start_embeddings(config);
                return Ok(Some(core));
            }
            Err(CoreError::Store(StoreError::Locked { pid, .. })) if Instant::now() < deadline => {
                if let Some(w) = status(&config.home).await {
                    tracing::info!("daemon {} already serves the data dir; exiting", w.pid);
                    return Ok(None);
                }
                if !told {
                    tracing::info!(
                        "the data dir is held by pid {pid}; waiting up to {LOCK_WAIT:?}"
                    );
                    told = true;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// The running daemon's status, if one answers.
pub(crate) async fn status(home: &Path) -> Option<daemon::Welcome> {
    let hello = daemon::hello("control", None, Some("status"));
    daemon::connect(home, &hello).await.ok().map(|(_, w)| w)
}

/// Waits until the daemon is gone: its socket removed and the data dir released.
async fn wait_gone(home: &Path) -> anyhow::Result<()> {
    let deadline = Instant::now() + STOP_TIMEOUT;
    // The socket goes first; the data dir is released once the index is committed and sled
    // flushed, when the process ends.
    while daemon::socket_path(home).exists() || tandem_core::store::is_held(home) {
        if Instant::now() > deadline {
            bail!("the daemon did not stop within {STOP_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Serves a protocol face on stdio through the data dir's daemon (`tandem mcp` with face
/// `mcp`, `tandem lsp` with `lsp`): connects (starting the daemon, detached, when none
/// runs; replacing it when it is of another version and nobody uses it), says hello, then
/// splices stdio to the socket.
pub fn serve_via_daemon(
    config: &Config,
    face: &str,
    workspace: std::path::PathBuf,
) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let done = runtime.block_on(async {
        let hello = daemon::hello(face, Some(workspace), None);
        let stream = connect_or_start(config, &hello).await?;
        let (mut from_daemon, mut to_daemon) = stream.into_split();
        // The client's input goes to the daemon until it ends; then the daemon is told so
        // (its session ends once it has answered what it got).
        let upstream = async move {
            let _ = tokio::io::copy(&mut tokio::io::stdin(), &mut to_daemon).await;
            let _ = to_daemon.shutdown().await;
            std::future::pending::<()>().await
        };
        // The session ends when the daemon closes it: after the client's input ended, or
        // on its own (an LSP `exit`, the daemon stopping), even while the client keeps its
        // end of the pipe open.
        let mut stdout = tokio::io::stdout();
        tokio::select! {
            _ = tokio::io::copy(&mut from_daemon, &mut stdout) => {}
            _ = upstream => {}
        }
        Ok(())
    });
    // A blocking read of stdin may still be pending: do not wait for it.
    runtime.shutdown_background();
    done
}

/// Connects to the data dir's daemon with `hello`, starting the daemon when none runs and
/// replacing one of another version that nobody uses; the stream is ready for the face. A
/// daemon it started that cannot open the data dir (a newer or unreadable format) is an
/// error with its reason at once, not a wait for [`START_TIMEOUT`].
pub(crate) async fn connect_or_start(
    config: &Config,
    hello: &daemon::Hello,
) -> anyhow::Result<tokio::net::UnixStream> {
    let mut replaced = false;
    let deadline = Instant::now() + START_TIMEOUT;
    let mut started = false;
    loop {
        match daemon::connect(&config.home, hello).await {
            Ok((stream, w)) if w.ok => return Ok(stream),
            Ok((_, w)) => {
                let error = w.error.unwrap_or_default();
                if error.starts_with(VERSION_MISMATCH) && !replaced {
                    // Replace a daemon of another version, but only if nobody uses it.
                    let (_, stop) = daemon::connect(
                        &config.home,
                        &daemon::hello("control", None, Some("stop_if_idle")),
                    )
                    .await?;
                    if !stop.ok {
                        bail!(
                            "a tandem daemon of version {} serves other clients; this is {} (stop it with `tandem daemon stop`): {error}",
                            w.version,
                            env!("CARGO_PKG_VERSION")
                        );
                    }
                    wait_gone(&config.home).await?;
                    replaced = true;
                    continue;
                }
                bail!("the daemon refused the session: {error}");
            }
            // The daemon it started waits for a compaction of the data dir (at the idle
            // exit of the one before), which may take longer than a start.
            Err(_)
                if Instant::now() > deadline
                    && (!tandem_core::store::is_compacting(&config.home)
                        || Instant::now() > deadline + tandem_core::store::COMPACTION_WAIT) =>
            {
                bail!(
                    "no tandem daemon answered on {} within {START_TIMEOUT:?}; see {}",
                    daemon::socket_path(&config.home).display(),
                    config.log_file().display()
                );
            }
            Err(_) => {
                let start_error = daemon::start_error_path(&config.home);
                if !started {
                    let _ = std::fs::remove_file(&start_error);
                    start_detached(config)?;
                    started = true;
                } else if let Ok(reason) = std::fs::read_to_string(&start_error) {
                    bail!("the tandem daemon cannot start: {reason}");
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// Starts the daemon detached: through `tandem daemon --spawn`, which starts it and exits, so
/// the daemon is nobody's child here. Two clients starting at once start two; the second
/// finds the data dir locked and, once the first answers, exits; both clients connect to the
/// first.
fn start_detached(config: &Config) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("cannot find the tandem binary")?;
    let status = std::process::Command::new(exe)
        .args(["daemon", "--spawn"])
        .env(tandem_core::config::HOME_ENV, &config.home)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .context("cannot start the tandem daemon")?;
    if !status.success() {
        bail!(
            "starting the tandem daemon failed ({status}); see {}",
            config.log_file().display()
        );
    }
    Ok(())
}

/// glibc malloc's settings the daemon runs with: each an environment variable, the
/// `GLIBC_TUNABLES` name that sets the same, and the value. glibc reads them once, at start.
/// - The trim threshold, fixed: with glibc's default, a threshold that grows with the
///   largest block freed, the memory a search or an index commit frees stays in the
///   process, and the idle daemon kept far more resident after an agent's session
///   (`benches/embeddings.rs` prints the idle daemon's resident memory).
/// - One arena: glibc's default, up to 8 a core, each a heap of its own that a thread's
///   freed blocks return to, let the daemon under load grow its anonymous memory many
///   times faster than its live heap (heaptrack) grew; fewer arenas grew it less, one
///   least (`benches/load.rs` prints the daemon's memory over its run, and fails on
///   growth). Per-thread caches (glibc's tcache) keep small allocations off the arena's
///   lock.
const MALLOC_SETTINGS: [(&str, &str, &str); 2] = [
    (
        "MALLOC_TRIM_THRESHOLD_",
        "glibc.malloc.trim_threshold",
        "131072",
    ),
    ("MALLOC_ARENA_MAX", "glibc.malloc.arena_max", "1"),
];

/// The settings of [`MALLOC_SETTINGS`] to add to an environment where `var` reads a
/// variable and `tunables` is `GLIBC_TUNABLES`: those the user did not set either way.
/// None where the C library is not glibc.
fn malloc_settings(
    var: impl Fn(&str) -> Option<String>,
    tunables: Option<&str>,
) -> Vec<(&'static str, &'static str)> {
    if !cfg!(all(target_os = "linux", target_env = "gnu")) {
        return Vec::new();
    }
    MALLOC_SETTINGS
        .iter()
        .filter(|(env, tunable, _)| {
            var(env).is_none() && !tunables.is_some_and(|t| t.contains(tunable))
        })
        .map(|&(env, _, value)| (env, value))
        .collect()
}

/// [`malloc_settings`] for this process's environment.
fn wanted_malloc_settings() -> Vec<(&'static str, &'static str)> {
    malloc_settings(
        |name| std::env::var(name).ok(),
        std::env::var("GLIBC_TUNABLES").ok().as_deref(),
    )
}

/// Runs this command again, in place (exec, same pid), with [`MALLOC_SETTINGS`] in its
/// environment when they are not there: what `tandem serve` and a `tandem daemon` started
/// by hand do first, since nobody spawns them as [`spawn_daemon`] spawns the daemon of
/// `tandem mcp`. Without them the
/// daemon under load kept several times the memory (the load bench). Returns when there
/// is nothing to do, or the exec failed (logged).
pub(crate) fn reexec_with_malloc_settings() {
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        let settings = wanted_malloc_settings();
        if settings.is_empty() {
            return;
        }
        let Ok(exe) = std::env::current_exe() else {
            return;
        };
        let e = std::process::Command::new(exe)
            .args(std::env::args_os().skip(1))
            .envs(settings)
            .exec();
        tracing::warn!("cannot run again with glibc malloc's settings: {e}");
    }
}

/// Starts `tandem daemon` in its own process group with no stdio, with
/// [`MALLOC_SETTINGS`].
fn spawn_daemon(config: &Config) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("cannot find the tandem binary")?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("daemon")
        .env(tandem_core::config::HOME_ENV, &config.home)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    cmd.envs(wanted_malloc_settings());
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
    }
    cmd.spawn().context("cannot start the tandem daemon")?;
    tracing::info!("started a tandem daemon for {}", config.home.display());
    Ok(())
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::malloc_settings;

    #[test]
    fn malloc_settings_are_added_unless_the_user_set_them() {
        let none = |_: &str| None;
        let all = vec![
            ("MALLOC_TRIM_THRESHOLD_", "131072"),
            ("MALLOC_ARENA_MAX", "1"),
        ];
        assert_eq!(malloc_settings(none, None), all);
        assert_eq!(
            malloc_settings(none, Some("glibc.malloc.tcache_count=0")),
            all
        );
        let trim = |name: &str| (name == "MALLOC_TRIM_THRESHOLD_").then(|| "0".to_owned());
        assert_eq!(malloc_settings(trim, None), vec![("MALLOC_ARENA_MAX", "1")]);
        assert_eq!(
            malloc_settings(none, Some("glibc.malloc.arena_max=4")),
            vec![("MALLOC_TRIM_THRESHOLD_", "131072")]
        );
        assert_eq!(
            malloc_settings(
                |_: &str| Some("2".to_owned()),
                Some("glibc.malloc.trim_threshold=0")
            ),
            vec![]
        );
    }
}
