-- Loaded by Neovim at startup (or by a plugin manager when `:Tandem` is first used): makes
-- `:Tandem` exist before setup(). `:checkhealth tandem` needs nothing here (it finds
-- lua/tandem/health.lua). Everything else stays unloaded until used.
if vim.g.loaded_tandem == 1 then
  return
end
vim.g.loaded_tandem = 1

if vim.fn.has("nvim-0.11") ~= 1 then
  vim.notify("tandem: Neovim 0.11 or later is needed", vim.log.levels.WARN)
  return
end

-- setup() recreates the command; before it, the command sets Tandem up with the defaults.
if vim.fn.exists(":Tandem") ~= 2 then
  require("tandem.cli").create_command()
end
