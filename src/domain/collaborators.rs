//! Collaborators: invitations by e-mail, accepting them, collaboration keys and their
//! permissions, and removing a collaborator.
//!
//! An invitation is a single-use link (`{public_url}/invitations/{token}`) that expires after
//! `[accounts] invitation_ttl`; the store keeps the token's SHA-256 for lookup and the token
//! sealed, so the owner can still see the link when no e-mail could be sent. Accepting it
//! creates the collaborator's own pair of keys (`tm_test_` usable at once, `tm_live_` once the
//! endpoint is deployed) carrying the invitation's permissions. Removing a collaborator
//! deletes those keys in the same commit, so they stop working at once.

use redb::{ReadableTable, WriteTransaction};
use serde::{Deserialize, Serialize};

use crate::core::clock::Timestamp;
use crate::core::crypto::{key_id, secret_hash};
use crate::core::ids::{new_api_key, random_base32};
use crate::domain::accounts::{self, NewPassword, normalize_email};
use crate::domain::audit;
use crate::domain::endpoints::{EndpointView, Membership, insert_key};
use crate::domain::error::{Error, GoneReason, Missing, Result};
use crate::domain::mail::{self, OutgoingMail};
use crate::domain::notifications;
use crate::http::app::App;
use crate::store::RedbWrite;
use crate::store::{
    ACCOUNT_EMAILS, API_KEYS, AccountRow, COLLABORATORS, CollaboratorRow, ENDPOINTS, EndpointRow,
    Environment, INVITATION_TOKENS, INVITATIONS, InvitationRow, InvitationStatus, Permission,
    from_json, next_id, to_json,
};

const INVITATION_PREFIX: &str = "inv_";

/// Body of `POST /api/v1/manage/endpoints/{slug}/invitations`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewInvitation {
    pub email: String,
    pub permissions: Vec<Permission>,
}

/// Body of `PATCH /api/v1/manage/endpoints/{slug}/collaborators/{account_id}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PermissionsChange {
    pub permissions: Vec<Permission>,
}

/// Body of `POST /api/v1/invitations/{token}/accept` when the invitee has no account yet.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Acceptance {
    pub password: Option<String>,
}

/// An invitation as its endpoint's owner sees it.
#[derive(Debug, Serialize)]
pub struct InvitationView {
    pub id: u64,
    pub email: String,
    pub permissions: Vec<Permission>,
    /// `pending`, `accepted`, `revoked` or `expired`.
    pub status: &'static str,
    pub created_at: String,
    pub expires_at: String,
    /// The link the invitee opens; shown to the owner while the invitation is pending, so an
    /// invitation can be passed on by hand when e-mail is not set up.
    pub accept_url: Option<String>,
    /// The outbox message carrying it (`GET /api/v1/manage/mail/{id}` shows its status).
    pub mail_id: u64,
}

/// What the invitation link shows before it is accepted.
#[derive(Debug, Serialize)]
pub struct InvitationPreview {
    pub endpoint_name: String,
    pub email: String,
    pub permissions: Vec<Permission>,
    pub invited_by: String,
    pub expires_at: String,
    /// Whether an account with the invited address exists (log in first) or not (choose a
    /// password).
    pub account_exists: bool,
}

/// A collaborator as the endpoint's owner sees it.
#[derive(Debug, Serialize)]
pub struct CollaboratorView {
    pub account_id: u64,
    pub email: String,
    pub suspended: bool,
    pub permissions: Vec<Permission>,
    pub added_at: String,
    /// Ids of the collaboration keys, as the request log shows them.
    pub sandbox_key_id: String,
    pub production_key_id: String,
}

/// Who accepts: a logged-in account, or a new account created with this password.
pub enum Acceptor {
    Account(AccountRow),
    NewAccount(Acceptance),
}

/// Invites `new.email` to the endpoint and queues the e-mail, in one commit.
pub fn invite(
    app: &App,
    owner: &AccountRow,
    slug: &str,
    new: NewInvitation,
) -> Result<InvitationView> {
    let endpoint = app.endpoints.owned_row(owner, slug)?;
    let email = normalize_email(&new.email)?;
    let permissions = valid_permissions(new.permissions)?;
    if email == owner.email {
        return Err(Error::Conflict(
            "You own this endpoint; invite someone else.".into(),
        ));
    }
    let now = app.clock.now();
    let token = format!("{INVITATION_PREFIX}{}", random_base32(32));
    let accept_url = accept_url(app, &token);

    let txn = app.store.write()?;
    let row = {
        if let Some(account_id) = txn.open_table(ACCOUNT_EMAILS)?.get(email.as_str())?
            && txn
                .open_table(COLLABORATORS)?
                .get((endpoint.id, account_id.value()))?
                .is_some()
        {
            return Err(Error::Conflict(format!(
                "{email} already collaborates on this endpoint."
            )));
        }
        for entry in txn.open_table(INVITATIONS)?.iter()? {
            let (_, value) = entry?;
            let other: InvitationRow = from_json(value.value())?;
            if other.endpoint_id == endpoint.id
                && other.email == email
                && status(&other, now) == "pending"
            {
                return Err(Error::Conflict(format!(
                    "{email} already has a pending invitation (id {}); revoke it to send a new one.",
                    other.id
                )));
            }
        }
        let expires_at = now.plus(app.config.accounts.invitation_ttl);
        let mail_id = mail::enqueue(
            &mut RedbWrite::over(&txn),
            now,
            OutgoingMail {
                kind: "invitation",
                to: email.clone(),
                subject: format!(
                    "{} invited you to the endpoint \"{}\"",
                    owner.email, endpoint.name
                ),
                body: invitation_body(
                    app,
                    owner,
                    &endpoint,
                    &permissions,
                    &accept_url,
                    &token,
                    expires_at,
                ),
            },
        )?;
        let row = InvitationRow {
            id: next_id(&txn, "next_invitation_id")?,
            endpoint_id: endpoint.id,
            email,
            permissions,
            status: InvitationStatus::Pending,
            invited_by: owner.id,
            created_at: now,
            expires_at,
            token_sealed: app.endpoints.sealer.seal(token.as_bytes()),
            mail_id,
            accepted_by: None,
            decided_at: None,
        };
        txn.open_table(INVITATIONS)?
            .insert(row.id, to_json(&row)?.as_slice())?;
        txn.open_table(INVITATION_TOKENS)?
            .insert(&secret_hash(&token), row.id)?;
        audit::record(
            &mut RedbWrite::over(&txn),
            now,
            endpoint.id,
            owner,
            "invitation.sent",
            serde_json::json!({ "invitation_id": row.id, "email": row.email, "permissions": row.permissions }),
        )?;
        row
    };
    txn.commit()?;
    log::info!("invitation {} queued as mail {}", row.id, row.mail_id);
    invitation_view(app, row, now)
}

fn invitation_body(
    app: &App,
    owner: &AccountRow,
    endpoint: &EndpointRow,
    permissions: &[Permission],
    accept_url: &str,
    token: &str,
    expires_at: Timestamp,
) -> String {
    let permissions: Vec<&str> = permissions.iter().map(|p| p.as_str()).collect();
    format!(
        "{owner} invited you to collaborate on the endpoint \"{name}\" on {base}.\n\n\
         Your collaboration key will allow: {permissions}.\n\n\
         Accept the invitation (log in first if you already have an account):\n{accept_url}\n\n\
         Or accept with the API:\n\
         curl -X POST {base}/api/v1/invitations/{token}/accept \\\n  \
         -H 'Content-Type: application/json' -d '{{\"password\": \"choose-a-password\"}}'\n\n\
         The invitation expires at {expires}. If you did not expect it, ignore this e-mail.\n",
        owner = owner.email,
        name = endpoint.name,
        base = app.config.public_url(),
        permissions = permissions.join(", "),
        expires = expires_at.to_rfc3339(),
    )
}

fn accept_url(app: &App, token: &str) -> String {
    format!("{}/invitations/{token}", app.config.public_url())
}

fn status(row: &InvitationRow, now: Timestamp) -> &'static str {
    match row.status {
        InvitationStatus::Pending if row.expires_at <= now => "expired",
        InvitationStatus::Pending => "pending",
        InvitationStatus::Accepted => "accepted",
        InvitationStatus::Revoked => "revoked",
    }
}

fn invitation_view(app: &App, row: InvitationRow, now: Timestamp) -> Result<InvitationView> {
    let status = status(&row, now);
    let accept_url = if status == "pending" {
        Some(accept_url(app, &app.endpoints.open_key(&row.token_sealed)?))
    } else {
        None
    };
    Ok(InvitationView {
        id: row.id,
        email: row.email,
        permissions: row.permissions,
        status,
        created_at: row.created_at.to_rfc3339(),
        expires_at: row.expires_at.to_rfc3339(),
        accept_url,
        mail_id: row.mail_id,
    })
}

/// The endpoint's invitations, newest first.
pub fn list_invitations(app: &App, owner: &AccountRow, slug: &str) -> Result<Vec<InvitationView>> {
    let endpoint = app.endpoints.owned_row(owner, slug)?;
    let now = app.clock.now();
    let txn = app.store.read()?;
    let mut out = Vec::new();
    for entry in txn.open_table(INVITATIONS)?.iter()?.rev() {
        let (_, value) = entry?;
        let row: InvitationRow = from_json(value.value())?;
        if row.endpoint_id == endpoint.id {
            out.push(invitation_view(app, row, now)?);
        }
    }
    Ok(out)
}

/// Revokes a pending invitation: its link stops working.
pub fn revoke_invitation(
    app: &App,
    owner: &AccountRow,
    slug: &str,
    id: u64,
) -> Result<InvitationView> {
    let endpoint = app.endpoints.owned_row(owner, slug)?;
    let now = app.clock.now();
    let txn = app.store.write()?;
    let row = {
        let mut invitations = txn.open_table(INVITATIONS)?;
        let mut row: InvitationRow = match invitations.get(id)? {
            Some(v) => from_json(v.value())?,
            None => return Err(Error::NotFound(Missing::Invitation)),
        };
        if row.endpoint_id != endpoint.id {
            return Err(Error::NotFound(Missing::Invitation));
        }
        if row.status == InvitationStatus::Accepted {
            return Err(Error::Conflict(
                "This invitation was accepted; remove the collaborator instead.".into(),
            ));
        }
        if row.status == InvitationStatus::Pending {
            row.status = InvitationStatus::Revoked;
            row.decided_at = Some(now);
            invitations.insert(id, to_json(&row)?.as_slice())?;
            audit::record(
                &mut RedbWrite::over(&txn),
                now,
                endpoint.id,
                owner,
                "invitation.revoked",
                serde_json::json!({ "invitation_id": id, "email": row.email }),
            )?;
        }
        row
    };
    txn.commit()?;
    invitation_view(app, row, now)
}

/// Finds the pending invitation of a link token, or says why it no longer works.
fn pending_invitation(
    invitations: &impl ReadableTable<u64, &'static [u8]>,
    tokens: &impl ReadableTable<&'static [u8; 32], u64>,
    token: &str,
    now: Timestamp,
) -> Result<InvitationRow> {
    if !token.starts_with(INVITATION_PREFIX) {
        return Err(Error::NotFound(Missing::Invitation));
    }
    let id = tokens
        .get(&secret_hash(token))?
        .map(|v| v.value())
        .ok_or(Error::NotFound(Missing::Invitation))?;
    let row: InvitationRow = match invitations.get(id)? {
        Some(v) => from_json(v.value())?,
        None => return Err(Error::NotFound(Missing::Invitation)),
    };
    match status(&row, now) {
        "pending" => Ok(row),
        "accepted" => Err(Error::InvitationGone(GoneReason::Accepted)),
        "revoked" => Err(Error::InvitationGone(GoneReason::Revoked)),
        _ => Err(Error::InvitationGone(GoneReason::Expired)),
    }
}

/// What an invitation link shows (no authentication: the token is the credential).
pub fn preview(app: &App, token: &str) -> Result<InvitationPreview> {
    let txn = app.store.read()?;
    let row = pending_invitation(
        &txn.open_table(INVITATIONS)?,
        &txn.open_table(INVITATION_TOKENS)?,
        token,
        app.clock.now(),
    )?;
    let endpoint: EndpointRow = match txn.open_table(ENDPOINTS)?.get(row.endpoint_id)? {
        Some(v) => from_json(v.value())?,
        None => return Err(Error::NotFound(Missing::Invitation)),
    };
    let invited_by = crate::store::Store::read(app.store.as_ref())?
        .account(row.invited_by)?
        .map_or_else(String::new, |a| a.email);
    let account_exists = txn
        .open_table(ACCOUNT_EMAILS)?
        .get(row.email.as_str())?
        .is_some();
    Ok(InvitationPreview {
        endpoint_name: endpoint.name,
        email: row.email,
        permissions: row.permissions,
        invited_by,
        expires_at: row.expires_at.to_rfc3339(),
        account_exists,
    })
}

/// Who joins an endpoint, once a new account's password is hashed.
enum Joiner {
    Account(AccountRow),
    NewAccount(Option<NewPassword>),
}

/// Accepts an invitation: as the logged-in account (its e-mail must be the invited one), or
/// by creating the invited account with a password. Creates the collaboration keys.
pub async fn accept(
    app: &App,
    token: &str,
    acceptor: Acceptor,
) -> Result<(AccountRow, EndpointView)> {
    let joiner = match acceptor {
        Acceptor::Account(account) => Joiner::Account(account),
        Acceptor::NewAccount(Acceptance { password: None }) => Joiner::NewAccount(None),
        Acceptor::NewAccount(Acceptance {
            password: Some(password),
        }) => {
            // A made-up, used or expired link costs no argon2 work.
            let txn = app.store.read()?;
            pending_invitation(
                &txn.open_table(INVITATIONS)?,
                &txn.open_table(INVITATION_TOKENS)?,
                token,
                app.clock.now(),
            )?;
            drop(txn);
            Joiner::NewAccount(Some(NewPassword::hash(password).await?))
        }
    };
    join(app, token, joiner)
}

/// [`accept`] in one commit, the password already hashed.
fn join(app: &App, token: &str, joiner: Joiner) -> Result<(AccountRow, EndpointView)> {
    let now = app.clock.now();
    let sandbox_key = new_api_key(Environment::Sandbox.key_prefix());
    let production_key = new_api_key(Environment::Production.key_prefix());
    let txn = app.store.write()?;
    let (account, endpoint, collaborator) = {
        let mut invitation = pending_invitation(
            &txn.open_table(INVITATIONS)?,
            &txn.open_table(INVITATION_TOKENS)?,
            token,
            now,
        )?;
        let account = match joiner {
            Joiner::Account(account) if account.email == invitation.email => account,
            Joiner::Account(_) => return Err(Error::InvitationForOtherAccount),
            Joiner::NewAccount(None) => {
                return Err(
                    if txn
                        .open_table(ACCOUNT_EMAILS)?
                        .get(invitation.email.as_str())?
                        .is_some()
                    {
                        Error::LoginRequired
                    } else {
                        Error::InvalidRequest(
                            "Send {\"password\": \"...\"} to create your account, or log in first."
                                .into(),
                        )
                    },
                );
            }
            Joiner::NewAccount(Some(password)) => accounts::create_member(
                &mut RedbWrite::over(&txn),
                &invitation.email,
                &password,
                now,
            )?,
        };
        let endpoint: EndpointRow = match txn.open_table(ENDPOINTS)?.get(invitation.endpoint_id)? {
            Some(v) => from_json(v.value())?,
            None => return Err(Error::NotFound(Missing::Invitation)),
        };
        if endpoint.owner_id == account.id {
            return Err(Error::Conflict("You own this endpoint.".into()));
        }
        let mut collaborators = txn.open_table(COLLABORATORS)?;
        if collaborators.get((endpoint.id, account.id))?.is_some() {
            return Err(Error::Conflict(
                "You already collaborate on this endpoint.".into(),
            ));
        }
        let collaborator = CollaboratorRow {
            endpoint_id: endpoint.id,
            account_id: account.id,
            permissions: invitation.permissions.clone(),
            invitation_id: invitation.id,
            added_at: now,
            sandbox_key_sealed: app.endpoints.sealer.seal(sandbox_key.as_bytes()),
            production_key_sealed: app.endpoints.sealer.seal(production_key.as_bytes()),
        };
        collaborators.insert(
            (endpoint.id, account.id),
            to_json(&collaborator)?.as_slice(),
        )?;
        insert_key(
            &txn,
            &sandbox_key,
            endpoint.id,
            Environment::Sandbox,
            now,
            Some(account.id),
        )?;
        insert_key(
            &txn,
            &production_key,
            endpoint.id,
            Environment::Production,
            now,
            Some(account.id),
        )?;
        invitation.status = InvitationStatus::Accepted;
        invitation.accepted_by = Some(account.id);
        invitation.decided_at = Some(now);
        txn.open_table(INVITATIONS)?
            .insert(invitation.id, to_json(&invitation)?.as_slice())?;
        audit::record(
            &mut RedbWrite::over(&txn),
            now,
            endpoint.id,
            &account,
            "invitation.accepted",
            serde_json::json!({ "invitation_id": invitation.id, "permissions": invitation.permissions }),
        )?;
        notifications::notify(
            &mut RedbWrite::over(&txn),
            now,
            endpoint.owner_id,
            "invitation_accepted",
            &endpoint.slug,
            format!(
                "{} accepted your invitation to \"{}\".",
                account.email, endpoint.name
            ),
        )?;
        (account, endpoint, collaborator)
    };
    txn.commit()?;
    app.endpoints.invalidate_access();
    let view = app
        .endpoints
        .view(endpoint, &Membership::Collaborator(collaborator))?;
    Ok((account, view))
}

/// The endpoint's collaborators, in the order they joined.
pub fn list_collaborators(
    app: &App,
    owner: &AccountRow,
    slug: &str,
) -> Result<Vec<CollaboratorView>> {
    let endpoint = app.endpoints.owned_row(owner, slug)?;
    let txn = app.store.read()?;
    let accounts = crate::store::Store::read(app.store.as_ref())?;
    let mut out = Vec::new();
    for entry in txn
        .open_table(COLLABORATORS)?
        .range((endpoint.id, 0)..=(endpoint.id, u64::MAX))?
    {
        let (_, value) = entry?;
        let row: CollaboratorRow = from_json(value.value())?;
        let account = accounts.account(row.account_id)?;
        out.push(collaborator_view(app, row, account.as_ref())?);
    }
    out.sort_by(|a, b| a.added_at.cmp(&b.added_at));
    Ok(out)
}

fn collaborator_view(
    app: &App,
    row: CollaboratorRow,
    account: Option<&AccountRow>,
) -> Result<CollaboratorView> {
    let id_of = |sealed: &[u8]| -> Result<String> {
        Ok(key_id(&secret_hash(&app.endpoints.open_key(sealed)?)))
    };
    Ok(CollaboratorView {
        account_id: row.account_id,
        email: account.map_or_else(String::new, |a| a.email.clone()),
        suspended: account.is_some_and(|a| a.suspended),
        sandbox_key_id: id_of(&row.sandbox_key_sealed)?,
        production_key_id: id_of(&row.production_key_sealed)?,
        permissions: row.permissions,
        added_at: row.added_at.to_rfc3339(),
    })
}

/// Replaces a collaborator's permissions; their keys follow at once.
pub fn set_permissions(
    app: &App,
    owner: &AccountRow,
    slug: &str,
    account_id: u64,
    change: PermissionsChange,
) -> Result<CollaboratorView> {
    let endpoint = app.endpoints.owned_row(owner, slug)?;
    let permissions = valid_permissions(change.permissions)?;
    let now = app.clock.now();
    let txn = app.store.write()?;
    let row = {
        let mut collaborators = txn.open_table(COLLABORATORS)?;
        let mut row = collaborator_in(&collaborators, endpoint.id, account_id)?;
        let before = std::mem::replace(&mut row.permissions, permissions);
        collaborators.insert((endpoint.id, account_id), to_json(&row)?.as_slice())?;
        audit::record(
            &mut RedbWrite::over(&txn),
            now,
            endpoint.id,
            owner,
            "collaborator.permissions_changed",
            serde_json::json!({ "account_id": account_id, "from": before, "to": row.permissions }),
        )?;
        row
    };
    txn.commit()?;
    app.endpoints.invalidate_access();
    let account = crate::store::Store::read(app.store.as_ref())?.account(account_id)?;
    collaborator_view(app, row, account.as_ref())
}

/// Removes a collaborator and deletes their collaboration keys in the same commit.
pub fn remove(app: &App, owner: &AccountRow, slug: &str, account_id: u64) -> Result<()> {
    let endpoint = app.endpoints.owned_row(owner, slug)?;
    let now = app.clock.now();
    let txn = app.store.write()?;
    {
        let mut collaborators = txn.open_table(COLLABORATORS)?;
        let row = collaborator_in(&collaborators, endpoint.id, account_id)?;
        collaborators.remove((endpoint.id, account_id))?;
        delete_keys(app, &txn, &row)?;
        audit::record(
            &mut RedbWrite::over(&txn),
            now,
            endpoint.id,
            owner,
            "collaborator.removed",
            serde_json::json!({ "account_id": account_id }),
        )?;
    }
    txn.commit()?;
    app.endpoints.invalidate_access();
    Ok(())
}

fn collaborator_in(
    collaborators: &impl ReadableTable<(u64, u64), &'static [u8]>,
    endpoint_id: u64,
    account_id: u64,
) -> Result<CollaboratorRow> {
    match collaborators.get((endpoint_id, account_id))? {
        Some(v) => Ok(from_json(v.value())?),
        None => Err(Error::NotFound(Missing::Collaborator)),
    }
}

fn delete_keys(app: &App, txn: &WriteTransaction, row: &CollaboratorRow) -> Result<()> {
    let mut keys = txn.open_table(API_KEYS)?;
    for sealed in [&row.sandbox_key_sealed, &row.production_key_sealed] {
        keys.remove(&secret_hash(&app.endpoints.open_key(sealed)?))?;
    }
    Ok(())
}

/// Permissions sorted and without repeats.
fn valid_permissions(mut permissions: Vec<Permission>) -> Result<Vec<Permission>> {
    permissions.sort();
    permissions.dedup();
    if permissions.is_empty() {
        return Err(Error::InvalidRequest(
            "`permissions` must list at least one of create, read, replace, delete.".into(),
        ));
    }
    Ok(permissions)
}
