//! The hub in the editor (specs 002 and 000): downstream prompts as `/server:prompt`
//! commands with completion of names, argument names and values, a code action that runs
//! the command on the current line, the conventional injection, and the workspace trust
//! question.

use std::collections::HashSet;
use std::sync::{LazyLock, Mutex};

use serde_json::{Value, json};
use tower_lsp_server::ls_types::*;

use super::TandemLsp;
use super::session::{LspResult, invalid};
use super::text;
use tandem_core::calls;

/// The command that runs a prompt command line (the code action's).
pub(super) const RUN_PROMPT: &str = "tandem.prompt.run";

/// Filetypes (LSP language ids) where `/` completes prompt commands, unless the client's
/// `initializationOptions.promptFiletypes` says otherwise (`["*"]`: every buffer). Chat and
/// prompt buffers of the usual editor plugins, and plain text.
pub const DEFAULT_PROMPT_FILETYPES: &[&str] = &[
    "",
    "text",
    "plaintext",
    "markdown",
    "gitcommit",
    "codecompanion",
    "AvanteInput",
    "copilot-chat",
    "tandem-prompt",
];

/// Workspace files already asked about in this process (file and content hash): asked once.
static ASKED: LazyLock<Mutex<HashSet<String>>> = LazyLock::new(Default::default);

impl TandemLsp {
    /// `tandem.prompt.run`: `{command}` or `{server, prompt, arguments}`; a code action's
    /// `uri` and `line` are dropped (the call takes the line only).
    pub(super) async fn run_prompt(&self, mut params: Value) -> LspResult<Value> {
        if let Some(o) = params.as_object_mut() {
            o.remove("uri");
            o.remove("line");
        }
        self.session.call(&calls::HUB_GET_PROMPT, params).await
    }

    /// The injection, with its Markdown preview.
    pub(super) async fn inject(&self, params: Value) -> LspResult<Value> {
        let mut injection = self.session.call(&calls::HUB_INJECT, params).await?;
        let parsed: tandem_core::hub::prompts::inject::Injection =
            serde_json::from_value(injection.clone())
                .map_err(|e| invalid(format!("unexpected injection: {e}")))?;
        injection["preview"] = json!(tandem_core::hub::prompts::inject::render_preview(&parsed));
        Ok(injection)
    }

    /// `tandem/inject` (custom request): as the `tandem.inject` command.
    pub(super) async fn inject_request(&self, params: Option<Value>) -> LspResult<Value> {
        self.inject(params.unwrap_or_else(|| json!({}))).await
    }

    fn prompt_buffer(&self, uri: &Uri) -> bool {
        let language = self.session.language(uri);
        match self.session.prompt_filetypes.get() {
            Some(list) => list.iter().any(|l| l == "*" || *l == language),
            None => DEFAULT_PROMPT_FILETYPES.contains(&language.as_str()),
        }
    }

    /// Completion of `/server:prompt name=value` at the start of a line of a prompt buffer.
    pub(super) async fn prompt_completion(
        &self,
        params: CompletionParams,
    ) -> LspResult<Option<CompletionResponse>> {
        let at = params.text_document_position;
        if !self.prompt_buffer(&at.text_document.uri) {
            return Ok(None);
        }
        let Some(doc) = self.session.text_of(&at.text_document.uri) else {
            return Ok(None);
        };
        let Some(line) = doc.split('\n').nth(at.position.line as usize) else {
            return Ok(None);
        };
        let line = line.strip_suffix('\r').unwrap_or(line);
        if !line.trim_start().starts_with('/') {
            return Ok(None);
        }
        let encoding = self.session.flags().encoding;
        let cursor = text::byte_at(line, at.position.character, encoding);
        let found = match self
            .session
            .call(
                &calls::HUB_COMPLETE,
                json!({ "line": line, "cursor": cursor }),
            )
            .await
        {
            Ok(v) => v,
            Err(e) => {
                // A completion list is no place for an error: none is offered, the log says why.
                tracing::debug!("prompt completion failed: {}", e.message);
                return Ok(None);
            }
        };
        let completions: Vec<tandem_core::hub::PromptCompletion> =
            serde_json::from_value(found).unwrap_or_default();
        let items = completions
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                let start = Position::new(
                    at.position.line,
                    text::col_of(line, c.start.min(cursor), encoding),
                );
                CompletionItem {
                    kind: Some(match c.kind.as_str() {
                        "command" => CompletionItemKind::FUNCTION,
                        "argument" => CompletionItemKind::FIELD,
                        _ => CompletionItemKind::VALUE,
                    }),
                    detail: c.detail,
                    documentation: c.documentation.map(|d| {
                        Documentation::MarkupContent(MarkupContent {
                            kind: MarkupKind::Markdown,
                            value: d,
                        })
                    }),
                    filter_text: Some(c.label.clone()),
                    sort_text: Some(format!("{i:05}")),
                    text_edit: Some(CompletionTextEdit::Edit(TextEdit {
                        range: Range::new(start, at.position),
                        new_text: c.insert_text,
                    })),
                    label: c.label,
                    ..CompletionItem::default()
                }
            })
            .collect();
        // Values depend on what is typed: ask again as the user types.
        Ok(Some(CompletionResponse::List(CompletionList {
            is_incomplete: true,
            items,
        })))
    }

    /// "Run /server:prompt" on a line that is a prompt command.
    pub(super) fn prompt_action(&self, uri: &Uri, line_no: u32) -> Option<CodeActionOrCommand> {
        if !self.prompt_buffer(uri) {
            return None;
        }
        let doc = self.session.text_of(uri)?;
        let line = doc
            .split('\n')
            .nth(line_no as usize)?
            .trim_end_matches('\r');
        let cmd = tandem_core::hub::prompts::command::parse(line).ok()?;
        let name = tandem_core::hub::prompts::command::command_name(&cmd.server, &cmd.prompt);
        Some(CodeActionOrCommand::CodeAction(CodeAction {
            title: format!("Run {name}"),
            command: Some(Command {
                title: format!("Run {name}"),
                command: RUN_PROMPT.into(),
                arguments: Some(vec![
                    json!({"command": line.trim(), "uri": uri, "line": line_no}),
                ]),
            }),
            ..CodeAction::default()
        }))
    }

    /// Asks once (per file content, per process) whether to trust the workspace's untrusted
    /// `.mcp.json`, showing what it would run.
    pub(super) async fn ask_trust(&self) {
        let Ok(report) = self.session.call(&calls::HUB_TRUST, json!({})).await else {
            return;
        };
        let (Some(file), Some(sha)) = (report["file"].as_str(), report["sha256"].as_str()) else {
            return;
        };
        let servers = report["servers"].as_array().cloned().unwrap_or_default();
        if report["trusted"] == true || servers.is_empty() {
            return;
        }
        if !ASKED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(format!("{file}\n{sha}"))
        {
            return;
        }
        let runs: Vec<String> = servers
            .iter()
            .map(|s| {
                format!(
                    "{}: {}",
                    s["name"].as_str().unwrap_or("?"),
                    s["runs"].as_str().unwrap_or("(not runnable)")
                )
            })
            .collect();
        let message = format!(
            "Tandem: {file} wants to start {} MCP server(s): {}. Trust this file as it is?",
            runs.len(),
            runs.join("; ")
        );
        let choice = self
            .client
            .show_message_request(
                MessageType::WARNING,
                message,
                Some(vec![
                    // The digest shown travels with the answer: a client that approves by
                    // itself (Neovim's, outside a coroutine) approves what was shown.
                    MessageActionItem {
                        title: "Trust".into(),
                        properties: [(
                            "sha256".to_string(),
                            MessageActionItemProperty::String(sha.to_string()),
                        )]
                        .into(),
                    },
                    MessageActionItem {
                        title: "Not now".into(),
                        properties: Default::default(),
                    },
                ]),
            )
            .await;
        if let Ok(Some(item)) = choice
            && item.title == "Trust"
        {
            match self
                .session
                .call(
                    &calls::HUB_TRUST,
                    json!({"action": "approve", "sha256": sha}),
                )
                .await
            {
                Ok(_) => {
                    self.client
                        .show_message(
                            MessageType::INFO,
                            format!("Tandem: trusted {file}; its servers are starting"),
                        )
                        .await
                }
                Err(e) => {
                    self.client
                        .show_message(MessageType::ERROR, format!("Tandem: {}", e.message))
                        .await
                }
            }
        }
    }
}

/// `initializationOptions.promptFiletypes`, when the client gives it.
pub(super) fn prompt_filetypes(options: Option<&Value>) -> Option<Vec<String>> {
    let list = options?.get("promptFiletypes")?.as_array()?;
    Some(
        list.iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
    )
}
