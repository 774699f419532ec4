//! Handlers of the outbox under `/api/v1/manage/mail`: what was sent, what failed and why,
//! and the test e-mail. Authenticated with an account token like the rest of `manage`.

use http::StatusCode;
use serde::Deserialize;
use warp::reply::Response;

use super::manage::{caller, optional_body};
use crate::core::cursor;
use crate::domain::accounts;
use crate::domain::error::Error;
use crate::domain::mail;
use crate::http::app::App;
use crate::http::error::Result;
use crate::http::reply::{self, query_params};
use crate::http::request::Request;
use crate::store::AccountRow;

/// The outbox is the server's: only its owner account sees it.
fn owner(app: &App, req: &Request) -> Result<AccountRow> {
    let account = caller(app, req)?;
    accounts::require_server_owner(&account)?;
    Ok(account)
}

/// `GET /api/v1/manage/mail?limit=&cursor=`.
pub fn list(app: &App, req: &Request) -> Result<Response> {
    owner(app, req)?;
    let params = query_params(&req.query);
    let limit = cursor::limit_param(&params, mail::LIST_LIMIT_DEFAULT, mail::LIST_LIMIT_MAX)?;
    let page = mail::list(
        app.handles.store.as_ref(),
        limit,
        params.get("cursor").map(String::as_str),
        app.mailer.smtp_configured(),
    )?;
    Ok(reply::json(StatusCode::OK, &page))
}

/// `GET /api/v1/manage/mail/{id}`.
pub fn get(app: &App, req: &Request, id: &str) -> Result<Response> {
    owner(app, req)?;
    let id = id.parse::<u64>().map_err(|_| Error::InvalidParameter {
        name: "id",
        reason: "it must be the numeric id of an e-mail".into(),
    })?;
    Ok(reply::json(
        StatusCode::OK,
        &mail::get(app.handles.store.as_ref(), id)?,
    ))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TestRequest {
    to: Option<String>,
}

/// `POST /api/v1/manage/mail/test` with `{"to"?}` or no body: queues a test e-mail to `to`,
/// by default to the calling account, and answers 202 at once; the outbox shows the outcome.
pub async fn test(app: &App, req: &mut Request) -> Result<Response> {
    let account = owner(app, req)?;
    let request: TestRequest = optional_body(req).await?;
    let to = request.to.unwrap_or(account.email);
    let id = mail::queue(&app.handles, mail::test_mail(&to, &app.config.public_url()))?;
    Ok(reply::json(
        StatusCode::ACCEPTED,
        &serde_json::json!({"id": id, "status": "queued"}),
    ))
}
