-- Neovim 0.11's own LSP config for Tandem: `vim.lsp.enable("tandem")` alone attaches
-- `tandem lsp` to the buffers of a workspace (a folder with `.git`), with the plugin's
-- handlers and commands; `:Tandem` and its subcommands work as with setup(). The binary is
-- the one the build step installed, else `tandem` on PATH.
--
-- vim.lsp.enable() starts clients from the FileType event, so a buffer with no filetype
-- does not attach this way; setup() attaches those too (lua/tandem/lsp.lua says why).
local config = require("tandem.config")
local cfg = require("tandem.state").config or config.resolve({})
local conf = require("tandem.lsp").client_config(cfg, nil)
conf.root_dir = nil
conf.root_markers = cfg.root_markers
return conf
