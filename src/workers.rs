//! The serving threads, one per CPU, like nginx's worker processes. Each is a
//! current-thread tokio runtime; a connection is handed to one of them when it is
//! accepted and lives there to its end: its requests, the tasks they spawn and the
//! upstream connections they use (each worker has pools of its own,
//! [`crate::providers::UpstreamClient`]) never hop to another thread, so serving a
//! request costs no wake-up across threads. Accepting, the connection caps and the
//! background loops stay on the runtime that started the gateway.

use std::cell::Cell;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;

thread_local! {
    static WORKER: Cell<Option<usize>> = const { Cell::new(None) };
}

/// How far ahead each worker keeps a timer set. tokio's timer wakes its runtime
/// (a write to the runtime's event fd, and one more turn of its loop) whenever a timer
/// is set to expire before the earliest one the runtime went to sleep with, even from
/// the runtime's own thread. A worker that went idle with only long timers (60 s
/// header reads) then paid that for every request's upstream timeout (seconds): half
/// a system call per submit with the ledger on. With a timer always due within this,
/// no request's timeout (a second or more) comes first; it costs each worker a few
/// wake-ups a second.
const TIMER_ANCHOR: Duration = Duration::from_millis(250);

/// The number of the worker this thread is, `None` on any other thread.
pub fn current() -> Option<usize> {
    WORKER.with(Cell::get)
}

/// One worker per CPU this process may use (cgroup quotas included).
pub fn default_count() -> usize {
    std::thread::available_parallelism().map_or(1, NonZeroUsize::get)
}

/// Of `slots` per-thread resources, the one for this thread: slot 0 off the workers,
/// the others shared out among the workers.
pub fn slot(slots: usize) -> usize {
    match current() {
        Some(n) if slots > 1 => 1 + n % (slots - 1),
        _ => 0,
    }
}

/// Running worker threads. Dropping this stops them: whatever still runs on them is
/// cut, so drop it only after the edge drained and detached work finished.
pub struct Workers {
    handles: Vec<Handle>,
    next: AtomicUsize,
    stop: CancellationToken,
}

impl Workers {
    /// Start `count` workers (at least one).
    pub fn start(count: usize) -> std::io::Result<Self> {
        // Built up in place, so that a failure stops the workers already started.
        let mut workers = Self {
            handles: Vec::with_capacity(count.max(1)),
            next: AtomicUsize::new(0),
            stop: CancellationToken::new(),
        };
        for n in 0..count.max(1) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let handle = runtime.handle().clone();
            let stopped = workers.stop.clone();
            std::thread::Builder::new()
                .name(format!("mediagate-worker-{n}"))
                .spawn(move || {
                    WORKER.set(Some(n));
                    // A current-thread runtime runs its tasks only inside `block_on`.
                    runtime.block_on(async {
                        tokio::select! {
                            () = stopped.cancelled() => {}
                            () = anchor_timers() => {}
                        }
                    });
                    runtime.shutdown_background();
                })?;
            workers.handles.push(handle);
        }
        Ok(workers)
    }

    /// How many workers run.
    pub fn count(&self) -> usize {
        self.handles.len()
    }

    /// The workers' runtimes, to hand work to (they do not keep them running).
    pub fn handles(&self) -> &[Handle] {
        &self.handles
    }

    /// The worker to take the next connection, in turn.
    pub fn next(&self) -> &Handle {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        &self.handles[n % self.handles.len()]
    }
}

/// Keep a timer due within [`TIMER_ANCHOR`], for ever.
async fn anchor_timers() {
    loop {
        tokio::time::sleep(TIMER_ANCHOR).await;
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn work_handed_to_a_worker_runs_on_it_and_spawns_stay_there() {
        let workers = Workers::start(2).unwrap();
        assert_eq!(workers.count(), 2);
        assert_eq!(current(), None);
        assert_eq!(slot(3), 0, "off the workers: slot 0");
        let mut seen = Vec::new();
        for _ in 0..4 {
            let (outer, inner) = workers
                .next()
                .spawn(async {
                    let outer = (current(), std::thread::current().id());
                    let inner = tokio::spawn(async { (current(), std::thread::current().id()) })
                        .await
                        .unwrap();
                    (outer, inner)
                })
                .await
                .unwrap();
            assert_eq!(
                outer, inner,
                "a task spawned by a worker's task runs on that worker"
            );
            seen.push(outer.0.unwrap());
        }
        assert_eq!(seen, [0, 1, 0, 1], "connections go to the workers in turn");
    }

    #[test]
    fn slots_are_shared_out_among_the_workers() {
        std::thread::spawn(|| {
            WORKER.set(Some(0));
            assert_eq!(slot(3), 1);
            WORKER.set(Some(1));
            assert_eq!(slot(3), 2);
            WORKER.set(Some(2));
            assert_eq!(slot(3), 1);
            assert_eq!(slot(1), 0, "one slot: everybody shares it");
        })
        .join()
        .unwrap();
    }

    #[tokio::test]
    async fn dropping_the_workers_stops_their_tasks() {
        let workers = Workers::start(1).unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        workers.next().spawn(async move {
            let _tx = tx;
            std::future::pending::<()>().await;
        });
        drop(workers);
        // The pending task is dropped with its runtime, and with it the sender.
        tokio::time::timeout(std::time::Duration::from_secs(5), rx)
            .await
            .expect("the worker stopped")
            .unwrap_err();
    }
}
