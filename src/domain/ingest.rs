//! The write queue of the data path: a request submits its [`Write`] and waits until the writer
//! (`workers::ingest_writer`) has applied it in a durably committed batch, or refused it.
//!
//! The queue is bounded: when the writer falls behind, [`Ingest::submit`] waits for room
//! (backpressure). Each write's answer ([`Reply`]) turns the store's outcome into the service's
//! answer: a refused write (unknown record, idempotency conflict) is that write's error only,
//! and a failed batch (nothing committed) answers every write in it with 503.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::core::clock::Timestamp;
use crate::domain::error::{Error, Result};
use crate::domain::webhooks::deliveries::Hooks;
use crate::store::records::{BatchWrite, RecordWrite, WriteOutcome};
use crate::store::{Store, StoreError};

/// How many writes may wait for the writer before `submit` waits for room (backpressure).
const QUEUE_CAPACITY: usize = 8192;
/// How long an Idempotency-Key is remembered.
pub const IDEMPOTENCY_TTL: Duration = Duration::from_secs(24 * 3600);

/// A write and what its webhooks need.
#[derive(Debug)]
pub struct Write {
    pub record: RecordWrite,
    pub hooks: Hooks,
}

impl Write {
    /// The write as the store's batch takes it: the write's [`Hooks`] decide its deliveries.
    pub fn batch_write(&self) -> BatchWrite<'_> {
        BatchWrite {
            write: &self.record,
            webhooks: &self.hooks,
        }
    }
}

/// What the writer takes from the queue.
pub enum Message {
    Write(Box<Write>, Reply),
    /// Everything queued before this is committed, then the writer stops.
    Shutdown,
}

/// Where the answer to one queued write goes.
pub struct Reply {
    answer: oneshot::Sender<Result<WriteOutcome>>,
    /// When the write was queued: the start of its queue-wait span.
    pub queued_at: std::time::SystemTime,
}

impl Reply {
    /// Answers with what the committed batch did with this write: a refusal is its error.
    pub fn applied(self, outcome: WriteOutcome) {
        let answer = match outcome {
            WriteOutcome::NotFound => Err(Error::RecordNotFound),
            WriteOutcome::IdempotencyConflict => Err(Error::IdempotencyConflict),
            done => Ok(done),
        };
        self.send(answer);
    }

    /// Answers that the write's batch failed: nothing of it was committed.
    pub fn failed(self, err: &StoreError) {
        self.send(Err(match err {
            StoreError::Full { .. } => Error::StorageFull,
            other => Error::Unavailable(other.to_string()),
        }));
    }

    fn send(self, answer: Result<WriteOutcome>) {
        // The requester may have gone away; the write stands regardless.
        let _ = self.answer.send(answer);
    }
}

/// The queue's sending end, which requests submit to; cheap to clone.
#[derive(Clone)]
pub struct Ingest {
    tx: mpsc::Sender<Message>,
    /// Set while the writer's latest commit failed (readiness: storage not writable).
    failing: Arc<AtomicBool>,
}

/// The queue's receiving end, which the writer takes writes from.
pub struct Queue {
    rx: mpsc::Receiver<Message>,
    failing: Arc<AtomicBool>,
}

/// A new, empty write queue.
pub fn queue() -> (Ingest, Queue) {
    let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
    let failing = Arc::new(AtomicBool::new(false));
    (
        Ingest {
            tx,
            failing: failing.clone(),
        },
        Queue { rx, failing },
    )
}

impl Queue {
    /// Waits for the next message; `None` once every [`Ingest`] is gone.
    pub fn next_blocking(&mut self) -> Option<Message> {
        self.rx.blocking_recv()
    }

    /// The next message if one is queued.
    pub fn try_next(&mut self) -> Option<Message> {
        self.rx.try_recv().ok()
    }

    /// Records whether the writer's latest commit failed.
    pub fn set_failing(&self, failing: bool) {
        self.failing.store(failing, Ordering::Relaxed);
    }
}

impl Ingest {
    /// Writes queued and not yet taken by the writer.
    pub fn queue_depth(&self) -> usize {
        self.tx.max_capacity() - self.tx.capacity()
    }

    /// Whether the writer thread is still taking writes (it stops only at shutdown or if it
    /// panicked).
    pub fn writer_alive(&self) -> bool {
        !self.tx.is_closed()
    }

    /// Whether the writer's latest commit failed (a full disk, an I/O error).
    pub fn last_commit_failed(&self) -> bool {
        self.failing.load(Ordering::Relaxed)
    }

    /// Queues a write and waits until it is durably committed (or refused).
    pub async fn submit(&self, write: Write) -> Result<WriteOutcome> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Message::Write(
                Box::new(write),
                Reply {
                    answer: reply,
                    queued_at: std::time::SystemTime::now(),
                },
            ))
            .await
            .map_err(|_| Error::ShuttingDown)?;
        answer.await.map_err(|_| Error::ShuttingDown)?
    }

    /// Asks the writer to commit what is queued and stop.
    pub async fn shutdown(&self) {
        // An error means the writer is already gone, which is what we want.
        let _ = self.tx.send(Message::Shutdown).await;
    }
}

/// Forgets Idempotency-Keys older than [`IDEMPOTENCY_TTL`] at `now`, at most `max` per call.
/// Returns how many went.
pub fn purge_expired_idempotency(store: &dyn Store, now: Timestamp, max: usize) -> Result<usize> {
    Ok(store.purge_idempotency_before(now.minus(IDEMPOTENCY_TTL), max)?)
}
