//! File watches through the library: what changes on disk publish on the core's bus.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tandem_core::events::{Bus, Event, FilesChange};
use tandem_core::watch::Watches;
use tokio::sync::broadcast::Receiver;

use crate::util::{git, repo_with, write_files};

/// The next file change published, within 10 s.
async fn next(rx: &mut Receiver<Event>) -> FilesChange {
    loop {
        let event = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("no file change within 10 s")
            .unwrap();
        if let Event::Files { change, .. } = event {
            return change;
        }
    }
}

/// Waits until a published change names `path`; returns the paths of that change.
async fn until_path(rx: &mut Receiver<Event>, path: &Path) -> Vec<PathBuf> {
    loop {
        if let FilesChange::Paths(p) = next(rx).await
            && p.iter().any(|x| x == path)
        {
            return p;
        }
    }
}

/// Whether anything is published in the next 300 ms.
async fn quiet(rx: &mut Receiver<Event>) -> bool {
    tokio::time::timeout(Duration::from_millis(300), next(rx))
        .await
        .is_err()
}

#[tokio::test]
async fn a_watch_reports_changed_files_only_and_rescans_on_commits() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    repo_with(
        &repo,
        &[("src/a.rs", "a\n"), (".gitignore", "*.log\ntarget/\n")],
    );
    std::fs::create_dir_all(repo.join("target")).unwrap();
    let repo = repo.canonicalize().unwrap();
    let bus = Bus::default();
    let mut rx = bus.subscribe();
    let watches = Watches::new(bus.clone());

    let watch = watches.watch(&repo);
    assert_eq!(next(&mut rx).await, FilesChange::Rescan, "ready");
    assert!(Arc::ptr_eq(&watch, &watches.watch(&repo)), "one per tree");
    let status = watch.status();
    assert!(status.ready);
    // The root, src/, .git/ and .git/refs/heads/; not the ignored target/.
    assert_eq!((status.watched_dirs, status.polled_dirs), (4, 0));

    // Ignored files and reads are not changes.
    write_files(&repo, &[("debug.log", "x\n"), ("target/out.o", "x\n")]);
    let _ = std::fs::read_to_string(repo.join("src/a.rs")).unwrap();
    assert!(quiet(&mut rx).await);
    write_files(&repo, &[("src/a.rs", "b\n")]);
    assert_eq!(
        next(&mut rx).await,
        FilesChange::Paths(vec![repo.join("src/a.rs")])
    );

    // A new directory: what it holds is reported, and it is watched from then on.
    write_files(&repo, &[("new/deep/b.rs", "b\n")]);
    until_path(&mut rx, &repo.join("new/deep/b.rs")).await;
    write_files(&repo, &[("new/deep/b.rs", "c\n")]);
    until_path(&mut rx, &repo.join("new/deep/b.rs")).await;

    // A commit moves a branch: everything is recomputed.
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "more"]);
    while next(&mut rx).await != FilesChange::Rescan {}

    // The last handle dropped, the watch stops.
    drop(watch);
    tokio::time::sleep(Duration::from_millis(100)).await;
    while rx.try_recv().is_ok() {}
    write_files(&repo, &[("src/a.rs", "d\n")]);
    assert!(quiet(&mut rx).await);
}
