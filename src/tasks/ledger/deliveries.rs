//! Webhook deliveries owed. A row is added by the database itself, in the transaction
//! that records a task's terminal state when the task has a callback URL (a trigger,
//! migrations/*/0003_deliveries.sql), so no outcome is recorded without its delivery.
//! Replicas lease due rows like the tracker leases tasks, and write each attempt's
//! outcome back: delivered, gone (410), expired (retried too long) or the next try.
//! A leased delivery the deliverer cannot start yet (its receiver's or key's share of
//! the attempts is taken, or its receiver is cooling down) is put back, not tried.

use std::time::Duration;

use super::store::{Leased, PerEngine, params};
use super::{Ledger, LedgerError, now_ms};

/// A delivery leased to this replica: `url` is the callback URL.
pub type Delivery = Leased;

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

/// A delivery's standing, for operators: state, attempts, last status and error.
pub(super) type DeliveryOf = (String, i64, Option<i64>, Option<String>);

/// Deliveries still owed, for the metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, sqlx::FromRow)]
pub struct DeliveryBacklog {
    pub pending: i64,
    pub oldest_ms: Option<i64>,
}

/// Due deliveries no other replica holds, leased to `$1` until `$2`; a delivery
/// made after `$5` waits while its task's results are being copied.
pub(super) const RELEASE: &str = "UPDATE deliveries SET lease_owner = NULL, lease_until_ms = NULL WHERE state = 'pending' AND lease_until_ms IS NOT NULL";
const CLAIM_SQLITE: &str = "UPDATE deliveries SET lease_owner = $1, lease_until_ms = $2 WHERE id IN (SELECT id FROM deliveries WHERE state = 'pending' AND next_attempt_ms <= $3 AND (lease_until_ms IS NULL OR lease_until_ms < $3) AND (created_ms <= $5 OR NOT EXISTS (SELECT 1 FROM copies WHERE copies.task_row = deliveries.task_row AND copies.state = 'pending')) ORDER BY next_attempt_ms LIMIT $4) RETURNING id, task_row, url, attempts, created_ms, (SELECT owner FROM tasks WHERE tasks.id = deliveries.task_row) AS owner";
const CLAIM_POSTGRES: &str = "UPDATE deliveries SET lease_owner = $1, lease_until_ms = $2 WHERE id IN (SELECT id FROM deliveries WHERE state = 'pending' AND next_attempt_ms <= $3 AND (lease_until_ms IS NULL OR lease_until_ms < $3) AND (created_ms <= $5 OR NOT EXISTS (SELECT 1 FROM copies WHERE copies.task_row = deliveries.task_row AND copies.state = 'pending')) ORDER BY next_attempt_ms LIMIT $4 FOR UPDATE SKIP LOCKED) RETURNING id, task_row, url, attempts, created_ms, (SELECT owner FROM tasks WHERE tasks.id = deliveries.task_row) AS owner";
const SET_FINISHED: &str = "UPDATE deliveries SET state = $3, attempts = attempts + 1, last_status = $4, last_error = $5, finished_ms = $6, lease_owner = NULL, lease_until_ms = NULL WHERE id = $1 AND lease_owner = $2";
const SET_RETRY: &str = "UPDATE deliveries SET attempts = attempts + 1, last_status = $3, last_error = $4, next_attempt_ms = $5, lease_owner = NULL, lease_until_ms = NULL WHERE id = $1 AND lease_owner = $2";
// Neither counts an attempt: none was made.
const SET_PUT_BACK: &str = "UPDATE deliveries SET next_attempt_ms = $3, lease_owner = NULL, lease_until_ms = NULL WHERE id = $1 AND lease_owner = $2";
const SET_EXPIRED_UNTRIED: &str = "UPDATE deliveries SET state = 'expired', last_error = $3, finished_ms = $4, lease_owner = NULL, lease_until_ms = NULL WHERE id = $1 AND lease_owner = $2";
const BACKLOG: &str = "SELECT COUNT(*) AS pending, MIN(created_ms) AS oldest_ms FROM deliveries WHERE state = 'pending'";
const OF_TASK: &str =
    "SELECT state, attempts, last_status, last_error FROM deliveries WHERE task_row = $1";

impl Ledger {
    /// Lease up to `limit` due deliveries to `owner` (this replica) for `lease`;
    /// one whose task's copy is still owed waits up to `copy_wait` after it was made.
    pub async fn claim_deliveries(
        &self,
        owner: &str,
        lease: Duration,
        limit: i64,
        copy_wait: Duration,
    ) -> Result<Vec<Delivery>, LedgerError> {
        self.refresh_server_clock().await;
        let now = now_ms();
        let until = now + lease.as_millis() as i64;
        let waited_since = now.saturating_sub(copy_wait.as_millis() as i64);
        let claim = PerEngine {
            sqlite: CLAIM_SQLITE,
            postgres: CLAIM_POSTGRES,
        };
        let args = params![owner, until, now, limit, waited_since];
        self.store.write_leased(claim, args).await
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
        let none = None::<&str>;
        let (sql, args) = match outcome {
            DeliveryOutcome::Delivered { status } => (
                SET_FINISHED,
                params![id, owner, "delivered", i64::from(*status), none, now],
            ),
            DeliveryOutcome::Gone => (SET_FINISHED, params![id, owner, "gone", 410, none, now]),
            DeliveryOutcome::Expired { status: s, error } => (
                SET_FINISHED,
                params![id, owner, "expired", status(s), error.as_str(), now],
            ),
            DeliveryOutcome::Retry {
                status: s,
                error,
                next_ms,
            } => (
                SET_RETRY,
                params![id, owner, status(s), error.as_str(), *next_ms],
            ),
        };
        self.store.execute(sql, args).await?;
        Ok(())
    }

    /// Give back a delivery `owner` leased but did not try: no attempt is counted.
    pub async fn delivery_put_back(
        &self,
        id: i64,
        owner: &str,
        put_back: &PutBack,
    ) -> Result<(), LedgerError> {
        let (sql, args) = match put_back {
            PutBack::Until { next_ms } => (SET_PUT_BACK, params![id, owner, *next_ms]),
            PutBack::Expired { error } => (
                SET_EXPIRED_UNTRIED,
                params![id, owner, error.as_str(), now_ms()],
            ),
        };
        self.store.execute(sql, args).await?;
        Ok(())
    }

    /// How many deliveries are owed, and since when the oldest.
    pub async fn delivery_backlog(&self) -> Result<DeliveryBacklog, LedgerError> {
        self.store.reads().backlog(BACKLOG).await
    }

    /// A task's delivery, for operators: state, attempts, last status and error.
    pub async fn delivery_of(&self, task_row: i64) -> Result<Option<DeliveryOf>, LedgerError> {
        self.store
            .reads()
            .delivery(OF_TASK, params![task_row])
            .await
    }
}
