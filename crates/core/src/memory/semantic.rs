//! The memory's embedding model and its entries' vectors (spec 003's embeddings).
//!
//! The model loads in the background ([`Memory::start_embeddings`]): until it is ready,
//! adds store no vectors and searches are BM25 alone, so nothing waits for it. Once it is
//! ready, entries without vectors (added before, or while no model was available) are
//! embedded in the background, and every add embeds its entry before it is acknowledged.
//!
//! Vectors are derived data, like the search index: they live in a file beside it
//! ([`tandem_search::vector_file`]), whose header names the model that made them; a different model
//! (the setting changed) has them made again. When the model is ready the file is read
//! into [`VectorIndex`]; sled counts the entries, so a file that holds fewer (it lost its
//! tail, or entries came while no model was ready) has the others embedded, and nothing
//! else of sled is read.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock, Weak};
use std::time::{Duration, Instant};

use ulid::Ulid;

use super::records::{ENTRY_KINDS, Entry, EntryType};
use super::{Memory, MemoryError, Result, parse_id_bytes};
use tandem_search::embeddings::Embedder;
use tandem_search::quantised::{DocVectors, Quantised};
use tandem_search::vector_base::{self, Base};
use tandem_search::vector_file::{Maker, Opened, Stored, StoredAt, VectorFile, VectorRecord};
use tandem_search::vectors::{Cut, Filter, VectorIndex};

/// Data dirs written before the vector file kept the vectors in this sled tree, under the
/// model fingerprint at [`META_MODEL`] in `memory.meta`; they move to the file when a model
/// is ready.
const LEGACY_TREE: &str = "memory.vectors";
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
    index: Arc<RwLock<VectorIndex>>,
    /// The thread cutting the table into lists ([`cut_into_lists`]), while it runs.
    lists_job: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Set when the memory closes: a cut running gives up at its next part, and the drop
    /// waits for it, so no thread writes the vector files once the data dir is let go.
    closing: Arc<AtomicBool>,
    /// The vector file, open once a model is ready (its vectors are then all in `index`).
    file: Arc<Mutex<Option<VectorFile>>>,
    path: PathBuf,
    /// The vectors a data dir written before the file kept in sled, until they are moved to the file.
    legacy: sled::Tree,
    /// Entries for the loader thread to embed once its model is ready (an import's).
    queue: Mutex<Option<mpsc::Sender<Vec<Ulid>>>>,
    /// When the table was last read (milliseconds since `opened`), and whether since the
    /// base's pages were last given back ([`Memory::release_idle_pages`]).
    last_read: AtomicU64,
    read_since_release: AtomicBool,
    opened: Instant,
    /// How many bulk embeds run ([`Memory::embed_all`]): meanwhile a cut waits for more
    /// rows ([`VectorIndex::wants_cut`]).
    bulk: Arc<AtomicUsize>,
}

/// Which entries an embedding counts. Neither embeds an entry that has vectors in the
/// table: after a reindex cleared it, those were made meanwhile (by the loader), with the
/// model the reindex uses.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Counted {
    /// Every entry given (a reindex answers how many entries have vectors).
    Every,
    /// Those embedded now.
    Embedded,
}

/// How many rows [`cut_into_lists`] places while it holds the table (readers only).
const PLACE_AT_ONCE: usize = 4096;

/// Whether `table` wants a cut now, `bulk` the count of bulk embeds running
/// ([`VectorIndex::wants_cut`]).
fn cut_wanted(table: &VectorIndex, bulk: &AtomicUsize) -> bool {
    table.wants_cut(bulk.load(Ordering::Relaxed) > 0)
}

fn read(index: &RwLock<VectorIndex>) -> std::sync::RwLockReadGuard<'_, VectorIndex> {
    index.read().unwrap_or_else(|p| p.into_inner())
}

fn write(index: &RwLock<VectorIndex>) -> std::sync::RwLockWriteGuard<'_, VectorIndex> {
    index.write().unwrap_or_else(|p| p.into_inner())
}

fn lock_file(file: &Mutex<Option<VectorFile>>) -> MutexGuard<'_, Option<VectorFile>> {
    file.lock().unwrap_or_else(|p| p.into_inner())
}

/// Cuts the table into lists apart from it, into a base ([`tandem_search::vector_base`]): its
/// centroids are made of a sample without the table (or the base's kept, when the table
/// has not grown much), its rows placed and then written a part at a time under the read
/// lock (searches go on; an add waits for one part at most), and the base installed under
/// the write lock with the vector file of its generation, which holds only the rows that
/// came or changed meanwhile. A table made again meanwhile (another model, a reindex)
/// takes none of it. Once `closing` is set, the cut gives up at its next part, leaving
/// the table and the files as they were. Returns whether the cut was installed.
fn cut_into_lists(
    index: &RwLock<VectorIndex>,
    file: &Mutex<Option<VectorFile>>,
    closing: &AtomicBool,
) -> bool {
    let started = Instant::now();
    let closed = || closing.load(Ordering::Relaxed);
    let Some((log, maker, generation)) = lock_file(file)
        .as_ref()
        .map(|f| (f.path().to_path_buf(), f.maker(), f.generation()))
    else {
        return false;
    };
    let centroids = match write(index).begin_cut() {
        Cut::Train(sample) => sample.train(),
        Cut::Keep(centroids) => centroids,
    };
    let given_up = |why: Option<String>| {
        match why {
            Some(why) => tracing::error!("cutting the vectors into lists failed: {why}"),
            None => tracing::debug!("the vectors' cut into lists given up (closed, or made again)"),
        }
        write(index).cancel_cut();
        vector_base::remove_others(&log, generation);
        false
    };
    let mut assigned = Vec::new();
    let mut from = 0;
    loop {
        if closed() {
            return given_up(None);
        }
        let table = read(index);
        if from >= table.assign_len() {
            break;
        }
        assigned.extend(table.assign(&centroids, from, PLACE_AT_ONCE));
        from += PLACE_AT_ONCE;
    }
    // A row that moved while it was being placed may be there twice: once is kept.
    assigned.sort_unstable_by_key(|&(id, _)| id);
    assigned.dedup_by_key(|&mut (id, _)| id);
    assigned.sort_unstable_by_key(|&(id, list)| (list, id));
    let mut sizes = vec![0u32; centroids.len()];
    for &(_, list) in &assigned {
        sizes[list as usize] += 1;
    }
    let (lists, rows) = (centroids.len(), assigned.len());
    let next = generation + 1;
    let written = (|| -> std::io::Result<PathBuf> {
        let mut writer = vector_base::BaseWriter::create(&log, maker, next, centroids, &sizes)?;
        for part in assigned.chunks(PLACE_AT_ONCE) {
            if closed() {
                return Err(std::io::ErrorKind::Interrupted.into());
            }
            let table = read(index);
            for (id, _) in part {
                let row = table.row_of(id);
                writer.push(
                    *id,
                    row.as_ref().map(|(t, p, s, c)| (*t, *p, s, c.as_ref())),
                )?;
            }
        }
        writer.finish()
    })();
    // The table made again meanwhile (a reindex, another model): this cut is not
    // installed, and the files it wrote are not of the table's generation.
    let superseded = |file: &Option<VectorFile>, table: &VectorIndex| {
        !table.cut_pending() || file.as_ref().map(VectorFile::generation) != Some(generation)
    };
    let path = match written {
        Ok(path) => path,
        Err(_) if closed() => return given_up(None),
        // A reindex empties the vector file and removes its bases, this cut's too.
        Err(_) if superseded(&lock_file(file), &read(index)) => return given_up(None),
        Err(e) => return given_up(Some(format!("{rows} entries' vectors: {e}"))),
    };
    let mut file = lock_file(file);
    let mut table = write(index);
    if superseded(&file, &table) {
        drop((table, file));
        vector_base::remove_others(&log, generation);
        return false;
    }
    let base = match Base::open(&path, maker, next) {
        Ok(base) => base,
        Err(e) => {
            drop((table, file));
            return given_up(Some(e.to_string()));
        }
    };
    let records = table.records_after(&base);
    match VectorFile::create(&log, maker, ENTRY_KINDS, next, &records) {
        Ok(new) => {
            *file = Some(new);
            table.install_base(base, records);
        }
        Err(e) => {
            drop((table, file));
            return given_up(Some(e.to_string()));
        }
    }
    drop((table, file));
    vector_base::remove_others(&log, next);
    tracing::info!(
        "{rows} entries' vectors cut into {lists} lists in {:.2} s",
        started.elapsed().as_secs_f64()
    );
    true
}

/// The table of the vector file at `log` made by `maker`: the base its header names,
/// mapped (one that cannot be is logged, and the entries it held are found missing and
/// embedded again), the file's records over it; the bases of other generations removed.
fn read_table(log: &Path, maker: Maker) -> std::io::Result<(VectorIndex, Opened)> {
    let generation = VectorFile::generation_at(log, maker)?;
    let mut index = match generation {
        0 => VectorIndex::new(maker.dims),
        g => match Base::open(&vector_base::path_of(log, g), maker, g) {
            Ok(base) => VectorIndex::with_base(base),
            Err(e) => {
                tracing::warn!("{e}: the entries it held are embedded again");
                VectorIndex::new(maker.dims)
            }
        },
    };
    vector_base::remove_others(log, generation);
    let opened = VectorFile::open(log, maker, ENTRY_KINDS, |record| index.apply(&record))?;
    Ok((index, opened))
}

/// Whether the vector file at `log`, or the base it names, holds vectors for `id`, and
/// whether a context vector among them: read from disk (used while no model is ready,
/// when nothing of it is in memory).
fn stored_at(log: &Path, id: &Ulid) -> std::io::Result<Option<bool>> {
    match VectorFile::stored_at(log, ENTRY_KINDS, id)? {
        StoredAt::Record(found) => Ok(found),
        StoredAt::Base { maker, generation } => {
            match Base::open(&vector_base::path_of(log, generation), maker, generation) {
                Ok(base) => Ok(base.find(id).map(|r| base.context(r).is_some())),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(e),
            }
        }
        StoredAt::Nowhere => Ok(None),
    }
}

/// The text an entry's summary vector is made of: title, tags, content. Public so the
/// benches embed exactly what the memory does.
pub fn summary_text(title: &str, tags: &[String], content: &str) -> String {
    format!("{title}\n{}\n{content}", tags.join(" "))
}

impl Semantic {
    /// The semantic side of a memory whose vectors are kept in the file at `path`.
    pub fn open(db: &sled::Db, path: &Path) -> Result<Semantic> {
        Ok(Semantic {
            state: Mutex::new(ModelState::Off),
            changed: Condvar::new(),
            index: Arc::new(RwLock::new(VectorIndex::default())),
            lists_job: Mutex::new(None),
            closing: Arc::new(AtomicBool::new(false)),
            file: Arc::new(Mutex::new(None)),
            path: path.to_path_buf(),
            legacy: db.open_tree(LEGACY_TREE)?,
            queue: Mutex::new(None),
            last_read: AtomicU64::new(0),
            read_since_release: AtomicBool::new(false),
            opened: Instant::now(),
            bulk: Arc::new(AtomicUsize::new(0)),
        })
    }

    fn lock_file(&self) -> MutexGuard<'_, Option<VectorFile>> {
        lock_file(&self.file)
    }

    fn write_index(&self) -> std::sync::RwLockWriteGuard<'_, VectorIndex> {
        write(&self.index)
    }

    /// The table, to read: noted for [`Memory::release_idle_pages`]. A search holding it
    /// must not ask for it again (a writer waiting between the two would block both).
    pub(super) fn read_index(&self) -> std::sync::RwLockReadGuard<'_, VectorIndex> {
        self.last_read
            .store(self.opened.elapsed().as_millis() as u64, Ordering::Relaxed);
        self.read_since_release.store(true, Ordering::Relaxed);
        read(&self.index)
    }

    /// Cuts the table into lists on a thread of its own when it wants them
    /// ([`VectorIndex::wants_lists`]) and no such thread runs; searches meanwhile read the
    /// table whole.
    fn cut_when_large(&self) {
        let mut job = self.lists_job.lock().unwrap_or_else(|p| p.into_inner());
        if job.as_ref().is_some_and(|j| !j.is_finished())
            || !cut_wanted(&self.read_index(), &self.bulk)
        {
            return;
        }
        let (index, file, bulk, closing) = (
            Arc::clone(&self.index),
            Arc::clone(&self.file),
            Arc::clone(&self.bulk),
            Arc::clone(&self.closing),
        );
        // Cut after cut while one is wanted: rows added meanwhile would otherwise wait
        // for the next add (an embed in bulk ends while a cut runs).
        match std::thread::Builder::new()
            .name("tandem-vector-lists".into())
            .spawn(move || {
                while cut_wanted(&read(&index), &bulk) && cut_into_lists(&index, &file, &closing) {}
            }) {
            Ok(handle) => *job = Some(handle),
            Err(e) => tracing::error!("cannot start cutting the vectors into lists: {e}"),
        }
    }

    /// Waits for the thread cutting the table into lists, if one runs.
    fn lists_made(&self) {
        let job = self
            .lists_job
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(job) = job
            && job.join().is_err()
        {
            tracing::error!("cutting the vectors into lists failed");
        }
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
    pub fn vectors_of(embedder: &Embedder, entry: &Entry) -> DocVectors {
        DocVectors {
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

    /// What is stored of an entry under `embedder`.
    pub fn stored(embedder: &Embedder, entry: &Entry) -> Stored {
        Stored {
            id: entry.id,
            kind: entry.entry_type.kind(),
            group: entry.project.clone(),
            vectors: Semantic::vectors_of(embedder, entry),
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

    /// Stores entries' vectors and indexes their summaries. Called once the entries are
    /// durable in sled; a write that fails loses nothing (logged: the entries are found
    /// without vectors at the next start and embedded again).
    pub fn put(&self, stored: Vec<Stored>) {
        if stored.is_empty() {
            return;
        }
        {
            let mut index = self.write_index();
            for s in &stored {
                index.upsert_stored(s);
            }
        }
        self.cut_when_large();
        let records: Vec<VectorRecord> = stored.into_iter().map(VectorRecord::Put).collect();
        if let Some(file) = self.lock_file().as_mut()
            && let Err(e) = file.append(&records)
        {
            tracing::error!(
                "writing {} entries' vectors failed ({e}); they are embedded again at the next start",
                records.len()
            );
        }
    }

    /// Forgets the vectors of `ids` (entries an import replaced), durably, before the
    /// entries change: whether or not a model is ready, no stale vector survives them.
    pub fn forget(&self, ids: &[Ulid]) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        {
            let mut index = self.write_index();
            ids.iter().for_each(|id| index.remove(id));
        }
        let records: Vec<VectorRecord> = ids.iter().copied().map(VectorRecord::Drop).collect();
        match self.lock_file().as_mut() {
            Some(file) => file.append(&records).and_then(|()| file.sync())?,
            None => VectorFile::append_at(&self.path, ENTRY_KINDS, &records)?,
        }
        for id in ids {
            self.legacy.remove(id.to_string())?;
        }
        Ok(())
    }

    /// Which of an entry's vectors are stored: from memory once a model is ready, before
    /// from the file itself.
    pub fn has(&self, id: &Ulid) -> Result<(bool, bool)> {
        if self.lock_file().is_some() {
            return Ok(self.read_index().has(id));
        }
        if let Some(context) = stored_at(&self.path, id)? {
            return Ok((true, context));
        }
        let legacy = self.legacy.get(id.to_string())?;
        Ok(match legacy.as_deref().and_then(DocVectors::decode) {
            Some(v) => (true, v.context.is_some()),
            None => (false, false),
        })
    }

    /// Whether a search of the vectors is worth a thread of its own ([`VectorIndex::is_large`]).
    pub fn is_large(&self) -> bool {
        self.read_index().is_large()
    }

    /// The `k` entries nearest `query`, best first, with their cosine.
    pub fn nearest(
        &self,
        query: &Quantised,
        k: usize,
        filter: Filter<'_>,
        skip: Option<&Ulid>,
    ) -> Vec<(Ulid, f32)> {
        self.read_index().nearest(query, k, filter, skip)
    }

    /// The type of each entry of `ids` that has a row in the table.
    pub fn entry_types<'a>(&self, ids: impl Iterator<Item = &'a Ulid>) -> Vec<Option<EntryType>> {
        let index = self.read_index();
        ids.map(|id| index.kind(id).map(EntryType::of_kind))
            .collect()
    }

    /// The cosine of `query` with the summary of each of `ids` that has one.
    pub fn cosines(&self, query: &Quantised, ids: &[Ulid]) -> Vec<Option<f32>> {
        self.read_index().cosines(query, ids)
    }
}

impl Drop for Semantic {
    /// A cut running gives up (after its k-means, if it is training, or a part's placing
    /// or writing) and is waited for: it would otherwise write and remove the vector files
    /// after the data dir is let go, under another process or a memory opened again.
    fn drop(&mut self) {
        self.closing.store(true, Ordering::Relaxed);
        self.lists_made();
    }
}

impl Memory {
    /// Finds and loads the embedding model `model` in the background: `locate` gives its
    /// folder (fetching it if it must), or `None` when embeddings are off. Once loaded, the
    /// memory uses it, and embeds the entries that have no vectors yet, then those given
    /// to [`Self::embed_later`]. Returns at once; the loader holds the memory only while
    /// it writes, so closing it is never held up.
    pub fn start_embeddings(
        self: &Arc<Self>,
        model: String,
        locate: impl FnOnce() -> Result<Option<PathBuf>> + Send + 'static,
    ) {
        self.semantic.set_state(ModelState::Loading {
            model: model.clone(),
        });
        let (queue, later) = mpsc::channel::<Vec<Ulid>>();
        *self
            .semantic
            .queue
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(queue);
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
            // Then what comes later, until the memory is closed (its sender dropped).
            for ids in std::iter::once(missing).chain(later) {
                let mut done = 0;
                for batch in ids.chunks(BATCH) {
                    let Some(memory) = memory.upgrade() else {
                        return;
                    };
                    match memory.embed_entries(&embedder, batch, Counted::Embedded) {
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
        self.embed_all(&embedder, &missing, Counted::Embedded)
    }

    /// Gives back the pages of the vector base that searches read ([`Base::reopen`]) when
    /// none read the table for `quiet`: what an idle daemon does, so that its resident
    /// memory is what it holds, not what searches last looked at. Returns whether it did.
    pub fn release_idle_pages(&self, quiet: Duration) -> bool {
        let sem = &self.semantic;
        let last = Duration::from_millis(sem.last_read.load(Ordering::Relaxed));
        if !sem.read_since_release.load(Ordering::Relaxed)
            || sem.opened.elapsed().saturating_sub(last) < quiet
        {
            return false;
        }
        sem.read_since_release.store(false, Ordering::Relaxed);
        sem.write_index().release_pages();
        true
    }

    /// Waits until the vectors' table is cut into lists, when it is being cut (a large
    /// table searched whole meanwhile): for benchmarks and tests, which measure the search
    /// a daemon settles into. Returns the number of lists (0: the table is small).
    pub fn wait_for_vector_lists(&self) -> usize {
        self.semantic.lists_made();
        self.semantic.read_index().list_count()
    }

    /// Embeds `ids` (written without vectors: an import's) once the model is ready: in
    /// the loader's thread when there is one, else at once when a model is ready. An id
    /// that has vectors by then is left as it is.
    pub(super) fn embed_later(&self, ids: Vec<Ulid>) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        if let Some(queue) = &*self
            .semantic
            .queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
        {
            // A closed queue means the loader gave up (no model): the ids are found
            // missing when a model is next ready.
            let _ = queue.send(ids);
            return Ok(());
        }
        if let Some(embedder) = self.semantic.embedder() {
            self.embed_all(&embedder, &ids, Counted::Embedded)?;
        }
        Ok(())
    }

    /// Embeds `ids` in batches, the table cut less often meanwhile
    /// ([`VectorIndex::wants_cut`]) and as usual once done.
    fn embed_all(&self, embedder: &Embedder, ids: &[Ulid], counted: Counted) -> Result<u64> {
        let sem = &self.semantic;
        sem.bulk.fetch_add(1, Ordering::Relaxed);
        let embed = || {
            let mut done = 0;
            for batch in ids.chunks(BATCH) {
                done += self.embed_entries(embedder, batch, counted)?;
            }
            Ok(done)
        };
        let done = embed();
        sem.bulk.fetch_sub(1, Ordering::Relaxed);
        sem.cut_when_large();
        done
    }

    /// Makes every entry's vectors again with the memory's model (`tandem memory reindex
    /// --embeddings`), waiting for it while it loads, and for the table's cut into lists
    /// when it wants one. Returns how many entries were embedded.
    pub fn reembed(&self) -> Result<u64> {
        let embedder = Semantic::ready_or_why(self.semantic.settled(LOAD_WAIT))?;
        let all: Vec<Ulid> = {
            let _guard = self.lock_writes();
            let sem = &self.semantic;
            if let Some(file) = sem.lock_file().as_mut() {
                file.clear()?;
                vector_base::remove_others(file.path(), 0);
            }
            *sem.write_index() = VectorIndex::new(embedder.dimensions());
            self.entry_ids().collect::<Result<_>>()?
        };
        // Every entry is counted, one the loader embedded meanwhile too (embedded once:
        // made again, it would be written to the file twice).
        let done = self.embed_all(&embedder, &all, Counted::Every)?;
        // The table's last cut is part of the reindex: `tandem memory reindex --embeddings`
        // ends its process right after, which left the cut (long on a large base) to
        // the next open, and the daemon that made it held the table's rows meanwhile.
        self.semantic.lists_made();
        Ok(done)
    }

    /// Every entry's id, newest write first, read from `memory.writes` (ids only: the
    /// entries' own pages are not read, nor left in sled's cache).
    fn entry_ids(&self) -> impl Iterator<Item = Result<Ulid>> + '_ {
        super::writes::newest_first(&self.writes)
    }

    /// Makes `embedder` the memory's model: the vector file is read into memory (started
    /// again when another model made it), the vectors a data dir written before the file kept in sled moved into
    /// it, and the model is ready. Returns the entries that have no vectors.
    fn adopt(&self, model: &str, embedder: Arc<Embedder>) -> Result<Vec<Ulid>> {
        let maker = Maker {
            dims: embedder.dimensions(),
            fingerprint: embedder.fingerprint(),
        };
        // Under the write lock, so that an add either ends before the model is ready (and
        // its entry is found missing below) or embeds its own entry.
        let _guard = self.lock_writes();
        let sem = &self.semantic;
        let (mut index, opened) = read_table(&sem.path, maker)?;
        if let Some(why) = &opened.discarded {
            tracing::info!("{why}: the entries it lacks are embedded again");
        }
        let mut file = opened.file;
        file.compact_if_superseded(opened.records, index.rows_since_base())?;
        if !sem.legacy.is_empty() {
            let moved = self.legacy_vectors(maker, &index)?;
            tracing::info!("moving {} entries' vectors out of sled", moved.len());
            for s in &moved {
                index.upsert_stored(s);
            }
            file.append(&moved.into_iter().map(VectorRecord::Put).collect::<Vec<_>>())?;
            file.sync()?;
            sem.legacy.clear()?;
            self.meta.remove(META_MODEL)?;
            self.store.flush()?;
        }
        // sled counts the entries: the file holds vectors of entries only (a vector is
        // written once its entry is durable, and entries are never deleted), so as many
        // are missing as it holds fewer. They are most often the latest (added while the
        // model loaded, or lost with the file's tail): looked for from the newest write.
        let mut lacking = self.entry_count()?.saturating_sub(index.len() as u64);
        let mut missing = Vec::new();
        for id in self.entry_ids() {
            if lacking == 0 {
                break;
            }
            let id = id?;
            if !index.has(&id).0 {
                missing.push(id);
                lacking -= 1;
            }
        }
        *sem.write_index() = index;
        *sem.lock_file() = Some(file);
        sem.cut_when_large();
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

    /// The vectors a data dir written before the file kept in sled, when `maker` made them, for the
    /// entries `index` lacks.
    fn legacy_vectors(&self, maker: Maker, index: &VectorIndex) -> Result<Vec<Stored>> {
        let legacy_maker = format!("{}:{:016x}", maker.dims, maker.fingerprint);
        if self.meta.get(META_MODEL)?.as_deref() != Some(legacy_maker.as_bytes()) {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for item in self.semantic.legacy.iter() {
            let (key, value) = item?;
            let id = parse_id_bytes(&key)?;
            let Some(vectors) = DocVectors::decode(&value) else {
                continue;
            };
            if index.has(&id).0 || vectors.summary.values.len() != maker.dims {
                continue;
            }
            if let Some(entry) = self.get(&id)? {
                out.push(Stored {
                    id,
                    kind: entry.entry_type.kind(),
                    group: entry.project,
                    vectors,
                });
            }
        }
        Ok(out)
    }

    /// Embeds and stores the vectors of `ids` that have none (read again: they may have
    /// changed). Returns how many were embedded, or with [`Counted::Every`], how many of
    /// `ids` have vectors now.
    fn embed_entries(&self, embedder: &Embedder, ids: &[Ulid], counted: Counted) -> Result<u64> {
        let _guard = self.lock_writes();
        let mut stored = Vec::new();
        let mut had = 0;
        for id in ids {
            if self.semantic.read_index().has(id).0 {
                had += 1;
                continue;
            }
            let Some(entry) = self.get(id)? else {
                continue;
            };
            stored.push(Semantic::stored(embedder, &entry));
        }
        let done = stored.len() as u64
            + match counted {
                Counted::Every => had,
                Counted::Embedded => 0,
            };
        self.semantic.put(stored);
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAKER: Maker = Maker {
        dims: 16,
        fingerprint: 3,
    };

    /// A unit vector drawn from `seed`, near one of 40 directions (a clustered table).
    fn vector(seed: u64) -> Quantised {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 2000) as f32 / 1000.0 - 1.0
        };
        let centre = (seed % 40) as usize;
        let v: Vec<f32> = (0..MAKER.dims)
            .map(|d| next() * 0.3 + if d == centre % MAKER.dims { 1.0 } else { 0.0 })
            .collect();
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        Quantised::of(&v.iter().map(|x| x / norm).collect::<Vec<_>>())
    }

    fn stored(n: u64) -> Stored {
        Stored {
            id: Ulid::from_parts(n, n as u128),
            kind: EntryType::ALL[n as usize % EntryType::ALL.len()].kind(),
            group: n.is_multiple_of(3).then(|| "Web".to_string()),
            vectors: DocVectors {
                summary: vector(n),
                context: n.is_multiple_of(5).then(|| vector(n + 1)),
            },
        }
    }

    /// What a memory reads at open ([`read_table`]), its base mapped.
    fn reopen(log: &Path) -> VectorIndex {
        let (index, _) = read_table(log, MAKER).unwrap();
        assert_ne!(index.generation(), 0, "the base is mapped");
        index
    }

    fn searches(index: &VectorIndex) -> Vec<Vec<(Ulid, f32)>> {
        let mut out = Vec::new();
        for q in 0..30 {
            let query = vector(1_000_000 + q);
            out.push(index.nearest_exact(&query, 10, Filter::default(), None));
            let web = Filter {
                kind: None,
                group: Some("web"),
            };
            out.push(index.nearest_exact(&query, 5, web, None));
        }
        out
    }

    /// A vector file at `log` and a table of `all`'s rows, written to it, not cut yet.
    fn uncut_table(log: &Path, all: &[Stored]) -> (Arc<Mutex<Option<VectorFile>>>, VectorIndex) {
        let file = VectorFile::create(log, MAKER, ENTRY_KINDS, 0, &[]).unwrap();
        let file = Arc::new(Mutex::new(Some(file)));
        let mut table = VectorIndex::new(MAKER.dims);
        let records: Vec<VectorRecord> = all.iter().cloned().map(VectorRecord::Put).collect();
        for s in all {
            table.upsert_stored(s);
        }
        lock_file(&file).as_mut().unwrap().append(&records).unwrap();
        (file, table)
    }

    #[test]
    fn a_cut_gives_up_when_the_memory_closes_and_leaves_the_files_as_they_were() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("memory-vectors");
        let all: Vec<Stored> = (0..6000).map(stored).collect();
        let (file, table) = uncut_table(&log, &all);
        let before = searches(&table);
        let files = || {
            let mut names: Vec<(String, u64)> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| {
                    let e = e.unwrap();
                    let name = e.file_name().to_string_lossy().into_owned();
                    (name, e.metadata().unwrap().len())
                })
                .collect();
            names.sort();
            names
        };
        let was = files();
        let index = RwLock::new(table);

        assert!(!cut_into_lists(&index, &file, &AtomicBool::new(true)));
        assert_eq!(files(), was, "no base written, the vector file untouched");
        let table = read(&index);
        assert_eq!((table.generation(), table.list_count()), (0, 0));
        assert!(
            !table.cut_pending() && table.wants_lists(),
            "a later cut starts anew"
        );
        assert_eq!(searches(&table), before);
        drop(table);

        // The memory's drop stops a cut that runs: once it returns, the files stay as
        // they are.
        let other = dir.path().join("other");
        let (file, table) = uncut_table(&other, &all);
        let db = sled::Config::new().temporary(true).open().unwrap();
        let semantic = Semantic::open(&db, &other).unwrap();
        *semantic.write_index() = table;
        *semantic.lock_file() = lock_file(&file).take();
        // A reader holds the table a moment: the cut waits for it to begin, and the
        // memory is dropped meanwhile.
        let (index, (held, held_now)) = (Arc::clone(&semantic.index), mpsc::channel());
        let reader = std::thread::spawn(move || {
            let _table = read(&index);
            held.send(()).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(200));
        });
        held_now.recv().unwrap();
        semantic.cut_when_large();
        assert!(semantic.lists_job.lock().unwrap().is_some(), "a cut runs");
        let table = Arc::clone(&semantic.index);
        drop(semantic);
        let after_drop = files();
        reader.join().unwrap();
        assert_eq!(Arc::strong_count(&table), 1, "no cut holds the table");
        assert_eq!(files(), after_drop, "nothing written after the drop");
        assert_eq!(
            after_drop.len(),
            was.len() + 1,
            "no base of the other table"
        );
    }

    #[test]
    fn a_bulk_embed_lets_the_rows_in_memory_reach_the_base_before_a_cut() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("memory-vectors");
        let all: Vec<Stored> = (0..6000).map(stored).collect();
        let (file, table) = uncut_table(&log, &all);
        let index = RwLock::new(table);
        assert!(cut_into_lists(&index, &file, &AtomicBool::new(false)));
        // 4,200 rows since the base of 6,000: past what a daemon keeps in memory between
        // cuts (4,096 here), short of the base's size and of twice the table's lists.
        let mut table = write(&index);
        for n in 6000..10_200 {
            table.upsert_stored(&stored(n));
        }
        let bulk = AtomicUsize::new(1);
        assert!(table.wants_lists() && !table.wants_cut(true));
        assert!(
            !cut_wanted(&table, &bulk),
            "no cut while the bulk embed runs"
        );
        bulk.store(0, Ordering::Relaxed);
        assert!(cut_wanted(&table, &bulk), "a cut once it ends");
        // Once the table has doubled since its lists were made, it is cut in bulk too.
        for n in 10_200..12_100 {
            table.upsert_stored(&stored(n));
        }
        assert!(table.wants_cut(true));
    }

    #[test]
    fn a_large_table_is_cut_into_a_base_that_a_reopened_memory_maps() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("memory-vectors");
        let all: Vec<Stored> = (0..6000).map(stored).collect();
        let (file, table) = uncut_table(&log, &all);
        assert!(table.wants_lists());
        let before = searches(&table);
        let index = RwLock::new(table);

        assert!(cut_into_lists(&index, &file, &AtomicBool::new(false)));
        let log_len = || fs_len(&log);
        {
            let table = read(&index);
            assert_eq!((table.generation(), table.len()), (1, 6000));
            assert_eq!(table.rows_since_base(), 0);
            assert!(table.list_count() > 0);
            assert_eq!(
                searches(&table),
                before,
                "the base finds what the table did"
            );
            // Every row's vectors, its context among them, and its type are the base's.
            for s in all.iter().step_by(7) {
                assert_eq!(table.get(&s.id), Some(s.vectors.summary.clone()));
                assert_eq!(table.has(&s.id), (true, s.vectors.context.is_some()));
                assert_eq!(table.kind(&s.id), Some(s.kind));
            }
            assert!(!table.wants_lists());
        }
        assert!(vector_base::path_of(&log, 1).exists());
        assert_eq!(lock_file(&file).as_ref().unwrap().generation(), 1);
        assert_eq!(log_len(), 32, "the file holds no record the base has");

        // Changes after the cut: a row replaced, one removed, one added; a reopened memory
        // reads the same table.
        let changed = Stored {
            vectors: DocVectors {
                summary: vector(123_456_789),
                context: None,
            },
            ..stored(5)
        };
        let added = stored(9000);
        let removed = all[11].id;
        {
            let mut table = write(&index);
            table.upsert_stored(&changed);
            table.upsert_stored(&added);
            table.remove(&removed);
            let mut file = lock_file(&file);
            let file = file.as_mut().unwrap();
            file.append(&[
                VectorRecord::Put(changed.clone()),
                VectorRecord::Put(added.clone()),
                VectorRecord::Drop(removed),
            ])
            .unwrap();
        }
        let now = searches(&read(&index));
        let reopened = reopen(&log);
        assert_eq!(reopened.len(), 6000);
        assert_eq!(reopened.has(&removed), (false, false));
        assert_eq!(reopened.has(&changed.id), (true, false));
        assert_eq!(reopened.get(&changed.id), Some(vector(123_456_789)));
        assert_eq!(searches(&reopened), now);
        let query = vector(123_456_789);
        let found = reopened.nearest(&query, 3, Filter::default(), None);
        assert_eq!(found[0].0, changed.id, "{found:?}");

        // A second cut keeps the centroids (the table has not doubled), writes the next
        // generation and removes the first.
        assert!(cut_into_lists(&index, &file, &AtomicBool::new(false)));
        assert_eq!(read(&index).generation(), 2);
        assert_eq!(searches(&read(&index)), now);
        assert!(!vector_base::path_of(&log, 1).exists());
        let reopened = reopen(&log);
        assert_eq!(searches(&reopened), now);
        assert_eq!(reopened.has(&removed), (false, false));
    }

    fn fs_len(path: &Path) -> u64 {
        std::fs::metadata(path).unwrap().len()
    }
}
