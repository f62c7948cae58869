//! The task service: one lifecycle for every task, whoever touches it.
//!
//! - [`TaskService::submit`]: admit (the ledger's idempotency key, quota and
//!   write-ahead row) → the model's providers in failover order → sealed id → the row
//!   completed. Once admitted, a submit runs to its end in a task of its own, with or
//!   without a ledger: a client that leaves or a request timeout never cancels paid
//!   work half-way.
//! - [`TaskService::lookup`]: the results cache, else the task's provider (concurrent
//!   lookups of one task share one upstream call) → a finished task recorded once →
//!   the clients waiting for it woken.
//! - [`TaskService::subscribe`]: a task that reached a terminal state is announced,
//!   for the background jobs that act on it.
//!
//! Endpoints (`api`) and background jobs (`gateway`: the tracker, the deliverer) reach
//! tasks only through it; the public links of a completed task are formed in one
//! place ([`links`]).

mod delete;
pub mod links;
mod lookup;
mod refusals;
mod settle;
mod submit;
mod waiters;

use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use self::lookup::{Lookup, TaskRef};
use self::settle::Settlement;
pub use self::submit::{Attempted, SealedTask, SubmitOrder, Submitted};
use self::waiters::Waiters;
pub use self::waiters::Woken;
use crate::metrics::{SpendMetrics, WaiterMetrics};
use crate::snapshot::Snapshot;
use crate::storage::Storage;
use crate::tasks::ledger::Ledger;
use crate::tasks::{TaskCache, TaskState, TaskStatus};

/// How many terminal events a slow subscriber may fall behind before it misses some
/// (it is told so, and looks at the ledger instead).
const EVENTS_KEPT: usize = 1024;

/// A task that reached a terminal state. With a ledger it is announced once in the
/// fleet, by the replica whose write recorded it first; without one, each time this
/// replica learns it (at most once per results-cache lifetime of the task).
#[derive(Debug, Clone)]
pub struct Finished {
    /// The task's key in the results cache: its provider and upstream id.
    pub key: Arc<str>,
    pub status: TaskStatus,
}

/// The task service; see the module documentation.
pub struct TaskService {
    cache: TaskCache,
    ledger: Option<Arc<Ledger>>,
    storage: Option<Storage>,
    waiters: Waiters,
    submits: TaskTracker,
    /// Cancelled when the gateway stops: retries of a submit's outcome make one last
    /// try at once rather than wait.
    stopping: CancellationToken,
    finished: broadcast::Sender<Finished>,
    ledger_errors: Counter,
    spend: SpendMetrics,
}

impl TaskService {
    /// `ledger` is `None` when `[ledger] url = "none"`; `ledger_errors` counts the
    /// ledger's failures seen here, `spend` the money reserved and settled, `waiters`
    /// the long-polling clients.
    pub fn new(
        cache: TaskCache,
        ledger: Option<Arc<Ledger>>,
        storage: Option<Storage>,
        ledger_errors: Counter,
        spend: SpendMetrics,
        waiters: WaiterMetrics,
    ) -> Self {
        Self {
            cache,
            ledger,
            storage,
            waiters: Waiters::new(waiters),
            submits: TaskTracker::new(),
            stopping: CancellationToken::new(),
            finished: broadcast::Sender::new(EVENTS_KEPT),
            ledger_errors,
            spend,
        }
    }

    /// A ledger failure a client's request cannot do without: counted, logged with
    /// `what` the request needed, and answered 503 `ledger_unavailable`.
    fn ledger_unavailable(
        &self,
        what: &str,
        e: &crate::tasks::ledger::LedgerError,
    ) -> crate::error::ApiError {
        self.ledger_errors.inc();
        tracing::warn!(error = %e, "ledger failed: {what}");
        crate::error::ApiError::ledger_unavailable()
    }

    /// The task ledger, when the gateway keeps one.
    pub fn ledger(&self) -> Option<&Arc<Ledger>> {
        self.ledger.as_ref()
    }

    /// Where completed tasks' results are kept, when they are.
    pub fn storage(&self) -> Option<&Storage> {
        self.storage.as_ref()
    }

    /// The results cache (its size for the metrics; emptied by a reload).
    pub fn cache(&self) -> &TaskCache {
        &self.cache
    }

    /// Submits running to their end; a graceful stop waits for them.
    pub fn submits(&self) -> &TaskTracker {
        &self.submits
    }

    /// The gateway stops: no new submit is taken, and a submit whose outcome's
    /// write is being retried tries once more at once, so that the stop waits for
    /// one write at most, not for the whole schedule of retries.
    pub fn stop_submits(&self) {
        self.submits.close();
        self.stopping.cancel();
    }

    /// Tasks reaching a terminal state from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Finished> {
        self.finished.subscribe()
    }

    /// A task the tracker stopped following: it ends `failed` with `state`'s error,
    /// recorded, announced and told to its waiting clients as if its provider had
    /// said so.
    /// Whether the ledger has the end (when not, the tracker tries again later).
    pub async fn give_up(&self, snapshot: &Snapshot, task: TaskRef<'_>, state: TaskState) -> bool {
        let key = TaskCache::key(task.provider, task.upstream_id);
        let ended = self.finished(snapshot, task, &key, &state, None).await;
        let state = Arc::new(ended.earlier.unwrap_or(state));
        self.waiters.wake(&key, &state);
        ended.recorded
    }

    /// A terminal state just learned (the provider's final answer `answer` with it):
    /// into the ledger once, settled by the same statement (the ledger ignores a
    /// second write), and announced and counted by whoever recorded it. Says whether
    /// the ledger has an end (not when its write failed, logged and counted, so that
    /// the caller does not take the task for done) and which end the task has.
    async fn finished(
        &self,
        snapshot: &Snapshot,
        task: TaskRef<'_>,
        key: &Arc<str>,
        state: &TaskState,
        answer: Option<&bytes::Bytes>,
    ) -> Ended {
        let (provider, upstream_id) = (task.provider, task.upstream_id);
        let settlement = self.settlement(snapshot, task, state, answer).await;
        let settled = settlement.as_ref().map(|s| s.settled);
        let written = match &self.ledger {
            None => Ok(true),
            Some(ledger) => {
                let span = crate::traces::span(|| {
                    crate::traces::traced!(
                        "ledger.finish",
                        otel.kind = "internal",
                        mediagate.provider = provider
                    )
                });
                let write = ledger.finished(provider, upstream_id, state, settled);
                tracing::Instrument::instrument(write, span).await
            }
        };
        let (first, recorded) = match written {
            Ok(first) => (first, true),
            Err(e) => {
                self.ledger_errors.inc();
                tracing::warn!(provider, error = %e, "ledger update of a finished task failed");
                (false, false)
            }
        };
        if first {
            if let Some(Settlement {
                owner,
                model,
                estimate,
                settled,
            }) = &settlement
            {
                self.spend.settled(owner, model, *estimate, *settled);
            }
            let event = Finished {
                key: key.clone(),
                status: state.status,
            };
            // No subscriber is no error: nothing needs to act.
            let _ = self.finished.send(event);
        }
        // Written before (by this replica or another, or by the operator): the ledger's
        // end is the task's, whatever the provider says of it now.
        let earlier = if recorded && !first {
            self.recorded_end(task).await.filter(|end| {
                !(end.status == TaskStatus::Completed && state.status == TaskStatus::Completed)
            })
        } else {
            None
        };
        Ended { recorded, earlier }
    }
}

/// How a finished state seen of a task stands in the ledger.
struct Ended {
    /// Whether the ledger has an end for the task (false when its write failed).
    recorded: bool,
    /// The end the ledger recorded earlier, when the task is answered with it rather
    /// than with the state seen: a provider that later answers `failed` or `expired`
    /// for a task recorded `completed` (or `completed` for one the owner cancelled)
    /// does not change it. Both completed, the state seen is kept: its links are the
    /// provider's current ones.
    earlier: Option<TaskState>,
}
