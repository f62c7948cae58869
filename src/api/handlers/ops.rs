//! Operational answers: liveness, readiness, the metrics exposition, the OpenAPI
//! document.

use std::sync::Arc;

use http::{HeaderValue, Method, Response, StatusCode, header};

use crate::api::openapi;
use crate::error::ApiError;
use crate::gateway::Gateway;
use crate::response::{ResponseBody, full, json};
use crate::snapshot::Snapshot;

/// `GET /healthz`: the process is up (also served by the admin listener).
pub fn healthy() -> Response<ResponseBody> {
    json(StatusCode::OK, &serde_json::json!({"status": "ok"}))
}

/// `GET /readyz`: 503 once a stop was requested, so load balancers take us out.
pub(super) fn ready(gateway: &Gateway) -> Result<Response<ResponseBody>, ApiError> {
    if gateway.is_draining() {
        return Err(ApiError::shutting_down());
    }
    Ok(json(
        StatusCode::OK,
        &serde_json::json!({"status": "ready"}),
    ))
}

/// `GET /metrics`: the Prometheus exposition (no client auth).
pub fn metrics(gateway: &Gateway, method: &Method) -> Response<ResponseBody> {
    if method != Method::GET && method != Method::HEAD {
        return ApiError::method_not_allowed("GET, HEAD").into_response();
    }
    let mut resp = Response::new(full(gateway.metrics.render()));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(crate::metrics::CONTENT_TYPE),
    );
    resp
}

/// `GET /openapi.json`: the document of the snapshot this request runs on.
pub(super) fn document(cache: &openapi::Cache, snapshot: &Arc<Snapshot>) -> Response<ResponseBody> {
    let mut resp = Response::new(full(cache.get(snapshot)));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}
