//! A server's question that no agent can take, answered in Neovim: server-everything's
//! `trigger-elicitation-request`, called through the daemon by an agent whose client has no
//! elicitation, appears in a real headless Neovim with the plugin as a form
//! (`tandem/question`), and what the user types there is what the server receives.

use serde_json::{Value, json};

use crate::nvim::Nvim;
use crate::util::home_with_servers;
use crate::util::{DaemonGuard, everything_bin};

/// Answers the plugin's prompts as a user would, and records them: "Answer" (or what
/// `_G.first` says) to the question, the first real choice of each choice field, "(done)"
/// after one pick of a multi-choice, `Ann` for the required name, each default otherwise.
const USER: &str = r#"
    _G.prompts, _G.notes, _G.first = {}, {}, 'Answer'
    vim.notify = function(msg) table.insert(_G.notes, msg) end
    vim.ui.select = function(items, opts, cb)
        table.insert(_G.prompts, opts.prompt)
        local label = function(i) return opts.format_item and opts.format_item(i) or i end
        if label(items[1]) == 'Answer' then
            for _, item in ipairs(items) do
                if item == _G.first then return cb(item) end
            end
            return cb(nil)
        end
        if label(items[1]) == '(done)' and #items < 6 then return cb(items[1]) end
        for _, item in ipairs(items) do
            local l = label(item)
            if l ~= '(leave empty)' and l ~= '(done)' then return cb(item) end
        end
        cb(nil)
    end
    vim.ui.input = function(opts, cb)
        table.insert(_G.prompts, opts.prompt)
        if opts.prompt:find('Your full, legal name', 1, true) then return cb('Ann') end
        cb(opts.default or '')
    end
"#;

async fn call(agent: &crate::util::McpClient, tool: &str) -> String {
    let r = agent
        .try_call(
            "mcp_call",
            json!({"server": "everything", "tool": tool, "arguments": {}}),
        )
        .await
        .unwrap();
    let text = serde_json::to_string(&r.content).unwrap();
    assert_ne!(r.is_error, Some(true), "{tool} failed: {text}");
    text
}

#[tokio::test]
async fn a_question_no_agent_can_take_is_a_form_in_neovim() {
    let (home, ws) = home_with_servers(
        json!({"everything": {"command": everything_bin(), "args": ["stdio"], "autostart": false}}),
    );
    let _daemon = DaemonGuard(&home);
    std::fs::write(ws.join("notes.md"), "# notes\n").unwrap();
    let nvim = Nvim::start(&home, &ws).await;
    nvim.lua(&format!(
        "{USER}\nrequire('tandem').setup({{ cmd = {{ '{bin}' }} }})\nvim.cmd.edit('notes.md')",
        bin = crate::util::tandem_bin()
    ))
    .await;
    nvim.wait(
        "the plugin's client to attach",
        30,
        "return #vim.lsp.get_clients({ name = 'tandem' })",
        |v| v.as_u64() == Some(1),
    )
    .await;

    // The agent's client declares no elicitation: the question goes to Neovim.
    let agent = home.mcp_daemon(&ws, 60).await;
    agent
        .ok("mcp_activate", json!({"name": "everything"}))
        .await;
    let answered = call(&agent, "trigger-elicitation-request").await;
    assert!(
        answered.contains("User provided the requested information"),
        "{answered}"
    );
    assert!(answered.contains("Name: Ann"), "{answered}");
    assert!(answered.contains("Favorite Integer: 42"), "{answered}");
    let prompts: Vec<String> = serde_json::from_value(nvim.lua("return _G.prompts").await).unwrap();
    assert!(
        prompts[0].starts_with("Server 'everything' asks: Please provide inputs"),
        "{prompts:?}"
    );
    assert!(prompts.len() > 10, "not every field was asked: {prompts:?}");

    // Declined in Neovim: the server hears it.
    nvim.lua("_G.first = 'Decline'").await;
    let declined = call(&agent, "trigger-elicitation-request").await;
    assert!(declined.contains("User declined"), "{declined}");

    // Dismissed (Escape): a cancel.
    nvim.lua("_G.first = nil").await;
    let cancelled = call(&agent, "trigger-elicitation-request").await;
    assert!(cancelled.contains("User cancelled"), "{cancelled}");
    let notes: Value = nvim.lua("return _G.notes").await;
    assert_eq!(notes, json!([]), "the plugin complained: {notes}");

    // An answer without its question or its action is refused with the field's name.
    for (args, missing) in [
        ("{ action = 'accept' }", "`id`"),
        ("{ id = 'q1' }", "`action`"),
    ] {
        let error = nvim
            .lua(&format!(
                "local r = vim.lsp.get_clients({{ name = 'tandem' }})[1]:request_sync(\
                 'workspace/executeCommand', {{ command = 'tandem.answer', arguments = {{ {args} }} }}, 10000)\n\
                 return r and r.err and r.err.message or vim.inspect(r)"
            ))
            .await;
        let error = error.as_str().unwrap_or_default().to_string();
        assert!(
            error.contains(&format!("missing field {missing}")),
            "{error}"
        );
    }
    agent.close().await;
}
