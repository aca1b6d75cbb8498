//! The hub: the user's other MCP servers, connected by Tandem (specs 000 and 002).
//!
//! Each workspace has its set of downstream servers (`config`: the user's file merged with
//! the workspace's `.mcp.json`; `trust`: a workspace file runs only once approved). Servers
//! are rmcp clients (`server`), their prompts and tools cached and refreshed on
//! `list_changed`; the config files are watched, and a change applies without a restart
//! (only the servers whose entry changed are restarted). Every change is published on the
//! core's bus (`Event::Hub`).

pub mod command;
pub mod config;
pub mod inject;
pub mod server;
pub mod trust;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::events::{Bus, Event, HubChange};
use crate::store::{Store, StoreError};
use config::HubConfig;
pub use server::{Downstream, HubError, ServerState, Status};
use trust::Trust;

/// How often the config files are checked for changes (two `stat`s).
const WATCH_EVERY: Duration = Duration::from_millis(500);

/// A prompt of a downstream server, as editors list it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PromptInfo {
    pub server: String,
    pub name: String,
    /// `/server:name`.
    pub command: String,
    pub title: Option<String>,
    pub description: Option<String>,
    pub arguments: Vec<ArgumentInfo>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArgumentInfo {
    pub name: String,
    pub description: Option<String>,
    pub required: bool,
}

/// Every workspace's servers.
pub struct Hub {
    user_file: PathBuf,
    trust: Trust,
    bus: Bus,
    workspaces: Mutex<HashMap<PathBuf, Arc<Workspace>>>,
}

impl Hub {
    /// `user_file`: the user's config (`config.json` in the data dir).
    pub fn open(user_file: PathBuf, store: Arc<Store>, bus: Bus) -> Result<Hub, StoreError> {
        Ok(Hub {
            user_file,
            trust: Trust::open(store)?,
            bus,
            workspaces: Mutex::new(HashMap::new()),
        })
    }

    pub fn user_file(&self) -> &Path {
        &self.user_file
    }

    pub fn trust(&self) -> &Trust {
        &self.trust
    }

    /// The workspace's hub, loaded (and its autostart servers started) on first use. Must
    /// be called within a tokio runtime.
    pub fn workspace(self: &Arc<Self>, root: &Path) -> Arc<Workspace> {
        let mut all = self.workspaces.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(w) = all.get(root) {
            return w.clone();
        }
        let w = Arc::new(Workspace {
            root: root.to_path_buf(),
            hub: Arc::downgrade(self),
            loaded: RwLock::new(Loaded::default()),
            reload: tokio::sync::Mutex::new(()),
        });
        w.apply(self);
        let watch = Arc::downgrade(&w);
        tokio::spawn(async move { watch_config(watch).await });
        all.insert(root.to_path_buf(), w.clone());
        w
    }

    /// Stops every server (the daemon is exiting).
    pub fn shutdown(&self) {
        let all = self.workspaces.lock().unwrap_or_else(|p| p.into_inner());
        for w in all.values() {
            for s in w.servers_now() {
                s.stop();
            }
        }
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[derive(Default)]
struct Loaded {
    config: HubConfig,
    servers: BTreeMap<String, Arc<Downstream>>,
    stamps: Vec<Option<(SystemTime, u64)>>,
}

/// One workspace's servers.
pub struct Workspace {
    root: PathBuf,
    hub: Weak<Hub>,
    loaded: RwLock<Loaded>,
    reload: tokio::sync::Mutex<()>,
}

fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

async fn watch_config(w: Weak<Workspace>) {
    loop {
        tokio::time::sleep(WATCH_EVERY).await;
        let Some(w) = w.upgrade() else { return };
        let Some(hub) = w.hub.upgrade() else { return };
        if w.stamps_now(&hub) != w.loaded.read().unwrap_or_else(|p| p.into_inner()).stamps {
            tracing::info!(
                "MCP server config of {} changed; reloading",
                w.root.display()
            );
            w.apply(&hub);
        }
    }
}

impl Workspace {
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn stamps_now(&self, hub: &Hub) -> Vec<Option<(SystemTime, u64)>> {
        vec![
            stamp(&hub.user_file),
            stamp(&self.root.join(config::WORKSPACE_FILE)),
        ]
    }

    fn servers_now(&self) -> Vec<Arc<Downstream>> {
        self.loaded
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .servers
            .values()
            .cloned()
            .collect()
    }

    /// (Re)reads both files and brings the servers in line: unchanged entries keep their
    /// connection, changed ones restart, removed ones stop, new ones start.
    fn apply(self: &Arc<Self>, hub: &Hub) {
        let stamps = self.stamps_now(hub);
        let env = |var: &str| std::env::var(var).ok();
        let config = config::load(&hub.user_file, &self.root, &env);
        for e in &config.errors {
            tracing::warn!("MCP server config: {e}");
        }
        let workspace_trusted = config
            .workspace_file
            .as_ref()
            .is_some_and(|(file, content)| hub.trust.is_trusted(file, content));
        let bus = hub.bus.clone();
        let root = self.root.clone();
        let on_change: server::OnChange = Arc::new(move |name: &str, change| {
            bus.publish(Event::Hub {
                workspace: root.clone(),
                server: name.to_string(),
                change: match change {
                    server::Change::Status => HubChange::Status,
                    server::Change::Prompts => HubChange::Prompts,
                    server::Change::Tools => HubChange::Tools,
                },
            });
        });
        let mut stopped = Vec::new();
        let mut started = Vec::new();
        {
            let mut loaded = self.loaded.write().unwrap_or_else(|p| p.into_inner());
            let mut servers = BTreeMap::new();
            for (name, sc) in &config.servers {
                let trusted = match sc.origin {
                    config::Origin::User(_) => true,
                    config::Origin::Workspace(_) => workspace_trusted,
                };
                let keep = loaded.servers.get(name).filter(|old| {
                    old.config == *sc && (old.status() != Status::Untrusted) == trusted
                });
                let server = match keep {
                    Some(old) => old.clone(),
                    None => {
                        if let Some(old) = loaded.servers.get(name) {
                            stopped.push(old.clone());
                        }
                        let s = Downstream::new(sc.clone(), trusted, on_change.clone());
                        if sc.autostart {
                            started.push(s.clone());
                        }
                        s
                    }
                };
                servers.insert(name.clone(), server);
            }
            for (name, old) in &loaded.servers {
                if !servers.contains_key(name) {
                    stopped.push(old.clone());
                }
            }
            loaded.servers = servers;
            loaded.config = config;
            loaded.stamps = stamps;
        }
        for s in stopped {
            s.stop();
        }
        for s in started {
            s.start();
        }
        hub.bus.publish(Event::Hub {
            workspace: self.root.clone(),
            server: String::new(),
            change: HubChange::Config,
        });
    }

    /// Reloads now if the files changed (what `tandem servers` does before listing).
    pub async fn refresh_config(self: &Arc<Self>) {
        let _one = self.reload.lock().await;
        if let Some(hub) = self.hub.upgrade()
            && self.stamps_now(&hub) != self.loaded.read().unwrap_or_else(|p| p.into_inner()).stamps
        {
            self.apply(&hub);
        }
    }

    /// Reloads now, whatever the files' stamps (trust changed, say).
    pub fn apply_now(self: &Arc<Self>) {
        if let Some(hub) = self.hub.upgrade() {
            self.apply(&hub);
        }
    }

    /// Waits until no server is starting (each is ready, failed or not meant to run), at
    /// most `max`.
    pub async fn settle(&self, max: Duration) {
        let deadline = tokio::time::Instant::now() + max;
        while self
            .servers_now()
            .iter()
            .any(|s| s.status() == Status::Starting)
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The config as loaded (errors included).
    pub fn config(&self) -> HubConfig {
        self.loaded
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .config
            .clone()
    }

    pub fn servers(&self) -> Vec<ServerState> {
        self.servers_now().iter().map(|s| s.state()).collect()
    }

    pub fn server(&self, name: &str) -> Result<Arc<Downstream>, HubError> {
        let loaded = self.loaded.read().unwrap_or_else(|p| p.into_inner());
        loaded.servers.get(name).cloned().ok_or_else(|| HubError {
            code: "SERVER_NOT_FOUND",
            message: format!(
                "no MCP server '{name}' in this workspace (known: {})",
                if loaded.servers.is_empty() {
                    "none".to_string()
                } else {
                    loaded
                        .servers
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            ),
        })
    }

    /// Every prompt of the running servers, minus those a server's `disabled_prompts` names.
    pub fn prompts(&self) -> Vec<PromptInfo> {
        let mut out = Vec::new();
        for s in self.servers_now() {
            for p in s.prompts().iter() {
                if s.config.disabled_prompts.contains(&p.name) {
                    continue;
                }
                out.push(PromptInfo {
                    server: s.name().to_string(),
                    name: p.name.clone(),
                    command: format!("/{}:{}", s.name(), p.name),
                    title: p.title.clone(),
                    description: p.description.clone(),
                    arguments: p
                        .arguments
                        .iter()
                        .flatten()
                        .map(|a| ArgumentInfo {
                            name: a.name.clone(),
                            description: a.description.clone(),
                            required: a.required.unwrap_or(false),
                        })
                        .collect(),
                });
            }
        }
        out
    }
}
