//! [`Export`] on redb: every table of `intake.redb` read from one snapshot, row by row, as the
//! typed rows of the seam. The file is opened read-only: a copy leaves it exactly as it was.

use std::collections::HashMap;
use std::path::Path;

use redb::{
    Database, DatabaseError, ReadOnlyDatabase, ReadTransaction, ReadableDatabase, ReadableTable,
};

use super::layout::{self, Found};
use super::payload::PayloadCodec;
use super::{
    ACCOUNTS, API_KEYS, AUDIT, COLLABORATORS, DELIVERIES, DELIVERIES_DUE, DELIVERY_ATTEMPTS,
    ENDPOINTS, ERASURES, FAILURE_MAILS, IDEMPOTENCY, INVITATION_TOKENS, INVITATIONS, META,
    NOTIFICATIONS, OUTBOX, RECORDS, TOKENS, USAGE, USAGE_DAYS, WEBHOOK_SECRETS, WEBHOOK_SETTINGS,
    from_json, read_counter,
};
use crate::core::ids::RecordId;
use crate::store::records::RecordRow;
use crate::store::transfer::{Export, Item};
use crate::store::usage::CallsDelta;
use crate::store::webhooks::DueDelivery;
use crate::store::{IdKind, Partition, StoreError, time_from_key};

/// The `META` counter of each kind of id (`tx.rs` hands them out).
const COUNTERS: [(IdKind, &str); 7] = [
    (IdKind::Account, "next_account_id"),
    (IdKind::Endpoint, "next_endpoint_id"),
    (IdKind::Invitation, "next_invitation_id"),
    (IdKind::Notification, "next_notification_id"),
    (IdKind::Audit, "next_audit_id"),
    (IdKind::Mail, "next_mail_id"),
    (IdKind::Erasure, "next_erasure_id"),
];

/// `intake.redb` opened read-only to be copied.
pub struct RedbExport {
    db: ReadOnlyDatabase,
    codec: PayloadCodec,
}

impl RedbExport {
    /// Opens the file at `path` read-only; refused while a server holds it, and for a file of
    /// another schema version.
    pub fn open(path: &Path, cache_bytes: usize) -> Result<RedbExport, StoreError> {
        let db = match Database::builder()
            .set_cache_size(cache_bytes)
            .open_read_only(path)
        {
            Err(DatabaseError::DatabaseAlreadyOpen) => {
                return Err(StoreError::Backend(
                    format!("{} is in use: stop the server first", path.display()).into(),
                ));
            }
            opened => opened?,
        };
        match layout::MAIN.found(&db, path)? {
            Found::Current(_) => {}
            Found::Older(version) => {
                return Err(StoreError::Schema(format!(
                    "{} has layout version {version}, older than this intake's {}: start \
                     `intake serve` on its data dir once to upgrade it, stop it, then copy it",
                    path.display(),
                    layout::MAIN.version
                )));
            }
            Found::New => {
                return Err(StoreError::Schema(format!(
                    "{} has no layout version: it is not an intake store",
                    path.display()
                )));
            }
        }
        Ok(RedbExport {
            codec: PayloadCodec::load(&db)?,
            db,
        })
    }
}

impl Export for RedbExport {
    fn export(
        &self,
        each: &mut dyn FnMut(Item) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let txn = self.db.begin_read()?;
        export_from(&txn, &self.codec, each)
    }
}

fn export_from(
    txn: &ReadTransaction,
    codec: &PayloadCodec,
    each: &mut dyn FnMut(Item) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let meta = txn.open_table(META)?;
    for (kind, counter) in COUNTERS {
        let last = read_counter(&meta, counter)?;
        each(Item::LastId { kind, last })?;
    }
    for entry in txn.open_table(ACCOUNTS)?.iter()? {
        let (_, v) = entry?;
        each(Item::Account(from_json(v.value())?))?;
    }
    for entry in txn.open_table(TOKENS)?.iter()? {
        let (k, v) = entry?;
        each(Item::Token {
            hash: *k.value(),
            row: from_json(v.value())?,
        })?;
    }
    for entry in txn.open_table(NOTIFICATIONS)?.iter()? {
        let (k, v) = entry?;
        each(Item::Notification {
            account_id: k.value().0,
            row: from_json(v.value())?,
        })?;
    }
    for entry in txn.open_table(ENDPOINTS)?.iter()? {
        let (_, v) = entry?;
        each(Item::Endpoint(from_json(v.value())?))?;
    }
    for entry in txn.open_table(API_KEYS)?.iter()? {
        let (k, v) = entry?;
        each(Item::ApiKey {
            hash: *k.value(),
            row: from_json(v.value())?,
        })?;
    }
    // Invitations before collaborators, who refer to the invitation they accepted.
    let mut token_hashes = HashMap::new();
    for entry in txn.open_table(INVITATION_TOKENS)?.iter()? {
        let (k, v) = entry?;
        token_hashes.insert(v.value(), *k.value());
    }
    for entry in txn.open_table(INVITATIONS)?.iter()? {
        let (k, v) = entry?;
        let token_hash = token_hashes
            .get(&k.value())
            .copied()
            .ok_or_else(|| StoreError::Corrupt(format!("invitation {} has no token", k.value())))?;
        each(Item::Invitation {
            row: from_json(v.value())?,
            token_hash,
        })?;
    }
    for entry in txn.open_table(COLLABORATORS)?.iter()? {
        let (_, v) = entry?;
        each(Item::Collaborator(from_json(v.value())?))?;
    }
    for entry in txn.open_table(AUDIT)?.iter()? {
        let (k, v) = entry?;
        each(Item::Audit {
            endpoint_id: k.value().0,
            row: from_json(v.value())?,
        })?;
    }
    for entry in txn.open_table(WEBHOOK_SECRETS)?.iter()? {
        let (k, v) = entry?;
        each(Item::WebhookSecret {
            partition: Partition::from_raw(k.value()),
            row: from_json(v.value())?,
        })?;
    }
    for entry in txn.open_table(WEBHOOK_SETTINGS)?.iter()? {
        let (k, v) = entry?;
        each(Item::WebhookSettings {
            partition: Partition::from_raw(k.value()),
            row: from_json(v.value())?,
        })?;
    }
    let mut scratch = Vec::new();
    for entry in txn.open_table(RECORDS)?.iter()? {
        let (k, v) = entry?;
        let (partition, id) = k.value();
        let (updated_at, payload) = codec.decode(v.value(), &mut scratch)?;
        each(Item::Record {
            partition: Partition::from_raw(partition),
            row: RecordRow {
                id: RecordId(id),
                updated_at,
                payload: payload.to_vec(),
            },
        })?;
    }
    for entry in txn.open_table(IDEMPOTENCY)?.iter()? {
        let (k, v) = entry?;
        let (partition, key) = k.value();
        each(Item::Idempotency {
            partition: Partition::from_raw(partition),
            key: key.to_string(),
            row: from_json(v.value())?,
        })?;
    }
    let mut due = HashMap::new();
    for entry in txn.open_table(DELIVERIES_DUE)?.iter()? {
        let (k, v) = entry?;
        let (due_at, id) = k.value();
        let (retry, receiver) = v.value();
        due.insert(
            id,
            DueDelivery {
                due_at: time_from_key(due_at),
                id,
                retry,
                receiver: receiver.to_string(),
            },
        );
    }
    for entry in txn.open_table(DELIVERIES)?.iter()? {
        let (k, v) = entry?;
        each(Item::Delivery {
            row: from_json(v.value())?,
            due: due.remove(&k.value()),
        })?;
    }
    for entry in txn.open_table(DELIVERY_ATTEMPTS)?.iter()? {
        let (k, v) = entry?;
        each(Item::Attempt {
            delivery_id: k.value().0,
            row: from_json(v.value())?,
        })?;
    }
    for entry in txn.open_table(FAILURE_MAILS)?.iter()? {
        let (k, _) = entry?;
        let (endpoint_id, day) = k.value();
        each(Item::FailureMail { endpoint_id, day })?;
    }
    for entry in txn.open_table(OUTBOX)?.iter()? {
        let (_, v) = entry?;
        each(Item::Mail(from_json(v.value())?))?;
    }
    for entry in txn.open_table(ERASURES)?.iter()? {
        let (_, v) = entry?;
        each(Item::Erasure(from_json(v.value())?))?;
    }
    for entry in txn.open_table(USAGE)?.iter()? {
        let (k, v) = entry?;
        let (partition, month) = k.value();
        each(Item::Calls(CallsDelta {
            partition: Partition::from_raw(partition),
            month,
            day: 0,
            calls: v.value(),
        }))?;
    }
    for entry in txn.open_table(USAGE_DAYS)?.iter()? {
        let (k, v) = entry?;
        let (partition, day) = k.value();
        each(Item::Calls(CallsDelta {
            partition: Partition::from_raw(partition),
            month: 0,
            day,
            calls: v.value(),
        }))?;
    }
    Ok(())
}
