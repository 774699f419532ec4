//! API keys in the dashboard, in a real headless Chromium against the real server: keys are
//! masked until revealed, Copy copies the whole key, Rotate (behind a confirmation) issues a
//! new key shown with a flash while the previous one stays valid for the period chosen,
//! Revoke now ends it; a collaborator does the same for their own keys, and the owner for a
//! collaborator's on the Collaborators page. Every claim is checked against the API too (which
//! key a data call accepts). Any console error or CSP violation fails the test (see
//! tests/common/browser.rs).

use crate::common::{self, browser};

use browser::{Browser, Session};
use common::{COLLABORATOR_PASSWORD, OWNER_EMAIL, ServerClient, TestServer, add_collaborator};

const COLLABORATOR: &str = "collab@example.com";

/// Answers the next `data-confirm` question with `yes`, remembering the question in
/// sessionStorage (it survives the form's navigation).
fn answer_confirm(page: &Session, yes: bool) {
    page.eval(&format!(
        "window.confirm = function (q) {{ sessionStorage.setItem('asked', q); return {yes}; }}"
    ));
}

/// The question last asked by `data-confirm`.
fn asked(page: &Session) -> String {
    page.eval("sessionStorage.getItem('asked') || ''")
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Chooses the grace period of the Rotate form of the key `dom_id`.
fn choose_grace(page: &Session, dom_id: &str, seconds: u64) {
    page.eval(&format!(
        "document.getElementById('{dom_id}-grace').value = '{seconds}'"
    ));
}

fn login(page: &Session, email: &str, password: &str) {
    page.goto("/dashboard/login");
    page.fill("#email", email);
    page.fill("#password", password);
    page.submit("form[action='/dashboard/login'] button[type=submit]");
}

fn status(s: &ServerClient, slug: &str, key: &str) -> u16 {
    s.list(slug, key, "").status
}

/// Checks the masked text of the key `dom_id`: prefix, dots, its last four characters, and
/// nowhere on the page in full.
#[track_caller]
fn assert_masked(page: &Session, dom_id: &str, key: &str, prefix: &str) {
    let shown = page.text(&format!("#{dom_id}-shown"));
    assert_eq!(
        shown,
        format!("{prefix}••••••••{}", &key[key.len() - 4..]),
        "{dom_id}"
    );
    assert!(
        !page.text("main").contains(key),
        "the full key {dom_id} is visible"
    );
}

#[test]
fn owner_and_collaborator_reveal_copy_rotate_and_revoke_keys() {
    let s = TestServer::start();
    let browser = Browser::start();
    let owner = browser.session(&s.base_url());
    login(&owner, OWNER_EMAIL, &s.password);
    let slug = owner.create_endpoint("Orders");

    // Masked; Reveal shows the key, Hide masks it again; Copy copies the whole key.
    let k0 = owner.value("#sandbox-key");
    assert!(k0.starts_with("tm_test_"), "{k0}");
    assert_masked(&owner, "sandbox-key", &k0, "tm_test_");
    owner.click("[data-reveal='sandbox-key']");
    assert_eq!(owner.text("#sandbox-key-shown"), k0);
    assert_eq!(owner.text("[data-reveal='sandbox-key']"), "Hide");
    owner.click("[data-reveal='sandbox-key']");
    assert_masked(&owner, "sandbox-key", &k0, "tm_test_");
    owner.eval(
        "navigator.clipboard.writeText = function (t) { window.copied = t; return Promise.resolve(); }",
    );
    owner.click("[data-copy='sandbox-key']");
    owner.wait_until(&format!("window.copied === '{k0}'"));
    owner.screenshot("keys-sandbox");

    // Rotate asks first; declined, nothing changes.
    answer_confirm(&owner, false);
    owner.click("form[action$='/keys/sandbox/rotate'] button[type=submit]");
    assert!(
        asked(&owner).contains("Rotate this key?"),
        "{}",
        asked(&owner)
    );
    assert_eq!(owner.value("#sandbox-key"), k0);
    assert_eq!(status(&s, &slug, &k0), 200);

    // Rotated with one hour of grace: the new key is shown with the flash, the old one is
    // still valid until the time shown.
    choose_grace(&owner, "sandbox-key", 3600);
    answer_confirm(&owner, true);
    owner.submit("form[action$='/keys/sandbox/rotate'] button[type=submit]");
    assert!(owner.text(".flash").contains("New key issued"));
    let k1 = owner.value("#sandbox-key");
    assert!(k1.starts_with("tm_test_") && k1 != k0, "{k1}");
    assert_eq!(owner.text("#sandbox-key-shown"), k1);
    assert!(
        owner
            .text("#sandbox-key-previous")
            .contains("stays valid until")
    );
    assert_eq!(status(&s, &slug, &k0), 200);
    assert_eq!(status(&s, &slug, &k1), 200);
    owner.screenshot("keys-rotated");

    // Revoke now ends the old key at once.
    answer_confirm(&owner, true);
    owner.submit("#sandbox-key-previous button[type=submit]");
    assert!(asked(&owner).contains("Revoke the previous key"));
    assert!(owner.text(".flash").contains("Previous key revoked"));
    assert!(!owner.exists("#sandbox-key-previous"));
    assert_eq!(status(&s, &slug, &k0), 401);
    assert_eq!(status(&s, &slug, &k1), 200);

    // "Revoke now" as the grace period: the replaced key stops at once.
    choose_grace(&owner, "sandbox-key", 0);
    answer_confirm(&owner, true);
    owner.submit("form[action$='/keys/sandbox/rotate'] button[type=submit]");
    let k2 = owner.value("#sandbox-key");
    assert_ne!(k2, k1);
    assert!(!owner.exists("#sandbox-key-previous"));
    assert_eq!(status(&s, &slug, &k1), 401);
    assert_eq!(status(&s, &slug, &k2), 200);

    // A collaborator rotates their own key (the default choice: valid for 24 hours).
    let member = add_collaborator(&s, &slug, COLLABORATOR, &["read"]);
    let collaborator = browser.session(&s.base_url());
    login(&collaborator, COLLABORATOR, COLLABORATOR_PASSWORD);
    collaborator.goto(&format!("/dashboard/endpoints/{slug}"));
    assert_eq!(collaborator.value("#sandbox-key"), member.sandbox_key);
    assert_masked(
        &collaborator,
        "sandbox-key",
        &member.sandbox_key,
        "tm_test_",
    );
    answer_confirm(&collaborator, true);
    collaborator.submit("form[action$='/keys/sandbox/rotate'] button[type=submit]");
    assert!(collaborator.text(".flash").contains("New key issued"));
    let m1 = collaborator.value("#sandbox-key");
    assert_ne!(m1, member.sandbox_key);
    assert_eq!(collaborator.text("#sandbox-key-shown"), m1);
    assert!(collaborator.exists("#sandbox-key-previous"));
    assert_eq!(status(&s, &slug, &member.sandbox_key), 200);
    assert_eq!(status(&s, &slug, &m1), 200);
    // The owner's key did not change.
    assert_eq!(status(&s, &slug, &k2), 200);

    // The owner sees the collaborator's keys masked only (the key is its holder's: the page
    // does not carry it), and revokes the previous one; then rotates the collaborator's
    // production key.
    let id = member.id;
    let sandbox = format!("collab-{id}-sandbox-key");
    owner.goto(&format!("/dashboard/endpoints/{slug}/collaborators"));
    assert_eq!(
        owner.text(&format!("#{sandbox}-shown")),
        format!("tm_test_••••••••{}", &m1[m1.len() - 4..])
    );
    assert!(
        !owner.exists(&format!("#{sandbox}")),
        "no hidden input with the key"
    );
    assert!(!owner.exists(&format!("[data-reveal='{sandbox}']")));
    let html = owner.eval("document.documentElement.outerHTML");
    assert!(
        !html.as_str().unwrap().contains(&m1),
        "the collaborator's key is not in the page"
    );
    assert!(owner.exists(&format!("#{sandbox}-previous")));
    owner.screenshot("keys-collaborators");
    answer_confirm(&owner, true);
    owner.submit(&format!("#{sandbox}-previous button[type=submit]"));
    assert!(owner.text(".flash").contains("Previous key revoked"));
    assert_eq!(
        owner.path(),
        format!("/dashboard/endpoints/{slug}/collaborators?done=key-revoked#{sandbox}-panel")
    );
    assert_eq!(status(&s, &slug, &member.sandbox_key), 401);
    assert_eq!(status(&s, &slug, &m1), 200);

    // Once deployed, the owner replaces the collaborator's production key; the collaborator
    // sees the new one on their Production tab, and the first one stops at once.
    s.deploy(&slug);
    collaborator.goto(&format!("/dashboard/endpoints/{slug}/production"));
    let live0 = collaborator.value("#production-key");
    assert!(live0.starts_with("tm_live_"), "{live0}");
    let production = format!("collab-{id}-production-key");
    owner.goto(&format!("/dashboard/endpoints/{slug}/collaborators"));
    choose_grace(&owner, &production, 0);
    answer_confirm(&owner, true);
    owner.submit(&format!(
        "form[action$='/collaborators/{id}/keys/production/rotate'] button[type=submit]"
    ));
    assert!(owner.text(".flash").contains("New key issued"));
    collaborator.goto(&format!("/dashboard/endpoints/{slug}/production"));
    let live1 = collaborator.value("#production-key");
    assert!(live1.starts_with("tm_live_") && live1 != live0, "{live1}");
    assert_masked(&collaborator, "production-key", &live1, "tm_live_");
    assert_eq!(status(&s, &slug, &live1), 200);
    assert_eq!(status(&s, &slug, &live0), 401);

    // Phone width: the key panels fit the screen.
    owner.phone_width();
    for page in ["", "/collaborators"] {
        owner.goto(&format!("/dashboard/endpoints/{slug}{page}"));
        owner.assert_fits_width();
    }
    owner.assert_clean();
    collaborator.assert_clean();
}

#[test]
fn a_name_already_in_use_is_refused_next_to_the_form_with_the_input_kept() {
    let s = TestServer::start();
    let orders = s.create_endpoint("Orders", &[]);
    let leads = s.create_endpoint("Leads", &[]);
    let leads_path = format!("/dashboard/endpoints/{}", leads.slug);
    let browser = Browser::start();

    // The create form: 409, the message above the form, the name typed kept, nothing made.
    let page = browser.session(&s.base_url());
    login(&page, OWNER_EMAIL, &s.password);
    page.fill("#name", " orders ");
    page.submit("form[action='/dashboard/endpoints'] button[type=submit]");
    assert!(
        page.path().starts_with("/dashboard/endpoints"),
        "{}",
        page.path()
    );
    assert!(
        page.text(".error")
            .contains("already have an endpoint named")
    );
    assert_eq!(page.value("#name"), " orders ");
    let listed = s.manage("GET", "/api/v1/manage/endpoints", None).json();
    assert_eq!(listed["data"].as_array().unwrap().len(), 2, "{listed}");

    // The settings form: the detail page again (409), the error in the form, every typed
    // value kept, nothing saved.
    let page = browser.session(&s.base_url());
    login(&page, OWNER_EMAIL, &s.password);
    page.goto(&leads_path);
    page.fill("#ep-name", "ORDERS");
    page.fill("#ep-description", "Sales leads");
    page.fill("#ep-fields", "email");
    page.submit("form[action$='/settings'] button[type=submit]");
    assert!(
        page.text("form[action$='/settings'] .error")
            .contains("already have an endpoint named")
    );
    assert_eq!(page.value("#ep-name"), "ORDERS");
    assert_eq!(page.value("#ep-description"), "Sales leads");
    assert_eq!(page.value("#ep-fields"), "email");
    assert_eq!(page.text("h1"), "Leads");
    page.screenshot("settings-name-taken");
    let v = s
        .manage(
            "GET",
            &format!("/api/v1/manage/endpoints/{}", leads.slug),
            None,
        )
        .json();
    assert_eq!(v["name"], "Leads");
    assert_eq!(v["description"], serde_json::Value::Null);

    // Invalid input is shown the same way (400).
    let page = browser.session(&s.base_url());
    login(&page, OWNER_EMAIL, &s.password);
    page.goto(&leads_path);
    page.fill("#ep-fields", "email, email");
    page.submit("form[action$='/settings'] button[type=submit]");
    assert!(
        page.text("form[action$='/settings'] .error")
            .contains("twice")
    );
    assert_eq!(page.value("#ep-fields"), "email, email");

    // Another name saves as before.
    let owner = browser.session(&s.base_url());
    login(&owner, OWNER_EMAIL, &s.password);
    owner.goto(&leads_path);
    owner.fill("#ep-name", "Leads 2026");
    owner.submit("form[action$='/settings'] button[type=submit]");
    assert!(owner.text(".flash").contains("Changes saved"));
    assert_eq!(owner.text("h1"), "Leads 2026");
    assert_ne!(orders.slug, leads.slug);
    owner.assert_clean();
}

#[test]
fn the_owner_deletes_an_endpoint_by_typing_its_name() {
    let s = TestServer::start();
    let ep = s.create_endpoint("Orders", &[]);
    let detail = format!("/dashboard/endpoints/{}", ep.slug);
    let api = format!("/api/v1/manage/endpoints/{}", ep.slug);
    let browser = Browser::start();

    // A wrong name: the page again (400), the error next to the field, the input kept,
    // nothing deleted. The section says what purging leaves on the disk, and the remedy.
    let page = browser.session(&s.base_url());
    login(&page, OWNER_EMAIL, &s.password);
    page.goto(&detail);
    let zone = page.text(".danger-zone");
    assert!(zone.contains("intake compact"), "{zone}");
    page.fill("#delete-name", "Order");
    page.submit("form[action*='/delete'] button[type=submit]");
    assert!(
        page.text("form[action*='/delete'] .error")
            .contains("Type the endpoint's name, Orders")
    );
    assert_eq!(page.value("#delete-name"), "Order");
    assert_eq!(
        page.eval("document.getElementById('delete-name').getAttribute('aria-invalid')"),
        "true"
    );
    page.screenshot("delete-endpoint-refused");
    common::assert_status(&s.manage("GET", &api, None), 200);
    assert_eq!(status(&s, &ep.slug, &ep.sandbox_key), 200);

    // The right name: back to the list with the flash; the endpoint and its keys are gone.
    let owner = browser.session(&s.base_url());
    login(&owner, OWNER_EMAIL, &s.password);
    owner.goto(&detail);
    owner.fill("#delete-name", "Orders");
    owner.submit("form[action*='/delete'] button[type=submit]");
    assert!(
        owner
            .path()
            .starts_with("/dashboard/endpoints?done=deleted"),
        "{}",
        owner.path()
    );
    let flash = owner.text(".flash");
    assert!(flash.contains("Endpoint deleted"), "{flash}");
    // What stays on the disk until the store is compacted (docs/src/security.md).
    assert!(flash.contains("intake compact"), "{flash}");
    assert!(!owner.exists(&format!("a[href='{detail}']")));
    common::assert_error(&s.manage("GET", &api, None), 404, "endpoint_not_found");
    assert_eq!(status(&s, &ep.slug, &ep.sandbox_key), 401);
    owner.assert_clean();
}

/// A refused key form comes back beside the key it was about: Revoke now from a stale tab
/// (another tab revoked the key first, so the form is gone) and a Rotate with a grace period
/// out of range (a tampered choice) each show their reason inside that key's panel, once,
/// and change nothing.
#[test]
fn a_refused_key_form_is_answered_inside_its_panel() {
    let s = TestServer::start();
    let ep = s.create_endpoint("Orders", &[]);
    let path = format!("/dashboard/endpoints/{}", ep.slug);
    let browser = Browser::start();
    let first = browser.session(&s.base_url());
    login(&first, OWNER_EMAIL, &s.password);
    first.goto(&path);
    choose_grace(&first, "sandbox-key", 3600);
    answer_confirm(&first, true);
    first.submit("form[action$='/keys/sandbox/rotate'] button[type=submit]");
    let key = first.value("#sandbox-key");
    assert_ne!(key, ep.sandbox_key);

    // A second tab still shows Revoke now after the first one used it.
    let second = browser.session(&s.base_url());
    login(&second, OWNER_EMAIL, &s.password);
    second.goto(&path);
    answer_confirm(&first, true);
    first.submit("#sandbox-key-previous button[type=submit]");
    assert!(first.text(".flash").contains("Previous key revoked"));
    answer_confirm(&second, true);
    second.submit("#sandbox-key-previous button[type=submit]");
    let errors = "document.querySelectorAll('[data-form-error]').length";
    assert_eq!(second.eval(errors), 1);
    let reason = second.text("#sandbox-key-panel [data-form-error]");
    assert!(reason.contains("previous key"), "{reason}");
    assert!(!second.exists("#sandbox-key-previous"));
    assert_eq!(second.value("#sandbox-key"), key);

    // A grace period the form does not offer: refused in the panel, the key kept.
    second.eval(
        "document.getElementById('sandbox-key-grace').add(new Option('a year', '31536000'), 0);
         document.getElementById('sandbox-key-grace').value = '31536000'",
    );
    answer_confirm(&second, true);
    second.submit("form[action$='/keys/sandbox/rotate'] button[type=submit]");
    assert_eq!(second.eval(errors), 1);
    let reason = second.text("#sandbox-key-panel [data-form-error]");
    assert!(reason.contains("grace_period_seconds"), "{reason}");
    assert_eq!(second.value("#sandbox-key"), key);
    assert_eq!(status(&s, &ep.slug, &key), 200);
    assert_eq!(status(&s, &ep.slug, &ep.sandbox_key), 401);
    second.assert_clean();
}

#[test]
fn the_signing_secret_is_masked_with_reveal_for_the_owner_and_collaborators() {
    let s = TestServer::start();
    let browser = Browser::start();
    let owner = browser.session(&s.base_url());
    login(&owner, OWNER_EMAIL, &s.password);
    let slug = owner.create_endpoint("Orders");
    s.deploy(&slug);
    let secret_of = |environment: &str| -> String {
        let r = s.manage(
            "GET",
            &format!("/api/v1/manage/endpoints/{slug}/webhook-secrets/{environment}"),
            None,
        );
        r.json()["secret"].as_str().expect("secret").to_string()
    };

    // On both tabs: masked like the key, Reveal shows it, Hide masks it again, Copy copies
    // the whole secret.
    for (environment, tab) in [("sandbox", ""), ("production", "/production")] {
        let secret = secret_of(environment);
        let dom_id = format!("{environment}-secret");
        owner.goto(&format!("/dashboard/endpoints/{slug}{tab}"));
        assert_masked(&owner, &dom_id, &secret, "whsec_");
        owner.click(&format!("[data-reveal='{dom_id}']"));
        assert_eq!(owner.text(&format!("#{dom_id}-shown")), secret);
        owner.click(&format!("[data-reveal='{dom_id}']"));
        assert_masked(&owner, &dom_id, &secret, "whsec_");
        owner.eval(
            "navigator.clipboard.writeText = function (t) { window.copied = t; return Promise.resolve(); }",
        );
        owner.click(&format!("[data-copy='{dom_id}']"));
        owner.wait_until(&format!("window.copied === '{secret}'"));
    }
    owner.screenshot("signing-secret-masked");

    // A collaborator may view it (the spec): masked the same way, with Reveal.
    add_collaborator(&s, &slug, COLLABORATOR, &["read"]);
    let collaborator = browser.session(&s.base_url());
    login(&collaborator, COLLABORATOR, COLLABORATOR_PASSWORD);
    let secret = secret_of("sandbox");
    collaborator.goto(&format!("/dashboard/endpoints/{slug}"));
    assert_masked(&collaborator, "sandbox-secret", &secret, "whsec_");
    collaborator.click("[data-reveal='sandbox-secret']");
    assert_eq!(collaborator.text("#sandbox-secret-shown"), secret);
    owner.assert_clean();
    collaborator.assert_clean();
}
