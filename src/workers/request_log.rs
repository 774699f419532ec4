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

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{
    Receiver, RecvTimeoutError, Sender, SyncSender, TryRecvError, channel, sync_channel,
};
use std::time::Duration;

use serde::Serialize;

use crate::core::clock::{Clock, SharedClock, Timestamp};
use crate::core::cursor::{self, CursorKind, Position};
use crate::domain::endpoints::Membership;
use crate::domain::error::{Error, Missing, Result};
use crate::domain::records::{Page, Pagination};
use crate::store::request_log::{EntryFilter, LogPosition, RequestLogStore, StatusFilter};
use crate::store::{KeyHolder, Partition, RequestLogRow, Store, time_from_key};

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
    /// Boxed: an error's entry is over 200 bytes, and every slot of the channel would be
    /// that large.
    Entry(Partition, Box<RequestLogRow>),
    /// Write what was queued before it, then answer.
    Flush(SyncSender<()>),
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
    /// The error `code` of an error response.
    pub code: Option<String>,
    pub message: Option<String>,
    /// The client's address.
    pub client: Option<String>,
    /// Who held the key at the time of the call; `null` when the key was not recognised (or
    /// for entries older than this field).
    pub holder: Option<HolderView>,
    /// The record the call was about (see `RequestLogRow::record_id`).
    pub record_id: Option<String>,
    /// For a batch, how many records it created, the first being `record_id`.
    pub record_count: Option<u32>,
}

/// Whose e-mail addresses the views of a page may show. The owner sees every collaborator's
/// (the collaborator list is the owner's); a collaborator sees only their own, and the other
/// collaborators' calls by account id.
#[derive(Clone, Copy, Debug)]
pub enum Naming {
    Everyone,
    Only(u64),
}

impl Naming {
    /// What `account_id` may see, being `membership` of the endpoint.
    pub fn of(account_id: u64, membership: &Membership) -> Naming {
        match membership {
            Membership::Owner => Naming::Everyone,
            Membership::Collaborator(_) => Naming::Only(account_id),
        }
    }

    fn allows(self, account_id: u64) -> bool {
        match self {
            Naming::Everyone => true,
            Naming::Only(id) => id == account_id,
        }
    }
}

/// Who held the key of an entry, as shown.
#[derive(Debug, Serialize)]
pub struct HolderView {
    /// `owner` (the endpoint's default key) or `collaborator`.
    pub kind: &'static str,
    pub account_id: Option<u64>,
    /// The collaborator's e-mail address today; `null` when the account no longer exists, or
    /// for a collaborator looking at another collaborator's call ([`Naming`]).
    pub email: Option<String>,
}

impl EntryView {
    fn new(at: LogPosition, row: RequestLogRow, emails: &HashMap<u64, String>) -> EntryView {
        EntryView {
            time: time_from_key(at.time).to_rfc3339(),
            method: row.method,
            route: row.route,
            status: row.status,
            key_id: row.key_id,
            latency_ms: row.latency_us as f64 / 1000.0,
            environment: row.environment.as_str(),
            request_id: row.request_id,
            code: row.code,
            message: row.message,
            client: row.client,
            holder: row.holder.map(|holder| match holder {
                KeyHolder::Owner => HolderView {
                    kind: "owner",
                    account_id: None,
                    email: None,
                },
                KeyHolder::Collaborator(id) => HolderView {
                    kind: "collaborator",
                    account_id: Some(id),
                    email: emails.get(&id).cloned(),
                },
            }),
            record_id: row.record_id,
            record_count: row.record_count,
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
    pub fn record(&self, partition: Partition, row: RequestLogRow) {
        if self.queued.fetch_add(1, Ordering::Relaxed) >= CHANNEL_CAPACITY {
            self.queued.fetch_sub(1, Ordering::Relaxed);
            let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_power_of_two() {
                log::warn!("request log is behind; {n} entries dropped so far");
            }
            return;
        }
        if self
            .tx
            .send(Message::Entry(partition, Box::new(row)))
            .is_err()
        {
            // The writer has stopped (shutdown).
            self.queued.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Returns once every entry queued before the call is written (or the writer has
    /// stopped): the purge of a deleted endpoint's entries waits for this first, or an entry
    /// still in the writer's batch window would be written after it.
    pub fn flush(&self) {
        let (answer, answered) = sync_channel(1);
        if self.tx.send(Message::Flush(answer)).is_ok() {
            // An error: the writer stopped, and wrote what it had before.
            let _ = answered.recv();
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
        let mut flushed = None;
        match rx.recv_timeout(PURGE_EVERY.min(Duration::from_secs(60))) {
            Ok(Message::Entry(p, row)) => batch.push((p, *row)),
            Ok(Message::Flush(answer)) => flushed = Some(answer),
            Ok(Message::Shutdown) | Err(RecvTimeoutError::Disconnected) => stopping = true,
            Err(RecvTimeoutError::Timeout) => {}
        }
        if !batch.is_empty() && !stopping {
            // Gather by waiting out the window, then taking what came: waiting in
            // `recv_timeout` instead would wake this thread for every single entry.
            std::thread::sleep(BATCH_WINDOW);
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(Message::Entry(p, row)) => batch.push((p, *row)),
                    Ok(Message::Flush(answer)) => {
                        flushed = Some(answer);
                        break;
                    }
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
        if let Some(answer) = flushed {
            let _ = answer.send(());
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
    /// The entries of one partition that pass `filter`, newest first; collaborators are named
    /// by their e-mail addresses in `accounts`, as `naming` allows.
    pub fn list(
        &self,
        accounts: &dyn Store,
        naming: Naming,
        partition: Partition,
        limit: usize,
        cursor: Option<&str>,
        filter: &EntryFilter,
    ) -> Result<Page<EntryView>> {
        let before = match cursor {
            Some(text) => {
                let pos = cursor::parse(CursorKind::RequestLog, partition.raw(), text)?;
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
            cursor::encode(CursorKind::RequestLog, partition.raw(), pos)
        });
        Ok(Page {
            data: views(accounts, naming, page.entries)?,
            pagination: Pagination { next_cursor },
        })
    }

    /// The entry with this request id in one of `partitions` (an endpoint's two
    /// environments). An id that carries its time is found wherever it is; one of an earlier
    /// build only among the newest `PAGE_SCAN_LIMIT` entries.
    pub fn entry(
        &self,
        accounts: &dyn Store,
        naming: Naming,
        partitions: [Partition; 2],
        request_id: &str,
    ) -> Result<EntryView> {
        let filter = EntryFilter {
            request_id: Some(request_id.to_string()),
            ..EntryFilter::default()
        };
        for partition in partitions {
            let page = self.store.requests_page(partition, None, 1, &filter)?;
            if let Some(view) = views(accounts, naming, page.entries)?.pop() {
                return Ok(view);
            }
        }
        Err(Error::NotFound(Missing::RequestLogEntry))
    }
}

/// The views of `entries`, with the e-mail addresses `naming` allows read from one snapshot.
fn views(
    accounts: &dyn Store,
    naming: Naming,
    entries: Vec<(LogPosition, RequestLogRow)>,
) -> Result<Vec<EntryView>> {
    let ids: BTreeSet<u64> = entries
        .iter()
        .filter_map(|(_, row)| match row.holder {
            Some(KeyHolder::Collaborator(id)) if naming.allows(id) => Some(id),
            _ => None,
        })
        .collect();
    let mut emails = HashMap::new();
    if !ids.is_empty() {
        let snapshot = accounts.read()?;
        for id in ids {
            if let Some(account) = snapshot.account(id)? {
                emails.insert(id, account.email);
            }
        }
    }
    Ok(entries
        .into_iter()
        .map(|(at, row)| EntryView::new(at, row, &emails))
        .collect())
}

/// Longest `code`, `key_id` or `request_id` a filter accepts.
const FILTER_TEXT_MAX: usize = 64;

/// The filter that the query parameters `status`, `code`, `method`, `holder`, `key_id` and
/// `request_id` ask for; an empty value is no condition (a form sends its empty fields).
pub fn parse_filter(params: &HashMap<String, String>) -> Result<EntryFilter> {
    let given = |name: &str| params.get(name).map(|v| v.trim()).filter(|v| !v.is_empty());
    let invalid = |name: &'static str, reason: &str| Error::InvalidParameter {
        name,
        reason: reason.into(),
    };
    let status = match given("status") {
        None => StatusFilter::Any,
        Some(text) => match text.as_bytes() {
            [class @ b'1'..=b'5', b'x', b'x'] => StatusFilter::Class(u16::from(class - b'0')),
            _ => return Err(invalid("status", "it must be 1xx, 2xx, 3xx, 4xx or 5xx")),
        },
    };
    let code = given("code")
        .map(|code| {
            let ok = code.len() <= FILTER_TEXT_MAX
                && code.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
            ok.then(|| code.to_string())
                .ok_or_else(|| invalid("code", "it must be an error code such as invalid_api_key"))
        })
        .transpose()?;
    let method = given("method")
        .map(|method| {
            let method = method.to_ascii_uppercase();
            ["GET", "POST", "PUT", "DELETE"]
                .contains(&method.as_str())
                .then_some(method)
                .ok_or_else(|| invalid("method", "it must be GET, POST, PUT or DELETE"))
        })
        .transpose()?;
    let holder = given("holder")
        .map(|holder| match holder {
            "owner" => Ok(KeyHolder::Owner),
            id => id
                .parse()
                .map(KeyHolder::Collaborator)
                .map_err(|_| invalid("holder", "it must be owner or a collaborator's account id")),
        })
        .transpose()?;
    let prefixed = |name: &'static str, prefix: &str| {
        given(name)
            .map(|text| {
                (text.starts_with(prefix) && text.len() <= FILTER_TEXT_MAX)
                    .then(|| text.to_string())
                    .ok_or_else(|| {
                        invalid(name, &format!("it must be an id starting with {prefix}"))
                    })
            })
            .transpose()
    };
    Ok(EntryFilter {
        status,
        code,
        method,
        holder,
        key_id: prefixed("key_id", "key_")?,
        request_id: prefixed("request_id", "req_")?,
    })
}

/// The collaborators of an endpoint that `naming` may name, as account id and e-mail address,
/// for choosing whose calls to show.
pub fn holders(
    accounts: &dyn Store,
    naming: Naming,
    endpoint_id: u64,
) -> Result<Vec<(u64, String)>> {
    let snapshot = accounts.read()?;
    let mut holders = Vec::new();
    for collaborator in snapshot.collaborators(endpoint_id)? {
        if !naming.allows(collaborator.account_id) {
            continue;
        }
        if let Some(account) = snapshot.account(collaborator.account_id)? {
            holders.push((account.id, account.email));
        }
    }
    Ok(holders)
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
            code: None,
            message: None,
            client: None,
            holder: None,
            record_id: None,
            record_count: None,
        }
    }

    fn params(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn filters_are_read_from_parameters_and_empty_ones_ask_for_nothing() {
        assert_eq!(
            parse_filter(&params(&[("status", ""), ("code", " "), ("holder", "")])).unwrap(),
            EntryFilter::default()
        );
        let filter = parse_filter(&params(&[
            ("status", "4xx"),
            ("code", "invalid_api_key"),
            ("method", "post"),
            ("holder", "17"),
            ("key_id", "key_3f9a"),
            ("request_id", " req_0abc "),
        ]))
        .unwrap();
        assert_eq!(
            filter,
            EntryFilter {
                status: StatusFilter::Class(4),
                code: Some("invalid_api_key".into()),
                method: Some("POST".into()),
                holder: Some(KeyHolder::Collaborator(17)),
                key_id: Some("key_3f9a".into()),
                request_id: Some("req_0abc".into()),
            }
        );
        assert_eq!(
            parse_filter(&params(&[("holder", "owner")]))
                .unwrap()
                .holder,
            Some(KeyHolder::Owner)
        );
        for (name, value) in [
            ("status", "4"),
            ("status", "6xx"),
            ("code", "Invalid-Key"),
            ("method", "PATCH"),
            ("holder", "me"),
            ("key_id", "tm_test_secret"),
            ("request_id", "rec_1"),
        ] {
            match parse_filter(&params(&[(name, value)])) {
                Err(Error::InvalidParameter { name: got, .. }) => assert_eq!(got, name),
                other => panic!("{name}={value}: {other:?}"),
            }
        }
    }

    const P: Partition = Partition::from_raw(1);

    /// A request-log store in a temp dir (kept while the dir lives).
    fn log_store() -> (tempfile::TempDir, Arc<dyn RequestLogStore>) {
        let dir = tempfile::tempdir().expect("temp dir");
        let store =
            crate::store::open_embedded_request_log(&dir.path().join("requests.redb"), 1 << 20, 0)
                .expect("request log store");
        (dir, store)
    }

    /// `flush` returns once what was queued before it is written, though the writer waits
    /// BATCH_WINDOW after an entry before writing; and at once after a shutdown.
    #[test]
    fn flush_returns_once_what_was_queued_is_written() {
        let (_dir, store) = log_store();
        let clock = Arc::new(crate::core::clock::ManualClock::new(Timestamp(0)));
        let (log, thread) =
            RequestLog::start(store.clone(), clock, Duration::from_secs(3600)).expect("start");
        let written = || {
            store
                .requests_page(P, None, 100, &EntryFilter::default())
                .expect("page")
                .entries
                .len()
        };
        for round in 1..=3 {
            log.record(P, row());
            log.record(P, row());
            log.flush();
            assert_eq!(written(), 2 * round);
        }
        log.flush();
        assert_eq!(written(), 6);
        log.shutdown();
        thread.join();
        log.flush();
    }

    /// Past CHANNEL_CAPACITY waiting entries, `record` drops and counts instead of queueing;
    /// each entry the writer takes frees a place.
    #[test]
    fn at_most_the_capacity_waits_and_what_the_writer_takes_frees_room() {
        let (_dir, store) = log_store();
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
            log.record(P, row());
        }
        assert_eq!(log.dropped.load(Ordering::Relaxed), 3);
        assert!(matches!(inbox.try_recv(), Ok(Message::Entry(P, _))));
        log.record(P, row());
        assert_eq!(
            log.dropped.load(Ordering::Relaxed),
            3,
            "a taken entry frees a place"
        );
        log.record(P, row());
        assert_eq!(log.dropped.load(Ordering::Relaxed), 4);
        let mut waiting = 0;
        while inbox.try_recv().is_ok() {
            waiting += 1;
        }
        assert_eq!(waiting, CHANNEL_CAPACITY);
        assert_eq!(inbox.queued.load(Ordering::Relaxed), 0);
    }
}
