//! The write queue: every data write goes through one writer thread that commits in groups.
//!
//! A request hands its [`WriteOp`] to [`Ingest::submit`] and waits. The writer thread takes
//! everything queued at that moment (up to [`MAX_BATCH`]), applies it in one redb transaction,
//! commits with fsync, and only then answers every waiting request. So:
//!
//! - **A 202 is a promise.** The answer that lets the HTTP layer send 202 leaves only after the
//!   commit holding the write has returned, and redb's commit is durable (fsynced) when it
//!   returns. `kill -9` or power loss after that cannot lose the write.
//! - **Group commit.** Under load many writes share one fsync; with one request in flight a
//!   write costs one commit. No timer adds latency.
//! - **Applied in the same commit.** The transaction that makes a write durable also applies it
//!   to the record tables and appends it to the change log (`storage::CHANGES`), so there is no
//!   state "acknowledged but not yet stored", and a read after the 202 sees the write. Work that
//!   follows a write consumes the change log from its own durable position (search indexing)
//!   or is queued in the same commit (webhook deliveries, `webhooks::deliveries`): it survives
//!   restarts and resumes where it stopped.
//! - **All or nothing.** A storage failure aborts the whole transaction and every request of
//!   the batch gets a 503: nothing is acknowledged, nothing is half-written. A refused operation
//!   (unknown record, idempotency conflict) changes nothing and does not affect its neighbours.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redb::{ReadableTable, Table};
use tokio::sync::{mpsc, oneshot};

use crate::core::clock::Timestamp;
use crate::core::ids::RecordId;
use crate::core::metrics::Metrics;
use crate::domain::error::Error;
use crate::domain::webhooks::deliveries::{DeliveryTables, Event, Hooks};
use crate::store::{
    CHANGES, IDEMPOTENCY, IDEMPOTENCY_EXPIRY, IdempotencyRow, LAST_CHANGE_SEQ, META, RECORDS,
    RedbStore, StoreError, encode_record, from_json, read_counter, time_key, to_json,
    write_counter,
};

/// How many writes one transaction takes at most.
pub const MAX_BATCH: usize = 2048;
/// How many writes may wait for the writer before `submit` waits for room (backpressure).
const QUEUE_CAPACITY: usize = 8192;
/// How long an Idempotency-Key is remembered.
pub const IDEMPOTENCY_TTL: Duration = Duration::from_secs(24 * 3600);

/// One data write.
#[derive(Debug)]
pub enum WriteOp {
    Create {
        partition: u64,
        /// Carries the record's created_at.
        id: RecordId,
        /// Normalised payload JSON.
        payload: Vec<u8>,
        idempotency: Option<IdempotencyClaim>,
    },
    Replace {
        partition: u64,
        id: RecordId,
        updated_at: Timestamp,
        payload: Vec<u8>,
    },
    Delete {
        partition: u64,
        id: RecordId,
    },
}

/// A write and what its webhooks need.
#[derive(Debug)]
pub struct Write {
    pub op: WriteOp,
    pub hooks: Hooks,
}

/// An `Idempotency-Key` sent with a create.
#[derive(Debug)]
pub struct IdempotencyClaim {
    pub key: String,
    /// SHA-256 (hex) of the normalised payload.
    pub payload_hash: String,
}

/// What a committed write did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOutcome {
    Created {
        id: RecordId,
        created_at: Timestamp,
    },
    /// A retry with a known Idempotency-Key: the original answer, nothing new written.
    Replayed {
        id: RecordId,
        created_at: Timestamp,
    },
    Replaced,
    Deleted,
}

type Reply = oneshot::Sender<Result<WriteOutcome, Error>>;

enum Message {
    Write(Box<Write>, Reply),
    /// Everything queued before this is committed, then the writer stops.
    Shutdown,
}

/// Handle to the writer thread; cheap to clone.
#[derive(Clone)]
pub struct Ingest {
    tx: mpsc::Sender<Message>,
    /// Set while the writer's latest commit failed (readiness: storage not writable).
    failing: Arc<AtomicBool>,
}

/// Joins the writer thread after [`Ingest::shutdown`].
pub struct WriterThread(std::thread::JoinHandle<()>);

impl WriterThread {
    pub fn join(self) {
        if self.0.join().is_err() {
            log::error!("the ingest writer thread panicked");
        }
    }
}

impl Ingest {
    /// Starts the writer thread. `on_commit` runs after every successful commit (it wakes the
    /// consumers of the change log; it must not block).
    pub fn start(
        store: Arc<RedbStore>,
        metrics: Arc<Metrics>,
        on_commit: Box<dyn Fn() + Send>,
    ) -> std::io::Result<(Ingest, WriterThread)> {
        let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
        let failing = Arc::new(AtomicBool::new(false));
        let writer = Writer {
            store,
            metrics,
            failing: failing.clone(),
            on_commit,
        };
        let handle = std::thread::Builder::new()
            .name("ingest-writer".into())
            .spawn(move || writer_loop(&writer, rx))?;
        Ok((Ingest { tx, failing }, WriterThread(handle)))
    }

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
    pub async fn submit(&self, write: Write) -> Result<WriteOutcome, Error> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Message::Write(Box::new(write), reply))
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

/// What the writer has done since start; logged at shutdown.
#[derive(Default)]
struct WriterStats {
    writes: u64,
    batches: u64,
    largest_batch: usize,
    busy: Duration,
}

/// What the writer thread owns besides its queue.
struct Writer {
    store: Arc<RedbStore>,
    metrics: Arc<Metrics>,
    failing: Arc<AtomicBool>,
    on_commit: Box<dyn Fn() + Send>,
}

fn writer_loop(writer: &Writer, mut rx: mpsc::Receiver<Message>) {
    let mut stats = WriterStats::default();
    let mut stopping = false;
    while !stopping {
        let Some(first) = rx.blocking_recv() else {
            break;
        };
        let mut batch = Vec::new();
        let mut next = Some(first);
        while let Some(message) = next.take() {
            match message {
                Message::Write(op, reply) => batch.push((op, reply)),
                Message::Shutdown => {
                    stopping = true;
                    break;
                }
            }
            if batch.len() < MAX_BATCH {
                next = rx.try_recv().ok();
            }
        }
        if batch.is_empty() {
            continue;
        }
        let ops: Vec<&Write> = batch.iter().map(|(op, _)| op.as_ref()).collect();
        let started = std::time::Instant::now();
        let applied = apply_batch(&writer.store, &ops);
        let elapsed = started.elapsed();
        stats.busy += elapsed;
        writer.metrics.write_batch_size.observe(ops.len() as f64);
        writer
            .metrics
            .write_commit_seconds
            .observe_duration(elapsed);
        writer.failing.store(applied.is_err(), Ordering::Relaxed);
        stats.writes += ops.len() as u64;
        stats.batches += 1;
        stats.largest_batch = stats.largest_batch.max(ops.len());
        match applied {
            Ok(outcomes) => {
                (writer.on_commit)();
                for ((_, reply), outcome) in batch.into_iter().zip(outcomes) {
                    // The requester may have gone away; the write stands regardless.
                    let _ = reply.send(outcome);
                }
            }
            Err(err) => {
                log::error!(
                    "write batch of {} failed, nothing committed: {err}",
                    ops.len()
                );
                let message = err.to_string();
                let full = matches!(err, StoreError::Full { .. });
                for (_, reply) in batch {
                    let _ = reply.send(Err(if full {
                        Error::StorageFull
                    } else {
                        Error::Unavailable(message.clone())
                    }));
                }
            }
        }
    }
    if stats.batches > 0 {
        log::info!(
            "ingest writer stopped: {} writes in {} commits (average {:.1}, largest {}), \
             {:.1} µs of commit time per write",
            stats.writes,
            stats.batches,
            stats.writes as f64 / stats.batches as f64,
            stats.largest_batch,
            stats.busy.as_secs_f64() * 1e6 / stats.writes as f64
        );
    }
}

/// The record tables one batch works on.
struct Tables<'txn> {
    records: Table<'txn, (u64, u128), &'static [u8]>,
    changes: Table<'txn, u64, (u64, u128)>,
    /// The last change sequence written.
    change_seq: u64,
    idempotency: Table<'txn, (u64, &'static str), &'static [u8]>,
    idempotency_expiry: Table<'txn, (u64, u64, &'static str), ()>,
    deliveries: DeliveryTables<'txn>,
}

/// Applies a batch in one durable transaction. The outer error aborts everything; the inner
/// results are per operation.
fn apply_batch(
    store: &RedbStore,
    ops: &[&Write],
) -> Result<Vec<Result<WriteOutcome, Error>>, StoreError> {
    let txn = store.write()?;
    let outcomes = {
        let change_seq = read_counter(&txn.open_table(META)?, LAST_CHANGE_SEQ)?;
        let mut tables = Tables {
            records: txn.open_table(RECORDS)?,
            changes: txn.open_table(CHANGES)?,
            change_seq,
            idempotency: txn.open_table(IDEMPOTENCY)?,
            idempotency_expiry: txn.open_table(IDEMPOTENCY_EXPIRY)?,
            deliveries: DeliveryTables::open(&txn)?,
        };
        let outcomes = ops
            .iter()
            .map(|op| apply(&mut tables, op))
            .collect::<Result<Vec<_>, StoreError>>()?;
        let Tables {
            change_seq: last_seq,
            deliveries,
            ..
        } = tables;
        if last_seq != change_seq {
            write_counter(&txn, LAST_CHANGE_SEQ, last_seq)?;
        }
        deliveries.finish(&txn)?;
        outcomes
    };
    txn.commit()?;
    Ok(outcomes)
}

/// Applies one operation; if it changed a record, logs it in the change log and creates its
/// webhook deliveries.
fn apply(t: &mut Tables<'_>, write: &Write) -> Result<Result<WriteOutcome, Error>, StoreError> {
    let op = &write.op;
    let outcome = apply_to_records(t, op)?;
    let changed = match (op, &outcome) {
        (
            WriteOp::Create {
                partition, payload, ..
            },
            Ok(WriteOutcome::Created { id, .. }),
        ) => Some((*partition, *id, Event::Created, Some(payload.as_slice()))),
        (
            WriteOp::Replace {
                partition,
                id,
                payload,
                ..
            },
            Ok(WriteOutcome::Replaced),
        ) => Some((*partition, *id, Event::Replaced, Some(payload.as_slice()))),
        (WriteOp::Delete { partition, id }, Ok(WriteOutcome::Deleted)) => {
            Some((*partition, *id, Event::Deleted, None))
        }
        _ => None,
    };
    if let Some((partition, id, event, payload)) = changed {
        t.change_seq += 1;
        t.changes.insert(t.change_seq, (partition, id.0))?;
        t.deliveries
            .create_for_write(partition, id, event, payload, &write.hooks)?;
    }
    Ok(outcome)
}

fn apply_to_records(
    t: &mut Tables<'_>,
    op: &WriteOp,
) -> Result<Result<WriteOutcome, Error>, StoreError> {
    match op {
        WriteOp::Create {
            partition,
            id,
            payload,
            idempotency,
        } => {
            let created_at = id.created_at();
            if let Some(claim) = idempotency {
                if let Some(known) = claimed(t, *partition, claim, created_at)? {
                    return Ok(known);
                }
            }
            t.records.insert(
                (*partition, id.0),
                encode_record(created_at, payload).as_slice(),
            )?;
            if let Some(claim) = idempotency {
                let row = IdempotencyRow {
                    payload_hash: claim.payload_hash.clone(),
                    record_id: id.to_string(),
                    created_at,
                };
                t.idempotency
                    .insert((*partition, claim.key.as_str()), to_json(&row)?.as_slice())?;
                t.idempotency_expiry
                    .insert((time_key(created_at), *partition, claim.key.as_str()), ())?;
            }
            Ok(Ok(WriteOutcome::Created {
                id: *id,
                created_at,
            }))
        }
        WriteOp::Replace {
            partition,
            id,
            updated_at,
            payload,
        } => {
            if t.records.get((*partition, id.0))?.is_none() {
                return Ok(Err(Error::RecordNotFound));
            }
            t.records.insert(
                (*partition, id.0),
                encode_record(*updated_at, payload).as_slice(),
            )?;
            Ok(Ok(WriteOutcome::Replaced))
        }
        WriteOp::Delete { partition, id } => {
            if t.records.remove((*partition, id.0))?.is_none() {
                return Ok(Err(Error::RecordNotFound));
            }
            Ok(Ok(WriteOutcome::Deleted))
        }
    }
}

/// Checks an Idempotency-Key: `Some` answer when it is known and fresh (the original outcome,
/// or a conflict); `None` when the create should go ahead. Drops an expired claim.
fn claimed(
    t: &mut Tables<'_>,
    partition: u64,
    claim: &IdempotencyClaim,
    now: Timestamp,
) -> Result<Option<Result<WriteOutcome, Error>>, StoreError> {
    let row: IdempotencyRow = match t.idempotency.get((partition, claim.key.as_str()))? {
        Some(v) => from_json(v.value())?,
        None => return Ok(None),
    };
    if row.created_at.plus(IDEMPOTENCY_TTL) <= now {
        t.idempotency_expiry
            .remove((time_key(row.created_at), partition, claim.key.as_str()))?;
        t.idempotency.remove((partition, claim.key.as_str()))?;
        return Ok(None);
    }
    if row.payload_hash != claim.payload_hash {
        return Ok(Some(Err(Error::IdempotencyConflict)));
    }
    let id = RecordId::parse(&row.record_id)
        .ok_or_else(|| StoreError::Corrupt("record id in an idempotency row".into()))?;
    Ok(Some(Ok(WriteOutcome::Replayed {
        id,
        created_at: row.created_at,
    })))
}

/// Forgets Idempotency-Keys older than the TTL, at most `max` per call. Returns how many went.
pub fn purge_expired_idempotency(
    store: &RedbStore,
    now: Timestamp,
    max: usize,
) -> Result<usize, StoreError> {
    let cutoff = time_key(now.minus(IDEMPOTENCY_TTL));
    let txn = store.write()?;
    let mut purged = 0;
    {
        let mut expiry = txn.open_table(IDEMPOTENCY_EXPIRY)?;
        let mut keys = txn.open_table(IDEMPOTENCY)?;
        let mut doomed = Vec::new();
        for entry in expiry.range((0u64, 0u64, "")..(cutoff, 0u64, ""))? {
            let (key, _) = entry?;
            let (stored, partition, idem) = key.value();
            doomed.push((stored, partition, idem.to_string()));
            if doomed.len() >= max {
                break;
            }
        }
        for (stored, partition, idem) in &doomed {
            expiry.remove((*stored, *partition, idem.as_str()))?;
            // Only drop the claim if it is still the one this expiry entry describes.
            let current: Option<IdempotencyRow> = keys
                .get((*partition, idem.as_str()))?
                .map(|v| from_json(v.value()))
                .transpose()?;
            if current.is_some_and(|row| time_key(row.created_at) == *stored) {
                keys.remove((*partition, idem.as_str()))?;
            }
            purged += 1;
        }
    }
    txn.commit()?;
    Ok(purged)
}
