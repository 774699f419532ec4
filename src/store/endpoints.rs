//! Endpoints and who may use them: keys, collaborators, invitations, the deploy workflow, and
//! the audit log of every change.
//!
//! Every write that changes what a data call may do (an endpoint, its slug, a key, a
//! collaborator, an account) reports `access_changed`, so the access caches are cleared after
//! its commit, and raises the access version in the same commit, so a reader of a snapshot
//! can tell whether access changed since (`domain::stream` re-checks an open stream's key).

use crate::store::{ApiKeyRow, AuditRow, CollaboratorRow, EndpointRow, InvitationRow, StoreError};

pub trait EndpointsRead {
    /// A number that every commit reporting `access_changed` raises, read in this snapshot:
    /// a reader that saw version `v` beside some data knows that no change of access
    /// committed after that data was written unless the version has moved since.
    fn access_version(&self) -> Result<u64, StoreError>;

    fn endpoint(&self, id: u64) -> Result<Option<EndpointRow>, StoreError>;

    /// The id of the endpoint with this slug.
    fn endpoint_id_by_slug(&self, slug: &str) -> Result<Option<u64>, StoreError>;

    /// Every endpoint `account_id` owns (with `None`) or collaborates on (with its collaborator
    /// row), oldest first.
    fn endpoints_of(
        &self,
        account_id: u64,
    ) -> Result<Vec<(EndpointRow, Option<CollaboratorRow>)>, StoreError>;

    /// The API key whose secret has this SHA-256.
    fn api_key(&self, hash: &[u8; 32]) -> Result<Option<ApiKeyRow>, StoreError>;

    fn collaborator(
        &self,
        endpoint_id: u64,
        account_id: u64,
    ) -> Result<Option<CollaboratorRow>, StoreError>;

    /// The endpoint's collaborators, by account id.
    fn collaborators(&self, endpoint_id: u64) -> Result<Vec<CollaboratorRow>, StoreError>;

    fn invitation(&self, id: u64) -> Result<Option<InvitationRow>, StoreError>;

    /// The invitation whose link token has this SHA-256.
    fn invitation_by_token(&self, hash: &[u8; 32]) -> Result<Option<InvitationRow>, StoreError>;

    /// The endpoint's invitations, newest first.
    fn invitations(&self, endpoint_id: u64) -> Result<Vec<InvitationRow>, StoreError>;

    /// Deleted endpoints whose purge has not finished.
    fn unpurged_deletions(&self) -> Result<Vec<EndpointRow>, StoreError>;

    /// The endpoint's audit entries with ids below `before`, newest first, at most `limit`.
    fn audit_page(
        &self,
        endpoint_id: u64,
        before: u64,
        limit: usize,
    ) -> Result<Vec<AuditRow>, StoreError>;
}

pub trait EndpointsWrite {
    /// Stores a new endpoint (its id from [`crate::store::IdKind::Endpoint`]) under its slug,
    /// which the caller has checked is free; reports `access_changed`.
    fn insert_endpoint(&mut self, row: &EndpointRow) -> Result<(), StoreError>;

    /// Replaces an endpoint's row (its slug never changes); reports `access_changed`.
    fn put_endpoint(&mut self, row: &EndpointRow) -> Result<(), StoreError>;

    /// Stores a new API key under the SHA-256 of its secret; reports `access_changed`.
    fn insert_api_key(&mut self, hash: &[u8; 32], row: &ApiKeyRow) -> Result<(), StoreError>;

    /// Replaces the row of an existing API key (a rotation sets its `expires_at`); reports
    /// `access_changed`.
    fn put_api_key(&mut self, hash: &[u8; 32], row: &ApiKeyRow) -> Result<(), StoreError>;

    /// Deletes the API key with this hash (if any); reports `access_changed`.
    fn delete_api_key(&mut self, hash: &[u8; 32]) -> Result<(), StoreError>;

    /// Stores a collaborator (new, or changed); reports `access_changed`.
    fn put_collaborator(&mut self, row: &CollaboratorRow) -> Result<(), StoreError>;

    /// Deletes a collaborator (if any); reports `access_changed`.
    fn delete_collaborator(&mut self, endpoint_id: u64, account_id: u64) -> Result<(), StoreError>;

    /// Stores a new invitation (its id from [`crate::store::IdKind::Invitation`]) and the
    /// SHA-256 of its link token.
    fn insert_invitation(
        &mut self,
        row: &InvitationRow,
        token_hash: &[u8; 32],
    ) -> Result<(), StoreError>;

    /// Deletes an invitation and its link token's hash.
    fn delete_invitation(&mut self, id: u64, token_hash: &[u8; 32]) -> Result<(), StoreError>;

    /// Replaces an invitation's row (its token never changes); one never inserted is refused
    /// (`Corrupt`).
    fn put_invitation(&mut self, row: &InvitationRow) -> Result<(), StoreError>;

    /// Appends an audit entry of `endpoint_id` (its id from [`crate::store::IdKind::Audit`]).
    fn append_audit(&mut self, endpoint_id: u64, row: &AuditRow) -> Result<(), StoreError>;
}
