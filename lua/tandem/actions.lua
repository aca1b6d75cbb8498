--- Client-side handlers of the commands the server puts in code lenses and code actions
--- (docs/lsp-extensions.md, "Code lenses" and "Commands"). They are the `commands` of each
--- tandem client's config, so `client:exec_cmd()` runs them instead of sending
--- `workspace/executeCommand`, and no other client sees them.

local M = {}

---@param command lsp.Command
---@return any
local function arg1(command)
  return type(command.arguments) == "table" and command.arguments[1] or nil
end

---@param name string
---@param id any
---@return boolean
local function valid_id(name, id)
  if type(id) == "string" and id ~= "" then
    return true
  end
  vim.notify(("tandem: %s needs a task id argument"):format(name), vim.log.levels.ERROR)
  return false
end

---@type table<string, fun(command: lsp.Command, ctx: table)>
M.commands = {
  --- `[TASK_ID]`: opens `tandem://task/<id>`.
  ["tandem.task.show"] = function(command, ctx)
    local id = arg1(command)
    if valid_id(command.command, id) then
      require("tandem.document").open_task(id, { client_id = ctx.client_id })
    end
  end,

  --- `[TASK_ID]`: opens the task at its "## Decisions" heading.
  ["tandem.task.decisions"] = function(command, ctx)
    local id = arg1(command)
    if valid_id(command.command, id) then
      require("tandem.document").open_task_decisions(id, { client_id = ctx.client_id })
    end
  end,

  --- `[{uri, range}]` from the code action: asks the type and title, then sends the
  --- completed arguments to the server.
  ["tandem.memory.saveSelection"] = function(command, ctx)
    require("tandem.memory").save_selection(arg1(command), { client_id = ctx.client_id })
  end,

  --- `[{command, uri, line}]` from the "Run /server:prompt" code action: runs the prompt and
  --- shows its messages, or inserts their text below that line (`prompt_insert = "insert"`).
  ["tandem.prompt.run"] = function(command, ctx)
    require("tandem.prompt.run").run_action(command, ctx)
  end,
}

return M
