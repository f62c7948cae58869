//! The reads both engines make through an sqlx pool (PostgreSQL for everything,
//! SQLite beside its writer thread), written once over the pool's database.

use sqlx::{Arguments, Database, Decode, Encode, FromRow, IntoArguments, Pool, Type};

use super::LedgerError;
use super::deliveries::{DeliveryBacklog, DeliveryOf};
use super::record::{RawTaskRecord, TaskRecord, UsageRow};
use super::store::{Param, StoreFuture};

/// An sqlx pool read from.
pub(super) struct Reads<DB: Database>(pub(super) Pool<DB>);

impl<DB> Reads<DB>
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
    /// Values bound in `$1`, `$2`, … order.
    pub(super) fn arguments(args: &[Param<'_>]) -> Result<DB::Arguments, LedgerError> {
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

    pub(super) fn tasks<'a>(
        &'a self,
        sql: &'static str,
        args: Vec<Param<'a>>,
    ) -> StoreFuture<'a, Vec<TaskRecord>> {
        Box::pin(async move {
            let rows: Vec<RawTaskRecord> = sqlx::query_as_with(sql, Self::arguments(&args)?)
                .fetch_all(&self.0)
                .await?;
            rows.into_iter().map(RawTaskRecord::decode).collect()
        })
    }

    pub(super) fn int<'a>(
        &'a self,
        sql: &'static str,
        args: Vec<Param<'a>>,
    ) -> StoreFuture<'a, Option<i64>> {
        Box::pin(async move {
            Ok(sqlx::query_scalar_with(sql, Self::arguments(&args)?)
                .fetch_optional(&self.0)
                .await?)
        })
    }

    pub(super) fn text<'a>(
        &'a self,
        sql: &'static str,
        args: Vec<Param<'a>>,
    ) -> StoreFuture<'a, Option<Option<String>>> {
        Box::pin(async move {
            Ok(sqlx::query_scalar_with(sql, Self::arguments(&args)?)
                .fetch_optional(&self.0)
                .await?)
        })
    }

    pub(super) fn usage<'a>(
        &'a self,
        sql: &'static str,
        args: Vec<Param<'a>>,
    ) -> StoreFuture<'a, Vec<UsageRow>> {
        Box::pin(async move {
            Ok(sqlx::query_as_with(sql, Self::arguments(&args)?)
                .fetch_all(&self.0)
                .await?)
        })
    }

    pub(super) fn backlog<'a>(&'a self, sql: &'static str) -> StoreFuture<'a, DeliveryBacklog> {
        Box::pin(async move { Ok(sqlx::query_as(sql).fetch_one(&self.0).await?) })
    }

    pub(super) fn delivery<'a>(
        &'a self,
        sql: &'static str,
        args: Vec<Param<'a>>,
    ) -> StoreFuture<'a, Option<DeliveryOf>> {
        Box::pin(async move {
            Ok(sqlx::query_as_with(sql, Self::arguments(&args)?)
                .fetch_optional(&self.0)
                .await?)
        })
    }
}
