//! Collaborators: invitations by e-mail, accepting them, collaboration keys and their
//! permissions, and removing a collaborator.
//!
//! An invitation is a single-use link (`{public_url}/invitations/{token}`) that expires after
//! `[accounts] invitation_ttl`; the store keeps the token's SHA-256 for lookup and the token
//! sealed, so the owner can still see the link when no e-mail could be sent. Accepting it
//! creates the collaborator's own pair of keys (`tm_test_` usable at once, `tm_live_` once the
//! endpoint is deployed) carrying the invitation's permissions. Removing a collaborator
//! deletes those keys in the same commit, so they stop working at once.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::core::clock::Timestamp;
use crate::core::crypto::{key_id, secret_hash};
use crate::core::ids::random_base32;
use crate::domain::accounts::{self, NewPassword, normalize_email};
use crate::domain::audit;
use crate::domain::endpoints::{EndpointView, Endpoints, Membership, NewKeys};
use crate::domain::error::{Error, GoneReason, Missing, Result};
use crate::domain::mail::{self, OutgoingMail};
use crate::domain::notifications;
use crate::store::{
    AccountRow, CollaboratorRow, EndpointRow, IdKind, InvitationRow, InvitationStatus, Permission,
    ReadTx, WriteTx,
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

/// The collaborator service: the endpoints service it reads and changes endpoints through,
/// and where invitation links point and how long they work.
pub struct Collaborators<'a> {
    endpoints: &'a Endpoints,
    /// The server's public URL: the base of invitation links and of the API in their e-mail.
    public_url: String,
    /// `[accounts] invitation_ttl`.
    invitation_ttl: Duration,
}

/// Who joins an endpoint, once a new account's password is hashed.
enum Joiner {
    Account(AccountRow),
    NewAccount(Option<NewPassword>),
}

impl<'a> Collaborators<'a> {
    pub fn new(
        endpoints: &'a Endpoints,
        public_url: String,
        invitation_ttl: Duration,
    ) -> Collaborators<'a> {
        Collaborators {
            endpoints,
            public_url,
            invitation_ttl,
        }
    }

    /// Invites `new.email` to the endpoint and queues the e-mail, in one commit.
    pub fn invite(
        &self,
        owner: &AccountRow,
        slug: &str,
        new: NewInvitation,
    ) -> Result<InvitationView> {
        let endpoint = self.endpoints.owned_row(owner, slug)?;
        let email = normalize_email(&new.email)?;
        let permissions = valid_permissions(new.permissions)?;
        if email == owner.email {
            return Err(Error::Conflict(
                "You own this endpoint; invite someone else.".into(),
            ));
        }
        let handles = &self.endpoints.handles;
        let now = handles.now();
        let token = format!("{INVITATION_PREFIX}{}", random_base32(32));
        let token_sealed = self.endpoints.sealer.seal(token.as_bytes());
        let expires_at = now.plus(self.invitation_ttl);
        let mail = OutgoingMail {
            kind: "invitation",
            to: email.clone(),
            subject: format!(
                "{} invited you to the endpoint \"{}\"",
                owner.email, endpoint.name
            ),
            body: self.invitation_body(owner, &endpoint, &permissions, &token, expires_at),
        };
        let row = handles.write(|tx| {
            if let Some(account) = tx.account_by_email(&email)?
                && tx.collaborator(endpoint.id, account.id)?.is_some()
            {
                return Err(Error::Conflict(format!(
                    "{email} already collaborates on this endpoint."
                )));
            }
            // Oldest first: the one a changed `invitation_ttl` may have left pending longest.
            if let Some(other) =
                tx.invitations(endpoint.id)?.into_iter().rev().find(|other| {
                    other.email == email && status(other, now) == "pending"
                })
            {
                return Err(Error::Conflict(format!(
                    "{email} already has a pending invitation (id {}); revoke it to send a new one.",
                    other.id
                )));
            }
            let mail_id = mail::enqueue(tx, now, mail.clone())?;
            let row = InvitationRow {
                id: tx.next_id(IdKind::Invitation)?,
                endpoint_id: endpoint.id,
                email: email.clone(),
                permissions: permissions.clone(),
                status: InvitationStatus::Pending,
                invited_by: owner.id,
                created_at: now,
                expires_at,
                token_sealed: token_sealed.clone(),
                mail_id,
                accepted_by: None,
                decided_at: None,
            };
            tx.insert_invitation(&row, &secret_hash(&token))?;
            audit::record(
                tx,
                now,
                endpoint.id,
                owner,
                "invitation.sent",
                serde_json::json!({ "invitation_id": row.id, "email": row.email, "permissions": row.permissions }),
            )?;
            Ok(row)
        })?;
        log::info!("invitation {} queued as mail {}", row.id, row.mail_id);
        self.invitation_view(row, now)
    }

    fn invitation_body(
        &self,
        owner: &AccountRow,
        endpoint: &EndpointRow,
        permissions: &[Permission],
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
            base = self.public_url,
            accept_url = self.accept_url(token),
            permissions = permissions.join(", "),
            expires = expires_at.to_rfc3339(),
        )
    }

    fn accept_url(&self, token: &str) -> String {
        format!("{}/invitations/{token}", self.public_url)
    }

    fn invitation_view(&self, row: InvitationRow, now: Timestamp) -> Result<InvitationView> {
        let status = status(&row, now);
        let accept_url = if status == "pending" {
            Some(self.accept_url(&self.endpoints.open_key(&row.token_sealed)?))
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
    pub fn list_invitations(&self, owner: &AccountRow, slug: &str) -> Result<Vec<InvitationView>> {
        let endpoint = self.endpoints.owned_row(owner, slug)?;
        let handles = &self.endpoints.handles;
        let now = handles.now();
        handles
            .store
            .read()?
            .invitations(endpoint.id)?
            .into_iter()
            .map(|row| self.invitation_view(row, now))
            .collect()
    }

    /// Revokes a pending invitation: its link stops working.
    pub fn revoke_invitation(
        &self,
        owner: &AccountRow,
        slug: &str,
        id: u64,
    ) -> Result<InvitationView> {
        let endpoint = self.endpoints.owned_row(owner, slug)?;
        let handles = &self.endpoints.handles;
        let now = handles.now();
        let row = handles.write(|tx| {
            let mut row = tx
                .invitation(id)?
                .filter(|row| row.endpoint_id == endpoint.id)
                .ok_or(Error::NotFound(Missing::Invitation))?;
            if row.status == InvitationStatus::Accepted {
                return Err(Error::Conflict(
                    "This invitation was accepted; remove the collaborator instead.".into(),
                ));
            }
            if row.status == InvitationStatus::Pending {
                row.status = InvitationStatus::Revoked;
                row.decided_at = Some(now);
                tx.put_invitation(&row)?;
                audit::record(
                    tx,
                    now,
                    endpoint.id,
                    owner,
                    "invitation.revoked",
                    serde_json::json!({ "invitation_id": id, "email": row.email }),
                )?;
            }
            Ok(row)
        })?;
        self.invitation_view(row, now)
    }

    /// What an invitation link shows (no authentication: the token is the credential).
    pub fn preview(&self, token: &str) -> Result<InvitationPreview> {
        let snapshot = self.endpoints.handles.store.read()?;
        let row = pending_invitation(&*snapshot, token, self.endpoints.handles.now())?;
        let endpoint = snapshot
            .endpoint(row.endpoint_id)?
            .ok_or(Error::NotFound(Missing::Invitation))?;
        let invited_by = snapshot
            .account(row.invited_by)?
            .map_or_else(String::new, |a| a.email);
        let account_exists = snapshot.account_by_email(&row.email)?.is_some();
        Ok(InvitationPreview {
            endpoint_name: endpoint.name,
            email: row.email,
            permissions: row.permissions,
            invited_by,
            expires_at: row.expires_at.to_rfc3339(),
            account_exists,
        })
    }

    /// Accepts an invitation: as the logged-in account (its e-mail must be the invited one),
    /// or by creating the invited account with a password. Creates the collaboration keys.
    pub async fn accept(
        &self,
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
                let handles = &self.endpoints.handles;
                pending_invitation(&*handles.store.read()?, token, handles.now())?;
                Joiner::NewAccount(Some(NewPassword::hash(password).await?))
            }
        };
        self.join(token, &joiner)
    }

    /// [`Collaborators::accept`] in one commit, the password already hashed.
    fn join(&self, token: &str, joiner: &Joiner) -> Result<(AccountRow, EndpointView)> {
        let handles = &self.endpoints.handles;
        let now = handles.now();
        let keys = NewKeys::generate(&self.endpoints.sealer);
        let (account, endpoint, collaborator) = handles.write(|tx| {
            let mut invitation = pending_invitation(&*tx, token, now)?;
            let account = match joiner {
                Joiner::Account(account) if account.email == invitation.email => account.clone(),
                Joiner::Account(_) => return Err(Error::InvitationForOtherAccount),
                Joiner::NewAccount(None) => {
                    return Err(if tx.account_by_email(&invitation.email)?.is_some() {
                        Error::LoginRequired
                    } else {
                        Error::InvalidRequest(
                            "Send {\"password\": \"...\"} to create your account, or log in first."
                                .into(),
                        )
                    });
                }
                Joiner::NewAccount(Some(password)) => {
                    accounts::create_member(tx, &invitation.email, password, now)?
                }
            };
            let endpoint = tx
                .endpoint(invitation.endpoint_id)?
                .ok_or(Error::NotFound(Missing::Invitation))?;
            if endpoint.owner_id == account.id {
                return Err(Error::Conflict("You own this endpoint.".into()));
            }
            if tx.collaborator(endpoint.id, account.id)?.is_some() {
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
                sandbox_key_sealed: keys.sandbox.sealed.clone(),
                production_key_sealed: keys.production.sealed.clone(),
                previous_keys: Vec::new(),
            };
            tx.put_collaborator(&collaborator)?;
            keys.insert(tx, endpoint.id, now, Some(account.id))?;
            invitation.status = InvitationStatus::Accepted;
            invitation.accepted_by = Some(account.id);
            invitation.decided_at = Some(now);
            tx.put_invitation(&invitation)?;
            audit::record(
                tx,
                now,
                endpoint.id,
                &account,
                "invitation.accepted",
                serde_json::json!({ "invitation_id": invitation.id, "permissions": invitation.permissions }),
            )?;
            notifications::notify(
                tx,
                now,
                endpoint.owner_id,
                "invitation_accepted",
                &endpoint.slug,
                format!(
                    "{} accepted your invitation to \"{}\".",
                    account.email, endpoint.name
                ),
            )?;
            Ok((account, endpoint, collaborator))
        })?;
        let view = self
            .endpoints
            .view(endpoint, &Membership::Collaborator(collaborator))?;
        Ok((account, view))
    }

    /// The endpoint's collaborators, in the order they joined.
    pub fn list_collaborators(
        &self,
        owner: &AccountRow,
        slug: &str,
    ) -> Result<Vec<CollaboratorView>> {
        let endpoint = self.endpoints.owned_row(owner, slug)?;
        let snapshot = self.endpoints.handles.store.read()?;
        let mut out = snapshot
            .collaborators(endpoint.id)?
            .into_iter()
            .map(|row| {
                let account = snapshot.account(row.account_id)?;
                self.collaborator_view(row, account.as_ref())
            })
            .collect::<Result<Vec<_>>>()?;
        out.sort_by(|a, b| a.added_at.cmp(&b.added_at));
        Ok(out)
    }

    fn collaborator_view(
        &self,
        row: CollaboratorRow,
        account: Option<&AccountRow>,
    ) -> Result<CollaboratorView> {
        let id_of = |sealed: &[u8]| -> Result<String> {
            Ok(key_id(&secret_hash(&self.endpoints.open_key(sealed)?)))
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
        &self,
        owner: &AccountRow,
        slug: &str,
        account_id: u64,
        change: PermissionsChange,
    ) -> Result<CollaboratorView> {
        let endpoint = self.endpoints.owned_row(owner, slug)?;
        let permissions = valid_permissions(change.permissions)?;
        let handles = &self.endpoints.handles;
        let now = handles.now();
        let row = handles.write(|tx| {
            let mut row = collaborator_in(&*tx, endpoint.id, account_id)?;
            let before = std::mem::replace(&mut row.permissions, permissions.clone());
            tx.put_collaborator(&row)?;
            audit::record(
                tx,
                now,
                endpoint.id,
                owner,
                "collaborator.permissions_changed",
                serde_json::json!({ "account_id": account_id, "from": before, "to": row.permissions }),
            )?;
            Ok(row)
        })?;
        let account = handles.store.read()?.account(account_id)?;
        self.collaborator_view(row, account.as_ref())
    }

    /// Removes a collaborator and deletes their collaboration keys in the same commit.
    pub fn remove(&self, owner: &AccountRow, slug: &str, account_id: u64) -> Result<()> {
        let endpoint = self.endpoints.owned_row(owner, slug)?;
        let handles = &self.endpoints.handles;
        let now = handles.now();
        handles.write(|tx| {
            let row = collaborator_in(&*tx, endpoint.id, account_id)?;
            tx.delete_collaborator(endpoint.id, account_id)?;
            self.delete_keys(tx, &row)?;
            audit::record(
                tx,
                now,
                endpoint.id,
                owner,
                "collaborator.removed",
                serde_json::json!({ "account_id": account_id }),
            )
        })
    }

    /// Deletes the collaborator's keys, those still in a rotation's grace period too.
    fn delete_keys(&self, tx: &mut dyn WriteTx, row: &CollaboratorRow) -> Result<()> {
        let previous = row.previous_keys.iter().map(|p| &p.key_sealed);
        for sealed in [&row.sandbox_key_sealed, &row.production_key_sealed]
            .into_iter()
            .chain(previous)
        {
            tx.delete_api_key(&secret_hash(&self.endpoints.open_key(sealed)?))?;
        }
        Ok(())
    }
}

fn status(row: &InvitationRow, now: Timestamp) -> &'static str {
    match row.status {
        InvitationStatus::Pending if row.expires_at <= now => "expired",
        InvitationStatus::Pending => "pending",
        InvitationStatus::Accepted => "accepted",
        InvitationStatus::Revoked => "revoked",
    }
}

/// Finds the pending invitation of a link token, or says why it no longer works.
fn pending_invitation<R: ReadTx + ?Sized>(
    tx: &R,
    token: &str,
    now: Timestamp,
) -> Result<InvitationRow> {
    if !token.starts_with(INVITATION_PREFIX) {
        return Err(Error::NotFound(Missing::Invitation));
    }
    let row = tx
        .invitation_by_token(&secret_hash(token))?
        .ok_or(Error::NotFound(Missing::Invitation))?;
    match status(&row, now) {
        "pending" => Ok(row),
        "accepted" => Err(Error::InvitationGone(GoneReason::Accepted)),
        "revoked" => Err(Error::InvitationGone(GoneReason::Revoked)),
        _ => Err(Error::InvitationGone(GoneReason::Expired)),
    }
}

fn collaborator_in<R: ReadTx + ?Sized>(
    tx: &R,
    endpoint_id: u64,
    account_id: u64,
) -> Result<CollaboratorRow> {
    tx.collaborator(endpoint_id, account_id)?
        .ok_or(Error::NotFound(Missing::Collaborator))
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
