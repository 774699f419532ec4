//! [`EndpointsRead`] and [`EndpointsWrite`] on PostgreSQL: `endpoints`, `api_keys`,
//! `collaborators`, `invitations` and `audit`.

use super::{PgTx, big, count, row_json, to_json, unbig};
use crate::store::endpoints::{EndpointsRead, EndpointsWrite};
use crate::store::{ApiKeyRow, AuditRow, CollaboratorRow, EndpointRow, InvitationRow, StoreError};

/// Reports `access_changed` and bumps the cluster's `access` counter in the same transaction,
/// so every node, not only this one, clears its access cache after the commit. Once per
/// transaction is enough: the counter only says "changed since".
pub(super) fn access_changed(tx: &mut PgTx) -> Result<(), StoreError> {
    if !tx.effects.access_changed {
        tx.execute(
            "UPDATE counters SET value = value + 1 WHERE name = 'access'",
            &[],
        )?;
        tx.effects.access_changed = true;
    }
    Ok(())
}

impl EndpointsRead for PgTx<'_> {
    fn access_version(&self) -> Result<u64, StoreError> {
        let row = self
            .query_opt("SELECT value FROM counters WHERE name = 'access'", &[])?
            .ok_or_else(|| StoreError::Corrupt("the access counter is missing".into()))?;
        Ok(unbig(row.try_get(0)?))
    }

    fn endpoint(&self, id: u64) -> Result<Option<EndpointRow>, StoreError> {
        self.query_opt("SELECT data FROM endpoints WHERE id = $1", &[&big(id)])?
            .map(|row| row_json(&row, 0))
            .transpose()
    }

    fn endpoint_id_by_slug(&self, slug: &str) -> Result<Option<u64>, StoreError> {
        self.query_opt("SELECT id FROM endpoints WHERE slug = $1", &[&slug])?
            .map(|row| Ok(unbig(row.try_get(0)?)))
            .transpose()
    }

    fn endpoints_of(
        &self,
        account_id: u64,
    ) -> Result<Vec<(EndpointRow, Option<CollaboratorRow>)>, StoreError> {
        // An owner's endpoints come without a collaborator row even if it is one too, as on
        // redb.
        let rows = self.query(
            "SELECT e.id, e.data, NULL::bytea FROM endpoints e WHERE e.owner_id = $1
             UNION ALL
             SELECT e.id, e.data, c.data FROM collaborators c
                 JOIN endpoints e ON e.id = c.endpoint_id
                 WHERE c.account_id = $1 AND e.owner_id <> $1
             ORDER BY 1",
            &[&big(account_id)],
        )?;
        rows.iter()
            .map(|row| {
                let collaborator = row
                    .try_get::<_, Option<&[u8]>>(2)?
                    .map(super::from_json)
                    .transpose()?;
                Ok((row_json(row, 1)?, collaborator))
            })
            .collect()
    }

    fn api_key(&self, hash: &[u8; 32]) -> Result<Option<ApiKeyRow>, StoreError> {
        self.query_opt("SELECT data FROM api_keys WHERE hash = $1", &[&&hash[..]])?
            .map(|row| row_json(&row, 0))
            .transpose()
    }

    fn collaborator(
        &self,
        endpoint_id: u64,
        account_id: u64,
    ) -> Result<Option<CollaboratorRow>, StoreError> {
        self.query_opt(
            "SELECT data FROM collaborators WHERE endpoint_id = $1 AND account_id = $2",
            &[&big(endpoint_id), &big(account_id)],
        )?
        .map(|row| row_json(&row, 0))
        .transpose()
    }

    fn collaborators(&self, endpoint_id: u64) -> Result<Vec<CollaboratorRow>, StoreError> {
        self.query(
            "SELECT data FROM collaborators WHERE endpoint_id = $1 ORDER BY account_id",
            &[&big(endpoint_id)],
        )?
        .iter()
        .map(|row| row_json(row, 0))
        .collect()
    }

    fn invitation(&self, id: u64) -> Result<Option<InvitationRow>, StoreError> {
        self.query_opt("SELECT data FROM invitations WHERE id = $1", &[&big(id)])?
            .map(|row| row_json(&row, 0))
            .transpose()
    }

    fn invitation_by_token(&self, hash: &[u8; 32]) -> Result<Option<InvitationRow>, StoreError> {
        self.query_opt(
            "SELECT data FROM invitations WHERE token_hash = $1",
            &[&&hash[..]],
        )?
        .map(|row| row_json(&row, 0))
        .transpose()
    }

    fn invitations(&self, endpoint_id: u64) -> Result<Vec<InvitationRow>, StoreError> {
        self.query(
            "SELECT data FROM invitations WHERE endpoint_id = $1 ORDER BY id DESC",
            &[&big(endpoint_id)],
        )?
        .iter()
        .map(|row| row_json(row, 0))
        .collect()
    }

    fn unpurged_deletions(&self) -> Result<Vec<EndpointRow>, StoreError> {
        let rows = self.query("SELECT data FROM endpoints ORDER BY id", &[])?;
        let mut out = Vec::new();
        for row in &rows {
            let row: EndpointRow = row_json(row, 0)?;
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
        self.query(
            "SELECT data FROM audit WHERE endpoint_id = $1 AND id < $2 ORDER BY id DESC LIMIT $3",
            &[&big(endpoint_id), &big(before), &count(limit)],
        )?
        .iter()
        .map(|row| row_json(row, 0))
        .collect()
    }
}

impl EndpointsWrite for PgTx<'_> {
    fn insert_endpoint(&mut self, row: &EndpointRow) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO endpoints (id, slug, owner_id, data) VALUES ($1, $2, $3, $4)",
            &[&big(row.id), &row.slug, &big(row.owner_id), &to_json(row)?],
        )?;
        access_changed(self)
    }

    fn put_endpoint(&mut self, row: &EndpointRow) -> Result<(), StoreError> {
        // The slug is the one the endpoint was inserted under (it never changes).
        self.execute(
            "INSERT INTO endpoints (id, slug, owner_id, data) VALUES ($1, $2, $3, $4)
             ON CONFLICT (id) DO UPDATE SET owner_id = EXCLUDED.owner_id, data = EXCLUDED.data",
            &[&big(row.id), &row.slug, &big(row.owner_id), &to_json(row)?],
        )?;
        access_changed(self)
    }

    fn insert_api_key(&mut self, hash: &[u8; 32], row: &ApiKeyRow) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO api_keys (hash, endpoint_id, data) VALUES ($1, $2, $3)",
            &[&&hash[..], &big(row.endpoint_id), &to_json(row)?],
        )?;
        access_changed(self)
    }

    fn put_api_key(&mut self, hash: &[u8; 32], row: &ApiKeyRow) -> Result<(), StoreError> {
        self.execute(
            "UPDATE api_keys SET data = $2 WHERE hash = $1",
            &[&&hash[..], &to_json(row)?],
        )?;
        access_changed(self)
    }

    fn delete_api_key(&mut self, hash: &[u8; 32]) -> Result<(), StoreError> {
        self.execute("DELETE FROM api_keys WHERE hash = $1", &[&&hash[..]])?;
        access_changed(self)
    }

    fn put_collaborator(&mut self, row: &CollaboratorRow) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO collaborators (endpoint_id, account_id, data) VALUES ($1, $2, $3)
             ON CONFLICT (endpoint_id, account_id) DO UPDATE SET data = EXCLUDED.data",
            &[&big(row.endpoint_id), &big(row.account_id), &to_json(row)?],
        )?;
        access_changed(self)
    }

    fn delete_collaborator(&mut self, endpoint_id: u64, account_id: u64) -> Result<(), StoreError> {
        self.execute(
            "DELETE FROM collaborators WHERE endpoint_id = $1 AND account_id = $2",
            &[&big(endpoint_id), &big(account_id)],
        )?;
        access_changed(self)
    }

    fn insert_invitation(
        &mut self,
        row: &InvitationRow,
        token_hash: &[u8; 32],
    ) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO invitations (id, endpoint_id, token_hash, data) VALUES ($1, $2, $3, $4)",
            &[
                &big(row.id),
                &big(row.endpoint_id),
                &&token_hash[..],
                &to_json(row)?,
            ],
        )?;
        Ok(())
    }

    fn delete_invitation(&mut self, id: u64, _token_hash: &[u8; 32]) -> Result<(), StoreError> {
        // The token's hash is a column of the invitation's own row.
        self.execute("DELETE FROM invitations WHERE id = $1", &[&big(id)])?;
        Ok(())
    }

    fn put_invitation(&mut self, row: &InvitationRow) -> Result<(), StoreError> {
        // The row keeps the token hash it was inserted with, so there must be one to replace.
        let changed = self.execute(
            "UPDATE invitations SET data = $2 WHERE id = $1",
            &[&big(row.id), &to_json(row)?],
        )?;
        if changed == 0 {
            return Err(StoreError::Corrupt(format!(
                "no invitation {} to replace",
                row.id
            )));
        }
        Ok(())
    }

    fn append_audit(&mut self, endpoint_id: u64, row: &AuditRow) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO audit (endpoint_id, id, data) VALUES ($1, $2, $3)",
            &[&big(endpoint_id), &big(row.id), &to_json(row)?],
        )?;
        Ok(())
    }
}
