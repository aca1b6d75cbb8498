//! The command line: argument parsing (clap), dispatch, exit codes.
//!
//! Only this module prints. Errors go to stderr as one line (`tandem: ...`, with the spec's
//! code where there is one) and exit 1; usage errors exit 2 (clap).

mod backend;
mod check;
mod daemon;
mod hub;
mod import;
mod memory;
mod serve;
mod setup;
mod tasks;

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

use tandem_core::calls::{CallError, LogProgress};
use tandem_core::config::{self, Config};
use tandem_core::core::Core;
use tandem_core::core::CoreError;
use tandem_core::core::LazyCore;
use tandem_core::store::StoreError;

#[derive(Parser)]
#[command(
    name = "tandem",
    version,
    about = "One sidecar between your coding agent and your editor: memory, task tracking and an MCP hub",
    long_about = None,
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve MCP on stdio (add `tandem mcp` to your agent's MCP configuration), through the
    /// data dir's daemon, which it starts when none runs.
    Mcp {
        /// The workspace tasks are tracked in (default: the current directory's git
        /// toplevel, else the current directory).
        #[arg(long)]
        workspace: Option<std::path::PathBuf>,
        /// Serve in this process instead of through the daemon (the data dir is then this
        /// process's alone while it runs).
        #[arg(long)]
        standalone: bool,
    },
    /// Serve LSP on stdio, for editors (the Neovim plugin, VS Code): tasks and memory in
    /// the editor. Goes through the daemon unless `--standalone`.
    Lsp {
        /// The workspace when the editor names none (default: the current directory's git
        /// toplevel, else the current directory).
        #[arg(long)]
        workspace: Option<std::path::PathBuf>,
        /// Serve in-process instead of through the daemon.
        #[arg(long)]
        standalone: bool,
    },
    /// The daemon that owns the data dir and serves clients over a unix socket; `status`,
    /// `stop`.
    Daemon(daemon::DaemonArgs),
    /// The daemon in the foreground, with MCP over Streamable HTTP beside its socket (a team
    /// server, a container, systemd).
    Serve(serve::ServeArgs),
    /// Bearer tokens for `tandem serve --http`: add (printed once), list, revoke.
    Token(serve::TokenArgs),
    /// The knowledge base: add, search, show, link, review suggestions, share.
    #[command(subcommand)]
    Memory(memory::MemoryCommand),
    /// Workflows and tasks the agent tracked: a tree, or one task in full.
    Tasks(tasks::TasksArgs),
    /// The workspace's downstream MCP servers: state, prompt and tool counts, last error;
    /// `import` brings in the servers your agents already have.
    Servers(hub::ServersCli),
    /// Every prompt of the workspace's servers, as `/server:prompt` commands.
    Prompts(hub::ListArgs),
    /// Run a downstream prompt and print its messages.
    Prompt(hub::PromptArgs),
    /// Review and approve the workspace's `.mcp.json` (its servers run only once trusted).
    Trust(hub::TrustArgs),
    /// The conventional prompts injection (spec 000): the messages, in order, with token
    /// counts per source; `prompts` lists the conventional prompts and their settings, `set`
    /// changes them.
    Inject(hub::InjectCli),
    /// Add Tandem to an agent's MCP config (claude, codex, gemini, vscode, cursor): the
    /// change is shown, then written once confirmed.
    Setup(setup::SetupArgs),
}

pub fn main() -> ExitCode {
    // `tandem servers --json | head`: a closed stdout ends the command quietly, as with
    // other Unix tools, instead of a panic's backtrace.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.contains("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(141);
        }
        default_hook(info);
    }));
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if let Some(c) = e.downcast_ref::<CallError>() {
                eprintln!("tandem: {} ({})", c, c.code());
            } else if let Some(r) = e.downcast_ref::<backend::RemoteError>() {
                eprintln!("tandem: {} ({})", r, r.code);
            } else if let Some(c) = e.downcast_ref::<CoreError>() {
                eprintln!("tandem: {} ({})", c, c.code());
            } else {
                eprintln!("tandem: {e:#}");
            }
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let config = Config::from_env()?;
    let log = config::init_logging(&config)
        .with_context(|| format!("cannot open the log in {}", config.log_dir().display()))?;
    tracing::debug!(
        "tandem {} logging to {}",
        env!("CARGO_PKG_VERSION"),
        log.display()
    );
    match cli.command {
        Command::Mcp {
            workspace,
            standalone: false,
        } => daemon::serve_via_daemon(&config, "mcp", workspace_root(workspace)?),
        Command::Mcp {
            workspace,
            standalone: true,
        } => serve_mcp(&config, workspace),
        Command::Lsp {
            workspace,
            standalone: false,
        } => daemon::serve_via_daemon(&config, "lsp", workspace_root(workspace)?),
        Command::Lsp {
            workspace,
            standalone: true,
        } => serve_lsp(&config, workspace_root(workspace)?),
        Command::Daemon(args) => daemon::run(&config, args),
        Command::Serve(args) => serve::serve(&config, args),
        Command::Token(args) => serve::token(&config, args),
        Command::Memory(cmd) => memory::run(&config, cmd),
        Command::Tasks(args) => tasks::run(&config, args),
        Command::Servers(args) => hub::servers_cli(&config, args),
        Command::Prompts(args) => hub::prompts(&config, args),
        Command::Prompt(args) => hub::prompt(&config, args),
        Command::Trust(args) => hub::trust(&config, args),
        Command::Inject(args) => hub::inject_cli(&config, args),
        Command::Setup(args) => setup::run(&config, args),
    }
}

fn serve_mcp(config: &Config, workspace: Option<std::path::PathBuf>) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let opening = config.clone();
        let memory = LazyCore::new(move || open_standalone(&opening));
        // Open in the background while the session starts; tools wait for it.
        let warm = memory.clone();
        tokio::spawn(async move {
            if let Err(e) = warm.get().await {
                tracing::error!("cannot open the memory: {e}");
            }
        });
        tracing::info!("serving MCP on stdio (data dir {})", config.home.display());
        let server = tandem::mcp::TandemServer::new(memory.clone(), workspace_root(workspace)?)
            .with_user_config(tandem_core::user_config::path(&config.home));
        let io = tandem::mcp::transport::framed(tokio::io::stdin(), tokio::io::stdout());
        let service = rmcp::ServiceExt::serve(server, io)
            .await
            .context("MCP session failed to start")?;
        let cancel = service.cancellation_token();
        tokio::spawn(async move {
            tandem::daemon::shutdown_signal().await;
            tracing::info!("signal received; closing the MCP session");
            cancel.cancel();
        });
        let reason = service.waiting().await;
        tracing::info!("MCP session ended: {reason:?}");
        if let Some(core) = memory.opened() {
            core.hub.shutdown();
        }
        anyhow::Ok(())
    })?;
    // Dropping the runtime and then the memory flushes sled and commits the index.
    drop(runtime);
    Ok(())
}

fn serve_lsp(config: &Config, workspace: std::path::PathBuf) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let opening = config.clone();
        let core = LazyCore::new(move || open_standalone(&opening));
        let host = tandem::lsp::Host {
            home: config.home.clone(),
            log_file: config.log_file(),
            daemon: false,
        };
        tracing::info!("serving LSP on stdio (data dir {})", config.home.display());
        tokio::select! {
            _ = tandem::lsp::serve(core.clone(), host, workspace, tokio::io::stdin(), tokio::io::stdout()) => {}
            _ = tandem::daemon::shutdown_signal() => tracing::info!("signal received; closing the LSP session"),
        }
        if let Some(core) = core.opened() {
            core.hub.shutdown();
        }
    });
    drop(runtime);
    Ok(())
}

/// A workspace is a canonical root: the git toplevel where there is one.
fn workspace_root(dir: Option<std::path::PathBuf>) -> anyhow::Result<std::path::PathBuf> {
    let dir = match dir {
        Some(d) => d,
        None => std::env::current_dir().context("no current directory")?,
    };
    let dir = dir
        .canonicalize()
        .with_context(|| format!("workspace {} does not exist", dir.display()))?;
    Ok(match tandem_core::tasks::git::discover(&dir) {
        Some(repo) => tandem_core::tasks::git::workdir(&repo),
        None => dir,
    })
}

/// The text of an input file, or of stdin when there is none or it is `-`.
fn read_input(file: Option<&Path>) -> anyhow::Result<String> {
    match file.filter(|f| f.as_os_str() != "-") {
        Some(path) => {
            std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
        }
        None => Ok(std::io::read_to_string(std::io::stdin())?),
    }
}

/// Opens the core for `tandem mcp --standalone` and `tandem lsp --standalone`. A data dir
/// held by the daemon says so, and what to do.
/// The embedding model loads in the background once it is open.
fn open_standalone(config: &Config) -> Result<Core, CoreError> {
    let home = config.home.as_path();
    let opened = Core::open(home, &LogProgress);
    if let Ok(core) = &opened {
        core.start_embeddings(config);
    }
    opened.map_err(|e| {
        if let CoreError::Store(StoreError::Locked { .. }) = e
            && let Some(w) = tokio::runtime::Handle::current().block_on(daemon::status(home))
        {
            let e = StoreError::HeldByDaemon {
                dir: home.to_path_buf(),
                pid: w.pid,
            };
            tracing::warn!("{e}");
            return CoreError::Store(e);
        }
        e
    })
}
