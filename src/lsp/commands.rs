//! `workspace/executeCommand`: every command in one table ([`COMMANDS`]), each with what it
//! takes and what it runs; the custom requests `tandem/document` and `tandem/status`; the
//! code action that saves a selection to memory.

use std::future::Future;
use std::pin::Pin;

use serde_json::{Value, json};
use tower_lsp_server::jsonrpc::{self, ErrorCode};
use tower_lsp_server::ls_types::{
    CodeAction, CodeActionOrCommand, CodeActionParams, CodeActionResponse, Command, Range, Uri,
};

use super::TandemLsp;
use super::memory::MEMORY_URI;
use super::prompts::RUN_PROMPT;
use super::session::{LspResult, call_error, invalid, uri_path};
use super::{text, view};
use tandem_core::calls::{
    self,
    params::{ShowParams, TaskShowParams},
};
use tandem_core::tasks::TaskState;

/// A task's document: `tandem://task/ID`.
const TASK_URI: &str = "tandem://task/";
const SAVE_SELECTION: &str = "tandem.memory.saveSelection";

/// One command: its name, what its first argument is, what it runs.
struct Cmd {
    name: &'static str,
    takes: Takes,
    run: Run,
}

/// What a command takes as its first argument, and the parameters that makes.
#[derive(Clone, Copy)]
enum Takes {
    /// Nothing: the arguments are ignored (`null`).
    Nothing,
    /// An id, as a string or an object's `id` or `task_id`: `{"id": ID}`.
    Id,
    /// An object of options, as given; `{}` when none or not an object.
    Options,
    /// An object, as given; anything else is refused ("NAME takes WHAT").
    Object(&'static str),
    /// A string, as `{FIELD: string}`, or an object, as given; anything else is refused
    /// ("NAME takes WHAT").
    TextOr(&'static str, &'static str),
    /// Any value, as given; none is refused ("NAME needs WHAT").
    Required(&'static str),
}

type Handled<'a> = Pin<Box<dyn Future<Output = LspResult<Value>> + Send + 'a>>;

/// What a command does with its parameters.
enum Run {
    /// This method of `tandem_core::calls`: the command answers as the MCP tool and the CLI.
    Call(&'static dyn calls::AnyMethod),
    /// A handler of the session.
    Handler(for<'a> fn(&'a TandemLsp, Value) -> Handled<'a>),
}

/// Every command, in the order the server advertises them.
static COMMANDS: &[Cmd] = &[
    Cmd {
        name: "tandem.tasks.list",
        takes: Takes::Options,
        run: Run::Handler(|lsp, options| Box::pin(lsp.list_tasks(options))),
    },
    Cmd {
        name: view::SHOW_TASK,
        takes: Takes::Id,
        run: Run::Call(&calls::TASKS_SHOW),
    },
    Cmd {
        name: view::SHOW_DECISIONS,
        takes: Takes::Id,
        run: Run::Handler(|lsp, id| Box::pin(lsp.decisions(id))),
    },
    Cmd {
        name: "tandem.memory.search",
        takes: Takes::TextOr("query", "a query or an object of rekall_search arguments"),
        run: Run::Call(&calls::MEMORY_SEARCH),
    },
    Cmd {
        name: "tandem.memory.show",
        takes: Takes::Id,
        run: Run::Call(&calls::MEMORY_SHOW),
    },
    Cmd {
        name: "tandem.memory.add",
        takes: Takes::Object("an object of rekall_add arguments"),
        run: Run::Call(&calls::MEMORY_ADD),
    },
    Cmd {
        name: SAVE_SELECTION,
        takes: Takes::Required("{uri, range, type}"),
        run: Run::Handler(|lsp, args| Box::pin(lsp.save_selection(args))),
    },
    Cmd {
        name: "tandem.diagnostics.dismiss",
        takes: Takes::Nothing,
        run: Run::Handler(|lsp, _| Box::pin(lsp.dismiss())),
    },
    Cmd {
        name: "tandem.status",
        takes: Takes::Nothing,
        run: Run::Handler(|lsp, _| Box::pin(lsp.status(None))),
    },
    // The hub (`prompts.rs`).
    Cmd {
        name: "tandem.prompts.list",
        takes: Takes::Options,
        run: Run::Call(&calls::HUB_PROMPTS),
    },
    Cmd {
        name: RUN_PROMPT,
        takes: Takes::TextOr("command", "a /server:prompt line or {command}"),
        run: Run::Handler(|lsp, args| Box::pin(lsp.run_prompt(args))),
    },
    Cmd {
        name: "tandem.prompt.complete",
        takes: Takes::Options,
        run: Run::Call(&calls::HUB_COMPLETE),
    },
    Cmd {
        name: "tandem.prompt.parse",
        takes: Takes::TextOr("line", "a /server:prompt line or {line, append}"),
        run: Run::Call(&calls::HUB_PARSE_COMMAND),
    },
    Cmd {
        name: "tandem.inject",
        takes: Takes::Options,
        run: Run::Handler(|lsp, options| Box::pin(lsp.inject(options))),
    },
    Cmd {
        name: "tandem.inject.prompts",
        takes: Takes::Options,
        run: Run::Call(&calls::HUB_CONVENTIONAL),
    },
    Cmd {
        name: "tandem.inject.configure",
        takes: Takes::Options,
        run: Run::Call(&calls::HUB_CONVENTIONAL_SET),
    },
    Cmd {
        name: "tandem.servers",
        takes: Takes::Options,
        run: Run::Call(&calls::HUB_SERVERS),
    },
    Cmd {
        name: "tandem.servers.login",
        takes: Takes::TextOr("name", "a server's name"),
        run: Run::Call(&calls::HUB_LOGIN),
    },
    Cmd {
        name: "tandem.servers.logout",
        takes: Takes::TextOr("name", "a server's name"),
        run: Run::Call(&calls::HUB_LOGOUT),
    },
    Cmd {
        name: "tandem.answer",
        takes: Takes::Object("an answer: {id, action, content}"),
        run: Run::Handler(|lsp, answer| Box::pin(lsp.answer(answer))),
    },
    Cmd {
        name: "tandem.trust",
        takes: Takes::Options,
        run: Run::Call(&calls::HUB_TRUST),
    },
];

/// Every command's name, in the table's order (what `initialize` advertises).
pub(super) fn names() -> impl Iterator<Item = &'static str> {
    COMMANDS.iter().map(|c| c.name)
}

impl Takes {
    /// The parameters `first` (the first argument, if any) makes for the command `name`.
    fn params(self, name: &str, first: Option<Value>) -> LspResult<Value> {
        match (self, first) {
            (Takes::Nothing, _) => Ok(Value::Null),
            (Takes::Id, Some(Value::String(id))) => Ok(json!({ "id": id })),
            (Takes::Id, Some(Value::Object(o))) => match o.get("id").or_else(|| o.get("task_id")) {
                Some(Value::String(id)) => Ok(json!({ "id": id })),
                _ => Err(invalid(format!("{name} needs an id"))),
            },
            (Takes::Id, _) => Err(invalid(format!("{name} needs an id as its first argument"))),
            (Takes::Options | Takes::Object(_) | Takes::TextOr(..), Some(v @ Value::Object(_))) => {
                Ok(v)
            }
            (Takes::Options, _) => Ok(json!({})),
            (Takes::TextOr(field, _), Some(Value::String(s))) => Ok(Value::Object(
                [(field.to_string(), Value::String(s))]
                    .into_iter()
                    .collect(),
            )),
            (Takes::Object(what) | Takes::TextOr(_, what), _) => {
                Err(invalid(format!("{name} takes {what}")))
            }
            (Takes::Required(_), Some(v)) => Ok(v),
            (Takes::Required(what), None) => Err(invalid(format!("{name} needs {what}"))),
        }
    }
}

impl TandemLsp {
    /// Runs the command `name` with `args`.
    pub(super) async fn command(&self, name: &str, args: Vec<Value>) -> LspResult<Value> {
        let Some(cmd) = COMMANDS.iter().find(|c| c.name == name) else {
            return Err(jsonrpc::Error {
                code: ErrorCode::MethodNotFound,
                message: format!(
                    "unknown command '{name}' (known: {})",
                    names().collect::<Vec<_>>().join(", ")
                )
                .into(),
                data: None,
            });
        };
        let params = cmd.takes.params(name, args.into_iter().next())?;
        match cmd.run {
            Run::Call(method) => self.session.call(method, params).await,
            Run::Handler(handler) => handler(self, params).await,
        }
    }

    /// `tandem.tasks.list`: `{"all": bool, "limit": n}` are the options read.
    async fn list_tasks(&self, options: Value) -> LspResult<Value> {
        let all = options.get("all").and_then(Value::as_bool).unwrap_or(false);
        let mut params = json!({ "all": all });
        if let Some(limit) = options.get("limit") {
            params["limit"] = limit.clone();
        }
        self.session.call(&calls::TASKS_LIST, params).await
    }

    /// `tandem.task.decisions`: the task's decisions, with its id and name.
    async fn decisions(&self, id: Value) -> LspResult<Value> {
        let r = self.session.call(&calls::TASKS_SHOW, id).await?;
        Ok(json!({"task_id": r["task_id"], "name": r["name"], "decisions": r["decisions"]}))
    }

    /// `tandem.diagnostics.dismiss`: a completed focus task's warnings go.
    async fn dismiss(&self) -> LspResult<Value> {
        let dismissed = {
            let mut state = self.session.state.lock().await;
            let done = state
                .focus
                .as_ref()
                .filter(|f| f.task.state != TaskState::Running)
                .map(|f| f.task.id);
            if done.is_some() {
                state.dismissed = done;
            }
            done
        };
        if dismissed.is_some() {
            self.refresh().await;
        }
        Ok(json!({"dismissed": dismissed.map(|d| d.to_string())}))
    }

    /// `tandem.answer`: the user's answer to a server's question (`tandem/question`):
    /// `{id, action: accept|decline|cancel, content}`. A form that does not fit the question
    /// is refused with the reason, and the question still waits.
    async fn answer(&self, answer: Value) -> LspResult<Value> {
        let answer: Answer =
            serde_json::from_value(answer).map_err(|e| invalid(format!("tandem.answer: {e}")))?;
        let core = self.session.core().await.map_err(call_error)?;
        core.hub
            .questions()
            .answer(
                self.session.workspace(),
                &answer.id,
                &answer.action,
                answer.content,
            )
            .map_err(|e| invalid(format!("tandem.answer: {e}")))?;
        Ok(json!({"answered": answer.id}))
    }

    /// `tandem.memory.saveSelection`: the selected text of a document, added as an entry of
    /// the type the user picked, with the file and lines as its context.
    async fn save_selection(&self, args: Value) -> LspResult<Value> {
        let args: SaveSelection =
            serde_json::from_value(args).map_err(|e| invalid(format!("{SAVE_SELECTION}: {e}")))?;
        let Some(entry_type) = args.entry_type.filter(|t| !t.trim().is_empty()) else {
            return Err(invalid(format!(
                "{SAVE_SELECTION} needs 'type' (bug, pattern, decision, pitfall, config, reference)"
            )));
        };
        let text = self.session.text_of(&args.uri).ok_or_else(|| {
            invalid(format!(
                "document {} is not open or readable",
                args.uri.as_str()
            ))
        })?;
        let selected = text::slice(&text, args.range, self.session.flags().encoding);
        if selected.trim().is_empty() {
            return Err(invalid("the selection is empty"));
        }
        let path = uri_path(&args.uri);
        let ws = self.session.workspace();
        let shown = path
            .as_deref()
            .map(|p| p.strip_prefix(ws).unwrap_or(p).display().to_string())
            .unwrap_or_else(|| args.uri.as_str().to_string());
        let context = format!(
            "{shown}:L{}-L{}",
            args.range.start.line + 1,
            args.range.end.line + 1
                - u32::from(
                    args.range.end.character == 0 && args.range.end.line > args.range.start.line
                )
        );
        let title = args
            .title
            .filter(|t| !t.trim().is_empty())
            .unwrap_or_else(|| text::first_line(&selected, 80));
        let add = json!({
            "type": entry_type,
            "title": title,
            "content": selected,
            "context": context,
            "tags": args.tags,
            "project": ws.file_name().map(|p| p.to_string_lossy()),
        });
        self.session.call(&calls::MEMORY_ADD, add).await
    }

    /// The code actions on `params`' range: "Save selection to memory" on a selection, and
    /// running the prompt command of its line.
    pub(super) fn code_actions(&self, params: &CodeActionParams) -> Option<CodeActionResponse> {
        // These actions have no kind: a request for some kinds only (VS Code asks for
        // `quickfix` on a diagnostic) gets none, rather than actions the client must drop.
        if params
            .context
            .only
            .as_ref()
            .is_some_and(|only| !only.is_empty())
        {
            return None;
        }
        let r = params.range;
        let run = self.prompt_action(&params.text_document.uri, r.start.line);
        if r.start == r.end {
            return run.map(|a| vec![a]);
        }
        let action = CodeAction {
            title: "Save selection to memory".into(),
            command: Some(Command {
                title: "Save selection to memory".into(),
                command: SAVE_SELECTION.into(),
                arguments: Some(vec![json!({"uri": params.text_document.uri, "range": r})]),
            }),
            ..CodeAction::default()
        };
        Some(
            std::iter::once(CodeActionOrCommand::CodeAction(action))
                .chain(run)
                .collect(),
        )
    }

    // ---- custom requests --------------------------------------------------------------

    /// `tandem/document`: a memory entry or a task record as a Markdown document.
    pub(super) async fn document(&self, params: DocumentParams) -> LspResult<Value> {
        let uri = params.uri;
        if let Some(id) = uri.strip_prefix(MEMORY_URI) {
            let id = id.to_string();
            let entry = self
                .session
                .run(&calls::MEMORY_SHOW, ShowParams { id })
                .await
                .map_err(call_error)?;
            return Ok(json!({
                "uri": uri,
                "title": entry.title,
                "filetype": "markdown",
                "text": crate::render::entry_markdown(&entry),
            }));
        }
        if let Some(id) = uri.strip_prefix(TASK_URI) {
            let id = id.trim_end_matches('/').to_string();
            let record = self
                .session
                .run(&calls::TASKS_SHOW, TaskShowParams { id })
                .await
                .map_err(call_error)?;
            return Ok(json!({
                "uri": uri,
                "title": format!("Task: {}", record.name),
                "filetype": "markdown",
                "text": crate::render::task_markdown(&record),
            }));
        }
        Err(invalid(format!(
            "not a tandem document: {uri} (expected {MEMORY_URI}ID or {TASK_URI}ID)"
        )))
    }

    /// `tandem/status`: the serving process, the workspace, the focus task and the watch.
    pub(super) async fn status(&self, _params: Option<Value>) -> LspResult<Value> {
        let focus = self
            .session
            .state
            .lock()
            .await
            .focus
            .as_ref()
            .map(|f| f.task.id.to_string());
        let host = &self.session.host;
        Ok(json!({
            "version": env!("CARGO_PKG_VERSION"),
            "pid": std::process::id(),
            "home": host.home,
            "log_file": host.log_file,
            "workspace": self.session.workspace(),
            "daemon": host.daemon,
            "focus_task": focus,
            "watch": self.session.watch_status(),
        }))
    }
}

#[derive(serde::Deserialize)]
pub(super) struct DocumentParams {
    uri: String,
}

#[derive(serde::Deserialize)]
struct SaveSelection {
    uri: Uri,
    range: Range,
    #[serde(rename = "type")]
    entry_type: Option<String>,
    title: Option<String>,
    tags: Option<Vec<String>>,
}

/// `tandem.answer`'s argument: which question, what the user did, and the form's fields.
/// A missing `id` or `action` is refused with its name, rather than read as a cancel.
#[derive(serde::Deserialize)]
struct Answer {
    id: String,
    action: String,
    #[serde(default)]
    content: Option<Value>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(name: &str, first: Option<Value>) -> Result<Value, String> {
        let cmd = COMMANDS.iter().find(|c| c.name == name).expect(name);
        cmd.takes
            .params(name, first)
            .map_err(|e| e.message.to_string())
    }

    #[test]
    fn every_command_is_declared_once() {
        let mut names: Vec<&str> = names().collect();
        let count = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), count, "a command is declared twice");
    }

    /// Each kind of argument makes its parameters, or refuses with the message clients see.
    #[test]
    fn arguments_make_the_parameters() {
        let cases: [(&str, Option<Value>, Result<Value, &str>); 14] = [
            (
                "tandem.task.show",
                Some(json!("01ABC")),
                Ok(json!({"id": "01ABC"})),
            ),
            (
                "tandem.task.decisions",
                Some(json!({"task_id": "01ABC"})),
                Ok(json!({"id": "01ABC"})),
            ),
            (
                "tandem.memory.show",
                Some(json!({"id": 3, "task_id": "01ABC"})),
                Err("tandem.memory.show needs an id"),
            ),
            (
                "tandem.memory.show",
                Some(json!(42)),
                Err("tandem.memory.show needs an id as its first argument"),
            ),
            (
                "tandem.memory.search",
                Some(json!("jwt")),
                Ok(json!({"query": "jwt"})),
            ),
            (
                "tandem.memory.search",
                Some(json!({"query": "jwt", "limit": 2})),
                Ok(json!({"query": "jwt", "limit": 2})),
            ),
            (
                "tandem.memory.search",
                None,
                Err("tandem.memory.search takes a query or an object of rekall_search arguments"),
            ),
            (
                "tandem.memory.add",
                Some(json!("x")),
                Err("tandem.memory.add takes an object of rekall_add arguments"),
            ),
            (
                "tandem.memory.saveSelection",
                None,
                Err("tandem.memory.saveSelection needs {uri, range, type}"),
            ),
            (
                "tandem.memory.saveSelection",
                Some(Value::Null),
                Ok(Value::Null),
            ),
            ("tandem.tasks.list", Some(json!([true])), Ok(json!({}))),
            ("tandem.status", Some(json!({"x": 1})), Ok(Value::Null)),
            (
                "tandem.prompt.run",
                Some(json!("/a:b x=1")),
                Ok(json!({"command": "/a:b x=1"})),
            ),
            (
                "tandem.prompt.run",
                Some(json!(1)),
                Err("tandem.prompt.run takes a /server:prompt line or {command}"),
            ),
        ];
        for (name, first, want) in cases {
            let want = want.map_err(str::to_string);
            assert_eq!(params(name, first.clone()), want, "{name} {first:?}");
        }
    }
}
