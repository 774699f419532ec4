//! [`PurgeStore`] on redb.

use redb::{ReadableTable, WriteTransaction};

use super::{
    DELIVERIES, DELIVERIES_DUE, DELIVERY_ATTEMPTS, FAILURE_MAILS, IDEMPOTENCY, IDEMPOTENCY_EXPIRY,
    PARTITION_DELIVERIES, RECORD_DELIVERIES, RedbStore, USAGE, USAGE_DAYS, from_json,
    partitions_of,
};
use crate::core::clock::Timestamp;
use crate::store::purge::PurgeStore;
use crate::store::{
    DeliveryBrief, DeliveryRow, DeliveryState, IdempotencyRow, Partition, StoreError, time_key,
};

impl PurgeStore for RedbStore {
    fn purge_partition_rows(
        &self,
        partition: Partition,
        limit: usize,
    ) -> Result<usize, StoreError> {
        let txn = self.write()?;
        let mut removed = purge_deliveries(&txn, partition, limit)?;
        if removed < limit {
            removed += purge_idempotency(&txn, partition, limit - removed)?;
        }
        if removed < limit {
            removed += purge_small_tables(&txn, partition)?;
        }
        txn.commit()?;
        Ok(removed)
    }

    fn delivery_partitions(&self) -> Result<Vec<Partition>, StoreError> {
        partitions_of(&self.read()?.open_table(PARTITION_DELIVERIES)?)
    }

    fn purge_deliveries_before(
        &self,
        partition: Partition,
        cutoff: Timestamp,
        limit: usize,
    ) -> Result<usize, StoreError> {
        let txn = self.write()?;
        let doomed = finished_before(&txn, partition, cutoff, limit)?;
        remove_deliveries(&txn, partition, &doomed)?;
        txn.commit()?;
        Ok(doomed.len())
    }
}

/// At most `limit` deliveries of `partition`, with their attempts and index entries.
fn purge_deliveries(
    txn: &WriteTransaction,
    partition: Partition,
    limit: usize,
) -> Result<usize, StoreError> {
    let doomed: Vec<(u64, u128)> = txn
        .open_table(PARTITION_DELIVERIES)?
        .range((partition.raw(), 0)..=(partition.raw(), u64::MAX))?
        .take(limit)
        .map(|e| e.map(|(k, v)| (k.value().1, v.value())))
        .collect::<Result<_, _>>()?;
    remove_deliveries(txn, partition, &doomed)?;
    Ok(doomed.len())
}

/// The `(id, record id)` of at most `limit` of the oldest finished deliveries of `partition`
/// made before `cutoff`: read in id order (the order they were made), passing over the pending
/// ones, up to the first finished one made at or after it.
fn finished_before(
    txn: &WriteTransaction,
    partition: Partition,
    cutoff: Timestamp,
    limit: usize,
) -> Result<Vec<(u64, u128)>, StoreError> {
    let by_partition = txn.open_table(PARTITION_DELIVERIES)?;
    let deliveries = txn.open_table(DELIVERIES)?;
    let mut doomed = Vec::new();
    for entry in by_partition.range((partition.raw(), 0)..=(partition.raw(), u64::MAX))? {
        if doomed.len() == limit {
            break;
        }
        let (key, record_id) = entry?;
        let id = key.value().1;
        let Some(value) = deliveries.get(id)? else {
            continue;
        };
        // Only the id, state and time are decoded; the body and the rest are skipped over.
        let brief: DeliveryBrief = from_json(value.value())?;
        if brief.state == DeliveryState::Pending {
            continue;
        }
        if brief.created_at >= cutoff {
            break;
        }
        doomed.push((id, record_id.value()));
    }
    Ok(doomed)
}

/// Removes the deliveries `doomed` (`(id, record id)`) of `partition` with their attempts,
/// due-list entries and index entries.
fn remove_deliveries(
    txn: &WriteTransaction,
    partition: Partition,
    doomed: &[(u64, u128)],
) -> Result<(), StoreError> {
    let mut by_partition = txn.open_table(PARTITION_DELIVERIES)?;
    let mut deliveries = txn.open_table(DELIVERIES)?;
    let mut due = txn.open_table(DELIVERIES_DUE)?;
    let mut by_record = txn.open_table(RECORD_DELIVERIES)?;
    let mut attempts = txn.open_table(DELIVERY_ATTEMPTS)?;
    for &(id, record_id) in doomed {
        let next_attempt = match deliveries.remove(id)? {
            Some(value) => from_json::<DeliveryRow>(value.value())?.next_attempt_at,
            None => None,
        };
        if let Some(at) = next_attempt {
            due.remove((time_key(at), id))?;
        }
        by_partition.remove((partition.raw(), id))?;
        by_record.remove((partition.raw(), record_id, id))?;
        let numbers: Vec<u32> = attempts
            .range((id, 0)..=(id, u32::MAX))?
            .map(|e| e.map(|(k, _)| k.value().1))
            .collect::<Result<_, _>>()?;
        for n in numbers {
            attempts.remove((id, n))?;
        }
    }
    Ok(())
}

/// At most `limit` Idempotency-Key claims of `partition`, with their expiry entries.
fn purge_idempotency(
    txn: &WriteTransaction,
    partition: Partition,
    limit: usize,
) -> Result<usize, StoreError> {
    let mut keys = txn.open_table(IDEMPOTENCY)?;
    let mut doomed: Vec<(String, u64)> = Vec::new();
    for entry in keys.range((partition.raw(), "")..)? {
        let (key, value) = entry?;
        let (of, idem) = key.value();
        if of != partition.raw() || doomed.len() == limit {
            break;
        }
        let row: IdempotencyRow = from_json(value.value())?;
        doomed.push((idem.to_string(), time_key(row.created_at)));
    }
    let mut expiry = txn.open_table(IDEMPOTENCY_EXPIRY)?;
    for (idem, stored) in &doomed {
        keys.remove((partition.raw(), idem.as_str()))?;
        expiry.remove((*stored, partition.raw(), idem.as_str()))?;
    }
    Ok(doomed.len())
}

/// The partition's usage counts and its endpoint's failure-mail marks: a few rows per month.
fn purge_small_tables(txn: &WriteTransaction, partition: Partition) -> Result<usize, StoreError> {
    let mut removed = 0;
    for table in [USAGE, USAGE_DAYS] {
        let mut table = txn.open_table(table)?;
        let keys: Vec<u32> = table
            .range((partition.raw(), 0)..=(partition.raw(), u32::MAX))?
            .map(|e| e.map(|(k, _)| k.value().1))
            .collect::<Result<_, _>>()?;
        for key in &keys {
            table.remove((partition.raw(), *key))?;
        }
        removed += keys.len();
    }
    let endpoint = partition.endpoint();
    let mut marks = txn.open_table(FAILURE_MAILS)?;
    let days: Vec<u64> = marks
        .range((endpoint, 0)..=(endpoint, u64::MAX))?
        .map(|e| e.map(|(k, _)| k.value().1))
        .collect::<Result<_, _>>()?;
    for day in &days {
        marks.remove((endpoint, *day))?;
    }
    Ok(removed + days.len())
}
