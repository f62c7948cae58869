//! What a ledger row holds, what a submit asks of the ledger and what it answers, and
//! every statement the ledger runs.

use super::LedgerError;
use crate::config::{Endpoint, QuotaConfig};
use crate::money::{Budget, Micros, Period};
use crate::tasks::{MediaKind, TaskStatus};

/// A row's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Written before the upstream submit; the outcome is not known yet.
    Submitting,
    /// The upstream created the task; it is not finished yet.
    Submitted,
    Completed,
    Failed,
    /// The submit was answered with an error and created no task upstream.
    Refused,
    /// The request was sent but no answer says what became of it: to reconcile.
    UnknownOutcome,
}

impl State {
    pub const ALL: [State; 6] = [
        State::Submitting,
        State::Submitted,
        State::Completed,
        State::Failed,
        State::Refused,
        State::UnknownOutcome,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Submitting => "submitting",
            Self::Submitted => "submitted",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Refused => "refused",
            Self::UnknownOutcome => "unknown_outcome",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// Whether few rows are in this state whatever the ledger's size: the tasks not
    /// ended yet and those to reconcile, where the others gather every task in time.
    pub fn rare(self) -> bool {
        matches!(
            self,
            Self::Submitting | Self::Submitted | Self::UnknownOutcome
        )
    }
}

/// A submit about to be sent upstream.
#[derive(Debug)]
pub struct NewTask<'a> {
    pub owner: &'a str,
    pub endpoint: Endpoint,
    pub model: &'a str,
    pub kind: MediaKind,
    /// [`fingerprint`] of the validated request.
    pub fingerprint: String,
    pub idempotency_key: Option<&'a str>,
    /// Requested seconds of video (0 for images or when not given).
    pub video_seconds: i64,
    pub quota: Option<QuotaConfig>,
    /// The provider tried first (the row names each one tried).
    pub provider: Option<&'a str>,
    /// Where the outcome is posted when the task finishes.
    pub callback_url: Option<&'a str>,
    /// Days to keep the task's results in storage; `None`: they are not copied.
    pub keep_days: Option<i64>,
    /// What the task reserves of its owner's spend; `None`: its model has no price.
    pub cost_estimate: Option<Micros>,
    /// The key's budget, checked against the spend in the admission's transaction.
    pub budget: Option<Budget>,
    /// The validated parameters as JSON, kept for a price that settles on them.
    pub price_params: Option<String>,
}

#[cfg(test)]
impl<'a> NewTask<'a> {
    /// A five-second video task of `owner` on the model center, without a price,
    /// quota, budget, key or provider: each test sets what it is about.
    pub(crate) fn example(owner: &'a str) -> Self {
        NewTask {
            owner,
            endpoint: Endpoint::ModelCenter,
            model: "m",
            kind: MediaKind::Video,
            fingerprint: "fp".into(),
            idempotency_key: None,
            video_seconds: 5,
            quota: None,
            provider: None,
            callback_url: None,
            keep_days: None,
            cost_estimate: None,
            budget: None,
            price_params: None,
        }
    }
}

impl NewTask<'_> {
    /// Whether admission reads what the owner used or spent: with a quota or a budget.
    pub(super) fn counted(&self) -> bool {
        self.quota.is_some() || self.budget.is_some()
    }

    pub(super) fn endpoint_name(&self) -> &'static str {
        endpoint_name(self.endpoint)
    }
}

pub(super) fn endpoint_name(endpoint: Endpoint) -> &'static str {
    endpoint.as_str()
}

/// An answer given to a submit, kept so that a retry with the same key gets it again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub body: String,
}

/// A task the upstream created.
#[derive(Debug)]
pub struct Created<'a> {
    pub provider: &'a str,
    pub upstream_id: &'a str,
    pub task_id: &'a str,
    pub status: TaskStatus,
    pub answer: &'a Answer,
    /// When the tracker first asks about it, from now.
    pub first_poll: std::time::Duration,
}

/// What the ledger says about a submit.
#[derive(Debug)]
pub enum Admission {
    /// A new row: go ahead and submit.
    Fresh(i64),
    /// The key was used before for this request and has its answer.
    Replay(Answer),
    /// The key's first request is still being submitted.
    InFlight(i64),
    /// The key was used before with a different request.
    Mismatch,
    /// The key's first request was sent but its outcome is unknown.
    OutcomeUnknown,
    /// The daily quota is used up until `resets_ms`.
    QuotaExceeded { what: &'static str, resets_ms: i64 },
    /// The task's estimate does not fit in what remains of the key's budget for
    /// `period`, until `resets_ms`.
    BudgetExceeded {
        period: Period,
        remaining: Micros,
        resets_ms: i64,
    },
}

impl Admission {
    /// What an earlier row with the same key means for this request.
    pub(super) fn seen(row: TaskRecord, fingerprint: &str) -> Self {
        if row.fingerprint != fingerprint {
            return Self::Mismatch;
        }
        match (row.state, row.answer()) {
            (_, Some(answer)) => Self::Replay(answer),
            (State::Submitting, None) => Self::InFlight(row.id),
            _ => Self::OutcomeUnknown,
        }
    }
}

impl QuotaConfig {
    /// Which allowance one more task of `seconds` would go over, given what is used.
    pub fn exceeded(&self, tasks: i64, used_seconds: i64, seconds: i64) -> Option<&'static str> {
        let over = |limit: Option<u64>, value: i64| {
            limit.is_some_and(|l| i64::try_from(l).unwrap_or(i64::MAX) < value)
        };
        if over(self.tasks_per_day, tasks.saturating_add(1)) {
            Some("tasks_per_day")
        } else if seconds > 0
            && over(
                self.video_seconds_per_day,
                used_seconds.saturating_add(seconds),
            )
        {
            Some("video_seconds_per_day")
        } else {
            None
        }
    }
}

/// One row, its words decoded: a value this build does not know is
/// [`LedgerError::Corrupt`] where the row is read, never a guess.
#[derive(Debug, Clone)]
pub struct TaskRecord {
    pub id: i64,
    pub owner: String,
    pub endpoint: Endpoint,
    pub model: String,
    pub kind: MediaKind,
    pub fingerprint: String,
    pub idempotency_key: Option<String>,
    pub video_seconds: i64,
    pub state: State,
    /// Our status as last recorded.
    pub status: Option<TaskStatus>,
    pub provider: Option<String>,
    pub upstream_id: Option<String>,
    pub task_id: Option<String>,
    pub answer_status: Option<i64>,
    pub answer_body: Option<String>,
    /// JSON array of result URLs, once completed.
    pub urls: Option<String>,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    pub created_ms: i64,
    pub updated_ms: i64,
    pub finished_ms: Option<i64>,
    /// When the tracker asks about the task next, and its current interval.
    pub next_poll_ms: Option<i64>,
    pub poll_interval_ms: Option<i64>,
    /// The replica polling it now, until `lease_until_ms`.
    pub lease_owner: Option<String>,
    pub lease_until_ms: Option<i64>,
    /// The progress the finished task was last reported with (0–100).
    pub progress: Option<i64>,
    /// Its price at submit, and what it cost once settled (millionths); `None`
    /// without a price.
    pub cost_estimate: Option<i64>,
    pub cost_settled: Option<i64>,
}

/// A row as the engines read it, its words still text: decoded by
/// [`RawTaskRecord::decode`] before it leaves the store.
#[derive(Debug, sqlx::FromRow)]
pub(super) struct RawTaskRecord {
    id: i64,
    owner: String,
    endpoint: String,
    model: String,
    kind: String,
    fingerprint: String,
    idempotency_key: Option<String>,
    video_seconds: i64,
    state: String,
    status: Option<String>,
    provider: Option<String>,
    upstream_id: Option<String>,
    task_id: Option<String>,
    answer_status: Option<i64>,
    answer_body: Option<String>,
    urls: Option<String>,
    error_code: Option<String>,
    error_message: Option<String>,
    created_ms: i64,
    updated_ms: i64,
    finished_ms: Option<i64>,
    next_poll_ms: Option<i64>,
    poll_interval_ms: Option<i64>,
    lease_owner: Option<String>,
    lease_until_ms: Option<i64>,
    progress: Option<i64>,
    cost_estimate: Option<i64>,
    cost_settled: Option<i64>,
}

impl RawTaskRecord {
    /// A row read by rusqlite, its columns in `columns!()`'s order.
    pub(super) fn from_sqlite(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            id: row.get(0)?,
            owner: row.get(1)?,
            endpoint: row.get(2)?,
            model: row.get(3)?,
            kind: row.get(4)?,
            fingerprint: row.get(5)?,
            idempotency_key: row.get(6)?,
            video_seconds: row.get(7)?,
            state: row.get(8)?,
            status: row.get(9)?,
            provider: row.get(10)?,
            upstream_id: row.get(11)?,
            task_id: row.get(12)?,
            answer_status: row.get(13)?,
            answer_body: row.get(14)?,
            urls: row.get(15)?,
            error_code: row.get(16)?,
            error_message: row.get(17)?,
            created_ms: row.get(18)?,
            updated_ms: row.get(19)?,
            finished_ms: row.get(20)?,
            next_poll_ms: row.get(21)?,
            poll_interval_ms: row.get(22)?,
            lease_owner: row.get(23)?,
            lease_until_ms: row.get(24)?,
            progress: row.get(25)?,
            cost_estimate: row.get(26)?,
            cost_settled: row.get(27)?,
        })
    }

    /// The row with its words decoded.
    pub(super) fn decode(self) -> Result<TaskRecord, LedgerError> {
        Ok(TaskRecord {
            endpoint: decode("endpoint", &self.endpoint, endpoint_of)?,
            kind: decode("kind", &self.kind, media_kind_of)?,
            state: decode("state", &self.state, State::parse)?,
            status: decode_status(self.status.as_deref())?,
            id: self.id,
            owner: self.owner,
            model: self.model,
            fingerprint: self.fingerprint,
            idempotency_key: self.idempotency_key,
            video_seconds: self.video_seconds,
            provider: self.provider,
            upstream_id: self.upstream_id,
            task_id: self.task_id,
            answer_status: self.answer_status,
            answer_body: self.answer_body,
            urls: self.urls,
            error_code: self.error_code,
            error_message: self.error_message,
            created_ms: self.created_ms,
            updated_ms: self.updated_ms,
            finished_ms: self.finished_ms,
            next_poll_ms: self.next_poll_ms,
            poll_interval_ms: self.poll_interval_ms,
            lease_owner: self.lease_owner,
            lease_until_ms: self.lease_until_ms,
            progress: self.progress,
            cost_estimate: self.cost_estimate,
            cost_settled: self.cost_settled,
        })
    }
}

impl TaskRecord {
    /// The answer kept for replay, if any.
    pub fn answer(&self) -> Option<Answer> {
        Some(Answer {
            status: u16::try_from(self.answer_status?).ok()?,
            body: self.answer_body.clone()?,
        })
    }
}

/// `value` of `column` read by `parse`, or the row is corrupt.
fn decode<T>(
    column: &'static str,
    value: &str,
    parse: fn(&str) -> Option<T>,
) -> Result<T, LedgerError> {
    parse(value).ok_or_else(|| LedgerError::corrupt(column, value))
}

/// The `status` column: NULL until the upstream created the task.
pub(super) fn decode_status(value: Option<&str>) -> Result<Option<TaskStatus>, LedgerError> {
    value
        .map(|v| decode("status", v, task_status_of))
        .transpose()
}

fn endpoint_of(word: &str) -> Option<Endpoint> {
    Endpoint::ALL
        .into_iter()
        .find(|e| endpoint_name(*e) == word)
}

fn media_kind_of(word: &str) -> Option<MediaKind> {
    [MediaKind::Video, MediaKind::Image]
        .into_iter()
        .find(|k| k.as_str() == word)
}

fn task_status_of(word: &str) -> Option<TaskStatus> {
    [
        TaskStatus::Queued,
        TaskStatus::Processing,
        TaskStatus::Completed,
        TaskStatus::Failed,
    ]
    .into_iter()
    .find(|s| s.as_str() == word)
}

/// Tasks of one key, model and UTC day.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct UsageRow {
    pub owner: String,
    pub model: String,
    /// Days since the Unix epoch.
    pub day: i64,
    pub submitted: i64,
    pub completed: i64,
    pub failed: i64,
    pub video_seconds: i64,
    /// What finished tasks cost, and what unfinished ones hold reserved (millionths).
    pub spent: i64,
    pub reserved: i64,
}

/// The unfinished tasks of one provider, for the tracker's metrics.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Tracked {
    pub provider: String,
    pub tasks: i64,
}

/// Where a listing's page starts: after this task, which the previous page ended with.
#[derive(Debug, Clone, Copy)]
pub struct Cursor<'a> {
    /// The sealed task id, as the previous page gave it.
    pub task_id: &'a str,
    /// The provider and upstream id it seals.
    pub provider: &'a str,
    pub upstream_id: &'a str,
}

/// A page of a listing.
#[derive(Debug)]
pub struct Page {
    pub rows: Vec<TaskRecord>,
    pub has_more: bool,
    /// False when the `after` task id is not one of the owner's tasks.
    pub cursor_known: bool,
}

impl Page {
    pub(super) fn unknown_cursor() -> Self {
        Self {
            rows: Vec::new(),
            has_more: false,
            cursor_known: false,
        }
    }
}

/// SHA-256 of the endpoint, the model, the validated parameters with object keys
/// sorted and the callback URL the body gave, so that the same request always has the
/// same fingerprint. Without a callback URL it is what it was before webhooks existed,
/// so that keys recorded then still match.
pub fn fingerprint(
    endpoint: Endpoint,
    model: &str,
    params: &serde_json::Value,
    callback_url: Option<&str>,
) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(endpoint_name(endpoint).as_bytes());
    ctx.update(b"\0");
    ctx.update(model.as_bytes());
    ctx.update(b"\0");
    canonical(params, &mut ctx);
    if let Some(url) = callback_url {
        ctx.update(b"\0callback_url\0");
        ctx.update(url.as_bytes());
    }
    hex::encode(ctx.finish())
}

fn canonical(v: &serde_json::Value, out: &mut ring::digest::Context) {
    use serde_json::Value;
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.update(b"{");
            for k in keys {
                out.update(Value::String(k.clone()).to_string().as_bytes());
                out.update(b":");
                canonical(&map[k], out);
                out.update(b",");
            }
            out.update(b"}");
        }
        Value::Array(items) => {
            out.update(b"[");
            for item in items {
                canonical(item, out);
                out.update(b",");
            }
            out.update(b"]");
        }
        other => out.update(other.to_string().as_bytes()),
    }
}

/// Every column of a row, in [`TaskRecord`]'s order.
macro_rules! columns {
    () => {
        "id, owner, endpoint, model, kind, fingerprint, idempotency_key, video_seconds, state, status, provider, upstream_id, task_id, answer_status, answer_body, urls, error_code, error_message, created_ms, updated_ms, finished_ms, next_poll_ms, poll_interval_ms, lease_owner, lease_until_ms, progress, cost_estimate, cost_settled"
    };
}

/// The most seconds of video one task is counted for: more than any model produces, so
/// a submit asking for more is refused, and no sum of counts can overflow.
pub const MAX_TASK_SECONDS: i64 = 3_600;

/// A row's seconds as sums count them: rows written before [`MAX_TASK_SECONDS`] was
/// enforced may hold any value, and one overflowing `SUM` would fail every admission.
macro_rules! counted_seconds {
    () => {
        "(CASE WHEN video_seconds BETWEEN 0 AND 3600 THEN video_seconds ELSE 3600 END)"
    };
}

macro_rules! select {
    ($rest:literal) => {
        concat!("SELECT ", columns!(), " FROM tasks ", $rest)
    };
}

pub(super) const SELECT_BY_IDEMPOTENCY: &str = select!("WHERE owner = $1 AND idempotency_key = $2");
pub(super) const SELECT_BY_ROW: &str = select!("WHERE id = $1");
pub(super) const SELECT_BY_UPSTREAM: &str =
    select!("WHERE provider = $1 AND upstream_id = $2 ORDER BY id DESC LIMIT 1");
/// The row of a task nobody ended yet (what a settlement is computed for).
pub(super) const SELECT_UNENDED_BY_UPSTREAM: &str = select!(
    "WHERE provider = $1 AND upstream_id = $2 AND finished_ms IS NULL ORDER BY id DESC LIMIT 1"
);
pub(super) const SELECT_BY_ANY_ID: &str =
    select!("WHERE task_id = $1 OR upstream_id = $1 ORDER BY id DESC LIMIT 1");
/// Rows for operators, newest first, optionally of one state (`$1`) and one key
/// (`$2`): the ledger read newest first until `$3` match, which is soon for a state
/// most rows are in (`$1 IS NULL OR …` is planned for any `$1`, so no index is used).
pub(super) const SELECT_FILTERED: &str = select!(
    "WHERE ($1 IS NULL OR state = $1) AND ($2 IS NULL OR owner = $2) ORDER BY id DESC LIMIT $3"
);
/// [`SELECT_FILTERED`] for a state few rows are in ([`State::rare`]): found through
/// the index of states (`tasks_due`) rather than among every row before them
/// (issue #34).
pub(super) const SELECT_IN_STATE: &str =
    select!("WHERE state = $1 AND ($2 IS NULL OR owner = $2) ORDER BY id DESC LIMIT $3");
pub(super) const LIST: &str = select!(
    "WHERE owner = $1 AND endpoint = $2 AND id < $3 AND task_id IS NOT NULL AND deleted_ms IS NULL ORDER BY id DESC LIMIT $4"
);
/// [`LIST`] oldest first: `$3` is the row after which the page starts.
pub(super) const LIST_ASCENDING: &str = select!(
    "WHERE owner = $1 AND endpoint = $2 AND id > $3 AND task_id IS NOT NULL AND deleted_ms IS NULL ORDER BY id ASC LIMIT $4"
);
/// Of one provider's tasks (`$3`, their upstream ids as a JSON array of strings), those
/// recorded with a status other than `$2`: one statement for every task a replica's
/// long-polling clients wait on.
pub(super) const STATUSES_OTHER_THAN_SQLITE: &str = select!(
    "WHERE provider = $1 AND status <> $2 AND upstream_id IN (SELECT value FROM json_each($3))"
);
pub(super) const STATUSES_OTHER_THAN_POSTGRES: &str = select!(
    "WHERE provider = $1 AND status <> $2 AND upstream_id IN (SELECT jsonb_array_elements_text($3::jsonb))"
);
pub(super) const STATUS_OF: &str =
    "SELECT status FROM tasks WHERE provider = $1 AND upstream_id = $2 ORDER BY id DESC LIMIT 1";
/// The row of a listing's cursor, found by the provider and upstream id its sealed id
/// carries (`tasks_by_upstream`; sealed ids have no index of their own); a task of
/// another endpoint is no cursor of this listing.
pub(super) const ROW_OF_TASK: &str = "SELECT id FROM tasks WHERE provider = $1 AND upstream_id = $2 AND owner = $3 AND task_id = $4 AND endpoint = $5";
pub(super) const USED_TODAY: &str = concat!(
    "SELECT COUNT(*), CAST(COALESCE(SUM(",
    counted_seconds!(),
    "), 0) AS BIGINT) FROM tasks WHERE owner = $1 AND created_ms >= $2 AND state IN ('submitting', 'submitted', 'completed', 'unknown_outcome')"
);
/// What the owner `$1` spent (settled and reserved) on day `$2` and since day `$3`
/// (the month's first), in millionths.
pub(super) const SPENT: &str = "SELECT CAST(COALESCE(SUM(CASE WHEN day = $2 THEN micros ELSE 0 END), 0) AS BIGINT), CAST(COALESCE(SUM(micros), 0) AS BIGINT) FROM spend WHERE owner = $1 AND day >= $3";
/// What the owner `$1` spent (settled and reserved) from day `$2` to before day `$3`.
pub(super) const SPENT_SINCE: &str = "SELECT CAST(COALESCE(SUM(micros), 0) AS BIGINT) FROM spend WHERE owner = $1 AND day >= $2 AND day < $3";
/// The write-ahead row; nothing when another request took the idempotency key first.
/// No `RETURNING`: SQLite collects a statement's `RETURNING` rows in a temporary
/// b-tree opened and closed per statement, while the changed-row count and the
/// connection's last row id say the same for one row. (PostgreSQL writes these rows
/// in batches: `postgres_submits.rs`.)
pub(super) const INSERT_SQLITE: &str = "INSERT INTO tasks (owner, endpoint, model, kind, fingerprint, idempotency_key, video_seconds, state, provider, created_ms, updated_ms, callback_url, keep_days, cost_estimate, price_params) VALUES ($1, $2, $3, $4, $5, $6, $7, 'submitting', $9, $8, $8, $10, $11, $12, $13) ON CONFLICT (owner, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING";
pub(super) const SET_CREATED: &str = "UPDATE tasks SET state = 'submitted', provider = $2, upstream_id = $3, task_id = $4, status = $5, answer_status = $6, answer_body = $7, updated_ms = $8, next_poll_ms = $8 + $9, poll_interval_ms = $9 WHERE id = $1 AND finished_ms IS NULL";
/// Unfinished tasks nobody follows (new submits, tasks given back), up to `$3`, now
/// followed by `$1`, provided its heartbeat holds at `$2`: a replica that lost its
/// heartbeat claims nothing under its name. SQLite has one writer at a time, so the
/// statement itself is the lock. Found through `tasks_due (state, lease_owner)`.
pub(super) const FOLLOW_NEW_SQLITE: &str = concat!(
    "UPDATE tasks SET lease_owner = $1, lease_until_ms = NULL WHERE id IN (SELECT id FROM tasks WHERE state = 'submitted' AND lease_owner IS NULL LIMIT $3) AND EXISTS (SELECT 1 FROM replicas WHERE name = $1 AND alive_until_ms >= $2) RETURNING ",
    columns!()
);
/// The same on PostgreSQL: rows another replica is claiming right now are skipped,
/// never waited for.
pub(super) const FOLLOW_NEW_POSTGRES: &str = concat!(
    "UPDATE tasks SET lease_owner = $1, lease_until_ms = NULL WHERE id IN (SELECT id FROM tasks WHERE state = 'submitted' AND lease_owner IS NULL LIMIT $3 FOR UPDATE SKIP LOCKED) AND EXISTS (SELECT 1 FROM replicas WHERE name = $1 AND alive_until_ms >= $2) RETURNING ",
    columns!()
);
/// Unfinished tasks of the replica whose heartbeat expired longest ago (before `$2`),
/// up to `$3`, now followed by `$1` (its own heartbeat holding).
pub(super) const FOLLOW_ORPHANS_SQLITE: &str = concat!(
    "UPDATE tasks SET lease_owner = $1, lease_until_ms = NULL WHERE id IN (SELECT id FROM tasks WHERE state = 'submitted' AND lease_owner = (SELECT name FROM replicas WHERE alive_until_ms < $2 ORDER BY alive_until_ms LIMIT 1) LIMIT $3) AND EXISTS (SELECT 1 FROM replicas WHERE name = $1 AND alive_until_ms >= $2) RETURNING ",
    columns!()
);
pub(super) const FOLLOW_ORPHANS_POSTGRES: &str = concat!(
    "UPDATE tasks SET lease_owner = $1, lease_until_ms = NULL WHERE id IN (SELECT id FROM tasks WHERE state = 'submitted' AND lease_owner = (SELECT name FROM replicas WHERE alive_until_ms < $2 ORDER BY alive_until_ms LIMIT 1) LIMIT $3 FOR UPDATE SKIP LOCKED) AND EXISTS (SELECT 1 FROM replicas WHERE name = $1 AND alive_until_ms >= $2) RETURNING ",
    columns!()
);
/// PostgreSQL's clock, in ms since the epoch ([`super::now_ms`]).
pub(super) const SERVER_CLOCK: &str =
    "SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)";
/// A replica `$1` alive until `$2`, whether it was known or not.
pub(super) const REGISTER: &str = "INSERT INTO replicas (name, alive_until_ms) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET alive_until_ms = excluded.alive_until_ms";
/// On SQLite, whose file is one process's: every other replica is dead, so that a
/// restarted gateway follows its predecessor's tasks at once.
pub(super) const OTHERS_DEAD: &str =
    "UPDATE replicas SET alive_until_ms = 0 WHERE name <> $1 AND alive_until_ms > 0";
/// The heartbeat of `$1`, alive until `$2`; nothing when it was not alive at `$3`
/// (its tasks may be another's already).
pub(super) const HEARTBEAT: &str =
    "UPDATE replicas SET alive_until_ms = $2 WHERE name = $1 AND alive_until_ms >= $3";
/// The unfinished tasks per replica alive at `$1` (floored; all of them when none
/// is): what a replica following its fair share follows.
pub(super) const FAIR_SHARE: &str = "SELECT CAST((SELECT COUNT(*) FROM tasks WHERE state = 'submitted') AS BIGINT) / (SELECT CASE WHEN COUNT(*) > 0 THEN COUNT(*) ELSE 1 END FROM replicas WHERE alive_until_ms >= $1)";
/// Dead replicas (at `$1`) that follow no task any more.
pub(super) const FORGET_DEAD: &str = "DELETE FROM replicas WHERE alive_until_ms < $1 AND NOT EXISTS (SELECT 1 FROM tasks WHERE state = 'submitted' AND lease_owner = replicas.name)";
/// The first name unfinished tasks are followed under that no heartbeat row knows: a
/// replica of a version before followers (which leased rows under its name), or one
/// whose row went while it claimed. The names followed are walked one index seek each
/// (`tasks_due (state, lease_owner)`), as many as there are replicas, never a read of
/// every task followed.
pub(super) const UNKNOWN_FOLLOWER: &str = "WITH RECURSIVE named(o) AS (SELECT (SELECT MIN(lease_owner) FROM tasks WHERE state = 'submitted' AND lease_owner IS NOT NULL) UNION ALL SELECT (SELECT MIN(lease_owner) FROM tasks WHERE state = 'submitted' AND lease_owner > named.o) FROM named WHERE named.o IS NOT NULL) SELECT o FROM named WHERE o IS NOT NULL AND NOT EXISTS (SELECT 1 FROM replicas WHERE name = named.o) LIMIT 1";
/// The tasks followed under `$1` given back, but those whose lease (a version before
/// followers) runs past `$2`.
pub(super) const RELEASE_UNKNOWN: &str = "UPDATE tasks SET lease_owner = NULL WHERE state = 'submitted' AND lease_owner = $1 AND (lease_until_ms IS NULL OR lease_until_ms < $2)";
/// A replica stopping: the tasks it still follows given back, then its heartbeat.
pub(super) const GIVE_BACK_REST: &str =
    "UPDATE tasks SET lease_owner = NULL WHERE state = 'submitted' AND lease_owner = $1";
pub(super) const LEAVE: &str = "DELETE FROM replicas WHERE name = $1";
/// What status requests of tasks `$1` follows learned, `$2` a JSON list of
/// `[row, status, next_poll_ms, interval_ms, answered_ms]` ([`polled_json`]): the
/// status and the schedule, written when the status changed or the request failed.
pub(super) const SET_POLLED_SQLITE: &str = "UPDATE tasks SET status = p.value ->> 1, next_poll_ms = p.value ->> 2, poll_interval_ms = p.value ->> 3, updated_ms = p.value ->> 4 FROM json_each($2) AS p WHERE tasks.id = p.value ->> 0 AND tasks.lease_owner = $1 AND tasks.state = 'submitted'";
/// [`SET_POLLED_SQLITE`] of a replica stopping: every task it follows given back with
/// its schedule, for the next follower to go on with.
pub(super) const SET_GIVEN_BACK_SQLITE: &str = "UPDATE tasks SET status = p.value ->> 1, next_poll_ms = p.value ->> 2, poll_interval_ms = p.value ->> 3, updated_ms = p.value ->> 4, lease_owner = NULL FROM json_each($2) AS p WHERE tasks.id = p.value ->> 0 AND tasks.lease_owner = $1 AND tasks.state = 'submitted'";
/// Both on PostgreSQL, row by row (PostgreSQL migrations 0008 and 0013: a join's plan,
/// kept by the connection, could scan the whole table each time); a row per row
/// changed. `$3`: 1 to give the tasks back.
pub(super) const SET_POLLED_POSTGRES: &str = "SELECT mediagate_followed($1, $2::jsonb, $3 = 1)";

/// What a status request of a followed, unfinished task learned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Polled {
    pub row: i64,
    pub status: TaskStatus,
    /// When the task is asked about next (Unix ms), and the interval that makes.
    pub next_ms: i64,
    pub interval_ms: i64,
    /// When the answer came: the task was known unfinished then.
    pub answered_ms: i64,
}

impl Polled {
    /// Row `row`, due at `due_ms`, answered `status` now: asked about again an
    /// `interval` after it was due, so that the tracker's own delay does not stretch
    /// every interval; a tracker so far behind that this has passed already asks an
    /// interval after the answer instead.
    pub fn answered(
        row: i64,
        status: TaskStatus,
        due_ms: i64,
        interval: std::time::Duration,
    ) -> Self {
        let now = super::now_ms();
        let interval_ms = interval.as_millis() as i64;
        let on_time = due_ms.saturating_add(interval_ms);
        Self {
            row,
            status,
            next_ms: if on_time > now {
                on_time
            } else {
                now + interval_ms
            },
            interval_ms,
            answered_ms: now,
        }
    }
}

/// The list [`SET_POLLED_SQLITE`] and [`SET_POLLED_POSTGRES`] read. Status words are
/// fixed identifiers: nothing to escape.
pub(super) fn polled_json(polled: &[Polled]) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(polled.len() * 40 + 2);
    out.push('[');
    for (n, p) in polled.iter().enumerate() {
        let comma = if n == 0 { "" } else { "," };
        let _ = write!(
            out,
            "{comma}[{},\"{}\",{},{},{}]",
            p.row,
            p.status.as_str(),
            p.next_ms,
            p.interval_ms,
            p.answered_ms
        );
    }
    out.push(']');
    out
}
pub(super) const SET_ATTEMPT: &str =
    "UPDATE tasks SET provider = $2, updated_ms = $3 WHERE id = $1 AND state = 'submitting'";
pub(super) const SET_REFUSED: &str = "UPDATE tasks SET state = 'refused', answer_status = $2, answer_body = $3, idempotency_key = CASE WHEN $2 IS NULL THEN NULL ELSE idempotency_key END, updated_ms = $4, finished_ms = $4, cost_settled = CASE WHEN cost_estimate IS NULL THEN NULL ELSE 0 END WHERE id = $1 AND finished_ms IS NULL";
/// The submit's answers (created, refused, unknown) change only a row nobody ended:
/// one that arrives after the operator resolved the task leaves it (and its
/// settlement) as resolved.
pub(super) const SET_UNKNOWN: &str = "UPDATE tasks SET state = 'unknown_outcome', provider = $2, updated_ms = $3 WHERE id = $1 AND finished_ms IS NULL";
/// A task's end, once. It sets `finished_ms` with the terminal state: the webhook's
/// trigger watches that column (on SQLite, watching `state` put every submit's
/// completion in a statement journal), so any other update that ends a task must
/// set it too.
/// A priced task is settled by the same statement: at `$10` when completed (its
/// estimate when `$10` is NULL), at 0 when failed.
pub(super) const SET_FINISHED: &str = "UPDATE tasks SET state = $3, status = $4, urls = $5, error_code = $6, error_message = $7, updated_ms = $8, finished_ms = $8, progress = $9, cost_settled = CASE WHEN cost_estimate IS NULL THEN NULL WHEN $3 = 'completed' THEN COALESCE($10, cost_estimate) ELSE 0 END WHERE provider = $1 AND upstream_id = $2 AND state = 'submitted'";
/// The parameters a price settles on, of the task the provider knows as `$1`/`$2`.
pub(super) const PRICE_PARAMS: &str = "SELECT price_params FROM tasks WHERE provider = $1 AND upstream_id = $2 ORDER BY id DESC LIMIT 1";
/// An `unknown_outcome` task resolved by the operator: ended and settled (at `$5`
/// when completed, its estimate when NULL; at 0 when failed).
pub(super) const SET_RESOLVED: &str = "UPDATE tasks SET state = $2, status = $3, error_code = $4, error_message = $6, updated_ms = $7, finished_ms = $7, cost_settled = CASE WHEN cost_estimate IS NULL THEN NULL WHEN $2 = 'completed' THEN COALESCE($5, cost_estimate) ELSE 0 END WHERE id = $1 AND state = 'unknown_outcome'";
pub(super) const EXPIRE_SUBMITTING: &str = concat!(
    "UPDATE tasks SET state = 'unknown_outcome', updated_ms = $2 WHERE state = 'submitting' AND updated_ms < $1 RETURNING ",
    columns!()
);
/// Keys older than `$1` forgotten, but a submit's still in flight: its retry must
/// find it.
pub(super) const FORGET_KEYS: &str = "UPDATE tasks SET idempotency_key = NULL WHERE idempotency_key IS NOT NULL AND created_ms < $1 AND state <> 'submitting'";
/// The unfinished tasks per provider (whoever follows them).
pub(super) const TRACKED: &str = "SELECT COALESCE(provider, '') AS provider, COUNT(*) AS tasks FROM tasks WHERE state = 'submitted' GROUP BY provider";
pub(super) const COUNT_STATE: &str = "SELECT COUNT(*) FROM tasks WHERE state = $1";
/// A usage row's sums of the task rows it groups.
macro_rules! usage_sums {
    () => {
        concat!(
            "CAST(SUM(CASE WHEN upstream_id IS NOT NULL THEN 1 ELSE 0 END) AS BIGINT) AS submitted, CAST(SUM(CASE WHEN state = 'completed' THEN 1 ELSE 0 END) AS BIGINT) AS completed, CAST(SUM(CASE WHEN state = 'failed' THEN 1 ELSE 0 END) AS BIGINT) AS failed, CAST(SUM(CASE WHEN upstream_id IS NOT NULL THEN ",
            counted_seconds!(),
            " ELSE 0 END) AS BIGINT) AS video_seconds, CAST(COALESCE(SUM(cost_settled), 0) AS BIGINT) AS spent, CAST(COALESCE(SUM(CASE WHEN cost_settled IS NULL THEN cost_estimate ELSE 0 END), 0) AS BIGINT) AS reserved"
        )
    };
}
/// Usage per key, model and UTC day, of the rows created from `$2` to before `$3`
/// whose owner is `$1` (the filter given), plus what pruned rows of the same days
/// counted for (`usage_pruned`, kept by the trigger that deletes them), so that a
/// day's figures are the same before and after its rows are pruned. A pruned day
/// counts when its start is in `[$2, $3)`.
///
/// `$with` comes first (a `WITH` clause); `$live` and `$pruned` add to the rows' and
/// the pruned sums' conditions, and `$more` adds sums of its own: SQLite's
/// [`USAGE_OF_SQLITE`] reads the days that have sums of their own from those.
macro_rules! usage {
    ($owner:literal) => {
        usage!($owner, "", "", "", "")
    };
    ($owner:literal, $with:literal, $live:literal, $pruned:literal, $more:literal) => {
        concat!(
            $with,
            "SELECT owner, model, day, CAST(SUM(submitted) AS BIGINT) AS submitted, CAST(SUM(completed) AS BIGINT) AS completed, CAST(SUM(failed) AS BIGINT) AS failed, CAST(SUM(video_seconds) AS BIGINT) AS video_seconds, CAST(SUM(spent) AS BIGINT) AS spent, CAST(SUM(reserved) AS BIGINT) AS reserved FROM (",
            "SELECT owner, model, created_ms / 86400000 AS day, ",
            usage_sums!(),
            " FROM tasks WHERE ",
            $owner,
            " AND created_ms >= $2 AND created_ms < $3",
            $live,
            " GROUP BY owner, model, created_ms / 86400000",
            " UNION ALL SELECT owner, model, day, submitted, completed, failed, video_seconds, spent, reserved FROM usage_pruned WHERE ",
            $owner,
            " AND day * 86400000 >= $2 AND day * 86400000 < $3",
            $pruned,
            $more,
            ") AS u GROUP BY owner, model, day ORDER BY day, owner, model"
        )
    };
}
/// Usage of every key (`$1` NULL) or one: every row of the range is read.
pub(super) const USAGE: &str = usage!("($1 IS NULL OR owner = $1)");
/// [`USAGE`] of one key, `$1`: its rows of the range alone, through `tasks_by_day`
/// (`$1 IS NULL OR …` cannot use it: a key's month read every row of the ledger,
/// issue #34).
pub(super) const USAGE_OF: &str = usage!("owner = $1");
/// [`USAGE_OF`] on SQLite (`sqlite_usage.rs`): the days wholly in the range whose
/// sums are whole (`usage_closed`, SQLite migration 0011) read from those, the
/// others as [`USAGE_OF`] reads them. The rows of a day with sums are passed over in
/// the index (`tasks_by_day` holds `created_ms`): their table rows, scattered over as
/// many pages, are not read. Day 0 never has sums: SQL's division rounds toward
/// zero, so it would hold the rows before 1970 as well.
pub(super) const USAGE_OF_SQLITE: &str = usage!(
    "owner = $1",
    "WITH summed AS (SELECT day FROM usage_closed_days WHERE owner = $1 AND day >= (MAX($2, 86400000) + 86399999) / 86400000 AND day < $3 / 86400000 AND summed_to_ms = (day + 1) * 86400000) ",
    " AND created_ms / 86400000 NOT IN (SELECT day FROM summed)",
    " AND day NOT IN (SELECT day FROM summed)",
    " UNION ALL SELECT owner, model, day, submitted, completed, failed, video_seconds, spent, reserved FROM usage_closed WHERE owner = $1 AND day IN (SELECT day FROM summed)"
);
/// What an insert into `usage_closed` adds to the sums already there.
macro_rules! add_to_sums {
    () => {
        " ON CONFLICT (owner, day, model) DO UPDATE SET submitted = submitted + excluded.submitted, completed = completed + excluded.completed, failed = failed + excluded.failed, video_seconds = video_seconds + excluded.video_seconds, spent = spent + excluded.spent, reserved = reserved + excluded.reserved"
    };
}
/// Adds to `$1`'s sums of day `$4` its rows created from `$2` to before `$3`.
pub(super) const SUM_ROWS_SQLITE: &str = concat!(
    "INSERT INTO usage_closed (owner, day, model, submitted, completed, failed, video_seconds, spent, reserved) SELECT owner, $4, model, ",
    usage_sums!(),
    " FROM tasks WHERE owner = $1 AND created_ms >= $2 AND created_ms < $3 GROUP BY owner, model",
    add_to_sums!()
);
/// Adds to `$1`'s sums of day `$2` what its pruned tasks counted for.
pub(super) const ADD_PRUNED_SQLITE: &str = concat!(
    "INSERT INTO usage_closed (owner, day, model, submitted, completed, failed, video_seconds, spent, reserved) SELECT owner, day, model, submitted, completed, failed, video_seconds, spent, reserved FROM usage_pruned WHERE owner = $1 AND day = $2",
    add_to_sums!()
);

/// The rows a prune looks at next: the last of the `$2` rows after row `$1` (`$1`
/// when there are none).
pub(super) const PRUNE_WINDOW: &str = "SELECT COALESCE(MAX(id), $1) FROM (SELECT id FROM tasks WHERE id > $1 ORDER BY id LIMIT $2) AS w";
/// When the first row after row `$1` was submitted: rows are numbered in the order
/// they are written, so a prune stops at the first one too young to be finished long
/// enough.
pub(super) const CREATED_AFTER: &str =
    "SELECT created_ms FROM tasks WHERE id > $1 ORDER BY id LIMIT 1";
/// Tasks of rows `($1, $2]` that finished before `$3` and owe nothing: no webhook
/// still to deliver, no copy still to make, no stored result still kept (its object
/// would outlive every record of it). The retention migration's trigger sums their usage
/// and deletes the rows hanging off them.
macro_rules! prunable {
    () => {
        "id > $1 AND id <= $2 AND finished_ms IS NOT NULL AND finished_ms < $3 AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.task_row = tasks.id AND d.state = 'pending') AND NOT EXISTS (SELECT 1 FROM copies c WHERE c.task_row = tasks.id AND c.state = 'pending') AND NOT EXISTS (SELECT 1 FROM results r WHERE r.task_row = tasks.id AND r.deleted_ms IS NULL)"
    };
}
pub(super) const PRUNE_SQLITE: &str = concat!("DELETE FROM tasks WHERE ", prunable!());
/// The same on PostgreSQL, where replicas share the ledger: one replica's batch at a
/// time (a lock held to its commit; another replica's batch deletes nothing
/// meanwhile, rather than waiting on the same rows), and rows another statement holds
/// are left for the next pass rather than waited for.
pub(super) const PRUNE_POSTGRES: &str = concat!(
    "DELETE FROM tasks WHERE id IN (SELECT id FROM tasks WHERE ",
    prunable!(),
    // A budget grant still held counts its tasks when it is given back.
    " AND NOT EXISTS (SELECT 1 FROM budget_grants g WHERE g.id = tasks.budget_grant)",
    // Two 32-bit keys: a space apart from the owners' locks of admissions (one key).
    " AND (SELECT pg_try_advisory_xact_lock(34, 3)) ORDER BY id FOR UPDATE SKIP LOCKED)"
);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sums_count_a_row_for_at_most_the_largest_task() {
        let bound = format!(
            "BETWEEN 0 AND {MAX_TASK_SECONDS} THEN video_seconds ELSE {MAX_TASK_SECONDS} END"
        );
        assert!(
            counted_seconds!().contains(&bound),
            "{}",
            counted_seconds!()
        );
        assert!(USED_TODAY.contains(counted_seconds!()));
        assert!(USAGE.contains(counted_seconds!()));
        assert!(USAGE_OF.contains(counted_seconds!()));
    }

    /// PostgreSQL's admission counts in a function of its own (migration 0007): the
    /// same seconds, the same states, the same spend.
    #[test]
    fn the_postgres_admission_counts_as_the_statements_do() {
        let admit = include_str!("../../../migrations/postgres/0007_admit.sql");
        assert!(admit.contains(counted_seconds!()));
        let states = USED_TODAY.split("state IN ").nth(1).unwrap();
        assert!(admit.contains(&format!("state IN {states}")), "{states}");
        let day = SPENT.replace("$2", "p_day");
        let day = day.split(" FROM spend").next().unwrap();
        assert!(admit.contains(day.trim_start_matches("SELECT ")), "{day}");
    }

    #[test]
    fn quotas_cannot_be_passed_by_overflowing_them() {
        let q = QuotaConfig {
            tasks_per_day: Some(10),
            video_seconds_per_day: Some(20),
        };
        assert_eq!(q.exceeded(0, i64::MAX, 10), Some("video_seconds_per_day"));
        assert_eq!(q.exceeded(i64::MAX, 0, 10), Some("tasks_per_day"));
        let none = QuotaConfig {
            tasks_per_day: None,
            video_seconds_per_day: None,
        };
        assert_eq!(none.exceeded(i64::MAX, i64::MAX, i64::MAX), None);
    }

    #[test]
    fn fingerprints_ignore_key_order_only() {
        let a = fingerprint(
            Endpoint::ModelCenter,
            "m",
            &json!({"a": 1, "b": {"x": [1, 2], "y": "s"}}),
            None,
        );
        let b = fingerprint(
            Endpoint::ModelCenter,
            "m",
            &json!({"b": {"y": "s", "x": [1, 2]}, "a": 1}),
            None,
        );
        assert_eq!(a, b);
        for other in [
            fingerprint(
                Endpoint::AlphaVideos,
                "m",
                &json!({"a": 1, "b": {"x": [1, 2], "y": "s"}}),
                None,
            ),
            fingerprint(
                Endpoint::ModelCenter,
                "n",
                &json!({"a": 1, "b": {"x": [1, 2], "y": "s"}}),
                None,
            ),
            fingerprint(
                Endpoint::ModelCenter,
                "m",
                &json!({"a": 1, "b": {"x": [2, 1], "y": "s"}}),
                None,
            ),
            fingerprint(
                Endpoint::ModelCenter,
                "m",
                &json!({"a": "1", "b": {"x": [1, 2], "y": "s"}}),
                None,
            ),
            fingerprint(
                Endpoint::ModelCenter,
                "m",
                &json!({"a": 1, "b": {"x": [1, 2], "y": "s"}}),
                Some("https://hooks.example/x"),
            ),
        ] {
            assert_ne!(a, other);
        }
    }

    #[test]
    fn quotas_count_tasks_and_seconds() {
        let q = QuotaConfig {
            tasks_per_day: Some(2),
            video_seconds_per_day: Some(20),
        };
        assert_eq!(q.exceeded(0, 0, 10), None);
        assert_eq!(q.exceeded(1, 10, 10), None);
        assert_eq!(q.exceeded(2, 10, 5), Some("tasks_per_day"));
        assert_eq!(q.exceeded(1, 15, 10), Some("video_seconds_per_day"));
        // Images ask for no seconds: only the task count applies.
        assert_eq!(q.exceeded(1, 25, 0), None);
    }

    #[test]
    fn every_word_written_reads_back_and_no_other_does() {
        for e in Endpoint::ALL {
            assert_eq!(endpoint_of(endpoint_name(e)), Some(e));
            // routes.toml names an endpoint as the ledger does.
            let named: Endpoint = serde_json::from_value(json!(endpoint_name(e))).unwrap();
            assert_eq!(named, e);
        }
        for k in [MediaKind::Video, MediaKind::Image] {
            assert_eq!(media_kind_of(k.as_str()), Some(k));
        }
        for st in State::ALL {
            assert_eq!(State::parse(st.as_str()), Some(st));
        }
        for status in ["queued", "processing", "completed", "failed"] {
            let decoded = decode_status(Some(status)).unwrap().unwrap();
            assert_eq!(decoded.as_str(), status);
        }
        assert_eq!(decode_status(None).unwrap(), None);
        assert!(matches!(
            decode_status(Some("Queued")),
            Err(LedgerError::Corrupt {
                column: "status",
                ..
            })
        ));
        assert_eq!(endpoint_of("model_center"), None);
        assert_eq!(media_kind_of(""), None);
    }

    #[test]
    fn every_statement_returning_rows_returns_every_column() {
        for sql in [
            SELECT_BY_ROW,
            EXPIRE_SUBMITTING,
            FOLLOW_NEW_SQLITE,
            FOLLOW_NEW_POSTGRES,
            FOLLOW_ORPHANS_SQLITE,
            FOLLOW_ORPHANS_POSTGRES,
        ] {
            assert!(sql.contains(columns!()), "{sql}");
        }
    }
}
