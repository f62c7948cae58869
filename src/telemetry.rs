//! `[telemetry]`: the process's OpenTelemetry exporter, set up once at start (like
//! `ledger.url`, a reload does not change it). Spans are `tracing` spans made
//! OpenTelemetry spans by `tracing-opentelemetry`; the SDK's batch processor keeps
//! finished spans in a bounded queue and exports them over OTLP/HTTP (protobuf) from
//! a thread of its own, so a request never waits for the collector. Which traces are
//! sampled is decided before any span is made (`traces.rs`), and their spans are made
//! on a dispatcher of their own, apart from the log's.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracerProvider, SpanData, SpanExporter,
};
use tracing::{Dispatch, Level};
use tracing_subscriber::Registry;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::layer::SubscriberExt;

use crate::config::TelemetryConfig;
use crate::metrics::{TRACE_EXPORT_FAILURES, TRACE_SPANS_DROPPED};

/// The exporter of this process; dropping it exports what is still queued.
pub struct Telemetry {
    provider: SdkTracerProvider,
}

impl Telemetry {
    /// The exporter `config` asks for, or `None` when it sets no `otlp_endpoint`.
    pub fn start(config: &TelemetryConfig) -> Result<Option<Self>, String> {
        let Some(endpoint) = &config.otlp_endpoint else {
            return Ok(None);
        };
        // The exporter's HTTP client (reqwest, built without a crypto provider of its
        // own) needs the process default even for plain HTTP: the gateway's, ring.
        // An error only says one is installed already.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(format!("{}/v1/traces", endpoint.trim_end_matches('/')))
            .with_timeout(Duration::from_millis(config.export_timeout_ms))
            .build()
            .map_err(|e| format!("telemetry.otlp_endpoint: {e}"))?;
        let batch = BatchConfigBuilder::default()
            .with_max_queue_size(config.max_queue_size)
            .with_max_export_batch_size(config.max_queue_size.min(512))
            .with_scheduled_delay(Duration::from_millis(config.export_interval_ms))
            .build();
        let processor = BatchSpanProcessor::builder(Counted(exporter))
            .with_batch_config(batch)
            .build();
        let resource = Resource::builder()
            .with_service_name(config.service_name.clone())
            .with_attributes(
                config
                    .resource_attributes
                    .iter()
                    .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
            )
            .build();
        // Spans are made only for sampled traces (`traces::request`, `traces::span`,
        // by `sampling_ratio` or the client's flag): the SDK keeps every one it gets.
        let sampler = Sampler::ParentBased(Box::new(Sampler::AlwaysOn));
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_sampler(sampler)
            .with_resource(resource)
            .build();
        crate::traces::enable(dispatcher(&provider), config.sampling_ratio);
        Ok(Some(Self { provider }))
    }

    /// The layer of the log's subscriber that makes the warnings and errors logged in
    /// a sampled trace's span that span's events.
    pub fn span_events(&self) -> crate::traces::SpanEvents {
        crate::traces::SpanEvents
    }
}

/// The dispatcher the spans of sampled traces are made on: a registry of their own
/// and the layer that makes them OpenTelemetry spans of `provider`.
fn dispatcher(provider: &SdkTracerProvider) -> Dispatch {
    // Source locations, thread names and busy/idle times are left out: they cost on
    // every span and say little about where a request's time went. Context
    // activation (an OpenTelemetry context attached at every poll of a span's
    // future) is too: children find their parent through the registry, and outbound
    // requests take the context from the span (`traces::propagate`).
    let layer = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("mediagate"))
        .with_location(false)
        .with_threads(false)
        .with_tracked_inactivity(false)
        .with_context_activation(false);
    // Only spans of sampled traces are made here: other callsites are never of
    // interest to this dispatcher, so that it adds no cost to them (and its level
    // hint none to the process's).
    let only_traced = filter_fn(|meta| meta.is_span() && meta.target() == crate::traces::TRACED)
        .with_max_level_hint(Level::INFO);
    Dispatch::new(Registry::default().with(layer).with(only_traced))
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        let _ = self.provider.shutdown_with_timeout(Duration::from_secs(5));
    }
}

/// The OTLP exporter, with its failures counted: a failed export's spans are lost.
#[derive(Debug)]
struct Counted(opentelemetry_otlp::SpanExporter);

/// The first failure is logged; the rest are only counted, so that a collector
/// that is down does not fill the log.
static FAILURE_LOGGED: AtomicBool = AtomicBool::new(false);

impl SpanExporter for Counted {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len() as u64;
        let result = self.0.export(batch).await;
        if let Err(e) = &result {
            // Logged before it is counted: whoever sees the count finds the line.
            if !FAILURE_LOGGED.swap(true, Ordering::Relaxed) {
                tracing::warn!(error = %e, spans, "trace export failed; its spans are dropped (counted in mediagate_trace_spans_dropped_total, further failures are not logged)");
            }
            TRACE_EXPORT_FAILURES.inc();
            TRACE_SPANS_DROPPED.inc_by(spans);
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.0.set_resource(resource);
    }
}
