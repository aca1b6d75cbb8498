--- Completion of prompt commands outside the server's `textDocument/completion`: on the
--- command line (`:Tandem prompt <Tab>`), and in prompt buffers no client is attached to.
---
--- On the command line, prompt names and argument names come from the cached list
--- (prompt/list.lua: refreshed asynchronously on `:Tandem prompt`, when a buffer attaches and
--- whenever completion runs, so the next <Tab> is fresh); values from
--- `tandem.prompt.complete`, the one synchronous request of the plugin, with a short timeout
--- (a cmdline completion function cannot wait for a callback).

local api = vim.api
local list = require("tandem.prompt.list")
local lsp = require("tandem.lsp")
local state = require("tandem.state")

local M = {}

--- How long cmdline completion waits for values (ms). Never longer: the UI is blocked.
M.VALUE_TIMEOUT_MS = 120

--- Completion on the command line (`:Tandem prompt <Tab>`): candidates for the argument
--- `arglead` of `line` (the text after `prompt` up to the cursor), already filtered.
---@param arglead string
---@param line string
---@return string[]
function M.complete_cmdline(arglead, line)
  local buf = api.nvim_get_current_buf()
  -- Fresh for the next <Tab>, whatever this one finds.
  list.refresh({ bufnr = buf })
  local prompts = list.cached(buf)
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
  local wanted = list.normalize(words[1])
  local prompt
  for _, p in ipairs(prompts) do
    if p.command == wanted then
      prompt = p
    end
  end
  if arglead:find("=", 1, true) then
    return M.complete_values(arglead, list.normalize(line), buf)
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
    and list.is_prompt_buffer(buf)
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

return M
