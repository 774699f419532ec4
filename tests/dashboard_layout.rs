//! The dashboard's layout and wording in a real headless Chromium against the real server:
//! wide tables that show every column on a 1280-px laptop (with long URLs, addresses and
//! error messages), a phone's tab strip, key input and filters, disabled buttons that look
//! it, and the words of the key rotation, the active switch, the test page's "Forget key",
//! the 404 page, the invitation flash, the login's focus, the favicon and the environment
//! badge. Any console error, uncaught exception or CSP violation fails a test
//! (tests/common/browser.rs).

use crate::common::{self, browser};

use std::time::{Duration, Instant};

use browser::{Browser, Session};
use common::receiver::{Receiver, Reply};
use common::smtp::SmtpServer;
use common::{
    COLLABORATOR_PASSWORD, OWNER_EMAIL, ServerClient, TestServer, add_collaborator, assert_status,
};
use serde_json::{Value, json};

/// A collaborator whose address is long enough to need wrapping in the request log.
const LONG_EMAIL: &str = "integration.partner.with.a.long.address@eu-west.subsidiary.example.com";

/// A browser session of the server's owner, logged in.
fn owner_session<'b>(browser: &'b Browser, s: &TestServer) -> Session<'b> {
    let owner = browser.session(&s.base_url());
    owner.login(OWNER_EMAIL, &s.password);
    owner
}

/// Asks `get` until `done` holds for its answer (the server's workers run on their own
/// threads); returns that answer.
fn wait_for(what: &str, get: impl Fn() -> Value, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let v = get();
        if done(&v) {
            return v;
        }
        assert!(Instant::now() < deadline, "no {what} after 30 s: {v}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// A data call with `key`; its response.
fn call(s: &ServerClient, method: &str, path: &str, key: &str, body: Option<&str>) -> common::Resp {
    let auth = format!("Bearer {key}");
    s.request(
        method,
        path,
        &[
            ("Authorization", auth.as_str()),
            ("Content-Type", "application/json"),
        ],
        body.map(str::as_bytes),
    )
}

/// The box of the first element at `selector`: `[left, top, right, bottom]` in CSS pixels.
fn rect(page: &Session, selector: &str) -> [f64; 4] {
    let selector = serde_json::to_string(selector).expect("selector");
    let v = page.eval(&format!(
        "(function () {{ var r = document.querySelector({selector}).getBoundingClientRect(); \
         return [r.left, r.top, r.right, r.bottom].join(' '); }})()"
    ));
    let numbers: Vec<f64> = v
        .as_str()
        .unwrap_or_default()
        .split(' ')
        .filter_map(|n| n.parse().ok())
        .collect();
    numbers
        .try_into()
        .unwrap_or_else(|_| panic!("no box for {selector}: {v}"))
}

/// Fails unless every label of the form at `form` sits next to its control: beside it on the
/// same line or right above it, at most 16 px away.
fn assert_labels_beside_their_controls(page: &Session, form: &str) {
    let ids = page.eval(&format!(
        "Array.prototype.map.call(document.querySelectorAll(\"{form} label\"), \
         function (l) {{ return l.htmlFor; }}).join(' ')"
    ));
    let ids: Vec<&str> = ids
        .as_str()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert!(!ids.is_empty(), "{form} has no labels");
    for id in ids {
        let [l_left, l_top, l_right, l_bottom] = rect(page, &format!("{form} label[for='{id}']"));
        let [c_left, c_top, c_right, c_bottom] = rect(page, &format!("#{id}"));
        let beside =
            l_top < c_bottom && c_top < l_bottom && (0.0..=16.0).contains(&(c_left - l_right));
        let above =
            l_left < c_right && c_left < l_right && (0.0..=16.0).contains(&(c_top - l_bottom));
        assert!(
            beside || above,
            "the label of #{id} in {form} is apart from it: label {:?}, control {:?}",
            [l_left, l_top, l_right, l_bottom],
            [c_left, c_top, c_right, c_bottom]
        );
    }
}

#[test]
fn wide_tables_show_every_column_on_a_laptop_with_long_content() {
    let smtp = SmtpServer::start();
    smtp.fail_with(Some((
        451,
        "4.3.0 the receiving mail system for this address is temporarily out of storage \
         (mailbox quota exceeded at mx-backup-03.eu-west.subsidiary.example.com); try again later"
            .into(),
    )));
    let s = TestServer::start_with_config(&format!(
        "[webhooks]\nallow_private_targets = true\n{}",
        smtp.config_toml("Intake <intake@example.com>")
    ));
    let ep = s.create_endpoint(
        "Customer onboarding questionnaire answers, spring campaign",
        &[],
    );
    let slug = &ep.slug;
    let partner = add_collaborator(&s, slug, LONG_EMAIL, &["read"]);

    // Deliveries to long URLs that fail, so that each has a next attempt.
    let receiver = Receiver::start();
    receiver.always(Reply::status(503).body("maintenance"));
    let hook = receiver.url(&format!(
        "/webhooks/intake/{}",
        "customer-onboarding-questionnaire-".repeat(4)
    ));
    let r = s.manage(
        "PUT",
        &format!("/api/v1/manage/endpoints/{slug}/webhooks/sandbox"),
        Some(&json!({ "url": hook })),
    );
    assert_status(&r, 200);
    let collection = format!("/api/v1/data/{slug}");
    let written = call(&s, "POST", &collection, &ep.sandbox_key, Some(r#"{"n":1}"#));
    assert_status(&written, 202);
    let auth = format!("Bearer {}", ep.sandbox_key);
    let callback = receiver.url(&format!("/callbacks/{}", "order-confirmation-".repeat(5)));
    let r = s.request(
        "POST",
        &collection,
        &[
            ("Authorization", auth.as_str()),
            ("Content-Type", "application/json"),
            ("X-Webhook-Callback", callback.as_str()),
        ],
        Some(br#"{"n":2}"#),
    );
    assert_status(&r, 202);
    // The request log: the long address's calls, refused and not found.
    let refused = call(&s, "POST", &collection, &partner.sandbox_key, Some("{}"));
    assert_status(&refused, 403);
    let missing = call(
        &s,
        "GET",
        &format!("{collection}/{}", common::unknown_record_id()),
        &partner.sandbox_key,
        None,
    );
    assert_status(&missing, 404);
    let ids = [refused.request_id(), missing.request_id()];
    s.wait_request_log(slug, "sandbox", Duration::from_secs(10), |d| {
        ids.iter()
            .all(|id| d.iter().any(|e| e["request_id"] == id.as_str()))
    });
    wait_for(
        "two failed deliveries",
        || {
            s.manage(
                "GET",
                &format!("/api/v1/manage/endpoints/{slug}/deliveries?environment=sandbox"),
                None,
            )
            .json()
        },
        |v| {
            v["data"].as_array().is_some_and(|d| {
                d.iter()
                    .filter(|d| d["attempts"].as_u64() >= Some(1))
                    .count()
                    >= 2
            })
        },
    );
    // The outbox: a test e-mail to the long address, refused for now with a long reason.
    let r = s.manage(
        "POST",
        "/api/v1/manage/mail/test",
        Some(&json!({ "to": LONG_EMAIL })),
    );
    assert_status(&r, 202);
    let mail = r.json()["id"].as_u64().expect("mail id");
    wait_for(
        "a refused attempt",
        || {
            s.manage("GET", &format!("/api/v1/manage/mail/{mail}"), None)
                .json()
        },
        |v| v["attempts"].as_u64() >= Some(1),
    );

    let browser = Browser::start();
    let owner = owner_session(&browser, &s);
    assert_eq!(owner.eval("window.innerWidth"), json!(1280));

    owner.goto(&format!("/dashboard/endpoints/{slug}/requests"));
    assert!(owner.text("#request-log").contains(LONG_EMAIL));
    owner.assert_table_headers_visible("#request-log");
    // The long address is an option of the Key filter, which stays beside its label.
    assert_labels_beside_their_controls(&owner, "#request-filters");
    owner.screenshots("layout-request-log");
    owner.assert_accessible();

    owner.goto(&format!("/dashboard/endpoints/{slug}/deliveries"));
    assert!(
        owner
            .text("#deliveries")
            .contains("customer-onboarding-questionnaire-")
    );
    assert!(owner.text("#deliveries").contains("order-confirmation-"));
    owner.assert_table_headers_visible("#deliveries");
    owner.screenshots("layout-deliveries");
    owner.assert_accessible();

    owner.goto("/dashboard/mail");
    assert!(owner.text("#outbox").contains("out of storage"));
    owner.assert_table_headers_visible("#outbox");
    owner.screenshots("layout-mail-outbox");
    owner.assert_accessible();

    // The API Reference: every card's parameter table, every card open.
    owner.goto(&format!("/dashboard/endpoints/{slug}/test"));
    owner.click("#tab-reference");
    owner.click("#expand-all");
    let cards = owner.eval(
        "Array.prototype.map.call(document.querySelectorAll('.api-card .table-wrap table'), \
         function (t) { return t.closest('.api-card').id; }).join(' ')",
    );
    let cards: Vec<&str> = cards
        .as_str()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert!(cards.len() >= 5, "parameter tables: {cards:?}");
    for card in cards {
        owner.assert_table_headers_visible(&format!("#{card} .table-wrap table"));
    }
    owner.assert_accessible();
}

#[test]
fn on_a_phone_the_current_tab_the_key_input_and_the_filters_stay_usable() {
    let s = TestServer::start();
    let ep = s.create_endpoint("Orders", &[]);
    let slug = &ep.slug;
    let browser = Browser::start();
    let owner = owner_session(&browser, &s);
    owner.phone_width();

    // The tab strip scrolls sideways: the current tab, far right, is brought into it.
    for tab in ["deliveries", "usage"] {
        owner.goto(&format!("/dashboard/endpoints/{slug}/{tab}"));
        let current = ".tabs a[aria-current='page']";
        assert_eq!(owner.text(current).to_lowercase(), tab);
        let [left, _, right, _] = rect(&owner, current);
        let [strip_left, _, strip_right, _] = rect(&owner, ".tabs");
        assert!(
            left >= strip_left - 0.5 && right <= strip_right + 0.5 && right <= 390.0,
            "the {tab} tab at {left}..{right} is outside the strip {strip_left}..{strip_right}"
        );
        owner.assert_fits_width();
    }

    // Each filter's label sits with its control.
    owner.goto(&format!("/dashboard/endpoints/{slug}/requests"));
    assert_labels_beside_their_controls(&owner, "#request-search");
    assert_labels_beside_their_controls(&owner, "#request-filters");
    owner.goto(&format!("/dashboard/endpoints/{slug}/deliveries"));
    assert_labels_beside_their_controls(&owner, "#delivery-filters");
    owner.screenshot("layout-filters-phone");

    // The test page's key input is wide enough to paste a key into and check it.
    owner.goto(&format!("/dashboard/endpoints/{slug}/test"));
    let [left, _, right, _] = rect(&owner, "#test-key");
    assert!(
        right - left >= 200.0,
        "the key input is {} px wide",
        right - left
    );
    owner.assert_fits_width();
    owner.assert_clean();
}

#[test]
fn a_disabled_button_looks_disabled_in_both_themes() {
    let s = TestServer::start();
    let ep = s.create_endpoint("Orders", &[]);
    add_collaborator(&s, &ep.slug, "reader@example.com", &["read"]);
    let browser = Browser::start();
    let reader = browser.session(&s.base_url());
    reader.login("reader@example.com", COLLABORATOR_PASSWORD);
    reader.goto(&format!("/dashboard/endpoints/{}/test", ep.slug));
    reader.click("#use-mine");
    reader.wait_until("!document.getElementById('authorized').hidden");
    let delete = "#call-deleteRecord button[type=submit]";
    let list = "#call-listRecords button[type=submit]";
    assert_eq!(reader.text(delete), "Send DELETE");
    assert_eq!(
        reader.eval(&format!("document.querySelector(\"{delete}\").disabled")),
        json!(true)
    );
    let style = |selector: &str, property: &str| {
        reader.eval(&format!(
            "getComputedStyle(document.querySelector(\"{selector}\")).{property}"
        ))
    };
    for scheme in ["light", "dark"] {
        reader.color_scheme(scheme);
        assert_eq!(style(delete, "cursor"), json!("not-allowed"), "{scheme}");
        assert_eq!(style(list, "cursor"), json!("pointer"), "{scheme}");
        assert_ne!(
            style(delete, "backgroundColor"),
            style(list, "backgroundColor"),
            "{scheme}"
        );
        assert_ne!(style(delete, "color"), style(list, "color"), "{scheme}");
    }
    reader.color_scheme("light");
    reader.assert_accessible();
    // The desktop screenshots show the disabled PUT and DELETE calls (a phone's longer page
    // keeps the same offset, which lands on other calls).
    reader.eval("document.getElementById('call-replaceRecord').scrollIntoView()");
    reader.screenshots("layout-disabled-send");
}

#[test]
fn labels_say_what_happens() {
    let s = TestServer::start();
    let ep = s.create_endpoint("Orders", &[]);
    let slug = &ep.slug;
    let browser = Browser::start();
    let owner = owner_session(&browser, &s);

    // Rotating: what becomes of the old key, by default 24 hours of grace (the rule of
    // `grace_period_seconds`), then refused.
    owner.goto(&format!("/dashboard/endpoints/{slug}"));
    assert_eq!(
        owner.text("label[for='sandbox-key-grace']"),
        "After rotating, the old key"
    );
    let chosen = owner.eval(
        "(function () { var s = document.getElementById('sandbox-key-grace'); \
         return s.options[s.selectedIndex].text; })()",
    );
    assert_eq!(chosen, json!("keeps working for 24 hours, then stops"));
    assert_eq!(
        owner.eval("document.getElementById('sandbox-key-grace').value"),
        json!("86400")
    );

    // The endpoint's state, and apart from it what the button does.
    assert!(owner.text("#active-state").starts_with("Active"));
    assert_eq!(owner.text("#active-switch"), "Switch off");
    owner.assert_accessible();
    let question = owner.submit_confirmed("#active-switch");
    assert!(question.contains("Switch this endpoint off?"), "{question}");
    assert!(owner.text("#active-state").starts_with("Inactive"));
    assert_eq!(owner.text("#active-switch"), "Switch on");
    owner.submit("#active-switch");
    assert!(owner.text("#active-state").starts_with("Active"));

    // The test page forgets its key; the dashboard session is another thing.
    owner.goto(&format!("/dashboard/endpoints/{slug}/test"));
    owner.click("#use-mine");
    owner.wait_until("!document.getElementById('authorized').hidden");
    assert_eq!(owner.text("#forget-key"), "Forget key");
    assert!(owner.text("#authorized").contains("forget this one"));
    owner.click("#forget-key");
    assert!(owner.visible("#test-key") && !owner.visible("#forget-key"));

    // A dashboard 404 speaks of endpoints and pages, never of an API key.
    for path in [
        "/dashboard/endpoints/no-such-endpoint",
        "/dashboard/endpoints/no-such-endpoint/requests",
        "/dashboard/nowhere",
    ] {
        owner.goto(path);
        assert_eq!(owner.text("h1"), "Not found", "{path}");
        let main = owner.text("main");
        assert!(!main.to_lowercase().contains("key"), "{path}: {main}");
    }
    owner.goto("/dashboard/endpoints/no-such-endpoint");
    assert!(
        owner
            .text("main")
            .contains("No endpoint with that slug exists among yours")
    );
    owner.assert_accessible();

    // Without [smtp] the invitation flash says no e-mail went out.
    owner.goto(&format!("/dashboard/endpoints/{slug}/collaborators"));
    owner.fill("#invite-email", "ada@example.com");
    owner.submit("#invite");
    let flash = owner.text(".flash");
    assert!(
        flash.starts_with("Invitation created for ada@example.com"),
        "{flash}"
    );
    assert!(flash.contains("no e-mail sent"), "{flash}");
    assert!(flash.contains("[smtp]"), "{flash}");
    owner.assert_accessible();
    owner.assert_clean();
}

#[test]
fn with_smtp_the_invitation_flash_names_whom_it_was_mailed_to() {
    let smtp = SmtpServer::start();
    let s = TestServer::start_with_config(&smtp.config_toml("Intake <intake@example.com>"));
    let ep = s.create_endpoint("Orders", &[]);
    let browser = Browser::start();
    let owner = owner_session(&browser, &s);
    owner.goto(&format!("/dashboard/endpoints/{}/collaborators", ep.slug));
    owner.fill("#invite-email", "ada@example.com");
    owner.submit("#invite");
    assert_eq!(
        owner.text(".flash"),
        "Invitation created and e-mailed to ada@example.com."
    );
    let got = smtp.wait_for(1, Duration::from_secs(30));
    assert_eq!(got[0].to, ["ada@example.com"]);
    owner.assert_clean();
}

#[test]
fn a_wrong_password_keeps_the_address_and_puts_the_cursor_in_the_password() {
    let s = TestServer::start();
    let browser = Browser::start();
    let visitor = browser.session(&s.base_url());
    visitor.goto("/dashboard/login");
    assert_eq!(visitor.eval("document.activeElement.id"), json!("email"));
    visitor.paste("#email", OWNER_EMAIL);
    visitor.paste("#password", "not the password");
    visitor.submit("form[action='/dashboard/login'] button[type=submit]");
    assert!(visitor.visible("#login-error"));
    assert_eq!(visitor.value("#email"), OWNER_EMAIL);
    assert_eq!(visitor.value("#password"), "");
    assert_eq!(visitor.eval("document.activeElement.id"), json!("password"));
    visitor.assert_accessible();
}

#[test]
fn every_page_links_the_svg_favicon_served_with_a_long_cache() {
    let s = TestServer::start();
    let ep = s.create_endpoint("Orders", &[]);
    let browser = Browser::start();
    let owner = owner_session(&browser, &s);
    let mut hrefs = Vec::new();
    for path in [
        "/dashboard/endpoints".to_string(),
        format!("/dashboard/endpoints/{}/test", ep.slug),
    ] {
        owner.goto(&path);
        let href = owner.eval(
            "(document.querySelector(\"link[rel='icon']\") || {}).getAttribute ? \
             document.querySelector(\"link[rel='icon']\").getAttribute('href') : null",
        );
        let href = href
            .as_str()
            .unwrap_or_else(|| panic!("{path} links no icon"))
            .to_string();
        hrefs.push(href);
    }
    assert_eq!(hrefs[0], hrefs[1]);
    let icon = s.request("GET", &hrefs[0], &[], None);
    assert_eq!(icon.status, 200);
    assert_eq!(icon.header("content-type"), Some("image/svg+xml"));
    assert_eq!(
        icon.header("cache-control"),
        Some("public, max-age=31536000, immutable")
    );
    assert!(icon.text().starts_with("<svg"), "{}", icon.text());
    // The browser loaded it under the CSP (a refusal would be a console error).
    owner.assert_clean();
}

#[test]
fn every_endpoint_page_carries_the_environment_badge() {
    let s = TestServer::start();
    let ep = s.create_endpoint("Orders", &[]);
    let slug = &ep.slug;
    let written = call(
        &s,
        "POST",
        &format!("/api/v1/data/{slug}"),
        &ep.sandbox_key,
        Some(r#"{"n":1}"#),
    );
    assert_status(&written, 202);
    let request_id = written.request_id();
    s.wait_request_log(slug, "sandbox", Duration::from_secs(10), |d| {
        d.iter().any(|e| e["request_id"] == request_id.as_str())
    });
    let browser = Browser::start();
    let owner = owner_session(&browser, &s);
    let base = format!("/dashboard/endpoints/{slug}");
    for (path, badge) in [
        (base.clone(), "Sandbox"),
        (format!("{base}/production"), "Production"),
        (format!("{base}/records"), "Sandbox"),
        (
            format!("{base}/records?environment=production"),
            "Production",
        ),
        (format!("{base}/erasures"), "Sandbox"),
        (format!("{base}/requests"), "Sandbox"),
        (
            format!("{base}/requests?environment=production"),
            "Production",
        ),
        (format!("{base}/requests/{request_id}"), "Sandbox"),
        (format!("{base}/deliveries"), "Sandbox"),
        (
            format!("{base}/deliveries?environment=production"),
            "Production",
        ),
        (format!("{base}/webhooks"), "Sandbox and production"),
        (format!("{base}/collaborators"), "Sandbox and production"),
        (format!("{base}/usage"), "Sandbox and production"),
        (format!("{base}/test"), "Sandbox"),
    ] {
        owner.goto(&path);
        assert_eq!(owner.text("#environment-badge"), badge, "{path}");
    }
    owner.goto(&format!("{base}/usage"));
    owner.assert_accessible();
}
