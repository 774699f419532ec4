//! [`UsageStore`] on PostgreSQL: `usage_months` and `usage_days`, `(partition, period)` →
//! calls. Flushes add to the stored counters in the database (`ON CONFLICT ... DO UPDATE`), so
//! concurrent flushes from several nodes all count.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;

use super::{PgStore, PgTx, big, big_partition, unbig};
use crate::store::usage::{CallsDelta, UsageStore};
use crate::store::{Partition, StoreError};

/// A `yyyymm` or `yyyymmdd` period as the `integer` it is stored as.
fn period(value: u32) -> i32 {
    i32::try_from(value).unwrap_or(i32::MAX)
}

/// The deltas of one table, added up per `(partition, period)` (one statement may change a row
/// only once) and in key order, so concurrent flushes lock rows in the same order.
fn columns(sums: BTreeMap<(Partition, u32), u64>) -> (Vec<i64>, Vec<i32>, Vec<i64>) {
    let mut partitions = Vec::with_capacity(sums.len());
    let mut periods = Vec::with_capacity(sums.len());
    let mut calls = Vec::with_capacity(sums.len());
    for ((partition, at), n) in sums {
        partitions.push(big_partition(partition));
        periods.push(period(at));
        calls.push(big(n));
    }
    (partitions, periods, calls)
}

impl UsageStore for PgStore {
    fn add_calls(&self, deltas: &[CallsDelta]) -> Result<(), StoreError> {
        if deltas.is_empty() {
            return Ok(());
        }
        let mut months = BTreeMap::new();
        let mut days = BTreeMap::new();
        for delta in deltas {
            for (sums, at) in [(&mut months, delta.month), (&mut days, delta.day)] {
                let sum: &mut u64 = sums.entry((delta.partition, at)).or_default();
                *sum = sum.saturating_add(delta.calls);
            }
        }
        let months = columns(months);
        let days = columns(days);
        // Both tables in one commit; a conflict with another node's flush reruns it whole.
        self.write_unit(|tx| {
            tx.execute(
                "INSERT INTO usage_months (partition, month, calls)
                 SELECT * FROM unnest($1::bigint[], $2::integer[], $3::bigint[])
                 ON CONFLICT (partition, month)
                     DO UPDATE SET calls = usage_months.calls + EXCLUDED.calls",
                &[&months.0, &months.1, &months.2],
            )?;
            tx.execute(
                "INSERT INTO usage_days (partition, day, calls)
                 SELECT * FROM unnest($1::bigint[], $2::integer[], $3::bigint[])
                 ON CONFLICT (partition, day)
                     DO UPDATE SET calls = usage_days.calls + EXCLUDED.calls",
                &[&days.0, &days.1, &days.2],
            )?;
            Ok(())
        })?;
        Ok(())
    }

    fn monthly_calls(
        &self,
        partition: Partition,
        months: RangeInclusive<u32>,
    ) -> Result<Vec<(u32, u64)>, StoreError> {
        calls(
            &PgTx::read(self)?,
            "SELECT month, calls FROM usage_months
             WHERE partition = $1 AND month BETWEEN $2 AND $3 ORDER BY month",
            partition,
            months,
        )
    }

    fn daily_calls(
        &self,
        partition: Partition,
        days: RangeInclusive<u32>,
    ) -> Result<Vec<(u32, u64)>, StoreError> {
        calls(
            &PgTx::read(self)?,
            "SELECT day, calls FROM usage_days
             WHERE partition = $1 AND day BETWEEN $2 AND $3 ORDER BY day",
            partition,
            days,
        )
    }
}

/// The counters `sql` selects of `partition` in `periods`, oldest first (at most one row per
/// period in the range).
fn calls(
    tx: &PgTx,
    sql: &str,
    partition: Partition,
    periods: RangeInclusive<u32>,
) -> Result<Vec<(u32, u64)>, StoreError> {
    tx.query(
        sql,
        &[
            &big_partition(partition),
            &period(*periods.start()),
            &period(*periods.end()),
        ],
    )?
    .iter()
    .map(|row| {
        let at: i32 = row.try_get(0)?;
        let at = u32::try_from(at)
            .map_err(|_| StoreError::Corrupt(format!("a usage period of {at}")))?;
        Ok((at, unbig(row.try_get(1)?)))
    })
    .collect()
}
