//! The user's `config.json`, in the data dir: the hub's downstream servers and prompt
//! settings (`mcpServers`, `conventionalPrompts`) and the embedding model
//! (`memory.embeddings.model`).
//!
//! This module knows where the file is and reads it; each reader takes its own keys from it
//! and words its own errors. It is read as the user's word
//! ([`guarded_file::read_private`]): its entries name commands Tandem runs as the user, so
//! a file someone else could have written is refused. Only the hub writes it
//! (`hub::config::edit_member`).

use std::path::{Path, PathBuf};

use crate::guarded_file::{self, CONFIG_MAX_BYTES, GuardedFileError};

/// The file's name in the data dir.
pub const FILE_NAME: &str = "config.json";

/// The user's config file of the data dir `home`.
pub fn path(home: &Path) -> PathBuf {
    home.join(FILE_NAME)
}

/// The file's bytes; `None` when it does not exist (yet).
pub fn read(file: &Path) -> Result<Option<Vec<u8>>, GuardedFileError> {
    guarded_file::read_private(file, CONFIG_MAX_BYTES)
}
