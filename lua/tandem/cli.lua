--- `:Tandem`: its subcommands and their completion.

local state = require("tandem.state")

local M = {}

local function notify_error(msg)
  vim.notify("tandem: " .. msg, vim.log.levels.ERROR)
end

local function usage(sub)
  return notify_error(("usage: :Tandem %s"):format(sub))
end

---@class tandem.Invocation
---@field args string[] The words after the subcommand (and after `memory <verb>`).
---@field raw string The text after the subcommand, as typed (quotes and escapes kept).
---@field bang boolean `:Tandem!` or `:Tandem tasks!`.
---@field range integer 0, 1 or 2, as nvim_create_user_command gives it.
---@field line1 integer
---@field line2 integer

---@class tandem.Subcommand
---@field run fun(inv: tandem.Invocation)
---@field complete? fun(arglead: string, words: string[], text: string): string[], boolean?
--- `complete` gets the argument being completed, the words after `:Tandem` (the subcommand
--- first; the last is `arglead`), and the text after the subcommand up to the cursor. A
--- second result `true` means the candidates are final (not filtered by `arglead`, not sorted).

---@type table<string, tandem.Subcommand>
M.memory_verbs = {
  search = {
    run = function(inv)
      local query = table.concat(inv.args, " ")
      if query ~= "" then
        return require("tandem.memory").search_select(query)
      end
      vim.ui.input({ prompt = "Search memory: " }, function(q)
        if q and vim.trim(q) ~= "" then
          require("tandem.memory").search_select(vim.trim(q))
        end
      end)
    end,
  },
  show = {
    run = function(inv)
      if #inv.args ~= 1 then
        return usage("memory show {id}")
      end
      require("tandem.document").open_memory(inv.args[1])
    end,
    complete = function()
      return require("tandem.memory").last_ids()
    end,
  },
  add = {
    run = function(inv)
      local line1, line2 = inv.line1, inv.line2
      if inv.range == 0 then
        line1 = vim.fn.line(".")
        line2 = line1
      end
      require("tandem.memory").add_selection({ line1 = line1, line2 = line2 })
    end,
  },
}

---@type table<string, tandem.Subcommand>
M.subcommands = {
  tasks = {
    run = function(inv)
      local qf, all = inv.bang, false
      for _, a in ipairs(inv.args) do
        if a == "qf" then
          qf = true
        elseif a == "all" then
          all = true
        else
          return usage("tasks[!] [qf] [all]")
        end
      end
      require("tandem.tasks").show({ qf = qf, all = all })
    end,
    complete = function(_, words)
      return vim.tbl_filter(function(w)
        return not vim.list_contains(words, w)
      end, { "qf", "all" })
    end,
  },
  task = {
    run = function(inv)
      if #inv.args ~= 1 then
        return usage("task {id}")
      end
      require("tandem.document").open_task(inv.args[1])
    end,
    complete = function(_, words)
      return #words == 2 and require("tandem.tasks").ids(state.last_tasks) or {}
    end,
  },
  memory = {
    run = function(inv)
      local verb = M.memory_verbs[inv.args[1] or ""]
      if not verb then
        return usage("memory search {query} | memory show {id} | memory add")
      end
      verb.run(vim.tbl_extend("force", inv, { args = vim.list_slice(inv.args, 2) }))
    end,
    complete = function(_, words)
      if #words == 2 then
        return vim.tbl_keys(M.memory_verbs)
      end
      local verb = M.memory_verbs[words[2]]
      if #words == 3 and verb and verb.complete then
        return verb.complete("", words)
      end
      return {}
    end,
  },
  log = {
    run = function()
      require("tandem.status").open_log()
    end,
  },
  status = {
    run = function()
      require("tandem.status").show()
    end,
  },
  dismiss = {
    run = function()
      require("tandem.status").dismiss()
    end,
  },
  prompt = {
    run = function(inv)
      local line = vim.trim(inv.raw)
      local prompt = require("tandem.prompt.run")
      -- `!` does the other of what `prompt_insert` says.
      local insert = nil ---@type boolean?
      if inv.bang then
        insert = (state.config and state.config.prompt_insert or "buffer") ~= "insert"
      end
      if line == "" then
        return prompt.pick({ insert = insert })
      end
      prompt.run(line, { insert = insert })
    end,
    complete = function(arglead, _, text)
      return require("tandem.prompt.complete").complete_cmdline(arglead, text), true
    end,
  },
  inject = {
    run = function(inv)
      if inv.args[1] == "configure" then
        if #inv.args > 2 then
          return usage("inject configure [/server:prompt]")
        end
        return require("tandem.hub").configure({ command = inv.args[2] })
      end
      require("tandem.hub").inject({ thread_system = vim.trim(inv.raw), json = inv.bang })
    end,
    complete = function(_, words)
      return #words == 2 and { "configure" } or {}
    end,
  },
  servers = {
    run = function()
      require("tandem.hub").servers()
    end,
  },
  trust = {
    run = function(inv)
      if #inv.args > 0 then
        return usage("trust[!]")
      end
      require("tandem.hub").trust({ revoke = inv.bang })
    end,
  },
  signin = {
    run = function(inv)
      if #inv.args ~= 1 then
        return usage("signin {server}")
      end
      require("tandem.hub").sign_in(inv.args[1])
    end,
    complete = function(_, words)
      if #words ~= 2 then
        return {}
      end
      local hub = require("tandem.hub")
      return hub.server_names(function(s)
        return s.state == hub.NEEDS_SIGN_IN
      end)
    end,
  },
  signout = {
    run = function(inv)
      if #inv.args ~= 1 then
        return usage("signout {server}")
      end
      require("tandem.hub").sign_out(inv.args[1])
    end,
    complete = function(_, words)
      if #words ~= 2 then
        return {}
      end
      -- Remote servers: those that run nothing on this machine.
      return require("tandem.hub").server_names(function(s)
        return type(s.runs) == "string" and s.runs:match("^https?://") ~= nil
      end)
    end,
  },
}

--- Creates `:Tandem` (replacing it if it exists). `plugin/tandem.lua` does it at startup, so
--- the command exists before setup() (and lazy-loading on the command works); setup() does
--- it again.
function M.create_command()
  vim.api.nvim_create_user_command("Tandem", function(o)
    M.run(o)
  end, {
    nargs = "*",
    bang = true,
    range = true,
    desc = "Tandem: tasks, task, memory, prompt, inject, servers, signin, signout, trust, log, status, dismiss",
    complete = function(...)
      return M.complete(...)
    end,
  })
end

--- Runs `:Tandem` with the table nvim_create_user_command gives. No subcommand: `tasks`.
--- Before setup(), the first `:Tandem` sets Tandem up with the default options (and attaches
--- the current buffer), so the command works without a setup() call.
---@param opts table
function M.run(opts)
  if not require("tandem.state").config then
    require("tandem").setup()
    require("tandem.lsp").attach(vim.api.nvim_get_current_buf())
  end
  local fargs = vim.deepcopy(opts.fargs)
  local name = table.remove(fargs, 1) or "tasks"
  local bang = opts.bang
  if name:sub(-1) == "!" then
    name, bang = name:sub(1, -2), true
  end
  local sub = M.subcommands[name]
  if not sub then
    local names = vim.tbl_keys(M.subcommands)
    table.sort(names)
    return notify_error(("unknown subcommand '%s' (one of: %s)"):format(name, table.concat(names, ", ")))
  end
  local raw = (opts.args or ""):match("^%s*%S+%s*(.-)%s*$") or ""
  sub.run({ args = fargs, raw = raw, bang = bang, range = opts.range, line1 = opts.line1, line2 = opts.line2 })
end

--- Completion of `:Tandem` (the `complete` function of the user command).
---@param arglead string
---@param cmdline string
---@param cursorpos integer
---@return string[]
function M.complete(arglead, cmdline, cursorpos)
  local line = cmdline:sub(1, cursorpos)
  -- Drop any range and the command name (user commands start with a capital letter).
  local rest = line:match("^.-%f[%a]%u%a*!?%s+(.*)$") or ""
  local words = vim.split(rest, "%s+")
  local candidates ---@type string[]
  if #words == 1 then
    candidates = vim.tbl_keys(M.subcommands)
  else
    local sub = M.subcommands[(words[1]:gsub("!$", ""))]
    if sub and sub.complete then
      local final
      candidates, final = sub.complete(arglead, words, rest:match("^%S+%s+(.*)$") or "")
      if final then
        return candidates or {}
      end
    end
    candidates = candidates or {}
  end
  local lead = arglead:lower()
  local out = vim.tbl_filter(function(c)
    return vim.startswith(c:lower(), lead)
  end, candidates)
  table.sort(out)
  return out
end

return M
