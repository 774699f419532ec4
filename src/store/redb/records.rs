//! [`RecordsRead`] and [`RecordsStore`] on redb.

use redb::ReadableTable;

use super::tx::Tables;
use super::{RECORDS, RedbStore, decode_record};
use crate::store::StoreError;
use crate::store::records::{RecordsRead, RecordsStore, SearchVisitor};

impl<T: Tables> RecordsRead for T {
    fn visit_newest_first(
        &self,
        partition: u64,
        lower: u128,
        upper: u128,
        visit: &mut SearchVisitor<'_>,
    ) -> Result<(), StoreError> {
        let records = self.open(RECORDS)?;
        for entry in records
            .range((partition, lower)..=(partition, upper))?
            .rev()
        {
            let (key, value) = entry?;
            let (updated_at, payload) = decode_record(value.value())?;
            if visit(key.value().1, updated_at, payload).is_break() {
                break;
            }
        }
        Ok(())
    }

    fn visit_records(
        &self,
        partition: u64,
        ids: &[u128],
        visit: &mut SearchVisitor<'_>,
    ) -> Result<(), StoreError> {
        let records = self.open(RECORDS)?;
        for &id in ids {
            let Some(value) = records.get((partition, id))? else {
                continue;
            };
            let (updated_at, payload) = decode_record(value.value())?;
            if visit(id, updated_at, payload).is_break() {
                break;
            }
        }
        Ok(())
    }
}

impl RecordsStore for RedbStore {}
