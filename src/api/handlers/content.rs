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
use crate::response::ResponseBody;
use crate::tasks::TaskStatus;

/// Headers of an upstream content answer passed on to the client.
const CONTENT_HEADERS: [header::HeaderName; 8] = [
    header::CONTENT_TYPE,
    header::CONTENT_LENGTH,
    header::CONTENT_RANGE,
    header::ACCEPT_RANGES,
    header::CONTENT_DISPOSITION,
    header::ETAG,
    header::LAST_MODIFIED,
    header::CACHE_CONTROL,
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
    let upstream = open
        .provider
        .content(open.call(), &open.task.upstream_id, &state.urls, range)
        .await?;
    let (parts, body) = upstream.into_parts();
    let mut resp = Response::new(BodyExt::boxed(body));
    // 200, or 206 for a range.
    *resp.status_mut() = parts.status;
    for name in CONTENT_HEADERS {
        if let Some(value) = parts.headers.get(&name) {
            resp.headers_mut().insert(name, value.clone());
        }
    }
    Ok(resp)
}
