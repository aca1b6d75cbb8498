//! One broadcast bus of what changed in the core. Services publish after the change is
//! durable; faces subscribe (the LSP face turns task events into diagnostics, code lenses
//! and progress; file watches report changes on disk). Publishing never blocks and never fails: with no subscriber an event is
//! simply dropped, and a subscriber that falls behind learns it lagged and resynchronises.

use std::path::PathBuf;

use tokio::sync::broadcast;
use ulid::Ulid;

/// How many events a slow subscriber may fall behind before it is told it lagged.
const CAPACITY: usize = 1024;

#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// Something happened to a task of a workspace.
    Task {
        workspace: PathBuf,
        task_id: Ulid,
        change: TaskChange,
    },
    /// Something happened to a downstream server of a workspace (`server` is empty for a
    /// change of the config as a whole).
    Hub {
        workspace: PathBuf,
        server: String,
        change: HubChange,
    },
    /// Files changed on disk in a watched tree (see [`crate::watch`]).
    Files { root: PathBuf, change: FilesChange },
    /// A sign-in to a remote server of a workspace started: it waits for the user to approve
    /// at `url` (editors offer to open it).
    SignIn {
        workspace: PathBuf,
        server: String,
        url: String,
    },
    /// A downstream server asks the user a question that no agent can take: editors of its
    /// workspace that show forms show it (see [`crate::hub::questions`]).
    Question(std::sync::Arc<crate::hub::questions::Question>),
    /// A downstream server runs a tool call as a task (the MCP tasks extension) and Tandem
    /// follows it: editors show it as work-done progress.
    DownstreamTask {
        workspace: PathBuf,
        task: DownstreamTask,
    },
}

/// Where a downstream task is, as Tandem last saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DownstreamTask {
    /// Tandem's id of the task (`server:ULID`), the one its agent sees.
    pub id: String,
    pub server: String,
    pub tool: String,
    pub phase: TaskPhase,
    /// The task's status as the extension spells it (`working`, `input_required`,
    /// `completed`, `failed`, `cancelled`), or `unfollowed` when Tandem stopped following
    /// it before its end.
    pub status: String,
    /// The server's status message, cut and made printable.
    pub message: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskPhase {
    /// Tandem got the task from the server.
    Started,
    /// Its status or status message changed.
    Changed,
    /// It ended, or Tandem stopped following it.
    Ended,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FilesChange {
    /// These files (absolute paths) were written, created or removed.
    Paths(Vec<PathBuf>),
    /// Something the paths cannot say changed: recompute everything.
    Rescan,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HubChange {
    /// The config files were (re)loaded.
    Config,
    /// A server's state changed (started, ready, crashed, stopped).
    Status,
    Prompts,
    Tools,
    Resources,
}

#[derive(Debug, Clone, PartialEq)]
pub enum TaskChange {
    Started,
    Decision,
    Issue {
        requires_human_review: bool,
    },
    Milestone {
        progress: Option<f64>,
        message: String,
    },
    Completed,
}

/// The sending side; cheap to clone.
#[derive(Debug, Clone)]
pub struct Bus(broadcast::Sender<Event>);

impl Default for Bus {
    fn default() -> Bus {
        Bus(broadcast::channel(CAPACITY).0)
    }
}

impl Bus {
    pub fn publish(&self, event: Event) {
        // An error only means nobody listens.
        let _ = self.0.send(event);
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.0.subscribe()
    }
}
