//! The outbox of e-mails.

use crate::store::{MailRow, StoreError};

pub trait MailRead {}

pub trait MailWrite {
    /// Queues a new message (its id from [`crate::store::IdKind::Mail`]); the commit reports
    /// `mail_queued`.
    fn insert_mail(&mut self, row: &MailRow) -> Result<(), StoreError>;
}

/// Units of work of their own transaction.
pub trait MailStore {}
