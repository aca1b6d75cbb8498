//! A one-off look at a server as the hub sees it (`tandem servers check`): connected by the
//! very [`Downstream`] the gateway uses (its transports, limits, timeouts and messages), in
//! the calling process, and never restarted: a failure is the answer. A server that asks
//! for a sign-in gets one, as an activation would ([`Downstream::sign_in`]), with the
//! tokens kept where the gateway keeps them.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, Implementation, Prompt, Resource, ServerCapabilities,
    Tool,
};
use serde::Serialize;

use super::ask::Fallback;
use super::oauth::Auth;
use super::server::{Downstream, HubError, Status};
use crate::hub::config::{ServerConfig, Transport};

/// What a server says of itself once connected.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Checked {
    /// The entry's name, or the URL given.
    pub name: String,
    /// What runs, as written: the command line or the URL.
    pub runs: Option<String>,
    pub protocol_version: Option<String>,
    pub server_info: Option<Implementation>,
    pub instructions: Option<String>,
    pub capabilities: Option<ServerCapabilities>,
    pub tools: Vec<Tool>,
    pub prompts: Vec<Prompt>,
    pub resources: Vec<Resource>,
    /// The tool called, and its result or why it failed.
    #[serde(skip)]
    pub call: Option<(String, Result<CallToolResult, HubError>)>,
}

/// Connects to the server of `config` (`trusted`: its file may run), signing in through
/// `auth` if it asks, reads what it offers and calls `call` on it if given; then ends the
/// connection (and its process). What the server asks meanwhile goes to `fallback`: its
/// asker answers forms, its root is the roots; sampling is declined.
pub async fn check(
    config: ServerConfig,
    trusted: bool,
    auth: Auth,
    fallback: Fallback,
    call: Option<CallToolRequestParams>,
) -> Result<Checked, HubError> {
    let (on_change, on_task) = (Arc::new(|_: &str, _| {}), Arc::new(|_| {}));
    let server = Downstream::new(config, trusted, on_change, auth, fallback, on_task);
    let mut ready = server.ready().await;
    if ready.is_err() && server.status() == Status::NeedsSignIn {
        ready = server.sign_in(None).await.map(drop);
    }
    let result = match ready {
        Ok(()) => Ok(look(&server, call).await),
        Err(e) => Err(why(&server, e)),
    };
    server.stop();
    result
}

async fn look(server: &Arc<Downstream>, call: Option<CallToolRequestParams>) -> Checked {
    let info = server.peer_info();
    let call = match call {
        Some(params) => {
            let tool = params.name.to_string();
            Some((tool, server.call_tool(params, None).await))
        }
        None => None,
    };
    Checked {
        name: server.name().to_string(),
        runs: server.config.runs.clone(),
        protocol_version: info.as_ref().map(|i| i.protocol_version.to_string()),
        server_info: info.as_ref().and_then(|i| i.server_info.clone()),
        instructions: info.as_ref().and_then(|i| i.instructions.clone()),
        capabilities: info.as_ref().map(|i| i.capabilities.clone()),
        tools: server.tools().to_vec(),
        prompts: server.prompts().to_vec(),
        resources: server.resources().to_vec(),
        call,
    }
}

/// Why the server could not be reached: the failure itself rather than the restart the
/// gateway would schedule after it.
fn why(server: &Downstream, error: HubError) -> HubError {
    let state = server.state();
    match (&state.status, state.last_error) {
        (Status::Untrusted, _) => HubError::Untrusted(error.to_string()),
        (Status::Restarting { .. } | Status::Failed, Some(failure)) => {
            // A URL given as such is its own name: the failure names it already.
            let url = matches!(&server.config.transport, Some(Transport::Http { url, .. }) if *url == state.name);
            HubError::Unavailable(if url {
                failure
            } else {
                format!("server '{}': {failure}", state.name)
            })
        }
        _ => error,
    }
}
