//! [`ChangesStore`] on redb: `CHANGES`, and its two counters in `META`.

use redb::{Durability, ReadTransaction, ReadableTable, ReadableTableMetadata};

use super::{
    CHANGES, CHANGES_TRIMMED_UPTO, LAST_CHANGE_SEQ, META, RECORDS, RedbStore, read_counter,
    write_counter,
};
use crate::store::changes::{ChangeEntry, ChangeLogBounds, ChangedRecord, ChangesStore, Replay};
use crate::store::{Partition, StoreError};

impl ChangesStore for RedbStore {
    fn change_log_bounds(&self) -> Result<ChangeLogBounds, StoreError> {
        let meta = self.read()?.open_table(META)?;
        Ok(ChangeLogBounds {
            last: read_counter(&meta, LAST_CHANGE_SEQ)?,
            trimmed_upto: read_counter(&meta, CHANGES_TRIMMED_UPTO)?,
        })
    }

    fn changes_after(&self, position: u64, limit: usize) -> Result<Vec<ChangeEntry>, StoreError> {
        let txn = self.read()?;
        entries_after(&txn, position, limit)
    }

    fn changed_records_after(
        &self,
        position: u64,
        limit: usize,
    ) -> Result<Vec<ChangedRecord>, StoreError> {
        let txn = self.read()?;
        let entries = entries_after(&txn, position, limit)?;
        let records = txn.open_table(RECORDS)?;
        let mut changed = Vec::with_capacity(entries.len());
        let mut scratch = Vec::new();
        for entry in entries {
            let payload = match records.get((entry.partition.raw(), entry.record_id))? {
                Some(value) => Some(self.codec.decode(value.value(), &mut scratch)?.1.to_vec()),
                None => None,
            };
            changed.push(ChangedRecord { entry, payload });
        }
        Ok(changed)
    }

    fn replay(&self, to: &mut dyn Replay) -> Result<(), StoreError> {
        let txn = self.read()?;
        let position = read_counter(&txn.open_table(META)?, LAST_CHANGE_SEQ)?;
        let records = txn.open_table(RECORDS)?;
        to.begin(records.len()?, position);
        let mut scratch = Vec::new();
        for entry in records.iter()? {
            let (key, value) = entry?;
            let (partition, record_id) = key.value();
            let (_, payload) = self.codec.decode(value.value(), &mut scratch)?;
            if to
                .record(Partition::from_raw(partition), record_id, payload)
                .is_break()
            {
                break;
            }
        }
        Ok(())
    }

    fn trim_changes(&self, upto: u64, limit: usize) -> Result<usize, StoreError> {
        let mut txn = self.write()?;
        // Not durable on its own (no fsync while it holds the write lock): the next durable
        // commit makes it so, and a crash before one takes the removals back together with
        // the mark, which the next trim removes again.
        txn.set_durability(Durability::None)
            .map_err(|err| StoreError::Backend(err.into()))?;
        let removed = {
            let mut changes = txn.open_table(CHANGES)?;
            let doomed: Vec<u64> = changes
                .range(..=upto)?
                .take(limit)
                .map(|e| e.map(|(k, _)| k.value()))
                .collect::<Result<_, _>>()?;
            for seq in &doomed {
                changes.remove(*seq)?;
            }
            if let Some(last) = doomed.last() {
                write_counter(&txn, CHANGES_TRIMMED_UPTO, *last)?;
            }
            doomed.len()
        };
        txn.commit()?;
        Ok(removed)
    }
}

/// The entries after `position`, oldest first, at most `limit`.
fn entries_after(
    txn: &ReadTransaction,
    position: u64,
    limit: usize,
) -> Result<Vec<ChangeEntry>, StoreError> {
    let mut entries = Vec::new();
    for entry in txn
        .open_table(CHANGES)?
        .range(position.saturating_add(1)..)?
        .take(limit)
    {
        let (seq, change) = entry?;
        let (partition, record_id) = change.value();
        entries.push(ChangeEntry {
            seq: seq.value(),
            partition: Partition::from_raw(partition),
            record_id,
        });
    }
    Ok(entries)
}
