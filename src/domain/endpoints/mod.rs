//! Endpoints and their keys: the owner's management operations, who may see an endpoint
//! (its owner and its collaborators), and resolving a data call's API key to the partition
//! and permissions it carries.
//!
//! Collaborators and invitations are in `collaborators`, the deploy workflow in `deploy`;
//! both read and change endpoints through this service. Resolving a key and the cache of
//! resolved keys are in [`access`]; making new keys in [`new_keys`].

mod access;
mod new_keys;

use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize};

pub use self::access::{AccessCache, DataAccess, KeyGrant, Rechecked, recheck};
pub(crate) use self::new_keys::{NewKey, NewKeys};

use crate::core::clock::Timestamp;
use crate::core::config::format_duration;
use crate::core::crypto::Sealer;
use crate::core::ids::new_slug;
use crate::core::text::fold_case;
use crate::domain::audit;
use crate::domain::error::{Error, Result};
use crate::domain::handles::Handles;
use crate::domain::retention::Retention;
use crate::domain::schema::PayloadSchema;
use crate::domain::webhooks;
use crate::store::{
    AccountRow, CollaboratorRow, EndpointRow, Environment, IdKind, KeyHolder, Partition,
    Permission, ReadTx, RetentionRow, Role, WriteTx,
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
    /// The JSON Schema payloads must match, or `null`.
    pub schema: Option<serde_json::Value>,
    /// The endpoint's own retention windows (`null`: the server's default).
    pub retention: RetentionSettings,
    /// How long records of each environment are kept now.
    pub effective_retention: RetentionWindows,
    pub active: bool,
    /// `sandbox` or `production` (deployed).
    pub environment: Environment,
    pub deployed: bool,
    pub deployed_at: Option<String>,
    pub deploy_request: Option<DeployRequestView>,
    /// The owner's rejection of the last request, until a new request or the deploy.
    pub last_rejection: Option<DeployRejectionView>,
    pub monthly_quota: Option<u64>,
    pub created_at: String,
    /// `owner` or `collaborator`: the viewer's relation to the endpoint.
    pub role: &'static str,
    pub permissions: Vec<Permission>,
    pub sandbox_key: String,
    pub production_key: Option<String>,
}

/// An endpoint's own retention windows, as set: `null` keeps the server's default.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionSettings {
    pub sandbox: Option<String>,
    pub production: Option<String>,
}

/// How long an endpoint's records of each environment are kept.
#[derive(Debug, Serialize)]
pub struct RetentionWindows {
    pub sandbox: String,
    pub production: String,
}

/// The `retention` of `PATCH …/endpoints/{slug}`: only the environments present change; `null`
/// returns one to the server's default.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionPatch {
    #[serde(default, deserialize_with = "present")]
    pub sandbox: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    pub production: Option<Option<String>>,
}

#[derive(Debug, Serialize)]
pub struct DeployRequestView {
    pub requested_by: String,
    pub requested_at: String,
    pub note: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct DeployRejectionView {
    /// Who had asked, by e-mail address.
    pub requested_by: String,
    pub rejected_at: String,
    /// The owner's reason.
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
    /// A JSON Schema (draft 2020-12) payloads must match.
    #[serde(default)]
    pub schema: Option<serde_json::Value>,
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
    /// `null` removes the schema.
    #[serde(default, deserialize_with = "present")]
    pub schema: Option<Option<serde_json::Value>>,
    /// `null` returns both environments to the server's default.
    #[serde(default, deserialize_with = "present")]
    pub retention: Option<Option<RetentionPatch>>,
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

/// The endpoint service.
#[derive(Clone)]
pub struct Endpoints {
    pub(crate) handles: Handles,
    pub(crate) sealer: Sealer,
    cache: AccessCache,
    /// The server's retention rules, which an endpoint's own windows are held to.
    pub retention: Retention,
}

impl Endpoints {
    pub fn new(
        handles: Handles,
        sealer: Sealer,
        cache: AccessCache,
        retention: Retention,
    ) -> Endpoints {
        Endpoints {
            handles,
            sealer,
            cache,
            retention,
        }
    }

    /// Marked changed whenever access may have changed (see [`AccessCache::changes`]): what a
    /// long-running read (an export) follows to check its key again at once.
    pub fn access_changes(&self) -> tokio::sync::watch::Receiver<()> {
        self.cache.changes()
    }

    pub fn create(&self, owner: &AccountRow, new: NewEndpoint) -> Result<EndpointView> {
        crate::domain::accounts::require_server_owner(owner)?;
        let name = valid_name(&new.name)?;
        let description = valid_description(new.description)?;
        let required_fields = valid_required_fields(new.required_fields)?;
        let schema = new.schema.as_ref().map(valid_schema).transpose()?;
        let keys = NewKeys::generate(&self.sealer);
        let template = EndpointRow {
            id: 0,
            slug: String::new(),
            name,
            description,
            required_fields,
            schema,
            retention: RetentionRow::default(),
            active: true,
            deployed: false,
            deployed_at: None,
            created_at: self.handles.now(),
            owner_id: owner.id,
            deploy_request: None,
            deploy_rejection: None,
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
        let schema = patch
            .schema
            .map(|schema| schema.as_ref().map(valid_schema).transpose())
            .transpose()?;
        let retention = patch
            .retention
            .map(|patch| {
                // `"retention": null`: both environments to the server's default.
                self.retention_change(patch.unwrap_or(RetentionPatch {
                    sandbox: Some(None),
                    production: Some(None),
                }))
            })
            .transpose()?;
        if patch.monthly_quota == Some(Some(0)) {
            return Err(Error::InvalidRequest(
                "`monthly_quota` must be at least 1, or null for the server default.".into(),
            ));
        }
        let now = self.handles.now();
        let mut shortened = false;
        let view = self.modify(owner, slug, |tx, actor, row| {
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
            if let Some(schema) = &schema {
                changed.insert("schema".into(), schema_digest(schema.as_deref()));
                row.schema = schema.clone();
            }
            if let Some(change) = &retention {
                let before = row.retention;
                for (environment, window) in change {
                    row.retention.set(*environment, *window);
                }
                shortened = Environment::ALL.iter().any(|&environment| {
                    self.retention.kept(&row.retention, environment)
                        < self.retention.kept(&before, environment)
                });
                changed.insert(
                    "retention".into(),
                    serde_json::to_value(self.retention_settings(&row.retention))
                        .unwrap_or_default(),
                );
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
        })?;
        if shortened {
            // In the background, never in the request: the schedule purges at its next tick.
            self.retention.purge_soon();
        }
        Ok(view)
    }

    /// The windows a retention patch sets, each checked against the server's bounds.
    fn retention_change(
        &self,
        patch: RetentionPatch,
    ) -> Result<Vec<(Environment, Option<std::time::Duration>)>> {
        [
            (Environment::Sandbox, patch.sandbox),
            (Environment::Production, patch.production),
        ]
        .into_iter()
        .filter_map(|(environment, window)| {
            // Absent: unchanged; `null`: the server's default.
            let window = window?;
            Some(
                window
                    .map(|text| self.retention.valid(environment, &text))
                    .transpose()
                    .map(|window| (environment, window)),
            )
        })
        .collect()
    }

    fn retention_settings(&self, own: &RetentionRow) -> RetentionSettings {
        RetentionSettings {
            sandbox: own.get(Environment::Sandbox).map(format_duration),
            production: own.get(Environment::Production).map(format_duration),
        }
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
            partition: Partition::new(row.id, environment),
            environment,
            key_id: format!("account_{}", account.id),
            holder: match membership {
                Membership::Owner => KeyHolder::Owner,
                Membership::Collaborator(_) => KeyHolder::Collaborator(account.id),
            },
            schema: compiled_schema(&row),
            endpoint: Arc::new(row),
        })
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
        let email = |id: u64| -> Result<String> {
            Ok(self
                .handles
                .store
                .read()?
                .account(id)?
                .map_or_else(|| format!("account {id}"), |a| a.email))
        };
        let deploy_request = match &row.deploy_request {
            Some(request) => Some(DeployRequestView {
                requested_by: email(request.requested_by)?,
                requested_at: request.requested_at.to_rfc3339(),
                note: request.note.clone(),
            }),
            None => None,
        };
        let last_rejection = match &row.deploy_rejection {
            Some(rejection) => Some(DeployRejectionView {
                requested_by: email(rejection.requested_by)?,
                rejected_at: rejection.rejected_at.to_rfc3339(),
                note: rejection.note.clone(),
            }),
            None => None,
        };
        Ok(EndpointView {
            slug: row.slug,
            name: row.name,
            description: row.description,
            required_fields: row.required_fields,
            schema: row
                .schema
                .as_deref()
                .map(serde_json::from_str)
                .transpose()
                .map_err(|e| Error::Internal(format!("a stored schema is not JSON: {e}")))?,
            retention: self.retention_settings(&row.retention),
            effective_retention: RetentionWindows {
                sandbox: format_duration(self.retention.kept(&row.retention, Environment::Sandbox)),
                production: format_duration(
                    self.retention.kept(&row.retention, Environment::Production),
                ),
            },
            active: row.active,
            environment: if row.deployed {
                Environment::Production
            } else {
                Environment::Sandbox
            },
            deployed: row.deployed,
            deployed_at: row.deployed_at.map(Timestamp::to_rfc3339),
            deploy_request,
            last_rejection,
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

/// The endpoint's schema, compiled.
fn compiled_schema(row: &EndpointRow) -> Option<Arc<PayloadSchema>> {
    row.schema
        .as_deref()
        .map(|text| Arc::new(PayloadSchema::from_stored(text)))
}

/// The schema's text as stored, once it is found usable (400 `invalid_schema` otherwise).
fn valid_schema(schema: &serde_json::Value) -> Result<String> {
    PayloadSchema::parse(schema).map(|(_, text)| text)
}

/// What the audit log keeps of a schema: its size and digest, not its text (which may be
/// large, and which the endpoint shows).
fn schema_digest(schema: Option<&str>) -> serde_json::Value {
    match schema {
        Some(text) => serde_json::json!({
            "bytes": text.len(),
            "sha256": crate::core::crypto::hex(&crate::core::crypto::sha256(text.as_bytes())),
        }),
        None => serde_json::Value::Null,
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
