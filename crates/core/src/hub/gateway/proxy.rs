//! What the gateway re-exports of a downstream server, made safe for every client: its
//! tools' names (`server__tool`, within the 64 characters and `[A-Za-z0-9_-]` that model
//! APIs accept) and their schemas (`$ref`s inlined, since Gemini and Copilot refuse them).
//! Pure.

use std::collections::BTreeMap;

use serde_json::{Map, Value};
use xxhash_rust::xxh3::xxh3_64;

/// Between a server's name and its tool's in a re-exported name.
pub const SEPARATOR: &str = "__";
/// The longest tool name model APIs accept (OpenAI, Anthropic, Gemini).
pub const MAX_NAME: usize = 64;
/// How many times a recursive `$ref` is unfolded before it is cut to `{"type": "object"}`.
pub const MAX_REF_DEPTH: usize = 3;

/// The name a downstream tool is re-exported under: `server__tool`, each character outside
/// `[A-Za-z0-9_-]` made `_`; when that changed the name, made it longer than [`MAX_NAME`]
/// or the server's name holds the separator, shortened and ended with a hash of the
/// original pair, so two tools never share a name. The same pair always gives the same name; [`ToolNames`] reads it back.
pub fn tool_name(server: &str, tool: &str) -> String {
    let joined = format!("{server}{SEPARATOR}{tool}");
    let clean: String = joined
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    // A server's name with the separator in it would make the split ambiguous.
    if clean == joined && clean.len() <= MAX_NAME && !server.contains(SEPARATOR) {
        return clean;
    }
    let hash = format!("{:08x}", xxh3_64(joined.as_bytes()) as u32);
    let keep = MAX_NAME - hash.len() - 1;
    let prefix: String = clean.chars().take(keep).collect();
    format!("{prefix}_{hash}")
}

/// The re-exported names of a session's tools, read back to the server and the tool.
#[derive(Debug, Default, Clone)]
pub struct ToolNames {
    by_name: BTreeMap<String, (String, String)>,
}

impl ToolNames {
    /// Names `server`'s `tool`; the name given.
    pub fn insert(&mut self, server: &str, tool: &str) -> String {
        let name = tool_name(server, tool);
        self.by_name
            .insert(name.clone(), (server.to_string(), tool.to_string()));
        name
    }

    /// Forgets every tool of `server`.
    pub fn remove_server(&mut self, server: &str) {
        self.by_name.retain(|_, (s, _)| s != server);
    }

    /// The server and tool a re-exported name stands for.
    pub fn resolve(&self, name: &str) -> Option<(&str, &str)> {
        self.by_name
            .get(name)
            .map(|(s, t)| (s.as_str(), t.as_str()))
    }
}

/// A server's tools as the gateway re-exports them: renamed `server__tool`, schemas
/// without `$ref`s, and the way back from a name to the server's own.
#[derive(Debug, Default)]
pub struct Proxied {
    pub tools: Vec<rmcp::model::Tool>,
    /// Re-exported name → the server's name for it.
    by_name: std::collections::HashMap<String, String>,
}

impl Proxied {
    pub fn new(server: &str, tools: &[rmcp::model::Tool]) -> Proxied {
        let mut proxied = Proxied::default();
        for t in tools {
            let name = tool_name(server, &t.name);
            let mut tool = t.clone();
            tool.name = name.clone().into();
            tool.input_schema = std::sync::Arc::new(inline_refs(&t.input_schema));
            tool.output_schema = t
                .output_schema
                .as_ref()
                .map(|o| std::sync::Arc::new(inline_refs(o)));
            proxied.by_name.insert(name, t.name.to_string());
            proxied.tools.push(tool);
        }
        proxied
    }

    /// The server's name of the re-exported tool `name`, if it is one of these.
    pub fn original(&self, name: &str) -> Option<&str> {
        self.by_name.get(name).map(String::as_str)
    }
}

/// `schema` with every local `$ref` (`#/$defs/...`, `#/definitions/...`) replaced by what it
/// points to and the definitions dropped. A reference that recurses is unfolded
/// [`MAX_REF_DEPTH`] times, then cut to an object of any shape; a reference that points
/// nowhere becomes an object of any shape too (the server's own validation still applies).
pub fn inline_refs(schema: &Map<String, Value>) -> Map<String, Value> {
    let root = Value::Object(schema.clone());
    let mut out = schema.clone();
    out.remove("$defs");
    out.remove("definitions");
    let mut value = Value::Object(out);
    inline(&mut value, &root, &mut Vec::new());
    match value {
        Value::Object(o) => o,
        _ => unreachable!("an object stays an object"),
    }
}

fn inline(v: &mut Value, root: &Value, seen: &mut Vec<String>) {
    match v {
        Value::Object(o) => {
            if let Some(Value::String(reference)) = o.get("$ref").cloned() {
                o.remove("$ref");
                let depth = seen.iter().filter(|r| **r == reference).count();
                let target = reference
                    .strip_prefix('#')
                    .and_then(|pointer| root.pointer(pointer))
                    .filter(|_| depth < MAX_REF_DEPTH);
                match target {
                    Some(Value::Object(target)) => {
                        let mut target = target.clone();
                        target.remove("$defs");
                        target.remove("definitions");
                        // Keywords beside the `$ref` (a description) win over the target's.
                        for (k, value) in target {
                            o.entry(k).or_insert(value);
                        }
                        seen.push(reference);
                        for value in o.values_mut() {
                            inline(value, root, seen);
                        }
                        seen.pop();
                        return;
                    }
                    _ => {
                        o.entry("type").or_insert(Value::from("object"));
                    }
                }
            }
            for value in o.values_mut() {
                inline(value, root, seen);
            }
        }
        Value::Array(items) => {
            for item in items {
                inline(item, root, seen);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_are_kept_when_they_fit_and_hashed_when_they_do_not() {
        let (long, long_kept) = ("t".repeat(70), format!("a__{}_", "t".repeat(52)));
        let cases = [
            ("everything", "echo", "everything__echo"),
            ("fs", "read-file", "fs__read-file"),
            ("my.server", "get", "my_server__get_"),
            ("a", &long, &long_kept),
            ("ünï", "x", "_n___x_"),
        ];
        for (server, tool, starts) in cases {
            let name = tool_name(server, tool);
            assert!(name.starts_with(starts), "{server}/{tool}: {name}");
            assert!(name.len() <= MAX_NAME, "{name}");
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
                "{name}"
            );
            assert_eq!(name, tool_name(server, tool), "deterministic");
        }
        // Pairs that clean to the same text still differ.
        assert_ne!(tool_name("a.b", "c"), tool_name("a_b", "c"));
        assert_ne!(tool_name("a", "b__c"), tool_name("a__b", "c"));
        assert_ne!(tool_name("a", &long), tool_name("a", &format!("{long}u")));
    }

    #[test]
    fn names_read_back_until_their_server_goes() {
        let mut names = ToolNames::default();
        let echo = names.insert("everything", "echo");
        let odd = names.insert("my.server", "get thing");
        assert_eq!(names.resolve(&echo), Some(("everything", "echo")));
        assert_eq!(names.resolve(&odd), Some(("my.server", "get thing")));
        assert_eq!(names.resolve("everything__nothing"), None);
        names.remove_server("everything");
        assert_eq!(names.resolve(&echo), None);
        assert_eq!(names.resolve(&odd), Some(("my.server", "get thing")));
    }

    fn object(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(o) => o,
            _ => panic!("not an object"),
        }
    }

    #[test]
    fn refs_are_inlined_and_definitions_dropped() {
        let schema = object(json!({
            "type": "object",
            "properties": {
                "point": {"$ref": "#/$defs/Point", "description": "Where."},
                "points": {"type": "array", "items": {"$ref": "#/definitions/Point"}},
                "missing": {"$ref": "#/$defs/Nothing"},
                "remote": {"$ref": "https://example.com/schema.json"}
            },
            "$defs": {"Point": {"type": "object", "description": "A point.", "properties": {"x": {"type": "number"}}}},
            "definitions": {"Point": {"type": "object", "properties": {"x": {"type": "number"}}}}
        }));
        let flat = Value::Object(inline_refs(&schema));
        assert_eq!(
            flat,
            json!({
                "type": "object",
                "properties": {
                    "point": {"type": "object", "description": "Where.", "properties": {"x": {"type": "number"}}},
                    "points": {"type": "array", "items": {"type": "object", "properties": {"x": {"type": "number"}}}},
                    "missing": {"type": "object"},
                    "remote": {"type": "object"}
                }
            })
        );
    }

    #[test]
    fn recursive_refs_stop_at_a_bounded_depth() {
        let schema = object(json!({
            "$ref": "#/$defs/Node",
            "$defs": {"Node": {"type": "object", "properties": {
                "name": {"type": "string"},
                "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}
            }}}
        }));
        let flat = Value::Object(inline_refs(&schema));
        assert!(!flat.to_string().contains("$ref"), "{flat}");
        let mut depth = 0;
        let mut node = &flat;
        while let Some(child) = node.pointer("/properties/children/items") {
            depth += 1;
            node = child;
        }
        assert_eq!(depth, MAX_REF_DEPTH);
        assert_eq!(node, &json!({"type": "object"}));
    }
}
