//! `tandem setup AGENT`: Tandem added to an agent's MCP config, the reverse of `tandem
//! servers import`. The change is shown and confirmed; then the servers Tandem now serves
//! can be taken out of the agent's file, asked separately. What to write is
//! `hub::config::setup`'s; reading, asking and writing are here, as the files are the
//! user's and no daemon takes part.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Args;

use tandem_core::config::Config;
use tandem_core::guarded_file;
use tandem_core::hub::client::describe::printable;
use tandem_core::hub::config::{
    self,
    setup::{self, NAME, SETUP_AGENTS},
};

use super::import::{AGENT_FILE_MAX_BYTES, places, servers, tilde};

#[derive(Args)]
pub struct SetupArgs {
    /// The agent: claude (Claude Code), codex, gemini (Gemini CLI), vscode or cursor.
    #[arg(value_parser = clap::builder::PossibleValuesParser::new(SETUP_AGENTS))]
    agent: String,
    /// The workspace's file (.mcp.json, .vscode/mcp.json, .gemini/settings.json,
    /// .cursor/mcp.json) instead of your own.
    #[arg(long)]
    project: bool,
    /// Show the change only; write nothing.
    #[arg(long, conflicts_with = "yes")]
    dry_run: bool,
    /// Write without asking: add Tandem, and remove the servers it now serves.
    #[arg(long, short)]
    yes: bool,
}

/// `tandem setup`.
pub fn run(config: &Config, args: SetupArgs) -> anyhow::Result<()> {
    let places = places()?;
    let location =
        setup::location(&places, &args.agent, args.project).map_err(anyhow::Error::msg)?;
    let path = &location.path;
    let shown = tilde(&path.display().to_string());
    let write_to = target(path, args.project)?;
    let text = read(path)?;
    let command = tandem_command()?;
    let user_file = tandem_core::user_config::path(&config.home);
    let user_text = config::read_user_file(&user_file)?;
    let plan = setup::plan(
        &args.agent,
        &location,
        text.as_deref(),
        &command,
        &places,
        &user_file,
        user_text.as_deref(),
    )
    .map_err(|e| anyhow::anyhow!("{shown}: {e}"))?;

    let scope = if args.project { ", this project" } else { "" };
    println!("{shown} ({}{scope}):", setup::agent_title(&args.agent));
    let mut set = None;
    if plan.done {
        match (&plan.before, &plan.runs_elsewhere) {
            (None, Some(name)) => println!(
                "already set up: its server '{}' runs Tandem",
                printable(name, 80)
            ),
            _ => println!("already set up: '{NAME}' runs `{command} mcp`"),
        }
    } else {
        println!("  {}.{NAME}", plan.key);
        for line in plan.before.iter().flat_map(|b| b.lines()) {
            println!("- {}", printable(line, 200));
        }
        for line in plan.after.lines() {
            println!("+ {line}");
        }
        set = Some(command.as_str());
    }
    let remove: Vec<String> = plan.served.iter().map(|s| s.name.clone()).collect();
    if !remove.is_empty() {
        println!(
            "Tandem serves {} of this file now (the same in {}):",
            servers(remove.len()),
            tilde(&user_file.display().to_string())
        );
        for s in &plan.served {
            println!("- {}: {}", printable(&s.name, 80), printable(&s.runs, 200));
        }
    }
    if args.dry_run {
        println!("dry run: nothing written");
        return Ok(());
    }

    let mut remove_now = Vec::new();
    if set.is_some() && !confirm(&args, &format!("Add Tandem to {shown}?"))? {
        bail!("not set up: {shown} is unchanged");
    }
    if !remove.is_empty()
        && confirm(
            &args,
            &format!("Remove these {} from {shown}?", servers(remove.len())),
        )?
    {
        remove_now = remove;
    }
    if set.is_none() && remove_now.is_empty() {
        return Ok(());
    }
    let new_text = setup::apply(&args.agent, &location, text.as_deref(), set, &remove_now)
        .map_err(|e| anyhow::anyhow!("{shown}: {e}"))?;
    write(&write_to, path, &new_text).with_context(|| format!("cannot write {shown}"))?;
    if set.is_some() {
        println!(
            "{} now starts Tandem (`{command} mcp`) from {shown}",
            setup::agent_title(&args.agent)
        );
    }
    if !remove_now.is_empty() {
        println!("removed {} from {shown}", servers(remove_now.len()));
    }
    Ok(())
}

/// The user's answer to `question`: yes with `--yes`; refused when nobody can answer.
fn confirm(args: &SetupArgs, question: &str) -> anyhow::Result<bool> {
    if args.yes {
        return Ok(true);
    }
    if !std::io::stdin().is_terminal() {
        bail!(
            "not set up: nobody can confirm (the standard input is not a terminal); run `tandem setup {} --yes` to make the change above, or `--dry-run` to only see it",
            args.agent
        );
    }
    print!("{question} [y/N] ");
    std::io::stdout().flush()?;
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}

/// The agent's file, as text; `None` when it does not exist yet.
fn read(path: &Path) -> anyhow::Result<Option<String>> {
    match guarded_file::read_regular(path, AGENT_FILE_MAX_BYTES) {
        Ok(Some(bytes)) => Ok(Some(
            guarded_file::utf8(bytes).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?,
        )),
        Ok(None) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The file to write for `path`. A user's file may be a symlink (dotfiles kept elsewhere):
/// its target is written. A project's is the repository's, which could point it anywhere:
/// a symlink there is refused.
fn target(path: &Path, project: bool) -> anyhow::Result<PathBuf> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => {
            if project {
                bail!(
                    "{} is a symlink: Tandem does not write a project's file through one; add Tandem to the file it points to by hand",
                    path.display()
                );
            }
            path.canonicalize()
                .with_context(|| format!("{} is a symlink to nothing", path.display()))
        }
        _ => Ok(path.to_path_buf()),
    }
}

/// Writes `text` to `file` atomically, keeping the permissions of the file it replaces.
fn write(file: &Path, shown: &Path, text: &str) -> anyhow::Result<()> {
    let mode = std::fs::metadata(file).ok().map(|m| m.permissions());
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    tandem_core::store::write_atomically(file, text.as_bytes())?;
    if let Some(mode) = mode {
        std::fs::set_permissions(file, mode)?;
    }
    tracing::info!("tandem setup wrote {}", shown.display());
    Ok(())
}

/// How the agent starts Tandem: `tandem` when that name on `PATH` is this binary, else
/// this binary's absolute path.
fn tandem_command() -> anyhow::Result<String> {
    let exe = std::env::current_exe()
        .and_then(|p| p.canonicalize())
        .context("cannot find where this tandem binary is")?;
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(NAME))
            .find(|p| p.is_file())
    });
    match on_path.and_then(|p| p.canonicalize().ok()) {
        Some(found) if found == exe => Ok(NAME.to_string()),
        _ => Ok(exe.display().to_string()),
    }
}
