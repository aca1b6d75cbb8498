--- The options of `require("tandem").setup()`: their defaults, their descriptions, and the
--- validation that turns a user's table into a resolved config (warning on unknown keys and
--- falling back to the default of an invalid one, never raising).

local M = {}

---@class tandem.Config
---@field cmd string|string[] The tandem binary (a name on PATH or a path), or a command list whose items precede `lsp`.
---@field standalone boolean Serve in-process (`tandem lsp --standalone`) instead of through the daemon.
---@field root_markers (string|string[])[] What marks a workspace root (see |vim.fs.root()|).
---@field codelens boolean Refresh code lenses automatically.
---@field log_level string? The server's log filter (TANDEM_LOG), e.g. "debug" or "tandem=debug".
---@field progress "none"|"notify" Also echo task progress with vim.notify.
---@field prompt_filetypes string[] Filetypes where `/server:prompt` completes (`"*"`: all).
---@field prompt_insert "buffer"|"insert" Where a prompt's messages go from a prompt buffer.
---@field prompt_completion boolean Complete prompt commands as you type in prompt buffers.
---@field prompt_ask "required"|"all"|"never" Which missing arguments of a prompt command are asked for before it runs.

---@class tandem.Option
---@field default any
---@field types string[] Accepted `type()`s.
---@field desc string
---@field check? fun(v: any): boolean, string?

---@type table<string, tandem.Option>
M.schema = {
  cmd = {
    default = "tandem",
    types = { "string", "table" },
    desc = "the tandem binary (name on PATH or path), or a list such as { '/opt/tandem/bin/tandem' }",
    check = function(v)
      if type(v) == "string" then
        return v ~= "", "must not be empty"
      end
      return #v > 0 and vim.iter(v):all(function(x)
        return type(x) == "string"
      end),
        "must be a non-empty list of strings"
    end,
  },
  standalone = {
    default = false,
    types = { "boolean" },
    desc = "run `tandem lsp --standalone` (in-process) instead of going through the daemon",
  },
  root_markers = {
    default = { ".git" },
    types = { "table" },
    desc = "files or directories that mark a workspace root",
    check = function(v)
      return #v > 0, "must be a non-empty list"
    end,
  },
  codelens = {
    default = true,
    types = { "boolean" },
    desc = "refresh code lenses on BufEnter, BufWritePost and CursorHold",
  },
  log_level = {
    default = nil,
    types = { "string" },
    desc = "the server's log filter (TANDEM_LOG): 'info', 'debug', 'tandem=debug'...",
  },
  progress = {
    default = "none",
    types = { "string" },
    desc = "'notify' also echoes task progress with vim.notify; 'none' leaves it to vim.lsp.status()",
    check = function(v)
      return v == "none" or v == "notify", "must be 'none' or 'notify'"
    end,
  },
  prompt_filetypes = {
    -- The server's default list (src/lsp/prompts.rs DEFAULT_PROMPT_FILETYPES).
    default = {
      "",
      "text",
      "plaintext",
      "markdown",
      "gitcommit",
      "codecompanion",
      "AvanteInput",
      "copilot-chat",
      "tandem-prompt",
    },
    types = { "table" },
    desc = "filetypes where a line starting with `/` completes prompt commands ({ '*' }: every buffer)",
    check = function(v)
      return vim.iter(v):all(function(x)
        return type(x) == "string"
      end),
        "must be a list of strings"
    end,
  },
  prompt_insert = {
    default = "buffer",
    types = { "string" },
    desc = "'buffer': a prompt's messages open in a tandem://prompt/ buffer; "
      .. "'insert': from a prompt buffer, its text is inserted at the cursor",
    check = function(v)
      return v == "buffer" or v == "insert", "must be 'buffer' or 'insert'"
    end,
  },
  prompt_completion = {
    default = true,
    types = { "boolean" },
    desc = "complete prompt commands as you type in prompt buffers (vim.lsp.completion, autotrigger); "
      .. "false leaves it to your completion plugin",
  },
  prompt_ask = {
    default = "required",
    types = { "string" },
    desc = "which arguments a prompt command lacks are asked for with vim.ui.input before it runs: "
      .. "'required', 'all' (optional ones too; an empty answer leaves one out) or 'never' "
      .. "(the server answers MISSING_ARGUMENT)",
    check = function(v)
      return v == "required" or v == "all" or v == "never", "must be 'required', 'all' or 'never'"
    end,
  },
}

--- The default of `prompt_filetypes`.
M.DEFAULT_PROMPT_FILETYPES = M.schema.prompt_filetypes.default

--- Resolves user options against the schema. Problems are reported with one vim.notify each
--- and the default is used instead.
---@param user table?
---@return tandem.Config
function M.resolve(user)
  user = user or {}
  local problems = {} ---@type string[]
  if type(user) ~= "table" then
    problems[#problems + 1] = "setup() takes a table of options"
    user = {}
  end
  local cfg = {}
  for key, opt in pairs(M.schema) do
    local value = user[key]
    if value == nil then
      cfg[key] = vim.deepcopy(opt.default)
    elseif not vim.list_contains(opt.types, type(value)) then
      problems[#problems + 1] = ("option '%s' must be a %s, not a %s"):format(
        key,
        table.concat(opt.types, " or "),
        type(value)
      )
      cfg[key] = vim.deepcopy(opt.default)
    else
      local ok, why = true, nil
      if opt.check then
        ok, why = opt.check(value)
      end
      if ok then
        cfg[key] = vim.deepcopy(value)
      else
        problems[#problems + 1] = ("option '%s' %s"):format(key, why or "is invalid")
        cfg[key] = vim.deepcopy(opt.default)
      end
    end
  end
  for key in pairs(user) do
    if not M.schema[key] then
      problems[#problems + 1] = ("unknown option '%s'"):format(key)
    end
  end
  if #problems > 0 then
    table.sort(problems)
    vim.notify("tandem: " .. table.concat(problems, "; "), vim.log.levels.WARN)
  end
  return cfg
end

--- The plugin's folder: this file is `<plugin>/lua/tandem/config.lua`.
M.plugin_root = vim.fs.dirname(vim.fs.dirname(vim.fs.dirname(vim.fs.normalize(debug.getinfo(1, "S").source:sub(2)))))

--- Where the build step (`build.lua`) installs the binary.
M.installed_bin = vim.fs.joinpath(M.plugin_root, "bin", "tandem")

--- The command prefix that runs the binary: `cmd` as a list. With `cmd` left at its
--- default, the binary the build step installed comes first, then `tandem` on PATH.
---@param cfg tandem.Config
---@return string[]
function M.base_cmd(cfg)
  local cmd = type(cfg.cmd) == "table" and vim.deepcopy(cfg.cmd --[[@as string[] ]])
    or { cfg.cmd --[[@as string]] }
  if cfg.cmd == M.schema.cmd.default and vim.fn.executable(M.installed_bin) == 1 then
    cmd[1] = M.installed_bin
  end
  if cmd[1]:find("^~") then
    cmd[1] = vim.fs.normalize(cmd[1])
  end
  return cmd
end

--- The language server's command: `{ cmd..., "lsp" [, "--standalone"] }`.
---@param cfg tandem.Config
---@return string[]
function M.lsp_cmd(cfg)
  local cmd = M.base_cmd(cfg)
  cmd[#cmd + 1] = "lsp"
  if cfg.standalone then
    cmd[#cmd + 1] = "--standalone"
  end
  return cmd
end

return M
