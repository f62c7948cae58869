//! SQLite's writes, committed in groups: one thread owns the writer connection and
//! drains a queue of pending writes, running every write that waits into one
//! transaction (each atomic on its own: one statement, or a savepoint) and answering
//! each once that transaction is committed. A write's caller therefore learns of it
//! only when it is durable, as with one transaction per write, but a burst of submits
//! shares one `BEGIN`, one `COMMIT` and the WAL pages they both touch. The WAL is
//! checkpointed by a second thread and connection, so that no write waits for the
//! disk's `fsync`.
//!
//! Answers go back in groups too: a write queued on a serving thread
//! ([`crate::workers`]) is answered through a task on that thread, which gets the
//! batch's answers for its thread at once. Waking a serving thread from another is a
//! system call (its runtime's event fd) and, when it was idle, a context switch; per
//! batch and thread rather than per write, that is one wake-up for many submits.
//!
//! rusqlite rather than sqlx here: sqlx-sqlite sends every statement to its
//! connection's thread and waits for the answer, and its pool pings a connection
//! when it is taken and again when it is given back, so a submit's two writes were
//! eight thread hand-offs. Here a write is one hand-off to the thread and one answer.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, mpsc};
use std::time::Duration;

use rusqlite::{CachedStatement, Connection, OpenFlags, ToSql};
use tokio::sync::oneshot;

use super::LedgerError;

/// The most writes committed by one transaction: a bound on how long the first of
/// them waits for the others.
const MAX_BATCH: usize = 256;

/// A write waiting for its turn.
trait Job: Send {
    /// True when the work writes with one statement at most: SQLite undoes a failed
    /// statement by itself, so it needs no savepoint of its own.
    fn single_statement(&self) -> bool;
    /// True for background work (retention, sums of usage) that runs only while no
    /// other write waits, in a transaction of its own: a submit never shares its
    /// commit with it.
    fn when_idle(&self) -> bool;
    /// Run inside the batch's transaction; false when it failed (its result is the
    /// error, and its savepoint is rolled back).
    fn run(&mut self, conn: &Connection) -> bool;
    /// Hand the result over: the batch was committed, or `failed` says why not.
    fn answer(self: Box<Self>, failed: Option<&str>);
    /// The serving thread to answer on, if it was queued on one. Taken out before
    /// the job is handed over: a job waiting in its thread's channel must not hold
    /// a sender of that same channel, or the channel could never be freed.
    fn take_home(&mut self) -> Option<Home>;
}

/// Answers for one serving thread, handed over by its [`home`] task.
type Home = tokio::sync::mpsc::UnboundedSender<Answers>;

/// A batch's writes queued on one serving thread, and the batch's failure if any.
struct Answers {
    jobs: Vec<Box<dyn Job>>,
    failed: Option<Arc<str>>,
}

impl Answers {
    fn deliver(self) {
        for job in self.jobs {
            job.answer(self.failed.as_deref());
        }
    }
}

thread_local! {
    /// This serving thread's answering task, started by its first write.
    static HOME: RefCell<Option<Home>> = const { RefCell::new(None) };
}

/// The answering task of this thread, when it is a serving thread: its one runtime
/// runs as long as the thread does. Elsewhere (the main runtime, tests, the command
/// line) writes are answered one by one from the writer thread.
fn home() -> Option<Home> {
    crate::workers::current()?;
    HOME.with(|home| {
        let mut home = home.borrow_mut();
        if let Some(tx) = home.as_ref().filter(|tx| !tx.is_closed()) {
            return Some(tx.clone());
        }
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Answers>();
        runtime.spawn(async move {
            while let Some(answers) = rx.recv().await {
                answers.deliver();
            }
        });
        *home = Some(tx.clone());
        Some(tx)
    })
}

struct Pending<F, R> {
    work: Option<F>,
    single_statement: bool,
    when_idle: bool,
    home: Option<Home>,
    result: Option<Result<R, LedgerError>>,
    reply: oneshot::Sender<Result<R, LedgerError>>,
}

impl<F, R> Job for Pending<F, R>
where
    F: FnOnce(&Connection) -> Result<R, LedgerError> + Send,
    R: Send,
{
    fn single_statement(&self) -> bool {
        self.single_statement
    }

    fn when_idle(&self) -> bool {
        self.when_idle
    }

    fn run(&mut self, conn: &Connection) -> bool {
        let result = self.work.take().map(|work| work(conn));
        let ok = matches!(result, Some(Ok(_)));
        self.result = result;
        ok
    }

    fn answer(self: Box<Self>, failed: Option<&str>) {
        let answer = match (failed, self.result) {
            // The write itself failed: its own error, whatever became of the batch.
            (_, Some(Err(e))) => Err(e),
            (Some(why), _) => Err(LedgerError::Unavailable(why.to_string())),
            (None, Some(Ok(r))) => Ok(r),
            (None, None) => Err(LedgerError::Unavailable("the write did not run".into())),
        };
        // The caller may have gone (its request was cut short); the write stands.
        let _ = self.reply.send(answer);
    }

    fn take_home(&mut self) -> Option<Home> {
        self.home.take()
    }
}

/// The queue into the writer thread.
pub(super) struct Writer {
    jobs: mpsc::Sender<Box<dyn Job>>,
    /// What the writer thread did so far; tests read it.
    #[cfg_attr(not(test), allow(dead_code))]
    counts: Arc<Counts>,
}

/// Counted by the writer thread.
#[derive(Default)]
struct Counts {
    /// Transactions committed (or tried).
    batches: std::sync::atomic::AtomicU64,
    /// Groups of answers handed to a serving thread.
    handovers: std::sync::atomic::AtomicU64,
    /// Writes queued so far (counted by the callers).
    queued: std::sync::atomic::AtomicU64,
}

impl Writer {
    /// Open `path` (already created and migrated) and start the writer thread.
    pub(super) fn open(path: &Path) -> Result<Self, String> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        conn.busy_timeout(Duration::from_secs(5))
            .and_then(|_| {
                // WAL with NORMAL: a commit survives a crash of the process; only a
                // power loss may lose the last transactions. The writer does not
                // checkpoint after its commits: `checkpoints` does, on a thread of its
                // own. The WAL file keeps its size when it starts over (it is cut back
                // only past `WAL_SIZE_LIMIT`): commits then overwrite blocks the file
                // system has already allocated, where a file cut short and grown again
                // made every commit allocate (on ext4, stalls of milliseconds).
                conn.execute_batch(&format!(
                    "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; \
                     PRAGMA wal_autocheckpoint = 0; PRAGMA journal_size_limit = {WAL_SIZE_LIMIT};",
                ))
            })
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        conn.set_prepared_statement_cache_capacity(64);
        let checkpointer = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .and_then(|c| {
            c.busy_timeout(Duration::from_secs(5))?;
            c.execute_batch("PRAGMA synchronous = NORMAL; PRAGMA wal_autocheckpoint = 0;")?;
            Ok(c)
        })
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        let (jobs, queue) = mpsc::channel();
        let counts = Arc::<Counts>::default();
        let counted = Arc::clone(&counts);
        let wal = std::sync::Arc::new(WalState::default());
        let written = std::sync::Arc::clone(&wal);
        std::thread::Builder::new()
            .name("ledger-writer".into())
            .spawn(move || serve(&conn, &queue, &counted, &written))
            .map_err(|e| format!("cannot start the ledger writer: {e}"))?;
        std::thread::Builder::new()
            .name("ledger-checkpoint".into())
            .spawn(move || checkpoints(&checkpointer, &wal))
            .map_err(|e| format!("cannot start the ledger checkpointer: {e}"))?;
        Ok(Self { jobs, counts })
    }

    /// Transactions run so far (each holding one or more writes).
    #[cfg(test)]
    pub(super) fn batches(&self) -> u64 {
        self.counts
            .batches
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Writes queued so far.
    #[cfg(test)]
    pub(super) fn queued(&self) -> u64 {
        self.counts
            .queued
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Groups of answers handed to serving threads so far.
    #[cfg(test)]
    pub(super) fn handovers(&self) -> u64 {
        self.counts
            .handovers
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Run `work` in the next transaction, in a savepoint of its own (a failure
    /// undoes all it wrote and nothing else); its result once that is committed.
    /// For work that writes with several statements; every write of the ledger now
    /// is one statement ([`Writer::run_single`]), so only tests use it.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(super) async fn run<R, F>(&self, work: F) -> Result<R, LedgerError>
    where
        F: FnOnce(&Connection) -> Result<R, LedgerError> + Send + 'static,
        R: Send + 'static,
    {
        self.queue(work, false, false).await
    }

    /// [`Writer::run`] for work that writes with one statement at most (and reads
    /// with any number): SQLite makes a statement atomic, so a failed one is undone
    /// without a savepoint around it, which saves two statements per write and the
    /// copy of every page it touches into the savepoint's journal.
    pub(super) async fn run_single<R, F>(&self, work: F) -> Result<R, LedgerError>
    where
        F: FnOnce(&Connection) -> Result<R, LedgerError> + Send + 'static,
        R: Send + 'static,
    {
        self.queue(work, true, false).await
    }

    /// [`Writer::run_single`] for background work: run once no other write waits,
    /// alone in its transaction, so that a write queued meanwhile waits for this one
    /// statement at most and never for its commit.
    pub(super) async fn run_when_idle<R, F>(&self, work: F) -> Result<R, LedgerError>
    where
        F: FnOnce(&Connection) -> Result<R, LedgerError> + Send + 'static,
        R: Send + 'static,
    {
        self.queue(work, true, true).await
    }

    /// [`Writer::run_when_idle`] for background work of several statements, in a
    /// savepoint of its own.
    pub(super) async fn run_background<R, F>(&self, work: F) -> Result<R, LedgerError>
    where
        F: FnOnce(&Connection) -> Result<R, LedgerError> + Send + 'static,
        R: Send + 'static,
    {
        self.queue(work, false, true).await
    }

    async fn queue<R, F>(
        &self,
        work: F,
        single_statement: bool,
        when_idle: bool,
    ) -> Result<R, LedgerError>
    where
        F: FnOnce(&Connection) -> Result<R, LedgerError> + Send + 'static,
        R: Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let job = Pending {
            work: Some(work),
            single_statement,
            when_idle,
            home: home(),
            result: None,
            reply,
        };
        let stopped = || LedgerError::Unavailable("the ledger writer stopped".into());
        self.jobs.send(Box::new(job)).map_err(|_| stopped())?;
        self.counts
            .queued
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        answer.await.map_err(|_| stopped())?
    }
}

/// Values bound on another thread (the writer's, a reader's): owned, they cross to it.
pub(super) fn owned(args: &[super::store::Param<'_>]) -> Vec<rusqlite::types::Value> {
    use rusqlite::types::Value;
    args.iter()
        .map(|arg| match *arg {
            super::store::Param::Int(v) => v.map_or(Value::Null, Value::Integer),
            super::store::Param::Text(v) => v.map_or(Value::Null, |s| Value::Text(s.to_owned())),
        })
        .collect()
}

/// `sql` prepared (or taken from the connection's cache) with `args` bound as
/// `$1`, `$2`, …: the statements are shared with PostgreSQL, and SQLite numbers
/// named parameters by first appearance, not by their digits.
pub(super) fn bind<'c>(
    conn: &'c Connection,
    sql: &str,
    args: &[impl ToSql],
) -> rusqlite::Result<CachedStatement<'c>> {
    const NAMES: [&str; 12] = [
        "$1", "$2", "$3", "$4", "$5", "$6", "$7", "$8", "$9", "$10", "$11", "$12",
    ];
    let mut stmt = conn.prepare_cached(sql)?;
    for (name, arg) in NAMES.iter().zip(args) {
        if let Some(at) = stmt.parameter_index(name)? {
            stmt.raw_bind_parameter(at, arg)?;
        }
    }
    Ok(stmt)
}

/// Every row `sql` yields with `args` bound, each read by `row`.
pub(super) fn query_rows<T>(
    conn: &Connection,
    sql: &str,
    args: &[rusqlite::types::Value],
    row: fn(&rusqlite::Row<'_>) -> Result<T, LedgerError>,
) -> Result<Vec<T>, LedgerError> {
    let mut stmt = bind(conn, sql, args)?;
    let mut rows = stmt.raw_query();
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        out.push(row(r)?);
    }
    Ok(out)
}

/// What the writer and the checkpointer tell each other.
#[derive(Default)]
struct WalState {
    /// Set by the writer after a commit, taken by the checkpointer.
    committed: std::sync::Mutex<bool>,
    nudge: std::sync::Condvar,
    /// Frames in the WAL at the last checkpoint: the writer resets a WAL that
    /// checkpoints could not (writes never paused long enough).
    frames: std::sync::atomic::AtomicI64,
    /// The writer stopped (the ledger was dropped): so does the checkpointer.
    stopped: std::sync::atomic::AtomicBool,
}

/// Pause between two checkpoints: each copies what was committed meanwhile. Short,
/// because a commit appending to a WAL page that a checkpoint's `fsync` is writing
/// waits for it, and the fewer pages an `fsync` has, the shorter that wait (the
/// measurements are in docs/ledger.md and BENCHMARKS.md).
const CHECKPOINT_EVERY: Duration = Duration::from_millis(10);
/// A WAL longer than this (frames of 4 KiB) is reset by the writer itself, between
/// two batches, waiting for the checkpoint.
const MAX_WAL_FRAMES: i64 = 50_000;
/// Bytes a WAL file may keep once it has started over: more than `MAX_WAL_FRAMES`
/// frames and a batch beyond, so that a WAL reset by the writer keeps its blocks;
/// only a WAL grown further (checkpoints held back by a long read) is cut back to
/// this.
const WAL_SIZE_LIMIT: i64 = 256 * 1024 * 1024;
/// A WAL frame: a 4 KiB page and its 24-byte header.
const WAL_FRAME_BYTES: i64 = 4096 + 24;
// The limit stays above the largest WAL the writer lets grow (a full batch writing
// up to 8 pages a write past `MAX_WAL_FRAMES`) if either of them is changed.
const _: () = assert!(WAL_SIZE_LIMIT > (MAX_WAL_FRAMES + 8 * MAX_BATCH as i64) * WAL_FRAME_BYTES);

/// The checkpoints, on a thread and connection of their own: a checkpoint writes the
/// WAL's pages into the database and waits for both files to reach the disk
/// (`fsync`, tens of milliseconds on a busy disk). On the writer, as SQLite does by
/// default, every write queued meanwhile waited too. A passive checkpoint takes no
/// lock the writer needs.
fn checkpoints(conn: &Connection, wal: &WalState) {
    loop {
        {
            let mut committed = wal.committed.lock().unwrap_or_else(|e| e.into_inner());
            while !*committed {
                if wal.stopped.load(std::sync::atomic::Ordering::Relaxed) {
                    return;
                }
                committed = wal.nudge.wait(committed).unwrap_or_else(|e| e.into_inner());
            }
            *committed = false;
        }
        match conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
            row.get::<_, i64>(1)
        }) {
            Ok(frames) => wal
                .frames
                .store(frames, std::sync::atomic::Ordering::Relaxed),
            Err(e) => tracing::warn!(error = %e, "ledger checkpoint failed"),
        }
        std::thread::sleep(CHECKPOINT_EVERY);
    }
}

fn serve(conn: &Connection, queue: &mpsc::Receiver<Box<dyn Job>>, counts: &Counts, wal: &WalState) {
    // Background writes waiting for a moment when no other write does.
    let mut idle_work: VecDeque<Box<dyn Job>> = VecDeque::new();
    loop {
        let first = match idle_work.is_empty() {
            true => queue.recv().ok(),
            false => queue.try_recv().ok(),
        };
        let mut batch = Vec::new();
        let mut next = first;
        while let Some(job) = next {
            match job.when_idle() {
                true => idle_work.push_back(job),
                false => batch.push(job),
            }
            if batch.len() >= MAX_BATCH {
                break;
            }
            next = queue.try_recv().ok();
        }
        if batch.is_empty() {
            // No other write waits: one background write, alone. (Under a stream of
            // writes that never pauses, background work waits: it is never urgent.)
            match idle_work.pop_front() {
                Some(job) => batch.push(job),
                // `recv` failed: every sender is gone, and nothing is left to do.
                None => break,
            }
        }
        let failed: Option<Arc<str>> = commit(conn, &mut batch).err().map(|e| e.to_string().into());
        counts
            .batches
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        answer(batch, failed, &counts.handovers);
        *wal.committed.lock().unwrap_or_else(|e| e.into_inner()) = true;
        wal.nudge.notify_one();
        if wal.frames.load(std::sync::atomic::Ordering::Relaxed) > MAX_WAL_FRAMES {
            // The checkpoints never caught up with the commits: wait for one that
            // does, and start the WAL over.
            match conn.query_row("PRAGMA wal_checkpoint(RESTART)", [], |row| {
                row.get::<_, i64>(1)
            }) {
                // Started over at the next commit.
                Ok(_) => wal.frames.store(0, std::sync::atomic::Ordering::Relaxed),
                Err(e) => tracing::warn!(error = %e, "ledger checkpoint failed"),
            }
        }
    }
    {
        // Under the lock the checkpointer waits with: it cannot miss the wake-up.
        let _committed = wal.committed.lock().unwrap_or_else(|e| e.into_inner());
        wal.stopped
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
    wal.nudge.notify_one();
}

/// Answer the batch's writes: those queued on a serving thread in one hand-over per
/// thread, the others directly. The hand-overs are counted before any is sent, so
/// that whoever has an answer sees its hand-over counted.
fn answer(
    batch: Vec<Box<dyn Job>>,
    failed: Option<Arc<str>>,
    handovers: &std::sync::atomic::AtomicU64,
) {
    let mut homes: Vec<(Home, Vec<Box<dyn Job>>)> = Vec::new();
    for mut job in batch {
        let Some(home) = job.take_home() else {
            job.answer(failed.as_deref());
            continue;
        };
        match homes.iter_mut().find(|(h, _)| h.same_channel(&home)) {
            Some((_, jobs)) => jobs.push(job),
            None => homes.push((home, vec![job])),
        }
    }
    handovers.fetch_add(homes.len() as u64, std::sync::atomic::Ordering::Relaxed);
    for (home, jobs) in homes {
        let answers = Answers {
            jobs,
            failed: failed.clone(),
        };
        // The thread's runtime stopped: its callers are gone, but the answers are
        // still given (dropped by nobody waiting).
        if let Err(returned) = home.send(answers) {
            returned.0.deliver();
        }
    }
}

/// Run the batch in one transaction, each write in a savepoint (or, for one
/// statement, in that statement's own atomicity) so that one that fails takes
/// nothing of the others with it.
fn commit(conn: &Connection, batch: &mut [Box<dyn Job>]) -> rusqlite::Result<()> {
    exec(conn, "BEGIN IMMEDIATE")?;
    let done = run_all(conn, batch).and_then(|()| exec(conn, "COMMIT"));
    if done.is_err() && !conn.is_autocommit() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    done
}

fn exec(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.raw_execute().map(drop)
}

fn run_all(conn: &Connection, batch: &mut [Box<dyn Job>]) -> rusqlite::Result<()> {
    let exec = |sql: &str| exec(conn, sql);
    for job in batch.iter_mut() {
        let savepoint = !job.single_statement();
        if savepoint {
            exec("SAVEPOINT write")?;
        }
        if !job.run(conn) && savepoint && !conn.is_autocommit() {
            exec("ROLLBACK TO write")?;
        }
        if conn.is_autocommit() {
            // Some errors (a full disk, I/O) roll the whole transaction back:
            // nothing of this batch is written.
            return Err(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ABORT),
                Some("the transaction was rolled back".into()),
            ));
        }
        if savepoint {
            exec("RELEASE write")?;
        }
    }
    Ok(())
}
