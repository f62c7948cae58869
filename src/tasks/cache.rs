//! Task results cache (moka): finished results are kept long, unfinished ones for a
//! short poll interval, and concurrent queries of one task share one upstream call.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use moka::Expiry;
use moka::future::Cache;
use prometheus_client::metrics::counter::Counter;

use crate::error::ApiError;
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
        Some(if value.state.status.is_terminal() {
            self.terminal
        } else {
            self.unfinished
        })
    }
}

/// Results by task (provider + upstream id).
pub struct TaskCache {
    cache: Cache<Arc<str>, Entry>,
    pub stats: CacheStats,
}

impl TaskCache {
    pub fn new(
        capacity: u64,
        terminal_ttl: Duration,
        poll_ttl: Duration,
        stats: CacheStats,
    ) -> Self {
        Self {
            cache: Cache::builder()
                .max_capacity(capacity)
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

    /// Forget every result (after a reload changed how answers are read).
    pub fn invalidate_all(&self) {
        self.cache.invalidate_all();
    }

    /// The cached state, if any; never fetches.
    pub async fn peek(&self, key: &Arc<str>) -> Option<Arc<TaskState>> {
        self.cache.get(key).await.map(|e| e.state)
    }

    /// The cached state, or the result of `fetch` (run once for concurrent callers).
    /// Errors are not cached: the next query asks the upstream again.
    pub async fn get_or_fetch<F>(&self, key: Arc<str>, fetch: F) -> Result<Arc<TaskState>, ApiError>
    where
        F: Future<Output = Result<TaskState, ApiError>>,
    {
        if let Some(entry) = self.cache.get(&key).await {
            self.stats.hits.inc();
            return Ok(entry.state);
        }
        let ran = std::sync::atomic::AtomicBool::new(false);
        let result = self
            .cache
            .try_get_with(key, async {
                ran.store(true, Ordering::Relaxed);
                fetch.await.map(|state| Entry {
                    state: Arc::new(state),
                })
            })
            .await;
        // A caller that waited on another's fetch was served without upstream traffic.
        let counter = if ran.load(Ordering::Relaxed) {
            &self.stats.misses
        } else {
            &self.stats.hits
        };
        counter.inc();
        result.map(|e| e.state).map_err(|e| (*e).clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::TaskStatus;
    use std::sync::atomic::AtomicUsize;

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
            100,
            Duration::from_secs(60),
            Duration::from_secs(1),
            CacheStats::default(),
        );
        let calls = AtomicUsize::new(0);
        let fetch = || async {
            calls.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(50)).await;
            Ok(state(TaskStatus::Processing))
        };
        let key = TaskCache::key("p", "1");
        let results = futures_util::future::join_all(
            (0..20).map(|_| cache.get_or_fetch(key.clone(), fetch())),
        )
        .await;
        assert!(
            results
                .iter()
                .all(|r| r.as_ref().unwrap().status == TaskStatus::Processing)
        );
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(cache.stats.misses.get(), 1);
        assert_eq!(cache.stats.hits.get(), 19);
    }

    #[tokio::test]
    async fn unfinished_results_expire_and_finished_stay() {
        let cache = TaskCache::new(
            100,
            Duration::from_secs(60),
            Duration::from_millis(30),
            CacheStats::default(),
        );
        let calls = AtomicUsize::new(0);
        let get = |key: &'static str, s: TaskStatus| {
            let key = TaskCache::key("p", key);
            let calls = &calls;
            let cache = &cache;
            async move {
                cache
                    .get_or_fetch(key, async move {
                        calls.fetch_add(1, Ordering::SeqCst);
                        Ok(state(s))
                    })
                    .await
                    .unwrap()
            }
        };
        get("a", TaskStatus::Queued).await;
        get("b", TaskStatus::Completed).await;
        tokio::time::sleep(Duration::from_millis(80)).await;
        get("a", TaskStatus::Queued).await;
        get("b", TaskStatus::Completed).await;
        assert_eq!(calls.load(Ordering::SeqCst), 3, "a fetched twice, b once");
    }

    #[tokio::test]
    async fn errors_are_not_cached() {
        let cache = TaskCache::new(
            100,
            Duration::from_secs(60),
            Duration::from_secs(60),
            CacheStats::default(),
        );
        let key = TaskCache::key("p", "x");
        let e = cache
            .get_or_fetch(key.clone(), async {
                Err(ApiError::upstream_timeout("query"))
            })
            .await
            .unwrap_err();
        assert_eq!(e.status, 504);
        let ok = cache
            .get_or_fetch(key, async { Ok(state(TaskStatus::Completed)) })
            .await
            .unwrap();
        assert_eq!(ok.status, TaskStatus::Completed);
    }
}
