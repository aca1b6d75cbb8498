//! The LSP face (tower-lsp-server 0.23): what the agent does, shown in the editor.
//!
//! One [`serve`] per editor connection (in the daemon, or in-process with `--standalone`).
//! A session follows its workspace's *focus task* (see [`tandem_core::tasks::Tasks::focus`]):
//! diagnostics on the hunks it changed, code lenses, `$/progress` from its milestones. It
//! learns of changes from the core's event bus (never by polling): the task's events, and
//! the files a watch of the task's tree sees change on disk while it runs ([`tandem_core::watch`]);
//! and from `didSave`. Memory is searched with `workspace/symbol`, shown on hover over `[ID]`
//! citations and in `tandem://` documents, and added from a selection with a code action.
//! Every request, command and custom method is documented in `docs/lsp-extensions.md`.
//!
//! The session reaches the core through `tandem_core::calls` only, like the other faces; it uses
//! the core's infrastructure directly (the event bus, the watches) to follow the workspace.
//!
//! - `session.rs`: a connection's state, and its calls to the core;
//! - `follow.rs`: the event follower, refreshing and publishing diagnostics and lenses;
//! - `progress.rs`: `$/progress` of the focus task;
//! - `commands.rs`: `workspace/executeCommand` (the command table), `tandem/document`,
//!   `tandem/status`, the code actions;
//! - `memory.rs`: hover on `[ID]` citations, workspace symbols;
//! - `prompts.rs`: the hub in the editor (prompt commands, injection, trust);
//! - `view.rs`: the focus as diagnostics and lenses (pure); `text.rs`: positions and text.

mod commands;
mod follow;
mod memory;
mod progress;
mod prompts;
mod session;
mod text;
pub mod view;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tower_lsp_server::ls_types::*;
use tower_lsp_server::{Client, LanguageServer, LspService, Server};

use session::{Flags, LspResult, Session, uri_path};
use tandem_core::core::LazyCore;
use text::Encoding;

/// Facts about the serving process, for `tandem/status`.
#[derive(Debug, Clone)]
pub struct Host {
    pub home: PathBuf,
    pub log_file: PathBuf,
    /// Whether this session is served by the daemon.
    pub daemon: bool,
}

/// Serves one LSP session on `input`/`output` until the client exits or disconnects.
/// `workspace` is the fallback when the client names no root.
pub async fn serve<I, O>(core: Arc<LazyCore>, host: Host, workspace: PathBuf, input: I, output: O)
where
    I: AsyncRead + Unpin,
    O: AsyncWrite,
{
    let session = Arc::new(Session::new(core, host, workspace));
    let s = session.clone();
    let (service, socket) = LspService::build(move |client| TandemLsp {
        client,
        session: s.clone(),
    })
    .custom_method("tandem/document", TandemLsp::document)
    .custom_method("tandem/status", TandemLsp::status)
    .custom_method("tandem/inject", TandemLsp::inject_request)
    .finish();
    Server::new(input, output, socket).serve(service).await;
    session.end();
}

/// The language server of one editor connection: tower-lsp's handler, over its session.
struct TandemLsp {
    client: Client,
    session: Arc<Session>,
}

impl TandemLsp {
    fn clone_handle(&self) -> TandemLsp {
        TandemLsp {
            client: self.client.clone(),
            session: self.session.clone(),
        }
    }
}

impl LanguageServer for TandemLsp {
    async fn initialize(&self, params: InitializeParams) -> LspResult<InitializeResult> {
        let root = params
            .workspace_folders
            .as_ref()
            .and_then(|f| f.first())
            .map(|f| f.uri.clone())
            .or_else(|| {
                #[allow(deprecated)]
                params.root_uri.clone()
            })
            .and_then(|u| uri_path(&u));
        if let Some(root) = root {
            let _ = self
                .session
                .workspace
                .set(tandem_core::config::workspace_root(&root));
        }
        if let Some(list) = prompts::prompt_filetypes(params.initialization_options.as_ref()) {
            let _ = self.session.prompt_filetypes.set(list);
        }
        let questions = params
            .initialization_options
            .as_ref()
            .and_then(|o| o.get("questions"))
            .and_then(serde_json::Value::as_bool);
        let _ = self.session.shows_questions.set(questions == Some(true));
        let caps = &params.capabilities;
        let encodings = caps
            .general
            .as_ref()
            .and_then(|g| g.position_encodings.clone())
            .unwrap_or_default();
        let encoding = if encodings.contains(&PositionEncodingKind::UTF8) {
            Encoding::Utf8
        } else {
            Encoding::Utf16
        };
        let _ = self.session.flags.set(Flags {
            progress: caps
                .window
                .as_ref()
                .and_then(|w| w.work_done_progress)
                .unwrap_or(false),
            lens_refresh: caps
                .workspace
                .as_ref()
                .and_then(|w| w.code_lens.as_ref())
                .and_then(|c| c.refresh_support)
                .unwrap_or(false),
            encoding,
        });
        tracing::info!(
            "LSP session for {} ({})",
            self.session.workspace().display(),
            params
                .client_info
                .as_ref()
                .map(|c| c.name.as_str())
                .unwrap_or("unknown client")
        );
        Ok(InitializeResult {
            server_info: Some(ServerInfo {
                name: "tandem".into(),
                version: Some(env!("CARGO_PKG_VERSION").into()),
            }),
            capabilities: ServerCapabilities {
                position_encoding: Some(match encoding {
                    Encoding::Utf8 => PositionEncodingKind::UTF8,
                    Encoding::Utf16 => PositionEncodingKind::UTF16,
                }),
                text_document_sync: Some(TextDocumentSyncCapability::Options(
                    TextDocumentSyncOptions {
                        open_close: Some(true),
                        change: Some(TextDocumentSyncKind::FULL),
                        save: Some(TextDocumentSyncSaveOptions::Supported(true)),
                        ..TextDocumentSyncOptions::default()
                    },
                )),
                hover_provider: Some(HoverProviderCapability::Simple(true)),
                code_lens_provider: Some(CodeLensOptions {
                    resolve_provider: Some(false),
                }),
                workspace_symbol_provider: Some(OneOf::Left(true)),
                code_action_provider: Some(CodeActionProviderCapability::Simple(true)),
                completion_provider: Some(CompletionOptions {
                    trigger_characters: Some(vec!["/".into(), " ".into(), "=".into(), ":".into()]),
                    resolve_provider: Some(false),
                    ..CompletionOptions::default()
                }),
                execute_command_provider: Some(ExecuteCommandOptions {
                    commands: commands::names().map(str::to_string).collect(),
                    ..ExecuteCommandOptions::default()
                }),
                ..ServerCapabilities::default()
            },
            ..InitializeResult::default()
        })
    }

    async fn initialized(&self, _: InitializedParams) {
        let follower = tokio::spawn(self.clone_handle().follow());
        self.session.set_follower(follower);
    }

    async fn shutdown(&self) -> LspResult<()> {
        Ok(())
    }

    async fn did_open(&self, params: DidOpenTextDocumentParams) {
        let d = params.text_document;
        self.session.open(d.uri, d.language_id, d.text);
    }

    async fn did_change(&self, params: DidChangeTextDocumentParams) {
        // Full sync: the last change is the whole text.
        if let Some(change) = params.content_changes.into_iter().last() {
            self.session.changed(params.text_document.uri, change.text);
        }
    }

    async fn did_close(&self, params: DidCloseTextDocumentParams) {
        self.session.close(&params.text_document.uri);
    }

    async fn did_save(&self, params: DidSaveTextDocumentParams) {
        if let Some(path) = uri_path(&params.text_document.uri) {
            self.files_changed(BTreeSet::from([path])).await;
        }
    }

    async fn code_lens(&self, params: CodeLensParams) -> LspResult<Option<Vec<CodeLens>>> {
        Ok(self.code_lenses(&params.text_document.uri).await)
    }

    async fn hover(&self, params: HoverParams) -> LspResult<Option<Hover>> {
        self.citation_hover(params).await
    }

    async fn symbol(
        &self,
        params: WorkspaceSymbolParams,
    ) -> LspResult<Option<WorkspaceSymbolResponse>> {
        let symbols = self.memory_symbols(params.query).await?;
        Ok(Some(WorkspaceSymbolResponse::Nested(symbols)))
    }

    async fn completion(&self, params: CompletionParams) -> LspResult<Option<CompletionResponse>> {
        self.prompt_completion(params).await
    }

    async fn code_action(&self, params: CodeActionParams) -> LspResult<Option<CodeActionResponse>> {
        Ok(self.code_actions(&params))
    }

    async fn execute_command(&self, params: ExecuteCommandParams) -> LspResult<Option<LSPAny>> {
        self.command(&params.command, params.arguments)
            .await
            .map(Some)
    }
}
