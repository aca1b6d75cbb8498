//! The client side of the hub: one downstream server at a time, as Tandem's rmcp client
//! sees it.
//!
//! `server` is a running server (its client, the caches of what it lists, timeouts and
//! restarts); `stdio` its process when it runs on stdio; `remembered` what it said when it
//! last ran, kept in the store so that a server not started yet can still be listed;
//! `oauth` the sign-in of a remote server that asks for one, and its tokens on disk;
//! `ask` answers what a server asks of its client (elicitation, sampling, roots);
//! `describe` turns rmcp's failures into sentences for people; `check` is a one-off
//! connection for `tandem servers check`; `tasks` follows the tasks a server runs a call
//! as (the tasks extension).

pub mod ask;
pub mod check;
pub mod describe;
pub mod oauth;
pub(super) mod remembered;
pub mod server;
mod stdio;
pub mod tasks;
