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
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};

use crate::events::{Bus, Event, HubChange};
use crate::store::{Store, StoreError};
use config::{Condition, HubConfig};
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

/// What an injection is for: the chat thread, its model and its conversation.
#[derive(Debug, Clone, Default)]
pub struct InjectRequest {
    /// The thread's own system prompt, merged into the injected system message.
    pub thread_system: Option<String>,
    /// The model the messages go to (for prompts limited to `models`).
    pub model: Option<String>,
    /// The thread's id or name (for prompts limited to `threads`).
    pub thread: Option<String>,
    /// The conversation (OpenAI chat messages, as the client has them) that follows the
    /// injected messages; checked by [`InjectRequest::check`].
    pub conversation: Option<Vec<serde_json::Value>>,
}

impl InjectRequest {
    /// Every conversation message must be an object with a `role`; the thread's system prompt
    /// comes either as `thread_system` or as the conversation's first message, not both.
    /// The error names the field (`conversation[3].role`) and what is wrong.
    pub fn check(&self) -> Result<(), (String, String)> {
        for (i, m) in self.conversation.iter().flatten().enumerate() {
            let Some(object) = m.as_object() else {
                return Err((
                    format!("conversation[{i}]"),
                    "a conversation message must be an object such as {\"role\": \"user\", \"content\": \"...\"}".into(),
                ));
            };
            if !object.get("role").is_some_and(serde_json::Value::is_string) {
                return Err((
                    format!("conversation[{i}].role"),
                    "a conversation message needs a role (system, developer, user, assistant or tool)".into(),
                ));
            }
        }
        if self.thread_system.is_some() && self.leading_system_text().is_some() {
            return Err((
                "thread_system".into(),
                "the conversation starts with its own system message: give the thread's system \
                 prompt either there or as thread_system, not both"
                    .into(),
            ));
        }
        Ok(())
    }

    /// The text of the conversation's first message when it is a system (or developer)
    /// message with text content.
    fn leading_system_text(&self) -> Option<&str> {
        let first = self.conversation.as_ref()?.first()?;
        matches!(first["role"].as_str(), Some("system" | "developer"))
            .then(|| first["content"].as_str())
            .flatten()
    }

    /// The thread's system prompt (given, or taken from the conversation's first message),
    /// the rest of the conversation, and what to warn about.
    fn split_conversation(&self) -> (Option<String>, Option<Vec<serde_json::Value>>, Vec<String>) {
        let mut warnings = Vec::new();
        let Some(conversation) = &self.conversation else {
            return (self.thread_system.clone(), None, warnings);
        };
        if let Some(text) = self.leading_system_text() {
            return (
                Some(text.to_owned()),
                Some(conversation[1..].to_vec()),
                warnings,
            );
        }
        if conversation
            .iter()
            .any(|m| matches!(m["role"].as_str(), Some("system" | "developer")))
        {
            warnings.push(
                "the conversation has a system message that is not its first text message; it \
                 is sent where it is, after the injected messages"
                    .into(),
            );
        }
        (
            self.thread_system.clone(),
            Some(conversation.clone()),
            warnings,
        )
    }
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
    /// The downstream conventional prompts, fetched once (at that instant) and kept until a
    /// server's prompts, its state or the config change, or a server's `max_age_secs` passes.
    conventional: Arc<Mutex<Option<Arc<Downstreams>>>>,
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
                names_or_none(loaded.servers.keys().map(String::as_str))
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
                    names_or_none(prompts.iter().map(|p| p.name.as_str()))
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
    /// then the thread's system prompt, then the request's conversation. Downstream prompts
    /// are fetched once and cached until a server's prompts, its state or the config change
    /// (or a server's `max_age_secs` passes).
    pub async fn injection(
        &self,
        own: Vec<inject::Fetched>,
        request: &InjectRequest,
    ) -> inject::Injection {
        let (thread_system, conversation, mut warnings) = request.split_conversation();
        let settings = self.config().conventional;
        let mut fetched = Vec::new();
        if settings.enabled != Some(false) {
            let downstream = self.conventional_prompts(&settings).await;
            warnings.extend(downstream.warnings.iter().cloned());
            fetched = own
                .into_iter()
                .filter_map(|f| apply_rules(f, &settings, &self.root))
                .collect();
            fetched.extend(downstream.fetched.iter().cloned());
            fetched.retain(|f| {
                let rules = Rules::of(&settings, &f.server, &f.prompt);
                rules.allows(Condition::Model, request.model.as_deref())
                    && rules.allows(Condition::Thread, request.thread.as_deref())
            });
        }
        let mut injection = inject::build(&fetched, thread_system.as_deref());
        warnings.append(&mut injection.warnings);
        injection.warnings = warnings;
        if let Some(conversation) = conversation {
            injection.with_conversation = Some(
                injection
                    .messages
                    .iter()
                    .map(|m| serde_json::to_value(m).expect("plain data"))
                    .chain(conversation)
                    .collect(),
            );
        }
        injection
    }

    async fn conventional_prompts(&self, settings: &config::Conventional) -> Arc<Downstreams> {
        let cached = self
            .conventional
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(cached) = cached {
            let expired = cached.fetched.iter().any(|f| {
                settings
                    .servers
                    .get(&f.server)
                    .and_then(|r| r.max_age_secs)
                    .is_some_and(|secs| cached.at.elapsed() >= Duration::from_secs(secs))
            });
            if !expired {
                return cached;
            }
        }
        let mut jobs = tokio::task::JoinSet::new();
        let mut warnings = Vec::new();
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
                let arguments = Rules::of(settings, s.name(), &p.name).arguments();
                let missing = missing_arguments(p, &arguments);
                if !missing.is_empty() {
                    warnings.push(format!(
                        "{} from {} was not injected: it needs {}; set {} with `tandem inject \
                         set '/{}:{} {}'` or `:Tandem inject configure`",
                        p.name,
                        s.name(),
                        missing
                            .iter()
                            .map(|(name, description)| match description {
                                Some(d) => format!("'{name}' ({d})"),
                                None => format!("'{name}'"),
                            })
                            .collect::<Vec<_>>()
                            .join(" and "),
                        if missing.len() == 1 { "it" } else { "them" },
                        s.name(),
                        p.name,
                        missing
                            .iter()
                            .map(|(name, _)| format!("{name}=VALUE"))
                            .collect::<Vec<_>>()
                            .join(" "),
                    ));
                    continue;
                }
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
        let got = Arc::new(Downstreams {
            fetched,
            warnings,
            at: Instant::now(),
        });
        // A failed fetch is tried again next time; what the settings left out is kept.
        if complete {
            *self.conventional.lock().unwrap_or_else(|p| p.into_inner()) = Some(got.clone());
        }
        got
    }

    /// Every conventional prompt of this workspace (Tandem's own, then each ready server's)
    /// with its settings: what `tandem inject prompts` and `:Tandem inject configure` show.
    pub fn conventional_list(&self) -> Vec<ConventionalPrompt> {
        let settings = self.config().conventional;
        let own = own::PROMPTS.iter().map(|(name, description)| {
            (
                own::SERVER.to_string(),
                rmcp::model::Prompt::new(*name, Some(*description), None),
            )
        });
        let downstream = self.servers_now().into_iter().flat_map(|s| {
            let name = s.name().to_string();
            let prompts = s.prompts();
            prompts
                .iter()
                .filter(|p| !s.config.disabled_prompts.contains(&p.name))
                .map(|p| (name.clone(), p.clone()))
                .collect::<Vec<_>>()
        });
        own.chain(downstream)
            .filter_map(|(server, p)| {
                let kind = inject::detect(&p.name)?;
                let rules = Rules::of(&settings, &server, &p.name);
                let values = rules.arguments();
                Some(ConventionalPrompt {
                    command: format!("/{server}:{}", p.name),
                    kind: kind.name().to_string(),
                    description: p.description.clone(),
                    missing: missing_arguments(&p, &values)
                        .into_iter()
                        .map(|(name, _)| name)
                        .collect(),
                    arguments: p
                        .arguments
                        .iter()
                        .flatten()
                        .map(|a| ConventionalArgument {
                            name: a.name.clone(),
                            description: a.description.clone(),
                            required: a.required.unwrap_or(false),
                            value: values.get(&a.name).cloned(),
                        })
                        .collect(),
                    enabled: rules.enabled() && settings.enabled != Some(false),
                    in_workspace: rules.in_workspace(&self.root),
                    priority: rules.priority(),
                    models: rules.globs(Condition::Model).to_vec(),
                    threads: rules.globs(Condition::Thread).to_vec(),
                    server,
                    prompt: p.name.clone(),
                })
            })
            .collect()
    }

    /// Changes one conventional prompt's settings in the user's config (on or off, its
    /// arguments), after checking that the prompt exists, is conventional and takes those
    /// arguments; the config is reloaded at once. Answers the prompt as listed afterwards.
    pub async fn configure_conventional(
        self: &Arc<Self>,
        server: &str,
        prompt: &str,
        change: &config::PromptSettingsChange,
    ) -> Result<ConventionalPrompt, HubError> {
        let declared: Vec<command::ArgumentSpec> = if server == own::SERVER {
            if !own::PROMPTS.iter().any(|(name, _)| *name == prompt) {
                return Err(HubError {
                    code: "PROMPT_NOT_FOUND",
                    message: format!(
                        "Tandem has no prompt '{prompt}' (it has: {})",
                        names_or_none(own::PROMPTS.iter().map(|(n, _)| *n))
                    ),
                });
            }
            Vec::new()
        } else {
            let (_, p) = self.prompt_of(server, prompt).await?;
            argument_specs(&p)
        };
        if inject::detect(prompt).is_none() {
            return Err(HubError {
                code: "INVALID_ARGUMENT",
                message: format!(
                    "'{prompt}' is not a conventional prompt (system_prompt, tool_instructions, \
                     user_prompt, assistant_prompt, tool_call:X, tool_result:X or tool_answer:X): \
                     the injection never takes it"
                ),
            });
        }
        for name in change.arguments.keys() {
            if !declared.iter().any(|a| &a.name == name) {
                return Err(HubError {
                    code: "UNKNOWN_ARGUMENT",
                    message: format!(
                        "/{server}:{prompt} has no argument '{name}' (it takes: {})",
                        names_or_none(declared.iter().map(|a| a.name.as_str()))
                    ),
                });
            }
        }
        let hub = self.hub.upgrade().ok_or_else(|| HubError {
            code: "INTERNAL_ERROR",
            message: "the hub is shutting down".into(),
        })?;
        config::edit_prompt_settings(&hub.user_file, server, prompt, change).map_err(|e| {
            HubError {
                code: "CONFIG_INVALID",
                message: e.to_string(),
            }
        })?;
        let _one = self.reload.lock().await;
        self.apply(&hub);
        self.conventional_list()
            .into_iter()
            .find(|c| c.server == server && c.prompt == prompt)
            .ok_or_else(|| HubError {
                code: "PROMPT_NOT_FOUND",
                message: format!("/{server}:{prompt} is gone after the config reload"),
            })
    }
}

/// The downstream conventional prompts as fetched, and why some were not.
#[derive(Debug)]
struct Downstreams {
    fetched: Vec<inject::Fetched>,
    warnings: Vec<String>,
    /// When they were fetched (for `max_age_secs`).
    at: Instant,
}

/// A conventional prompt and its settings, as `tandem inject prompts` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConventionalPrompt {
    pub server: String,
    pub prompt: String,
    /// `/server:prompt`, as `tandem inject set` takes it.
    pub command: String,
    /// `system_prompt`, `tool_instructions`, `user_prompt`, `assistant_prompt`, `tool_call`
    /// or `tool_result`.
    pub kind: String,
    pub description: Option<String>,
    pub arguments: Vec<ConventionalArgument>,
    /// Required arguments without a configured value: the prompt is not injected until set.
    pub missing: Vec<String>,
    /// Off in the settings (the prompt's, else its server's, else the whole injection's).
    pub enabled: bool,
    /// Whether the settings' `workspaces` include this workspace.
    pub in_workspace: bool,
    /// Lower goes first within its kind.
    pub priority: i64,
    /// The model and thread globs it is limited to (empty: any).
    pub models: Vec<String>,
    pub threads: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConventionalArgument {
    pub name: String,
    pub description: Option<String>,
    pub required: bool,
    /// The value in the settings, if any.
    pub value: Option<String>,
}

/// The required arguments of `p` that `given` lacks: `(name, description)`.
fn missing_arguments(
    p: &rmcp::model::Prompt,
    given: &BTreeMap<String, String>,
) -> Vec<(String, Option<String>)> {
    p.arguments
        .iter()
        .flatten()
        .filter(|a| a.required == Some(true) && !given.contains_key(&a.name))
        .map(|a| (a.name.clone(), a.description.clone()))
        .collect()
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

/// The settings of one conventional prompt: its own rules, else its server's.
struct Rules<'a> {
    server: Option<&'a config::ServerRules>,
    prompt: Option<&'a config::PromptRules>,
}

impl<'a> Rules<'a> {
    fn of(settings: &'a config::Conventional, server: &str, prompt: &str) -> Rules<'a> {
        let server = settings.servers.get(server);
        Rules {
            server,
            prompt: server.and_then(|s| s.prompts.get(prompt)),
        }
    }

    fn enabled(&self) -> bool {
        self.prompt
            .and_then(|p| p.enabled)
            .or(self.server.and_then(|s| s.enabled))
            .unwrap_or(true)
    }

    /// Both the server's and the prompt's `workspaces` (when given) include `root`.
    fn in_workspace(&self, root: &Path) -> bool {
        let matches =
            |globs: &[String]| globs.is_empty() || globs.iter().any(|g| workspace_matches(g, root));
        self.server.is_none_or(|s| matches(&s.workspaces))
            && self.prompt.is_none_or(|p| matches(&p.workspaces))
    }

    fn priority(&self) -> i64 {
        self.prompt
            .and_then(|p| p.priority)
            .or(self.server.and_then(|s| s.priority))
            .unwrap_or(0)
    }

    /// The globs a condition limits the prompt to (empty: no limit).
    fn globs(&self, condition: Condition) -> &'a [String] {
        match self
            .prompt
            .map(|p| p.globs(condition))
            .filter(|g| !g.is_empty())
        {
            Some(globs) => globs,
            None => self.server.map_or(&[], |s| s.globs(condition)),
        }
    }

    /// Whether the prompt applies to a request naming `value` (its model or thread): any
    /// value when unlimited; a request naming none gets none of the limited prompts.
    fn allows(&self, condition: Condition, value: Option<&str>) -> bool {
        let globs = self.globs(condition);
        if globs.is_empty() {
            return true;
        }
        let Some(value) = value else { return false };
        globs.iter().any(|g| {
            globset::GlobBuilder::new(g)
                .case_insensitive(true)
                .build()
                .is_ok_and(|g| g.compile_matcher().is_match(value))
        })
    }

    fn arguments(&self) -> BTreeMap<String, String> {
        self.prompt.map(|p| p.arguments.clone()).unwrap_or_default()
    }
}

/// Applies the settings to one conventional prompt: `None` when disabled or out of its
/// workspaces, else with its priority.
fn apply_rules(
    mut f: inject::Fetched,
    settings: &config::Conventional,
    root: &Path,
) -> Option<inject::Fetched> {
    let rules = Rules::of(settings, &f.server, &f.prompt);
    if !rules.enabled() || !rules.in_workspace(root) {
        return None;
    }
    f.priority = rules.priority();
    Some(f)
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
