//! `DELETE {collection}/{id}`: open the id for its owner (same 404 as a query), the
//! task service deletes it (cancelling it first when unfinished), the answer says so:
//! `{"id", "object", "deleted": true}`, the same for a second DELETE.

use http::{Response, StatusCode};
use serde_json::json;

use super::task_ref::OpenTask;
use crate::api::context::RequestContext;
use crate::config::Endpoint;
use crate::error::ApiError;
use crate::gateway::Gateway;
use crate::response::{ResponseBody, json};

pub(super) async fn delete(
    gateway: &Gateway,
    ctx: &RequestContext,
    endpoint: Endpoint,
    id: &str,
) -> Result<Response<ResponseBody>, ApiError> {
    let open = OpenTask::open(ctx, endpoint, id)?;
    gateway
        .tasks
        .delete(&ctx.snapshot, (&open.task).into())
        .await?;
    let object = open.task.kind.as_str();
    Ok(json(
        StatusCode::OK,
        &json!({"id": id, "object": object, "deleted": true}),
    ))
}
