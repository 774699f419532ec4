//! The embedded store: one redb file, every table, and the row types kept in it.
//!
//! This module is the schema. Services open the tables they need inside a transaction; the only
//! writer of record rows is the ingest writer (`ingest`), which commits with fsync before any
//! 202 leaves.
//!
//! Layout and invariants:
//! - A *partition* is one endpoint in one environment: `endpoint_id << 1 | env`. Sandbox and
//!   production data never share a partition, so no query can mix them.
//! - `RECORDS` is keyed `(partition, record_id)`. A record id starts with its created_at in
//!   microseconds (see `ids`), so the key order is `(created_at, random tiebreak)`: list
//!   (newest first) and poll (oldest first) are range scans, and a single read is a point
//!   lookup. One write touches one B-tree.
//! - API keys and tokens are keyed by the SHA-256 of the secret; plain secrets are only kept
//!   sealed (see `crypto`).

use std::path::{Path, PathBuf};

use redb::{
    Database, Key, ReadTransaction, ReadableDatabase, ReadableTable, TableDefinition, Value,
    WriteTransaction,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::core::clock::Timestamp;
use crate::core::quiet_panic;

pub const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
pub const ACCOUNTS: TableDefinition<u64, &[u8]> = TableDefinition::new("accounts");
pub const ACCOUNT_EMAILS: TableDefinition<&str, u64> = TableDefinition::new("account_emails");
pub const TOKENS: TableDefinition<&[u8; 32], &[u8]> = TableDefinition::new("tokens");
pub const ENDPOINTS: TableDefinition<u64, &[u8]> = TableDefinition::new("endpoints");
pub const ENDPOINT_SLUGS: TableDefinition<&str, u64> = TableDefinition::new("endpoint_slugs");
pub const API_KEYS: TableDefinition<&[u8; 32], &[u8]> = TableDefinition::new("api_keys");
/// `(partition, record_id)` → `updated_at_us (8 bytes BE) ++ payload JSON`.
pub const RECORDS: TableDefinition<(u64, u128), &[u8]> = TableDefinition::new("records");
/// The change log: `sequence` → `(partition, record_id)` of every applied create, replace or
/// delete, written in the same commit as the change. Work that follows a write (search
/// indexing) reads it from its own position, so it resumes after a restart; it re-reads the
/// record's current state, so applying an entry twice has no double effect. Entries are
/// trimmed once every reader is past them (`META` `changes_trimmed_upto`).
pub const CHANGES: TableDefinition<u64, (u64, u128)> = TableDefinition::new("changes");
/// `META` key of the last change sequence written.
pub const LAST_CHANGE_SEQ: &str = "last_change_seq";
/// `META` key of the highest change sequence trimmed from `CHANGES`.
pub const CHANGES_TRIMMED_UPTO: &str = "changes_trimmed_upto";
/// `(partition, idempotency key)` → [`IdempotencyRow`] JSON.
pub const IDEMPOTENCY: TableDefinition<(u64, &str), &[u8]> = TableDefinition::new("idempotency");
/// `(stored_at_us, partition, idempotency key)` → `()`: the expiry order of `IDEMPOTENCY`.
pub const IDEMPOTENCY_EXPIRY: TableDefinition<(u64, u64, &str), ()> =
    TableDefinition::new("idempotency_expiry");
/// Dashboard sessions: SHA-256 of the session cookie → [`SessionRow`] JSON.
pub const SESSIONS: TableDefinition<&[u8; 32], &[u8]> = TableDefinition::new("sessions");
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
/// Owner webhooks: `partition` → [`OwnerWebhookRow`] JSON (one per endpoint and environment).
pub const OWNER_WEBHOOKS: TableDefinition<u64, &[u8]> = TableDefinition::new("owner_webhooks");
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
/// `(partition, time_us, sequence)` → [`RequestLogRow`] JSON. Lives in `requests.redb`.
pub const REQUEST_LOG: TableDefinition<(u64, u64, u64), &[u8]> =
    TableDefinition::new("request_log");

const SCHEMA_VERSION: &[u8] = b"1";

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("storage error: {0}")]
    Db(#[from] redb::Error),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    #[error("the data dir was written by an incompatible version of intake (schema {0})")]
    Schema(String),
    #[error("the disk holding the data dir is full ({available} bytes available)")]
    Full { available: u64 },
    #[error(
        "{path} is damaged ({detail}); stop here and restore the latest backup into the data \
         dir with `intake restore --from BACKUP.tar --force` (docs/src/operations.md, \"Backups\")"
    )]
    Damaged { path: String, detail: String },
}

macro_rules! redb_errors {
    ($($t:ty),*) => {$(
        impl From<$t> for StoreError {
            fn from(err: $t) -> Self {
                StoreError::Db(err.into())
            }
        }
    )*};
}
redb_errors!(
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError
);

/// sandbox or production.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Environment {
    Sandbox,
    Production,
}

impl Environment {
    pub fn as_str(self) -> &'static str {
        match self {
            Environment::Sandbox => "sandbox",
            Environment::Production => "production",
        }
    }

    pub fn parse(s: &str) -> Option<Environment> {
        match s {
            "sandbox" => Some(Environment::Sandbox),
            "production" => Some(Environment::Production),
            _ => None,
        }
    }

    /// The API key prefix of this environment.
    pub fn key_prefix(self) -> &'static str {
        match self {
            Environment::Sandbox => "tm_test_",
            Environment::Production => "tm_live_",
        }
    }
}

/// The partition of one endpoint's data in one environment.
pub fn partition(endpoint_id: u64, env: Environment) -> u64 {
    (endpoint_id << 1) | u64::from(env == Environment::Production)
}

/// The environment of a partition.
pub fn partition_environment(partition: u64) -> Environment {
    if partition & 1 == 1 {
        Environment::Production
    } else {
        Environment::Sandbox
    }
}

/// The endpoint a partition belongs to (the inverse of [`partition`] for the endpoint id).
pub fn partition_endpoint(partition: u64) -> u64 {
    partition >> 1
}

/// Stored times are non-negative microseconds.
pub fn time_key(t: Timestamp) -> u64 {
    u64::try_from(t.as_micros()).unwrap_or(0)
}

pub fn time_from_key(k: u64) -> Timestamp {
    Timestamp(i64::try_from(k).unwrap_or(i64::MAX))
}

/// What an account may do on this server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The operator (`intake init`): creates endpoints, invites, deploys, manages accounts.
    Owner,
    /// An account created by accepting an invitation: works on the endpoints it joined.
    Member,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AccountRow {
    pub id: u64,
    pub email: String,
    pub password_hash: String,
    pub role: Role,
    pub created_at: Timestamp,
    /// A suspended account ("no subscription") cannot log in, and its tokens and
    /// collaboration keys are refused with 403.
    #[serde(default)]
    pub suspended: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TokenRow {
    pub account_id: u64,
    pub name: String,
    pub created_at: Timestamp,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SessionRow {
    pub account_id: u64,
    pub created_at: Timestamp,
    pub expires_at: Timestamp,
}

/// What a collaboration key may call. `read` covers GET single, list, search and poll.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Permission {
    Create,
    Read,
    Replace,
    Delete,
}

impl Permission {
    pub const ALL: [Permission; 4] = [
        Permission::Create,
        Permission::Read,
        Permission::Replace,
        Permission::Delete,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Permission::Create => "create",
            Permission::Read => "read",
            Permission::Replace => "replace",
            Permission::Delete => "delete",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InvitationStatus {
    Pending,
    Accepted,
    Revoked,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct InvitationRow {
    pub id: u64,
    pub endpoint_id: u64,
    pub email: String,
    pub permissions: Vec<Permission>,
    pub status: InvitationStatus,
    pub invited_by: u64,
    pub created_at: Timestamp,
    pub expires_at: Timestamp,
    /// The link token, sealed, so the owner can see the link when no e-mail can be sent.
    #[serde(with = "base64_bytes")]
    pub token_sealed: Vec<u8>,
    /// The outbox message that carries the invitation.
    pub mail_id: u64,
    pub accepted_by: Option<u64>,
    pub decided_at: Option<Timestamp>,
}

/// A collaborator's membership of one endpoint and its collaboration keys.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CollaboratorRow {
    pub endpoint_id: u64,
    pub account_id: u64,
    pub permissions: Vec<Permission>,
    pub invitation_id: u64,
    pub added_at: Timestamp,
    #[serde(with = "base64_bytes")]
    pub sandbox_key_sealed: Vec<u8>,
    #[serde(with = "base64_bytes")]
    pub production_key_sealed: Vec<u8>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NotificationRow {
    pub id: u64,
    /// `endpoint_deployed`, `deploy_requested`, `deploy_request_rejected`,
    /// `invitation_accepted`.
    pub kind: String,
    pub endpoint_slug: String,
    pub message: String,
    pub created_at: Timestamp,
    pub read_at: Option<Timestamp>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AuditRow {
    pub id: u64,
    pub time: Timestamp,
    pub actor_id: u64,
    pub actor_email: String,
    /// What happened, e.g. `endpoint.deployed` (docs/src/accounts.md lists them).
    pub action: String,
    /// What changed, as the action defines it.
    pub details: serde_json::Value,
}

/// A collaborator's pending request to deploy an endpoint.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DeployRequestRow {
    pub requested_by: u64,
    pub requested_at: Timestamp,
    pub note: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EndpointRow {
    pub id: u64,
    pub slug: String,
    pub name: String,
    pub description: Option<String>,
    pub required_fields: Vec<String>,
    pub active: bool,
    pub deployed: bool,
    pub deployed_at: Option<Timestamp>,
    pub created_at: Timestamp,
    pub owner_id: u64,
    /// The collaborator's request to deploy, while one is pending.
    #[serde(default)]
    pub deploy_request: Option<DeployRequestRow>,
    /// Data calls allowed per month and environment; `None` uses `[usage] monthly_quota`.
    #[serde(default)]
    pub monthly_quota: Option<u64>,
    /// The default keys, sealed with the data dir's key-encryption key (see `crypto`).
    #[serde(with = "base64_bytes")]
    pub sandbox_key_sealed: Vec<u8>,
    #[serde(with = "base64_bytes")]
    pub production_key_sealed: Vec<u8>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ApiKeyRow {
    pub key_id: String,
    pub endpoint_id: u64,
    pub environment: Environment,
    pub created_at: Timestamp,
    /// The collaborator holding this key; `None` for the endpoint's default (owner) keys,
    /// which carry every permission.
    #[serde(default)]
    pub collaborator_id: Option<u64>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct IdempotencyRow {
    /// SHA-256 (hex) of the normalised payload of the original request.
    pub payload_hash: String,
    pub record_id: String,
    pub created_at: Timestamp,
}

/// The owner's webhook of one endpoint in one environment.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct OwnerWebhookRow {
    pub url: String,
    /// Name of the custom auth header sent with every delivery, if any.
    pub auth_header: Option<String>,
    /// Its value, sealed (see `crypto`).
    #[serde(default, with = "base64_bytes_opt")]
    pub auth_value_sealed: Option<Vec<u8>>,
    pub enabled: bool,
    pub updated_at: Timestamp,
}

/// Who asked for a delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WebhookKind {
    /// Configured by the endpoint's owner; failures are e-mailed (production only).
    Owner,
    /// Requested by the API caller with `X-Webhook-Callback` on the write.
    Caller,
}

/// Where a delivery is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryState {
    /// Waiting for its first or next attempt (listed in `DELIVERIES_DUE`).
    Pending,
    /// A receiver answered 2xx.
    Delivered,
    /// No attempt left, or an answer that is not retried.
    GivenUp,
}

/// One webhook delivery: one write to one receiver, with its fixed body.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DeliveryRow {
    pub id: u64,
    pub partition: u64,
    pub record_id: u128,
    pub kind: WebhookKind,
    pub url: String,
    pub auth_header: Option<String>,
    #[serde(default, with = "base64_bytes_opt")]
    pub auth_value_sealed: Option<Vec<u8>>,
    /// The JSON body, fixed when the write was committed; signed afresh on every attempt.
    pub body: String,
    pub state: DeliveryState,
    /// Attempts made so far.
    pub attempts: u32,
    pub max_attempts: u32,
    /// When the next attempt is due, while pending.
    pub next_attempt_at: Option<Timestamp>,
    pub created_at: Timestamp,
    pub finished_at: Option<Timestamp>,
}

/// One delivery attempt as it went.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AttemptRow {
    pub attempt: u32,
    pub started_at: Timestamp,
    pub duration_us: u64,
    pub url: String,
    /// The request headers, with the signature and any auth value left out.
    pub request_headers: Vec<(String, String)>,
    /// The receiver's status code, if it answered.
    pub status: Option<u16>,
    /// Why there was no usable answer (timeout, connection refused, refused target...).
    pub error: Option<String>,
    /// The start of the response body (at most `webhooks::RESPONSE_BODY_LIMIT` bytes).
    pub response_body: Option<String>,
    /// What happened next: `delivered`, `retry`, or `given_up`.
    pub outcome: String,
}

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

/// The webhook signing secret of one endpoint in one environment. Both secrets are the
/// `whsec_…` text, sealed like the keys (see `crypto`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WebhookSecretRow {
    /// The secret webhooks are signed with.
    #[serde(with = "base64_bytes")]
    pub current_sealed: Vec<u8>,
    /// The secret the last reissue replaced: webhooks carry its signature too until the
    /// changeover after `rotated_at` ends.
    #[serde(default, with = "base64_bytes_opt")]
    pub previous_sealed: Option<Vec<u8>>,
    /// When the first secret of this endpoint and environment was made.
    pub created_at: Timestamp,
    /// When the secret was last reissued.
    pub rotated_at: Option<Timestamp>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RequestLogRow {
    pub time: Timestamp,
    pub method: String,
    pub route: String,
    pub status: u16,
    pub key_id: Option<String>,
    pub latency_us: u64,
    pub environment: Environment,
    pub request_id: String,
}

/// Byte fields of JSON rows as base64 text rather than arrays of numbers.
mod base64_bytes {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = <&str>::deserialize(d)?;
        STANDARD.decode(text).map_err(serde::de::Error::custom)
    }
}

/// Optional byte fields of JSON rows as base64 text or `null`.
mod base64_bytes_opt {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match bytes {
            Some(bytes) => s.serialize_some(&STANDARD.encode(bytes)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        match Option::<&str>::deserialize(d)? {
            Some(text) => STANDARD
                .decode(text)
                .map(Some)
                .map_err(serde::de::Error::custom),
            None => Ok(None),
        }
    }
}

/// Encodes a record value: `updated_at` then the payload bytes.
pub fn encode_record(updated_at: Timestamp, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(8 + payload.len());
    v.extend_from_slice(&updated_at.as_micros().to_be_bytes());
    v.extend_from_slice(payload);
    v
}

/// Decodes a record value into `(updated_at, payload)`.
pub fn decode_record(value: &[u8]) -> Result<(Timestamp, &[u8]), StoreError> {
    let (head, payload) = value
        .split_first_chunk::<8>()
        .ok_or_else(|| StoreError::Corrupt("record value shorter than its header".into()))?;
    Ok((Timestamp(i64::from_be_bytes(*head)), payload))
}

pub fn to_json<T: Serialize>(row: &T) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(row).map_err(|e| StoreError::Corrupt(format!("cannot encode row: {e}")))
}

pub fn from_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, StoreError> {
    serde_json::from_slice(bytes)
        .map_err(|e| StoreError::Corrupt(format!("cannot decode row: {e}")))
}

/// The open database.
pub struct Store {
    db: Database,
    /// The folder holding the file, whose file system [`Store::write`] checks for space.
    dir: PathBuf,
    /// Least free space for a write transaction to begin; 0 turns the check off.
    min_free: u64,
}

impl Store {
    /// Opens (or creates) the redb file and makes sure every table exists.
    /// Opens (or creates) the main file, `intake.redb`, and makes sure every table exists.
    /// `cache_bytes` bounds redb's page cache, which is most of the server's memory.
    pub fn open(path: &Path, cache_bytes: usize) -> Result<Store, StoreError> {
        Store::open_with(path, cache_bytes, |txn| {
            visit_main_tables(&mut Creator { txn })
        })
    }

    /// Copies every table of `intake.redb` into a new redb file at `path`, all read in one
    /// transaction: a consistent snapshot that contains every commit made before it began and
    /// nothing committed while it runs. Writers are not blocked meanwhile. Returns the last
    /// change-log sequence the copy contains.
    pub fn snapshot_into(&self, path: &Path) -> Result<u64, StoreError> {
        let from = self.db.begin_read()?;
        let last_change = read_counter(&from.open_table(META)?, LAST_CHANGE_SEQ)?;
        let copy = Database::builder().create(path)?;
        let to = copy.begin_write()?;
        visit_main_tables(&mut Copier {
            from: &from,
            to: &to,
        })?;
        to.commit()?;
        Ok(last_change)
    }

    /// Opens (or creates) `requests.redb`, the request log. It is a file of its own so that
    /// logging every call never holds the write lock the data path commits under.
    pub fn open_request_log(path: &Path, cache_bytes: usize) -> Result<Store, StoreError> {
        Store::open_with(path, cache_bytes, |txn| {
            txn.open_table(REQUEST_LOG)?;
            Ok(())
        })
    }

    /// Opens the file and checks its schema. Damage found there (redb reports some as
    /// `Corrupted`, and panics on others) is [`StoreError::Damaged`], naming the file and the
    /// remedy, never a panic.
    fn open_with(
        path: &Path,
        cache_bytes: usize,
        create_tables: impl FnOnce(&WriteTransaction) -> Result<(), StoreError>,
    ) -> Result<Store, StoreError> {
        let damaged = |detail: String| StoreError::Damaged {
            path: path.display().to_string(),
            detail,
        };
        match quiet_panic::catch(|| Store::open_unchecked(path, cache_bytes, create_tables)) {
            Err(panic) => Err(damaged(format!("redb: {panic}"))),
            Ok(Err(StoreError::Db(redb::Error::Corrupted(detail)))) => Err(damaged(detail)),
            Ok(result) => result,
        }
    }

    fn open_unchecked(
        path: &Path,
        cache_bytes: usize,
        create_tables: impl FnOnce(&WriteTransaction) -> Result<(), StoreError>,
    ) -> Result<Store, StoreError> {
        let db = Database::builder()
            .set_cache_size(cache_bytes)
            .create(path)?;
        let txn = db.begin_write()?;
        {
            let mut meta = txn.open_table(META)?;
            let version = meta.get("schema_version")?.map(|v| v.value().to_vec());
            match version {
                None => {
                    meta.insert("schema_version", SCHEMA_VERSION)?;
                }
                Some(v) if v == SCHEMA_VERSION => {}
                Some(v) => {
                    return Err(StoreError::Schema(String::from_utf8_lossy(&v).into_owned()));
                }
            }
        }
        create_tables(&txn)?;
        txn.commit()?;
        Ok(Store {
            db,
            dir: path.parent().unwrap_or(Path::new(".")).to_path_buf(),
            min_free: 0,
        })
    }

    pub fn read(&self) -> Result<ReadTransaction, StoreError> {
        Ok(self.db.begin_read()?)
    }

    /// A write transaction; its commit is durable (fsync) when it returns.
    ///
    /// Refused with [`StoreError::Full`] while the file system has less than the reserve set
    /// by [`Store::reserve_free_space`]: redb turns any failed write (a full disk included)
    /// into a permanent failure of the open database, reads too, until it is opened again.
    /// Checking before every write transaction keeps a full disk from ever reaching redb, so
    /// writes fail cleanly while the disk is full and work again as soon as space returns.
    pub fn write(&self) -> Result<WriteTransaction, StoreError> {
        self.check_free_space()?;
        Ok(self.db.begin_write()?)
    }

    /// Sets the least free space (bytes) on the data dir's file system for writes to begin.
    pub fn reserve_free_space(mut self, bytes: u64) -> Store {
        self.min_free = bytes;
        self
    }

    /// `Err(StoreError::Full)` while a write transaction would be refused for lack of space.
    pub fn check_free_space(&self) -> Result<(), StoreError> {
        if self.min_free == 0 {
            return Ok(());
        }
        // A file system that cannot tell its free space is not refused: the write decides.
        let Ok(stat) = rustix::fs::statvfs(&self.dir) else {
            return Ok(());
        };
        let available = stat.f_bavail.saturating_mul(stat.f_frsize);
        if available < self.min_free {
            return Err(StoreError::Full { available });
        }
        Ok(())
    }
}

/// Something done to each table of `intake.redb` (see [`visit_main_tables`]).
trait TableVisitor {
    fn visit<K: Key + 'static, V: Value + 'static>(
        &mut self,
        table: TableDefinition<'static, K, V>,
    ) -> Result<(), StoreError>;
}

/// Every table of `intake.redb`: the one list that creating the store and copying it for a
/// backup both follow, so a new table is never left out of backups.
fn visit_main_tables(v: &mut impl TableVisitor) -> Result<(), StoreError> {
    v.visit(META)?;
    v.visit(ACCOUNTS)?;
    v.visit(ACCOUNT_EMAILS)?;
    v.visit(TOKENS)?;
    v.visit(ENDPOINTS)?;
    v.visit(ENDPOINT_SLUGS)?;
    v.visit(API_KEYS)?;
    v.visit(RECORDS)?;
    v.visit(CHANGES)?;
    v.visit(IDEMPOTENCY)?;
    v.visit(IDEMPOTENCY_EXPIRY)?;
    v.visit(OUTBOX)?;
    v.visit(SESSIONS)?;
    v.visit(INVITATIONS)?;
    v.visit(INVITATION_TOKENS)?;
    v.visit(COLLABORATORS)?;
    v.visit(NOTIFICATIONS)?;
    v.visit(AUDIT)?;
    v.visit(USAGE)?;
    v.visit(USAGE_DAYS)?;
    v.visit(OWNER_WEBHOOKS)?;
    v.visit(DELIVERIES)?;
    v.visit(DELIVERIES_DUE)?;
    v.visit(PARTITION_DELIVERIES)?;
    v.visit(RECORD_DELIVERIES)?;
    v.visit(DELIVERY_ATTEMPTS)?;
    v.visit(FAILURE_MAILS)?;
    v.visit(WEBHOOK_SECRETS)?;
    Ok(())
}

/// Makes sure each table exists.
struct Creator<'a> {
    txn: &'a WriteTransaction,
}

impl TableVisitor for Creator<'_> {
    fn visit<K: Key + 'static, V: Value + 'static>(
        &mut self,
        table: TableDefinition<'static, K, V>,
    ) -> Result<(), StoreError> {
        self.txn.open_table(table)?;
        Ok(())
    }
}

/// Copies each table, row by row, from a read snapshot into a new file's write transaction.
struct Copier<'a> {
    from: &'a ReadTransaction,
    to: &'a WriteTransaction,
}

impl TableVisitor for Copier<'_> {
    fn visit<K: Key + 'static, V: Value + 'static>(
        &mut self,
        table: TableDefinition<'static, K, V>,
    ) -> Result<(), StoreError> {
        let source = self.from.open_table(table)?;
        let mut target = self.to.open_table(table)?;
        for row in source.iter()? {
            let (key, value) = row?;
            target.insert(key.value(), value.value())?;
        }
        Ok(())
    }
}

/// Takes the next value of a counter kept in `META` (starting at 1).
pub fn next_id(txn: &WriteTransaction, counter: &str) -> Result<u64, StoreError> {
    let next = read_counter(&txn.open_table(META)?, counter)? + 1;
    write_counter(txn, counter, next)?;
    Ok(next)
}

/// A counter kept in `META`; 0 when never written.
pub fn read_counter(
    meta: &impl ReadableTable<&'static str, &'static [u8]>,
    counter: &str,
) -> Result<u64, StoreError> {
    match meta.get(counter)? {
        Some(v) => {
            let bytes: [u8; 8] = v
                .value()
                .try_into()
                .map_err(|_| StoreError::Corrupt(format!("counter {counter}")))?;
            Ok(u64::from_be_bytes(bytes))
        }
        None => Ok(0),
    }
}

pub fn write_counter(txn: &WriteTransaction, counter: &str, value: u64) -> Result<(), StoreError> {
    txn.open_table(META)?
        .insert(counter, value.to_be_bytes().as_slice())?;
    Ok(())
}
