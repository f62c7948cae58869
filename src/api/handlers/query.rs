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
use crate::tasks::Cost;

pub(super) async fn query(
    gateway: &Gateway,
    ctx: &RequestContext,
    endpoint: Endpoint,
    id: &str,
    req: Parts,
) -> Result<Response<ResponseBody>, ApiError> {
    let wait = Wait::of(&req)?;
    let open = OpenTask::open(ctx, endpoint, id)?;
    let mut state = open.state(gateway, ctx).await?;
    // Without the tracker nobody would wake a waiting client: answer at once.
    let wait = wait.filter(|_| gateway.tasks.ledger().is_some() && ctx.snapshot.tracker.enabled);
    let mut head = Some(req);
    let mut base_seen = None;
    if let Some(w) = &wait {
        // What the answer needs of the request is taken now and the request let go:
        // its headers share the 8 KiB buffer hyper read them into, which would
        // otherwise stay with each waiting client for as long as it waits.
        base_seen = head
            .take()
            .map(|req| PublicBase::of(&req).as_seen_by_client());
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
    let client_base = || match (base_seen, &head) {
        (Some(base), _) => base,
        (None, Some(req)) => PublicBase::of(req).as_seen_by_client(),
        (None, None) => None,
    };
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
    let cost = cost(gateway, ctx, &open).await?;
    let currency = ctx.snapshot.billing.currency.as_str();
    let cost = cost.and_then(|(estimate, settled)| Cost::of(currency, estimate, settled));
    let view = TaskView::new(id, task.kind, &task.model, task.created, &state).with_cost(cost);
    let mut resp = json(StatusCode::OK, &view);
    if let Some(w) = wait {
        w.applied(&mut resp);
    }
    Ok(resp)
}

/// The task's estimate and settled cost, read from the ledger for a key that shows
/// costs; `None` for the others (no read).
async fn cost(
    gateway: &Gateway,
    ctx: &RequestContext,
    open: &OpenTask<'_>,
) -> Result<Option<(Option<i64>, Option<i64>)>, ApiError> {
    let (true, Some(ledger)) = (ctx.key()?.show_cost, gateway.tasks.ledger()) else {
        return Ok(None);
    };
    let task = &open.task;
    let priced = ledger
        .priced(&task.provider, &task.upstream_id, false, false)
        .await
        .map_err(|e| gateway.ledger_failed("a task's cost", &e))?;
    Ok(priced.map(|p| (p.cost_estimate, p.cost_settled)))
}
