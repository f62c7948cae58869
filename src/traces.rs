//! W3C trace context across the gateway, when `[telemetry]` exports traces: the
//! request span continues a client's `traceparent`, and outbound requests carry the
//! current span's. With traces off (the default) every function here returns at
//! once and no span is made beyond the request's own, so logs and cost stay as they
//! were.

use std::sync::atomic::{AtomicBool, Ordering};

use http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

static ON: AtomicBool = AtomicBool::new(false);

/// Called once, when the process installs its exporter.
pub fn enable() {
    ON.store(true, Ordering::Relaxed);
}

/// Whether spans are exported by this process.
pub fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// `make()` when traces are on, else a disabled span (no allocation, nothing logged).
pub fn span(make: impl FnOnce() -> Span) -> Span {
    if on() { make() } else { Span::none() }
}

/// Make `span` (a request's) the child of the trace context a client sent in
/// `traceparent` / `tracestate`; without one, it starts a trace.
pub fn continue_from(span: &Span, headers: &HeaderMap) {
    if !on() || !headers.contains_key("traceparent") {
        return;
    }
    let parent = TraceContextPropagator::new().extract(&Incoming(headers));
    // Fails only for a span already started under another parent: never here.
    let _ = span.set_parent(parent);
}

/// Add the current span's `traceparent` (and `tracestate`) to an outbound request.
pub fn propagate(headers: &mut HeaderMap) {
    if !on() {
        return;
    }
    let cx = Span::current().context();
    TraceContextPropagator::new().inject_context(&cx, &mut Outgoing(headers));
}

/// Record `value` as `field` of the current span, when traces are on.
pub fn record(field: &str, value: impl tracing::Value) {
    if on() {
        Span::current().record(field, value);
    }
}

struct Incoming<'a>(&'a HeaderMap);

impl Extractor for Incoming<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(HeaderName::as_str).collect()
    }
}

struct Outgoing<'a>(&'a mut HeaderMap);

impl Injector for Outgoing<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(key.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}
