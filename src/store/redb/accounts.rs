//! [`AccountsRead`], [`AccountsWrite`] and [`AccountsStore`] on redb.

use redb::{ReadableTable, ReadableTableMetadata, Table};

use super::tx::{RedbWrite, Tables};
use super::{
    ACCOUNT_EMAILS, ACCOUNTS, NOTIFICATIONS, PASSWORD_RESETS, RedbStore, SESSIONS, TOKENS,
    from_json, to_json,
};
use crate::core::clock::Timestamp;
use crate::store::accounts::{AccountsRead, AccountsStore, AccountsWrite};
use crate::store::{
    AccountRow, NotificationRow, PasswordResetRow, SessionRow, StoreError, TokenRow,
};

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

    fn any_account(&self) -> Result<bool, StoreError> {
        Ok(!self.open(ACCOUNTS)?.is_empty()?)
    }

    fn accounts_page(&self, after: u64, limit: usize) -> Result<Vec<AccountRow>, StoreError> {
        let table = self.open(ACCOUNTS)?;
        let mut out = Vec::new();
        for entry in table.range(after.saturating_add(1)..)?.take(limit) {
            out.push(from_json(entry?.1.value())?);
        }
        Ok(out)
    }

    fn token(&self, hash: &[u8; 32]) -> Result<Option<TokenRow>, StoreError> {
        match self.open(TOKENS)?.get(hash)? {
            Some(value) => Ok(Some(from_json(value.value())?)),
            None => Ok(None),
        }
    }

    fn tokens(&self, account_id: u64) -> Result<Vec<([u8; 32], TokenRow)>, StoreError> {
        let mut out = Vec::new();
        // Tokens are keyed by hash: an account's are found by reading them all (a handful
        // per account on one server).
        for entry in self.open(TOKENS)?.iter()? {
            let (hash, value) = entry?;
            let row: TokenRow = from_json(value.value())?;
            if row.account_id == account_id {
                out.push((*hash.value(), row));
            }
        }
        Ok(out)
    }

    fn session(&self, hash: &[u8; 32]) -> Result<Option<SessionRow>, StoreError> {
        match self.open(SESSIONS)?.get(hash)? {
            Some(value) => Ok(Some(from_json(value.value())?)),
            None => Ok(None),
        }
    }

    fn sessions(&self, account_id: u64) -> Result<Vec<([u8; 32], SessionRow)>, StoreError> {
        let mut out = Vec::new();
        // Keyed by hash, as tokens are: an account's are found by reading them all.
        for entry in self.open(SESSIONS)?.iter()? {
            let (hash, value) = entry?;
            let row: SessionRow = from_json(value.value())?;
            if row.account_id == account_id {
                out.push((*hash.value(), row));
            }
        }
        Ok(out)
    }

    fn password_reset(&self, hash: &[u8; 32]) -> Result<Option<PasswordResetRow>, StoreError> {
        match self.open(PASSWORD_RESETS)?.get(hash)? {
            Some(value) => Ok(Some(from_json(value.value())?)),
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
        self.access_changed()
    }

    fn insert_token(&mut self, hash: &[u8; 32], row: &TokenRow) -> Result<(), StoreError> {
        self.table(TOKENS)?.insert(hash, to_json(row)?.as_slice())?;
        Ok(())
    }

    fn delete_token(&mut self, hash: &[u8; 32]) -> Result<(), StoreError> {
        self.table(TOKENS)?.remove(hash)?;
        Ok(())
    }

    fn insert_session(&mut self, hash: &[u8; 32], row: &SessionRow) -> Result<(), StoreError> {
        self.table(SESSIONS)?
            .insert(hash, to_json(row)?.as_slice())?;
        Ok(())
    }

    fn delete_session(&mut self, hash: &[u8; 32]) -> Result<(), StoreError> {
        self.table(SESSIONS)?.remove(hash)?;
        Ok(())
    }

    fn delete_sessions_of(
        &mut self,
        account_id: u64,
        keep: Option<&[u8; 32]>,
    ) -> Result<(), StoreError> {
        remove_sessions(&mut self.table(SESSIONS)?, |hash, row| {
            row.account_id == account_id && Some(hash) != keep
        })?;
        Ok(())
    }

    fn insert_password_reset(
        &mut self,
        hash: &[u8; 32],
        row: &PasswordResetRow,
    ) -> Result<(), StoreError> {
        self.table(PASSWORD_RESETS)?
            .insert(hash, to_json(row)?.as_slice())?;
        Ok(())
    }

    fn delete_password_resets_of(&mut self, account_id: u64) -> Result<(), StoreError> {
        // At most one link per account is kept (a new one replaces it), so this table stays
        // as small as the number of accounts that asked.
        let mut table = self.table(PASSWORD_RESETS)?;
        let mut picked = Vec::new();
        for entry in table.iter()? {
            let (hash, value) = entry?;
            let row: PasswordResetRow = from_json(value.value())?;
            if row.account_id == account_id {
                picked.push(*hash.value());
            }
        }
        for hash in &picked {
            table.remove(hash)?;
        }
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

impl AccountsStore for RedbStore {
    fn purge_expired_sessions(&self, now: Timestamp) -> Result<usize, StoreError> {
        let txn = self.write()?;
        let purged = remove_sessions(&mut txn.open_table(SESSIONS)?, |_, row| {
            row.expires_at <= now
        })?;
        txn.commit()?;
        Ok(purged)
    }
}

/// Deletes the sessions `ended` picks; returns how many. Sessions are keyed by hash, so this
/// reads them all (one row per logged-in browser).
fn remove_sessions(
    sessions: &mut Table<&'static [u8; 32], &'static [u8]>,
    ended: impl Fn(&[u8; 32], &SessionRow) -> bool,
) -> Result<usize, StoreError> {
    let mut picked = Vec::new();
    for entry in sessions.iter()? {
        let (hash, value) = entry?;
        let row: SessionRow = from_json(value.value())?;
        if ended(hash.value(), &row) {
            picked.push(*hash.value());
        }
    }
    for hash in &picked {
        sessions.remove(hash)?;
    }
    Ok(picked.len())
}
