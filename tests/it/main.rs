//! All integration tests, in one binary (one link step, shared helpers).

mod cli;
mod cli_daemon;
mod crash;
mod daemon;
mod editor;
mod fixture;
mod hub;
mod mcp_stdio;
mod memory_core;
mod nvim;
mod reference_servers;
mod tasks_core;
mod tasks_mcp;
mod util;
mod watch;
