//! The change log: every applied create, replace or delete, in commit order. Only the store
//! appends to it, in the commit of the change itself; the search indexer follows it from a
//! position of its own (re-reading each record as it is, so applying an entry twice has no
//! double effect) and trims it once every reader is past.

use std::ops::ControlFlow;

use crate::store::{Partition, StoreError};

/// One entry: the record a create, replace or delete touched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChangeEntry {
    /// Its place in the log: each commit's entries follow every earlier one's.
    pub seq: u64,
    pub partition: Partition,
    pub record_id: u128,
}

/// An entry and the payload of its record, read in the same snapshot: `None` when the record
/// does not exist (any more).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangedRecord {
    pub entry: ChangeEntry,
    pub payload: Option<Vec<u8>>,
}

/// Where the log stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChangeLogBounds {
    /// The sequence of the last entry written; 0 before the first.
    pub last: u64,
    /// Every entry up to this sequence has been trimmed.
    pub trimmed_upto: u64,
}

/// What [`ChangesStore::replay`] hands the whole store to (the search index's rebuild).
pub trait Replay {
    /// Told first: how many records the snapshot holds, and the sequence of the last change
    /// it contains (the position to follow the log from afterwards).
    fn begin(&mut self, records: u64, position: u64);

    /// One record; `Break` ends the replay.
    fn record(&mut self, partition: Partition, record_id: u128, payload: &[u8]) -> ControlFlow<()>;
}

/// Units of work of their own transaction.
pub trait ChangesStore {
    fn change_log_bounds(&self) -> Result<ChangeLogBounds, StoreError>;

    /// The entries after `position`, oldest first, at most `limit`.
    fn changes_after(&self, position: u64, limit: usize) -> Result<Vec<ChangeEntry>, StoreError>;

    /// [`ChangesStore::changes_after`] with each entry's record as it is in the same snapshot:
    /// what a follower applies, so that everything up to the last entry, and nothing after
    /// it, is what it has seen.
    fn changed_records_after(
        &self,
        position: u64,
        limit: usize,
    ) -> Result<Vec<ChangedRecord>, StoreError>;

    /// Hands every stored record, in key order, to `to`, all from one snapshot (see
    /// [`Replay`]).
    fn replay(&self, to: &mut dyn Replay) -> Result<(), StoreError>;

    /// Removes the entries up to `upto`, oldest first, at most `limit` of them, and records how
    /// far the log is trimmed; returns how many it removed (`limit`: there may be more). A
    /// store shared by several nodes must trim only what every node's indexer is past.
    fn trim_changes(&self, upto: u64, limit: usize) -> Result<usize, StoreError>;
}
