//! The error catalogue: every refusal a client can receive, and its JSON shape.
//!
//! `{"error":{"message":"…","type":"…","code":"…","param":…}}`. Nothing else leaves
//! the gateway as an error: every layer turns its failures into an [`ApiError`].

use std::borrow::Cow;
use std::time::Duration;

use http::{HeaderValue, Response, StatusCode, header};
use serde::Serialize;

use crate::response::{ResponseBody, json};

/// Most characters of a request's own text (a model id, a parameter's name or value)
/// that an error quotes back.
pub const QUOTE_CHARS: usize = 200;

/// `text` as an error quotes it: at most [`QUOTE_CHARS`] characters, the rest counted.
pub fn quote(text: &str) -> Cow<'_, str> {
    match text.char_indices().nth(QUOTE_CHARS) {
        None => text.into(),
        Some((cut, _)) => format!("{}… ({} bytes)", &text[..cut], text.len()).into(),
    }
}

/// One refusal from the catalogue.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub kind: &'static str,
    pub code: &'static str,
    pub message: Cow<'static, str>,
    pub param: Option<String>,
    /// Seconds for `Retry-After` (429, 503).
    pub retry_after: Option<Duration>,
    /// Methods for `Allow` (405).
    pub allow: Option<&'static str>,
}

impl ApiError {
    fn new(
        status: StatusCode,
        kind: &'static str,
        code: &'static str,
        message: impl Into<Cow<'static, str>>,
    ) -> Self {
        Self {
            status,
            kind,
            code,
            message: message.into(),
            param: None,
            retry_after: None,
            allow: None,
        }
    }

    pub fn with_param(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into());
        self
    }

    pub fn with_retry_after(mut self, after: Duration) -> Self {
        self.retry_after = Some(after);
        self
    }

    // 401
    pub fn missing_key() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "missing_api_key",
            "missing API key: send `Authorization: Bearer <API_KEY>`",
        )
    }
    pub fn invalid_key() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "invalid_api_key",
            "invalid API key",
        )
    }

    // 403
    pub fn model_not_allowed(model: &str) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "permission_error",
            "model_not_allowed",
            format!("this API key may not use model `{model}`"),
        )
        .with_param("model")
    }

    // 400
    pub fn invalid_json(detail: impl std::fmt::Display) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "invalid_json",
            format!("request body is not valid JSON: {detail}"),
        )
    }
    pub fn not_an_object() -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "invalid_json",
            "request body must be a JSON object",
        )
    }
    /// A form that cannot be read (`POST /v1/videos`).
    pub fn invalid_form(detail: &str) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "invalid_form",
            format!("request body is not a valid multipart/form-data form: {detail}"),
        )
    }
    /// What the OpenAI API has and mediagate does not (`POST /v1/videos/{id}/remix`).
    pub fn unsupported(what: &str) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "unsupported",
            format!("{what} is not supported by this gateway"),
        )
    }
    pub fn missing_model() -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "missing_model",
            "`model` is required and must be a string",
        )
        .with_param("model")
    }
    pub fn unknown_model(model: &str, endpoint_path: &str) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "unknown_model",
            format!("model `{}` is not served on {endpoint_path}", quote(model)),
        )
        .with_param("model")
    }
    pub fn invalid_parameter(param: impl Into<String>, message: String) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "invalid_parameter",
            message,
        )
        .with_quoted_param(param.into())
    }
    pub fn unknown_parameter(param: impl Into<String>, message: String) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "unknown_parameter",
            message,
        )
        .with_quoted_param(param.into())
    }
    /// A parameter named by the client, who may have named it with a megabyte.
    fn with_quoted_param(self, param: String) -> Self {
        match quote(&param) {
            Cow::Borrowed(_) => self.with_param(param),
            Cow::Owned(short) => self.with_param(short),
        }
    }
    pub fn upstream_invalid_request(reason: &str) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "upstream_invalid_request",
            format!("the provider refused the request: {reason}"),
        )
    }

    // 404 / 405
    pub fn task_not_found() -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found_error",
            "task_not_found",
            "no task with this id",
        )
        .with_param("id")
    }
    /// A model id that is unknown on this endpoint or not allowed for the key: the
    /// same answer, so a key learns nothing about models it may not use.
    /// `GET /v1/videos/{id}/content?variant=…` of a variant no provider gives.
    pub fn variant_not_found(variant: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "variant_not_found",
            format!(
                "this video has no `{}` variant: its provider gives the video only",
                quote(variant)
            ),
        )
        .with_param("variant")
    }
    pub fn model_not_found() -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found_error",
            "model_not_found",
            "no model with this id on this endpoint for this API key",
        )
        .with_param("id")
    }
    pub fn path_not_found() -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found_error",
            "not_found",
            "no such endpoint",
        )
    }
    pub fn method_not_allowed(allow: &'static str) -> Self {
        let mut e = Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request_error",
            "method_not_allowed",
            format!("method not allowed here; allowed: {allow}"),
        );
        e.allow = Some(allow);
        e
    }

    // 408 / 413 / 415 / 429
    pub fn body_timeout() -> Self {
        Self::new(
            StatusCode::REQUEST_TIMEOUT,
            "invalid_request_error",
            "body_timeout",
            "request body was not received in time",
        )
    }
    pub fn body_too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            "body_too_large",
            format!("request body is larger than the limit of {limit} bytes"),
        )
    }
    /// `POST /v1/videos`, which also takes forms.
    pub fn unsupported_form() -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "invalid_request_error",
            "unsupported_media_type",
            "request body must be sent with `Content-Type: application/json` or `multipart/form-data`",
        )
    }
    pub fn unsupported_media_type() -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "invalid_request_error",
            "unsupported_media_type",
            "request body must be sent with `Content-Type: application/json`",
        )
    }
    pub fn rate_limited(after: Duration) -> Self {
        Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limit_error",
            "rate_limited",
            "too many requests; retry later",
        )
        .with_retry_after(after)
    }
    /// `after`: when the provider said to come back; a second when it did not say,
    /// as every 429 carries `Retry-After`.
    pub fn upstream_rate_limited(after: Option<Duration>) -> Self {
        Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limit_error",
            "upstream_rate_limited",
            "the provider is rate limiting requests; retry later",
        )
        .with_retry_after(after.unwrap_or(Duration::from_secs(1)))
    }

    // 502 / 503 / 504. Messages name the step that failed, never the provider: which
    // upstream serves a model is the operator's business (the access log has it).
    pub fn upstream_failed(step: &str, what: impl std::fmt::Display) -> Self {
        Self::new(
            StatusCode::BAD_GATEWAY,
            "upstream_error",
            "upstream_error",
            format!("upstream {step}: {what}"),
        )
    }
    pub fn upstream_bad_answer(step: &str, what: impl std::fmt::Display) -> Self {
        Self::new(
            StatusCode::BAD_GATEWAY,
            "upstream_error",
            "upstream_bad_response",
            format!("the provider gave an unusable {step} answer: {what}"),
        )
    }
    pub fn upstream_auth() -> Self {
        Self::new(
            StatusCode::BAD_GATEWAY,
            "upstream_error",
            "upstream_auth_failed",
            "the provider refused the gateway's credentials",
        )
    }
    pub fn upstream_timeout(step: &str) -> Self {
        Self::new(
            StatusCode::GATEWAY_TIMEOUT,
            "upstream_error",
            "upstream_timeout",
            format!("the provider did not answer the {step} in time"),
        )
    }
    pub fn request_timeout() -> Self {
        Self::new(
            StatusCode::GATEWAY_TIMEOUT,
            "upstream_error",
            "request_timeout",
            "the request did not complete in time",
        )
    }
    pub fn no_provider(what: &str) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "service_unavailable",
            "no_provider",
            format!("no provider available: {what}"),
        )
    }
    pub fn shutting_down() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "service_unavailable",
            "shutting_down",
            "the gateway is shutting down",
        )
    }

    /// The body of this error: `{"error":{"message","type","code","param"}}`.
    fn envelope(&self) -> impl Serialize + '_ {
        #[derive(Serialize)]
        struct Envelope<'a> {
            error: Inner<'a>,
        }
        #[derive(Serialize)]
        struct Inner<'a> {
            message: &'a str,
            #[serde(rename = "type")]
            kind: &'a str,
            code: &'a str,
            param: Option<&'a str>,
        }
        Envelope {
            error: Inner {
                message: &self.message,
                kind: self.kind,
                code: self.code,
                param: self.param.as_deref(),
            },
        }
    }

    /// The body as JSON text (kept by the ledger, to answer a retry the same way).
    pub fn body_text(&self) -> String {
        serde_json::to_string(&self.envelope()).unwrap_or_default()
    }

    /// The JSON response for this error.
    pub fn into_response(self) -> Response<ResponseBody> {
        let mut resp = json(self.status, &self.envelope());
        let h = resp.headers_mut();
        if self.status == StatusCode::UNAUTHORIZED {
            h.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if self.status == StatusCode::PAYLOAD_TOO_LARGE {
            // The rest of the body is left unread, so the connection cannot carry
            // another request: say so, or a keep-alive client reuses a closed socket.
            // (HTTP/2 drops connection headers; its streams are unaffected.)
            h.insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        if let Some(after) = self.retry_after {
            // Round up: "retry after 0 seconds" would invite an immediate retry.
            let secs = after.as_secs() + u64::from(after.subsec_nanos() > 0);
            h.insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
        }
        if let Some(allow) = self.allow {
            h.insert(header::ALLOW, HeaderValue::from_static(allow));
        }
        resp.extensions_mut().insert(ErrorCode(self.code));
        resp
    }

    // The ledger: idempotent submits, quotas, listing.
    /// A header that must be sent once was sent more than once: which one counts
    /// would be a guess (proxies and servers disagree), so neither does.
    pub fn repeated_header(name: &'static str) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "repeated_header",
            format!("`{name}` was sent more than once; send it once"),
        )
    }
    pub fn invalid_idempotency_key() -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "invalid_idempotency_key",
            "`Idempotency-Key` must be 1 to 255 visible ASCII characters",
        )
    }
    pub fn idempotency_key_required() -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "idempotency_key_required",
            "this API key must send an `Idempotency-Key` header with every submit",
        )
    }
    pub fn idempotency_key_reused() -> Self {
        Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request_error",
            "idempotency_key_reused",
            "this `Idempotency-Key` was already used with a different request; use a new key for a new request",
        )
    }
    pub fn idempotency_key_in_use() -> Self {
        Self::new(
            StatusCode::CONFLICT,
            "conflict_error",
            "idempotency_key_in_use",
            "the first request with this `Idempotency-Key` is still being processed; retry later",
        )
        .with_retry_after(Duration::from_secs(1))
    }
    pub fn submit_outcome_unknown() -> Self {
        Self::new(
            StatusCode::BAD_GATEWAY,
            "upstream_error",
            "submit_outcome_unknown",
            "the first request with this `Idempotency-Key` reached the provider but its outcome is unknown; it is not submitted again (the operator reconciles it)",
        )
    }
    pub fn quota_exceeded(what: &str, resets_in: Duration, resets_at: u64) -> Self {
        Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limit_error",
            "quota_exceeded",
            format!(
                "this API key has used its daily `{what}` quota; it resets at {resets_at} (Unix seconds, 00:00 UTC)"
            ),
        )
        .with_retry_after(resets_in)
    }
    /// A submit whose estimate does not fit in what remains of the key's budget.
    pub fn budget_exceeded(
        period: &str,
        remaining: &str,
        resets_in: Duration,
        resets_at: u64,
    ) -> Self {
        Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limit_error",
            "budget_exceeded",
            format!(
                "this task's price does not fit in what remains of this API key's `{period}` budget ({remaining}); it resets at {resets_at} (Unix seconds, 00:00 UTC)"
            ),
        )
        .with_retry_after(resets_in)
    }
    /// The model's price program failed on these parameters: the task could not be
    /// billed, so it is not submitted.
    pub fn price_unavailable(model: &str, why: &str) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "price_unavailable",
            format!(
                "the price of model `{model}` cannot be computed for these parameters ({why}); nothing was submitted"
            ),
        )
    }
    pub fn ledger_unavailable() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "service_unavailable",
            "ledger_unavailable",
            "the task ledger is unavailable; retry later (a submit refused so reached no provider)",
        )
        .with_retry_after(Duration::from_secs(1))
    }
    pub fn ledger_off() -> Self {
        Self::new(
            StatusCode::NOT_IMPLEMENTED,
            "not_implemented_error",
            "ledger_off",
            "listing tasks needs the task ledger, which is off on this gateway",
        )
    }

    /// The owner asked for the content of a task that is not completed.
    pub fn content_not_ready() -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found_error",
            "content_not_ready",
            "the task has no result yet: query it until its status is `completed`",
        )
        .with_param("id")
    }

    /// DELETE of an unfinished task whose provider has no cancel step.
    pub fn not_cancelable() -> Self {
        Self::new(
            StatusCode::CONFLICT,
            "invalid_request_error",
            "not_cancelable",
            "the task is not finished and its provider cannot cancel it; delete it once it has finished",
        )
    }
    /// DELETE of an unfinished task its provider would not stop (its cancel
    /// step's `success` said no): it may be about to finish.
    pub fn not_canceled() -> Self {
        Self::new(
            StatusCode::CONFLICT,
            "invalid_request_error",
            "not_cancelable",
            "the task's provider would not cancel it (it may be about to finish); query it, and delete it once it has finished",
        )
    }
    /// A signed link past its expiry.
    pub fn link_expired() -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "permission_error",
            "link_expired",
            "this link has expired: query the task for a fresh one",
        )
    }
    /// A signed link whose signature does not hold for this task, result and expiry.
    pub fn invalid_signature() -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "permission_error",
            "invalid_signature",
            "this link's signature is not valid for this result",
        )
    }
    /// The stored result was deleted: its `keep_days` passed, or the task was deleted.
    pub fn result_expired() -> Self {
        Self::new(
            StatusCode::GONE,
            "not_found_error",
            "result_expired",
            "this result is no longer kept: its retention has passed or it was deleted",
        )
    }
    /// Storage could not be read.
    pub fn storage_unavailable() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "service_unavailable",
            "storage_unavailable",
            "the result storage is unavailable; retry later",
        )
        .with_retry_after(Duration::from_secs(1))
    }

    // 416
    pub fn range_not_satisfiable() -> Self {
        Self::new(
            StatusCode::RANGE_NOT_SATISFIABLE,
            "invalid_request_error",
            "range_not_satisfiable",
            "the requested range is outside the content",
        )
    }

    // 503, one client address holding its share of connections (through a proxy)
    pub fn too_many_connections() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "service_unavailable",
            "too_many_connections",
            "this client address already has its share of connections in progress; retry later",
        )
        .with_retry_after(Duration::from_secs(1))
    }

    // 503, per-key load shedding
    pub fn key_overloaded(max: usize) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "service_unavailable",
            "too_many_concurrent_requests",
            format!("this API key already has {max} requests in progress; retry later"),
        )
        .with_retry_after(Duration::from_secs(1))
    }
}

impl ApiError {
    /// One refusal of every kind in the catalogue (messages and values are
    /// placeholders): what the OpenAPI document and docs/api.md list.
    pub fn catalogue() -> Vec<ApiError> {
        let second = Duration::from_secs(1);
        vec![
            Self::too_many_connections(),
            Self::invalid_json("…"),
            Self::invalid_form("…"),
            Self::unsupported("…"),
            Self::missing_model(),
            Self::unknown_model("…", "…"),
            Self::invalid_parameter("…", String::new()),
            Self::unknown_parameter("…", String::new()),
            Self::upstream_invalid_request("…"),
            Self::repeated_header("…"),
            Self::invalid_idempotency_key(),
            Self::idempotency_key_required(),
            Self::missing_key(),
            Self::invalid_key(),
            Self::model_not_allowed("…"),
            Self::task_not_found(),
            Self::content_not_ready(),
            Self::link_expired(),
            Self::not_cancelable(),
            Self::invalid_signature(),
            Self::result_expired(),
            Self::variant_not_found("…"),
            Self::storage_unavailable(),
            Self::model_not_found(),
            Self::path_not_found(),
            Self::method_not_allowed("GET"),
            Self::body_timeout(),
            Self::idempotency_key_in_use(),
            Self::body_too_large(0),
            Self::unsupported_media_type(),
            Self::range_not_satisfiable(),
            Self::idempotency_key_reused(),
            Self::quota_exceeded("…", second, 0),
            Self::budget_exceeded("…", "…", second, 0),
            Self::price_unavailable("…", "…"),
            Self::rate_limited(second),
            Self::upstream_rate_limited(None),
            Self::ledger_off(),
            Self::upstream_failed("…", "…"),
            Self::upstream_bad_answer("…", "…"),
            Self::upstream_auth(),
            Self::submit_outcome_unknown(),
            Self::ledger_unavailable(),
            Self::key_overloaded(0),
            Self::no_provider("…"),
            Self::shutting_down(),
            Self::upstream_timeout("…"),
            Self::request_timeout(),
        ]
    }
}

/// Marker left on error responses so the request log can name the refusal.
#[derive(Debug, Clone, Copy)]
pub struct ErrorCode(pub &'static str);
