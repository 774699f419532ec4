//! Who is asking: the account of the session cookie, the layout of its pages, and reading a
//! form post only after its CSRF token and origin check out.

use super::form::Form;
use super::page::{FailedForm, Failure, Layout, Nav};
use super::security;
use crate::domain::accounts;
use crate::domain::error::Error;
use crate::domain::notifications;
use crate::domain::sessions;
use crate::http::app::App;
use crate::http::reply::cookie;
use crate::http::request::{MAX_MANAGE_BODY, Request};
use crate::store::AccountRow;

/// A logged-in account and the CSRF token of its forms.
pub struct User {
    pub account: AccountRow,
    pub csrf: String,
    session: String,
}

impl User {
    /// The layout of a page of this account in `section`.
    pub fn layout(
        &self,
        app: &App,
        title: impl Into<String>,
        section: &'static str,
        req: &Request,
    ) -> Layout {
        // The unread count is a nicety: a failure to read it must not fail the page.
        let unread = notifications::list(app.handles.store.as_ref(), self.account.id, true)
            .map_or(0, |n| n.len());
        let nav = Nav {
            email: self.account.email.clone(),
            server_owner: accounts::require_server_owner(&self.account).is_ok(),
            unread,
            section,
        };
        let mut layout = Layout::new(title, Some(nav), self.csrf.clone(), super::page::flash(req));
        layout.failed = req.extensions.get::<FailedForm>().cloned();
        layout
    }

    /// The session token (to end it at logout).
    pub fn session(&self) -> &str {
        &self.session
    }
}

/// The logged-in account, or [`Failure::Login`] (redirect to the login page).
pub fn signed_in(app: &App, req: &Request) -> Result<User, Failure> {
    let session = cookie(&req.headers, sessions::COOKIE).ok_or(Failure::Login)?;
    let account =
        match sessions::authenticate(app.handles.store.as_ref(), app.handles.now(), session) {
            Ok(account) => account,
            Err(Error::SessionExpired) => return Err(Failure::Login),
            Err(err) => return Err(Failure::Service(err.into())),
        };
    Ok(User {
        account,
        csrf: security::token(session),
        session: session.to_string(),
    })
}

/// The logged-in account, if any.
pub fn maybe_signed_in(app: &App, req: &Request) -> Result<Option<User>, Failure> {
    match signed_in(app, req) {
        Ok(user) => Ok(Some(user)),
        Err(Failure::Login) => Ok(None),
        Err(other) => Err(other),
    }
}

/// A form posted by `user`, read only if it carries their CSRF token and came from here.
pub async fn user_form(app: &App, req: &mut Request, user: &User) -> Result<Form, Failure> {
    checked_form(app, req, &user.session, MAX_MANAGE_BODY).await
}

/// [`user_form`] for a form whose body may be up to `limit` bytes (the record editor's, which
/// carries a whole payload).
pub async fn large_user_form(
    app: &App,
    req: &mut Request,
    user: &User,
    limit: usize,
) -> Result<Form, Failure> {
    checked_form(app, req, &user.session, limit).await
}

/// A form posted by a logged-out visitor (login, setup, accepting an invitation).
pub async fn visitor_form(app: &App, req: &mut Request) -> Result<Form, Failure> {
    let (secret, fresh) = security::visitor_secret(&req.headers);
    if fresh {
        return Err(Failure::Csrf);
    }
    checked_form(app, req, &secret, MAX_MANAGE_BODY).await
}

async fn checked_form(
    app: &App,
    req: &mut Request,
    secret: &str,
    limit: usize,
) -> Result<Form, Failure> {
    if !crate::http::session::same_origin(&req.headers, app.config.public_url.as_deref()) {
        return Err(Failure::Csrf);
    }
    let form = Form::read(req, limit).await?;
    if !security::verify(secret, form.text(security::FIELD)) {
        return Err(Failure::Csrf);
    }
    // Kept for the page that shows the form again if the service refuses it (`page::refused`).
    req.extensions.insert(form.clone());
    Ok(form)
}
