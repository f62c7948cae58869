//! The ledger on PostgreSQL, shared by replicas: every statement through one sqlx
//! pool; an admission with a quota or a budget is one call of `mediagate_admit`
//! (migration 0007), serialised per owner on the server.

use std::time::Duration;

use sqlx::postgres::{PgConnection, PgPoolOptions};

use super::admission::{self, AdmissionTx, DAY_MS, Standing};
use super::postgres_reads::{PostgresReads, arguments};
use super::reads::Reader;
use super::record::{self, NewTask, RawTaskRecord, TaskRecord};
use super::store::{Clock, Leased, Param, PerEngine, Store, StoreFuture};
use super::{Admission, LedgerError};

static MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("migrations/postgres");

/// Replicas agree on a key's daily count and spend: the function takes the owner's
/// lock, reads them and inserts the row only when it fits, in one round trip.
const ADMIT_COUNTED: &str = "SELECT row_id, key_seen, used_tasks, used_seconds, spent_day, spent_month FROM mediagate_admit($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20)";

/// What `mediagate_admit` answers.
type Counted = (
    Option<i64>,
    bool,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
);

pub(super) struct PostgresStore {
    /// The pool, every statement goes through; its reads are the engines' shared ones.
    reads: PostgresReads,
}

impl PostgresStore {
    /// Connect and bring the schema up to date.
    pub(super) async fn open(url: &str, max_connections: u32) -> Result<Self, String> {
        let pool = PgPoolOptions::new()
            .max_connections(max_connections.max(1))
            // A ping per acquire is a round trip per statement; a broken connection
            // shows in the statement's own error instead.
            .test_before_acquire(false)
            .acquire_timeout(Duration::from_secs(5))
            .connect(url)
            .await
            .map_err(|e| format!("cannot connect to PostgreSQL: {e}"))?;
        MIGRATIONS
            .run(&pool)
            .await
            .map_err(|e| format!("cannot migrate the ledger: {e}"))?;
        Ok(Self {
            reads: PostgresReads(pool),
        })
    }

    async fn admit_once(
        &self,
        new: &NewTask<'_>,
        at: Clock,
    ) -> Result<Option<Admission>, LedgerError> {
        let mut conn = self.reads.0.acquire().await?;
        if !new.counted() {
            // No count to agree on: the insert takes the key or finds it taken.
            return admission::insert(&mut ConnTx(&mut conn), new, at.now).await;
        }
        let limit = |l: Option<u64>| l.map(|l| i64::try_from(l).unwrap_or(i64::MAX));
        let quota = new.quota.unwrap_or_default();
        let budget = new.budget.unwrap_or_default();
        let (row, key_seen, tasks, seconds, spent_day, spent_month): Counted =
            sqlx::query_as(ADMIT_COUNTED)
                .bind(new.owner)
                .bind(new.endpoint_name())
                .bind(new.model)
                .bind(new.kind.as_str())
                .bind(&new.fingerprint)
                .bind(new.idempotency_key)
                .bind(new.video_seconds)
                .bind(at.now)
                .bind(new.provider)
                .bind(new.callback_url)
                .bind(new.keep_days)
                .bind(new.cost_estimate.map(|c| c.0))
                .bind(new.price_params.as_deref())
                .bind(at.day_start)
                .bind(limit(quota.tasks_per_day))
                .bind(limit(quota.video_seconds_per_day))
                .bind(at.day_start / DAY_MS)
                .bind(at.month_start / DAY_MS)
                .bind(budget.per_day.map(|m| m.0))
                .bind(budget.per_month.map(|m| m.0))
                .fetch_one(&mut *conn)
                .await?;
        if let Some(row) = row {
            return Ok(Some(Admission::Fresh(row)));
        }
        if key_seen {
            return admission::seen(&mut ConnTx(&mut conn), new).await;
        }
        let standing = Standing {
            used: new.quota.and(tasks.zip(seconds)),
            spent: new.budget.and(spent_day.zip(spent_month)),
        };
        match admission::refusal(new, at, standing) {
            Some(refused) => Ok(Some(refused)),
            // The server kept the row out on figures this build admits on: the two
            // comparisons disagree (a schema from another version), which no retry
            // mends.
            None => Err(LedgerError::Unavailable(format!(
                "mediagate_admit kept out a submit its figures admit ({standing:?})"
            ))),
        }
    }
}

impl Store for PostgresStore {
    fn engine(&self) -> &'static str {
        "postgres"
    }

    fn admit<'a>(&'a self, new: &'a NewTask<'a>, at: Clock) -> StoreFuture<'a, Option<Admission>> {
        Box::pin(self.admit_once(new, at))
    }

    fn execute<'a>(&'a self, sql: &'static str, args: Vec<Param<'a>>) -> StoreFuture<'a, usize> {
        Box::pin(async move {
            let done = sqlx::query_with(sql, arguments(&args)?)
                .execute(&self.reads.0)
                .await?;
            Ok(done.rows_affected() as usize)
        })
    }

    fn write_tasks<'a>(
        &'a self,
        sql: PerEngine,
        args: Vec<Param<'a>>,
    ) -> StoreFuture<'a, Vec<TaskRecord>> {
        self.reads.tasks(sql.postgres, args)
    }

    fn write_leased<'a>(
        &'a self,
        sql: PerEngine,
        args: Vec<Param<'a>>,
    ) -> StoreFuture<'a, Vec<Leased>> {
        Box::pin(async move {
            Ok(sqlx::query_as_with(sql.postgres, arguments(&args)?)
                .fetch_all(&self.reads.0)
                .await?)
        })
    }

    fn reads(&self) -> &dyn Reader {
        &self.reads
    }
}

/// One connection, in a transaction or not, as admission uses it.
struct ConnTx<'c>(&'c mut PgConnection);

impl AdmissionTx for ConnTx<'_> {
    async fn seen(&mut self, owner: &str, key: &str) -> Result<Option<TaskRecord>, LedgerError> {
        let row: Option<RawTaskRecord> = sqlx::query_as(record::SELECT_BY_IDEMPOTENCY)
            .bind(owner)
            .bind(key)
            .fetch_optional(&mut *self.0)
            .await?;
        row.map(RawTaskRecord::decode).transpose()
    }

    async fn insert(&mut self, new: &NewTask<'_>, now: i64) -> Result<Option<i64>, LedgerError> {
        Ok(sqlx::query_scalar(record::INSERT)
            .bind(new.owner)
            .bind(new.endpoint_name())
            .bind(new.model)
            .bind(new.kind.as_str())
            .bind(&new.fingerprint)
            .bind(new.idempotency_key)
            .bind(new.video_seconds)
            .bind(now)
            .bind(new.provider)
            .bind(new.callback_url)
            .bind(new.keep_days)
            .bind(new.cost_estimate.map(|c| c.0))
            .bind(new.price_params.as_deref())
            .fetch_optional(&mut *self.0)
            .await?)
    }
}
