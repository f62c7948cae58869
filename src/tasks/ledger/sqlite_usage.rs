//! A key's usage on SQLite, from sums of the days that are over (migration 0011,
//! issue #34). A key's month at 10 M rows read 1,700 rows scattered over as many
//! pages (8 ms); the days with sums are a few rows each.
//!
//! A read uses the sums that exist ([`record::USAGE_OF_CLOSED`]) and asks for the
//! missing ones of days that ended a day ago or more: each is made by a background
//! write, once no other write waits, so the first read of a day pays for it and the
//! next ones do not. A change to a day with sums takes them away (the migration's
//! triggers), and a later read makes them again: they are never stale, only absent.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use rusqlite::Connection;

use super::LedgerError;
use super::admission::DAY_MS;
use super::record::{self, UsageRow};
use super::sqlite_reads::{SqliteReads, usage_row};
use super::store::{StoreFuture, params};
use super::writer::{Writer, bind, owned, query_rows};

/// Days after its end before a day gets sums: its tasks still end meanwhile (each
/// end would take the sums away again).
const SETTLING_DAYS: i64 = 1;
/// Days' sums one read asks for at most, the newest first: a range reaching far
/// before a key's first task asks for the rest on later reads.
const FILLS_PER_READ: usize = 62;

/// Days whose sums are asked for and not yet made, so that reads in a row ask once.
#[derive(Default)]
pub(super) struct ClosedDays {
    asked: Arc<Mutex<HashSet<(String, i64)>>>,
}

impl ClosedDays {
    /// `owner`'s usage of the rows created in `[since_ms, until_ms)`, as
    /// [`record::USAGE_OF`] reads it; the sums missing for days over by `now_ms`
    /// are asked of `writer`.
    pub(super) fn usage_of<'a>(
        &'a self,
        reads: &'a SqliteReads,
        writer: &'a Writer,
        owner: &str,
        (since_ms, until_ms): (i64, i64),
        now_ms: i64,
    ) -> StoreFuture<'a, Vec<UsageRow>> {
        let days = closable(since_ms, until_ms, now_ms);
        let args = params![owner, since_ms, until_ms];
        let args = owned(&args);
        let day_args = params![owner, days.start, days.end];
        let day_args = owned(&day_args);
        let read = reads.run(move |conn| {
            let usage = query_rows(conn, record::USAGE_OF_CLOSED, &args, usage_row)?;
            let closed = query_rows(conn, record::CLOSED_DAYS, &day_args, |r| Ok(r.get(0)?))?;
            let first = query_rows(conn, record::FIRST_DAY, &day_args[..1], |r| Ok(r.get(0)?))?;
            Ok((usage, closed, first.into_iter().next().flatten()))
        });
        let owner = owner.to_owned();
        Box::pin(async move {
            let (usage, closed, first): (_, Vec<i64>, Option<i64>) = read.await?;
            // Days before the key's first have nothing to sum.
            let Some(first) = first else {
                return Ok(usage);
            };
            let closed: HashSet<i64> = closed.into_iter().collect();
            let days = days.start.max(first)..days.end;
            let missing = days.rev().filter(|day| !closed.contains(day));
            for day in missing.take(FILLS_PER_READ) {
                self.ask(writer, &owner, day);
            }
            Ok(usage)
        })
    }

    /// Have `writer` make the sums of `owner`'s `day`, unless already asked.
    fn ask(&self, writer: &Writer, owner: &str, day: i64) {
        let asked = (owner.to_owned(), day);
        if !lock(&self.asked).insert(asked.clone()) {
            return;
        }
        let list = Arc::clone(&self.asked);
        writer.run_when_idle_detached(move |conn| {
            lock(&list).remove(&asked);
            close_day(conn, &asked.0, asked.1).inspect_err(|e| {
                tracing::warn!(error = %e, day = asked.1, "cannot sum a day's usage");
            })
        });
    }
}

fn lock(
    asked: &Mutex<HashSet<(String, i64)>>,
) -> std::sync::MutexGuard<'_, HashSet<(String, i64)>> {
    asked.lock().unwrap_or_else(|e| e.into_inner())
}

/// The days wholly in `[since_ms, until_ms)` that ended [`SETTLING_DAYS`] or more
/// before `now_ms`.
fn closable(since_ms: i64, until_ms: i64, now_ms: i64) -> std::ops::Range<i64> {
    let first = since_ms.max(0).saturating_add(DAY_MS - 1) / DAY_MS;
    let last = until_ms
        .div_euclid(DAY_MS)
        .min(now_ms.div_euclid(DAY_MS) - SETTLING_DAYS);
    first..last.max(first)
}

/// Make the sums of `owner`'s `day`, on the writer (in a savepoint: the sums and the
/// day's mark together), unless it has them or a task of it is still being
/// submitted.
fn close_day(conn: &Connection, owner: &str, day: i64) -> Result<(), LedgerError> {
    let (start, end) = (day * DAY_MS, (day + 1) * DAY_MS);
    let span = params![owner, start, end];
    let span = owned(&span);
    let mut not_now = bind(conn, record::NOT_TO_CLOSE, &span)?;
    let mut rows = not_now.raw_query();
    let skip: bool = match rows.next()? {
        Some(row) => row.get(0)?,
        None => true,
    };
    drop(rows);
    if skip {
        return Ok(());
    }
    bind(conn, record::FILL_CLOSED_DAY, &span)?.raw_execute()?;
    let mark = params![owner, day];
    let mark = owned(&mark);
    bind(conn, record::CLOSE_DAY, &mark)?.raw_execute()?;
    Ok(())
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
        assert_eq!(closable(0, i64::MAX, now), 0..9);
        assert_eq!(closable(i64::MIN, day(2), now), 0..2);
        // Nothing closable: an empty range, never a reversed one.
        assert_eq!(closable(day(9), day(12), now), 9..9);
        assert_eq!(closable(day(5), day(5), now).count(), 0);
    }

    /// A task's row as the test writes it: its key, its day (of the eight before
    /// today's end), its model and what it has become.
    #[derive(Debug, Clone)]
    struct Row {
        owner: &'static str,
        day: i64,
        model: &'static str,
        state: &'static str,
        seconds: i64,
        estimate: Option<i64>,
    }

    #[derive(Debug, Clone)]
    enum Step {
        Add(Row),
        /// The provider's answer to task `n`'s submit, if it is still being submitted.
        Created(usize),
        /// The provider ends task `n` (mod the tasks so far): completed at a price,
        /// or failed.
        End(usize, Option<i64>),
        /// The operator resolves task `n`, if its outcome is unknown.
        Resolve(usize, bool),
        /// Retention deletes every finished task.
        Prune,
        /// Every closable day of both keys gets its sums.
        Close,
    }

    fn row() -> impl Strategy<Value = Row> {
        let states = [
            "submitting",
            "submitted",
            "completed",
            "failed",
            "refused",
            "unknown_outcome",
        ];
        (
            prop::sample::select(vec!["a", "b"]),
            0..8i64,
            prop::sample::select(vec!["m1", "m2"]),
            prop::sample::select(states.to_vec()),
            0..20i64,
            prop::option::of(0..1_000_000i64),
        )
            .prop_map(|(owner, day, model, state, seconds, estimate)| Row {
                owner,
                day,
                model,
                state,
                seconds,
                estimate,
            })
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => row().prop_map(Step::Add),
            1 => any::<usize>().prop_map(Step::Created),
            2 => (any::<usize>(), prop::option::of(0..1_000_000i64)).prop_map(|(n, p)| Step::End(n, p)),
            1 => (any::<usize>(), any::<bool>()).prop_map(|(n, c)| Step::Resolve(n, c)),
            1 => Just(Step::Prune),
            2 => Just(Step::Close),
        ]
    }

    /// Run `step` on the ledger `l`, whose tasks so far are `rows` ids; `first_day`
    /// is the day the test's days count from.
    async fn run(l: &Ledger, step: Step, rows: &mut Vec<i64>, first_day: i64) {
        let writer = l.store.sqlite_writer().expect("SQLite");
        let now = now_ms();
        let pick = |n: usize| (!rows.is_empty()).then(|| rows[n % rows.len()]);
        match step {
            Step::Add(r) => {
                let created = (first_day + r.day) * DAY_MS + (rows.len() as i64 * 997) % DAY_MS;
                let row = writer.run(move |conn| {
                    let finished = matches!(r.state, "completed" | "failed" | "refused");
                    let upstream = r.state != "submitting" && r.state != "refused";
                    let settled = match r.state {
                        "completed" => r.estimate,
                        "failed" | "refused" => r.estimate.map(|_| 0),
                        _ => None,
                    };
                    conn.execute(
                        "INSERT INTO tasks (owner, endpoint, model, kind, fingerprint, video_seconds, state, provider, upstream_id, created_ms, updated_ms, finished_ms, cost_estimate, cost_settled) VALUES (?1, 'model-center', ?2, 'video', 'fp', ?3, ?4, 'p', CASE WHEN ?5 THEN 'up-' || (SELECT COALESCE(MAX(id), 0) + 1 FROM tasks) END, ?6, ?6, CASE WHEN ?7 THEN ?6 END, ?8, ?9)",
                        rusqlite::params![r.owner, r.model, r.seconds, r.state, upstream, created, finished, r.estimate, settled],
                    )?;
                    Ok(conn.last_insert_rowid())
                });
                rows.push(row.await.unwrap());
            }
            Step::Created(n) => {
                let Some(id) = pick(n) else { return };
                let upstream = format!("up-{id}");
                let args = params![
                    id,
                    "p",
                    upstream.as_str(),
                    "t",
                    "queued",
                    200,
                    "{}",
                    now,
                    1000
                ];
                let args = owned(&args);
                let created = writer.run(move |conn| {
                    let sql = "SELECT COUNT(*) FROM tasks WHERE id = ?1 AND state = 'submitting'";
                    let submitting: i64 = conn.query_row(sql, [id], |r| r.get(0))?;
                    if submitting == 1 {
                        bind(conn, record::SET_CREATED, &args)?.raw_execute()?;
                    }
                    Ok(())
                });
                created.await.unwrap();
            }
            Step::End(n, price) => {
                let Some(id) = pick(n) else { return };
                let state = if price.is_some() {
                    "completed"
                } else {
                    "failed"
                };
                let upstream = format!("up-{id}");
                let args = params![
                    "p",
                    upstream.as_str(),
                    state,
                    state,
                    "[]",
                    None::<&str>,
                    None::<&str>,
                    now,
                    None::<i64>,
                    price
                ];
                l.store.execute(record::SET_FINISHED, args).await.unwrap();
            }
            Step::Resolve(n, completed) => {
                let Some(id) = pick(n) else { return };
                let state = if completed { "completed" } else { "failed" };
                let args = params![
                    id,
                    state,
                    state,
                    None::<&str>,
                    None::<i64>,
                    None::<&str>,
                    now
                ];
                l.store.execute(record::SET_RESOLVED, args).await.unwrap();
            }
            Step::Prune => {
                let args = params![0, i64::MAX, now + 1];
                l.store.execute(record::PRUNE_SQLITE, args).await.unwrap();
            }
            Step::Close => {
                for owner in ["a", "b"] {
                    for day in closable(0, i64::MAX, now).filter(|d| *d >= first_day) {
                        writer
                            .run(move |conn| close_day(conn, owner, day))
                            .await
                            .unwrap();
                    }
                }
            }
        }
    }

    /// A read asks for the sums of the days that are over, once, and the next reads
    /// take those days from them: a row changed behind the ledger's back (no end,
    /// so its sums stay) shows in the rows and not in the read.
    #[tokio::test]
    async fn a_read_asks_for_the_sums_of_days_over_and_the_next_reads_use_them() {
        let dir = tempfile::tempdir().unwrap();
        let url = LedgerUrl::parse("sqlite://ledger.db", dir.path()).unwrap();
        let l = Ledger::open(&url, 2).await.unwrap().unwrap();
        let first_day = now_ms() / DAY_MS - 7;
        let mut rows = Vec::new();
        for (day, state) in [
            (1, "completed"),
            (1, "failed"),
            (6, "completed"),
            (7, "submitted"),
        ] {
            let row = Row {
                owner: "a",
                day,
                model: "m1",
                state,
                seconds: 5,
                estimate: Some(100),
            };
            run(&l, Step::Add(row), &mut rows, first_day).await;
        }
        let writer = l.store.sqlite_writer().unwrap();
        let marks = async || {
            let sql = "SELECT COUNT(*) FROM usage_closed_days WHERE owner = 'a'";
            let count =
                writer.run(move |conn| Ok(conn.query_row(sql, [], |r| r.get::<_, i64>(0))?));
            count.await.unwrap()
        };
        let before = l.usage(Some("a"), 0, i64::MAX).await.unwrap();
        assert_eq!(before.len(), 3, "{before:?}");
        // Days 1 (the first with a task) to 5 (6 is yesterday, 7 today).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while marks().await < 5 {
            assert!(
                std::time::Instant::now() < deadline,
                "the sums were never made"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(marks().await, 5);

        let change = "UPDATE tasks SET video_seconds = 50";
        writer
            .run(move |conn| Ok(conn.execute(change, [])?))
            .await
            .unwrap();
        let after = l.usage(Some("a"), 0, i64::MAX).await.unwrap();
        let rows = l
            .store
            .reads()
            .usage(record::USAGE_OF, params!["a", 0, i64::MAX]);
        let rows = rows.await.unwrap();
        let seconds = |u: &[UsageRow]| u.iter().map(|u| u.video_seconds).collect::<Vec<_>>();
        // Day 1 from its sums; days 6 and 7, without, from their rows.
        assert_eq!(seconds(&before), [10, 5, 5]);
        assert_eq!(seconds(&after), [10, 50, 50]);
        assert_eq!(seconds(&rows), [100, 50, 50]);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Whatever happens to a key's tasks (added, ended, resolved, pruned, the
        /// clock set back into a day with sums), its usage read with the days' sums
        /// is, to the unit, its usage read from its rows, for any range.
        #[test]
        fn usage_with_the_days_sums_is_usage_read_from_the_rows(steps in prop::collection::vec(step(), 1..40)) {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async {
                let dir = tempfile::tempdir().unwrap();
                let url = LedgerUrl::parse("sqlite://ledger.db", dir.path()).unwrap();
                let l = Ledger::open(&url, 2).await.unwrap().unwrap();
                let first_day = now_ms() / DAY_MS - 7;
                let mut rows = Vec::new();
                let day = |d: i64| (first_day + d) * DAY_MS;
                let ranges = [(0, i64::MAX), (day(1), day(5)), (day(0) + 1, day(3) - 1), (day(2), day(8) + 7)];
                for step in steps {
                    run(&l, step, &mut rows, first_day).await;
                    for owner in ["a", "b"] {
                        for (since, until) in ranges {
                            let plain = l.store.reads().usage(record::USAGE_OF, params![owner, since, until]);
                            let plain = plain.await.unwrap();
                            let read = l.usage(Some(owner), since, until).await.unwrap();
                            assert_eq!(read, plain, "{owner} from {since} to {until}");
                        }
                    }
                }
            });
        }
    }
}
