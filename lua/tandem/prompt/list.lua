--- The downstream prompts a tandem client lists (`tandem.prompts.list`, shapes in
--- prompt/init.lua), kept per client for completion and the argument questions; which
--- buffers are prompt buffers; and a line as the server takes it.

local api = vim.api
local lsp = require("tandem.lsp")
local state = require("tandem.state")

local M = {}

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

--- The prompt of `prompts` (a PromptInfo list) whose command is `command`.
---@param prompts table[]?
---@param command string
---@return table?
function M.find(prompts, command)
  for _, p in ipairs(type(prompts) == "table" and prompts or {}) do
    if type(p) == "table" and p.command == command then
      return p
    end
  end
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

return M
