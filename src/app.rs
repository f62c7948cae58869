//! The gateway's shared state and its tower stack.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use http::{Request, Response};
use tower::{Service, ServiceBuilder};

use crate::auth::AuthenticateLayer;
use crate::body::ResponseBody;
use crate::cache::TaskCache;
use crate::handlers::Dispatch;
use crate::request_log::RequestLogLayer;
use crate::simulator;
use crate::snapshot::{LoadContext, LoadError, SIMULATOR_URL, Snapshot, read_routes};

/// State shared by every connection: the current config snapshot, the results cache,
/// and whether the gateway is draining.
pub struct Gateway {
    config_path: PathBuf,
    snapshot: ArcSwap<Snapshot>,
    pub cache: TaskCache,
    draining: AtomicBool,
    simulator_addr: Option<SocketAddr>,
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
            create_files: true,
        };
        let snapshot = Snapshot::build(file, config_path, &ctx)?;
        let tasks = &snapshot.tasks;
        let cache = TaskCache::new(
            tasks.cache_capacity,
            Duration::from_millis(tasks.terminal_cache_ttl_ms),
            Duration::from_millis(tasks.poll_cache_ttl_ms),
        );
        Ok(Arc::new(Self {
            config_path: config_path.to_path_buf(),
            snapshot: ArcSwap::from_pointee(snapshot),
            cache,
            draining: AtomicBool::new(false),
            simulator_addr,
        }))
    }

    /// The current snapshot; a request keeps the one it started with.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.load_full()
    }

    pub fn config_path(&self) -> &Path {
        &self.config_path
    }

    pub fn simulator_addr(&self) -> Option<SocketAddr> {
        self.simulator_addr
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
/// request id + tracing → Bearer auth → dispatch (route, body, model, validation,
/// provider, normalisation, sealed id).
pub fn service<B>(
    gateway: Arc<Gateway>,
) -> impl Service<Request<B>, Response = Response<ResponseBody>, Error = Infallible, Future: Send>
+ Clone
+ Send
+ 'static
where
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    ServiceBuilder::new()
        .layer(RequestLogLayer::new(gateway.clone()))
        .layer(AuthenticateLayer)
        .service(Dispatch::new(gateway))
}
