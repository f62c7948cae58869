//! Submit: build the upstream request from the validated parameters, send it, and
//! read what the answer proves: `Refused` (no task; the caller may fail over),
//! `Rejected` (no task; the request is invalid) or `Unknown` (a task may exist).

use std::time::{Duration, Instant};

use jaq_json::Val;
use serde_json::Value;

use super::UpstreamError;
use super::answer::{Refusal, Step};
use super::document::Document;
use super::jq::{Jq, JqVars, from_json, to_text, write_json};
use super::plan::RequestPlan;
use super::{Call, Provider, header_map};
use crate::config::{Scope, SubmitConfig};
use crate::outbound::Reply;
use crate::tasks::TaskStatus;

/// Tried when a provider names no `error_message` program: the usual places.
const DEFAULT_ERROR_MESSAGE: &str = r#"if type == "object" then (.error.message? // .message? // .msg? // .detail? // .error? // .base_resp.status_msg?) else null end | if type == "string" then . else null end"#;

/// A task the upstream accepted: its id, the status it first gave, and how long it took.
#[derive(Debug)]
pub struct Accepted {
    pub upstream_id: String,
    pub status: TaskStatus,
    pub upstream_time: Duration,
}

/// A submit that did not create a task, or may have.
#[derive(Debug)]
pub enum SubmitError {
    /// The upstream declined and certainly created no task: the next provider may be
    /// tried.
    Refused(UpstreamError),
    /// The upstream refused the request itself (it is invalid): no task, and no other
    /// provider would take it either.
    Rejected(UpstreamError),
    /// The request was sent, but what became of it is unknown (no answer, an
    /// unreadable one, a server error): it may exist upstream. Never retried elsewhere.
    Unknown(UpstreamError),
}

/// The submit request and the programs that read its answer.
pub(super) struct SubmitPlan {
    request: RequestPlan,
    body: Option<Jq>,
    success: Option<Jq>,
    refusal: Option<Jq>,
    id: Jq,
    status: Option<Jq>,
    error_message: Jq,
}

impl SubmitPlan {
    pub(super) fn compile(c: &SubmitConfig, at: &mut Scope) -> Option<Self> {
        let headers = header_map(at, "headers", &c.headers);
        let request = RequestPlan::compile(Step::Submit, at, &c.method, &c.path, &c.query);
        let body = Jq::optional_at(at, "body", &c.body);
        let success = Jq::optional_at(at, "success", &c.success);
        let refusal = Jq::optional_at(at, "refusal", &c.refusal);
        let id = Jq::at(at, "id", &c.id);
        let status = Jq::optional_at(at, "status", &c.status);
        let error_message = Jq::at(
            at,
            "error_message",
            c.error_message.as_deref().unwrap_or(DEFAULT_ERROR_MESSAGE),
        );
        Some(Self {
            request: request?.with_headers(headers),
            body: body?,
            success: success?,
            refusal: refusal?,
            id: id?,
            status: status?,
            error_message: error_message?,
        })
    }
}

impl Provider {
    /// Create a task upstream.
    pub async fn submit(&self, call: Call<'_>, params: &Value) -> Result<Accepted, SubmitError> {
        let request = self
            .build_submit(call, params)
            .map_err(SubmitError::Refused)?;
        let started = Instant::now();
        let answer = self.client.call(request, self.submit_timeout).await;
        let upstream_time = started.elapsed();
        if let Ok(a) = &answer {
            let status = i64::from(a.status.as_u16());
            crate::traces::record([("http.response.status_code", Some(&status))]);
        }
        let answer = answer.map_err(|e| {
            tracing::warn!(provider = %self.name, error = %e, "submit: no answer");
            self.refused(Refusal::of_call(&e), None)
        })?;
        let (upstream_id, status) = self.read_submit_answer(answer, &call.vars(None))?;
        Ok(Accepted {
            upstream_id,
            status,
            upstream_time,
        })
    }

    fn build_submit(
        &self,
        call: Call<'_>,
        params: &Value,
    ) -> Result<http::Request<http_body_util::Full<bytes::Bytes>>, UpstreamError> {
        // `.` and `$params` of the programs: made only if one of them needs them (the
        // usual body `{model: $upstream_model} + .` and a path built once per model
        // do not).
        let inputs = || {
            let input = from_json(params);
            let vars = JqVars::new(
                call.model,
                call.upstream_model,
                call.kind,
                None,
                Some(input.clone()),
            );
            (input, vars)
        };
        let model_vars = call.vars(None);
        let merged = match (&self.submit.body, params) {
            (Some(jq), Value::Object(fields)) => jq.write_merged(fields, &model_vars),
            _ => None,
        };
        if let Some(body) = merged {
            return self
                .submit
                .request
                .build_lazily(&self.origin, &model_vars, inputs, Some(body))
                .map_err(|e| self.cleaned(e));
        }
        let (input, vars) = inputs();
        let body = match &self.submit.body {
            Some(jq) => match jq.first(input.clone(), &vars) {
                Ok(out) => out.as_ref().map_or_else(|| b"null".to_vec(), write_json),
                Err(e) => {
                    let e = self.redactor.clean(&e);
                    let msg = format!("`submit.body` failed: {e}");
                    return Err(UpstreamError::failed("submit", msg));
                }
            },
            None => {
                let mut with_model = serde_json::Map::new();
                with_model.insert("model".into(), Value::from(call.upstream_model));
                if let Value::Object(p) = params {
                    with_model.extend(p.iter().map(|(k, v)| (k.clone(), v.clone())));
                }
                crate::response::json_bytes(&with_model)
            }
        };
        self.submit
            .request
            .build(&self.origin, &input, &vars, Some(body))
            .map_err(|e| self.cleaned(e))
    }

    /// The catalogue error of a refusal, sorted by what it proves.
    fn refused(&self, refusal: Refusal, reason: Option<&str>) -> SubmitError {
        let (created_nothing, invalid) = (refusal.created_nothing(), refusal == Refusal::Invalid);
        let error = refusal.into_error(&self.name, Step::Submit, reason);
        match (created_nothing, invalid) {
            (true, _) => SubmitError::Refused(error),
            (false, true) => SubmitError::Rejected(error),
            (false, false) => SubmitError::Unknown(error),
        }
    }

    /// The upstream's reason for refusing a submit, cleaned for the client.
    fn refusal_reason(&self, body: &Document, vars: &JqVars) -> Option<String> {
        let reason = body
            .first(&self.submit.error_message, vars)
            .ok()
            .flatten()?;
        to_text(&reason).map(|m| self.redactor.clean(&m))
    }

    fn read_submit_answer(
        &self,
        answer: Reply,
        vars: &JqVars,
    ) -> Result<(String, TaskStatus), SubmitError> {
        let body = Document::new(&answer.body);
        let parsed = body.check();
        if let Some(refusal) = Refusal::of_status(Step::Submit, answer.status, &answer.headers) {
            let reason = parsed
                .ok()
                .and_then(|()| self.refusal_reason(&body, vars))
                .unwrap_or_else(|| answer.status.canonical_reason().unwrap_or("error").into());
            return Err(self.refused(refusal, Some(&reason)));
        }
        // From here the upstream may have created a task: every failure is `Unknown`.
        let bad = |what: String| {
            let what = self.redactor.clean(&what);
            SubmitError::Unknown(UpstreamError::bad_answer("submit", what))
        };
        parsed.map_err(|e| bad(format!("not JSON ({e})")))?;
        if let Some(success) = &self.submit.success {
            let ok = body
                .first(success, vars)
                .map_err(|e| bad(format!("`submit.success` failed: {e}")))?;
            if !matches!(ok, Some(Val::Bool(true))) {
                let reason = self.refusal_reason(&body, vars);
                let word = self.refusal_word(&body, vars);
                return Err(self.refused(Refusal::of_word(word.as_deref()), reason.as_deref()));
            }
        }
        let id = body
            .first(&self.submit.id, vars)
            .map_err(|e| bad(format!("`submit.id` failed: {e}")))?
            .as_ref()
            .and_then(to_text)
            .filter(|id| !id.is_empty())
            .ok_or_else(|| bad("it has no task id".into()))?;
        Ok((id, self.first_status(&body, vars)))
    }

    /// How `submit.refusal` classifies an answer whose `success` is not true.
    fn refusal_word(&self, body: &Document, vars: &JqVars) -> Option<String> {
        match body.first(self.submit.refusal.as_ref()?, vars) {
            Ok(word) => word.as_ref().and_then(to_text),
            Err(e) => {
                let e = self.redactor.for_log(&e);
                tracing::warn!(provider = %self.name, error = %e, "`submit.refusal` failed");
                None
            }
        }
    }

    /// The status a created task starts in. A task just created cannot be finished
    /// with a result yet as far as the client is concerned; the first query reports
    /// the real outcome.
    fn first_status(&self, body: &Document, vars: &JqVars) -> TaskStatus {
        let word = match &self.submit.status {
            Some(jq) => body.first(jq, vars).ok().flatten(),
            None => None,
        };
        match word.as_ref().and_then(to_text) {
            Some(w) => match self.query.reader.map_status(&self.name, &w, &self.redactor) {
                s if s.is_terminal() => TaskStatus::Processing,
                s => s,
            },
            None => TaskStatus::Queued,
        }
    }
}
