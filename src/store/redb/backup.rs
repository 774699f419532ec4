//! [`BackupSource`] and [`StoreFile`] on redb: a backup's copy of `intake.redb` is a redb file
//! of its own, written table by table from one read transaction.

use std::path::Path;

use redb::{
    Database, DatabaseError, Key, ReadOnlyTable, ReadTransaction, ReadableDatabase, ReadableTable,
    TableDefinition, Value, WriteTransaction,
};

use super::layout::{self, Inspected};
use super::{
    ERASURES, LAST_CHANGE_SEQ, META, RedbStore, TableVisitor, from_json, read_counter,
    visit_main_tables,
};
use crate::store::backup::{BackupSource, StoreFile};
use crate::store::{ErasureRow, StoreError};

/// The cache of the backup's copy of `intake.redb`: the most memory its writing takes.
const BACKUP_COPY_CACHE: usize = 16 << 20;

impl BackupSource for RedbStore {
    /// Copies every table of `intake.redb` (the one list creating it follows too, so a new
    /// table is never left out), all read in one transaction.
    fn snapshot_into(&self, path: &Path) -> Result<u64, StoreError> {
        let _long = self.long_read_begins();
        let from = self.db.begin_read()?;
        let last_change = read_counter(&from.open_table(META)?, LAST_CHANGE_SEQ)?;
        // redb's default cache is 1 GiB, half of it for the dirty pages of a write: the copy's
        // one transaction would hold the store's size in memory, kept by the allocator after
        // each backup (the soak benchmark saw RSS grow by it). The copy is written once and
        // never read back here, so a small cache does.
        let copy = Database::builder()
            .set_cache_size(BACKUP_COPY_CACHE)
            .create(path)?;
        let to = copy.begin_write()?;
        visit_main_tables(&mut Copier {
            from: &from,
            to: &to,
        })?;
        to.commit()?;
        Ok(last_change)
    }
}

impl StoreFile for RedbStore {
    /// redb holds an exclusive lock on an open file. Whatever else is wrong with a file that
    /// opens (or fails otherwise) is not a running server.
    fn in_use(path: &Path) -> bool {
        matches!(
            Database::open(path),
            Err(DatabaseError::DatabaseAlreadyOpen)
        )
    }

    /// Checks that the file is a redb store of a layout this binary opens: its own, or an
    /// older one it upgrades at the next start (the restore leaves the file as it was).
    fn check(path: &Path) -> Result<(), StoreError> {
        match layout::inspect(&layout::MAIN, path)? {
            Inspected::Found(_) => Ok(()),
            not_read => Err(StoreError::Backend(
                format!("{} cannot be read: {not_read:?}", path.display()).into(),
            )),
        }
    }

    fn erasures(path: &Path) -> Result<Vec<ErasureRow>, StoreError> {
        let db = Database::open(path)?;
        let txn = db.begin_read()?;
        let table = match txn.open_table(ERASURES) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(err) => return Err(err.into()),
        };
        let mut rows = Vec::new();
        for entry in table.iter()? {
            rows.push(from_json(entry?.1.value())?);
        }
        Ok(rows)
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
        copy_table(&self.from.open_table(table)?, self.to, table)
    }
}

/// Copies every row of `source` into `table` of `to`.
pub(super) fn copy_table<K: Key + 'static, V: Value + 'static>(
    source: &ReadOnlyTable<K, V>,
    to: &WriteTransaction,
    table: TableDefinition<'static, K, V>,
) -> Result<(), StoreError> {
    let mut target = to.open_table(table)?;
    for row in source.iter()? {
        let (key, value) = row?;
        target.insert(key.value(), value.value())?;
    }
    Ok(())
}
