//! `GET {collection}/{id}`: open the id (owner checked) → cached or upstream state →
//! (long-poll: wait for a change) → the public task shape.

use http::request::Parts;
use http::{Response, StatusCode};

use super::long_poll::Wait;
use super::public_url::PublicBase;
use super::task_ref::OpenTask;
use crate::api::context::RequestContext;
use crate::api::shapes::TaskView;
use crate::config::Endpoint;
use crate::error::ApiError;
use crate::gateway::Gateway;
use crate::lifecycle::{Woken, links};
use crate::response::{ResponseBody, json};

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
    let wait = wait.filter(|_| gateway.tasks.ledger().is_some() && ctx.snapshot.tracker.enabled);
    if let Some(w) = &wait {
        let seen = w.seen.unwrap_or(state.status);
        let tasks = &gateway.tasks;
        state = match tasks
            .changed(&open.task, state, seen, w.wait, gateway.stopped())
            .await
        {
            Woken::State(state) => state,
            Woken::Elsewhere => open.state(gateway, ctx).await?,
        };
    }
    let client_base = || PublicBase::of(req).as_seen_by_client();
    let task = &open.task;
    let snapshot = &ctx.snapshot;
    let provider = Some(&**open.provider);
    links::make_public(
        snapshot,
        &mut state,
        provider,
        &task.model,
        endpoint,
        id,
        client_base,
    );
    let mut resp = json(
        StatusCode::OK,
        &TaskView::new(id, task.kind, &task.model, task.created, &state),
    );
    if let Some(w) = wait {
        w.applied(&mut resp);
    }
    Ok(resp)
}
