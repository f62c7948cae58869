//! Query: the status request, the answer read into our four statuses ([`super::status`]),
//! and the optional second (result) request of a completed task.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use jaq_json::Val;
use prometheus_client::metrics::counter::Counter;

use super::UpstreamError;
use super::answer::{Refusal, Step};
use super::document::Document;
use super::jq::{Jq, parse};
use super::plan::RequestPlan;
use super::status::{StatusReader, urls_from};
use super::{Call, Provider};
use crate::config::{QueryConfig, ResultConfig, Scope};
use crate::outbound::Reply;
use crate::tasks::{TaskState, TaskStatus};

/// The status request and how its answer is read.
pub(super) struct QueryPlan {
    request: RequestPlan,
    pub(super) reader: StatusReader,
}

impl QueryPlan {
    pub(super) fn compile(c: &QueryConfig, at: &mut Scope, unmapped: &Counter) -> Option<Self> {
        let request = RequestPlan::compile(Step::Query, at, &c.method, &c.path, &c.query);
        let reader = StatusReader::compile(c, at, unmapped);
        Some(Self {
            request: request?,
            reader: reader?,
        })
    }
}

/// The second request of a completed task: `.` is the status answer for its path and
/// query; `urls` reads its own answer.
pub(super) struct ResultPlan {
    request: RequestPlan,
    urls: Jq,
}

impl ResultPlan {
    pub(super) fn compile(c: &ResultConfig, at: &mut Scope) -> Option<Self> {
        let request = RequestPlan::compile(Step::Result, at, &c.method, &c.path, &c.query);
        let urls = Jq::at(at, "urls", &c.urls);
        Some(Self {
            request: request?,
            urls: urls?,
        })
    }
}

/// A task's state as its provider answered it.
pub struct Queried {
    pub state: TaskState,
    /// The time spent waiting for the provider.
    pub took: Duration,
    /// The status answer's body, when the task is completed: what a price settles on.
    pub answer: Option<Bytes>,
}

impl Provider {
    /// Ask the upstream for a task's state.
    pub async fn query(&self, call: Call<'_>, upstream_id: &str) -> Result<Queried, UpstreamError> {
        let request = {
            let vars = call.vars(Some(upstream_id));
            self.query
                .request
                .build(&self.origin, &Val::Null, &vars, None)
                .map_err(|e| self.cleaned(e))?
        };
        let started = Instant::now();
        let answer = self.exchange(Step::Query, request).await?;
        let upstream_time = started.elapsed();
        // jq values are not `Send`: everything that reads them ends before the next await.
        let (mut state, result_request) = {
            let vars = call.vars(Some(upstream_id));
            let not_json = |e: String| {
                let e = self.redactor.clean(&e);
                UpstreamError::bad_answer("query", format!("not JSON ({e})"))
            };
            let body = Document::new(&answer.body);
            body.check().map_err(not_json)?;
            let state = self
                .query
                .reader
                .read(&self.name, &body, &vars, &self.redactor)
                .map_err(|e| UpstreamError::bad_answer("query", e.0))?;
            let result_request = match &self.result {
                Some(plan) if state.status == TaskStatus::Completed => {
                    let body = body.value().map_err(not_json)?;
                    let request = plan.request.build(&self.origin, &body, &vars, None);
                    Some(request.map_err(|e| self.cleaned(e))?)
                }
                _ => None,
            };
            (state, result_request)
        };
        let answer = (state.status == TaskStatus::Completed).then(|| answer.body.clone());
        if let (Some(plan), Some(request)) = (&self.result, result_request) {
            let started = Instant::now();
            state.urls = self.fetch_result(plan, request, call, upstream_id).await?;
            return Ok(Queried {
                state,
                took: upstream_time + started.elapsed(),
                answer,
            });
        }
        Ok(Queried {
            state,
            took: upstream_time,
            answer,
        })
    }

    /// One complete exchange of a query or result step: a successful answer, or its
    /// catalogue error.
    pub(super) async fn exchange(
        &self,
        step: Step,
        request: Request<Full<Bytes>>,
    ) -> Result<Reply, UpstreamError> {
        let span = crate::traces::span(|| exchange_span(step, &self.name));
        let call = self.client.call(request, self.query_timeout);
        let answer = tracing::Instrument::instrument(call, span.clone()).await;
        if let Ok(a) = &answer {
            span.record("http.response.status_code", i64::from(a.status.as_u16()));
        }
        let answer = answer.map_err(|e| {
            tracing::warn!(provider = %self.name, step = step.as_str(), error = %e, "upstream call failed");
            Refusal::of_call(&e).into_error(&self.name, step, None)
        })?;
        match Refusal::of_status(step, answer.status, &answer.headers) {
            Some(refusal) => Err(refusal.into_error(&self.name, step, None)),
            None => Ok(answer),
        }
    }

    /// The second request of a completed task: its answer holds the result URLs.
    async fn fetch_result(
        &self,
        plan: &ResultPlan,
        request: Request<Full<Bytes>>,
        call: Call<'_>,
        upstream_id: &str,
    ) -> Result<Vec<String>, UpstreamError> {
        let answer = self.exchange(Step::Result, request).await?;
        let bad = |what: String| UpstreamError::bad_answer("result", self.redactor.clean(&what));
        let vars = call.vars(Some(upstream_id));
        let body = parse(&answer.body).map_err(|e| bad(format!("not JSON ({e})")))?;
        let urls = match plan.urls.json(body, &vars) {
            Ok(value) => urls_from(value),
            Err(e) => return Err(bad(format!("`result.urls` failed: {e}"))),
        };
        if urls.is_empty() {
            return Err(bad("it has no result URL".into()));
        }
        Ok(urls)
    }
}

/// The span of an exchange, named after its step (a name of the callsite, which
/// costs nothing to record, unlike `otel.name`).
fn exchange_span(step: Step, provider: &str) -> tracing::Span {
    macro_rules! upstream {
        ($name:literal) => {
            crate::traces::traced!(
                $name,
                otel.kind = "client",
                mediagate.provider = provider,
                mediagate.step = step.as_str(),
                http.response.status_code = tracing::field::Empty,
            )
        };
    }
    match step {
        Step::Submit => upstream!("upstream submit"),
        Step::Query => upstream!("upstream query"),
        Step::Result => upstream!("upstream result"),
        Step::Content => upstream!("upstream content"),
        Step::Cancel => upstream!("upstream cancel"),
    }
}
