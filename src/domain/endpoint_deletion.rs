//! Deleting an endpoint (its owner only), in two steps.
//!
//! 1. [`delete`], one transaction: the endpoint row is marked deleted (`deleted_at`), so no
//!    call or list finds it any more (404 `endpoint_not_found`, as for an unknown slug), and
//!    everything that grants access goes with it: every API key (current and still in a
//!    rotation's grace period, the owner's and the collaborators'), the collaborators, the
//!    invitations, the webhook subscriptions and signing secrets. An `endpoint.deleted` audit
//!    entry is appended; the audit log stays, readable by the owner (`audit_row`). The row and
//!    its slug stay too, so the slug is never given to another endpoint.
//! 2. [`purge_deleted`], in the background ([`run_schedule`]): the records of both
//!    environments (each delete logged in the change log, so the search index drops them),
//!    their change-stream events, deliveries and attempts, Idempotency-Key claims, usage
//!    counts and request log entries, [`PURGE_CHUNK`] rows per transaction, so a large
//!    endpoint never holds the write lock for long. The row is marked `purged` at the end;
//!    until then the purge starts again after a restart (every step is idempotent).

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::core::clock::Timestamp;
use crate::core::crypto::secret_hash;
use crate::core::ticker::Ticker;
use crate::domain::audit;
use crate::domain::endpoints::{Endpoints, Membership, member_in};
use crate::domain::error::{Error, Result};
use crate::domain::handles::Handles;
use crate::store::request_log::RequestLogStore;
use crate::store::{
    AccountRow, Effects, EndpointRow, Environment, Partition, Store, StoreError, WriteTx,
};

/// Most rows removed per transaction by the purge.
pub const PURGE_CHUNK: usize = 2_000;
/// How often (real time) the purge looks for deleted endpoints.
pub const SCHEDULE_TICK: Duration = Duration::from_secs(1);

/// What a deletion answers.
#[derive(Debug, Serialize)]
pub struct Deleted {
    pub slug: String,
    pub deleted: bool,
    pub deleted_at: String,
}

/// Deletes the endpoint `slug` of `owner` (403 `owner_only` for its collaborators, 404 for
/// anyone else). With `confirmation` (the dashboard's typed name), it must be the endpoint's
/// name, trimmed (400 otherwise, nothing deleted).
pub fn delete(
    endpoints: &Endpoints,
    owner: &AccountRow,
    slug: &str,
    confirmation: Option<&str>,
) -> Result<Deleted> {
    let now = endpoints.handles.now();
    let row = endpoints.handles.write(|tx| {
        let (mut row, membership) = member_in(&*tx, owner, slug)?;
        if !matches!(membership, Membership::Owner) {
            return Err(Error::OwnerOnly);
        }
        if confirmation.is_some_and(|typed| typed.trim() != row.name) {
            return Err(Error::InvalidRequest(format!(
                "Type the endpoint's name, {}, to delete it.",
                row.name
            )));
        }
        revoke_access(tx, endpoints, &row)?;
        row.deleted_at = Some(now);
        tx.put_endpoint(&row)?;
        let details = serde_json::json!({ "name": row.name, "slug": row.slug });
        audit::record(tx, now, row.id, owner, "endpoint.deleted", details)?;
        Ok(row)
    })?;
    Ok(Deleted {
        slug: row.slug,
        deleted: true,
        deleted_at: now.to_rfc3339(),
    })
}

/// Deletes what gives access to the endpoint: keys, collaborators, invitations, webhook
/// subscriptions and signing secrets.
fn revoke_access(tx: &mut dyn WriteTx, endpoints: &Endpoints, row: &EndpointRow) -> Result<()> {
    let mut sealed_keys: Vec<Vec<u8>> = vec![
        row.sandbox_key_sealed.clone(),
        row.production_key_sealed.clone(),
    ];
    sealed_keys.extend(row.previous_keys.iter().map(|p| p.key_sealed.clone()));
    for collaborator in tx.collaborators(row.id)? {
        sealed_keys.push(collaborator.sandbox_key_sealed.clone());
        sealed_keys.push(collaborator.production_key_sealed.clone());
        sealed_keys.extend(
            collaborator
                .previous_keys
                .iter()
                .map(|p| p.key_sealed.clone()),
        );
        tx.delete_collaborator(row.id, collaborator.account_id)?;
    }
    for sealed in &sealed_keys {
        tx.delete_api_key(&secret_hash(&endpoints.open_key(sealed)?))?;
    }
    for invitation in tx.invitations(row.id)? {
        let token = endpoints.open_key(&invitation.token_sealed)?;
        tx.delete_invitation(invitation.id, &secret_hash(&token))?;
    }
    for environment in [Environment::Sandbox, Environment::Production] {
        let key = Partition::new(row.id, environment);
        tx.delete_webhook_settings(key)?;
        tx.delete_webhook_secret(key)?;
    }
    Ok(())
}

/// Purges every deleted endpoint whose purge has not finished; returns how many rows it
/// removed. `request_log_written` returns once the request-log entries queued so far are
/// written: the log's writer gathers entries for a moment before it writes them, and one of
/// a call made just before the deletion would otherwise land after the purge.
pub fn purge_deleted(
    store: &dyn Store,
    request_log: &dyn RequestLogStore,
    request_log_written: &dyn Fn(),
) -> Result<(usize, Effects), StoreError> {
    let mut total = 0;
    let mut changed = Vec::new();
    let deleted = store.read()?.unpurged_deletions()?;
    if !deleted.is_empty() {
        request_log_written();
    }
    for row in deleted {
        for environment in [Environment::Sandbox, Environment::Production] {
            let key = Partition::new(row.id, environment);
            changed.push(key);
            total += drain(|| store.purge_partition_before(key, u128::MAX, PURGE_CHUNK))?;
            total += drain(|| store.purge_events_before(key, Timestamp(i64::MAX), PURGE_CHUNK))?;
            total += drain(|| store.purge_partition_rows(key, PURGE_CHUNK))?;
            total += drain(|| request_log.purge_partition_requests(key, PURGE_CHUNK))?;
        }
        crate::store::write(store, |tx| {
            if let Some(mut current) = tx.endpoint(row.id)? {
                current.purged = true;
                tx.put_endpoint(&current)?;
            }
            Ok::<_, StoreError>(())
        })?;
        log::info!("endpoint {}: deleted data purged", row.id);
    }
    Ok((total, Effects::records_changed(changed)))
}

/// Calls `step` until it removes nothing; returns how many it removed in all.
fn drain(mut step: impl FnMut() -> Result<usize, StoreError>) -> Result<usize, StoreError> {
    let mut total = 0;
    loop {
        match step()? {
            0 => return Ok(total),
            n => total += n,
        }
    }
}

/// Runs the purge whenever a deleted endpoint waits for it (looked for every
/// [`SCHEDULE_TICK`]); what its commits require takes `handles`' after-commit path.
pub async fn run_schedule(
    handles: Handles,
    request_log: Arc<dyn RequestLogStore>,
    request_log_written: Arc<dyn Fn() + Send + Sync>,
    mut ticker: Ticker,
) {
    while ticker.tick().await {
        let waiting = match handles
            .store
            .read()
            .and_then(|snapshot| snapshot.unpurged_deletions())
        {
            Ok(rows) => !rows.is_empty(),
            Err(err) => {
                log::warn!("cannot look for deleted endpoints to purge: {err}");
                false
            }
        };
        if !waiting {
            continue;
        }
        let (store, request_log, now) = (handles.store.clone(), request_log.clone(), handles.now());
        let written = request_log_written.clone();
        let turn = tokio::task::spawn_blocking(move || {
            crate::domain::jobs::run(store.as_ref(), "endpoint_purge", now, SCHEDULE_TICK, || {
                purge_deleted(store.as_ref(), request_log.as_ref(), written.as_ref())
            })
        })
        .await;
        match turn.map(|turn| turn.ran) {
            Ok(None) => {}
            Ok(Some(Ok((_, effects)))) => handles.committed(effects),
            Ok(Some(Err(err))) => log::error!("endpoint purge failed: {err}"),
            Err(err) => log::error!("endpoint purge task failed: {err}"),
        }
    }
}
