//! The redb backend: one `intake.redb` file holding every table, and `requests.redb` for the
//! request log. The only code of the crate that names redb or a table.
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
//! - Most rows are JSON (`to_json`, `from_json`); ids are counters in `META` (`next_id`).

mod accounts;
mod backup;
mod changes;
mod compact;
mod deliveries;
mod endpoints;
mod erased_leaves;
mod erasures;
mod events;
mod gauges;
pub mod layout;
mod mail;
mod payload;
mod purge;
mod records;
mod request_log;
mod scrub;
pub mod tables;
mod transfer;

pub use compact::{compact_file, recompress_file};
pub use transfer::RedbExport;
mod tx;
mod usage;
mod webhooks;

pub use tx::RedbWrite;
// Transitional: the dispatcher and the delivery log list deliveries as due through their own
// redb transactions until they are on the seam.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use redb::{
    Database, Key, ReadTransaction, ReadableDatabase, ReadableTable, TableDefinition, Value,
    WriteTransaction,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::core::quiet_panic;
use crate::store::StoreError;
use payload::{DictionaryPin, PayloadCodec};
pub use tables::*;

/// The layout version of `intake.redb` this binary writes. It moves with every change of its
/// tables or row encodings, together with the step that upgrades the version before
/// (`layout.rs`).
const SCHEMA_VERSION: u32 = 1;

/// The layout version of `requests.redb`, kept apart: the request log changes on its own.
const REQUEST_LOG_SCHEMA_VERSION: u32 = 1;

macro_rules! redb_errors {
    ($($t:ty),*) => {$(
        impl From<$t> for StoreError {
            fn from(err: $t) -> Self {
                StoreError::from_redb(err.into())
            }
        }
    )*};
}
redb_errors!(
    redb::Error,
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError
);

impl StoreError {
    fn from_redb(err: redb::Error) -> StoreError {
        StoreError::Backend(Box::new(err))
    }
}

pub fn to_json<T: Serialize>(row: &T) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(row).map_err(|e| StoreError::Corrupt(format!("cannot encode row: {e}")))
}

pub fn from_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, StoreError> {
    serde_json::from_slice(bytes)
        .map_err(|e| StoreError::Corrupt(format!("cannot decode row: {e}")))
}

/// The open database.
pub struct RedbStore {
    db: Database,
    /// How record values are laid out, with the store's payload dictionaries.
    codec: Arc<PayloadCodec>,
    /// The file; its folder's file system is what [`RedbStore::write`] checks for space.
    file: PathBuf,
    /// Least free space for a write transaction to begin; 0 turns the check off.
    min_free: u64,
    /// Held while a write transaction begins, and by the scrub across the transactions of its
    /// end (`scrub.rs`) so that no other write comes between them.
    writers: Mutex<()>,
    /// Read snapshots open for as long as their reader needs (exports, backups): each keeps
    /// every page freed after it began, which the scrub waits for (`scrub.rs`).
    long_reads: Arc<AtomicUsize>,
}

/// One open long read snapshot, counted in `RedbStore::long_reads` until dropped.
struct LongRead(Arc<AtomicUsize>);

impl Drop for LongRead {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl RedbStore {
    /// Opens (or creates) the redb file and makes sure every table exists.
    /// Opens (or creates) the main file, `intake.redb`, and makes sure every table exists.
    /// `cache_bytes` bounds redb's page cache, which is most of the server's memory.
    pub fn open(path: &Path, cache_bytes: usize) -> Result<RedbStore, StoreError> {
        RedbStore::open_with(path, cache_bytes, &layout::MAIN, |txn| {
            visit_main_tables(&mut Creator { txn })
        })
    }

    /// Opens (or creates) `requests.redb`, the request log. It is a file of its own so that
    /// logging every call never holds the write lock the data path commits under.
    pub fn open_request_log(path: &Path, cache_bytes: usize) -> Result<RedbStore, StoreError> {
        RedbStore::open_with(path, cache_bytes, &layout::REQUEST_LOG, |txn| {
            visit_request_log_tables(&mut Creator { txn })
        })
    }

    /// What opening `intake.redb` at `path` would do with its layout, read without writing.
    pub fn inspect(path: &Path) -> Result<layout::Inspected, StoreError> {
        layout::inspect(&layout::MAIN, path)
    }

    /// What opening `requests.redb` at `path` would do with its layout, read without writing.
    pub fn inspect_request_log(path: &Path) -> Result<layout::Inspected, StoreError> {
        layout::inspect(&layout::REQUEST_LOG, path)
    }

    /// Opens the file, checks its layout version and upgrades an older one (`layout.rs`).
    fn open_with(
        path: &Path,
        cache_bytes: usize,
        layout: &layout::Layout,
        create_tables: impl FnOnce(&WriteTransaction) -> Result<(), StoreError>,
    ) -> Result<RedbStore, StoreError> {
        guard_damage(path, || {
            RedbStore::open_unchecked(path, cache_bytes, layout, create_tables)
        })
    }

    fn open_unchecked(
        path: &Path,
        cache_bytes: usize,
        layout: &layout::Layout,
        create_tables: impl FnOnce(&WriteTransaction) -> Result<(), StoreError>,
    ) -> Result<RedbStore, StoreError> {
        let create = || Database::builder().set_cache_size(cache_bytes).create(path);
        let mut db = create()?;
        let found = layout.found(&db, path)?;
        if let layout::Found::Older(version) = found {
            // The copy is taken of the closed file: an open one is marked for repair.
            drop(db);
            layout::back_up(path, version)?;
            db = create()?;
        }
        let txn = db.begin_write()?;
        layout.write_version(&txn, found, path)?;
        create_tables(&txn)?;
        txn.commit()?;
        if let layout::Found::Older(version) = found {
            log::info!(
                "{}: upgraded from layout version {version} to {}",
                path.display(),
                layout.version
            );
        }
        Ok(RedbStore {
            codec: Arc::new(PayloadCodec::load(&db)?),
            db,
            file: path.to_path_buf(),
            min_free: 0,
            writers: Mutex::new(()),
            long_reads: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// A read snapshot, with the payload dictionaries its records may need.
    pub fn read(&self) -> Result<Snapshot, StoreError> {
        // Pinned first: a dictionary removed after the pin stays in memory for the snapshot.
        let dictionaries = self.codec.pin();
        Ok(Snapshot {
            txn: self.db.begin_read()?,
            _dictionaries: dictionaries,
        })
    }

    /// A write transaction; its commit is durable (fsync) when it returns.
    ///
    /// Refused with [`StoreError::Full`] while the file system has less than the reserve set
    /// by [`RedbStore::reserve_free_space`]: redb turns any failed write (a full disk included)
    /// into a permanent failure of the open database, reads too, until it is opened again.
    /// Checking before every write transaction keeps a full disk from ever reaching redb, so
    /// writes fail cleanly while the disk is full and work again as soon as space returns.
    pub fn write(&self) -> Result<WriteTransaction, StoreError> {
        self.check_free_space()?;
        let _writers = self.writers();
        Ok(self.db.begin_write()?)
    }

    /// The turn to begin a write transaction (see the field `writers`).
    fn writers(&self) -> MutexGuard<'_, ()> {
        self.writers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts a read snapshot that may stay open long, until the guard is dropped.
    fn long_read_begins(&self) -> LongRead {
        self.long_reads.fetch_add(1, Ordering::SeqCst);
        LongRead(self.long_reads.clone())
    }

    /// Sets the least free space (bytes) on the data dir's file system for writes to begin.
    pub fn reserve_free_space(mut self, bytes: u64) -> RedbStore {
        self.min_free = bytes;
        self
    }

    /// `Err(StoreError::Full)` while a write transaction would be refused for lack of space.
    pub fn check_free_space(&self) -> Result<(), StoreError> {
        if self.min_free == 0 {
            return Ok(());
        }
        // A file system that cannot tell its free space is not refused: the write decides.
        let dir = self.file.parent().unwrap_or(Path::new("."));
        let Ok(stat) = rustix::fs::statvfs(dir) else {
            return Ok(());
        };
        let available = stat.f_bavail.saturating_mul(stat.f_frsize);
        if available < self.min_free {
            return Err(StoreError::Full { available });
        }
        Ok(())
    }
}

/// A read transaction of a [`RedbStore`]. It keeps in memory the payload dictionaries removed
/// after it began, which records it reads may still be compressed with
/// ([`PayloadCodec::pin`]).
pub struct Snapshot {
    txn: ReadTransaction,
    _dictionaries: DictionaryPin,
}

impl std::ops::Deref for Snapshot {
    type Target = ReadTransaction;

    fn deref(&self) -> &ReadTransaction {
        &self.txn
    }
}

/// Runs `read` on the file at `path`. Damage found there (redb reports some as `Corrupted`,
/// and panics on others) is [`StoreError::Damaged`], naming the file and the remedy, never a
/// panic.
/// An I/O error on one of the store's files, naming it.
fn io_error(path: &Path, err: std::io::Error) -> StoreError {
    StoreError::Backend(format!("{}: {err}", path.display()).into())
}

fn guard_damage<T>(
    path: &Path,
    read: impl FnOnce() -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    let damaged = |detail: String| StoreError::Damaged {
        path: path.display().to_string(),
        detail,
    };
    match quiet_panic::catch(read) {
        Err(panic) => Err(damaged(format!("redb: {panic}"))),
        Ok(Err(StoreError::Backend(err))) => match err.downcast::<redb::Error>() {
            Ok(err) => match *err {
                redb::Error::Corrupted(detail) => Err(damaged(detail)),
                err => Err(StoreError::from_redb(err)),
            },
            Err(err) => Err(StoreError::Backend(err)),
        },
        Ok(result) => result,
    }
}

/// Something done to each table of a store file (see [`visit_main_tables`] and
/// [`visit_request_log_tables`]).
trait TableVisitor {
    fn visit<K: Key + 'static, V: Value + 'static>(
        &mut self,
        table: TableDefinition<'static, K, V>,
    ) -> Result<(), StoreError>;
}

/// Every table of `intake.redb`: the one list that creating the store, copying it for a
/// backup and rewriting it when compacting all follow, so a new table is never left out.
fn visit_main_tables(v: &mut impl TableVisitor) -> Result<(), StoreError> {
    v.visit(META)?;
    v.visit(ACCOUNTS)?;
    v.visit(ACCOUNT_EMAILS)?;
    v.visit(TOKENS)?;
    v.visit(ENDPOINTS)?;
    v.visit(ENDPOINT_SLUGS)?;
    v.visit(API_KEYS)?;
    v.visit(RECORDS)?;
    v.visit(PAYLOAD_DICTIONARIES)?;
    v.visit(DICTIONARY_SAMPLES)?;
    v.visit(CHANGES)?;
    v.visit(EVENTS)?;
    v.visit(EVENTS_TRIMMED)?;
    v.visit(IDEMPOTENCY)?;
    v.visit(IDEMPOTENCY_EXPIRY)?;
    v.visit(OUTBOX)?;
    v.visit(SESSIONS)?;
    v.visit(PASSWORD_RESETS)?;
    v.visit(INVITATIONS)?;
    v.visit(INVITATION_TOKENS)?;
    v.visit(COLLABORATORS)?;
    v.visit(NOTIFICATIONS)?;
    v.visit(AUDIT)?;
    v.visit(USAGE)?;
    v.visit(USAGE_DAYS)?;
    v.visit(WEBHOOK_SETTINGS)?;
    v.visit(DELIVERIES)?;
    v.visit(DELIVERIES_DUE)?;
    v.visit(PARTITION_DELIVERIES)?;
    v.visit(RECORD_DELIVERIES)?;
    v.visit(DELIVERY_ATTEMPTS)?;
    v.visit(FAILURE_MAILS)?;
    v.visit(WEBHOOK_SECRETS)?;
    v.visit(ERASURES)?;
    v.visit(ERASED_KEYS)?;
    Ok(())
}

/// Visits each table of `requests.redb`.
fn visit_request_log_tables(v: &mut impl TableVisitor) -> Result<(), StoreError> {
    v.visit(REQUEST_LOG)
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

/// The store's contract (`store::conformance`) on redb, each check on a fresh file.
#[cfg(test)]
mod conformance {
    /// A store in a temporary folder, which goes with it.
    struct TempStore {
        store: super::RedbStore,
        _dir: tempfile::TempDir,
    }

    impl std::ops::Deref for TempStore {
        type Target = super::RedbStore;
        fn deref(&self) -> &super::RedbStore {
            &self.store
        }
    }

    fn fresh() -> TempStore {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let store = super::RedbStore::open(&dir.path().join("t.redb"), 1 << 22).expect("open");
        TempStore { store, _dir: dir }
    }

    crate::store::conformance::conformance_tests!(fresh());
}
