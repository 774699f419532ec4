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
//! pages looked at. Everything else (writes, the lock, watching `meta.json`) is the
//! `MmapDirectory`'s.

use std::fs::File;
use std::io;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tantivy::HasLen;
use tantivy::directory::error::{
    DeleteError, LockError, OpenDirectoryError, OpenReadError, OpenWriteError,
};
use tantivy::directory::{
    Directory, DirectoryLock, FileHandle, Lock, MmapDirectory, OwnedBytes, WatchCallback,
    WatchHandle, WritePtr,
};

#[derive(Clone, Debug)]
pub(super) struct ReadDirectory {
    root: PathBuf,
    inner: MmapDirectory,
}

impl ReadDirectory {
    pub(super) fn open(root: &Path) -> Result<Self, OpenDirectoryError> {
        Ok(ReadDirectory {
            root: root.to_path_buf(),
            inner: MmapDirectory::open(root)?,
        })
    }
}

/// Whether tantivy reads the segment file at `path` whole (see the module's documentation).
fn read_whole(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("term" | "fast" | "fieldnorm")
    )
}

impl Directory for ReadDirectory {
    fn get_file_handle(&self, path: &Path) -> Result<Arc<dyn FileHandle>, OpenReadError> {
        if read_whole(path) {
            return self.inner.get_file_handle(path);
        }
        let open = || -> io::Result<ReadFile> {
            let file = File::open(self.root.join(path))?;
            let len = usize::try_from(file.metadata()?.len()).map_err(io::Error::other)?;
            Ok(ReadFile { file, len })
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
        self.inner.open_write(path)
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

/// A segment file: each read is a `pread` into a buffer of its own.
#[derive(Debug)]
struct ReadFile {
    file: File,
    len: usize,
}

impl HasLen for ReadFile {
    fn len(&self) -> usize {
        self.len
    }
}

impl FileHandle for ReadFile {
    fn read_bytes(&self, range: Range<usize>) -> io::Result<OwnedBytes> {
        let end = range.end.min(self.len);
        let mut buffer = vec![0; end.saturating_sub(range.start)];
        self.file.read_exact_at(&mut buffer, range.start as u64)?;
        Ok(OwnedBytes::new(buffer))
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use tantivy::directory::Directory;
    use tantivy::directory::error::OpenReadError;

    use super::ReadDirectory;

    #[test]
    fn reads_ranges_of_a_file_and_knows_a_missing_one() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("f"), b"abcdef").expect("write");
        let directory = ReadDirectory::open(dir.path()).expect("open");
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
    fn whole_read_structures_are_mapped_and_their_ranges_read_the_same() {
        let dir = tempfile::tempdir().expect("temp dir");
        let directory = ReadDirectory::open(dir.path()).expect("open");
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
}
