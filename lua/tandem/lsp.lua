--- The LSP client: when a buffer attaches, which client serves a request, and the async
--- request helpers every other module goes through.
---
--- How buffers attach, and why not `vim.lsp.enable()`: Tandem serves every file buffer of a
--- workspace, whatever its filetype. `vim.lsp.enable()` starts clients from the `FileType`
--- event only, which never fires for a buffer with no filetype (LICENSE, notes, unknown
--- extensions), and with no root marker it would share one rootless client among all such
--- buffers. So `setup()` calls `vim.lsp.start()` itself from BufReadPost/BufNewFile/
--- BufFilePost, with `root_dir` = the buffer's root (by `root_markers`, resolved through
--- symlinks) and a `reuse_client` that matches on name and root only: exactly one client per
--- workspace root, and none for a buffer outside every workspace.
---
--- Contract: docs/lsp-extensions.md. Nothing here blocks: requests take callbacks, and a
--- request made while the client is still initializing waits on a timer, not on the UI.

local api = vim.api
local state = require("tandem.state")
local config = require("tandem.config")

local M = {}

--- The client name, as `vim.lsp.get_clients({ name = ... })` sees it.
M.name = "tandem"

--- How long a request waits for a starting client to finish `initialize`.
local READY_TIMEOUT_MS = 15000
local READY_POLL_MS = 50

---@return boolean
local function lsp_loaded()
  return package.loaded["vim.lsp"] ~= nil
end

--- The workspace root of a buffer Tandem should attach to, or nil: loaded, a normal file
--- buffer (`buftype` empty: no terminal, help, quickfix or nofile buffer), not a help file,
--- named, not a URL-like name (`tandem://`, `fugitive://`, `oil://`...), under a root marker.
---@param buf integer
---@return string?
function M.root_for(buf)
  if not state.config or not api.nvim_buf_is_valid(buf) or not api.nvim_buf_is_loaded(buf) then
    return nil
  end
  local bo = vim.bo[buf]
  if bo.buftype ~= "" or bo.filetype == "help" then
    return nil
  end
  local name = api.nvim_buf_get_name(buf)
  if name == "" or name:match("^%a[%w+.-]*://") or name:match("[/\\]%.git[/\\]") then
    return nil -- unnamed, a URL-like name, or a file inside .git (COMMIT_EDITMSG...)
  end
  local root = vim.fs.root(buf, state.config.root_markers)
  if not root then
    return nil
  end
  return vim.uv.fs_realpath(root) or vim.fs.normalize(root)
end

--- The executable the config names: its full path, or nil and the name looked for.
---@param cfg tandem.Config?
---@return string? path
---@return string wanted
function M.binary(cfg)
  cfg = cfg or state.config or config.resolve({})
  local wanted = config.base_cmd(cfg)[1]
  if vim.fn.executable(wanted) == 1 then
    return vim.fn.exepath(wanted), wanted
  end
  return nil, wanted
end

--- The one error shown when the binary is missing (once per session and per setup()).
---@param wanted string
function M.notify_missing_binary(wanted)
  if state.missing_binary_notified then
    return
  end
  state.missing_binary_notified = true
  vim.notify(
    ("tandem: cannot start the language server: `%s` is not an executable (looked on PATH). "
      .. "Install tandem, or give its path: require('tandem').setup({ cmd = '/path/to/tandem' }). "
      .. "See :checkhealth tandem"):format(wanted),
    vim.log.levels.ERROR
  )
end

--- The tandem client attached to `buf` (0 or nil: current), or nil.
---@param buf integer?
---@return vim.lsp.Client?
function M.client(buf)
  if not lsp_loaded() then
    return nil
  end
  buf = (buf == nil or buf == 0) and api.nvim_get_current_buf() or buf
  return vim.lsp.get_clients({ bufnr = buf, name = M.name })[1]
end

--- Every running tandem client.
---@return vim.lsp.Client[]
function M.clients()
  if not lsp_loaded() then
    return {}
  end
  return vim.tbl_filter(function(c)
    return not c:is_stopped()
  end, vim.lsp.get_clients({ name = M.name }))
end

---@param path string
---@param root string?
local function is_under(path, root)
  return root ~= nil and (path == root or vim.startswith(path, root .. "/"))
end

--- The client that should serve a request made from `buf`: the one attached to it; for a
--- `tandem://` buffer the one that loaded it; the alternate buffer's; the one whose root
--- holds the buffer's file (or the cwd); else any tandem client.
---@param buf integer?
---@return vim.lsp.Client?
function M.resolve_client(buf)
  buf = (buf == nil or buf == 0) and api.nvim_get_current_buf() or buf
  local attached = M.client(buf)
  if attached then
    return attached
  end
  local clients = M.clients()
  if #clients == 0 then
    return nil
  end
  if api.nvim_buf_is_valid(buf) then
    local id = vim.b[buf].tandem_client_id
    local by_id = id and vim.lsp.get_client_by_id(id)
    if by_id and not by_id:is_stopped() then
      return by_id
    end
  end
  local alt = vim.fn.bufnr("#")
  if alt > 0 and alt ~= buf then
    local c = M.client(alt)
    if c then
      return c
    end
  end
  local name = api.nvim_buf_is_valid(buf) and api.nvim_buf_get_name(buf) or ""
  local path = (name ~= "" and not name:match("^%a[%w+.-]*://")) and name or vim.uv.cwd()
  path = vim.uv.fs_realpath(path) or path
  local best ---@type vim.lsp.Client?
  for _, c in ipairs(clients) do
    if is_under(path, c.root_dir) and (not best or #c.root_dir > #best.root_dir) then
      best = c
    end
  end
  return best or clients[1]
end

--- Runs `fn` once `client` has finished `initialize`; `fail(message)` if it stops first or
--- takes too long. Polls on a timer: never blocks.
---@param client vim.lsp.Client
---@param fn fun()
---@param fail fun(message: string)
function M.when_ready(client, fn, fail)
  local waited = 0
  local function poll()
    if client:is_stopped() then
      return fail("the tandem server has stopped (see :Tandem log)")
    end
    if client.initialized then
      return fn()
    end
    if waited >= READY_TIMEOUT_MS then
      return fail("the tandem server did not finish initializing")
    end
    waited = waited + READY_POLL_MS
    vim.defer_fn(poll, READY_POLL_MS)
  end
  poll()
end

--- A readable one-line message for an LSP error: the spec's error object when the server
--- sent one (`data.error = {code, message}`), else the JSON-RPC message.
---@param err any
---@return string
function M.error_message(err)
  if type(err) == "string" then
    return err
  end
  if type(err) ~= "table" then
    return vim.inspect(err)
  end
  local e = type(err.data) == "table" and err.data.error or nil
  if type(e) == "table" and type(e.message) == "string" then
    return type(e.code) == "string" and ("%s (%s)"):format(e.message, e.code) or e.message
  end
  return err.message or vim.inspect(err)
end

--- Why no client can serve a request.
---@return string
function M.no_client_message()
  local path, wanted = M.binary()
  if not path then
    return ("`%s` is not an executable, so no tandem server runs (see :checkhealth tandem)"):format(wanted)
  end
  return "no tandem server is running: open a file of a workspace first (see :checkhealth tandem)"
end

---@class tandem.RequestOpts
---@field bufnr? integer The buffer the request is about (picks the client; flushes its changes).
---@field client_id? integer Use this client.

---@alias tandem.Callback fun(err: string?, result: any, client: vim.lsp.Client?, raw_err: table?)

--- An async request to the right tandem client. `cb(err, result, client, raw_err)`; `err` is a
--- readable message.
---@param method string
---@param params table
---@param cb tandem.Callback
---@param opts? tandem.RequestOpts
function M.request(method, params, cb, opts)
  opts = opts or {}
  local client = opts.client_id and vim.lsp.get_client_by_id(opts.client_id) or nil
  if client and client:is_stopped() then
    client = nil
  end
  client = client or M.resolve_client(opts.bufnr)
  if not client then
    -- The buffer's attach may still be scheduled (right after startup or setup()).
    local id = M.attach((opts.bufnr == nil or opts.bufnr == 0) and api.nvim_get_current_buf() or opts.bufnr)
    client = id and vim.lsp.get_client_by_id(id) or nil
  end
  if not client then
    return cb(M.no_client_message(), nil, nil, nil)
  end
  local attached = opts.bufnr and opts.bufnr ~= 0 and client.attached_buffers[opts.bufnr]
    and opts.bufnr
    or nil
  M.when_ready(client, function()
    local ok = client:request(method, params, function(err, result)
      if err then
        cb(M.error_message(err), nil, client, err)
      else
        cb(nil, result, client, nil)
      end
    end, attached)
    if not ok then
      cb("the tandem server is not running", nil, client, nil)
    end
  end, function(message)
    cb(message, nil, client, nil)
  end)
end

--- `workspace/executeCommand` sent to the server (never to a client-side handler).
---@param command string
---@param arguments any[]
---@param cb tandem.Callback
---@param opts? tandem.RequestOpts
function M.execute(command, arguments, cb, opts)
  M.request("workspace/executeCommand", { command = command, arguments = arguments }, cb, opts)
end

--- Requests this buffer's lenses from the tandem client only (not every server attached to
--- it, as `vim.lsp.codelens.refresh()` would), at most one request in flight per buffer, and
--- hands the answer to Neovim's own codelens handler, which displays it.
---@param buf integer?
function M.refresh_codelens(buf)
  buf = (buf == nil or buf == 0) and api.nvim_get_current_buf() or buf
  if state.lens_inflight[buf] or not api.nvim_buf_is_loaded(buf) then
    return
  end
  local client = M.client(buf)
  if not client or not client.initialized or not client:supports_method("textDocument/codeLens", buf) then
    return
  end
  state.lens_inflight[buf] = true
  local ok = client:request(
    "textDocument/codeLens",
    { textDocument = { uri = vim.uri_from_bufnr(buf) } },
    function(err, result, ctx)
      state.lens_inflight[buf] = nil
      if api.nvim_buf_is_loaded(buf) then
        vim.lsp.codelens.on_codelens(err, result, ctx)
      end
    end,
    buf
  )
  if not ok then
    state.lens_inflight[buf] = nil
  end
end

--- The buffer-local autocmds that keep a buffer's lenses fresh.
---@param buf integer
function M.enable_codelens(buf)
  local group = api.nvim_create_augroup("tandem.codelens", { clear = false })
  api.nvim_clear_autocmds({ group = group, buffer = buf })
  api.nvim_create_autocmd({ "BufEnter", "BufWritePost", "CursorHold" }, {
    group = group,
    buffer = buf,
    desc = "tandem: refresh code lenses",
    callback = function(ev)
      M.refresh_codelens(ev.buf)
    end,
  })
  M.refresh_codelens(buf)
end

--- `workspace/codeLens/refresh` (server -> client). Neovim 0.11 neither handles it nor
--- advertises `workspace.codeLens.refreshSupport`; we do both, when `codelens` is on.
--- Refreshes the attached buffers shown in a window; hidden ones refresh on BufEnter.
---@type lsp.Handler
local function on_codelens_refresh(_, _, ctx)
  vim.schedule(function()
    local client = vim.lsp.get_client_by_id(ctx.client_id)
    if not client or not (state.config and state.config.codelens) then
      return
    end
    for buf in pairs(client.attached_buffers) do
      if #vim.fn.win_findbuf(buf) > 0 then
        M.refresh_codelens(buf)
      end
    end
  end)
  return vim.NIL
end

--- Progress titles by token: `report` and `end` carry no title.
---@type table<string|integer, string>
local progress_titles = {}

--- `opts.progress = "notify"`: echoes a tandem client's progress (LspProgress autocmd).
--- Neovim has already recorded it for vim.lsp.status(); this only reads the event's data.
---@param ev table
function M.on_progress(ev)
  local data = ev.data or {}
  local client = data.client_id and vim.lsp.get_client_by_id(data.client_id)
  local params = data.params
  if not client or client.name ~= M.name or type(params) ~= "table" or type(params.value) ~= "table" then
    return
  end
  local v = params.value
  if v.kind == "begin" and v.title then
    progress_titles[params.token] = v.title
  end
  local title = v.title or progress_titles[params.token] or "Task"
  if v.kind == "end" then
    progress_titles[params.token] = nil
  end
  local msg = title
  if type(v.message) == "string" and v.message ~= "" then
    msg = msg .. ": " .. v.message
  end
  if v.kind ~= "end" and type(v.percentage) == "number" then
    msg = ("%s (%d%%)"):format(msg, v.percentage)
  end
  vim.notify(msg, vim.log.levels.INFO, { title = "Tandem" })
end

--- Sets a buffer up for prompt commands once attached: in a prompt buffer (by 'filetype',
--- see |tandem-opt-prompt_filetypes|) LSP completion with autotrigger for this client (the
--- server completes lines starting with `/`); elsewhere nothing, and completion this
--- function enabled before is disabled. `b:tandem_prompt_buffer` records which it was.
---@param client vim.lsp.Client
---@param buf integer
function M.setup_prompt_buffer(client, buf)
  local prompt = require("tandem.prompt.list").is_prompt_buffer(buf)
  vim.b[buf].tandem_prompt_buffer = prompt
  local want = prompt and state.config ~= nil and state.config.prompt_completion
  if want and vim.b[buf].tandem_completion ~= client.id then
    vim.lsp.completion.enable(true, client.id, buf, { autotrigger = true })
    vim.b[buf].tandem_completion = client.id
  elseif not want and vim.b[buf].tandem_completion == client.id then
    vim.lsp.completion.enable(false, client.id, buf)
    vim.b[buf].tandem_completion = nil
  end
end

--- FileType of an attached buffer: when it becomes (or stops being) a prompt buffer, the
--- document is closed and opened again, so the server learns its new language id, and
--- completion follows. A prompt buffer no client attaches to (a chat plugin's nofile
--- buffer) gets completion from `tandem.prompt.complete` instead (prompt/complete.lua).
---@param buf integer
function M.on_filetype(buf)
  local client = M.client(buf)
  local prompt = require("tandem.prompt.complete")
  if not client then
    -- Chat buffers of other plugins never attach: completion without a document there.
    if prompt.wants_fallback(buf) then
      prompt.enable_fallback(buf)
    else
      prompt.disable_fallback(buf)
    end
    return
  end
  local was = vim.b[buf].tandem_prompt_buffer
  if not client.initialized or was == nil then
    return
  end
  if require("tandem.prompt.list").is_prompt_buffer(buf) == was then
    return
  end
  pcall(vim.lsp.buf_detach_client, buf, client.id)
  if vim.b[buf].tandem_completion == client.id then
    vim.lsp.completion.enable(false, client.id, buf)
    vim.b[buf].tandem_completion = nil
  end
  vim.lsp.buf_attach_client(buf, client.id) -- on_attach sets it up again
end

--- The client config for one workspace root.
---@param cfg tandem.Config
---@param root string
---@return vim.lsp.ClientConfig
function M.client_config(cfg, root)
  local capabilities = {}
  if cfg.codelens then
    capabilities.workspace = { codeLens = { refreshSupport = true } }
  end
  return {
    name = M.name,
    cmd = config.lsp_cmd(cfg),
    cmd_env = cfg.log_level and { TANDEM_LOG = cfg.log_level } or nil,
    root_dir = root,
    workspace_required = true,
    capabilities = capabilities,
    -- Where the server completes prompt commands (it has the same default list).
    -- `questions`: servers' questions come here as forms (`tandem/question`).
    init_options = { promptFiletypes = cfg.prompt_filetypes, questions = true },
    handlers = {
      ["workspace/codeLens/refresh"] = on_codelens_refresh,
      -- The trust question: asked with vim.ui.select, answered without blocking.
      ["window/showMessageRequest"] = function(...)
        return require("tandem.hub").on_show_message_request(...)
      end,
      -- The hub's prompts changed (docs/lsp-extensions.md): refresh what shows them.
      ["tandem/promptsChanged"] = function(_, _, ctx)
        require("tandem.hub").on_prompts_changed(ctx.client_id)
      end,
      -- A downstream server's question that no agent can take: a form.
      ["tandem/question"] = function(...)
        return require("tandem.question").on_question(...)
      end,
    },
    -- Consulted by client:exec_cmd() (code lenses, code actions) before vim.lsp.commands,
    -- and only for this client: nothing global is registered.
    commands = require("tandem.actions").commands,
    on_attach = function(client, buf)
      if state.config and state.config.codelens then
        M.enable_codelens(buf)
      end
      M.setup_prompt_buffer(client, buf)
      -- The prompt list for `:Tandem prompt <Tab>`, in the background.
      require("tandem.prompt.list").refresh({ client_id = client.id })
    end,
    on_exit = function(_, _, client_id)
      state.status[client_id] = nil
      state.prompts[client_id] = nil
      state.prompts_inflight[client_id] = nil
      -- Requests pending at exit are never answered: forget them all (cheap to redo).
      state.lens_inflight = {}
    end,
  }
end

---@param client vim.lsp.Client
---@param conf vim.lsp.ClientConfig
local function reuse(client, conf)
  return client.name == conf.name and client.root_dir == conf.root_dir and not client:is_stopped()
end

--- Attaches `buf` to its workspace's client, starting that client if needed. Does nothing
--- for a buffer outside every workspace. Returns the client id.
---@param buf integer
---@return integer?
function M.attach(buf)
  local cfg = state.config
  local root = cfg and M.root_for(buf)
  if not cfg or not root then
    return nil
  end
  local existing = M.client(buf)
  if existing then
    return existing.id
  end
  local path, wanted = M.binary(cfg)
  if not path then
    M.notify_missing_binary(wanted)
    return nil
  end
  return vim.lsp.start(M.client_config(cfg, root), { bufnr = buf, reuse_client = reuse })
end

return M
