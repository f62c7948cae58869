//! routes.toml compiled into one immutable snapshot: keys and their limits, models
//! with their validators, providers with their clients, the task-id sealer and the
//! connection settings. Each section compiles in its own module and reports into one
//! [`Problems`] collector, so `mediagate check` lists every problem at once.
//!
//! A request pins one snapshot for its whole life, so a reload never shows it a mix
//! of old and new settings. Everything expensive (jq, JSON Schema, TLS roots) is
//! compiled here, never per request.

mod keys;
mod models;
mod providers;
mod server;
mod tasks;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;

use crate::FastMap;
use crate::access::{KeyLimits, KeyRing, SharedSettings};
use crate::config::{
    BillingConfig, Endpoint, LedgerConfig, LoadError, Problems, RoutesFile, Scope, ServerConfig,
    SimulatorConfig, StorageConfig, TasksConfig, TelemetryConfig, TrackerConfig, WebhooksConfig,
    config_dir, is_base_url, read_routes,
};
use crate::edge;
use crate::models::Model;
use crate::providers::Provider;
use crate::storage::StorageUrl;
use crate::tasks::TaskSealer;
use crate::tasks::ledger::LedgerUrl;
use crate::webhooks::CallbackPolicy;

pub use self::providers::SIMULATOR_URL;

/// Everything a request needs, compiled from one routes file.
#[derive(Debug)]
pub struct Snapshot {
    pub server: ServerConfig,
    /// Connection settings for the edge, TLS config included.
    pub edge: edge::Settings,
    pub tasks: TasksConfig,
    pub simulator: SimulatorConfig,
    pub keys: KeyRing,
    pub models: FastMap<String, Arc<Model>>,
    pub providers: FastMap<String, Arc<Provider>>,
    pub sealer: TaskSealer,
    /// Per-key rate and concurrency limits.
    pub limits: KeyLimits,
    /// Where replicas share those limits (`[limits] shared`), opened once at start.
    pub shared_limits: Option<SharedSettings>,
    /// Some provider points at the built-in simulator.
    pub uses_simulator: bool,
    /// Keys whose secret is a published demo value.
    pub demo_keys: Vec<String>,
    /// Where the ledger lives (opened once, at start).
    pub ledger_url: LedgerUrl,
    pub ledger: LedgerConfig,
    /// Where completed tasks' results are kept (opened once, at start).
    pub storage_url: StorageUrl,
    pub storage: StorageConfig,
    /// The currency of prices and budgets.
    pub billing: BillingConfig,
    pub tracker: TrackerConfig,
    pub webhooks: Webhooks,
    /// Keys that sign webhooks with the published demo secret.
    pub demo_webhook_secrets: Vec<String>,
    /// SHA-256 of the bearer token `/metrics` asks for on the main listeners; without
    /// one (and without `metrics_listen`) `/metrics` is not served at all.
    pub metrics_token: Option<[u8; 32]>,
}

/// `[webhooks]`: delivery settings and the callback URL rule.
#[derive(Debug)]
pub struct Webhooks {
    pub settings: WebhooksConfig,
    pub callbacks: CallbackPolicy,
}

/// The caps on webhook attempts in flight: the pool sizes a semaphore (tokio's has a
/// maximum), and each share is a part of the pool. An attempt needs time to be
/// answered, and a receiver that failed a pause before the next (0 would post to it
/// again at once, at the pool's rate, for `retry_for_hours`).
fn check_webhook_caps(settings: &WebhooksConfig, at: &mut Scope) {
    at.within("timeout_ms", settings.timeout_ms, 100..=600_000);
    at.within("first_retry_ms", settings.first_retry_ms, 100..=86_400_000);
    // A wait is added to a time in ms: past a year it is no retry schedule, and far
    // past it the sum would not fit.
    at.within(
        "max_retry_interval_ms",
        settings.max_retry_interval_ms,
        100..=31_536_000_000,
    );
    at.within("retry_for_hours", settings.retry_for_hours, 1..=8_760);
    if settings.max_in_flight > tokio::sync::Semaphore::MAX_PERMITS {
        at.push("max_in_flight", "must not be absurdly large");
    }
    let pool = settings.max_in_flight.max(1);
    for (key, share) in [
        (
            "max_in_flight_per_receiver",
            settings.max_in_flight_per_receiver,
        ),
        ("max_in_flight_per_key", settings.max_in_flight_per_key),
    ] {
        if share.is_some_and(|n| !(1..=pool).contains(&n)) {
            at.push(key, "must be between 1 and `max_in_flight`");
        }
    }
}

/// `[storage]`'s copies: one needs time to be made (its lease is twice this), and is
/// retried for a bounded time.
fn check_copies(storage: &StorageConfig, at: &mut Scope) {
    at.within(
        "copy_timeout_ms",
        storage.copy_timeout_ms,
        1_000..=86_400_000,
    );
    at.within("retry_for_hours", storage.retry_for_hours, 1..=8_760);
}

/// `[ledger] keep_days` and `prune_batch`. A task is kept at least as long as its
/// idempotency key is remembered (a retry after its row was pruned would be
/// submitted again) and at least a day (a day's quota counts the day's rows).
fn check_retention(ledger: &LedgerConfig, at: &mut Scope) {
    // An hour at least: a key forgotten sooner would let a client's retry of a
    // submit still in flight (a provider's timeout, a failover) make a second task.
    at.within(
        "idempotency_ttl_hours",
        ledger.idempotency_ttl_hours,
        1..=87_600,
    );
    let keep_hours = ledger.keep_days.saturating_mul(24);
    if ledger.keep_days != 0 && keep_hours < ledger.idempotency_ttl_hours.max(24) {
        at.push(
            "keep_days",
            "must be 0 (keep forever) or cover `idempotency_ttl_hours` and at least 1 day",
        );
    }
    at.within("prune_batch", ledger.prune_batch, 1..=10_000);
}

/// `[tracker]`: a heartbeat written every quarter of `lease_ms` must come round
/// between two of the tracker's rounds (a quarter of a second apart at the most) and
/// a ledger's slow moment, or a replica finds its own heartbeat expired and forgets
/// its tasks again and again.
fn check_tracker(t: &TrackerConfig, at: &mut Scope) {
    at.within("lease_ms", t.lease_ms, 1_000..=3_600_000);
}

/// `[telemetry]`, checked here so that `check` reports it; it is read at start
/// (`telemetry.rs`), not on reload.
fn check_telemetry(t: &TelemetryConfig, at: &mut Scope) {
    if let Some(url) = &t.otlp_endpoint
        && !(url.starts_with("http://") && is_base_url(url))
    {
        // The exporter's client has no TLS of its own: a collector (or its sidecar)
        // is reached over plain HTTP.
        at.push(
            "otlp_endpoint",
            "must be an http:// base URL (OTLP/HTTP), e.g. http://collector:4318",
        );
    }
    if !(0.0..=1.0).contains(&t.sampling_ratio) {
        at.push("sampling_ratio", "must be between 0.0 and 1.0");
    }
    if t.service_name.is_empty() {
        at.push("service_name", "must not be empty");
    }
    if t.max_queue_size == 0 {
        at.push("max_queue_size", "must be at least 1");
    }
}

/// What the load needs from the running process.
#[derive(Debug, Clone, Default)]
pub struct LoadContext {
    /// Address of the running simulator; `None` while only checking the file.
    pub simulator_addr: Option<SocketAddr>,
    /// What to do when the task-secret file is missing and `create_secret_file` is set.
    pub secret_file: SecretFileMode,
    /// Counts upstream status words missing from a `status_map` (a metric).
    pub unmapped_statuses: Counter,
}

/// A missing task-secret file: created at start, an error on reload (a new secret
/// would make every outstanding task id unreadable), ignored by `check`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SecretFileMode {
    Create,
    MustExist,
    #[default]
    CheckOnly,
}

/// The task-id sealer `[tasks]` names, for the operator's commands, which read the
/// routes file alone: `None` when its secret cannot be read where they run.
pub fn task_sealer(file: &RoutesFile, dir: &Path) -> Option<TaskSealer> {
    let mut problems = Problems::default();
    tasks::compile(
        &file.tasks,
        dir,
        SecretFileMode::MustExist,
        &mut problems.at("tasks"),
    )
}

impl Snapshot {
    /// Read, parse and compile a routes file.
    pub fn load(path: &Path, ctx: &LoadContext) -> Result<Self, LoadError> {
        Self::build(read_routes(path)?, path, ctx)
    }

    /// Compile an already parsed routes file read from `path`; relative paths in it
    /// are resolved against the file's directory.
    pub fn build(file: RoutesFile, path: &Path, ctx: &LoadContext) -> Result<Self, LoadError> {
        let mut problems = Problems::default();
        match Self::compile(file, config_dir(path), ctx, &mut problems) {
            Some(snapshot) if problems.is_empty() => Ok(snapshot),
            _ => Err(problems.into_error(path)),
        }
    }

    fn compile(file: RoutesFile, dir: &Path, ctx: &LoadContext, p: &mut Problems) -> Option<Self> {
        let (providers, uses_simulator) = providers::compile(&file, dir, ctx, p);
        let ledger = p
            .at("ledger")
            .check("url", LedgerUrl::parse(&file.ledger.url, dir));
        let ledger_on = ledger.as_ref().is_some_and(|l| *l != LedgerUrl::Off);
        let storage_url = storage_url(&file.storage, dir, ledger_on, &mut p.at("storage"));
        let storage_on = storage_url.as_ref().is_some_and(|s| *s != StorageUrl::Off);
        let models = models::compile(&file, &providers, storage_on, p);
        let callbacks = p.at("webhooks").check(
            "allow_private_networks",
            CallbackPolicy::new(&file.webhooks),
        );
        check_webhook_caps(&file.webhooks, &mut p.at("webhooks"));
        check_copies(&file.storage, &mut p.at("storage"));
        check_telemetry(&file.telemetry, &mut p.at("telemetry"));
        check_retention(&file.ledger, &mut p.at("ledger"));
        check_tracker(&file.tracker, &mut p.at("tracker"));
        let keys = keys::compile(&file, &models, dir, ledger_on, callbacks.as_ref(), p);
        let sealer = tasks::compile(&file.tasks, dir, ctx.secret_file, &mut p.at("tasks"));
        let edge = server::compile(&file.server, dir, &mut p.at("server"));
        let metrics_token = server::metrics_token(&file.server, dir, &mut p.at("server"));
        Some(Self {
            server: file.server,
            edge: edge?,
            tasks: file.tasks,
            simulator: file.simulator,
            keys: keys.ring,
            models,
            providers,
            sealer: sealer?,
            limits: keys.limits,
            shared_limits: keys.shared,
            uses_simulator,
            demo_keys: keys.demo,
            demo_webhook_secrets: keys.demo_webhook_secrets,
            ledger_url: ledger?,
            ledger: file.ledger,
            storage_url: storage_url?,
            billing: file.billing,
            storage: StorageConfig {
                // Trimmed once here, not in every link made.
                public_base_url: file
                    .storage
                    .public_base_url
                    .as_deref()
                    .map(|u| u.trim_end_matches('/').to_string()),
                ..file.storage
            },
            tracker: file.tracker,
            webhooks: Webhooks {
                settings: file.webhooks,
                callbacks: callbacks?,
            },
            metrics_token: metrics_token?,
        })
    }

    /// Whether `/metrics` is served on the main listeners (to holders of the token).
    pub fn metrics_on_main_listeners(&self) -> bool {
        self.server.metrics_listen.is_none() && self.metrics_token.is_some()
    }

    /// The model `id` if it is served on `endpoint`.
    pub fn model(&self, id: &str, endpoint: Endpoint) -> Option<&Arc<Model>> {
        self.models.get(id).filter(|m| m.served_on(endpoint))
    }
}

/// `[storage] url`, or its default: local files beside the ledger, none without one
/// (stored results are recorded in the ledger).
fn storage_url(
    cfg: &StorageConfig,
    dir: &Path,
    ledger_on: bool,
    at: &mut Scope,
) -> Option<StorageUrl> {
    let Some(url) = &cfg.url else {
        return Some(if ledger_on {
            StorageUrl::File(dir.join(".mediagate/media"))
        } else {
            StorageUrl::Off
        });
    };
    let parsed = at.check("url", StorageUrl::parse(url, dir))?;
    if parsed != StorageUrl::Off && !ledger_on {
        at.push(
            "url",
            "needs the ledger (stored results are recorded in it); set `url = \"none\"` or turn the ledger on",
        );
    }
    if cfg.max_in_flight == 0 {
        at.push("max_in_flight", "must be at least 1");
    }
    // Links carry their expiry in Unix seconds: a TTL of centuries is a typo.
    if cfg.link_ttl_secs == 0 || cfg.link_ttl_secs > 10 * 365 * 86_400 {
        at.push("link_ttl_secs", "must be from 1 second to 10 years");
    }
    if cfg.direct_links && !matches!(parsed, StorageUrl::S3 { .. }) {
        at.push(
            "direct_links",
            "needs `url = \"s3://…\"`: direct links are presigned URLs of a bucket's objects",
        );
    }
    // S3 signs a URL for 7 days at most.
    if cfg.direct_links && cfg.link_ttl_secs > 7 * 24 * 3600 {
        at.push(
            "link_ttl_secs",
            "with direct_links, at most 604800 (7 days, the longest S3 presigns for)",
        );
    }
    if cfg
        .public_base_url
        .as_deref()
        .is_some_and(|u| !is_base_url(u))
    {
        at.push(
            "public_base_url",
            "must be an http:// or https:// URL without a query",
        );
    }
    Some(parsed)
}
