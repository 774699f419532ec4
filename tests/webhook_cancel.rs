//! Deleting a subscription with its pending deliveries (`DELETE …/subscriptions/{id}?pending=`),
//! against a real server and real receivers on loopback:
//!
//! - by default its pending deliveries are cancelled in the delete's commit: logged as
//!   `cancelled`, never attempted again, and each can be redelivered; `pending=keep` leaves
//!   them to run on their schedule; any other value is 400 `invalid_parameter`;
//! - an attempt in flight when its delivery is cancelled ends logged: a failed one leaves the
//!   delivery cancelled (not pending again), a 2xx makes it delivered.

use crate::common;

use std::time::Duration;

use common::in_process::InProcessServer;
use common::receiver::{Probe, Receiver, Reply};
use common::*;
use intake::core::clock::{Clock, SystemClock};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);

fn server() -> InProcessServer {
    InProcessServer::start(
        "[webhooks]\nallow_private_targets = true\n",
        SystemClock.now(),
    )
}

fn subscriptions_path(slug: &str) -> String {
    format!("/api/v1/manage/endpoints/{slug}/webhooks/sandbox/subscriptions")
}

/// Adds a sandbox subscription to `receiver` (asserts 201).
fn subscribe(s: &InProcessServer, slug: &str, receiver: &Receiver) {
    let body = json!({ "url": receiver.url("/in") });
    assert_status(
        &s.manage("POST", &subscriptions_path(slug), Some(&body)),
        201,
    );
}

fn of(list: &[Value], subscription: &str) -> Vec<Value> {
    list.iter()
        .filter(|d| d["subscription"] == subscription)
        .cloned()
        .collect()
}

#[test]
fn deleting_a_subscription_cancels_its_pending_deliveries_unless_asked_to_keep_them() {
    let s = server();
    let probe = Probe::new(&s);
    let ep = s.create_endpoint("Cancel", &[]);
    let (cancelled_rx, kept_rx) = (Receiver::start(), Receiver::start());
    cancelled_rx.always(Reply::status(503));
    kept_rx.always(Reply::status(503));
    subscribe(&s, &ep.slug, &cancelled_rx);
    subscribe(&s, &ep.slug, &kept_rx);
    for n in 0..2 {
        s.create_record(&ep.slug, &ep.sandbox_key, &json!({ "n": n }));
    }
    // Each failed once: pending, due again in 30 s.
    s.sandbox_deliveries_once(&ep.slug, |list| {
        list.len() == 4 && list.iter().all(|d| d["failing"] == true)
    });
    let path = subscriptions_path(&ep.slug);

    // An unknown choice is refused, and nothing is removed.
    for bad in ["later", "", "CANCEL"] {
        let r = s.manage("DELETE", &format!("{path}/sub_1?pending={bad}"), None);
        assert_error(&r, 400, "invalid_parameter");
        assert!(r.text().contains("pending"), "{}", r.text());
    }
    assert_status(&s.manage("GET", &format!("{path}/sub_1"), None), 200);

    // No choice: cancel.
    let r = s.manage("DELETE", &format!("{path}/sub_1"), None);
    assert_status(&r, 200);
    assert_eq!(
        r.json(),
        json!({ "id": "sub_1", "environment": "sandbox", "removed": true,
                "pending": "cancel", "cancelled": 2 })
    );
    let r = s.manage("DELETE", &format!("{path}/sub_2?pending=keep"), None);
    assert_status(&r, 200);
    assert_eq!(
        (&r.json()["pending"], &r.json()["cancelled"]),
        (&json!("keep"), &json!(0))
    );

    let list = s.sandbox_deliveries_once(&ep.slug, |_| true);
    let cancelled = of(&list, "sub_1");
    assert_eq!(cancelled.len(), 2);
    for d in &cancelled {
        assert_eq!(d["state"], "cancelled", "{d}");
        assert_eq!(d["failing"], false, "{d}");
        assert_eq!(d["next_attempt_at"], Value::Null, "{d}");
        assert!(d["finished_at"].is_string(), "{d}");
        assert_eq!(d["attempts"], 1, "{d}");
    }
    for d in of(&list, "sub_2") {
        assert_eq!(
            (&d["state"], &d["failing"]),
            (&json!("pending"), &json!(true)),
            "{d}"
        );
    }
    let r = s.manage(
        "GET",
        &format!(
            "/api/v1/manage/endpoints/{}/deliveries?state=cancelled",
            ep.slug
        ),
        None,
    );
    let filtered = r.json()["data"].as_array().expect("data").clone();
    assert_eq!(filtered, cancelled);

    // The retry time comes: the kept ones are attempted again, the cancelled ones never.
    s.clock.advance(Duration::from_secs(31));
    kept_rx.wait_for(4, WAIT);
    probe.look(&s);
    assert_eq!(cancelled_rx.requests().len(), 2);

    // A cancelled delivery can be sent again, with a fresh budget.
    cancelled_rx.always(Reply::status(204));
    let id = cancelled[0]["id"].as_u64().expect("id");
    let r = s.manage(
        "POST",
        &format!(
            "/api/v1/manage/endpoints/{}/deliveries/{id}/redeliver",
            ep.slug
        ),
        None,
    );
    assert_status(&r, 200);
    assert_eq!(r.json()["state"], "pending");
    cancelled_rx.wait_for(3, WAIT);
    s.sandbox_deliveries_once(&ep.slug, |list| {
        list.iter()
            .any(|d| d["id"] == id && d["state"] == "delivered")
    });
    assert_eq!(cancelled_rx.requests().len(), 3);

    let audit = s.audit_text(&ep.slug);
    assert!(audit.contains("\"pending\":\"cancel\""), "{audit}");
    assert!(audit.contains("\"pending\":\"keep\""), "{audit}");
}

#[test]
fn the_owner_webhook_route_takes_the_same_choice() {
    let s = server();
    let ep = s.create_endpoint("First", &[]);
    let receiver = Receiver::start();
    receiver.always(Reply::status(503));
    subscribe(&s, &ep.slug, &receiver);
    s.create_record(&ep.slug, &ep.sandbox_key, &json!({ "n": 1 }));
    s.sandbox_deliveries_once(&ep.slug, |list| list.iter().any(|d| d["failing"] == true));
    let first = format!("/api/v1/manage/endpoints/{}/webhooks/sandbox", ep.slug);
    assert_error(
        &s.manage("DELETE", &format!("{first}?pending=maybe"), None),
        400,
        "invalid_parameter",
    );
    let r = s.manage("DELETE", &format!("{first}?pending=cancel"), None);
    assert_status(&r, 200);
    assert_eq!(
        r.json(),
        json!({ "environment": "sandbox", "removed": true, "pending": "cancel", "cancelled": 1 })
    );
    let list = s.sandbox_deliveries_once(&ep.slug, |_| true);
    assert_eq!(list[0]["state"], "cancelled");
}

#[test]
fn an_attempt_in_flight_when_its_delivery_is_cancelled_ends_logged_and_is_not_retried() {
    let s = server();
    let probe = Probe::new(&s);
    let ep = s.create_endpoint("In flight", &[]);
    // Both answer after a while: the delete lands while their attempts are in flight.
    let (failing, answering) = (Receiver::start(), Receiver::start());
    failing.always(Reply::status(503).delay(Duration::from_secs(3)));
    answering.always(Reply::status(204).delay(Duration::from_secs(3)));
    subscribe(&s, &ep.slug, &failing);
    subscribe(&s, &ep.slug, &answering);
    s.create_record(&ep.slug, &ep.sandbox_key, &json!({ "n": 1 }));
    failing.wait_for(1, WAIT);
    answering.wait_for(1, WAIT);
    let path = subscriptions_path(&ep.slug);
    for sub in ["sub_1", "sub_2"] {
        let r = s.manage("DELETE", &format!("{path}/{sub}"), None);
        assert_eq!(r.json()["cancelled"], 1, "{sub}: {}", r.text());
    }
    let list = s.sandbox_deliveries_once(&ep.slug, |_| true);
    assert!(
        list.iter()
            .all(|d| d["state"] == "cancelled" && d["attempts"] == 0),
        "{list:#?}"
    );

    // The attempts end: each is logged; the failed one stays cancelled and is not due again,
    // the answered one was delivered (the receiver has it).
    let list = s.sandbox_deliveries_once(&ep.slug, |list| {
        list.iter().all(|d| d["attempts"] == 1) && list.iter().any(|d| d["state"] == "delivered")
    });
    let failed = &of(&list, "sub_1")[0];
    assert_eq!(failed["state"], "cancelled", "{failed}");
    assert_eq!(failed["next_attempt_at"], Value::Null, "{failed}");
    assert_eq!(of(&list, "sub_2")[0]["state"], "delivered");
    let id = failed["id"].as_u64().expect("id");
    let detail = s
        .manage(
            "GET",
            &format!("/api/v1/manage/endpoints/{}/deliveries/{id}", ep.slug),
            None,
        )
        .json();
    let attempts = detail["attempt_log"].as_array().expect("attempt_log");
    assert_eq!(attempts.len(), 1, "{detail}");
    assert_eq!(attempts[0]["status"], 503);

    // Long after its retry would have been due: never sent again.
    s.clock.advance(Duration::from_secs(3600));
    probe.look(&s);
    assert_eq!(failing.requests().len(), 1);
    assert_eq!(answering.requests().len(), 1);
}
