//! Static embeddings in the model2vec format: a tokenizer and one table of token vectors.
//! A text's vector is the mean of its tokens' rows (unknown tokens skipped), scaled to unit
//! length, so the cosine of two texts is their dot product.
//!
//! A model is a folder holding `config.json`, `tokenizer.json` and `model.safetensors` (an
//! `embeddings` tensor, f32, f16 or int8, `[vocabulary, dimensions]`, with optional
//! per-token `weights` and a token-to-row `mapping`), as model2vec writes it and
//! `model2vec-rs` reads it. [`Embedder::load`] reads the files itself and checks them
//! before it hands them to `model2vec-rs`, so that a broken model is an [`EmbedError`] that
//! names the file and what is wrong with it, never a panic at the first text.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use model2vec_rs::model::StaticModel;
use safetensors::SafeTensors;
use safetensors::tensor::{Dtype, TensorView};
use tokenizers::Tokenizer;

/// The model's settings; only its presence and shape are checked: Tandem's vectors are
/// always unit length, whatever its `normalize` says.
pub const CONFIG_FILE: &str = "config.json";
/// The tokenizer, in the `tokenizers` crate's JSON format.
pub const TOKENIZER_FILE: &str = "tokenizer.json";
/// The tensors.
pub const MODEL_FILE: &str = "model.safetensors";

/// The tensor of token vectors, one row per token (or per mapped row).
const EMBEDDINGS_TENSOR: &str = "embeddings";
/// Optional per-token scale of the row (model2vec's frequency weighting, kept apart).
const WEIGHTS_TENSOR: &str = "weights";
/// Optional token id → row index (a vocabulary sharing rows).
const MAPPING_TENSOR: &str = "mapping";

/// Why a model folder could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    #[error("embedding model folder {} does not exist", path.display())]
    MissingFolder { path: PathBuf },

    #[error("embedding model path {} is not a folder", path.display())]
    NotAFolder { path: PathBuf },

    #[error("embedding model folder {} has no {file}", folder.display())]
    MissingFile { folder: PathBuf, file: &'static str },

    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("{} is not a model2vec config (a JSON object): {reason}", path.display())]
    BadConfig { path: PathBuf, reason: String },

    #[error("{} is not a tokenizer: {reason}", path.display())]
    BadTokenizer { path: PathBuf, reason: String },

    #[error("{}: {reason}", path.display())]
    BadTensor { path: PathBuf, reason: String },

    #[error("{} does not fit {}: {reason}", path.display(), TOKENIZER_FILE)]
    VocabularyMismatch { path: PathBuf, reason: String },
}

/// A loaded static embedding model. Cloning shares it.
#[derive(Clone)]
pub struct Embedder {
    model: StaticModel,
    /// Rows of the embedding table.
    rows: usize,
    /// A hash of the model's tensors and tokenizer: vectors made by another model are not
    /// comparable with this one's.
    fingerprint: u64,
    /// Tokens the tokenizer knows.
    vocabulary: usize,
}

impl fmt::Debug for Embedder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Embedder")
            .field("rows", &self.rows)
            .field("dimensions", &self.dimensions())
            .finish()
    }
}

impl Embedder {
    /// Loads the model in `folder`.
    pub fn load(folder: &Path) -> Result<Embedder, EmbedError> {
        let started = Instant::now();
        let files = ModelFiles::find(folder)?;

        let config_bytes = read(&files.config)?;
        match serde_json::from_slice::<serde_json::Value>(&config_bytes) {
            Ok(serde_json::Value::Object(_)) => {}
            Ok(other) => {
                return Err(EmbedError::BadConfig {
                    path: files.config,
                    reason: format!("found {}", json_kind(&other)),
                });
            }
            Err(e) => {
                return Err(EmbedError::BadConfig {
                    path: files.config,
                    reason: e.to_string(),
                });
            }
        }

        let tokenizer_bytes = read(&files.tokenizer)?;
        let tokenizer =
            Tokenizer::from_bytes(&tokenizer_bytes).map_err(|e| EmbedError::BadTokenizer {
                path: files.tokenizer.clone(),
                reason: e.to_string(),
            })?;

        let model_bytes = read(&files.model)?;
        let fingerprint = xxhash_rust::xxh3::xxh3_64(&model_bytes)
            ^ xxhash_rust::xxh3::xxh3_64(&tokenizer_bytes).rotate_left(1);
        let bad_tensor = |reason: String| EmbedError::BadTensor {
            path: files.model.clone(),
            reason,
        };
        let tensors = SafeTensors::deserialize(&model_bytes)
            .map_err(|e| bad_tensor(format!("not a safetensors file: {e}")))?;
        let table = tensors.tensor(EMBEDDINGS_TENSOR).map_err(|_| {
            bad_tensor(format!(
                "no `{EMBEDDINGS_TENSOR}` tensor (it has: {})",
                tensors
                    .names()
                    .into_iter()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
        let (rows, dimensions) = match *table.shape() {
            [rows, dimensions] if rows > 0 && dimensions > 0 => (rows, dimensions),
            ref shape => {
                return Err(bad_tensor(format!(
                    "the `{EMBEDDINGS_TENSOR}` tensor has shape {shape:?}, not [vocabulary, dimensions]"
                )));
            }
        };
        let weights = match tensors.tensor(WEIGHTS_TENSOR) {
            Ok(view) => Some(floats(&view, WEIGHTS_TENSOR).map_err(bad_tensor)?),
            Err(_) => None,
        };
        let mapping = match tensors.tensor(MAPPING_TENSOR) {
            Ok(view) => Some(indices(&view, MAPPING_TENSOR).map_err(bad_tensor)?),
            Err(_) => None,
        };

        // model2vec-rs indexes the table with every token id without a bounds check: a
        // tokenizer with more tokens than rows would panic on the first text that uses one.
        let mismatch = |reason: String| EmbedError::VocabularyMismatch {
            path: files.model.clone(),
            reason,
        };
        let max_id = tokenizer.get_vocab(true).into_values().max().unwrap_or(0) as usize;
        let vocabulary = tokenizer.get_vocab_size(true);
        match &mapping {
            None if max_id >= rows => {
                return Err(mismatch(format!(
                    "the tokenizer has token id {max_id}, the `{EMBEDDINGS_TENSOR}` tensor only {rows} rows"
                )));
            }
            Some(mapping) if max_id >= mapping.len() => {
                return Err(mismatch(format!(
                    "the tokenizer has token id {max_id}, the `{MAPPING_TENSOR}` tensor only {} entries",
                    mapping.len()
                )));
            }
            Some(mapping) => {
                if let Some(row) = mapping.iter().find(|&&row| row >= rows) {
                    return Err(bad_tensor(format!(
                        "the `{MAPPING_TENSOR}` tensor names row {row}, the `{EMBEDDINGS_TENSOR}` tensor has {rows}"
                    )));
                }
            }
            None => {}
        }

        let built = match table.dtype() {
            Dtype::I8 => {
                let table = table.data().iter().map(|&b| b as i8).collect();
                StaticModel::from_owned_i8(
                    tokenizer, table, rows, dimensions, true, weights, mapping,
                )
            }
            Dtype::F32 | Dtype::F16 => {
                let table = floats(&table, EMBEDDINGS_TENSOR).map_err(bad_tensor)?;
                StaticModel::from_owned(tokenizer, table, rows, dimensions, true, weights, mapping)
            }
            dtype => {
                return Err(bad_tensor(format!(
                    "the `{EMBEDDINGS_TENSOR}` tensor is {dtype:?}; expected F32, F16 or I8"
                )));
            }
        };
        // Beyond the table's size (checked above), model2vec-rs refuses only a tokenizer whose
        // unknown token is not in its vocabulary.
        let model = built
            .map_err(|e| EmbedError::BadTokenizer {
                path: files.tokenizer.clone(),
                reason: format!("{e:#}"),
            })?
            // The table kept as int8 with a scale per row: a quarter of the memory (7.8 MB
            // instead of 31 MB for a 30k × 256 model), cosines within about 0.01.
            .quantize_int8();

        tracing::debug!(
            folder = %folder.display(),
            rows,
            dimensions,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "embedding model loaded"
        );
        Ok(Embedder {
            model,
            rows,
            fingerprint,
            vocabulary,
        })
    }

    /// The unit-length vector of `text`, [`Self::dimensions`] long. A text with no known
    /// token (an empty one) gets the zero vector, whose cosine with anything is 0.
    pub fn embed(&self, text: &str) -> Vec<f32> {
        self.model.encode_single(text)
    }

    /// A hash of the model's files: equal for the same model wherever it was loaded from.
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    /// The length of every vector [`Self::embed`] returns.
    pub fn dimensions(&self) -> usize {
        self.model.dim()
    }

    /// How many tokens the tokenizer knows (added tokens included).
    pub fn vocabulary(&self) -> usize {
        self.vocabulary
    }
}

/// The cosine similarity of two vectors of one length: their dot product over the product
/// of their norms, 0 when either is the zero vector. For [`Embedder::embed`]'s unit vectors
/// it is their dot product.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len(), "vectors of different lengths");
    let (mut dot, mut aa, mut bb) = (0.0_f32, 0.0_f32, 0.0_f32);
    for (&x, &y) in a.iter().zip(b) {
        dot += x * y;
        aa += x * x;
        bb += y * y;
    }
    if aa == 0.0 || bb == 0.0 {
        0.0
    } else {
        dot / (aa.sqrt() * bb.sqrt())
    }
}

/// The three files of a model folder.
struct ModelFiles {
    config: PathBuf,
    tokenizer: PathBuf,
    model: PathBuf,
}

impl ModelFiles {
    fn find(folder: &Path) -> Result<ModelFiles, EmbedError> {
        if !folder.exists() {
            return Err(EmbedError::MissingFolder {
                path: folder.to_path_buf(),
            });
        }
        if !folder.is_dir() {
            return Err(EmbedError::NotAFolder {
                path: folder.to_path_buf(),
            });
        }
        let file = |name: &'static str| {
            let path = folder.join(name);
            if path.is_file() {
                Ok(path)
            } else {
                Err(EmbedError::MissingFile {
                    folder: folder.to_path_buf(),
                    file: name,
                })
            }
        };
        Ok(ModelFiles {
            config: file(CONFIG_FILE)?,
            tokenizer: file(TOKENIZER_FILE)?,
            model: file(MODEL_FILE)?,
        })
    }
}

fn read(path: &Path) -> Result<Vec<u8>, EmbedError> {
    fs::read(path).map_err(|source| EmbedError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// A float tensor's values as f32 (little-endian, as safetensors stores them).
fn floats(view: &TensorView<'_>, name: &str) -> Result<Vec<f32>, String> {
    let data = view.data();
    Ok(match view.dtype() {
        Dtype::F32 => data
            .as_chunks::<4>()
            .0
            .iter()
            .map(|&b| f32::from_le_bytes(b))
            .collect(),
        Dtype::F16 => data
            .as_chunks::<2>()
            .0
            .iter()
            .map(|&b| half::f16::from_le_bytes(b).to_f32())
            .collect(),
        Dtype::F64 => data
            .as_chunks::<8>()
            .0
            .iter()
            .map(|&b| f64::from_le_bytes(b) as f32)
            .collect(),
        other => {
            return Err(format!(
                "the `{name}` tensor is {other:?}; expected F32, F16 or F64"
            ));
        }
    })
}

/// An integer tensor's values as row indices.
fn indices(view: &TensorView<'_>, name: &str) -> Result<Vec<usize>, String> {
    let data = view.data();
    let values: Vec<i64> = match view.dtype() {
        Dtype::I32 => data
            .as_chunks::<4>()
            .0
            .iter()
            .map(|&b| i32::from_le_bytes(b).into())
            .collect(),
        Dtype::I64 => data
            .as_chunks::<8>()
            .0
            .iter()
            .map(|&b| i64::from_le_bytes(b))
            .collect(),
        other => {
            return Err(format!(
                "the `{name}` tensor is {other:?}; expected I32 or I64"
            ));
        }
    };
    values
        .into_iter()
        .map(|v| {
            usize::try_from(v).map_err(|_| format!("the `{name}` tensor holds {v}, a negative row"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use safetensors::tensor::{Dtype, TensorView};

    use super::*;
    use crate::testing::test_model;

    #[test]
    fn paraphrases_sharing_no_word_are_closer_than_unrelated_texts() {
        // (text, the same thing in other words, something else)
        let cases = [
            (
                "Safari date parsing fails on ISO strings",
                "Apple browser rejects timestamps",
                "Postgres connection pool exhausted under heavy load",
            ),
            (
                "memory leak in the worker process",
                "RAM usage keeps growing for background jobs",
                "typo in a README heading",
            ),
            (
                "deploy the app with Docker",
                "ship this service inside a container",
                "rounding error when summing invoice totals",
            ),
            (
                "login page loads slowly",
                "sign-in screen takes ages to appear",
                "nightly database backup script",
            ),
            (
                "cannot connect to the database server",
                "Postgres refuses connections",
                "button colour in dark mode",
            ),
        ];
        let model = test_model();
        let mut failures = Vec::new();
        for (text, paraphrase, unrelated) in cases {
            let v = model.embed(text);
            let close = cosine(&v, &model.embed(paraphrase));
            let far = cosine(&v, &model.embed(unrelated));
            if close <= far {
                failures.push(format!(
                    "{text:?}: paraphrase {paraphrase:?} {close:.3} <= unrelated {unrelated:?} {far:.3}"
                ));
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[test]
    fn vectors_are_unit_length_and_the_empty_text_is_zero() {
        let model = test_model();
        assert_eq!(model.dimensions(), 256);
        let v = model.embed("Safari date parsing fails on ISO strings");
        assert_eq!(v.len(), 256);
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "norm {norm}");
        assert!((cosine(&v, &v) - 1.0).abs() < 1e-5);
        let empty = model.embed("");
        assert_eq!(empty, vec![0.0; 256]);
        assert_eq!(cosine(&v, &empty), 0.0);
    }

    /// A WordPiece tokenizer of three tokens: `[UNK]` (0), `hello` (1), `world` (2).
    const TINY_TOKENIZER: &str = r###"{
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": {"type": "Lowercase"}, "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": null, "decoder": null,
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": {"[UNK]": 0, "hello": 1, "world": 2}}
    }"###;

    struct Tensor {
        name: &'static str,
        dtype: Dtype,
        shape: Vec<usize>,
        data: Vec<u8>,
    }

    fn tensor(name: &'static str, dtype: Dtype, shape: &[usize], data: Vec<u8>) -> Tensor {
        Tensor {
            name,
            dtype,
            shape: shape.to_vec(),
            data,
        }
    }

    fn f32_bytes(values: &[f32]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    /// The rows `[UNK]` = (0, 0), `hello` = (3, 0), `world` = (0, 4).
    fn tiny_table(dtype: Dtype) -> Tensor {
        let values = [0.0_f32, 0.0, 3.0, 0.0, 0.0, 4.0];
        let data = match dtype {
            Dtype::F32 => f32_bytes(&values),
            Dtype::F16 => values
                .iter()
                .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
                .collect(),
            Dtype::I8 => values.iter().map(|&v| v as i8 as u8).collect(),
            other => panic!("no tiny table of {other:?}"),
        };
        tensor("embeddings", dtype, &[3, 2], data)
    }

    fn safetensors_file(tensors: &[Tensor]) -> Vec<u8> {
        let views = tensors.iter().map(|t| {
            (
                t.name,
                TensorView::new(t.dtype, t.shape.clone(), &t.data).unwrap(),
            )
        });
        safetensors::serialize(views, &None::<HashMap<String, String>>).unwrap()
    }

    /// A model folder in `dir` with these files (`None` leaves one out).
    fn write_model(
        dir: &Path,
        config: Option<&str>,
        tokenizer: Option<&str>,
        model: Option<&[u8]>,
    ) {
        fs::create_dir_all(dir).unwrap();
        for (name, contents) in [
            (CONFIG_FILE, config.map(str::as_bytes)),
            (TOKENIZER_FILE, tokenizer.map(str::as_bytes)),
            (MODEL_FILE, model),
        ] {
            if let Some(contents) = contents {
                fs::write(dir.join(name), contents).unwrap();
            }
        }
    }

    const CONFIG: &str = r#"{"normalize": true}"#;

    #[test]
    fn a_text_is_the_normalised_mean_of_its_known_tokens_rows() {
        let tmp = tempfile::tempdir().unwrap();
        for dtype in [Dtype::F32, Dtype::F16, Dtype::I8] {
            let dir = tmp.path().join(format!("{dtype:?}"));
            let file = safetensors_file(&[tiny_table(dtype)]);
            write_model(&dir, Some(CONFIG), Some(TINY_TOKENIZER), Some(&file));
            let model = Embedder::load(&dir).unwrap();
            assert_eq!(model.dimensions(), 2);
            // (3, 0) and (0, 4) average to (1.5, 2), of length 2.5.
            assert_eq!(model.embed("Hello world"), [0.6, 0.8], "{dtype:?}");
            // The unknown token is left out, not averaged in as (0, 0).
            assert_eq!(model.embed("hello zebra"), [1.0, 0.0], "{dtype:?}");
        }
    }

    #[test]
    fn per_token_weights_and_a_row_mapping_are_applied() {
        let tmp = tempfile::tempdir().unwrap();
        // Two rows, (1, 0) and (0, 1): `hello` is row 1, `world` row 0 at three times its
        // weight, so "hello world" is (3, 1) before normalising.
        let file = safetensors_file(&[
            tensor(
                "embeddings",
                Dtype::F32,
                &[2, 2],
                f32_bytes(&[1.0, 0.0, 0.0, 1.0]),
            ),
            tensor("weights", Dtype::F32, &[3], f32_bytes(&[1.0, 1.0, 3.0])),
            tensor(
                "mapping",
                Dtype::I64,
                &[3],
                [0_i64, 1, 0].iter().flat_map(|v| v.to_le_bytes()).collect(),
            ),
        ]);
        write_model(tmp.path(), Some(CONFIG), Some(TINY_TOKENIZER), Some(&file));
        let model = Embedder::load(tmp.path()).unwrap();
        let v = model.embed("hello world");
        let want = [3.0 / 10_f32.sqrt(), 1.0 / 10_f32.sqrt()];
        assert!(
            (v[0] - want[0]).abs() < 1e-6 && (v[1] - want[1]).abs() < 1e-6,
            "{v:?}"
        );
    }

    #[test]
    fn a_broken_model_folder_says_what_is_wrong() {
        let tmp = tempfile::tempdir().unwrap();
        let good = safetensors_file(&[tiny_table(Dtype::F32)]);
        type Setup = fn(&Path, &[u8]);
        let cases: Vec<(&str, Setup, String)> = vec![
            (
                "missing",
                |_, _| {},
                "embedding model folder {dir} does not exist".into(),
            ),
            (
                "a-file",
                |dir, _| fs::write(dir, "x").unwrap(),
                "embedding model path {dir} is not a folder".into(),
            ),
            (
                "no-tokenizer",
                |dir, good| write_model(dir, Some(CONFIG), None, Some(good)),
                "embedding model folder {dir} has no tokenizer.json".into(),
            ),
            (
                "no-config",
                |dir, good| write_model(dir, None, Some(TINY_TOKENIZER), Some(good)),
                "embedding model folder {dir} has no config.json".into(),
            ),
            (
                "no-tensors",
                |dir, _| write_model(dir, Some(CONFIG), Some(TINY_TOKENIZER), None),
                "embedding model folder {dir} has no model.safetensors".into(),
            ),
            (
                "corrupt-safetensors",
                |dir, _| {
                    let junk = b"this is not a safetensors file at all";
                    write_model(dir, Some(CONFIG), Some(TINY_TOKENIZER), Some(junk))
                },
                "{dir}/model.safetensors: not a safetensors file: HeaderTooLarge".into(),
            ),
            (
                "no-embeddings-tensor",
                |dir, _| {
                    let file = safetensors_file(&[tensor(
                        "vectors",
                        Dtype::F32,
                        &[3, 2],
                        f32_bytes(&[0.0; 6]),
                    )]);
                    write_model(dir, Some(CONFIG), Some(TINY_TOKENIZER), Some(&file))
                },
                "{dir}/model.safetensors: no `embeddings` tensor (it has: vectors)".into(),
            ),
            (
                "flat-tensor",
                |dir, _| {
                    let file = safetensors_file(&[tensor(
                        "embeddings",
                        Dtype::F32,
                        &[6],
                        f32_bytes(&[0.0; 6]),
                    )]);
                    write_model(dir, Some(CONFIG), Some(TINY_TOKENIZER), Some(&file))
                },
                "{dir}/model.safetensors: the `embeddings` tensor has shape [6], not \
                 [vocabulary, dimensions]"
                    .into(),
            ),
            (
                "integer-tensor",
                |dir, _| {
                    let file =
                        safetensors_file(&[tensor("embeddings", Dtype::I32, &[3, 2], vec![0; 24])]);
                    write_model(dir, Some(CONFIG), Some(TINY_TOKENIZER), Some(&file))
                },
                "{dir}/model.safetensors: the `embeddings` tensor is I32; expected F32, F16 or I8"
                    .into(),
            ),
            (
                "too-few-rows",
                |dir, _| {
                    let file = safetensors_file(&[tensor(
                        "embeddings",
                        Dtype::F32,
                        &[2, 2],
                        f32_bytes(&[0.0; 4]),
                    )]);
                    write_model(dir, Some(CONFIG), Some(TINY_TOKENIZER), Some(&file))
                },
                "{dir}/model.safetensors does not fit tokenizer.json: the tokenizer has token \
                 id 2, the `embeddings` tensor only 2 rows"
                    .into(),
            ),
            (
                "bad-tokenizer",
                |dir, good| write_model(dir, Some(CONFIG), Some("{\"model\": 1}"), Some(good)),
                "{dir}/tokenizer.json is not a tokenizer: ".into(),
            ),
            (
                "bad-config",
                |dir, good| write_model(dir, Some("[1, 2]"), Some(TINY_TOKENIZER), Some(good)),
                "{dir}/config.json is not a model2vec config (a JSON object): found an array"
                    .into(),
            ),
        ];
        for (name, setup, want) in cases {
            let dir = tmp.path().join(name);
            setup(&dir, &good);
            let err = Embedder::load(&dir).expect_err(name);
            let want = want.replace("{dir}", &dir.display().to_string());
            if name == "bad-tokenizer" {
                // The rest is the tokenizers crate's parse error.
                assert!(err.to_string().starts_with(&want), "{name}: {err}");
            } else {
                assert_eq!(err.to_string(), want, "{name}");
            }
        }
    }
}
