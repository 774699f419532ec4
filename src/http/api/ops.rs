//! The operations routes: `GET /readyz` and `GET /metrics` (`/healthz` answers in `api`).
//! None needs an account; `/metrics` needs the configured metrics token when one is set.

use http::StatusCode;
use subtle::ConstantTimeEq;
use warp::reply::Response;

use crate::core::crypto::sha256;
use crate::domain::error::Error;
use crate::domain::health::{self, Vitals, WriterState};
use crate::http::app::App;
use crate::http::error::Result;
use crate::http::reply;
use crate::http::request::Request;

/// What the health checks look at, from the running server.
fn vitals(app: &App) -> Vitals<'_> {
    Vitals {
        store: app.handles.store.as_ref(),
        index: app.search.as_deref(),
        writer: WriterState {
            alive: app.ingest.writer_alive(),
            last_commit_failed: app.ingest.last_commit_failed(),
            queue_depth: app.ingest.queue_depth(),
        },
        data_dir: &app.config.data_dir,
    }
}

/// `GET /readyz`: 200 when every check passes, else 503; the body lists the checks.
pub fn ready(app: &App) -> Result<Response> {
    let readiness = health::readiness(&vitals(app), app.config.operations.ready_max_index_lag);
    let status = if readiness.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    Ok(reply::json(status, &readiness))
}

/// `GET /metrics`: the Prometheus text exposition.
pub fn metrics(app: &App, req: &Request) -> Result<Response> {
    if let Some(token) = &app.config.operations.metrics_token {
        // Compared as hashes: constant time, and the length of the token does not leak.
        let sent = reply::bearer(&req.headers).unwrap_or_default();
        let matches: bool = sha256(sent.as_bytes())
            .ct_eq(&sha256(token.expose().as_bytes()))
            .into();
        if !matches {
            return Err(Error::InvalidMetricsToken.into());
        }
    }
    let state = health::metrics_state(
        &vitals(app),
        app.handles.now(),
        app.body_budget.held_kib(),
        app.streams.open_count() as u64,
    )?;
    let text = app.metrics.render(&state);
    let mut response = Response::new(text.into());
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    Ok(response)
}
