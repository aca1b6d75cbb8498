//! The tools' schemas as every MCP client takes them: `tools/list` from the real binary,
//! every input and output schema through a strict validator of the OpenAPI 3.0 subset
//! Gemini applies to function declarations, and each tool compared with the specs' own JSON.
//!
//! `spec_tools.json` is that JSON: each tool's input and output schema copied from spec 003
//! and spec 004 as they are written. Spec 004 gives its outputs as examples, so the output
//! schemas of `start_workflow`, `start_task` and `complete_task` are those examples' fields
//! with their JSON types; it gives none for the `log_*` tools. Compared: property names
//! (exactly for arguments; a result may have documented extras), `type`, `enum`, `required`
//! (exactly for arguments), `default`, `minimum`, `maximum` and `maxLength`, at every level.
//! The spec's `nullable` is not compared: a result field with no value is left out instead
//! (`calls::schema`).

use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::util::{TestHome, npm_modules, tandem_bin};

const SPEC: &str = include_str!("spec_tools.json");
/// Tools no spec names: `mcp_call` (issue 11: the gateway's way to a proxied tool for
/// clients that ignore `list_changed`), which has no outputSchema (it answers with what the
/// downstream tool answers), and `rekall_suggest_entries` (issue 12: the entries learned
/// from completed tasks, in the style of `rekall_suggest_links`). Their schemas are checked
/// for flatness, not against a spec.
const BEYOND_SPECS: &[&str] = &["mcp_call", "rekall_suggest_entries"];

#[tokio::test]
async fn every_tool_schema_is_flat_and_says_what_the_spec_says() {
    let home = TestHome::new();
    let c = home.mcp().await;
    let tools = c.client.list_all_tools().await.unwrap();
    c.close().await;
    let spec: Map<String, Value> = serde_json::from_str(SPEC).unwrap();

    let mut names: Vec<&str> = tools
        .iter()
        .map(|t| t.name.as_ref())
        .filter(|n| !BEYOND_SPECS.contains(n))
        .collect();
    names.sort();
    let specified: Vec<&str> = spec.keys().map(String::as_str).collect();
    assert_eq!(
        names, specified,
        "the tool list is the specs' tools (sorted)"
    );

    let mut problems = Vec::new();
    for t in &tools {
        let input = Value::Object(t.input_schema.as_ref().clone());
        if BEYOND_SPECS.contains(&t.name.as_ref()) {
            strict(&input, &format!("{} inputSchema", t.name), &mut problems);
            if let Some(output) = t.output_schema.as_deref() {
                let output = Value::Object(output.clone());
                strict(&output, &format!("{} outputSchema", t.name), &mut problems);
            }
            continue;
        }
        let output = Value::Object(
            t.output_schema
                .as_deref()
                .unwrap_or_else(|| panic!("{} has no outputSchema", t.name))
                .clone(),
        );
        let name = t.name.as_ref();
        for (what, schema) in [("inputSchema", &input), ("outputSchema", &output)] {
            let at = format!("{name} {what}");
            if schema["type"] != "object" {
                problems.push(format!("{at}: the root is not an object"));
            }
            strict(schema, &at, &mut problems);
        }
        let expected = &spec[name];
        conforms(
            &expected["input"],
            &input,
            Side::Arguments,
            &format!("{name} inputSchema"),
            &mut problems,
        );
        if let Some(o) = expected.get("output") {
            conforms(
                o,
                &output,
                Side::Result,
                &format!("{name} outputSchema"),
                &mut problems,
            );
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

/// The official TypeScript SDK, which Claude Code and Gemini CLI are built on, as the agent
/// (`tests/node/sdk_client.cjs`): listing the tools compiles every outputSchema with Ajv,
/// which warns on the console about what it does not know (every `format: uint64` was a
/// line), and every call's result is validated against its tool's outputSchema.
#[tokio::test]
async fn the_typescript_sdk_takes_every_schema_and_result_without_a_word() {
    let home = TestHome::new();
    let workspace = home.path().join("work");
    std::fs::create_dir_all(&workspace).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/node/sdk_client.cjs");
    let mut node = tokio::process::Command::new("node");
    home.isolate(node.as_std_mut());
    node.arg(script)
        .env("NODE_PATH", npm_modules())
        .env("TANDEM_BIN", tandem_bin())
        .env("WORKSPACE", &workspace)
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(60), node.output())
        .await
        .expect("the TypeScript client hung")
        .expect("node runs (scripts/test needs it for the reference servers)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("{e}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(report["failed"], json!([]), "calls failed: {report:#}");
    assert_eq!(
        report["said"],
        json!([]),
        "the client said something: {report:#}"
    );
    assert_eq!(report["tools"], 21);
}

// ---- the strict validator ---------------------------------------------------------------

/// Keywords of the OpenAPI 3.0 Schema Object that Gemini's function declarations take.
/// Anything else (`$ref`, `$defs`, `$schema`, `anyOf`, `oneOf`, `allOf`, `not`, `const`,
/// `prefixItems`, ...) is refused.
const KEYWORDS: &[&str] = &[
    "type",
    "format",
    "title",
    "description",
    "nullable",
    "enum",
    "default",
    "example",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "minItems",
    "maxItems",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
];

const TYPES: &[&str] = &["string", "number", "integer", "boolean", "array", "object"];

/// Formats JSON Schema defines that Gemini also takes (Ajv warns about any it does not know).
const FORMATS: &[&str] = &["date-time"];

/// Reports in `problems` everything in `s` (at `at`) outside the subset.
fn strict(s: &Value, at: &str, problems: &mut Vec<String>) {
    let mut problem = |what: String| problems.push(format!("{at}: {what}"));
    let Some(o) = s.as_object() else {
        problem(format!("a boolean schema ({s})"));
        return;
    };
    for k in o.keys() {
        if !KEYWORDS.contains(&k.as_str()) {
            problem(format!("`{k}` is not in the subset"));
        }
    }
    let ty = match o.get("type") {
        Some(Value::String(t)) if TYPES.contains(&t.as_str()) => t.as_str(),
        Some(other) => {
            problem(format!("`type` is not one type name: {other}"));
            return;
        }
        None => {
            problem("no `type`".into());
            return;
        }
    };
    let only_on = |key: &str, types: &[&str], problem: &mut dyn FnMut(String)| {
        if o.contains_key(key) && !types.contains(&ty) {
            problem(format!("`{key}` on a {ty}"));
        }
    };
    only_on("properties", &["object"], &mut problem);
    only_on("required", &["object"], &mut problem);
    only_on("additionalProperties", &["object"], &mut problem);
    only_on("items", &["array"], &mut problem);
    only_on("minItems", &["array"], &mut problem);
    only_on("maxItems", &["array"], &mut problem);
    only_on("enum", &["string"], &mut problem);
    only_on("minLength", &["string"], &mut problem);
    only_on("maxLength", &["string"], &mut problem);
    only_on("pattern", &["string"], &mut problem);
    only_on("minimum", &["integer", "number"], &mut problem);
    only_on("maximum", &["integer", "number"], &mut problem);
    for key in ["title", "description", "pattern"] {
        if o.get(key).is_some_and(|v| !v.is_string()) {
            problem(format!("`{key}` is not a string"));
        }
    }
    if o.get("nullable").is_some_and(|v| !v.is_boolean()) {
        problem("`nullable` is not a boolean".into());
    }
    if let Some(f) = o.get("format")
        && !(ty == "string" && f.as_str().is_some_and(|f| FORMATS.contains(&f)))
    {
        problem(format!("format {f} on a {ty}"));
    }
    for key in ["minimum", "maximum"] {
        if o.get(key).is_some_and(|v| !v.is_number()) {
            problem(format!("`{key}` is not a number"));
        }
    }
    let bound = |key: &str| o.get(key).and_then(Value::as_f64);
    if let (Some(min), Some(max)) = (bound("minimum"), bound("maximum"))
        && min > max
    {
        problem(format!("minimum {min} > maximum {max}"));
    }
    for key in ["minLength", "maxLength", "minItems", "maxItems"] {
        if o.get(key).is_some_and(|v| !v.is_u64()) {
            problem(format!("`{key}` is not a count"));
        }
    }
    let allowed = o.get("enum").map(|e| match e.as_array() {
        Some(values) if !values.is_empty() && values.iter().all(Value::is_string) => values.clone(),
        _ => {
            problem(format!("`enum` is not a list of strings: {e}"));
            Vec::new()
        }
    });
    if let Some(d) = o.get("default") {
        let typed = match ty {
            "string" => d.is_string() && allowed.as_ref().is_none_or(|a| a.contains(d)),
            "integer" => d.is_i64() || d.is_u64(),
            "number" => d.is_number(),
            "boolean" => d.is_boolean(),
            "array" => d.is_array(),
            _ => d.is_object(),
        };
        let in_bounds = d.as_f64().is_none_or(|d| {
            bound("minimum").is_none_or(|m| d >= m) && bound("maximum").is_none_or(|m| d <= m)
        });
        if !(typed && in_bounds) {
            problem(format!("default {d} is not a valid {ty} here"));
        }
    }
    if ty == "array" {
        match o.get("items") {
            Some(items) => strict(items, &format!("{at}[]"), problems),
            None => problems.push(format!("{at}: an array without `items`")),
        }
    }
    let properties = match o.get("properties") {
        None => Map::new(),
        Some(Value::Object(p)) => p.clone(),
        Some(other) => {
            problems.push(format!("{at}: `properties` is not an object: {other}"));
            Map::new()
        }
    };
    for (name, p) in &properties {
        strict(p, &format!("{at}.{name}"), problems);
    }
    if let Some(r) = o.get("required") {
        let names: Vec<&str> = r
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if r.as_array().is_none_or(|r| r.len() != names.len()) {
            problems.push(format!("{at}: `required` is not a list of names: {r}"));
        }
        for (i, n) in names.iter().enumerate() {
            if !properties.contains_key(*n) {
                problems.push(format!("{at}: required `{n}` is not a property"));
            }
            if names[..i].contains(n) {
                problems.push(format!("{at}: `{n}` is required twice"));
            }
        }
    }
    match o.get("additionalProperties") {
        None | Some(Value::Bool(_)) => {}
        Some(extra) => strict(extra, &format!("{at}.*"), problems),
    }
}

// ---- the comparison with the spec -------------------------------------------------------

#[derive(Clone, Copy, PartialEq)]
enum Side {
    /// Exactly the spec's properties and `required`.
    Arguments,
    /// The spec's properties at least: a result may carry documented extras.
    Result,
}

/// Keywords whose value must be the spec's when the spec gives one.
const COMPARED: &[&str] = &["type", "enum", "default", "minimum", "maximum", "maxLength"];

/// Reports in `problems` where `ours` (at `at`) does not say what `spec` says.
fn conforms(spec: &Value, ours: &Value, side: Side, at: &str, problems: &mut Vec<String>) {
    for key in COMPARED {
        let (Some(want), got) = (spec.get(*key), ours.get(*key)) else {
            continue;
        };
        // 0 and 0.0 are the same bound.
        let same = match (want.as_f64(), got.and_then(Value::as_f64)) {
            (Some(w), Some(g)) => w == g,
            _ => Some(want) == got,
        };
        if !same {
            problems.push(format!(
                "{at}: `{key}` is {}, the spec says {want}",
                got.map_or("absent".into(), Value::to_string)
            ));
        }
    }
    let names = |s: &Value, key: &str| -> Vec<String> {
        let mut names: Vec<String> = match s.get(key) {
            Some(Value::Object(o)) => o.keys().cloned().collect(),
            Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).map(Into::into).collect(),
            _ => Vec::new(),
        };
        names.sort();
        names
    };
    let (spec_properties, our_properties) = (names(spec, "properties"), names(ours, "properties"));
    let (spec_required, our_required) = (names(spec, "required"), names(ours, "required"));
    let not_in = |names: &[String], other: &[String]| -> Vec<String> {
        names
            .iter()
            .filter(|n| !other.contains(n))
            .cloned()
            .collect()
    };
    let missing = not_in(&spec_properties, &our_properties);
    if !missing.is_empty() {
        problems.push(format!("{at}: no property {missing:?}"));
    }
    if side == Side::Arguments {
        let extra = not_in(&our_properties, &spec_properties);
        if !extra.is_empty() {
            problems.push(format!("{at}: properties {extra:?} are not in the spec"));
        }
        if spec_required != our_required {
            problems.push(format!(
                "{at}: required {our_required:?}, the spec says {spec_required:?}"
            ));
        }
    } else if !not_in(&spec_required, &our_required).is_empty() {
        problems.push(format!(
            "{at}: required {our_required:?} lacks some of the spec's {spec_required:?}"
        ));
    }
    for p in spec_properties
        .iter()
        .filter(|p| our_properties.contains(p))
    {
        conforms(
            &spec["properties"][p],
            &ours["properties"][p],
            side,
            &format!("{at}.{p}"),
            problems,
        );
    }
    if let (Some(spec_items), Some(our_items)) = (spec.get("items"), ours.get("items")) {
        conforms(spec_items, our_items, side, &format!("{at}[]"), problems);
    }
}
