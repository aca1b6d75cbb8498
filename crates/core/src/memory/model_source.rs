//! Where the embedding model comes from (issue 12): the setting, the cache of downloaded
//! models in the data dir, and the download from the Hugging Face hub.
//!
//! The setting is `TANDEM_EMBEDDING_MODEL` (as [`Config::embedding_model`]), else the user's
//! `config.json` key `memory.embeddings.model`, else [`DEFAULT_MODEL`]. It is `off`, a folder
//! holding a model2vec model, or a Hugging Face id (`owner/name`), whose three files are
//! downloaded on first use into `<data dir>/models/<owner>--<name>/`.
//!
//! A download goes to a temp folder beside the cache; only when every file arrived whole
//! and the model loads is it renamed into place, so a folder in the cache is a whole model.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde_json::Value;

use super::MemoryError;
use crate::config::{Config, EMBEDDING_MODEL_ENV};
use crate::user_config;
use tandem_search::embeddings::{CONFIG_FILE, EmbedError, Embedder, MODEL_FILE, TOKENIZER_FILE};

/// The model used when nothing is set: model2vec's general-purpose English model (256
/// dimensions, about 30 MB).
pub const DEFAULT_MODEL: &str = "minishlab/potion-base-8M";
/// The Hugging Face hub, unless `HF_ENDPOINT` names a mirror.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";
/// The key of the user's config file that holds the setting.
pub const SETTING_KEY: &str = "memory.embeddings.model";
/// The folder of the data dir that holds downloaded models.
pub const MODELS_DIR: &str = "models";
/// The files of a model, in the order they are downloaded.
pub const MODEL_FILES: [&str; 3] = [CONFIG_FILE, TOKENIZER_FILE, MODEL_FILE];

/// How long a connection to the hub may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a download may wait for its next bytes.
const READ_TIMEOUT: Duration = Duration::from_secs(60);
/// A download in progress: `.download-<owner>--<name>-<pid>-<nanos>` in the models folder.
const DOWNLOAD_PREFIX: &str = ".download-";
/// A model replaced by `--force`, removed once the new one is in place.
const REPLACED_PREFIX: &str = ".replaced-";
/// Temp folders older than this are left over from a killed process, and removed.
const STALE_AFTER: Duration = Duration::from_secs(24 * 3600);

/// What a setting may be, for error messages.
const ACCEPTED: &str = "'off', a folder (an absolute path, or one starting with ./, ../ or ~/) \
                        or a Hugging Face model id (owner/name)";

/// The embedding model setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSetting {
    /// No embeddings: search is lexical only.
    Off,
    /// A model2vec model in this folder (absolute).
    Folder(PathBuf),
    /// A model on the Hugging Face hub, `owner/name`, downloaded into the data dir.
    Hub(String),
}

/// A setting that is none of the accepted forms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "'{value}' is not an embedding model setting{}; expected {ACCEPTED}",
    reason.map(|r| format!(" ({r})")).unwrap_or_default()
)]
pub struct ParseSettingError {
    pub value: String,
    /// What is wrong with it, when it looks like an attempt at one form.
    pub reason: Option<&'static str>,
}

impl ModelSetting {
    /// Reads a setting as a user writes it: `off` (any case); an absolute path, or one
    /// starting with `./` or `../` (taken from `base`) or `~/` (`user_home`), as a folder;
    /// `owner/name` as a Hugging Face id. Surrounding blanks are ignored.
    pub fn parse(
        value: &str,
        base: &Path,
        user_home: Option<&Path>,
    ) -> Result<ModelSetting, ParseSettingError> {
        let v = value.trim();
        let invalid = |reason| ParseSettingError {
            value: value.to_string(),
            reason,
        };
        if v.eq_ignore_ascii_case("off") {
            return Ok(ModelSetting::Off);
        }
        if let Some(rest) = v.strip_prefix("~/") {
            let home = user_home.ok_or_else(|| invalid(Some("no home dir is known for ~/")))?;
            return Ok(ModelSetting::Folder(lexical(&home.join(rest))));
        }
        if v.starts_with("./") || v.starts_with("../") {
            return Ok(ModelSetting::Folder(lexical(&base.join(v))));
        }
        if Path::new(v).is_absolute() {
            return Ok(ModelSetting::Folder(lexical(Path::new(v))));
        }
        match hub_id_problem(v) {
            None => Ok(ModelSetting::Hub(v.to_string())),
            Some(reason) => Err(invalid(Some(reason))),
        }
    }

    pub fn is_off(&self) -> bool {
        matches!(self, ModelSetting::Off)
    }
}

/// The setting as a user writes it (a folder as its absolute path).
impl fmt::Display for ModelSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelSetting::Off => f.write_str("off"),
            ModelSetting::Folder(path) => write!(f, "{}", path.display()),
            ModelSetting::Hub(id) => f.write_str(id),
        }
    }
}

/// `a/./b` is `a/b`; `..` is kept (a symlink may stand before it).
fn lexical(path: &Path) -> PathBuf {
    path.components().collect()
}

/// Why `id` is not a Hugging Face id (`owner/name` of letters, digits, `.`, `_`, `-`;
/// neither part starting or ending with `.` or `-`, no `--` or `..`, as the hub's own
/// rules say), or `None` when it is one. `--` being excluded keeps the cache's
/// `<owner>--<name>` folder names apart.
fn hub_id_problem(id: &str) -> Option<&'static str> {
    if id.is_empty() {
        return Some("it is empty");
    }
    let Some((owner, name)) = id.split_once('/') else {
        return Some("a Hugging Face id is owner/name");
    };
    if name.contains('/') {
        return Some("a Hugging Face id has one '/'");
    }
    for part in [owner, name] {
        if part.is_empty() {
            return Some("a Hugging Face id is owner/name");
        }
        if !part
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        {
            return Some("a Hugging Face id has only letters, digits, '.', '_' and '-'");
        }
        if part.contains("--") || part.contains("..") {
            return Some("a Hugging Face id has no '--' or '..'");
        }
        if part.starts_with(['.', '-']) || part.ends_with(['.', '-']) {
            return Some("a Hugging Face id's parts do not start or end with '.' or '-'");
        }
    }
    None
}

/// Where a setting came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettingSource {
    /// `TANDEM_EMBEDDING_MODEL`.
    Env,
    /// `memory.embeddings.model` in this file (the user's `config.json`).
    File(PathBuf),
    /// Nothing set: [`DEFAULT_MODEL`].
    Default,
    /// Given to a command (`tandem memory model pull ID`).
    Argument,
}

impl SettingSource {
    /// A short name: `env`, `config_file`, `default`, `argument`.
    pub fn name(&self) -> &'static str {
        match self {
            SettingSource::Env => "env",
            SettingSource::File(_) => "config_file",
            SettingSource::Default => "default",
            SettingSource::Argument => "argument",
        }
    }
}

impl fmt::Display for SettingSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SettingSource::Env => f.write_str(EMBEDDING_MODEL_ENV),
            SettingSource::File(path) => write!(f, "{SETTING_KEY} in {}", path.display()),
            SettingSource::Default => f.write_str("the default"),
            SettingSource::Argument => f.write_str("the command line"),
        }
    }
}

/// The setting in force and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub setting: ModelSetting,
    pub source: SettingSource,
}

impl Resolved {
    /// Where the model's files are, or go once downloaded; `None` when off.
    pub fn folder(&self, home: &Path) -> Option<PathBuf> {
        match &self.setting {
            ModelSetting::Off => None,
            ModelSetting::Folder(path) => Some(path.clone()),
            ModelSetting::Hub(id) => Some(cache_folder(home, id)),
        }
    }
}

/// Why the model could not be found, read or downloaded.
#[derive(Debug, thiserror::Error)]
pub enum ModelSourceError {
    #[error("{from}: {error}")]
    InvalidSetting {
        from: SettingSource,
        #[source]
        error: ParseSettingError,
    },

    /// The user's config file cannot be read, is not JSON, or has the key of another type.
    #[error("{}: {reason}", path.display())]
    ConfigFile { path: PathBuf, reason: String },

    #[error("the embedding model folder {} ({from}) does not exist", path.display())]
    FolderMissing { path: PathBuf, from: SettingSource },

    #[error("no model '{id}' at {endpoint} (check the id): {url}")]
    NotFound {
        id: String,
        endpoint: String,
        url: String,
    },

    #[error(
        "the model '{id}' at {endpoint} has no {file} (a model2vec model has {}): {url}",
        MODEL_FILES.join(", ")
    )]
    MissingFile {
        id: String,
        endpoint: String,
        file: &'static str,
        url: String,
    },

    #[error("downloading '{id}' failed: {url} answered {status}")]
    Status {
        id: String,
        url: String,
        status: String,
    },

    #[error("downloading '{id}' failed: cannot get {url}: {cause}")]
    Network {
        id: String,
        url: String,
        cause: String,
    },

    #[error("downloading '{id}' failed: {url} stopped after {got} of {expected} bytes{}",
        cause.as_deref().map(|c| format!(" ({c})")).unwrap_or_default())]
    Truncated {
        id: String,
        url: String,
        got: u64,
        expected: u64,
        cause: Option<String>,
    },

    /// The files arrived but do not make a model.
    #[error("the download of '{id}' is not a usable model: {source}")]
    Broken {
        id: String,
        #[source]
        source: EmbedError,
    },

    #[error("cannot write {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl ModelSourceError {
    /// The model the error is about, as the user named it.
    pub fn model(&self) -> String {
        match self {
            ModelSourceError::InvalidSetting { error, .. } => error.value.clone(),
            ModelSourceError::ConfigFile { .. } => SETTING_KEY.to_string(),
            ModelSourceError::FolderMissing { path, .. } => path.display().to_string(),
            ModelSourceError::NotFound { id, .. }
            | ModelSourceError::MissingFile { id, .. }
            | ModelSourceError::Status { id, .. }
            | ModelSourceError::Network { id, .. }
            | ModelSourceError::Truncated { id, .. }
            | ModelSourceError::Broken { id, .. } => id.clone(),
            ModelSourceError::Io { path, .. } => path.display().to_string(),
        }
    }
}

/// Every failure to find or fetch the model is `MODEL_NOT_AVAILABLE`. (A model that is
/// `off` is not an error here: where one is needed, that is
/// [`MemoryError::EmbeddingsDisabled`].)
impl From<ModelSourceError> for MemoryError {
    fn from(e: ModelSourceError) -> MemoryError {
        MemoryError::ModelNotAvailable {
            model: e.model(),
            reason: e.to_string(),
        }
    }
}

/// The setting in force: `TANDEM_EMBEDDING_MODEL`, else `memory.embeddings.model` in the
/// user's config file, else [`DEFAULT_MODEL`]. A relative folder is taken from the current
/// directory for the variable, from the data dir (the file's folder) for the file. A
/// missing file or key is no error; a file that is not JSON, or a key that is not a
/// string, is one.
pub fn resolve(config: &Config) -> Result<Resolved, ModelSourceError> {
    let (value, source, base) = if let Some(value) = &config.embedding_model {
        let cwd = std::env::current_dir().unwrap_or_else(|_| config.home.clone());
        (value.clone(), SettingSource::Env, cwd)
    } else {
        let file = user_config::path(&config.home);
        match read_setting(&file)? {
            Some(value) => (value, SettingSource::File(file), config.home.clone()),
            None => {
                return Ok(Resolved {
                    setting: ModelSetting::Hub(DEFAULT_MODEL.to_string()),
                    source: SettingSource::Default,
                });
            }
        }
    };
    match ModelSetting::parse(&value, &base, config.user_home.as_deref()) {
        Ok(setting) => Ok(Resolved { setting, source }),
        Err(error) => Err(ModelSourceError::InvalidSetting {
            from: source,
            error,
        }),
    }
}

/// `memory.embeddings.model` of the config file `file`, when it is there.
fn read_setting(file: &Path) -> Result<Option<String>, ModelSourceError> {
    let problem = |reason: String| ModelSourceError::ConfigFile {
        path: file.to_path_buf(),
        reason,
    };
    let bytes = match user_config::read(file) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Ok(None),
        Err(e) => return Err(problem(e.problem.to_string())),
    };
    let root: Value = serde_json::from_slice(&bytes).map_err(|e| {
        problem(format!(
            "not valid JSON ({e}); {SETTING_KEY} cannot be read"
        ))
    })?;
    let mut at = &root;
    let mut path = String::new();
    for key in SETTING_KEY.split('.') {
        let Value::Object(members) = at else {
            let what = if path.is_empty() {
                "the file".to_string()
            } else {
                format!("`{path}`")
            };
            return Err(problem(format!(
                "{what} must be a JSON object to hold {SETTING_KEY}, found {}",
                json_kind(at)
            )));
        };
        match members.get(key) {
            Some(value) => at = value,
            None => return Ok(None),
        }
        path = if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        };
    }
    match at {
        Value::String(s) => Ok(Some(s.clone())),
        other => Err(problem(format!(
            "`{SETTING_KEY}` must be a string ({ACCEPTED}), found {}",
            json_kind(other)
        ))),
    }
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The hub models are downloaded from: `HF_ENDPOINT` (as [`Config::hf_endpoint`]), else
/// [`DEFAULT_ENDPOINT`]; no trailing `/`.
pub fn endpoint(config: &Config) -> String {
    config
        .hf_endpoint
        .as_deref()
        .unwrap_or(DEFAULT_ENDPOINT)
        .trim()
        .trim_end_matches('/')
        .to_string()
}

/// The folder of the data dir `home` that holds downloaded models.
pub fn models_dir(home: &Path) -> PathBuf {
    home.join(MODELS_DIR)
}

/// Where the hub model `id` (`owner/name`) lives once downloaded:
/// `<home>/models/<owner>--<name>`.
pub fn cache_folder(home: &Path, id: &str) -> PathBuf {
    models_dir(home).join(id.replacen('/', "--", 1))
}

/// The folder of the hub model `id` when it is downloaded (its three files are there).
pub fn cached(home: &Path, id: &str) -> Option<PathBuf> {
    let folder = cache_folder(home, id);
    MODEL_FILES
        .iter()
        .all(|file| folder.join(file).is_file())
        .then_some(folder)
}

/// The model's folder, as the background loader wants it: `None` when off; the folder of
/// a folder setting (which must exist); a hub model's cached folder, downloaded first when
/// it is not there yet ("downloaded on first use"). Blocks: call it from a thread that may
/// (not a tokio worker).
pub fn locate_or_pull(
    config: &Config,
    progress: &dyn Fn(PullProgress),
) -> Result<Option<PathBuf>, ModelSourceError> {
    let Resolved { setting, source } = resolve(config)?;
    match setting {
        ModelSetting::Off => Ok(None),
        ModelSetting::Folder(path) if path.is_dir() => Ok(Some(path)),
        ModelSetting::Folder(path) => Err(ModelSourceError::FolderMissing { path, from: source }),
        ModelSetting::Hub(id) => match cached(&config.home, &id) {
            Some(folder) => Ok(Some(folder)),
            None => pull(&id, &config.home, &endpoint(config), progress).map(Some),
        },
    }
}

/// How far a download is: `done` bytes of `file`, of `total` when the server said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PullProgress {
    pub file: &'static str,
    /// Which of the [`MODEL_FILES`] this is (0-based).
    pub index: usize,
    pub done: u64,
    pub total: Option<u64>,
}

/// Downloads the hub model `id` (`owner/name`) from `endpoint`
/// (`{endpoint}/{id}/resolve/main/{file}` for each of [`MODEL_FILES`]) into the data dir
/// `home`, replacing a cached copy, and returns its folder. The files go to a temp folder
/// first; each must be as long as the server said, and the model must load, before it is
/// renamed into place: an error leaves the cache as it was. `progress` hears of every chunk.
/// Blocks (on a small runtime of its own): call it from a thread that may.
pub fn pull(
    id: &str,
    home: &Path,
    endpoint: &str,
    progress: &dyn Fn(PullProgress),
) -> Result<PathBuf, ModelSourceError> {
    if let Some(reason) = hub_id_problem(id) {
        return Err(ModelSourceError::InvalidSetting {
            from: SettingSource::Argument,
            error: ParseSettingError {
                value: id.to_string(),
                reason: Some(reason),
            },
        });
    }
    let endpoint = endpoint.trim().trim_end_matches('/');
    let models = models_dir(home);
    fs::create_dir_all(&models).map_err(|source| ModelSourceError::Io {
        path: models.clone(),
        source,
    })?;
    remove_stale(&models);
    let target = cache_folder(home, id);
    let temp = TempFolder::create(&models, DOWNLOAD_PREFIX, id)?;
    tracing::info!(model = id, endpoint, "downloading the embedding model");
    download_all(id, endpoint, &temp.path, progress)?;
    let embedder = Embedder::load(&temp.path).map_err(|source| ModelSourceError::Broken {
        id: id.to_string(),
        source,
    })?;
    install(temp, &target)?;
    tracing::info!(
        model = id,
        folder = %target.display(),
        dimensions = embedder.dimensions(),
        "embedding model downloaded"
    );
    Ok(target)
}

/// A folder of the models dir removed when dropped, unless kept.
struct TempFolder {
    path: PathBuf,
    keep: bool,
}

impl TempFolder {
    fn create(models: &Path, prefix: &str, id: &str) -> Result<TempFolder, ModelSourceError> {
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let path = models.join(format!(
            "{prefix}{}-{}-{nanos}",
            id.replacen('/', "--", 1),
            std::process::id()
        ));
        fs::create_dir(&path).map_err(|source| ModelSourceError::Io {
            path: path.clone(),
            source,
        })?;
        Ok(TempFolder { path, keep: false })
    }
}

impl Drop for TempFolder {
    fn drop(&mut self) {
        if !self.keep
            && let Err(e) = fs::remove_dir_all(&self.path)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!("cannot remove {}: {e}", self.path.display());
        }
    }
}

/// Renames the downloaded model into `target`; a model already there (`--force`) is moved
/// aside first and removed after. If another process put the model there meanwhile, its
/// copy stays and this one goes.
fn install(mut temp: TempFolder, target: &Path) -> Result<(), ModelSourceError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ModelSourceError::Io { path, source }
    };
    let models = target
        .parent()
        .expect("a cache folder is in the models dir");
    let aside = if target.exists() {
        let aside = TempFolder {
            path: temp.path.with_file_name(
                temp.path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or_default()
                    .replacen(DOWNLOAD_PREFIX, REPLACED_PREFIX, 1),
            ),
            keep: false,
        };
        fs::rename(target, &aside.path).map_err(io(target))?;
        Some(aside)
    } else {
        None
    };
    match fs::rename(&temp.path, target) {
        Ok(()) => temp.keep = true,
        Err(_) if aside.is_none() && cached_folder_complete(target) => {
            tracing::info!(
                "{} was downloaded by another process meanwhile; keeping it",
                target.display()
            );
        }
        Err(e) => {
            if let Some(mut aside) = aside
                && fs::rename(&aside.path, target).is_ok()
            {
                aside.keep = true;
            }
            return Err(io(target)(e));
        }
    }
    // The new folder's name is durable before the old one goes.
    if let Ok(dir) = fs::File::open(models) {
        let _ = dir.sync_all();
    }
    drop(aside);
    Ok(())
}

fn cached_folder_complete(folder: &Path) -> bool {
    MODEL_FILES.iter().all(|file| folder.join(file).is_file())
}

/// Removes temp folders a killed download or replacement left, a day after.
fn remove_stale(models: &Path) {
    let Ok(entries) = fs::read_dir(models) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if !(name.starts_with(DOWNLOAD_PREFIX) || name.starts_with(REPLACED_PREFIX)) {
            continue;
        }
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > STALE_AFTER);
        if old {
            tracing::info!("removing {}, left by a download", entry.path().display());
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

/// The three files into `dir`, one after the other.
fn download_all(
    id: &str,
    endpoint: &str,
    dir: &Path,
    progress: &dyn Fn(PullProgress),
) -> Result<(), ModelSourceError> {
    // TLS is rustls with ring, as for the hub's HTTP servers (installing it twice is fine).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| ModelSourceError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
    runtime.block_on(async {
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(READ_TIMEOUT)
            .user_agent(concat!("tandem/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ModelSourceError::Network {
                id: id.to_string(),
                url: endpoint.to_string(),
                cause: error_chain(&e),
            })?;
        for (index, file) in MODEL_FILES.into_iter().enumerate() {
            let download = Download {
                client: &client,
                id,
                endpoint,
                file,
                index,
                url: format!("{endpoint}/{id}/resolve/main/{file}"),
            };
            download.to(&dir.join(file), progress).await?;
        }
        Ok(())
    })
}

/// One file of a model to download.
struct Download<'a> {
    client: &'a reqwest::Client,
    id: &'a str,
    endpoint: &'a str,
    file: &'static str,
    index: usize,
    url: String,
}

impl Download<'_> {
    async fn to(
        &self,
        path: &Path,
        progress: &dyn Fn(PullProgress),
    ) -> Result<(), ModelSourceError> {
        use std::io::Write;

        let mut response = self
            .client
            .get(&self.url)
            .send()
            .await
            .map_err(|e| self.network(&e))?;
        self.check_status(&response)?;
        let total = response.content_length();
        let report = |done| {
            progress(PullProgress {
                file: self.file,
                index: self.index,
                done,
                total,
            })
        };
        let io = |source| ModelSourceError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut out = std::io::BufWriter::new(fs::File::create(path).map_err(io)?);
        let mut done = 0u64;
        report(done);
        loop {
            let chunk = match response.chunk().await {
                Ok(Some(chunk)) => chunk,
                Ok(None) => break,
                Err(e) => {
                    return Err(match total {
                        Some(expected) => self.truncated(done, expected, Some(error_chain(&e))),
                        None => self.network(&e),
                    });
                }
            };
            out.write_all(&chunk).map_err(io)?;
            done += chunk.len() as u64;
            report(done);
        }
        if let Some(expected) = total
            && done != expected
        {
            return Err(self.truncated(done, expected, None));
        }
        let out = out.into_inner().map_err(|e| io(e.into_error()))?;
        out.sync_all().map_err(io)?;
        Ok(())
    }

    /// A failed answer: 404 on the first file (or the hub's `RepositoryNotFound`, which it
    /// answers 401 to anonymous clients) is an unknown model; 404 on another file (or
    /// `EntryNotFound`) a model without that file.
    fn check_status(&self, response: &reqwest::Response) -> Result<(), ModelSourceError> {
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        let hub_code = response
            .headers()
            .get("x-error-code")
            .and_then(|v| v.to_str().ok());
        let not_found = status == reqwest::StatusCode::NOT_FOUND;
        if hub_code == Some("RepositoryNotFound")
            || (not_found && hub_code.is_none() && self.index == 0)
        {
            return Err(ModelSourceError::NotFound {
                id: self.id.to_string(),
                endpoint: self.endpoint.to_string(),
                url: self.url.clone(),
            });
        }
        if not_found {
            return Err(ModelSourceError::MissingFile {
                id: self.id.to_string(),
                endpoint: self.endpoint.to_string(),
                file: self.file,
                url: self.url.clone(),
            });
        }
        let mut status = status.to_string();
        if let Some(code) = hub_code {
            status.push_str(&format!(" ({code})"));
        }
        Err(ModelSourceError::Status {
            id: self.id.to_string(),
            url: self.url.clone(),
            status,
        })
    }

    fn network(&self, e: &reqwest::Error) -> ModelSourceError {
        ModelSourceError::Network {
            id: self.id.to_string(),
            url: self.url.clone(),
            cause: error_chain(e),
        }
    }

    fn truncated(&self, got: u64, expected: u64, cause: Option<String>) -> ModelSourceError {
        ModelSourceError::Truncated {
            id: self.id.to_string(),
            url: self.url.clone(),
            got,
            expected,
            cause,
        }
    }
}

/// An error and its causes, `a: b: c`, without the URL reqwest repeats.
fn error_chain(e: &reqwest::Error) -> String {
    let mut parts = Vec::new();
    let mut source = std::error::Error::source(e);
    let head = match e.url() {
        Some(url) => e
            .to_string()
            .replace(&format!(" for url ({url})"), "")
            .replace(&format!(" ({url})"), ""),
        None => e.to_string(),
    };
    parts.push(head);
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = s.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(home: &Path) -> Config {
        Config {
            home: home.to_path_buf(),
            log_filter: "info".into(),
            embedding_model: None,
            hf_endpoint: None,
            user_home: Some(PathBuf::from("/home/u")),
        }
    }

    #[test]
    fn settings_parse_as_written_and_print_back() {
        let base = Path::new("/data/tandem");
        let home = Some(Path::new("/home/u"));
        let folder = |p: &str| Ok(ModelSetting::Folder(PathBuf::from(p)));
        let hub = |id: &str| Ok(ModelSetting::Hub(id.to_string()));
        let cases: &[(&str, Result<ModelSetting, Option<&str>>)] = &[
            ("off", Ok(ModelSetting::Off)),
            ("OFF", Ok(ModelSetting::Off)),
            (" Off ", Ok(ModelSetting::Off)),
            ("/opt/models/potion", folder("/opt/models/potion")),
            ("/opt/./models/", folder("/opt/models")),
            ("./models/mine", folder("/data/tandem/models/mine")),
            ("../shared/model", folder("/data/tandem/../shared/model")),
            ("~/models/potion", folder("/home/u/models/potion")),
            ("minishlab/potion-base-8M", hub("minishlab/potion-base-8M")),
            ("a.b_c-d/e.f_g-h", hub("a.b_c-d/e.f_g-h")),
            ("", Err(Some("it is empty"))),
            (
                "potion-base-8M",
                Err(Some("a Hugging Face id is owner/name")),
            ),
            ("a/b/c", Err(Some("a Hugging Face id has one '/'"))),
            ("/", folder("/")),
            ("owner/", Err(Some("a Hugging Face id is owner/name"))),
            ("/name", folder("/name")),
            (
                "own er/name",
                Err(Some(
                    "a Hugging Face id has only letters, digits, '.', '_' and '-'",
                )),
            ),
            ("a--b/c", Err(Some("a Hugging Face id has no '--' or '..'"))),
            ("a/b..c", Err(Some("a Hugging Face id has no '--' or '..'"))),
            (
                "-a/b",
                Err(Some(
                    "a Hugging Face id's parts do not start or end with '.' or '-'",
                )),
            ),
            (
                "a/b.",
                Err(Some(
                    "a Hugging Face id's parts do not start or end with '.' or '-'",
                )),
            ),
            ("~", Err(Some("a Hugging Face id is owner/name"))),
            ("models", Err(Some("a Hugging Face id is owner/name"))),
        ];
        for (value, want) in cases {
            let got = ModelSetting::parse(value, base, home);
            let want = want.clone().map_err(|reason| ParseSettingError {
                value: value.to_string(),
                reason,
            });
            assert_eq!(got, want, "{value:?}");
            // What prints back parses to the same setting.
            if let Ok(setting) = got {
                let again = ModelSetting::parse(&setting.to_string(), Path::new("/else"), None);
                assert_eq!(again.as_ref(), Ok(&setting), "{value:?} → {setting}");
            }
        }
        assert_eq!(
            ModelSetting::parse("~/m", base, None).unwrap_err().reason,
            Some("no home dir is known for ~/")
        );
        assert_eq!(
            ModelSetting::parse("potion", base, home)
                .unwrap_err()
                .to_string(),
            "'potion' is not an embedding model setting (a Hugging Face id is owner/name); \
             expected 'off', a folder (an absolute path, or one starting with ./, ../ or ~/) \
             or a Hugging Face model id (owner/name)"
        );
    }

    #[test]
    fn the_variable_wins_over_the_file_which_wins_over_the_default() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path();
        let mut c = config(home);
        let default = resolve(&c).unwrap();
        assert_eq!(default.setting, ModelSetting::Hub(DEFAULT_MODEL.into()));
        assert_eq!(default.source, SettingSource::Default);
        assert_eq!(
            default.folder(home),
            Some(home.join("models/minishlab--potion-base-8M"))
        );

        let file = home.join("config.json");
        let write = |text: &str| fs::write(&file, text).unwrap();
        // The hub's keys and no memory key; a memory key without the setting.
        write(r#"{"mcpServers": {}}"#);
        assert_eq!(resolve(&c).unwrap().source, SettingSource::Default);
        write(r#"{"memory": {"other": 1}}"#);
        assert_eq!(resolve(&c).unwrap().source, SettingSource::Default);
        write(r#"{"memory": {"embeddings": {}}}"#);
        assert_eq!(resolve(&c).unwrap().source, SettingSource::Default);

        write(r#"{"mcpServers": {}, "memory": {"embeddings": {"model": "./mine"}}}"#);
        let from_file = resolve(&c).unwrap();
        assert_eq!(from_file.setting, ModelSetting::Folder(home.join("mine")));
        assert_eq!(from_file.source, SettingSource::File(file.clone()));
        assert_eq!(
            from_file.source.to_string(),
            format!("memory.embeddings.model in {}", file.display())
        );

        c.embedding_model = Some("OFF".into());
        let from_env = resolve(&c).unwrap();
        assert_eq!(from_env.setting, ModelSetting::Off);
        assert_eq!(from_env.source, SettingSource::Env);
        assert_eq!(from_env.folder(home), None);
        assert_eq!(locate_or_pull(&c, &|_| {}).unwrap(), None);

        // The variable wins even over a broken file.
        write("{not json");
        assert_eq!(resolve(&c).unwrap().source, SettingSource::Env);
        c.embedding_model = Some("nonsense".into());
        let err = resolve(&c).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("TANDEM_EMBEDDING_MODEL: 'nonsense' is not an embedding model"),
            "{err}"
        );
    }

    #[test]
    fn a_broken_config_file_names_the_file_and_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let c = config(dir.path());
        let file = dir.path().join("config.json");
        let cases = [
            ("{not json", "not valid JSON"),
            (
                "[1]",
                "the file must be a JSON object to hold memory.embeddings.model, found an array",
            ),
            (
                r#"{"memory": "x"}"#,
                "`memory` must be a JSON object to hold memory.embeddings.model, found a string",
            ),
            (
                r#"{"memory": {"embeddings": {"model": 3}}}"#,
                "`memory.embeddings.model` must be a string ('off', a folder",
            ),
            (
                r#"{"memory": {"embeddings": {"model": null}}}"#,
                "found null",
            ),
            (
                r#"{"memory": {"embeddings": {"model": "x y"}}}"#,
                "memory.embeddings.model in",
            ),
        ];
        for (text, want) in cases {
            fs::write(&file, text).unwrap();
            let err = resolve(&c).unwrap_err();
            let message = err.to_string();
            assert!(
                message.starts_with(&file.display().to_string())
                    || message.starts_with("memory.embeddings.model in"),
                "{text}: {message}"
            );
            assert!(message.contains(want), "{text}: {message}");
            assert!(message.contains(SETTING_KEY), "{text}: {message}");
            let as_memory = MemoryError::from(err);
            assert_eq!(as_memory.code(), "MODEL_NOT_AVAILABLE");
        }
    }

    #[test]
    fn the_cache_holds_whole_models_only() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path();
        let id = "owner/name";
        assert_eq!(cache_folder(home, id), home.join("models/owner--name"));
        assert_eq!(cached(home, id), None);
        let folder = cache_folder(home, id);
        fs::create_dir_all(&folder).unwrap();
        for file in &MODEL_FILES[..2] {
            fs::write(folder.join(file), "x").unwrap();
        }
        assert_eq!(cached(home, id), None, "a file is missing");
        fs::write(folder.join(MODEL_FILE), "x").unwrap();
        assert_eq!(cached(home, id), Some(folder.clone()));
        // locate_or_pull does not download what is cached (nothing listens at the endpoint).
        let mut c = config(home);
        c.embedding_model = Some(id.into());
        c.hf_endpoint = Some("http://127.0.0.1:1/".into());
        assert_eq!(locate_or_pull(&c, &|_| {}).unwrap(), Some(folder));
        assert_eq!(endpoint(&c), "http://127.0.0.1:1");
        assert_eq!(endpoint(&config(home)), DEFAULT_ENDPOINT);
    }

    #[test]
    fn a_missing_folder_or_a_bad_id_is_not_available() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = config(dir.path());
        c.embedding_model = Some(dir.path().join("nowhere").display().to_string());
        let err = locate_or_pull(&c, &|_| {}).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "the embedding model folder {} (TANDEM_EMBEDDING_MODEL) does not exist",
                dir.path().join("nowhere").display()
            )
        );
        let err = pull("no-slash", dir.path(), DEFAULT_ENDPOINT, &|_| {}).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("the command line: 'no-slash' is not an embedding model setting"),
            "{err}"
        );
        let MemoryError::ModelNotAvailable { model, .. } = MemoryError::from(err) else {
            panic!("not MODEL_NOT_AVAILABLE")
        };
        assert_eq!(model, "no-slash");
        assert!(!dir.path().join("models").exists(), "nothing was created");
    }
}
