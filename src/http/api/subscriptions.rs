//! Handlers of the owner's webhook subscriptions under
//! `/api/v1/manage/endpoints/{slug}/webhooks/{environment}`: the owner webhook, the
//! subscriptions, their test events and recoveries.

use http::{Method, StatusCode};
use warp::reply::Response;

use super::manage::{body, caller};
use crate::domain::error::{Error, Missing, Result as ServiceResult};
use crate::domain::webhooks::recovery;
use crate::domain::webhooks::subscriptions::{self, PendingDeliveries, Which};
use crate::http::app::App;
use crate::http::error::Result;
use crate::http::reply::{self};
use crate::http::request::Request;
use crate::store::{AccountRow, Environment};

/// The calling account and the environment the path names, as every handler here starts
/// (the account first: a call that is not signed in is refused before its path is read).
fn caller_in(
    app: &App,
    req: &Request,
    environment: &str,
) -> ServiceResult<(AccountRow, Environment)> {
    let account = caller(app, req)?;
    Ok((account, subscriptions::environment_param(environment)?))
}

/// The subscription the path's `id` names.
fn named_subscription(id: &str) -> ServiceResult<Which> {
    subscriptions::subscription_param(id).map(Which::Id)
}

/// `GET`, `PUT`, `PATCH` and `DELETE /api/v1/manage/endpoints/{slug}/webhooks/{environment}`
/// (endpoint owner): the first subscription, the spec's owner webhook.
pub async fn owner_webhook(
    app: &App,
    req: &mut Request,
    slug: &str,
    environment: &str,
) -> Result<Response> {
    if req.method == Method::PUT {
        let (account, environment) = caller_in(app, req, environment)?;
        let config = body(req).await?;
        let view = app
            .subscriptions()
            .put_first(&account, slug, environment, config)
            .await?;
        return Ok(reply::json(StatusCode::OK, &view));
    }
    one_subscription(app, req, slug, environment, None).await
}

/// `GET` (list) and `POST` (create) `…/webhooks/{environment}/subscriptions` (endpoint owner).
pub async fn subscriptions(
    app: &App,
    req: &mut Request,
    slug: &str,
    environment: &str,
) -> Result<Response> {
    let (account, environment) = caller_in(app, req, environment)?;
    let service = app.subscriptions();
    match req.method {
        Method::POST => {
            let view = service
                .create(&account, slug, environment, body(req).await?)
                .await?;
            Ok(reply::json(StatusCode::CREATED, &view))
        }
        _ => Ok(reply::json(
            StatusCode::OK,
            &service.list(&account, slug, environment)?,
        )),
    }
}

/// `GET`, `PATCH` and `DELETE …/webhooks/{environment}/subscriptions/{id}` (endpoint owner).
pub async fn subscription(
    app: &App,
    req: &mut Request,
    slug: &str,
    environment: &str,
    id: &str,
) -> Result<Response> {
    one_subscription(app, req, slug, environment, Some(id)).await
}

/// `GET`, `PATCH` and `DELETE` of one subscription: the one `id` names, or the first.
async fn one_subscription(
    app: &App,
    req: &mut Request,
    slug: &str,
    environment: &str,
    id: Option<&str>,
) -> Result<Response> {
    let (account, environment) = caller_in(app, req, environment)?;
    let which = id
        .map(named_subscription)
        .transpose()?
        .unwrap_or(Which::First);
    let service = app.subscriptions();
    let view = match req.method {
        Method::PATCH => {
            service
                .update(&account, slug, environment, which, body(req).await?)
                .await?
        }
        Method::DELETE => {
            let params = reply::query_params(&req.query);
            let pending = PendingDeliveries::param(params.get("pending").map(String::as_str))?;
            let cancelled = service.delete(&account, slug, environment, which, pending)?;
            let mut removed = serde_json::json!({
                "environment": environment,
                "removed": true,
                "pending": pending.as_str(),
                "cancelled": cancelled,
            });
            if let Which::Id(number) = which {
                removed["id"] = subscriptions::subscription_id(number).into();
            }
            return Ok(reply::json(StatusCode::OK, &removed));
        }
        _ => service.get(&account, slug, environment, which)?,
    };
    Ok(reply::json(StatusCode::OK, &view))
}

/// `POST …/subscriptions/{id}/test` (endpoint owner): sends a signed `webhook.test` event
/// now and answers 200 with what the receiver said (also when it refused or was unreachable).
pub async fn test_event(
    app: &App,
    req: &mut Request,
    slug: &str,
    environment: &str,
    id: &str,
) -> Result<Response> {
    let (account, environment) = caller_in(app, req, environment)?;
    let which = named_subscription(id)?;
    let result = app
        .send_test_event(&account, slug, environment, which)
        .await?;
    Ok(reply::json(StatusCode::OK, &result))
}

/// `POST …/subscriptions/{id}/recover` (`subscription` given) and `GET`/`POST
/// …/webhooks/{environment}/caller-recovery` (endpoint owner): start a recovery (202), or see
/// the caller webhooks' latest.
pub async fn recover(
    app: &App,
    req: &mut Request,
    slug: &str,
    environment: &str,
    subscription: Option<&str>,
) -> Result<Response> {
    let (account, environment) = caller_in(app, req, environment)?;
    let which = subscription.map(named_subscription).transpose()?;
    let service = app.subscriptions();
    if req.method == Method::GET {
        let view = recovery::caller_recovery(&service, &account, slug, environment)?
            .ok_or(Error::NotFound(Missing::Recovery))?;
        return Ok(reply::json(StatusCode::OK, &view));
    }
    let request = body(req).await?;
    let view = recovery::start(&service, &account, slug, environment, which, request)?;
    Ok(reply::json(StatusCode::ACCEPTED, &view))
}
