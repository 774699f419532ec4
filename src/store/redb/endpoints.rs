//! [`EndpointsRead`] and [`EndpointsWrite`] on redb.

use redb::ReadableTable;

use super::tx::{RedbWrite, Tables};
use super::{
    ACCESS_VERSION, API_KEYS, AUDIT, COLLABORATORS, ENDPOINT_SLUGS, ENDPOINTS, INVITATION_TOKENS,
    INVITATIONS, META, from_json, read_counter, to_json,
};
use crate::store::endpoints::{EndpointsRead, EndpointsWrite};
use crate::store::{ApiKeyRow, AuditRow, CollaboratorRow, EndpointRow, InvitationRow, StoreError};

impl<T: Tables> EndpointsRead for T {
    fn access_version(&self) -> Result<u64, StoreError> {
        read_counter(&self.open(META)?, ACCESS_VERSION)
    }

    fn endpoint(&self, id: u64) -> Result<Option<EndpointRow>, StoreError> {
        match self.open(ENDPOINTS)?.get(id)? {
            Some(value) => Ok(Some(from_json(value.value())?)),
            None => Ok(None),
        }
    }

    fn endpoint_id_by_slug(&self, slug: &str) -> Result<Option<u64>, StoreError> {
        Ok(self.open(ENDPOINT_SLUGS)?.get(slug)?.map(|id| id.value()))
    }

    fn endpoints_of(
        &self,
        account_id: u64,
    ) -> Result<Vec<(EndpointRow, Option<CollaboratorRow>)>, StoreError> {
        let collaborators = self.open(COLLABORATORS)?;
        let mut out = Vec::new();
        for entry in self.open(ENDPOINTS)?.iter()? {
            let row: EndpointRow = from_json(entry?.1.value())?;
            if row.owner_id == account_id {
                out.push((row, None));
            } else if let Some(c) = collaborators.get((row.id, account_id))? {
                let collaborator = from_json(c.value())?;
                out.push((row, Some(collaborator)));
            }
        }
        Ok(out)
    }

    fn api_key(&self, hash: &[u8; 32]) -> Result<Option<ApiKeyRow>, StoreError> {
        match self.open(API_KEYS)?.get(hash)? {
            Some(value) => Ok(Some(from_json(value.value())?)),
            None => Ok(None),
        }
    }

    fn collaborator(
        &self,
        endpoint_id: u64,
        account_id: u64,
    ) -> Result<Option<CollaboratorRow>, StoreError> {
        match self.open(COLLABORATORS)?.get((endpoint_id, account_id))? {
            Some(value) => Ok(Some(from_json(value.value())?)),
            None => Ok(None),
        }
    }

    fn collaborators(&self, endpoint_id: u64) -> Result<Vec<CollaboratorRow>, StoreError> {
        let table = self.open(COLLABORATORS)?;
        let mut out = Vec::new();
        for entry in table.range((endpoint_id, 0)..=(endpoint_id, u64::MAX))? {
            out.push(from_json(entry?.1.value())?);
        }
        Ok(out)
    }

    fn invitation(&self, id: u64) -> Result<Option<InvitationRow>, StoreError> {
        match self.open(INVITATIONS)?.get(id)? {
            Some(value) => Ok(Some(from_json(value.value())?)),
            None => Ok(None),
        }
    }

    fn invitation_by_token(&self, hash: &[u8; 32]) -> Result<Option<InvitationRow>, StoreError> {
        match self.open(INVITATION_TOKENS)?.get(hash)? {
            Some(id) => self.invitation(id.value()),
            None => Ok(None),
        }
    }

    fn invitations(&self, endpoint_id: u64) -> Result<Vec<InvitationRow>, StoreError> {
        let mut out = Vec::new();
        for entry in self.open(INVITATIONS)?.iter()?.rev() {
            let row: InvitationRow = from_json(entry?.1.value())?;
            if row.endpoint_id == endpoint_id {
                out.push(row);
            }
        }
        Ok(out)
    }

    fn unpurged_deletions(&self) -> Result<Vec<EndpointRow>, StoreError> {
        let mut out = Vec::new();
        for entry in self.open(ENDPOINTS)?.iter()? {
            let row: EndpointRow = from_json(entry?.1.value())?;
            if row.deleted_at.is_some() && !row.purged {
                out.push(row);
            }
        }
        Ok(out)
    }

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
    fn insert_endpoint(&mut self, row: &EndpointRow) -> Result<(), StoreError> {
        self.table(ENDPOINT_SLUGS)?
            .insert(row.slug.as_str(), row.id)?;
        self.put_endpoint(row)
    }

    fn put_endpoint(&mut self, row: &EndpointRow) -> Result<(), StoreError> {
        self.table(ENDPOINTS)?
            .insert(row.id, to_json(row)?.as_slice())?;
        self.access_changed()
    }

    fn insert_api_key(&mut self, hash: &[u8; 32], row: &ApiKeyRow) -> Result<(), StoreError> {
        self.table(API_KEYS)?
            .insert(hash, to_json(row)?.as_slice())?;
        self.access_changed()
    }

    fn put_api_key(&mut self, hash: &[u8; 32], row: &ApiKeyRow) -> Result<(), StoreError> {
        self.insert_api_key(hash, row)
    }

    fn delete_api_key(&mut self, hash: &[u8; 32]) -> Result<(), StoreError> {
        self.table(API_KEYS)?.remove(hash)?;
        self.access_changed()
    }

    fn put_collaborator(&mut self, row: &CollaboratorRow) -> Result<(), StoreError> {
        self.table(COLLABORATORS)?
            .insert((row.endpoint_id, row.account_id), to_json(row)?.as_slice())?;
        self.access_changed()
    }

    fn delete_collaborator(&mut self, endpoint_id: u64, account_id: u64) -> Result<(), StoreError> {
        self.table(COLLABORATORS)?
            .remove((endpoint_id, account_id))?;
        self.access_changed()
    }

    fn insert_invitation(
        &mut self,
        row: &InvitationRow,
        token_hash: &[u8; 32],
    ) -> Result<(), StoreError> {
        self.table(INVITATIONS)?
            .insert(row.id, to_json(row)?.as_slice())?;
        self.table(INVITATION_TOKENS)?.insert(token_hash, row.id)?;
        Ok(())
    }

    fn delete_invitation(&mut self, id: u64, token_hash: &[u8; 32]) -> Result<(), StoreError> {
        self.table(INVITATIONS)?.remove(id)?;
        self.table(INVITATION_TOKENS)?.remove(token_hash)?;
        Ok(())
    }

    fn put_invitation(&mut self, row: &InvitationRow) -> Result<(), StoreError> {
        let replaced = self
            .table(INVITATIONS)?
            .insert(row.id, to_json(row)?.as_slice())?
            .is_some();
        // Its token's hash was stored with the insert: without one there is nothing to
        // replace (the write is abandoned, so the row just put goes with it).
        if !replaced {
            return Err(StoreError::Corrupt(format!(
                "no invitation {} to replace",
                row.id
            )));
        }
        Ok(())
    }

    fn append_audit(&mut self, endpoint_id: u64, row: &AuditRow) -> Result<(), StoreError> {
        self.table(AUDIT)?
            .insert((endpoint_id, row.id), to_json(row)?.as_slice())?;
        Ok(())
    }
}
