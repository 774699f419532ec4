//! [`MailRead`], [`MailWrite`] and [`MailStore`] on redb.

use std::ops::Bound;

use redb::ReadableTable;

use super::tx::{RedbWrite, Tables};
use super::{OUTBOX, RedbStore, from_json, to_json};
use crate::core::clock::Timestamp;
use crate::store::mail::{MailRead, MailStore, MailWrite, PURGE_CHUNK};
use crate::store::{MailRow, MailStatus, StoreError};

impl<T: Tables> MailRead for T {
    fn mail(&self, id: u64) -> Result<Option<MailRow>, StoreError> {
        match self.open(OUTBOX)?.get(id)? {
            Some(value) => Ok(Some(from_json(value.value())?)),
            None => Ok(None),
        }
    }

    fn mail_page(&self, before: Option<u64>, limit: usize) -> Result<Vec<MailRow>, StoreError> {
        let table = self.open(OUTBOX)?;
        let mut rows = Vec::with_capacity(limit);
        let upper = before.map_or(Bound::Unbounded, Bound::Excluded);
        for entry in table.range::<u64>((Bound::Unbounded, upper))?.rev() {
            if rows.len() == limit {
                break;
            }
            rows.push(from_json(entry?.1.value())?);
        }
        Ok(rows)
    }

    fn queued_mail(&self, after: u64, limit: usize) -> Result<Vec<MailRow>, StoreError> {
        let table = self.open(OUTBOX)?;
        let mut rows = Vec::new();
        for entry in table.range(after.saturating_add(1)..)? {
            if rows.len() == limit {
                break;
            }
            let row: MailRow = from_json(entry?.1.value())?;
            if row.status == MailStatus::Queued {
                rows.push(row);
            }
        }
        Ok(rows)
    }
}

impl MailWrite for RedbWrite<'_> {
    fn insert_mail(&mut self, row: &MailRow) -> Result<(), StoreError> {
        self.put_mail(row)?;
        self.effects.mail_queued = true;
        Ok(())
    }

    fn put_mail(&mut self, row: &MailRow) -> Result<(), StoreError> {
        self.table(OUTBOX)?
            .insert(row.id, to_json(row)?.as_slice())?;
        Ok(())
    }
}

impl MailStore for RedbStore {
    fn purge_mail(&self, cutoff: Timestamp) -> Result<usize, StoreError> {
        // Found in a snapshot, so the scan holds no write lock; removed a chunk per commit.
        let expired: Vec<u64> = {
            let txn = self.read()?;
            let table = txn.open_table(OUTBOX)?;
            let mut ids = Vec::new();
            for entry in table.iter()? {
                let (key, value) = entry?;
                let row: MailRow = from_json(value.value())?;
                if row.status != MailStatus::Queued && row.created_at < cutoff {
                    ids.push(key.value());
                }
            }
            ids
        };
        for chunk in expired.chunks(PURGE_CHUNK) {
            let txn = self.write()?;
            {
                let mut table = txn.open_table(OUTBOX)?;
                for id in chunk {
                    table.remove(*id)?;
                }
            }
            txn.commit()?;
        }
        Ok(expired.len())
    }
}
