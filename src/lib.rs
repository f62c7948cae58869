//! mediagate: one clean interface in front of asynchronous media-generation
//! providers.
//!
//! # The request path
//!
//! Outermost first; each step is one module:
//!
//! 1. [`server`]: listener, HTTP/1.1 and HTTP/2 (hyper 1 + hyper-util), graceful stop.
//! 2. [`request_log`]: request id, the pinned config [`snapshot`], one access-log line.
//! 3. [`auth`]: Bearer key → [`auth::ApiKey`], for every route but `/healthz` and `/readyz`.
//! 4. [`routing`]: method and path → endpoint (404, 405 with `Allow`).
//! 5. [`body`]: bounded body read, JSON content type (413, 415).
//! 6. model lookup in the [`snapshot`], and the key's permission for it (400, 403).
//! 7. [`validate`]: the family's JSON Schema (400 naming the parameter).
//! 8. [`provider`]: provider choice with failover, the upstream request built by the
//!    provider's jq [`provider::transform`], sent by the pooled [`provider::client`].
//! 9. [`normalize`]: the upstream answer read into one of four statuses; for a
//!    completed task, the provider's optional second (result) request.
//!    `{collection}/{id}/content` streams a result that needs the upstream key.
//! 10. [`task_id`]: the sealed, self-contained task id; [`cache`] for query results.
//! 11. [`task`]: the public response shapes; [`error`] for every refusal.
//!
//! [`handlers`] puts steps 4–11 in order; [`app`] assembles the tower stack.
//! [`config`] is the routes.toml file format; [`simulator`] is the built-in
//! simulated provider used by the shipped configuration.

pub mod app;
pub mod auth;
pub mod body;
pub mod cache;
pub mod config;
pub mod error;
pub mod handlers;
pub mod normalize;
pub mod provider;
pub mod request_log;
pub mod routing;
pub mod server;
pub mod simulator;
pub mod snapshot;
pub mod task;
pub mod task_id;
pub mod validate;
