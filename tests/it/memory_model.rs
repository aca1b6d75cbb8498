//! Where the embedding model comes from, through the real binary: `tandem memory model` and
//! `tandem memory model pull` against a local HTTP server laid out as the Hugging Face hub
//! (`<owner>/<name>/resolve/main/<file>`), named by `HF_ENDPOINT`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use serde_json::Value;
use tandem_search::embeddings::Embedder;

use crate::util::{TestHome, succeeds, succeeds_json};

/// The model `scripts/test` builds (`TANDEM_TEST_MODEL`).
fn test_model() -> PathBuf {
    let Some(dir) = std::env::var_os("TANDEM_TEST_MODEL") else {
        panic!(
            "TANDEM_TEST_MODEL is not set: run scripts/test (it builds the test model into \
             .test-deps/model), or .test-deps/venv/bin/python scripts/make-test-model DIR \
             and set TANDEM_TEST_MODEL=DIR"
        );
    };
    PathBuf::from(dir)
}

const FILES: [&str; 3] = ["config.json", "tokenizer.json", "model.safetensors"];

/// Python's `http.server` over a temp dir laid out as the hub. Ids whose owner is `lying`
/// have their `.safetensors` sent with the full Content-Length but only half the bytes.
/// Stopped (killed and reaped) when dropped.
struct FakeHub {
    child: Child,
    root: tempfile::TempDir,
    endpoint: String,
}

const SERVER: &str = r#"
import functools, http.server, sys

class Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path.startswith("/lying/") and self.path.endswith(".safetensors"):
            with open(self.translate_path(self.path), "rb") as f:
                data = f.read()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        super().do_GET()

server = http.server.ThreadingHTTPServer(
    ("127.0.0.1", 0), functools.partial(Handler, directory=sys.argv[1])
)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;

impl FakeHub {
    fn start() -> FakeHub {
        let root = tempfile::Builder::new()
            .prefix("tandem-fake-hub")
            .tempdir()
            .unwrap();
        let mut child = Command::new("python3")
            .args(["-c", SERVER])
            .arg(root.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let mut port = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut port)
            .unwrap();
        let port: u16 = port
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("the fake hub printed {port:?}, not its port"));
        FakeHub {
            child,
            root,
            endpoint: format!("http://127.0.0.1:{port}"),
        }
    }

    /// Serves `files` (name, source file) as the model `id`.
    fn serve(&self, id: &str, files: &[(&str, &Path)]) {
        let dir = self.root.path().join(id).join("resolve/main");
        std::fs::create_dir_all(&dir).unwrap();
        for (name, source) in files {
            std::os::unix::fs::symlink(source, dir.join(name)).unwrap();
        }
    }

    /// Serves the three files of the model folder `model` as `id`.
    fn serve_model(&self, id: &str, model: &Path) {
        let files: Vec<(&str, PathBuf)> = FILES.iter().map(|f| (*f, model.join(f))).collect();
        let files: Vec<(&str, &Path)> = files.iter().map(|(f, p)| (*f, p.as_path())).collect();
        self.serve(id, &files);
    }
}

impl Drop for FakeHub {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `tandem ARGS` with `env`; the model setting comes from the config file unless `env`
/// sets it (the test home sets `off`).
fn command(home: &TestHome, env: &[(&str, &str)], args: &[&str]) -> std::process::Command {
    let mut cmd = home.std_command();
    cmd.env_remove("TANDEM_EMBEDDING_MODEL")
        .envs(env.iter().copied())
        .args(args);
    cmd
}

fn tandem(home: &TestHome, env: &[(&str, &str)], args: &[&str]) -> Output {
    command(home, env, args).output().unwrap()
}

/// A command that must succeed: its stdout.
fn ok(home: &TestHome, env: &[(&str, &str)], args: &[&str]) -> String {
    succeeds(command(home, env, args))
}

fn json(home: &TestHome, env: &[(&str, &str)], args: &[&str]) -> Value {
    succeeds_json(command(home, env, args))
}

/// A command that must fail (exit 1, nothing on stdout): its stderr.
fn fails(home: &TestHome, env: &[(&str, &str)], args: &[&str]) -> String {
    let out = tandem(home, env, args);
    assert_eq!(
        out.status.code(),
        Some(1),
        "tandem {args:?} should fail; stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8(out.stderr).unwrap()
}

/// What the data dir's models folder holds, sorted.
fn models(home: &TestHome) -> Vec<String> {
    let mut names: Vec<String> = match std::fs::read_dir(home.tandem_home().join("models")) {
        Ok(entries) => entries
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    };
    names.sort();
    names
}

#[test]
fn pull_downloads_the_model_once_and_it_loads() {
    let model = test_model();
    let hub = FakeHub::start();
    hub.serve_model("some/model", &model);
    let home = TestHome::new();
    let env = [("HF_ENDPOINT", hub.endpoint.as_str())];
    let folder = home.tandem_home().join("models/some--model");

    let out = ok(&home, &env, &["memory", "model", "pull", "some/model"]);
    assert_eq!(
        out,
        format!(
            "downloaded some/model from {} into {}\n",
            hub.endpoint,
            folder.display()
        )
    );
    for file in FILES {
        assert_eq!(
            std::fs::read(folder.join(file)).unwrap(),
            std::fs::read(model.join(file)).unwrap(),
            "{file}"
        );
    }
    let want = Embedder::load(&model).unwrap();
    let got = Embedder::load(&folder).unwrap();
    assert_eq!(got.dimensions(), want.dimensions());
    assert_eq!(
        got.embed("a date parsing bug"),
        want.embed("a date parsing bug")
    );
    assert_eq!(models(&home), ["some--model"], "no temp folder is left");

    let again = ok(&home, &env, &["memory", "model", "pull", "some/model"]);
    assert_eq!(
        again,
        format!(
            "some/model is already downloaded in {} (--force downloads it again)\n",
            folder.display()
        )
    );
    let cached = json(&home, &env, &["memory", "model", "pull", "some/model"]);
    assert_eq!(cached["action"], "cached");
    assert_eq!(cached["folder"], folder.display().to_string());

    // --force replaces the folder with a fresh download.
    std::fs::write(folder.join("stray"), "x").unwrap();
    let forced = json(
        &home,
        &env,
        &["memory", "model", "pull", "--force", "some/model"],
    );
    assert_eq!(forced["action"], "downloaded");
    assert_eq!(forced["endpoint"], hub.endpoint);
    assert!(
        !folder.join("stray").exists(),
        "the old folder was replaced"
    );
    assert!(Embedder::load(&folder).is_ok());
    assert_eq!(models(&home), ["some--model"]);

    // The status of the model, configured by the variable.
    let env = [
        ("HF_ENDPOINT", hub.endpoint.as_str()),
        ("TANDEM_EMBEDDING_MODEL", "some/model"),
    ];
    let status = json(&home, &env, &["memory", "model"]);
    assert_eq!(
        status,
        serde_json::json!({
            "setting": "some/model",
            "kind": "hub",
            "source": "env",
            "folder": folder.display().to_string(),
            "endpoint": hub.endpoint,
            "downloaded": true,
            "loads": true,
            "dimensions": want.dimensions(),
            "vocabulary": want.vocabulary(),
        })
    );
    let text = ok(&home, &env, &["memory", "model", "status"]);
    assert_eq!(
        text,
        format!(
            "model       some/model (from TANDEM_EMBEDDING_MODEL)\n\
             folder      {}\n\
             downloaded  yes, from {}\n\
             dimensions  {}\n\
             vocabulary  {} tokens\n",
            folder.display(),
            hub.endpoint,
            want.dimensions(),
            want.vocabulary()
        )
    );
}

#[test]
fn an_unknown_model_or_a_failed_download_is_a_clear_error_and_leaves_nothing() {
    let hub = FakeHub::start();
    let home = TestHome::new();
    let env = [("HF_ENDPOINT", hub.endpoint.as_str())];

    let err = fails(&home, &env, &["memory", "model", "pull", "no/such"]);
    assert_eq!(
        err,
        format!(
            "tandem: Embedding model 'no/such' is not available: no model 'no/such' at {0} \
             (check the id): {0}/no/such/resolve/main/config.json (MODEL_NOT_AVAILABLE)\n",
            hub.endpoint
        )
    );
    assert_eq!(models(&home), Vec::<String>::new());

    // A model that lacks a file.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.json");
    std::fs::write(&config, "{}").unwrap();
    hub.serve("half/model", &[("config.json", &config)]);
    let err = fails(&home, &env, &["memory", "model", "pull", "half/model"]);
    assert!(
        err.contains(&format!(
            "the model 'half/model' at {} has no tokenizer.json",
            hub.endpoint
        )),
        "{err}"
    );
    assert_eq!(models(&home), Vec::<String>::new());

    // Nothing listens at the endpoint.
    let port = crate::util::free_port();
    let closed = format!("http://127.0.0.1:{port}");
    let err = fails(
        &home,
        &[("HF_ENDPOINT", &closed)],
        &["memory", "model", "pull", "some/model"],
    );
    assert!(
        err.contains(&format!(
            "downloading 'some/model' failed: cannot get {closed}/some/model/resolve/main/config.json: "
        )) && err.to_lowercase().contains("connect"),
        "{err}"
    );

    // Not an id at all.
    let err = fails(&home, &env, &["memory", "model", "pull", "potion-base-8M"]);
    assert!(
        err.contains("the command line: 'potion-base-8M' is not an embedding model setting"),
        "{err}"
    );
    assert_eq!(models(&home), Vec::<String>::new());
}

#[test]
fn a_truncated_download_is_no_model() {
    let model = test_model();
    let hub = FakeHub::start();
    let home = TestHome::new();
    let env = [("HF_ENDPOINT", hub.endpoint.as_str())];

    // The server says how long the file is and closes the connection half-way.
    hub.serve_model("lying/model", &model);
    let size = std::fs::metadata(model.join("model.safetensors"))
        .unwrap()
        .len();
    let err = fails(&home, &env, &["memory", "model", "pull", "lying/model"]);
    assert!(
        err.contains(&format!(
            "downloading 'lying/model' failed: {}/lying/model/resolve/main/model.safetensors \
             stopped after {} of {size} bytes",
            hub.endpoint,
            size / 2
        )) && err.ends_with("(MODEL_NOT_AVAILABLE)\n"),
        "{err}"
    );
    assert_eq!(models(&home), Vec::<String>::new());

    // The server sends a whole file that is not a whole model.
    let dir = tempfile::tempdir().unwrap();
    let short = dir.path().join("model.safetensors");
    let bytes = std::fs::read(model.join("model.safetensors")).unwrap();
    std::fs::write(&short, &bytes[..bytes.len() - 1000]).unwrap();
    let (config, tokenizer) = (model.join("config.json"), model.join("tokenizer.json"));
    hub.serve(
        "short/model",
        &[
            ("config.json", &config),
            ("tokenizer.json", &tokenizer),
            ("model.safetensors", &short),
        ],
    );
    let err = fails(&home, &env, &["memory", "model", "pull", "short/model"]);
    assert!(
        err.contains("the download of 'short/model' is not a usable model: ")
            && err.contains("model.safetensors"),
        "{err}"
    );
    assert_eq!(models(&home), Vec::<String>::new());
    let status = json(
        &home,
        &[("TANDEM_EMBEDDING_MODEL", "short/model")],
        &["memory", "model"],
    );
    assert_eq!(status["downloaded"], false);
}

#[test]
fn off_turns_embeddings_off() {
    let home = TestHome::new();
    let off = [("TANDEM_EMBEDDING_MODEL", "off")];
    let err = fails(&home, &off, &["memory", "model", "pull"]);
    assert!(
        err.starts_with("tandem: Embeddings are turned off")
            && err.ends_with("(EMBEDDINGS_DISABLED)\n"),
        "{err}"
    );
    let status = json(&home, &off, &["memory", "model"]);
    assert_eq!(
        status,
        serde_json::json!({"setting": "off", "kind": "off", "source": "env"})
    );
    assert_eq!(
        ok(&home, &off, &["memory", "model"]),
        "model       off (from TANDEM_EMBEDDING_MODEL)\n\
         embeddings are turned off: search is lexical only\n"
    );

    // Off in the config file; an ID given still downloads (here: from nowhere).
    let file = home.tandem_home().join("config.json");
    std::fs::create_dir_all(home.tandem_home()).unwrap();
    std::fs::write(&file, r#"{"memory": {"embeddings": {"model": "OFF"}}}"#).unwrap();
    let err = fails(&home, &[], &["memory", "model", "pull"]);
    assert!(err.ends_with("(EMBEDDINGS_DISABLED)\n"), "{err}");
    let status = json(&home, &[], &["memory", "model"]);
    assert_eq!(status["source"], "config_file");
    assert_eq!(status["config_file"], file.display().to_string());
    assert_eq!(status["kind"], "off");
}

#[test]
fn the_config_file_is_honoured_and_the_variable_wins() {
    let model = test_model();
    let hub = FakeHub::start();
    hub.serve_model("team/model", &model);
    let home = TestHome::new();
    let env = [("HF_ENDPOINT", hub.endpoint.as_str())];

    // Nothing set: the default, not downloaded (and not looked for on the network).
    let status = json(&home, &env, &["memory", "model"]);
    assert_eq!(status["setting"], "minishlab/potion-base-8M");
    assert_eq!(status["source"], "default");
    assert_eq!(status["downloaded"], false);
    assert_eq!(status.get("loads"), None);
    let text = ok(&home, &[], &["memory", "model"]);
    assert!(
        text.starts_with("model       minishlab/potion-base-8M (from the default)\n")
            && text.contains(
                "downloaded  no: `tandem memory model pull` downloads it from https://huggingface.co"
            ),
        "{text}"
    );

    let file = home.tandem_home().join("config.json");
    std::fs::create_dir_all(home.tandem_home()).unwrap();
    std::fs::write(
        &file,
        r#"{"mcpServers": {}, "memory": {"embeddings": {"model": "team/model"}}}"#,
    )
    .unwrap();
    let pulled = json(&home, &env, &["memory", "model", "pull"]);
    assert_eq!(pulled["model"], "team/model");
    assert_eq!(pulled["action"], "downloaded");
    let status = json(&home, &env, &["memory", "model"]);
    assert_eq!(status["setting"], "team/model");
    assert_eq!(status["source"], "config_file");
    assert_eq!(status["config_file"], file.display().to_string());
    assert_eq!(status["loads"], true);

    // The hub reads the same file without complaint.
    let out = home
        .std_command()
        .args(["servers", "--json"])
        .current_dir(home.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let servers: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(servers["errors"], serde_json::json!([]), "{servers}");

    // The variable wins.
    let env = [
        ("HF_ENDPOINT", hub.endpoint.as_str()),
        ("TANDEM_EMBEDDING_MODEL", "other/model"),
    ];
    let status = json(&home, &env, &["memory", "model"]);
    assert_eq!(status["setting"], "other/model");
    assert_eq!(status["source"], "env");
    assert_eq!(status["downloaded"], false);
    let err = fails(&home, &env, &["memory", "model", "pull"]);
    assert!(err.contains("no model 'other/model'"), "{err}");

    // A broken setting names the file and the key.
    std::fs::write(&file, r#"{"memory": {"embeddings": {"model": 8}}}"#).unwrap();
    let err = fails(&home, &[], &["memory", "model"]);
    assert!(
        err.contains(&format!(
            "{}: `memory.embeddings.model` must be a string",
            file.display()
        )) && err.contains("found a number"),
        "{err}"
    );
    std::fs::write(&file, r#"{"memory": {"embeddings": {"model": "potion"}}}"#).unwrap();
    let err = fails(&home, &[], &["memory", "model", "pull"]);
    assert!(
        err.contains(&format!(
            "memory.embeddings.model in {}: 'potion' is not an embedding model setting",
            file.display()
        )),
        "{err}"
    );
}

#[test]
fn a_folder_setting_needs_no_download() {
    let model = test_model();
    let want = Embedder::load(&model).unwrap();
    let home = TestHome::new();
    let path = model.display().to_string();
    let env = [("TANDEM_EMBEDDING_MODEL", path.as_str())];
    let status = json(&home, &env, &["memory", "model"]);
    assert_eq!(
        status,
        serde_json::json!({
            "setting": path,
            "kind": "folder",
            "source": "env",
            "folder": path,
            "loads": true,
            "dimensions": want.dimensions(),
            "vocabulary": want.vocabulary(),
        })
    );
    assert_eq!(
        ok(&home, &env, &["memory", "model", "pull"]),
        format!(
            "the model is the folder {path} (from TANDEM_EMBEDDING_MODEL): nothing to download\n"
        )
    );
    assert_eq!(models(&home), Vec::<String>::new());

    // A folder relative to the data dir, in the config file.
    std::fs::create_dir_all(home.tandem_home()).unwrap();
    std::os::unix::fs::symlink(&model, home.tandem_home().join("my-model")).unwrap();
    std::fs::write(
        home.tandem_home().join("config.json"),
        r#"{"memory": {"embeddings": {"model": "./my-model"}}}"#,
    )
    .unwrap();
    let status = json(&home, &[], &["memory", "model"]);
    assert_eq!(
        status["folder"],
        home.tandem_home().join("my-model").display().to_string()
    );
    assert_eq!(status["loads"], true);

    // A folder that is not there, or holds no model.
    let missing = home.path().join("nowhere").display().to_string();
    let env = [("TANDEM_EMBEDDING_MODEL", missing.as_str())];
    let err = fails(&home, &env, &["memory", "model", "pull"]);
    assert!(
        err.contains(&format!(
            "the embedding model folder {missing} (TANDEM_EMBEDDING_MODEL) does not exist"
        )),
        "{err}"
    );
    let status = json(&home, &env, &["memory", "model"]);
    assert_eq!(status["loads"], false);
    assert_eq!(
        status["error"],
        format!("embedding model folder {missing} does not exist")
    );
    let empty = home.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let text = ok(
        &home,
        &[("TANDEM_EMBEDDING_MODEL", &empty.display().to_string())],
        &["memory", "model"],
    );
    assert!(
        text.ends_with(&format!(
            "not usable  embedding model folder {} has no config.json\n",
            empty.display()
        )),
        "{text}"
    );
}
