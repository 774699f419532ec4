//! The request log: a store of its own (`requests.redb` on redb), so logging every call never waits on the data path's commits.

use crate::core::clock::Timestamp;
use crate::core::ids::request_id_time;
use crate::store::{KeyHolder, Partition, RequestLogRow, StoreError, time_key};

/// Where an entry sits in its partition's log; a page resumes just before one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogPosition {
    /// The entry's time in microseconds (`time_key`).
    pub time: u64,
    /// Orders the entries of one partition and time, in the order they were appended.
    pub sequence: u64,
}

/// Which entries a page holds, by response status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StatusFilter {
    #[default]
    Any,
    /// One class: 2 for 2xx, 4 for 4xx, 5 for 5xx...
    Class(u16),
}

impl StatusFilter {
    pub fn matches(self, status: u16) -> bool {
        match self {
            StatusFilter::Any => true,
            StatusFilter::Class(class) => status / 100 == class,
        }
    }
}

/// Which entries a page holds: those that pass every condition given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EntryFilter {
    pub status: StatusFilter,
    /// The error `code`, exactly.
    pub code: Option<String>,
    /// The HTTP method, exactly (upper case).
    pub method: Option<String>,
    pub holder: Option<KeyHolder>,
    pub key_id: Option<String>,
    /// The request id, exactly. An id that carries its time ([`request_id_time`]) confines
    /// the read to the entries of that microsecond.
    pub request_id: Option<String>,
}

impl EntryFilter {
    pub fn matches(&self, row: &RequestLogRow) -> bool {
        fn same(wanted: &Option<String>, got: Option<&str>) -> bool {
            wanted.as_deref().is_none_or(|w| got == Some(w))
        }
        self.status.matches(row.status)
            && same(&self.code, row.code.as_deref())
            && same(&self.method, Some(&row.method))
            && self.holder.is_none_or(|h| row.holder == Some(h))
            && same(&self.key_id, row.key_id.as_deref())
            && same(&self.request_id, Some(&row.request_id))
    }

    /// The only time (`time_key`) a matching entry can have, when the filter names a request
    /// id that carries its time.
    pub fn pinned_time(&self) -> Option<u64> {
        self.request_id
            .as_deref()
            .and_then(request_id_time)
            .map(time_key)
    }
}

/// A page reads at most this many entries, so a rare status cannot make one page read the
/// whole log; the page then ends early, with where to read on.
pub const PAGE_SCAN_LIMIT: usize = 5_000;

/// One page of a partition's log, newest first.
#[derive(Debug)]
pub struct LogPage {
    pub entries: Vec<(LogPosition, RequestLogRow)>,
    /// Where the next page resumes, when more entries may follow: the last entry the page
    /// read, which a filtered page may have passed over.
    pub next: Option<LogPosition>,
}

impl LogPage {
    /// The page rule, the one both backends follow: the page that `scan` (a partition's
    /// entries, newest first, each numbered by its place in the scan from 1) makes. It holds
    /// the first `limit` entries that pass `filter`, and ends early after
    /// [`PAGE_SCAN_LIMIT`] entries; when entries are left over, the next page resumes after
    /// the last entry read. `read` gives an entry's position and row, and is only asked for
    /// entries the page reads.
    pub fn from_scan<Entry>(
        scan: impl IntoIterator<Item = Result<(usize, Entry), StoreError>>,
        limit: usize,
        filter: &EntryFilter,
        mut read: impl FnMut(Entry) -> Result<(LogPosition, RequestLogRow), StoreError>,
    ) -> Result<LogPage, StoreError> {
        let mut entries = Vec::new();
        let mut last = None;
        for scanned in scan {
            let (number, entry) = scanned?;
            if entries.len() == limit || number > PAGE_SCAN_LIMIT {
                return Ok(LogPage {
                    entries,
                    next: last,
                });
            }
            let (position, row) = read(entry)?;
            last = Some(position);
            if filter.matches(&row) {
                entries.push((position, row));
            }
        }
        Ok(LogPage {
            entries,
            next: None,
        })
    }
}

pub trait RequestLogStore: Send + Sync {
    /// Appends `(partition, row)` entries in one durable commit; each goes after every entry
    /// of its partition at the same time.
    fn append_requests(&self, entries: &[(Partition, RequestLogRow)]) -> Result<(), StoreError>;

    /// The entries of `partition` that pass `filter`, newest first, starting just before
    /// `before` (at the newest without it): at most `limit`, reading at most
    /// [`PAGE_SCAN_LIMIT`] entries (only those of [`EntryFilter::pinned_time`] when it has
    /// one).
    fn requests_page(
        &self,
        partition: Partition,
        before: Option<LogPosition>,
        limit: usize,
        filter: &EntryFilter,
    ) -> Result<LogPage, StoreError>;

    /// Deletes every partition's entries older than `cutoff`, in bounded transactions;
    /// returns how many.
    fn purge_requests_before(&self, cutoff: Timestamp) -> Result<usize, StoreError>;

    /// Deletes at most `limit` entries of `partition` (of a deleted endpoint) in one
    /// transaction; returns how many.
    fn purge_partition_requests(
        &self,
        partition: Partition,
        limit: usize,
    ) -> Result<usize, StoreError>;
}
