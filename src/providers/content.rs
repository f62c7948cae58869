//! Content: a result only downloadable with our key, streamed through. Redirects
//! are followed a few times; our headers only go to the provider's own origin, and
//! nothing is fetched from a private network on a public upstream's say-so.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, StatusCode};
use http_body_util::Full;

use super::UpstreamError;
use super::answer::{Refusal, Step};
use super::jq::from_json;
use super::plan::RequestPlan;
use super::{Call, Provider};
use crate::config::{ContentConfig, Scope, is_base_url};
use crate::outbound::client;

/// The content request that needs our key: `.` is `{"urls": […]}`, `$id` the upstream id.
pub(super) struct ContentPlan {
    request: RequestPlan,
    timeout: Duration,
    public_base_url: Option<String>,
}

impl ContentPlan {
    pub(super) fn compile(c: &ContentConfig, at: &mut Scope) -> Option<Self> {
        let request = RequestPlan::compile(Step::Content, at, &c.method, &c.path, &c.query);
        let public_base_url = c
            .public_base_url
            .as_ref()
            .map(|u| u.trim_end_matches('/').to_string());
        if public_base_url.as_deref().is_some_and(|u| !is_base_url(u)) {
            at.push(
                "public_base_url",
                "must be an http:// or https:// URL without a query",
            );
        }
        Some(Self {
            request: request?,
            timeout: Duration::from_millis(c.timeout_ms),
            public_base_url,
        })
    }

    /// How clients reach the gateway, when configured.
    pub(super) fn public_base_url(&self) -> Option<&str> {
        self.public_base_url.as_deref()
    }
}

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
    ) -> Result<http::Response<client::IdleTimeout<hyper::body::Incoming>>, UpstreamError> {
        let Some(plan) = &self.content else {
            return Err(UpstreamError::TaskGone);
        };
        let request = {
            let vars = call.vars(Some(upstream_id));
            let input = from_json(&serde_json::json!({ "urls": urls }));
            plan.request
                .build(&self.origin, &input, &vars, None)
                .map_err(|e| self.cleaned(e))?
        };
        self.open_content(request, plan.timeout, range).await
    }

    /// Open result `n` of a completed task to copy it: through the content step when
    /// the provider has one (its one result), else a GET of the result's URL, with
    /// our headers only when it is on the provider's own origin, and never into a
    /// private network the provider may not reach.
    pub async fn result(
        &self,
        call: Call<'_>,
        upstream_id: &str,
        urls: &[String],
        n: usize,
        idle: Duration,
    ) -> Result<http::Response<client::IdleTimeout<hyper::body::Incoming>>, UpstreamError> {
        if self.content.is_some() {
            return self.content(call, upstream_id, urls, None).await;
        }
        let url = urls
            .get(n)
            .and_then(|u| u.parse::<http::Uri>().ok())
            .filter(|u| matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some())
            .ok_or_else(|| {
                UpstreamError::failed("content", "the result's URL is not an http(s) URL")
            })?;
        if !self.origin.may_reach(&url) {
            return Err(UpstreamError::failed(
                "content",
                "the result's URL is in a private network; refused",
            ));
        }
        self.open_content(self.follow(url), idle, None).await
    }

    async fn open_content(
        &self,
        mut request: Request<Full<Bytes>>,
        timeout: Duration,
        range: Option<HeaderValue>,
    ) -> Result<http::Response<client::IdleTimeout<hyper::body::Incoming>>, UpstreamError> {
        for _ in 0..=MAX_CONTENT_REDIRECTS {
            if let Some(range) = &range {
                request
                    .headers_mut()
                    .insert(http::header::RANGE, range.clone());
            }
            let at = request.uri().clone();
            let response = match self.client.open(request, timeout).await {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(provider = %self.name, step = "content", error = %e, "upstream call failed");
                    return Err(Refusal::of_call(&e).into_error(&self.name, Step::Content, None));
                }
            };
            let status = response.status();
            if status.is_redirection() && status != StatusCode::NOT_MODIFIED {
                let next = redirect_target(&at, response.headers()).ok_or_else(|| {
                    UpstreamError::failed("content", "redirected without a usable Location")
                })?;
                if !self.origin.may_reach(&next) {
                    tracing::warn!(provider = %self.name, to = %self.redactor.for_log(&next.to_string()), "content redirect into a private network refused");
                    return Err(UpstreamError::failed(
                        "content",
                        "redirected into a private network; refused",
                    ));
                }
                request = self.follow(next);
                continue;
            }
            if status == StatusCode::RANGE_NOT_SATISFIABLE {
                return Err(UpstreamError::RangeNotSatisfiable);
            }
            if let Some(refusal) = Refusal::of_status(Step::Content, status, response.headers()) {
                return Err(refusal.into_error(&self.name, Step::Content, None));
            }
            return Ok(response.map(|body| client::IdleTimeout::new(body, timeout)));
        }
        Err(UpstreamError::failed("content", "too many redirects"))
    }

    /// A GET to where a content request was redirected; our headers only when it
    /// stays on the provider's origin.
    fn follow(&self, to: http::Uri) -> Request<Full<Bytes>> {
        let mut request = Request::new(Full::new(Bytes::new()));
        if self.origin.same_origin(&to) {
            *request.headers_mut() = self.origin.headers.clone();
        }
        *request.uri_mut() = to;
        request
    }
}

/// Redirects followed by a content request before giving up.
const MAX_CONTENT_REDIRECTS: usize = 3;

/// Where a redirect points: an absolute http(s) URL, or a path on the same origin.
fn redirect_target(from: &http::Uri, headers: &HeaderMap) -> Option<http::Uri> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirects_resolve_absolute_and_same_origin_paths_only() {
        let from: http::Uri = "https://api.example/v1/files/a:download?alt=media"
            .parse()
            .unwrap();
        let to = |loc: &str| {
            let mut h = HeaderMap::new();
            h.insert(http::header::LOCATION, HeaderValue::from_str(loc).unwrap());
            redirect_target(&from, &h)
        };
        assert_eq!(
            to("https://storage.example/b/a.mp4?sig=1").unwrap(),
            "https://storage.example/b/a.mp4?sig=1"
        );
        assert_eq!(to("/v1/blobs/a").unwrap(), "https://api.example/v1/blobs/a");
        assert!(to("ftp://x/y").is_none());
        assert!(to("//other.example/x").is_none());
        assert!(to("relative/path").is_none());
        assert!(redirect_target(&from, &HeaderMap::new()).is_none());
    }
}
