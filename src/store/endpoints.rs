//! Endpoints and who may use them: keys, collaborators, invitations, the deploy workflow, and
//! the audit log of every change.

use crate::store::{AuditRow, EndpointRow, StoreError};

pub trait EndpointsRead {
    /// The endpoint's audit entries with ids below `before`, newest first, at most `limit`.
    fn audit_page(
        &self,
        endpoint_id: u64,
        before: u64,
        limit: usize,
    ) -> Result<Vec<AuditRow>, StoreError>;

    fn endpoint(&self, id: u64) -> Result<Option<EndpointRow>, StoreError>;

    fn endpoint_by_slug(&self, slug: &str) -> Result<Option<EndpointRow>, StoreError>;
}

pub trait EndpointsWrite {
    /// Appends an audit entry of `endpoint_id` (its id from [`crate::store::IdKind::Audit`]).
    fn append_audit(&mut self, endpoint_id: u64, row: &AuditRow) -> Result<(), StoreError>;
}

/// Units of work of their own transaction.
pub trait EndpointsStore {}
