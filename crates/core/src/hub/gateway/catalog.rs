//! The gateway's catalog (spec 001): every server a workspace has, how ready each is for an
//! agent session, what it is for, and which fit an intent. Pure: the hub hands it each
//! server's entry, readiness and what it listed when it last ran.
//!
//! What a server is for comes from its entry (`description`, `category`), else from what
//! the server said of itself (its `instructions`, then its `serverInfo`), else from
//! the table of well-known servers (`config::known_servers`).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tantivy::collector::TopDocs;
use tantivy::query::QueryParser;
use tantivy::schema::{IndexRecordOption, Schema, TextFieldIndexing, TextOptions, Value as _};
use tantivy::{Index, TantivyDocument, doc};

use crate::hub::gateway::proxy;
use crate::hub::prompts::inject::{SystemText, fits_in_tokens};

/// How ready a server is for an agent session (spec 001's readiness, and `untrusted` for a
/// workspace file not yet approved).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Readiness {
    /// Its tools are in the session.
    Active,
    /// Ready to activate.
    Available,
    /// A credential it needs is unset or a placeholder (`missingEnvKeys` names each).
    MissingCredentials,
    /// Turned off in the config, or its entry is wrong (`problem` says why).
    Disabled,
    /// From a workspace `.mcp.json` not yet approved (`tandem trust`).
    Untrusted,
    /// A remote server that asks the user to sign in: activating it opens the browser
    /// (`problem` says how).
    NeedsSignIn,
}

impl Readiness {
    pub fn label(self) -> &'static str {
        match self {
            Readiness::Active => "active",
            Readiness::Available => "available",
            Readiness::MissingCredentials => "missing-credentials",
            Readiness::Disabled => "disabled",
            Readiness::Untrusted => "untrusted",
            Readiness::NeedsSignIn => "needs-sign-in",
        }
    }
}

/// One server as the agent sees it (`mcp_environment`). Never a secret: only key names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerInfo {
    pub name: String,
    pub status: Readiness,
    pub category: String,
    /// A core server is never deactivated.
    pub is_core: bool,
    pub description: String,
    /// Every credential that is unset or a placeholder (names only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing_env_keys: Vec<String>,
    /// Why a disabled server cannot run, when it is not simply turned off; how to sign in
    /// to one that needs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// The category of a server no source describes.
pub const UNCATEGORISED: &str = "other";

// ---- the catalog in the agent's view ------------------------------------------------------

/// About how many tokens the catalog's tables may take in the agent's instructions; past
/// it the available servers are summarised by category, then counted.
pub const CATALOG_TOKENS: usize = 600;

/// The catalog as the agent's instructions carry it (spec 001, step 3a): the active
/// servers, those that can be activated, those missing credentials, and those waiting for
/// approval, as Markdown tables within [`CATALOG_TOKENS`].
pub fn render(servers: &[ServerInfo]) -> String {
    let full = render_with(servers, Detail::Full);
    if fits_in_tokens(&full, CATALOG_TOKENS) {
        return full;
    }
    let grouped = render_with(servers, Detail::Grouped);
    if fits_in_tokens(&grouped, CATALOG_TOKENS) {
        return grouped;
    }
    render_with(servers, Detail::Counts)
}

#[derive(Clone, Copy, PartialEq)]
enum Detail {
    Full,
    /// Available servers as one line of names per category.
    Grouped,
    /// Active servers by name, the rest counted.
    Counts,
}

fn render_with(servers: &[ServerInfo], detail: Detail) -> String {
    let of = |r: Readiness| servers.iter().filter(move |s| s.status == r);
    let count = |r: Readiness| of(r).count();
    let mut out = format!(
        "# MCP Server Environment\n\nYou have {} MCP server{} configured. Use the `mcp_*` tools to \
         activate them on demand.\n",
        servers.len(),
        if servers.len() == 1 { "" } else { "s" }
    );
    if detail == Detail::Counts {
        let active: Vec<&str> = of(Readiness::Active).map(|s| s.name.as_str()).collect();
        out.push_str(&format!(
            "\nActive ({}): {}.\nAvailable: {}; missing credentials: {}; needs sign-in: {}; \
             untrusted: {}; disabled: {}. Call `mcp_environment` for the list, `mcp_discover` \
             to find one.\n",
            active.len(),
            if active.is_empty() {
                "none".to_string()
            } else {
                active.join(", ")
            },
            count(Readiness::Available),
            count(Readiness::MissingCredentials),
            count(Readiness::NeedsSignIn),
            count(Readiness::Untrusted),
            count(Readiness::Disabled),
        ));
        return out;
    }
    let core = |s: &ServerInfo| if s.is_core { " [core]" } else { "" };
    if count(Readiness::Active) > 0 {
        out.push_str(&format!(
            "\n## Active ({})\n| Server | Description |\n|--------|-------------|\n",
            count(Readiness::Active)
        ));
        for s in of(Readiness::Active) {
            out.push_str(&format!(
                "| {} | {}{} |\n",
                s.name,
                cell(&s.description),
                core(s)
            ));
        }
    }
    if count(Readiness::Available) > 0 {
        out.push_str(&format!(
            "\n## Available, can activate on demand ({})\n",
            count(Readiness::Available)
        ));
        if detail == Detail::Full {
            out.push_str(
                "| Server | Category | Description |\n|--------|----------|-------------|\n",
            );
            for s in of(Readiness::Available) {
                out.push_str(&format!(
                    "| {} | {} | {}{} |\n",
                    s.name,
                    s.category,
                    cell(&s.description),
                    core(s)
                ));
            }
        } else {
            let mut by_category: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
            for s in of(Readiness::Available) {
                by_category.entry(&s.category).or_default().push(&s.name);
            }
            for (category, names) in by_category {
                out.push_str(&format!("- {category}: {}\n", names.join(", ")));
            }
        }
    }
    if count(Readiness::MissingCredentials) > 0 {
        out.push_str(&format!(
            "\n## Missing Credentials ({})\n| Server | Needs |\n|--------|-------|\n",
            count(Readiness::MissingCredentials)
        ));
        for s in of(Readiness::MissingCredentials) {
            out.push_str(&format!(
                "| {} | {} |\n",
                s.name,
                s.missing_env_keys.join(", ")
            ));
        }
    }
    if count(Readiness::NeedsSignIn) > 0 {
        let names: Vec<&str> = of(Readiness::NeedsSignIn)
            .map(|s| s.name.as_str())
            .collect();
        out.push_str(&format!(
            "\n## Needs sign-in ({}): `mcp_activate` opens the user's browser to sign in\n{}\n",
            names.len(),
            names.join(", ")
        ));
    }
    if count(Readiness::Untrusted) > 0 {
        let names: Vec<&str> = of(Readiness::Untrusted).map(|s| s.name.as_str()).collect();
        out.push_str(&format!(
            "\n## Untrusted ({}): the user approves the workspace's .mcp.json with `tandem trust`\n{}\n",
            names.len(),
            names.join(", ")
        ));
    }
    if count(Readiness::Disabled) > 0 {
        let names: Vec<&str> = of(Readiness::Disabled).map(|s| s.name.as_str()).collect();
        out.push_str(&format!(
            "\n## Disabled ({})\n{}\n",
            names.len(),
            names.join(", ")
        ));
    }
    out
}

/// Text made safe for one Markdown table cell.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// About how many tokens the active servers' own system prompts and tool instructions
/// (spec 000) may take in the agent's instructions; past it, a prompt is left out and named.
pub const INSTRUCTIONS_TOKENS: usize = 2_000;
/// The longest reason the instructions give for a prompt left out, in characters.
const LEFT_OUT_CHARS: usize = 300;

/// The servers' part of the agent's instructions: their conventional system prompts and
/// tool instructions (`system`, already within [`INSTRUCTIONS_TOKENS`]), what was left out
/// (for its length, or as `warnings` say), and the boot servers `starting` still. Empty
/// when there is nothing to say.
pub fn render_servers_part(
    system: &SystemText,
    warnings: &[String],
    starting: &[String],
) -> String {
    let mut out = String::new();
    if !system.text.is_empty() {
        out.push_str("# Instructions from the MCP servers\n\n");
        out.push_str(&system.text);
        out.push('\n');
    }
    let left: Vec<String> = system
        .cut
        .iter()
        .map(|c| {
            format!(
                "{} from {}: past the instructions' length budget; it is the prompt `{}`",
                c.prompt,
                c.server,
                proxy::tool_name(&c.server, &c.prompt)
            )
        })
        .chain(warnings.iter().cloned())
        .collect();
    if !left.is_empty() {
        out.push_str("\nLeft out of these instructions:\n");
        for l in left {
            // A server's error message is its own words: one line, and not all of them.
            let one_line = l.split_whitespace().collect::<Vec<_>>().join(" ");
            let mut line: String = one_line.chars().take(LEFT_OUT_CHARS).collect();
            if line.len() < one_line.len() {
                line.push('…');
            }
            out.push_str(&format!("- {line}\n"));
        }
    }
    if !starting.is_empty() {
        out.push_str(&format!(
            "\nStill starting as this session began: {}. Their tools and prompts join the \
             session once they are ready (the client is sent list_changed).\n",
            starting.join(", ")
        ));
    }
    out
}

/// How an agent uses the gateway (spec 001, step 3b).
pub const ORCHESTRATION: &str = "\
# Dynamic MCP Orchestration

Activate and deactivate MCP servers within the current conversation, no restart needed.

**Tools**:
- `mcp_environment`: full MCP status (active, available, missing credentials)
- `mcp_discover`: find relevant servers for an intent (\"deploy\", \"payments\", \"scraping\")
- `mcp_activate`: load a server's tools into this session at once (named `server__tool`)
- `mcp_deactivate`: unload a non-core server when done (saves tokens)
- `mcp_call`: call a tool of an active server by name, for clients that do not refresh
  their tool list

**Workflow**:
- User says \"deploy on Vercel\": `mcp_activate({name: 'vercel'})`, use its tools, then
  `mcp_deactivate({name: 'vercel'})`
- If credentials are missing, tell the user which keys are needed

**Rules**:
- NEVER deactivate core servers
- If credentials are missing, guide the user to provide them
- Prefer one activation at a time
- Activations last for this session only
";

// ---- discovery ----------------------------------------------------------------------------

/// Intents and the servers that serve them, best first (spec 001's intent map), with the
/// words that name each intent.
pub const INTENTS: &[(&[&str], &[&str])] = &[
    (
        &[
            "deploy",
            "deployment",
            "hosting",
            "host",
            "ship",
            "release",
            "serverless",
        ],
        &["vercel", "railway", "cloudflare"],
    ),
    (
        &[
            "payment",
            "pay",
            "billing",
            "checkout",
            "subscription",
            "invoice",
        ],
        &["stripe"],
    ),
    (
        &[
            "database",
            "db",
            "sql",
            "query",
            "table",
            "schema",
            "migration",
        ],
        &["supabase", "postgres", "sqlite", "clickhouse", "neo4j"],
    ),
    (&["email", "mail", "newsletter", "smtp"], &["resend"]),
    (
        &["search", "research", "lookup", "google"],
        &["tavily", "exa", "firecrawl", "brave-search"],
    ),
    (
        &["scraping", "scrape", "crawl", "crawler", "extract"],
        &["firecrawl", "puppeteer", "playwright"],
    ),
    (
        &["browser", "webpage", "screenshot", "click", "navigate"],
        &["puppeteer", "playwright", "browserbase"],
    ),
    (
        &["mobile", "ios", "android", "app"],
        &["expo", "dart-flutter"],
    ),
    (
        &["design", "ui", "component", "figma", "mockup"],
        &["figma", "shadcn", "magic", "magic-ui"],
    ),
    (
        &[
            "chart",
            "graph",
            "diagram",
            "visualisation",
            "visualization",
            "plot",
        ],
        &["echarts", "mermaid"],
    ),
    (
        &[
            "translation",
            "translate",
            "language",
            "localisation",
            "localization",
        ],
        &["deepl"],
    ),
    (
        &["cms", "content", "notes", "wiki", "page"],
        &["notion", "sanity"],
    ),
    (
        &[
            "monitoring",
            "error",
            "crash",
            "exception",
            "alert",
            "observability",
        ],
        &["sentry"],
    ),
    (
        &["security", "vulnerability", "audit", "lint", "quality"],
        &["semgrep", "sonarqube"],
    ),
    (
        &["document", "pdf", "docx", "convert"],
        &["docling", "code2prompt"],
    ),
    (
        &["3d", "model", "scene", "render", "game"],
        &["blender", "unity"],
    ),
    (
        &["ai", "llm", "model", "inference", "image"],
        &["ollama", "replicate"],
    ),
    (&["video", "youtube", "transcript"], &["youtube"]),
    (
        &["docker", "container", "image", "compose"],
        &["docker-mcp"],
    ),
    (&["cache", "redis", "queue"], &["upstash", "redis"]),
    (
        &["automation", "desktop", "terminal", "keyboard", "mouse"],
        &["desktop-commander", "desktop-automation"],
    ),
    (&["memory", "remember", "recall", "knowledge"], &["memory"]),
    (
        &["file", "files", "folder", "directory", "read", "write"],
        &["filesystem"],
    ),
    (&["git", "commit", "branch", "diff"], &["git", "github"]),
    (
        &["github", "issue", "pull", "pr", "repository", "repo"],
        &["github", "gitlab"],
    ),
    (&["fetch", "url", "http", "api", "download"], &["fetch"]),
    (&["time", "timezone", "date", "clock"], &["time"]),
    (
        &["documentation", "docs", "framework", "library"],
        &["context7"],
    ),
    (
        &["think", "reason", "plan", "step"],
        &["sequential-thinking"],
    ),
];

/// How many servers discovery answers with.
pub const DISCOVER_LIMIT: usize = 5;
/// A server the intent map names for the intent scores this (the first named; each next one
/// a little less), on top of its full-text score (at most 1).
const INTENT_SCORE: f32 = 1.0;
const INTENT_STEP: f32 = 0.05;

/// What discovery searches of one server: its catalog line and, when it has run, its tools.
pub struct Searchable<'a> {
    pub info: &'a ServerInfo,
    /// The names under which [`INTENTS`] may list it (its name, and the well-known name it
    /// matched).
    pub known_as: Vec<String>,
    /// `(name, description)` of each tool it listed when it last ran.
    pub tools: Vec<(String, String)>,
}

/// A server that fits an intent (`mcp_discover`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Discovered {
    #[serde(flatten)]
    pub server: ServerInfo,
    /// How well it fits, 0..1 (the best match of the answer is not forced to 1).
    pub score: f32,
    /// Why it was chosen: the intent it serves, the words that matched.
    pub reason: String,
}

/// The servers that best fit `intent`, at most [`DISCOVER_LIMIT`]: the intent map's servers
/// for the intents the words name, then full-text ranking (BM25, English stemming) over
/// names, descriptions, categories and the tools of servers that have run.
pub fn discover(intent: &str, servers: &[Searchable]) -> Vec<Discovered> {
    let words = analysed(intent);
    let mut scores: BTreeMap<usize, (f32, Vec<String>)> = BTreeMap::new();
    for (names, serving) in INTENTS {
        let Some(word) = names
            .iter()
            .find(|n| analysed(n).iter().any(|a| words.contains(a)))
        else {
            continue;
        };
        for (rank, name) in serving.iter().enumerate() {
            for (i, s) in servers.iter().enumerate() {
                if s.known_as.iter().any(|k| k == name) {
                    let entry = scores.entry(i).or_default();
                    let score = INTENT_SCORE - INTENT_STEP * rank as f32;
                    if score > entry.0 {
                        entry.0 = score;
                    }
                    entry.1.push(format!("serves '{word}'"));
                }
            }
        }
    }
    for (i, text_score, matched) in full_text(intent, servers) {
        let entry = scores.entry(i).or_default();
        entry.0 += text_score;
        entry.1.push(format!("matches {matched}"));
    }
    let mut ranked: Vec<(usize, f32, Vec<String>)> = scores
        .into_iter()
        .map(|(i, (s, why))| (i, s, why))
        .collect();
    ranked.sort_by(|a, b| {
        b.1.total_cmp(&a.1)
            .then_with(|| servers[a.0].info.status.cmp(&servers[b.0].info.status))
            .then_with(|| servers[a.0].info.name.cmp(&servers[b.0].info.name))
    });
    ranked
        .into_iter()
        .take(DISCOVER_LIMIT)
        .map(|(i, score, why)| Discovered {
            server: servers[i].info.clone(),
            score: (score / (INTENT_SCORE + 1.0)).clamp(0.0, 1.0),
            reason: why.join("; "),
        })
        .collect()
}

/// The analysed words of `text` (lower-cased, stemmed, stop words out), as the index sees them.
fn analysed(text: &str) -> Vec<String> {
    let mut analyzer = tandem_search::text::analyzer();
    let mut stream = analyzer.token_stream(text);
    let mut out = Vec::new();
    while let Some(token) = stream.next() {
        out.push(token.text.clone());
    }
    out
}

/// BM25 over the servers' text: `(server index, score scaled to 0..1, what matched)`.
fn full_text(intent: &str, servers: &[Searchable]) -> Vec<(usize, f32, String)> {
    const ANALYZER: &str = "catalog";
    let text = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer(ANALYZER)
            .set_index_option(IndexRecordOption::WithFreqs),
    );
    let mut builder = Schema::builder();
    let id = builder.add_u64_field("id", tantivy::schema::STORED);
    let name = builder.add_text_field("name", text.clone());
    let about = builder.add_text_field("about", text.clone());
    let tools = builder.add_text_field("tools", text);
    let index = Index::create_in_ram(builder.build());
    index
        .tokenizers()
        .register(ANALYZER, tandem_search::text::analyzer());
    let indexed = (|| -> tantivy::Result<Vec<(usize, f32, String)>> {
        let mut writer = index.writer_with_num_threads(1, 15_000_000)?;
        for (i, s) in servers.iter().enumerate() {
            let tool_text: Vec<String> = s
                .tools
                .iter()
                .map(|(n, d)| format!("{} {d}", n.replace(['_', '-'], " ")))
                .collect();
            writer.add_document(doc!(
                id => i as u64,
                name => format!("{} {}", s.info.name.replace(['_', '-'], " "), s.known_as.join(" ")),
                about => format!("{} {}", s.info.description, s.info.category),
                tools => tool_text.join("\n"),
            ))?;
        }
        writer.commit()?;
        let searcher = index.reader()?.searcher();
        let mut parser = QueryParser::for_index(&index, vec![name, about, tools]);
        parser.set_field_boost(name, 3.0);
        parser.set_field_boost(about, 2.0);
        let (query, _) = parser.parse_query_lenient(intent);
        let top = searcher.search(
            &query,
            &TopDocs::with_limit(servers.len().max(1)).order_by_score(),
        )?;
        let best = top.first().map_or(1.0, |(s, _)| *s).max(f32::EPSILON);
        let words = analysed(intent);
        let mut out = Vec::new();
        for (score, address) in top {
            let document: TantivyDocument = searcher.doc(address)?;
            let Some(i) = document.get_first(id).and_then(|v| v.as_u64()) else {
                continue;
            };
            let i = i as usize;
            let s = &servers[i];
            let matched: Vec<&str> = [
                (
                    "its name",
                    format!("{} {}", s.info.name, s.known_as.join(" ")),
                ),
                (
                    "its description",
                    format!("{} {}", s.info.description, s.info.category),
                ),
                (
                    "its tools",
                    s.tools
                        .iter()
                        .map(|(n, d)| format!("{} {d}", n.replace(['_', '-'], " ")))
                        .collect::<Vec<_>>()
                        .join(" "),
                ),
            ]
            .into_iter()
            .filter(|(_, t)| analysed(t).iter().any(|a| words.contains(a)))
            .map(|(what, _)| what)
            .collect();
            out.push((i, score / best, matched.join(", ")));
        }
        Ok(out)
    })();
    indexed.unwrap_or_else(|e| {
        tracing::warn!("the catalog's full-text search failed: {e}");
        Vec::new()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::prompts::inject::count_tokens;

    fn info(name: &str, status: Readiness, category: &str, description: &str) -> ServerInfo {
        ServerInfo {
            name: name.into(),
            status,
            category: category.into(),
            is_core: name == "memory",
            description: description.into(),
            missing_env_keys: if status == Readiness::MissingCredentials {
                vec!["SENTRY_AUTH_TOKEN".into(), "SENTRY_ORG".into()]
            } else {
                Vec::new()
            },
            problem: None,
        }
    }

    #[test]
    fn the_catalog_has_a_table_per_readiness() {
        let servers = [
            info("memory", Readiness::Active, "memory", "Persistent memory"),
            info(
                "vercel",
                Readiness::Available,
                "deployment",
                "Vercel | deploys",
            ),
            info(
                "sentry",
                Readiness::MissingCredentials,
                "monitoring",
                "Errors",
            ),
            info("local", Readiness::Untrusted, UNCATEGORISED, "Something"),
            info("old", Readiness::Disabled, UNCATEGORISED, "Off"),
        ];
        let text = render(&servers);
        let expected = "\
# MCP Server Environment

You have 5 MCP servers configured. Use the `mcp_*` tools to activate them on demand.

## Active (1)
| Server | Description |
|--------|-------------|
| memory | Persistent memory [core] |

## Available, can activate on demand (1)
| Server | Category | Description |
|--------|----------|-------------|
| vercel | deployment | Vercel \\| deploys |

## Missing Credentials (1)
| Server | Needs |
|--------|-------|
| sentry | SENTRY_AUTH_TOKEN, SENTRY_ORG |

## Untrusted (1): the user approves the workspace's .mcp.json with `tandem trust`
local

## Disabled (1)
old
";
        assert_eq!(text, expected);
    }

    #[test]
    fn a_large_catalog_is_summarised_within_its_budget() {
        let many: Vec<ServerInfo> = (0..60)
            .map(|i| {
                info(
                    &format!("server-{i}"),
                    if i < 3 {
                        Readiness::Active
                    } else {
                        Readiness::Available
                    },
                    ["deployment", "database", "search"][i % 3],
                    "A server with a long description that says a great deal about what it does",
                )
            })
            .collect();
        let grouped = render(&many);
        assert!(count_tokens(&grouped) <= CATALOG_TOKENS, "{grouped}");
        assert!(
            grouped.contains("- database: server-4, server-7"),
            "{grouped}"
        );
        let huge: Vec<ServerInfo> = (0..400)
            .map(|i| {
                info(
                    &format!("a-rather-long-server-name-{i}"),
                    Readiness::Available,
                    "search",
                    "x",
                )
            })
            .collect();
        let counted = render(&huge);
        assert!(count_tokens(&counted) <= CATALOG_TOKENS, "{counted}");
        assert!(counted.contains("Available: 400;"), "{counted}");
    }

    fn searchable<'a>(s: &'a ServerInfo, tools: &[(&str, &str)]) -> Searchable<'a> {
        Searchable {
            info: s,
            known_as: vec![s.name.clone()],
            tools: tools
                .iter()
                .map(|(n, d)| (n.to_string(), d.to_string()))
                .collect(),
        }
    }

    #[test]
    fn discovery_follows_the_intent_map_then_the_text() {
        let vercel = info(
            "vercel",
            Readiness::Available,
            "deployment",
            "Vercel deployment",
        );
        let railway = info(
            "railway",
            Readiness::MissingCredentials,
            "deployment",
            "Railway apps",
        );
        let cloudflare = info("cloudflare", Readiness::Available, "deployment", "Workers");
        let stripe = info("stripe", Readiness::Available, "payments", "Payments");
        let tool_only = info(
            "acme",
            Readiness::Available,
            UNCATEGORISED,
            "Internal tools",
        );
        let everything = [
            searchable(&vercel, &[]),
            searchable(&railway, &[]),
            searchable(&cloudflare, &[]),
            searchable(&stripe, &[]),
            searchable(
                &tool_only,
                &[("publish_site", "Deploys the static site to production")],
            ),
        ];
        let names = |intent: &str| -> Vec<String> {
            discover(intent, &everything)
                .into_iter()
                .map(|d| d.server.name)
                .collect()
        };
        let mut deploy = names("deploy");
        assert_eq!(deploy[0], "vercel");
        deploy[..3].sort();
        assert_eq!(deploy[..3], ["cloudflare", "railway", "vercel"]);
        assert!(names("I want to deploy my app").contains(&"acme".to_string()));
        assert_eq!(names("checkout and subscriptions")[0], "stripe");
        assert_eq!(names("publish the site"), ["acme"]);
        assert!(names("quantum entanglement").is_empty());
        let found = discover("deploy", &everything);
        assert!(found.iter().all(|d| (0.0..=1.0).contains(&d.score)));
        let railway = found.iter().find(|d| d.server.name == "railway").unwrap();
        assert_eq!(
            railway.server.missing_env_keys,
            ["SENTRY_AUTH_TOKEN", "SENTRY_ORG"]
        );
        assert!(
            found[0].reason.contains("serves 'deploy'"),
            "{}",
            found[0].reason
        );
    }
}
