--- A downstream server's question for the user (`tandem/question`, docs/lsp-extensions.md):
--- shown with vim.ui.select and vim.ui.input, one field at a time, then answered with the
--- command `tandem.answer`. Escape at any step cancels. The question's text comes from the
--- server: it is shown on one line, cut, and nothing in it runs.
local lsp = require("tandem.lsp")

local M = {}

--- Characters of the server's message and of a field's description shown.
local MAX_TEXT = 300

---@param text any
---@return string
local function one_line(text)
  text = type(text) == "string" and text or ""
  text = text:gsub("[%c]", " ")
  if vim.fn.strchars(text) > MAX_TEXT then
    text = vim.fn.strcharpart(text, 0, MAX_TEXT) .. "…"
  end
  return text
end

--- The choices of a field, as {label, value} pairs: its `enum` (or `oneOf` consts), or yes
--- and no for a boolean; nil for a field typed in.
---@param field table
---@return { label: string, value: any }[]?
local function choices_of(field)
  if field.type == "boolean" then
    return { { label = "yes", value = true }, { label = "no", value = false } }
  end
  local list = {}
  if type(field.enum) == "table" then
    for i, v in ipairs(field.enum) do
      local names = type(field.enumNames) == "table" and field.enumNames or {}
      list[#list + 1] = { label = one_line(names[i] or tostring(v)), value = v }
    end
  elseif type(field.oneOf or field.anyOf) == "table" then
    for _, o in ipairs(field.oneOf or field.anyOf) do
      if type(o) == "table" and o.const ~= nil then
        list[#list + 1] = { label = one_line(o.title or tostring(o.const)), value = o.const }
      end
    end
  end
  return #list > 0 and list or nil
end

--- Picks one of `choices` ({label, value} pairs) for the field `label`; `on_choice(nil)`
--- when the user dismisses the list.
local function pick(choices, label, on_choice)
  vim.ui.select(choices, {
    prompt = label .. ": ",
    kind = "tandem.question",
    format_item = function(c)
      return c.label
    end,
  }, on_choice)
end

--- `text` typed for `field`, as its JSON type; nil and the reason when it does not fit.
---@return any, string?
local function parse(field, text)
  if field.type == "number" or field.type == "integer" then
    local n = tonumber(text)
    if not n or (field.type == "integer" and n % 1 ~= 0) then
      return nil, ("a%s %s"):format(field.type == "integer" and "n" or "", field.type)
    end
    return n
  end
  return text
end

--- Asks the fields of `schema` one after the other; `done(content)` with the form, or
--- `done(nil)` when the user cancels.
---@param schema table
---@param done fun(content: table?)
local function ask_fields(schema, done)
  local props = type(schema.properties) == "table" and schema.properties or {}
  local required = {}
  for _, name in ipairs(type(schema.required) == "table" and schema.required or {}) do
    required[name] = true
  end
  local names = vim.tbl_keys(props)
  table.sort(names)
  local content = vim.empty_dict()
  local function ask(i)
    if i > #names then
      return done(content)
    end
    local name = names[i]
    local field = type(props[name]) == "table" and props[name] or {}
    local label = one_line(field.title or name)
    if field.description then
      label = label .. " (" .. one_line(field.description) .. ")"
    end
    if required[name] then
      label = label .. " *"
    end
    local items = field.type == "array" and type(field.items) == "table" and choices_of(field.items)
    if items then
      -- A multi-choice: picked one at a time until "(done)".
      local picked = {}
      local function more()
        local left = { { label = "(done)", value = vim.NIL } }
        for _, c in ipairs(items) do
          if not vim.tbl_contains(picked, c.value) then
            left[#left + 1] = c
          end
        end
        pick(left, label, function(choice)
          if not choice then
            return done(nil)
          end
          if choice.value == vim.NIL then
            if #picked > 0 then
              content[name] = picked
            end
            return ask(i + 1)
          end
          picked[#picked + 1] = choice.value
          more()
        end)
      end
      return more()
    end
    local choices = choices_of(field)
    if choices then
      if not required[name] then
        table.insert(choices, 1, { label = "(leave empty)", value = vim.NIL })
      end
      pick(choices, label, function(choice)
        if not choice then
          return done(nil)
        end
        if choice.value ~= vim.NIL then
          content[name] = choice.value
        end
        ask(i + 1)
      end)
      return
    end
    local default = field.default ~= nil and tostring(field.default) or ""
    vim.ui.input({ prompt = label .. ": ", default = default }, function(text)
      if text == nil then
        return done(nil)
      end
      if text == "" and not required[name] then
        return ask(i + 1)
      end
      local value, problem = parse(field, text)
      if value == nil then
        vim.notify(("tandem: '%s' must be %s"):format(name, problem), vim.log.levels.WARN)
        return ask(i)
      end
      content[name] = value
      ask(i + 1)
    end)
  end
  ask(1)
end

--- Sends the answer to question `id`; a form the server side refuses is asked again.
local function answer(q, client_id, action, content)
  local args = { id = q.id, action = action, content = content }
  lsp.execute("tandem.answer", { args }, function(err)
    if not err then
      return
    end
    vim.notify("tandem: " .. err, vim.log.levels.WARN)
    if action == "accept" and not err:find("no question", 1, true) then
      vim.schedule(function()
        M.show(q, client_id)
      end)
    end
  end, { client_id = client_id })
end

--- Shows question `q` of the client `client_id`.
---@param q table
---@param client_id integer
function M.show(q, client_id)
  local prompt = ("Server '%s' asks: %s"):format(one_line(q.server), one_line(q.message))
  vim.ui.select({ "Answer", "Decline" }, { prompt = prompt, kind = "tandem.question" }, function(choice)
    if choice == "Answer" then
      ask_fields(type(q.schema) == "table" and q.schema or {}, function(content)
        if content then
          answer(q, client_id, "accept", content)
        else
          answer(q, client_id, "cancel")
        end
      end)
    elseif choice == "Decline" then
      answer(q, client_id, "decline")
    else
      answer(q, client_id, "cancel")
    end
  end)
end

--- The `tandem/question` notification handler.
function M.on_question(_, params, ctx)
  if type(params) ~= "table" or type(params.id) ~= "string" then
    return
  end
  vim.schedule(function()
    M.show(params, ctx.client_id)
  end)
end

return M
