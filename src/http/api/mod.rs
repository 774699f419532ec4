//! The HTTP API: one warp filter turns every request into a [`Request`], the router names its
//! route, and a thin handler parses it, calls a service and maps the result.
//!
//! Routing is done here rather than with nested warp filters so that 404 vs 405 is exact, the
//! check order of a data call is fixed and documented (docs/src/errors.md), and every log
//! line can name its path template.

pub(crate) mod account;
mod backups;
mod data;
mod docs;
pub mod error;
mod hooks;
mod mail;
pub(crate) mod manage;
mod ops;
pub mod reply;
pub mod routes;
mod webhooks;

use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use bytes::{Buf, Bytes};
use futures_util::{Stream, TryStreamExt};
use http::{HeaderMap, Method, StatusCode};
use warp::Filter;
use warp::reply::Response;

use crate::core::clock::Timestamp;
use crate::core::ids::new_request_id;
use crate::domain::error::Result;
use crate::http::app::App;
use crate::http::forwarded;
use crate::store::{Environment, RequestLogRow};
use routes::Route;

pub type BodyStream = Pin<Box<dyn Stream<Item = std::result::Result<Bytes, warp::Error>> + Send>>;

/// Limit of POST and PUT bodies on data routes: 100 KB as the spec says.
pub const MAX_DATA_BODY: usize = 102_400;
/// Limit of management request bodies.
pub const MAX_MANAGE_BODY: usize = 65_536;

/// The address of the connection's peer, put on each request by the server.
#[derive(Clone, Copy, Debug)]
pub struct PeerAddr(pub IpAddr);

/// One HTTP request, as the handlers see it.
pub struct Request {
    /// The client's address, when the request came through the server's listener: the peer,
    /// or the address a trusted proxy forwarded (`forwarded::client_address`). Everything that
    /// needs the client's address reads it here.
    pub client: Option<IpAddr>,
    pub method: Method,
    pub path: String,
    pub query: String,
    pub headers: HeaderMap,
    pub body: BodyStream,
    /// When the request arrived: the record's created_at for a create.
    pub received_at: Timestamp,
    /// By when the whole body must have arrived (`[http] body_timeout`).
    pub body_deadline: tokio::time::Instant,
    pub request_id: String,
}

/// Where a data call is logged: filled in by the data handler once it knows the endpoint.
#[derive(Default)]
pub struct CallLog {
    pub partition: Option<u64>,
    pub environment: Option<Environment>,
    pub key_id: Option<String>,
}

/// The whole API as one warp filter.
pub fn filter(
    app: Arc<App>,
) -> impl Filter<Extract = (Response,), Error = warp::Rejection> + Clone + Send + Sync + 'static {
    let query = warp::query::raw().or(warp::any().map(String::new)).unify();
    warp::any()
        .map(move || app.clone())
        .and(warp::method())
        .and(warp::path::full())
        .and(query)
        .and(warp::header::headers_cloned())
        .and(warp::body::stream())
        .and(warp::ext::optional::<PeerAddr>())
        .then(
            |app: Arc<App>,
             method,
             path: warp::path::FullPath,
             query,
             headers: HeaderMap,
             body,
             peer: Option<PeerAddr>| async move {
                let body: BodyStream = Box::pin(body_bytes(body));
                let client =
                    peer.map(|p| forwarded::client_address(p.0, &headers, &app.config.http));
                let request = Request {
                    client,
                    method,
                    path: path.as_str().to_string(),
                    query,
                    headers,
                    body,
                    received_at: app.clock.now(),
                    body_deadline: tokio::time::Instant::now() + app.config.http.body_timeout,
                    request_id: new_request_id(),
                };
                handle(&app, request).await
            },
        )
}

/// The request body as a stream of `Bytes` chunks.
fn body_bytes(
    body: impl Stream<Item = std::result::Result<impl Buf, warp::Error>> + Send + 'static,
) -> impl Stream<Item = std::result::Result<Bytes, warp::Error>> + Send {
    body.map_ok(|mut buf| buf.copy_to_bytes(buf.remaining()))
}

/// Routes, runs and logs one request.
pub async fn handle(app: &App, mut req: Request) -> Response {
    let started = Instant::now();
    let path = std::mem::take(&mut req.path);
    let route = Route::resolve(&path);
    let template = route.as_ref().map_or("(unmatched)", Route::template);
    let mut call_log = CallLog::default();
    let result = dispatch(app, route, &mut req, &mut call_log).await;
    let mut response = match result {
        Ok(response) => response,
        Err(err) => error::response(&err, &req.request_id),
    };
    if let Ok(value) = http::HeaderValue::from_str(&req.request_id) {
        response.headers_mut().insert("x-request-id", value);
    }
    // A handler may answer without reading the body (a 413, a route that takes none). The
    // connection can only carry the next request once the body is consumed; otherwise say
    // that it closes, as HTTP/1.1 requires, instead of dropping it unannounced.
    if !reply::drain_buffered(&mut req.body, MAX_DATA_BODY) {
        response.headers_mut().insert(
            http::header::CONNECTION,
            http::HeaderValue::from_static("close"),
        );
    }
    let elapsed = started.elapsed();
    let status = response.status();
    app.metrics
        .observe_request(template, req.method.as_str(), status.as_u16(), elapsed);
    log::info!(
        "{} {} {} {} {:.3}ms",
        req.request_id,
        req.method,
        template,
        status.as_u16(),
        elapsed.as_secs_f64() * 1000.0
    );
    if let (Some(partition), Some(environment)) = (call_log.partition, call_log.environment) {
        app.request_log.record(
            partition,
            RequestLogRow {
                time: req.received_at,
                method: req.method.to_string(),
                route: template.to_string(),
                status: status.as_u16(),
                key_id: call_log.key_id,
                latency_us: u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX),
                environment,
                request_id: req.request_id.clone(),
            },
        );
    }
    response
}

async fn dispatch(
    app: &App,
    route: Option<Route<'_>>,
    req: &mut Request,
    call_log: &mut CallLog,
) -> Result<Response> {
    let route = route.ok_or(crate::domain::error::Error::RouteNotFound)?;
    route.check_method(&req.method)?;
    match route {
        Route::Health => Ok(reply::json(
            StatusCode::OK,
            &serde_json::json!({"status": "ok"}),
        )),
        Route::Ready => ops::ready(app),
        Route::Metrics => ops::metrics(app, req),
        Route::DataCollection { slug } => {
            let slug = slug.to_string();
            data::handle(app, req, &slug, None, call_log).await
        }
        Route::DataSearch { slug } => {
            let slug = slug.to_string();
            data::search(app, req, &slug, call_log)
        }
        Route::DataPoll { slug } => {
            let slug = slug.to_string();
            data::poll(app, req, &slug, call_log)
        }
        Route::DataRecord { slug, record_id } => {
            let (slug, record_id) = (slug.to_string(), record_id.to_string());
            data::handle(app, req, &slug, Some(&record_id), call_log).await
        }
        Route::Dashboard { path } => Ok(crate::http::dashboard::handle(app, req, path).await),
        Route::OpenApi => Ok(docs::document(app)),
        Route::DataOpenApi { slug } => docs::endpoint_document(app, req, slug),
        other => manage_route(app, other, req).await,
    }
}

/// The account and management routes. Path parameters are copied out first because the
/// handlers borrow the request mutably.
async fn manage_route(app: &App, route: Route<'_>, req: &mut Request) -> Result<Response> {
    use manage::DeployStep;
    let owned = |s: &str| s.to_string();
    match route {
        Route::AuthLogin => account::login(app, req).await,
        Route::AuthLogout => account::logout(app, req),
        Route::AuthSession | Route::ManageAccount => account::me(app, req),
        Route::Invitation { token } => account::invitation(app, token),
        Route::InvitationAccept { token } => {
            let token = owned(token);
            account::accept_invitation(app, req, &token).await
        }
        Route::ManagePassword => account::change_password(app, req).await,
        Route::ManageAccounts => account::list_accounts(app, req),
        Route::ManageAccountById { id } => {
            let id = owned(id);
            account::account_by_id(app, req, &id).await
        }
        Route::ManageTokens => account::tokens(app, req).await,
        Route::ManageToken { id } => account::revoke_token(app, req, id),
        Route::ManageNotifications => account::notifications(app, req),
        Route::ManageNotificationRead { id } => account::mark_read(app, req, id),
        Route::ManageEndpoints => manage::endpoints(app, req).await,
        Route::ManageEndpoint { slug } => {
            let slug = owned(slug);
            manage::endpoint(app, req, &slug).await
        }
        Route::ManageDeploy { slug } => {
            let slug = owned(slug);
            manage::deploy_step(app, req, &slug, DeployStep::Deploy).await
        }
        Route::ManageDeployRequest { slug } => {
            let slug = owned(slug);
            manage::deploy_step(app, req, &slug, DeployStep::Request).await
        }
        Route::ManageDeployApprove { slug } => {
            let slug = owned(slug);
            manage::deploy_step(app, req, &slug, DeployStep::Approve).await
        }
        Route::ManageDeployReject { slug } => {
            let slug = owned(slug);
            manage::deploy_step(app, req, &slug, DeployStep::Reject).await
        }
        Route::ManageRequests { slug } => manage::requests(app, req, slug),
        Route::ManageInvitations { slug } => {
            let slug = owned(slug);
            manage::invitations(app, req, &slug).await
        }
        Route::ManageInvitation { slug, id } => manage::revoke_invitation(app, req, slug, id),
        Route::ManageCollaborators { slug } => manage::collaborators(app, req, slug),
        Route::ManageCollaborator { slug, account_id } => {
            let (slug, account_id) = (owned(slug), owned(account_id));
            manage::collaborator(app, req, &slug, &account_id).await
        }
        Route::ManageAudit { slug } => manage::audit_log(app, req, slug),
        Route::ManageWebhook { slug, environment } => {
            let (slug, environment) = (owned(slug), owned(environment));
            hooks::owner_webhook(app, req, &slug, &environment).await
        }
        Route::ManageDeliveries { slug } => hooks::deliveries(app, req, slug),
        Route::ManageDelivery { slug, id } => hooks::delivery(app, req, slug, id),
        Route::ManageRedeliver { slug, id } => hooks::redeliver(app, req, slug, id),
        Route::ManageUsage { slug } => manage::usage(app, req, slug),
        Route::ManageWebhookSecret { slug, env } => webhooks::secret(app, req, slug, env),
        Route::ManageWebhookSecretReissue { slug, env } => webhooks::reissue(app, req, slug, env),
        Route::Health
        | Route::Ready
        | Route::Metrics
        | Route::DataCollection { .. }
        | Route::DataSearch { .. }
        | Route::DataPoll { .. }
        | Route::DataRecord { .. }
        | Route::Dashboard { .. }
        | Route::OpenApi
        | Route::DataOpenApi { .. } => Err(crate::domain::error::Error::RouteNotFound),
        Route::ManageMail => mail::list(app, req),
        Route::ManageMailTest => mail::test(app, req).await,
        Route::ManageMailMessage { id } => {
            let id = id.to_string();
            mail::get(app, req, &id)
        }
        Route::ManageBackups => backups::create(app, req).await,
    }
}
