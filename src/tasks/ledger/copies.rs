//! Copies of completed tasks' results into storage, owed and done. A copy is added
//! by the database itself, in the transaction that records a task's completion when
//! the task keeps its results (a trigger, migrations/*/000?_results.sql), so no
//! completion is recorded without its copy. Replicas lease due copies as they lease
//! webhook deliveries, and write each attempt's outcome back: stored (with a row per
//! result), skipped, failed, or the next try.

use std::time::Duration;

use super::store::{Leased, PerEngine, params};
use super::{Ledger, LedgerError, now_ms};

/// One result kept in storage.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct StoredResult {
    /// The task's ledger row.
    pub task_row: i64,
    /// Its place among the task's results (0 for the first).
    pub n: i64,
    pub object_key: String,
    pub bytes: i64,
    pub content_type: Option<String>,
    /// SHA-256 of the bytes, hex.
    pub sha256: String,
    pub stored_ms: i64,
    pub expires_ms: i64,
    /// When the object was deleted (expired, or its task deleted).
    pub deleted_ms: Option<i64>,
}

/// What became of one attempt at a copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CopyOutcome {
    /// Every result stored (their rows written first).
    Stored,
    /// Not kept, for good: a result larger than the family allows, or gone at the
    /// provider. The task keeps the provider's links.
    Skipped { why: String },
    /// Retried for too long: given up.
    Failed { error: String },
    /// Try again at `next_ms`.
    Retry { error: String, next_ms: i64 },
}

const SKIP_PENDING: &str = "UPDATE copies SET state = 'skipped', last_error = $1, finished_ms = $2, lease_owner = NULL, lease_until_ms = NULL WHERE state = 'pending'";
pub(super) const RELEASE: &str = "UPDATE copies SET lease_owner = NULL, lease_until_ms = NULL WHERE state = 'pending' AND lease_until_ms IS NOT NULL";
const CLAIM_SQLITE: &str = "UPDATE copies SET lease_owner = $1, lease_until_ms = $2 WHERE id IN (SELECT id FROM copies WHERE state = 'pending' AND next_attempt_ms <= $3 AND (lease_until_ms IS NULL OR lease_until_ms < $3) ORDER BY next_attempt_ms LIMIT $4) RETURNING id, task_row, '' AS url, attempts, created_ms, (SELECT owner FROM tasks WHERE tasks.id = copies.task_row) AS owner";
const CLAIM_POSTGRES: &str = "UPDATE copies SET lease_owner = $1, lease_until_ms = $2 WHERE id IN (SELECT id FROM copies WHERE state = 'pending' AND next_attempt_ms <= $3 AND (lease_until_ms IS NULL OR lease_until_ms < $3) ORDER BY next_attempt_ms LIMIT $4 FOR UPDATE SKIP LOCKED) RETURNING id, task_row, '' AS url, attempts, created_ms, (SELECT owner FROM tasks WHERE tasks.id = copies.task_row) AS owner";
const SET_FINISHED: &str = "UPDATE copies SET state = $3, attempts = attempts + 1, last_error = $4, finished_ms = $5, lease_owner = NULL, lease_until_ms = NULL WHERE id = $1 AND lease_owner = $2";
const SET_RETRY: &str = "UPDATE copies SET attempts = attempts + 1, last_error = $3, next_attempt_ms = $4, lease_owner = NULL, lease_until_ms = NULL WHERE id = $1 AND lease_owner = $2";
// A copy redone (a crash after its objects were written) writes its rows again. A
// copy that ends after its task was deleted records its result expired at once: never
// served, and its object deleted by the next housekeeping, as an expired one's is.
const RECORD_RESULT: &str = "INSERT INTO results (task_row, n, object_key, bytes, content_type, sha256, stored_ms, expires_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, CASE WHEN (SELECT deleted_ms FROM tasks WHERE id = $1) IS NULL THEN $7 + $8 ELSE $7 END) ON CONFLICT (task_row, n) DO UPDATE SET object_key = excluded.object_key, bytes = excluded.bytes, content_type = excluded.content_type, sha256 = excluded.sha256, stored_ms = excluded.stored_ms, expires_ms = excluded.expires_ms, deleted_ms = NULL";
const RESULTS_OF: &str = "SELECT task_row, n, object_key, bytes, content_type, sha256, stored_ms, expires_ms, deleted_ms FROM results WHERE task_row = $1 ORDER BY n";
// `tasks_by_upstream` finds the task; a sealed id carries its provider and upstream id.
const RESULTS_OF_UPSTREAM: &str = "SELECT results.task_row, results.n, results.object_key, results.bytes, results.content_type, results.sha256, results.stored_ms, results.expires_ms, results.deleted_ms FROM results JOIN tasks ON tasks.id = results.task_row WHERE tasks.provider = $1 AND tasks.upstream_id = $2 ORDER BY results.n";
// `results_expiring` (a partial index of the rows not deleted yet).
const EXPIRED: &str = "SELECT task_row, n, object_key, bytes, content_type, sha256, stored_ms, expires_ms, deleted_ms FROM results WHERE deleted_ms IS NULL AND expires_ms <= $1 ORDER BY expires_ms LIMIT $2";
const SET_DELETED: &str =
    "UPDATE results SET deleted_ms = $3 WHERE task_row = $1 AND n = $2 AND deleted_ms IS NULL";
const SET_TASK_DELETED: &str = "UPDATE tasks SET deleted_ms = $3 WHERE provider = $1 AND upstream_id = $2 AND deleted_ms IS NULL";
const DELETED: &str = "SELECT COUNT(*) FROM tasks WHERE provider = $1 AND upstream_id = $2 AND deleted_ms IS NOT NULL";
const PENDING: &str = "SELECT COUNT(*) FROM copies WHERE state = 'pending'";

impl Ledger {
    /// On SQLite, a gateway starting without storage: the copies owed from when it
    /// had storage are skipped (their tasks keep their providers' links), since no
    /// one will make them, and a copy owed holds its task's webhook (up to
    /// `webhook_wait_ms`) and its row from retention. The copies skipped. Nothing on
    /// PostgreSQL, where another replica may have storage.
    pub async fn skip_copies_without_storage(&self) -> Result<usize, LedgerError> {
        if self.shared() {
            return Ok(0);
        }
        let why = "storage is off";
        self.store
            .execute(SKIP_PENDING, params![why, now_ms()])
            .await
    }

    /// Lease up to `limit` due copies to `owner` (this replica) for `lease`.
    pub async fn claim_copies(
        &self,
        owner: &str,
        lease: Duration,
        limit: i64,
    ) -> Result<Vec<Leased>, LedgerError> {
        self.refresh_server_clock().await;
        let now = now_ms();
        let until = now + lease.as_millis() as i64;
        let claim = PerEngine {
            sqlite: CLAIM_SQLITE,
            postgres: CLAIM_POSTGRES,
        };
        self.store
            .write_leased(claim, params![owner, until, now, limit])
            .await
    }

    /// Record result `n` of the task in `task_row` as stored, kept `keep_days`.
    pub async fn result_stored(
        &self,
        task_row: i64,
        result: &StoredResult,
    ) -> Result<(), LedgerError> {
        let keep_ms = result.expires_ms - result.stored_ms;
        let args = params![
            task_row,
            result.n,
            result.object_key.as_str(),
            result.bytes,
            result.content_type.as_deref(),
            result.sha256.as_str(),
            result.stored_ms,
            keep_ms,
        ];
        self.store.execute(RECORD_RESULT, args).await?;
        Ok(())
    }

    /// Write down what became of an attempt on a copy `owner` leased; false when
    /// `owner` no longer held it (its lease ran out, another replica took it).
    pub async fn copy_attempted(
        &self,
        id: i64,
        owner: &str,
        outcome: &CopyOutcome,
    ) -> Result<bool, LedgerError> {
        let now = now_ms();
        let none = None::<&str>;
        let (sql, args) = match outcome {
            CopyOutcome::Stored => (SET_FINISHED, params![id, owner, "stored", none, now]),
            CopyOutcome::Skipped { why } => (
                SET_FINISHED,
                params![id, owner, "skipped", why.as_str(), now],
            ),
            CopyOutcome::Failed { error } => (
                SET_FINISHED,
                params![id, owner, "failed", error.as_str(), now],
            ),
            CopyOutcome::Retry { error, next_ms } => {
                (SET_RETRY, params![id, owner, error.as_str(), *next_ms])
            }
        };
        Ok(self.store.execute(sql, args).await? == 1)
    }

    /// The results stored for the task in `task_row`, in order.
    pub async fn results_of(&self, task_row: i64) -> Result<Vec<StoredResult>, LedgerError> {
        self.store
            .reads()
            .results(RESULTS_OF, params![task_row])
            .await
    }

    /// The results stored for the task `upstream_id` of `provider`, in order.
    pub async fn results_of_task(
        &self,
        provider: &str,
        upstream_id: &str,
    ) -> Result<Vec<StoredResult>, LedgerError> {
        self.store
            .reads()
            .results(RESULTS_OF_UPSTREAM, params![provider, upstream_id])
            .await
    }

    /// Up to `limit` stored results whose retention has passed, not deleted yet.
    pub async fn expired_results(&self, limit: i64) -> Result<Vec<StoredResult>, LedgerError> {
        self.store
            .reads()
            .results(EXPIRED, params![now_ms(), limit])
            .await
    }

    /// A stored result's object was deleted; whether this call marked it so.
    pub async fn result_deleted(&self, task_row: i64, n: i64) -> Result<bool, LedgerError> {
        let changed = self
            .store
            .execute(SET_DELETED, params![task_row, n, now_ms()])
            .await?;
        Ok(changed > 0)
    }

    /// The task `upstream_id` of `provider` was deleted by its owner: it leaves
    /// listings (its row stays, for usage).
    pub async fn task_deleted(&self, provider: &str, upstream_id: &str) -> Result<(), LedgerError> {
        self.store
            .execute(SET_TASK_DELETED, params![provider, upstream_id, now_ms()])
            .await?;
        Ok(())
    }

    /// Whether the task `upstream_id` of `provider` was deleted by its owner.
    pub async fn was_deleted(
        &self,
        provider: &str,
        upstream_id: &str,
    ) -> Result<bool, LedgerError> {
        let deleted = self
            .store
            .reads()
            .int(DELETED, params![provider, upstream_id]);
        Ok(deleted.await?.unwrap_or(0) > 0)
    }

    /// How many copies are owed, on every replica.
    pub async fn copies_pending(&self) -> Result<i64, LedgerError> {
        Ok(self
            .store
            .reads()
            .int(PENDING, params![])
            .await?
            .unwrap_or(0))
    }
}
