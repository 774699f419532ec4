//! Outgoing e-mail: the outbox and its retry policy.
//!
//! A message is first written to the outbox, inside the same transaction as the change that
//! causes it ([`enqueue`]), so an invitation never exists without its e-mail and vice versa.
//! That commit reports `mail_queued`, which wakes the mail worker (`workers::mailer`); it sends
//! every due message through the `[smtp]` server and writes the outcome back on the row, so
//! the management API ([`list`], [`get`]) can show a self-hoster why a message did not
//! arrive.
//!
//! A message is `queued` until it is `sent`, or `failed` when the server refuses it for good
//! (5xx) or after [`MAX_ATTEMPTS`] transient failures ([`RETRY_DELAYS`] apart). Without
//! `[smtp]` messages stay queued and are sent once the server is restarted with it. Delivery
//! is at least once: a crash between the server's acceptance and the row update sends the
//! message again after the restart. Sent and failed messages are kept [`KEEP_FINISHED`].

use std::time::Duration;

use lettre::message::Mailbox;
use serde::Serialize;

use crate::core::clock::Timestamp;
use crate::core::cursor::{self, CursorKind, Position};
use crate::domain::error::{Error, Result};
use crate::domain::handles::Handles;
use crate::domain::records::Pagination;
use crate::store::{IdKind, MailRow, MailStatus, Store, WriteTx, time_key};

/// Waits between attempts after a transient failure: 1 min, 5 min, 30 min, 2 h, 6 h.
pub const RETRY_DELAYS: [Duration; 5] = [
    Duration::from_secs(60),
    Duration::from_secs(300),
    Duration::from_secs(1800),
    Duration::from_secs(7200),
    Duration::from_secs(21_600),
];
/// Attempts in all before a message is `failed`.
pub const MAX_ATTEMPTS: u32 = RETRY_DELAYS.len() as u32 + 1;
/// How long sent and failed messages are kept (by `created_at`); queued ones are kept.
pub const KEEP_FINISHED: Duration = Duration::from_secs(30 * 86_400);

pub const LIST_LIMIT_DEFAULT: usize = 20;
pub const LIST_LIMIT_MAX: usize = 100;

/// The one outbox is one pagination partition.
const OUTBOX_PARTITION: u64 = 0;

/// A message to send: plain text, one recipient.
#[derive(Clone, Debug)]
pub struct OutgoingMail {
    pub kind: &'static str,
    pub to: String,
    pub subject: String,
    pub body: String,
}

/// Queues `mail` in the outbox as part of the change being written in `tx`; returns the
/// message id. The commit wakes the mail worker. A recipient that is not an e-mail address is
/// refused here, so nothing unsendable is stored.
pub fn enqueue(tx: &mut dyn WriteTx, now: Timestamp, mail: OutgoingMail) -> Result<u64> {
    let to = parse_recipient(&mail.to)?.to_string();
    let id = tx.next_id(IdKind::Mail)?;
    let row = MailRow {
        id,
        kind: mail.kind.to_string(),
        to,
        subject: mail.subject,
        body: mail.body,
        status: MailStatus::Queued,
        attempts: 0,
        last_error: None,
        created_at: now,
        next_attempt_at: now,
        sent_at: None,
    };
    tx.insert_mail(&row)?;
    Ok(id)
}

/// `addr@example.com` or `Name <addr@example.com>`; 400 `invalid_request` otherwise.
pub fn parse_recipient(to: &str) -> Result<Mailbox> {
    to.parse().map_err(|_| {
        Error::InvalidRequest(format!("`{}` is not a valid e-mail address.", to.trim()))
    })
}

/// The message of the "send test e-mail" call: says which server sent it.
pub fn test_mail(to: &str, server_url: &str) -> OutgoingMail {
    OutgoingMail {
        kind: "test",
        to: to.to_string(),
        subject: "intake test e-mail".into(),
        body: format!(
            "This is a test e-mail from the intake server at {server_url}.\n\n\
             It was sent through the SMTP server in the [smtp] settings of that\n\
             server. If you can read it, e-mail from intake (invitations,\n\
             deployment notices) reaches this address.\n"
        ),
    }
}

/// A message as the management API shows it. `body` only in the single-message view;
/// `next_attempt_at` only while the message is queued.
#[derive(Debug, Serialize)]
pub struct MailView {
    pub id: u64,
    pub kind: String,
    pub to: String,
    pub subject: String,
    pub status: MailStatus,
    pub attempts: u32,
    pub last_error: Option<String>,
    pub created_at: String,
    pub next_attempt_at: Option<String>,
    pub sent_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
}

impl MailView {
    fn new(row: MailRow, with_body: bool) -> MailView {
        MailView {
            id: row.id,
            kind: row.kind,
            to: row.to,
            subject: row.subject,
            status: row.status,
            attempts: row.attempts,
            last_error: row.last_error,
            created_at: row.created_at.to_rfc3339(),
            next_attempt_at: (row.status == MailStatus::Queued)
                .then(|| row.next_attempt_at.to_rfc3339()),
            sent_at: row.sent_at.map(Timestamp::to_rfc3339),
            body: with_body.then_some(row.body),
        }
    }
}

/// One page of the outbox, newest first.
#[derive(Debug, Serialize)]
pub struct MailPage {
    pub data: Vec<MailView>,
    pub pagination: Pagination,
    /// Without `[smtp]` nothing is sent: queued messages wait for it.
    pub smtp_configured: bool,
}

/// Queues one message on its own (not as part of another change); returns its id.
pub fn queue(handles: &Handles, mail: OutgoingMail) -> Result<u64> {
    let now = handles.now();
    handles.write(|tx| enqueue(tx, now, mail.clone()))
}

/// The outbox, newest first, without bodies. `smtp_configured` is shown with it: without
/// `[smtp]` nothing is sent.
pub fn list(
    store: &dyn Store,
    limit: usize,
    cursor: Option<&str>,
    smtp_configured: bool,
) -> Result<MailPage> {
    let before = match cursor {
        Some(text) => {
            let pos = cursor::parse(CursorKind::Mail, OUTBOX_PARTITION, text)?;
            let id = u64::try_from(pos.tiebreak).map_err(|_| Error::InvalidParameter {
                name: "cursor",
                reason: "it is not a cursor returned by this listing".into(),
            })?;
            Some(id)
        }
        None => None,
    };
    let mut rows = store.read()?.mail_page(before, limit.saturating_add(1))?;
    let more = rows.len() > limit;
    rows.truncate(limit);
    let next_cursor = match (more, rows.last()) {
        (true, Some(row)) => Some(cursor::encode(
            CursorKind::Mail,
            OUTBOX_PARTITION,
            Position {
                time: time_key(row.created_at),
                tiebreak: u128::from(row.id),
            },
        )),
        _ => None,
    };
    Ok(MailPage {
        data: rows
            .into_iter()
            .map(|row| MailView::new(row, false))
            .collect(),
        pagination: Pagination { next_cursor },
        smtp_configured,
    })
}

/// One message, body included.
pub fn get(store: &dyn Store, id: u64) -> Result<MailView> {
    let row = store.read()?.mail(id)?.ok_or(Error::MailNotFound)?;
    Ok(MailView::new(row, true))
}
