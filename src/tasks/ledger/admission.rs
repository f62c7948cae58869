//! Admission, decided once for both engines: the idempotency key seen before (replay,
//! in flight, mismatch, outcome unknown), the daily quota, the budget, else the
//! write-ahead row (which reserves the task's estimate: a trigger adds it to the
//! owner's spend). An engine supplies its transaction, as an [`AdmissionTx`] (and a
//! [`CountingTx`] to read what the owner used): on SQLite the writer thread's (its
//! futures are ready at once). PostgreSQL reads and inserts in one server-side call
//! when there is a quota or a budget (see `postgres.rs`), and takes the verdict from
//! [`refusal`] over the figures that call returns.

use super::record::{NewTask, TaskRecord};
use super::store::Clock;
use super::{Admission, LedgerError};
use crate::money::{Micros, Period};

/// A quota resets at the next UTC midnight.
pub(super) const DAY_MS: i64 = 86_400_000;

/// What a submit whose idempotency key is taken reads.
pub(super) trait KeyLookup {
    /// The owner's row holding `key`, if any.
    async fn seen(&mut self, owner: &str, key: &str) -> Result<Option<TaskRecord>, LedgerError>;
}

/// What every admission reads and writes, inside the engine's transaction.
pub(super) trait AdmissionTx: KeyLookup {
    /// The write-ahead row; `None` when the idempotency key is taken.
    async fn insert(&mut self, new: &NewTask<'_>, now: i64) -> Result<Option<i64>, LedgerError>;
}

/// What an admission with a quota or a budget reads besides.
pub(super) trait CountingTx: AdmissionTx {
    /// Tasks and video seconds the owner used since `day_start`.
    async fn used_since(&mut self, owner: &str, day_start: i64) -> Result<(i64, i64), LedgerError>;

    /// What the owner's tasks cost (settled and reserved) on `day` and since
    /// `since_day` (days since the epoch).
    async fn spent(
        &mut self,
        owner: &str,
        day: i64,
        since_day: i64,
    ) -> Result<(i64, i64), LedgerError>;
}

/// What the owner used and spent, as far as its quota and budget ask.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Standing {
    /// Tasks and video seconds since the day's start; read when there is a quota.
    pub used: Option<(i64, i64)>,
    /// Spent (settled and reserved) today and this month; read when there is a budget.
    pub spent: Option<(i64, i64)>,
}

/// One attempt: the admission, or `None` when the key was taken and released again
/// between two statements (the caller tries again, a bounded number of times).
///
/// With a quota or a budget the key is looked up first, so that a retry is answered
/// even over them; without, the insert itself takes the key or finds it taken.
pub(super) async fn admit(
    tx: &mut impl CountingTx,
    new: &NewTask<'_>,
    at: Clock,
) -> Result<Option<Admission>, LedgerError> {
    if new.counted() {
        if let Some(seen) = seen(tx, new).await? {
            return Ok(Some(seen));
        }
        let mut standing = Standing::default();
        if new.quota.is_some() {
            standing.used = Some(tx.used_since(new.owner, at.day_start).await?);
        }
        if new.budget.is_some() {
            let (day, month) = (at.day_start / DAY_MS, at.month_start / DAY_MS);
            standing.spent = Some(tx.spent(new.owner, day, month).await?);
        }
        if let Some(refused) = refusal(new, at, standing) {
            return Ok(Some(refused));
        }
    }
    insert(tx, new, at.now).await
}

/// The write-ahead row, or what the row already holding the key means.
pub(super) async fn insert(
    tx: &mut impl AdmissionTx,
    new: &NewTask<'_>,
    now: i64,
) -> Result<Option<Admission>, LedgerError> {
    if let Some(row) = tx.insert(new, now).await? {
        return Ok(Some(Admission::Fresh(row)));
    }
    seen(tx, new).await
}

/// The refusal the owner's standing calls for: the quota first, then the budget.
pub(super) fn refusal(new: &NewTask<'_>, at: Clock, standing: Standing) -> Option<Admission> {
    if let (Some(quota), Some((tasks, seconds))) = (new.quota, standing.used)
        && let Some(what) = quota.exceeded(tasks, seconds, new.video_seconds)
    {
        return Some(Admission::QuotaExceeded {
            what,
            resets_ms: at.day_start + DAY_MS,
        });
    }
    if let (Some(budget), Some((spent_day, spent_month))) = (new.budget, standing.spent) {
        let cost = new.cost_estimate.unwrap_or(Micros::ZERO);
        if let Some((period, remaining)) =
            budget.exceeded(Micros(spent_day), Micros(spent_month), cost)
        {
            let resets_ms = match period {
                Period::Day => at.day_start + DAY_MS,
                Period::Month => at.next_month_start,
            };
            return Some(Admission::BudgetExceeded {
                period,
                remaining,
                resets_ms,
            });
        }
    }
    None
}

/// What the row already holding the request's key means for it.
pub(super) async fn seen(
    tx: &mut impl KeyLookup,
    new: &NewTask<'_>,
) -> Result<Option<Admission>, LedgerError> {
    let Some(key) = new.idempotency_key else {
        return Ok(None);
    };
    let row = tx.seen(new.owner, key).await?;
    Ok(row.map(|row| Admission::seen(row, &new.fingerprint)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::QuotaConfig;
    use futures_util::FutureExt;

    /// An engine in memory: a key's row, the day's usage, and whether the insert
    /// finds the key taken.
    #[derive(Default)]
    struct Fake {
        seen: Vec<Option<TaskRecord>>,
        used: (i64, i64),
        spent: (i64, i64),
        key_taken: bool,
        inserted: bool,
    }

    impl KeyLookup for Fake {
        async fn seen(&mut self, _: &str, _: &str) -> Result<Option<TaskRecord>, LedgerError> {
            Ok(self.seen.pop().flatten())
        }
    }

    impl AdmissionTx for Fake {
        async fn insert(&mut self, _: &NewTask<'_>, _: i64) -> Result<Option<i64>, LedgerError> {
            self.inserted = !self.key_taken;
            Ok((!self.key_taken).then_some(7))
        }
    }

    impl CountingTx for Fake {
        async fn used_since(&mut self, _: &str, _: i64) -> Result<(i64, i64), LedgerError> {
            Ok(self.used)
        }
        async fn spent(&mut self, _: &str, _: i64, _: i64) -> Result<(i64, i64), LedgerError> {
            Ok(self.spent)
        }
    }

    fn new(quota: Option<QuotaConfig>) -> NewTask<'static> {
        NewTask {
            idempotency_key: Some("k"),
            quota,
            cost_estimate: Some(Micros(5)),
            ..NewTask::example("a")
        }
    }

    fn decide(tx: &mut Fake, new: &NewTask<'_>) -> Option<Admission> {
        let at = Clock::at(DAY_MS + 5);
        admit(tx, new, at).now_or_never().unwrap().unwrap()
    }

    #[test]
    fn a_key_released_between_insert_and_look_is_a_lost_race() {
        let mut tx = Fake {
            key_taken: true,
            ..Fake::default()
        };
        assert!(decide(&mut tx, &new(None)).is_none());
    }

    #[test]
    fn a_quota_is_checked_after_the_key_and_before_the_insert() {
        let quota = QuotaConfig {
            tasks_per_day: Some(1),
            video_seconds_per_day: None,
        };
        let mut tx = Fake {
            used: (1, 0),
            ..Fake::default()
        };
        let admission = decide(&mut tx, &new(Some(quota)));
        assert!(matches!(
            admission,
            Some(Admission::QuotaExceeded { what: "tasks_per_day", resets_ms }) if resets_ms == 2 * DAY_MS
        ));
        assert!(!tx.inserted);
        let mut tx = Fake::default();
        assert!(matches!(
            decide(&mut tx, &new(Some(quota))),
            Some(Admission::Fresh(7))
        ));
    }
}

#[cfg(test)]
mod budget_tests {
    use super::*;
    use crate::money::Budget;
    use futures_util::FutureExt;

    struct Spent((i64, i64));

    impl KeyLookup for Spent {
        async fn seen(&mut self, _: &str, _: &str) -> Result<Option<TaskRecord>, LedgerError> {
            Ok(None)
        }
    }

    impl AdmissionTx for Spent {
        async fn insert(&mut self, _: &NewTask<'_>, _: i64) -> Result<Option<i64>, LedgerError> {
            Ok(Some(1))
        }
    }

    impl CountingTx for Spent {
        async fn used_since(&mut self, _: &str, _: i64) -> Result<(i64, i64), LedgerError> {
            Ok((0, 0))
        }
        async fn spent(&mut self, _: &str, _: i64, _: i64) -> Result<(i64, i64), LedgerError> {
            Ok(self.0)
        }
    }

    #[test]
    fn a_budget_refuses_what_does_not_fit_and_says_when_it_resets() {
        let new = NewTask {
            cost_estimate: Some(Micros(300)),
            budget: Some(Budget {
                per_day: Some(Micros(1_000)),
                per_month: Some(Micros(5_000)),
            }),
            ..NewTask::example("a")
        };
        // 2026-02-14 12:00 UTC: the day ends at midnight, the month on March 1st.
        let now = crate::calendar::days_from_civil(2026, 2, 14) * DAY_MS + DAY_MS / 2;
        let at = Clock::at(now);
        let decide = |spent| {
            admit(&mut Spent(spent), &new, at)
                .now_or_never()
                .unwrap()
                .unwrap()
        };
        assert!(matches!(decide((700, 4_000)), Some(Admission::Fresh(1))));
        let Some(Admission::BudgetExceeded {
            period,
            remaining,
            resets_ms,
        }) = decide((701, 701))
        else {
            panic!("over the day's budget")
        };
        assert_eq!((period, remaining), (Period::Day, Micros(299)));
        assert_eq!(resets_ms, at.day_start + DAY_MS);
        let Some(Admission::BudgetExceeded {
            period,
            remaining,
            resets_ms,
        }) = decide((0, 4_800))
        else {
            panic!("over the month's budget")
        };
        assert_eq!((period, remaining), (Period::Month, Micros(200)));
        assert_eq!(
            resets_ms,
            crate::calendar::days_from_civil(2026, 3, 1) * DAY_MS
        );
    }
}
