//! A submit's webhook: the `callback_url` of its body, else its key's `webhook_url`.
//! A URL the client gives is checked as written and by what its host resolves to; the
//! key must have a webhook secret to sign with.

use crate::access::ApiKey;
use crate::api::context::RequestContext;
use crate::error::ApiError;

/// Where the task's outcome is posted, if anywhere.
pub(super) async fn target(
    ctx: &RequestContext,
    key: &ApiKey,
    requested: Option<String>,
) -> Result<Option<String>, ApiError> {
    let Some(url) = requested else {
        return Ok(key.webhook_url.clone());
    };
    let refused =
        |msg: String| ApiError::invalid_parameter("callback_url", format!("`callback_url` {msg}"));
    if key.webhook_signer.is_none() {
        return Err(refused(
            "cannot be used with this key: it has no webhook secret to sign with (webhook_secret_env in routes.toml)".into(),
        ));
    }
    let policy = &ctx.snapshot.webhooks.callbacks;
    let uri = policy.check(&url).map_err(refused)?;
    policy.check_resolved(&uri).await.map_err(refused)?;
    Ok(Some(url))
}
