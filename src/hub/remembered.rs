//! The last prompts each server listed, kept in the data dir. A server with `autostart:
//! false` is not running until something needs it, yet its prompts should still be offered
//! as commands (running one starts it): they are the ones it listed the last time it ran,
//! in this workspace, with the same command line.

use std::path::Path;

use rmcp::model::Prompt;
use serde::{Deserialize, Serialize};

use crate::store::StoreError;

#[derive(Serialize, Deserialize)]
struct Record {
    /// What the server ran as (`Transport::describe`): another command may list other prompts.
    runs: String,
    prompts: Vec<Prompt>,
}

pub struct RememberedPrompts {
    tree: sled::Tree,
}

fn key(root: &Path, server: &str) -> Vec<u8> {
    let mut key = root.to_string_lossy().into_owned().into_bytes();
    key.push(0);
    key.extend_from_slice(server.as_bytes());
    key
}

impl RememberedPrompts {
    pub fn open(db: &sled::Db) -> Result<RememberedPrompts, StoreError> {
        Ok(RememberedPrompts {
            tree: db.open_tree("hub.prompts")?,
        })
    }

    /// Keeps `prompts` as what `server` of the workspace `root`, run as `runs`, lists. Not
    /// flushed: sled's background flush persists it, and losing the last one in a crash only
    /// means the next run lists them again.
    pub fn remember(&self, root: &Path, server: &str, runs: &str, prompts: &[Prompt]) {
        let record = Record {
            runs: runs.to_string(),
            prompts: prompts.to_vec(),
        };
        let value = serde_json::to_vec(&record).expect("plain data");
        let key = key(root, server);
        if self.tree.get(&key).ok().flatten().as_deref() == Some(value.as_slice()) {
            return;
        }
        if let Err(e) = self.tree.insert(key, value) {
            tracing::warn!("cannot remember the prompts of {server}: {e}");
        }
    }

    /// What `server` of `root` listed when it last ran as `runs`, if it ever did.
    pub fn recall(&self, root: &Path, server: &str, runs: &str) -> Option<Vec<Prompt>> {
        let bytes = self.tree.get(key(root, server)).ok()??;
        let record: Record = serde_json::from_slice(&bytes).ok()?;
        (record.runs == runs).then_some(record.prompts)
    }
}
