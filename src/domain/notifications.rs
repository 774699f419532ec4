//! Stored notifications for accounts (a deployment, a deploy request, a rejection...), shown in
//! the management API and the dashboard until marked read. Written in the same transaction as
//! the event that causes them.

use redb::{ReadableTable, WriteTransaction};
use serde::Serialize;

use crate::core::clock::Timestamp;
use crate::domain::error::{Error, Missing, Result};
use crate::store::{NOTIFICATIONS, NotificationRow, Store, from_json, next_id, to_json};

#[derive(Debug, Serialize)]
pub struct NotificationView {
    pub id: u64,
    pub kind: String,
    pub endpoint_slug: String,
    pub message: String,
    pub created_at: String,
    pub read: bool,
    pub read_at: Option<String>,
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
        }
    }
}

/// Adds a notification for `account_id` inside `txn`.
pub fn notify(
    txn: &WriteTransaction,
    now: Timestamp,
    account_id: u64,
    kind: &str,
    endpoint_slug: &str,
    message: String,
) -> Result<()> {
    let row = NotificationRow {
        id: next_id(txn, "next_notification_id")?,
        kind: kind.to_string(),
        endpoint_slug: endpoint_slug.to_string(),
        message,
        created_at: now,
        read_at: None,
    };
    txn.open_table(NOTIFICATIONS)?
        .insert((account_id, row.id), to_json(&row)?.as_slice())?;
    Ok(())
}

/// The account's notifications, newest first (only unread ones if `unread_only`).
pub fn list(store: &Store, account_id: u64, unread_only: bool) -> Result<Vec<NotificationView>> {
    let txn = store.read()?;
    let table = txn.open_table(NOTIFICATIONS)?;
    let mut out = Vec::new();
    for entry in table.range((account_id, 0)..=(account_id, u64::MAX))?.rev() {
        let (_, value) = entry?;
        let row: NotificationRow = from_json(value.value())?;
        if !unread_only || row.read_at.is_none() {
            out.push(NotificationView::from(row));
        }
    }
    Ok(out)
}

/// Marks one of the account's notifications read (idempotent).
pub fn mark_read(
    store: &Store,
    now: Timestamp,
    account_id: u64,
    id: u64,
) -> Result<NotificationView> {
    let txn = store.write()?;
    let row = {
        let mut table = txn.open_table(NOTIFICATIONS)?;
        let mut row: NotificationRow = match table.get((account_id, id))? {
            Some(v) => from_json(v.value())?,
            None => return Err(Error::NotFound(Missing::Notification)),
        };
        if row.read_at.is_none() {
            row.read_at = Some(now);
            table.insert((account_id, id), to_json(&row)?.as_slice())?;
        }
        row
    };
    txn.commit()?;
    Ok(row.into())
}
