//! Cancel: ask the provider to stop an unfinished task (`[providers.NAME.cancel]`),
//! e.g. Runway's `DELETE /v1/tasks/{id}`, Replicate's `POST /predictions/{id}/cancel`.

use jaq_json::Val;

use super::UpstreamError;
use super::answer::Step;
use super::plan::RequestPlan;
use super::{Call, Provider};
use crate::config::{CancelConfig, Scope};

/// The cancel request: `.` is null, `$id` the upstream id.
pub(super) struct CancelPlan {
    request: RequestPlan,
}

impl CancelPlan {
    pub(super) fn compile(c: &CancelConfig, at: &mut Scope) -> Option<Self> {
        let request = RequestPlan::compile(Step::Cancel, at, &c.method, &c.path, &c.query);
        Some(Self { request: request? })
    }
}

impl Provider {
    /// Whether the provider can stop an unfinished task.
    pub fn can_cancel(&self) -> bool {
        self.cancel.is_some()
    }

    /// Stop the task: `Ok` once the provider answered 2xx. A provider without a
    /// cancel step is refused here ([`Provider::can_cancel`] says so first).
    pub async fn cancel(&self, call: Call<'_>, upstream_id: &str) -> Result<(), UpstreamError> {
        let Some(plan) = &self.cancel else {
            return Err(UpstreamError::failed(
                "cancel",
                "the provider has no cancel step",
            ));
        };
        let request = {
            let vars = call.vars(Some(upstream_id));
            plan.request
                .build(&self.origin, &Val::Null, &vars, None)
                .map_err(|e| self.cleaned(e))?
        };
        self.exchange(Step::Cancel, request).await?;
        Ok(())
    }
}
