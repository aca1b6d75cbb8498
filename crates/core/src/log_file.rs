//! The log file, rotated by size so that its files together stay under a cap however much
//! Tandem is made to log: past [`Rotation::max_bytes`], `tandem.log` becomes
//! `tandem.log.1`, the old `.1` becomes `.2`, and so on up to [`Rotation::keep`] old files;
//! the oldest is dropped.
//!
//! Several processes append to one log (the daemon, the CLI, `tandem mcp` proxies), each
//! through its own [`RotatingFile`]. They take turns through an advisory lock on a file
//! beside the log (`tandem.log.lock`), held for one line: its writer checks that its open
//! file is still the one the log's path names (another process may have rotated it away,
//! or the user removed it: then the path is opened again), rotates when the line would
//! take the file past its limit, and appends. So no line is ever written into a file that
//! a rotation has moved on or dropped, two processes that both find the log full rotate it
//! once, and no file passes its limit. A line is small, so the turns are short.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use tracing_subscriber::fmt::MakeWriter;

/// When the log is rotated, and how many old files are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rotation {
    /// The size a file never passes: a line that would take it past is written to a new
    /// one (and a single line longer than this is cut).
    pub max_bytes: u64,
    /// How many rotated files (`.1`, `.2`, ...) are kept.
    pub keep: u32,
    /// The longest line kept whole: a longer one is cut there, and marked. A line can hold
    /// what a peer sent (a downstream server's message, a client's field in rmcp's
    /// warnings), which no one reads at a megabyte.
    pub max_line: usize,
}

impl Rotation {
    /// Tandem's log: the files together stay under `(keep + 1) * max_bytes`.
    pub const LOG: Rotation = Rotation {
        max_bytes: 10 * 1024 * 1024,
        keep: 3,
        max_line: 16 * 1024,
    };
}

/// A log file that rotates by size, shared safely with other processes rotating it too: a
/// [`MakeWriter`] for `tracing_subscriber`, which writes each event in one call.
#[derive(Debug)]
pub struct RotatingFile {
    path: PathBuf,
    rotation: Rotation,
    state: Mutex<Open>,
}

/// The open log, and the lock file every process writing it shares.
#[derive(Debug)]
struct Open {
    file: File,
    lock_file: File,
}

impl RotatingFile {
    /// Opens (creates) the log at `path` for appending, and its lock file beside it.
    pub fn open(path: &Path, rotation: Rotation) -> io::Result<RotatingFile> {
        let lock_path = sibling(path, "lock");
        let lock_file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(lock_path)?;
        Ok(RotatingFile {
            path: path.to_path_buf(),
            rotation,
            state: Mutex::new(Open {
                file: append(path)?,
                lock_file,
            }),
        })
    }

    /// The path of the `n`th rotated file (`tandem.log.1`, ...).
    fn rotated(&self, n: u32) -> PathBuf {
        sibling(&self.path, &n.to_string())
    }

    /// Appends `line` (cut at the file's limit) to the file the path names now, rotating
    /// first when it would pass the limit. Called with the lock held.
    fn write_line(&self, open: &mut Open, line: &[u8]) -> io::Result<()> {
        let cut;
        let line = if line.len() > self.rotation.max_line {
            cut = cut_line(line, self.rotation.max_line);
            &cut[..]
        } else {
            line
        };
        let line = &line[..line.len().min(self.rotation.max_bytes as usize)];
        if !same_file(&open.file, &self.path) {
            open.file = append(&self.path)?;
        }
        let size = open.file.metadata()?.len();
        if size > 0 && size + line.len() as u64 > self.rotation.max_bytes {
            self.shift()?;
            open.file = append(&self.path)?;
        }
        open.file.write_all(line)
    }

    /// Renames the log to `.1`, `.1` to `.2`, ..., the last kept one replacing (dropping)
    /// the file after it.
    fn shift(&self) -> io::Result<()> {
        if self.rotation.keep == 0 {
            return std::fs::remove_file(&self.path);
        }
        for n in (1..self.rotation.keep).rev() {
            match std::fs::rename(self.rotated(n), self.rotated(n + 1)) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        std::fs::rename(&self.path, self.rotated(1))
    }

    fn state(&self) -> MutexGuard<'_, Open> {
        // A panic while writing leaves a file that can still be written.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One event's writer: [`RotatingFile::write_line`] for each write.
#[derive(Debug)]
pub struct LogWriter<'a>(&'a RotatingFile);

impl Write for LogWriter<'_> {
    fn write(&mut self, line: &[u8]) -> io::Result<usize> {
        let log = self.0;
        let mut open = log.state();
        // Where the file system has no locks, lines are still written, taking the small
        // risk of a line into a file dropped meanwhile.
        let locked = open.lock_file.lock().is_ok();
        let written = log.write_line(&mut open, line);
        if locked {
            open.lock_file.unlock()?;
        }
        written.map(|()| line.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for RotatingFile {
    type Writer = LogWriter<'a>;

    fn make_writer(&'a self) -> LogWriter<'a> {
        LogWriter(self)
    }
}

/// What marks a line cut at [`Rotation::max_line`].
const CUT: &[u8] = " [line cut]\n".as_bytes();

/// `line` cut to at most `max` bytes, at a character's start, and marked.
fn cut_line(line: &[u8], max: usize) -> Vec<u8> {
    let mut end = max.saturating_sub(CUT.len());
    // Not inside a UTF-8 character: back to the start of the one there.
    while end > 0
        && line
            .get(end)
            .is_some_and(|b| b & 0b1100_0000 == 0b1000_0000)
    {
        end -= 1;
    }
    let mut cut = line[..end].to_vec();
    cut.extend_from_slice(CUT);
    cut
}

fn append(path: &Path) -> io::Result<File> {
    File::options().create(true).append(true).open(path)
}

/// `path` with `.suffix` added to its file name.
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(".");
    name.push(suffix);
    PathBuf::from(name)
}

/// Whether `path` names `file` (not another file, and not nothing).
fn same_file(file: &File, path: &Path) -> bool {
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: Rotation = Rotation {
        max_bytes: 1000,
        keep: 3,
        max_line: usize::MAX,
    };

    /// The log's files, newest first: the log, then `.1`, `.2`, ... as far as they exist.
    fn files(log: &RotatingFile) -> Vec<String> {
        let mut texts = vec![std::fs::read_to_string(&log.path).unwrap()];
        let mut n = 1;
        while let Ok(text) = std::fs::read_to_string(log.rotated(n)) {
            texts.push(text);
            n += 1;
        }
        texts
    }

    fn write(log: &RotatingFile, line: &str) {
        log.make_writer().write_all(line.as_bytes()).unwrap();
    }

    #[test]
    fn a_long_line_is_cut_at_a_character_and_marked() {
        let dir = tempfile::tempdir().unwrap();
        let rotation = Rotation {
            max_line: 40,
            ..SMALL
        };
        let log = RotatingFile::open(&dir.path().join("tandem.log"), rotation).unwrap();
        write(&log, "short\n");
        write(&log, &format!("{}\n", "é".repeat(100)));
        let text = &files(&log)[0];
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "short");
        assert!(
            lines[1].ends_with(" [line cut]") && lines[1].len() <= 40,
            "{}",
            lines[1]
        );
        assert!(lines[1].starts_with("éé"), "cut at a character's start");
    }

    #[test]
    fn writing_past_the_limit_rotates_and_the_total_stays_under_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let log = RotatingFile::open(&dir.path().join("tandem.log"), SMALL).unwrap();
        let lines: Vec<String> = (0..500).map(|i| format!("line {i:04}\n")).collect();
        for line in &lines {
            write(&log, line);
        }
        let files = files(&log);
        assert_eq!(files.len(), 1 + SMALL.keep as usize, "{files:?}");
        for text in &files {
            assert!(text.len() as u64 <= SMALL.max_bytes, "{}", text.len());
        }
        // The newest lines, in order, with none missing: the oldest files were dropped.
        let kept: String = files.iter().rev().map(String::as_str).collect();
        let all: String = lines.concat();
        assert!(all.ends_with(&kept), "{kept}");
        assert!(kept.len() as u64 > SMALL.keep as u64 * (SMALL.max_bytes - 10));

        // A line longer than a file's limit is cut to it.
        write(&log, &"x".repeat(5000));
        let newest = std::fs::read_to_string(&log.path).unwrap();
        assert_eq!(newest, "x".repeat(SMALL.max_bytes as usize));
    }

    #[test]
    fn two_writers_both_keep_logging_after_a_rotation() {
        // Two processes' logs on one path: each has its own file and lock handles.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tandem.log");
        let a = RotatingFile::open(&path, SMALL).unwrap();
        let b = RotatingFile::open(&path, SMALL).unwrap();
        for i in 0..300 {
            write(&a, &format!("a {i:04}\n"));
            write(&b, &format!("b {i:04}\n"));
        }
        let files = files(&a);
        assert_eq!(files.len(), 1 + SMALL.keep as usize);
        assert!(files[0].contains("a 0299\n") && files[0].ends_with("b 0299\n"));
        // Every line written since the oldest kept one is there, in order.
        let kept: String = files.iter().rev().map(String::as_str).collect();
        let all: String = (0..300).map(|i| format!("a {i:04}\nb {i:04}\n")).collect();
        assert!(all.ends_with(&kept), "{kept}");

        // Removed by hand: the next line makes it again.
        std::fs::remove_file(&path).unwrap();
        write(&b, "b again\n");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "b again\n");
    }

    #[test]
    fn writers_on_threads_lose_no_line_to_a_dropped_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tandem.log");
        let rotation = Rotation {
            max_bytes: 4000,
            keep: 2,
            max_line: usize::MAX,
        };
        let writers: Vec<RotatingFile> = (0..3)
            .map(|_| RotatingFile::open(&path, rotation).unwrap())
            .collect();
        std::thread::scope(|s| {
            for (w, log) in writers.iter().enumerate() {
                s.spawn(move || {
                    for i in 0..2000 {
                        write(log, &format!("{w} {i:05}\n"));
                    }
                });
            }
        });
        let files = files(&writers[0]);
        assert_eq!(files.len(), 1 + rotation.keep as usize);
        for text in &files {
            assert!(text.len() as u64 <= rotation.max_bytes, "{}", text.len());
        }
        // Each writer's lines kept are its newest ones, with no gap: a gap would be lines
        // written into a file that a rotation had already dropped. A writer that finished
        // first may have had all its lines rotated out: none kept is no gap.
        for w in 0..writers.len() {
            let mine: Vec<u32> = files
                .iter()
                .rev()
                .flat_map(|text| text.lines())
                .filter_map(|l| l.strip_prefix(&format!("{w} ")))
                .map(|n| n.parse().unwrap())
                .collect();
            let first = mine.first().copied().unwrap_or(2000);
            assert_eq!(mine, (first..2000).collect::<Vec<_>>(), "writer {w}");
        }
    }
}
