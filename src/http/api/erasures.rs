//! Handlers of erasures under `/api/v1/manage/endpoints/{slug}/erasures` (`domain::erasures`):
//! the owner's dry run or start, and an erasure's progress.

use http::StatusCode;
use warp::reply::Response;

use super::manage::{body, caller};
use crate::domain::erasures::{self, Started};
use crate::http::app::App;
use crate::http::error::Result;
use crate::http::reply;
use crate::http::request::Request;

/// `POST /api/v1/manage/endpoints/{slug}/erasures`: 200 with the count of a dry run, 202 with
/// the erasure that started.
pub async fn create(app: &App, req: &mut Request, slug: &str) -> Result<Response> {
    let owner = caller(app, req)?;
    let request = body(req).await?;
    let started = erasures::start(&app.endpoints, app.search.as_deref(), &owner, slug, request)?;
    Ok(match started {
        Started::DryRun(count) => reply::json(StatusCode::OK, &count),
        Started::Running(view) => reply::json(StatusCode::ACCEPTED, &view),
    })
}

/// `GET /api/v1/manage/endpoints/{slug}/erasures`: the endpoint's erasures, newest first.
pub fn list(app: &App, req: &Request, slug: &str) -> Result<Response> {
    let data = erasures::list(&app.endpoints, &caller(app, req)?, slug)?;
    Ok(reply::json(
        StatusCode::OK,
        &serde_json::json!({ "data": data }),
    ))
}

/// `GET /api/v1/manage/endpoints/{slug}/erasures/{id}`.
pub fn get(app: &App, req: &Request, slug: &str, id: &str) -> Result<Response> {
    let view = erasures::get(&app.endpoints, &caller(app, req)?, slug, id)?;
    Ok(reply::json(StatusCode::OK, &view))
}
