//! The redb schema: every table of `intake.redb` and `requests.redb`, and how a record value is
//! laid out. Only `store::redb` names these.

use redb::{ReadableTable, TableDefinition};

use crate::store::{Partition, StoreError};

pub const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
pub const ACCOUNTS: TableDefinition<u64, &[u8]> = TableDefinition::new("accounts");
pub const ACCOUNT_EMAILS: TableDefinition<&str, u64> = TableDefinition::new("account_emails");
pub const TOKENS: TableDefinition<&[u8; 32], &[u8]> = TableDefinition::new("tokens");
pub const ENDPOINTS: TableDefinition<u64, &[u8]> = TableDefinition::new("endpoints");
pub const ENDPOINT_SLUGS: TableDefinition<&str, u64> = TableDefinition::new("endpoint_slugs");
pub const API_KEYS: TableDefinition<&[u8; 32], &[u8]> = TableDefinition::new("api_keys");
/// `(partition, record_id)` → the record value: its `updated_at` and payload JSON, the payload
/// compressed with a dictionary of `PAYLOAD_DICTIONARIES` when there is one (`payload`'s
/// [`PayloadCodec`](super::payload::PayloadCodec) has the layouts).
pub const RECORDS: TableDefinition<(u64, u128), &[u8]> = TableDefinition::new("records");
/// zstd dictionaries of stored payloads: zstd's dictionary id → the dictionary. A record
/// compressed with one needs it for as long as the record lives: one is only removed once
/// every record is stored anew with another (`payload::recompress`).
pub const PAYLOAD_DICTIONARIES: TableDefinition<u32, &[u8]> =
    TableDefinition::new("payload_dictionaries");
/// What each dictionary's sample could have held: zstd's dictionary id →
/// `DictionarySample` JSON (`payload`), written and removed with the dictionary's row. A
/// dictionary trained before samples were recorded has none.
pub const DICTIONARY_SAMPLES: TableDefinition<u32, &[u8]> =
    TableDefinition::new("payload_dictionary_samples");
/// The change log: `sequence` → `(partition, record_id)` of every applied create, replace or
/// delete, written in the same commit as the change. Work that follows a write (search
/// indexing) reads it from its own position, so it resumes after a restart; it re-reads the
/// record's current state, so applying an entry twice has no double effect. Entries are
/// trimmed once every reader is past them (`META` `changes_trimmed_upto`).
pub const CHANGES: TableDefinition<u64, (u64, u128)> = TableDefinition::new("changes");
/// `META` key of the access version: raised by every transaction that changes what a key may
/// do (`EndpointsRead::access_version`).
pub const ACCESS_VERSION: &str = "access_version";
/// `META` key of the last change sequence written.
pub const LAST_CHANGE_SEQ: &str = "last_change_seq";
/// `META` key of the highest change sequence trimmed from `CHANGES`.
pub const CHANGES_TRIMMED_UPTO: &str = "changes_trimmed_upto";
/// The event log of the change stream (`store::events`): `(partition, change sequence)` →
/// `(kind, record_id, received at µs)` of every applied create, replace and delete, written
/// in the commit of the write with the sequence of its `CHANGES` entry. Kept for the
/// partition's retention window.
pub const EVENTS: TableDefinition<(u64, u64), (u8, u128, u64)> =
    TableDefinition::new("record_events");
/// `partition` → the highest event sequence retention has purged from `EVENTS`.
pub const EVENTS_TRIMMED: TableDefinition<u64, u64> = TableDefinition::new("record_events_trimmed");
/// `(partition, idempotency key)` → [`IdempotencyRow`] JSON.
pub const IDEMPOTENCY: TableDefinition<(u64, &str), &[u8]> = TableDefinition::new("idempotency");
/// `(stored_at_us, partition, idempotency key)` → `()`: the expiry order of `IDEMPOTENCY`.
pub const IDEMPOTENCY_EXPIRY: TableDefinition<(u64, u64, &str), ()> =
    TableDefinition::new("idempotency_expiry");
/// Dashboard sessions: SHA-256 of the session cookie → [`SessionRow`] JSON.
pub const SESSIONS: TableDefinition<&[u8; 32], &[u8]> = TableDefinition::new("sessions");
/// Password reset links: SHA-256 of the link's token → [`PasswordResetRow`] JSON.
pub const PASSWORD_RESETS: TableDefinition<&[u8; 32], &[u8]> =
    TableDefinition::new("password_resets");
/// Invitations: `invitation id` → [`InvitationRow`] JSON.
pub const INVITATIONS: TableDefinition<u64, &[u8]> = TableDefinition::new("invitations");
/// SHA-256 of an invitation's link token → invitation id.
pub const INVITATION_TOKENS: TableDefinition<&[u8; 32], u64> =
    TableDefinition::new("invitation_tokens");
/// `(endpoint_id, account_id)` → [`CollaboratorRow`] JSON.
pub const COLLABORATORS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("collaborators");
/// `(account_id, notification id)` → [`NotificationRow`] JSON.
pub const NOTIFICATIONS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("notifications");
/// `(endpoint_id, entry id)` → [`AuditRow`] JSON: every change to an endpoint, who and when.
pub const AUDIT: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("audit");
/// `(partition, month as yyyymm)` → data calls counted in that month (see `usage`).
pub const USAGE: TableDefinition<(u64, u32), u64> = TableDefinition::new("usage");
/// Data calls per (partition, day as `yyyymmdd`): the dashboard's requests-per-day chart.
pub const USAGE_DAYS: TableDefinition<(u64, u32), u64> = TableDefinition::new("usage_days");
/// The owner's webhook settings: `partition` → [`WebhookSettingsRow`] JSON, the subscriptions
/// of one endpoint and environment (named for the single owner webhook it held before).
pub const WEBHOOK_SETTINGS: TableDefinition<u64, &[u8]> = TableDefinition::new("owner_webhooks");
/// Webhook deliveries: `delivery id` → [`DeliveryRow`] JSON. Written in the commit of the write
/// that causes them, so an acknowledged write never loses its webhooks.
pub const DELIVERIES: TableDefinition<u64, &[u8]> = TableDefinition::new("deliveries");
/// Pending deliveries by when they are due: `(due_at_us, delivery id)` → `(retry, receiver)`:
/// whether it was attempted before, and its receiver (`scheme://host:port`), so the
/// dispatcher passes over deliveries it cannot start yet without reading their rows.
pub const DELIVERIES_DUE: TableDefinition<(u64, u64), (bool, &str)> =
    TableDefinition::new("deliveries_due");
/// `(partition, delivery id)` → record id: an endpoint's deliveries, newest first.
pub const PARTITION_DELIVERIES: TableDefinition<(u64, u64), u128> =
    TableDefinition::new("partition_deliveries");
/// `(partition, record id, delivery id)` → `()`: a record's deliveries.
pub const RECORD_DELIVERIES: TableDefinition<(u64, u128, u64), ()> =
    TableDefinition::new("record_deliveries");
/// `(delivery id, attempt number)` → [`AttemptRow`] JSON: every attempt, as it went.
pub const DELIVERY_ATTEMPTS: TableDefinition<(u64, u32), &[u8]> =
    TableDefinition::new("delivery_attempts");
/// `(endpoint_id, days since 1970-01-01)` → `()`: the owner was e-mailed about a given-up
/// delivery that UTC day (at most one such e-mail per endpoint per day).
pub const FAILURE_MAILS: TableDefinition<(u64, u64), ()> = TableDefinition::new("failure_mails");
/// Outgoing e-mail: `message id` → [`MailRow`] JSON. Written in the same transaction as the
/// change that causes it (an invitation, a deployment), sent later by the mail worker.
pub const OUTBOX: TableDefinition<u64, &[u8]> = TableDefinition::new("outbox");
/// Webhook signing secrets: `partition` → [`WebhookSecretRow`] JSON, one per endpoint and
/// environment (see `webhooks::secrets`).
pub const WEBHOOK_SECRETS: TableDefinition<u64, &[u8]> = TableDefinition::new("webhook_secrets");
/// Erasure id → `ErasureRow` JSON.
pub const ERASURES: TableDefinition<u64, &[u8]> = TableDefinition::new("erasures");
/// `(table, key, key)` → `()`: keys of `RECORDS`, `DELIVERIES` and `DELIVERY_ATTEMPTS` whose
/// values an erasure removed or emptied, until the leaf covering each is built anew
/// (`erased_leaves`).
pub const ERASED_KEYS: TableDefinition<(u8, u64, u128), ()> = TableDefinition::new("erased_keys");
/// `(partition, time_us, sequence)` → [`RequestLogRow`] JSON. Lives in `requests.redb`.
pub const REQUEST_LOG: TableDefinition<(u64, u64, u64), &[u8]> =
    TableDefinition::new("request_log");

/// The partitions that hold a row in `table`, keyed by `(partition, …)` (records, events,
/// deliveries), in order: one seek per partition, to the first key after the previous one.
pub fn partitions_of<S, V>(
    table: &impl ReadableTable<(u64, S), V>,
) -> Result<Vec<Partition>, StoreError>
where
    S: redb::Key + for<'a> redb::Value<SelfType<'a> = S> + Default + 'static,
    V: redb::Value + 'static,
{
    let mut partitions = Vec::new();
    let mut from = Some(0);
    while let Some(start) = from {
        let Some(entry) = table.range((start, S::default())..)?.next() else {
            break;
        };
        let raw = entry?.0.value().0;
        partitions.push(Partition::from_raw(raw));
        from = raw.checked_add(1);
    }
    Ok(partitions)
}
