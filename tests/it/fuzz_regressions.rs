//! The fuzz targets' inputs, replayed on stable through the same entry points
//! (`tandem::fuzzing`): every seed of `fuzz/corpus/<target>/` and every input the fuzzer
//! found of `fuzz/regressions/<target>/` (a crash or hang, fixed since). A new regression is
//! just a file there.

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};

use serde_json::Value;

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

/// Runs every input of `target` through `run`; a failure names the input. Answers what
/// `run` answered for each input, by file name.
fn replay<T>(target: &str, mut run: impl FnMut(&[u8]) -> T) -> BTreeMap<String, T> {
    let files = inputs(target);
    assert!(!files.is_empty(), "no inputs for the {target} target");
    let mut answers = BTreeMap::new();
    for file in files {
        let data = std::fs::read(&file).unwrap();
        match std::panic::catch_unwind(AssertUnwindSafe(|| run(&data))) {
            Ok(answer) => answers.insert(file_name(&file), answer),
            Err(_) => panic!("fuzz target {target} fails on {}", file.display()),
        };
    }
    answers
}

fn file_name(path: &Path) -> String {
    path.file_name().unwrap().to_string_lossy().into_owned()
}

/// `replay` on a harness (a core in a data dir of the test's own).
fn replay_on_harness<T>(target: &str, run: fn(&Harness, &[u8]) -> T) -> BTreeMap<String, T> {
    let home = TestHome::new();
    let harness = Harness::open(home.path());
    replay(target, |data| run(&harness, data))
}

/// The messages a face wrote: JSON lines, or `Content-Length` frames.
fn messages(output: &[u8]) -> Vec<Value> {
    let text = String::from_utf8_lossy(output);
    let json = if text.starts_with("Content-Length") {
        // Each body runs from its header's blank line to the next header.
        let bodies = text.split("\r\n\r\n").skip(1);
        bodies
            .map(|b| b.split("Content-Length:").next().unwrap())
            .collect::<Vec<_>>()
            .join("\n")
    } else {
        text.into_owned()
    };
    serde_json::Deserializer::from_str(&json)
        .into_iter()
        .map(Result::unwrap)
        .collect()
}

/// The answer to request `id` among `messages`.
fn answer(messages: &[Value], id: i64) -> &Value {
    messages
        .iter()
        .find(|m| m["id"] == id)
        .unwrap_or_else(|| panic!("no answer to request {id} in {messages:?}"))
}

#[test]
fn fuzz_inputs_of_the_mcp_face() {
    let written = replay_on_harness("mcp", fuzzing::mcp);
    // The replay drives the real face: a seed's session is answered.
    let listed = messages(&written["list-tools"]);
    assert!(
        answer(&listed, 2)["result"]["tools"]
            .as_array()
            .unwrap()
            .len()
            > 5
    );
    let garbage = messages(&written["garbage-lines"]);
    assert!(
        garbage.iter().any(|m| m["error"]["code"] == -32700),
        "{garbage:?}"
    );
    assert!(answer(&garbage, 2)["result"]["structuredContent"]["guide"].is_string());
}

#[test]
fn fuzz_inputs_of_the_lsp_face() {
    let written = replay_on_harness("lsp", fuzzing::lsp);
    // The replay drives the real face and its handlers: every request of a seed's session
    // is answered, past `initialize` by the handlers (none refused as not initialized).
    let commands = messages(&written["commands"]);
    for id in 1..=12 {
        assert_ne!(
            answer(&commands, id)["error"]["code"],
            -32002,
            "request {id}"
        );
    }
    assert!(answer(&commands, 2)["result"].is_object(), "tandem.status");
    assert!(
        answer(&commands, 3)["result"]["id"].is_string(),
        "tandem.memory.add"
    );
    assert!(
        answer(&commands, 11)["error"].is_object(),
        "an unknown command"
    );
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
