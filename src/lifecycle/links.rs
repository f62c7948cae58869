//! The links a client is given for a completed task, in a query, a listing or a
//! webhook alike: the gateway's content route, signed so that it works without the
//! key, when the task's family keeps its results in storage; else the gateway's
//! content route when only our key can download the result (the provider has a
//! content step); else the provider's own result URLs.

use std::sync::Arc;
use std::time::Duration;

use crate::config::Endpoint;
use crate::providers::Provider;
use crate::snapshot::Snapshot;
use crate::tasks::{TaskState, TaskStatus};

/// `state`'s links as the client sees them. The content route's base is
/// `[storage] public_base_url` (for kept results) or the provider's
/// `content.public_base_url`, else `client_base` (the address the asking client
/// used; none for a webhook), else the path alone.
pub fn make_public(
    snapshot: &Snapshot,
    state: &mut Arc<TaskState>,
    provider: Option<&Provider>,
    model: &str,
    endpoint: Endpoint,
    id: &str,
    client_base: impl FnOnce() -> Option<String>,
) {
    if state.status != TaskStatus::Completed {
        return;
    }
    let content_step = provider.and_then(Provider::content_url_base);
    let kept = snapshot
        .models
        .get(model)
        .is_some_and(|m| m.results.keep_days.is_some());
    if kept && !state.urls.is_empty() {
        let configured = snapshot.storage.public_base_url.as_deref();
        let configured = configured.or(content_step.flatten());
        let base = content_link(configured, client_base, endpoint, id);
        // A content step gives the one result it knows.
        let count = if content_step.is_some() {
            1
        } else {
            state.urls.len()
        };
        let ttl = Duration::from_secs(snapshot.storage.link_ttl_secs);
        // In the ledger's clock, as every replica checks it (`ledger::now_ms`).
        let expires = crate::tasks::ledger::now_ms().max(0) as u64 / 1000 + ttl.as_secs();
        let urls = (0..count)
            .map(|n| {
                let signature = snapshot.sealer.sign_link(id, n, expires);
                let path = if n == 0 {
                    String::new()
                } else {
                    format!("/{n}")
                };
                format!("{base}{path}?expires={expires}&signature={signature}")
            })
            .collect();
        Arc::make_mut(state).urls = urls;
        return;
    }
    let Some(configured) = content_step else {
        return;
    };
    Arc::make_mut(state).urls = vec![content_link(configured, client_base, endpoint, id)];
}

/// `{base}{collection}/{id}/content`: the base `configured` for the provider, else the
/// one the client used, else none (a relative link).
pub fn content_link(
    configured: Option<&str>,
    client_base: impl FnOnce() -> Option<String>,
    endpoint: Endpoint,
    id: &str,
) -> String {
    let base = match configured {
        Some(base) => base.to_string(),
        None => client_base().unwrap_or_default(),
    };
    format!("{base}{}/{id}/content", endpoint.path())
}
