//! [`AccountsRead`] and [`AccountsWrite`] on redb.

use redb::ReadableTable;

use super::tx::{RedbWrite, Tables};
use super::{ACCOUNT_EMAILS, ACCOUNTS, NOTIFICATIONS, from_json, to_json};
use crate::store::accounts::{AccountsRead, AccountsWrite};
use crate::store::{AccountRow, NotificationRow, StoreError};

impl<T: Tables> AccountsRead for T {
    fn account(&self, id: u64) -> Result<Option<AccountRow>, StoreError> {
        match self.open(ACCOUNTS)?.get(id)? {
            Some(value) => Ok(Some(from_json(value.value())?)),
            None => Ok(None),
        }
    }

    fn account_by_email(&self, email: &str) -> Result<Option<AccountRow>, StoreError> {
        match self.open(ACCOUNT_EMAILS)?.get(email)? {
            Some(id) => self.account(id.value()),
            None => Ok(None),
        }
    }

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
    fn insert_account(&mut self, row: &AccountRow) -> Result<(), StoreError> {
        self.put_account(row)?;
        self.table(ACCOUNT_EMAILS)?
            .insert(row.email.as_str(), row.id)?;
        Ok(())
    }

    fn put_account(&mut self, row: &AccountRow) -> Result<(), StoreError> {
        self.table(ACCOUNTS)?
            .insert(row.id, to_json(row)?.as_slice())?;
        self.effects.access_changed = true;
        Ok(())
    }

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
