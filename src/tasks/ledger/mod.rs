//! The task ledger: a durable record of every task the gateway submits, kept in
//! SQLite (embedded, the default) or PostgreSQL (shared by replicas).
//!
//! A row is written *before* the upstream submit ([`Ledger::admit`], which also
//! settles the `Idempotency-Key` and the key's daily quota in the same transaction),
//! completed with the upstream id and the sealed task id or with the refusal, and
//! updated once when a query first sees the task finished. Rows left `submitting` by a
//! crash become `unknown_outcome` ([`Ledger::sweep`]). Sealed ids stay the way a query
//! finds its task: a query answered from the results cache never touches the ledger.
//!
//! Every statement is a constant with bound parameters (`$1` works in both engines);
//! nothing is assembled from client input. Each engine is a [`store::Store`] of its
//! own (`sqlite.rs`, `postgres.rs`); rows leave them typed. docs/ledger.md says what
//! is stored.

mod admission;
mod copies;
mod deliveries;
mod error;
mod postgres;
mod postgres_admissions;
mod postgres_batch;
mod postgres_grants;
mod postgres_reads;
mod postgres_submits;
mod reads;
mod record;
mod sqlite;
mod sqlite_reads;
mod sqlite_schema;
mod sqlite_usage;
mod store;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use self::postgres::PostgresStore;
use self::sqlite::SqliteStore;
use self::store::{Clock, PerEngine, Store, params};

pub use self::copies::{CopyOutcome, StoredResult};
pub use self::deliveries::{Delivery, DeliveryBacklog, DeliveryOutcome, PutBack};
pub use self::error::LedgerError;
pub use self::record::{
    Admission, Answer, Created, Cursor, MAX_TASK_SECONDS, NewTask, Page, Polled, State, TaskRecord,
    Tracked, UsageRow, fingerprint,
};
pub use self::store::Leased;
use crate::config::Endpoint;
use crate::money::Micros;
use crate::tasks::{TaskState, TaskStatus};

/// What a task's end is settled with (see [`Ledger::priced`]).
#[derive(Debug, Clone)]
pub struct Priced {
    pub owner: String,
    /// Millionths; `None`: it was submitted without a price.
    pub cost_estimate: Option<i64>,
    /// What it cost, once settled.
    pub cost_settled: Option<i64>,
    /// The validated parameters, as JSON text.
    pub price_params: Option<String>,
}

/// What one batch of [`Ledger::prune`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pruned {
    /// Rows deleted.
    pub rows: usize,
    /// The last row looked at, where the next batch starts; `None`: the pass is over.
    pub next: Option<i64>,
}

/// Where the ledger lives, from `[ledger] url`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LedgerUrl {
    /// Stateless: no ledger.
    Off,
    Sqlite(PathBuf),
    Postgres(String),
}

impl LedgerUrl {
    /// Parse the configured URL; a relative SQLite path is relative to `dir`.
    pub fn parse(url: &str, dir: &Path) -> Result<Self, String> {
        if url == "none" {
            return Ok(Self::Off);
        }
        if let Some(path) = url.strip_prefix("sqlite://") {
            if path.is_empty() {
                return Err("sqlite:// needs a file path".into());
            }
            return Ok(Self::Sqlite(dir.join(path)));
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Ok(Self::Postgres(url.to_string()));
        }
        Err("must be `sqlite://PATH`, `postgres://…` or `none`".into())
    }
}

/// How many times an admission is tried when it loses its race for a key (taken
/// and released again between two statements: another request's submit was
/// refused meanwhile). Each loss means another writer made progress, so a few
/// suffice; past them the submit is refused as the ledger being unavailable.
const ADMIT_ATTEMPTS: usize = 3;

/// Tasks given back by one statement at most (its JSON text: about 40 bytes each).
const GIVEN_BACK_AT_ONCE: usize = 512;

/// The open ledger.
pub struct Ledger {
    /// A trait object rather than an enum of the two stores: every call through it
    /// returns a boxed future anyway (a PostgreSQL one would be several KiB inline),
    /// so dispatch costs nothing more, and the ledger's methods are written once
    /// instead of once per engine or through a match in each.
    store: Box<dyn Store>,
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger")
            .field("engine", &self.store.engine())
            .finish()
    }
}

/// The two statements every submit writes on SQLite (the write-ahead row, its
/// completion) and how the row names its endpoint, for the floor measured by
/// `benches/hot_path.rs`: copies, so that the record's own items stay private.
#[doc(hidden)]
pub mod submit_statements {
    pub const WRITE_AHEAD: &str = super::record::INSERT_SQLITE;
    pub const COMPLETE: &str = super::record::SET_CREATED;

    /// The `endpoint` column of a row written for `endpoint`.
    pub fn endpoint(endpoint: crate::config::Endpoint) -> &'static str {
        super::record::endpoint_name(endpoint)
    }
}

/// The PostgreSQL server's clock less this machine's, in ms, as last learned: see
/// [`now_ms`]. 0 on SQLite. One per process, as a process has one ledger.
static SERVER_CLOCK_AHEAD_MS: AtomicI64 = AtomicI64::new(0);
/// When (by this machine's clock) it was learned last.
static SERVER_CLOCK_LEARNED_MS: AtomicI64 = AtomicI64::new(0);
/// A sample of the server's clock whose round trip took longer (a wait for a pooled
/// connection, a busy server) says too little of when the server read its clock: it
/// is dropped, and the offset learned before stands.
const CLOCK_SAMPLE_MAX_MS: i64 = 50;
/// How old the offset may grow before a claim of copies or deliveries asks again:
/// with the tracker off, no heartbeat does.
const CLOCK_REFRESH_MS: i64 = 30_000;

/// Milliseconds since the Unix epoch, by the clock the ledger's times are written
/// and compared in. Replicas sharing a PostgreSQL ledger read one another's
/// heartbeats, leases and due times: by each one's own clock, a replica whose clock
/// ran ahead of another's by more than a lease would take the other for dead and
/// claim its tasks, copies and deliveries while it lived, and one behind would write
/// retries already due for everyone. So on PostgreSQL the process keeps the server's
/// time, learned when the ledger opens, at every heartbeat and at least every 30 s
/// (each sample's round trip under 50 ms, so within 25 ms); on SQLite, one process's,
/// its own.
pub fn now_ms() -> i64 {
    local_ms() + SERVER_CLOCK_AHEAD_MS.load(Ordering::Relaxed)
}

/// Milliseconds since the Unix epoch by this machine's clock.
fn local_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl Ledger {
    /// Open (creating an SQLite file and its directory when needed) and bring the
    /// schema up to date. `None` for [`LedgerUrl::Off`].
    pub async fn open(url: &LedgerUrl, max_connections: u32) -> Result<Option<Self>, String> {
        let store: Box<dyn Store> = match url {
            LedgerUrl::Off => return Ok(None),
            LedgerUrl::Sqlite(path) => Box::new(SqliteStore::open(path, max_connections).await?),
            LedgerUrl::Postgres(url) => Box::new(PostgresStore::open(url, max_connections).await?),
        };
        let ledger = Self { store };
        // Before the first submit's times, not only at the tracker's first heartbeat.
        ledger.learn_server_clock().await;
        Ok(Some(ledger))
    }

    /// On PostgreSQL, how far the server's clock is from this machine's, asked again
    /// ([`now_ms`]). A sample that cannot be taken, or took too long, leaves the offset
    /// as it was.
    async fn learn_server_clock(&self) {
        if !self.shared() {
            return;
        }
        let before = local_ms();
        let server = self.store.reads().int(record::SERVER_CLOCK, Vec::new());
        let server = server.await;
        let after = local_ms();
        match server {
            Ok(Some(server)) if after - before <= CLOCK_SAMPLE_MAX_MS => {
                let ahead = server - before / 2 - after / 2;
                SERVER_CLOCK_AHEAD_MS.store(ahead, Ordering::Relaxed);
                SERVER_CLOCK_LEARNED_MS.store(after, Ordering::Relaxed);
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(error = %e, "ledger: the server's clock cannot be read"),
        }
    }

    /// The server's clock asked again when it was learned too long ago.
    async fn refresh_server_clock(&self) {
        let learned = SERVER_CLOCK_LEARNED_MS.load(Ordering::Relaxed);
        if self.shared() && local_ms() - learned > CLOCK_REFRESH_MS {
            self.learn_server_clock().await;
        }
    }

    /// Write the row of a new submit, unless the key's `Idempotency-Key` was seen
    /// (then what became of it) or the quota is used up. One transaction; with a quota
    /// it is serialised per owner, so that replicas agree on the count.
    pub async fn admit(&self, new: &NewTask<'_>) -> Result<Admission, LedgerError> {
        let now = now_ms();
        let at = Clock::at(now);
        for _ in 0..ADMIT_ATTEMPTS {
            if let Some(admission) = self.store.admit(new, at).await? {
                return Ok(admission);
            }
        }
        Err(LedgerError::Busy)
    }

    /// The upstream created the task: its ids, its first status and the answer given.
    pub async fn created(&self, row: i64, c: &Created<'_>) -> Result<(), LedgerError> {
        self.store.created(row, c, now_ms()).await
    }

    /// A provider is about to be tried: it is named on the row, and the row's clock
    /// restarts (a submit may take each provider's timeout in turn).
    pub async fn attempt(&self, row: i64, provider: &str) -> Result<(), LedgerError> {
        let args = params![row, provider, now_ms()];
        self.store.execute(record::SET_ATTEMPT, args).await?;
        Ok(())
    }

    /// No task was created. With `answer`, a retry with the same key gets it again
    /// (the request itself was refused); without, the key is released so that a retry
    /// submits afresh (the upstream declined: rate limit, outage).
    /// Whether it was this statement that ended the row (not one resolved before).
    pub async fn refused(&self, row: i64, answer: Option<&Answer>) -> Result<bool, LedgerError> {
        let status = answer.map(|a| i64::from(a.status));
        let body = answer.map(|a| a.body.as_str());
        let args = params![row, status, body, now_ms()];
        Ok(self.store.execute(record::SET_REFUSED, args).await? == 1)
    }

    /// The request was sent but its outcome is unknown (timeout, broken connection):
    /// the operator reconciles it; it is never resubmitted.
    pub async fn outcome_unknown(&self, row: i64, provider: &str) -> Result<(), LedgerError> {
        let args = params![row, provider, now_ms()];
        self.store.execute(record::SET_UNKNOWN, args).await?;
        Ok(())
    }

    /// The status last recorded for a task (by any replica's tracker or query).
    pub async fn status_of(
        &self,
        provider: &str,
        upstream_id: &str,
    ) -> Result<Option<TaskStatus>, LedgerError> {
        let args = params![provider, upstream_id];
        let status = self.store.reads().text(record::STATUS_OF, args).await?;
        record::decode_status(status.flatten().as_deref())
    }

    /// Whether other replicas may write to this ledger (PostgreSQL): a SQLite file is
    /// one gateway process's.
    pub fn shared(&self) -> bool {
        self.store.engine() == "postgres"
    }

    /// Of `provider`'s tasks `upstream_ids` (a JSON array of strings), those recorded
    /// with a status other than `status`, with the status recorded: one statement.
    pub async fn statuses_other_than(
        &self,
        provider: &str,
        status: TaskStatus,
        upstream_ids: &str,
    ) -> Result<Vec<(String, TaskStatus)>, LedgerError> {
        let sql = match self.store.engine() {
            "postgres" => record::STATUSES_OTHER_THAN_POSTGRES,
            _ => record::STATUSES_OTHER_THAN_SQLITE,
        };
        let args = params![provider, status.as_str(), upstream_ids];
        let rows = self.store.reads().tasks(sql, args).await?;
        Ok(rows
            .into_iter()
            .filter_map(|r| Some((r.upstream_id?, r.status?)))
            .collect())
    }

    /// A task's owner, its estimate and, when `with_params`, the parameters kept for
    /// its settlement: what its end is settled with.
    /// `unended`: only while nobody ended the task (a settlement is computed for that
    /// one; a lookup of an ended task reads no more).
    pub async fn priced(
        &self,
        provider: &str,
        upstream_id: &str,
        with_params: bool,
        unended: bool,
    ) -> Result<Option<Priced>, LedgerError> {
        let reads = self.store.reads();
        let args = params![provider, upstream_id];
        let sql = match unended {
            true => record::SELECT_UNENDED_BY_UPSTREAM,
            false => record::SELECT_BY_UPSTREAM,
        };
        let Some(row) = reads.tasks(sql, args).await?.pop() else {
            return Ok(None);
        };
        let price_params = match with_params {
            true => {
                let args = params![provider, upstream_id];
                reads.text(record::PRICE_PARAMS, args).await?.flatten()
            }
            false => None,
        };
        Ok(Some(Priced {
            owner: row.owner,
            cost_estimate: row.cost_estimate,
            cost_settled: row.cost_settled,
            price_params,
        }))
    }

    /// An `unknown_outcome` task the operator resolved: `completed` (settled at
    /// `settled`, its estimate when `None`) or `failed` (settled at 0). Whether it was
    /// one to resolve.
    pub async fn resolve(
        &self,
        row: i64,
        completed: bool,
        settled: Option<Micros>,
    ) -> Result<bool, LedgerError> {
        let (state, status, code, message) = match completed {
            true => (State::Completed, TaskStatus::Completed, None, None),
            false => (
                State::Failed,
                TaskStatus::Failed,
                Some("unknown_outcome"),
                Some("the submit's outcome was unknown; the operator resolved it as failed"),
            ),
        };
        let args = params![
            row,
            state.as_str(),
            status.as_str(),
            code,
            settled.map(|s| s.0),
            message,
            now_ms(),
        ];
        Ok(self.store.execute(record::SET_RESOLVED, args).await? == 1)
    }

    /// The row of a task, by its provider and upstream id.
    pub async fn by_upstream(
        &self,
        provider: &str,
        upstream_id: &str,
    ) -> Result<Option<TaskRecord>, LedgerError> {
        let args = params![provider, upstream_id];
        let rows = self.store.reads().tasks(record::SELECT_BY_UPSTREAM, args);
        Ok(rows.await?.pop())
    }

    /// One row by its number.
    pub async fn row(&self, row: i64) -> Result<Option<TaskRecord>, LedgerError> {
        let rows = self
            .store
            .reads()
            .tasks(record::SELECT_BY_ROW, params![row]);
        Ok(rows.await?.into_iter().next())
    }

    /// A query or the tracker saw the task finished: written once, the first time.
    /// True when this call was the first.
    pub async fn finished(
        &self,
        provider: &str,
        upstream_id: &str,
        state: &TaskState,
        settled: Option<Micros>,
    ) -> Result<bool, LedgerError> {
        let urls = serde_json::to_string(&state.urls).unwrap_or_default();
        let (code, message) = match &state.error {
            Some(e) => (Some(e.code.as_str()), Some(e.message.as_str())),
            None => (None, None),
        };
        let args = params![
            provider,
            upstream_id,
            State::from(state.status).as_str(),
            state.status.as_str(),
            urls.as_str(),
            code,
            message,
            now_ms(),
            state.progress.map(i64::from),
            settled.map(|s| s.0),
        ];
        let changed = self.store.execute(record::SET_FINISHED, args).await?;
        Ok(changed == 1)
    }

    /// `me` (this replica) is alive for `alive`: its first heartbeat. On SQLite, whose
    /// file is one process's, every other replica is dead from now: their tasks are
    /// followed at once.
    pub async fn register(&self, me: &str, alive: Duration) -> Result<(), LedgerError> {
        self.learn_server_clock().await;
        let now = now_ms();
        if !self.shared() {
            self.store.execute(record::OTHERS_DEAD, params![me]).await?;
        }
        let until = now + alive.as_millis() as i64;
        self.store
            .execute(record::REGISTER, params![me, until])
            .await?;
        Ok(())
    }

    /// `me` is alive for `alive` more; false when it was not alive any more (its
    /// heartbeat expired: its tasks may be followed by another replica already).
    pub async fn heartbeat(&self, me: &str, alive: Duration) -> Result<bool, LedgerError> {
        self.learn_server_clock().await;
        let now = now_ms();
        let until = now + alive.as_millis() as i64;
        let args = params![me, until, now];
        Ok(self.store.execute(record::HEARTBEAT, args).await? == 1)
    }

    /// The process stops: what it holds ahead of keys' budgets is given back now
    /// (PostgreSQL), not when it expires.
    pub async fn give_back_held(&self) -> Result<(), LedgerError> {
        self.store.give_back_held().await
    }

    /// Up to `limit` unfinished tasks nobody follows (new submits, tasks given back),
    /// followed by `me` from now; none when `me`'s heartbeat expired.
    pub async fn follow_new(&self, me: &str, limit: i64) -> Result<Vec<TaskRecord>, LedgerError> {
        let claim = PerEngine {
            sqlite: record::FOLLOW_NEW_SQLITE,
            postgres: record::FOLLOW_NEW_POSTGRES,
        };
        self.store
            .write_tasks(claim, params![me, now_ms(), limit])
            .await
    }

    /// Up to `limit` unfinished tasks of the replica whose heartbeat expired longest
    /// ago, followed by `me` from now; none when `me`'s heartbeat expired.
    pub async fn follow_orphans(
        &self,
        me: &str,
        limit: i64,
    ) -> Result<Vec<TaskRecord>, LedgerError> {
        let claim = PerEngine {
            sqlite: record::FOLLOW_ORPHANS_SQLITE,
            postgres: record::FOLLOW_ORPHANS_POSTGRES,
        };
        self.store
            .write_tasks(claim, params![me, now_ms(), limit])
            .await
    }

    /// Tasks followed under a name no heartbeat row knows (see
    /// [`record::UNKNOWN_FOLLOWER`]), given back for any replica to claim: otherwise
    /// nobody would ever follow them. A few names per call; the rows given back.
    pub async fn release_unknown(&self) -> Result<usize, LedgerError> {
        let mut released = 0;
        for _ in 0..4 {
            let name = self
                .store
                .reads()
                .text(record::UNKNOWN_FOLLOWER, Vec::new());
            let Some(Some(name)) = name.await? else {
                break;
            };
            let args = params![name.as_str(), now_ms()];
            let n = self.store.execute(record::RELEASE_UNKNOWN, args).await?;
            released += n;
            if n == 0 {
                // Its rows are still leased: looked at again later.
                break;
            }
        }
        Ok(released)
    }

    /// On SQLite, whose file is one process's once it listens: the copies and
    /// deliveries a process before this one (killed mid-way) leased are let go,
    /// rather than waited for until their leases run out (twice `copy_timeout_ms`
    /// for a copy: twenty minutes by default). Nothing on PostgreSQL, where other
    /// replicas may hold them.
    pub async fn release_earlier_leases(&self) -> Result<(), LedgerError> {
        if !self.shared() {
            for sql in [copies::RELEASE, deliveries::RELEASE] {
                self.store.execute(sql, params![]).await?;
            }
        }
        Ok(())
    }

    /// The unfinished tasks per replica alive (this one included): a replica that
    /// follows as many is not short of its share.
    pub async fn fair_share(&self) -> Result<i64, LedgerError> {
        let share = self
            .store
            .reads()
            .int(record::FAIR_SHARE, params![now_ms()]);
        Ok(share.await?.unwrap_or(0))
    }

    /// Dead replicas whose tasks are all followed by others now, forgotten.
    pub async fn forget_dead(&self) -> Result<usize, LedgerError> {
        self.store
            .execute(record::FORGET_DEAD, params![now_ms()])
            .await
    }

    /// The tracker asked about tasks `me` follows and they are not finished: each
    /// one's status and schedule written by one statement (a task another replica
    /// follows now is left alone). The rows changed.
    pub async fn polled(&self, me: &str, polled: &[Polled]) -> Result<usize, LedgerError> {
        self.write_polled(me, polled, false).await
    }

    /// `me` stops: the tasks it follows given back with their schedule (`polled`,
    /// one statement), then any other it still follows, then its heartbeat.
    pub async fn give_back(&self, me: &str, polled: &[Polled]) -> Result<usize, LedgerError> {
        let mut given = 0;
        for chunk in polled.chunks(GIVEN_BACK_AT_ONCE) {
            given += self.write_polled(me, chunk, true).await?;
        }
        given += self
            .store
            .execute(record::GIVE_BACK_REST, params![me])
            .await?;
        self.store.execute(record::LEAVE, params![me]).await?;
        Ok(given)
    }

    async fn write_polled(
        &self,
        me: &str,
        polled: &[Polled],
        give_back: bool,
    ) -> Result<usize, LedgerError> {
        if polled.is_empty() {
            return Ok(0);
        }
        let list = record::polled_json(polled);
        let sql = PerEngine {
            sqlite: if give_back {
                record::SET_GIVEN_BACK_SQLITE
            } else {
                record::SET_POLLED_SQLITE
            },
            postgres: record::SET_POLLED_POSTGRES,
        };
        let args = match self.shared() {
            true => params![me, list.as_str(), i64::from(give_back)],
            false => params![me, list.as_str()],
        };
        self.store.execute_in(sql, args).await
    }

    /// A page of an owner's tasks on one endpoint, newest first. `after` is the
    /// task the previous page ended with.
    pub async fn list(
        &self,
        owner: &str,
        endpoint: Endpoint,
        after: Option<Cursor<'_>>,
        limit: u32,
    ) -> Result<Page, LedgerError> {
        self.list_in(owner, endpoint, after, limit, false).await
    }

    /// [`Ledger::list`], oldest first when `ascending`.
    pub async fn list_in(
        &self,
        owner: &str,
        endpoint: Endpoint,
        after: Option<Cursor<'_>>,
        limit: u32,
        ascending: bool,
    ) -> Result<Page, LedgerError> {
        let endpoint = record::endpoint_name(endpoint);
        let before = match after {
            None if ascending => 0,
            None => i64::MAX,
            Some(after) => {
                let args = params![
                    after.provider,
                    after.upstream_id,
                    owner,
                    after.task_id,
                    endpoint
                ];
                match self.store.reads().int(record::ROW_OF_TASK, args).await? {
                    Some(row) => row,
                    None => return Ok(Page::unknown_cursor()),
                }
            }
        };
        let args = params![owner, endpoint, before, i64::from(limit) + 1];
        let statement = if ascending {
            record::LIST_ASCENDING
        } else {
            record::LIST
        };
        let mut rows = self.store.reads().tasks(statement, args).await?;
        let has_more = rows.len() > limit as usize;
        rows.truncate(limit as usize);
        Ok(Page {
            rows,
            has_more,
            cursor_known: true,
        })
    }

    /// Housekeeping: rows still `submitting` after `stale` become `unknown_outcome`
    /// (returned, to be logged), keys older than `idempotency_ttl` are forgotten, and
    /// expired budget grants given back (PostgreSQL).
    pub async fn sweep(
        &self,
        stale: Duration,
        idempotency_ttl: Duration,
    ) -> Result<Vec<TaskRecord>, LedgerError> {
        let now = now_ms();
        let stale_before = now - stale.as_millis() as i64;
        let forget_before = now - idempotency_ttl.as_millis() as i64;
        // A failure leaves them for the next sweep, and the rest of this one runs.
        if let Err(e) = self.store.give_back_expired().await {
            tracing::warn!(error = %e, "expired budget grants not given back");
        }
        let expire = PerEngine {
            sqlite: record::EXPIRE_SUBMITTING,
            postgres: record::EXPIRE_SUBMITTING,
        };
        let expired = self
            .store
            .write_tasks(expire, params![stale_before, now])
            .await?;
        let forget = params![forget_before];
        self.store.execute(record::FORGET_KEYS, forget).await?;
        Ok(expired)
    }

    /// One batch of retention: of the `batch` rows after row `after`, the tasks that
    /// finished before `before_ms` and owe nothing (no webhook or copy pending, no
    /// stored result kept) are deleted, their usage kept as the day's sums. The next
    /// batch starts after [`Pruned::next`]; `None` when the rows after `after` were
    /// submitted since `before_ms` (none of them can have finished before it): the
    /// pass is over. Rows are looked at in the order they were written, which is the
    /// order they were submitted in, so a pass never reads the young rows past that.
    pub async fn prune(
        &self,
        after: i64,
        batch: i64,
        before_ms: i64,
    ) -> Result<Pruned, LedgerError> {
        let over = Pruned {
            rows: 0,
            next: None,
        };
        let reads = self.store.reads();
        match reads.int(record::CREATED_AFTER, params![after]).await? {
            Some(created) if created < before_ms => {}
            _ => return Ok(over),
        }
        let last = reads
            .int(record::PRUNE_WINDOW, params![after, batch])
            .await?
            .unwrap_or(after);
        if last <= after {
            return Ok(over);
        }
        let prune = PerEngine {
            sqlite: record::PRUNE_SQLITE,
            postgres: record::PRUNE_POSTGRES,
        };
        let rows = self
            .store
            .execute_when_idle(prune, params![after, last, before_ms])
            .await?;
        Ok(Pruned {
            rows,
            next: Some(last),
        })
    }

    /// Rows in `state` now.
    pub async fn count(&self, state: State) -> Result<i64, LedgerError> {
        let args = params![state.as_str()];
        let count = self.store.reads().int(record::COUNT_STATE, args).await?;
        Ok(count.unwrap_or(0))
    }

    /// The unfinished tasks per provider, whoever follows them.
    pub async fn tracked(&self) -> Result<Vec<Tracked>, LedgerError> {
        self.store.reads().tracked(record::TRACKED, params![]).await
    }

    /// Usage per key, model and UTC day since `since_ms`, for operators.
    pub async fn usage(
        &self,
        key: Option<&str>,
        since_ms: i64,
        until_ms: i64,
    ) -> Result<Vec<UsageRow>, LedgerError> {
        match key {
            Some(owner) => self.store.usage_of(owner, since_ms, until_ms).await,
            None => {
                let args = params![key, since_ms, until_ms];
                self.store.reads().usage(record::USAGE, args).await
            }
        }
    }

    /// What `owner`'s tasks cost (settled and reserved) today and this month (UTC),
    /// as budgets count it, in millionths.
    pub async fn spent(&self, owner: &str) -> Result<(Micros, Micros), LedgerError> {
        let at = Clock::at(now_ms());
        let day = at.day_start / admission::DAY_MS;
        let since = |from: i64| params![owner, from, i64::MAX];
        let reads = self.store.reads();
        let today = reads.int(record::SPENT_SINCE, since(day)).await?;
        let month = at.month_start / admission::DAY_MS;
        let this_month = reads.int(record::SPENT_SINCE, since(month)).await?;
        Ok((Micros(today.unwrap_or(0)), Micros(this_month.unwrap_or(0))))
    }

    /// Rows for operators, newest first, optionally of one state and one key.
    pub async fn tasks(
        &self,
        state: Option<State>,
        key: Option<&str>,
        limit: i64,
    ) -> Result<Vec<TaskRecord>, LedgerError> {
        let args = params![state.map(State::as_str), key, limit];
        let statement = match state {
            Some(state) if state.rare() => record::SELECT_IN_STATE,
            _ => record::SELECT_FILTERED,
        };
        self.store.reads().tasks(statement, args).await
    }

    /// One row by its sealed task id or its upstream id.
    pub async fn find(&self, id: &str) -> Result<Option<TaskRecord>, LedgerError> {
        let rows = self
            .store
            .reads()
            .tasks(record::SELECT_BY_ANY_ID, params![id]);
        Ok(rows.await?.into_iter().next())
    }
}

impl From<TaskStatus> for State {
    fn from(s: TaskStatus) -> Self {
        match s {
            TaskStatus::Completed => State::Completed,
            TaskStatus::Failed => State::Failed,
            TaskStatus::Queued | TaskStatus::Processing => State::Submitted,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use self::admission::DAY_MS;
    use crate::config::QuotaConfig;

    async fn ledger(dir: &tempfile::TempDir) -> Ledger {
        let url = LedgerUrl::parse("sqlite://sub/ledger.db", dir.path()).unwrap();
        Ledger::open(&url, 4).await.unwrap().unwrap()
    }

    fn new<'a>(owner: &'a str, key: Option<&'a str>, fp: &str) -> NewTask<'a> {
        NewTask {
            fingerprint: fp.into(),
            idempotency_key: key,
            provider: Some("p"),
            ..NewTask::example(owner)
        }
    }

    fn answer(n: u32) -> Answer {
        Answer {
            status: 200,
            body: format!("{{\"id\":\"task_{n}\"}}"),
        }
    }

    fn after<'a>(task_id: &'a str, upstream_id: &'a str) -> Cursor<'a> {
        Cursor {
            task_id,
            provider: "p",
            upstream_id,
        }
    }

    async fn create(l: &Ledger, row: i64, n: u32) {
        let a = answer(n);
        let c = Created {
            provider: "p",
            upstream_id: &format!("up-{n}"),
            task_id: &format!("task_{n}"),
            status: TaskStatus::Queued,
            answer: &a,
            first_poll: Duration::from_secs(5),
        };
        l.created(row, &c).await.unwrap();
    }

    /// What a replica's waiting clients hear of: one statement names the tasks whose
    /// recorded status differs from the one known, of those asked about.
    #[tokio::test]
    async fn statuses_other_than_the_known_one_are_read_in_one_statement() {
        let dir = tempfile::tempdir().unwrap();
        let l = ledger(&dir).await;
        for n in 0..3 {
            let Admission::Fresh(row) = l.admit(&new("a", None, &format!("fp{n}"))).await.unwrap()
            else {
                panic!()
            };
            create(&l, row, n).await;
        }
        let done = TaskState {
            status: TaskStatus::Completed,
            progress: None,
            urls: vec![],
            error: None,
        };
        assert!(l.finished("p", "up-1", &done, None).await.unwrap());
        assert!(l.finished("p", "up-2", &done, None).await.unwrap());
        assert!(!l.shared(), "a SQLite file is one process's");
        let asked = r#"["up-0","up-1","up-9"]"#;
        let found = l
            .statuses_other_than("p", TaskStatus::Queued, asked)
            .await
            .unwrap();
        assert_eq!(found, [("up-1".to_string(), TaskStatus::Completed)]);
        let other = l.statuses_other_than("q", TaskStatus::Queued, asked).await;
        assert!(other.unwrap().is_empty(), "another provider's");
    }

    /// The tracker's ledger side: a replica follows the unfinished tasks nobody
    /// follows, writes back what its status requests taught by one statement, only
    /// of tasks it still follows, and gives them back with their schedule when it
    /// stops; a dead replica's tasks are followed by another, in batches.
    #[tokio::test]
    async fn followed_tasks_are_written_back_by_one_statement_and_given_back() {
        let dir = tempfile::tempdir().unwrap();
        let l = ledger(&dir).await;
        let mut rows = Vec::new();
        for n in 0..3 {
            let Admission::Fresh(row) = l.admit(&new("a", None, &format!("fp{n}"))).await.unwrap()
            else {
                panic!()
            };
            let a = answer(n);
            let c = Created {
                provider: "p",
                upstream_id: &format!("up-{n}"),
                task_id: &format!("task_{n}"),
                status: TaskStatus::Queued,
                answer: &a,
                first_poll: Duration::ZERO,
            };
            l.created(row, &c).await.unwrap();
            rows.push(row);
        }
        let alive = Duration::from_secs(30);
        // No heartbeat, no task.
        assert!(l.follow_new("me", 10).await.unwrap().is_empty());
        l.register("me", alive).await.unwrap();
        let claimed = l.follow_new("me", 10).await.unwrap();
        assert_eq!(claimed.len(), 3);
        assert!(l.follow_new("me", 10).await.unwrap().is_empty(), "followed");
        assert!(l.heartbeat("me", alive).await.unwrap());
        let before = batches(&l);
        let due = claimed[0].next_poll_ms.unwrap();
        let polled = [
            Polled::answered(rows[0], TaskStatus::Processing, due, Duration::from_secs(7)),
            Polled::answered(rows[1], TaskStatus::Queued, due, Duration::from_secs(5)),
        ];
        // On time: an interval after it was due, whenever the answer came.
        assert_eq!(polled[1].next_ms, due + 5000);
        // Far behind: an interval after the answer.
        let late = Polled::answered(
            rows[1],
            TaskStatus::Queued,
            due - 60_000,
            Duration::from_secs(5),
        );
        assert!(late.next_ms >= late.answered_ms + 5000, "{late:?}");
        assert_eq!(l.polled("me", &polled).await.unwrap(), 2);
        assert_eq!(batches(&l), before + 1, "one statement, one batch");
        // Another replica's write-back of a task it does not follow changes nothing.
        let other = [Polled::answered(
            rows[2],
            TaskStatus::Processing,
            due,
            Duration::ZERO,
        )];
        assert_eq!(l.polled("other", &other).await.unwrap(), 0);
        for (p, row) in polled.iter().zip(&rows) {
            let r = l.row(*row).await.unwrap().unwrap();
            assert_eq!(r.status, Some(p.status));
            assert_eq!(r.poll_interval_ms, Some(p.interval_ms));
            assert_eq!(r.next_poll_ms, Some(p.next_ms));
            assert_eq!(r.updated_ms, p.answered_ms);
            assert_eq!(r.lease_owner.as_deref(), Some("me"), "still followed");
        }
        let held = l.row(rows[2]).await.unwrap().unwrap();
        assert_eq!(
            (held.status, held.lease_owner.as_deref()),
            (Some(TaskStatus::Queued), Some("me"))
        );
        let tracked = l.tracked().await.unwrap();
        assert_eq!(tracked.len(), 1);
        assert_eq!((tracked[0].provider.as_str(), tracked[0].tasks), ("p", 3));

        // Stopping: the schedules given, and every task followed given back.
        let given = [Polled::answered(
            rows[2],
            TaskStatus::Queued,
            due,
            Duration::from_secs(9),
        )];
        assert_eq!(l.give_back("me", &given).await.unwrap(), 3);
        let r = l.row(rows[2]).await.unwrap().unwrap();
        assert_eq!(
            (r.lease_owner, r.next_poll_ms),
            (None, Some(given[0].next_ms))
        );
        assert!(!l.heartbeat("me", alive).await.unwrap(), "gone");

        // Another follows them; it dies (on SQLite, a replica registering makes every
        // other one dead): a third follows its tasks, in batches.
        l.register("other", alive).await.unwrap();
        assert_eq!(l.follow_new("other", 10).await.unwrap().len(), 3);
        l.register("third", alive).await.unwrap();
        assert!(!l.heartbeat("other", alive).await.unwrap());
        assert!(l.follow_new("other", 10).await.unwrap().is_empty(), "dead");
        assert!(l.follow_new("third", 10).await.unwrap().is_empty());
        assert_eq!(l.follow_orphans("third", 2).await.unwrap().len(), 2);
        assert_eq!(l.forget_dead().await.unwrap(), 0, "it still has a task");
        assert_eq!(l.follow_orphans("third", 2).await.unwrap().len(), 1);
        assert_eq!(l.forget_dead().await.unwrap(), 1);
        for row in &rows {
            let r = l.row(*row).await.unwrap().unwrap();
            assert_eq!(r.lease_owner.as_deref(), Some("third"));
        }
    }

    /// The operator resolved a task of unknown outcome; the provider's answer to its
    /// submit arrives after all: the decision and its settlement stand, once.
    #[tokio::test]
    async fn a_submit_s_late_answer_leaves_a_resolved_task_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let l = ledger(&dir).await;
        let priced = NewTask {
            cost_estimate: Some(Micros(500)),
            ..new("a", None, "fp")
        };
        let Admission::Fresh(row) = l.admit(&priced).await.unwrap() else {
            panic!()
        };
        l.outcome_unknown(row, "p").await.unwrap();
        assert!(l.resolve(row, false, None).await.unwrap());
        assert!(!l.refused(row, None).await.unwrap(), "not ended again");
        create(&l, row, 1).await;
        l.outcome_unknown(row, "p").await.unwrap();
        let after = l.row(row).await.unwrap().unwrap();
        assert_eq!(after.state, State::Failed);
        assert_eq!(after.cost_settled, Some(0));
        assert_eq!(
            after.upstream_id, None,
            "the late creation was not recorded"
        );
        assert_eq!(l.spent("a").await.unwrap().0, Micros(0));
    }

    #[test]
    fn urls_name_the_engine() {
        let dir = Path::new("/etc/mg");
        assert_eq!(LedgerUrl::parse("none", dir), Ok(LedgerUrl::Off));
        assert_eq!(
            LedgerUrl::parse("sqlite://.mediagate/l.db", dir),
            Ok(LedgerUrl::Sqlite(PathBuf::from("/etc/mg/.mediagate/l.db")))
        );
        assert!(matches!(
            LedgerUrl::parse("postgres://u@h/db", dir),
            Ok(LedgerUrl::Postgres(_))
        ));
        for bad in ["", "sqlite://", "mysql://x", "ledger.db"] {
            assert!(LedgerUrl::parse(bad, dir).is_err(), "{bad}");
        }
    }

    #[tokio::test]
    async fn a_key_replays_its_answer_and_refuses_another_request() {
        let dir = tempfile::tempdir().unwrap();
        let l = ledger(&dir).await;
        let Admission::Fresh(row) = l.admit(&new("a", Some("k"), "fp1")).await.unwrap() else {
            panic!("first use of a key is fresh");
        };
        assert!(
            matches!(l.admit(&new("a", Some("k"), "fp1")).await.unwrap(), Admission::InFlight(r) if r == row)
        );
        create(&l, row, 1).await;
        assert!(
            matches!(l.admit(&new("a", Some("k"), "fp1")).await.unwrap(), Admission::Replay(a) if a == answer(1))
        );
        assert!(matches!(
            l.admit(&new("a", Some("k"), "fp2")).await.unwrap(),
            Admission::Mismatch
        ));
        // Keys belong to their owner.
        assert!(matches!(
            l.admit(&new("b", Some("k"), "fp1")).await.unwrap(),
            Admission::Fresh(_)
        ));
        // The same key survives reopening the file.
        drop(l);
        let l = ledger(&dir).await;
        assert!(matches!(
            l.admit(&new("a", Some("k"), "fp1")).await.unwrap(),
            Admission::Replay(_)
        ));
    }

    #[tokio::test]
    async fn refusals_release_the_key_or_keep_the_answer() {
        let dir = tempfile::tempdir().unwrap();
        let l = ledger(&dir).await;
        let Admission::Fresh(row) = l.admit(&new("a", Some("declined"), "fp")).await.unwrap()
        else {
            panic!()
        };
        l.refused(row, None).await.unwrap();
        assert!(matches!(
            l.admit(&new("a", Some("declined"), "fp")).await.unwrap(),
            Admission::Fresh(_)
        ));
        let Admission::Fresh(row) = l.admit(&new("a", Some("invalid"), "fp")).await.unwrap() else {
            panic!()
        };
        let kept = Answer {
            status: 400,
            body: "{}".into(),
        };
        l.refused(row, Some(&kept)).await.unwrap();
        assert!(
            matches!(l.admit(&new("a", Some("invalid"), "fp")).await.unwrap(), Admission::Replay(a) if a == kept)
        );
        let Admission::Fresh(row) = l.admit(&new("a", Some("lost"), "fp")).await.unwrap() else {
            panic!()
        };
        l.outcome_unknown(row, "p").await.unwrap();
        assert!(matches!(
            l.admit(&new("a", Some("lost"), "fp")).await.unwrap(),
            Admission::OutcomeUnknown
        ));
    }

    #[tokio::test]
    async fn quotas_count_the_day_and_give_failed_tasks_back() {
        let dir = tempfile::tempdir().unwrap();
        let l = ledger(&dir).await;
        let quota = QuotaConfig {
            tasks_per_day: Some(2),
            video_seconds_per_day: None,
        };
        let with_quota = |n: u32| NewTask {
            quota: Some(quota),
            ..new("q", None, &format!("fp{n}"))
        };
        let Admission::Fresh(first) = l.admit(&with_quota(1)).await.unwrap() else {
            panic!()
        };
        create(&l, first, 1).await;
        assert!(matches!(
            l.admit(&with_quota(2)).await.unwrap(),
            Admission::Fresh(_)
        ));
        let Admission::QuotaExceeded { what, resets_ms } = l.admit(&with_quota(3)).await.unwrap()
        else {
            panic!("the third task of the day is over the quota");
        };
        assert_eq!(what, "tasks_per_day");
        assert_eq!(resets_ms % DAY_MS, 0);
        assert!(resets_ms > now_ms() && resets_ms <= now_ms() + DAY_MS);
        let failed = TaskState {
            status: TaskStatus::Failed,
            progress: None,
            urls: vec![],
            error: None,
        };
        l.finished("p", "up-1", &failed, None).await.unwrap();
        assert!(matches!(
            l.admit(&with_quota(3)).await.unwrap(),
            Admission::Fresh(_)
        ));
    }

    #[tokio::test]
    async fn listing_pages_newest_first_without_gaps_while_tasks_arrive() {
        let dir = tempfile::tempdir().unwrap();
        let l = ledger(&dir).await;
        for n in 0..5 {
            let Admission::Fresh(row) = l.admit(&new("a", None, "fp")).await.unwrap() else {
                panic!()
            };
            create(&l, row, n).await;
        }
        let Admission::Fresh(other) = l.admit(&new("b", None, "fp")).await.unwrap() else {
            panic!()
        };
        create(&l, other, 99).await;
        let first = l.list("a", Endpoint::ModelCenter, None, 2).await.unwrap();
        let ids = |p: &Page| {
            p.rows
                .iter()
                .map(|r| r.task_id.clone().unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(&first), ["task_4", "task_3"]);
        assert!(first.has_more);
        // A new task arrives between pages: it is not on the next page.
        let Admission::Fresh(row) = l.admit(&new("a", None, "fp")).await.unwrap() else {
            panic!()
        };
        create(&l, row, 5).await;
        let second = l
            .list("a", Endpoint::ModelCenter, Some(after("task_3", "up-3")), 2)
            .await
            .unwrap();
        assert_eq!(ids(&second), ["task_2", "task_1"]);
        let last = l
            .list("a", Endpoint::ModelCenter, Some(after("task_1", "up-1")), 2)
            .await
            .unwrap();
        assert_eq!(ids(&last), ["task_0"]);
        assert!(!last.has_more);
        // Another key's task is no cursor, and another endpoint lists nothing.
        assert!(
            !l.list(
                "a",
                Endpoint::ModelCenter,
                Some(after("task_99", "up-99")),
                2
            )
            .await
            .unwrap()
            .cursor_known
        );
        assert!(
            l.list("a", Endpoint::AlphaVideos, None, 2)
                .await
                .unwrap()
                .rows
                .is_empty()
        );
    }

    #[tokio::test]
    async fn stale_submits_become_unknown_and_old_keys_are_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let l = ledger(&dir).await;
        let Admission::Fresh(row) = l.admit(&new("a", Some("k"), "fp")).await.unwrap() else {
            panic!()
        };
        assert!(
            l.sweep(Duration::from_secs(60), Duration::from_secs(3600))
                .await
                .unwrap()
                .is_empty()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        // A key whose submit is still in flight is not forgotten, however old.
        l.sweep(Duration::from_secs(60), Duration::ZERO)
            .await
            .unwrap();
        assert!(matches!(
            l.admit(&new("a", Some("k"), "fp")).await.unwrap(),
            Admission::InFlight(r) if r == row
        ));
        let expired = l
            .sweep(Duration::from_millis(10), Duration::from_secs(3600))
            .await
            .unwrap();
        assert_eq!(expired.iter().map(|r| r.id).collect::<Vec<_>>(), [row]);
        assert_eq!(l.count(State::UnknownOutcome).await.unwrap(), 1);
        l.sweep(Duration::from_secs(60), Duration::ZERO)
            .await
            .unwrap();
        assert!(matches!(
            l.admit(&new("a", Some("k"), "fp")).await.unwrap(),
            Admission::Fresh(_)
        ));
    }

    /// `mediagate tasks --state …` and a key's usage are read by statements of their
    /// own (a rare state through its index, a key through its rows): the same rows
    /// as the statement of every state and every key, filtered.
    #[tokio::test]
    async fn operators_read_a_state_and_a_key_as_filters_of_the_whole() {
        let dir = tempfile::tempdir().unwrap();
        let l = ledger(&dir).await;
        let mut rows = Vec::new();
        for (n, owner) in ["a", "b", "a", "b", "a"].into_iter().enumerate() {
            let Admission::Fresh(row) =
                l.admit(&new(owner, None, &format!("fp{n}"))).await.unwrap()
            else {
                panic!()
            };
            if n % 2 == 0 {
                create(&l, row, n as u32).await;
            }
            rows.push((row, owner, n % 2 == 0));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        l.sweep(Duration::from_millis(10), Duration::from_secs(3600))
            .await
            .unwrap();
        let ids = |rows: Vec<TaskRecord>| rows.into_iter().map(|r| r.id).collect::<Vec<_>>();
        let newest = |created: bool, owner: Option<&str>| {
            let mut of: Vec<i64> = rows
                .iter()
                .filter(|(_, o, c)| *c == created && owner.is_none_or(|w| w == *o))
                .map(|(row, _, _)| *row)
                .collect();
            of.reverse();
            of
        };
        for owner in [None, Some("a"), Some("b")] {
            let unknown = l.tasks(Some(State::UnknownOutcome), owner, 100);
            assert_eq!(ids(unknown.await.unwrap()), newest(false, owner));
            let submitted = l.tasks(Some(State::Submitted), owner, 100);
            assert_eq!(ids(submitted.await.unwrap()), newest(true, owner));
        }
        let one = l.tasks(Some(State::Submitted), None, 1).await.unwrap();
        assert_eq!(ids(one), newest(true, None)[..1]);
        assert!(
            l.tasks(Some(State::Completed), None, 100)
                .await
                .unwrap()
                .is_empty()
        );

        let line = |u: &UsageRow| {
            let counts = (u.submitted, u.completed, u.failed, u.video_seconds);
            (
                u.owner.clone(),
                u.model.clone(),
                u.day,
                counts,
                u.spent,
                u.reserved,
            )
        };
        let all = l.usage(None, 0, i64::MAX).await.unwrap();
        assert_eq!(all.len(), 2, "{all:?}");
        for owner in ["a", "b"] {
            let of = l.usage(Some(owner), 0, i64::MAX).await.unwrap();
            let whole: Vec<_> = all.iter().filter(|u| u.owner == owner).map(line).collect();
            assert_eq!(of.iter().map(line).collect::<Vec<_>>(), whole);
        }
        assert!(l.usage(Some("a"), 0, 1).await.unwrap().is_empty());
    }

    fn sqlite_writer(l: &Ledger) -> &writer::Writer {
        l.store.sqlite_writer().expect("an SQLite ledger")
    }

    /// The SQLite writer of `l`, and a write that keeps it busy for `hold`: writes
    /// queued meanwhile are committed together, in the next transaction.
    fn hold_writer(l: &Arc<Ledger>, hold: Duration) -> tokio::task::JoinHandle<()> {
        hold_writer_while(l, move || std::thread::sleep(hold))
    }

    /// The SQLite writer of `l` kept busy by a write that runs `hold`.
    fn hold_writer_while(
        l: &Arc<Ledger>,
        hold: impl FnOnce() + Send + 'static,
    ) -> tokio::task::JoinHandle<()> {
        let l = l.clone();
        tokio::spawn(async move {
            sqlite_writer(&l)
                .run(move |_| {
                    hold();
                    Ok(())
                })
                .await
                .unwrap();
        })
    }

    fn batches(l: &Ledger) -> u64 {
        sqlite_writer(l).batches()
    }

    #[tokio::test]
    async fn admits_with_one_key_in_one_batch_make_one_row() {
        let dir = tempfile::tempdir().unwrap();
        let l = Arc::new(ledger(&dir).await);
        let before = batches(&l);
        let held = hold_writer(&l, Duration::from_millis(200));
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut admits = tokio::task::JoinSet::new();
        for _ in 0..20 {
            let l = l.clone();
            admits.spawn(async move { l.admit(&new("a", Some("same"), "fp")).await.unwrap() });
        }
        // Queued while the writer is busy: they wait for the same transaction.
        tokio::time::sleep(Duration::from_millis(50)).await;
        held.await.unwrap();
        let (mut fresh, mut in_flight) = (Vec::new(), Vec::new());
        while let Some(admission) = admits.join_next().await {
            match admission.unwrap() {
                Admission::Fresh(row) => fresh.push(row),
                Admission::InFlight(row) => in_flight.push(row),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(fresh.len(), 1, "one row for the key");
        assert!(in_flight.iter().all(|r| *r == fresh[0]));
        assert_eq!(in_flight.len(), 19);
        assert_eq!(
            batches(&l) - before,
            2,
            "the holding write's transaction, then one for the twenty admits"
        );
        assert_eq!(l.count(State::Submitting).await.unwrap(), 1);
    }

    fn handovers(l: &Ledger) -> u64 {
        sqlite_writer(l).handovers()
    }

    /// A write that keeps the SQLite writer of `l` busy until the returned sender
    /// is used (or dropped).
    fn hold_writer_until_released(
        l: &Arc<Ledger>,
    ) -> (tokio::task::JoinHandle<()>, std::sync::mpsc::Sender<()>) {
        let (release, released) = std::sync::mpsc::channel::<()>();
        let held = hold_writer_while(l, move || {
            let _ = released.recv();
        });
        (held, release)
    }

    /// Wait until `n` writes more than `before` were queued on the writer of `l`.
    async fn until_queued(l: &Ledger, before: u64, n: u64) {
        let writer = sqlite_writer(l);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while writer.queued() < before + n {
            assert!(std::time::Instant::now() < deadline, "writes never queued");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    fn queued(l: &Ledger) -> u64 {
        sqlite_writer(l).queued()
    }

    #[tokio::test]
    async fn a_batch_is_answered_in_one_handover_per_serving_thread() {
        let dir = tempfile::tempdir().unwrap();
        let l = Arc::new(ledger(&dir).await);
        let workers = crate::workers::Workers::start(2).unwrap();
        let (batches_before, handovers_before) = (batches(&l), handovers(&l));
        let queued_before = queued(&l);
        let (held, release) = hold_writer_until_released(&l);
        until_queued(&l, queued_before, 1).await;
        let mut admits = Vec::new();
        for n in 0..20 {
            let l = l.clone();
            admits.push(workers.next().spawn(async move {
                let key = format!("k{n}");
                l.admit(&new("a", Some(&key), "fp")).await.unwrap()
            }));
        }
        // All twenty wait behind the held write: they share the next transaction.
        until_queued(&l, queued_before, 21).await;
        release.send(()).unwrap();
        held.await.unwrap();
        let mut rows = Vec::new();
        for admit in admits {
            match admit.await.unwrap() {
                Admission::Fresh(row) => rows.push(row),
                other => panic!("{other:?}"),
            }
        }
        rows.sort_unstable();
        rows.dedup();
        assert_eq!(rows.len(), 20, "twenty rows, each answered with its own");
        assert_eq!(
            batches(&l) - batches_before,
            2,
            "the holding write's transaction, then one for the twenty admits"
        );
        assert_eq!(
            handovers(&l) - handovers_before,
            2,
            "one per serving thread; the holding write (off the workers) answered directly"
        );
    }

    #[tokio::test]
    async fn a_write_queued_by_a_stopped_serving_thread_is_still_committed() {
        let dir = tempfile::tempdir().unwrap();
        let l = Arc::new(ledger(&dir).await);
        let workers = crate::workers::Workers::start(1).unwrap();
        let queued_before = queued(&l);
        let (held, release) = hold_writer_until_released(&l);
        until_queued(&l, queued_before, 1).await;
        // Queued on the worker, which stops (its runtime and answering task gone)
        // before the writer gets to the write.
        let queued = {
            let l = l.clone();
            workers.next().spawn(async move {
                l.admit(&new("a", Some("gone"), "fp")).await.unwrap();
            })
        };
        until_queued(&l, queued_before, 2).await;
        drop(workers);
        assert!(queued.await.unwrap_err().is_cancelled());
        release.send(()).unwrap();
        held.await.unwrap();
        // The writer went on: the write stands, and the next one is answered.
        assert!(matches!(
            l.admit(&new("a", Some("gone"), "fp")).await.unwrap(),
            Admission::InFlight(_)
        ));
        assert_eq!(l.count(State::Submitting).await.unwrap(), 1);
    }

    #[tokio::test]
    async fn a_failed_write_takes_nothing_of_its_batch_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let l = Arc::new(ledger(&dir).await);
        let before = batches(&l);
        let held = hold_writer(&l, Duration::from_millis(300));
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut admits = tokio::task::JoinSet::new();
        for n in 0..5 {
            let l = l.clone();
            admits.spawn(async move { l.admit(&new("a", None, &format!("fp{n}"))).await });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        // Queued after the admits, in the same batch: a write that changes their rows
        // and then fails. Its change is rolled back, their rows are committed.
        let failing = {
            let l = l.clone();
            tokio::spawn(async move {
                sqlite_writer(&l)
                    .run(|conn| {
                        conn.execute("UPDATE tasks SET model = 'changed'", [])?;
                        Ok(conn.execute("INSERT INTO no_such_table VALUES (1)", [])?)
                    })
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        held.await.unwrap();
        let error = failing.await.unwrap().unwrap_err();
        assert!(error.to_string().contains("no_such_table"), "{error}");
        let mut rows = Vec::new();
        while let Some(admission) = admits.join_next().await {
            let Admission::Fresh(row) = admission.unwrap().unwrap() else {
                panic!("fresh")
            };
            rows.push(row);
        }
        assert_eq!(rows.len(), 5);
        assert_eq!(
            batches(&l) - before,
            2,
            "the holding write's batch, then one for the rest"
        );
        for row in rows {
            // Committed, and read back by another connection.
            let record = l.row(row).await.unwrap().expect("committed");
            assert_eq!(record.model, "m", "the failed write's change was undone");
        }
    }

    /// Retention's writes wait for a moment when no other write does and commit
    /// alone: queued before five admits, one runs after all of them, in a
    /// transaction of its own, so no admit waits for its commit.
    #[tokio::test]
    async fn a_background_write_waits_for_the_others_and_commits_alone() {
        let dir = tempfile::tempdir().unwrap();
        let l = Arc::new(ledger(&dir).await);
        let before = batches(&l);
        let held = hold_writer(&l, Duration::from_millis(300));
        tokio::time::sleep(Duration::from_millis(50)).await;
        let background = {
            let l = l.clone();
            tokio::spawn(async move {
                sqlite_writer(&l)
                    .run_when_idle(|conn| {
                        let rows: i64 =
                            conn.query_row("SELECT count(*) FROM tasks", [], |r| r.get(0))?;
                        Ok(rows)
                    })
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut admits = tokio::task::JoinSet::new();
        for n in 0..5 {
            let l = l.clone();
            admits.spawn(async move { l.admit(&new("a", None, &format!("fp{n}"))).await });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        held.await.unwrap();
        while let Some(admission) = admits.join_next().await {
            assert!(matches!(admission.unwrap().unwrap(), Admission::Fresh(_)));
        }
        let seen = background.await.unwrap().unwrap();
        assert_eq!(seen, 5, "it ran after the admits queued behind it");
        assert_eq!(
            batches(&l) - before,
            3,
            "the holding write's batch, the admits', then the background write's own"
        );
    }

    #[tokio::test]
    async fn a_failed_statement_without_a_savepoint_takes_nothing_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let l = Arc::new(ledger(&dir).await);
        let held = hold_writer(&l, Duration::from_millis(300));
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut admits = tokio::task::JoinSet::new();
        for n in 0..5 {
            let l = l.clone();
            admits.spawn(async move { l.admit(&new("a", None, &format!("fp{n}"))).await });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        // In the same batch, one statement that changes rows and then fails on the
        // last one: SQLite undoes the statement, the admits' rows stay.
        let failing = {
            let l = l.clone();
            tokio::spawn(async move {
                l.store
                    .execute(
                        "UPDATE tasks SET model = CASE WHEN id = (SELECT MAX(id) FROM tasks) THEN NULL ELSE 'changed' END",
                        Vec::new(),
                    )
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        held.await.unwrap();
        let error = failing.await.unwrap().unwrap_err();
        assert!(error.to_string().contains("NOT NULL"), "{error}");
        let mut rows = Vec::new();
        while let Some(admission) = admits.join_next().await {
            let Admission::Fresh(row) = admission.unwrap().unwrap() else {
                panic!("fresh")
            };
            rows.push(row);
        }
        assert_eq!(rows.len(), 5);
        for row in rows {
            let record = l.row(row).await.unwrap().expect("committed");
            assert_eq!(
                record.model, "m",
                "the failed statement's changes were undone"
            );
        }
    }

    /// The write-ahead insert as it was while the schema was at 0003.
    const INSERT_AT_0003: &str = "INSERT INTO tasks (owner, endpoint, model, kind, fingerprint, idempotency_key, video_seconds, state, provider, created_ms, updated_ms, callback_url) VALUES ($1, $2, $3, $4, $5, $6, $7, 'submitting', $9, $8, $8, $10) RETURNING id";

    #[tokio::test]
    async fn a_ledger_written_at_0003_upgrades_and_keeps_its_rows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/ledger.db");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        // The schema of 0001–0003, with rows written by its statements: tasks of two
        // owners, one with an idempotency key, one finished with a webhook owed.
        {
            let mut conn = rusqlite::Connection::open(&path).unwrap();
            sqlite_schema::migrate_to(&mut conn, 3).unwrap();
            for n in 0..5_i64 {
                let owner = if n == 4 { "b" } else { "a" };
                let key = (n == 2).then_some("k");
                let callback = (n == 1).then_some("https://hooks.example/x");
                // Bound by name: SQLite numbers `$n` by first appearance.
                let row: i64 = writer::bind(
                    &conn,
                    INSERT_AT_0003,
                    rusqlite::params![
                        owner,
                        "model-center",
                        "m",
                        "video",
                        "fp",
                        key,
                        5_i64,
                        1_000 + n,
                        "p",
                        callback
                    ],
                )
                .unwrap()
                .raw_query()
                .next()
                .unwrap()
                .unwrap()
                .get(0)
                .unwrap();
                let a = answer(n as u32);
                writer::bind(
                    &conn,
                    record::SET_CREATED,
                    rusqlite::params![
                        row,
                        "p",
                        format!("up-{n}"),
                        format!("task_{n}"),
                        "queued",
                        i64::from(a.status),
                        a.body,
                        2_000 + n,
                        5_000_i64
                    ],
                )
                .unwrap()
                .raw_execute()
                .unwrap();
            }
        }
        let l = ledger(&dir).await;
        // The file as another reader sees it.
        let reader = rusqlite::Connection::open(&path).unwrap();
        let indexes: Vec<String> = reader
            .prepare(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'tasks' AND sql IS NOT NULL ORDER BY name",
            )
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            indexes,
            [
                "tasks_by_day",
                "tasks_by_owner",
                "tasks_by_upstream",
                "tasks_due",
                "tasks_idempotency",
                "tasks_keys_by_age"
            ]
        );
        // Listing, its cursor, and the key's replay work on the rows written before.
        let page = l.list("a", Endpoint::ModelCenter, None, 2).await.unwrap();
        let ids = |p: &Page| {
            p.rows
                .iter()
                .map(|r| r.task_id.clone().unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(&page), ["task_3", "task_2"]);
        let page = l
            .list("a", Endpoint::ModelCenter, Some(after("task_2", "up-2")), 2)
            .await
            .unwrap();
        assert_eq!(ids(&page), ["task_1", "task_0"]);
        assert!(!page.has_more);
        assert!(
            !l.list("a", Endpoint::ModelCenter, Some(after("task_4", "up-4")), 2)
                .await
                .unwrap()
                .cursor_known,
            "another owner's task is no cursor"
        );
        assert!(matches!(
            l.admit(&new("a", Some("k"), "fp")).await.unwrap(),
            Admission::Replay(a) if a == answer(2)
        ));
        // Finishing an old task still finds it by its upstream id and owes its webhook.
        let done = TaskState {
            status: TaskStatus::Completed,
            progress: None,
            urls: vec![],
            error: None,
        };
        assert!(l.finished("p", "up-1", &done, None).await.unwrap());
        assert_eq!(
            l.status_of("p", "up-1").await.unwrap(),
            Some(TaskStatus::Completed)
        );
        let owed: i64 = reader
            .query_row("SELECT COUNT(*) FROM deliveries", [], |r| r.get(0))
            .unwrap();
        assert_eq!(owed, 1);
        // New rows continue after the old ones.
        let Admission::Fresh(row) = l.admit(&new("a", None, "fp")).await.unwrap() else {
            panic!()
        };
        assert!(row > 5, "{row}");
    }

    #[tokio::test]
    async fn committed_rows_reach_the_database_file_itself_soon() {
        // The WAL is checkpointed by a thread of its own, soon after commits: until
        // then a row is only in the `-wal` file (which SQLite syncs at checkpoints).
        let dir = tempfile::tempdir().unwrap();
        let l = ledger(&dir).await;
        let Admission::Fresh(row) = l.admit(&new("a", None, "fp")).await.unwrap() else {
            panic!()
        };
        create(&l, row, 3).await;
        let copy = tempfile::tempdir().unwrap();
        let alone = copy.path().join("alone.db");
        let in_file = |upstream_id: &str| {
            // The database file alone, without its WAL: what the checkpoints wrote.
            std::fs::copy(dir.path().join("sub/ledger.db"), &alone).ok()?;
            let c = rusqlite::Connection::open(&alone).ok()?;
            c.query_row(
                "SELECT count(*) FROM tasks WHERE upstream_id = ?1",
                [upstream_id],
                |r| r.get::<_, i64>(0),
            )
            .ok()
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while in_file("up-3") != Some(1) {
            assert!(
                std::time::Instant::now() < deadline,
                "the row never reached the database file"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn the_writer_reads_rows_as_the_readers_do() {
        let dir = tempfile::tempdir().unwrap();
        let l = ledger(&dir).await;
        let Admission::Fresh(row) = l.admit(&new("a", Some("k"), "fp")).await.unwrap() else {
            panic!()
        };
        create(&l, row, 7).await;
        l.finished(
            "p",
            "up-7",
            &TaskState {
                status: TaskStatus::Completed,
                progress: None,
                urls: vec!["https://x/1".into()],
                error: None,
            },
            None,
        )
        .await
        .unwrap();
        // A replay is a row read by the writer: every column in its place.
        let Admission::Replay(answer) = l.admit(&new("a", Some("k"), "fp")).await.unwrap() else {
            panic!()
        };
        assert_eq!(answer, self::answer(7));
        let by_row = PerEngine {
            sqlite: record::SELECT_BY_ROW,
            postgres: record::SELECT_BY_ROW,
        };
        let by_writer = l.store.write_tasks(by_row, params![row]).await.unwrap();
        let by_reader = l.row(row).await.unwrap().unwrap();
        assert_eq!(format!("{:?}", by_writer[0]), format!("{by_reader:?}"));
    }

    #[tokio::test]
    async fn a_word_the_enums_do_not_know_is_a_corrupt_row_on_every_path() {
        let dir = tempfile::tempdir().unwrap();
        let l = ledger(&dir).await;
        let Admission::Fresh(row) = l.admit(&new("a", Some("k"), "fp")).await.unwrap() else {
            panic!()
        };
        create(&l, row, 1).await;
        let spoil =
            |sql: &'static str| sqlite_writer(&l).run(move |conn| Ok(conn.execute(sql, [])?));
        spoil("UPDATE tasks SET kind = 'audio', next_poll_ms = 0")
            .await
            .unwrap();
        let corrupt = |e: LedgerError| match e {
            LedgerError::Corrupt { column, value } => (column, value),
            other => panic!("{other:?}"),
        };
        // Read by a reader, and by the writer (a lease, an admission's look).
        assert_eq!(
            corrupt(l.row(row).await.unwrap_err()),
            ("kind", "audio".into())
        );
        l.register("me", Duration::from_secs(30)).await.unwrap();
        let claimed = l.follow_new("me", 10).await;
        assert_eq!(corrupt(claimed.unwrap_err()).0, "kind");
        let again = l.admit(&new("a", Some("k"), "fp")).await;
        assert_eq!(corrupt(again.unwrap_err()).0, "kind");
        spoil("UPDATE tasks SET kind = 'video', status = 'paused'")
            .await
            .unwrap();
        let status = l.status_of("p", "up-1").await;
        assert_eq!(corrupt(status.unwrap_err()), ("status", "paused".into()));
        assert!(l.list("a", Endpoint::ModelCenter, None, 5).await.is_err());
    }

    /// A task of `a` with a callback URL, created as `up-{n}` and recorded completed:
    /// its delivery is owed.
    async fn finished_with_webhook(l: &Ledger, n: u32) -> i64 {
        let hooked = NewTask {
            callback_url: Some("https://hooks.example/h"),
            keep_days: None,
            ..new("a", None, "fp")
        };
        let Admission::Fresh(row) = l.admit(&hooked).await.unwrap() else {
            panic!()
        };
        create(l, row, n).await;
        let done = TaskState {
            status: TaskStatus::Completed,
            progress: None,
            urls: vec![],
            error: None,
        };
        assert!(
            l.finished("p", &format!("up-{n}"), &done, None)
                .await
                .unwrap()
        );
        row
    }

    /// A task of unknown outcome that the operator resolves never had an id its client
    /// knows: no webhook is owed for it (it could never be made).
    #[tokio::test]
    async fn a_resolved_task_of_unknown_outcome_owes_no_webhook() {
        let dir = tempfile::tempdir().unwrap();
        let l = ledger(&dir).await;
        let hooked = NewTask {
            callback_url: Some("https://hooks.example/h"),
            ..new("a", None, "fp")
        };
        let Admission::Fresh(row) = l.admit(&hooked).await.unwrap() else {
            panic!()
        };
        l.outcome_unknown(row, "p").await.unwrap();
        assert!(l.resolve(row, true, None).await.unwrap());
        assert_eq!(l.delivery_of(row).await.unwrap(), None);
        // A task its client has the id of still owes one.
        let created = finished_with_webhook(&l, 2).await;
        let owed = l.delivery_of(created).await.unwrap().unwrap();
        assert_eq!(owed.0, "pending");
    }

    #[tokio::test]
    async fn a_delivery_put_back_counts_no_attempt_and_is_due_again_when_told() {
        let dir = tempfile::tempdir().unwrap();
        let l = ledger(&dir).await;
        let row = finished_with_webhook(&l, 1).await;
        let lease = Duration::from_secs(30);
        let claimed = l
            .claim_deliveries("me", lease, 10, Duration::ZERO)
            .await
            .unwrap();
        assert_eq!(claimed.len(), 1);
        let (id, ours) = (claimed[0].id, &claimed[0]);
        assert_eq!(
            (ours.task_row, ours.owner.as_str(), ours.attempts),
            (row, "a", 0)
        );
        let due_now = PutBack::Until {
            next_ms: now_ms() - 1,
        };
        // Another replica cannot give back what this one holds.
        l.delivery_put_back(id, "them", &due_now).await.unwrap();
        assert!(
            l.claim_deliveries("me", lease, 10, Duration::ZERO)
                .await
                .unwrap()
                .is_empty()
        );
        l.delivery_put_back(id, "me", &due_now).await.unwrap();
        let again = l
            .claim_deliveries("me", lease, 10, Duration::ZERO)
            .await
            .unwrap();
        assert_eq!((again.len(), again[0].attempts), (1, 0));
        let later = PutBack::Until {
            next_ms: now_ms() + 60_000,
        };
        l.delivery_put_back(id, "me", &later).await.unwrap();
        assert!(
            l.claim_deliveries("me", lease, 10, Duration::ZERO)
                .await
                .unwrap()
                .is_empty()
        );
        let shown = l.delivery_of(row).await.unwrap().unwrap();
        assert_eq!(shown, ("pending".into(), 0, None, None));
        // Given up without an attempt: expired, still none counted.
        let row = finished_with_webhook(&l, 2).await;
        let claimed = l
            .claim_deliveries("me", lease, 10, Duration::ZERO)
            .await
            .unwrap();
        assert_eq!(claimed.len(), 1);
        let expired = PutBack::Expired {
            error: "cooling down".into(),
        };
        l.delivery_put_back(claimed[0].id, "me", &expired)
            .await
            .unwrap();
        let shown = l.delivery_of(row).await.unwrap().unwrap();
        assert_eq!(
            shown,
            ("expired".into(), 0, None, Some("cooling down".into()))
        );
    }

    /// Every batch of a pass, from the first row; the rows deleted.
    async fn prune_all(l: &Ledger, batch: i64, before_ms: i64) -> usize {
        let (mut after, mut rows) = (0, 0);
        loop {
            let p = l.prune(after, batch, before_ms).await.unwrap();
            rows += p.rows;
            match p.next {
                Some(next) => after = next,
                None => return rows,
            }
        }
    }

    /// Retention deletes finished tasks that owe nothing, never an unfinished one or
    /// one whose webhook is still owed, with what hangs off them; usage is the same
    /// to the unit before and after, and a pass stops at rows too young.
    #[tokio::test]
    async fn pruning_keeps_usage_and_every_task_that_still_owes_something() {
        let dir = tempfile::tempdir().unwrap();
        let l = ledger(&dir).await;
        let admit = async |n: u32| {
            let Admission::Fresh(row) = l.admit(&new("a", None, &format!("fp{n}"))).await.unwrap()
            else {
                panic!()
            };
            row
        };
        let done = |status| TaskState {
            status,
            progress: None,
            urls: vec![],
            error: None,
        };
        // Completed, failed, refused: prunable. Owed a webhook, still running, outcome
        // unknown: kept.
        let completed = admit(1).await;
        create(&l, completed, 1).await;
        assert!(
            l.finished("p", "up-1", &done(TaskStatus::Completed), None)
                .await
                .unwrap()
        );
        let failed = admit(2).await;
        create(&l, failed, 2).await;
        assert!(
            l.finished("p", "up-2", &done(TaskStatus::Failed), None)
                .await
                .unwrap()
        );
        let refused = admit(3).await;
        assert!(l.refused(refused, Some(&answer(3))).await.unwrap());
        let hooked = finished_with_webhook(&l, 4).await;
        let running = admit(5).await;
        create(&l, running, 5).await;
        let unknown = admit(6).await;
        l.outcome_unknown(unknown, "p").await.unwrap();
        let usage = async || l.usage(None, 0, i64::MAX).await.unwrap();
        let before = usage().await;
        assert_eq!(before.len(), 1);
        assert_eq!(
            (before[0].submitted, before[0].completed, before[0].failed),
            (4, 2, 1)
        );
        let rows = async || {
            let sql = "SELECT id FROM tasks ORDER BY id";
            sqlite_writer(&l)
                .run(move |conn| {
                    let mut stmt = conn.prepare(sql)?;
                    let ids = stmt.query_map([], |r| r.get::<_, i64>(0))?;
                    Ok(ids.collect::<Result<Vec<i64>, _>>()?)
                })
                .await
                .unwrap()
        };

        // Nothing finished before a cutoff in the past: the pass stops at once.
        assert_eq!(prune_all(&l, 2, now_ms() - DAY_MS).await, 0);
        assert_eq!(rows().await.len(), 6);
        // Everything finished so far is old enough: batches of two rows.
        assert_eq!(prune_all(&l, 2, now_ms() + 1).await, 3);
        assert_eq!(rows().await, vec![hooked, running, unknown]);
        assert_eq!(usage().await, before);

        // Delivered, the webhook's task goes too, and its delivery with it.
        let delivered = "UPDATE deliveries SET state = 'delivered'";
        let deliveries = "SELECT COUNT(*) FROM deliveries";
        let w = sqlite_writer(&l);
        w.run(move |conn| Ok(conn.execute(delivered, [])?))
            .await
            .unwrap();
        assert_eq!(prune_all(&l, 100, now_ms() + 1).await, 1);
        assert_eq!(rows().await, vec![running, unknown]);
        let left: i64 = w
            .run(move |conn| Ok(conn.query_row(deliveries, [], |r| r.get(0))?))
            .await
            .unwrap();
        assert_eq!(left, 0);
        assert_eq!(usage().await, before);
    }
}
