//! The outbox of e-mails.

use crate::core::clock::Timestamp;
use crate::store::{MailRow, StoreError};

pub trait MailRead {
    fn mail(&self, id: u64) -> Result<Option<MailRow>, StoreError>;

    /// Messages with ids below `before` (all when `None`), newest first, at most `limit`.
    fn mail_page(&self, before: Option<u64>, limit: usize) -> Result<Vec<MailRow>, StoreError>;

    /// Queued messages with ids above `after`, oldest first, at most `limit`.
    fn queued_mail(&self, after: u64, limit: usize) -> Result<Vec<MailRow>, StoreError>;
}

pub trait MailWrite {
    /// Queues a new message (its id from [`crate::store::IdKind::Mail`]); the commit reports
    /// `mail_queued`.
    fn insert_mail(&mut self, row: &MailRow) -> Result<(), StoreError>;

    /// Replaces a message's row (the outcome of an attempt, a note on it).
    fn put_mail(&mut self, row: &MailRow) -> Result<(), StoreError>;
}

/// Units of work of their own transaction.
/// Most messages one purge transaction removes.
pub const PURGE_CHUNK: usize = 1000;

pub trait MailStore {
    /// Deletes the sent and failed messages created before `cutoff`; returns how many.
    /// Queued messages are kept, however old.
    fn purge_mail(&self, cutoff: Timestamp) -> Result<usize, StoreError>;
}
