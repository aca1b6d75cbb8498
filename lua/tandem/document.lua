--- `tandem://task/<ID>` and `tandem://memory/<ID>` buffers: read with the `tandem/document`
--- request (BufReadCmd), shown as read-only markdown. (`tandem://prompt/...` and
--- `tandem://inject` are scratch buffers of prompt.lua and hub.lua; reading them again runs
--- their command again.)
---
--- Buffer options: `buftype=nofile` (no file behind it, never written), `swapfile` off,
--- `modifiable` off, and `bufhidden=delete`: a hidden document is unloaded but keeps its
--- buffer number, so the jumplist and `<C-o>` still reach it, and coming back reads it again
--- (a running task's record changes; a stale copy would mislead). `wipe` would drop the
--- jumplist entries; `hide` would keep showing a stale record.

local api = vim.api
local lsp = require("tandem.lsp")

local M = {}

---@class tandem.OpenOpts
---@field client_id? integer The client to ask (else: see lsp.resolve_client).
---@field on_load? fun(buf: integer, err: string?) Called once the document (or its error) is shown.

--- Options for documents opened by name (:edit), picked up by the BufReadCmd that follows.
---@type table<string, tandem.OpenOpts>
M.pending = {}

---@param id string
---@return string
function M.task_uri(id)
  return "tandem://task/" .. id
end

---@param id string
---@return string
function M.memory_uri(id)
  return "tandem://memory/" .. id
end

---@param buf integer
---@param lines string[]
local function set_lines(buf, lines)
  local bo = vim.bo[buf]
  bo.modifiable = true
  api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  bo.modifiable = false
  bo.modified = false
end

--- The text shown in place of a document that could not be read.
---@param uri string
---@param err string
---@return string[]
function M.error_lines(uri, err)
  local lines = { "# Cannot open " .. uri, "" }
  for _, l in ipairs(vim.split(err, "\n", { plain = true })) do
    lines[#lines + 1] = "> " .. l
  end
  vim.list_extend(lines, {
    "",
    "The `tandem/document` request failed. `:Tandem status` shows the server,",
    "`:Tandem log` its log; `:edit` here tries again.",
  })
  return lines
end

--- Fetches the document named by the buffer and shows it (or the error).
---@param buf integer
---@param opts? tandem.OpenOpts
function M.load(buf, opts)
  opts = opts or {}
  local uri = api.nvim_buf_get_name(buf)
  local bo = vim.bo[buf]
  bo.buftype = "nofile"
  bo.bufhidden = "delete"
  bo.swapfile = false
  if bo.filetype ~= "markdown" then
    bo.filetype = "markdown"
  end
  set_lines(buf, { "Loading " .. uri .. " …" })
  local request_opts = { client_id = opts.client_id or vim.b[buf].tandem_client_id, bufnr = buf }
  lsp.request("tandem/document", { uri = uri }, function(err, result, client)
    if not api.nvim_buf_is_valid(buf) or not api.nvim_buf_is_loaded(buf) then
      return
    end
    if client then
      vim.b[buf].tandem_client_id = client.id
    end
    if not err and (type(result) ~= "table" or type(result.text) ~= "string") then
      err = "the server's answer has no text"
    end
    if err then
      vim.b[buf].tandem_error = err
      set_lines(buf, M.error_lines(uri, err))
    else
      vim.b[buf].tandem_error = nil
      vim.b[buf].tandem_title = result.title
      local lines = vim.split(result.text, "\n", { plain = true })
      if #lines > 1 and lines[#lines] == "" then
        lines[#lines] = nil
      end
      set_lines(buf, lines)
      local ft = type(result.filetype) == "string" and result.filetype or "markdown"
      if vim.bo[buf].filetype ~= ft then
        vim.bo[buf].filetype = ft
      end
    end
    if opts.on_load then
      opts.on_load(buf, err)
    end
  end, request_opts)
end

--- The BufReadCmd handler for `tandem://*`.
---@param buf integer
function M.read(buf)
  local uri = api.nvim_buf_get_name(buf)
  -- Not documents: output of the hub, made again rather than fetched.
  if uri:match("^tandem://prompt/") then
    return require("tandem.prompt.run").reload(buf)
  elseif uri == "tandem://inject" or uri == "tandem://inject.json" then
    return require("tandem.hub").reload_inject(buf)
  end
  local opts = M.pending[uri]
  M.pending[uri] = nil
  M.load(buf, opts)
end

---@param uri string
---@return integer?
local function find_buf(uri)
  for _, b in ipairs(api.nvim_list_bufs()) do
    if api.nvim_buf_get_name(b) == uri then
      return b
    end
  end
end

--- Opens a `tandem://` document in the current window. An already loaded one is read again.
---@param uri string
---@param opts? tandem.OpenOpts
function M.open(uri, opts)
  opts = opts or {}
  local buf = find_buf(uri)
  local ok, err
  if buf and api.nvim_buf_is_loaded(buf) then
    ok, err = pcall(vim.cmd.buffer, buf)
    if ok then
      M.load(buf, opts)
    end
  else
    M.pending[uri] = opts
    ok, err = pcall(vim.cmd.edit, vim.fn.fnameescape(uri))
    M.pending[uri] = nil
  end
  if not ok then
    vim.notify("tandem: cannot open " .. uri .. ": " .. tostring(err), vim.log.levels.ERROR)
  end
end

--- Moves the cursor of every window showing `buf` to the first line matching `pattern` (a Lua
--- pattern). Returns whether one matched.
---@param buf integer
---@param pattern string
---@return boolean
function M.jump_to(buf, pattern)
  for lnum, line in ipairs(api.nvim_buf_get_lines(buf, 0, -1, false)) do
    if line:match(pattern) then
      for _, win in ipairs(vim.fn.win_findbuf(buf)) do
        api.nvim_win_set_cursor(win, { lnum, 0 })
      end
      return true
    end
  end
  return false
end

--- Opens a task's document.
---@param id string
---@param opts? tandem.OpenOpts
function M.open_task(id, opts)
  M.open(M.task_uri(id), opts)
end

--- Opens a task's document at its "## Decisions" heading.
---@param id string
---@param opts? tandem.OpenOpts
function M.open_task_decisions(id, opts)
  opts = vim.deepcopy(opts or {})
  local after = opts.on_load
  opts.on_load = function(buf, err)
    if not err and not M.jump_to(buf, "^#+%s+Decisions") then
      vim.notify("tandem: this task has no decisions section", vim.log.levels.INFO)
    end
    if after then
      after(buf, err)
    end
  end
  M.open(M.task_uri(id), opts)
end

--- Opens a memory entry's document.
---@param id string
---@param opts? tandem.OpenOpts
function M.open_memory(id, opts)
  M.open(M.memory_uri(id), opts)
end

return M
