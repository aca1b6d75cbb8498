//! Fuzz target `scan`: see `tandem::fuzzing::scan`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tandem::fuzzing::scan(data));
