//! The reads both engines make through an sqlx pool (PostgreSQL for everything,
//! SQLite beside its writer thread), written once over the pool's database: a store
//! hands the ledger its [`Reader`].

use sqlx::{Arguments, Database, Decode, Encode, FromRow, IntoArguments, Pool, Type};

use super::LedgerError;
use super::deliveries::{DeliveryBacklog, DeliveryOf};
use super::record::{RawTaskRecord, TaskRecord, UsageRow};
use super::store::{Param, StoreFuture};

/// Values bound in `$1`, `$2`, … order.
pub(super) fn arguments<DB: Database>(args: &[Param<'_>]) -> Result<DB::Arguments, LedgerError>
where
    for<'q> Option<i64>: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB> + Type<DB>,
{
    let mut out = DB::Arguments::default();
    for arg in args {
        match *arg {
            Param::Int(v) => out.add(v),
            Param::Text(v) => out.add(v),
        }
        .map_err(|e| LedgerError::Unavailable(e.to_string()))?;
    }
    Ok(out)
}

/// An sqlx pool read from.
pub(super) struct Reads<DB: Database>(pub(super) Pool<DB>);

/// The reads the ledger makes, whatever the engine.
pub(super) trait Reader: Send + Sync {
    /// Task rows read (decoded).
    fn tasks<'a>(
        &'a self,
        sql: &'static str,
        args: Vec<Param<'a>>,
    ) -> StoreFuture<'a, Vec<TaskRecord>>;

    /// One integer read (a count, a row number), if there is a row.
    fn int<'a>(&'a self, sql: &'static str, args: Vec<Param<'a>>) -> StoreFuture<'a, Option<i64>>;

    /// One text column of the first row read: the outer `None` when there is no
    /// row, the inner one when the column is NULL.
    fn text<'a>(
        &'a self,
        sql: &'static str,
        args: Vec<Param<'a>>,
    ) -> StoreFuture<'a, Option<Option<String>>>;

    /// Usage rows read.
    fn usage<'a>(
        &'a self,
        sql: &'static str,
        args: Vec<Param<'a>>,
    ) -> StoreFuture<'a, Vec<UsageRow>>;

    /// The backlog of deliveries read.
    fn backlog<'a>(&'a self, sql: &'static str) -> StoreFuture<'a, DeliveryBacklog>;

    /// One delivery's standing read, if there is one.
    fn delivery<'a>(
        &'a self,
        sql: &'static str,
        args: Vec<Param<'a>>,
    ) -> StoreFuture<'a, Option<DeliveryOf>>;
}

impl<DB> Reader for Reads<DB>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
    for<'q> Option<i64>: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB> + Type<DB>,
    i64: Type<DB> + for<'r> Decode<'r, DB>,
    Option<String>: Type<DB> + for<'r> Decode<'r, DB>,
    RawTaskRecord: for<'r> FromRow<'r, DB::Row>,
    UsageRow: for<'r> FromRow<'r, DB::Row>,
    DeliveryOf: for<'r> FromRow<'r, DB::Row>,
    DeliveryBacklog: for<'r> FromRow<'r, DB::Row>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    fn tasks<'a>(
        &'a self,
        sql: &'static str,
        args: Vec<Param<'a>>,
    ) -> StoreFuture<'a, Vec<TaskRecord>> {
        Box::pin(async move {
            let rows: Vec<RawTaskRecord> = sqlx::query_as_with(sql, arguments::<DB>(&args)?)
                .fetch_all(&self.0)
                .await?;
            rows.into_iter().map(RawTaskRecord::decode).collect()
        })
    }

    fn int<'a>(&'a self, sql: &'static str, args: Vec<Param<'a>>) -> StoreFuture<'a, Option<i64>> {
        Box::pin(async move {
            Ok(sqlx::query_scalar_with(sql, arguments::<DB>(&args)?)
                .fetch_optional(&self.0)
                .await?)
        })
    }

    fn text<'a>(
        &'a self,
        sql: &'static str,
        args: Vec<Param<'a>>,
    ) -> StoreFuture<'a, Option<Option<String>>> {
        Box::pin(async move {
            Ok(sqlx::query_scalar_with(sql, arguments::<DB>(&args)?)
                .fetch_optional(&self.0)
                .await?)
        })
    }

    fn usage<'a>(
        &'a self,
        sql: &'static str,
        args: Vec<Param<'a>>,
    ) -> StoreFuture<'a, Vec<UsageRow>> {
        Box::pin(async move {
            Ok(sqlx::query_as_with(sql, arguments::<DB>(&args)?)
                .fetch_all(&self.0)
                .await?)
        })
    }

    fn backlog<'a>(&'a self, sql: &'static str) -> StoreFuture<'a, DeliveryBacklog> {
        Box::pin(async move { Ok(sqlx::query_as(sql).fetch_one(&self.0).await?) })
    }

    fn delivery<'a>(
        &'a self,
        sql: &'static str,
        args: Vec<Param<'a>>,
    ) -> StoreFuture<'a, Option<DeliveryOf>> {
        Box::pin(async move {
            Ok(sqlx::query_as_with(sql, arguments::<DB>(&args)?)
                .fetch_optional(&self.0)
                .await?)
        })
    }
}
