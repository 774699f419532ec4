//! [`EndpointsRead`] and [`EndpointsWrite`] on redb.

use redb::ReadableTable;

use super::tx::{RedbWrite, Tables};
use super::{AUDIT, ENDPOINT_SLUGS, ENDPOINTS, from_json, to_json};
use crate::store::endpoints::{EndpointsRead, EndpointsWrite};
use crate::store::{AuditRow, EndpointRow, StoreError};

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

    fn endpoint(&self, id: u64) -> Result<Option<EndpointRow>, StoreError> {
        match self.open(ENDPOINTS)?.get(id)? {
            Some(value) => Ok(Some(from_json(value.value())?)),
            None => Ok(None),
        }
    }

    fn endpoint_by_slug(&self, slug: &str) -> Result<Option<EndpointRow>, StoreError> {
        match self.open(ENDPOINT_SLUGS)?.get(slug)? {
            Some(id) => self.endpoint(id.value()),
            None => Ok(None),
        }
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
