--- The hub's other faces: the conventional prompts injection (`tandem.inject`, previewed in
--- `tandem://inject`), the downstream servers (`tandem.servers`), signing in to remote ones
--- (`tandem.servers.login`/`logout`), trusting the workspace's `.mcp.json` (`tandem.trust`),
--- and the server's questions (`window/showMessageRequest`: trust, and the sign-in offer).
---
--- Shapes (crates/core/src/calls.rs, crates/core/src/hub/prompts/inject.rs): Injection `{messages (OpenAI chat messages),
--- sources, total_tokens, warnings, preview}`; HubServers `{workspace, files, errors, servers:
--- [{name, state, retry_in_ms?, origin: {kind, file}, runs, prompts, tools, last_error,
--- server_info}]}`; TrustReport `{file, sha256, trusted, servers: [{name, runs, env, error}],
--- done}`; SignInReport `{server, attempt, url?, status, server_info?, tools}`; SignOutReport
--- `{server, forgot}`.

local api = vim.api
local lsp = require("tandem.lsp")
local state = require("tandem.state")
local ui = require("tandem.ui")

local M = {}

M.INJECT_URI = "tandem://inject"
M.INJECT_JSON_URI = "tandem://inject.json"

--- The request's string options an injection buffer remembers (as `b:tandem_<key>`), so
--- that it can be made again with them.
local REQUEST_KEYS = { "thread_system", "model", "thread" }

-- JSON, indented ------------------------------------------------------------------------

--- Keys in the order a reader expects them (OpenAI messages, tool calls); others follow,
--- sorted.
local KEY_ORDER = {}
local ORDERED = { "role", "name", "content", "tool_call_id", "tool_calls", "id", "type", "function", "arguments" }
for i, k in ipairs(ORDERED) do
  KEY_ORDER[k] = i
end

---@param a string
---@param b string
local function key_before(a, b)
  local ia, ib = KEY_ORDER[a] or 0, KEY_ORDER[b] or 0
  if ia > 0 and ib > 0 then
    return ia < ib
  elseif ia > 0 or ib > 0 then
    return ia > 0
  end
  return a < b
end

--- A value as indented JSON lines.
---@param value any
---@param indent? string
---@return string[]
function M.json_lines(value, indent)
  indent = indent or ""
  local inner = indent .. "  "
  if type(value) ~= "table" or value == vim.NIL then
    return { vim.json.encode(value) }
  end
  local is_list = vim.islist(value)
  if next(value) == nil then
    return { is_list and "[]" or "{}" }
  end
  local entries = {} ---@type string[][]
  if is_list then
    for _, v in ipairs(value) do
      entries[#entries + 1] = M.json_lines(v, inner)
    end
  else
    local keys = vim.tbl_keys(value)
    table.sort(keys, key_before)
    for _, k in ipairs(keys) do
      local sub = M.json_lines(value[k], inner)
      sub[1] = vim.json.encode(k) .. ": " .. sub[1]
      entries[#entries + 1] = sub
    end
  end
  local out = { is_list and "[" or "{" }
  for i, sub in ipairs(entries) do
    sub[1] = inner .. sub[1]
    if i < #entries then
      sub[#sub] = sub[#sub] .. ","
    end
    vim.list_extend(out, sub)
  end
  out[#out + 1] = indent .. (is_list and "]" or "}")
  return out
end

-- Injection --------------------------------------------------------------------------------

---@class tandem.InjectOpts
---@field thread_system? string The thread's own system prompt (appended to the system message).
---@field model? string The model the messages are for (prompts limited to `models` need it).
---@field thread? string The chat thread's id or name (prompts limited to `threads` need it).
---@field conversation? table[] The conversation (OpenAI messages): the answer's `with_conversation` is the injection followed by it.
---@field json? boolean Show (and give `on_result`) the raw messages rather than the preview.
---@field show? boolean false: no buffer, only `on_result`.
---@field bufnr? integer
---@field client_id? integer
---@field on_result? fun(err: string?, result: any, injection: table?, buf: integer?) `result`: the Injection, or its `messages` with `json`.

--- What an injection buffer shows: the Markdown preview, or the messages as JSON.
---@param injection table
---@param json boolean
---@return string[]
local function preview_lines(injection, json)
  if json then
    return M.json_lines(injection.messages or {})
  end
  return ui.split_lines(type(injection.preview) == "string" and injection.preview or "(no preview)")
end

--- `tandem.inject`: the conventional prompts injection, previewed in `tandem://inject`
--- (markdown), or its messages as JSON in `tandem://inject.json` with `json`.
---@param opts? tandem.InjectOpts
function M.inject(opts)
  opts = opts or {}
  local args = vim.empty_dict()
  for _, key in ipairs(REQUEST_KEYS) do
    if type(opts[key]) == "string" and opts[key] ~= "" then
      args[key] = opts[key]
    end
  end
  if type(opts.conversation) == "table" then
    args.conversation = opts.conversation
  end
  lsp.execute("tandem.inject", { args }, function(err, result, client)
    if not err and type(result) ~= "table" then
      err = "the server's answer is not an injection"
    end
    local buf
    if err then
      vim.notify("tandem: no injection: " .. err, vim.log.levels.ERROR)
    else
      if opts.show ~= false then
        if opts.json then
          buf = ui.scratch(M.INJECT_JSON_URI, preview_lines(result, true), { filetype = "json" })
        else
          buf = ui.scratch(M.INJECT_URI, preview_lines(result, false), { filetype = "markdown", modifiable = false })
        end
        vim.b[buf].tandem_client_id = client and client.id
        for _, key in ipairs(REQUEST_KEYS) do
          vim.b[buf]["tandem_" .. key] = args[key]
        end
      end
    end
    if opts.on_result then
      if opts.json then
        opts.on_result(err, result and result.messages, result, buf)
      else
        opts.on_result(err, result, result, buf)
      end
    end
  end, { bufnr = opts.bufnr, client_id = opts.client_id })
end

--- Reads a `tandem://inject` or `tandem://inject.json` buffer again (its BufReadCmd).
---@param buf integer
function M.reload_inject(buf)
  local bo = vim.bo[buf]
  bo.buftype = "nofile"
  bo.swapfile = false
  bo.bufhidden = "hide"
  M.inject({
    thread_system = vim.b[buf].tandem_thread_system,
    model = vim.b[buf].tandem_model,
    thread = vim.b[buf].tandem_thread,
    json = api.nvim_buf_get_name(buf) == M.INJECT_JSON_URI,
    client_id = vim.b[buf].tandem_client_id,
    show = true,
  })
end

--- `tandem/promptsChanged` from a client (a server's prompts or state, or the config,
--- changed): its prompt list is fetched again, and every loaded injection buffer of that
--- client is rebuilt in place, with the arguments it was made with, without moving a window.
---@param client_id integer
function M.on_prompts_changed(client_id)
  require("tandem.prompt.list").refresh({ client_id = client_id })
  for _, buf in ipairs(api.nvim_list_bufs()) do
    local name = api.nvim_buf_get_name(buf)
    local preview = (name == M.INJECT_URI or name == M.INJECT_JSON_URI) and api.nvim_buf_is_loaded(buf)
    local owner = preview and vim.b[buf].tandem_client_id
    if preview and (owner == nil or owner == client_id) then
      local args = vim.empty_dict()
      for _, key in ipairs(REQUEST_KEYS) do
        args[key] = vim.b[buf]["tandem_" .. key]
      end
      lsp.execute("tandem.inject", { args }, function(err, result)
        if err or type(result) ~= "table" or not api.nvim_buf_is_loaded(buf) then
          return -- the preview keeps what it showed; a later change tries again
        end
        ui.set_lines(buf, preview_lines(result, name == M.INJECT_JSON_URI), name == M.INJECT_JSON_URI)
      end, { client_id = client_id })
    end
  end
end

-- Configuring the conventional prompts ------------------------------------------------------

--- What a double-quoted value escapes.
local ESCAPES = { ["\\"] = "\\\\", ['"'] = '\\"', ["\n"] = "\\n", ["\t"] = "\\t", ["\r"] = "\\r" }

--- A configured argument value as a label shows it: as is when it is plain text (not empty,
--- no blank, quote or backslash, no leading bracket), else double-quoted with escapes. For
--- reading only: lines the server runs are quoted by the server (`tandem.prompt.parse`).
---@param value string
---@return string
local function shown(value)
  if value ~= "" and not value:find("[%s\"'\\]") and not value:find("^[%[{]") then
    return value
  end
  return '"' .. value:gsub('[\\"\n\t\r]', ESCAPES) .. '"'
end

--- A conventional prompt as the picker shows it: `/notes:user_prompt  user_prompt · needs
--- focus · focus=auth`.
---@param c table ConventionalPrompt
---@return string
function M.conventional_label(c)
  local state_word = "on"
  if not c.enabled then
    state_word = "off"
  elseif not c.in_workspace then
    state_word = "not in this workspace"
  elseif type(c.missing) == "table" and #c.missing > 0 then
    state_word = "needs " .. table.concat(c.missing, ", ")
  end
  local parts = { ("%s  %s · %s"):format(c.command or "?", c.kind or "?", state_word) }
  for _, a in ipairs(type(c.arguments) == "table" and c.arguments or {}) do
    if type(a.value) == "string" then
      parts[#parts + 1] = a.name .. "=" .. shown(a.value)
    end
  end
  return table.concat(parts, " · ")
end

--- Asks each argument's value in turn (vim.ui.input, the current value as default). `cb(values)`:
--- name → value, or vim.NIL for an answer left empty (the value is removed); nil when a
--- question was cancelled.
---@param args table[]
---@param cb fun(values: table<string, any>?)
local function ask_values(args, cb)
  local values = {}
  ui.input_each(args, function(a)
    local what = ui.present(a.description) and a.description or (a.required and "required" or "optional")
    return {
      prompt = ("%s (%s%s): "):format(a.name, what, a.required and ui.present(a.description) and ", required" or ""),
      default = type(a.value) == "string" and a.value or nil,
    }
  end, function(a, value)
    values[a.name] = value ~= "" and value or vim.NIL
  end, function(answered)
    cb(answered and values or nil)
  end)
end

---@class tandem.ConfigureOpts
---@field command? string `/server:prompt`: configure that one (else picked from the list).
---@field action? "arguments"|"enable"|"disable" What to do (else asked).
---@field bufnr? integer
---@field client_id? integer
---@field on_result? fun(err: string?, prompt: table?) The prompt's settings after the change (err "cancelled" when a question was).

--- `:Tandem inject configure`: pick a conventional prompt (vim.ui.select, with its state and
--- argument values), then turn it on or off or give its arguments (vim.ui.input each, the
--- current value as default, empty to remove). Written to your config.json; a shown
--- `tandem://inject` preview is rebuilt.
---@param opts? tandem.ConfigureOpts
function M.configure(opts)
  opts = opts or {}
  local ropts = { bufnr = opts.bufnr, client_id = opts.client_id }
  local function done(err, prompt)
    if err and err ~= "cancelled" then
      vim.notify("tandem: " .. err, vim.log.levels.ERROR)
    end
    if opts.on_result then
      opts.on_result(err, prompt)
    end
  end
  local function apply(c, params, client)
    params.server, params.prompt = c.server, c.prompt
    lsp.execute("tandem.inject.configure", { params }, function(err, result)
      if not err then
        vim.notify("tandem: " .. M.conventional_label(result), vim.log.levels.INFO)
        local preview = vim.fn.bufnr(M.INJECT_URI)
        if preview ~= -1 and api.nvim_buf_is_loaded(preview) then
          M.reload_inject(preview)
        end
      end
      done(err, result)
    end, { client_id = client and client.id or ropts.client_id, bufnr = ropts.bufnr })
  end
  local function act(c, action, client)
    if action == "enable" or action == "disable" then
      return apply(c, { enabled = action == "enable" }, client)
    end
    ask_values(c.arguments or {}, function(values)
      if not values then
        return done("cancelled", nil)
      end
      apply(c, { arguments = values }, client)
    end)
  end
  local function choose_action(c, client)
    if opts.action then
      return act(c, opts.action, client)
    end
    local actions = {}
    if type(c.arguments) == "table" and #c.arguments > 0 then
      actions[#actions + 1] = { title = "Set arguments", action = "arguments" }
    end
    actions[#actions + 1] = c.enabled and { title = "Turn off", action = "disable" }
      or { title = "Turn on", action = "enable" }
    vim.ui.select(actions, {
      prompt = M.conventional_label(c),
      kind = "tandem.inject.action",
      format_item = function(a)
        return a.title
      end,
    }, function(choice)
      if not choice then
        return done("cancelled", nil)
      end
      act(c, choice.action, client)
    end)
  end
  lsp.execute("tandem.inject.prompts", {}, function(err, list, client)
    if err then
      return done("cannot list the conventional prompts: " .. err, nil)
    end
    list = type(list) == "table" and list or {}
    if opts.command then
      for _, c in ipairs(list) do
        if c.command == opts.command then
          return choose_action(c, client)
        end
      end
      return done(("no conventional prompt %s (see :Tandem servers)"):format(opts.command), nil)
    end
    if #list == 0 then
      return done("no conventional prompts in this workspace", nil)
    end
    vim.ui.select(list, {
      prompt = "Conventional prompt to configure",
      kind = "tandem.inject.prompt",
      format_item = M.conventional_label,
    }, function(choice)
      if not choice then
        return done("cancelled", nil)
      end
      choose_action(choice, client)
    end)
  end, ropts)
end

-- Servers ------------------------------------------------------------------------------------

--- After an approval or a sign-in: the servers start; the prompt list follows.
---@param client vim.lsp.Client?
local function after_change(client)
  if client then
    vim.defer_fn(function()
      require("tandem.prompt.list").refresh({ client_id = client.id })
    end, 500)
  end
end


--- `tandem.servers`: `cb(err, HubServers)`.
---@param cb tandem.Callback
---@param opts? tandem.RequestOpts
function M.fetch_servers(cb, opts)
  lsp.execute("tandem.servers", {}, function(err, report, ...)
    if not err and type(report) == "table" then
      state.last_servers = report
    end
    cb(err, report, ...)
  end, opts)
end

--- The state of a server that waits for a sign-in.
M.NEEDS_SIGN_IN = "needs_sign_in"

--- A server's state as shown: `restarting (retry in 2s)`.
---@param s table
---@return string
function M.state_label(s)
  local label = type(s.state) == "string" and s.state:gsub("_", " ") or "?"
  if s.state == "restarting" and tonumber(s.retry_in_ms) then
    label = ("%s (retry in %ds)"):format(label, math.ceil(tonumber(s.retry_in_ms) / 1000))
  elseif s.state == M.NEEDS_SIGN_IN then
    label = "needs sign-in"
  end
  return label
end

---@param s string
local function cell(s)
  return (tostring(s):gsub("|", "\\|"):gsub("\n", " "))
end

--- The report as markdown: a table of the servers (state, prompts, tools, origin), then the
--- last errors and the config errors. Also returns the server of each table row, by line
--- number.
---@param report table HubServers
---@return string[] lines
---@return table<integer, string> rows
function M.server_lines(report)
  local rows = {}
  local servers = type(report.servers) == "table" and report.servers or {}
  local lines = { "# MCP servers of " .. (ui.present(report.workspace) and report.workspace or "this workspace"), "" }
  if #servers == 0 then
    lines[#lines + 1] = "No MCP servers. Add them to:"
    for _, f in ipairs(report.files or {}) do
      lines[#lines + 1] = "- " .. f
    end
  else
    lines[#lines + 1] = "| server | state | prompts | tools | from |"
    lines[#lines + 1] = "|---|---|---|---|---|"
    local untrusted, sign_in = false, false
    for _, s in ipairs(servers) do
      untrusted = untrusted or s.state == "untrusted"
      sign_in = sign_in or s.state == M.NEEDS_SIGN_IN
      rows[#lines + 1] = type(s.name) == "string" and s.name or nil
      local origin = type(s.origin) == "table" and s.origin.kind or "?"
      lines[#lines + 1] = ("| %s | %s | %s | %s | %s |"):format(
        cell(s.name or "?"),
        cell(M.state_label(s)),
        tostring(s.prompts or 0),
        tostring(s.tools or 0),
        cell(origin)
      )
    end
    local errors = vim.tbl_filter(function(s)
      return ui.present(s.last_error)
    end, servers)
    if #errors > 0 then
      vim.list_extend(lines, { "", "## Last errors", "" })
      for _, s in ipairs(errors) do
        local first = true
        for _, l in ipairs(ui.split_lines(s.last_error)) do
          lines[#lines + 1] = first and ("- **%s**: %s"):format(s.name or "?", l) or ("  " .. l)
          first = false
        end
      end
    end
    if untrusted then
      vim.list_extend(lines, { "", "Untrusted servers do not run: review and trust the file with `:Tandem trust`." })
    end
    if sign_in then
      vim.list_extend(lines, {
        "",
        "Servers that need sign-in wait for you: press `s` on the server's row, or run `:Tandem signin NAME`; then approve in the browser.",
      })
    end
  end
  local config_errors = type(report.errors) == "table" and report.errors or {}
  if #config_errors > 0 then
    vim.list_extend(lines, { "", "## Config errors", "" })
    for _, e in ipairs(config_errors) do
      lines[#lines + 1] = "- " .. (tostring(e):gsub("\n", " "))
    end
  end
  return lines, rows
end

--- `:Tandem servers`: the report in a float; `s` on a server's row signs in to it (the
--- float closes). `on_result(err, report, buf)` follows the display.
---@param opts? { bufnr?: integer, on_result?: fun(err: string?, report: table?, buf: integer?) }
function M.servers(opts)
  opts = opts or {}
  M.fetch_servers(function(err, report, client)
    local buf
    if err then
      vim.notify("tandem: cannot list the MCP servers: " .. err, vim.log.levels.ERROR)
    else
      local lines, rows = M.server_lines(report)
      local win
      buf, win = ui.float(lines, { title = "Tandem servers", footer = "s sign in · q close" })
      vim.keymap.set("n", "s", function()
        local name = rows[api.nvim_win_get_cursor(0)[1]]
        if not name then
          vim.notify("tandem: put the cursor on a server's row to sign in to it", vim.log.levels.WARN)
          return
        end
        if api.nvim_win_is_valid(win) then
          api.nvim_win_close(win, true)
        end
        M.sign_in(name, { client_id = client and client.id })
      end, { buffer = buf, nowait = true, silent = true, desc = "Sign in to this server" })
    end
    if opts.on_result then
      opts.on_result(err, report, buf)
    end
  end, { bufnr = opts.bufnr })
end

--- The names of the servers of the last `tandem.servers` report for which `keep(server)`
--- holds; the report is fetched again for next time. With no report yet, asks now with a
--- short timeout (completion cannot wait for a callback).
---@param keep? fun(s: table): boolean
---@return string[]
function M.server_names(keep)
  local report = state.last_servers
  if type(report) ~= "table" then
    local client = lsp.resolve_client(api.nvim_get_current_buf())
    local answer = client
      and client:request_sync("workspace/executeCommand", { command = "tandem.servers", arguments = {} }, 300)
    report = answer and type(answer.result) == "table" and answer.result or nil
    if report then
      state.last_servers = report
    end
  end
  M.fetch_servers(function() end, {})
  local out = {}
  for _, s in ipairs(report and type(report.servers) == "table" and report.servers or {}) do
    if type(s.name) == "string" and (not keep or keep(s)) then
      out[#out + 1] = s.name
    end
  end
  return out
end

-- Signing in ----------------------------------------------------------------------------------

--- Servers whose sign-in this editor started and waits for (name -> true): the server's
--- offer to sign in to them is not asked again.
M.signing_in = {}

---@class tandem.SignInOpts
---@field bufnr? integer
---@field client_id? integer
---@field on_result? fun(err: string?, report: table?) The SignInReport once signed in and connected.

--- `:Tandem signin NAME`: starts the sign-in to a remote server (Tandem opens the browser on
--- its sign-in page; the URL is shown too), then waits for the approval and the server's
--- connection. Progress and the result via vim.notify.
---@param name string
---@param opts? tandem.SignInOpts
function M.sign_in(name, opts)
  opts = opts or {}
  local ropts = { bufnr = opts.bufnr, client_id = opts.client_id }
  local function done(err, report, client)
    M.signing_in[name] = nil
    if err then
      vim.notify(("tandem: sign-in to '%s' failed: %s"):format(name, err), vim.log.levels.ERROR)
    else
      local info = ui.present(report.server_info) and (" (" .. report.server_info .. ")") or ""
      local tools = tonumber(report.tools) or 0
      vim.notify(
        ("tandem: signed in to '%s'%s: %s, %d tool%s"):format(
          name,
          info,
          (tostring(report.status or "?"):gsub("_", " ")),
          tools,
          tools == 1 and "" or "s"
        ),
        vim.log.levels.INFO
      )
      after_change(client)
    end
    if opts.on_result then
      opts.on_result(err, report)
    end
  end
  M.signing_in[name] = true
  vim.notify(("tandem: signing in to '%s'..."):format(name), vim.log.levels.INFO)
  lsp.execute("tandem.servers.login", { { name = name } }, function(err, started, client)
    if err then
      return done(err, nil, client)
    end
    if ui.present(started.url) then
      vim.notify(
        ("tandem: approve the sign-in to '%s' in your browser (opening it now). If it does not open, visit:\n%s"):format(
          name,
          started.url
        ),
        vim.log.levels.INFO
      )
    end
    local wait = { name = name, wait = true, attempt = started.attempt }
    lsp.execute("tandem.servers.login", { wait }, function(e, report, c)
      done(e, report, c)
    end, { client_id = client and client.id or ropts.client_id, bufnr = ropts.bufnr })
  end, ropts)
end

--- `:Tandem signout NAME`: forgets a remote server's sign-in (its tokens) and disconnects it.
---@param name string
---@param opts? { bufnr?: integer, client_id?: integer, on_result?: fun(err: string?, report: table?) }
function M.sign_out(name, opts)
  opts = opts or {}
  lsp.execute("tandem.servers.logout", { { name = name } }, function(err, report, client)
    if err then
      vim.notify(("tandem: cannot sign out of '%s': %s"):format(name, err), vim.log.levels.ERROR)
    else
      if report.forgot then
        vim.notify(("tandem: signed out of '%s': its tokens are forgotten and it is disconnected"):format(name))
      else
        vim.notify(("tandem: '%s' had no sign-in to forget; it is disconnected"):format(name))
      end
      after_change(client)
    end
    if opts.on_result then
      opts.on_result(err, report)
    end
  end, { bufnr = opts.bufnr, client_id = opts.client_id })
end

-- Trust ----------------------------------------------------------------------------------------

--- `tandem.trust` with `action` (`show`, `approve`, `revoke`): `cb(err, TrustReport)`. An
--- approval carries `sha256`, the digest of the file as it was shown: a file changed since
--- is not approved.
---@param action "show"|"approve"|"revoke"
---@param cb tandem.Callback
---@param opts? tandem.RequestOpts
---@param sha256? string
function M.trust_request(action, cb, opts, sha256)
  lsp.execute("tandem.trust", { { action = action, sha256 = sha256 } }, cb, opts)
end

--- What a trust report's servers would run, one line each.
---@param report table
---@return string[]
function M.trust_lines(report)
  local out = {}
  for _, s in ipairs(type(report.servers) == "table" and report.servers or {}) do
    local runs = ui.present(s.runs) and s.runs or ("(not runnable: " .. tostring(s.error or "?") .. ")")
    local env = type(s.env) == "table" and #s.env > 0 and (" [env: " .. table.concat(s.env, ", ") .. "]") or ""
    out[#out + 1] = ("%s: %s%s"):format(s.name or "?", runs, env)
  end
  return out
end

---@class tandem.TrustOpts
---@field revoke? boolean Withdraw the approval instead.
---@field yes? boolean Approve without asking.
---@field bufnr? integer
---@field client_id? integer
---@field on_result? fun(err: string?, report: table?) The last report (`done` = `approved`, `revoked` or nil when nothing changed).

--- `:Tandem trust`: shows what the workspace's `.mcp.json` would run and asks (vim.ui.select:
--- Trust / Cancel) before approving it; `revoke` withdraws the approval.
---@param opts? tandem.TrustOpts
function M.trust(opts)
  opts = opts or {}
  local ropts = { bufnr = opts.bufnr, client_id = opts.client_id }
  local function done(err, report)
    if opts.on_result then
      opts.on_result(err, report)
    end
  end
  local function act(action, client, sha256)
    M.trust_request(action, function(err, report, c)
      if err then
        vim.notify(("tandem: cannot %s: %s"):format(action, err), vim.log.levels.ERROR)
      elseif action == "approve" then
        local file = report.file or ".mcp.json"
        vim.notify(("tandem: trusted %s; its servers are starting"):format(file), vim.log.levels.INFO)
        after_change(c)
      else
        vim.notify(("tandem: %s is no longer trusted"):format(report.file or ".mcp.json"), vim.log.levels.INFO)
        after_change(c)
      end
      done(err, report)
    end, { client_id = client and client.id or ropts.client_id, bufnr = ropts.bufnr }, sha256)
  end
  M.trust_request("show", function(err, report, client)
    if err then
      vim.notify("tandem: cannot read the workspace's .mcp.json: " .. err, vim.log.levels.ERROR)
      return done(err, nil)
    end
    if not ui.present(report.file) then
      vim.notify("tandem: this workspace has no .mcp.json", vim.log.levels.INFO)
      return done(nil, report)
    end
    if opts.revoke then
      return act("revoke", client)
    end
    if report.trusted then
      vim.notify(("tandem: %s is trusted already"):format(report.file), vim.log.levels.INFO)
      return done(nil, report)
    end
    if opts.yes then
      return act("approve", client, report.sha256)
    end
    local runs = M.trust_lines(report)
    vim.ui.select({ "Trust", "Cancel" }, {
      prompt = ("%s would run: %s. Trust it as it is?"):format(
        report.file,
        #runs > 0 and table.concat(runs, "; ") or "no server"
      ),
      kind = "tandem.trust",
    }, function(choice)
      if choice == "Trust" then
        act("approve", client, report.sha256)
      else
        done(nil, report)
      end
    end)
  end, ropts)
end

-- The server's questions ---------------------------------------------------------------------

--- The server a `window/showMessageRequest` offers to sign in to (`follow.rs`), or nil.
---@param params table
---@return string?
function M.sign_in_offer(params)
  for _, a in ipairs(type(params.actions) == "table" and params.actions or {}) do
    if type(a) == "table" and a.title == "Sign in" then
      return type(params.message) == "string" and params.message:match("^Server '(.+)' waits for you to sign in") or nil
    end
  end
end

--- `window/showMessageRequest` for the tandem client (the trust question, the sign-in offer).
--- Never blocks the event loop: Neovim 0.11 runs server requests in a coroutine, so the
--- handler asks with vim.ui.select and yields until the choice comes, then answers it (on
--- "Sign in", the server asks the editor to open the page: `window/showDocument`, which
--- Neovim opens with vim.ui.open). Called outside a coroutine, it answers `null` at once
--- and, if the user then picks "Trust", approves the file itself, or on "Sign in" joins the
--- sign-in (|:Tandem-signin|). The offer of a sign-in this editor started is not asked:
--- its notifications say where to approve already.
---@type lsp.Handler
function M.on_show_message_request(_, params, ctx)
  params = params or {}
  local actions = type(params.actions) == "table" and params.actions or {}
  local offer = M.sign_in_offer(params)
  if offer and M.signing_in[offer] then
    return vim.NIL
  end
  local function ask(on_choice)
    vim.ui.select(actions, {
      prompt = (params.message or "tandem") .. ": ",
      kind = "tandem.message",
      format_item = function(a)
        return ((a.title or "?"):gsub("\r?\n", " "))
      end,
    }, on_choice)
  end
  local co, is_main = coroutine.running()
  if co and not is_main then
    ask(function(choice)
      -- Scheduled: a synchronous vim.ui.select would resume before the yield below.
      vim.schedule(function()
        coroutine.resume(co, choice or vim.NIL)
      end)
    end)
    local choice = coroutine.yield()
    if type(choice) == "table" and choice.title == "Trust" then
      after_change(vim.lsp.get_client_by_id(ctx.client_id))
    end
    return choice
  end
  vim.schedule(function()
    ask(function(choice)
      if offer and type(choice) == "table" and choice.title == "Sign in" then
        M.sign_in(offer, { client_id = ctx.client_id })
      elseif type(choice) == "table" and choice.title == "Trust" then
        -- The question's Trust action carries the digest of the file it showed.
        M.trust_request("approve", function(err, report, client)
          if err then
            vim.notify("tandem: cannot trust: " .. err, vim.log.levels.ERROR)
          else
            vim.notify(("tandem: trusted %s; its servers are starting"):format(report.file or ".mcp.json"))
            after_change(client)
          end
        end, { client_id = ctx.client_id }, choice.sha256)
      end
    end)
  end)
  return vim.NIL
end

return M
