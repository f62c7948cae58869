//! `POST {collection}`: bounded body read → model lookup → the key's permission →
//! parameter validation → the model's providers in failover order → sealed id.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use http::{Request, Response, StatusCode};
use serde_json::Value;

use crate::api::context::RequestContext;
use crate::api::shapes::SubmitResponse;
use crate::config::Endpoint;
use crate::edge::body::read_json_body;
use crate::error::ApiError;
use crate::models::Model;
use crate::providers::{Provider, SubmitError, Submitted};
use crate::response::{ResponseBody, json};
use crate::tasks::TaskId;

pub(super) async fn submit<B>(
    ctx: &RequestContext,
    endpoint: Endpoint,
    req: Request<B>,
) -> Result<Response<ResponseBody>, ApiError>
where
    B: http_body::Body<Data = bytes::Bytes>,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let key = ctx.key()?;
    let (model_id, params) = read_params(req, ctx.snapshot.server.max_body_bytes).await?;
    let model = ctx
        .snapshot
        .model(&model_id, endpoint)
        .ok_or_else(|| ApiError::unknown_model(&model_id, endpoint.path()))?;
    ctx.note(|f| f.model = Some(model.id.clone()));
    if !key.may_use(&model.id) {
        return Err(ApiError::model_not_allowed(&model.id));
    }
    model.validator.check(&model.id, &params)?;
    let (provider, created) = forward(ctx, model, &params).await?;
    let task = TaskId {
        provider: provider.name.clone(),
        upstream_id: created.upstream_id,
        model: model.id.clone(),
        kind: model.kind,
        owner: key.name.to_string(),
        created: unix_now(),
    };
    let Ok(id) = ctx.snapshot.sealer.seal(&task) else {
        // The task exists upstream: log its id so it can be recovered.
        tracing::error!(
            provider = %provider.name,
            upstream_id = %task.upstream_id,
            "upstream task id too long to seal; the task was created upstream"
        );
        return Err(ApiError::upstream_bad_answer(
            "submit",
            "its task id is too long",
        ));
    };
    let answer = SubmitResponse {
        id: &id,
        object: model.kind,
        model: &model.id,
        status: created.status,
        created: task.created,
    };
    Ok(json(StatusCode::OK, &answer))
}

/// The body as a JSON object, split into the model id and the parameters.
async fn read_params<B>(req: Request<B>, limit: usize) -> Result<(String, Value), ApiError>
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
    match params.remove("model") {
        Some(Value::String(model)) => Ok((model, Value::Object(params))),
        _ => Err(ApiError::missing_model()),
    }
}

/// Submit to the model's providers in order; the next is tried only when one proves
/// it created no task.
async fn forward<'m>(
    ctx: &RequestContext,
    model: &'m Model,
    params: &Value,
) -> Result<(&'m Arc<Provider>, Submitted), ApiError> {
    let mut refusal = None;
    for provider in &model.providers {
        ctx.note(|f| f.provider = Some(provider.name.clone()));
        match provider.submit(model.call(), params).await {
            Ok(created) => {
                ctx.note(|f| f.upstream = Some(created.upstream_time));
                return Ok((provider, created));
            }
            Err(SubmitError::Refused(e)) => {
                tracing::warn!(provider = %provider.name, code = e.code, "provider refused the submit; trying the next one");
                refusal = Some(e);
            }
            Err(SubmitError::Failed(e)) => return Err(e),
        }
    }
    Err(refusal.unwrap_or_else(|| ApiError::no_provider("the model has no usable provider")))
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
