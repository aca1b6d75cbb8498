//! Prompt commands: `/server:prompt name=value ...`, how an editor runs a downstream server's
//! prompt (spec 002), and where a cursor stands in one for completion.
//!
//! Pure: no I/O, no protocol types. The hub feeds it the cached prompt list; the LSP face
//! turns [`CompletionSite`]s into completion items; editors have lines read here through
//! `hub/parse_command` ([`append_arguments`]) rather than keep a grammar of their own. JSON
//! values in a line are measured and compacted by `crate::hub::scan`.
//!
//! # Grammar
//!
//! ```text
//! line     = ws* "/" server ":" prompt (ws+ argument)* ws*
//! server   = name-char+                      letters, digits, '-', '_', '.'
//! prompt   = (name-char | ":")+              the server is what precedes the first ':'
//! argument = name "=" value                  name = name-char+
//! value    = json | part*                    parts concatenate: a="b c"d is `b cd`
//! part     = '"' ... '"'                     escapes \" \\ \n \t \r; any other \x stays as is
//!          | "'" ... "'"                     literal
//!          | "\" char                        the char, literally (even a space or a quote)
//!          | any other char but whitespace
//! json     = a bare value starting with '{' or '[' runs to its matching bracket (brackets
//!            inside JSON strings do not count), spaces included; if that text is valid JSON
//!            and ends the word, the value is its compact JSON text (key order and numbers
//!            kept as typed). A bracketed value that is not JSON is read as ordinary parts
//!            when it holds no unquoted space (`[a-z]+`, `{x}`), else it is an error: quote it.
//! ```
//!
//! MCP prompt arguments are strings, so every value is text: numbers and booleans stay as
//! typed. An empty value (`k=` or `k=""`) is the empty string. Nothing is dropped silently:
//! anything that is not `name=value` is an [`CommandError`] naming it and its column.
//!
//! Columns in messages are 1-based and count characters; offsets in the API are bytes.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::{Value, json};

use crate::hub::scan::{self, Span};

/// A parsed prompt command: which server's prompt to get, with which arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptCommand {
    /// The downstream server's name (before the first `:`).
    pub server: String,
    /// The prompt's full name (after the first `:`; may itself hold `:`).
    pub prompt: String,
    /// The arguments, unquoted. MCP prompt arguments are `string → string`.
    pub arguments: BTreeMap<String, String>,
}

/// One argument a prompt declares (MCP's `PromptArgument`, as plain data).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgumentSpec {
    pub name: String,
    pub description: Option<String>,
    pub required: bool,
}

/// Why a command line is refused. `code()` gives the error code shown to users and agents.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    /// The line is not `/server:prompt name=value ...`.
    #[error("{problem} (column {column})")]
    Invalid {
        /// 1-based character column where the problem is.
        column: usize,
        problem: Syntax,
    },

    #[error("argument '{name}' is given twice (columns {first} and {second})")]
    DuplicateArgument {
        name: String,
        first: usize,
        second: usize,
    },

    #[error(
        "unknown argument{} {} for {command}; {}",
        plural(unknown),
        quoted_list(unknown),
        accepted_clause(accepted)
    )]
    UnknownArgument {
        command: String,
        /// The names given that the prompt does not declare, sorted.
        unknown: Vec<String>,
        /// Every name the prompt declares, in its order.
        accepted: Vec<String>,
    },

    #[error(
        "missing required argument{} {} for {command}: add {}",
        plural(missing),
        quoted_list(missing),
        usage(missing)
    )]
    MissingArgument {
        command: String,
        /// Every required argument not given, in the prompt's order.
        missing: Vec<String>,
    },
}

/// What is wrong with a line's syntax. Shown inside [`CommandError::Invalid`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Syntax {
    #[error("a prompt command starts with '/'")]
    MissingSlash,
    #[error("'{word}' names no prompt: expected /server:prompt")]
    MissingColon { word: String },
    #[error("server name missing before ':'")]
    EmptyServer,
    #[error("prompt name missing after ':'")]
    EmptyPrompt,
    #[error("invalid character '{ch}' in the {part} name")]
    InvalidCharacter { ch: char, part: Part },
    #[error("'{word}' is not an argument: expected name=value")]
    MissingEquals { word: String },
    #[error("argument name missing before '='")]
    EmptyArgumentName,
    #[error("unclosed {quote} quote in the value of '{argument}'")]
    UnclosedQuote { argument: String, quote: Quote },
    #[error("backslash at the end of the line in the value of '{argument}'")]
    TrailingBackslash { argument: String },
    #[error("the value of '{argument}' is not valid JSON ({detail}); quote it to pass it as text")]
    InvalidJson { argument: String, detail: String },
    #[error("unclosed '{bracket}' in the value of '{argument}'; quote it to pass it as text")]
    UnclosedBracket { argument: String, bracket: char },
    #[error("--args takes one JSON object of arguments ({detail})")]
    ArgsNotAnObject { detail: String },
}

/// Which name an invalid character is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Server,
    Prompt,
    Argument,
}

/// A quote kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quote {
    Double,
    Single,
}

/// Where a cursor stands in a command line being typed, and what completes there. Offsets are
/// bytes into the line; `start` is where the text a completion replaces begins (up to the
/// cursor).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompletionSite {
    /// In the `/server:prompt` word. `prefix` is the text from the `/` to the cursor.
    Command { prefix: String, start: usize },
    /// At a new word, or in an argument's name before its `=`.
    ArgumentName {
        server: String,
        prompt: String,
        /// The name typed so far, up to the cursor.
        prefix: String,
        start: usize,
        /// The names of the line's other arguments, in line order.
        present: Vec<String>,
    },
    /// In an argument's value, after its `=`.
    ArgumentValue {
        server: String,
        prompt: String,
        argument: String,
        /// The value typed so far, unquoted (an open quote is fine).
        prefix: String,
        /// Where the value begins (just after the `=`).
        start: usize,
        /// The line's other complete arguments: the context of MCP's `completion/complete`.
        arguments: BTreeMap<String, String>,
    },
}

impl CommandError {
    /// The error code: `INVALID_COMMAND`, `DUPLICATE_ARGUMENT`, `UNKNOWN_ARGUMENT` or
    /// `MISSING_ARGUMENT`.
    pub fn code(&self) -> &'static str {
        match self {
            CommandError::Invalid { .. } => "INVALID_COMMAND",
            CommandError::DuplicateArgument { .. } => "DUPLICATE_ARGUMENT",
            CommandError::UnknownArgument { .. } => "UNKNOWN_ARGUMENT",
            CommandError::MissingArgument { .. } => "MISSING_ARGUMENT",
        }
    }

    /// The error's particulars as JSON, for the `details` of an error object.
    pub fn details(&self) -> Value {
        match self {
            CommandError::Invalid { column, .. } => json!({ "column": column }),
            CommandError::DuplicateArgument {
                name,
                first,
                second,
            } => json!({ "argument": name, "columns": [first, second] }),
            CommandError::UnknownArgument {
                command,
                unknown,
                accepted,
            } => json!({ "command": command, "unknown": unknown, "accepted": accepted }),
            CommandError::MissingArgument { command, missing } => {
                json!({ "command": command, "missing": missing })
            }
        }
    }
}

/// Parses a complete command line: `name=value` words, or all the arguments as one JSON
/// object after `--args` (`/server:prompt --args '{"name": "x", "depth": 2}'`).
pub fn parse(line: &str) -> Result<PromptCommand, CommandError> {
    let head = split_head(line)?;
    if let Some(value_at) = args_value_at(line, head.end) {
        return Ok(PromptCommand {
            server: head.server.to_owned(),
            prompt: head.prompt.to_owned(),
            arguments: json_arguments(line, value_at)?,
        });
    }
    let words = lex_arguments(line, head.end, Mode::Strict)?;
    let mut arguments = BTreeMap::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for word in words {
        // Strict lexing gives every word a name.
        let Some(name) = word.name else { continue };
        let column = column_at(line, word.start);
        if let Some(&first) = seen.get(&name) {
            return Err(CommandError::DuplicateArgument {
                name,
                first,
                second: column,
            });
        }
        seen.insert(name.clone(), column);
        arguments.insert(name, word.value);
    }
    Ok(PromptCommand {
        server: head.server.to_owned(),
        prompt: head.prompt.to_owned(),
        arguments,
    })
}

/// Where the value of `--args` begins (just after the flag) when the words after the head
/// (which ends at byte `head_end`) start with it.
fn args_value_at(line: &str, head_end: usize) -> Option<usize> {
    let after = line[head_end..].trim_start().strip_prefix("--args")?;
    Some(line.len() - after.len())
}

/// `line` with `added` arguments at its end, each as a `name=value` word quoted by
/// [`quote_value`], and the command that line parses to. A line that gives its arguments
/// with `--args` (which takes no other word) is first rewritten in words ([`PromptCommand`]'s
/// `Display`); when a name cannot be a word, the whole line is rewritten as one `--args`
/// object. Refused as [`parse`] refuses, `line` or the result (an added name the line
/// already gives is a [`CommandError::DuplicateArgument`]).
pub fn append_arguments(
    line: &str,
    added: &[(String, String)],
) -> Result<(String, PromptCommand), CommandError> {
    let cmd = parse(line)?;
    if added.is_empty() {
        return Ok((line.trim().to_owned(), cmd));
    }
    let head_end = split_head(line)?.end;
    let args_at = args_value_at(line, head_end);
    let mut names = cmd
        .arguments
        .keys()
        .chain(added.iter().map(|(name, _)| name));
    if !names.all(|name| is_word_name(name)) {
        let mut all = cmd;
        for (name, value) in added {
            if all.arguments.contains_key(name) {
                // Where the line gives it (its `--args` object, or its word), and where the
                // appended one would go: just past the line's end.
                let given = match args_at {
                    Some(at) => at,
                    None => lex_arguments(line, head_end, Mode::Strict)?
                        .iter()
                        .find(|word| word.name.as_ref() == Some(name))
                        .map_or(head_end, |word| word.start),
                };
                return Err(CommandError::DuplicateArgument {
                    name: name.clone(),
                    first: column_at(line, given),
                    second: column_at(line, line.trim_end().len()),
                });
            }
            all.arguments.insert(name.clone(), value.clone());
        }
        let text = all.to_string();
        let cmd = parse(&text)?;
        return Ok((text, cmd));
    }
    let mut text = match args_at {
        Some(_) => cmd.to_string(),
        None => line.trim().to_owned(),
    };
    for (name, value) in added {
        text.push_str(&format!(" {name}={}", quote_value(value)));
    }
    let cmd = parse(&text)?;
    Ok((text, cmd))
}

/// The arguments of `--args VALUE` (VALUE at byte `at`, after an optional `=`): one JSON
/// object, quoted as a shell would or bare; strings pass as they are, other values as their
/// JSON text.
fn json_arguments(line: &str, at: usize) -> Result<BTreeMap<String, String>, CommandError> {
    let after = &line[at..];
    let after = after.strip_prefix('=').unwrap_or(after);
    let start = line.len() - after.trim_start().len();
    let not_object = |detail: String| invalid(line, start, Syntax::ArgsNotAnObject { detail });
    // The value lexes as the value of an argument named `args` would (quotes, escapes, bare
    // JSON); anything after it is refused as a second value.
    let (value, end, _) = read_value(line, start, "args", Mode::Strict)?;
    if !lex_arguments(line, end, Mode::Strict)?.is_empty() {
        return Err(not_object("give exactly one value".into()));
    }
    let object: serde_json::Map<String, Value> =
        serde_json::from_str(&value).map_err(|e| not_object(e.to_string()))?;
    Ok(object
        .into_iter()
        .map(|(k, v)| match v {
            Value::String(s) => (k, s),
            other => (k, other.to_string()),
        })
        .collect())
}

/// Checks a parsed command's arguments against what its prompt declares: unknown names
/// first (a misspelt name often explains a missing one), then missing required ones.
pub fn validate(cmd: &PromptCommand, spec: &[ArgumentSpec]) -> Result<(), CommandError> {
    let command = command_name(&cmd.server, &cmd.prompt);
    let unknown: Vec<String> = cmd
        .arguments
        .keys()
        .filter(|name| !spec.iter().any(|s| &s.name == *name))
        .cloned()
        .collect();
    if !unknown.is_empty() {
        return Err(CommandError::UnknownArgument {
            command,
            unknown,
            accepted: spec.iter().map(|s| s.name.clone()).collect(),
        });
    }
    let missing: Vec<String> = spec
        .iter()
        .filter(|s| s.required && !cmd.arguments.contains_key(&s.name))
        .map(|s| s.name.clone())
        .collect();
    if !missing.is_empty() {
        return Err(CommandError::MissingArgument { command, missing });
    }
    Ok(())
}

/// The editor command of a server's prompt: `/server:prompt`.
pub fn command_name(server: &str, prompt: &str) -> String {
    format!("/{server}:{prompt}")
}

/// Renders a value so that [`parse`] reads it back unchanged: bare when it holds nothing
/// special (or is already compact JSON), else double-quoted with `\"`, `\\`, `\n`, `\t`, `\r`
/// escaped.
pub fn quote_value(value: &str) -> String {
    let special = |c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '\\');
    let bare = !value.is_empty()
        && if value.starts_with(['{', '[']) {
            scan::compact(value).is_some_and(|compact| compact == value)
        } else {
            !value.contains(special)
        };
    if bare {
        return value.to_owned();
    }
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Where `cursor` (a byte offset) stands in a line being typed. `None` when the line is not a
/// prompt command, the cursor is before its `/` or not on a character boundary, or the cursor
/// is in something that no completion fits (inside a quoted word that is not an argument).
/// Partial input is fine: an open quote or bracket is a value being typed.
pub fn site_at(line: &str, cursor: usize) -> Option<CompletionSite> {
    if cursor > line.len() || !line.is_char_boundary(cursor) {
        return None;
    }
    let slash = leading_whitespace(line);
    if !line[slash..].starts_with('/') || cursor <= slash {
        return None;
    }
    let head_end = word_end(line, slash);
    if cursor <= head_end {
        return Some(CompletionSite::Command {
            prefix: line[slash..cursor].to_owned(),
            start: slash,
        });
    }
    let (server, prompt) = line[slash + 1..head_end].split_once(':')?;
    if server.is_empty() {
        return None;
    }
    let (server, prompt) = (server.to_owned(), prompt.to_owned());
    let words = lex_arguments(line, head_end, Mode::Lenient).ok()?;
    let current = words
        .iter()
        .position(|w| w.start <= cursor && cursor <= w.end);
    let others = words
        .iter()
        .enumerate()
        .filter(|&(i, _)| Some(i) != current)
        .map(|(_, w)| w);
    let Some(word) = current.map(|i| &words[i]) else {
        return Some(CompletionSite::ArgumentName {
            server,
            prompt,
            prefix: String::new(),
            start: cursor,
            present: names(others),
        });
    };
    match &word.name {
        Some(name) if cursor > word.equals => {
            let (prefix, _, _) =
                read_value(&line[..cursor], word.equals + 1, name, Mode::Lenient).ok()?;
            let arguments = others
                .filter(|w| w.complete && w.name.as_ref() != Some(name))
                .filter_map(|w| Some((w.name.clone()?, w.value.clone())))
                .collect();
            Some(CompletionSite::ArgumentValue {
                server,
                prompt,
                argument: name.clone(),
                prefix,
                start: word.equals + 1,
                arguments,
            })
        }
        _ => {
            let typed = &line[word.start..cursor];
            typed
                .chars()
                .all(is_name_char)
                .then(|| CompletionSite::ArgumentName {
                    server,
                    prompt,
                    prefix: typed.to_owned(),
                    start: word.start,
                    present: names(others),
                })
        }
    }
}

impl fmt::Display for PromptCommand {
    /// The command as a line [`parse`] reads back to the same command: `name=value` words, or
    /// one `--args` object when a name cannot be written as a word.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&command_name(&self.server, &self.prompt))?;
        if self.arguments.keys().all(|name| is_word_name(name)) {
            for (name, value) in &self.arguments {
                write!(f, " {name}={}", quote_value(value))?;
            }
            return Ok(());
        }
        let object: serde_json::Map<String, Value> = self
            .arguments
            .iter()
            .map(|(name, value)| (name.clone(), Value::String(value.clone())))
            .collect();
        write!(
            f,
            " --args {}",
            quote_value(&Value::Object(object).to_string())
        )
    }
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Part::Server => "server",
            Part::Prompt => "prompt",
            Part::Argument => "argument",
        })
    }
}

impl fmt::Display for Quote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Quote::Double => "double",
            Quote::Single => "single",
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Lexing

/// Strict lexing refuses what [`parse`] refuses; lenient lexing (completion) reads an open
/// quote, bracket or trailing backslash as a value still being typed, and a word that is not
/// `name=value` as a nameless word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Strict,
    Lenient,
}

/// The `/server:prompt` word.
struct Head<'a> {
    server: &'a str,
    prompt: &'a str,
    /// Byte offset just after the word.
    end: usize,
}

/// One argument word.
struct Word {
    /// Byte offsets of the word.
    start: usize,
    end: usize,
    /// Its name; `None` only in lenient mode, for a word that is not `name=...`.
    name: Option<String>,
    /// Byte offset of the `=` (meaningless without a name).
    equals: usize,
    /// The value, unquoted.
    value: String,
    /// False when the word ends in an open quote, bracket or backslash (lenient mode).
    complete: bool,
}

fn is_name_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '-' | '_' | '.')
}

/// Whether an argument's name can be written as a `name=value` word: name characters, not
/// starting with `-` (a leading dash is a flag's, as in `--args`). Other names (`""`, `"a b"`,
/// `"--x"`, which a prompt may declare) are given in the `--args` object.
fn is_word_name(name: &str) -> bool {
    !name.is_empty() && !name.starts_with('-') && name.chars().all(is_name_char)
}

fn leading_whitespace(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// Byte offset of the first whitespace at or after `from`, else the line's end.
fn word_end(line: &str, from: usize) -> usize {
    line[from..]
        .find(char::is_whitespace)
        .map_or(line.len(), |i| from + i)
}

/// 1-based character column of a byte offset.
fn column_at(line: &str, byte: usize) -> usize {
    line[..byte].chars().count() + 1
}

fn invalid(line: &str, byte: usize, problem: Syntax) -> CommandError {
    CommandError::Invalid {
        column: column_at(line, byte),
        problem,
    }
}

fn split_head(line: &str) -> Result<Head<'_>, CommandError> {
    let slash = leading_whitespace(line);
    if !line[slash..].starts_with('/') {
        return Err(invalid(line, slash, Syntax::MissingSlash));
    }
    let end = word_end(line, slash);
    let word = &line[slash + 1..end];
    let Some((server, prompt)) = word.split_once(':') else {
        let word = line[slash..end].to_owned();
        return Err(invalid(line, slash, Syntax::MissingColon { word }));
    };
    let server_at = slash + 1;
    if server.is_empty() {
        return Err(invalid(line, server_at, Syntax::EmptyServer));
    }
    check_name(line, server_at, server, Part::Server, is_name_char)?;
    let prompt_at = server_at + server.len() + 1;
    if prompt.is_empty() {
        return Err(invalid(line, prompt_at, Syntax::EmptyPrompt));
    }
    check_name(line, prompt_at, prompt, Part::Prompt, |c| {
        is_name_char(c) || c == ':'
    })?;
    Ok(Head {
        server,
        prompt,
        end,
    })
}

fn check_name(
    line: &str,
    at: usize,
    name: &str,
    part: Part,
    allowed: impl Fn(char) -> bool,
) -> Result<(), CommandError> {
    match name.char_indices().find(|&(_, c)| !allowed(c)) {
        Some((i, ch)) => Err(invalid(line, at + i, Syntax::InvalidCharacter { ch, part })),
        None => Ok(()),
    }
}

fn lex_arguments(line: &str, from: usize, mode: Mode) -> Result<Vec<Word>, CommandError> {
    let mut words = Vec::new();
    let mut pos = from;
    loop {
        pos += leading_whitespace(&line[pos..]);
        if pos == line.len() {
            return Ok(words);
        }
        let word = read_word(line, pos, mode)?;
        // Every word consumes at least one character; guard against a loop all the same.
        pos = word.end.max(pos + 1);
        words.push(word);
    }
}

fn read_word(line: &str, start: usize, mode: Mode) -> Result<Word, CommandError> {
    let rest = &line[start..];
    let name_len = if rest.starts_with('-') {
        0
    } else {
        rest.find(|c| !is_name_char(c)).unwrap_or(rest.len())
    };
    let next = rest[name_len..].chars().next();
    if next == Some('=') && name_len > 0 {
        let name = &rest[..name_len];
        let equals = start + name_len;
        let (value, end, complete) = read_value(line, equals + 1, name, mode)?;
        return Ok(Word {
            start,
            end,
            name: Some(name.to_owned()),
            equals,
            value,
            complete,
        });
    }
    if mode == Mode::Lenient {
        let (value, end, complete) = read_value(line, start, "", mode)?;
        return Ok(Word {
            start,
            end,
            name: None,
            equals: end,
            value,
            complete,
        });
    }
    let raw = &rest[..rest.find(char::is_whitespace).unwrap_or(rest.len())];
    Err(match next {
        Some('=') => invalid(line, start, Syntax::EmptyArgumentName),
        _ if raw.starts_with("--args") => invalid(
            line,
            start,
            Syntax::ArgsNotAnObject {
                detail: "give it first, in place of name=value words".into(),
            },
        ),
        Some(ch) if !ch.is_whitespace() && raw[name_len..].contains('=') => invalid(
            line,
            start + name_len,
            Syntax::InvalidCharacter {
                ch,
                part: Part::Argument,
            },
        ),
        _ => invalid(
            line,
            start,
            Syntax::MissingEquals {
                word: raw.to_owned(),
            },
        ),
    })
}

/// Reads the value starting at byte `pos`: `(value, end, complete)`.
fn read_value(
    line: &str,
    pos: usize,
    argument: &str,
    mode: Mode,
) -> Result<(String, usize, bool), CommandError> {
    let rest = &line[pos..];
    let Some(bracket) = rest.chars().next().filter(|c| matches!(c, '{' | '[')) else {
        return read_parts(line, pos, argument, mode);
    };
    let Span { len, closed } = scan::value_span(rest);
    let candidate = &rest[..len];
    let ends_word = rest[len..].chars().next().is_none_or(char::is_whitespace);
    let json_error = if closed && ends_word {
        match scan::compact(candidate) {
            Some(compact) => return Ok((compact, pos + len, true)),
            None => scan::check(candidate).err().map(|e| scan::problem(&e)),
        }
    } else {
        None
    };
    // Not JSON: ordinary parts, if they cover the bracketed text (no unquoted space in it).
    match read_parts(line, pos, argument, mode) {
        Ok((value, end, complete)) if end >= pos + len => return Ok((value, end, complete)),
        _ => {}
    }
    if mode == Mode::Lenient {
        return Ok((candidate.to_owned(), pos + len, closed));
    }
    let argument = argument.to_owned();
    Err(invalid(
        line,
        pos,
        if closed {
            Syntax::InvalidJson {
                argument,
                detail: json_error
                    .unwrap_or_else(|| format!("text follows the closing '{}'", closing(bracket))),
            }
        } else {
            Syntax::UnclosedBracket { argument, bracket }
        },
    ))
}

fn closing(bracket: char) -> char {
    if bracket == '{' { '}' } else { ']' }
}

/// Reads shell-like parts (quotes, escapes, plain characters) up to unquoted whitespace.
fn read_parts(
    line: &str,
    pos: usize,
    argument: &str,
    mode: Mode,
) -> Result<(String, usize, bool), CommandError> {
    let unclosed = |at: usize, quote: Quote| -> Result<(String, usize, bool), CommandError> {
        Err(invalid(
            line,
            at,
            Syntax::UnclosedQuote {
                argument: argument.to_owned(),
                quote,
            },
        ))
    };
    let mut value = String::new();
    let mut chars = line[pos..].char_indices().map(|(i, c)| (pos + i, c));
    while let Some((at, c)) = chars.next() {
        match c {
            c if c.is_whitespace() => return Ok((value, at, true)),
            '"' => loop {
                match chars.next() {
                    None if mode == Mode::Lenient => return Ok((value, line.len(), false)),
                    None => return unclosed(at, Quote::Double),
                    Some((_, '"')) => break,
                    Some((_, '\\')) => match chars.next() {
                        None if mode == Mode::Lenient => return Ok((value, line.len(), false)),
                        None => return unclosed(at, Quote::Double),
                        Some((_, e)) => match e {
                            '"' | '\\' => value.push(e),
                            'n' => value.push('\n'),
                            't' => value.push('\t'),
                            'r' => value.push('\r'),
                            other => {
                                value.push('\\');
                                value.push(other);
                            }
                        },
                    },
                    Some((_, c)) => value.push(c),
                }
            },
            '\'' => loop {
                match chars.next() {
                    None if mode == Mode::Lenient => return Ok((value, line.len(), false)),
                    None => return unclosed(at, Quote::Single),
                    Some((_, '\'')) => break,
                    Some((_, c)) => value.push(c),
                }
            },
            '\\' => match chars.next() {
                Some((_, c)) => value.push(c),
                None if mode == Mode::Lenient => return Ok((value, line.len(), false)),
                None => {
                    return Err(invalid(
                        line,
                        at,
                        Syntax::TrailingBackslash {
                            argument: argument.to_owned(),
                        },
                    ));
                }
            },
            c => value.push(c),
        }
    }
    Ok((value, line.len(), true))
}

fn names<'a>(words: impl Iterator<Item = &'a Word>) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for name in words.filter_map(|w| w.name.as_ref()) {
        if !names.contains(name) {
            names.push(name.clone());
        }
    }
    names
}

// ---------------------------------------------------------------------------------------------
// Messages

fn plural(names: &[String]) -> &'static str {
    if names.len() == 1 { "" } else { "s" }
}

fn quoted_list(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("'{n}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn accepted_clause(accepted: &[String]) -> String {
    if accepted.is_empty() {
        "it takes no arguments".to_owned()
    } else {
        format!("it accepts: {}", accepted.join(", "))
    }
}

fn usage(missing: &[String]) -> String {
    missing
        .iter()
        .map(|n| format!("{n}=VALUE"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A parse outcome as one line: `server | prompt | {arguments}` or `CODE: message`.
    fn parsed(line: &str) -> String {
        match parse(line) {
            Ok(cmd) => format!("{} | {} | {:?}", cmd.server, cmd.prompt, cmd.arguments),
            Err(e) => format!("{}: {e}", e.code()),
        }
    }

    fn check_all(cases: &[(&str, &str)], run: impl Fn(&str) -> String) {
        let mut failures = Vec::new();
        for (input, expected) in cases {
            let got = run(input);
            if got != *expected {
                failures.push(format!(
                    "{input:?}\n   expected: {expected}\n   got:      {got}"
                ));
            }
        }
        assert!(failures.is_empty(), "\n{}", failures.join("\n"));
    }

    #[test]
    fn parse_accepts_names_quoting_and_json() {
        check_all(
            &[
                ("/notes:summarize", "notes | summarize | {}"),
                ("   /notes:summarize  ", "notes | summarize | {}"),
                (
                    "/notes:summarize topic=rust",
                    r#"notes | summarize | {"topic": "rust"}"#,
                ),
                (
                    r#"/s:p topic="two words""#,
                    r#"s | p | {"topic": "two words"}"#,
                ),
                (
                    "/s:p topic='single quoted'",
                    r#"s | p | {"topic": "single quoted"}"#,
                ),
                (r#"/s:p a="b c"d"#, r#"s | p | {"a": "b cd"}"#),
                (r#"/s:p a=x'y z'"w""#, r#"s | p | {"a": "xy zw"}"#),
                ("/s:p k=", r#"s | p | {"k": ""}"#),
                (r#"/s:p k="" j=''"#, r#"s | p | {"j": "", "k": ""}"#),
                ("/s:p k=a=b", r#"s | p | {"k": "a=b"}"#),
                (r#"/s:p k="say \"hi\"""#, r#"s | p | {"k": "say \"hi\""}"#),
                (r#"/s:p k="back\\slash""#, r#"s | p | {"k": "back\\slash"}"#),
                (r#"/s:p k="l1\nl2\tt\r""#, r#"s | p | {"k": "l1\nl2\tt\r"}"#),
                (r#"/s:p k="C:\Users""#, r#"s | p | {"k": "C:\\Users"}"#),
                (r"/s:p k='a\nb'", r#"s | p | {"k": "a\\nb"}"#),
                (r#"/s:p k='say "hi"'"#, r#"s | p | {"k": "say \"hi\""}"#),
                (r#"/s:p k="it's""#, r#"s | p | {"k": "it's"}"#),
                (r"/s:p k=a\ b", r#"s | p | {"k": "a b"}"#),
                (r#"/s:p k=\"x\""#, r#"s | p | {"k": "\"x\""}"#),
                (r"/s:p k=\\", r#"s | p | {"k": "\\"}"#),
                (
                    r#"/s:p opts={"a": [1, 2]}"#,
                    r#"s | p | {"opts": "{\"a\":[1,2]}"}"#,
                ),
                (
                    r#"/s:p opts={ "text": "a } b ] \" c",  "n": 1.50, "z": null } x=1"#,
                    r#"s | p | {"opts": "{\"text\":\"a } b ] \\\" c\",\"n\":1.50,\"z\":null}", "x": "1"}"#,
                ),
                (
                    r#"/s:p list=[1, "two", {"three": [3]}] other=x"#,
                    r#"s | p | {"list": "[1,\"two\",{\"three\":[3]}]", "other": "x"}"#,
                ),
                (
                    r#"/s:p k={"p": "C:\\"}"#,
                    r#"s | p | {"k": "{\"p\":\"C:\\\\\"}"}"#,
                ),
                (
                    r#"/s:p k={"b":2,"a":1}"#,
                    r#"s | p | {"k": "{\"b\":2,\"a\":1}"}"#,
                ),
                (
                    r#"/s:p k={"a":"x y"}"#,
                    r#"s | p | {"k": "{\"a\":\"x y\"}"}"#,
                ),
                (r#"/s:p k='{"a": 1}'"#, r#"s | p | {"k": "{\"a\": 1}"}"#),
                ("/s:p pat=[a-z]+", r#"s | p | {"pat": "[a-z]+"}"#),
                ("/s:p k={x}", r#"s | p | {"k": "{x}"}"#),
                ("/s:p k=[", r#"s | p | {"k": "["}"#),
                ("/s:p k=[]", r#"s | p | {"k": "[]"}"#),
                (
                    "/s:p n=42 b=true f=1e3 neg=-1",
                    r#"s | p | {"b": "true", "f": "1e3", "n": "42", "neg": "-1"}"#,
                ),
                (
                    r#"/s:p ville="Zürich ☃" 名前=値"#,
                    r#"s | p | {"ville": "Zürich ☃", "名前": "値"}"#,
                ),
                (
                    "/obsidian-memory:tool_call:memory_index",
                    "obsidian-memory | tool_call:memory_index | {}",
                ),
                ("/my.server_1:v2.prompt-x", "my.server_1 | v2.prompt-x | {}"),
                ("/s:p\ta=1\n b=2 ", r#"s | p | {"a": "1", "b": "2"}"#),
                ("/s:p a.b-c_d=1", r#"s | p | {"a.b-c_d": "1"}"#),
            ],
            parsed,
        );
    }

    #[test]
    fn parse_errors_name_the_problem_and_its_column() {
        check_all(
            &[
                (
                    "",
                    "INVALID_COMMAND: a prompt command starts with '/' (column 1)",
                ),
                (
                    "notes:summarize",
                    "INVALID_COMMAND: a prompt command starts with '/' (column 1)",
                ),
                (
                    "  x",
                    "INVALID_COMMAND: a prompt command starts with '/' (column 3)",
                ),
                (
                    "/notes topic=x",
                    "INVALID_COMMAND: '/notes' names no prompt: expected /server:prompt (column 1)",
                ),
                (
                    "/:p",
                    "INVALID_COMMAND: server name missing before ':' (column 2)",
                ),
                (
                    "/s:",
                    "INVALID_COMMAND: prompt name missing after ':' (column 4)",
                ),
                (
                    "/s:  k=1",
                    "INVALID_COMMAND: prompt name missing after ':' (column 4)",
                ),
                (
                    "/s!x:p",
                    "INVALID_COMMAND: invalid character '!' in the server name (column 3)",
                ),
                (
                    r#"/s:p"q""#,
                    "INVALID_COMMAND: invalid character '\"' in the prompt name (column 5)",
                ),
                (
                    "/s:p topic",
                    "INVALID_COMMAND: 'topic' is not an argument: expected name=value (column 6)",
                ),
                (
                    "/s:p =x",
                    "INVALID_COMMAND: argument name missing before '=' (column 6)",
                ),
                (
                    "/s:p fo!o=1",
                    "INVALID_COMMAND: invalid character '!' in the argument name (column 8)",
                ),
                (
                    r#"/s:p "quoted""#,
                    "INVALID_COMMAND: '\"quoted\"' is not an argument: expected name=value (column 6)",
                ),
                (
                    r#"/s:p k="open b=2"#,
                    "INVALID_COMMAND: unclosed double quote in the value of 'k' (column 8)",
                ),
                (
                    r#"/s:p k="open\""#,
                    "INVALID_COMMAND: unclosed double quote in the value of 'k' (column 8)",
                ),
                (
                    "/s:p k=ab'open",
                    "INVALID_COMMAND: unclosed single quote in the value of 'k' (column 10)",
                ),
                (
                    r"/s:p k=abc\",
                    "INVALID_COMMAND: backslash at the end of the line in the value of 'k' (column 11)",
                ),
                (
                    "/s:p k={a b}",
                    "INVALID_COMMAND: the value of 'k' is not valid JSON (key must be a string); quote it to pass it as text (column 8)",
                ),
                (
                    r#"/s:p k=[1, 2,]"#,
                    "INVALID_COMMAND: the value of 'k' is not valid JSON (expected value); quote it to pass it as text (column 8)",
                ),
                (
                    r#"/s:p k={"a": 1}x"#,
                    "INVALID_COMMAND: the value of 'k' is not valid JSON (text follows the closing '}'); quote it to pass it as text (column 8)",
                ),
                (
                    r#"/s:p k={"a": 1"#,
                    "INVALID_COMMAND: unclosed '{' in the value of 'k'; quote it to pass it as text (column 8)",
                ),
                (
                    "/s:p a=1 a=2",
                    "DUPLICATE_ARGUMENT: argument 'a' is given twice (columns 6 and 10)",
                ),
                (
                    r#"/s:p a="x y" b"#,
                    "INVALID_COMMAND: 'b' is not an argument: expected name=value (column 14)",
                ),
                (
                    "/s:p ville=Zürich k",
                    "INVALID_COMMAND: 'k' is not an argument: expected name=value (column 19)",
                ),
            ],
            parsed,
        );
    }

    fn spec(args: &[(&str, bool)]) -> Vec<ArgumentSpec> {
        args.iter()
            .map(|&(name, required)| ArgumentSpec {
                name: name.to_owned(),
                description: None,
                required,
            })
            .collect()
    }

    #[test]
    fn validate_reports_unknown_then_missing_arguments() {
        let summarize = spec(&[("topic", true), ("depth", false)]);
        let two_required = spec(&[("a", true), ("b", true)]);
        let cases: &[(&str, &[ArgumentSpec], &str)] = &[
            ("/notes:summarize topic=x", &summarize, "ok"),
            ("/notes:summarize topic= depth=2", &summarize, "ok"),
            (
                "/notes:summarize topc=x",
                &summarize,
                "UNKNOWN_ARGUMENT: unknown argument 'topc' for /notes:summarize; it accepts: topic, depth",
            ),
            (
                "/notes:summarize",
                &summarize,
                "MISSING_ARGUMENT: missing required argument 'topic' for /notes:summarize: add topic=VALUE",
            ),
            (
                "/s:p",
                &two_required,
                "MISSING_ARGUMENT: missing required arguments 'a', 'b' for /s:p: add a=VALUE b=VALUE",
            ),
            (
                "/s:p y=1 x=2",
                &[],
                "UNKNOWN_ARGUMENT: unknown arguments 'x', 'y' for /s:p; it takes no arguments",
            ),
            ("/s:p", &[], "ok"),
        ];
        for (line, spec, expected) in cases {
            let cmd = parse(line).unwrap();
            let got = match validate(&cmd, spec) {
                Ok(()) => "ok".to_owned(),
                Err(e) => format!("{}: {e}", e.code()),
            };
            assert_eq!(got, *expected, "{line}");
        }
    }

    #[test]
    fn errors_carry_details() {
        let e = parse("/s:p a=1 a=2").unwrap_err();
        assert_eq!(e.details(), json!({"argument": "a", "columns": [6, 10]}));
        let e = parse("/s:p k=\"x").unwrap_err();
        assert_eq!(e.details(), json!({"column": 8}));
        let cmd = parse("/s:p x=1").unwrap();
        let e = validate(&cmd, &spec(&[("a", true)])).unwrap_err();
        assert_eq!(
            e.details(),
            json!({"command": "/s:p", "unknown": ["x"], "accepted": ["a"]})
        );
        let e = validate(&parse("/s:p").unwrap(), &spec(&[("a", true)])).unwrap_err();
        assert_eq!(e.details(), json!({"command": "/s:p", "missing": ["a"]}));
    }

    #[test]
    fn command_name_joins_server_and_prompt() {
        assert_eq!(command_name("notes", "summarize"), "/notes:summarize");
        assert_eq!(command_name("mem", "tool_call:x"), "/mem:tool_call:x");
    }

    #[test]
    fn quote_value_renders_values_that_parse_back() {
        let cases = [
            ("", r#""""#),
            ("plain", "plain"),
            ("a=b", "a=b"),
            ("é☃", "é☃"),
            ("two words", r#""two words""#),
            (r#"say "hi""#, r#""say \"hi\"""#),
            (r"a\b", r#""a\\b""#),
            ("l1\nl2\tt\rr", r#""l1\nl2\tt\rr""#),
            ("it's", r#""it's""#),
            (r#"{"a":1}"#, r#"{"a":1}"#),
            (r#"{"a":"x y"}"#, r#"{"a":"x y"}"#),
            (r#"{"a": 1}"#, r#""{\"a\": 1}""#),
            ("[a-z]", r#""[a-z]""#),
            ("{", r#""{""#),
            ("\u{a0}nbsp", "\"\u{a0}nbsp\""),
        ];
        for (value, expected) in cases {
            assert_eq!(quote_value(value), expected, "{value:?}");
            let back = parse(&format!("/s:p k={}", quote_value(value))).unwrap();
            assert_eq!(back.arguments["k"], value, "round trip of {value:?}");
        }
    }

    #[test]
    fn display_renders_a_line_that_parses_back() {
        let cmd = parse(r#"/s:tool_call:x b="two words" a={"k": [1]} c= d=it\'s"#).unwrap();
        let line = cmd.to_string();
        assert_eq!(
            line,
            r#"/s:tool_call:x a={"k":[1]} b="two words" c="" d="it's""#
        );
        assert_eq!(parse(&line).unwrap(), cmd);
        // Names that cannot be words are written as one `--args` object.
        let cmd = parse(r#"/s:p --args '{"": [0, 2], "a b": "x", "--args": "1e3"}'"#).unwrap();
        let line = cmd.to_string();
        assert_eq!(line, r#"/s:p --args {"":"[0,2]","--args":"1e3","a b":"x"}"#);
        assert_eq!(parse(&line).unwrap(), cmd);
    }

    #[test]
    fn a_flag_is_not_an_argument_name() {
        let e = parse("/s:p a= --args=1e3").unwrap_err();
        assert_eq!(
            e.to_string(),
            "--args takes one JSON object of arguments (give it first, in place of name=value \
             words) (column 9)"
        );
        let e = parse("/s:p -x=1").unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid character '-' in the argument name (column 6)"
        );
        assert!(parse("/s:p x-y=1").is_ok());
    }

    /// `|` in `line` marks the cursor.
    fn site(line: &str) -> String {
        let cursor = line.find('|').expect("a cursor");
        let line = line.replacen('|', "", 1);
        match site_at(&line, cursor) {
            None => "none".to_owned(),
            Some(CompletionSite::Command { prefix, start }) => {
                format!("command {prefix:?} @{start}")
            }
            Some(CompletionSite::ArgumentName {
                server,
                prompt,
                prefix,
                start,
                present,
            }) => format!("name {server}:{prompt} {prefix:?} @{start} present={present:?}"),
            Some(CompletionSite::ArgumentValue {
                server,
                prompt,
                argument,
                prefix,
                start,
                arguments,
            }) => format!("value {server}:{prompt} {argument} {prefix:?} @{start} {arguments:?}"),
        }
    }

    #[test]
    fn site_at_every_interesting_cursor() {
        check_all(
            &[
                ("|/s:p", "none"),
                ("  |/s:p", "none"),
                ("|hello", "none"),
                ("hello |", "none"),
                ("/|", r#"command "/" @0"#),
                ("/no|", r#"command "/no" @0"#),
                ("  /notes:su|mmarize", r#"command "/notes:su" @2"#),
                ("/notes:summarize|", r#"command "/notes:summarize" @0"#),
                (
                    "/notes:summarize| topic=x",
                    r#"command "/notes:summarize" @0"#,
                ),
                (
                    "/notes:summarize |",
                    r#"name notes:summarize "" @17 present=[]"#,
                ),
                ("/s:p to|", r#"name s:p "to" @5 present=[]"#),
                ("/s:p to|pic=x", r#"name s:p "to" @5 present=[]"#),
                ("/s:p |topic=x", r#"name s:p "" @5 present=[]"#),
                ("/s:p topic|=x", r#"name s:p "topic" @5 present=[]"#),
                ("/s:p topic=|", r#"value s:p topic "" @11 {}"#),
                ("/s:p topic=ru|st", r#"value s:p topic "ru" @11 {}"#),
                (
                    r#"/s:p topic="two wo|"#,
                    r#"value s:p topic "two wo" @11 {}"#,
                ),
                (
                    r#"/s:p topic="two wo|rds""#,
                    r#"value s:p topic "two wo" @11 {}"#,
                ),
                (r#"/s:p topic="a\"b|"#, r#"value s:p topic "a\"b" @11 {}"#),
                ("/s:p topic='it|", r#"value s:p topic "it" @11 {}"#),
                (
                    r#"/s:p topic="two words" |"#,
                    r#"name s:p "" @23 present=["topic"]"#,
                ),
                ("/s:p a=1 | b=2", r#"name s:p "" @9 present=["a", "b"]"#),
                ("/s:p a=1 a|", r#"name s:p "a" @9 present=["a"]"#),
                (
                    "/s:p a=1 b=2 c=x|",
                    r#"value s:p c "x" @15 {"a": "1", "b": "2"}"#,
                ),
                (
                    r#"/s:p a="x y" c=| d='open"#,
                    r#"value s:p c "" @15 {"a": "x y"}"#,
                ),
                ("/s:p c=1 c=2|", r#"value s:p c "2" @11 {}"#),
                (
                    r#"/s:p opts={"a": [1, |"#,
                    r#"value s:p opts "{\"a\": [1, " @10 {}"#,
                ),
                (
                    r#"/s:p opts={"a": [1, |2]} x=1"#,
                    r#"value s:p opts "{\"a\": [1, " @10 {"x": "1"}"#,
                ),
                (
                    r#"/s:p opts={"a": 1}|"#,
                    r#"value s:p opts "{\"a\":1}" @10 {}"#,
                ),
                (
                    r#"/s:p opts={"a": 1} |"#,
                    r#"name s:p "" @19 present=["opts"]"#,
                ),
                (r#"/s:p "quo|"#, "none"),
                (r"/s:p k=a\ b|", r#"value s:p k "a b" @7 {}"#),
                (r"/s:p k=a\|", r#"value s:p k "a" @7 {}"#),
                ("/nocolon |", "none"),
                ("/:p |", "none"),
                ("/s:p ville=Zü|rich", r#"value s:p ville "Zü" @11 {}"#),
                (
                    "/mem:tool_call:x k=|",
                    r#"value mem:tool_call:x k "" @19 {}"#,
                ),
                ("/s:p  |  ", r#"name s:p "" @6 present=[]"#),
            ],
            site,
        );
    }

    #[test]
    fn site_at_refuses_cursors_off_the_line_or_inside_a_character() {
        let line = "/s:p ville=Zürich";
        let u = line.find('ü').unwrap();
        assert_eq!(site_at(line, u + 1), None);
        assert_eq!(site_at(line, line.len() + 1), None);
        assert!(site_at(line, line.len()).is_some());
    }
}

#[cfg(test)]
mod append_tests {
    use super::*;

    #[test]
    fn appended_arguments_parse_back_as_given() {
        let pair = |n: &str, v: &str| (n.to_owned(), v.to_owned());
        let cases = [
            ("  /s:p  ", vec![], "/s:p"),
            ("/s:p", vec![pair("city", "Lyon")], "/s:p city=Lyon"),
            (
                "/s:p state='Texas'",
                vec![pair("city", r#"Saint "Paul" \ x"#), pair("note", "")],
                r#"/s:p state='Texas' city="Saint \"Paul\" \\ x" note="""#,
            ),
            ("/s:p", vec![pair("o", r#"{"a":1}"#)], r#"/s:p o={"a":1}"#),
            (
                r#"/s:p --args '{"b": 2}'"#,
                vec![pair("a", "x y")],
                r#"/s:p b=2 a="x y""#,
            ),
            (
                r#"/s:p --args '{"b": 2}'"#,
                vec![],
                r#"/s:p --args '{"b": 2}'"#,
            ),
            (
                "/s:p a=1",
                vec![pair("a", "2")],
                "DUPLICATE_ARGUMENT: argument 'a' is given twice (columns 6 and 10)",
            ),
            (
                "s:p",
                vec![pair("a", "2")],
                "INVALID_COMMAND: a prompt command starts with '/' (column 1)",
            ),
            // A name that cannot be a word: the line becomes one --args object.
            (
                "/s:p a=1",
                vec![pair("", "[0]"), pair("b c", "x")],
                r#"/s:p --args {"":"[0]","a":"1","b c":"x"}"#,
            ),
            (
                r#"/s:p --args '{"": 1}'"#,
                vec![pair("", "2")],
                "DUPLICATE_ARGUMENT: argument '' is given twice (columns 12 and 22)",
            ),
        ];
        for (line, added, expected) in cases {
            let got = match append_arguments(line, &added) {
                Ok((text, cmd)) => {
                    for (name, value) in &added {
                        assert_eq!(&cmd.arguments[name], value, "{line}");
                    }
                    text
                }
                Err(e) => format!("{}: {e}", e.code()),
            };
            assert_eq!(got, expected, "{line}");
        }
    }
}

#[cfg(test)]
mod args_tests {
    use super::*;

    #[test]
    fn all_arguments_as_one_json_object_after_args() {
        let cmd =
            parse(r#"/notes:sum --args '{"topic": "two words", "depth": 2, "opts": {"a": [1]}}'"#)
                .unwrap();
        assert_eq!(cmd.arguments["topic"], "two words");
        assert_eq!(cmd.arguments["depth"], "2");
        assert_eq!(cmd.arguments["opts"], r#"{"a":[1]}"#);
        let bare = parse(r#"/notes:sum --args={"topic": "x"}"#).unwrap();
        assert_eq!(bare.arguments["topic"], "x");
        let e = parse("/notes:sum --args '[1, 2]'").unwrap_err();
        assert_eq!(e.code(), "INVALID_COMMAND");
        assert!(
            e.to_string().contains("--args takes one JSON object"),
            "{e}"
        );
        assert!(e.to_string().contains("column 19"), "{e}");
        let e = parse("/notes:sum --args '{\"a\": 1' extra=1").unwrap_err();
        assert_eq!(e.code(), "INVALID_COMMAND", "{e}");
    }
}
