--- The knowledge base from the editor: search (vim.ui.select), and "save selection to
--- memory" (from `:'<,'>Tandem memory add` or the server's code action).
---
--- Result shapes mirror crates/core/src/memory/api.rs: SearchOutcome `{query, total, results, hint}` with
--- SearchResult `{id, type, title, score, snippet, tags}`; AddOutcome `{id, title, type,
--- created, similar_entries, tags, ...}`. Entry types: crates/core/src/memory/records.rs `EntryType`.

local api = vim.api
local lsp = require("tandem.lsp")
local state = require("tandem.state")

local M = {}

--- The entry types, in the order crates/core/src/memory/records.rs lists them.
M.TYPES = { "bug", "pattern", "decision", "pitfall", "config", "reference" }

--- The longest title an entry may have, in characters (MAX_TITLE_CHARS).
M.MAX_TITLE_CHARS = 100

--- How many results a search from the editor asks for (the server's maximum).
M.SEARCH_LIMIT = 20

local function notify_error(what, err)
  vim.notify(("tandem: %s: %s"):format(what, err), vim.log.levels.ERROR)
end

--- `tandem.memory.search`: `cb(err, SearchOutcome)`. The outcome is kept for completion.
---@param query string
---@param cb tandem.Callback
---@param opts? { limit?: integer, type?: string, bufnr?: integer }
function M.search(query, cb, opts)
  opts = opts or {}
  local args = { query = query, limit = opts.limit or M.SEARCH_LIMIT, type = opts.type }
  lsp.execute("tandem.memory.search", { args }, function(err, result, client, raw)
    if not err and type(result) == "table" then
      state.last_memory = result
    end
    cb(err, result, client, raw)
  end, { bufnr = opts.bufnr })
end

--- How a search result reads in the picker.
---@param r table SearchResult
---@return string
function M.format_result(r)
  return ("%s  [%s]  %.2f"):format(r.title or r.id or "?", r.type or "?", tonumber(r.score) or 0)
end

--- Searches and lets the user pick a result with vim.ui.select. `on_choice(result|nil)`
--- receives the chosen SearchResult; without it the choice opens `tandem://memory/<id>`.
---@param query string
---@param on_choice? fun(result: table?)
---@param opts? { bufnr?: integer }
function M.search_select(query, on_choice, opts)
  M.search(query, function(err, outcome, client)
    if err then
      notify_error("memory search failed", err)
      return on_choice and on_choice(nil)
    end
    local results = type(outcome) == "table" and outcome.results or {}
    if #results == 0 then
      vim.notify(("tandem: no memory entry matches “%s”"):format(query), vim.log.levels.INFO)
      return on_choice and on_choice(nil)
    end
    vim.ui.select(results, {
      prompt = ("Memory: %s (%d of %d)"):format(query, #results, outcome.total or #results),
      kind = "tandem.memory",
      format_item = M.format_result,
    }, function(choice)
      if on_choice then
        return on_choice(choice)
      end
      if choice then
        require("tandem.document").open_memory(choice.id, { client_id = client and client.id })
      end
    end)
  end, opts)
end

--- The ids of the last search's results (for `:Tandem memory show <Tab>`).
---@return string[]
function M.last_ids()
  local results = state.last_memory and state.last_memory.results or {}
  return vim.tbl_map(function(r)
    return r.id
  end, results)
end

--- The text an LSP range covers in a loaded buffer, as lines.
---@param buf integer
---@param range lsp.Range
---@param encoding string 'utf-8'|'utf-16'|'utf-32'
---@return string[]
function M.range_text(buf, range, encoding)
  if not api.nvim_buf_is_loaded(buf) then
    return {}
  end
  local function byte(pos)
    local line = api.nvim_buf_get_lines(buf, pos.line, pos.line + 1, false)[1]
    if not line then
      return nil
    end
    local ok, col = pcall(vim.str_byteindex, line, encoding, pos.character, false)
    return ok and math.min(col, #line) or #line
  end
  local last = api.nvim_buf_line_count(buf) - 1
  local s, e = range.start, range["end"]
  local sline, eline = math.min(s.line, last), math.min(e.line, last)
  local scol, ecol = byte({ line = sline, character = s.character }), nil
  if e.line > last then
    ecol = #(api.nvim_buf_get_lines(buf, last, last + 1, false)[1] or "")
  else
    ecol = byte({ line = eline, character = e.character })
  end
  local ok, lines = pcall(api.nvim_buf_get_text, buf, sline, scol or 0, eline, ecol or 0, {})
  return ok and lines or {}
end

--- The default title: the first non-blank line of the text, trimmed, at most 100 characters.
---@param lines string[]
---@return string
function M.default_title(lines)
  for _, l in ipairs(lines) do
    local t = vim.trim(l)
    if t ~= "" then
      return vim.fn.strcharpart(t, 0, M.MAX_TITLE_CHARS)
    end
  end
  return ""
end

---@class tandem.SaveArgs
---@field uri string
---@field range lsp.Range
---@field type? string
---@field title? string
---@field tags? string[]

--- "Save selection to memory": asks for what `args` lacks (the type with vim.ui.select, the
--- title with vim.ui.input, defaulting to the selection's first line), then executes
--- `tandem.memory.saveSelection` on the server and notifies the new id. `on_done(err,
--- AddOutcome)` is called at the end (err "cancelled" when the user backs out).
---@param args tandem.SaveArgs
---@param opts? { client_id?: integer, on_done?: fun(err: string?, outcome: table?) }
function M.save_selection(args, opts)
  opts = opts or {}
  local done = opts.on_done or function() end
  if type(args) ~= "table" or type(args.uri) ~= "string" or type(args.range) ~= "table" then
    notify_error("cannot save to memory", "the command needs {uri, range}")
    return done("bad arguments")
  end
  local buf = vim.uri_to_bufnr(args.uri)
  local client = opts.client_id and vim.lsp.get_client_by_id(opts.client_id) or lsp.resolve_client(buf)

  local function send(entry_type, title)
    local full = vim.deepcopy(args)
    full.type = entry_type
    full.title = (title and title ~= "") and title or nil
    lsp.execute("tandem.memory.saveSelection", { full }, function(err, outcome)
      if err then
        notify_error("could not save to memory", err)
        return done(err)
      end
      outcome = type(outcome) == "table" and outcome or {}
      local msg = outcome.created == false and "already in memory as %s “%s”"
        or "saved to memory as %s “%s”"
      msg = msg:format(outcome.id or "?", outcome.title or full.title or "")
      local similar = outcome.similar_entries and #outcome.similar_entries or 0
      if similar > 0 then
        msg = msg .. (" (%d similar: :Tandem memory show %s)"):format(similar, outcome.similar_entries[1].id)
      end
      vim.notify("tandem: " .. msg, vim.log.levels.INFO)
      done(nil, outcome)
    end, { client_id = client and client.id, bufnr = buf })
  end

  local function ask_title(entry_type)
    if args.title ~= nil then
      return send(entry_type, args.title)
    end
    local encoding = client and client.offset_encoding or "utf-16"
    local default = M.default_title(M.range_text(buf, args.range, encoding))
    vim.ui.input({ prompt = "Title: ", default = default }, function(title)
      if title == nil then
        return done("cancelled")
      end
      send(entry_type, vim.trim(title))
    end)
  end

  if args.type and vim.list_contains(M.TYPES, args.type) then
    return ask_title(args.type)
  end
  vim.ui.select(M.TYPES, { prompt = "Memory type:", kind = "tandem.memory_type" }, function(choice)
    if not choice then
      return done("cancelled")
    end
    ask_title(choice)
  end)
end

--- The LSP range of lines `line1..line2` (1-based, inclusive) of `buf`, or of the exact
--- characterwise visual selection when the last visual mode was `v` and its marks are those
--- lines.
---@param buf integer
---@param line1 integer
---@param line2 integer
---@param encoding string
---@return lsp.Range
function M.selection_range(buf, line1, line2, encoding)
  local lines = api.nvim_buf_get_lines(buf, line1 - 1, line2, false)
  local first, last = lines[1] or "", lines[#lines] or ""
  local scol, ecol = 0, #last -- byte offsets, end exclusive
  local vs, ve = api.nvim_buf_get_mark(buf, "<"), api.nvim_buf_get_mark(buf, ">")
  if buf == api.nvim_get_current_buf() and vim.fn.visualmode() == "v" and vs[1] == line1 and ve[1] == line2 then
    scol = math.min(vs[2], #first)
    if ve[2] < #last then
      -- The mark is on the last character's first byte; the range ends after it.
      ecol = ve[2] + 1 + vim.str_utf_end(last, ve[2] + 1)
    end
  end
  local function units(line, col)
    return vim.str_utfindex(line, encoding, col, false)
  end
  return {
    start = { line = line1 - 1, character = units(first, scol) },
    ["end"] = { line = line2 - 1, character = units(last, ecol) },
  }
end

--- `:'<,'>Tandem memory add`: saves lines `line1..line2` of `buf` (the exact selection if it
--- was characterwise) to memory, asking for the type and title.
---@param opts { bufnr?: integer, line1: integer, line2: integer, type?: string, title?: string, on_done?: fun(err: string?, outcome: table?) }
function M.add_selection(opts)
  local buf = (opts.bufnr == nil or opts.bufnr == 0) and api.nvim_get_current_buf() or opts.bufnr
  local client = lsp.client(buf)
  if not client then
    notify_error(
      "cannot save to memory",
      "this buffer is not attached to tandem (not a file of a workspace?)"
    )
    return opts.on_done and opts.on_done("not attached")
  end
  local range = M.selection_range(buf, opts.line1, opts.line2, client.offset_encoding or "utf-16")
  M.save_selection({
    uri = vim.uri_from_bufnr(buf),
    range = range,
    type = opts.type,
    title = opts.title,
  }, { client_id = client.id, on_done = opts.on_done })
end

return M
