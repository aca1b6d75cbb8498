//! Where Tandem keeps its data, and how it logs.
//!
//! The library never reads the environment by itself except through [`Config::from_env`],
//! which the binary calls once.

use std::path::{Path, PathBuf};

use tracing_subscriber::EnvFilter;

use crate::log_file::{RotatingFile, Rotation};

/// The environment variable that names the data dir.
pub const HOME_ENV: &str = "TANDEM_HOME";
/// The environment variable that holds the log filter (`tracing` directives).
pub const LOG_ENV: &str = "TANDEM_LOG";
/// The environment variable that sets the embedding model (over the config file's
/// `memory.embeddings.model`): `off`, a folder, or a Hugging Face id.
pub const EMBEDDING_MODEL_ENV: &str = "TANDEM_EMBEDDING_MODEL";
/// The environment variable naming the Hugging Face hub (a mirror), as `huggingface_hub`
/// reads it.
pub const HF_ENDPOINT_ENV: &str = "HF_ENDPOINT";

/// Resolved settings of one Tandem process.
#[derive(Debug, Clone)]
pub struct Config {
    /// The data dir: sled database, search index, logs, lock.
    pub home: PathBuf,
    /// The `tracing` filter for the log file, e.g. `info` or `tandem=debug`.
    pub log_filter: String,
    /// The embedding model setting from the environment, when set (it wins over the config
    /// file; see `memory::model_source`).
    pub embedding_model: Option<String>,
    /// The Hugging Face hub to download models from, when the environment names one;
    /// `None`: `https://huggingface.co`.
    pub hf_endpoint: Option<String>,
    /// The user's home dir (for `~/` in settings), when known.
    pub user_home: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("no data dir: set {HOME_ENV}, or HOME so the platform data dir can be found")]
    NoHome,
}

impl Config {
    /// `$TANDEM_HOME`, else the platform data dir (`~/.local/share/tandem` on Linux).
    pub fn from_env() -> Result<Config, ConfigError> {
        let home = match std::env::var_os(HOME_ENV) {
            Some(dir) if !dir.is_empty() => PathBuf::from(dir),
            _ => directories::ProjectDirs::from("", "", "tandem")
                .map(|d| d.data_dir().to_path_buf())
                .ok_or(ConfigError::NoHome)?,
        };
        let log_filter = std::env::var(LOG_ENV).unwrap_or_else(|_| "info".to_string());
        // An empty variable is an unset one.
        let set = |name| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        Ok(Config {
            home,
            log_filter,
            embedding_model: set(EMBEDDING_MODEL_ENV),
            hf_endpoint: set(HF_ENDPOINT_ENV),
            user_home: directories::BaseDirs::new().map(|d| d.home_dir().to_path_buf()),
        })
    }

    pub fn log_dir(&self) -> PathBuf {
        self.home.join("logs")
    }

    pub fn log_file(&self) -> PathBuf {
        self.log_dir().join("tandem.log")
    }
}

/// Sends `tracing` output to the log file in the data dir (appending, rotated by size:
/// [`Rotation::LOG`]), never to stdout. Returns the path written to. A bad filter falls back
/// to `info` and says so in the log.
pub fn init_logging(config: &Config) -> std::io::Result<PathBuf> {
    let dir = config.log_dir();
    crate::store::create_private_dir(&config.home)?;
    std::fs::create_dir_all(&dir)?;
    let path = config.log_file();
    let file = RotatingFile::open(&path, Rotation::LOG)?;
    let (filter, bad) = match EnvFilter::try_new(&config.log_filter) {
        Ok(f) => (f, None),
        Err(e) => (EnvFilter::new("info"), Some(e)),
    };
    // At info, rmcp logs each HTTP session's id as it opens one (whoever holds an id
    // speaks in that session) and each client's `clientInfo` whole (as long as a body may
    // be). So rmcp logs from warn, unless the filter names it.
    let filter = if config.log_filter.contains("rmcp") {
        filter
    } else {
        filter.add_directive("rmcp=warn".parse().expect("a valid directive"))
    };
    // rmcp's transport worker logs its failure with the URL it requested, which may carry
    // a credential from the environment; the hub logs the same failure with the URL as the
    // config file has it.
    let filter = filter.add_directive(
        "rmcp::transport::worker=off"
            .parse()
            .expect("a valid directive"),
    );
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(file)
        .finish();
    // A second init in one process (tests) keeps the first subscriber.
    let _ = tracing::subscriber::set_global_default(subscriber);
    if let Some(e) = bad {
        tracing::warn!(
            "{LOG_ENV}={:?} is not a valid filter ({e}); using info",
            config.log_filter
        );
    }
    Ok(path)
}

/// A workspace is a canonical root: the git toplevel of `dir` where there is one, else `dir`
/// itself (canonical when it exists).
pub fn workspace_root(dir: &Path) -> PathBuf {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    match crate::tasks::git::discover(&dir) {
        Some(repo) => crate::tasks::git::workdir(&repo),
        None => dir,
    }
}
