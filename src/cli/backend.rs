//! Where a CLI command runs: through the data dir's daemon when one runs (a `cli` session),
//! else on the core opened in this process. Either way a command is one typed call, a
//! [`calls::Method`]'s parameters in and its result out, as the same JSON, so the rendering
//! never knows which way it went. A one-off command never starts a daemon.

use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use tandem::daemon::{self, VERSION_MISMATCH};
use tandem_core::calls::{self, Method};
use tandem_core::config::Config;
use tandem_core::core::Core;
use tandem_core::core::CoreError;
use tandem_core::memory::Progress;
use tandem_core::store::StoreError;

pub enum Backend {
    /// A `cli` session with the running daemon.
    Daemon(Session),
    /// The data dir, opened here because no daemon runs.
    Local {
        core: Box<Core>,
        workspace: Option<PathBuf>,
        /// Hub calls start downstream servers and wait on them.
        runtime: tokio::runtime::Runtime,
    },
}

impl Backend {
    /// Loads the embedding model in this process when the data dir is opened here (a
    /// daemon has its own).
    pub fn start_embeddings(&self, config: &Config) {
        if let Backend::Local { core, .. } = self {
            core.start_embeddings(config);
        }
    }

    /// The running daemon, else the data dir opened in-process (with a progress bar if the
    /// index needs a rebuild). The workspace is the current directory's root, for
    /// `tasks/list`.
    pub fn open(config: &Config) -> anyhow::Result<Backend> {
        let workspace = super::workspace_root(None).ok();
        if let Some(session) = Session::connect(&config.home, workspace.clone())? {
            return Ok(Backend::Daemon(session));
        }
        match Core::open(&config.home, &BarProgress::new()) {
            Ok(core) => Ok(Backend::Local {
                core: Box::new(core),
                workspace,
                runtime: tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()?,
            }),
            // A daemon may have started between the two attempts: it holds the data dir now.
            Err(e @ CoreError::Store(StoreError::Locked { .. })) => {
                match Session::connect(&config.home, workspace)? {
                    Some(session) => Ok(Backend::Daemon(session)),
                    None => Err(e.into()),
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Runs `method` with `params`; a failure of the call is a [`CallError`].
    pub fn call<P: Serialize, R: DeserializeOwned>(
        &mut self,
        method: &Method<P, R>,
        params: &P,
    ) -> anyhow::Result<R> {
        let params = serde_json::to_value(params).expect("parameters serialise to JSON");
        let result = match self {
            Backend::Local {
                core,
                workspace,
                runtime,
            } => {
                // On this (non-worker) thread, with the runtime entered, a call may block on
                // the hub's futures.
                let _entered = runtime.enter();
                calls::call(core, workspace.as_deref(), method.name, params)?
            }
            Backend::Daemon(session) => session.call(method.name, params)?,
        };
        serde_json::from_value(result)
            .with_context(|| format!("unexpected result from {}", method.name))
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        // Downstream servers this command started stop on the runtime, before it goes.
        if let Backend::Local { core, runtime, .. } = self {
            let _entered = runtime.enter();
            core.hub.shutdown();
        }
    }
}

/// A `cli` session: JSON-RPC requests, one at a time, over the daemon's socket.
pub struct Session {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    next_id: u64,
    pid: u32,
}

impl Session {
    /// Opens a session with the daemon of `home`; `None` when no daemon answers.
    fn connect(home: &Path, workspace: Option<PathBuf>) -> anyhow::Result<Option<Session>> {
        let hello = daemon::hello("cli", workspace, None);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let connected = runtime.block_on(async {
            let (stream, welcome) = daemon::connect(home, &hello).await?;
            // The welcome was read byte by byte: nothing of the session is buffered.
            Ok::<_, std::io::Error>((stream.into_std()?, welcome))
        });
        let Ok((stream, welcome)) = connected else {
            return Ok(None);
        };
        if !welcome.ok {
            let error = welcome.error.unwrap_or_default();
            if error.starts_with(VERSION_MISMATCH) {
                bail!(
                    "the running tandem daemon (pid {}) is version {}, this tandem is {}: stop it with `tandem daemon stop`, then run this again",
                    welcome.pid,
                    welcome.version,
                    env!("CARGO_PKG_VERSION")
                );
            }
            bail!(
                "the tandem daemon (pid {}) refused the session: {error}",
                welcome.pid
            );
        }
        stream.set_nonblocking(false)?;
        tracing::debug!("running through the daemon (pid {})", welcome.pid);
        Ok(Some(Session {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
            next_id: 1,
            pid: welcome.pid,
        }))
    }

    fn call(&mut self, method: &str, params: Value) -> anyhow::Result<Value> {
        let id = self.next_id;
        self.next_id += 1;
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let mut line = serde_json::to_vec(&request)?;
        line.push(b'\n');
        let lost = || format!("lost the tandem daemon (pid {}) during {method}", self.pid);
        self.writer.write_all(&line).with_context(lost)?;
        let mut answer = String::new();
        if self.reader.read_line(&mut answer).with_context(lost)? == 0 {
            bail!("{}: see the daemon's log", lost());
        }
        let mut answer: Value = serde_json::from_str(&answer).with_context(lost)?;
        if answer["id"] != json!(id) {
            bail!(
                "the daemon answered request {} to request {id}",
                answer["id"]
            );
        }
        if let Some(error) = answer.get("error") {
            // The spec's error object, else the JSON-RPC error itself.
            let spec = &error["data"]["error"];
            let text = |v: &Value, or: &str| v.as_str().unwrap_or(or).to_string();
            return Err(RemoteError {
                code: text(&spec["code"], "INTERNAL_ERROR"),
                message: text(&spec["message"], error["message"].as_str().unwrap_or("")),
            }
            .into());
        }
        Ok(answer["result"].take())
    }
}

/// A call's failure as the daemon told it: what `tandem: message (CODE)` prints.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct RemoteError {
    pub code: String,
    pub message: String,
}

/// A progress bar on stderr for index rebuilds (hidden when stderr is not a terminal).
struct BarProgress {
    bar: ProgressBar,
}

impl BarProgress {
    fn new() -> BarProgress {
        BarProgress {
            bar: ProgressBar::hidden(),
        }
    }
}

impl Progress for BarProgress {
    fn start(&self, total: u64, reason: &str) {
        if std::io::stderr().is_terminal() {
            self.bar
                .set_draw_target(indicatif::ProgressDrawTarget::stderr());
        }
        self.bar.set_length(total);
        self.bar.set_style(
            ProgressStyle::with_template("indexing {bar:30} {pos}/{len} entries ({msg})")
                .expect("valid template"),
        );
        self.bar.set_message(reason.to_string());
    }
    fn advance(&self, done: u64) {
        self.bar.set_position(done);
    }
    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
