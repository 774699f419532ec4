//! The feed of a partition's events that its change streams share ([`Feed`]): the frames
//! they read, kept in segments of consecutive events, and dropped when an erasure removes
//! records of the partition.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use tokio::sync::watch;

use super::{PAGE_BYTES, PAGE_EVENTS, SEGMENT_BYTES, SHARED_BYTES};
use crate::core::cursor::{self, CursorKind, Position};
use crate::domain::webhooks::deliveries::{EventContent, event_json, event_type};
use crate::store::events::StoredEvent;
use crate::store::records::ChangeKind;
use crate::store::{Environment, Partition, Store, StoreError, time_key};

/// One event as it goes on the wire.
pub(super) struct Frame {
    pub(super) position: u128,
    /// The access version of the snapshot the event was read in.
    pub(super) access_version: u64,
    pub(super) text: Bytes,
}

/// What a stream reads at its place in the feed.
pub(super) struct Batch {
    /// The frames after the place, oldest first (none when there are none yet).
    pub(super) frames: Vec<Arc<Frame>>,
    /// The access version of the snapshot read to answer, when the store was read.
    pub(super) read_at: Option<u64>,
}

/// What the streams of one partition share: a wake-up on each commit to it, and the frames
/// they read.
pub(super) struct Feed {
    pub(super) partition: Partition,
    pub(super) endpoint_slug: String,
    pub(super) environment: Environment,
    pub(super) changed: watch::Sender<()>,
    pub(super) shared: tokio::sync::Mutex<Shared>,
    /// Set by an erasure in the partition: the shared frames must go ([`Streams::erased`]).
    pub(super) erased: AtomicBool,
}

/// The frames of a partition's events that its streams have read, in segments of
/// consecutive events, so that streams at the same place share one store read: those at the
/// newest event (the usual case), and those that fell behind together (a burst of writes
/// outran them all). At most [`SHARED_BYTES`] in all; the segment used longest ago goes
/// first.
#[derive(Default)]
pub(super) struct Shared {
    /// By the position each segment starts after.
    segments: BTreeMap<u128, Segment>,
    bytes: usize,
    /// Counts uses, to tell which segment was used longest ago.
    uses: u64,
}

impl Shared {
    /// Drops every frame if an erasure asked for it (`erased`), and clears the request.
    pub(super) fn drop_if_erased(&mut self, erased: &AtomicBool) {
        if erased.swap(false, Ordering::SeqCst) {
            self.segments.clear();
            self.bytes = 0;
        }
    }
}

/// Every settled event with a position in `(start, end]`, oldest first.
struct Segment {
    end: u128,
    frames: Vec<Arc<Frame>>,
    bytes: usize,
    last_used: u64,
}

/// What a stream could not read.
pub(super) enum ReadError {
    /// Events after the position were purged.
    Expired,
    Store(StoreError),
}

impl From<StoreError> for ReadError {
    fn from(err: StoreError) -> Self {
        ReadError::Store(err)
    }
}

impl Feed {
    /// The frames of the events after `after`.
    pub(super) async fn frames_after(
        &self,
        store: &dyn Store,
        after: u128,
    ) -> std::result::Result<Batch, ReadError> {
        let mut shared = self.shared.lock().await;
        shared.drop_if_erased(&self.erased);
        shared.uses += 1;
        let now = shared.uses;
        if let Some((_, segment)) = shared.segments.range_mut(..=after).next_back()
            && after < segment.end
        {
            segment.last_used = now;
            let from = segment.frames.partition_point(|f| f.position <= after);
            let frames = segment.frames[from..]
                .iter()
                .take(PAGE_EVENTS)
                .cloned()
                .collect();
            return Ok(Batch {
                frames,
                read_at: None,
            });
        }
        // Nobody has read past `after` yet: one read serves every stream that comes here
        // (they wait on the lock meanwhile).
        let (frames, access_version) = self.read(store, after)?;
        let read_at = Some(access_version);
        // An erasure committed during the read: what was read may predate it, so it is not
        // kept for others.
        let erased_meanwhile = self.erased.load(Ordering::SeqCst);
        shared.drop_if_erased(&self.erased);
        let Some(last) = frames
            .last()
            .map(|f| f.position)
            .filter(|_| !erased_meanwhile)
        else {
            return Ok(Batch { frames, read_at });
        };
        let bytes: usize = frames.iter().map(|f| f.text.len()).sum();
        shared.bytes += bytes;
        let extends = shared
            .segments
            .range_mut(..=after)
            .next_back()
            .filter(|(_, s)| s.end == after && s.bytes < SEGMENT_BYTES);
        match extends {
            Some((_, segment)) => {
                segment.frames.extend(frames.iter().cloned());
                segment.end = last;
                segment.bytes += bytes;
                segment.last_used = now;
            }
            None => {
                let segment = Segment {
                    end: last,
                    frames: frames.clone(),
                    bytes,
                    last_used: now,
                };
                shared.segments.insert(after, segment);
            }
        }
        while shared.bytes > SHARED_BYTES && shared.segments.len() > 1 {
            let Some(oldest) = shared
                .segments
                .iter()
                .min_by_key(|(_, s)| s.last_used)
                .map(|(start, _)| *start)
            else {
                break;
            };
            if let Some(gone) = shared.segments.remove(&oldest) {
                shared.bytes -= gone.bytes;
            }
        }
        Ok(Batch { frames, read_at })
    }

    /// The frames of one page of events after `after`, and the access version of the snapshot
    /// they were read in.
    fn read(
        &self,
        store: &dyn Store,
        after: u128,
    ) -> std::result::Result<(Vec<Arc<Frame>>, u64), ReadError> {
        let page = store.events_after(self.partition, after, PAGE_EVENTS, PAGE_BYTES)?;
        if after < page.trimmed {
            return Err(ReadError::Expired);
        }
        let frames = page
            .events
            .iter()
            .map(|event| Ok(Arc::new(self.frame(event, page.access_version)?)))
            .collect::<std::result::Result<_, StoreError>>()?;
        Ok((frames, page.access_version))
    }

    fn frame(
        &self,
        event: &StoredEvent,
        access_version: u64,
    ) -> std::result::Result<Frame, StoreError> {
        let payload = match (event.kind, &event.record) {
            (ChangeKind::Deleted, _) | (_, None) => None,
            (_, Some((_, payload))) => Some(payload.as_slice()),
        };
        let json = event_json(&EventContent {
            kind: event.kind,
            at: event.at,
            id: event.record_id,
            endpoint_slug: &self.endpoint_slug,
            environment: self.environment,
            payload,
        })?;
        let id = cursor::encode(
            CursorKind::Stream,
            self.partition.raw(),
            Position {
                time: time_key(event.at),
                tiebreak: event.position,
            },
        );
        let kind = event_type(event.kind).as_str();
        Ok(Frame {
            position: event.position,
            access_version,
            text: Bytes::from(format!("id: {id}\nevent: {kind}\ndata: {json}\n\n")),
        })
    }
}
