//! The audit log: every change to an endpoint (who, when, what), appended in the same
//! transaction as the change itself, and listed newest first to the endpoint's owner.

use redb::WriteTransaction;
use serde::Serialize;

use crate::core::clock::Timestamp;
use crate::domain::error::Result;
use crate::store::{AUDIT, AccountRow, AuditRow, Store, from_json, next_id, to_json};

/// An audit entry as the management API shows it.
#[derive(Debug, Serialize)]
pub struct AuditView {
    pub id: u64,
    pub time: String,
    pub actor: Actor,
    pub action: String,
    pub details: serde_json::Value,
}

#[derive(Debug, Serialize)]
pub struct Actor {
    pub id: u64,
    pub email: String,
}

/// Appends an entry for `endpoint_id` inside `txn`.
pub fn record(
    txn: &WriteTransaction,
    now: Timestamp,
    endpoint_id: u64,
    actor: &AccountRow,
    action: &str,
    details: serde_json::Value,
) -> Result<()> {
    let row = AuditRow {
        id: next_id(txn, "next_audit_id")?,
        time: now,
        actor_id: actor.id,
        actor_email: actor.email.clone(),
        action: action.to_string(),
        details,
    };
    txn.open_table(AUDIT)?
        .insert((endpoint_id, row.id), to_json(&row)?.as_slice())?;
    Ok(())
}

/// The endpoint's entries, newest first: at most `limit` older than `before` (an entry id).
pub fn list(
    store: &Store,
    endpoint_id: u64,
    limit: usize,
    before: Option<u64>,
) -> Result<Vec<AuditView>> {
    let txn = store.read()?;
    let table = txn.open_table(AUDIT)?;
    let upper = before.unwrap_or(u64::MAX);
    let mut out = Vec::new();
    for entry in table.range((endpoint_id, 0)..(endpoint_id, upper))?.rev() {
        if out.len() == limit {
            break;
        }
        let (_, value) = entry?;
        let row: AuditRow = from_json(value.value())?;
        out.push(AuditView {
            id: row.id,
            time: row.time.to_rfc3339(),
            actor: Actor {
                id: row.actor_id,
                email: row.actor_email,
            },
            action: row.action,
            details: row.details,
        });
    }
    Ok(out)
}
