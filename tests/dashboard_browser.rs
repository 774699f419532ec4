//! The dashboard in a real headless Chromium against the real server: the owner and a
//! collaborator through the spec's workflows. Each test is a whole workflow (the browser
//! costs seconds to start); any console error, uncaught exception or CSP violation fails it
//! (see tests/common/browser.rs). Screenshots of the main pages go to target/screenshots/.

#[path = "common/browser.rs"]
mod browser;
mod common;

use browser::Browser;
use common::{OWNER_EMAIL, TestServer};

const COLLABORATOR: &str = "collab@example.com";
const COLLABORATOR_PASSWORD: &str = "collaborator password 1";

#[test]
fn owner_and_collaborator_go_from_invitation_to_production() {
    let s = TestServer::start();
    let browser = Browser::start();
    let owner = browser.session(&s.base_url());

    // Owner logs in (the dashboard sends a logged-out visitor to the login page).
    owner.goto("/dashboard");
    assert!(
        owner.path().starts_with("/dashboard/login"),
        "{}",
        owner.path()
    );
    owner.fill("#email", OWNER_EMAIL);
    owner.fill("#password", &s.password);
    owner.screenshot("login");
    owner.submit("form[action='/dashboard/login'] button[type=submit]");
    assert_eq!(owner.path(), "/dashboard/endpoints");

    // Creates an endpoint and sees its sandbox key and signing secret.
    owner.fill("#name", "Orders");
    owner.submit("form[action='/dashboard/endpoints'] button[type=submit]");
    assert!(owner.text(".flash").contains("Endpoint created"));
    assert_eq!(owner.text("h1"), "Orders");
    assert!(owner.text(".badges").contains("Sandbox"));
    let slug = owner
        .path()
        .trim_start_matches("/dashboard/endpoints/")
        .split('?')
        .next()
        .unwrap()
        .to_string();
    let sandbox_key = owner.value("#sandbox-key");
    assert!(sandbox_key.starts_with("tm_test_"), "{sandbox_key}");
    assert!(owner.value("#sandbox-secret").starts_with("whsec_"));
    assert_eq!(
        owner.text("#base-url"),
        format!("{}/api/v1/data/{slug}", s.base_url())
    );
    owner.screenshot("endpoint-sandbox");

    // The sandbox key works for a data call, and the call shows in the request log.
    let r = s.request(
        "POST",
        &format!("/api/v1/data/{slug}"),
        &[
            ("Authorization", &format!("Bearer {sandbox_key}")),
            ("Content-Type", "application/json"),
        ],
        Some(br#"{"email":"ada@example.com"}"#),
    );
    assert_eq!(r.status, 202, "{}", r.describe());
    s.wait_request_log(&slug, "sandbox", std::time::Duration::from_secs(10), |d| {
        !d.is_empty()
    });
    owner.goto(&format!("/dashboard/endpoints/{slug}/requests"));
    assert!(owner.text("#request-log").contains("202"));
    owner.screenshot("request-log");

    // Invites a collaborator; without SMTP the page shows the invitation link.
    owner.goto(&format!("/dashboard/endpoints/{slug}/collaborators"));
    owner.fill("#invite-email", COLLABORATOR);
    owner.submit("form[action$='/invitations'] button[type=submit]");
    assert!(owner.text(".flash").contains("Invitation created"));
    let link = owner.value(".invite-link");
    assert!(link.contains("/invitations/inv_"), "{link}");
    owner.screenshot("collaborators");

    // The collaborator opens the link, chooses a password, and lands on the endpoint.
    let collaborator = browser.session(&s.base_url());
    collaborator.goto(&link);
    assert!(collaborator.text("h1").contains("Orders"));
    collaborator.fill("#password", COLLABORATOR_PASSWORD);
    collaborator.fill("#password_again", COLLABORATOR_PASSWORD);
    collaborator.screenshot("invitation");
    collaborator.submit("form[action$='/accept'] button[type=submit]");
    assert!(
        collaborator
            .path()
            .starts_with(&format!("/dashboard/endpoints/{slug}")),
        "{}",
        collaborator.path()
    );
    assert!(collaborator.text(".flash").contains("Invitation accepted"));
    let collaborator_key = collaborator.value("#sandbox-key");
    assert!(collaborator_key.starts_with("tm_test_") && collaborator_key != sandbox_key);
    // No production key before the deploy.
    collaborator.goto(&format!("/dashboard/endpoints/{slug}/production"));
    assert!(collaborator.exists("#production-pending"));
    assert!(!collaborator.exists("#production-key"));

    // Requests the deploy.
    collaborator.goto(&format!("/dashboard/endpoints/{slug}"));
    collaborator.fill("#deploy-note", "Integration done");
    collaborator.submit("form[action$='/deploy-request'] button[type=submit]");
    assert!(collaborator.text(".flash").contains("Deploy requested"));
    assert!(
        collaborator
            .text("#deploy-pending")
            .contains("Integration done")
    );

    // The owner sees the request and approves it; the production key appears.
    owner.goto(&format!("/dashboard/endpoints/{slug}"));
    assert!(owner.text("#deploy-pending").contains(COLLABORATOR));
    owner.screenshot("deploy-requested");
    owner.submit("form[action$='/deploy-request/approve'] button[type=submit]");
    assert_eq!(
        owner.path(),
        format!("/dashboard/endpoints/{slug}/production?done=approved")
    );
    assert!(owner.text(".badges").contains("Production"));
    assert!(owner.value("#production-key").starts_with("tm_live_"));
    owner.screenshot("endpoint-production");

    // The collaborator is notified and takes the production key from the Production tab.
    collaborator.goto("/dashboard/notifications");
    assert!(collaborator.text("#notifications").contains("Orders"));
    collaborator.screenshot("notifications");
    collaborator.goto(&format!("/dashboard/endpoints/{slug}/production"));
    let live_key = collaborator.value("#production-key");
    assert!(live_key.starts_with("tm_live_"), "{live_key}");
    let r = s.request(
        "POST",
        &format!("/api/v1/data/{slug}"),
        &[
            ("Authorization", &format!("Bearer {live_key}")),
            ("Content-Type", "application/json"),
        ],
        Some(br#"{"email":"grace@example.com"}"#),
    );
    assert_eq!(r.status, 202, "{}", r.describe());

    owner.goto(&format!("/dashboard/endpoints/{slug}/usage"));
    assert!(owner.exists("svg.chart"));
    owner.screenshot("usage");

    // Phone width: the collaborator's pages fit the screen without sideways scrolling.
    collaborator.phone_width();
    for page in ["", "/production", "/requests", "/deliveries"] {
        collaborator.goto(&format!("/dashboard/endpoints/{slug}{page}"));
        collaborator.assert_fits_width();
    }
    collaborator.goto(&format!("/dashboard/endpoints/{slug}"));
    collaborator.screenshot("phone-endpoint");

    // Logging out ends the session.
    collaborator.submit("form[action='/dashboard/logout'] button[type=submit]");
    assert!(collaborator.path().starts_with("/dashboard/login"));
    collaborator.goto("/dashboard/endpoints");
    assert!(
        collaborator.path().starts_with("/dashboard/login"),
        "{}",
        collaborator.path()
    );
    owner.assert_clean();
    collaborator.assert_clean();
}
