//! The innermost service: the handler of the request's route, under the overall
//! request timeout, with the body read deadline. One module per endpoint; each handler
//! is a short sequence of steps and returns `Result<Response, ApiError>`.

mod callback;
mod content;
mod delete;
mod idempotency;
mod list;
mod long_poll;
mod models;
mod openai;
mod openai_submit;
mod ops;
mod public_url;
mod query;
mod stored;
mod submit;
mod task_ref;
mod usage;

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use tower::Service;

pub use self::ops::{healthy, metrics};
use super::context::Ctx;
use super::openapi;
use super::routing::Route;
use crate::config::Endpoint;
use crate::edge::body::TimedBody;
use crate::error::ApiError;
use crate::gateway::Gateway;
use crate::response::{BoxError, ResponseBody, ResponseFuture};

/// Runs the route's handler.
#[derive(Clone)]
pub struct Dispatch {
    gateway: Arc<Gateway>,
    openapi: Arc<openapi::Cache>,
}

impl Dispatch {
    pub fn new(gateway: Arc<Gateway>) -> Self {
        Self {
            gateway,
            openapi: Arc::default(),
        }
    }
}

impl<B> Service<(Ctx, Request<B>)> for Dispatch
where
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<ResponseBody>;
    type Error = Infallible;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, (ctx, req): (Ctx, Request<B>)) -> Self::Future {
        let gateway = self.gateway.clone();
        let openapi = self.openapi.clone();
        Box::pin(async move {
            let server = &ctx.snapshot.server;
            let body_deadline = Duration::from_millis(server.body_read_timeout_ms);
            let req = req.map(|body| TimedBody::new(body, body_deadline));
            let timeout = Duration::from_millis(server.request_timeout_ms);
            let handled =
                tokio::time::timeout(timeout, handle(&gateway, &openapi, &ctx, req)).await;
            Ok(match handled {
                Ok(Ok(resp)) => resp,
                Ok(Err(e)) => e.into_response(),
                Err(_) => ApiError::request_timeout().into_response(),
            })
        })
    }
}

async fn handle<B>(
    gateway: &Arc<Gateway>,
    openapi: &openapi::Cache,
    ctx: &Ctx,
    req: Request<TimedBody<B>>,
) -> Result<Response<ResponseBody>, ApiError>
where
    B: http_body::Body<Data = bytes::Bytes>,
    B::Error: Into<BoxError>,
{
    // Each handler's future is boxed but the query's: the future of `handle` is as
    // large as its largest arm, and a long-polling query holds it for up to a minute
    // (10,000 waiting clients held 4.6 KiB each for the submit's and the others' state).
    match &ctx.route {
        Route::Health => Ok(healthy()),
        Route::Ready => ops::ready(gateway),
        Route::Metrics => Ok(metrics(gateway, req.method())),
        Route::OpenApi => Ok(ops::document(openapi, &ctx.snapshot)),
        Route::Usage(_) => {
            let (parts, _) = req.into_parts();
            Box::pin(usage::usage(gateway, ctx, &parts)).await
        }
        Route::Models(endpoint) => models::list(ctx, *endpoint),
        Route::Model(endpoint, id) => models::one(ctx, *endpoint, id),
        Route::Refused { error, .. } => Err(error.clone()),
        Route::Submit(Endpoint::OpenAiVideos) => {
            Box::pin(openai_submit::submit(gateway, ctx, req)).await
        }
        Route::Submit(endpoint) => Box::pin(submit::submit(gateway, ctx, *endpoint, req)).await,
        Route::Query(Endpoint::OpenAiVideos, id) => Box::pin(openai::query(gateway, ctx, id)).await,
        Route::Delete(Endpoint::OpenAiVideos, id) => {
            Box::pin(openai::delete(gateway, ctx, id)).await
        }
        Route::Remix(id) => openai::remix(ctx, id),
        Route::Input(name) => {
            let (parts, _) = req.into_parts();
            Box::pin(openai::input(gateway, ctx, name, &parts)).await
        }
        Route::List(endpoint) => {
            let (parts, _) = req.into_parts();
            Box::pin(list::list(gateway, ctx, *endpoint, &parts)).await
        }
        Route::Query(endpoint, id) => {
            let (parts, _) = req.into_parts();
            query::query(gateway, ctx, *endpoint, id, parts).await
        }
        Route::Delete(endpoint, id) => Box::pin(delete::delete(gateway, ctx, *endpoint, id)).await,
        Route::Content(endpoint, id, n) => {
            let (parts, _) = req.into_parts();
            if *endpoint == Endpoint::OpenAiVideos {
                openai::variant(ctx, id, *n, &parts)?;
            }
            Box::pin(content::content(gateway, ctx, *endpoint, id, *n, &parts)).await
        }
    }
}

/// A whole number written with digits only: `str::parse` alone would also take `+5`.
fn digits<T: std::str::FromStr>(text: &str) -> Option<T> {
    let plain = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    plain.then(|| text.parse().ok()).flatten()
}
