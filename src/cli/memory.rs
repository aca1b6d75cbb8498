//! `tandem memory ...`: the knowledge base from the shell, as tables or `--json`.

use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use comfy_table::{ContentArrangement, Table, presets::UTF8_FULL_CONDENSED};
use serde::Serialize;

use tandem::calls::{self, params::*};
use tandem::config::Config;
use tandem::memory::{EntryType, MemoryType, RelationType};

use super::backend::Backend;

#[derive(Subcommand)]
pub enum MemoryCommand {
    /// Add an entry. The content comes from --content, --content-file, or stdin when piped.
    Add(AddArgs),
    /// Search the knowledge base (BM25 over title, tags, content and context).
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
    Reindex,
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
    let mut backend = Backend::open(config)?;
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
        MemoryCommand::Reindex => {
            let r = backend.call(&calls::MEMORY_REINDEX, &NoParams {})?;
            println!("indexed {} entries", r.indexed);
            Ok(())
        }
        MemoryCommand::Export { file } => export(backend, file),
        MemoryCommand::Import { file, out } => {
            let jsonl = super::read_input(file.as_deref())?;
            let report = backend.call(&calls::MEMORY_IMPORT, &ImportParams { jsonl })?;
            emit(&out, &report, |r| {
                format!(
                    "entries: {} added, {} updated, {} unchanged; links: {} added, {} unchanged\n",
                    r.entries_added,
                    r.entries_updated,
                    r.entries_unchanged,
                    r.links_added,
                    r.links_unchanged
                )
            })
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

/// `tandem memory export`: JSON Lines to a file (a summary on stderr) or to stdout.
fn export(backend: &mut Backend, file: Option<PathBuf>) -> anyhow::Result<()> {
    let e = backend.call(&calls::MEMORY_EXPORT, &NoParams {})?;
    match file.filter(|f| f.as_os_str() != "-") {
        Some(path) => {
            std::fs::write(&path, &e.jsonl)
                .with_context(|| format!("cannot write {}", path.display()))?;
            eprintln!(
                "exported {} entries and {} links to {}",
                e.report.entries,
                e.report.links,
                path.display()
            );
        }
        None => std::io::stdout().lock().write_all(e.jsonl.as_bytes())?,
    }
    Ok(())
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
