//! Prometheus metrics (prometheus-client), served as text on `GET /metrics`.
//!
//! Every label takes its values from a bounded set: route templates, status codes,
//! configured model and provider names, fixed reason words. Names of every metric
//! are listed in docs/operations.md.

use std::sync::LazyLock;
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

/// The metrics of per-key limits shared through Redis.
#[derive(Clone, Debug, Default)]
pub struct SharedMetrics {
    /// 1 while Redis answers (or limits are not shared), 0 while this replica decides
    /// alone.
    pub available: Gauge,
    /// Times Redis stopped answering.
    pub outages: Counter,
    /// Requests whose limits this replica decided alone.
    pub decided_locally: Counter,
    /// Requests admitted from what this replica held ahead, without asking Redis.
    pub decided_ahead: Counter,
    /// Calls to Redis, by what they were for.
    calls: Family<CallLabels, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    call: &'static str,
}

impl SharedMetrics {
    /// One call to Redis: `admit` (a request waits for it), `refill` (stock asked for
    /// ahead, in the background), `release` (leases removed), `renew` (leases renewed).
    pub fn called(&self, call: &'static str) {
        self.calls.get_or_create(&CallLabels { call }).inc();
    }
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusRequestLabels {
    provider: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatementLabels {
    statement: &'static str,
}

/// The tracker's ledger statements: `lease` (tasks to follow claimed), `polled` (the
/// changes its status requests learned, written back), `count` (the tracked tasks
/// counted), `heartbeat` (this replica alive; dead ones forgotten), `give_back` (the
/// tasks followed given back at a stop).
pub const TRACKER_STATEMENTS: [&str; 5] = ["lease", "polled", "count", "heartbeat", "give_back"];

/// The background tracker's metrics: what it follows, what it asks, how late.
#[derive(Clone)]
pub struct TrackerMetrics {
    tasks: Family<ProviderLabels, Gauge>,
    behind: Family<ProviderLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    status_requests: Family<StatusRequestLabels, Counter>,
    poll_delay: HistogramFamily<ProviderLabels>,
    finish_gap: HistogramFamily<ProviderLabels>,
    statements: Family<StatementLabels, Counter>,
}

impl Default for TrackerMetrics {
    fn default() -> Self {
        Self {
            tasks: Family::default(),
            behind: Family::default(),
            status_requests: Family::default(),
            // 1 ms … ~33 s: on time, to a tracker a whole interval behind.
            poll_delay: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 2.0, 16))
            }),
            // 0.5 s … ~220 s by halves: fine around the usual poll intervals (5 s),
            // up to past the longest (`max_interval_ms`, 60 s) and a late poll.
            finish_gap: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.5, 1.5, 16))
            }),
            statements: Family::default(),
        }
    }
}

impl TrackerMetrics {
    /// The unfinished tasks of `provider` in the ledger, and how late the most
    /// overdue poll of one not being asked about now is (0 when none is overdue).
    pub fn tracked(&self, provider: &str, tasks: i64, behind: Duration) {
        let labels = provider_labels(provider);
        self.tasks.get_or_create(&labels).set(tasks);
        self.behind.get_or_create(&labels).set(behind.as_secs_f64());
    }

    /// The series of `provider`'s status requests, looked up once: each request then
    /// records without building and looking up its labels (an allocation and a lock
    /// each, at 20,000 requests a second).
    pub fn of_provider(&self, provider: &str) -> ProviderTracker {
        let labels = provider_labels(provider);
        let requests = |outcome| {
            self.status_requests
                .get_or_create(&StatusRequestLabels {
                    provider: provider.to_owned(),
                    outcome,
                })
                .clone()
        };
        ProviderTracker {
            poll_delay: self.poll_delay.get_or_create(&labels).clone(),
            finish_gap: self.finish_gap.get_or_create(&labels).clone(),
            unfinished: requests("unfinished"),
            completed: requests("completed"),
            failed: requests("failed"),
            error: requests("error"),
        }
    }

    /// One ledger statement of the tracker, one of [`TRACKER_STATEMENTS`].
    pub fn statement(&self, statement: &'static str) {
        self.statements
            .get_or_create(&StatementLabels { statement })
            .inc();
    }
}

/// One provider's tracker series ([`TrackerMetrics::of_provider`]).
#[derive(Clone)]
pub struct ProviderTracker {
    poll_delay: Histogram,
    finish_gap: Histogram,
    unfinished: Counter,
    completed: Counter,
    failed: Counter,
    error: Counter,
}

impl ProviderTracker {
    /// A status request about to be sent `late` after the task was due.
    pub fn poll_sent(&self, late: Duration) {
        self.poll_delay.observe(late.as_secs_f64());
    }

    /// A status request's outcome: `unfinished`, `completed` or `failed` (the
    /// provider's answer), `error` (no usable answer).
    pub fn status_request(&self, outcome: &'static str) {
        match outcome {
            "unfinished" => &self.unfinished,
            "completed" => &self.completed,
            "failed" => &self.failed,
            _ => &self.error,
        }
        .inc();
    }

    /// A task seen finished `gap` after it was last known unfinished (its previous
    /// status request, or its submit): the longest its end can have gone unseen.
    pub fn seen_finished(&self, gap: Duration) {
        self.finish_gap.observe(gap.as_secs_f64());
    }
}

fn provider_labels(provider: &str) -> ProviderLabels {
    ProviderLabels {
        provider: provider.to_owned(),
    }
}

/// What became of an attempt at copying results into storage.
pub const RESULT_COPY_RESULTS: [&str; 4] = ["stored", "skipped", "failed", "retry"];

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
    /// Finished tasks deleted by retention (`[ledger] keep_days`).
    pub ledger_pruned: Counter,
    webhook_deliveries: Family<ResultLabels, Counter>,
    webhook_attempts: Family<ResultLabels, Counter>,
    webhook_put_back: Family<ReasonLabels, Counter>,
    /// Webhook deliveries owed, and the age of the oldest.
    pub webhooks_pending: Gauge,
    pub webhook_oldest_pending_seconds: Gauge,
    result_copies: Family<ResultLabels, Counter>,
    /// Bytes of results written to storage.
    pub result_bytes_stored: Counter,
    /// Copies running on this replica.
    pub result_copies_in_flight: Gauge,
    /// Copies owed (in the ledger, shared by replicas).
    pub result_copies_pending: Gauge,
    /// Stored results deleted after their `keep_days`.
    pub results_expired: Counter,
    result_copy_seconds: Histogram,
    /// Per-key limits shared through Redis: whether it answers, and what was
    /// decided without it.
    pub shared_limits: SharedMetrics,
    /// Handed to the task service, which reserves and settles.
    pub spend: SpendMetrics,
    /// The background tracker's.
    pub tracker: TrackerMetrics,
    /// Handed to the task service, which keeps the long-polling clients.
    pub waiters: WaiterMetrics,
}

/// Long-polling clients: how many wait now, and the statements their replica ran to
/// hear what other replicas recorded.
#[derive(Clone, Debug, Default)]
pub struct WaiterMetrics {
    /// Clients waiting for a task's change now.
    pub waiting: Gauge,
    /// Statements that looked in a shared ledger for changes recorded elsewhere.
    pub ledger_looks: Counter,
}

/// Money per key and model, in units of `[billing] currency`: what submits reserved,
/// what settlements charged, and the reservations they gave back (so that what is
/// still reserved is `reserved - released`, summed over replicas).
#[derive(Clone, Default)]
pub struct SpendMetrics {
    reserved: Family<SpendLabels, Counter<f64, std::sync::atomic::AtomicU64>>,
    settled: Family<SpendLabels, Counter<f64, std::sync::atomic::AtomicU64>>,
    released: Family<SpendLabels, Counter<f64, std::sync::atomic::AtomicU64>>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SpendLabels {
    key: String,
    model: String,
}

impl SpendMetrics {
    /// A submit reserved `estimate` of `key`'s budget for a task of `model`.
    pub fn reserved(&self, key: &str, model: &str, estimate: crate::money::Micros) {
        self.reserved
            .get_or_create(&labels(key, model))
            .inc_by(estimate.as_units());
    }

    /// A task's reservation of `estimate` was settled at `settled`.
    pub fn settled(
        &self,
        key: &str,
        model: &str,
        estimate: crate::money::Micros,
        settled: crate::money::Micros,
    ) {
        let labels = labels(key, model);
        self.settled
            .get_or_create(&labels)
            .inc_by(settled.as_units());
        self.released
            .get_or_create(&labels)
            .inc_by(estimate.as_units());
    }
}

fn labels(key: &str, model: &str) -> SpendLabels {
    SpendLabels {
        key: key.to_string(),
        model: model.to_string(),
    }
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

/// Spans lost by the trace exporter: those of an export that failed or timed out.
/// Process-wide, as the exporter is (`telemetry.rs`); every registry shows it.
pub static TRACE_SPANS_DROPPED: LazyLock<Counter> = LazyLock::new(Counter::default);
/// Trace exports that failed (collector down, refused, timed out).
pub static TRACE_EXPORT_FAILURES: LazyLock<Counter> = LazyLock::new(Counter::default);

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut metrics = Self {
            registry: Registry::with_prefix("mediagate"),
            requests: Family::<RequestLabels, Counter>::default(),
            upstream: Family::new_with_constructor(upstream_histogram),
            // 25 µs … ~0.4 s: the gateway's own share of a request.
            overhead: Histogram::new(exponential_buckets(0.000_025, 2.0, 15)),
            rate_limited: Family::<ReasonLabels, Counter>::default(),
            shed: Family::<ReasonLabels, Counter>::default(),
            reloads: Family::<ResultLabels, Counter>::default(),
            connections_open: Gauge::default(),
            connections_refused: Counter::default(),
            tls_handshake_failures: Counter::default(),
            cache_hits: Counter::default(),
            cache_misses: Counter::default(),
            unmapped_statuses: Counter::default(),
            ledger_unknown_outcome: Gauge::default(),
            ledger_errors: Counter::default(),
            ledger_pruned: Counter::default(),
            webhook_deliveries: Family::<ResultLabels, Counter>::default(),
            webhook_attempts: Family::<ResultLabels, Counter>::default(),
            webhook_put_back: Family::<ReasonLabels, Counter>::default(),
            webhooks_pending: Gauge::default(),
            webhook_oldest_pending_seconds: Gauge::default(),
            result_copies: Family::<ResultLabels, Counter>::default(),
            result_bytes_stored: Counter::default(),
            result_copies_in_flight: Gauge::default(),
            result_copies_pending: Gauge::default(),
            results_expired: Counter::default(),
            // 50 ms … ~14 min: a small image to a large video.
            result_copy_seconds: Histogram::new(exponential_buckets(0.05, 2.0, 15)),
            shared_limits: SharedMetrics::default(),
            spend: SpendMetrics::default(),
            tracker: TrackerMetrics::default(),
            waiters: WaiterMetrics::default(),
        };
        metrics.register_serving();
        metrics.register_tasks();
        metrics.register_webhooks();
        metrics.register_results();
        metrics.register_spend();
        metrics.register_tracker();
        metrics.create_series();
        metrics.shared_limits.available.set(1);
        metrics
    }

    /// Requests, their upstream and own time, refusals, reloads and connections.
    fn register_serving(&mut self) {
        let registry = &mut self.registry;
        registry.register(
            "requests",
            "Requests answered, by route template, HTTP status and model",
            self.requests.clone(),
        );
        registry.register(
            "upstream_duration_seconds",
            "Time spent waiting for providers within a request, by provider",
            self.upstream.clone(),
        );
        registry.register(
            "overhead_duration_seconds",
            "Request time spent in the gateway itself (total minus upstream)",
            self.overhead.clone(),
        );
        registry.register(
            "rate_limited",
            "Requests refused with 429 by a per-key limit (reason: rate or submit)",
            self.rate_limited.clone(),
        );
        registry.register(
            "load_shed",
            "Requests refused with 503 because a concurrency cap was reached",
            self.shed.clone(),
        );
        registry.register(
            "config_reloads",
            "Configuration reloads, by result (success or failure)",
            self.reloads.clone(),
        );
        registry.register(
            "connections_open",
            "Client connections currently open",
            self.connections_open.clone(),
        );
        registry.register(
            "connections_refused",
            "Client connections closed at once because max_connections was reached",
            self.connections_refused.clone(),
        );
        registry.register(
            "tls_handshake_failures",
            "TLS handshakes that failed or timed out",
            self.tls_handshake_failures.clone(),
        );
        registry.register(
            "trace_spans_dropped",
            "Spans of [telemetry] lost because their export failed (spans dropped from a full queue are not counted: the SDK does not expose them)",
            TRACE_SPANS_DROPPED.clone(),
        );
        registry.register(
            "trace_export_failures",
            "Exports of spans to the [telemetry] collector that failed or timed out",
            TRACE_EXPORT_FAILURES.clone(),
        );
        let shared = &self.shared_limits;
        registry.register("shared_limits_available", "1 while the Redis of [limits] shared answers (or limits are not shared), 0 while this replica applies its local_share alone", shared.available.clone());
        registry.register(
            "shared_limits_outages",
            "Times the Redis of [limits] shared stopped answering this replica",
            shared.outages.clone(),
        );
        registry.register(
            "shared_limits_decided_locally",
            "Requests whose per-key limits this replica decided alone (local_share) because Redis did not answer",
            shared.decided_locally.clone(),
        );
        registry.register(
            "shared_limits_decided_ahead",
            "Requests whose per-key limits this replica decided from the cells and places it held ahead of need, without asking Redis",
            shared.decided_ahead.clone(),
        );
        registry.register(
            "shared_limits_calls",
            "Calls to the Redis of [limits] shared: admit (a request waits for it), refill (cells and places asked ahead), release, renew",
            shared.calls.clone(),
        );
    }

    /// The results cache, upstream status words and the ledger.
    fn register_tasks(&mut self) {
        let registry = &mut self.registry;
        registry.register(
            "cache_hits",
            "Task queries answered from the results cache",
            self.cache_hits.clone(),
        );
        registry.register(
            "cache_misses",
            "Task queries that needed the provider",
            self.cache_misses.clone(),
        );
        registry.register(
            "unmapped_upstream_statuses",
            "Upstream status words missing from a provider's status_map (reported as processing)",
            self.unmapped_statuses.clone(),
        );
        registry.register("ledger_unknown_outcome_tasks", "Ledger rows whose submit outcome is unknown (to reconcile: `mediagate tasks --state unknown_outcome`)", self.ledger_unknown_outcome.clone());
        registry.register(
            "ledger_errors",
            "Ledger statements that failed",
            self.ledger_errors.clone(),
        );
        registry.register(
            "ledger_pruned_tasks",
            "Finished tasks deleted from the ledger by retention ([ledger] keep_days), their usage kept as per-day sums",
            self.ledger_pruned.clone(),
        );
    }

    /// Webhook deliveries and their backlog.
    fn register_webhooks(&mut self) {
        let registry = &mut self.registry;
        registry.register("webhook_deliveries", "Webhook deliveries ended, by result (delivered, gone: the receiver answered 410, expired: retried too long)", self.webhook_deliveries.clone());
        registry.register("webhook_attempts", "Webhook delivery attempts, by result (success, http_error, unreachable, timeout, refused: the callback rule (a private address, plain http to a host not allowed), not_sent: the key or its secret is gone)", self.webhook_attempts.clone());
        registry.register("webhook_put_back", "Webhook deliveries put back untried, by reason (receiver_cooling_down: it did not answer lately, receiver_busy or key_busy: its share of max_in_flight is taken)", self.webhook_put_back.clone());
        registry.register(
            "webhooks_pending",
            "Webhook deliveries owed (in the ledger, shared by replicas)",
            self.webhooks_pending.clone(),
        );
        registry.register(
            "webhook_oldest_pending_seconds",
            "Age of the oldest webhook delivery owed (0 when none is)",
            self.webhook_oldest_pending_seconds.clone(),
        );
    }

    /// Copies of results into storage, and their retention.
    fn register_results(&mut self) {
        let registry = &mut self.registry;
        registry.register("result_copies", "Attempts at copying a task's results into storage, by result (stored; skipped: too large or gone at the provider; failed: retried too long; retry)", self.result_copies.clone());
        registry.register(
            "result_bytes_stored",
            "Bytes of results written to storage",
            self.result_bytes_stored.clone(),
        );
        registry.register(
            "result_copies_in_flight",
            "Copies into storage running on this replica",
            self.result_copies_in_flight.clone(),
        );
        registry.register(
            "result_copies_pending",
            "Copies into storage owed (in the ledger, shared by replicas)",
            self.result_copies_pending.clone(),
        );
        registry.register(
            "results_expired",
            "Stored results deleted after their family's keep_days",
            self.results_expired.clone(),
        );
        registry.register(
            "result_copy_seconds",
            "How long a copy that stored its results took",
            self.result_copy_seconds.clone(),
        );
    }

    /// Money reserved, settled and given back, per key and model.
    fn register_spend(&mut self) {
        let registry = &mut self.registry;
        let spend = &self.spend;
        registry.register(
            "spend_reserved",
            "Estimates reserved by submits, per key and model, in [billing] currency",
            spend.reserved.clone(),
        );
        registry.register(
            "spend_settled",
            "What finished tasks cost, per key and model, in [billing] currency (failed: 0)",
            spend.settled.clone(),
        );
        registry.register(
            "spend_released",
            "Reservations given back when their tasks were settled, per key and model; still reserved: reserved - released",
            spend.released.clone(),
        );
    }

    /// The background tracker: tasks followed, status requests, lateness, statements;
    /// the long-polling clients it wakes.
    fn register_tracker(&mut self) {
        let registry = &mut self.registry;
        registry.register(
            "waiters",
            "Clients waiting for a task's change now (long-poll)",
            self.waiters.waiting.clone(),
        );
        registry.register(
            "waiters_ledger_looks",
            "Statements run to find, for the clients waiting here, changes other replicas recorded in a shared ledger (one per provider and status every 500 ms while clients wait)",
            self.waiters.ledger_looks.clone(),
        );
        let tracker = &self.tracker;
        registry.register(
            "tracker_tasks",
            "Unfinished tasks the tracker follows, per provider (in the ledger, shared by replicas; refreshed every 5 s)",
            tracker.tasks.clone(),
        );
        registry.register(
            "tracker_behind_seconds",
            "How late the most overdue status request of a provider's tasks is, of tasks no replica is asking about now (0 when none is overdue; refreshed every 5 s)",
            tracker.behind.clone(),
        );
        registry.register(
            "tracker_status_requests",
            "Status requests the tracker made, per provider and outcome (unfinished, completed, failed, error)",
            tracker.status_requests.clone(),
        );
        registry.register(
            "tracker_poll_delay_seconds",
            "Time from a task's status request being due to its being sent, per provider",
            tracker.poll_delay.clone(),
        );
        registry.register(
            "tracker_finish_gap_seconds",
            "For a task the tracker saw finished: time since it was last known unfinished (its previous status request, or its submit), the most its end went unseen, per provider",
            tracker.finish_gap.clone(),
        );
        registry.register(
            "tracker_ledger_statements",
            "Ledger statements the tracker ran, by statement (lease, polled, count)",
            tracker.statements.clone(),
        );
    }

    /// Series that exist from the start, so that rates and alerts see a zero.
    fn create_series(&self) {
        for result in RESULT_COPY_RESULTS {
            let _ = self.result_copies.get_or_create(&ResultLabels { result });
        }
        for result in ["delivered", "gone", "expired"] {
            let _ = self
                .webhook_deliveries
                .get_or_create(&ResultLabels { result });
        }
        for result in WEBHOOK_ATTEMPT_RESULTS {
            let _ = self
                .webhook_attempts
                .get_or_create(&ResultLabels { result });
        }
        for reason in WEBHOOK_PUT_BACK_REASONS {
            let _ = self
                .webhook_put_back
                .get_or_create(&ReasonLabels { reason });
        }
        for reason in ["rate", "submit"] {
            let _ = self.rate_limited.get_or_create(&ReasonLabels { reason });
        }
        let _ = self.shed.get_or_create(&ReasonLabels {
            reason: "key_concurrency",
        });
        for result in ["success", "failure"] {
            let _ = self.reloads.get_or_create(&ResultLabels { result });
        }
        for statement in TRACKER_STATEMENTS {
            let _ = self
                .tracker
                .statements
                .get_or_create(&StatementLabels { statement });
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

    /// An attempt at a copy ended: one of [`RESULT_COPY_RESULTS`]; a stored one took
    /// `took`.
    pub fn result_copy(&self, result: &'static str, took: Option<std::time::Duration>) {
        self.result_copies
            .get_or_create(&ResultLabels { result })
            .inc();
        if let Some(took) = took {
            self.result_copy_seconds.observe(took.as_secs_f64());
        }
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
