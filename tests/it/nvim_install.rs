//! The Neovim plugin installed as a user installs it: a copy of the plugin in a git
//! checkout, its `build.lua` run by a headless Neovim as lazy.nvim runs it, then
//! `vim.lsp.enable("tandem")` alone. At a release tag the build downloads the release from a
//! local HTTP server laid out as cargo-dist lays out a release, and refuses an archive whose
//! checksum is not the published one; off a tag it runs `cargo build --release` (a stand-in
//! `cargo` that records how it was run: the real build takes too long for a test).

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::editor::checkhealth;
use crate::nvim::{Nvim, nvim_bin};
use crate::util::{DaemonGuard, TestHome, git, tandem_bin};

/// A copy of this repository's plugin (what lazy.nvim clones) at `dir`, committed.
fn plugin_checkout(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for part in ["lua", "plugin", "lsp", "doc", "build.lua"] {
        let status = std::process::Command::new("cp")
            .arg("-R")
            .arg(root.join(part))
            .arg(dir)
            .status()
            .unwrap();
        assert!(status.success());
    }
    git(dir, &["init", "-q"]);
    git(dir, &["add", "."]);
    git(dir, &["commit", "-q", "-m", "plugin"]);
}

/// This machine's target triple, as cargo-dist names its archives.
fn triple() -> String {
    let os = match std::env::consts::OS {
        "linux" => "unknown-linux-gnu",
        "macos" => "apple-darwin",
        other => panic!("no release for {other}"),
    };
    format!("{}-{os}", std::env::consts::ARCH)
}

fn executable(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
}

/// Runs `build.lua` in a headless Neovim, as lazy.nvim does after an install or update:
/// whether it succeeded, and what it printed.
fn build(home: &TestHome, plugin: &Path, env: &[(&str, &str)]) -> (bool, String) {
    let mut cmd = std::process::Command::new(nvim_bin());
    home.isolate(&mut cmd);
    cmd.args(["--clean", "--headless", "-l"])
        .arg(plugin.join("build.lua"))
        .env_remove("CARGO_TARGET_DIR")
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null());
    let out = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// A release of `tag` under `root`, as cargo-dist publishes one: the archive holding
/// `tandem-TRIPLE/tandem` (here a script that says its version) and its `.sha256`.
fn release(root: &Path, tag: &str) -> PathBuf {
    let name = format!("tandem-{}", triple());
    let staging = root.join("staging").join(&name);
    executable(
        &staging.join("tandem"),
        "#!/bin/sh\necho \"tandem 9.9.9 (release)\"\n",
    );
    let dir = root.join("releases").join(tag);
    std::fs::create_dir_all(&dir).unwrap();
    let archive = dir.join(format!("{name}.tar.xz"));
    let status = std::process::Command::new("tar")
        .arg("-cJf")
        .arg(&archive)
        .arg("-C")
        .arg(root.join("staging"))
        .arg(&name)
        .status()
        .unwrap();
    assert!(status.success());
    let sum = std::process::Command::new("sha256sum")
        .arg(&archive)
        .current_dir(&dir)
        .output()
        .unwrap();
    let hash = String::from_utf8(sum.stdout).unwrap()[..64].to_string();
    std::fs::write(
        dir.join(format!("{name}.tar.xz.sha256")),
        format!("{hash} *{name}.tar.xz\n"),
    )
    .unwrap();
    root.join("releases")
}

/// A static HTTP server of `dir` on a loopback port, stopped when dropped.
struct FileServer {
    url: String,
    stop: Arc<AtomicBool>,
    addr: std::net::SocketAddr,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FileServer {
    fn new(dir: PathBuf) -> FileServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stopped.load(Ordering::SeqCst) {
                    break;
                }
                if let Ok(stream) = stream {
                    serve(&dir, stream);
                }
            }
        });
        FileServer {
            url: format!("http://{addr}"),
            stop,
            addr,
            thread: Some(thread),
        }
    }
}

impl Drop for FileServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Answers one GET with the file it names under `dir`, or 404.
fn serve(dir: &Path, mut stream: TcpStream) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let mut header = String::new();
    while reader.read_line(&mut header).is_ok_and(|n| n > 2) {
        header.clear();
    }
    let path = line.split_whitespace().nth(1).unwrap_or("/");
    let file = dir.join(path.trim_start_matches('/'));
    let (status, body) = match path.contains("..") {
        false => match std::fs::read(&file) {
            Ok(body) => ("200 OK", body),
            Err(_) => ("404 Not Found", b"not found".to_vec()),
        },
        true => ("404 Not Found", b"not found".to_vec()),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(&body);
}

#[test]
fn build_at_a_release_tag_installs_the_checked_release() {
    let home = TestHome::new();
    let plugin = home.path().join("lazy/tandem");
    plugin_checkout(&plugin);
    git(&plugin, &["tag", "v9.9.9"]);
    let releases = release(home.path(), "v9.9.9");
    let server = FileServer::new(releases.clone());
    let env = [("TANDEM_RELEASE_URL", server.url.as_str())];

    let (done, out) = build(&home, &plugin, &env);
    assert!(done, "{out}");
    let installed = plugin.join("bin/tandem");
    let version = std::process::Command::new(&installed).output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&version.stdout),
        "tandem 9.9.9 (release)\n"
    );

    // The published checksum no longer matches the archive: refused, nothing installed.
    std::fs::remove_dir_all(plugin.join("bin")).unwrap();
    let sums = releases.join(format!("v9.9.9/tandem-{}.tar.xz.sha256", triple()));
    std::fs::write(&sums, format!("{}  x.tar.xz\n", "0".repeat(64))).unwrap();
    let (done, out) = build(&home, &plugin, &env);
    assert!(!done, "{out}");
    assert!(out.contains("checksum mismatch"), "{out}");
    assert!(out.contains("nothing installed"), "{out}");
    assert!(!installed.exists(), "installed despite the mismatch");

    // Without TANDEM_RELEASE_URL, the releases are those of the repository it came from.
    git(
        &plugin,
        &[
            "remote",
            "add",
            "origin",
            "git@github.com:someone/tandem.git",
        ],
    );
    let mut cmd = std::process::Command::new(nvim_bin());
    home.isolate(&mut cmd);
    let lua = format!(
        "vim.opt.rtp:prepend('{0}'); io.stdout:write(require('tandem.build').releases_url('{0}'))",
        plugin.display()
    );
    let script = home.path().join("releases_url.lua");
    std::fs::write(&script, lua).unwrap();
    let out = cmd
        .args(["--clean", "--headless", "-l"])
        .arg(&script)
        .env_remove("TANDEM_RELEASE_URL")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "https://github.com/someone/tandem/releases/download"
    );
}

#[test]
fn build_off_a_tag_runs_cargo_in_the_plugin() {
    let home = TestHome::new();
    let plugin = home.path().join("lazy/tandem");
    plugin_checkout(&plugin);
    // `cargo` as a stand-in: it records its directory and arguments, and leaves a binary
    // where `cargo build --release` does.
    let bin = home.path().join("fake-bin");
    let record = home.path().join("cargo-args");
    executable(
        &bin.join("cargo"),
        &format!(
            "#!/bin/sh\necho \"$PWD $*\" > {}\nmkdir -p target/release\nprintf '#!/bin/sh\\necho built\\n' > target/release/tandem\nchmod +x target/release/tandem\n",
            record.display()
        ),
    );
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let (done, out) = build(&home, &plugin, &[("PATH", &path)]);
    assert!(done, "{out}");
    assert_eq!(
        std::fs::read_to_string(&record).unwrap(),
        format!(
            "{} build --release\n",
            plugin.canonicalize().unwrap().display()
        )
    );
    let built = std::process::Command::new(plugin.join("bin/tandem"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&built.stdout), "built\n");
}

#[tokio::test]
async fn lsp_enable_alone_attaches_the_installed_binary() {
    let home = TestHome::new();
    let _daemon = DaemonGuard(&home);
    let plugin = home.path().join("lazy/tandem");
    plugin_checkout(&plugin);
    // What the build step leaves; `tandem` is on no PATH this Neovim sees.
    std::fs::create_dir_all(plugin.join("bin")).unwrap();
    std::os::unix::fs::symlink(tandem_bin(), plugin.join("bin/tandem")).unwrap();
    let ws = home.path().join("ws");
    crate::util::repo_with(&ws, &[("src/main.rs", "fn main() {}\n")]);
    let nvim = Nvim::start_plugin(&home, &ws, &plugin, &[("PATH", "/usr/bin:/bin")]).await;
    nvim.lua("vim.lsp.enable('tandem'); vim.cmd.edit('src/main.rs')")
        .await;
    let cmd = nvim
        .wait(
            "the tandem client",
            30,
            "local c = vim.lsp.get_clients({ name = 'tandem', bufnr = 0 })[1]
             return c and c.initialized and c.config.cmd or nil",
            |v| v.is_array(),
        )
        .await;
    let installed = plugin.join("bin/tandem").display().to_string();
    assert_eq!(cmd, serde_json::json!([installed, "lsp"]));
    let has_command = nvim.lua("return vim.fn.exists(':Tandem')").await;
    assert_eq!(has_command, 2);
    let health = checkhealth(&nvim).await;
    assert!(
        health.contains(&format!(
            "using {installed} (installed by the plugin's build step)"
        )),
        "{health}"
    );
    nvim.lua("vim.lsp.stop_client(vim.lsp.get_clients({ name = 'tandem' }), true)")
        .await;
    nvim.quit().await;

    // With nothing installed, the health check says how to install it.
    std::fs::remove_file(plugin.join("bin/tandem")).unwrap();
    let nvim = Nvim::start_plugin(&home, &ws, &plugin, &[("PATH", "/usr/bin:/bin")]).await;
    let health = checkhealth(&nvim).await;
    assert!(
        health.contains("build.lua") && health.contains("require('tandem.build').run()"),
        "{health}"
    );
    nvim.quit().await;
}
