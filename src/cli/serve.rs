//! `tandem serve --http`: the daemon in the foreground with the Streamable HTTP face beside
//! its socket; and `tandem token add|list|revoke`, the face's bearer tokens.

use std::net::SocketAddr;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};

use tandem::daemon::{self, DaemonConfig, HttpFace};
use tandem::http::{self, HttpConfig};
use tandem::tokens;
use tandem_core::config::Config;
use tandem_core::core::Core;

#[derive(Args)]
pub struct ServeArgs {
    /// Serve MCP over Streamable HTTP at ADDR:PORT, path /mcp (default 127.0.0.1:7370; port
    /// 0 picks a free one). A non-loopback address needs a token (`tandem token add`).
    #[arg(long, value_name = "ADDR:PORT", num_args = 0..=1, default_missing_value = http::DEFAULT_ADDR)]
    http: Option<SocketAddr>,
    /// Also accept this Host (a name for any port, or name:port), e.g. the name a reverse
    /// proxy or the team uses. Repeatable.
    #[arg(long = "allow-host", value_name = "HOST")]
    allow_hosts: Vec<String>,
    /// Also accept requests from this browser origin (scheme://host:port). Repeatable.
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    allow_origins: Vec<String>,
    /// The largest request body, in bytes (larger ones get 413).
    #[arg(long, default_value_t = http::DEFAULT_MAX_BODY)]
    max_body: usize,
    /// Requests a minute per token (more get 429).
    #[arg(long, default_value_t = http::DEFAULT_RATE_PER_MINUTE)]
    rate_limit: u32,
    /// Connections held at once, from everyone (more are answered 503 and closed).
    #[arg(long, default_value_t = http::DEFAULT_MAX_CONNECTIONS)]
    max_connections: usize,
    /// Connections held at once from one address. Behind a reverse proxy, every client
    /// has the proxy's address: raise it, and let the proxy bound each client.
    #[arg(long, default_value_t = http::DEFAULT_MAX_CONNECTIONS_PER_PEER)]
    max_connections_per_peer: usize,
    /// The workspace the HTTP sessions track tasks in (default: the current directory's git
    /// toplevel, else the current directory).
    #[arg(long)]
    workspace: Option<std::path::PathBuf>,
}

pub fn serve(config: &Config, args: ServeArgs) -> anyhow::Result<()> {
    let Some(addr) = args.http else {
        bail!("say which face to serve: `tandem serve --http [ADDR:PORT]`");
    };
    http::check_bind(addr, &config.home)?;
    super::daemon::reexec_with_malloc_settings();
    let workspace = super::workspace_root(args.workspace)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        if let Some(w) = super::daemon::status(&config.home).await {
            bail!(
                "a daemon (pid {}) already serves {}; stop it first (`tandem daemon stop`): `tandem serve` is that daemon, with HTTP",
                w.pid,
                config.home.display()
            );
        }
        let home = config.home.clone();
        let core = tokio::task::spawn_blocking(move || Core::open(&home, &tandem_core::calls::LogProgress))
            .await??;
        core.start_embeddings(config);
        let listener = std::net::TcpListener::bind(addr)
            .with_context(|| format!("cannot listen on {addr}"))?;
        let bound = listener.local_addr()?;
        // Not a stdio protocol: the address is what the user (and a script) needs first.
        println!("tandem: serving MCP at http://{bound}{}", http::ENDPOINT);
        println!(
            "tandem: data dir {}, workspace {}",
            config.home.display(),
            workspace.display()
        );
        let face = HttpFace {
            listener,
            config: HttpConfig {
                allowed_hosts: args.allow_hosts,
                allowed_origins: args.allow_origins,
                max_body_bytes: args.max_body,
                rate_per_minute: args.rate_limit,
                max_connections: args.max_connections,
                max_connections_per_peer: args.max_connections_per_peer,
                workspace,
            },
        };
        let daemon_config = DaemonConfig {
            home: config.home.clone(),
            log_file: config.log_file(),
            idle: None,
        };
        // Without an idle time it stops only when asked.
        daemon::run(daemon_config, core, Some(face)).await?;
        anyhow::Ok(())
    })
}

#[derive(Args)]
pub struct TokenArgs {
    #[command(subcommand)]
    command: TokenCommand,
}

#[derive(Subcommand)]
enum TokenCommand {
    /// Make a token for NAME (the user its writes are recorded as); it is printed once.
    Add {
        name: String,
        /// The token may read, never write.
        #[arg(long)]
        read_only: bool,
    },
    /// The tokens: name, rights, when made (never the secret).
    List {
        #[arg(long)]
        json: bool,
    },
    /// Remove NAME's token; a running server refuses it from its next request.
    Revoke { name: String },
}

pub fn token(config: &Config, args: TokenArgs) -> anyhow::Result<()> {
    match args.command {
        TokenCommand::Add { name, read_only } => {
            let token = tokens::add(&config.home, &name, read_only)?;
            println!("{token}");
            eprintln!(
                "tandem: token '{name}'{} made; it is shown only now. Clients send it as `Authorization: Bearer <token>`.",
                if read_only { " (read-only)" } else { "" }
            );
        }
        TokenCommand::List { json } => {
            let list = tokens::list(&config.home)?;
            if json {
                let shown: Vec<_> = list
                    .iter()
                    .map(|t| serde_json::json!({"name": t.name, "read_only": t.read_only, "created": t.created}))
                    .collect();
                println!("{}", serde_json::to_string_pretty(&shown)?);
            } else if list.is_empty() {
                println!("no tokens: `tandem serve --http` serves loopback without authentication");
            } else {
                for t in list {
                    let rights = if t.read_only {
                        "read-only"
                    } else {
                        "read-write"
                    };
                    println!("{}\t{rights}\tcreated {}", t.name, t.created);
                }
            }
        }
        TokenCommand::Revoke { name } => {
            tokens::revoke(&config.home, &name)?;
            println!("token '{name}' revoked");
        }
    }
    Ok(())
}
