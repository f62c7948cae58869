//! `GET {collection}/{id}`: open the id (owner checked) → cached or upstream state →
//! (long-poll: wait for a change) → the public task shape.

use std::sync::Arc;

use http::request::Parts;
use http::{Response, StatusCode};

use super::long_poll::{self, Wait, Woken};
use super::public_url::PublicBase;
use super::task_ref::OpenTask;
use crate::api::context::RequestContext;
use crate::api::shapes::TaskView;
use crate::config::Endpoint;
use crate::error::ApiError;
use crate::gateway::Gateway;
use crate::response::{ResponseBody, json};
use crate::tasks::TaskStatus;

pub(super) async fn query(
    gateway: &Gateway,
    ctx: &RequestContext,
    endpoint: Endpoint,
    id: &str,
    req: &Parts,
) -> Result<Response<ResponseBody>, ApiError> {
    let wait = Wait::of(req)?;
    let open = OpenTask::open(ctx, endpoint, id)?;
    let mut state = open.state(gateway, ctx).await?;
    // Without the tracker nobody would wake a waiting client: answer at once.
    let wait = wait.filter(|_| gateway.ledger.is_some() && ctx.snapshot.tracker.enabled);
    if let Some(w) = &wait {
        let seen = w.seen.unwrap_or(state.status);
        state = match long_poll::changed(gateway, &open.task, state, seen, w.wait).await {
            Woken::State(state) => state,
            Woken::Elsewhere => open.state(gateway, ctx).await?,
        };
    }
    // A result only the upstream key can download is served by our content route.
    if state.status == TaskStatus::Completed
        && let Some(configured) = open.provider.content_url_base()
    {
        let url = PublicBase::of(req).content_url(configured, endpoint, id);
        Arc::make_mut(&mut state).urls = vec![url];
    }
    let task = &open.task;
    let mut resp = json(
        StatusCode::OK,
        &TaskView::new(id, task.kind, &task.model, task.created, &state),
    );
    if let Some(w) = wait {
        w.applied(&mut resp);
    }
    Ok(resp)
}
