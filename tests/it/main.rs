//! All integration tests, in one binary (one link step, shared helpers).

mod memory_core;
mod util;
