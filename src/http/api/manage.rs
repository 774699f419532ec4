//! Handlers of the management API under `/api/v1/manage`, authenticated with an account token
//! (`Authorization: Bearer itk_...`) or the dashboard's session cookie.

use http::{Method, StatusCode};
use warp::reply::Response;

use crate::core::clock::Timestamp;
use crate::domain::accounts;
use crate::domain::audit;
use crate::domain::deploy;
use crate::domain::endpoint_deletion;
use crate::domain::error::Result as ServiceResult;
use crate::domain::error::{Error, Missing};
use crate::domain::schema;
use crate::domain::sessions;
use crate::domain::usage;
use crate::http::api::cookie_reads::key_holder_caller;
use crate::http::app::App;
use crate::http::error::Result;
use crate::http::reply::{
    self, bearer, cookie, id_param, parse_json, query_params, read_body, require_json,
};
use crate::http::request::{MAX_MANAGE_BODY, Request};
use crate::store::{AccountRow, Environment, Partition, Store};
use crate::workers::request_log;

/// The account making a management call: from its bearer token, else its session cookie.
pub fn caller(app: &App, req: &Request) -> ServiceResult<AccountRow> {
    credential(app, req)?.account(app.handles.store.as_ref(), app.handles.now())
}

/// What a management call authenticates with: a personal API token, or the dashboard's
/// session cookie. Kept by a response that outlasts its request (a backup download), which
/// asks again whether it still names an active account.
pub enum Credential {
    Token(String),
    Session(String),
}

/// The call's credential; a session cookie only from this origin.
pub fn credential(app: &App, req: &Request) -> ServiceResult<Credential> {
    if let Some(token) = bearer(&req.headers) {
        return Ok(Credential::Token(token.to_string()));
    }
    if req.headers.contains_key(http::header::AUTHORIZATION) {
        return Err(Error::InvalidToken);
    }
    match caller_session(req) {
        Some(session) => {
            cookie_request_from_this_origin(app, req)?;
            Ok(Credential::Session(session.to_string()))
        }
        None => Err(Error::MissingToken),
    }
}

impl Credential {
    /// The account the credential names now (refused once it is revoked, expired, or its
    /// account suspended).
    pub fn account(&self, store: &dyn Store, now: Timestamp) -> ServiceResult<AccountRow> {
        match self {
            Credential::Token(token) => accounts::authenticate_token(store, now, token),
            Credential::Session(session) => sessions::authenticate(store, now, session),
        }
    }
}

/// The session cookie [`caller`] authenticates a call with: none when it has `Authorization`.
pub fn caller_session(req: &Request) -> Option<&str> {
    if req.headers.contains_key(http::header::AUTHORIZATION) {
        return None;
    }
    cookie(&req.headers, sessions::COOKIE)
}

/// The browser sends the session cookie by itself, also with a form or fetch another page
/// makes; SameSite=Strict keeps other sites out, but not a sibling subdomain (same site). So
/// a change the cookie authorises must come from this origin, checked as the dashboard's
/// forms are.
pub fn cookie_request_from_this_origin(app: &App, req: &Request) -> ServiceResult<()> {
    let safe = req.method == Method::GET || req.method == Method::HEAD;
    let public_url = app.config.public_url.as_deref();
    if safe || crate::http::session::same_origin(&req.headers, public_url) {
        Ok(())
    } else {
        Err(Error::CrossSiteRequest)
    }
}

/// A JSON request body.
pub async fn body<T: serde::de::DeserializeOwned>(req: &mut Request) -> Result<T> {
    require_json(&req.headers)?;
    let bytes = read_body(req, MAX_MANAGE_BODY).await?;
    Ok(parse_json(&bytes)?)
}

/// A JSON request body that may be left out entirely (no body: the default).
pub async fn optional_body<T: serde::de::DeserializeOwned + Default>(
    req: &mut Request,
) -> Result<T> {
    let bytes = read_body(req, MAX_MANAGE_BODY).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    require_json(&req.headers)?;
    Ok(parse_json(&bytes)?)
}

/// `GET` and `POST /api/v1/manage/endpoints`.
pub async fn endpoints(app: &App, req: &mut Request) -> Result<Response> {
    let account = key_holder_caller(app, req)?;
    if req.method == Method::POST {
        let new = body(req).await?;
        let created = app.endpoints.create(&account, new)?;
        return Ok(reply::json(StatusCode::CREATED, &created));
    }
    let data = app.endpoints.list(&account)?;
    Ok(reply::json(
        StatusCode::OK,
        &serde_json::json!({ "data": data }),
    ))
}

/// `GET`, `PATCH` and `DELETE /api/v1/manage/endpoints/{slug}`.
pub async fn endpoint(app: &App, req: &mut Request, slug: &str) -> Result<Response> {
    let account = key_holder_caller(app, req)?;
    if req.method == Method::DELETE {
        let deleted = endpoint_deletion::delete(&app.endpoints, &account, slug, None)?;
        return Ok(reply::json(StatusCode::OK, &deleted));
    }
    let view = if req.method == Method::PATCH {
        let patch = body(req).await?;
        app.endpoints.update(&account, slug, patch)?
    } else {
        app.endpoints.get(&account, slug)?
    };
    Ok(reply::json(StatusCode::OK, &view))
}

/// The deploy workflow: `POST .../deploy`, `.../deploy-request`, `.../deploy-request/approve`
/// and `.../deploy-request/reject`, and `DELETE .../deploy-request`.
pub async fn deploy_step(
    app: &App,
    req: &mut Request,
    slug: &str,
    step: DeployStep,
) -> Result<Response> {
    let account = caller(app, req)?;
    let (endpoints, public_url) = (&app.endpoints, &app.config.public_url());
    let (status, view) = match step {
        DeployStep::Deploy => (
            StatusCode::OK,
            deploy::deploy(endpoints, public_url, &account, slug)?,
        ),
        DeployStep::Request => {
            let note = optional_body(req).await?;
            (
                StatusCode::CREATED,
                deploy::request(endpoints, public_url, &account, slug, note)?,
            )
        }
        DeployStep::Approve => (
            StatusCode::OK,
            deploy::approve(endpoints, public_url, &account, slug)?,
        ),
        DeployStep::Reject => {
            let note = optional_body(req).await?;
            (
                StatusCode::OK,
                deploy::reject(endpoints, public_url, &account, slug, note)?,
            )
        }
        DeployStep::Withdraw => (StatusCode::OK, deploy::withdraw(endpoints, &account, slug)?),
    };
    Ok(reply::json(status, &view))
}

pub enum DeployStep {
    Deploy,
    Request,
    Approve,
    Reject,
    Withdraw,
}

/// `GET /api/v1/manage/endpoints/{slug}/requests?environment=&limit=&cursor=` and the filters
/// of `request_log::parse_filter`: the owner and collaborators see the endpoint's request log.
pub fn requests(app: &App, req: &Request, slug: &str) -> Result<Response> {
    let account = caller(app, req)?;
    let (endpoint, membership) = app.endpoints.member_row(&account, slug)?;
    let params = query_params(&req.query);
    let environment = match params.get("environment") {
        None => Environment::Sandbox,
        Some(text) => Environment::parse(text).ok_or_else(|| Error::InvalidParameter {
            name: "environment",
            reason: "it must be sandbox or production".into(),
        })?,
    };
    let limit = crate::core::cursor::limit_param(
        &params,
        request_log::LIST_LIMIT_DEFAULT,
        request_log::LIST_LIMIT_MAX,
    )?;
    let filter = request_log::parse_filter(&params)?;
    let page = app.request_log.list(
        app.handles.store.as_ref(),
        request_log::Naming::of(account.id, &membership),
        Partition::new(endpoint.id, environment),
        limit,
        params.get("cursor").map(String::as_str),
        &filter,
    )?;
    Ok(reply::json(StatusCode::OK, &page))
}

/// `GET` and `POST /api/v1/manage/endpoints/{slug}/invitations`.
pub async fn invitations(app: &App, req: &mut Request, slug: &str) -> Result<Response> {
    let owner = caller(app, req)?;
    if req.method == Method::POST {
        let new = body(req).await?;
        let created = app.collaborators().invite(&owner, slug, new)?;
        return Ok(reply::json(StatusCode::CREATED, &created));
    }
    let data = app.collaborators().list_invitations(&owner, slug)?;
    Ok(reply::json(
        StatusCode::OK,
        &serde_json::json!({ "data": data }),
    ))
}

/// `DELETE /api/v1/manage/endpoints/{slug}/invitations/{id}`.
pub fn revoke_invitation(app: &App, req: &Request, slug: &str, id: &str) -> Result<Response> {
    let owner = caller(app, req)?;
    let id = id_param(id, Missing::Invitation)?;
    let view = app.collaborators().revoke_invitation(&owner, slug, id)?;
    Ok(reply::json(StatusCode::OK, &view))
}

/// `GET /api/v1/manage/endpoints/{slug}/collaborators`.
pub fn collaborators(app: &App, req: &Request, slug: &str) -> Result<Response> {
    let owner = caller(app, req)?;
    let data = app.collaborators().list_collaborators(&owner, slug)?;
    Ok(reply::json(
        StatusCode::OK,
        &serde_json::json!({ "data": data }),
    ))
}

/// `PATCH` (permissions) and `DELETE` (remove)
/// `/api/v1/manage/endpoints/{slug}/collaborators/{account_id}`.
pub async fn collaborator(
    app: &App,
    req: &mut Request,
    slug: &str,
    account_id: &str,
) -> Result<Response> {
    let owner = caller(app, req)?;
    let account_id = id_param(account_id, Missing::Collaborator)?;
    if req.method == Method::DELETE {
        app.collaborators().remove(&owner, slug, account_id)?;
        return Ok(reply::json(
            StatusCode::OK,
            &serde_json::json!({ "account_id": account_id, "removed": true }),
        ));
    }
    let change = body(req).await?;
    let view = app
        .collaborators()
        .set_permissions(&owner, slug, account_id, change)?;
    Ok(reply::json(StatusCode::OK, &view))
}

/// `GET /api/v1/manage/endpoints/{slug}/audit?limit=&before=`: also of a deleted endpoint.
pub fn audit_log(app: &App, req: &Request, slug: &str) -> Result<Response> {
    let owner = caller(app, req)?;
    let endpoint = app.endpoints.audited_row(&owner, slug)?;
    let params = query_params(&req.query);
    let limit = crate::core::cursor::limit_param(&params, 50, 200)?;
    let before = match params.get("before") {
        None => None,
        Some(text) => Some(text.parse().map_err(|_| Error::InvalidParameter {
            name: "before",
            reason: "it must be an audit entry id".into(),
        })?),
    };
    let data = audit::list(app.handles.store.as_ref(), endpoint.id, limit, before)?;
    Ok(reply::json(
        StatusCode::OK,
        &serde_json::json!({ "data": data }),
    ))
}

/// `POST /api/v1/manage/endpoints/{slug}/schema/check`: a schema tried on the newest stored
/// records, before the owner saves it.
pub async fn check_schema(app: &App, req: &mut Request, slug: &str) -> Result<Response> {
    let owner = caller(app, req)?;
    let check = body(req).await?;
    let endpoint = app.endpoints.owned_row(&owner, slug)?;
    let report = schema::check_stored(app.handles.store.as_ref(), &endpoint, check)?;
    Ok(reply::json(StatusCode::OK, &report))
}

/// `GET /api/v1/manage/endpoints/{slug}/usage`.
pub fn usage(app: &App, req: &Request, slug: &str) -> Result<Response> {
    let owner = caller(app, req)?;
    let endpoint = app.endpoints.owned_row(&owner, slug)?;
    let months = app.usage.months(endpoint.id)?;
    let quota = usage::monthly_quota(&endpoint, &app.config.usage);
    Ok(reply::json(
        StatusCode::OK,
        &serde_json::json!({ "monthly_quota": quota, "months": months }),
    ))
}
