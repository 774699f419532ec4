//! A management API read without `Authorization`: what a browser sends, with its session
//! cookie or none, when someone opens an API link (from an old e-mail, a bookmark, a pasted
//! URL). A browser asking for a page (`Accept` names `text/html`) is sent to the dashboard
//! page that shows the same thing (303; the dashboard asks it to log in first if it must);
//! any other cookie-only read of an answer holding API keys or signing secrets is refused with
//! `token_required`. So keys are answered to a bearer token, or shown on the dashboard's own
//! pages, never as JSON to a cookie.

use http::{Method, header};
use warp::reply::Response;

use crate::domain::error::{Error, Result as ServiceResult};
use crate::http::api::manage::{Credential, credential};
use crate::http::app::App;
use crate::http::reply::see_other;
use crate::http::request::Request;
use crate::http::routes::{PathParams, Route};
use crate::store::AccountRow;

/// A 303 to the dashboard page for a browser's `GET` of a management route without
/// `Authorization`; `None` lets the route's handler answer. Before authentication: the page
/// asks a browser without a live session to log in, and comes back to the page after.
pub fn browser_page(route: Route, path: &PathParams, req: &Request) -> Option<Response> {
    let managed = route.template().starts_with("/api/v1/manage/");
    let bearer = req.headers.contains_key(header::AUTHORIZATION);
    let page = managed && is_read(req) && !bearer && wants_page(req);
    page.then(|| see_other(&dashboard_page(route, path)))
}

/// The caller of a management call whose answer holds API keys or signing secrets: as
/// `manage::caller`, but a read authenticated by the session cookie alone is refused
/// (`token_required`).
pub fn key_holder_caller(app: &App, req: &Request) -> ServiceResult<AccountRow> {
    let credential = credential(app, req)?;
    let account = credential.account(app.handles.store.as_ref(), app.handles.now())?;
    if matches!(credential, Credential::Session(_)) && is_read(req) {
        return Err(Error::TokenRequired);
    }
    Ok(account)
}

fn is_read(req: &Request) -> bool {
    req.method == Method::GET || req.method == Method::HEAD
}

/// Whether the request is a browser's navigation: it takes HTML.
fn wants_page(req: &Request) -> bool {
    req.headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(|value| value.contains("text/html"))
}

/// The dashboard page that shows what the management read `route` answers.
fn dashboard_page(route: Route, path: &PathParams) -> String {
    let endpoint = format!("/dashboard/endpoints/{}", path.slug);
    match route {
        Route::ListNotifications => "/dashboard/notifications".into(),
        Route::ListMail | Route::GetMail => "/dashboard/mail".into(),
        Route::ListEndpoints => "/dashboard/endpoints".into(),
        Route::GetEndpoint | Route::ListAudit => endpoint,
        Route::GetWebhookSecret if path.environment == "production" => {
            format!("{endpoint}/production")
        }
        Route::GetWebhookSecret => endpoint,
        Route::ListRequests => format!("{endpoint}/requests"),
        Route::GetUsage => format!("{endpoint}/usage"),
        Route::ListErasures => format!("{endpoint}/erasures"),
        Route::GetErasure => format!("{endpoint}/erasures/{}", path.id),
        Route::ListInvitations | Route::ListCollaborators => format!("{endpoint}/collaborators"),
        Route::GetOwnerWebhook
        | Route::ListSubscriptions
        | Route::GetSubscription
        | Route::GetCallerRecovery => format!("{endpoint}/webhooks"),
        Route::ListDeliveries => format!("{endpoint}/deliveries"),
        Route::GetDelivery => format!("{endpoint}/deliveries/{}", path.id),
        _ => "/dashboard".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_read_goes_to_the_page_that_shows_it() {
        let path = PathParams {
            slug: "orders",
            id: "7",
            environment: "production",
            ..PathParams::default()
        };
        let page = |route| dashboard_page(route, &path);
        assert_eq!(page(Route::GetEndpoint), "/dashboard/endpoints/orders");
        assert_eq!(
            page(Route::GetWebhookSecret),
            "/dashboard/endpoints/orders/production"
        );
        assert_eq!(
            page(Route::GetDelivery),
            "/dashboard/endpoints/orders/deliveries/7"
        );
        assert_eq!(page(Route::ListTokens), "/dashboard");
    }
}
