//! All integration tests, in one binary (one link step, shared helpers).

mod bad_input;
mod cli;
mod cli_daemon;
mod crash;
mod daemon;
mod downstream_faults;
mod editor;
mod faults;
mod fixture;
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
