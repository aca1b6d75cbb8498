//! The core services one data dir holds, opened together.

use std::path::Path;
use std::sync::Arc;

use crate::events::Bus;
use crate::hub::Hub;
use crate::memory::{Memory, MemoryError, Progress};
use crate::store::Store;
use crate::tasks::{TaskError, Tasks};
use crate::watch::Watches;

/// The user's config file (downstream MCP servers, injection settings), in the data dir.
pub const USER_CONFIG: &str = "config.json";

/// Memory, tasks and the hub on one store, and the file watches of running tasks: what a
/// serving process (in-process MCP, the daemon) holds.
pub struct Core {
    pub memory: Memory,
    pub tasks: Tasks,
    pub hub: Arc<Hub>,
    /// Workspaces watched on disk (one watch per tree, shared by the sessions that follow it).
    pub watches: Watches,
}

impl Core {
    /// Opens the data dir (taking its lock) and every service in it.
    pub fn open(home: &Path, progress: &dyn Progress) -> Result<Core, MemoryError> {
        let store = Arc::new(Store::open(home)?);
        let tasks = Tasks::open(store.clone()).map_err(|e| match e {
            TaskError::Store(e) => MemoryError::Store(e),
            other => MemoryError::Corrupt(other.to_string()),
        })?;
        let hub = Arc::new(Hub::open(
            home.join(USER_CONFIG),
            store.clone(),
            tasks.bus().clone(),
        )?);
        let memory = Memory::open(store, progress)?;
        let watches = Watches::new(tasks.bus().clone());
        Ok(Core {
            memory,
            tasks,
            hub,
            watches,
        })
    }

    /// The bus every service of this core publishes on.
    pub fn bus(&self) -> &Bus {
        self.tasks.bus()
    }
}

type Opener = Box<dyn Fn() -> Result<Core, MemoryError> + Send + Sync>;

/// The core, opened on first use (and warmed up in the background by the caller), so a
/// session answers `initialize` at once whatever the size of the data dir. A failed open
/// (the data dir held by another process, say) is a tool error, and is tried again on the
/// next call.
pub struct LazyCore {
    cell: tokio::sync::OnceCell<Arc<Core>>,
    open: Opener,
}

impl LazyCore {
    pub fn new(
        open: impl Fn() -> Result<Core, MemoryError> + Send + Sync + 'static,
    ) -> Arc<LazyCore> {
        Arc::new(LazyCore {
            cell: tokio::sync::OnceCell::new(),
            open: Box::new(open),
        })
    }

    /// A core that is already open (the daemon opens it before it listens).
    pub fn ready(core: Arc<Core>) -> Arc<LazyCore> {
        Arc::new(LazyCore {
            cell: tokio::sync::OnceCell::new_with(Some(core)),
            open: Box::new(|| Err(MemoryError::Corrupt("the core was given open".into()))),
        })
    }

    /// The core if it is open, without opening it.
    pub fn opened(&self) -> Option<Arc<Core>> {
        self.cell.get().cloned()
    }

    /// The open core, opening it first if needed.
    pub async fn get(self: &Arc<Self>) -> Result<Arc<Core>, MemoryError> {
        let this = self.clone();
        self.cell
            .get_or_try_init(|| async move {
                match tokio::task::spawn_blocking(move || (this.open)()).await {
                    Ok(opened) => opened.map(Arc::new),
                    Err(e) => Err(MemoryError::Corrupt(format!(
                        "opening the memory failed: {e}"
                    ))),
                }
            })
            .await
            .cloned()
    }
}
