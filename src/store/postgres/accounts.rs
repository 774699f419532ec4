//! [`AccountsRead`], [`AccountsWrite`] and [`AccountsStore`] on PostgreSQL: `accounts`,
//! `tokens`, `sessions`, `password_resets` (migration 0007) and `notifications`.

use super::endpoints::access_changed;
use super::{Patience, PgStore, PgTx, big, count, micros, row_json, to_json};
use crate::core::clock::Timestamp;
use crate::store::accounts::{AccountsRead, AccountsStore, AccountsWrite};
use crate::store::{
    AccountRow, NotificationRow, PasswordResetRow, SessionRow, StoreError, TokenRow,
};

impl AccountsRead for PgTx<'_> {
    fn account(&self, id: u64) -> Result<Option<AccountRow>, StoreError> {
        self.query_opt("SELECT data FROM accounts WHERE id = $1", &[&big(id)])?
            .map(|row| row_json(&row, 0))
            .transpose()
    }

    fn account_by_email(&self, email: &str) -> Result<Option<AccountRow>, StoreError> {
        self.query_opt("SELECT data FROM accounts WHERE email = $1", &[&email])?
            .map(|row| row_json(&row, 0))
            .transpose()
    }

    fn any_account(&self) -> Result<bool, StoreError> {
        Ok(self
            .query_opt("SELECT 1 FROM accounts LIMIT 1", &[])?
            .is_some())
    }

    fn accounts_page(&self, after: u64, limit: usize) -> Result<Vec<AccountRow>, StoreError> {
        self.query(
            "SELECT data FROM accounts WHERE id > $1 ORDER BY id LIMIT $2",
            &[&big(after), &count(limit)],
        )?
        .iter()
        .map(|row| row_json(row, 0))
        .collect()
    }

    fn token(&self, hash: &[u8; 32]) -> Result<Option<TokenRow>, StoreError> {
        self.query_opt("SELECT data FROM tokens WHERE hash = $1", &[&&hash[..]])?
            .map(|row| row_json(&row, 0))
            .transpose()
    }

    fn tokens(&self, account_id: u64) -> Result<Vec<([u8; 32], TokenRow)>, StoreError> {
        self.query(
            "SELECT hash, data FROM tokens WHERE account_id = $1 ORDER BY hash",
            &[&big(account_id)],
        )?
        .iter()
        .map(|row| Ok((hash_of(row)?, row_json(row, 1)?)))
        .collect()
    }

    fn session(&self, hash: &[u8; 32]) -> Result<Option<SessionRow>, StoreError> {
        self.query_opt("SELECT data FROM sessions WHERE hash = $1", &[&&hash[..]])?
            .map(|row| row_json(&row, 0))
            .transpose()
    }

    fn sessions(&self, account_id: u64) -> Result<Vec<([u8; 32], SessionRow)>, StoreError> {
        self.query(
            "SELECT hash, data FROM sessions WHERE account_id = $1",
            &[&big(account_id)],
        )?
        .iter()
        .map(|row| Ok((hash_of(row)?, row_json(row, 1)?)))
        .collect()
    }

    fn password_reset(&self, hash: &[u8; 32]) -> Result<Option<PasswordResetRow>, StoreError> {
        self.query_opt(
            "SELECT data FROM password_resets WHERE hash = $1",
            &[&&hash[..]],
        )?
        .map(|row| row_json(&row, 0))
        .transpose()
    }

    fn notifications(&self, account_id: u64) -> Result<Vec<NotificationRow>, StoreError> {
        self.query(
            "SELECT data FROM notifications WHERE account_id = $1 ORDER BY id DESC",
            &[&big(account_id)],
        )?
        .iter()
        .map(|row| row_json(row, 0))
        .collect()
    }

    fn notification(
        &self,
        account_id: u64,
        id: u64,
    ) -> Result<Option<NotificationRow>, StoreError> {
        self.query_opt(
            "SELECT data FROM notifications WHERE account_id = $1 AND id = $2",
            &[&big(account_id), &big(id)],
        )?
        .map(|row| row_json(&row, 0))
        .transpose()
    }
}

/// The SHA-256 a token or session is kept under: the row's first column.
fn hash_of(row: &tokio_postgres::Row) -> Result<[u8; 32], StoreError> {
    let hash: &[u8] = row.try_get(0)?;
    <[u8; 32]>::try_from(hash)
        .map_err(|_| StoreError::Corrupt(format!("a secret's hash of {} bytes", hash.len())))
}

impl AccountsWrite for PgTx<'_> {
    fn insert_account(&mut self, row: &AccountRow) -> Result<(), StoreError> {
        // A new account changes access as a put does on redb (insert is a put there).
        self.execute(
            "INSERT INTO accounts (id, email, data) VALUES ($1, $2, $3)",
            &[&big(row.id), &row.email, &to_json(row)?],
        )?;
        access_changed(self)
    }

    fn put_account(&mut self, row: &AccountRow) -> Result<(), StoreError> {
        // The e-mail is the one the account was inserted under (it never changes).
        self.execute(
            "INSERT INTO accounts (id, email, data) VALUES ($1, $2, $3)
             ON CONFLICT (id) DO UPDATE SET data = EXCLUDED.data",
            &[&big(row.id), &row.email, &to_json(row)?],
        )?;
        access_changed(self)
    }

    fn insert_token(&mut self, hash: &[u8; 32], row: &TokenRow) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO tokens (hash, account_id, data) VALUES ($1, $2, $3)",
            &[&&hash[..], &big(row.account_id), &to_json(row)?],
        )?;
        Ok(())
    }

    fn delete_token(&mut self, hash: &[u8; 32]) -> Result<(), StoreError> {
        self.execute("DELETE FROM tokens WHERE hash = $1", &[&&hash[..]])?;
        Ok(())
    }

    fn insert_session(&mut self, hash: &[u8; 32], row: &SessionRow) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO sessions (hash, account_id, expires_at, data) VALUES ($1, $2, $3, $4)",
            &[
                &&hash[..],
                &big(row.account_id),
                &micros(row.expires_at),
                &to_json(row)?,
            ],
        )?;
        Ok(())
    }

    fn delete_session(&mut self, hash: &[u8; 32]) -> Result<(), StoreError> {
        self.execute("DELETE FROM sessions WHERE hash = $1", &[&&hash[..]])?;
        Ok(())
    }

    fn delete_sessions_of(
        &mut self,
        account_id: u64,
        keep: Option<&[u8; 32]>,
    ) -> Result<(), StoreError> {
        // Without `keep` the parameter is NULL, which every hash is distinct from.
        self.execute(
            "DELETE FROM sessions WHERE account_id = $1 AND hash IS DISTINCT FROM $2",
            &[&big(account_id), &keep.map(|hash| &hash[..])],
        )?;
        Ok(())
    }

    fn insert_password_reset(
        &mut self,
        hash: &[u8; 32],
        row: &PasswordResetRow,
    ) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO password_resets (hash, account_id, data) VALUES ($1, $2, $3)",
            &[&&hash[..], &big(row.account_id), &to_json(row)?],
        )?;
        Ok(())
    }

    fn delete_password_resets_of(&mut self, account_id: u64) -> Result<(), StoreError> {
        self.execute(
            "DELETE FROM password_resets WHERE account_id = $1",
            &[&big(account_id)],
        )?;
        Ok(())
    }

    fn put_notification(
        &mut self,
        account_id: u64,
        row: &NotificationRow,
    ) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO notifications (account_id, id, data) VALUES ($1, $2, $3)
             ON CONFLICT (account_id, id) DO UPDATE SET data = EXCLUDED.data",
            &[&big(account_id), &big(row.id), &to_json(row)?],
        )?;
        Ok(())
    }
}

impl AccountsStore for PgStore {
    fn purge_expired_sessions(&self, now: Timestamp) -> Result<usize, StoreError> {
        let (purged, _) = self.write_unit_within(Patience::Maintenance, |tx| {
            tx.execute(
                "DELETE FROM sessions WHERE expires_at <= $1",
                &[&micros(now)],
            )
        })?;
        Ok(usize::try_from(purged).unwrap_or(usize::MAX))
    }
}
