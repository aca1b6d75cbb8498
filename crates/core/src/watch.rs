//! Watching a workspace's files on disk while a task runs in it, so that an agent's edits
//! show in the editor without waiting for its next tracking call.
//!
//! One [`Watch`] per tree, shared by whoever holds it: [`Watches::watch`] returns the running
//! one or starts it, and it stops when the last handle is dropped (the LSP sessions of a
//! workspace each hold one while their focus task runs). A watch publishes
//! [`Event::Files`] on the core's bus: the changed paths, gathered for [`DEBOUNCE`] from the
//! first change, or [`FilesChange::Rescan`] when paths alone cannot say what changed (a
//! commit or checkout, a directory moved away, an ignore file edited, the watch just became
//! ready). Reads are not changes: notify's inotify backend reports every `open`, and the
//! diffs that follow a change read the files again.
//!
//! With inotify (Linux) every directory is a watch of its own. The tree is walked once as
//! git would (ignore files honoured), so ignored trees such as `node_modules/` cost no
//! watch; `.git/` is skipped except its `HEAD`, `packed-refs` and `refs/heads/`. At most
//! [`max_dirs`] directories get an inotify watch, shallowest first; past that, or when the
//! kernel refuses one (`fs.inotify.max_user_watches`), a warning is logged once and the
//! other directories are polled every [`POLL_INTERVAL`] instead (notify's `PollWatcher`,
//! by modification time): slower, never blind. Other platforms' watchers are recursive by
//! nature (FSEvents, ReadDirectoryChangesW): the root is watched once and events are
//! filtered the same way.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use ignore::WalkBuilder;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use notify::{EventKind, PollWatcher, RecommendedWatcher, RecursiveMode, Watcher, WatcherKind};

use crate::events::{Bus, Event, FilesChange};
use crate::tasks::checksum::SKIPPED_DIRS;

/// Changes are gathered this long from the first one, then published together.
pub const DEBOUNCE: Duration = Duration::from_millis(15);
/// More changed files than this at once (a checkout, a generator) are a rescan: one diff of
/// the whole tree costs less than a diff limited to that many paths.
pub const MAX_PATHS: usize = 256;
/// How often directories past the watch limit are polled.
pub const POLL_INTERVAL: Duration = Duration::from_secs(2);
/// A polled change is reported again this much later (see `Tree::poll`).
const POLL_REPEAT: Duration = Duration::from_millis(1100);
/// The environment variable that sets [`max_dirs`].
pub const MAX_DIRS_ENV: &str = "TANDEM_WATCH_MAX_DIRS";
/// The most directories one tree watches with inotify unless [`MAX_DIRS_ENV`] says otherwise
/// (and at most half the system's `max_user_watches`, which every program of the user shares).
pub const DEFAULT_MAX_DIRS: usize = 16_384;

/// How many directories a tree may watch natively: [`MAX_DIRS_ENV`] if set, else
/// [`DEFAULT_MAX_DIRS`] or half of `/proc/sys/fs/inotify/max_user_watches`, the smaller.
pub fn max_dirs() -> usize {
    if let Ok(v) = std::env::var(MAX_DIRS_ENV) {
        match v.trim().parse() {
            Ok(n) => return n,
            Err(_) => tracing::warn!("{MAX_DIRS_ENV}={v:?} is not a number; using the default"),
        }
    }
    system_max_watches()
        .map(|n| n / 2)
        .unwrap_or(DEFAULT_MAX_DIRS)
        .min(DEFAULT_MAX_DIRS)
}

fn system_max_watches() -> Option<usize> {
    std::fs::read_to_string("/proc/sys/fs/inotify/max_user_watches")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The running watches of this process, by root.
pub struct Watches {
    bus: Bus,
    live: Mutex<HashMap<PathBuf, Weak<Watch>>>,
}

impl Watches {
    pub fn new(bus: Bus) -> Watches {
        Watches {
            bus,
            live: Mutex::new(HashMap::new()),
        }
    }

    /// The watch of the tree at `root`, started if none runs. It runs until the last handle
    /// is dropped. Returns at once: the walk and the watches are set up on the watch's own
    /// thread, which publishes [`FilesChange::Rescan`] once they are in place.
    pub fn watch(&self, root: &Path) -> Arc<Watch> {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        live.retain(|_, w| w.strong_count() > 0);
        if let Some(w) = live.get(root).and_then(Weak::upgrade) {
            return w;
        }
        let w = Arc::new(Watch::start(root, self.bus.clone()));
        live.insert(root.to_path_buf(), Arc::downgrade(&w));
        w
    }
}

/// What a watch is doing, for status requests.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WatchStatus {
    pub root: PathBuf,
    /// Set up and reporting changes.
    pub ready: bool,
    /// Directories with a native (inotify) watch.
    pub watched_dirs: usize,
    /// Directories past the limit, polled every [`POLL_INTERVAL`].
    pub polled_dirs: usize,
}

#[derive(Default)]
struct Counters {
    ready: AtomicBool,
    watched: AtomicUsize,
    polled: AtomicUsize,
}

/// A handle on a running watch; the watch stops when the last one is dropped.
pub struct Watch {
    root: PathBuf,
    counters: Arc<Counters>,
    control: mpsc::Sender<Msg>,
}

enum Msg {
    Fs(notify::Result<notify::Event>),
    Stop,
}

impl Watch {
    fn start(root: &Path, bus: Bus) -> Watch {
        let (tx, rx) = mpsc::channel();
        let counters = Arc::new(Counters::default());
        let (r, c, t) = (root.to_path_buf(), counters.clone(), tx.clone());
        let spawned = std::thread::Builder::new()
            .name("tandem-watch".into())
            .spawn(move || run(r, bus, t, rx, c));
        if let Err(e) = spawned {
            tracing::error!("cannot start watching {}: {e}", root.display());
        }
        Watch {
            root: root.to_path_buf(),
            counters,
            control: tx,
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn status(&self) -> WatchStatus {
        WatchStatus {
            root: self.root.clone(),
            ready: self.counters.ready.load(Ordering::Relaxed),
            watched_dirs: self.counters.watched.load(Ordering::Relaxed),
            polled_dirs: self.counters.polled.load(Ordering::Relaxed),
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        // The thread ends and drops the watchers, which end theirs.
        let _ = self.control.send(Msg::Stop);
    }
}

/// The watch's thread: set up, then gather changes and publish them until stopped.
fn run(
    root: PathBuf,
    bus: Bus,
    tx: mpsc::Sender<Msg>,
    rx: mpsc::Receiver<Msg>,
    counters: Arc<Counters>,
) {
    let started = Instant::now();
    let mut tree = Tree::start(&root, tx, counters.clone());
    counters.ready.store(true, Ordering::Relaxed);
    tracing::info!(
        "watching {} ({} directories, {} polled) after {:?}",
        root.display(),
        tree.watched.len(),
        tree.polled.len(),
        started.elapsed()
    );
    // Whatever changed while the watches were being set up.
    bus.publish(Event::Files {
        root: root.clone(),
        change: FilesChange::Rescan,
    });
    if !tree.polled.is_empty() {
        // The poller's first look took mtimes in whole seconds: a write later in that same
        // second would never show as a change. One more rescan once that second has passed.
        let again = tree.tx.clone();
        std::thread::spawn(move || {
            std::thread::sleep(POLL_REPEAT);
            let rescan = notify::Event::new(EventKind::Other).set_flag(notify::event::Flag::Rescan);
            let _ = again.send(Msg::Fs(Ok(rescan)));
        });
    }
    'events: loop {
        let mut batch = Batch::default();
        match rx.recv() {
            Ok(Msg::Fs(e)) => batch.absorb(e),
            Ok(Msg::Stop) | Err(_) => break,
        }
        let until = Instant::now() + DEBOUNCE;
        loop {
            match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
                Ok(Msg::Fs(e)) => batch.absorb(e),
                Ok(Msg::Stop) | Err(RecvTimeoutError::Disconnected) => break 'events,
                Err(RecvTimeoutError::Timeout) => break,
            }
        }
        if let Some(change) = tree.settle(batch) {
            bus.publish(Event::Files {
                root: root.clone(),
                change,
            });
        }
    }
    tracing::info!("stopped watching {}", root.display());
}

/// Raw events gathered over one debounce window.
#[derive(Default)]
struct Batch {
    paths: BTreeSet<PathBuf>,
    rescan: bool,
    limit_hit: bool,
}

impl Batch {
    fn absorb(&mut self, event: notify::Result<notify::Event>) {
        match event {
            Ok(e) if e.need_rescan() => self.rescan = true,
            // Reads change nothing.
            Ok(e) if matches!(e.kind, EventKind::Access(_)) => {}
            Ok(e) => self.paths.extend(e.paths),
            Err(e) if matches!(e.kind, notify::ErrorKind::MaxFilesWatch) => self.limit_hit = true,
            Err(e) => tracing::debug!("watch error: {e}"),
        }
    }
}

/// The watched tree: its watchers, which directories each covers, its ignore rules.
struct Tree {
    root: PathBuf,
    /// The repository's git dir (`HEAD`) and common dir (`packed-refs`, `refs/`).
    git: Option<(PathBuf, PathBuf)>,
    /// Directories skipped whatever the ignore files say.
    skipped: &'static [&'static str],
    /// Ignore rules by the directory holding them (`.gitignore`, `.ignore`; the root's also
    /// `.git/info/exclude`), and the user's global excludes.
    ignores: HashMap<PathBuf, Gitignore>,
    global: Gitignore,
    /// None when the system would not give one (inotify instances are limited too): then
    /// every directory is polled.
    native: Option<RecommendedWatcher>,
    /// Whether `native` watches a whole tree at once (not inotify).
    recursive: bool,
    poller: Option<PollWatcher>,
    watched: HashSet<PathBuf>,
    polled: HashSet<PathBuf>,
    limit: usize,
    /// The limit was met: new directories are polled.
    overflowed: bool,
    tx: mpsc::Sender<Msg>,
    counters: Arc<Counters>,
}

const IGNORE_FILES: &[&str] = &[".gitignore", ".ignore"];

impl Tree {
    fn start(root: &Path, tx: mpsc::Sender<Msg>, counters: Arc<Counters>) -> Tree {
        let git = git2::Repository::open(root)
            .ok()
            .filter(|r| !r.is_bare())
            .map(|r| (strip_slash(r.path()), strip_slash(r.commondir())));
        let sender = tx.clone();
        let config = notify::Config::default().with_follow_symlinks(false);
        let native = RecommendedWatcher::new(
            move |e| {
                let _ = sender.send(Msg::Fs(e));
            },
            config,
        );
        let mut tree = Tree {
            root: root.to_path_buf(),
            skipped: if git.is_some() {
                &[".git"]
            } else {
                SKIPPED_DIRS
            },
            git,
            ignores: HashMap::new(),
            global: Gitignore::global().0,
            native: None,
            recursive: RecommendedWatcher::kind() != WatcherKind::Inotify,
            poller: None,
            watched: HashSet::new(),
            polled: HashSet::new(),
            limit: max_dirs(),
            overflowed: false,
            tx,
            counters,
        };
        match native {
            Ok(n) => tree.native = Some(n),
            Err(e) => tree.overflow(&format!("no native file watcher ({e})")),
        }
        let (mut dirs, _) = tree.walk(root, false);
        if tree.recursive
            && let Some(n) = &mut tree.native
            && n.watch(root, RecursiveMode::Recursive).is_ok()
        {
            tree.watched.insert(root.to_path_buf());
            tree.count();
        } else {
            // Shallowest first: past the limit, the deep directories are the ones polled.
            dirs.sort_by_key(|d| d.components().count());
            let mut git_dirs = Vec::new();
            if let Some((git_dir, common)) = &tree.git {
                git_dirs.push(git_dir.clone());
                git_dirs.push(common.clone());
                let heads = common.join("refs/heads");
                git_dirs.extend(walkdir_dirs(&heads));
            }
            let rest = dirs.split_off(dirs.len().min(1));
            tree.add_dirs(dirs.into_iter().chain(git_dirs).chain(rest));
        }
        tree
    }

    /// Walks `dir` as git would: its directories (itself first) and, with `files`, its
    /// files. Ignore files met on the way join the rules.
    fn walk(&mut self, dir: &Path, files: bool) -> (Vec<PathBuf>, Vec<PathBuf>) {
        let skipped = self.skipped;
        let walker = WalkBuilder::new(dir)
            .hidden(false)
            .git_ignore(true)
            .git_exclude(true)
            .git_global(true)
            .ignore(true)
            .require_git(false)
            .follow_links(false)
            .filter_entry(move |e| {
                !(e.file_type().is_some_and(|t| t.is_dir())
                    && e.file_name().to_str().is_some_and(|n| skipped.contains(&n)))
            })
            .build();
        let want_files = files;
        let (mut dirs, mut files) = (Vec::new(), Vec::new());
        let mut rules = Vec::new();
        for entry in walker.flatten() {
            let Some(kind) = entry.file_type() else {
                continue;
            };
            let path = entry.into_path();
            if kind.is_dir() {
                dirs.push(path);
            } else {
                if is_ignore_file(&path) {
                    rules.extend(path.parent().map(Path::to_path_buf));
                }
                if want_files {
                    files.push(path);
                }
            }
        }
        if dir == self.root {
            rules.push(self.root.clone());
        }
        rules.sort();
        rules.dedup();
        for d in rules {
            self.load_rules(&d);
        }
        (dirs, files)
    }

    /// (Re)reads the ignore rules of directory `dir`.
    fn load_rules(&mut self, dir: &Path) {
        let mut b = GitignoreBuilder::new(dir);
        for name in IGNORE_FILES {
            let f = dir.join(name);
            if f.is_file() {
                b.add(f);
            }
        }
        if dir == self.root
            && let Some((git_dir, _)) = &self.git
        {
            b.add(git_dir.join("info/exclude"));
        }
        match b.build() {
            Ok(g) if !g.is_empty() => {
                self.ignores.insert(dir.to_path_buf(), g);
            }
            _ => {
                self.ignores.remove(dir);
            }
        }
    }

    /// Whether git would ignore `path` (under the root).
    fn ignored(&self, path: &Path, is_dir: bool) -> bool {
        let Ok(rel) = path.strip_prefix(&self.root) else {
            return true;
        };
        let skipped = |c: std::path::Component<'_>| {
            c.as_os_str()
                .to_str()
                .is_some_and(|n| self.skipped.contains(&n))
        };
        if rel.components().any(skipped) {
            return true;
        }
        // Only a recursive watcher reports from inside ignored directories.
        if self.recursive
            && path
                .ancestors()
                .skip(1)
                .take_while(|a| *a != self.root)
                .any(|a| self.matches(a, true))
        {
            return true;
        }
        self.matches(path, is_dir)
    }

    /// What the ignore rules say of `path`: the deepest rule that says anything decides.
    fn matches(&self, path: &Path, is_dir: bool) -> bool {
        for dir in path.ancestors().skip(1) {
            if let Some(m) = self.ignores.get(dir) {
                let r = m.matched(path, is_dir);
                if !r.is_none() {
                    return r.is_ignore();
                }
            }
            if dir == self.root {
                break;
            }
        }
        self.global.matched(path, is_dir).is_ignore()
    }

    /// Watches `dirs` (in order) natively up to the limit, polls the rest.
    fn add_dirs(&mut self, dirs: impl IntoIterator<Item = PathBuf>) {
        for dir in dirs {
            if self.watched.contains(&dir) || self.polled.contains(&dir) {
                continue;
            }
            if !self.overflowed && self.watched.len() >= self.limit {
                self.overflow(&format!(
                    "more than {} directories ({MAX_DIRS_ENV})",
                    self.limit
                ));
            }
            if !self.overflowed
                && let Some(native) = &mut self.native
            {
                match native.watch(&dir, RecursiveMode::NonRecursive) {
                    Ok(()) => {
                        self.watched.insert(dir);
                        continue;
                    }
                    Err(e) if matches!(e.kind, notify::ErrorKind::MaxFilesWatch) => {
                        self.system_limit();
                    }
                    Err(e) => {
                        tracing::debug!("cannot watch {}: {e}", dir.display());
                        continue;
                    }
                }
            }
            self.poll(dir);
        }
        self.count();
    }

    fn system_limit(&mut self) {
        let max = system_max_watches().map_or("?".into(), |n| n.to_string());
        self.overflow(&format!(
            "the system's inotify watch limit (fs.inotify.max_user_watches = {max}, shared by every program of the user) after {} directories",
            self.watched.len()
        ));
    }

    /// Logs, once, that directories from now on are polled.
    fn overflow(&mut self, why: &str) {
        if self.overflowed {
            return;
        }
        self.overflowed = true;
        tracing::warn!(
            "watching {}: reached {why}; further directories are polled every {} s instead, so changes there show within that time",
            self.root.display(),
            POLL_INTERVAL.as_secs()
        );
    }

    fn poll(&mut self, dir: PathBuf) {
        if self.poller.is_none() {
            let sender = self.tx.clone();
            let config = notify::Config::default()
                .with_poll_interval(POLL_INTERVAL)
                .with_follow_symlinks(false);
            // The poller sees a file change only when its mtime, in whole seconds, grows: a
            // second write within the second of one it reported would go unseen. So each
            // report is repeated once that second has passed (the diff then reads the file
            // as it is); any later write has a later mtime and is reported anew.
            match PollWatcher::new(
                move |e: notify::Result<notify::Event>| {
                    if let Ok(event) = &e {
                        let (again, event) = (sender.clone(), event.clone());
                        std::thread::spawn(move || {
                            std::thread::sleep(POLL_REPEAT);
                            let _ = again.send(Msg::Fs(Ok(event)));
                        });
                    }
                    let _ = sender.send(Msg::Fs(e));
                },
                config,
            ) {
                Ok(p) => self.poller = Some(p),
                Err(e) => {
                    tracing::warn!("cannot poll {}: {e}", self.root.display());
                    return;
                }
            }
        }
        if let Some(p) = &mut self.poller
            && p.watch(&dir, RecursiveMode::NonRecursive).is_ok()
        {
            self.polled.insert(dir);
        }
    }

    /// Forgets a watched directory that is gone (deleted or moved away) and all below it.
    fn forget_dir(&mut self, dir: &Path) -> bool {
        if !self.watched.contains(dir) && !self.polled.contains(dir) {
            return false;
        }
        if let Some(native) = &mut self.native {
            for d in self.watched.iter().filter(|d| d.starts_with(dir)) {
                let _ = native.unwatch(d);
            }
        }
        self.watched.retain(|d| !d.starts_with(dir));
        if let Some(p) = &mut self.poller {
            for d in self.polled.iter().filter(|d| d.starts_with(dir)) {
                let _ = p.unwatch(d);
            }
        }
        self.polled.retain(|d| !d.starts_with(dir));
        self.ignores.retain(|d, _| !d.starts_with(dir));
        self.count();
        true
    }

    fn count(&self) {
        let c = &self.counters;
        c.watched.store(self.watched.len(), Ordering::Relaxed);
        c.polled.store(self.polled.len(), Ordering::Relaxed);
    }

    /// Whether `path` is inside the git dir, and if so whether it says HEAD or a branch
    /// moved (a commit, a checkout).
    fn git_signal(&self, path: &Path) -> Option<bool> {
        let (git_dir, common) = self.git.as_ref()?;
        [git_dir, common].into_iter().find_map(|base| {
            let rel = path.strip_prefix(base).ok()?;
            Some(
                rel == Path::new("HEAD")
                    || rel == Path::new("packed-refs")
                    || rel.starts_with("refs"),
            )
        })
    }

    /// What a window's events mean: the files to refresh, or a rescan.
    fn settle(&mut self, batch: Batch) -> Option<FilesChange> {
        let mut rescan = batch.rescan;
        if batch.limit_hit {
            self.system_limit();
        }
        let mut changed = BTreeSet::new();
        for path in batch.paths {
            if let Some(signal) = self.git_signal(&path) {
                if signal && path.is_dir() && !self.recursive {
                    // A new directory of branches (`refs/heads/feature/`).
                    self.add_dirs(walkdir_dirs(&path));
                }
                rescan |= signal;
                continue;
            }
            if !path.starts_with(&self.root) || path == self.root {
                continue;
            }
            let ignore_file = is_ignore_file(&path);
            match path.symlink_metadata() {
                Ok(m) if m.is_dir() => {
                    if self.recursive
                        || self.watched.contains(&path)
                        || self.polled.contains(&path)
                        || self.ignored(&path, true)
                    {
                        continue;
                    }
                    // A new directory: watch it, then report what it holds (written before
                    // its watches existed; a second walk also finds directories made
                    // meanwhile).
                    let (dirs, _) = self.walk(&path, false);
                    self.add_dirs(dirs);
                    let (dirs, files) = self.walk(&path, true);
                    self.add_dirs(dirs);
                    changed.extend(files.into_iter().filter(|f| !is_ignore_file(f)));
                }
                Ok(_) if ignore_file => {
                    if let Some(dir) = path.parent() {
                        self.load_rules(dir);
                    }
                    rescan = true;
                }
                Ok(_) => {
                    if !self.ignored(&path, false) {
                        changed.insert(path);
                    }
                }
                Err(_) => {
                    if self.forget_dir(&path) {
                        rescan = true;
                    } else if ignore_file {
                        if let Some(dir) = path.parent() {
                            self.load_rules(dir);
                        }
                        rescan = true;
                    } else if !self.ignored(&path, false) {
                        changed.insert(path);
                    }
                }
            }
        }
        if rescan || changed.len() > MAX_PATHS {
            Some(FilesChange::Rescan)
        } else if changed.is_empty() {
            None
        } else {
            Some(FilesChange::Paths(changed.into_iter().collect()))
        }
    }
}

fn is_ignore_file(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| IGNORE_FILES.contains(&n))
}

/// `dir` and the directories below it (no ignore rules: for git's own `refs/`).
fn walkdir_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        if let Ok(entries) = std::fs::read_dir(&d) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(e.path());
                }
            }
            out.push(d);
        }
    }
    out
}

/// A path as libgit2 gives it (`.../.git/`) without its trailing slash.
fn strip_slash(p: &Path) -> PathBuf {
    p.components().collect()
}
