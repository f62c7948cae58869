//! `[server]`: bounds checked, and the connection settings (TLS included) the edge
//! takes for every new connection.

use std::path::Path;
use std::time::Duration;

use crate::config::{Scope, SecretSource, ServerConfig};
use crate::edge;

pub(super) fn compile(cfg: &ServerConfig, dir: &Path, at: &mut Scope) -> Option<edge::Settings> {
    if cfg.max_body_bytes == 0 {
        at.push("max_body_bytes", "must be greater than 0");
    }
    if !(1..=tokio::sync::Semaphore::MAX_PERMITS).contains(&cfg.max_connections) {
        at.push(
            "max_connections",
            "must be greater than 0 and not absurdly large",
        );
    }
    if cfg.workers > 1024 {
        at.push("workers", "must be at most 1024 (0: one per CPU)");
    }
    if !(1..=tokio::sync::Semaphore::MAX_PERMITS).contains(&cfg.admin_max_connections) {
        at.push(
            "admin_max_connections",
            "must be greater than 0 and not absurdly large",
        );
    }
    // At most an hour: a submit's answer is written within it (and its write's
    // retries), which the ledger's sums of days that are over rely on (a day gets
    // them a day after it ended, `src/tasks/ledger/sqlite_usage.rs`).
    at.within(
        "request_timeout_ms",
        cfg.request_timeout_ms,
        100..=3_600_000,
    );
    // 0 would close every connection, time out every body or fail every handshake;
    // more than an hour would let a client hold its connection that long unheard.
    for (key, ms) in [
        ("idle_timeout_ms", cfg.idle_timeout_ms),
        ("header_read_timeout_ms", cfg.header_read_timeout_ms),
        ("body_read_timeout_ms", cfg.body_read_timeout_ms),
    ] {
        at.within(key, ms, 1..=3_600_000);
    }
    if let Some(tls) = &cfg.tls {
        at.at("tls").within(
            "handshake_timeout_ms",
            tls.handshake_timeout_ms,
            1..=3_600_000,
        );
    }
    let clients = client_limits(cfg, at);
    let tls = match &cfg.tls {
        Some(tls) => {
            let config = edge::tls::compile(tls, dir, &mut at.at("tls"))?;
            Some((config, Duration::from_millis(tls.handshake_timeout_ms)))
        }
        None => None,
    };
    Some(edge::Settings {
        header_read_timeout: Duration::from_millis(cfg.header_read_timeout_ms),
        idle_timeout: Duration::from_millis(cfg.idle_timeout_ms),
        max_connections: cfg.max_connections,
        admin_max_connections: cfg.admin_max_connections,
        clients: std::sync::Arc::new(clients?),
        shutdown_delay: Duration::from_millis(cfg.shutdown_delay_ms),
        shutdown_grace: Duration::from_millis(cfg.shutdown_grace_ms),
        tls,
    })
}

/// Shortest metrics token accepted.
const MIN_METRICS_TOKEN_LEN: usize = 16;

/// The SHA-256 digest of the token `/metrics` asks for on the main listeners, if one is
/// configured; `None` (with a problem) when it cannot be read or is too short.
pub(super) fn metrics_token(
    cfg: &ServerConfig,
    dir: &Path,
    at: &mut Scope,
) -> Option<Option<[u8; 32]>> {
    let source = SecretSource {
        env: cfg.metrics_token_env.as_deref(),
        file: cfg.metrics_token_file.as_deref(),
    };
    let key = if cfg.metrics_token_env.is_some() {
        "metrics_token_env"
    } else {
        "metrics_token_file"
    };
    let Some(token) = at.check(key, source.read(dir))? else {
        return Some(None);
    };
    if token.len() < MIN_METRICS_TOKEN_LEN {
        at.push(
            key,
            format!("the metrics token is shorter than {MIN_METRICS_TOKEN_LEN} characters"),
        );
        return None;
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    digest.as_ref().try_into().ok().map(Some)
}

/// The per-client-address cap, the trusted proxies and their client address header.
fn client_limits(cfg: &ServerConfig, at: &mut Scope) -> Option<edge::ClientLimits> {
    let before = at.count();
    let trusted_proxies = cfg
        .trusted_proxies
        .iter()
        .filter_map(|n| at.check("trusted_proxies", n.parse()))
        .collect();
    let client_ip_header = match &cfg.client_ip_header {
        Some(name) => at.check(
            "client_ip_header",
            http::HeaderName::try_from(name.as_str())
                .map(Some)
                .map_err(|_| format!("`{name}` is not a header name")),
        )?,
        None => None,
    };
    if client_ip_header.is_some() && cfg.trusted_proxies.is_empty() {
        at.push(
            "client_ip_header",
            "is read only from trusted_proxies, and none is configured",
        );
    }
    (at.count() == before).then_some(edge::ClientLimits {
        max_per_ip: cfg.max_connections_per_ip,
        trusted_proxies,
        client_ip_header,
    })
}
