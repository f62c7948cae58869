//! SQLite's reads (listing, usage, operator commands, a retry waiting for the first
//! request): a few threads beside the writer, each owning a connection (WAL lets
//! them read while it writes), taking reads from one queue. rusqlite, as the writer:
//! one SQLite stack in the binary.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};
use tokio::sync::oneshot;

use super::LedgerError;
use super::copies::StoredResult;
use super::deliveries::{DeliveryBacklog, DeliveryOf};
use super::reads::Reader;
use super::record::{TaskRecord, Tracked, UsageRow};
use super::sqlite::task_row;
use super::store::{Param, StoreFuture};
use super::writer::{owned, query_rows};

/// A read waiting for a thread.
type ReadJob = Box<dyn FnOnce(&Connection) + Send>;

/// The queue into the reading threads; they stop when it is dropped.
pub(super) struct SqliteReads {
    jobs: crossbeam_channel::Sender<ReadJob>,
}

impl SqliteReads {
    /// Open `threads` connections to `path` (created and migrated already), each on
    /// a thread of its own.
    pub(super) fn open(path: &Path, threads: u32) -> Result<Self, String> {
        let (jobs, queue) = crossbeam_channel::unbounded::<ReadJob>();
        for n in 0..threads.max(1) {
            let conn = Connection::open_with_flags(
                path,
                OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
            .and_then(|c| {
                c.busy_timeout(Duration::from_secs(5))?;
                // Read-write to share the WAL index, but never writing: every write
                // goes through the writer.
                c.execute_batch("PRAGMA query_only = ON;")?;
                c.set_prepared_statement_cache_capacity(32);
                Ok(c)
            })
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
            let queue = queue.clone();
            std::thread::Builder::new()
                .name(format!("ledger-read-{n}"))
                .spawn(move || {
                    for job in queue {
                        job(&conn);
                    }
                })
                .map_err(|e| format!("cannot start the ledger's readers: {e}"))?;
        }
        Ok(Self { jobs })
    }

    /// Run `sql` with `args` on a reading thread, every row read by `row`.
    fn rows<'a, T: Send + 'static>(
        &'a self,
        sql: &'static str,
        args: &[Param<'_>],
        row: fn(&rusqlite::Row<'_>) -> Result<T, LedgerError>,
    ) -> StoreFuture<'a, Vec<T>> {
        let args = owned(args);
        self.run(move |conn| query_rows(conn, sql, &args, row))
    }

    /// Run `read` on a reading thread.
    pub(super) fn run<'a, T: Send + 'static>(
        &'a self,
        read: impl FnOnce(&Connection) -> Result<T, LedgerError> + Send + 'static,
    ) -> StoreFuture<'a, T> {
        let (reply, answer) = oneshot::channel();
        let sent = self.jobs.send(Box::new(move |conn: &Connection| {
            // The caller may have gone (its request was cut short).
            let _ = reply.send(read(conn));
        }));
        Box::pin(async move {
            let stopped = || LedgerError::Unavailable("the ledger's readers stopped".into());
            sent.map_err(|_| stopped())?;
            answer.await.map_err(|_| stopped())?
        })
    }

    /// The first row's, if there is one.
    fn first<'a, T: Send + 'static>(
        &'a self,
        sql: &'static str,
        args: &[Param<'_>],
        row: fn(&rusqlite::Row<'_>) -> Result<T, LedgerError>,
    ) -> StoreFuture<'a, Option<T>> {
        let rows = self.rows(sql, args, row);
        Box::pin(async move { Ok(rows.await?.into_iter().next()) })
    }
}

pub(super) fn usage_row(row: &rusqlite::Row<'_>) -> Result<UsageRow, LedgerError> {
    Ok(UsageRow {
        owner: row.get("owner")?,
        model: row.get("model")?,
        day: row.get("day")?,
        submitted: row.get("submitted")?,
        completed: row.get("completed")?,
        failed: row.get("failed")?,
        video_seconds: row.get("video_seconds")?,
        spent: row.get("spent")?,
        reserved: row.get("reserved")?,
    })
}

impl Reader for SqliteReads {
    fn tasks<'a>(
        &'a self,
        sql: &'static str,
        args: Vec<Param<'a>>,
    ) -> StoreFuture<'a, Vec<TaskRecord>> {
        self.rows(sql, &args, task_row)
    }

    fn int<'a>(&'a self, sql: &'static str, args: Vec<Param<'a>>) -> StoreFuture<'a, Option<i64>> {
        self.first(sql, &args, |row| Ok(row.get(0)?))
    }

    fn text<'a>(
        &'a self,
        sql: &'static str,
        args: Vec<Param<'a>>,
    ) -> StoreFuture<'a, Option<Option<String>>> {
        self.first(sql, &args, |row| Ok(row.get(0)?))
    }

    fn usage<'a>(
        &'a self,
        sql: &'static str,
        args: Vec<Param<'a>>,
    ) -> StoreFuture<'a, Vec<UsageRow>> {
        self.rows(sql, &args, usage_row)
    }

    fn tracked<'a>(
        &'a self,
        sql: &'static str,
        args: Vec<Param<'a>>,
    ) -> StoreFuture<'a, Vec<Tracked>> {
        self.rows(sql, &args, |row| {
            Ok(Tracked {
                provider: row.get(0)?,
                tasks: row.get(1)?,
            })
        })
    }

    fn results<'a>(
        &'a self,
        sql: &'static str,
        args: Vec<Param<'a>>,
    ) -> StoreFuture<'a, Vec<StoredResult>> {
        self.rows(sql, &args, |row| {
            Ok(StoredResult {
                task_row: row.get(0)?,
                n: row.get(1)?,
                object_key: row.get(2)?,
                bytes: row.get(3)?,
                content_type: row.get(4)?,
                sha256: row.get(5)?,
                stored_ms: row.get(6)?,
                expires_ms: row.get(7)?,
                deleted_ms: row.get(8)?,
            })
        })
    }

    fn backlog<'a>(&'a self, sql: &'static str) -> StoreFuture<'a, DeliveryBacklog> {
        let rows = self.first(sql, &[], |row| {
            Ok(DeliveryBacklog {
                pending: row.get("pending")?,
                oldest_ms: row.get("oldest_ms")?,
            })
        });
        Box::pin(async move { Ok(rows.await?.unwrap_or_default()) })
    }

    fn delivery<'a>(
        &'a self,
        sql: &'static str,
        args: Vec<Param<'a>>,
    ) -> StoreFuture<'a, Option<DeliveryOf>> {
        self.first(sql, &args, |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
        })
    }
}
