//! All integration tests, in one binary (one link step, shared helpers).

mod cli;
mod cli_daemon;
mod crash;
mod daemon;
mod editor;
mod fixture;
mod fuzz_regressions;
mod gateway;
mod http;
mod hub;
mod mcp_stdio;
mod memory_core;
mod memory_embeddings;
mod memory_learns_from_tasks;
mod memory_model;
mod memory_suggestions;
mod nvim;
mod reference_servers;
mod servers_import;
mod tasks_core;
mod tasks_mcp;
mod tool_schemas;
mod util;
mod watch;
