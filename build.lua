-- lazy.nvim runs this file after installing or updating the plugin: it installs the
-- `tandem` binary into bin/, where the plugin finds it (see lua/tandem/build.lua).
local root = vim.fs.dirname(vim.fs.normalize(debug.getinfo(1, "S").source:sub(2)))
vim.opt.rtp:prepend(root)
require("tandem.build").run(root)
