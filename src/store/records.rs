//! Records: the data operations' rows (records, idempotency keys) and the batch apply of the ingest writer.

use std::ops::ControlFlow;

use crate::core::clock::Timestamp;
use crate::store::StoreError;

pub trait RecordsRead {
    // Search's reads (`domain::search`): a walk or a check of candidates examines many
    // records and keeps few, so each record is shown to a visitor where it is stored, to be
    // tested in place and copied only if kept.

    /// Shows the records of `partition` with ids in `[lower, upper]` to `visit`, newest first,
    /// until it breaks.
    fn visit_newest_first(
        &self,
        partition: u64,
        lower: u128,
        upper: u128,
        visit: &mut SearchVisitor<'_>,
    ) -> Result<(), StoreError>;

    /// Shows those of `ids` that are records of `partition` to `visit`, in the order given,
    /// until it breaks.
    fn visit_records(
        &self,
        partition: u64,
        ids: &[u128],
        visit: &mut SearchVisitor<'_>,
    ) -> Result<(), StoreError>;
}

pub trait RecordsStore {}

/// A visitor of search's reads: a record's id, updated_at and payload, borrowed for the call;
/// it answers whether to go on.
pub type SearchVisitor<'v> = dyn FnMut(u128, Timestamp, &[u8]) -> ControlFlow<()> + 'v;
