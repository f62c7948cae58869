//! PostgreSQL admissions with a quota or a budget, batched: a few tasks each send the
//! admissions waiting when it is free as one call of `mediagate_admit_batch`
//! (migration 0007), one round trip and one commit for all of them.
//!
//! Why a batch: replicas agree on an owner's count and spend through the owner's lock,
//! held until the commit is flushed, so a key's admissions follow one another at the
//! pace of the disk's flushes. In a batch, they share one.

use std::sync::Arc;

use serde_json::{Value, json};
use sqlx::PgPool;
use tokio::sync::{Mutex, mpsc, oneshot};

use super::LedgerError;
use super::admission::{DAY_MS, Standing};
use super::record::NewTask;
use super::store::Clock;

/// Admissions sent together at most: a batch holds its owners' locks until it commits.
const MAX_BATCH: usize = 64;

/// Admissions waiting for a batcher; a submit beyond waits for room.
const QUEUE: usize = 4096;

/// Batches in flight at once: a submit waits for a free batcher, not for another
/// batch's flush, unless all are flushing (then the next batch takes all that waits).
const BATCHERS: usize = 4;

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

type Reply = oneshot::Sender<Result<Counted, LedgerError>>;

/// The handle submits send their admissions through.
pub(super) struct Admissions {
    queue: mpsc::Sender<(Value, Reply)>,
}

impl Admissions {
    /// Start the batchers on `pool` (in the current runtime).
    pub(super) fn start(pool: PgPool) -> Self {
        let (queue, waiting) = mpsc::channel(QUEUE);
        let waiting = Arc::new(Mutex::new(waiting));
        for _ in 0..BATCHERS {
            tokio::spawn(batch(pool.clone(), waiting.clone()));
        }
        Self { queue }
    }

    /// Admit `new` in the next batch.
    pub(super) async fn admit(&self, new: &NewTask<'_>, at: Clock) -> Result<Counted, LedgerError> {
        let (reply, answer) = oneshot::channel();
        let stopped = || LedgerError::Unavailable("the ledger's admission batcher stopped".into());
        self.queue
            .send((arguments(new, at), reply))
            .await
            .map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
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

type Waiting = Arc<Mutex<mpsc::Receiver<(Value, Reply)>>>;

/// Send what waits, a batch at a time, until every handle is gone.
async fn batch(pool: PgPool, waiting: Waiting) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    // The queue is held only while taking from it, not while the batch is sent.
    while waiting.lock().await.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let (mut elements, replies): (Vec<Value>, Vec<Reply>) = batch.drain(..).unzip();
        for (n, element) in elements.iter_mut().enumerate() {
            element["n"] = n.into();
        }
        let rows: Result<Vec<Row>, _> = sqlx::query_as(ADMIT_BATCH)
            .bind(Value::Array(elements).to_string())
            .fetch_all(&pool)
            .await;
        let mut replies: Vec<Option<Reply>> = replies.into_iter().map(Some).collect();
        match rows {
            Ok(rows) => {
                for (n, row, seen, tasks, seconds, day, month) in rows {
                    let counted = match (row, seen) {
                        (Some(row), _) => Counted::Inserted(row),
                        (None, true) => Counted::KeySeen,
                        (None, false) => Counted::KeptOut(Standing {
                            used: tasks.zip(seconds),
                            spent: day.zip(month),
                        }),
                    };
                    if let Some(reply) = usize::try_from(n).ok().and_then(|n| replies.get_mut(n))
                        && let Some(reply) = reply.take()
                    {
                        // A submit that went away no longer waits for its answer.
                        let _ = reply.send(Ok(counted));
                    }
                }
                // An admission the server did not answer for is not taken for one.
                for reply in replies.into_iter().flatten() {
                    let _ = reply.send(Err(LedgerError::Unavailable(
                        "mediagate_admit_batch left an admission unanswered".into(),
                    )));
                }
            }
            Err(e) => {
                let message = e.to_string();
                for reply in replies.into_iter().flatten() {
                    let _ = reply.send(Err(LedgerError::Unavailable(message.clone())));
                }
            }
        }
    }
}
