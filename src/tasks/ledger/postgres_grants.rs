//! Budgets granted ahead on PostgreSQL (migration 0016): where a key with a budget
//! submits fast, this replica holds a share of what the budget has left, and admits
//! the key's submits against it with the plain batched insert instead of the locked
//! admission. Replicas agree on a key's spend through the owner's lock, held to each
//! admission's commit, so a busy key's admissions otherwise follow one another at the
//! pace of the server's commits; a grant takes that lock once for many submits.
//!
//! - **When.** Only for a key that had [`BUSY`] admissions on this replica within the
//!   last [`WINDOW`], and has no quota (a quota counts tasks under the same lock).
//!   Quiet keys are admitted exactly as before.
//! - **How much.** About two windows of the key's arrivals here, at most a sixteenth
//!   of what its budget has left (day and month, every reservation and grant
//!   counted), none below [`LEAST_TASKS`] estimates: near a budget's edge every
//!   admission is the exact, locked one again.
//! - **Taken ahead.** In the background, when what is left of the grant falls below
//!   half or it nears its expiry, so that no submit waits for a grant.
//! - **Given back.** A grant is part of the owner's spend from the moment it is taken;
//!   what its tasks did not reserve goes back when it has gone unused for [`IDLE`],
//!   when a newer one replaces it, when the process stops, or, after the replica
//!   died, when it expires
//!   ([`LIFETIME`]; the sweep and the next grant of the owner give it back).
//!   Meanwhile other replicas see it as reserved: a submit elsewhere may be refused
//!   for what this replica holds, for at most that long. What is spent never passes the
//!   budget.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use sqlx::PgPool;
use tokio_util::task::{TaskTracker, task_tracker::TaskTrackerToken};

use super::LedgerError;
use super::admission::DAY_MS;
use super::record::NewTask;
use super::store::Clock;
use crate::money::Budget;

/// Arrivals are counted over windows this long.
const WINDOW: Duration = Duration::from_secs(1);

/// Admissions of a key within a window that make it worth a grant.
const BUSY: u32 = 8;

/// A grant holds at least this many estimates, else none is taken.
const LEAST_TASKS: i64 = 4;

/// A grant expires this long after it is taken, by the server's clock.
const LIFETIME: Duration = Duration::from_secs(10);

/// A grant is drawn on until this long before it expires (counted here from when it
/// was asked for, which is before the server took it): an insert sent then arrives
/// well before.
const MARGIN: Duration = Duration::from_secs(2);

/// A grant nearer its expiry than this is replaced.
const RENEW: Duration = Duration::from_secs(4);

/// A grant unused this long, or replaced this long ago, is given back.
const IDLE: Duration = Duration::from_secs(1);

/// How often held grants are looked over for giving back.
const REAP_EVERY: Duration = Duration::from_millis(250);

/// After a grant was refused (too little left), or given back for a submit the
/// budget refused, none is asked for this long.
const QUIET: Duration = Duration::from_secs(1);

/// A give-back waits for a grant being asked for, this often and at most this many
/// times.
const ASK_WAIT: Duration = Duration::from_millis(2);
const ASK_WAITS: usize = 500;

const TAKE: &str =
    "SELECT grant_id, micros, expires_ms FROM mediagate_take_grant($1, $2, $3, $4, $5, $6, $7, $8)";
const GIVE_BACK: &str = "SELECT mediagate_give_back($1::int8[])";
const GIVE_BACK_EXPIRED: &str = "SELECT mediagate_give_back_expired(NULL)";

/// A grant asked for longer than this is given up on (the server may hold it; it
/// expires there).
const ASK_TIMEOUT: Duration = Duration::from_secs(5);

/// The grants this replica holds, per owner.
pub(super) struct Grants {
    pool: PgPool,
    held: Arc<Mutex<HashMap<String, Held>>>,
    reaping: AtomicBool,
    /// Held by the reaper while its give-back is under way, so that a stop does not
    /// end the process in the middle of one.
    giving_back: Arc<tokio::sync::Mutex<()>>,
    /// The asks for grants under way, waited for at a stop; closed then, and no
    /// grant is asked for any more.
    asks: TaskTracker,
}

/// What this replica holds of one owner's budget.
#[derive(Default)]
struct Held {
    current: Option<Grant>,
    /// Grants replaced, given back once the submits drawn on them are written.
    retired: Vec<(i64, Instant)>,
    /// Admissions in this window, and in the one before.
    window: Option<Instant>,
    arrivals: u32,
    arrivals_before: u32,
    /// A grant is being asked for.
    asking: bool,
    quiet_until: Option<Instant>,
}

struct Grant {
    id: i64,
    /// The UTC day (days since the epoch) its tasks must be submitted on.
    day: i64,
    /// The budget it was sized against: another budget (a reload) stops its use.
    budget: Budget,
    left: i64,
    micros: i64,
    /// When it expires on the server at the latest, by this replica's clock.
    expires: Instant,
    last_used: Instant,
}

/// A grant to ask for.
struct Ask {
    owner: String,
    budget: Budget,
    at: Clock,
    want: i64,
    least: i64,
}

impl Grants {
    pub(super) fn new(pool: PgPool) -> Self {
        Self {
            pool,
            held: Arc::default(),
            reaping: AtomicBool::new(false),
            giving_back: Arc::default(),
            asks: TaskTracker::new(),
        }
    }

    /// A grant `new`'s estimate was drawn from, if one can cover it; asks for the next
    /// grant in the background when the key is busy and this one runs low.
    pub(super) fn draw(&self, new: &NewTask<'_>, at: Clock) -> Option<i64> {
        let (Some(budget), None, Some(cost)) = (new.budget, new.quota, new.cost_estimate) else {
            return None;
        };
        let cost = cost.0;
        let now = Instant::now();
        let (drawn, ask) = {
            let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
            if !held.contains_key(new.owner) {
                held.insert(new.owner.to_owned(), Held::default());
            }
            let h = held.get_mut(new.owner).expect("inserted above");
            h.count(now);
            let drawn = h.draw(budget, cost, at, now);
            // Decided and tracked under the lock that `give_back_all` closes the
            // asks under: an ask decided before the stop is waited for.
            let ask = if self.asks.is_closed() {
                None
            } else {
                let ask = h.ask(new.owner, budget, cost, at, now);
                ask.map(|ask| (ask, self.asks.token()))
            };
            (drawn, ask)
        };
        if let Some((ask, tracked)) = ask {
            self.ask(ask, tracked);
        }
        drawn
    }

    /// A draw on grant `id` that wrote no row (the idempotency key was taken): its
    /// estimate is the grant's again.
    pub(super) fn undraw(&self, owner: &str, id: i64, cost: i64) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(g) = held.get_mut(owner).and_then(|h| h.current.as_mut())
            && g.id == id
        {
            g.left += cost;
        }
    }

    /// Grant `id` was given back or expired on the server: not drawn on again.
    pub(super) fn gone(&self, owner: &str, id: i64) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(h) = held.get_mut(owner)
            && h.current.as_ref().is_some_and(|g| g.id == id)
        {
            h.current = None;
        }
    }

    /// Gives back at once what this replica holds of `owner`'s budget (after a grant
    /// being asked for has come), for a submit the budget refused: that may be what
    /// it needs. Whether anything was given back.
    pub(super) async fn give_back(&self, owner: &str) -> bool {
        let mut ids = Vec::new();
        for _ in 0..ASK_WAITS {
            match self.take_back(owner) {
                Some(held) => {
                    ids = held;
                    break;
                }
                None => tokio::time::sleep(ASK_WAIT).await,
            }
        }
        if ids.is_empty() {
            return false;
        }
        match sqlx::query(GIVE_BACK).bind(&ids).execute(&self.pool).await {
            Ok(_) => true,
            Err(e) => {
                // The refusal stands; the grants expire on the server.
                tracing::warn!(error = %e, grants = ids.len(), "budget grants not given back; they expire");
                false
            }
        }
    }

    /// The process stops: every grant held goes back at once, rather than when it
    /// expires. A grant still being asked for is waited for (each ask is bounded by
    /// [`ASK_TIMEOUT`]): taken after the give-back, it would be held to its expiry.
    /// So is the reaper's give-back under way.
    pub(super) async fn give_back_all(&self) -> Result<(), LedgerError> {
        {
            let _deciding = self.held.lock().unwrap_or_else(PoisonError::into_inner);
            self.asks.close();
        }
        self.asks.wait().await;
        let _reaper_done = self.giving_back.lock().await;
        let ids: Vec<i64> = {
            let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
            held.drain()
                .flat_map(|(_, h)| {
                    let current = h.current.map(|g| g.id);
                    current
                        .into_iter()
                        .chain(h.retired.into_iter().map(|(id, _)| id))
                })
                .collect()
        };
        if !ids.is_empty() {
            sqlx::query(GIVE_BACK)
                .bind(&ids)
                .execute(&self.pool)
                .await?;
        }
        Ok(())
    }

    /// Every replica's expired grants given back: those of a replica that died.
    pub(super) async fn give_back_expired(&self) -> Result<(), LedgerError> {
        sqlx::query(GIVE_BACK_EXPIRED).execute(&self.pool).await?;
        Ok(())
    }

    /// The grants held for `owner`, taken off; `None` while one is being asked for.
    fn take_back(&self, owner: &str) -> Option<Vec<i64>> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(h) = held.get_mut(owner) else {
            return Some(Vec::new());
        };
        if h.asking {
            return None;
        }
        h.quiet_until = Some(Instant::now() + QUIET);
        let mut ids: Vec<i64> = h.current.take().map(|g| g.id).into_iter().collect();
        ids.extend(h.retired.drain(..).map(|(id, _)| id));
        Some(ids)
    }

    fn ask(&self, ask: Ask, tracked: TaskTrackerToken) {
        if !self.reaping.swap(true, Ordering::Relaxed) {
            let reaper = reap(
                self.pool.clone(),
                Arc::clone(&self.held),
                Arc::clone(&self.giving_back),
            );
            tokio::spawn(reaper);
        }
        let taking = take(self.pool.clone(), Arc::clone(&self.held), ask);
        tokio::spawn(async move {
            taking.await;
            drop(tracked);
        });
    }
}

impl Held {
    fn count(&mut self, now: Instant) {
        match self.window {
            Some(start) if now.duration_since(start) < WINDOW => {}
            Some(start) if now.duration_since(start) < WINDOW * 2 => {
                self.window = Some(now);
                self.arrivals_before = self.arrivals;
                self.arrivals = 0;
            }
            _ => {
                self.window = Some(now);
                self.arrivals_before = 0;
                self.arrivals = 0;
            }
        }
        self.arrivals += 1;
    }

    fn draw(&mut self, budget: Budget, cost: i64, at: Clock, now: Instant) -> Option<i64> {
        let g = self.current.as_mut()?;
        let usable = g.day == at.day_start / DAY_MS
            && g.budget == budget
            && now + MARGIN < g.expires
            && g.left >= cost;
        if !usable {
            return None;
        }
        g.left -= cost;
        g.last_used = now;
        Some(g.id)
    }

    /// The grant to ask for, if the key is busy and the one held runs low.
    fn ask(
        &mut self,
        owner: &str,
        budget: Budget,
        cost: i64,
        at: Clock,
        now: Instant,
    ) -> Option<Ask> {
        let busy = self.arrivals.max(self.arrivals_before) >= BUSY;
        let quiet = self.quiet_until.is_some_and(|until| now < until);
        let low = self.current.as_ref().is_none_or(|g| {
            g.left * 2 < g.micros
                || g.left < cost
                || now + RENEW > g.expires
                || g.day != at.day_start / DAY_MS
                || g.budget != budget
        });
        if !busy || quiet || self.asking || !low {
            return None;
        }
        self.asking = true;
        let arrivals = i64::from(self.arrivals.max(self.arrivals_before));
        Some(Ask {
            owner: owner.to_owned(),
            budget,
            at,
            want: cost.saturating_mul((arrivals * 2).max(LEAST_TASKS * 4)),
            least: cost.saturating_mul(LEAST_TASKS).max(1),
        })
    }
}

/// `mediagate_take_grant`'s answer: the grant's id, amount and expiry; all `None`
/// when there was too little left to grant.
type Taken = (Option<i64>, Option<i64>, Option<i64>);

/// Asks the server for a grant and holds it; the one it replaces is retired.
async fn take(pool: PgPool, held: Arc<Mutex<HashMap<String, Held>>>, ask: Ask) {
    let limit = |m: Option<crate::money::Micros>| m.map(|m| m.0);
    let asked = Instant::now();
    let taking = sqlx::query_as(TAKE)
        .bind(&ask.owner)
        .bind(ask.at.day_start / DAY_MS)
        .bind(ask.at.month_start / DAY_MS)
        .bind(limit(ask.budget.per_day))
        .bind(limit(ask.budget.per_month))
        .bind(ask.want)
        .bind(ask.least)
        .bind(LIFETIME.as_millis() as i64)
        .fetch_one(&pool);
    let answer: Result<Taken, String> = match tokio::time::timeout(ASK_TIMEOUT, taking).await {
        Ok(answer) => answer.map_err(|e| e.to_string()),
        Err(_) => Err("no answer in time".to_owned()),
    };
    let now = Instant::now();
    let mut held = held.lock().unwrap_or_else(PoisonError::into_inner);
    let h = held.entry(ask.owner).or_default();
    h.asking = false;
    match answer {
        Ok((Some(id), Some(micros), Some(_))) => {
            if let Some(old) = h.current.take() {
                h.retired.push((old.id, now));
            }
            h.current = Some(Grant {
                id,
                day: ask.at.day_start / DAY_MS,
                budget: ask.budget,
                left: micros,
                micros,
                expires: asked + LIFETIME,
                last_used: now,
            });
        }
        Ok(_) => h.quiet_until = Some(now + QUIET),
        Err(e) => {
            tracing::warn!(error = %e, "budget grant not taken; the key's admissions take the owner's lock");
            h.quiet_until = Some(now + QUIET);
        }
    }
}

/// Gives back, for as long as the process runs, the grants idle or retired for
/// [`IDLE`]; one that fails to go back expires on the server.
async fn reap(
    pool: PgPool,
    held: Arc<Mutex<HashMap<String, Held>>>,
    giving_back: Arc<tokio::sync::Mutex<()>>,
) {
    let mut tick = tokio::time::interval(REAP_EVERY);
    loop {
        tick.tick().await;
        let _giving = giving_back.lock().await;
        let ids = done_with(&held, Instant::now());
        if ids.is_empty() {
            continue;
        }
        if let Err(e) = sqlx::query(GIVE_BACK).bind(&ids).execute(&pool).await {
            tracing::warn!(error = %e, grants = ids.len(), "budget grants not given back; they expire");
        }
    }
}

/// The grants to give back now, taken off what is held.
fn done_with(held: &Mutex<HashMap<String, Held>>, now: Instant) -> Vec<i64> {
    let mut held = held.lock().unwrap_or_else(PoisonError::into_inner);
    let mut ids = Vec::new();
    held.retain(|_, h| {
        h.retired.retain(|&(id, at)| {
            let done = now.duration_since(at) >= IDLE;
            if done {
                ids.push(id);
            }
            !done
        });
        // Unused that long: no submit drawn on it is still being written.
        if h.current
            .as_ref()
            .is_some_and(|g| now.duration_since(g.last_used) >= IDLE)
        {
            ids.extend(h.current.take().map(|g| g.id));
        }
        // An owner quiet for a while is forgotten.
        let recent = h.window.is_some_and(|w| now.duration_since(w) < WINDOW * 4);
        h.current.is_some() || !h.retired.is_empty() || h.asking || recent
    });
    ids
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::money::Micros;

    fn budget() -> Budget {
        Budget {
            per_day: Some(Micros(1_000_000_000)),
            per_month: None,
        }
    }

    fn grant(left: i64, expires: Instant) -> Grant {
        Grant {
            id: 7,
            day: 0,
            budget: budget(),
            left,
            micros: 100,
            expires,
            last_used: Instant::now(),
        }
    }

    #[test]
    fn a_grant_covers_what_it_has_left_on_its_day_and_budget_only() {
        let now = Instant::now();
        let mut h = Held {
            current: Some(grant(25, now + LIFETIME)),
            ..Held::default()
        };
        let at = Clock::at(1_000);
        assert_eq!(h.draw(budget(), 20, at, now), Some(7));
        assert_eq!(h.draw(budget(), 20, at, now), None, "5 left");
        assert_eq!(h.draw(budget(), 5, at, now), Some(7));
        h.current = Some(grant(100, now + LIFETIME));
        let other = Budget {
            per_day: Some(Micros(5)),
            per_month: None,
        };
        assert_eq!(h.draw(other, 1, at, now), None, "sized for another budget");
        assert_eq!(
            h.draw(budget(), 1, Clock::at(DAY_MS), now),
            None,
            "another day"
        );
        assert_eq!(
            h.draw(budget(), 1, at, now + LIFETIME - MARGIN),
            None,
            "too near its expiry"
        );
    }

    #[test]
    fn only_a_busy_key_asks_and_one_ask_at_a_time() {
        let now = Instant::now();
        let mut h = Held::default();
        let at = Clock::at(1_000);
        for _ in 1..BUSY {
            h.count(now);
            assert!(h.ask("k", budget(), 10, at, now).is_none(), "not busy yet");
        }
        h.count(now);
        let ask = h
            .ask("k", budget(), 10, at, now)
            .expect("busy, nothing held");
        assert_eq!(ask.least, 10 * LEAST_TASKS);
        assert!(ask.want >= ask.least);
        assert!(
            h.ask("k", budget(), 10, at, now).is_none(),
            "already asking"
        );
        h.asking = false;
        h.current = Some(grant(60, now + LIFETIME));
        assert!(
            h.ask("k", budget(), 10, at, now).is_none(),
            "more than half left"
        );
        h.current = Some(grant(40, now + LIFETIME));
        assert!(
            h.ask("k", budget(), 10, at, now).is_some(),
            "under half left"
        );
        h.asking = false;
        h.quiet_until = Some(now + QUIET);
        h.current = None;
        assert!(
            h.ask("k", budget(), 10, at, now).is_none(),
            "refused a moment ago"
        );
    }

    #[test]
    fn idle_and_replaced_grants_are_given_back_after_a_while() {
        let start = Instant::now();
        let held = Mutex::new(HashMap::from([(
            "k".to_owned(),
            Held {
                current: Some(Grant {
                    last_used: start + Duration::from_millis(1),
                    ..grant(10, start + LIFETIME)
                }),
                retired: vec![(3, start)],
                ..Held::default()
            },
        )]));
        assert!(done_with(&held, start).is_empty());
        let later = start + IDLE;
        assert_eq!(done_with(&held, later), vec![3], "the retired one");
        assert_eq!(done_with(&held, later + IDLE), vec![7], "idle");
        assert!(held.lock().unwrap().is_empty(), "the owner forgotten");
    }

    /// A pool to a server that is not there: a statement sent fails at once.
    fn nowhere() -> PgPool {
        sqlx::postgres::PgPoolOptions::new()
            .acquire_timeout(Duration::from_millis(200))
            .connect_lazy("postgres://127.0.0.1:1/none")
            .unwrap()
    }

    #[tokio::test]
    async fn a_stop_waits_for_a_grant_being_asked_for_and_asks_for_none_after() {
        let grants = Arc::new(Grants::new(nowhere()));
        let asking = Held {
            asking: true,
            ..Held::default()
        };
        grants.held.lock().unwrap().insert("k".to_owned(), asking);
        let tracked = grants.asks.token();
        let stopping = tokio::spawn({
            let grants = Arc::clone(&grants);
            async move { grants.give_back_all().await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!stopping.is_finished(), "stopped before the ask came back");
        // The ask comes back with a grant, which must go back with the others.
        {
            let mut held = grants.held.lock().unwrap();
            let h = held.get_mut("k").unwrap();
            h.asking = false;
            h.current = Some(grant(10, Instant::now() + LIFETIME));
        }
        drop(tracked);
        let given = stopping.await.unwrap();
        assert!(given.is_err(), "the grant was sent back, to no server");
        assert!(grants.held.lock().unwrap().is_empty());
        // A submit still drawing after the stop asks for no grant however busy.
        let new = NewTask {
            cost_estimate: Some(Micros(10)),
            budget: Some(budget()),
            ..NewTask::example("k")
        };
        for _ in 0..BUSY * 2 {
            assert_eq!(grants.draw(&new, Clock::at(1_000)), None);
        }
        let asking = grants.held.lock().unwrap().values().any(|h| h.asking);
        assert!(!asking && grants.asks.is_empty(), "asked after the stop");
    }
}
