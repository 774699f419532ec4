//! The ingest writers: every data write goes through a writer thread that commits in groups.
//!
//! A request hands its write to `Ingest::submit` (the queue, `domain::ingest`) and waits. A
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
//!
//! **How many writers.** redb has one write transaction at a time, so a node on redb runs one
//! writer. On PostgreSQL one writer spends most of its time waiting for the database (round
//! trips, the commit's fsync), so a node runs `[storage.postgres] ingest_writers` of them: while
//! one commits, the next takes what queued meanwhile. Their batches are `SERIALIZABLE`
//! transactions like those of several nodes, and what concurrent batches may not do to the
//! poll feed (commit a create below a bound a poll has passed) is ruled out as it is across
//! nodes: a create counts as in flight from its stamp to its answer (`domain::poll::InFlight`).
//! Writes in flight at once have no order between them; a write submitted after another's
//! answer always commits after it.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::core::metrics::Metrics;
use crate::core::telemetry::{Span, SpanKind, Telemetry};
use crate::domain::handles::Handles;
use crate::domain::ingest::{self, Ingest, Queue, Reply, Write};
use crate::store::records::Change;
use crate::store::{Effects, StoreError};

/// How many records one transaction takes at most (a batch request's records count each;
/// one batch request is never split, so a transaction may hold up to a batch's records more).
pub const MAX_BATCH: usize = 2048;

/// Joins the writer threads after `Ingest::shutdown`.
pub struct WriterThreads(Vec<std::thread::JoinHandle<WriterStats>>);

impl WriterThreads {
    /// Waits for every writer to stop, then logs what they did together.
    pub fn join(self) {
        let writers = self.0.len();
        let mut all = WriterStats::default();
        for thread in self.0 {
            match thread.join() {
                Ok(stats) => {
                    all.writes += stats.writes;
                    all.batches += stats.batches;
                    all.largest_batch = all.largest_batch.max(stats.largest_batch);
                    all.busy += stats.busy;
                }
                Err(_) => log::error!("an ingest writer thread panicked"),
            }
        }
        if all.batches > 0 {
            // benches/ parse this line.
            log::info!(
                "ingest writer stopped: {} writes in {} commits (average {:.1}, largest {}), \
                 {:.1} µs of commit time per write, {writers} writer(s)",
                all.writes,
                all.batches,
                all.writes as f64 / all.batches as f64,
                all.largest_batch,
                all.busy.as_secs_f64() * 1e6 / all.writes as f64
            );
        }
    }
}

/// Starts `writers` writer threads (at least one) on `handles`' store; returns the queue to
/// submit writes to. After every successful commit a writer tells `handles`' after-commit path
/// what the commit requires, with the partitions it wrote a change to.
pub fn start(
    handles: Handles,
    metrics: Arc<Metrics>,
    telemetry: Telemetry,
    writers: usize,
) -> std::io::Result<(Ingest, WriterThreads)> {
    let (ingest, queue) = ingest::queue();
    let queue = Arc::new(queue);
    let writer = Arc::new(Writer {
        handles,
        metrics,
        telemetry,
    });
    let mut threads = Vec::new();
    for _ in 0..writers.max(1) {
        let (writer, queue) = (writer.clone(), queue.clone());
        threads.push(
            std::thread::Builder::new()
                .name("ingest-writer".into())
                .spawn(move || writer_loop(&writer, &queue))?,
        );
    }
    Ok((ingest, WriterThreads(threads)))
}

/// What a writer has done since start; logged at shutdown.
#[derive(Default)]
struct WriterStats {
    writes: u64,
    batches: u64,
    largest_batch: usize,
    busy: Duration,
}

/// What the writer threads share besides their queue.
struct Writer {
    handles: Handles,
    metrics: Arc<Metrics>,
    telemetry: Telemetry,
}

fn writer_loop(writer: &Writer, queue: &Queue) -> WriterStats {
    let mut stats = WriterStats::default();
    while let Some(batch) = queue.next_batch(MAX_BATCH) {
        if !batch.is_empty() {
            commit(writer, queue, batch, &mut stats);
        }
    }
    stats
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
