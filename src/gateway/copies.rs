//! Copies of completed tasks' results into storage: every replica leases due copies
//! from the ledger (a copy is owed from the moment a task that keeps its results is
//! recorded completed, whoever saw it), downloads each result from its provider
//! through the provider's guarded client (its content step when it has one), streams
//! it into storage with its size and SHA-256, and writes the outcome back. A failure
//! of the provider's connection or of storage is retried with backoff until
//! `[storage] retry_for_hours`; a result over the family's `max_result_bytes`, or
//! gone at the provider, is not kept (the task keeps its provider's links). A replica
//! that dies mid-copy leaves its lease to expire, and the copy is made again whole.
//!
//! Every few seconds the copier also deletes the stored results whose family's
//! `keep_days` have passed (any replica may; deleting twice is harmless), and
//! refreshes the gauge of copies owed.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::Semaphore;

use super::Gateway;
use super::rounds::Rounds;
use crate::lifecycle::TaskRef;
use crate::providers::{Provider, UpstreamError};
use crate::snapshot::Snapshot;
use crate::storage::{Storage, StorageError};
use crate::tasks::ledger::{CopyOutcome, Leased, Ledger, StoredResult, TaskRecord, now_ms};

/// Copies leased at once at most.
const BATCH: i64 = 16;
/// The first retry's pause; each next one doubles, up to [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_secs(2);
const MAX_RETRY: Duration = Duration::from_secs(300);
/// How often results past their retention are looked for, and the backlog counted.
const HOUSEKEEPING_EVERY: Duration = Duration::from_secs(5);
/// Expired results deleted per look at most.
const EXPIRED_BATCH: i64 = 100;
/// A family no longer configured keeps its results this long, this big at most.
const DEFAULT_KEEP_DAYS: u32 = 30;
const DEFAULT_MAX_BYTES: u64 = 2 * 1024 * 1024 * 1024;

/// Copy results until the gateway stops.
pub async fn run(gateway: Arc<Gateway>) {
    let Some(ledger) = gateway.tasks.ledger().cloned() else {
        return;
    };
    let Some(storage) = gateway.tasks.storage().cloned() else {
        match ledger.skip_copies_without_storage().await {
            Ok(0) => {}
            Ok(n) => tracing::warn!(
                copies = n,
                "storage is off: the copies still owed are skipped; their tasks keep their providers' links"
            ),
            Err(e) => {
                tracing::warn!(error = %e, "storage is off, and the copies still owed cannot be skipped")
            }
        }
        return;
    };
    let slots = Arc::new(Semaphore::new(
        gateway.snapshot().storage.max_in_flight.max(1),
    ));
    let mut copier = Copier {
        gateway: gateway.clone(),
        ledger,
        storage,
        slots,
        housekeeping_due: tokio::time::Instant::now(),
    };
    // A task that completed here owes its copy now: no need to wait for the tick.
    let finished = Some(gateway.tasks.subscribe());
    super::rounds::until_stopped(&gateway, finished, &mut copier).await;
}

struct Copier {
    gateway: Arc<Gateway>,
    ledger: Arc<Ledger>,
    storage: Storage,
    slots: Arc<Semaphore>,
    housekeeping_due: tokio::time::Instant,
}

impl Rounds for Copier {
    /// Lease as many copies as there are free slots (a batch at most), start each.
    async fn round(&mut self) -> bool {
        self.housekeeping().await;
        let free = self.slots.available_permits() as i64;
        if free == 0 {
            return false;
        }
        let snapshot = self.gateway.snapshot();
        let limit = free.min(BATCH);
        // Held for the longest a copy may take, and some: it is not taken over while
        // it runs.
        let lease = Duration::from_millis(snapshot.storage.copy_timeout_ms) * 2;
        let leased = match self
            .ledger
            .claim_copies(&self.gateway.replica, lease, limit)
            .await
        {
            Ok(leased) => leased,
            Err(e) => {
                tracing::warn!(error = %e, "storage: copies owed cannot be read");
                return false;
            }
        };
        let full = leased.len() as i64 == limit;
        for copy in leased {
            let Ok(slot) = self.slots.clone().acquire_owned().await else {
                break;
            };
            let job = CopyJob {
                snapshot: snapshot.clone(),
                ledger: self.ledger.clone(),
                storage: self.storage.clone(),
                replica: self.gateway.replica.clone(),
                gateway: self.gateway.clone(),
            };
            let in_flight = InFlight::of(&self.gateway.metrics.result_copies_in_flight);
            tokio::spawn(async move {
                job.run(copy).await;
                drop((in_flight, slot));
            });
        }
        full
    }
}

/// A copy counted in flight until this is dropped, however its task ends (a panic
/// included).
struct InFlight(Gauge);

impl InFlight {
    fn of(gauge: &Gauge) -> Self {
        gauge.inc();
        Self(gauge.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl Copier {
    /// Every few seconds: the results past their retention deleted, the backlog
    /// gauge refreshed.
    async fn housekeeping(&mut self) {
        if tokio::time::Instant::now() < self.housekeeping_due {
            return;
        }
        self.housekeeping_due = tokio::time::Instant::now() + HOUSEKEEPING_EVERY;
        let metrics = &self.gateway.metrics;
        match self.ledger.copies_pending().await {
            Ok(n) => {
                metrics.result_copies_pending.set(n);
            }
            Err(e) => tracing::warn!(error = %e, "storage: the copies owed cannot be counted"),
        }
        let expired = match self.ledger.expired_results(EXPIRED_BATCH).await {
            Ok(expired) => expired,
            Err(e) => {
                tracing::warn!(error = %e, "storage: expired results cannot be read");
                return;
            }
        };
        for result in expired {
            if let Err(e) = self.storage.delete(&result.object_key).await {
                // Tried again at the next look.
                tracing::warn!(error = %e, task_row = result.task_row, "storage: an expired result cannot be deleted");
                continue;
            }
            match self.ledger.result_deleted(result.task_row, result.n).await {
                Ok(true) => {
                    metrics.results_expired.inc();
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "storage: a deleted result cannot be recorded")
                }
            }
        }
    }
}

/// What one copy needs.
struct CopyJob {
    snapshot: Arc<Snapshot>,
    ledger: Arc<Ledger>,
    storage: Storage,
    replica: String,
    gateway: Arc<Gateway>,
}

fn outcome_label(outcome: &CopyOutcome) -> &'static str {
    match outcome {
        CopyOutcome::Stored => "stored",
        CopyOutcome::Skipped { .. } => "skipped",
        CopyOutcome::Failed { .. } => "failed",
        CopyOutcome::Retry { .. } => "retry",
    }
}

impl CopyJob {
    async fn run(self, copy: Leased) {
        let timeout = Duration::from_millis(self.snapshot.storage.copy_timeout_ms);
        let started = std::time::Instant::now();
        // A trace of its own: the copy runs after the task's requests have ended.
        let span = crate::traces::span(|| {
            crate::traces::traced!(
                "storage.copy",
                otel.kind = "internal",
                mediagate.task_row = copy.task_row,
                mediagate.outcome = tracing::field::Empty
            )
        });
        let copied = tracing::Instrument::instrument(self.copy(&copy), span.clone());
        let outcome = match tokio::time::timeout(timeout, copied).await {
            Ok(Ok(())) => CopyOutcome::Stored,
            Ok(Err(Failure::Skip(why))) => {
                tracing::warn!(task_row = copy.task_row, why = %why, "result not kept");
                CopyOutcome::Skipped { why }
            }
            Ok(Err(Failure::Retry(error))) => self.retry(&copy, error),
            Err(_) => self.retry(&copy, "the copy took longer than copy_timeout_ms".into()),
        };
        let metrics = &self.gateway.metrics;
        span.record("mediagate.outcome", outcome_label(&outcome));
        match &outcome {
            CopyOutcome::Stored => metrics.result_copy("stored", Some(started.elapsed())),
            CopyOutcome::Skipped { .. } => metrics.result_copy("skipped", None),
            CopyOutcome::Failed { .. } => metrics.result_copy("failed", None),
            CopyOutcome::Retry { .. } => metrics.result_copy("retry", None),
        }
        let given_up = matches!(
            outcome,
            CopyOutcome::Skipped { .. } | CopyOutcome::Failed { .. }
        );
        match self
            .ledger
            .copy_attempted(copy.id, &self.replica, &outcome)
            .await
        {
            // Written while this replica held the copy, and for good: nobody makes it
            // again, so what lies under its keys unrecorded is nobody's.
            Ok(true) if given_up => self.discard_unrecorded(copy.task_row).await,
            Ok(_) => {}
            // The lease runs out and the copy is made again.
            Err(e) => {
                tracing::warn!(error = %e, task_row = copy.task_row, "storage: a copy's outcome cannot be written")
            }
        }
    }

    /// A copy given up leaves nothing in storage but the results the ledger records:
    /// an earlier attempt cut short by `copy_timeout_ms` while finishing its upload
    /// may have had the object completed after all (S3 finished it as the timeout
    /// fired), and with no row nothing would ever delete it. Best effort: what cannot
    /// be listed or deleted now is logged, and an upload of this very attempt that
    /// completes after the listing (cut short as it finished) stays.
    async fn discard_unrecorded(&self, task_row: i64) {
        let kept: Vec<String> = match self.ledger.results_of(task_row).await {
            Ok(results) => results
                .iter()
                .filter(|r| r.deleted_ms.is_none())
                .map(|r| self.storage.listed_as(&r.object_key))
                .collect(),
            Err(e) => {
                tracing::warn!(error = %e, task_row, "storage: a copy given up cannot be cleared: its results cannot be read");
                return;
            }
        };
        let keys = match self.storage.result_keys(task_row).await {
            Ok(keys) => keys,
            Err(e) => {
                tracing::warn!(error = %e, task_row, "storage: a copy given up cannot be cleared: its objects cannot be listed");
                return;
            }
        };
        for key in keys.iter().filter(|k| !kept.contains(k)) {
            match self.storage.delete(key).await {
                Ok(()) => {
                    tracing::info!(task_row, key = %key, "storage: an object of a copy given up deleted")
                }
                Err(e) => {
                    tracing::warn!(error = %e, task_row, key = %key, "storage: an object of a copy given up cannot be deleted")
                }
            }
        }
    }

    /// The next try, or giving up once the copy has been owed too long.
    fn retry(&self, copy: &Leased, error: String) -> CopyOutcome {
        let now = now_ms();
        let hours = i64::try_from(self.snapshot.storage.retry_for_hours).unwrap_or(i64::MAX);
        let retry_for = hours.saturating_mul(3_600_000);
        if now - copy.created_ms > retry_for {
            tracing::warn!(task_row = copy.task_row, error = %error, "result copy given up");
            return CopyOutcome::Failed { error };
        }
        let pause = FIRST_RETRY
            .saturating_mul(1 << copy.attempts.clamp(0, 16))
            .min(MAX_RETRY);
        tracing::info!(task_row = copy.task_row, error = %error, retry_in_ms = pause.as_millis() as u64, "result copy failed; retried");
        CopyOutcome::Retry {
            error,
            next_ms: now + pause.as_millis() as i64,
        }
    }

    /// The task's provider; retried when the snapshot has none of that name (a
    /// reload that dropped it may be put right), rather than skipped for good.
    fn provider(&self, name: &str) -> Result<&Arc<Provider>, Failure> {
        let gone = || Failure::Retry("its provider is no longer configured".into());
        self.snapshot.providers.get(name).ok_or_else(gone)
    }

    /// Every result of the task, into storage.
    async fn copy(&self, copy: &Leased) -> Result<(), Failure> {
        let task = match self.ledger.row(copy.task_row).await {
            Ok(Some(task)) => task,
            Ok(None) => return Err(Failure::Skip("the task's row is gone".into())),
            Err(e) => return Err(Failure::Retry(e.to_string())),
        };
        let (Some(provider_name), Some(upstream_id)) = (&task.provider, &task.upstream_id) else {
            return Err(Failure::Skip("the task was never created upstream".into()));
        };
        let provider = self.provider(provider_name)?;
        let urls: Vec<String> = task
            .urls
            .as_deref()
            .and_then(|u| serde_json::from_str(u).ok())
            .unwrap_or_default();
        if urls.is_empty() {
            return Err(Failure::Skip("the task has no results".into()));
        }
        let (keep_days, max_bytes) = self.policy(&task);
        let reference = TaskRef {
            provider: provider_name,
            upstream_id,
            model: &task.model,
            kind: task.kind,
        };
        // A content step gives the one result it knows.
        let count = if provider.content_url_base().is_some() {
            1
        } else {
            urls.len()
        };
        let idle = Duration::from_millis(self.snapshot.storage.copy_timeout_ms);
        for n in 0..count {
            let call = reference.call(&self.snapshot);
            let response = provider
                .result(call, upstream_id, &urls, n, idle)
                .await
                .map_err(Failure::upstream)?;
            let content_type = response
                .headers()
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let key = self.storage.key(copy.task_row, n);
            let stored = self
                .storage
                .put(
                    &key,
                    response.into_body(),
                    max_bytes,
                    content_type.as_deref(),
                )
                .await
                .map_err(Failure::storage)?;
            self.gateway
                .metrics
                .result_bytes_stored
                .inc_by(stored.bytes);
            let stored_ms = now_ms();
            let result = StoredResult {
                task_row: copy.task_row,
                n: n as i64,
                object_key: key,
                bytes: stored.bytes as i64,
                content_type,
                sha256: stored.sha256,
                stored_ms,
                expires_ms: stored_ms + i64::from(keep_days) * 86_400_000,
                deleted_ms: None,
            };
            self.ledger
                .result_stored(copy.task_row, &result)
                .await
                .map_err(|e| Failure::Retry(e.to_string()))?;
        }
        Ok(())
    }

    /// The task's family's `keep_days` and `max_result_bytes`, as configured now.
    fn policy(&self, task: &TaskRecord) -> (u32, u64) {
        match self.snapshot.models.get(&task.model) {
            Some(model) => (
                model.results.keep_days.unwrap_or(DEFAULT_KEEP_DAYS),
                model.results.max_bytes,
            ),
            None => (DEFAULT_KEEP_DAYS, DEFAULT_MAX_BYTES),
        }
    }
}

/// Why a copy did not complete.
enum Failure {
    /// For good: the task keeps its provider's links.
    Skip(String),
    /// For now: tried again later.
    Retry(String),
}

impl Failure {
    fn upstream(e: UpstreamError) -> Self {
        match e {
            UpstreamError::TaskGone => Self::Skip("the result is gone at the provider".into()),
            e => Self::Retry(e.to_string()),
        }
    }

    fn storage(e: StorageError) -> Self {
        match e {
            StorageError::TooLarge(_) => Self::Skip(e.to_string()),
            e => Self::Retry(e.to_string()),
        }
    }
}
