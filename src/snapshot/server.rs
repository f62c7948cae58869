//! `[server]`: bounds checked, and the connection settings (TLS included) the edge
//! takes for every new connection.

use std::path::Path;
use std::time::Duration;

use crate::config::{Scope, ServerConfig};
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
    let tls = match &cfg.tls {
        Some(tls) => {
            let config = edge::tls::compile(tls, dir, &mut at.at("tls"))?;
            Some((config, Duration::from_millis(tls.handshake_timeout_ms)))
        }
        None => None,
    };
    Some(edge::Settings {
        header_read_timeout: Duration::from_millis(cfg.header_read_timeout_ms),
        max_connections: cfg.max_connections,
        shutdown_delay: Duration::from_millis(cfg.shutdown_delay_ms),
        shutdown_grace: Duration::from_millis(cfg.shutdown_grace_ms),
        tls,
    })
}
