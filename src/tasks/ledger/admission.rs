//! Admission, decided once for both engines: the idempotency key seen before (replay,
//! in flight, mismatch, outcome unknown), the daily quota, else the write-ahead row.
//! An engine supplies only its transaction, as an [`AdmissionTx`]: on SQLite the
//! writer thread's (its futures are ready at once), on PostgreSQL a connection, in a
//! transaction serialised per owner when there is a quota.

use super::record::{NewTask, TaskRecord};
use super::store::Clock;
use super::{Admission, LedgerError};

/// A quota resets at the next UTC midnight.
pub(super) const DAY_MS: i64 = 86_400_000;

/// What admission reads and writes, inside the engine's transaction.
pub(super) trait AdmissionTx {
    /// The owner's row holding `key`, if any.
    async fn seen(&mut self, owner: &str, key: &str) -> Result<Option<TaskRecord>, LedgerError>;

    /// Tasks and video seconds the owner used since `day_start`.
    async fn used_since(&mut self, owner: &str, day_start: i64) -> Result<(i64, i64), LedgerError>;

    /// The write-ahead row; `None` when the idempotency key is taken.
    async fn insert(&mut self, new: &NewTask<'_>, now: i64) -> Result<Option<i64>, LedgerError>;
}

/// One attempt: the admission, or `None` when the key was taken and released again
/// between two statements (the caller tries again, a bounded number of times).
///
/// With a quota the key is looked up first, so that a retry is answered even over
/// the quota; without, the insert itself takes the key or finds it taken.
pub(super) async fn admit(
    tx: &mut impl AdmissionTx,
    new: &NewTask<'_>,
    at: Clock,
) -> Result<Option<Admission>, LedgerError> {
    if let Some(quota) = new.quota {
        if let Some(seen) = seen(tx, new).await? {
            return Ok(Some(seen));
        }
        let (tasks, seconds) = tx.used_since(new.owner, at.day_start).await?;
        if let Some(what) = quota.exceeded(tasks, seconds, new.video_seconds) {
            return Ok(Some(Admission::QuotaExceeded {
                what,
                resets_ms: at.day_start + DAY_MS,
            }));
        }
    }
    if let Some(row) = tx.insert(new, at.now).await? {
        return Ok(Some(Admission::Fresh(row)));
    }
    seen(tx, new).await
}

/// What the row already holding the request's key means for it.
async fn seen(
    tx: &mut impl AdmissionTx,
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
    use crate::config::{Endpoint, QuotaConfig};
    use crate::tasks::MediaKind;
    use futures_util::FutureExt;

    /// An engine in memory: a key's row, the day's usage, and whether the insert
    /// finds the key taken.
    #[derive(Default)]
    struct Fake {
        seen: Vec<Option<TaskRecord>>,
        used: (i64, i64),
        key_taken: bool,
        inserted: bool,
    }

    impl AdmissionTx for Fake {
        async fn seen(&mut self, _: &str, _: &str) -> Result<Option<TaskRecord>, LedgerError> {
            Ok(self.seen.pop().flatten())
        }
        async fn used_since(&mut self, _: &str, _: i64) -> Result<(i64, i64), LedgerError> {
            Ok(self.used)
        }
        async fn insert(&mut self, _: &NewTask<'_>, _: i64) -> Result<Option<i64>, LedgerError> {
            self.inserted = !self.key_taken;
            Ok((!self.key_taken).then_some(7))
        }
    }

    fn new(quota: Option<QuotaConfig>) -> NewTask<'static> {
        NewTask {
            owner: "a",
            endpoint: Endpoint::ModelCenter,
            model: "m",
            kind: MediaKind::Video,
            fingerprint: "fp".into(),
            idempotency_key: Some("k"),
            video_seconds: 5,
            quota,
            provider: None,
            callback_url: None,
            keep_days: None,
        }
    }

    fn decide(tx: &mut Fake, new: &NewTask<'_>) -> Option<Admission> {
        let at = Clock {
            now: DAY_MS + 5,
            day_start: DAY_MS,
        };
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
