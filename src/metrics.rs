//! Prometheus metrics (prometheus-client), served as text on `GET /metrics`.
//!
//! Every label takes its values from a bounded set: route templates, status codes,
//! configured model and provider names, fixed reason words. Names of every metric
//! are listed in docs/operations.md.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Content type of the exposition (OpenMetrics text, which Prometheus reads).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    route: &'static str,
    status: u16,
    model: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProviderLabels {
    provider: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

/// Results of a webhook delivery attempt.
pub const WEBHOOK_ATTEMPT_RESULTS: [&str; 6] = [
    "success",
    "http_error",
    "unreachable",
    "timeout",
    "refused",
    "not_sent",
];

/// Why a webhook delivery was put back without an attempt.
pub const WEBHOOK_PUT_BACK_REASONS: [&str; 3] =
    ["receiver_cooling_down", "receiver_busy", "key_busy"];

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Every metric of the gateway.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    upstream: HistogramFamily<ProviderLabels>,
    overhead: Histogram,
    rate_limited: Family<ReasonLabels, Counter>,
    shed: Family<ReasonLabels, Counter>,
    reloads: Family<ResultLabels, Counter>,
    pub connections_open: Gauge,
    pub connections_refused: Counter,
    pub tls_handshake_failures: Counter,
    /// Handed to the results cache, which counts its own hits and misses.
    pub cache_hits: Counter,
    pub cache_misses: Counter,
    /// Handed to every provider's status reader.
    pub unmapped_statuses: Counter,
    /// Ledger rows whose submit outcome is unknown, as of the last sweep.
    pub ledger_unknown_outcome: Gauge,
    /// Ledger statements that failed.
    pub ledger_errors: Counter,
    webhook_deliveries: Family<ResultLabels, Counter>,
    webhook_attempts: Family<ResultLabels, Counter>,
    webhook_put_back: Family<ReasonLabels, Counter>,
    /// Webhook deliveries owed, and the age of the oldest.
    pub webhooks_pending: Gauge,
    pub webhook_oldest_pending_seconds: Gauge,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

fn upstream_histogram() -> Histogram {
    // 5 ms … ~80 s: provider calls range from fast polls to slow submits.
    Histogram::new(exponential_buckets(0.005, 2.0, 15))
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("mediagate");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "requests",
            "Requests answered, by route template, HTTP status and model",
            requests.clone(),
        );
        let upstream: HistogramFamily<ProviderLabels> =
            Family::new_with_constructor(upstream_histogram);
        registry.register(
            "upstream_duration_seconds",
            "Time spent waiting for providers within a request, by provider",
            upstream.clone(),
        );
        // 25 µs … ~0.4 s: the gateway's own share of a request.
        let overhead = Histogram::new(exponential_buckets(0.000_025, 2.0, 15));
        registry.register(
            "overhead_duration_seconds",
            "Request time spent in the gateway itself (total minus upstream)",
            overhead.clone(),
        );
        let rate_limited = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "rate_limited",
            "Requests refused with 429 by a per-key limit (reason: rate or submit)",
            rate_limited.clone(),
        );
        let shed = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "load_shed",
            "Requests refused with 503 because a concurrency cap was reached",
            shed.clone(),
        );
        let reloads = Family::<ResultLabels, Counter>::default();
        registry.register(
            "config_reloads",
            "Configuration reloads, by result (success or failure)",
            reloads.clone(),
        );
        let connections_open = Gauge::default();
        registry.register(
            "connections_open",
            "Client connections currently open",
            connections_open.clone(),
        );
        let connections_refused = Counter::default();
        registry.register(
            "connections_refused",
            "Client connections closed at once because max_connections was reached",
            connections_refused.clone(),
        );
        let tls_handshake_failures = Counter::default();
        registry.register(
            "tls_handshake_failures",
            "TLS handshakes that failed or timed out",
            tls_handshake_failures.clone(),
        );
        let cache_hits = Counter::default();
        registry.register(
            "cache_hits",
            "Task queries answered from the results cache",
            cache_hits.clone(),
        );
        let cache_misses = Counter::default();
        registry.register(
            "cache_misses",
            "Task queries that needed the provider",
            cache_misses.clone(),
        );
        let unmapped_statuses = Counter::default();
        registry.register(
            "unmapped_upstream_statuses",
            "Upstream status words missing from a provider's status_map (reported as processing)",
            unmapped_statuses.clone(),
        );
        let ledger_unknown_outcome = Gauge::default();
        registry.register(
            "ledger_unknown_outcome_tasks",
            "Ledger rows whose submit outcome is unknown (to reconcile: `mediagate tasks --state unknown_outcome`)",
            ledger_unknown_outcome.clone(),
        );
        let ledger_errors = Counter::default();
        registry.register(
            "ledger_errors",
            "Ledger statements that failed",
            ledger_errors.clone(),
        );
        let webhook_deliveries = Family::<ResultLabels, Counter>::default();
        registry.register(
            "webhook_deliveries",
            "Webhook deliveries ended, by result (delivered, gone: the receiver answered 410, expired: retried too long)",
            webhook_deliveries.clone(),
        );
        let webhook_attempts = Family::<ResultLabels, Counter>::default();
        registry.register(
            "webhook_attempts",
            "Webhook delivery attempts, by result (success, http_error, unreachable, timeout, refused: a private address, not_sent: the key or its secret is gone)",
            webhook_attempts.clone(),
        );
        let webhook_put_back = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "webhook_put_back",
            "Webhook deliveries put back untried, by reason (receiver_cooling_down: it did not answer lately, receiver_busy or key_busy: its share of max_in_flight is taken)",
            webhook_put_back.clone(),
        );
        let webhooks_pending = Gauge::default();
        registry.register(
            "webhooks_pending",
            "Webhook deliveries owed (in the ledger, shared by replicas)",
            webhooks_pending.clone(),
        );
        let webhook_oldest_pending_seconds = Gauge::default();
        registry.register(
            "webhook_oldest_pending_seconds",
            "Age of the oldest webhook delivery owed (0 when none is)",
            webhook_oldest_pending_seconds.clone(),
        );
        for result in ["delivered", "gone", "expired"] {
            let _ = webhook_deliveries.get_or_create(&ResultLabels { result });
        }
        for result in WEBHOOK_ATTEMPT_RESULTS {
            let _ = webhook_attempts.get_or_create(&ResultLabels { result });
        }
        for reason in WEBHOOK_PUT_BACK_REASONS {
            let _ = webhook_put_back.get_or_create(&ReasonLabels { reason });
        }
        // Series that exist from the start, so that rates and alerts see a zero.
        for reason in ["rate", "submit"] {
            let _ = rate_limited.get_or_create(&ReasonLabels { reason });
        }
        let _ = shed.get_or_create(&ReasonLabels {
            reason: "key_concurrency",
        });
        for result in ["success", "failure"] {
            let _ = reloads.get_or_create(&ResultLabels { result });
        }
        Self {
            registry,
            requests,
            upstream,
            overhead,
            rate_limited,
            shed,
            reloads,
            connections_open,
            connections_refused,
            tls_handshake_failures,
            cache_hits,
            cache_misses,
            unmapped_statuses,
            ledger_unknown_outcome,
            ledger_errors,
            webhook_deliveries,
            webhook_put_back,
            webhook_attempts,
            webhooks_pending,
            webhook_oldest_pending_seconds,
        }
    }

    /// Record one answered request.
    pub fn request(
        &self,
        route: &'static str,
        status: u16,
        model: Option<&str>,
        provider: Option<&str>,
        total: Duration,
        upstream: Option<Duration>,
    ) {
        self.requests
            .get_or_create(&RequestLabels {
                route,
                status,
                model: model.unwrap_or("").to_owned(),
            })
            .inc();
        if let (Some(provider), Some(upstream)) = (provider, upstream) {
            self.upstream
                .get_or_create(&ProviderLabels {
                    provider: provider.to_owned(),
                })
                .observe(upstream.as_secs_f64());
        }
        self.overhead.observe(
            total
                .saturating_sub(upstream.unwrap_or_default())
                .as_secs_f64(),
        );
    }

    pub fn rate_limited(&self, reason: &'static str) {
        self.rate_limited
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    pub fn shed(&self, reason: &'static str) {
        self.shed.get_or_create(&ReasonLabels { reason }).inc();
    }

    pub fn reload(&self, ok: bool) {
        let result = if ok { "success" } else { "failure" };
        self.reloads.get_or_create(&ResultLabels { result }).inc();
    }

    /// One webhook delivery attempt; `result` is one of [`WEBHOOK_ATTEMPT_RESULTS`].
    pub fn webhook_attempt(&self, result: &'static str) {
        self.webhook_attempts
            .get_or_create(&ResultLabels { result })
            .inc();
    }

    /// A webhook delivery put back untried; `reason` is one of
    /// [`WEBHOOK_PUT_BACK_REASONS`].
    pub fn webhook_put_back(&self, reason: &'static str) {
        self.webhook_put_back
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    /// A webhook delivery ended: `delivered`, `gone` or `expired`.
    pub fn webhook_delivery(&self, result: &'static str) {
        self.webhook_deliveries
            .get_or_create(&ResultLabels { result })
            .inc();
    }

    /// The exposition text.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
