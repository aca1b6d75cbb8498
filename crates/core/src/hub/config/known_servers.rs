//! Well-known MCP servers, matched by name or by the package they run: what each is for
//! and its category (the catalog's description of a server no other source describes),
//! and whether it is core by default (the config's default for an entry's `core`).
//!
//! A table of names and nothing of the hub's types, so that the config and the gateway can
//! both use it without using each other.

/// A well-known server: its usual names, category and what it does.
pub struct Known {
    /// The name it is usually configured under, then other names and package names.
    pub names: &'static [&'static str],
    pub category: &'static str,
    pub description: &'static str,
    /// Core unless its entry says otherwise (spec 001's examples keep these loaded).
    pub core: bool,
}

macro_rules! known {
    ($([$($name:literal),+] $category:literal $description:literal $(core $core:literal)?;)+) => {
        &[$(Known { names: &[$($name),+], category: $category, description: $description, core: known!(@core $($core)?) }),+]
    };
    (@core) => { false };
    (@core $core:literal) => { $core };
}

/// Well-known servers: spec 001's list, the reference servers, and the servers its intent
/// map names. Names are compared after [`normalise`].
pub const KNOWN: &[Known] = known![
    ["memory", "knowledge-graph"] "memory" "Persistent memory across sessions (knowledge graph)" core true;
    ["sequential-thinking", "sequentialthinking"] "reasoning" "Step-by-step reasoning for complex problems";
    ["context7"] "documentation" "Up-to-date framework documentation" core true;
    ["filesystem", "fs"] "files" "File operations (read, write, search)";
    ["git"] "version-control" "Git operations (commits, branches, diffs)";
    ["github"] "version-control" "GitHub repos, issues, PRs, code search" core true;
    ["gitlab"] "version-control" "GitLab projects, issues, merge requests";
    ["fetch"] "web" "Web content retrieval (pages, APIs)";
    ["time"] "utilities" "Current time and time-zone conversion";
    ["everything"] "testing" "MCP reference server exercising every protocol feature";
    ["supabase"] "database" "Supabase backend (database, auth, storage)";
    ["postgres", "postgresql"] "database" "PostgreSQL database queries and schema";
    ["sqlite"] "database" "SQLite database queries";
    ["clickhouse"] "database" "ClickHouse analytics database";
    ["neo4j"] "database" "Neo4j graph database";
    ["redis"] "database" "Redis key-value store";
    ["upstash"] "cache" "Upstash Redis and queues (serverless cache)";
    ["tavily"] "search" "AI-optimized web search";
    ["exa"] "search" "Semantic web search with neural embeddings";
    ["brave-search", "brave"] "search" "Brave web and local search";
    ["firecrawl"] "scraping" "Smart web scraping and content extraction";
    ["puppeteer"] "browser" "Headless Chrome browser automation";
    ["playwright"] "browser" "Multi-browser automation and testing";
    ["browserbase"] "browser" "Cloud browser sessions";
    ["vercel"] "deployment" "Vercel deployment (Next.js, serverless)";
    ["railway"] "deployment" "Railway app and database deployment";
    ["cloudflare"] "deployment" "Cloudflare Workers, KV, R2 and DNS";
    ["stripe"] "payments" "Stripe payments and subscriptions";
    ["resend"] "email" "Transactional email with Resend";
    ["expo"] "mobile" "Expo React Native apps";
    ["dart-flutter", "dart", "flutter"] "mobile" "Dart and Flutter development";
    ["figma"] "design" "Figma designs, components and assets";
    ["shadcn", "shadcn-ui"] "design" "Pre-built shadcn/ui components";
    ["magic", "21st-dev-magic"] "design" "UI components generated from a description";
    ["magic-ui", "magicui"] "design" "Magic UI animated components";
    ["echarts"] "charts" "Charts and visualisations with Apache ECharts";
    ["mermaid"] "charts" "Diagrams from Mermaid text";
    ["deepl"] "translation" "Translation with DeepL";
    ["notion"] "cms" "Notion pages and databases";
    ["sanity"] "cms" "Sanity content (CMS)";
    ["sentry"] "monitoring" "Sentry errors, issues and performance";
    ["semgrep"] "security" "Static analysis for security bugs";
    ["sonarqube", "sonar"] "security" "SonarQube code quality and security";
    ["docling"] "documents" "Document conversion (PDF, Office) to text";
    ["code2prompt"] "documents" "A codebase packed into one prompt";
    ["blender"] "3d" "Blender 3D modelling and scenes";
    ["unity"] "3d" "Unity game engine editor";
    ["ollama"] "ai" "Local models through Ollama";
    ["replicate"] "ai" "Hosted models on Replicate";
    ["youtube"] "video" "YouTube videos and transcripts";
    ["docker-mcp", "docker"] "containers" "Docker containers, images and compose";
    ["desktop-commander"] "automation" "Terminal commands and file edits on the desktop";
    ["desktop-automation"] "automation" "Mouse, keyboard and screen automation";
    ["slack"] "communication" "Slack channels and messages";
    ["linear"] "project-management" "Linear issues and projects";
    ["google-maps", "maps"] "maps" "Places, directions and geocoding";
];

/// A name as [`KNOWN`] spells it: lower case, without an npm scope or version and without
/// the usual `mcp-server-`/`server-`/`-mcp` decorations.
pub fn normalise(name: &str) -> String {
    let mut n = name.trim().to_ascii_lowercase();
    if let Some((_, package)) = n.rsplit_once('/') {
        n = package.to_string();
    }
    if let Some(at) = n.rfind('@').filter(|&at| at > 0) {
        n.truncate(at);
    }
    for prefix in ["mcp-server-", "server-", "mcp-"] {
        if let Some(rest) = n.strip_prefix(prefix).filter(|r| !r.is_empty()) {
            n = rest.to_string();
            break;
        }
    }
    for suffix in ["-mcp-server", "-server", "-mcp"] {
        if let Some(rest) = n.strip_suffix(suffix).filter(|r| !r.is_empty()) {
            n = rest.to_string();
            break;
        }
    }
    n.replace('_', "-")
}

/// The well-known server an entry is: by its name, else by the package or program it runs
/// (`runs`: a stdio entry's command then its arguments, as in `npx -y
/// @modelcontextprotocol/server-filesystem` or `uvx mcp-server-git`; nothing for a URL).
pub fn find<'a>(name: &str, runs: impl IntoIterator<Item = &'a str>) -> Option<&'static Known> {
    let find = |n: &str| {
        let n = normalise(n);
        KNOWN.iter().find(|k| k.names.contains(&n.as_str()))
    };
    if let Some(k) = find(name) {
        return Some(k);
    }
    runs.into_iter()
        .filter(|a| !a.starts_with('-'))
        .filter(|a| a.contains("mcp") || a.contains("server"))
        .find_map(|a| find(a.rsplit(std::path::MAIN_SEPARATOR).next().unwrap_or(a)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_normalise_to_the_known_spelling() {
        let cases = [
            ("memory", "memory"),
            ("@modelcontextprotocol/server-filesystem", "filesystem"),
            ("@modelcontextprotocol/server-memory@2026.1.0", "memory"),
            ("mcp-server-git", "git"),
            ("Sentry-MCP", "sentry"),
            ("docker-mcp", "docker"),
            ("brave_search", "brave-search"),
            ("mcp-server", "server"),
            ("server", "server"),
        ];
        for (name, normal) in cases {
            assert_eq!(normalise(name), normal, "{name}");
        }
    }

    #[test]
    fn known_servers_are_found_by_name_or_by_what_they_run() {
        let npx: &[&str] = &[
            "npx",
            "-y",
            "@modelcontextprotocol/server-filesystem",
            "/tmp",
        ];
        let uvx: &[&str] = &["uvx", "mcp-server-git", "--repository", "."];
        let local: &[&str] = &["/opt/bin/mcp-server-everything"];
        let mine: &[&str] = &["node", "build/index.js"];
        let cases: [(&str, &[&str], Option<&str>); 7] = [
            (
                "github",
                &[],
                Some("GitHub repos, issues, PRs, code search"),
            ),
            ("files", npx, Some("File operations (read, write, search)")),
            (
                "vcs",
                uvx,
                Some("Git operations (commits, branches, diffs)"),
            ),
            (
                "ref",
                local,
                Some("MCP reference server exercising every protocol feature"),
            ),
            (
                "docker-mcp",
                &[],
                Some("Docker containers, images and compose"),
            ),
            ("mine", mine, None),
            ("tmp", npx, Some("File operations (read, write, search)")),
        ];
        for (name, runs, description) in cases {
            assert_eq!(
                find(name, runs.iter().copied()).map(|k| k.description),
                description,
                "{name}"
            );
        }
        assert!(find("memory", []).unwrap().core);
        assert!(!find("vercel", []).unwrap().core);
    }
}
