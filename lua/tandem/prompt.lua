--- Prompt commands (the hub, docs/lsp-extensions.md "Prompt commands"): a downstream MCP
--- server's prompt run as `/server:prompt name=value ...`, from `:Tandem prompt` or from the
--- "Run /server:prompt" code action. Its messages open in a `tandem://prompt/<server>:<prompt>`
--- buffer, or, with `prompt_insert = "insert"` in a prompt buffer, their text is inserted.
--- Arguments the line lacks are asked for first, one vim.ui.input after the other
--- (`prompt_ask`: the required ones by default), from the prompt's entry in the cached list
--- (fetched first when the list does not hold it); the answers are appended, quoted as needed.
---
--- Completion on the command line: prompt names and argument names come from the last
--- `tandem.prompts.list` (kept per client, refreshed asynchronously on `:Tandem prompt`, when
--- a buffer attaches and whenever completion runs, so the next <Tab> is fresh); values from
--- `tandem.prompt.complete`, the one synchronous request of the plugin, with a short timeout
--- (a cmdline completion function cannot wait for a callback). While typing in prompt
--- buffers, completion is the server's `textDocument/completion`, see lsp.lua.
---
--- Shapes (src/hub/mod.rs): PromptInfo `{server, name, command, title, description,
--- arguments: [{name, description, required}]}`; PromptRun `{server, prompt, description,
--- messages: [{role, content}]}` with MCP content (`text`, `image`, `audio`, `resource`,
--- `resource_link`); Completion `{label, insert_text, kind, detail, documentation, start}`.

local api = vim.api
local lsp = require("tandem.lsp")
local state = require("tandem.state")
local ui = require("tandem.ui")

local M = {}

--- How long cmdline completion waits for values (ms). Never longer: the UI is blocked.
M.VALUE_TIMEOUT_MS = 120

--- Where insertions wait for their text (extmarks follow edits made meanwhile).
local ns = api.nvim_create_namespace("tandem.prompt")

--- Whether `ft` is a prompt filetype (`prompt_filetypes`; `"*"` matches all).
---@param ft string
---@return boolean
function M.is_prompt_filetype(ft)
  local list = state.config and state.config.prompt_filetypes
    or require("tandem.config").DEFAULT_PROMPT_FILETYPES
  return vim.list_contains(list, "*") or vim.list_contains(list, ft)
end

--- Whether `buf` (0: current) is a prompt buffer: its 'filetype' is a prompt filetype.
---@param buf integer?
---@return boolean
function M.is_prompt_buffer(buf)
  buf = (buf == nil or buf == 0) and api.nvim_get_current_buf() or buf
  return api.nvim_buf_is_valid(buf) and M.is_prompt_filetype(vim.bo[buf].filetype)
end

--- `tandem.prompts.list`: `cb(err, PromptInfo[], client)`. The list is kept for completion.
---@param cb tandem.Callback
---@param opts? tandem.RequestOpts
function M.list(cb, opts)
  lsp.execute("tandem.prompts.list", {}, function(err, result, client, raw)
    local again = false
    if client then
      again = state.prompts_inflight[client.id] == "again"
      state.prompts_inflight[client.id] = nil
    end
    if not err and client then
      result = type(result) == "table" and result or {}
      state.prompts[client.id] = result
    end
    cb(err, result, client, raw)
    if again then
      M.refresh({ client_id = client.id })
    end
  end, opts)
end

--- Refreshes the cached prompt list of a client in the background (at most one request in
--- flight per client: a refresh asked meanwhile runs once it is answered, so a change is
--- never missed; errors are ignored: the cache stays as it was).
---@param opts? { client_id?: integer, bufnr?: integer }
function M.refresh(opts)
  opts = opts or {}
  local client = opts.client_id and vim.lsp.get_client_by_id(opts.client_id) or lsp.resolve_client(opts.bufnr)
  if not client or client:is_stopped() then
    return
  end
  if state.prompts_inflight[client.id] then
    state.prompts_inflight[client.id] = "again"
    return
  end
  state.prompts_inflight[client.id] = true
  M.list(function() end, { client_id = client.id })
end

--- The cached prompt list of the client a request from `buf` goes to (may be empty).
---@param buf integer?
---@return table[]
function M.cached(buf)
  local client = lsp.resolve_client(buf)
  return client and state.prompts[client.id] or {}
end

--- The cached prompt commands (`/server:prompt`), in the server's order.
---@param buf integer?
---@return string[]
function M.commands(buf)
  return vim.tbl_map(function(p)
    return p.command
  end, M.cached(buf))
end

--- `/server:prompt`.
---@param run table
---@return string
function M.command_name(run)
  return ("/%s:%s"):format(run.server or "?", run.prompt or "?")
end

--- The scratch buffer's name for a run.
---@param run table
---@return string
function M.buffer_name(run)
  return ("tandem://prompt/%s:%s"):format(run.server or "?", run.prompt or "?")
end

---@param v any
---@return string?
local function str(v)
  return type(v) == "string" and v or nil
end

--- One MCP content block as lines (markdown): text as is, `[image image/png]`, an embedded
--- resource as `[resource URI (MIME)]` and its text.
---@param content any
---@return string[]
function M.content_lines(content)
  if type(content) ~= "table" then
    return { tostring(content) }
  end
  if vim.islist(content) then
    local out = {}
    for i, c in ipairs(content) do
      if i > 1 then
        out[#out + 1] = ""
      end
      vim.list_extend(out, M.content_lines(c))
    end
    return out
  end
  local kind = content.type
  if kind == "text" then
    return ui.split_lines(str(content.text) or "")
  elseif kind == "image" or kind == "audio" then
    return { ("[%s %s]"):format(kind, str(content.mimeType) or "?") }
  elseif kind == "resource" and type(content.resource) == "table" then
    local r = content.resource
    local head = "[resource " .. (str(r.uri) or "?")
    if str(r.mimeType) then
      head = head .. " (" .. r.mimeType .. ")"
    end
    if str(r.text) then
      local out = { head .. "]" }
      vim.list_extend(out, ui.split_lines(r.text))
      return out
    end
    return { head .. (r.blob and ", binary" or "") .. "]" }
  elseif kind == "resource_link" then
    local name = str(content.name) and (content.name .. " ") or ""
    return { ("[resource link %s%s]"):format(name, str(content.uri) or "?") }
  end
  return { ("[%s]"):format(str(kind) or "content") }
end

--- A run as the markdown of its buffer: the command and description, then each message as
--- `## role` and its content.
---@param run table PromptRun
---@return string[]
function M.render(run)
  local lines = { "# " .. M.command_name(run) }
  if ui.present(run.description) then
    lines[#lines + 1] = ""
    vim.list_extend(lines, ui.split_lines(run.description))
  end
  local messages = type(run.messages) == "table" and run.messages or {}
  for _, m in ipairs(messages) do
    vim.list_extend(lines, { "", "## " .. (str(m.role) or "?"), "" })
    vim.list_extend(lines, M.content_lines(m.content))
  end
  if #messages == 0 then
    vim.list_extend(lines, { "", "_The prompt returned no messages._" })
  end
  return lines
end

--- A run as plain text to insert: each message's content, separated by blank lines.
---@param run table PromptRun
---@return string[]
function M.text(run)
  local lines = {}
  for i, m in ipairs(type(run.messages) == "table" and run.messages or {}) do
    if i > 1 then
      lines[#lines + 1] = ""
    end
    vim.list_extend(lines, M.content_lines(m.content))
  end
  return lines
end

--- Shows a run in its `tandem://prompt/<server>:<prompt>` buffer. Returns the buffer.
---@param run table
---@param line string? The command line that ran (`:edit` runs it again).
---@param client_id integer?
---@param show? boolean Default true.
---@return integer buf
function M.show(run, line, client_id, show)
  local name = M.buffer_name(run)
  state.prompt_results[name] = run
  local buf = ui.scratch(name, M.render(run), { filetype = "markdown", show = show })
  vim.b[buf].tandem_prompt_line = line
  vim.b[buf].tandem_client_id = client_id
  return buf
end

---@class tandem.InsertTarget
---@field buf integer
---@field mark integer Extmark where the text goes.
---@field below boolean Insert as lines below the mark's line (else at the mark, charwise).

--- Where `:Tandem prompt` inserts in `buf` (the cursor, after its character as `p` puts).
---@param buf integer
---@return tandem.InsertTarget
local function cursor_target(buf)
  local row, col = unpack(api.nvim_win_get_cursor(0))
  local text = api.nvim_buf_get_lines(buf, row - 1, row, false)[1] or ""
  if text ~= "" and col < #text and api.nvim_get_mode().mode:sub(1, 1) ~= "i" then
    local chars = vim.fn.charidx(text, col)
    local after = chars >= 0 and vim.fn.byteidx(text, chars + 1) or -1
    col = after >= 0 and after or #text
  end
  return { buf = buf, mark = api.nvim_buf_set_extmark(buf, ns, row - 1, math.min(col, #text), {}), below = false }
end

--- Inserts a run's text at its target. Returns false when the buffer went away or is not
--- modifiable.
---@param run table
---@param target tandem.InsertTarget
---@return boolean
function M.insert(run, target)
  local buf = target.buf
  if not api.nvim_buf_is_valid(buf) or not api.nvim_buf_is_loaded(buf) or not vim.bo[buf].modifiable then
    return false
  end
  local pos = api.nvim_buf_get_extmark_by_id(buf, ns, target.mark, {})
  pcall(api.nvim_buf_del_extmark, buf, ns, target.mark)
  if not pos[1] then
    return false
  end
  local lines = M.text(run)
  if #lines == 0 then
    return true
  end
  local row, col = pos[1], pos[2]
  if target.below then
    api.nvim_buf_set_lines(buf, row + 1, row + 1, false, lines)
    row, col = row + #lines, #lines[#lines]
  else
    api.nvim_buf_set_text(buf, row, col, row, col, lines)
    col = (#lines == 1 and col or 0) + #lines[#lines]
    row = row + #lines - 1
  end
  if api.nvim_get_current_buf() == buf then
    pcall(api.nvim_win_set_cursor, 0, { row + 1, math.max(col - 1, 0) })
  end
  return true
end

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

--- The line as the server reads it: trimmed, with the leading `/` added when missing.
---@param line string
---@return string
function M.normalize(line)
  line = vim.trim(line)
  if line ~= "" and line:sub(1, 1) ~= "/" then
    line = "/" .. line
  end
  return line
end

-- Asking for missing arguments ------------------------------------------------------------

--- The end of the value that starts at byte `i` of `line` (the index just after it), by the
--- server's grammar (src/hub/command.rs): a bracketed JSON value up to its matching bracket,
--- else parts (`"..."` with backslash escapes, `'...'`, `\c`, any other character) up to
--- unquoted whitespace. nil when a quote is not closed or the line ends on a backslash.
---@param line string
---@param i integer
---@return integer?
local function value_end(line, i)
  local n = #line
  local first = line:sub(i, i)
  if first == "{" or first == "[" then
    local depth, j, in_string = 0, i, false
    while j <= n do
      local c = line:sub(j, j)
      if in_string then
        if c == "\\" then
          j = j + 1
        elseif c == '"' then
          in_string = false
        end
      elseif c == '"' then
        in_string = true
      elseif c == "{" or c == "[" then
        depth = depth + 1
      elseif c == "}" or c == "]" then
        depth = depth - 1
        if depth == 0 then
          break
        end
      end
      j = j + 1
    end
    if j <= n and (j == n or line:sub(j + 1, j + 1):match("%s")) then
      return j + 1
    end
    -- Not JSON ending the word: ordinary parts (the server reads it so, or refuses it).
  end
  while i <= n do
    local c = line:sub(i, i)
    if c:match("%s") then
      break
    elseif c == '"' then
      local j = i + 1
      while j <= n and line:sub(j, j) ~= '"' do
        j = j + (line:sub(j, j) == "\\" and 2 or 1)
      end
      if j > n then
        return nil
      end
      i = j + 1
    elseif c == "'" then
      local j = line:find("'", i + 1, true)
      if not j then
        return nil
      end
      i = j + 1
    elseif c == "\\" then
      if i == n then
        return nil
      end
      i = i + 2
    else
      i = i + 1
    end
  end
  return i
end

--- A prompt command line split as the server would: its `/server:prompt` word and the names
--- of the arguments it gives. nil when the line is not a well-formed command (the server
--- then says what is wrong).
---@param line string
---@return { command: string, arguments: table<string, true> }?
function M.parse(line)
  line = M.normalize(line)
  local command, i = line:match("^(/[^%s:]+:%S+)()")
  if not command then
    return nil
  end
  local names = {}
  while true do
    local s = line:find("%S", i)
    if not s then
      break
    end
    local name, value = line:match("^([^%s=]+)=()", s)
    if s == i or not name or names[name] then
      return nil
    end
    names[name] = true
    i = value_end(line, value)
    if not i then
      return nil
    end
  end
  return { command = command, arguments = names }
end

--- What a double-quoted value escapes.
local ESCAPES = { ["\\"] = "\\\\", ['"'] = '\\"', ["\n"] = "\\n", ["\t"] = "\\t", ["\r"] = "\\r" }

--- `value` as the server reads it back in a command line: as is when it is plain text; else
--- double-quoted with `\` and `"` escaped (and newlines, tabs, carriage returns as `\n`,
--- `\t`, `\r`). Plain: not empty, no whitespace, quote or backslash, not starting with a
--- bracket (which would be read as JSON).
---@param value string
---@return string
function M.quote(value)
  if value ~= "" and not value:find("[%s\"'\\]") and not value:find("^[%[{]") then
    return value
  end
  local escaped = value:gsub('[\\"\n\t\r]', ESCAPES)
  return '"' .. escaped .. '"'
end

--- The question for an argument: `name (description): `, `, optional` added to an optional one.
---@param arg table `{name, description, required}`
---@return string
function M.question(arg)
  local desc = type(arg.description) == "string" and vim.trim((arg.description:gsub("\n.*", ""))) or ""
  if not arg.required then
    desc = desc ~= "" and (desc .. ", optional") or "optional"
  end
  return desc ~= "" and ("%s (%s): "):format(arg.name, desc) or ("%s: "):format(arg.name)
end

--- What to ask for this run: "required", "all" or "never" (|tandem-opt-prompt_ask|, which
--- `opts.ask` and `opts.ask_optional` override).
---@param opts tandem.PromptOpts
---@return "required"|"all"|"never"
local function ask_mode(opts)
  if opts.ask == false then
    return "never"
  elseif opts.ask_optional == true then
    return "all"
  end
  local mode = state.config and state.config.prompt_ask or "required"
  if opts.ask_optional == false and mode == "all" then
    return "required"
  end
  return mode
end

--- The arguments of `info` the line does not give, in the prompt's order: the required
--- ones, or all with `all`.
---@param info table PromptInfo
---@param given table<string, true>
---@param all boolean
---@return table[]
function M.missing(info, given, all)
  local out = {}
  for _, a in ipairs(type(info.arguments) == "table" and info.arguments or {}) do
    if type(a) == "table" and type(a.name) == "string" and not given[a.name] and (a.required or all) then
      out[#out + 1] = a
    end
  end
  return out
end

--- Asks for each argument in turn with vim.ui.input (the next question once the previous is
--- answered, never waiting). `cb(words)`: the `name=value` words to append (an optional
--- argument left empty is left out), or nil when a question was cancelled.
---@param args table[]
---@param cb fun(words: string[]?)
function M.ask(args, cb)
  local words = {}
  ui.input_each(args, function(arg)
    return { prompt = M.question(arg) }
  end, function(arg, value)
    if value ~= "" or arg.required then
      words[#words + 1] = arg.name .. "=" .. M.quote(value)
    end
  end, function(answered)
    cb(answered and words or nil)
  end)
end

---@param prompts table[]?
---@param command string
---@return table?
local function find(prompts, command)
  for _, p in ipairs(type(prompts) == "table" and prompts or {}) do
    if type(p) == "table" and p.command == command then
      return p
    end
  end
end

--- Completes `line` with the arguments it lacks, asked for (see ask_mode), then
--- `cb(line, client_id)`; `cb(nil)` when the user cancelled. The prompt's arguments come from
--- the cached list, fetched first when it does not hold the prompt; a line that is not a
--- command, or a prompt the server does not list, goes on as it is (the server says why).
---@param line string
---@param opts tandem.PromptOpts
---@param cb fun(line: string?, client_id: integer?)
local function complete_arguments(line, opts, cb)
  local mode = ask_mode(opts)
  local parsed = mode ~= "never" and M.parse(line) or nil
  local function decide(info, client_id)
    local args = info and M.missing(info, parsed.arguments, mode == "all") or {}
    if #args == 0 then
      return cb(line, client_id)
    end
    M.ask(args, function(words)
      if not words then
        return cb(nil)
      end
      cb(#words > 0 and (line .. " " .. table.concat(words, " ")) or line, client_id)
    end)
  end
  local client = opts.client_id and vim.lsp.get_client_by_id(opts.client_id) or lsp.resolve_client(opts.bufnr)
  local info = parsed and client and find(state.prompts[client.id], parsed.command)
  if not parsed or info then
    -- Whatever happens, the next <Tab> sees the current list.
    M.refresh({ client_id = opts.client_id, bufnr = opts.bufnr })
    return decide(info, info and client.id or opts.client_id)
  end
  -- Not in the cache (cold, or a server that just started): the list first.
  M.list(function(err, prompts, c)
    local id = c and c.id or opts.client_id
    decide(not err and find(prompts, parsed.command) or nil, id)
  end, { bufnr = opts.bufnr, client_id = opts.client_id })
end

--- Runs `/server:prompt name=value ...` (`tandem.prompt.run`) and shows the messages, or
--- inserts their text (see |tandem-opt-prompt_insert|). Required arguments the line lacks
--- are asked for first with vim.ui.input (see |tandem-opt-prompt_ask|); a cancelled question
--- runs nothing. Errors are notified with their code.
---@param line string
---@param opts? tandem.PromptOpts
function M.run(line, opts)
  opts = opts or {}
  line = M.normalize(line)
  local origin = api.nvim_get_current_buf()
  -- Where to insert is decided now: the questions may move the cursor, or open windows.
  local target ---@type tandem.InsertTarget?
  if opts.show ~= false and wants_insert(opts) then
    if opts.below and api.nvim_buf_is_loaded(opts.below.buf) and vim.bo[opts.below.buf].modifiable then
      local b = opts.below.buf
      local last = api.nvim_buf_line_count(b) - 1
      target = { buf = b, mark = api.nvim_buf_set_extmark(b, ns, math.min(opts.below.line, last), 0, {}), below = true }
    elseif not opts.below and M.is_prompt_buffer(origin) and vim.bo[origin].modifiable then
      target = cursor_target(origin)
    end
  end
  local function drop_target()
    if target then
      pcall(api.nvim_buf_del_extmark, target.buf, ns, target.mark)
    end
  end
  complete_arguments(line, opts, function(full, client_id)
    if not full then
      drop_target()
      vim.notify(("tandem: %s: cancelled"):format(line:match("^%S+") or line), vim.log.levels.INFO)
      if opts.on_result then
        opts.on_result("cancelled", nil, nil)
      end
      return
    end
    lsp.execute("tandem.prompt.run", { full }, function(err, run, client)
      local buf
      if not err and type(run) ~= "table" then
        err = "the server's answer has no messages"
      end
      if err then
        drop_target()
        vim.notify(("tandem: %s: %s"):format(full:match("^%S+") or full, err), vim.log.levels.ERROR)
      elseif opts.show == false then
        buf = nil
      elseif target and M.insert(run, target) then
        buf = target.buf
      else
        buf = M.show(run, full, client and client.id)
      end
      if opts.on_result then
        opts.on_result(err, run, buf)
      end
    end, { bufnr = opts.bufnr, client_id = client_id or opts.client_id })
  end)
end

--- `:Tandem prompt` without a command: picks one of the prompts with vim.ui.select; one
--- without arguments runs, one with arguments is put on the command line to complete.
---@param opts? tandem.PromptOpts
function M.pick(opts)
  M.list(function(err, prompts)
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

--- Completion on the command line (`:Tandem prompt <Tab>`): candidates for the argument
--- `arglead` of `line` (the text after `prompt` up to the cursor), already filtered.
---@param arglead string
---@param line string
---@return string[]
function M.complete_cmdline(arglead, line)
  local buf = api.nvim_get_current_buf()
  -- Fresh for the next <Tab>, whatever this one finds.
  M.refresh({ bufnr = buf })
  local prompts = M.cached(buf)
  local words = vim.split(line, "%s+", { trimempty = false })
  local lead = arglead:lower()
  if #words <= 1 then
    local typed = lead:gsub("^/", "")
    local out = {}
    for _, p in ipairs(prompts) do
      if p.command:sub(2):lower():find(typed, 1, true) == 1 or (p.name or ""):lower():find(typed, 1, true) == 1 then
        out[#out + 1] = p.command
      end
    end
    table.sort(out)
    return out
  end
  local wanted = M.normalize(words[1])
  local prompt
  for _, p in ipairs(prompts) do
    if p.command == wanted then
      prompt = p
    end
  end
  if arglead:find("=", 1, true) then
    return M.complete_values(arglead, M.normalize(line), buf)
  end
  if not prompt then
    return {}
  end
  local present = {}
  for i = 2, #words - 1 do
    local name = words[i]:match("^([^=]+)=")
    if name then
      present[name] = true
    end
  end
  local out = {}
  for _, a in ipairs(prompt.arguments or {}) do
    if not present[a.name] and vim.startswith(a.name:lower(), lead) then
      out[#out + 1] = a.name .. "="
    end
  end
  return out
end

--- Values for `name=<Tab>` from `tandem.prompt.complete`, waiting at most VALUE_TIMEOUT_MS
--- (nothing on timeout). Each candidate is the whole argument (`style=formal`).
---@param arglead string
---@param line string The command up to the cursor.
---@param buf integer
---@return string[]
function M.complete_values(arglead, line, buf)
  local client = lsp.resolve_client(buf)
  if not client or not client.initialized or client:is_stopped() then
    return {}
  end
  local ok, res = pcall(client.request_sync, client, "workspace/executeCommand", {
    command = "tandem.prompt.complete",
    arguments = { { line = line, cursor = #line } },
  }, M.VALUE_TIMEOUT_MS)
  if not ok or type(res) ~= "table" or res.err or type(res.result) ~= "table" then
    return {}
  end
  local lead_start = #line - #arglead -- byte offset where arglead begins
  local out = {}
  for _, c in ipairs(res.result) do
    local start = tonumber(c.start)
    if start and start >= lead_start and type(c.insert_text) == "string" then
      out[#out + 1] = line:sub(lead_start + 1, start) .. c.insert_text
    end
  end
  return out
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

-- Completion in prompt buffers no client is attached to -----------------------------------

--- Chat buffers of other plugins (codecompanion, AvanteInput, copilot-chat...) are
--- 'buftype' nofile or prompt, with names that are not files: no tandem client attaches to
--- them, so `textDocument/completion` cannot serve them. There the same completion comes
--- from `tandem.prompt.complete` (no document needed: the line is sent), shown with
--- |complete()| as you type, on the same trigger characters.

--- Characters that ask for completion (the server's trigger characters).
local TRIGGERS = { ["/"] = true, [" "] = true, ["="] = true, [":"] = true }

--- Filetypes that say nothing about a special buffer: hover windows, notifications and
--- documents are nofile markdown buffers, and must not get the fallback.
local GENERIC = { [""] = true, text = true, plaintext = true, markdown = true, gitcommit = true }

--- Whether `buf` gets the fallback: not a file buffer (those attach), a prompt filetype that
--- names a chat or prompt input (not a generic one such as markdown), completion on, and no
--- tandem client attached.
---@param buf integer
---@return boolean
function M.wants_fallback(buf)
  return state.config ~= nil
    and state.config.prompt_completion
    and api.nvim_buf_is_valid(buf)
    and vim.bo[buf].buftype ~= ""
    and not GENERIC[vim.bo[buf].filetype]
    and M.is_prompt_buffer(buf)
    and lsp.client(buf) == nil
end

--- Asks for completions of the current line up to the cursor and shows them, if the line is
--- a prompt command and the cursor has not moved on meanwhile.
---@param buf integer
function M.fallback_complete(buf)
  if api.nvim_get_current_buf() ~= buf or api.nvim_get_mode().mode:sub(1, 1) ~= "i" then
    return
  end
  local row, col = unpack(api.nvim_win_get_cursor(0))
  local before = api.nvim_get_current_line():sub(1, col)
  local indent = #before:match("^%s*")
  if before:sub(indent + 1, indent + 1) ~= "/" then
    return
  end
  local line = before:sub(indent + 1)
  local tick = api.nvim_buf_get_changedtick(buf)
  lsp.execute("tandem.prompt.complete", { { line = line, cursor = #line } }, function(err, items)
    if err or type(items) ~= "table" or #items == 0 then
      return
    end
    if api.nvim_get_current_buf() ~= buf or api.nvim_get_mode().mode:sub(1, 1) ~= "i"
      or api.nvim_buf_get_changedtick(buf) ~= tick or api.nvim_win_get_cursor(0)[1] ~= row
    then
      return -- typed on meanwhile: the next character asks again
    end
    local start = tonumber(items[1].start) or #line
    local matches = {}
    for _, c in ipairs(items) do
      matches[#matches + 1] = {
        word = c.insert_text,
        abbr = c.label,
        menu = type(c.detail) == "string" and c.detail or nil,
        info = type(c.documentation) == "string" and c.documentation or nil,
        kind = c.kind == "command" and "f" or (c.kind == "argument" and "m" or "v"),
        icase = 1,
        dup = 1,
        empty = 1,
      }
    end
    vim.fn.complete(indent + start + 1, matches)
  end, { bufnr = buf })
end

--- Sets the fallback up in `buf` (once): a trigger character, or any character while a
--- prompt command's menu is open, asks again (debounced).
---@param buf integer
function M.enable_fallback(buf)
  if vim.b[buf].tandem_prompt_fallback then
    return
  end
  vim.b[buf].tandem_prompt_fallback = true
  local timer = assert(vim.uv.new_timer())
  local group = api.nvim_create_augroup("tandem.prompt_completion_" .. buf, { clear = true })
  api.nvim_create_autocmd("InsertCharPre", {
    group = group,
    buffer = buf,
    desc = "tandem: complete prompt commands",
    callback = function()
      local line = api.nvim_get_current_line()
      if not TRIGGERS[vim.v.char] and not (vim.fn.pumvisible() == 1 and line:match("^%s*/")) then
        return
      end
      timer:stop()
      timer:start(30, 0, vim.schedule_wrap(function()
        M.fallback_complete(buf)
      end))
    end,
  })
  api.nvim_create_autocmd({ "BufWipeout", "BufUnload" }, {
    group = group,
    buffer = buf,
    once = true,
    callback = function()
      timer:stop()
      if not timer:is_closing() then
        timer:close()
      end
      pcall(api.nvim_del_augroup_by_id, group)
    end,
  })
end

--- Turns the fallback off in `buf`.
---@param buf integer
function M.disable_fallback(buf)
  if vim.b[buf].tandem_prompt_fallback then
    vim.b[buf].tandem_prompt_fallback = nil
    pcall(api.nvim_exec_autocmds, "BufUnload", { group = "tandem.prompt_completion_" .. buf, buffer = buf })
  end
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
    ui.set_lines(buf, run and M.render(run) or { "# " .. name, "", "Run it again with :Tandem prompt." })
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
      ui.set_lines(buf, M.render(run))
    end
    bo.filetype = "markdown"
  end, { client_id = vim.b[buf].tandem_client_id })
end

return M
