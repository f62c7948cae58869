//! The outermost layer: it gives every request an id (kept from `x-request-id` when
//! the client sent a sane one), routes it once, pins the configuration snapshot into
//! the [`RequestContext`], and writes one access-log line and the request metrics when
//! the answer is ready.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Instant;

use http::{HeaderName, HeaderValue, Request, Response};
use tower::{Layer, Service};
use tracing::Instrument;

use super::context::{Ctx, RequestContext};
use super::routing::{Optional, route};
use super::stack::Next;
use crate::error::{ApiError, ErrorCode};
use crate::gateway::Gateway;
use crate::response::{ResponseBody, ResponseFuture};
use crate::traces::RequestTrace;

pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

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

    /// 8 hex digits of the prefix, 12 of the counter (its low 48 bits: 2^48 requests
    /// before one repeats); written without `format!`, which showed in the profile of
    /// every request.
    fn make(&self) -> HeaderValue {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let mut id = [0u8; 20];
        let digits = (u128::from(self.prefix) << 48) | u128::from(n & 0xffff_ffff_ffff);
        for (i, d) in id.iter_mut().rev().enumerate() {
            *d = HEX[((digits >> (4 * i)) & 0xf) as usize];
        }
        HeaderValue::from_bytes(&id).expect("hex digits are a valid header value")
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

/// The outermost layer, as a tower layer in front of the context-taking stack.
#[derive(Clone)]
pub struct RequestLogLayer {
    gateway: Arc<Gateway>,
    ids: Arc<IdSource>,
}

impl RequestLogLayer {
    pub fn new(gateway: Arc<Gateway>) -> Self {
        Self {
            gateway,
            ids: Arc::new(IdSource::new()),
        }
    }
}

impl<S> Layer<S> for RequestLogLayer {
    type Service = RequestLog<S>;

    fn layer(&self, inner: S) -> RequestLog<S> {
        RequestLog {
            layer: self.clone(),
            inner,
        }
    }
}

/// The first step of every request.
#[derive(Clone)]
pub struct RequestLog<S> {
    layer: RequestLogLayer,
    inner: S,
}

impl<S: Next<B>, B: Send + 'static> Service<Request<B>> for RequestLog<S> {
    type Response = Response<ResponseBody>;
    type Error = Infallible;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> ResponseFuture {
        let started = Instant::now();
        let id = req
            .headers()
            .get(REQUEST_ID)
            .filter(|v| usable(v))
            .cloned()
            .unwrap_or_else(|| self.layer.ids.make());
        let snapshot = self.layer.gateway.snapshot();
        let optional = Optional {
            metrics: snapshot.metrics_on_main_listeners(),
            openapi: snapshot.server.openapi,
        };
        let over_cap = req.extensions().get::<crate::edge::conn::OverCap>();
        let route = match over_cap {
            None => route(req.method(), req.uri().path(), optional),
            Some(_) => super::routing::Route::Refused {
                error: ApiError::too_many_connections(),
                public: true,
            },
        };
        let ctx: Ctx = Arc::new(RequestContext::new(id, route, snapshot));
        let method = req.method().clone();
        let gateway = self.layer.gateway.clone();
        // The request's span in the log, the same with traces on or off.
        let span = tracing::info_span!("request", request_id = %String::from_utf8_lossy(ctx.id.as_bytes()));
        let trace = crate::traces::request(req.headers(), || traced_span(&ctx, &method));
        let clone = self.inner.clone();
        let mut ready = std::mem::replace(&mut self.inner, clone);
        // Called here (in the request's span), so that the future kept while the
        // request runs holds the answer's future, not the request beside it.
        let inner = span.in_scope(|| ready.call((ctx.clone(), req)));
        let answered = async move {
            let Ok(mut resp) = inner.await;
            resp.headers_mut().insert(REQUEST_ID, ctx.id.clone());
            log(&gateway, &ctx, &method, &resp, started);
            Ok(resp)
        };
        match trace {
            RequestTrace::Off => Box::pin(answered.instrument(span)),
            RequestTrace::Sampled(traced) => Box::pin(answered.instrument(traced).instrument(span)),
            RequestTrace::Unsampled(passed) => {
                Box::pin(crate::traces::unsampled(passed, answered).instrument(span))
            }
        }
    }
}

/// The request span of a sampled trace (beside the log's): named after the route
/// template; what the answer was is recorded by [`log`].
fn traced_span(ctx: &RequestContext, method: &http::Method) -> tracing::Span {
    // The label is `METHOD /template`: the span's name; the template alone is the route.
    let label = ctx.route.label();
    let route = label.split_once(' ').map_or(label, |(_, path)| path);
    crate::traces::traced!(
        "request",
        // Ids are printable ASCII (`usable`, `IdSource::make`): text as they are.
        request_id = ctx.id.to_str().unwrap_or_default(),
        otel.name = label,
        otel.kind = "server",
        http.request.method = method.as_str(),
        http.route = route,
        http.response.status_code = tracing::field::Empty,
        mediagate.model = tracing::field::Empty,
        mediagate.key = tracing::field::Empty,
        mediagate.error_code = tracing::field::Empty,
    )
}

/// The access-log line and the request metrics of an answered request.
fn log<B>(
    gateway: &Gateway,
    ctx: &RequestContext,
    method: &http::Method,
    resp: &Response<B>,
    started: Instant,
) {
    let fields = ctx.log_fields();
    let route = ctx.route.label();
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
        key = ctx.key_if_any().map(|k| &*k.name),
        model = fields.model.as_deref(),
        provider = fields.provider.as_deref(),
        latency_ms = latency.as_secs_f64() * 1e3,
        upstream_ms = fields.upstream.map(|d| d.as_secs_f64() * 1e3),
        error = code,
        "request"
    );
    // On the request span of a sampled trace; the key's configured name only, never
    // its secret. Numbers as `i64`: the OpenTelemetry layer writes others as text.
    let (model, key) = (fields.model.as_deref(), ctx.key_if_any().map(|k| &*k.name));
    crate::traces::record([
        (
            "http.response.status_code",
            Some(&i64::from(resp.status().as_u16())),
        ),
        ("mediagate.model", model.as_ref().map(as_value)),
        ("mediagate.key", key.as_ref().map(as_value)),
        ("mediagate.error_code", code.as_ref().map(as_value)),
    ]);
}

/// A text as a field value (`None`s stay unrecorded).
fn as_value<'a>(text: &'a &'a str) -> &'a dyn tracing::Value {
    text
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

    #[test]
    fn made_ids_are_the_prefix_and_the_counter_in_hex() {
        for (prefix, next) in [(0, 1), (0x0123_abcd, 5), (u32::MAX, 0xfedc_ba98_7654)] {
            let s = IdSource {
                prefix,
                next: AtomicU64::new(next),
            };
            let made = s.make();
            assert_eq!(made.to_str().unwrap(), format!("{prefix:08x}{next:012x}"));
        }
    }
}
