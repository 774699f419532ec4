//! The deploy workflow, as the spec's state table has it:
//!
//! | State | Trigger | Next state | Also happens |
//! |---|---|---|---|
//! | sandbox | a collaborator submits a deploy request | sandbox, request pending | the owner is notified and e-mailed |
//! | sandbox, request pending | the owner approves, or deploys directly | deployed | every collaborator is notified and e-mailed; production keys work |
//! | sandbox, request pending | the owner rejects | sandbox, last rejection shown | the requester is notified and e-mailed |
//! | sandbox, request pending | the requester withdraws | sandbox | nobody is e-mailed |
//!
//! Every transition is one commit with its audit entry, notifications and outbox messages.
//! Settling a request (approve, deploy, reject, withdraw) resolves the owner's notifications
//! about it, and a new request or the deploy resolves the requester's about a rejection, so
//! no notification goes on asking for what is done. Each e-mail links to the dashboard page
//! its notification announces (`notifications::page`), never to the management API.

use serde::Deserialize;

use crate::core::clock::Timestamp;
use crate::domain::audit;
use crate::domain::endpoints::{EndpointView, Endpoints};
use crate::domain::error::{Error, Missing, Result};
use crate::domain::mail::{self, OutgoingMail};
use crate::domain::notifications::{
    self, DEPLOY_REJECTED as REJECTED, DEPLOY_REQUESTED as REQUESTED,
};
use crate::store::{AccountRow, DeployRejectionRow, DeployRequestRow, EndpointRow, WriteTx};

const MAX_NOTE_CHARS: usize = 2000;

/// Body of `POST .../deploy-request` and `POST .../deploy-request/reject` (both optional).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Note {
    pub note: Option<String>,
}

/// A collaborator asks the owner to deploy. `public_url` is the server's, for the e-mail.
pub fn request(
    endpoints: &Endpoints,
    public_url: &str,
    account: &AccountRow,
    slug: &str,
    note: Note,
) -> Result<EndpointView> {
    let note = valid_note(note)?;
    let now = endpoints.handles.now();
    endpoints.modify_as(account, slug, false, |tx, actor, row| {
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
        row.deploy_rejection = None;
        notifications::resolve(tx, now, actor.id, REJECTED, &row.slug, "requested_again")?;
        audit::record(
            tx,
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
        let notice = Notice {
            kind: REQUESTED,
            message: &message,
            subject: "Deploy request",
        };
        tell(tx, now, public_url, row, row.owner_id, &notice)
    })
}

/// The owner deploys: directly, or by approving the pending request. Idempotent once deployed.
pub fn deploy(
    endpoints: &Endpoints,
    public_url: &str,
    owner: &AccountRow,
    slug: &str,
) -> Result<EndpointView> {
    let now = endpoints.handles.now();
    endpoints.modify(owner, slug, |tx, actor, row| {
        if row.deployed {
            return Ok(());
        }
        let approved = row.deploy_request.take();
        row.deployed = true;
        row.deployed_at = Some(now);
        row.deploy_rejection = None;
        let outcome = if approved.is_some() {
            "approved"
        } else {
            "deployed"
        };
        notifications::resolve(tx, now, row.owner_id, REQUESTED, &row.slug, outcome)?;
        audit::record(
            tx,
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
        let notice = Notice {
            kind: "endpoint_deployed",
            message: &message,
            subject: "Deployed",
        };
        for collaborator in tx.collaborators(row.id)? {
            let id = collaborator.account_id;
            notifications::resolve(tx, now, id, REJECTED, &row.slug, "deployed")?;
            tell(tx, now, public_url, row, id, &notice)?;
        }
        Ok(())
    })
}

/// The owner approves the pending request: deploys. 404 when no request is pending.
pub fn approve(
    endpoints: &Endpoints,
    public_url: &str,
    owner: &AccountRow,
    slug: &str,
) -> Result<EndpointView> {
    let endpoint = endpoints.owned_row(owner, slug)?;
    if endpoint.deploy_request.is_none() {
        return Err(Error::NotFound(Missing::DeployRequest));
    }
    deploy(endpoints, public_url, owner, slug)
}

/// The owner rejects the pending request; the endpoint stays in the sandbox.
pub fn reject(
    endpoints: &Endpoints,
    public_url: &str,
    owner: &AccountRow,
    slug: &str,
    note: Note,
) -> Result<EndpointView> {
    let note = valid_note(note)?;
    let now = endpoints.handles.now();
    endpoints.modify(owner, slug, |tx, actor, row| {
        let request = row
            .deploy_request
            .take()
            .ok_or(Error::NotFound(Missing::DeployRequest))?;
        audit::record(
            tx,
            now,
            row.id,
            actor,
            "deploy.rejected",
            serde_json::json!({ "requested_by": request.requested_by, "note": note }),
        )?;
        row.deploy_rejection = Some(DeployRejectionRow {
            requested_by: request.requested_by,
            rejected_at: now,
            note: note.clone(),
        });
        notifications::resolve(tx, now, actor.id, REQUESTED, &row.slug, "rejected")?;
        let message = match &note {
            Some(note) => format!(
                "Your deploy request for \"{}\" was declined: {note}",
                row.name
            ),
            None => format!("Your deploy request for \"{}\" was declined.", row.name),
        };
        let notice = Notice {
            kind: REJECTED,
            message: &message,
            subject: "Deploy request declined",
        };
        tell(tx, now, public_url, row, request.requested_by, &notice)
    })
}

/// The collaborator who asked withdraws the pending request; the endpoint stays in the
/// sandbox and the owner's notification about it says so.
pub fn withdraw(endpoints: &Endpoints, account: &AccountRow, slug: &str) -> Result<EndpointView> {
    let now = endpoints.handles.now();
    endpoints.modify_as(account, slug, false, |tx, actor, row| {
        let asked = row
            .deploy_request
            .as_ref()
            .ok_or(Error::NotFound(Missing::DeployRequest))?
            .requested_by;
        if asked != actor.id {
            return Err(Error::RequesterOnly);
        }
        row.deploy_request = None;
        audit::record(
            tx,
            now,
            row.id,
            actor,
            "deploy.withdrawn",
            serde_json::json!({}),
        )?;
        notifications::resolve(tx, now, row.owner_id, REQUESTED, &row.slug, "withdrawn")
    })
}

/// What [`tell`] sends: the notification's kind and text, and the e-mail's subject.
struct Notice<'m> {
    kind: &'static str,
    message: &'m str,
    subject: &'m str,
}

/// Notifies an account and e-mails it the same message with a link to the dashboard page the
/// notification announces, inside `tx`.
fn tell(
    tx: &mut dyn WriteTx,
    now: Timestamp,
    public_url: &str,
    endpoint: &EndpointRow,
    account_id: u64,
    notice: &Notice,
) -> Result<()> {
    notifications::notify(
        tx,
        now,
        account_id,
        notice.kind,
        &endpoint.slug,
        notice.message.to_string(),
    )?;
    if let Some(account) = tx.account(account_id)? {
        mail::enqueue(
            tx,
            now,
            OutgoingMail {
                kind: notice.kind,
                to: account.email,
                subject: format!("{}: {}", notice.subject, endpoint.name),
                body: format!(
                    "{}\n\nEndpoint: {} ({})\n{public_url}{}\n",
                    notice.message,
                    endpoint.name,
                    endpoint.slug,
                    notifications::page(notice.kind, &endpoint.slug)
                ),
            },
        )?;
    }
    Ok(())
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
