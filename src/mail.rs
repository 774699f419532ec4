//! Outgoing e-mail: the outbox.
//!
//! A message is first written to the `OUTBOX` table, inside the same transaction as the change
//! that causes it, so an invitation never exists without its e-mail and vice versa.
//! Delivery happens later, outside any request.

use redb::WriteTransaction;

use crate::clock::Timestamp;
use crate::error::Result;
use crate::storage::{MailRow, MailStatus, OUTBOX, next_id, to_json};

/// A message to send: plain text, one recipient.
#[derive(Clone, Debug)]
pub struct OutgoingMail {
    pub kind: &'static str,
    pub to: String,
    pub subject: String,
    pub body: String,
}

/// Queues `mail` in the outbox as part of `txn`; returns the message id. The mail worker
/// picks it up after the commit.
pub fn enqueue(txn: &WriteTransaction, now: Timestamp, mail: OutgoingMail) -> Result<u64> {
    let id = next_id(txn, "next_mail_id")?;
    let row = MailRow {
        id,
        kind: mail.kind.to_string(),
        to: mail.to,
        subject: mail.subject,
        body: mail.body,
        status: MailStatus::Queued,
        attempts: 0,
        last_error: None,
        created_at: now,
        next_attempt_at: now,
        sent_at: None,
    };
    txn.open_table(OUTBOX)?
        .insert(id, to_json(&row)?.as_slice())?;
    Ok(id)
}
