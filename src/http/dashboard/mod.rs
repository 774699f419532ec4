//! The dashboard: server-rendered HTML pages at `/dashboard` (and the invitation links at
//! `/invitations/{token}`) for owners and collaborators, on top of the same service functions
//! as the management API.
//!
//! - `router`: which page or form a path and method name.
//! - `visitor`: who is asking (session cookie → account), and the CSRF-checked form post.
//! - `security`: the security headers of every response and the CSRF token.
//! - `page`: the layout shared by every page, rendering, redirects, and service errors shown
//!   as an error page with the API's error code.
//! - `form`, `assets` (embedded CSS and JavaScript), `setup` (the first-run link), `chart`
//!   (the inline SVG of the usage page).
//! - Pages, one module per concept: `auth` (login, logout, setup, invitations), `endpoints`
//!   (list, create, detail, secrets, deploy, settings), `keys` (the key panel: masked key,
//!   rotation, early revocation), `collaborators`, `hooks` (owner
//!   webhook settings), `logs` (request log, delivery log, usage), `inbox` (notifications,
//!   mail outbox), `testpage` (the sandbox API test page, built from the endpoint's OpenAPI
//!   document).
//!
//! Templates are in `templates/dashboard/`, compiled into the binary by askama.

mod assets;
mod auth;
mod chart;
mod collaborators;
mod endpoints;
mod form;
mod hooks;
mod inbox;
mod keys;
mod logs;
mod page;
mod router;
pub mod security;
pub mod setup;
mod testpage;
mod visitor;

use http::{HeaderValue, header};
use warp::reply::Response;

use crate::http::app::App;
use crate::http::request::Request;

/// Answers one dashboard request: a page, a redirect, an asset, or an error page; always
/// with the security headers. Pages are never cached (they show keys and secrets).
pub async fn handle(app: &App, req: &mut Request, path: &str) -> Response {
    let mut response = match router::route(app, req, path).await {
        Ok(response) => response,
        Err(failure) => page::failure(req, path, failure),
    };
    security::harden(&mut response);
    let headers = response.headers_mut();
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}
