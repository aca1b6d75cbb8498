//! The gateway (spec 001): one agent session's view of its workspace's servers. The agent
//! sees every server the user has (`environment`, `discover`), activates the ones it needs
//! (`activate`: their tools join the session as `server__tool`), calls them through Tandem
//! (`call`), and deactivates them when done (`deactivate`).
//!
//! Boot servers (`autostart`, the default) are active from the session's start; the others
//! are activated per session and never persisted. A server activated by several sessions
//! runs once; it stops when the last session that activated it lets it go (unless it is a
//! boot server, which runs for the workspace).

pub mod catalog;
pub mod proxy;

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, GetPromptResult, JsonObject,
    ProgressNotificationParam, Prompt, ReadResourceResult, Resource, Tool,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::client::ask::Answerer;
use super::config::known_servers;
use super::{Downstream, HubError, Status, Workspace};
use catalog::{Discovered, Readiness, Searchable, ServerInfo};
use proxy::ToolNames;

/// How many activations a session may ask for within [`ACTIVATION_WINDOW`].
pub const ACTIVATIONS_PER_WINDOW: usize = 5;
pub const ACTIVATION_WINDOW: Duration = Duration::from_secs(60);
/// A description the catalog keeps from a server's `instructions`: their first sentence, at
/// most this many characters.
const DESCRIPTION_CHARS: usize = 160;

/// What an agent session activated, and when it asked.
#[derive(Default)]
struct Session {
    activated: BTreeSet<String>,
    /// When each recent activation was asked for (the rate limit's window).
    asked: VecDeque<Instant>,
}

/// One agent session's gateway on a workspace.
pub struct Gateway {
    workspace: Arc<Workspace>,
    session: Mutex<Session>,
}

/// A tool a server brings to the session, as the agent calls it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolAdded {
    /// The name to call it by (`server__tool`).
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its arguments' JSON Schema, `$ref`s inlined.
    pub input_schema: JsonObject,
}

/// `mcp_activate`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Activated {
    pub name: String,
    pub status: Readiness,
    /// The tools now in the session, with their schemas, so a client that does not
    /// refresh its tool list can still call them (through `mcp_call`, or by name).
    pub tools_added: Vec<ToolAdded>,
    /// What the server says about using it, if it says anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
}

/// `mcp_deactivate`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Deactivated {
    pub name: String,
    pub status: Readiness,
    /// The names of the tools that left the session.
    pub tools_removed: Vec<String>,
}

impl Gateway {
    pub fn new(workspace: Arc<Workspace>) -> Gateway {
        Gateway {
            workspace,
            session: Mutex::new(Session::default()),
        }
    }

    /// The workspace's root.
    pub fn root(&self) -> &std::path::Path {
        self.workspace.root()
    }

    fn session(&self) -> std::sync::MutexGuard<'_, Session> {
        self.session.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `s`'s tools are in this session: a boot server, or one it activated.
    fn is_active(&self, s: &Downstream) -> bool {
        s.config.autostart || self.session().activated.contains(s.name())
    }

    /// Every server of the workspace, as the agent sees it (`mcp_environment`).
    pub fn environment(&self) -> Vec<ServerInfo> {
        self.workspace
            .servers_now()
            .iter()
            .map(|s| self.info(s))
            .collect()
    }

    /// The catalog as the agent's instructions carry it ([`catalog::render`]).
    pub fn catalog(&self) -> String {
        catalog::render(&self.environment())
    }

    /// How long the session's first answers wait for boot servers still starting (the
    /// user's `bootWaitMs`).
    pub fn boot_wait(&self) -> Duration {
        self.workspace.config().boot_wait()
    }

    /// Waits for the boot servers still starting (each at most [`Gateway::boot_wait`]
    /// since it began), until `deadline` at most.
    pub async fn settle_boot(&self, deadline: tokio::time::Instant) {
        self.workspace.settle_boot(self.boot_wait(), deadline).await;
    }

    /// The servers' part of the agent's instructions ([`catalog::render_servers_part`]):
    /// the active servers' conventional system prompts and tool instructions (spec 000),
    /// fetched by `deadline`, within [`catalog::INSTRUCTIONS_TOKENS`]; what was left out;
    /// and the servers still starting.
    pub async fn servers_part(&self, deadline: tokio::time::Instant) -> String {
        let active = |name: &str| {
            self.workspace
                .server(name)
                .is_ok_and(|s| self.is_active(&s))
        };
        let injected = self
            .workspace
            .system_injection(active, catalog::INSTRUCTIONS_TOKENS, deadline)
            .await;
        for w in &injected.system.warnings {
            tracing::info!("agent instructions: {w}");
        }
        let starting: Vec<String> = self
            .active()
            .iter()
            .filter(|s| s.status() == Status::Starting)
            .map(|s| s.name().to_string())
            .collect();
        catalog::render_servers_part(&injected.system, &injected.warnings, &starting)
    }

    fn info(&self, s: &Downstream) -> ServerInfo {
        let said = self.workspace.said(s).map(|(said, _)| said);
        let known = s.config.well_known();
        let status = s.status();
        let (status, problem) = match status {
            Status::Untrusted => (Readiness::Untrusted, None),
            Status::Disabled => (Readiness::Disabled, None),
            Status::MissingCredentials => (Readiness::MissingCredentials, None),
            Status::NeedsSignIn => (Readiness::NeedsSignIn, s.state().last_error),
            Status::Misconfigured => (
                Readiness::Disabled,
                s.config.error.as_ref().map(|e| e.to_string()),
            ),
            Status::Restarting { .. } | Status::Failed if self.is_active(s) => {
                (Readiness::Active, s.state().last_error)
            }
            _ if self.is_active(s) => (Readiness::Active, None),
            _ => (Readiness::Available, None),
        };
        let info = said.as_ref().and_then(|said| said.server_info.as_ref());
        let description = s
            .config
            .description
            .clone()
            .or_else(|| info.and_then(|i| i.description.clone()))
            .or_else(|| {
                said.as_ref()
                    .and_then(|said| said.instructions.as_deref())
                    .and_then(first_sentence)
            })
            .or_else(|| known.map(|k| k.description.to_string()))
            .or_else(|| info.and_then(|i| i.title.clone()))
            .unwrap_or_default();
        ServerInfo {
            name: s.name().to_string(),
            status,
            category: s
                .config
                .category
                .clone()
                .or_else(|| known.map(|k| k.category.to_string()))
                .unwrap_or_else(|| catalog::UNCATEGORISED.to_string()),
            is_core: s.config.is_core(),
            // What a server says of itself may quote what it was given.
            description: s.config.redact(&description),
            missing_env_keys: s.config.missing_env_keys.clone(),
            problem: problem.map(|p| s.config.redact(&p)),
        }
    }

    /// The servers that best fit `intent` (`mcp_discover`).
    pub fn discover(&self, intent: &str) -> Vec<Discovered> {
        let servers = self.workspace.servers_now();
        let infos: Vec<ServerInfo> = servers.iter().map(|s| self.info(s)).collect();
        let searchable: Vec<Searchable> = servers
            .iter()
            .zip(&infos)
            .map(|(s, info)| {
                let mut known_as = vec![known_servers::normalise(s.name())];
                if let Some(k) = s.config.well_known() {
                    known_as.push(k.names[0].to_string());
                }
                let tools = self
                    .workspace
                    .said(s)
                    .map(|(said, _)| {
                        said.tools
                            .iter()
                            .map(|t| {
                                let description = t.description.as_deref().unwrap_or_default();
                                (t.name.to_string(), description.to_string())
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                Searchable {
                    info,
                    known_as,
                    tools,
                }
            })
            .collect();
        catalog::discover(intent, &searchable)
    }

    /// Activates `name` for this session: the spec's checks in order (it exists, is
    /// trusted, is not disabled, has its credentials, is not active yet, the session is
    /// within its rate), then the server is connected (started if it was not running) and
    /// its tools join the session. A remote server that asks for a sign-in (a boot server
    /// too, which is active already) gets one first: the user approves in the browser,
    /// within the entry's time limit.
    pub async fn activate(&self, name: &str) -> Result<Activated, HubError> {
        let s = self.workspace.server(name)?;
        let file = s.config.origin.file().display().to_string();
        match s.status() {
            Status::Untrusted => {
                return Err(HubError::Untrusted(format!(
                    "Server '{name}' comes from {file}, which the user has not approved yet: \
                     they review it and run `tandem trust`"
                )));
            }
            Status::Disabled => {
                return Err(HubError::Disabled(format!(
                    "Server '{name}' is disabled in {file}"
                )));
            }
            Status::Misconfigured => {
                let why = s.config.error.as_ref().map(|e| e.to_string());
                return Err(HubError::Disabled(format!(
                    "Server '{name}' cannot run: {}",
                    why.unwrap_or_else(|| "its entry is wrong".into())
                )));
            }
            Status::MissingCredentials => {
                return Err(HubError::MissingCredentials {
                    server: name.to_string(),
                    keys: s.config.missing_env_keys.clone(),
                });
            }
            _ => {}
        }
        let already = s.config.autostart || self.session().activated.contains(name);
        if already && s.status() != Status::NeedsSignIn {
            return Err(HubError::AlreadyActive(name.to_string()));
        }
        if !already {
            let mut session = self.session();
            let now = Instant::now();
            while session
                .asked
                .front()
                .is_some_and(|t| now.duration_since(*t) >= ACTIVATION_WINDOW)
            {
                session.asked.pop_front();
            }
            if session.asked.len() >= ACTIVATIONS_PER_WINDOW {
                let oldest = session.asked[0];
                let wait = ACTIVATION_WINDOW.saturating_sub(now.duration_since(oldest));
                return Err(HubError::RateLimited {
                    limit: ACTIVATIONS_PER_WINDOW,
                    per_secs: ACTIVATION_WINDOW.as_secs(),
                    retry_after_secs: wait.as_secs().max(1),
                });
            }
            session.asked.push_back(now);
            session.activated.insert(name.to_string());
            drop(session);
            self.workspace.hold(name);
        }
        let ready = match s.ready().await {
            Err(_) if s.status() == Status::NeedsSignIn => s.sign_in(None).await.map(|_| ()),
            ready => ready,
        };
        if let Err(e) = ready {
            if !already {
                self.session().activated.remove(name);
                self.workspace.release(name);
            }
            return Err(e);
        }
        Ok(Activated {
            name: name.to_string(),
            status: Readiness::Active,
            tools_added: s
                .proxied()
                .tools
                .iter()
                .map(|t| ToolAdded {
                    name: t.name.to_string(),
                    description: t.description.as_deref().map(str::to_string),
                    input_schema: t.input_schema.as_ref().clone(),
                })
                .collect(),
            instructions: s.said().instructions,
        })
    }

    /// Deactivates `name` for this session. A core server and a boot server are refused;
    /// so is a server this session did not activate.
    pub fn deactivate(&self, name: &str) -> Result<Deactivated, HubError> {
        let s = self.workspace.server(name)?;
        if s.config.is_core() {
            return Err(HubError::CoreServer(name.to_string()));
        }
        if !self.session().activated.contains(name) {
            return Err(if s.config.autostart {
                HubError::BootServer(name.to_string())
            } else {
                HubError::NotActive(name.to_string())
            });
        }
        let tools_removed = s
            .tools()
            .iter()
            .map(|t| proxy::tool_name(name, &t.name))
            .collect();
        self.session().activated.remove(name);
        self.workspace.release(name);
        Ok(Deactivated {
            name: name.to_string(),
            status: Readiness::Available,
            tools_removed,
        })
    }

    /// The servers whose tools are in the session, ready or not.
    fn active(&self) -> Vec<Arc<Downstream>> {
        self.workspace
            .servers_now()
            .into_iter()
            .filter(|s| {
                self.is_active(s)
                    && !matches!(
                        s.status(),
                        Status::Untrusted
                            | Status::Disabled
                            | Status::Misconfigured
                            | Status::MissingCredentials
                    )
            })
            .collect()
    }

    /// The tools of the session's active servers that are ready, as the agent lists them:
    /// named `server__tool`, their schemas without `$ref`s (made once per server list).
    pub fn tools(&self) -> Vec<Tool> {
        let mut out = Vec::new();
        for s in self.active() {
            if s.status() == Status::Ready {
                out.extend(s.proxied().tools.iter().cloned());
            }
        }
        out
    }

    /// The prompts of the session's active servers that are ready, named `server__prompt`
    /// (as tools are), minus those a server's `disabled_prompts` names.
    pub fn prompts(&self) -> Vec<Prompt> {
        let mut out = Vec::new();
        for s in self.active() {
            if s.status() != Status::Ready {
                continue;
            }
            for p in s.prompts().iter() {
                if s.config.disabled_prompts.contains(&p.name) {
                    continue;
                }
                let mut prompt = p.clone();
                prompt.name = proxy::tool_name(s.name(), &p.name);
                out.push(prompt);
            }
        }
        out
    }

    /// Gets the proxied prompt `name` (`server__prompt`) with `arguments`, as its server
    /// gives it; `None` when no active server has a prompt of that name. What the server
    /// asks meanwhile goes to `caller`, if it takes it.
    pub async fn get_prompt(
        &self,
        name: &str,
        arguments: JsonObject,
        caller: Option<Arc<dyn Answerer>>,
    ) -> Option<Result<GetPromptResult, HubError>> {
        let mut names = ToolNames::default();
        let active = self.active();
        for s in &active {
            for p in s.prompts().iter() {
                names.insert(s.name(), &p.name);
            }
        }
        let (server, prompt) = names.resolve(name)?;
        let s = active.iter().find(|s| s.name() == server)?;
        let _calling = caller.map(|c| s.calling(c));
        Some(s.get_prompt(prompt, arguments).await)
    }

    /// The resources the session's active servers list, their URIs as the servers wrote
    /// them and their names as `server__name`, so the agent sees whose each is.
    pub fn resources(&self) -> Vec<Resource> {
        let mut out = Vec::new();
        for s in self.active() {
            if s.status() != Status::Ready {
                continue;
            }
            for r in s.resources().iter() {
                let mut resource = r.clone();
                resource.name = proxy::tool_name(s.name(), &r.name);
                out.push(resource);
            }
        }
        out
    }

    /// Reads `uri` from the active server that lists it; `None` when none does. What the
    /// server asks meanwhile goes to `caller`, if it takes it.
    pub async fn read_resource(
        &self,
        uri: &str,
        caller: Option<Arc<dyn Answerer>>,
    ) -> Option<Result<ReadResourceResult, HubError>> {
        let s = self
            .active()
            .into_iter()
            .find(|s| s.resources().iter().any(|r| r.uri == uri))?;
        let _calling = caller.map(|c| s.calling(c));
        Some(s.read_resource(uri).await)
    }

    /// The server and tool the proxied name `name` (`server__tool`) stands for, if an active
    /// server of the session has it.
    pub fn resolve(&self, name: &str) -> Option<(String, String)> {
        self.active().iter().find_map(|s| {
            let proxied = s.proxied();
            let tool = proxied.original(name)?;
            Some((s.name().to_string(), tool.to_string()))
        })
    }

    /// Calls `tool` of the active server `server` with `arguments`; its result (an
    /// `isError` one included) as the server gave it, its progress notifications to
    /// `progress`, what it asks meanwhile to `caller` (if it takes it). Dropping the future
    /// cancels the call on the server, and its questions.
    pub async fn call(
        &self,
        server: &str,
        tool: &str,
        arguments: Option<JsonObject>,
        progress: Option<tokio::sync::mpsc::UnboundedSender<ProgressNotificationParam>>,
        caller: Option<Arc<dyn Answerer>>,
    ) -> Result<CallToolResult, HubError> {
        let (s, params) = self.callable(server, tool, arguments).await?;
        let _calling = caller.map(|c| s.calling(c));
        s.call_tool(params, progress).await
    }

    /// How long a question of `server` that a person answers may wait: its
    /// `question_timeout_ms`, else the default.
    pub fn question_timeout(&self, server: &str) -> Duration {
        self.workspace
            .server(server)
            .map_or(crate::hub::config::DEFAULT_QUESTION_TIMEOUT, |s| {
                s.question_timeout()
            })
    }

    /// [`Gateway::call`] for a caller that takes tasks (the tasks extension): a task the
    /// server answers with is returned as it is, with the server that runs it.
    pub async fn call_once(
        &self,
        server: &str,
        tool: &str,
        arguments: Option<JsonObject>,
        caller: Option<Arc<dyn Answerer>>,
    ) -> Result<(Arc<Downstream>, CallToolResponse), HubError> {
        let (s, params) = self.callable(server, tool, arguments).await?;
        let _calling = caller.map(|c| s.calling(c));
        let response = s.call_tool_once(params, None).await?;
        Ok((s, response))
    }

    /// The active server `server`, ready, and the request calling its tool `tool`.
    async fn callable(
        &self,
        server: &str,
        tool: &str,
        arguments: Option<JsonObject>,
    ) -> Result<(Arc<Downstream>, CallToolRequestParams), HubError> {
        let s = self.workspace.server(server)?;
        if !self.is_active(&s) {
            return Err(HubError::NotActive(server.to_string()));
        }
        s.ready().await?;
        if !s.tools().iter().any(|t| t.name == tool) {
            let names: Vec<String> = s.tools().iter().map(|t| t.name.to_string()).collect();
            return Err(HubError::ToolNotFound(format!(
                "Server '{server}' has no tool '{tool}' (it has: {})",
                super::names_or_none(names.iter().map(String::as_str))
            )));
        }
        let mut params = CallToolRequestParams::new(tool.to_string());
        params.arguments = arguments;
        Ok((s, params))
    }

    /// The agent `agent` of this session changed its roots: the session's active servers
    /// that run are told, and ask it for them.
    pub async fn roots_changed(&self, agent: &Arc<dyn Answerer>) {
        for s in self.active() {
            if s.status() == Status::Ready {
                s.roots_changed(agent).await;
            }
        }
    }
}

impl Drop for Gateway {
    /// The session's activations end with it.
    fn drop(&mut self) {
        let activated = std::mem::take(&mut self.session().activated);
        for name in activated {
            self.workspace.release(&name);
        }
    }
}

/// The first sentence of `text`, if it is short enough to describe a server.
fn first_sentence(text: &str) -> Option<String> {
    let text = text.trim();
    let end = text
        .char_indices()
        .find(|&(i, c)| {
            c == '\n'
                || matches!(c, '.' | '!' | '?')
                    && text[i + c.len_utf8()..]
                        .chars()
                        .next()
                        .is_none_or(char::is_whitespace)
        })
        .map_or(
            text.len(),
            |(i, c)| if c == '\n' { i } else { i + c.len_utf8() },
        );
    let sentence = text[..end].trim();
    (!sentence.is_empty() && sentence.chars().count() <= DESCRIPTION_CHARS)
        .then(|| sentence.to_string())
}

/// How many agent sessions activated each server of a workspace.
#[derive(Default)]
pub(super) struct Holders(Mutex<HashMap<String, usize>>);

impl Workspace {
    /// One more session uses `name`.
    fn hold(&self, name: &str) {
        let mut holders = self.holders.0.lock().unwrap_or_else(|p| p.into_inner());
        *holders.entry(name.to_string()).or_default() += 1;
    }

    /// One session less uses `name`: with none left, a server that is not a boot server
    /// stops.
    fn release(&self, name: &str) {
        let none_left = {
            let mut holders = self.holders.0.lock().unwrap_or_else(|p| p.into_inner());
            let n = holders.entry(name.to_string()).or_default();
            *n = n.saturating_sub(1);
            let none = *n == 0;
            if none {
                holders.remove(name);
            }
            none
        };
        if none_left
            && let Ok(s) = self.server(name)
            && !s.config.autostart
        {
            tracing::info!("server {name}: no session uses it any more; stopping it");
            s.stop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptions_take_the_first_short_sentence() {
        let cases = [
            ("Reads files. Writes them too.", Some("Reads files.")),
            ("Search the web\nwith many engines", Some("Search the web")),
            (
                "Version 1.2 of the tool is here",
                Some("Version 1.2 of the tool is here"),
            ),
            ("  ", None),
            (&"long ".repeat(50), None),
        ];
        for (text, want) in cases {
            assert_eq!(first_sentence(text).as_deref(), want, "{text:?}");
        }
    }
}
