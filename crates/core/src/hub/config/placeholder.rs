//! Credentials not filled in: the values a config entry carries where a real key belongs
//! (`YOUR_API_KEY`, `<token>`, `changeme`). The config counts such a credential as
//! missing, as it does one whose variable is unset.

/// Values that stand for a credential not filled in, compared case-insensitively.
const PLACEHOLDER_VALUES: &[&str] = &[
    "changeme",
    "change-me",
    "change_me",
    "todo",
    "tbd",
    "fixme",
    "placeholder",
    "replaceme",
    "replace-me",
    "replace_me",
    "secret",
    "token",
    "password",
    "api-key",
    "api_key",
    "apikey",
    "null",
    "undefined",
];

/// How placeholders begin, compared case-insensitively (`YOUR_API_KEY`, `<token>` is
/// checked apart).
const PLACEHOLDER_PREFIXES: &[&str] = &[
    "your_", "your-", "your ", "insert_", "insert-", "insert ", "enter_", "enter-", "enter ",
    "put_", "put-", "put ", "add_your", "add-your", "replace_", "replace-", "replace ",
];

/// How placeholders end (`API_KEY_HERE`, `token-goes-here`).
const PLACEHOLDER_SUFFIXES: &[&str] = &["_here", "-here", " here"];

/// Whether a credential's value is missing or a placeholder: empty, an unexpanded `${VAR}`,
/// `<...>`, a run of `x`, `*` or `.`, or one of the usual words and shapes
/// (`PLACEHOLDER_VALUES`, `PLACEHOLDER_PREFIXES`, `PLACEHOLDER_SUFFIXES`).
pub fn is_placeholder(value: &str) -> bool {
    let v = value.trim();
    let lower = v.to_ascii_lowercase();
    v.is_empty()
        || v.contains("${")
        || (v.starts_with('<') && v.ends_with('>'))
        || (v.len() >= 3 && v.chars().all(|c| matches!(c, 'x' | 'X' | '*' | '.')))
        || lower.contains("xxxx")
        || PLACEHOLDER_VALUES.contains(&lower.as_str())
        || PLACEHOLDER_PREFIXES.iter().any(|p| lower.starts_with(p))
        || PLACEHOLDER_SUFFIXES.iter().any(|s| lower.ends_with(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_recognised_and_real_values_are_not() {
        let placeholders = [
            "",
            "   ",
            "${SENTRY_AUTH_TOKEN}",
            "<your-token>",
            "<TOKEN>",
            "YOUR_API_KEY",
            "your-api-key-here",
            "Your token",
            "API_KEY_HERE",
            "token-goes-here",
            "xxx",
            "XXXXXXXX",
            "sk-xxxxxxxxxxxx",
            "****",
            "...",
            "changeme",
            "CHANGE_ME",
            "TODO",
            "tbd",
            "placeholder",
            "replace-me",
            "insert_key",
            "secret",
            "null",
        ];
        for v in placeholders {
            assert!(is_placeholder(v), "{v:?} is a placeholder");
        }
        let real = [
            "sk-live-4f9a8b7c6d5e",
            "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
            "https://sentry.example.com",
            "production",
            "/home/user/notes",
            "0",
            "true",
            "my-secret-project",
            "taxes",
        ];
        for v in real {
            assert!(!is_placeholder(v), "{v:?} is a real value");
        }
    }
}
