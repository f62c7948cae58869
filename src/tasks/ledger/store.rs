//! What the ledger asks of an engine: one interface, implemented once per engine
//! (`sqlite.rs`, `postgres.rs`). The ledger's methods (mod.rs, deliveries.rs) say
//! which statement to run with which values; a store runs it and hands back rows
//! already decoded. The statements are shared (`$1` works in both engines) except
//! where an engine needs its own, which [`PerEngine`] carries.

use std::future::Future;
use std::pin::Pin;

use super::reads::Reader;
use super::record::{self, Created, NewTask, TaskRecord};
use super::{Admission, LedgerError};

/// Work leased to this replica from one of the ledger's work lists (webhook
/// deliveries, copies of results).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Leased {
    pub id: i64,
    /// The task's ledger row.
    pub task_row: i64,
    /// Where the work goes: a delivery's callback URL; empty for a copy.
    pub url: String,
    /// Attempts made so far.
    pub attempts: i64,
    /// When the work was first owed (the task's end was recorded).
    pub created_ms: i64,
    /// The key the task belongs to.
    pub owner: String,
}

/// A store's answer, boxed: sqlx's futures are several KiB (a PostgreSQL
/// transaction's especially), and a request future that might await one would
/// otherwise carry that much inline whether it reaches the ledger or not.
pub(super) type StoreFuture<'a, T> =
    Pin<Box<dyn Future<Output = Result<T, LedgerError>> + Send + 'a>>;

/// A value bound to a statement. Each carries its SQL type, also when NULL:
/// PostgreSQL types a parameter from what is bound to it.
#[derive(Debug, Clone, Copy)]
pub(super) enum Param<'a> {
    Int(Option<i64>),
    Text(Option<&'a str>),
}

impl From<i64> for Param<'_> {
    fn from(v: i64) -> Self {
        Self::Int(Some(v))
    }
}

impl From<Option<i64>> for Param<'_> {
    fn from(v: Option<i64>) -> Self {
        Self::Int(v)
    }
}

impl<'a> From<&'a str> for Param<'a> {
    fn from(v: &'a str) -> Self {
        Self::Text(Some(v))
    }
}

impl<'a> From<Option<&'a str>> for Param<'a> {
    fn from(v: Option<&'a str>) -> Self {
        Self::Text(v)
    }
}

/// Bound values, in `$1`, `$2`, … order.
macro_rules! params {
    ($($arg:expr),* $(,)?) => {
        vec![$($crate::tasks::ledger::store::Param::from($arg)),*]
    };
}
pub(super) use params;

/// A statement written once per engine.
#[derive(Debug, Clone, Copy)]
pub(super) struct PerEngine {
    pub sqlite: &'static str,
    pub postgres: &'static str,
}

/// When an admission happens: now, and the start of its UTC day (quotas count
/// from there).
#[derive(Debug, Clone, Copy)]
pub(super) struct Clock {
    pub now: i64,
    pub day_start: i64,
    /// The first millisecond of the UTC month, and of the next.
    pub month_start: i64,
    pub next_month_start: i64,
}

impl Clock {
    /// The clock at `now` (Unix milliseconds).
    pub fn at(now: i64) -> Self {
        let day = now.div_euclid(super::admission::DAY_MS);
        let (year, month, _) = crate::calendar::civil_from_days(day);
        let month_day = crate::calendar::days_from_civil(year, month, 1);
        let next_month_day = match month {
            12 => crate::calendar::days_from_civil(year + 1, 1, 1),
            _ => crate::calendar::days_from_civil(year, month + 1, 1),
        };
        Self {
            now,
            day_start: day * super::admission::DAY_MS,
            month_start: month_day * super::admission::DAY_MS,
            next_month_start: next_month_day * super::admission::DAY_MS,
        }
    }
}

/// One engine holding the ledger.
pub(super) trait Store: Send + Sync {
    /// `sqlite` or `postgres`, for `Debug`.
    fn engine(&self) -> &'static str;

    /// One attempt at admitting `new` ([`super::admission::admit`] in the engine's
    /// transaction); `None` when it lost a race and may be tried again.
    fn admit<'a>(&'a self, new: &'a NewTask<'a>, at: Clock) -> StoreFuture<'a, Option<Admission>>;

    /// The upstream created the task: [`record::SET_CREATED`], at `now`.
    fn created<'a>(&'a self, row: i64, c: &'a Created<'a>, now: i64) -> StoreFuture<'a, ()> {
        let args = params![
            row,
            c.provider,
            c.upstream_id,
            c.task_id,
            c.status.as_str(),
            i64::from(c.answer.status),
            c.answer.body.as_str(),
            now,
            c.first_poll.as_millis() as i64,
        ];
        Box::pin(async move {
            self.execute(record::SET_CREATED, args).await?;
            Ok(())
        })
    }

    /// One writing statement; the number of rows it changed.
    fn execute<'a>(&'a self, sql: &'static str, args: Vec<Param<'a>>) -> StoreFuture<'a, usize>;

    /// [`Store::execute`] of a statement written once per engine.
    fn execute_in<'a>(&'a self, sql: PerEngine, args: Vec<Param<'a>>) -> StoreFuture<'a, usize> {
        let sql = match self.engine() {
            "postgres" => sql.postgres,
            _ => sql.sqlite,
        };
        self.execute(sql, args)
    }

    /// [`Store::execute_in`] for background work (retention): where writes share one
    /// writer (SQLite), it runs only while no other write waits, so that a submit
    /// never waits for more than this one statement. Elsewhere, as any write.
    fn execute_when_idle<'a>(
        &'a self,
        sql: PerEngine,
        args: Vec<Param<'a>>,
    ) -> StoreFuture<'a, usize> {
        self.execute_in(sql, args)
    }

    /// One writing statement returning whole task rows.
    fn write_tasks<'a>(
        &'a self,
        sql: PerEngine,
        args: Vec<Param<'a>>,
    ) -> StoreFuture<'a, Vec<TaskRecord>>;

    /// One writing statement returning leased work (webhook deliveries, copies).
    fn write_leased<'a>(
        &'a self,
        sql: PerEngine,
        args: Vec<Param<'a>>,
    ) -> StoreFuture<'a, Vec<Leased>>;

    /// The engine's reads.
    fn reads(&self) -> &dyn Reader;

    /// The process stops: what it holds ahead of keys' budgets goes back (PostgreSQL's
    /// budget grants); elsewhere nothing is held.
    fn give_back_held(&self) -> StoreFuture<'_, ()> {
        Box::pin(async { Ok(()) })
    }

    /// Housekeeping: what replicas that died held ahead of keys' budgets and left to
    /// expire goes back (PostgreSQL's budget grants); elsewhere nothing is held.
    fn give_back_expired(&self) -> StoreFuture<'_, ()> {
        Box::pin(async { Ok(()) })
    }

    /// `owner`'s usage per model and UTC day, of the rows created from `since_ms` to
    /// before `until_ms` ([`record::USAGE_OF`]).
    fn usage_of<'a>(
        &'a self,
        owner: &'a str,
        since_ms: i64,
        until_ms: i64,
    ) -> StoreFuture<'a, Vec<record::UsageRow>> {
        let args = params![owner, since_ms, until_ms];
        self.reads().usage(record::USAGE_OF, args)
    }

    /// The SQLite writer, for tests of its batching.
    #[cfg(test)]
    fn sqlite_writer(&self) -> Option<&super::writer::Writer> {
        None
    }
}
