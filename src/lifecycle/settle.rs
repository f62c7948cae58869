//! Settlement: what a task that reached its end costs, computed before the statement
//! that ends it (the same statement settles it in the ledger, once, whoever saw the
//! end first), and counted by the replica whose statement recorded it.
//!
//! Completed: the model's `settle` program over the parameters kept at submit and the
//! provider's final answer, or the estimate without one; failed (cancelled, given up
//! by the tracker): 0. A settlement that cannot be computed (the row unreadable, the
//! program failing) leaves the ledger to charge the estimate, and says so in the log.

use bytes::Bytes;
use serde_json::Value;

use super::{TaskRef, TaskService};
use crate::money::Micros;
use crate::providers::jq::JqVars;
use crate::snapshot::Snapshot;
use crate::tasks::{TaskState, TaskStatus};

/// A priced task's money at its end.
#[derive(Debug, Clone)]
pub(super) struct Settlement {
    pub owner: String,
    pub model: String,
    /// What its submit reserved.
    pub estimate: Micros,
    /// What it costs.
    pub settled: Micros,
}

impl TaskService {
    /// The settlement of `task` ending in `state`, the provider's final answer being
    /// `answer`; `None` when its model has no price (or had none when it was
    /// submitted), or the ledger is off.
    pub(super) async fn settlement(
        &self,
        snapshot: &Snapshot,
        task: TaskRef<'_>,
        state: &TaskState,
        answer: Option<&Bytes>,
    ) -> Option<Settlement> {
        let ledger = self.ledger.as_ref()?;
        let model = snapshot.models.get(task.model)?;
        let price = model.price.as_ref()?;
        let with_params = state.status == TaskStatus::Completed && price.settles();
        let priced = match ledger
            .priced(task.provider, task.upstream_id, with_params, true)
            .await
        {
            Ok(priced) => priced?,
            Err(e) => {
                self.ledger_errors.inc();
                tracing::warn!(error = %e, "ledger read failed: a task's price; its estimate is charged");
                return None;
            }
        };
        let estimate = Micros(priced.cost_estimate?);
        let settled = match state.status {
            TaskStatus::Completed if price.settles() => {
                let params = priced
                    .price_params
                    .as_deref()
                    .and_then(|p| serde_json::from_str::<Value>(p).ok())
                    .unwrap_or(Value::Null);
                let answer = answer
                    .and_then(|a| serde_json::from_slice::<Value>(a).ok())
                    .unwrap_or(Value::Null);
                let vars = JqVars::new(&model.id, &model.upstream_model, model.kind, None, None);
                price.settle(&params, &answer, vars).unwrap_or_else(|e| {
                    tracing::warn!(model = %model.id, error = %e, "a price could not be settled; its estimate is charged");
                    estimate
                })
            }
            TaskStatus::Completed => estimate,
            _ => Micros::ZERO,
        };
        Some(Settlement {
            owner: priced.owner,
            model: task.model.to_string(),
            estimate,
            settled,
        })
    }
}
