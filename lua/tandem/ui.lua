--- Display helpers shared by the modules: a centered float for short reports, and named
--- scratch buffers (`tandem://prompt/...`, `tandem://inject`) for output the user may keep.

local api = vim.api

local M = {}

---@class tandem.FloatOpts
---@field title? string Shown in the border.
---@field footer? string Shown in the border (default: "q close").
---@field filetype? string Default "markdown".

--- Shows lines in a centered, read-only float; q and <Esc> close it. Returns its buffer and
--- window.
---@param lines string[]
---@param opts? tandem.FloatOpts
---@return integer buf
---@return integer win
function M.float(lines, opts)
  opts = opts or {}
  local buf = api.nvim_create_buf(false, true)
  api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
  vim.bo[buf].bufhidden = "wipe"
  vim.bo[buf].filetype = opts.filetype or "markdown"
  local width = 20
  for _, l in ipairs(lines) do
    width = math.max(width, vim.fn.strdisplaywidth(l))
  end
  width = math.min(width + 2, math.max(20, vim.o.columns - 8))
  local height = math.min(math.max(#lines, 1), math.max(3, vim.o.lines - 8))
  local win_config = {
    relative = "editor",
    width = width,
    height = height,
    row = math.max(0, math.floor((vim.o.lines - height) / 2) - 1),
    col = math.floor((vim.o.columns - width) / 2),
    style = "minimal",
    border = vim.o.winborder ~= "" and vim.o.winborder or "rounded",
  }
  if win_config.border ~= "none" then -- a title needs a border
    if opts.title then
      win_config.title = " " .. opts.title .. " "
      win_config.title_pos = "center"
    end
    win_config.footer = " " .. (opts.footer or "q close") .. " "
    win_config.footer_pos = "center"
  end
  local win = api.nvim_open_win(buf, true, win_config)
  vim.wo[win].conceallevel = 2
  vim.wo[win].wrap = false
  vim.wo[win].cursorline = true
  local function close()
    if api.nvim_win_is_valid(win) then
      api.nvim_win_close(win, true)
    end
  end
  local map = { buffer = buf, nowait = true, silent = true, desc = "Close" }
  vim.keymap.set("n", "q", close, map)
  vim.keymap.set("n", "<Esc>", close, map)
  return buf, win
end

--- The buffer named `name`, or nil.
---@param name string
---@return integer?
function M.find_buf(name)
  for _, b in ipairs(api.nvim_list_bufs()) do
    if api.nvim_buf_get_name(b) == name then
      return b
    end
  end
end

---@class tandem.ScratchOpts
---@field filetype? string Default "markdown".
---@field modifiable? boolean Default true: the text is the user's to copy and edit.
---@field show? boolean Default true: show it (in a window that shows it already, else a split).

--- Fills the scratch buffer `name` (creating it, or reusing the one of that name) with
--- `lines`: 'buftype' nofile, no swapfile, 'bufhidden' hide (it stays until wiped). Shows it
--- unless `show` is false. Returns the buffer.
---@param name string
---@param lines string[]
---@param opts? tandem.ScratchOpts
---@return integer buf
function M.scratch(name, lines, opts)
  opts = opts or {}
  local buf = M.find_buf(name)
  if buf and not api.nvim_buf_is_loaded(buf) then
    -- Unloaded (`:bdelete`): start over rather than load it, which would read it by name.
    pcall(api.nvim_buf_delete, buf, { force = true })
    buf = nil
  end
  if not buf then
    buf = api.nvim_create_buf(true, false)
    local bo = vim.bo[buf]
    bo.buftype = "nofile"
    bo.swapfile = false
    bo.bufhidden = "hide"
    api.nvim_buf_set_name(buf, name)
  end
  M.set_lines(buf, lines, opts.modifiable ~= false)
  local ft = opts.filetype or "markdown"
  if vim.bo[buf].filetype ~= ft then
    vim.bo[buf].filetype = ft
  end
  if opts.show ~= false then
    M.show(buf)
  end
  return buf
end

--- Replaces a buffer's text, leaving it unmodified and `modifiable` as given.
---@param buf integer
---@param lines string[]
---@param modifiable? boolean
function M.set_lines(buf, lines, modifiable)
  local bo = vim.bo[buf]
  bo.modifiable = true
  api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  bo.modifiable = modifiable ~= false
  bo.modified = false
end

--- Makes `buf` visible and current: the window of this tab page that shows it, else a new
--- split below the current window (a float is never split: the buffer goes to the previous
--- window instead).
---@param buf integer
function M.show(buf)
  for _, win in ipairs(api.nvim_tabpage_list_wins(0)) do
    if api.nvim_win_get_buf(win) == buf then
      api.nvim_set_current_win(win)
      return
    end
  end
  if api.nvim_win_get_config(0).relative ~= "" then
    pcall(vim.cmd, "wincmd p")
  end
  vim.cmd("belowright split")
  api.nvim_win_set_buf(0, buf)
end

--- Lines of text (a string split on newlines; a trailing newline adds no empty line).
---@param text string
---@return string[]
function M.split_lines(text)
  local lines = vim.split(text, "\n", { plain = true })
  if #lines > 1 and lines[#lines] == "" then
    lines[#lines] = nil
  end
  return lines
end

--- Asks about each item in turn with vim.ui.input: the next question once the previous is
--- answered (and its window gone), never waiting. `opts_of(item)` gives the input's options,
--- `on_answer(item, value)` takes each answer; `done(true)` after the last, `done(false)` as
--- soon as a question is cancelled.
---@param items table[]
---@param opts_of fun(item: table): table
---@param on_answer fun(item: table, value: string)
---@param done fun(answered: boolean)
function M.input_each(items, opts_of, on_answer, done)
  local function step(i)
    local item = items[i]
    if not item then
      return done(true)
    end
    vim.ui.input(opts_of(item), function(value)
      if value ~= nil then
        on_answer(item, value)
      end
      vim.schedule(function()
        if value == nil then
          done(false)
        else
          step(i + 1)
        end
      end)
    end)
  end
  step(1)
end

--- Whether a value is there: not nil, vim.NIL or the empty string.
---@param v any
---@return boolean
function M.present(v)
  return v ~= nil and v ~= vim.NIL and v ~= ""
end

return M
