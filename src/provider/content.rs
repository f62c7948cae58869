//! Content: a result only downloadable with our key, streamed through. Redirects
//! are followed a few times; our headers only go to the provider's own origin, and
//! nothing is fetched from a private network on a public upstream's say-so.

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, StatusCode};
use http_body_util::Full;

use super::transform::from_json;
use super::{Call, Provider, client};
use crate::error::ApiError;

impl Provider {
    /// Open the upstream content of a task; the body is streamed by the caller.
    /// `range` is the client's `Range` header, passed on so players can seek.
    /// Redirects are followed (storage behind signed URLs); our headers, the key
    /// among them, go only to the provider's own origin.
    pub async fn content(
        &self,
        call: Call<'_>,
        upstream_id: &str,
        urls: &[String],
        range: Option<HeaderValue>,
    ) -> Result<http::Response<client::IdleTimeout<hyper::body::Incoming>>, ApiError> {
        let Some(plan) = &self.content else {
            return Err(ApiError::task_not_found());
        };
        let mut request = {
            let vars = call.vars(Some(upstream_id));
            let input = from_json(&serde_json::json!({ "urls": urls }));
            self.build(
                "content",
                &plan.method,
                &plan.path,
                plan.query.as_ref(),
                None,
                None,
                &input,
                &vars,
            )?
        };
        for _ in 0..=MAX_CONTENT_REDIRECTS {
            if let Some(range) = &range {
                request
                    .headers_mut()
                    .insert(http::header::RANGE, range.clone());
            }
            let at = request.uri().clone();
            let response = match self.client.open(request, plan.timeout).await {
                Ok(r) => r,
                Err(e) => return Err(self.unanswered("content", e)),
            };
            let status = response.status();
            if status.is_redirection() && status != StatusCode::NOT_MODIFIED {
                let next = redirect_target(&at, response.headers()).ok_or_else(|| {
                    ApiError::upstream_failed("content", "redirected without a usable Location")
                })?;
                if !self.may_reach(&next) {
                    tracing::warn!(provider = %self.name, to = %next, "content redirect into a private network refused");
                    return Err(ApiError::upstream_failed(
                        "content",
                        "redirected into a private network; refused",
                    ));
                }
                request = self.follow(next);
                continue;
            }
            if status == StatusCode::RANGE_NOT_SATISFIABLE {
                return Err(ApiError::range_not_satisfiable());
            }
            self.check_answer("content", status, response.headers())?;
            let idle = plan.timeout;
            return Ok(response.map(|body| client::IdleTimeout::new(body, idle)));
        }
        Err(ApiError::upstream_failed("content", "too many redirects"))
    }

    /// A GET to where a content request was redirected; our headers only when it
    /// stays on the provider's origin.
    fn follow(&self, to: http::Uri) -> Request<Full<Bytes>> {
        let mut request = Request::new(Full::new(Bytes::new()));
        if self.same_origin(&to) {
            *request.headers_mut() = self.headers.clone();
        }
        *request.uri_mut() = to;
        request
    }
}

/// Redirects followed by a content request before giving up.
const MAX_CONTENT_REDIRECTS: usize = 3;

/// Where a redirect points: an absolute http(s) URL, or a path on the same origin.
pub(super) fn redirect_target(from: &http::Uri, headers: &HeaderMap) -> Option<http::Uri> {
    let location = headers.get(http::header::LOCATION)?.to_str().ok()?;
    let to = location.parse::<http::Uri>().ok()?;
    if to.scheme().is_some() {
        return matches!(to.scheme_str(), Some("http" | "https"))
            .then_some(to)
            .filter(|u| u.authority().is_some());
    }
    if !location.starts_with('/') || location.starts_with("//") {
        return None;
    }
    http::Uri::builder()
        .scheme(from.scheme()?.clone())
        .authority(from.authority()?.clone())
        .path_and_query(location)
        .build()
        .ok()
}
