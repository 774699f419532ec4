//! The Collaborators tab (endpoint owner): invite by e-mail with the collaboration key's
//! permissions, pending invitations with their link, the collaborators with their keys (see
//! `keys`), a Permissions editor, and removal.

use askama::Template;

use super::endpoints::EndpointHead;
use super::form::Form;
use super::keys::KeyPanel;
use super::page::{Failure, Layout, Outcome, redirect, render};
use super::visitor::{signed_in, user_form};
use crate::domain::api_keys::Holder;
use crate::domain::collaborators::{
    CollaboratorView, InvitationView, NewInvitation, PermissionsChange,
};
use crate::domain::error::Missing;
use crate::http::app::App;
use crate::http::reply::{id_param, query_params};
use crate::http::request::Request;
use crate::store::{Environment, Permission};

/// One checkbox of a Permissions editor.
struct PermissionBox {
    name: &'static str,
    checked: bool,
}

/// The four checkboxes, ticked for `permissions`.
fn boxes(permissions: &[Permission]) -> Vec<PermissionBox> {
    Permission::ALL
        .into_iter()
        .map(|p| PermissionBox {
            name: p.as_str(),
            checked: permissions.contains(&p),
        })
        .collect()
}

#[derive(Template)]
#[template(path = "dashboard/collaborators.html")]
struct CollaboratorsPage {
    layout: Layout,
    head: EndpointHead,
    invitations: Vec<InvitationView>,
    /// Each collaborator with the checkboxes of their permissions and their two keys.
    collaborators: Vec<(CollaboratorView, Vec<PermissionBox>, Vec<KeyPanel>)>,
    smtp_configured: bool,
    /// The invite form's checkboxes: create and read ticked.
    invite_boxes: Vec<PermissionBox>,
}

/// `GET /dashboard/endpoints/{slug}/collaborators`.
pub fn page(app: &App, req: &Request, slug: &str) -> Outcome {
    let user = signed_in(app, req)?;
    let head = EndpointHead::load(app, &user, slug, "collaborators")?;
    let mut invitations = app.collaborators().list_invitations(&user.account, slug)?;
    invitations.retain(|i| i.status == "pending");
    let smtp_configured = app.mailer.smtp_configured();
    let mut layout = user.layout(
        app,
        format!("{} · Collaborators", head.ep.name),
        "endpoints",
        req,
    );
    if let Some(flash) = invited_flash(req, &invitations, smtp_configured) {
        layout.flash = Some(flash.into());
    }
    let page = CollaboratorsPage {
        layout,
        invitations,
        collaborators: app
            .collaborators()
            .list_collaborators(&user.account, slug)?
            .into_iter()
            .map(|c| {
                let boxes = boxes(&c.permissions);
                let keys = [Environment::Sandbox, Environment::Production]
                    .into_iter()
                    .map(|environment| {
                        let label = format!("{} key of {}", environment.as_str(), c.email);
                        let holder = Holder::Collaborator(c.account_id);
                        KeyPanel::load(app, req, &user, slug, holder, environment, label)
                    })
                    .collect::<Result<Vec<_>, Failure>>()?;
                Ok((c, boxes, keys))
            })
            .collect::<Result<Vec<_>, Failure>>()?,
        smtp_configured,
        invite_boxes: boxes(&[Permission::Create, Permission::Read]),
        head,
    };
    render(&page)
}

/// The flash after an invitation was created: whom it was e-mailed to, or that no e-mail was
/// sent and why. The address is the pending invitation's that the redirect names by id, never
/// text from the link; `None` (the plain flash) once that invitation is no longer pending.
fn invited_flash(
    req: &Request,
    invitations: &[InvitationView],
    smtp_configured: bool,
) -> Option<String> {
    let params = query_params(&req.query);
    if params.get("done").map(String::as_str) != Some("invited") {
        return None;
    }
    let id: u64 = params.get("invitation")?.parse().ok()?;
    let invitation = invitations.iter().find(|i| i.id == id)?;
    Some(if smtp_configured {
        format!("Invitation created and e-mailed to {}.", invitation.email)
    } else {
        format!(
            "Invitation created for {} (no e-mail sent: the server has no [smtp] section; copy \
             the link below and pass it on).",
            invitation.email
        )
    })
}

/// The permissions ticked in a form.
fn ticked(form: &Form) -> Vec<Permission> {
    Permission::ALL
        .into_iter()
        .filter(|p| form.all("permission").any(|v| v == p.as_str()))
        .collect()
}

fn back(slug: &str, done: &str) -> Outcome {
    Ok(redirect(&format!(
        "/dashboard/endpoints/{slug}/collaborators?done={done}"
    )))
}

/// `POST …/invitations`: invite an e-mail address.
pub async fn invite(app: &App, req: &mut Request, slug: &str) -> Outcome {
    let user = signed_in(app, req)?;
    let form = user_form(app, req, &user).await?;
    let new = NewInvitation {
        email: form.text("email").to_string(),
        permissions: ticked(&form),
    };
    let invitation = app.collaborators().invite(&user.account, slug, new)?;
    Ok(redirect(&format!(
        "/dashboard/endpoints/{slug}/collaborators?done=invited&invitation={}",
        invitation.id
    )))
}

/// `POST …/invitations/{id}/revoke`.
pub async fn revoke(app: &App, req: &mut Request, slug: &str, id: &str) -> Outcome {
    let user = signed_in(app, req)?;
    user_form(app, req, &user).await?;
    let id = id_param(id, Missing::Invitation)?;
    app.collaborators()
        .revoke_invitation(&user.account, slug, id)?;
    back(slug, "revoked")
}

/// `POST …/collaborators/{account_id}/permissions`: the Permissions editor.
pub async fn set_permissions(app: &App, req: &mut Request, slug: &str, id: &str) -> Outcome {
    let user = signed_in(app, req)?;
    let form = user_form(app, req, &user).await?;
    let id = id_param(id, Missing::Collaborator)?;
    let change = PermissionsChange {
        permissions: ticked(&form),
    };
    app.collaborators()
        .set_permissions(&user.account, slug, id, change)?;
    back(slug, "permissions")
}

/// `POST …/collaborators/{account_id}/remove`.
pub async fn remove(app: &App, req: &mut Request, slug: &str, id: &str) -> Outcome {
    let user = signed_in(app, req)?;
    user_form(app, req, &user).await?;
    let id = id_param(id, Missing::Collaborator)?;
    app.collaborators().remove(&user.account, slug, id)?;
    back(slug, "removed")
}
