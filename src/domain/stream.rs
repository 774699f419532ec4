//! The change stream: `GET /api/v1/data/{slug}/stream`, each processed write of an endpoint's
//! environment as a Server-Sent Event, live.
//!
//! Poll is for consumers that fetch batches on their own schedule; the stream is for live
//! ones. Both are gap-free, but they follow different orders: poll follows created_at (and
//! holds records back until no earlier-stamped write can still appear), the stream follows the
//! order of the store's event log (`store::events`: commit order on redb, the writing
//! transactions' order on PostgreSQL), where a store only hands out events whose place is
//! settled. So the stream needs no hold-back, shows
//! replaces and deletes too, and an event reaches a reader as soon as its commit is done.
//!
//! **The wire.** Each event is
//!
//! ```text
//! id: <cursor>
//! event: record.created
//! data: {"type":"record.created","timestamp":"…","data":{"id":"rec_…","endpoint":"…",
//!        "environment":"sandbox","created_at":"…","payload":{…}}}
//! ```
//!
//! with the same JSON as a webhook's body (`domain::webhooks::deliveries::event_json`), on one
//! line. Its payload is the record as it was when the event was first read from the store: a
//! reader that keeps up gets the write's own payload; one that resumes after later writes to
//! the record may get a later state of it, or none once it is deleted (the later events
//! follow, so applying events in order always ends at the record's current state). A reader that reconnects with `Last-Event-ID` (or `?cursor=`) gets every event
//! after that one, each once, in order. A comment line goes out after `[stream] heartbeat`
//! without an event.
//!
//! **Bounded memory.** What a stream has sent but its reader not yet taken is limited to
//! `[stream] buffer_kb`; a reader that leaves it full for `slow_reader_timeout` gets a
//! `stream.error` event (`stream_reader_too_slow`) in place of everything still queued and is
//! disconnected; if it does not take even that within another `slow_reader_timeout`, the
//! connection is cut. Events are read from the store in pages, and the readers of a
//! partition share the frames they read ([`Feed`]): a hundred readers at the newest event
//! cost one store read per commit, not a hundred, and readers a burst of writes left behind
//! together share their reads too.
//!
//! **Slots.** A key holder (the owner, or one collaborator) holds at most `max_per_key` streams
//! of one endpoint's environment, whichever of their keys opened them, so replacing a key
//! does not free its streams' slots; and the node holds at most `max_total` streams in all,
//! fewer than the connections it serves, so streams never take the connections data calls
//! need.
//!
//! **Access, for as long as a stream is open.** A stream is authorised like any data call when
//! it opens, and again, in a fresh snapshot of the store and with the same rule
//! ([`endpoints::recheck`]), whenever access may have changed: when this node's access cache
//! is cleared (after any change of a key, collaborator, endpoint or account, made here or, on
//! a shared store, on another node), at every heartbeat, and before it sends an event read in a
//! snapshot whose access version is newer than the one its key was last checked at. Every
//! change of access raises that version in its own commit (`EndpointsRead::access_version`),
//! and an event is sent only if its key was allowed at a version at least that of the
//! snapshot it was read in, and only before the key's grace period ends: so an event
//! committed after a change that takes the stream's access away is never sent on it. When
//! the check fails, the stream ends with a `stream.error` event carrying the code a data call
//! with the key would get now (`invalid_api_key`, `missing_permission_read`,
//! `endpoint_inactive`, …).
//!
//! **Wake-ups.** The ingest writer tells [`Streams::committed`] which partitions each commit
//! wrote to; a stream waits for that, its heartbeat, or, on a store shared by several nodes,
//! `cluster_poll` (other nodes' commits, and events a running transaction held back).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot, watch};

use crate::core::clock::SharedClock;
use crate::core::config::StreamConfig;
use crate::core::cursor::{self, CursorKind};
use crate::core::metrics::Metrics;
use crate::domain::endpoints::{self, DataAccess, KeyGrant, Rechecked};
use crate::domain::error::{Error, Result};
use crate::store::events::PositionRanges;
use crate::store::{KeyHolder, Partition, Store};

mod feed;
use feed::{Feed, ReadError, Shared};

/// Most events one store read takes.
const PAGE_EVENTS: usize = 128;
/// Most payload bytes one store read takes (it takes at least one event).
const PAGE_BYTES: usize = 256 * 1024;
/// What the frames a partition's readers share may hold.
const SHARED_BYTES: usize = 1024 * 1024;
/// A segment of shared frames grows to about this much; then a new one starts, so that
/// the oldest frames can go a segment at a time.
const SEGMENT_BYTES: usize = 128 * 1024;
/// Room kept in every stream's buffer for the frame that ends it.
const FINAL_FRAME_BYTES: usize = 512;
/// What a client waits before it reconnects (the `retry:` field of the first frame).
const RECONNECT_MS: u64 = 1000;

/// The change streams of this node: started once by the server, shared by every request.
#[derive(Clone)]
pub struct Streams {
    inner: Arc<Inner>,
}

/// What [`Streams`] is made of.
pub struct StreamParts {
    pub store: Arc<dyn Store>,
    pub clock: SharedClock,
    pub settings: StreamConfig,
    /// Most streams open on this node at once.
    pub max_total: usize,
    pub metrics: Arc<Metrics>,
    /// Marked changed whenever access may have changed (`AccessCache::changes`).
    pub access_changes: watch::Receiver<()>,
    /// The stable code of an error, as a data call would answer it (`http::error`).
    pub error_code: fn(&Error) -> &'static str,
}

struct Inner {
    parts: StreamParts,
    feeds: Mutex<HashMap<Partition, Weak<Feed>>>,
    slots: Mutex<Slots>,
    closing: watch::Sender<bool>,
}

/// The streams open on this node: per key holder and partition, and in all.
#[derive(Default)]
struct Slots {
    per_holder: HashMap<(Partition, KeyHolder), usize>,
    total: usize,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// The body of an open stream: the frames its pump sends, until it ends or is cut.
pub struct StreamBody {
    frames: mpsc::UnboundedReceiver<Chunk>,
    /// The frame a too-slow reader gets in place of everything still queued.
    last_word: Option<oneshot::Receiver<Bytes>>,
    /// Fires when the connection of a too-slow reader is to be cut.
    cut: Option<oneshot::Receiver<()>>,
    said_last_word: bool,
}

/// Why a stream's connection was cut rather than ended.
#[derive(Debug, thiserror::Error)]
#[error("the stream's reader took nothing for too long; the connection is cut")]
pub struct StreamCut;

impl futures_util::Stream for StreamBody {
    type Item = std::result::Result<Bytes, StreamCut>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(last_word) = self.last_word.as_mut() {
            match Pin::new(last_word).poll(cx) {
                Poll::Ready(Ok(frame)) => {
                    // What is still queued is dropped unsent: the reader is told why at once,
                    // and the memory goes back now.
                    // (The channel stays open: the pump sees it close only when the connection
                    // is gone, and until then waits to cut it.)
                    self.last_word = None;
                    self.said_last_word = true;
                    while self.frames.try_recv().is_ok() {}
                    return Poll::Ready(Some(Ok(frame)));
                }
                Poll::Ready(Err(_)) => self.last_word = None,
                Poll::Pending => {}
            }
        }
        if self.said_last_word {
            // The connection is cut a slow-reader timeout after the last word: a reader that
            // took it has had time to; one that did not cannot hold the socket for ever.
            return match self.cut.as_mut().map(|cut| Pin::new(cut).poll(cx)) {
                Some(Poll::Pending) => Poll::Pending,
                Some(Poll::Ready(Ok(()))) => {
                    self.cut = None;
                    Poll::Ready(Some(Err(StreamCut)))
                }
                Some(Poll::Ready(Err(_))) | None => Poll::Ready(None),
            };
        }
        // A chunk's share of the buffer is given back as it leaves for the connection.
        self.frames
            .poll_recv(cx)
            .map(|chunk| chunk.map(|chunk| Ok(chunk.bytes)))
    }
}

/// A piece of a stream's body and its share of the stream's buffer.
struct Chunk {
    bytes: Bytes,
    _share: Option<OwnedSemaphorePermit>,
}

impl Streams {
    pub fn new(parts: StreamParts) -> Streams {
        Streams {
            inner: Arc::new(Inner {
                parts,
                feeds: Mutex::new(HashMap::new()),
                slots: Mutex::new(Slots::default()),
                closing: watch::Sender::new(false),
            }),
        }
    }

    /// A commit wrote events to `partitions`: wake their streams.
    pub fn committed(&self, partitions: &[Partition]) {
        let feeds = lock(&self.inner.feeds);
        for partition in partitions {
            if let Some(feed) = feeds.get(partition).and_then(Weak::upgrade) {
                feed.changed.send_replace(());
            }
        }
    }

    /// An erasure removed records of `partitions`: the frames their streams share may hold
    /// those records' payloads, so they go (streams read again from the store, which no longer
    /// has them). A feed busy reading drops its frames as soon as that read is done.
    pub fn erased(&self, partitions: &[Partition]) {
        let feeds = lock(&self.inner.feeds);
        for partition in partitions {
            let Some(feed) = feeds.get(partition).and_then(Weak::upgrade) else {
                continue;
            };
            feed.erased.store(true, Ordering::SeqCst);
            if let Ok(mut shared) = feed.shared.try_lock() {
                shared.drop_if_erased(&feed.erased);
            }
        }
    }

    /// Ends every stream (the server is stopping): each sends a last comment and closes, and
    /// its reader reconnects, to this node or another, with `Last-Event-ID`.
    pub fn shutdown(&self) {
        self.inner.closing.send_replace(true);
    }

    /// How many streams are open on this node.
    pub fn open_count(&self) -> usize {
        lock(&self.inner.slots).total
    }

    /// Opens a stream of `access`'s partition after `last_event_id` (an event id this stream
    /// sent), or from now on; `grant` is checked again for as long as it is open. Refused when
    /// the key no longer allows it, when its holder or the node holds its most streams
    /// already, or when the id is older than the events kept.
    pub fn open(
        &self,
        access: &DataAccess,
        grant: KeyGrant,
        last_event_id: Option<&str>,
    ) -> Result<StreamBody> {
        let parts = &self.inner.parts;
        let partition = access.partition;
        // Followed from before the first check, so no change after it goes unnoticed; the
        // check itself reads the store, not the cache.
        let mut access_changes = parts.access_changes.clone();
        access_changes.mark_unchanged();
        let checked = endpoints::recheck(parts.store.as_ref(), &grant, parts.clock.now())?;
        let bounds = parts.store.event_bounds(partition)?;
        let (start, before_open) = match last_event_id {
            Some(text) => {
                let after = cursor::decode(CursorKind::Stream, partition.raw(), text.trim())
                    .ok_or_else(|| Error::InvalidParameter {
                        name: "Last-Event-ID",
                        reason: "it is not the id of an event of this endpoint's stream".into(),
                    })?
                    .tiebreak;
                (after, PositionRanges::default())
            }
            // From now on: what committed before this open but is not settled yet (it
            // follows the head only once older transactions end) is not sent either.
            None => (bounds.head, bounds.committed_above_head),
        };
        if start < bounds.trimmed {
            return Err(Error::StreamCursorExpired);
        }
        let slot = Slot::take(&self.inner, (partition, access.holder))?;
        let feed = self.feed(access);
        let capacity = (parts.settings.buffer_kb * 1024).max(FINAL_FRAME_BYTES * 2);
        let budget = Arc::new(Semaphore::new(capacity));
        let reserve = budget
            .clone()
            .try_acquire_many_owned(FINAL_FRAME_BYTES as u32)
            .map_err(|_| Error::Internal("a new stream's buffer is taken".into()))?;
        let (frames_tx, frames) = mpsc::unbounded_channel();
        let (last_word_tx, last_word) = oneshot::channel();
        let (cut_tx, cut) = oneshot::channel();
        let outbox = Outbox {
            frames: frames_tx,
            budget,
            capacity,
            reserve: Some(reserve),
            last_word: Some(last_word_tx),
            cut: Some(cut_tx),
            slow_after: parts.settings.slow_reader_timeout,
        };
        let pump = Pump {
            inner: self.inner.clone(),
            feed,
            position: start,
            before_open,
            outbox,
            grant,
            checked,
            access_changes,
            _slot: slot,
        };
        tokio::spawn(pump.run());
        Ok(StreamBody {
            frames,
            last_word: Some(last_word),
            cut: Some(cut),
            said_last_word: false,
        })
    }

    fn feed(&self, access: &DataAccess) -> Arc<Feed> {
        let mut feeds = lock(&self.inner.feeds);
        if let Some(feed) = feeds.get(&access.partition).and_then(Weak::upgrade) {
            return feed;
        }
        feeds.retain(|_, feed| feed.strong_count() > 0);
        let feed = Arc::new(Feed {
            partition: access.partition,
            endpoint_slug: access.endpoint.slug.clone(),
            environment: access.environment,
            changed: watch::Sender::new(()),
            shared: tokio::sync::Mutex::new(Shared::default()),
            erased: AtomicBool::new(false),
        });
        feeds.insert(access.partition, Arc::downgrade(&feed));
        feed
    }
}

/// One of the streams a key holder holds open on a partition; given back when the stream
/// ends.
struct Slot {
    inner: Arc<Inner>,
    holder: (Partition, KeyHolder),
}

impl Slot {
    fn take(inner: &Arc<Inner>, holder: (Partition, KeyHolder)) -> Result<Slot> {
        let parts = &inner.parts;
        let mut slots = lock(&inner.slots);
        let held = slots.per_holder.get(&holder).copied().unwrap_or(0);
        if held >= parts.settings.max_per_key {
            return Err(Error::TooManyStreams(parts.settings.max_per_key));
        }
        if slots.total >= parts.max_total {
            return Err(Error::StreamsAtCapacity);
        }
        *slots.per_holder.entry(holder).or_insert(0) += 1;
        slots.total += 1;
        Ok(Slot {
            inner: inner.clone(),
            holder,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut slots = lock(&self.inner.slots);
        slots.total -= 1;
        if let Some(count) = slots.per_holder.get_mut(&self.holder) {
            *count -= 1;
            if *count == 0 {
                slots.per_holder.remove(&self.holder);
            }
        }
    }
}

/// Why a frame could not be sent.
enum SendError {
    /// The reader left the buffer full for too long.
    Slow,
    /// The reader is gone.
    Gone,
}

/// A stream's side of its body: frames go out only while the reader takes them.
struct Outbox {
    frames: mpsc::UnboundedSender<Chunk>,
    /// The buffer: each queued byte holds a permit until the connection takes it.
    budget: Arc<Semaphore>,
    capacity: usize,
    /// The room of the frame that ends the stream, kept from the start.
    reserve: Option<OwnedSemaphorePermit>,
    last_word: Option<oneshot::Sender<Bytes>>,
    cut: Option<oneshot::Sender<()>>,
    slow_after: Duration,
}

impl Outbox {
    async fn send(&self, bytes: Bytes) -> std::result::Result<(), SendError> {
        let need = u32::try_from(bytes.len().clamp(1, self.capacity - FINAL_FRAME_BYTES))
            .unwrap_or(u32::MAX);
        let share = tokio::select! {
            share = tokio::time::timeout(
                self.slow_after,
                self.budget.clone().acquire_many_owned(need),
            ) => match share {
                Ok(Ok(share)) => share,
                Ok(Err(_)) => return Err(SendError::Gone),
                Err(_) => return Err(SendError::Slow),
            },
            _ = self.frames.closed() => return Err(SendError::Gone),
        };
        self.frames
            .send(Chunk {
                bytes,
                _share: Some(share),
            })
            .map_err(|_| SendError::Gone)
    }

    /// Sends the frame that ends the stream, in the room kept for it.
    fn finish(&mut self, text: String) {
        let _ = self.frames.send(Chunk {
            bytes: Bytes::from(text),
            _share: self.reserve.take(),
        });
    }

    /// Gives up on a reader that takes nothing: `text` replaces everything still queued, and
    /// the connection is cut if the reader does not take even that within the slow-reader
    /// timeout.
    async fn give_up(&mut self, text: String) {
        if let Some(last_word) = self.last_word.take() {
            let _ = last_word.send(Bytes::from(text));
        }
        tokio::select! {
            _ = tokio::time::sleep(self.slow_after) => {}
            _ = self.frames.closed() => {}
        }
        if let Some(cut) = self.cut.take() {
            let _ = cut.send(());
        }
    }
}

/// The frame of a `stream.error` event, which ends a stream. (Not `error`: a browser's
/// `EventSource` uses that name for its own connection errors.)
fn error_frame(code: &str, message: &str) -> String {
    let data = serde_json::json!({"error": {"code": code, "message": message}});
    format!("event: stream.error\ndata: {data}\n\n")
}

/// The task that feeds one stream.
struct Pump {
    inner: Arc<Inner>,
    feed: Arc<Feed>,
    /// The last event sent or skipped (or where the stream started).
    position: u128,
    /// The positions after the start of events that came before the stream opened.
    before_open: PositionRanges,
    outbox: Outbox,
    /// What its key must still allow.
    grant: KeyGrant,
    /// The last check that found it allowed.
    checked: Rechecked,
    /// Marked changed when access may have changed since that check.
    access_changes: watch::Receiver<()>,
    _slot: Slot,
}

/// The frame that ends a stream whose key no longer allows it (or could not be checked).
struct Refusal(String);

impl Pump {
    async fn run(mut self) {
        let parts = &self.inner.parts;
        let settings = parts.settings.clone();
        let shared_store = parts.store.cluster().is_some();
        let mut changed = self.feed.changed.subscribe();
        let mut closing = self.inner.closing.subscribe();
        let opening = Bytes::from(format!("retry: {RECONNECT_MS}\n: stream open\n\n"));
        if self.outbox.send(opening).await.is_err() {
            return;
        }
        let mut quiet_since = tokio::time::Instant::now();
        loop {
            changed.borrow_and_update();
            if *closing.borrow_and_update() {
                self.outbox
                    .finish(": the server is stopping; reconnect\n\n".into());
                return;
            }
            if self.access_changes.has_changed().unwrap_or(false) {
                self.access_changes.mark_unchanged();
                if let Err(refusal) = self.check_again() {
                    return self.refuse(refusal);
                }
            }
            let read = self
                .feed
                .frames_after(self.inner.parts.store.as_ref(), self.position)
                .await;
            match read {
                Ok(batch) if !batch.frames.is_empty() => {
                    self.before_open.forget_through(self.position);
                    for frame in batch.frames {
                        if self.before_open.contains(frame.position) {
                            self.position = frame.position;
                            continue;
                        }
                        if let Err(refusal) = self.may_send(frame.access_version) {
                            return self.refuse(refusal);
                        }
                        match self.outbox.send(frame.text.clone()).await {
                            Ok(()) => self.position = frame.position,
                            Err(SendError::Slow) => return self.too_slow().await,
                            Err(SendError::Gone) => return,
                        }
                    }
                    quiet_since = tokio::time::Instant::now();
                    continue;
                }
                Ok(batch) => {
                    // Nothing new, but a snapshot that saw a change of access (made on
                    // another node, say) is a reason to check now.
                    if let Some(version) = batch.read_at
                        && let Err(refusal) = self.may_send(version)
                    {
                        return self.refuse(refusal);
                    }
                }
                Err(ReadError::Expired) => {
                    self.outbox.finish(error_frame(
                        "stream_cursor_expired",
                        &Error::StreamCursorExpired.to_string(),
                    ));
                    return;
                }
                Err(ReadError::Store(err)) => {
                    log::error!("stream of partition {}: {err}", self.feed.partition);
                    return self.refuse(Refusal(unavailable_frame()));
                }
            }
            let heartbeat_at = quiet_since + settings.heartbeat;
            tokio::select! {
                _ = changed.changed() => {}
                _ = closing.changed() => {}
                _ = self.access_changes.changed() => {}
                _ = tokio::time::sleep(settings.cluster_poll), if shared_store => {}
                _ = tokio::time::sleep_until(heartbeat_at) => {
                    // Every heartbeat checks the key again too: a grace period ends by the
                    // clock, with no change to wake the stream.
                    if let Err(refusal) = self.check_again() {
                        return self.refuse(refusal);
                    }
                    match self.outbox.send(Bytes::from_static(b": heartbeat\n\n")).await {
                        Ok(()) => quiet_since = tokio::time::Instant::now(),
                        Err(SendError::Slow) => return self.too_slow().await,
                        Err(SendError::Gone) => return,
                    }
                }
                _ = self.outbox.frames.closed() => return,
            }
        }
    }

    /// Whether something read in a snapshot at `access_version` may be sent now: only if the
    /// key was found allowed at that version or a later one (else it is checked again) and
    /// its grace period, if it has one, has not ended.
    fn may_send(&mut self, access_version: u64) -> std::result::Result<(), Refusal> {
        let expired = self
            .checked
            .expires_at
            .is_some_and(|end| end <= self.inner.parts.clock.now());
        if access_version > self.checked.access_version || expired {
            self.check_again()?;
        }
        Ok(())
    }

    /// Checks the key again in a fresh snapshot, with the rule of a new data call.
    fn check_again(&mut self) -> std::result::Result<(), Refusal> {
        let parts = &self.inner.parts;
        match endpoints::recheck(parts.store.as_ref(), &self.grant, parts.clock.now()) {
            Ok(checked) => {
                self.checked = checked;
                Ok(())
            }
            Err(Error::Unavailable(cause)) => {
                log::error!("stream of partition {}: {cause}", self.feed.partition);
                Err(Refusal(unavailable_frame()))
            }
            Err(err) => {
                let code = (parts.error_code)(&err);
                log::info!(
                    "a stream of partition {} was ended: its key no longer allows it ({code})",
                    self.feed.partition
                );
                Err(Refusal(error_frame(code, &err.to_string())))
            }
        }
    }

    fn refuse(mut self, refusal: Refusal) {
        self.outbox.finish(refusal.0);
    }

    async fn too_slow(mut self) {
        let parts = &self.inner.parts;
        parts
            .metrics
            .stream_slow_readers
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        log::info!(
            "a stream of partition {} was disconnected: its reader took nothing for {:?}",
            self.feed.partition,
            parts.settings.slow_reader_timeout
        );
        self.outbox
            .give_up(error_frame(
                "stream_reader_too_slow",
                "This reader took too long to read what was sent; reconnect with Last-Event-ID.",
            ))
            .await;
    }
}

/// The frame that ends a stream the store failed.
fn unavailable_frame() -> String {
    error_frame(
        "storage_unavailable",
        "Storage is temporarily unavailable; reconnect with Last-Event-ID.",
    )
}
