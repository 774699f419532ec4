//! New API keys: made with their sealed copy before the write that stores them, so a write
//! that runs again stores the same key. Endpoints, collaborators and rotations all make keys
//! here.

use crate::core::clock::Timestamp;
use crate::core::crypto::{Sealer, key_id, secret_hash};
use crate::core::ids::new_api_key;
use crate::domain::error::Result;
use crate::store::{ApiKeyRow, Environment, WriteTx};

/// A new API key of one environment with its sealed copy: made before the write, so a write
/// that runs again stores the same key. Endpoints, collaborators and rotations all make keys
/// here.
pub(crate) struct NewKey {
    pub(crate) environment: Environment,
    plain: String,
    pub(crate) sealed: Vec<u8>,
}

impl NewKey {
    pub(crate) fn generate(sealer: &Sealer, environment: Environment) -> NewKey {
        let plain = new_api_key(environment.key_prefix());
        NewKey {
            environment,
            sealed: sealer.seal(plain.as_bytes()),
            plain,
        }
    }

    /// The key itself, to show once.
    pub(crate) fn plain(&self) -> &str {
        &self.plain
    }

    pub(crate) fn key_id(&self) -> String {
        key_id(&secret_hash(&self.plain))
    }

    /// Stores the key (by hash) for an endpoint; `collaborator_id` for a collaboration key.
    pub(crate) fn insert(
        &self,
        tx: &mut dyn WriteTx,
        endpoint_id: u64,
        now: Timestamp,
        collaborator_id: Option<u64>,
    ) -> Result<()> {
        let hash = secret_hash(&self.plain);
        let row = ApiKeyRow {
            key_id: key_id(&hash),
            endpoint_id,
            environment: self.environment,
            created_at: now,
            collaborator_id,
            expires_at: None,
        };
        tx.insert_api_key(&hash, &row)?;
        Ok(())
    }
}

/// A new pair of API keys, one per environment.
pub(crate) struct NewKeys {
    pub(crate) sandbox: NewKey,
    pub(crate) production: NewKey,
}

impl NewKeys {
    pub(crate) fn generate(sealer: &Sealer) -> NewKeys {
        NewKeys {
            sandbox: NewKey::generate(sealer, Environment::Sandbox),
            production: NewKey::generate(sealer, Environment::Production),
        }
    }

    /// Stores both keys (by hash) for an endpoint; `collaborator_id` for collaboration keys.
    pub(crate) fn insert(
        &self,
        tx: &mut dyn WriteTx,
        endpoint_id: u64,
        now: Timestamp,
        collaborator_id: Option<u64>,
    ) -> Result<()> {
        self.sandbox.insert(tx, endpoint_id, now, collaborator_id)?;
        self.production
            .insert(tx, endpoint_id, now, collaborator_id)
    }
}
