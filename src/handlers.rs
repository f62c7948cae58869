//! The innermost service: route by path, then the handlers (submit, query,
//! content), each a short sequence of steps that live in their own modules. What is
//! here is only what those steps share: opening a task id for its owner, the results
//! cache lookup, and how the content URL is formed.

use std::convert::Infallible;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use serde::Serialize;
use serde_json::Value;
use tower::Service;

use crate::app::Gateway;
use crate::auth::ApiKey;
use crate::body::{ResponseBody, ResponseFuture, full, read_json_body};
use crate::cache::TaskCache;
use crate::error::ApiError;
use crate::provider::{Call, Provider, SubmitError};
use crate::request_log::LogFields;
use crate::routing::{Endpoint, Route, route};
use crate::snapshot::Snapshot;
use crate::task::{SubmitResponse, TaskState, TaskStatus, TaskView};
use crate::task_id::TaskId;

/// Routes a request and runs its handler, under the overall request timeout.
#[derive(Clone)]
pub struct Dispatch {
    gateway: Arc<Gateway>,
}

impl Dispatch {
    pub fn new(gateway: Arc<Gateway>) -> Self {
        Self { gateway }
    }
}

impl<B> Service<Request<B>> for Dispatch
where
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    type Response = Response<ResponseBody>;
    type Error = Infallible;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let gateway = self.gateway.clone();
        Box::pin(async move {
            let (snapshot, key) = (
                req.extensions().get::<Arc<Snapshot>>().cloned(),
                req.extensions().get::<Arc<ApiKey>>().cloned(),
            );
            let Some(snapshot) = snapshot else {
                return Ok(ApiError::shutting_down().into_response());
            };
            let timeout = Duration::from_millis(snapshot.server.request_timeout_ms);
            let handled =
                tokio::time::timeout(timeout, handle(&gateway, &snapshot, key, req)).await;
            Ok(match handled {
                Ok(Ok(resp)) => resp,
                Ok(Err((e, fields))) => {
                    let mut resp = e.into_response();
                    fields.attach(&mut resp);
                    resp
                }
                Err(_) => ApiError::request_timeout().into_response(),
            })
        })
    }
}

type Handled = Result<Response<ResponseBody>, (ApiError, LogFields)>;

async fn handle<B>(
    gateway: &Gateway,
    snapshot: &Snapshot,
    key: Option<Arc<ApiKey>>,
    req: Request<B>,
) -> Handled
where
    B: http_body::Body<Data = bytes::Bytes>,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let no_fields = |e| (e, LogFields::default());
    let path = req.uri().path().to_owned();
    let route = route(req.method(), &path).map_err(no_fields)?;
    match (route, key) {
        (Route::Health, _) => Ok(healthy()),
        (Route::Ready, _) if gateway.is_draining() => Err(no_fields(ApiError::shutting_down())),
        (Route::Ready, _) => Ok(json(
            StatusCode::OK,
            &serde_json::json!({"status": "ready"}),
        )),
        (Route::Submit(endpoint), Some(key)) => submit(snapshot, &key, endpoint, req).await,
        (Route::Query(endpoint, id), Some(key)) => {
            let public = PublicBase::of(&req);
            query(gateway, snapshot, &key, endpoint, id, &public).await
        }
        (Route::Content(endpoint, id), Some(key)) => {
            let range = req.headers().get(header::RANGE).cloned();
            content(gateway, snapshot, &key, endpoint, id, range).await
        }
        // The auth layer lets no unauthenticated request through to these routes.
        (_, None) => Err(no_fields(ApiError::invalid_key())),
    }
}

/// `GET /healthz`: the process is up (also served by the admin listener).
pub fn healthy() -> Response<ResponseBody> {
    json(StatusCode::OK, &serde_json::json!({"status": "ok"}))
}

fn json(status: StatusCode, value: &impl Serialize) -> Response<ResponseBody> {
    let mut resp = Response::new(full(serde_json::to_vec(value).unwrap_or_default()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Bounded body read → model lookup → permission → validation → provider (with
/// failover) → sealed id.
async fn submit<B>(
    snapshot: &Snapshot,
    key: &ApiKey,
    endpoint: Endpoint,
    req: Request<B>,
) -> Handled
where
    B: http_body::Body<Data = bytes::Bytes>,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let mut fields = LogFields::default();
    let (parts, body) = req.into_parts();
    let bytes = read_json_body(&parts.headers, body, snapshot.server.max_body_bytes)
        .await
        .map_err(|e| (e, LogFields::default()))?;
    let mut params = match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(map)) => map,
        Ok(_) => return Err((ApiError::not_an_object(), fields)),
        Err(e) => return Err((ApiError::invalid_json(e), fields)),
    };
    let Some(Value::String(model_id)) = params.remove("model") else {
        return Err((ApiError::missing_model(), fields));
    };
    let Some(model) = snapshot.model(&model_id, endpoint) else {
        return Err((ApiError::unknown_model(&model_id, endpoint.path()), fields));
    };
    fields.model = Some(model.id.clone());
    if !key.may_use(&model.id) {
        return Err((ApiError::model_not_allowed(&model.id), fields));
    }
    let params = Value::Object(params);
    if let Err(e) = model.validator.check(&model.id, &params) {
        return Err((e, fields));
    }

    let call = Call {
        model: &model.id,
        upstream_model: &model.upstream_model,
        kind: model.kind,
    };
    let mut refusal = None;
    for provider in &model.providers {
        fields.provider = Some(provider.name.clone());
        match provider.submit(call, &params).await {
            Ok(created) => {
                fields.upstream = Some(created.upstream_time);
                let task = TaskId {
                    provider: provider.name.clone(),
                    upstream_id: created.upstream_id,
                    model: model.id.clone(),
                    kind: model.kind,
                    owner: key.name.to_string(),
                    created: unix_now(),
                };
                let Ok(id) = snapshot.sealer.seal(&task) else {
                    // The task exists upstream: log its id so it can be recovered.
                    tracing::error!(
                        provider = %provider.name,
                        upstream_id = %task.upstream_id,
                        "upstream task id too long to seal; the task was created upstream"
                    );
                    return Err((
                        ApiError::upstream_bad_answer("submit", "its task id is too long"),
                        fields,
                    ));
                };
                let mut resp = json(
                    StatusCode::OK,
                    &SubmitResponse {
                        id: &id,
                        object: model.kind,
                        model: &model.id,
                        status: created.status,
                        created: task.created,
                    },
                );
                fields.attach(&mut resp);
                return Ok(resp);
            }
            Err(SubmitError::Refused(e)) => {
                tracing::warn!(provider = %provider.name, code = e.code, "provider refused the submit; trying the next one");
                refusal = Some(e);
            }
            Err(SubmitError::Failed(e)) => return Err((e, fields)),
        }
    }
    Err((
        refusal.unwrap_or_else(|| ApiError::no_provider("the model has no usable provider")),
        fields,
    ))
}

/// A task id opened for its owner, with the provider sealed in it.
struct OpenTask<'s> {
    task: TaskId,
    provider: &'s Arc<Provider>,
    /// `None` when the model is no longer configured: its own id is used.
    upstream_model: Option<&'s str>,
}

impl OpenTask<'_> {
    fn call(&self) -> Call<'_> {
        Call {
            model: &self.task.model,
            upstream_model: self.upstream_model.unwrap_or(&self.task.model),
            kind: self.task.kind,
        }
    }
}

/// Open the id, check the owner and the endpoint, find the provider sealed in it.
/// Made-up, tampered, other keys' and other endpoints' ids all look the same (404).
fn open_task<'s>(
    snapshot: &'s Snapshot,
    key: &ApiKey,
    endpoint: Endpoint,
    id: &str,
    fields: &mut LogFields,
) -> Result<OpenTask<'s>, ApiError> {
    let task = snapshot
        .sealer
        .open(id)
        .filter(|t| *t.owner == *key.name)
        .filter(|t| {
            snapshot
                .models
                .get(&t.model)
                .is_none_or(|m| m.endpoints.contains(&endpoint))
        })
        .ok_or_else(ApiError::task_not_found)?;
    fields.model = Some(task.model.clone());
    fields.provider = Some(task.provider.clone());
    let provider = snapshot.providers.get(&task.provider).ok_or_else(|| {
        tracing::warn!(provider = %task.provider, "task of a provider that is no longer configured");
        ApiError::no_provider("the task's provider is no longer configured")
    })?;
    let upstream_model = snapshot
        .models
        .get(&task.model)
        .map(|m| m.upstream_model.as_str());
    Ok(OpenTask {
        task,
        provider,
        upstream_model,
    })
}

/// How the client reached us, to form absolute content URLs when the provider sets
/// no `content.public_base_url`: `X-Forwarded-Proto` (`http`/`https`, default `http`)
/// and the `Host` header (or the HTTP/2 authority). Only the asking client sees the
/// result, so what it sends is only reflected back to itself.
struct PublicBase<'r> {
    headers: &'r http::HeaderMap,
    authority: Option<&'r http::uri::Authority>,
}

impl<'r> PublicBase<'r> {
    /// Borrows the request; nothing is parsed unless a content URL is formed.
    fn of<B>(req: &'r Request<B>) -> Self {
        Self {
            headers: req.headers(),
            authority: req.uri().authority(),
        }
    }

    /// `{base}{collection}/{id}/content`; relative when nothing names the gateway.
    fn content_url(&self, configured: Option<&str>, endpoint: Endpoint, id: &str) -> String {
        let base = match configured {
            Some(base) => base.to_string(),
            None => self.as_seen_by_client().unwrap_or_default(),
        };
        format!("{base}{}/{id}/content", endpoint.path())
    }

    fn as_seen_by_client(&self) -> Option<String> {
        let proto = match self
            .headers
            .get("x-forwarded-proto")
            .and_then(|v| v.to_str().ok())
            // The first proxy's view: `https, http` means the client used https.
            .and_then(|v| v.split(',').next())
        {
            Some(p) if p.trim().eq_ignore_ascii_case("https") => "https",
            _ => "http",
        };
        let host = self
            .headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .or_else(|| self.authority.map(|a| a.to_string()))
            .filter(|h| h.parse::<http::uri::Authority>().is_ok())?;
        Some(format!("{proto}://{host}"))
    }
}

/// The task's state: from the cache, or queried from the provider sealed in the id.
async fn task_state(
    gateway: &Gateway,
    open: &OpenTask<'_>,
    fields: &mut LogFields,
) -> Result<Arc<TaskState>, ApiError> {
    let (task, provider) = (&open.task, open.provider);
    let upstream_time = OnceLock::new();
    let state = gateway
        .cache
        .get_or_fetch(TaskCache::key(&task.provider, &task.upstream_id), async {
            let (state, took) = provider.query(open.call(), &task.upstream_id).await?;
            let _ = upstream_time.set(took);
            Ok(state)
        })
        .await;
    fields.upstream = upstream_time.get().copied();
    state
}

/// Open the id (owner checked) → cached or upstream state → public view.
async fn query(
    gateway: &Gateway,
    snapshot: &Snapshot,
    key: &ApiKey,
    endpoint: Endpoint,
    id: &str,
    public: &PublicBase<'_>,
) -> Handled {
    let mut fields = LogFields::default();
    let open = match open_task(snapshot, key, endpoint, id, &mut fields) {
        Ok(open) => open,
        Err(e) => return Err((e, fields)),
    };
    let (task, provider) = (&open.task, open.provider);
    let mut state = task_state(gateway, &open, &mut fields)
        .await
        .map_err(|e| (e, fields.clone()))?;
    // A result only the upstream key can download is served by our content route.
    if state.status == TaskStatus::Completed
        && let Some(configured) = provider.content_url_base()
    {
        Arc::make_mut(&mut state).urls = vec![public.content_url(configured, endpoint, id)];
    }
    let mut resp = json(
        StatusCode::OK,
        &TaskView::new(id, task.kind, &task.model, task.created, &state),
    );
    fields.attach(&mut resp);
    Ok(resp)
}

/// Headers of an upstream content answer passed on to the client.
const CONTENT_HEADERS: [header::HeaderName; 8] = [
    header::CONTENT_TYPE,
    header::CONTENT_LENGTH,
    header::CONTENT_RANGE,
    header::ACCEPT_RANGES,
    header::CONTENT_DISPOSITION,
    header::ETAG,
    header::LAST_MODIFIED,
    header::CACHE_CONTROL,
];

/// Open the id (owner checked, same 404 as a query) → the completed state (cached
/// or queried) → upstream content request with our key → the bytes streamed through
/// as they arrive.
async fn content(
    gateway: &Gateway,
    snapshot: &Snapshot,
    key: &ApiKey,
    endpoint: Endpoint,
    id: &str,
    range: Option<HeaderValue>,
) -> Handled {
    let mut fields = LogFields::default();
    let open = match open_task(snapshot, key, endpoint, id, &mut fields) {
        Ok(open) => open,
        Err(e) => return Err((e, fields)),
    };
    let state = match task_state(gateway, &open, &mut fields).await {
        Ok(state) if state.status == TaskStatus::Completed => state,
        Ok(_) => return Err((ApiError::content_not_ready(), fields)),
        Err(e) => return Err((e, fields)),
    };
    let upstream = match open
        .provider
        .content(open.call(), &open.task.upstream_id, &state.urls, range)
        .await
    {
        Ok(r) => r,
        Err(e) => return Err((e, fields)),
    };
    let (parts, body) = upstream.into_parts();
    let mut resp = Response::new(BodyExt::boxed(body));
    // 200, or 206 for a range.
    *resp.status_mut() = parts.status;
    for name in CONTENT_HEADERS {
        if let Some(value) = parts.headers.get(&name) {
            resp.headers_mut().insert(name, value.clone());
        }
    }
    fields.attach(&mut resp);
    Ok(resp)
}
