//! request_log on PostgreSQL: unimplemented stubs, replaced by the real implementation.

#![allow(unused_variables, unused_imports)]

use crate::core::clock::Timestamp;
use crate::store::postgres::{PgStore, PgTx};
use crate::store::request_log::*;
use crate::store::*;

impl RequestLogStore for PgStore {
    fn append_requests(&self, entries: &[(u64, RequestLogRow)]) -> Result<(), StoreError> {
        unimplemented!()
    }
    fn requests_page(
        &self,
        partition: u64,
        before: Option<LogPosition>,
        limit: usize,
        filter: StatusFilter,
    ) -> Result<LogPage, StoreError> {
        unimplemented!()
    }
    fn purge_requests_before(&self, cutoff: Timestamp) -> Result<usize, StoreError> {
        unimplemented!()
    }
}
