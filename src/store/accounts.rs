//! Accounts and what hangs off them: personal tokens, dashboard sessions, notifications.

use crate::store::{NotificationRow, StoreError};

pub trait AccountsRead {
    /// The account's notifications, newest first.
    fn notifications(&self, account_id: u64) -> Result<Vec<NotificationRow>, StoreError>;

    fn notification(&self, account_id: u64, id: u64)
    -> Result<Option<NotificationRow>, StoreError>;
}

pub trait AccountsWrite {
    /// Stores a notification of `account_id` (new, or changed, under `row.id`).
    fn put_notification(
        &mut self,
        account_id: u64,
        row: &NotificationRow,
    ) -> Result<(), StoreError>;
}

/// Units of work of their own transaction.
pub trait AccountsStore {}
