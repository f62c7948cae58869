//! Per-key limits held for all replicas together, in Redis (`[limits] shared`).
//!
//! One Lua script takes a request's rate cells (GCRA: one "theoretical arrival time"
//! per bucket) and its place among the key's requests in progress (a lease in a sorted
//! set, scored by its expiry) atomically, on Redis's clock, so replicas whose clocks
//! differ still agree. A lease is renewed while its replica holds it and removed when
//! no longer wanted; a replica that dies stops renewing, and its leases expire.
//!
//! The same script grants cells and leases ahead of need (`access/ahead.rs`), so that
//! most requests of a key that runs fast are decided on this replica without waiting
//! for Redis; a key with small limits is asked about for every request, exactly.
//!
//! Redis that does not answer within `shared_timeout_ms` never holds a request up
//! further: the replica decides alone with its `local_share` of every limit (the
//! key's local buckets), says so once in the log and in the metrics, and asks Redis
//! again in the background at most every [`RECHECK`] until it answers.
//!
//! Each serving thread has a connection of its own ([`crate::workers::slot`]), opened
//! on its first use by that thread, so a request's round trip to Redis wakes no
//! other thread.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::ahead::{Ahead, BucketGrant, Grant, Refilling, Sizes, Taken, Wanted};
use super::limits::{KeyLimiter, LimitExceeded, RateHeaders};
use crate::metrics::SharedMetrics;

/// How often a replica deciding alone asks Redis whether it answers again.
pub const RECHECK: Duration = Duration::from_millis(500);

/// How long a connection attempt (TCP, TLS, AUTH, SELECT) may take; it runs in the
/// background of the requests, which never wait for it past `shared_timeout_ms`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Leases renewed per script call.
const RENEW_BATCH: usize = 512;

/// How often places held ahead and no longer wanted are given back.
pub const SWEEP: Duration = Duration::from_millis(100);

/// KEYS: rate bucket, submit bucket, lease set, then the sets of leases whose
/// requests ended. ARGV, per bucket (rate from 1, submit from 6): interval (µs, 0:
/// off), burst, cells needed now (0 or 1), cells wanted ahead, the debt (µs) a grant
/// ahead leaves at least; then 11: most requests in progress (0: off), 12: lease (ms),
/// 13: leases needed now (0 or 1), 14: leases wanted ahead, 15: the leases' name
/// prefix; then the names of the leases that ended, one per set.
/// Answers {0, then per bucket: cells granted ahead, its debt (µs), cells left; then
/// leases granted (named prefix:1, prefix:2, …, the one needed now first)} when
/// admitted; {1 (rate) or 2 (submit), burst, wait µs} when a rate refuses; {3} when
/// the key has too many requests in progress. Nothing is taken unless everything
/// needed now admits; what is wanted ahead is granted as far as it fits, never
/// refusing.
const ADMIT: &str = r"
for i = 4, #KEYS do
  redis.call('ZREM', KEYS[i], ARGV[i + 12])
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local answer = {0, 0, 0, 0, 0, 0, 0, 0}
local taken = {}
for i = 1, 2 do
  local a = 5 * i - 5
  local interval = tonumber(ARGV[a + 1])
  if interval > 0 then
    local burst = tonumber(ARGV[a + 2])
    local need = tonumber(ARGV[a + 3])
    local stored = redis.call('GET', KEYS[i])
    local tat = now
    if stored then tat = math.max(tonumber(stored), now) end
    local horizon = interval * burst
    local ahead = tat + need * interval - now
    if ahead > horizon then
      if need > 0 then
        return {i, burst, math.ceil(ahead - horizon)}
      end
    else
      local extra = math.max(0, math.min(tonumber(ARGV[a + 4]), math.floor((horizon - ahead) / interval)))
      local until_tat = tat + (need + extra) * interval
      if extra > 0 then
        local held = math.min(now + extra * interval + tonumber(ARGV[a + 5]), now + horizon)
        until_tat = math.max(until_tat, held)
      end
      if until_tat > tat then
        taken[#taken + 1] = {KEYS[i], until_tat}
      end
      answer[3 * i - 1] = extra
      answer[3 * i] = math.floor(until_tat - now)
      answer[3 * i + 1] = math.floor((horizon - (until_tat - now)) / interval)
    end
  end
end
local most = tonumber(ARGV[11])
local now_ms = math.floor(now / 1000)
local granted = 0
if most > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now_ms)
  local free = most - redis.call('ZCARD', KEYS[3])
  local need = tonumber(ARGV[13])
  if need > 0 and free < need then
    return {3}
  end
  granted = math.max(0, math.min(need + tonumber(ARGV[14]), free))
end
for _, b in ipairs(taken) do
  redis.call('SET', b[1], string.format('%.0f', b[2]), 'PX', math.ceil((b[2] - now) / 1000) + 1)
end
if granted > 0 then
  local lease = tonumber(ARGV[12])
  local members = {}
  for j = 1, granted do
    members[#members + 1] = now_ms + lease
    members[#members + 1] = ARGV[15] .. ':' .. j
    if #members == 512 or j == granted then
      redis.call('ZADD', KEYS[3], unpack(members))
      members = {}
    end
  end
  redis.call('PEXPIRE', KEYS[3], lease)
end
answer[8] = granted
return answer
";

/// KEYS: lease sets. ARGV: lease (ms), then one lease name per key. Leases already
/// gone (expired, or Redis restarted) are not made again; their places (from 1) are
/// answered.
const RENEW: &str = r"
local t = redis.call('TIME')
local until_ms = math.floor((tonumber(t[1]) * 1000000 + tonumber(t[2])) / 1000) + tonumber(ARGV[1])
local gone = {}
for i, key in ipairs(KEYS) do
  if redis.call('ZSCORE', key, ARGV[i + 1]) then
    redis.call('ZADD', key, 'XX', until_ms, ARGV[i + 1])
    redis.call('PEXPIRE', key, ARGV[1])
  else
    gone[#gone + 1] = i
  end
end
return gone
";

/// `[limits] shared` and its settings, checked. The password never shows in `Debug`.
#[derive(Clone)]
pub struct SharedSettings {
    info: redis::ConnectionInfo,
    /// `redis://host:port/db`, for the log.
    shown: String,
    pub timeout: Duration,
    pub lease: Duration,
    pub local_share: f64,
    /// How much of a key's arrivals a replica holds ahead (`shared_stock_ms`).
    pub stock_for: Duration,
}

impl std::fmt::Debug for SharedSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedSettings")
            .field("server", &self.shown)
            .field("timeout", &self.timeout)
            .field("lease", &self.lease)
            .field("local_share", &self.local_share)
            .field("stock_for", &self.stock_for)
            .finish()
    }
}

impl SharedSettings {
    /// `url` (`redis://` or `rediss://`, no password in it) with the password read
    /// from its variable or file. Errors never quote the URL's user part or a password.
    pub fn parse(url: &str, password: Option<String>) -> Result<Self, String> {
        let scheme = url.split_once("://").map(|(s, _)| s);
        if !matches!(scheme, Some("redis" | "rediss")) {
            return Err("must be redis://HOST:PORT/DB or rediss://HOST:PORT/DB".into());
        }
        let info = redis::IntoConnectionInfo::into_connection_info(url)
            .map_err(|_| "is not a Redis URL (redis://HOST:PORT/DB)".to_string())?;
        if info.redis_settings().password().is_some() {
            return Err(
                "a password goes in shared_password_env or shared_password_file, not in the URL"
                    .into(),
            );
        }
        let db = info.redis_settings().db();
        let shown = format!("{}://{}/{db}", scheme.unwrap_or("redis"), info.addr());
        let info = match password {
            Some(p) => {
                let redis = info.redis_settings().clone().set_password(p);
                info.set_redis_settings(redis)
            }
            None => info,
        };
        Ok(Self {
            info,
            shown,
            timeout: Duration::ZERO,
            lease: Duration::ZERO,
            local_share: 1.0,
            stock_for: Duration::ZERO,
        })
    }

    /// The server, as the log names it (no credentials).
    pub fn server(&self) -> &str {
        &self.shown
    }
}

/// What a key's limits are for the whole fleet, with its names in Redis and what this
/// replica holds of them ahead.
#[derive(Debug)]
pub struct FleetLimits {
    rate_key: String,
    submit_key: String,
    slots_key: Arc<str>,
    ahead: Ahead,
}

/// The same limits under the same names: what is held ahead goes with them.
impl PartialEq for FleetLimits {
    fn eq(&self, other: &Self) -> bool {
        self.rate_key == other.rate_key
            && self.submit_key == other.submit_key
            && self.slots_key == other.slots_key
            && self.ahead.sizes == other.ahead.sizes
    }
}

/// What a call takes now for its request: a cell of each bucket that applies, a place.
#[derive(Debug, Clone, Copy, Default)]
struct Need {
    rate: bool,
    submit: bool,
    place: bool,
}

impl FleetLimits {
    /// `rate` and `submit` as (requests per second, burst); `None` or 0: off.
    /// `stock_for`: how much of the key's arrivals this replica may hold ahead.
    pub fn new(
        key: &str,
        rate: Option<(f64, u32)>,
        submit: Option<(f64, u32)>,
        max_concurrent: usize,
        stock_for: Duration,
    ) -> Self {
        let cells = |r: Option<(f64, u32)>| match r {
            Some((rate, burst)) if rate > 0.0 && burst > 0 => (1e6 / rate, burst),
            _ => (0.0, 0),
        };
        let sizes = Sizes::new(cells(rate), cells(submit), max_concurrent, stock_for);
        Self {
            rate_key: format!("mediagate:limits:{key}:rate"),
            submit_key: format!("mediagate:limits:{key}:submit"),
            slots_key: format!("mediagate:limits:{key}:in_progress").into(),
            ahead: Ahead::new(sizes),
        }
    }

    /// Whether no limit is on: nothing to ask Redis.
    pub fn is_off(&self) -> bool {
        let s = &self.ahead.sizes;
        !s.rate.is_on() && !s.submit.is_on() && s.most == 0
    }

    /// What a request needs of Redis when nothing is held ahead for it.
    fn need(&self, is_submit: bool) -> Need {
        let s = &self.ahead.sizes;
        Need {
            rate: s.rate.is_on(),
            submit: is_submit && s.submit.is_on(),
            place: s.most > 0,
        }
    }

    /// The refusal a script's answer means, or the admission's headers (for a
    /// request that took `need`) and what was granted.
    fn read(
        &self,
        answer: &[i64],
        need: Need,
    ) -> Result<(Option<RateHeaders>, Grant), LimitExceeded> {
        let s = &self.ahead.sizes;
        let us = |n: i64| Duration::from_micros(u64::try_from(n).unwrap_or(0));
        let count = |n: i64| u32::try_from(n).unwrap_or(0);
        let bucket = |extra, debt, room| BucketGrant {
            extra: count(extra),
            debt_us: u64::try_from(debt).unwrap_or(0),
            room: count(room),
        };
        match *answer {
            [
                0,
                rate_extra,
                rate_debt,
                rate_room,
                extra,
                debt,
                room,
                places,
            ] => {
                let grant = Grant {
                    rate: bucket(rate_extra, rate_debt, rate_room),
                    submit: bucket(extra, debt, room),
                    places: usize::try_from(places).unwrap_or(0),
                };
                // What the key has left, this replica's stock included; whichever
                // bucket is closer to refusing.
                let left = |b: &BucketGrant| b.room.saturating_add(b.extra);
                let rate = need.rate.then(|| s.rate.shown(left(&grant.rate)));
                let submit = need.submit.then(|| s.submit.shown(left(&grant.submit)));
                let headers = match (rate, submit) {
                    (Some(r), Some(s)) if r.remaining() < s.remaining() => Some(r),
                    (r, s) => s.or(r),
                };
                Ok((headers, grant))
            }
            [which @ (1 | 2), burst, wait] => {
                let (interval, which) = match which {
                    1 => (s.rate.interval_us, "rate"),
                    _ => (s.submit.interval_us, "submit"),
                };
                let wait = us(wait);
                let interval = Duration::from_secs_f64(interval / 1e6);
                let reset =
                    wait.saturating_add(interval.saturating_mul(count(burst).saturating_sub(1)));
                Err(LimitExceeded::Rate {
                    which,
                    headers: RateHeaders::new(count(burst), 0, reset),
                    wait,
                })
            }
            _ => Err(LimitExceeded::Busy(s.most)),
        }
    }
}

/// One serving thread's connection, and the leases of its requests that ended and
/// are still to be removed in Redis. Per thread, so that threads do not contend for
/// them.
struct Slot {
    conn: ArcSwap<ConnectionManager>,
    ended: Mutex<Vec<Held>>,
}

/// A lease to remove.
struct Held {
    key: Arc<str>,
    name: Arc<str>,
}

/// Leases of ended requests sent along with an admission; those whose call got no
/// answer (dropped with its request, or failed) are released again on their own:
/// removing a lease twice does nothing, while one never removed would hold its key's
/// place until it expires.
struct Along<'a> {
    limits: &'a Arc<SharedLimits>,
    leases: Vec<Held>,
}

impl Drop for Along<'_> {
    fn drop(&mut self) {
        for held in self.leases.drain(..) {
            self.limits.release(held);
        }
    }
}

type Verdict = Result<(Option<RateHeaders>, Option<InProgress>), LimitExceeded>;

/// The connections to Redis and this replica's leases.
pub struct SharedLimits {
    settings: SharedSettings,
    client: redis::Client,
    /// One connection per serving thread.
    slots: Box<[Slot]>,
    admit: redis::Script,
    renew: redis::Script,
    next_lease: AtomicU64,
    replica: String,
    /// True while this replica decides alone: Redis did not answer, and no check
    /// since found it again.
    down: AtomicBool,
    /// Bumped each time Redis stops answering: what was held ahead before is dropped.
    generation: AtomicU64,
    /// While down: when (ms since `started`) the next check may begin.
    recheck_at: AtomicU64,
    checking: AtomicBool,
    started: Instant,
    /// Every key asked about: their leases are renewed, their stock swept.
    keys: Mutex<Vec<Arc<FleetLimits>>>,
    metrics: SharedMetrics,
}

impl std::fmt::Debug for SharedLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedLimits")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// A place among a key's requests in progress, a lease in Redis; on drop, kept for the
/// key's next request or removed.
pub struct SharedLease {
    limits: Arc<SharedLimits>,
    fleet: Arc<FleetLimits>,
    name: Arc<str>,
    generation: u64,
}

impl Drop for SharedLease {
    fn drop(&mut self) {
        let ahead = &self.fleet.ahead;
        if !ahead.give_back(&self.name, self.generation, Instant::now()) {
            self.limits.release(Held {
                key: self.fleet.slots_key.clone(),
                name: self.name.clone(),
            });
        }
    }
}

/// What a request holds while in progress: a local permit or a shared lease.
pub enum InProgress {
    Local {
        _permit: tokio::sync::OwnedSemaphorePermit,
    },
    Shared {
        _lease: SharedLease,
    },
}

impl SharedLimits {
    /// Connections are opened on first use (by each serving thread); this only
    /// checks that a client can be made of the settings. Call it on a runtime.
    pub fn new(
        settings: SharedSettings,
        replica: &str,
        metrics: SharedMetrics,
    ) -> Result<Arc<Self>, String> {
        if matches!(settings.info.addr(), redis::ConnectionAddr::TcpTls { .. }) {
            // rustls needs a process-wide provider; the gateway's is ring.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let client = redis::Client::open(settings.info.clone()).map_err(|e| e.to_string())?;
        let slots = (0..1 + crate::workers::default_count())
            .map(|_| {
                Ok(Slot {
                    conn: ArcSwap::from_pointee(Self::connect(&client)?),
                    ended: Mutex::default(),
                })
            })
            .collect::<Result<_, String>>()?;
        Ok(Arc::new(Self {
            client,
            slots,
            admit: redis::Script::new(ADMIT),
            renew: redis::Script::new(RENEW),
            next_lease: AtomicU64::new(0),
            replica: replica.to_string(),
            down: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            recheck_at: AtomicU64::new(0),
            checking: AtomicBool::new(false),
            started: Instant::now(),
            keys: Mutex::default(),
            metrics,
            settings,
        }))
    }

    /// A manager that connects when first used; it reconnects by itself when the
    /// connection drops.
    fn connect(client: &redis::Client) -> Result<ConnectionManager, String> {
        let config = ConnectionManagerConfig::new()
            // One attempt per check: retries would only delay the next one.
            .set_number_of_retries(0)
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            // Each call has a deadline of its own (a request's is `shared_timeout_ms`);
            // a second timer per command would only cost.
            .set_response_timeout(None);
        ConnectionManager::new_lazy_with_config(client.clone(), config).map_err(|e| e.to_string())
    }

    pub fn settings(&self) -> &SharedSettings {
        &self.settings
    }

    /// This thread's slot.
    fn slot(&self) -> &Slot {
        &self.slots[crate::workers::slot(self.slots.len())]
    }

    /// This thread's connection.
    fn conn(&self) -> ConnectionManager {
        ConnectionManager::clone(&self.slot().conn.load())
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Admit one request of the key `limiter`: from what this replica holds ahead, in
    /// Redis, or by the key's local buckets while Redis does not answer (or when its
    /// limits are not shared).
    pub async fn admit(self: &Arc<Self>, limiter: &KeyLimiter, is_submit: bool) -> Verdict {
        let Some(fleet) = limiter.fleet() else {
            return Self::local(limiter, is_submit);
        };
        if self.down.load(Ordering::Relaxed) {
            self.recheck_later();
            return self.alone(limiter, is_submit);
        }
        self.register(fleet);
        let generation = self.generation.load(Ordering::Relaxed);
        let wanted = match fleet.ahead.take(Instant::now(), is_submit, generation) {
            Taken::Here {
                headers,
                lease,
                refill,
            } => {
                self.metrics.decided_ahead.inc();
                if let Some(wanted) = refill {
                    self.refill(fleet.clone(), wanted, generation);
                }
                let lease = lease.map(|name| self.lease(fleet, name, generation));
                return Ok((headers, lease));
            }
            Taken::Ask(wanted) => wanted,
        };
        let _refilling = wanted.refill.then(|| Refilling(&fleet.ahead));
        let need = fleet.need(is_submit);
        let prefix = self.prefix(need.place || wanted.places > 0);
        let sent = Instant::now();
        self.metrics.called("admit");
        let answer = match self.call(fleet, need, &wanted, &prefix).await {
            Ok(answer) => answer,
            Err(why) => {
                self.unreachable(&why);
                return self.alone(limiter, is_submit);
            }
        };
        let (headers, grant) = fleet.read(&answer, need)?;
        let named = |n| format!("{prefix}:{n}").into();
        let own = fleet
            .ahead
            .granted(sent, generation, &grant, named, need.place);
        Ok((headers, own.map(|name| self.lease(fleet, name, generation))))
    }

    /// Listed once, so that its leases are renewed and its stock swept.
    fn register(&self, fleet: &Arc<FleetLimits>) {
        let flag = &fleet.ahead.registered;
        if !flag.load(Ordering::Relaxed) && !flag.swap(true, Ordering::Relaxed) {
            lock(&self.keys).push(fleet.clone());
        }
    }

    fn lease(
        self: &Arc<Self>,
        fleet: &Arc<FleetLimits>,
        name: Arc<str>,
        generation: u64,
    ) -> InProgress {
        InProgress::Shared {
            _lease: SharedLease {
                limits: self.clone(),
                fleet: fleet.clone(),
                name,
                generation,
            },
        }
    }

    /// The names of the leases a call may add: unique to this replica and call.
    fn prefix(&self, places: bool) -> String {
        if !places {
            return String::new();
        }
        let id = self.next_lease.fetch_add(1, Ordering::Relaxed);
        format!("{}:{id}", self.replica)
    }

    /// One admission script on this thread's connection, within `shared_timeout_ms`.
    /// Leases of requests that ended on this thread go with it (one round trip less
    /// each); put back to be removed on their own if the call gets no answer (its
    /// request went away meanwhile, or Redis failed: then, when Redis is down, they
    /// expire).
    async fn call(
        self: &Arc<Self>,
        fleet: &FleetLimits,
        need: Need,
        wanted: &Wanted,
        prefix: &str,
    ) -> Result<Vec<i64>, String> {
        let s = &fleet.ahead.sizes;
        let mut call = self.admit.prepare_invoke();
        call.key(&fleet.rate_key)
            .key(&fleet.submit_key)
            .key(&*fleet.slots_key);
        for (bucket, need, wanted) in [
            (&s.rate, need.rate, wanted.rate),
            (&s.submit, need.submit, wanted.submit),
        ] {
            // A bucket neither needed nor wanted is not read.
            let used = bucket.is_on() && (need || wanted > 0);
            call.arg(if used { bucket.interval_us } else { 0.0 })
                .arg(bucket.burst)
                .arg(u8::from(need))
                .arg(wanted)
                .arg(bucket.phantom_us());
        }
        call.arg(s.most)
            .arg(u64::try_from(self.settings.lease.as_millis()).unwrap_or(u64::MAX))
            .arg(u8::from(need.place))
            .arg(wanted.places)
            .arg(prefix);
        let mut along = Along {
            limits: self,
            leases: std::mem::take(&mut *lock(&self.slot().ended)),
        };
        for lease in &along.leases {
            call.key(&*lease.key).arg(&*lease.name);
        }
        let mut conn = self.conn();
        let answer = call.invoke_async::<Vec<i64>>(&mut conn);
        match tokio::time::timeout(self.settings.timeout, answer).await {
            Ok(Ok(answer)) => {
                along.leases.clear();
                Ok(answer)
            }
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("no answer within shared_timeout_ms".into()),
        }
    }

    /// Ask for more ahead in the background of the request that found the stock low,
    /// on its thread.
    fn refill(self: &Arc<Self>, fleet: Arc<FleetLimits>, wanted: Wanted, generation: u64) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            drop(Refilling(&fleet.ahead));
            return;
        };
        let this = self.clone();
        runtime.spawn(async move {
            let _refilling = Refilling(&fleet.ahead);
            let prefix = this.prefix(wanted.places > 0);
            let sent = Instant::now();
            this.metrics.called("refill");
            match this.call(&fleet, Need::default(), &wanted, &prefix).await {
                Ok(answer) => {
                    if let Ok((_, grant)) = fleet.read(&answer, Need::default()) {
                        let named = |n| format!("{prefix}:{n}").into();
                        fleet.ahead.granted(sent, generation, &grant, named, false);
                    }
                }
                Err(why) => this.unreachable(&why),
            }
        });
    }

    /// Decided alone, Redis being away: counted.
    fn alone(&self, limiter: &KeyLimiter, is_submit: bool) -> Verdict {
        self.metrics.decided_locally.inc();
        Self::local(limiter, is_submit)
    }

    /// The key's limits in this replica alone (also a key without fleet limits).
    pub fn local(limiter: &KeyLimiter, is_submit: bool) -> Verdict {
        limiter
            .admit(is_submit)
            .map(|(h, permit)| (h, permit.map(|_permit| InProgress::Local { _permit })))
    }

    /// Redis did not answer: decide alone until a check finds it again, and drop what
    /// was held ahead. Every thread's connection is made anew (a silent one never
    /// recovers by itself); each connects on its thread's next use.
    fn unreachable(&self, why: &str) {
        if self.down.swap(true, Ordering::Relaxed) {
            return;
        }
        self.generation.fetch_add(1, Ordering::Relaxed);
        self.recheck_at.store(
            self.now_ms() + RECHECK.as_millis() as u64,
            Ordering::Relaxed,
        );
        for slot in &self.slots {
            if let Ok(fresh) = Self::connect(&self.client) {
                slot.conn.store(Arc::new(fresh));
            }
        }
        self.metrics.available.set(0);
        self.metrics.outages.inc();
        tracing::warn!(
            server = %self.settings.server(),
            error = %why,
            local_share = self.settings.local_share,
            "shared limits: Redis does not answer; this replica applies its local_share of every limit until it does"
        );
    }
    /// While down, one check at a time, at most every [`RECHECK`], in the background
    /// of the request that notices it is due.
    fn recheck_later(self: &Arc<Self>) {
        if self.now_ms() < self.recheck_at.load(Ordering::Relaxed)
            || self.checking.swap(true, Ordering::Relaxed)
        {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.checking.store(false, Ordering::Relaxed);
            return;
        };
        let this = self.clone();
        runtime.spawn(async move {
            let mut conn = this.conn();
            let ping = redis::cmd("PING");
            let ping = ping.query_async::<String>(&mut conn);
            let answered = matches!(
                tokio::time::timeout(CONNECT_TIMEOUT * 2, ping).await,
                Ok(Ok(_))
            );
            if answered {
                this.down.store(false, Ordering::Relaxed);
                this.metrics.available.set(1);
                tracing::info!(
                    server = %this.settings.server(),
                    "shared limits: Redis answers again; limits are shared again"
                );
            } else {
                let slot = &this.slots[crate::workers::slot(this.slots.len())];
                if let Ok(fresh) = Self::connect(&this.client) {
                    slot.conn.store(Arc::new(fresh));
                }
                this.recheck_at.store(
                    this.now_ms() + RECHECK.as_millis() as u64,
                    Ordering::Relaxed,
                );
            }
            this.checking.store(false, Ordering::Relaxed);
        });
    }

    /// A request ended and its lease is not kept: it is removed with the next
    /// admission on this thread, or, when none comes first, by a call of its own just
    /// after; when Redis cannot be told, the lease expires.
    fn release(self: &Arc<Self>, held: Held) {
        if self.down.load(Ordering::Relaxed) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let slot = crate::workers::slot(self.slots.len());
        let first = {
            let mut ended = lock(&self.slots[slot].ended);
            ended.push(held);
            ended.len() == 1
        };
        if !first {
            return;
        }
        let this = self.clone();
        runtime.spawn(async move {
            // Requests ready on this thread go first, and may take the leases along.
            tokio::task::yield_now().await;
            let ended = std::mem::take(&mut *lock(&this.slots[slot].ended));
            this.remove(&ended).await;
        });
    }

    /// Remove leases in Redis, in one pipeline on this thread's connection.
    async fn remove(&self, leases: &[Held]) {
        if leases.is_empty() {
            return;
        }
        let mut pipe = redis::pipe();
        for lease in leases {
            pipe.cmd("ZREM").arg(&*lease.key).arg(&*lease.name).ignore();
        }
        self.metrics.called("release");
        let mut conn = self.conn();
        let removed = pipe.exec_async(&mut conn);
        let _ = tokio::time::timeout(self.settings.timeout.max(CONNECT_TIMEOUT), removed).await;
    }

    /// Every [`SWEEP`], give back the places no longer wanted ahead; every third of a
    /// lease, renew this replica's leases; for as long as the process runs.
    pub async fn keep_leases(self: Arc<Self>) {
        let renew_every = self.settings.lease / 3;
        let mut renewed = Instant::now();
        let mut tick = tokio::time::interval(SWEEP);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.sweep().await;
            if renewed.elapsed() >= renew_every {
                renewed = Instant::now();
                self.renew_all().await;
            }
        }
    }

    /// Free places beyond what each key's arrivals want, and every place of a key that
    /// a reload replaced (only this list still holds it), are removed in Redis.
    async fn sweep(&self) {
        let (now, generation) = (Instant::now(), self.generation.load(Ordering::Relaxed));
        let mut gone = Vec::new();
        lock(&self.keys).retain(|fleet| {
            let replaced = Arc::strong_count(fleet) == 1;
            let names = match replaced {
                true => fleet.ahead.held(),
                false => fleet.ahead.sweep(now, generation),
            };
            gone.extend(names.into_iter().map(|name| Held {
                key: fleet.slots_key.clone(),
                name,
            }));
            !replaced
        });
        if !self.down.load(Ordering::Relaxed) {
            self.remove(&gone).await;
        }
    }

    async fn renew_all(&self) {
        let keys = lock(&self.keys).clone();
        let held: Vec<(&Arc<FleetLimits>, Arc<str>)> = keys
            .iter()
            .flat_map(|fleet| {
                fleet
                    .ahead
                    .held()
                    .into_iter()
                    .map(move |name| (fleet, name))
            })
            .collect();
        let lease_ms = u64::try_from(self.settings.lease.as_millis()).unwrap_or(u64::MAX);
        let mut conn = self.conn();
        for batch in held.chunks(RENEW_BATCH) {
            let mut call = self.renew.prepare_invoke();
            call.arg(lease_ms);
            for (fleet, name) in batch {
                call.key(&*fleet.slots_key).arg(&**name);
            }
            self.metrics.called("renew");
            let renewed = call.invoke_async::<Vec<usize>>(&mut conn);
            let Ok(Ok(gone)) = tokio::time::timeout(CONNECT_TIMEOUT, renewed).await else {
                // Redis is away: the leases expire there, and requests meanwhile go
                // by the local limits.
                return;
            };
            // Gone from Redis (expired): never handed to a request again.
            for (fleet, name) in gone.iter().filter_map(|&i| batch.get(i.wrapping_sub(1))) {
                fleet.ahead.forget(std::slice::from_ref(name));
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked_without_quoting_a_password() {
        let ok = SharedSettings::parse("redis://127.0.0.1:6380/2", Some("pw".into())).unwrap();
        assert_eq!(ok.server(), "redis://127.0.0.1:6380/2");
        assert!(!format!("{ok:?}").contains("pw"));
        let tls = SharedSettings::parse("rediss://cache.example:6380/0", None).unwrap();
        assert_eq!(tls.server(), "rediss://cache.example:6380/0");
        let e = SharedSettings::parse("redis://:hunter2@127.0.0.1:6379/0", None).unwrap_err();
        assert!(
            e.contains("shared_password_env") && !e.contains("hunter2"),
            "{e}"
        );
        for bad in ["127.0.0.1:6379", "http://127.0.0.1:6379", "redis://"] {
            assert!(SharedSettings::parse(bad, None).is_err(), "{bad}");
        }
    }

    #[test]
    fn script_answers_are_read() {
        let stock_for = Duration::from_millis(20);
        let fleet = FleetLimits::new("k", Some((10.0, 10)), Some((1.0, 2)), 4, stock_for);
        let need = fleet.need(false);
        assert!(need.rate && !need.submit && need.place);
        let (h, grant) = fleet
            .read(&[0, 0, 100_000, 9, 0, 0, 0, 1], need)
            .ok()
            .unwrap();
        assert_eq!(h, Some(RateHeaders::new(10, 9, Duration::from_millis(100))));
        assert_eq!(grant.places, 1);
        assert_eq!(grant.rate.debt_us, 100_000);
        // A submit shows whichever bucket is closer to refusing: here the submit one.
        let need = fleet.need(true);
        let (h, _) = fleet
            .read(&[0, 0, 100_000, 9, 0, 1_000_000, 1, 1], need)
            .ok()
            .unwrap();
        assert_eq!(h, Some(RateHeaders::new(2, 1, Duration::from_secs(1))));
        // Cells granted ahead are the key's too: shown as left.
        let fast = FleetLimits::new("f", Some((2000.0, 200)), None, 0, stock_for);
        let (h, grant) = fast
            .read(&[0, 5, 3_000, 194, 0, 0, 0, 0], fast.need(false))
            .ok()
            .unwrap();
        assert_eq!(h.unwrap().remaining(), 199);
        assert_eq!((grant.rate.extra, grant.rate.room), (5, 194));
        // A refill needs nothing now: no headers.
        let (h, _) = fast
            .read(&[0, 5, 3_000, 194, 0, 0, 0, 0], Need::default())
            .ok()
            .unwrap();
        assert!(h.is_none());
        match fleet.read(&[2, 2, 250_000], fleet.need(true)) {
            Err(LimitExceeded::Rate {
                which,
                headers,
                wait,
            }) => {
                assert_eq!(which, "submit");
                assert_eq!(wait, Duration::from_millis(250));
                // The next cell, then one more interval (1 s) for the rest of the burst.
                assert_eq!(headers, RateHeaders::new(2, 0, Duration::from_millis(1250)));
            }
            _ => panic!("a submit refusal"),
        }
        assert!(matches!(
            fleet.read(&[3], fleet.need(false)),
            Err(LimitExceeded::Busy(4))
        ));
    }
}
