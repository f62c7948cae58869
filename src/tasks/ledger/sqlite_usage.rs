//! A key's usage on SQLite, from sums of the days that are over (SQLite migration
//! 0011, issue #34). A key's month at 10 M rows read 1,700 rows scattered over as
//! many pages (8 ms at p50); a day with sums is a few rows.
//!
//! A read uses the whole sums there are ([`record::USAGE_OF_SQLITE`]) and asks for
//! those missing of the days that ended a day ago or more. A day's sums are made by
//! background writes on the writer, [`ROWS_PER_PART`] rows each, run only when no
//! other write waits: the reads after them are the faster ones. A change to a day
//! being summed or summed takes its sums away (the migration's triggers), and a later
//! read asks for them again: they are never stale, only absent.

use std::collections::HashMap;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rusqlite::Connection;

use super::LedgerError;
use super::admission::DAY_MS;
use super::record::{self, UsageRow};
use super::sqlite_reads::{SqliteReads, usage_row};
use super::store::{Param, StoreFuture, params};
use super::writer::{Writer, bind, owned, query_rows};

/// Days after its end before a day gets sums: its tasks still end meanwhile (each
/// end would take the sums away again).
const SETTLING_DAYS: i64 = 1;
/// Days one read asks sums for at most, the newest first (two months): a key's
/// longer history is summed over later reads.
const DAYS_PER_READ: usize = 62;
/// Rows summed by one background write (rows sharing its last millisecond all go
/// in). A submit queued meanwhile waits for it: at 1 to 5 µs a row, typically well
/// under a millisecond, as a batch of retention (more when the rows' pages are not
/// in memory).
const ROWS_PER_PART: i64 = 100;
/// How long a day whose sums could not be made (a task of it still being
/// submitted, its sums taken away meanwhile, a failed write) is not asked for again.
/// Asked for again at once, such a day would cost a background write per read.
const ASK_AGAIN_AFTER: Duration = Duration::from_secs(600);
/// Days remembered as asked for at most; past that, those that may be asked for
/// again are forgotten.
const ASKED_MAX: usize = 10_000;

/// The days of `$1` whose sums are whole, from day `$2` to before day `$3`.
const SUMMED_DAYS: &str = "SELECT day FROM usage_closed_days WHERE owner = $1 AND day >= $2 AND day < $3 AND summed_to_ms = (day + 1) * 86400000";
/// The first day `$1` has usage on, rows or pruned sums.
const FIRST_DAY: &str = "SELECT MIN(day) FROM (SELECT MIN(created_ms) / 86400000 AS day FROM tasks WHERE owner = $1 UNION ALL SELECT MIN(day) FROM usage_pruned WHERE owner = $1) AS f";
/// How far the rows of `$1`'s day `$2` are summed.
const SUMMED_TO: &str = "SELECT summed_to_ms FROM usage_closed_days WHERE owner = $1 AND day = $2";
const START_DAY: &str =
    "INSERT INTO usage_closed_days (owner, day, summed_to_ms) VALUES ($1, $2, $3)";
const SET_SUMMED_TO: &str =
    "UPDATE usage_closed_days SET summed_to_ms = $3 WHERE owner = $1 AND day = $2";
/// When `$1`'s row `$4` rows after `$2` (and before `$3`) was created.
const PART_END: &str = "SELECT created_ms FROM tasks WHERE owner = $1 AND created_ms >= $2 AND created_ms < $3 ORDER BY created_ms LIMIT 1 OFFSET $4";
/// Whether a row of `$1` created from `$2` to before `$3` is still being submitted
/// (the migration says why such a day gets no sums).
const OPEN_ROWS: &str = "SELECT EXISTS (SELECT 1 FROM tasks WHERE owner = $1 AND created_ms >= $2 AND created_ms < $3 AND state = 'submitting')";
const FORGET_SUMS: &str = "DELETE FROM usage_closed WHERE owner = $1 AND day = $2";
const FORGET_DAY: &str = "DELETE FROM usage_closed_days WHERE owner = $1 AND day = $2";

/// A day whose sums were asked for.
#[derive(Debug, Clone, Copy)]
enum Asked {
    /// Being summed, or waiting its turn: not asked for again.
    Summing,
    /// Could not be summed: not asked for again before then.
    NotBefore(Instant),
}

/// The days whose sums were asked for and are not made yet.
#[derive(Default)]
pub(super) struct ClosedDays {
    asked: Arc<Mutex<HashMap<(String, i64), Asked>>>,
}

impl ClosedDays {
    /// `owner`'s usage of the rows created in `[since_ms, until_ms)`, as
    /// [`record::USAGE_OF`] reads it; the sums missing for days over by `now_ms`
    /// are asked of `writer`.
    pub(super) fn usage_of<'a>(
        &'a self,
        reads: &'a SqliteReads,
        writer: &'a Arc<Writer>,
        owner: &str,
        (since_ms, until_ms): (i64, i64),
        now_ms: i64,
    ) -> StoreFuture<'a, Vec<UsageRow>> {
        let days = closable(since_ms, until_ms, now_ms);
        let args = params![owner, since_ms, until_ms];
        let args = owned(&args);
        let day_args = params![owner, days.start, days.end];
        let day_args = owned(&day_args);
        let all = days.clone().count();
        let read = reads.run(move |conn| {
            let usage = query_rows(conn, record::USAGE_OF_SQLITE, &args, usage_row)?;
            let summed: Vec<i64> = query_rows(conn, SUMMED_DAYS, &day_args, |r| Ok(r.get(0)?))?;
            if summed.len() == all {
                return Ok((usage, summed, None));
            }
            let first = query_rows(conn, FIRST_DAY, &day_args[..1], |r| Ok(r.get(0)?))?;
            Ok((usage, summed, first.into_iter().next().flatten()))
        });
        let owner = owner.to_owned();
        Box::pin(async move {
            let (usage, summed, first) = read.await?;
            // Days before the key's first have nothing to sum.
            if let Some(first) = first {
                let summed: HashSet<i64> = summed.into_iter().collect();
                let days = days.start.max(first)..days.end;
                let missing = days.rev().filter(|day| !summed.contains(day));
                self.ask(writer, owner, missing);
            }
            Ok(usage)
        })
    }

    /// Have `writer` make the sums of `owner`'s `days` (the first
    /// [`DAYS_PER_READ`] not asked for already), one after the other.
    fn ask(&self, writer: &Arc<Writer>, owner: String, days: impl Iterator<Item = i64>) {
        let now = Instant::now();
        let days: Vec<i64> = {
            let mut asked = lock(&self.asked);
            if asked.len() >= ASKED_MAX {
                asked.retain(|_, a| match a {
                    Asked::Summing => true,
                    Asked::NotBefore(t) => *t > now,
                });
            }
            let room = ASKED_MAX.saturating_sub(asked.len()).min(DAYS_PER_READ);
            let mut ask = |day: &i64| {
                let key = (owner.clone(), *day);
                match asked.get(&key) {
                    Some(Asked::Summing) => false,
                    Some(Asked::NotBefore(t)) if *t > now => false,
                    _ => {
                        asked.insert(key, Asked::Summing);
                        true
                    }
                }
            };
            days.filter(|day| ask(day)).take(room).collect()
        };
        if days.is_empty() {
            return;
        }
        let (writer, asked) = (Arc::clone(writer), Arc::clone(&self.asked));
        // The task holds the writer: the writer thread stops once it is done too.
        tokio::spawn(async move {
            for (n, day) in days.iter().enumerate() {
                let summed = sum_day(&writer, &owner, *day).await;
                let mut asked = lock(&asked);
                match summed {
                    Ok(Part::Whole) => {
                        asked.remove(&(owner.clone(), *day));
                    }
                    Ok(_) => {
                        let again = Asked::NotBefore(Instant::now() + ASK_AGAIN_AFTER);
                        asked.insert((owner.clone(), *day), again);
                    }
                    Err(e) => {
                        // The writer failed or stopped: this day is not asked for
                        // again for a while, the days after it by the next read.
                        tracing::warn!(error = %e, day, "cannot sum a day's usage");
                        let again = Asked::NotBefore(Instant::now() + ASK_AGAIN_AFTER);
                        asked.insert((owner.clone(), *day), again);
                        for day in &days[n + 1..] {
                            asked.remove(&(owner.clone(), *day));
                        }
                        return;
                    }
                }
            }
        });
    }
}

fn lock<T>(asked: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    asked.lock().unwrap_or_else(|e| e.into_inner())
}

/// The days wholly in `[since_ms, until_ms)` that ended [`SETTLING_DAYS`] or more
/// before `now_ms`, but day 0 ([`record::USAGE_OF_SQLITE`] says why).
fn closable(since_ms: i64, until_ms: i64, now_ms: i64) -> std::ops::Range<i64> {
    let first = since_ms.max(DAY_MS).saturating_add(DAY_MS - 1) / DAY_MS;
    let last = until_ms
        .div_euclid(DAY_MS)
        .min(now_ms.div_euclid(DAY_MS) - SETTLING_DAYS);
    first..last.max(first)
}

/// What a background write did to a day's sums.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// Summed some rows; more are left.
    More,
    /// The sums are whole.
    Whole,
    /// Not summed: a row of the day is still being submitted, or the sums were
    /// taken away since the last part (a change to the day).
    Left,
}

/// Make the sums of `owner`'s `day`, part after part.
async fn sum_day(writer: &Writer, owner: &str, day: i64) -> Result<Part, LedgerError> {
    let mut first = true;
    loop {
        let owner = owner.to_owned();
        let part = move |conn: &Connection| sum_part(conn, &owner, day, first, ROWS_PER_PART);
        match writer.run_background(part).await? {
            Part::More => first = false,
            done => return Ok(done),
        }
    }
}

/// Sum the next `rows` rows of `owner`'s `day` (on the writer, in a savepoint);
/// the `first` part starts the day when it has no sums yet, a later one finds it
/// started or its sums taken away.
fn sum_part(
    conn: &Connection,
    owner: &str,
    day: i64,
    first: bool,
    rows: i64,
) -> Result<Part, LedgerError> {
    let (start, end) = (day * DAY_MS, (day + 1) * DAY_MS);
    let int = |sql: &str, args: Vec<Param<'_>>| -> Result<Option<i64>, LedgerError> {
        let found = query_rows(conn, sql, &owned(&args), |r| Ok(r.get(0)?))?;
        Ok(found.into_iter().next().flatten())
    };
    let execute = |sql: &str, args: Vec<Param<'_>>| -> Result<(), LedgerError> {
        bind(conn, sql, &owned(&args))?.raw_execute()?;
        Ok(())
    };
    let from = match int(SUMMED_TO, params![owner, day])? {
        Some(to) if to >= end => return Ok(Part::Whole),
        Some(to) => to,
        None if first => {
            execute(START_DAY, params![owner, day, start])?;
            start
        }
        None => return Ok(Part::Left),
    };
    let to = int(PART_END, params![owner, from, end, rows])?.map_or(end, |at| at.max(from + 1));
    if int(OPEN_ROWS, params![owner, from, to])? == Some(1) {
        execute(FORGET_SUMS, params![owner, day])?;
        execute(FORGET_DAY, params![owner, day])?;
        return Ok(Part::Left);
    }
    execute(record::SUM_ROWS_SQLITE, params![owner, from, to, day])?;
    if to == end {
        execute(record::ADD_PRUNED_SQLITE, params![owner, day])?;
    }
    execute(SET_SUMMED_TO, params![owner, day, to])?;
    Ok(if to == end { Part::Whole } else { Part::More })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::ledger::{Ledger, LedgerUrl, now_ms};
    use proptest::prelude::*;

    #[test]
    fn only_whole_days_over_a_day_ago_are_closable() {
        let day = |d: i64| d * DAY_MS;
        // Now is in day 10: day 8 is the last that ended a day ago or more.
        let now = day(10) + 5;
        assert_eq!(closable(day(3), day(20), now), 3..9);
        // A range starting or ending inside a day leaves that day out.
        assert_eq!(closable(day(3) + 1, day(7) + 1, now), 4..7);
        // Day 0 never: it would hold the rows before 1970 as well.
        assert_eq!(closable(0, i64::MAX, now), 1..9);
        assert_eq!(closable(i64::MIN, day(2), now), 1..2);
        // Nothing closable: an empty range, never a reversed one.
        assert_eq!(closable(day(9), day(12), now), 9..9);
        assert_eq!(closable(day(5), day(5), now).count(), 0);
    }

    /// A task's row as the test writes it: its key, its day (of the four up to
    /// yesterday) and the millisecond in it, its model and what it has become.
    #[derive(Debug, Clone)]
    struct Row {
        owner: &'static str,
        day: i64,
        at: i64,
        model: &'static str,
        state: &'static str,
        /// Whether an `unknown_outcome` row has its upstream id (others have one
        /// when their submit was answered).
        upstream: bool,
        seconds: i64,
        estimate: Option<i64>,
    }

    #[derive(Debug, Clone)]
    enum Step {
        Add(Row),
        /// The submit's answer to task `n` (mod the tasks so far), if it is still
        /// being submitted. (An answer to a task the sweep gave up on comes within
        /// `request_timeout_ms`, an hour at most, of its row: never to a day over.)
        Created(usize),
        /// The sweep gives up on the tasks still being submitted.
        Expire,
        /// The provider ends task `n`: completed at a price, or failed.
        End(usize, Option<i64>),
        /// The operator resolves task `n`, if its outcome is unknown.
        Resolve(usize, bool),
        /// Retention deletes every finished task.
        Prune,
        /// Up to `parts` background writes of two rows each on `owner`'s `day`.
        Sum(&'static str, i64, usize),
    }

    fn row() -> impl Strategy<Value = Row> {
        let states = vec![
            "submitting",
            "submitted",
            "completed",
            "failed",
            "refused",
            "unknown_outcome",
        ];
        (
            // Rows often share a millisecond, at a part's end among them.
            (
                prop::sample::select(vec!["a", "b"]),
                0..4i64,
                prop_oneof![0..3i64, Just(DAY_MS - 1), 0..DAY_MS],
            ),
            prop::sample::select(vec!["m1", "m2"]),
            (prop::sample::select(states), any::<bool>()),
            (0..20i64, prop::option::of(0..1_000_000i64)),
        )
            .prop_map(
                |((owner, day, at), model, (state, upstream), (seconds, estimate))| Row {
                    owner,
                    day,
                    at,
                    model,
                    state,
                    upstream,
                    seconds,
                    estimate,
                },
            )
    }

    fn step() -> impl Strategy<Value = Step> {
        let owner = prop::sample::select(vec!["a", "b"]);
        prop_oneof![
            4 => row().prop_map(Step::Add),
            1 => any::<usize>().prop_map(Step::Created),
            1 => Just(Step::Expire),
            2 => (any::<usize>(), prop::option::of(0..1_000_000i64)).prop_map(|(n, p)| Step::End(n, p)),
            1 => (any::<usize>(), any::<bool>()).prop_map(|(n, c)| Step::Resolve(n, c)),
            1 => Just(Step::Prune),
            3 => (owner, 0..3i64, 1..4usize).prop_map(|(o, d, p)| Step::Sum(o, d, p)),
        ]
    }

    /// A SQLite ledger in `dir`.
    async fn open(dir: &tempfile::TempDir) -> Ledger {
        let url = LedgerUrl::parse("sqlite://ledger.db", dir.path()).unwrap();
        Ledger::open(&url, 2).await.unwrap().unwrap()
    }

    /// A task of key `a` and model `m1` in `state`, of 5 seconds at a price of 100,
    /// on `day` at `at`.
    fn of_a(day: i64, at: i64, state: &'static str) -> Row {
        Row {
            owner: "a",
            day,
            at,
            model: "m1",
            state,
            upstream: true,
            seconds: 5,
            estimate: Some(100),
        }
    }

    /// Write `r` on day `first_day + r.day`; its row id.
    async fn add(l: &Ledger, r: Row, first_day: i64) -> i64 {
        let writer = l.store.sqlite_writer().expect("SQLite");
        let created = (first_day + r.day) * DAY_MS + r.at;
        let finished = matches!(r.state, "completed" | "failed" | "refused");
        let upstream = match r.state {
            "submitting" | "refused" => false,
            "unknown_outcome" => r.upstream,
            _ => true,
        };
        let settled = match r.state {
            "completed" => r.estimate,
            "failed" | "refused" => r.estimate.map(|_| 0),
            _ => None,
        };
        let insert = "INSERT INTO tasks (owner, endpoint, model, kind, fingerprint, video_seconds, state, provider, created_ms, updated_ms, finished_ms, cost_estimate, cost_settled) VALUES (?1, 'model-center', ?2, 'video', 'fp', ?3, ?4, 'p', ?5, ?5, CASE WHEN ?6 THEN ?5 END, ?7, ?8)";
        let upstream_id = "UPDATE tasks SET upstream_id = 'up-' || id WHERE id = ?1";
        let row = writer.run(move |conn| {
            let values = rusqlite::params![
                r.owner, r.model, r.seconds, r.state, created, finished, r.estimate, settled
            ];
            conn.execute(insert, values)?;
            let row = conn.last_insert_rowid();
            if upstream {
                conn.execute(upstream_id, [row])?;
            }
            Ok(row)
        });
        row.await.unwrap()
    }

    /// Run `step` on the ledger `l`, whose tasks so far are `rows`; `first_day` is
    /// the day the test's days count from.
    async fn run(l: &Ledger, step: Step, rows: &mut Vec<i64>, first_day: i64) {
        let writer = l.store.sqlite_writer().expect("SQLite");
        let now = now_ms();
        let pick = |n: usize| (!rows.is_empty()).then(|| rows[n % rows.len()]);
        let execute = async |sql: &'static str, args| {
            l.store.execute(sql, args).await.unwrap();
        };
        match step {
            Step::Add(r) => rows.push(add(l, r, first_day).await),
            Step::Created(n) => {
                let Some(row) = pick(n) else { return };
                let up = format!("up-{row}");
                let args = params![row, "p", up.as_str(), "t", "queued", 200, "{}", now, 1000];
                let args = owned(&args);
                let writer = l.store.sqlite_writer().expect("SQLite");
                let created = writer.run(move |conn| {
                    let sql = "SELECT COUNT(*) FROM tasks WHERE id = ?1 AND state = 'submitting'";
                    if conn.query_row(sql, [row], |r| r.get::<_, i64>(0))? == 1 {
                        bind(conn, record::SET_CREATED, &args)?.raw_execute()?;
                    }
                    Ok(())
                });
                created.await.unwrap();
            }
            Step::Expire => {
                let keys = Duration::from_secs(3650 * 86_400);
                l.sweep(Duration::ZERO, keys).await.unwrap();
            }
            Step::End(n, price) => {
                let Some(row) = pick(n) else { return };
                let (up, state) = (format!("up-{row}"), price.map_or("failed", |_| "completed"));
                let no = None::<&str>;
                let args = params![
                    "p",
                    up.as_str(),
                    state,
                    state,
                    "[]",
                    no,
                    no,
                    now,
                    None::<i64>,
                    price
                ];
                execute(record::SET_FINISHED, args).await;
            }
            Step::Resolve(n, completed) => {
                let Some(row) = pick(n) else { return };
                let state = if completed { "completed" } else { "failed" };
                let no = None::<&str>;
                execute(
                    record::SET_RESOLVED,
                    params![row, state, state, no, None::<i64>, no, now],
                )
                .await;
            }
            Step::Prune => execute(record::PRUNE_SQLITE, params![0, i64::MAX, now + 1]).await,
            Step::Sum(owner, day, parts) => {
                let day = first_day + day;
                for n in 0..parts {
                    let part = move |conn: &Connection| sum_part(conn, owner, day, n == 0, 2);
                    if writer.run(part).await.unwrap() != Part::More {
                        break;
                    }
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Whatever happens to a key's tasks (added, answered, given up on, ended,
        /// resolved, pruned, the clock set back into a day with sums) while its days
        /// are summed part by part, its usage read with the days' sums is, to the
        /// unit, its usage read from its rows, for any range.
        #[test]
        fn usage_with_the_days_sums_is_usage_read_from_the_rows(steps in prop::collection::vec(step(), 1..50)) {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async {
                let dir = tempfile::tempdir().unwrap();
                let l = open(&dir).await;
                // Days 0 to 2 may get sums; 3 is yesterday.
                let first_day = now_ms() / DAY_MS - 4;
                let mut rows = Vec::new();
                let day = |d: i64| (first_day + d) * DAY_MS;
                let ranges = [
                    (0, i64::MAX),
                    (day(1), day(3)),
                    (day(0) + 1, day(2) - 1),
                    (day(0) + DAY_MS / 2, day(2) + DAY_MS / 2),
                    (day(2), day(3)),
                ];
                for step in steps {
                    run(&l, step, &mut rows, first_day).await;
                    for owner in ["a", "b"] {
                        for (since, until) in ranges {
                            let args = || params![owner, since, until];
                            // Read as `Ledger::usage` does, without asking for sums:
                            // the test makes them, one step at a time.
                            let read = l.store.reads().usage(record::USAGE_OF_SQLITE, args());
                            let plain = l.store.reads().usage(record::USAGE_OF, args());
                            assert_eq!(read.await.unwrap(), plain.await.unwrap(), "{owner} from {since} to {until}");
                        }
                    }
                }
            });
        }
    }

    /// A task pruned while its day is being summed (after its part) would be counted
    /// twice, in its part and in what retention kept of it: the day's sums are taken
    /// away, and made again whole.
    #[tokio::test]
    async fn a_prune_while_a_day_is_summed_takes_its_sums_away() {
        let dir = tempfile::tempdir().unwrap();
        let l = open(&dir).await;
        let first_day = now_ms() / DAY_MS - 4;
        for at in [1, 2, 3] {
            add(&l, of_a(1, at, "completed"), first_day).await;
        }
        let mut rows = Vec::new();
        run(&l, Step::Sum("a", 1, 1), &mut rows, first_day).await;
        run(&l, Step::Prune, &mut rows, first_day).await;
        let writer = l.store.sqlite_writer().unwrap();
        let day = first_day + 1;
        let part = move |conn: &Connection| sum_part(conn, "a", day, false, 2);
        assert_eq!(writer.run(part).await.unwrap(), Part::Left);
        run(&l, Step::Sum("a", 1, 3), &mut rows, first_day).await;
        let span = || params!["a", day * DAY_MS, (day + 1) * DAY_MS];
        let read = l.store.reads().usage(record::USAGE_OF_SQLITE, span());
        let read = read.await.unwrap();
        assert_eq!((read[0].completed, read[0].video_seconds), (3, 15));
        let sums = "SELECT completed FROM usage_closed";
        let sums = writer.run(move |conn| Ok(conn.query_row(sums, [], |r| r.get::<_, i64>(0))?));
        assert_eq!(sums.await.unwrap(), 3);
    }

    /// A read asks for the sums of the days that are over, and the next reads take
    /// those days, when wholly in their range, from them: a row changed behind the
    /// ledger's back (no end, so its day keeps its sums) shows in the rows and not
    /// in the read.
    #[tokio::test]
    async fn a_read_asks_for_the_sums_of_days_over_and_the_next_reads_use_them() {
        let dir = tempfile::tempdir().unwrap();
        let l = open(&dir).await;
        let first_day = now_ms() / DAY_MS - 7;
        for (day, state) in [
            (1, "completed"),
            (1, "failed"),
            (6, "completed"),
            (7, "submitted"),
        ] {
            add(&l, of_a(day, DAY_MS / 2, state), first_day).await;
        }
        let writer = l.store.sqlite_writer().unwrap();
        let summed = async || {
            let sql = "SELECT COUNT(*) FROM usage_closed_days WHERE owner = 'a' AND summed_to_ms = (day + 1) * 86400000";
            let count =
                writer.run(move |conn| Ok(conn.query_row(sql, [], |r| r.get::<_, i64>(0))?));
            count.await.unwrap()
        };
        let before = l.usage(Some("a"), 0, i64::MAX).await.unwrap();
        assert_eq!(before.len(), 3, "{before:?}");
        // Days 1 (the first with a task) to 5 (6 is yesterday, 7 today).
        let deadline = Instant::now() + Duration::from_secs(10);
        while summed().await < 5 {
            assert!(Instant::now() < deadline, "the sums were never made");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(summed().await, 5);

        let change = "UPDATE tasks SET video_seconds = 50";
        writer
            .run(move |conn| Ok(conn.execute(change, [])?))
            .await
            .unwrap();
        let seconds = async |since: i64, until: i64| {
            let read = l.usage(Some("a"), since, until).await.unwrap();
            read.iter().map(|u| u.video_seconds).collect::<Vec<_>>()
        };
        let rows = l
            .store
            .reads()
            .usage(record::USAGE_OF, params!["a", 0, i64::MAX]);
        let rows: Vec<_> = rows
            .await
            .unwrap()
            .iter()
            .map(|u| u.video_seconds)
            .collect();
        assert_eq!(rows, [100, 50, 50]);
        // Day 1 from its sums; days 6 and 7, which have none, from their rows.
        assert_eq!(seconds(0, i64::MAX).await, [10, 50, 50]);
        let day_1 = (first_day + 1) * DAY_MS;
        assert_eq!(seconds(day_1, day_1 + DAY_MS).await, [10]);
        // A range that holds half of day 1 reads its rows.
        assert_eq!(seconds(day_1 + 1, day_1 + DAY_MS).await, [100]);
    }
}
