//! Purges in bounded transactions, so that none holds the write lock for long:
//!
//! - what a deleted endpoint leaves behind its records and change-stream events (which
//!   `RecordsStore::purge_partition_before` and `EventsStore::purge_events_before` remove):
//!   its partitions' webhook deliveries with their attempts and index entries, Idempotency-Key
//!   claims, usage counts, rate-limit state and failure-mail marks;
//! - retention's share of the delivery log: finished deliveries made before their
//!   environment's cutoff, with their attempts and index entries.

use crate::core::clock::Timestamp;
use crate::store::{Partition, StoreError};

pub trait PurgeStore {
    /// Removes at most about `limit` of those rows of `partition` (a delivery goes with all
    /// its attempts) in one transaction; returns how many rows it removed, 0 once none is
    /// left.
    fn purge_partition_rows(&self, partition: Partition, limit: usize)
    -> Result<usize, StoreError>;

    /// Every partition with at least one webhook delivery, in ascending order.
    fn delivery_partitions(&self) -> Result<Vec<Partition>, StoreError>;

    /// Removes, in one transaction, at most `limit` of the oldest finished deliveries
    /// (delivered, given up, skipped or cancelled) of `partition` made before `cutoff`, each
    /// with its attempts and index entries; a pending one (waiting for an attempt, or in flight) is
    /// kept. Returns how many deliveries it removed (`limit`: there may be more).
    ///
    /// It walks the partition's deliveries in id order, which is the order they were made,
    /// passing over the pending ones, and stops at the first finished one made at or after
    /// `cutoff`, so a chunk reads no further than the pending ones and `limit` finished ones
    /// (not the whole partition): a delivery made a moment out of order goes with the next
    /// purge.
    fn purge_deliveries_before(
        &self,
        partition: Partition,
        cutoff: Timestamp,
        limit: usize,
    ) -> Result<usize, StoreError>;
}
