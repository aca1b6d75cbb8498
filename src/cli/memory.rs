//! `tandem memory ...`: the knowledge base from the shell, as tables or `--json`.

use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use comfy_table::{ContentArrangement, Table, presets::UTF8_FULL_CONDENSED};
use serde::Serialize;

use tandem_core::calls::{self, params::*};
use tandem_core::config::Config;
use tandem_core::memory::model_source::{
    self, ModelSetting, PullProgress, Resolved, SettingSource,
};
use tandem_core::memory::{
    EntryType, ExportReport, ImportLine, ImportReport, MemoryError, MemoryType, RelationType,
};
use tandem_search::embeddings::Embedder;

use super::backend::Backend;

#[derive(Subcommand)]
pub enum MemoryCommand {
    /// Add an entry. The content comes from --content, --content-file, or stdin when piped.
    Add(AddArgs),
    /// Search the knowledge base: by words (BM25 over title, tags, content and context) and,
    /// with the embedding model loaded, by meaning.
    Search(SearchArgs),
    /// Show an entry in full, with its links (records an access).
    Show {
        /// Full ULID or a prefix of 5+ characters.
        id: String,
        #[command(flatten)]
        out: Output,
    },
    /// Link two entries.
    Link {
        source: String,
        target: String,
        #[arg(long, short, value_enum, default_value_t = RelationArg::Related)]
        relation: RelationArg,
        #[command(flatten)]
        out: Output,
    },
    /// List pending suggestions: links, generalisations, entries learned from tasks.
    Suggestions {
        #[arg(long, value_enum, default_value_t = KindArg::All)]
        kind: KindArg,
        #[arg(long, default_value_t = 10)]
        limit: i64,
        #[command(flatten)]
        out: Output,
    },
    /// Accept a suggestion (creates its link or its entry, or prints the generalize command).
    Accept {
        suggestion_id: String,
        #[command(flatten)]
        out: Output,
    },
    /// Reject a suggestion; it will not come back.
    Reject {
        suggestion_id: String,
        #[command(flatten)]
        out: Output,
    },
    /// Create one semantic entry derived from several entries.
    Generalize {
        /// Two or more entry IDs.
        #[arg(required = true, num_args = 2..)]
        ids: Vec<String>,
        #[arg(long)]
        title: Option<String>,
        #[arg(long)]
        content: Option<String>,
        #[arg(long = "type", value_enum)]
        entry_type: Option<TypeArg>,
        #[command(flatten)]
        out: Output,
    },
    /// Rebuild the search index from the database.
    Reindex {
        /// Make every entry's vectors again with the embedding model too (it is loaded
        /// first, downloaded if it must be).
        #[arg(long)]
        embeddings: bool,
    },
    /// Rewrite the data dir's database so that its files hold what it stores and no more:
    /// after adds in a burst they can hold several times that. The daemon does it itself
    /// when it exits idle, if worth it; this runs while no daemon holds the data dir.
    Compact {
        #[command(flatten)]
        out: Output,
    },
    /// Write every entry and link as JSON Lines (to a file, or stdout).
    Export {
        /// Output file; stdout when absent or `-`.
        file: Option<PathBuf>,
    },
    /// Read JSON Lines written by export (from a file, or stdin).
    Import {
        /// Input file; stdin when absent or `-`.
        file: Option<PathBuf>,
        #[command(flatten)]
        out: Output,
    },
    /// The embedding model: the setting and where it came from, its folder, whether it is
    /// downloaded; `pull` downloads it. Set it with TANDEM_EMBEDDING_MODEL or
    /// `memory.embeddings.model` in the data dir's config.json: `off`, a folder, or a
    /// Hugging Face id (owner/name).
    Model(ModelArgs),
}

#[derive(Args)]
pub struct ModelArgs {
    #[command(subcommand)]
    command: Option<ModelCommand>,
    #[command(flatten)]
    out: ModelOutput,
}

#[derive(Args)]
pub struct ModelOutput {
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand)]
pub enum ModelCommand {
    /// The setting, where it came from, the folder, whether it is downloaded, and its
    /// dimensions and vocabulary when it loads (the default command).
    Status {
        #[command(flatten)]
        out: ModelOutput,
    },
    /// Download the model from the Hugging Face hub (HF_ENDPOINT names a mirror) into the
    /// data dir, where it is otherwise downloaded on first use.
    Pull {
        /// A Hugging Face id (owner/name) instead of the configured model.
        id: Option<String>,
        /// Download it again even if it is there.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        out: ModelOutput,
    },
}

#[derive(Args)]
pub struct Output {
    /// Print JSON (the MCP tool's output) instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct AddArgs {
    #[arg(long = "type", short = 't', value_enum)]
    entry_type: TypeArg,
    #[arg(long)]
    title: String,
    #[arg(long, conflicts_with = "content_file")]
    content: Option<String>,
    #[arg(long)]
    content_file: Option<PathBuf>,
    /// A tag (repeat, or separate with commas); normalised to kebab-case.
    #[arg(long = "tag", value_delimiter = ',')]
    tags: Vec<String>,
    #[arg(long)]
    project: Option<String>,
    #[arg(long)]
    context: Option<String>,
    /// 0..5
    #[arg(long)]
    confidence: Option<i64>,
    #[arg(long, value_enum)]
    memory_type: Option<MemoryTypeArg>,
    #[command(flatten)]
    out: Output,
}

#[derive(Args)]
pub struct SearchArgs {
    query: String,
    #[arg(long = "type", value_enum)]
    entry_type: Option<TypeArg>,
    #[arg(long)]
    project: Option<String>,
    #[arg(long)]
    context: Option<String>,
    /// 1..20
    #[arg(long, short = 'n', default_value_t = 5)]
    limit: i64,
    #[command(flatten)]
    out: Output,
}

macro_rules! arg_enum {
    ($name:ident => $target:ty { $($v:ident),+ }) => {
        #[derive(Clone, Copy, ValueEnum)]
        #[value(rename_all = "snake_case")]
        pub enum $name { $($v),+ }
        impl $name {
            /// The spelling the core parses.
            fn name(self) -> String {
                match self { $($name::$v => <$target>::$v),+ }.to_string()
            }
        }
    };
}
arg_enum!(TypeArg => EntryType { Bug, Pattern, Decision, Pitfall, Config, Reference });
arg_enum!(MemoryTypeArg => MemoryType { Episodic, Semantic });
arg_enum!(RelationArg => RelationType { Related, Supersedes, DerivedFrom, Contradicts });

#[derive(Clone, Copy, ValueEnum)]
pub enum KindArg {
    Link,
    Generalize,
    Entry,
    All,
}

impl KindArg {
    fn name(self) -> String {
        self.to_possible_value()
            .expect("no variant is skipped")
            .get_name()
            .to_string()
    }
}

pub fn run(config: &Config, cmd: MemoryCommand) -> anyhow::Result<()> {
    // The model's commands read settings and files of the data dir, not the store: they
    // run here whether a daemon runs or not.
    let cmd = match cmd {
        MemoryCommand::Model(args) => return model(config, args),
        MemoryCommand::Compact { out } => return compact(config, &out),
        cmd => cmd,
    };
    let mut backend = Backend::open(config)?;
    if let MemoryCommand::Import { file, out } = cmd {
        let report = import(&mut backend, file)?;
        if matches!(backend, Backend::Local { .. }) {
            drop(backend);
            // sled replays the log written since its last snapshot when it opens, then
            // writes one: once here, the import's wait is not the next start's.
            if let Err(e) = tandem_core::store::Store::open(&config.home) {
                tracing::warn!("reopening the data dir after the import failed: {e}");
            }
        }
        return emit(&out, &report, |r| {
            format!(
                "entries: {} added, {} updated, {} unchanged; links: {} added, {} unchanged\n",
                r.entries_added,
                r.entries_updated,
                r.entries_unchanged,
                r.links_added,
                r.links_unchanged
            )
        });
    }
    let backend = &mut backend;
    match cmd {
        MemoryCommand::Add(a) => add(backend, a),
        MemoryCommand::Search(a) => search(backend, a),
        MemoryCommand::Show { id, out } => {
            let d = backend.call(&calls::MEMORY_SHOW, &ShowParams { id })?;
            emit(&out, &d, tandem::render::entry_markdown)
        }
        MemoryCommand::Link {
            source,
            target,
            relation,
            out,
        } => {
            let params = LinkParams {
                source_id: source,
                target_id: target,
                relation_type: Some(relation.name()),
            };
            let o = backend.call(&calls::MEMORY_LINK, &params)?;
            emit(&out, &o, |o| {
                format!(
                    "linked [{}] {} -[{}]-> [{}] {} ({})\n",
                    o.source.id,
                    o.source.title,
                    o.relation_type,
                    o.target.id,
                    o.target.title,
                    o.link_id
                )
            })
        }
        MemoryCommand::Suggestions { kind, limit, out } => {
            let params = SuggestionsParams {
                kind: Some(kind.name()),
                limit: Some(limit),
            };
            let both = backend.call(&calls::MEMORY_SUGGESTIONS, &params)?;
            emit(&out, &both, render_suggestions)
        }
        MemoryCommand::Accept { suggestion_id, out } => {
            let o = backend.call(&calls::MEMORY_ACCEPT, &SuggestionParams { suggestion_id })?;
            emit(&out, &o, |o| match &o.generalize_command {
                Some(cmd) => format!("{}\n{cmd}\n", o.action_taken),
                None => format!("{}\n", o.action_taken),
            })
        }
        MemoryCommand::Reject { suggestion_id, out } => {
            let o = backend.call(&calls::MEMORY_REJECT, &SuggestionParams { suggestion_id })?;
            emit(&out, &o, |o| format!("rejected {}\n", o.suggestion_id))
        }
        MemoryCommand::Generalize {
            ids,
            title,
            content,
            entry_type,
            out,
        } => {
            let params = GeneralizeParams {
                entry_ids: ids,
                title,
                content,
                entry_type: entry_type.map(TypeArg::name),
            };
            let o = backend.call(&calls::MEMORY_GENERALIZE, &params)?;
            emit(&out, &o, |o| {
                let mut s = format!(
                    "added semantic entry {} [{}] {}\n",
                    o.entry.id, o.entry.entry_type, o.entry.title
                );
                for e in &o.derived_from {
                    s.push_str(&format!("  derived_from [{}] {}\n", e.id, e.title));
                }
                s
            })
        }
        MemoryCommand::Reindex { embeddings } => {
            if embeddings {
                backend.start_embeddings(config);
            }
            let r = backend.call(&calls::MEMORY_REINDEX, &ReindexParams { embeddings })?;
            println!("indexed {} entries", r.indexed);
            if let Some(n) = r.embedded {
                println!("embedded {n} entries");
            }
            Ok(())
        }
        MemoryCommand::Export { file } => export(backend, file),
        MemoryCommand::Model(_) | MemoryCommand::Compact { .. } | MemoryCommand::Import { .. } => {
            unreachable!("run above")
        }
    }
}

/// `tandem memory add`: the content from `--content`, `--content-file` or piped stdin.
fn add(backend: &mut Backend, a: AddArgs) -> anyhow::Result<()> {
    let content = match (a.content, a.content_file) {
        (Some(c), _) => c,
        (None, Some(path)) => std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?,
        (None, None) if !std::io::stdin().is_terminal() => {
            let mut s = String::new();
            std::io::stdin().read_to_string(&mut s)?;
            s
        }
        (None, None) => String::new(),
    };
    let params = AddParams {
        entry_type: a.entry_type.name(),
        title: a.title,
        content: Some(content),
        tags: Some(a.tags),
        context: a.context,
        project: a.project,
        confidence: a.confidence,
        memory_type: a.memory_type.map(MemoryTypeArg::name),
    };
    let out = backend.call(&calls::MEMORY_ADD, &params)?;
    emit(&a.out, &out, |o| {
        let mut s = format!("added {} [{}] {}\n", o.id, o.entry_type, o.title);
        if o.context_truncated {
            s.push_str("context over 10,000 characters: kept the first 8,000\n");
        }
        if !o.similar_entries.is_empty() {
            let mut t = table(&["similar", "title", "score"]);
            for e in &o.similar_entries {
                t.add_row(vec![
                    e.id.clone(),
                    e.title.clone(),
                    format!("{:.2}", e.score),
                ]);
            }
            s.push_str(&format!("{t}\n"));
        }
        if o.suggestions_created > 0 {
            s.push_str(&format!(
                "{} suggestion(s) created: see `tandem memory suggestions`\n",
                o.suggestions_created
            ));
        }
        s
    })
}

fn search(backend: &mut Backend, a: SearchArgs) -> anyhow::Result<()> {
    let params = SearchParams {
        query: a.query,
        context: a.context,
        limit: Some(a.limit),
        entry_type: a.entry_type.map(TypeArg::name),
        project: a.project,
    };
    let out = backend.call(&calls::MEMORY_SEARCH, &params)?;
    emit(&a.out, &out, |o| {
        if o.results.is_empty() {
            return format!("no results ({})\n", o.hint);
        }
        let mut t = table(&["id", "type", "title", "score", "snippet"]);
        for r in &o.results {
            t.add_row(vec![
                r.id.clone(),
                r.entry_type.clone(),
                r.title.clone(),
                format!("{:.2}", r.score),
                r.snippet.clone(),
            ]);
        }
        format!("{t}\n{} of {} matching entries\n", o.results.len(), o.total)
    })
}

/// Pending suggestions, a table of each kind asked for.
fn render_suggestions(both: &calls::Suggestions) -> String {
    let mut s = String::new();
    if let Some(l) = &both.links {
        s.push_str(&format!("link suggestions ({} pending)\n", l.total_pending));
        if !l.suggestions.is_empty() {
            let mut t = table(&["id", "entry a", "entry b", "score", "reason"]);
            for x in &l.suggestions {
                t.add_row(vec![
                    x.id.clone(),
                    format!("{} {}", short(&x.entry_a.id), x.entry_a.title),
                    format!("{} {}", short(&x.entry_b.id), x.entry_b.title),
                    format!("{:.2}", x.score),
                    x.reason.clone(),
                ]);
            }
            s.push_str(&format!("{t}\n"));
        }
    }
    if let Some(g) = &both.generalize {
        s.push_str(&format!(
            "generalisation suggestions ({} pending)\n",
            g.total_pending
        ));
        if !g.suggestions.is_empty() {
            let mut t = table(&["id", "entries", "score", "reason"]);
            for x in &g.suggestions {
                let entries: Vec<String> = x
                    .entries
                    .iter()
                    .map(|e| format!("{} {}", short(&e.id), e.title))
                    .collect();
                t.add_row(vec![
                    x.id.clone(),
                    entries.join("\n"),
                    format!("{:.2}", x.score),
                    x.reason.clone(),
                ]);
            }
            s.push_str(&format!("{t}\n"));
        }
    }
    if let Some(e) = &both.entries {
        s.push_str(&format!(
            "entry suggestions, learned from tasks ({} pending)\n",
            e.total_pending
        ));
        if !e.suggestions.is_empty() {
            let mut t = table(&["id", "type", "title", "tags", "reason"]);
            for x in &e.suggestions {
                t.add_row(vec![
                    x.id.clone(),
                    x.entry.entry_type.clone(),
                    x.entry.title.clone(),
                    x.entry.tags.join(", "),
                    x.reason.clone(),
                ]);
            }
            s.push_str(&format!("{t}\n"));
        }
    }
    s
}

/// Lines an import sends in one `memory/import` call: each call is one batch of
/// transactions and one index commit, and a few MB over the daemon's socket.
const IMPORT_BATCH_LINES: usize = 5_000;

/// `tandem memory import`: every line checked first (one bad line imports nothing), then
/// the entries, then the links, in calls of [`IMPORT_BATCH_LINES`], with a progress bar.
/// A file is read again for each pass rather than held (a million entries are a gigabyte
/// of JSON Lines); standard input is held.
fn import(backend: &mut Backend, file: Option<PathBuf>) -> anyhow::Result<ImportReport> {
    let input = ImportInput::open(file)?;
    // What each line holds (none: a blank line), from the first pass.
    let mut kinds: Vec<Option<ImportLine>> = Vec::new();
    let mut lines = input.lines()?;
    loop {
        let block: Vec<String> = lines
            .by_ref()
            .take(IMPORT_BATCH_LINES)
            .collect::<anyhow::Result<_>>()?;
        if block.is_empty() {
            break;
        }
        let checked = tandem_core::memory::check_import_lines(kinds.len() + 1, &block)
            .map_err(calls::CallError::from)?;
        kinds.extend(checked);
    }
    let count = |kind| kinds.iter().filter(|k| **k == Some(kind)).count();
    let (entries, links) = (count(ImportLine::Entry), count(ImportLine::Link));
    let bar = stderr_bar(Some((entries + links) as u64));
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "importing {bar:30} {pos}/{len} records ({per_sec}, {eta} left)",
        )
        .expect("valid template"),
    );
    let calls = entries.div_ceil(IMPORT_BATCH_LINES) + links.div_ceil(IMPORT_BATCH_LINES);
    let mut sent = 0;
    let mut report = ImportReport::default();
    for wanted in [ImportLine::Entry, ImportLine::Link] {
        // A failure once parts went in (a call, or the file changed or unreadable between
        // passes) says what was imported before it.
        let failed = |report: &ImportReport, e: anyhow::Error| {
            bar.finish_and_clear();
            let done = report.entries_added + report.entries_updated;
            if wanted == ImportLine::Link {
                eprintln!(
                    "tandem: the entries were imported ({done} added or updated); then importing the links failed:"
                );
            } else if done > 0 {
                eprintln!("tandem: {done} entries were imported before this failure:");
            }
            e
        };
        let mut batch: Vec<String> = Vec::with_capacity(IMPORT_BATCH_LINES);
        let mut lines = input
            .lines()
            .map_err(|e| failed(&report, e))?
            .zip(&kinds)
            .peekable();
        while let Some((line, kind)) = lines.next() {
            if *kind == Some(wanted) {
                batch.push(line.map_err(|e| failed(&report, e))?);
            }
            if batch.len() < IMPORT_BATCH_LINES && (lines.peek().is_some() || batch.is_empty()) {
                continue;
            }
            sent += 1;
            let params = ImportParams {
                jsonl: batch.join("\n"),
                more: sent < calls,
            };
            let part = backend
                .call(&calls::MEMORY_IMPORT, &params)
                .map_err(|e| failed(&report, e))?;
            report.entries_added += part.entries_added;
            report.entries_updated += part.entries_updated;
            report.entries_unchanged += part.entries_unchanged;
            report.links_added += part.links_added;
            report.links_unchanged += part.links_unchanged;
            bar.inc(batch.len() as u64);
            batch.clear();
        }
    }
    bar.finish_and_clear();
    Ok(report)
}

/// An import's JSON Lines, read once a pass: a file, opened again each time (and refused
/// if it changed between passes), or standard input, held.
enum ImportInput {
    File {
        path: PathBuf,
        /// Its length and modification time when first read.
        seen: (u64, Option<std::time::SystemTime>),
    },
    Held(String),
}

impl ImportInput {
    fn open(file: Option<PathBuf>) -> anyhow::Result<ImportInput> {
        match file.filter(|f| f.as_os_str() != "-") {
            Some(path) => {
                let seen = Self::stamp(&path)?;
                Ok(ImportInput::File { path, seen })
            }
            None => Ok(ImportInput::Held(super::read_input(None)?)),
        }
    }

    fn stamp(path: &std::path::Path) -> anyhow::Result<(u64, Option<std::time::SystemTime>)> {
        let meta =
            std::fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?;
        Ok((meta.len(), meta.modified().ok()))
    }

    fn lines(&self) -> anyhow::Result<Box<dyn Iterator<Item = anyhow::Result<String>> + '_>> {
        Ok(match self {
            ImportInput::File { path, seen } => {
                if Self::stamp(path)? != *seen {
                    anyhow::bail!("{} changed while it was imported", path.display());
                }
                let file = std::fs::File::open(path)
                    .with_context(|| format!("cannot read {}", path.display()))?;
                Box::new(
                    std::io::BufRead::lines(std::io::BufReader::new(file))
                        .map(|l| l.context("cannot read the import")),
                )
            }
            ImportInput::Held(text) => Box::new(text.lines().map(|l| Ok(l.to_string()))),
        })
    }
}

/// Lines a page of `tandem memory export` asks for: an answer of a few MB, however large
/// the knowledge base.
const EXPORT_PAGE_LINES: u64 = 5_000;

/// `tandem memory export`: JSON Lines to a file (a summary on stderr) or to stdout, asked
/// for in pages. A file is written beside its place and renamed into it once whole.
fn export(backend: &mut Backend, file: Option<PathBuf>) -> anyhow::Result<()> {
    let mut pages = |out: &mut dyn Write| -> anyhow::Result<ExportReport> {
        let mut report = ExportReport::default();
        let mut after = None;
        loop {
            let page = backend.call(
                &calls::MEMORY_EXPORT,
                &ExportParams {
                    after,
                    limit: Some(EXPORT_PAGE_LINES),
                },
            )?;
            out.write_all(page.jsonl.as_bytes())?;
            report.entries += page.report.entries;
            report.links += page.report.links;
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        out.flush()?;
        Ok(report)
    };
    match file.filter(|f| f.as_os_str() != "-") {
        Some(path) => {
            let mut partial = path.clone().into_os_string();
            partial.push(".partial");
            let partial = PathBuf::from(partial);
            let written = std::fs::File::create(&partial)
                .map_err(anyhow::Error::from)
                .and_then(|f| pages(&mut std::io::BufWriter::new(f)));
            let report = match written {
                Ok(report) => report,
                Err(e) => {
                    let _ = std::fs::remove_file(&partial);
                    return Err(e.context(format!("cannot write {}", path.display())));
                }
            };
            std::fs::rename(&partial, &path)
                .with_context(|| format!("cannot write {}", path.display()))?;
            eprintln!(
                "exported {} entries and {} links to {}",
                report.entries,
                report.links,
                path.display()
            );
        }
        None => {
            pages(&mut std::io::stdout().lock())?;
        }
    }
    Ok(())
}

/// `tandem memory model [status|pull]`.
fn model(config: &Config, args: ModelArgs) -> anyhow::Result<()> {
    let json = |out: Option<ModelOutput>| Output {
        json: args.out.json || out.is_some_and(|o| o.json),
    };
    match args.command {
        None => model_status(config, &json(None)),
        Some(ModelCommand::Status { out }) => model_status(config, &json(Some(out))),
        Some(ModelCommand::Pull { id, force, out }) => {
            model_pull(config, id, force, &json(Some(out)))
        }
    }
}

/// What `tandem memory model` shows.
#[derive(Serialize)]
struct ModelStatus {
    /// The setting as written: `off`, a folder, or owner/name.
    setting: String,
    /// `off`, `folder` or `hub`.
    kind: &'static str,
    /// `env`, `config_file` or `default`.
    source: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    config_file: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    folder: Option<PathBuf>,
    /// A hub model: where it is downloaded from.
    #[serde(skip_serializing_if = "Option::is_none")]
    endpoint: Option<String>,
    /// A hub model: whether it is in the data dir.
    #[serde(skip_serializing_if = "Option::is_none")]
    downloaded: Option<bool>,
    /// Whether the folder's model loads (not tried for a hub model not yet downloaded).
    #[serde(skip_serializing_if = "Option::is_none")]
    loads: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dimensions: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    vocabulary: Option<usize>,
    /// Why it does not load.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

fn model_status(config: &Config, out: &Output) -> anyhow::Result<()> {
    let resolved = model_source::resolve(config).map_err(model_error)?;
    let mut status = ModelStatus {
        setting: resolved.setting.to_string(),
        kind: match resolved.setting {
            ModelSetting::Off => "off",
            ModelSetting::Folder(_) => "folder",
            ModelSetting::Hub(_) => "hub",
        },
        source: resolved.source.name(),
        config_file: match &resolved.source {
            SettingSource::File(path) => Some(path.clone()),
            _ => None,
        },
        folder: resolved.folder(&config.home),
        endpoint: None,
        downloaded: None,
        loads: None,
        dimensions: None,
        vocabulary: None,
        error: None,
    };
    if let ModelSetting::Hub(id) = &resolved.setting {
        status.endpoint = Some(model_source::endpoint(config));
        status.downloaded = Some(model_source::cached(&config.home, id).is_some());
    }
    if let Some(folder) = &status.folder
        && status.downloaded != Some(false)
    {
        match Embedder::load(folder) {
            Ok(model) => {
                status.loads = Some(true);
                status.dimensions = Some(model.dimensions());
                status.vocabulary = Some(model.vocabulary());
            }
            Err(e) => {
                status.loads = Some(false);
                status.error = Some(e.to_string());
            }
        }
    }
    emit(out, &status, |s| render_model_status(s, &resolved))
}

fn render_model_status(s: &ModelStatus, resolved: &Resolved) -> String {
    let mut lines = vec![format!(
        "model       {} (from {})",
        s.setting, resolved.source
    )];
    if let Some(folder) = &s.folder {
        lines.push(format!("folder      {}", folder.display()));
    }
    match (&resolved.setting, s.downloaded) {
        (ModelSetting::Off, _) => {
            lines.push("embeddings are turned off: search is lexical only".into());
        }
        (ModelSetting::Hub(_), Some(false)) => lines.push(format!(
            "downloaded  no: `tandem memory model pull` downloads it from {} (else it is downloaded on first use)",
            s.endpoint.as_deref().unwrap_or_default()
        )),
        (ModelSetting::Hub(_), _) => lines.push(format!(
            "downloaded  yes, from {}",
            s.endpoint.as_deref().unwrap_or_default()
        )),
        (ModelSetting::Folder(_), _) => {}
    }
    if let (Some(dimensions), Some(vocabulary)) = (s.dimensions, s.vocabulary) {
        lines.push(format!("dimensions  {dimensions}"));
        lines.push(format!("vocabulary  {vocabulary} tokens"));
    }
    if let Some(error) = &s.error {
        lines.push(format!("not usable  {error}"));
    }
    lines.join("\n") + "\n"
}

/// What `tandem memory model pull` did.
#[derive(Serialize)]
struct Pulled {
    model: String,
    folder: PathBuf,
    /// `downloaded`, `cached` (already there), or `folder` (a folder setting: nothing to do).
    action: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    endpoint: Option<String>,
}

fn model_pull(
    config: &Config,
    id: Option<String>,
    force: bool,
    out: &Output,
) -> anyhow::Result<()> {
    let resolved = match id {
        Some(id) => {
            let cwd = std::env::current_dir().unwrap_or_else(|_| config.home.clone());
            let setting =
                ModelSetting::parse(&id, &cwd, config.user_home.as_deref()).map_err(|error| {
                    model_error(model_source::ModelSourceError::InvalidSetting {
                        from: SettingSource::Argument,
                        error,
                    })
                })?;
            Resolved {
                setting,
                source: SettingSource::Argument,
            }
        }
        None => model_source::resolve(config).map_err(model_error)?,
    };
    let pulled = match resolved.setting {
        ModelSetting::Off => {
            return Err(calls::CallError::from(MemoryError::EmbeddingsDisabled).into());
        }
        ModelSetting::Folder(path) => {
            if !path.is_dir() {
                return Err(model_error(model_source::ModelSourceError::FolderMissing {
                    path,
                    from: resolved.source,
                }));
            }
            Pulled {
                model: path.display().to_string(),
                folder: path,
                action: "folder",
                endpoint: None,
            }
        }
        ModelSetting::Hub(id) => {
            let endpoint = model_source::endpoint(config);
            match model_source::cached(&config.home, &id) {
                Some(folder) if !force => Pulled {
                    model: id,
                    folder,
                    action: "cached",
                    endpoint: Some(endpoint),
                },
                _ => {
                    let bar = DownloadBar::new();
                    let folder = model_source::pull(&id, &config.home, &endpoint, &|p| bar.show(p));
                    bar.finish();
                    Pulled {
                        model: id,
                        folder: folder.map_err(model_error)?,
                        action: "downloaded",
                        endpoint: Some(endpoint),
                    }
                }
            }
        }
    };
    emit(out, &pulled, |p| match p.action {
        "folder" => format!(
            "the model is the folder {} (from {}): nothing to download\n",
            p.folder.display(),
            resolved.source
        ),
        "cached" => format!(
            "{} is already downloaded in {} (--force downloads it again)\n",
            p.model,
            p.folder.display()
        ),
        _ => format!(
            "downloaded {} from {} into {}\n",
            p.model,
            p.endpoint.as_deref().unwrap_or_default(),
            p.folder.display()
        ),
    })
}

/// A model that cannot be found or fetched: `MODEL_NOT_AVAILABLE`, printed with its code.
fn model_error(e: model_source::ModelSourceError) -> anyhow::Error {
    calls::CallError::from(MemoryError::from(e)).into()
}

/// A progress bar of `len` steps on stderr, hidden when stderr is not a terminal.
fn stderr_bar(len: Option<u64>) -> indicatif::ProgressBar {
    if std::io::stderr().is_terminal() {
        indicatif::ProgressBar::with_draw_target(len, indicatif::ProgressDrawTarget::stderr())
    } else {
        indicatif::ProgressBar::hidden()
    }
}

/// The download's progress on stderr, one file after the other (hidden when stderr is not a
/// terminal).
struct DownloadBar {
    bar: indicatif::ProgressBar,
    file: std::cell::Cell<Option<usize>>,
}

impl DownloadBar {
    fn new() -> DownloadBar {
        let bar = stderr_bar(None);
        DownloadBar {
            bar,
            file: std::cell::Cell::new(None),
        }
    }

    fn show(&self, p: PullProgress) {
        if self.file.get() != Some(p.index) {
            self.file.set(Some(p.index));
            let template = if p.total.is_some() {
                "{msg} {bar:30} {bytes}/{total_bytes} ({bytes_per_sec})"
            } else {
                "{msg} {spinner} {bytes} ({bytes_per_sec})"
            };
            self.bar.set_style(
                indicatif::ProgressStyle::with_template(template).expect("valid template"),
            );
            self.bar.reset();
            self.bar.set_length(p.total.unwrap_or(0));
            self.bar.set_message(format!(
                "{}/{} {:<17}",
                p.index + 1,
                model_source::MODEL_FILES.len(),
                p.file
            ));
        }
        self.bar.set_position(p.done);
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// `tandem memory compact`: in this process, the data dir closed to every other.
fn compact(config: &Config, out: &Output) -> anyhow::Result<()> {
    use tandem_core::store::{CompactWhen, StoreError};
    let compacted = match tandem_core::store::compact(&config.home, CompactWhen::Always) {
        Err(StoreError::Locked { pid, .. }) => anyhow::bail!(
            "the data dir {} is held by pid {pid}: stop the daemon (`tandem daemon stop`) or the process holding it, then compact (the daemon compacts by itself when it exits idle)",
            config.home.display()
        ),
        compacted => compacted?,
    };
    emit(out, &compacted, |c| {
        let kept = if c.copy > 0 && !c.rewritten {
            format!(" (a copy took {}: kept as they were)", human_size(c.copy))
        } else {
            String::new()
        };
        format!(
            "database: {} records ({}); its files took {}, now {}{kept}\n",
            c.records,
            human_size(c.record_bytes),
            human_size(c.before),
            human_size(c.after)
        )
    })
}

/// Bytes as a person reads them: kB under a megabyte, MB above.
fn human_size(bytes: u64) -> String {
    match bytes {
        0..1_000_000 => format!("{:.1} kB", bytes as f64 / 1_000.0),
        _ => format!("{:.1} MB", bytes as f64 / 1_000_000.0),
    }
}

pub(crate) fn emit<T: Serialize>(
    out: &Output,
    value: &T,
    human: impl Fn(&T) -> String,
) -> anyhow::Result<()> {
    if out.json {
        println!("{}", serde_json::to_string_pretty(value)?);
    } else {
        print!("{}", human(value));
    }
    Ok(())
}

pub(crate) fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(header.to_vec());
    if !std::io::stdout().is_terminal() {
        t.set_width(160);
    }
    t
}

fn short(id: &str) -> &str {
    &id[..id.len().min(10)]
}
