//! Signing in to a remote server from Neovim: a real headless Neovim with the plugin, the
//! daemon its client starts, the SDK's OAuth example server and the browser stand-in of
//! `oauth.rs` (which follows the authorization URL back to Tandem, as a user who approves).

use serde_json::{Value, json};

use crate::nvim::Nvim;
use crate::oauth::{Browser, sdk_oauth_server, token_files};
use crate::util::DaemonGuard;
use crate::util::home_with_servers;

/// Records what the plugin shows and asks instead of showing it: `vim.notify` messages,
/// `vim.ui.select` prompts (answered with the "Sign in" action when offered), and the URLs
/// `vim.ui.open` is given (by Neovim's `window/showDocument` handler).
const STAND_INS: &str = r#"
    _G.notes, _G.selects, _G.opened = {}, {}, {}
    vim.notify = function(msg) table.insert(_G.notes, msg) end
    vim.ui.select = function(items, opts, cb)
        table.insert(_G.selects, opts.prompt)
        for _, item in ipairs(items) do
            if type(item) == 'table' and item.title == 'Sign in' then return cb(item, 1) end
        end
        cb(nil)
    end
    vim.ui.open = function(url)
        table.insert(_G.opened, url)
        return vim.system({ 'true' }), nil
    end
"#;

/// The state of `name` in a fresh `tandem.servers` report (null until one came).
fn state_of(name: &str) -> String {
    format!(
        r#"require('tandem').server_list(function(_, r) _G.report = r end)
        for _, s in ipairs(_G.report and _G.report.servers or {{}}) do
            if s.name == '{name}' then return s.state end
        end"#
    )
}

/// Waits for a notification that contains `text`; all of them so far.
async fn notified(nvim: &Nvim, text: &str) -> Vec<String> {
    let body = "return _G.notes";
    let all = nvim
        .wait(&format!("a notification with {text:?}"), 30, body, |v| {
            v.as_array().is_some_and(|a| {
                a.iter()
                    .any(|n| n.as_str().is_some_and(|n| n.contains(text)))
            })
        })
        .await;
    serde_json::from_value(all).unwrap()
}

async fn until_state(nvim: &Nvim, name: &str, state: &str) {
    nvim.wait(&format!("{name} to be {state}"), 30, &state_of(name), |v| {
        v == state
    })
    .await;
}

/// `:Tandem servers` in a float: its lines, footer and buffer.
async fn server_float(nvim: &Nvim) -> (Vec<String>, String) {
    nvim.lua(
        r#"_G.float = nil
        require('tandem').servers({ on_result = function(err, _, buf)
            local win = vim.fn.bufwinid(buf)
            local footer = {}
            local chunks = vim.api.nvim_win_get_config(win).footer or {}
            if type(chunks) == 'string' then chunks = { { chunks } } end
            for _, chunk in ipairs(chunks) do
                table.insert(footer, chunk[1])
            end
            _G.float = { err = err, lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false),
                         footer = table.concat(footer) }
        end })"#,
    )
    .await;
    let float = nvim
        .wait("the servers float", 20, "return _G.float", |v| !v.is_null())
        .await;
    assert!(float["err"].is_null(), "{float:#}");
    (
        serde_json::from_value(float["lines"].clone()).unwrap(),
        float["footer"].as_str().unwrap().to_string(),
    )
}

/// A sign-in URL without its query: the authorization server's page.
fn sign_in_page(url: &str) -> &str {
    url.split('?').next().unwrap()
}

/// The `state` parameter of a sign-in URL, which names that one sign-in.
fn state_param(url: &str) -> String {
    reqwest::Url::parse(url)
        .unwrap()
        .query_pairs()
        .find(|(k, _)| k == "state")
        .map(|(_, v)| v.into_owned())
        .unwrap_or_else(|| panic!("no state in {url}"))
}

async fn complete(nvim: &Nvim, line: &str) -> Value {
    nvim.lua(&format!(
        "return require('tandem.cli').complete('', '{line}', {})",
        line.len()
    ))
    .await
}

#[tokio::test]
async fn neovim_signs_in_from_its_server_list_and_answers_the_offer() {
    let (_server, url) = sdk_oauth_server().await;
    let (home, ws) = home_with_servers(json!({"notes": {"type": "http", "url": url}}));
    let _daemon = DaemonGuard(&home);
    let browser = Browser::new(&home, "follow");
    std::fs::write(ws.join("notes.md"), "# notes\n").unwrap();

    let nvim = Nvim::start_env(&home, &ws, &[("BROWSER", browser.command.as_str())]).await;
    nvim.lua(&format!(
        "{STAND_INS}\nrequire('tandem').setup({{ cmd = {{ '{bin}' }} }})\nvim.cmd.edit('notes.md')",
        bin = crate::util::tandem_bin()
    ))
    .await;
    until_state(&nvim, "notes", "needs_sign_in").await;

    // The float says it plainly, and how to sign in.
    let (lines, footer) = server_float(&nvim).await;
    let text = lines.join("\n");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("| notes | needs sign-in |")),
        "{text}"
    );
    assert!(
        text.contains("press `s` on the server's row, or run `:Tandem signin NAME`"),
        "{text}"
    );
    assert!(footer.contains("s sign in"), "{footer}");
    nvim.lua("vim.cmd('close')").await;
    assert_eq!(complete(&nvim, "Tandem signin ").await, json!(["notes"]));
    assert_eq!(complete(&nvim, "Tandem signout ").await, json!(["notes"]));
    assert!(browser.opened().is_empty(), "the browser opened unasked");

    // An agent's activation waits for a sign-in: Neovim is offered it, and "Sign in" opens
    // the page the browser was opened on.
    let agent = home
        .mcp_daemon_env(&ws, 60, &[("BROWSER", browser.command.as_str())])
        .await;
    let activated = agent.ok("mcp_activate", json!({"name": "notes"})).await;
    assert!(
        activated.to_string().contains("notes__greet"),
        "{activated:#}"
    );
    let opened = nvim
        .wait(
            "Neovim to open the sign-in page",
            20,
            "return _G.opened",
            |v| v.as_array().is_some_and(|a| !a.is_empty()),
        )
        .await;
    let asked = nvim.lua("return _G.selects").await;
    assert_eq!(asked.as_array().unwrap().len(), 1, "{asked}");
    assert!(
        asked[0]
            .as_str()
            .unwrap()
            .contains("Server 'notes' waits for you to sign in"),
        "{asked}"
    );
    let pages = browser.opened();
    assert_eq!(pages.len(), 1, "{pages:?}");
    let opened = opened[0].as_str().unwrap();
    assert_eq!(
        (sign_in_page(opened), state_param(opened)),
        (sign_in_page(&pages[0]), state_param(&pages[0])),
        "{opened} is not {}",
        pages[0]
    );
    agent.close().await;
    until_state(&nvim, "notes", "ready").await;

    // :Tandem signout forgets the tokens.
    nvim.lua("vim.cmd('Tandem signout notes')").await;
    notified(&nvim, "signed out of 'notes'").await;
    assert!(token_files(&home).is_empty());
    until_state(&nvim, "notes", "stopped").await;

    // `s` on the server's row in the float signs in again: progress, then the result, and
    // no question (the sign-in is the editor's own).
    let (lines, _) = server_float(&nvim).await;
    let row = lines
        .iter()
        .position(|l| l.starts_with("| notes |"))
        .unwrap();
    nvim.lua(&format!(
        "vim.api.nvim_win_set_cursor(0, {{ {}, 0 }}); vim.cmd.normal('s')",
        row + 1
    ))
    .await;
    let notes = notified(&nvim, "signed in to 'notes'").await;
    let pages = browser.opened();
    assert_eq!(pages.len(), 2, "{pages:?}");
    let approve = notes
        .iter()
        .find(|n| n.contains("approve the sign-in to 'notes'"))
        .unwrap_or_else(|| panic!("no progress: {notes:#?}"));
    assert!(approve.contains(&pages[1]), "{approve}");
    let done = notes.iter().find(|n| n.contains("signed in to")).unwrap();
    assert!(done.contains("ready") && done.contains("tool"), "{done}");
    until_state(&nvim, "notes", "ready").await;
    assert_eq!(nvim.lua("return #_G.selects").await, json!(1));
    assert_eq!(token_files(&home).len(), 1);

    // And `:Tandem signin NAME`, after another sign-out.
    nvim.lua("_G.notes = {}; vim.cmd('Tandem signout notes')")
        .await;
    notified(&nvim, "signed out of 'notes'").await;
    nvim.lua("vim.cmd('Tandem signin notes')").await;
    notified(&nvim, "signed in to 'notes'").await;
    assert_eq!(browser.opened().len(), 3);
    until_state(&nvim, "notes", "ready").await;

    // A sign-in that cannot be: the error is shown.
    nvim.lua("_G.notes = {}; vim.cmd('Tandem signin nowhere')")
        .await;
    let notes = notified(&nvim, "sign-in to 'nowhere' failed").await;
    assert!(
        notes.iter().any(|n| n.contains("SERVER_NOT_FOUND")),
        "{notes:#?}"
    );
    nvim.quit().await;
}
