//! Stored notifications for accounts (a deployment, a deploy request, a rejection...), shown in
//! the management API and the dashboard until marked read. Written in the same transaction as
//! the event that causes them; settling what one announces (a deploy request approved,
//! rejected or withdrawn) marks it read and resolved in the commit that settles it.

use serde::Serialize;

use crate::core::clock::Timestamp;
use crate::domain::error::{Error, Missing, Result};
use crate::domain::handles::Handles;
use crate::store::{IdKind, NotificationRow, ResolutionRow, Store, WriteTx};

#[derive(Debug, Serialize)]
pub struct NotificationView {
    pub id: u64,
    pub kind: String,
    pub endpoint_slug: String,
    pub message: String,
    pub created_at: String,
    pub read: bool,
    pub read_at: Option<String>,
    /// How what it announced was settled (`approved`, `rejected`, `withdrawn`, `deployed`,
    /// `requested_again`), or `None` while it is open.
    pub resolution: Option<String>,
    pub resolved_at: Option<String>,
}

impl From<NotificationRow> for NotificationView {
    fn from(row: NotificationRow) -> Self {
        NotificationView {
            id: row.id,
            kind: row.kind,
            endpoint_slug: row.endpoint_slug,
            message: row.message,
            created_at: row.created_at.to_rfc3339(),
            read: row.read_at.is_some(),
            read_at: row.read_at.map(Timestamp::to_rfc3339),
            resolved_at: row.resolution.as_ref().map(|r| r.at.to_rfc3339()),
            resolution: row.resolution.map(|r| r.outcome),
        }
    }
}

/// The kinds of the notifications a deploy request brings: the owner's, and the requester's
/// when the owner rejects it.
pub const DEPLOY_REQUESTED: &str = "deploy_requested";
pub const DEPLOY_REJECTED: &str = "deploy_request_rejected";

/// The dashboard page a notification of `kind` announces, as a path of this server: where
/// its link in the dashboard leads, and the link of the e-mail sent with it.
pub fn page(kind: &str, endpoint_slug: &str) -> String {
    let endpoint = format!("/dashboard/endpoints/{endpoint_slug}");
    match kind {
        DEPLOY_REQUESTED | DEPLOY_REJECTED => format!("{endpoint}#deploy-title"),
        "endpoint_deployed" => format!("{endpoint}/production"),
        "invitation_accepted" => format!("{endpoint}/collaborators"),
        "webhook_disabled" => format!("{endpoint}/webhooks"),
        _ => endpoint,
    }
}

/// Adds a notification for `account_id` to the change being written in `tx`.
pub fn notify(
    tx: &mut dyn WriteTx,
    now: Timestamp,
    account_id: u64,
    kind: &str,
    endpoint_slug: &str,
    message: String,
) -> Result<()> {
    let row = NotificationRow {
        id: tx.next_id(IdKind::Notification)?,
        kind: kind.to_string(),
        endpoint_slug: endpoint_slug.to_string(),
        message,
        created_at: now,
        read_at: None,
        resolution: None,
    };
    tx.put_notification(account_id, &row)?;
    Ok(())
}

/// Marks the account's open notifications of `kind` about `endpoint_slug` read and resolved
/// with `outcome`, inside `tx`: what they announced is settled (a slug is never given again,
/// so they are about this endpoint; at most one deploy request is pending at a time, so they
/// are about the request settled).
pub fn resolve(
    tx: &mut dyn WriteTx,
    now: Timestamp,
    account_id: u64,
    kind: &str,
    endpoint_slug: &str,
    outcome: &str,
) -> Result<()> {
    for mut row in tx.notifications(account_id)? {
        if row.kind == kind && row.endpoint_slug == endpoint_slug && row.resolution.is_none() {
            row.read_at = row.read_at.or(Some(now));
            row.resolution = Some(ResolutionRow {
                outcome: outcome.to_string(),
                at: now,
            });
            tx.put_notification(account_id, &row)?;
        }
    }
    Ok(())
}

/// The account's notifications, newest first (only unread ones if `unread_only`).
pub fn list(
    store: &dyn Store,
    account_id: u64,
    unread_only: bool,
) -> Result<Vec<NotificationView>> {
    Ok(store
        .read()?
        .notifications(account_id)?
        .into_iter()
        .filter(|row| !unread_only || row.read_at.is_none())
        .map(NotificationView::from)
        .collect())
}

/// Marks one of the account's notifications read (idempotent).
pub fn mark_read(handles: &Handles, account_id: u64, id: u64) -> Result<NotificationView> {
    let now = handles.now();
    let row = handles.write(|tx| {
        let mut row = tx
            .notification(account_id, id)?
            .ok_or(Error::NotFound(Missing::Notification))?;
        if row.read_at.is_none() {
            row.read_at = Some(now);
            tx.put_notification(account_id, &row)?;
        }
        Ok(row)
    })?;
    Ok(row.into())
}

/// Marks every unread notification of the account read, in one write; returns how many.
pub fn mark_all_read(handles: &Handles, account_id: u64) -> Result<usize> {
    let now = handles.now();
    handles.write(|tx| {
        let mut marked = 0;
        for mut row in tx.notifications(account_id)? {
            if row.read_at.is_none() {
                row.read_at = Some(now);
                tx.put_notification(account_id, &row)?;
                marked += 1;
            }
        }
        Ok(marked)
    })
}
