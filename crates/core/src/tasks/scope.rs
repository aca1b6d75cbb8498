//! Scope verification: do the changed files fall inside the task's declared `areas`?
//!
//! An area matches a path when it is a glob matching it (`src/api/**`, `*.sql`), a path
//! prefix of it (`src/api`), or names one of its segments, with or without extension
//! (`auth` matches `src/auth/login.ts` and `auth.ts`).

use globset::{Glob, GlobMatcher};

use super::model::Verification;

enum Area {
    Glob(GlobMatcher),
    Name(String),
}

fn parse(area: &str) -> Option<Area> {
    let area = area.trim().trim_start_matches("./").trim_end_matches('/');
    if area.is_empty() {
        return None;
    }
    if area.contains(['*', '?', '[', '{']) {
        return Glob::new(area)
            .ok()
            .map(|g| Area::Glob(g.compile_matcher()));
    }
    Some(Area::Name(area.to_string()))
}

fn matches(area: &Area, path: &str) -> bool {
    match area {
        Area::Glob(g) => {
            // A glob without a slash matches the file name anywhere (`*.sql`).
            g.is_match(path) || path.rsplit('/').next().is_some_and(|name| g.is_match(name))
        }
        Area::Name(name) if name.contains('/') => {
            path == name || path.starts_with(&format!("{name}/"))
        }
        Area::Name(name) => path.split('/').any(|segment| {
            segment == name
                || segment
                    .split_once('.')
                    .is_some_and(|(stem, _)| stem == name)
        }),
    }
}

/// `Err` with the reason when `path` (an area, or a path a caller names) could reach outside
/// the workspace: absolute, or with a `..` segment. Paths are relative to the workspace's
/// root, and nothing outside it is ever looked at.
pub fn inside_workspace(path: &str) -> Result<(), &'static str> {
    let path = path.trim();
    if path.starts_with(['/', '\\', '~']) || path.as_bytes().get(1) == Some(&b':') {
        return Err("an absolute path; paths are relative to the workspace's root");
    }
    if path.split(['/', '\\']).any(|segment| segment == "..") {
        return Err("a '..' segment leaves the workspace; paths are relative to its root");
    }
    Ok(())
}

/// Checks `changed` against `areas`. No areas declared: everything matches.
pub fn verify<'a>(areas: &[String], changed: impl Iterator<Item = &'a String>) -> Verification {
    let parsed: Vec<Area> = areas.iter().filter_map(|a| parse(a)).collect();
    if parsed.is_empty() {
        return Verification {
            scope_match: true,
            ..Verification::default()
        };
    }
    let mut unexpected: Vec<String> = changed
        .filter(|p| !parsed.iter().any(|a| matches(a, p)))
        .cloned()
        .collect();
    unexpected.sort();
    unexpected.dedup();
    let mut warnings = Vec::new();
    if !unexpected.is_empty() {
        warnings.push(format!(
            "⚠️ {} file(s) modified outside declared scope ({})",
            unexpected.len(),
            areas.join(", ")
        ));
    }
    Verification {
        scope_match: unexpected.is_empty(),
        unexpected_files: unexpected,
        warnings,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_inside_the_workspace() {
        for inside in [
            "src",
            "src/api/**",
            "*.sql",
            "./lib",
            "a..b/c",
            "..hidden",
            "dir/..x",
        ] {
            assert_eq!(inside_workspace(inside), Ok(()), "{inside}");
        }
        for outside in [
            "/etc",
            "../other",
            "src/../../x",
            "..",
            "~/notes",
            "C:\\x",
            "a\\..\\b",
            "\\\\host\\share",
        ] {
            assert!(inside_workspace(outside).is_err(), "{outside}");
        }
    }

    #[test]
    fn areas_match_segments_prefixes_and_globs() {
        // (area, path, matches)
        let cases = [
            ("auth", "src/auth/login.ts", true),
            ("auth", "auth.ts", true),
            ("auth", "src/authz/x.ts", false),
            ("auth", "src/oauth.ts", false),
            ("src/api", "src/api/users.rs", true),
            ("src/api", "src/apis/users.rs", false),
            ("src/api/", "src/api/v1/x.rs", true),
            ("src/api/**", "src/api/v1/x.rs", true),
            ("src/api/**", "src/web/x.rs", false),
            ("*.sql", "db/migrations/001.sql", true),
            ("*.sql", "db/schema.rs", false),
            ("middleware", "src/middleware.ts", true),
            ("package.json", "package.json", true),
        ];
        for (area, path, want) in cases {
            let a = parse(area).unwrap();
            assert_eq!(matches(&a, path), want, "area {area:?} path {path:?}");
        }
    }

    #[test]
    fn verification_lists_unexpected_files_with_the_spec_warning() {
        let areas = vec!["auth".to_string(), "api".to_string()];
        let changed = [
            "auth.ts".to_string(),
            "api.ts".to_string(),
            "utils.ts".to_string(),
        ];
        let v = verify(&areas, changed.iter());
        assert!(!v.scope_match);
        assert_eq!(v.unexpected_files, ["utils.ts"]);
        assert_eq!(
            v.warnings,
            ["⚠️ 1 file(s) modified outside declared scope (auth, api)"]
        );
        let v = verify(&[], changed.iter());
        assert!(v.scope_match && v.warnings.is_empty());
    }
}
