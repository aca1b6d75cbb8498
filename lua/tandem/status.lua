--- The server's status (`tandem/status`), the daemon's (`tandem daemon status --json`), the log
--- file, and dismissing the review warnings.

local lsp = require("tandem.lsp")
local state = require("tandem.state")
local config = require("tandem.config")

local M = {}

--- `tandem/status`: `cb(err, {version, pid, home, log_file, workspace, daemon, focus_task})`.
--- The answer is kept per client (`state().status`).
---@param cb tandem.Callback
---@param opts? tandem.RequestOpts
function M.fetch(cb, opts)
  lsp.request("tandem/status", vim.empty_dict(), function(err, result, client, raw)
    if not err and client and type(result) == "table" then
      state.status[client.id] = result
    end
    cb(err, result, client, raw)
  end, opts)
end

---@param v any
local function show(v)
  if v == nil or v == vim.NIL then
    return "none"
  end
  return tostring(v)
end

--- The status as lines of text.
---@param s table
---@return string[]
function M.lines(s)
  return {
    ("tandem %s, pid %s, %s"):format(
      show(s.version),
      show(s.pid),
      s.daemon and "through the daemon" or "standalone"
    ),
    "workspace:  " .. show(s.workspace),
    "home:       " .. show(s.home),
    "log:        " .. show(s.log_file),
    "focus task: " .. show(s.focus_task),
  }
end

--- `:Tandem status`: a notification with the status.
---@param opts? tandem.RequestOpts
function M.show(opts)
  M.fetch(function(err, result)
    if err then
      vim.notify("tandem: no status: " .. err, vim.log.levels.ERROR)
      return
    end
    vim.notify(table.concat(M.lines(result), "\n"), vim.log.levels.INFO, { title = "Tandem" })
  end, opts)
end

--- Runs the binary with `args`, asynchronously: `cb(err, stdout)`. A missing binary is an
--- error message, not a raised error.
---@param args string[]
---@param cb fun(err: string?, stdout: string?)
---@param timeout_ms? integer
function M.run(args, cb, timeout_ms)
  local cfg = state.config or config.resolve({})
  local cmd = vim.list_extend(config.base_cmd(cfg), args)
  local ok, err = pcall(vim.system, cmd, { text = true, timeout = timeout_ms or 5000 }, function(out)
    vim.schedule(function()
      if out.code ~= 0 then
        local why = vim.trim(out.stderr or "")
        cb(("`%s` exited with %d%s"):format(table.concat(cmd, " "), out.code, why ~= "" and (": " .. why) or ""))
      else
        cb(nil, out.stdout or "")
      end
    end)
  end)
  if not ok then
    vim.schedule(function()
      cb(("cannot run `%s`: %s"):format(cmd[1], tostring(err)))
    end)
  end
end

--- `tandem daemon status --json`: `cb(err, {ok, running?, version?, pid?, clients?,
--- uptime_seconds?})`.
---@param cb fun(err: string?, status: table?)
function M.daemon(cb)
  M.run({ "daemon", "status", "--json" }, function(err, out)
    if err then
      return cb(err)
    end
    local ok, decoded = pcall(vim.json.decode, out, { luanil = { object = true, array = true } })
    if not ok or type(decoded) ~= "table" then
      return cb("cannot read `tandem daemon status --json`: " .. tostring(out))
    end
    cb(nil, decoded)
  end)
end

--- The data dir the binary uses when nothing says otherwise (mirrors crates/core/src/config.rs:
--- `$TANDEM_HOME`, else the platform data dir of the `directories` crate).
---@return string
function M.default_home()
  local env = vim.env.TANDEM_HOME
  if env and env ~= "" then
    return env
  end
  local sys = vim.uv.os_uname().sysname
  if sys == "Darwin" then
    return vim.fs.joinpath(vim.env.HOME or "~", "Library", "Application Support", "tandem")
  elseif sys:find("Windows") then
    return vim.fs.joinpath(vim.env.APPDATA or "", "tandem", "data")
  end
  local xdg = vim.env.XDG_DATA_HOME
  local base = (xdg and xdg ~= "") and xdg or vim.fs.joinpath(vim.env.HOME or "~", ".local", "share")
  return vim.fs.joinpath(base, "tandem")
end

--- The log file: `log_file` of `tandem/status` when a client answers; else what `tandem
--- daemon status --json` says (`log_file`, or `home`), else `<data dir>/logs/tandem.log`.
--- `cb(path, source)`.
---@param cb fun(path: string, source: string)
---@param opts? tandem.RequestOpts
function M.log_path(cb, opts)
  local function from_daemon()
    M.daemon(function(err, d)
      if not err and d then
        if type(d.log_file) == "string" then
          return cb(d.log_file, "daemon")
        elseif type(d.home) == "string" then
          return cb(vim.fs.joinpath(d.home, "logs", "tandem.log"), "daemon")
        end
      end
      cb(vim.fs.joinpath(M.default_home(), "logs", "tandem.log"), "default")
    end)
  end
  if #lsp.clients() == 0 then
    return from_daemon()
  end
  M.fetch(function(err, s)
    if not err and type(s) == "table" and type(s.log_file) == "string" then
      return cb(s.log_file, "server")
    end
    from_daemon()
  end, opts)
end

--- `:Tandem log`: opens the log file at its end.
---@param opts? tandem.RequestOpts
function M.open_log(opts)
  M.log_path(function(path)
    if not vim.uv.fs_stat(path) then
      vim.notify("tandem: no log file at " .. path, vim.log.levels.WARN)
      return
    end
    local ok, err = pcall(vim.cmd.edit, vim.fn.fnameescape(path))
    if not ok then
      vim.notify("tandem: cannot open the log: " .. tostring(err), vim.log.levels.ERROR)
      return
    end
    vim.bo.readonly = true
    vim.cmd("normal! G")
  end, opts)
end

--- `tandem.diagnostics.dismiss`: `cb(err, {dismissed})`, notifying the outcome.
---@param cb? tandem.Callback
---@param opts? tandem.RequestOpts
function M.dismiss(cb, opts)
  lsp.execute("tandem.diagnostics.dismiss", {}, function(err, result, client, raw)
    if err then
      vim.notify("tandem: cannot dismiss: " .. err, vim.log.levels.ERROR)
    else
      local id = type(result) == "table" and result.dismissed or nil
      if id and id ~= vim.NIL then
        vim.notify("tandem: dismissed the review warnings of task " .. id, vim.log.levels.INFO)
      else
        vim.notify("tandem: nothing to dismiss", vim.log.levels.INFO)
      end
    end
    if cb then
      cb(err, result, client, raw)
    end
  end, opts)
end

return M
