//! The two writes of a submit without a quota or a budget on PostgreSQL, batched
//! (`postgres_batch.rs`): the write-ahead row, and what the upstream created. Each
//! batch is one statement over arrays, in one transaction.
//!
//! Sent one by one, these two statements were most of a PostgreSQL submit's cost in
//! the gateway (issue #34): two round trips, each a socket write and read and the
//! wake-ups around them, and two commits on the server.

use sqlx::PgPool;

use super::LedgerError;
use super::postgres_batch::{Answers, Batcher};
use super::record::{Created, NewTask};

/// Writes sent together at most.
const MAX_BATCH: usize = 64;

/// Batches in flight at once, per kind of write and serving thread: one sent, the next
/// collecting what waits meanwhile (as SQLite's writer batches).
const BATCHERS: usize = 1;

/// The write-ahead rows of a batch, `record::INSERT_SQLITE`'s for each. The ids are drawn
/// first (a volatile CTE is evaluated once), so that each item's row is found by its
/// id whatever order the insert returns them in; an item without a row found its
/// idempotency key taken (by an earlier row, or by an item before it in the batch), or
/// the budget grant it was admitted against given back or expired (`g`, whose rows
/// the batch holds until it commits, taken in id order as give-backs take them, and
/// before any row goes in (the count, evaluated once first): migration 0016).
/// Rows go in by owner: a priced task's insert adds its estimate to its owner's
/// `spend` row (a trigger), so that batches on other threads or replicas lock those
/// rows in one order and cannot deadlock.
const INSERT_BATCH: &str = "WITH v AS MATERIALIZED (
    SELECT nextval('tasks_id_seq') AS id, u.*
    FROM unnest($1::int4[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
        $7::text[], $8::int8[], $9::int8[], $10::text[], $11::text[], $12::int8[],
        $13::int8[], $14::text[], $15::int8[])
        AS u(n, owner, endpoint, model, kind, fingerprint, idempotency_key,
            video_seconds, now, provider, callback_url, keep_days, cost_estimate,
            price_params, budget_grant)
), g AS MATERIALIZED (
    SELECT id FROM budget_grants
    WHERE id IN (SELECT budget_grant FROM v) AND expires_ms > mediagate_now_ms()
    ORDER BY id FOR KEY SHARE
), inserted AS (
    INSERT INTO tasks (id, owner, endpoint, model, kind, fingerprint, idempotency_key,
        video_seconds, state, provider, created_ms, updated_ms, callback_url, keep_days,
        cost_estimate, price_params, budget_grant)
    SELECT id, owner, endpoint, model, kind, fingerprint, idempotency_key,
        video_seconds, 'submitting', provider, now, now, callback_url, keep_days,
        cost_estimate, price_params, budget_grant
    FROM v WHERE (SELECT count(*) FROM g) >= 0
        AND (budget_grant IS NULL OR budget_grant IN (SELECT id FROM g))
    ORDER BY owner, n
    ON CONFLICT (owner, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id
)
SELECT v.n, inserted.id, v.budget_grant IS NULL OR v.budget_grant IN (SELECT id FROM g)
FROM v LEFT JOIN inserted ON inserted.id = v.id";

/// `record::SET_CREATED` for each item of a batch, row by row (migration 0008: a
/// join's plan, kept by the connection, could scan the whole table for each batch).
const CREATED_BATCH: &str = "SELECT mediagate_created_batch($1::int8[], $2::text[], $3::text[], $4::text[], $5::text[], $6::int8[], $7::text[], $8::int8[], $9::int8[])";

/// A write-ahead row's values, owned to wait in the queue.
pub(super) struct Insert {
    owner: String,
    endpoint: &'static str,
    model: String,
    kind: &'static str,
    fingerprint: String,
    idempotency_key: Option<String>,
    video_seconds: i64,
    now: i64,
    provider: Option<String>,
    callback_url: Option<String>,
    keep_days: Option<i64>,
    cost_estimate: Option<i64>,
    price_params: Option<String>,
    budget_grant: Option<i64>,
}

/// What became of a write-ahead row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Inserted {
    Row(i64),
    /// The owner's idempotency key is held by another row.
    KeyTaken,
    /// The budget grant it was admitted against is given back or expired.
    GrantGone,
}

impl Insert {
    pub(super) fn new(new: &NewTask<'_>, now: i64) -> Self {
        Self {
            owner: new.owner.to_owned(),
            endpoint: new.endpoint_name(),
            model: new.model.to_owned(),
            kind: new.kind.as_str(),
            fingerprint: new.fingerprint.clone(),
            idempotency_key: new.idempotency_key.map(str::to_owned),
            video_seconds: new.video_seconds,
            now,
            provider: new.provider.map(str::to_owned),
            callback_url: new.callback_url.map(str::to_owned),
            keep_days: new.keep_days,
            cost_estimate: new.cost_estimate.map(|c| c.0),
            price_params: new.price_params.clone(),
            budget_grant: None,
        }
    }

    /// The same row, admitted against budget grant `id`.
    pub(super) fn against(self, id: i64) -> Self {
        Self {
            budget_grant: Some(id),
            ..self
        }
    }
}

/// What the upstream created, owned to wait in the queue.
pub(super) struct SetCreated {
    row: i64,
    provider: String,
    upstream_id: String,
    task_id: String,
    status: &'static str,
    answer_status: i64,
    answer_body: String,
    now: i64,
    poll_interval_ms: i64,
}

impl SetCreated {
    pub(super) fn new(row: i64, c: &Created<'_>, now: i64) -> Self {
        Self {
            row,
            provider: c.provider.to_owned(),
            upstream_id: c.upstream_id.to_owned(),
            task_id: c.task_id.to_owned(),
            status: c.status.as_str(),
            answer_status: i64::from(c.answer.status),
            answer_body: c.answer.body.clone(),
            now,
            poll_interval_ms: c.first_poll.as_millis() as i64,
        }
    }
}

/// The batchers of a submit's writes.
pub(super) struct Submits {
    inserts: Batcher<Insert, Inserted>,
    created: Batcher<SetCreated, ()>,
}

impl Submits {
    /// The batchers on `pool` (started on each thread at its first write).
    pub(super) fn new(pool: PgPool) -> Self {
        Self {
            inserts: Batcher::new(
                pool.clone(),
                "insert batcher",
                BATCHERS,
                MAX_BATCH,
                |pool, batch| Box::pin(insert(pool, batch)),
            ),
            created: Batcher::new(
                pool,
                "created batcher",
                BATCHERS,
                MAX_BATCH,
                |pool, batch| Box::pin(created(pool, batch)),
            ),
        }
    }

    /// The write-ahead row, or why there is none.
    pub(super) async fn insert(&self, row: Insert) -> Result<Inserted, LedgerError> {
        self.inserts.call(row).await
    }

    /// Record what the upstream created.
    pub(super) async fn created(&self, c: SetCreated) -> Result<(), LedgerError> {
        self.created.call(c).await
    }
}

async fn insert(pool: PgPool, batch: Vec<Insert>) -> Answers<Inserted> {
    let len = batch.len();
    let mut n = Vec::with_capacity(len);
    let mut owner = Vec::with_capacity(len);
    let mut endpoint = Vec::with_capacity(len);
    let mut model = Vec::with_capacity(len);
    let mut kind = Vec::with_capacity(len);
    let mut fingerprint = Vec::with_capacity(len);
    let mut key = Vec::with_capacity(len);
    let mut video_seconds = Vec::with_capacity(len);
    let mut now = Vec::with_capacity(len);
    let mut provider = Vec::with_capacity(len);
    let mut callback_url = Vec::with_capacity(len);
    let mut keep_days = Vec::with_capacity(len);
    let mut cost_estimate = Vec::with_capacity(len);
    let mut price_params = Vec::with_capacity(len);
    let mut budget_grant = Vec::with_capacity(len);
    for (i, row) in batch.into_iter().enumerate() {
        n.push(i as i32);
        owner.push(row.owner);
        endpoint.push(row.endpoint);
        model.push(row.model);
        kind.push(row.kind);
        fingerprint.push(row.fingerprint);
        key.push(row.idempotency_key);
        video_seconds.push(row.video_seconds);
        now.push(row.now);
        provider.push(row.provider);
        callback_url.push(row.callback_url);
        keep_days.push(row.keep_days);
        cost_estimate.push(row.cost_estimate);
        price_params.push(row.price_params);
        budget_grant.push(row.budget_grant);
    }
    let rows: Vec<(i32, Option<i64>, bool)> = sqlx::query_as(INSERT_BATCH)
        .bind(n)
        .bind(owner)
        .bind(endpoint)
        .bind(model)
        .bind(kind)
        .bind(fingerprint)
        .bind(key)
        .bind(video_seconds)
        .bind(now)
        .bind(provider)
        .bind(callback_url)
        .bind(keep_days)
        .bind(cost_estimate)
        .bind(price_params)
        .bind(budget_grant)
        .fetch_all(&pool)
        .await?;
    let mut answers: Vec<Option<Inserted>> = vec![None; len];
    for (n, id, granted) in rows {
        if let Some(answer) = usize::try_from(n).ok().and_then(|n| answers.get_mut(n)) {
            *answer = Some(match (id, granted) {
                (Some(row), _) => Inserted::Row(row),
                (None, true) => Inserted::KeyTaken,
                (None, false) => Inserted::GrantGone,
            });
        }
    }
    Ok(answers)
}

async fn created(pool: PgPool, batch: Vec<SetCreated>) -> Answers<()> {
    let len = batch.len();
    let mut row = Vec::with_capacity(len);
    let mut provider = Vec::with_capacity(len);
    let mut upstream_id = Vec::with_capacity(len);
    let mut task_id = Vec::with_capacity(len);
    let mut status = Vec::with_capacity(len);
    let mut answer_status = Vec::with_capacity(len);
    let mut answer_body = Vec::with_capacity(len);
    let mut now = Vec::with_capacity(len);
    let mut poll_interval_ms = Vec::with_capacity(len);
    for c in batch {
        row.push(c.row);
        provider.push(c.provider);
        upstream_id.push(c.upstream_id);
        task_id.push(c.task_id);
        status.push(c.status);
        answer_status.push(c.answer_status);
        answer_body.push(c.answer_body);
        now.push(c.now);
        poll_interval_ms.push(c.poll_interval_ms);
    }
    sqlx::query(CREATED_BATCH)
        .bind(row)
        .bind(provider)
        .bind(upstream_id)
        .bind(task_id)
        .bind(status)
        .bind(answer_status)
        .bind(answer_body)
        .bind(now)
        .bind(poll_interval_ms)
        .execute(&pool)
        .await?;
    // A row finished meanwhile (canceled, deleted) is left as it is, as the single
    // statement leaves it.
    Ok(vec![Some(()); len])
}
