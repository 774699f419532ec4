//! The deploy workflow, as the spec's state table has it:
//!
//! | State | Trigger | Next state | Also happens |
//! |---|---|---|---|
//! | sandbox | a collaborator submits a deploy request | sandbox, request pending | the owner is notified and e-mailed |
//! | sandbox, request pending | the owner approves, or deploys directly | deployed | every collaborator is notified and e-mailed; production keys work |
//! | sandbox, request pending | the owner rejects | sandbox | the requester is notified and e-mailed |
//!
//! Every transition is one commit with its audit entry, notifications and outbox messages.

use redb::{ReadableTable, WriteTransaction};
use serde::Deserialize;

use crate::domain::audit;
use crate::domain::endpoints::EndpointView;
use crate::domain::error::{Error, Missing, Result};
use crate::domain::mail::{self, OutgoingMail};
use crate::domain::notifications;
use crate::http::app::App;
use crate::store::RedbWrite;
use crate::store::accounts::AccountsRead;
use crate::store::{AccountRow, COLLABORATORS, DeployRequestRow, EndpointRow};

const MAX_NOTE_CHARS: usize = 2000;

/// Body of `POST .../deploy-request` and `POST .../deploy-request/reject` (both optional).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Note {
    pub note: Option<String>,
}

/// A collaborator asks the owner to deploy.
pub fn request(app: &App, account: &AccountRow, slug: &str, note: Note) -> Result<EndpointView> {
    let note = valid_note(note)?;
    let now = app.clock.now();
    app.endpoints
        .modify_as(account, slug, false, |txn, actor, row| {
            if row.owner_id == actor.id {
                return Err(Error::Conflict(
                    "You own this endpoint: deploy it directly.".into(),
                ));
            }
            if row.deployed {
                return Err(Error::Conflict("This endpoint is already deployed.".into()));
            }
            if row.deploy_request.is_some() {
                return Err(Error::Conflict(
                    "A deploy request is already pending for this endpoint.".into(),
                ));
            }
            row.deploy_request = Some(DeployRequestRow {
                requested_by: actor.id,
                requested_at: now,
                note: note.clone(),
            });
            audit::record(
                &mut RedbWrite::over(txn),
                now,
                row.id,
                actor,
                "deploy.requested",
                serde_json::json!({ "note": note }),
            )?;
            let message = format!(
                "{} asks you to deploy \"{}\" to production.",
                actor.email, row.name
            );
            tell(
                app,
                txn,
                row,
                row.owner_id,
                "deploy_requested",
                &message,
                "Deploy request",
            )
        })
}

/// The owner deploys: directly, or by approving the pending request. Idempotent once deployed.
pub fn deploy(app: &App, owner: &AccountRow, slug: &str) -> Result<EndpointView> {
    let now = app.clock.now();
    app.endpoints.modify(owner, slug, |txn, actor, row| {
        if row.deployed {
            return Ok(());
        }
        let approved = row.deploy_request.take();
        row.deployed = true;
        row.deployed_at = Some(now);
        audit::record(
            &mut RedbWrite::over(txn),
            now,
            row.id,
            actor,
            "endpoint.deployed",
            serde_json::json!({ "approved_request_of": approved.map(|r| r.requested_by) }),
        )?;
        let message = format!(
            "\"{}\" is deployed: your production key (tm_live_) works now. Find it on the endpoint's Production tab.",
            row.name
        );
        for account_id in collaborator_ids(txn, row.id)? {
            tell(app, txn, row, account_id, "endpoint_deployed", &message, "Deployed")?;
        }
        Ok(())
    })
}

/// The owner approves the pending request: deploys. 404 when no request is pending.
pub fn approve(app: &App, owner: &AccountRow, slug: &str) -> Result<EndpointView> {
    let endpoint = app.endpoints.owned_row(owner, slug)?;
    if endpoint.deploy_request.is_none() {
        return Err(Error::NotFound(Missing::DeployRequest));
    }
    deploy(app, owner, slug)
}

/// The owner rejects the pending request; the endpoint stays in the sandbox.
pub fn reject(app: &App, owner: &AccountRow, slug: &str, note: Note) -> Result<EndpointView> {
    let note = valid_note(note)?;
    let now = app.clock.now();
    app.endpoints.modify(owner, slug, |txn, actor, row| {
        let request = row
            .deploy_request
            .take()
            .ok_or(Error::NotFound(Missing::DeployRequest))?;
        audit::record(
            &mut RedbWrite::over(txn),
            now,
            row.id,
            actor,
            "deploy.rejected",
            serde_json::json!({ "requested_by": request.requested_by, "note": note }),
        )?;
        let message = match &note {
            Some(note) => format!(
                "Your deploy request for \"{}\" was declined: {note}",
                row.name
            ),
            None => format!("Your deploy request for \"{}\" was declined.", row.name),
        };
        tell(
            app,
            txn,
            row,
            request.requested_by,
            "deploy_request_rejected",
            &message,
            "Deploy request declined",
        )
    })
}

/// Notifies an account and e-mails it the same message, inside `txn`.
fn tell(
    app: &App,
    txn: &WriteTransaction,
    endpoint: &EndpointRow,
    account_id: u64,
    kind: &'static str,
    message: &str,
    subject: &str,
) -> Result<()> {
    let now = app.clock.now();
    notifications::notify(
        &mut RedbWrite::over(txn),
        now,
        account_id,
        kind,
        &endpoint.slug,
        message.to_string(),
    )?;
    if let Some(account) = RedbWrite::over(txn).account(account_id)? {
        mail::enqueue(
            &mut RedbWrite::over(txn),
            now,
            OutgoingMail {
                kind,
                to: account.email,
                subject: format!("{subject}: {}", endpoint.name),
                body: format!(
                    "{message}\n\nEndpoint: {} ({})\n{}/api/v1/manage/endpoints/{}\n",
                    endpoint.name,
                    endpoint.slug,
                    app.config.public_url(),
                    endpoint.slug
                ),
            },
        )?;
    }
    Ok(())
}

fn collaborator_ids(txn: &WriteTransaction, endpoint_id: u64) -> Result<Vec<u64>> {
    let mut ids = Vec::new();
    for entry in txn
        .open_table(COLLABORATORS)?
        .range((endpoint_id, 0)..=(endpoint_id, u64::MAX))?
    {
        let (key, _) = entry?;
        ids.push(key.value().1);
    }
    Ok(ids)
}

fn valid_note(note: Note) -> Result<Option<String>> {
    match note.note {
        Some(n) if n.chars().count() > MAX_NOTE_CHARS => Err(Error::InvalidRequest(format!(
            "`note` must be at most {MAX_NOTE_CHARS} characters."
        ))),
        Some(n) if n.trim().is_empty() => Ok(None),
        other => Ok(other),
    }
}
