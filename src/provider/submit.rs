//! Submit: build the upstream request from the validated parameters, send it, and
//! decide what the answer proves. Only an answer that proves no task was created is
//! `Refused` (the caller may fail over); everything else is `Failed`.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use jaq_json::Val;
use serde_json::Value;

use super::client::{Answer, CallError};
use super::transform::{JqVars, from_json, parse, to_text};
use super::{Call, Provider, retry_after};
use crate::error::ApiError;
use crate::task::TaskStatus;

/// A created upstream task.
#[derive(Debug)]
pub struct Submitted {
    pub upstream_id: String,
    pub status: TaskStatus,
    pub upstream_time: Duration,
}

/// A submit that did not create a task, or may have.
#[derive(Debug)]
pub enum SubmitError {
    /// The upstream certainly created no task: the next provider may be tried.
    Refused(ApiError),
    /// Definite failure, or an unknown outcome: never retried elsewhere.
    Failed(ApiError),
}

impl Provider {
    /// Create a task upstream.
    pub async fn submit(&self, call: Call<'_>, params: &Value) -> Result<Submitted, SubmitError> {
        let request = self
            .build_submit(call, params)
            .map_err(SubmitError::Refused)?;
        let started = Instant::now();
        let answer = self.client.call(request, self.submit_timeout).await;
        let upstream_time = started.elapsed();
        let answer = match answer {
            Ok(a) => a,
            Err(CallError::Unreached(e)) => {
                tracing::warn!(provider = %self.name, error = %e, "submit: provider unreachable");
                return Err(SubmitError::Refused(ApiError::upstream_failed(
                    "submit",
                    "could not connect",
                )));
            }
            Err(CallError::Broken(e)) => {
                tracing::warn!(provider = %self.name, error = %e, "submit: outcome unknown");
                return Err(SubmitError::Failed(ApiError::upstream_failed(
                    "submit",
                    "connection broke before an answer",
                )));
            }
            Err(CallError::TimedOut) => {
                return Err(SubmitError::Failed(ApiError::upstream_timeout("submit")));
            }
        };
        let vars = call.vars(None);
        self.read_submit_answer(answer, &vars)
            .map(|(upstream_id, status)| Submitted {
                upstream_id,
                status,
                upstream_time,
            })
    }

    fn build_submit(
        &self,
        call: Call<'_>,
        params: &Value,
    ) -> Result<Request<Full<Bytes>>, ApiError> {
        let input = from_json(params);
        let vars = JqVars::new(
            call.model,
            call.upstream_model,
            call.kind,
            None,
            Some(input.clone()),
        );
        let plan = &self.submit;
        let body = match &plan.body {
            Some(jq) => jq.json(input.clone(), &vars).map_err(|e| {
                ApiError::upstream_failed("submit", format!("`submit.body` failed: {e}"))
            })?,
            None => {
                let mut with_model = serde_json::Map::new();
                with_model.insert("model".into(), Value::from(call.upstream_model));
                if let Value::Object(p) = params {
                    with_model.extend(p.iter().map(|(k, v)| (k.clone(), v.clone())));
                }
                Value::Object(with_model)
            }
        };
        let body = serde_json::to_vec(&body).unwrap_or_default();
        self.build(
            "submit",
            &plan.method,
            &plan.path,
            plan.query.as_ref(),
            Some(body),
            Some(&self.submit_headers),
            &input,
            &vars,
        )
    }

    /// The upstream's reason for refusing a submit, cleaned for the client.
    fn refusal_reason(&self, body: Val, vars: &JqVars) -> Option<String> {
        let reason = self.submit.error_message.first(body, vars).ok().flatten()?;
        to_text(&reason).map(|m| self.redactor.clean(&m))
    }

    fn read_submit_answer(
        &self,
        answer: Answer,
        vars: &JqVars,
    ) -> Result<(String, TaskStatus), SubmitError> {
        use SubmitError::{Failed, Refused};
        let status = answer.status;
        let parsed = parse(&answer.body);
        if !status.is_success() {
            let reason = parsed
                .ok()
                .and_then(|body| self.refusal_reason(body, vars))
                .unwrap_or_else(|| status.canonical_reason().unwrap_or("error").to_string());
            return Err(match status {
                StatusCode::TOO_MANY_REQUESTS => Refused(ApiError::upstream_rate_limited(
                    retry_after(&answer.headers),
                )),
                StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                    tracing::error!(provider = %self.name, %status, "provider refused our credentials");
                    Refused(ApiError::upstream_auth())
                }
                StatusCode::SERVICE_UNAVAILABLE => Refused(ApiError::upstream_failed(
                    "submit",
                    format!("unavailable ({reason})"),
                )),
                // No such endpoint or method: a configuration mistake, not the
                // client's; nothing was created, so another provider may serve it.
                StatusCode::NOT_FOUND
                | StatusCode::METHOD_NOT_ALLOWED
                | StatusCode::NOT_IMPLEMENTED => {
                    tracing::error!(provider = %self.name, %status, "submit endpoint refused; check submit.path and submit.method");
                    Refused(ApiError::upstream_failed(
                        "submit",
                        format!("answered HTTP {}", status.as_u16()),
                    ))
                }
                s if s.is_client_error() => Failed(ApiError::upstream_invalid_request(&reason)),
                s => Failed(ApiError::upstream_failed(
                    "submit",
                    format!("answered HTTP {} ({reason})", s.as_u16()),
                )),
            });
        }
        // From here the upstream may have created a task: every failure is `Failed`.
        let bad = |what: String| Failed(ApiError::upstream_bad_answer("submit", what));
        let body = parsed.map_err(|e| bad(format!("not JSON ({e})")))?;
        if let Some(success) = &self.submit.success {
            let ok = success
                .first(body.clone(), vars)
                .map_err(|e| bad(format!("`submit.success` failed: {e}")))?;
            if !matches!(ok, Some(Val::Bool(true))) {
                let reason = self
                    .refusal_reason(body.clone(), vars)
                    .unwrap_or_else(|| "no reason given".into());
                return Err(self.body_refusal(body, vars, &reason));
            }
        }
        let id = self
            .submit
            .id
            .first(body.clone(), vars)
            .map_err(|e| bad(format!("`submit.id` failed: {e}")))?
            .as_ref()
            .and_then(to_text)
            .filter(|id| !id.is_empty())
            .ok_or_else(|| bad("it has no task id".into()))?;
        let task_status = match &self.submit.status {
            Some(jq) => match jq.first(body, vars) {
                Ok(Some(v)) => to_text(&v)
                    .map(|w| self.query.reader.map_status(&self.name, &w))
                    .unwrap_or(TaskStatus::Queued),
                _ => TaskStatus::Queued,
            },
            None => TaskStatus::Queued,
        };
        // A task just created cannot be finished with a result yet as far as the
        // client is concerned; the first query reports the real outcome.
        let task_status = if task_status.is_terminal() {
            TaskStatus::Processing
        } else {
            task_status
        };
        Ok((id, task_status))
    }

    /// A 2xx submit answer whose `success` is not true, classified by `submit.refusal`:
    /// only an answer that says the upstream declined (rate limit, our key, down)
    /// lets the next provider try; anything else is the request's own fault.
    fn body_refusal(&self, body: Val, vars: &JqVars, reason: &str) -> SubmitError {
        let kind = match &self.submit.refusal {
            Some(jq) => match jq.first(body, vars) {
                Ok(Some(v)) => to_text(&v),
                Ok(None) => None,
                Err(e) => {
                    tracing::warn!(provider = %self.name, error = %e, "`submit.refusal` failed");
                    None
                }
            },
            None => None,
        };
        match kind.as_deref() {
            Some("rate_limited") => SubmitError::Refused(ApiError::upstream_rate_limited(None)),
            Some("auth") => {
                tracing::error!(provider = %self.name, "provider refused our credentials");
                SubmitError::Refused(ApiError::upstream_auth())
            }
            Some("unavailable") => SubmitError::Refused(ApiError::upstream_failed(
                "submit",
                format!("unavailable ({reason})"),
            )),
            _ => SubmitError::Failed(ApiError::upstream_invalid_request(reason)),
        }
    }
}
