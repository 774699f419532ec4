//! [`UsageStore`] on redb.

use std::ops::RangeInclusive;

use redb::{ReadableDatabase, ReadableTable, TableDefinition};

use super::{RedbStore, USAGE, USAGE_DAYS};
use crate::store::usage::{CallsDelta, UsageStore};
use crate::store::{Partition, StoreError};

/// `USAGE` and `USAGE_DAYS`: `(partition, period)` → calls.
type Counters = TableDefinition<'static, (u64, u32), u64>;

impl UsageStore for RedbStore {
    fn add_calls(&self, deltas: &[CallsDelta]) -> Result<(), StoreError> {
        let txn = self.write()?;
        {
            let mut months = txn.open_table(USAGE)?;
            let mut days = txn.open_table(USAGE_DAYS)?;
            for delta in deltas {
                for (table, period) in [(&mut months, delta.month), (&mut days, delta.day)] {
                    let key = (delta.partition.raw(), period);
                    let stored = table.get(key)?.map_or(0, |v| v.value());
                    table.insert(key, stored.saturating_add(delta.calls))?;
                }
            }
        }
        txn.commit()?;
        Ok(())
    }

    fn monthly_calls(
        &self,
        partition: Partition,
        months: RangeInclusive<u32>,
    ) -> Result<Vec<(u32, u64)>, StoreError> {
        self.calls(USAGE, partition, months)
    }

    fn daily_calls(
        &self,
        partition: Partition,
        days: RangeInclusive<u32>,
    ) -> Result<Vec<(u32, u64)>, StoreError> {
        self.calls(USAGE_DAYS, partition, days)
    }
}

impl RedbStore {
    /// The counters of `partition` in `periods`, oldest first.
    fn calls(
        &self,
        table: Counters,
        partition: Partition,
        periods: RangeInclusive<u32>,
    ) -> Result<Vec<(u32, u64)>, StoreError> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(table)?;
        let mut out = Vec::new();
        for entry in
            table.range((partition.raw(), *periods.start())..=(partition.raw(), *periods.end()))?
        {
            let (key, value) = entry?;
            out.push((key.value().1, value.value()));
        }
        Ok(out)
    }
}
