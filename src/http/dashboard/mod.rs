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
//! - `records`: the record browser (the table of records with its columns, order, dates and
//!   search; one record with its deliveries; the record editor; delete).
//! - `erasures`: the Records tab's Erase form (count, confirm by the count, start) and the
//!   erasures' progress (owner).
//! - Pages, one module per concept: `auth` (login, logout, setup, invitations),
//!   `password_reset` ("Forgot password?" and the page a reset link opens), `account` (the
//!   account page: password, personal tokens, sessions), `endpoints`
//!   (list, create, detail, secrets, deploy, settings), `keys` (the key panel: masked key,
//!   rotation, early revocation), `collaborators`, `hooks` (owner
//!   webhook settings), `logs` (request log, delivery log, usage), `inbox` (notifications,
//!   mail outbox), `testpage` (the sandbox API test page, built from the endpoint's OpenAPI
//!   document).
//!
//! Templates are in `templates/dashboard/`, compiled into the binary by askama.

mod account;
mod assets;
mod auth;
mod chart;
mod collaborators;
mod endpoints;
mod erasures;
mod form;
mod hooks;
mod inbox;
mod keys;
mod logs;
mod page;
mod password_reset;
mod records;
mod router;
pub mod security;
pub mod setup;
mod testpage;
mod visitor;

use http::{HeaderValue, Method, header};
use page::Failure;
use warp::reply::Response;

use crate::http::app::App;
use crate::http::error::status_and_code;
use crate::http::request::Request;

/// Answers one dashboard request: a page, a redirect, an asset, or an error page; always
/// with the security headers. Pages are never cached (they show keys and secrets).
pub async fn handle(app: &App, req: &mut Request, path: &str) -> Response {
    let mut response = match router::route(app, req, path).await {
        Ok(response) => response,
        Err(failure) => refused(app, req, path, failure).await,
    };
    security::harden(&mut response);
    let headers = response.headers_mut();
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

/// The answer to a failed request. A form the service refused (a 4xx) shows its page again
/// with the reason beside the form and the values as typed, under the refusal's status;
/// anything else is an error page with the navigation.
async fn refused(app: &App, req: &mut Request, path: &str, failure: Failure) -> Response {
    if let Failure::Service(err) = &failure {
        let (status, _) = status_and_code(err);
        let page = router::form_page(path).filter(|_| req.method == Method::POST);
        if let (true, Some(page), Some(form)) = (
            status.is_client_error(),
            page,
            req.extensions.remove::<form::Form>(),
        ) {
            let message = page::readable(&err.to_string());
            req.extensions
                .insert(page::FailedForm::new(path, message, form));
            req.method = Method::GET;
            return match router::route(app, req, &page).await {
                Ok(mut response) => {
                    *response.status_mut() = status;
                    response
                }
                Err(failure) => error_page(app, req, &page, failure),
            };
        }
    }
    error_page(app, req, path, failure)
}

fn error_page(app: &App, req: &Request, path: &str, failure: Failure) -> Response {
    let layout = match visitor::maybe_signed_in(app, req) {
        Ok(Some(user)) => user.layout(app, "Error", "endpoints", req),
        _ => page::Layout::new("Error", None, String::new(), None),
    };
    page::failure(req, path, failure, layout)
}
