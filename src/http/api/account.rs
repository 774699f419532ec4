//! Handlers for logging in, the caller's own account, tokens and notifications, accounts
//! administration, and invitation links.

use http::StatusCode;
use warp::reply::Response;

use super::manage::{body, caller, caller_session, cookie_request_from_this_origin, optional_body};
use crate::domain::accounts::{self, AccountView};
use crate::domain::collaborators::Acceptor;
use crate::domain::error::Error;
use crate::domain::notifications;
use crate::domain::password_reset;
use crate::domain::sessions::{self, COOKIE};
use crate::http::app::App;
use crate::http::error::Result;
use crate::http::reply::id_param;
use crate::http::reply::{self, cookie};
use crate::http::request::Request;
use crate::http::session::{open_session, set_cookie};
use crate::store::AccountRow;

/// `POST /api/v1/auth/login`: checks e-mail and password, sets the session cookie.
pub async fn login(app: &App, req: &mut Request) -> Result<Response> {
    let login = body(req).await?;
    let opened = sessions::login(
        &app.handles,
        app.logins.as_ref(),
        app.config.accounts.session_ttl,
        login,
        req.client,
    )
    .await?;
    Ok(with_session(
        app,
        &opened,
        StatusCode::OK,
        &session_body(&opened),
    ))
}

fn session_body(opened: &sessions::Opened) -> serde_json::Value {
    serde_json::json!({
        "account": AccountView::from(&opened.account),
        "expires_at": opened.expires_at.to_rfc3339(),
    })
}

/// A JSON response that also sets the session cookie of `opened`.
fn with_session(
    app: &App,
    opened: &sessions::Opened,
    status: StatusCode,
    value: &impl serde::Serialize,
) -> Response {
    let max_age = app.config.accounts.session_ttl.as_secs();
    let mut response = reply::json(status, value);
    set_cookie(app, &mut response, &opened.token, max_age);
    response
}

/// `POST /api/v1/auth/logout`: ends the session and clears the cookie.
pub fn logout(app: &App, req: &Request) -> Result<Response> {
    if let Some(token) = cookie(&req.headers, COOKIE) {
        cookie_request_from_this_origin(app, req)?;
        sessions::logout(&app.handles, token)?;
    }
    let mut response = reply::json(StatusCode::OK, &serde_json::json!({ "logged_out": true }));
    set_cookie(app, &mut response, "", 0);
    Ok(response)
}

/// `GET /api/v1/auth/session` and `GET /api/v1/manage/account`: who the caller is.
pub fn me(app: &App, req: &Request) -> Result<Response> {
    let account = caller(app, req)?;
    Ok(reply::json(StatusCode::OK, &AccountView::from(&account)))
}

/// `POST /api/v1/manage/account/password`: the account's other sessions end.
pub async fn change_password(app: &App, req: &mut Request) -> Result<Response> {
    let account = caller(app, req)?;
    let change = body(req).await?;
    sessions::change_password(
        &app.handles,
        app.logins.as_ref(),
        req.client,
        &account,
        change,
        caller_session(req),
    )
    .await?;
    Ok(reply::json(StatusCode::OK, &AccountView::from(&account)))
}

/// `GET /api/v1/manage/account/sessions`: the account's live sessions, the caller's marked.
pub fn sessions(app: &App, req: &Request) -> Result<Response> {
    let account = caller(app, req)?;
    let data = sessions::list(
        app.handles.store.as_ref(),
        app.handles.now(),
        &account,
        caller_session(req),
    )?;
    Ok(reply::json(
        StatusCode::OK,
        &serde_json::json!({ "data": data }),
    ))
}

/// `POST /api/v1/manage/account/sessions/sign-out-others`: `{"ended": n}`.
pub fn sign_out_others(app: &App, req: &Request) -> Result<Response> {
    let account = caller(app, req)?;
    let ended = sessions::sign_out_others(&app.handles, &account, caller_session(req))?;
    Ok(reply::json(
        StatusCode::OK,
        &serde_json::json!({ "ended": ended }),
    ))
}

/// `POST /api/v1/auth/password-reset`: 202 whether the address has an account or not.
pub async fn request_password_reset(app: &App, req: &mut Request) -> Result<Response> {
    let request = body(req).await?;
    password_reset::request(
        &app.handles,
        app.logins.as_ref(),
        req.client,
        request,
        &app.config.public_url(),
        app.mailer.smtp_configured(),
    )?;
    Ok(reply::json(
        StatusCode::ACCEPTED,
        &serde_json::json!({ "requested": true }),
    ))
}

/// `POST /api/v1/auth/password-reset/complete`: sets the password; every session ends.
pub async fn complete_password_reset(app: &App, req: &mut Request) -> Result<Response> {
    let completion = body(req).await?;
    let account = password_reset::complete(&app.handles, completion).await?;
    Ok(reply::json(StatusCode::OK, &AccountView::from(&account)))
}

/// `GET` and `POST /api/v1/manage/tokens`.
pub async fn tokens(app: &App, req: &mut Request) -> Result<Response> {
    let account = caller(app, req)?;
    if req.method == http::Method::POST {
        let new = body(req).await?;
        let created = accounts::create_token(&app.handles, &account, new)?;
        return Ok(reply::json(StatusCode::CREATED, &created));
    }
    let data = accounts::list_tokens(app.handles.store.as_ref(), app.handles.now(), &account)?;
    Ok(reply::json(
        StatusCode::OK,
        &serde_json::json!({ "data": data }),
    ))
}

/// `DELETE /api/v1/manage/tokens/{id}`.
pub fn revoke_token(app: &App, req: &Request, id: &str) -> Result<Response> {
    let account = caller(app, req)?;
    accounts::revoke_token(&app.handles, &account, id)?;
    Ok(reply::json(
        StatusCode::OK,
        &serde_json::json!({ "id": id, "revoked": true }),
    ))
}

/// `GET /api/v1/manage/accounts` (server owner).
pub fn list_accounts(app: &App, req: &Request) -> Result<Response> {
    let account = caller(app, req)?;
    let data = accounts::list_accounts(app.handles.store.as_ref(), &account)?;
    Ok(reply::json(
        StatusCode::OK,
        &serde_json::json!({ "data": data }),
    ))
}

/// Body of `PATCH /api/v1/manage/accounts/{id}`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct AccountPatch {
    suspended: bool,
}

/// `GET` and `PATCH /api/v1/manage/accounts/{id}` (server owner): suspend or reinstate.
pub async fn account_by_id(app: &App, req: &mut Request, id: &str) -> Result<Response> {
    let caller_account = caller(app, req)?;
    let id = id_param(id, crate::domain::error::Missing::Account)?;
    let view = if req.method == http::Method::PATCH {
        let patch: AccountPatch = body(req).await?;
        accounts::set_suspended(&app.handles, &caller_account, id, patch.suspended)?
    } else {
        accounts::list_accounts(app.handles.store.as_ref(), &caller_account)?
            .into_iter()
            .find(|a| a.id == id)
            .ok_or(Error::NotFound(crate::domain::error::Missing::Account))?
    };
    Ok(reply::json(StatusCode::OK, &view))
}

/// `GET /api/v1/manage/notifications[?unread=true]`.
pub fn notifications(app: &App, req: &Request) -> Result<Response> {
    let account = caller(app, req)?;
    let params = reply::query_params(&req.query);
    let unread_only = match params.get("unread").map(String::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => {
            return Err(Error::InvalidParameter {
                name: "unread",
                reason: "it must be true or false".into(),
            }
            .into());
        }
    };
    let data = notifications::list(app.handles.store.as_ref(), account.id, unread_only)?;
    Ok(reply::json(
        StatusCode::OK,
        &serde_json::json!({ "data": data }),
    ))
}

/// `POST /api/v1/manage/notifications/{id}/read`.
pub fn mark_read(app: &App, req: &Request, id: &str) -> Result<Response> {
    let account = caller(app, req)?;
    let id = id_param(id, crate::domain::error::Missing::Notification)?;
    let view = notifications::mark_read(&app.handles, account.id, id)?;
    Ok(reply::json(StatusCode::OK, &view))
}

/// `POST /api/v1/manage/notifications/read-all`: `{"marked": n}`.
pub fn mark_all_read(app: &App, req: &Request) -> Result<Response> {
    let account = caller(app, req)?;
    let marked = notifications::mark_all_read(&app.handles, account.id)?;
    Ok(reply::json(
        StatusCode::OK,
        &serde_json::json!({ "marked": marked }),
    ))
}

/// `GET /api/v1/invitations/{token}`: what the link offers (the token is the credential).
pub fn invitation(app: &App, token: &str) -> Result<Response> {
    let preview = app.collaborators().preview(token)?;
    Ok(reply::json(StatusCode::OK, &preview))
}

/// `POST /api/v1/invitations/{token}/accept`: as the logged-in account, or, without
/// credentials, creating the invited account with `{"password"}` and logging it in.
pub async fn accept_invitation(app: &App, req: &mut Request, token: &str) -> Result<Response> {
    let signed_in = match caller(app, req) {
        Ok(account) => Some(account),
        Err(Error::MissingToken) => None,
        Err(err) => return Err(err.into()),
    };
    let acceptor = match signed_in {
        Some(account) => Acceptor::Account(account),
        None => Acceptor::NewAccount(optional_body(req).await?),
    };
    let is_new = matches!(acceptor, Acceptor::NewAccount(_));
    let (account, endpoint) = app.collaborators().accept(token, acceptor).await?;
    let body = accepted_body(&account, &endpoint);
    if is_new {
        let opened = open_session(app, account)?;
        return Ok(with_session(app, &opened, StatusCode::OK, &body));
    }
    Ok(reply::json(StatusCode::OK, &body))
}

fn accepted_body(
    account: &AccountRow,
    endpoint: &crate::domain::endpoints::EndpointView,
) -> serde_json::Value {
    serde_json::json!({ "account": AccountView::from(account), "endpoint": endpoint })
}
