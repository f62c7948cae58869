//! mediagate's integration tests: one crate, one harness (`support`).

mod support;

mod auth;
mod check_command;
mod config_checks;
mod connection_limits;
mod connections;
mod content_route;
mod discovery;
mod docs;
mod errors;
mod http2;
mod key_limits;
mod ledger;
mod lifecycle;
mod metrics_access;
mod models;
mod money;
mod observability;
mod param_bounds;
mod param_limits;
mod private_networks;
mod providers_errors;
mod providers_shapes;
mod providers_tls;
mod quota_counting;
mod redaction;
mod reload;
mod results;
mod results_s3;
mod shutdown;
mod tls;
mod tracker;
mod upstream_bounds;
mod upstream_pool;
mod webhooks;
