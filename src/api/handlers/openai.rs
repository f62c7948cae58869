//! `/v1/videos` in the OpenAI Videos API's shapes, over the same task service as the
//! other endpoints: a video (`GET {id}`), its content (`?variant=`), its deletion,
//! the refused remix, and the uploaded inputs providers fetch by signed link. The
//! submit is `openai_submit.rs`; the listing is `list.rs`'s, in the video shape.

use http::request::Parts;
use http::{Response, StatusCode};
use serde_json::json;

use super::task_ref::OpenTask;
use crate::api::context::RequestContext;
use crate::config::Endpoint;
use crate::error::ApiError;
use crate::gateway::Gateway;
use crate::response::{ResponseBody, json};
use crate::snapshot::Snapshot;
use crate::tasks::ledger::{StoredResult, TaskRecord};
use crate::tasks::openai::{Video, VideoAsked, VideoTimes};

const ENDPOINT: Endpoint = Endpoint::OpenAiVideos;

/// `GET /v1/videos/{id}`: the video object.
pub(super) async fn query(
    gateway: &Gateway,
    ctx: &RequestContext,
    id: &str,
) -> Result<Response<ResponseBody>, ApiError> {
    let open = OpenTask::open(ctx, ENDPOINT, id)?;
    let state = open.state(gateway, ctx).await?;
    let task = &open.task;
    // The state is the provider's (or the cache's): a ledger out of reach costs the
    // answer only what the row adds (what was asked, when it ended), not the answer.
    let row = match gateway.tasks.ledger() {
        None => None,
        Some(ledger) => match ledger.by_upstream(&task.provider, &task.upstream_id).await {
            Ok(row) => row,
            Err(e) => {
                let _ = gateway.ledger_failed("a video's row; answered without it", &e);
                None
            }
        },
    };
    let (asked, times) = recorded(&ctx.snapshot, &task.model, row.as_ref());
    let video = Video::new(id, &task.model, task.created, &state, &asked, times);
    Ok(json(StatusCode::OK, &video))
}

/// What the ledger row of a video says that its state does not: what was asked (its
/// first answer) and when it ended; `expires_at` when its model keeps results in
/// storage (kept `keep_days` from then). Nothing without a row.
pub(super) fn recorded(
    snapshot: &Snapshot,
    model: &str,
    row: Option<&TaskRecord>,
) -> (VideoAsked, VideoTimes) {
    let Some(row) = row else {
        return Default::default();
    };
    let asked = row
        .answer_body
        .as_deref()
        .map(VideoAsked::of_answer)
        .unwrap_or_default();
    let completed_at = row.finished_ms.map(|ms| ms.max(0) as u64 / 1000);
    let keep_days = snapshot.models.get(model).and_then(|m| m.results.keep_days);
    let expires_at = completed_at
        .zip(keep_days)
        .map(|(at, days)| at + u64::from(days) * 86_400);
    let times = VideoTimes {
        completed_at,
        expires_at,
    };
    (asked, times)
}

/// `DELETE /v1/videos/{id}`: the task service deletes it, as on the other endpoints.
pub(super) async fn delete(
    gateway: &Gateway,
    ctx: &RequestContext,
    id: &str,
) -> Result<Response<ResponseBody>, ApiError> {
    let open = OpenTask::open(ctx, ENDPOINT, id)?;
    gateway
        .tasks
        .delete(&ctx.snapshot, (&open.task).into())
        .await?;
    let deleted = json!({"id": id, "object": "video.deleted", "deleted": true});
    Ok(json(StatusCode::OK, &deleted))
}

/// `POST /v1/videos/{id}/remix`: no provider has a remix step. The id is opened
/// first, so that someone else's id is the same 404 as everywhere.
pub(super) fn remix(ctx: &RequestContext, id: &str) -> Result<Response<ResponseBody>, ApiError> {
    OpenTask::open(ctx, ENDPOINT, id)?;
    Err(ApiError::unsupported("remixing a video"))
}

/// The variant `GET /v1/videos/{id}/content` asks for: `Ok` for the video (the
/// default; signed links name none), a 404 for the preview images no provider gives,
/// 400 for anything else. The id is opened first (with the key, or as a signed link),
/// so that someone else's id is the same 404 as everywhere, and a bad link the same
/// 403.
pub(super) fn variant(
    ctx: &RequestContext,
    id: &str,
    n: usize,
    req: &Parts,
) -> Result<(), ApiError> {
    let query = req.uri.query().unwrap_or_default();
    let asked = form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == "variant")
        .map(|(_, v)| v.into_owned());
    if matches!(asked.as_deref(), None | Some("video")) {
        return Ok(());
    }
    // The id (with the key, or as a signed link) is judged first: what a request
    // hears does not depend on its query when the id does not open.
    match ctx.key_if_any() {
        Some(_) => drop(OpenTask::open(ctx, ENDPOINT, id)?),
        None => drop(OpenTask::open_signed(
            ctx,
            ENDPOINT,
            id,
            n,
            req.uri.query(),
        )?),
    }
    match asked.as_deref() {
        Some(other @ ("thumbnail" | "spritesheet")) => Err(ApiError::variant_not_found(other)),
        _ => {
            let msg = "`variant` must be video, thumbnail or spritesheet".to_string();
            Err(ApiError::invalid_parameter("variant", msg))
        }
    }
}

/// `GET /v1/videos/inputs/{name}?expires=…&signature=…`: an uploaded
/// `input_reference`, for the provider that was handed its link (no key).
pub(super) async fn input(
    gateway: &Gateway,
    ctx: &RequestContext,
    name: &str,
    req: &Parts,
) -> Result<Response<ResponseBody>, ApiError> {
    let (mut expires, mut signature) = (None, None);
    for (k, v) in form_urlencoded::parse(req.uri.query().unwrap_or_default().as_bytes()) {
        match &*k {
            "expires" => expires = v.parse::<u64>().ok(),
            "signature" => signature = Some(v.into_owned()),
            _ => {}
        }
    }
    let (Some(expires), Some(signature)) = (expires, signature) else {
        return Err(ApiError::invalid_signature());
    };
    if !ctx.snapshot.sealer.input_signed(name, expires, &signature) {
        return Err(ApiError::invalid_signature());
    }
    let now_ms = crate::tasks::ledger::now_ms();
    if (expires as i64).saturating_mul(1000) < now_ms {
        return Err(ApiError::link_expired());
    }
    let storage = gateway
        .tasks
        .storage()
        .ok_or_else(ApiError::path_not_found)?;
    // Named `{sha256}-{bytes}.{ext}` when it was kept: all a file server needs.
    let (stem, ext) = name.rsplit_once('.').ok_or_else(ApiError::path_not_found)?;
    let (sha256, bytes) = stem.split_once('-').ok_or_else(ApiError::path_not_found)?;
    let content_type = super::openai_submit::INPUT_TYPES
        .iter()
        .find(|(_, e)| *e == ext)
        .map(|(t, _)| (*t).to_string());
    let stored = StoredResult {
        task_row: 0,
        n: 0,
        object_key: storage.input_key(name),
        bytes: bytes.parse().map_err(|_| ApiError::path_not_found())?,
        content_type,
        sha256: sha256.to_string(),
        stored_ms: 0,
        expires_ms: i64::MAX,
        deleted_ms: None,
    };
    super::stored::answer(storage, &stored, req, None, now_ms).await
}
