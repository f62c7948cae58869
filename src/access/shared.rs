//! Per-key limits held for all replicas together, in Redis (`[limits] shared`).
//!
//! One Lua script takes a request's rate cells (GCRA: one "theoretical arrival time"
//! per bucket) and its place among the key's requests in progress (a lease in a sorted
//! set, scored by its expiry) atomically, on Redis's clock, so replicas whose clocks
//! differ still agree. A lease is renewed while its request lasts and removed when it
//! ends; a replica that dies stops renewing, and its leases expire.
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

use super::limits::{KeyLimiter, LimitExceeded, RateHeaders};
use crate::FastMap;
use crate::metrics::SharedMetrics;

/// How often a replica deciding alone asks Redis whether it answers again.
pub const RECHECK: Duration = Duration::from_millis(500);

/// How long a connection attempt (TCP, TLS, AUTH, SELECT) may take; it runs in the
/// background of the requests, which never wait for it past `shared_timeout_ms`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Leases renewed per script call.
const RENEW_BATCH: usize = 512;

/// KEYS: rate bucket, submit bucket, lease set, then the sets of leases whose
/// requests ended. ARGV: rate interval (µs, 0: off), burst, submit interval (µs, 0:
/// off or not a submit), submit burst, most requests in progress (0: off), lease (ms),
/// lease name, then the names of the leases that ended, one per set.
/// Answers {0, limit, remaining, reset µs} when admitted (limit 0: no rate to show),
/// {1 (rate) or 2 (submit), burst, wait µs} when a rate refuses, {3} when the key has
/// too many requests in progress. Nothing is taken unless everything admits.
const ADMIT: &str = r"
for i = 4, #KEYS do
  redis.call('ZREM', KEYS[i], ARGV[i + 4])
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local taken = {}
local shown = {0, 0, 0, 0}
for i = 1, 2 do
  local interval = tonumber(ARGV[2 * i - 1])
  if interval > 0 then
    local burst = tonumber(ARGV[2 * i])
    local stored = redis.call('GET', KEYS[i])
    local tat = now
    if stored then tat = math.max(tonumber(stored), now) end
    local ahead = tat + interval - now
    local horizon = interval * burst
    if ahead > horizon then
      return {i, burst, math.ceil(ahead - horizon)}
    end
    local remaining = math.floor((horizon - ahead) / interval)
    taken[#taken + 1] = {KEYS[i], tat + interval, ahead}
    if shown[2] == 0 or remaining <= shown[3] then
      shown = {0, burst, remaining, interval * (burst - remaining)}
    end
  end
end
local most = tonumber(ARGV[5])
local now_ms = math.floor(now / 1000)
if most > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now_ms)
  if redis.call('ZCARD', KEYS[3]) >= most then
    return {3}
  end
end
for _, b in ipairs(taken) do
  redis.call('SET', b[1], string.format('%.0f', b[2]), 'PX', math.ceil(b[3] / 1000) + 1)
end
if most > 0 then
  local lease = tonumber(ARGV[6])
  redis.call('ZADD', KEYS[3], now_ms + lease, ARGV[7])
  redis.call('PEXPIRE', KEYS[3], lease)
end
return shown
";

/// KEYS: lease sets. ARGV: lease (ms), then one lease name per key. Leases already
/// gone (expired, or Redis restarted) are not made again.
const RENEW: &str = r"
local t = redis.call('TIME')
local until_ms = math.floor((tonumber(t[1]) * 1000000 + tonumber(t[2])) / 1000) + tonumber(ARGV[1])
for i, key in ipairs(KEYS) do
  redis.call('ZADD', key, 'XX', until_ms, ARGV[i + 1])
  redis.call('PEXPIRE', key, ARGV[1])
end
return #KEYS
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
}

impl std::fmt::Debug for SharedSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedSettings")
            .field("server", &self.shown)
            .field("timeout", &self.timeout)
            .field("lease", &self.lease)
            .field("local_share", &self.local_share)
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
        })
    }

    /// The server, as the log names it (no credentials).
    pub fn server(&self) -> &str {
        &self.shown
    }
}

/// What a key's limits are for the whole fleet, with its names in Redis.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetLimits {
    rate_key: String,
    submit_key: String,
    slots_key: Arc<str>,
    /// Interval between cells (µs) and burst; 0 µs: off.
    rate: (f64, u32),
    submit: (f64, u32),
    max_concurrent: usize,
}

impl FleetLimits {
    /// `rate` and `submit` as (requests per second, burst); `None` or 0: off.
    pub fn new(
        key: &str,
        rate: Option<(f64, u32)>,
        submit: Option<(f64, u32)>,
        max_concurrent: usize,
    ) -> Self {
        let cells = |r: Option<(f64, u32)>| match r {
            Some((rate, burst)) if rate > 0.0 && burst > 0 => (1e6 / rate, burst),
            _ => (0.0, 0),
        };
        Self {
            rate_key: format!("mediagate:limits:{key}:rate"),
            submit_key: format!("mediagate:limits:{key}:submit"),
            slots_key: format!("mediagate:limits:{key}:in_progress").into(),
            rate: cells(rate),
            submit: cells(submit),
            max_concurrent,
        }
    }

    /// Whether no limit is on: nothing to ask Redis.
    pub fn is_off(&self) -> bool {
        self.rate.1 == 0 && self.submit.1 == 0 && self.max_concurrent == 0
    }

    /// The refusal a script's answer means, or the headers of an admission.
    fn read(&self, answer: &[i64]) -> Result<Option<RateHeaders>, LimitExceeded> {
        let us = |n: i64| Duration::from_micros(u64::try_from(n).unwrap_or(0));
        let count = |n: i64| u32::try_from(n).unwrap_or(0);
        match *answer {
            [0, 0, ..] => Ok(None),
            [0, limit, remaining, reset] => Ok(Some(RateHeaders::new(
                count(limit),
                count(remaining),
                us(reset),
            ))),
            [which @ (1 | 2), burst, wait] => {
                let (interval, which) = match which {
                    1 => (self.rate.0, "rate"),
                    _ => (self.submit.0, "submit"),
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
            _ => Err(LimitExceeded::Busy(self.max_concurrent)),
        }
    }
}

/// One serving thread's connection, the leases its requests hold, and those of its
/// requests that ended and are still to be removed in Redis. Per thread, so that
/// threads do not contend for them.
struct Slot {
    conn: ArcSwap<ConnectionManager>,
    held: Mutex<FastMap<u64, Held>>,
    ended: Mutex<Vec<Held>>,
}

/// A lease this replica holds: renewed until its request ends.
struct Held {
    key: Arc<str>,
    name: Arc<str>,
}

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
    /// While down: when (ms since `started`) the next check may begin.
    recheck_at: AtomicU64,
    checking: AtomicBool,
    started: Instant,
    metrics: SharedMetrics,
}

impl std::fmt::Debug for SharedLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedLimits")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// A place among a key's requests in progress, taken in Redis; given back on drop.
pub struct SharedLease {
    limits: Arc<SharedLimits>,
    id: u64,
    /// The slot of the thread that took it.
    slot: usize,
}

impl Drop for SharedLease {
    fn drop(&mut self) {
        self.limits.release(self.id, self.slot);
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
                    held: Mutex::default(),
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
            recheck_at: AtomicU64::new(0),
            checking: AtomicBool::new(false),
            started: Instant::now(),
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

    /// Admit one request of the key `limiter`: in Redis, or by the key's local
    /// buckets while Redis does not answer (or when its limits are not shared).
    pub async fn admit(
        self: &Arc<Self>,
        limiter: &KeyLimiter,
        is_submit: bool,
    ) -> Result<(Option<RateHeaders>, Option<InProgress>), LimitExceeded> {
        let Some(fleet) = limiter.fleet() else {
            return Self::local(limiter, is_submit);
        };
        if self.down.load(Ordering::Relaxed) {
            self.recheck_later();
            return self.alone(limiter, is_submit);
        }
        let id = self.next_lease.fetch_add(1, Ordering::Relaxed);
        // A lease only when the key has a cap on requests in progress.
        let name: Arc<str> = match fleet.max_concurrent {
            0 => Arc::from(""),
            _ => format!("{}:{id}", self.replica).into(),
        };
        let mut conn = self.conn();
        let submit = if is_submit { fleet.submit } else { (0.0, 0) };
        let mut call = self.admit.prepare_invoke();
        call.key(&fleet.rate_key)
            .key(&fleet.submit_key)
            .key(&*fleet.slots_key)
            .arg(fleet.rate.0)
            .arg(fleet.rate.1)
            .arg(submit.0)
            .arg(submit.1)
            .arg(fleet.max_concurrent)
            .arg(u64::try_from(self.settings.lease.as_millis()).unwrap_or(u64::MAX))
            .arg(&*name);
        // Leases of requests that ended on this thread go with this call (one round
        // trip less each); lost with it if Redis does not answer: then they expire.
        let ended = std::mem::take(&mut *lock(&self.slot().ended));
        for lease in &ended {
            call.key(&*lease.key).arg(&*lease.name);
        }
        let answer = tokio::time::timeout(
            self.settings.timeout,
            call.invoke_async::<Vec<i64>>(&mut conn),
        )
        .await;
        let answer = match answer {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => {
                self.unreachable(&e.to_string());
                return self.alone(limiter, is_submit);
            }
            Err(_) => {
                self.unreachable("no answer within shared_timeout_ms");
                return self.alone(limiter, is_submit);
            }
        };
        let headers = fleet.read(&answer)?;
        let lease = (fleet.max_concurrent > 0).then(|| {
            let key = fleet.slots_key.clone();
            let slot = crate::workers::slot(self.slots.len());
            lock(&self.slots[slot].held).insert(id, Held { key, name });
            InProgress::Shared {
                _lease: SharedLease {
                    limits: self.clone(),
                    id,
                    slot,
                },
            }
        });
        Ok((headers, lease))
    }

    /// Decided alone, Redis being away: counted.
    fn alone(
        &self,
        limiter: &KeyLimiter,
        is_submit: bool,
    ) -> Result<(Option<RateHeaders>, Option<InProgress>), LimitExceeded> {
        self.metrics.decided_locally.inc();
        Self::local(limiter, is_submit)
    }

    /// The key's limits in this replica alone (also a key without fleet limits).
    pub fn local(
        limiter: &KeyLimiter,
        is_submit: bool,
    ) -> Result<(Option<RateHeaders>, Option<InProgress>), LimitExceeded> {
        limiter
            .admit(is_submit)
            .map(|(h, permit)| (h, permit.map(|_permit| InProgress::Local { _permit })))
    }

    /// Redis did not answer: decide alone until a check finds it again. Every
    /// thread's connection is made anew (a silent one never recovers by itself); each
    /// connects on its thread's next use.
    fn unreachable(&self, why: &str) {
        if self.down.swap(true, Ordering::Relaxed) {
            return;
        }
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

    /// A request ended: its lease is removed with the next admission on this thread,
    /// or, when none comes first, by a call of its own just after; when Redis cannot
    /// be told, the lease expires.
    fn release(self: &Arc<Self>, id: u64, slot: usize) {
        let Some(held) = lock(&self.slots[slot].held).remove(&id) else {
            return;
        };
        if self.down.load(Ordering::Relaxed) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
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
            let slot = &this.slots[slot];
            let ended = std::mem::take(&mut *lock(&slot.ended));
            if ended.is_empty() {
                return;
            }
            let mut pipe = redis::pipe();
            for lease in &ended {
                pipe.cmd("ZREM").arg(&*lease.key).arg(&*lease.name).ignore();
            }
            let mut conn = ConnectionManager::clone(&slot.conn.load());
            let removed = pipe.exec_async(&mut conn);
            let _ = tokio::time::timeout(this.settings.timeout.max(CONNECT_TIMEOUT), removed).await;
        });
    }

    /// Renew this replica's leases every third of a lease, for as long as the process
    /// runs.
    pub async fn keep_leases(self: Arc<Self>) {
        let every = self.settings.lease / 3;
        loop {
            tokio::time::sleep(every).await;
            self.renew_all().await;
        }
    }

    async fn renew_all(&self) {
        let held: Vec<(Arc<str>, Arc<str>)> = self
            .slots
            .iter()
            .flat_map(|slot| {
                let held = lock(&slot.held);
                held.values()
                    .map(|h| (h.key.clone(), h.name.clone()))
                    .collect::<Vec<_>>()
            })
            .collect();
        let lease_ms = u64::try_from(self.settings.lease.as_millis()).unwrap_or(u64::MAX);
        let mut conn = self.conn();
        for batch in held.chunks(RENEW_BATCH) {
            let mut call = self.renew.prepare_invoke();
            call.arg(lease_ms);
            for (key, name) in batch {
                call.key(&**key).arg(&**name);
            }
            let renewed = call.invoke_async::<i64>(&mut conn);
            if !matches!(
                tokio::time::timeout(CONNECT_TIMEOUT, renewed).await,
                Ok(Ok(_))
            ) {
                // Redis is away: the leases expire there, and requests meanwhile go
                // by the local limits.
                return;
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
        let fleet = FleetLimits::new("k", Some((10.0, 10)), Some((1.0, 2)), 4);
        let h = fleet.read(&[0, 10, 9, 100_000]).ok().unwrap().unwrap();
        assert_eq!(h, RateHeaders::new(10, 9, Duration::from_millis(100)));
        assert!(fleet.read(&[0, 0, 0, 0]).ok().unwrap().is_none());
        match fleet.read(&[2, 2, 250_000]) {
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
        assert!(matches!(fleet.read(&[3]), Err(LimitExceeded::Busy(4))));
    }
}
