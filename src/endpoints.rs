//! Endpoints and their keys: the owner's management operations, and resolving a data call's
//! API key to the partition it may touch.
//!
//! Authorising a key is on the path of every data call, so resolved keys are cached in memory
//! ([`AccessCache`]). Every change to an endpoint or key goes through [`Endpoints`] and clears
//! the cache after its commit; a generation counter keeps a lookup that raced with such a
//! change from putting a stale entry back.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use redb::{ReadableTable, WriteTransaction};
use serde::{Deserialize, Deserializer, Serialize};

use crate::clock::Clock;
use crate::crypto::{Sealer, key_id, secret_hash};
use crate::error::{Error, Result};
use crate::ids::{new_api_key, new_slug};
use crate::storage::{
    API_KEYS, AccountRow, ApiKeyRow, ENDPOINT_SLUGS, ENDPOINTS, EndpointRow, Environment, Store,
    from_json, next_id, partition, to_json,
};

const MAX_NAME_CHARS: usize = 100;
const MAX_DESCRIPTION_CHARS: usize = 2000;
const MAX_REQUIRED_FIELDS: usize = 50;
const MAX_FIELD_NAME_CHARS: usize = 200;

/// An endpoint as the management API shows it to its owner.
#[derive(Debug, Serialize)]
pub struct EndpointView {
    pub slug: String,
    pub name: String,
    pub description: Option<String>,
    pub required_fields: Vec<String>,
    pub active: bool,
    pub deployed: bool,
    pub deployed_at: Option<String>,
    pub created_at: String,
    pub sandbox_key: String,
    pub production_key: String,
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
    pub partition: u64,
}

/// Cached result of resolving a key: its row and its endpoint's row.
struct CachedKey {
    key: ApiKeyRow,
    endpoint: Arc<EndpointRow>,
}

/// Keys resolved since the last change to any endpoint or key.
#[derive(Default)]
pub struct AccessCache {
    inner: RwLock<CacheInner>,
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

    fn invalidate(&self) {
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        inner.generation += 1;
        inner.entries.clear();
    }
}

/// The endpoint service.
pub struct Endpoints {
    store: Arc<Store>,
    sealer: Sealer,
    cache: AccessCache,
}

impl Endpoints {
    pub fn new(store: Arc<Store>, sealer: Sealer) -> Endpoints {
        Endpoints {
            store,
            sealer,
            cache: AccessCache::default(),
        }
    }

    pub fn create(
        &self,
        clock: &dyn Clock,
        owner: &AccountRow,
        new: NewEndpoint,
    ) -> Result<EndpointView> {
        let name = valid_name(&new.name)?;
        let description = valid_description(new.description)?;
        let required_fields = valid_required_fields(new.required_fields)?;
        let sandbox_key = new_api_key(Environment::Sandbox.key_prefix());
        let production_key = new_api_key(Environment::Production.key_prefix());
        let now = clock.now();

        let txn = self.store.write()?;
        let row = {
            let id = next_id(&txn, "next_endpoint_id")?;
            let mut slugs = txn.open_table(ENDPOINT_SLUGS)?;
            // 60 random bits make a clash vanishingly rare; retry rather than assume.
            let mut slug = new_slug(&name);
            while slugs.get(slug.as_str())?.is_some() {
                slug = new_slug(&name);
            }
            slugs.insert(slug.as_str(), id)?;
            let row = EndpointRow {
                id,
                slug,
                name,
                description,
                required_fields,
                active: true,
                deployed: false,
                deployed_at: None,
                created_at: now,
                owner_id: owner.id,
                sandbox_key_sealed: self.sealer.seal(sandbox_key.as_bytes()),
                production_key_sealed: self.sealer.seal(production_key.as_bytes()),
            };
            txn.open_table(ENDPOINTS)?
                .insert(id, to_json(&row)?.as_slice())?;
            insert_key(&txn, &sandbox_key, id, Environment::Sandbox, now)?;
            insert_key(&txn, &production_key, id, Environment::Production, now)?;
            row
        };
        txn.commit()?;
        self.cache.invalidate();
        self.view(row)
    }

    /// Every endpoint the account owns, oldest first.
    pub fn list(&self, owner: &AccountRow) -> Result<Vec<EndpointView>> {
        let txn = self.store.read()?;
        let table = txn.open_table(ENDPOINTS)?;
        let mut out = Vec::new();
        for entry in table.iter()? {
            let (_, value) = entry?;
            let row: EndpointRow = from_json(value.value())?;
            if row.owner_id == owner.id {
                out.push(self.view(row)?);
            }
        }
        Ok(out)
    }

    pub fn get(&self, owner: &AccountRow, slug: &str) -> Result<EndpointView> {
        self.view(self.owned_row(owner, slug)?)
    }

    pub fn update(
        &self,
        owner: &AccountRow,
        slug: &str,
        patch: EndpointPatch,
    ) -> Result<EndpointView> {
        let name = patch.name.as_deref().map(valid_name).transpose()?;
        let description = patch.description.map(valid_description).transpose()?;
        let required_fields = patch
            .required_fields
            .map(valid_required_fields)
            .transpose()?;
        self.modify(owner, slug, |row| {
            if let Some(name) = name {
                row.name = name;
            }
            if let Some(description) = description {
                row.description = description;
            }
            if let Some(fields) = required_fields {
                row.required_fields = fields;
            }
            if let Some(active) = patch.active {
                row.active = active;
            }
        })
    }

    /// Marks the endpoint deployed: its production key works from now on. Idempotent.
    pub fn deploy(
        &self,
        clock: &dyn Clock,
        owner: &AccountRow,
        slug: &str,
    ) -> Result<EndpointView> {
        let now = clock.now();
        self.modify(owner, slug, |row| {
            if !row.deployed {
                row.deployed = true;
                row.deployed_at = Some(now);
            }
        })
    }

    /// Reads, changes and writes back one owned endpoint in a single transaction.
    fn modify(
        &self,
        owner: &AccountRow,
        slug: &str,
        change: impl FnOnce(&mut EndpointRow),
    ) -> Result<EndpointView> {
        let txn = self.store.write()?;
        let row = {
            let id = txn
                .open_table(ENDPOINT_SLUGS)?
                .get(slug)?
                .map(|v| v.value())
                .ok_or(Error::EndpointNotFound)?;
            let mut endpoints = txn.open_table(ENDPOINTS)?;
            let mut row: EndpointRow = match endpoints.get(id)? {
                Some(v) => from_json(v.value())?,
                None => return Err(Error::EndpointNotFound),
            };
            if row.owner_id != owner.id {
                return Err(Error::EndpointNotFound);
            }
            change(&mut row);
            endpoints.insert(id, to_json(&row)?.as_slice())?;
            row
        };
        txn.commit()?;
        self.cache.invalidate();
        self.view(row)
    }

    /// The endpoint with this slug, if `owner` owns it.
    pub fn owned_row(&self, owner: &AccountRow, slug: &str) -> Result<EndpointRow> {
        let txn = self.store.read()?;
        let id = txn
            .open_table(ENDPOINT_SLUGS)?
            .get(slug)?
            .map(|v| v.value())
            .ok_or(Error::EndpointNotFound)?;
        let row: EndpointRow = match txn.open_table(ENDPOINTS)?.get(id)? {
            Some(v) => from_json(v.value())?,
            None => return Err(Error::EndpointNotFound),
        };
        if row.owner_id != owner.id {
            return Err(Error::EndpointNotFound);
        }
        Ok(row)
    }

    /// Authorises a data call: the key must exist (401), belong to the endpoint named by
    /// `slug` (404 otherwise, so a key reveals nothing about other endpoints), the endpoint
    /// must be active (403) and a production key needs a deployed endpoint (403).
    pub fn authorize_data_key(&self, key: Option<&str>, slug: &str) -> Result<DataAccess> {
        let key = key.ok_or(Error::MissingApiKey)?;
        if !key.starts_with(Environment::Sandbox.key_prefix())
            && !key.starts_with(Environment::Production.key_prefix())
        {
            return Err(Error::InvalidApiKey);
        }
        let hash = secret_hash(key);
        let resolved = match self.cache.get(&hash) {
            (Some(hit), _) => hit,
            (None, generation) => {
                // Unknown keys are not cached: only keys that exist can take memory.
                let entry = Arc::new(self.resolve_key(&hash)?.ok_or(Error::InvalidApiKey)?);
                self.cache.insert(generation, hash, entry.clone());
                entry
            }
        };
        let endpoint = &resolved.endpoint;
        if endpoint.slug != slug {
            return Err(Error::EndpointNotFound);
        }
        if !endpoint.active {
            return Err(Error::EndpointInactive);
        }
        if resolved.key.environment == Environment::Production && !endpoint.deployed {
            return Err(Error::EndpointNotDeployed);
        }
        Ok(DataAccess {
            partition: partition(endpoint.id, resolved.key.environment),
            environment: resolved.key.environment,
            key_id: resolved.key.key_id.clone(),
            endpoint: endpoint.clone(),
        })
    }

    fn resolve_key(&self, hash: &[u8; 32]) -> Result<Option<CachedKey>> {
        let txn = self.store.read()?;
        let key: ApiKeyRow = match txn.open_table(API_KEYS)?.get(hash)? {
            Some(v) => from_json(v.value())?,
            None => return Ok(None),
        };
        let endpoint: EndpointRow = match txn.open_table(ENDPOINTS)?.get(key.endpoint_id)? {
            Some(v) => from_json(v.value())?,
            None => return Ok(None),
        };
        Ok(Some(CachedKey {
            key,
            endpoint: Arc::new(endpoint),
        }))
    }

    /// The endpoint id for a slug, whoever owns it (for request logging of refused calls).
    pub fn id_for_slug(&self, slug: &str) -> Result<Option<u64>> {
        let txn = self.store.read()?;
        Ok(txn
            .open_table(ENDPOINT_SLUGS)?
            .get(slug)?
            .map(|v| v.value()))
    }

    fn view(&self, row: EndpointRow) -> Result<EndpointView> {
        let open = |sealed: &[u8]| {
            self.sealer
                .open_string(sealed)
                .map_err(|e| Error::Internal(e.to_string()))
        };
        Ok(EndpointView {
            sandbox_key: open(&row.sandbox_key_sealed)?,
            production_key: open(&row.production_key_sealed)?,
            slug: row.slug,
            name: row.name,
            description: row.description,
            required_fields: row.required_fields,
            active: row.active,
            deployed: row.deployed,
            deployed_at: row.deployed_at.map(|t| t.to_rfc3339()),
            created_at: row.created_at.to_rfc3339(),
        })
    }
}

fn insert_key(
    txn: &WriteTransaction,
    key: &str,
    endpoint_id: u64,
    environment: Environment,
    now: crate::clock::Timestamp,
) -> Result<()> {
    let hash = secret_hash(key);
    let row = ApiKeyRow {
        key_id: key_id(&hash),
        endpoint_id,
        environment,
        created_at: now,
    };
    txn.open_table(API_KEYS)?
        .insert(&hash, to_json(&row)?.as_slice())?;
    Ok(())
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
