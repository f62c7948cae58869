//! The ledger on SQLite, with rusqlite: every write goes to the writer thread
//! (`writer.rs`), which commits them in groups; reads go to reading threads beside
//! it (`sqlite_reads.rs`; WAL lets them read while it writes).

use std::path::Path;

use futures_util::FutureExt;

use super::admission::{self, AdmissionTx, CountingTx, KeyLookup};
use super::reads::Reader;
use super::record::{self, NewTask, RawTaskRecord, TaskRecord, UsageRow};
use super::sqlite_reads::SqliteReads;
use super::sqlite_schema;
use super::sqlite_usage::ClosedDays;
use super::store::{Clock, Leased, Param, PerEngine, Store, StoreFuture};
use super::writer::{Writer, bind, owned, query_rows};
use super::{Admission, LedgerError};
use crate::config::{Endpoint, QuotaConfig};
use crate::money::{Budget, Micros};
use crate::tasks::MediaKind;

/// SQLite writes one transaction at a time: every write goes to one writer thread
/// that commits them in groups; readers run beside it (WAL).
pub(super) struct SqliteStore {
    /// Shared with the background work that sums usage (`sqlite_usage.rs`).
    writer: std::sync::Arc<Writer>,
    /// Reading threads beside the writer (WAL lets them read while it writes).
    reads: SqliteReads,
    /// Sums of the days that are over, for a key's usage.
    closed_days: ClosedDays,
}

impl SqliteStore {
    /// Open `path` (creating it and its directory when needed), migrate it, and start
    /// the writer.
    pub(super) async fn open(path: &Path, max_connections: u32) -> Result<Self, String> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        let mut migrating = rusqlite::Connection::open(path)
            .and_then(|c| c.execute_batch("PRAGMA journal_mode = WAL;").map(|()| c))
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        sqlite_schema::migrate(&mut migrating)
            .map_err(|e| format!("cannot migrate the ledger in {}: {e}", path.display()))?;
        drop(migrating);
        let writer = std::sync::Arc::new(Writer::open(path)?);
        let reads = SqliteReads::open(path, max_connections)?;
        Ok(Self {
            writer,
            reads,
            closed_days: ClosedDays::default(),
        })
    }

    /// One writing statement on the writer, its rows read by `row`.
    fn write_rows<'a, T: Send + 'static>(
        &'a self,
        sql: &'static str,
        args: &[Param<'_>],
        row: fn(&rusqlite::Row<'_>) -> Result<T, LedgerError>,
    ) -> StoreFuture<'a, Vec<T>> {
        let args = owned(args);
        Box::pin(
            self.writer
                .run_single(move |conn| query_rows(conn, sql, &args, row)),
        )
    }
}

pub(super) fn task_row(row: &rusqlite::Row<'_>) -> Result<TaskRecord, LedgerError> {
    RawTaskRecord::from_sqlite(row)?.decode()
}

fn leased_row(row: &rusqlite::Row<'_>) -> Result<Leased, LedgerError> {
    Ok(Leased {
        id: row.get(0)?,
        task_row: row.get(1)?,
        url: row.get(2)?,
        attempts: row.get(3)?,
        created_ms: row.get(4)?,
        owner: row.get(5)?,
    })
}

impl Store for SqliteStore {
    fn engine(&self) -> &'static str {
        "sqlite"
    }

    fn admit<'a>(&'a self, new: &'a NewTask<'a>, at: Clock) -> StoreFuture<'a, Option<Admission>> {
        let new = OwnedTask::from(new);
        // Reads, and one insert.
        Box::pin(self.writer.run_single(move |conn| new.admit(conn, at)))
    }

    fn execute<'a>(&'a self, sql: &'static str, args: Vec<Param<'a>>) -> StoreFuture<'a, usize> {
        let args = owned(&args);
        Box::pin(
            self.writer
                .run_single(move |conn| Ok(bind(conn, sql, &args)?.raw_execute()?)),
        )
    }

    fn execute_when_idle<'a>(
        &'a self,
        sql: PerEngine,
        args: Vec<Param<'a>>,
    ) -> StoreFuture<'a, usize> {
        let args = owned(&args);
        let sql = sql.sqlite;
        Box::pin(
            self.writer
                .run_when_idle(move |conn| Ok(bind(conn, sql, &args)?.raw_execute()?)),
        )
    }

    fn write_tasks<'a>(
        &'a self,
        sql: PerEngine,
        args: Vec<Param<'a>>,
    ) -> StoreFuture<'a, Vec<TaskRecord>> {
        self.write_rows(sql.sqlite, &args, task_row)
    }

    fn write_leased<'a>(
        &'a self,
        sql: PerEngine,
        args: Vec<Param<'a>>,
    ) -> StoreFuture<'a, Vec<Leased>> {
        self.write_rows(sql.sqlite, &args, leased_row)
    }

    #[cfg(test)]
    fn sqlite_writer(&self) -> Option<&Writer> {
        Some(&*self.writer)
    }

    fn reads(&self) -> &dyn Reader {
        &self.reads
    }

    fn usage_of<'a>(
        &'a self,
        owner: &'a str,
        since_ms: i64,
        until_ms: i64,
    ) -> StoreFuture<'a, Vec<UsageRow>> {
        let range = (since_ms, until_ms);
        let now = super::now_ms();
        self.closed_days
            .usage_of(&self.reads, &self.writer, owner, range, now)
    }
}

/// A [`NewTask`] owned, to cross to the SQLite writer thread.
struct OwnedTask {
    owner: String,
    endpoint: Endpoint,
    model: String,
    kind: MediaKind,
    fingerprint: String,
    idempotency_key: Option<String>,
    video_seconds: i64,
    quota: Option<QuotaConfig>,
    provider: Option<String>,
    callback_url: Option<String>,
    keep_days: Option<i64>,
    cost_estimate: Option<Micros>,
    budget: Option<Budget>,
    price_params: Option<String>,
}

impl From<&NewTask<'_>> for OwnedTask {
    fn from(new: &NewTask<'_>) -> Self {
        Self {
            owner: new.owner.to_owned(),
            endpoint: new.endpoint,
            model: new.model.to_owned(),
            kind: new.kind,
            fingerprint: new.fingerprint.clone(),
            idempotency_key: new.idempotency_key.map(str::to_owned),
            video_seconds: new.video_seconds,
            quota: new.quota,
            provider: new.provider.map(str::to_owned),
            callback_url: new.callback_url.map(str::to_owned),
            keep_days: new.keep_days,
            cost_estimate: new.cost_estimate,
            budget: new.budget,
            price_params: new.price_params.clone(),
        }
    }
}

impl OwnedTask {
    /// The admission on the writer thread, inside its transaction. [`WriterTx`]'s
    /// methods never wait (their statements run on this thread as they are
    /// polled), so the shared decision completes in its first poll.
    fn admit(
        self,
        conn: &rusqlite::Connection,
        at: Clock,
    ) -> Result<Option<Admission>, LedgerError> {
        let new = NewTask {
            owner: &self.owner,
            endpoint: self.endpoint,
            model: &self.model,
            kind: self.kind,
            fingerprint: self.fingerprint,
            idempotency_key: self.idempotency_key.as_deref(),
            video_seconds: self.video_seconds,
            quota: self.quota,
            provider: self.provider.as_deref(),
            callback_url: self.callback_url.as_deref(),
            keep_days: self.keep_days,
            cost_estimate: self.cost_estimate,
            budget: self.budget,
            price_params: self.price_params,
        };
        admission::admit(&mut WriterTx(conn), &new, at)
            .now_or_never()
            .unwrap_or_else(|| {
                Err(LedgerError::Unavailable(
                    "the admission waited on the writer thread".into(),
                ))
            })
    }
}

/// The writer's connection, in the transaction of its batch.
struct WriterTx<'c>(&'c rusqlite::Connection);

impl KeyLookup for WriterTx<'_> {
    async fn seen(&mut self, owner: &str, key: &str) -> Result<Option<TaskRecord>, LedgerError> {
        let mut stmt = bind(self.0, record::SELECT_BY_IDEMPOTENCY, &[owner, key])?;
        let mut rows = stmt.raw_query();
        rows.next()?.map(task_row).transpose()
    }
}

impl AdmissionTx for WriterTx<'_> {
    async fn insert(&mut self, new: &NewTask<'_>, now: i64) -> Result<Option<i64>, LedgerError> {
        let cost = new.cost_estimate.map(|c| c.0);
        let args: [&dyn rusqlite::ToSql; 13] = [
            &new.owner,
            &new.endpoint_name(),
            &new.model,
            &new.kind.as_str(),
            &new.fingerprint,
            &new.idempotency_key,
            &new.video_seconds,
            &now,
            &new.provider,
            &new.callback_url,
            &new.keep_days,
            &cost,
            &new.price_params,
        ];
        Ok(
            match bind(self.0, record::INSERT_SQLITE, &args)?.raw_execute()? {
                // Inserted: its row id is the last this connection inserted (only the
                // writer thread uses it, and this is its latest statement).
                1 => Some(self.0.last_insert_rowid()),
                // Nothing inserted: the idempotency key is taken.
                _ => None,
            },
        )
    }
}

impl CountingTx for WriterTx<'_> {
    async fn used_since(&mut self, owner: &str, day_start: i64) -> Result<(i64, i64), LedgerError> {
        let args: [&dyn rusqlite::ToSql; 2] = [&owner, &day_start];
        let mut stmt = bind(self.0, record::USED_TODAY, &args)?;
        Ok(match stmt.raw_query().next()? {
            Some(row) => (row.get(0)?, row.get(1)?),
            None => (0, 0),
        })
    }

    async fn spent(
        &mut self,
        owner: &str,
        day: i64,
        since_day: i64,
    ) -> Result<(i64, i64), LedgerError> {
        let args: [&dyn rusqlite::ToSql; 3] = [&owner, &day, &since_day];
        let mut stmt = bind(self.0, record::SPENT, &args)?;
        Ok(match stmt.raw_query().next()? {
            Some(row) => (row.get(0)?, row.get(1)?),
            None => (0, 0),
        })
    }
}
