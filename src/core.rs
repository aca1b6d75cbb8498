//! The core services one data dir holds, opened together.

use std::path::Path;
use std::sync::Arc;

use crate::memory::{Memory, MemoryError, Progress};
use crate::store::Store;
use crate::tasks::{TaskError, Tasks};

/// Memory and tasks on one store: what a serving process (in-process MCP, the daemon) holds.
pub struct Core {
    pub memory: Memory,
    pub tasks: Tasks,
}

impl Core {
    /// Opens the data dir (taking its lock) and every service in it.
    pub fn open(home: &Path, progress: &dyn Progress) -> Result<Core, MemoryError> {
        let store = Arc::new(Store::open(home)?);
        let tasks = Tasks::open(store.clone()).map_err(|e| match e {
            TaskError::Store(e) => MemoryError::Store(e),
            other => MemoryError::Corrupt(other.to_string()),
        })?;
        let memory = Memory::open(store, progress)?;
        Ok(Core { memory, tasks })
    }
}
