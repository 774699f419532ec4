//! Accounts and what hangs off them: personal tokens, dashboard sessions, notifications.
//!
//! Tokens and sessions are keyed by the SHA-256 of their secret (`crypto::secret_hash`): a
//! store never sees the secret itself.

use crate::core::clock::Timestamp;
use crate::store::{
    AccountRow, NotificationRow, PasswordResetRow, SessionRow, StoreError, TokenRow,
};

pub trait AccountsRead {
    fn account(&self, id: u64) -> Result<Option<AccountRow>, StoreError>;

    /// The account registered under `email` (already normalised by the caller).
    fn account_by_email(&self, email: &str) -> Result<Option<AccountRow>, StoreError>;

    /// Whether any account exists (the owner is the first one).
    fn any_account(&self) -> Result<bool, StoreError>;

    /// Accounts with ids above `after`, oldest first, at most `limit`.
    fn accounts_page(&self, after: u64, limit: usize) -> Result<Vec<AccountRow>, StoreError>;

    /// The personal token whose secret hashes to `hash`.
    fn token(&self, hash: &[u8; 32]) -> Result<Option<TokenRow>, StoreError>;

    /// The account's tokens with the hashes they are kept under, in no particular order.
    fn tokens(&self, account_id: u64) -> Result<Vec<([u8; 32], TokenRow)>, StoreError>;

    /// The dashboard session whose cookie hashes to `hash` (expired ones too, until purged).
    fn session(&self, hash: &[u8; 32]) -> Result<Option<SessionRow>, StoreError>;

    /// The account's sessions with the hashes they are kept under (expired ones too, until
    /// purged), in no particular order.
    fn sessions(&self, account_id: u64) -> Result<Vec<([u8; 32], SessionRow)>, StoreError>;

    /// The password reset link whose token hashes to `hash` (expired ones too).
    fn password_reset(&self, hash: &[u8; 32]) -> Result<Option<PasswordResetRow>, StoreError>;

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

    /// Stores a new personal token under the hash of its secret.
    fn insert_token(&mut self, hash: &[u8; 32], row: &TokenRow) -> Result<(), StoreError>;

    /// Deletes a personal token; it stops working with the commit.
    fn delete_token(&mut self, hash: &[u8; 32]) -> Result<(), StoreError>;

    /// Stores a new dashboard session under the hash of its cookie.
    fn insert_session(&mut self, hash: &[u8; 32], row: &SessionRow) -> Result<(), StoreError>;

    /// Ends a session; ending one that does not exist is no change.
    fn delete_session(&mut self, hash: &[u8; 32]) -> Result<(), StoreError>;

    /// Ends every session of `account_id` except the one under `keep`.
    fn delete_sessions_of(
        &mut self,
        account_id: u64,
        keep: Option<&[u8; 32]>,
    ) -> Result<(), StoreError>;

    /// Stores a password reset link under the hash of its token.
    fn insert_password_reset(
        &mut self,
        hash: &[u8; 32],
        row: &PasswordResetRow,
    ) -> Result<(), StoreError>;

    /// Deletes every password reset link of `account_id`.
    fn delete_password_resets_of(&mut self, account_id: u64) -> Result<(), StoreError>;

    /// Stores a notification of `account_id` (new, or changed, under `row.id`).
    fn put_notification(
        &mut self,
        account_id: u64,
        row: &NotificationRow,
    ) -> Result<(), StoreError>;
}

/// Units of work of their own transaction.
pub trait AccountsStore {
    /// Deletes the sessions expired at `now`; returns how many.
    fn purge_expired_sessions(&self, now: Timestamp) -> Result<usize, StoreError>;
}
