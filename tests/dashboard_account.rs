//! Account self-service in the dashboard (issue #42, item 8), in a real headless Chromium
//! against a server on a manual clock: the header's e-mail address opens the account page,
//! where the password changes (the other sessions end), personal tokens are created (shown
//! once, with a name and an expiry), listed and revoked (after a confirmation), and the
//! sessions are listed with this one marked and the others signed out; "Forgot password?"
//! mails a single-use, 30-minute link (through a real SMTP sink) whose page sets the new
//! password, and says how the operator makes one when e-mail is not set up. Every page passes
//! axe-core; the account page is screenshotted at both widths in both schemes.

use crate::common::{self, browser};

use std::time::{Duration, Instant};

use browser::{Browser, Session};
use common::in_process::{InProcessServer, at};
use common::smtp::SmtpServer;
use common::{OWNER_EMAIL, ServerClient, try_send};

const START: &str = "2026-11-29T12:00:00Z";
const NEW_PASSWORD: &str = "a-new-long-password";

/// What a call to the management API with `token` answers.
fn token_status(s: &ServerClient, token: &str) -> u16 {
    let auth = format!("Bearer {token}");
    try_send(
        &s.agent,
        &format!("{}/api/v1/manage/account", s.base_url()),
        "GET",
        &[("Authorization", &auth)],
        None,
    )
    .expect("request")
    .status
}

/// The path and query of the document `page` shows, as the document knows it (the tab's URL
/// may lag just after a navigation).
fn location(page: &Session) -> String {
    page.eval("location.pathname + location.search")
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Whether `page`'s session still opens the account page (else it lands on the login page).
fn still_signed_in(page: &Session) -> bool {
    page.goto("/dashboard/account");
    location(page) == "/dashboard/account"
}

/// The rows of the sessions table, as their visible text.
fn session_rows(page: &Session) -> Vec<String> {
    let rows = page.eval(
        "JSON.stringify(Array.from(document.querySelectorAll('#sessions tbody tr'))\
         .map(r => r.innerText))",
    );
    serde_json::from_str(rows.as_str().expect("JSON text")).expect("rows")
}

#[test]
fn the_header_address_opens_the_account_page_where_the_password_changes_and_other_sessions_end() {
    let s = InProcessServer::start("", at(START));
    let browser = Browser::start();
    let phone = browser.session(&s.base_url());
    phone.login(OWNER_EMAIL, &s.password);
    s.set("2026-11-29T12:10:00Z");
    let laptop = browser.session(&s.base_url());
    laptop.login(OWNER_EMAIL, &s.password);

    // The header's address is a link to the account page.
    assert_eq!(laptop.text("header a.who"), OWNER_EMAIL);
    laptop.submit("header a.who");
    assert_eq!(location(&laptop), "/dashboard/account");
    assert_eq!(laptop.text("h1"), "Account");
    assert_eq!(
        laptop.eval("document.querySelector('header a.who').getAttribute('aria-current')"),
        "page"
    );

    // Both sessions, newest first, this one marked.
    let rows = session_rows(&laptop);
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(rows[0].contains("This session"), "{rows:?}");
    assert!(rows[0].contains("2026-11-29 12:10"), "{rows:?}");
    assert!(!rows[1].contains("This session"), "{rows:?}");
    assert!(laptop.visible("#sign-out-others"));
    // A phone has no room for the address: the navigation links the account page instead.
    assert!(!laptop.visible(".main-nav .nav-account"));
    laptop.phone_width();
    assert!(!laptop.visible("header a.who"));
    assert!(laptop.visible(".main-nav .nav-account"));
    assert_eq!(laptop.text(".main-nav .nav-account"), "Account");
    laptop.desktop_width();
    laptop.assert_accessible();
    laptop.screenshots("account");

    // A wrong current password is refused beside the form; nothing changes.
    laptop.paste("#current-password", "not-the-password");
    laptop.paste("#new-password", NEW_PASSWORD);
    laptop.paste("#new-password-again", NEW_PASSWORD);
    laptop.submit("#change-password");
    let error = laptop.text("form[action='/dashboard/account/password'] [data-form-error]");
    assert!(error.contains("password"), "{error}");
    assert!(still_signed_in(&phone), "{}", location(&phone));

    // Two different new passwords are refused too.
    laptop.paste("#current-password", &s.password);
    laptop.paste("#new-password", NEW_PASSWORD);
    laptop.paste("#new-password-again", "something-else-entirely");
    laptop.submit("#change-password");
    assert!(
        laptop
            .text("form[action='/dashboard/account/password'] [data-form-error]")
            .contains("The two new passwords differ")
    );

    // Changed: the page says the other sessions ended; they did; this one stays.
    laptop.paste("#current-password", &s.password);
    laptop.paste("#new-password", NEW_PASSWORD);
    laptop.paste("#new-password-again", NEW_PASSWORD);
    laptop.submit("#change-password");
    assert_eq!(
        laptop.text(".flash"),
        "Password changed. Your other sessions were signed out."
    );
    assert_eq!(session_rows(&laptop).len(), 1);
    assert!(laptop.text("#only-session").contains("only session"));
    assert!(!laptop.exists("#sign-out-others"));
    assert!(!still_signed_in(&phone));
    assert_eq!(
        location(&phone),
        "/dashboard/login?next=%2Fdashboard%2Faccount"
    );
    phone.login(OWNER_EMAIL, NEW_PASSWORD);
}

#[test]
fn sign_out_other_sessions_asks_first_and_leaves_only_this_one() {
    let s = InProcessServer::start("", at(START));
    let browser = Browser::start();
    let other = browser.session(&s.base_url());
    other.login(OWNER_EMAIL, &s.password);
    let page = browser.session(&s.base_url());
    page.login(OWNER_EMAIL, &s.password);
    page.goto("/dashboard/account");
    assert_eq!(session_rows(&page).len(), 2);

    let question = page.submit_confirmed("#sign-out-others");
    assert!(
        question.contains("Sign out the other 1 session(s)?"),
        "{question}"
    );
    assert_eq!(page.text(".flash"), "Your other sessions were signed out.");
    assert_eq!(session_rows(&page).len(), 1);
    assert!(!still_signed_in(&other));
    assert!(still_signed_in(&page));
}

#[test]
fn a_token_is_shown_once_with_its_name_and_expiry_and_revoked_after_a_confirmation() {
    let s = InProcessServer::start("", at(START));
    let browser = Browser::start();
    let page = browser.session(&s.base_url());
    page.login(OWNER_EMAIL, &s.password);
    page.goto("/dashboard/account");
    // The owner's token of `intake init` is listed, without an expiry.
    assert!(page.text("#tokens").contains("owner (intake init)"));

    // An expiry date in the past is refused beside the form, the name kept.
    page.paste("#token-name", "deploy script");
    page.eval("document.getElementById('token-expires').value = 'date'");
    page.eval("document.getElementById('token-expires-on').value = '2026-11-01'");
    page.submit("#create-token");
    let error = page.text("form[action='/dashboard/account/tokens'] [data-form-error]");
    assert!(error.contains("in the future"), "{error}");
    assert_eq!(page.value("#token-name"), "deploy script");

    // 30 days: the token is shown once, with a Copy button; it works.
    page.eval("document.getElementById('token-expires').value = '30'");
    page.submit("#create-token");
    let shown = page.text("#new-token-shown");
    assert!(shown.starts_with("itk_"), "{shown}");
    assert!(
        page.text("#new-token")
            .contains("Token “deploy script” created. Copy it now: it is shown only this once.")
    );
    assert!(page.visible("[data-copy='new-token-value']"));
    assert_eq!(token_status(&s, &shown), 200);
    let row = page.eval(
        "Array.from(document.querySelectorAll('#tokens tbody tr')).map(r => r.innerText)\
         .find(t => t.includes('deploy script'))",
    );
    let row = row.as_str().expect("the token's row").to_string();
    assert!(row.contains("2026-12-29 12:00"), "{row}");
    page.assert_accessible();

    // Never again: the page reloaded no longer has it.
    page.goto("/dashboard/account");
    assert!(!page.exists("#new-token"));
    let html = page.eval("document.documentElement.outerHTML");
    assert!(!html.as_str().unwrap_or_default().contains(&shown));

    // It is refused from its expiry on, and listed as expired (the session has ended by then:
    // log in again).
    s.set("2026-12-29T12:00:00Z");
    assert_eq!(token_status(&s, &shown), 401);
    page.login(OWNER_EMAIL, &s.password);
    page.goto("/dashboard/account");
    assert!(page.text("#tokens").contains("expired"));

    // Revoke asks first; declined, it stays; confirmed, it is gone.
    let revoke = "#tokens button[aria-label='Revoke deploy script']";
    page.eval("window.confirm = function () { return false; }; true");
    page.click(revoke);
    assert!(page.text("#tokens").contains("deploy script"));
    let question = page.submit_confirmed(revoke);
    assert!(
        question.contains("Revoke the token “deploy script”?"),
        "{question}"
    );
    assert_eq!(
        page.text(".flash"),
        "Token revoked: calls with it are refused from now on."
    );
    assert!(!page.text("#tokens").contains("deploy script"));
}

/// The link of the `n`th reset e-mail (counting from 1), once it has arrived.
fn reset_link(smtp: &SmtpServer, n: usize) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mails: Vec<_> = smtp
            .messages()
            .into_iter()
            .filter(|m| m.subject() == "Reset your intake password")
            .collect();
        if let Some(mail) = mails.get(n - 1) {
            let body = mail.body_text();
            return body
                .lines()
                .find(|l| l.starts_with("http"))
                .unwrap_or_else(|| panic!("no link in:\n{body}"))
                .to_string();
        }
        assert!(Instant::now() < deadline, "no reset e-mail #{n}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Asks for a reset link on the "Forgot password?" page; returns what the page answers.
fn ask_for_link(page: &Session, email: &str) -> String {
    page.goto("/dashboard/login");
    page.submit("#forgot-password-link");
    assert_eq!(location(page), "/dashboard/password-reset");
    page.paste("#email", email);
    page.submit("#send-reset-link");
    page.text("#reset-sent")
}

#[test]
fn forgot_password_mails_a_single_use_30_minute_link_whose_page_sets_the_password() {
    let smtp = SmtpServer::start();
    let s = InProcessServer::start(&smtp.config_toml("intake@example.com"), at(START));
    let browser = Browser::start();
    let signed_in = browser.session(&s.base_url());
    signed_in.login(OWNER_EMAIL, &s.password);
    let visitor = browser.session(&s.base_url());

    // The same answer for an address without an account; only the account's gets mail.
    let answer = ask_for_link(&visitor, "nobody@example.com");
    assert!(
        answer.starts_with("If nobody@example.com has an account on this server"),
        "{answer}"
    );
    visitor.assert_accessible();
    let answer = ask_for_link(&visitor, OWNER_EMAIL);
    assert_eq!(
        answer,
        format!(
            "If {OWNER_EMAIL} has an account on this server, a link to choose a new password \
             is on its way. It works once, for 30 minutes. No message? Check the spam folder, \
             or ask again."
        )
    );
    let link = reset_link(&smtp, 1);
    assert!(
        link.starts_with(&format!("{}/dashboard/password-reset/ipr_", s.base_url())),
        "{link}"
    );
    assert_eq!(smtp.messages().len(), 1);

    // The link's page names the account; two different passwords are refused.
    s.advance(Duration::from_secs(29 * 60));
    visitor.goto(&link);
    assert_eq!(visitor.text("h1"), "Choose a new password");
    assert!(visitor.text("#new-password-page").contains(OWNER_EMAIL));
    visitor.assert_accessible();
    visitor.paste("#new-password", NEW_PASSWORD);
    visitor.paste("#new-password-again", "something-else-entirely");
    visitor.submit("#set-password");
    assert_eq!(visitor.text("#reset-error"), "The two passwords differ.");

    // Set: the login page says so; every session ended; the new password logs in.
    visitor.paste("#new-password", NEW_PASSWORD);
    visitor.paste("#new-password-again", NEW_PASSWORD);
    visitor.submit("#set-password");
    assert_eq!(location(&visitor), "/dashboard/login?done=password-reset");
    assert!(
        visitor
            .text(".flash")
            .contains("Your new password is set and every session of the account was signed out")
    );
    assert!(!still_signed_in(&signed_in));
    visitor.login(OWNER_EMAIL, NEW_PASSWORD);

    // Used once.
    let other = browser.session(&s.base_url());
    other.goto(&link);
    assert_eq!(other.text("h1"), "This reset link no longer works");
    assert!(!other.exists("#new-password"));

    // A new link is refused 30 minutes after it was sent.
    ask_for_link(&other, OWNER_EMAIL);
    let late = reset_link(&smtp, 2);
    s.advance(Duration::from_secs(30 * 60));
    other.goto(&late);
    assert_eq!(other.text("h1"), "This reset link no longer works");
    other.assert_accessible();
}

#[test]
fn without_email_forgot_password_says_how_the_operator_makes_a_link() {
    let s = InProcessServer::start("", at(START));
    let browser = Browser::start();
    let page = browser.session(&s.base_url());
    page.goto("/dashboard/login");
    page.submit("#forgot-password-link");
    assert_eq!(
        page.text("#no-mail"),
        "E-mail is not set up on this server, so it cannot send you a reset link."
    );
    let how = page.text("#forgot-password");
    assert!(
        how.contains("Ask the server's operator to run intake account reset-password EMAIL"),
        "{how}"
    );
    assert!(!page.exists("#send-reset-link"));
    page.assert_accessible();
}
