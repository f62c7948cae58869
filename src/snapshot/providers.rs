//! `[providers.*]`: each block compiled into a [`Provider`].

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use super::LoadContext;
use crate::FastMap;
use crate::config::{Problems, RoutesFile};
use crate::providers::Provider;

/// `base_url` value that means "the built-in simulated provider".
pub const SIMULATOR_URL: &str = "builtin:simulator";

/// Every provider that compiles, and whether one of them is the simulator.
pub(super) fn compile(
    file: &RoutesFile,
    dir: &Path,
    ctx: &LoadContext,
    p: &mut Problems,
) -> (FastMap<String, Arc<Provider>>, bool) {
    let mut uses_simulator = false;
    let mut providers = FastMap::default();
    for (name, cfg) in &file.providers {
        let base = if cfg.base_url == SIMULATOR_URL {
            uses_simulator = true;
            // While checking, any address will do: nothing is sent.
            let addr = ctx
                .simulator_addr
                .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 9)));
            format!("http://{addr}")
        } else {
            cfg.base_url.clone()
        };
        let mut at = p.at(format!("providers.{name}"));
        // The request timeout must leave room for the body and the whole submit:
        // otherwise a submit the provider received is cut off mid-way (504) while it
        // runs on, and the client retries a task that exists.
        let needed = cfg
            .submit_timeout_ms
            .saturating_add(file.server.body_read_timeout_ms);
        if needed > file.server.request_timeout_ms {
            at.push(
                "submit_timeout_ms",
                format!(
                    "with server.body_read_timeout_ms ({} ms) it is longer than server.request_timeout_ms ({} ms)",
                    file.server.body_read_timeout_ms, file.server.request_timeout_ms
                ),
            );
        }
        if let Some(provider) =
            Provider::compile(name, cfg, &base, dir, &mut at, &ctx.unmapped_statuses)
        {
            providers.insert(name.clone(), Arc::new(provider));
        }
    }
    (providers, uses_simulator)
}
