//! Shared test helpers: hermetic homes and the memory under test.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tandem::memory::{EntryType, Memory, NewEntry, NoProgress};
use tandem::store::Store;

/// A temp dir that is the test's whole world: `TANDEM_HOME`, `HOME` and XDG dirs inside.
pub struct TestHome {
    pub dir: tempfile::TempDir,
}

impl TestHome {
    pub fn new() -> TestHome {
        TestHome {
            dir: tempfile::Builder::new()
                .prefix("tandem-test")
                .tempdir()
                .unwrap(),
        }
    }

    pub fn tandem_home(&self) -> PathBuf {
        self.dir.path().join("tandem-home")
    }

    #[allow(dead_code)]
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Opens the memory in this home.
    pub fn memory(&self) -> Memory {
        let store = Arc::new(Store::open(&self.tandem_home()).unwrap());
        Memory::open(store, &NoProgress).unwrap()
    }
}

pub fn entry(t: EntryType, title: &str, content: &str, tags: &[&str]) -> NewEntry {
    NewEntry {
        entry_type: Some(t),
        title: title.into(),
        content: content.into(),
        tags: tags.iter().map(|t| t.to_string()).collect(),
        ..NewEntry::default()
    }
}
