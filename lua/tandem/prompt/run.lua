--- Prompt commands (the hub, docs/lsp-extensions.md "Prompt commands"): a downstream MCP
--- server's prompt run as `/server:prompt name=value ...` (or `--args '{JSON}'`) with
--- `tandem.prompt.run`, from `:Tandem prompt`, its picker, the "Run /server:prompt" code
--- action, and a `tandem://prompt/` buffer's `:edit`. Its messages open in a
--- `tandem://prompt/<server>:<prompt>` buffer, or, with `prompt_insert = "insert"` in a
--- prompt buffer, their text is inserted. Arguments the line lacks are asked for first.
---
--- The server reads every line (`tandem.prompt.parse`, `tandem.prompt.run`): the plugin keeps
--- no copy of the grammar. The parts beside this one:
--- - prompt/list.lua: the cached prompt list per client, prompt buffers, the line's `/`;
--- - prompt/ask.lua: the questions for missing arguments;
--- - prompt/render.lua: the messages as a buffer, or as text inserted;
--- - prompt/complete.lua: command-line completion, and completion in prompt buffers no
---   client is attached to (in attached ones, the server's `textDocument/completion`).
---
--- Shapes (crates/core/src/hub/mod.rs, crates/core/src/calls.rs): PromptInfo `{server, name, command, title,
--- description, arguments: [{name, description, required}]}`; PromptRun `{server, prompt,
--- description, messages: [{role, content}]}` with MCP content (`text`, `image`, `audio`,
--- `resource`, `resource_link`); Completion `{label, insert_text, kind, detail,
--- documentation, start}`; ParsedCommand `{server, prompt, command, arguments, line}`.

local api = vim.api
local ask = require("tandem.prompt.ask")
local list = require("tandem.prompt.list")
local lsp = require("tandem.lsp")
local render = require("tandem.prompt.render")
local state = require("tandem.state")
local ui = require("tandem.ui")

local M = {}

---@class tandem.PromptOpts
---@field insert? boolean true: insert the text into the current buffer (a modifiable prompt buffer); false: open the messages buffer; nil: as `prompt_insert` says.
---@field below? { buf: integer, line: integer } Insert below this line (0-based) rather than at the cursor (the code action).
---@field show? boolean false: neither insert nor open anything (with `on_result`).
---@field bufnr? integer The buffer the request is about (picks the client).
---@field client_id? integer
---@field ask? boolean false: ask for no missing argument (the server answers MISSING_ARGUMENT); nil: as `prompt_ask` says.
---@field ask_optional? boolean true: ask for the missing optional arguments too; false: never for them; nil: as `prompt_ask` says.
---@field on_result? fun(err: string?, run: table?, buf: integer?) After the messages are shown (`buf`: their buffer, or the one they were inserted in); `err` "cancelled" when a question was.

--- Whether a run from the current buffer should insert its text there.
---@param opts tandem.PromptOpts
---@return boolean
local function wants_insert(opts)
  if opts.insert ~= nil then
    return opts.insert
  end
  return (state.config and state.config.prompt_insert or "buffer") == "insert"
end

--- Where a run from the current buffer inserts its text, decided before any question (they
--- may move the cursor, or open windows); nil: nowhere, the messages get their buffer.
---@param opts tandem.PromptOpts
---@return tandem.InsertTarget?
local function insert_target(opts)
  if opts.show == false or not wants_insert(opts) then
    return nil
  end
  local origin = api.nvim_get_current_buf()
  if opts.below and api.nvim_buf_is_loaded(opts.below.buf) and vim.bo[opts.below.buf].modifiable then
    return render.below_target(opts.below.buf, opts.below.line)
  elseif not opts.below and list.is_prompt_buffer(origin) and vim.bo[origin].modifiable then
    return render.cursor_target(origin)
  end
end

--- Runs `/server:prompt name=value ...` (`tandem.prompt.run`) and shows the messages, or
--- inserts their text (see |tandem-opt-prompt_insert|). Required arguments the line lacks
--- are asked for first with vim.ui.input (see |tandem-opt-prompt_ask|); a cancelled question
--- runs nothing. Errors are notified with their code.
---@param line string
---@param opts? tandem.PromptOpts
function M.run(line, opts)
  opts = opts or {}
  line = list.normalize(line)
  local target = insert_target(opts)
  local function fail(err, what)
    if target then
      render.drop_target(target)
    end
    local level = err == "cancelled" and vim.log.levels.INFO or vim.log.levels.ERROR
    vim.notify(("tandem: %s: %s"):format(what:match("^%S+") or what, err), level)
    if opts.on_result then
      opts.on_result(err, nil, nil)
    end
  end
  ask.complete(line, opts, function(full, client_id, err)
    if not full then
      return fail(err or "cancelled", line)
    end
    lsp.execute("tandem.prompt.run", { full }, function(run_err, run, client)
      if not run_err and type(run) ~= "table" then
        run_err = "the server's answer has no messages"
      end
      if run_err then
        return fail(run_err, full)
      end
      local buf
      if opts.show == false then
        buf = nil
      elseif target and render.insert(run, target) then
        buf = target.buf
      else
        buf = render.show(run, full, client and client.id)
      end
      if opts.on_result then
        opts.on_result(nil, run, buf)
      end
    end, { bufnr = opts.bufnr, client_id = client_id or opts.client_id })
  end)
end

--- `:Tandem prompt` without a command: picks one of the prompts with vim.ui.select; one
--- without arguments runs, one with arguments is put on the command line to complete.
---@param opts? tandem.PromptOpts
function M.pick(opts)
  list.list(function(err, prompts)
    if err then
      return vim.notify("tandem: cannot list prompts: " .. err, vim.log.levels.ERROR)
    end
    if #prompts == 0 then
      return vim.notify("tandem: no prompts (see :Tandem servers)", vim.log.levels.INFO)
    end
    vim.ui.select(prompts, {
      prompt = "Prompt",
      kind = "tandem.prompt",
      format_item = function(p)
        local d = ui.present(p.description) and p.description or (ui.present(p.title) and p.title or nil)
        return d and ("%s  %s"):format(p.command, (d:gsub("\n.*", ""))) or p.command
      end,
    }, function(p)
      if not p then
        return
      end
      if #(p.arguments or {}) == 0 then
        return M.run(p.command, opts)
      end
      api.nvim_feedkeys(":Tandem prompt " .. p.command .. " ", "n", false)
    end)
  end)
end

--- The client-side handler of the "Run /server:prompt" code action (`tandem.prompt.run`
--- with `[{command, uri, line}]`): runs it and shows the messages, or with `prompt_insert =
--- "insert"` inserts their text below that line.
---@param command lsp.Command
---@param ctx table
function M.run_action(command, ctx)
  local arg = type(command.arguments) == "table" and command.arguments[1] or nil
  if type(arg) == "string" then
    arg = { command = arg }
  end
  if type(arg) ~= "table" or type(arg.command) ~= "string" then
    return vim.notify("tandem: tandem.prompt.run needs a {command} argument", vim.log.levels.ERROR)
  end
  local buf = ctx.bufnr
  if type(arg.uri) == "string" and (not buf or vim.uri_from_bufnr(buf) ~= arg.uri) then
    local b = vim.uri_to_bufnr(arg.uri)
    buf = api.nvim_buf_is_loaded(b) and b or nil
  end
  local below = buf and tonumber(arg.line) and { buf = buf, line = tonumber(arg.line) } or nil
  local opts = { client_id = ctx.client_id, below = below } ---@type tandem.PromptOpts
  if not below then
    opts.insert = false -- nowhere to insert: the messages buffer
  end
  M.run(arg.command, opts)
end

--- Runs the command a `tandem://prompt/` buffer was made from again (its BufReadCmd).
---@param buf integer
function M.reload(buf)
  local line = vim.b[buf].tandem_prompt_line
  local name = api.nvim_buf_get_name(buf)
  local bo = vim.bo[buf]
  bo.buftype = "nofile"
  bo.swapfile = false
  bo.bufhidden = "hide"
  if type(line) ~= "string" then
    local run = state.prompt_results[name]
    ui.set_lines(buf, run and render.render(run) or { "# " .. name, "", "Run it again with :Tandem prompt." })
    bo.filetype = "markdown"
    return
  end
  lsp.execute("tandem.prompt.run", { line }, function(err, run)
    if not api.nvim_buf_is_valid(buf) then
      return
    end
    if err or type(run) ~= "table" then
      ui.set_lines(buf, { "# " .. line, "", "> " .. (err or "no answer") })
    else
      state.prompt_results[name] = run
      ui.set_lines(buf, render.render(run))
    end
    bo.filetype = "markdown"
  end, { client_id = vim.b[buf].tandem_client_id })
end

return M
