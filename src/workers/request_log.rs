//! The per-endpoint request log: every data call, kept for a bounded time.
//!
//! Handlers hand entries to [`RequestLog::record`], which never blocks and never fails the
//! request: entries go through a bounded channel to one background thread that writes them in
//! batches (one durable commit per batch, at most a few per second) and, once an hour, deletes
//! entries older than the configured retention. If the channel is full (storage far behind),
//! entries are dropped and counted in the log rather than slowing the API down.
//!
//! The log is a store of its own ([`RequestLogStore`]; on redb the file `requests.redb`): redb
//! has one writer at a time per file, and a batch of log inserts must never make a data write
//! wait for its commit.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{
    Receiver, RecvTimeoutError, SyncSender, TryRecvError, TrySendError, sync_channel,
};
use std::time::Duration;

use serde::Serialize;

use crate::core::clock::{Clock, SharedClock, Timestamp};
use crate::core::cursor::{self, CursorKind, Position};
use crate::domain::error::{Error, Result};
use crate::domain::records::{Page, Pagination};
use crate::store::request_log::{LogPosition, RequestLogStore, StatusFilter};
use crate::store::{RequestLogRow, time_from_key};

const CHANNEL_CAPACITY: usize = 16_384;
/// A batch can take everything the channel holds: one commit per window keeps up with any
/// rate the channel can buffer (16,384 entries per 200 ms).
const MAX_BATCH: usize = CHANNEL_CAPACITY;
/// How long the writer gathers entries before committing a batch.
const BATCH_WINDOW: Duration = Duration::from_millis(200);
const PURGE_EVERY: Duration = Duration::from_secs(3600);

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
    store: Arc<dyn RequestLogStore>,
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

impl EntryView {
    fn new(at: LogPosition, row: RequestLogRow) -> EntryView {
        EntryView {
            time: time_from_key(at.time).to_rfc3339(),
            method: row.method,
            route: row.route,
            status: row.status,
            key_id: row.key_id,
            latency_ms: row.latency_us as f64 / 1000.0,
            environment: row.environment.as_str(),
            request_id: row.request_id,
        }
    }
}

impl RequestLog {
    /// Starts the writer thread on the request-log store.
    pub fn start(
        store: Arc<dyn RequestLogStore>,
        clock: SharedClock,
        retention: Duration,
    ) -> std::io::Result<(RequestLog, LogThread)> {
        let (tx, rx) = sync_channel(CHANNEL_CAPACITY);
        let handle = std::thread::Builder::new()
            .name("request-log".into())
            .spawn({
                let store = store.clone();
                move || writer_loop(store.as_ref(), clock.as_ref(), retention, rx)
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
    store: &dyn RequestLogStore,
    clock: &dyn Clock,
    retention: Duration,
    rx: Receiver<Message>,
) {
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
            if let Err(err) = store.append_requests(&batch) {
                log::error!("could not write {} request-log entries: {err}", batch.len());
            }
        }
        let now = clock.now();
        if last_purge.is_none_or(|t| t.plus(PURGE_EVERY) <= now) {
            last_purge = Some(now);
            match store.purge_requests_before(now.minus(retention)) {
                Ok(0) => {}
                Ok(n) => log::info!("request log: purged {n} entries past retention"),
                Err(err) => log::error!("request-log purge failed: {err}"),
            }
        }
    }
}

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
        let before = match cursor {
            Some(text) => {
                let pos = cursor::parse(CursorKind::RequestLog, partition, text)?;
                let sequence =
                    u64::try_from(pos.tiebreak).map_err(|_| Error::InvalidParameter {
                        name: "cursor",
                        reason: "it is not a cursor returned by this listing".into(),
                    })?;
                Some(LogPosition {
                    time: pos.time,
                    sequence,
                })
            }
            None => None,
        };
        let page = self.store.requests_page(partition, before, limit, filter)?;
        let next_cursor = page.next.map(|at| {
            let pos = Position {
                time: at.time,
                tiebreak: u128::from(at.sequence),
            };
            cursor::encode(CursorKind::RequestLog, partition, pos)
        });
        Ok(Page {
            data: page
                .entries
                .into_iter()
                .map(|(at, row)| EntryView::new(at, row))
                .collect(),
            pagination: Pagination { next_cursor },
        })
    }
}
