//! [`RecordsRead`] and [`RecordsStore`] on redb: the `RECORDS` scans, and the retention purge,
//! which logs its deletes in the change log (`CHANGES`, `META` `last_change_seq`).

use std::ops::Bound;

use redb::{ReadableTable, Table, WriteTransaction};

use super::tx::Tables;
use super::{
    CHANGES, LAST_CHANGE_SEQ, META, RECORDS, RedbStore, decode_record, read_counter, write_counter,
};
use crate::core::ids::RecordId;
use crate::store::StoreError;
use crate::store::records::{RecordRef, RecordRow, RecordsRead, RecordsStore, ScanOrder};

impl<T: Tables> RecordsRead for T {
    fn record(&self, partition: u64, id: RecordId) -> Result<Option<RecordRow>, StoreError> {
        match self.open(RECORDS)?.get((partition, id.0))? {
            Some(value) => {
                let (updated_at, payload) = decode_record(value.value())?;
                Ok(Some(RecordRow {
                    id,
                    updated_at,
                    payload: payload.to_vec(),
                }))
            }
            None => Ok(None),
        }
    }

    fn record_page(
        &self,
        partition: u64,
        ids: (Bound<u128>, Bound<u128>),
        order: ScanOrder,
        limit: usize,
        visit: &mut dyn FnMut(RecordRef<'_>) -> Result<(), StoreError>,
    ) -> Result<bool, StoreError> {
        let records = self.open(RECORDS)?;
        let key = |bound: Bound<u128>| bound.map(|id| (partition, id));
        let range = records.range::<(u64, u128)>((key(ids.0), key(ids.1)))?;
        match order {
            ScanOrder::OldestFirst => visit_page(range, limit, visit),
            ScanOrder::NewestFirst => visit_page(range.rev(), limit, visit),
        }
    }

    fn record_partitions(&self) -> Result<Vec<u64>, StoreError> {
        let records = self.open(RECORDS)?;
        let mut partitions = Vec::new();
        let mut from = Some(0);
        // One seek per partition: the first key at or after the end of the previous one.
        while let Some(start) = from {
            let Some(entry) = records.range((start, 0u128)..)?.next() else {
                break;
            };
            let partition = entry?.0.value().0;
            partitions.push(partition);
            from = partition.checked_add(1);
        }
        Ok(partitions)
    }
}

/// Hands at most `limit` entries to `visit`; whether one more follows.
fn visit_page<'a>(
    entries: impl Iterator<
        Item = Result<
            (
                redb::AccessGuard<'a, (u64, u128)>,
                redb::AccessGuard<'a, &'static [u8]>,
            ),
            redb::StorageError,
        >,
    >,
    limit: usize,
    visit: &mut dyn FnMut(RecordRef<'_>) -> Result<(), StoreError>,
) -> Result<bool, StoreError> {
    for (visited, entry) in entries.enumerate() {
        let (key, value) = entry?;
        if visited == limit {
            return Ok(true);
        }
        let (updated_at, payload) = decode_record(value.value())?;
        visit(RecordRef {
            id: RecordId(key.value().1),
            updated_at,
            payload,
        })?;
    }
    Ok(false)
}

impl RecordsStore for RedbStore {
    fn purge_partition_before(
        &self,
        partition: u64,
        below: u128,
        limit: usize,
    ) -> Result<usize, StoreError> {
        let txn = self.write()?;
        let removed = {
            let mut records = txn.open_table(RECORDS)?;
            let ids: Vec<u128> = records
                .range((partition, 0)..(partition, below))?
                .take(limit)
                .map(|e| e.map(|(k, _)| k.value().1))
                .collect::<Result<_, _>>()?;
            let mut log = ChangeLog::open(&txn)?;
            for id in &ids {
                records.remove((partition, *id))?;
                log.append(partition, *id)?;
            }
            log.finish(&txn)?;
            ids.len()
        };
        txn.commit()?;
        Ok(removed)
    }
}

/// Appends to the change log within one write transaction.
struct ChangeLog<'txn> {
    changes: Table<'txn, u64, (u64, u128)>,
    /// The last change sequence written.
    last_seq: u64,
    first_seq: u64,
}

impl<'txn> ChangeLog<'txn> {
    fn open(txn: &'txn WriteTransaction) -> Result<ChangeLog<'txn>, StoreError> {
        let last_seq = read_counter(&txn.open_table(META)?, LAST_CHANGE_SEQ)?;
        Ok(ChangeLog {
            changes: txn.open_table(CHANGES)?,
            last_seq,
            first_seq: last_seq,
        })
    }

    fn append(&mut self, partition: u64, id: u128) -> Result<(), StoreError> {
        self.last_seq += 1;
        self.changes.insert(self.last_seq, (partition, id))?;
        Ok(())
    }

    /// Saves the last sequence written; call before the commit.
    fn finish(self, txn: &WriteTransaction) -> Result<(), StoreError> {
        if self.last_seq != self.first_seq {
            write_counter(txn, LAST_CHANGE_SEQ, self.last_seq)?;
        }
        Ok(())
    }
}
