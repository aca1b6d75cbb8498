//! `tandem servers`, `tandem prompts`, `tandem prompt`, `tandem trust`: the workspace's
//! downstream MCP servers from the shell.

use std::io::{BufRead, IsTerminal, Write};

use anyhow::bail;
use clap::Args;
use serde_json::Value;

use tandem::calls::{
    self,
    params::{GetPromptParams, HubListParams, InjectParams, TrustParams},
};
use tandem::config::Config;

use super::backend::Backend;
use super::memory::table;

#[derive(Args)]
pub struct ListArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// `tandem servers`: each server's state, prompt and tool counts, last error.
pub fn servers(config: &Config, args: ListArgs) -> anyhow::Result<()> {
    let mut backend = Backend::open(config)?;
    let report = backend.call(&calls::HUB_SERVERS, &HubListParams::default())?;
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
    let prompts = backend.call(&calls::HUB_PROMPTS, &HubListParams::default())?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&prompts)?);
        return Ok(());
    }
    if prompts.is_empty() {
        println!("no prompts (see `tandem servers`)");
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
    Ok(())
}

#[derive(Args)]
pub struct TrustArgs {
    /// Approve without asking.
    #[arg(long, short)]
    yes: bool,
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
    let show = backend.call(&calls::HUB_TRUST, &TrustParams { action: None })?;
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
        Some(a) => backend.call(
            &calls::HUB_TRUST,
            &TrustParams {
                action: Some(a.into()),
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

/// `tandem prompt /server:prompt name=value ...`: runs a downstream prompt and prints its
/// messages.
pub fn prompt(config: &Config, args: PromptArgs) -> anyhow::Result<()> {
    let params = if args.arguments.is_empty() {
        GetPromptParams {
            command: Some(args.command.clone()),
            ..GetPromptParams::default()
        }
    } else {
        let name = args.command.trim_start_matches('/');
        let Some((server, prompt)) = name.split_once(':') else {
            bail!(
                "'{}' is not a prompt command: use /server:prompt",
                args.command
            );
        };
        let mut arguments = serde_json::Map::new();
        for a in &args.arguments {
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
        GetPromptParams {
            command: None,
            server: Some(server.into()),
            prompt: Some(prompt.into()),
            arguments,
        }
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
pub struct InjectArgs {
    /// The chat thread's own system prompt, merged into the system message.
    #[arg(long)]
    thread_system: Option<String>,
    /// The model the messages are for (prompts limited to models apply only when it matches).
    #[arg(long)]
    model: Option<String>,
    /// Print the messages and token counts as JSON instead of a preview.
    #[arg(long)]
    json: bool,
}

/// `tandem inject`: the conventional prompts injection for this workspace.
pub fn inject(config: &Config, args: InjectArgs) -> anyhow::Result<()> {
    let mut backend = Backend::open(config)?;
    let injection = backend.call(
        &calls::HUB_INJECT,
        &InjectParams {
            thread_system: args.thread_system,
            model: args.model,
        },
    )?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&injection)?);
    } else {
        print!("{}", tandem::hub::inject::render_preview(&injection));
    }
    Ok(())
}
