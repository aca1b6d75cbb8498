//! Questions for the user in an editor: a downstream server's form elicitation that no
//! agent session can take (the server asked outside a call, or the calling agent's client
//! has no elicitation) is shown as a form by an editor of the workspace.
//!
//! An editor that shows forms says so when it attaches ([`Questions::attach`]); with none,
//! [`Questions::ask`] answers `None` at once and the caller declines. A question is published
//! on the bus ([`crate::events::Event::Question`]); each editor of its workspace shows it,
//! and the first valid answer ([`Questions::answer`]) wins. A question ends as `cancel` past
//! its time limit, and is withdrawn when its asker goes (the agent's call was cancelled):
//! a late answer is refused, never delivered.
//!
//! The schema comes from the server, so nothing of it runs or expands; an answer is checked
//! against it (types, `enum`, `required`, lengths) before the server sees it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};
use tokio::sync::oneshot;

use crate::events::{Bus, Event};

/// Questions waiting at once, in all: a server that asks in a loop is refused past it.
const MAX_PENDING: usize = 32;
/// The characters of a server's message that editors are sent.
const MAX_MESSAGE_CHARS: usize = 2000;
/// The bytes of one answer's JSON that are taken.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// A question as editors get it (`tandem/question`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Question {
    pub id: String,
    #[serde(skip)]
    pub workspace: PathBuf,
    /// The server that asks.
    pub server: String,
    pub message: String,
    /// The server's `requestedSchema`: an object of flat fields.
    pub schema: Value,
}

/// What the user answered.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The form, checked against the schema.
    Accept(Map<String, Value>),
    Decline,
    /// Dismissed, or not answered in time.
    Cancel,
}

struct Pending {
    workspace: PathBuf,
    schema: Value,
    reply: oneshot::Sender<Answer>,
}

#[derive(Default)]
struct State {
    next: u64,
    pending: HashMap<String, Pending>,
    /// How many attached editors show forms, by workspace.
    editors: HashMap<PathBuf, usize>,
}

/// The questions of one hub. Cheap to share.
#[derive(Default)]
pub struct Questions {
    state: Mutex<State>,
}

/// An editor of a workspace that shows forms, while it is held.
pub struct Attached {
    questions: Arc<Questions>,
    workspace: PathBuf,
}

impl Drop for Attached {
    fn drop(&mut self) {
        let mut state = self.questions.lock();
        if let Some(n) = state.editors.get_mut(&self.workspace) {
            *n -= 1;
            if *n == 0 {
                state.editors.remove(&self.workspace);
            }
        }
    }
}

/// Withdraws a question when its asker stops waiting (answered, timed out or dropped).
struct Asking<'a> {
    questions: &'a Questions,
    id: String,
}

impl Drop for Asking<'_> {
    fn drop(&mut self) {
        self.questions.lock().pending.remove(&self.id);
    }
}

impl Questions {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts an editor of `workspace` that shows forms, until the guard drops.
    pub fn attach(self: &Arc<Self>, workspace: &Path) -> Attached {
        *self
            .lock()
            .editors
            .entry(workspace.to_path_buf())
            .or_default() += 1;
        Attached {
            questions: self.clone(),
            workspace: workspace.to_path_buf(),
        }
    }

    /// Whether an editor of `workspace` shows forms.
    pub fn has_editor(&self, workspace: &Path) -> bool {
        self.lock().editors.contains_key(workspace)
    }

    /// Puts `message` and its form `schema` from `server` to the editors of `workspace`, and
    /// waits up to `limit` for the user: `None` when no editor shows forms (or too many
    /// questions wait already), else the answer (`Cancel` past the limit).
    pub async fn ask(
        &self,
        bus: &Bus,
        workspace: &Path,
        server: &str,
        message: &str,
        schema: Value,
        limit: Duration,
    ) -> Option<Answer> {
        let (tx, rx) = oneshot::channel();
        let id = {
            let mut state = self.lock();
            if !state.editors.contains_key(workspace) || state.pending.len() >= MAX_PENDING {
                return None;
            }
            state.next += 1;
            let id = format!("q{}", state.next);
            state.pending.insert(
                id.clone(),
                Pending {
                    workspace: workspace.to_path_buf(),
                    schema: schema.clone(),
                    reply: tx,
                },
            );
            id
        };
        let _asking = Asking {
            questions: self,
            id: id.clone(),
        };
        bus.publish(Event::Question(Arc::new(Question {
            id,
            workspace: workspace.to_path_buf(),
            server: server.to_string(),
            message: crate::hub::client::describe::printable(message, MAX_MESSAGE_CHARS),
            schema,
        })));
        match tokio::time::timeout(limit, rx).await {
            Ok(Ok(answer)) => Some(answer),
            _ => Some(Answer::Cancel),
        }
    }

    /// The user's answer to question `id` from an editor of `workspace`: `action` is
    /// `accept` (with `content`, the form), `decline` or `cancel`. Refused, with the reason,
    /// when no such question waits (answered already, timed out, withdrawn) or the form does
    /// not fit the schema; the question then still waits.
    pub fn answer(
        &self,
        workspace: &Path,
        id: &str,
        action: &str,
        content: Option<Value>,
    ) -> Result<(), String> {
        let mut state = self.lock();
        let Some(pending) = state.pending.get(id).filter(|p| p.workspace == workspace) else {
            return Err(format!(
                "no question '{id}' is waiting: it was answered, timed out or withdrawn"
            ));
        };
        let answer = match action {
            "accept" => Answer::Accept(checked(&pending.schema, content)?),
            "decline" => Answer::Decline,
            "cancel" => Answer::Cancel,
            other => {
                return Err(format!(
                    "unknown action '{other}': answer accept, decline or cancel"
                ));
            }
        };
        let pending = state.pending.remove(id).expect("found above");
        let _ = pending.reply.send(answer);
        Ok(())
    }
}

/// `content` as the form of `schema`: an object whose fields are the schema's, each of its
/// type, the required ones present.
fn checked(schema: &Value, content: Option<Value>) -> Result<Map<String, Value>, String> {
    let content = match content {
        Some(Value::Object(map)) => map,
        None | Some(Value::Null) => Map::new(),
        Some(_) => return Err("the answer's content must be an object of fields".into()),
    };
    if serde_json::to_vec(&content).map_or(0, |b| b.len()) > MAX_ANSWER_BYTES {
        return Err(format!(
            "the answer is over {} KiB",
            MAX_ANSWER_BYTES / 1024
        ));
    }
    let empty = Map::new();
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    for (name, value) in &content {
        let Some(field) = properties.get(name) else {
            return Err(format!("the form has no field '{name}'"));
        };
        check_field(name, field, value)?;
    }
    let required = schema.get("required").and_then(Value::as_array);
    for name in required.into_iter().flatten().filter_map(Value::as_str) {
        if !content.contains_key(name) {
            return Err(format!("the field '{name}' is required"));
        }
    }
    Ok(content)
}

fn check_field(name: &str, field: &Value, value: &Value) -> Result<(), String> {
    let kind = field
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("string");
    let fits = match kind {
        "string" => value.is_string(),
        "number" => value.is_number(),
        "integer" => value.is_i64() || value.is_u64(),
        "boolean" => value.is_boolean(),
        "array" => value.is_array(),
        _ => true,
    };
    if !fits {
        return Err(format!("the field '{name}' must be a {kind}"));
    }
    // The choices: `enum`, or `oneOf`/`anyOf` of `const`s; for a multi-select, its items'.
    let choices = |f: &Value| -> Option<Vec<Value>> {
        if let Some(e) = f.get("enum").and_then(Value::as_array) {
            return Some(e.clone());
        }
        let of = f.get("oneOf").or_else(|| f.get("anyOf"))?.as_array()?;
        Some(of.iter().filter_map(|o| o.get("const").cloned()).collect())
    };
    let one_of = |v: &Value, allowed: &[Value]| -> Result<(), String> {
        if allowed.contains(v) {
            Ok(())
        } else {
            Err(format!("'{name}' must be one of the form's choices"))
        }
    };
    match value {
        Value::Array(items) => {
            if let Some(allowed) = field.get("items").and_then(choices) {
                for item in items {
                    one_of(item, &allowed)?;
                }
            }
        }
        v => {
            if let Some(allowed) = choices(field) {
                one_of(v, &allowed)?;
            }
        }
    }
    if let Some(text) = value.as_str() {
        let chars = text.chars().count() as u64;
        if let Some(min) = field.get("minLength").and_then(Value::as_u64)
            && chars < min
        {
            return Err(format!("'{name}' needs at least {min} characters"));
        }
        if let Some(max) = field.get("maxLength").and_then(Value::as_u64)
            && chars > max
        {
            return Err(format!("'{name}' takes at most {max} characters"));
        }
    }
    if let Some(n) = value.as_f64() {
        if let Some(min) = field.get("minimum").and_then(Value::as_f64)
            && n < min
        {
            return Err(format!("'{name}' must be at least {min}"));
        }
        if let Some(max) = field.get("maximum").and_then(Value::as_f64)
            && n > max
        {
            return Err(format!("'{name}' must be at most {max}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 5},
            "age": {"type": "integer", "minimum": 0},
            "color": {"type": "string", "enum": ["red", "blue"]},
            "ok": {"type": "boolean"}
        }, "required": ["name"]})
    }

    #[test]
    fn a_form_is_checked_against_its_schema() {
        let s = schema();
        let ok = checked(
            &s,
            Some(json!({"name": "Ann", "age": 3, "color": "red", "ok": true})),
        );
        assert_eq!(ok.unwrap().len(), 4);
        for (bad, why) in [
            (json!({"age": 3}), "required"),
            (json!({"name": "Ann", "age": 3.5}), "integer"),
            (json!({"name": "Ann", "age": -1}), "at least"),
            (json!({"name": "Annabel"}), "at most 5"),
            (json!({"name": "Ann", "color": "green"}), "choices"),
            (json!({"name": "Ann", "extra": 1}), "no field"),
            (json!(["Ann"]), "object"),
        ] {
            let e = checked(&s, Some(bad.clone())).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[tokio::test]
    async fn the_first_answer_wins_and_a_late_one_is_refused() {
        let questions = Arc::new(Questions::default());
        let bus = Bus::default();
        let ws = Path::new("/ws");
        let limit = Duration::from_secs(30);
        assert_eq!(
            questions.ask(&bus, ws, "s", "Hi?", schema(), limit).await,
            None,
            "asked with no editor"
        );
        let _editor = questions.attach(ws);
        let mut events = bus.subscribe();
        let (q, b) = (questions.clone(), bus.clone());
        let asked = tokio::spawn(async move { q.ask(&b, ws, "s", "Hi?", schema(), limit).await });
        let Ok(Event::Question(question)) = events.recv().await else {
            panic!("no question published");
        };
        assert!(
            questions
                .answer(Path::new("/other"), &question.id, "decline", None)
                .is_err(),
            "another workspace's editor answered"
        );
        let e = questions
            .answer(ws, &question.id, "accept", Some(json!({})))
            .unwrap_err();
        assert!(e.contains("required"), "{e}");
        questions
            .answer(ws, &question.id, "accept", Some(json!({"name": "Bo"})))
            .unwrap();
        assert_eq!(
            asked.await.unwrap(),
            Some(Answer::Accept(
                json!({"name": "Bo"}).as_object().unwrap().clone()
            ))
        );
        let late = questions.answer(ws, &question.id, "decline", None);
        assert!(late.unwrap_err().contains("no question"));
    }

    #[tokio::test]
    async fn an_unanswered_question_is_cancelled_and_withdrawn() {
        let questions = Arc::new(Questions::default());
        let bus = Bus::default();
        let ws = Path::new("/ws");
        let _editor = questions.attach(ws);
        let answer = questions
            .ask(&bus, ws, "s", "Hi?", schema(), Duration::from_millis(20))
            .await;
        assert_eq!(answer, Some(Answer::Cancel));
        assert!(questions.lock().pending.is_empty());
    }
}
