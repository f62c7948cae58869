//! `GET {models}` and `GET {models}/{id}`: the models the calling key may submit on
//! the endpoint, each with the JSON Schema of a submit body for it. An unknown id and
//! one the key may not use are the same 404, so a key learns nothing of other models.

use http::{Response, StatusCode};
use percent_encoding::percent_decode_str;

use crate::api::context::RequestContext;
use crate::api::shapes::{ModelList, ModelView};
use crate::config::Endpoint;
use crate::error::ApiError;
use crate::models::Model;
use crate::response::{ResponseBody, json};

pub(super) fn list(
    ctx: &RequestContext,
    endpoint: Endpoint,
) -> Result<Response<ResponseBody>, ApiError> {
    let key = ctx.key()?;
    let mut models: Vec<&Model> = ctx
        .snapshot
        .models
        .values()
        .filter(|m| m.served_on(endpoint) && key.may_use(&m.id))
        .map(|m| &**m)
        .collect();
    models.sort_unstable_by(|a, b| a.id.cmp(&b.id));
    let currency = &ctx.snapshot.billing.currency;
    Ok(json(
        StatusCode::OK,
        &ModelList::of(&models, currency, endpoint),
    ))
}

/// `raw` is the path segment as sent: percent-decoded here, so ids with spaces and
/// non-ASCII characters work; bytes that are not UTF-8 name no model.
pub(super) fn one(
    ctx: &RequestContext,
    endpoint: Endpoint,
    raw: &str,
) -> Result<Response<ResponseBody>, ApiError> {
    let key = ctx.key()?;
    let id = percent_decode_str(raw)
        .decode_utf8()
        .map_err(|_| ApiError::model_not_found())?;
    let model = ctx
        .snapshot
        .model(&id, endpoint)
        .filter(|m| key.may_use(&m.id))
        .ok_or_else(ApiError::model_not_found)?;
    ctx.note(|f| f.model = Some(model.id.clone()));
    let currency = &ctx.snapshot.billing.currency;
    Ok(json(
        StatusCode::OK,
        &ModelView::of(model, currency, endpoint),
    ))
}
