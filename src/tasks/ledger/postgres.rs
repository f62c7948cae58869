//! The ledger on PostgreSQL, shared by replicas: every statement through one sqlx
//! pool; a submit's writes are batched (`postgres_submits.rs`), and admissions with a
//! quota or a budget too (`postgres_admissions.rs`), serialised per owner on the
//! server, but for a busy key's admissions against a budget granted ahead
//! (`postgres_grants.rs`).

use std::time::Duration;

use sqlx::postgres::{PgConnection, PgPoolOptions};

use super::admission::{self, KeyLookup};
use super::postgres_admissions::{Admissions, Counted};
use super::postgres_grants::Grants;
use super::postgres_reads::{PostgresReads, arguments};
use super::postgres_submits::{Insert, Inserted, SetCreated, Submits};
use super::reads::Reader;
use super::record::{self, Created, NewTask, RawTaskRecord, TaskRecord};
use super::store::{Clock, Leased, Param, PerEngine, Store, StoreFuture};
use super::{Admission, LedgerError};

static MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("migrations/postgres");

pub(super) struct PostgresStore {
    /// The pool, every statement goes through; its reads are the engines' shared ones.
    reads: PostgresReads,
    /// Admissions with a quota or a budget.
    counted: Admissions,
    /// The writes of the other submits.
    submits: Submits,
    /// What this replica holds ahead of busy keys' budgets.
    grants: Grants,
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
            counted: Admissions::new(pool.clone()),
            submits: Submits::new(pool.clone()),
            grants: Grants::new(pool.clone()),
            reads: PostgresReads(pool),
        })
    }

    async fn admit_once(
        &self,
        new: &NewTask<'_>,
        at: Clock,
    ) -> Result<Option<Admission>, LedgerError> {
        if !new.counted() {
            // No count to agree on: the insert takes the key or finds it taken.
            return match self.submits.insert(Insert::new(new, at.now)).await? {
                Inserted::Row(row) => Ok(Some(Admission::Fresh(row))),
                _ => self.seen(new).await,
            };
        }
        if let Some(grant) = self.grants.draw(new, at) {
            // The estimate is covered by what this replica holds of the budget.
            let row = Insert::new(new, at.now).against(grant);
            match self.submits.insert(row).await? {
                Inserted::Row(row) => return Ok(Some(Admission::Fresh(row))),
                Inserted::KeyTaken => {
                    let cost = new.cost_estimate.map_or(0, |c| c.0);
                    self.grants.undraw(new.owner, grant, cost);
                    return self.seen(new).await;
                }
                // Given back or expired meanwhile: admitted under the lock instead.
                Inserted::GrantGone => self.grants.gone(new.owner, grant),
            }
        }
        let mut counted = self.counted.admit(new, at).await?;
        if matches!(counted, Counted::KeptOut(_)) && self.grants.give_back(new.owner).await {
            // What this replica held ahead of the budget may be what the submit needs.
            counted = self.counted.admit(new, at).await?;
        }
        match counted {
            Counted::Inserted(row) => Ok(Some(Admission::Fresh(row))),
            Counted::KeySeen => self.seen(new).await,
            Counted::KeptOut(standing) => match admission::refusal(new, at, standing) {
                Some(refused) => Ok(Some(refused)),
                // The server kept the row out on figures this build admits on: the
                // two comparisons disagree (a schema of another version), which no
                // retry mends.
                None => Err(LedgerError::Unavailable(format!(
                    "mediagate_admit kept out a submit its figures admit ({standing:?})"
                ))),
            },
        }
    }
}

impl PostgresStore {
    /// What the row holding `new`'s idempotency key, taken at its insert, means.
    async fn seen(&self, new: &NewTask<'_>) -> Result<Option<Admission>, LedgerError> {
        let mut conn = self.reads.0.acquire().await?;
        admission::seen(&mut ConnTx(&mut conn), new).await
    }
}

impl Store for PostgresStore {
    fn engine(&self) -> &'static str {
        "postgres"
    }

    fn admit<'a>(&'a self, new: &'a NewTask<'a>, at: Clock) -> StoreFuture<'a, Option<Admission>> {
        Box::pin(self.admit_once(new, at))
    }

    fn created<'a>(&'a self, row: i64, c: &'a Created<'a>, now: i64) -> StoreFuture<'a, ()> {
        let c = SetCreated::new(row, c, now);
        Box::pin(self.submits.created(c))
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

    fn give_back_held(&self) -> StoreFuture<'_, ()> {
        Box::pin(self.grants.give_back_all())
    }

    fn give_back_expired(&self) -> StoreFuture<'_, ()> {
        Box::pin(self.grants.give_back_expired())
    }
}

/// One connection, to look up the row holding a key.
struct ConnTx<'c>(&'c mut PgConnection);

impl KeyLookup for ConnTx<'_> {
    async fn seen(&mut self, owner: &str, key: &str) -> Result<Option<TaskRecord>, LedgerError> {
        let row: Option<RawTaskRecord> = sqlx::query_as(record::SELECT_BY_IDEMPOTENCY)
            .bind(owner)
            .bind(key)
            .fetch_optional(&mut *self.0)
            .await?;
        row.map(RawTaskRecord::decode).transpose()
    }
}
