//! The index's folder: postings read with plain reads, the structures tantivy reads whole
//! memory-mapped.
//!
//! tantivy's `MmapDirectory` maps every segment file: each page a merge or a query touches
//! stays in the process's resident set until the segment is dropped, so the index's size
//! showed in the server's RSS. Postings (`.idx`), positions and the doc store are read in
//! ranges, term by term: here those reads copy the range asked for into a buffer freed after
//! use (the kernel's page cache still keeps the hot ones). The term dictionaries, fast fields
//! and field norms are different: tantivy asks for each of them whole and then looks up a few
//! entries, so a copy would hold all of it in the heap (every published snapshot read the id
//! columns of every segment, 10 MB per million documents) where a map makes resident only the
//! pages looked at.
//!
//! A new segment file goes to the disk as it is written ([`WrittenBack`]): a merge writes its
//! files for seconds (two of a million records' merged segment are 115 MiB each), and left to
//! the page cache their whole size went to the disk in the fsync at their close, 85 ms a file,
//! which the store's own fsyncs waited behind (docs/src/benchmarks.md, "Erasure").
//!
//! While an expunge's merge runs ([`MergePacing`]), tantivy's merge threads pace themselves to
//! two thirds of a core as they read and write segment files (`core::background::pace`):
//! that merge rewrites the whole index when the erased records are spread over it, for
//! seconds, beside the ingest writer and the indexer's own work, and running free it took a
//! whole core of a small machine from the requests.
//!
//! Everything else (the lock, watching `meta.json`, atomic writes) is the `MmapDirectory`'s.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tantivy::HasLen;
use tantivy::directory::error::{
    DeleteError, LockError, OpenDirectoryError, OpenReadError, OpenWriteError,
};
use tantivy::directory::{
    AntiCallToken, Directory, DirectoryLock, FileHandle, Lock, MmapDirectory, OwnedBytes,
    TerminatingWrite, WatchCallback, WatchHandle, WritePtr,
};

#[derive(Clone, Debug)]
pub(super) struct IndexDirectory {
    root: PathBuf,
    inner: MmapDirectory,
    pacing: MergePacing,
}

impl IndexDirectory {
    pub(super) fn open(root: &Path, pacing: &MergePacing) -> Result<Self, OpenDirectoryError> {
        Ok(IndexDirectory {
            root: root.to_path_buf(),
            inner: MmapDirectory::open(root)?,
            pacing: pacing.clone(),
        })
    }
}

/// The share of a core (%) a merge thread takes while [`MergePacing`] is on.
const EXPUNGE_MERGE_SHARE: u32 = 67;

/// Whether the files tantivy's merge threads write pace those threads (see the module's
/// documentation): on while an expunge's merge runs. Shared by the directory and the
/// indexer's expunges.
#[derive(Clone, Debug, Default)]
pub(super) struct MergePacing(Arc<AtomicBool>);

impl MergePacing {
    pub(super) fn set(&self, on: bool) {
        self.0.store(on, Ordering::Relaxed);
    }

    /// Paces the calling thread, reading or writing a segment file, if it is one of
    /// tantivy's merge threads (named `merge_thread_{i}` by its segment updater) and pacing
    /// is on.
    fn pace_here(&self) {
        if self.0.load(Ordering::Relaxed)
            && std::thread::current()
                .name()
                .is_some_and(|name| name.starts_with("merge_thread"))
        {
            crate::core::background::pace(EXPUNGE_MERGE_SHARE);
        }
    }
}

/// Whether tantivy reads the segment file at `path` whole (see the module's documentation).
fn read_whole(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("term" | "fast" | "fieldnorm")
    )
}

impl Directory for IndexDirectory {
    fn get_file_handle(&self, path: &Path) -> Result<Arc<dyn FileHandle>, OpenReadError> {
        if read_whole(path) {
            return self.inner.get_file_handle(path);
        }
        let open = || -> io::Result<ReadFile> {
            let file = File::open(self.root.join(path))?;
            let len = usize::try_from(file.metadata()?.len()).map_err(io::Error::other)?;
            Ok(ReadFile {
                file,
                len,
                pacing: self.pacing.clone(),
            })
        };
        match open() {
            Ok(file) => Ok(Arc::new(file)),
            Err(err) if err.kind() == io::ErrorKind::NotFound => {
                Err(OpenReadError::FileDoesNotExist(path.to_path_buf()))
            }
            Err(err) => Err(OpenReadError::wrap_io_error(err, path.to_path_buf())),
        }
    }

    fn delete(&self, path: &Path) -> Result<(), DeleteError> {
        self.inner.delete(path)
    }

    fn exists(&self, path: &Path) -> Result<bool, OpenReadError> {
        self.inner.exists(path)
    }

    fn open_write(&self, path: &Path) -> Result<WritePtr, OpenWriteError> {
        // As the `MmapDirectory` does: a new file only; durable once terminated and the
        // directory synced.
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(self.root.join(path))
            .map_err(|err| match err.kind() {
                io::ErrorKind::AlreadyExists => {
                    OpenWriteError::FileAlreadyExists(path.to_path_buf())
                }
                _ => OpenWriteError::wrap_io_error(err, path.to_path_buf()),
            })?;
        Ok(BufWriter::new(Box::new(WrittenBack::new(
            file,
            self.pacing.clone(),
        ))))
    }

    fn atomic_read(&self, path: &Path) -> Result<Vec<u8>, OpenReadError> {
        self.inner.atomic_read(path)
    }

    fn atomic_write(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        self.inner.atomic_write(path, data)
    }

    fn sync_directory(&self) -> io::Result<()> {
        self.inner.sync_directory()
    }

    fn acquire_lock(&self, lock: &Lock) -> Result<DirectoryLock, LockError> {
        self.inner.acquire_lock(lock)
    }

    fn watch(&self, watch_callback: WatchCallback) -> tantivy::Result<WatchHandle> {
        self.inner.watch(watch_callback)
    }
}

/// A segment file: each read is a `pread` into a buffer of its own (where a merge thread
/// also paces itself, while [`MergePacing`] is on).
#[derive(Debug)]
struct ReadFile {
    file: File,
    len: usize,
    pacing: MergePacing,
}

impl HasLen for ReadFile {
    fn len(&self) -> usize {
        self.len
    }
}

impl FileHandle for ReadFile {
    fn read_bytes(&self, range: Range<usize>) -> io::Result<OwnedBytes> {
        self.pacing.pace_here();
        let end = range.end.min(self.len);
        let mut buffer = vec![0; end.saturating_sub(range.start)];
        self.file.read_exact_at(&mut buffer, range.start as u64)?;
        Ok(OwnedBytes::new(buffer))
    }
}

/// Bytes of a file written between two requests to write them back: what the disk takes in
/// about a millisecond, so that a commit of the store's, whose sync queues behind a step,
/// waits little (8 MiB steps showed in the ingest p99 while a merge ran alone).
const WRITE_BACK_STEP: u64 = 1 << 20;

/// A segment file being written: every [`WRITE_BACK_STEP`] bytes, their writeback starts, and
/// the step before is waited for, so at most two steps of it are dirty in the page cache at
/// any time and its final sync has little left to write. The waits fall on the thread
/// writing the file (the indexer's or a merge's), which runs beside the requests. A merge
/// thread also paces itself at each write while [`MergePacing`] is on.
struct WrittenBack {
    file: File,
    pacing: MergePacing,
    /// Bytes written.
    written: u64,
    /// Where the step whose writeback was requested last begins, once one was.
    requested: Option<u64>,
    /// Where the next step begins.
    next: u64,
}

impl WrittenBack {
    fn new(file: File, pacing: MergePacing) -> WrittenBack {
        WrittenBack {
            file,
            pacing,
            written: 0,
            requested: None,
            next: 0,
        }
    }

    /// Starts the writeback of the bytes written since the last step, and waits for the step
    /// before that one.
    fn step(&mut self) -> io::Result<()> {
        let start = self.next;
        sync_file_range(
            &self.file,
            start,
            self.written - start,
            libc::SYNC_FILE_RANGE_WRITE,
        )?;
        if let Some(before) = self.requested {
            sync_file_range(
                &self.file,
                before,
                start - before,
                libc::SYNC_FILE_RANGE_WAIT_BEFORE
                    | libc::SYNC_FILE_RANGE_WRITE
                    | libc::SYNC_FILE_RANGE_WAIT_AFTER,
            )?;
        }
        self.requested = Some(start);
        self.next = self.written;
        Ok(())
    }
}

impl Write for WrittenBack {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.write(buf)?;
        self.written += n as u64;
        if self.written - self.next >= WRITE_BACK_STEP {
            // A hint: where the filesystem has no writeback to start (or refuses the call),
            // the file is written all the same, and a failing disk fails the final sync.
            let _ = self.step();
        }
        self.pacing.pace_here();
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl TerminatingWrite for WrittenBack {
    fn terminate_ref(&mut self, _: AntiCallToken) -> io::Result<()> {
        self.file.sync_data()
    }
}

/// `sync_file_range(2)` on `len` bytes of `file` from `offset` (rustix has no wrapper).
fn sync_file_range(file: &File, offset: u64, len: u64, flags: u32) -> io::Result<()> {
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return Err(io::Error::other("a file range past i64"));
    };
    // SAFETY: the call takes a file descriptor, two integers and flags, and touches no memory
    // of the process; the descriptor is `file`'s, open for as long as the borrow lasts.
    let result = unsafe { libc::sync_file_range(file.as_raw_fd(), offset, len, flags) };
    if result == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use std::io::Write;

    use tantivy::directory::error::{OpenReadError, OpenWriteError};
    use tantivy::directory::{Directory, TerminatingWrite};

    use super::{IndexDirectory, MergePacing};

    #[test]
    fn reads_ranges_of_a_file_and_knows_a_missing_one() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("f"), b"abcdef").expect("write");
        let directory = IndexDirectory::open(dir.path(), &MergePacing::default()).expect("open");
        let file = directory.get_file_handle(Path::new("f")).expect("handle");
        assert_eq!(file.len(), 6);
        assert_eq!(file.read_bytes(1..4).expect("read").as_slice(), b"bcd");
        assert!(file.read_bytes(6..6).expect("empty read").is_empty());
        assert!(matches!(
            directory.get_file_handle(Path::new("missing")),
            Err(OpenReadError::FileDoesNotExist(_))
        ));
    }

    #[test]
    fn a_file_written_back_in_steps_reads_back_whole() {
        let dir = tempfile::tempdir().expect("temp dir");
        let directory = IndexDirectory::open(dir.path(), &MergePacing::default()).expect("open");
        let path = Path::new("seg.idx");
        // Three steps and a part: every request and wait path runs.
        let len = 3 * super::WRITE_BACK_STEP as usize + 12_345;
        let content: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let mut writer = directory.open_write(path).expect("open_write");
        for chunk in content.chunks(100_000) {
            writer.write_all(chunk).expect("write");
        }
        writer.terminate().expect("terminate");
        assert_eq!(std::fs::read(dir.path().join(path)).expect("read"), content);
        assert!(matches!(
            directory.open_write(path),
            Err(OpenWriteError::FileAlreadyExists(_))
        ));
    }

    #[test]
    fn whole_read_structures_are_mapped_and_their_ranges_read_the_same() {
        let dir = tempfile::tempdir().expect("temp dir");
        let directory = IndexDirectory::open(dir.path(), &MergePacing::default()).expect("open");
        for name in ["s.term", "s.fast", "s.fieldnorm", "s.idx"] {
            std::fs::write(dir.path().join(name), b"abcdef").expect("write");
            let file = directory.get_file_handle(Path::new(name)).expect("handle");
            assert_eq!(file.len(), 6, "{name}");
            assert_eq!(
                file.read_bytes(2..5).expect("read").as_slice(),
                b"cde",
                "{name}"
            );
        }
        assert!(super::read_whole(Path::new("s.term")));
        assert!(super::read_whole(Path::new("s.fast")));
        assert!(!super::read_whole(Path::new("s.idx")));
        assert!(!super::read_whole(Path::new("s.store")));
        assert!(matches!(
            directory.get_file_handle(Path::new("missing.term")),
            Err(OpenReadError::FileDoesNotExist(_))
        ));
    }

    /// How long a thread named `name` spent in 20 reads of a segment file of `directory`,
    /// running 5 ms of CPU before each.
    fn time_in_reads(directory: &IndexDirectory, name: &str) -> std::time::Duration {
        let file = directory.get_file_handle(Path::new("f")).expect("handle");
        std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                let mut reading = std::time::Duration::ZERO;
                for _ in 0..20 {
                    crate::core::background::spin_for(std::time::Duration::from_millis(5));
                    let started = std::time::Instant::now();
                    file.read_bytes(0..3).expect("read");
                    reading += started.elapsed();
                }
                reading
            })
            .expect("spawn")
            .join()
            .expect("join")
    }

    #[test]
    fn a_merge_thread_paces_itself_while_pacing_is_on() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("f"), b"abcdef").expect("write");
        let pacing = MergePacing::default();
        let directory = IndexDirectory::open(dir.path(), &pacing).expect("open");
        let free = std::time::Duration::from_millis(15);
        assert!(time_in_reads(&directory, "merge_thread_0") < free);
        pacing.set(true);
        // Half as long as it ran (100 ms), less the 10 ms before its first pause and what ran
        // after its last.
        let paced = time_in_reads(&directory, "merge_thread_0");
        assert!(paced >= std::time::Duration::from_millis(30), "{paced:?}");
        // Only merge threads: the indexer's writes of new segments go on unpaced.
        assert!(time_in_reads(&directory, "search-indexer") < free);
        pacing.set(false);
        assert!(time_in_reads(&directory, "merge_thread_1") < free);
    }
}
