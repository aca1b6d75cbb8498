//! Workspace trust: a cloned repository's `.mcp.json` is somebody else's code. Its servers
//! run only once the user has approved that file's exact content (a SHA-256 of it, kept in
//! the data dir); an edited file needs approval again. The user's own config is trusted.
//!
//! An approval names the digest of the content the user was shown: the file is read again
//! when the answer comes, and if it changed meanwhile nothing is approved.

use std::path::Path;
use std::sync::Arc;

use crate::hub::Hub;
use crate::hub::config::{self, Origin, Transport};

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

/// What a trust request does besides showing the workspace file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TrustAction {
    Show,
    /// Approve the file if its content still has this SHA-256 (hex): the digest of what
    /// the user was shown.
    Approve {
        shown: String,
    },
    Revoke,
}

/// Why a trust request did nothing.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    /// The file is not what the user was shown: nothing was approved.
    #[error(
        "{file} changed since it was shown (it was sha256 {shown}, it is now {now}): nothing was approved; review it again, then approve what you see"
    )]
    Changed {
        file: String,
        shown: String,
        now: String,
    },
    /// There is a workspace file, and it cannot be read (not a regular file, too large).
    #[error("{0}")]
    Unreadable(config::ConfigProblem),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A workspace's `.mcp.json` as trust sees it: what `tandem trust` shows and does.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrustReport {
    /// The workspace's `.mcp.json`, if there is one.
    pub file: Option<String>,
    pub sha256: Option<String>,
    pub trusted: bool,
    /// Its servers and what each would run.
    pub servers: Vec<TrustedServer>,
    /// What this request changed: `approved`, `revoked` or nothing.
    pub done: Option<String>,
}

/// One server of a workspace file: what approving the file lets run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrustedServer {
    pub name: String,
    pub runs: Option<String>,
    /// The names of the variables it sets (never their values).
    pub env: Vec<String>,
    pub error: Option<String>,
}

impl TrustError {
    /// The error code of the error object.
    pub fn code(&self) -> &'static str {
        match self {
            TrustError::Changed { .. } => "FILE_CHANGED",
            TrustError::Unreadable(_) => "CONFIG_INVALID",
            TrustError::Store(_) => "INTERNAL_ERROR",
        }
    }
}

impl Hub {
    /// Shows the workspace file at `root` and its servers, approving or revoking it first
    /// as `action` says; a change applies at once in this process.
    pub fn trust_workspace(
        self: &Arc<Self>,
        root: &Path,
        action: TrustAction,
    ) -> Result<TrustReport, TrustError> {
        let env = |var: &str| std::env::var(var).ok();
        let trusted = |file: &Path, content: &str| self.trust.is_trusted(file, content);
        let config = config::load(self.user_file(), root, &env, &trusted);
        let workspace_file = root.join(config::WORKSPACE_FILE);
        if let Some(e) = config.errors.iter().find(|e| e.file == workspace_file)
            && config.workspace_file.is_none()
        {
            return Err(TrustError::Unreadable(e.clone()));
        }
        let Some((file, content)) = config.workspace_file.clone() else {
            return Ok(TrustReport {
                file: None,
                sha256: None,
                trusted: false,
                servers: Vec::new(),
                done: None,
            });
        };
        let servers = config
            .servers
            .values()
            .filter(|s| matches!(s.origin, Origin::Workspace(_)))
            .chain(&config.held_back)
            .map(|s| TrustedServer {
                name: s.name.clone(),
                runs: s.runs.clone(),
                env: match &s.transport {
                    Some(Transport::Stdio { env, .. }) => env.keys().cloned().collect(),
                    _ => Vec::new(),
                },
                error: s.error.as_ref().map(|e| e.to_string()),
            })
            .collect();
        let done = match action {
            TrustAction::Show => None,
            TrustAction::Approve { shown } => {
                let now = digest(&content);
                if !shown.eq_ignore_ascii_case(&now) {
                    return Err(TrustError::Changed {
                        file: file.display().to_string(),
                        shown,
                        now,
                    });
                }
                self.trust.approve(&file, &content)?;
                Some("approved".to_string())
            }
            TrustAction::Revoke => {
                self.trust.revoke(&file)?;
                Some("revoked".to_string())
            }
        };
        if done.is_some() {
            // Apply at once in this process (a daemon's watcher would also see it).
            self.workspace(root).apply_now();
        }
        Ok(TrustReport {
            file: Some(file.display().to_string()),
            sha256: Some(digest(&content)),
            trusted: self.trust.is_trusted(&file, &content),
            servers,
            done,
        })
    }
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
