//! Query: the status request, the answer read into our four statuses, and the
//! optional second (result) request of a completed task.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use jaq_json::Val;

use super::transform::parse;
use super::{Call, Provider, ResultPlan};
use crate::error::ApiError;
use crate::normalize::urls_from;
use crate::task::{TaskState, TaskStatus};

impl Provider {
    /// Ask the upstream for a task's state.
    pub async fn query(
        &self,
        call: Call<'_>,
        upstream_id: &str,
    ) -> Result<(TaskState, Duration), ApiError> {
        let request = {
            let vars = call.vars(Some(upstream_id));
            let plan = &self.query;
            self.build(
                "query",
                &plan.method,
                &plan.path,
                plan.query.as_ref(),
                None,
                None,
                &Val::Null,
                &vars,
            )?
        };
        let started = Instant::now();
        let answer = match self.client.call(request, self.query_timeout).await {
            Ok(a) => a,
            Err(e) => return Err(self.unanswered("query", e)),
        };
        let upstream_time = started.elapsed();
        self.check_answer("query", answer.status, &answer.headers)?;
        // jq values are not `Send`: everything that reads them ends before the next await.
        let (mut state, result_request) = {
            let vars = call.vars(Some(upstream_id));
            let body = parse(&answer.body)
                .map_err(|e| ApiError::upstream_bad_answer("query", format!("not JSON ({e})")))?;
            let state = self
                .query
                .reader
                .read(&self.name, body.clone(), &vars, &self.redactor)
                .map_err(|e| ApiError::upstream_bad_answer("query", e.0))?;
            let result_request = match &self.result {
                Some(plan) if state.status == TaskStatus::Completed => Some(self.build(
                    "result",
                    &plan.method,
                    &plan.path,
                    plan.query.as_ref(),
                    None,
                    None,
                    &body,
                    &vars,
                )?),
                _ => None,
            };
            (state, result_request)
        };
        if let (Some(plan), Some(request)) = (&self.result, result_request) {
            let started = Instant::now();
            state.urls = self.fetch_result(plan, request, call, upstream_id).await?;
            return Ok((state, upstream_time + started.elapsed()));
        }
        Ok((state, upstream_time))
    }

    /// The second request of a completed task: its answer holds the result URLs.
    async fn fetch_result(
        &self,
        plan: &ResultPlan,
        request: Request<Full<Bytes>>,
        call: Call<'_>,
        upstream_id: &str,
    ) -> Result<Vec<String>, ApiError> {
        let answer = match self.client.call(request, self.query_timeout).await {
            Ok(a) => a,
            Err(e) => return Err(self.unanswered("result", e)),
        };
        self.check_answer("result", answer.status, &answer.headers)?;
        let bad = |what: String| ApiError::upstream_bad_answer("result", what);
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
