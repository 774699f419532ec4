//! The layout version of each redb file, and the upgrade of an older layout when a file is
//! opened.
//!
//! Each file keeps the version of its layout (its tables, their key and value types, how a row
//! is encoded) in `META` under `schema_version`, as decimal text. A binary opens a file of its
//! own version as it is. A file of an older version is upgraded at open, once: first the file
//! is copied beside itself (`intake.redb.v1-backup`, see `backup_path`), then every step from
//! the file's version to this binary's runs in one write transaction that also writes the new
//! version. redb commits a transaction whole or not at all, so a crash or a failed step leaves
//! the file at its old version next to its copy, and the next start says so and upgrades
//! again. A file of a newer version, or of one this binary has no steps from, is refused with
//! both versions and the way back named, and nothing is written to it.
//!
//! A change of layout is: raise the file's version (`SCHEMA_VERSION` or
//! `REQUEST_LOG_SCHEMA_VERSION` in `store/redb/mod.rs`) and add the `Step` from the version
//! before; the files of the previous release (`tests/fixtures/upgrade/`) must still serve the
//! same answers.

use std::fs::File;
use std::path::{Path, PathBuf};

use redb::{Database, DatabaseError, ReadableDatabase, TableError, WriteTransaction};

use super::{META, REQUEST_LOG_SCHEMA_VERSION, SCHEMA_VERSION, guard_damage};
use crate::core::quiet_panic;
use crate::store::StoreError;

/// The `META` key of a file's layout version.
const VERSION_KEY: &str = "schema_version";

/// The layout of one kind of redb file: the version this binary writes, and how it upgrades
/// the versions before it.
pub(super) struct Layout {
    pub(super) version: u32,
    /// Each converts a file from its `from` version to the next one.
    steps: &'static [Step],
}

/// One upgrade, run inside the transaction that writes the next version.
pub(super) struct Step {
    pub(super) from: u32,
    pub(super) run: fn(&WriteTransaction) -> Result<(), StoreError>,
}

/// `intake.redb`. No steps yet: version 1 is the first layout.
pub(super) const MAIN: Layout = Layout {
    version: SCHEMA_VERSION,
    steps: &[],
};

/// `requests.redb`, versioned apart from `intake.redb`. No steps yet: version 1 is its first
/// layout.
pub(super) const REQUEST_LOG: Layout = Layout {
    version: REQUEST_LOG_SCHEMA_VERSION,
    steps: &[],
};

/// What a file's stored version means to this binary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// A new file: no version written yet.
    New,
    /// This binary's version.
    Current(u32),
    /// An older version this binary upgrades from.
    Older(u32),
}

impl Layout {
    /// Judges the version stored in `db` (at `path`, for messages): refused when newer, or
    /// when this binary cannot upgrade it.
    pub(super) fn found(
        &self,
        db: &impl ReadableDatabase,
        path: &Path,
    ) -> Result<Found, StoreError> {
        let txn = db.begin_read()?;
        let meta = match txn.open_table(META) {
            Ok(meta) => meta,
            Err(TableError::TableDoesNotExist(_)) => return Ok(Found::New),
            Err(err) => return Err(err.into()),
        };
        let Some(stored) = meta.get(VERSION_KEY)? else {
            return Ok(Found::New);
        };
        let text = String::from_utf8_lossy(stored.value()).into_owned();
        match text.parse::<u32>() {
            Ok(version) if version == self.version => Ok(Found::Current(version)),
            Ok(version) if version > self.version => Err(self.newer(path, version)),
            Ok(version) if self.steps_from(version).is_some() => Ok(Found::Older(version)),
            _ => Err(StoreError::Schema(format!(
                "{} has layout version {text:?}, which this intake ({}, layout version {}) \
                 cannot read or upgrade: is it a file of an intake data dir?",
                path.display(),
                env!("CARGO_PKG_VERSION"),
                self.version
            ))),
        }
    }

    /// The steps from `version` up to this binary's, in order; `None` when one is missing.
    fn steps_from(&self, version: u32) -> Option<Vec<&Step>> {
        (version..self.version)
            .map(|from| self.steps.iter().find(|step| step.from == from))
            .collect()
    }

    /// The refusal of a file a newer intake has upgraded, with the way back when its copy
    /// from before that upgrade is still there.
    fn newer(&self, path: &Path, version: u32) -> StoreError {
        let backup = backup_path(path, self.version);
        let way_back = if backup.exists() {
            format!(
                "to go back to this version, stop the server and move {} (the copy the newer \
                 intake saved before upgrading) over {}: writes made since the upgrade are lost",
                backup.display(),
                path.display()
            )
        } else {
            "to go back to this version, restore a backup taken with it".to_string()
        };
        StoreError::Schema(format!(
            "{} has layout version {version}, written by a newer intake; this intake ({}) uses \
             layout version {} and cannot read it. Run the newer intake again, or {way_back} \
             (docs/src/upgrading.md)",
            path.display(),
            env!("CARGO_PKG_VERSION"),
            self.version
        ))
    }

    /// Writes this binary's version into a new file, or upgrades a file of an older one (which
    /// `back_up` copied first), in `txn`, which the caller commits.
    pub(super) fn write_version(
        &self,
        txn: &WriteTransaction,
        found: Found,
        path: &Path,
    ) -> Result<(), StoreError> {
        let from = match found {
            Found::Current(_) => return Ok(()),
            Found::New => None,
            Found::Older(from) => Some(from),
        };
        if let Some(from) = from {
            self.upgrade(txn, from, path)?;
        }
        txn.open_table(META)?
            .insert(VERSION_KEY, self.version.to_string().as_bytes())?;
        Ok(())
    }

    fn upgrade(&self, txn: &WriteTransaction, from: u32, path: &Path) -> Result<(), StoreError> {
        let failed = |detail: String| {
            StoreError::Schema(format!(
                "upgrading {} from layout version {from} to {} failed ({detail}); nothing was \
                 changed: the file is still at version {from}, and its copy from before the \
                 upgrade is {}. Run the previous intake on it, or report this \
                 (docs/src/upgrading.md)",
                path.display(),
                self.version,
                backup_path(path, from).display()
            ))
        };
        let steps = self
            .steps_from(from)
            .ok_or_else(|| failed(format!("no upgrade from version {from}")))?;
        for step in steps {
            match quiet_panic::catch(|| (step.run)(txn)) {
                Ok(Ok(())) => {}
                Ok(Err(err)) => return Err(failed(err.to_string())),
                Err(panic) => {
                    return Err(failed(format!(
                        "the step from version {} panicked: {panic}",
                        step.from
                    )));
                }
            }
        }
        Ok(())
    }
}

/// Where the copy of `path` taken before upgrading it from layout `version` is kept: beside
/// it, `intake.redb.v1-backup`.
fn backup_path(path: &Path, version: u32) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(format!(".v{version}-backup"));
    PathBuf::from(name)
}

/// Copies the closed file at `path`, of layout `version`, to `backup_path`, durably, before
/// an upgrade. A copy already there is from an upgrade that did not finish: the file is still
/// at that version (the upgrade never committed), so a fresh copy replaces it.
pub(super) fn back_up(path: &Path, version: u32) -> Result<PathBuf, StoreError> {
    let backup = backup_path(path, version);
    if backup.exists() {
        log::warn!(
            "{} is there from an upgrade of {} that did not finish; the file is still at \
             layout version {version} (an upgrade commits whole or not at all), so it is \
             copied again and upgraded now",
            backup.display(),
            path.display()
        );
    }
    let io = |what: &str, at: &Path, err: std::io::Error| {
        StoreError::Backend(
            format!(
                "cannot {what} {} before upgrading {} from layout version {version}: {err}; \
                 nothing was changed",
                at.display(),
                path.display()
            )
            .into(),
        )
    };
    let mut partial = backup.clone().into_os_string();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    std::fs::copy(path, &partial).map_err(|err| io("copy it to", &partial, err))?;
    File::open(&partial)
        .and_then(|file| file.sync_all())
        .map_err(|err| io("sync", &partial, err))?;
    std::fs::rename(&partial, &backup).map_err(|err| io("rename", &partial, err))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    File::open(dir)
        .and_then(|dir| dir.sync_all())
        .map_err(|err| io("sync", dir, err))?;
    log::info!(
        "{}: copied to {} before upgrading it from layout version {version}",
        path.display(),
        backup.display()
    );
    Ok(backup)
}

/// What opening the file at `path` would do, told without writing to it or waiting for it:
/// `intake check`'s look at a data dir.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inspected {
    /// No file there yet.
    Missing,
    /// A running server holds it.
    InUse,
    /// Not closed cleanly (a crash): redb repairs it at the next start, before its version
    /// can be read.
    Unclean,
    /// Opened at this version, or upgraded to it from an older one.
    Found(Found),
}

/// Reads the layout version of the file at `path` read-only (see [`Inspected`]); a version
/// this binary refuses is the error `Layout::found` gives, a damaged file
/// [`StoreError::Damaged`].
pub(super) fn inspect(layout: &Layout, path: &Path) -> Result<Inspected, StoreError> {
    if !path.exists() {
        return Ok(Inspected::Missing);
    }
    guard_damage(path, || {
        let db = match Database::builder().open_read_only(path) {
            Err(DatabaseError::DatabaseAlreadyOpen) => return Ok(Inspected::InUse),
            Err(DatabaseError::RepairAborted) => return Ok(Inspected::Unclean),
            opened => opened?,
        };
        Ok(Inspected::Found(layout.found(&db, path)?))
    })
}

#[cfg(test)]
mod tests {
    use redb::{ReadableDatabase, TableDefinition};

    use super::*;
    use crate::store::backup::StoreFile;
    use crate::store::redb::{RedbStore, read_counter, visit_main_tables, write_counter};

    const CACHE: usize = 1 << 20;
    const PROBE: &str = "upgrade_probe";
    const ADDED: TableDefinition<u64, u64> = TableDefinition::new("added_by_upgrade");

    /// A layout one version past this binary's, with one step to it, which runs `$run`.
    macro_rules! next_layout {
        ($run:expr) => {
            Layout {
                version: SCHEMA_VERSION + 1,
                steps: &[Step {
                    from: SCHEMA_VERSION,
                    run: $run,
                }],
            }
        };
    }

    /// The next layout, whose step doubles the `META` counter `upgrade_probe` and adds a
    /// table, so a test can tell a step ran and how often.
    const NEXT: Layout = next_layout!(|txn| {
        let probe = read_counter(&txn.open_table(META)?, PROBE)?;
        write_counter(txn, PROBE, probe * 2)?;
        txn.open_table(ADDED)?.insert(probe, probe * 2)?;
        Ok(())
    });

    const FAILING: Layout = next_layout!(|txn| {
        write_counter(txn, PROBE, 0)?;
        Err(StoreError::Corrupt("a row the step cannot convert".into()))
    });

    const PANICKING: Layout = next_layout!(|txn| {
        write_counter(txn, PROBE, 0)?;
        panic!("a step's bug")
    });

    /// A store file of this binary's layout with the probe counter at 7.
    fn current_file(dir: &Path) -> PathBuf {
        let path = dir.join("intake.redb");
        let store = RedbStore::open(&path, CACHE).unwrap();
        let txn = store.write().unwrap();
        write_counter(&txn, PROBE, 7).unwrap();
        txn.commit().unwrap();
        path
    }

    fn open(path: &Path, layout: &Layout) -> Result<RedbStore, StoreError> {
        RedbStore::open_with(path, CACHE, layout, |txn| {
            visit_main_tables(&mut super::super::Creator { txn })
        })
    }

    /// The stored version and probe counter of the closed file at `path`.
    fn state(path: &Path) -> (String, u64) {
        let db = Database::open(path).unwrap();
        let txn = db.begin_read().unwrap();
        let meta = txn.open_table(META).unwrap();
        let version = meta.get(VERSION_KEY).unwrap().unwrap();
        let version = String::from_utf8(version.value().to_vec()).unwrap();
        (version, read_counter(&meta, PROBE).unwrap())
    }

    #[test]
    fn an_older_layout_is_upgraded_once_after_a_copy_is_saved() {
        let dir = tempfile::tempdir().unwrap();
        let path = current_file(dir.path());
        let store = open(&path, &NEXT).unwrap();
        drop(store);
        let next = (SCHEMA_VERSION + 1).to_string();
        assert_eq!(state(&path), (next.clone(), 14));
        let backup = backup_path(&path, SCHEMA_VERSION);
        assert!(backup.ends_with(format!("intake.redb.v{SCHEMA_VERSION}-backup")));
        assert_eq!(state(&backup), (SCHEMA_VERSION.to_string(), 7));
        let mut partial = backup.clone().into_os_string();
        partial.push(".partial");
        assert!(!Path::new(&partial).exists());
        // Once: opening the upgraded file runs no step, and the copy stays as it was.
        let copy = std::fs::read(&backup).unwrap();
        drop(open(&path, &NEXT).unwrap());
        assert_eq!(state(&path), (next, 14));
        assert_eq!(std::fs::read(&backup).unwrap(), copy);
        let db = Database::open(&path).unwrap();
        let txn = db.begin_read().unwrap();
        assert_eq!(
            txn.open_table(ADDED)
                .unwrap()
                .get(7)
                .unwrap()
                .unwrap()
                .value(),
            14
        );
    }

    #[test]
    fn a_failed_upgrade_changes_nothing_keeps_the_copy_and_runs_again_at_the_next_start() {
        for (layout, cause) in [
            (&FAILING, "a row the step cannot convert"),
            (&PANICKING, "panicked: a step's bug"),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let path = current_file(dir.path());
            let err = open(&path, layout).err().unwrap().to_string();
            let backup = backup_path(&path, SCHEMA_VERSION);
            for part in [
                format!(
                    "upgrading {} from layout version {SCHEMA_VERSION} to {}",
                    path.display(),
                    SCHEMA_VERSION + 1
                ),
                cause.to_string(),
                format!("still at version {SCHEMA_VERSION}"),
                backup.display().to_string(),
            ] {
                assert!(err.contains(&part), "{part:?} not in {err}");
            }
            // As a crash in the middle of the step would leave it: the step's write never
            // committed, the copy is there.
            assert_eq!(state(&path), (SCHEMA_VERSION.to_string(), 7));
            assert_eq!(state(&backup), (SCHEMA_VERSION.to_string(), 7));
            // The next start (with the step fixed) copies the file again and upgrades it.
            let copy_before = std::fs::metadata(&backup).unwrap().modified().unwrap();
            drop(open(&path, &NEXT).unwrap());
            assert_eq!(state(&path), ((SCHEMA_VERSION + 1).to_string(), 14));
            assert_eq!(state(&backup), (SCHEMA_VERSION.to_string(), 7));
            assert!(std::fs::metadata(&backup).unwrap().modified().unwrap() >= copy_before);
        }
    }

    /// The file [`crashing_upgrade`] upgrades, in the process
    /// [`a_crash_in_the_middle_of_an_upgrade_leaves_the_file_at_its_version_beside_its_copy`]
    /// starts.
    const CRASH_FILE: &str = "INTAKE_TEST_CRASHING_UPGRADE";

    /// Not a test of its own: the process that crashes. It upgrades the file `CRASH_FILE`
    /// names with a step that writes, then ends the process at once, as a power cut or a
    /// `kill -9` would; without the variable it does nothing.
    #[test]
    fn crashing_upgrade() {
        const CRASHING: Layout = next_layout!(|txn| {
            write_counter(txn, PROBE, 0)?;
            let mut added = txn.open_table(ADDED)?;
            for n in 0..10_000 {
                added.insert(n, n)?;
            }
            std::process::abort()
        });
        if let Some(path) = std::env::var_os(CRASH_FILE) {
            let _ = open(Path::new(&path), &CRASHING);
        }
    }

    #[test]
    fn a_crash_in_the_middle_of_an_upgrade_leaves_the_file_at_its_version_beside_its_copy() {
        let dir = tempfile::tempdir().unwrap();
        let path = current_file(dir.path());
        let crashed = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "store::redb::layout::tests::crashing_upgrade"])
            .env(CRASH_FILE, &path)
            .output()
            .unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&crashed.status),
            Some(rustix::process::Signal::ABORT.as_raw()),
            "the upgrade did not crash in its step: {}",
            String::from_utf8_lossy(&crashed.stdout)
        );
        let backup = backup_path(&path, SCHEMA_VERSION);
        assert_eq!(state(&path), (SCHEMA_VERSION.to_string(), 7));
        assert_eq!(state(&backup), (SCHEMA_VERSION.to_string(), 7));
        drop(open(&path, &NEXT).unwrap());
        assert_eq!(state(&path), ((SCHEMA_VERSION + 1).to_string(), 14));
    }

    #[test]
    fn a_newer_layout_is_refused_naming_both_versions_and_the_way_back_and_left_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let path = current_file(dir.path());
        drop(open(&path, &NEXT).unwrap());
        let before = state(&path);
        let err = RedbStore::open(&path, CACHE).err().unwrap().to_string();
        for part in [
            format!(
                "{} has layout version {}",
                path.display(),
                SCHEMA_VERSION + 1
            ),
            "written by a newer intake".to_string(),
            format!("uses layout version {SCHEMA_VERSION}"),
            format!(
                "move {} (the copy the newer intake saved before upgrading) over {}",
                backup_path(&path, SCHEMA_VERSION).display(),
                path.display()
            ),
        ] {
            assert!(err.contains(&part), "{part:?} not in {err}");
        }
        assert_eq!(state(&path), before);
        assert_eq!(
            inspect(&MAIN, &path).err().unwrap().to_string(),
            err,
            "intake check tells the same"
        );
        assert_eq!(
            <RedbStore as StoreFile>::check(&path)
                .err()
                .unwrap()
                .to_string(),
            err,
            "a restore refuses it the same"
        );
        // Without the copy, the way back is a backup of this version.
        std::fs::remove_file(backup_path(&path, SCHEMA_VERSION)).unwrap();
        let err = RedbStore::open(&path, CACHE).err().unwrap().to_string();
        assert!(err.contains("restore a backup taken with it"), "{err}");
    }

    #[test]
    fn a_version_without_an_upgrade_is_refused_untouched() {
        for stored in ["0", "two", ""] {
            let dir = tempfile::tempdir().unwrap();
            let path = current_file(dir.path());
            {
                let db = Database::create(&path).unwrap();
                let txn = db.begin_write().unwrap();
                txn.open_table(META)
                    .unwrap()
                    .insert(VERSION_KEY, stored.as_bytes())
                    .unwrap();
                txn.commit().unwrap();
            }
            let err = RedbStore::open(&path, CACHE).err().unwrap().to_string();
            assert!(
                err.contains(&format!("has layout version {stored:?}"))
                    && err.contains("cannot read or upgrade"),
                "{stored}: {err}"
            );
            assert_eq!(state(&path), (stored.to_string(), 7));
            assert!(!backup_path(&path, 0).exists());
        }
    }

    #[test]
    fn inspecting_reads_without_writing_or_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("intake.redb");
        assert_eq!(inspect(&MAIN, &path).unwrap(), Inspected::Missing);
        let store = RedbStore::open(&path, CACHE).unwrap();
        assert_eq!(inspect(&MAIN, &path).unwrap(), Inspected::InUse);
        drop(store);
        assert_eq!(
            inspect(&MAIN, &path).unwrap(),
            Inspected::Found(Found::Current(SCHEMA_VERSION))
        );
        assert_eq!(
            inspect(&NEXT, &path).unwrap(),
            Inspected::Found(Found::Older(SCHEMA_VERSION))
        );
        assert!(!backup_path(&path, SCHEMA_VERSION).exists());
    }

    #[test]
    fn every_layout_upgrades_from_each_of_its_earlier_versions_in_steps_of_one() {
        for layout in [&MAIN, &REQUEST_LOG, &NEXT] {
            let froms: Vec<u32> = layout.steps.iter().map(|step| step.from).collect();
            let first = layout.version - froms.len() as u32;
            assert_eq!(froms, (first..layout.version).collect::<Vec<_>>());
            for from in first..layout.version {
                assert!(layout.steps_from(from).is_some());
            }
        }
    }
}
