--- `:checkhealth tandem`. The only place that waits on a process (briefly, with a timeout):
--- checkhealth is run on request and may block for a moment.

local M = {}

local h = vim.health
local TIMEOUT_MS = 3000

--- Runs the binary with `args` and waits at most TIMEOUT_MS.
---@param base string[]
---@param args string[]
---@return vim.SystemCompleted? result
---@return string? err
local function run(base, args)
  local cmd = vim.list_extend(vim.deepcopy(base), args)
  local ok, obj = pcall(vim.system, cmd, { text = true })
  if not ok then
    return nil, tostring(obj)
  end
  local res = obj:wait(TIMEOUT_MS)
  if res.signal ~= 0 and res.code ~= 0 and (res.stdout or "") == "" then
    return nil, ("`%s` did not answer within %d ms"):format(table.concat(cmd, " "), TIMEOUT_MS)
  end
  return res
end

--- The buffer :checkhealth was run from (checkhealth opens its own buffer first).
---@return integer?
local function origin_buf()
  local api = vim.api
  local prev_tab = vim.fn.tabpagenr("#")
  if prev_tab > 0 and prev_tab ~= vim.fn.tabpagenr() then
    local buflist = vim.fn.tabpagebuflist(prev_tab)
    local buf = buflist[vim.fn.tabpagewinnr(prev_tab)]
    if buf then
      return buf
    end
  end
  local prev_win = vim.fn.win_getid(vim.fn.winnr("#"))
  if prev_win ~= 0 and prev_win ~= api.nvim_get_current_win() then
    return api.nvim_win_get_buf(prev_win)
  end
  local alt = vim.fn.bufnr("#")
  return alt > 0 and alt or nil
end

function M.check()
  local state = require("tandem.state")
  local config = require("tandem.config")
  local cfg = state.config

  h.start("tandem: Neovim and setup")
  local v = vim.version()
  local version = ("%d.%d.%d"):format(v.major, v.minor, v.patch)
  if vim.fn.has("nvim-0.11") == 1 then
    h.ok("Neovim " .. version)
  else
    h.error("Neovim " .. version .. ": tandem needs 0.11 or later")
  end
  if cfg then
    h.ok(("setup() called (%d time%s)"):format(state.setup_calls, state.setup_calls == 1 and "" or "s"))
    h.info(("command: `%s`; root markers: %s; code lenses: %s; progress: %s"):format(
      table.concat(config.lsp_cmd(cfg), " "),
      vim.inspect(cfg.root_markers),
      cfg.codelens and "on" or "off",
      cfg.progress
    ))
  else
    h.warn("setup() has not been called: no buffer attaches", {
      "Add require('tandem').setup({}) to your config (see :help tandem-setup)",
    })
    cfg = config.resolve({})
  end

  h.start("tandem: binary")
  local base = config.base_cmd(cfg)
  local path = vim.fn.executable(base[1]) == 1 and vim.fn.exepath(base[1]) or nil
  if not path then
    h.error(("`%s` not found or not executable"):format(base[1]), {
      "Install tandem and put it on PATH",
      "or give its path: require('tandem').setup({ cmd = '/path/to/tandem' })",
    })
    return
  end
  h.ok("found: " .. path)
  local binary_version
  local res, err = run(base, { "--version" })
  if not res then
    h.error("`--version` failed: " .. err)
  elseif res.code ~= 0 then
    h.error(("`--version` exited with %d: %s"):format(res.code, vim.trim(res.stderr or "")))
  else
    binary_version = vim.trim(res.stdout or ""):match("(%d+%.%d+%.%d+[%w.+-]*)")
    h.ok("version: " .. vim.trim(res.stdout or ""))
  end
  res, err = run(base, { "lsp", "--help" })
  if res and res.code == 0 then
    h.ok("`tandem lsp` is available")
  else
    h.error("this tandem has no `lsp` subcommand: upgrade it", { err or vim.trim(res and res.stderr or "") })
  end

  h.start("tandem: daemon")
  res, err = run(base, { "daemon", "status", "--json" })
  local daemon ---@type table?
  if res and res.code == 0 then
    local ok, decoded = pcall(vim.json.decode, res.stdout or "")
    daemon = ok and type(decoded) == "table" and decoded or nil
  end
  if not daemon then
    h.warn("cannot read `tandem daemon status --json`: " .. (err or vim.trim(res and (res.stderr or res.stdout) or "")))
  elseif daemon.pid then
    h.ok(("running: pid %s, version %s, %s client(s), up %ss"):format(
      daemon.pid,
      daemon.version or "?",
      daemon.clients or "?",
      daemon.uptime_seconds or "?"
    ))
    if binary_version and daemon.version and daemon.version ~= binary_version then
      h.warn(("the daemon is version %s, the binary %s"):format(daemon.version, binary_version), {
        "A client of the new version replaces it once nobody uses it",
        "or stop it now: tandem daemon stop",
      })
    end
  elseif cfg.standalone then
    h.info("not running (not needed: standalone is set)")
  else
    h.info("not running: the first editor or agent to connect starts it")
  end

  h.start("tandem: log")
  local lsp = require("tandem.lsp")
  if next(state.status) == nil and #lsp.clients() > 0 then
    local answered = false
    require("tandem.status").fetch(function()
      answered = true
    end)
    vim.wait(TIMEOUT_MS, function()
      return answered
    end, 20)
  end
  local log
  for _, s in pairs(state.status) do
    log = log or s.log_file
  end
  log = log
    or (daemon and daemon.log_file)
    or (daemon and daemon.home and vim.fs.joinpath(daemon.home, "logs", "tandem.log"))
    or vim.fs.joinpath(require("tandem.status").default_home(), "logs", "tandem.log")
  if vim.uv.fs_stat(log) then
    h.ok("log file: " .. log)
  else
    h.warn("no log file yet at " .. log, { "It is created when tandem first runs" })
  end

  h.start("tandem: clients")
  local clients = lsp.clients()
  if #clients == 0 then
    h.info("no tandem client is running (one starts when a file of a workspace is opened)")
  end
  for _, c in ipairs(clients) do
    local info = c.server_info or {}
    h.info(("client %d: root %s, %d buffer(s), server %s %s"):format(
      c.id,
      c.root_dir or "?",
      vim.tbl_count(c.attached_buffers),
      info.name or "?",
      info.version or ""
    ))
  end
  local buf = origin_buf()
  if buf and vim.api.nvim_buf_is_valid(buf) then
    local name = vim.api.nvim_buf_get_name(buf)
    name = name ~= "" and vim.fn.fnamemodify(name, ":~:.") or ("buffer " .. buf)
    local c = lsp.client(buf)
    if c then
      h.ok(("%s is attached (client %d)"):format(name, c.id))
    elseif lsp.root_for(buf) then
      h.warn(name .. " is in a workspace but not attached", { "Reopen it with :edit, or see :Tandem log" })
    else
      h.info(name .. " is not attached: not a file buffer under a root marker " .. vim.inspect(cfg.root_markers))
    end
  end
end

return M
