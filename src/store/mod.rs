//! The storage seam: what the services may ask of a store, and nothing about how it is kept.
//!
//! Everything above this module talks to a [`Store`] (a trait object) and the transactions it
//! hands out, whichever backend implements them: [`redb`] (the embedded file of one node, the
//! default) or [`postgres`] (a database any number of nodes share). Each is the only code of
//! the crate that names its database or a table; no caller knows which one it has.
//!
//! The shape, and why:
//! - **Reads** go through [`Store::read`]: one consistent snapshot ([`ReadTx`]) for as many
//!   typed reads as a service needs.
//! - **Writes** go through [`write`]: the closure receives a [`WriteTx`], makes typed changes
//!   (each area's trait below), and everything it did commits durably together or not at all.
//!   This is how a management change lands with its audit entry, notifications and outbox
//!   e-mail in one commit without any service seeing a transaction type of a backend. The
//!   closure may be run again by a backend that retries on a serialisation conflict, so it
//!   has no effects of its own outside the transaction: what must happen after the commit
//!   (wake a worker, clear a cache) is reported by the store as [`Effects`] and carried out in
//!   one place (`domain::Handles::write`).
//! - **The hot paths** are whole units of work on [`Store`] itself (the record store's batch
//!   apply, list, poll page, delivery claims...), so a backend can make each one a single
//!   round trip.
//! - Ids come from the store (each `insert_*`/`append_*` returns the new id), times from the
//!   caller's injected clock, never from the database.
//!
//! Rows ([`rows`]) are plain data: every backend keeps the same fields.

pub mod accounts;
pub mod backup;
pub mod changes;
pub mod cluster;
pub mod compression;
#[cfg(test)]
pub(crate) mod conformance;
pub mod endpoints;
pub mod erasures;
pub mod events;
pub mod mail;
pub mod postgres;
pub mod purge;
pub mod records;
pub mod redb;
pub mod request_log;
pub mod rows;
pub mod transfer;
pub mod usage;
pub mod webhooks;

pub use rows::*;

use std::path::Path;
use std::sync::Arc;

use crate::core::clock::Timestamp;

/// A store failed, or holds something it cannot read. Never a refusal of a request: those are
/// the service's errors.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The backend's error, shown with its causes (a database error's message is one).
    #[error("storage error: {}", with_causes(.0.as_ref()))]
    Backend(Box<dyn std::error::Error + Send + Sync>),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// A file of the data dir in a layout this binary does not open: the message names the
    /// file, both versions and what to do (`store::redb::layout`).
    #[error("{0}")]
    Schema(String),
    #[error("the disk holding the data dir is full ({available} bytes available)")]
    Full { available: u64 },
    #[error(
        "{path} is damaged ({detail}); stop here and restore the latest backup into the data \
         dir with `intake restore --from BACKUP.tar --force` (docs/src/operations.md, \"Backups\")"
    )]
    Damaged { path: String, detail: String },
    /// The database cannot be used as it is: too old, migrated by a newer intake, or set up
    /// in a way that would break intake's promises.
    #[error("the database cannot be used: {0}")]
    Database(String),
    /// A change-log read of a store that keeps none (see [`Store::change_log`]).
    #[error("this store keeps no change log")]
    NoChangeLog,
    /// The closure of a [`write`] returned an error, so nothing was committed (the error
    /// itself reaches the caller of [`write`]).
    #[error("the write was abandoned by its caller")]
    Abandoned,
}

/// An error with its whole chain of causes (a TLS handshake's names the certificate problem,
/// a database error its message), which its own `Display` alone does not say.
pub(crate) fn with_causes(err: &(dyn std::error::Error + 'static)) -> String {
    let mut message = err.to_string();
    let mut cause = err.source();
    while let Some(err) = cause {
        let text = err.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        cause = err.source();
    }
    message
}

/// What a committed write changed that work outside the store must follow: each flag is set
/// by the store method that made such a change, so no caller has to remember them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Effects {
    /// An e-mail was queued in the outbox: wake the mail worker.
    pub mail_queued: bool,
    /// A webhook delivery became due: wake the dispatcher.
    pub deliveries_due: bool,
    /// Endpoints, keys, collaborators or accounts changed: clear the access cache so the next
    /// data call sees the change.
    pub access_changed: bool,
    /// A webhook recovery is running: wake the dispatcher's recovery walk.
    pub recoveries: bool,
    /// The partitions whose records changed (written, deleted or purged), in order, each
    /// once: wake the search indexer, which follows the change log, and those partitions'
    /// change streams.
    pub records_changed: Vec<Partition>,
    /// The partitions an erasure removed records of, in order, each once: besides the wake-ups
    /// of `records_changed`, drop every copy of their events kept in memory (the frames change
    /// streams share).
    pub records_erased: Vec<Partition>,
}

impl Effects {
    /// The effects of a commit that changed the records of `partitions` (in any order, with
    /// repeats) and nothing else.
    pub fn records_changed(partitions: impl IntoIterator<Item = Partition>) -> Effects {
        let mut records_changed: Vec<Partition> = partitions.into_iter().collect();
        records_changed.sort_unstable();
        records_changed.dedup();
        Effects {
            records_changed,
            ..Effects::default()
        }
    }

    /// These effects, with every partition whose records changed reported as erased too.
    pub fn and_erased(mut self) -> Effects {
        self.records_erased = self.records_changed.clone();
        self
    }

    pub fn merge(&mut self, other: Effects) {
        self.mail_queued |= other.mail_queued;
        self.deliveries_due |= other.deliveries_due;
        self.access_changed |= other.access_changed;
        self.recoveries |= other.recoveries;
        merge_partitions(&mut self.records_changed, other.records_changed);
        merge_partitions(&mut self.records_erased, other.records_erased);
    }
}

/// Adds `more` to the ascending, repeat-free `partitions`.
fn merge_partitions(partitions: &mut Vec<Partition>, more: Vec<Partition>) {
    if !more.is_empty() {
        partitions.extend(more);
        partitions.sort_unstable();
        partitions.dedup();
    }
}

/// The kinds of ids a store hands out: each kind counts up from 1 on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdKind {
    Account,
    Endpoint,
    Invitation,
    Notification,
    Audit,
    Mail,
    Erasure,
}

/// One consistent snapshot of the store: every read of it sees the same commits.
pub trait ReadTx:
    accounts::AccountsRead
    + endpoints::EndpointsRead
    + erasures::ErasuresRead
    + mail::MailRead
    + records::RecordsRead
    + webhooks::WebhooksRead
{
    /// The store's own text search, when it has one (PostgreSQL); `None` when a search index
    /// beside the store answers instead (redb, see `workers::search_index`).
    fn text_search(&self) -> Option<&dyn records::TextSearch> {
        None
    }
}

/// One write transaction: reads see its own changes; all of it commits, or none.
pub trait WriteTx:
    ReadTx
    + accounts::AccountsWrite
    + endpoints::EndpointsWrite
    + erasures::ErasuresWrite
    + mail::MailWrite
    + webhooks::WebhooksWrite
{
    /// A new id of `kind`: higher than every id of that kind committed before.
    fn next_id(&mut self, kind: IdKind) -> Result<u64, StoreError>;
}

/// What the store holds that `GET /metrics` shows as gauges.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreGauges {
    /// Webhook deliveries waiting for an attempt: due now, or scheduled for a retry.
    pub webhook_pending: u64,
    /// Of those, deliveries scheduled for a retry later than now.
    pub webhook_retry_backlog: u64,
    /// E-mails in the outbox by status.
    pub mail_queued: u64,
    pub mail_sent: u64,
    pub mail_failed: u64,
    /// zstd dictionaries of stored payloads (see [`compression`]).
    pub payload_dictionaries: u64,
}

/// A store: the data of one intake installation (one data dir, or one database shared by
/// several nodes).
pub trait Store:
    Send
    + Sync
    + accounts::AccountsStore
    + events::EventsStore
    + mail::MailStore
    + purge::PurgeStore
    + records::RecordsStore
    + usage::UsageStore
{
    /// A snapshot to read from.
    fn read(&self) -> Result<Box<dyn ReadTx + '_>, StoreError>;

    /// A snapshot that may stay open for as long as its reader needs (an export streamed to a
    /// slow client): each read in it has a request's patience, nothing bounds the whole.
    fn long_read(&self) -> Result<Box<dyn ReadTx + '_>, StoreError> {
        self.read()
    }

    /// Runs `work` in one write transaction and commits it durably (the commit has reached the
    /// disk when this returns). When `work` fails nothing is written. Use [`write`], which
    /// carries the closure's own result and error type.
    fn write_with(
        &self,
        work: &mut dyn FnMut(&mut dyn WriteTx) -> Result<(), StoreError>,
    ) -> Result<Effects, StoreError>;

    /// The value every node of this store shares under `name`: the stored one, or `proposed`,
    /// stored now, when there is none yet (the first node to ask decides).
    fn shared_value(&self, name: &str, proposed: &[u8]) -> Result<Vec<u8>, StoreError>;

    /// `Err` while a write would be refused before it begins (the disk holding the store is
    /// nearly full, the database server out of reach or read-only): readiness reports it. It
    /// answers from what the store knows, never waiting for a server.
    fn check_writable(&self) -> Result<(), StoreError>;

    /// The gauges of `GET /metrics` as of `now`.
    fn gauges(&self, now: Timestamp) -> Result<StoreGauges, StoreError>;

    /// The change log a search index kept beside the store follows: `None` for a store that
    /// searches its records itself (PostgreSQL, see [`Store::text_search`]).
    fn change_log(&self) -> Option<&dyn changes::ChangesStore>;

    /// What the nodes sharing this store tell each other through it: `None` for a store only
    /// one node uses (redb).
    fn cluster(&self) -> Option<&dyn cluster::ClusterStore>;

    /// How rows of another store are copied into this one (`intake migrate`): `None` for a
    /// store that is only ever created empty (redb).
    fn import(&self) -> Option<&dyn transfer::Import>;

    /// The dictionaries a store trains on its own records to compress them: `None` for a
    /// store that compresses nothing itself (PostgreSQL).
    fn payload_dictionaries(&self) -> Option<&dyn compression::PayloadDictionaries>;

    /// How to copy this store into a backup archive: `None` for a store kept by a database
    /// server, which its own tools back up.
    fn backup_source(&self) -> Option<&dyn backup::BackupSource>;

    /// Overwrites the free pages of the store's file, which keep the bytes of deleted and
    /// superseded rows until reused, while the store stays in use: `None` for a store kept by a
    /// database server, whose free space is the server's.
    fn scrub_free_space(&self) -> Result<Option<ScrubReport>, StoreError>;
}

/// What a scrub of a store file's free space did ([`Store::scrub_free_space`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScrubReport {
    /// Bytes of filler written over pages that were free.
    pub bytes_overwritten: u64,
    /// Write transactions it committed.
    pub transactions: u64,
    /// Free pages it could not show overwritten (pages kept by read snapshots that closed
    /// while it ended, again and again): they may still hold deleted bytes until the next
    /// scrub.
    pub unreached_pages: u64,
    /// A read snapshot (an export, a backup) was open: the pages freed since it began are kept
    /// for it and were not reached. The scrub is to run again once it has closed.
    pub held_by_snapshot: bool,
}

impl ScrubReport {
    /// Every page that was free when the scrub began has been overwritten.
    pub fn complete(&self) -> bool {
        self.unreached_pages == 0 && !self.held_by_snapshot
    }
}

/// The change log of `store` (see [`Store::change_log`]).
pub fn change_log(store: &dyn Store) -> Result<&dyn changes::ChangesStore, StoreError> {
    store.change_log().ok_or(StoreError::NoChangeLog)
}

/// Compacts the embedded store file at `path` (`intake.redb`, `requests.redb`) of a stopped
/// server: gives the pages that deletes, trims and purges freed back to the file system, and
/// writes the file anew so that none of them, with the deleted data it held, is left in it.
/// Returns its size before and after, in bytes.
pub fn compact_embedded(path: &Path) -> Result<(u64, u64), StoreError> {
    self::redb::compact_file(path)
}

/// Stores the records of the embedded store file at `path` (`intake.redb`) of a stopped
/// server anew, compressed with a payload dictionary trained afresh on them (see
/// [`compression`]), and removes the older dictionaries, which hold pieces of the records they
/// were trained on; `now` is the new dictionary's training time. Refused while a server holds
/// the file.
pub fn recompress_embedded(
    path: &Path,
    now: Timestamp,
) -> Result<compression::Recompressed, StoreError> {
    self::redb::recompress_file(path, now)
}

/// The embedded store's file at rest (restore checks it): redb's.
pub type EmbeddedFile = self::redb::RedbStore;

/// Opens (or creates) the embedded store file at `path` (`intake.redb`) with `cache_bytes` of
/// page cache; writes are refused while its file system has less than `min_free` bytes free
/// (0: no reserve).
pub fn open_embedded(
    path: &Path,
    cache_bytes: usize,
    min_free: u64,
) -> Result<Arc<dyn Store>, StoreError> {
    Ok(Arc::new(
        self::redb::RedbStore::open(path, cache_bytes)?.reserve_free_space(min_free),
    ))
}

/// Connects to the PostgreSQL database of `config`, bringing its schema up to date (see
/// `store::postgres`).
pub fn open_postgres(
    config: &crate::core::config::PostgresConfig,
) -> Result<Arc<dyn Store>, StoreError> {
    Ok(Arc::new(self::postgres::PgStore::open(config)?))
}

/// Opens the embedded store file at `path` (`intake.redb`) to copy it elsewhere; refused while
/// a server holds it.
pub fn open_embedded_export(path: &Path) -> Result<Box<dyn transfer::Export>, StoreError> {
    if !path.exists() {
        return Err(StoreError::Backend(
            format!(
                "{} does not exist: is this an intake data dir?",
                path.display()
            )
            .into(),
        ));
    }
    // A small cache: each page is read once.
    Ok(Box::new(self::redb::RedbExport::open(
        path,
        16 * 1024 * 1024,
    )?))
}

/// Connects to the request log's tables in the PostgreSQL database of `config`, on a small pool
/// of its own so that logging never waits for the data path's connections.
pub fn open_postgres_request_log(
    config: &crate::core::config::PostgresConfig,
) -> Result<Arc<dyn request_log::RequestLogStore>, StoreError> {
    let mut config = config.clone();
    config.pool_size = 2;
    Ok(Arc::new(self::postgres::PgStore::open(&config)?))
}

/// Opens (or creates) the embedded request log at `path` (`requests.redb`), like
/// [`open_embedded`].
pub fn open_embedded_request_log(
    path: &Path,
    cache_bytes: usize,
    min_free: u64,
) -> Result<Arc<dyn request_log::RequestLogStore>, StoreError> {
    Ok(Arc::new(
        self::redb::RedbStore::open_request_log(path, cache_bytes)?.reserve_free_space(min_free),
    ))
}

/// What starting a server would do with an embedded file's layout version (see
/// [`inspect_embedded`]).
pub use self::redb::layout::{Found as LayoutFound, Inspected as FileLayout};

/// What starting a server would do with the layout of the embedded store file at `path`
/// (`intake.redb`), read without writing to the file or waiting for it (`intake check`). A
/// layout the server would refuse is the error it would refuse it with.
pub fn inspect_embedded(path: &Path) -> Result<FileLayout, StoreError> {
    self::redb::RedbStore::inspect(path)
}

/// [`inspect_embedded`] for the embedded request log at `path` (`requests.redb`).
pub fn inspect_embedded_request_log(path: &Path) -> Result<FileLayout, StoreError> {
    self::redb::RedbStore::inspect_request_log(path)
}

/// Runs `work` in one durable write transaction of `store`; returns its value and what the
/// commit changed ([`Effects`]), or its error with nothing written. `work` may run more than
/// once (a backend may retry a conflicting transaction), so it only reads and writes `tx`.
pub fn write<T, E: From<StoreError>>(
    store: &dyn Store,
    mut work: impl FnMut(&mut dyn WriteTx) -> Result<T, E>,
) -> Result<(T, Effects), E> {
    let mut value = None;
    let mut refused = None;
    let committed = store.write_with(&mut |tx| match work(tx) {
        Ok(v) => {
            value = Some(v);
            refused = None;
            Ok(())
        }
        Err(e) => {
            refused = Some(e);
            Err(StoreError::Abandoned)
        }
    });
    if let Some(e) = refused {
        return Err(e);
    }
    let effects = committed?;
    match value {
        Some(v) => Ok((v, effects)),
        None => Err(StoreError::Abandoned.into()),
    }
}
