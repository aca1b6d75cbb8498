//! The core services one data dir holds, opened together.

use std::path::Path;
use std::sync::Arc;

use crate::config::Config;
use crate::events::Bus;
use crate::hub::Hub;
use crate::memory::model_source::{self, PullProgress};
use crate::memory::{Memory, MemoryError, Progress};
use crate::store::{Store, StoreError};
use crate::tasks::{TaskError, Tasks};
use crate::user_config;
use crate::watch::Watches;

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
    pub memory: Arc<Memory>,
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
            user_config::path(home),
            store.clone(),
            tasks.bus().clone(),
        )?);
        let memory = Arc::new(Memory::open(store, progress)?);
        let watches = Watches::new(tasks.bus().clone());
        Ok(Core {
            memory,
            tasks,
            hub,
            watches,
        })
    }

    /// Finds, fetches if it must, and loads the embedding model `config` names, in the
    /// background (a serving process calls this once the core is open): searches are BM25
    /// alone until it is ready, and entries get their vectors once it is.
    pub fn start_embeddings(&self, config: &Config) {
        let model = match model_source::resolve(config) {
            Ok(resolved) => resolved.setting.to_string(),
            Err(e) => {
                tracing::warn!("embedding model setting: {e}");
                self.memory
                    .start_embeddings(String::new(), move || Err(e.into()));
                return;
            }
        };
        let config = config.clone();
        self.memory.start_embeddings(model, move || {
            // A download says how far it is in the log, every tenth of a file.
            let logged = std::cell::Cell::new((usize::MAX, 0u64));
            let progress = |p: PullProgress| {
                let Some(total) = p.total.filter(|t| *t > 0) else {
                    return;
                };
                let tenth = p.done * 10 / total;
                if logged.get() != (p.index, tenth) {
                    logged.set((p.index, tenth));
                    tracing::info!("downloading {}: {}%", p.file, tenth * 10);
                }
            };
            Ok(model_source::locate_or_pull(&config, &progress)?)
        });
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
