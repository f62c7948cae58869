//! The gateway's shared state and its tower stack.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use tower::Layer;
use tower::ServiceBuilder;

use crate::auth::Authenticate;
use crate::body::TimedBody;
use crate::body::{ResponseFuture, full};
use crate::cache::TaskCache;
use crate::error::ApiError;
use crate::handlers::Dispatch;
use crate::key_limits::KeyLimit;
use crate::metrics::Metrics;
use crate::request_log::RequestLog;
use crate::simulator;
use crate::snapshot::{
    LoadContext, LoadError, SIMULATOR_URL, SecretFileMode, Snapshot, read_routes,
};
use crate::stack::{Next, Step, StepLayer};

/// State shared by every connection: the current config snapshot, the results cache,
/// the metrics, and whether the gateway is draining.
pub struct Gateway {
    config_path: PathBuf,
    snapshot: ArcSwap<Snapshot>,
    pub cache: TaskCache,
    pub metrics: Metrics,
    draining: AtomicBool,
    simulator_addr: Option<SocketAddr>,
    /// SIGHUP and the file watch may fire together; one reload at a time, so that
    /// limiter state inherited by one is not dropped by the other.
    reloading: std::sync::Mutex<()>,
}

impl Gateway {
    /// Load the routes file, start the simulator if a provider uses it, and build
    /// the gateway. Errors name the file, the key and the problem.
    pub async fn start(config_path: &Path) -> Result<Arc<Self>, LoadError> {
        let file = read_routes(config_path)?;
        let simulator_addr = if file.providers.values().any(|p| p.base_url == SIMULATOR_URL) {
            let addr = simulator::start(&file.simulator)
                .await
                .map_err(|e| LoadError {
                    file: config_path.to_path_buf(),
                    problems: vec![(
                        "simulator.listen".into(),
                        format!("cannot start the simulated provider: {e}"),
                    )],
                })?;
            tracing::info!(%addr, "built-in simulated provider listening");
            Some(addr)
        } else {
            None
        };
        let ctx = LoadContext {
            simulator_addr,
            secret_file: SecretFileMode::Create,
        };
        let snapshot = Snapshot::build(file, config_path, &ctx)?;
        let tasks = &snapshot.tasks;
        let cache = TaskCache::new(
            tasks.cache_capacity,
            Duration::from_millis(tasks.terminal_cache_ttl_ms),
            Duration::from_millis(tasks.poll_cache_ttl_ms),
        );
        let metrics = Metrics::new(&cache.stats);
        Ok(Arc::new(Self {
            config_path: config_path.to_path_buf(),
            snapshot: ArcSwap::from_pointee(snapshot),
            cache,
            metrics,
            draining: AtomicBool::new(false),
            simulator_addr,
            reloading: std::sync::Mutex::new(()),
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
        };
        let mut next = Snapshot::load(&self.config_path, &ctx)?;
        if next.uses_simulator && self.simulator_addr.is_none() {
            return Err(LoadError {
                file: self.config_path.clone(),
                problems: vec![(
                    "providers".into(),
                    format!("`{SIMULATOR_URL}` is started only at startup: restart to use it"),
                )],
            });
        }
        let current = self.snapshot();
        next.limits.inherit(&current.limits);
        let (old, new) = (&current.server, &next.server);
        let tls_listen = |s: &crate::config::ServerConfig| s.tls.as_ref().map(|t| t.listen);
        if old.listen != new.listen
            || tls_listen(old) != tls_listen(new)
            || old.metrics_listen != new.metrics_listen
            || old.max_connections != new.max_connections
        {
            tracing::warn!(
                "listener addresses and server.max_connections apply at startup only; restart to change them"
            );
        }
        self.snapshot.store(Arc::new(next));
        // Cached results were read by the old providers' programs; a fixed
        // status_map or urls program must show at once, not in an hour.
        self.cache.invalidate_all();
        Ok(())
    }

    pub fn config_path(&self) -> &Path {
        &self.config_path
    }

    /// Stop reporting ready: load balancers take the instance out while it drains.
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }
}

/// The request path as a tower stack, outermost first:
/// request id + tracing → `/metrics` (unless on its own listener) → Bearer auth →
/// per-key limits → body read deadline → dispatch (route, body, model, validation,
/// provider, normalisation, sealed id).
pub fn service<B>(gateway: Arc<Gateway>) -> impl Next<B>
where
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<crate::body::BoxError>,
{
    let metrics_here = gateway.snapshot().server.metrics_listen.is_none();
    ServiceBuilder::new()
        .layer(StepLayer(RequestLog::new(gateway.clone())))
        .layer(StepLayer(MetricsEndpoint {
            gateway: metrics_here.then(|| gateway.clone()),
        }))
        .layer(StepLayer(Authenticate))
        .layer(StepLayer(KeyLimit::new(gateway.clone())))
        .map_request(|req: Request<B>| {
            let timeout = req
                .extensions()
                .get::<Arc<Snapshot>>()
                .map_or(30_000, |s| s.server.body_read_timeout_ms);
            req.map(|body| TimedBody::new(body, Duration::from_millis(timeout)))
        })
        .service(Dispatch::new(gateway))
}

/// The admin listener's service: `/metrics` and `/healthz`, nothing else.
pub fn admin_service<B>(gateway: Arc<Gateway>) -> impl Next<B>
where
    B: Send + 'static,
{
    let rest = tower::service_fn(|req: Request<B>| async move {
        Ok::<_, Infallible>(match req.uri().path() {
            "/healthz" => crate::handlers::healthy(),
            _ => ApiError::path_not_found().into_response(),
        })
    });
    StepLayer(MetricsEndpoint {
        gateway: Some(gateway),
    })
    .layer(rest)
}

/// Answers `GET /metrics` (no client auth) when it holds the gateway.
#[derive(Clone)]
pub struct MetricsEndpoint {
    gateway: Option<Arc<Gateway>>,
}

impl Step for MetricsEndpoint {
    fn call<S: Next<B>, B: Send + 'static>(&self, req: Request<B>, mut next: S) -> ResponseFuture {
        match &self.gateway {
            Some(gateway) if req.uri().path() == "/metrics" => {
                let resp = if req.method() == Method::GET || req.method() == Method::HEAD {
                    let mut resp = Response::new(full(gateway.metrics.render()));
                    *resp.status_mut() = StatusCode::OK;
                    resp.headers_mut().insert(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static(crate::metrics::CONTENT_TYPE),
                    );
                    resp
                } else {
                    ApiError::method_not_allowed("GET, HEAD").into_response()
                };
                Box::pin(async move { Ok(resp) })
            }
            _ => Box::pin(next.call(req)),
        }
    }
}
