//! Snapshots outside git: a checksum of every file, and the changes against one.
//!
//! The walk respects `.gitignore`-style ignore files and skips build and dependency dirs.
//! Content is hashed with xxh3; at completion a file whose size and modification time are
//! unchanged is not read again.

use std::path::Path;
use std::time::UNIX_EPOCH;

use ignore::WalkBuilder;

use super::model::{ChecksumMap, FileStamp, FilesChanged};

/// A tree with more files than this is refused: outside git, a snapshot reads every file.
pub const MAX_FILES: usize = 200_000;

/// Directories never worth snapshotting, ignore files or not.
pub(crate) const SKIPPED_DIRS: &[&str] = &[
    "target",
    "node_modules",
    ".git",
    ".hg",
    ".svn",
    "__pycache__",
    ".venv",
    "dist",
    "build",
];

/// Checksums every file under `root`. `previous` lets unchanged files (same size and mtime)
/// keep their hash without being read.
pub fn snapshot(root: &Path, previous: Option<&ChecksumMap>) -> std::io::Result<ChecksumMap> {
    let mut map = ChecksumMap::new();
    let walker = WalkBuilder::new(root)
        .hidden(false)
        .git_ignore(true)
        .git_exclude(false)
        .git_global(false)
        .require_git(false)
        .filter_entry(|e| {
            !(e.file_type().is_some_and(|t| t.is_dir())
                && e.file_name()
                    .to_str()
                    .is_some_and(|n| SKIPPED_DIRS.contains(&n)))
        })
        .build();
    for entry in walker {
        let Ok(entry) = entry else { continue };
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        if map.len() >= MAX_FILES {
            return Err(std::io::Error::other(format!(
                "more than {MAX_FILES} files outside git; start the task in a git repository or a smaller directory"
            )));
        }
        let path = entry.path();
        let Ok(rel) = path.strip_prefix(root) else {
            continue;
        };
        let rel = rel.to_string_lossy().replace('\\', "/");
        let Ok(meta) = entry.metadata() else { continue };
        let mtime_ns = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map(|d| d.as_nanos() as i128)
            .unwrap_or(0);
        let size = meta.len();
        let hash = match previous.and_then(|p| p.get(&rel)) {
            Some(old) if old.size == size && old.mtime_ns == mtime_ns => old.hash,
            _ => match std::fs::read(path) {
                Ok(bytes) => xxhash_rust::xxh3::xxh3_64(&bytes),
                Err(_) => continue,
            },
        };
        map.insert(
            rel,
            FileStamp {
                size,
                mtime_ns,
                hash,
            },
        );
    }
    Ok(map)
}

/// A short digest of a whole map: the snapshot's id.
pub fn digest(map: &ChecksumMap) -> String {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    for (path, stamp) in map {
        h.update(path.as_bytes());
        h.update(&stamp.hash.to_le_bytes());
    }
    format!("{:016x}", h.digest())
}

/// What changed between two snapshots of the same root.
pub fn compare(before: &ChecksumMap, after: &ChecksumMap) -> FilesChanged {
    let mut out = FilesChanged::default();
    for (path, stamp) in after {
        match before.get(path) {
            None => out.added.push(path.clone()),
            Some(old) if old.hash != stamp.hash || old.size != stamp.size => {
                out.modified.push(path.clone())
            }
            Some(_) => {}
        }
    }
    out.deleted = before
        .keys()
        .filter(|p| !after.contains_key(*p))
        .cloned()
        .collect();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file operation on the tree: `+path` writes `path` (its content is `content`),
    /// `-path` removes it.
    type Step = (&'static str, &'static str);

    struct Case {
        name: &'static str,
        before: &'static [Step],
        during: &'static [Step],
        added: &'static [&'static str],
        modified: &'static [&'static str],
        deleted: &'static [&'static str],
    }

    const BASE: &[Step] = &[("+a.txt", "a"), ("+src/b.rs", "b")];

    const CASES: &[Case] = &[
        Case {
            name: "an edit, a new file, a removal",
            before: BASE,
            during: &[("+a.txt", "a2"), ("-src/b.rs", ""), ("+c.txt", "c")],
            added: &["c.txt"],
            modified: &["a.txt"],
            deleted: &["src/b.rs"],
        },
        Case {
            name: "same size, other content",
            before: BASE,
            during: &[("+a.txt", "z")],
            added: &[],
            modified: &["a.txt"],
            deleted: &[],
        },
        Case {
            name: "a rewrite with the same content",
            before: BASE,
            during: &[("+a.txt", "a")],
            added: &[],
            modified: &[],
            deleted: &[],
        },
        Case {
            name: "ignore files and build dirs",
            before: &[("+.gitignore", "*.log\n"), ("+a.txt", "a")],
            during: &[
                ("+debug.log", "x"),
                ("+node_modules/m/index.js", "x"),
                ("+target/debug/out", "x"),
                ("+.git/HEAD", "x"),
            ],
            added: &[],
            modified: &[],
            deleted: &[],
        },
        Case {
            name: "unicode paths",
            before: BASE,
            during: &[("+dossier é/café ü.txt", "u")],
            added: &["dossier é/café ü.txt"],
            modified: &[],
            deleted: &[],
        },
    ];

    fn apply(root: &Path, steps: &[Step]) {
        for (op, content) in steps {
            let path = root.join(&op[1..]);
            if op.starts_with('+') {
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, content).unwrap();
            } else {
                std::fs::remove_file(&path).unwrap();
            }
        }
    }

    #[test]
    fn changes_between_two_snapshots() {
        for case in CASES {
            let dir = tempfile::tempdir().unwrap();
            apply(dir.path(), case.before);
            let before = snapshot(dir.path(), None).unwrap();
            apply(dir.path(), case.during);
            // As at completion: unchanged stamps keep their hash without a read.
            let after = snapshot(dir.path(), Some(&before)).unwrap();
            let changes = compare(&before, &after);
            changes.assert_lists(case.name, case.added, case.modified, case.deleted);
            assert_eq!(
                digest(&before) == digest(&after),
                changes.added.is_empty()
                    && changes.modified.is_empty()
                    && changes.deleted.is_empty(),
                "{}: the digest follows the content",
                case.name
            );
        }
    }
}
