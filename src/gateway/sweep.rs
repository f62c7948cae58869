//! Ledger housekeeping: submits left `submitting` (by a crash, or a replica that
//! died) become `unknown_outcome` once no submit could still be running, and are
//! logged for the operator; idempotency keys past their time are forgotten.

use std::sync::Arc;
use std::time::Duration;

use super::Gateway;

/// Sweep now, then again as often as a submit can go stale (between 1 and 30
/// seconds), for as long as the gateway runs.
pub async fn run(gateway: Arc<Gateway>) {
    if gateway.tasks.ledger().is_none() {
        return;
    }
    loop {
        once(&gateway).await;
        let every = stale_after(&gateway).clamp(Duration::from_secs(1), Duration::from_secs(30));
        tokio::time::sleep(every).await;
    }
}

/// Past the longest submit a provider allows (and the body read before it), no
/// submit of any replica can still be waiting for its answer.
fn stale_after(gateway: &Gateway) -> Duration {
    let snapshot = gateway.snapshot();
    let longest = snapshot
        .providers
        .values()
        .map(|p| p.submit_timeout())
        .max()
        .unwrap_or_default();
    longest + Duration::from_millis(snapshot.server.body_read_timeout_ms)
}

/// One sweep.
pub async fn once(gateway: &Gateway) {
    let Some(ledger) = gateway.tasks.ledger() else {
        return;
    };
    let hours = gateway.snapshot().ledger.idempotency_ttl_hours;
    let ttl = Duration::from_secs(hours.saturating_mul(3600));
    match ledger.sweep(stale_after(gateway), ttl).await {
        Ok(expired) => {
            for row in expired {
                tracing::error!(
                    row = row.id,
                    key = %row.owner,
                    model = %row.model,
                    provider = row.provider.as_deref(),
                    "a submit was interrupted; whether the provider created the task is unknown: reconcile it (mediagate tasks --state unknown_outcome)"
                );
            }
        }
        Err(e) => {
            gateway.metrics.ledger_errors.inc();
            tracing::warn!(error = %e, "ledger sweep failed");
        }
    }
    if let Ok(n) = ledger
        .count(crate::tasks::ledger::State::UnknownOutcome)
        .await
    {
        gateway.metrics.ledger_unknown_outcome.set(n);
    }
}
