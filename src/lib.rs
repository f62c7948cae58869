//! mediagate: one clean interface in front of asynchronous media-generation
//! providers.
//!
//! The request path, module by module and with submit and query drawn separately, is
//! described once, in `docs/architecture.md`. The crate is laid out by concern, each
//! room depending only on the ones listed before it:
//!
//! - [`response`], [`error`] (the error catalogue), [`metrics`], [`workers`] (the
//!   serving threads), [`log_output`] (log lines written in batches): the foundation;
//! - [`config`]: the routes.toml types, the problems collector, the secret reader;
//! - [`tasks`]: task state and its public shape, sealed task ids, the results cache,
//!   the ledger;
//! - [`outbound`]: the requests the gateway makes: the guarded, pooled HTTP client and
//!   where its requests may lead;
//! - [`providers`]: upstream APIs described by jq programs;
//! - [`webhooks`]: which callback URLs are accepted, and Standard Webhooks signing;
//! - [`access`]: client keys and their limits;
//! - [`models`]: the served models and their parameter schemas;
//! - [`edge`]: listeners, TLS, connection hardening, request body bounds;
//! - [`snapshot`]: routes.toml compiled, section by section, into one immutable value;
//! - [`lifecycle`]: the task service: submit, lookup, the terminal event — the only
//!   way to a task;
//! - [`gateway`]: the shared state (current snapshot, task service, metrics), reload,
//!   and the background loops (sweep, tracker, webhook deliveries);
//! - [`api`]: the tower stack: request context, auth, limits, one handler per endpoint;
//! - [`start`]: the gateway running in this process, as `mediagate serve` runs it;
//!   [`operator`]: the `usage` and `tasks` commands over the ledger.
//!
//! [`simulator`] is the built-in simulated provider of the shipped configuration.

/// A hash map looked up on the request path whose keys come from the configuration
/// (models, providers, key names, status words): foldhash, randomly seeded, instead of
/// SipHash, which took a few hundred instructions a lookup. Not for maps that clients
/// or upstreams fill.
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

pub mod access;
pub mod api;
mod calendar;
pub mod config;
pub mod edge;
mod error;
pub mod gateway;
pub mod lifecycle;
pub mod log_format;
pub mod log_output;
mod metrics;
mod models;
pub mod money;
pub mod operator;
pub mod outbound;
pub mod providers;
mod response;
mod running;
pub mod simulator;
pub mod snapshot;
pub mod storage;
pub mod tasks;
pub mod telemetry;
pub mod traces;
pub mod webhooks;
pub mod workers;

pub use running::{Running, StartError, start};
