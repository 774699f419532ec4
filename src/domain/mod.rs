//! Domain services: the rules of every operation, above the store and below HTTP.
//!
//! Services take explicit handles ([`handles::Handles`]: the store, the clock and the
//! after-commit path; the sealer; caches), never the server's state. Every write goes through
//! `Handles::write`: one durable transaction, then the one after-commit path.
//!
//! - [`records`]: create / read / list / replace / delete; payload validation (stored as sent:
//!   only whitespace and string escapes normalised, numbers untouched) and required-field
//!   rules; `RecordsBody`, the one writer of record JSON.
//! - [`batch`]: batch ingest: a body of up to 1,000 records (NDJSON or a JSON array), each
//!   checked as a single create is, stored in one commit or not at all.
//! - [`export`]: an endpoint's records in a window as NDJSON, CSV or a JSON array, streamed
//!   in chunks from one snapshot, the key checked again as it runs.
//! - [`ingest`]: the write queue: a write waits there for the ingest writer's commit, and its
//!   202 leaves only after that commit.
//! - [`poll`]: the oldest-first feed, the in-flight registry that keeps it gap-free, and the
//!   read-ahead for a draining consumer.
//! - [`stream`]: the change stream (Server-Sent Events): each processed write, live, from the
//!   store's event log, resumable with `Last-Event-ID`, with bounded buffers per reader.
//! - [`search`]: substring search: query rules, the exact-results planner (index or
//!   newest-first store walk), the allocation-free substring test, case folding and the
//!   positional trigram tokenizer, and the `SearchIndex` trait the tantivy index implements.
//! - [`endpoints`]: endpoints, their keys, who may see them, and authorising a data call's key
//!   with its permissions (cached until the next change).
//! - [`collaborators`]: invitations, accepting them, collaboration keys and permissions.
//! - [`deploy`]: the deploy workflow: requests, approval, rejection, direct deploy.
//! - [`accounts`]: the owner and member accounts, personal API tokens, suspension.
//! - [`sessions`]: dashboard login, session cookies, and the failed-login limit.
//! - [`notifications`]: stored notifications per account.
//! - [`audit`]: the per-endpoint audit log of every change.
//! - [`usage`]: monthly data-call counters and the quota (429), per-day counts for the chart.
//! - [`retention`]: the scheduled purge of records (and their events) past their
//!   environment's retention.
//! - [`sealing_key`]: every node of a store seals with the store's key.
//! - [`migrate`]: copying a single-node install into PostgreSQL.
//! - [`jobs`]: periodic jobs run once per period across the nodes of a shared store.
//! - [`health`]: the readiness checks of `GET /readyz` and the gauges of `GET /metrics`.
//! - [`mail`]: the outbox: a message is queued in the transaction of the change that causes
//!   it and sent later by the mail worker.
//! - [`webhooks`]: owner and caller webhooks: the deliveries a write makes, the owner's
//!   settings, the delivery log and redelivery, Standard Webhooks signing, the signing
//!   secrets with their 24-hour changeover.
//! - [`backup`]: backup archives (a snapshot of the store, the key-encryption key, a
//!   manifest), scheduled backups with rotation, and restoring into a stopped server's data
//!   dir.
//! - [`error`]: the service error.
//! - [`handles`]: the handles every service is given.

pub mod accounts;
pub mod api_keys;
pub mod audit;
pub mod backup;
pub mod batch;
pub mod collaborators;
pub mod deploy;
pub mod endpoint_deletion;
pub mod endpoints;
pub mod erasures;
pub mod error;
pub mod export;
pub mod handles;
pub mod health;
pub mod ingest;
pub mod jobs;
pub mod mail;
pub mod migrate;
pub mod notifications;
pub mod password_reset;
pub mod poll;
pub mod records;
pub mod retention;
pub mod schema;
pub mod sealing_key;
pub mod search;
pub mod sessions;
pub mod stream;
pub mod usage;
pub mod webhooks;
