//! The account page (`/dashboard/account`, the header's e-mail address links to it): change
//! the password, create, list and revoke personal API tokens, see the account's sessions and
//! sign out the others. The forms call the services the management API calls.
//!
//! A token's secret is kept only as its hash, so the page that shows it is the answer to the
//! post that created it (not a redirect, whose page could not know it): it is shown once.

use askama::Template;
use http::StatusCode;

use super::page::{Layout, Outcome, redirect, render, render_with};
use super::visitor::{User, signed_in, user_form};
use crate::domain::accounts::{self, NewToken, NewTokenView, PasswordChange, TokenView};
use crate::domain::error::Error;
use crate::domain::sessions::{self, SessionView};
use crate::http::app::App;
use crate::http::request::Request;

/// The expiries the token form offers, in days, with their labels; `date` takes the date
/// field, `never` none.
pub const EXPIRY_CHOICES: [(&str, &str); 5] = [
    ("30", "30 days"),
    ("90", "90 days"),
    ("365", "1 year"),
    ("never", "No expiry"),
    ("date", "On the date below"),
];

#[derive(Template)]
#[template(path = "dashboard/account.html")]
struct AccountPage {
    layout: Layout,
    email: String,
    server_owner: bool,
    min_password: usize,
    tokens: Vec<TokenView>,
    /// The token just created, shown this once.
    new_token: Option<NewTokenView>,
    sessions: Vec<SessionView>,
    expiry_choices: &'static [(&'static str, &'static str)],
}

impl AccountPage {
    fn other_sessions(&self) -> usize {
        self.sessions.iter().filter(|s| !s.current).count()
    }
}

fn account_page(
    app: &App,
    req: &Request,
    user: &User,
    new_token: Option<NewTokenView>,
) -> Result<AccountPage, super::page::Failure> {
    let store = app.handles.store.as_ref();
    let now = app.handles.now();
    Ok(AccountPage {
        layout: user.layout(app, "Account", "account", req),
        email: user.account.email.clone(),
        server_owner: accounts::require_server_owner(&user.account).is_ok(),
        min_password: accounts::MIN_PASSWORD_CHARS,
        tokens: accounts::list_tokens(store, now, &user.account)?,
        new_token,
        sessions: sessions::list(store, now, &user.account, Some(user.session()))?,
        expiry_choices: &EXPIRY_CHOICES,
    })
}

/// `GET /dashboard/account`.
pub fn page(app: &App, req: &Request) -> Outcome {
    let user = signed_in(app, req)?;
    render(&account_page(app, req, &user, None)?)
}

/// `POST /dashboard/account/password`: the current password is checked; the other sessions
/// end.
pub async fn change_password(app: &App, req: &mut Request) -> Outcome {
    let user = signed_in(app, req)?;
    let form = user_form(app, req, &user).await?;
    if form.text("new_password") != form.text("new_password_again") {
        return Err(Error::InvalidRequest("The two new passwords differ.".into()).into());
    }
    let change = PasswordChange {
        current_password: form.text("current_password").to_string(),
        new_password: form.text("new_password").to_string(),
    };
    sessions::change_password(
        &app.handles,
        app.logins.as_ref(),
        req.client,
        &user.account,
        change,
        Some(user.session()),
    )
    .await?;
    Ok(redirect("/dashboard/account?done=password-changed"))
}

/// `POST /dashboard/account/tokens`: answers with the page showing the new token once.
pub async fn create_token(app: &App, req: &mut Request) -> Outcome {
    let user = signed_in(app, req)?;
    let form = user_form(app, req, &user).await?;
    let expires_at = match form.text("expires") {
        "never" => None,
        "date" => Some(form.text("expires_on").to_string()),
        days => {
            let days: u64 = days
                .parse()
                .map_err(|_| Error::InvalidRequest("Choose when the token expires.".into()))?;
            let at = app
                .handles
                .now()
                .plus(std::time::Duration::from_secs(days * 86_400));
            Some(at.to_rfc3339())
        }
    };
    let new = NewToken {
        name: form.text("name").to_string(),
        expires_at,
    };
    let created = accounts::create_token(&app.handles, &user.account, new)?;
    let page = account_page(app, req, &user, Some(created))?;
    render_with(StatusCode::CREATED, &page)
}

/// `POST /dashboard/account/tokens/{id}/revoke`.
pub async fn revoke_token(app: &App, req: &mut Request, id: &str) -> Outcome {
    let user = signed_in(app, req)?;
    user_form(app, req, &user).await?;
    accounts::revoke_token(&app.handles, &user.account, id)?;
    Ok(redirect("/dashboard/account?done=token-revoked"))
}

/// `POST /dashboard/account/sessions/sign-out-others`.
pub async fn sign_out_others(app: &App, req: &mut Request) -> Outcome {
    let user = signed_in(app, req)?;
    user_form(app, req, &user).await?;
    sessions::sign_out_others(&app.handles, &user.account, Some(user.session()))?;
    Ok(redirect("/dashboard/account?done=signed-out-others"))
}
