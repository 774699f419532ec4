//! The request and delivery logs of the dashboard in a real headless Chromium against the
//! real server: finding an error response's entry by its request id, whose key made a call,
//! the filters, a failing delivery retried at once, and what collaborators see of deliveries
//! (bodies only with `read`, webhook URLs only of their own). Any console error, uncaught
//! exception or CSP violation fails a test (see tests/common/browser.rs).

use crate::common::{self, browser};

use std::time::Duration;

use browser::{Browser, Session};
use common::{
    OWNER_EMAIL, ServerClient, TestServer, add_collaborator, assert_error, assert_status,
};

const DEV: &str = "dev@example.com";

fn log_in<'b>(browser: &'b Browser, s: &ServerClient, password: &str) -> Session<'b> {
    let owner = browser.session(&s.base_url());
    owner.goto("/dashboard/login");
    owner.fill("#email", OWNER_EMAIL);
    owner.fill("#password", password);
    owner.submit("form[action='/dashboard/login'] button[type=submit]");
    assert_eq!(owner.path(), "/dashboard/endpoints");
    owner
}

/// The request ids of the rows the page lists.
fn listed(page: &Session) -> Vec<String> {
    // An array is not returned by value: joined, ids have no spaces.
    let ids = page.eval(
        "Array.from(document.querySelectorAll('#request-log tbody tr'))\
         .map(function (r) { return r.getAttribute('data-request-id'); }).join(' ')",
    );
    ids.as_str()
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

fn data_call(
    s: &ServerClient,
    method: &str,
    path: &str,
    key: &str,
    forwarded_for: &str,
) -> common::Resp {
    let auth = format!("Bearer {key}");
    s.request(
        method,
        path,
        &[
            ("Authorization", auth.as_str()),
            ("Content-Type", "application/json"),
            ("X-Forwarded-For", forwarded_for),
        ],
        (method == "POST").then_some(br#"{"n":1}"#.as_slice()),
    )
}

#[test]
fn an_error_responses_request_id_finds_its_entry_which_names_code_person_and_client() {
    // The loopback peer is a trusted proxy: the forwarded address is the client's.
    let s = TestServer::start_with_config("[http]\ntrusted_proxies = [\"127.0.0.1/32\"]\n");
    let ep = s.create_endpoint("Orders", &[]);
    let slug = &ep.slug;
    let dev = add_collaborator(&s, slug, DEV, &["read"]);
    let collection = format!("/api/v1/data/{slug}");
    let refused = data_call(&s, "POST", &collection, &dev.sandbox_key, "198.51.100.23");
    assert_error(&refused, 403, "missing_permission_create");
    let refused_id = refused.json()["error"]["request_id"]
        .as_str()
        .unwrap()
        .to_string();
    let read = data_call(&s, "GET", &collection, &dev.sandbox_key, "198.51.100.23");
    assert_status(&read, 200);
    let written = data_call(&s, "POST", &collection, &ep.sandbox_key, "192.0.2.50");
    assert_status(&written, 202);
    let bad_id = data_call(
        &s,
        "GET",
        &format!("{collection}/not-a-record"),
        &ep.sandbox_key,
        "192.0.2.50",
    );
    assert_error(&bad_id, 400, "invalid_record_id");
    let all = [
        &refused_id,
        &read.request_id(),
        &written.request_id(),
        &bad_id.request_id(),
    ]
    .map(|id| id.to_string());
    s.wait_request_log(slug, "sandbox", Duration::from_secs(10), |d| {
        all.iter()
            .all(|id| d.iter().any(|e| e["request_id"] == id.as_str()))
    });

    let browser = Browser::start();
    let owner = log_in(&browser, &s, &s.password);
    let requests = format!("/dashboard/endpoints/{slug}/requests");
    owner.goto(&requests);
    assert_eq!(listed(&owner).len(), 4);
    // Whose key: the collaborator's e-mail, the owner's default key; never a bare key id.
    let table = owner.text("#request-log");
    assert!(table.contains(DEV), "{table}");
    assert!(table.contains("owner default key (sandbox)"), "{table}");
    assert!(table.contains("missing_permission_create"), "{table}");
    owner.screenshot("request-log-filters");

    // The request id of the error body, typed into the search, finds its row.
    owner.fill("#request_id", &refused_id);
    owner.submit("#request-search button[type=submit]");
    assert_eq!(listed(&owner), [refused_id.as_str()]);
    // Its time links to the entry, which explains the failure.
    owner.submit(&format!("tr[data-request-id='{refused_id}'] a"));
    assert_eq!(owner.path(), format!("{requests}/{refused_id}"));
    assert!(
        owner
            .text("#entry-code")
            .contains("missing_permission_create")
    );
    assert!(owner.text("#entry-message").contains("`create` permission"));
    assert!(owner.text("#entry-who").contains(DEV));
    assert_eq!(owner.text("#entry-client"), "198.51.100.23");
    assert!(owner.text("#request-entry").contains("POST"));

    // Filters: whose key, method, error code.
    owner.goto(&requests);
    owner.eval(&format!(
        "document.getElementById('holder').value = '{}'",
        dev.id
    ));
    owner.submit("#request-filters button[type=submit]");
    let mut mine = listed(&owner);
    mine.sort();
    let mut expected = vec![refused_id.clone(), read.request_id()];
    expected.sort();
    assert_eq!(mine, expected);
    owner.goto(&format!("{requests}?holder=owner&method=GET"));
    assert_eq!(listed(&owner), [bad_id.request_id()]);
    owner.goto(&requests);
    owner.fill("#code", "invalid_record_id");
    owner.submit("#request-filters button[type=submit]");
    assert_eq!(listed(&owner), [bad_id.request_id()]);

    // A filter value the log cannot take is said on the page, which keeps its form.
    owner.fill("#code", "Not A Code");
    owner.submit("#request-filters button[type=submit]");
    assert!(owner.text("#filter-error").contains("code"));
    assert_eq!(owner.value("#code"), "Not A Code");
    assert!(owner.exists("#request-search"));
    assert!(owner.exists(".tabs"));

    // The collaborator sees the same log, their calls under their e-mail.
    let collaborator = browser.session(&s.base_url());
    collaborator.goto("/dashboard/login");
    collaborator.fill("#email", DEV);
    collaborator.fill("#password", common::COLLABORATOR_PASSWORD);
    collaborator.submit("form[action='/dashboard/login'] button[type=submit]");
    collaborator.goto(&format!("{requests}/{}", read.request_id()));
    assert!(collaborator.text("#entry-who").contains(DEV));
    collaborator.phone_width();
    collaborator.goto(&requests);
    collaborator.assert_fits_width();
    owner.assert_clean();
    collaborator.assert_clean();
}

#[test]
fn request_log_entries_name_their_record_and_say_that_no_bodies_are_kept() {
    use serde_json::json;
    let s = TestServer::start();
    let ep = s.create_endpoint("Orders", &[]);
    let (slug, key) = (&ep.slug, &ep.sandbox_key);
    let collection = format!("/api/v1/data/{slug}");
    let created = s.data("POST", &collection, key, Some(&json!({"n": 1})));
    assert_status(&created, 202);
    let id = created.json()["id"].as_str().unwrap().to_string();
    let read = s.get_record(slug, key, &id);
    assert_status(&read, 200);
    let batch = s.data(
        "POST",
        &format!("{collection}/batch"),
        key,
        Some(&json!([{"n": 2}, {"n": 3}, {"n": 4}])),
    );
    assert_status(&batch, 202);
    let first_of_batch = batch.json()["data"][0]["id"].as_str().unwrap().to_string();
    let listed_call = s.data("GET", &collection, key, None);
    assert_status(&listed_call, 200);
    let refused = s.request(
        "POST",
        &collection,
        &[
            ("Authorization", format!("Bearer {key}").as_str()),
            ("Content-Type", "application/json"),
        ],
        Some(br#"{"n": "#.as_slice()),
    );
    assert_error(&refused, 400, "invalid_json");
    let calls = [&created, &read, &batch, &listed_call, &refused].map(|r| r.request_id());
    let log = s.wait_request_log(slug, "sandbox", Duration::from_secs(10), |d| {
        calls
            .iter()
            .all(|id| d.iter().any(|e| e["request_id"] == id.as_str()))
    });

    // The API's entries: the record of a create and a get, a batch's first and its count,
    // none for a list or a refused create.
    let entry = |request_id: &str| {
        log.iter()
            .find(|e| e["request_id"] == request_id)
            .unwrap()
            .clone()
    };
    for (call, record_id, record_count) in [
        (&created, json!(id), json!(null)),
        (&read, json!(id), json!(null)),
        (&batch, json!(first_of_batch), json!(3)),
        (&listed_call, json!(null), json!(null)),
        (&refused, json!(null), json!(null)),
    ] {
        let e = entry(&call.request_id());
        assert_eq!(
            (&e["record_id"], &e["record_count"]),
            (&record_id, &record_count),
            "{e}"
        );
    }

    let browser = Browser::start();
    let owner = log_in(&browser, &s, &s.password);
    let requests = format!("/dashboard/endpoints/{slug}/requests");
    owner.goto(&requests);
    let row = |request_id: &str| format!("tr[data-request-id='{request_id}'] td.record");
    assert_eq!(owner.text(&row(&created.request_id())), id);
    assert_eq!(
        owner.text(&row(&batch.request_id())),
        format!("{first_of_batch} and 2 more")
    );
    assert_eq!(owner.text(&row(&listed_call.request_id())), "none");
    // The record's id links to its page.
    owner.submit(&format!("{} a", row(&read.request_id())));
    assert_eq!(
        owner.url(),
        format!(
            "{}/dashboard/endpoints/{slug}/records/{id}?environment=sandbox",
            s.base_url()
        )
    );
    assert!(owner.text("main").contains(&id));

    // A success's entry: its record, and that no body is kept.
    owner.goto(&format!("{requests}/{}", created.request_id()));
    assert_eq!(owner.text("#entry-record"), id);
    assert_eq!(
        owner.text("#entry-bodies"),
        "intake keeps no request or response bodies."
    );
    assert!(!owner.exists("#entry-error"));

    // An error's entry: no record, and the error body as the API answered it.
    owner.goto(&format!("{requests}/{}", refused.request_id()));
    assert_eq!(owner.text("#entry-record"), "none");
    assert_eq!(
        owner.text("#entry-bodies"),
        "intake keeps no request or response bodies; for an error it keeps the code and message:"
    );
    assert!(owner.visible("#entry-error"));
    let shown: serde_json::Value =
        serde_json::from_str(&owner.text("#entry-error")).expect("the error body is JSON");
    let answered = refused.json();
    assert_eq!(shown["error"]["code"], answered["error"]["code"]);
    assert_eq!(shown["error"]["message"], answered["error"]["message"]);
    assert_eq!(
        shown["error"]["request_id"],
        answered["error"]["request_id"]
    );
    owner.assert_accessible();
    owner.screenshots("request-entry");
}

/// The delivery's API view once `done` holds for it (the dispatcher works on its own threads).
fn wait_delivery(s: &ServerClient, slug: &str, id: u64, done: impl Fn(&serde_json::Value) -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let r = s.manage(
            "GET",
            &format!("/api/v1/manage/endpoints/{slug}/deliveries/{id}"),
            None,
        );
        assert_status(&r, 200);
        let v = r.json();
        if done(&v) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{v}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

#[test]
fn a_failing_delivery_shows_as_failing_and_retry_now_makes_the_next_attempt_happen() {
    use common::in_process::InProcessServer;
    use common::receiver::{Receiver, Reply};
    use intake::core::clock::{Clock, SystemClock};

    let s = InProcessServer::start(
        "[webhooks]\nallow_private_targets = true\n",
        SystemClock.now(),
    );
    let receiver = Receiver::start();
    receiver.always(Reply::status(503).body(r#"{"error":{"reason":"maintenance","retry":true}}"#));
    let ep = s.create_endpoint("Orders", &[]);
    let slug = &ep.slug;
    // A long URL, which must wrap on a phone.
    let url = receiver.url(&format!("/hooks/{}", "very-long-path-segment-".repeat(6)));
    let r = s.manage(
        "PUT",
        &format!("/api/v1/manage/endpoints/{slug}/webhooks/sandbox"),
        Some(&serde_json::json!({ "url": url })),
    );
    assert_status(&r, 200);
    let auth = format!("Bearer {}", ep.sandbox_key);
    let r = s.request(
        "POST",
        &format!("/api/v1/data/{slug}"),
        &[
            ("Authorization", auth.as_str()),
            ("Content-Type", "application/json"),
        ],
        Some(br#"{"order":12345678901234567890123}"#),
    );
    assert_status(&r, 202);
    let record_id = r.json()["id"].as_str().unwrap().to_string();
    let listed = {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let r = s.manage(
                "GET",
                &format!("/api/v1/manage/endpoints/{slug}/deliveries"),
                None,
            );
            let data = r.json()["data"].as_array().cloned().unwrap_or_default();
            if let Some(d) = data.first() {
                break d["id"].as_u64().unwrap();
            }
            assert!(std::time::Instant::now() < deadline, "no delivery");
            std::thread::sleep(Duration::from_millis(25));
        }
    };
    wait_delivery(&s, slug, listed, |v| v["attempts"] == 1);

    let browser = Browser::start();
    let owner = log_in(&browser, &s, &s.password);
    let deliveries = format!("/dashboard/endpoints/{slug}/deliveries");
    owner.goto(&deliveries);
    let row = format!("tr[data-delivery-id='{listed}']");
    assert_eq!(
        owner.text(&format!("{row} .chip")),
        "Failing · 1 of 4 attempts"
    );
    assert!(owner.exists(&format!("{row} .chip.warn")));
    // The record id links to the record browser, in the delivery's environment.
    let href = owner.eval(&format!(
        "document.querySelector(\"{row} a[href*='/records/']\").getAttribute('href')"
    ));
    assert_eq!(
        href.as_str().unwrap(),
        format!("/dashboard/endpoints/{slug}/records/{record_id}?environment=sandbox")
    );
    // Filters: by state, kind and URL.
    owner.eval("document.getElementById('state').value = 'failing'");
    owner.submit("#delivery-filters button[type=submit]");
    assert!(owner.exists(&row));
    owner.goto(&format!("{deliveries}?state=delivered"));
    assert!(!owner.exists(&row));
    owner.goto(&format!("{deliveries}?kind=caller"));
    assert!(!owner.exists(&row));
    owner.goto(&deliveries);
    owner.fill("#url", "VERY-LONG-PATH");
    owner.submit("#delivery-filters button[type=submit]");
    assert!(owner.exists(&row));
    owner.goto(&format!("{deliveries}?state=failed"));
    assert!(owner.text("#filter-error").contains("state"));
    assert!(owner.exists("#delivery-filters"));

    // The delivery's page: state with its attempts, the next one, the body indented.
    owner.goto(&format!("{deliveries}/{listed}"));
    assert_eq!(owner.text("#delivery-state"), "Failing · 1 of 4 attempts");
    assert_eq!(owner.text("#delivery-attempts"), "1 of 4");
    assert!(owner.exists("#delivery-next time"));
    assert!(owner.exists("#delivery-body.language-json"));
    let body = owner.text("#delivery-body");
    assert!(body.contains("\n  \"type\": \"record.created\""), "{body}");
    assert!(
        body.contains("12345678901234567890123"),
        "numbers as sent: {body}"
    );
    assert!(owner.exists("#attempt-log code.language-json"));
    owner.screenshot("delivery-failing");

    // Retry now: the next attempt happens without the clock moving to its scheduled time.
    let before = s.clock.now();
    owner.submit("#retry-now");
    assert!(owner.text(".flash").contains("due now"));
    wait_delivery(&s, slug, listed, |v| v["attempts"] == 2);
    assert_eq!(s.clock.now(), before);
    assert_eq!(receiver.requests().len(), 2);
    owner.goto(&format!("{deliveries}/{listed}"));
    assert_eq!(owner.text("#delivery-state"), "Failing · 2 of 4 attempts");
    assert!(!owner.exists("form[action$='/redeliver']"));

    // On a phone the list fits the screen: the long URL wraps.
    owner.phone_width();
    owner.goto(&deliveries);
    owner.assert_fits_width();
    owner.goto(&format!("{deliveries}/{listed}"));
    owner.assert_fits_width();
    owner.screenshot("delivery-phone");
    owner.assert_clean();
}

/// Every delivery of `slug`'s sandbox log as the owner's API lists it, once each is delivered.
fn delivered_log(s: &ServerClient, slug: &str, n: usize) -> Vec<serde_json::Value> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let r = s.manage(
            "GET",
            &format!("/api/v1/manage/endpoints/{slug}/deliveries?limit=100"),
            None,
        );
        let data = r.json()["data"].as_array().cloned().unwrap_or_default();
        if data.len() == n && data.iter().all(|d| d["state"] == "delivered") {
            return data;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not delivered: {data:?}"
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

#[test]
fn collaborators_see_bodies_only_with_read_and_webhook_urls_only_of_their_own() {
    use common::receiver::{Receiver, Reply};

    let s = TestServer::start_with_config("[webhooks]\nallow_private_targets = true\n");
    let receiver = Receiver::start();
    receiver.always(Reply::status(200).body(r#"{"echo":"payload-secret"}"#));
    let ep = s.create_endpoint("Orders", &[]);
    let slug = &ep.slug;
    let owner_url = receiver.url("/owner?token=owner-capability");
    let r = s.manage(
        "PUT",
        &format!("/api/v1/manage/endpoints/{slug}/webhooks/sandbox"),
        Some(&serde_json::json!({ "url": owner_url })),
    );
    assert_status(&r, 200);
    let writer = add_collaborator(&s, slug, "writer@example.com", &["create"]);
    let reader = add_collaborator(&s, slug, "reader@example.com", &["create", "read"]);
    let write = |key: &str, who: &str| -> (String, String) {
        let callback = receiver.url(&format!("/{who}?token={who}-capability"));
        let r = s.data_with(
            "POST",
            &format!("/api/v1/data/{slug}"),
            key,
            &[("X-Webhook-Callback", callback.as_str())],
            Some(&serde_json::json!({ "card": "payload-secret" })),
        );
        assert_status(&r, 202);
        (r.json()["id"].as_str().unwrap().to_string(), callback)
    };
    let (by_writer, writer_url) = write(&writer.sandbox_key, "writer");
    let (by_reader, reader_url) = write(&reader.sandbox_key, "reader");
    let log = delivered_log(&s, slug, 4);
    let delivery = |record: &str, kind: &str| {
        log.iter()
            .find(|d| d["record_id"] == record && d["kind"] == kind)
            .map(|d| d["id"].as_u64().unwrap())
            .unwrap()
    };
    let origin = format!("http://{}", receiver.addr);
    let deliveries = format!("/dashboard/endpoints/{slug}/deliveries");
    let browser = Browser::start();

    // `create` only: the log lists every delivery, but shows the writer's own webhook URL
    // alone in full, another's by its origin, the owner's not at all, and no body.
    let page = browser.session(&s.base_url());
    page.login("writer@example.com", common::COLLABORATOR_PASSWORD);
    page.goto(&deliveries);
    let url_cell = |id: u64| page.text(&format!("tr[data-delivery-id='{id}'] td.url"));
    assert_eq!(url_cell(delivery(&by_writer, "caller")), writer_url);
    assert_eq!(
        url_cell(delivery(&by_reader, "caller")),
        format!("{origin} path and query withheld")
    );
    assert_eq!(
        url_cell(delivery(&by_reader, "owner")),
        "withheld: the owner's subscription"
    );
    let main = page.text("main");
    for secret in ["owner-capability", "reader-capability", "payload-secret"] {
        assert!(!main.contains(secret), "{secret}: {main}");
    }
    // The URL filter finds nothing the page does not show.
    page.goto(&format!("{deliveries}?url=owner-capability"));
    assert!(!page.exists("#deliveries"));
    page.goto(&format!("{deliveries}?url=writer-capability"));
    assert_eq!(page.text("#deliveries tbody").lines().count(), 1);
    for (record, kind) in [(&by_writer, "caller"), (&by_writer, "owner")] {
        page.goto(&format!("{deliveries}/{}", delivery(record, kind)));
        assert!(page.exists("#delivery-body-withheld"));
        assert!(!page.exists("#delivery-body"));
        let main = page.text("main");
        assert!(
            !main.contains("payload-secret") && !main.contains("owner-capability"),
            "{main}"
        );
    }
    assert!(!page.exists("#retry-now") && !page.exists("form[action$='/redeliver']"));

    // With `read`: the bodies and the receiver's answers, the owner's URL still withheld, on
    // the log and on the record's page alike.
    let page = browser.session(&s.base_url());
    page.login("reader@example.com", common::COLLABORATOR_PASSWORD);
    page.goto(&format!("{deliveries}/{}", delivery(&by_reader, "owner")));
    assert!(page.text("#delivery-body").contains("payload-secret"));
    assert_eq!(
        page.text("#delivery-url"),
        "withheld: the owner's subscription"
    );
    page.goto(&format!(
        "/dashboard/endpoints/{slug}/records/{by_reader}?environment=sandbox"
    ));
    let table = page.text("#record-deliveries");
    assert!(table.contains(&reader_url), "{table}");
    assert!(!table.contains("owner-capability"), "{table}");
    page.assert_clean();
}
