//! The search index as the planner reads it: committed states of an index of every record's
//! payload text, each covering the change log up to a known position. The tantivy index and
//! the indexer thread that keeps it current are a worker (`workers::search_index`).

use std::sync::Arc;
use std::time::Duration;

use crate::domain::error::Result;
use crate::store::Partition;

/// The search index: the latest state its indexer has published.
pub trait SearchIndex: Send + Sync {
    fn snapshot(&self) -> Arc<Snapshot>;

    /// Makes final every delete logged in the change log before the call: waits until the
    /// index has applied them, rewrites every part of the index that still holds deleted
    /// documents (a deleted document's indexed text stays on disk until then) and removes the
    /// old parts' files. Blocks for at most `timeout`; searches go on meanwhile from the
    /// last published snapshot.
    fn expunge_deleted(&self, timeout: Duration) -> Result<ExpungeReport>;
}

/// What [`SearchIndex::expunge_deleted`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExpungeReport {
    /// Segments rewritten without their deleted documents.
    pub segments_merged: usize,
    /// Deleted documents they held, now gone from the index's files.
    pub docs_expunged: u64,
    /// From the call to the answer (waiting for the indexer included).
    pub took: Duration,
}

/// A committed state of the index and the change-log sequence it covers.
///
/// **Invariant.** Every change up to `position` is in the view, none after it. So a search
/// knows exactly which changes its view has not seen: those after `position`, still in the
/// change log (the indexer trims the log only well behind the snapshots it publishes).
pub struct Snapshot {
    /// `None` while the index is being rebuilt: search must scan the store.
    pub view: Option<Box<dyn IndexView>>,
    pub position: u64,
}

/// The queries a committed state answers.
pub trait IndexView: Send + Sync {
    /// The share of indexed records holding the rarest indexed trigram of the folded query
    /// `q`: an upper bound on the share that contain `q` (exact for a 3-character query).
    /// `None` when every trigram of `q` is a stop trigram: the index cannot narrow it down.
    fn rarest_share(&self, q: &str) -> Result<Option<f64>>;

    /// Records of `partition` with an id in `[lower, upper]` whose folded text contains the
    /// folded query `q`, newest first, at least `want` of them unless the range has fewer.
    fn query(
        &self,
        partition: Partition,
        q: &str,
        lower: u128,
        upper: u128,
        want: usize,
    ) -> Result<Hits>;
}

/// Ids found by one index query, newest first, and whether the index may hold more below.
pub struct Hits {
    pub ids: Vec<u128>,
    /// The lowest id the query fully covered: every match in `[covered_down_to, upper]` is in
    /// `ids`. Equal to the query's lower bound when the index has nothing more.
    pub covered_down_to: u128,
}
