//! Handlers of the webhook signing secrets under
//! `/api/v1/manage/endpoints/{slug}/webhook-secrets/{environment}`: the owner and
//! collaborators view a secret, the owner reissues it (see `webhooks::secrets`).

use http::StatusCode;
use warp::reply::Response;

use super::cookie_reads::key_holder_caller;
use super::manage::caller;
use crate::domain::webhooks::secrets;
use crate::http::app::App;
use crate::http::error::Result;
use crate::http::reply;
use crate::http::request::Request;
use crate::store::Environment;

/// `GET .../webhook-secrets/{environment}`.
pub fn secret(app: &App, req: &Request, slug: &str, environment: Environment) -> Result<Response> {
    let account = key_holder_caller(app, req)?;
    let view = secrets::view(
        &app.endpoints,
        &app.handles,
        &app.endpoints.sealer,
        &account,
        slug,
        environment,
    )?;
    Ok(reply::json(StatusCode::OK, &view))
}

/// `POST .../webhook-secrets/{environment}/reissue`: takes no body.
pub fn reissue(app: &App, req: &Request, slug: &str, environment: Environment) -> Result<Response> {
    let owner = caller(app, req)?;
    let view = secrets::reissue(
        &app.endpoints,
        &app.handles,
        &app.endpoints.sealer,
        &owner,
        slug,
        environment,
    )?;
    Ok(reply::json(StatusCode::OK, &view))
}
