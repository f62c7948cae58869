//! Statements sent in batches on PostgreSQL: callers queue an item each and wait for
//! its answer; a few tasks each take what is waiting when they are free (up to a
//! batch's size) and send it as one statement, one round trip and one commit for all.
//!
//! Why: a PostgreSQL statement costs the gateway a round trip (a socket write, a read,
//! and the wake-ups of the tasks on either side) and the server a commit, whatever it
//! carries. Under load a submit's writes wait a little for a batcher, and share both.
//! When nothing else waits, a batch is one item, sent at once.
//!
//! Each serving thread has batchers of its own ([`crate::workers::slot`]), started on
//! it at its first item: a request's write is sent from the thread serving it, as it
//! was before batches, and no hand-over to another thread (a wake-up that waits for a
//! CPU on a busy machine) comes between the request and its statement.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, PoisonError};

use sqlx::PgPool;
use tokio::sync::{Mutex, mpsc, oneshot};

use super::LedgerError;

/// Items waiting for a batcher; a caller beyond waits for room.
const QUEUE: usize = 4096;

/// What a batch's statement answered: one answer per item, by position; `None` for an
/// item it did not answer for.
pub(super) type Answers<A> = Result<Vec<Option<A>>, LedgerError>;

/// Sends one batch.
pub(super) type Send<I, A> =
    fn(PgPool, Vec<I>) -> Pin<Box<dyn Future<Output = Answers<A>> + std::marker::Send>>;

type Reply<A> = oneshot::Sender<Result<A, LedgerError>>;

/// The handle callers queue their items through.
pub(super) struct Batcher<I, A> {
    pool: PgPool,
    /// For errors: what the batches are.
    what: &'static str,
    /// Batchers per thread, and items per batch at most.
    batchers: usize,
    max: usize,
    send: Send<I, A>,
    /// Per serving thread (and slot 0 for any other), the queue to its batchers.
    queues: Box<[Slot<I, A>]>,
}

type Queue<I, A> = mpsc::Sender<(I, Reply<A>)>;

/// A thread's queue, once its batchers are started.
type Slot<I, A> = std::sync::Mutex<Option<Queue<I, A>>>;

impl<I: std::marker::Send + 'static, A: std::marker::Send + 'static> Batcher<I, A> {
    /// Batches of at most `max` items sent with `send`, by `batchers` tasks per thread.
    pub(super) fn new(
        pool: PgPool,
        what: &'static str,
        batchers: usize,
        max: usize,
        send: Send<I, A>,
    ) -> Self {
        let slots = 1 + crate::workers::default_count();
        Self {
            pool,
            what,
            batchers,
            max,
            send,
            queues: (0..slots).map(|_| std::sync::Mutex::new(None)).collect(),
        }
    }

    /// `item`'s answer, from the next batch of this thread.
    pub(super) async fn call(&self, item: I) -> Result<A, LedgerError> {
        let (reply, answer) = oneshot::channel();
        let stopped = || LedgerError::Unavailable(format!("the ledger's {} stopped", self.what));
        self.queue()
            .send((item, reply))
            .await
            .map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }

    /// This thread's queue, its batchers started (in the current runtime) when it has
    /// none, or when the runtime they ran on is gone.
    fn queue(&self) -> Queue<I, A> {
        let slot = crate::workers::slot(self.queues.len());
        let mut queue = self.queues[slot]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(queue) = queue.as_ref().filter(|q| !q.is_closed()) {
            return queue.clone();
        }
        let (sender, waiting) = mpsc::channel(QUEUE);
        let waiting = Arc::new(Mutex::new(waiting));
        for _ in 0..self.batchers {
            let (pool, waiting) = (self.pool.clone(), waiting.clone());
            tokio::spawn(run(pool, waiting, self.max, self.send, self.what));
        }
        *queue = Some(sender.clone());
        sender
    }
}

type Waiting<I, A> = Arc<Mutex<mpsc::Receiver<(I, Reply<A>)>>>;

/// Send what waits, a batch at a time, until every handle is gone.
async fn run<I, A>(
    pool: PgPool,
    waiting: Waiting<I, A>,
    max: usize,
    send: Send<I, A>,
    what: &'static str,
) {
    let mut batch = Vec::with_capacity(max);
    // The queue is held only while taking from it, not while the batch is sent.
    while waiting.lock().await.recv_many(&mut batch, max).await > 0 {
        let (items, replies): (Vec<I>, Vec<Reply<A>>) = batch.drain(..).unzip();
        match send(pool.clone(), items).await {
            Ok(answers) => {
                let mut answers = answers.into_iter();
                for reply in replies {
                    // A caller that went away no longer waits for its answer.
                    let _ = reply.send(answers.next().flatten().ok_or_else(|| {
                        // An item the server did not answer for is not taken for done.
                        LedgerError::Unavailable(format!("a {what} left an item unanswered"))
                    }));
                }
            }
            Err(e) => {
                let message = e.to_string();
                for reply in replies {
                    let _ = reply.send(Err(LedgerError::Unavailable(message.clone())));
                }
            }
        }
    }
}
