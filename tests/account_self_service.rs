//! The management API of account self-service (issue #42, item 8), on an in-process server on a
//! manual clock so that expiry is reached by moving time: personal tokens with an expiry, the
//! account's sessions listed and the others signed out, and password reset links (mailed
//! through a real SMTP sink, used once, for 30 minutes, the same answer for any address,
//! limited like logins, refused without `[smtp]`).

use crate::common;

use std::time::Duration;

use common::in_process::InProcessServer;
use common::in_process::at;
use common::smtp::{Received, SmtpServer};
use common::*;
use serde_json::{Value, json};

const START: &str = "2026-11-29T12:00:00Z";
const NEW_PASSWORD: &str = "a-new-long-password";
const MAIL_WAIT: Duration = Duration::from_secs(30);

/// One call to the server `s` with a token, a session cookie, or neither.
fn call(s: &ServerClient, method: &str, path: &str, auth: Auth, body: Option<&Value>) -> Resp {
    let header;
    let headers: Vec<(&str, &str)> = match auth {
        Auth::Anon => Vec::new(),
        Auth::Token(token) => {
            header = format!("Bearer {token}");
            vec![("Authorization", header.as_str())]
        }
        Auth::Session(cookie) => {
            header = format!("intake_session={cookie}");
            vec![("Cookie", header.as_str())]
        }
    };
    try_send_json(
        &s.agent,
        &format!("{}{path}", s.base_url()),
        method,
        &headers,
        body,
    )
    .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
}

#[derive(Clone, Copy)]
enum Auth<'a> {
    Anon,
    Token(&'a str),
    Session(&'a str),
}

/// Logs in with the API; returns the session cookie's value.
fn login(s: &ServerClient, password: &str) -> String {
    let r = call(
        s,
        "POST",
        "/api/v1/auth/login",
        Auth::Anon,
        Some(&json!({ "email": OWNER_EMAIL, "password": password })),
    );
    assert_status(&r, 200);
    let header = r.header("set-cookie").expect("Set-Cookie");
    let pair = header.split(';').next().unwrap_or_default();
    pair.strip_prefix("intake_session=")
        .expect("the session cookie")
        .to_string()
}

fn login_status(s: &ServerClient, password: &str) -> u16 {
    call(
        s,
        "POST",
        "/api/v1/auth/login",
        Auth::Anon,
        Some(&json!({ "email": OWNER_EMAIL, "password": password })),
    )
    .status
}

fn whoami(s: &ServerClient, auth: Auth) -> u16 {
    call(s, "GET", "/api/v1/manage/account", auth, None).status
}

fn ask_reset(s: &ServerClient, email: &str) -> Resp {
    call(
        s,
        "POST",
        "/api/v1/auth/password-reset",
        Auth::Anon,
        Some(&json!({ "email": email })),
    )
}

fn complete_reset(s: &ServerClient, token: &str, password: &str) -> Resp {
    call(
        s,
        "POST",
        "/api/v1/auth/password-reset/complete",
        Auth::Anon,
        Some(&json!({ "token": token, "new_password": password })),
    )
}

/// The reset e-mails received so far, oldest first.
fn reset_mails(smtp: &SmtpServer) -> Vec<Received> {
    smtp.messages()
        .into_iter()
        .filter(|m| m.subject() == "Reset your intake password")
        .collect()
}

/// The `n`th reset e-mail (counting from 1), once it arrived, and the link's token.
fn nth_reset_token(s: &ServerClient, smtp: &SmtpServer, n: usize) -> String {
    let deadline = std::time::Instant::now() + MAIL_WAIT;
    while reset_mails(smtp).len() < n {
        assert!(std::time::Instant::now() < deadline, "no reset e-mail #{n}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mail = &reset_mails(smtp)[n - 1];
    assert_eq!(mail.to, [OWNER_EMAIL]);
    let body = mail.body_text();
    let link = body
        .lines()
        .find(|l| l.starts_with("http"))
        .unwrap_or_else(|| panic!("no link in:\n{body}"));
    let prefix = format!("{}/dashboard/password-reset/", s.base_url());
    let token = link
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("{link} is not under {prefix}"));
    assert!(body.contains("30 minutes"), "{body}");
    token.to_string()
}

fn server_with_mail(smtp: &SmtpServer) -> InProcessServer {
    InProcessServer::start(&smtp.config_toml("intake@example.com"), at(START))
}

#[test]
fn a_token_stops_working_at_its_expiry_and_is_listed_as_expired_until_revoked() {
    let s = InProcessServer::start("", at(START));
    let owner = Auth::Token(&s.owner_token);
    let r = call(
        &s,
        "POST",
        "/api/v1/manage/tokens",
        owner,
        Some(&json!({ "name": "deploy script", "expires_at": "2026-11-29T13:00:00Z" })),
    );
    assert_status(&r, 201);
    let created = r.json();
    let token = created["token"].as_str().expect("the token").to_string();
    assert_eq!(created["expires_at"], "2026-11-29T13:00:00.000000Z");
    assert_eq!(created["expired"], false);
    assert_eq!(whoami(&s, Auth::Token(&token)), 200);

    s.set("2026-11-29T12:59:59Z");
    assert_eq!(whoami(&s, Auth::Token(&token)), 200);
    s.set("2026-11-29T13:00:00Z");
    assert_error(
        &call(
            &s,
            "GET",
            "/api/v1/manage/account",
            Auth::Token(&token),
            None,
        ),
        401,
        "invalid_token",
    );
    let listed = call(&s, "GET", "/api/v1/manage/tokens", owner, None).json();
    let row = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == created["id"])
        .expect("the expired token is listed")
        .clone();
    assert_eq!(row["expired"], true);
    assert_eq!(row["name"], "deploy script");
    // The owner's token of `intake init` never expires.
    assert!(listed["data"].as_array().unwrap().iter().any(|t| {
        t["name"] == "owner (intake init)" && t["expires_at"].is_null() && t["expired"] == false
    }));

    // An expiry in the past, or one that is no time, is refused; none means never.
    for bad in ["2026-11-29T12:00:00Z", "tomorrow"] {
        let r = call(
            &s,
            "POST",
            "/api/v1/manage/tokens",
            owner,
            Some(&json!({ "name": "x", "expires_at": bad })),
        );
        assert_error(&r, 400, "invalid_request");
    }
    let forever = call(
        &s,
        "POST",
        "/api/v1/manage/tokens",
        owner,
        Some(&json!({ "name": "forever" })),
    );
    assert_status(&forever, 201);
    assert!(forever.json()["expires_at"].is_null());

    let revoke = format!("/api/v1/manage/tokens/{}", created["id"].as_str().unwrap());
    assert_status(&call(&s, "DELETE", &revoke, owner, None), 200);
    let listed = call(&s, "GET", "/api/v1/manage/tokens", owner, None).json();
    assert!(
        !listed["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["id"] == created["id"])
    );
}

#[test]
fn sessions_are_listed_with_the_callers_marked_and_the_others_signed_out() {
    let s = InProcessServer::start("", at(START));
    let laptop = login(&s, &s.password);
    s.set("2026-11-29T12:05:00Z");
    let phone = login(&s, &s.password);

    let listed = call(
        &s,
        "GET",
        "/api/v1/manage/account/sessions",
        Auth::Session(&phone),
        None,
    );
    assert_status(&listed, 200);
    let data = listed.json()["data"].clone();
    let data = data.as_array().unwrap();
    assert_eq!(data.len(), 2, "{data:?}");
    // Newest first: the phone's, which is the caller's.
    assert_eq!(data[0]["current"], true);
    assert_eq!(data[0]["created_at"], "2026-11-29T12:05:00.000000Z");
    assert_eq!(data[1]["current"], false);
    assert!(data[0]["id"].as_str().unwrap().starts_with("ses_"));
    // Never the cookie itself.
    assert!(!listed.text().contains(&phone) && !listed.text().contains(&laptop));

    let ended = call(
        &s,
        "POST",
        "/api/v1/manage/account/sessions/sign-out-others",
        Auth::Session(&phone),
        None,
    );
    assert_status(&ended, 200);
    assert_eq!(ended.json(), json!({ "ended": 1 }));
    assert_error(
        &call(
            &s,
            "GET",
            "/api/v1/manage/account",
            Auth::Session(&laptop),
            None,
        ),
        401,
        "session_expired",
    );
    assert_eq!(whoami(&s, Auth::Session(&phone)), 200);

    // With a token, every session ends.
    let ended = call(
        &s,
        "POST",
        "/api/v1/manage/account/sessions/sign-out-others",
        Auth::Token(&s.owner_token),
        None,
    );
    assert_eq!(ended.json(), json!({ "ended": 1 }));
    assert_eq!(whoami(&s, Auth::Session(&phone)), 401);
    let listed = call(
        &s,
        "GET",
        "/api/v1/manage/account/sessions",
        Auth::Token(&s.owner_token),
        None,
    );
    assert_eq!(listed.json(), json!({ "data": [] }));
}

#[test]
fn a_mailed_reset_link_works_once_for_30_minutes_and_ends_every_session() {
    let smtp = SmtpServer::start();
    let s = server_with_mail(&smtp);
    let session = login(&s, &s.password);

    // The same answer whether the address has an account or not; only the account's gets mail.
    let known = ask_reset(&s, OWNER_EMAIL);
    let unknown = ask_reset(&s, "nobody@example.com");
    assert_status(&known, 202);
    assert_eq!(
        (unknown.status, unknown.json()),
        (known.status, known.json())
    );
    let first = nth_reset_token(&s, &smtp, 1);
    assert!(first.starts_with("ipr_"), "{first}");

    // A newer link replaces it; it works for 30 minutes.
    assert_status(&ask_reset(&s, OWNER_EMAIL), 202);
    let second = nth_reset_token(&s, &smtp, 2);
    // A malformed body is a 400 before the link is looked at.
    assert_error(&complete_reset(&s, &first, "short"), 400, "invalid_request");
    assert_error(
        &complete_reset(&s, "not-a-reset-token", NEW_PASSWORD),
        400,
        "invalid_request",
    );
    assert_error(
        &complete_reset(&s, &first, NEW_PASSWORD),
        410,
        "password_reset_link_invalid",
    );
    s.advance(Duration::from_secs(29 * 60));
    // Too short a password is refused and leaves the link usable.
    assert_error(
        &complete_reset(&s, &second, "short"),
        400,
        "invalid_request",
    );
    let done = complete_reset(&s, &second, NEW_PASSWORD);
    assert_status(&done, 200);
    assert_eq!(done.json()["email"], OWNER_EMAIL);

    // Every session ended; the new password logs in, the old one does not; the token stays.
    assert_eq!(whoami(&s, Auth::Session(&session)), 401);
    assert_eq!(login_status(&s, &s.password), 401);
    assert_eq!(login_status(&s, NEW_PASSWORD), 200);
    assert_eq!(whoami(&s, Auth::Token(&s.owner_token)), 200);
    // Used once.
    assert_error(
        &complete_reset(&s, &second, "yet-another-password"),
        410,
        "password_reset_link_invalid",
    );

    // Thirty minutes later a link is refused.
    assert_status(&ask_reset(&s, OWNER_EMAIL), 202);
    let late = nth_reset_token(&s, &smtp, 3);
    s.advance(Duration::from_secs(30 * 60));
    assert_error(
        &complete_reset(&s, &late, "yet-another-password"),
        410,
        "password_reset_link_invalid",
    );
    assert_eq!(login_status(&s, NEW_PASSWORD), 200);
}

#[test]
fn asking_for_reset_links_is_limited_like_logins() {
    let smtp = SmtpServer::start();
    let toml = format!(
        "{}\n[accounts]\nlogin_failures_per_account = 2\n",
        smtp.config_toml("intake@example.com")
    );
    let s = InProcessServer::start(&toml, at(START));
    assert_status(&ask_reset(&s, OWNER_EMAIL), 202);
    assert_status(&ask_reset(&s, OWNER_EMAIL), 202);
    let third = ask_reset(&s, OWNER_EMAIL);
    assert_error(&third, 429, "too_many_login_attempts");
    assert!(third.header("retry-after").is_some());
    nth_reset_token(&s, &smtp, 2);
    assert_eq!(reset_mails(&smtp).len(), 2);
}

#[test]
fn without_smtp_a_reset_is_refused_for_any_address_naming_the_command() {
    let s = InProcessServer::start("", at(START));
    for email in [OWNER_EMAIL, "nobody@example.com"] {
        let r = ask_reset(&s, email);
        assert_error(&r, 409, "mail_not_configured");
        assert!(
            error_message(&r).contains("intake account reset-password EMAIL"),
            "{}",
            r.text()
        );
    }
}
