//! The deploy handoff between a collaborator and the owner, in a real headless Chromium against
//! the real server with a real SMTP sink: every deploy e-mail's link, opened in its
//! recipient's signed-in browser, is the dashboard page it announces and shows no full key
//! (an old management API link too); notifications resolve once their request is settled and
//! are read once followed; the collaborator sees the last rejection and can withdraw a request.
//! Run on PostgreSQL too (`INTAKE_TEST_BACKEND=postgres`). Any console error, uncaught
//! exception or CSP violation fails a test (tests/common/browser.rs).

use crate::common::{self, browser};

use std::time::{Duration, Instant};

use browser::{Browser, Session};
use common::smtp::{Received, SmtpServer};
use common::{
    COLLABORATOR_PASSWORD, OWNER_EMAIL, TestServer, add_collaborator, assert_error, assert_status,
    session_cookie,
};
use serde_json::{Value, json};

const COLLABORATOR: &str = "dev@example.com";
const MAIL_WAIT: Duration = Duration::from_secs(20);

fn server_with_mail(smtp: &SmtpServer) -> TestServer {
    TestServer::start_with_config(&smtp.config_toml("intake@example.com"))
}

/// The e-mail to `to` whose subject starts with `subject`, once it has arrived.
fn mail(smtp: &SmtpServer, to: &str, subject: &str) -> Received {
    let deadline = Instant::now() + MAIL_WAIT;
    loop {
        let found = smtp
            .messages()
            .into_iter()
            .find(|m| m.to.iter().any(|t| t == to) && m.subject().starts_with(subject));
        if let Some(found) = found {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "no e-mail \"{subject}\" to {to}; received: {:?}",
            smtp.messages()
                .iter()
                .map(|m| (m.to.clone(), m.subject()))
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The only link of a deploy e-mail (a line that is a URL of this server).
fn link(s: &TestServer, mail: &Received) -> String {
    let body = mail.body_text();
    let links: Vec<&str> = body.lines().filter(|l| l.starts_with("http")).collect();
    assert_eq!(links.len(), 1, "one link expected in:\n{body}");
    assert!(
        links[0].starts_with(&s.base_url()),
        "the link is not built from the server's public URL:\n{body}"
    );
    links[0].to_string()
}

/// Opens `url` in `page` and checks that it shows the dashboard page `path` (HTML, not JSON)
/// and none of `keys` in full.
fn opens_dashboard_page(page: &Session, url: &str, path: &str, keys: &[&str]) {
    page.goto(url);
    assert_eq!(page.path().split('#').next(), Some(path), "opened {url}");
    assert!(page.exists(".main-nav"), "{url} is no dashboard page");
    let text = page.eval("document.body.innerText");
    let text = text.as_str().unwrap_or_default();
    assert!(
        !text.trim_start().starts_with('{'),
        "{url} shows JSON: {text}"
    );
    for key in keys {
        assert!(!text.contains(key), "{url} shows a full key: {text}");
    }
}

/// The endpoint as the management API shows it to the owner.
fn endpoint(s: &TestServer, slug: &str) -> Value {
    let r = s.manage("GET", &format!("/api/v1/manage/endpoints/{slug}"), None);
    assert_status(&r, 200);
    r.json()
}

/// The visible text of each notification about a deploy on the notifications page, newest
/// first.
fn notifications(page: &Session) -> Vec<String> {
    page.goto("/dashboard/notifications");
    let texts = page.eval(
        "JSON.stringify(Array.from(document.querySelectorAll('#notifications li')).map(li => li.innerText))",
    );
    let texts: Vec<String> = serde_json::from_str(texts.as_str().expect("texts")).expect("JSON");
    texts.into_iter().filter(|t| t.contains("deploy")).collect()
}

fn request_deploy(page: &Session, slug: &str, note: &str) {
    page.goto(&format!("/dashboard/endpoints/{slug}"));
    page.paste("#deploy-note", note);
    page.submit("form[action$='/deploy-request'] button[type=submit]");
    assert!(page.text(".flash").contains("Deploy requested"));
}

#[test]
fn every_deploy_email_links_to_the_dashboard_page_it_announces_and_never_to_keys() {
    let smtp = SmtpServer::start();
    let s = server_with_mail(&smtp);
    let ep = s.create_endpoint("Orders", &[]);
    let collaborator = add_collaborator(&s, &ep.slug, COLLABORATOR, &["read", "create"]);
    let browser = Browser::start();
    let owner = browser.session(&s.base_url());
    owner.login(OWNER_EMAIL, &s.password);
    let dev = browser.session(&s.base_url());
    dev.login(COLLABORATOR, COLLABORATOR_PASSWORD);
    let page = format!("/dashboard/endpoints/{}", ep.slug);
    let owner_keys = [ep.sandbox_key.as_str(), ep.production_key.as_str()];

    // "Deploy request" to the owner: the endpoint's deploy section.
    request_deploy(&dev, &ep.slug, "Integration done");
    let asked = mail(&smtp, OWNER_EMAIL, "Deploy request:");
    opens_dashboard_page(&owner, &link(&s, &asked), &page, &owner_keys);
    assert!(owner.exists("#deploy-pending"));

    // "Deploy request declined" to the collaborator: the deploy section, with the reason.
    owner.paste("#reject-note", "Add a schema first");
    owner.submit("form[action$='/deploy-request/reject'] button[type=submit]");
    let declined = mail(&smtp, COLLABORATOR, "Deploy request declined:");
    opens_dashboard_page(
        &dev,
        &link(&s, &declined),
        &page,
        &[&collaborator.sandbox_key],
    );
    assert!(dev.text("#deploy-rejected").contains("Add a schema first"));

    // "Deployed" to the collaborator: the Production tab, where the key is (masked).
    request_deploy(&dev, &ep.slug, "Schema added");
    owner.goto(&page);
    owner.submit_confirmed("form[action$='/deploy-request/approve'] button[type=submit]");
    let deployed = mail(&smtp, COLLABORATOR, "Deployed:");
    let authorization = collaborator.authorization(&s);
    let path = format!("/api/v1/manage/endpoints/{}", ep.slug);
    let mine = s
        .manage_with("GET", &path, Some(&authorization), None)
        .json();
    let production_key = mine["production_key"].as_str().expect("production key");
    let collaborator_keys = [collaborator.sandbox_key.as_str(), production_key];
    opens_dashboard_page(
        &dev,
        &link(&s, &deployed),
        &format!("{page}/production"),
        &collaborator_keys,
    );
    assert_eq!(dev.text("#key-title"), "Production API key");

    // The management API link the e-mails carried before, opened in the signed-in browser:
    // the dashboard page too.
    opens_dashboard_page(
        &dev,
        &format!("{}{path}", s.base_url()),
        &page,
        &collaborator_keys,
    );
    opens_dashboard_page(
        &owner,
        &format!("{}{path}", s.base_url()),
        &page,
        &owner_keys,
    );
    // In a browser without a session, through the login page, which leads back to it.
    let visitor = browser.session(&s.base_url());
    visitor.goto(&path);
    let next: String = form_urlencoded::byte_serialize(page.as_bytes()).collect();
    assert_eq!(visitor.path(), format!("/dashboard/login?next={next}"));
    assert!(visitor.exists("#password"));

    // Read with the session cookie alone and no HTML wanted, the answer holds no key.
    let login = s.request_json(
        "POST",
        "/api/v1/auth/login",
        &[],
        Some(&json!({ "email": COLLABORATOR, "password": COLLABORATOR_PASSWORD })),
    );
    assert_status(&login, 200);
    let cookie = format!("intake_session={}", session_cookie(&login));
    let read = s.request(
        "GET",
        &path,
        &[("Cookie", cookie.as_str()), ("Accept", "application/json")],
        None,
    );
    assert_error(&read, 403, "token_required");
    for key in collaborator_keys {
        assert!(!read.text().contains(key), "{}", read.text());
    }
}

#[test]
fn settled_deploy_requests_resolve_their_notifications_and_a_collaborator_can_withdraw() {
    let smtp = SmtpServer::start();
    let s = server_with_mail(&smtp);
    let ep = s.create_endpoint("Orders", &[]);
    let collaborator = add_collaborator(&s, &ep.slug, COLLABORATOR, &["read"]);
    let browser = Browser::start();
    let owner = browser.session(&s.base_url());
    owner.login(OWNER_EMAIL, &s.password);
    let dev = browser.session(&s.base_url());
    dev.login(COLLABORATOR, COLLABORATOR_PASSWORD);
    let page = format!("/dashboard/endpoints/{}", ep.slug);
    let review = "Review the deploy request";
    owner.goto("/dashboard/notifications");
    owner.submit("#mark-all-read");

    // Rejected: the owner's notification says so and asks for nothing more; the collaborator's
    // deploy section shows the rejection, its reason and its time.
    request_deploy(&dev, &ep.slug, "First try");
    owner.goto(&page);
    owner.paste("#reject-note", "Add a schema first");
    owner.submit("form[action$='/deploy-request/reject'] button[type=submit]");
    let seen = notifications(&owner);
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(
        seen[0].contains("Resolved: the request was rejected"),
        "{seen:?}"
    );
    assert!(
        !seen[0].contains("New:") && !seen[0].contains(review),
        "{seen:?}"
    );
    let rejected_at = endpoint(&s, &ep.slug)["last_rejection"]["rejected_at"]
        .as_str()
        .expect("rejected_at")
        .to_string();
    dev.goto(&page);
    let shown = dev.text("#deploy-rejected");
    assert!(
        shown.contains("The owner rejected your last deploy request"),
        "{shown}"
    );
    assert!(shown.contains("Reason: “Add a schema first”"), "{shown}");
    let when = format!("{} {} UTC", &rejected_at[..10], &rejected_at[11..19]);
    assert!(shown.contains(&when), "{shown} lacks {when}");
    assert_eq!(
        dev.eval("document.querySelector('#deploy-rejected time').getAttribute('datetime')"),
        json!(rejected_at)
    );

    // A new request clears the rejection and resolves the collaborator's notification of it.
    request_deploy(&dev, &ep.slug, "Schema added");
    assert!(!dev.exists("#deploy-rejected"));
    let theirs = notifications(&dev);
    assert!(
        theirs[0].contains("Resolved: the deploy was requested again"),
        "{theirs:?}"
    );
    let seen = notifications(&owner);
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(
        seen[0].starts_with("New:") && seen[0].contains(review),
        "{seen:?}"
    );

    // The collaborator withdraws it: the owner's notification says so and is read.
    dev.goto(&page);
    let question = dev.submit_confirmed("#withdraw-request");
    assert!(question.contains("Withdraw"), "{question}");
    assert!(dev.text(".flash").contains("withdrawn"));
    assert!(dev.exists("form[action$='/deploy-request'] #deploy-note"));
    let seen = notifications(&owner);
    assert!(
        seen[0].contains("Resolved: the request was withdrawn by the collaborator who asked"),
        "{seen:?}"
    );
    assert!(
        seen.iter()
            .all(|n| !n.contains("New:") && !n.contains(review)),
        "{seen:?}"
    );
    assert!(!owner.exists(".main-nav .count"));

    // Over the API, only the collaborator who asked withdraws; with nothing pending, 404.
    let request = format!("/api/v1/manage/endpoints/{}/deploy-request", ep.slug);
    let authorization = collaborator.authorization(&s);
    let r = s.manage_with("DELETE", &request, Some(&authorization), None);
    assert_error(&r, 404, "deploy_request_not_found");
    request_deploy(&dev, &ep.slug, "Third time");
    assert_error(&s.manage("DELETE", &request, None), 403, "requester_only");

    // Following the notification's link reads it; approving resolves it.
    notifications(&owner);
    owner.submit(".notification-link");
    assert_eq!(owner.path().split('#').next(), Some(page.as_str()));
    assert!(owner.exists("#deploy-pending"));
    let seen = notifications(&owner);
    assert!(
        !seen[0].contains("New:") && seen[0].contains(review),
        "{seen:?}"
    );
    owner.goto(&page);
    owner.submit_confirmed("form[action$='/deploy-request/approve'] button[type=submit]");
    let seen = notifications(&owner);
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(
        seen[0].contains("Resolved: the request was approved and the endpoint deployed"),
        "{seen:?}"
    );
    assert!(seen.iter().all(|n| !n.contains(review)), "{seen:?}");
    let audit = s.manage(
        "GET",
        &format!("/api/v1/manage/endpoints/{}/audit", ep.slug),
        None,
    );
    let actions: Vec<Value> = audit.json()["data"]
        .as_array()
        .expect("audit")
        .iter()
        .map(|e| e["action"].clone())
        .collect();
    assert!(actions.contains(&json!("deploy.withdrawn")), "{actions:?}");
}
