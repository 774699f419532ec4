//! Outgoing e-mail: the outbox, and the worker that delivers it over SMTP.
//!
//! A message is first written to the `OUTBOX` table, inside the same transaction as the change
//! that causes it, so an invitation never exists without its e-mail and vice versa.
//! Delivery happens later, outside any request: after its commit the caller wakes the
//! [`Mailer`], whose thread (`worker`) sends every due message through the `[smtp]` server
//! (`smtp`) and writes the outcome back on the row, so the management API can show a
//! self-hoster why a message did not arrive.
//!
//! A message is `queued` until it is `sent`, or `failed` when the server refuses it for good
//! (5xx) or after [`MAX_ATTEMPTS`] transient failures ([`RETRY_DELAYS`] apart). Without
//! `[smtp]` messages stay queued and are sent once the server is restarted with it. Delivery
//! is at least once: a crash between the server's acceptance and the row update sends the
//! message again after the restart.

use std::sync::Arc;

use lettre::message::Mailbox;
use serde::Serialize;

use crate::core::clock::{SharedClock, Timestamp};
use crate::core::config::SmtpConfig;
use crate::core::cursor::{self, CursorKind, Position};
use crate::domain::error::{Error, Result};
use crate::domain::records::Pagination;
use crate::store::RedbWrite;
use crate::store::{IdKind, MailRow, MailStatus, OUTBOX, RedbStore, WriteTx, from_json, time_key};

pub use crate::workers::mail::worker::{KEEP_FINISHED, MAX_ATTEMPTS, RETRY_DELAYS};
use crate::workers::mail::{smtp, worker};

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

/// Queues `mail` in the outbox as part of `txn`; returns the message id. The mail worker
/// picks it up after the commit (call [`Mailer::wake`] then). A recipient that is not an
/// e-mail address is refused here, so nothing unsendable is stored.
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

/// Handle of the mail worker; cheap to clone.
#[derive(Clone)]
pub struct Mailer {
    store: Arc<RedbStore>,
    clock: SharedClock,
    smtp_configured: bool,
    signal: Arc<worker::Signal>,
}

/// Joins the mail thread after [`Mailer::shutdown`].
pub struct MailThread(std::thread::JoinHandle<()>);

impl MailThread {
    pub fn join(self) {
        if self.0.join().is_err() {
            log::error!("the mail thread panicked");
        }
    }
}

impl Mailer {
    /// Starts the worker thread. With `smtp` absent it sends nothing and only notes, once per
    /// message, that it is waiting for `[smtp]`.
    pub fn start(
        store: Arc<RedbStore>,
        smtp: Option<SmtpConfig>,
        clock: SharedClock,
    ) -> std::io::Result<(Mailer, MailThread)> {
        let signal = Arc::new(worker::Signal::default());
        let smtp_configured = smtp.is_some();
        let sender = smtp.as_ref().map(smtp::Sender::new);
        match &sender {
            Some(sender) => log::info!("mail: sending through {}", sender.describe()),
            None => log::info!("mail: no [smtp] configured; e-mails stay queued in the outbox"),
        }
        let handle = std::thread::Builder::new().name("mail".into()).spawn({
            let (store, clock, signal) = (store.clone(), clock.clone(), signal.clone());
            move || worker::run(&store, clock.as_ref(), sender.as_ref(), &signal)
        })?;
        Ok((
            Mailer {
                store,
                clock,
                smtp_configured,
                signal,
            },
            MailThread(handle),
        ))
    }

    /// Tells the worker that messages were queued; call it after the commit.
    pub fn wake(&self) {
        self.signal.wake();
    }

    /// Asks the worker to stop after the message it is sending, if any; join its
    /// [`MailThread`] to wait. Unsent messages stay queued for the next start.
    pub fn shutdown(&self) {
        self.signal.stop();
    }

    pub fn smtp_configured(&self) -> bool {
        self.smtp_configured
    }

    /// Queues one message on its own (not as part of another change), commits and wakes the
    /// worker; returns the message id.
    pub fn queue(&self, mail: OutgoingMail) -> Result<u64> {
        let txn = self.store.write()?;
        let id = enqueue(&mut RedbWrite::over(&txn), self.clock.now(), mail)?;
        txn.commit()?;
        self.wake();
        Ok(id)
    }

    /// The outbox, newest first, without bodies.
    pub fn list(&self, limit: usize, cursor: Option<&str>) -> Result<MailPage> {
        let upper = match cursor {
            Some(text) => {
                let pos = cursor::parse(CursorKind::Mail, OUTBOX_PARTITION, text)?;
                let id = u64::try_from(pos.tiebreak).map_err(|_| Error::InvalidParameter {
                    name: "cursor",
                    reason: "it is not a cursor returned by this listing".into(),
                })?;
                std::ops::Bound::Excluded(id)
            }
            None => std::ops::Bound::Unbounded,
        };
        let txn = self.store.read()?;
        let table = txn.open_table(OUTBOX)?;
        let mut data = Vec::with_capacity(limit);
        let mut last = None;
        let mut more = false;
        for entry in table
            .range::<u64>((std::ops::Bound::Unbounded, upper))?
            .rev()
        {
            let (_, value) = entry?;
            if data.len() == limit {
                more = true;
                break;
            }
            let row: MailRow = from_json(value.value())?;
            last = Some(Position {
                time: time_key(row.created_at),
                tiebreak: u128::from(row.id),
            });
            data.push(MailView::new(row, false));
        }
        let next_cursor = match (more, last) {
            (true, Some(pos)) => Some(cursor::encode(CursorKind::Mail, OUTBOX_PARTITION, pos)),
            _ => None,
        };
        Ok(MailPage {
            data,
            pagination: Pagination { next_cursor },
            smtp_configured: self.smtp_configured,
        })
    }

    /// One message, body included.
    pub fn get(&self, id: u64) -> Result<MailView> {
        let txn = self.store.read()?;
        let table = txn.open_table(OUTBOX)?;
        let value = table.get(id)?.ok_or(Error::MailNotFound)?;
        Ok(MailView::new(from_json(value.value())?, true))
    }
}
