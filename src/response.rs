//! The response type every layer answers with, and the one way a JSON answer is built.

use std::convert::Infallible;
use std::pin::Pin;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use serde::Serialize;
use tower::Service;

/// Error type of streamed bodies (upstream content passes through).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Body of every response the gateway sends.
pub type ResponseBody = BoxBody<Bytes, BoxError>;

/// Future of every layer of the stack: errors never escape it (`Infallible`), every
/// failure is already an error response.
pub type ResponseFuture =
    Pin<Box<dyn Future<Output = Result<Response<ResponseBody>, Infallible>> + Send>>;

/// A service that answers every `Req` with a response of ours and never fails (a
/// refusal is already an answer): the client API and the admin listener, each of
/// their layers, and what a connection is served by.
pub trait Answers<Req>:
    Service<Req, Response = Response<ResponseBody>, Error = Infallible, Future: Send>
    + Clone
    + Send
    + 'static
{
}

impl<T, Req> Answers<Req> for T where
    T: Service<Req, Response = Response<ResponseBody>, Error = Infallible, Future: Send>
        + Clone
        + Send
        + 'static
{
}

/// A complete in-memory response body.
pub fn full(bytes: impl Into<Bytes>) -> ResponseBody {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

/// `value` as JSON text; empty if it does not serialise (our own types always do,
/// and an empty body is still a valid answer).
pub fn json_bytes(value: &impl Serialize) -> Vec<u8> {
    // Room for a task or a typical upstream body at once: grown from serde_json's
    // 128 bytes, a task's answer was reallocated twice.
    let mut body = Vec::with_capacity(512);
    if serde_json::to_writer(&mut body, value).is_err() {
        body.clear();
    }
    body
}

/// `value` as an `application/json` response with `status`.
pub fn json(status: StatusCode, value: &impl Serialize) -> Response<ResponseBody> {
    let mut resp = Response::new(full(json_bytes(value)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}
