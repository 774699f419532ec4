//! Handlers of the delivery log under `/api/v1/manage/endpoints/{slug}/deliveries`: each
//! delivery as the caller may see it, and the owner's redelivery and retry.

use http::StatusCode;
use warp::reply::Response;

use super::manage::caller;
use crate::domain::error::Missing;
use crate::domain::records::parse_record_id;
use crate::domain::webhooks::log::{self, DeliveryViewer};
use crate::domain::webhooks::subscriptions;
use crate::http::app::App;
use crate::http::error::Result;
use crate::http::reply::id_param;
use crate::http::reply::{self, query_params};
use crate::http::request::Request;
use crate::store::Environment;

/// `GET /api/v1/manage/endpoints/{slug}/deliveries?environment=&record_id=&subscription=&state=&kind=&url=&limit=&cursor=`:
/// each delivery as the caller may see it.
pub fn deliveries(app: &App, req: &Request, slug: &str) -> Result<Response> {
    let viewer = DeliveryViewer::member(&app.endpoints, &caller(app, req)?, slug)?;
    let params = query_params(&req.query);
    let environment = params
        .get("environment")
        .map(|text| subscriptions::environment_param(text))
        .transpose()?
        .unwrap_or(Environment::Sandbox);
    let record = params
        .get("record_id")
        .map(|text| parse_record_id(text))
        .transpose()?;
    let limit =
        crate::core::cursor::limit_param(&params, log::LIST_LIMIT_DEFAULT, log::LIST_LIMIT_MAX)?;
    let subscription = params
        .get("subscription")
        .map(|text| subscriptions::subscription_param(text))
        .transpose()?;
    let filter = log::DeliveryFilter {
        record,
        subscription,
        ..log::DeliveryFilter::from_params(&params)?
    };
    let page = log::list(
        app.handles.store.as_ref(),
        &viewer,
        environment,
        &filter,
        limit,
        params.get("cursor").map(String::as_str),
    )?;
    Ok(reply::json(StatusCode::OK, &page))
}

/// `GET /api/v1/manage/endpoints/{slug}/deliveries/{id}`: with its body and every attempt, as
/// the caller may see them.
pub fn delivery(app: &App, req: &Request, slug: &str, id: &str) -> Result<Response> {
    let viewer = DeliveryViewer::member(&app.endpoints, &caller(app, req)?, slug)?;
    let id = id_param(id, Missing::Delivery)?;
    Ok(reply::json(
        StatusCode::OK,
        &log::detail(app.handles.store.as_ref(), &viewer, id)?,
    ))
}

/// `POST /api/v1/manage/endpoints/{slug}/deliveries/{id}/redeliver` (endpoint owner).
pub fn redeliver(app: &App, req: &Request, slug: &str, id: &str) -> Result<Response> {
    let owner = DeliveryViewer::owner(&app.endpoints, &caller(app, req)?, slug)?;
    let id = id_param(id, Missing::Delivery)?;
    let view = log::redeliver(&app.handles, &owner, id)?;
    Ok(reply::json(StatusCode::OK, &view))
}

/// `POST /api/v1/manage/endpoints/{slug}/deliveries/{id}/retry` (endpoint owner): the next
/// attempt of a pending delivery, now.
pub fn retry(app: &App, req: &Request, slug: &str, id: &str) -> Result<Response> {
    let account = caller(app, req)?;
    let owner = DeliveryViewer::owner(&app.endpoints, &account, slug)?;
    let id = id_param(id, Missing::Delivery)?;
    let view = log::retry_now(&app.handles, &owner, &account, id)?;
    Ok(reply::json(StatusCode::OK, &view))
}
