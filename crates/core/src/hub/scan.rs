//! JSON text scanned as written, without building values: where a value ends, its compact
//! text, an object's members with their raw values, and such an object written back. The one
//! scanner of the hub, beside `mod.rs` since the config and the prompts both use it: command
//! lines (`prompts/command.rs`: bare JSON values, `--args`), tool calls in prompt text
//! (`prompts/inject.rs`) and the user's config file (`config/`) all read JSON through it.
//!
//! Raw text, not `serde_json::Value`, because what the user wrote must survive: key order
//! and number spelling (`1e3`, `-1.50`), which `Value` without `preserve_order` would lose.
//! Validity is serde_json's to decide ([`check`]); the scan itself only counts brackets and
//! skips strings, so it also measures text still being typed.

use serde::de::IgnoredAny;

/// Whether `text` is one valid JSON value (whitespace around allowed), and if not, why.
pub fn check(text: &str) -> Result<(), serde_json::Error> {
    serde_json::from_str::<IgnoredAny>(text).map(|_| ())
}

/// serde_json's message without its position (` at line L column C`), for a caller that
/// locates the problem itself.
pub fn problem(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let position = format!(" at line {} column {}", e.line(), e.column());
    text.strip_suffix(&position).unwrap_or(&text).to_owned()
}

/// The extent of the JSON value at the start of `text`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// Bytes from the start: up to and including a string's closing quote or a bracketed
    /// value's matching bracket; a bare scalar ends before the first `,`, `}`, `]` or
    /// whitespace. Unclosed, the span runs to the end of `text`.
    pub len: usize,
    /// False when a string or bracket opened in the span is not closed in `text`.
    pub closed: bool,
}

/// Where the JSON value at the start of `text` ends. Brackets inside strings do not count;
/// the text need not be valid JSON (a value being typed, or a bracketed word that is not
/// JSON at all).
pub fn value_span(text: &str) -> Span {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (i, c) in text.char_indices() {
        if in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
                if depth == 0 {
                    return Span {
                        len: i + 1,
                        closed: true,
                    };
                }
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' | '[' => depth += 1,
            '}' | ']' if depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    return Span {
                        len: i + 1,
                        closed: true,
                    };
                }
            }
            c if depth == 0 && (matches!(c, ',' | '}' | ']') || c.is_whitespace()) => {
                return Span {
                    len: i,
                    closed: true,
                };
            }
            _ => {}
        }
    }
    Span {
        len: text.len(),
        closed: depth == 0 && !in_string,
    }
}

/// The compact text of `text` when it is a JSON object or array: whitespace outside strings
/// removed, everything else (key order, number spelling, escapes) as written. `None` when it
/// is not valid JSON or not an object or array.
pub fn compact(text: &str) -> Option<String> {
    let trimmed = text.trim_matches(is_json_space);
    if !trimmed.starts_with(['{', '[']) {
        return None;
    }
    check(trimmed).ok()?;
    let mut out = String::with_capacity(trimmed.len());
    let (mut in_string, mut escaped) = (false, false);
    for c in trimmed.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
            out.push(c);
        } else if !is_json_space(c) {
            out.push(c);
        }
    }
    Some(out)
}

/// JSON's whitespace (RFC 8259): not Unicode's, whose vertical tab or no-break space around
/// a value make it invalid JSON.
fn is_json_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r')
}

/// The top-level members of a JSON object text, in order, each value as its raw text. `None`
/// when `text` is not a valid JSON object.
pub fn object_members(text: &str) -> Option<Vec<(String, &str)>> {
    let text = text.trim_matches(is_json_space);
    if !text.starts_with('{') {
        return None;
    }
    check(text).ok()?;
    // Valid JSON from here on: the scan below needs no error handling.
    let skip_ws = |i: usize| text.len() - text[i..].trim_start().len();
    let mut members = Vec::new();
    let mut i = skip_ws(1);
    while text[i..].starts_with('"') {
        let key_end = i + value_span(&text[i..]).len;
        let key: String = serde_json::from_str(&text[i..key_end]).ok()?;
        i = skip_ws(key_end);
        i = skip_ws(i + 1); // ':'
        let end = i + value_span(&text[i..]).len;
        members.push((key, &text[i..end]));
        i = skip_ws(end);
        if text[i..].starts_with(',') {
            i = skip_ws(i + 1);
        }
    }
    Some(members)
}

/// The indent of an object text's members: the blanks that open the line of its first key,
/// when only blanks precede that key on its line. `None` for an object written on one line
/// or without members.
pub fn member_indent(text: &str) -> Option<&str> {
    let key = text.find('"')?;
    let line_start = text[..key].rfind('\n').map_or(0, |n| n + 1);
    let indent = &text[line_start..key];
    (!indent.is_empty() && indent.chars().all(|c| c == ' ' || c == '\t')).then_some(indent)
}

/// An object's text from its members (raw values, as [`object_members`] gives them), one per
/// line with `indent`, keys escaped as JSON strings, and a final newline.
pub fn object_text(members: &[(String, &str)], indent: &str) -> String {
    format!("{}\n", object_text_at(members, indent, 0))
}

/// The same for an object `depth` levels deep in a file (its members indented one level
/// more, its closing brace at its own level), without the final newline; an object without
/// members is `{}`.
pub fn object_text_at(members: &[(String, &str)], indent: &str, depth: usize) -> String {
    if members.is_empty() && depth > 0 {
        return "{}".into();
    }
    let inner = indent.repeat(depth + 1);
    let body: Vec<String> = members
        .iter()
        .map(|(k, v)| format!("{inner}{}: {v}", serde_json::Value::String(k.clone())))
        .collect();
    format!("{{\n{}\n{}}}", body.join(",\n"), indent.repeat(depth))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_span_of_every_kind_of_start() {
        let cases: &[(&str, (&str, bool))] = &[
            (r#""a,b" x"#, (r#""a,b""#, true)),
            (r#""esc \" ]" x"#, (r#""esc \" ]""#, true)),
            ("-1.50e3, 2", ("-1.50e3", true)),
            ("true}", ("true", true)),
            ("null]", ("null", true)),
            ("42\n", ("42", true)),
            ("42", ("42", true)),
            (r#"{"a": "}"} rest"#, (r#"{"a": "}"}"#, true)),
            (r#"[1, {"b": [2]}]x"#, (r#"[1, {"b": [2]}]"#, true)),
            ("[a-z]+", ("[a-z]", true)),
            ("{x}", ("{x}", true)),
            (r#"{"a": [1, "#, (r#"{"a": [1, "#, false)),
            ("[", ("[", false)),
            (r#""open"#, (r#""open"#, false)),
            (r#"["a\"]"#, (r#"["a\"]"#, false)),
            ("{é: ☃}", ("{é: ☃}", true)),
            ("", ("", true)),
        ];
        for &(text, (span, closed)) in cases {
            let got = value_span(text);
            assert_eq!((&text[..got.len], got.closed), (span, closed), "{text:?}");
        }
    }

    #[test]
    fn compact_keeps_what_was_written_but_blanks() {
        let cases: &[(&str, Option<&str>)] = &[
            (r#"{"a": 1}"#, Some(r#"{"a":1}"#)),
            (" [1, 2,\n 3] ", Some("[1,2,3]")),
            (r#"{"b": 1e3, "a": -0.50}"#, Some(r#"{"b":1e3,"a":-0.50}"#)),
            (r#"{"s": "x y \"z\""}"#, Some(r#"{"s":"x y \"z\""}"#)),
            (r#"{"u": "\u00e9"}"#, Some(r#"{"u":"\u00e9"}"#)),
            ("{}", Some("{}")),
            ("42", None),
            (r#""text""#, None),
            ("{a b}", None),
            ("[1, 2,]", None),
            ("[1] x", None),
            ("", None),
            // Whitespace outside JSON's four makes the text invalid, around it too.
            ("\u{b}[[]\n]", None),
            ("\u{a0}{}", None),
        ];
        for &(text, want) in cases {
            assert_eq!(compact(text).as_deref(), want, "{text:?}");
        }
    }

    #[test]
    fn object_members_keep_raw_values_in_order() {
        let text = r#" { "z" : [1, {"a": "}"}] , "a\"b":"s,t" ,"n":-1.50e3,"t":true, "o":{} } "#;
        assert_eq!(
            object_members(text).unwrap(),
            [
                ("z".to_owned(), r#"[1, {"a": "}"}]"#),
                ("a\"b".to_owned(), r#""s,t""#),
                ("n".to_owned(), "-1.50e3"),
                ("t".to_owned(), "true"),
                ("o".to_owned(), "{}"),
            ]
        );
        let refused = ["[1]", "{bad}", "", "{\"a\": 1", "\"s\""];
        for text in refused {
            assert_eq!(object_members(text), None, "{text:?}");
        }
        assert_eq!(object_members("{}").unwrap(), []);
    }

    #[test]
    fn member_indent_is_that_of_the_first_key() {
        let cases: &[(&str, Option<&str>)] = &[
            ("{\n    \"a\": 1\n}", Some("    ")),
            ("{\n\t\"a\": {\n\t\t\"b\": 2}}", Some("\t")),
            (r#"{"a": 1}"#, None),
            ("{\n  x \"a\": 1}", None),
            ("{}", None),
        ];
        for &(text, want) in cases {
            assert_eq!(member_indent(text), want, "{text:?}");
        }
    }

    #[test]
    fn object_text_reads_back_as_the_same_members() {
        let members = vec![
            ("z".to_owned(), "[1, 2]"),
            ("quote\"d".to_owned(), r#""v""#),
        ];
        let text = object_text(&members, "  ");
        assert_eq!(text, "{\n  \"z\": [1, 2],\n  \"quote\\\"d\": \"v\"\n}\n");
        assert_eq!(object_members(&text).unwrap(), members);
        assert_eq!(member_indent(&text), Some("  "));
    }

    #[test]
    fn problem_drops_the_position() {
        let e = check("[1, 2,]").unwrap_err();
        assert_eq!(problem(&e), "expected value");
        let e = check("{a}").unwrap_err();
        assert_eq!(problem(&e), "key must be a string");
    }
}
