//! Git snapshots and the changes made since one (git2).
//!
//! The changed files are the union of (start commit → HEAD), (HEAD → working tree, staged
//! and unstaged) and untracked, non-ignored files. Each path in that union is then classed by
//! whether it existed at the start and exists now: added, modified or deleted (a file created
//! and removed again during the task is not listed). Renames git detects are also reported.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use git2::{Delta, Diff, DiffFindOptions, DiffOptions, Oid, Repository, Tree};

use super::model::{FilesChanged, Rename, Snapshot};

/// The repository containing `dir`, if any.
pub fn discover(dir: &Path) -> Option<Repository> {
    Repository::discover(dir).ok().filter(|r| !r.is_bare())
}

/// The repository's working tree root.
pub fn workdir(repo: &Repository) -> PathBuf {
    // libgit2 ends it with a `/`; a workspace is shown and compared without one.
    repo.workdir()
        .unwrap_or_else(|| repo.path())
        .components()
        .collect()
}

/// HEAD at this moment.
pub fn snapshot(repo: &Repository) -> Result<Snapshot, git2::Error> {
    let (commit, branch) = match repo.head() {
        Ok(head) => {
            let commit = head.peel_to_commit()?.id().to_string();
            let branch = head
                .is_branch()
                .then(|| head.shorthand().unwrap_or("").to_string());
            (Some(commit), branch)
        }
        // No commit yet: the start is the empty tree.
        Err(e) if e.code() == git2::ErrorCode::UnbornBranch => (None, None),
        Err(e) => return Err(e),
    };
    Ok(Snapshot::Git {
        repo_root: workdir(repo),
        commit,
        branch,
    })
}

/// The changes since `start` (a commit id, `None` for the empty tree), with notes that
/// explain anything unusual (history rewritten, start commit gone, no commit yet).
pub fn changes_since(
    repo: &Repository,
    start: Option<&str>,
) -> Result<(FilesChanged, Vec<String>), git2::Error> {
    let mut notes = Vec::new();
    let start_tree: Option<Tree<'_>> = match start {
        None => None,
        Some(id) => match Oid::from_str(id).and_then(|oid| repo.find_commit(oid)) {
            Ok(commit) => Some(commit.tree()?),
            Err(_) => {
                notes.push(format!(
                    "the start commit {} no longer exists (history rewritten and collected); only uncommitted changes are listed",
                    short(id)
                ));
                None
            }
        },
    };
    let head = match repo.head() {
        Ok(h) => Some(h.peel_to_commit()?),
        Err(e) if e.code() == git2::ErrorCode::UnbornBranch => None,
        Err(e) => return Err(e),
    };
    if let (Some(start_id), Some(head)) = (start, &head)
        && let Ok(start_oid) = Oid::from_str(start_id)
        && head.id() != start_oid
        && repo.find_commit(start_oid).is_ok()
        && !repo
            .graph_descendant_of(head.id(), start_oid)
            .unwrap_or(false)
    {
        notes.push(format!(
            "HEAD ({}) does not descend from the start commit {} (rebase or reset during the task): changes are measured against the start commit's tree and may include work that is not this task's",
            short(&head.id().to_string()),
            short(start_id)
        ));
    }
    if start.is_none() && head.is_none() {
        notes.push("the repository has no commit yet: every file is new".into());
    }
    let head_tree = head.as_ref().map(|c| c.tree()).transpose()?;

    let mut touched: BTreeSet<String> = BTreeSet::new();
    let mut renamed: Vec<Rename> = Vec::new();
    // Diff 1: what commits during the task changed.
    let start_was_lost = start.is_some() && start_tree.is_none();
    if !start_was_lost {
        let mut opts = DiffOptions::new();
        let mut committed =
            repo.diff_tree_to_tree(start_tree.as_ref(), head_tree.as_ref(), Some(&mut opts))?;
        collect(&mut committed, &mut touched, &mut renamed)?;
    }
    // Diff 2: HEAD to the working tree, staged and unstaged, with untracked files.
    let mut opts = DiffOptions::new();
    opts.include_untracked(true)
        .recurse_untracked_dirs(true)
        .include_typechange(true);
    let mut uncommitted =
        repo.diff_tree_to_workdir_with_index(head_tree.as_ref(), Some(&mut opts))?;
    collect(&mut uncommitted, &mut touched, &mut renamed)?;

    // Class each touched path by existence at the start and now.
    let root = workdir(repo);
    let mut out = FilesChanged::default();
    for path in touched {
        let existed = match &start_tree {
            Some(t) => t.get_path(Path::new(&path)).is_ok(),
            None if start_was_lost => head_tree
                .as_ref()
                .is_some_and(|t| t.get_path(Path::new(&path)).is_ok()),
            None => false,
        };
        let exists = root.join(&path).symlink_metadata().is_ok();
        match (existed, exists) {
            (false, true) => out.added.push(path),
            (true, true) => out.modified.push(path),
            (true, false) => out.deleted.push(path),
            (false, false) => {}
        }
    }
    renamed.retain(|r| out.deleted.contains(&r.from) && out.added.contains(&r.to));
    renamed.sort_by(|a, b| a.to.cmp(&b.to));
    renamed.dedup();
    out.renamed = renamed;
    Ok((out, notes))
}

fn collect(
    diff: &mut Diff<'_>,
    touched: &mut BTreeSet<String>,
    renamed: &mut Vec<Rename>,
) -> Result<(), git2::Error> {
    let mut find = DiffFindOptions::new();
    find.renames(true).for_untracked(true);
    diff.find_similar(Some(&mut find))?;
    for delta in diff.deltas() {
        let old = delta
            .old_file()
            .path()
            .map(|p| p.to_string_lossy().into_owned());
        let new = delta
            .new_file()
            .path()
            .map(|p| p.to_string_lossy().into_owned());
        match delta.status() {
            Delta::Renamed => {
                if let (Some(from), Some(to)) = (old, new) {
                    touched.insert(from.clone());
                    touched.insert(to.clone());
                    renamed.push(Rename { from, to });
                }
            }
            Delta::Unmodified | Delta::Ignored => {}
            _ => {
                for p in [old, new].into_iter().flatten() {
                    touched.insert(p);
                }
            }
        }
    }
    Ok(())
}

fn short(id: &str) -> &str {
    &id[..id.len().min(10)]
}

/// Line ranges a task changed in one file (1-based; `new_lines` 0 for a pure deletion, at
/// the line it followed).
#[derive(
    Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct Hunk {
    pub old_start: u32,
    pub old_lines: u32,
    pub new_start: u32,
    pub new_lines: u32,
}

/// One file of [`hunks_since`].
pub struct ChangedFile {
    pub path: String,
    /// `added`, `modified` or `deleted`.
    pub change: &'static str,
    pub hunks: Vec<Hunk>,
}

/// Every file whose content differs from the start tree now (working tree with index and
/// untracked files), with its change and its hunks. One tree-to-workdir diff with no context
/// lines, which libgit2 limits to files whose stat changed: cheap enough for every save.
///
/// `only` limits the diff to these paths (relative to the working tree): what a save or a
/// change seen on disk needs.
pub fn hunks_since(
    repo: &Repository,
    start: Option<&str>,
    only: Option<&[String]>,
) -> Result<Vec<ChangedFile>, git2::Error> {
    let start_tree = match start {
        Some(id) => match Oid::from_str(id).and_then(|oid| repo.find_commit(oid)) {
            Ok(c) => Some(c.tree()?),
            // The start commit is gone: measure against HEAD instead.
            Err(_) => repo.head().ok().and_then(|h| h.peel_to_tree().ok()),
        },
        None => None,
    };
    let mut opts = DiffOptions::new();
    opts.include_untracked(true)
        .recurse_untracked_dirs(true)
        .show_untracked_content(true)
        .context_lines(0);
    if let Some(paths) = only {
        for path in paths {
            opts.pathspec(path);
        }
        opts.disable_pathspec_match(true);
    }
    let diff = repo.diff_tree_to_workdir_with_index(start_tree.as_ref(), Some(&mut opts))?;
    let mut out: Vec<ChangedFile> = Vec::new();
    for i in 0..diff.deltas().len() {
        let Some(patch) = git2::Patch::from_diff(&diff, i)? else {
            continue;
        };
        let delta = patch.delta();
        let path = delta
            .new_file()
            .path()
            .or_else(|| delta.old_file().path())
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut hunks = Vec::with_capacity(patch.num_hunks());
        for h in 0..patch.num_hunks() {
            let (hunk, _) = patch.hunk(h)?;
            hunks.push(Hunk {
                old_start: hunk.old_start(),
                old_lines: hunk.old_lines(),
                new_start: hunk.new_start(),
                new_lines: hunk.new_lines(),
            });
        }
        let change = match delta.status() {
            Delta::Added | Delta::Untracked => "added",
            Delta::Deleted => "deleted",
            _ => "modified",
        };
        out.push(ChangedFile {
            path,
            change,
            hunks,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    /// Runs `script` with `sh` in `dir`, git configured for the test alone.
    fn sh(dir: &Path, script: &str) {
        let out = Command::new("sh")
            .args(["-ec", script])
            .current_dir(dir)
            .env("HOME", dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .output()
            .expect("sh runs");
        assert!(
            out.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    struct Case {
        name: &'static str,
        /// Run before the snapshot, in a fresh `git init`.
        before: &'static str,
        /// Run during the task.
        during: &'static str,
        added: &'static [&'static str],
        modified: &'static [&'static str],
        deleted: &'static [&'static str],
        renamed: &'static [(&'static str, &'static str)],
        /// The branch the snapshot records.
        branch: Option<&'static str>,
        /// A note the changes come with.
        note: Option<&'static str>,
    }

    const INIT: &str = "echo a > a.txt; echo b > b.txt; git add -A; git commit -qm init";

    /// What a case expects unless it says otherwise: no change, no note, on `main`.
    const NOTHING: Case = Case {
        name: "",
        before: INIT,
        during: "true",
        added: &[],
        modified: &[],
        deleted: &[],
        renamed: &[],
        branch: Some("main"),
        note: None,
    };

    const CASES: &[Case] = &[
        Case {
            name: "uncommitted edits, a new file, a removal",
            during: "echo a2 > a.txt; rm b.txt; echo c > c.txt",
            added: &["c.txt"],
            modified: &["a.txt"],
            deleted: &["b.txt"],
            ..NOTHING
        },
        Case {
            name: "committed during the task",
            during: "echo c > c.txt; echo a3 > a.txt; git add -A; git commit -qm work",
            added: &["c.txt"],
            modified: &["a.txt"],
            ..NOTHING
        },
        Case {
            name: "a rename git detects",
            before: "printf 'one\\ntwo\\nthree\\nfour\\nfive\\n' > old.txt; git add -A; git commit -qm init",
            during: "git mv old.txt new.txt",
            added: &["new.txt"],
            deleted: &["old.txt"],
            renamed: &[("old.txt", "new.txt")],
            ..NOTHING
        },
        Case {
            name: "a file made and removed again",
            during: "echo t > tmp.txt; rm tmp.txt",
            ..NOTHING
        },
        Case {
            name: "a reset during the task",
            before: "echo a > a.txt; git add -A; git commit -qm one; echo b > b.txt; git add -A; git commit -qm two",
            during: "git reset -q --hard HEAD~1",
            deleted: &["b.txt"],
            note: Some("does not descend from the start commit"),
            ..NOTHING
        },
        Case {
            name: "an unborn repository",
            before: "true",
            during: "echo n > n.txt",
            added: &["n.txt"],
            branch: None,
            note: Some("no commit yet"),
            ..NOTHING
        },
        Case {
            name: "a detached HEAD",
            before: "echo a > a.txt; git add -A; git commit -qm one; git checkout -q --detach",
            during: "echo a2 > a.txt",
            modified: &["a.txt"],
            branch: None,
            ..NOTHING
        },
        Case {
            name: "unicode paths",
            during: "mkdir -p 'dossier é'; echo u > 'dossier é/café ü.txt'",
            added: &["dossier é/café ü.txt"],
            ..NOTHING
        },
        Case {
            name: "ignored files",
            before: "echo '*.log' > .gitignore; git add -A; git commit -qm init",
            during: "echo x > debug.log",
            ..NOTHING
        },
    ];

    #[test]
    fn changes_since_a_snapshot() {
        for case in CASES {
            let dir = tempfile::tempdir().unwrap();
            sh(dir.path(), "git init -q -b main");
            sh(dir.path(), case.before);
            let repo = Repository::open(dir.path()).unwrap();
            let Snapshot::Git { commit, branch, .. } = snapshot(&repo).unwrap() else {
                panic!("{}: not a git snapshot", case.name);
            };
            assert_eq!(branch.as_deref(), case.branch, "{}: branch", case.name);
            sh(dir.path(), case.during);
            let (changes, notes) = changes_since(&repo, commit.as_deref()).unwrap();
            changes.assert_lists(case.name, case.added, case.modified, case.deleted);
            let renamed: Vec<(&str, &str)> = changes
                .renamed
                .iter()
                .map(|r| (r.from.as_str(), r.to.as_str()))
                .collect();
            assert_eq!(renamed, case.renamed, "{}: renamed", case.name);
            match case.note {
                Some(n) => assert!(
                    notes.iter().any(|note| note.contains(n)),
                    "{}: notes {notes:?}",
                    case.name
                ),
                None => assert!(notes.is_empty(), "{}: notes {notes:?}", case.name),
            }
        }
    }
}
