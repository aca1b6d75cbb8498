--- Showing a prompt's messages: as markdown in its `tandem://prompt/<server>:<prompt>`
--- buffer, or as plain text inserted where the run was asked (an extmark keeps the place
--- while arguments are asked for).

local api = vim.api
local state = require("tandem.state")
local ui = require("tandem.ui")

local M = {}

--- Where insertions wait for their text (extmarks follow edits made meanwhile).
local ns = api.nvim_create_namespace("tandem.prompt")

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
function M.cursor_target(buf)
  local row, col = unpack(api.nvim_win_get_cursor(0))
  local text = api.nvim_buf_get_lines(buf, row - 1, row, false)[1] or ""
  if text ~= "" and col < #text and api.nvim_get_mode().mode:sub(1, 1) ~= "i" then
    local chars = vim.fn.charidx(text, col)
    local after = chars >= 0 and vim.fn.byteidx(text, chars + 1) or -1
    col = after >= 0 and after or #text
  end
  return { buf = buf, mark = api.nvim_buf_set_extmark(buf, ns, row - 1, math.min(col, #text), {}), below = false }
end

--- Where the code action inserts: as lines below `line` (0-based, clamped) of `buf`.
---@param buf integer
---@param line integer
---@return tandem.InsertTarget
function M.below_target(buf, line)
  local last = api.nvim_buf_line_count(buf) - 1
  return { buf = buf, mark = api.nvim_buf_set_extmark(buf, ns, math.min(line, last), 0, {}), below = true }
end

--- Forgets a target nothing will be inserted at.
---@param target tandem.InsertTarget
function M.drop_target(target)
  pcall(api.nvim_buf_del_extmark, target.buf, ns, target.mark)
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

return M
