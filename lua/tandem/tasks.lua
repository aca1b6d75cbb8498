--- The workspace's workflows and their task trees (`tandem.tasks.list`): as markdown lines
--- for a float, or as quickfix items. The formatting functions are pure (data in, data out).
---
--- Shapes mirror crates/core/src/tasks/mod.rs: WorkflowRecord `{workflow_id, name, description, plan,
--- workspace, created_at, tasks}`; TaskRecord `{task_id, name, goal, status, started_at,
--- completed_at, duration_seconds, progress (0..100), last_message, outcome {summary, ...},
--- files_changed {added, modified, deleted, renamed}, subtasks, ...}`.

local api = vim.api
local lsp = require("tandem.lsp")
local state = require("tandem.state")

local M = {}

M.ICONS = { running = "●", success = "✓", partial_success = "◐", failed = "✗" }

--- "45s", "3m 20s", "1h 05m".
---@param seconds number?
---@return string?
function M.duration(seconds)
  seconds = tonumber(seconds)
  if not seconds then
    return nil
  end
  seconds = math.floor(seconds)
  if seconds < 60 then
    return seconds .. "s"
  elseif seconds < 3600 then
    return ("%dm %02ds"):format(seconds / 60, seconds % 60)
  end
  return ("%dh %02dm"):format(seconds / 3600, (seconds % 3600) / 60)
end

---@param v any
---@return boolean
local function present(v)
  return v ~= nil and v ~= vim.NIL and v ~= ""
end

--- The number of files a task changed.
---@param task table
---@return integer
local function files_count(task)
  local fc = task.files_changed
  if type(fc) ~= "table" then
    return 0
  end
  local n = 0
  for _, key in ipairs({ "added", "modified", "deleted" }) do
    n = n + (type(fc[key]) == "table" and #fc[key] or 0)
  end
  return n
end

--- One line about a task, without its name: "running · 75% · 2m 10s — Running tests".
---@param task table TaskRecord
---@return string
function M.summary(task)
  local parts = { ((task.status or "?"):gsub("_", " ")) }
  if task.status == "running" and present(task.progress) then
    parts[#parts + 1] = ("%d%%"):format(tonumber(task.progress) or 0)
  end
  local d = M.duration(task.duration_seconds)
  if d then
    parts[#parts + 1] = d
  end
  local files = files_count(task)
  if files > 0 then
    parts[#parts + 1] = files == 1 and "1 file" or (files .. " files")
  end
  local s = table.concat(parts, " · ")
  local outcome = type(task.outcome) == "table" and task.outcome or nil
  local note = task.status ~= "running" and outcome and present(outcome.summary) and outcome.summary
    or (present(task.last_message) and task.last_message or nil)
  if note then
    s = s .. " — " .. (note:gsub("\n.*", ""))
  end
  return s
end

--- Calls `fn(task, depth, workflow)` for every task, depth first, in the server's order.
---@param workflows table[]
---@param fn fun(task: table, depth: integer, workflow: table)
function M.walk(workflows, fn)
  local function visit(task, depth, wf)
    fn(task, depth, wf)
    for _, sub in ipairs(type(task.subtasks) == "table" and task.subtasks or {}) do
      visit(sub, depth + 1, wf)
    end
  end
  for _, wf in ipairs(workflows or {}) do
    for _, task in ipairs(type(wf.tasks) == "table" and wf.tasks or {}) do
      visit(task, 0, wf)
    end
  end
end

--- Every task id, in display order.
---@param workflows table[]?
---@return string[]
function M.ids(workflows)
  local ids = {}
  M.walk(workflows or {}, function(task)
    ids[#ids + 1] = task.task_id
  end)
  return ids
end

--- The markdown shown in the float, and the task id of each task line.
---@param workflows table[]
---@return string[] lines
---@return table<integer, string> ids line number (1-based) -> task id
function M.lines(workflows)
  local lines, ids = {}, {}
  if #workflows == 0 then
    return { "No workflows in this workspace yet.", "", "They appear when an agent starts a task through Tandem." },
      ids
  end
  for i, wf in ipairs(workflows) do
    if i > 1 then
      lines[#lines + 1] = ""
    end
    lines[#lines + 1] = "# " .. (wf.name or wf.workflow_id or "workflow")
    if present(wf.description) then
      lines[#lines + 1] = (wf.description:gsub("\n", " "))
    end
    local created = present(wf.created_at) and (wf.created_at:sub(1, 16):gsub("T", " ")) or "?"
    lines[#lines + 1] = ("`%s` · created %s"):format(wf.workflow_id or "?", created)
    lines[#lines + 1] = ""
    local any = false
    M.walk({ wf }, function(task, depth)
      any = true
      lines[#lines + 1] = ("%s- %s **%s** · %s `%s`"):format(
        string.rep("  ", depth),
        M.ICONS[task.status] or "·",
        task.name or "?",
        M.summary(task),
        task.task_id or "?"
      )
      ids[#lines] = task.task_id
    end)
    if not any then
      lines[#lines + 1] = "_no tasks yet_"
    end
    if type(wf.omitted_tasks) == "number" and wf.omitted_tasks > 0 then
      lines[#lines + 1] = ("_… %d earlier tasks not shown_"):format(wf.omitted_tasks)
    end
  end
  return lines, ids
end

--- Quickfix items: one per task, each opening `tandem://task/<id>`.
---@param workflows table[]
---@return table[]
function M.qf_items(workflows)
  local items = {}
  M.walk(workflows, function(task, depth, wf)
    items[#items + 1] = {
      -- No line number: the document loads asynchronously, after the jump.
      filename = "tandem://task/" .. task.task_id,
      type = task.status == "failed" and "E" or (task.status == "partial_success" and "W" or "I"),
      text = ("%s%s › %s · %s"):format(string.rep("  ", depth), wf.name or "?", task.name or "?", M.summary(task)),
      user_data = { task_id = task.task_id, workflow_id = wf.workflow_id },
    }
  end)
  return items
end

--- How many workflows, the newest, `:Tandem tasks` lists unless told.
M.LIMIT = 50

--- `tandem.tasks.list`: `cb(err, WorkflowRecord[])`. The list is kept for completion.
---@param cb tandem.Callback
---@param opts? { all?: boolean, limit?: integer, bufnr?: integer }
function M.fetch(cb, opts)
  opts = opts or {}
  local args = { all = opts.all == true, limit = opts.limit or M.LIMIT }
  lsp.execute("tandem.tasks.list", { args }, function(err, result, client, raw)
    if not err then
      result = type(result) == "table" and result or {}
      state.last_tasks = result
    end
    cb(err, result, client, raw)
  end, { bufnr = opts.bufnr })
end

--- Shows markdown lines in a centered float: q and <Esc> close it, <CR> on a task line
--- opens that task. Returns the float's buffer and window.
---@param lines string[]
---@param ids table<integer, string>
---@param client_id integer?
---@return integer buf
---@return integer win
function M.float(lines, ids, client_id)
  local buf, win = require("tandem.ui").float(lines, { title = "Tandem tasks", footer = "<CR> open · q close" })
  -- For tests and inspection: line number (as a string) -> task id.
  local by_line = vim.empty_dict()
  for lnum, id in pairs(ids) do
    by_line[tostring(lnum)] = id
  end
  vim.b[buf].tandem_task_ids = by_line
  local function close()
    if api.nvim_win_is_valid(win) then
      api.nvim_win_close(win, true)
    end
  end
  local map = { buffer = buf, nowait = true, silent = true }
  vim.keymap.set("n", "<CR>", function()
    local id = ids[api.nvim_win_get_cursor(win)[1]]
    if not id then
      return
    end
    close()
    require("tandem.document").open_task(id, { client_id = client_id })
  end, vim.tbl_extend("force", map, { desc = "Open the task" }))
  -- Start on the first task line.
  local first = vim.tbl_keys(ids)
  table.sort(first)
  if first[1] then
    api.nvim_win_set_cursor(win, { first[1], 0 })
  end
  return buf, win
end

--- Puts the tasks in the quickfix list (titled "Tandem tasks") and opens it.
---@param workflows table[]
function M.to_quickfix(workflows)
  local items = M.qf_items(workflows)
  vim.fn.setqflist({}, " ", { title = "Tandem tasks", items = items, context = { tandem = true } })
  if #items == 0 then
    vim.notify("tandem: no tasks in this workspace yet", vim.log.levels.INFO)
    return
  end
  vim.cmd("botright copen")
end

--- Lists the tasks: a float, or the quickfix list with `qf`. `on_result(err, workflows)` is
--- called after they are shown.
---@param opts? { qf?: boolean, all?: boolean, bufnr?: integer, on_result?: fun(err: string?, workflows: table[]?) }
function M.show(opts)
  opts = opts or {}
  M.fetch(function(err, workflows, client)
    if err then
      vim.notify("tandem: cannot list tasks: " .. err, vim.log.levels.ERROR)
    elseif opts.qf then
      M.to_quickfix(workflows)
    else
      local lines, ids = M.lines(workflows)
      M.float(lines, ids, client and client.id)
    end
    if opts.on_result then
      opts.on_result(err, workflows)
    end
  end, opts)
end

return M
