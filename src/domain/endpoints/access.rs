//! Resolving a data call's API key to the partition and permissions it carries, and the
//! in-memory cache of resolved keys ([`AccessCache`]).
//!
//! Authorising a key is on the path of every data call, so resolved keys are cached. Every
//! write of an endpoint, key or collaborator reports `access_changed`, and the after-commit
//! path of `Handles::write` clears the cache; a generation counter keeps a lookup that raced
//! with such a change from putting a stale entry back. A stream or a long export re-checks its
//! key with [`recheck`].

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use tokio::sync::watch;

use super::Endpoints;
use crate::core::clock::Timestamp;
use crate::core::crypto::secret_hash;
use crate::domain::error::{Error, Result};
use crate::domain::records::PayloadRules;
use crate::domain::schema::PayloadSchema;
use crate::store::{
    ApiKeyRow, EndpointRow, Environment, KeyHolder, Partition, Permission, ReadTx, Store,
};

/// What an authorised data call may touch.
#[derive(Debug, Clone)]
pub struct DataAccess {
    pub endpoint: Arc<EndpointRow>,
    pub environment: Environment,
    pub key_id: String,
    /// Who holds the key, as the request log keeps it.
    pub holder: KeyHolder,
    pub partition: Partition,
    /// The endpoint's schema, compiled.
    pub schema: Option<Arc<PayloadSchema>>,
}

impl DataAccess {
    /// What a payload written with this access must be.
    pub fn payload_rules(&self) -> PayloadRules<'_> {
        PayloadRules {
            required_fields: &self.endpoint.required_fields,
            schema: self.schema.as_deref(),
        }
    }
}

/// Who holds `key`: a collaborator, or the owner (the endpoint's default keys).
fn holder_of(key: &ApiKeyRow) -> KeyHolder {
    key.collaborator_id
        .map_or(KeyHolder::Owner, KeyHolder::Collaborator)
}

/// Cached result of resolving a key: its row, its endpoint's row, and for a collaboration
/// key the holder's permissions and whether the holder's account is suspended.
struct CachedKey {
    key: ApiKeyRow,
    endpoint: Arc<EndpointRow>,
    /// `None` for the owner's default keys, which may do everything.
    permissions: Option<Vec<Permission>>,
    suspended: bool,
    /// The endpoint's schema, compiled once for as long as the entry is cached.
    schema: Option<Arc<PayloadSchema>>,
}

impl CachedKey {
    /// The rule of every data call, and of every check of an open stream: the key must not be
    /// past its grace period (by the server's clock, cached or not) and belong to the endpoint
    /// named by `slug` (404 otherwise, so a key reveals nothing about other endpoints), the
    /// endpoint must be active (403), the key holder's account not suspended (403), a
    /// production key needs a deployed endpoint (403), and a collaboration key needs `needed`
    /// (403; `None`: any permission will do).
    fn allows(&self, slug: &str, needed: Option<Permission>, now: Timestamp) -> Result<DataAccess> {
        if self.key.expires_at.is_some_and(|end| end <= now) {
            return Err(Error::InvalidApiKey);
        }
        let endpoint = &self.endpoint;
        if endpoint.slug != slug {
            return Err(Error::EndpointNotFound);
        }
        if !endpoint.active {
            return Err(Error::EndpointInactive);
        }
        if self.suspended {
            return Err(Error::AccountSuspended);
        }
        if self.key.environment == Environment::Production && !endpoint.deployed {
            return Err(Error::EndpointNotDeployed);
        }
        if let (Some(needed), Some(permissions)) = (needed, &self.permissions)
            && !permissions.contains(&needed)
        {
            return Err(Error::MissingPermission(needed));
        }
        Ok(DataAccess {
            partition: Partition::new(endpoint.id, self.key.environment),
            environment: self.key.environment,
            key_id: self.key.key_id.clone(),
            holder: holder_of(&self.key),
            endpoint: endpoint.clone(),
            schema: self.schema.clone(),
        })
    }
}

/// What a read that outlives its request (a change stream) keeps to ask again whether its key
/// still allows it: the key's lookup hash (never the key itself), the endpoint's slug and the
/// permission the read needs.
#[derive(Clone, Debug)]
pub struct KeyGrant {
    hash: [u8; 32],
    slug: String,
    needed: Permission,
}

impl KeyGrant {
    pub fn new(key: &str, slug: &str, needed: Permission) -> KeyGrant {
        KeyGrant {
            hash: secret_hash(key),
            slug: slug.to_string(),
            needed,
        }
    }
}

/// A key found still allowed by [`recheck`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rechecked {
    /// The access version of the snapshot it was checked in (`EndpointsRead::access_version`).
    pub access_version: u64,
    /// When the key stops working (a replaced key's grace period), if it does.
    pub expires_at: Option<Timestamp>,
}

/// Checks `grant` again with the rule of a new data call, in a fresh snapshot of the store and
/// never from the access cache, which a change that just committed may not have cleared yet.
/// The error is the one a data call with the key would get now.
pub fn recheck(store: &dyn Store, grant: &KeyGrant, now: Timestamp) -> Result<Rechecked> {
    let snapshot = store.read()?;
    let access_version = snapshot.access_version()?;
    let resolved = resolve_key_in(&*snapshot, &grant.hash)?.ok_or(Error::InvalidApiKey)?;
    resolved.allows(&grant.slug, Some(grant.needed), now)?;
    Ok(Rechecked {
        access_version,
        expires_at: resolved.key.expires_at,
    })
}

/// Keys resolved since the last change to any endpoint or key; clones share one cache.
///
/// Per node: with several nodes on one store, every node's cache is cleared by the
/// after-commit path of a change made on any node (`domain::handles::AfterCommit`).
/// Clearing it also wakes the change streams ([`AccessCache::changes`]), which check their
/// keys again.
#[derive(Clone)]
pub struct AccessCache {
    inner: Arc<RwLock<CacheInner>>,
    changed: Arc<watch::Sender<()>>,
}

impl Default for AccessCache {
    fn default() -> Self {
        AccessCache {
            inner: Arc::default(),
            changed: Arc::new(watch::Sender::new(())),
        }
    }
}

#[derive(Default)]
struct CacheInner {
    generation: u64,
    entries: HashMap<[u8; 32], Arc<CachedKey>>,
}

impl AccessCache {
    fn get(&self, hash: &[u8; 32]) -> (Option<Arc<CachedKey>>, u64) {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        (inner.entries.get(hash).cloned(), inner.generation)
    }

    /// Caches an entry read while the cache was at `generation`, unless it changed since.
    fn insert(&self, generation: u64, hash: [u8; 32], entry: Arc<CachedKey>) {
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        if inner.generation == generation {
            inner.entries.insert(hash, entry);
        }
    }

    /// Forgets every resolved key, and tells those who follow [`AccessCache::changes`].
    pub fn invalidate(&self) {
        {
            let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
            inner.generation += 1;
            inner.entries.clear();
        }
        self.changed.send_replace(());
    }

    /// Marked changed whenever the cache is cleared: access may have changed.
    pub fn changes(&self) -> watch::Receiver<()> {
        self.changed.subscribe()
    }
}

impl Endpoints {
    /// Authorises a data call: the key must exist (401), belong to the endpoint named by
    /// `slug` (404 otherwise, so a key reveals nothing about other endpoints), the endpoint
    /// must be active (403), the key holder's account not suspended (403), a production key
    /// needs a deployed endpoint (403), and a collaboration key needs `needed` (403).
    pub fn authorize_data_key(
        &self,
        key: Option<&str>,
        slug: &str,
        needed: Permission,
    ) -> Result<DataAccess> {
        self.authorize_key(key, slug, Some(needed))
    }

    /// [`Endpoints::authorize_data_key`] for a call that any permission allows: reading what
    /// the endpoint expects (its OpenAPI document), which every key holder needs.
    pub fn authorize_any_data_key(&self, key: Option<&str>, slug: &str) -> Result<DataAccess> {
        self.authorize_key(key, slug, None)
    }

    /// The permissions of a key that may make data calls on `slug` (every permission for the
    /// endpoint's default keys): what the test page offers to a key.
    pub fn key_permissions(&self, key: &str, slug: &str) -> Result<Vec<Permission>> {
        self.authorize_any_data_key(Some(key), slug)?;
        let resolved = self.resolved(&secret_hash(key))?;
        Ok(resolved
            .permissions
            .clone()
            .unwrap_or_else(|| Permission::ALL.to_vec()))
    }

    /// The key with this hash, from the cache or the store (401 when there is none).
    fn resolved(&self, hash: &[u8; 32]) -> Result<Arc<CachedKey>> {
        Ok(match self.cache.get(hash) {
            (Some(hit), _) => hit,
            (None, generation) => {
                // Unknown keys are not cached: only keys that exist can take memory.
                let entry = Arc::new(self.resolve_key(hash)?.ok_or(Error::InvalidApiKey)?);
                self.cache.insert(generation, *hash, entry.clone());
                entry
            }
        })
    }

    fn authorize_key(
        &self,
        key: Option<&str>,
        slug: &str,
        needed: Option<Permission>,
    ) -> Result<DataAccess> {
        let key = key.ok_or(Error::MissingApiKey)?;
        if !key.starts_with(Environment::Sandbox.key_prefix())
            && !key.starts_with(Environment::Production.key_prefix())
        {
            return Err(Error::InvalidApiKey);
        }
        let resolved = self.resolved(&secret_hash(key))?;
        resolved.allows(slug, needed, self.handles.now())
    }

    /// The id and holder of an existing key, for logging a call it made that was refused
    /// after the key was recognised; `None` for an unknown key (or when the store cannot say).
    pub fn key_identity(&self, key: &str) -> Option<(String, KeyHolder)> {
        let hash = secret_hash(key);
        let row = match self.cache.get(&hash) {
            (Some(hit), _) => hit.key.clone(),
            (None, _) => self.resolve_key(&hash).ok().flatten()?.key,
        };
        Some((row.key_id.clone(), holder_of(&row)))
    }

    /// Everything a key allows, read from one snapshot.
    fn resolve_key(&self, hash: &[u8; 32]) -> Result<Option<CachedKey>> {
        resolve_key_in(&*self.handles.store.read()?, hash)
    }
}

/// Everything the key with this hash allows, read from `snapshot`; `None` when there is no
/// such key (or its endpoint is deleted).
fn resolve_key_in(snapshot: &dyn ReadTx, hash: &[u8; 32]) -> Result<Option<CachedKey>> {
    let Some(key) = snapshot.api_key(hash)? else {
        return Ok(None);
    };
    let Some(endpoint) = snapshot
        .endpoint(key.endpoint_id)?
        .filter(|e| e.deleted_at.is_none())
    else {
        return Ok(None);
    };
    let (permissions, suspended) = match key.collaborator_id {
        None => (None, false),
        Some(account_id) => {
            // Removed collaborators' keys are deleted with them; be safe anyway.
            let Some(collaborator) = snapshot.collaborator(endpoint.id, account_id)? else {
                return Ok(None);
            };
            let suspended = snapshot.account(account_id)?.is_none_or(|a| a.suspended);
            (Some(collaborator.permissions), suspended)
        }
    };
    let schema = super::compiled_schema(&endpoint);
    Ok(Some(CachedKey {
        key,
        endpoint: Arc::new(endpoint),
        permissions,
        suspended,
        schema,
    }))
}
