//! Fuzz target `command`: see `tandem::fuzzing::command`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tandem::fuzzing::command(data));
