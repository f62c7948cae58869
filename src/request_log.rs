//! Request id + tracing: the outermost layer. It gives every request an id (kept from
//! `x-request-id` when the client sent a sane one), pins the config snapshot the
//! request will use throughout, and writes one access-log line per request.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use http::{HeaderValue, Request, Response};
use tracing::Instrument;

use crate::app::Gateway;
use crate::body::ResponseFuture;
use crate::error::ErrorCode;
use crate::routing;
use crate::stack::{Next, Step};

pub const REQUEST_ID: &str = "x-request-id";

/// The request's id, in request extensions.
#[derive(Debug, Clone)]
pub struct RequestId(pub HeaderValue);

/// What the inner layers learned about a request, left in response extensions
/// for the access log.
#[derive(Debug, Clone, Default)]
pub struct LogFields {
    pub key: Option<Arc<str>>,
    pub model: Option<String>,
    pub provider: Option<String>,
    pub upstream: Option<Duration>,
}

impl LogFields {
    /// Merge into a response's existing fields (inner layers fill in different parts).
    pub fn attach<B>(self, resp: &mut Response<B>) {
        let fields = resp.extensions_mut().get_or_insert_default::<LogFields>();
        fields.key = fields.key.take().or(self.key);
        fields.model = fields.model.take().or(self.model);
        fields.provider = fields.provider.take().or(self.provider);
        fields.upstream = fields.upstream.take().or(self.upstream);
    }
}

/// Ids the gateway makes: a random per-process prefix and a counter, unique and cheap.
struct IdSource {
    prefix: u32,
    next: AtomicU64,
}

impl IdSource {
    fn new() -> Self {
        use ring::rand::SecureRandom;
        let mut b = [0u8; 4];
        let _ = ring::rand::SystemRandom::new().fill(&mut b);
        Self {
            prefix: u32::from_be_bytes(b),
            next: AtomicU64::new(1),
        }
    }

    fn make(&self) -> HeaderValue {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        HeaderValue::try_from(format!("{:08x}{:012x}", self.prefix, n))
            .expect("hex digits are a valid header value")
    }
}

/// A client-sent id is kept only if it is short and printable, so logs stay clean.
fn usable(v: &HeaderValue) -> bool {
    let b = v.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || b"-_.:/+=".contains(c))
}

/// The first step of every request: its id, the pinned snapshot, the access log line
/// and the request metrics.
#[derive(Clone)]
pub struct RequestLog {
    gateway: Arc<Gateway>,
    ids: Arc<IdSource>,
}

impl RequestLog {
    pub fn new(gateway: Arc<Gateway>) -> Self {
        Self {
            gateway,
            ids: Arc::new(IdSource::new()),
        }
    }
}

impl Step for RequestLog {
    fn call<S: Next<B>, B: Send + 'static>(
        &self,
        mut req: Request<B>,
        mut next: S,
    ) -> ResponseFuture {
        let started = Instant::now();
        let id = req
            .headers()
            .get(REQUEST_ID)
            .filter(|v| usable(v))
            .cloned()
            .unwrap_or_else(|| self.ids.make());
        req.extensions_mut().insert(RequestId(id.clone()));
        req.extensions_mut().insert(self.gateway.snapshot());
        let method = req.method().clone();
        let route = match req.uri().path() {
            "/metrics" => "GET /metrics",
            path => routing::route(req.method(), path)
                .map(|r| r.label())
                .unwrap_or("-"),
        };
        let gateway = self.gateway.clone();
        let span =
            tracing::info_span!("request", request_id = %String::from_utf8_lossy(id.as_bytes()));
        Box::pin(
            async move {
                let Ok(mut resp) = next.call(req).await;
                resp.headers_mut().insert(REQUEST_ID, id);
                let fields = resp
                    .extensions()
                    .get::<LogFields>()
                    .cloned()
                    .unwrap_or_default();
                let code = resp.extensions().get::<ErrorCode>().map(|c| c.0);
                let latency = started.elapsed();
                gateway.metrics.request(
                    route,
                    resp.status().as_u16(),
                    fields.model.as_deref(),
                    fields.provider.as_deref(),
                    latency,
                    fields.upstream,
                );
                tracing::info!(
                    target: "mediagate::access",
                    method = %method,
                    route,
                    status = resp.status().as_u16(),
                    key = fields.key.as_deref(),
                    model = fields.model.as_deref(),
                    provider = fields.provider.as_deref(),
                    latency_ms = latency.as_secs_f64() * 1e3,
                    upstream_ms = fields.upstream.map(|d| d.as_secs_f64() * 1e3),
                    error = code,
                    "request"
                );
                Ok(resp)
            }
            .instrument(span),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_sane_client_ids_only() {
        assert!(usable(&HeaderValue::from_static("abc-123_x.y")));
        assert!(!usable(&HeaderValue::from_static("")));
        assert!(!usable(&HeaderValue::from_static("has space")));
        assert!(!usable(&HeaderValue::try_from("a".repeat(200)).unwrap()));
    }

    #[test]
    fn made_ids_are_unique() {
        let s = IdSource::new();
        assert_ne!(s.make(), s.make());
    }
}
