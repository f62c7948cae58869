//! The request context: what the outermost layer resolves once (request id, route,
//! pinned configuration snapshot) and what later layers add (the authenticated key,
//! the fields of the access-log line). Every layer and handler reads this one value.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use http::HeaderValue;

use super::routing::Route;
use crate::access::ApiKey;
use crate::error::ApiError;
use crate::snapshot::Snapshot;

/// The context every step after the outermost one receives with the request.
pub type Ctx = Arc<RequestContext>;

/// One request's context.
#[derive(Debug)]
pub struct RequestContext {
    /// `x-request-id`: the client's, when sane, or ours.
    pub id: HeaderValue,
    pub route: Route,
    /// The configuration the whole request runs on, even if a reload happens meanwhile.
    pub snapshot: Arc<Snapshot>,
    key: OnceLock<Arc<ApiKey>>,
    /// A request without a key whose per-key limits are another's: a signed link's,
    /// its task's owner.
    charged_to: OnceLock<Arc<ApiKey>>,
    log: Mutex<LogFields>,
}

/// What handlers learned about a request, for the access log and the metrics.
#[derive(Debug, Clone, Default)]
pub struct LogFields {
    pub model: Option<String>,
    pub provider: Option<String>,
    /// Time spent waiting for the upstream.
    pub upstream: Option<Duration>,
}

impl RequestContext {
    pub fn new(id: HeaderValue, route: Route, snapshot: Arc<Snapshot>) -> Self {
        Self {
            id,
            route,
            snapshot,
            key: OnceLock::new(),
            charged_to: OnceLock::new(),
            log: Mutex::default(),
        }
    }

    /// The authenticated key. The auth layer admits no request to a route that needs
    /// one without it, so the error is never seen by a client in practice.
    pub fn key(&self) -> Result<&Arc<ApiKey>, ApiError> {
        self.key.get().ok_or_else(ApiError::invalid_key)
    }

    /// The key, if the request was authenticated (public routes are not).
    pub fn key_if_any(&self) -> Option<&Arc<ApiKey>> {
        self.key.get()
    }

    /// Record the key that authenticated the request (once).
    pub fn authenticated(&self, key: Arc<ApiKey>) {
        let _ = self.key.set(key);
    }

    /// Count a request without a key against `key`'s limits (once); it stays
    /// unauthenticated.
    pub fn charge_to(&self, key: Arc<ApiKey>) {
        let _ = self.charged_to.set(key);
    }

    /// The key whose limits the request counts against: the one that authenticated
    /// it, else the one it is charged to.
    pub fn limited_as(&self) -> Option<&Arc<ApiKey>> {
        self.key.get().or(self.charged_to.get())
    }

    /// Fill in log fields.
    pub fn note(&self, fill: impl FnOnce(&mut LogFields)) {
        fill(
            &mut self
                .log
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
    }

    /// The log fields as filled in so far.
    pub fn log_fields(&self) -> LogFields {
        self.log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}
