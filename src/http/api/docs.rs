//! Handlers of the OpenAPI documents (built by `crate::http::openapi`): the whole API at
//! `GET /api/v1/openapi.json` (public), and one endpoint's data API with its slug, required
//! fields and code samples filled in at `GET /api/v1/data/{slug}/openapi.json`.
//!
//! Who may read an endpoint's document: whoever can use or see the endpoint. That is a key
//! of the endpoint that a data call would accept (either environment, any permission: a key
//! holder must know the required fields to call at all), or the account token or session
//! cookie of its owner or a collaborator. Reading it is not a data call: it is neither
//! counted against the monthly quota nor written to the request log.

use http::StatusCode;
use warp::reply::Response;

use super::manage::caller;
use crate::domain::error::Error;
use crate::http::app::App;
use crate::http::error::Result;
use crate::http::openapi;
use crate::http::reply::{self, bearer};
use crate::http::request::Request;
use crate::store::{EndpointRow, Environment};

/// `GET /api/v1/openapi.json`.
pub fn document(app: &App) -> Response {
    reply::json(StatusCode::OK, &openapi::document(&app.config.public_url()))
}

/// `GET /api/v1/data/{slug}/openapi.json`.
pub fn endpoint_document(app: &App, req: &Request, slug: &str) -> Result<Response> {
    let endpoint = readable_endpoint(app, req, slug)?;
    Ok(reply::json(
        StatusCode::OK,
        &openapi::endpoint_document(
            &app.config.public_url(),
            &openapi::EndpointInfo::of(&endpoint),
        ),
    ))
}

/// The endpoint, if the caller's API key, token or session may read its document.
fn readable_endpoint(app: &App, req: &Request, slug: &str) -> Result<EndpointRow> {
    let is_api_key = bearer(&req.headers).is_some_and(|k| {
        k.starts_with(Environment::Sandbox.key_prefix())
            || k.starts_with(Environment::Production.key_prefix())
    });
    if is_api_key {
        let access = app
            .endpoints
            .authorize_any_data_key(bearer(&req.headers), slug)?;
        return Ok(access.endpoint.as_ref().clone());
    }
    // Under the data path, a call with no credentials at all is missing an API key.
    let account = caller(app, req).map_err(|err| match err {
        Error::MissingToken => Error::MissingApiKey,
        other => other,
    })?;
    Ok(app.endpoints.member_row(&account, slug)?.0)
}
