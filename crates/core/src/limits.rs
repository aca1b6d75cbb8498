//! How large each field of a call may be. Every call's parameters pass [`check`] before they
//! are read (`calls::parse`, and `calls::Method::run` for a face that has them typed), and
//! so does every entry of an import: past a limit the call answers `INVALID_ARGUMENT`
//! naming the field and the limit, and nothing is stored.
//!
//! The limits are generous (a user should never meet one by accident) and each is named
//! once, in [`FIELDS`], by the field's path in the parameters: `outcome.summary` is the
//! `summary` of the object `outcome`, and `[]` stands for a list's items. A string or a list
//! that no path names gets [`ANY_CHARS`] or [`ANY_ITEMS`].

use serde_json::{Map, Value};

use crate::memory::records::MAX_TITLE_CHARS;

/// What a field may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// A string of at most this many characters.
    Chars(usize),
    /// A list of at most `items` items, each string of at most `chars` characters.
    List { items: usize, chars: usize },
    /// Any JSON value whose text takes at most this many bytes (the fields inside it still
    /// have their own limits).
    Bytes(usize),
    /// Not limited as a whole: an import's JSON Lines, whose entries are each checked.
    Unlimited,
}

/// An identifier: a ULID has 26 characters, and a prefix fewer.
const ID: Limit = Limit::Chars(100);
/// A name: a workflow's, a task's, a project's, a prompt's or a server's.
const NAME: Limit = Limit::Chars(200);
/// A sentence or two: a question, a choice, a milestone's message.
const LINE: Limit = Limit::Chars(2_000);
/// A few paragraphs: a goal, a description, a reasoning, a summary.
const TEXT: Limit = Limit::Chars(20_000);
/// Lists of short texts: achievements, options, next steps.
const LINES: Limit = Limit::List {
    items: 100,
    chars: 2_000,
};

/// Every limited field, by its path in a call's parameters. The same names in different
/// calls mean the same kind of thing (a `name` is a name wherever it is).
pub const FIELDS: &[(&str, Limit)] = &[
    // Memory (spec 003).
    ("title", Limit::Chars(MAX_TITLE_CHARS)),
    ("content", Limit::Chars(100_000)),
    // Past 10,000 characters only the first 8,000 are kept (the spec); past this, refused.
    ("context", Limit::Chars(1_000_000)),
    (
        "tags",
        Limit::List {
            items: 50,
            chars: 100,
        },
    ),
    ("project", NAME),
    ("query", Limit::Chars(10_000)),
    ("type", NAME),
    ("memory_type", NAME),
    ("relation_type", NAME),
    ("kind", NAME),
    ("id", ID),
    ("source_id", ID),
    ("target_id", ID),
    ("suggestion_id", ID),
    (
        "entry_ids",
        Limit::List {
            items: 100,
            chars: 100,
        },
    ),
    ("jsonl", Limit::Unlimited),
    // Task tracking (spec 004).
    ("name", NAME),
    ("description", TEXT),
    (
        "plan",
        Limit::List {
            items: 200,
            chars: 0,
        },
    ),
    ("plan[].step", LINE),
    ("plan[].goal", TEXT),
    ("workflow_id", ID),
    ("parent_task_id", ID),
    ("task_id", ID),
    ("goal", TEXT),
    (
        "areas",
        Limit::List {
            items: 100,
            chars: 1_000,
        },
    ),
    (
        "paths",
        Limit::List {
            items: 100_000,
            chars: 4_096,
        },
    ),
    ("category", NAME),
    ("question", LINE),
    ("options_considered", LINES),
    ("chosen", LINE),
    ("reasoning", TEXT),
    ("trade_offs", TEXT),
    ("resolution", TEXT),
    ("message", LINE),
    ("metadata", Limit::Bytes(1024 * 1024)),
    ("status", NAME),
    ("outcome.summary", TEXT),
    ("outcome.achievements", LINES),
    ("outcome.limitations", LINES),
    ("outcome.next_steps", LINES),
    ("outcome.manual_review_reason", TEXT),
    (
        "metadata.packages_added",
        Limit::List {
            items: 1_000,
            chars: 200,
        },
    ),
    (
        "metadata.packages_removed",
        Limit::List {
            items: 1_000,
            chars: 200,
        },
    ),
    (
        "metadata.commands_executed",
        Limit::List {
            items: 1_000,
            chars: 4_000,
        },
    ),
    ("metadata.tests_status", NAME),
];

/// Any string that [`FIELDS`] does not name (a prompt's argument, a command line, a
/// conversation's message).
pub const ANY_CHARS: usize = 1_000_000;
/// Any list that [`FIELDS`] does not name.
pub const ANY_ITEMS: usize = 10_000;

/// A field past its limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}; the limit is {limit}")]
pub struct TooLarge {
    /// The field as the caller wrote it: `tags`, `outcome.achievements[3]`.
    pub field: String,
    /// What was sent: "5000 items", "150 characters".
    pub what: String,
    /// The limit, in the same unit.
    pub limit: String,
}

/// Checks every field of `params` against its limit; the first one past it is the error.
pub fn check(params: &Value) -> Result<(), TooLarge> {
    walk(params, &mut Path::default(), None)
}

/// Checks a string field of a record read typed (an import's entry), named as in
/// [`FIELDS`]: what [`check`] finds of it in the record's JSON.
pub fn check_text(field: &str, value: &str) -> Result<(), TooLarge> {
    text_within(value, limit_of(field), None).map_err(|over| Path::at(field).over(over))
}

/// Checks a list of strings of a record read typed, as [`check_text`] a string.
pub fn check_texts(field: &str, items: &[String]) -> Result<(), TooLarge> {
    let chars =
        count_within(items.len(), limit_of(field)).map_err(|over| Path::at(field).over(over))?;
    for (i, item) in items.iter().enumerate() {
        text_within(item, None, chars).map_err(|over| {
            let mut path = Path::at(field);
            path.enter(Step::Item(i), |path| path.over(over))
        })?;
    }
    Ok(())
}

/// The limit [`FIELDS`] gives the field at `pattern`.
fn limit_of(pattern: &str) -> Option<Limit> {
    FIELDS
        .iter()
        .find(|(path, _)| *path == pattern)
        .map(|&(_, limit)| limit)
}

/// Where the walk is: the path as the caller wrote it, and as [`FIELDS`] names it.
#[derive(Default)]
struct Path {
    shown: String,
    pattern: String,
}

impl Path {
    /// A top-level field.
    fn at(field: &str) -> Path {
        Path {
            shown: field.to_string(),
            pattern: field.to_string(),
        }
    }

    /// Runs `f` one step further in: `key` of an object, or item `index` of a list.
    fn enter<T>(&mut self, step: Step, f: impl FnOnce(&mut Path) -> T) -> T {
        let (shown, pattern) = (self.shown.len(), self.pattern.len());
        match step {
            Step::Key(key) => {
                for s in [&mut self.shown, &mut self.pattern] {
                    if !s.is_empty() {
                        s.push('.');
                    }
                    s.push_str(key);
                }
            }
            Step::Item(index) => {
                self.shown.push_str(&format!("[{index}]"));
                self.pattern.push_str("[]");
            }
        }
        let out = f(self);
        self.shown.truncate(shown);
        self.pattern.truncate(pattern);
        out
    }

    fn limit(&self) -> Option<Limit> {
        limit_of(&self.pattern)
    }

    fn over(&self, over: Over) -> TooLarge {
        match over {
            Over::Chars { count, max } => {
                self.too_large(format!("{count} characters"), format!("{max} characters"))
            }
            Over::Items { count, max } => {
                self.too_large(format!("{count} items"), format!("{max} items"))
            }
        }
    }

    fn too_large(&self, what: String, limit: String) -> TooLarge {
        TooLarge {
            field: self.shown.clone(),
            what,
            limit,
        }
    }
}

enum Step<'a> {
    Key(&'a str),
    Item(usize),
}

/// Checks `value` at `path`; `item_chars` is the limit of a string in a list that names one.
fn walk(value: &Value, path: &mut Path, item_chars: Option<usize>) -> Result<(), TooLarge> {
    let limit = path.limit();
    match (value, limit) {
        (_, Some(Limit::Unlimited)) => Ok(()),
        (_, Some(Limit::Bytes(max))) => {
            let bytes = serde_json::to_string(value).map_or(0, |s| s.len());
            if bytes > max {
                return Err(
                    path.too_large(format!("{bytes} bytes of JSON"), format!("{max} bytes"))
                );
            }
            within(value, path)
        }
        (Value::String(s), limit) => {
            text_within(s, limit, item_chars).map_err(|over| path.over(over))
        }
        (Value::Array(items), limit) => {
            let chars = count_within(items.len(), limit).map_err(|over| path.over(over))?;
            items
                .iter()
                .enumerate()
                .try_for_each(|(i, item)| path.enter(Step::Item(i), |path| walk(item, path, chars)))
        }
        _ => within(value, path),
    }
}

/// What is past a limit: a string's characters or a list's items.
enum Over {
    Chars { count: usize, max: usize },
    Items { count: usize, max: usize },
}

/// A string of at most its limit's characters (`item_chars` in a list that names one, else
/// [`ANY_CHARS`]).
fn text_within(s: &str, limit: Option<Limit>, item_chars: Option<usize>) -> Result<(), Over> {
    let max = match limit {
        Some(Limit::Chars(max)) => max,
        _ => item_chars.unwrap_or(ANY_CHARS),
    };
    chars_within(s, max).map_err(|count| Over::Chars { count, max })
}

/// A list of at most its limit's `count` items ([`ANY_ITEMS`] if none is named); the limit
/// of its strings, if it names one.
fn count_within(count: usize, limit: Option<Limit>) -> Result<Option<usize>, Over> {
    let (max, chars) = match limit {
        Some(Limit::List { items, chars }) => (items, (chars > 0).then_some(chars)),
        _ => (ANY_ITEMS, None),
    };
    if count > max {
        return Err(Over::Items { count, max });
    }
    Ok(chars)
}

/// Writes the limits into a call's parameters schema, the flat JSON Schema the MCP tools
/// advertise: `maxLength` on a string [`FIELDS`] names (an enum's values say more), and
/// `maxItems` on a list it names, with `maxLength` on the list's strings when the limit has
/// one. Answers the paths of [`FIELDS`] found in the schema.
pub fn annotate(schema: &mut Map<String, Value>) -> Vec<&'static str> {
    let mut found = Vec::new();
    annotate_at(schema, &mut Path::default(), &mut found);
    found
}

fn annotate_at(schema: &mut Map<String, Value>, path: &mut Path, found: &mut Vec<&'static str>) {
    if let Some(&(name, limit)) = FIELDS.iter().find(|(name, _)| *name == path.pattern) {
        found.push(name);
        match limit {
            Limit::Chars(max) if is_string(schema) => {
                schema.insert("maxLength".into(), max.into());
            }
            Limit::List { items, chars } if has_type(schema, "array") => {
                schema.insert("maxItems".into(), items.into());
                if let Some(Value::Object(item)) = schema.get_mut("items")
                    && chars > 0
                    && is_string(item)
                {
                    item.insert("maxLength".into(), chars.into());
                }
            }
            _ => {}
        }
    }
    if let Some(Value::Object(properties)) = schema.get_mut("properties") {
        for (key, property) in properties.iter_mut() {
            if let Value::Object(property) = property {
                path.enter(Step::Key(key), |path| annotate_at(property, path, found));
            }
        }
    }
    if let Some(Value::Object(item)) = schema.get_mut("items") {
        path.enter(Step::Item(0), |path| annotate_at(item, path, found));
    }
}

/// Whether a schema is of `kind` (`type` one name, or a list of them).
fn has_type(schema: &Map<String, Value>, kind: &str) -> bool {
    match schema.get("type") {
        Some(Value::String(t)) => t == kind,
        Some(Value::Array(types)) => types.iter().any(|t| t == kind),
        _ => false,
    }
}

/// A free string: of type `string`, not one of an `enum`'s values.
fn is_string(schema: &Map<String, Value>) -> bool {
    has_type(schema, "string") && !schema.contains_key("enum")
}

/// Checks the fields of `value`, when it is an object.
fn within(value: &Value, path: &mut Path) -> Result<(), TooLarge> {
    match value {
        Value::Object(fields) => fields
            .iter()
            .try_for_each(|(key, v)| path.enter(Step::Key(key), |path| walk(v, path, None))),
        _ => Ok(()),
    }
}

/// `Ok` when `s` has at most `max` characters, else its count. A string of at most `max`
/// bytes is not counted.
fn chars_within(s: &str, max: usize) -> Result<(), usize> {
    if s.len() <= max {
        return Ok(());
    }
    match s.chars().count() {
        n if n > max => Err(n),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn field_of(params: Value) -> Option<(String, String)> {
        check(&params)
            .err()
            .map(|e| (e.field.clone(), e.to_string()))
    }

    #[test]
    fn named_fields_have_their_limits() {
        let cases = [
            (
                json!({"title": "t".repeat(101)}),
                "title",
                "101 characters; the limit is 100 characters",
            ),
            (
                json!({"content": "c".repeat(100_001)}),
                "content",
                "100001 characters",
            ),
            (
                json!({"tags": vec!["a"; 51]}),
                "tags",
                "51 items; the limit is 50 items",
            ),
            (
                json!({"tags": ["ok", "x".repeat(101)]}),
                "tags[1]",
                "101 characters; the limit is 100",
            ),
            (json!({"name": "n".repeat(201)}), "name", "201 characters"),
            (
                json!({"outcome": {"summary": "ok", "achievements": ["a", "b", "c".repeat(2_001)]}}),
                "outcome.achievements[2]",
                "2001 characters",
            ),
            (
                json!({"plan": [{"step": "s", "goal": "g".repeat(20_001)}]}),
                "plan[0].goal",
                "20001",
            ),
            (
                json!({"metadata": {"blob": "b".repeat(1_100_000)}}),
                "metadata",
                "bytes of JSON; the limit is 1048576 bytes",
            ),
            (
                json!({"metadata": {"commands_executed": vec!["c"; 1_001]}}),
                "metadata.commands_executed",
                "1001 items",
            ),
            (
                json!({"arguments": {"code": "a".repeat(ANY_CHARS + 1)}}),
                "arguments.code",
                "the limit is 1000000 characters",
            ),
            (
                json!({"conversation": vec![json!({}); ANY_ITEMS + 1]}),
                "conversation",
                "10001 items",
            ),
        ];
        for (params, field, message) in cases {
            let (got_field, got_message) = field_of(params).expect(field);
            assert_eq!(got_field, field);
            assert!(got_message.contains(message), "{field}: {got_message}");
        }
    }

    #[test]
    fn within_limits_passes() {
        let params = json!({
            "title": "é".repeat(100),
            "content": "c".repeat(100_000),
            "tags": vec!["t".repeat(100); 50],
            "jsonl": "x".repeat(ANY_CHARS + 1),
            "metadata": {"packages_added": vec!["p"; 1_000], "tests_status": "passed"},
            "conversation": [{"role": "user", "content": "c".repeat(500_000)}],
            "progress": 50.0,
        });
        assert_eq!(check(&params), Ok(()));
    }

    #[test]
    fn characters_not_bytes_are_counted() {
        // 100 two-byte characters: 200 bytes, within the title's 100 characters.
        assert_eq!(check(&json!({"title": "é".repeat(100)})), Ok(()));
        assert!(check(&json!({"title": "é".repeat(101)})).is_err());
    }

    /// A record read typed (an import's entry) meets the limits its JSON would.
    #[test]
    fn a_typed_record_is_checked_as_its_json() {
        let lists = [
            vec!["ok".to_string(), "x".repeat(101)],
            vec!["t".to_string(); 51],
            vec!["fine".to_string(); 50],
        ];
        for tags in lists {
            assert_eq!(check_texts("tags", &tags), check(&json!({ "tags": tags })));
        }
        let texts = [
            ("content", "c".repeat(100_001)),
            ("title", "é".repeat(101)),
            ("title", "é".repeat(100)),
            ("author", "a".repeat(ANY_CHARS + 1)),
        ];
        for (field, text) in texts {
            assert_eq!(check_text(field, &text), check(&json!({ field: text })));
        }
        assert!(check_texts("tags", &["x".repeat(101)]).is_err());
        assert!(check_text("content", &"c".repeat(100_001)).is_err());
    }

    #[test]
    fn every_named_path_is_distinct() {
        let mut paths: Vec<&str> = FIELDS.iter().map(|(p, _)| *p).collect();
        paths.sort();
        paths.dedup();
        assert_eq!(paths.len(), FIELDS.len());
    }
}
