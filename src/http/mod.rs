//! HTTP: everything that speaks HTTP, above the services.
//!
//! Here: the warp filter ([`filter`]) and the top router ([`handle`]): dashboard paths go to
//! the dashboard, the rest to the API; every request is timed, logged and counted here.
//!
//! - [`app`]: `App`, the state a request handler is given (the services' handles).
//! - [`request`]: one request as every handler sees it, and the body limits.
//! - [`reply`]: reading bodies and parameters, writing JSON answers.
//! - [`error`]: the single mapping from errors to statuses and stable error codes.
//! - [`session`]: the session cookie and the check that a browser request comes from this
//!   server's origin, shared by the API and the dashboard.
//! - [`routes`]: the route table: every operation's method, path template and OpenAPI
//!   operation id, from which routing, `Allow`, the logged template and the document's paths
//!   follow.
//! - [`api`]: the thin handlers of the data and management API, bound to the table's routes.
//! - [`dashboard`]: the server-rendered dashboard at `/dashboard` (and the invitation pages at
//!   `/invitations/{token}`): its own router, session and CSRF-checked forms, security
//!   headers, askama templates (`templates/dashboard/`), embedded assets, the first-run setup
//!   link; pages call the same service functions as the management API. Each endpoint's API
//!   test page (`dashboard::testpage`) is built from its `openapi::endpoint_document`.
//! - [`openapi`]: the OpenAPI 3.1 document of the whole API, built from one declaration per
//!   operation, with each endpoint's own data-API document and code samples.
//! - [`forwarded`]: the client's address: the TCP peer, or behind trusted reverse proxies
//!   (`[http] trusted_proxies`) the address they forwarded; the login limits count by it.

pub mod api;
pub mod app;
pub mod dashboard;
pub mod error;
pub mod forwarded;
pub mod openapi;
pub mod reply;
pub mod request;
pub mod routes;
pub mod session;

use std::sync::Arc;
use std::time::Instant;

use http::HeaderMap;
use warp::Filter;
use warp::reply::Response;

use crate::core::ids::new_request_id;
use crate::core::telemetry::{Span, SpanKind};
use crate::core::trace::TraceContext;
use crate::http::error::Result;
use crate::store::RequestLogRow;
use api::CallLog;
use app::App;
use request::{BodyStream, MAX_DATA_BODY, PeerAddr, Request, body_bytes};
use routes::{Resolved, Route};

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
                let received_at = app.handles.now();
                let request = Request {
                    client,
                    method,
                    path: path.as_str().to_string(),
                    query,
                    headers,
                    body,
                    received_at,
                    body_deadline: tokio::time::Instant::now() + app.config.http.body_timeout,
                    body_budget: app.body_budget.clone(),
                    body_share: None,
                    request_id: new_request_id(received_at),
                    trace: None,
                    extensions: http::Extensions::new(),
                };
                handle(&app, request).await
            },
        )
}

/// Routes, runs and logs one request.
pub async fn handle(app: &App, mut req: Request) -> Response {
    let started = Instant::now();
    let path = std::mem::take(&mut req.path);
    let resolved = Resolved::resolve(&path);
    let template = resolved.as_ref().map_or("(unmatched)", Resolved::template);
    let span = ServerSpan::begin(app, resolved.as_ref(), &mut req);
    let mut call_log = CallLog::default();
    let result = respond(app, resolved, &mut req, &mut call_log).await;
    let mut failure = None;
    let mut response = match result {
        Ok(response) => response,
        Err(err) => {
            failure = Some(error::logged(&err));
            error::response(&err, &req.request_id)
        }
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
    if let Some(span) = span {
        span.end(app, &req, template, status);
    }
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
        let (code, message) = failure.unzip();
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
                code: code.map(str::to_string),
                message,
                client: req.client.map(|ip| ip.to_string()),
                holder: call_log.holder,
                record_id: call_log.record_id,
                record_count: call_log.record_count,
            },
        );
    }
    response
}

/// The span of one request, recorded when telemetry is on (health checks, metrics scrapes and
/// dashboard pages are not traced).
struct ServerSpan {
    /// The caller's span, when it sent a `traceparent`.
    parent: Option<[u8; 8]>,
    start: std::time::SystemTime,
}

impl ServerSpan {
    /// Sets the request's trace: a span of the server's own under the caller's (when
    /// traced), or the caller's as sent.
    fn begin(app: &App, resolved: Option<&Resolved<'_>>, req: &mut Request) -> Option<ServerSpan> {
        let incoming = req
            .headers
            .get("traceparent")
            .and_then(|v| v.to_str().ok())
            .and_then(TraceContext::parse);
        let traced = app.telemetry.enabled()
            && match resolved {
                Some(Resolved::Api(path)) => ![Route::Health, Route::Ready, Route::Metrics]
                    .iter()
                    .any(|probe| probe.template() == path.template),
                Some(Resolved::Dashboard { .. }) | None => false,
            };
        if !traced {
            req.trace = incoming;
            return None;
        }
        req.trace = Some(incoming.map_or_else(TraceContext::root, |c| c.child()));
        Some(ServerSpan {
            parent: incoming.map(|c| c.span_id),
            start: std::time::SystemTime::now(),
        })
    }

    fn end(self, app: &App, req: &Request, template: &str, status: http::StatusCode) {
        let Some(context) = req.trace else {
            return;
        };
        let method = req.method.as_str();
        let mut span = Span::ended_now(
            context,
            self.parent,
            format!("{method} {template}"),
            SpanKind::Server,
            self.start,
        )
        .attribute("http.request.method", method)
        .attribute("http.route", template)
        .attribute("http.response.status_code", i64::from(status.as_u16()))
        .attribute("intake.request_id", req.request_id.as_str());
        if status.is_server_error() {
            span.error = Some(format!("HTTP {}", status.as_u16()));
        }
        app.telemetry.record(span);
    }
}

/// The dashboard's paths go to the dashboard, every route of the table to its API handler.
async fn respond(
    app: &App,
    resolved: Option<Resolved<'_>>,
    req: &mut Request,
    call_log: &mut CallLog,
) -> Result<Response> {
    match resolved {
        Some(Resolved::Dashboard { path }) => {
            routes::check_dashboard_method(&req.method)?;
            Ok(dashboard::handle(app, req, path).await)
        }
        Some(Resolved::Api(path)) => {
            let route = path.route(&req.method)?;
            api::dispatch(app, route, path.params, req, call_log).await
        }
        None => Err(error::HttpError::RouteNotFound),
    }
}

/// Whether `path` is the dashboard's (`/dashboard...`, `/invitations/{token}`).
pub fn is_dashboard_path(path: &str) -> bool {
    path == "/dashboard" || path.starts_with("/dashboard/") || path.starts_with("/invitations/")
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_dashboard_owns_its_paths_only() {
        for path in [
            "/dashboard",
            "/dashboard/",
            "/dashboard/endpoints/x",
            "/invitations/inv_1",
        ] {
            assert!(super::is_dashboard_path(path), "{path}");
        }
        for path in [
            "/dashboards",
            "/api/v1/invitations/inv_1",
            "/healthz",
            "/invitations",
        ] {
            assert!(!super::is_dashboard_path(path), "{path}");
        }
    }
}
