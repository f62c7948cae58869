//! What one replica holds of a key's shared limits ahead of need (`[limits]
//! shared_stock_ms`), so that the requests of a key that runs fast are admitted
//! without waiting for Redis; `access/shared.rs` asks for it and hands it out.
//!
//! - **Cells** of the key's rate buckets, granted by the admission script beside a
//!   request's own cell, or by a refill in the background: about `shared_stock_ms` of
//!   this replica's recent arrivals for the key, at most a sixteenth of the burst. The
//!   script answers the debt it left in the bucket (its theoretical arrival time less
//!   now); a batch is used only while that debt, less the time since the call was
//!   sent, still covers the whole batch. Debt only grows but by time, so the cells in
//!   every replica's stock never exceed the bucket's debt, and the bucket's room plus
//!   every stock never exceed one burst: whatever the replicas do, no window admits
//!   more than the exact limiter would. A key running below its rate has little debt,
//!   so a grant pushes it to at least twice `shared_stock_ms` (at most another
//!   sixteenth of the burst), which keeps the batch usable that long. Cells not used in
//!   time are lost, never given back: giving back would undo debt that another
//!   replica's batch counts on.
//! - **Places** among the key's requests in progress: leases taken in Redis ahead
//!   (about `shared_stock_ms` of arrivals), and a request's lease kept when it ends
//!   (up to twice that), at most a sixteenth of `max_concurrent_requests`; the rest go
//!   back to Redis at the next sweep. Every request in progress holds a lease of its
//!   own.
//!
//! A key whose burst or cap leaves no whole cell or place for one replica holds
//! nothing ahead: every request asks Redis, as an exact limiter would.

use std::collections::HashSet;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::limits::RateHeaders;

type FastSet<T> = HashSet<T, foldhash::fast::RandomState>;

/// Of a burst (or a cap on requests in progress), the share one replica may hold
/// ahead; a grant may push the bucket's debt as much again.
const SHARE: u32 = 16;

/// Arrivals are counted over windows this long.
const WINDOW: Duration = Duration::from_millis(100);

/// A window younger than this says nothing of the rate yet.
const MIN_SPAN: Duration = Duration::from_millis(10);

/// One rate bucket of a key, for the whole fleet, and what one replica may hold of it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket {
    /// Between cells (µs).
    pub interval_us: f64,
    /// 0: the bucket is off.
    pub burst: u32,
    /// Cells one replica may hold in stock; 0: none.
    cap: u32,
    /// The debt (µs) a grant of stock leaves at least.
    phantom_us: f64,
}

impl Bucket {
    fn new((interval_us, burst): (f64, u32), stock_for: Duration) -> Self {
        let cap = if burst > 0 { burst / SHARE } else { 0 };
        Self {
            interval_us,
            burst,
            cap,
            phantom_us: 0.0,
        }
        .keeping(cap, stock_for)
    }

    /// With room for `cap` cells in stock (0: none).
    fn keeping(mut self, cap: u32, stock_for: Duration) -> Self {
        self.cap = cap;
        let twice = 2e6 * stock_for.as_secs_f64();
        self.phantom_us = twice.min(f64::from(cap) * self.interval_us);
        self
    }

    pub fn is_on(&self) -> bool {
        self.burst > 0
    }

    pub fn phantom_us(&self) -> f64 {
        self.phantom_us
    }

    /// Cells worth holding at `rate` arrivals per second: `stock_for` of them, or
    /// fewer when the debt a grant may push ahead keeps them usable for less long (a
    /// key whose burst lasts less than 16 times `stock_for` at its rate).
    fn target(&self, rate: f64, stock_for: Duration) -> u32 {
        let usable = stock_for.as_secs_f64().min(self.phantom_us / 1e6);
        (rate * usable).min(f64::from(self.cap)) as u32
    }

    /// The headers of an admission with `remaining` cells left.
    pub fn shown(&self, remaining: u32) -> RateHeaders {
        let remaining = remaining.min(self.burst);
        let reset = self.interval_us * f64::from(self.burst - remaining) / 1e6;
        let reset = Duration::try_from_secs_f64(reset).unwrap_or(Duration::MAX);
        RateHeaders::new(self.burst, remaining, reset)
    }
}

/// How much of a key's limits one replica may hold ahead.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sizes {
    pub rate: Bucket,
    pub submit: Bucket,
    /// Most requests in progress; 0: off.
    pub most: usize,
    /// Places one replica may keep free; 0: none.
    places_cap: usize,
    stock_for: Duration,
}

impl Sizes {
    /// `rate` and `submit` as (interval µs, burst), burst 0 when off.
    pub fn new(rate: (f64, u32), submit: (f64, u32), most: usize, stock_for: Duration) -> Self {
        let mut sizes = Self {
            rate: Bucket::new(rate, stock_for),
            submit: Bucket::new(submit, stock_for),
            most,
            places_cap: most / SHARE as usize,
            stock_for,
        };
        // Every request needs a rate cell and a place: when either cannot be held
        // ahead, every request asks Redis anyway, and nothing else is worth holding.
        let exact = stock_for.is_zero()
            || (sizes.rate.is_on() && sizes.rate.cap == 0)
            || (most > 0 && sizes.places_cap == 0);
        if exact {
            sizes.rate = sizes.rate.keeping(0, stock_for);
            sizes.submit = sizes.submit.keeping(0, stock_for);
            sizes.places_cap = 0;
        }
        sizes
    }

    /// Whether this key holds nothing ahead.
    pub fn is_exact(&self) -> bool {
        self.rate.cap == 0 && self.submit.cap == 0 && self.places_cap == 0
    }

    fn places_target(&self, rate: f64) -> usize {
        (rate * self.stock_for.as_secs_f64()).min(self.places_cap as f64) as usize
    }

    /// Free places kept when requests end: up to twice the target (within the cap), so
    /// that a rate estimate that moves a little does not give back a place to ask for
    /// it again.
    fn places_kept(&self, rate: f64) -> usize {
        (2 * self.places_target(rate)).min(self.places_cap)
    }
}

/// What a call to Redis asks for ahead, beyond the request's own cells and place.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Wanted {
    pub rate: u32,
    pub submit: u32,
    pub places: usize,
    /// This call is the key's refill (one at a time): see [`Refilling`].
    pub refill: bool,
}

impl Wanted {
    fn any(&self) -> bool {
        self.rate > 0 || self.submit > 0 || self.places > 0
    }
}

/// What the script granted of one bucket.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BucketGrant {
    /// Cells ahead, beyond the request's own.
    pub extra: u32,
    /// The bucket's debt after the grant (µs).
    pub debt_us: u64,
    /// Cells the bucket had left after the grant.
    pub room: u32,
}

/// What the script granted.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Grant {
    pub rate: BucketGrant,
    pub submit: BucketGrant,
    /// Leases added, the request's own first when it needed one.
    pub places: usize,
}

/// Decided from what this replica holds, or to be asked of Redis.
#[derive(Debug)]
pub enum Taken {
    /// Admitted here: the headers, the request's lease, and what to ask for in the
    /// background when the stock runs low.
    Here {
        headers: Option<RateHeaders>,
        lease: Option<Arc<str>>,
        refill: Option<Wanted>,
    },
    /// Redis decides; the call asks for this much ahead besides.
    Ask(Wanted),
}

/// Cells of one bucket in stock, in batches that each stay usable until an instant.
#[derive(Debug, Default)]
struct Stock {
    /// (cells, usable until), soonest first.
    batches: Vec<(u32, Instant)>,
    /// Cells the bucket had left at the last grant, for the headers.
    room: u32,
}

impl Stock {
    fn left(&mut self, now: Instant) -> u32 {
        self.batches.retain(|&(_, until)| until > now);
        self.batches.iter().map(|&(n, _)| n).sum()
    }

    fn take(&mut self, now: Instant) -> bool {
        self.batches.retain(|&(_, until)| until > now);
        let Some(first) = self.batches.first_mut() else {
            return false;
        };
        first.0 -= 1;
        if first.0 == 0 {
            self.batches.remove(0);
        }
        true
    }

    fn add(&mut self, cells: u32, until: Instant) {
        let at = self.batches.partition_point(|&(_, u)| u <= until);
        self.batches.insert(at, (cells, until));
    }

    /// A batch of `grant.extra` cells from a call sent at `sent`: usable while the
    /// debt it left covers it, counted from the sending (Redis answered later).
    fn granted(&mut self, bucket: &Bucket, grant: &BucketGrant, sent: Instant) {
        self.room = grant.room;
        let covered_us = grant.debt_us as f64 - f64::from(grant.extra) * bucket.interval_us;
        if grant.extra > 0 && covered_us > 0.0 {
            self.add(
                grant.extra,
                sent + Duration::from_secs_f64(covered_us / 1e6),
            );
        }
    }
}

/// Arrivals per second of one kind of request.
#[derive(Debug)]
struct Arrivals {
    since: Instant,
    count: u32,
    rate: f64,
}

impl Arrivals {
    fn new(now: Instant) -> Self {
        Self {
            since: now,
            count: 0,
            rate: 0.0,
        }
    }

    /// The last whole window's rate, or the window in progress's when higher (a key
    /// that speeds up is followed at once, one that slows down within a window).
    fn rate(&mut self, now: Instant) -> f64 {
        let span = now.saturating_duration_since(self.since);
        let current = f64::from(self.count) / span.as_secs_f64();
        if span >= WINDOW {
            self.rate = current;
            self.since = now;
            self.count = 0;
            return current;
        }
        if span >= MIN_SPAN {
            return self.rate.max(current);
        }
        self.rate
    }
}

#[derive(Debug)]
struct State {
    /// Of [`crate::access::SharedLimits`]: bumped when Redis stops answering, which
    /// makes everything held before worthless.
    generation: u64,
    all: Arrivals,
    submits: Arrivals,
    rate: Stock,
    submit: Stock,
    /// Leases in Redis this replica holds for the key, in use or free.
    held: FastSet<Arc<str>>,
    /// Those no request uses.
    free: Vec<Arc<str>>,
    /// Free leases of an earlier generation, to be given back.
    stale: Vec<Arc<str>>,
    /// A call asking for more is on its way.
    refilling: bool,
}

impl State {
    /// Nothing held in an earlier generation is used: Redis may have lost it.
    fn at(&mut self, generation: u64) {
        if self.generation == generation {
            return;
        }
        self.generation = generation;
        self.rate = Stock::default();
        self.submit = Stock::default();
        for name in std::mem::take(&mut self.free) {
            self.held.remove(&name);
            self.stale.push(name);
        }
    }
}

/// One key's stock on this replica.
#[derive(Debug)]
pub struct Ahead {
    pub sizes: Sizes,
    state: Mutex<State>,
    /// Listed in [`crate::access::SharedLimits`] (for sweeps and renewals).
    pub registered: AtomicBool,
}

impl Ahead {
    pub fn new(sizes: Sizes) -> Self {
        let now = Instant::now();
        Self {
            sizes,
            state: Mutex::new(State {
                generation: 0,
                all: Arrivals::new(now),
                submits: Arrivals::new(now),
                rate: Stock::default(),
                submit: Stock::default(),
                held: FastSet::default(),
                free: Vec::new(),
                stale: Vec::new(),
                refilling: false,
            }),
            registered: AtomicBool::new(false),
        }
    }

    /// One request arrives: admitted from the stock when it holds all the request
    /// needs, else what its call to Redis should ask for ahead.
    pub fn take(&self, now: Instant, is_submit: bool, generation: u64) -> Taken {
        let s = &self.sizes;
        let mut st = lock(&self.state);
        st.at(generation);
        st.all.count += 1;
        st.submits.count += u32::from(is_submit);
        let submit = is_submit && s.submit.is_on();
        let here = (!s.rate.is_on() || st.rate.left(now) > 0)
            && (!submit || st.submit.left(now) > 0)
            && (s.most == 0 || !st.free.is_empty());
        if !here {
            return Taken::Ask(self.refill(&mut st, now, true).unwrap_or_default());
        }
        let mut headers = None;
        if s.rate.is_on() {
            st.rate.take(now);
            let left = st.rate.left(now);
            headers = Some(s.rate.shown(st.rate.room.saturating_add(left)));
        }
        if submit {
            st.submit.take(now);
            let left = st.submit.room.saturating_add(st.submit.left(now));
            // Whichever bucket is closer to refusing.
            if headers.is_none_or(|h| left <= h.remaining()) {
                headers = Some(s.submit.shown(left));
            }
        }
        let lease = if s.most > 0 { st.free.pop() } else { None };
        let refill = self.refill(&mut st, now, false);
        Taken::Here {
            headers,
            lease,
            refill,
        }
    }

    /// What to ask for ahead, when nothing is asked yet and the stock runs low (or
    /// `empty`: a request found it wanting); the key is then refilling.
    fn refill(&self, st: &mut State, now: Instant, empty: bool) -> Option<Wanted> {
        if st.refilling || self.sizes.is_exact() {
            return None;
        }
        let s = &self.sizes;
        let all = st.all.rate(now);
        let submits = st.submits.rate(now);
        let (rate, submit) = (
            s.rate.target(all, s.stock_for),
            s.submit.target(submits, s.stock_for),
        );
        let places = if s.most > 0 { s.places_target(all) } else { 0 };
        let (rate_left, submit_left) = (st.rate.left(now), st.submit.left(now));
        // Cells refilled when a quarter is left (each call then brings three quarters:
        // fewer calls), places when fewer than half are free (they come back as their
        // requests end); requests keep finding some meanwhile.
        let low = rate_left * 4 < rate || submit_left * 4 < submit || st.free.len() * 2 < places;
        if !(empty || low) {
            return None;
        }
        let wanted = Wanted {
            rate: rate.saturating_sub(rate_left),
            submit: submit.saturating_sub(submit_left),
            places: places.saturating_sub(st.free.len()),
            refill: true,
        };
        st.refilling = wanted.any();
        st.refilling.then_some(wanted)
    }

    /// What Redis granted to a call sent at `sent` in `generation`; the request's own
    /// lease (`own`: it needed one) among `names`' leases. Nothing is kept ahead when
    /// Redis stopped answering meanwhile (the extra leases then expire there).
    pub fn granted(
        &self,
        sent: Instant,
        generation: u64,
        grant: &Grant,
        names: impl Fn(usize) -> Arc<str>,
        own: bool,
    ) -> Option<Arc<str>> {
        let s = &self.sizes;
        let mut st = lock(&self.state);
        let own = (own && grant.places > 0).then(|| names(1));
        // The request's own lease is renewed while it lasts, whatever else is kept.
        if let Some(name) = &own {
            st.held.insert(name.clone());
        }
        if st.generation > generation {
            return own;
        }
        st.at(generation);
        st.rate.granted(&s.rate, &grant.rate, sent);
        st.submit.granted(&s.submit, &grant.submit, sent);
        let first = 1 + usize::from(own.is_some());
        for n in first..=grant.places {
            let name = names(n);
            st.held.insert(name.clone());
            st.free.push(name);
        }
        own
    }

    /// The refill is over (answered or not).
    fn refilled(&self) {
        lock(&self.state).refilling = false;
    }

    /// A request's lease, its request ended: kept for the next one (true), or to be
    /// removed in Redis.
    pub fn give_back(&self, name: &Arc<str>, generation: u64, now: Instant) -> bool {
        let mut st = lock(&self.state);
        let rate = st.all.rate(now);
        let keep = st.generation == generation
            && st.free.len() < self.sizes.places_kept(rate)
            && st.held.contains(name);
        if keep {
            st.free.push(name.clone());
        } else {
            st.held.remove(name);
        }
        keep
    }

    /// Every little while: free leases beyond what the key's recent arrivals keep
    /// (none once it is idle), and those of an earlier generation, to be removed in
    /// Redis.
    pub fn sweep(&self, now: Instant, generation: u64) -> Vec<Arc<str>> {
        let mut st = lock(&self.state);
        st.at(generation);
        let rate = st.all.rate(now);
        st.submits.rate(now);
        st.rate.left(now);
        st.submit.left(now);
        let keep = self.sizes.places_kept(rate);
        let mut gone = std::mem::take(&mut st.stale);
        while st.free.len() > keep {
            let name = st.free.pop().expect("more than none");
            st.held.remove(&name);
            gone.push(name);
        }
        gone
    }

    /// Every lease held, in use or free (to renew them).
    pub fn held(&self) -> Vec<Arc<str>> {
        lock(&self.state).held.iter().cloned().collect()
    }

    /// Leases Redis no longer has (expired): never used again.
    pub fn forget(&self, gone: &[Arc<str>]) {
        let mut st = lock(&self.state);
        for name in gone {
            st.held.remove(name);
        }
        st.free.retain(|name| !gone.contains(name));
    }
}

/// Held while a call refills a key: whatever becomes of the call (answered, refused,
/// timed out, dropped with its request), the next refill may start once it ends.
pub struct Refilling<'a>(pub &'a Ahead);

impl Drop for Refilling<'_> {
    fn drop(&mut self) {
        self.0.refilled();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STOCK_FOR: Duration = Duration::from_millis(20);

    /// (interval µs, burst) of `rate` per second.
    fn cells(rate: f64, burst: u32) -> (f64, u32) {
        (1e6 / rate, burst)
    }

    const OFF: (f64, u32) = (0.0, 0);

    #[test]
    fn small_limits_hold_nothing_ahead() {
        // The acceptance's key: 10/s, burst 10, four in progress.
        assert!(Sizes::new(cells(10.0, 10), OFF, 4, STOCK_FOR).is_exact());
        assert!(Sizes::new(cells(10.0, 10), OFF, 0, STOCK_FOR).is_exact());
        // A fast rate with a small cap: every request needs Redis for its place.
        assert!(Sizes::new(cells(2000.0, 200), OFF, 4, STOCK_FOR).is_exact());
        assert!(Sizes::new(cells(2000.0, 200), OFF, 0, Duration::ZERO).is_exact());
        assert!(Sizes::new(OFF, OFF, 4, STOCK_FOR).is_exact());
    }

    #[test]
    fn what_is_held_ahead_is_bounded_by_a_share_of_the_limits() {
        let s = Sizes::new(cells(2000.0, 200), cells(5.0, 5), 64, STOCK_FOR);
        assert!(!s.is_exact());
        // A sixteenth of the burst in stock, however fast the key runs here…
        assert_eq!(s.rate.cap, 12);
        assert_eq!(s.rate.target(1e9, STOCK_FOR), 12);
        // …as much again of debt pushed ahead: 12 intervals of 0.5 ms, which keeps a
        // batch usable for 6 ms at least…
        assert_eq!(s.rate.phantom_us(), 6_000.0);
        // …so 6 ms of its arrivals below that, not 20.
        assert_eq!(s.rate.target(1000.0, STOCK_FOR), 6);
        assert_eq!(s.rate.target(100.0, STOCK_FOR), 0);
        // A burst that lasts: 20 ms of arrivals, kept usable for 40.
        let long = Sizes::new(cells(100.0, 200), OFF, 0, STOCK_FOR);
        assert_eq!((long.rate.cap, long.rate.phantom_us()), (12, 40_000.0));
        assert_eq!(long.rate.target(300.0, STOCK_FOR), 6);
        // The submit bucket's burst of 5 leaves it nothing: submits ask Redis.
        assert_eq!(s.submit.cap, 0);
        assert_eq!((s.places_cap, s.places_target(1e9)), (4, 4));
        // A burst that leaves room, twice `shared_stock_ms` of debt at most.
        let big = Sizes::new(cells(1e6, 1_000_000), OFF, 0, STOCK_FOR);
        assert_eq!(big.rate.phantom_us(), 40_000.0);
    }

    #[test]
    fn a_batch_is_used_only_while_the_debt_it_left_covers_it() {
        let bucket = Bucket::new(cells(2000.0, 200), STOCK_FOR);
        let sent = Instant::now();
        let at = |us: u64| sent + Duration::from_micros(us);
        let mut stock = Stock::default();
        // 10 cells (5 ms) under a debt of 8 ms: usable for 3 ms after the sending.
        let grant = BucketGrant {
            extra: 10,
            debt_us: 8_000,
            room: 150,
        };
        stock.granted(&bucket, &grant, sent);
        assert_eq!((stock.left(at(0)), stock.room), (10, 150));
        assert!(stock.take(at(2_999)));
        assert_eq!(stock.left(at(2_999)), 9);
        // Past it, the rest is lost: never used, never given back.
        assert!(!stock.take(at(3_000)));
        assert_eq!(stock.left(at(3_000)), 0);
        // A debt that does not cover the batch at all: nothing usable.
        let uncovered = BucketGrant {
            extra: 10,
            debt_us: 5_000,
            room: 150,
        };
        stock.granted(&bucket, &uncovered, sent);
        assert_eq!(stock.left(at(0)), 0);
        // Batches are used soonest-expiring first.
        stock.add(2, at(9_000));
        stock.add(1, at(4_000));
        assert!(stock.take(at(0)));
        assert_eq!(stock.batches, vec![(2, at(9_000))]);
    }

    fn grant_of(rate: BucketGrant, places: usize) -> Grant {
        Grant {
            rate,
            submit: BucketGrant::default(),
            places,
        }
    }

    #[test]
    fn a_fast_key_is_served_from_stock_refilled_one_call_at_a_time() {
        let ahead = Ahead::new(Sizes::new(cells(2000.0, 200), OFF, 0, STOCK_FOR));
        let start = Instant::now();
        let at = |us: u64| start + Duration::from_micros(us);
        // Until its rate is known, each request asks for its own cell only.
        assert!(matches!(ahead.take(at(0), false, 0), Taken::Ask(w) if w == Wanted::default()));
        // 2,000 a second here for 10 ms: 12 cells (the cap) are asked for, by one call.
        let mut t = 0;
        let wanted = loop {
            t += 500;
            if let Taken::Ask(w) = ahead.take(at(t), false, 0)
                && w.refill
            {
                break w;
            }
        };
        // About 6 ms of them: what the debt pushed ahead keeps usable.
        let g = wanted.rate;
        assert!((10..=12).contains(&g), "{g}");
        assert!(t <= 12_000, "{t}");
        assert!(matches!(ahead.take(at(t), false, 0), Taken::Ask(w) if !w.refill));
        // Granted with the request's own cell, the debt pushed 6 ms past the batch.
        let grant = BucketGrant {
            extra: g,
            debt_us: 500 + u64::from(g) * 500 + 6_000,
            room: 175,
        };
        ahead.granted(at(t), 0, &grant_of(grant, 0), |_| "".into(), false);
        drop(Refilling(&ahead));
        let mut here = 0;
        let refill = loop {
            t += 100;
            match ahead.take(at(t), false, 0) {
                Taken::Here {
                    headers, refill, ..
                } => {
                    here += 1;
                    let h = headers.unwrap();
                    assert_eq!(h.remaining(), 175 + g - here);
                    if let Some(refill) = refill {
                        break refill;
                    }
                }
                Taken::Ask(_) => panic!("asked Redis with cells in stock"),
            }
        };
        // Arriving at 10,000 a second now, the key wants the cap of 12: once fewer than
        // a quarter are left, what is missing is asked for in the background.
        assert_eq!((here, refill.rate), (g - 2, 10));
        assert!(matches!(
            ahead.take(at(t), false, 0),
            Taken::Here { refill: None, .. }
        ));
        // Redis stopped answering meanwhile: nothing held before is used.
        assert!(matches!(ahead.take(at(t), false, 1), Taken::Ask(w) if !w.refill));
    }

    #[test]
    fn places_are_kept_for_the_next_requests_then_given_back() {
        let ahead = Ahead::new(Sizes::new(OFF, OFF, 64, STOCK_FOR));
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        // 1,000 a second: 20 ms of them is 20 places, at most a sixteenth of 64; asked
        // for once the rate shows (10 ms).
        let wanted = (0..=20)
            .find_map(|ms| match ahead.take(at(ms), false, 0) {
                Taken::Ask(w) if w.refill => Some(w),
                Taken::Ask(_) => None,
                Taken::Here { .. } => panic!("no place held yet"),
            })
            .unwrap();
        assert_eq!(wanted.places, 4);
        let named = |n: usize| Arc::from(format!("r:1:{n}"));
        let own = ahead.granted(at(20), 0, &grant_of(BucketGrant::default(), 5), named, true);
        drop(Refilling(&ahead));
        assert_eq!(own.as_deref(), Some("r:1:1"));
        assert_eq!(ahead.held().len(), 5);
        let Taken::Here { lease, .. } = ahead.take(at(21), false, 0) else {
            panic!("a free place held");
        };
        let lease = lease.unwrap();
        // Ended: kept while fewer than twice the target are free, within the cap (4).
        assert!(ahead.give_back(&lease, 0, at(22)));
        assert!(!ahead.give_back(&own.unwrap(), 0, at(22)), "four are free");
        // One Redis no longer has is never handed out again.
        ahead.forget(std::slice::from_ref(&lease));
        assert_eq!(ahead.held().len(), 3);
        // A lease of an earlier generation is never kept.
        let Taken::Here { lease, .. } = ahead.take(at(23), false, 0) else {
            panic!("a free place held");
        };
        assert!(!ahead.give_back(&lease.unwrap(), 1, at(24)));
        // Idle for two windows: every free place goes back.
        let swept = ahead.sweep(at(130), 0).len() + ahead.sweep(at(240), 0).len();
        assert_eq!(swept, 2);
        assert!(ahead.held().is_empty());
    }

    /// The admission script's buckets (`ADMIT` in access/shared.rs), in µs on one
    /// clock: the stored theoretical arrival time `tat`, taking `need` cells now and
    /// up to `want` ahead.
    fn script(tat: &mut f64, now: f64, b: &Bucket, need: u32, want: u32) -> Option<BucketGrant> {
        let t = tat.max(now);
        let horizon = b.interval_us * f64::from(b.burst);
        let ahead = t + f64::from(need) * b.interval_us - now;
        if ahead > horizon {
            return (need == 0).then(BucketGrant::default);
        }
        let extra = f64::from(want).min(((horizon - ahead) / b.interval_us).floor());
        let mut until = t + (f64::from(need) + extra) * b.interval_us;
        if extra > 0.0 {
            let held = (now + extra * b.interval_us + b.phantom_us).min(now + horizon);
            until = until.max(held);
        }
        *tat = tat.max(until);
        Some(BucketGrant {
            extra: extra as u32,
            debt_us: (until - now).floor() as u64,
            room: ((horizon - (until - now)) / b.interval_us).floor() as u32,
        })
    }

    #[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
    enum Event {
        /// A request at a replica.
        Arrival(usize),
        /// A call (sent at µs) runs in Redis: the request's own cell or not, wanted.
        Runs(usize, u64, bool, u32),
        /// Its answer reaches the replica.
        Answer(usize, u64, bool, u32, u64, u32),
    }

    /// Replicas sharing a key through the model of the script, with round trips of
    /// up to `latency` µs, requests arriving after `gaps`: the times of admission.
    fn simulate(bucket: (f64, u32), gaps: &[(usize, u64)], latency: &[u64]) -> (Vec<f64>, usize) {
        let sizes = Sizes::new(bucket, OFF, 0, STOCK_FOR);
        let replicas: Vec<_> = (0..3).map(|_| Ahead::new(sizes)).collect();
        let start = Instant::now();
        let at = |us: u64| start + Duration::from_micros(us);
        let mut events = std::collections::BinaryHeap::new();
        let mut t = 0;
        for &(replica, gap) in gaps {
            t += gap;
            events.push(std::cmp::Reverse((t, Event::Arrival(replica % 3))));
        }
        let mut lat = latency.iter().cycle();
        let (mut tat, mut admitted, mut here) = (0.0, Vec::new(), 0);
        while let Some(std::cmp::Reverse((now, event))) = events.pop() {
            match event {
                Event::Arrival(r) => match replicas[r].take(at(now), false, 0) {
                    Taken::Here { refill, .. } => {
                        admitted.push(now as f64);
                        here += 1;
                        if let Some(w) = refill {
                            let runs = now + lat.next().unwrap();
                            events.push(std::cmp::Reverse((
                                runs,
                                Event::Runs(r, now, false, w.rate),
                            )));
                        }
                    }
                    Taken::Ask(w) => {
                        let runs = now + lat.next().unwrap();
                        let call = Event::Runs(r, now, true, if w.refill { w.rate } else { 0 });
                        events.push(std::cmp::Reverse((runs, call)));
                    }
                },
                Event::Runs(r, sent, own, want) => {
                    let grant = script(&mut tat, now as f64, &sizes.rate, u32::from(own), want);
                    if own && grant.is_some() {
                        admitted.push(now as f64);
                    }
                    let g = grant.unwrap_or_default();
                    let back = now + lat.next().unwrap();
                    let answer = Event::Answer(r, sent, want > 0, g.extra, g.debt_us, g.room);
                    events.push(std::cmp::Reverse((back, answer)));
                }
                Event::Answer(r, sent, refill, extra, debt_us, room) => {
                    let rate = BucketGrant {
                        extra,
                        debt_us,
                        room,
                    };
                    replicas[r].granted(at(sent), 0, &grant_of(rate, 0), |_| "".into(), false);
                    if refill {
                        drop(Refilling(&replicas[r]));
                    }
                }
            }
        }
        admitted.sort_by(f64::total_cmp);
        (admitted, here)
    }

    /// Admissions from stock over every case: the cases are not all decided in Redis.
    static HERE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(64))]

        /// Whatever the arrivals and round trips, the requests the replicas admit
        /// (from stock when they are served, in Redis otherwise) pass the exact
        /// limiter: stock never lets a window through more than its burst and rate.
        #[test]
        fn replicas_with_stock_never_admit_more_than_the_exact_limiter(
            (rate, burst) in proptest::sample::select(vec![(2000.0, 200), (500.0, 64), (20_000.0, 2000)]),
            // Runs of arrivals spread over one to three replicas, each at its pace (in
            // thousandths of an interval: from far faster than the rate to slower),
            // each followed by a lull (µs) that refills part or all of the burst.
            runs in proptest::collection::vec((1..600usize, 0..1500u64, 1..=3usize, 0..40_000u64), 1..12),
            latency in proptest::collection::vec(20..400u64, 1..16),
        ) {
            let (interval, burst) = cells(rate, burst);
            let mut gaps = Vec::new();
            for &(n, pace, spread, lull) in &runs {
                let gap = (pace as f64 * interval / 1000.0) as u64;
                gaps.extend((0..n).map(|i| (i % spread, gap)));
                gaps.push((0, lull));
            }
            let (admitted, here) = simulate((interval, burst), &gaps, &latency);
            // The exact limiter (GCRA) over the times of admission.
            let mut tat = f64::MIN;
            for (n, &t) in admitted.iter().enumerate() {
                let next = tat.max(t) + interval;
                proptest::prop_assert!(
                    next - t <= interval * f64::from(burst) + 1e-3,
                    "admission {n} at {t} µs: the exact limiter refuses it"
                );
                tat = next;
            }
            HERE.fetch_add(here, std::sync::atomic::Ordering::Relaxed);
        }
    }
}
