//! The loop the background jobs share: one look at the ledger (a round: lease what is
//! due, start it), then the next at once when the round leased a full batch, else
//! after [`TICK`] — or sooner, when the task service announces a finished task to a
//! job that waits for those — until the gateway stops.

use std::time::Duration;

use tokio::sync::broadcast;

use super::Gateway;
use crate::lifecycle::Finished;

/// Pause between looks at the ledger when nothing more is due.
pub(super) const TICK: Duration = Duration::from_millis(250);

/// A background job that works in rounds.
pub(super) trait Rounds {
    /// One look at the ledger; whether it leased a full batch.
    fn round(&mut self) -> impl Future<Output = bool> + Send;
}

/// Run `job`'s rounds until the gateway stops.
pub(super) async fn until_stopped(
    gateway: &Gateway,
    mut finished: Option<broadcast::Receiver<Finished>>,
    job: &mut impl Rounds,
) {
    while !gateway.is_draining() {
        if job.round().await {
            continue;
        }
        let woken = async {
            match &mut finished {
                Some(events) => drop(events.recv().await),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = tokio::time::sleep(TICK) => {}
            () = woken => {}
            () = gateway.stopped() => {}
        }
        // A burst of finished tasks is one look at the ledger.
        if let Some(events) = &mut finished {
            while events.try_recv().is_ok() {}
        }
    }
}
