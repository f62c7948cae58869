//! Retention: finished tasks older than `[ledger] keep_days` are deleted from the
//! ledger in small batches ([`Ledger::prune`]), their usage kept as per-day sums, so
//! that the ledger stops growing with the work while usage still adds up.
//!
//! A batch is one statement over at most `prune_batch` rows. On SQLite it runs on the
//! writer thread only while no other write waits, in a transaction of its own (never
//! in a submit's commit), so its length is the most a submit queued behind it waits:
//! batches are small, and each is followed by a pause nine times as long as it took
//! (at least [`MIN_PAUSE`]), so that retention takes at most a tenth of the writer. Replicas sharing PostgreSQL may prune at once: one batch at a time
//! deletes (the statement takes a lock until its commit; the other's deletes
//! nothing), so running two passes costs reads, never a wrong sum.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Gateway;
use crate::tasks::ledger::{Ledger, Pruned, now_ms};

/// How often a pass starts (and once at start): a pass that finds nothing to delete
/// costs two reads.
const EVERY: Duration = Duration::from_secs(600);
/// The shortest pause between two batches.
const MIN_PAUSE: Duration = Duration::from_millis(5);
/// A batch is followed by a pause this many times its length.
const PAUSE_PER_BATCH: u32 = 9;
const DAY_MS: i64 = 86_400_000;

/// Prune now, then every [`EVERY`], until the gateway stops.
pub async fn run(gateway: Arc<Gateway>) {
    let Some(ledger) = gateway.tasks.ledger().cloned() else {
        return;
    };
    loop {
        tokio::select! {
            () = gateway.stopped() => return,
            () = pass(&gateway, &ledger) => {}
        }
        tokio::select! {
            () = gateway.stopped() => return,
            () = tokio::time::sleep(EVERY) => {}
        }
    }
}

/// One pass over the ledger, oldest rows first, with the settings of the current
/// snapshot (a reload applies from the next pass).
async fn pass(gateway: &Gateway, ledger: &Ledger) {
    let settings = gateway.snapshot().ledger.clone();
    if settings.keep_days == 0 {
        return;
    }
    let keep_ms = i64::try_from(settings.keep_days)
        .unwrap_or(i64::MAX)
        .saturating_mul(DAY_MS);
    let before_ms = now_ms().saturating_sub(keep_ms);
    let batch = i64::try_from(settings.prune_batch).unwrap_or(i64::MAX);
    let started = Instant::now();
    let (mut after, mut pruned) = (0, 0u64);
    loop {
        let batch_started = Instant::now();
        match ledger.prune(after, batch, before_ms).await {
            Ok(Pruned { rows, next }) => {
                gateway.metrics.ledger_pruned.inc_by(rows as u64);
                pruned += rows as u64;
                match next {
                    Some(next) => after = next,
                    None => break,
                }
            }
            Err(e) => {
                gateway.metrics.ledger_errors.inc();
                tracing::warn!(error = %e, "ledger retention failed; tried again at the next pass");
                break;
            }
        }
        let pause = batch_started.elapsed() * PAUSE_PER_BATCH;
        tokio::time::sleep(pause.max(MIN_PAUSE)).await;
    }
    if pruned > 0 {
        tracing::info!(
            tasks = pruned,
            keep_days = settings.keep_days,
            seconds = started.elapsed().as_secs_f64(),
            "ledger retention: finished tasks deleted, their usage kept per day"
        );
    }
}
