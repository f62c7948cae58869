//! mediagate: one clean interface in front of asynchronous media-generation
//! providers.
//!
//! # The request path
//!
//! Outermost first; each step is one module:
//!
//! 1. [`server`]: listeners (plain, and TLS by [`tls`]), the connection cap, the TLS
//!    handshake under a timeout in its own task, HTTP/1.1 and HTTP/2 (hyper 1 +
//!    hyper-util) with a header read timeout, graceful stop.
//! 2. [`request_log`]: request id, the pinned config [`snapshot`], one access-log line,
//!    the request [`metrics`] (also served on `GET /metrics`).
//! 3. [`auth`]: Bearer key → [`auth::ApiKey`], for every route but `/healthz`,
//!    `/readyz` and `/metrics`.
//! 4. [`key_limits`]: the key's request rate, submit rate (governor) and requests in
//!    progress (429, 503).
//! 5. the request body read deadline of [`body`] (408).
//! 6. [`routing`]: method and path → endpoint (404, 405 with `Allow`).
//! 7. [`body`]: bounded body read, JSON content type (413, 415).
//! 8. model lookup in the [`snapshot`], and the key's permission for it (400, 403).
//! 9. [`validate`]: the family's JSON Schema (400 naming the parameter).
//! 10. [`provider`]: provider choice with failover, the upstream request built by the
//!     provider's jq [`provider::transform`], sent by the pooled [`provider::client`].
//! 11. [`normalize`]: the upstream answer read into one of four statuses; for a
//!     completed task, the provider's optional second (result) request.
//!     `{collection}/{id}/content` streams a result that needs the upstream key.
//! 12. [`task_id`]: the sealed, self-contained task id; [`cache`] for query results.
//! 13. [`task`]: the public response shapes; [`error`] for every refusal.
//!
//! Steps 2–5 are [`stack::Step`]s; [`handlers`] puts steps 6–13 in order; [`app`] assembles the tower stack and holds
//! the snapshot that [`reload`] swaps on SIGHUP.
//! [`config`] is the routes.toml file format; [`simulator`] is the built-in
//! simulated provider used by the shipped configuration.

pub mod app;
pub mod auth;
pub mod body;
pub mod cache;
pub mod config;
pub mod error;
pub mod handlers;
pub mod key_limits;
pub mod metrics;
pub mod normalize;
pub mod provider;
pub mod reload;
pub mod request_log;
pub mod routing;
mod running;
pub mod server;
pub mod simulator;
pub mod snapshot;
pub mod stack;
pub mod task;
pub mod task_id;
pub mod tls;
pub mod validate;

pub use running::{Running, StartError, start};
