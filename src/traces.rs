//! W3C trace context, and which work is traced, when `[telemetry]` exports traces.
//!
//! Whether a trace is sampled is decided once, where it starts: at a request, from
//! the client's `traceparent` when it sent a valid one (parent-based), else by
//! `sampling_ratio`; at a background job's span outside any request (a copy, a
//! delivery, a tracker's query) by the ratio. Only a sampled trace's spans are made,
//! and on a dispatcher of their own (`telemetry.rs`: a registry and the OpenTelemetry
//! layer), never the log's: the log's subscriber neither sees nor pays for them, its
//! lines read the same with traces on or off, and an unsampled request makes no span
//! beyond its log span. It hands a client's `traceparent` on unchanged. With traces
//! off every function here returns at once.

use std::cell::Cell;
use std::hash::{BuildHasher, RandomState};
use std::pin::Pin;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::field::Field;
use tracing::span::Record;
use tracing::{Dispatch, Event, Level, Span, Subscriber};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::Context;

/// The target of every span that is exported.
pub const TRACED: &str = "mediagate::traced";

const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

/// The dispatcher the spans of sampled traces are made on, once traces are on.
static TRACES: OnceLock<Dispatch> = OnceLock::new();
/// A new trace is sampled when a random `u64` is below this; `u64::MAX`: always.
static THRESHOLD: AtomicU64 = AtomicU64::new(u64::MAX);

/// Called once, when the process installs its exporter: `traces` is the dispatcher
/// that exports what is made on it.
pub fn enable(traces: Dispatch, sampling_ratio: f64) {
    THRESHOLD.store(threshold(sampling_ratio), Ordering::Relaxed);
    let _ = TRACES.set(traces);
}

fn threshold(ratio: f64) -> u64 {
    if ratio >= 1.0 {
        u64::MAX
    } else {
        // Saturating: 0.0 (and anything below) is never.
        (ratio.max(0.0) * 2f64.powi(64)) as u64
    }
}

/// Whether spans are exported by this process.
pub fn on() -> bool {
    TRACES.get().is_some()
}

/// A new trace's sampling decision, by `sampling_ratio`.
fn new_trace_sampled() -> bool {
    let threshold = THRESHOLD.load(Ordering::Relaxed);
    threshold == u64::MAX || random() < threshold
}

thread_local! {
    static RNG: Cell<u64> = const { Cell::new(0) };
}

/// xorshift64*, one per thread, seeded from the process's random hash keys: a
/// sampling draw needs no more, and no lock.
fn random() -> u64 {
    RNG.with(|rng| {
        let mut x = rng.get();
        if x == 0 {
            x = RandomState::new().hash_one(std::thread::current().id()) | 1;
        }
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        rng.set(x);
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    })
}

/// How one request is traced.
pub enum RequestTrace {
    /// Traces are off.
    Off,
    /// Sampled: the request span (made by the caller's `make`), a child of the
    /// client's trace when it sent one.
    Sampled(Span),
    /// Not sampled; a client's unsampled trace context to hand on as it came.
    Unsampled(Option<PassedOn>),
}

/// The sampling decision of a request with these headers; `make` makes its span
/// (target [`TRACED`]) only when it is sampled.
pub fn request(headers: &HeaderMap, make: impl FnOnce() -> Span) -> RequestTrace {
    let Some(traces) = TRACES.get() else {
        return RequestTrace::Off;
    };
    let make = || tracing::dispatcher::with_default(traces, make);
    let Some(traceparent) = headers.get(TRACEPARENT) else {
        return match new_trace_sampled() {
            true => RequestTrace::Sampled(make()),
            false => RequestTrace::Unsampled(None),
        };
    };
    let parent = TraceContextPropagator::new().extract(&Incoming(headers));
    let remote = parent.span().span_context().clone();
    if !remote.is_valid() {
        // A malformed `traceparent` is no parent: a trace of our own.
        return match new_trace_sampled() {
            true => RequestTrace::Sampled(make()),
            false => RequestTrace::Unsampled(None),
        };
    }
    if remote.is_sampled() {
        let span = make();
        // Fails only for a span already started under another parent: never here.
        let _ = span.set_parent(parent);
        return RequestTrace::Sampled(span);
    }
    RequestTrace::Unsampled(Some(PassedOn {
        traceparent: traceparent.clone(),
        tracestate: headers.get(TRACESTATE).cloned(),
    }))
}

/// An unsampled client trace's context, sent on as it came: the caller's decision
/// holds downstream (W3C trace context allows a hop that records nothing to pass
/// `traceparent` through).
#[derive(Clone)]
pub struct PassedOn {
    traceparent: HeaderValue,
    tracestate: Option<HeaderValue>,
}

tokio::task_local! {
    /// Set while an unsampled request is served: what its outbound requests hand on.
    static UNSAMPLED: Option<PassedOn>;
}

/// `future`, the work of an unsampled request: no span is made within it (rather
/// than a trace of its own, as outside any request), and `passed` is handed on by
/// every outbound request it makes.
pub fn unsampled<F: Future>(
    passed: Option<PassedOn>,
    future: F,
) -> impl Future<Output = F::Output> {
    UNSAMPLED.scope(passed, future)
}

/// `future`, to go on in a task of its own, in the trace of the work that spawns it:
/// a sampled trace's current span, or an unsampled request's context.
pub fn carried<F>(future: F) -> Pin<Box<dyn Future<Output = F::Output> + Send>>
where
    F: Future + Send + 'static,
{
    if let Some(span) = traced_span() {
        return Box::pin(tracing::Instrument::instrument(future, span));
    }
    match UNSAMPLED.try_with(Option::clone) {
        Ok(passed) => Box::pin(unsampled(passed, future)),
        Err(_) => Box::pin(future),
    }
}

/// A span of a sampled trace (`tracing::info_span!`'s arguments): its target is
/// [`TRACED`], and it has no parent in its registry, [`span`] gives it its
/// OpenTelemetry parent. (A registry releases a closed child's hold on its parent
/// through the default dispatcher, the log's, which does not know the parent.)
macro_rules! traced {
    ($($span:tt)+) => {
        tracing::info_span!(target: $crate::traces::TRACED, parent: None, $($span)+)
    };
}
pub(crate) use traced;

/// A span of the work about to be done, or a disabled one (no allocation, nothing
/// recorded): `make()` (a [`traced!`] span) as the child of the current span of a
/// sampled trace, or outside any span when a new trace is sampled; never within an
/// unsampled request.
pub fn span(make: impl FnOnce() -> Span) -> Span {
    let Some(traces) = TRACES.get() else {
        return Span::none();
    };
    if let Some(id) = traces.current_span().id() {
        let Some(parent) = tracing_opentelemetry::get_otel_context(id, traces) else {
            return Span::none();
        };
        let span = tracing::dispatcher::with_default(traces, make);
        // Fails only for a span already started under another parent: never here.
        let _ = span.set_parent(parent);
        return span;
    }
    match UNSAMPLED.try_with(|_| ()).is_err() && new_trace_sampled() {
        true => tracing::dispatcher::with_default(traces, make),
        false => Span::none(),
    }
}

/// The current span of a sampled trace, if any.
pub fn traced_span() -> Option<Span> {
    let traces = TRACES.get()?;
    traces.current_span().id()?;
    Some(tracing::dispatcher::with_default(traces, Span::current))
}

/// Record these fields of the current span (a `None` is left as it is), when it is a
/// sampled trace's: all at once, and without a handle to the span.
pub fn record<const N: usize>(values: [(&str, Option<&dyn tracing::Value>); N]) {
    let Some(traces) = TRACES.get() else {
        return;
    };
    let current = traces.current_span();
    let (Some(id), Some(meta)) = (current.id(), current.metadata()) else {
        return;
    };
    let fields = meta.fields();
    let named: [Option<Field>; N] = std::array::from_fn(|i| fields.field(values[i].0));
    if named.iter().any(Option::is_none) {
        return;
    }
    let pairs: [(&Field, Option<&dyn tracing::Value>); N] = std::array::from_fn(|i| {
        let field = named[i].as_ref().expect("every field is the span's");
        (field, values[i].1)
    });
    traces.record(id, &Record::new(&fields.value_set(&pairs)));
}

/// Add the current trace context to an outbound request: a sampled trace's span as
/// its parent, or an unsampled client trace's context as it came; nothing otherwise.
pub fn propagate(headers: &mut HeaderMap) {
    let Some(traces) = TRACES.get() else {
        return;
    };
    if let Some(id) = traces.current_span().id() {
        // (The OpenTelemetry span is started here if it was not yet: its id is sent.)
        if let Some(cx) = tracing_opentelemetry::get_otel_context(id, traces) {
            TraceContextPropagator::new().inject_context(&cx, &mut Outgoing(headers));
        }
        return;
    }
    let _ = UNSAMPLED.try_with(|passed| {
        if let Some(passed) = passed {
            headers.insert(TRACEPARENT, passed.traceparent.clone());
            if let Some(state) = &passed.tracestate {
                headers.insert(TRACESTATE, state.clone());
            }
        }
    });
}

/// The layer of the log's subscriber that hands the warnings and errors logged
/// within a sampled trace's span to that span, as its events. (Other events would
/// only repeat what the spans say: the access line, the request span's attributes.)
pub struct SpanEvents;

impl<S: Subscriber> tracing_subscriber::Layer<S> for SpanEvents {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        if *event.metadata().level() <= Level::WARN
            && let Some(traces) = TRACES.get()
            && traces.current_span().id().is_some()
        {
            traces.event(event);
        }
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
        // The propagator sets `tracestate` even when empty; W3C asks not to send it so.
        if value.is_empty() {
            return;
        }
        // Names known here are not parsed (nor copied), and the value's `String`
        // becomes the header's bytes as it is.
        let name = match key {
            "traceparent" => Ok(TRACEPARENT),
            "tracestate" => Ok(TRACESTATE),
            _ => HeaderName::from_bytes(key.as_bytes()),
        };
        if let (Ok(name), Ok(value)) = (name, HeaderValue::try_from(value)) {
            self.0.insert(name, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ratio_becomes_a_threshold_of_a_random_u64() {
        assert_eq!(threshold(1.0), u64::MAX);
        assert_eq!(threshold(0.0), 0);
        assert_eq!(threshold(0.5), 1 << 63);
        assert_eq!(threshold(-1.0), 0);
    }

    #[test]
    fn draws_below_a_threshold_come_at_its_ratio() {
        let t = threshold(0.01);
        let n = 200_000;
        let below = (0..n).filter(|_| random() < t).count();
        // 2,000 expected; 5 standard deviations either way.
        assert!((1_780..=2_220).contains(&below), "{below}");
    }
}
