//! The tower plumbing every layer of the stack shares. A layer is a [`Phase`]: it sees
//! the request with its [`RequestContext`](super::context::RequestContext) and the rest
//! of the stack ([`Next`]), and returns the response. Errors never escape
//! (`Infallible`): a refusal is already an error response.

use std::convert::Infallible;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower::{Layer, Service};

use super::context::Ctx;
use crate::response::{Answers, ResponseBody, ResponseFuture};

/// The rest of the stack, as a phase sees it.
pub trait Next<B>: Answers<(Ctx, Request<B>)> {}

impl<T: Answers<(Ctx, Request<B>)>, B> Next<B> for T {}

/// One phase of the request path.
pub trait Phase: Clone + Send + 'static {
    fn call<S: Next<B>, B: Send + 'static>(
        &self,
        ctx: Ctx,
        req: Request<B>,
        next: S,
    ) -> ResponseFuture;
}

/// A phase as a tower layer.
#[derive(Clone)]
pub struct PhaseLayer<T>(pub T);

impl<T: Clone, S> Layer<S> for PhaseLayer<T> {
    type Service = Phased<T, S>;

    fn layer(&self, inner: S) -> Self::Service {
        Phased {
            phase: self.0.clone(),
            inner,
        }
    }
}

/// A phase in front of the rest of the stack.
#[derive(Clone)]
pub struct Phased<T, S> {
    phase: T,
    inner: S,
}

impl<T: Phase, S: Next<B>, B: Send + 'static> Service<(Ctx, Request<B>)> for Phased<T, S> {
    type Response = Response<ResponseBody>;
    type Error = Infallible;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, (ctx, req): (Ctx, Request<B>)) -> ResponseFuture {
        // Hand on the service that was driven to readiness; keep a fresh clone.
        let clone = self.inner.clone();
        let ready = std::mem::replace(&mut self.inner, clone);
        self.phase.call(ctx, req, ready)
    }
}
