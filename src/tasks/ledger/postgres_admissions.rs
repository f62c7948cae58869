//! PostgreSQL admissions with a quota or a budget, batched: a few tasks each send the
//! admissions waiting when it is free as one call of `mediagate_admit_arrays`
//! (migrations 0007 and 0011), one round trip and one commit for all of them, each
//! admission's values bound as arrays as the plain submit's rows are.
//!
//! Why a batch: replicas agree on an owner's count and spend through the owner's lock,
//! held until the commit is flushed, so a key's admissions follow one another at the
//! pace of the disk's flushes. In a batch, they share one.

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

const ADMIT_BATCH: &str = "SELECT n, admitted, seen, used_count, used_secs, day_micros, month_micros FROM mediagate_admit_arrays($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::int8[], $8::int8[], $9::text[], $10::text[], $11::int8[], $12::int8[], $13::text[], $14::int8[], $15::int8[], $16::int8[], $17::int8[], $18::int8[], $19::int8[], $20::int8[])";

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
pub(super) struct Admissions(Batcher<Admit, Counted>);

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
        self.0.call(Admit::new(new, at)).await
    }
}

/// One admission's values (`mediagate_admit`'s arguments), owned to wait in the queue.
pub(super) struct Admit {
    owner: String,
    endpoint: &'static str,
    model: String,
    kind: &'static str,
    fingerprint: String,
    key: Option<String>,
    video_seconds: i64,
    now: i64,
    provider: Option<String>,
    callback_url: Option<String>,
    keep_days: Option<i64>,
    cost: Option<i64>,
    price_params: Option<String>,
    day_start: i64,
    tasks_per_day: Option<i64>,
    seconds_per_day: Option<i64>,
    day: i64,
    month_day: i64,
    budget_day: Option<i64>,
    budget_month: Option<i64>,
}

impl Admit {
    fn new(new: &NewTask<'_>, at: Clock) -> Self {
        let limit = |l: Option<u64>| l.map(|l| i64::try_from(l).unwrap_or(i64::MAX));
        let quota = new.quota.unwrap_or_default();
        let budget = new.budget.unwrap_or_default();
        Self {
            owner: new.owner.to_owned(),
            endpoint: new.endpoint_name(),
            model: new.model.to_owned(),
            kind: new.kind.as_str(),
            fingerprint: new.fingerprint.clone(),
            key: new.idempotency_key.map(str::to_owned),
            video_seconds: new.video_seconds,
            now: at.now,
            provider: new.provider.map(str::to_owned),
            callback_url: new.callback_url.map(str::to_owned),
            keep_days: new.keep_days,
            cost: new.cost_estimate.map(|c| c.0),
            price_params: new.price_params.clone(),
            day_start: at.day_start,
            tasks_per_day: limit(quota.tasks_per_day),
            seconds_per_day: limit(quota.video_seconds_per_day),
            day: at.day_start / DAY_MS,
            month_day: at.month_start / DAY_MS,
            budget_day: budget.per_day.map(|m| m.0),
            budget_month: budget.per_month.map(|m| m.0),
        }
    }
}

/// One row of `mediagate_admit_arrays`.
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
async fn send(pool: PgPool, batch: Vec<Admit>) -> Answers<Counted> {
    let len = batch.len();
    // One array per argument, in the function's order.
    macro_rules! columns {
        ($($field:ident),*) => {{
            $(let mut $field = Vec::with_capacity(len);)*
            for a in batch {
                $($field.push(a.$field);)*
            }
            sqlx::query_as(ADMIT_BATCH)$(.bind($field))*
        }};
    }
    let query = columns!(
        owner,
        endpoint,
        model,
        kind,
        fingerprint,
        key,
        video_seconds,
        now,
        provider,
        callback_url,
        keep_days,
        cost,
        price_params,
        day_start,
        tasks_per_day,
        seconds_per_day,
        day,
        month_day,
        budget_day,
        budget_month
    );
    let rows: Vec<Row> = query.fetch_all(&pool).await?;
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
