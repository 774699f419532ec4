//! [`RequestLogStore`] on redb: `REQUEST_LOG` in `requests.redb`, keyed
//! `(partition, time_us, sequence)`.

use std::ops::Bound;

use redb::{ReadableDatabase, ReadableTable, Table};

use super::{REQUEST_LOG, RedbStore, from_json, to_json};
use crate::core::clock::Timestamp;
use crate::store::request_log::{
    LogPage, LogPosition, PAGE_SCAN_LIMIT, RequestLogStore, StatusFilter,
};
use crate::store::{RequestLogRow, StoreError, time_key};

/// Entries deleted per transaction by a purge, so it never holds the writer for long.
const PURGE_CHUNK: usize = 10_000;

type Key = (u64, u64, u64);

impl RequestLogStore for RedbStore {
    fn append_requests(&self, entries: &[(u64, RequestLogRow)]) -> Result<(), StoreError> {
        let txn = self.write()?;
        {
            let mut table = txn.open_table(REQUEST_LOG)?;
            for (partition, row) in entries {
                let time = time_key(row.time);
                let sequence = last_sequence(&table, *partition, time)?.saturating_add(1);
                table.insert((*partition, time, sequence), to_json(row)?.as_slice())?;
            }
        }
        txn.commit()?;
        Ok(())
    }

    fn requests_page(
        &self,
        partition: u64,
        before: Option<LogPosition>,
        limit: usize,
        filter: StatusFilter,
    ) -> Result<LogPage, StoreError> {
        let upper = match before {
            Some(at) => Bound::Excluded((partition, at.time, at.sequence)),
            None => Bound::Included((partition, u64::MAX, u64::MAX)),
        };
        let txn = self.db.begin_read()?;
        let table = txn.open_table(REQUEST_LOG)?;
        let mut entries = Vec::with_capacity(limit);
        let mut last = None;
        let mut more = false;
        for (scanned, entry) in table
            .range::<Key>((Bound::Included((partition, 0, 0)), upper))?
            .rev()
            .enumerate()
        {
            let (key, value) = entry?;
            if entries.len() == limit || scanned == PAGE_SCAN_LIMIT {
                more = true;
                break;
            }
            let (_, time, sequence) = key.value();
            let position = LogPosition { time, sequence };
            last = Some(position);
            let row: RequestLogRow = from_json(value.value())?;
            if filter.matches(row.status) {
                entries.push((position, row));
            }
        }
        Ok(LogPage {
            entries,
            next: last.filter(|_| more),
        })
    }

    fn purge_requests_before(&self, cutoff: Timestamp) -> Result<usize, StoreError> {
        let cut = time_key(cutoff);
        let mut total = 0;
        let mut next_partition = Some(0u64);
        while let Some(partition) = next_partition {
            // The first entry at or after this partition names the next partition to visit.
            let found = {
                let txn = self.db.begin_read()?;
                let table = txn.open_table(REQUEST_LOG)?;
                let first = table.range((partition, 0, 0)..)?.next().transpose()?;
                first.map(|(k, _)| k.value().0)
            };
            let Some(partition) = found else { break };
            loop {
                let txn = self.write()?;
                let removed = {
                    let mut table = txn.open_table(REQUEST_LOG)?;
                    let keys: Vec<Key> = table
                        .range((partition, 0, 0)..(partition, cut, 0))?
                        .take(PURGE_CHUNK)
                        .map(|e| e.map(|(k, _)| k.value()))
                        .collect::<Result<_, _>>()?;
                    for key in &keys {
                        table.remove(*key)?;
                    }
                    keys.len()
                };
                txn.commit()?;
                total += removed;
                if removed < PURGE_CHUNK {
                    break;
                }
            }
            next_partition = partition.checked_add(1);
        }
        Ok(total)
    }
}

/// The highest sequence among the entries of `partition` at `time`; 0 when there are none.
/// Numbering from the stored entries keeps positions unique across batches and restarts.
fn last_sequence(
    table: &Table<Key, &'static [u8]>,
    partition: u64,
    time: u64,
) -> Result<u64, StoreError> {
    let last = table
        .range((partition, time, 0)..=(partition, time, u64::MAX))?
        .next_back()
        .transpose()?;
    Ok(last.map_or(0, |(key, _)| key.value().2))
}
