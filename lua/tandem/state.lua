--- What the plugin remembers between calls. Plain data, so tests (and `:lua =`) can inspect
--- it through `require("tandem").state()`.

---@class tandem.State
---@field config tandem.Config? The resolved options; nil until setup().
---@field setup_calls integer How many times setup() ran.
---@field missing_binary_notified boolean The "binary not found" error was shown this session.
---@field last_tasks table[]? The WorkflowRecord[] of the last `tandem.tasks.list`.
---@field last_memory table? The result of the last `tandem.memory.search`.
---@field last_servers table? The HubServers report of the last `tandem.servers`.
---@field status table<integer, table> client id -> its last `tandem/status`.
---@field lens_inflight table<integer, true> buffers with a code-lens request in flight.
---@field prompts table<integer, table[]> client id -> its last `tandem.prompts.list` (PromptInfo[]).
---@field prompts_inflight table<integer, true|"again"> clients with a `tandem.prompts.list` in flight ("again": refresh once it is answered).
---@field prompt_results table<string, table> `tandem://prompt/...` name -> the run it shows.
local state = {
  config = nil,
  setup_calls = 0,
  missing_binary_notified = false,
  last_tasks = nil,
  last_memory = nil,
  last_servers = nil,
  status = {},
  lens_inflight = {},
  prompts = {},
  prompts_inflight = {},
  prompt_results = {},
}

return state
