//! PostgreSQL's reads, through the store's sqlx pool.

use sqlx::Arguments;
use sqlx::postgres::{PgArguments, PgPool};

use super::LedgerError;
use super::copies::StoredResult;
use super::deliveries::{DeliveryBacklog, DeliveryOf};
use super::reads::Reader;
use super::record::{RawTaskRecord, TaskRecord, Tracked, UsageRow};
use super::store::{Param, StoreFuture};

/// Values bound in `$1`, `$2`, … order.
pub(super) fn arguments(args: &[Param<'_>]) -> Result<PgArguments, LedgerError> {
    let mut out = PgArguments::default();
    for arg in args {
        match *arg {
            Param::Int(v) => out.add(v),
            Param::Text(v) => out.add(v),
        }
        .map_err(|e| LedgerError::Unavailable(e.to_string()))?;
    }
    Ok(out)
}

/// The pool read from (and, by the store, written through).
pub(super) struct PostgresReads(pub(super) PgPool);

impl Reader for PostgresReads {
    fn tasks<'a>(
        &'a self,
        sql: &'static str,
        args: Vec<Param<'a>>,
    ) -> StoreFuture<'a, Vec<TaskRecord>> {
        Box::pin(async move {
            let rows: Vec<RawTaskRecord> = sqlx::query_as_with(sql, arguments(&args)?)
                .fetch_all(&self.0)
                .await?;
            rows.into_iter().map(RawTaskRecord::decode).collect()
        })
    }

    fn int<'a>(&'a self, sql: &'static str, args: Vec<Param<'a>>) -> StoreFuture<'a, Option<i64>> {
        Box::pin(async move {
            Ok(sqlx::query_scalar_with(sql, arguments(&args)?)
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
            Ok(sqlx::query_scalar_with(sql, arguments(&args)?)
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
            Ok(sqlx::query_as_with(sql, arguments(&args)?)
                .fetch_all(&self.0)
                .await?)
        })
    }

    fn tracked<'a>(
        &'a self,
        sql: &'static str,
        args: Vec<Param<'a>>,
    ) -> StoreFuture<'a, Vec<Tracked>> {
        Box::pin(async move {
            Ok(sqlx::query_as_with(sql, arguments(&args)?)
                .fetch_all(&self.0)
                .await?)
        })
    }

    fn results<'a>(
        &'a self,
        sql: &'static str,
        args: Vec<Param<'a>>,
    ) -> StoreFuture<'a, Vec<StoredResult>> {
        Box::pin(async move {
            Ok(sqlx::query_as_with(sql, arguments(&args)?)
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
            Ok(sqlx::query_as_with(sql, arguments(&args)?)
                .fetch_optional(&self.0)
                .await?)
        })
    }
}
