//! The per-endpoint request log: every data call, kept for a bounded time.
//!
//! Handlers hand entries to [`RequestLog::record`], which never blocks and never fails the
//! request: entries go through a bounded channel to one background thread that writes them in
//! batches (one durable commit per batch, at most a few per second) and, once an hour, deletes
//! entries older than the configured retention. If the channel is full (storage far behind),
//! entries are dropped and counted in the log rather than slowing the API down.
//!
//! The log lives in its own redb file (`requests.redb`): redb has one writer at a time per
//! file, and a batch of log inserts must never make a data write wait for its commit.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{
    Receiver, RecvTimeoutError, SyncSender, TryRecvError, TrySendError, sync_channel,
};
use std::time::Duration;

use redb::ReadableTable;
use serde::Serialize;

use crate::core::clock::{SharedClock, Timestamp};
use crate::core::cursor::{self, CursorKind, Position};
use crate::domain::error::{Error, Result};
use crate::domain::records::{Page, Pagination};
use crate::store::{
    REQUEST_LOG, RedbStore, RequestLogRow, StoreError, from_json, time_from_key, time_key, to_json,
};

const CHANNEL_CAPACITY: usize = 16_384;
/// A batch can take everything the channel holds: one commit per window keeps up with any
/// rate the channel can buffer (16,384 entries per 200 ms).
const MAX_BATCH: usize = CHANNEL_CAPACITY;
/// How long the writer gathers entries before committing a batch.
const BATCH_WINDOW: Duration = Duration::from_millis(200);
const PURGE_EVERY: Duration = Duration::from_secs(3600);
const PURGE_CHUNK: usize = 10_000;

pub const LIST_LIMIT_DEFAULT: usize = 50;
pub const LIST_LIMIT_MAX: usize = 100;

enum Message {
    Entry(u64, RequestLogRow),
    /// Write what is queued, then stop.
    Shutdown,
}

/// Handle for recording entries; cheap to clone.
#[derive(Clone)]
pub struct RequestLog {
    store: Arc<RedbStore>,
    tx: SyncSender<Message>,
    dropped: Arc<AtomicU64>,
}

pub struct LogThread(std::thread::JoinHandle<()>);

impl LogThread {
    pub fn join(self) {
        if self.0.join().is_err() {
            log::error!("the request-log thread panicked");
        }
    }
}

/// A request-log entry as the management API shows it.
#[derive(Debug, Serialize)]
pub struct EntryView {
    pub time: String,
    pub method: String,
    pub route: String,
    pub status: u16,
    pub key_id: Option<String>,
    pub latency_ms: f64,
    pub environment: &'static str,
    pub request_id: String,
}

impl RequestLog {
    /// Starts the writer thread on the request-log store.
    pub fn start(
        store: Arc<RedbStore>,
        clock: SharedClock,
        retention: Duration,
    ) -> std::io::Result<(RequestLog, LogThread)> {
        let (tx, rx) = sync_channel(CHANNEL_CAPACITY);
        let handle = std::thread::Builder::new()
            .name("request-log".into())
            .spawn({
                let store = store.clone();
                move || writer_loop(&store, clock.as_ref(), retention, rx)
            })?;
        Ok((
            RequestLog {
                store,
                tx,
                dropped: Arc::new(AtomicU64::new(0)),
            },
            LogThread(handle),
        ))
    }

    /// Queues an entry for `partition`; never blocks.
    pub fn record(&self, partition: u64, row: RequestLogRow) {
        match self.tx.try_send(Message::Entry(partition, row)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                if n.is_power_of_two() {
                    log::warn!("request log is behind; {n} entries dropped so far");
                }
            }
            Err(TrySendError::Disconnected(_)) => {}
        }
    }

    /// Writes what is queued and stops the writer thread.
    pub fn shutdown(&self) {
        let _ = self.tx.send(Message::Shutdown);
    }
}

fn writer_loop(
    store: &RedbStore,
    clock: &dyn crate::core::clock::Clock,
    retention: Duration,
    rx: Receiver<Message>,
) {
    let mut sequence = u64::try_from(clock.now().as_micros()).unwrap_or(0);
    let mut last_purge: Option<Timestamp> = None;
    let mut stopping = false;
    while !stopping {
        let mut batch = Vec::new();
        match rx.recv_timeout(PURGE_EVERY.min(Duration::from_secs(60))) {
            Ok(Message::Entry(p, row)) => batch.push((p, row)),
            Ok(Message::Shutdown) | Err(RecvTimeoutError::Disconnected) => stopping = true,
            Err(RecvTimeoutError::Timeout) => {}
        }
        if !batch.is_empty() && !stopping {
            // Gather by waiting out the window, then taking what came: waiting in
            // `recv_timeout` instead would wake this thread for every single entry.
            std::thread::sleep(BATCH_WINDOW);
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(Message::Entry(p, row)) => batch.push((p, row)),
                    Ok(Message::Shutdown) | Err(TryRecvError::Disconnected) => {
                        stopping = true;
                        break;
                    }
                    Err(TryRecvError::Empty) => break,
                }
            }
            if let Err(err) = write_batch(store, &mut sequence, &batch) {
                log::error!("could not write {} request-log entries: {err}", batch.len());
            }
        }
        let now = clock.now();
        if last_purge.is_none_or(|t| t.plus(PURGE_EVERY) <= now) {
            last_purge = Some(now);
            match purge(store, now.minus(retention)) {
                Ok(0) => {}
                Ok(n) => log::info!("request log: purged {n} entries past retention"),
                Err(err) => log::error!("request-log purge failed: {err}"),
            }
        }
    }
}

fn write_batch(
    store: &RedbStore,
    sequence: &mut u64,
    batch: &[(u64, RequestLogRow)],
) -> Result<(), StoreError> {
    let txn = store.write()?;
    {
        let mut table = txn.open_table(REQUEST_LOG)?;
        for (partition, row) in batch {
            *sequence += 1;
            table.insert(
                (*partition, time_key(row.time), *sequence),
                to_json(row)?.as_slice(),
            )?;
        }
    }
    txn.commit()?;
    Ok(())
}

/// Deletes entries older than `cutoff` in every partition, in bounded transactions.
pub fn purge(store: &RedbStore, cutoff: Timestamp) -> Result<usize, StoreError> {
    let cut = time_key(cutoff);
    let mut total = 0;
    let mut next_partition = Some(0u64);
    while let Some(partition) = next_partition {
        // The first entry at or after this partition names the next partition to visit.
        let found = {
            let txn = store.read()?;
            let table = txn.open_table(REQUEST_LOG)?;
            let first = table.range((partition, 0, 0)..)?.next().transpose()?;
            first.map(|(k, _)| k.value().0)
        };
        let Some(partition) = found else { break };
        loop {
            let txn = store.write()?;
            let removed = {
                let mut table = txn.open_table(REQUEST_LOG)?;
                let keys: Vec<(u64, u64, u64)> = table
                    .range((partition, 0, 0)..(partition, cut, 0))?
                    .take(PURGE_CHUNK)
                    .map(|e| e.map(|(k, _)| k.value()))
                    .collect::<Result<_, _>>()?;
                for key in &keys {
                    table.remove(*key)?;
                }
                keys.len()
            };
            txn.commit()?;
            total += removed;
            if removed < PURGE_CHUNK {
                break;
            }
        }
        next_partition = partition.checked_add(1);
    }
    Ok(total)
}

/// Which entries a listing shows, by response status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusFilter {
    Any,
    /// One class: 2 for 2xx, 4 for 4xx, 5 for 5xx...
    Class(u16),
}

impl StatusFilter {
    fn matches(self, status: u16) -> bool {
        match self {
            StatusFilter::Any => true,
            StatusFilter::Class(class) => status / 100 == class,
        }
    }
}

/// A filtered listing reads at most this many entries per page, so a rare status cannot make
/// one page read the whole log; the page then ends early with a cursor to read on.
const FILTER_SCAN_LIMIT: usize = 5_000;

impl RequestLog {
    /// The entries of one partition, newest first.
    pub fn list(
        &self,
        partition: u64,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<Page<EntryView>> {
        self.list_matching(partition, limit, cursor, StatusFilter::Any)
    }

    /// The entries of one partition whose status passes `filter`, newest first.
    pub fn list_matching(
        &self,
        partition: u64,
        limit: usize,
        cursor: Option<&str>,
        filter: StatusFilter,
    ) -> Result<Page<EntryView>> {
        let store = &self.store;
        let upper = match cursor {
            Some(text) => {
                let pos = cursor::parse(CursorKind::RequestLog, partition, text)?;
                let seq = u64::try_from(pos.tiebreak).map_err(|_| Error::InvalidParameter {
                    name: "cursor",
                    reason: "it is not a cursor returned by this listing".into(),
                })?;
                std::ops::Bound::Excluded((partition, pos.time, seq))
            }
            None => std::ops::Bound::Included((partition, u64::MAX, u64::MAX)),
        };
        let txn = store.read()?;
        let table = txn.open_table(REQUEST_LOG)?;
        let mut data = Vec::with_capacity(limit);
        let mut last = None;
        let mut more = false;
        for (scanned, entry) in table
            .range::<(u64, u64, u64)>((std::ops::Bound::Included((partition, 0, 0)), upper))?
            .rev()
            .enumerate()
        {
            let (key, value) = entry?;
            if data.len() == limit || scanned == FILTER_SCAN_LIMIT {
                more = true;
                break;
            }
            let (_, time, seq) = key.value();
            let row: RequestLogRow = from_json(value.value())?;
            if !filter.matches(row.status) {
                last = Some(Position {
                    time,
                    tiebreak: u128::from(seq),
                });
                continue;
            }
            data.push(EntryView {
                time: time_from_key(time).to_rfc3339(),
                method: row.method,
                route: row.route,
                status: row.status,
                key_id: row.key_id,
                latency_ms: row.latency_us as f64 / 1000.0,
                environment: row.environment.as_str(),
                request_id: row.request_id,
            });
            last = Some(Position {
                time,
                tiebreak: u128::from(seq),
            });
        }
        let next_cursor = match (more, last) {
            (true, Some(pos)) => Some(cursor::encode(CursorKind::RequestLog, partition, pos)),
            _ => None,
        };
        Ok(Page {
            data,
            pagination: Pagination { next_cursor },
        })
    }
}
