//! What every page shares: the layout (navigation, CSRF token, asset URLs, the flash
//! message), rendering a template, redirects, and turning a failure into a response: an
//! error page that names the same error code as the management API would.

use askama::Template;
use http::{HeaderValue, StatusCode, header};
use warp::reply::Response;

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};

use super::assets;
use super::form::Form;
use crate::domain::error::Error;
use crate::http::error::{self, HttpError, status_and_code};
use crate::http::request::Request;
use crate::store::Environment;

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
    /// Which main section the page is in: `endpoints`, `notifications`, `mail` or `account`.
    pub section: &'static str,
}

/// A form post the service refused, shown again on the page the form is on: the reason
/// beside the form and the values as they were typed (see `dashboard::handle`).
#[derive(Clone, Debug)]
pub struct FailedForm {
    /// The path the form posted to; a page tells its forms apart by it.
    pub action: String,
    /// Why, for a reader.
    pub message: String,
    pub form: Form,
}

impl FailedForm {
    pub fn new(action: &str, message: String, form: Form) -> FailedForm {
        FailedForm {
            action: action.to_string(),
            message,
            form,
        }
    }
}

/// What the base template needs.
pub struct Layout {
    pub title: String,
    pub nav: Option<Nav>,
    /// The CSRF token for the forms of this page.
    pub csrf: String,
    pub css: &'static str,
    pub js: &'static str,
    pub theme_js: &'static str,
    pub highlight_js: &'static str,
    pub favicon: &'static str,
    /// The flash message: one of [`flash`]'s fixed texts, or a page's own about what it shows
    /// (never words taken from the link).
    pub flash: Option<Cow<'static, str>>,
    pub failed: Option<FailedForm>,
    /// Whether a form of the page showed `failed`'s message (else the layout does).
    failed_shown: AtomicBool,
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
            theme_js: assets::theme_js_url(),
            highlight_js: assets::highlight_js_url(),
            favicon: assets::favicon_url(),
            flash: flash.map(Cow::Borrowed),
            failed: None,
            failed_shown: AtomicBool::new(false),
        }
    }

    /// The refused form posting to `action`, if this page shows one again.
    fn failed_for(&self, action: &str) -> Option<&FailedForm> {
        self.failed.as_ref().filter(|f| f.action == action)
    }

    /// Whether the form posting to `action` was refused (its section opens).
    pub fn refused(&self, action: &str) -> bool {
        self.failed_for(action).is_some()
    }

    /// Why the form posting to `action` was refused, when the page shows it again.
    pub fn form_error(&self, action: &str) -> Option<&str> {
        let failed = self.failed_for(action)?;
        self.failed_shown.store(true, Ordering::Relaxed);
        Some(&failed.message)
    }

    /// The value of `field` in the form posting to `action`: as typed when the form was
    /// refused, else `current`.
    pub fn kept<'a>(&'a self, action: &str, field: &str, current: &'a str) -> &'a str {
        match self.failed_for(action) {
            Some(failed) => failed.form.text(field),
            None => current,
        }
    }

    /// Whether the box `field` = `value` of the form posting to `action` is ticked: as sent
    /// when the form was refused, else `current`.
    pub fn ticked(&self, action: &str, field: &str, value: &str, current: bool) -> bool {
        match self.failed_for(action) {
            Some(failed) => failed.form.all(field).any(|v| v == value),
            None => current,
        }
    }

    /// A refusal no form of the page showed (the layout shows it instead, so it is never
    /// lost).
    pub fn unshown_error(&self) -> Option<&str> {
        self.failed
            .as_ref()
            .filter(|_| !self.failed_shown.load(Ordering::Relaxed))
            .map(|f| f.message.as_str())
    }
}

/// An error message for a page: the API's messages quote names in backticks (Markdown),
/// which a page shows as quotation marks.
pub fn readable(message: &str) -> String {
    let mut out = String::with_capacity(message.len() + 8);
    let mut open = false;
    for c in message.chars() {
        match c {
            '`' => {
                out.push(if open { '”' } else { '“' });
                open = !open;
            }
            c => out.push(c),
        }
    }
    out
}

/// The links between the pages of a log: to the newest page (when on a later one) and to
/// the next older page (when there is one).
pub struct Pager {
    pub newest: Option<String>,
    pub older: Option<String>,
    /// The links' words: "Newest" and "Older", or for a listing oldest first "Oldest" and
    /// "Newer".
    pub first_label: &'static str,
    pub next_label: &'static str,
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
            first_label: "Newest",
            next_label: "Older",
        }
    }

    /// The pager of a listing shown oldest first.
    pub fn oldest_first(self) -> Pager {
        Pager {
            first_label: "Oldest",
            next_label: "Newer",
            ..self
        }
    }
}

/// The message of a `?done=` code set by a redirect after a successful form post. Only these
/// fixed texts can appear, so a link cannot put words on the page.
pub fn flash(req: &Request) -> Option<&'static str> {
    let params = crate::http::reply::query_params(&req.query);
    Some(match params.get("done")?.as_str() {
        "created" => "Endpoint created.",
        "deleted" => {
            "Endpoint deleted: its keys stopped working and its data is being purged. Until the \
             server's operator runs intake compact (on PostgreSQL, VACUUM FULL), copies of the \
             purged data stay in the free space of the server's files."
        }
        "saved" => "Changes saved.",
        "activated" => "The endpoint is active again.",
        "deactivated" => "The endpoint is inactive: data calls are refused with 403.",
        "requested" => "Deploy requested: the owner has been asked to approve.",
        "approved" | "deployed" => "Deployed: the production key works now.",
        "rejected" => "Deploy request rejected.",
        "withdrawn" => "Deploy request withdrawn: the owner's notification says so.",
        "reissued" => "Signing secret reissued. The previous one keeps signing for 24 hours.",
        "key-rotated" => "New key issued, shown below: copy it now.",
        "key-revoked" => "Previous key revoked: calls with it are refused from now on.",
        "invited" => "Invitation created.",
        "revoked" => "Invitation revoked.",
        "removed" => "Collaborator removed; their keys stopped working.",
        "permissions" => "Permissions saved.",
        "webhook" => "Webhook settings saved.",
        "webhook-removed" => "Webhook removed.",
        "record-deleted" => "Record deletion queued: it disappears from the list in a moment.",
        "record-created" => "Record created: webhooks announce it as record.created.",
        "record-replaced" => "Record replaced: webhooks announce it as record.replaced.",
        "erasure-started" => {
            "Erasure started: the matching records are being erased in the background, newest \
             first. This page shows how far it got."
        }
        "subscription-added" => "Subscription added.",
        "subscription-saved" => "Subscription saved.",
        "subscription-removed" => {
            "Subscription deleted. Its pending deliveries were kept: they are still sent."
        }
        "subscription-removed-cancelled" => {
            "Subscription deleted. Its pending deliveries were cancelled: the delivery log shows \
             them as cancelled, and each can be redelivered from there."
        }
        "recovery-started" => {
            "Recovery started: the deliveries of the window are being scheduled again."
        }
        "redelivered" => "Redelivery scheduled.",
        "retried" => "The next attempt is due now (with one in flight: as soon as it ends).",
        "mail" => "Test e-mail queued; its status shows below.",
        "read" => "Notification marked as read.",
        "all-read" => "Every notification is marked as read.",
        "accepted" => "Invitation accepted: you are now a collaborator on this endpoint.",
        "welcome" => "Your owner account is ready.",
        "password-changed" => "Password changed. Your other sessions were signed out.",
        "password-reset" => {
            "Your new password is set and every session of the account was signed out: log in \
             with it."
        }
        "token-revoked" => "Token revoked: calls with it are refused from now on.",
        "signed-out-others" => "Your other sessions were signed out.",
        _ => return None,
    })
}

/// The `environment` query parameter of a page showing one environment: sandbox unless it
/// says production (400 `invalid_parameter` for anything else).
pub fn environment(
    params: &std::collections::HashMap<String, String>,
) -> Result<Environment, Error> {
    match params.get("environment").map(String::as_str) {
        None | Some("") => Ok(Environment::Sandbox),
        Some(text) => crate::domain::webhooks::subscriptions::environment_param(text),
    }
}

/// A stored text as every page shows it (a record's payload, an event body, a receiver's
/// answer): indented when it is JSON, and then marked as such for the highlighter; as it is
/// otherwise.
pub struct Pretty {
    pub text: String,
    pub json: bool,
}

impl Pretty {
    pub fn of(text: &str) -> Pretty {
        match indented(text) {
            Some(text) => Pretty { text, json: true },
            None => Pretty {
                text: text.to_string(),
                json: false,
            },
        }
    }
}

/// `text` indented two spaces a level, when it is JSON. Indented as text, token by token,
/// never parsed into values and written again: that would round numbers past 2^53 and write
/// `1E2` as `100`, and a body must show as it was sent.
fn indented(text: &str) -> Option<String> {
    serde_json::from_str::<serde::de::IgnoredAny>(text).ok()?;
    let mut out = String::with_capacity(text.len() * 2);
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut chars = text.chars().peekable();
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        out.extend(std::iter::repeat_n("  ", depth));
    };
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '[' => {
                out.push(c);
                // An empty object or array stays on its line.
                while chars.peek().is_some_and(|c| c.is_ascii_whitespace()) {
                    chars.next();
                }
                if chars.peek().is_some_and(|&n| n == '}' || n == ']') {
                    out.extend(chars.next());
                } else {
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c if c.is_ascii_whitespace() => {}
            c => out.push(c),
        }
    }
    Some(out)
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

pub use crate::http::reply::see_other as redirect;

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
    fn messages_quote_names_instead_of_backticks() {
        assert_eq!(
            super::readable("`name` must be 1 to 100 characters."),
            "“name” must be 1 to 100 characters."
        );
        assert_eq!(super::readable("plain"), "plain");
    }

    #[test]
    fn times_show_to_the_second_in_utc() {
        assert_eq!(
            super::when("2026-11-22T09:36:07.685861Z"),
            "2026-11-22 09:36:07 UTC"
        );
        assert_eq!(super::when("soon"), "soon");
    }

    #[test]
    fn json_is_indented_as_sent_and_anything_else_is_left_alone() {
        let body = r#"{"type":"record.created","data":{"n":12345678901234567890123,"f":1E2,"s":"a,b:{c}\"]","e":{},"l":[ ]},"t":[1,2]}"#;
        assert_eq!(
            super::indented(body).unwrap(),
            r#"{
  "type": "record.created",
  "data": {
    "n": 12345678901234567890123,
    "f": 1E2,
    "s": "a,b:{c}\"]",
    "e": {},
    "l": []
  },
  "t": [
    1,
    2
  ]
}"#
        );
        for text in ["not json", "{\"a\":", "", "<html>ok</html>"] {
            assert_eq!(super::indented(text), None);
        }
        assert_eq!(super::indented(" 42 ").unwrap(), "42");
        // Repeated keys stay, as stored.
        assert_eq!(
            super::indented(r#"{"a":1,"a":123456789012345678901234567890}"#).unwrap(),
            "{\n  \"a\": 1,\n  \"a\": 123456789012345678901234567890\n}"
        );
    }
}

/// What an error page says of `err`: the API's message, except where that speaks of the API
/// key a data call sends, which a dashboard visitor never did.
fn page_message(err: &HttpError) -> String {
    match err {
        HttpError::Service(Error::EndpointNotFound) => {
            "No endpoint with that slug exists among yours: it may have been deleted, or you are \
             no longer a collaborator on it."
                .to_string()
        }
        err => readable(&err.to_string()),
    }
}

#[derive(Template)]
#[template(path = "dashboard/error.html")]
struct ErrorPage {
    layout: Layout,
    status: u16,
    code: &'static str,
    message: String,
    request_id: String,
}

/// The response for a failure: the login redirect, or an error page in `layout` (with the
/// navigation of a logged-in visitor, so the page is never a dead end).
pub fn failure(req: &Request, path: &str, failure: Failure, mut layout: Layout) -> Response {
    let mut retry_after = None;
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
            retry_after = error::retry_after(&err);
            (status, code, page_message(&err))
        }
    };
    layout.title = "Error".to_string();
    layout.flash = None;
    layout.failed = None;
    let page = ErrorPage {
        layout,
        status: status.as_u16(),
        code,
        message,
        request_id: req.request_id.clone(),
    };
    let mut response = match page.render() {
        Ok(body) => html(status, body),
        Err(_) => html(status, format!("{} {code}", status.as_u16())),
    };
    if let Some(seconds) = retry_after {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, seconds.into());
    }
    response
}
