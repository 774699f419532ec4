//! The dashboard in a real headless Chromium against the real server: the owner and a
//! collaborator through the spec's workflows. Each test is a whole workflow (the browser
//! costs seconds to start); any console error, uncaught exception or CSP violation fails it
//! (see tests/common/browser.rs). Screenshots of the main pages go to target/screenshots/.

use crate::common::{self, browser};

use browser::Browser;
use common::{OWNER_EMAIL, TestServer};
use intake::http::openapi::examples;
use serde_json::Value;

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
    let slug = owner.endpoint_slug();
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
    owner.submit_confirmed("form[action$='/deploy-request/approve'] button[type=submit]");
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

/// The text of every code example on the API Reference tab, per operation id, in the page's
/// order (curl, fetch, requests).
fn page_samples(page: &browser::Session) -> Vec<(String, Vec<String>)> {
    let cards = page.eval(
        "JSON.stringify(Array.from(document.querySelectorAll('.api-card')).map(c => \
         [c.dataset.operation, Array.from(c.querySelectorAll('.sample-code')).map(e => e.textContent)]))",
    );
    serde_json::from_str(cards.as_str().unwrap()).unwrap()
}

/// The `x-codeSamples` sources of an endpoint document, in the same shape.
fn document_samples(doc: &Value, samples: &[(String, Vec<String>)]) -> Vec<(String, Vec<String>)> {
    samples
        .iter()
        .map(|(id, _)| {
            let op = operation(doc, id).1;
            let sources = op["x-codeSamples"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["source"].as_str().unwrap().to_string())
                .collect();
            (id.clone(), sources)
        })
        .collect()
}

/// The path and operation object of `id` in an OpenAPI document.
fn operation<'d>(doc: &'d Value, id: &str) -> (&'d str, &'d Value) {
    doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, item)| {
            item.as_object()
                .unwrap()
                .values()
                .map(move |op| (path.as_str(), op))
        })
        .find(|(_, op)| op["operationId"] == id)
        .unwrap_or_else(|| panic!("{id} not in the document"))
}

/// Executes one call form of the Quick Start tab and returns its status line and body.
fn execute(page: &browser::Session, operation: &str) -> (String, String) {
    page.eval(&format!(
        "document.getElementById('{operation}-result').hidden = true"
    ));
    page.click(&format!("#call-{operation} button[type=submit]"));
    page.wait_until(&format!(
        "!document.getElementById('{operation}-result').hidden"
    ));
    (
        page.text(&format!("#{operation}-result .status")),
        page.text(&format!("#{operation}-result .response-body")),
    )
}

#[test]
fn the_api_test_page_authorizes_a_sandbox_key_only_and_runs_the_calls() {
    let s = TestServer::start();
    let browser = Browser::start();
    let owner = browser.session(&s.base_url());
    owner.goto("/dashboard/login");
    owner.fill("#email", OWNER_EMAIL);
    owner.paste("#password", &s.password);
    owner.submit("form[action='/dashboard/login'] button[type=submit]");
    owner.paste("#name", "Orders");
    owner.submit("form[action='/dashboard/endpoints'] button[type=submit]");
    let slug = owner.endpoint_slug();
    owner.paste("#ep-description", "Orders from the web shop");
    owner.submit("form[action$='/settings'] button[type=submit]");
    let sandbox_key = owner.value("#sandbox-key");
    // Deployed, so that the production key works for data calls: the test page must refuse
    // it because it is a production key, not because it does not work yet.
    s.deploy(&slug);
    let r = s.manage("GET", &format!("/api/v1/manage/endpoints/{slug}"), None);
    let live_key = common::Endpoint::from_json(&r.json()).production_key;
    let other = s.create_endpoint("Other", &[]);

    // Opened from the detail page; the header says what and where.
    owner.goto(&format!("/dashboard/endpoints/{slug}"));
    owner.submit("#open-test-page");
    assert_eq!(owner.path(), format!("/dashboard/endpoints/{slug}/test"));
    assert_eq!(owner.text("h1"), "Orders");
    assert_eq!(owner.text("#test-description"), "Orders from the web shop");
    assert_eq!(owner.text("#environment-badge"), "Sandbox");
    assert_eq!(
        owner.text("#version-info"),
        format!("API v1 · intake {}", env!("CARGO_PKG_VERSION"))
    );

    // Tabs: Quick Start first; the arrow keys move between the three.
    assert_eq!(owner.text("[role=tab][aria-selected=true]"), "Quick Start");
    assert!(owner.visible("#panel-quick") && !owner.visible("#panel-guide"));
    owner.eval("document.getElementById('tab-quick').focus()");
    owner.press("ArrowRight");
    assert_eq!(owner.eval("document.activeElement.id"), "tab-guide");
    assert!(owner.visible("#panel-guide") && !owner.visible("#panel-quick"));
    assert!(owner.text("#panel-guide").contains("webhook-timestamp"));
    owner.screenshot("testpage-guide");
    owner.press("ArrowRight");
    assert!(owner.visible("#panel-reference"));

    // API Reference: nine cards whose URLs, parameters and code samples are the endpoint's
    // OpenAPI document's.
    let doc = s
        .data(
            "GET",
            &format!("/api/v1/data/{slug}/openapi.json"),
            &sandbox_key,
            None,
        )
        .json();
    let server = doc["servers"][0]["url"].as_str().unwrap().to_string();
    let cards = owner.eval(
        "JSON.stringify(Array.from(document.querySelectorAll('.api-card')).map(c => \
         [c.dataset.operation, c.dataset.method, c.querySelector('.card-url code').textContent, \
          Array.from(c.querySelectorAll('.param-name')).map(e => e.textContent)]))",
    );
    let cards: Vec<(String, String, String, Vec<String>)> =
        serde_json::from_str(cards.as_str().unwrap()).unwrap();
    let methods: Vec<&str> = cards.iter().map(|c| c.1.as_str()).collect();
    assert_eq!(
        methods,
        [
            "POST", "POST", "GET", "GET", "GET", "GET", "GET", "PUT", "DELETE"
        ]
    );
    for (id, method, url, params) in &cards {
        let (path, op) = operation(&doc, id);
        assert_eq!(doc["paths"][path][method.to_lowercase()], *op, "{id}");
        assert_eq!(*url, format!("{server}{path}"), "{id}");
        let documented: Vec<&str> = op["parameters"]
            .as_array()
            .map(|ps| ps.iter().map(|p| p["name"].as_str().unwrap()).collect())
            .unwrap_or_default();
        assert_eq!(*params, documented, "{id}");
    }
    let placeholders = page_samples(&owner);
    assert_eq!(placeholders, document_samples(&doc, &placeholders));
    owner.screenshot("testpage-api-reference");
    owner.click("#tab-quick");
    assert!(owner.visible("#panel-quick"));

    // A production key is refused before any call is made with it; so is another endpoint's
    // sandbox key.
    owner.paste("#test-key", &live_key);
    owner.click("#authorize");
    owner.wait_until("!document.getElementById('auth-message').hidden");
    assert!(
        owner.text("#auth-message").contains("production key"),
        "{}",
        owner.text("#auth-message")
    );
    assert!(owner.visible("#test-key") && !owner.visible("#forget-key"));
    owner.paste("#test-key", &other.sandbox_key);
    owner.click("#authorize");
    owner.wait_until(
        "document.getElementById('auth-message').textContent.includes('another endpoint')",
    );
    assert!(owner.visible("#test-key"));
    // Sending before authorizing says what to do instead of doing nothing.
    owner.click("#call-createRecord button[type=submit]");
    assert!(
        owner.text("#createRecord-note").contains("Authorize"),
        "{}",
        owner.text("#createRecord-note")
    );
    assert!(
        owner
            .eval("document.getElementById('createRecord-result').hidden")
            .as_bool()
            .unwrap()
    );

    // The sandbox key: the input goes, Forget key comes.
    owner.paste("#test-key", &sandbox_key);
    owner.click("#authorize");
    owner.wait_until("!document.getElementById('authorized').hidden");
    assert!(!owner.visible("#test-key") && owner.visible("#forget-key"));
    assert!(!owner.visible("#auth-message"));
    assert!(owner.text("#authorized-key").starts_with("tm_test_"));
    owner.screenshot("testpage-quick-start");

    // A batch from its form: the document's example, an array of two records, stored in
    // order; the other calls' record id becomes its last record's.
    let (status, body) = execute(&owner, "createRecordBatch");
    assert!(status.starts_with("HTTP 202"), "{status}: {body}");
    let batch: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(batch["data"][1]["index"], 1, "{body}");
    assert_eq!(
        owner.value("#getRecord-record_id"),
        batch["data"][1]["id"].as_str().unwrap()
    );

    // POST a record, then see it in the list, read it, find it.
    owner.paste(
        "#createRecord-body",
        r#"{"email": "ada@example.com", "total": 42.5, "ref": 123456789012345678901234567890, "e": 1E2}"#,
    );
    let (status, body) = execute(&owner, "createRecord");
    assert!(status.starts_with("HTTP 202"), "{status}: {body}");
    assert!(
        owner
            .text("#createRecord-result .headers")
            .contains("x-request-id")
    );
    let created: Value = serde_json::from_str(&body).unwrap();
    let id = created["id"].as_str().unwrap().to_string();
    let (status, body) = execute(&owner, "listRecords");
    assert!(status.starts_with("HTTP 200"), "{status}: {body}");
    let list: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(list["data"][0]["id"], id.as_str());
    assert_eq!(owner.value("#getRecord-record_id"), id);
    let (status, body) = execute(&owner, "getRecord");
    assert!(status.starts_with("HTTP 200"), "{status}: {body}");
    let record: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(record["payload"]["email"], "ada@example.com");
    // The response is indented as text, so the payload shows as stored: numbers past 2^53
    // and `1E2` as sent, not as JavaScript's doubles.
    let payload = "\n  \"payload\": {\n    \"email\": \"ada@example.com\",\n    \"total\": 42.5,\n    \
                   \"ref\": 123456789012345678901234567890,\n    \"e\": 1E2\n  },\n";
    assert!(body.contains(payload), "{body}");
    owner.paste("#searchRecords-q", "ada@example");
    let (status, body) = execute(&owner, "searchRecords");
    assert!(status.starts_with("HTTP 200"), "{status}: {body}");
    let found: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(found["data"][0]["id"], id.as_str());
    owner.screenshot("testpage-calls");
    // Empty arrays and objects stay on their line, as JSON.stringify writes them.
    owner.paste("#searchRecords-q", "no such text");
    let (_, body) = execute(&owner, "searchRecords");
    assert_eq!(body, "{\n  \"data\": [],\n  \"pagination\": {}\n}");

    // The code samples now carry the key and the record: the very text `examples` generates
    // (tests/openapi.rs runs those with curl, node and python3); the page's curl samples run
    // here too, ending with the record's deletion.
    let filled = page_samples(&owner);
    let fields: Vec<String> = Vec::new();
    let generated: Vec<(String, Vec<String>)> = examples::for_endpoint(&examples::Context {
        base_url: &server,
        slug: &slug,
        required_fields: &fields,
        key: Some(&sandbox_key),
        record_id: Some(&id),
    })
    .into_iter()
    .map(|op| {
        let sources = op.samples.into_iter().map(|s| s.source).collect();
        (op.operation_id.to_string(), sources)
    })
    .collect();
    assert_eq!(filled, generated);
    for (operation, sources) in &filled {
        let out = std::process::Command::new("sh")
            .args(["-c", &sources[0]])
            .output()
            .expect("run curl");
        assert!(
            out.status.success(),
            "{operation}: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            sources[0]
        );
    }
    common::assert_status(&s.get_record(&slug, &sandbox_key, &id), 404);

    // Forget key brings the input back and the placeholder into the samples.
    owner.click("#forget-key");
    assert!(owner.visible("#test-key") && !owner.visible("#forget-key"));
    assert_eq!(owner.value("#test-key"), "");
    assert!(page_samples(&owner)[0].1[0].contains(examples::KEY_PLACEHOLDER));

    // Production was never touched: no record, and no call in its request log.
    let production_calls = s.request_log(&slug, "environment=production").json();
    assert_eq!(production_calls["data"], serde_json::json!([]));
    let r = s.list(&slug, &live_key, "");
    assert_eq!(r.json()["data"], serde_json::json!([]));

    // Phone width: every tab fits.
    owner.phone_width();
    owner.goto(&format!("/dashboard/endpoints/{slug}/test"));
    for tab in ["#tab-quick", "#tab-guide", "#tab-reference"] {
        owner.click(tab);
        owner.assert_fits_width();
    }
    owner.screenshot("testpage-phone-reference");
    owner.assert_clean();
}
