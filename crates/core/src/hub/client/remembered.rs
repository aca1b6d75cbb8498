//! What each server said of itself the last time it ran (its prompts, tools, `serverInfo`
//! and `instructions`), kept in the data dir. A server with `autostart: false` is not
//! running until something needs it, yet its prompts should still be offered as commands
//! (running one starts it), and the gateway's catalog describes it and finds it by its
//! tools: from what it said the last time it ran, in this workspace, with the same command
//! line.

use std::path::Path;

use rmcp::model::{Implementation, Prompt, Tool};
use serde::{Deserialize, Serialize};

use crate::store::StoreError;

/// What a server said of itself the last time it ran, and the command line it ran as.
#[derive(Serialize, Deserialize)]
struct LastRun {
    /// What the server ran as (`Transport::describe`): another command may list other prompts.
    runs: String,
    #[serde(flatten)]
    said: Said,
}

/// What a server says of itself while it runs. Records written before tools and the rest
/// were kept read as none of them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Said {
    pub prompts: Vec<Prompt>,
    #[serde(default)]
    pub tools: Vec<Tool>,
    #[serde(default)]
    pub server_info: Option<Implementation>,
    #[serde(default)]
    pub instructions: Option<String>,
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

    /// Keeps what `server` of the workspace `root`, run as `runs`, says. Not flushed:
    /// sled's background flush persists it, and losing the last one in a crash only means
    /// the next run says it again.
    pub fn remember(&self, root: &Path, server: &str, runs: &str, said: Said) {
        let record = LastRun {
            runs: runs.to_string(),
            said,
        };
        let value = serde_json::to_vec(&record).expect("plain data");
        let key = key(root, server);
        if self.tree.get(&key).ok().flatten().as_deref() == Some(value.as_slice()) {
            return;
        }
        if let Err(e) = self.tree.insert(key, value) {
            tracing::warn!("cannot remember what {server} said: {e}");
        }
    }

    /// What `server` of `root` said when it last ran as `runs`, if it ever did.
    pub fn recall(&self, root: &Path, server: &str, runs: &str) -> Option<Said> {
        let bytes = self.tree.get(key(root, server)).ok()??;
        let record: LastRun = serde_json::from_slice(&bytes).ok()?;
        (record.runs == runs).then_some(record.said)
    }
}
