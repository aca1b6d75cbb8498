//! The hub: the user's other MCP servers, connected by Tandem (specs 000 and 002).
//!
//! Each workspace has its set of downstream servers (`config`: the user's file merged with
//! the workspace's `.mcp.json`; `trust`: a workspace file runs only once approved). Servers
//! are rmcp clients (`server`), their prompts and tools cached and refreshed on
//! `list_changed`; the config files are watched, and a change applies without a restart
//! (only the servers whose entry changed are restarted). Every change is published on the
//! core's bus (`Event::Hub`).

pub mod client;
pub mod config;
pub mod gateway;
pub mod prompts;
pub mod questions;
pub mod scan;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::events::{Bus, Event, HubChange};
use crate::store::{Store, StoreError};
use client::remembered::RememberedPrompts;
pub use client::remembered::Said;
use client::server;
pub use client::server::{Downstream, HubError, ServerState, Status};
use config::HubConfig;
use config::trust::Trust;
pub use prompts::conventional::{
    ConventionalArgument, ConventionalPrompt, InjectRequest, PromptTarget,
};
use prompts::{command, conventional, inject, own};

/// How often the config files are checked for changes (two `stat`s).
const WATCH_EVERY: Duration = Duration::from_millis(500);

/// A prompt's messages, as the server gave them (role, and text, image or embedded resource
/// content, kept as MCP writes them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PromptRun {
    pub server: String,
    pub prompt: String,
    pub description: Option<String>,
    pub messages: Vec<serde_json::Value>,
}

/// A completion of a prompt command being typed. `start` is the byte offset in the line where
/// the replaced text begins (it ends at the cursor).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PromptCompletion {
    pub label: String,
    pub insert_text: String,
    /// `command`, `argument` or `value`.
    pub kind: String,
    pub detail: Option<String>,
    /// Markdown.
    pub documentation: Option<String>,
    pub start: usize,
}

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
    /// The server is not running (`autostart: false`, not used yet): these are the prompts
    /// it listed when it last ran, and running one starts it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub remembered: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArgumentInfo {
    pub name: String,
    pub description: Option<String>,
    pub required: bool,
}

/// A sign-in to a remote server (`hub/login`): where it is, and the server once it is done.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SignInReport {
    pub server: String,
    /// The sign-in's number, to wait for this one (`hub/login` with `wait` and `attempt`).
    pub attempt: u64,
    /// The URL the user approves at, while the sign-in waits for it; empty when the
    /// approval came already.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The server's status label now (`ready` once signed in and connected).
    pub status: String,
    /// What the server says it is, once connected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_info: Option<String>,
    pub tools: usize,
}

impl SignInReport {
    pub fn of(s: &Downstream, attempt: u64, url: Option<String>) -> SignInReport {
        let state = s.state();
        SignInReport {
            server: state.name,
            attempt,
            url,
            status: state.status.label().to_string(),
            server_info: state.server_info,
            tools: state.tools,
        }
    }
}

/// `hub/logout`'s answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SignOutReport {
    pub server: String,
    /// Whether tokens were kept for it (and are now forgotten).
    pub forgot: bool,
}

/// The hub's asker at its start: a server's form that no agent in a call can take goes to
/// the editors of its workspace that show forms (`questions`).
fn editor_forms(questions: &Arc<questions::Questions>, bus: &Bus) -> client::ask::AskerSlot {
    struct EditorForms {
        questions: Arc<questions::Questions>,
        bus: Bus,
    }
    impl client::ask::Asker for EditorForms {
        fn ask(
            &self,
            form: client::ask::Form,
        ) -> client::ask::Pending<Option<rmcp::model::ElicitResult>> {
            use rmcp::model::{ElicitResult, ElicitationAction};
            let (questions, bus) = (self.questions.clone(), self.bus.clone());
            Box::pin(async move {
                let schema = serde_json::to_value(&form.schema).unwrap_or_default();
                let answer = questions
                    .ask(
                        &bus,
                        &form.workspace,
                        &form.server,
                        &form.message,
                        schema,
                        form.limit,
                    )
                    .await?;
                Some(match answer {
                    questions::Answer::Accept(content) => {
                        let mut result = ElicitResult::new(ElicitationAction::Accept);
                        result.content = Some(serde_json::Value::Object(content));
                        result
                    }
                    questions::Answer::Decline => ElicitResult::new(ElicitationAction::Decline),
                    questions::Answer::Cancel => ElicitResult::new(ElicitationAction::Cancel),
                })
            })
        }
    }
    let slot = client::ask::AskerSlot::default();
    slot.set(Some(Arc::new(EditorForms {
        questions: questions.clone(),
        bus: bus.clone(),
    })));
    slot
}

/// Every workspace's servers.
pub struct Hub {
    user_file: PathBuf,
    trust: Trust,
    /// The prompts each server last listed, for the servers that are not running.
    remembered: RememberedPrompts,
    bus: Bus,
    workspaces: Mutex<HashMap<PathBuf, Arc<Workspace>>>,
    /// Tandem's own conventional prompts, with the memory version they were built at.
    own: Mutex<Option<(u64, Vec<inject::Fetched>)>>,
    /// Held while Tandem edits the user's config file (read, change, write), so that two
    /// edits at once both land.
    user_file_edit: Mutex<()>,
    /// The remote servers' sign-ins: kept in the data dir, approved in the browser.
    tokens: client::oauth::TokenStore,
    browser: client::oauth::Browser,
    /// Questions of downstream servers put to the user in an editor.
    questions: Arc<questions::Questions>,
    /// Who answers a server's form question when no agent in a call can (the editor).
    asker: client::ask::AskerSlot,
}

/// A workspace's downstream servers (`hub/servers`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ServersReport {
    pub workspace: String,
    /// The files read: the user's config and the workspace's `.mcp.json`.
    pub files: Vec<String>,
    /// Files that could not be read or parsed.
    pub errors: Vec<String>,
    /// Each server's state (`ServerState`'s JSON).
    pub servers: Vec<serde_json::Value>,
}

impl Hub {
    /// Tandem's own conventional prompts as the injection takes them; rebuilt only when the
    /// memory changed.
    pub fn own_prompts(
        &self,
        memory: &crate::memory::Memory,
    ) -> Result<Vec<inject::Fetched>, crate::memory::MemoryError> {
        let version = memory.version()?;
        let mut cache = self.own.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((v, fetched)) = cache.as_ref()
            && *v == version
        {
            return Ok(fetched.clone());
        }
        let mut fetched = Vec::new();
        for (name, _) in own::PROMPTS {
            if let (Some(text), Some(kind)) = (own::text(name, memory)?, inject::detect(name)) {
                fetched.push(inject::Fetched {
                    server: own::SERVER.to_string(),
                    prompt: name.to_string(),
                    kind,
                    text,
                    priority: 0,
                });
            }
        }
        *cache = Some((version, fetched.clone()));
        Ok(fetched)
    }

    /// Plugs in who answers a server's form question when no agent in a call can (at the
    /// start, the editors' forms), or unplugs it with `None`: such questions are then
    /// declined with the reason. See [`client::ask`].
    pub fn set_asker(&self, asker: Option<Arc<dyn client::ask::Asker>>) {
        self.asker.set(asker);
    }

    /// `user_file`: the user's config (`config.json` in the data dir).
    pub fn open(user_file: PathBuf, store: Arc<Store>, bus: Bus) -> Result<Hub, StoreError> {
        let tokens =
            client::oauth::TokenStore::in_data_dir(user_file.parent().unwrap_or(Path::new(".")));
        let questions: Arc<questions::Questions> = Default::default();
        let asker = editor_forms(&questions, &bus);
        Ok(Hub {
            tokens,
            browser: client::oauth::Browser::system(),
            user_file,
            remembered: RememberedPrompts::open(store.db())?,
            trust: Trust::open(store)?,
            bus,
            workspaces: Mutex::new(HashMap::new()),
            own: Mutex::new(None),
            user_file_edit: Mutex::new(()),
            asker,
            questions,
        })
    }

    /// A workspace's downstream servers as they are now, with the files they come from.
    pub fn servers_report(&self, w: &Workspace) -> ServersReport {
        ServersReport {
            workspace: w.root().display().to_string(),
            files: vec![
                self.user_file.display().to_string(),
                w.root().join(config::WORKSPACE_FILE).display().to_string(),
            ],
            errors: w.config().errors.iter().map(|e| e.to_string()).collect(),
            servers: w
                .servers()
                .iter()
                .map(|s| serde_json::to_value(s).expect("plain data"))
                .collect(),
        }
    }

    /// The questions servers put to the user through an editor.
    pub fn questions(&self) -> &Arc<questions::Questions> {
        &self.questions
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
        let known = |all: &HashMap<PathBuf, Arc<Workspace>>| all.get(root).cloned();
        if let Some(w) = known(&self.workspaces.lock().unwrap_or_else(|p| p.into_inner())) {
            return w;
        }
        // The files are read before the lock every workspace takes: a file that is slow
        // to read holds up this workspace only.
        let read = Workspace::read(self, root);
        let mut all = self.workspaces.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(w) = known(&all) {
            return w;
        }
        let w = Arc::new(Workspace {
            root: root.to_path_buf(),
            hub: Arc::downgrade(self),
            loaded: RwLock::new(Loaded::default()),
            reload: tokio::sync::Mutex::new(()),
            conventional: Arc::new(Mutex::new(None)),
            holders: Default::default(),
        });
        w.install(self, read);
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
    /// The downstream conventional prompts, fetched once (at that instant) and kept until a
    /// server's prompts, its state or the config change, or a server's `max_age_secs` passes.
    conventional: Arc<Mutex<Option<Arc<conventional::Downstreams>>>>,
    /// How many agent sessions activated each server (`gateway`).
    holders: gateway::Holders,
}

/// What a workspace's config was read from: the files and their stamps when read.
struct Read {
    config: HubConfig,
    stamps: Vec<Option<(SystemTime, u64)>>,
}

fn stamps(hub: &Hub, root: &Path) -> Vec<Option<(SystemTime, u64)>> {
    vec![
        stamp(&hub.user_file),
        stamp(&root.join(config::WORKSPACE_FILE)),
    ]
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
        stamps(hub, &self.root)
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
        let read = Workspace::read(hub, &self.root);
        self.install(hub, read);
    }

    /// Both files of the workspace at `root`, read and resolved (no lock held).
    fn read(hub: &Hub, root: &Path) -> Read {
        let stamps = stamps(hub, root);
        let env = |var: &str| std::env::var(var).ok();
        let trusted = |file: &Path, content: &str| hub.trust.is_trusted(file, content);
        let config = config::load(&hub.user_file, root, &env, &trusted);
        for e in &config.errors {
            tracing::warn!("MCP server config: {e}");
        }
        Read { config, stamps }
    }

    /// Brings the servers in line with what was read.
    fn install(self: &Arc<Self>, hub: &Hub, read: Read) {
        let Read { config, stamps } = read;
        let workspace_trusted = config.workspace_trusted;
        let bus = hub.bus.clone();
        let root = self.root.clone();
        let cache = self.conventional.clone();
        *cache.lock().unwrap_or_else(|p| p.into_inner()) = None;
        let this = Arc::downgrade(self);
        let on_change: server::OnChange = Arc::new(move |name: &str, change| {
            if !matches!(
                change,
                server::ServerChange::Tools | server::ServerChange::Resources
            ) {
                *cache.lock().unwrap_or_else(|p| p.into_inner()) = None;
            }
            if matches!(
                change,
                server::ServerChange::Prompts | server::ServerChange::Tools
            ) && let Some(w) = this.upgrade()
            {
                w.remember(name);
            }
            bus.publish(Event::Hub {
                workspace: root.clone(),
                server: name.to_string(),
                change: match change {
                    server::ServerChange::Status => HubChange::Status,
                    server::ServerChange::Prompts => HubChange::Prompts,
                    server::ServerChange::Tools => HubChange::Tools,
                    server::ServerChange::Resources => HubChange::Resources,
                },
            });
        });
        let sign_in_bus = hub.bus.clone();
        let sign_in_root = self.root.clone();
        let auth = client::oauth::Auth {
            store: hub.tokens.clone(),
            browser: hub.browser.clone(),
            on_url: Arc::new(move |server: &str, url: &str| {
                sign_in_bus.publish(Event::SignIn {
                    workspace: sign_in_root.clone(),
                    server: server.to_string(),
                    url: url.to_string(),
                });
            }),
        };
        let fallback = client::ask::Fallback {
            root: self.root.clone(),
            asker: hub.asker.clone(),
        };
        let (task_bus, task_root) = (hub.bus.clone(), self.root.clone());
        let on_task: client::tasks::OnTask = Arc::new(move |task| {
            task_bus.publish(Event::DownstreamTask {
                workspace: task_root.clone(),
                task,
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
                        let s = Downstream::new(
                            sc.clone(),
                            trusted,
                            on_change.clone(),
                            auth.clone(),
                            fallback.clone(),
                            on_task.clone(),
                        );
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

    /// Waits until no server has been starting for less than `max` (each is ready, failed,
    /// not meant to run, or slower than that: a server that hangs at start holds up one
    /// listing at most `max`, not every listing).
    pub async fn settle(&self, max: Duration) {
        let deadline = tokio::time::Instant::now() + max;
        self.wait_for_starts(max, deadline, |_| true).await;
    }

    /// The same for the boot servers only, and until `deadline` at most: what a new agent
    /// session waits for before its first answers.
    pub async fn settle_boot(&self, max: Duration, deadline: tokio::time::Instant) {
        self.wait_for_starts(max, deadline, |s| s.config.autostart)
            .await;
    }

    /// Waits until none of the servers `counts` has been starting for less than `max`, or
    /// until `deadline`. Woken by the servers' changes on the bus (a server ready or failed
    /// publishes its status), and by the next server reaching `max`.
    async fn wait_for_starts(
        &self,
        max: Duration,
        deadline: tokio::time::Instant,
        counts: impl Fn(&Downstream) -> bool,
    ) {
        let Some(mut changes) = self.hub.upgrade().map(|hub| hub.bus.subscribe()) else {
            return;
        };
        loop {
            // Subscribed before looking: a change after this look is in `changes`.
            let left = self
                .servers_now()
                .iter()
                .filter(|s| counts(s))
                .filter_map(|s| s.starting_for())
                .filter(|t| *t < max)
                .map(|t| max - t)
                .min();
            let Some(left) = left else { return };
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return;
            }
            let until = deadline.min(now + left);
            // A change, events missed, or a server reaching `max`: look again.
            let got = tokio::time::timeout_at(until, changes.recv()).await;
            if let Ok(Err(tokio::sync::broadcast::error::RecvError::Closed)) = got {
                return;
            }
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
        loaded.servers.get(name).cloned().ok_or_else(|| {
            HubError::ServerNotFound(format!(
                "no MCP server '{name}' in this workspace (known: {})",
                names_or_none(loaded.servers.keys().map(String::as_str))
            ))
        })
    }

    /// Keeps what a ready server says now as what it said last, under its command line as
    /// written (what the data dir keeps carries no expanded credential).
    fn remember(&self, name: &str) {
        let (Some(hub), Ok(s)) = (self.hub.upgrade(), self.server(name)) else {
            return;
        };
        if let (Status::Ready, Some(runs)) = (s.status(), &s.config.runs) {
            hub.remembered.remember(&self.root, name, runs, s.said());
        }
    }

    /// What a server says of itself: while it runs, what it says now; else what it said
    /// when it last ran with the same command line, if it did (`true`: remembered).
    pub fn said(&self, s: &Downstream) -> Option<(Said, bool)> {
        if s.status() == Status::Ready {
            return Some((s.said(), false));
        }
        s.config.transport.as_ref()?;
        let (hub, runs) = (self.hub.upgrade()?, s.config.runs.as_ref()?);
        let said = hub.remembered.recall(&self.root, s.name(), runs)?;
        Some((said, true))
    }

    /// What a server offers: what it lists while it runs; for a server not started yet
    /// (`autostart: false`), what it listed when it last ran (`true`: remembered).
    fn offered_prompts(&self, s: &Downstream) -> (Arc<Vec<rmcp::model::Prompt>>, bool) {
        if s.status() == Status::Idle
            && let Some((said, true)) = self.said(s)
        {
            return (Arc::new(said.prompts), true);
        }
        (s.prompts(), false)
    }

    /// Every prompt of the servers (running, or remembered for those that start on first
    /// use), minus those a server's `disabled_prompts` names.
    pub fn prompts(&self) -> Vec<PromptInfo> {
        let mut out = Vec::new();
        for s in self.servers_now() {
            let (prompts, remembered) = self.offered_prompts(&s);
            for p in prompts.iter() {
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
                    remembered,
                });
            }
        }
        out
    }

    /// A server and one of its prompts, once the server is ready.
    async fn prompt_of(
        &self,
        server: &str,
        prompt: &str,
    ) -> Result<(Arc<Downstream>, rmcp::model::Prompt), HubError> {
        let s = self.server(server)?;
        s.ready().await?;
        let prompts = s.prompts();
        let found = prompts
            .iter()
            .find(|p| p.name == prompt && !s.config.disabled_prompts.contains(&p.name));
        match found {
            Some(p) => Ok((s.clone(), p.clone())),
            None => Err(HubError::PromptNotFound(format!(
                "server '{server}' has no prompt '{prompt}' (it has: {})",
                names_or_none(prompts.iter().map(|p| p.name.as_str()))
            ))),
        }
    }

    /// Runs a prompt with `arguments`, checked against what it declares first (unknown and
    /// missing arguments are named).
    pub async fn run(
        &self,
        server: &str,
        prompt: &str,
        arguments: BTreeMap<String, String>,
    ) -> Result<PromptRun, HubError> {
        let (s, p) = self.prompt_of(server, prompt).await?;
        let cmd = command::PromptCommand {
            server: server.to_string(),
            prompt: prompt.to_string(),
            arguments,
        };
        command::validate(&cmd, &argument_specs(&p)).map_err(HubError::from)?;
        let args = cmd
            .arguments
            .into_iter()
            .map(|(k, v)| (k, serde_json::Value::String(v)))
            .collect();
        let result = s.get_prompt(prompt, args).await?;
        Ok(PromptRun {
            server: server.to_string(),
            prompt: prompt.to_string(),
            description: result.description,
            messages: result
                .messages
                .iter()
                .map(|m| serde_json::to_value(m).expect("plain data"))
                .collect(),
        })
    }

    /// Runs a command line: `/server:prompt name=value ...`.
    pub async fn run_command(&self, line: &str) -> Result<PromptRun, HubError> {
        let cmd = command::parse(line).map_err(HubError::from)?;
        self.run(&cmd.server, &cmd.prompt, cmd.arguments).await
    }

    /// What completes at byte `cursor` of a command line being typed: prompt commands after
    /// `/`, argument names, then values (asked of the server, `completion/complete`).
    pub async fn complete(
        &self,
        line: &str,
        cursor: usize,
    ) -> Result<Vec<PromptCompletion>, HubError> {
        let Some(site) = command::site_at(line, cursor) else {
            return Ok(Vec::new());
        };
        match site {
            command::CompletionSite::Command { prefix, start } => {
                let typed = prefix.trim_start_matches('/').to_lowercase();
                Ok(self
                    .prompts()
                    .into_iter()
                    .filter(|p| {
                        let name = p.command[1..].to_lowercase();
                        name.starts_with(&typed) || p.name.to_lowercase().starts_with(&typed)
                    })
                    .map(|p| PromptCompletion {
                        insert_text: if p.arguments.is_empty() {
                            p.command.clone()
                        } else {
                            format!("{} ", p.command)
                        },
                        documentation: Some(prompt_documentation(&p)),
                        detail: p.description.clone().or(p.title.clone()),
                        label: p.command,
                        kind: "command".into(),
                        start,
                    })
                    .collect())
            }
            command::CompletionSite::ArgumentName {
                server,
                prompt,
                prefix,
                start,
                present,
            } => {
                let Some(p) = self
                    .prompts()
                    .into_iter()
                    .find(|p| p.server == server && p.name == prompt)
                else {
                    return Ok(Vec::new());
                };
                Ok(p.arguments
                    .iter()
                    .filter(|a| !present.contains(&a.name) && a.name.starts_with(&prefix))
                    .map(|a| PromptCompletion {
                        label: format!("{}=", a.name),
                        insert_text: format!("{}=", a.name),
                        kind: "argument".into(),
                        detail: Some(if a.required { "required" } else { "optional" }.into()),
                        documentation: a.description.clone(),
                        start,
                    })
                    .collect())
            }
            command::CompletionSite::ArgumentValue {
                server,
                prompt,
                argument,
                prefix,
                start,
                arguments,
            } => {
                let s = self.server(&server)?;
                let values = s
                    .complete(&prompt, &argument, &prefix, arguments.into_iter().collect())
                    .await?;
                Ok(values
                    .into_iter()
                    .map(|v| PromptCompletion {
                        insert_text: command::quote_value(&v),
                        label: v,
                        kind: "value".into(),
                        detail: Some(format!("{argument} ({server})")),
                        documentation: None,
                        start,
                    })
                    .collect())
            }
        }
    }
}

/// `a, b, c`, or `none`: what an error lists as known.
fn names_or_none<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let names: Vec<&str> = names.collect();
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

/// A prompt's arguments as the command parser checks them.
fn argument_specs(p: &rmcp::model::Prompt) -> Vec<command::ArgumentSpec> {
    p.arguments
        .iter()
        .flatten()
        .map(|a| command::ArgumentSpec {
            name: a.name.clone(),
            description: a.description.clone(),
            required: a.required.unwrap_or(false),
        })
        .collect()
}

/// The arguments of a prompt, for its completion item.
fn prompt_documentation(p: &PromptInfo) -> String {
    let mut doc = p.description.clone().unwrap_or_default();
    if !p.arguments.is_empty() {
        doc.push_str("\n\n**Arguments**\n");
        for a in &p.arguments {
            doc.push_str(&format!(
                "- `{}`{}{}\n",
                a.name,
                if a.required { " (required)" } else { "" },
                a.description
                    .as_deref()
                    .map(|d| format!(": {d}"))
                    .unwrap_or_default()
            ));
        }
    }
    doc.trim().to_string()
}
