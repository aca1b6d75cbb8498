//! Tandem's faces: the protocols that serve the core (`tandem-core`) to agents and editors.
//!
//! [`mcp`] serves the core's calls to agents over stdio, the daemon's socket, and
//! Streamable HTTP through [`http`] (with [`tokens`]). [`lsp`] serves editors. [`daemon`]
//! is the long-running process several agents and editors share. [`render`] writes what
//! people read; the CLI lives in the binary. See ARCHITECTURE.md.
pub mod daemon;
#[doc(hidden)]
pub mod fuzzing;
pub mod http;
pub mod lsp;
pub mod mcp;
pub mod render;
pub mod tokens;
