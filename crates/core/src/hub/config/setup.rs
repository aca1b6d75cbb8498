//! `tandem setup`: Tandem's own entry in an agent's MCP config, the reverse of
//! [`import`](super::import). The entry, named `tandem`, runs `tandem mcp`; it goes where
//! [`import::locations`] finds the agent's servers, so the agents' files are named once. The
//! servers the import moved behind Tandem (in `config.json` now, the same name running the
//! same server) can be taken out of the agent's file in the same edit.
//!
//! Pure: the CLI reads and writes the files and asks. JSON files are edited as text
//! ([`super::edit_member_text`]): every other member and entry keeps its text and its
//! place. Codex's TOML is edited through `toml_edit`, which keeps the rest of the file as
//! it was written, comments included.

use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use super::import::{self, Entry, Format, Location, Places};
use super::{SERVERS_KEY, edit_entries, edit_member_text, pretty_at};
use crate::hub::scan;

/// The agents `tandem setup` knows.
pub const SETUP_AGENTS: &[&str] = &["claude", "codex", "gemini", "vscode", "cursor"];

/// The name of Tandem's entry in an agent's file.
pub const NAME: &str = "tandem";

/// The agent's name as its users know it.
pub fn agent_title(agent: &str) -> &str {
    match agent {
        "claude" => "Claude Code",
        "codex" => "Codex",
        "gemini" => "Gemini CLI",
        "vscode" => "VS Code",
        "cursor" => "Cursor",
        other => other,
    }
}

/// The file where `agent` keeps its servers: the user's, or with `project` the
/// workspace's.
pub fn location(places: &Places, agent: &str, project: bool) -> Result<Location, String> {
    if !SETUP_AGENTS.contains(&agent) {
        return Err(format!(
            "unknown agent '{agent}': name one of {}",
            SETUP_AGENTS.join(", ")
        ));
    }
    // Claude Code's project file has a name of its own in the import.
    let from = match (agent, project) {
        ("claude", true) => "claude-project",
        _ => agent,
    };
    import::locations(places, Some(from))
        .into_iter()
        .find(|l| l.project.is_some() == project)
        .ok_or_else(|| {
            format!(
                "{} keeps its MCP servers in your user config only: run `tandem setup {agent}` without --project",
                agent_title(agent)
            )
        })
}

/// What `tandem setup` finds in an agent's file, and would write.
#[derive(Debug, Clone, PartialEq)]
pub struct Setup {
    /// The member (JSON) or table (TOML) that holds the file's servers.
    pub key: &'static str,
    /// The `tandem` entry's text now, when there is one.
    pub before: Option<String>,
    /// The `tandem` entry as setup writes it.
    pub after: String,
    /// Whether the `tandem` entry runs the command setup would write, or another entry
    /// runs Tandem already (named in [`Setup::runs_elsewhere`]).
    pub done: bool,
    /// Another entry of the file that runs `tandem mcp`.
    pub runs_elsewhere: Option<String>,
    /// The file's servers that Tandem serves now.
    pub served: Vec<Served>,
}

/// A server of the agent's file that Tandem's `config.json` holds too: the same name,
/// running the same server.
#[derive(Debug, Clone, PartialEq)]
pub struct Served {
    pub name: String,
    /// What it runs, as a user reads it (no environment, no headers).
    pub runs: String,
}

/// Tandem's entry as the agents write theirs: Claude Code and VS Code name the transport,
/// the others take a command as stdio.
#[derive(Serialize)]
struct TandemEntry<'a> {
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    command: &'a str,
    args: [&'static str; 1],
}

impl<'a> TandemEntry<'a> {
    fn new(agent: &str, command: &'a str) -> Self {
        TandemEntry {
            kind: matches!(agent, "claude" | "vscode").then_some("stdio"),
            command,
            args: ["mcp"],
        }
    }
}

/// The key of the servers in a file of `format`.
fn servers_key(format: Format) -> &'static str {
    match format {
        Format::VsCode => "servers",
        Format::Codex => "mcp_servers",
        Format::ClaudeUser | Format::McpJson | Format::Gemini => SERVERS_KEY,
    }
}

/// What setup finds in `text` (the agent's file at `location`, `None` when it does not
/// exist) for the entry running `command`, and which of its servers the user's
/// `config.json` (`config_text`) serves. A file that does not parse, or whose servers are
/// not a table, is an error saying so.
pub fn plan(
    agent: &str,
    location: &Location,
    text: Option<&str>,
    command: &str,
    places: &Places,
    config_file: &Path,
    config_text: Option<&str>,
) -> Result<Setup, String> {
    let key = servers_key(location.format);
    let text = text.filter(|t| !t.trim().is_empty());
    let top: Value = match (text, location.format) {
        (None, _) => Value::Null,
        (Some(t), Format::Codex) => {
            toml::from_str(t).map_err(|e| format!("not valid TOML: {e}"))?
        }
        (Some(t), _) => serde_json::from_str(t).map_err(|e| {
            format!(
                "not valid JSON ({}); fix it, or add Tandem by hand",
                scan::problem(&e)
            )
        })?,
    };
    let servers = match top.get(key) {
        None | Some(Value::Null) => Default::default(),
        Some(Value::Object(servers)) => servers.clone(),
        Some(_) => return Err(format!("'{key}' is not an object")),
    };
    let runs_tandem =
        |entry: &Entry| entry.is_tandem_itself() && entry.args.len() == 1 && entry.args[0] == "mcp";
    let mut setup = Setup {
        key,
        before: None,
        after: render(location.format, None, &TandemEntry::new(agent, command))?,
        done: false,
        runs_elsewhere: None,
        served: Vec::new(),
    };
    for (name, value) in &servers {
        let entry = serde_json::from_value::<Entry>(value.clone()).ok();
        if name == NAME {
            setup.before = Some(render(location.format, text, &())?);
            setup.done = entry.is_some_and(|e| {
                e.command.as_deref() == Some(command) && e.args == ["mcp"] && e.url.is_none()
            });
        } else if entry.as_ref().is_some_and(runs_tandem) && setup.runs_elsewhere.is_none() {
            setup.runs_elsewhere = Some(name.clone());
        }
    }
    if setup.before.is_none() && setup.runs_elsewhere.is_some() {
        setup.done = true;
    }
    if let Some(text) = text {
        let existing =
            import::existing_servers(config_file, config_text).map_err(|e| e.to_string())?;
        let file = location.path.display().to_string();
        let read = import::read(location, text, places)?;
        setup.served = read
            .found
            .into_iter()
            // Claude Code's user file also holds other projects' servers: only the ones
            // setup edits count.
            .filter(|f| f.from == file && f.name != NAME)
            .filter(|f| {
                matches!(existing.get(&f.name), Some(Some(there)) if there.same_server(&f.entry))
            })
            .map(|f| Served {
                runs: f.entry.runs(),
                name: f.name,
            })
            .collect();
    }
    Ok(setup)
}

/// The agent's file with Tandem's entry set to run `command` (when given) and the servers
/// named in `remove` taken out; everything else as it was.
pub fn apply(
    agent: &str,
    location: &Location,
    text: Option<&str>,
    command: Option<&str>,
    remove: &[String],
) -> Result<String, String> {
    let key = servers_key(location.format);
    let text = text.unwrap_or("");
    if location.format == Format::Codex {
        return apply_toml(text, command, remove);
    }
    let set: Vec<(String, TandemEntry)> = command
        .map(|c| (NAME.to_string(), TandemEntry::new(agent, c)))
        .into_iter()
        .collect();
    edit_member_text(&location.path, text, key, |raw, indent| {
        edit_entries(&location.path, key, raw, indent, &set, remove)
    })
    .map_err(|e| e.message)
}

/// [`apply`] on Codex's `config.toml`: `[mcp_servers.tandem]`.
fn apply_toml(text: &str, command: Option<&str>, remove: &[String]) -> Result<String, String> {
    use toml_edit::{DocumentMut, Item, Table};
    let mut doc: DocumentMut = text.parse().map_err(|e| format!("not valid TOML: {e}"))?;
    if !doc.contains_key("mcp_servers") {
        // `[mcp_servers.tandem]` alone, without an empty `[mcp_servers]` above it.
        let mut servers = Table::new();
        servers.set_implicit(true);
        doc.insert("mcp_servers", Item::Table(servers));
    }
    // `mcp_servers = { ... }` on one line keeps its entries inline.
    let inline = matches!(doc.get("mcp_servers"), Some(Item::Value(_)));
    let servers = doc["mcp_servers"]
        .as_table_like_mut()
        .ok_or_else(|| "'mcp_servers' is not a table".to_string())?;
    for name in remove {
        servers.remove(name);
    }
    if let Some(command) = command {
        let entry = toml_entry(command);
        let item = match inline {
            true => Item::Value(entry.into_inline_table().into()),
            false => Item::Table(entry),
        };
        servers.insert(NAME, item);
    }
    Ok(doc.to_string())
}

/// `command = "..."`, `args = ["mcp"]`.
fn toml_entry(command: &str) -> toml_edit::Table {
    let mut entry = toml_edit::Table::new();
    entry.insert("command", toml_edit::value(command));
    entry.insert(
        "args",
        toml_edit::value(toml_edit::Array::from_iter(["mcp"])),
    );
    entry
}

/// The `tandem` entry as a user reads it: `"tandem": {...}` or `[mcp_servers.tandem]`
/// and its keys. From `text` (the file's) when given, else `entry` as written.
fn render(format: Format, text: Option<&str>, entry: &impl Serialize) -> Result<String, String> {
    let key = servers_key(format);
    if format == Format::Codex {
        let item = match text {
            Some(text) => {
                let doc: toml_edit::DocumentMut =
                    text.parse().map_err(|e| format!("not valid TOML: {e}"))?;
                doc.get(key)
                    .and_then(|s| s.get(NAME))
                    .cloned()
                    .unwrap_or_default()
            }
            None => {
                let entry = serde_json::to_value(entry).expect("plain data");
                let command = entry["command"].as_str().unwrap_or_default();
                toml_edit::Item::Table(toml_entry(command))
            }
        };
        let mut doc = toml_edit::DocumentMut::new();
        let mut servers = toml_edit::Table::new();
        servers.set_implicit(true);
        servers.insert(NAME, item);
        doc.insert(key, toml_edit::Item::Table(servers));
        return Ok(doc.to_string().trim().to_string());
    }
    let raw = match text {
        Some(text) => scan::object_members(text)
            .and_then(|top| top.into_iter().find(|(k, _)| k == key))
            .and_then(|(_, servers)| scan::object_members(servers))
            .and_then(|s| s.into_iter().find(|(k, _)| k == NAME))
            .map(|(_, raw)| raw.to_string())
            .unwrap_or_default(),
        None => pretty_at(entry, "  ", 0),
    };
    Ok(format!("\"{NAME}\": {raw}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::config::import::tests::places;

    #[test]
    fn each_agent_has_its_files_and_codex_no_project_file() {
        let at = |agent, project| location(&places(), agent, project).map(|l| l.path);
        let cases = [
            ("claude", false, "/home/u/.claude.json"),
            ("claude", true, "/work/app/.mcp.json"),
            ("codex", false, "/home/u/.codex/config.toml"),
            ("gemini", false, "/home/u/.gemini/settings.json"),
            ("gemini", true, "/work/app/.gemini/settings.json"),
            ("vscode", false, "/home/u/.config/Code/User/mcp.json"),
            ("vscode", true, "/work/app/.vscode/mcp.json"),
            ("cursor", false, "/home/u/.cursor/mcp.json"),
            ("cursor", true, "/work/app/.cursor/mcp.json"),
        ];
        for (agent, project, path) in cases {
            assert_eq!(at(agent, project), Ok(path.into()), "{agent} {project}");
        }
        assert!(at("codex", true).unwrap_err().contains("without --project"));
        assert!(at("claude-project", false).unwrap_err().contains("unknown"));
    }

    #[test]
    fn codex_entry_is_added_after_the_rest_and_removed_with_its_subtables() {
        let text = "# mine\nmodel = \"o3\"\n\n[mcp_servers.gh]\ncommand = \"gh-mcp\" # keep\n\n[mcp_servers.gh.env]\nT = \"x\"\n\n[profiles.fast]\nmodel = \"mini\"\n";
        let location = location(&places(), "codex", false).unwrap();
        let added = apply("codex", &location, Some(text), Some("/opt/tandem"), &[]).unwrap();
        // Beside the other servers, each line of the rest as it was.
        let tandem = "[mcp_servers.tandem]\ncommand = \"/opt/tandem\"\nargs = [\"mcp\"]\n";
        assert_eq!(
            added,
            text.replace("[profiles.fast]", &format!("{tandem}\n[profiles.fast]"))
        );
        let removed = apply("codex", &location, Some(&added), None, &["gh".into()]).unwrap();
        assert_eq!(
            removed,
            format!("# mine\nmodel = \"o3\"\n\n{tandem}\n[profiles.fast]\nmodel = \"mini\"\n")
        );
        let inline = "mcp_servers = { gh = { command = \"gh-mcp\" } }\n";
        let added = apply("codex", &location, Some(inline), Some("tandem"), &[]).unwrap();
        let back: toml::Table = toml::from_str(&added).unwrap();
        assert_eq!(
            back["mcp_servers"]["tandem"]["args"][0].as_str(),
            Some("mcp")
        );
        assert_eq!(
            back["mcp_servers"]["gh"]["command"].as_str(),
            Some("gh-mcp")
        );
    }
}
