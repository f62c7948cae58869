//! The links a client is given for a completed task, in a query, a listing or a
//! webhook alike: the provider's own result URLs, unless only our key can download
//! them (the provider has a content step); then the gateway's content route.

use std::sync::Arc;

use crate::config::Endpoint;
use crate::providers::Provider;
use crate::tasks::{TaskState, TaskStatus};

/// `state`'s links as the client sees them. The content route's base is the
/// provider's `content.public_base_url`, else `client_base` (the address the asking
/// client used; none for a webhook), else the path alone.
pub fn make_public(
    state: &mut Arc<TaskState>,
    provider: Option<&Provider>,
    endpoint: Endpoint,
    id: &str,
    client_base: impl FnOnce() -> Option<String>,
) {
    if state.status != TaskStatus::Completed {
        return;
    }
    let Some(configured) = provider.and_then(Provider::content_url_base) else {
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
