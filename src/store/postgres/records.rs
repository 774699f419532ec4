//! records on PostgreSQL: unimplemented stubs, replaced by the real implementation.

#![allow(unused_variables, unused_imports)]

use crate::core::clock::Timestamp;
use crate::core::ids::RecordId;
use crate::store::postgres::{PgStore, PgTx};
use crate::store::records::*;
use crate::store::*;
use std::ops::{Bound, RangeInclusive};

impl RecordsRead for PgTx<'_> {
    fn record(&self, partition: u64, id: RecordId) -> Result<Option<RecordRow>, StoreError> {
        unimplemented!()
    }
    fn record_page(
        &self,
        partition: u64,
        ids: (Bound<u128>, Bound<u128>),
        order: ScanOrder,
        limit: usize,
        visit: &mut dyn FnMut(RecordRef<'_>) -> Result<(), StoreError>,
    ) -> Result<bool, StoreError> {
        unimplemented!()
    }
    fn record_partitions(&self) -> Result<Vec<u64>, StoreError> {
        unimplemented!()
    }
    fn visit_newest_first(
        &self,
        partition: u64,
        lower: u128,
        upper: u128,
        visit: &mut SearchVisitor<'_>,
    ) -> Result<(), StoreError> {
        unimplemented!()
    }
    fn visit_records(
        &self,
        partition: u64,
        ids: &[u128],
        visit: &mut SearchVisitor<'_>,
    ) -> Result<(), StoreError> {
        unimplemented!()
    }
}

impl RecordsStore for PgStore {
    fn apply_batch(&self, writes: &[BatchWrite<'_>]) -> Result<AppliedBatch, StoreError> {
        unimplemented!()
    }
    fn purge_partition_before(
        &self,
        partition: u64,
        below: u128,
        limit: usize,
    ) -> Result<usize, StoreError> {
        unimplemented!()
    }
    fn purge_idempotency_before(
        &self,
        cutoff: Timestamp,
        limit: usize,
    ) -> Result<usize, StoreError> {
        unimplemented!()
    }
}
