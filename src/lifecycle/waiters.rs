//! Clients waiting for a task to change (long-poll): each state this replica learns of
//! a task wakes them at once; a change another replica recorded in the ledger within
//! [`LEDGER_LOOK`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;

use super::TaskService;
use crate::tasks::{TaskCache, TaskId, TaskState, TaskStatus};

/// How often a waiting client's replica looks at the ledger, where the tracker of
/// another replica records what it learns.
const LEDGER_LOOK: Duration = Duration::from_millis(500);

/// The clients waiting, by the task's cache key: each state seen of the task is sent
/// to them.
#[derive(Default)]
pub(super) struct Waiters(Mutex<HashMap<Arc<str>, watch::Sender<Arc<TaskState>>>>);

impl Waiters {
    /// Follow a task's states from `current` on.
    pub(super) fn watch(
        &self,
        key: Arc<str>,
        current: Arc<TaskState>,
    ) -> watch::Receiver<Arc<TaskState>> {
        let mut waiters = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        waiters
            .entry(key)
            .or_insert_with(|| watch::Sender::new(current))
            .subscribe()
    }

    /// A state of a task just learned: its waiting clients get it.
    pub(super) fn wake(&self, key: &Arc<str>, state: &Arc<TaskState>) {
        let mut waiters = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(watch) = waiters.get(key) {
            if watch.receiver_count() == 0 {
                waiters.remove(key);
            } else {
                watch.send_replace(state.clone());
            }
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
        let key = TaskCache::key(&task.provider, &task.upstream_id);
        let mut states = self.waiters.watch(key, current);
        let recorded_elsewhere = async {
            let Some(ledger) = &self.ledger else {
                return std::future::pending().await;
            };
            loop {
                tokio::time::sleep(LEDGER_LOOK).await;
                let status = ledger.status_of(&task.provider, &task.upstream_id).await;
                // Only a later status: the ledger may lag behind what this client saw.
                if let Ok(Some(status)) = status
                    && stage(status) > stage(seen)
                {
                    return;
                }
            }
        };
        tokio::select! {
            changed = states.wait_for(|s| s.status != seen) => {
                if let Ok(state) = changed {
                    return Woken::State(state.clone());
                }
            }
            () = recorded_elsewhere => return Woken::Elsewhere,
            () = tokio::time::sleep(wait) => {}
            () = stop => {}
        }
        Woken::State(states.borrow().clone())
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
