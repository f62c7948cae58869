//! A task id in a query or content path: opened for its owner, with the provider
//! sealed in it, and its state from the results cache or the provider.

use std::sync::{Arc, OnceLock};

use crate::api::context::RequestContext;
use crate::config::Endpoint;
use crate::error::ApiError;
use crate::gateway::Gateway;
use crate::providers::{Call, Provider};
use crate::tasks::{TaskCache, TaskId, TaskState};

/// A task id opened for its owner, with the provider sealed in it.
pub(super) struct OpenTask<'s> {
    pub task: TaskId,
    pub provider: &'s Arc<Provider>,
    /// `None` when the model is no longer configured: its own id is used.
    upstream_model: Option<&'s str>,
}

impl<'s> OpenTask<'s> {
    /// Open the id, check the owner and the endpoint, find the provider sealed in it.
    /// Made-up, tampered, other keys' and other endpoints' ids all look the same (404).
    pub fn open(ctx: &'s RequestContext, endpoint: Endpoint, id: &str) -> Result<Self, ApiError> {
        let (snapshot, key) = (&ctx.snapshot, ctx.key()?);
        let task = snapshot
            .sealer
            .open(id)
            .filter(|t| *t.owner == *key.name)
            .filter(|t| {
                snapshot
                    .models
                    .get(&t.model)
                    .is_none_or(|m| m.served_on(endpoint))
            })
            .ok_or_else(ApiError::task_not_found)?;
        ctx.note(|f| {
            f.model = Some(task.model.clone());
            f.provider = Some(task.provider.clone());
        });
        let provider = snapshot.providers.get(&task.provider).ok_or_else(|| {
            tracing::warn!(provider = %task.provider, "task of a provider that is no longer configured");
            ApiError::no_provider("the task's provider is no longer configured")
        })?;
        let upstream_model = snapshot
            .models
            .get(&task.model)
            .map(|m| m.upstream_model.as_str());
        Ok(Self {
            task,
            provider,
            upstream_model,
        })
    }

    pub fn call(&self) -> Call<'_> {
        Call {
            model: &self.task.model,
            upstream_model: self.upstream_model.unwrap_or(&self.task.model),
            kind: self.task.kind,
        }
    }

    /// The task's state: from the cache, or queried from its provider (concurrent
    /// queries of one task share one upstream call).
    pub async fn state(
        &self,
        gateway: &Gateway,
        ctx: &RequestContext,
    ) -> Result<Arc<TaskState>, ApiError> {
        let task = &self.task;
        let upstream_time = OnceLock::new();
        let key = self.cache_key();
        let state = gateway
            .cache
            .get_or_fetch(key.clone(), || async {
                let (state, took) = self.provider.query(self.call(), &task.upstream_id).await?;
                let _ = upstream_time.set(took);
                if state.status.is_terminal() {
                    gateway
                        .record_finished(&task.provider, &task.upstream_id, &state)
                        .await;
                }
                Ok(state)
            })
            .await?;
        if let Some(took) = upstream_time.get() {
            ctx.note(|f| f.upstream = Some(*took));
            gateway.observe(&key, &state);
        }
        Ok(state)
    }

    /// The task's key in the results cache (and among long-polls).
    pub fn cache_key(&self) -> Arc<str> {
        TaskCache::key(&self.task.provider, &self.task.upstream_id)
    }
}
