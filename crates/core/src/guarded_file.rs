//! Reading a small file that somebody else may have put in place: a repository's
//! `.mcp.json`, or a file of the data dir.
//!
//! A repository can commit a symlink to a device (`/dev/zero` never ends) or a named pipe
//! (opening it waits for a writer): reading either the plain way grows the reader without
//! bound or blocks it for good. So the file is opened without waiting (`O_NONBLOCK`, which
//! a regular file ignores), what was opened must be a regular file (a symlink to one is
//! fine: the check is on the opened file, so nothing swapped in between a check and the
//! open gets read), and at most `max_bytes` are read.
//!
//! A file of the data dir is the user's word ([`read_private`]): like OpenSSH with its
//! config, Tandem refuses one that another user owns, or that group or others may write,
//! since whoever could write it could make Tandem run their commands as the user.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The most a configuration file may hold: far past any real one, small enough to read
/// whole.
pub const CONFIG_MAX_BYTES: u64 = 1 << 20;

/// Why a guarded file was not read. Its text names the file, says what is wrong with it and
/// what to do.
#[derive(Debug, thiserror::Error)]
#[error("{}: {problem}", path.display())]
pub struct GuardedFileError {
    pub path: PathBuf,
    pub problem: FileProblem,
}

/// What is wrong with a guarded file (its message reads after the file's name).
#[derive(Debug, thiserror::Error)]
pub enum FileProblem {
    #[error("cannot read it: {0}")]
    Io(#[from] std::io::Error),
    /// A directory, a named pipe, a device or a socket.
    #[error(
        "is a {0}, not a regular file: Tandem reads only a regular file (or a symlink to one) there"
    )]
    NotRegular(&'static str),
    #[error("is not UTF-8 text; save it as UTF-8")]
    NotUtf8,
    #[error(
        "is larger than {limit} bytes, far more than a configuration file needs: Tandem did not read it"
    )]
    TooLarge { limit: u64 },
    #[error(
        "is owned by user id {owner}, not by you (user id {you}): someone else may have put it there, so Tandem does not use it; check it, then `chown {you} {path}` or remove it"
    )]
    NotOwned { owner: u32, you: u32, path: String },
    #[error(
        "may be written by {who} (mode {mode:04o}): someone else could have changed it, so Tandem does not use it; check it, then `chmod go-w {path}`"
    )]
    Writable {
        who: &'static str,
        mode: u32,
        path: String,
    },
}

/// The content of the regular file at `path` (following symlinks), at most `max_bytes`;
/// `Ok(None)` when there is no such file.
pub fn read_regular(path: &Path, max_bytes: u64) -> Result<Option<Vec<u8>>, GuardedFileError> {
    read(path, max_bytes, false)
}

/// [`read_regular`], for a file of the data dir: refused when another user owns it or when
/// group or others may write it.
pub fn read_private(path: &Path, max_bytes: u64) -> Result<Option<Vec<u8>>, GuardedFileError> {
    read(path, max_bytes, true)
}

/// A file's content as text.
pub fn utf8(bytes: Vec<u8>) -> Result<String, FileProblem> {
    String::from_utf8(bytes).map_err(|_| FileProblem::NotUtf8)
}

fn read(path: &Path, max_bytes: u64, private: bool) -> Result<Option<Vec<u8>>, GuardedFileError> {
    let error = |problem: FileProblem| GuardedFileError {
        path: path.to_path_buf(),
        problem,
    };
    let flags = rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::NOCTTY;
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits() as i32)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(error(e.into())),
    };
    let meta = file.metadata().map_err(|e| error(e.into()))?;
    let kind = meta.file_type();
    if !kind.is_file() {
        let what = if kind.is_dir() {
            "directory"
        } else if kind.is_fifo() {
            "named pipe"
        } else if kind.is_char_device() || kind.is_block_device() {
            "device"
        } else if kind.is_socket() {
            "socket"
        } else {
            "special file"
        };
        return Err(error(FileProblem::NotRegular(what)));
    }
    if private {
        check_private(&meta, path).map_err(error)?;
    }
    read_at_most(file, max_bytes).map_err(error).map(Some)
}

/// Whether the effective user owns the file (at `path`) and only it may write it.
fn check_private(meta: &std::fs::Metadata, path: &Path) -> Result<(), FileProblem> {
    let you = rustix::process::geteuid().as_raw();
    let (owner, mode) = (meta.uid(), meta.mode() & 0o7777);
    let path = path.display().to_string();
    if owner != you {
        return Err(FileProblem::NotOwned { owner, you, path });
    }
    let who = match (mode & 0o020 != 0, mode & 0o002 != 0) {
        (true, true) => "group and others",
        (true, false) => "its group",
        (false, true) => "others",
        (false, false) => return Ok(()),
    };
    Err(FileProblem::Writable { who, mode, path })
}

fn read_at_most(file: File, max_bytes: u64) -> Result<Vec<u8>, FileProblem> {
    let mut bytes = Vec::new();
    file.take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max_bytes {
        return Err(FileProblem::TooLarge { limit: max_bytes });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn private_file(dir: &Path, mode: u32) -> PathBuf {
        let file = dir.join("config.json");
        std::fs::write(&file, "{}").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
        file
    }

    #[test]
    fn a_regular_file_is_read_and_a_missing_one_is_none() {
        let dir = tempfile::tempdir().unwrap();
        let file = private_file(dir.path(), 0o600);
        assert_eq!(read_private(&file, 10).unwrap().unwrap(), b"{}");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(read_regular(&link, 10).unwrap().unwrap(), b"{}");
        assert!(
            read_regular(&dir.path().join("absent"), 10)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn only_regular_files_are_read_and_only_so_much() {
        let dir = tempfile::tempdir().unwrap();
        let zero = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let e = read_regular(&zero, CONFIG_MAX_BYTES).unwrap_err();
        assert!(
            matches!(e.problem, FileProblem::NotRegular("device")),
            "{e}"
        );
        assert!(
            e.to_string().starts_with(&zero.display().to_string()),
            "{e}"
        );

        let fifo = dir.path().join("fifo");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .unwrap();
        // No writer ever comes: a blocking open would never return.
        let e = read_regular(&fifo, CONFIG_MAX_BYTES).unwrap_err();
        assert!(
            matches!(e.problem, FileProblem::NotRegular("named pipe")),
            "{e}"
        );

        let e = read_regular(dir.path(), CONFIG_MAX_BYTES).unwrap_err();
        assert!(
            matches!(e.problem, FileProblem::NotRegular("directory")),
            "{e}"
        );

        let big = dir.path().join("big");
        std::fs::write(&big, "x".repeat(11)).unwrap();
        let e = read_regular(&big, 10).unwrap_err();
        assert!(e.to_string().contains("larger than 10 bytes"), "{e}");
        assert_eq!(read_regular(&big, 11).unwrap().unwrap().len(), 11);
    }

    #[test]
    fn a_private_file_others_may_write_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        for (mode, who) in [
            (0o664, "its group"),
            (0o646, "others"),
            (0o666, "group and others"),
        ] {
            let file = private_file(dir.path(), mode);
            let e = read_private(&file, 10).unwrap_err().to_string();
            assert!(
                e.contains(&format!("may be written by {who} (mode 0{mode:o})"))
                    && e.contains(&format!("`chmod go-w {}`", file.display())),
                "{e}"
            );
            // The workspace's file is not the user's word: its mode is no concern.
            assert!(read_regular(&file, 10).unwrap().is_some());
        }
    }
}
