//! Logging in and out, the first-run owner setup, and the invitation link a collaborator
//! opens (`/invitations/{token}`): accept as the logged-in account, or choose a password to
//! create the invited account.

use askama::Template;
use http::{HeaderValue, StatusCode, header};
use warp::reply::Response;

use super::page::{Failure, Layout, Outcome, redirect, render_with, safe_next};
use super::security;
use super::visitor::{User, maybe_signed_in, signed_in, user_form, visitor_form};
use crate::domain::accounts;
use crate::domain::collaborators::{Acceptance, Acceptor, InvitationPreview};
use crate::domain::error::{Error, GoneReason};
use crate::domain::sessions::{self, Login, Opened};
use crate::http::app::App;
use crate::http::error::{HttpError, status_and_code};
use crate::http::reply::query_params;
use crate::http::request::Request;
use crate::http::session::{open_session, set_cookie};

/// The CSRF token for a logged-out visitor's form, and the cookie to set when it is new.
pub(super) struct VisitorCsrf {
    pub(super) token: String,
    set_cookie: Option<String>,
}

pub(super) fn visitor_csrf(app: &App, req: &Request) -> VisitorCsrf {
    let (secret, fresh) = security::visitor_secret(&req.headers);
    let secure = app.config.secure_cookies();
    VisitorCsrf {
        token: security::token(&secret),
        set_cookie: fresh.then(|| security::visitor_cookie(&secret, secure)),
    }
}

impl VisitorCsrf {
    pub(super) fn attach(self, mut response: Response) -> Response {
        if let Some(v) = self.set_cookie.and_then(|c| HeaderValue::from_str(&c).ok()) {
            response.headers_mut().append(header::SET_COOKIE, v);
        }
        response
    }
}

/// A redirect that also sets the cookie of a session just opened.
fn into_session(app: &App, opened: &Opened, to: &str) -> Response {
    let mut response = redirect(to);
    set_cookie(
        app,
        &mut response,
        &opened.token,
        app.config.accounts.session_ttl.as_secs(),
    );
    response
}

/// `GET /dashboard`: the endpoints, or the login page.
pub fn home(app: &App, req: &Request) -> Outcome {
    Ok(match maybe_signed_in(app, req)? {
        Some(_) => redirect("/dashboard/endpoints"),
        None => redirect("/dashboard/login"),
    })
}

#[derive(Template)]
#[template(path = "dashboard/login.html")]
struct LoginPage {
    layout: Layout,
    next: String,
    email: String,
    error: Option<String>,
}

fn login_form(
    app: &App,
    req: &Request,
    status: StatusCode,
    email: String,
    error: Option<String>,
) -> Outcome {
    let csrf = visitor_csrf(app, req);
    let params = query_params(&req.query);
    let page = LoginPage {
        layout: Layout::new("Log in", None, csrf.token.clone(), super::page::flash(req)),
        next: safe_next(params.get("next").map(String::as_str)),
        email,
        error,
    };
    Ok(csrf.attach(render_with(status, &page)?))
}

/// `GET /dashboard/login`.
pub fn login_page(app: &App, req: &Request) -> Outcome {
    if maybe_signed_in(app, req)?.is_some() {
        let params = query_params(&req.query);
        return Ok(redirect(&safe_next(params.get("next").map(String::as_str))));
    }
    login_form(app, req, StatusCode::OK, String::new(), None)
}

/// `POST /dashboard/login`: a wrong password shows the form again with the reason.
pub async fn login(app: &App, req: &mut Request) -> Outcome {
    let form = visitor_form(app, req).await?;
    let email = form.text("email").to_string();
    let attempt = Login {
        email: email.clone(),
        password: form.text("password").to_string(),
    };
    let opened = sessions::login(
        &app.handles,
        app.logins.as_ref(),
        app.config.accounts.session_ttl,
        attempt,
        req.client,
    )
    .await;
    match opened {
        Ok(opened) => Ok(into_session(app, &opened, &safe_next(form.get("next")))),
        Err(
            err @ (Error::InvalidCredentials
            | Error::TooManyLoginAttempts { .. }
            | Error::AccountSuspended),
        ) => {
            let message = err.to_string();
            let (status, _) = status_and_code(&HttpError::Service(err));
            req.query = format!(
                "next={}",
                form_urlencoded::byte_serialize(form.text("next").as_bytes()).collect::<String>()
            );
            login_form(app, req, status, email, Some(message))
        }
        Err(err) => Err(err.into()),
    }
}

/// `POST /dashboard/logout`: ends the session and clears the cookie.
pub async fn logout(app: &App, req: &mut Request) -> Outcome {
    let user: User = signed_in(app, req)?;
    user_form(app, req, &user).await?;
    sessions::logout(&app.handles, user.session())?;
    let mut response = redirect("/dashboard/login");
    set_cookie(app, &mut response, "", 0);
    Ok(response)
}

#[derive(Template)]
#[template(path = "dashboard/setup.html")]
struct SetupPage {
    layout: Layout,
    token: String,
    email: String,
    error: Option<String>,
    min_password: usize,
}

fn setup_form(
    app: &App,
    req: &Request,
    token: String,
    email: String,
    error: Option<String>,
) -> Outcome {
    let csrf = visitor_csrf(app, req);
    let status = if error.is_some() {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    };
    let page = SetupPage {
        layout: Layout::new("Create the owner account", None, csrf.token.clone(), None),
        token,
        email,
        error,
        min_password: accounts::MIN_PASSWORD_CHARS,
    };
    Ok(csrf.attach(render_with(status, &page)?))
}

/// The setup token of a request, if it is the live one (404 otherwise: the page does not
/// exist for anyone without the link, nor once the owner exists).
fn live_setup_token(app: &App, token: Option<&str>) -> Result<String, Failure> {
    match token {
        Some(token) if app.dashboard.setup.valid(token, app.handles.now()) => Ok(token.to_string()),
        _ => Err(Failure::NotFound),
    }
}

/// `GET /dashboard/setup?token=…`.
pub fn setup_page(app: &App, req: &Request) -> Outcome {
    let params = query_params(&req.query);
    let token = live_setup_token(app, params.get("token").map(String::as_str))?;
    setup_form(app, req, token, String::new(), None)
}

/// `POST /dashboard/setup`: creates the owner account, uses the link up, logs in.
pub async fn setup(app: &App, req: &mut Request) -> Outcome {
    let form = visitor_form(app, req).await?;
    let token = live_setup_token(app, form.get("token"))?;
    let email = form.text("email").to_string();
    let password = form.text("password").to_string();
    if password != form.text("password_again") {
        return setup_form(
            app,
            req,
            token,
            email,
            Some("The two passwords differ.".into()),
        );
    }
    let now = app.handles.now();
    let account = match accounts::create_owner(&app.handles, now, &email, password).await {
        Ok(account) => account,
        Err(err @ Error::InvalidRequest(_)) => {
            return setup_form(app, req, token, email, Some(err.to_string()));
        }
        Err(err) => return Err(err.into()),
    };
    app.dashboard.setup.consume(&token, now);
    log::info!("the owner account was created through the setup link");
    let opened = open_session(app, account)?;
    Ok(into_session(
        app,
        &opened,
        "/dashboard/endpoints?done=welcome",
    ))
}

#[derive(Template)]
#[template(path = "dashboard/invitation.html")]
struct InvitationPage {
    layout: Layout,
    token: String,
    invitation: InvitationPreview,
    /// The logged-in account's address, if any.
    signed_in_as: Option<String>,
    login_url: String,
    min_password: usize,
    error: Option<String>,
}

#[derive(Template)]
#[template(path = "dashboard/invitation_gone.html")]
struct InvitationGonePage {
    layout: Layout,
    reason: GoneReason,
    signed_in: bool,
}

fn invitation_form(app: &App, req: &Request, token: &str, error: Option<String>) -> Outcome {
    let user = maybe_signed_in(app, req)?;
    let invitation = match app.collaborators().preview(token) {
        Ok(invitation) => invitation,
        // A link used up, revoked or expired says so, and where to go from here.
        Err(Error::InvitationGone(reason)) => {
            let layout = match &user {
                Some(user) => user.layout(app, "Invitation", "endpoints", req),
                None => Layout::new("Invitation", None, String::new(), None),
            };
            let page = InvitationGonePage {
                layout,
                reason,
                signed_in: user.is_some(),
            };
            return render_with(StatusCode::GONE, &page);
        }
        Err(err) => return Err(err.into()),
    };
    let (layout, csrf) = match &user {
        Some(user) => (user.layout(app, "Invitation", "endpoints", req), None),
        None => {
            let csrf = visitor_csrf(app, req);
            (
                Layout::new("Invitation", None, csrf.token.clone(), None),
                Some(csrf),
            )
        }
    };
    let next: String =
        form_urlencoded::byte_serialize(format!("/invitations/{token}").as_bytes()).collect();
    let status = if error.is_some() {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    };
    let page = InvitationPage {
        layout,
        token: token.to_string(),
        invitation,
        signed_in_as: user.map(|u| u.account.email),
        login_url: format!("/dashboard/login?next={next}"),
        min_password: accounts::MIN_PASSWORD_CHARS,
        error,
    };
    let response = render_with(status, &page)?;
    Ok(match csrf {
        Some(csrf) => csrf.attach(response),
        None => response,
    })
}

/// `GET /invitations/{token}`: what the invitation offers and how to accept it.
pub fn invitation_page(app: &App, req: &Request, token: &str) -> Outcome {
    invitation_form(app, req, token, None)
}

/// `POST /invitations/{token}/accept`: as the logged-in account, or creating the invited
/// account with the chosen password (then logged in).
pub async fn accept_invitation(app: &App, req: &mut Request, token: &str) -> Outcome {
    let (acceptor, is_new) = match maybe_signed_in(app, req)? {
        Some(user) => {
            user_form(app, req, &user).await?;
            (Acceptor::Account(user.account), false)
        }
        None => {
            let form = visitor_form(app, req).await?;
            if form.text("password") != form.text("password_again") {
                return invitation_form(app, req, token, Some("The two passwords differ.".into()));
            }
            let acceptance = Acceptance {
                password: Some(form.text("password").to_string()),
            };
            (Acceptor::NewAccount(acceptance), true)
        }
    };
    let (account, endpoint) = match app.collaborators().accept(token, acceptor).await {
        Ok(accepted) => accepted,
        Err(err @ Error::InvalidRequest(_)) => {
            return invitation_form(app, req, token, Some(err.to_string()));
        }
        Err(err) => return Err(err.into()),
    };
    let to = format!("/dashboard/endpoints/{}?done=accepted", endpoint.slug);
    if is_new {
        let opened = open_session(app, account)?;
        return Ok(into_session(app, &opened, &to));
    }
    Ok(redirect(&to))
}
