//! `GET {collection}/{id}/content[/{n}]`: open the id (owner checked, same 404 as a
//! query; or a signed link's signature) → result `n` from storage when it was kept
//! (`stored.rs`) → else the completed state (cached or queried) and the upstream
//! content request (the provider's content step with our key, or the result's URL),
//! the bytes streamed through as they arrive.

use std::time::Duration;

use http::{HeaderValue, Response, header};
use http_body_util::BodyExt;

use super::task_ref::OpenTask;
use crate::api::context::RequestContext;
use crate::config::Endpoint;
use crate::error::ApiError;
use crate::gateway::Gateway;
use crate::lifecycle::TaskRef;
use crate::response::ResponseBody;
use crate::tasks::TaskStatus;
use crate::tasks::ledger::now_ms;

/// Headers of an upstream content answer passed on to the client (`Cache-Control` is
/// made private, see [`private_cache_control`]).
const CONTENT_HEADERS: [header::HeaderName; 8] = [
    header::CONTENT_TYPE,
    header::CONTENT_LENGTH,
    header::CONTENT_RANGE,
    header::CONTENT_ENCODING,
    header::ACCEPT_RANGES,
    header::CONTENT_DISPOSITION,
    header::ETAG,
    header::LAST_MODIFIED,
];

pub(super) async fn content(
    gateway: &Gateway,
    ctx: &RequestContext,
    endpoint: Endpoint,
    id: &str,
    n: usize,
    request: &http::request::Parts,
) -> Result<Response<ResponseBody>, ApiError> {
    let open = match ctx.key_if_any() {
        Some(_) => OpenTask::open(ctx, endpoint, id)?,
        None => OpenTask::open_signed(ctx, endpoint, id, n, request.uri.query())?,
    };
    let task = TaskRef::from(&open.task);
    let stored = gateway.tasks.stored_results(task).await?;
    if let (Some(result), Some(storage)) = (
        stored.iter().find(|r| r.n == n as i64),
        gateway.tasks.storage(),
    ) {
        let storage_cfg = &ctx.snapshot.storage;
        let direct = storage_cfg
            .direct_links
            .then(|| Duration::from_secs(storage_cfg.link_ttl_secs));
        return super::stored::answer(storage, result, request, direct, now_ms()).await;
    }
    // Deleted by its owner: not passed on from the provider either (it may keep the
    // media for a while), as no stored result of it is served. A ledger out of reach
    // refuses rather than serve what may have been deleted.
    if gateway.tasks.was_deleted(task).await? {
        return Err(ApiError::result_expired());
    }
    let state = open.state(gateway, ctx).await?;
    if state.status != TaskStatus::Completed {
        return Err(ApiError::content_not_ready());
    }
    let range = request.headers.get(header::RANGE).cloned();
    let call = task.call(&ctx.snapshot);
    let upstream_id = &open.task.upstream_id;
    let content_step = open.provider.content_url_base().is_some();
    let upstream = if content_step && n == 0 {
        open.provider
            .content(call, upstream_id, &state.urls, range)
            .await?
    } else if !content_step && n < state.urls.len() {
        let idle = Duration::from_millis(ctx.snapshot.storage.copy_timeout_ms);
        open.provider
            .result(call, upstream_id, &state.urls, n, idle)
            .await?
    } else {
        // A content step gives one result; a provider's list has as many as it has.
        return Err(ApiError::path_not_found());
    };
    let (parts, body) = upstream.into_parts();
    let mut resp = Response::new(BodyExt::boxed(body));
    // 200, or 206 for a range.
    *resp.status_mut() = parts.status;
    let headers = resp.headers_mut();
    for name in CONTENT_HEADERS {
        if let Some(value) = parts.headers.get(&name) {
            headers.insert(name, value.clone());
        }
    }
    // The content is the key holder's own: no shared cache may keep it, and a browser
    // must not guess another type than the one sent.
    headers.insert(
        header::CACHE_CONTROL,
        private_cache_control(parts.headers.get(header::CACHE_CONTROL)),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    Ok(resp)
}

/// `private`, with the upstream's own directives but those that let shared caches keep
/// the content (`public`, `s-maxage`, `proxy-revalidate`).
fn private_cache_control(upstream: Option<&HeaderValue>) -> HeaderValue {
    let kept: Vec<&str> = upstream
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|d| {
            let name = d.split('=').next().unwrap_or_default().to_ascii_lowercase();
            !d.is_empty()
                && !matches!(
                    name.as_str(),
                    "public" | "private" | "s-maxage" | "proxy-revalidate"
                )
        })
        .collect();
    let value = std::iter::once("private")
        .chain(kept)
        .collect::<Vec<_>>()
        .join(", ");
    HeaderValue::from_str(&value).unwrap_or(HeaderValue::from_static("private"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_control_is_made_private() {
        let cc = |v: Option<&str>| {
            let v = v.map(|v| HeaderValue::from_str(v).unwrap());
            private_cache_control(v.as_ref())
        };
        assert_eq!(cc(None), "private");
        assert_eq!(cc(Some("public, max-age=3600")), "private, max-age=3600");
        assert_eq!(
            cc(Some("max-age=60, s-maxage=600, no-transform")),
            "private, max-age=60, no-transform"
        );
        assert_eq!(cc(Some("no-store")), "private, no-store");
    }
}
