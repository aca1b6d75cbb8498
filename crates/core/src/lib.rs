//! Tandem's core: the services one data dir holds, and the calls every face serves.
//!
//! The core is plain Rust with typed requests, results and errors. It writes nothing to
//! stdout and knows no protocol: the faces (MCP, LSP, HTTP, the daemon and the CLI, in the
//! `tandem` crate) translate to and from it.
//!
//! - [`store`] is the sled database of the data dir, with its format version, its lock and
//!   its compaction ([`codec`] compresses records, [`pack`] holds them after a compaction).
//! - [`memory`] is the knowledge base: entries, links, suggestions, search, import and
//!   export.
//! - [`tasks`] is task tracking: workflows, tasks and their git snapshots.
//! - [`learn`] is where the two meet: a completed task's decisions become suggested
//!   entries.
//! - [`hub`] connects to the user's other MCP servers: their prompts, the injection and
//!   the gateway.
//! - [`calls`] is the table of operations, and [`calls::CallError`] the error (and the
//!   spec's error object) every face answers with.
//! - [`core`] opens them together; [`events`] carries their changes to the editors;
//!   [`watch`] follows a workspace's files.
//!
//! See ARCHITECTURE.md for the boundaries and invariants.
pub mod calls;
pub mod codec;
pub mod config;
pub mod core;
pub mod events;
pub mod guarded_file;
pub mod hub;
pub mod learn;
pub mod limits;
pub mod log_file;
pub mod log_rate;
pub mod memory;
pub mod pack;
pub mod store;
pub mod tasks;
pub mod user_config;
pub mod watch;
