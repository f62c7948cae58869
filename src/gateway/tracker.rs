//! The background tracker: it follows every unfinished task in the ledger until it is
//! completed or failed, so that long-polling clients and webhooks learn the outcome
//! without anybody polling.
//!
//! Each task is asked about at its provider's `poll_interval_ms`, growing by half at
//! each unchanged answer up to `[tracker] max_interval_ms`, with at most
//! `poll_max_in_flight` status requests to one provider at a time. It looks a task up
//! through the task service like a client query, so a task is never asked about twice
//! within the poll cache interval, and what it learns wakes waiting clients and
//! announces finished tasks. Replicas sharing a PostgreSQL ledger lease the tasks they
//! poll (`FOR UPDATE SKIP LOCKED`); a replica that dies leaves its leases to expire.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

use super::Gateway;
use super::rounds::Rounds;
use crate::lifecycle::TaskRef;
use crate::tasks::ledger::{Ledger, TaskRecord, now_ms};
use crate::tasks::{TaskError, TaskState, TaskStatus};

/// Rows leased at once; when there were as many, the next batch follows at once.
const BATCH: i64 = 64;
/// How often the tracked tasks are counted for the metrics.
const COUNT_EVERY: Duration = Duration::from_secs(5);

/// Follow unfinished tasks until the gateway stops.
pub async fn run(gateway: Arc<Gateway>) {
    let Some(ledger) = gateway.tasks.ledger().cloned() else {
        return;
    };
    let mut tracker = Tracker {
        me: gateway.replica.clone(),
        gateway: gateway.clone(),
        ledger,
        in_flight: HashMap::new(),
        count_due: tokio::time::Instant::now(),
        counted: Vec::new(),
    };
    super::rounds::until_stopped(&gateway, None, &mut tracker).await;
}

/// The tracker's state: its lease name, and the status requests in flight per
/// provider.
struct Tracker {
    gateway: Arc<Gateway>,
    ledger: Arc<Ledger>,
    me: String,
    in_flight: HashMap<String, Arc<Semaphore>>,
    /// When the tracked tasks are counted next, and the providers counted last.
    count_due: tokio::time::Instant,
    counted: Vec<String>,
}

impl Rounds for Tracker {
    /// Lease the tasks due, and ask about each within its provider's
    /// `poll_max_in_flight`.
    async fn round(&mut self) -> bool {
        let settings = self.gateway.snapshot().tracker.clone();
        if !settings.enabled {
            return false;
        }
        self.count().await;
        let gateway = &self.gateway;
        let lease = Duration::from_millis(settings.lease_ms);
        gateway.metrics.tracker.statement("lease");
        let due = match self.ledger.claim_due(&self.me, lease, BATCH).await {
            Ok(due) => due,
            Err(e) => {
                gateway.metrics.ledger_errors.inc();
                tracing::warn!(error = %e, "tracker: the ledger cannot be read");
                Vec::new()
            }
        };
        let full = due.len() as i64 == BATCH;
        for row in due {
            let provider = row.provider.clone().unwrap_or_default();
            let slots = self.in_flight.entry(provider).or_insert_with(|| {
                let limit = gateway
                    .snapshot()
                    .providers
                    .get(row.provider.as_deref().unwrap_or_default())
                    .map_or(1, |p| p.poll_max_in_flight());
                Arc::new(Semaphore::new(limit))
            });
            let Ok(slot) = slots.clone().acquire_owned().await else {
                continue;
            };
            let (gateway, me) = (gateway.clone(), self.me.clone());
            tokio::spawn(async move {
                poll(&gateway, &me, row).await;
                drop(slot);
            });
        }
        full
    }
}

impl Tracker {
    /// Every few seconds: the unfinished tasks per provider and how late their most
    /// overdue poll is, for the metrics. A provider counted before and not now has
    /// none left.
    async fn count(&mut self) {
        if tokio::time::Instant::now() < self.count_due {
            return;
        }
        self.count_due = tokio::time::Instant::now() + COUNT_EVERY;
        let metrics = &self.gateway.metrics.tracker;
        metrics.statement("count");
        let tracked = match self.ledger.tracked().await {
            Ok(tracked) => tracked,
            Err(e) => {
                self.gateway.metrics.ledger_errors.inc();
                tracing::warn!(error = %e, "tracker: the tracked tasks cannot be counted");
                return;
            }
        };
        let now = now_ms();
        for t in &tracked {
            let late = t.oldest_due_ms.map_or(0, |due| (now - due).max(0));
            metrics.tracked(&t.provider, t.tasks, Duration::from_millis(late as u64));
        }
        for gone in &self.counted {
            if !tracked.iter().any(|t| &t.provider == gone) {
                metrics.tracked(gone, 0, Duration::ZERO);
            }
        }
        self.counted = tracked.into_iter().map(|t| t.provider).collect();
    }
}

/// Ask about one leased task and write down what was learned.
async fn poll(gateway: &Gateway, me: &str, row: TaskRecord) {
    let Some(ledger) = gateway.tasks.ledger() else {
        return;
    };
    let (Some(provider_name), Some(upstream_id)) = (&row.provider, &row.upstream_id) else {
        return;
    };
    let snapshot = gateway.snapshot();
    let max_age = Duration::from_secs(snapshot.tracker.max_age_hours.saturating_mul(3600));
    let task = TaskRef {
        provider: provider_name,
        upstream_id,
        model: &row.model,
        kind: row.kind,
    };
    if now_ms() - row.created_ms > max_age.as_millis() as i64 {
        gateway.tasks.give_up(&snapshot, task, expired()).await;
        return;
    }
    let Some(provider) = snapshot.providers.get(provider_name) else {
        // The provider left the configuration; look again later, it may come back.
        let later = Duration::from_millis(snapshot.tracker.max_interval_ms);
        let _ = ledger.polled(row.id, me, last_status(&row), later).await;
        return;
    };
    let metrics = &gateway.metrics.tracker;
    let sent = now_ms();
    let due = row.next_poll_ms.unwrap_or(sent);
    metrics.poll_sent(provider_name, millis(sent - due));
    let status = match gateway.tasks.lookup(&snapshot, task).await {
        Ok(found) => {
            let status = found.state.status;
            // Answered by the results cache: no status request was made.
            if found.upstream_time.is_some() {
                metrics.status_request(provider_name, outcome(status));
                if status.is_terminal() {
                    // Last known unfinished when the previous answer came (the next
                    // poll was set an interval after it), or at its submit.
                    let last_seen = due - row.poll_interval_ms.unwrap_or(0);
                    metrics.seen_finished(provider_name, millis(now_ms() - last_seen));
                }
            }
            if status.is_terminal() {
                return;
            }
            status
        }
        Err(e) => {
            metrics.status_request(provider_name, "error");
            tracing::debug!(provider = %provider_name, code = e.code, "tracker: status request failed");
            last_status(&row)
        }
    };
    let interval = next_interval(&row, status, provider.poll_interval(), &snapshot.tracker);
    metrics.statement("polled");
    if let Err(e) = ledger.polled(row.id, me, status, interval).await {
        gateway.metrics.ledger_errors.inc();
        tracing::warn!(row = row.id, error = %e, "tracker: the ledger cannot be written");
    }
}

/// The provider's interval again after a change; otherwise half as long again, up to
/// the configured maximum.
fn next_interval(
    row: &TaskRecord,
    status: TaskStatus,
    base: Duration,
    settings: &crate::config::TrackerConfig,
) -> Duration {
    let max = Duration::from_millis(settings.max_interval_ms).max(base);
    let unchanged = row.status == Some(status);
    match row.poll_interval_ms {
        Some(ms) if unchanged => (Duration::from_millis(ms as u64) * 3 / 2).clamp(base, max),
        _ => base,
    }
}

/// A status request's outcome, as the metrics name it.
fn outcome(status: TaskStatus) -> &'static str {
    match status {
        TaskStatus::Completed => "completed",
        TaskStatus::Failed => "failed",
        TaskStatus::Queued | TaskStatus::Processing => "unfinished",
    }
}

/// A span of milliseconds, none when negative (clocks of replicas differ).
fn millis(ms: i64) -> Duration {
    Duration::from_millis(ms.max(0) as u64)
}

fn last_status(row: &TaskRecord) -> TaskStatus {
    match row.status {
        Some(TaskStatus::Processing) => TaskStatus::Processing,
        _ => TaskStatus::Queued,
    }
}

/// What a task that never finished within `max_age_hours` becomes.
fn expired() -> TaskState {
    TaskState {
        status: TaskStatus::Failed,
        progress: None,
        urls: Vec::new(),
        error: Some(TaskError {
            code: "tracking_expired".into(),
            message: "the task did not finish within the time the gateway follows tasks".into(),
        }),
    }
}
