//! `POST {collection}`: bounded body read → model lookup → the key's permission →
//! parameter validation → the webhook target → the task service's submit → the
//! answer (the task, or the first answer again for a retried idempotency key).

use std::sync::Arc;

use http::{Request, Response, StatusCode};
use serde_json::Value;

use super::{callback, idempotency};
use crate::api::context::Ctx;
use crate::config::Endpoint;
use crate::edge::body::read_json_body;
use crate::error::ApiError;
use crate::gateway::Gateway;
use crate::lifecycle::{SubmitOrder, Submitted};
use crate::response::{ResponseBody, json};

pub(super) async fn submit<B>(
    gateway: &Arc<Gateway>,
    ctx: &Ctx,
    endpoint: Endpoint,
    req: Request<B>,
) -> Result<Response<ResponseBody>, ApiError>
where
    B: http_body::Body<Data = bytes::Bytes>,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let key = ctx.key()?;
    let with_ledger = gateway.tasks.ledger().is_some();
    let idempotency_key = match with_ledger {
        true => idempotency::read(req.headers(), key)?,
        false => None,
    };
    let body = read_body(req, ctx.snapshot.server.max_body_bytes).await?;
    let model = ctx
        .snapshot
        .model(&body.model, endpoint)
        .ok_or_else(|| ApiError::unknown_model(&body.model, endpoint.path()))?;
    ctx.note(|f| f.model = Some(model.id.clone()));
    if !key.may_use(&model.id) {
        return Err(ApiError::model_not_allowed(&model.id));
    }
    let mut params = body.params;
    model.validator.check(&model.id, &mut params)?;
    let video_seconds = model.video_seconds(&params)?;
    let callback_in_request = body.callback_url.is_some();
    let callback_url = match with_ledger {
        true => callback::target(ctx, key, body.callback_url).await?,
        false if callback_in_request => {
            let msg = "webhooks need the task ledger, and this gateway runs without one";
            return Err(ApiError::invalid_parameter("callback_url", msg.into()));
        }
        false => None,
    };
    let snapshot = ctx.snapshot.clone();
    let order = SubmitOrder {
        idempotency_key,
        callback_url,
        callback_in_request,
        ..SubmitOrder::new(
            snapshot,
            key,
            endpoint,
            model.clone(),
            params,
            video_seconds,
        )
    };
    let (submitted, attempted) = gateway.tasks.submit(order).await;
    ctx.note(|f| {
        f.provider = attempted.provider;
        f.upstream = attempted.upstream_time;
    });
    Ok(match submitted? {
        Submitted::Created(created) => json(StatusCode::OK, &created.body()),
        Submitted::Replayed(answer) => idempotency::replay(&answer),
    })
}

/// A submit body: the fields the gateway reads itself, and the model's parameters.
struct SubmitBody {
    model: String,
    callback_url: Option<String>,
    params: Value,
}

/// The body as a JSON object, split into the model id, the callback URL and the
/// parameters (which are validated without them).
async fn read_body<B>(req: Request<B>, limit: usize) -> Result<SubmitBody, ApiError>
where
    B: http_body::Body<Data = bytes::Bytes>,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let (parts, body) = req.into_parts();
    let bytes = read_json_body(&parts.headers, body, limit).await?;
    let mut params = match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(map)) => map,
        Ok(_) => return Err(ApiError::not_an_object()),
        Err(e) => return Err(ApiError::invalid_json(e)),
    };
    let Some(Value::String(model)) = params.remove("model") else {
        return Err(ApiError::missing_model());
    };
    let callback_url = match params.remove("callback_url") {
        None | Some(Value::Null) => None,
        Some(Value::String(url)) => Some(url),
        Some(_) => {
            let msg = "`callback_url` must be a string: an absolute https:// URL";
            return Err(ApiError::invalid_parameter("callback_url", msg.into()));
        }
    };
    Ok(SubmitBody {
        model,
        callback_url,
        params: Value::Object(params),
    })
}
