//! The write queue of the data path: a request submits its [`Write`] and waits until a writer
//! (`workers::ingest_writer`) has applied it in a durably committed batch, or refused it.
//!
//! The queue is bounded: when the writers fall behind, [`Ingest::submit`] waits for room
//! (backpressure). Each write's answer ([`Reply`]) turns the store's outcome into the service's
//! answer: a refused write (unknown record, idempotency conflict) is that write's error only,
//! and a failed batch (nothing committed) answers every write in it with 503.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::core::clock::Timestamp;
use crate::domain::error::{Error, Result};
use crate::domain::webhooks::deliveries::Hooks;
use crate::store::records::{BatchWrite, RecordWrite, WriteOutcome};
use crate::store::{Store, StoreError};

/// How many writes may wait for the writers before `submit` waits for room (backpressure).
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

/// What the writers take from the queue.
pub enum Message {
    Write(Box<Write>, Reply),
    /// Everything queued before this is committed, then the writers stop.
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
    /// Set while the writers' latest commit failed (readiness: storage not writable).
    failing: Arc<AtomicBool>,
}

/// The queue's receiving end, which the writers take writes from; shared by all of them.
pub struct Queue {
    /// The writer holding the lock takes the next batch; the others commit theirs meanwhile.
    rx: Mutex<mpsc::Receiver<Message>>,
    failing: Arc<AtomicBool>,
    /// A writer took [`Message::Shutdown`] (or every [`Ingest`] is gone): no writer takes
    /// another batch.
    stopping: AtomicBool,
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
        Queue {
            rx: Mutex::new(rx),
            failing,
            stopping: AtomicBool::new(false),
        },
    )
}

impl Queue {
    /// Waits for the next write, then takes every write queued behind it until the batch
    /// holds `max_records` records (a batch request is never split). `None` once the queue
    /// stops: after [`Message::Shutdown`], every write queued before it is in a batch already
    /// taken, and the batch that took it may be empty.
    pub fn next_batch(&self, max_records: usize) -> Option<Vec<(Box<Write>, Reply)>> {
        let mut rx = self.rx.lock().unwrap_or_else(PoisonError::into_inner);
        if self.stopping.load(Ordering::Acquire) {
            return None;
        }
        let mut batch = Vec::new();
        let mut records = 0;
        let mut next = rx.blocking_recv();
        if next.is_none() {
            self.stopping.store(true, Ordering::Release);
            return None;
        }
        while let Some(message) = next.take() {
            match message {
                Message::Write(write, reply) => {
                    records += write.record.record_count();
                    batch.push((write, reply));
                }
                Message::Shutdown => {
                    self.stopping.store(true, Ordering::Release);
                    break;
                }
            }
            if records < max_records {
                next = rx.try_recv().ok();
            }
        }
        Some(batch)
    }

    /// Records whether the latest commit failed.
    pub fn set_failing(&self, failing: bool) {
        self.failing.store(failing, Ordering::Relaxed);
    }
}

impl Ingest {
    /// Writes queued and not yet taken by a writer.
    pub fn queue_depth(&self) -> usize {
        self.tx.max_capacity() - self.tx.capacity()
    }

    /// Whether a writer thread is still taking writes (they stop only at shutdown or if they
    /// panicked).
    pub fn writer_alive(&self) -> bool {
        !self.tx.is_closed()
    }

    /// Whether the writers' latest commit failed (a full disk, an I/O error).
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

    /// Asks the writers to commit what is queued and stop.
    pub async fn shutdown(&self) {
        // An error means the writers are already gone, which is what we want.
        let _ = self.tx.send(Message::Shutdown).await;
    }
}

/// Forgets Idempotency-Keys older than [`IDEMPOTENCY_TTL`] at `now`, at most `max` per call.
/// Returns how many went.
pub fn purge_expired_idempotency(store: &dyn Store, now: Timestamp, max: usize) -> Result<usize> {
    Ok(store.purge_idempotency_before(now.minus(IDEMPOTENCY_TTL), max)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::ids::RecordId;
    use crate::store::{Environment, Partition};

    fn delete(id: u128) -> Message {
        let (answer, _) = oneshot::channel();
        Message::Write(
            Box::new(Write {
                record: RecordWrite::Delete {
                    partition: Partition::new(1, Environment::Sandbox),
                    id: RecordId(id),
                    at: Timestamp(0),
                },
                hooks: Hooks {
                    endpoint_slug: "orders".into(),
                    environment: Environment::Sandbox,
                    at: Timestamp(0),
                    caller: None,
                    trace: None,
                },
            }),
            Reply {
                answer,
                queued_at: std::time::SystemTime::now(),
            },
        )
    }

    fn ids(batch: &[(Box<Write>, Reply)]) -> Vec<u128> {
        batch
            .iter()
            .map(|(write, _)| match write.record {
                RecordWrite::Delete { id, .. } => id.0,
                _ => unreachable!("only deletes are queued here"),
            })
            .collect()
    }

    #[test]
    fn a_batch_takes_what_is_queued_up_to_its_size() {
        let (ingest, queue) = queue();
        for id in 1..=5 {
            ingest.tx.try_send(delete(id)).unwrap();
        }
        assert_eq!(ids(&queue.next_batch(3).unwrap()), [1, 2, 3]);
        assert_eq!(ids(&queue.next_batch(3).unwrap()), [4, 5]);
    }

    #[test]
    fn after_a_shutdown_no_writer_takes_another_batch() {
        let (ingest, queue) = queue();
        let queue = Arc::new(queue);
        ingest.tx.try_send(delete(1)).unwrap();
        ingest.tx.try_send(delete(2)).unwrap();
        ingest.tx.try_send(Message::Shutdown).unwrap();
        ingest.tx.try_send(delete(3)).unwrap();
        // The writes queued before the shutdown go in the batch that takes it.
        assert_eq!(ids(&queue.next_batch(100).unwrap()), [1, 2]);
        // Then every writer stops (here the same thread and another), the write queued after
        // the shutdown untaken.
        let waiting = std::thread::spawn({
            let queue = queue.clone();
            move || queue.next_batch(100).is_none()
        });
        assert!(queue.next_batch(100).is_none());
        assert!(waiting.join().unwrap());
    }

    #[test]
    fn writers_stop_once_every_sender_is_gone() {
        let (ingest, queue) = queue();
        ingest.tx.try_send(delete(1)).unwrap();
        drop(ingest);
        assert_eq!(ids(&queue.next_batch(100).unwrap()), [1]);
        assert!(queue.next_batch(100).is_none());
        assert!(queue.next_batch(100).is_none());
    }
}
