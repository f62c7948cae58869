//! Webhook deliveries owed. A row is added by the database itself, in the transaction
//! that records a task's terminal state when the task has a callback URL (a trigger,
//! migrations/*/0003_deliveries.sql), so no outcome is recorded without its delivery.
//! Replicas lease due rows like the tracker leases tasks, and write each attempt's
//! outcome back: delivered, gone (410), expired (retried too long) or the next try.
//! A leased delivery the deliverer cannot start yet (its receiver's or key's share of
//! the attempts is taken, or its receiver is cooling down) is put back, not tried.

use std::time::Duration;

use super::writer::{SqliteValue, bind};
use super::{Db, Ledger, LedgerError, now_ms};

/// A delivery leased to this replica.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Delivery {
    pub id: i64,
    /// The task's ledger row.
    pub task_row: i64,
    pub url: String,
    /// Attempts made so far.
    pub attempts: i64,
    /// When the outcome was recorded (and the delivery first owed).
    pub created_ms: i64,
    /// The key the task belongs to.
    pub owner: String,
}

/// What became of one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeliveryOutcome {
    /// 2xx: done.
    Delivered { status: u16 },
    /// 410: the receiver wants no more.
    Gone,
    /// Retried for too long: given up.
    Expired { status: Option<u16>, error: String },
    /// Try again at `next_ms`.
    Retry {
        status: Option<u16>,
        error: String,
        next_ms: i64,
    },
}

/// What becomes of a leased delivery that is put back without an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutBack {
    /// Due again at `next_ms`; its attempts so far are unchanged.
    Until { next_ms: i64 },
    /// Its time is up before another attempt could start: given up.
    Expired { error: String },
}

/// Deliveries still owed, for the metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, sqlx::FromRow)]
pub struct DeliveryBacklog {
    pub pending: i64,
    pub oldest_ms: Option<i64>,
}

/// Due deliveries no other replica holds, leased to `$1` until `$2`.
const CLAIM_SQLITE: &str = "UPDATE deliveries SET lease_owner = $1, lease_until_ms = $2 WHERE id IN (SELECT id FROM deliveries WHERE state = 'pending' AND next_attempt_ms <= $3 AND (lease_until_ms IS NULL OR lease_until_ms < $3) ORDER BY next_attempt_ms LIMIT $4) RETURNING id, task_row, url, attempts, created_ms, (SELECT owner FROM tasks WHERE tasks.id = deliveries.task_row) AS owner";
const CLAIM_POSTGRES: &str = "UPDATE deliveries SET lease_owner = $1, lease_until_ms = $2 WHERE id IN (SELECT id FROM deliveries WHERE state = 'pending' AND next_attempt_ms <= $3 AND (lease_until_ms IS NULL OR lease_until_ms < $3) ORDER BY next_attempt_ms LIMIT $4 FOR UPDATE SKIP LOCKED) RETURNING id, task_row, url, attempts, created_ms, (SELECT owner FROM tasks WHERE tasks.id = deliveries.task_row) AS owner";
const SET_FINISHED: &str = "UPDATE deliveries SET state = $3, attempts = attempts + 1, last_status = $4, last_error = $5, finished_ms = $6, lease_owner = NULL, lease_until_ms = NULL WHERE id = $1 AND lease_owner = $2";
const SET_RETRY: &str = "UPDATE deliveries SET attempts = attempts + 1, last_status = $3, last_error = $4, next_attempt_ms = $5, lease_owner = NULL, lease_until_ms = NULL WHERE id = $1 AND lease_owner = $2";
// Neither counts an attempt: none was made.
const SET_PUT_BACK: &str = "UPDATE deliveries SET next_attempt_ms = $3, lease_owner = NULL, lease_until_ms = NULL WHERE id = $1 AND lease_owner = $2";
const SET_EXPIRED_UNTRIED: &str = "UPDATE deliveries SET state = 'expired', last_error = $3, finished_ms = $4, lease_owner = NULL, lease_until_ms = NULL WHERE id = $1 AND lease_owner = $2";
const BACKLOG: &str = "SELECT COUNT(*) AS pending, MIN(created_ms) AS oldest_ms FROM deliveries WHERE state = 'pending'";
const OF_TASK: &str =
    "SELECT state, attempts, last_status, last_error FROM deliveries WHERE task_row = $1";

impl Ledger {
    /// Lease up to `limit` due deliveries to `owner` (this replica) for `lease`.
    pub async fn claim_deliveries(
        &self,
        owner: &str,
        lease: Duration,
        limit: i64,
    ) -> Result<Vec<Delivery>, LedgerError> {
        let owner = owner.to_owned();
        let now = now_ms();
        let until = now + lease.as_millis() as i64;
        match &self.db {
            Db::Sqlite { writer, .. } => {
                writer
                    .run_single(move |conn| {
                        let mut stmt = bind(
                            conn,
                            CLAIM_SQLITE,
                            &[owner.value(), until.value(), now.value(), limit.value()],
                        )?;
                        let mut rows = stmt.raw_query();
                        let mut out = Vec::new();
                        while let Some(row) = rows.next()? {
                            out.push(Delivery {
                                id: row.get(0)?,
                                task_row: row.get(1)?,
                                url: row.get(2)?,
                                attempts: row.get(3)?,
                                created_ms: row.get(4)?,
                                owner: row.get(5)?,
                            });
                        }
                        Ok(out)
                    })
                    .await
            }
            Db::Postgres(pool) => Ok(sqlx::query_as(CLAIM_POSTGRES)
                .bind(owner)
                .bind(until)
                .bind(now)
                .bind(limit)
                .fetch_all(pool)
                .await?),
        }
    }

    /// Write down what became of an attempt on a delivery `owner` leased.
    pub async fn delivery_attempted(
        &self,
        id: i64,
        owner: &str,
        outcome: &DeliveryOutcome,
    ) -> Result<(), LedgerError> {
        let now = now_ms();
        let status = |s: &Option<u16>| s.map(i64::from);
        match outcome {
            DeliveryOutcome::Delivered { status } => exec!(
                self,
                SET_FINISHED,
                id,
                owner,
                "delivered",
                Some(i64::from(*status)),
                None::<&str>,
                now
            ),
            DeliveryOutcome::Gone => {
                exec!(
                    self,
                    SET_FINISHED,
                    id,
                    owner,
                    "gone",
                    Some(410_i64),
                    None::<&str>,
                    now
                )
            }
            DeliveryOutcome::Expired { status: s, error } => exec!(
                self,
                SET_FINISHED,
                id,
                owner,
                "expired",
                status(s),
                Some(error.as_str()),
                now
            ),
            DeliveryOutcome::Retry {
                status: s,
                error,
                next_ms,
            } => exec!(
                self,
                SET_RETRY,
                id,
                owner,
                status(s),
                error.as_str(),
                *next_ms
            ),
        }?;
        Ok(())
    }

    /// Give back a delivery `owner` leased but did not try: no attempt is counted.
    pub async fn delivery_put_back(
        &self,
        id: i64,
        owner: &str,
        put_back: &PutBack,
    ) -> Result<(), LedgerError> {
        match put_back {
            PutBack::Until { next_ms } => exec!(self, SET_PUT_BACK, id, owner, *next_ms),
            PutBack::Expired { error } => exec!(
                self,
                SET_EXPIRED_UNTRIED,
                id,
                owner,
                error.as_str(),
                now_ms()
            ),
        }?;
        Ok(())
    }

    /// How many deliveries are owed, and since when the oldest.
    pub async fn delivery_backlog(&self) -> Result<DeliveryBacklog, LedgerError> {
        Ok(on_db!(self, read pool => sqlx::query_as(BACKLOG).fetch_one(pool).await)?)
    }

    /// A task's delivery, for operators: state, attempts, last status and error.
    pub async fn delivery_of(
        &self,
        task_row: i64,
    ) -> Result<Option<(String, i64, Option<i64>, Option<String>)>, LedgerError> {
        Ok(
            on_db!(self, read pool => sqlx::query_as(OF_TASK).bind(task_row).fetch_optional(pool).await)?,
        )
    }
}
