//! [`EndpointsRead`] and [`EndpointsWrite`] on redb.

use redb::ReadableTable;

use super::tx::{RedbWrite, Tables};
use super::{AUDIT, from_json, to_json};
use crate::store::endpoints::{EndpointsRead, EndpointsWrite};
use crate::store::{AuditRow, StoreError};

impl<T: Tables> EndpointsRead for T {
    fn audit_page(
        &self,
        endpoint_id: u64,
        before: u64,
        limit: usize,
    ) -> Result<Vec<AuditRow>, StoreError> {
        let table = self.open(AUDIT)?;
        let mut out = Vec::new();
        for entry in table.range((endpoint_id, 0)..(endpoint_id, before))?.rev() {
            if out.len() == limit {
                break;
            }
            out.push(from_json(entry?.1.value())?);
        }
        Ok(out)
    }
}

impl EndpointsWrite for RedbWrite<'_> {
    fn append_audit(&mut self, endpoint_id: u64, row: &AuditRow) -> Result<(), StoreError> {
        self.table(AUDIT)?
            .insert((endpoint_id, row.id), to_json(row)?.as_slice())?;
        Ok(())
    }
}

impl crate::store::endpoints::EndpointsStore for super::RedbStore {}
