//! What a deleted endpoint leaves behind its records and change-stream events (which
//! `RecordsStore::purge_partition_before` and `EventsStore::purge_events_before` remove):
//! its partitions' webhook deliveries with their attempts and index entries, Idempotency-Key
//! claims, usage counts, rate-limit state and failure-mail marks. Removed in bounded
//! transactions, so purging a large endpoint never holds the write lock for long.

use crate::store::StoreError;

pub trait PurgeStore {
    /// Removes at most about `limit` of those rows of `partition` (a delivery goes with all
    /// its attempts) in one transaction; returns how many rows it removed, 0 once none is
    /// left.
    fn purge_partition_rows(&self, partition: u64, limit: usize) -> Result<usize, StoreError>;
}
