--- `:checkhealth tandem`. The only place that waits on a process (briefly, with a timeout):
--- checkhealth is run on request and may block for a moment.

local M = {}

local h = vim.health
local TIMEOUT_MS = 3000

--- Runs the binary with `args` (in `cwd`) and waits at most TIMEOUT_MS.
---@param base string[]
---@param args string[]
---@param cwd? string
---@return vim.SystemCompleted? result
---@return string? err
local function run(base, args, cwd)
  local cmd = vim.list_extend(vim.deepcopy(base), args)
  local ok, obj = pcall(vim.system, cmd, { text = true, cwd = cwd })
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

--- The workspace's MCP servers: `tandem.servers` from the client serving `buf` when one runs,
--- else `tandem servers --json` in the buffer's workspace (or the cwd).
---@param base string[]
---@param buf integer?
---@return table? report
---@return string? err
local function servers_report(base, buf)
  local lsp = require("tandem.lsp")
  local client = lsp.resolve_client(buf)
  if client then
    local answered, report, err = false, nil, nil
    require("tandem.hub").fetch_servers(function(e, r)
      answered, report, err = true, r, e
    end, { client_id = client.id })
    vim.wait(TIMEOUT_MS, function()
      return answered
    end, 20)
    if not answered then
      return nil, ("`tandem.servers` did not answer within %d ms"):format(TIMEOUT_MS)
    end
    return type(report) == "table" and report or nil, err or (type(report) ~= "table" and "no report" or nil)
  end
  local cwd = buf and vim.api.nvim_buf_is_valid(buf) and lsp.root_for(buf) or vim.uv.cwd()
  local res, err = run(base, { "servers", "--json" }, cwd)
  if not res then
    return nil, err
  elseif res.code ~= 0 then
    return nil, ("`tandem servers --json` exited with %d: %s"):format(res.code, vim.trim(res.stderr or ""))
  end
  local ok, decoded = pcall(vim.json.decode, res.stdout or "", { luanil = { object = true, array = true } })
  if not ok or type(decoded) ~= "table" then
    return nil, "cannot read `tandem servers --json`"
  end
  return decoded
end

--- The hub section: how many servers, which are not ready and why, an untrusted `.mcp.json`.
---@param base string[]
---@param buf integer?
local function check_hub(base, buf)
  h.start("tandem: MCP servers (the hub)")
  local report, err = servers_report(base, buf)
  if not report then
    h.warn("cannot list the MCP servers: " .. tostring(err))
    return
  end
  local hub = require("tandem.hub")
  local servers = type(report.servers) == "table" and report.servers or {}
  for _, e in ipairs(type(report.errors) == "table" and report.errors or {}) do
    h.error("config error: " .. tostring(e), { "Fix the file; it is read again when it changes" })
  end
  if #servers == 0 then
    h.info(("no MCP servers for %s (add them to %s)"):format(
      tostring(report.workspace or "this workspace"),
      table.concat(type(report.files) == "table" and report.files or {}, " or ")
    ))
    return
  end
  local ready, fine, untrusted, file = 0, 0, 0, nil
  for _, s in ipairs(servers) do
    if s.state == "ready" or s.state == "idle" or s.state == "disabled" then
      fine = fine + 1
    end
    if s.state == "ready" then
      ready = ready + 1
    elseif s.state == "untrusted" then
      untrusted = untrusted + 1
      file = file or (type(s.origin) == "table" and s.origin.file or nil)
    end
  end
  local summary = ("%d MCP server(s) for %s, %d ready"):format(#servers, tostring(report.workspace or "?"), ready)
  if fine == #servers then
    h.ok(summary)
  else
    h.info(summary) -- the ones that are not fine are warned about below
  end
  for _, s in ipairs(servers) do
    local label = hub.state_label(s)
    local why = type(s.last_error) == "string" and s.last_error ~= "" and (": " .. s.last_error:gsub("\n.*", "")) or ""
    if s.state == "ready" then
      h.info(("%s: ready, %s prompt(s), %s tool(s)"):format(s.name or "?", s.prompts or 0, s.tools or 0))
    elseif s.state == "untrusted" then -- reported once below
    elseif s.state == "idle" or s.state == "disabled" or s.state == "starting" then
      h.info(("%s: %s"):format(s.name or "?", label))
    elseif s.state == hub.NEEDS_SIGN_IN then
      h.warn(("%s: %s"):format(s.name or "?", label), {
        ("Sign in with :Tandem signin %s (or `s` on its row in :Tandem servers), then approve in the browser"):format(
          s.name or "NAME"
        ),
      })
    else
      h.warn(("%s: %s%s"):format(s.name or "?", label, why), { ":Tandem servers shows them all; :Tandem log has more" })
    end
  end
  if untrusted > 0 then
    h.warn(("%s is not trusted: its %d server(s) do not run"):format(file or ".mcp.json", untrusted), {
      "Review what it runs and trust it with :Tandem trust (or `tandem trust` in the workspace)",
    })
  end
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
      "lazy.nvim runs the plugin's build.lua on install and update, which installs the binary into "
        .. config.installed_bin
        .. " (`:Lazy build tandem` runs it again)",
      "Install it now with :lua require('tandem.build').run() (the release's binary at a release tag, else `cargo build --release`)",
      "or install tandem and put it on PATH, or give its path: require('tandem').setup({ cmd = '/path/to/tandem' })",
    })
    return
  end
  local how
  if path == config.installed_bin then
    how = "installed by the plugin's build step"
  elseif cfg.cmd == config.schema.cmd.default then
    how = "`tandem` on PATH"
  else
    how = "the `cmd` option"
  end
  h.ok(("using %s (%s)"):format(path, how))
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

  local buf = origin_buf()
  check_hub(base, buf)

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
