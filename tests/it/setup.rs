//! `tandem setup AGENT` through the real binary, on copies of each agent's config format in
//! a hermetic home: Tandem's entry added beside the others, every other entry and key kept
//! as written, the servers `tandem servers import` moved behind Tandem removed, a second run
//! that changes nothing, the dry run, the refusal to write without a confirmation, and a
//! repository's symlink refused.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::util::{TestHome, git, tandem_bin};

/// A git workspace in the home: its canonical path.
fn workspace(home: &TestHome) -> PathBuf {
    let ws = home.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    git(&ws, &["init", "-q"]);
    ws.canonicalize().unwrap()
}

fn user_home(home: &TestHome) -> PathBuf {
    home.path().join("home")
}

fn put(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

/// Runs `tandem ARGS` in `dir` with `path` as `PATH` (the host's when `None`): whether it
/// succeeded, its stdout and its stderr.
fn run(
    home: &TestHome,
    dir: &Path,
    args: &[&str],
    path: Option<OsString>,
) -> (bool, String, String) {
    let mut cmd = home.std_command();
    cmd.args(args)
        .current_dir(dir)
        .stdin(std::process::Stdio::null());
    if let Some(path) = path {
        cmd.env("PATH", path);
    }
    let out = cmd.output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn ok(home: &TestHome, dir: &Path, args: &[&str]) -> String {
    let (done, stdout, stderr) = run(home, dir, args, None);
    assert!(done, "tandem {args:?}: {stdout}{stderr}");
    stdout
}

/// A `PATH` whose first directory holds `tandem`: a symlink to the binary under test, or
/// (`other`) a different program of that name.
fn path_with_tandem(home: &TestHome, other: bool) -> OsString {
    let dir = home.path().join(if other { "other-bin" } else { "bin" });
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("tandem");
    if other {
        put(&link, "#!/bin/sh\necho not tandem\n");
        std::fs::set_permissions(&link, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
    } else {
        std::os::unix::fs::symlink(tandem_bin(), &link).unwrap();
    }
    let mut dirs = vec![dir];
    dirs.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(dirs).unwrap()
}

/// The binary under test, as `tandem setup` writes it when `tandem` on PATH is not it.
fn exe() -> String {
    Path::new(tandem_bin())
        .canonicalize()
        .unwrap()
        .display()
        .to_string()
}

#[test]
fn claude_gets_tandem_and_loses_the_imported_servers() {
    let home = TestHome::new();
    let ws = workspace(&home);
    let file = user_home(&home).join(".claude.json");
    // As Claude Code writes it: many keys of its own, other projects' servers, user servers.
    let original = r#"{
  "numStartups": 12,
  "theme": "dark",
  "mcpServers": {
    "fetch": {
      "type": "stdio",
      "command": "uvx",
      "args": ["mcp-server-fetch"],
      "env": {}
    },
    "remote": {
      "type": "http",
      "url": "https://mcp.example.com/mcp",
      "headers": {"Authorization": "Bearer ${TOKEN}"}
    }
  },
  "projects": {
    "/elsewhere": {"mcpServers": {"local": {"command": "local-mcp"}}, "allowedTools": []}
  },
  "userID": "abc"
}
"#;
    put(&file, original);
    ok(
        &home,
        &ws,
        &["servers", "import", "--from", "claude", "--yes"],
    );
    // A server added to Claude Code after the import stays in its file.
    let with_new = original.replace(
        r#"    "remote": {"#,
        "    \"new\": {\"command\": \"new-mcp\"},\n    \"remote\": {",
    );
    put(&file, &with_new);

    let shown = ok(&home, &ws, &["setup", "claude", "--dry-run"]);
    assert_eq!(read(&file), with_new, "a dry run wrote");
    assert!(shown.contains("+ \"tandem\": {"), "{shown}");
    assert!(
        shown.contains(&format!("\"command\": \"{}\"", exe())),
        "{shown}"
    );
    assert!(shown.contains("- fetch: uvx mcp-server-fetch"), "{shown}");
    assert!(!shown.contains("Bearer"), "a header's value shown: {shown}");
    assert!(shown.contains("dry run: nothing written"), "{shown}");

    // Nobody at a terminal to confirm, no --yes: nothing written.
    let (done, _, stderr) = run(&home, &ws, &["setup", "claude"], None);
    assert!(!done && stderr.contains("--yes"), "{stderr}");
    assert_eq!(read(&file), with_new);

    ok(&home, &ws, &["setup", "claude", "--yes"]);
    let want = format!(
        r#"{{
  "numStartups": 12,
  "theme": "dark",
  "mcpServers": {{
    "new": {{"command": "new-mcp"}},
    "tandem": {{
      "type": "stdio",
      "command": "{}",
      "args": [
        "mcp"
      ]
    }}
  }},
  "projects": {{
    "/elsewhere": {{"mcpServers": {{"local": {{"command": "local-mcp"}}}}, "allowedTools": []}}
  }},
  "userID": "abc"
}}
"#,
        exe()
    );
    assert_eq!(read(&file), want);

    let again = ok(&home, &ws, &["setup", "claude", "--yes"]);
    assert!(again.contains("already set up"), "{again}");
    assert_eq!(read(&file), want, "a second run changed the file");
}

#[test]
fn codex_toml_keeps_its_comments_and_other_tables() {
    let home = TestHome::new();
    let ws = workspace(&home);
    let file = user_home(&home).join(".codex/config.toml");
    let original = "# Codex settings\nmodel = \"gpt-5-codex\" # the default\n\n[mcp_servers.docs]\ncommand = \"npx\"\nargs = [\"-y\", \"docs-mcp\"]\n\n[mcp_servers.docs.env]\nDOCS_TOKEN = \"s3cret\"\n\n[profiles.fast]\nmodel = \"o4-mini\"\n";
    put(&file, original);
    ok(
        &home,
        &ws,
        &["servers", "import", "--from", "codex", "--yes"],
    );
    let kept = format!("{original}\n[mcp_servers.other]\ncommand = \"other-mcp\"\n");
    put(&file, &kept);

    let shown = ok(&home, &ws, &["setup", "codex", "--yes"]);
    assert!(!shown.contains("s3cret"), "a value shown: {shown}");
    assert_eq!(
        read(&file),
        format!(
            "# Codex settings\nmodel = \"gpt-5-codex\" # the default\n\n[profiles.fast]\nmodel = \"o4-mini\"\n\n[mcp_servers.other]\ncommand = \"other-mcp\"\n\n[mcp_servers.tandem]\ncommand = \"{}\"\nargs = [\"mcp\"]\n",
            exe()
        )
    );
    let again = ok(&home, &ws, &["setup", "codex"]);
    assert!(again.contains("already set up"), "{again}");
}

#[test]
fn project_files_of_gemini_vscode_and_cursor_get_tandem_from_path() {
    let home = TestHome::new();
    let ws = workspace(&home);
    let on_path = path_with_tandem(&home, false);
    let cases: [(&str, &str, &str, &str); 3] = [
        (
            "gemini",
            ".gemini/settings.json",
            "{\n    \"theme\": \"GitHub\",\n    \"mcpServers\": {\n        \"mine\": {\"command\": \"mine-mcp\", \"timeout\": 5000}\n    }\n}\n",
            "{\n    \"theme\": \"GitHub\",\n    \"mcpServers\": {\n        \"mine\": {\"command\": \"mine-mcp\", \"timeout\": 5000},\n        \"tandem\": {\n            \"command\": \"tandem\",\n            \"args\": [\n                \"mcp\"\n            ]\n        }\n    }\n}\n",
        ),
        (
            "vscode",
            ".vscode/mcp.json",
            "{\n  \"inputs\": [{\"type\": \"promptString\", \"id\": \"key\", \"password\": true}],\n  \"servers\": {\n    \"api\": {\"type\": \"http\", \"url\": \"https://x.example/mcp\", \"headers\": {\"K\": \"${input:key}\"}}\n  }\n}\n",
            "{\n  \"inputs\": [{\"type\": \"promptString\", \"id\": \"key\", \"password\": true}],\n  \"servers\": {\n    \"api\": {\"type\": \"http\", \"url\": \"https://x.example/mcp\", \"headers\": {\"K\": \"${input:key}\"}},\n    \"tandem\": {\n      \"type\": \"stdio\",\n      \"command\": \"tandem\",\n      \"args\": [\n        \"mcp\"\n      ]\n    }\n  }\n}\n",
        ),
        (
            "cursor",
            ".cursor/mcp.json",
            "{\"mcpServers\": {}, \"other\": [1, 2]}",
            "{\n  \"mcpServers\": {\n    \"tandem\": {\n      \"command\": \"tandem\",\n      \"args\": [\n        \"mcp\"\n      ]\n    }\n  },\n  \"other\": [1, 2]\n}\n",
        ),
    ];
    for (agent, name, before, after) in cases {
        let file = ws.join(name);
        put(&file, before);
        let args = ["setup", agent, "--project", "--yes"];
        let (done, stdout, stderr) = run(&home, &ws, &args, Some(on_path.clone()));
        assert!(done, "{agent}: {stdout}{stderr}");
        assert_eq!(read(&file), after, "{agent}");
        let (done, stdout, _) = run(&home, &ws, &args, Some(on_path.clone()));
        assert!(
            done && stdout.contains("already set up"),
            "{agent}: {stdout}"
        );
        assert_eq!(read(&file), after, "{agent}: a second run changed it");
    }

    // No file yet: created, in the user's places.
    let (done, stdout, stderr) = run(&home, &ws, &["setup", "cursor", "--yes"], Some(on_path));
    assert!(done, "{stdout}{stderr}");
    let created: serde_json::Value =
        serde_json::from_str(&read(&user_home(&home).join(".cursor/mcp.json"))).unwrap();
    assert_eq!(
        created,
        serde_json::json!({"mcpServers": {"tandem": {"command": "tandem", "args": ["mcp"]}}})
    );
}

#[test]
fn another_tandem_on_path_gets_the_absolute_path_and_an_old_entry_is_replaced() {
    let home = TestHome::new();
    let ws = workspace(&home);
    let file = ws.join(".mcp.json");
    put(
        &file,
        "{\"mcpServers\": {\"tandem\": {\"command\": \"/old/place/tandem\", \"args\": [\"mcp\"]}}}\n",
    );
    let other = path_with_tandem(&home, true);
    let (done, stdout, stderr) = run(
        &home,
        &ws,
        &["setup", "claude", "--project", "--yes"],
        Some(other),
    );
    assert!(done, "{stdout}{stderr}");
    assert!(
        stdout.contains("- \"tandem\": {\"command\": \"/old/place/tandem\""),
        "{stdout}"
    );
    let written: serde_json::Value = serde_json::from_str(&read(&file)).unwrap();
    assert_eq!(written["mcpServers"]["tandem"]["command"], exe().as_str());
}

/// A repository may commit `.vscode/mcp.json` as a symlink to a file of the user's: setup
/// writes no project file through a symlink, so the user's file stays as it was.
#[test]
fn a_project_file_that_is_a_symlink_is_refused() {
    let home = TestHome::new();
    let ws = workspace(&home);
    let users = user_home(&home).join(".claude.json");
    put(&users, "{\"servers\": {}}\n");
    std::fs::create_dir_all(ws.join(".vscode")).unwrap();
    std::os::unix::fs::symlink(&users, ws.join(".vscode/mcp.json")).unwrap();
    let (done, _, stderr) = run(&home, &ws, &["setup", "vscode", "--project", "--yes"], None);
    assert!(!done && stderr.contains("symlink"), "{stderr}");
    assert_eq!(read(&users), "{\"servers\": {}}\n");

    // And a file that is not the agent's format is refused, unchanged.
    let broken = ws.join(".gemini/settings.json");
    put(&broken, "{\"mcpServers\": [1]}");
    let (done, _, stderr) = run(&home, &ws, &["setup", "gemini", "--project", "--yes"], None);
    assert!(
        !done && stderr.contains("'mcpServers' is not an object"),
        "{stderr}"
    );
    assert_eq!(read(&broken), "{\"mcpServers\": [1]}");
    let (done, _, stderr) = run(&home, &ws, &["setup", "codex", "--project"], None);
    assert!(!done && stderr.contains("without --project"), "{stderr}");
}
