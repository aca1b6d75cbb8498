//! `tandem servers check NAME|URL`: one server as Tandem sees it, connected in this
//! process the way the gateway connects it (`hub::client::check`): its info,
//! capabilities, tools, prompts and resources, and one tool call on request.
//!
//! Everything shown comes from the server, which may be anyone's: the human view cuts long
//! texts and escapes what a terminal would act on (`describe::printable`); the JSON is
//! whole, with those characters escaped as JSON escapes.

use std::io::IsTerminal;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use clap::Args;
use rmcp::model::{ElicitResult, ElicitationAction};
use serde_json::{Value, json};

use tandem_core::calls::{self, CallError, params::TrustParams};
use tandem_core::config::Config;
use tandem_core::hub::HubError;
use tandem_core::hub::client::ask::{Asker, AskerSlot, Fallback, Form, Pending};
use tandem_core::hub::client::check::{self, Checked};
use tandem_core::hub::client::describe::{is_unsafe, printable};
use tandem_core::hub::client::oauth::{Auth, Browser, TokenStore, is_client_metadata_url};
use tandem_core::hub::config::{self, Origin, ServerConfig, Transport};

use super::backend::Backend;
use super::memory::table;

/// How much of a description, a title or a name the tables show.
const CELL_CHARS: usize = 160;
/// How much of the server's instructions is shown.
const INSTRUCTIONS_CHARS: usize = 4000;
/// How many rows each table shows (`--json` has them all).
const MAX_ROWS: usize = 200;
/// How much of a tool's text result is shown.
const RESULT_CHARS: usize = 100_000;

#[derive(Args)]
pub struct CheckArgs {
    /// A server of this workspace (its name in config.json or .mcp.json), or the URL of a
    /// Streamable HTTP server.
    target: String,
    /// Call this tool once connected, and print its result (exit 1 if it fails).
    #[arg(long, value_name = "TOOL")]
    call: Option<String>,
    /// The tool's arguments, a JSON object.
    #[arg(long, value_name = "JSON", requires = "call")]
    args: Option<String>,
    /// With a URL: the client ID registered for Tandem with the server's authorization
    /// server, if it does not take registrations (a named server has it in its entry, as
    /// `oauth.clientId`).
    #[arg(long, value_name = "ID")]
    client_id: Option<String>,
    /// With --client-id: its secret, if it has one.
    #[arg(long, value_name = "SECRET", requires = "client_id")]
    client_secret: Option<String>,
    /// With a URL: the HTTPS URL of a Client ID Metadata Document for Tandem, used as its
    /// client ID where the authorization server takes such documents (a named server has
    /// it in its entry, as `oauth.clientMetadataUrl`).
    #[arg(long, value_name = "URL")]
    client_metadata_url: Option<String>,
    /// How long the server has to start and to answer each request, in seconds (default:
    /// the entry's own limits).
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<f64>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Accept a form the server asks for at once, every field with a default set to it,
    /// rather than asking each field on the terminal.
    #[arg(long)]
    accept_defaults: bool,
}

/// `tandem servers check`.
pub fn run(config: &Config, args: CheckArgs) -> anyhow::Result<()> {
    let call = match &args.call {
        None => None,
        Some(tool) => {
            let arguments = match &args.args {
                None => serde_json::Map::new(),
                Some(text) => match serde_json::from_str::<Value>(text) {
                    Ok(Value::Object(map)) => map,
                    Ok(_) => bail!("--args must be a JSON object, like '{{\"a\": 1}}'"),
                    Err(e) => bail!("--args is not valid JSON: {e}"),
                },
            };
            Some(rmcp::model::CallToolRequestParams::new(tool.clone()).with_arguments(arguments))
        }
    };
    let (mut entry, trusted) = entry(config, &args.target)?;
    if let Some(secs) = args.timeout {
        let Ok(limit) = Duration::try_from_secs_f64(secs) else {
            bail!("--timeout must be a number of seconds");
        };
        entry.start_timeout = limit;
        entry.timeout = limit;
    }
    // Asked for by name: a server turned off is still looked at.
    entry.disabled = false;
    if let Some(Transport::Http { oauth, .. }) = &mut entry.transport {
        if args.client_id.is_some() {
            oauth.client_id = args.client_id.clone();
            oauth.client_secret = args.client_secret.clone();
        }
        if let Some(url) = &args.client_metadata_url {
            if !is_client_metadata_url(url) {
                bail!("--client-metadata-url must be an https:// URL with a path");
            }
            oauth.client_metadata_url = Some(url.clone());
        }
    }
    // A sign-in opens the browser; the URL is said too, for when it does not open.
    let name = entry.name.clone();
    let auth = Auth {
        store: TokenStore::in_data_dir(&config.home),
        browser: Browser::system(),
        on_url: Arc::new(move |_: &str, url: &str| {
            eprintln!(
                "Signing in to '{}': approve in your browser (opening it now). If it does not \
                 open, visit:\n  {}",
                printable(&name, CELL_CHARS),
                printable(url, 2000)
            );
        }),
    };
    let fallback = Fallback {
        root: super::workspace_root(None).unwrap_or_else(|_| std::env::temp_dir()),
        asker: AskerSlot::default(),
    };
    fallback.asker.set(Some(Arc::new(TerminalAsker {
        accept_defaults: args.accept_defaults,
    })));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let checked = runtime.block_on(check::check(entry, trusted, auth, fallback, call));
    // A question left on the terminal holds a thread reading stdin: do not wait for it.
    runtime.shutdown_background();
    let checked = checked.map_err(CallError::from)?;
    let failed = match &checked.call {
        Some((_, Ok(result))) => result.is_error == Some(true),
        Some((_, Err(_))) => true,
        None => false,
    };
    if args.json {
        println!("{}", json_for_terminal(&as_json(&checked)?));
    } else {
        print!("{}", render(&checked));
    }
    match &checked.call {
        Some((_, Err(e))) => Err(CallError::from(e.clone()).into()),
        Some((tool, Ok(_))) if failed => {
            bail!(
                "tool '{}' answered with an error (isError)",
                printable(tool, CELL_CHARS)
            )
        }
        _ => Ok(()),
    }
}

/// The entry to connect: the URL as a server of its own, else the workspace's server of
/// that name; and whether it may run (a workspace file's only once trusted).
fn entry(config: &Config, target: &str) -> anyhow::Result<(ServerConfig, bool)> {
    let user_file = tandem_core::user_config::path(&config.home);
    if target.contains("://") {
        let entry = config::url_entry(target, &user_file).map_err(|e| {
            CallError::from(HubError::InvalidArgument(format!(
                "Invalid argument 'target': '{}' {}",
                printable(target, CELL_CHARS),
                e.message
            )))
        })?;
        return Ok((entry, true));
    }
    let root = super::workspace_root(None)?;
    let env = |var: &str| std::env::var(var).ok();
    let untrusted = config::load(&user_file, &root, &env, &|_: &Path, _: &str| false);
    let from_workspace = untrusted
        .servers
        .get(target)
        .is_some_and(|s| matches!(s.origin, Origin::Workspace(_)))
        || untrusted.held_back.iter().any(|s| s.name == target);
    let loaded = if from_workspace {
        // Whether the file is approved is in the data dir: the daemon's, or opened here.
        let shown = Backend::open(config)?.call(
            &calls::HUB_TRUST,
            &TrustParams {
                action: None,
                sha256: None,
            },
        )?;
        let approved = |_: &Path, content: &str| {
            shown.trusted
                && shown.sha256.as_deref() == Some(config::trust::digest(content).as_str())
        };
        config::load(&user_file, &root, &env, &approved)
    } else {
        untrusted
    };
    let Some(entry) = loaded.servers.get(target).cloned() else {
        let mut names: Vec<&str> = loaded.servers.keys().map(String::as_str).collect();
        names.sort_unstable();
        let known = if names.is_empty() {
            "it has none".to_string()
        } else {
            format!("it has {}", names.join(", "))
        };
        return Err(CallError::from(HubError::ServerNotFound(format!(
            "no server '{}' in {} or {} ({known}); give a name, or a server's http(s) URL",
            printable(target, CELL_CHARS),
            user_file.display(),
            root.join(config::WORKSPACE_FILE).display()
        )))
        .into());
    };
    let trusted = match entry.origin {
        Origin::User(_) => true,
        Origin::Workspace(_) => loaded.workspace_trusted,
    };
    Ok((entry, trusted))
}

/// The whole report as JSON, the call's result or error included.
fn as_json(checked: &Checked) -> anyhow::Result<Value> {
    let mut value = serde_json::to_value(checked)?;
    if let Some((tool, outcome)) = &checked.call {
        value["call"] = match outcome {
            Ok(result) => json!({"tool": tool, "result": result}),
            Err(e) => json!({"tool": tool, "error": {
                "code": e.code(), "message": e.to_string(), "details": e.details()
            }}),
        };
    }
    Ok(value)
}

/// Pretty JSON in which no character a terminal acts on appears raw: serde_json escapes
/// the C0 controls itself; DEL, the C1 controls and the bidirectional overrides (which can
/// only be inside strings) become `\uXXXX` escapes.
fn json_for_terminal(value: &Value) -> String {
    let text = serde_json::to_string_pretty(value).expect("JSON values serialise");
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if is_unsafe(c) && !c.is_ascii_control() || c == '\u{7f}' {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// The human view: the server, then a table each of tools, prompts and resources, then the
/// call's result.
fn render(c: &Checked) -> String {
    let cell = |text: &str| printable(text, CELL_CHARS);
    let mut out = String::new();
    let mut line = |label: &str, value: String| out.push_str(&format!("{label:<14}{value}\n"));
    match &c.server_info {
        Some(info) => line(
            "server",
            format!(
                "{} {}{}",
                cell(&info.name),
                cell(&info.version),
                info.title
                    .as_deref()
                    .map(|t| format!(" ({})", cell(t)))
                    .unwrap_or_default()
            ),
        ),
        None => line("server", "(it did not name itself)".into()),
    }
    if let Some(runs) = &c.runs {
        line("runs", cell(runs));
    }
    line(
        "protocol",
        c.protocol_version.as_deref().map(cell).unwrap_or_default(),
    );
    line(
        "capabilities",
        c.capabilities
            .as_ref()
            .map(capabilities)
            .unwrap_or_default(),
    );
    if let Some(text) = c.instructions.as_deref().filter(|t| !t.trim().is_empty()) {
        out.push_str("instructions\n");
        out.push_str(&indented(text, INSTRUCTIONS_CHARS));
    }

    out.push_str(&format!("\ntools ({})\n", c.tools.len()));
    if !c.tools.is_empty() {
        let mut t = table(&["name", "description", "arguments"]);
        for tool in c.tools.iter().take(MAX_ROWS) {
            t.add_row(vec![
                cell(&tool.name),
                cell(tool.description.as_deref().unwrap_or("")),
                cell(&arguments_of(&tool.input_schema)),
            ]);
        }
        out.push_str(&format!("{t}\n{}", more(c.tools.len())));
    }
    out.push_str(&format!("\nprompts ({})\n", c.prompts.len()));
    if !c.prompts.is_empty() {
        let mut t = table(&["name", "description", "arguments"]);
        for p in c.prompts.iter().take(MAX_ROWS) {
            let args: Vec<String> = p
                .arguments
                .iter()
                .flatten()
                .map(|a| {
                    let star = if a.required == Some(true) { "*" } else { "" };
                    format!("{}{star}", a.name)
                })
                .collect();
            t.add_row(vec![
                cell(&p.name),
                cell(p.description.as_deref().unwrap_or("")),
                cell(&args.join(" ")),
            ]);
        }
        out.push_str(&format!("{t}\n{}", more(c.prompts.len())));
    }
    out.push_str(&format!("\nresources ({})\n", c.resources.len()));
    if !c.resources.is_empty() {
        let mut t = table(&["uri", "name", "type"]);
        for r in c.resources.iter().take(MAX_ROWS) {
            t.add_row(vec![
                cell(&r.uri),
                cell(&r.name),
                cell(r.mime_type.as_deref().unwrap_or("")),
            ]);
        }
        out.push_str(&format!("{t}\n{}", more(c.resources.len())));
    }
    if !c.tools.is_empty() || !c.prompts.is_empty() {
        out.push_str("* required\n");
    }
    if let Some((tool, outcome)) = &c.call {
        out.push_str(&format!("\ncall {}\n", cell(tool)));
        match outcome {
            Ok(result) => out.push_str(&call_result(result)),
            Err(_) => out.push_str("  (failed: see below)\n"),
        }
    }
    out
}

/// A tool's result, content by content.
fn call_result(result: &rmcp::model::CallToolResult) -> String {
    let mut out = String::new();
    if result.is_error == Some(true) {
        out.push_str("  (isError: the tool failed)\n");
    }
    for content in &result.content {
        let value = serde_json::to_value(content).unwrap_or(Value::Null);
        let text = |k: &str| value[k].as_str().unwrap_or("").to_string();
        match value["type"].as_str() {
            Some("text") => out.push_str(&indented(&text("text"), RESULT_CHARS)),
            Some(kind @ ("image" | "audio")) => out.push_str(&format!(
                "  [{kind} {}, {} bytes of base64]\n",
                printable(&text("mimeType"), CELL_CHARS),
                text("data").len()
            )),
            Some("resource") => {
                let resource = &value["resource"];
                out.push_str(&format!(
                    "  [resource {}]\n",
                    printable(resource["uri"].as_str().unwrap_or(""), CELL_CHARS)
                ));
                if let Some(body) = resource["text"].as_str() {
                    out.push_str(&indented(body, RESULT_CHARS));
                }
            }
            Some("resource_link") => out.push_str(&format!(
                "  [link {}]\n",
                printable(&text("uri"), CELL_CHARS)
            )),
            other => out.push_str(&format!(
                "  [{} content]\n",
                printable(other.unwrap_or("unknown"), 40)
            )),
        }
    }
    if let Some(structured) = &result.structured_content {
        out.push_str("  structured content:\n");
        let pretty = json_for_terminal(structured);
        out.push_str(&indented(&pretty, RESULT_CHARS));
    }
    out
}

/// The names of a tool's arguments (required ones starred), from its input schema.
fn arguments_of(schema: &serde_json::Map<String, Value>) -> String {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| {
            p.keys()
                .map(|k| {
                    if required.contains(&k.as_str()) {
                        format!("{k}*")
                    } else {
                        k.clone()
                    }
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

/// What the server declares it can do, in words.
fn capabilities(c: &rmcp::model::ServerCapabilities) -> String {
    let v = serde_json::to_value(c).unwrap_or(Value::Null);
    let Some(all) = v.as_object() else {
        return String::new();
    };
    let mut words = Vec::new();
    for (name, value) in all {
        let flags: Vec<String> = value
            .as_object()
            .map(|o| {
                o.iter()
                    .filter(|(_, v)| v.as_bool() == Some(true))
                    .map(|(k, _)| k.clone())
                    .collect()
            })
            .unwrap_or_default();
        let name = printable(name, 40);
        if flags.is_empty() {
            words.push(name);
        } else {
            words.push(format!("{name} ({})", printable(&flags.join(", "), 80)));
        }
    }
    if words.is_empty() {
        "none".to_string()
    } else {
        words.join(", ")
    }
}

/// A multi-line text, each line escaped and indented, at most `max_chars` in all.
fn indented(text: &str, max_chars: usize) -> String {
    let mut out = String::new();
    let mut left = max_chars;
    for line in text.lines() {
        if left == 0 {
            out.push_str("  …\n");
            break;
        }
        let shown = printable(line, left);
        left = left.saturating_sub(line.chars().count().max(1));
        out.push_str(&format!("  {shown}\n"));
    }
    out
}

fn more(count: usize) -> String {
    if count > MAX_ROWS {
        format!("… and {} more (see --json)\n", count - MAX_ROWS)
    } else {
        String::new()
    }
}

/// Answers a server's form on the terminal: each field asked on stderr and read from
/// stdin, its default kept on an empty line; or at once with the defaults
/// (`--accept-defaults`), SEP-1034's client defaults for omitted fields. With neither a
/// terminal nor the flag, there is no one to ask, and the form is declined.
struct TerminalAsker {
    accept_defaults: bool,
}

impl Asker for TerminalAsker {
    fn ask(&self, form: Form) -> Pending<Option<ElicitResult>> {
        let accept_defaults = self.accept_defaults;
        Box::pin(async move {
            let fields = fields(&form);
            if accept_defaults {
                let content = fields
                    .into_iter()
                    .filter_map(|f| Some((f.name, f.default?)))
                    .collect();
                return Some(accepted(content));
            }
            if !std::io::stdin().is_terminal() {
                return None;
            }
            tokio::task::spawn_blocking(move || ask_on_terminal(&form, fields))
                .await
                .ok()
        })
    }
}

/// One field of a form, as asked.
struct Field {
    name: String,
    label: String,
    kind: String,
    default: Option<Value>,
    choices: Vec<String>,
}

fn fields(form: &Form) -> Vec<Field> {
    let schema = serde_json::to_value(&form.schema).unwrap_or_default();
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return Vec::new();
    };
    properties
        .iter()
        .map(|(name, p)| {
            let text = |key: &str| p.get(key).and_then(Value::as_str).map(str::to_string);
            let label = match (text("title"), text("description")) {
                (Some(t), Some(d)) => format!("{t} ({d})"),
                (Some(t), None) => t,
                (None, Some(d)) => format!("{name} ({d})"),
                (None, None) => name.clone(),
            };
            let mut choices: Vec<String> = p
                .get("enum")
                .and_then(Value::as_array)
                .map(|e| {
                    e.iter()
                        .filter_map(|v| v.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            if let Some(one_of) = p.get("oneOf").and_then(Value::as_array) {
                choices.extend(
                    one_of
                        .iter()
                        .filter_map(|o| o.get("const").and_then(Value::as_str).map(str::to_string)),
                );
            }
            Field {
                name: name.clone(),
                label,
                kind: text("type").unwrap_or_else(|| "string".into()),
                default: p.get("default").cloned(),
                choices,
            }
        })
        .collect()
}

fn accepted(content: serde_json::Map<String, Value>) -> ElicitResult {
    let mut result = ElicitResult::new(ElicitationAction::Accept);
    result.content = Some(Value::Object(content));
    result
}

/// Asks each field in turn; the end of stdin cancels the form.
fn ask_on_terminal(form: &Form, fields: Vec<Field>) -> ElicitResult {
    eprintln!(
        "Server '{}' asks: {}",
        printable(&form.server, CELL_CHARS),
        printable(&form.message, INSTRUCTIONS_CHARS)
    );
    let mut content = serde_json::Map::new();
    let stdin = std::io::stdin();
    for field in fields {
        loop {
            let choices = if field.choices.is_empty() {
                String::new()
            } else {
                format!(" {{{}}}", printable(&field.choices.join(", "), CELL_CHARS))
            };
            let default = match &field.default {
                Some(Value::String(s)) => format!(" [{}]", printable(s, CELL_CHARS)),
                Some(v) => format!(" [{}]", printable(&v.to_string(), CELL_CHARS)),
                None => String::new(),
            };
            eprint!(
                "  {}{choices}{default}: ",
                printable(&field.label, CELL_CHARS)
            );
            let mut line = String::new();
            match stdin.read_line(&mut line) {
                Ok(0) | Err(_) => {
                    eprintln!();
                    return ElicitResult::new(ElicitationAction::Cancel);
                }
                Ok(_) => {}
            }
            let line = line.trim();
            if line.is_empty() {
                if let Some(d) = &field.default {
                    content.insert(field.name.clone(), d.clone());
                }
                break;
            }
            match typed(&field, line) {
                Ok(v) => {
                    content.insert(field.name.clone(), v);
                    break;
                }
                Err(why) => eprintln!("  {why}"),
            }
        }
    }
    accepted(content)
}

/// `line` as a value of the field's type.
fn typed(field: &Field, line: &str) -> Result<Value, String> {
    match field.kind.as_str() {
        "integer" => line
            .parse::<i64>()
            .map(Value::from)
            .map_err(|_| "type a whole number".to_string()),
        "number" => line
            .parse::<f64>()
            .ok()
            .and_then(|n| serde_json::Number::from_f64(n).map(Value::Number))
            .ok_or_else(|| "type a number".to_string()),
        "boolean" => match line.to_ascii_lowercase().as_str() {
            "y" | "yes" | "true" => Ok(Value::Bool(true)),
            "n" | "no" | "false" => Ok(Value::Bool(false)),
            _ => Err("type yes or no".to_string()),
        },
        "array" => Ok(Value::Array(
            line.split(',')
                .map(|s| Value::String(s.trim().to_string()))
                .collect(),
        )),
        _ if !field.choices.is_empty() && !field.choices.iter().any(|c| c == line) => {
            Err("type one of the choices".to_string())
        }
        _ => Ok(Value::String(line.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_output_escapes_what_a_terminal_acts_on() {
        let value = json!({"d": "a\u{1b}[31mb\u{9b}c\u{7f}d\u{202e}e"});
        let text = json_for_terminal(&value);
        assert!(
            text.contains(r#""a\u001b[31mb\u009bc\u007fd\u202ee""#),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), value);
    }

    #[test]
    fn long_texts_are_cut_line_by_line() {
        let text = format!("one\n{}\nthree", "x".repeat(50));
        assert_eq!(
            indented(&text, 20),
            format!("  one\n  {}…\n  …\n", "x".repeat(17))
        );
    }
}
