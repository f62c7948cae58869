//! A task id in a query or content path: opened for its owner, with the provider
//! sealed in it, and its state from the task service.

use std::sync::Arc;

use crate::api::context::RequestContext;
use crate::config::Endpoint;
use crate::error::ApiError;
use crate::gateway::Gateway;
use crate::providers::Provider;
use crate::tasks::{TaskId, TaskState};

/// A task id opened for its owner, with the provider sealed in it.
pub(super) struct OpenTask<'s> {
    pub task: TaskId,
    pub provider: &'s Arc<Provider>,
}

impl<'s> OpenTask<'s> {
    /// Open the id, check the owner and the endpoint, find the provider sealed in it.
    /// Made-up, tampered, other keys' and other endpoints' ids all look the same (404).
    pub fn open(ctx: &'s RequestContext, endpoint: Endpoint, id: &str) -> Result<Self, ApiError> {
        let key = ctx.key()?;
        let task = ctx
            .snapshot
            .sealer
            .open(id)
            .filter(|t| *t.owner == *key.name);
        Self::served(ctx, endpoint, task)
    }

    /// Open the id of a signed link to result `n` (`?expires=…&signature=…`): the
    /// signature stands in for the owner's key. A signature that does not hold is
    /// refused before its expiry is looked at.
    pub fn open_signed(
        ctx: &'s RequestContext,
        endpoint: Endpoint,
        id: &str,
        n: usize,
        query: Option<&str>,
    ) -> Result<Self, ApiError> {
        let (mut expires, mut signature) = (None, None);
        for (name, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
            match &*name {
                "expires" => expires = value.parse::<u64>().ok(),
                "signature" => signature = Some(value.into_owned()),
                _ => {}
            }
        }
        let (Some(expires), Some(signature)) = (expires, signature) else {
            return Err(ApiError::invalid_signature());
        };
        if !ctx.snapshot.sealer.link_signed(id, n, expires, &signature) {
            return Err(ApiError::invalid_signature());
        }
        let now = crate::tasks::ledger::now_ms().max(0) as u64 / 1000;
        if expires < now {
            return Err(ApiError::link_expired());
        }
        Self::served(ctx, endpoint, ctx.snapshot.sealer.open(id))
    }

    /// The opened task, if its model is served on `endpoint`, with its provider.
    fn served(
        ctx: &'s RequestContext,
        endpoint: Endpoint,
        task: Option<TaskId>,
    ) -> Result<Self, ApiError> {
        let snapshot = &ctx.snapshot;
        // An id of `/v1/videos` opens only there, any other only elsewhere, though
        // its model may be served on both.
        let task = task
            .filter(|t| t.openai == (endpoint == Endpoint::OpenAiVideos))
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
        Ok(Self { task, provider })
    }

    /// The task's state, through the task service; the upstream time goes to the
    /// access log.
    pub async fn state(
        &self,
        gateway: &Gateway,
        ctx: &RequestContext,
    ) -> Result<Arc<TaskState>, ApiError> {
        let found = gateway
            .tasks
            .lookup(&ctx.snapshot, (&self.task).into())
            .await?;
        if let Some(took) = found.upstream_time {
            ctx.note(|f| f.upstream = Some(took));
        }
        Ok(found.state)
    }
}
