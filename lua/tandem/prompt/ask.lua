--- Asking for the arguments a prompt command lacks, one vim.ui.input after the other
--- (`prompt_ask`: the required ones by default), from the prompt's entry in the cached list
--- (fetched first when the list does not hold it). The server reads the line
--- (`tandem.prompt.parse`) and appends the answers, quoted as its grammar reads them back:
--- the plugin keeps no grammar of its own.

local lsp = require("tandem.lsp")
local list = require("tandem.prompt.list")
local state = require("tandem.state")
local ui = require("tandem.ui")

local M = {}

--- The question for an argument: `name (description): `, `, optional` added to an optional one.
---@param arg table `{name, description, required}`
---@return string
function M.question(arg)
  local desc = type(arg.description) == "string" and vim.trim((arg.description:gsub("\n.*", ""))) or ""
  if not arg.required then
    desc = desc ~= "" and (desc .. ", optional") or "optional"
  end
  return desc ~= "" and ("%s (%s): "):format(arg.name, desc) or ("%s: "):format(arg.name)
end

--- What to ask for this run: "required", "all" or "never" (|tandem-opt-prompt_ask|, which
--- `opts.ask` and `opts.ask_optional` override).
---@param opts tandem.PromptOpts
---@return "required"|"all"|"never"
local function ask_mode(opts)
  if opts.ask == false then
    return "never"
  elseif opts.ask_optional == true then
    return "all"
  end
  local mode = state.config and state.config.prompt_ask or "required"
  if opts.ask_optional == false and mode == "all" then
    return "required"
  end
  return mode
end

--- The arguments of `info` the line does not give, in the prompt's order: the required
--- ones, or all with `all`.
---@param info table PromptInfo
---@param given table<string, any> The arguments the line gives, by name.
---@param all boolean
---@return table[]
function M.missing(info, given, all)
  local out = {}
  for _, a in ipairs(type(info.arguments) == "table" and info.arguments or {}) do
    if type(a) == "table" and type(a.name) == "string" and not given[a.name] and (a.required or all) then
      out[#out + 1] = a
    end
  end
  return out
end

--- Asks for each argument in turn with vim.ui.input (the next question once the previous is
--- answered, never waiting). `cb(answers)`: `{name, value}` for each argument to append (an
--- optional argument left empty is left out), or nil when a question was cancelled.
---@param args table[]
---@param cb fun(answers: { name: string, value: string }[]?)
function M.ask(args, cb)
  local answers = {}
  ui.input_each(args, function(arg)
    return { prompt = M.question(arg) }
  end, function(arg, value)
    if value ~= "" or arg.required then
      answers[#answers + 1] = { name = arg.name, value = value }
    end
  end, function(answered)
    cb(answered and answers or nil)
  end)
end

--- Completes `line` with the arguments it lacks, asked for (see ask_mode), then
--- `cb(line, client_id)`; `cb(nil)` when the user cancelled, `cb(nil, nil, err)` when the
--- server could not append the answers. A line that is not a command (the server's parse
--- refuses it), or a prompt the server does not list, goes on as it is (the run says why).
---@param line string
---@param opts tandem.PromptOpts
---@param cb fun(line: string?, client_id: integer?, err: string?)
function M.complete(line, opts, cb)
  local mode = ask_mode(opts)
  local request = { bufnr = opts.bufnr, client_id = opts.client_id }
  if mode == "never" then
    list.refresh(request)
    return cb(line, opts.client_id)
  end
  lsp.execute("tandem.prompt.parse", { { line = line } }, function(err, parsed, client)
    local function decide(info, client_id)
      local args = info and M.missing(info, parsed.arguments, mode == "all") or {}
      if #args == 0 then
        return cb(line, client_id)
      end
      M.ask(args, function(answers)
        if not answers then
          return cb(nil)
        end
        if #answers == 0 then
          return cb(line, client_id)
        end
        lsp.execute("tandem.prompt.parse", { { line = line, append = answers } }, function(e, full)
          if e or type(full) ~= "table" or type(full.line) ~= "string" then
            return cb(nil, nil, e or "the server's answer has no line")
          end
          cb(full.line, client_id)
        end, { client_id = client_id })
      end)
    end
    if err or type(parsed) ~= "table" or type(parsed.arguments) ~= "table" then
      list.refresh(request)
      return cb(line, client and client.id or opts.client_id)
    end
    local info = list.find(state.prompts[client.id], parsed.command)
    if info then
      -- Whatever happens, the next <Tab> sees the current list.
      list.refresh({ client_id = client.id })
      return decide(info, client.id)
    end
    -- Not in the cache (cold, or a server that just started): the list first.
    list.list(function(list_err, prompts)
      decide(not list_err and list.find(prompts, parsed.command) or nil, client.id)
    end, { client_id = client.id })
  end, request)
end

return M
