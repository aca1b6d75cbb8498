--- Installs the `tandem` binary into `<plugin>/bin/tandem`, where the plugin looks first
--- (`config.installed_bin`). lazy.nvim runs it through `build.lua` at the plugin's root after
--- each install or update; `:lua require("tandem.build").run()` runs it by hand.
---
--- At a release tag (`git describe --tags --exact-match`), it downloads that release's
--- archive for this platform (named as cargo-dist names them) and the `.sha256` file beside
--- it, and installs the binary only when the archive's SHA-256 is the one published.
--- Elsewhere (a branch, a commit), it builds from source with `cargo build --release`.
---
--- It blocks until done: lazy.nvim runs a build step on its own and waits for it.

local config = require("tandem.config")

local M = {}

--- Where the releases of the plugin's repository are downloaded from: `TANDEM_RELEASE_URL`
--- (a mirror, tests), else the GitHub releases of the repository it was cloned from.
---@param root string
---@return string? url
---@return string? err
function M.releases_url(root)
  local env = vim.env.TANDEM_RELEASE_URL
  if env and env ~= "" then
    return (env:gsub("/$", ""))
  end
  local res = vim.system({ "git", "-C", root, "remote", "get-url", "origin" }, { text = true }):wait()
  local origin = vim.trim(res.stdout or "")
  local repo = origin:match("^https://github%.com/([^/]+/[^/]+)$") or origin:match("^git@github%.com:([^/]+/[^/]+)$")
  if res.code ~= 0 or not repo then
    return nil,
      ("cannot tell where this plugin's releases are (its git remote is %q): set TANDEM_RELEASE_URL to the releases' base address"):format(
        origin
      )
  end
  return ("https://github.com/%s/releases/download"):format((repo:gsub("%.git$", "")))
end

--- The Rust target triple of this machine, as cargo-dist names its archives.
---@return string? triple
---@return string? err
function M.target()
  local uname = vim.uv.os_uname()
  local arch = ({ x86_64 = "x86_64", amd64 = "x86_64", aarch64 = "aarch64", arm64 = "aarch64" })[uname.machine]
  local os = ({ Linux = "unknown-linux-gnu", Darwin = "apple-darwin" })[uname.sysname]
  if not arch or not os then
    return nil,
      ("no prebuilt tandem for %s on %s: build it with `cargo build --release` (Rust 1.89+)"):format(
        uname.sysname,
        uname.machine
      )
  end
  return arch .. "-" .. os
end

--- Runs `cmd` and waits; raises with its output when it fails.
---@param cmd string[]
---@param opts? vim.SystemOpts
---@return string stdout
local function run(cmd, opts)
  local ok, obj = pcall(vim.system, cmd, vim.tbl_extend("force", { text = true }, opts or {}))
  if not ok then
    error(("tandem build: cannot run `%s`: %s"):format(cmd[1], obj), 0)
  end
  local res = obj:wait()
  if res.code ~= 0 then
    error(
      ("tandem build: `%s` failed (exit %d): %s"):format(
        table.concat(cmd, " "),
        res.code,
        vim.trim((res.stderr or "") .. "\n" .. (res.stdout or ""))
      ),
      0
    )
  end
  return res.stdout or ""
end

--- The release tag the plugin's checkout sits at, or nil.
---@param root string
---@return string?
function M.release_tag(root)
  local res = vim.system({ "git", "-C", root, "describe", "--tags", "--exact-match" }, { text = true }):wait()
  local tag = res.code == 0 and vim.trim(res.stdout or "") or ""
  return tag ~= "" and tag or nil
end

--- The SHA-256 of a file, in hex.
---@param file string
---@return string
local function sha256(file)
  local out
  if vim.fn.executable("sha256sum") == 1 then
    out = run({ "sha256sum", file })
  else
    out = run({ "shasum", "-a", "256", file })
  end
  return out:match("^(%x+)"):lower()
end

--- Puts `file` at `<root>/bin/tandem`, executable, replacing what was there in one rename.
---@param file string
---@param root string
---@return string installed
local function install(file, root)
  local dest = vim.fs.joinpath(root, "bin", "tandem")
  vim.fn.mkdir(vim.fs.dirname(dest), "p")
  local tmp = dest .. ".new"
  vim.uv.fs_unlink(tmp)
  assert(vim.uv.fs_copyfile(file, tmp))
  assert(vim.uv.fs_chmod(tmp, tonumber("755", 8)))
  assert(vim.uv.fs_rename(tmp, dest))
  return dest
end

--- The largest archive downloaded, in bytes: several times a release's.
local MAX_ARCHIVE = tostring(512 * 1024 * 1024)

--- Downloads and installs the release `tag`'s binary for this platform.
---@param root string
---@param tag string
---@return string installed
function M.download(root, tag)
  local triple, err = M.target()
  if not triple then
    error("tandem build: " .. err, 0)
  end
  local base, url_err = M.releases_url(root)
  if not base then
    error("tandem build: " .. url_err, 0)
  end
  local name = ("tandem-%s.tar.xz"):format(triple)
  local url = ("%s/%s/%s"):format(base, tag, name)
  local dir = vim.fn.tempname()
  vim.fn.mkdir(dir, "p")
  local ok, result = pcall(function()
    local archive = vim.fs.joinpath(dir, name)
    -- Bounded: the server is not to be trusted with our disk or memory.
    local curl = { "curl", "--fail", "--silent", "--show-error", "--location", "--max-filesize" }
    run(vim.list_extend(vim.deepcopy(curl), { MAX_ARCHIVE, "--output", archive, url }))
    local sums = run(vim.list_extend(vim.deepcopy(curl), { "4096", url .. ".sha256" }))
    local want = (sums:match("^%s*(%x+)") or ""):lower()
    if #want ~= 64 then
      error(("tandem build: %s.sha256 holds no SHA-256; nothing installed"):format(url), 0)
    end
    local got = sha256(archive)
    if got ~= want then
      error(
        ("tandem build: checksum mismatch for %s: expected %s, got %s; nothing installed. "
          .. "Try again; if it persists, report it and build from source (`cargo build --release`)"):format(
          url,
          want,
          got
        ),
        0
      )
    end
    local out = vim.fs.joinpath(dir, "out")
    vim.fn.mkdir(out, "p")
    run({ "tar", "-xJf", archive, "-C", out })
    local found = vim.fs.find("tandem", { path = out, type = "file", limit = 1 })[1]
    if not found then
      error(("tandem build: %s holds no `tandem` binary; nothing installed"):format(url), 0)
    end
    return install(found, root)
  end)
  vim.fn.delete(dir, "rf")
  if not ok then
    error(result, 0)
  end
  return result
end

--- Builds from source in the plugin's folder and installs the result.
---@param root string
---@return string installed
function M.cargo(root)
  if vim.fn.executable("cargo") ~= 1 then
    error(
      "tandem build: not at a release tag, and `cargo` is not on PATH to build from source: "
        .. "install Rust (https://rustup.rs), or pin the plugin to a release tag",
      0
    )
  end
  run({ "cargo", "build", "--release" }, { cwd = root })
  local target = vim.env.CARGO_TARGET_DIR
  target = target and target ~= "" and target or vim.fs.joinpath(root, "target")
  return install(vim.fs.joinpath(target, "release", "tandem"), root)
end

--- The build step: the release's binary at a release tag, else one built with cargo.
---@param root? string the plugin's folder (default: this plugin's)
---@return string installed
function M.run(root)
  root = root or config.plugin_root
  local tag = M.release_tag(root)
  local installed = tag and M.download(root, tag) or M.cargo(root)
  vim.notify(("tandem: installed %s%s"):format(installed, tag and (" (release " .. tag .. ")") or ""))
  return installed
end

return M
