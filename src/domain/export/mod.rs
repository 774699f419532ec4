//! Export (`GET /api/v1/data/{slug}/export`): the records of an endpoint's environment in a
//! window, or only those whose payload contains a text, as NDJSON, CSV or one JSON array.
//!
//! An export reads one snapshot ([`Store::long_read`]) from the first record to the last, so
//! its answer is the same whether it takes a second or ten minutes: writes committed after it
//! began are not in it. It is written in chunks of about [`CHUNK_BYTES`] and handed to a sink
//! as each fills (the HTTP layer streams them), so memory stays flat whatever the size; a sink
//! that refuses a chunk (the client went away) ends the work. The key that asked is checked
//! again, with the rule of a new data call, at least every [`RECHECK_EVERY`] before a chunk
//! leaves, and at once after any change of access (and when a replaced key's grace ends, by
//! the server's clock): an export ends (with an error, so the client sees a cut answer) once
//! the key, its read permission or the endpoint is gone.
//!
//! CSV (RFC 4180, UTF-8, CRLF, no BOM): `id,created_at,updated_at`, then a column per field:
//! the `fields` asked for (dotted paths into nested objects), else the top-level keys of the
//! newest [`COLUMN_SAMPLE`] records of the window in first-seen order, newest first. A cell
//! holds a number as its stored text, `true`/`false`, a string's text, an object or array as
//! its JSON text, and nothing for null or a missing field. A string cell that begins with
//! `=`, `+`, `-`, `@`, a tab or a carriage return is prefixed with `'`, so a spreadsheet shows
//! it as text instead of running it as a formula (numbers are never prefixed).

use std::collections::HashMap;
use std::ops::Bound;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::Stream;

use crate::core::clock::{Clock, SharedClock, Timestamp};
use crate::domain::endpoints::{Endpoints, KeyGrant, recheck};
use crate::domain::error::{Error, Result};
use crate::domain::records::push_record;
use crate::domain::search::{self, Matcher};
use crate::domain::sessions;
use crate::store::records::ScanOrder;
use crate::store::{Environment, Partition, Permission, Store, StoreError};

mod csv;

use csv::{csv_header, csv_row, sampled_columns};

/// About how many bytes each chunk handed to the sink holds.
pub const CHUNK_BYTES: usize = 64 * 1024;
/// How long an export runs at most between two checks of its key when nothing tells it that
/// access changed.
pub const RECHECK_EVERY: Duration = Duration::from_secs(1);
/// How many of the newest records of the window name the CSV columns when none are asked for.
pub const COLUMN_SAMPLE: usize = 1000;
/// The most fields a CSV export may ask for.
pub const MAX_FIELDS: usize = 200;
/// Records read from the store at a time.
const PAGE: usize = 1000;

/// What an export is written as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Ndjson,
    Csv,
    Json,
}

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Ndjson => "application/x-ndjson",
            Format::Csv => "text/csv; charset=utf-8",
            Format::Json => "application/json",
        }
    }

    fn extension(self) -> &'static str {
        match self {
            Format::Ndjson => "ndjson",
            Format::Csv => "csv",
            Format::Json => "json",
        }
    }
}

/// A checked export request.
#[derive(Debug)]
pub struct ExportRequest {
    pub format: Format,
    /// Inclusive record-id bounds of the window.
    lower: u128,
    upper: u128,
    /// The folded text a payload must contain.
    q: Option<String>,
    order: ScanOrder,
    /// The CSV columns asked for, each a dotted path.
    fields: Option<Vec<Vec<String>>>,
    /// The window's ends as sent, for the file name.
    start: Option<String>,
    end: Option<String>,
}

fn invalid(name: &'static str, reason: impl Into<String>) -> Error {
    Error::InvalidParameter {
        name,
        reason: reason.into(),
    }
}

/// Parses `format`, `start`, `end`, `q`, `order` and `fields`.
pub fn parse_request(params: &HashMap<String, String>) -> Result<ExportRequest> {
    let format = match params.get("format").map(String::as_str) {
        None | Some("ndjson") => Format::Ndjson,
        Some("csv") => Format::Csv,
        Some("json") => Format::Json,
        Some(_) => return Err(invalid("format", "it must be ndjson, csv or json")),
    };
    let (lower, upper) = search::window_ids(params, None, None)?;
    let order = match params.get("order").map(String::as_str) {
        None | Some("asc") => ScanOrder::OldestFirst,
        Some("desc") => ScanOrder::NewestFirst,
        Some(_) => return Err(invalid("order", "it must be asc or desc")),
    };
    let fields = match params.get("fields") {
        None => None,
        Some(_) if format != Format::Csv => {
            return Err(invalid("fields", "it applies to format=csv only"));
        }
        Some(text) => Some(parse_fields(text)?),
    };
    Ok(ExportRequest {
        format,
        lower,
        upper,
        q: search::query_param(params)?,
        order,
        fields,
        start: params.get("start").cloned(),
        end: params.get("end").cloned(),
    })
}

/// `fields`: comma-separated dotted paths (`email,address.city`).
fn parse_fields(text: &str) -> Result<Vec<Vec<String>>> {
    let fields: Vec<Vec<String>> = text
        .split(',')
        .map(|field| field.trim().split('.').map(str::to_string).collect())
        .collect();
    if fields.len() > MAX_FIELDS {
        return Err(invalid(
            "fields",
            format!("it names more than {MAX_FIELDS} fields"),
        ));
    }
    if fields
        .iter()
        .any(|path: &Vec<String>| path.iter().any(String::is_empty))
    {
        return Err(invalid(
            "fields",
            "each field is a name or a dotted path of names, none of them empty",
        ));
    }
    Ok(fields)
}

impl ExportRequest {
    /// The file name the answer suggests: the slug and the window, `orders-x1_all.csv` when
    /// the window is everything.
    pub fn file_name(&self, slug: &str) -> String {
        let part = |text: &Option<String>, open: &str| {
            text.as_deref()
                .map(|t| {
                    t.chars()
                        .map(|c| {
                            if c.is_ascii_alphanumeric() || c == '-' {
                                c
                            } else {
                                '-'
                            }
                        })
                        .collect::<String>()
                })
                .unwrap_or_else(|| open.to_string())
        };
        let window = match (&self.start, &self.end) {
            (None, None) => "all".to_string(),
            (start, end) => format!("{}_{}", part(start, "start"), part(end, "end")),
        };
        format!("{slug}_{window}.{}", self.format.extension())
    }
}

/// Why an export stopped before its end.
#[derive(Debug)]
pub enum Stopped {
    /// The sink refused a chunk: nobody is reading any more.
    Abandoned,
    /// The key no longer allows it, or the store failed: the error says which.
    Failed(Error),
}

impl From<Error> for Stopped {
    fn from(err: Error) -> Stopped {
        Stopped::Failed(err)
    }
}

impl From<StoreError> for Stopped {
    fn from(err: StoreError) -> Stopped {
        Stopped::Failed(err.into())
    }
}

/// The answer of a running export as a body: its chunks in order, then the end; or, when it
/// stopped early, an error in place of the end, so the client sees a cut answer and never
/// takes a part for the whole.
pub struct ExportBody {
    chunks: tokio::sync::mpsc::Receiver<std::result::Result<Bytes, std::io::Error>>,
}

impl Stream for ExportBody {
    type Item = std::result::Result<Bytes, std::io::Error>;

    fn poll_next(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.chunks.poll_recv(cx)
    }
}

/// Chunks a running export may have written ahead of its reader.
const CHUNKS_AHEAD: usize = 4;

/// Most chunk buffers kept for an export to fill again. As many circulate as wait ahead of
/// the reader ([`CHUNKS_AHEAD`]), plus those the HTTP layer holds while the socket drains
/// (hyper takes about 400 KB of a body before it stops asking for more) and the one being
/// filled: about a dozen. A buffer beyond the bound is freed where it was written out.
const CHUNKS_KEPT: usize = 32;

/// Where an export's chunks go: to its reader (the HTTP body), in buffers that come back
/// once the HTTP layer has written them out, for the export to fill again; so an export
/// allocates a dozen buffers in all. Freed where they were written out instead, the chunks'
/// memory moved into the HTTP worker threads' heaps (measured with mimalloc, the allocator
/// then), and a first export of 1M records left RSS 28 MB higher; now 2 MB.
struct ChunkSink {
    chunks: tokio::sync::mpsc::Sender<std::io::Result<Bytes>>,
    pool: ChunkPool,
}

/// The empty buffers of one export, filled again by it.
#[derive(Clone, Default)]
struct ChunkPool(Arc<Mutex<Vec<Vec<u8>>>>);

impl ChunkSink {
    /// An empty buffer to write the next chunk into.
    fn fresh(&self) -> String {
        self.pool.take()
    }

    /// Hands `chunk` to the reader, once it has room for it; false when nobody reads any
    /// more. Blocks the calling thread.
    fn send(&self, chunk: String) -> bool {
        let bytes = Bytes::from_owner(PooledChunk {
            buf: chunk.into_bytes(),
            pool: self.pool.clone(),
        });
        self.chunks.blocking_send(Ok(bytes)).is_ok()
    }

    /// Ends the reader's body with `err`, so the client sees a cut answer.
    fn fail(&self, err: &Error) {
        let _ = self
            .chunks
            .blocking_send(Err(std::io::Error::other(err.to_string())));
    }
}

impl ChunkPool {
    /// An empty buffer to write the next chunk into.
    fn take(&self) -> String {
        let kept = self.0.lock().unwrap_or_else(PoisonError::into_inner).pop();
        match kept {
            // Cleared, so always valid UTF-8.
            Some(mut buf) => {
                buf.clear();
                String::from_utf8(buf).unwrap_or_default()
            }
            None => String::with_capacity(CHUNK_BYTES + 4096),
        }
    }
}

/// A chunk on its way to the reader, its buffer given back to the pool once dropped.
struct PooledChunk {
    buf: Vec<u8>,
    pool: ChunkPool,
}

impl AsRef<[u8]> for PooledChunk {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for PooledChunk {
    fn drop(&mut self) {
        let mut kept = self.pool.0.lock().unwrap_or_else(PoisonError::into_inner);
        if kept.len() < CHUNKS_KEPT {
            kept.push(std::mem::take(&mut self.buf));
        }
    }
}

/// How many exports one server runs at once: each holds a thread and, on PostgreSQL, a
/// pooled connection for as long as its reader takes, so more would starve the data calls.
pub const MAX_RUNNING: usize = 4;

/// The exports of this server: what they read and the slots they take.
#[derive(Clone)]
pub struct Exports {
    store: Arc<dyn Store>,
    clock: SharedClock,
    slots: Arc<tokio::sync::Semaphore>,
}

impl Exports {
    pub fn new(store: Arc<dyn Store>, clock: SharedClock) -> Exports {
        Exports {
            store,
            clock,
            slots: Arc::new(tokio::sync::Semaphore::new(MAX_RUNNING)),
        }
    }

    /// Starts the export `request` of `partition` on a blocking thread of its own and
    /// answers once its snapshot is taken (so a write acknowledged after this answer is never
    /// in it), or with the error that kept it from starting (503 `exports_at_capacity` when
    /// [`MAX_RUNNING`] are running); `label` names it in the log. Its chunks wait for the
    /// reader (at most [`CHUNKS_AHEAD`] of them), and dropping the body ends the work.
    pub async fn start(
        &self,
        partition: Partition,
        access: Watch,
        request: ExportRequest,
        label: String,
    ) -> Result<ExportBody> {
        let slot = self
            .slots
            .clone()
            .try_acquire_owned()
            .map_err(|_| Error::ExportsAtCapacity)?;
        let (store, clock) = (self.store.clone(), self.clock.clone());
        let (chunks, received) = tokio::sync::mpsc::channel(CHUNKS_AHEAD);
        let (ready, began) = tokio::sync::oneshot::channel::<Result<()>>();
        tokio::task::spawn_blocking(move || {
            let mut ready = Some(ready);
            let mut on_snapshot = || {
                if let Some(ready) = ready.take() {
                    let _ = ready.send(Ok(()));
                }
            };
            let sink = ChunkSink {
                chunks,
                pool: ChunkPool::default(),
            };
            // The slot is this thread's until the export ends.
            let _slot = slot;
            let result = run(
                store.as_ref(),
                clock.as_ref(),
                partition,
                access,
                &request,
                &mut on_snapshot,
                &sink,
            );
            match result {
                Ok(()) => {}
                Err(Stopped::Abandoned) => log::info!("export of {label}: the reader went away"),
                Err(Stopped::Failed(err)) => match ready.take() {
                    // It never began: the request is answered with the error.
                    Some(ready) => {
                        let _ = ready.send(Err(err));
                    }
                    None => {
                        log::warn!("export of {label} ended early: {err}");
                        sink.fail(&err);
                    }
                },
            }
        });
        began
            .await
            .map_err(|_| Error::Internal("the export's thread ended before it began".into()))??;
        Ok(ExportBody { chunks: received })
    }
}

/// Who an export runs for, checked again as it runs, and what tells it to check at once.
pub struct Watch {
    /// Checks that the reader may still read (the error a new call would get otherwise);
    /// answers when that access ends by itself (a replaced key's grace period), if it does.
    check: Box<dyn FnMut(Timestamp) -> Result<Option<Timestamp>> + Send>,
    /// Marked changed whenever access may have changed (`Endpoints::access_changes`).
    changes: tokio::sync::watch::Receiver<()>,
}

impl Watch {
    /// An export of the data API: the key must still grant read, by the rule of a new call.
    pub fn key(
        store: Arc<dyn Store>,
        grant: KeyGrant,
        changes: tokio::sync::watch::Receiver<()>,
    ) -> Watch {
        Watch {
            check: Box::new(move |now| Ok(recheck(store.as_ref(), &grant, now)?.expires_at)),
            changes,
        }
    }

    /// An export of the dashboard: the session must still be open, and its account still
    /// read the endpoint's records of `environment`.
    pub fn member(
        endpoints: Endpoints,
        session: String,
        slug: String,
        environment: Environment,
    ) -> Watch {
        let changes = endpoints.access_changes();
        Watch {
            check: Box::new(move |now| {
                let store = endpoints.handles.store.clone();
                let account = sessions::authenticate(store.as_ref(), now, &session)?;
                endpoints.member_access(&account, &slug, environment, Permission::Read)?;
                Ok(None)
            }),
            changes,
        }
    }
}

/// Runs the export `request` of `partition` for the key of `access` on the calling thread
/// (it blocks: on the store, and on `sink` while the reader is slow): calls `on_snapshot` once
/// its snapshot is taken, then hands each chunk to `sink`, which answers whether to go on.
fn run(
    store: &dyn Store,
    clock: &dyn Clock,
    partition: Partition,
    access: Watch,
    request: &ExportRequest,
    on_snapshot: &mut dyn FnMut(),
    sink: &ChunkSink,
) -> std::result::Result<(), Stopped> {
    // Checked once more before the snapshot: a change of access committed since the call was
    // authorised is seen, and a replaced key's end of grace is known.
    let mut access = access;
    access.changes.mark_unchanged();
    let expires_at = (access.check)(clock.now())?;
    let tx = store.long_read()?;
    // A snapshot is taken by its first read (PostgreSQL begins the transaction with it).
    tx.access_version()?;
    on_snapshot();
    let mut out = Output {
        text: sink.fresh(),
        sink,
        clock,
        access,
        expires_at,
        checked_at: Instant::now(),
        stopped: None,
    };
    let columns = match (request.format, &request.fields) {
        (Format::Csv, Some(fields)) => fields.clone(),
        (Format::Csv, None) => sampled_columns(tx.as_ref(), partition, request)?,
        _ => Vec::new(),
    };
    match request.format {
        Format::Csv => csv_header(&mut out.text, &columns),
        Format::Json => out.text.push('['),
        Format::Ndjson => {}
    }
    let mut matcher = request.q.as_deref().map(Matcher::new);
    let mut written = 0usize;
    let mut lower = Bound::Included(request.lower);
    let mut upper = Bound::Included(request.upper);
    loop {
        let mut last = None;
        let more = tx.record_page(
            partition,
            (lower, upper),
            request.order,
            PAGE,
            &mut |record| {
                last = Some(record.id.0);
                if out.stopped.is_some()
                    || matcher.as_mut().is_some_and(|m| !m.matches(record.payload))
                {
                    return Ok(());
                }
                match request.format {
                    Format::Ndjson => {
                        push_record(&mut out.text, record.id, record.updated_at, record.payload)?;
                        out.text.push('\n');
                    }
                    Format::Json => {
                        if written > 0 {
                            out.text.push(',');
                        }
                        push_record(&mut out.text, record.id, record.updated_at, record.payload)?;
                    }
                    Format::Csv => csv_row(&mut out.text, record, &columns)?,
                }
                written += 1;
                if out.text.len() >= CHUNK_BYTES {
                    out.flush();
                }
                Ok(())
            },
        )?;
        if let Some(stopped) = out.stopped.take() {
            return Err(stopped);
        }
        let (Some(last), true) = (last, more) else {
            break;
        };
        match request.order {
            ScanOrder::OldestFirst => lower = Bound::Excluded(last),
            ScanOrder::NewestFirst => upper = Bound::Excluded(last),
        }
    }
    if request.format == Format::Json {
        out.text.push(']');
    }
    out.flush();
    match out.stopped.take() {
        Some(stopped) => Err(stopped),
        None => Ok(()),
    }
}

/// The text being written and where it goes.
struct Output<'a> {
    text: String,
    sink: &'a ChunkSink,
    clock: &'a dyn Clock,
    access: Watch,
    /// When the key stops working by itself (a replaced key's grace period), if it does.
    expires_at: Option<Timestamp>,
    checked_at: Instant,
    /// Set once the export must stop; nothing more is written or handed out.
    stopped: Option<Stopped>,
}

impl Output<'_> {
    /// Hands the text written so far to the sink, after checking the key if it is due.
    fn flush(&mut self) {
        if self.stopped.is_some() || self.text.is_empty() {
            return;
        }
        let now = self.clock.now();
        let due = self.access.changes.has_changed().unwrap_or(true)
            || self.expires_at.is_some_and(|at| now >= at)
            || self.checked_at.elapsed() >= RECHECK_EVERY;
        if due {
            self.access.changes.mark_unchanged();
            match (self.access.check)(now) {
                Ok(expires_at) => self.expires_at = expires_at,
                Err(err) => {
                    self.stopped = Some(Stopped::Failed(err));
                    return;
                }
            }
            self.checked_at = Instant::now();
        }
        let chunk = std::mem::replace(&mut self.text, self.sink.fresh());
        if !self.sink.send(chunk) {
            self.stopped = Some(Stopped::Abandoned);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_s_buffer_is_filled_again_once_the_reader_has_dropped_it() {
        let (chunks, mut received) = tokio::sync::mpsc::channel(CHUNKS_AHEAD);
        let sink = ChunkSink {
            chunks,
            pool: ChunkPool::default(),
        };
        let mut first = sink.fresh();
        first.push_str("{\"a\":1}\n");
        let buffer = first.as_ptr();
        assert!(sink.send(first));
        let bytes = received.try_recv().expect("a chunk").expect("no error");
        assert_eq!(&bytes[..], b"{\"a\":1}\n");
        // Still read: the next chunk gets a buffer of its own.
        let other = sink.fresh();
        assert_ne!(other.as_ptr(), buffer);
        drop(other);
        drop(bytes);
        let again = sink.fresh();
        assert_eq!(again.as_ptr(), buffer);
        assert!(again.is_empty());
        // Nobody reads any more: the export is told to stop.
        drop(received);
        assert!(!sink.send(again));
    }

    #[test]
    fn requests_are_checked() {
        let params = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let all = parse_request(&params(&[])).unwrap();
        assert_eq!(all.format, Format::Ndjson);
        assert_eq!((all.lower, all.upper), (0, u128::MAX));
        assert_eq!(all.file_name("orders-x1"), "orders-x1_all.ndjson");
        let csv = parse_request(&params(&[
            ("format", "csv"),
            ("start", "2026-11-01"),
            ("end", "2026-11-30T12:00:00Z"),
            ("fields", "email, address.city"),
            ("order", "desc"),
        ]))
        .unwrap();
        assert_eq!(
            csv.fields,
            Some(vec![
                vec!["email".to_string()],
                vec!["address".to_string(), "city".to_string()]
            ])
        );
        assert_eq!(
            csv.file_name("orders-x1"),
            "orders-x1_2026-11-01_2026-11-30T12-00-00Z.csv"
        );
        for (bad, name) in [
            (vec![("format", "xml")], "format"),
            (vec![("order", "up")], "order"),
            (vec![("fields", "a")], "fields"),
            (vec![("format", "csv"), ("fields", "a,,b")], "fields"),
            (vec![("format", "csv"), ("fields", "a..b")], "fields"),
            (
                vec![("start", "2026-12-01"), ("end", "2026-11-01")],
                "start",
            ),
            (vec![("q", "ab")], "q"),
        ] {
            match parse_request(&params(&bad)) {
                Err(Error::InvalidParameter { name: got, .. }) => assert_eq!(got, name, "{bad:?}"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }
}
