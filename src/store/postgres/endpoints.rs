//! endpoints on PostgreSQL: unimplemented stubs, replaced by the real implementation.

#![allow(unused_variables, unused_imports)]

use crate::core::clock::Timestamp;
use crate::store::endpoints::*;
use crate::store::postgres::{PgStore, PgTx};
use crate::store::*;

impl EndpointsRead for PgTx<'_> {
    fn endpoint(&self, id: u64) -> Result<Option<EndpointRow>, StoreError> {
        unimplemented!()
    }
    fn endpoint_id_by_slug(&self, slug: &str) -> Result<Option<u64>, StoreError> {
        unimplemented!()
    }
    fn endpoints_of(
        &self,
        account_id: u64,
    ) -> Result<Vec<(EndpointRow, Option<CollaboratorRow>)>, StoreError> {
        unimplemented!()
    }
    fn api_key(&self, hash: &[u8; 32]) -> Result<Option<ApiKeyRow>, StoreError> {
        unimplemented!()
    }
    fn collaborator(
        &self,
        endpoint_id: u64,
        account_id: u64,
    ) -> Result<Option<CollaboratorRow>, StoreError> {
        unimplemented!()
    }
    fn collaborators(&self, endpoint_id: u64) -> Result<Vec<CollaboratorRow>, StoreError> {
        unimplemented!()
    }
    fn invitation(&self, id: u64) -> Result<Option<InvitationRow>, StoreError> {
        unimplemented!()
    }
    fn invitation_by_token(&self, hash: &[u8; 32]) -> Result<Option<InvitationRow>, StoreError> {
        unimplemented!()
    }
    fn invitations(&self, endpoint_id: u64) -> Result<Vec<InvitationRow>, StoreError> {
        unimplemented!()
    }
    fn audit_page(
        &self,
        endpoint_id: u64,
        before: u64,
        limit: usize,
    ) -> Result<Vec<AuditRow>, StoreError> {
        unimplemented!()
    }
}

impl EndpointsWrite for PgTx<'_> {
    fn insert_endpoint(&mut self, row: &EndpointRow) -> Result<(), StoreError> {
        unimplemented!()
    }
    fn put_endpoint(&mut self, row: &EndpointRow) -> Result<(), StoreError> {
        unimplemented!()
    }
    fn insert_api_key(&mut self, hash: &[u8; 32], row: &ApiKeyRow) -> Result<(), StoreError> {
        unimplemented!()
    }
    fn delete_api_key(&mut self, hash: &[u8; 32]) -> Result<(), StoreError> {
        unimplemented!()
    }
    fn put_collaborator(&mut self, row: &CollaboratorRow) -> Result<(), StoreError> {
        unimplemented!()
    }
    fn delete_collaborator(&mut self, endpoint_id: u64, account_id: u64) -> Result<(), StoreError> {
        unimplemented!()
    }
    fn insert_invitation(
        &mut self,
        row: &InvitationRow,
        token_hash: &[u8; 32],
    ) -> Result<(), StoreError> {
        unimplemented!()
    }
    fn put_invitation(&mut self, row: &InvitationRow) -> Result<(), StoreError> {
        unimplemented!()
    }
    fn append_audit(&mut self, endpoint_id: u64, row: &AuditRow) -> Result<(), StoreError> {
        unimplemented!()
    }
}

impl EndpointsStore for PgStore {}
