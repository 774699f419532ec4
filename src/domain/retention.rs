//! Retention: records older than their environment's retention window are deleted.
//!
//! The spec keeps production records at least 60 days and sandbox records 30 days; both are
//! configurable (`[retention]`), production never below 60 days. The purge runs on the
//! injectable clock's schedule (hourly), deletes in bounded transactions so it never holds the
//! write lock for long, and logs every delete in the change log (the store does, see
//! `RecordsStore::purge_partition_before`), so the search index drops the record as it would
//! after a DELETE. The change stream's events of writes received before the same cutoff go
//! too (`EventsStore::purge_events_before`); a stream resuming from before them is refused.

use std::time::Duration;

use crate::core::clock::Timestamp;
use crate::core::config::RetentionConfig;
use crate::core::ticker::Ticker;
use crate::domain::handles::Handles;
use crate::domain::records::first_id_at;
use crate::store::{Effects, Environment, Store, StoreError, partition_environment};

/// How often (by the server's clock) the purge runs.
pub const PURGE_EVERY: Duration = Duration::from_secs(3600);
/// How often the schedule is checked (real time); cheap, and short enough for tests that move
/// an injected clock.
pub const SCHEDULE_TICK: Duration = Duration::from_secs(1);
/// Most records deleted per transaction.
const PURGE_CHUNK: usize = 2_000;

/// How long `partition`'s records and events are kept.
fn kept(partition: u64, retention: &RetentionConfig) -> Duration {
    match partition_environment(partition) {
        Environment::Sandbox => retention.sandbox,
        Environment::Production => retention.production,
    }
}

/// Deletes every record past its environment's retention at `now`, and the change stream's
/// events of writes received before then; returns how many records, and what the purge's
/// commits require (the partitions whose records changed).
pub fn purge_expired(
    store: &dyn Store,
    now: Timestamp,
    retention: &RetentionConfig,
) -> Result<(usize, Effects), StoreError> {
    let partitions = store.read()?.record_partitions()?;
    let mut total = 0;
    let mut changed = Vec::new();
    for partition in partitions {
        let cutoff = now.minus(kept(partition, retention));
        let removed = purge_partition(store, partition, first_id_at(cutoff))?;
        if removed > 0 {
            total += removed;
            changed.push(partition);
        }
    }
    for partition in store.event_partitions()? {
        let cutoff = now.minus(kept(partition, retention));
        while store.purge_events_before(partition, cutoff, PURGE_CHUNK)? == PURGE_CHUNK {}
    }
    Ok((total, Effects::records_changed(changed)))
}

/// Deletes the records of `partition` with an id below `below`, in chunks.
fn purge_partition(store: &dyn Store, partition: u64, below: u128) -> Result<usize, StoreError> {
    let mut total = 0;
    loop {
        let removed = store.purge_partition_before(partition, below, PURGE_CHUNK)?;
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
            None | Some(Ok((0, _))) => {}
            Some(Ok((n, effects))) => {
                log::info!("retention: deleted {n} records past their retention window");
                handles.committed(effects);
            }
            Some(Err(err)) => log::error!("retention purge failed: {err}"),
        }
    }
}
