//! Cancel: ask the provider to stop an unfinished task (`[providers.NAME.cancel]`),
//! e.g. Runway's `DELETE /v1/tasks/{id}`, Replicate's `POST /predictions/{id}/cancel`.

use jaq_json::Val;

use super::UpstreamError;
use super::answer::Step;
use super::jq::{Jq, parse};
use super::plan::RequestPlan;
use super::{Call, Provider};
use crate::config::{CancelConfig, Scope};

/// The cancel request: `.` is null, `$id` the upstream id.
pub(super) struct CancelPlan {
    request: RequestPlan,
    /// Over the answer's body: whether the task was stopped; any 2xx without it.
    success: Option<Jq>,
}

impl CancelPlan {
    pub(super) fn compile(c: &CancelConfig, at: &mut Scope) -> Option<Self> {
        let request = RequestPlan::compile(Step::Cancel, at, &c.method, &c.path, &c.query);
        let success = Jq::optional_at(at, "success", &c.success);
        Some(Self {
            request: request?,
            success: success?,
        })
    }
}

/// What the provider said to a cancel request it answered with 2xx.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Canceled {
    /// The task was stopped.
    Stopped,
    /// The provider would not stop it (its `success` program said no): it may be
    /// about to finish.
    Refused,
}

impl Provider {
    /// Whether the provider can stop an unfinished task.
    pub fn can_cancel(&self) -> bool {
        self.cancel.is_some()
    }

    /// Stop the task. A provider without a cancel step is refused here
    /// ([`Provider::can_cancel`] says so first).
    pub async fn cancel(
        &self,
        call: Call<'_>,
        upstream_id: &str,
    ) -> Result<Canceled, UpstreamError> {
        let Some(plan) = &self.cancel else {
            return Err(UpstreamError::failed(
                "cancel",
                "the provider has no cancel step",
            ));
        };
        // The variables are not `Send`: made again after the call.
        let request = {
            let vars = call.vars(Some(upstream_id));
            plan.request
                .build(&self.origin, &Val::Null, &vars, None)
                .map_err(|e| self.cleaned(e))?
        };
        let answer = self.exchange(Step::Cancel, request).await?;
        let Some(success) = &plan.success else {
            return Ok(Canceled::Stopped);
        };
        // An empty or non-JSON body is null: `success` may still decide on it.
        let body = parse(&answer.body).unwrap_or(Val::Null);
        match success.first(body, &call.vars(Some(upstream_id))) {
            Ok(Some(Val::Bool(true))) => Ok(Canceled::Stopped),
            Ok(_) => Ok(Canceled::Refused),
            Err(e) => Err(UpstreamError::bad_answer(
                "cancel",
                self.redactor
                    .clean(&format!("`cancel.success` failed: {e}")),
            )),
        }
    }
}
