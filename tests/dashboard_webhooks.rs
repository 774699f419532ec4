//! Webhooks in the dashboard, in a real headless Chromium against the real server and real
//! receivers on loopback: deleting a subscription asks whether to cancel its pending
//! deliveries (yes by default), which the delivery log then shows as cancelled and which can be
//! redelivered; the delivery log names each delivery's event, so a record's create, replace
//! and delete are told apart, and lists test events marked as tests; and the Guide tab says to deduplicate on `webhook-id` with
//! `type` and `timestamp`. Any console error or CSP violation fails a test (see
//! tests/common/browser.rs).

use crate::common::{self, browser};

use std::time::Duration;

use browser::{Browser, Session};
use common::in_process::InProcessServer;
use common::receiver::{Probe, Receiver, Reply};
use common::{OWNER_EMAIL, assert_status};
use intake::core::clock::{Clock, SystemClock};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);

fn server() -> InProcessServer {
    InProcessServer::start(
        "[webhooks]\nallow_private_targets = true\n",
        SystemClock.now(),
    )
}

fn log_in<'b>(browser: &'b Browser, s: &InProcessServer) -> Session<'b> {
    let owner = browser.session(&s.base_url());
    owner.goto("/dashboard/login");
    owner.fill("#email", OWNER_EMAIL);
    owner.fill("#password", &s.password);
    owner.submit("form[action='/dashboard/login'] button[type=submit]");
    assert_eq!(owner.path(), "/dashboard/endpoints");
    owner
}

/// Adds a sandbox subscription to `receiver` (asserts 201).
fn subscribe(s: &InProcessServer, slug: &str, receiver: &Receiver) {
    let path = format!("/api/v1/manage/endpoints/{slug}/webhooks/sandbox/subscriptions");
    let body = json!({ "url": receiver.url("/in") });
    assert_status(&s.manage("POST", &path, Some(&body)), 201);
}

/// The ids of `list`'s deliveries of `subscription`.
fn ids_of(list: &[Value], subscription: &str) -> Vec<u64> {
    list.iter()
        .filter(|d| d["subscription"] == subscription)
        .map(|d| d["id"].as_u64().expect("id"))
        .collect()
}

/// The page of the sandbox subscription `subscription` of `slug`.
fn subscription_page(slug: &str, subscription: &str) -> String {
    format!("/dashboard/endpoints/{slug}/webhooks/sandbox/subscriptions/{subscription}")
}

/// Deletes `subscription` from its page, the box "Cancel its pending deliveries" as `cancel`
/// says; returns the question asked.
fn delete_subscription(owner: &Session, slug: &str, subscription: &str, cancel: bool) -> String {
    owner.goto(&subscription_page(slug, subscription));
    let form = format!("form[action$='/subscriptions/{subscription}/delete']");
    let box_ = format!("{form} input[name=cancel_pending]");
    assert!(owner.visible(&box_), "the choice is shown beside Delete");
    assert_eq!(
        owner.eval(&format!("document.querySelector(\"{box_}\").checked")),
        json!(true),
        "cancelling is the default"
    );
    assert!(
        owner
            .text(&format!("{form} label"))
            .contains("Cancel its pending deliveries")
    );
    owner.set_checked(&box_, cancel);
    owner.submit_confirmed(&format!("{form} button[type=submit]"))
}

#[test]
fn deleting_a_subscription_asks_whether_to_cancel_its_pending_deliveries() {
    let s = server();
    let probe = Probe::new(&s);
    let ep = s.create_endpoint("Orders", &[]);
    let slug = &ep.slug;
    let (cancelled_rx, kept_rx) = (Receiver::start(), Receiver::start());
    cancelled_rx.always(Reply::status(503));
    kept_rx.always(Reply::status(503));
    subscribe(&s, slug, &cancelled_rx);
    subscribe(&s, slug, &kept_rx);
    s.create_record(slug, &ep.sandbox_key, &json!({ "order": 1 }));
    let list = s.sandbox_deliveries_once(slug, |list| {
        list.len() == 2 && list.iter().all(|d| d["failing"] == true)
    });
    let (cancelled, kept) = (ids_of(&list, "sub_1")[0], ids_of(&list, "sub_2")[0]);

    let browser = Browser::start();
    let owner = log_in(&browser, &s);

    // Deleted with the box left ticked: the question says so, and so does the page after.
    let asked = delete_subscription(&owner, slug, "sub_1", true);
    assert!(
        asked.starts_with("Delete sandbox subscription sub_1?"),
        "{asked}"
    );
    assert!(
        asked.contains("pending deliveries will be cancelled"),
        "{asked}"
    );
    assert!(
        owner
            .text(".flash")
            .contains("pending deliveries were cancelled")
    );
    // Back on the tab, without it.
    assert_eq!(
        owner.path(),
        format!("/dashboard/endpoints/{slug}/webhooks?done=subscription-removed-cancelled")
    );
    assert!(!owner.exists("#sandbox-sub_1"));
    assert!(owner.exists("#sandbox-sub_2"));

    // Deleted with the box unticked: its deliveries go on.
    let asked = delete_subscription(&owner, slug, "sub_2", false);
    assert!(asked.contains("will still be sent"), "{asked}");
    assert!(
        owner
            .text(".flash")
            .contains("pending deliveries were kept")
    );

    // The delivery log shows the cancelled one as cancelled, the kept one as failing.
    let deliveries = format!("/dashboard/endpoints/{slug}/deliveries");
    owner.goto(&deliveries);
    let row = |id: u64| format!("tr[data-delivery-id='{id}']");
    assert_eq!(
        owner.text(&format!("{} .chip", row(cancelled))),
        "Cancelled"
    );
    assert!(
        owner
            .text(&format!("{} .chip", row(kept)))
            .starts_with("Failing")
    );
    owner.goto(&format!("{deliveries}?state=cancelled"));
    assert!(owner.exists(&row(cancelled)));
    assert!(!owner.exists(&row(kept)));
    assert_eq!(owner.value("#state"), "cancelled");
    owner.screenshot("deliveries-cancelled");

    // Its retry time comes and goes: only the kept one is attempted again.
    s.clock.advance(Duration::from_secs(31));
    kept_rx.wait_for(2, WAIT);
    probe.look(&s);
    assert_eq!(cancelled_rx.requests().len(), 1);

    // The cancelled one can be sent again from its page.
    cancelled_rx.always(Reply::status(204));
    owner.goto(&format!("{deliveries}/{cancelled}"));
    assert_eq!(owner.text("#delivery-state"), "Cancelled");
    assert!(!owner.exists("#retry-now"));
    owner.submit(&format!(
        "form[action$='/deliveries/{cancelled}/redeliver'] button"
    ));
    assert!(owner.text(".flash").contains("Redelivery scheduled"));
    cancelled_rx.wait_for(2, WAIT);
    s.sandbox_deliveries_once(slug, |list| {
        list.iter()
            .any(|d| d["id"] == cancelled && d["state"] == "delivered")
    });
    owner.goto(&format!("{deliveries}/{cancelled}"));
    assert_eq!(owner.text("#delivery-state"), "Delivered");
    owner.assert_clean();
}

#[test]
fn the_delivery_log_names_each_event_and_the_guide_says_how_to_deduplicate() {
    let s = server();
    let ep = s.create_endpoint("Orders", &[]);
    let slug = &ep.slug;
    let receiver = Receiver::start();
    subscribe(&s, slug, &receiver);
    // One record created, replaced and deleted: three deliveries with one `webhook-id`.
    let id = s.create_record(slug, &ep.sandbox_key, &json!({ "v": 1 }))["id"]
        .as_str()
        .expect("id")
        .to_string();
    receiver.wait_for(1, WAIT);
    let record = format!("/api/v1/data/{slug}/{id}");
    let r = s.data_with(
        "PUT",
        &record,
        &ep.sandbox_key,
        &[],
        Some(&json!({ "v": 2 })),
    );
    assert_status(&r, 202);
    receiver.wait_for(2, WAIT);
    s.sandbox_deliveries_once(slug, |list| {
        list.len() == 2 && list.iter().all(|d| d["state"] == "delivered")
    });

    // The record's page tells its two deliveries apart.
    let browser = Browser::start();
    let owner = log_in(&browser, &s);
    owner.goto(&format!(
        "/dashboard/endpoints/{slug}/records/{id}?environment=sandbox"
    ));
    let cells = owner.eval(
        "Array.from(document.querySelectorAll('#record-deliveries td.event'))\
         .map(function (c) { return c.textContent; }).join(' ')",
    );
    assert_eq!(cells, json!("record.replaced record.created"));

    assert_status(
        &s.data_with("DELETE", &record, &ep.sandbox_key, &[], None),
        202,
    );
    let received = receiver.wait_for(3, WAIT);
    assert!(
        received
            .iter()
            .all(|r| r.header("webhook-id") == Some(id.as_str()))
    );
    let list = s.sandbox_deliveries_once(slug, |list| {
        list.len() == 3 && list.iter().all(|d| d["state"] == "delivered")
    });

    let deliveries = format!("/dashboard/endpoints/{slug}/deliveries");
    owner.goto(&deliveries);
    assert!(owner.text("#deliveries thead").contains("Event"));
    // Newest first: the delete, the replace, the create, each of the same record.
    let events: Vec<String> = list
        .iter()
        .map(|d| {
            let row = format!("tr[data-delivery-id='{}']", d["id"]);
            assert!(owner.text(&row).contains(&id));
            owner.text(&format!("{row} td.event"))
        })
        .collect();
    assert_eq!(
        events,
        ["record.deleted", "record.replaced", "record.created"]
    );
    let created = list[2]["id"].as_u64().expect("id");
    owner.goto(&format!("{deliveries}/{created}"));
    assert_eq!(owner.text("#delivery-event"), "record.created");

    // A test event sent from the subscription's page is listed too, marked as a test.
    owner.goto(&subscription_page(slug, "sub_1"));
    owner.submit("#test-sandbox-sub_1 button[type=submit]");
    assert!(owner.text("#test-result").contains("Delivered"));
    let received = receiver.wait_for(4, WAIT);
    let test_id = received[3]
        .header("webhook-id")
        .expect("webhook-id")
        .to_string();
    assert!(test_id.starts_with("test_"), "{test_id}");
    owner.click("#test-delivery");
    assert!(owner.text("h2").starts_with("Test event #"));
    assert_eq!(owner.text("#delivery-test-id"), test_id);
    assert_eq!(owner.text("#delivery-state"), "Delivered");
    assert!(!owner.exists("form[action$='/redeliver']"));
    owner.goto(&deliveries);
    let newest = "#deliveries tbody tr:first-child";
    assert_eq!(
        owner.text(&format!("{newest} td.event")),
        "webhook.test Test"
    );
    assert!(owner.exists(&format!("{newest} td.event .chip.test")));
    assert!(
        owner
            .text(&format!("{newest} td.record"))
            .starts_with(&test_id)
    );
    assert!(!owner.exists(&format!("{newest} td.record a")));
    // The writes' rows are as they were, none marked.
    assert_eq!(
        owner.eval("document.querySelectorAll('#deliveries .chip.test').length"),
        json!(1)
    );
    owner.screenshot("deliveries-events");

    // The Guide tab: deduplicate on webhook-id with type and timestamp, not on the id alone.
    owner.goto(&format!("/dashboard/endpoints/{slug}/test"));
    owner.click("#tab-guide");
    assert!(owner.visible("#guide-duplicates"));
    let guide = owner.text("#guide-duplicates");
    assert!(
        guide.contains("Deduplicate on webhook-id together with type and timestamp"),
        "{guide}"
    );
    assert!(guide.contains("record.replaced"), "{guide}");
    assert!(!owner.text("#panel-guide").contains("deduplicate by it"));
    owner.assert_clean();
}

#[test]
fn the_tab_lists_subscriptions_in_a_table_that_fits_and_each_has_a_page_where_its_forms_answer() {
    let s = server();
    let ep = s.create_endpoint("Orders", &[]);
    let slug = &ep.slug;
    let (ok_rx, failing_rx) = (Receiver::start(), Receiver::start());
    ok_rx.always(Reply::status(200).body("thanks"));
    failing_rx.always(Reply::status(503));
    let api = format!("/api/v1/manage/endpoints/{slug}/webhooks/sandbox/subscriptions");
    // A long URL, as receivers with capability paths and tokens have them.
    let long_url = ok_rx.url(&format!(
        "/hooks/{}in?token={}",
        "orders-".repeat(12),
        "t".repeat(60)
    ));
    let body = json!({ "url": long_url, "description": "Order sync" });
    assert_status(&s.manage("POST", &api, Some(&body)), 201);
    subscribe(&s, slug, &failing_rx);
    s.create_record(slug, &ep.sandbox_key, &json!({ "order": 1 }));
    let list = s.sandbox_deliveries_once(slug, |list| {
        list.iter()
            .any(|d| d["subscription"] == "sub_1" && d["state"] == "delivered")
            && list
                .iter()
                .any(|d| d["subscription"] == "sub_2" && d["failing"] == true)
    });
    let (delivered, failing) = (ids_of(&list, "sub_1")[0], ids_of(&list, "sub_2")[0]);

    let browser = Browser::start();
    let owner = log_in(&browser, &s);
    let tab = format!("/dashboard/endpoints/{slug}/webhooks");
    owner.goto(&tab);
    // One table, every column in sight on a laptop, the long URL wrapped inside its cell.
    owner.assert_table_headers_visible("#subscriptions-sandbox");
    assert_eq!(
        owner.eval(
            "Array.from(document.querySelectorAll('#subscriptions-sandbox th'))\
             .map(function (c) { return c.textContent; }).join('|')"
        ),
        json!("Subscription|URL|Events|State|Health|Latest recovery")
    );
    assert!(owner.text("#sandbox-sub_1 td.url").contains(&long_url));
    assert_eq!(
        owner.eval(
            "(function () { var c = document.querySelector('#sandbox-sub_1 td.url'); \
             return c.scrollWidth <= c.clientWidth; })()"
        ),
        json!(true),
        "the URL wraps inside its cell"
    );
    assert!(owner.text("#sandbox-sub_1 td.health").starts_with("OK"));
    assert!(
        owner
            .text("#sandbox-sub_2 td.health")
            .starts_with("Failing")
    );
    assert_eq!(owner.text("#sandbox-sub_1 td.recovery"), "none");
    // No subscription's forms under the table: they are on its page.
    assert!(!owner.exists("form[action$='/subscriptions/sub_1']"));
    assert!(!owner.exists("#test-sandbox-sub_1"));
    // An environment without subscriptions says how to add one, its form open.
    assert!(
        owner
            .text("#no-subscriptions-production")
            .contains("Add a production subscription")
    );
    assert!(owner.visible("#url-production"));
    owner.assert_accessible();
    owner.screenshots("webhooks");

    // The subscription's page: its settings, health and its own deliveries.
    owner.submit("#sandbox-sub_1 td:first-child a");
    let page = subscription_page(slug, "sub_1");
    assert_eq!(owner.path(), page);
    let title = owner.text("#subscription-title");
    assert!(
        title.contains("sub_1") && title.contains("owner webhook"),
        "{title}"
    );
    assert!(owner.text("#subscription-facts").contains("Order sync"));
    assert!(owner.text("#subscription-health").starts_with("OK"));
    assert_eq!(owner.value("#url-sandbox-sub_1"), long_url);
    let row = |id: u64| format!("#subscription-deliveries tr[data-delivery-id='{id}']");
    assert!(owner.text(&row(delivered)).contains("Delivered"));
    assert!(
        !owner.exists(&row(failing)),
        "another subscription's delivery"
    );

    // Send test event: the answer shows on this page.
    owner.submit("#test-sandbox-sub_1 button[type=submit]");
    let result = owner.text("#test-result");
    assert!(
        result.contains("Delivered") && result.contains("thanks"),
        "{result}"
    );
    assert!(owner.text("#subscription-title").contains("sub_1"));
    owner.assert_accessible();
    owner.screenshots("webhook-subscription");

    // A refused save answers on the page, with the typed URL kept.
    owner.goto(&page);
    owner.paste("#url-sandbox-sub_1", "ftp://example.com/hook");
    owner.submit("#subscription-settings button[type=submit]");
    let error = owner.text("#subscription-settings .error");
    assert!(error.contains("http(s) URL"), "{error}");
    assert_eq!(owner.value("#url-sandbox-sub_1"), "ftp://example.com/hook");
    assert!(owner.text("#subscription-title").contains("sub_1"));
    // A save lands back on the page.
    owner.goto(&page);
    owner.paste("#description-sandbox-sub_1", "Order sync v2");
    owner.submit("#subscription-settings button[type=submit]");
    assert_eq!(owner.path(), format!("{page}?done=subscription-saved"));
    assert!(owner.text(".flash").contains("Subscription saved"));
    assert!(owner.text("#subscription-facts").contains("Order sync v2"));

    // The recovery pickers are UTC, as their labels say, whatever the computer's zone.
    owner.time_zone("Pacific/Kiritimati");
    owner.goto(&page);
    assert_eq!(owner.text("label[for='since-sandbox-sub_1']"), "From (UTC)");
    let now = s.clock.now().to_rfc3339();
    let zone = owner.text("#zone-sandbox-sub_1");
    assert!(
        zone.contains(&format!(
            "it is {} UTC now",
            now[..16].replacen('T', " ", 1)
        )),
        "{zone}"
    );
    // A window that ends before it starts is refused on the page, the values kept.
    owner.paste("#since-sandbox-sub_1", "2026-02-01T00:00");
    owner.paste("#until-sandbox-sub_1", "2026-01-01T00:00");
    owner.submit("#subscription-recovery-form button[type=submit]");
    let error = owner.text("#subscription-recovery-form .error");
    assert!(error.contains("until"), "{error}");
    assert_eq!(owner.value("#since-sandbox-sub_1"), "2026-02-01T00:00");
    assert!(owner.text("#subscription-title").contains("sub_1"));
    owner.paste("#since-sandbox-sub_1", "2026-01-01T00:00");
    owner.paste("#until-sandbox-sub_1", "");
    owner.submit("#subscription-recovery-form button[type=submit]");
    assert_eq!(owner.path(), format!("{page}?done=recovery-started"));
    let sub = s.manage("GET", &format!("{api}/sub_1"), None).json();
    assert_eq!(
        sub["recovery"]["since"], "2026-01-01T00:00:00.000000Z",
        "{sub}"
    );
    assert!(
        owner
            .text("#subscription-recovery")
            .contains("window 2026-01-01 00:00:00 UTC to"),
        "{}",
        owner.text("#subscription-recovery")
    );

    // A subscription that does not exist has no page.
    owner.goto(&subscription_page(slug, "sub_9"));
    assert!(!owner.exists("#subscription-title"));
    owner.assert_clean();
}
