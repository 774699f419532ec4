//! The HTTP API: one warp filter turns every request into a [`Request`], the router names its
//! route, and a thin handler parses it, calls a service and maps the result.
//!
//! Routing is done here rather than with nested warp filters so that 404 vs 405 is exact, the
//! check order of a data call is fixed and documented (README), and every log line can name
//! its path template.

mod data;
pub mod error;
mod mail;
mod manage;
pub mod reply;
mod routes;

use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use bytes::{Buf, Bytes};
use futures_util::{Stream, TryStreamExt};
use http::{HeaderMap, Method, StatusCode};
use warp::Filter;
use warp::reply::Response;

use crate::app::App;
use crate::clock::Timestamp;
use crate::error::Result;
use crate::ids::new_request_id;
use crate::storage::{Environment, RequestLogRow};
use routes::Route;

pub type BodyStream = Pin<Box<dyn Stream<Item = std::result::Result<Bytes, warp::Error>> + Send>>;

/// Limit of POST and PUT bodies on data routes: 100 KB as the spec says.
pub const MAX_DATA_BODY: usize = 102_400;
/// Limit of management request bodies.
pub const MAX_MANAGE_BODY: usize = 65_536;

/// One HTTP request, as the handlers see it.
pub struct Request {
    pub method: Method,
    pub path: String,
    pub query: String,
    pub headers: HeaderMap,
    pub body: BodyStream,
    /// When the request arrived: the record's created_at for a create.
    pub received_at: Timestamp,
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
        .then(
            |app: Arc<App>, method, path: warp::path::FullPath, query, headers, body| async move {
                let body: BodyStream = Box::pin(body_bytes(body));
                let request = Request {
                    method,
                    path: path.as_str().to_string(),
                    query,
                    headers,
                    body,
                    received_at: app.clock.now(),
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
    let route = route.ok_or(crate::error::Error::RouteNotFound)?;
    route.check_method(&req.method)?;
    match route {
        Route::Health => Ok(reply::json(
            StatusCode::OK,
            &serde_json::json!({"status": "ok"}),
        )),
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
        Route::ManageEndpoints => manage::endpoints(app, req).await,
        Route::ManageEndpoint { slug } => {
            let slug = slug.to_string();
            manage::endpoint(app, req, &slug).await
        }
        Route::ManageDeploy { slug } => {
            let slug = slug.to_string();
            manage::deploy(app, req, &slug)
        }
        Route::ManageRequests { slug } => {
            let slug = slug.to_string();
            manage::requests(app, req, &slug)
        }
        Route::ManageMail => mail::list(app, req),
        Route::ManageMailTest => mail::test(app, req).await,
        Route::ManageMailMessage { id } => {
            let id = id.to_string();
            mail::get(app, req, &id)
        }
    }
}
