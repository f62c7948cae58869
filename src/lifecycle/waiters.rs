//! Clients waiting for a task to change (long-poll): each state this replica learns of
//! a task wakes them at once. A ledger shared with other replicas (PostgreSQL) is
//! looked at every [`LEDGER_LOOK`] for what their trackers recorded: one statement per
//! provider and status for every task waited on, never one per waiting client. A
//! SQLite ledger is this process's alone: it holds nothing this replica did not learn
//! itself, so nothing is looked at while clients wait.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;

use super::TaskService;
use crate::metrics::WaiterMetrics;
use crate::tasks::{TaskCache, TaskId, TaskState, TaskStatus};

/// How often a replica sharing its ledger looks there for what the trackers of the
/// others recorded.
const LEDGER_LOOK: Duration = Duration::from_millis(500);

/// Upstream ids named by one look's statement at most, so that none grows with the
/// clients waiting.
const LOOK_BATCH: usize = 1000;

/// What a waiting client is told of its task.
#[derive(Clone)]
struct Known {
    /// The state this replica saw last.
    state: Arc<TaskState>,
    /// The status another replica recorded in the shared ledger, when it differs.
    recorded: Option<TaskStatus>,
}

/// A task clients wait on.
struct Watched {
    provider: Arc<str>,
    upstream_id: Arc<str>,
    known: watch::Sender<Known>,
}

/// The clients waiting, by the task's cache key: each state seen of the task is sent
/// to them. An entry lives while a client waits on it.
pub(super) struct Waiters {
    tasks: Mutex<HashMap<Arc<str>, Watched>>,
    metrics: WaiterMetrics,
}

impl Waiters {
    pub(super) fn new(metrics: WaiterMetrics) -> Self {
        Self {
            tasks: Mutex::default(),
            metrics,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Watched>> {
        self.tasks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Follow a task's states from `current` on, until the [`Waiting`] is dropped.
    fn watch(&self, task: &TaskId, current: Arc<TaskState>) -> Waiting<'_> {
        let key = TaskCache::key(&task.provider, &task.upstream_id);
        let known = self
            .lock()
            .entry(key.clone())
            .or_insert_with(|| Watched {
                provider: task.provider.as_str().into(),
                upstream_id: task.upstream_id.as_str().into(),
                known: watch::Sender::new(Known {
                    state: current,
                    recorded: None,
                }),
            })
            .known
            .subscribe();
        self.metrics.waiting.inc();
        Waiting {
            waiters: self,
            key,
            known: Some(known),
        }
    }

    /// A state of a task just learned: its waiting clients get it.
    pub(super) fn wake(&self, key: &Arc<str>, state: &Arc<TaskState>) {
        if let Some(watched) = self.lock().get(key) {
            watched.known.send_modify(|k| k.state = state.clone());
        }
    }

    /// The tasks waited on, by provider and the status this replica knows, their
    /// upstream ids as JSON arrays of at most [`LOOK_BATCH`].
    fn watched(&self) -> Vec<(Arc<str>, TaskStatus, String)> {
        let mut by_status = HashMap::<(Arc<str>, TaskStatus), Vec<Arc<str>>>::new();
        for watched in self.lock().values() {
            let status = watched.known.borrow().state.status;
            by_status
                .entry((watched.provider.clone(), status))
                .or_default()
                .push(watched.upstream_id.clone());
        }
        let mut looks = Vec::new();
        for ((provider, status), ids) in by_status {
            for batch in ids.chunks(LOOK_BATCH) {
                let json = serde_json::to_string(batch).unwrap_or_default();
                looks.push((provider.clone(), status, json));
            }
        }
        looks
    }

    /// Statuses another replica recorded of `provider`'s tasks: their waiting clients
    /// hear of them.
    fn recorded(&self, provider: &str, found: Vec<(String, TaskStatus)>) {
        let tasks = self.lock();
        for (upstream_id, status) in found {
            if let Some(watched) = tasks.get(&*TaskCache::key(provider, &upstream_id)) {
                watched.known.send_if_modified(|k| {
                    let new = k.state.status != status && k.recorded != Some(status);
                    if new {
                        k.recorded = Some(status);
                    }
                    new
                });
            }
        }
    }
}

/// A client's wait on a task; its entry goes with the last client waiting on it,
/// however the wait ends (an answer, a client gone).
struct Waiting<'a> {
    waiters: &'a Waiters,
    key: Arc<str>,
    known: Option<watch::Receiver<Known>>,
}

impl Waiting<'_> {
    fn known(&mut self) -> &mut watch::Receiver<Known> {
        self.known
            .as_mut()
            .expect("a wait holds its receiver until dropped")
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.known = None;
        self.waiters.metrics.waiting.dec();
        let mut tasks = self.waiters.lock();
        if tasks
            .get(&self.key)
            .is_some_and(|w| w.known.receiver_count() == 0)
        {
            tasks.remove(&self.key);
        }
    }
}

/// Why a wait ended.
pub enum Woken {
    /// This replica saw the task's state (changed, or as it is when the wait is over).
    State(Arc<TaskState>),
    /// Another replica recorded a change in the ledger: the state is to be read again.
    Elsewhere,
}

impl TaskService {
    /// Wait until the task's state differs from `seen`, `wait` has passed, or `stop`
    /// resolves (the gateway is stopping).
    pub async fn changed(
        &self,
        task: &TaskId,
        current: Arc<TaskState>,
        seen: TaskStatus,
        wait: Duration,
        stop: impl Future<Output = ()>,
    ) -> Woken {
        if current.status != seen || current.status.is_terminal() || wait.is_zero() {
            return Woken::State(current);
        }
        let mut waiting = self.waiters.watch(task, current);
        let known = waiting.known();
        // Only a later status from the ledger: it may lag behind what this client saw.
        let woken = |k: &Known| {
            k.state.status != seen || k.recorded.is_some_and(|r| stage(r) > stage(seen))
        };
        tokio::select! {
            changed = known.wait_for(woken) => {
                if let Ok(k) = changed {
                    return match k.state.status != seen {
                        true => Woken::State(k.state.clone()),
                        false => Woken::Elsewhere,
                    };
                }
            }
            () = tokio::time::sleep(wait) => {}
            () = stop => {}
        }
        Woken::State(known.borrow().state.clone())
    }

    /// While clients wait on a replica sharing its ledger: every [`LEDGER_LOOK`], what
    /// other replicas recorded of their tasks. Until `stop` resolves; at once without
    /// a shared ledger.
    pub async fn look_for_changes_elsewhere(&self, stop: impl Future<Output = ()>) {
        let Some(ledger) = self.ledger.as_ref().filter(|l| l.shared()) else {
            return;
        };
        let looks = async {
            let mut tick = tokio::time::interval(LEDGER_LOOK);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                for (provider, status, ids) in self.waiters.watched() {
                    self.waiters.metrics.ledger_looks.inc();
                    match ledger.statuses_other_than(&provider, status, &ids).await {
                        Ok(found) => self.waiters.recorded(&provider, found),
                        Err(e) => {
                            self.ledger_errors.inc();
                            tracing::warn!(error = %e, "looking for task changes other replicas recorded failed");
                        }
                    }
                }
            }
        };
        tokio::select! {
            () = looks => {}
            () = stop => {}
        }
    }
}

/// How far along a task is: queued, processing, then finished.
fn stage(status: TaskStatus) -> u8 {
    match status {
        TaskStatus::Queued => 0,
        TaskStatus::Processing => 1,
        TaskStatus::Completed | TaskStatus::Failed => 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::MediaKind;

    fn task(upstream_id: &str) -> TaskId {
        TaskId {
            provider: "p".into(),
            upstream_id: upstream_id.into(),
            model: "m".into(),
            kind: MediaKind::Video,
            owner: "k".into(),
            created: 0,
            openai: false,
        }
    }

    fn state(status: TaskStatus) -> Arc<TaskState> {
        Arc::new(TaskState {
            status,
            progress: None,
            urls: vec![],
            error: None,
        })
    }

    #[test]
    fn a_task_is_kept_while_a_client_waits_on_it_and_no_longer() {
        let metrics = WaiterMetrics::default();
        let waiters = Waiters::new(metrics.clone());
        let first = waiters.watch(&task("a"), state(TaskStatus::Queued));
        let second = waiters.watch(&task("a"), state(TaskStatus::Queued));
        let other = waiters.watch(&task("b"), state(TaskStatus::Processing));
        assert_eq!(metrics.waiting.get(), 3);
        let mut looks = waiters.watched();
        looks.sort_by_key(|(_, status, _)| status.as_str());
        let looks: Vec<_> = looks.iter().map(|(p, s, ids)| (&**p, *s, &**ids)).collect();
        assert_eq!(
            looks,
            [
                ("p", TaskStatus::Processing, r#"["b"]"#),
                ("p", TaskStatus::Queued, r#"["a"]"#)
            ]
        );
        drop(first);
        assert_eq!(waiters.lock().len(), 2, "a client still waits on a");
        drop((second, other));
        // A wait that ended without any change leaves nothing behind.
        assert!(waiters.lock().is_empty());
        assert!(waiters.watched().is_empty(), "nothing to look for");
        assert_eq!(metrics.waiting.get(), 0);
    }

    #[tokio::test]
    async fn a_later_status_recorded_elsewhere_wakes_only_clients_behind_it() {
        let waiters = Waiters::new(WaiterMetrics::default());
        let mut queued = waiters.watch(&task("a"), state(TaskStatus::Queued));
        // The ledger lags behind what this replica saw: no news.
        waiters.recorded("p", vec![("a".into(), TaskStatus::Queued)]);
        assert!(!queued.known().has_changed().unwrap());
        waiters.recorded("p", vec![("a".into(), TaskStatus::Completed)]);
        let known = queued.known().borrow_and_update().clone();
        assert_eq!(known.recorded, Some(TaskStatus::Completed));
        assert_eq!(known.state.status, TaskStatus::Queued);
    }
}
