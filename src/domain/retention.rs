//! Retention: records older than their environment's retention window are deleted, and the
//! webhook deliveries made before it once they are finished.
//!
//! The spec keeps production records at least 60 days and sandbox records 30 days; both are
//! configurable (`[retention]`), production never below 60 days, and an endpoint's owner may
//! set the endpoint's own window of each environment within the same minimums and the
//! server's `max` ([`Retention::valid`]); a window set before the operator lowered `max` is
//! held to it. The purge runs on the
//! injectable clock's schedule (hourly, and at once on this node when an owner shortens a
//! window: [`Retention::purge_soon`]), deletes in bounded transactions so it never holds the
//! write lock for long, and logs every delete in the change log (the store does, see
//! `RecordsStore::purge_partition_before`), so the search index drops the record as it would
//! after a DELETE. The change stream's events of writes received before the same cutoff go
//! too (`EventsStore::purge_events_before`); a stream resuming from before them is refused.
//! So does the delivery log: a delivery made before the cutoff goes with its attempts once it
//! is delivered, given up, skipped or cancelled (`PurgeStore::purge_deliveries_before`), by
//! its own age whether its record is still there or not; a pending one stays until it finishes and goes
//! with the next purge after that. A recovery can then no longer resend it.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::core::clock::Timestamp;
use crate::core::config::{
    MIN_PRODUCTION_RETENTION, MIN_SANDBOX_RETENTION, RetentionConfig, format_duration,
    parse_duration,
};
use crate::core::ticker::Ticker;
use crate::domain::error::{Error, Result};
use crate::domain::handles::Handles;
use crate::store::{Effects, Environment, Partition, RetentionRow, Store, StoreError, first_id_at};

/// How often (by the server's clock) the purge runs.
pub const PURGE_EVERY: Duration = Duration::from_secs(3600);
/// How often the schedule is checked (real time); cheap, and short enough for tests that move
/// an injected clock.
pub const SCHEDULE_TICK: Duration = Duration::from_secs(1);
/// Most records, events or deliveries deleted per transaction.
const PURGE_CHUNK: usize = 2_000;

/// The server's retention rules, and this node's request for an early purge.
#[derive(Clone, Default)]
pub struct Retention {
    pub config: RetentionConfig,
    purge_soon: Arc<AtomicBool>,
}

impl Retention {
    pub fn new(config: RetentionConfig) -> Retention {
        Retention {
            config,
            purge_soon: Arc::default(),
        }
    }

    /// The shortest window of `environment`.
    pub fn minimum(environment: Environment) -> Duration {
        match environment {
            Environment::Sandbox => MIN_SANDBOX_RETENTION,
            Environment::Production => MIN_PRODUCTION_RETENTION,
        }
    }

    /// The server's default window of `environment`.
    pub fn default_window(&self, environment: Environment) -> Duration {
        match environment {
            Environment::Sandbox => self.config.sandbox,
            Environment::Production => self.config.production,
        }
    }

    /// How long records of `environment` are kept on an endpoint with the windows `own`: its
    /// own, held to the server's bounds as they are now, or the server's default.
    pub fn kept(&self, own: &RetentionRow, environment: Environment) -> Duration {
        match own.get(environment) {
            Some(window) => {
                let window = window.max(Retention::minimum(environment));
                self.config.max.map_or(window, |max| window.min(max))
            }
            None => self.default_window(environment),
        }
    }

    /// An owner's window for `environment`, as written in the config file's duration syntax;
    /// 400 naming the bound it breaks.
    pub fn valid(&self, environment: Environment, text: &str) -> Result<Duration> {
        let key = format!("`retention.{}`", environment.as_str());
        let window = parse_duration(text)
            .map_err(|problem| Error::InvalidRequest(format!("{key}: {problem}.")))?;
        let minimum = Retention::minimum(environment);
        if window < minimum {
            return Err(Error::InvalidRequest(format!(
                "{key} must be at least {} ({} records are kept at least that long).",
                format_duration(minimum),
                environment.as_str()
            )));
        }
        if let Some(max) = self.config.max.filter(|max| window > *max) {
            return Err(Error::InvalidRequest(format!(
                "{key} must be at most {} (the server's `[retention] max`).",
                format_duration(max)
            )));
        }
        if window.subsec_nanos() != 0 {
            return Err(Error::InvalidRequest(format!(
                "{key} must be a whole number of seconds."
            )));
        }
        Ok(window)
    }

    /// Asks this node's schedule to purge at its next tick rather than at its next hour: a
    /// shortened window takes effect within a second, in the background.
    pub fn purge_soon(&self) {
        self.purge_soon.store(true, Ordering::SeqCst);
    }

    fn take_purge_soon(&self) -> bool {
        self.purge_soon.swap(false, Ordering::SeqCst)
    }
}

/// What one purge removed: also when it failed part way, as the chunks it committed before
/// stay deleted and their after-commit effects are still owed.
#[derive(Default)]
pub struct Purged {
    pub records: usize,
    pub deliveries: usize,
    /// The partitions whose records changed.
    pub changed: Vec<Partition>,
    /// The error that stopped it, after the counts above were committed.
    pub failed: Option<StoreError>,
}

/// Deletes every record past its environment's retention at `now`, the change stream's
/// events of writes received before then, and the finished webhook deliveries made before
/// then with their attempts.
pub fn purge_expired(store: &dyn Store, now: Timestamp, retention: &Retention) -> Purged {
    let mut purged = Purged::default();
    purged.failed = purge_into(store, now, retention, &mut purged).err();
    purged
}

/// [`purge_expired`]'s work, counted into `done` as each chunk commits.
fn purge_into(
    store: &dyn Store,
    now: Timestamp,
    retention: &Retention,
    done: &mut Purged,
) -> std::result::Result<(), StoreError> {
    // Each endpoint's own windows, read once per purge; a deleted endpoint's data goes with
    // its deletion's purge, and meanwhile by the server's defaults.
    let mut windows: HashMap<u64, RetentionRow> = HashMap::new();
    let mut cutoff = |partition: Partition| -> std::result::Result<Timestamp, StoreError> {
        let own = match windows.get(&partition.endpoint()) {
            Some(own) => *own,
            None => {
                let own = store
                    .read()?
                    .endpoint(partition.endpoint())?
                    .map(|row| row.retention)
                    .unwrap_or_default();
                windows.insert(partition.endpoint(), own);
                own
            }
        };
        Ok(now.minus(retention.kept(&own, partition.environment())))
    };
    for partition in store.read()?.record_partitions()? {
        let below = first_id_at(cutoff(partition)?);
        let before = done.records;
        let purged = in_chunks(&mut done.records, |limit| {
            store.purge_partition_before(partition, below, limit)
        });
        if done.records > before {
            done.changed.push(partition);
        }
        purged?;
    }
    for partition in store.event_partitions()? {
        let before = cutoff(partition)?;
        in_chunks(&mut 0, |limit| {
            store.purge_events_before(partition, before, limit)
        })?;
    }
    for partition in store.delivery_partitions()? {
        let before = cutoff(partition)?;
        in_chunks(&mut done.deliveries, |limit| {
            store.purge_deliveries_before(partition, before, limit)
        })?;
    }
    Ok(())
}

/// Calls `chunk` with [`PURGE_CHUNK`] until it removes fewer (none is left), adding what each
/// call removed to `removed` as it goes.
fn in_chunks(
    removed: &mut usize,
    mut chunk: impl FnMut(usize) -> std::result::Result<usize, StoreError>,
) -> std::result::Result<(), StoreError> {
    loop {
        let now = chunk(PURGE_CHUNK)?;
        *removed += now;
        if now < PURGE_CHUNK {
            return Ok(());
        }
    }
}

/// Runs the purge whenever `handles`' clock says it is due, or at once when an owner shortened
/// a window on this node; what its commits require takes `handles`' after-commit path.
pub async fn run_schedule(handles: Handles, retention: Retention, mut ticker: Ticker) {
    let mut due = handles.now();
    while ticker.tick().await {
        let now = handles.now();
        // An early purge runs besides the schedule (the periodic job's claim and its next
        // time stay): purging twice deletes nothing twice.
        let early = retention.take_purge_soon();
        if now < due && !early {
            continue;
        }
        let (store, rules) = (handles.store.clone(), retention.clone());
        let turn = tokio::task::spawn_blocking(move || {
            if now < due {
                let ran = Some(purge_expired(store.as_ref(), now, &rules));
                return crate::domain::jobs::Turn { ran, next: due };
            }
            crate::domain::jobs::run(store.as_ref(), "retention", now, PURGE_EVERY, || {
                purge_expired(store.as_ref(), now, &rules)
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
        let Some(purged) = purged else { continue };
        if purged.records > 0 || purged.deliveries > 0 {
            log::info!(
                "retention: deleted {} records and {} webhook deliveries past their retention \
                 window",
                purged.records,
                purged.deliveries
            );
        }
        if let Some(err) = &purged.failed {
            log::error!("retention purge failed, the rest waits for the next: {err}");
        }
        handles.committed(Effects::records_changed(purged.changed));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A purge that fails part way still counts what its earlier chunks committed, so the
    /// log and the after-commit effects cover them.
    #[test]
    fn chunks_committed_before_a_failure_are_counted() {
        let mut answers = vec![
            Err(StoreError::Backend("the database went away".into())),
            Ok(PURGE_CHUNK),
            Ok(PURGE_CHUNK),
        ];
        let mut removed = 0;
        let result = in_chunks(&mut removed, |limit| {
            assert_eq!(limit, PURGE_CHUNK);
            answers.pop().expect("no call after the failure")
        });
        assert!(matches!(result, Err(StoreError::Backend(_))));
        assert_eq!(removed, 2 * PURGE_CHUNK);
        assert!(answers.is_empty());

        let mut removed = 5;
        let mut answers = vec![Ok(7), Ok(PURGE_CHUNK)];
        in_chunks(&mut removed, |_| {
            answers.pop().expect("no call after the last chunk")
        })
        .unwrap();
        assert_eq!(removed, 5 + PURGE_CHUNK + 7);
    }
}
