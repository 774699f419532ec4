//! The outbox.

use serde::{Deserialize, Serialize};

use super::*;

/// Where an outgoing e-mail is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MailStatus {
    /// Waiting for its first or next attempt (or for SMTP to be configured).
    Queued,
    Sent,
    /// Given up: the SMTP server refused it permanently or every attempt failed.
    Failed,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MailRow {
    pub id: u64,
    /// What caused it, e.g. `invitation`, `deployed`, `test`.
    pub kind: String,
    pub to: String,
    pub subject: String,
    pub body: String,
    pub status: MailStatus,
    pub attempts: u32,
    /// The SMTP server's answer (or the connection error) of the last failed attempt.
    pub last_error: Option<String>,
    pub created_at: Timestamp,
    pub next_attempt_at: Timestamp,
    pub sent_at: Option<Timestamp>,
}
