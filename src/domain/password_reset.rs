//! Resetting a forgotten password with a link: asked for by e-mail address ("Forgot
//! password?", `POST /api/v1/auth/password-reset`), sent by e-mail, or made by the operator on
//! the command line (`intake account reset-password EMAIL`) when the server has no `[smtp]`.
//!
//! A link's token is random and kept only as its SHA-256; it works once, for [`LINK_TTL`], and
//! a new link of the same account replaces the one before. Using it sets the new password and
//! ends every session of the account in one commit. Asking for a link answers the same
//! whether the address has an account or not, and counts against the login limits
//! ([`LoginThrottle`]) as a failed login does, so nobody can flood an inbox or probe
//! addresses faster than the login form allows.

use std::net::IpAddr;
use std::time::Duration;

use crate::core::clock::Timestamp;
use crate::core::crypto::secret_hash;
use crate::core::ids::random_base32;
use crate::domain::accounts::{self, NewPassword};
use crate::domain::error::{Error, Result};
use crate::domain::handles::Handles;
use crate::domain::mail::{self, OutgoingMail};
use crate::domain::sessions::LoginThrottle;
use crate::store::{AccountRow, PasswordResetRow, Store, WriteTx};

/// How long a reset link works.
pub const LINK_TTL: Duration = Duration::from_secs(30 * 60);
/// What every link's token starts with; the OpenAPI document gives it as the token's pattern.
pub const TOKEN_PREFIX: &str = "ipr_";

/// Body of `POST /api/v1/auth/password-reset`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResetRequest {
    pub email: String,
}

/// Body of `POST /api/v1/auth/password-reset/complete`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResetCompletion {
    pub token: String,
    pub new_password: String,
}

/// Where the dashboard's new-password form for `token` is, under the server's public URL.
pub fn link(public_url: &str, token: &str) -> String {
    format!("{public_url}/dashboard/password-reset/{token}")
}

/// Sends a reset link to `request.email` when it is an account's address (and the account
/// is not suspended); answers `Ok` either way. Refused with [`Error::MailNotConfigured`] when
/// the server has no `[smtp]`, whatever the address.
pub fn request(
    handles: &Handles,
    throttle: &dyn LoginThrottle,
    client: Option<IpAddr>,
    request: ResetRequest,
    public_url: &str,
    smtp_configured: bool,
) -> Result<()> {
    if !smtp_configured {
        return Err(Error::MailNotConfigured);
    }
    let email = request.email.trim().to_lowercase();
    // Never given back: each request counts as a failed login of the address.
    throttle.reserve(handles.now(), &email, client)?;
    let Some(account) = handles.store.read()?.account_by_email(&email)? else {
        return Ok(());
    };
    if account.suspended {
        return Ok(());
    }
    let now = handles.now();
    let token = new_token();
    let url = link(public_url, &token);
    let mail = OutgoingMail {
        kind: "password_reset",
        to: account.email.clone(),
        subject: "Reset your intake password".into(),
        body: format!(
            "Someone, probably you, asked to reset the password of the account {email} on \
             {public_url}.\n\nChoose a new password here (the link works once, for 30 \
             minutes):\n\n{url}\n\nSetting it signs out every browser signed in to the \
             account. If you did not ask for this, ignore this message: your password stays \
             as it is.\n",
            email = account.email,
        ),
    };
    handles.write(|tx| {
        store_link(tx, &account, &token, now)?;
        mail::enqueue(tx, now, mail.clone())?;
        Ok(())
    })
}

/// A reset link for the account of `email`, for the operator to hand over
/// (`intake account reset-password EMAIL`); it replaces the account's earlier link.
pub fn issue(handles: &Handles, email: &str, public_url: &str) -> Result<String> {
    let email = accounts::normalize_email(email)?;
    let now = handles.now();
    let token = new_token();
    handles.write(|tx| {
        let account = tx
            .account_by_email(&email)?
            .ok_or_else(|| Error::InvalidRequest(format!("No account has the address {email}.")))?;
        store_link(tx, &account, &token, now)
    })?;
    Ok(link(public_url, &token))
}

fn new_token() -> String {
    format!("{TOKEN_PREFIX}{}", random_base32(32))
}

/// Stores the link of `token` in `tx`, in place of the account's earlier one.
fn store_link(
    tx: &mut dyn WriteTx,
    account: &AccountRow,
    token: &str,
    now: Timestamp,
) -> Result<()> {
    tx.delete_password_resets_of(account.id)?;
    let row = PasswordResetRow {
        account_id: account.id,
        created_at: now,
        expires_at: now.plus(LINK_TTL),
    };
    tx.insert_password_reset(&secret_hash(token), &row)?;
    Ok(())
}

/// The account whose link `token` is, while the link works.
pub fn check(store: &dyn Store, now: Timestamp, token: &str) -> Result<AccountRow> {
    let read = store.read()?;
    let row = read
        .password_reset(&secret_hash(token))?
        .filter(|row| row.expires_at > now)
        .ok_or(Error::PasswordResetLinkInvalid)?;
    read.account(row.account_id)?
        .ok_or(Error::PasswordResetLinkInvalid)
}

/// Sets the new password of the link's account, uses the link up and ends every session of
/// the account, in one commit; returns the account.
pub async fn complete(handles: &Handles, completion: ResetCompletion) -> Result<AccountRow> {
    let ResetCompletion {
        token,
        new_password,
    } = completion;
    // The body is checked before the link: a malformed request is a 400, not a 410.
    if !token.starts_with(TOKEN_PREFIX) {
        return Err(Error::InvalidRequest(format!(
            "`token` is the last part of a password reset link, which starts with {TOKEN_PREFIX}."
        )));
    }
    accounts::valid_password(&new_password)?;
    check(handles.store.as_ref(), handles.now(), &token)?;
    let password = NewPassword::hash(new_password).await?;
    let hash = secret_hash(&token);
    let now = handles.now();
    handles.write(|tx| {
        // Checked again in the commit: a link used meanwhile (or replaced) stays used.
        let row = tx
            .password_reset(&hash)?
            .filter(|row| row.expires_at > now)
            .ok_or(Error::PasswordResetLinkInvalid)?;
        accounts::set_password_in(tx, row.account_id, &password)?;
        tx.delete_password_resets_of(row.account_id)?;
        tx.delete_sessions_of(row.account_id, None)?;
        tx.account(row.account_id)?
            .ok_or(Error::PasswordResetLinkInvalid)
    })
}
