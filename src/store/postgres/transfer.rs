//! [`Import`] on PostgreSQL: the rows of another store written with their ids through the same
//! typed writes the services use, records and the rows no service writes (idempotency keys,
//! attempts, usage) in bulk; then the id sequences are moved past every id copied.

use super::{Patience, PgStore, PgTx, big, big_partition, id_bytes, micros, to_json, unbig};
use crate::store::accounts::AccountsWrite;
use crate::store::endpoints::EndpointsWrite;
use crate::store::erasures::ErasuresWrite;
use crate::store::mail::MailWrite;
use crate::store::records::searchable_text;
use crate::store::transfer::{Counts, Import, Item, Kind};
use crate::store::webhooks::WebhooksWrite;
use crate::store::{IdKind, Partition, StoreError};

/// Each kind's table, to count what the database holds.
const TABLES: [(Kind, &str); 17] = [
    (Kind::Accounts, "accounts"),
    (Kind::Tokens, "tokens"),
    (Kind::Notifications, "notifications"),
    (Kind::Endpoints, "endpoints"),
    (Kind::ApiKeys, "api_keys"),
    (Kind::Collaborators, "collaborators"),
    (Kind::Invitations, "invitations"),
    (Kind::AuditEntries, "audit"),
    (Kind::Records, "records"),
    (Kind::IdempotencyKeys, "idempotency"),
    (Kind::WebhookSecrets, "webhook_secrets"),
    (Kind::WebhookSettings, "owner_webhooks"),
    (Kind::Deliveries, "deliveries"),
    (Kind::Attempts, "delivery_attempts"),
    (Kind::FailureMails, "failure_mails"),
    (Kind::Mails, "outbox"),
    (Kind::Erasures, "erasures"),
];

fn sequence(kind: IdKind) -> &'static str {
    match kind {
        IdKind::Account => "account_ids",
        IdKind::Endpoint => "endpoint_ids",
        IdKind::Invitation => "invitation_ids",
        IdKind::Notification => "notification_ids",
        IdKind::Audit => "audit_ids",
        IdKind::Mail => "mail_ids",
        IdKind::Erasure => "erasure_ids",
    }
}

impl Import for PgStore {
    fn is_empty(&self) -> Result<bool, StoreError> {
        let rows = self.statement_within(
            Patience::Maintenance,
            "SELECT NOT EXISTS (SELECT 1 FROM accounts) AND NOT EXISTS (SELECT 1 FROM endpoints)
                AND NOT EXISTS (SELECT 1 FROM records)",
            &[],
        )?;
        let row = rows
            .first()
            .ok_or_else(|| StoreError::Corrupt("SELECT gave no row".into()))?;
        Ok(row.try_get(0)?)
    }

    fn import(&self, items: &[Item]) -> Result<(), StoreError> {
        // `intake migrate`'s copy: a chunk of rows a step, no request waiting on it.
        self.write_unit_within(Patience::Maintenance, |tx| {
            let mut records = Bulk::default();
            let mut deliveries = false;
            for item in items {
                match item {
                    Item::Account(row) => tx.insert_account(row)?,
                    Item::Token { hash, row } => tx.insert_token(hash, row)?,
                    Item::Notification { account_id, row } => {
                        tx.put_notification(*account_id, row)?
                    }
                    Item::Endpoint(row) => tx.insert_endpoint(row)?,
                    Item::ApiKey { hash, row } => tx.insert_api_key(hash, row)?,
                    Item::Collaborator(row) => tx.put_collaborator(row)?,
                    Item::Invitation { row, token_hash } => tx.insert_invitation(row, token_hash)?,
                    Item::Audit { endpoint_id, row } => tx.append_audit(*endpoint_id, row)?,
                    Item::Record { partition, row } => records.push(*partition, row),
                    Item::Idempotency {
                        partition,
                        key,
                        row,
                    } => {
                        tx.execute(
                            "INSERT INTO idempotency (partition, key, created_at, data)
                             VALUES ($1, $2, $3, $4)",
                            &[
                                &big_partition(*partition),
                                key,
                                &micros(row.created_at),
                                &to_json(row)?,
                            ],
                        )?;
                    }
                    Item::WebhookSecret { partition, row } => {
                        tx.put_webhook_secret(*partition, row)?
                    }
                    Item::WebhookSettings { partition, row } => {
                        tx.put_webhook_settings(*partition, row)?
                    },
                    Item::Delivery { row, due } => {
                        tx.put_delivery(row)?;
                        if let Some(due) = due {
                            tx.put_due(due)?;
                        }
                        deliveries = true;
                    }
                    Item::Attempt { delivery_id, row } => {
                        tx.execute(
                            "INSERT INTO delivery_attempts (delivery_id, attempt, data)
                             VALUES ($1, $2, $3)",
                            &[
                                &big(*delivery_id),
                                &i32::try_from(row.attempt).unwrap_or(i32::MAX),
                                &to_json(row)?,
                            ],
                        )?;
                    }
                    Item::FailureMail { endpoint_id, day } => {
                        tx.insert_failure_mail(*endpoint_id, *day)?
                    }
                    Item::Mail(row) => tx.insert_mail(row)?,
                    Item::Erasure(row) => tx.put_erasure(row)?,
                    Item::Calls(calls) => {
                        let (table, column, period) = if calls.day == 0 {
                            ("usage_months", "month", calls.month)
                        } else {
                            ("usage_days", "day", calls.day)
                        };
                        tx.execute(
                            &format!(
                                "INSERT INTO {table} (partition, {column}, calls) VALUES ($1, $2, $3)
                                 ON CONFLICT (partition, {column})
                                 DO UPDATE SET calls = {table}.calls + EXCLUDED.calls"
                            ),
                            &[
                                &big_partition(calls.partition),
                                &i32::try_from(period).unwrap_or(i32::MAX),
                                &big(calls.calls),
                            ],
                        )?;
                    }
                    Item::LastId { kind, last } if *last > 0 => {
                        tx.query(
                            &format!("SELECT setval('{}', $1)", sequence(*kind)),
                            &[&big(*last)],
                        )?;
                    }
                    Item::LastId { .. } => {}
                }
            }
            records.insert(tx)?;
            if deliveries {
                tx.query(
                    "SELECT setval('delivery_ids', greatest((SELECT max(id) FROM deliveries), 1))",
                    &[],
                )?;
            }
            Ok(())
        })
        .map(|((), _)| ())
    }

    fn counts(&self) -> Result<Counts, StoreError> {
        let mut counts = Counts::new();
        for (kind, table) in TABLES {
            let rows = self.statement_within(
                Patience::Maintenance,
                &format!("SELECT count(*) FROM {table}"),
                &[],
            )?;
            let count: i64 = rows
                .first()
                .ok_or_else(|| StoreError::Corrupt("count gave no row".into()))?
                .try_get(0)?;
            counts.insert(kind, unbig(count));
        }
        Ok(counts)
    }
}

/// Records gathered for one multi-row insert.
#[derive(Default)]
struct Bulk {
    partitions: Vec<i64>,
    ids: Vec<[u8; 16]>,
    updated_at: Vec<i64>,
    payloads: Vec<Vec<u8>>,
    folded: Vec<String>,
}

impl Bulk {
    fn push(&mut self, partition: Partition, row: &crate::store::records::RecordRow) {
        self.partitions.push(big_partition(partition));
        self.ids.push(id_bytes(row.id.0));
        self.updated_at.push(row.updated_at.as_micros());
        self.payloads.push(row.payload.clone());
        self.folded.push(searchable_text(&row.payload));
    }

    fn insert(self, tx: &PgTx<'_>) -> Result<(), StoreError> {
        if self.ids.is_empty() {
            return Ok(());
        }
        let ids: Vec<&[u8]> = self.ids.iter().map(|id| &id[..]).collect();
        tx.execute(
            "INSERT INTO records (partition, id, updated_at, payload, folded)
             SELECT * FROM unnest($1::bigint[], $2::bytea[], $3::bigint[], $4::bytea[], $5::text[])",
            &[
                &self.partitions,
                &ids,
                &self.updated_at,
                &self.payloads,
                &self.folded,
            ],
        )?;
        Ok(())
    }
}
