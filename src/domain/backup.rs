//! Backups of a running server, and restoring one into a data dir.
//!
//! A backup is one tar archive (`tar -tf` lists it) of three members:
//! - `intake-backup.json`: the [`Manifest`] (format, intake version, time, change sequence).
//! - the store file ([`STORE_FILE`]): every table of the main store, copied from one read
//!   snapshot ([`BackupSource::snapshot_into`]): every write acknowledged before the backup
//!   began is in it, and writers go on meanwhile.
//! - `master.key`: the key-encryption key. API keys, webhook secrets and receivers' auth
//!   values are sealed under it, so a store without its key cannot serve them: keep backups
//!   as secret as the data dir.
//!
//! Not in it: the request log ([`REQUEST_LOG_FILE`], a short-lived operational log that starts
//! empty after a restore) and the search index (derived from the store, rebuilt at the first
//! start after a restore because `search/` is missing).

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::core::clock::{Timestamp, parse_date_or_rfc3339};
use crate::core::config::{REQUEST_LOG_FILE, STORE_FILE};
use crate::core::crypto::{self, MASTER_KEY_FILE};
use crate::domain::error::Error;
use crate::store::StoreError;
use crate::store::backup::{BackupSource, StoreFile};
use crate::store::{ErasureRow, Store};

/// Name of the manifest member.
const MANIFEST: &str = "intake-backup.json";
/// Version of the archive layout; restore refuses others.
const FORMAT: u32 = 1;
/// File names of the backups taken on SIGUSR1: the prefix, a UTC time stamp, the suffix.
const SCHEDULED_PREFIX: &str = "intake-backup-";
const SCHEDULED_SUFFIX: &str = ".tar";
/// What a forced restore replaces in a data dir; anything else there (a config file, TLS
/// files) is left alone.
const DATA_FILES: [&str; 4] = [STORE_FILE, REQUEST_LOG_FILE, MASTER_KEY_FILE, "search"];

#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0} is not an intake backup: {1}")]
    NotABackup(String, String),
    #[error("{0}")]
    Refused(String),
}

/// A backup the server could not write is its own failure, never the caller's; one its store
/// does not take (409) is not a failure.
impl From<BackupError> for crate::domain::error::Error {
    fn from(err: BackupError) -> Self {
        match err {
            BackupError::Store(err) => err.into(),
            // A store that takes no backup archive (PostgreSQL): the reason names the remedy.
            // Only `write` refuses on the API's path.
            BackupError::Refused(why) => crate::domain::error::Error::Conflict(why),
            other => crate::domain::error::Error::Internal(other.to_string()),
        }
    }
}

fn io_err(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> BackupError {
    let context = context.into();
    move |source| BackupError::Io { context, source }
}

/// What a backup says about itself.
#[derive(Debug, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    pub intake_version: String,
    pub created_at: String,
    /// The last change-log sequence in the copy: writes up to it are in the backup.
    pub last_change_seq: u64,
}

/// Writes a backup archive of `store` and the key of `data_dir` to `out`. The archive is
/// written beside `out` under a temporary name and renamed when complete, so `out` is either
/// a whole backup or absent (or the file it replaces).
pub fn write(
    store: &dyn Store,
    data_dir: &Path,
    out: &Path,
    now: Timestamp,
) -> Result<Manifest, BackupError> {
    let store = store.backup_source().ok_or_else(|| {
        BackupError::Refused(
            "this server keeps its data in PostgreSQL ([storage] backend = \"postgres\"): back \
             the database up with PostgreSQL's own tools (pg_dump, or base backups with WAL \
             archiving) and keep a copy of master.key from the data dir beside it \
             (docs/src/scale-out.md, \"Backups\")"
                .into(),
        )
    })?;
    let partial = sibling(out, ".partial");
    let copy = sibling(out, ".store.partial");
    // Leftovers of a crashed backup: the store would open the copy and add to it, and the
    // archive is created exclusively. Start from nothing.
    let _ = std::fs::remove_file(&copy);
    let _ = std::fs::remove_file(&partial);
    let result = write_parts(store, data_dir, &partial, &copy, now);
    let _ = std::fs::remove_file(&copy);
    match result {
        Ok(manifest) => {
            std::fs::rename(&partial, out)
                .map_err(io_err(format!("cannot rename {}", partial.display())))?;
            Ok(manifest)
        }
        Err(err) => {
            let _ = std::fs::remove_file(&partial);
            Err(err)
        }
    }
}

fn write_parts(
    store: &dyn BackupSource,
    data_dir: &Path,
    archive: &Path,
    copy: &Path,
    now: Timestamp,
) -> Result<Manifest, BackupError> {
    let key_path = data_dir.join(MASTER_KEY_FILE);
    let key = std::fs::read(&key_path).map_err(io_err(format!(
        "cannot read the key-encryption key {}",
        key_path.display()
    )))?;
    let last_change_seq = store.snapshot_into(copy)?;
    let manifest = Manifest {
        format: FORMAT,
        intake_version: env!("CARGO_PKG_VERSION").to_string(),
        created_at: now.to_rfc3339(),
        last_change_seq,
    };
    let context = format!("cannot write {}", archive.display());
    let manifest_json = serde_json::to_vec_pretty(&manifest)
        .map_err(|e| io_err(&context)(std::io::Error::other(e)))?;
    let file = create_private(archive).map_err(io_err(&context))?;
    let mut tar = tar::Builder::new(file);
    let mtime = u64::try_from(now.as_micros() / 1_000_000).unwrap_or(0);
    let bytes_len = |bytes: &[u8]| bytes.len() as u64;
    append(
        &mut tar,
        MANIFEST,
        bytes_len(&manifest_json),
        &mut &manifest_json[..],
        mtime,
    )
    .map_err(io_err(&context))?;
    append(
        &mut tar,
        MASTER_KEY_FILE,
        bytes_len(&key),
        &mut &key[..],
        mtime,
    )
    .map_err(io_err(&context))?;
    let copy_err = || io_err(format!("cannot read {}", copy.display()));
    let mut store_file = File::open(copy).map_err(copy_err())?;
    let size = store_file.metadata().map_err(copy_err())?.len();
    append(&mut tar, STORE_FILE, size, &mut store_file, mtime).map_err(io_err(&context))?;
    let file = tar.into_inner().map_err(io_err(&context))?;
    file.sync_all().map_err(io_err(&context))?;
    Ok(manifest)
}

/// Appends a member readable only by its owner (as every file of a data dir).
fn append(
    tar: &mut tar::Builder<File>,
    name: &str,
    size: u64,
    data: &mut dyn Read,
    mtime: u64,
) -> std::io::Result<()> {
    let mut header = tar::Header::new_gnu();
    header.set_size(size);
    header.set_mode(0o600);
    header.set_mtime(mtime);
    header.set_cksum();
    tar.append_data(&mut header, name, data)
}

/// A new file readable only by its owner: backups hold the key-encryption key.
fn create_private(path: &Path) -> std::io::Result<File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

/// `path` with `suffix` appended to its file name.
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    path.with_file_name(name)
}

/// Writes a backup into an unnamed file of `dir` (created and unlinked there) and returns it
/// open at its start: the management API streams it, and nothing is left behind however the
/// download ends.
pub fn write_unnamed(
    store: &dyn Store,
    dir: &Path,
    now: Timestamp,
) -> Result<(File, Manifest), BackupError> {
    let name = crate::core::ids::random_base32(16);
    let path = dir.join(format!(".backup-{name}.tar"));
    let manifest = write(store, dir, &path, now)?;
    let file = File::open(&path).map_err(io_err(format!("cannot read {}", path.display())));
    let _ = std::fs::remove_file(&path);
    Ok((file?, manifest))
}

/// Saves a backup read from `archive` (a download) to `to`: whole or absent, mode 0600.
/// Returns its size.
pub fn save(archive: &mut dyn Read, to: &Path) -> Result<u64, BackupError> {
    let partial = sibling(to, ".partial");
    let _ = std::fs::remove_file(&partial);
    let saved = create_private(&partial).and_then(|mut file| {
        let size = std::io::copy(archive, &mut file)?;
        file.sync_all()?;
        std::fs::rename(&partial, to)?;
        Ok(size)
    });
    saved.map_err(|source| {
        let _ = std::fs::remove_file(&partial);
        BackupError::Io {
            context: format!("cannot write {}", to.display()),
            source,
        }
    })
}

/// A backup into the configured folder (SIGUSR1), named by its time, then deletes all but
/// the newest `keep` backups there. Returns the new backup's path.
pub fn write_scheduled(
    store: &dyn Store,
    data_dir: &Path,
    dir: &Path,
    keep: usize,
    now: Timestamp,
) -> Result<PathBuf, BackupError> {
    crate::core::private_dir::create_private_dir(dir)
        .map_err(io_err(format!("cannot create {}", dir.display())))?;
    // `20261123T041634.123456Z`: sorts by time, no `:` (awkward in file names).
    let stamp: String = now
        .to_rfc3339()
        .chars()
        .filter(|c| !matches!(c, '-' | ':'))
        .collect();
    let path = dir.join(format!("{SCHEDULED_PREFIX}{stamp}{SCHEDULED_SUFFIX}"));
    write(store, data_dir, &path, now)?;
    rotate(dir, keep)?;
    Ok(path)
}

/// Deletes the oldest scheduled backups of `dir` until `keep` are left.
fn rotate(dir: &Path, keep: usize) -> Result<(), BackupError> {
    let context = format!("cannot list {}", dir.display());
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io_err(&context))? {
        let name = entry.map_err(io_err(&context))?.file_name();
        if let Some(name) = name.to_str()
            && name.starts_with(SCHEDULED_PREFIX)
            && name.ends_with(SCHEDULED_SUFFIX)
        {
            names.push(name.to_string());
        }
    }
    names.sort();
    let excess = names.len().saturating_sub(keep);
    for name in &names[..excess] {
        let path = dir.join(name);
        std::fs::remove_file(&path).map_err(io_err(format!("cannot delete {}", path.display())))?;
        log::info!("deleted old backup {}", path.display());
    }
    Ok(())
}

/// Restores the backup `archive` into `data_dir`, whose store file is `S`'s. Refuses a data
/// dir a server runs on, and one that is not empty unless `force`, which replaces its data
/// files ([`DATA_FILES`]). The search index is rebuilt at the next start.
pub fn restore<S: StoreFile>(
    archive: &Path,
    data_dir: &Path,
    force: bool,
) -> Result<Restored, BackupError> {
    check_target::<S>(data_dir, force)?;
    // Read before the store is replaced: what it has erased since the backup was taken, the
    // backup still holds.
    let replaced = data_dir.join(STORE_FILE);
    let known_erasures = match replaced.exists() {
        true => S::erasures(&replaced).map_err(|err| err.to_string()),
        false => Ok(Vec::new()),
    };
    crate::core::private_dir::create_private_dir(data_dir)
        .map_err(io_err(format!("cannot create {}", data_dir.display())))?;
    let restoring = data_dir.join(format!(".{STORE_FILE}.restoring"));
    let _ = std::fs::remove_file(&restoring);
    let result = unpack(archive, &restoring).and_then(|(manifest, key)| {
        S::check(&restoring)?;
        replace_data(data_dir, &restoring, &key)?;
        Ok(manifest)
    });
    let _ = std::fs::remove_file(&restoring);
    let manifest = result?;
    let later_erasures = known_erasures.map(|rows| {
        let taken = parse_date_or_rfc3339(&manifest.created_at).unwrap_or(Timestamp(0));
        rows.into_iter()
            .filter(|row| row.created_at >= taken)
            .collect()
    });
    Ok(Restored {
        manifest,
        later_erasures,
    })
}

/// What a restore did.
pub struct Restored {
    pub manifest: Manifest,
    /// The erasures the replaced store made at or after the backup was taken: the restored
    /// data holds their records again, and they must be made again. `Err` when the replaced
    /// store could not be read (a damaged one, say).
    pub later_erasures: Result<Vec<ErasureRow>, String>,
}

/// Refuses a data dir that a running server holds, or that is not empty (unless `force`).
fn check_target<S: StoreFile>(data_dir: &Path, force: bool) -> Result<(), BackupError> {
    let store = data_dir.join(STORE_FILE);
    // Whatever else is wrong with a store that is not in use, a forced restore replaces it.
    if store.exists() && S::in_use(&store) {
        return Err(BackupError::Refused(format!(
            "a server is running on {}; stop it before restoring",
            data_dir.display()
        )));
    }
    let not_empty = match std::fs::read_dir(data_dir) {
        Ok(mut entries) => entries.next().is_some(),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => false,
        Err(err) => return Err(io_err(format!("cannot read {}", data_dir.display()))(err)),
    };
    if not_empty && !force {
        return Err(BackupError::Refused(format!(
            "{} is not empty; pass --force to replace its data ({})",
            data_dir.display(),
            DATA_FILES.join(", ")
        )));
    }
    Ok(())
}

/// Reads the archive: writes its store to `store_to` and returns its manifest and key.
fn unpack(archive: &Path, store_to: &Path) -> Result<(Manifest, [u8; 32]), BackupError> {
    let shown = archive.display().to_string();
    let not_backup = |why: String| BackupError::NotABackup(shown.clone(), why);
    let read_err = || io_err(format!("cannot read {shown}"));
    let file = File::open(archive).map_err(read_err())?;
    let mut tar = tar::Archive::new(file);
    let (mut manifest, mut key, mut store) = (None, None, false);
    for entry in tar.entries().map_err(read_err())? {
        let mut entry = entry.map_err(read_err())?;
        let name = entry
            .path()
            .map_err(read_err())?
            .to_string_lossy()
            .into_owned();
        match name.as_str() {
            MANIFEST => {
                let mut text = Vec::new();
                entry.read_to_end(&mut text).map_err(read_err())?;
                let parsed: Manifest = serde_json::from_slice(&text)
                    .map_err(|e| not_backup(format!("unreadable {MANIFEST}: {e}")))?;
                if parsed.format != FORMAT {
                    return Err(not_backup(format!(
                        "archive format {} (this intake reads format {FORMAT})",
                        parsed.format
                    )));
                }
                manifest = Some(parsed);
            }
            MASTER_KEY_FILE => {
                let mut bytes = Vec::new();
                entry.read_to_end(&mut bytes).map_err(read_err())?;
                let bytes: [u8; 32] = bytes
                    .try_into()
                    .map_err(|_| not_backup(format!("{MASTER_KEY_FILE} is not 32 bytes")))?;
                key = Some(bytes);
            }
            STORE_FILE => {
                let context = format!("cannot write {}", store_to.display());
                let mut out = create_private(store_to).map_err(io_err(&context))?;
                std::io::copy(&mut entry, &mut out).map_err(io_err(&context))?;
                out.sync_all().map_err(io_err(&context))?;
                store = true;
            }
            other => log::warn!("{shown}: ignoring unknown member {other:?}"),
        }
    }
    match (manifest, key, store) {
        (Some(manifest), Some(key), true) => Ok((manifest, key)),
        _ => Err(not_backup(format!(
            "it must hold {MANIFEST}, {MASTER_KEY_FILE} and {STORE_FILE}"
        ))),
    }
}

/// Removes the data files of `data_dir` and puts the restored store and key in their place.
fn replace_data(data_dir: &Path, restored: &Path, key: &[u8; 32]) -> Result<(), BackupError> {
    for name in DATA_FILES {
        let path = data_dir.join(name);
        let removed = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        match removed {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err(io_err(format!("cannot remove {}", path.display()))(err)),
        }
    }
    let key_path = data_dir.join(MASTER_KEY_FILE);
    crypto::write_key_file(&key_path, key)
        .map_err(io_err(format!("cannot write {}", key_path.display())))?;
    let store = data_dir.join(STORE_FILE);
    std::fs::rename(restored, &store)
        .map_err(io_err(format!("cannot write {}", store.display())))?;
    // The renames are durable only once the folder itself is synced.
    File::open(data_dir)
        .and_then(|dir| dir.sync_all())
        .map_err(io_err(format!("cannot sync {}", data_dir.display())))
}

/// Streams `file` in chunks read on the blocking pool, each sent only if `still_allowed`
/// allows when it is read (a store read per 256 KiB): once it refuses, the download breaks
/// off with an error, so a credential revoked during a long download stops it.
pub fn chunks(
    file: File,
    still_allowed: impl Fn() -> Result<(), Error> + Send + Sync + 'static,
) -> impl futures_util::Stream<Item = std::io::Result<bytes::Bytes>> + Send + Sync + 'static {
    const CHUNK: usize = 256 * 1024;
    let still_allowed = Arc::new(still_allowed);
    futures_util::stream::unfold(Some(file), move |file| {
        let still_allowed = still_allowed.clone();
        async move {
            let mut file = file?;
            if let Err(err) = still_allowed() {
                log::info!("a backup download was broken off: {err}");
                let refused = std::io::Error::new(std::io::ErrorKind::PermissionDenied, err);
                return Some((Err(refused), None));
            }
            let read = tokio::task::spawn_blocking(move || {
                let mut buf = vec![0; CHUNK];
                let n = file.read(&mut buf)?;
                buf.truncate(n);
                Ok::<_, std::io::Error>((buf, file))
            })
            .await;
            match read {
                Ok(Ok((buf, _))) if buf.is_empty() => None,
                Ok(Ok((buf, file))) => Some((Ok(bytes::Bytes::from(buf)), Some(file))),
                Ok(Err(err)) => Some((Err(err), None)),
                Err(err) => Some((Err(std::io::Error::other(err)), None)),
            }
        }
    })
}
