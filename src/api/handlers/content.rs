//! `GET {collection}/{id}/content`: open the id (owner checked, same 404 as a query)
//! → the completed state (cached or queried) → the upstream content request with our
//! key → the bytes streamed through as they arrive.

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
    range: Option<HeaderValue>,
) -> Result<Response<ResponseBody>, ApiError> {
    let open = OpenTask::open(ctx, endpoint, id)?;
    let state = open.state(gateway, ctx).await?;
    if state.status != TaskStatus::Completed {
        return Err(ApiError::content_not_ready());
    }
    let call = TaskRef::from(&open.task).call(&ctx.snapshot);
    let upstream = open
        .provider
        .content(call, &open.task.upstream_id, &state.urls, range)
        .await?;
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
