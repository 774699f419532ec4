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

    /// Every erasure made at or after `at` (microseconds since the epoch), oldest first: what a
    /// backup taken before then still holds (`intake restore` warns of them).
    fn erasures_since(&self, at: crate::core::clock::Timestamp)
    -> Result<Vec<ErasureRow>, StoreError>;
}

pub trait ErasuresWrite {
    /// Stores `row` (new, under an id from [`crate::store::IdKind::Erasure`], or changed).
    fn put_erasure(&mut self, row: &ErasureRow) -> Result<(), StoreError>;
}
