//! The gateway: the state every connection shares (the current configuration
//! snapshot, the task service, the metrics, whether it is draining), how it is
//! reloaded ([`reload`]), and the background jobs that go through the task service
//! (the tracker, the webhook deliverer, the ledger sweep). It knows nothing of HTTP:
//! `api` serves requests with it and `edge` runs connections for it.

pub mod copies;
pub mod deliveries;
pub mod reload;
pub mod retention;
mod rounds;
mod shares;
pub mod sweep;
pub mod tracker;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::watch;

use crate::access::SharedLimits;
use crate::config::{LoadError, RoutesFile};
use crate::edge;
use crate::error::ApiError;
use crate::lifecycle::TaskService;
use crate::metrics::Metrics;
use crate::snapshot::{LoadContext, SIMULATOR_URL, SecretFileMode, Snapshot};
use crate::tasks::ledger::Ledger;
use crate::tasks::{CacheStats, TaskCache};

/// State shared by every connection: the current config snapshot, the task service,
/// the metrics, and whether the gateway is draining.
pub struct Gateway {
    config_path: PathBuf,
    snapshot: ArcSwap<Snapshot>,
    /// Every task's lifecycle: submit, lookup, the terminal event, the ledger.
    pub tasks: TaskService,
    pub metrics: Metrics,
    /// True once a stop was requested: `/readyz` answers 503, long-polls return.
    stopping: watch::Sender<bool>,
    simulator_addr: Option<SocketAddr>,
    /// SIGHUP and the file watch may fire together; one reload at a time, so that
    /// limiter state inherited by one is not dropped by the other.
    reloading: std::sync::Mutex<()>,
    /// This replica's name on the ledger leases it takes (tracker, webhooks).
    pub replica: String,
    /// Per-key limits held with the other replicas in Redis (`[limits] shared`),
    /// opened at start.
    pub shared_limits: Option<Arc<SharedLimits>>,
}

impl Gateway {
    /// A ledger read of a request that failed: counted, logged with `what` was read,
    /// and the client's 503.
    pub fn ledger_failed(&self, what: &str, e: &crate::tasks::ledger::LedgerError) -> ApiError {
        self.metrics.ledger_errors.inc();
        tracing::warn!(error = %e, "ledger read failed: {what}");
        ApiError::ledger_unavailable()
    }

    /// Build the gateway from the routes `file` read from `config_path`;
    /// `simulator_addr` is where the built-in simulated provider listens, when the
    /// process started it. Errors name the file, the key and the problem.
    pub async fn start(
        config_path: &Path,
        file: RoutesFile,
        simulator_addr: Option<SocketAddr>,
    ) -> Result<Arc<Self>, LoadError> {
        let metrics = Metrics::new();
        let ctx = LoadContext {
            simulator_addr,
            secret_file: SecretFileMode::Create,
            unmapped_statuses: metrics.unmapped_statuses.clone(),
        };
        let snapshot = Snapshot::build(file, config_path, &ctx)?;
        let tasks = &snapshot.tasks;
        let cache = TaskCache::new(
            crate::tasks::CacheLimits {
                entries: tasks.cache_capacity,
                bytes: tasks.cache_capacity_bytes,
            },
            Duration::from_millis(tasks.terminal_cache_ttl_ms),
            Duration::from_millis(tasks.poll_cache_ttl_ms),
            CacheStats {
                hits: metrics.cache_hits.clone(),
                misses: metrics.cache_misses.clone(),
            },
        );
        let ledger = Ledger::open(&snapshot.ledger_url, snapshot.ledger.max_connections)
            .await
            .map_err(|e| {
                let mut problems = crate::config::Problems::default();
                problems.push("ledger.url", e);
                problems.into_error(config_path)
            })?;
        let storage = crate::storage::Storage::open(&snapshot.storage_url).map_err(|e| {
            let mut problems = crate::config::Problems::default();
            problems.push("storage.url", e);
            problems.into_error(config_path)
        })?;
        let tasks = TaskService::new(
            cache,
            ledger.map(Arc::new),
            storage,
            metrics.ledger_errors.clone(),
            metrics.spend.clone(),
            metrics.waiters.clone(),
        );
        let replica = replica_name();
        let shared_limits = match &snapshot.shared_limits {
            Some(settings) => {
                let opened =
                    SharedLimits::new(settings.clone(), &replica, metrics.shared_limits.clone());
                Some(opened.map_err(|e| {
                    let mut problems = crate::config::Problems::default();
                    problems.push("limits.shared", e);
                    problems.into_error(config_path)
                })?)
            }
            None => None,
        };
        Ok(Arc::new(Self {
            config_path: config_path.to_path_buf(),
            snapshot: ArcSwap::from_pointee(snapshot),
            tasks,
            metrics,
            stopping: watch::Sender::new(false),
            simulator_addr,
            reloading: std::sync::Mutex::new(()),
            replica,
            shared_limits,
        }))
    }

    /// The current snapshot; a request keeps the one it started with.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.load_full()
    }

    /// Read the routes file again and, if it is valid, swap it in as one snapshot.
    /// An invalid file changes nothing: the error says why. Requests in progress
    /// finish on the snapshot they started with; sealed task ids stay valid as long
    /// as the task secret and the provider names are kept.
    pub fn reload(&self) -> Result<(), LoadError> {
        let result = self.try_reload();
        self.metrics.reload(result.is_ok());
        result
    }

    fn try_reload(&self) -> Result<(), LoadError> {
        let _one_at_a_time = self
            .reloading
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let ctx = LoadContext {
            simulator_addr: self.simulator_addr,
            secret_file: SecretFileMode::MustExist,
            unmapped_statuses: self.metrics.unmapped_statuses.clone(),
        };
        let mut next = Snapshot::load(&self.config_path, &ctx)?;
        if next.uses_simulator && self.simulator_addr.is_none() {
            let mut problems = crate::config::Problems::default();
            problems.push(
                "providers",
                format!("`{SIMULATOR_URL}` is started only at startup: restart to use it"),
            );
            return Err(problems.into_error(&self.config_path));
        }
        let current = self.snapshot();
        next.limits.inherit(&current.limits);
        let (old, new) = (&current.server, &next.server);
        let tls_listen = |s: &crate::config::ServerConfig| s.tls.as_ref().map(|t| t.listen);
        if old.listen != new.listen
            || tls_listen(old) != tls_listen(new)
            || old.metrics_listen != new.metrics_listen
            || old.max_connections != new.max_connections
            || old.workers != new.workers
        {
            tracing::warn!(
                "listener addresses, server.max_connections and server.workers apply at startup only; restart to change them"
            );
        }
        // The key limiters of the file would follow the new `[limits] shared` while the
        // Redis client stays the one started with: refused, not half applied (turned
        // off, every replica would admit the fleet's limit; turned on, its share).
        let server = |s: &Snapshot| s.shared_limits.as_ref().map(|s| s.server().to_string());
        if server(&current) != server(&next) {
            let mut problems = crate::config::Problems::default();
            problems.push(
                "limits.shared",
                "applies at startup only: restart to change it (the file was not taken)",
            );
            return Err(problems.into_error(&self.config_path));
        }
        if current.ledger_url != next.ledger_url {
            tracing::warn!("ledger.url applies at startup only; restart to change it");
        }
        self.snapshot.store(Arc::new(next));
        // Cached results were read by the old providers' programs; a fixed
        // status_map or urls program must show at once, not in an hour.
        self.tasks.cache().invalidate_all();
        Ok(())
    }

    pub fn config_path(&self) -> &Path {
        &self.config_path
    }

    /// Stop reporting ready: load balancers take the instance out while it drains.
    pub fn start_draining(&self) {
        self.stopping.send_replace(true);
    }

    pub fn is_draining(&self) -> bool {
        *self.stopping.borrow()
    }

    /// Resolves once a stop was requested.
    pub async fn stopped(&self) {
        let mut stopping = self.stopping.subscribe();
        let _ = stopping.wait_for(|stop| *stop).await;
    }
}

impl edge::Host for Gateway {
    fn settings(&self) -> edge::Settings {
        self.snapshot().edge.clone()
    }

    fn start_draining(&self) {
        Gateway::start_draining(self);
    }

    fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

/// A replica's name on the leases it takes: random, per process.
fn replica_name() -> String {
    use ring::rand::SecureRandom;
    let mut raw = [0u8; 8];
    let _ = ring::rand::SystemRandom::new().fill(&mut raw);
    hex::encode(raw)
}
