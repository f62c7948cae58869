//! A gateway running in this process: what `mediagate serve` runs, and what
//! integration tests start in-process. Loading, the listeners, the file watch and the
//! serve loop are started here, in that order; signals stay with the caller.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::config::{LoadError, RoutesFile, read_routes};
use crate::edge::{Listeners, Services};
use crate::gateway::Gateway;
use crate::snapshot::SIMULATOR_URL;
use crate::workers::Workers;

/// How long a stop waits for the tracker to give its tasks back (and the ledger its
/// budget grants).
const GIVE_BACK_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Why the gateway did not start.
#[derive(Debug)]
pub enum StartError {
    /// The routes file does not load: every problem, with its key path.
    Config(LoadError),
    /// A listener could not be bound.
    Listen(SocketAddr, std::io::Error),
    /// The worker threads could not be started.
    Workers(std::io::Error),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Config(e) => write!(f, "{e}"),
            Self::Listen(addr, e) => write!(f, "cannot listen on {addr}: {e}"),
            Self::Workers(e) => write!(f, "cannot start the worker threads: {e}"),
        }
    }
}

impl std::error::Error for StartError {}

/// A started gateway. Dropping it stops accepting at once; [`Running::stop`] drains.
pub struct Running {
    /// The plain HTTP listener.
    pub addr: SocketAddr,
    /// The TLS listener, when `[server.tls]` is set.
    pub tls_addr: Option<SocketAddr>,
    /// The admin (metrics) listener, when `server.metrics_listen` is set.
    pub admin_addr: Option<SocketAddr>,
    gateway: Arc<Gateway>,
    stop: Option<oneshot::Sender<()>>,
    served: JoinHandle<std::io::Result<()>>,
    /// The tracker: once it has given its tasks back, the other replicas (or the next
    /// process) follow them at once rather than after its heartbeat expires.
    tracker: Option<JoinHandle<()>>,
    /// The threads connections are served on; they stop when this is dropped, after
    /// the drain and the submits in flight.
    _workers: Arc<Workers>,
}

/// Load `config`, bind every listener and serve until stopped. The listening
/// addresses are logged (the plain one last: once it is, every listener is up).
pub async fn start(config: &Path) -> Result<Running, StartError> {
    let file = read_routes(config).map_err(StartError::Config)?;
    let simulator_addr = start_simulator(config, &file)
        .await
        .map_err(StartError::Config)?;
    let gateway = Gateway::start(config, file, simulator_addr)
        .await
        .map_err(StartError::Config)?;
    let snapshot = gateway.snapshot();
    for name in &snapshot.demo_keys {
        tracing::warn!(
            key = %name,
            "demo API key enabled: its secret is published in the README; for local use only, remove it before exposing the gateway"
        );
    }
    for name in &snapshot.demo_webhook_secrets {
        tracing::warn!(
            key = %name,
            "demo webhook secret in use: it is published in the README; receivers cannot trust these webhooks"
        );
    }
    let listeners = Listeners::bind(&snapshot.server)
        .await
        .map_err(|(addr, e)| StartError::Listen(addr, e))?;
    let workers = match snapshot.server.workers {
        0 => crate::workers::default_count(),
        n => n,
    };
    let workers = Arc::new(Workers::start(workers).map_err(StartError::Workers)?);
    release_earlier_leases(&gateway).await;
    let tracker = start_background(&gateway, &workers);
    let local = |l: &tokio::net::TcpListener| l.local_addr().ok();
    let (addr, tls_addr, admin_addr) = (
        local(&listeners.plain).unwrap_or(snapshot.server.listen),
        listeners.tls.as_ref().and_then(local),
        listeners.admin.as_ref().and_then(local),
    );
    if let Some(addr) = admin_addr {
        tracing::info!(%addr, "metrics listener on http://{addr}/metrics");
    }
    if let Some(addr) = tls_addr {
        tracing::info!(%addr, "mediagate listening on https://{addr}");
    }
    tracing::info!(
        %addr,
        workers = workers.count(),
        models = snapshot.models.len(),
        providers = snapshot.providers.len(),
        "mediagate listening on http://{addr}"
    );
    drop(snapshot);
    let (stop, stopped) = oneshot::channel::<()>();
    let services = Services {
        main: crate::api::service(gateway.clone()),
        admin: crate::api::admin_service(gateway.clone()),
    };
    let served = tokio::spawn(crate::edge::serve(
        listeners,
        gateway.clone(),
        services,
        workers.clone(),
        async {
            let _ = stopped.await;
        },
    ));
    Ok(Running {
        addr,
        tls_addr,
        admin_addr,
        gateway,
        stop: Some(stop),
        served,
        tracker: Some(tracker),
        _workers: workers,
    })
}

/// A SQLite file is one gateway's (as the tracker's takeover assumes): what a killed
/// predecessor leased is let go before the copier and the deliverer look.
async fn release_earlier_leases(gateway: &Gateway) {
    if let Some(ledger) = gateway.tasks.ledger()
        && let Err(e) = ledger.release_earlier_leases().await
    {
        tracing::warn!(error = %e, "the copies and webhooks of the process before cannot be let go; they wait for their leases");
    }
}

/// The loops that run beside the requests, on this runtime; the tracker hands its
/// status requests to the `workers` (its handle: it is waited for at a stop).
fn start_background(gateway: &Arc<Gateway>, workers: &Workers) -> JoinHandle<()> {
    tokio::spawn(crate::gateway::reload::watch_files(gateway.clone()));
    tokio::spawn(crate::gateway::sweep::run(gateway.clone()));
    tokio::spawn(crate::gateway::retention::run(gateway.clone()));
    let handles = workers.handles().to_vec();
    let tracker = tokio::spawn(crate::gateway::tracker::run(gateway.clone(), handles));
    tokio::spawn(crate::gateway::deliveries::run(gateway.clone()));
    tokio::spawn(crate::gateway::copies::run(gateway.clone()));
    let looking = gateway.clone();
    tokio::spawn(async move {
        let stopped = looking.stopped();
        looking.tasks.look_for_changes_elsewhere(stopped).await;
    });
    if let Some(shared) = &gateway.shared_limits {
        tracing::info!(server = %shared.settings().server(), "per-key limits shared through Redis");
        // Not stopped by a drain: requests still in progress keep their leases.
        tokio::spawn(shared.clone().keep_leases());
    }
    tracker
}

impl Running {
    /// Read the routes file again, as SIGHUP does; the outcome is logged too.
    pub async fn reload(&self) -> Result<(), LoadError> {
        crate::gateway::reload::reload(&self.gateway).await
    }

    /// Stop as on SIGTERM: `/readyz` answers 503, the listeners close after
    /// `server.shutdown_delay_ms`, in-flight requests get `server.shutdown_grace_ms`.
    pub async fn stop(mut self) -> std::io::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let served = (&mut self.served)
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        self.finish_submits().await;
        self.give_back_held().await;
        if let Some(tracker) = self.tracker.take() {
            // Bounded: a ledger out of reach leaves the tasks to the heartbeat's expiry.
            let _ = tokio::time::timeout(GIVE_BACK_WAIT, tracker).await;
        }
        served
    }

    /// Submits already sent upstream run to their end (each bounded by its provider's
    /// submit timeout), so the ledger learns their outcome before the process exits.
    async fn finish_submits(&self) {
        let submits = self.gateway.tasks.submits();
        self.gateway.tasks.stop_submits();
        if !submits.is_empty() {
            tracing::info!(submits = submits.len(), "waiting for submits in flight");
        }
        submits.wait().await;
    }

    /// With every submit done, what the ledger held ahead of keys' budgets goes back:
    /// other replicas need not wait for it to expire. Bounded as the tracker's is.
    async fn give_back_held(&self) {
        let Some(ledger) = self.gateway.tasks.ledger() else {
            return;
        };
        match tokio::time::timeout(GIVE_BACK_WAIT, ledger.give_back_held()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "budget grants not given back; they expire"),
            Err(_) => tracing::warn!("budget grants not given back in time; they expire"),
        }
    }

    /// Serve until `signal` resolves, then stop as [`Running::stop`] does.
    pub async fn until(self, signal: impl Future<Output = ()>) -> std::io::Result<()> {
        signal.await;
        self.stop().await
    }

    /// The shared state (snapshot, cache, metrics), for the caller's own triggers.
    pub fn gateway(&self) -> &Arc<Gateway> {
        &self.gateway
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.served.abort();
    }
}

/// The built-in simulated provider, when a provider of the file uses it: started once
/// per process, on loopback (a reload cannot start it).
async fn start_simulator(
    config: &Path,
    file: &RoutesFile,
) -> Result<Option<SocketAddr>, LoadError> {
    if !file.providers.values().any(|p| p.base_url == SIMULATOR_URL) {
        return Ok(None);
    }
    let addr = crate::simulator::start(&file.simulator)
        .await
        .map_err(|e| {
            let mut problems = crate::config::Problems::default();
            let msg = format!("cannot start the simulated provider: {e}");
            problems.push("simulator.listen", msg);
            problems.into_error(config)
        })?;
    tracing::info!(%addr, "built-in simulated provider listening");
    Ok(Some(addr))
}
