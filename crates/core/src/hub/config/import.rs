//! Onboarding (`tandem servers import`): the MCP servers an agent already has, read from its
//! own config files (Claude Code, Codex, Gemini CLI, VS Code, Cursor), translated into entries of
//! Tandem's `config.json`, and the plan of merging them into it: which are added, unchanged,
//! in conflict with an entry of the same name, or skipped, and why.
//!
//! Pure: the CLI reads the files (they are the user's, under `$HOME` and in the workspace)
//! and shows the plan; writing goes through the hub (`hub/import`, [`crate::hub::Hub::import`]),
//! which plans again against the file as it is then, under the same lock as every other
//! edit of that file. A plan carries no secret: environment variables and headers are
//! listed by name only.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::hub::config::{self, ConfigProblem, SERVERS_KEY, Transport};
use crate::hub::scan;

/// The agents whose config files are known, as `--from` names them.
pub const AGENTS: &[&str] = &[
    "claude",
    "claude-project",
    "codex",
    "gemini",
    "vscode",
    "cursor",
];

/// How a config file lists its servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// `~/.claude.json`: `mcpServers` (user scope) and `projects.<path>.mcpServers` (local
    /// scope, taken for the workspace only).
    ClaudeUser,
    /// `.mcp.json` (Claude Code's project file, Cursor's `mcp.json`, and the usual
    /// `mcpServers` format).
    McpJson,
    /// `~/.codex/config.toml`: `[mcp_servers.NAME]` tables.
    Codex,
    /// Gemini CLI's `settings.json`: `mcpServers` with `httpUrl` for Streamable HTTP.
    Gemini,
    /// VS Code's `mcp.json`: `servers` and `inputs`.
    VsCode,
}

impl Format {
    /// The format of a file named on the command line: by its name, else by its content.
    pub fn guess(path: &Path, text: &str) -> Format {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.ends_with(".toml") {
            return Format::Codex;
        }
        if name == "settings.json" {
            return Format::Gemini;
        }
        let top: Value = serde_json::from_str(text).unwrap_or(Value::Null);
        if top.get("servers").is_some() && top.get(SERVERS_KEY).is_none() {
            Format::VsCode
        } else if top.get("projects").is_some() {
            Format::ClaudeUser
        } else {
            Format::McpJson
        }
    }
}

/// A place an agent keeps its servers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Location {
    /// The `--from` name of the agent (`claude`, `codex`, ...), or `file`.
    pub agent: String,
    pub format: Format,
    pub path: PathBuf,
    /// The project directory when the file belongs to one: its stdio servers keep running
    /// there once imported (their `cwd`), as the agent ran them.
    pub project: Option<PathBuf>,
}

/// Where the user's directories are, for finding agents' files and expanding their
/// variables.
#[derive(Debug, Clone)]
pub struct Places {
    /// `$HOME`.
    pub home: PathBuf,
    /// The platform's config dir (`$XDG_CONFIG_HOME`, `~/Library/Application Support`),
    /// where VS Code keeps its user `mcp.json`.
    pub config_dir: PathBuf,
    /// Codex's home (`$CODEX_HOME`, else `~/.codex`).
    pub codex_home: PathBuf,
    /// The workspace (its root), for project files.
    pub workspace: PathBuf,
}

/// The known places of `agent` (every agent's when `None`): the user's files first, then
/// the workspace's. A project's files are the repository's to write (and Claude Code's
/// servers for one project run there), so where both define a name, the user's is the one
/// imported ([`plan`]).
pub fn locations(places: &Places, agent: Option<&str>) -> Vec<Location> {
    let ws = &places.workspace;
    let at = |agent: &str, format, path: PathBuf, project: bool| Location {
        agent: agent.into(),
        format,
        path,
        project: project.then(|| ws.clone()),
    };
    let all = [
        at(
            "claude",
            Format::ClaudeUser,
            places.home.join(".claude.json"),
            false,
        ),
        at(
            "codex",
            Format::Codex,
            places.codex_home.join("config.toml"),
            false,
        ),
        at(
            "gemini",
            Format::Gemini,
            places.home.join(".gemini/settings.json"),
            false,
        ),
        at(
            "vscode",
            Format::VsCode,
            places.config_dir.join("Code/User/mcp.json"),
            false,
        ),
        at(
            "cursor",
            Format::McpJson,
            places.home.join(".cursor/mcp.json"),
            false,
        ),
        at(
            "claude-project",
            Format::McpJson,
            ws.join(".mcp.json"),
            true,
        ),
        at("vscode", Format::VsCode, ws.join(".vscode/mcp.json"), true),
        at(
            "gemini",
            Format::Gemini,
            ws.join(".gemini/settings.json"),
            true,
        ),
        at("cursor", Format::McpJson, ws.join(".cursor/mcp.json"), true),
    ];
    all.into_iter()
        .filter(|l| agent.is_none_or(|a| a == l.agent))
        .collect()
}

/// A server entry as Tandem's `config.json` has it (fields in the order they are written).
/// Only what defines the server; Tandem's own settings (`autostart`, `core`, ...) are the
/// user's to add.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Entry {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disabled: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

impl Entry {
    /// Whether both run the same server: the same command line, environment and directory,
    /// or the same URL and headers. Settings (`disabled`, the timeout) do not count.
    pub fn same_server(&self, other: &Entry) -> bool {
        (
            &self.command,
            &self.args,
            &self.env,
            &self.cwd,
            &self.url,
            &self.headers,
        ) == (
            &other.command,
            &other.args,
            &other.env,
            &other.cwd,
            &other.url,
            &other.headers,
        )
    }

    /// What runs, as a user reads it: the command line, or the URL.
    pub fn runs(&self) -> String {
        match (self.stdio(), &self.url) {
            (Some(stdio), _) => stdio.describe(),
            (None, Some(url)) => url.clone(),
            (None, None) => String::new(),
        }
    }

    /// Whether the entry starts Tandem's own MCP face ([`Transport::is_tandem_itself`]).
    pub fn is_tandem_itself(&self) -> bool {
        self.stdio().is_some_and(|t| t.is_tandem_itself())
    }

    /// The command line as a transport (environment and directory left out).
    fn stdio(&self) -> Option<Transport> {
        Some(Transport::Stdio {
            command: self.command.clone()?,
            args: self.args.clone(),
            env: BTreeMap::new(),
            cwd: PathBuf::new(),
        })
    }
}

/// Whose definition a server is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// The user's own, for every project: `~/.claude.json`'s user scope, Codex, Gemini CLI's
    /// and VS Code's user settings, a file named with `--from`.
    #[default]
    User,
    /// One project's: a file in the workspace (the repository's), or Claude Code's servers
    /// for this project in `~/.claude.json`. Its command runs in the project.
    Project,
}

/// A server found in an agent's file, translated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FoundServer {
    pub name: String,
    /// The file (and for `~/.claude.json`'s projects, which one) it comes from.
    pub from: String,
    #[serde(default)]
    pub scope: Scope,
    pub entry: Entry,
    /// What the translation changed or could not carry over (no values).
    #[serde(default)]
    pub notes: Vec<String>,
}

/// A server found but not importable, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Skipped {
    pub name: String,
    pub from: String,
    pub reason: String,
}

/// What one file holds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Read {
    pub found: Vec<FoundServer>,
    pub skipped: Vec<Skipped>,
}

/// Reads the servers of an agent's file (`text`, read from `location`). A file that does
/// not parse, or whose servers are not an object, is an error saying so.
pub fn read(location: &Location, text: &str, places: &Places) -> Result<Read, String> {
    let file = location.path.display().to_string();
    let top: Value = match location.format {
        Format::Codex => toml::from_str(text).map_err(|e| format!("not valid TOML: {e}"))?,
        _ => serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?,
    };
    let ctx = |project: Option<&Path>| Context {
        places,
        project: project.map(Path::to_path_buf),
        inputs: BTreeMap::new(),
    };
    let project = location.project.as_deref();
    let mut read = Read::default();
    match location.format {
        Format::McpJson => {
            read_servers(&mut read, &top, SERVERS_KEY, &file, &ctx(project), &CLAUDE)?
        }
        Format::Gemini => {
            read_servers(&mut read, &top, SERVERS_KEY, &file, &ctx(project), &GEMINI)?
        }
        Format::Codex => read_servers(&mut read, &top, "mcp_servers", &file, &ctx(None), &CODEX)?,
        Format::VsCode => {
            let mut ctx = ctx(project);
            for input in top
                .get("inputs")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(id) = input.get("id").and_then(Value::as_str) {
                    let description = input.get("description").and_then(Value::as_str);
                    ctx.inputs
                        .insert(id.to_string(), description.unwrap_or("").to_string());
                }
            }
            read_servers(&mut read, &top, "servers", &file, &ctx, &VSCODE)?;
        }
        Format::ClaudeUser => {
            read_servers(&mut read, &top, SERVERS_KEY, &file, &ctx(None), &CLAUDE)?;
            let ws = &places.workspace;
            let projects = top.get("projects").and_then(Value::as_object);
            let this = projects.and_then(|p| {
                p.iter()
                    .find(|(path, _)| Path::new(path) == ws.as_path())
                    .map(|(_, v)| v)
            });
            if let Some(project) = this {
                let from = format!("{file} (project {})", ws.display());
                read_servers(
                    &mut read,
                    project,
                    SERVERS_KEY,
                    &from,
                    &ctx(Some(ws)),
                    &CLAUDE,
                )?;
            }
        }
    }
    Ok(read)
}

/// How a file's values are read: where the user's places are, the project the file
/// belongs to, and VS Code's inputs (id → description).
struct Context<'a> {
    places: &'a Places,
    project: Option<PathBuf>,
    inputs: BTreeMap<String, String>,
}

/// One agent's entries: the fields it reads (any other is named in a note, so that nothing
/// is dropped unsaid), and its translation of one entry: the entry and its notes, or why it
/// is skipped.
struct Reader {
    fields: &'static [&'static str],
    translate: fn(&Fields, &Context) -> Translated,
}

/// An entry and the notes of its translation, or why it is skipped.
type Translated = Result<(Entry, Vec<String>), String>;

const CLAUDE: Reader = Reader {
    fields: &["type", "command", "args", "env", "cwd", "url", "headers"],
    translate: claude,
};

const GEMINI: Reader = Reader {
    fields: &[
        "command", "args", "env", "cwd", "url", "httpUrl", "headers", "timeout",
    ],
    translate: gemini,
};

const CODEX: Reader = Reader {
    fields: &[
        "command",
        "args",
        "env",
        "env_vars",
        "cwd",
        "url",
        "http_headers",
        "env_http_headers",
        "bearer_token_env_var",
        "tool_timeout_sec",
        "enabled",
    ],
    translate: codex,
};

const VSCODE: Reader = Reader {
    fields: &[
        "type", "command", "args", "env", "envFile", "url", "headers",
    ],
    translate: vscode,
};

fn read_servers(
    read: &mut Read,
    top: &Value,
    key: &str,
    from: &str,
    ctx: &Context,
    reader: &Reader,
) -> Result<(), String> {
    let servers = match top.get(key) {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Object(servers)) => servers,
        Some(_) => return Err(format!("'{key}' is not an object")),
    };
    for (name, value) in servers {
        let skip = |reason: String| Skipped {
            name: name.clone(),
            from: from.to_string(),
            reason,
        };
        let Some(object) = value.as_object() else {
            read.skipped.push(skip("its entry is not an object".into()));
            continue;
        };
        let fields = Fields { object };
        match (reader.translate)(&fields, ctx) {
            Err(reason) => read.skipped.push(skip(reason)),
            Ok((entry, _)) if entry.is_tandem_itself() => read.skipped.push(skip(
                "Tandem itself: the agent keeps this entry, and Tandem serves the others".into(),
            )),
            Ok((mut entry, mut notes)) => {
                if let (Some(project), Some(_)) = (&ctx.project, &entry.command) {
                    let cwd = match &entry.cwd {
                        Some(c) => project.join(c),
                        None => project.clone(),
                    };
                    entry.cwd = Some(cwd.display().to_string());
                }
                if entry.command.is_none() && entry.url.is_none() {
                    read.skipped
                        .push(skip("has neither 'command' nor 'url'".into()));
                    continue;
                }
                notes.extend(fields.ignored(reader.fields));
                read.found.push(FoundServer {
                    name: name.clone(),
                    from: from.to_string(),
                    scope: match ctx.project {
                        Some(_) => Scope::Project,
                        None => Scope::User,
                    },
                    entry,
                    notes,
                });
            }
        }
    }
    Ok(())
}

/// An entry's fields, read with their types checked.
struct Fields<'a> {
    object: &'a Map<String, Value>,
}

impl Fields<'_> {
    fn string(&self, key: &str) -> Result<Option<String>, String> {
        match self.object.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(format!("'{key}' is not a string")),
        }
    }

    fn strings(&self, key: &str) -> Result<Vec<String>, String> {
        match self.object.get(key) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| scalar(v).ok_or_else(|| format!("'{key}' holds a value that is not text")))
                .collect(),
            Some(_) => Err(format!("'{key}' is not a list")),
        }
    }

    fn map(&self, key: &str) -> Result<BTreeMap<String, String>, String> {
        match self.object.get(key) {
            None | Some(Value::Null) => Ok(BTreeMap::new()),
            Some(Value::Object(items)) => items
                .iter()
                .map(|(k, v)| {
                    let v = scalar(v).ok_or_else(|| format!("'{key}.{k}' is not text"))?;
                    Ok((k.clone(), v))
                })
                .collect(),
            Some(_) => Err(format!("'{key}' is not an object")),
        }
    }

    fn number(&self, key: &str) -> Result<Option<f64>, String> {
        match self.object.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => Ok(n.as_f64()),
            Some(_) => Err(format!("'{key}' is not a number")),
        }
    }

    /// A note naming the fields not `read`.
    fn ignored(&self, read: &[&str]) -> Option<String> {
        let left: Vec<&str> = self
            .object
            .keys()
            .map(String::as_str)
            .filter(|k| !read.contains(k))
            .collect();
        (!left.is_empty()).then(|| format!("not imported: {}", left.join(", ")))
    }
}

/// A string, number or boolean as text (TOML and hand-written JSON have numbers in args).
fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

const SSE: &str = "uses the legacy SSE transport, which Tandem does not support: use the \
                   server's Streamable HTTP endpoint";

/// The stdio fields every format shares: `command`, `args`, `env`, `cwd`.
fn stdio(fields: &Fields) -> Result<Entry, String> {
    Ok(Entry {
        command: fields.string("command")?,
        args: fields.strings("args")?,
        env: fields.map("env")?,
        cwd: fields.string("cwd")?,
        ..Entry::default()
    })
}

/// Claude Code (`.mcp.json`, `~/.claude.json`): `type` (`stdio`, `http`, `sse`), `command`,
/// `args`, `env`, `url`, `headers`. Its `${VAR}` and `${VAR:-default}` are Tandem's too.
fn claude(fields: &Fields, _: &Context) -> Translated {
    let kind = fields.string("type")?;
    match kind.as_deref() {
        Some("sse") => return Err(SSE.into()),
        None | Some("stdio" | "http" | "streamable-http") => {}
        Some(other) => return Err(format!("unknown transport type '{other}'")),
    }
    let mut entry = stdio(fields)?;
    entry.url = fields.string("url")?;
    entry.headers = fields.map("headers")?;
    Ok((entry, Vec::new()))
}

/// Gemini CLI (`settings.json`): `command`/`args`/`env`/`cwd`, `httpUrl` (Streamable HTTP),
/// `url` (SSE), `headers`, `timeout` (ms). Its `$VAR` becomes `${VAR}`.
fn gemini(fields: &Fields, _: &Context) -> Translated {
    if fields.string("url")?.is_some() && fields.string("httpUrl")?.is_none() {
        return Err(SSE.into());
    }
    let mut entry = stdio(fields)?;
    entry.url = fields.string("httpUrl")?;
    entry.headers = fields.map("headers")?;
    entry.timeout_ms = fields
        .number("timeout")?
        .map(|ms| ms as u64)
        .filter(|&ms| ms > 0);
    Ok((each_text(entry, &mut braced_vars), Vec::new()))
}

/// Codex (`config.toml`): `command`, `args`, `env`, `cwd`, or `url` with `http_headers`,
/// `env_http_headers` (header → variable) and `bearer_token_env_var`; `tool_timeout_sec`;
/// `enabled = false`.
fn codex(fields: &Fields, _: &Context) -> Translated {
    let mut entry = stdio(fields)?;
    let mut notes = Vec::new();
    entry.url = fields.string("url")?;
    entry.headers = fields.map("http_headers")?;
    for (header, var) in fields.map("env_http_headers")? {
        entry.headers.insert(header, format!("${{{var}}}"));
    }
    if let Some(var) = fields.string("bearer_token_env_var")? {
        entry
            .headers
            .insert("Authorization".into(), format!("Bearer ${{{var}}}"));
    }
    entry.timeout_ms = fields
        .number("tool_timeout_sec")?
        .map(|s| (s * 1000.0) as u64)
        .filter(|&ms| ms > 0);
    if fields.object.get("enabled") == Some(&Value::Bool(false)) {
        entry.disabled = true;
        notes.push("disabled in Codex: imported disabled".into());
    }
    if !fields.strings("env_vars")?.is_empty() {
        notes.push("env_vars: Tandem's servers inherit the environment Tandem starts with".into());
    }
    Ok((entry, notes))
}

/// VS Code (`mcp.json`): `type` (`stdio`, `http`, `sse`), `command`, `args`, `env`, `url`,
/// `headers`. `${input:ID}` becomes `${ID}` (upper case, a variable of Tandem's
/// environment), with a note; `${workspaceFolder}` and `${userHome}` become their paths;
/// `${env:VAR}` is Tandem's too; any other VS Code variable skips the server.
fn vscode(fields: &Fields, ctx: &Context) -> Translated {
    let kind = fields.string("type")?;
    match kind.as_deref() {
        Some("sse") => return Err(SSE.into()),
        None | Some("stdio" | "http") => {}
        Some(other) => return Err(format!("unknown transport type '{other}'")),
    }
    let mut entry = stdio(fields)?;
    entry.url = fields.string("url")?;
    entry.headers = fields.map("headers")?;
    let mut notes = Vec::new();
    if fields.string("envFile")?.is_some() {
        notes.push(
            "envFile is not read: put its variables in the environment Tandem starts with".into(),
        );
    }
    let mut problem = None;
    let entry = each_text(entry, &mut |text| {
        vscode_vars(text, ctx, &mut notes).unwrap_or_else(|e| {
            problem.get_or_insert(e);
            text.to_string()
        })
    });
    match problem {
        Some(e) => Err(e),
        None => {
            notes.sort();
            notes.dedup();
            Ok((entry, notes))
        }
    }
}

/// VS Code's variables in `text`, made Tandem's ([`vscode`]); an unknown one is an error.
fn vscode_vars(text: &str, ctx: &Context, notes: &mut Vec<String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let Some(end) = rest[i..].find('}') else {
            break;
        };
        let var = &rest[i + 2..i + end];
        match var.split_once(':') {
            Some(("input", id)) => {
                let name = env_name(id);
                let what = ctx
                    .inputs
                    .get(id)
                    .filter(|d| !d.is_empty())
                    .map(|d| format!(" (\"{d}\")"))
                    .unwrap_or_default();
                notes.push(format!(
                    "VS Code input '{id}'{what} is now ${{{name}}}: set {name} in the environment Tandem starts with"
                ));
                out.push_str(&format!("${{{name}}}"));
            }
            Some(("env", _)) => out.push_str(&rest[i..=i + end]),
            None if var == "workspaceFolder" => {
                out.push_str(&ctx.places.workspace.display().to_string())
            }
            None if var == "userHome" => out.push_str(&ctx.places.home.display().to_string()),
            None if !VSCODE_ONLY.contains(&var) => out.push_str(&rest[i..=i + end]),
            _ => {
                return Err(format!(
                    "uses the VS Code variable ${{{var}}}, which has no value outside VS Code"
                ));
            }
        }
        rest = &rest[i + end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// VS Code's own variables without a colon that mean nothing outside it (other `${NAME}`s
/// are read as environment variables, as Tandem does).
const VSCODE_ONLY: &[&str] = &[
    "cwd",
    "workspaceRoot",
    "workspaceFolderBasename",
    "file",
    "fileBasename",
    "fileDirname",
    "relativeFile",
    "lineNumber",
    "selectedText",
    "execPath",
    "pathSeparator",
    "/",
];

/// An input id as an environment variable's name: `api-key` → `API_KEY`.
fn env_name(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// `$VAR` (Gemini's other spelling) as `${VAR}`; `${...}` and a lone `$` stay.
fn braced_vars(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let starts_name = |c: char| c.is_ascii_alphabetic() || c == '_';
        match chars.peek() {
            Some(&(_, n)) if c == '$' && starts_name(n) => {
                let name_end = text[i + 1..]
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .map_or(text.len(), |n| i + 1 + n);
                out.push_str(&format!("${{{}}}", &text[i + 1..name_end]));
                while chars.peek().is_some_and(|&(j, _)| j < name_end) {
                    chars.next();
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// `entry` with `f` applied to every text that may hold variables.
fn each_text(mut entry: Entry, f: &mut dyn FnMut(&str) -> String) -> Entry {
    for text in entry
        .command
        .iter_mut()
        .chain(entry.args.iter_mut())
        .chain(entry.env.values_mut())
        .chain(entry.cwd.iter_mut())
        .chain(entry.url.iter_mut())
        .chain(entry.headers.values_mut())
    {
        *text = f(text);
    }
    entry
}

/// What happens to one server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// New in `config.json`.
    Added,
    /// Already there, running the same server.
    Unchanged,
    /// A different server of that name is there: kept (`--overwrite` replaces it).
    Conflict,
    /// A different server of that name was there and is replaced (`--overwrite`).
    Replaced,
    /// Not importable, or another file's server of that name is imported.
    Skipped,
}

/// One server of the plan, as the user sees it: no values of variables or headers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PlanRow {
    pub name: String,
    pub from: String,
    pub action: Action,
    /// The command line or URL.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub runs: String,
    /// The environment's variable names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// The headers' names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<String>,
    /// Why it is skipped or in conflict, and what the translation changed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The user's own server: the project files defining a different server of this name,
    /// which are not imported.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub differs_in: Vec<String>,
}

/// The plan of an import into the user's `config.json`, and whether it was written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Plan {
    /// The user's `config.json`.
    pub file: String,
    pub servers: Vec<PlanRow>,
    pub written: bool,
}

impl Plan {
    /// The servers the import writes (added or replaced).
    pub fn to_write(&self) -> usize {
        self.servers
            .iter()
            .filter(|r| matches!(r.action, Action::Added | Action::Replaced))
            .count()
    }
}

/// The plan of merging `found` into the user's config (`config_text`, `None` when it does
/// not exist yet): each server added, unchanged (the same server is there), in conflict (a
/// different one is: kept unless `overwrite`), or skipped (`skipped`, and every other
/// definition of a name imported from elsewhere). Also answers the entries to write, by
/// name. A file that is not a JSON object, or whose `mcpServers` is not one, is refused.
///
/// Where several files define one name, the first of the user's own definitions is the one
/// imported, else the first found: a project's never wins over the user's, whose row names
/// the files of the projects' that differ ([`PlanRow::differs_in`]). A project's definition that would replace an entry of
/// `config.json` says so.
pub fn plan(
    file: &Path,
    config_text: Option<&str>,
    found: &[FoundServer],
    skipped: &[Skipped],
    overwrite: bool,
) -> Result<(Plan, Vec<(String, Entry)>), ConfigProblem> {
    let existing = existing_servers(file, config_text)?;
    let mut by_name: BTreeMap<&str, Vec<&FoundServer>> = BTreeMap::new();
    for f in found {
        by_name.entry(&f.name).or_default().push(f);
    }
    let mut rows = Vec::new();
    let mut write: Vec<(String, Entry)> = Vec::new();
    for f in found {
        let mut row = PlanRow {
            name: f.name.clone(),
            from: f.from.clone(),
            action: Action::Added,
            runs: f.entry.runs(),
            env: f.entry.env.keys().cloned().collect(),
            headers: f.entry.headers.keys().cloned().collect(),
            notes: f.notes.clone(),
            differs_in: Vec::new(),
        };
        let same_name = &by_name[f.name.as_str()];
        let chosen = same_name
            .iter()
            .find(|o| o.scope == Scope::User)
            .unwrap_or(&same_name[0]);
        if !std::ptr::eq(*chosen, f) {
            row.action = Action::Skipped;
            row.notes.insert(0, not_imported(f, chosen));
            rows.push(row);
            continue;
        }
        if f.scope == Scope::User {
            row.differs_in = same_name
                .iter()
                .filter(|o| o.scope == Scope::Project && !o.entry.same_server(&f.entry))
                .map(|o| o.from.clone())
                .collect();
        }
        let by_project = match f.scope {
            Scope::User => "",
            Scope::Project => " with this project's definition",
        };
        match existing.get(&f.name) {
            None => write.push((f.name.clone(), f.entry.clone())),
            Some(Some(there)) if there.same_server(&f.entry) => row.action = Action::Unchanged,
            Some(_) if overwrite => {
                row.action = Action::Replaced;
                row.notes
                    .insert(0, format!("replaces the entry in config.json{by_project}"));
                write.push((f.name.clone(), f.entry.clone()));
            }
            Some(_) => {
                row.action = Action::Conflict;
                row.notes.insert(
                    0,
                    format!(
                        "config.json has a different server of this name: kept (--overwrite replaces it{by_project})"
                    ),
                );
            }
        }
        rows.push(row);
    }
    rows.extend(skipped.iter().map(|s| PlanRow {
        name: s.name.clone(),
        from: s.from.clone(),
        action: Action::Skipped,
        runs: String::new(),
        env: Vec::new(),
        headers: Vec::new(),
        notes: vec![s.reason.clone()],
        differs_in: Vec::new(),
    }));
    let plan = Plan {
        file: file.display().to_string(),
        servers: rows,
        written: false,
    };
    Ok((plan, write))
}

/// Why `f` is not imported, `chosen` being the definition of its name that is.
fn not_imported(f: &FoundServer, chosen: &FoundServer) -> String {
    if chosen.entry.same_server(&f.entry) {
        format!("the same server as in {}", chosen.from)
    } else if (f.scope, chosen.scope) == (Scope::Project, Scope::User) {
        format!(
            "the user's own definition of this name, from {}, is the one imported: a project's never replaces it",
            chosen.from
        )
    } else {
        format!(
            "a different server of this name, from {}, is the one imported (rename one of them to have both)",
            chosen.from
        )
    }
}

/// The servers in the user's config by name, each as an [`Entry`] (`None`: an entry Tandem
/// cannot read, which is never "the same").
pub(crate) fn existing_servers(
    file: &Path,
    text: Option<&str>,
) -> Result<BTreeMap<String, Option<Entry>>, ConfigProblem> {
    let Some(text) = text.filter(|t| !t.trim().is_empty()) else {
        return Ok(BTreeMap::new());
    };
    let problem = |field: Option<&str>, message: &str| ConfigProblem {
        file: file.to_path_buf(),
        server: None,
        field: field.map(str::to_string),
        message: message.into(),
    };
    let members = scan::object_members(text).ok_or_else(|| {
        problem(
            None,
            "not a valid JSON object; fix it before Tandem edits it",
        )
    })?;
    let Some((_, servers)) = members.iter().find(|(k, _)| k == SERVERS_KEY) else {
        return Ok(BTreeMap::new());
    };
    let servers = scan::object_members(servers).ok_or_else(|| {
        problem(
            Some(SERVERS_KEY),
            "must be an object for Tandem to add servers to it",
        )
    })?;
    Ok(servers
        .into_iter()
        .map(|(name, raw)| (name, serde_json::from_str::<Entry>(raw).ok()))
        .collect())
}

impl crate::hub::Hub {
    /// Imports `found` into the user's `config.json` (`hub/import`): planned again against
    /// the file as it is now ([`plan`]; `skipped` are listed as they are), and the added or
    /// replaced entries written ([`config::edit_servers`]), under the lock every edit of that
    /// file holds. The workspaces see the change at their next look at the file.
    pub fn import(
        &self,
        found: &[FoundServer],
        skipped: &[Skipped],
        overwrite: bool,
    ) -> Result<Plan, ConfigProblem> {
        let _edit = self
            .user_file_edit
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let file = &self.user_file;
        let text = config::read_user_file(file)?;
        let (mut plan, entries) = plan(file, text.as_deref(), found, skipped, overwrite)?;
        if !entries.is_empty() {
            config::edit_servers(file, &entries)?;
            plan.written = true;
            tracing::info!(
                "imported {} MCP servers into {}",
                entries.len(),
                file.display()
            );
        }
        Ok(plan)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A user's places, for the tests here and in `setup.rs`.
    pub(in crate::hub::config) fn places() -> Places {
        Places {
            home: "/home/u".into(),
            config_dir: "/home/u/.config".into(),
            codex_home: "/home/u/.codex".into(),
            workspace: "/work/app".into(),
        }
    }

    /// Reads `text` as `format` (a project file when `project`), and renders each server
    /// found as `name: entry JSON [notes]` and each skipped one as `name: skipped: reason`.
    fn check(format: Format, project: bool, text: &str, want: &[&str]) {
        let location = Location {
            agent: "test".into(),
            format,
            path: "/f".into(),
            project: project.then(|| "/work/app".into()),
        };
        let read = read(&location, text, &places()).unwrap();
        let mut got: Vec<String> = read
            .found
            .iter()
            .map(|f| {
                let notes = if f.notes.is_empty() {
                    String::new()
                } else {
                    format!(" {:?}", f.notes)
                };
                format!(
                    "{}: {}{notes}",
                    f.name,
                    serde_json::to_string(&f.entry).unwrap()
                )
            })
            .collect();
        got.extend(
            read.skipped
                .iter()
                .map(|s| format!("{}: skipped: {}", s.name, s.reason)),
        );
        assert_eq!(got, want, "{text}");
    }

    #[test]
    fn claude_code_project_file() {
        // The shapes of Claude Code's documentation (`claude mcp add --scope project`).
        check(
            Format::McpJson,
            true,
            r#"{
              "mcpServers": {
                "api-server": {
                  "type": "http",
                  "url": "${API_BASE_URL:-https://api.example.com}/mcp",
                  "headers": {"Authorization": "Bearer ${API_KEY}"}
                },
                "filesystem": {
                  "type": "stdio",
                  "command": "npx",
                  "args": ["-y", "@modelcontextprotocol/server-filesystem", "./docs"],
                  "env": {"LOG_LEVEL": "debug"}
                },
                "asana": {"type": "sse", "url": "https://mcp.asana.com/sse"},
                "tandem": {"command": "tandem", "args": ["mcp"]},
                "helper": {"type": "http", "url": "https://h.example/mcp", "headersHelper": "/bin/token"},
                "odd": {"type": "websocket", "url": "wss://x"},
                "empty": {}
              }
            }"#,
            &[
                r#"api-server: {"url":"${API_BASE_URL:-https://api.example.com}/mcp","headers":{"Authorization":"Bearer ${API_KEY}"}}"#,
                r#"filesystem: {"command":"npx","args":["-y","@modelcontextprotocol/server-filesystem","./docs"],"env":{"LOG_LEVEL":"debug"},"cwd":"/work/app"}"#,
                r#"helper: {"url":"https://h.example/mcp"} ["not imported: headersHelper"]"#,
                "asana: skipped: uses the legacy SSE transport, which Tandem does not support: use the server's Streamable HTTP endpoint",
                "empty: skipped: has neither 'command' nor 'url'",
                "odd: skipped: unknown transport type 'websocket'",
                "tandem: skipped: Tandem itself: the agent keeps this entry, and Tandem serves the others",
            ],
        );
    }

    #[test]
    fn claude_code_user_file_takes_this_projects_servers_only() {
        check(
            Format::ClaudeUser,
            false,
            r#"{
              "numStartups": 42,
              "mcpServers": {"github": {"type": "http", "url": "https://api.githubcopilot.com/mcp/"}},
              "projects": {
                "/work/app": {
                  "allowedTools": [],
                  "mcpServers": {"db": {"type": "stdio", "command": "npx", "args": ["-y", "@bytebase/dbhub", "--dsn", "${DSN}"], "env": {}}}
                },
                "/work/other": {"mcpServers": {"elsewhere": {"command": "x"}}}
              }
            }"#,
            &[
                r#"github: {"url":"https://api.githubcopilot.com/mcp/"}"#,
                r#"db: {"command":"npx","args":["-y","@bytebase/dbhub","--dsn","${DSN}"],"cwd":"/work/app"}"#,
            ],
        );
    }

    #[test]
    fn codex_config_toml() {
        // The shapes of Codex's `docs/config.md`.
        check(
            Format::Codex,
            false,
            r#"
model = "gpt-5-codex"

[mcp_servers.context7]
command = "npx"
args = ["-y", "@upstash/context7-mcp"]
env_vars = ["LOCAL_TOKEN"]

[mcp_servers.context7.env]
MY_ENV_VAR = "MY_ENV_VALUE"

[mcp_servers.figma]
url = "https://mcp.figma.com/mcp"
bearer_token_env_var = "FIGMA_OAUTH_TOKEN"
http_headers = { "X-Figma-Region" = "us-east-1" }
env_http_headers = { "X-Trace" = "TRACE_ID" }
tool_timeout_sec = 60.5
startup_timeout_sec = 20

[mcp_servers.off]
command = "off-server"
enabled = false
enabled_tools = ["a"]

[mcp_servers.tandem]
command = "/usr/local/bin/tandem"
args = ["mcp"]
"#,
            &[
                r#"context7: {"command":"npx","args":["-y","@upstash/context7-mcp"],"env":{"MY_ENV_VAR":"MY_ENV_VALUE"}} ["env_vars: Tandem's servers inherit the environment Tandem starts with"]"#,
                r#"figma: {"url":"https://mcp.figma.com/mcp","headers":{"Authorization":"Bearer ${FIGMA_OAUTH_TOKEN}","X-Figma-Region":"us-east-1","X-Trace":"${TRACE_ID}"},"timeout_ms":60500} ["not imported: startup_timeout_sec"]"#,
                r#"off: {"command":"off-server","disabled":true} ["disabled in Codex: imported disabled", "not imported: enabled_tools"]"#,
                "tandem: skipped: Tandem itself: the agent keeps this entry, and Tandem serves the others",
            ],
        );
    }

    #[test]
    fn gemini_settings() {
        // The shapes of Gemini CLI's `docs/tools/mcp-server.md`.
        check(
            Format::Gemini,
            false,
            r#"{
              "theme": "GitHub",
              "mcpServers": {
                "pythonTools": {
                  "command": "python",
                  "args": ["-m", "my_mcp_server", "--port", 8080],
                  "cwd": "./mcp-servers/python",
                  "env": {"DATABASE_URL": "$DB_CONNECTION_STRING", "API_KEY": "${EXTERNAL_API_KEY}", "PRICE": "5$"},
                  "timeout": 15000,
                  "trust": false
                },
                "httpServer": {"httpUrl": "http://localhost:3000/mcp", "headers": {"Authorization": "Bearer $TOKEN"}, "timeout": 5000},
                "sseServer": {"url": "http://localhost:8080/sse"}
              }
            }"#,
            &[
                r#"httpServer: {"url":"http://localhost:3000/mcp","headers":{"Authorization":"Bearer ${TOKEN}"},"timeout_ms":5000}"#,
                r#"pythonTools: {"command":"python","args":["-m","my_mcp_server","--port","8080"],"env":{"API_KEY":"${EXTERNAL_API_KEY}","DATABASE_URL":"${DB_CONNECTION_STRING}","PRICE":"5$"},"cwd":"./mcp-servers/python","timeout_ms":15000} ["not imported: trust"]"#,
                "sseServer: skipped: uses the legacy SSE transport, which Tandem does not support: use the server's Streamable HTTP endpoint",
            ],
        );
    }

    #[test]
    fn vscode_mcp_json_inputs_become_variables() {
        // The shapes of VS Code's MCP configuration reference.
        check(
            Format::VsCode,
            true,
            r#"{
              "inputs": [
                {"type": "promptString", "id": "perplexity-key", "description": "Perplexity API Key", "password": true}
              ],
              "servers": {
                "Perplexity": {
                  "type": "stdio",
                  "command": "npx",
                  "args": ["-y", "server-perplexity-ask"],
                  "env": {"PERPLEXITY_API_KEY": "${input:perplexity-key}"},
                  "envFile": "${workspaceFolder}/.env"
                },
                "fetch": {"command": "uvx", "args": ["mcp-server-fetch", "--root", "${workspaceFolder}/data", "--home", "${userHome}"]},
                "github": {"type": "http", "url": "https://api.githubcopilot.com/mcp/", "headers": {"Authorization": "Bearer ${input:gh_token}", "X-Env": "${env:GH_HOST}"}},
                "legacy": {"type": "sse", "url": "http://localhost:3001/sse"},
                "configured": {"command": "srv", "args": ["${config:python.path}"]}
              }
            }"#,
            &[
                r#"Perplexity: {"command":"npx","args":["-y","server-perplexity-ask"],"env":{"PERPLEXITY_API_KEY":"${PERPLEXITY_KEY}"},"cwd":"/work/app"} ["VS Code input 'perplexity-key' (\"Perplexity API Key\") is now ${PERPLEXITY_KEY}: set PERPLEXITY_KEY in the environment Tandem starts with", "envFile is not read: put its variables in the environment Tandem starts with"]"#,
                r#"fetch: {"command":"uvx","args":["mcp-server-fetch","--root","/work/app/data","--home","/home/u"],"cwd":"/work/app"}"#,
                r#"github: {"url":"https://api.githubcopilot.com/mcp/","headers":{"Authorization":"Bearer ${GH_TOKEN}","X-Env":"${env:GH_HOST}"}} ["VS Code input 'gh_token' is now ${GH_TOKEN}: set GH_TOKEN in the environment Tandem starts with"]"#,
                "configured: skipped: uses the VS Code variable ${config:python.path}, which has no value outside VS Code",
                "legacy: skipped: uses the legacy SSE transport, which Tandem does not support: use the server's Streamable HTTP endpoint",
            ],
        );
    }

    #[test]
    fn files_that_do_not_parse_say_so() {
        let location = |format| Location {
            agent: "test".into(),
            format,
            path: "/f".into(),
            project: None,
        };
        let cases: &[(Format, &str, &str)] = &[
            (Format::McpJson, "{", "not valid JSON"),
            (Format::Codex, "[mcp_servers", "not valid TOML"),
            (
                Format::McpJson,
                r#"{"mcpServers": []}"#,
                "'mcpServers' is not an object",
            ),
        ];
        for &(format, text, want) in cases {
            let e = read(&location(format), text, &places()).unwrap_err();
            assert!(e.starts_with(want), "{text}: {e}");
        }
    }

    #[test]
    fn formats_are_guessed_by_name_then_content() {
        let cases: &[(&str, &str, Format)] = &[
            ("config.toml", "", Format::Codex),
            ("settings.json", "{}", Format::Gemini),
            ("mcp.json", r#"{"servers": {}}"#, Format::VsCode),
            (".claude.json", r#"{"projects": {}}"#, Format::ClaudeUser),
            (".mcp.json", r#"{"mcpServers": {}}"#, Format::McpJson),
            ("odd.json", "not json", Format::McpJson),
        ];
        for &(name, text, want) in cases {
            assert_eq!(Format::guess(Path::new(name), text), want, "{name}");
        }
    }

    fn found(name: &str, from: &str, command: &str) -> FoundServer {
        FoundServer {
            name: name.into(),
            from: from.into(),
            scope: Scope::User,
            entry: Entry {
                command: Some(command.into()),
                env: [("TOKEN".to_string(), "s3cret".to_string())].into(),
                ..Entry::default()
            },
            notes: Vec::new(),
        }
    }

    #[test]
    fn the_plan_adds_keeps_and_reports_conflicts() {
        let config = r#"{"mcpServers": {
            "same": {"command": "same", "env": {"TOKEN": "s3cret"}, "autostart": false},
            "differs": {"command": "old"}
        }}"#;
        let servers = [
            found("new", "a", "new"),
            found("same", "a", "same"),
            found("differs", "a", "differs"),
            found("new", "b", "new"),
            found("same", "b", "other"),
        ];
        let skipped = [Skipped {
            name: "legacy".into(),
            from: "c".into(),
            reason: "SSE".into(),
        }];
        let run = |overwrite| {
            let (rows, write, plan) = summary(config, &servers, &skipped, overwrite);
            let written: Vec<String> = write.into_iter().map(|(n, _)| n).collect();
            (rows, written, plan)
        };
        let (rows, written, plan) = run(false);
        assert_eq!(
            rows,
            [
                "new a Added ",
                "same a Unchanged ",
                "differs a Conflict config.json has a different server of this name: kept (--overwrite replaces it)",
                "new b Skipped the same server as in a",
                "same b Skipped a different server of this name, from a, is the one imported (rename one of them to have both)",
                "legacy c Skipped SSE",
            ]
        );
        assert_eq!(written, ["new"]);
        assert_eq!(plan.to_write(), 1);
        // Key names only, never values.
        let json = serde_json::to_string(&plan).unwrap();
        assert!(
            json.contains("\"TOKEN\"") && !json.contains("s3cret"),
            "{json}"
        );

        let (rows, written, _) = run(true);
        assert!(rows[2].starts_with("differs a Replaced"), "{}", rows[2]);
        assert_eq!(written, ["new", "differs"]);
    }

    /// The plan of importing `servers` into `config`, its rows rendered as `name from action
    /// notes`, and the entries it writes.
    fn summary(
        config: &str,
        servers: &[FoundServer],
        skipped: &[Skipped],
        overwrite: bool,
    ) -> (Vec<String>, Vec<(String, Entry)>, Plan) {
        let file = Path::new("/t/config.json");
        let (plan, write) = plan(file, Some(config), servers, skipped, overwrite).unwrap();
        let rows = plan
            .servers
            .iter()
            .map(|r| {
                format!(
                    "{} {} {:?} {}",
                    r.name,
                    r.from,
                    r.action,
                    r.notes.join("; ")
                )
            })
            .collect();
        (rows, write, plan)
    }

    #[test]
    fn the_users_own_definition_wins_over_a_projects() {
        let project = |name, command| FoundServer {
            scope: Scope::Project,
            ..found(name, "/ws/.mcp.json", command)
        };
        let servers = [
            project("notes", "./node_modules/.bin/x"),
            found("notes", "~/.claude.json", "notes-server"),
            project("same", "same"),
            found("same", "~/.codex/config.toml", "same"),
            project("only", "./only"),
        ];
        let config = r#"{"mcpServers": {"only": {"command": "mine"}}}"#;
        let (rows, write, plan) = summary(config, &servers, &[], false);
        let differs: Vec<&[String]> = plan.servers.iter().map(|r| &r.differs_in[..]).collect();
        let (none, repo): (&[String], &[String]) = (&[], &["/ws/.mcp.json".to_string()]);
        assert_eq!(differs, [none, repo, none, none, none]);
        assert_eq!(
            rows,
            [
                "notes /ws/.mcp.json Skipped the user's own definition of this name, from ~/.claude.json, is the one imported: a project's never replaces it",
                "notes ~/.claude.json Added ",
                "same /ws/.mcp.json Skipped the same server as in ~/.codex/config.toml",
                "same ~/.codex/config.toml Added ",
                "only /ws/.mcp.json Conflict config.json has a different server of this name: kept (--overwrite replaces it with this project's definition)",
            ]
        );
        let written: Vec<(&str, &str)> = write
            .iter()
            .map(|(n, e)| (n.as_str(), e.command.as_deref().unwrap()))
            .collect();
        assert_eq!(written, [("notes", "notes-server"), ("same", "same")]);

        // Replacing the user's entry with a project's definition is said.
        let (rows, write, _) = summary(config, &servers, &[], true);
        assert_eq!(
            rows[4],
            "only /ws/.mcp.json Replaced replaces the entry in config.json with this project's definition"
        );
        assert_eq!(write.len(), 3);
    }

    #[test]
    fn project_files_and_claude_codes_project_servers_are_a_projects() {
        let location = |format, project: bool| Location {
            agent: "test".into(),
            format,
            path: "/f".into(),
            project: project.then(|| "/work/app".into()),
        };
        let claude = r#"{"mcpServers": {"a": {"command": "a"}},
            "projects": {"/work/app": {"mcpServers": {"b": {"command": "b"}}}}}"#;
        let cases = [
            (
                location(Format::ClaudeUser, false),
                claude,
                vec![Scope::User, Scope::Project],
            ),
            (
                location(Format::McpJson, true),
                r#"{"mcpServers": {"c": {"command": "c"}}}"#,
                vec![Scope::Project],
            ),
            (
                location(Format::Gemini, false),
                r#"{"mcpServers": {"d": {"command": "d"}}}"#,
                vec![Scope::User],
            ),
        ];
        for (location, text, want) in cases {
            let read = read(&location, text, &places()).unwrap();
            let scopes: Vec<Scope> = read.found.iter().map(|f| f.scope).collect();
            assert_eq!(scopes, want, "{text}");
        }
    }

    #[test]
    fn the_plan_refuses_a_file_it_could_not_edit() {
        let file = Path::new("/t/config.json");
        for text in ["[1]", "{\"mcpServers\": [1]}", "{oops"] {
            assert!(plan(file, Some(text), &[], &[], false).is_err(), "{text}");
        }
        let (plan, _) = plan(file, None, &[found("a", "x", "a")], &[], false).unwrap();
        assert_eq!(plan.servers[0].action, Action::Added);
    }

    #[test]
    fn writing_keeps_the_rest_of_the_file_byte_for_byte() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.json");
        let original = "{\n    \"zeta\": [1,  2e3],\n    \"mcpServers\": {\n        \"kept\": {\"command\": \"k\",   \"args\": [\"1.50\"]},\n        \"old\": {\"command\": \"o\"}\n    },\n    \"conventionalPrompts\": {}\n}\n";
        std::fs::write(&file, original).unwrap();
        let entry = |command: &str| Entry {
            command: Some(command.into()),
            args: vec!["-y".into()],
            ..Entry::default()
        };
        config::edit_servers(
            &file,
            &[
                ("old".into(), entry("new-old")),
                ("added".into(), entry("a")),
            ],
        )
        .unwrap();
        let text = std::fs::read_to_string(&file).unwrap();
        assert_eq!(
            text,
            "{\n    \"zeta\": [1,  2e3],\n    \"mcpServers\": {\n        \"kept\": {\"command\": \"k\",   \"args\": [\"1.50\"]},\n        \"old\": {\n            \"command\": \"new-old\",\n            \"args\": [\n                \"-y\"\n            ]\n        },\n        \"added\": {\n            \"command\": \"a\",\n            \"args\": [\n                \"-y\"\n            ]\n        }\n    },\n    \"conventionalPrompts\": {}\n}\n"
        );
        // A missing file is created.
        let new = dir.path().join("sub/config.json");
        config::edit_servers(&new, &[("a".into(), entry("a"))]).unwrap();
        let value: Value = serde_json::from_str(&std::fs::read_to_string(&new).unwrap()).unwrap();
        assert_eq!(value["mcpServers"]["a"]["command"], "a");
    }

    #[test]
    fn gemini_dollar_variables_get_braces() {
        let cases = [
            ("$TOKEN", "${TOKEN}"),
            ("Bearer $TOKEN!", "Bearer ${TOKEN}!"),
            ("${KEEP} $A_1/b", "${KEEP} ${A_1}/b"),
            ("5$ or $5 or $", "5$ or $5 or $"),
            ("é$X", "é${X}"),
        ];
        for (text, want) in cases {
            assert_eq!(braced_vars(text), want, "{text}");
        }
    }
}
