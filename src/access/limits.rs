//! Per-key limits: a request rate with a burst (governor), an optional separate rate
//! for submits, and a cap on requests in progress with load shedding.
//!
//! Limiters exist only for configured keys, never for presented ones, so their memory
//! is bounded by the routes file. They live in the config snapshot; a reload keeps the
//! state of every key whose limits did not change.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::middleware::{StateInformationMiddleware, StateSnapshot};
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};
use http::{HeaderMap, HeaderName, HeaderValue};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::shared::{FleetLimits, SharedSettings};
use crate::FastMap;
use crate::config::{LimitsConfig, Scope};

// Built at compile time: a name from a `&str` is parsed again on every insert.
pub const LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
pub const REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
pub const RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

const YEAR_SECS: f64 = 365.0 * 24.0 * 3600.0;

type Limiter = RateLimiter<NotKeyed, InMemoryState, DefaultClock, StateInformationMiddleware>;

/// One token bucket.
struct Bucket {
    quota: Quota,
    limiter: Limiter,
}

impl Bucket {
    fn new(rate_per_second: f64, burst: u32) -> Option<Self> {
        // `try_`: settings refused by the check are still built (the whole file is
        // checked before it is refused), and a rate of 0, below 0 or NaN must not
        // panic here.
        let period = Duration::try_from_secs_f64(1.0 / rate_per_second).ok()?;
        let quota = Quota::with_period(period)?.allow_burst(NonZeroU32::new(burst)?);
        Some(Self {
            quota,
            limiter: RateLimiter::direct(quota).with_middleware::<StateInformationMiddleware>(),
        })
    }

    /// Take one cell: the headers to send, or the refusal with its wait.
    fn take(&self) -> Result<RateHeaders, (RateHeaders, Duration)> {
        let burst = self.quota.burst_size().get();
        let interval = self.quota.replenish_interval();
        match self.limiter.check() {
            Ok(state) => Ok(RateHeaders::allowed(&state, interval)),
            Err(not_until) => {
                let wait = not_until.wait_time_from(self.limiter.clock().now());
                let headers = RateHeaders {
                    limit: burst,
                    remaining: 0,
                    // The next cell after `wait`, then the rest of the burst.
                    reset: wait.saturating_add(interval.saturating_mul(burst - 1)),
                };
                Err((headers, wait))
            }
        }
    }
}

/// `x-ratelimit-*`: the burst, what is left of it, and when it is whole again.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateHeaders {
    limit: u32,
    remaining: u32,
    reset: Duration,
}

impl RateHeaders {
    pub(super) fn new(limit: u32, remaining: u32, reset: Duration) -> Self {
        Self {
            limit,
            remaining,
            reset,
        }
    }

    pub(super) fn remaining(&self) -> u32 {
        self.remaining
    }

    fn allowed(state: &StateSnapshot, interval: Duration) -> Self {
        let limit = state.quota().burst_size().get();
        let remaining = state.remaining_burst_capacity();
        Self {
            limit,
            remaining,
            reset: interval.saturating_mul(limit.saturating_sub(remaining)),
        }
    }

    pub fn write(&self, headers: &mut HeaderMap) {
        let reset = self.reset.as_secs() + u64::from(self.reset.subsec_nanos() > 0);
        headers.insert(LIMIT, HeaderValue::from(self.limit));
        headers.insert(REMAINING, HeaderValue::from(self.remaining));
        headers.insert(RESET, HeaderValue::from(reset));
    }
}

/// The limits of one key. With shared limits, the buckets and the cap here are this
/// replica's share, used while Redis does not answer; `fleet` is the whole.
pub struct KeyLimiter {
    settings: LimitsConfig,
    fleet: Option<Arc<FleetLimits>>,
    all: Option<Bucket>,
    submit: Option<Bucket>,
    in_progress: Option<Arc<Semaphore>>,
}

impl std::fmt::Debug for KeyLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyLimiter")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// Why a request was refused.
pub enum LimitExceeded {
    /// 429, with the bucket's headers.
    Rate {
        which: &'static str,
        headers: RateHeaders,
        wait: Duration,
    },
    /// 503: too many requests of this key in progress.
    Busy(usize),
}

impl KeyLimiter {
    /// Check the settings; problems are recorded under `at` (the limits table).
    pub fn check(settings: &LimitsConfig, at: &mut Scope) {
        // Bounds keep the refill period between 1 µs and about 11 days.
        let rate_ok = |r: f64| r == 0.0 || (1e-6..=1e6).contains(&r);
        if !rate_ok(settings.rate_per_second) {
            at.push(
                "rate_per_second",
                "must be 0 (off) or between 0.000001 and 1000000",
            );
        }
        if settings.rate_per_second > 0.0 && settings.burst == 0 {
            at.push("burst", "must be at least 1");
        }
        // The time a whole burst takes to refill, kept within a year.
        let refill_ok = |rate: f64, burst: u32| f64::from(burst) / rate <= YEAR_SECS;
        if settings.rate_per_second > 0.0 && !refill_ok(settings.rate_per_second, settings.burst) {
            at.push(
                "burst",
                "takes more than a year to refill at rate_per_second",
            );
        }
        if let (Some(rate), Some(burst)) = (settings.submit_rate_per_second, settings.submit_burst)
            && rate > 0.0
            && !refill_ok(rate, burst)
        {
            at.push(
                "submit_burst",
                "takes more than a year to refill at submit_rate_per_second",
            );
        }
        if let Some(r) = settings.submit_rate_per_second
            && (!rate_ok(r) || r == 0.0)
        {
            at.push(
                "submit_rate_per_second",
                "must be between 0.000001 and 1000000",
            );
        }
        if settings.max_concurrent_requests > Semaphore::MAX_PERMITS {
            at.push("max_concurrent_requests", "is too large");
        }
        if settings.submit_burst == Some(0) {
            at.push("submit_burst", "must be at least 1");
        }
        if settings.submit_burst.is_some() && settings.submit_rate_per_second.is_none() {
            at.push("submit_burst", "needs submit_rate_per_second as well");
        }
    }

    /// Build from settings that passed [`KeyLimiter::check`]; settings that did not
    /// build something unused (the file is refused) instead of panicking.
    pub fn new(settings: LimitsConfig) -> Self {
        let all = (settings.rate_per_second > 0.0)
            .then(|| Bucket::new(settings.rate_per_second, settings.burst))
            .flatten();
        let submit = settings.submit_rate_per_second.and_then(|rate| {
            let burst = settings
                .submit_burst
                .unwrap_or_else(|| submit_burst_of(rate));
            Bucket::new(rate, burst)
        });
        // Capped for the same reason: tokio panics above its maximum.
        let in_progress = (settings.max_concurrent_requests > 0).then(|| {
            let permits = settings.max_concurrent_requests.min(Semaphore::MAX_PERMITS);
            Arc::new(Semaphore::new(permits))
        });
        Self {
            settings,
            fleet: None,
            all,
            submit,
            in_progress,
        }
    }

    /// The limits of key `name` shared by the fleet, with `local_share` of each for
    /// this replica alone.
    pub fn shared(settings: LimitsConfig, name: &str, shared: &SharedSettings) -> Self {
        let submit = settings.submit_rate_per_second.map(|rate| {
            let burst = settings
                .submit_burst
                .unwrap_or_else(|| submit_burst_of(rate));
            (rate, burst)
        });
        let fleet = FleetLimits::new(
            name,
            Some((settings.rate_per_second, settings.burst)),
            submit,
            settings.max_concurrent_requests,
            shared.stock_for,
        );
        Self {
            fleet: (!fleet.is_off()).then(|| Arc::new(fleet)),
            ..Self::new(share_of(&settings, shared.local_share))
        }
    }

    /// What the key's limits are for the whole fleet, when they are shared.
    pub fn fleet(&self) -> Option<&Arc<FleetLimits>> {
        self.fleet.as_ref()
    }

    /// Admit one request: the rate headers to send and the in-progress permit to hold.
    pub fn admit(
        &self,
        is_submit: bool,
    ) -> Result<(Option<RateHeaders>, Option<OwnedSemaphorePermit>), LimitExceeded> {
        let mut shown = None;
        if let Some(bucket) = &self.all {
            match bucket.take() {
                Ok(h) => shown = Some(h),
                Err((headers, wait)) => {
                    return Err(LimitExceeded::Rate {
                        which: "rate",
                        headers,
                        wait,
                    });
                }
            }
        }
        if is_submit && let Some(bucket) = &self.submit {
            match bucket.take() {
                // Show whichever bucket is closer to refusing.
                Ok(h) => {
                    if shown.is_none_or(|s| h.remaining <= s.remaining) {
                        shown = Some(h);
                    }
                }
                Err((headers, wait)) => {
                    return Err(LimitExceeded::Rate {
                        which: "submit",
                        headers,
                        wait,
                    });
                }
            }
        }
        let permit = match &self.in_progress {
            Some(sem) => match sem.clone().try_acquire_owned() {
                Ok(p) => Some(p),
                Err(_) => return Err(LimitExceeded::Busy(self.settings.max_concurrent_requests)),
            },
            None => None,
        };
        Ok((shown, permit))
    }
}

/// The submit burst when none is set: the submit rate rounded up.
fn submit_burst_of(rate: f64) -> u32 {
    rate.ceil().clamp(1.0, u32::MAX as f64) as u32
}

/// `share` of each limit (at least 1 of each that is on), for one replica alone.
fn share_of(settings: &LimitsConfig, share: f64) -> LimitsConfig {
    let count = |n: u32| match n {
        0 => 0,
        n => (f64::from(n) * share).ceil().clamp(1.0, f64::from(n)) as u32,
    };
    LimitsConfig {
        rate_per_second: settings.rate_per_second * share,
        burst: count(settings.burst),
        submit_rate_per_second: settings.submit_rate_per_second.map(|r| r * share),
        submit_burst: Some(count(settings.submit_burst.unwrap_or_else(|| {
            settings.submit_rate_per_second.map_or(0, submit_burst_of)
        })))
        .filter(|_| settings.submit_rate_per_second.is_some()),
        max_concurrent_requests: match settings.max_concurrent_requests {
            0 => 0,
            n => ((n as f64) * share).ceil().clamp(1.0, n as f64) as usize,
        },
    }
}

/// The limiters of every configured key.
#[derive(Debug, Default)]
pub struct KeyLimits {
    by_key: FastMap<Arc<str>, Arc<KeyLimiter>>,
}

impl KeyLimits {
    /// Each key's limits; `shared`: held by the fleet, with `local_share` of each for
    /// this replica alone.
    pub fn new(
        by_key: impl IntoIterator<Item = (Arc<str>, LimitsConfig)>,
        shared: Option<&SharedSettings>,
    ) -> Self {
        let limiter = |name: &str, s| match shared {
            Some(shared) => KeyLimiter::shared(s, name, shared),
            None => KeyLimiter::new(s),
        };
        Self {
            by_key: by_key
                .into_iter()
                .map(|(k, s)| {
                    let l = limiter(&k, s);
                    (k, Arc::new(l))
                })
                .collect(),
        }
    }

    pub fn get(&self, key: &str) -> Option<&Arc<KeyLimiter>> {
        self.by_key.get(key)
    }

    /// Keep the running state of keys whose limits are unchanged (used on reload), so
    /// a reload neither refills buckets nor forgets requests in progress.
    pub fn inherit(&mut self, old: &KeyLimits) {
        for (name, limiter) in &mut self.by_key {
            if let Some(previous) = old.by_key.get(name)
                && previous.settings == limiter.settings
                && previous.fleet == limiter.fleet
            {
                *limiter = previous.clone();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(rate: f64, burst: u32) -> LimitsConfig {
        LimitsConfig {
            rate_per_second: rate,
            burst,
            submit_rate_per_second: None,
            submit_burst: None,
            max_concurrent_requests: 0,
        }
    }

    #[test]
    fn burst_then_refusal_with_headers() {
        let l = KeyLimiter::new(settings(0.01, 3));
        for left in [2, 1, 0] {
            let (h, _) = l.admit(false).ok().unwrap();
            let h = h.unwrap();
            assert_eq!((h.limit, h.remaining), (3, left));
        }
        match l.admit(false) {
            Err(LimitExceeded::Rate { headers, wait, .. }) => {
                assert_eq!(headers.remaining, 0);
                assert!(wait > Duration::ZERO && wait <= Duration::from_secs(100));
                assert!(headers.reset >= wait);
            }
            _ => panic!("fourth request must be refused"),
        }
    }

    fn problems(s: &LimitsConfig) -> usize {
        let mut p = crate::config::Problems::default();
        KeyLimiter::check(s, &mut p.at("limits"));
        p.len()
    }

    #[test]
    fn extreme_accepted_settings_work() {
        assert_ne!(problems(&settings(1e-6, 32)), 0);
        for (rate, burst) in [(1e-6, 31), (1e6, u32::MAX), (1e6, 1)] {
            let s = settings(rate, burst);
            assert_eq!(problems(&s), 0, "{rate} {burst}");
            let l = KeyLimiter::new(s);
            let (h, _) = l.admit(false).ok().unwrap();
            assert_eq!(h.unwrap().limit, burst);
        }
        let l = KeyLimiter::new(settings(1e-6, 1));
        assert!(l.admit(false).is_ok());
        assert!(matches!(l.admit(false), Err(LimitExceeded::Rate { .. })));
    }

    #[test]
    fn submit_bucket_applies_to_submits_only() {
        let mut s = settings(0.0, 0);
        s.submit_rate_per_second = Some(0.01);
        s.submit_burst = Some(1);
        let l = KeyLimiter::new(s);
        assert!(l.admit(true).is_ok());
        assert!(matches!(
            l.admit(true),
            Err(LimitExceeded::Rate {
                which: "submit",
                ..
            })
        ));
        assert!(l.admit(false).is_ok());
    }

    #[test]
    fn concurrency_cap_sheds() {
        let mut s = settings(0.0, 0);
        s.max_concurrent_requests = 1;
        let l = KeyLimiter::new(s);
        let held = l.admit(false).ok().unwrap();
        assert!(matches!(l.admit(false), Err(LimitExceeded::Busy(1))));
        drop(held);
        assert!(l.admit(false).is_ok());
    }

    #[test]
    fn refused_settings_are_named_and_still_build_without_a_panic() {
        let mut cases = Vec::new();
        for rate in [0.0, -1.0, f64::NAN, f64::INFINITY, f64::MIN_POSITIVE] {
            let mut s = settings(rate, 1);
            s.submit_rate_per_second = Some(rate);
            s.submit_burst = Some(1);
            cases.push(s);
        }
        let mut s = settings(0.0, 0);
        s.max_concurrent_requests = usize::MAX;
        cases.push(s);
        for s in cases {
            assert_ne!(problems(&s), 0, "{s:?}");
            KeyLimiter::new(s);
        }
    }

    #[test]
    fn bad_settings_are_named() {
        let keys = |s: &LimitsConfig| {
            let mut p = crate::config::Problems::default();
            KeyLimiter::check(s, &mut p.at("limits"));
            let e = p.into_error(std::path::Path::new("r"));
            e.problems.into_iter().map(|(k, _)| k).collect::<Vec<_>>()
        };
        assert!(keys(&settings(f64::NAN, 0)).contains(&"limits.rate_per_second".into()));
        assert!(keys(&settings(5.0, 0)).contains(&"limits.burst".into()));
        assert!(keys(&settings(5.0, 10)).is_empty());
    }

    #[test]
    fn reload_keeps_state_of_unchanged_keys() {
        let old = KeyLimits::new([("a".into(), settings(0.01, 1))], None);
        assert!(old.get("a").unwrap().admit(false).is_ok());
        let mut new = KeyLimits::new([("a".into(), settings(0.01, 1))], None);
        new.inherit(&old);
        assert!(new.get("a").unwrap().admit(false).is_err());
    }

    #[test]
    fn a_replica_alone_gets_its_share_of_each_limit() {
        let mut s = settings(10.0, 10);
        s.submit_rate_per_second = Some(3.0);
        s.max_concurrent_requests = 4;
        let half = share_of(&s, 0.5);
        assert_eq!((half.rate_per_second, half.burst), (5.0, 5));
        // The submit burst was the rate rounded up (3): half of it, rounded up.
        assert_eq!(half.submit_rate_per_second, Some(1.5));
        assert_eq!(half.submit_burst, Some(2));
        assert_eq!(half.max_concurrent_requests, 2);
        let tiny = share_of(&s, 0.01);
        assert_eq!((tiny.burst, tiny.max_concurrent_requests), (1, 1));
        let off = share_of(&settings(0.0, 0), 0.5);
        assert_eq!((off.burst, off.max_concurrent_requests), (0, 0));
        assert_eq!(off.submit_burst, None);
        let mut shared = SharedSettings::parse("redis://127.0.0.1:6379/0", None).unwrap();
        shared.local_share = 0.5;
        let l = KeyLimiter::shared(s, "k", &shared);
        assert!(l.fleet().is_some());
        for _ in 0..5 {
            assert!(l.admit(false).is_ok());
        }
        assert!(matches!(l.admit(false), Err(LimitExceeded::Rate { .. })));
    }
}
