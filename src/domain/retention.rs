//! Retention: records older than their environment's retention window are deleted, and the
//! webhook deliveries made before it once they are finished.
//!
//! The spec keeps production records at least 60 days and sandbox records 30 days; both are
//! configurable (`[retention]`), production never below 60 days. The purge runs on the
//! injectable clock's schedule (hourly), deletes in bounded transactions so it never holds the
//! write lock for long, and logs every delete in the change log (the store does, see
//! `RecordsStore::purge_partition_before`), so the search index drops the record as it would
//! after a DELETE. The change stream's events of writes received before the same cutoff go
//! too (`EventsStore::purge_events_before`); a stream resuming from before them is refused.
//! So does the delivery log: a delivery made before the cutoff goes with its attempts once it
//! is delivered, given up or skipped (`PurgeStore::purge_deliveries_before`), by its own age
//! whether its record is still there or not; a pending one stays until it finishes and goes
//! with the next purge after that. A recovery can then no longer resend it.

use std::time::Duration;

use crate::core::clock::Timestamp;
use crate::core::config::RetentionConfig;
use crate::core::ticker::Ticker;
use crate::domain::handles::Handles;
use crate::domain::records::first_id_at;
use crate::store::{Effects, Environment, Partition, Store, StoreError};

/// How often (by the server's clock) the purge runs.
pub const PURGE_EVERY: Duration = Duration::from_secs(3600);
/// How often the schedule is checked (real time); cheap, and short enough for tests that move
/// an injected clock.
pub const SCHEDULE_TICK: Duration = Duration::from_secs(1);
/// Most records, events or deliveries deleted per transaction.
const PURGE_CHUNK: usize = 2_000;

/// How long `partition`'s records, events and finished deliveries are kept.
fn kept(partition: Partition, retention: &RetentionConfig) -> Duration {
    match partition.environment() {
        Environment::Sandbox => retention.sandbox,
        Environment::Production => retention.production,
    }
}

/// What one purge removed, and what its commits require.
pub struct Purged {
    pub records: usize,
    pub deliveries: usize,
    /// The partitions whose records changed.
    pub effects: Effects,
}

/// Deletes every record past its environment's retention at `now`, the change stream's
/// events of writes received before then, and the finished webhook deliveries made before
/// then with their attempts.
pub fn purge_expired(
    store: &dyn Store,
    now: Timestamp,
    retention: &RetentionConfig,
) -> Result<Purged, StoreError> {
    let cutoff = |partition| now.minus(kept(partition, retention));
    let mut records = 0;
    let mut changed = Vec::new();
    for partition in store.read()?.record_partitions()? {
        let below = first_id_at(cutoff(partition));
        let removed = in_chunks(|limit| store.purge_partition_before(partition, below, limit))?;
        if removed > 0 {
            records += removed;
            changed.push(partition);
        }
    }
    for partition in store.event_partitions()? {
        in_chunks(|limit| store.purge_events_before(partition, cutoff(partition), limit))?;
    }
    let mut deliveries = 0;
    for partition in store.delivery_partitions()? {
        deliveries +=
            in_chunks(|limit| store.purge_deliveries_before(partition, cutoff(partition), limit))?;
    }
    Ok(Purged {
        records,
        deliveries,
        effects: Effects::records_changed(changed),
    })
}

/// Calls `chunk` with [`PURGE_CHUNK`] until it removes fewer (none is left); returns how many
/// it removed in all.
fn in_chunks(
    mut chunk: impl FnMut(usize) -> Result<usize, StoreError>,
) -> Result<usize, StoreError> {
    let mut total = 0;
    loop {
        let removed = chunk(PURGE_CHUNK)?;
        total += removed;
        if removed < PURGE_CHUNK {
            return Ok(total);
        }
    }
}

/// Runs the purge whenever `handles`' clock says it is due; what its commits require takes
/// `handles`' after-commit path.
pub async fn run_schedule(handles: Handles, retention: RetentionConfig, mut ticker: Ticker) {
    let mut due = handles.now();
    while ticker.tick().await {
        let now = handles.now();
        if now < due {
            continue;
        }
        let (store, retention) = (handles.store.clone(), retention.clone());
        let turn = tokio::task::spawn_blocking(move || {
            crate::domain::jobs::run(store.as_ref(), "retention", now, PURGE_EVERY, || {
                purge_expired(store.as_ref(), now, &retention)
            })
        })
        .await;
        let purged = match turn {
            Ok(turn) => {
                due = turn.next;
                turn.ran
            }
            Err(err) => {
                due = now.plus(PURGE_EVERY);
                log::error!("retention purge task failed: {err}");
                None
            }
        };
        match purged {
            None => {}
            Some(Ok(purged)) => {
                if purged.records > 0 || purged.deliveries > 0 {
                    log::info!(
                        "retention: deleted {} records and {} webhook deliveries past their \
                         retention window",
                        purged.records,
                        purged.deliveries
                    );
                }
                handles.committed(purged.effects);
            }
            Some(Err(err)) => log::error!("retention purge failed: {err}"),
        }
    }
}
