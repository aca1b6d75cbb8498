//! Positions in document text: LSP columns (UTF-8 or UTF-16 code units, as negotiated) to
//! byte offsets, selections, and `[ID]` memory citations.

use tower_lsp_server::ls_types::{Position, Range};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Utf8,
    Utf16,
}

/// The shortest and longest id a citation may hold (a unique prefix, or a whole ULID).
const MIN_CITATION: usize = 5;
const MAX_CITATION: usize = 26;

/// A character of a canonical ULID (Crockford base32, upper case).
fn is_id_char(c: char) -> bool {
    c.is_ascii_digit() || (c.is_ascii_uppercase() && !matches!(c, 'I' | 'L' | 'O' | 'U'))
}

/// The byte offset in `line` of column `col`, clamped to the line.
pub(crate) fn byte_at(line: &str, col: u32, enc: Encoding) -> usize {
    match enc {
        Encoding::Utf8 => {
            let mut i = (col as usize).min(line.len());
            while !line.is_char_boundary(i) {
                i -= 1;
            }
            i
        }
        Encoding::Utf16 => {
            let mut units = 0u32;
            for (i, c) in line.char_indices() {
                if units >= col {
                    return i;
                }
                units += c.len_utf16() as u32;
            }
            line.len()
        }
    }
}

/// The column of byte offset `byte` in `line`.
pub(crate) fn col_of(line: &str, byte: usize, enc: Encoding) -> u32 {
    match enc {
        Encoding::Utf8 => byte as u32,
        Encoding::Utf16 => line[..byte].encode_utf16().count() as u32,
    }
}

/// The text a range covers.
pub fn slice(text: &str, range: Range, enc: Encoding) -> String {
    let lines: Vec<&str> = text.split('\n').collect();
    let offset = |p: Position| -> usize {
        let n = (p.line as usize).min(lines.len());
        let before: usize = lines[..n].iter().map(|l| l.len() + 1).sum();
        match lines.get(n) {
            Some(line) => before + byte_at(line, p.character, enc),
            None => text.len(),
        }
    };
    let (a, b) = (
        offset(range.start).min(text.len()),
        offset(range.end).min(text.len()),
    );
    if a >= b {
        return String::new();
    }
    text[a..b].to_string()
}

/// The first non-blank line, at most `max` characters.
pub fn first_line(text: &str, max: usize) -> String {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    match line.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &line[..i]),
        None => line.to_string(),
    }
}

/// The memory citation (`[01HX1234]`) under `pos`: the id inside and the bracketed range.
pub fn citation_at(text: &str, pos: Position, enc: Encoding) -> Option<(String, Range)> {
    let line = text.split('\n').nth(pos.line as usize)?;
    let line = line.strip_suffix('\r').unwrap_or(line);
    let at = byte_at(line, pos.character, enc);
    let open = line[..(at + 1).min(line.len())].rfind('[')?;
    let close = open + line[open..].find(']')?;
    if close < at {
        return None;
    }
    let id = &line[open + 1..close];
    // A ULID starts with its timestamp: 0-7 for the next eight thousand years. That keeps
    // `[BUG]`-like words out.
    if !(MIN_CITATION..=MAX_CITATION).contains(&id.len())
        || !id.starts_with(|c: char| ('0'..='7').contains(&c))
        || !id.chars().all(is_id_char)
    {
        return None;
    }
    let range = Range::new(
        Position::new(pos.line, col_of(line, open, enc)),
        Position::new(pos.line, col_of(line, close + 1, enc)),
    );
    Some((id.to_string(), range))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn citations_are_found_under_the_cursor_only() {
        let text = "see [01HX1234] and [nope] é[01JABCDEF9]\n";
        let (id, r) = citation_at(text, Position::new(0, 6), Encoding::Utf16).unwrap();
        assert_eq!(id, "01HX1234");
        assert_eq!((r.start.character, r.end.character), (4, 14));
        assert!(citation_at(text, Position::new(0, 2), Encoding::Utf16).is_none());
        assert!(
            citation_at(text, Position::new(0, 21), Encoding::Utf16).is_none(),
            "too short"
        );
        // After a two-byte character, UTF-16 and UTF-8 columns differ by one.
        let (id, r) = citation_at(text, Position::new(0, 30), Encoding::Utf16).unwrap();
        assert_eq!(id, "01JABCDEF9");
        assert_eq!(r.start.character, 27);
        let (_, r8) = citation_at(text, Position::new(0, 31), Encoding::Utf8).unwrap();
        assert_eq!(r8.start.character, 28);
    }

    #[test]
    fn selections_slice_by_line_and_column() {
        let text = "fn main() {\n    let ü = 1;\n}\n";
        let r = Range::new(Position::new(1, 4), Position::new(1, 9));
        assert_eq!(slice(text, r, Encoding::Utf16), "let ü");
        let r = Range::new(Position::new(0, 0), Position::new(2, 0));
        assert_eq!(
            slice(text, r, Encoding::Utf8),
            "fn main() {\n    let ü = 1;\n"
        );
        assert_eq!(first_line("\n  hello world  \nx", 5), "hello…");
    }
}
