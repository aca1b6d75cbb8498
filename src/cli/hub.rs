//! `tandem servers` (its `import` is `import.rs`), `tandem prompts`, `tandem prompt`, `tandem trust`: the workspace's
//! downstream MCP servers from the shell.

use std::io::{BufRead, IsTerminal, Write};
use std::time::Duration;

use anyhow::bail;
use clap::Args;
use serde_json::Value;

use tandem_core::calls::{
    self,
    params::{
        ConventionalSetParams, GetPromptParams, HubListParams, HubLoginParams, HubLogoutParams,
        InjectParams, TrustParams,
    },
};
use tandem_core::config::Config;

use super::backend::Backend;
use super::memory::table;

/// How long a listing waits for servers still starting: what is ready by then is listed,
/// the rest is shown as `starting` (a server that hangs at start holds up one listing, not
/// each one: the wait counts from when the server began starting).
pub const CLI_WAIT: Duration = Duration::from_secs(2);

#[derive(Args)]
pub struct ListArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Wait up to this many seconds for servers still starting (default 2).
    #[arg(long, value_name = "SECONDS")]
    wait: Option<f64>,
}

impl ListArgs {
    fn params(&self) -> HubListParams {
        let wait = self
            .wait
            .and_then(|s| Duration::try_from_secs_f64(s).ok())
            .unwrap_or(CLI_WAIT);
        HubListParams {
            wait_ms: Some(wait.as_millis() as u64),
        }
    }
}

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ServersCli {
    #[command(subcommand)]
    command: Option<ServersCommand>,
    #[command(flatten)]
    args: ListArgs,
}

#[derive(clap::Subcommand)]
pub enum ServersCommand {
    /// Each server's state, prompt and tool counts, last error (what plain `tandem servers`
    /// prints).
    List(ListArgs),
    /// Bring the MCP servers of your agents (Claude Code, Codex, Gemini CLI, VS Code) into
    /// your config.json, so that their own config can list only `tandem mcp`: shows what it
    /// will write, and asks.
    Import(super::import::ImportArgs),
    /// Connect to one server as the gateway does, in this process, and show what it offers
    /// (info, capabilities, tools, prompts, resources); `--call TOOL --args JSON` calls a
    /// tool. NAME is a server of this workspace, or give a Streamable HTTP server's URL.
    Check(super::check::CheckArgs),
    /// Sign in to a remote server that asks for it: opens the browser on its sign-in page
    /// (the URL is printed too), waits for your approval, then connects.
    Login(NameArg),
    /// Forget a remote server's sign-in (its tokens) and disconnect it.
    Logout(NameArg),
}

#[derive(Args)]
pub struct NameArg {
    /// The server's name, as `tandem servers` lists it.
    name: String,
}

/// `tandem servers [list]`, `tandem servers import`, `tandem servers check`.
pub fn servers_cli(config: &Config, cli: ServersCli) -> anyhow::Result<()> {
    match cli.command {
        None => servers(config, cli.args),
        Some(ServersCommand::List(args)) => servers(config, args),
        Some(ServersCommand::Import(args)) => super::import::run(config, args),
        Some(ServersCommand::Check(args)) => super::check::run(config, args),
        Some(ServersCommand::Login(arg)) => login(config, arg),
        Some(ServersCommand::Logout(arg)) => logout(config, arg),
    }
}

/// `tandem servers login NAME`: starts the sign-in (the daemon's, when one runs: it keeps
/// the tokens and the connection), says where to approve, then waits for the approval.
fn login(config: &Config, arg: NameArg) -> anyhow::Result<()> {
    let mut backend = Backend::open(config)?;
    let started = backend.call(
        &calls::HUB_LOGIN,
        &HubLoginParams {
            name: arg.name.clone(),
            wait: false,
            attempt: None,
        },
    )?;
    match started.url.as_deref().filter(|u| !u.is_empty()) {
        Some(url) => eprintln!(
            "Signing in to '{}': approve in your browser (opening it now). If it does not \
             open, visit:\n  {url}\nWaiting for the approval...",
            arg.name
        ),
        None => eprintln!("Signing in to '{}'...", arg.name),
    }
    let done = backend.call(
        &calls::HUB_LOGIN,
        &HubLoginParams {
            name: arg.name.clone(),
            wait: true,
            attempt: Some(started.attempt),
        },
    )?;
    let what = done
        .server_info
        .map(|i| format!(" ({i})"))
        .unwrap_or_default();
    println!(
        "Signed in to '{}'{what}: connected, {} tool{}",
        done.server,
        done.tools,
        if done.tools == 1 { "" } else { "s" }
    );
    Ok(())
}

/// `tandem servers logout NAME`.
fn logout(config: &Config, arg: NameArg) -> anyhow::Result<()> {
    let mut backend = Backend::open(config)?;
    let done = backend.call(&calls::HUB_LOGOUT, &HubLogoutParams { name: arg.name })?;
    if done.forgot {
        println!(
            "Signed out of '{}': its tokens are forgotten and it is disconnected",
            done.server
        );
    } else {
        println!(
            "'{}' had no sign-in to forget; it is disconnected",
            done.server
        );
    }
    Ok(())
}

/// `tandem servers`: each server's state, prompt and tool counts, last error.
fn servers(config: &Config, args: ListArgs) -> anyhow::Result<()> {
    let mut backend = Backend::open(config)?;
    let report = backend.call(&calls::HUB_SERVERS, &args.params())?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    for e in &report.errors {
        println!("config error: {e}");
    }
    if report.servers.is_empty() {
        println!(
            "no MCP servers for {} (add them to {})",
            report.workspace,
            report.files.join(" or ")
        );
        return Ok(());
    }
    let mut t = table(&[
        "server",
        "state",
        "prompts",
        "tools",
        "from",
        "runs",
        "last error",
    ]);
    for s in &report.servers {
        let text = |k: &str| s[k].as_str().unwrap_or("").to_string();
        t.add_row(vec![
            text("name"),
            text("state"),
            s["prompts"].to_string(),
            s["tools"].to_string(),
            s["origin"]["kind"].as_str().unwrap_or("").to_string(),
            text("runs"),
            text("last_error"),
        ]);
    }
    println!("{t}");
    Ok(())
}

/// `tandem prompts`: every prompt as the command the editor offers.
pub fn prompts(config: &Config, args: ListArgs) -> anyhow::Result<()> {
    let mut backend = Backend::open(config)?;
    let prompts = backend.call(&calls::HUB_PROMPTS, &args.params())?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&prompts)?);
        return Ok(());
    }
    let waiting = not_ready(&mut backend)?;
    if prompts.is_empty() {
        println!("no prompts (see `tandem servers`)");
        print!("{waiting}");
        return Ok(());
    }
    let mut t = table(&["command", "arguments", "description"]);
    for p in &prompts {
        let args: Vec<String> = p
            .arguments
            .iter()
            .map(|a| {
                if a.required {
                    format!("{}*", a.name)
                } else {
                    a.name.clone()
                }
            })
            .collect();
        t.add_row(vec![
            p.command.clone(),
            args.join(" "),
            p.description.clone().unwrap_or_default(),
        ]);
    }
    println!("{t}\n* required");
    print!("{waiting}");
    Ok(())
}

/// The servers whose prompts are not listed because they do not run (yet), one line each
/// with their state and last error; empty when every server that should run does.
fn not_ready(backend: &mut Backend) -> anyhow::Result<String> {
    let now = HubListParams { wait_ms: Some(0) };
    let report = backend.call(&calls::HUB_SERVERS, &now)?;
    let mut out = String::new();
    for s in &report.servers {
        let state = s["state"].as_str().unwrap_or("");
        if matches!(state, "ready" | "idle" | "disabled" | "stopped") {
            continue;
        }
        let error = s["last_error"].as_str().map(|e| format!(": {e}"));
        out.push_str(&format!(
            "  {} ({state}){}\n",
            s["name"].as_str().unwrap_or(""),
            error.unwrap_or_default()
        ));
    }
    if !out.is_empty() {
        out.insert_str(0, "not listed (see `tandem servers`):\n");
    }
    Ok(out)
}

#[derive(Args)]
pub struct TrustArgs {
    /// Approve without asking.
    #[arg(long, short)]
    yes: bool,
    /// With --yes: approve only if the file still has this SHA-256, the one shown by an
    /// earlier `tandem trust --json` (what a script reviewed).
    #[arg(long, requires = "yes", value_name = "HEX")]
    sha256: Option<String>,
    /// Withdraw the approval.
    #[arg(long, conflicts_with = "yes")]
    revoke: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// `tandem trust`: shows what the workspace's `.mcp.json` would run, and approves it.
pub fn trust(config: &Config, args: TrustArgs) -> anyhow::Result<()> {
    let mut backend = Backend::open(config)?;
    let show = backend.call(
        &calls::HUB_TRUST,
        &TrustParams {
            action: None,
            sha256: None,
        },
    )?;
    let Some(file) = show.file.clone() else {
        bail!("this workspace has no .mcp.json");
    };
    let action = if args.revoke {
        Some("revoke")
    } else if show.trusted && !args.yes {
        None
    } else if args.yes {
        Some("approve")
    } else {
        if !args.json {
            println!("{file} would run:");
            for s in &show.servers {
                match (&s.runs, &s.error) {
                    (Some(runs), _) => println!("  {}: {runs}", s.name),
                    (None, Some(e)) => println!("  {}: (not runnable: {e})", s.name),
                    (None, None) => println!("  {}", s.name),
                }
                if !s.env.is_empty() {
                    println!("    with environment: {}", s.env.join(", "));
                }
            }
        }
        if !std::io::stdin().is_terminal() {
            if args.json {
                // What a script reviews before `--yes --sha256`.
                println!("{}", serde_json::to_string_pretty(&show)?);
                return Ok(());
            }
            bail!("not approved: run `tandem trust --yes` to approve {file} as it is now");
        }
        print!("Trust this file and run these commands? [y/N] ");
        std::io::stdout().flush()?;
        let mut answer = String::new();
        std::io::stdin().lock().read_line(&mut answer)?;
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            bail!("not approved");
        }
        Some("approve")
    };
    let report = match action {
        // What is approved is what was shown (or named): not a file changed since.
        Some(a) => backend.call(
            &calls::HUB_TRUST,
            &TrustParams {
                action: Some(a.into()),
                sha256: args.sha256.clone().or_else(|| show.sha256.clone()),
            },
        )?,
        None => show,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        match report.done.as_deref() {
            Some("approved") => println!(
                "trusted {file} (sha256 {})",
                report.sha256.unwrap_or_default()
            ),
            Some("revoked") => println!("no longer trusted: {file}"),
            _ => println!(
                "{file} is trusted as it is (sha256 {})",
                report.sha256.unwrap_or_default()
            ),
        }
    }
    Ok(())
}

#[derive(Args)]
pub struct PromptArgs {
    /// `/server:prompt`, or a whole command line in one quoted word
    /// (`'/server:prompt title="two words"'`).
    command: String,
    /// Arguments as `name=value`, one per word (your shell's quoting applies).
    arguments: Vec<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// A prompt command's server, prompt and arguments.
type CommandParts = (String, String, serde_json::Map<String, Value>);

/// A prompt command given as words: `/server:prompt` then `name=value` words (the shell did
/// the quoting). `None` when there are no argument words: the first word is then a whole
/// command line, for the hub's parser.
fn split_command(command: &str, words: &[String]) -> anyhow::Result<Option<CommandParts>> {
    if words.is_empty() {
        return Ok(None);
    }
    let name = command.trim_start_matches('/');
    let Some((server, prompt)) = name.split_once(':') else {
        bail!("'{command}' is not a prompt command: use /server:prompt");
    };
    let mut arguments = serde_json::Map::new();
    for a in words {
        let Some((k, v)) = a.split_once('=') else {
            bail!("'{a}' is not name=value");
        };
        if arguments
            .insert(k.to_string(), Value::String(v.to_string()))
            .is_some()
        {
            bail!("argument '{k}' is given twice");
        }
    }
    Ok(Some((server.to_string(), prompt.to_string(), arguments)))
}

/// `tandem prompt /server:prompt name=value ...`: runs a downstream prompt and prints its
/// messages.
pub fn prompt(config: &Config, args: PromptArgs) -> anyhow::Result<()> {
    let params = match split_command(&args.command, &args.arguments)? {
        None => GetPromptParams {
            command: Some(args.command.clone()),
            ..GetPromptParams::default()
        },
        Some((server, prompt, arguments)) => GetPromptParams {
            command: None,
            server: Some(server),
            prompt: Some(prompt),
            arguments,
        },
    };
    let mut backend = Backend::open(config)?;
    let run = backend.call(&calls::HUB_GET_PROMPT, &params)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&run)?);
        return Ok(());
    }
    for m in &run.messages {
        let role = m["role"].as_str().unwrap_or("?");
        let content = &m["content"];
        let text = match content["type"].as_str() {
            Some("text") => content["text"].as_str().unwrap_or("").to_string(),
            Some("image") => format!("[image {}]", content["mimeType"].as_str().unwrap_or("")),
            Some("resource") => format!(
                "[resource {}]\n{}",
                content["resource"]["uri"].as_str().unwrap_or(""),
                content["resource"]["text"].as_str().unwrap_or("")
            ),
            _ => content.to_string(),
        };
        println!("[{role}]\n{text}\n");
    }
    Ok(())
}

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct InjectCli {
    #[command(subcommand)]
    command: Option<InjectCommand>,
    #[command(flatten)]
    args: InjectArgs,
}

#[derive(clap::Subcommand)]
pub enum InjectCommand {
    /// Every conventional prompt of the workspace with its settings: on or off, priority,
    /// limits, arguments and their values (missing required ones keep it out).
    Prompts(ListArgs),
    /// Change one conventional prompt's settings in your config.json:
    /// `tandem inject set '/notes:user_prompt focus=auth depth=2'`, `--unset depth`,
    /// `--disable`.
    Set(SetArgs),
}

#[derive(Args)]
pub struct SetArgs {
    /// `/server:prompt`, or a whole command line in one quoted word
    /// (`'/notes:user_prompt focus="two words"'`).
    command: String,
    /// Arguments to set as `name=value`, one per word (your shell's quoting applies).
    arguments: Vec<String>,
    /// Remove an argument's value (repeatable).
    #[arg(long, value_name = "NAME")]
    unset: Vec<String>,
    /// Turn the prompt on.
    #[arg(long)]
    enable: bool,
    /// Turn the prompt off.
    #[arg(long, conflicts_with = "enable")]
    disable: bool,
    /// Print the prompt's settings as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct InjectArgs {
    /// The chat thread's own system prompt, merged into the system message.
    #[arg(long)]
    thread_system: Option<String>,
    /// The model the messages are for (prompts limited to models apply only when it matches).
    #[arg(long)]
    model: Option<String>,
    /// The chat thread's id or name (prompts limited to threads apply only when it matches).
    #[arg(long)]
    thread: Option<String>,
    /// A JSON file (`-`: stdin) holding the conversation, an array of OpenAI chat messages:
    /// the JSON then has `with_conversation`, the injected messages followed by it.
    #[arg(long, value_name = "FILE")]
    conversation: Option<std::path::PathBuf>,
    /// Print the messages and token counts as JSON instead of a preview.
    #[arg(long)]
    json: bool,
}

/// `tandem inject`, `tandem inject prompts`, `tandem inject set`.
pub fn inject_cli(config: &Config, cli: InjectCli) -> anyhow::Result<()> {
    match cli.command {
        None => inject(config, cli.args),
        Some(InjectCommand::Prompts(args)) => {
            let mut backend = Backend::open(config)?;
            let list = backend.call(&calls::HUB_CONVENTIONAL, &args.params())?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else {
                print_conventional(&list);
            }
            Ok(())
        }
        Some(InjectCommand::Set(args)) => {
            let mut backend = Backend::open(config)?;
            let enabled = match (args.enable, args.disable) {
                (true, _) => Some(true),
                (_, true) => Some(false),
                _ => None,
            };
            let mut params = ConventionalSetParams {
                unset: args.unset,
                enabled,
                ..Default::default()
            };
            match split_command(&args.command, &args.arguments)? {
                None => params.command = Some(args.command),
                Some((server, prompt, arguments)) => {
                    (params.server, params.prompt, params.arguments) =
                        (Some(server), Some(prompt), arguments);
                }
            }
            let prompt = backend.call(&calls::HUB_CONVENTIONAL_SET, &params)?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&prompt)?);
            } else {
                print_conventional(std::slice::from_ref(&prompt));
            }
            Ok(())
        }
    }
}

fn print_conventional(list: &[tandem_core::hub::ConventionalPrompt]) {
    if list.is_empty() {
        println!("no conventional prompts (see `tandem servers`)");
        return;
    }
    let mut t = table(&["prompt", "kind", "state", "priority", "arguments"]);
    for c in list {
        let mut state = vec![if !c.enabled {
            "off".to_string()
        } else if !c.in_workspace {
            "not in this workspace".to_string()
        } else if !c.missing.is_empty() {
            format!("needs {}", c.missing.join(", "))
        } else {
            "on".to_string()
        }];
        if !c.models.is_empty() {
            state.push(format!("models: {}", c.models.join(", ")));
        }
        if !c.threads.is_empty() {
            state.push(format!("threads: {}", c.threads.join(", ")));
        }
        let arguments: Vec<String> = c
            .arguments
            .iter()
            .map(|a| {
                let name = if a.required {
                    format!("{}*", a.name)
                } else {
                    a.name.clone()
                };
                match &a.value {
                    Some(v) => format!(
                        "{name}={}",
                        tandem_core::hub::prompts::command::quote_value(v)
                    ),
                    None => name,
                }
            })
            .collect();
        t.add_row(vec![
            c.command.clone(),
            c.kind.clone(),
            state.join("\n"),
            c.priority.to_string(),
            arguments.join(" "),
        ]);
    }
    println!("{t}\n* required");
}

/// `tandem inject`: the conventional prompts injection for this workspace.
fn inject(config: &Config, args: InjectArgs) -> anyhow::Result<()> {
    let conversation = match &args.conversation {
        None => None,
        Some(file) => {
            let text = super::read_input(Some(file))?;
            let messages: Vec<Value> = serde_json::from_str(&text).map_err(|e| {
                anyhow::anyhow!("{}: not a JSON array of chat messages: {e}", file.display())
            })?;
            Some(messages)
        }
    };
    let mut backend = Backend::open(config)?;
    let injection = backend.call(
        &calls::HUB_INJECT,
        &InjectParams {
            thread_system: args.thread_system,
            model: args.model,
            thread: args.thread,
            conversation,
        },
    )?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&injection)?);
    } else {
        print!(
            "{}",
            tandem_core::hub::prompts::inject::render_preview(&injection)
        );
    }
    Ok(())
}
