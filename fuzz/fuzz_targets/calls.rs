//! Fuzz target `calls`: see `tandem::fuzzing::calls`, on one harness (a core in a data dir
//! under `$TMPDIR`) for the whole run.
#![no_main]

use std::sync::LazyLock;

use tandem::fuzzing::Harness;

static HARNESS: LazyLock<Harness> = LazyLock::new(Harness::in_temp_dir);

libfuzzer_sys::fuzz_target!(|data: &[u8]| tandem::fuzzing::calls(&HARNESS, data));
