//! Signing in to a remote (Streamable HTTP) server that asks for it: OAuth 2.1 as the MCP
//! authorization spec has it, done by rmcp's auth client (discovery from the 401's
//! `WWW-Authenticate` and the well-known paths, authorization server metadata with its
//! fallbacks, a pre-registered client or dynamic registration, PKCE S256, `resource`,
//! scopes from the challenge or the metadata, refresh before expiry and on a 401).
//!
//! What Tandem adds: the tokens kept on disk ([`TokenStore`], one file per server URL in
//! `<data dir>/oauth/`, 0600 in a 0700 dir, written whole), the loopback redirect that
//! catches the browser's approval ([`sign_in`]), the browser itself ([`Browser`]), and
//! [`connect`], which the gateway and a one-off connection share.
//!
//! Tokens never leave this module but to rmcp's transport: no log line, no message, no
//! `Debug` here shows one.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::service::{ClientInitializeError, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::auth::{
    AuthClient, AuthError, AuthorizationManager, AuthorizationRequest, AuthorizationSession,
    CredentialRefreshGuard, CredentialStore, OAuthClientConfig, StoredCredentials,
};
use rmcp::transport::streamable_http_client::StreamableHttpError;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::hub::config::OAuth;

/// How long a sign-in waits for the user's approval unless the entry says otherwise.
pub const DEFAULT_SIGN_IN_TIMEOUT: Duration = Duration::from_secs(120);
/// The bytes of one request the redirect listener reads: a request line and headers.
const MAX_CALLBACK_REQUEST: usize = 16 * 1024;
/// Requests the redirect listener answers before it gives up (a page's favicon, a stray
/// tab, a port scanner): the approval is one of the first.
const MAX_CALLBACK_REQUESTS: usize = 32;
/// How long one connection to the redirect listener may take to send its request.
const CALLBACK_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// The path of the loopback redirect.
const CALLBACK_PATH: &str = "/callback";
/// Characters of an authorization server's error text kept in a message.
const MAX_REASON_CHARS: usize = 200;
/// Sign-ins one [`connect`] makes at most (a first one, then one step-up).
const MAX_SIGN_INS: usize = 2;
/// How long each request of the 2025-03-26 discovery ([`discover`]) may take.
const LEGACY_DISCOVERY_TIMEOUT: Duration = Duration::from_secs(10);
/// The authorization server metadata read at most, in bytes.
const MAX_METADATA_BYTES: usize = 256 * 1024;

/// TLS is rustls with ring, as for every HTTP client of the hub; installed before the first
/// client is made.
fn tls() {
    static PROVIDER: std::sync::Once = std::sync::Once::new();
    PROVIDER.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

// ---- the token store ------------------------------------------------------------------

/// Where the tokens of every signed-in server are kept: one file per server URL.
#[derive(Debug, Clone)]
pub struct TokenStore {
    dir: PathBuf,
}

/// One server's file, as written.
#[derive(Serialize, Deserialize)]
struct TokenFile {
    /// The server's URL, to tell a file's server without the hash.
    url: String,
    credentials: StoredCredentials,
}

impl TokenStore {
    /// The store in `dir` (`<data dir>/oauth`); made, 0700, on the first write.
    pub fn new(dir: PathBuf) -> TokenStore {
        TokenStore { dir }
    }

    /// The store of the data dir `home`.
    pub fn in_data_dir(home: &Path) -> TokenStore {
        TokenStore::new(home.join("oauth"))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of the server at `url`.
    pub fn file_of(&self, url: &str) -> PathBuf {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(url.as_bytes());
        let name: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
        self.dir.join(format!("{name}.json"))
    }

    /// The credential store rmcp reads and writes for the server at `url`.
    pub fn credentials(&self, url: &str) -> FileCredentials {
        FileCredentials {
            path: self.file_of(url),
            url: url.to_string(),
        }
    }

    /// Whether an access token is kept for `url`.
    pub fn has_tokens(&self, url: &str) -> bool {
        self.credentials(url)
            .read()
            .ok()
            .flatten()
            .is_some_and(|c| c.token_response.is_some())
    }

    /// Forgets what is kept for `url`; `true` if something was.
    pub fn forget(&self, url: &str) -> std::io::Result<bool> {
        match std::fs::remove_file(self.file_of(url)) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// One server's tokens on disk, as rmcp's [`CredentialStore`].
#[derive(Debug, Clone)]
pub struct FileCredentials {
    path: PathBuf,
    url: String,
}

/// Refreshes of one file by this process go one at a time (the daemon is the one process
/// that refreshes while it runs).
fn refresh_lock(path: &Path) -> Arc<tokio::sync::Mutex<()>> {
    static LOCKS: Mutex<Option<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>> = Mutex::new(None);
    let mut locks = LOCKS.lock().unwrap_or_else(|p| p.into_inner());
    locks
        .get_or_insert_with(HashMap::new)
        .entry(path.to_path_buf())
        .or_default()
        .clone()
}

impl FileCredentials {
    fn read(&self) -> std::io::Result<Option<StoredCredentials>> {
        let bytes = match crate::guarded_file::read_private(&self.path, 1024 * 1024) {
            Ok(Some(b)) => b,
            Ok(None) => return Ok(None),
            Err(e) => return Err(std::io::Error::other(e.to_string())),
        };
        match serde_json::from_slice::<TokenFile>(&bytes) {
            Ok(file) if file.url == self.url => Ok(Some(file.credentials)),
            // Another URL's file under the same name, or one that does not parse: nothing
            // usable is kept (a sign-in writes it anew).
            Ok(_) => Ok(None),
            Err(e) => {
                tracing::warn!(
                    "the sign-in file {} does not parse ({}); signing in again replaces it",
                    self.path.display(),
                    e.classify_name()
                );
                Ok(None)
            }
        }
    }

    fn write(&self, credentials: StoredCredentials) -> std::io::Result<()> {
        if let Some(dir) = self.path.parent() {
            crate::store::create_private_dir(dir)?;
        }
        let file = TokenFile {
            url: self.url.clone(),
            credentials,
        };
        let bytes = serde_json::to_vec_pretty(&file).map_err(std::io::Error::other)?;
        crate::store::write_atomically(&self.path, &bytes)
    }
}

trait ClassifyName {
    fn classify_name(&self) -> &'static str;
}

impl ClassifyName for serde_json::Error {
    fn classify_name(&self) -> &'static str {
        match self.classify() {
            serde_json::error::Category::Io => "cannot be read",
            serde_json::error::Category::Syntax => "not JSON",
            serde_json::error::Category::Data => "not a sign-in record",
            serde_json::error::Category::Eof => "cut short",
        }
    }
}

fn store_error(path: &Path, e: std::io::Error) -> AuthError {
    AuthError::CredentialStoreError(format!("{}: {e}", path.display()))
}

#[async_trait::async_trait]
impl CredentialStore for FileCredentials {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.read())
            .await
            .map_err(|e| AuthError::CredentialStoreError(e.to_string()))?
            .map_err(|e| store_error(&self.path, e))
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.write(credentials))
            .await
            .map_err(|e| AuthError::CredentialStoreError(e.to_string()))?
            .map_err(|e| store_error(&self.path, e))
    }

    async fn clear(&self) -> Result<(), AuthError> {
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(store_error(&self.path, e)),
        }
    }

    async fn acquire_refresh_guard(&self) -> Result<Option<CredentialRefreshGuard>, AuthError> {
        let guard = refresh_lock(&self.path).lock_owned().await;
        Ok(Some(CredentialRefreshGuard::new(guard)))
    }
}

// ---- the browser ----------------------------------------------------------------------

/// Opens a URL for the user to approve a sign-in.
#[derive(Clone)]
pub struct Browser(Arc<OpenUrl>);

/// Opens a URL, or says why it could not.
type OpenUrl = dyn Fn(&str) -> Result<(), String> + Send + Sync;

/// Hears of a sign-in that started: the server's name, the URL to approve at.
pub type OnSignInUrl = dyn Fn(&str, &str) + Send + Sync;

impl std::fmt::Debug for Browser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Browser")
    }
}

impl Browser {
    pub fn new(open: impl Fn(&str) -> Result<(), String> + Send + Sync + 'static) -> Browser {
        Browser(Arc::new(open))
    }

    /// `$BROWSER` (split like a shell command, the URL as its last argument, or in place
    /// of a `%s`), else the platform's opener (`xdg-open`, `open` on macOS). The variable
    /// is read when a sign-in starts: the daemon has the environment of the client that
    /// started it.
    pub fn system() -> Browser {
        Browser::new(|url| {
            let command = match std::env::var("BROWSER") {
                Ok(b) if !b.trim().is_empty() => split_command(&b)?,
                _ if cfg!(target_os = "macos") => vec!["open".to_string()],
                _ => vec!["xdg-open".to_string()],
            };
            let mut args: Vec<String> = command[1..].to_vec();
            if args.iter().any(|a| a.contains("%s")) {
                args = args.iter().map(|a| a.replace("%s", url)).collect();
            } else {
                args.push(url.to_string());
            }
            let mut child = std::process::Command::new(&command[0])
                .args(&args)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .map_err(|e| format!("cannot run `{}`: {e}", command[0]))?;
            // Reaped when it ends; a browser that stays open is not waited for.
            std::thread::spawn(move || {
                let _ = child.wait();
            });
            Ok(())
        })
    }

    pub fn open(&self, url: &str) -> Result<(), String> {
        (self.0)(url)
    }
}

/// `text` split as a shell splits a simple command: words, '…' and "…" quotes, `\`.
fn split_command(text: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err(format!("$BROWSER has an unclosed quote: {text}")),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c) => word.push(c),
                            None => return Err(format!("$BROWSER ends in a `\\`: {text}")),
                        },
                        Some(c) => word.push(c),
                        None => return Err(format!("$BROWSER has an unclosed quote: {text}")),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some(c) => word.push(c),
                    None => return Err(format!("$BROWSER ends in a `\\`: {text}")),
                }
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    if words.is_empty() {
        return Err("$BROWSER is empty".into());
    }
    Ok(words)
}

// ---- connecting -----------------------------------------------------------------------

/// What a server's sign-in needs from the hub: where the tokens are kept, how the browser
/// opens, and who hears that a sign-in started (the server's name, the URL to approve at).
#[derive(Clone)]
pub struct Auth {
    pub store: TokenStore,
    pub browser: Browser,
    pub on_url: Arc<OnSignInUrl>,
}

/// A remote server as an entry (or a bare URL) gives it.
#[derive(Clone, Default)]
pub struct HttpTarget {
    pub url: String,
    pub headers: BTreeMap<String, String>,
    pub oauth: OAuth,
}

/// Header values may be credentials: only their names are shown.
impl std::fmt::Debug for HttpTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpTarget")
            .field("url", &self.url)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("oauth", &self.oauth)
            .finish()
    }
}

impl HttpTarget {
    /// A server known by its URL alone.
    pub fn url(url: &str) -> HttpTarget {
        HttpTarget {
            url: url.to_string(),
            ..Default::default()
        }
    }

    /// Whether the entry brings its own credential (`oauth.accessToken` or an
    /// `Authorization` header): then Tandem never signs in for it.
    pub fn has_static_credential(&self) -> bool {
        self.oauth.access_token.is_some()
            || self
                .headers
                .keys()
                .any(|k| k.eq_ignore_ascii_case("authorization"))
    }

    /// How long a sign-in waits for the user.
    pub fn sign_in_timeout(&self) -> Duration {
        self.oauth
            .sign_in_timeout
            .unwrap_or(DEFAULT_SIGN_IN_TIMEOUT)
    }
}

/// A server's answer that asks for a sign-in: its `WWW-Authenticate` challenge.
#[derive(Debug, Clone, PartialEq)]
pub struct Challenge {
    pub header: String,
    /// A 403 `insufficient_scope`: the token is good but lacks a scope (a step-up).
    pub insufficient_scope: bool,
}

/// The transport to a remote server: with the stored tokens when there are some.
pub enum HttpTransport {
    Plain(StreamableHttpClientTransport<reqwest::Client>),
    Authorized(StreamableHttpClientTransport<AuthClient<reqwest::Client>>),
}

/// The transport to `target`: its own credential if the entry has one; else the stored
/// tokens (refreshed by rmcp before they expire and on a 401) when some are kept; else none,
/// and a server that needs one answers 401 ([`challenge_of`]).
pub async fn transport(target: &HttpTarget, store: &TokenStore) -> Result<HttpTransport, String> {
    tls();
    let mut config = super::server::http_config(&target.url, &target.headers)?;
    if let Some(token) = &target.oauth.access_token {
        config = config.auth_header(token.trim());
        return Ok(HttpTransport::Plain(
            StreamableHttpClientTransport::from_config(config),
        ));
    }
    if target.has_static_credential() || !store.has_tokens(&target.url) {
        return Ok(HttpTransport::Plain(
            StreamableHttpClientTransport::from_config(config),
        ));
    }
    let mut manager = AuthorizationManager::new(target.url.as_str())
        .await
        .map_err(|e| describe_auth_error(&e))?;
    manager.set_credential_store(store.credentials(&target.url));
    let metadata = discover(&manager, &target.url, None)
        .await
        .map_err(|e| describe_auth_error(&e))?;
    manager.set_metadata(metadata);
    match manager.initialize_from_store().await {
        Ok(true) => {}
        // The authorization server changed: the old tokens were dropped.
        Ok(false) => {
            return Ok(HttpTransport::Plain(
                StreamableHttpClientTransport::from_config(config),
            ));
        }
        Err(e) => return Err(describe_auth_error(&e)),
    }
    if let (Some(id), Some(secret)) = (&target.oauth.client_id, &target.oauth.client_secret) {
        let client = OAuthClientConfig::new(id.clone(), target.url.clone())
            .with_client_secret(secret.clone());
        manager
            .configure_client(client)
            .map_err(|e| describe_auth_error(&e))?;
    }
    let http = reqwest::Client::builder()
        .build()
        .map_err(|e| format!("cannot make an HTTP client: {e}"))?;
    Ok(HttpTransport::Authorized(
        StreamableHttpClientTransport::with_client(AuthClient::new(http, manager), config),
    ))
}

/// The challenge of a handshake the server refused for want of a (better) token.
pub fn challenge_of(error: &ClientInitializeError) -> Option<Challenge> {
    match error {
        ClientInitializeError::TransportError { error, .. } => challenge_in(error.error.as_ref()),
        ClientInitializeError::LegacyFallbackFailed { fallback, .. } => challenge_of(fallback),
        _ => None,
    }
}

/// The challenge of a request (after the handshake) that the server refused for want of a
/// (better) token: a token revoked, or a tool that needs a scope not granted (a step-up).
pub fn challenge_of_request(error: &rmcp::ServiceError) -> Option<Challenge> {
    match error {
        rmcp::ServiceError::TransportSend(error) => challenge_in(error.error.as_ref()),
        _ => None,
    }
}

/// The sign-in asked for somewhere in the chain of `error`:
/// - a 401 with its `WWW-Authenticate` challenge;
/// - a 403 `insufficient_scope`, a step-up;
/// - a 401 with no challenge: the server wants a token and says nothing more, so the
///   sign-in discovers from the well-known paths;
/// - kept tokens that can no longer be refreshed (rmcp's `AuthorizationRequired`).
fn challenge_in(error: &(dyn std::error::Error + 'static)) -> Option<Challenge> {
    use rmcp::transport::streamable_http_client::{AuthRequiredError, InsufficientScopeError};
    let bare = || Challenge {
        header: String::new(),
        insufficient_scope: false,
    };
    let mut source = Some(error);
    while let Some(e) = source {
        if let Some(e) = e.downcast_ref::<AuthRequiredError>() {
            return Some(Challenge {
                header: e.www_authenticate_header.clone(),
                insufficient_scope: false,
            });
        }
        if let Some(e) = e.downcast_ref::<InsufficientScopeError>() {
            return Some(Challenge {
                header: e.www_authenticate_header.clone(),
                insufficient_scope: true,
            });
        }
        // rmcp keeps an unchallenged 401 only as this text (its status first). Its other
        // auth errors carry theirs as their source, which the walk reaches.
        if let Some(StreamableHttpError::UnexpectedServerResponse(text)) =
            e.downcast_ref::<StreamableHttpError<reqwest::Error>>()
            && text.starts_with("HTTP 401")
        {
            return Some(bare());
        }
        if matches!(
            e.downcast_ref::<AuthError>(),
            Some(AuthError::AuthorizationRequired)
        ) {
            return Some(bare());
        }
        source = e.source();
    }
    None
}

/// Why [`connect`] did not connect.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConnectError {
    /// The server wants a sign-in, and none was allowed (or it did not do).
    #[error("the server asks you to sign in")]
    NeedsSignIn(Challenge),
    #[error("{0}")]
    SignIn(#[from] SignInError),
    #[error("{0}")]
    Failed(String),
}

/// How [`connect`] signs in when the server asks: the browser and who is told the URL.
pub struct SignInWith<'a> {
    pub browser: &'a Browser,
    pub on_url: &'a (dyn Fn(&str) + Send + Sync),
}

/// Connects to `target` as the gateway does, with the stored tokens; when the server asks
/// for a sign-in (or a step-up) and `sign_in` is given, signs in and connects again, at most
/// [`MAX_SIGN_INS`] times. `handler` makes the client handler of each attempt.
pub async fn connect<H: ClientHandler>(
    mut handler: impl FnMut() -> H,
    target: &HttpTarget,
    store: &TokenStore,
    sign_in_with: Option<SignInWith<'_>>,
) -> Result<RunningService<RoleClient, H>, ConnectError> {
    let mut sign_ins = 0;
    loop {
        let attempt = match transport(target, store)
            .await
            .map_err(ConnectError::Failed)?
        {
            HttpTransport::Plain(t) => handler().serve(t).await,
            HttpTransport::Authorized(t) => handler().serve(t).await,
        };
        let error = match attempt {
            Ok(service) => return Ok(service),
            Err(e) => e,
        };
        let Some(challenge) = challenge_of(&error) else {
            return Err(ConnectError::Failed(super::describe::handshake(
                &error,
                super::describe::Endpoint::Http(&target.url),
            )));
        };
        let Some(with) = &sign_in_with else {
            return Err(ConnectError::NeedsSignIn(challenge));
        };
        if sign_ins == MAX_SIGN_INS || target.has_static_credential() {
            return Err(ConnectError::NeedsSignIn(challenge));
        }
        sign_ins += 1;
        sign_in(target, store, Some(&challenge), with.browser, with.on_url).await?;
    }
}

/// Whether `url` can name a Client ID Metadata Document: HTTPS, with a path.
pub fn is_client_metadata_url(url: &str) -> bool {
    reqwest::Url::parse(url).is_ok_and(|u| {
        u.scheme() == "https" && u.host_str().is_some() && !matches!(u.path(), "" | "/")
    })
}

/// The authorization server's metadata for the server at `url`, as rmcp discovers it (from
/// `challenge`, then the well-known paths), with one fallback of the 2025-03-26
/// specification that rmcp refuses: a server that publishes no protected resource metadata
/// has its authorization server at its own origin, whose metadata then need not name that
/// origin as its issuer. Only that case is let through: with protected resource metadata,
/// an issuer that does not match stays an error, as RFC 8414 has it.
async fn discover(
    manager: &AuthorizationManager,
    url: &str,
    challenge: Option<&Challenge>,
) -> Result<rmcp::transport::auth::AuthorizationMetadata, AuthError> {
    let header = challenge
        .map(|c| c.header.as_str())
        .filter(|h| !h.trim().is_empty());
    let error = match manager.resolve_metadata_from_challenge(header).await {
        Ok(resolution) => return Ok(resolution.metadata),
        Err(e @ AuthError::AuthorizationServerMismatch { .. }) => e,
        Err(e) => return Err(e),
    };
    let base = reqwest::Url::parse(url)?;
    let names_metadata = header.is_some_and(|h| {
        rmcp::transport::auth::WWWAuthenticateParams::parse(h, &base)
            .resource_metadata_url
            .is_some()
    });
    if names_metadata {
        return Err(error);
    }
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(LEGACY_DISCOVERY_TIMEOUT)
        .build()?;
    let well_known = |path: &str| {
        let mut u = base.clone();
        u.set_path(path);
        u.set_query(None);
        u.set_fragment(None);
        u
    };
    // rmcp looked for protected resource metadata already; a server that has some is
    // not a 2025-03-26 one, whatever else it serves.
    let resource_path = format!(
        "/.well-known/oauth-protected-resource{}",
        base.path().trim_end_matches('/')
    );
    for path in [
        resource_path.as_str(),
        "/.well-known/oauth-protected-resource",
    ] {
        let answer = http.get(well_known(path)).send().await?;
        if answer.status().is_success() {
            return Err(error);
        }
    }
    let answer = http
        .get(well_known("/.well-known/oauth-authorization-server"))
        .send()
        .await?;
    if !answer.status().is_success() {
        return Err(error);
    }
    let body = bounded_body(answer, MAX_METADATA_BYTES).await?;
    let metadata: rmcp::transport::auth::AuthorizationMetadata = serde_json::from_slice(&body)
        .map_err(|e| {
            AuthError::MetadataError(format!("the server's metadata is not valid: {e}"))
        })?;
    tracing::info!(
        "{url}: signing in by the 2025-03-26 discovery (its authorization server names \
         another issuer than its origin)"
    );
    Ok(metadata)
}

/// The body of `answer`, refused past `limit` bytes.
async fn bounded_body(mut answer: reqwest::Response, limit: usize) -> Result<Vec<u8>, AuthError> {
    let mut body = Vec::new();
    while let Some(chunk) = answer.chunk().await? {
        if body.len() + chunk.len() > limit {
            return Err(AuthError::MetadataError(format!(
                "the server's metadata is over {limit} bytes"
            )));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

// ---- signing in -----------------------------------------------------------------------

/// Why a sign-in did not end with tokens.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SignInError {
    #[error("no approval came within {0:.1} s (the browser page was not approved, or not reached)")]
    TimedOut(f64),
    #[error("the sign-in was refused ({0})")]
    Refused(String),
    #[error("{0}")]
    Failed(String),
}

/// Signs in to `target`: discovers its authorization server (from `challenge`, the
/// server's 401 or 403, when there is one), registers Tandem (or uses the entry's
/// pre-registered client), opens `browser` on the authorization URL (and tells `on_url`),
/// waits for the approval on a loopback redirect within the target's time limit, and
/// keeps the tokens in `store`.
pub async fn sign_in(
    target: &HttpTarget,
    store: &TokenStore,
    challenge: Option<&Challenge>,
    browser: &Browser,
    on_url: &(dyn Fn(&str) + Send + Sync),
) -> Result<(), SignInError> {
    tls();
    let failed = |e: AuthError| SignInError::Failed(describe_auth_error(&e));
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .map_err(|e| SignInError::Failed(format!("cannot listen for the approval: {e}")))?;
    let port = listener
        .local_addr()
        .map_err(|e| SignInError::Failed(format!("cannot listen for the approval: {e}")))?
        .port();
    let redirect = format!("http://127.0.0.1:{port}{CALLBACK_PATH}");

    let credentials = store.credentials(&target.url);
    let granted = credentials
        .read()
        .ok()
        .flatten()
        .map(|c| c.granted_scopes)
        .unwrap_or_default();
    let mut manager = AuthorizationManager::new(target.url.as_str())
        .await
        .map_err(failed)?;
    manager.set_credential_store(credentials);
    let metadata = discover(&manager, &target.url, challenge)
        .await
        .map_err(failed)?;
    manager.set_metadata(metadata);

    let mut request = AuthorizationRequest::new(redirect).with_client_name("Tandem");
    if let Some(id) = &target.oauth.client_id {
        request = request.with_preregistered_client(id.clone());
        if let Some(secret) = &target.oauth.client_secret {
            request = request.with_client_secret(secret.clone());
        }
    }
    // Used only where the authorization server says it takes such documents.
    if let Some(url) = &target.oauth.client_metadata_url {
        request = request.with_client_metadata_url(url.clone());
    }
    let mut scopes = target.oauth.scopes.clone();
    if let Some(c) = challenge.filter(|c| c.insufficient_scope) {
        // A step-up keeps what was granted and adds what the server asks for.
        let base =
            reqwest::Url::parse(&target.url).map_err(|e| SignInError::Failed(e.to_string()))?;
        let asked = rmcp::transport::auth::WWWAuthenticateParams::parse(&c.header, &base).scope;
        scopes.extend(granted);
        scopes.extend(
            asked
                .iter()
                .flat_map(|s| s.split_whitespace())
                .map(str::to_string),
        );
        scopes.sort();
        scopes.dedup();
    }
    if !scopes.is_empty() {
        request = request.with_scopes(scopes);
    }
    let session = AuthorizationSession::new(manager, request)
        .await
        .map_err(|(_, e)| failed(e))?;
    let url = session.get_authorization_url().to_string();
    let state = reqwest::Url::parse(&url)
        .ok()
        .and_then(|u| {
            u.query_pairs()
                .find(|(k, _)| k == "state")
                .map(|(_, v)| v.into_owned())
        })
        .ok_or_else(|| SignInError::Failed("the authorization URL has no state".into()))?;
    tracing::info!(
        "signing in to {}: waiting for the approval in the browser",
        target.url
    );
    on_url(&url);
    if let Err(e) = browser.open(&url) {
        tracing::warn!(
            "cannot open a browser for the sign-in to {}: {e}",
            target.url
        );
    }
    let limit = target.sign_in_timeout();
    let answer = tokio::time::timeout(limit, wait_for_approval(listener, &state))
        .await
        .map_err(|_| SignInError::TimedOut(limit.as_secs_f64()))??;
    match answer {
        Approval::Code { code, issuer } => {
            session
                .handle_callback_with_issuer(&code, &state, issuer.as_deref())
                .await
                .map_err(failed)?;
            tracing::info!("signed in to {}", target.url);
            Ok(())
        }
        Approval::Refused(reason) => Err(SignInError::Refused(reason)),
    }
}

/// What the browser brought back to the redirect.
enum Approval {
    Code {
        code: String,
        issuer: Option<String>,
    },
    /// `error` (and its description) of a refused authorization.
    Refused(String),
}

/// Waits on `listener` for the redirect of the authorization carrying `state`: each other
/// request is answered and ignored, up to [`MAX_CALLBACK_REQUESTS`].
async fn wait_for_approval(
    listener: tokio::net::TcpListener,
    state: &str,
) -> Result<Approval, SignInError> {
    for _ in 0..MAX_CALLBACK_REQUESTS {
        let (mut stream, _) = listener
            .accept()
            .await
            .map_err(|e| SignInError::Failed(format!("the approval listener failed: {e}")))?;
        let Ok(Some(target)) =
            tokio::time::timeout(CALLBACK_READ_TIMEOUT, read_request_target(&mut stream)).await
        else {
            continue;
        };
        let Ok(url) = reqwest::Url::parse(&format!("http://127.0.0.1{target}")) else {
            respond(&mut stream, 400, "This is not a sign-in answer.").await;
            continue;
        };
        if url.path() != CALLBACK_PATH {
            respond(&mut stream, 404, "Not found.").await;
            continue;
        }
        let query: HashMap<String, String> = url.query_pairs().into_owned().collect();
        if query.get("state").map(String::as_str) != Some(state) {
            respond(
                &mut stream,
                400,
                "This answer is not for the sign-in Tandem is waiting for.",
            )
            .await;
            continue;
        }
        if let Some(error) = query.get("error") {
            let mut reason = bounded(error);
            if let Some(d) = query.get("error_description") {
                reason = format!("{reason}: {}", bounded(d));
            }
            respond(
                &mut stream,
                200,
                "The sign-in was refused. You can close this tab.",
            )
            .await;
            return Ok(Approval::Refused(reason));
        }
        let Some(code) = query.get("code") else {
            respond(&mut stream, 400, "The answer has no authorization code.").await;
            continue;
        };
        respond(
            &mut stream,
            200,
            "Signed in. You can close this tab and go back to your editor or agent.",
        )
        .await;
        return Ok(Approval::Code {
            code: code.clone(),
            issuer: query.get("iss").cloned(),
        });
    }
    Err(SignInError::Failed(format!(
        "the approval listener got {MAX_CALLBACK_REQUESTS} requests that were not the approval"
    )))
}

/// The target of a `GET` request (`/callback?...`), read up to the end of its headers.
async fn read_request_target(stream: &mut tokio::net::TcpStream) -> Option<String> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        if buf.len() >= MAX_CALLBACK_REQUEST {
            return None;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let head = std::str::from_utf8(&buf).ok()?;
    let mut line = head.lines().next()?.split(' ');
    match (line.next(), line.next()) {
        (Some("GET"), Some(target)) if target.starts_with('/') => Some(target.to_string()),
        _ => None,
    }
}

async fn respond(stream: &mut tokio::net::TcpStream, status: u16, text: &str) {
    let reason = match status {
        200 => "OK",
        404 => "Not Found",
        _ => "Bad Request",
    };
    let body = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>Tandem</title></head>\
         <body><p>{text}</p></body></html>"
    );
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/html; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\nCache-Control: no-store\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// Untrusted text for a message: control characters out, at most [`MAX_REASON_CHARS`].
fn bounded(text: &str) -> String {
    let clean: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let mut out: String = clean.chars().take(MAX_REASON_CHARS).collect();
    if clean.chars().count() > MAX_REASON_CHARS {
        out.push('…');
    }
    out
}

/// What went wrong in the auth client, for people: what failed, and where it helps, what to
/// do. What an authorization server wrote is bounded.
pub fn describe_auth_error(e: &AuthError) -> String {
    match e {
        AuthError::AuthorizationRequired | AuthError::TokenRefreshRejected(_) => {
            "the server needs you to sign in again".into()
        }
        AuthError::NoAuthorizationSupport => {
            "the server asks for a sign-in but names no authorization server".into()
        }
        AuthError::RegistrationFailed(m) => format!(
            "the authorization server did not register Tandem as a client ({}); if it needs a \
             pre-registered client, set oauth.clientId (and oauth.clientSecret) in the server's entry",
            bounded(m)
        ),
        AuthError::TokenExchangeFailed(m) => format!(
            "the authorization server did not give a token for the approval ({})",
            bounded(m)
        ),
        AuthError::TokenRefreshFailed(m) => format!(
            "renewing the sign-in failed ({}); it is tried again on the next connection",
            bounded(m)
        ),
        AuthError::CredentialStoreError(m) => {
            format!("cannot read or write the stored sign-in: {}", bounded(m))
        }
        AuthError::HttpError(e) => format!(
            "cannot reach the authorization server{}",
            e.url()
                .map(|u| format!(" at {}", u.origin().ascii_serialization()))
                .unwrap_or_default()
        ),
        AuthError::DiscoveryRequestFailed { url, .. } => format!(
            "cannot read the server's sign-in metadata at {}",
            url.origin().ascii_serialization()
        ),
        AuthError::PkceUnsupported => {
            "the authorization server does not support PKCE with S256, which a sign-in needs".into()
        }
        AuthError::InsufficientScope { required_scope, .. } => format!(
            "the sign-in lacks the scope '{}' the server asks for",
            bounded(required_scope)
        ),
        other => format!("the sign-in failed: {}", bounded(&other.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn browser_commands_split_like_a_shell() {
        assert_eq!(split_command("firefox").unwrap(), ["firefox"]);
        assert_eq!(
            split_command(r#"/opt/my browser/run --new-tab"#).unwrap(),
            ["/opt/my", "browser/run", "--new-tab"]
        );
        assert_eq!(
            split_command(r#"'/opt/my browser/run' "a \"b\"" c\ d"#).unwrap(),
            ["/opt/my browser/run", "a \"b\"", "c d"]
        );
        assert!(split_command("'open").is_err());
        assert!(split_command("  ").is_err());
    }

    #[test]
    fn untrusted_reasons_are_bounded() {
        let long = "x".repeat(1000);
        assert_eq!(bounded(&long).chars().count(), MAX_REASON_CHARS + 1);
        assert_eq!(bounded("a\nb\u{1b}c"), "a b c");
    }

    #[tokio::test]
    async fn tokens_are_kept_private_and_per_url() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let store = TokenStore::new(dir.path().join("oauth"));
        let url = "https://mcp.example.com/mcp";
        assert!(!store.has_tokens(url));
        let token = serde_json::from_value(serde_json::json!({
            "access_token": "secret-access", "token_type": "Bearer", "refresh_token": "secret-refresh"
        }))
        .unwrap();
        let creds = store.credentials(url);
        creds
            .save(StoredCredentials::new(
                "client".into(),
                Some(token),
                vec![],
                Some(1),
            ))
            .await
            .unwrap();
        assert!(store.has_tokens(url));
        assert!(!store.has_tokens("https://other.example.com/mcp"));
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(store.dir()), 0o700);
        assert_eq!(mode(&store.file_of(url)), 0o600);
        let loaded = creds.load().await.unwrap().unwrap();
        assert!(!format!("{loaded:?}").contains("secret-access"));
        assert!(store.forget(url).unwrap());
        assert!(!store.has_tokens(url));
        assert!(!store.forget(url).unwrap());
    }
}
