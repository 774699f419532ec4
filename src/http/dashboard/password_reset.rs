//! "Forgot password?": the page that asks for a reset link by e-mail (or, without `[smtp]`,
//! says how the operator makes one), and the page a link opens, with the new-password form.
//! Both are for logged-out visitors; the services are the management API's.

use askama::Template;
use http::StatusCode;

use super::auth::visitor_csrf;
use super::page::{Layout, Outcome, redirect, render_with};
use super::visitor::visitor_form;
use crate::domain::accounts;
use crate::domain::error::Error;
use crate::domain::password_reset::{self, ResetCompletion, ResetRequest};
use crate::http::app::App;
use crate::http::error::{HttpError, status_and_code};
use crate::http::request::Request;

/// What the "Reset your password" page shows.
pub enum ForgotState {
    /// The form, with why the last post was refused.
    Form(Option<String>),
    /// The same answer for every address.
    Sent,
    /// The server cannot send e-mail.
    NoMail,
}

#[derive(Template)]
#[template(path = "dashboard/forgot_password.html")]
struct ForgotPage {
    layout: Layout,
    state: ForgotState,
    email: String,
}

fn forgot(
    app: &App,
    req: &Request,
    status: StatusCode,
    state: ForgotState,
    email: String,
) -> Outcome {
    let csrf = visitor_csrf(app, req);
    let page = ForgotPage {
        layout: Layout::new("Reset your password", None, csrf.token.clone(), None),
        state,
        email,
    };
    Ok(csrf.attach(render_with(status, &page)?))
}

/// `GET /dashboard/password-reset`.
pub fn forgot_page(app: &App, req: &Request) -> Outcome {
    let state = if app.mailer.smtp_configured() {
        ForgotState::Form(None)
    } else {
        ForgotState::NoMail
    };
    forgot(app, req, StatusCode::OK, state, String::new())
}

/// `POST /dashboard/password-reset`: the same page whether the address has an account or not.
pub async fn send_link(app: &App, req: &mut Request) -> Outcome {
    let form = visitor_form(app, req).await?;
    let email = form.text("email").trim().to_string();
    let asked = password_reset::request(
        &app.handles,
        app.logins.as_ref(),
        req.client,
        ResetRequest {
            email: email.clone(),
        },
        &app.config.public_url(),
        app.mailer.smtp_configured(),
    );
    match asked {
        Ok(()) => forgot(app, req, StatusCode::OK, ForgotState::Sent, email),
        Err(Error::MailNotConfigured) => {
            forgot(app, req, StatusCode::CONFLICT, ForgotState::NoMail, email)
        }
        Err(err @ Error::TooManyLoginAttempts { .. }) => {
            let message = err.to_string();
            let (status, _) = status_and_code(&HttpError::Service(err));
            forgot(app, req, status, ForgotState::Form(Some(message)), email)
        }
        Err(err) => Err(err.into()),
    }
}

#[derive(Template)]
#[template(path = "dashboard/new_password.html")]
struct NewPasswordPage {
    layout: Layout,
    token: String,
    /// The account the link resets; `None` when the link no longer works.
    email: Option<String>,
    error: Option<String>,
    min_password: usize,
}

fn new_password_form(app: &App, req: &Request, token: &str, error: Option<String>) -> Outcome {
    let csrf = visitor_csrf(app, req);
    let account = match password_reset::check(app.handles.store.as_ref(), app.handles.now(), token)
    {
        Ok(account) => Some(account),
        Err(Error::PasswordResetLinkInvalid) => None,
        Err(err) => return Err(err.into()),
    };
    let status = match (&account, &error) {
        (None, _) => StatusCode::GONE,
        (Some(_), Some(_)) => StatusCode::BAD_REQUEST,
        (Some(_), None) => StatusCode::OK,
    };
    let page = NewPasswordPage {
        layout: Layout::new("Choose a new password", None, csrf.token.clone(), None),
        token: token.to_string(),
        email: account.map(|a| a.email),
        error,
        min_password: accounts::MIN_PASSWORD_CHARS,
    };
    Ok(csrf.attach(render_with(status, &page)?))
}

/// `GET /dashboard/password-reset/{token}`: the form, or why the link no longer works.
pub fn new_password_page(app: &App, req: &Request, token: &str) -> Outcome {
    new_password_form(app, req, token, None)
}

/// `POST /dashboard/password-reset/{token}`: sets the password, then the login page says so.
pub async fn set_password(app: &App, req: &mut Request, token: &str) -> Outcome {
    let form = visitor_form(app, req).await?;
    if form.text("new_password") != form.text("new_password_again") {
        return new_password_form(app, req, token, Some("The two passwords differ.".into()));
    }
    let completion = ResetCompletion {
        token: token.to_string(),
        new_password: form.text("new_password").to_string(),
    };
    match password_reset::complete(&app.handles, completion).await {
        Ok(_) => Ok(redirect("/dashboard/login?done=password-reset")),
        Err(err @ Error::InvalidRequest(_)) => {
            new_password_form(app, req, token, Some(err.to_string()))
        }
        Err(Error::PasswordResetLinkInvalid) => new_password_form(app, req, token, None),
        Err(err) => Err(err.into()),
    }
}
