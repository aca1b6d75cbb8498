//! The core services one data dir holds, opened together.

use std::path::Path;
use std::sync::Arc;

use crate::events::Bus;
use crate::hub::Hub;
use crate::memory::{Memory, MemoryError, Progress};
use crate::store::{Store, StoreError};
use crate::tasks::{TaskError, Tasks};
use crate::watch::Watches;

/// The user's config file (downstream MCP servers, injection settings), in the data dir.
pub const USER_CONFIG: &str = "config.json";

/// Why the core could not open: which part failed.
#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    /// The data dir cannot be opened (held by another process, unreadable).
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("opening the memory failed: {0}")]
    Memory(#[from] MemoryError),
    #[error("opening task tracking failed: {0}")]
    Tasks(#[from] TaskError),
    /// The opening thread panicked (logged).
    #[error("opening the data dir failed unexpectedly: {0}")]
    Panicked(String),
}

impl CoreError {
    /// The error code: the failing service's, else `INTERNAL_ERROR`.
    pub fn code(&self) -> &'static str {
        match self {
            CoreError::Memory(e) => e.code(),
            CoreError::Tasks(e) => e.code(),
            CoreError::Store(_) | CoreError::Panicked(_) => "INTERNAL_ERROR",
        }
    }
}

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
    pub fn open(home: &Path, progress: &dyn Progress) -> Result<Core, CoreError> {
        let store = Arc::new(Store::open(home)?);
        let tasks = Tasks::open(store.clone())?;
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

type Opener = Box<dyn Fn() -> Result<Core, CoreError> + Send + Sync>;

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
        open: impl Fn() -> Result<Core, CoreError> + Send + Sync + 'static,
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
            open: Box::new(|| unreachable!("a ready core is never opened")),
        })
    }

    /// The core if it is open, without opening it.
    pub fn opened(&self) -> Option<Arc<Core>> {
        self.cell.get().cloned()
    }

    /// The open core, opening it first if needed.
    pub async fn get(self: &Arc<Self>) -> Result<Arc<Core>, CoreError> {
        let this = self.clone();
        self.cell
            .get_or_try_init(|| async move {
                match tokio::task::spawn_blocking(move || (this.open)()).await {
                    Ok(opened) => opened.map(Arc::new),
                    Err(e) => {
                        tracing::error!("opening the data dir panicked: {e}");
                        Err(CoreError::Panicked(e.to_string()))
                    }
                }
            })
            .await
            .cloned()
    }
}
