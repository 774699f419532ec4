//! The request log: a store of its own (`requests.redb` on redb), so logging every call never waits on the data path's commits.

use crate::core::clock::Timestamp;
use crate::store::{RequestLogRow, StoreError};

/// Where an entry sits in its partition's log; a page resumes just before one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogPosition {
    /// The entry's time in microseconds (`time_key`).
    pub time: u64,
    /// Orders the entries of one partition and time, in the order they were appended.
    pub sequence: u64,
}

/// Which entries a page holds, by response status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusFilter {
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

pub trait RequestLogStore: Send + Sync {
    /// Appends `(partition, row)` entries in one durable commit; each goes after every entry
    /// of its partition at the same time.
    fn append_requests(&self, entries: &[(u64, RequestLogRow)]) -> Result<(), StoreError>;

    /// The entries of `partition` whose status passes `filter`, newest first, starting just
    /// before `before` (at the newest without it): at most `limit`, reading at most
    /// [`PAGE_SCAN_LIMIT`] entries.
    fn requests_page(
        &self,
        partition: u64,
        before: Option<LogPosition>,
        limit: usize,
        filter: StatusFilter,
    ) -> Result<LogPage, StoreError>;

    /// Deletes every partition's entries older than `cutoff`, in bounded transactions;
    /// returns how many.
    fn purge_requests_before(&self, cutoff: Timestamp) -> Result<usize, StoreError>;

    /// Deletes at most `limit` entries of `partition` (of a deleted endpoint) in one
    /// transaction; returns how many.
    fn purge_partition_requests(&self, partition: u64, limit: usize) -> Result<usize, StoreError>;
}
