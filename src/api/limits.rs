//! The per-key limits layer: the authenticated key's request rate, submit rate and
//! requests in progress (`access::limits`), with `x-ratelimit-*` on every answer; a
//! signed link's, its task owner's. Public routes (no key) pass.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use http_body_util::BodyExt;

use super::context::Ctx;
use super::routing::Route;
use super::stack::{Next, Phase};
use crate::access::{InProgress, LimitExceeded, RateHeaders, SharedLimits};
use crate::error::ApiError;
use crate::gateway::Gateway;
use crate::response::{BoxError, ResponseBody, ResponseFuture};

#[derive(Clone)]
pub struct KeyLimit {
    gateway: Arc<Gateway>,
}

impl KeyLimit {
    pub fn new(gateway: Arc<Gateway>) -> Self {
        Self { gateway }
    }
}

impl Phase for KeyLimit {
    fn call<S: Next<B>, B: Send + 'static>(
        &self,
        ctx: Ctx,
        req: Request<B>,
        mut next: S,
    ) -> ResponseFuture {
        let limiter = ctx
            .limited_as()
            .and_then(|key| ctx.snapshot.limits.get(&key.name))
            .cloned();
        let Some(limiter) = limiter else {
            return Box::pin(next.call((ctx, req)));
        };
        let is_submit = matches!(ctx.route, Route::Submit(_));
        if let Some(shared) = &self.gateway.shared_limits
            && limiter.fleet().is_some()
        {
            // From what this replica holds ahead, or from Redis: the request waits at
            // most `shared_timeout_ms` for it.
            let (shared, gateway) = (shared.clone(), self.gateway.clone());
            return Box::pin(async move {
                let verdict = shared.admit(&limiter, is_submit).await;
                answer(&gateway, verdict, || next.call((ctx, req))).await
            });
        }
        let verdict = SharedLimits::local(&limiter, is_submit);
        answer(&self.gateway, verdict, || next.call((ctx, req)))
    }
}

type Verdict = Result<(Option<RateHeaders>, Option<InProgress>), LimitExceeded>;

/// The inner answer (called only when admitted) with the rate headers and the slot
/// held by its body, or the refusal.
fn answer<F>(gateway: &Gateway, verdict: Verdict, inner: impl FnOnce() -> F) -> ResponseFuture
where
    F: Future<Output = Result<Response<ResponseBody>, Infallible>> + Send + 'static,
{
    match verdict {
        Ok((headers, slot)) => {
            let inner = inner();
            Box::pin(async move {
                let Ok(mut resp) = inner.await;
                if let Some(h) = headers {
                    h.write(resp.headers_mut());
                }
                // A streamed download is in progress for as long as it streams: the
                // slot goes with the body and is released when the body ends.
                Ok(match slot {
                    Some(slot) => resp.map(|body| HoldSlot { body, _slot: slot }.boxed()),
                    None => resp,
                })
            })
        }
        Err(LimitExceeded::Rate {
            which,
            headers,
            wait,
        }) => {
            gateway.metrics.rate_limited(which);
            let mut resp = ApiError::rate_limited(wait).into_response();
            headers.write(resp.headers_mut());
            Box::pin(async move { Ok(resp) })
        }
        Err(LimitExceeded::Busy(max)) => {
            gateway.metrics.shed("key_concurrency");
            let resp = ApiError::key_overloaded(max).into_response();
            Box::pin(async move { Ok(resp) })
        }
    }
}

/// A response body that keeps the key's in-progress slot until it is dropped.
struct HoldSlot {
    body: ResponseBody,
    _slot: InProgress,
}

impl http_body::Body for HoldSlot {
    type Data = bytes::Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
