//! What backups need of a store kept in a file of the data dir (redb): a consistent copy of the
//! live store, and, for a restore into a stopped server's data dir, checks of the file at rest.
//! A store kept elsewhere (a database server) is backed up by that server's own tools instead.

use std::path::Path;

use crate::store::StoreError;

/// A live store that copies itself into one file.
pub trait BackupSource: Send + Sync {
    /// Copies the whole store into a new file at `path`, read from one snapshot: every commit
    /// made before it began and nothing committed while it runs. Writers go on meanwhile.
    /// Returns the last change-log sequence the copy contains.
    fn snapshot_into(&self, path: &Path) -> Result<u64, StoreError>;
}

/// The store's file at rest, as a restore handles it.
pub trait StoreFile {
    /// Whether a running server holds the store file at `path`.
    fn in_use(path: &Path) -> bool;

    /// Opens the store file at `path` and closes it again: it is sound, and of a version this
    /// binary serves (upgrading it at start if older).
    fn check(path: &Path) -> Result<(), StoreError>;

    /// The erasures the store file at `path` records (`store::erasures`), oldest first; none
    /// for a file from before erasures existed.
    fn erasures(path: &Path) -> Result<Vec<crate::store::ErasureRow>, StoreError>;
}
