//! Erasure requests (`domain::erasures`): their rows, read and written in transactions. The
//! records themselves are removed by the ingest batch (`records::RecordWrite::Erase`), which
//! counts them on the erasure's row in the same commit.

use crate::store::{ErasureRow, StoreError};

pub trait ErasuresRead {
    fn erasure(&self, id: u64) -> Result<Option<ErasureRow>, StoreError>;

    /// The erasures of an endpoint (both environments), newest first.
    fn endpoint_erasures(&self, endpoint_id: u64) -> Result<Vec<ErasureRow>, StoreError>;

    /// Every erasure still running (any endpoint), oldest first.
    fn running_erasures(&self) -> Result<Vec<ErasureRow>, StoreError>;

    /// The erasures running, and those (running or not) with ids above `after`: what a node
    /// follows to drop its copies of erased records (`workers::cluster`), oldest first.
    fn erasures_to_follow(&self, after: u64) -> Result<Vec<ErasureRow>, StoreError>;

    /// Every erasure made at or after `at` (microseconds since the epoch), oldest first: what a
    /// backup taken before then still holds (`intake restore` warns of them).
    fn erasures_since(
        &self,
        at: crate::core::clock::Timestamp,
    ) -> Result<Vec<ErasureRow>, StoreError>;
}

pub trait ErasuresWrite {
    /// Stores `row` (new, under an id from [`crate::store::IdKind::Erasure`], or changed).
    fn put_erasure(&mut self, row: &ErasureRow) -> Result<(), StoreError>;
}

/// `range` (lowest, highest) widened to take in `id`.
pub fn widen(range: Option<(u128, u128)>, id: u128) -> Option<(u128, u128)> {
    Some(match range {
        Some((low, high)) => (low.min(id), high.max(id)),
        None => (id, id),
    })
}
