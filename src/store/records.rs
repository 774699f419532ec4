//! Records: the data operations' rows (records, idempotency keys), the batch apply of the
//! ingest writer, and the record scans of list, poll and retention.
//!
//! A record id begins with its created_at in microseconds ([`RecordId`]), so id order is
//! creation order and every page is a range of ids of one partition.
//!
//! Every applied create, replace and delete is appended to the change log in the same commit
//! (the search index follows it, see `store::changes`).

use std::ops::Bound;

use crate::core::clock::Timestamp;
use crate::core::ids::RecordId;
use crate::store::StoreError;

/// A stored record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordRow {
    pub id: RecordId,
    /// When it was created or last replaced.
    pub updated_at: Timestamp,
    /// Its payload text: normalised JSON (see `domain::records`).
    pub payload: Vec<u8>,
}

/// A stored record as a scan hands it over, borrowed from the store (a page is written out
/// without copying each payload first).
#[derive(Clone, Copy, Debug)]
pub struct RecordRef<'a> {
    pub id: RecordId,
    pub updated_at: Timestamp,
    pub payload: &'a [u8],
}

/// The order of a scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScanOrder {
    OldestFirst,
    NewestFirst,
}

pub trait RecordsRead {
    /// The record `id` of `partition`.
    fn record(&self, partition: u64, id: RecordId) -> Result<Option<RecordRow>, StoreError>;

    /// Hands the records of `partition` whose ids lie within `ids` to `visit`, in `order`, at
    /// most `limit` of them; returns whether another record lies within `ids` after them.
    fn record_page(
        &self,
        partition: u64,
        ids: (Bound<u128>, Bound<u128>),
        order: ScanOrder,
        limit: usize,
        visit: &mut dyn FnMut(RecordRef<'_>) -> Result<(), StoreError>,
    ) -> Result<bool, StoreError>;

    /// Every partition holding at least one record, in ascending order.
    fn record_partitions(&self) -> Result<Vec<u64>, StoreError>;
}

/// Units of work of their own durable transaction.
pub trait RecordsStore {
    /// Deletes at most `limit` records of `partition` with ids below `below`, oldest first,
    /// logging each delete in the change log; returns how many.
    fn purge_partition_before(
        &self,
        partition: u64,
        below: u128,
        limit: usize,
    ) -> Result<usize, StoreError>;
}
