//! PostgreSQL admissions with a quota or a budget, batched: a few tasks each send the
//! admissions waiting when it is free as one call of `mediagate_admit_batch`
//! (migration 0007), one round trip and one commit for all of them.
//!
//! Why a batch: replicas agree on an owner's count and spend through the owner's lock,
//! held until the commit is flushed, so a key's admissions follow one another at the
//! pace of the disk's flushes. In a batch, they share one.

use serde_json::{Value, json};
use sqlx::PgPool;

use super::LedgerError;
use super::admission::{DAY_MS, Standing};
use super::postgres_batch::{Answers, Batcher};
use super::record::NewTask;
use super::store::Clock;

/// Admissions sent together at most: a batch holds its owners' locks until it commits.
const MAX_BATCH: usize = 64;

/// Batches in flight at once per serving thread: a submit waits for a free batcher,
/// not for another batch's flush, unless all are flushing (then the next batch takes
/// all that waits).
const BATCHERS: usize = 2;

const ADMIT_BATCH: &str = "SELECT n, admitted, seen, used_count, used_secs, day_micros, month_micros FROM mediagate_admit_batch($1::jsonb)";

/// What the server made of one admission.
#[derive(Debug)]
pub(super) enum Counted {
    /// The write-ahead row.
    Inserted(i64),
    /// The owner's key is held by an earlier row: nothing read or inserted.
    KeySeen,
    /// Kept out: what the owner used and spent, for the verdict.
    KeptOut(Standing),
}

/// The handle submits send their admissions through.
pub(super) struct Admissions(Batcher<Value, Counted>);

impl Admissions {
    /// The batchers on `pool` (started on each thread at its first admission).
    pub(super) fn new(pool: PgPool) -> Self {
        Self(Batcher::new(
            pool,
            "admission batcher",
            BATCHERS,
            MAX_BATCH,
            |pool, batch| Box::pin(send(pool, batch)),
        ))
    }

    /// Admit `new` in the next batch.
    pub(super) async fn admit(&self, new: &NewTask<'_>, at: Clock) -> Result<Counted, LedgerError> {
        self.0.call(arguments(new, at)).await
    }
}

/// `mediagate_admit`'s arguments, named as `mediagate_admit_batch` reads them.
fn arguments(new: &NewTask<'_>, at: Clock) -> Value {
    let limit = |l: Option<u64>| l.map(|l| i64::try_from(l).unwrap_or(i64::MAX));
    let quota = new.quota.unwrap_or_default();
    let budget = new.budget.unwrap_or_default();
    json!({
        "owner": new.owner,
        "endpoint": new.endpoint_name(),
        "model": new.model,
        "kind": new.kind.as_str(),
        "fingerprint": new.fingerprint,
        "key": new.idempotency_key,
        "video_seconds": new.video_seconds,
        "now": at.now,
        "provider": new.provider,
        "callback_url": new.callback_url,
        "keep_days": new.keep_days,
        "cost": new.cost_estimate.map(|c| c.0),
        "price_params": new.price_params,
        "day_start": at.day_start,
        "tasks_per_day": limit(quota.tasks_per_day),
        "seconds_per_day": limit(quota.video_seconds_per_day),
        "day": at.day_start / DAY_MS,
        "month_day": at.month_start / DAY_MS,
        "budget_day": budget.per_day.map(|m| m.0),
        "budget_month": budget.per_month.map(|m| m.0),
    })
}

/// One row of `mediagate_admit_batch`.
type Row = (
    i32,
    Option<i64>,
    bool,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
);

/// One batch: its admissions in one call, each answer at its position `n`.
async fn send(pool: PgPool, mut batch: Vec<Value>) -> Answers<Counted> {
    let len = batch.len();
    for (n, element) in batch.iter_mut().enumerate() {
        element["n"] = n.into();
    }
    let rows: Vec<Row> = sqlx::query_as(ADMIT_BATCH)
        .bind(Value::Array(batch).to_string())
        .fetch_all(&pool)
        .await?;
    let mut answers: Vec<Option<Counted>> = (0..len).map(|_| None).collect();
    for (n, row, seen, tasks, seconds, day, month) in rows {
        let counted = match (row, seen) {
            (Some(row), _) => Counted::Inserted(row),
            (None, true) => Counted::KeySeen,
            (None, false) => Counted::KeptOut(Standing {
                used: tasks.zip(seconds),
                spent: day.zip(month),
            }),
        };
        if let Some(answer) = usize::try_from(n).ok().and_then(|n| answers.get_mut(n)) {
            *answer = Some(counted);
        }
    }
    Ok(answers)
}
