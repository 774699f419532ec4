//! usage on PostgreSQL: unimplemented stubs, replaced by the real implementation.

#![allow(unused_variables, unused_imports)]

use crate::core::clock::Timestamp;
use crate::core::ids::RecordId;
use crate::store::postgres::{PgStore, PgTx};
use crate::store::usage::*;
use crate::store::*;
use std::ops::{Bound, RangeInclusive};

impl UsageStore for PgStore {
    fn add_calls(&self, deltas: &[CallsDelta]) -> Result<(), StoreError> {
        unimplemented!()
    }
    fn monthly_calls(
        &self,
        partition: u64,
        months: RangeInclusive<u32>,
    ) -> Result<Vec<(u32, u64)>, StoreError> {
        unimplemented!()
    }
    fn daily_calls(
        &self,
        partition: u64,
        days: RangeInclusive<u32>,
    ) -> Result<Vec<(u32, u64)>, StoreError> {
        unimplemented!()
    }
}
