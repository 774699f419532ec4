//! Compaction of a stopped server's redb files: pages freed by deletes, change-log trims and
//! purges are reused by later writes but never given back to the file system; compacting moves
//! the live pages down and truncates the file.

use std::path::Path;

use redb::{Database, DatabaseError};

use super::RedbStore;
use crate::store::StoreError;

/// Compresses the plain records of the store file at `path` (see
/// [`RedbStore::compress_plain_records`]); returns how many. Refused while a server holds it.
pub fn compress_file(path: &Path) -> Result<u64, StoreError> {
    let store = match RedbStore::open(path, 16 << 20) {
        Err(StoreError::Backend(err))
            if err
                .downcast_ref::<redb::Error>()
                .is_some_and(|err| matches!(err, redb::Error::DatabaseAlreadyOpen)) =>
        {
            return Err(in_use(path));
        }
        opened => opened?,
    };
    store.compress_plain_records()
}

fn in_use(path: &Path) -> StoreError {
    StoreError::Backend(format!("{} is in use: stop the server first", path.display()).into())
}

/// Compacts the redb file at `path`; returns its size before and after, in bytes. Refused
/// while a server holds the file.
pub fn compact_file(path: &Path) -> Result<(u64, u64), StoreError> {
    let size = |path: &Path| {
        std::fs::metadata(path)
            .map(|m| m.len())
            .map_err(|e| StoreError::Backend(format!("{}: {e}", path.display()).into()))
    };
    let before = size(path)?;
    let mut db = match Database::open(path) {
        Err(DatabaseError::DatabaseAlreadyOpen) => return Err(in_use(path)),
        opened => opened?,
    };
    // Each call moves what it can; a few rounds reach the end.
    while db.compact().map_err(|e| StoreError::Backend(Box::new(e)))? {}
    drop(db);
    Ok((before, size(path)?))
}
