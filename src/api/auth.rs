//! The auth layer: every route but the public ones (health, readiness) needs a valid
//! Bearer key, which the context then carries. `/metrics` on the client listeners
//! needs the metrics token instead (it is routed there only when one is configured).

use http::Request;

use subtle::ConstantTimeEq;

use super::context::Ctx;
use super::routing::Route;
use super::stack::{Next, Phase};
use crate::error::ApiError;
use crate::response::ResponseFuture;

#[derive(Clone, Default)]
pub struct Authenticate;

impl Phase for Authenticate {
    fn call<S: Next<B>, B: Send + 'static>(
        &self,
        ctx: Ctx,
        req: Request<B>,
        mut next: S,
    ) -> ResponseFuture {
        if matches!(ctx.route, Route::Metrics)
            && let Err(e) = metrics_token(&ctx, req.headers())
        {
            return Box::pin(async move { Ok(e.into_response()) });
        }
        // A signed link to a stored result: its signature stands in for the key, and
        // the content handler checks it.
        let signed = matches!(ctx.route, Route::Content(..))
            && req.uri().query().is_some_and(|q| {
                form_urlencoded::parse(q.as_bytes()).any(|(name, _)| name == "signature")
            });
        if signed && let Route::Content(_, id, _) = &ctx.route {
            // Anyone holding the link may fetch it: it counts against the limits of
            // the key whose task it is, and dies with that key.
            if let Some(task) = ctx.snapshot.sealer.open(id) {
                match ctx.snapshot.keys.named(&task.owner) {
                    Some(owner) => ctx.charge_to(owner.clone()),
                    None => {
                        let e = ApiError::invalid_signature();
                        return Box::pin(async move { Ok(e.into_response()) });
                    }
                }
            }
        }
        if !ctx.route.is_public() && !signed {
            match ctx.snapshot.keys.authenticate(req.headers()) {
                Ok(key) => ctx.authenticated(key),
                Err(e) => return Box::pin(async move { Ok(e.into_response()) }),
            }
        }
        Box::pin(next.call((ctx, req)))
    }
}

/// The metrics token as a Bearer credential, compared by digest in constant time.
fn metrics_token(ctx: &Ctx, headers: &http::HeaderMap) -> Result<(), ApiError> {
    let Some(expected) = &ctx.snapshot.metrics_token else {
        return Err(ApiError::path_not_found());
    };
    let presented = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or_else(ApiError::missing_key)?;
    let digest = ring::digest::digest(&ring::digest::SHA256, presented.trim().as_bytes());
    if bool::from(digest.as_ref().ct_eq(expected)) {
        Ok(())
    } else {
        Err(ApiError::invalid_key())
    }
}
