//! Rotating and revoking API keys: an endpoint's default keys (its owner's) and each
//! collaborator's collaboration keys, one environment at a time.
//!
//! A rotation makes the new key at once. The replaced key keeps working for the grace period
//! the caller chooses (0 to [`MAX_GRACE`]; 0 deletes it at once), as a reissued webhook signing
//! secret keeps signing through its changeover: its `ApiKeyRow` gets `expires_at`, which every
//! data call judges by the server's clock, and the holder's row keeps it sealed
//! (`PreviousKeyRow`) so it can be revoked early. A rotation during a grace period ends the
//! older previous key at once: at most two keys of a holder and environment ever work.
//!
//! The owner rotates and revokes the default keys and any collaborator's keys (named by
//! account id); a collaborator only their own, as the caller's own keys (and their production
//! key only once the endpoint is deployed, as it is shown only then). Every rotation and revocation is in the audit log with the environment, the
//! holder, the key ids and the grace end; never with a key.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::core::clock::Timestamp;
use crate::core::crypto::{key_id, secret_hash};
use crate::domain::audit;
use crate::domain::endpoints::{Endpoints, Membership, NewKey, member_in};
use crate::domain::error::{Error, Missing, Result};
use crate::store::{
    AccountRow, CollaboratorRow, EndpointRow, Environment, PreviousKeyRow, ReadTx, WriteTx,
};

/// The longest grace period a replaced key may get.
pub const MAX_GRACE: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// Whose keys a call is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    /// The caller's own: the default keys for the owner, a collaborator's collaboration keys.
    Own,
    /// The collaboration keys of the collaborator with this account id (for the owner).
    Collaborator(u64),
}

/// Body of `POST …/keys/{environment}/rotate` (optional: no body revokes the old key at once).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rotation {
    /// How long the replaced key keeps working, 0 to 604800 (7 days).
    #[serde(default)]
    pub grace_period_seconds: u64,
}

/// The keys of one holder and environment, without the key itself.
#[derive(Debug, Serialize)]
pub struct KeyState {
    pub environment: Environment,
    /// The collaborator holding the keys; `null` for the endpoint's default keys.
    pub collaborator_id: Option<u64>,
    pub key_id: String,
    /// The replaced key while its grace period runs.
    pub previous_key_id: Option<String>,
    pub previous_valid_until: Option<String>,
}

/// A key with its state: what a rotation answers (the new key, shown once by the API), and
/// what the dashboard shows masked.
#[derive(Debug, Serialize)]
pub struct HeldKey {
    pub key: String,
    #[serde(flatten)]
    pub state: KeyState,
}

/// Rotates the key of `holder` and `environment` for `account`.
pub fn rotate(
    endpoints: &Endpoints,
    account: &AccountRow,
    slug: &str,
    holder: Holder,
    environment: Environment,
    rotation: Rotation,
) -> Result<HeldKey> {
    // Who may is answered before what is wrong with the request.
    target_in(
        &*endpoints.handles.store.read()?,
        account,
        slug,
        holder,
        environment,
    )?;
    let grace = Duration::from_secs(rotation.grace_period_seconds);
    if grace > MAX_GRACE {
        return Err(Error::InvalidRequest(format!(
            "`grace_period_seconds` must be 0 to {}.",
            MAX_GRACE.as_secs()
        )));
    }
    let now = endpoints.handles.now();
    let new = NewKey::generate(&endpoints.sealer, environment);
    let mut target = endpoints.handles.write(|tx| {
        let mut target = target_in(&*tx, account, slug, holder, environment)?;
        let (previous_key_id, valid_until) = replace(tx, endpoints, &mut target, &new, now, grace)?;
        target.store(tx)?;
        let details = serde_json::json!({
            "environment": environment,
            "holder": target.holder_name(),
            "account_id": target.collaborator_id(),
            "key_id": new.key_id(),
            "previous_key_id": previous_key_id,
            "previous_valid_until": valid_until.map(Timestamp::to_rfc3339),
        });
        audit::record(
            tx,
            now,
            target.endpoint.id,
            account,
            "api_key.rotated",
            details,
        )?;
        Ok(target)
    })?;
    Ok(HeldKey {
        key: new.plain().to_string(),
        state: target.state(endpoints, environment, now)?,
    })
}

/// Ends the grace period of the replaced key of `holder` and `environment` now; 404
/// `previous_key_not_found` when none is running.
pub fn revoke_previous(
    endpoints: &Endpoints,
    account: &AccountRow,
    slug: &str,
    holder: Holder,
    environment: Environment,
) -> Result<KeyState> {
    let now = endpoints.handles.now();
    let mut target = endpoints.handles.write(|tx| {
        let mut target = target_in(&*tx, account, slug, holder, environment)?;
        let (_, previous) = target.slot(environment);
        let revoked = match take_previous(tx, endpoints, previous, environment)? {
            Some((key_id, row)) if row.valid_until > now => key_id,
            _ => return Err(Error::NotFound(Missing::PreviousKey)),
        };
        target.store(tx)?;
        let details = serde_json::json!({
            "environment": environment,
            "holder": target.holder_name(),
            "account_id": target.collaborator_id(),
            "key_id": revoked,
        });
        audit::record(
            tx,
            now,
            target.endpoint.id,
            account,
            "api_key.revoked",
            details,
        )?;
        Ok(target)
    })?;
    target.state(endpoints, environment, now)
}

/// The current key of `holder` and `environment` and its state, as `account` may see it.
pub fn held_key(
    endpoints: &Endpoints,
    account: &AccountRow,
    slug: &str,
    holder: Holder,
    environment: Environment,
) -> Result<HeldKey> {
    let mut target = target_in(
        &*endpoints.handles.store.read()?,
        account,
        slug,
        holder,
        environment,
    )?;
    let key = endpoints.open_key(target.slot(environment).0)?;
    Ok(HeldKey {
        key,
        state: target.state(endpoints, environment, endpoints.handles.now())?,
    })
}

/// The row holding the keys a call is about: the endpoint's, or one collaborator's.
struct Target {
    endpoint: EndpointRow,
    collaborator: Option<CollaboratorRow>,
}

impl Target {
    fn collaborator_id(&self) -> Option<u64> {
        self.collaborator.as_ref().map(|c| c.account_id)
    }

    fn holder_name(&self) -> &'static str {
        match self.collaborator {
            Some(_) => "collaborator",
            None => "owner",
        }
    }

    /// The sealed current key of `environment` and the replaced keys still kept.
    fn slot(&mut self, environment: Environment) -> (&mut Vec<u8>, &mut Vec<PreviousKeyRow>) {
        let (sandbox, production, previous) = match &mut self.collaborator {
            Some(c) => (
                &mut c.sandbox_key_sealed,
                &mut c.production_key_sealed,
                &mut c.previous_keys,
            ),
            None => (
                &mut self.endpoint.sandbox_key_sealed,
                &mut self.endpoint.production_key_sealed,
                &mut self.endpoint.previous_keys,
            ),
        };
        match environment {
            Environment::Sandbox => (sandbox, previous),
            Environment::Production => (production, previous),
        }
    }

    fn store(&self, tx: &mut dyn WriteTx) -> Result<()> {
        match &self.collaborator {
            Some(c) => tx.put_collaborator(c)?,
            None => tx.put_endpoint(&self.endpoint)?,
        }
        Ok(())
    }

    fn state(
        &mut self,
        endpoints: &Endpoints,
        environment: Environment,
        now: Timestamp,
    ) -> Result<KeyState> {
        let collaborator_id = self.collaborator_id();
        let (current, previous) = self.slot(environment);
        let current_id = key_id(&secret_hash(&endpoints.open_key(current)?));
        let running = previous
            .iter()
            .find(|p| p.environment == environment && p.valid_until > now);
        let (previous_key_id, previous_valid_until) = match running {
            Some(p) => (
                Some(key_id(&secret_hash(&endpoints.open_key(&p.key_sealed)?))),
                Some(p.valid_until.to_rfc3339()),
            ),
            None => (None, None),
        };
        Ok(KeyState {
            environment,
            collaborator_id,
            key_id: current_id,
            previous_key_id,
            previous_valid_until,
        })
    }
}

/// The keys `account` asks about, if it may change them: 404 when it is no member of the
/// endpoint (or the collaborator does not exist), 403 `owner_only` for a collaborator naming a
/// collaborator (their own keys are `Holder::Own`), 403 `endpoint_not_deployed` for a
/// collaborator's own production key before the deploy.
fn target_in<R: ReadTx + ?Sized>(
    tx: &R,
    account: &AccountRow,
    slug: &str,
    holder: Holder,
    environment: Environment,
) -> Result<Target> {
    let (endpoint, membership) = member_in(tx, account, slug)?;
    let collaborator = match (holder, membership) {
        (Holder::Own, Membership::Owner) => None,
        (Holder::Collaborator(id), Membership::Owner) => Some(
            tx.collaborator(endpoint.id, id)?
                .ok_or(Error::NotFound(Missing::Collaborator))?,
        ),
        (Holder::Own, Membership::Collaborator(own)) => Some(own),
        (Holder::Collaborator(_), Membership::Collaborator(_)) => return Err(Error::OwnerOnly),
    };
    if collaborator.is_some()
        && account.id != endpoint.owner_id
        && environment == Environment::Production
        && !endpoint.deployed
    {
        return Err(Error::EndpointNotDeployed);
    }
    Ok(Target {
        endpoint,
        collaborator,
    })
}

/// Puts `new` in place of the current key of its environment: the replaced key is deleted
/// now (no grace) or expires after `grace`. Returns the replaced key's id and grace end.
fn replace(
    tx: &mut dyn WriteTx,
    endpoints: &Endpoints,
    target: &mut Target,
    new: &NewKey,
    now: Timestamp,
    grace: Duration,
) -> Result<(String, Option<Timestamp>)> {
    let (endpoint_id, collaborator_id) = (target.endpoint.id, target.collaborator_id());
    let environment = new.environment;
    let (current, previous) = target.slot(environment);
    // Only the last two keys ever work: an older replaced key ends now.
    take_previous(tx, endpoints, previous, environment)?;
    let replaced = std::mem::replace(current, new.sealed.clone());
    let hash = secret_hash(&endpoints.open_key(&replaced)?);
    new.insert(tx, endpoint_id, now, collaborator_id)?;
    if grace.is_zero() {
        tx.delete_api_key(&hash)?;
        return Ok((key_id(&hash), None));
    }
    let valid_until = now.plus(grace);
    if let Some(mut row) = tx.api_key(&hash)? {
        row.expires_at = Some(valid_until);
        tx.put_api_key(&hash, &row)?;
    }
    previous.push(PreviousKeyRow {
        environment,
        key_sealed: replaced,
        valid_until,
    });
    Ok((key_id(&hash), Some(valid_until)))
}

/// Removes the replaced key of `environment` from `previous` and deletes its `ApiKeyRow`;
/// returns its id and row, if there was one.
fn take_previous(
    tx: &mut dyn WriteTx,
    endpoints: &Endpoints,
    previous: &mut Vec<PreviousKeyRow>,
    environment: Environment,
) -> Result<Option<(String, PreviousKeyRow)>> {
    let Some(at) = previous.iter().position(|p| p.environment == environment) else {
        return Ok(None);
    };
    let row = previous.remove(at);
    let hash = secret_hash(&endpoints.open_key(&row.key_sealed)?);
    tx.delete_api_key(&hash)?;
    Ok(Some((key_id(&hash), row)))
}
