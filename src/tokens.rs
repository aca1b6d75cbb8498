//! Bearer tokens for the Streamable HTTP face: `tokens.json` in the data dir.
//!
//! A token names a user (the entries and tasks it writes carry that name) and may be
//! read-only. Only the SHA-256 of a token is stored; the token itself is shown once, when it
//! is made. Tokens are 32 random bytes, so a plain hash is as good as a slow one: nothing
//! short enough to guess hides behind it. The file is read again whenever it changes on
//! disk, so `tandem token add` and `revoke` take effect on a running server at its next
//! request. Edits hold an exclusive lock on `tokens.lock` and replace the file atomically.

use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The tokens' file in the data dir.
pub const TOKENS_FILE: &str = "tokens.json";
const LOCK_FILE: &str = "tokens.lock";
/// What every token starts with, so that one found in a file or a paste is recognisable.
pub const TOKEN_PREFIX: &str = "tdm_";
/// The longest token name (it is the user's name in entries and tasks).
const MAX_NAME: usize = 64;
/// The most `tokens.json` may hold: some hundred thousand tokens.
const MAX_FILE_BYTES: u64 = 32 << 20;

/// One token as stored: its name (the user), the hash of its secret, its rights.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRecord {
    pub name: String,
    /// Hex SHA-256 of the whole token.
    pub sha256: String,
    #[serde(default)]
    pub read_only: bool,
    pub created: jiff::Timestamp,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct TokensFile {
    tokens: Vec<TokenRecord>,
}

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("cannot read or write {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Unsafe(#[from] tandem_core::guarded_file::GuardedFileError),
    #[error("{} is not a valid tokens file: {source}", path.display())]
    Corrupt {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("a token named '{0}' exists already (revoke it first)")]
    Exists(String),
    #[error("no token named '{0}'")]
    NotFound(String),
    #[error("invalid token name '{0}': use 1 to {MAX_NAME} letters, digits, '.', '_', '-' or '@'")]
    BadName(String),
    #[error("no random source: {0}")]
    Random(String),
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> TokenError + '_ {
    move |source| TokenError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The tokens of data dir `home`, in the order made (none when the file is absent). A file
/// that another user owns, or that group or others may write, is refused: whoever could
/// write it could let themselves in.
pub fn list(home: &Path) -> Result<Vec<TokenRecord>, TokenError> {
    let path = home.join(TOKENS_FILE);
    let Some(text) = tandem_core::guarded_file::read_private(&path, MAX_FILE_BYTES)? else {
        return Ok(Vec::new());
    };
    let file: TokensFile =
        serde_json::from_slice(&text).map_err(|source| TokenError::Corrupt { path, source })?;
    Ok(file.tokens)
}

/// Makes a token named `name` and returns it: the only time it is seen.
pub fn add(home: &Path, name: &str, read_only: bool) -> Result<String, TokenError> {
    let valid = (1..=MAX_NAME).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@'));
    if !valid {
        return Err(TokenError::BadName(name.to_string()));
    }
    let mut secret = [0u8; 32];
    getrandom::fill(&mut secret).map_err(|e| TokenError::Random(e.to_string()))?;
    let token = format!("{TOKEN_PREFIX}{}", hex(&secret));
    edit(home, |tokens| {
        if tokens.iter().any(|t| t.name == name) {
            return Err(TokenError::Exists(name.to_string()));
        }
        tokens.push(TokenRecord {
            name: name.to_string(),
            sha256: hash(&token),
            read_only,
            created: jiff::Timestamp::now(),
        });
        Ok(())
    })?;
    Ok(token)
}

/// Removes the token named `name`.
pub fn revoke(home: &Path, name: &str) -> Result<(), TokenError> {
    edit(home, |tokens| {
        let before = tokens.len();
        tokens.retain(|t| t.name != name);
        if tokens.len() == before {
            return Err(TokenError::NotFound(name.to_string()));
        }
        Ok(())
    })
}

/// Reads, changes and writes the file under its lock.
fn edit(
    home: &Path,
    change: impl FnOnce(&mut Vec<TokenRecord>) -> Result<(), TokenError>,
) -> Result<(), TokenError> {
    tandem_core::store::create_private_dir(home).map_err(io_error(home))?;
    let lock_path = home.join(LOCK_FILE);
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(io_error(&lock_path))?;
    lock.lock().map_err(io_error(&lock_path))?;
    let mut tokens = list(home)?;
    change(&mut tokens)?;
    let path = home.join(TOKENS_FILE);
    let mut text = serde_json::to_vec_pretty(&TokensFile { tokens }).expect("plain data");
    text.push(b'\n');
    tandem_core::store::write_atomically(&path, &text).map_err(io_error(&path))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).map_err(io_error(&path))?;
    }
    Ok(())
}

/// The stored form of a token.
fn hash(token: &str) -> String {
    hex(&Sha256::digest(token.as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The tokens as a server sees them: read again when the file changes (its modification
/// time or length), so adds and revocations apply at the next request.
pub struct TokenSet {
    path: PathBuf,
    cached: Mutex<Cached>,
}

#[derive(Default)]
struct Cached {
    stamp: Option<(SystemTime, u64)>,
    tokens: Vec<TokenRecord>,
}

impl TokenSet {
    pub fn new(home: &Path) -> TokenSet {
        TokenSet {
            path: home.join(TOKENS_FILE),
            cached: Mutex::new(Cached::default()),
        }
    }

    /// The current tokens, read once a request; an error when the file exists but cannot
    /// be read (a hand edit that broke it, say). The face then refuses every request: a
    /// broken file must not read as "no tokens", which on loopback means no authentication.
    pub fn current(&self) -> Result<Tokens, TokenError> {
        let stamp = fs::metadata(&self.path)
            .ok()
            .map(|m| (m.modified().unwrap_or(SystemTime::UNIX_EPOCH), m.len()));
        let mut cached = self
            .cached
            .lock()
            .expect("the token cache is never poisoned");
        if cached.stamp != stamp || stamp.is_none() {
            let home = self.path.parent().unwrap_or(Path::new("."));
            // Until it reads, it is read again at each request: a fix applies at once.
            cached.stamp = None;
            cached.tokens = list(home)?;
            cached.stamp = stamp;
        }
        Ok(Tokens(cached.tokens.clone()))
    }
}

/// The tokens at one moment ([`TokenSet::current`]).
pub struct Tokens(Vec<TokenRecord>);

impl Tokens {
    /// Whether there is none (then a loopback server needs none).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The token whose secret is `presented`, if any.
    pub fn verify(self, presented: &str) -> Option<TokenRecord> {
        let wanted = hash(presented);
        self.0.into_iter().find(|t| t.sha256 == wanted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_verify_revoke() {
        let dir = tempfile::tempdir().unwrap();
        let set = TokenSet::new(dir.path());
        assert!(set.current().unwrap().is_empty());
        let token = add(dir.path(), "ada", false).unwrap();
        assert!(token.starts_with(TOKEN_PREFIX) && token.len() == TOKEN_PREFIX.len() + 64);
        let stored = fs::read_to_string(dir.path().join(TOKENS_FILE)).unwrap();
        assert!(
            !stored.contains(&token),
            "the secret itself is never stored"
        );
        assert_eq!(set.current().unwrap().verify(&token).unwrap().name, "ada");
        assert!(set.current().unwrap().verify("tdm_wrong").is_none());
        assert!(matches!(
            add(dir.path(), "ada", true),
            Err(TokenError::Exists(_))
        ));
        assert!(matches!(
            add(dir.path(), "a b", true),
            Err(TokenError::BadName(_))
        ));
        let reader = add(dir.path(), "bob", true).unwrap();
        assert!(set.current().unwrap().verify(&reader).unwrap().read_only);
        revoke(dir.path(), "ada").unwrap();
        assert!(set.current().unwrap().verify(&token).is_none());
        assert!(matches!(
            revoke(dir.path(), "ada"),
            Err(TokenError::NotFound(_))
        ));
        assert_eq!(
            list(dir.path())
                .unwrap()
                .iter()
                .map(|t| t.name.as_str())
                .collect::<Vec<_>>(),
            ["bob"]
        );
    }

    #[test]
    fn a_file_others_may_write_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let set = TokenSet::new(dir.path());
        add(dir.path(), "ada", false).unwrap();
        let path = dir.path().join(TOKENS_FILE);
        fs::set_permissions(&path, fs::Permissions::from_mode(0o666)).unwrap();
        let refused = set
            .current()
            .err()
            .expect("a world-writable file is refused");
        assert!(refused.to_string().contains("chmod go-w"), "{refused}");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        assert!(!set.current().unwrap().is_empty());
    }

    #[test]
    fn a_file_that_cannot_be_read_is_an_error_until_fixed() {
        let dir = tempfile::tempdir().unwrap();
        let set = TokenSet::new(dir.path());
        let token = add(dir.path(), "ada", false).unwrap();
        assert!(set.current().unwrap().verify(&token).is_some());
        let path = dir.path().join(TOKENS_FILE);
        let good = fs::read_to_string(&path).unwrap();
        fs::write(&path, good.replacen('}', "},", 1)).unwrap();
        assert!(matches!(set.current(), Err(TokenError::Corrupt { .. })));
        assert!(
            set.current().is_err(),
            "still an error at the next request, not the last good set"
        );
        fs::write(&path, &good).unwrap();
        assert!(set.current().unwrap().verify(&token).is_some());
    }
}
