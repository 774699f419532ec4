//! [`AccountsRead`] and [`AccountsWrite`] on redb.

use redb::ReadableTable;

use super::tx::{RedbWrite, Tables};
use super::{NOTIFICATIONS, from_json, to_json};
use crate::store::accounts::{AccountsRead, AccountsWrite};
use crate::store::{NotificationRow, StoreError};

impl<T: Tables> AccountsRead for T {
    fn notifications(&self, account_id: u64) -> Result<Vec<NotificationRow>, StoreError> {
        let table = self.open(NOTIFICATIONS)?;
        let mut out = Vec::new();
        for entry in table.range((account_id, 0)..=(account_id, u64::MAX))?.rev() {
            out.push(from_json(entry?.1.value())?);
        }
        Ok(out)
    }

    fn notification(
        &self,
        account_id: u64,
        id: u64,
    ) -> Result<Option<NotificationRow>, StoreError> {
        match self.open(NOTIFICATIONS)?.get((account_id, id))? {
            Some(value) => Ok(Some(from_json(value.value())?)),
            None => Ok(None),
        }
    }
}

impl AccountsWrite for RedbWrite<'_> {
    fn put_notification(
        &mut self,
        account_id: u64,
        row: &NotificationRow,
    ) -> Result<(), StoreError> {
        self.table(NOTIFICATIONS)?
            .insert((account_id, row.id), to_json(row)?.as_slice())?;
        Ok(())
    }
}

impl crate::store::accounts::AccountsStore for super::RedbStore {}
