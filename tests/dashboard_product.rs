//! The dashboard as a product, in a real headless Chromium against the real server: forms
//! that keep what was typed and say what is wrong beside the form, error pages with the
//! navigation, webhook URLs checked on save and the "Send test event" button (against a real
//! loopback receiver), the record browser (payloads shown and copied as stored; closed to
//! collaborators while the endpoint is inactive), the environment badge, and the theme toggle.
//! Any console error, uncaught exception or CSP violation fails a test (tests/common/browser.rs).

use crate::common::{self, browser};

use std::collections::HashSet;
use std::time::{Duration, Instant};

use browser::{Browser, Session};
use common::receiver::{Receiver, Reply};
use common::{COLLABORATOR_PASSWORD, OWNER_EMAIL, ServerClient, TestServer, add_collaborator};
use serde_json::{Value, json};

/// Writes one record per payload with `key` and waits until the last is stored (writes are
/// stored in the order they were acknowledged); returns their ids in that order.
fn write_records(s: &ServerClient, slug: &str, key: &str, payloads: &[Value]) -> Vec<String> {
    let ids: Vec<String> = payloads
        .iter()
        .map(|payload| {
            let r = s.data("POST", &format!("/api/v1/data/{slug}"), key, Some(payload));
            assert_eq!(r.status, 202, "{}", r.describe());
            r.json()["id"].as_str().expect("id").to_string()
        })
        .collect();
    let last = ids.last().expect("at least one record");
    let deadline = Instant::now() + Duration::from_secs(20);
    while s
        .data("GET", &format!("/api/v1/data/{slug}/{last}"), key, None)
        .status
        != 200
    {
        assert!(Instant::now() < deadline, "record {last} was not stored");
        std::thread::sleep(Duration::from_millis(20));
    }
    ids
}

/// A browser session of the server's owner, logged in.
fn owner_session<'b>(browser: &'b Browser, s: &TestServer) -> Session<'b> {
    let owner = browser.session(&s.base_url());
    owner.login(OWNER_EMAIL, &s.password);
    owner
}

/// Waits until the sandbox delivery of `record` is delivered.
fn wait_delivered(s: &ServerClient, slug: &str, record: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = s.manage(
            "GET",
            &format!("/api/v1/manage/endpoints/{slug}/deliveries?environment=sandbox&limit=100"),
            None,
        );
        let delivered = r.json()["data"].as_array().is_some_and(|d| {
            d.iter()
                .any(|d| d["record_id"] == record && d["state"] == "delivered")
        });
        if delivered {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{record} was not delivered: {}",
            r.text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The record ids of the record browser's current page, in its order.
fn listed_ids(page: &Session) -> Vec<String> {
    let ids = page.eval(
        "JSON.stringify(Array.from(document.querySelectorAll('#records tbody tr td:first-child code')).map(c => c.textContent))",
    );
    serde_json::from_str(ids.as_str().expect("ids")).expect("ids JSON")
}

#[test]
fn refused_forms_keep_the_input_and_say_why_beside_the_form() {
    let s = TestServer::start();
    let ep = s.create_endpoint("Orders", &[]);
    let browser = Browser::start();
    let owner = owner_session(&browser, &s);

    // A blank name: the endpoints page again, the reason beside the create form in words
    // (no Markdown backticks), the navigation still there.
    owner.paste("#name", "   ");
    owner.submit("form[action='/dashboard/endpoints'] button[type=submit]");
    assert_eq!(owner.path(), "/dashboard/endpoints");
    let error = owner.text("form[action='/dashboard/endpoints'] ~ .error, .error[data-form-error]");
    assert!(error.contains("“name”"), "{error}");
    assert!(!error.contains('`'), "{error}");
    assert!(owner.exists(".main-nav"));
    assert_eq!(
        owner.eval("document.activeElement.hasAttribute('data-form-error')"),
        json!(true),
        "the reason is brought into view and focused"
    );

    // A webhook URL the egress rule refuses (loopback, default settings): refused on save with
    // the reason, the typed URL and description kept, the form open.
    owner.goto(&format!("/dashboard/endpoints/{}/webhooks", ep.slug));
    owner.paste("#url-sandbox", "http://127.0.0.1:9/hook");
    owner.paste("#description-sandbox", "Order sync");
    owner.submit("form[action$='/webhooks/sandbox/subscriptions'] button[type=submit]");
    let form = "form[action$='/webhooks/sandbox/subscriptions']";
    let error = owner.text(&format!("{form} .error"));
    assert!(error.contains("127.0.0.1"), "{error}");
    assert!(error.contains("allow_private_targets"), "{error}");
    assert_eq!(owner.value("#url-sandbox"), "http://127.0.0.1:9/hook");
    assert_eq!(owner.value("#description-sandbox"), "Order sync");
    assert!(
        owner.visible("#url-sandbox"),
        "the form with the error is open"
    );
    // Nothing was saved.
    let subs = s.manage(
        "GET",
        &format!(
            "/api/v1/manage/endpoints/{}/webhooks/sandbox/subscriptions",
            ep.slug
        ),
        None,
    );
    assert_eq!(subs.json()["data"], json!([]));
    owner.screenshots("form-error");

    // A page that does not exist, and an endpoint that is not yours: an error page with the
    // navigation, the code and the request id, not a dead end.
    owner.goto("/dashboard/endpoints/no-such-endpoint");
    assert!(
        owner.text("h1").contains("Not found"),
        "{}",
        owner.text("h1")
    );
    assert!(owner.exists(".main-nav"));
    assert!(owner.text("main").contains("endpoint_not_found"));
    assert!(owner.exists("a[href='/dashboard/endpoints']"));
    owner.assert_accessible();
}

#[test]
fn the_settings_form_sets_the_json_schema_and_the_page_shows_the_retention_windows() {
    let s = TestServer::start();
    let ep = s.create_endpoint("Orders", &[]);
    let browser = Browser::start();
    let owner = owner_session(&browser, &s);
    let detail = format!("/dashboard/endpoints/{}", ep.slug);
    let api = format!("/api/v1/manage/endpoints/{}", ep.slug);
    let save = "form[action$='/settings'] button[type=submit]";
    owner.goto(&detail);
    assert_eq!(owner.value("#ep-schema"), "");

    // Not JSON, then JSON that is no usable schema: the reason beside the form, the text kept,
    // nothing saved.
    for (typed, reason) in [
        ("{\"type\": ", "not JSON"),
        ("{\"type\": \"strng\"}", "strng"),
    ] {
        owner.paste("#ep-schema", typed);
        owner.submit(save);
        let error = owner.text("form[action$='/settings'] .error");
        assert!(error.contains(reason), "{typed}: {error}");
        assert_eq!(owner.value("#ep-schema"), typed);
        assert_eq!(s.manage("GET", &api, None).json()["schema"], Value::Null);
    }

    // A schema saves, shows indented, and refuses payloads that break it.
    owner.goto(&detail);
    owner.paste(
        "#ep-schema",
        r#"{"type":"object","required":["email"],"properties":{"email":{"type":"string","format":"email"}}}"#,
    );
    owner.submit(save);
    assert!(owner.text(".flash").contains("Changes saved"));
    let schema = json!({ "type": "object", "required": ["email"],
        "properties": { "email": { "type": "string", "format": "email" } } });
    assert_eq!(s.manage("GET", &api, None).json()["schema"], schema);
    assert_eq!(
        owner.value("#ep-schema"),
        serde_json::to_string_pretty(&schema).unwrap()
    );
    assert!(
        owner
            .text("dl.facts")
            .contains("Set: payloads must match it")
    );
    let r = s.data(
        "POST",
        &format!("/api/v1/data/{}", ep.slug),
        &ep.sandbox_key,
        Some(&json!({ "email": "nope" })),
    );
    assert_eq!(
        r.error_code().as_deref(),
        Some("schema_violation"),
        "{}",
        r.describe()
    );
    owner.screenshot("settings-json-schema");

    // An empty box removes it.
    owner.paste("#ep-schema", "");
    owner.submit(save);
    assert!(owner.text(".flash").contains("Changes saved"));
    assert_eq!(s.manage("GET", &api, None).json()["schema"], Value::Null);

    // The retention windows in force are shown, each saying whether it is the server's.
    let retention = owner.text("#retention");
    assert!(
        retention.contains("Sandbox records are kept 30d (server default)"),
        "{retention}"
    );
    assert!(
        retention.contains("production records 60d (server default)"),
        "{retention}"
    );
    let r = s.manage(
        "PATCH",
        &api,
        Some(&json!({ "retention": { "sandbox": "7d" } })),
    );
    assert_eq!(r.status, 200, "{}", r.describe());
    owner.goto(&detail);
    let retention = owner.text("#retention");
    assert!(
        retention.contains("Sandbox records are kept 7d,"),
        "{retention}"
    );
    assert!(
        retention.contains("production records 60d (server default)"),
        "{retention}"
    );
    owner.assert_clean();
}

#[test]
fn webhook_settings_send_a_signed_test_event_and_keep_the_stored_auth_value() {
    let s = TestServer::start_with_config("[webhooks]\nallow_private_targets = true\n");
    let ep = s.create_endpoint("Orders", &[]);
    let receiver = Receiver::start();
    receiver.always(Reply::status(200).body("thanks"));
    let browser = Browser::start();
    let owner = owner_session(&browser, &s);

    owner.goto(&format!("/dashboard/endpoints/{}/webhooks", ep.slug));
    owner.paste("#url-sandbox", &receiver.url("/hooks"));
    owner.paste("#header-sandbox", "X-Hook-Token");
    owner.paste("#value-sandbox", "s3cret-token");
    owner.submit("form[action$='/webhooks/sandbox/subscriptions'] button[type=submit]");
    // Added: its own page, where its forms are.
    assert!(owner.text(".flash").contains("Subscription added"));
    let page = format!(
        "/dashboard/endpoints/{}/webhooks/sandbox/subscriptions/sub_1",
        ep.slug
    );
    assert_eq!(owner.path(), format!("{page}?done=subscription-added"));

    // Send test event: the receiver's answer shows on the subscription's page.
    owner.submit("#test-sandbox-sub_1 button[type=submit]");
    let result = owner.text("#test-result");
    assert!(result.contains("Delivered"), "{result}");
    assert!(result.contains("200"), "{result}");
    assert!(owner.text("#test-result").contains("thanks"));
    let got = receiver.wait_for(1, Duration::from_secs(10));
    let event = &got[0];
    let id = event.header("webhook-id").expect("webhook-id").to_string();
    assert!(id.starts_with("test_"), "{id}");
    assert_eq!(event.header("X-Hook-Token"), Some("s3cret-token"));
    assert_eq!(event.json()["type"], "webhook.test");
    // Signed with the environment's secret, as Standard Webhooks verifies it.
    let secret = s.manage(
        "GET",
        &format!(
            "/api/v1/manage/endpoints/{}/webhook-secrets/sandbox",
            ep.slug
        ),
        None,
    );
    let secret = secret.json()["secret"]
        .as_str()
        .expect("secret")
        .to_string();
    let key = intake::domain::webhooks::signing::secret_key(&secret).expect("key");
    let timestamp: i64 = event.header("webhook-timestamp").unwrap().parse().unwrap();
    assert!(intake::domain::webhooks::signing::verify(
        &key,
        &id,
        timestamp,
        event.body_text().as_bytes(),
        event.header("webhook-signature").unwrap()
    ));
    owner.screenshots("webhook-test-event");

    // Saving the form again with the auth value left empty keeps the stored value.
    owner.goto(&page);
    owner.paste("#description-sandbox-sub_1", "Still the same token");
    owner.submit("form[action$='/subscriptions/sub_1'] button[type=submit]");
    assert!(owner.text(".flash").contains("Subscription saved"));
    owner.submit("#test-sandbox-sub_1 button[type=submit]");
    let got = receiver.wait_for(2, Duration::from_secs(10));
    assert_eq!(got[1].header("X-Hook-Token"), Some("s3cret-token"));

    // "Remove the stored auth value" is explicit, and then no auth header is sent.
    owner.set_checked(
        "form[action$='/subscriptions/sub_1'] input[name=clear_auth]",
        true,
    );
    owner.submit("form[action$='/subscriptions/sub_1'] button[type=submit]");
    owner.submit("#test-sandbox-sub_1 button[type=submit]");
    let got = receiver.wait_for(3, Duration::from_secs(10));
    assert_eq!(got[2].header("X-Hook-Token"), None);

    // A receiver that refuses: the answer says so, with the status and body.
    receiver.always(Reply::status(401).body("bad token"));
    owner.submit("#test-sandbox-sub_1 button[type=submit]");
    let result = owner.text("#test-result");
    assert!(
        result.contains("Not accepted") && result.contains("401"),
        "{result}"
    );
    assert!(result.contains("bad token"), "{result}");
}

#[test]
fn the_record_browser_pages_searches_shows_and_deletes_records() {
    let s = TestServer::start_with_config("[webhooks]\nallow_private_targets = true\n");
    let ep = s.create_endpoint("Orders", &[]);
    let receiver = Receiver::start();
    receiver.always(Reply::status(204));
    let r = s.manage(
        "POST",
        &format!(
            "/api/v1/manage/endpoints/{}/webhooks/sandbox/subscriptions",
            ep.slug
        ),
        Some(&json!({ "url": receiver.url("/hooks") })),
    );
    assert_eq!(r.status, 201, "{}", r.describe());
    // 60 records (more than two pages of 25); every seventh carries a word to search for.
    let payloads: Vec<Value> = (0..60)
        .map(|i| match i % 7 {
            0 => json!({ "n": i, "note": format!("needle {i}") }),
            _ => json!({ "n": i, "note": "hay" }),
        })
        .collect();
    let ids = write_records(&s, &ep.slug, &ep.sandbox_key, &payloads);
    let browser = Browser::start();
    let owner = owner_session(&browser, &s);

    // Newest first, page by page through "Older": every record once, none missing.
    owner.goto(&format!("/dashboard/endpoints/{}/records", ep.slug));
    assert_eq!(owner.text("#environment-badge"), "Sandbox");
    let mut seen = listed_ids(&owner);
    assert_eq!(seen.len(), 25);
    owner.screenshots("records");
    while owner.exists(".pager a[rel=next]") {
        owner.submit(".pager a[rel=next]");
        seen.extend(listed_ids(&owner));
    }
    let newest_first: Vec<String> = ids.iter().rev().cloned().collect();
    assert_eq!(seen, newest_first, "no duplicates, no gaps, newest first");
    assert_eq!(seen.iter().collect::<HashSet<_>>().len(), 60);

    // The search box runs the API's exact search.
    owner.fill("#q", "needle");
    owner.submit("form[role=search] button[type=submit]");
    let found = listed_ids(&owner);
    let expected: Vec<String> = (0..60)
        .rev()
        .filter(|i| i % 7 == 0)
        .map(|i| ids[i].clone())
        .collect();
    assert_eq!(found, expected);
    // A query the API refuses (the box asks for 3 characters; a link can still carry fewer):
    // the reason beside the box, not an error page.
    owner.goto(&format!("/dashboard/endpoints/{}/records?q=ab", ep.slug));
    assert!(
        owner.text("#filter-error").contains("3 to 200"),
        "{}",
        owner.text("#filter-error")
    );
    assert!(owner.exists(".tabs"));

    // One record: its payload indented and highlighted, its delivery, delete.
    let target = &ids[7];
    owner.goto(&format!(
        "/dashboard/endpoints/{}/records/{target}?environment=sandbox",
        ep.slug
    ));
    assert_eq!(owner.text("#record-id"), *target);
    let payload: Value =
        serde_json::from_str(&owner.text("#record-payload")).expect("payload JSON");
    assert_eq!(payload, json!({ "n": 7, "note": "needle 7" }));
    assert!(
        owner.text("#record-payload").contains("\n  \"n\": 7"),
        "indented"
    );
    assert!(owner.exists("#record-payload .hl-key"), "highlighted");
    wait_delivered(&s, &ep.slug, target);
    owner.goto(&format!(
        "/dashboard/endpoints/{}/records/{target}?environment=sandbox",
        ep.slug
    ));
    assert!(
        owner.text("#record-deliveries").contains("Delivered"),
        "{}",
        owner.text("#record-deliveries")
    );
    owner.screenshots("record");
    owner.assert_accessible();
    let question = owner.submit_confirmed("form[action*='/delete'] button[type=submit]");
    assert!(question.contains(target.as_str()), "{question}");
    assert!(owner.text(".flash").contains("deletion queued"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while s
        .data(
            "GET",
            &format!("/api/v1/data/{}/{target}", ep.slug),
            &ep.sandbox_key,
            None,
        )
        .status
        != 404
    {
        assert!(Instant::now() < deadline, "the record was not deleted");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The audit log names who deleted it.
    let audit = s.manage(
        "GET",
        &format!("/api/v1/manage/endpoints/{}/audit", ep.slug),
        None,
    );
    let entry = audit.json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["action"] == "record.deleted")
        .cloned()
        .expect("audit entry");
    assert_eq!(entry["details"]["record_id"], json!(target));
    assert_eq!(entry["actor"]["email"], OWNER_EMAIL);

    // A collaborator without the read permission cannot browse, and is told why; one with
    // read but without delete sees no delete button.
    let writer = add_collaborator(&s, &ep.slug, "writer@example.com", &["create"]);
    let reader = add_collaborator(&s, &ep.slug, "reader@example.com", &["read"]);
    let _ = (writer.id, reader.id);
    let writer = browser.session(&s.base_url());
    writer.login("writer@example.com", COLLABORATOR_PASSWORD);
    writer.goto(&format!("/dashboard/endpoints/{}/records", ep.slug));
    assert!(
        writer.text("main").contains("missing_permission"),
        "{}",
        writer.text("main")
    );
    assert!(writer.exists(".main-nav"));
    let reader = browser.session(&s.base_url());
    reader.login("reader@example.com", COLLABORATOR_PASSWORD);
    reader.goto(&format!(
        "/dashboard/endpoints/{}/records/{}?environment=sandbox",
        ep.slug, ids[8]
    ));
    assert!(reader.exists("#record-payload"));
    assert!(!reader.exists("form[action*='/delete']"));
}

#[test]
fn the_badge_names_the_environment_shown_and_the_deploy_state_is_apart() {
    let s = TestServer::start();
    let ep = s.create_endpoint("Orders", &[]);
    let browser = Browser::start();
    let owner = owner_session(&browser, &s);
    owner.goto(&format!("/dashboard/endpoints/{}", ep.slug));
    assert_eq!(owner.text("#environment-badge"), "Sandbox");
    assert!(owner.text("#deploy-state").contains("Not deployed"));

    // Deploying asks first, and so does approving a collaborator's request.
    let question = owner.submit_confirmed("form[action$='/deploy'] button[type=submit]");
    assert!(question.contains("Deploy to production"), "{question}");
    // After the deploy the Sandbox tab still says Sandbox; the state says deployed.
    owner.goto(&format!("/dashboard/endpoints/{}", ep.slug));
    assert_eq!(owner.text("#environment-badge"), "Sandbox");
    assert!(owner.text("#deploy-state").contains("Deployed"));
    owner.goto(&format!("/dashboard/endpoints/{}/production", ep.slug));
    assert_eq!(owner.text("#environment-badge"), "Production");
    owner.goto(&format!(
        "/dashboard/endpoints/{}/records?environment=production",
        ep.slug
    ));
    assert_eq!(owner.text("#environment-badge"), "Production");
    owner.goto(&format!("/dashboard/endpoints/{}/test", ep.slug));
    assert_eq!(owner.text("#environment-badge"), "Sandbox");

    let other = s.create_endpoint("Invoices", &[]);
    add_collaborator(&s, &other.slug, "collab@example.com", &["read"]);
    let collaborator = browser.session(&s.base_url());
    collaborator.login("collab@example.com", COLLABORATOR_PASSWORD);
    collaborator.goto(&format!("/dashboard/endpoints/{}", other.slug));
    collaborator.submit("form[action$='/deploy-request'] button[type=submit]");
    assert!(collaborator.text(".flash").contains("Deploy requested"));
    owner.goto(&format!("/dashboard/endpoints/{}", other.slug));
    assert!(owner.text("#deploy-state").contains("deploy requested"));
    let question =
        owner.submit_confirmed("form[action$='/deploy-request/approve'] button[type=submit]");
    assert!(question.contains("collab@example.com"), "{question}");
    assert!(owner.text(".flash").contains("Deployed"));
}

#[test]
fn the_theme_follows_the_system_until_the_toggle_picks_one() {
    let s = TestServer::start();
    let browser = Browser::start();
    let owner = owner_session(&browser, &s);
    owner.color_scheme("dark");
    assert_eq!(
        owner.eval("document.documentElement.dataset.theme"),
        json!("dark")
    );
    let background = "getComputedStyle(document.documentElement).backgroundColor";
    let dark = owner.eval(background);
    owner.color_scheme("light");
    assert_ne!(owner.eval(background), dark);

    // system → light → dark: the choice holds against the system's and across pages.
    assert_eq!(owner.text("#theme-toggle"), "Theme: system");
    owner.click("#theme-toggle");
    owner.click("#theme-toggle");
    assert_eq!(owner.text("#theme-toggle"), "Theme: dark");
    owner.goto("/dashboard/notifications");
    assert_eq!(
        owner.eval("document.documentElement.dataset.theme"),
        json!("dark")
    );
    assert_eq!(owner.text("#theme-toggle"), "Theme: dark");
    owner.click("#theme-toggle");
    assert_eq!(owner.text("#theme-toggle"), "Theme: system");
    assert_eq!(
        owner.eval("document.documentElement.dataset.theme"),
        json!("light")
    );
}

#[test]
fn the_test_page_uses_my_key_shows_what_it_lacks_and_reads_like_a_reference() {
    let s = TestServer::start();
    let ep = s.create_endpoint("Orders", &[]);
    add_collaborator(&s, &ep.slug, "reader@example.com", &["read"]);
    let browser = Browser::start();
    let reader = browser.session(&s.base_url());
    reader.login("reader@example.com", COLLABORATOR_PASSWORD);
    reader.goto(&format!("/dashboard/endpoints/{}/test", ep.slug));

    // Before authorizing, every call says why it cannot be sent.
    assert!(reader.text("#createRecord-note").contains("Authorize"));
    // "Use my sandbox key": the collaborator's own key, without copying it.
    reader.click("#use-mine");
    reader.wait_until("!document.getElementById('authorized').hidden");
    assert!(reader.text("#authorized-key").starts_with("tm_test_"));
    assert!(reader.text("#authorized").contains("allowed: read"));
    // The calls the key may not make are disabled, with the reason; the others work.
    assert_eq!(
        reader.eval("document.querySelector('#call-createRecord button[type=submit]').disabled"),
        json!(true)
    );
    assert!(
        reader
            .text("#createRecord-note")
            .contains("lacks the create permission")
    );
    assert_eq!(
        reader.eval("document.querySelector('#call-listRecords button[type=submit]').disabled"),
        json!(false)
    );
    reader.click("#call-listRecords button[type=submit]");
    reader.wait_until("!document.getElementById('listRecords-result').hidden");
    assert!(
        reader
            .text("#listRecords-result .status")
            .starts_with("HTTP 200")
    );
    assert!(
        reader.exists("#listRecords-response .hl-key"),
        "the response is highlighted"
    );
    assert!(reader.exists("button[data-copy='listRecords-response']"));
    // Forgetting the page's key is not signing out of the dashboard, and says so.
    assert_eq!(reader.text("#forget-key"), "Forget key");
    assert!(reader.text("#forget-key-help").contains("stay signed in"));
    assert_eq!(reader.text("#sign-out"), "Sign out");
    reader.screenshots("testpage-collaborator");

    // API Reference: a table of contents, cards that open and close, one language at a time
    // on every card, highlighted.
    reader.click("#tab-reference");
    assert_eq!(
        reader.eval("document.querySelectorAll('.toc a').length"),
        json!(9)
    );
    assert_eq!(
        reader.eval("document.getElementById('ref-deleteRecord').open"),
        json!(false)
    );
    reader.click(".toc a[href='#ref-deleteRecord']");
    assert_eq!(
        reader.eval("document.getElementById('ref-deleteRecord').open"),
        json!(true)
    );
    assert!(reader.visible("#sample-deleteRecord-curl"));
    assert!(!reader.visible("#sample-deleteRecord-requests"));
    reader.click("#tab-deleteRecord-requests");
    assert!(reader.visible("#sample-deleteRecord-requests"));
    assert!(!reader.visible("#sample-deleteRecord-curl"));
    reader.click("#expand-all");
    assert!(
        reader.visible("#sample-createRecord-requests"),
        "the choice holds on every card"
    );
    assert!(reader.exists("#sample-createRecord-requests .hl-keyword"));
    assert!(reader.exists("#ref-createRecord pre code.language-json .hl-key"));
    reader.screenshots("testpage-reference");
    reader.assert_accessible();
    // Remembered on the next visit.
    reader.goto(&format!("/dashboard/endpoints/{}/test", ep.slug));
    reader.click("#tab-reference");
    reader.click("#expand-all");
    assert!(reader.visible("#sample-getRecord-requests"));
}

#[test]
fn notifications_link_to_their_page_and_invitations_say_what_happened() {
    let s = TestServer::start();
    let ep = s.create_endpoint("Orders", &[]);
    let browser = Browser::start();
    let owner = owner_session(&browser, &s);

    // Without SMTP the form says no mail goes out and makes a link instead.
    owner.goto(&format!("/dashboard/endpoints/{}/collaborators", ep.slug));
    assert!(owner.exists("#no-mail"));
    assert_eq!(owner.text("#invite"), "Create invitation link");
    // A refused invitation keeps the address and the ticked boxes.
    owner.paste("#invite-email", "not-an-address");
    owner.eval("document.getElementById('invite-email').type = 'text'; true");
    owner.set_checked("form[action$='/invitations'] input[value=delete]", true);
    owner.submit("#invite");
    assert!(owner.exists("form[action$='/invitations'] .error"));
    assert_eq!(owner.value("#invite-email"), "not-an-address");
    assert_eq!(
        owner.eval(
            "document.querySelector(\"form[action$='/invitations'] input[value=delete]\").checked"
        ),
        json!(true)
    );
    owner.paste("#invite-email", "collab@example.com");
    owner.submit("#invite");
    let link = owner.value(".invite-link");

    // The collaborator accepts; opening the link again explains instead of failing.
    let collaborator = browser.session(&s.base_url());
    collaborator.goto(&link);
    collaborator.paste("#password", COLLABORATOR_PASSWORD);
    collaborator.paste("#password_again", COLLABORATOR_PASSWORD);
    collaborator.submit("form[action$='/accept'] button[type=submit]");
    collaborator.goto(&link);
    assert!(
        collaborator.text("h1").contains("already accepted"),
        "{}",
        collaborator.text("h1")
    );
    assert!(collaborator.exists(".main-nav"));
    assert!(collaborator.exists("a[href='/dashboard/endpoints']"));
    collaborator.assert_accessible();
    collaborator.goto(&format!("/dashboard/endpoints/{}", ep.slug));
    collaborator.submit("form[action$='/deploy-request'] button[type=submit]");

    // The owner has two notifications, each linking to its page (and reading it on the way);
    // "mark all read" clears the other.
    owner.goto("/dashboard/notifications");
    assert_eq!(
        owner.eval("document.querySelectorAll('#notifications li.unread').length"),
        json!(2)
    );
    owner.submit(".notification-link");
    assert_eq!(
        owner.path(),
        format!("/dashboard/endpoints/{}#deploy-title", ep.slug)
    );
    assert!(owner.exists("#deploy-pending"));
    owner.goto("/dashboard/notifications");
    assert_eq!(
        owner.eval("document.querySelectorAll('#notifications li.unread').length"),
        json!(1)
    );
    assert_eq!(
        owner.eval(
            "document.querySelector('#notifications li.unread .notification-link').textContent"
        ),
        json!("See the collaborators")
    );
    owner.submit("#mark-all-read");
    assert!(owner.text(".flash").contains("Every notification"));
    assert_eq!(
        owner.eval("document.querySelectorAll('#notifications li.unread').length"),
        json!(0)
    );
    assert!(!owner.exists(".main-nav .count"));
}

#[test]
fn every_main_page_is_accessible_and_fits_a_phone_in_both_themes() {
    let s = TestServer::start_with_config("[webhooks]\nallow_private_targets = true\n");
    let ep = s.create_endpoint("Orders", &["email"]);
    let receiver = Receiver::start();
    receiver.always(Reply::status(204));
    let r = s.manage(
        "POST",
        &format!(
            "/api/v1/manage/endpoints/{}/webhooks/sandbox/subscriptions",
            ep.slug
        ),
        Some(&json!({ "url": receiver.url("/hooks"), "description": "Order sync" })),
    );
    assert_eq!(r.status, 201, "{}", r.describe());
    let ids = write_records(
        &s,
        &ep.slug,
        &ep.sandbox_key,
        &[json!({ "email": "ada@example.com", "total": 42.5, "items": [{ "sku": "A-1" }] })],
    );
    wait_delivered(&s, &ep.slug, &ids[0]);
    let invitation = s.manage(
        "POST",
        &common::invitations_path(&ep.slug),
        Some(&json!({ "email": "pending@example.com", "permissions": ["read"] })),
    );
    let invite_url = invitation.json()["accept_url"]
        .as_str()
        .unwrap()
        .to_string();
    add_collaborator(&s, &ep.slug, "collab@example.com", &["read", "create"]);
    let delivery = s.manage(
        "GET",
        &format!(
            "/api/v1/manage/endpoints/{}/deliveries?environment=sandbox",
            ep.slug
        ),
        None,
    );
    let delivery_id = delivery.json()["data"][0]["id"].as_u64().unwrap();

    let browser = Browser::start();
    let visitor = browser.session(&s.base_url());
    for (name, path) in [
        ("login", "/dashboard/login".to_string()),
        ("invitation", invite_url),
    ] {
        visitor.goto(&path);
        visitor.screenshots(&format!("page-{name}"));
        visitor.assert_accessible();
    }
    let owner = owner_session(&browser, &s);
    let e = format!("/dashboard/endpoints/{}", ep.slug);
    let pages = [
        ("endpoints", "/dashboard/endpoints".to_string()),
        ("sandbox", e.clone()),
        ("production", format!("{e}/production")),
        ("records", format!("{e}/records")),
        ("erase", format!("{e}/erasures")),
        (
            "record",
            format!("{e}/records/{}?environment=sandbox", ids[0]),
        ),
        ("collaborators", format!("{e}/collaborators")),
        ("webhooks", format!("{e}/webhooks")),
        (
            "webhook-subscription",
            format!("{e}/webhooks/sandbox/subscriptions/sub_1"),
        ),
        ("requests", format!("{e}/requests")),
        ("deliveries", format!("{e}/deliveries")),
        ("delivery", format!("{e}/deliveries/{delivery_id}")),
        ("usage", format!("{e}/usage")),
        ("test-page", format!("{e}/test")),
        ("notifications", "/dashboard/notifications".to_string()),
        ("mail", "/dashboard/mail".to_string()),
        (
            "not-found",
            "/dashboard/endpoints/no-such-endpoint".to_string(),
        ),
    ];
    for (name, path) in &pages {
        owner.goto(path);
        owner.screenshots(&format!("page-{name}"));
        owner.assert_accessible();
    }
}

#[test]
fn the_record_and_delivery_pages_show_and_copy_the_payload_as_stored() {
    let s = TestServer::start_with_config("[webhooks]\nallow_private_targets = true\n");
    let ep = s.create_endpoint("Ledger", &[]);
    let receiver = Receiver::start();
    receiver.always(Reply::status(204));
    let r = s.manage(
        "PUT",
        &format!("/api/v1/manage/endpoints/{}/webhooks/sandbox", ep.slug),
        Some(&json!({ "url": receiver.url("/hooks") })),
    );
    assert_eq!(r.status, 200, "{}", r.describe());
    // A number past a double's precision, an exponent and a repeated key: stored as sent.
    let sent = r#"{"amount":123456789012345678901234567890,"rate":1E2,"tag":"a","tag":"b"}"#;
    let auth = format!("Bearer {}", ep.sandbox_key);
    let r = s.request(
        "POST",
        &format!("/api/v1/data/{}", ep.slug),
        &[
            ("Authorization", auth.as_str()),
            ("Content-Type", "application/json"),
        ],
        Some(sent.as_bytes()),
    );
    assert_eq!(r.status, 202, "{}", r.describe());
    let id = r.json()["id"].as_str().expect("id").to_string();
    wait_delivered(&s, &ep.slug, &id);
    let shown = "{\n  \"amount\": 123456789012345678901234567890,\n  \"rate\": 1E2,\n  \
                 \"tag\": \"a\",\n  \"tag\": \"b\"\n}";

    let browser = Browser::start();
    let owner = owner_session(&browser, &s);
    owner.goto(&format!(
        "/dashboard/endpoints/{}/records/{id}?environment=sandbox",
        ep.slug
    ));
    assert_eq!(owner.text("#record-payload"), shown);
    assert!(owner.exists("#record-payload .hl-number"), "highlighted");
    owner.eval(
        "navigator.clipboard.writeText = function (t) { window.copied = t; return Promise.resolve(); }",
    );
    owner.click("[data-copy='record-payload']");
    owner.wait_until(&format!("window.copied === {}", json!(shown)));

    // The delivery's event body carries the same text, indented one level deeper.
    owner.submit("#record-deliveries a[href*='/deliveries/']");
    let body = owner.text("#delivery-body");
    let payload = "  \"payload\": {\n      \"amount\": 123456789012345678901234567890,\n      \
                   \"rate\": 1E2,\n      \"tag\": \"a\",\n      \"tag\": \"b\"\n    }\n";
    assert!(body.contains(payload), "{body}");
    owner.assert_clean();
}

#[test]
fn an_inactive_endpoints_records_are_closed_to_collaborators_and_open_to_its_owner() {
    let s = TestServer::start();
    let ep = s.create_endpoint("Paused", &[]);
    let ids = write_records(&s, &ep.slug, &ep.sandbox_key, &[json!({ "n": 1 })]);
    add_collaborator(&s, &ep.slug, "reader@example.com", &["read"]);
    let r = s.manage(
        "PATCH",
        &format!("/api/v1/manage/endpoints/{}", ep.slug),
        Some(&json!({ "active": false })),
    );
    assert_eq!(r.status, 200, "{}", r.describe());
    let browser = Browser::start();
    let reader = browser.session(&s.base_url());
    reader.login("reader@example.com", COLLABORATOR_PASSWORD);
    let records = format!("/dashboard/endpoints/{}/records", ep.slug);
    let record = format!("{records}/{}?environment=sandbox", ids[0]);
    // As the reader's key is refused (403 endpoint_inactive), so is the record browser.
    for path in [&records, &record] {
        reader.goto(path);
        let main = reader.text("main");
        assert!(main.contains("endpoint_inactive"), "{path}: {main}");
        assert!(!reader.exists("#records") && !reader.exists("#record-payload"));
    }
    // The owner, who manages the endpoint, still reads and deletes its records.
    let owner = owner_session(&browser, &s);
    owner.goto(&record);
    assert_eq!(owner.text("#record-payload"), "{\n  \"n\": 1\n}");
    assert!(owner.exists("form[action*='/delete']"));

    // Active again, the reader reads again.
    let r = s.manage(
        "PATCH",
        &format!("/api/v1/manage/endpoints/{}", ep.slug),
        Some(&json!({ "active": true })),
    );
    assert_eq!(r.status, 200, "{}", r.describe());
    reader.goto(&record);
    assert_eq!(reader.text("#record-payload"), "{\n  \"n\": 1\n}");
}

#[test]
fn the_erase_form_counts_first_and_erases_only_what_the_typed_count_confirms() {
    const MARKER: &str = "ada.q7z3@example.com";
    let s = TestServer::start();
    let ep = s.create_endpoint("Sign-ups", &[]);
    let ids = write_records(
        &s,
        &ep.slug,
        &ep.sandbox_key,
        &[
            json!({ "email": MARKER, "n": 0 }),
            json!({ "email": "grace@example.com", "n": 1 }),
            json!({ "note": format!("ask {} first", MARKER.to_uppercase()), "n": 2 }),
            json!({ "email": "ada@example.com", "n": 3 }),
            json!({ "contacts": [MARKER], "n": 4 }),
        ],
    );
    let (marked, others) = ([&ids[0], &ids[2], &ids[4]], [&ids[1], &ids[3]]);
    let record_status = |id: &str| {
        s.data(
            "GET",
            &format!("/api/v1/data/{}/{id}", ep.slug),
            &ep.sandbox_key,
            None,
        )
        .status
    };
    let erasures_api = format!("/api/v1/manage/endpoints/{}/erasures", ep.slug);
    let erase_page = format!("/dashboard/endpoints/{}/erasures", ep.slug);
    add_collaborator(&s, &ep.slug, "reader@example.com", &["read", "delete"]);
    let browser = Browser::start();

    // A collaborator sees no Erase form, and is refused the page and both posts (with a valid
    // CSRF token of their own): nothing is counted or erased.
    let reader = browser.session(&s.base_url());
    reader.login("reader@example.com", COLLABORATOR_PASSWORD);
    reader.goto(&format!("/dashboard/endpoints/{}/records", ep.slug));
    assert!(reader.exists("#records"));
    assert!(!reader.exists("#erase-link"));
    reader.goto(&erase_page);
    assert!(reader.text("main").contains("owner_only"));
    assert!(!reader.exists("#erase-q"));
    for action in [format!("{erase_page}/count"), erase_page.clone()] {
        reader.eval(&format!(
            "(function () {{ var f = document.createElement('form'); f.method = 'post'; \
             f.action = {action}; \
             [['csrf', document.querySelector('input[name=csrf]').value], ['q', {q}], \
              ['count', '3'], ['notify', '1']].forEach(function (p) {{ \
               var i = document.createElement('input'); i.type = 'hidden'; i.name = p[0]; \
               i.value = p[1]; f.appendChild(i); }}); \
             var b = document.createElement('button'); b.type = 'submit'; b.id = 'forged'; \
             f.appendChild(b); document.body.appendChild(f); return true; }})()",
            action = json!(format!("{action}?environment=sandbox")),
            q = json!(MARKER),
        ));
        reader.submit("#forged");
        let main = reader.text("main");
        assert!(
            main.contains("Status 403") && main.contains("owner_only"),
            "{main}"
        );
    }
    assert_eq!(
        s.manage("GET", &erasures_api, None).json()["data"],
        json!([])
    );

    // The owner finds the form on the Records tab; it says what erasure does and cannot do.
    let owner = owner_session(&browser, &s);
    owner.goto(&format!(
        "/dashboard/endpoints/{}/records?environment=sandbox",
        ep.slug
    ));
    owner.submit("#erase-link");
    assert_eq!(owner.path(), format!("{erase_page}?environment=sandbox"));
    assert_eq!(owner.text("#erase-environment"), "sandbox");
    let about = owner.text("#erase-about");
    assert!(about.contains("backups taken before"), "{about}");
    assert!(about.contains("record.deleted"), "{about}");
    assert!(
        owner.exists("#erase-notify:checked"),
        "notify is on by default"
    );
    assert!(owner.exists("#no-erasures"));
    owner.screenshots("erase-form");
    owner.assert_accessible();

    // Too short a text (the box asks for 3 characters; a request can still carry fewer): the
    // reason beside the form, the text kept, and never in the URL.
    owner.eval("document.getElementById('erase-q').removeAttribute('minlength'); true");
    owner.paste("#erase-q", "ad");
    owner.submit("#erase-count button[type=submit]");
    let error = owner.text("#erase-count .error");
    assert!(error.contains("3 to 200"), "{error}");
    assert_eq!(owner.value("#erase-q"), "ad");
    assert!(!owner.exists("#erase-confirm"));

    // Count: the number and the newest matches (newest first), linked to their pages.
    owner.paste("#erase-q", MARKER);
    owner.submit("#erase-count button[type=submit]");
    assert!(!owner.url().contains("q7z3"), "{}", owner.url());
    assert_eq!(owner.text("#erase-matched-count"), "3");
    let newest = owner.eval(
        "JSON.stringify(Array.from(document.querySelectorAll('#erase-newest a')).map(a => a.getAttribute('href')))",
    );
    let newest: Vec<String> = serde_json::from_str(newest.as_str().unwrap()).unwrap();
    let expected: Vec<String> = marked
        .iter()
        .rev()
        .map(|id| {
            format!(
                "/dashboard/endpoints/{}/records/{id}?environment=sandbox",
                ep.slug
            )
        })
        .collect();
    assert_eq!(newest, expected);
    assert_eq!(owner.value("#erase-q"), MARKER, "the form keeps the text");
    owner.screenshots("erase-count");
    // The viewport's screenshots show the page's top; the confirmation is further down.
    let confirmation_shot = |name: &str| {
        owner.eval("document.getElementById('erase-confirm').scrollIntoView(); true");
        owner.screenshot(name);
    };
    confirmation_shot("erase-count-confirmation");
    owner.assert_accessible();

    // A wrong count is refused beside the confirmation, with what was typed; nothing erased.
    owner.paste("#erase-typed", "2");
    owner.submit("#erase-form button[type=submit]");
    assert!(!owner.url().contains("q7z3"), "{}", owner.url());
    let error = owner.text("#erase-form .error");
    assert!(
        error.contains("3") && error.contains("Nothing was erased"),
        "{error}"
    );
    assert_eq!(owner.value("#erase-typed"), "2");
    assert_eq!(owner.text("#erase-matched-count"), "3");
    owner.screenshots("erase-refused");
    confirmation_shot("erase-refused-confirmation");
    assert_eq!(
        s.manage("GET", &erasures_api, None).json()["data"],
        json!([])
    );
    for id in marked.iter().chain(&others) {
        assert_eq!(record_status(id), 200, "{id}");
    }

    // The right count starts the erasure; its page (refreshed by hand) follows it to the end.
    owner.paste("#erase-typed", "3");
    owner.submit("#erase-form button[type=submit]");
    let page = owner.path();
    assert!(page.starts_with(&format!("{erase_page}/era_")), "{page}");
    assert!(!page.contains("q7z3"), "{page}");
    assert!(owner.text(".flash").contains("Erasure started"));
    owner.screenshots("erasure-started");
    owner.assert_accessible();
    let refresh_until = |what: &str, done: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done() {
            assert!(
                Instant::now() < deadline,
                "{what}: still {} after 60 s:\n{}\nserver log:\n{}",
                owner.text("#erasure-state"),
                owner.text("main"),
                s.log.text()
            );
            assert!(
                owner.exists("#erasure-refresh"),
                "{what}: the erasure ended otherwise:\n{}",
                owner.text("main")
            );
            std::thread::sleep(Duration::from_millis(200));
            owner.submit("#erasure-refresh");
        }
    };
    refresh_until("3 erased", &|| owner.text("#erasure-erased") == "3");
    for id in marked {
        assert_eq!(record_status(id), 404, "{id} was erased");
    }
    for id in others {
        assert_eq!(record_status(id), 200, "{id} stays");
    }
    refresh_until("finished", &|| owner.text("#erasure-state") == "Finished");
    assert_eq!(owner.text("#erasure-matched"), "3");
    assert!(
        owner.text("#erasure-progress-text").contains("3 of 3"),
        "{}",
        owner.text("#erasure-progress-text")
    );
    assert!(!owner.exists("#erasure-refresh"), "nothing left to follow");
    assert!(
        !owner.text("main").contains("q7z3"),
        "the text is not shown"
    );
    owner.screenshots("erasure-finished");
    owner.assert_accessible();

    // The Erase page lists it.
    owner.goto(&format!("{erase_page}?environment=sandbox"));
    let row = owner.text("#erasures tbody tr");
    assert!(row.contains("Finished") && row.contains("sandbox"), "{row}");
    owner.screenshots("erasures");
}
