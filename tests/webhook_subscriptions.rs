//! The owner's webhook subscriptions (`…/webhooks/{environment}/subscriptions`), against a real
//! server:
//!
//! - several subscriptions per endpoint and environment: listed, made, changed field by field,
//!   deleted; numbers never given twice; the spec's owner webhook routes act on the first;
//! - validation (event types, rate limit, description, ids), the cap per environment, owner
//!   only;
//! - each subscription gets exactly the event types of its filter, delivered to a real
//!   receiver on loopback, and a disabled one's deliveries are logged as skipped, never sent,
//!   until a redelivery sends one;
//! - a test event is logged as a test with its one attempt, and never sent again.

use crate::common;

use std::time::Duration;

use common::in_process::InProcessServer;
use common::receiver::{Probe, Receiver};
use common::*;
use intake::core::clock::{Clock, SystemClock};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);
const RECEIVER: &str = "https://receiver.invalid/hooks";

fn subscriptions_path(slug: &str, environment: &str) -> String {
    format!("/api/v1/manage/endpoints/{slug}/webhooks/{environment}/subscriptions")
}

/// Adds a subscription to `slug`'s sandbox (asserts 201).
fn subscribe(s: &ServerClient, slug: &str, body: &Value) {
    let r = s.manage("POST", &subscriptions_path(slug, "sandbox"), Some(body));
    assert_status(&r, 201);
}

fn ids(list: &Value) -> Vec<String> {
    list["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|s| s["id"].as_str().expect("id").to_string())
        .collect()
}

#[test]
fn subscriptions_are_listed_made_changed_and_deleted() {
    let s = TestServer::start();
    let ep = s.create_endpoint("Subs", &[]);
    let list_path = subscriptions_path(&ep.slug, "production");
    let first_path = format!("/api/v1/manage/endpoints/{}/webhooks/production", ep.slug);

    let r = s.manage("GET", &list_path, None);
    assert_status(&r, 200);
    assert_eq!(r.json(), json!({ "environment": "production", "data": [] }));

    // The spec's single-webhook route makes the first subscription.
    let r = s.manage("PUT", &first_path, Some(&json!({ "url": RECEIVER })));
    assert_status(&r, 200);
    assert_eq!(r.json()["id"], "sub_1");
    assert_eq!(r.json()["event_types"], json!([]));

    let r = s.manage(
        "POST",
        &list_path,
        Some(&json!({
            "url": "https://second.invalid/in",
            "description": "  Billing system  ",
            "event_types": ["record.deleted", "record.created", "record.deleted"],
            "rate_limit": 50,
            "auth_header": "X-Key",
            "auth_value": "s3cret-sub",
        })),
    );
    assert_status(&r, 201);
    let second = r.json();
    assert_eq!(second["id"], "sub_2");
    assert_eq!(second["environment"], "production");
    assert_eq!(second["description"], "Billing system");
    assert_eq!(
        second["event_types"],
        json!(["record.created", "record.deleted"])
    );
    assert_eq!(second["rate_limit"], 50);
    assert_eq!(second["auth_header"], "x-key");
    assert_eq!(second["auth_value_set"], true);
    assert_eq!(second["enabled"], true);
    assert!(!r.text().contains("s3cret-sub"));

    let r = s.manage("GET", &list_path, None);
    assert_eq!(ids(&r.json()), ["sub_1", "sub_2"]);
    assert_eq!(
        s.manage("GET", &format!("{list_path}/sub_2"), None).json(),
        second
    );
    // The sandbox has its own (none).
    assert_eq!(
        ids(&s
            .manage("GET", &subscriptions_path(&ep.slug, "sandbox"), None)
            .json()),
        Vec::<String>::new()
    );

    // PATCH changes what it names and keeps the rest; null removes an optional field.
    let r = s.manage(
        "PATCH",
        &format!("{list_path}/sub_2"),
        Some(&json!({ "rate_limit": null, "event_types": [], "enabled": false })),
    );
    assert_status(&r, 200);
    let changed = r.json();
    assert_eq!(changed["rate_limit"], Value::Null);
    assert_eq!(changed["event_types"], json!([]));
    assert_eq!(changed["enabled"], false);
    assert_eq!(changed["description"], "Billing system");
    assert_eq!(changed["auth_value_set"], true);
    assert_eq!(changed["created_at"], second["created_at"]);
    let r = s.manage(
        "PATCH",
        &format!("{list_path}/sub_2"),
        Some(&json!({ "auth_value": null })),
    );
    assert_eq!(r.json()["auth_value_set"], false);
    assert_eq!(r.json()["auth_header"], Value::Null);
    // A header name alone needs a stored value to go with.
    let r = s.manage(
        "PATCH",
        &format!("{list_path}/sub_2"),
        Some(&json!({ "auth_header": "X-Other" })),
    );
    assert_error(&r, 400, "invalid_webhook");

    // Deleting the first makes the next one first; its number is not given again.
    assert_status(
        &s.manage("DELETE", &format!("{list_path}/sub_1"), None),
        200,
    );
    assert_error(
        &s.manage("GET", &format!("{list_path}/sub_1"), None),
        404,
        "subscription_not_found",
    );
    assert_eq!(s.manage("GET", &first_path, None).json()["id"], "sub_2");
    let r = s.manage("POST", &list_path, Some(&json!({ "url": RECEIVER })));
    assert_eq!(r.json()["id"], "sub_3");
    assert_status(&s.manage("DELETE", &first_path, None), 200);
    assert_eq!(ids(&s.manage("GET", &list_path, None).json()), ["sub_3"]);

    let audit = s.audit_text(&ep.slug);
    for action in [
        "webhook.configured",
        "webhook.subscription_created",
        "webhook.subscription_updated",
        "webhook.subscription_deleted",
        "webhook.removed",
    ] {
        assert!(audit.contains(action), "{action} missing: {audit}");
    }
    assert!(!audit.contains("s3cret-sub"));
    assert!(!s.log.text().contains("s3cret-sub"));
}

#[test]
fn subscriptions_are_validated_capped_and_the_owners_alone() {
    let s = TestServer::start();
    let ep = s.create_endpoint("Subs", &[]);
    let path = subscriptions_path(&ep.slug, "sandbox");
    for (body, what) in [
        (
            json!({ "url": RECEIVER, "event_types": ["record.updated"] }),
            "unknown event type",
        ),
        (json!({ "url": RECEIVER, "rate_limit": 0 }), "rate limit 0"),
        (
            json!({ "url": RECEIVER, "rate_limit": 10_001 }),
            "rate limit too high",
        ),
        (
            json!({ "url": RECEIVER, "description": "x".repeat(201) }),
            "long description",
        ),
        (
            json!({ "url": RECEIVER, "description": "two\nlines" }),
            "description on two lines",
        ),
        (json!({ "url": "ftp://example.com/" }), "non-http URL"),
    ] {
        let r = s.manage("POST", &path, Some(&body));
        assert_error(&r, 400, "invalid_webhook");
        assert!(!error_message(&r).is_empty(), "{what}");
    }
    let r = s.manage("POST", &path, Some(&json!({ "url": RECEIVER, "extra": 1 })));
    assert_error(&r, 400, "invalid_request");
    let r = s.manage(
        "POST",
        &path,
        Some(&json!({ "url": RECEIVER, "rate_limit": -1 })),
    );
    assert_error(&r, 400, "invalid_request");
    assert_eq!(
        ids(&s.manage("GET", &path, None).json()),
        Vec::<String>::new()
    );

    for bad in ["1", "sub_", "sub_x", "sub_01", "sub_0", "sub_99999999999"] {
        let r = s.manage("GET", &format!("{path}/{bad}"), None);
        assert_error(&r, 400, "invalid_parameter");
    }
    assert_error(
        &s.manage(
            "PATCH",
            &format!("{path}/sub_7"),
            Some(&json!({ "enabled": true })),
        ),
        404,
        "subscription_not_found",
    );
    assert_error(
        &s.manage(
            "PUT",
            &format!("{path}/sub_7"),
            Some(&json!({ "url": RECEIVER })),
        ),
        405,
        "method_not_allowed",
    );

    for n in 1..=20 {
        let r = s.manage("POST", &path, Some(&json!({ "url": RECEIVER })));
        assert_status(&r, 201);
        assert_eq!(r.json()["id"], format!("sub_{n}"));
    }
    let r = s.manage("POST", &path, Some(&json!({ "url": RECEIVER })));
    assert_error(&r, 409, "conflict");
    assert_eq!(ids(&s.manage("GET", &path, None).json()).len(), 20);

    let r = s.manage_with("GET", &path, None, None);
    assert_error(&r, 401, "missing_token");
    let r = s.manage(
        "GET",
        &subscriptions_path("no-such-endpoint", "sandbox"),
        None,
    );
    assert_error(&r, 404, "endpoint_not_found");
}

/// The event types each of `receiver`'s requests announced, in arrival order.
fn types_received(receiver: &Receiver) -> Vec<String> {
    receiver
        .requests()
        .iter()
        .map(|r| r.json()["type"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn each_subscription_gets_the_events_of_its_filter_and_a_disabled_one_skips() {
    let s = InProcessServer::start(
        "[webhooks]\nallow_private_targets = true\n",
        SystemClock.now(),
    );
    let ep = s.create_endpoint("Filtered", &[]);
    let path = subscriptions_path(&ep.slug, "sandbox");
    let (all, created, changed, off) = (
        Receiver::start(),
        Receiver::start(),
        Receiver::start(),
        Receiver::start(),
    );
    for (receiver, types, enabled) in [
        (&all, json!([]), true),
        (&created, json!(["record.created"]), true),
        (&changed, json!(["record.replaced", "record.deleted"]), true),
        (&off, json!([]), false),
    ] {
        let body = json!({ "url": receiver.url("/in"), "event_types": types, "enabled": enabled });
        assert_status(&s.manage("POST", &path, Some(&body)), 201);
    }

    let record = s.create_record(&ep.slug, &ep.sandbox_key, &json!({ "n": 1 }));
    let id = record["id"].as_str().expect("id").to_string();
    let record = format!("/api/v1/data/{}/{id}", ep.slug);
    let r = s.data_with(
        "PUT",
        &record,
        &ep.sandbox_key,
        &[],
        Some(&json!({ "n": 2 })),
    );
    assert_status(&r, 202);
    assert_status(
        &s.data_with("DELETE", &record, &ep.sandbox_key, &[], None),
        202,
    );

    all.wait_for(3, WAIT);
    created.wait_for(1, WAIT);
    changed.wait_for(2, WAIT);
    // Every delivery of the three writes is in the log, so nothing more is on its way.
    let log = s.manage(
        "GET",
        &format!("/api/v1/manage/endpoints/{}/deliveries?limit=100", ep.slug),
        None,
    );
    let log = log.json()["data"].as_array().expect("data").clone();
    assert_eq!(log.len(), 3 + 1 + 2 + 3, "{log:?}");
    let mut sorted = types_received(&all);
    sorted.sort();
    assert_eq!(
        sorted,
        ["record.created", "record.deleted", "record.replaced"]
    );
    assert_eq!(types_received(&created), ["record.created"]);
    let mut sorted = types_received(&changed);
    sorted.sort();
    assert_eq!(sorted, ["record.deleted", "record.replaced"]);

    // The disabled subscription's three deliveries are logged as skipped and never sent.
    let skipped: Vec<&Value> = log
        .iter()
        .filter(|d| d["subscription"] == "sub_4")
        .collect();
    assert_eq!(skipped.len(), 3);
    for d in &skipped {
        assert_eq!(d["state"], "skipped", "{d}");
        assert_eq!(d["attempts"], 0);
        assert_eq!(d["next_attempt_at"], Value::Null);
    }
    assert!(log.iter().all(|d| d["kind"] == "owner"));
    for (sub, n) in [("sub_1", 3), ("sub_2", 1), ("sub_3", 2)] {
        assert_eq!(
            log.iter().filter(|d| d["subscription"] == sub).count(),
            n,
            "{sub}"
        );
    }
    assert!(off.requests().is_empty());
    // Each subscription's log: sub_1's three, two to a page.
    let page = |query: &str| {
        let path = format!("/api/v1/manage/endpoints/{}/deliveries?{query}", ep.slug);
        let r = s.manage("GET", &path, None);
        assert_status(&r, 200);
        r.json()
    };
    let first = page("subscription=sub_1&limit=2");
    let ids: Vec<&Value> = first["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|d| &d["id"])
        .collect();
    assert_eq!(ids.len(), 2);
    assert!(
        first["data"]
            .as_array()
            .expect("data")
            .iter()
            .all(|d| d["subscription"] == "sub_1")
    );
    let cursor = first["pagination"]["next_cursor"]
        .as_str()
        .expect("a next page");
    let second = page(&format!("subscription=sub_1&limit=2&cursor={cursor}"));
    assert_eq!(second["data"].as_array().map(Vec::len), Some(1), "{second}");
    assert_eq!(second["data"][0]["subscription"], "sub_1");
    assert_eq!(
        page("subscription=sub_2")["data"].as_array().map(Vec::len),
        Some(1)
    );
    assert_error(
        &s.manage(
            "GET",
            &format!(
                "/api/v1/manage/endpoints/{}/deliveries?subscription=2",
                ep.slug
            ),
            None,
        ),
        400,
        "invalid_parameter",
    );

    // A skipped delivery can be sent by hand; it goes to the receiver it was made for.
    let first = skipped.last().expect("oldest skipped")["id"].clone();
    let r = s.manage(
        "POST",
        &format!(
            "/api/v1/manage/endpoints/{}/deliveries/{first}/redeliver",
            ep.slug
        ),
        None,
    );
    assert_status(&r, 200);
    let got = off.wait_for(1, WAIT);
    assert_eq!(got[0].json()["type"], "record.created");
}

#[test]
fn a_rate_limit_paces_a_subscription_by_the_clock_and_holds_no_one_else_up() {
    let s = InProcessServer::start(
        "[webhooks]\nallow_private_targets = true\n",
        SystemClock.now(),
    );
    let probe = Probe::new(&s);
    let ep = s.create_endpoint("Paced", &[]);
    let paced = Receiver::start();
    let body = json!({ "url": paced.url("/in"), "rate_limit": 2 });
    subscribe(&s, &ep.slug, &body);
    for n in 0..5 {
        s.create_record(&ep.slug, &ep.sandbox_key, &json!({ "n": n }));
    }
    // Two a second: one now, then one each half second of the (injected) clock.
    paced.wait_for(1, WAIT);
    for sent in 1..5 {
        probe.look(&s);
        assert_eq!(paced.requests().len(), sent, "sent before its time");
        s.clock.advance(Duration::from_millis(250));
        probe.look(&s);
        assert_eq!(paced.requests().len(), sent, "sent before its time");
        s.clock.advance(Duration::from_millis(250));
        paced.wait_for(sent + 1, WAIT);
    }
    probe.look(&s);
    assert_eq!(paced.requests().len(), 5);
    let mut sent: Vec<i64> = paced
        .requests()
        .iter()
        .map(|r| r.json()["data"]["payload"]["n"].as_i64().expect("n"))
        .collect();
    sent.sort_unstable();
    assert_eq!(sent, [0, 1, 2, 3, 4]);
}

/// The deliveries of `slug`'s sandbox, newest first, once `n` of them are in `state`.
fn wait_deliveries(s: &InProcessServer, slug: &str, n: usize, state: &str) -> Vec<Value> {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let r = s.manage(
            "GET",
            &format!("/api/v1/manage/endpoints/{slug}/deliveries?limit=100"),
            None,
        );
        let list = r.json()["data"].as_array().expect("data").clone();
        if list.iter().filter(|d| d["state"] == state).count() >= n {
            return list;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {n} {state}: {list:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_subscription_failing_for_five_days_is_disabled_once_with_one_email() {
    let smtp = common::smtp::SmtpServer::start();
    let toml = format!(
        "[webhooks]\nallow_private_targets = true\n{}",
        smtp.config_toml("Intake <intake@example.com>")
    );
    let s = InProcessServer::start(&toml, SystemClock.now());
    let ep = s.create_endpoint("Breaker", &[]);
    let receiver = Receiver::start();
    // 400 is not retried: each write is one failed attempt.
    receiver.always(common::receiver::Reply::status(400));
    let sub = format!("{}/sub_1", subscriptions_path(&ep.slug, "sandbox"));
    let body = json!({ "url": receiver.url("/in") });
    subscribe(&s, &ep.slug, &body);
    let write = |n: usize| {
        s.create_record(&ep.slug, &ep.sandbox_key, &json!({ "n": n }));
    };
    // Ten failed attempts (the default least) in the first minute: still enabled.
    for n in 1..=10 {
        write(n);
        wait_deliveries(&s, &ep.slug, n, "given_up");
    }
    let view = s.manage("GET", &sub, None).json();
    assert_eq!(view["enabled"], true);
    assert_eq!(view["health"]["failed_attempts"], 10);
    assert!(view["health"]["failing_since"].is_string(), "{view}");
    assert_eq!(view["health"]["last_success_at"], Value::Null);
    // Failing for just under five days: still enabled.
    s.clock.advance(Duration::from_secs(5 * 86_400 - 60));
    write(11);
    wait_deliveries(&s, &ep.slug, 11, "given_up");
    assert_eq!(s.manage("GET", &sub, None).json()["enabled"], true);
    // Past five days: the next failure disables it.
    s.clock.advance(Duration::from_secs(120));
    write(12);
    wait_deliveries(&s, &ep.slug, 12, "given_up");
    let view = s.manage("GET", &sub, None).json();
    assert_eq!(view["enabled"], false, "{view}");
    assert!(view["auto_disabled_at"].is_string(), "{view}");
    let mail = smtp.wait_for(1, WAIT);
    assert_eq!(mail[0].to, [OWNER_EMAIL]);
    assert!(
        mail[0].subject().contains("disabled"),
        "{}",
        mail[0].subject()
    );
    let text = mail[0].body_text();
    for needle in [
        "sub_1",
        ep.slug.as_str(),
        receiver.url("/in").as_str(),
        "recover",
        &format!(
            "{}/dashboard/endpoints/{}/webhooks\n",
            s.base_url(),
            ep.slug
        ),
    ] {
        assert!(text.contains(needle), "{needle:?} not in {text}");
    }
    let notes = s.manage("GET", "/api/v1/manage/notifications", None).json();
    let kinds: Vec<&Value> = notes["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|n| &n["kind"])
        .collect();
    assert_eq!(kinds, [&json!("webhook_disabled")], "{notes}");

    // Disabled: new writes are skipped, nothing more is sent or mailed.
    let sent = receiver.requests().len();
    write(13);
    wait_deliveries(&s, &ep.slug, 1, "skipped");
    assert_eq!(receiver.requests().len(), sent);

    // Switched on again, the count starts afresh: a failure does not disable it at once, and a
    // success clears the streak.
    let r = s.manage("PATCH", &sub, Some(&json!({ "enabled": true })));
    assert_eq!(r.json()["auto_disabled_at"], Value::Null);
    assert_eq!(r.json()["health"]["failed_attempts"], 0);
    write(14);
    wait_deliveries(&s, &ep.slug, 13, "given_up");
    assert_eq!(s.manage("GET", &sub, None).json()["enabled"], true);
    receiver.always(common::receiver::Reply::status(200));
    write(15);
    wait_deliveries(&s, &ep.slug, 1, "delivered");
    let view = s.manage("GET", &sub, None).json();
    assert_eq!(view["health"]["failed_attempts"], 0);
    assert_eq!(view["health"]["failing_since"], Value::Null);
    assert!(view["health"]["last_success_at"].is_string());
    // One e-mail in all.
    let r = s.manage("GET", "/api/v1/manage/mail?limit=100", None);
    let kinds: Vec<Value> = r.json()["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|m| m["kind"].clone())
        .collect();
    assert_eq!(kinds, [json!("webhook_disabled")]);
}

/// The subscription at `path` once its recovery is in `state`.
fn wait_recovery(s: &InProcessServer, path: &str, state: &str) -> Value {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let view = s.manage("GET", path, None).json();
        if view["recovery"]["state"] == state {
            return view;
        }
        assert!(std::time::Instant::now() < deadline, "not {state}: {view}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The `n` of the payload of each request `receiver` got from index `from` on, in arrival order.
fn payload_numbers(receiver: &Receiver, from: usize) -> Vec<i64> {
    receiver.requests()[from..]
        .iter()
        .map(|r| r.json()["data"]["payload"]["n"].as_i64().expect("n"))
        .collect()
}

#[test]
fn a_recovery_sends_exactly_the_failed_and_skipped_ones_in_created_order_at_the_rate_limit() {
    let s = InProcessServer::start(
        "[webhooks]\nallow_private_targets = true\n",
        SystemClock.now(),
    );
    let since = s.clock.now().to_rfc3339();
    let probe = Probe::new(&s);
    let ep = s.create_endpoint("Recover", &[]);
    let (owner_rx, caller_rx) = (Receiver::start(), Receiver::start());
    let path = subscriptions_path(&ep.slug, "sandbox");
    let sub = format!("{path}/sub_1");
    let body = json!({ "url": owner_rx.url("/in") });
    assert_status(&s.manage("POST", &path, Some(&body)), 201);
    let write = |n: i64| s.create_record(&ep.slug, &ep.sandbox_key, &json!({ "n": n }));

    // 0 delivered; 1 and 2 given up (400 is not retried); 3 and 4 skipped while disabled.
    write(0);
    owner_rx.wait_for(1, WAIT);
    owner_rx.always(common::receiver::Reply::status(400));
    write(1);
    write(2);
    wait_deliveries(&s, &ep.slug, 2, "given_up");
    s.manage("PATCH", &sub, Some(&json!({ "enabled": false })));
    write(3);
    write(4);
    wait_deliveries(&s, &ep.slug, 2, "skipped");
    // A caller webhook given up too: only the callers' recovery takes it (the write's
    // subscription delivery is skipped like 3 and 4).
    caller_rx.always(common::receiver::Reply::status(400));
    let callback = caller_rx.url("/cb");
    let r = s.data_with(
        "POST",
        &format!("/api/v1/data/{}", ep.slug),
        &ep.sandbox_key,
        &[("X-Webhook-Callback", callback.as_str())],
        Some(&json!({ "n": 5 })),
    );
    assert_status(&r, 202);
    wait_deliveries(&s, &ep.slug, 3, "given_up");

    // Back on, at two a second; the receiver works again.
    let patch = json!({ "enabled": true, "rate_limit": 2 });
    assert_status(&s.manage("PATCH", &sub, Some(&patch)), 200);
    owner_rx.always(common::receiver::Reply::status(200));
    caller_rx.always(common::receiver::Reply::status(200));
    let before = owner_rx.requests().len();
    s.clock.advance(Duration::from_secs(1));

    let bad = s.manage(
        "POST",
        &format!("{sub}/recover"),
        Some(&json!({ "since": "not a time" })),
    );
    assert_error(&bad, 400, "invalid_parameter");
    let r = s.manage(
        "POST",
        &format!("{sub}/recover"),
        Some(&json!({ "since": since })),
    );
    assert_status(&r, 202);
    assert_eq!(r.json()["subscription"], "sub_1");
    // The walk runs in the background: wait for its end.
    let view = wait_recovery(&s, &sub, "scheduled");
    assert_eq!(view["recovery"]["scheduled"], 5, "{view}");

    // Paced by the clock: one at once, then one each half second, in created order.
    owner_rx.wait_for(before + 1, WAIT);
    for sent in 1..5 {
        probe.look(&s);
        assert_eq!(
            owner_rx.requests().len(),
            before + sent,
            "sent before its time"
        );
        s.clock.advance(Duration::from_millis(500));
        owner_rx.wait_for(before + sent + 1, WAIT);
    }
    probe.look(&s);
    assert_eq!(payload_numbers(&owner_rx, before), [1, 2, 3, 4, 5]);
    assert_eq!(
        caller_rx.requests().len(),
        1,
        "the caller's is not the subscription's"
    );
    wait_recovery(&s, &sub, "finished");

    // The callers' recovery: the given-up caller delivery, and nothing else.
    let callers = format!(
        "/api/v1/manage/endpoints/{}/webhooks/sandbox/caller-recovery",
        ep.slug
    );
    assert_error(&s.manage("GET", &callers, None), 404, "recovery_not_found");
    let r = s.manage("POST", &callers, Some(&json!({ "since": since })));
    assert_status(&r, 202);
    assert_eq!(r.json()["subscription"], Value::Null);
    let got = caller_rx.wait_for(2, WAIT);
    assert_eq!(got[1].json()["data"]["payload"]["n"], 5);
    let r = s.manage("GET", &callers, None);
    assert_eq!(r.json()["scheduled"], 1, "{}", r.text());
    // Finished once that one was attempted; the same window again waits for the cooldown.
    let deadline = std::time::Instant::now() + WAIT;
    while s.manage("GET", &callers, None).json()["state"] != "finished" {
        assert!(
            std::time::Instant::now() < deadline,
            "the callers' recovery never finished"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let r = s.manage("POST", &callers, Some(&json!({ "since": since })));
    assert_error(&r, 429, "recovery_cooldown");
    probe.look(&s);
    assert_eq!(owner_rx.requests().len(), before + 5);
    assert!(s.audit_text(&ep.slug).contains("webhook.recovery_started"));
}

/// A recovery stays one at a time (409) until the last delivery it rescheduled has been
/// attempted, paced seconds after it started, and only then reports `finished`; its window
/// ends at the request at the latest (an `until` in the future is cut to now); and once it
/// has finished, another over an overlapping window is refused for the cooldown (429
/// `recovery_cooldown` with `Retry-After`, by the server's clock). Repeated calls against a
/// receiver that still refuses send each given-up delivery once, not once per call.
#[test]
fn a_recovery_holds_until_its_last_delivery_is_attempted_and_then_cools_down() {
    let s = InProcessServer::start(
        "[webhooks]\nallow_private_targets = true\n",
        SystemClock.now(),
    );
    let since = s.clock.now().to_rfc3339();
    let ep = s.create_endpoint("Cooldown", &[]);
    let rx = Receiver::start();
    rx.always(common::receiver::Reply::status(400));
    let path = subscriptions_path(&ep.slug, "sandbox");
    let sub = format!("{path}/sub_1");
    let recover = format!("{sub}/recover");
    let body = json!({ "url": rx.url("/in") });
    assert_status(&s.manage("POST", &path, Some(&body)), 201);
    for n in 1..=3 {
        s.create_record(&ep.slug, &ep.sandbox_key, &json!({ "n": n }));
    }
    wait_deliveries(&s, &ep.slug, 3, "given_up");
    // Recovered at one a second.
    let paced = json!({ "rate_limit": 1 });
    assert_status(&s.manage("PATCH", &sub, Some(&paced)), 200);
    s.clock.advance(Duration::from_secs(1));
    let now = s.clock.now().to_rfc3339();

    // An `until` in the future ends the window now.
    let far = json!({ "since": since, "until": "2999-01-01T00:00:00Z" });
    let r = s.manage("POST", &recover, Some(&far));
    assert_status(&r, 202);
    assert_eq!(r.json()["until"], now.as_str(), "{}", r.text());
    // Asked again at once, twice: one at a time.
    let again = json!({ "since": since });
    for _ in 0..2 {
        assert_error(&s.manage("POST", &recover, Some(&again)), 409, "conflict");
    }
    // Walked: all three due, one a second; the first goes at once.
    let view = wait_recovery(&s, &sub, "scheduled");
    assert_eq!(view["recovery"]["scheduled"], 3, "{view}");
    assert_eq!(view["recovery"]["finished_at"], Value::Null);
    rx.wait_for(4, WAIT);
    assert_error(&s.manage("POST", &recover, Some(&again)), 409, "conflict");
    s.clock.advance(Duration::from_secs(1));
    rx.wait_for(5, WAIT);
    assert_eq!(
        s.manage("GET", &sub, None).json()["recovery"]["state"],
        "scheduled"
    );
    s.clock.advance(Duration::from_secs(1));
    rx.wait_for(6, WAIT);
    let last_attempt = s.clock.now().to_rfc3339();
    let view = wait_recovery(&s, &sub, "finished");
    assert_eq!(view["recovery"]["finished_at"], last_attempt.as_str());
    wait_deliveries(&s, &ep.slug, 3, "given_up");

    // Finished, and the receiver still refuses: the same window again waits for the
    // cooldown, 10 minutes from the last attempt.
    let r = s.manage("POST", &recover, Some(&again));
    assert_error(&r, 429, "recovery_cooldown");
    assert_eq!(r.header("retry-after"), Some("600"));
    s.clock.advance(Duration::from_secs(599));
    let r = s.manage("POST", &recover, Some(&again));
    assert_eq!(r.header("retry-after"), Some("1"), "{}", r.text());
    assert_eq!(rx.requests().len(), 6, "each given-up delivery sent once");
    assert_eq!(payload_numbers(&rx, 3), [1, 2, 3]);
    s.clock.advance(Duration::from_secs(1));
    assert_status(&s.manage("POST", &recover, Some(&again)), 202);
    rx.wait_for(7, WAIT);
}

/// The URL's egress check judges the URL that is stored: whitespace around it (which is
/// dropped) does not get a refused address past it, on every route that sets a URL, and a
/// URL that does not parse is refused rather than passed on unchecked.
#[test]
fn whitespace_around_a_url_does_not_get_it_past_the_egress_rule() {
    let s = TestServer::start();
    let ep = s.create_endpoint("Subs", &[]);
    let list = subscriptions_path(&ep.slug, "sandbox");
    let first = format!("/api/v1/manage/endpoints/{}/webhooks/sandbox", ep.slug);
    let padded = [
        (" http://127.0.0.1:9001/", "127.0.0.1"),
        ("\thttp://10.0.0.1/", "10.0.0.1"),
        ("http://169.254.169.254/\r\n", "169.254.169.254"),
        ("\n http://[::ffff:0:a00:1]/ \t", "::ffff:0:a00:1"),
    ];
    let refused = |r: &Resp, address: &str, what: &str| {
        assert_error(r, 400, "webhook_target_refused");
        let message = error_message(r);
        assert!(message.contains(address), "{what}: {message}");
    };
    for (url, address) in padded {
        for (method, path) in [("POST", &list), ("PUT", &first)] {
            let r = s.manage(method, path, Some(&json!({ "url": url })));
            refused(&r, address, &format!("{method} {url:?}"));
        }
    }
    assert_eq!(
        ids(&s.manage("GET", &list, None).json()),
        Vec::<String>::new()
    );

    // Around an accepted URL, the whitespace is dropped; a change is judged the same way.
    let r = s.manage(
        "POST",
        &list,
        Some(&json!({ "url": format!("  {RECEIVER}\n") })),
    );
    assert_status(&r, 201);
    assert_eq!(r.json()["url"], RECEIVER);
    for (url, address) in padded {
        for path in [format!("{list}/sub_1"), first.clone()] {
            let r = s.manage("PATCH", &path, Some(&json!({ "url": url })));
            refused(&r, address, &format!("PATCH {url:?}"));
        }
    }
    for url in [" http://127.0.0.1 /hook", "http://[::1/hook", "\t"] {
        for (method, path) in [("POST", list.clone()), ("PATCH", format!("{list}/sub_1"))] {
            let r = s.manage(method, &path, Some(&json!({ "url": url })));
            assert_error(&r, 400, "invalid_webhook");
        }
    }
    let stored = s.manage("GET", &format!("{list}/sub_1"), None).json();
    assert_eq!(stored["url"], RECEIVER, "{stored}");
    assert_eq!(ids(&s.manage("GET", &list, None).json()), vec!["sub_1"]);
}

/// The egress check resolves the URL's host and names the address it refuses, which only
/// the owner may learn: the endpoint and the caller's right to change its subscriptions are
/// checked first. A collaborator, an unrelated account, and anyone naming an endpoint that
/// does not exist get the answer they get for any URL, with nothing about the address, on
/// the API and in the dashboard's forms.
#[test]
fn only_the_owner_learns_what_a_subscription_url_resolves_to() {
    let s = TestServer::start();
    let ep = s.create_endpoint("Subs", &[]);
    let other = s.create_endpoint("Other", &[]);
    subscribe(&s, &ep.slug, &json!({ "url": RECEIVER }));
    let member = add_collaborator(&s, &ep.slug, "member@example.com", &["create"]);
    let stranger = add_collaborator(&s, &other.slug, "stranger@example.com", &["read"]);
    // `localhost` resolves (through the hosts file) to loopback, which the rule refuses.
    let internal = "http://localhost:9/hook";
    let tells = |text: &str| {
        ["127.0.0.1", "::1", "not allowed", "egress"]
            .iter()
            .any(|t| text.contains(t))
    };
    let routes = |slug: &str| {
        let list = subscriptions_path(slug, "sandbox");
        let first = format!("/api/v1/manage/endpoints/{slug}/webhooks/sandbox");
        [
            ("POST", list.clone()),
            ("PATCH", format!("{list}/sub_1")),
            ("PUT", first.clone()),
            ("PATCH", first),
        ]
    };
    let missing = "no-such-endpoint-7k2m9x4q1w8p";
    for (who, caller, slug, want) in [
        (
            "create-only collaborator",
            &member,
            &ep.slug,
            (403, "owner_only"),
        ),
        (
            "unrelated account",
            &stranger,
            &ep.slug,
            (404, "endpoint_not_found"),
        ),
        (
            "collaborator, no such endpoint",
            &member,
            &missing.to_string(),
            (404, "endpoint_not_found"),
        ),
    ] {
        let cookie = format!("intake_session={}", caller.cookie);
        for (method, path) in routes(slug) {
            for url in [internal, RECEIVER] {
                let r = s.request_json(
                    method,
                    &path,
                    &[("Cookie", &cookie)],
                    Some(&json!({ "url": url })),
                );
                assert_eq!(
                    (r.status, r.error_code().as_deref()),
                    (want.0, Some(want.1)),
                    "{who}: {method} {path} {url}: {}",
                    r.describe()
                );
                assert!(
                    !tells(&r.text()),
                    "{who}: {method} {path}: {}",
                    r.describe()
                );
            }
        }
    }
    // The owner naming an endpoint that does not exist: 404 too, not the address.
    for (method, path) in routes(missing) {
        let r = s.manage(method, &path, Some(&json!({ "url": internal })));
        assert_error(&r, 404, "endpoint_not_found");
        assert!(!tells(&r.text()), "{method} {path}: {}", r.describe());
    }

    // The dashboard's forms: the collaborator's post is refused as owner-only, saying
    // nothing of the address.
    let mut v = common::visitor::Visitor::new(s.base_url(), &s.agent);
    let token = common::visitor::login(&mut v, "member@example.com", COLLABORATOR_PASSWORD);
    let base = format!(
        "/dashboard/endpoints/{}/webhooks/sandbox/subscriptions",
        ep.slug
    );
    for (path, fields) in [
        (
            base.clone(),
            vec![
                ("csrf", token.as_str()),
                ("url", internal),
                ("enabled", "true"),
            ],
        ),
        (
            format!("{base}/sub_1"),
            vec![
                ("csrf", token.as_str()),
                ("url", internal),
                ("enabled", "true"),
            ],
        ),
    ] {
        let r = v.post(&path, &fields, &[]);
        assert_eq!(r.status, 403, "{path}: {}", r.describe());
        assert!(r.text().contains("owner_only"), "{path}: {}", r.describe());
        assert!(!tells(&r.text()), "{path}: {}", r.describe());
    }

    // Nothing changed.
    let list = s
        .manage("GET", &subscriptions_path(&ep.slug, "sandbox"), None)
        .json();
    assert_eq!(ids(&list), vec!["sub_1"]);
    assert_eq!(list["data"][0]["url"], RECEIVER);
}

#[test]
fn a_test_event_is_logged_as_a_test_and_never_sent_again() {
    let s = InProcessServer::start(
        "[webhooks]\nallow_private_targets = true\n",
        SystemClock.now(),
    );
    let probe = Probe::new(&s);
    let ep = s.create_endpoint("Tested", &[]);
    let receiver = Receiver::start();
    receiver.always(common::receiver::Reply::status(503).body("down"));
    subscribe(&s, &ep.slug, &json!({ "url": receiver.url("/in") }));
    let sub = format!("{}/sub_1", subscriptions_path(&ep.slug, "sandbox"));
    let r = s.manage("POST", &format!("{sub}/test"), None);
    assert_status(&r, 200);
    let result = r.json();
    assert_eq!(result["delivered"], false);
    let id = result["delivery_id"].as_u64().expect("delivery_id");

    // In the log: a test, with its one attempt, given up (not a 2xx), its id the test's.
    let manage = format!("/api/v1/manage/endpoints/{}", ep.slug);
    let list = s
        .manage("GET", &format!("{manage}/deliveries"), None)
        .json();
    assert_eq!(list["data"].as_array().expect("data").len(), 1, "{list}");
    let listed = &list["data"][0];
    assert_eq!(listed["id"], id);
    assert_eq!(listed["test"], true);
    assert_eq!(listed["event"], "webhook.test");
    assert_eq!(listed["record_id"], result["webhook_id"]);
    assert_eq!(listed["subscription"], "sub_1");
    assert_eq!(
        (&listed["state"], &listed["attempts"]),
        (&json!("given_up"), &json!(1))
    );
    let detail = s
        .manage("GET", &format!("{manage}/deliveries/{id}"), None)
        .json();
    assert_eq!(detail["body"], result["request_body"]);
    let attempts = detail["attempt_log"].as_array().expect("attempt_log");
    assert_eq!(attempts.len(), 1, "{detail}");
    assert_eq!(
        (&attempts[0]["status"], &attempts[0]["response_body"]),
        (&json!(503), &json!("down"))
    );
    assert!(
        attempts[0]["request_headers"]
            .as_array()
            .expect("headers")
            .iter()
            .any(|h| h[0] == "webhook-signature" && h[1] == "[redacted]"),
        "{detail}"
    );

    // Never sent again: no retry, no redelivery; the subscription's health is untouched.
    assert_error(
        &s.manage("POST", &format!("{manage}/deliveries/{id}/redeliver"), None),
        409,
        "conflict",
    );
    s.clock.advance(Duration::from_secs(3600));
    probe.look(&s);
    assert_eq!(receiver.requests().len(), 1);
    let health = &s.manage("GET", &sub, None).json()["health"];
    assert_eq!(health["failing_since"], Value::Null, "{health}");
    assert_eq!(health["failed_attempts"], 0, "{health}");
}
