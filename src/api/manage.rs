//! Handlers of the management API under `/api/v1/manage`, authenticated with an account token.

use http::{Method, StatusCode};
use warp::reply::Response;

use super::reply::{self, bearer, parse_json, query_params, read_body, require_json};
use super::{MAX_MANAGE_BODY, Request};
use crate::accounts;
use crate::app::App;
use crate::error::{Error, Result};
use crate::request_log;
use crate::storage::{AccountRow, Environment, partition};

pub(super) fn account(app: &App, req: &Request) -> Result<AccountRow> {
    accounts::authenticate_token(&app.store, bearer(&req.headers))
}

pub(super) async fn body<T: serde::de::DeserializeOwned>(req: &mut Request) -> Result<T> {
    require_json(&req.headers)?;
    let bytes = read_body(&req.headers, &mut req.body, MAX_MANAGE_BODY).await?;
    parse_json(&bytes)
}

/// `GET` and `POST /api/v1/manage/endpoints`.
pub async fn endpoints(app: &App, req: &mut Request) -> Result<Response> {
    let owner = account(app, req)?;
    if req.method == Method::POST {
        let new = body(req).await?;
        let created = app.endpoints.create(app.clock.as_ref(), &owner, new)?;
        return Ok(reply::json(StatusCode::CREATED, &created));
    }
    let data = app.endpoints.list(&owner)?;
    Ok(reply::json(
        StatusCode::OK,
        &serde_json::json!({ "data": data }),
    ))
}

/// `GET` and `PATCH /api/v1/manage/endpoints/{slug}`.
pub async fn endpoint(app: &App, req: &mut Request, slug: &str) -> Result<Response> {
    let owner = account(app, req)?;
    let view = if req.method == Method::PATCH {
        let patch = body(req).await?;
        app.endpoints.update(&owner, slug, patch)?
    } else {
        app.endpoints.get(&owner, slug)?
    };
    Ok(reply::json(StatusCode::OK, &view))
}

/// `POST /api/v1/manage/endpoints/{slug}/deploy`.
pub fn deploy(app: &App, req: &Request, slug: &str) -> Result<Response> {
    let owner = account(app, req)?;
    let view = app.endpoints.deploy(app.clock.as_ref(), &owner, slug)?;
    Ok(reply::json(StatusCode::OK, &view))
}

/// `GET /api/v1/manage/endpoints/{slug}/requests?environment=&limit=&cursor=`.
pub fn requests(app: &App, req: &Request, slug: &str) -> Result<Response> {
    let owner = account(app, req)?;
    let endpoint = app.endpoints.owned_row(&owner, slug)?;
    let params = query_params(&req.query);
    let environment = match params.get("environment") {
        None => Environment::Sandbox,
        Some(text) => Environment::parse(text).ok_or_else(|| Error::InvalidParameter {
            name: "environment",
            reason: "it must be sandbox or production".into(),
        })?,
    };
    let limit = crate::cursor::limit_param(
        &params,
        request_log::LIST_LIMIT_DEFAULT,
        request_log::LIST_LIMIT_MAX,
    )?;
    let page = app.request_log.list(
        partition(endpoint.id, environment),
        limit,
        params.get("cursor").map(String::as_str),
    )?;
    Ok(reply::json(StatusCode::OK, &page))
}
