//! The conventional prompts injection for a workspace (spec 000, and the "future
//! evolutions" it lists): what a request says (`InjectRequest`: the thread's system prompt,
//! model, thread, conversation), the settings that apply to each prompt (`Rules`: on/off,
//! priority, workspaces, models, threads, arguments), fetching the downstream prompts once
//! (cached until something changes), and listing and configuring them for the editor and
//! the CLI. `inject` orders and renders; this module decides what goes in.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{command, inject, own};
use crate::hub::config::{self, Condition};
use crate::hub::{HubError, Status, Workspace, argument_specs, names_or_none};

/// A conventional prompt as a settings edit names it.
#[derive(Debug, Clone, PartialEq)]
pub enum PromptTarget {
    /// A `/server:prompt name=value ...` line; its arguments are part of the edit.
    Line(String),
    Named {
        server: String,
        prompt: String,
    },
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

impl Workspace {
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
            let downstream = self.conventional_prompts(&settings, None).await;
            warnings.extend(downstream.warnings.iter().map(|w| w.text.clone()));
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

    /// The servers' conventional prompts as the settings give them, from the cache when it
    /// holds them. A fetch not done by `deadline`, when there is one, is left out with a
    /// warning (and the cache not filled, so the next asks again).
    async fn conventional_prompts(
        &self,
        settings: &config::Conventional,
        deadline: Option<tokio::time::Instant>,
    ) -> Arc<Downstreams> {
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
                    warnings.push(Skipped::of(
                        &base,
                        format!(
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
                        ),
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
                    let got = match deadline {
                        None => s.get_prompt(&base.prompt, args).await,
                        Some(deadline) => {
                            tokio::time::timeout_at(deadline, s.get_prompt(&base.prompt, args))
                                .await
                                .unwrap_or_else(|_| {
                                    Err(HubError::Timeout(
                                        "the server did not give it in time".to_string(),
                                    ))
                                })
                        }
                    };
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
                    let text =
                        format!("{} from {} was not injected: {e}", base.prompt, base.server);
                    warnings.push(Skipped::of(&base, text));
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

    /// The conventional `system_prompt`s and `tool_instructions` (spec 000) of the ready
    /// servers `active` names, as an agent session's MCP `instructions` carry them: under
    /// the settings (a prompt limited to models or threads is left out: MCP names neither),
    /// within `budget` tokens, fetched by `deadline`. Tandem's own are not among them: the
    /// instructions say the same.
    pub async fn system_injection(
        &self,
        active: impl Fn(&str) -> bool,
        budget: usize,
        deadline: tokio::time::Instant,
    ) -> SystemInjection {
        let settings = self.config().conventional;
        let is_system = |k: &inject::Kind| {
            matches!(
                k,
                inject::Kind::SystemPrompt | inject::Kind::ToolInstructions
            )
        };
        let offers = self.servers_now().iter().any(|s| {
            active(s.name())
                && s.status() == Status::Ready
                && s.prompts()
                    .iter()
                    .any(|p| inject::detect(&p.name).is_some_and(|k| is_system(&k)))
        });
        if settings.enabled == Some(false) || !offers {
            return SystemInjection::default();
        }
        let downstream = self.conventional_prompts(&settings, Some(deadline)).await;
        let fetched: Vec<inject::Fetched> = downstream
            .fetched
            .iter()
            .filter(|f| {
                let rules = Rules::of(&settings, &f.server, &f.prompt);
                is_system(&f.kind)
                    && active(&f.server)
                    && rules.allows(Condition::Model, None)
                    && rules.allows(Condition::Thread, None)
            })
            .cloned()
            .collect();
        let warnings = downstream
            .warnings
            .iter()
            .filter(|w| is_system(&w.kind) && active(&w.server))
            .map(|w| w.text.clone())
            .collect();
        SystemInjection {
            system: inject::system_text(&fetched, budget),
            warnings,
        }
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

    /// Edits the settings of the prompt `target` names: the arguments a command line gives
    /// are set, then `change` over them (its values win, its `None`s unset). A change that
    /// changes nothing is refused.
    pub async fn edit_conventional(
        self: &Arc<Self>,
        target: PromptTarget,
        mut change: config::PromptSettingsChange,
    ) -> Result<ConventionalPrompt, HubError> {
        let (server, prompt) = match target {
            PromptTarget::Line(line) => {
                let cmd = command::parse(&line)?;
                for (name, value) in cmd.arguments {
                    change.arguments.entry(name).or_insert(Some(value));
                }
                (cmd.server, cmd.prompt)
            }
            PromptTarget::Named { server, prompt } => (server, prompt),
        };
        if change.enabled.is_none() && change.arguments.is_empty() {
            return Err(HubError::NothingToChange);
        }
        self.configure_conventional(&server, &prompt, &change).await
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
                return Err(HubError::PromptNotFound(format!(
                    "Tandem has no prompt '{prompt}' (it has: {})",
                    names_or_none(own::PROMPTS.iter().map(|(n, _)| *n))
                )));
            }
            Vec::new()
        } else {
            let (_, p) = self.prompt_of(server, prompt).await?;
            argument_specs(&p)
        };
        if inject::detect(prompt).is_none() {
            return Err(HubError::InvalidArgument(format!(
                "'{prompt}' is not a conventional prompt (system_prompt, tool_instructions, \
                     user_prompt, assistant_prompt, tool_call:X, tool_result:X or tool_answer:X): \
                     the injection never takes it"
            )));
        }
        for name in change.arguments.keys() {
            if !declared.iter().any(|a| &a.name == name) {
                return Err(HubError::UnknownArgument(format!(
                    "/{server}:{prompt} has no argument '{name}' (it takes: {})",
                    names_or_none(declared.iter().map(|a| a.name.as_str()))
                )));
            }
        }
        let hub = self.hub.upgrade().ok_or(HubError::ShuttingDown)?;
        {
            let _edit = hub.user_file_edit.lock().unwrap_or_else(|p| p.into_inner());
            config::edit_prompt_settings(&hub.user_file, server, prompt, change)
                .map_err(|e| HubError::ConfigInvalid(e.to_string()))?;
        }
        let _one = self.reload.lock().await;
        self.apply(&hub);
        self.conventional_list()
            .into_iter()
            .find(|c| c.server == server && c.prompt == prompt)
            .ok_or_else(|| {
                HubError::PromptNotFound(format!(
                    "/{server}:{prompt} is gone after the config reload"
                ))
            })
    }
}

/// The downstream conventional prompts as fetched, and why some were not.
#[derive(Debug)]
pub(in crate::hub) struct Downstreams {
    fetched: Vec<inject::Fetched>,
    warnings: Vec<Skipped>,
    /// When they were fetched (for `max_age_secs`).
    at: Instant,
}

/// A conventional prompt left out, and why (a sentence naming it).
#[derive(Debug)]
struct Skipped {
    server: String,
    kind: inject::Kind,
    text: String,
}

impl Skipped {
    fn of(f: &inject::Fetched, text: String) -> Skipped {
        Skipped {
            server: f.server.clone(),
            kind: f.kind.clone(),
            text,
        }
    }
}

/// The system texts of the servers' conventional prompts for an agent's MCP
/// `instructions` ([`Workspace::system_injection`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SystemInjection {
    /// The sections kept, within the budget.
    pub system: inject::SystemText,
    /// Why prompts of the sessions' servers were not fetched (a sentence each).
    pub warnings: Vec<String>,
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
