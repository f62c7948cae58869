//! Shares of the webhook deliverer's pool (`[webhooks] max_in_flight`): at most so
//! many attempts in flight to one receiver (a callback URL's scheme, host and port)
//! and for one key's tasks, and a cool-down for a receiver that stopped answering, so
//! that one key or one dead receiver cannot hold every attempt and delay everyone
//! else's webhooks. One replica's bookkeeping, in memory: a delivery that cannot start
//! is put back in the ledger by the deliverer, due again at the time given here, so
//! that it holds no place in the pool and the claim loop does not take it straight back.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::FastMap;
use crate::config::WebhooksConfig;
use crate::tasks::ledger::now_ms;

/// The soonest a delivery put back for want of room is due again: after the
/// deliverer's next look at the ledger, so that look does not lease it again.
const SOONEST_MS: i64 = 250;

/// The caps and cool-downs, from `[webhooks]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareLimits {
    /// Attempts in flight to one receiver.
    pub per_receiver: usize,
    /// Attempts in flight for one key's tasks.
    pub per_key: usize,
    /// A receiver's first cool-down, doubled at each further failure in a row.
    pub first_cooldown_ms: i64,
    /// The longest cool-down.
    pub max_cooldown_ms: i64,
    /// The longest an attempt lasts: how long the attempt that tries a receiver again
    /// after its cool-down keeps the receiver's other deliveries waiting.
    pub attempt_ms: i64,
}

impl ShareLimits {
    /// The shares not set are parts of the pool; a receiver cools down on the
    /// schedule of a delivery's retries.
    pub fn of(settings: &WebhooksConfig) -> Self {
        let pool = settings.max_in_flight.max(1);
        let share = |set: Option<usize>, part: usize| set.unwrap_or(pool / part).clamp(1, pool);
        let ms = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        Self {
            per_receiver: share(settings.max_in_flight_per_receiver, 4),
            per_key: share(settings.max_in_flight_per_key, 2),
            first_cooldown_ms: ms(settings.first_retry_ms).max(1),
            max_cooldown_ms: ms(settings.max_retry_interval_ms.max(settings.first_retry_ms)),
            attempt_ms: ms(settings.timeout_ms),
        }
    }

    /// The cool-down after `failures` attempts in a row without an answer.
    fn cooldown_ms(&self, failures: u32) -> i64 {
        let doubled = self
            .first_cooldown_ms
            .saturating_mul(1 << (failures.clamp(1, 40) - 1));
        doubled.min(self.max_cooldown_ms.max(self.first_cooldown_ms))
    }
}

/// Why a delivery cannot start now, and when it should be due again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotNow {
    pub why: Why,
    /// Milliseconds since the Unix epoch.
    pub until_ms: i64,
}

/// What a delivery that cannot start waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// Its receiver did not answer lately and is left alone for a while.
    ReceiverCoolingDown,
    /// Its receiver's share of the pool is taken.
    ReceiverBusy,
    /// Its key's share of the pool is taken.
    KeyBusy,
}

impl Why {
    /// Why, in words, for the ledger's `last_error` of a delivery given up.
    pub fn reason(self) -> &'static str {
        match self {
            Self::ReceiverCoolingDown => "its receiver did not answer lately",
            Self::ReceiverBusy => "its receiver's share of the attempts was taken",
            Self::KeyBusy => "its key's share of the attempts was taken",
        }
    }

    /// The `reason` label of the put-back metric.
    pub fn label(self) -> &'static str {
        match self {
            Self::ReceiverCoolingDown => "receiver_cooling_down",
            Self::ReceiverBusy => "receiver_busy",
            Self::KeyBusy => "key_busy",
        }
    }
}

/// What an attempt learnt of its receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contact {
    /// It answered, whatever the status: it is up.
    Answered,
    /// No answer in time, no connection, or a connection broken before the answer:
    /// taken to be down.
    NoAnswer,
    /// Nothing: nothing was sent, or its address was refused.
    Unknown,
}

/// One attempt's place in the shares of its receiver and its key.
#[derive(Debug)]
pub struct Place {
    receiver: Box<str>,
    key: Box<str>,
    started_ms: i64,
}

/// Attempts in flight somewhere (a receiver, a key), and the line of deliveries put
/// back for want of room there.
#[derive(Debug, Default)]
struct Lane {
    in_flight: usize,
    /// How long attempts here lasted lately (a moving average), ms; unknown until
    /// one has ended.
    typical_ms: Option<i64>,
    /// Deliveries in line that have not had their turn yet, as of `counted_ms`:
    /// counted down as places would free.
    waiting: i64,
    counted_ms: i64,
}

impl Lane {
    /// When a delivery that finds all `cap` places taken should be due again: in
    /// line behind those put back before it, as far apart as places free, so that
    /// each is leased about once more rather than again and again. Until an attempt
    /// has ended to say how long one takes, all at the deliverer's next look.
    fn turn(&mut self, cap: usize, now: i64) -> i64 {
        let cap = i64::try_from(cap).unwrap_or(i64::MAX).max(1);
        let spacing = self.typical_ms.map_or(0, |t| t / cap);
        let freed = match spacing {
            0 => self.waiting,
            _ => (now - self.counted_ms).max(0) / spacing,
        };
        if freed >= self.waiting {
            (self.waiting, self.counted_ms) = (0, now);
        } else {
            self.waiting -= freed;
            self.counted_ms += freed * spacing;
        }
        let at = now + SOONEST_MS + self.waiting.saturating_mul(spacing);
        self.waiting += 1;
        at
    }

    /// An attempt here ended, after `lasted_ms` when that says how long attempts
    /// take.
    fn ended(&mut self, lasted_ms: Option<i64>) {
        self.in_flight = self.in_flight.saturating_sub(1);
        if let Some(lasted) = lasted_ms.map(|ms| ms.max(0)) {
            self.typical_ms = Some(self.typical_ms.map_or(lasted, |t| (3 * t + lasted) / 4));
        }
    }

    /// Nothing in flight, and the line's last turn has passed.
    fn idle(&self, now: i64) -> bool {
        let line = self.waiting.saturating_mul(self.typical_ms.unwrap_or(0));
        self.in_flight == 0 && self.counted_ms + SOONEST_MS + line <= now
    }
}

#[derive(Debug, Default)]
struct Receiver {
    /// How long its answered attempts took (`typical_ms`; unknown until one was
    /// answered, and again once it stopped answering).
    lane: Lane,
    /// Attempts in a row that got no answer.
    failures: u32,
    /// No attempt starts before this (ms since the epoch).
    cool_until_ms: i64,
    /// When the latest failure was counted: an attempt started before it that fails
    /// too says nothing new (it was in flight at the same time).
    failed_at_ms: i64,
}

impl Receiver {
    /// The places it may hold now. One until an attempt of its has been answered: a
    /// receiver that is new, or back from not answering, shows it answers before it
    /// gets more (one that never answers holds one place until its cool-down, not its
    /// whole share). Then its share, fewer when its attempts take long: a receiver
    /// answering within a tenth of an attempt's time limit gets all of it, a slower
    /// one as much less as it is slower (at least one place), so that the places of
    /// the pool go to the receivers that give them back.
    fn cap(&self, limits: &ShareLimits) -> usize {
        let Some(typical) = self.lane.typical_ms else {
            return 1;
        };
        let quick = (limits.attempt_ms / 10).max(1);
        let share = i64::try_from(limits.per_receiver).unwrap_or(i64::MAX);
        let cap = share.saturating_mul(quick) / typical.max(1);
        usize::try_from(cap.clamp(1, share)).unwrap_or(1)
    }
}

/// The shares of one replica's deliverer.
#[derive(Debug)]
pub struct Shares {
    limits: ShareLimits,
    receivers: FastMap<Box<str>, Receiver>,
    keys: FastMap<Box<str>, Lane>,
}

impl Shares {
    pub fn new(limits: ShareLimits) -> Self {
        Self {
            limits,
            receivers: FastMap::default(),
            keys: FastMap::default(),
        }
    }

    /// New caps (a reload): attempts in flight keep their places.
    pub fn set_limits(&mut self, limits: ShareLimits) {
        self.limits = limits;
    }

    /// A place for an attempt to `receiver` for `key`'s task, or when to try again.
    pub fn start(&mut self, receiver: &str, key: &str, now: i64) -> Result<Place, NotNow> {
        let limits = self.limits;
        let r = entry(&mut self.receivers, receiver);
        if now < r.cool_until_ms {
            let why = Why::ReceiverCoolingDown;
            return Err(NotNow {
                why,
                until_ms: r.cool_until_ms,
            });
        }
        let cap = r.cap(&limits);
        if r.lane.in_flight >= cap {
            let until_ms = r.lane.turn(cap, now);
            let why = Why::ReceiverBusy;
            return Err(NotNow { why, until_ms });
        }
        let k = entry(&mut self.keys, key);
        if k.in_flight >= limits.per_key {
            let until_ms = k.turn(limits.per_key, now);
            let why = Why::KeyBusy;
            return Err(NotNow { why, until_ms });
        }
        if r.failures > 0 {
            // Past its cool-down: this attempt tries the receiver again, and its other
            // deliveries wait for the outcome, at most one attempt's time.
            r.cool_until_ms = now.saturating_add(limits.attempt_ms);
        }
        r.lane.in_flight += 1;
        k.in_flight += 1;
        Ok(Place {
            receiver: receiver.into(),
            key: key.into(),
            started_ms: now,
        })
    }

    /// The attempt in `place` has ended; the receiver's new cool-down (ms) when this
    /// attempt began one or made it longer.
    pub fn finish(&mut self, place: Place, contact: Contact, now: i64) -> Option<i64> {
        let lasted = now - place.started_ms;
        if let Some(k) = self.keys.get_mut(&place.key) {
            k.ended(Some(lasted));
        }
        let r = self.receivers.get_mut(&place.receiver)?;
        let after_last_failure = place.started_ms >= r.failed_at_ms;
        match contact {
            Contact::Answered => {
                if r.failures > 0 {
                    // Back: what its attempts took while it did not answer says nothing.
                    r.lane.typical_ms = None;
                }
                r.lane.ended(Some(lasted));
                r.failures = 0;
                r.cool_until_ms = 0;
                None
            }
            Contact::NoAnswer if after_last_failure => {
                r.lane.ended(None);
                r.failures = r.failures.saturating_add(1);
                let cooldown = self.limits.cooldown_ms(r.failures);
                r.failed_at_ms = now;
                r.cool_until_ms = now.saturating_add(cooldown);
                // Those in line now meet the cool-down instead.
                r.lane.waiting = 0;
                Some(cooldown)
            }
            Contact::Unknown if after_last_failure && r.failures > 0 => {
                // A retry that learnt nothing: the next delivery may try instead.
                r.lane.ended(None);
                r.cool_until_ms = r.cool_until_ms.min(now);
                None
            }
            Contact::NoAnswer | Contact::Unknown => {
                r.lane.ended(None);
                None
            }
        }
    }

    /// Forget receivers and keys with nothing in flight or waiting, and receivers
    /// whose cool-down ended longer ago than the longest one lasts.
    pub fn forget_idle(&mut self, now: i64) {
        let remember = self.limits.max_cooldown_ms;
        self.receivers.retain(|_, r| {
            !r.lane.idle(now) || (r.failures > 0 && r.cool_until_ms.saturating_add(remember) > now)
        });
        self.keys.retain(|_, k| !k.idle(now));
    }
}

fn entry<'a, V: Default>(map: &'a mut FastMap<Box<str>, V>, name: &str) -> &'a mut V {
    map.entry(name.into()).or_default()
}

/// A place held by one attempt in flight, in shares the deliverer's attempts use
/// together; given back when the attempt ends, or when dropped (an attempt that
/// panicked).
pub struct Held {
    shares: Arc<Mutex<Shares>>,
    place: Option<Place>,
}

impl Held {
    pub fn take(
        shares: &Arc<Mutex<Shares>>,
        receiver: &str,
        key: &str,
        now: i64,
    ) -> Result<Self, NotNow> {
        let place = lock(shares).start(receiver, key, now)?;
        Ok(Self {
            shares: shares.clone(),
            place: Some(place),
        })
    }

    /// Give the place back with what the attempt learnt; the receiver's new
    /// cool-down (ms) when it began one or made it longer.
    pub fn end(mut self, contact: Contact) -> Option<i64> {
        let place = self.place.take()?;
        lock(&self.shares).finish(place, contact, now_ms())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(place) = self.place.take() {
            lock(&self.shares).finish(place, Contact::Unknown, now_ms());
        }
    }
}

/// The shares, also after a panic elsewhere while they were locked: each change is
/// whole before the lock is let go.
pub fn lock(shares: &Mutex<Shares>) -> MutexGuard<'_, Shares> {
    shares.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The receiver a callback URL names: its scheme, host and port (the scheme's own
/// when not written), lowercased; the URL itself when it does not parse (its
/// attempts fail without sending anything).
pub fn receiver_of(url: &str) -> String {
    let Ok(uri) = url.parse::<http::Uri>() else {
        return url.to_owned();
    };
    let (Some(scheme), Some(host)) = (uri.scheme_str(), uri.host()) else {
        return url.to_owned();
    };
    let scheme = scheme.to_ascii_lowercase();
    let port = uri
        .port_u16()
        .unwrap_or(if scheme == "https" { 443 } else { 80 });
    format!("{scheme}://{}:{port}", host.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> ShareLimits {
        ShareLimits {
            per_receiver: 2,
            per_key: 3,
            first_cooldown_ms: 1_000,
            max_cooldown_ms: 3_000,
            attempt_ms: 500,
        }
    }

    #[test]
    fn defaults_are_parts_of_the_pool_and_set_shares_are_kept() {
        let mut s = WebhooksConfig::default();
        let l = ShareLimits::of(&s);
        assert_eq!((l.per_receiver, l.per_key), (8, 16));
        assert_eq!((l.first_cooldown_ms, l.max_cooldown_ms), (5_000, 3_600_000));
        s.max_in_flight = 1;
        let l = ShareLimits::of(&s);
        assert_eq!((l.per_receiver, l.per_key), (1, 1));
        s.max_in_flight = 10;
        s.max_in_flight_per_receiver = Some(10);
        s.max_in_flight_per_key = Some(3);
        let l = ShareLimits::of(&s);
        assert_eq!((l.per_receiver, l.per_key), (10, 3));
    }

    #[test]
    fn a_receivers_share_is_kept_and_the_rest_wait_in_line() {
        let mut s = Shares::new(limits());
        // A receiver not heard from yet gets one place: no attempt has said how long
        // one takes, and those refused are due at the deliverer's next look.
        let a = s.start("r", "k1", 0).unwrap();
        let refused = s.start("r", "k2", 0).unwrap_err();
        assert_eq!(refused.why, Why::ReceiverBusy);
        assert_eq!(refused.until_ms, SOONEST_MS);
        assert_eq!(s.start("r", "k3", 0).unwrap_err().until_ms, SOONEST_MS);
        // Another receiver is not held up by it.
        assert!(s.start("other", "k1", 0).is_ok());
        // Answered in 40 ms (within a tenth of an attempt's 500): its whole share of
        // two. One of them frees every 20 ms, and those refused line up that far apart.
        s.finish(a, Contact::Answered, 40);
        let _both = (
            s.start("r", "k1", 40).unwrap(),
            s.start("r", "k1", 40).unwrap(),
        );
        let turns: Vec<i64> = (0..3)
            .map(|_| s.start("r", "k1", 40).unwrap_err().until_ms)
            .collect();
        assert_eq!(turns, [290, 310, 330]);
        // The line moves on as places would free: 50 ms later, two have had their turn.
        assert_eq!(s.start("r", "k1", 90).unwrap_err().until_ms, 90 + 250 + 20);
    }

    #[test]
    fn a_slow_receiver_gets_fewer_places_than_a_quick_one() {
        let limits = ShareLimits {
            per_receiver: 8,
            attempt_ms: 10_000,
            ..limits()
        };
        let mut s = Shares::new(limits);
        let mut answered_in = |receiver: &str, ms: i64| {
            let place = s.start(receiver, "k", 0).unwrap();
            s.finish(place, Contact::Answered, ms);
            s.receivers[receiver].cap(&limits)
        };
        // Within a tenth of the 10 s an attempt may take: all 8.
        assert_eq!(answered_in("quick", 10), 8);
        assert_eq!(answered_in("second", 1_000), 8);
        // Slower, fewer: 2 s, 4 places; at the limit, one.
        assert_eq!(answered_in("slow", 2_000), 4);
        assert_eq!(answered_in("slowest", 9_900), 1);
        // It earns them back as its answers come quicker (a moving average).
        let mut caps = Vec::new();
        for _ in 0..8 {
            caps.push(answered_in("slowest", 10));
        }
        assert_eq!(caps.first(), Some(&1));
        assert_eq!(caps.last(), Some(&8));
    }

    #[test]
    fn a_keys_share_is_kept_across_receivers() {
        let mut s = Shares::new(limits());
        let places: Vec<Place> = ["r1", "r2", "r3"]
            .iter()
            .map(|r| s.start(r, "k", 0).unwrap())
            .collect();
        let refused = s.start("r4", "k", 0).unwrap_err();
        assert_eq!(refused.why, Why::KeyBusy);
        assert!(s.start("r5", "other", 0).is_ok());
        for place in places {
            s.finish(place, Contact::Answered, 10);
        }
        assert!(s.start("r4", "k", 10).is_ok());
    }

    #[test]
    fn a_receiver_without_answers_cools_down_longer_each_time_until_it_answers() {
        let mut s = Shares::new(limits());
        let first = s.start("r", "k", 0).unwrap();
        s.finish(first, Contact::Answered, 10);
        let (a, b) = (
            s.start("r", "k", 10).unwrap(),
            s.start("r", "k", 10).unwrap(),
        );
        // Two attempts in flight together time out: one failure, one cool-down.
        assert_eq!(s.finish(a, Contact::NoAnswer, 510), Some(1_000));
        assert_eq!(s.finish(b, Contact::NoAnswer, 511), None);
        let cooling = s.start("r", "k", 600).unwrap_err();
        assert_eq!(
            cooling,
            NotNow {
                why: Why::ReceiverCoolingDown,
                until_ms: 1_510
            }
        );
        // Past it, one attempt tries again and the others wait for its outcome.
        let retry = s.start("r", "k", 1_510).unwrap();
        assert_eq!(s.start("r", "k", 1_511).unwrap_err().until_ms, 2_010);
        assert_eq!(s.finish(retry, Contact::NoAnswer, 2_010), Some(2_000));
        let retry = s.start("r", "k", 4_010).unwrap();
        assert_eq!(s.finish(retry, Contact::NoAnswer, 4_510), Some(3_000));
        // An answer, of any status, ends it; back, it has one place until it shows it
        // answers quickly again.
        let retry = s.start("r", "k", 7_510).unwrap();
        assert_eq!(s.finish(retry, Contact::Answered, 7_520), None);
        let a = s.start("r", "k", 7_520).unwrap();
        assert_eq!(s.finish(a, Contact::NoAnswer, 8_020), Some(1_000));
    }

    #[test]
    fn a_retry_that_learns_nothing_lets_the_next_one_try() {
        let mut s = Shares::new(limits());
        let a = s.start("r", "k", 0).unwrap();
        s.finish(a, Contact::NoAnswer, 500);
        let retry = s.start("r", "k", 1_500).unwrap();
        assert!(s.start("r", "k", 1_600).is_err());
        assert_eq!(s.finish(retry, Contact::Unknown, 1_600), None);
        assert!(s.start("r", "k", 1_600).is_ok());
    }

    #[test]
    fn a_dropped_place_is_given_back() {
        let shares = Arc::new(Mutex::new(Shares::new(limits())));
        let now = now_ms();
        let held = Held::take(&shares, "r", "k", now).unwrap();
        assert!(Held::take(&shares, "r", "k", now).is_err());
        drop(held);
        assert!(Held::take(&shares, "r", "k", now).is_ok());
    }

    #[test]
    fn idle_receivers_and_keys_are_forgotten_cooling_ones_remembered() {
        let mut s = Shares::new(limits());
        let a = s.start("up", "k", 0).unwrap();
        s.finish(a, Contact::Answered, 10);
        let b = s.start("down", "k", 0).unwrap();
        s.finish(b, Contact::NoAnswer, 500);
        s.forget_idle(600);
        assert_eq!((s.receivers.len(), s.keys.len()), (1, 0));
        // Remembered for the longest cool-down after its own ended.
        s.forget_idle(1_500 + 3_000);
        assert!(s.receivers.is_empty());
    }

    #[test]
    fn put_back_reasons_are_the_metrics_labels() {
        let whys = [Why::ReceiverCoolingDown, Why::ReceiverBusy, Why::KeyBusy];
        let labels: Vec<&str> = whys.iter().map(|w| w.label()).collect();
        assert_eq!(labels, crate::metrics::WEBHOOK_PUT_BACK_REASONS);
    }

    #[test]
    fn receivers_are_origins() {
        for (url, receiver) in [
            (
                "https://Hooks.Example.com/a?x=1",
                "https://hooks.example.com:443",
            ),
            (
                "https://hooks.example.com:443/b",
                "https://hooks.example.com:443",
            ),
            ("http://127.0.0.1:8080/hook", "http://127.0.0.1:8080"),
            ("http://[::1]/hook", "http://[::1]:80"),
            ("not a url", "not a url"),
        ] {
            assert_eq!(receiver_of(url), receiver, "{url}");
        }
    }
}
