//! Retention: records older than their environment's retention window are deleted.
//!
//! The spec keeps production records at least 60 days and sandbox records 30 days; both are
//! configurable (`[retention]`), production never below 60 days. The purge runs on the
//! injectable clock's schedule (hourly), deletes in bounded transactions so it never holds the
//! write lock for long, and logs every delete in the change log, so the search index drops the
//! record as it would after a DELETE.

use std::sync::Arc;
use std::time::Duration;

use redb::ReadableTable;

use crate::core::clock::Timestamp;
use crate::core::config::RetentionConfig;
use crate::core::ticker::Ticker;
use crate::http::app::App;
use crate::store::{
    CHANGES, ENDPOINTS, Environment, LAST_CHANGE_SEQ, META, RECORDS, RedbStore, StoreError,
    partition, read_counter, time_key, write_counter,
};

/// How often (by the server's clock) the purge runs.
pub const PURGE_EVERY: Duration = Duration::from_secs(3600);
/// How often the schedule is checked (real time); cheap, and short enough for tests that move
/// an injected clock.
pub const SCHEDULE_TICK: Duration = Duration::from_secs(1);
/// Most records deleted per transaction.
const PURGE_CHUNK: usize = 2_000;

/// Deletes every record past its environment's retention at `now`; returns how many.
pub fn purge_expired(
    store: &RedbStore,
    now: Timestamp,
    retention: &RetentionConfig,
) -> Result<usize, StoreError> {
    let endpoint_ids: Vec<u64> = {
        let txn = store.read()?;
        let table = txn.open_table(ENDPOINTS)?;
        table
            .iter()?
            .map(|e| e.map(|(k, _)| k.value()))
            .collect::<Result<_, _>>()?
    };
    let mut total = 0;
    for id in endpoint_ids {
        for env in [Environment::Sandbox, Environment::Production] {
            let keep = match env {
                Environment::Sandbox => retention.sandbox,
                Environment::Production => retention.production,
            };
            let cutoff = u128::from(time_key(now.minus(keep))) << 64;
            total += purge_partition(store, partition(id, env), cutoff)?;
        }
    }
    Ok(total)
}

/// Deletes the records of `p` with an id below `cutoff`, in chunks.
fn purge_partition(store: &RedbStore, p: u64, cutoff: u128) -> Result<usize, StoreError> {
    let mut total = 0;
    loop {
        let txn = store.write()?;
        let removed = {
            let mut records = txn.open_table(RECORDS)?;
            let ids: Vec<u128> = records
                .range((p, 0)..(p, cutoff))?
                .take(PURGE_CHUNK)
                .map(|e| e.map(|(k, _)| k.value().1))
                .collect::<Result<_, _>>()?;
            let mut changes = txn.open_table(CHANGES)?;
            let mut seq = read_counter(&txn.open_table(META)?, LAST_CHANGE_SEQ)?;
            for id in &ids {
                records.remove((p, *id))?;
                seq += 1;
                changes.insert(seq, (p, *id))?;
            }
            if !ids.is_empty() {
                write_counter(&txn, LAST_CHANGE_SEQ, seq)?;
            }
            ids.len()
        };
        txn.commit()?;
        total += removed;
        if removed < PURGE_CHUNK {
            return Ok(total);
        }
    }
}

/// Runs the purge whenever the clock says it is due; `on_purged` wakes the change-log readers.
pub async fn run_schedule(
    app: Arc<App>,
    mut ticker: Ticker,
    on_purged: impl Fn() + Send + 'static,
) {
    let mut due = app.clock.now();
    while ticker.tick().await {
        let now = app.clock.now();
        if now < due {
            continue;
        }
        due = now.plus(PURGE_EVERY);
        let store_app = app.clone();
        let purged = tokio::task::spawn_blocking(move || {
            purge_expired(&store_app.store, now, &store_app.config.retention)
        })
        .await;
        match purged {
            Ok(Ok(0)) => {}
            Ok(Ok(n)) => {
                log::info!("retention: deleted {n} records past their retention window");
                on_purged();
            }
            Ok(Err(err)) => log::error!("retention purge failed: {err}"),
            Err(err) => log::error!("retention purge task failed: {err}"),
        }
    }
}
