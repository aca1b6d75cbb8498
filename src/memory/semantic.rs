//! The memory's embedding model and its entries' vectors (spec 003's embeddings).
//!
//! The model loads in the background ([`Memory::start_embeddings`]): until it is ready,
//! adds store no vectors and searches are BM25 alone, so nothing waits for it. Once it is
//! ready, entries without vectors (added before, or while no model was available) are
//! embedded in the background, and every add embeds its entry before it is acknowledged.
//!
//! Vectors are derived data, like the search index: they live in `memory.vectors`
//! ([`super::vectors`]), tagged in `memory.meta` with the model that made them, and a
//! different model (the setting changed) has them made again.

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock, Weak};
use std::time::{Duration, Instant};

use ulid::Ulid;

use super::embeddings::Embedder;
use super::model::Entry;
use super::vectors::{EntryVectors, Filter, Quantised, VectorIndex};
use super::{Memory, MemoryError, Result, decode};

/// The `memory.meta` key of the fingerprint of the model the stored vectors come from.
const META_MODEL: &[u8] = b"embeddings.model";
/// Entries embedded between two checks that the memory is still open.
const BATCH: usize = 256;
/// How long [`Memory::reembed`] waits for a model still loading (or downloading).
const LOAD_WAIT: Duration = Duration::from_secs(600);

/// Where the embedding model stands.
#[derive(Clone)]
pub enum ModelState {
    /// No model is configured (`off`), or none was asked for (a memory opened without
    /// [`Memory::start_embeddings`]).
    Off,
    /// Being found, fetched or loaded.
    Loading { model: String },
    Ready {
        model: String,
        embedder: Arc<Embedder>,
    },
    /// Configured, but it could not be found, fetched or loaded.
    Unavailable { model: String, reason: String },
}

/// The model and the vectors of a memory.
pub struct Semantic {
    state: Mutex<ModelState>,
    /// Told whenever the state changes.
    changed: Condvar,
    index: RwLock<VectorIndex>,
    /// Entry id → [`EntryVectors::encode`].
    tree: sled::Tree,
}

/// The text an entry's summary vector is made of: title, tags, content. Public so the
/// benches embed exactly what the memory does.
pub fn summary_text(title: &str, tags: &[String], content: &str) -> String {
    format!("{title}\n{}\n{content}", tags.join(" "))
}

impl Semantic {
    pub fn open(db: &sled::Db) -> Result<Semantic> {
        Ok(Semantic {
            state: Mutex::new(ModelState::Off),
            changed: Condvar::new(),
            index: RwLock::new(VectorIndex::default()),
            tree: db.open_tree("memory.vectors")?,
        })
    }

    fn lock_state(&self) -> MutexGuard<'_, ModelState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn state(&self) -> ModelState {
        self.lock_state().clone()
    }

    fn set_state(&self, state: ModelState) {
        *self.lock_state() = state;
        self.changed.notify_all();
    }

    /// The state once it is no longer loading, or after `wait` at most.
    fn settled(&self, wait: Duration) -> ModelState {
        let deadline = Instant::now() + wait;
        let mut state = self.lock_state();
        while matches!(*state, ModelState::Loading { .. }) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            state = self
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        state.clone()
    }

    /// The model, when it is ready.
    pub fn embedder(&self) -> Option<Arc<Embedder>> {
        match &*self.lock_state() {
            ModelState::Ready { embedder, .. } => Some(embedder.clone()),
            _ => None,
        }
    }

    /// The model, or why there is none: `EMBEDDINGS_DISABLED` when it is off,
    /// `MODEL_NOT_AVAILABLE` when it is loading or failed.
    pub fn require(&self) -> Result<Arc<Embedder>> {
        Semantic::ready_or_why(self.state())
    }

    fn ready_or_why(state: ModelState) -> Result<Arc<Embedder>> {
        match state {
            ModelState::Ready { embedder, .. } => Ok(embedder),
            ModelState::Off => Err(MemoryError::EmbeddingsDisabled),
            ModelState::Loading { model } => Err(MemoryError::ModelNotAvailable {
                model,
                reason: "it is still loading; try again in a moment".into(),
            }),
            ModelState::Unavailable { model, reason } => {
                Err(MemoryError::ModelNotAvailable { model, reason })
            }
        }
    }

    /// An entry's vectors under `embedder`.
    pub fn vectors_of(embedder: &Embedder, entry: &Entry) -> EntryVectors {
        EntryVectors {
            summary: Quantised::of(&embedder.embed(&summary_text(
                &entry.title,
                &entry.tags,
                &entry.content,
            ))),
            context: entry
                .context
                .as_deref()
                .filter(|c| !c.trim().is_empty())
                .map(|c| Quantised::of(&embedder.embed(c))),
        }
    }

    /// The query vector of a search: its text, with its context mixed in at `weight`.
    pub fn query_vector(
        embedder: &Embedder,
        query: &str,
        context: Option<&str>,
        weight: f32,
    ) -> Quantised {
        let mut v = embedder.embed(query);
        if let Some(context) = context.filter(|c| !c.trim().is_empty()) {
            for (x, c) in v.iter_mut().zip(embedder.embed(context)) {
                *x += weight * c;
            }
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            if norm > 0.0 {
                v.iter_mut().for_each(|x| *x /= norm);
            }
        }
        Quantised::of(&v)
    }

    /// Stores an entry's vectors (not flushed: the caller's write flushes) and indexes its
    /// summary.
    pub fn put(&self, entry: &Entry, vectors: &EntryVectors) -> Result<()> {
        self.tree
            .insert(entry.id.to_string().as_bytes(), vectors.encode())?;
        self.index
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .upsert(entry, &vectors.summary);
        Ok(())
    }

    /// Which of an entry's vectors are stored.
    pub fn has(&self, id: &Ulid) -> Result<(bool, bool)> {
        let stored = self.tree.get(id.to_string())?;
        Ok(match stored.as_deref().and_then(EntryVectors::decode) {
            Some(v) => (true, v.context.is_some()),
            None => (false, false),
        })
    }

    /// Whether a search of the vectors is worth a thread of its own ([`VectorIndex::is_large`]).
    pub fn is_large(&self) -> bool {
        self.index
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .is_large()
    }

    /// The `k` entries nearest `query`, best first, with their cosine.
    pub fn nearest(
        &self,
        query: &Quantised,
        k: usize,
        filter: Filter<'_>,
        skip: Option<&Ulid>,
    ) -> Vec<(Ulid, f32)> {
        self.index
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .nearest(query, k, filter, skip)
    }

    /// The cosine of `query` with the summary of each of `ids` that has one.
    pub fn cosines(&self, query: &Quantised, ids: &[Ulid]) -> Vec<Option<f32>> {
        let index = self.index.read().unwrap_or_else(|p| p.into_inner());
        ids.iter()
            .map(|id| index.get(id).map(|v| query.cosine(&v)))
            .collect()
    }
}

impl Memory {
    /// Finds and loads the embedding model `model` in the background: `locate` gives its
    /// folder (fetching it if it must), or `None` when embeddings are off. Once loaded, the
    /// memory uses it, and embeds the entries that have no vectors yet. Returns at once; the
    /// loader holds the memory only while it writes, so closing it is never held up.
    pub fn start_embeddings(
        self: &Arc<Self>,
        model: String,
        locate: impl FnOnce() -> Result<Option<PathBuf>> + Send + 'static,
    ) {
        self.semantic.set_state(ModelState::Loading {
            model: model.clone(),
        });
        let memory: Weak<Memory> = Arc::downgrade(self);
        let load = move || {
            let loaded = locate().and_then(|folder| {
                folder
                    .map(|folder| {
                        Embedder::load(&folder).map_err(|e| MemoryError::ModelNotAvailable {
                            model: model.clone(),
                            reason: e.to_string(),
                        })
                    })
                    .transpose()
            });
            let embedder = match loaded {
                Ok(Some(embedder)) => Arc::new(embedder),
                Ok(None) | Err(MemoryError::EmbeddingsDisabled) => {
                    if let Some(memory) = memory.upgrade() {
                        memory.semantic.set_state(ModelState::Off);
                    }
                    return;
                }
                Err(e) => {
                    let reason = match e {
                        MemoryError::ModelNotAvailable { reason, .. } => reason,
                        other => other.to_string(),
                    };
                    tracing::warn!("embedding model {model} is not available: {reason}");
                    if let Some(memory) = memory.upgrade() {
                        memory
                            .semantic
                            .set_state(ModelState::Unavailable { model, reason });
                    }
                    return;
                }
            };
            let missing = match memory.upgrade().map(|m| m.adopt(&model, embedder.clone())) {
                Some(Ok(missing)) => missing,
                Some(Err(e)) => {
                    tracing::error!("using the embedding model {model} failed: {e}");
                    return;
                }
                None => return,
            };
            let mut done = 0;
            for batch in missing.chunks(BATCH) {
                let Some(memory) = memory.upgrade() else {
                    return;
                };
                match memory.embed_entries(&embedder, batch) {
                    Ok(n) => done += n,
                    Err(e) => {
                        tracing::error!("embedding entries failed: {e}");
                        return;
                    }
                }
            }
            if done > 0 {
                tracing::info!("embedded {done} entries with {model}");
            }
        };
        if let Err(e) = std::thread::Builder::new()
            .name("tandem-embeddings".into())
            .spawn(load)
        {
            tracing::error!("cannot start the embedding model's loader: {e}");
        }
    }

    /// Searches and similarity use `embedder` from now on; entries without vectors are
    /// embedded first, in this thread. Returns how many entries were embedded.
    pub fn use_embedder(&self, embedder: Embedder) -> Result<u64> {
        let embedder = Arc::new(embedder);
        let missing = self.adopt("(given)", embedder.clone())?;
        let mut done = 0;
        for batch in missing.chunks(BATCH) {
            done += self.embed_entries(&embedder, batch)?;
        }
        Ok(done)
    }

    /// Makes every entry's vectors again with the memory's model (`tandem memory reindex
    /// --embeddings`), waiting for it while it loads. Returns how many entries were embedded.
    pub fn reembed(&self) -> Result<u64> {
        let embedder = Semantic::ready_or_why(self.semantic.settled(LOAD_WAIT))?;
        let all: Vec<Ulid> = {
            let _guard = self.lock_writes();
            self.semantic.tree.clear()?;
            *self
                .semantic
                .index
                .write()
                .unwrap_or_else(|p| p.into_inner()) = VectorIndex::new(embedder.dimensions());
            self.iter_entries()
                .map(|e| e.map(|e| e.id))
                .collect::<Result<_>>()?
        };
        let mut done = 0;
        for batch in all.chunks(BATCH) {
            done += self.embed_entries(&embedder, batch)?;
        }
        Ok(done)
    }

    /// Makes `embedder` the memory's model: the stored vectors of another model are
    /// dropped, the others loaded into the index, and the model is ready. Returns the
    /// entries that have no vectors.
    fn adopt(&self, model: &str, embedder: Arc<Embedder>) -> Result<Vec<Ulid>> {
        let fingerprint = format!("{}:{:016x}", embedder.dimensions(), embedder.fingerprint());
        // Under the write lock, so that an add either ends before the model is ready (and
        // its entry is found missing below) or embeds its own entry.
        let _guard = self.lock_writes();
        let sem = &self.semantic;
        if self.meta.get(META_MODEL)?.as_deref() != Some(fingerprint.as_bytes()) {
            if !sem.tree.is_empty() {
                tracing::info!("the embedding model changed: the memory's vectors are made again");
            }
            sem.tree.clear()?;
            self.meta.insert(META_MODEL, fingerprint.as_bytes())?;
        }
        let mut index = VectorIndex::new(embedder.dimensions());
        let mut missing = Vec::new();
        for entry in self.iter_entries() {
            let entry = entry?;
            let stored = sem.tree.get(entry.id.to_string())?;
            match stored.as_deref().and_then(EntryVectors::decode) {
                Some(v) if v.summary.values.len() == embedder.dimensions() => {
                    index.upsert(&entry, &v.summary);
                }
                _ => missing.push(entry.id),
            }
        }
        *sem.index.write().unwrap_or_else(|p| p.into_inner()) = index;
        sem.set_state(ModelState::Ready {
            model: model.to_string(),
            embedder,
        });
        if !missing.is_empty() {
            tracing::info!(
                "{} entries have no vectors yet: embedding them",
                missing.len()
            );
        }
        Ok(missing)
    }

    /// Embeds and stores the vectors of `ids` (read again: they may have changed), then
    /// flushes. Returns how many were embedded.
    fn embed_entries(&self, embedder: &Embedder, ids: &[Ulid]) -> Result<u64> {
        let mut done = 0;
        {
            let _guard = self.lock_writes();
            for id in ids {
                let Some(bytes) = self.entries.get(id.to_string())? else {
                    continue;
                };
                let entry: Entry = decode(&bytes)?;
                self.semantic
                    .put(&entry, &Semantic::vectors_of(embedder, &entry))?;
                done += 1;
            }
        }
        self.store.flush()?;
        Ok(done)
    }
}
