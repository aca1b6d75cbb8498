//! Workspace trust: a cloned repository's `.mcp.json` is somebody else's code. Its servers
//! run only once the user has approved that file's exact content (a SHA-256 of it, kept in
//! the data dir); an edited file needs approval again. The user's own config is trusted.

use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::store::{Store, StoreError};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Approval {
    pub file: String,
    pub sha256: String,
    pub approved_at: String,
}

pub struct Trust {
    store: Arc<Store>,
    tree: sled::Tree,
}

/// The hex SHA-256 of a file's content.
pub fn digest(content: &str) -> String {
    Sha256::digest(content.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Trust {
    pub fn open(store: Arc<Store>) -> Result<Trust, StoreError> {
        let tree = store.db().open_tree("hub.trust")?;
        Ok(Trust { store, tree })
    }

    fn approval(&self, file: &Path) -> Option<Approval> {
        let v = self.tree.get(file.to_string_lossy().as_bytes()).ok()??;
        serde_json::from_slice(&v).ok()
    }

    /// Whether `file` with exactly this content was approved.
    pub fn is_trusted(&self, file: &Path, content: &str) -> bool {
        self.approval(file)
            .is_some_and(|a| a.sha256 == digest(content))
    }

    /// Approves `file` as it is now (`content`).
    pub fn approve(&self, file: &Path, content: &str) -> Result<Approval, StoreError> {
        let approval = Approval {
            file: file.display().to_string(),
            sha256: digest(content),
            approved_at: jiff::Timestamp::now()
                .round(jiff::Unit::Second)
                .unwrap_or_else(|_| jiff::Timestamp::now())
                .to_string(),
        };
        let value = serde_json::to_vec(&approval).expect("plain data");
        self.tree.insert(file.to_string_lossy().as_bytes(), value)?;
        self.store.flush()?;
        Ok(approval)
    }

    /// Withdraws an approval; whether there was one.
    pub fn revoke(&self, file: &Path) -> Result<bool, StoreError> {
        let had = self
            .tree
            .remove(file.to_string_lossy().as_bytes())?
            .is_some();
        self.store.flush()?;
        Ok(had)
    }

    pub fn list(&self) -> Vec<Approval> {
        self.tree
            .iter()
            .values()
            .filter_map(|v| serde_json::from_slice(&v.ok()?).ok())
            .collect()
    }
}
