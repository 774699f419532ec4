//! Endpoints and their keys: the owner's management operations, who may see an endpoint
//! (its owner and its collaborators), and resolving a data call's API key to the partition
//! and permissions it carries.
//!
//! Collaborators and invitations are in `collaborators`, the deploy workflow in `deploy`;
//! both read and change endpoints through this service.
//!
//! Authorising a key is on the path of every data call, so resolved keys are cached in memory
//! ([`AccessCache`]). Every write of an endpoint, key or collaborator reports
//! `access_changed`, and the after-commit path of [`Handles::write`] clears the cache; a
//! generation counter keeps a lookup that raced with such a change from putting a stale entry
//! back.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use serde::{Deserialize, Deserializer, Serialize};
use tokio::sync::watch;

use crate::core::clock::Timestamp;
use crate::core::crypto::{Sealer, key_id, secret_hash};
use crate::core::ids::{new_api_key, new_slug};
use crate::core::text::fold_case;
use crate::domain::audit;
use crate::domain::error::{Error, Result};
use crate::domain::handles::Handles;
use crate::domain::webhooks;
use crate::store::{
    AccountRow, ApiKeyRow, CollaboratorRow, EndpointRow, Environment, IdKind, KeyHolder,
    Permission, ReadTx, Role, Store, WriteTx, partition,
};

// The limits of an endpoint's settings (the OpenAPI document says those that are `pub`).
pub const MAX_NAME_CHARS: usize = 100;
const MAX_DESCRIPTION_CHARS: usize = 2000;
pub const MAX_REQUIRED_FIELDS: usize = 50;
pub const MAX_FIELD_NAME_CHARS: usize = 200;

/// An endpoint as the management API shows it to its owner or to a collaborator. The keys
/// are the viewer's own: the default keys for the owner, the collaboration keys for a
/// collaborator, whose production key is shown only once the endpoint is deployed.
#[derive(Debug, Serialize)]
pub struct EndpointView {
    pub slug: String,
    pub name: String,
    pub description: Option<String>,
    pub required_fields: Vec<String>,
    pub active: bool,
    /// `sandbox` or `production` (deployed).
    pub environment: Environment,
    pub deployed: bool,
    pub deployed_at: Option<String>,
    pub deploy_request: Option<DeployRequestView>,
    pub monthly_quota: Option<u64>,
    pub created_at: String,
    /// `owner` or `collaborator`: the viewer's relation to the endpoint.
    pub role: &'static str,
    pub permissions: Vec<Permission>,
    pub sandbox_key: String,
    pub production_key: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct DeployRequestView {
    pub requested_by: String,
    pub requested_at: String,
    pub note: Option<String>,
}

/// How an account relates to an endpoint it can see.
#[derive(Debug, Clone)]
pub enum Membership {
    Owner,
    Collaborator(CollaboratorRow),
}

impl Membership {
    /// Whether this member may use `needed` on the records of `endpoint` from a session (the
    /// dashboard's record browser, the delivery log's bodies): a collaborator as their own
    /// keys would (403 `endpoint_inactive` while the endpoint is inactive, then 403
    /// `missing_permission` without the permission); the owner always, inactive or not, since
    /// the owner manages the endpoint (deactivating stops its keys, not its management).
    pub fn permits(&self, endpoint: &EndpointRow, needed: Permission) -> Result<()> {
        match self {
            Membership::Owner => Ok(()),
            Membership::Collaborator(_) if !endpoint.active => Err(Error::EndpointInactive),
            Membership::Collaborator(c) if !c.permissions.contains(&needed) => {
                Err(Error::MissingPermission(needed))
            }
            Membership::Collaborator(_) => Ok(()),
        }
    }
}

/// Body of `POST /api/v1/manage/endpoints`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewEndpoint {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub required_fields: Vec<String>,
}

/// Body of `PATCH /api/v1/manage/endpoints/{slug}`: only the fields present change;
/// `"description": null` clears the description.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointPatch {
    pub name: Option<String>,
    #[serde(default, deserialize_with = "present")]
    pub description: Option<Option<String>>,
    pub required_fields: Option<Vec<String>>,
    pub active: Option<bool>,
    /// `null` returns to the server-wide `[usage] monthly_quota`.
    #[serde(default, deserialize_with = "present")]
    pub monthly_quota: Option<Option<u64>>,
}

/// Distinguishes a field sent as `null` (`Some(None)`) from an absent one (`None`).
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> std::result::Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// What an authorised data call may touch.
#[derive(Debug, Clone)]
pub struct DataAccess {
    pub endpoint: Arc<EndpointRow>,
    pub environment: Environment,
    pub key_id: String,
    /// Who holds the key, as the request log keeps it.
    pub holder: KeyHolder,
    pub partition: u64,
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
            partition: partition(endpoint.id, self.key.environment),
            environment: self.key.environment,
            key_id: self.key.key_id.clone(),
            holder: holder_of(&self.key),
            endpoint: endpoint.clone(),
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

/// The endpoint service.
pub struct Endpoints {
    pub(crate) handles: Handles,
    pub(crate) sealer: Sealer,
    cache: AccessCache,
}

impl Endpoints {
    pub fn new(handles: Handles, sealer: Sealer, cache: AccessCache) -> Endpoints {
        Endpoints {
            handles,
            sealer,
            cache,
        }
    }

    pub fn create(&self, owner: &AccountRow, new: NewEndpoint) -> Result<EndpointView> {
        crate::domain::accounts::require_server_owner(owner)?;
        let name = valid_name(&new.name)?;
        let description = valid_description(new.description)?;
        let required_fields = valid_required_fields(new.required_fields)?;
        let keys = NewKeys::generate(&self.sealer);
        let template = EndpointRow {
            id: 0,
            slug: String::new(),
            name,
            description,
            required_fields,
            active: true,
            deployed: false,
            deployed_at: None,
            created_at: self.handles.now(),
            owner_id: owner.id,
            deploy_request: None,
            monthly_quota: None,
            sandbox_key_sealed: keys.sandbox.sealed.clone(),
            production_key_sealed: keys.production.sealed.clone(),
            previous_keys: Vec::new(),
            deleted_at: None,
            purged: false,
        };
        // 60 random bits make a clash vanishingly rare; retry rather than assume.
        let row = loop {
            let candidate = EndpointRow {
                slug: new_slug(&template.name),
                ..template.clone()
            };
            let created = self
                .handles
                .write(|tx| self.insert_new(tx, &candidate, &keys, owner))?;
            if let Some(row) = created {
                break row;
            }
        };
        self.view(row, &Membership::Owner)
    }

    /// Stores `candidate` as a new endpoint with its keys, webhook secrets and audit entry;
    /// `None` (nothing written) when its slug is taken.
    fn insert_new(
        &self,
        tx: &mut dyn WriteTx,
        candidate: &EndpointRow,
        keys: &NewKeys,
        owner: &AccountRow,
    ) -> Result<Option<EndpointRow>> {
        name_free(&*tx, owner.id, &candidate.name, None)?;
        if tx.endpoint_id_by_slug(&candidate.slug)?.is_some() {
            return Ok(None);
        }
        let now = candidate.created_at;
        let row = EndpointRow {
            id: tx.next_id(IdKind::Endpoint)?,
            ..candidate.clone()
        };
        tx.insert_endpoint(&row)?;
        keys.insert(tx, row.id, now, None)?;
        webhooks::secrets::create_for_endpoint(tx, &self.sealer, row.id, now)?;
        audit::record(
            tx,
            now,
            row.id,
            owner,
            "endpoint.created",
            serde_json::json!({ "name": row.name }),
        )?;
        Ok(Some(row))
    }

    /// Every endpoint the account owns or collaborates on, oldest first.
    pub fn list(&self, account: &AccountRow) -> Result<Vec<EndpointView>> {
        let rows = self.handles.store.read()?.endpoints_of(account.id)?;
        rows.into_iter()
            .filter(|(row, _)| row.deleted_at.is_none())
            .map(|(row, collaborator)| {
                let membership = match collaborator {
                    None => Membership::Owner,
                    Some(c) => Membership::Collaborator(c),
                };
                self.view(row, &membership)
            })
            .collect()
    }

    pub fn get(&self, account: &AccountRow, slug: &str) -> Result<EndpointView> {
        let (row, membership) = self.member_row(account, slug)?;
        self.view(row, &membership)
    }

    pub fn update(
        &self,
        owner: &AccountRow,
        slug: &str,
        patch: EndpointPatch,
    ) -> Result<EndpointView> {
        // Who may change it is answered before what is wrong with the change.
        self.owned_row(owner, slug)?;
        let name = patch.name.as_deref().map(valid_name).transpose()?;
        let description = patch.description.map(valid_description).transpose()?;
        let required_fields = patch
            .required_fields
            .map(valid_required_fields)
            .transpose()?;
        if patch.monthly_quota == Some(Some(0)) {
            return Err(Error::InvalidRequest(
                "`monthly_quota` must be at least 1, or null for the server default.".into(),
            ));
        }
        let now = self.handles.now();
        self.modify(owner, slug, |tx, actor, row| {
            let mut changed = serde_json::Map::new();
            if let Some(name) = &name {
                name_free(&*tx, row.owner_id, name, Some(row.id))?;
                changed.insert("name".into(), name.clone().into());
                row.name = name.clone();
            }
            if let Some(description) = &description {
                changed.insert("description".into(), description.clone().into());
                row.description = description.clone();
            }
            if let Some(fields) = &required_fields {
                changed.insert("required_fields".into(), fields.clone().into());
                row.required_fields = fields.clone();
            }
            if let Some(active) = patch.active {
                changed.insert("active".into(), active.into());
                row.active = active;
            }
            if let Some(quota) = patch.monthly_quota {
                changed.insert("monthly_quota".into(), quota.into());
                row.monthly_quota = quota;
            }
            let action = match patch.active {
                Some(false) => "endpoint.deactivated",
                Some(true) => "endpoint.reactivated",
                None => "endpoint.updated",
            };
            audit::record(tx, now, row.id, actor, action, changed.into())
        })
    }

    /// Reads, changes and writes back one endpoint its owner changes, in one transaction;
    /// `change` also gets the transaction, to record the audit entry and any notifications.
    /// It may run more than once (see [`Handles::write`]).
    pub(crate) fn modify(
        &self,
        owner: &AccountRow,
        slug: &str,
        change: impl FnMut(&mut dyn WriteTx, &AccountRow, &mut EndpointRow) -> Result<()>,
    ) -> Result<EndpointView> {
        self.modify_as(owner, slug, true, change)
    }

    /// Like [`Endpoints::modify`] for any member of the endpoint when `owner_only` is false.
    pub(crate) fn modify_as(
        &self,
        account: &AccountRow,
        slug: &str,
        owner_only: bool,
        mut change: impl FnMut(&mut dyn WriteTx, &AccountRow, &mut EndpointRow) -> Result<()>,
    ) -> Result<EndpointView> {
        let (row, membership) = self.handles.write(|tx| {
            let (mut row, membership) = member_in(&*tx, account, slug)?;
            if owner_only && !matches!(membership, Membership::Owner) {
                return Err(Error::OwnerOnly);
            }
            change(tx, account, &mut row)?;
            tx.put_endpoint(&row)?;
            Ok((row, membership))
        })?;
        self.view(row, &membership)
    }

    /// The endpoint with this slug, if `owner` owns it (403 for its collaborators, 404 for
    /// everyone else).
    pub fn owned_row(&self, owner: &AccountRow, slug: &str) -> Result<EndpointRow> {
        match self.member_row(owner, slug)? {
            (row, Membership::Owner) => Ok(row),
            (_, Membership::Collaborator(_)) => Err(Error::OwnerOnly),
        }
    }

    /// The endpoint with this slug and how `account` relates to it; 404 when it is neither
    /// the owner nor a collaborator.
    pub fn member_row(
        &self,
        account: &AccountRow,
        slug: &str,
    ) -> Result<(EndpointRow, Membership)> {
        member_in(&*self.handles.store.read()?, account, slug)
    }

    /// What `account` may do with the records of one environment from the dashboard: the
    /// owner anything, a collaborator what their own keys would allow
    /// ([`Membership::permits`]); 404 for anyone else.
    pub fn member_access(
        &self,
        account: &AccountRow,
        slug: &str,
        environment: Environment,
        needed: Permission,
    ) -> Result<DataAccess> {
        let (row, membership) = self.member_row(account, slug)?;
        membership.permits(&row, needed)?;
        Ok(DataAccess {
            partition: partition(row.id, environment),
            environment,
            key_id: format!("account_{}", account.id),
            holder: match membership {
                Membership::Owner => KeyHolder::Owner,
                Membership::Collaborator(_) => KeyHolder::Collaborator(account.id),
            },
            endpoint: Arc::new(row),
        })
    }

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

    /// The endpoint id for a slug, whoever owns it (for request logging of refused calls);
    /// `None` for a deleted endpoint, whose request log is purged.
    pub fn id_for_slug(&self, slug: &str) -> Result<Option<u64>> {
        let snapshot = self.handles.store.read()?;
        let Some(id) = snapshot.endpoint_id_by_slug(slug)? else {
            return Ok(None);
        };
        Ok(snapshot
            .endpoint(id)?
            .filter(|row| row.deleted_at.is_none())
            .map(|row| row.id))
    }

    /// The endpoint whose audit log `owner` may read: one it owns, deleted or not (the audit
    /// entries outlive a deletion). 403 `owner_only` for a collaborator of a live endpoint,
    /// 404 for anyone else.
    pub fn audited_row(&self, owner: &AccountRow, slug: &str) -> Result<EndpointRow> {
        let snapshot = self.handles.store.read()?;
        let id = snapshot
            .endpoint_id_by_slug(slug)?
            .ok_or(Error::EndpointNotFound)?;
        match snapshot.endpoint(id)? {
            Some(row)
                if row.deleted_at.is_some()
                    && row.owner_id == owner.id
                    && owner.role == Role::Owner =>
            {
                Ok(row)
            }
            _ => self.owned_row(owner, slug),
        }
    }

    /// Opens a sealed key.
    pub(crate) fn open_key(&self, sealed: &[u8]) -> Result<String> {
        self.sealer
            .open_string(sealed)
            .map_err(|e| Error::Internal(e.to_string()))
    }

    pub(crate) fn view(&self, row: EndpointRow, membership: &Membership) -> Result<EndpointView> {
        let (role, permissions, sandbox_key, production_key) = match membership {
            Membership::Owner => (
                "owner",
                Permission::ALL.to_vec(),
                self.open_key(&row.sandbox_key_sealed)?,
                Some(self.open_key(&row.production_key_sealed)?),
            ),
            Membership::Collaborator(c) => (
                "collaborator",
                c.permissions.clone(),
                self.open_key(&c.sandbox_key_sealed)?,
                if row.deployed {
                    Some(self.open_key(&c.production_key_sealed)?)
                } else {
                    None
                },
            ),
        };
        let deploy_request = match &row.deploy_request {
            Some(request) => {
                let requested_by = self
                    .handles
                    .store
                    .read()?
                    .account(request.requested_by)?
                    .map_or_else(|| format!("account {}", request.requested_by), |a| a.email);
                Some(DeployRequestView {
                    requested_by,
                    requested_at: request.requested_at.to_rfc3339(),
                    note: request.note.clone(),
                })
            }
            None => None,
        };
        Ok(EndpointView {
            slug: row.slug,
            name: row.name,
            description: row.description,
            required_fields: row.required_fields,
            active: row.active,
            environment: if row.deployed {
                Environment::Production
            } else {
                Environment::Sandbox
            },
            deployed: row.deployed,
            deployed_at: row.deployed_at.map(Timestamp::to_rfc3339),
            deploy_request,
            monthly_quota: row.monthly_quota,
            created_at: row.created_at.to_rfc3339(),
            role,
            permissions,
            sandbox_key,
            production_key,
        })
    }
}

/// The endpoint with this slug as `tx` sees it, and how `account` relates to it.
pub(crate) fn member_in<R: ReadTx + ?Sized>(
    tx: &R,
    account: &AccountRow,
    slug: &str,
) -> Result<(EndpointRow, Membership)> {
    let id = tx
        .endpoint_id_by_slug(slug)?
        .ok_or(Error::EndpointNotFound)?;
    let row = tx
        .endpoint(id)?
        .filter(|row| row.deleted_at.is_none())
        .ok_or(Error::EndpointNotFound)?;
    if row.owner_id == account.id && account.role == Role::Owner {
        return Ok((row, Membership::Owner));
    }
    match tx.collaborator(id, account.id)? {
        Some(collaborator) => Ok((row, Membership::Collaborator(collaborator))),
        None => Err(Error::EndpointNotFound),
    }
}

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

/// 409 `endpoint_name_taken` when the owner `owner_id` has another endpoint than `except`
/// named `name`, compared trimmed and case-folded (as search folds case).
fn name_free<R: ReadTx + ?Sized>(
    tx: &R,
    owner_id: u64,
    name: &str,
    except: Option<u64>,
) -> Result<()> {
    let folded = fold_case(name.trim());
    let taken = tx.endpoints_of(owner_id)?.into_iter().any(|(row, _)| {
        row.owner_id == owner_id
            && row.deleted_at.is_none()
            && Some(row.id) != except
            && fold_case(row.name.trim()) == folded
    });
    match taken {
        true => Err(Error::EndpointNameTaken(name.trim().to_string())),
        false => Ok(()),
    }
}

fn valid_name(name: &str) -> Result<String> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > MAX_NAME_CHARS {
        return Err(Error::InvalidRequest(format!(
            "`name` must be 1 to {MAX_NAME_CHARS} characters."
        )));
    }
    Ok(name.to_string())
}

fn valid_description(description: Option<String>) -> Result<Option<String>> {
    match description {
        Some(d) if d.chars().count() > MAX_DESCRIPTION_CHARS => Err(Error::InvalidRequest(
            format!("`description` must be at most {MAX_DESCRIPTION_CHARS} characters."),
        )),
        Some(d) if d.trim().is_empty() => Ok(None),
        other => Ok(other),
    }
}

fn valid_required_fields(fields: Vec<String>) -> Result<Vec<String>> {
    if fields.len() > MAX_REQUIRED_FIELDS {
        return Err(Error::InvalidRequest(format!(
            "At most {MAX_REQUIRED_FIELDS} `required_fields` can be declared."
        )));
    }
    let mut seen = std::collections::HashSet::new();
    for field in &fields {
        if field.is_empty() || field.chars().count() > MAX_FIELD_NAME_CHARS {
            return Err(Error::InvalidRequest(format!(
                "Each entry of `required_fields` must be 1 to {MAX_FIELD_NAME_CHARS} characters."
            )));
        }
        if !seen.insert(field.as_str()) {
            return Err(Error::InvalidRequest(format!(
                "`required_fields` lists `{field}` twice."
            )));
        }
    }
    Ok(fields)
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
    Ok(Some(CachedKey {
        key,
        endpoint: Arc::new(endpoint),
        permissions,
        suspended,
    }))
}
