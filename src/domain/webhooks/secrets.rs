//! The webhook signing secrets: one per endpoint and environment, as the spec's "Webhook
//! signing secret" and its replacement state table have them.
//!
//! - Both secrets of an endpoint are made in the transaction that creates it
//!   ([`create_for_endpoint`]). Endpoints created before secrets existed have none: theirs
//!   are made when the server starts ([`create_missing`], before anything is sent), so old
//!   data dirs work unchanged and signing never writes.
//! - A secret is stored sealed (see `crypto`), because it must be shown again; it never
//!   appears in a log or an audit entry.
//! - The owner and the endpoint's collaborators can view it; only the owner can reissue it.
//!   A reissue keeps the replaced secret as `previous` and starts a [`CHANGEOVER`] during
//!   which webhooks carry both signatures, new first. A reissue during a changeover drops the
//!   older previous secret: only the last two secrets ever sign.
//! - [`signing_keys`] is what a sender asks at send time: the current key, and the previous
//!   one while the changeover runs; [`signed_headers`] signs a request with them. Both only
//!   read a snapshot.

use std::time::Duration;

use serde::Serialize;

use super::signing::{self, Message, generate_secret, secret_key};
use crate::core::clock::Timestamp;
use crate::core::crypto::Sealer;
use crate::domain::audit;
use crate::domain::endpoints::Endpoints;
use crate::domain::error::{Error, Result};
use crate::domain::handles::Handles;
use crate::store::{AccountRow, Environment, Partition, Store, WebhookSecretRow, WriteTx};

/// How long after a reissue webhooks are still signed with the previous secret too.
pub const CHANGEOVER: Duration = Duration::from_secs(24 * 60 * 60);

/// A secret as the management API shows it. `rotated_at` once the secret has been reissued;
/// `previous_valid_until` while the changeover after that reissue runs.
#[derive(Debug, Serialize)]
pub struct SecretView {
    pub environment: Environment,
    pub secret: String,
    pub created_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rotated_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous_valid_until: Option<String>,
}

/// Makes the sandbox and production secrets of a new endpoint inside its creation `txn`.
pub fn create_for_endpoint(
    tx: &mut dyn WriteTx,
    sealer: &Sealer,
    endpoint_id: u64,
    now: Timestamp,
) -> Result<()> {
    for environment in [Environment::Sandbox, Environment::Production] {
        tx.put_webhook_secret(
            Partition::new(endpoint_id, environment),
            &new_row(sealer, now),
        )?;
    }
    Ok(())
}

/// The secret of one environment of the endpoint, for its owner or a collaborator (404 for
/// any other account).
pub fn view(
    endpoints: &Endpoints,
    handles: &Handles,
    sealer: &Sealer,
    account: &AccountRow,
    slug: &str,
    environment: Environment,
) -> Result<SecretView> {
    let (endpoint, _) = endpoints.member_row(account, slug)?;
    let row = stored_row(
        handles.store.as_ref(),
        Partition::new(endpoint.id, environment),
    )?;
    secret_view(sealer, environment, &row, handles.now())
}

/// The owner replaces the secret of one environment (403 `owner_only` for collaborators, 404
/// for any other account): the current secret becomes the previous one, a new one is made,
/// and the changeover starts now. The audit entry names the environment, never a secret.
pub fn reissue(
    endpoints: &Endpoints,
    handles: &Handles,
    sealer: &Sealer,
    owner: &AccountRow,
    slug: &str,
    environment: Environment,
) -> Result<SecretView> {
    let endpoint = endpoints.owned_row(owner, slug)?;
    let now = handles.now();
    let key = Partition::new(endpoint.id, environment);
    // Made before the write, which may run more than once: the secret it stores is this one.
    let replacement = fresh_secret(sealer);
    let row = handles.write(|tx| {
        let replaced = tx.webhook_secret(key)?.ok_or(Error::EndpointNotFound)?;
        let row = reissued(replaced, replacement.clone(), now);
        tx.put_webhook_secret(key, &row)?;
        let details = serde_json::json!({ "environment": environment });
        audit::record(
            tx,
            now,
            endpoint.id,
            owner,
            "webhook_secret.reissued",
            details,
        )?;
        Ok(row)
    })?;
    secret_view(sealer, environment, &row, now)
}

/// The keys to sign a webhook of `partition` with at `now`: the current key first, then the
/// previous one while the changeover after the last reissue runs (`now < rotated_at +
/// CHANGEOVER`). 404 `endpoint_not_found` when the partition's endpoint does not exist.
pub fn signing_keys(
    handles: &Handles,
    sealer: &Sealer,
    partition: Partition,
    now: Timestamp,
) -> Result<Vec<Vec<u8>>> {
    let row = stored_row(handles.store.as_ref(), partition)?;
    keys_at(sealer, &row, now)
}

/// Every header of attempt `number` of `message`, signed at `now` with the keys of
/// `partition` valid then ([`signing_keys`]), with the receiver's auth value unsealed and
/// `traceparent` when given (`signing::request_headers`).
pub fn signed_headers(
    handles: &Handles,
    sealer: &Sealer,
    partition: Partition,
    message: &Message<'_>,
    number: u32,
    now: Timestamp,
    traceparent: Option<&str>,
) -> Result<Vec<(String, String)>> {
    let keys = signing_keys(handles, sealer, partition, now)?;
    let auth_value = match (message.auth_header, message.auth_value_sealed) {
        (Some(_), Some(sealed)) => Some(
            sealer
                .open_string(sealed)
                .map_err(|e| Error::Internal(format!("the receiver's auth value: {e}")))?,
        ),
        _ => None,
    };
    Ok(signing::request_headers(
        message,
        &keys,
        auth_value,
        number,
        now,
        traceparent,
    ))
}

/// Accounts read at a time by [`create_missing`].
const ACCOUNTS_PAGE: usize = 500;

/// Makes the secrets that endpoints created before secrets existed lack (data of an older
/// version), so that a send only ever reads them. Run once at start, before anything is sent;
/// writes nothing when no secret is missing. Returns how many it made.
pub fn create_missing(handles: &Handles, sealer: &Sealer) -> Result<usize> {
    let missing = partitions_without_secret(handles.store.as_ref())?;
    if missing.is_empty() {
        return Ok(0);
    }
    let now = handles.now();
    // Made before the write, which may run more than once: the secrets it stores are these.
    let rows: Vec<(Partition, WebhookSecretRow)> = missing
        .into_iter()
        .map(|key| (key, new_row(sealer, now)))
        .collect();
    handles.write(|tx| {
        let mut made = 0;
        for (key, row) in &rows {
            // Another node may have made it since the read.
            if tx.webhook_secret(*key)?.is_none() {
                tx.put_webhook_secret(*key, row)?;
                made += 1;
            }
        }
        Ok(made)
    })
}

/// The partitions of live endpoints that have no secret, read in one snapshot: every
/// endpoint is some account's own.
fn partitions_without_secret(store: &dyn Store) -> Result<Vec<Partition>> {
    let snapshot = store.read()?;
    let mut missing = Vec::new();
    let mut after = 0;
    loop {
        let accounts = snapshot.accounts_page(after, ACCOUNTS_PAGE)?;
        for account in &accounts {
            for (endpoint, _) in snapshot.endpoints_of(account.id)? {
                if endpoint.owner_id != account.id || endpoint.deleted_at.is_some() {
                    continue;
                }
                for environment in [Environment::Sandbox, Environment::Production] {
                    let key = Partition::new(endpoint.id, environment);
                    if snapshot.webhook_secret(key)?.is_none() {
                        missing.push(key);
                    }
                }
            }
        }
        match accounts.last() {
            Some(last) if accounts.len() == ACCOUNTS_PAGE => after = last.id,
            _ => return Ok(missing),
        }
    }
}

/// A new secret, sealed.
fn fresh_secret(sealer: &Sealer) -> Vec<u8> {
    sealer.seal(generate_secret().as_bytes())
}

/// A row with a fresh secret and no history.
fn new_row(sealer: &Sealer, now: Timestamp) -> WebhookSecretRow {
    WebhookSecretRow {
        current_sealed: fresh_secret(sealer),
        previous_sealed: None,
        created_at: now,
        rotated_at: None,
    }
}

/// `row` after a reissue at `now`: its current secret becomes the previous one (dropping any
/// older previous one) under `replacement`, a new sealed secret.
fn reissued(row: WebhookSecretRow, replacement: Vec<u8>, now: Timestamp) -> WebhookSecretRow {
    WebhookSecretRow {
        current_sealed: replacement,
        previous_sealed: Some(row.current_sealed),
        created_at: row.created_at,
        rotated_at: Some(now),
    }
}

/// When the changeover of `row`'s last reissue ends, if `now` is still inside it.
fn changeover_end(row: &WebhookSecretRow, now: Timestamp) -> Option<Timestamp> {
    row.previous_sealed.as_ref()?;
    let end = row.rotated_at?.plus(CHANGEOVER);
    (now < end).then_some(end)
}

/// The signing keys of `row` at `now`, current first.
fn keys_at(sealer: &Sealer, row: &WebhookSecretRow, now: Timestamp) -> Result<Vec<Vec<u8>>> {
    let mut keys = vec![open_key(sealer, &row.current_sealed)?];
    if let Some(previous) = &row.previous_sealed
        && changeover_end(row, now).is_some()
    {
        keys.push(open_key(sealer, previous)?);
    }
    Ok(keys)
}

fn secret_view(
    sealer: &Sealer,
    environment: Environment,
    row: &WebhookSecretRow,
    now: Timestamp,
) -> Result<SecretView> {
    Ok(SecretView {
        environment,
        secret: open_secret(sealer, &row.current_sealed)?,
        created_at: row.created_at.to_rfc3339(),
        rotated_at: row.rotated_at.map(Timestamp::to_rfc3339),
        previous_valid_until: changeover_end(row, now).map(Timestamp::to_rfc3339),
    })
}

/// The stored row of `partition`. Every live endpoint has one (made with it, or at start by
/// [`create_missing`]): none means the endpoint is gone.
fn stored_row(store: &dyn Store, partition: Partition) -> Result<WebhookSecretRow> {
    store
        .read()?
        .webhook_secret(partition)?
        .ok_or(Error::EndpointNotFound)
}

fn open_secret(sealer: &Sealer, sealed: &[u8]) -> Result<String> {
    sealer
        .open_string(sealed)
        .map_err(|e| Error::Internal(e.to_string()))
}

/// The key bytes of a sealed secret.
fn open_key(sealer: &Sealer, sealed: &[u8]) -> Result<Vec<u8>> {
    secret_key(&open_secret(sealer, sealed)?)
        .map_err(|e| Error::Internal(format!("stored webhook secret: {e}")))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::core::clock::ManualClock;
    use crate::domain::endpoints::NewEndpoint;
    use crate::domain::handles::Unattended;
    use crate::store::Role;

    const T0: Timestamp = Timestamp(1_767_225_600_000_000);

    struct Fixture {
        _dir: tempfile::TempDir,
        endpoints: Endpoints,
        handles: Handles,
    }

    impl Fixture {
        fn new() -> Fixture {
            let dir = tempfile::tempdir().unwrap();
            let store =
                crate::store::open_embedded(&dir.path().join("intake.redb"), 1 << 20, 0).unwrap();
            let sealer = Sealer::load_or_create(dir.path()).unwrap();
            let clock = Arc::new(ManualClock::new(T0));
            let handles = Handles::new(store, clock, Arc::new(Unattended));
            Fixture {
                endpoints: Endpoints::new(
                    handles.clone(),
                    sealer,
                    Default::default(),
                    Default::default(),
                ),
                handles,
                _dir: dir,
            }
        }

        fn sealer(&self) -> &Sealer {
            &self.endpoints.sealer
        }

        /// Creates an endpoint of the stored owner; returns its id.
        fn endpoint(&self, name: &str) -> u64 {
            let owner = AccountRow {
                id: 1,
                email: "owner@example.com".into(),
                password_hash: String::new(),
                role: Role::Owner,
                created_at: T0,
                suspended: false,
            };
            let snapshot = self.handles.store.read().unwrap();
            if snapshot.account(owner.id).unwrap().is_none() {
                drop(snapshot);
                self.handles
                    .write(|tx| Ok(tx.insert_account(&owner)?))
                    .unwrap();
            }
            let new = NewEndpoint {
                name: name.into(),
                description: None,
                required_fields: Vec::new(),
                schema: None,
            };
            let view = self.endpoints.create(&owner, new).unwrap();
            self.endpoints.id_for_slug(&view.slug).unwrap().unwrap()
        }

        fn keys(&self, partition: Partition, now: Timestamp) -> Result<Vec<Vec<u8>>> {
            signing_keys(&self.handles, self.sealer(), partition, now)
        }
    }

    #[test]
    fn a_new_endpoint_has_a_secret_per_environment() {
        let f = Fixture::new();
        let first = f.endpoint("Orders");
        let second = f.endpoint("Leads");
        let mut seen = Vec::new();
        for id in [first, second] {
            for environment in [Environment::Sandbox, Environment::Production] {
                let keys = f.keys(Partition::new(id, environment), T0).unwrap();
                assert_eq!(keys.len(), 1);
                assert_eq!(keys[0].len(), 32);
                assert!(!seen.contains(&keys[0]));
                seen.push(keys[0].clone());
            }
        }
    }

    #[test]
    fn a_reissue_signs_with_both_keys_for_the_changeover() {
        let f = Fixture::new();
        let sealer = f.sealer();
        let original = new_row(sealer, T0);
        let k0 = keys_at(sealer, &original, T0).unwrap();
        assert_eq!(changeover_end(&original, T0), None);

        let t1 = T0.plus(Duration::from_secs(3600));
        let once = reissued(original.clone(), fresh_secret(sealer), t1);
        assert_eq!(once.created_at, T0);
        let k1 = keys_at(sealer, &once, t1).unwrap();
        assert_eq!(k1.len(), 2);
        assert_ne!(k1[0], k0[0]);
        assert_eq!(k1[1], k0[0]);
        let end = t1.plus(CHANGEOVER);
        assert_eq!(changeover_end(&once, t1), Some(end));
        assert_eq!(
            keys_at(sealer, &once, end.minus(Duration::from_micros(1))).unwrap(),
            k1
        );
        assert_eq!(keys_at(sealer, &once, end).unwrap(), [k1[0].clone()]);
        assert_eq!(changeover_end(&once, end), None);

        // A second reissue inside the window drops the original secret.
        let t2 = t1.plus(Duration::from_secs(3600));
        let twice = reissued(once, fresh_secret(sealer), t2);
        let k2 = keys_at(sealer, &twice, t2).unwrap();
        assert_eq!(k2.len(), 2);
        assert_eq!(k2[1], k1[0]);
        assert!(!k2.contains(&k0[0]));
        assert_eq!(
            keys_at(sealer, &twice, t2.plus(CHANGEOVER)).unwrap(),
            [k2[0].clone()]
        );
    }

    #[test]
    fn an_endpoint_from_before_secrets_gets_one_at_start_and_signing_never_writes() {
        let f = Fixture::new();
        let id = f.endpoint("Orders");
        let sandbox = Partition::new(id, Environment::Sandbox);
        f.handles
            .write(|tx| Ok(tx.delete_webhook_secret(sandbox)?))
            .unwrap();
        // Signing only reads: without a secret it fails and makes none.
        assert!(matches!(f.keys(sandbox, T0), Err(Error::EndpointNotFound)));
        let stored = |key| f.handles.store.read().unwrap().webhook_secret(key).unwrap();
        assert!(stored(sandbox).is_none());

        assert_eq!(create_missing(&f.handles, f.sealer()).unwrap(), 1);
        let made = f.keys(sandbox, T0).unwrap();
        assert_eq!(made.len(), 1);
        assert_eq!(made[0].len(), 32);
        assert_eq!(stored(sandbox).unwrap().created_at, T0);
        // Kept: the next start makes nothing, the next use finds the same secret.
        assert_eq!(create_missing(&f.handles, f.sealer()).unwrap(), 0);
        let later = T0.plus(Duration::from_secs(60));
        assert_eq!(f.keys(sandbox, later).unwrap(), made);

        // No secret is made for an endpoint that does not exist.
        let missing = Partition::new(id + 1, Environment::Sandbox);
        assert!(matches!(f.keys(missing, T0), Err(Error::EndpointNotFound)));
        assert!(stored(missing).is_none());
    }
}
