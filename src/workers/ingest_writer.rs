//! The ingest writer: every data write goes through one writer thread that commits in groups.
//!
//! A request hands its write to `Ingest::submit` (the queue, `domain::ingest`) and waits. The
//! writer thread takes everything queued at that moment (up to [`MAX_BATCH`]), applies it in
//! one durable transaction of the store (`RecordsStore::apply_batch`, which commits with
//! fsync), and only then answers every waiting request. So:
//!
//! - **A 202 is a promise.** The answer that lets the HTTP layer send 202 leaves only after the
//!   commit holding the write has returned, and the store's commit is durable (fsynced) when
//!   it returns. `kill -9` or power loss after that cannot lose the write.
//! - **Group commit.** Under load many writes share one fsync; with one request in flight a
//!   write costs one commit. No timer adds latency.
//! - **Applied in the same commit.** The transaction that makes a write durable also applies it
//!   to the records and appends it to the change log (`store::changes`), so there is no
//!   state "acknowledged but not yet stored", and a read after the 202 sees the write. Work that
//!   follows a write consumes the change log from its own durable position (search indexing)
//!   or is queued in the same commit (webhook deliveries, `webhooks::deliveries`): it survives
//!   restarts and resumes where it stopped.
//! - **All or nothing.** A storage failure aborts the whole transaction and every request of
//!   the batch gets a 503: nothing is acknowledged, nothing is half-written. A refused operation
//!   (unknown record, idempotency conflict) changes nothing and does not affect its neighbours.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::core::metrics::Metrics;
use crate::core::telemetry::{Span, SpanKind, Telemetry};
use crate::domain::handles::Handles;
use crate::domain::ingest::{self, Ingest, Message, Queue, Reply, Write};
use crate::store::records::Change;
use crate::store::{Effects, StoreError};

/// How many records one transaction takes at most (a batch request's records count each;
/// one batch request is never split, so a transaction may hold up to a batch's records more).
pub const MAX_BATCH: usize = 2048;

/// Joins the writer thread after `Ingest::shutdown`.
pub struct WriterThread(std::thread::JoinHandle<()>);

impl WriterThread {
    pub fn join(self) {
        if self.0.join().is_err() {
            log::error!("the ingest writer thread panicked");
        }
    }
}

/// Starts the writer thread on `handles`' store; returns the queue to submit writes to. After
/// every successful commit the writer tells `handles`' after-commit path what the commit
/// requires, with the partitions it wrote a change to.
pub fn start(
    handles: Handles,
    metrics: Arc<Metrics>,
    telemetry: Telemetry,
) -> std::io::Result<(Ingest, WriterThread)> {
    let (ingest, queue) = ingest::queue();
    let writer = Writer {
        handles,
        metrics,
        telemetry,
    };
    let handle = std::thread::Builder::new()
        .name("ingest-writer".into())
        .spawn(move || writer_loop(&writer, queue))?;
    Ok((ingest, WriterThread(handle)))
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
    handles: Handles,
    metrics: Arc<Metrics>,
    telemetry: Telemetry,
}

fn writer_loop(writer: &Writer, mut queue: Queue) {
    let mut stats = WriterStats::default();
    let mut stopping = false;
    while !stopping {
        let Some(first) = queue.next_blocking() else {
            break;
        };
        let mut batch = Vec::new();
        let mut records = 0;
        let mut next = Some(first);
        while let Some(message) = next.take() {
            match message {
                Message::Write(write, reply) => {
                    records += write.record.record_count();
                    batch.push((write, reply));
                }
                Message::Shutdown => {
                    stopping = true;
                    break;
                }
            }
            if records < MAX_BATCH {
                next = queue.try_next();
            }
        }
        if batch.is_empty() {
            continue;
        }
        commit(writer, &queue, batch, &mut stats);
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

/// The spans of a batch's traced writes: each waited in the queue from when it was queued
/// until the batch began, then shared the batch's commit.
fn record_spans(
    telemetry: &Telemetry,
    batch: &[(Box<Write>, Reply)],
    started_at: SystemTime,
    failed: Option<&StoreError>,
) {
    let committed_at = SystemTime::now();
    let writes = i64::try_from(batch.len()).unwrap_or(i64::MAX);
    for (write, reply) in batch {
        let Some(request) = write.hooks.trace else {
            continue;
        };
        let queued = Span {
            end: started_at,
            ..Span::ended_now(
                request.child(),
                Some(request.span_id),
                "ingest.queue",
                SpanKind::Internal,
                reply.queued_at,
            )
        };
        telemetry.record(queued);
        let mut commit = Span {
            end: committed_at,
            ..Span::ended_now(
                request.child(),
                Some(request.span_id),
                "ingest.commit",
                SpanKind::Internal,
                started_at,
            )
        }
        .attribute("intake.batch.writes", writes);
        commit.error = failed.map(|err| err.to_string());
        telemetry.record(commit);
    }
}

/// Applies `batch` in one durable transaction, then answers each of its writes.
fn commit(
    writer: &Writer,
    queue: &Queue,
    batch: Vec<(Box<Write>, Reply)>,
    stats: &mut WriterStats,
) {
    let writes: Vec<_> = batch.iter().map(|(write, _)| write.batch_write()).collect();
    let started = std::time::Instant::now();
    let started_at = SystemTime::now();
    let applied = writer.handles.store.apply_batch(&writes);
    let elapsed = started.elapsed();
    if writer.telemetry.enabled() {
        record_spans(
            &writer.telemetry,
            &batch,
            started_at,
            applied.as_ref().err(),
        );
    }
    stats.busy += elapsed;
    writer.metrics.write_batch_size.observe(writes.len() as f64);
    writer
        .metrics
        .write_commit_seconds
        .observe_duration(elapsed);
    queue.set_failing(applied.is_err());
    stats.writes += writes.len() as u64;
    stats.batches += 1;
    stats.largest_batch = stats.largest_batch.max(writes.len());
    match applied {
        Ok(applied) => {
            let mut effects = Effects::records_changed(
                writes
                    .iter()
                    .zip(&applied.outcomes)
                    .flat_map(|(write, outcome)| Change::of(write.write, outcome))
                    .map(|change| change.partition),
            );
            effects.merge(applied.effects);
            // The writers are answered first: their requests' tasks are queued before the
            // work the wake-ups start (a hundred change streams reading the commit, say).
            for ((_, reply), outcome) in batch.into_iter().zip(applied.outcomes) {
                reply.applied(outcome);
            }
            writer.handles.committed(effects);
        }
        Err(err) => {
            log::error!(
                "write batch of {} failed, nothing committed: {err}",
                batch.len()
            );
            for (_, reply) in batch {
                reply.failed(&err);
            }
        }
    }
}
