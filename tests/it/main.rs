//! mediagate's integration tests: one crate, one harness (`support`).

mod support;

mod auth;
mod check_command;
mod connections;
mod discovery;
mod docs;
mod errors;
mod http2;
mod key_limits;
mod lifecycle;
mod models;
mod observability;
mod param_limits;
mod providers_errors;
mod providers_shapes;
mod providers_tls;
mod reload;
mod shutdown;
mod tls;
