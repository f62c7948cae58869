//! Deleting a task, for its owner. An unfinished task is first stopped at its
//! provider (the provider's cancel step; without one it cannot be deleted yet: 409
//! `not_cancelable`; a provider that answers it will not: the same 409) and ends `failed` with code `canceled`, recorded and announced
//! like any end. Then it leaves listings and its stored results are removed; its
//! ledger row stays, for usage. Deleting a deleted task does the same again, which
//! changes nothing: a second DELETE answers as the first did.

use std::sync::Arc;

use super::{TaskRef, TaskService};
use crate::error::ApiError;
use crate::providers::Canceled;
use crate::snapshot::Snapshot;
use crate::tasks::{TaskCache, TaskError, TaskState, TaskStatus};

impl TaskService {
    /// Delete `task` (its owner was checked by the caller).
    pub async fn delete(&self, snapshot: &Snapshot, task: TaskRef<'_>) -> Result<(), ApiError> {
        let mut looked = self.lookup(snapshot, task).await?;
        if !looked.state.status.is_terminal() && looked.upstream_time.is_none() {
            // A cancel is decided on what the provider says now, not on a state
            // cached up to a poll interval ago: a task that completed since is not
            // cancelled (a provider may accept that) and settled at nothing.
            self.cache
                .forget(&TaskCache::key(task.provider, task.upstream_id))
                .await;
            looked = self.lookup(snapshot, task).await?;
        }
        if !looked.state.status.is_terminal() {
            self.cancel(snapshot, task).await?;
        }
        let Some(ledger) = &self.ledger else {
            return Ok(());
        };
        let unavailable = |e| self.ledger_unavailable("a task's deletion", &e);
        // Marked deleted first: a copy that records a result after this reads the
        // mark, and its result is expired at once rather than kept.
        ledger
            .task_deleted(task.provider, task.upstream_id)
            .await
            .map_err(unavailable)?;
        if let Some(storage) = &self.storage {
            let stored = ledger
                .results_of_task(task.provider, task.upstream_id)
                .await
                .map_err(unavailable)?;
            for result in stored.iter().filter(|r| r.deleted_ms.is_none()) {
                storage.delete(&result.object_key).await.map_err(|e| {
                    tracing::warn!(error = %e, "storage: a deleted task's result cannot be removed");
                    ApiError::storage_unavailable()
                })?;
                ledger
                    .result_deleted(result.task_row, result.n)
                    .await
                    .map_err(unavailable)?;
            }
        }
        Ok(())
    }

    /// Stop an unfinished task at its provider: it ends `failed`, code `canceled`.
    async fn cancel(&self, snapshot: &Snapshot, task: TaskRef<'_>) -> Result<(), ApiError> {
        let provider = snapshot
            .providers
            .get(task.provider)
            .ok_or_else(|| ApiError::no_provider("the task's provider is no longer configured"))?;
        if !provider.can_cancel() {
            return Err(ApiError::not_cancelable());
        }
        let answer = provider
            .cancel(task.call(snapshot), task.upstream_id)
            .await?;
        if answer == Canceled::Refused {
            return Err(ApiError::not_canceled());
        }
        let canceled = TaskState {
            status: TaskStatus::Failed,
            progress: None,
            urls: Vec::new(),
            error: Some(TaskError {
                code: "canceled".into(),
                message: "the task was cancelled by its owner".into(),
            }),
        };
        let key = TaskCache::key(task.provider, task.upstream_id);
        let ended = self.finished(snapshot, task, &key, &canceled, None).await;
        let state = ended.earlier.unwrap_or(canceled);
        let state: Arc<TaskState> = self.cache.put(key.clone(), state, ended.recorded).await;
        self.waiters.wake(&key, &state);
        Ok(())
    }
}
