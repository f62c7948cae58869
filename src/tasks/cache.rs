//! Task results cache (moka): finished results are kept long, unfinished ones for a
//! short poll interval, and concurrent queries of one task share one upstream call.
//!
//! Entries are weighed by the bytes they hold (URLs and messages come from upstreams),
//! so the cache is bounded in bytes as well as in entries: an entry weighs at least
//! `bytes / entries`, so neither bound is ever passed.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use moka::Expiry;
use moka::future::Cache;
use prometheus_client::metrics::counter::Counter;

use crate::tasks::TaskState;

/// Cache hits and misses; the metrics registry holds clones of the same counters.
#[derive(Debug, Default, Clone)]
pub struct CacheStats {
    pub hits: Counter,
    pub misses: Counter,
}

#[derive(Clone)]
struct Entry {
    state: Arc<TaskState>,
    /// A finished state whose end the ledger could not be given (its write failed):
    /// kept only as long as an unfinished one, so that the next look asks the
    /// provider again and the end is written again.
    unrecorded: bool,
}

struct ByStatus {
    terminal: Duration,
    unfinished: Duration,
}

impl Expiry<Arc<str>, Entry> for ByStatus {
    fn expire_after_create(
        &self,
        _key: &Arc<str>,
        value: &Entry,
        _now: Instant,
    ) -> Option<Duration> {
        Some(if value.state.status.is_terminal() && !value.unrecorded {
            self.terminal
        } else {
            self.unfinished
        })
    }
}

/// How much the cache may hold.
#[derive(Debug, Clone, Copy)]
pub struct CacheLimits {
    /// Entries at most.
    pub entries: u64,
    /// Bytes at most (keys, URLs, messages and a fixed overhead per entry).
    pub bytes: u64,
}

/// What an entry costs beyond its strings: the key's and the state's allocations,
/// moka's own bookkeeping.
const ENTRY_OVERHEAD: usize = 256;

/// The bytes an entry holds (the room allocated, not only what is used).
pub fn weight(key: &str, state: &TaskState) -> usize {
    let error = state
        .error
        .as_ref()
        .map_or(0, |e| e.code.capacity() + e.message.capacity());
    let urls: usize = state.urls.iter().map(String::capacity).sum::<usize>()
        + state.urls.capacity() * std::mem::size_of::<String>();
    ENTRY_OVERHEAD + key.len() + urls + error
}

/// Results by task (provider + upstream id).
pub struct TaskCache {
    cache: Cache<Arc<str>, Entry>,
    pub stats: CacheStats,
}

impl TaskCache {
    pub fn new(
        limits: CacheLimits,
        terminal_ttl: Duration,
        poll_ttl: Duration,
        stats: CacheStats,
    ) -> Self {
        let floor = (limits.bytes / limits.entries.max(1)).max(1);
        Self {
            cache: Cache::builder()
                .max_capacity(limits.bytes)
                .weigher(move |key: &Arc<str>, entry: &Entry| {
                    let w = (weight(key, &entry.state) as u64).max(floor);
                    u32::try_from(w).unwrap_or(u32::MAX)
                })
                .expire_after(ByStatus {
                    terminal: terminal_ttl,
                    unfinished: poll_ttl,
                })
                .build(),
            stats,
        }
    }

    /// Cache key of a task: its provider and upstream id, which no two tasks share.
    pub fn key(provider: &str, upstream_id: &str) -> Arc<str> {
        let mut k = String::with_capacity(provider.len() + 1 + upstream_id.len());
        k.push_str(provider);
        k.push('\0');
        k.push_str(upstream_id);
        k.into()
    }

    /// Bytes held now, as weighed (after pending evictions ran).
    pub async fn weighted_size(&self) -> u64 {
        self.cache.run_pending_tasks().await;
        self.cache.weighted_size()
    }

    /// Forget every result (after a reload changed how answers are read).
    pub fn invalidate_all(&self) {
        self.cache.invalidate_all();
    }

    /// The cached state, if any, but for a finished one the ledger lacks; never
    /// fetches.
    pub async fn peek(&self, key: &Arc<str>) -> Option<Arc<TaskState>> {
        let entry = self.cache.get(key).await?;
        (!entry.unrecorded).then_some(entry.state)
    }

    /// Forget what is kept for `key`: the next look asks the provider.
    pub async fn forget(&self, key: &Arc<str>) {
        self.cache.invalidate(key).await;
    }

    /// Keep `state` for `key`, in place of what was kept (a state the gateway itself
    /// decided: a task it cancelled; or a finished one a tracker's look found);
    /// `recorded`: whether the ledger has it, when it is finished.
    pub async fn put(&self, key: Arc<str>, state: TaskState, recorded: bool) -> Arc<TaskState> {
        let state = Arc::new(state.compact());
        let entry = Entry {
            state: state.clone(),
            unrecorded: !recorded,
        };
        self.cache.insert(key, entry).await;
        state
    }

    /// The cached state, or the result of `fetch` (run once for concurrent callers),
    /// with whether the ledger has it when it is finished (`fetch` says). Errors are
    /// not cached: the next query asks the upstream again. `fetch` makes its future
    /// only on a miss, so a hit never carries it.
    pub async fn get_or_fetch<F, Fut, E>(
        &self,
        key: Arc<str>,
        fetch: F,
    ) -> Result<(Arc<TaskState>, bool), E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<(TaskState, bool), E>>,
        E: Clone + Send + Sync + 'static,
    {
        if let Some(entry) = self.cache.get(&key).await {
            self.stats.hits.inc();
            return Ok((entry.state, !entry.unrecorded));
        }
        let ran = std::sync::atomic::AtomicBool::new(false);
        // Boxed: moka's coalescing future is several KiB, and a hit (above) should
        // not make every query's future that large.
        let result = Box::pin(self.cache.try_get_with(key, async {
            ran.store(true, Ordering::Relaxed);
            // Whoever produced the state, the cache keeps its content, not the
            // room it was built in.
            fetch().await.map(|(state, recorded)| Entry {
                state: Arc::new(state.compact()),
                unrecorded: !recorded,
            })
        }))
        .await;
        // A caller that waited on another's fetch was served without upstream traffic.
        let counter = if ran.load(Ordering::Relaxed) {
            &self.stats.misses
        } else {
            &self.stats.hits
        };
        counter.inc();
        result
            .map(|e| (e.state, !e.unrecorded))
            .map_err(|e| (*e).clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::TaskStatus;
    use std::sync::atomic::AtomicUsize;

    const LIMITS: CacheLimits = CacheLimits {
        entries: 100,
        bytes: 1 << 20,
    };

    fn state(status: TaskStatus) -> TaskState {
        TaskState {
            status,
            progress: None,
            urls: vec![],
            error: None,
        }
    }

    #[tokio::test]
    async fn concurrent_queries_share_one_fetch() {
        let cache = TaskCache::new(
            LIMITS,
            Duration::from_secs(60),
            Duration::from_secs(1),
            CacheStats::default(),
        );
        let calls = AtomicUsize::new(0);
        let fetch = || async {
            calls.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(50)).await;
            Ok::<_, String>((state(TaskStatus::Processing), true))
        };
        let key = TaskCache::key("p", "1");
        let results =
            futures_util::future::join_all((0..20).map(|_| cache.get_or_fetch(key.clone(), fetch)))
                .await;
        assert!(
            results
                .iter()
                .all(|r| r.as_ref().unwrap().0.status == TaskStatus::Processing)
        );
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(cache.stats.misses.get(), 1);
        assert_eq!(cache.stats.hits.get(), 19);
    }

    #[tokio::test]
    async fn unfinished_results_expire_and_finished_stay() {
        let cache = TaskCache::new(
            LIMITS,
            Duration::from_secs(60),
            Duration::from_millis(30),
            CacheStats::default(),
        );
        let calls = AtomicUsize::new(0);
        let get = |key: &'static str, s: TaskStatus, recorded: bool| {
            let key = TaskCache::key("p", key);
            let calls = &calls;
            let cache = &cache;
            async move {
                cache
                    .get_or_fetch(key, || async move {
                        calls.fetch_add(1, Ordering::SeqCst);
                        Ok::<_, String>((state(s), recorded))
                    })
                    .await
                    .unwrap()
            }
        };
        get("a", TaskStatus::Queued, true).await;
        get("b", TaskStatus::Completed, true).await;
        // Finished, but the ledger could not be given its end: kept no longer than
        // an unfinished state, and not shown to a tracker's look at all.
        get("c", TaskStatus::Failed, false).await;
        assert!(cache.peek(&TaskCache::key("p", "c")).await.is_none());
        tokio::time::sleep(Duration::from_millis(80)).await;
        get("a", TaskStatus::Queued, true).await;
        get("b", TaskStatus::Completed, true).await;
        let (_, recorded) = get("c", TaskStatus::Failed, true).await;
        assert!(recorded);
        assert_eq!(
            calls.load(Ordering::SeqCst),
            5,
            "a and c fetched twice, b once"
        );
    }

    /// An upstream that answers with the largest results allowed cannot make the cache
    /// hold more than its bytes, nor more than its entries.
    #[tokio::test]
    async fn bounded_in_bytes_and_in_entries() {
        let limits = CacheLimits {
            entries: 1000,
            bytes: 2 << 20,
        };
        let cache = TaskCache::new(
            limits,
            Duration::from_secs(3600),
            Duration::from_secs(3600),
            CacheStats::default(),
        );
        let big = TaskState {
            status: TaskStatus::Completed,
            progress: None,
            urls: vec!["u".repeat(8 * 1024); 32],
            error: None,
        };
        let one = weight("p\0id-0000", &big) as u64;
        for n in 0..200 {
            let key = TaskCache::key("p", &format!("id-{n:04}"));
            let state = big.clone();
            cache
                .get_or_fetch(key, || async { Ok::<_, String>((state, true)) })
                .await
                .unwrap();
        }
        let held = cache.weighted_size().await;
        assert!(held <= limits.bytes, "{held} bytes held");
        assert!(held >= limits.bytes - one, "the cache is used: {held}");
        // Small entries: the entry bound holds.
        let small = TaskCache::new(
            limits,
            Duration::from_secs(60),
            Duration::from_secs(60),
            CacheStats::default(),
        );
        for n in 0..3000 {
            let key = TaskCache::key("p", &format!("{n}"));
            small
                .get_or_fetch(key, || async {
                    Ok::<_, String>((state(TaskStatus::Failed), true))
                })
                .await
                .unwrap();
        }
        small.cache.run_pending_tasks().await;
        assert!(small.cache.entry_count() <= limits.entries);
    }

    /// A state built in the room of a hostile answer (a vector allocated for 100,000
    /// URLs, strings with room for 64 KiB each) is kept at the size of what it holds.
    #[tokio::test]
    async fn entries_keep_their_content_not_the_room_it_was_built_in() {
        let cache = TaskCache::new(
            LIMITS,
            Duration::from_secs(60),
            Duration::from_secs(60),
            CacheStats::default(),
        );
        let roomy = |text: &str| {
            let mut s = String::with_capacity(64 * 1024);
            s.push_str(text);
            s
        };
        let mut urls = Vec::with_capacity(100_000);
        urls.extend((0..16).map(|n| roomy(&format!("https://cdn.example/{n}.mp4"))));
        let state = TaskState {
            status: TaskStatus::Completed,
            progress: Some(100),
            urls,
            error: Some(crate::tasks::TaskError {
                code: roomy("nsfw"),
                message: roomy("refused"),
            }),
        };
        assert!(weight("p\0big", &state) > 1 << 20, "the room is weighed");
        let key = TaskCache::key("p", "big");
        cache
            .get_or_fetch(key.clone(), || async { Ok::<_, String>((state, true)) })
            .await
            .unwrap();
        let kept = cache.peek(&key).await.expect("kept");
        assert_eq!(kept.urls.len(), 16);
        assert!(kept.urls.capacity() <= 16, "{}", kept.urls.capacity());
        let held = weight(&key, &kept);
        assert!(held < 2048, "an entry of 16 short URLs weighs {held} bytes");
    }

    #[tokio::test]
    async fn errors_are_not_cached() {
        let cache = TaskCache::new(
            LIMITS,
            Duration::from_secs(60),
            Duration::from_secs(60),
            CacheStats::default(),
        );
        let key = TaskCache::key("p", "x");
        let e = cache
            .get_or_fetch(key.clone(), || async { Err("timed out".to_string()) })
            .await
            .unwrap_err();
        assert_eq!(e, "timed out");
        let ok = cache
            .get_or_fetch(key, || async {
                Ok::<_, String>((state(TaskStatus::Completed), true))
            })
            .await
            .unwrap();
        assert_eq!(ok.0.status, TaskStatus::Completed);
    }
}
