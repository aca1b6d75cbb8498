//! `tandem servers import` through the real binary: an agent's servers (Claude Code's
//! `.mcp.json`, Codex's `config.toml`) brought into the user's `config.json` of a hermetic
//! home, then listed and run by the hub; conflicts, a repository's definition of a name the
//! user defines too, the dry run and the refusal to write without a confirmation.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::hub::{ok, server, start_daemon, tandem};
use crate::util::{TestHome, fixture_bin};

/// A git workspace whose `.mcp.json` lists `servers`, and the home's Codex config holding
/// `codex` (TOML): the workspace's canonical path.
fn agents(home: &TestHome, servers: Value, codex: &str) -> PathBuf {
    let ws = home.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    crate::util::git(&ws, &["init", "-q"]);
    let mcp = json!({ "mcpServers": servers });
    std::fs::write(ws.join(".mcp.json"), mcp.to_string()).unwrap();
    let codex_dir = home.path().join("home/.codex");
    std::fs::create_dir_all(&codex_dir).unwrap();
    std::fs::write(codex_dir.join("config.toml"), codex).unwrap();
    ws.canonicalize().unwrap()
}

/// A Codex table for the fixture named `name`, printing `$TOKEN`, with `TOKEN` = `token`.
fn codex_fixture(name: &str, token: &str) -> String {
    format!(
        "model = \"gpt-5-codex\"\n\n[mcp_servers.{name}]\ncommand = {:?}\nargs = [\"--name\", \"{name}\", \"--print-env\", \"TOKEN\"]\n\n[mcp_servers.{name}.env]\nTOKEN = \"{token}\"\n",
        fixture_bin().display().to_string()
    )
}

fn actions(plan: &Value) -> Vec<String> {
    plan["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            format!(
                "{} {}",
                r["name"].as_str().unwrap(),
                r["action"].as_str().unwrap()
            )
        })
        .collect()
}

fn config_file(home: &TestHome) -> PathBuf {
    home.tandem_home().join("config.json")
}

/// The user's `config.json`, read.
fn config(home: &TestHome) -> Value {
    serde_json::from_str(&std::fs::read_to_string(config_file(home)).unwrap()).unwrap()
}

/// What `tandem servers import --dry-run` prints for people in `ws`.
fn dry_run(home: &TestHome, ws: &Path) -> String {
    let out = home
        .std_command()
        .args(["servers", "import", "--dry-run"])
        .current_dir(ws)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{stdout}");
    stdout
}

/// A directory with no agent config of its own, to see the user's servers alone.
fn elsewhere(home: &TestHome) -> PathBuf {
    let dir = home.path().join("elsewhere");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn prompt_text(home: &TestHome, dir: &Path, command: &str) -> String {
    let run = ok(home, dir, &["prompt", command, "--json"]);
    run["messages"][0]["content"]["text"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn claude_and_codex_servers_are_imported_then_served() {
    let home = TestHome::new();
    let fixture = fixture_bin().display().to_string();
    let ws = agents(
        &home,
        json!({
            "fx": {"type": "stdio", "command": fixture, "args": ["--name", "fx", "--print-cwd"]},
            "tandem": {"command": "tandem", "args": ["mcp"]},
            "legacy": {"type": "sse", "url": "http://127.0.0.1:9/sse"}
        }),
        &codex_fixture("ctx", "s3cret"),
    );
    let (done, stdout, _) = tandem(&home, &ws, &["servers", "import", "--yes", "--json"]);
    assert!(done, "{stdout}");
    assert_eq!(stdout["written"], true);
    assert_eq!(
        actions(&stdout),
        ["ctx added", "fx added", "legacy skipped", "tandem skipped"]
    );
    let ctx = stdout["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "ctx")
        .unwrap();
    assert_eq!(ctx["env"], json!(["TOKEN"]));
    assert!(
        !stdout.to_string().contains("s3cret"),
        "a value in the plan: {stdout}"
    );
    let sources: Vec<(&str, bool)> = stdout["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["agent"].as_str().unwrap(), s["present"] == true))
        .filter(|(_, present)| *present)
        .collect();
    assert_eq!(sources, [("codex", true), ("claude-project", true)]);

    // The user's servers, listed and run from any workspace: the project's server runs in
    // its project, the Codex server with its environment.
    let other = elsewhere(&home);
    let report = ok(&home, &other, &["servers", "--json"]);
    for name in ["fx", "ctx"] {
        assert_eq!(
            server(&report, name)["origin"]["kind"],
            "user",
            "{report:#}"
        );
    }
    assert_eq!(prompt_text(&home, &other, "/ctx:env"), "s3cret");
    assert_eq!(
        prompt_text(&home, &other, "/fx:cwd"),
        ws.display().to_string()
    );

    // Again: nothing new, nothing written.
    let before = std::fs::read_to_string(config_file(&home)).unwrap();
    let again = ok(&home, &ws, &["servers", "import", "--yes", "--json"]);
    assert_eq!(again["written"], false);
    assert_eq!(&actions(&again)[..2], ["ctx unchanged", "fx unchanged"]);
    assert_eq!(std::fs::read_to_string(config_file(&home)).unwrap(), before);
}

#[test]
fn a_conflict_is_kept_unless_overwritten_through_the_daemon() {
    let home = TestHome::new();
    let ws = agents(&home, json!({}), &codex_fixture("ctx", "new-token"));
    std::fs::create_dir_all(home.tandem_home()).unwrap();
    let kept_members = "\"zeta\": [1,  2e3],\n\t\"mcpServers\": {\n\t\t\"other\": {\"command\": \"o\"},\n\t\t\"ctx\": {\"command\": \"old-ctx\"}\n\t}";
    let original =
        format!("{{\n\t{kept_members},\n\t\"conventionalPrompts\": {{\"enabled\": true}}\n}}\n");
    std::fs::write(config_file(&home), &original).unwrap();
    let _daemon = start_daemon(&home);

    let plan = ok(
        &home,
        &ws,
        &["servers", "import", "--from", "codex", "--yes", "--json"],
    );
    assert_eq!(actions(&plan), ["ctx conflict"]);
    assert_eq!(plan["written"], false);
    assert!(
        plan["servers"][0]["notes"][0]
            .as_str()
            .unwrap()
            .contains("--overwrite"),
        "{plan:#}"
    );
    assert_eq!(
        std::fs::read_to_string(config_file(&home)).unwrap(),
        original
    );

    let plan = ok(
        &home,
        &ws,
        &[
            "servers",
            "import",
            "--from",
            "codex",
            "--overwrite",
            "--yes",
            "--json",
        ],
    );
    assert_eq!(actions(&plan), ["ctx replaced"]);
    assert_eq!(plan["written"], true);
    let text = std::fs::read_to_string(config_file(&home)).unwrap();
    // The other members and the other server keep their text; the file keeps its tabs.
    assert!(text.starts_with("{\n\t\"zeta\": [1,  2e3],\n\t\"mcpServers\": {\n\t\t\"other\": {\"command\": \"o\"},\n\t\t\"ctx\": {\n\t\t\t\"command\": "), "{text}");
    assert!(
        text.ends_with("\t},\n\t\"conventionalPrompts\": {\"enabled\": true}\n}\n"),
        "{text}"
    );
    // The daemon serves the new definition.
    assert_eq!(
        prompt_text(&home, &elsewhere(&home), "/ctx:env"),
        "new-token"
    );
}

#[test]
fn a_dry_run_or_no_confirmation_writes_nothing() {
    let home = TestHome::new();
    let ws = agents(&home, json!({}), &codex_fixture("ctx", "s3cret"));

    let stdout = dry_run(&home, &ws);
    assert!(
        stdout.contains("~/.codex/config.toml (codex): 1 server"),
        "{stdout}"
    );
    assert!(
        stdout.contains("env: TOKEN") && !stdout.contains("s3cret"),
        "{stdout}"
    );
    assert!(
        stdout.contains("dry run: 1 server would be imported"),
        "{stdout}"
    );
    assert!(!config_file(&home).exists());

    // No terminal to ask on, and no --yes: refused, with what to do.
    let (done, _, stderr) = tandem(&home, &ws, &["servers", "import"]);
    assert!(!done);
    assert!(
        stderr.contains("not imported") && stderr.contains("--yes"),
        "{stderr}"
    );
    assert!(!config_file(&home).exists());

    let (done, _, stderr) = tandem(&home, &ws, &["servers", "import", "--from", "nowhere"]);
    assert!(!done);
    assert!(stderr.contains("neither an agent"), "{stderr}");

    // The plain listing is unchanged: `tandem servers` and `tandem servers list`.
    for args in [&["servers", "--json"][..], &["servers", "list", "--json"]] {
        let report = ok(&home, &ws, args);
        assert_eq!(report["servers"], json!([]), "{args:?}");
    }
}

/// Finding 11 of the security audit: a cloned repository's `.mcp.json` defines a server
/// under the name of one of the user's own (here a command of the repository's, run in it);
/// importing everything must take the user's, and say that the repository's differs.
#[test]
fn the_users_own_definition_wins_over_the_repositorys() {
    let home = TestHome::new();
    let fixture = fixture_bin().display().to_string();
    let ws = agents(
        &home,
        json!({
            "notes": {"command": "./node_modules/.bin/x", "args": ["--serve"]},
            "only-here": {"command": "./node_modules/.bin/y"}
        }),
        "",
    );
    let claude = json!({"mcpServers": {
        "notes": {"command": fixture, "args": ["--name", "notes"]}
    }});
    std::fs::write(home.path().join("home/.claude.json"), claude.to_string()).unwrap();
    let repo_file = ws.join(".mcp.json").display().to_string();

    // The plan as people read it names the repository's file beside the user's server.
    let stdout = dry_run(&home, &ws);
    let said = format!(
        "notes: yours, from ~/.claude.json, is the one imported; {repo_file} (this project's) defines a different server of that name, not imported"
    );
    assert!(stdout.contains(&said), "{stdout}");

    let plan = ok(&home, &ws, &["servers", "import", "--yes", "--json"]);
    assert_eq!(
        actions(&plan),
        ["notes added", "notes skipped", "only-here added"]
    );
    let rows = plan["servers"].as_array().unwrap();
    let claude_file = home.path().join("home/.claude.json");
    assert_eq!(rows[0]["from"], claude_file.display().to_string());
    assert_eq!(rows[0]["differs_in"], json!([repo_file]));
    assert_eq!(rows[1]["from"], repo_file);
    assert_eq!(rows[1]["runs"], "./node_modules/.bin/x --serve");
    assert!(
        rows[1]["notes"][0]
            .as_str()
            .unwrap()
            .starts_with("the user's own definition of this name"),
        "{plan:#}"
    );
    assert_eq!(
        config(&home)["mcpServers"]["notes"]["command"],
        json!(fixture)
    );

    // Even --overwrite never puts the repository's definition over the user's own, and it
    // replaces an entry of config.json with a repository's only saying so.
    let mut mine = config(&home);
    mine["mcpServers"]["only-here"] = json!({"command": "my-own"});
    std::fs::write(config_file(&home), mine.to_string()).unwrap();
    let plan = ok(
        &home,
        &ws,
        &["servers", "import", "--yes", "--overwrite", "--json"],
    );
    assert_eq!(
        actions(&plan),
        ["notes unchanged", "notes skipped", "only-here replaced"]
    );
    assert_eq!(
        plan["servers"][2]["notes"][0],
        "replaces the entry in config.json with this project's definition"
    );
    assert_eq!(
        config(&home)["mcpServers"]["notes"]["command"],
        json!(fixture)
    );
}
