//! End to end in a real headless Neovim: an agent (the real binary over MCP) works on a
//! task while Neovim, attached to `tandem lsp` through the same daemon, receives the
//! diagnostics, code lenses and progress; then memory in the editor.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::nvim::Nvim;
use crate::util::{
    DaemonGuard, McpClient, TestHome, everything_bin, fixture_bin, repo_with, write_files,
};

const FILES: &[(&str, &str)] = &[
    ("src/auth/jwt.rs", "fn verify() {}\n\nfn sign() {}\n"),
    ("src/utils.rs", "pub fn helper() {}\n"),
    ("README.md", "# demo\n"),
];

/// A test's workspace: a git repository in a home of its own, whose daemon is stopped when
/// the test ends (declared first, it goes after Neovim and the agent).
struct Workspace {
    home: TestHome,
    repo: PathBuf,
}

impl Workspace {
    /// A repository holding `files`.
    fn with(files: &[(&str, &str)]) -> Workspace {
        let home = TestHome::new();
        let repo = home.path().join("repo");
        repo_with(&repo, files);
        Workspace { home, repo }
    }

    /// A repository with `notes.md` and a `.mcp.json` listing `servers`.
    fn hub(servers: Value) -> Workspace {
        let config = json!({ "mcpServers": servers }).to_string();
        Workspace::with(&[("notes.md", "# Notes\n"), (".mcp.json", config.as_str())])
    }

    /// The agent: `tandem mcp` through the home's daemon (which it starts).
    async fn agent(&self) -> McpClient {
        self.home.mcp_daemon(&self.repo, 60).await
    }

    /// `tandem trust --yes` in the repository.
    fn trust(&self) {
        let out = self
            .home
            .std_command()
            .args(["trust", "--yes"])
            .current_dir(&self.repo)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Neovim in the repository with the plugin set up against the test's binary, progress
    /// recorded in `_G.progress`, and `file` open.
    async fn editor(&self, file: &str) -> Nvim {
        self.editor_with(file, "").await
    }

    /// The same, running the Lua `prelude` first (before the client starts).
    async fn editor_with(&self, file: &str, prelude: &str) -> Nvim {
        let nvim = Nvim::start(&self.home, &self.repo).await;
        nvim.lua(&format!(
            r#"
            {prelude}
            _G.progress = {{}}
            vim.api.nvim_create_autocmd('LspProgress', {{ callback = function(ev)
                local v = ev.data.params.value
                table.insert(_G.progress, {{ kind = v.kind, title = v.title, message = v.message, percentage = v.percentage }})
            end }})
            require('tandem').setup({{ cmd = {{ '{bin}' }} }})
            vim.cmd.edit('{file}')
            "#,
            bin = crate::util::tandem_bin(),
        ))
        .await;
        attached(&nvim).await;
        nvim
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        drop(DaemonGuard(&self.home));
    }
}

async fn attached(nvim: &Nvim) {
    nvim.wait(
        "the tandem client to attach",
        20,
        "local c = vim.lsp.get_clients({ bufnr = 0, name = 'tandem' })[1]; return c and c.initialized or false",
        |v| v == &json!(true),
    )
    .await;
}

/// The current buffer's tandem diagnostics as `[line, severity, code, message]`.
const DIAGNOSTICS: &str = r#"
    local out = {}
    for _, d in ipairs(vim.diagnostic.get(0)) do
        if d.source == 'tandem' then table.insert(out, { d.lnum, d.severity, d.code, d.message }) end
    end
    table.sort(out, function(a, b) return a[1] < b[1] or (a[1] == b[1] and a[3] < b[3]) end)
    return out
"#;

/// The lines of the open floating window, if any.
const FLOAT_LINES: &str = r#"
    for _, w in ipairs(vim.api.nvim_list_wins()) do
        if vim.api.nvim_win_get_config(w).relative ~= '' then
            return vim.api.nvim_buf_get_lines(vim.api.nvim_win_get_buf(w), 0, -1, false)
        end
    end
    return {}
"#;

/// The current buffer's code lens titles, once the lenses have been fetched.
const LENSES: &str = r#"
    local out = {}
    for _, l in ipairs(vim.lsp.codelens.get(0)) do
        if l.command then table.insert(out, { l.range.start.line, l.command.title, l.command.command }) end
    end
    table.sort(out, function(a, b) return a[1] < b[1] or (a[1] == b[1] and a[2] < b[2]) end)
    return out
"#;

/// `:checkhealth tandem`, as text.
pub async fn checkhealth(nvim: &Nvim) -> String {
    nvim.lua("vim.cmd('checkhealth tandem')").await;
    let text = nvim
        .lua("return table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\\n')")
        .await;
    text.as_str().unwrap().to_string()
}

fn list(v: &Value) -> &Vec<Value> {
    v.as_array().expect("a list")
}

async fn start_task(mcp: &McpClient, areas: &[&str]) -> String {
    let w = mcp
        .ok(
            "start_workflow",
            json!({"name": "Auth", "description": "JWT auth"}),
        )
        .await;
    let t = mcp
        .ok(
            "start_task",
            json!({"workflow_id": w["workflow_id"], "name": "Setup JWT middleware",
                   "goal": "verify tokens", "areas": areas}),
        )
        .await;
    t["task_id"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn a_task_shows_up_in_neovim_while_the_agent_works() {
    let ws = Workspace::with(FILES);
    let mcp = ws.agent().await;
    let task = start_task(&mcp, &["auth"]).await;

    let nvim = ws.editor("src/auth/jwt.rs").await;
    // The running task's progress began when the editor connected.
    nvim.wait("progress begin", 10, "return _G.progress", |v| {
        list(v)
            .iter()
            .any(|p| p["kind"] == "begin" && p["title"] == "Task: Setup JWT middleware")
    })
    .await;

    // The user edits and saves in the editor: that hunk is marked at once.
    nvim.lua("vim.api.nvim_buf_set_lines(0, 1, 2, false, { 'fn parse() {}', 'fn check() {}' }); vim.cmd.write()").await;
    let d = nvim
        .wait("diagnostics on the saved hunk", 10, DIAGNOSTICS, |v| {
            !list(v).is_empty()
        })
        .await;
    assert_eq!(
        d,
        json!([[
            1,
            3,
            "task-change",
            "Changed by task “Setup JWT middleware” (in progress)"
        ]])
    );

    // The agent edits a file outside the task's areas and logs a milestone.
    write_files(
        &ws.repo,
        &[("src/utils.rs", "pub fn helper() {}\npub fn extra() {}\n")],
    );
    mcp.ok(
        "log_milestone",
        json!({"task_id": task, "message": "Running tests…", "progress": 75}),
    )
    .await;
    nvim.wait(
        "the milestone's progress report",
        10,
        "return _G.progress",
        |v| {
            list(v).iter().any(|p| {
                p["kind"] == "report" && p["percentage"] == 75 && p["message"] == "Running tests…"
            })
        },
    )
    .await;
    nvim.lua("vim.cmd.edit('src/utils.rs')").await;
    attached(&nvim).await;
    let d = nvim
        .wait("an out-of-scope warning", 10, DIAGNOSTICS, |v| {
            !list(v).is_empty()
        })
        .await;
    assert_eq!(
        d,
        json!([[
            1,
            2,
            "outside-scope",
            "Outside declared scope (auth): changed by task “Setup JWT middleware”"
        ]])
    );

    // Code lenses: the task's headline on line 1, name and decisions on the hunk.
    nvim.lua("vim.cmd.edit('src/auth/jwt.rs')").await;
    let lenses = nvim
        .wait(
            "code lenses",
            10,
            &format!("vim.lsp.codelens.refresh({{ bufnr = 0 }}); {LENSES}"),
            |v| list(v).len() == 3 && v[0][1].as_str().is_some_and(|t| t.contains("75%")),
        )
        .await;
    assert_eq!(
        lenses,
        json!([
            [
                0,
                "Task: Setup JWT middleware · in progress · 75% · Running tests…",
                "tandem.task.show"
            ],
            [1, "Changed by Setup JWT middleware", "tandem.task.show"],
            [1, "Decisions (0)", "tandem.task.decisions"],
        ])
    );

    // An issue that needs a human: a warning on the files the task touched, at once.
    mcp.ok(
        "log_issue",
        json!({"task_id": task, "type": "unclear_requirement",
               "description": "token lifetime unspecified", "resolution": "used 1 h",
               "requires_human_review": true}),
    )
    .await;
    nvim.wait("the human-review warning", 10, DIAGNOSTICS, |v| {
        list(v).iter().any(|d| d[2] == "human-review")
    })
    .await;

    // Completion: progress ends, change marks clear, the review warnings come.
    mcp.ok(
        "complete_task",
        json!({"task_id": task, "status": "success",
               "outcome": {"summary": "done", "manual_review_needed": true,
                           "manual_review_reason": "token expiry is hard-coded"}}),
    )
    .await;
    nvim.wait("progress end", 10, "return _G.progress", |v| {
        list(v)
            .iter()
            .any(|p| p["kind"] == "end" && p["message"] == "success · 2 file(s) changed")
    })
    .await;
    let d = nvim
        .wait("review warnings only", 10, DIAGNOSTICS, |v| {
            list(v).iter().all(|d| d[0] == 0) && list(v).len() == 2
        })
        .await;
    assert_eq!(
        d,
        json!([
            [
                0,
                2,
                "human-review",
                "Human review required (task “Setup JWT middleware”): token lifetime unspecified"
            ],
            [
                0,
                2,
                "review-needed",
                "Manual review needed (task “Setup JWT middleware”): token expiry is hard-coded"
            ]
        ])
    );

    // Dismissed, they clear.
    nvim.lua("vim.lsp.get_clients({ name = 'tandem' })[1]:request('workspace/executeCommand', { command = 'tandem.diagnostics.dismiss', arguments = {} }, function() end)").await;
    nvim.wait("no tandem diagnostics", 10, DIAGNOSTICS, |v| {
        list(v).is_empty()
    })
    .await;

    nvim.quit().await;
    mcp.close().await;
}

/// The session's file watch, from `tandem/status` (null when none).
const WATCH: &str = r#"
    local c = vim.lsp.get_clients({ name = 'tandem' })[1]
    local r = c and c:request_sync('tandem/status', {}, 5000, 0)
    return r and r.result and r.result.watch or vim.NIL
"#;

fn ready(v: &Value) -> bool {
    v["ready"] == json!(true)
}

/// The agent edits the open `src/auth/jwt.rs` on disk (and writes `also`), with no call
/// and no save: one hunk, then two. The first write may race the refresh that follows the
/// watch's start; the second cannot, so its diagnostics came through the watch.
async fn agent_edits_on_disk(nvim: &Nvim, repo: &std::path::Path, also: &[(&str, &str)]) {
    let jwt = "src/auth/jwt.rs";
    write_files(
        repo,
        &[(jwt, "fn verify() {}\nfn refresh() {}\n\nfn sign() {}\n")],
    );
    nvim.wait("diagnostics on the agent's hunk", 10, DIAGNOSTICS, |v| {
        !list(v).is_empty()
    })
    .await;
    let two = "use jwt;\nfn verify() {}\nfn refresh() {}\n\nfn sign() {}\n";
    write_files(repo, &[&[(jwt, two)], also].concat());
    let d = nvim
        .wait(
            "diagnostics on the agent's two hunks",
            10,
            DIAGNOSTICS,
            |v| list(v).len() == 2,
        )
        .await;
    let changed = "Changed by task “Setup JWT middleware” (in progress)";
    assert_eq!(
        d,
        json!([
            [0, 3, "task-change", changed],
            [2, 3, "task-change", changed]
        ])
    );
}

#[tokio::test]
async fn an_agents_edits_on_disk_show_in_neovim_without_any_call() {
    let ws = Workspace::with(FILES);
    let mcp = ws.agent().await;
    let task = start_task(&mcp, &["auth"]).await;
    let nvim = ws.editor("src/auth/jwt.rs").await;
    let watch = nvim.wait("the watch", 10, WATCH, ready).await;
    assert_eq!(watch["polled_dirs"], 0, "{watch}");

    // A new file outside the task's areas beside the edits of the open file inside them.
    agent_edits_on_disk(
        &nvim,
        &ws.repo,
        &[("utils.ts", "export const retries = 3;\n")],
    )
    .await;
    nvim.lua("vim.cmd.edit('utils.ts')").await;
    let d = nvim
        .wait(
            "the new file's out-of-scope warning",
            10,
            DIAGNOSTICS,
            |v| !list(v).is_empty(),
        )
        .await;
    assert_eq!(
        d,
        json!([[
            0,
            2,
            "outside-scope",
            "Outside declared scope (auth): changed by task “Setup JWT middleware”"
        ]])
    );

    // An ignored file is not the task's: nothing is published for it.
    write_files(
        &ws.repo,
        &[(".gitignore", "*.log\n"), ("debug.log", "noise\n")],
    );
    nvim.lua("vim.cmd.edit('debug.log')").await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(nvim.lua(DIAGNOSTICS).await, json!([]));

    completed_and_unwatched(nvim, mcp, &task).await;
}

#[tokio::test]
async fn past_the_watch_limit_directories_are_polled() {
    let ws = Workspace::with(FILES);
    // One inotify watch: the root's. `src/`, `src/auth/`, `.git/` and `.git/refs/heads/`
    // are polled.
    let mcp = ws
        .home
        .mcp_daemon_env(&ws.repo, 60, &[("TANDEM_WATCH_MAX_DIRS", "1")])
        .await;
    let nvim = ws.editor("src/auth/jwt.rs").await;
    // No task runs: nothing is watched.
    assert_eq!(nvim.lua(WATCH).await, Value::Null);

    let task = start_task(&mcp, &["auth"]).await;
    let watch = nvim.wait("the watch", 10, WATCH, ready).await;
    assert_eq!(
        (&watch["watched_dirs"], &watch["polled_dirs"]),
        (&json!(1), &json!(4)),
        "{watch}"
    );
    let log = ws.home.log();
    assert!(
        log.contains("reached more than 1 directories (TANDEM_WATCH_MAX_DIRS); further directories are polled every 2 s"),
        "{log}"
    );

    // Edits in a polled directory still show, within the poll interval.
    agent_edits_on_disk(&nvim, &ws.repo, &[]).await;
    completed_and_unwatched(nvim, mcp, &task).await;
}

/// The task completes: the watch stops. Then Neovim and the agent end.
async fn completed_and_unwatched(nvim: Nvim, mcp: McpClient, task: &str) {
    mcp.ok(
        "complete_task",
        json!({"task_id": task, "status": "success", "outcome": {"summary": "done"}}),
    )
    .await;
    nvim.wait("no watch", 10, WATCH, Value::is_null).await;
    nvim.quit().await;
    mcp.close().await;
}

/// Sends an LSP request from Neovim's tandem client and waits for its answer (as JSON).
async fn request(nvim: &Nvim, method: &str, params: &str) -> Value {
    nvim.lua(&format!(
        r#"
        local c = vim.lsp.get_clients({{ bufnr = 0, name = 'tandem' }})[1]
        local res = c:request_sync('{method}', {params}, 10000, vim.api.nvim_get_current_buf())
        if not res then return {{ timeout = true }} end
        return {{ result = res.result, error = res.err }}
        "#
    ))
    .await
}

#[tokio::test]
async fn memory_in_neovim_hover_symbols_and_save_selection() {
    let ws = Workspace::with(FILES);
    let mcp = ws.agent().await;
    let added = mcp
        .ok(
            "rekall_add",
            json!({"type": "pitfall", "title": "JWT clock skew rejects fresh tokens",
                   "content": "Allow 30 s of leeway when verifying exp and nbf.",
                   "tags": ["jwt", "auth"]}),
        )
        .await;
    let id = added["id"].as_str().unwrap().to_string();

    let nvim = ws.editor("README.md").await;
    // Hover on a citation (a unique prefix works) shows the entry.
    nvim.lua(&format!(
        "vim.api.nvim_buf_set_lines(0, 0, -1, false, {{ 'See [{}] for the leeway.' }})",
        &id[..10]
    ))
    .await;
    let hover = request(
        &nvim,
        "textDocument/hover",
        "vim.lsp.util.make_position_params(0, 'utf-8')",
    )
    .await;
    assert_eq!(
        hover["result"],
        Value::Null,
        "the cursor is not on the citation: {hover}"
    );
    nvim.lua("vim.api.nvim_win_set_cursor(0, { 1, 8 })").await;
    let hover = request(
        &nvim,
        "textDocument/hover",
        "vim.lsp.util.make_position_params(0, 'utf-8')",
    )
    .await;
    let text = hover["result"]["contents"]["value"]
        .as_str()
        .unwrap_or_default();
    assert!(
        text.starts_with("# JWT clock skew rejects fresh tokens"),
        "{hover}"
    );
    assert!(text.contains("Allow 30 s of leeway"), "{hover}");
    assert_eq!(hover["result"]["range"]["start"]["character"], 4);

    // Workspace symbols search memory and locate entries at tandem:// documents, which the
    // plugin opens as readable buffers.
    let symbols = request(&nvim, "workspace/symbol", "{ query = 'clock skew' }").await;
    let first = &symbols["result"][0];
    assert_eq!(
        first["name"], "JWT clock skew rejects fresh tokens",
        "{symbols}"
    );
    let uri = first["location"]["uri"].as_str().unwrap().to_string();
    assert_eq!(uri, format!("tandem://memory/{id}"));
    nvim.lua(&format!("vim.cmd.edit('{uri}')")).await;
    let doc = nvim
        .wait(
            "the entry's document",
            10,
            "return vim.api.nvim_buf_get_lines(0, 0, -1, false)",
            |v| list(v).len() > 2,
        )
        .await;
    assert_eq!(doc[0], "# JWT clock skew rejects fresh tokens");
    assert_eq!(nvim.lua("return vim.bo.filetype").await, "markdown");
    nvim.lua("vim.cmd.edit('src/auth/jwt.rs')").await;
    attached(&nvim).await;

    // "Save selection to memory": offered on a selection, then run with the type the user
    // picked; the entry keeps the file and lines as context.
    let actions = request(
        &nvim,
        "textDocument/codeAction",
        "{ textDocument = { uri = vim.uri_from_bufnr(0) }, range = { start = { line = 0, character = 0 }, ['end'] = { line = 1, character = 0 } }, context = { diagnostics = {} } }",
    )
    .await;
    let action = &actions["result"][0];
    assert_eq!(action["title"], "Save selection to memory", "{actions}");
    let mut args = action["command"]["arguments"][0].clone();
    args["type"] = json!("pattern");
    let saved = request(
        &nvim,
        "workspace/executeCommand",
        &format!(
            "{{ command = 'tandem.memory.saveSelection', arguments = {{ vim.json.decode([[{args}]]) }} }}"
        ),
    )
    .await;
    let new_id = saved["result"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{saved}"));
    let shown = mcp.ok("rekall_show", json!({"id": new_id})).await;
    assert_eq!(shown["title"], "fn verify() {}");
    assert_eq!(shown["content"], "fn verify() {}\n");
    assert_eq!(shown["type"], "pattern");
    assert!(
        shown["context"]
            .as_str()
            .unwrap()
            .starts_with("src/auth/jwt.rs:L1-L1"),
        "{shown}"
    );

    // Without the type the command says what is missing.
    let refused = request(
        &nvim,
        "workspace/executeCommand",
        &format!(
            "{{ command = 'tandem.memory.saveSelection', arguments = {{ vim.json.decode([[{}]]) }} }}",
            action["command"]["arguments"][0]
        ),
    )
    .await;
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("'type'"),
        "{refused}"
    );
    assert_eq!(
        refused["error"]["data"]["error"]["code"],
        "INVALID_ARGUMENT"
    );

    nvim.quit().await;
    mcp.close().await;
}

/// `plugin/tandem.lua`: `:Tandem` and `:checkhealth tandem` exist before setup(), and the
/// first `:Tandem` sets Tandem up with the defaults and attaches the buffer (what
/// lazy-loading on the command relies on).
#[tokio::test]
async fn the_command_exists_before_setup() {
    let ws = Workspace::with(FILES);
    let nvim = Nvim::start(&ws.home, &ws.repo).await;
    nvim.lua("vim.cmd.edit('src/auth/jwt.rs')").await;
    let before = nvim
        .lua("return { vim.fn.exists(':Tandem'), require('tandem').config() == nil, #vim.lsp.get_clients() }")
        .await;
    assert_eq!(before, json!([2, true, 0]));

    let health = checkhealth(&nvim).await;
    assert!(
        health.contains("tandem: Neovim and setup")
            && health.contains("setup() has not been called"),
        "{health}"
    );
    nvim.lua("vim.cmd('tabclose')").await;

    // The default `cmd` is `tandem` on PATH.
    let bin_dir = std::path::Path::new(crate::util::tandem_bin())
        .parent()
        .unwrap();
    nvim.lua(&format!(
        "vim.env.PATH = '{}:' .. vim.env.PATH; vim.cmd('Tandem status')",
        bin_dir.display()
    ))
    .await;
    attached(&nvim).await;
    let after = nvim
        .lua("return { require('tandem').config() ~= nil, vim.lsp.get_clients({ bufnr = 0 })[1].name }")
        .await;
    assert_eq!(after, json!([true, "tandem"]));
    nvim.quit().await;
}

#[tokio::test]
async fn tandem_commands_in_neovim() {
    let ws = Workspace::with(FILES);
    let mcp = ws.agent().await;
    let task = start_task(&mcp, &["auth"]).await;
    mcp.ok(
        "log_decision",
        json!({"task_id": task, "category": "architecture", "question": "Where to verify?",
               "options_considered": ["middleware", "handler"], "chosen": "middleware",
               "reasoning": "one place for every route"}),
    )
    .await;
    mcp.ok(
        "rekall_add",
        json!({"type": "decision", "title": "Verify JWT in middleware", "content": "One place.", "tags": ["jwt"]}),
    )
    .await;
    let nvim = ws.editor("src/auth/jwt.rs").await;
    // Dialogs answer themselves; notifications are recorded.
    nvim.lua(
        r#"
        _G.notes = {}
        vim.notify = function(msg, level) table.insert(_G.notes, msg) end
        vim.ui.select = function(items, opts, on_choice)
            _G.offered = items
            on_choice(items[1], 1)
        end
        vim.ui.input = function(opts, on_confirm) on_confirm(opts.default) end
        "#,
    )
    .await;

    // Completion of subcommands, then task ids once a list was fetched.
    let subs = nvim
        .lua("return vim.fn.getcompletion('Tandem ', 'cmdline')")
        .await;
    for sub in [
        "tasks", "task", "memory", "log", "status", "dismiss", "prompt", "inject", "servers",
        "trust",
    ] {
        assert!(
            list(&subs).contains(&json!(sub)),
            "{sub} missing from {subs}"
        );
    }
    // `:Tandem tasks` shows the tree in a float.
    nvim.lua("vim.cmd('Tandem tasks')").await;
    let float = nvim
        .wait("the task float", 10, FLOAT_LINES, |v| !list(v).is_empty())
        .await;
    let text = float.to_string();
    assert!(
        text.contains("Auth") && text.contains("Setup JWT middleware"),
        "{float}"
    );
    nvim.lua("vim.cmd('close')").await;
    let ids = nvim
        .lua("return vim.fn.getcompletion('Tandem task ', 'cmdline')")
        .await;
    assert_eq!(ids, json!([task]));
    // `:Tandem tasks!` fills the quickfix list.
    nvim.lua("vim.cmd('Tandem tasks!')").await;
    let qf = nvim
        .wait(
            "the quickfix list",
            10,
            "return vim.tbl_map(function(i) return i.text end, vim.fn.getqflist())",
            |v| !list(v).is_empty(),
        )
        .await;
    assert!(qf.to_string().contains("Setup JWT middleware"), "{qf}");

    // `:Tandem task ID` opens the record; its decisions are there.
    nvim.lua(&format!("vim.cmd('Tandem task {}')", &task[..8]))
        .await;
    let doc = nvim
        .wait(
            "the task document",
            10,
            "return vim.api.nvim_buf_get_lines(0, 0, -1, false)",
            |v| list(v).len() > 3,
        )
        .await;
    assert_eq!(doc[0], "# Task: Setup JWT middleware");
    let text = doc.to_string();
    assert!(
        text.contains("## Decisions") && text.contains("Where to verify?"),
        "{doc}"
    );

    // `:Tandem memory search` offers results in vim.ui.select and opens the chosen one.
    nvim.lua("vim.cmd('Tandem memory search jwt middleware')")
        .await;
    let entry = nvim
        .wait(
            "the chosen entry",
            10,
            "return vim.api.nvim_buf_get_lines(0, 0, 1, false)[1]",
            |v| v == "# Verify JWT in middleware",
        )
        .await;
    assert_eq!(entry, "# Verify JWT in middleware");

    // `:'<,'>Tandem memory add` saves the lines with the type and title picked.
    nvim.lua("vim.cmd.edit('src/auth/jwt.rs')").await;
    attached(&nvim).await;
    nvim.lua("vim.cmd('3,3Tandem memory add')").await;
    let found = nvim
        .wait("the saved entry", 10, "return _G.notes", |v| {
            list(v)
                .iter()
                .any(|n| n.as_str().unwrap_or("").contains("saved"))
        })
        .await;
    let searched = mcp.ok("rekall_search", json!({"query": "sign"})).await;
    assert_eq!(
        searched["results"][0]["title"], "fn sign() {}",
        "{searched} {found}"
    );

    // `:Tandem status` and `:checkhealth tandem`.
    nvim.lua("_G.notes = {}; vim.cmd('Tandem status')").await;
    let notes = nvim
        .wait("the status", 10, "return _G.notes", |v| !list(v).is_empty())
        .await;
    let text = notes.to_string();
    assert!(
        text.contains(env!("CARGO_PKG_VERSION")) && text.contains("daemon"),
        "{notes}"
    );
    let health = checkhealth(&nvim).await;
    assert!(health.contains("OK version: tandem"), "{health}");
    assert!(health.contains("OK running: pid"), "{health}");
    assert!(!health.contains("ERROR"), "{health}");

    nvim.quit().await;
    mcp.close().await;
}

// The hub in the editor: prompt commands, the injection, servers and trust.

/// Dialogs answer themselves (the first choice, or the one titled `_G.pick`); notifications
/// and what was offered are recorded.
const RECORD_UI: &str = r#"
    _G.notes = {}
    _G.asked = {}
    vim.notify = function(msg) table.insert(_G.notes, msg) end
    vim.ui.select = function(items, opts, on_choice)
        table.insert(_G.asked, (opts.kind or '') .. '|' .. (opts.prompt or ''))
        for i, item in ipairs(items) do
            local title = type(item) == 'table' and item.title or item
            if _G.pick == nil or title == _G.pick then return on_choice(item, i) end
        end
        on_choice(nil, nil)
    end
"#;

/// The states of the workspace's servers, from `tandem.servers`.
const SERVER_STATES: &str = r#"
    local done
    require('tandem').server_list(function(err, r) done = r or {} end)
    vim.wait(5000, function() return done ~= nil end)
    return vim.tbl_map(function(s) return s.state end, done and done.servers or {})
"#;

/// Completion items (`[label, detail, newText]`) the server gives at the end of `line`, set
/// as the current buffer's only line.
async fn complete_line(nvim: &Nvim, line: &str) -> Value {
    nvim.lua(&format!(
        r#"
        local line = vim.json.decode([[{}]])
        vim.api.nvim_buf_set_lines(0, 0, -1, false, {{ line }})
        local c = vim.lsp.get_clients({{ bufnr = 0, name = 'tandem' }})[1]
        local params = {{ textDocument = {{ uri = vim.uri_from_bufnr(0) }}, position = {{ line = 0, character = #line }} }}
        local res = c:request_sync('textDocument/completion', params, 10000, vim.api.nvim_get_current_buf())
        if not res or res.err then return {{ error = res and res.err or 'timeout' }} end
        local items = res.result and (res.result.items or res.result) or {{}}
        return vim.tbl_map(function(i)
            return {{ i.label, i.detail or vim.NIL, i.textEdit and i.textEdit.newText or vim.NIL }}
        end, items)
        "#,
        json!(line)
    ))
    .await
}

fn labels(items: &Value) -> Vec<String> {
    list(items)
        .iter()
        .map(|i| i[0].as_str().unwrap_or("?").to_string())
        .collect()
}

/// The lines of the current buffer once it is `name` and holds `text`.
async fn buffer_with(nvim: &Nvim, name: &str, text: &str) -> String {
    let v = nvim
        .wait(
            &format!("{name} holding {text:?}"),
            10,
            "return { vim.api.nvim_buf_get_name(0), table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\\n') }",
            |v| v[0] == name && v[1].as_str().unwrap_or("").contains(text),
        )
        .await;
    v[1].as_str().unwrap().to_string()
}

#[tokio::test]
async fn prompt_commands_complete_and_run_in_neovim() {
    let ws = Workspace::hub(json!({
        "everything": {"command": everything_bin(), "args": ["stdio"]},
        "obs": {"command": fixture_bin(), "args": ["--name", "obs", "--prompt-args"]},
    }));
    ws.trust();
    let nvim = ws.editor_with("notes.md", RECORD_UI).await;
    assert_eq!(nvim.lua("return vim.bo.filetype").await, "markdown");

    // The prompt list is fetched when the buffer attaches; `:Tandem prompt <Tab>` offers it.
    let commands = nvim
        .wait(
            "the cached prompt list",
            10,
            "return require('tandem').prompt_commands()",
            |v| {
                let c = v.to_string();
                c.contains("/everything:args-prompt") && c.contains("/obs:greet")
            },
        )
        .await;
    let mut commands: Vec<String> = list(&commands)
        .iter()
        .map(|c| c.as_str().unwrap().to_string())
        .collect();
    commands.sort();
    let mut everything: Vec<String> = commands
        .iter()
        .filter(|c| c.starts_with("/everything:"))
        .cloned()
        .collect();
    everything.sort();
    let cmdline = nvim
        .lua("return vim.fn.getcompletion('Tandem prompt /every', 'cmdline')")
        .await;
    assert_eq!(cmdline, json!(everything), "{commands:?}");
    let args = nvim
        .lua("return vim.fn.getcompletion('Tandem prompt /everything:args-prompt ', 'cmdline')")
        .await;
    assert_eq!(args, json!(["city=", "state="]));
    let args = nvim
        .lua("return vim.fn.getcompletion('Tandem prompt /everything:args-prompt city=Paris s', 'cmdline')")
        .await;
    assert_eq!(args, json!(["state="]));
    // Values come from the server, within a short timeout (asked again until it answers).
    nvim.wait(
        "cmdline values",
        5,
        "return vim.fn.getcompletion('Tandem prompt /obs:greet style=', 'cmdline')",
        |v| v == &json!(["style=formal", "style=casual", "style=pirate"]),
    )
    .await;

    // Completion while typing: prompt completion is on in this markdown buffer, with autotrigger.
    let enabled = nvim
        .lua(
            r#"local c = vim.lsp.get_clients({ bufnr = 0, name = 'tandem' })[1]
               return { vim.b.tandem_completion == c.id,
                        #vim.api.nvim_get_autocmds({ group = 'nvim.lsp.completion_' .. vim.api.nvim_get_current_buf(), event = 'InsertCharPre' }) }"#,
        )
        .await;
    assert_eq!(enabled, json!([true, 1]));
    // `/` offers every prompt command.
    let items = complete_line(&nvim, "/").await;
    let mut offered = labels(&items);
    offered.sort();
    assert_eq!(offered, commands, "{items}");
    // Then the argument names, the required one marked.
    let items = complete_line(&nvim, "/everything:args-prompt ").await;
    assert_eq!(
        items,
        json!([
            ["city=", "required", "city="],
            ["state=", "optional", "state="]
        ])
    );
    // Then values, from the server's completion/complete.
    let items = complete_line(&nvim, "/obs:greet style=").await;
    assert_eq!(labels(&items), ["formal", "casual", "pirate"], "{items}");
    // Another filetype: the document is reopened with it, and completion is off.
    nvim.lua("vim.bo.filetype = 'rust'").await;
    assert_eq!(
        nvim.lua("return vim.b.tandem_completion or false").await,
        json!(false)
    );
    assert_eq!(complete_line(&nvim, "/").await, json!([]));
    nvim.lua("vim.bo.filetype = 'markdown'").await;
    assert_eq!(
        labels(&complete_line(&nvim, "/").await).len(),
        commands.len()
    );
    // Typing `/` in insert mode pops the menu up by itself.
    nvim.lua("vim.api.nvim_buf_set_lines(0, 0, -1, false, { '' }); vim.api.nvim_win_set_cursor(0, { 1, 0 })")
        .await;
    nvim.api.input("i/").await.unwrap();
    nvim.wait(
        "the completion menu",
        10,
        "return vim.tbl_map(function(i) return i.abbr end, vim.fn.complete_info({ 'items' }).items)",
        |v| v.to_string().contains("/everything:args-prompt"),
    )
    .await;
    nvim.api.input("<Esc>").await.unwrap();
    // A chat plugin's input buffer ('buftype' nofile: never attached) completes too.
    let chat = nvim
        .lua(
            r#"local b = vim.api.nvim_create_buf(false, true)
               vim.api.nvim_set_current_buf(b)
               vim.bo[b].filetype = 'codecompanion'
               return { vim.b.tandem_prompt_fallback or false, require('tandem').client(b) == nil }"#,
        )
        .await;
    assert_eq!(chat, json!([true, true]));
    nvim.api.input("i/obs:greet style=").await.unwrap();
    nvim.wait(
        "values in the chat buffer",
        10,
        "return vim.tbl_map(function(i) return i.abbr end, vim.fn.complete_info({ 'items' }).items)",
        |v| v == &json!(["formal", "casual", "pirate"]),
    )
    .await;
    nvim.api.input("<Esc>").await.unwrap();
    nvim.lua("vim.cmd.edit('notes.md')").await;

    // `:Tandem prompt` opens the messages.
    nvim.lua("vim.cmd('Tandem prompt /everything:args-prompt city=Paris')")
        .await;
    let text = buffer_with(&nvim, "tandem://prompt/everything:args-prompt", "Paris").await;
    assert!(
        text.starts_with("# /everything:args-prompt") && text.contains("\n## user\n"),
        "{text}"
    );
    assert_eq!(nvim.lua("return vim.bo.filetype").await, "markdown");
    // A missing required argument is asked for; cancelling the question runs nothing.
    nvim.lua("vim.ui.input = function(opts, on_confirm) table.insert(_G.asked, 'input|' .. opts.prompt); on_confirm(nil) end")
        .await;
    nvim.lua("vim.cmd('Tandem prompt /everything:args-prompt state=Texas')")
        .await;
    nvim.wait("the cancelled question", 10, "return _G.notes", |v| {
        v.to_string()
            .contains("tandem: /everything:args-prompt: cancelled")
    })
    .await;
    assert!(
        nvim.lua("return _G.asked")
            .await
            .to_string()
            .contains("input|city (Name of the city): "),
    );
    // With `ask = false`, the server's error, naming its code.
    nvim.lua("require('tandem').prompt('/everything:args-prompt state=Texas', { ask = false })")
        .await;
    nvim.wait("the missing argument", 10, "return _G.notes", |v| {
        v.to_string().contains("MISSING_ARGUMENT")
    })
    .await;

    // In a prompt buffer, `!` inserts the text at the cursor instead.
    nvim.lua("vim.cmd.edit('notes.md')").await;
    attached(&nvim).await;
    nvim.lua("vim.api.nvim_buf_set_lines(0, 0, -1, false, { 'Say: ' }); vim.api.nvim_win_set_cursor(0, { 1, 4 }); vim.cmd('Tandem prompt! /obs:greet name=Ann style=pirate')").await;
    nvim.wait(
        "the inserted text",
        10,
        "return vim.api.nvim_buf_get_lines(0, 0, -1, false)",
        |v| v == &json!(["Say: Ahoy, Ann! (obs)"]),
    )
    .await;

    // The code action on a prompt line runs it.
    nvim.lua("vim.api.nvim_buf_set_lines(0, 0, -1, false, { 'intro', '/everything:simple-prompt' }); vim.api.nvim_win_set_cursor(0, { 2, 0 })").await;
    nvim.lua("vim.lsp.buf.code_action({ apply = true, filter = function(a) return a.title == 'Run /everything:simple-prompt' end })").await;
    let text = buffer_with(&nvim, "tandem://prompt/everything:simple-prompt", "## user").await;
    assert!(text.contains("simple prompt"), "{text}");
    // With prompt_insert = "insert", below the line instead.
    nvim.lua(&format!(
        "vim.cmd.edit('notes.md'); require('tandem').setup({{ cmd = {{ '{}' }}, prompt_insert = 'insert' }})",
        crate::util::tandem_bin()
    ))
    .await;
    attached(&nvim).await;
    nvim.lua("vim.api.nvim_win_set_cursor(0, { 2, 0 }); vim.lsp.buf.code_action({ apply = true, filter = function(a) return a.title == 'Run /everything:simple-prompt' end })").await;
    let lines = nvim
        .wait(
            "the text below the command",
            10,
            "return vim.api.nvim_buf_get_lines(0, 0, -1, false)",
            |v| list(v).len() > 2,
        )
        .await;
    assert_eq!(lines[1], "/everything:simple-prompt");
    assert!(
        lines[2].as_str().unwrap().contains("simple prompt"),
        "{lines}"
    );

    nvim.quit().await;
}

/// `vim.ui.input` answers from `_G.answers` in turn (`false`: cancelled) and records each
/// question in `_G.inputs`.
const RECORD_INPUT: &str = r#"
    _G.inputs = {}
    _G.answers = {}
    vim.ui.input = function(opts, on_confirm)
        table.insert(_G.inputs, opts.prompt)
        local answer = table.remove(_G.answers, 1)
        on_confirm(answer ~= false and answer or nil)
    end
"#;

#[tokio::test]
async fn prompt_arguments_are_asked_in_neovim() {
    let ws =
        Workspace::hub(json!({ "everything": {"command": everything_bin(), "args": ["stdio"]} }));
    ws.trust();
    let nvim = ws
        .editor_with("notes.md", &format!("{RECORD_UI}\n{RECORD_INPUT}"))
        .await;
    nvim.wait(
        "the cached prompt list",
        10,
        "return require('tandem').prompt_commands()",
        |v| v.to_string().contains("/everything:args-prompt"),
    )
    .await;

    // The required city is asked for (once: the optional state is not), then the prompt runs.
    nvim.lua("_G.answers = { 'Lyon' }; vim.cmd('Tandem prompt /everything:args-prompt')")
        .await;
    let text = buffer_with(&nvim, "tandem://prompt/everything:args-prompt", "Lyon").await;
    assert!(text.contains("What's weather in Lyon?"), "{text}");
    assert_eq!(
        nvim.lua("return _G.inputs").await,
        json!(["city (Name of the city): "])
    );
    assert_eq!(
        nvim.lua("return vim.b.tandem_prompt_line").await,
        "/everything:args-prompt city=Lyon"
    );

    // A cold cache: the list is fetched first. Optional arguments too with ask_optional, and
    // answers with spaces, quotes and backslashes reach the server as typed.
    nvim.lua(
        r#"for k in pairs(require('tandem.state').prompts) do require('tandem.state').prompts[k] = nil end
           _G.inputs = {}
           _G.answers = { 'Saint "Paul" \\ x', 'New York' }
           require('tandem').prompt('everything:args-prompt', { ask_optional = true })"#,
    )
    .await;
    let text = buffer_with(&nvim, "tandem://prompt/everything:args-prompt", "New York").await;
    assert!(
        text.contains(r#"What's weather in Saint "Paul" \ x, New York?"#),
        "{text}"
    );
    assert_eq!(
        nvim.lua("return _G.inputs").await,
        json!(["city (Name of the city): ", "state (optional): "])
    );
    assert_eq!(
        nvim.lua("return vim.b.tandem_prompt_line").await,
        r#"/everything:args-prompt city="Saint \"Paul\" \\ x" state="New York""#
    );

    // `--args` gives the arguments as one JSON object: the server reads it, the missing one is
    // asked for, and the line that runs is written in words.
    nvim.lua(
        r#"_G.inputs = {}; _G.answers = { 'Lyon' }
           require('tandem').prompt([[/everything:args-prompt --args '{"state": "Texas"}']])"#,
    )
    .await;
    let text = buffer_with(
        &nvim,
        "tandem://prompt/everything:args-prompt",
        "Lyon, Texas",
    )
    .await;
    assert!(text.contains("What's weather in Lyon, Texas?"), "{text}");
    assert_eq!(
        nvim.lua("return _G.inputs").await,
        json!(["city (Name of the city): "])
    );
    assert_eq!(
        nvim.lua("return vim.b.tandem_prompt_line").await,
        "/everything:args-prompt state=Texas city=Lyon"
    );

    // An argument the line gives is not asked for; a cancelled question runs nothing.
    nvim.lua(
        r#"_G.inputs = {}; _G.answers = { false }
           require('tandem').prompt('/everything:args-prompt state=Texas', { ask_optional = true, show = false,
               on_result = function(err) _G.result = err end })"#,
    )
    .await;
    nvim.wait("the cancelled run", 10, "return _G.result or false", |v| {
        v == "cancelled"
    })
    .await;
    assert_eq!(
        nvim.lua("return _G.inputs").await,
        json!(["city (Name of the city): "])
    );
    assert!(
        nvim.lua("return _G.notes")
            .await
            .to_string()
            .contains("tandem: /everything:args-prompt: cancelled")
    );

    // prompt_ask = "never": the line runs as typed, and the server names what is missing.
    nvim.lua(&format!(
        "_G.inputs = {{}}; require('tandem').setup({{ cmd = {{ '{}' }}, prompt_ask = 'never' }})
         vim.cmd('Tandem prompt /everything:args-prompt')",
        crate::util::tandem_bin()
    ))
    .await;
    nvim.wait("the missing argument", 10, "return _G.notes", |v| {
        v.to_string().contains("MISSING_ARGUMENT")
    })
    .await;
    assert_eq!(nvim.lua("return _G.inputs").await, json!([]));

    nvim.quit().await;
}

/// The hub's changes reach the editor with no user action (`tandem/promptsChanged`): the
/// prompt list of `:Tandem prompt` follows a server's `list_changed`, and an open injection
/// preview is rebuilt when the config gains a server.
#[tokio::test]
async fn prompt_changes_reach_neovim_unasked() {
    let ws = Workspace::with(&[("notes.md", "# Notes\n")]);
    std::fs::create_dir_all(ws.home.tandem_home()).unwrap();
    let config = ws.home.tandem_home().join("config.json");
    let ticker =
        json!({"command": fixture_bin(), "args": ["--name", "ticker", "--change-every-ms", "300"]});
    std::fs::write(
        &config,
        json!({"mcpServers": {"ticker": ticker}}).to_string(),
    )
    .unwrap();
    let nvim = ws.editor("notes.md").await;

    // The plugin fetched the list once, at attach; only the notification fetches it again.
    let commands = r#"
        local c = vim.lsp.get_clients({ name = 'tandem' })[1]
        return vim.tbl_map(function(p) return p.command end, require('tandem.state').prompts[c.id] or {})
    "#;
    let first = nvim
        .wait("a tick prompt", 15, commands, |v| !list(v).is_empty())
        .await;
    nvim.wait("the next tick prompt", 15, commands, |v| {
        !list(v).is_empty() && v != &first
    })
    .await;

    nvim.lua("vim.cmd('Tandem inject')").await;
    let before = buffer_with(&nvim, "tandem://inject", "## 1. system").await;
    assert!(
        !before.contains("System instructions from conv."),
        "{before}"
    );
    let conv = json!({"command": fixture_bin(), "args": ["--name", "conv", "--conventional"]});
    std::fs::write(
        &config,
        json!({"mcpServers": {"ticker": ticker, "conv": conv}}).to_string(),
    )
    .unwrap();
    // Another window is current meanwhile: the preview is rebuilt where it is.
    nvim.lua("vim.cmd('new')").await;
    let preview = r#"
        for _, b in ipairs(vim.api.nvim_list_bufs()) do
            if vim.api.nvim_buf_get_name(b) == 'tandem://inject' then
                return table.concat(vim.api.nvim_buf_get_lines(b, 0, -1, false), '\n')
            end
        end
        return ''
    "#;
    nvim.wait("the preview to show the new server", 15, preview, |v| {
        v.as_str()
            .unwrap_or("")
            .contains("System instructions from conv.")
    })
    .await;
    let current = nvim.lua("return vim.api.nvim_buf_get_name(0)").await;
    assert_eq!(current, json!(""), "the preview must not take the window");
    nvim.quit().await;
}

#[tokio::test]
async fn injection_servers_and_trust_in_neovim() {
    let ws = Workspace::hub(
        json!({"conv": {"command": fixture_bin(), "args": ["--name", "conv", "--conventional"]}}),
    );
    // Not trusted: the server asks when the editor connects; the answer trusts the file.
    let nvim = ws
        .editor_with("notes.md", &format!("{RECORD_UI} _G.pick = 'Trust'"))
        .await;
    let asked = nvim
        .wait("the trust question", 10, "return _G.asked", |v| {
            !list(v).is_empty()
        })
        .await;
    // Asked by the plugin's handler (not Neovim's default, which may block).
    let question = asked[0].as_str().unwrap();
    assert!(
        question.starts_with("tandem.message|")
            && question.contains(".mcp.json")
            && question.contains("conv"),
        "{asked}"
    );

    nvim.wait("conv to be ready", 10, SERVER_STATES, |v| {
        v == &json!(["ready"])
    })
    .await;

    // `:Tandem inject`: the preview, in the spec's order.
    nvim.lua("vim.cmd('Tandem inject Be brief.')").await;
    let text = buffer_with(&nvim, "tandem://inject", "## 1. system").await;
    let roles: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .filter_map(|l| l.split_once(". ").map(|(_, r)| r.to_string()))
        .collect();
    let order: Vec<&str> = roles
        .iter()
        .map(|r| r.split([':', ' ']).next().unwrap())
        .collect();
    assert_eq!(
        order,
        [
            "system",
            "user",
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant"
        ],
        "{text}"
    );
    assert!(roles[7].contains("calls `weather`"), "{roles:?}");
    let system = text.split("## 2.").next().unwrap();
    assert!(
        system.contains("System instructions from conv.")
            && system.contains("[Thread System Prompt]")
            && system.contains("Be brief."),
        "{system}"
    );
    assert!(text.find("User context from conv.") < text.find("Assistant prefill from conv."));
    // `!` gives the raw messages, and so does the API.
    nvim.lua("vim.cmd('Tandem inject!')").await;
    let json_text = buffer_with(&nvim, "tandem://inject.json", "tool_calls").await;
    let messages: Value = serde_json::from_str(&json_text).unwrap();
    assert_eq!(messages[0]["role"], "system");
    assert_eq!(list(&messages).len(), 10);
    let api = nvim
        .lua(
            r#"local done
               require('tandem').inject({ json = true, show = false, on_result = function(err, messages) done = { err or vim.NIL, messages } end })
               vim.wait(5000, function() return done ~= nil end)
               return done"#,
        )
        .await;
    assert_eq!(api[1], messages);

    // `:Tandem servers`: a float with the table.
    nvim.lua("vim.cmd('Tandem servers')").await;
    let float = nvim
        .wait("the servers float", 10, FLOAT_LINES, |v| {
            !list(v).is_empty()
        })
        .await;
    assert!(
        float.to_string().contains("| conv | ready | 10 |"),
        "{float}"
    );
    nvim.lua("vim.cmd('close')").await;

    // `:Tandem trust!` revokes; `:Tandem trust` asks, then approves.
    nvim.lua("_G.notes = {}; vim.cmd('Tandem trust!')").await;
    nvim.wait("the revocation", 10, "return _G.notes", |v| {
        v.to_string().contains("no longer trusted")
    })
    .await;
    nvim.wait("conv to stop", 10, SERVER_STATES, |v| {
        v == &json!(["untrusted"])
    })
    .await;
    nvim.lua("_G.asked = {}; vim.cmd('Tandem trust')").await;
    nvim.wait("the approval", 10, "return _G.notes", |v| {
        v.to_string().contains("trusted") && v.to_string().contains("servers are starting")
    })
    .await;
    let asked = nvim.lua("return _G.asked").await;
    assert!(
        asked[0].as_str().unwrap().starts_with("tandem.trust|")
            && asked.to_string().contains("conv:"),
        "{asked}"
    );
    nvim.wait("conv to be back", 10, SERVER_STATES, |v| {
        v == &json!(["ready"])
    })
    .await;

    // `:checkhealth tandem` reports the hub.
    let health = checkhealth(&nvim).await;
    assert!(
        health.contains("OK 1 MCP server(s) for") && health.contains("1 ready"),
        "{health}"
    );
    assert!(!health.contains("ERROR"), "{health}");

    nvim.quit().await;
}

#[tokio::test]
async fn conventional_prompts_are_configured_in_neovim() {
    let ws = Workspace::hub(
        json!({"ctx": {"command": fixture_bin(), "args": ["--name", "ctx", "--context-prompt"]}}),
    );
    ws.trust();
    let nvim = ws
        .editor_with("notes.md", &format!("{RECORD_UI}\n{RECORD_INPUT}"))
        .await;
    nvim.wait("ctx to be ready", 10, SERVER_STATES, |v| {
        v == &json!(["ready"])
    })
    .await;

    // The preview says what is missing and how to give it.
    nvim.lua("vim.cmd('Tandem inject')").await;
    buffer_with(&nvim, "tandem://inject", "needs 'focus' (What to focus on)").await;

    // `:Tandem inject configure /ctx:user_prompt`: "Set arguments", then each argument is
    // asked; an empty answer leaves the optional one out. The preview is rebuilt.
    nvim.lua(
        "_G.pick = 'Set arguments'; _G.answers = { 'auth flow', '' }
         vim.cmd('Tandem inject configure /ctx:user_prompt')",
    )
    .await;
    let text = buffer_with(&nvim, "tandem://inject", "Context #1 from ctx").await;
    assert!(text.contains("focus=auth flow, depth=-"), "{text}");
    assert_eq!(
        nvim.lua("return _G.inputs").await,
        json!([
            "focus (What to focus on, required): ",
            "depth (Level of detail (1-3)): "
        ])
    );
    assert!(
        nvim.lua("return _G.notes")
            .await
            .to_string()
            .contains("/ctx:user_prompt  user_prompt · on · focus=\\\"auth flow\\\""),
        "{}",
        nvim.lua("return _G.notes").await
    );
    let config: Value = serde_json::from_str(
        &std::fs::read_to_string(ws.home.tandem_home().join("config.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        config["conventionalPrompts"]["servers"]["ctx"]["prompts"]["user_prompt"],
        json!({"arguments": {"focus": "auth flow"}})
    );

    // Turned off through the API: the prompt list says so, and the injection leaves it out.
    let off = nvim
        .lua(
            r#"local done
               require('tandem').inject_configure({ command = '/ctx:user_prompt', action = 'disable',
                   on_result = function(err, p) done = { err or vim.NIL, p } end })
               vim.wait(5000, function() return done ~= nil end)
               return done"#,
        )
        .await;
    assert_eq!(off[0], Value::Null, "{off}");
    assert_eq!(off[1]["enabled"], false);
    let listed = nvim
        .lua(
            r#"local done
               require('tandem').conventional_prompts(function(err, l) done = l end)
               vim.wait(5000, function() return done ~= nil end)
               return vim.tbl_map(function(c) return c.command .. '=' .. tostring(c.enabled) end, done)"#,
        )
        .await;
    assert!(
        list(&listed).contains(&json!("/ctx:user_prompt=false"))
            && list(&listed).contains(&json!("/tandem:system_prompt=true")),
        "{listed}"
    );
    // The preview is rebuilt without it.
    nvim.wait(
        "the preview without ctx's prompt",
        10,
        "return table.concat(vim.api.nvim_buf_get_lines(vim.fn.bufnr('tandem://inject'), 0, -1, false), '\\n')",
        |v| {
            let text = v.as_str().unwrap_or("");
            text.contains("Total:") && !text.contains("Context #")
        },
    )
    .await;

    nvim.quit().await;
}
