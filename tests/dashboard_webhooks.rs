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

/// Deletes `subscription` from the Webhooks tab, the box "Cancel its pending deliveries" as
/// `cancel` says; returns the question asked.
fn delete_subscription(owner: &Session, slug: &str, subscription: &str, cancel: bool) -> String {
    owner.goto(&format!("/dashboard/endpoints/{slug}/webhooks"));
    owner.click(&format!(
        "details:has(#url-sandbox-{subscription}) > summary"
    ));
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
    assert!(!owner.exists("#sandbox-sub_1"));

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

    // A test event sent from the Webhooks tab is listed too, marked as a test.
    owner.goto(&format!("/dashboard/endpoints/{slug}/webhooks"));
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
