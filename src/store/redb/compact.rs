//! Compaction of a stopped server's redb files. Pages freed by deletes, change-log trims and
//! purges are reused by later writes (redb writes a page it allocates whole) but never given
//! back to the file system, and until reused they keep the bytes they held: a purged
//! endpoint's payloads among them. Compacting first lets redb move the live pages down and cut
//! the free space off the end of the file (which needs no room beside it), then writes the
//! file anew, table by table, into a file beside it that replaces it: only that guarantees
//! that no freed page is left inside, since redb's own compaction may leave some it could not
//! fill. The copy costs as much time again and, while it runs, free disk space for the live
//! data.

use std::path::{Path, PathBuf};

use redb::{Database, DatabaseError, Key, ReadTransaction, TableDefinition, TableError, Value};
use redb::{ReadableDatabase, TableHandle, WriteTransaction};

use super::backup::copy_table;
use super::{RedbStore, TableVisitor, io_error, visit_main_tables, visit_request_log_tables};
use crate::core::clock::Timestamp;
use crate::store::StoreError;
use crate::store::compression::Recompressed;

/// Stores the records of the store file at `path` anew with a dictionary trained on them at
/// `now` (see [`RedbStore::recompress_records`]). Refused while a server holds it.
pub fn recompress_file(path: &Path, now: Timestamp) -> Result<Recompressed, StoreError> {
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
    store.recompress_records(now)
}

fn in_use(path: &Path) -> StoreError {
    StoreError::Backend(format!("{} is in use: stop the server first", path.display()).into())
}

/// Compacts the redb file at `path` (`intake.redb` or `requests.redb`): in place, then by
/// writing it anew, so that nothing it no longer holds is left in it; returns its size before
/// and after, in bytes. Refused while a server holds the file.
pub fn compact_file(path: &Path) -> Result<(u64, u64), StoreError> {
    let size = |path: &Path| {
        std::fs::metadata(path)
            .map(|m| m.len())
            .map_err(|e| io_error(path, e))
    };
    let before = size(path)?;
    let mut db = open(path)?;
    // Each call moves what it can; a few rounds reach the end.
    while db.compact().map_err(|e| StoreError::Backend(Box::new(e)))? {}
    write_anew(path, db).map_err(|err| {
        StoreError::Backend(
            format!(
                "{} was compacted in place, but writing it anew failed, so pages it freed may \
                 still hold deleted data: {err}",
                path.display()
            )
            .into(),
        )
    })?;
    Ok((before, size(path)?))
}

fn open(path: &Path) -> Result<Database, StoreError> {
    match Database::open(path) {
        Err(DatabaseError::DatabaseAlreadyOpen) => Err(in_use(path)),
        opened => Ok(opened?),
    }
}

/// Replaces the file at `path`, open as `source`, by a copy of what it holds. The copy is
/// written beside it (`….compacting`; one left over from an interrupted run is written again)
/// and renamed over it with the old file's mode and owner, so the old file stays whole until
/// the copy is complete and synced.
fn write_anew(path: &Path, source: Database) -> Result<(), StoreError> {
    let fresh = fresh_path(path);
    match std::fs::remove_file(&fresh) {
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
            return Err(io_error(&fresh, err));
        }
        _ => {}
    }
    let written = rewrite(&source, &fresh).and_then(|()| {
        drop(source);
        keep_mode_and_owner(path, &fresh)?;
        std::fs::rename(&fresh, path).map_err(|e| io_error(path, e))?;
        sync_folder(path)
    });
    if written.is_err() {
        // The old file is untouched; what was written of the new one goes.
        let _ = std::fs::remove_file(&fresh);
    }
    written
}

/// Where the new file of `path` is written: beside it, on the same file system.
fn fresh_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".compacting");
    path.with_file_name(name)
}

/// Copies every table of `source` into a new file at `fresh`, in one durable commit; refused
/// if `source` has a table intake does not know (it would be lost).
fn rewrite(source: &Database, fresh: &Path) -> Result<(), StoreError> {
    let from = source.begin_read()?;
    let copy = Database::builder().create(fresh)?;
    let to = copy.begin_write()?;
    let mut rewriter = Rewriter {
        from: &from,
        to: &to,
        copied: Vec::new(),
    };
    visit_main_tables(&mut rewriter)?;
    visit_request_log_tables(&mut rewriter)?;
    let copied = rewriter.copied;
    for table in from.list_tables()? {
        // An interrupted scrub's filler is left out: it holds nothing.
        if table.name() != super::scrub::FILLER.name()
            && !copied.iter().any(|name| name == table.name())
        {
            return Err(StoreError::Corrupt(format!(
                "table {} is not one intake knows: not compacting",
                table.name()
            )));
        }
    }
    to.commit()?;
    // A fresh file keeps the space its one big transaction needed on the way; give it back.
    let mut copy = copy;
    while copy
        .compact()
        .map_err(|e| StoreError::Backend(Box::new(e)))?
    {}
    Ok(())
}

/// Copies each table the source file has (a store file has those of one list).
struct Rewriter<'a> {
    from: &'a ReadTransaction,
    to: &'a WriteTransaction,
    /// The names of the tables copied.
    copied: Vec<String>,
}

impl TableVisitor for Rewriter<'_> {
    fn visit<K: Key + 'static, V: Value + 'static>(
        &mut self,
        table: TableDefinition<'static, K, V>,
    ) -> Result<(), StoreError> {
        let source = match self.from.open_table(table) {
            Err(TableError::TableDoesNotExist(_)) => return Ok(()),
            opened => opened?,
        };
        copy_table(&source, self.to, table)?;
        self.copied.push(table.name().to_string());
        Ok(())
    }
}

/// Gives `fresh` the mode and owner of `path`, so that a compaction run as root leaves a file
/// the server's own user can still open.
fn keep_mode_and_owner(path: &Path, fresh: &Path) -> Result<(), StoreError> {
    let old = std::fs::metadata(path).map_err(|e| io_error(path, e))?;
    std::fs::set_permissions(fresh, old.permissions()).map_err(|e| io_error(fresh, e))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let new = std::fs::metadata(fresh).map_err(|e| io_error(fresh, e))?;
        if (new.uid(), new.gid()) != (old.uid(), old.gid()) {
            std::os::unix::fs::chown(fresh, Some(old.uid()), Some(old.gid()))
                .map_err(|e| io_error(fresh, e))?;
        }
    }
    Ok(())
}

/// Makes the rename of a file in `path`'s folder durable.
fn sync_folder(path: &Path) -> Result<(), StoreError> {
    let folder = path.parent().unwrap_or(Path::new("."));
    std::fs::File::open(folder)
        .and_then(|dir| dir.sync_all())
        .map_err(|e| io_error(folder, e))
}
