//! The background tracker: it follows every unfinished task in the ledger until it is
//! completed or failed, so that long-polling clients and webhooks learn the outcome
//! without anybody polling.
//!
//! Each task is asked about at its provider's `poll_interval_ms`, growing by half at
//! each unchanged answer up to `[tracker] max_interval_ms`, with at most
//! `poll_max_in_flight` status requests to one provider at a time. A task is due again
//! an interval after it was due, not after its answer came, so that the tracker's own
//! delay does not stretch every interval. It looks a task up through the task service
//! ([`crate::lifecycle::TaskService::poll`]): a task a client asked about within the
//! poll cache interval is not asked about again, and what it learns wakes waiting
//! clients and announces finished tasks. Replicas sharing a PostgreSQL ledger lease
//! the tasks they poll (`FOR UPDATE SKIP LOCKED`); a replica that dies leaves its
//! leases to expire.
//!
//! What it costs at 100,000 tasks (BENCHMARKS.md, "the tracker at 10,000 and 100,000
//! tasks") shaped the rest:
//! - what the unfinished answers teach (status, next request, the lease given back)
//!   is written back at the next round, one statement for all of them, not one per
//!   status request; a provider's slot is not held through that write;
//! - the next batch is leased while the last one is being sent, so that slots never
//!   wait for the ledger;
//! - a provider's status requests are sent from one of the serving threads (given to
//!   providers in turn), where a request runs as a forwarded query does, on one thread
//!   with that thread's upstream connections; on the gateway's own runtime, each woke
//!   another of its threads several times.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::Gateway;
use super::rounds::Rounds;
use crate::lifecycle::TaskRef;
use crate::tasks::ledger::{Ledger, Polled, TaskRecord, now_ms};
use crate::tasks::{TaskError, TaskState, TaskStatus};

/// Rows leased at once; when there were as many, the next batch follows at once.
const BATCH: i64 = 64;
/// Rows leased and not yet sent at most: the batch being sent and the next one.
const AHEAD: usize = 2 * BATCH as usize;
/// Tasks written back by one statement at most (its JSON text: about 40 bytes each).
const WRITE_BACK: usize = 512;
/// How often the tracked tasks are counted for the metrics.
const COUNT_EVERY: Duration = Duration::from_secs(5);

/// Follow unfinished tasks until the gateway stops, sending the status requests on
/// the `workers` (or here, when there are none).
pub async fn run(gateway: Arc<Gateway>, workers: Vec<Handle>) {
    let Some(ledger) = gateway.tasks.ledger().cloned() else {
        return;
    };
    let mut tracker = Tracker {
        me: gateway.replica.clone(),
        gateway: gateway.clone(),
        ledger,
        workers,
        ahead: Arc::new(Semaphore::new(AHEAD)),
        in_flight: HashMap::new(),
        count_due: tokio::time::Instant::now(),
        counted: Vec::new(),
        answered: Arc::default(),
    };
    super::rounds::until_stopped(&gateway, None, &mut tracker).await;
    // Leases not given back would hold their tasks until they expire.
    tracker.write_back().await;
}

/// The tracker's state: its lease name, where status requests are sent from, the
/// rows leased ahead of them, and the status requests in flight per provider.
struct Tracker {
    gateway: Arc<Gateway>,
    ledger: Arc<Ledger>,
    me: String,
    workers: Vec<Handle>,
    ahead: Arc<Semaphore>,
    in_flight: HashMap<String, Slots>,
    /// When the tracked tasks are counted next, and the providers counted last.
    count_due: tokio::time::Instant,
    counted: Vec<String>,
    /// What the polls since the last round learned, to be written back.
    answered: Arc<Mutex<Vec<Polled>>>,
}

impl Rounds for Tracker {
    /// Once there is room for a whole batch ahead of the status requests: write back
    /// what the last ones learned, lease the tasks due, and hand them to a worker.
    async fn round(&mut self) -> bool {
        let settings = self.gateway.snapshot().tracker.clone();
        if !settings.enabled {
            return false;
        }
        self.count().await;
        let Ok(mut room) = self.ahead.clone().acquire_many_owned(BATCH as u32).await else {
            return false;
        };
        let lease = Duration::from_millis(settings.lease_ms);
        self.gateway.metrics.tracker.statement("lease");
        // Both to the ledger's writer at once: on SQLite, one transaction.
        let ((), leased) = tokio::join!(
            self.write_back(),
            self.ledger.claim_due(&self.me, lease, BATCH)
        );
        let due = leased.unwrap_or_else(|e| {
            self.gateway.metrics.ledger_errors.inc();
            tracing::warn!(error = %e, "tracker: the ledger cannot be read");
            Vec::new()
        });
        let full = due.len() as i64 == BATCH;
        // Each worker's share, in the order leased.
        let mut shares: Vec<Vec<Due>> = Vec::new();
        for row in due {
            // No more rows than permits were leased.
            let Some(held) = room.split(1) else { break };
            let Slots { slots, worker } = self.slots(&row);
            if shares.len() <= worker {
                shares.resize_with(worker + 1, Vec::new);
            }
            shares[worker].push(Due { row, slots, held });
        }
        for (worker, share) in shares.into_iter().enumerate() {
            self.send(worker, share);
        }
        full
    }
}

/// A provider's `poll_max_in_flight`, and the worker its status requests are sent
/// from: one per provider, so that its requests in flight share one thread's wake-ups
/// and connections.
#[derive(Clone)]
struct Slots {
    slots: Arc<Semaphore>,
    worker: usize,
}

/// A leased task waiting for a slot: its provider's slots, and its place among the
/// rows leased ahead.
struct Due {
    row: TaskRecord,
    slots: Arc<Semaphore>,
    held: OwnedSemaphorePermit,
}

impl Tracker {
    /// The slots of `row`'s provider, and its worker: providers are given the
    /// workers in turn, as they are first seen.
    fn slots(&mut self, row: &TaskRecord) -> Slots {
        let provider = row.provider.as_deref().unwrap_or_default();
        if let Some(slots) = self.in_flight.get(provider) {
            return slots.clone();
        }
        let snapshot = self.gateway.snapshot();
        let limit = snapshot
            .providers
            .get(provider)
            .map_or(1, |p| p.poll_max_in_flight());
        let slots = Slots {
            slots: Arc::new(Semaphore::new(limit)),
            worker: self.in_flight.len() % self.workers.len().max(1),
        };
        self.in_flight.insert(provider.to_string(), slots.clone());
        slots
    }

    /// Hand `batch` to `worker`: it sends each status request once its provider has
    /// a slot free, in the order leased.
    fn send(&self, worker: usize, batch: Vec<Due>) {
        if batch.is_empty() {
            return;
        }
        let (gateway, answered) = (self.gateway.clone(), self.answered.clone());
        let sending = async move {
            for due in batch {
                let Ok(slot) = due.slots.acquire_owned().await else {
                    continue;
                };
                drop(due.held);
                // A lease that ran out while its row waited (a provider answering
                // slowly) is no longer ours: another look at the ledger may lease it.
                if due
                    .row
                    .lease_until_ms
                    .is_some_and(|until| now_ms() >= until)
                {
                    continue;
                }
                let (gateway, answered) = (gateway.clone(), answered.clone());
                tokio::spawn(async move {
                    let polled = poll(&gateway, due.row).await;
                    // The slot is the provider's: the write-back does not hold it.
                    drop(slot);
                    if let Some(polled) = polled {
                        lock(&answered).push(polled);
                    }
                });
            }
        };
        match self.workers.get(worker) {
            Some(worker) => drop(worker.spawn(sending)),
            None => drop(tokio::spawn(sending)),
        }
    }

    /// Write back what the polls since the last round learned, in statements of at
    /// most [`WRITE_BACK`] tasks.
    async fn write_back(&self) {
        let answered = std::mem::take(&mut *lock(&self.answered));
        for chunk in answered.chunks(WRITE_BACK) {
            self.gateway.metrics.tracker.statement("polled");
            if let Err(e) = self.ledger.polled(&self.me, chunk).await {
                self.gateway.metrics.ledger_errors.inc();
                tracing::warn!(tasks = chunk.len(), error = %e, "tracker: the ledger cannot be written");
            }
        }
    }

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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Ask about one leased task; what is to be written back when it is not finished.
async fn poll(gateway: &Gateway, row: TaskRecord) -> Option<Polled> {
    let (Some(provider_name), Some(upstream_id)) = (&row.provider, &row.upstream_id) else {
        return None;
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
        return None;
    }
    let Some(provider) = snapshot.providers.get(provider_name) else {
        // The provider left the configuration; look again later, it may come back.
        let later = Duration::from_millis(snapshot.tracker.max_interval_ms);
        let polled = Polled::answered(row.id, last_status(&row), now_ms(), later);
        return Some(Polled {
            answered_ms: row.updated_ms,
            ..polled
        });
    };
    let metrics = &gateway.metrics.tracker;
    let sent = now_ms();
    let due = row.next_poll_ms.unwrap_or(sent);
    metrics.poll_sent(provider_name, millis(sent - due));
    let status = match gateway.tasks.poll(&snapshot, task).await {
        Ok(found) => {
            let status = found.state.status;
            // Answered by the results cache: no status request was made.
            if found.upstream_time.is_some() {
                metrics.status_request(provider_name, outcome(status));
                if status.is_terminal() {
                    // Last known unfinished when the previous answer came (written
                    // back with it), or at its submit.
                    let gap = now_ms() - row.updated_ms;
                    metrics.seen_finished(provider_name, millis(gap));
                }
            }
            if status.is_terminal() {
                return None;
            }
            status
        }
        Err(e) => {
            metrics.status_request(provider_name, "error");
            tracing::debug!(provider = %provider_name, code = e.code, "tracker: status request failed");
            let interval = next_interval(
                &row,
                last_status(&row),
                provider.poll_interval(),
                &snapshot.tracker,
            );
            // Nothing learned: the task was last known unfinished when it was before.
            let polled = Polled::answered(row.id, last_status(&row), due, interval);
            return Some(Polled {
                answered_ms: row.updated_ms,
                ..polled
            });
        }
    };
    let interval = next_interval(&row, status, provider.poll_interval(), &snapshot.tracker);
    Some(Polled::answered(row.id, status, due, interval))
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
