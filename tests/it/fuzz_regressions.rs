//! The fuzz targets' inputs, replayed on stable through the same entry points
//! (`tandem::fuzzing`): every seed of `fuzz/corpus/<target>/` and every input the fuzzer
//! found of `fuzz/regressions/<target>/` (a crash or hang, fixed since). A new regression is
//! just a file there.

use std::panic::AssertUnwindSafe;
use std::path::PathBuf;

use tandem::fuzzing::{self, Harness};

use crate::util::TestHome;

/// The inputs of `target`: its seeds and its regressions, sorted.
fn inputs(target: &str) -> Vec<PathBuf> {
    let fuzz = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut files: Vec<PathBuf> = ["corpus", "regressions"]
        .iter()
        .filter_map(|kind| std::fs::read_dir(fuzz.join(kind).join(target)).ok())
        .flatten()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    files
}

/// Runs every input of `target` through `run`; a failure names the input.
fn replay(target: &str, mut run: impl FnMut(&[u8])) {
    let files = inputs(target);
    assert!(!files.is_empty(), "no inputs for the {target} target");
    for file in files {
        let data = std::fs::read(&file).unwrap();
        if std::panic::catch_unwind(AssertUnwindSafe(|| run(&data))).is_err() {
            panic!("fuzz target {target} fails on {}", file.display());
        }
    }
}

/// `replay` on a harness (a core in a data dir of the test's own).
fn replay_on_harness(target: &str, run: fn(&Harness, &[u8])) {
    let home = TestHome::new();
    let harness = Harness::open(home.path());
    replay(target, |data| run(&harness, data));
}

#[test]
fn fuzz_inputs_of_the_mcp_face() {
    replay_on_harness("mcp", fuzzing::mcp);
}

#[test]
fn fuzz_inputs_of_the_lsp_face() {
    replay_on_harness("lsp", fuzzing::lsp);
}

#[test]
fn fuzz_inputs_of_the_prompt_command_grammar() {
    replay("command", fuzzing::command);
}

#[test]
fn fuzz_inputs_of_the_json_scanner() {
    replay("scan", fuzzing::scan);
}

#[test]
fn fuzz_inputs_of_the_config_files() {
    replay_on_harness("config", fuzzing::config);
}

#[test]
fn fuzz_inputs_of_every_call() {
    replay_on_harness("calls", fuzzing::calls);
}
