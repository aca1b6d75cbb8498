//! Tandem: one sidecar between a coding agent and the editor.
//!
//! The core (`config`, `store`, `memory`, `tasks`) is plain Rust with typed requests,
//! results and errors; it does no stdout I/O and knows no protocol. [`calls`] is the table of
//! its operations, and [`calls::CallError`] the error (and the spec's error object) every
//! face answers with. The faces translate: [`mcp`] serves the core to agents (over stdio, the
//! daemon's socket, and Streamable HTTP through [`http`], with [`tokens`]), [`lsp`] to
//! editors, [`render`] writes what people read; the `cli` lives in the binary. See
//! ARCHITECTURE.md.
pub mod calls;
pub mod codec;
pub mod config;
pub mod core;
pub mod daemon;
pub mod events;
#[doc(hidden)]
pub mod fuzzing;
pub mod guarded_file;
pub mod http;
pub mod hub;
pub mod learn;
pub mod limits;
pub mod log_file;
pub mod log_rate;
pub mod lsp;
pub mod mcp;
pub mod memory;
pub mod pack;
pub mod render;
pub mod store;
pub mod tasks;
pub mod tokens;
pub mod user_config;
pub mod watch;
