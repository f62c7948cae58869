//! `POST {collection}`: bounded body read → model lookup → the key's permission →
//! parameter validation → the ledger's admission (idempotency key, quota, the
//! write-ahead row) → the model's providers in failover order → sealed id → the row
//! completed. Once the request may reach a provider, the submit runs detached: a
//! client that goes away or a request timeout does not stop it, so the ledger always
//! learns what the provider answered.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{Request, Response, StatusCode};
use serde_json::Value;

use super::{callback, idempotency};
use crate::api::context::{Ctx, RequestContext};
use crate::api::shapes::SubmitResponse;
use crate::config::Endpoint;
use crate::edge::body::read_json_body;
use crate::error::ApiError;
use crate::gateway::Gateway;
use crate::models::Model;
use crate::providers::{Provider, SubmitError, Submitted};
use crate::response::{ResponseBody, json};
use crate::tasks::TaskId;
use crate::tasks::ledger::{Admission, Answer, Created, Ledger, NewTask, fingerprint};

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
    let idempotency_key = match gateway.ledger {
        Some(_) => idempotency::read(req.headers(), key)?,
        None => None,
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
    let Some(ledger) = &gateway.ledger else {
        if body.callback_url.is_some() {
            let msg = "webhooks need the task ledger, and this gateway runs without one";
            return Err(ApiError::invalid_parameter("callback_url", msg.into()));
        }
        let created = forward(ctx, model, &params, None).await;
        return created.map(|c| c.response()).map_err(Failure::into_error);
    };
    let explicit = body.callback_url.is_some();
    let callback_url = callback::target(ctx, key, body.callback_url).await?;
    let new = NewTask {
        owner: &key.name,
        endpoint,
        model: &model.id,
        kind: model.kind,
        // The key's own webhook_url is the operator's, not the request's: changing it
        // must not turn a client's retry into "another request".
        fingerprint: fingerprint(
            endpoint,
            &model.id,
            &params,
            callback_url.as_deref().filter(|_| explicit),
        ),
        idempotency_key: idempotency_key.as_deref(),
        video_seconds,
        quota: key.quota,
        provider: model.providers.first().map(|p| p.name.as_str()),
        callback_url: callback_url.as_deref(),
    };
    let admission = ledger.admit(&new).await.map_err(|e| {
        gateway.metrics.ledger_errors.inc();
        tracing::error!(error = %e, "ledger write failed; submit refused before the provider");
        ApiError::ledger_unavailable()
    })?;
    admitted(gateway, ctx, ledger, model, params, admission).await
}

/// What the ledger's admission means for the client: the submit (detached), or an
/// answer about its `Idempotency-Key` or its quota.
async fn admitted(
    gateway: &Gateway,
    ctx: &Ctx,
    ledger: &Arc<Ledger>,
    model: &Arc<Model>,
    params: Value,
    admission: Admission,
) -> Result<Response<ResponseBody>, ApiError> {
    match admission {
        Admission::Fresh(row) => {
            let job = detached(ledger.clone(), ctx.clone(), model.clone(), params, row);
            match gateway.submits.spawn(job).await {
                Ok(outcome) => outcome.map(|created| created.response()),
                Err(_) => Err(ApiError::submit_outcome_unknown()),
            }
        }
        Admission::Replay(answer) => Ok(idempotency::replay(&answer)),
        Admission::InFlight(row) => {
            let wait = Duration::from_millis(ctx.snapshot.ledger.idempotency_wait_ms);
            idempotency::wait_for_first(ledger, row, wait).await
        }
        Admission::Mismatch => Err(ApiError::idempotency_key_reused()),
        Admission::OutcomeUnknown => Err(ApiError::submit_outcome_unknown()),
        Admission::QuotaExceeded { what, resets_ms } => Err(quota_exceeded(what, resets_ms)),
    }
}

/// The submit from the first provider on, owned by its own task: it runs to its end
/// (bounded by the providers' submit timeouts) and writes the outcome to the row.
async fn detached(
    ledger: Arc<Ledger>,
    ctx: Ctx,
    model: Arc<Model>,
    params: Value,
    row: i64,
) -> Result<Forwarded, ApiError> {
    let outcome = forward(&ctx, &model, &params, Some((&ledger, row))).await;
    let written = match &outcome {
        Ok(created) => {
            let answer = created.answer();
            let done = Created {
                provider: &created.task.provider,
                upstream_id: &created.task.upstream_id,
                task_id: &created.id,
                status: created.status,
                answer: &answer,
                first_poll: created.first_poll,
            };
            ledger.created(row, &done).await
        }
        Err(Failure::Refused(_)) => ledger.refused(row, None).await,
        Err(Failure::Rejected(e)) => ledger.refused(row, Some(&error_answer(e))).await,
        Err(Failure::Unknown(unknown)) => ledger.outcome_unknown(row, &unknown.1).await,
    };
    if let Err(e) = written {
        let upstream_id = outcome.as_ref().ok().map(|c| c.task.upstream_id.as_str());
        tracing::error!(row, upstream_id, error = %e, "ledger update failed after the submit");
    }
    outcome.map_err(Failure::into_error)
}

/// A task the upstream created, with its sealed id.
struct Forwarded {
    task: TaskId,
    id: String,
    status: crate::tasks::TaskStatus,
    /// When the tracker first asks about it.
    first_poll: Duration,
}

impl Forwarded {
    fn body(&self) -> SubmitResponse<'_> {
        SubmitResponse {
            id: &self.id,
            object: self.task.kind,
            model: &self.task.model,
            status: self.status,
            created: self.task.created,
        }
    }

    fn response(&self) -> Response<ResponseBody> {
        json(StatusCode::OK, &self.body())
    }

    /// The same answer as text, kept for a retry with the same key.
    fn answer(&self) -> Answer {
        Answer {
            status: 200,
            body: serde_json::to_string(&self.body()).unwrap_or_default(),
        }
    }
}

/// A submit that created no task, or may have.
enum Failure {
    /// Every provider declined: nothing exists upstream; the same request may be
    /// tried again.
    Refused(ApiError),
    /// The request itself was refused: nothing exists upstream; retrying is futile.
    Rejected(ApiError),
    /// It may exist upstream (at the named provider): never submitted again.
    Unknown(Box<(ApiError, String)>),
}

impl Failure {
    fn into_error(self) -> ApiError {
        match self {
            Self::Refused(e) | Self::Rejected(e) => e,
            Self::Unknown(unknown) => unknown.0,
        }
    }
}

/// Submit to the model's providers in order; the next is tried only when one proves
/// it created no task. Each attempt is named on the ledger row first.
async fn forward(
    ctx: &RequestContext,
    model: &Model,
    params: &Value,
    ledger: Option<(&Ledger, i64)>,
) -> Result<Forwarded, Failure> {
    let mut refusal = None;
    for (n, provider) in model.providers.iter().enumerate() {
        ctx.note(|f| f.provider = Some(provider.name.clone()));
        // The row names the first provider from the start; each next one is noted.
        if n > 0
            && let Some((ledger, row)) = ledger
            && let Err(e) = ledger.attempt(row, &provider.name).await
        {
            tracing::warn!(row, error = %e, "ledger update failed before a provider attempt");
        }
        match provider.submit(model.call(), params).await {
            Ok(created) => {
                ctx.note(|f| f.upstream = Some(created.upstream_time));
                return seal(ctx, model, provider, created);
            }
            Err(SubmitError::Refused(e)) => {
                tracing::warn!(provider = %provider.name, code = e.code, "provider refused the submit; trying the next one");
                refusal = Some(e);
            }
            Err(SubmitError::Rejected(e)) => return Err(Failure::Rejected(e)),
            Err(SubmitError::Unknown(e)) => {
                return Err(Failure::Unknown(Box::new((e, provider.name.clone()))));
            }
        }
    }
    let e = refusal.unwrap_or_else(|| ApiError::no_provider("the model has no usable provider"));
    Err(Failure::Refused(e))
}

/// The created task's sealed id.
fn seal(
    ctx: &RequestContext,
    model: &Model,
    provider: &Provider,
    created: Submitted,
) -> Result<Forwarded, Failure> {
    let task = TaskId {
        provider: provider.name.clone(),
        upstream_id: created.upstream_id,
        model: model.id.clone(),
        kind: model.kind,
        owner: ctx.key().map(|k| k.name.to_string()).unwrap_or_default(),
        created: unix_now(),
    };
    match ctx.snapshot.sealer.seal(&task) {
        Ok(id) => Ok(Forwarded {
            task,
            id,
            status: created.status,
            first_poll: provider.poll_interval(),
        }),
        Err(_) => {
            // The task exists upstream: log its id so it can be recovered.
            tracing::error!(
                provider = %provider.name,
                upstream_id = %task.upstream_id,
                "upstream task id too long to seal; the task was created upstream"
            );
            let e = ApiError::upstream_bad_answer("submit", "its task id is too long");
            Err(Failure::Unknown(Box::new((e, provider.name.clone()))))
        }
    }
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

fn quota_exceeded(what: &str, resets_ms: i64) -> ApiError {
    let now = crate::tasks::ledger::now_ms();
    let resets_in = Duration::from_millis(u64::try_from(resets_ms - now).unwrap_or(0));
    ApiError::quota_exceeded(
        what,
        resets_in,
        u64::try_from(resets_ms / 1000).unwrap_or(0),
    )
}

/// An error answer as the ledger keeps it.
fn error_answer(e: &ApiError) -> Answer {
    Answer {
        status: e.status.as_u16(),
        body: e.body_text(),
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
