//! `tandem servers import`: the MCP servers of the user's agents (Claude Code, Codex, Gemini
//! CLI, VS Code, Cursor) into Tandem's `config.json`, so that the agent's own config can list only
//! `tandem mcp`. The agents' files are read here (they are the user's); the plan is shown,
//! confirmed, and written through `hub/import`, so that a running daemon's own edits of
//! that file never race this one.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Args;
use serde::Serialize;
use serde_json::Value;

use tandem_core::calls::{self, CallError, params::HubImportParams};
use tandem_core::config::Config;
use tandem_core::guarded_file;
use tandem_core::hub::config::import::{
    self, AGENTS, Action, Format, FoundServer, Location, Places, Plan, Skipped,
};
use tandem_core::hub::config::{self, ConfigProblem};

use super::backend::Backend;
use super::memory::table;

#[derive(Args)]
pub struct ImportArgs {
    /// Where from: `claude` (~/.claude.json, with this project's servers), `claude-project`
    /// (the workspace's .mcp.json), `codex` (~/.codex/config.toml), `gemini`
    /// (settings.json, the user's and the workspace's), `vscode` (mcp.json, the user's and
    /// the workspace's), `cursor` (mcp.json, ~/.cursor's and the workspace's), or a file.
    /// Default: every one of these places.
    #[arg(long, value_name = "AGENT|FILE")]
    from: Option<String>,
    /// Import without asking.
    #[arg(long, short)]
    yes: bool,
    /// Show the plan only; write nothing.
    #[arg(long, conflicts_with = "yes")]
    dry_run: bool,
    /// Replace a server of the same name in config.json that runs something else (default:
    /// keep it and report the conflict).
    #[arg(long)]
    overwrite: bool,
    /// Print the places read and the plan (or what was written) as JSON.
    #[arg(long)]
    json: bool,
}

/// One place looked in, and what it held.
#[derive(Serialize)]
struct Source {
    agent: String,
    file: String,
    present: bool,
    /// Servers found (importable or not).
    #[serde(skip_serializing_if = "Option::is_none")]
    servers: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// What `--json` prints: the places read, then the plan.
#[derive(Serialize)]
struct Report<'a> {
    sources: &'a [Source],
    #[serde(flatten)]
    plan: &'a Plan,
}

/// `tandem servers import`.
pub fn run(config: &Config, args: ImportArgs) -> anyhow::Result<()> {
    let places = places()?;
    let locations = match args.from.as_deref() {
        None => import::locations(&places, None),
        Some(agent) if AGENTS.contains(&agent) => import::locations(&places, Some(agent)),
        Some(file) => {
            let path = PathBuf::from(file);
            if !path.is_file() {
                bail!(
                    "--from {file}: neither an agent ({}) nor a file",
                    AGENTS.join(", ")
                );
            }
            vec![Location {
                agent: "file".into(),
                format: Format::McpJson,
                path,
                project: None,
            }]
        }
    };
    let (sources, found, skipped) = read_all(&locations, &places);
    if args.from.is_some() {
        if let Some(error) = sources.iter().find_map(|s| s.error.as_ref()) {
            bail!("{error}");
        }
        if !sources.iter().any(|s| s.present) {
            let looked: Vec<&str> = sources.iter().map(|s| s.file.as_str()).collect();
            bail!("no config found (looked in {})", looked.join(", "));
        }
    }

    let file = tandem_core::user_config::path(&config.home);
    let invalid = |e: ConfigProblem| {
        CallError::new(
            "CONFIG_INVALID",
            e.to_string(),
            Value::Object(Default::default()),
        )
    };
    let text = config::read_user_file(&file).map_err(invalid)?;
    let (plan, _) =
        import::plan(&file, text.as_deref(), &found, &skipped, args.overwrite).map_err(invalid)?;
    let count = plan.to_write();
    let report = |plan: &Plan| -> anyhow::Result<()> {
        if args.json {
            let report = Report {
                sources: &sources,
                plan,
            };
            println!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            print_plan(plan);
        }
        Ok(())
    };

    if args.dry_run || count == 0 {
        if !args.json {
            print_sources(&sources);
        }
        report(&plan)?;
        if !args.json {
            match count {
                0 => println!("nothing to import into {}", plan.file),
                n => println!(
                    "dry run: {} would be imported into {}; nothing written",
                    servers(n),
                    plan.file
                ),
            }
        }
        return Ok(());
    }
    if !args.yes {
        if args.json {
            bail!(
                "not imported: --json does not ask; add --yes to import, or --dry-run to see the plan"
            );
        }
        print_sources(&sources);
        print_plan(&plan);
        if !std::io::stdin().is_terminal() {
            bail!(
                "not imported: nobody can confirm (the standard input is not a terminal); run `tandem servers import --yes` to import the servers above, or `--dry-run` to only see them"
            );
        }
        print!("Import {} into {}? [y/N] ", servers(count), plan.file);
        std::io::stdout().flush()?;
        let mut answer = String::new();
        std::io::stdin().lock().read_line(&mut answer)?;
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            bail!("not imported");
        }
    }

    let mut backend = Backend::open(config)?;
    let done = backend.call(
        &calls::HUB_IMPORT,
        &HubImportParams {
            servers: found,
            skipped,
            overwrite: args.overwrite,
        },
    )?;
    if args.json {
        return report(&done);
    }
    if args.yes {
        print_sources(&sources);
        print_plan(&done);
    }
    println!("imported {} into {}", servers(done.to_write()), done.file);
    println!(
        "Your agents can now list only Tandem (`tandem mcp`) as their MCP server: it serves these too."
    );
    Ok(())
}

/// The user's places: `$HOME`, the platform's config dir, Codex's home, the workspace.
pub(super) fn places() -> anyhow::Result<Places> {
    let dirs = directories::BaseDirs::new().context("no home directory: set HOME")?;
    let home = dirs.home_dir().to_path_buf();
    let codex_home = match std::env::var_os("CODEX_HOME") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => home.join(".codex"),
    };
    Ok(Places {
        config_dir: dirs.config_dir().to_path_buf(),
        codex_home,
        home,
        workspace: super::workspace_root(None)?,
    })
}

/// Reads every location: what each held, the servers found and those skipped.
fn read_all(
    locations: &[Location],
    places: &Places,
) -> (Vec<Source>, Vec<FoundServer>, Vec<Skipped>) {
    let (mut sources, mut found, mut skipped) = (Vec::new(), Vec::new(), Vec::new());
    for location in locations {
        let mut source = Source {
            agent: location.agent.clone(),
            file: location.path.display().to_string(),
            present: true,
            servers: None,
            error: None,
        };
        match read_one(location, places) {
            Ok(None) => source.present = false,
            Ok(Some(read)) => {
                source.servers = Some(read.found.len() + read.skipped.len());
                found.extend(read.found);
                skipped.extend(read.skipped);
            }
            Err(e) => source.error = Some(format!("{}: {e}", location.path.display())),
        }
        sources.push(source);
    }
    (sources, found, skipped)
}

/// The most an agent's file may hold: Claude Code's user file keeps the history of every
/// project, far past a config file's size.
pub(super) const AGENT_FILE_MAX_BYTES: u64 = 64 << 20;

/// One location's servers; `None` when the file does not exist. A workspace's files are
/// the repository's: read only as a regular file, of bounded size ([`guarded_file`]).
fn read_one(location: &Location, places: &Places) -> Result<Option<import::Read>, String> {
    let text = match guarded_file::read_regular(&location.path, AGENT_FILE_MAX_BYTES) {
        Ok(Some(bytes)) => guarded_file::utf8(bytes).map_err(|e| e.to_string())?,
        Ok(None) => return Ok(None),
        Err(e) => return Err(e.problem.to_string()),
    };
    let location = if location.agent == "file" {
        &Location {
            format: Format::guess(&location.path, &text),
            ..location.clone()
        }
    } else {
        location
    };
    import::read(location, &text, places).map(Some)
}

fn print_sources(sources: &[Source]) {
    println!("Looked in:");
    for s in sources {
        let what = match (&s.error, s.servers) {
            (Some(e), _) => format!("not read: {e}"),
            (None, Some(n)) => servers(n),
            (None, None) => "not present".into(),
        };
        println!("  {} ({}): {what}", tilde(&s.file), s.agent);
    }
}

fn print_plan(plan: &Plan) {
    if plan.servers.is_empty() {
        return;
    }
    let mut t = table(&["server", "action", "runs", "needs", "from", "notes"]);
    for r in &plan.servers {
        let action = match r.action {
            Action::Added => "add",
            Action::Unchanged => "unchanged",
            Action::Conflict => "conflict",
            Action::Replaced => "replace",
            Action::Skipped => "skip",
        };
        let mut needs = Vec::new();
        if !r.env.is_empty() {
            needs.push(format!("env: {}", r.env.join(", ")));
        }
        if !r.headers.is_empty() {
            needs.push(format!("headers: {}", r.headers.join(", ")));
        }
        t.add_row(vec![
            r.name.clone(),
            action.to_string(),
            r.runs.clone(),
            needs.join("\n"),
            tilde(&r.from),
            r.notes.join("\n"),
        ]);
    }
    println!("{t}");
    // Outside the table, whole: a repository may define a server under the name of the
    // user's own, to have its command run instead.
    for r in &plan.servers {
        for file in &r.differs_in {
            println!(
                "{}: yours, from {}, is the one imported; {} (this project's) defines a different server of that name, not imported",
                r.name,
                tilde(&r.from),
                tilde(file)
            );
        }
    }
}

/// `N server(s)`.
pub(super) fn servers(n: usize) -> String {
    format!("{n} server{}", if n == 1 { "" } else { "s" })
}

/// A path under `$HOME` as `~/...`, for reading.
pub(super) fn tilde(path: &str) -> String {
    match std::env::var_os("HOME").map(PathBuf::from) {
        Some(home) if !home.as_os_str().is_empty() => match Path::new(path).strip_prefix(&home) {
            Ok(rest) => format!("~/{}", rest.display()),
            Err(_) => path.to_string(),
        },
        _ => path.to_string(),
    }
}
