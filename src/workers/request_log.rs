//! The per-endpoint request log: every data call, kept for a bounded time.
//!
//! Handlers hand entries to [`RequestLog::record`], which never blocks and never fails the
//! request: entries go through a channel to one background thread that writes them in
//! batches (one durable commit per batch, at most a few per second) and, once an hour, deletes
//! entries older than the configured retention. At most [`CHANNEL_CAPACITY`] entries wait; past
//! that (storage far behind), entries are dropped and counted in the log rather than slowing
//! the API down. The channel grows with what waits (a preallocated one of that capacity held
//! 2.2 MB whether the server was busy or not).
//!
//! The log is a store of its own ([`RequestLogStore`]; on redb the file `requests.redb`): redb
//! has one writer at a time per file, and a batch of log inserts must never make a data write
//! wait for its commit.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, TryRecvError, channel};
use std::time::Duration;

use serde::Serialize;

use crate::core::clock::{Clock, SharedClock, Timestamp};
use crate::core::cursor::{self, CursorKind, Position};
use crate::domain::error::{Error, Result};
use crate::domain::records::{Page, Pagination};
use crate::store::request_log::{LogPosition, RequestLogStore, StatusFilter};
use crate::store::{RequestLogRow, time_from_key};

/// Most entries waiting for the writer.
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
    tx: Sender<Message>,
    /// Entries sent and not yet taken by the writer.
    queued: Arc<AtomicUsize>,
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
        let (tx, rx) = channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let handle = std::thread::Builder::new()
            .name("request-log".into())
            .spawn({
                let store = store.clone();
                let inbox = Inbox {
                    rx,
                    queued: queued.clone(),
                };
                move || writer_loop(store.as_ref(), clock.as_ref(), retention, inbox)
            })?;
        Ok((
            RequestLog {
                store,
                tx,
                queued,
                dropped: Arc::new(AtomicU64::new(0)),
            },
            LogThread(handle),
        ))
    }

    /// Queues an entry for `partition`; never blocks.
    pub fn record(&self, partition: u64, row: RequestLogRow) {
        if self.queued.fetch_add(1, Ordering::Relaxed) >= CHANNEL_CAPACITY {
            self.queued.fetch_sub(1, Ordering::Relaxed);
            let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_power_of_two() {
                log::warn!("request log is behind; {n} entries dropped so far");
            }
            return;
        }
        if self.tx.send(Message::Entry(partition, row)).is_err() {
            // The writer has stopped (shutdown).
            self.queued.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Writes what is queued and stops the writer thread.
    pub fn shutdown(&self) {
        let _ = self.tx.send(Message::Shutdown);
    }
}

/// The writer's end of the channel: taking an entry frees its place.
struct Inbox {
    rx: Receiver<Message>,
    queued: Arc<AtomicUsize>,
}

impl Inbox {
    fn taken(&self, message: Message) -> Message {
        if matches!(message, Message::Entry(..)) {
            self.queued.fetch_sub(1, Ordering::Relaxed);
        }
        message
    }

    fn recv_timeout(&self, timeout: Duration) -> Result<Message, RecvTimeoutError> {
        self.rx.recv_timeout(timeout).map(|m| self.taken(m))
    }

    fn try_recv(&self) -> Result<Message, TryRecvError> {
        self.rx.try_recv().map(|m| self.taken(m))
    }
}

fn writer_loop(store: &dyn RequestLogStore, clock: &dyn Clock, retention: Duration, rx: Inbox) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::rows::Environment;

    fn row() -> RequestLogRow {
        RequestLogRow {
            time: Timestamp(1),
            method: "POST".into(),
            route: "/api/v1/data/{slug}".into(),
            status: 202,
            key_id: None,
            latency_us: 1,
            environment: Environment::Sandbox,
            request_id: "req_1".into(),
        }
    }

    /// Past CHANNEL_CAPACITY waiting entries, `record` drops and counts instead of queueing;
    /// each entry the writer takes frees a place.
    #[test]
    fn at_most_the_capacity_waits_and_what_the_writer_takes_frees_room() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store =
            crate::store::open_embedded_request_log(&dir.path().join("requests.redb"), 1 << 20, 0)
                .expect("request log store");
        let (tx, rx) = channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let log = RequestLog {
            store,
            tx,
            queued: queued.clone(),
            dropped: Arc::new(AtomicU64::new(0)),
        };
        let inbox = Inbox { rx, queued };
        for _ in 0..CHANNEL_CAPACITY + 3 {
            log.record(1, row());
        }
        assert_eq!(log.dropped.load(Ordering::Relaxed), 3);
        assert!(matches!(inbox.try_recv(), Ok(Message::Entry(1, _))));
        log.record(1, row());
        assert_eq!(
            log.dropped.load(Ordering::Relaxed),
            3,
            "a taken entry frees a place"
        );
        log.record(1, row());
        assert_eq!(log.dropped.load(Ordering::Relaxed), 4);
        let mut waiting = 0;
        while inbox.try_recv().is_ok() {
            waiting += 1;
        }
        assert_eq!(waiting, CHANNEL_CAPACITY);
        assert_eq!(inbox.queued.load(Ordering::Relaxed), 0);
    }
}
