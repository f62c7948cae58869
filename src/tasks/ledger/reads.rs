//! The reads the ledger makes, one interface over both engines: a store hands the
//! ledger its [`Reader`] (`sqlite_reads.rs`, `postgres_reads.rs`).

use super::copies::StoredResult;
use super::deliveries::{DeliveryBacklog, DeliveryOf};
use super::record::{TaskRecord, Tracked, UsageRow};
use super::store::{Param, StoreFuture};

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

    /// Unfinished tasks per provider read.
    fn tracked<'a>(
        &'a self,
        sql: &'static str,
        args: Vec<Param<'a>>,
    ) -> StoreFuture<'a, Vec<Tracked>>;

    /// Stored results read.
    fn results<'a>(
        &'a self,
        sql: &'static str,
        args: Vec<Param<'a>>,
    ) -> StoreFuture<'a, Vec<StoredResult>>;

    /// The backlog of deliveries read.
    fn backlog<'a>(&'a self, sql: &'static str) -> StoreFuture<'a, DeliveryBacklog>;

    /// One delivery's standing read, if there is one.
    fn delivery<'a>(
        &'a self,
        sql: &'static str,
        args: Vec<Param<'a>>,
    ) -> StoreFuture<'a, Option<DeliveryOf>>;
}
