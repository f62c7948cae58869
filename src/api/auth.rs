//! The auth layer: every route but the public ones (health, readiness, metrics on
//! the client listener) needs a valid Bearer key, which the context then carries.

use http::Request;

use super::context::Ctx;
use super::stack::{Next, Step};
use crate::response::ResponseFuture;

#[derive(Clone, Default)]
pub struct Authenticate;

impl Step for Authenticate {
    fn call<S: Next<B>, B: Send + 'static>(
        &self,
        ctx: Ctx,
        req: Request<B>,
        mut next: S,
    ) -> ResponseFuture {
        if !ctx.route.is_public() {
            match ctx.snapshot.keys.authenticate(req.headers()) {
                Ok(key) => ctx.authenticated(key),
                Err(e) => return Box::pin(async move { Ok(e.into_response()) }),
            }
        }
        Box::pin(next.call((ctx, req)))
    }
}
