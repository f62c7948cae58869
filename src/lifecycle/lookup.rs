//! A task's state: the results cache, else its provider; a finished task recorded
//! and announced once, and its waiting clients woken.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::TaskService;
use crate::error::ApiError;
use crate::providers::{Call, UpstreamError};
use crate::snapshot::Snapshot;
use crate::tasks::ledger::StoredResult;
use crate::tasks::{MediaKind, TaskCache, TaskId, TaskState, recorded_state};

/// What a lookup needs of a task: where it lives upstream, and the model and kind its
/// provider's programs see.
#[derive(Debug, Clone, Copy)]
pub struct TaskRef<'a> {
    pub provider: &'a str,
    pub upstream_id: &'a str,
    pub model: &'a str,
    pub kind: MediaKind,
}

impl<'a> From<&'a TaskId> for TaskRef<'a> {
    fn from(task: &'a TaskId) -> Self {
        Self {
            provider: &task.provider,
            upstream_id: &task.upstream_id,
            model: &task.model,
            kind: task.kind,
        }
    }
}

impl<'a> TaskRef<'a> {
    /// The task as its provider's programs see it. A model no longer configured is
    /// asked about by its own id.
    pub fn call<'s>(&self, snapshot: &'s Snapshot) -> Call<'s>
    where
        'a: 's,
    {
        let upstream_model = snapshot
            .models
            .get(self.model)
            .map_or(self.model, |m| m.upstream_model.as_str());
        Call {
            model: self.model,
            upstream_model,
            kind: self.kind,
        }
    }
}

/// A task's state, and how long its provider took when it was asked.
#[derive(Debug)]
pub struct Lookup {
    pub state: Arc<TaskState>,
    /// `None` when the state came from the results cache.
    pub upstream_time: Option<Duration>,
    /// For a finished state, whether the ledger has its end (its write may have
    /// failed); true for an unfinished one.
    pub recorded: bool,
}

impl TaskService {
    /// The task's state: from the cache, or asked of its provider (concurrent lookups
    /// of one task share one upstream call). A state learned from the provider wakes
    /// the task's waiting clients; a terminal one is recorded and announced first.
    pub async fn lookup(&self, snapshot: &Snapshot, task: TaskRef<'_>) -> Result<Lookup, ApiError> {
        let provider = snapshot.providers.get(task.provider).ok_or_else(|| {
            tracing::warn!(provider = %task.provider, "task of a provider that is no longer configured");
            ApiError::no_provider("the task's provider is no longer configured")
        })?;
        let call = task.call(snapshot);
        let key = TaskCache::key(task.provider, task.upstream_id);
        let upstream_time = OnceLock::new();
        let (state, recorded) = self
            .cache
            .get_or_fetch(key.clone(), || async {
                let queried = match provider.query(call, task.upstream_id).await {
                    // The provider forgot the task (providers keep them for a while
                    // only): the end the ledger recorded is still the task's answer.
                    Err(UpstreamError::TaskGone) => {
                        return match self.recorded_end(task).await {
                            Some(state) => Ok((state, true)),
                            None => Err(UpstreamError::TaskGone),
                        };
                    }
                    queried => queried?,
                };
                let _ = upstream_time.set(queried.took);
                let mut state = queried.state;
                let mut recorded = true;
                if state.status.is_terminal() {
                    let answer = queried.answer.as_ref();
                    let ended = self.finished(snapshot, task, &key, &state, answer).await;
                    recorded = ended.recorded;
                    state = ended.earlier.unwrap_or(state);
                }
                Ok::<_, UpstreamError>((state, recorded))
            })
            .await?;
        let upstream_time = upstream_time.get().copied();
        if upstream_time.is_some() {
            self.waiters.wake(&key, &state);
        }
        Ok(Lookup {
            state,
            upstream_time,
            recorded,
        })
    }

    /// The tracker's look at a task: the results cache, when a client asked within
    /// the poll cache interval, else its provider, as [`TaskService::lookup`] does;
    /// but an unfinished answer is not kept in the cache (a client asking next asks
    /// the provider). At 100,000 tasks the tracker's answers made and expired 20,000
    /// cache entries a second, whose upkeep (the cache rebuilding its table) cost an
    /// eighth of the gateway's CPU, for the rare client query that would have found
    /// one. A finished answer is recorded, announced and kept, as a lookup's is.
    pub async fn poll(&self, snapshot: &Snapshot, task: TaskRef<'_>) -> Result<Lookup, ApiError> {
        let key = TaskCache::key(task.provider, task.upstream_id);
        // A finished state the ledger lacks is not peeked: asked again, and its end
        // written again.
        if let Some(state) = self.cache.peek(&key).await {
            return Ok(Lookup {
                state,
                upstream_time: None,
                recorded: true,
            });
        }
        let provider = snapshot
            .providers
            .get(task.provider)
            .ok_or_else(|| ApiError::no_provider("the task's provider is no longer configured"))?;
        let queried = provider
            .query(task.call(snapshot), task.upstream_id)
            .await?;
        let (state, recorded) = if queried.state.status.is_terminal() {
            let answer = queried.answer.as_ref();
            let ended = self
                .finished(snapshot, task, &key, &queried.state, answer)
                .await;
            let state = ended.earlier.unwrap_or(queried.state);
            let state = self.cache.put(key.clone(), state, ended.recorded).await;
            (state, ended.recorded)
        } else {
            (Arc::new(queried.state.compact()), true)
        };
        self.waiters.wake(&key, &state);
        Ok(Lookup {
            state,
            upstream_time: Some(queried.took),
            recorded,
        })
    }

    /// The results of `task` kept in storage, in order; none when storage is off or
    /// nothing was stored (yet).
    pub async fn stored_results(&self, task: TaskRef<'_>) -> Result<Vec<StoredResult>, ApiError> {
        let (Some(ledger), Some(_)) = (&self.ledger, &self.storage) else {
            return Ok(Vec::new());
        };
        ledger
            .results_of_task(task.provider, task.upstream_id)
            .await
            .map_err(|e| self.ledger_unavailable("the stored results of a task", &e))
    }

    /// Whether `task` was deleted by its owner (never, without a ledger: nothing was
    /// kept to delete).
    pub async fn was_deleted(&self, task: TaskRef<'_>) -> Result<bool, ApiError> {
        let Some(ledger) = &self.ledger else {
            return Ok(false);
        };
        ledger
            .was_deleted(task.provider, task.upstream_id)
            .await
            .map_err(|e| self.ledger_unavailable("whether a task was deleted", &e))
    }

    /// The end the ledger recorded for `task`, if it has one.
    pub(super) async fn recorded_end(&self, task: TaskRef<'_>) -> Option<TaskState> {
        let ledger = self.ledger.as_ref()?;
        let row = match ledger.by_upstream(task.provider, task.upstream_id).await {
            Ok(row) => row?,
            Err(e) => {
                self.ledger_errors.inc();
                tracing::warn!(error = %e, "ledger read failed; the task's end is not known");
                return None;
            }
        };
        row.finished_ms?;
        recorded_state(&row).filter(|state| state.status.is_terminal())
    }

    /// The state the results cache holds of a task, without asking anybody.
    pub async fn cached(&self, provider: &str, upstream_id: &str) -> Option<Arc<TaskState>> {
        self.cache
            .peek(&TaskCache::key(provider, upstream_id))
            .await
    }
}
