//! The event log: every applied create, replace and delete of a partition, in the order of the
//! transactions that made them, for the change stream (`domain::stream`).
//!
//! The ingest batch appends one event per applied write in the write's own commit
//! (`RecordsStore::apply_batch`), so an event exists exactly when its write was acknowledged.
//! An event names its record; its payload is read from the record store when the event is
//! read, so the log costs a few dozen bytes per write, not a second copy of every payload.
//!
//! **Positions.** Each event has a position, a number that orders a partition's events. A
//! reader asks for the events after the last position it has seen and only ever gets events
//! whose place in the order is *settled*: no event that commits later can take a position
//! below one already handed out. So a reader that follows positions sees every event once, in
//! order, without holding anything back by time:
//! - redb has one writer: an event's position is its change-log sequence, taken in the write
//!   transaction, and a snapshot always holds a prefix of the sequence.
//! - On PostgreSQL several nodes commit at once: a position is the writing transaction's id
//!   and a sequence number, and only events of transactions older than the oldest one still
//!   running are read (`store::postgres::events`).
//!
//! Retention purges a partition's old events with its records and remembers how far it has
//! purged: a position below that mark may have missed events, and a reader holding one must
//! start again (with poll).

use std::ops::Range;

use crate::core::clock::Timestamp;
use crate::core::ids::RecordId;
use crate::store::records::ChangeKind;
use crate::store::{Partition, StoreError};

/// One event of the log, with its record as it is in the snapshot it was read in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredEvent {
    pub position: u128,
    pub kind: ChangeKind,
    pub record_id: RecordId,
    /// When the write was received.
    pub at: Timestamp,
    /// The record now (`updated_at`, payload); `None` once it is deleted.
    pub record: Option<(Timestamp, Vec<u8>)>,
}

/// A page of events read in one snapshot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventPage {
    /// The settled events after the position asked for, oldest first.
    pub events: Vec<StoredEvent>,
    /// Positions below this may have missed purged events (see [`EventBounds::trimmed`]).
    pub trimmed: u128,
    /// The access version of the snapshot (`EndpointsRead::access_version`): every change of
    /// access committed before these events were is counted in it, so a stream whose key was
    /// checked at this version or later may send them.
    pub access_version: u64,
}

/// Where a partition's event log stands.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventBounds {
    /// The position of the last settled event (or the trim mark, if higher; 0 when there has
    /// been none): a stream that starts now continues after it.
    pub head: u128,
    /// Events at or below this position may have been purged, so a reader at a position
    /// below it may have missed some.
    pub trimmed: u128,
    /// Where above `head` the events that had committed when these bounds were read lie,
    /// not yet settled: a stream that starts at `head` now skips them, as they came before
    /// it. Empty where every committed event is settled (redb).
    pub committed_above_head: PositionRanges,
}

/// Half-open ranges of event positions, ascending and apart.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PositionRanges(pub Vec<Range<u128>>);

impl PositionRanges {
    pub fn contains(&self, position: u128) -> bool {
        self.0.iter().any(|range| range.contains(&position))
    }

    /// Forgets the ranges at or below `position`, which a reader there has passed.
    pub fn forget_through(&mut self, position: u128) {
        self.0
            .retain(|range| range.end > position.saturating_add(1));
    }
}

/// Units of work of their own transaction.
pub trait EventsStore {
    /// The settled events of `partition` after position `after`, oldest first: at most
    /// `limit`, and no more once their payloads add up to `max_bytes` (at least one).
    fn events_after(
        &self,
        partition: Partition,
        after: u128,
        limit: usize,
        max_bytes: usize,
    ) -> Result<EventPage, StoreError>;

    fn event_bounds(&self, partition: Partition) -> Result<EventBounds, StoreError>;

    /// Every partition with at least one event, in ascending order.
    fn event_partitions(&self) -> Result<Vec<Partition>, StoreError>;

    /// Removes at most `limit` of the oldest events of `partition` received before `cutoff`,
    /// raising its trim mark over them; returns how many (`limit`: there may be more).
    fn purge_events_before(
        &self,
        partition: Partition,
        cutoff: Timestamp,
        limit: usize,
    ) -> Result<usize, StoreError>;
}

/// The kind of an event as stored.
pub fn kind_code(kind: ChangeKind) -> u8 {
    match kind {
        ChangeKind::Created => 1,
        ChangeKind::Replaced => 2,
        ChangeKind::Deleted => 3,
    }
}

/// The kind stored as `code`.
pub fn kind_of_code(code: u8) -> Result<ChangeKind, StoreError> {
    match code {
        1 => Ok(ChangeKind::Created),
        2 => Ok(ChangeKind::Replaced),
        3 => Ok(ChangeKind::Deleted),
        other => Err(StoreError::Corrupt(format!("event kind {other}"))),
    }
}
