//! Handlers of API key rotation and revocation (see `domain::api_keys`):
//! `POST /api/v1/manage/endpoints/{slug}/keys/{environment}/rotate` and `…/revoke-previous` for
//! the caller's own keys, and the same under `…/collaborators/{account_id}/keys/{environment}/`
//! for a collaborator's.

use http::StatusCode;
use warp::reply::Response;

use super::manage::{caller, optional_body};
use crate::domain::api_keys::{self, Holder};
use crate::domain::error::Missing;
use crate::http::app::App;
use crate::http::error::Result;
use crate::http::reply::{self, id_param};
use crate::http::request::Request;
use crate::store::Environment;

/// Whose keys: the caller's own, or the collaborator `account_id`'s.
fn holder(account_id: Option<&str>) -> Result<Holder> {
    Ok(match account_id {
        None => Holder::Own,
        Some(id) => Holder::Collaborator(id_param(id, Missing::Collaborator)?),
    })
}

/// `POST …/keys/{environment}/rotate` with `{"grace_period_seconds": N}` (optional).
pub async fn rotate(
    app: &App,
    req: &mut Request,
    slug: &str,
    account_id: Option<&str>,
    environment: Environment,
) -> Result<Response> {
    let account = caller(app, req)?;
    let holder = holder(account_id)?;
    let rotation = optional_body(req).await?;
    let rotated = api_keys::rotate(
        &app.endpoints,
        &account,
        slug,
        holder,
        environment,
        rotation,
    )?;
    Ok(reply::json(StatusCode::OK, &rotated))
}

/// `POST …/keys/{environment}/revoke-previous`: takes no body.
pub fn revoke_previous(
    app: &App,
    req: &Request,
    slug: &str,
    account_id: Option<&str>,
    environment: Environment,
) -> Result<Response> {
    let account = caller(app, req)?;
    let state = api_keys::revoke_previous(
        &app.endpoints,
        &account,
        slug,
        holder(account_id)?,
        environment,
    )?;
    Ok(reply::json(StatusCode::OK, &state))
}
