//! Usage counters: data calls per partition and month (the quota) and per day (the dashboard chart).

use std::ops::RangeInclusive;

use crate::store::{Partition, StoreError};

/// Calls of one partition on one day that a node counted and has not stored yet. `month`
/// (`yyyymm`) is the month of `day` (`yyyymmdd`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallsDelta {
    pub partition: Partition,
    pub month: u32,
    pub day: u32,
    pub calls: u64,
}

/// The stored counters. Each node counts calls in memory and flushes what it counted since its
/// last flush as deltas ("add n"), never the total it believes in ("set to n"): several nodes
/// count the same partition at once, and a total written by one would erase the calls the
/// others stored meanwhile. Adding is also what makes a flush safe to repeat after a failure.
pub trait UsageStore {
    /// Adds each delta's calls to its partition's month and day counters, all in one commit.
    fn add_calls(&self, deltas: &[CallsDelta]) -> Result<(), StoreError>;

    /// The stored calls of `partition` per month in `months` (`yyyymm`), oldest first; months
    /// without calls are left out.
    fn monthly_calls(
        &self,
        partition: Partition,
        months: RangeInclusive<u32>,
    ) -> Result<Vec<(u32, u64)>, StoreError>;

    /// The stored calls of `partition` per day in `days` (`yyyymmdd`), oldest first; days
    /// without calls are left out.
    fn daily_calls(
        &self,
        partition: Partition,
        days: RangeInclusive<u32>,
    ) -> Result<Vec<(u32, u64)>, StoreError>;
}
