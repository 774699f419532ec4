//! The audit log: every change to an endpoint (who, when, what), appended in the same
//! transaction as the change itself, and listed newest first to the endpoint's owner.

use serde::Serialize;

use crate::core::clock::Timestamp;
use crate::domain::error::Result;
use crate::store::{AccountRow, AuditRow, IdKind, Store, WriteTx};

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

/// Appends an entry for `endpoint_id` to the change being written in `tx`.
pub fn record(
    tx: &mut dyn WriteTx,
    now: Timestamp,
    endpoint_id: u64,
    actor: &AccountRow,
    action: &str,
    details: serde_json::Value,
) -> Result<()> {
    let row = AuditRow {
        id: tx.next_id(IdKind::Audit)?,
        time: now,
        actor_id: actor.id,
        actor_email: actor.email.clone(),
        action: action.to_string(),
        details,
    };
    tx.append_audit(endpoint_id, &row)?;
    Ok(())
}

/// The endpoint's entries, newest first: at most `limit` older than `before` (an entry id).
pub fn list(
    store: &dyn Store,
    endpoint_id: u64,
    limit: usize,
    before: Option<u64>,
) -> Result<Vec<AuditView>> {
    let rows = store
        .read()?
        .audit_page(endpoint_id, before.unwrap_or(u64::MAX), limit)?;
    Ok(rows
        .into_iter()
        .map(|row| AuditView {
            id: row.id,
            time: row.time.to_rfc3339(),
            actor: Actor {
                id: row.actor_id,
                email: row.actor_email,
            },
            action: row.action,
            details: row.details,
        })
        .collect())
}
