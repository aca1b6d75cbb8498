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
pub mod own;
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
pub struct Completion {
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
    /// Tandem's own conventional prompts, with the memory version they were built at.
    own: Mutex<Option<(u64, Vec<inject::Fetched>)>>,
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

    /// `user_file`: the user's config (`config.json` in the data dir).
    pub fn open(user_file: PathBuf, store: Arc<Store>, bus: Bus) -> Result<Hub, StoreError> {
        Ok(Hub {
            user_file,
            trust: Trust::open(store)?,
            bus,
            workspaces: Mutex::new(HashMap::new()),
            own: Mutex::new(None),
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
            conventional: Arc::new(Mutex::new(None)),
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
    /// The downstream conventional prompts, fetched once and kept until a server's prompts,
    /// its state or the config change.
    conventional: Arc<Mutex<Option<Arc<Vec<inject::Fetched>>>>>,
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
        let cache = self.conventional.clone();
        *cache.lock().unwrap_or_else(|p| p.into_inner()) = None;
        let on_change: server::OnChange = Arc::new(move |name: &str, change| {
            if change != server::Change::Tools {
                *cache.lock().unwrap_or_else(|p| p.into_inner()) = None;
            }
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
            None => Err(HubError {
                code: "PROMPT_NOT_FOUND",
                message: format!(
                    "server '{server}' has no prompt '{prompt}' (it has: {})",
                    if prompts.is_empty() {
                        "none".to_string()
                    } else {
                        prompts
                            .iter()
                            .map(|p| p.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                ),
            }),
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
        command::validate(&cmd, &argument_specs(&p)).map_err(command_error)?;
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
        let cmd = command::parse(line).map_err(command_error)?;
        self.run(&cmd.server, &cmd.prompt, cmd.arguments).await
    }

    /// What completes at byte `cursor` of a command line being typed: prompt commands after
    /// `/`, argument names, then values (asked of the server, `completion/complete`).
    pub async fn complete(&self, line: &str, cursor: usize) -> Result<Vec<Completion>, HubError> {
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
                    .map(|p| Completion {
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
                    .map(|a| Completion {
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
                    .map(|v| Completion {
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

    /// The conventional prompts injection (spec 000) for this workspace: Tandem's own
    /// prompts (`own`, already fetched) and every running server's, as the settings say,
    /// then the thread's system prompt. Downstream prompts are fetched once and cached until
    /// a server's prompts, its state or the config change.
    pub async fn injection(
        &self,
        own: Vec<inject::Fetched>,
        thread_system: Option<&str>,
        model: Option<&str>,
    ) -> inject::Injection {
        let settings = self.config().conventional;
        if settings.enabled == Some(false) {
            return inject::build(&[], thread_system);
        }
        let (downstream, mut warnings) = self.conventional_prompts(&settings).await;
        let mut fetched: Vec<inject::Fetched> = own
            .into_iter()
            .filter_map(|f| apply_rules(f, &settings, &self.root))
            .collect();
        fetched.extend(downstream.iter().cloned());
        fetched.retain(|f| model_allows(f, &settings, model));
        let mut injection = inject::build(&fetched, thread_system);
        warnings.append(&mut injection.warnings);
        injection.warnings = warnings;
        injection
    }

    async fn conventional_prompts(
        &self,
        settings: &config::Conventional,
    ) -> (Arc<Vec<inject::Fetched>>, Vec<String>) {
        if let Some(cached) = self
            .conventional
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        {
            return (cached, Vec::new());
        }
        let mut jobs = tokio::task::JoinSet::new();
        for s in self.servers_now() {
            if s.status() != Status::Ready {
                continue;
            }
            for p in s.prompts().iter() {
                if s.config.disabled_prompts.contains(&p.name) {
                    continue;
                }
                let Some(kind) = inject::detect(&p.name) else {
                    continue;
                };
                let base = inject::Fetched {
                    server: s.name().to_string(),
                    prompt: p.name.clone(),
                    kind,
                    text: String::new(),
                    priority: 0,
                };
                let Some(base) = apply_rules(base, settings, &self.root) else {
                    continue;
                };
                let arguments = settings
                    .servers
                    .get(s.name())
                    .and_then(|r| r.prompts.get(&p.name))
                    .map(|r| r.arguments.clone())
                    .unwrap_or_default();
                let s = s.clone();
                let order = jobs.len();
                jobs.spawn(async move {
                    let args = arguments
                        .into_iter()
                        .map(|(k, v)| (k, serde_json::Value::String(v)))
                        .collect();
                    let got = s.get_prompt(&base.prompt, args).await;
                    (order, base, got)
                });
            }
        }
        let mut fetched = Vec::new();
        let mut warnings = Vec::new();
        let mut complete = true;
        let mut done: Vec<_> = jobs.join_all().await;
        // In server and list order, so equal priorities keep it.
        done.sort_by_key(|(order, ..)| *order);
        for (_, mut base, got) in done {
            match got {
                Ok(result) => {
                    base.text = prompt_text(&result);
                    fetched.push(base);
                }
                Err(e) => {
                    complete = false;
                    warnings.push(format!(
                        "{} from {} was not injected: {}",
                        base.prompt, base.server, e.message
                    ));
                }
            }
        }
        let fetched = Arc::new(fetched);
        if complete {
            *self.conventional.lock().unwrap_or_else(|p| p.into_inner()) = Some(fetched.clone());
        }
        (fetched, warnings)
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

fn command_error(e: command::CommandError) -> HubError {
    HubError {
        code: e.code(),
        message: e.to_string(),
    }
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

/// The text of a prompt's messages (images and other binary content are left out: the
/// injection is text).
fn prompt_text(result: &rmcp::model::GetPromptResult) -> String {
    let value = serde_json::to_value(&result.messages).unwrap_or_default();
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| {
            let c = &m["content"];
            match c["type"].as_str() {
                Some("text") => c["text"].as_str().map(str::to_string),
                Some("resource") => c["resource"]["text"].as_str().map(str::to_string),
                _ => None,
            }
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// Applies the settings to one conventional prompt: `None` when disabled or out of its
/// workspaces, else with its priority.
fn apply_rules(
    mut f: inject::Fetched,
    settings: &config::Conventional,
    root: &Path,
) -> Option<inject::Fetched> {
    let server = settings.servers.get(&f.server);
    let prompt = server.and_then(|s| s.prompts.get(&f.prompt));
    let enabled = prompt
        .and_then(|p| p.enabled)
        .or(server.and_then(|s| s.enabled))
        .unwrap_or(true);
    if !enabled {
        return None;
    }
    let in_workspace =
        |globs: &[String]| globs.is_empty() || globs.iter().any(|g| workspace_matches(g, root));
    if !server.is_none_or(|s| in_workspace(&s.workspaces))
        || !prompt.is_none_or(|p| in_workspace(&p.workspaces))
    {
        return None;
    }
    f.priority = prompt
        .and_then(|p| p.priority)
        .or(server.and_then(|s| s.priority))
        .unwrap_or(0);
    Some(f)
}

/// Whether the settings limit a prompt to models, and if so whether `model` is one of them.
fn model_allows(f: &inject::Fetched, settings: &config::Conventional, model: Option<&str>) -> bool {
    let server = settings.servers.get(&f.server);
    let prompt = server.and_then(|s| s.prompts.get(&f.prompt));
    let globs = match prompt.filter(|p| !p.models.is_empty()) {
        Some(p) => &p.models,
        None => match server {
            Some(s) => &s.models,
            None => return true,
        },
    };
    if globs.is_empty() {
        return true;
    }
    let Some(model) = model else { return false };
    globs.iter().any(|g| {
        globset::GlobBuilder::new(g)
            .case_insensitive(true)
            .build()
            .is_ok_and(|g| g.compile_matcher().is_match(model))
    })
}

/// Whether a workspace root matches a setting's glob (`~` is the home dir; a path without
/// glob characters matches itself and everything under it).
fn workspace_matches(pattern: &str, root: &Path) -> bool {
    let pattern = match pattern.strip_prefix("~/") {
        Some(rest) => match directories::BaseDirs::new() {
            Some(b) => b.home_dir().join(rest).display().to_string(),
            None => return false,
        },
        None => pattern.to_string(),
    };
    let pattern = pattern.trim_end_matches('/');
    if !pattern.contains(['*', '?', '[', '{']) {
        return root.starts_with(pattern);
    }
    globset::Glob::new(pattern).is_ok_and(|g| g.compile_matcher().is_match(root))
}
