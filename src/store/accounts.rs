//! Accounts and what hangs off them: personal tokens, dashboard sessions, notifications.

use crate::store::{AccountRow, NotificationRow, StoreError};

pub trait AccountsRead {
    fn account(&self, id: u64) -> Result<Option<AccountRow>, StoreError>;

    /// The account registered under `email` (already normalised by the caller).
    fn account_by_email(&self, email: &str) -> Result<Option<AccountRow>, StoreError>;

    /// The account's notifications, newest first.
    fn notifications(&self, account_id: u64) -> Result<Vec<NotificationRow>, StoreError>;

    fn notification(&self, account_id: u64, id: u64)
    -> Result<Option<NotificationRow>, StoreError>;
}

pub trait AccountsWrite {
    /// Stores a new account (its id from [`crate::store::IdKind::Account`]) under its e-mail.
    fn insert_account(&mut self, row: &AccountRow) -> Result<(), StoreError>;

    /// Replaces an account's row (its e-mail never changes); reports `access_changed`.
    fn put_account(&mut self, row: &AccountRow) -> Result<(), StoreError>;

    /// Stores a notification of `account_id` (new, or changed, under `row.id`).
    fn put_notification(
        &mut self,
        account_id: u64,
        row: &NotificationRow,
    ) -> Result<(), StoreError>;
}

/// Units of work of their own transaction.
pub trait AccountsStore {}
