//! The API: the tower stack that turns a request into an answer. Outermost first:
//!
//! 1. [`request_log`]: request id, the route resolved once ([`routing`]), the snapshot
//!    pinned into the [`context`]; the access-log line and the request metrics;
//! 2. [`auth`]: a Bearer key for every route but health, readiness, metrics and the
//!    OpenAPI document;
//! 3. [`limits`]: the key's rates and requests in progress;
//! 4. [`handlers`]: the route's handler under the request timeout.
//!
//! Every refusal is an error of the catalogue (`crate::error`); [`shapes`] are the
//! public answers, and [`openapi`] describes them all. docs/architecture.md draws the
//! whole path.

mod auth;
mod context;
#[cfg(test)]
mod fuzz;
mod handlers;
mod limits;
pub mod openapi;
mod request_log;
mod routing;
pub mod shapes;
mod stack;

use std::convert::Infallible;
use std::sync::Arc;

use http::Request;
use tower::ServiceBuilder;

use self::auth::Authenticate;
use self::handlers::Dispatch;
use self::limits::KeyLimit;
use self::request_log::RequestLogLayer;
use self::stack::PhaseLayer;
use crate::error::ApiError;
use crate::gateway::Gateway;
use crate::response::Answers;

/// The client API's service, for the plain and the TLS listener.
pub fn service<B>(gateway: Arc<Gateway>) -> impl Answers<Request<B>>
where
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    ServiceBuilder::new()
        .layer(RequestLogLayer::new(gateway.clone()))
        .layer(PhaseLayer(Authenticate))
        .layer(PhaseLayer(KeyLimit::new(gateway.clone())))
        .service(Dispatch::new(gateway))
}

/// The admin listener's service: `/metrics` and `/healthz`, nothing else.
pub fn admin_service<B>(gateway: Arc<Gateway>) -> impl Answers<Request<B>>
where
    B: Send + 'static,
{
    tower::service_fn(move |req: Request<B>| {
        let resp = match req.uri().path() {
            "/metrics" => handlers::metrics(&gateway, req.method()),
            "/healthz" => handlers::healthy(),
            _ => ApiError::path_not_found().into_response(),
        };
        std::future::ready(Ok::<_, Infallible>(resp))
    })
}
