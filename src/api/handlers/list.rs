//! `GET {collection}?limit=&after=`: the calling key's own tasks of that endpoint,
//! newest first, from the ledger, in the same shape as a query. Unfinished tasks show
//! the last state the gateway saw (the results cache, else the submit's answer); the
//! listing itself never calls a provider.

use std::sync::Arc;

use http::request::Parts;
use http::{Response, StatusCode};

use super::public_url::PublicBase;
use crate::api::context::RequestContext;
use crate::api::shapes::{TaskList, TaskView, VideoList};
use crate::config::Endpoint;
use crate::error::ApiError;
use crate::gateway::Gateway;
use crate::lifecycle::links;
use crate::response::{ResponseBody, json};
use crate::tasks::Cost;
use crate::tasks::ledger::{Cursor, Ledger, TaskRecord};
use crate::tasks::openai::{Video, VideoAsked, VideoTimes};
use crate::tasks::{MediaKind, TaskState, recorded_state};

const DEFAULT_LIMIT: u32 = 20;
const MAX_LIMIT: u32 = 100;
/// Reads of the ledger for one page at most, when rows it cannot show are passed over
/// and some could be shown (a page with none goes on reading: it would have no
/// `last_id` to go on from).
const FILL_ROUNDS: u32 = 10;

pub(super) async fn list(
    gateway: &Gateway,
    ctx: &RequestContext,
    endpoint: Endpoint,
    req: &Parts,
) -> Result<Response<ResponseBody>, ApiError> {
    let key = ctx.key()?;
    let Some(ledger) = gateway.tasks.ledger() else {
        return Err(ApiError::ledger_off());
    };
    let (limit, after, ascending) = paging(req.uri.query(), endpoint == Endpoint::OpenAiVideos)?;
    let unknown_cursor = || {
        let msg = "`after` must be the id of one of your tasks (the `last_id` of a page)";
        ApiError::invalid_parameter("after", msg.into())
    };
    // The ledger finds the cursor's row by the provider and upstream id it seals.
    let opened = match &after {
        None => None,
        Some(id) => Some((id, ctx.snapshot.sealer.open(id).ok_or_else(unknown_cursor)?)),
    };
    let cursor = opened.as_ref().map(|(id, task)| Cursor {
        task_id: id,
        provider: &task.provider,
        upstream_id: &task.upstream_id,
    });
    let listing = Listing {
        gateway,
        ledger,
        ctx,
        req,
        endpoint,
        limit,
        ascending,
    };
    let (items, has_more) = listing.items(&key.name, cursor).await?;
    let first_id = items.first().map(|i| i.id.as_str());
    let last_id = items.last().map(|i| i.id.as_str());
    if endpoint == Endpoint::OpenAiVideos {
        let data = items.iter().map(Item::video).collect();
        let list = VideoList {
            object: "list",
            data,
            first_id,
            last_id,
            has_more,
        };
        return Ok(json(StatusCode::OK, &list));
    }
    let currency = key
        .show_cost
        .then_some(ctx.snapshot.billing.currency.as_str());
    let data: Vec<TaskView<'_>> = items.iter().map(|i| i.view(currency)).collect();
    let list = TaskList {
        object: "list",
        first_id,
        last_id,
        data,
        has_more,
    };
    Ok(json(StatusCode::OK, &list))
}

/// What a page of a listing is read for.
struct Listing<'a> {
    gateway: &'a Gateway,
    ledger: &'a Ledger,
    ctx: &'a RequestContext,
    req: &'a Parts,
    endpoint: Endpoint,
    limit: u32,
    ascending: bool,
}

impl Listing<'_> {
    /// Up to `limit` items of `owner`'s after `cursor`, and whether more follow. A row
    /// the listing cannot show (its id sealed with a secret no longer configured) is
    /// passed over and more rows are read in its place (`MAX_LIMIT` at a time, for
    /// `FILL_ROUNDS` reads at most once one item is found), so that a page is short
    /// only at the end, and its `last_id` (a shown item's) leads on to the next.
    async fn items(
        &self,
        owner: &str,
        mut cursor: Option<Cursor<'_>>,
    ) -> Result<(Vec<Item>, bool), ApiError> {
        let mut items = Vec::new();
        let mut after: (String, String, String);
        let mut round = 0;
        loop {
            round += 1;
            let wanted = if round == 1 { self.limit } else { MAX_LIMIT };
            let page = self
                .ledger
                .list_in(owner, self.endpoint, cursor, wanted, self.ascending)
                .await
                .map_err(|e| self.gateway.ledger_failed("a listing", &e))?;
            if !page.cursor_known && round > 1 {
                // The row read last is gone meanwhile (retention): this page ends here.
                return Ok((items, true));
            }
            if !page.cursor_known {
                let msg = "`after` must be the id of one of your tasks (the `last_id` of a page)";
                return Err(ApiError::invalid_parameter("after", msg.into()));
            }
            for row in &page.rows {
                let item = Item::of(self.gateway, self.ctx, row, self.endpoint, self.req).await;
                items.extend(item);
            }
            if items.len() > self.limit as usize {
                items.truncate(self.limit as usize);
                return Ok((items, true));
            }
            let last = page.rows.last();
            let next = last.and_then(|r| {
                Some((
                    r.task_id.clone()?,
                    r.provider.clone()?,
                    r.upstream_id.clone()?,
                ))
            });
            match next {
                Some(next)
                    if page.has_more
                        && items.len() < self.limit as usize
                        && (items.is_empty() || round < FILL_ROUNDS) =>
                {
                    after = next;
                    cursor = Some(Cursor {
                        task_id: &after.0,
                        provider: &after.1,
                        upstream_id: &after.2,
                    });
                }
                _ => return Ok((items, page.has_more)),
            }
        }
    }
}

/// `limit` (1–100, default 20) and `after` from the query string; with `order`,
/// also `order` (`asc` or `desc`, the default): whether oldest first.
fn paging(query: Option<&str>, order: bool) -> Result<(u32, Option<String>, bool), ApiError> {
    let (mut limit, mut after, mut ascending) = (DEFAULT_LIMIT, None, false);
    for (k, v) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        match &*k {
            "order" if order => {
                ascending = match &*v {
                    "asc" => true,
                    "desc" => false,
                    _ => {
                        let msg = "`order` must be asc or desc".to_string();
                        return Err(ApiError::invalid_parameter("order", msg));
                    }
                };
            }
            "limit" => {
                limit = super::digits(&v)
                    .filter(|n| (1..=MAX_LIMIT).contains(n))
                    .ok_or_else(|| {
                        let msg = format!("`limit` must be an integer from 1 to {MAX_LIMIT}");
                        ApiError::invalid_parameter("limit", msg)
                    })?;
            }
            "after" if !v.is_empty() => after = Some(v.into_owned()),
            _ => {}
        }
    }
    Ok((limit, after, ascending))
}

/// One listed task, owned, so that views can borrow it.
struct Item {
    id: String,
    kind: MediaKind,
    model: String,
    created: u64,
    state: Arc<TaskState>,
    cost: (Option<i64>, Option<i64>),
    /// A video of `/v1/videos`: what was asked, when it ended.
    video: (VideoAsked, VideoTimes),
}

impl Item {
    async fn of(
        gateway: &Gateway,
        ctx: &RequestContext,
        row: &TaskRecord,
        endpoint: Endpoint,
        req: &Parts,
    ) -> Option<Self> {
        let id = row.task_id.clone()?;
        // The sealed id says when the task was created, exactly as a query answers.
        let task = ctx.snapshot.sealer.open(&id)?;
        let mut state = match recorded_state(row) {
            Some(state) if state.status.is_terminal() => Arc::new(state),
            recorded => {
                let cached = gateway.tasks.cached(&task.provider, &task.upstream_id);
                match cached.await {
                    Some(cached) => cached,
                    None => Arc::new(recorded?),
                }
            }
        };
        let provider = ctx.snapshot.providers.get(&task.provider).map(|p| &**p);
        let client_base = || PublicBase::of(req).as_seen_by_client();
        let snapshot = &ctx.snapshot;
        links::make_public(
            snapshot,
            &mut state,
            provider,
            &task.model,
            endpoint,
            &id,
            client_base,
        );
        let video = match endpoint {
            Endpoint::OpenAiVideos => super::openai::recorded(snapshot, &task.model, Some(row)),
            _ => Default::default(),
        };
        Some(Self {
            video,
            id,
            kind: task.kind,
            model: task.model,
            created: task.created,
            state,
            cost: (row.cost_estimate, row.cost_settled),
        })
    }

    /// The listed video of `/v1/videos`.
    fn video(&self) -> Video<'_> {
        let (asked, times) = &self.video;
        Video::new(
            &self.id,
            &self.model,
            self.created,
            &self.state,
            asked,
            *times,
        )
    }

    /// The listed task; with its cost in `currency` when the key shows it.
    fn view<'a>(&'a self, currency: Option<&'a str>) -> TaskView<'a> {
        let cost = currency.and_then(|c| Cost::of(c, self.cost.0, self.cost.1));
        TaskView::new(&self.id, self.kind, &self.model, self.created, &self.state).with_cost(cost)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paging_defaults_and_bounds() {
        assert_eq!(paging(None, false).unwrap(), (20, None, false));
        assert_eq!(
            paging(Some("limit=100&after=task_x&order=asc"), false).unwrap(),
            (100, Some("task_x".into()), false)
        );
        assert_eq!(paging(Some("order=asc"), true).unwrap(), (20, None, true));
        for bad in ["limit=0", "limit=101", "limit=x", "limit=-1"] {
            assert_eq!(
                paging(Some(bad), true).unwrap_err().param.as_deref(),
                Some("limit"),
                "{bad}"
            );
        }
        let e = paging(Some("order=up"), true).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("order"));
    }
}
