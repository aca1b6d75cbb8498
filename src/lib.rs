//! Tandem: one sidecar between a coding agent and the editor.
//!
//! The core (`config`, `store`, `memory`) is plain Rust with typed requests, results and
//! errors; it does no stdout I/O and knows no protocol. The faces translate: [`mcp`] serves
//! the core to agents; the `cli` lives in the binary. See ARCHITECTURE.md.

pub mod calls;
pub mod config;
pub mod core;
pub mod daemon;
pub mod events;
pub mod hub;
pub mod lsp;
pub mod mcp;
pub mod memory;
pub mod render;
pub mod store;
pub mod tasks;
pub mod watch;

/// The error object every tool answers with (spec 003's format):
/// `{"error": {"code", "message", "details"}}`.
pub fn error_object(code: &str, message: &str, details: serde_json::Value) -> serde_json::Value {
    serde_json::json!({ "error": { "code": code, "message": message, "details": details } })
}
