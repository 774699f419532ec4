//! What every page shares: the layout (navigation, CSRF token, asset URLs, the flash
//! message), rendering a template, redirects, and turning a failure into a response: an
//! error page that names the same error code as the management API would.

use askama::Template;
use http::{HeaderValue, StatusCode, header};
use warp::reply::Response;

use super::assets;
use crate::domain::error::Error;
use crate::http::error::{HttpError, status_and_code};
use crate::http::request::Request;

/// Why a page could not be shown.
#[derive(Debug)]
pub enum Failure {
    /// A service refused or failed, or HTTP refused the request: shown with the API's status
    /// and code.
    Service(HttpError),
    /// A form post without a valid CSRF token, or from another site.
    Csrf,
    /// No such page.
    NotFound,
    /// The page needs a logged-in account: redirect to the login page.
    Login,
}

impl From<HttpError> for Failure {
    fn from(err: HttpError) -> Failure {
        match err {
            HttpError::Service(Error::MissingToken | Error::SessionExpired) => Failure::Login,
            err => Failure::Service(err),
        }
    }
}

impl From<Error> for Failure {
    fn from(err: Error) -> Failure {
        Failure::from(HttpError::Service(err))
    }
}

pub type Outcome = Result<Response, Failure>;

/// The navigation of a logged-in account.
pub struct Nav {
    pub email: String,
    pub server_owner: bool,
    pub unread: usize,
    /// Which main section the page is in: `endpoints`, `notifications` or `mail`.
    pub section: &'static str,
}

/// What the base template needs.
pub struct Layout {
    pub title: String,
    pub nav: Option<Nav>,
    /// The CSRF token for the forms of this page.
    pub csrf: String,
    pub css: &'static str,
    pub js: &'static str,
    pub flash: Option<&'static str>,
}

impl Layout {
    pub fn new(
        title: impl Into<String>,
        nav: Option<Nav>,
        csrf: String,
        flash: Option<&'static str>,
    ) -> Layout {
        Layout {
            title: title.into(),
            nav,
            csrf,
            css: assets::css_url(),
            js: assets::js_url(),
            flash,
        }
    }
}

/// The links between the pages of a log: to the newest page (when on a later one) and to
/// the next older page (when there is one).
pub struct Pager {
    pub newest: Option<String>,
    pub older: Option<String>,
}

impl Pager {
    /// For the page of `base` with the filters `params`, shown from `cursor`, whose listing
    /// returned `next_cursor`.
    pub fn new(
        base: &str,
        params: &[(&str, &str)],
        cursor: Option<&str>,
        next_cursor: Option<String>,
    ) -> Pager {
        let link = |cursor: Option<&str>| {
            let mut query = form_urlencoded::Serializer::new(String::new());
            query.extend_pairs(params.iter().filter(|(_, v)| !v.is_empty()));
            if let Some(cursor) = cursor {
                query.append_pair("cursor", cursor);
            }
            let query = query.finish();
            if query.is_empty() {
                base.to_string()
            } else {
                format!("{base}?{query}")
            }
        };
        Pager {
            newest: cursor.map(|_| link(None)),
            older: next_cursor.map(|c| link(Some(&c))),
        }
    }
}

/// The message of a `?done=` code set by a redirect after a successful form post. Only these
/// fixed texts can appear, so a link cannot put words on the page.
pub fn flash(req: &Request) -> Option<&'static str> {
    let params = crate::http::reply::query_params(&req.query);
    Some(match params.get("done")?.as_str() {
        "created" => "Endpoint created.",
        "deleted" => "Endpoint deleted: its keys stopped working and its data is being purged.",
        "saved" => "Changes saved.",
        "activated" => "The endpoint is active again.",
        "deactivated" => "The endpoint is inactive: data calls are refused with 403.",
        "requested" => "Deploy requested: the owner has been asked to approve.",
        "approved" | "deployed" => "Deployed: the production key works now.",
        "rejected" => "Deploy request rejected.",
        "reissued" => "Signing secret reissued. The previous one keeps signing for 24 hours.",
        "key-rotated" => "New key issued, shown below: copy it now.",
        "key-revoked" => "Previous key revoked: calls with it are refused from now on.",
        "invited" => "Invitation created.",
        "revoked" => "Invitation revoked.",
        "removed" => "Collaborator removed; their keys stopped working.",
        "permissions" => "Permissions saved.",
        "webhook" => "Webhook settings saved.",
        "webhook-removed" => "Webhook removed.",
        "redelivered" => "Redelivery scheduled.",
        "mail" => "Test e-mail queued; its status shows below.",
        "read" => "Notification marked as read.",
        "accepted" => "Invitation accepted: you are now a collaborator on this endpoint.",
        "welcome" => "Your owner account is ready.",
        _ => return None,
    })
}

/// A stored RFC 3339 time as pages show it: `2026-11-22 09:36:07 UTC` (to the second); any
/// other text unchanged.
pub fn when(rfc3339: &str) -> String {
    match (rfc3339.get(..10), rfc3339.get(11..19)) {
        (Some(date), Some(time)) if rfc3339.ends_with('Z') => format!("{date} {time} UTC"),
        _ => rfc3339.to_string(),
    }
}

/// An HTML response.
pub fn html(status: StatusCode, body: String) -> Response {
    let mut response = Response::new(body.into());
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    response
}

/// Renders a template as a 200 page.
pub fn render(template: &impl Template) -> Outcome {
    render_with(StatusCode::OK, template)
}

pub fn render_with(status: StatusCode, template: &impl Template) -> Outcome {
    let body = template
        .render()
        .map_err(|e| Error::Internal(format!("cannot render a page: {e}")))?;
    Ok(html(status, body))
}

/// 303 See Other to a path of this server (after a form post, or to the login page).
pub fn redirect(to: &str) -> Response {
    let mut response = Response::new(Vec::new().into());
    *response.status_mut() = StatusCode::SEE_OTHER;
    if let Ok(v) = HeaderValue::from_str(to) {
        response.headers_mut().insert(header::LOCATION, v);
    }
    response
}

/// Where to go after logging in: only a dashboard path of this server.
pub fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(path)
            if (path.starts_with("/dashboard") || path.starts_with("/invitations/"))
                && !path.contains("//")
                && !path.contains('\\') =>
        {
            path.to_string()
        }
        _ => "/dashboard/endpoints".to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn times_show_to_the_second_in_utc() {
        assert_eq!(
            super::when("2026-11-22T09:36:07.685861Z"),
            "2026-11-22 09:36:07 UTC"
        );
        assert_eq!(super::when("soon"), "soon");
    }
}

#[derive(Template)]
#[template(path = "dashboard/error.html")]
struct ErrorPage {
    layout: Layout,
    status: u16,
    code: &'static str,
    message: String,
}

/// The response for a failure: the login redirect, or an error page.
pub fn failure(req: &Request, path: &str, failure: Failure) -> Response {
    let (status, code, message) = match failure {
        Failure::Login => {
            let next = if req.method == http::Method::GET {
                let query = if req.query.is_empty() { String::new() } else { format!("?{}", req.query) };
                format!("{path}{query}")
            } else {
                "/dashboard/endpoints".to_string()
            };
            let encoded: String = form_urlencoded::byte_serialize(next.as_bytes()).collect();
            return redirect(&format!("/dashboard/login?next={encoded}"));
        }
        Failure::Csrf => (
            StatusCode::FORBIDDEN,
            "csrf_failed",
            "This form has expired or was sent from another site. Go back, reload the page and try again.".to_string(),
        ),
        Failure::NotFound => (
            StatusCode::NOT_FOUND,
            "page_not_found",
            "There is no such page.".to_string(),
        ),
        Failure::Service(err) => {
            let (status, code) = status_and_code(&err);
            if status.is_server_error() {
                log::error!("{} dashboard {path}: {err}", req.request_id);
            }
            (status, code, err.to_string())
        }
    };
    let page = ErrorPage {
        layout: Layout::new("Error", None, String::new(), None),
        status: status.as_u16(),
        code,
        message,
    };
    match page.render() {
        Ok(body) => html(status, body),
        Err(_) => html(status, format!("{} {code}", status.as_u16())),
    }
}
