--- Tandem for Neovim: attaches the `tandem lsp` client to every file buffer of a workspace and
--- adds `:Tandem`, `tandem://` documents and `:checkhealth tandem`.
---
--- Requiring this module loads nothing else: every function requires what it needs when it
--- is called, and setup() only creates autocmds and the command. The LSP client starts when
--- a buffer of a workspace is read. Nothing waits on the server: requests take callbacks.
---
--- Modules: config (options), state (what is remembered), lsp (attach, client lookup,
--- requests, code lenses, prompt buffers), document (`tandem://` buffers), tasks, memory,
--- status (status, log, dismiss), prompt (prompt commands of the hub), hub (injection,
--- servers, trust), ui (floats, scratch buffers), actions (client-side commands of lenses
--- and code actions), cli (`:Tandem`), health.

local M = {}

local function lsp()
  return require("tandem.lsp")
end

---@param buf integer
---@return boolean
local function may_attach(buf)
  local api = vim.api
  return api.nvim_buf_is_loaded(buf)
    and vim.bo[buf].buftype == ""
    and api.nvim_buf_get_name(buf) ~= ""
end

--- Configures Tandem. Idempotent: calling it again replaces the options and recreates the
--- autocmds and the command rather than adding to them; running clients keep the command
--- they were started with.
---@param opts? table See |tandem-options|.
function M.setup(opts)
  local api = vim.api
  local state = require("tandem.state")
  local cfg = require("tandem.config").resolve(opts)
  state.config = cfg
  state.setup_calls = state.setup_calls + 1
  state.missing_binary_notified = false

  local group = api.nvim_create_augroup("tandem", { clear = true })
  api.nvim_create_autocmd({ "BufReadPost", "BufNewFile", "BufFilePost" }, {
    group = group,
    desc = "tandem: attach file buffers of a workspace",
    callback = function(ev)
      -- Scheduled: other autocmds of the event may still set 'buftype' (help, plugins).
      vim.schedule(function()
        lsp().attach(ev.buf)
      end)
    end,
  })
  api.nvim_create_autocmd("BufReadCmd", {
    group = group,
    pattern = "tandem://*",
    desc = "tandem: read a tandem:// document",
    callback = function(ev)
      require("tandem.document").read(ev.buf)
    end,
  })
  api.nvim_create_autocmd("LspDetach", {
    group = group,
    desc = "tandem: drop the lens autocmds of a detached buffer",
    callback = function(ev)
      local client = vim.lsp.get_client_by_id(ev.data.client_id)
      if client and client.name == "tandem" then
        pcall(api.nvim_clear_autocmds, { group = "tandem.codelens", buffer = ev.buf })
      end
    end,
  })
  api.nvim_create_autocmd("FileType", {
    group = group,
    desc = "tandem: prompt completion follows the filetype",
    callback = function(ev)
      -- Attached buffers (vim.lsp is loaded then), and special buffers (chat inputs).
      if package.loaded["vim.lsp"] or vim.bo[ev.buf].buftype ~= "" then
        lsp().on_filetype(ev.buf)
      end
    end,
  })
  if cfg.progress == "notify" then
    api.nvim_create_autocmd("LspProgress", {
      group = group,
      desc = "tandem: echo task progress",
      callback = function(ev)
        lsp().on_progress(ev)
      end,
    })
  end

  require("tandem.cli").create_command()

  -- The lens autocmds live in their own group, per buffer: rebuild them for the options.
  api.nvim_create_augroup("tandem.codelens", { clear = true })
  if package.loaded["vim.lsp"] then
    for _, client in ipairs(lsp().clients()) do
      for buf in pairs(client.attached_buffers) do
        if cfg.codelens then
          lsp().enable_codelens(buf)
        else
          vim.lsp.codelens.clear(client.id, buf)
        end
        if client.initialized then
          lsp().setup_prompt_buffer(client, buf)
        end
      end
    end
  end

  -- Chat buffers opened before setup complete prompt commands too.
  for _, buf in ipairs(api.nvim_list_bufs()) do
    if api.nvim_buf_is_loaded(buf) and vim.bo[buf].buftype ~= "" and vim.bo[buf].filetype ~= "" then
      lsp().on_filetype(buf)
    end
  end

  -- Buffers opened before setup (a lazy-loaded plugin, a late setup call) attach now.
  local existing = vim.tbl_filter(may_attach, api.nvim_list_bufs())
  if #existing > 0 then
    vim.schedule(function()
      for _, buf in ipairs(existing) do
        lsp().attach(buf)
      end
    end)
  end
end

--- The resolved options, or nil before setup().
---@return tandem.Config?
function M.config()
  return require("tandem.state").config
end

--- The plugin's state, for inspection (not a copy: do not modify it).
---@return tandem.State
function M.state()
  return require("tandem.state")
end

--- The tandem client attached to `bufnr` (default: current buffer), or nil.
---@param bufnr? integer
---@return vim.lsp.Client?
function M.client(bufnr)
  return lsp().client(bufnr)
end

--- The client a request from `bufnr` goes to: the attached one, else the best other one
--- (see |tandem-clients|), or nil when none runs.
---@param bufnr? integer
---@return vim.lsp.Client?
function M.client_for(bufnr)
  return lsp().resolve_client(bufnr)
end

--- Every running tandem client (one per workspace root).
---@return vim.lsp.Client[]
function M.clients()
  return lsp().clients()
end

--- Attaches a buffer now (normally done by the autocmds). Returns the client id, or nil when
--- the buffer is not a file of a workspace or the binary is missing.
---@param bufnr? integer
---@return integer?
function M.attach(bufnr)
  return lsp().attach((bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr)
end

--- An async LSP request to the right tandem client: `cb(err, result, client, raw_err)`,
--- `err` a readable string.
---@param method string
---@param params table
---@param cb tandem.Callback
---@param opts? tandem.RequestOpts
function M.request(method, params, cb, opts)
  lsp().request(method, params, cb, opts)
end

--- `workspace/executeCommand` on the server: `cb(err, result, client, raw_err)`.
---@param command string
---@param arguments any[]
---@param cb tandem.Callback
---@param opts? tandem.RequestOpts
function M.execute(command, arguments, cb, opts)
  lsp().execute(command, arguments, cb, opts)
end

--- `:Tandem tasks`: the workflows in a float, or in the quickfix list with `{ qf = true }`;
--- `{ all = true }` lists every workspace. `on_result(err, workflows)` follows the display.
---@param opts? { qf?: boolean, all?: boolean, bufnr?: integer, on_result?: fun(err: string?, workflows: table[]?) }
function M.tasks(opts)
  require("tandem.tasks").show(opts)
end

--- The workflows without any UI: `cb(err, WorkflowRecord[])`.
---@param cb tandem.Callback
---@param opts? { all?: boolean, bufnr?: integer }
function M.task_list(cb, opts)
  require("tandem.tasks").fetch(cb, opts)
end

--- The task ids of the last task list (what `:Tandem task <Tab>` offers).
---@return string[]
function M.task_ids()
  return require("tandem.tasks").ids(require("tandem.state").last_tasks)
end

--- Opens `tandem://task/<id>` in the current window.
---@param id string
---@param opts? tandem.OpenOpts
function M.open_task(id, opts)
  require("tandem.document").open_task(id, opts)
end

--- Opens `tandem://task/<id>` at its "## Decisions" heading.
---@param id string
---@param opts? tandem.OpenOpts
function M.open_task_decisions(id, opts)
  require("tandem.document").open_task_decisions(id, opts)
end

--- Opens `tandem://memory/<id>` in the current window.
---@param id string
---@param opts? tandem.OpenOpts
function M.open_memory(id, opts)
  require("tandem.document").open_memory(id, opts)
end

--- Opens any `tandem://` URI in the current window.
---@param uri string
---@param opts? tandem.OpenOpts
function M.open(uri, opts)
  require("tandem.document").open(uri, opts)
end

--- `:Tandem memory search`: searches and offers the results with vim.ui.select.
--- `on_choice(result|nil)` gets the chosen SearchResult `{id, type, title, score, snippet,
--- tags}`; without it the choice opens `tandem://memory/<id>`.
---@param query string
---@param on_choice? fun(result: table?)
function M.memory_search(query, on_choice)
  require("tandem.memory").search_select(query, on_choice)
end

--- The search without any UI: `cb(err, {query, total, results, hint})`.
---@param query string
---@param cb tandem.Callback
---@param opts? { limit?: integer, type?: string, bufnr?: integer }
function M.memory_results(query, cb, opts)
  require("tandem.memory").search(query, cb, opts)
end

--- `:'<,'>Tandem memory add`: saves lines `line1..line2` of the current buffer (or `bufnr`),
--- asking for what `type` and `title` do not give. `on_done(err, AddOutcome)`.
---@param opts { bufnr?: integer, line1: integer, line2: integer, type?: string, title?: string, on_done?: fun(err: string?, outcome: table?) }
function M.memory_add(opts)
  require("tandem.memory").add_selection(opts)
end

--- Completes and sends `tandem.memory.saveSelection` for `{uri, range, type?, title?}`, as
--- the code action does. `opts.on_done(err, AddOutcome)`.
---@param args tandem.SaveArgs
---@param opts? { client_id?: integer, on_done?: fun(err: string?, outcome: table?) }
function M.save_selection(args, opts)
  require("tandem.memory").save_selection(args, opts)
end

--- `tandem/status` without any UI: `cb(err, {version, pid, home, log_file, workspace,
--- daemon, focus_task})`.
---@param cb tandem.Callback
---@param opts? tandem.RequestOpts
function M.status(cb, opts)
  require("tandem.status").fetch(cb, opts)
end

--- `:Tandem status`: the status in a notification.
function M.show_status()
  require("tandem.status").show()
end

--- `tandem daemon status --json`, asynchronously: `cb(err, status)`.
---@param cb fun(err: string?, status: table?)
function M.daemon_status(cb)
  require("tandem.status").daemon(cb)
end

--- The log file's path: `cb(path, source)`, source `server`, `daemon` or `default`.
---@param cb fun(path: string, source: string)
function M.log_path(cb)
  require("tandem.status").log_path(cb)
end

--- `:Tandem log`: opens the log file.
function M.open_log()
  require("tandem.status").open_log()
end

--- `:Tandem dismiss`: clears the review warnings of the completed focus task.
---@param cb? tandem.Callback
function M.dismiss(cb)
  require("tandem.status").dismiss(cb)
end

--- `:Tandem prompt`: runs `/server:prompt name=value ...` and shows its messages in
--- `tandem://prompt/<server>:<prompt>`, or inserts their text (see |tandem-opt-prompt_insert|).
--- `opts.insert` (true/false) overrides the option; `opts.show = false` only calls
--- `opts.on_result(err, PromptRun, buf)`. Missing arguments are asked for first (see
--- |tandem-opt-prompt_ask|; `opts.ask = false` asks none, `opts.ask_optional = true` the
--- optional ones too); a cancelled question runs nothing (`err` "cancelled").
---@param line string
---@param opts? tandem.PromptOpts
function M.prompt(line, opts)
  require("tandem.prompt.run").run(line, opts)
end

--- `tandem.prompts.list` without any UI: `cb(err, PromptInfo[])`; the list is kept for
--- completion.
---@param cb tandem.Callback
---@param opts? tandem.RequestOpts
function M.prompt_list(cb, opts)
  require("tandem.prompt.list").list(cb, opts)
end

--- The prompt commands of the cached list (what `:Tandem prompt <Tab>` offers). The cache is
--- refreshed in the background.
---@param bufnr? integer
---@return string[]
function M.prompt_commands(bufnr)
  require("tandem.prompt.list").refresh({ bufnr = bufnr })
  return require("tandem.prompt.list").commands(bufnr)
end

--- `:Tandem inject`: previews the conventional prompts injection in `tandem://inject`
--- (`opts.thread_system`: the thread's own system prompt). With `json = true` the raw
--- messages go to `tandem://inject.json` and `on_result(err, messages, injection, buf)`;
--- else `on_result(err, injection, injection, buf)`. `show = false`: no buffer.
---@param opts? tandem.InjectOpts
function M.inject(opts)
  require("tandem.hub").inject(opts)
end

--- `:Tandem inject configure`: turn a conventional prompt on or off, or give its arguments
--- (asked with vim.ui.select and vim.ui.input; written to your config.json).
--- `{ command = "/server:prompt", action = "arguments"|"enable"|"disable" }` skip the
--- questions they answer; `on_result(err, ConventionalPrompt)`.
---@param opts? tandem.ConfigureOpts
function M.inject_configure(opts)
  require("tandem.hub").configure(opts)
end

--- `tandem.inject.prompts`: `cb(err, ConventionalPrompt[])`, every conventional prompt of the
--- workspace with its settings.
---@param cb tandem.Callback
---@param opts? tandem.RequestOpts
function M.conventional_prompts(cb, opts)
  lsp().execute("tandem.inject.prompts", {}, cb, opts)
end

--- `:Tandem servers`: the workspace's MCP servers in a float (`s` on a row signs in to
--- that server). `on_result(err, report, buf)`.
---@param opts? { bufnr?: integer, on_result?: fun(err: string?, report: table?, buf: integer?) }
function M.servers(opts)
  require("tandem.hub").servers(opts)
end

--- `:Tandem signin NAME`: signs in to a remote server (Tandem opens the browser), then waits
--- for the approval. `on_result(err, SignInReport)` once signed in and connected.
---@param name string
---@param opts? tandem.SignInOpts
function M.sign_in(name, opts)
  require("tandem.hub").sign_in(name, opts)
end

--- `:Tandem signout NAME`: forgets a remote server's sign-in. `on_result(err, {server, forgot})`.
---@param name string
---@param opts? { bufnr?: integer, client_id?: integer, on_result?: fun(err: string?, report: table?) }
function M.sign_out(name, opts)
  require("tandem.hub").sign_out(name, opts)
end

--- `tandem.servers` without any UI: `cb(err, {workspace, files, errors, servers})`.
---@param cb tandem.Callback
---@param opts? tandem.RequestOpts
function M.server_list(cb, opts)
  require("tandem.hub").fetch_servers(cb, opts)
end

--- `:Tandem trust`: shows what the workspace's `.mcp.json` runs, asks, approves.
--- `{ revoke = true }` (`:Tandem trust!`) withdraws it; `{ yes = true }` does not ask.
--- `on_result(err, TrustReport)`.
---@param opts? tandem.TrustOpts
function M.trust(opts)
  require("tandem.hub").trust(opts)
end

--- Requests the code lenses of a buffer (default: current) from its tandem client.
---@param bufnr? integer
function M.refresh_codelens(bufnr)
  lsp().refresh_codelens(bufnr)
end

return M
