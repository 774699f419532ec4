//! The management API's logs: the request log's fields and filters, and the delivery log's
//! filters and "retry now".

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};

fn requests(s: &ServerClient, slug: &str, query: &str) -> Vec<Value> {
    let r = s.request_log(slug, query);
    assert_status(&r, 200);
    r.json()["data"].as_array().expect("data").clone()
}

fn request_ids(entries: &[Value]) -> Vec<&str> {
    entries
        .iter()
        .map(|e| e["request_id"].as_str().expect("request_id"))
        .collect()
}

#[test]
fn request_log_entries_name_code_message_client_and_holder_and_filter_by_them() {
    // The loopback peer is a trusted proxy, so the forwarded address is the client's.
    let s = TestServer::start_with_config("[http]\ntrusted_proxies = [\"127.0.0.1/32\"]\n");
    let ep = s.create_endpoint("orders", &[]);
    let slug = &ep.slug;
    let reader = add_collaborator(&s, slug, "reader@example.com", &["read"]);
    let path = format!("/api/v1/data/{slug}");
    let write = |key: &str, forwarded: Option<&str>| {
        let auth = format!("Bearer {key}");
        let mut headers = vec![
            ("Authorization", auth.as_str()),
            ("Content-Type", "application/json"),
        ];
        headers.extend(forwarded.map(|f| ("X-Forwarded-For", f)));
        s.request("POST", &path, &headers, Some(br#"{"secret-payload":"p4"}"#))
    };
    let refused = write(&reader.sandbox_key, Some("203.0.113.9"));
    assert_error(&refused, 403, "missing_permission_create");
    let refused_id = refused.json()["error"]["request_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(refused.request_id(), refused_id);
    let accepted = write(&ep.sandbox_key, None);
    assert_status(&accepted, 202);
    let read = s.list(slug, &reader.sandbox_key, "");
    assert_status(&read, 200);
    let unknown = write("tm_test_00000000000000000000000000000000", None);
    assert_error(&unknown, 401, "invalid_api_key");
    let all = [&refused, &accepted, &read, &unknown].map(|r| r.request_id());
    s.wait_request_log(slug, "sandbox", Duration::from_secs(10), |d| {
        all.iter().all(|id| request_ids(d).contains(&id.as_str()))
    });

    // The error response's request id finds its entry, with what explains it.
    let found = requests(&s, slug, &format!("request_id={refused_id}"));
    assert_eq!(request_ids(&found), [refused_id.as_str()]);
    let entry = &found[0];
    assert_eq!(entry["status"], 403);
    assert_eq!(entry["code"], "missing_permission_create");
    let message = entry["message"].as_str().unwrap();
    assert!(message.contains("`create` permission"), "{message}");
    assert!(!entry.to_string().contains("secret-payload"), "{entry}");
    assert_eq!(entry["client"], "203.0.113.9");
    assert_eq!(
        entry["holder"],
        json!({"kind": "collaborator", "account_id": reader.id, "email": "reader@example.com"})
    );
    assert!(entry["key_id"].as_str().unwrap().starts_with("key_"));

    let owner_call = &requests(&s, slug, &format!("request_id={}", accepted.request_id()))[0];
    assert_eq!(owner_call["code"], Value::Null);
    assert_eq!(owner_call["message"], Value::Null);
    assert_eq!(owner_call["client"], "127.0.0.1");
    assert_eq!(
        owner_call["holder"],
        json!({"kind": "owner", "account_id": null, "email": null})
    );
    let stranger = &requests(&s, slug, &format!("request_id={}", unknown.request_id()))[0];
    assert_eq!(stranger["code"], "invalid_api_key");
    assert_eq!(stranger["holder"], Value::Null);

    // Each filter, alone and together.
    let ids = |query: &str| -> Vec<String> {
        let mut ids: Vec<String> = request_ids(&requests(&s, slug, query))
            .into_iter()
            .map(str::to_string)
            .collect();
        ids.sort();
        ids
    };
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    assert_eq!(ids("code=missing_permission_create"), [refused_id.as_str()]);
    assert_eq!(ids("holder=owner"), [accepted.request_id()]);
    assert_eq!(
        ids(&format!("holder={}", reader.id)),
        sorted(vec![refused_id.clone(), read.request_id()])
    );
    assert_eq!(ids("method=GET"), [read.request_id()]);
    assert_eq!(
        ids("status=4xx&method=post"),
        sorted(vec![refused_id.clone(), unknown.request_id()])
    );
    assert_eq!(
        ids(&format!("holder={}&status=2xx", reader.id)),
        [read.request_id()]
    );
    let key_id = entry["key_id"].as_str().unwrap();
    assert_eq!(
        ids(&format!("key_id={key_id}")),
        sorted(vec![refused_id.clone(), read.request_id()])
    );
    assert!(ids("request_id=req_0000000000000000000000").is_empty());

    // A bad filter is a 400 naming the parameter.
    for query in [
        "status=9xx",
        "method=PATCH",
        "holder=someone",
        "code=Not-A-Code",
        "request_id=rec_1",
        "key_id=tm_test_abc",
    ] {
        let r = s.request_log(slug, query);
        assert_error(&r, 400, "invalid_parameter");
        let name = query.split('=').next().unwrap();
        assert!(error_message(&r).contains(name), "{query}: {}", r.text());
    }

    // A collaborator sees their own e-mail, and another collaborator's calls by account id
    // only (the collaborator list is the owner's).
    let other = add_collaborator(&s, slug, "other@example.com", &["read"]);
    let theirs = s.list(slug, &other.sandbox_key, "");
    assert_status(&theirs, 200);
    s.wait_request_log(slug, "sandbox", Duration::from_secs(10), |d| {
        request_ids(d).contains(&theirs.request_id().as_str())
    });
    let as_reader = |request_id: &str| -> Value {
        let cookie = format!("intake_session={}", reader.cookie);
        let r = s.request(
            "GET",
            &format!("/api/v1/manage/endpoints/{slug}/requests?request_id={request_id}"),
            &[("Cookie", cookie.as_str())],
            None,
        );
        assert_status(&r, 200);
        r.json()["data"][0]["holder"].clone()
    };
    assert_eq!(
        as_reader(&theirs.request_id()),
        json!({"kind": "collaborator", "account_id": other.id, "email": null})
    );
    assert_eq!(as_reader(&refused_id)["email"], "reader@example.com");
    assert_eq!(
        requests(&s, slug, &format!("request_id={}", theirs.request_id()))[0]["holder"]["email"],
        "other@example.com",
        "the owner sees every collaborator's"
    );

    // A removed collaborator's entries still name them: the holder was kept at log time.
    let r = s.manage(
        "DELETE",
        &format!(
            "/api/v1/manage/endpoints/{slug}/collaborators/{}",
            reader.id
        ),
        None,
    );
    assert_status(&r, 200);
    let after = &requests(&s, slug, &format!("request_id={refused_id}"))[0];
    assert_eq!(after["holder"]["email"], "reader@example.com");
}

#[test]
fn request_ids_carry_the_time_of_the_call_and_sort_by_it() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &[]);
    let first = s.list(&ep.slug, &ep.sandbox_key, "").request_id();
    let second = s.list(&ep.slug, &ep.sandbox_key, "").request_id();
    for id in [&first, &second] {
        assert!(id.starts_with("req_") && id.len() == 25, "{id}");
    }
    assert!(first < second, "{first} {second}");
}

fn deliveries(s: &ServerClient, slug: &str, query: &str) -> Vec<Value> {
    let r = s.manage(
        "GET",
        &format!("/api/v1/manage/endpoints/{slug}/deliveries?{query}"),
        None,
    );
    assert_status(&r, 200);
    r.json()["data"].as_array().expect("data").clone()
}

fn delivery_ids(list: &[Value]) -> Vec<u64> {
    list.iter().map(|d| d["id"].as_u64().expect("id")).collect()
}

/// The delivery once `done` holds for it, polling its detail (the dispatcher works on its own
/// threads); fails after 30 seconds.
fn wait_delivery(
    s: &ServerClient,
    slug: &str,
    id: u64,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
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
            return v;
        }
        assert!(std::time::Instant::now() < deadline, "{what}: {v}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

#[test]
fn deliveries_filter_by_state_kind_and_url_and_retry_now_attempts_a_failing_one_at_once() {
    use common::in_process::InProcessServer;
    use common::receiver::{Receiver, Reply};
    use intake::core::clock::{Clock, SystemClock};

    let s = InProcessServer::start(
        "[webhooks]\nallow_private_targets = true\n",
        SystemClock.now(),
    );
    let failing = Receiver::start();
    failing.always(Reply::status(503));
    let fine = Receiver::start();
    fine.always(Reply::status(204));
    let ep = s.create_endpoint("Orders", &[]);
    let slug = &ep.slug;
    let r = s.manage(
        "PUT",
        &format!("/api/v1/manage/endpoints/{slug}/webhooks/sandbox"),
        Some(&json!({ "url": failing.url("/Hooks/Failing") })),
    );
    assert_status(&r, 200);
    let auth = format!("Bearer {}", ep.sandbox_key);
    let callback = fine.url("/caller");
    let r = s.request(
        "POST",
        &format!("/api/v1/data/{slug}"),
        &[
            ("Authorization", auth.as_str()),
            ("Content-Type", "application/json"),
            ("X-Webhook-Callback", callback.as_str()),
        ],
        Some(br#"{"n":1}"#),
    );
    assert_status(&r, 202);
    let all = {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let all = deliveries(&s, slug, "environment=sandbox");
            if all.len() == 2 {
                break all;
            }
            assert!(std::time::Instant::now() < deadline, "{all:?}");
            std::thread::sleep(Duration::from_millis(25));
        }
    };
    let id_of = |kind: &str| {
        all.iter()
            .find(|d| d["kind"] == kind)
            .and_then(|d| d["id"].as_u64())
            .unwrap()
    };
    let (owner, caller) = (id_of("owner"), id_of("caller"));
    let first = wait_delivery(&s, slug, owner, "first attempt", |v| v["attempts"] == 1);
    wait_delivery(&s, slug, caller, "delivered", |v| v["state"] == "delivered");
    assert_eq!(first["state"], "pending");
    assert_eq!(first["failing"], true);
    assert_eq!(first["environment"], "sandbox");
    assert_eq!(first["max_attempts"], 4);
    let next = first["next_attempt_at"].as_str().unwrap().to_string();

    // Filters, alone and together.
    let ids = |query: &str| delivery_ids(&deliveries(&s, slug, query));
    assert_eq!(ids("state=failing"), [owner]);
    assert!(
        ids("state=pending").is_empty(),
        "none is waiting for a first attempt"
    );
    assert_eq!(ids("state=delivered"), [caller]);
    assert!(ids("state=given_up").is_empty());
    assert_eq!(ids("kind=caller"), [caller]);
    assert_eq!(ids("kind=owner&state=failing"), [owner]);
    assert!(ids("kind=owner&state=delivered").is_empty());
    assert_eq!(ids("url=hooks%2Ffailing"), [owner], "any case");
    assert_eq!(ids("url=%2Fcaller"), [caller]);
    assert!(ids("url=elsewhere.example").is_empty());
    assert!(ids("environment=production&state=failing").is_empty());
    for query in ["state=failed", "kind=subscription", "state=Pending"] {
        let r = s.manage(
            "GET",
            &format!("/api/v1/manage/endpoints/{slug}/deliveries?{query}"),
            None,
        );
        assert_error(&r, 400, "invalid_parameter");
    }

    // Retry now: due at once, by the server's clock, which does not move; the attempt comes
    // and counts against the same budget.
    let retry = format!("/api/v1/manage/endpoints/{slug}/deliveries/{owner}/retry");
    let r = s.manage("POST", &retry, None);
    assert_status(&r, 200);
    let now = s.clock.now().to_rfc3339();
    assert_eq!(r.json()["next_attempt_at"], now.as_str());
    assert_ne!(next, now);
    let second = wait_delivery(&s, slug, owner, "the retry", |v| v["attempts"] == 2);
    assert_eq!(second["max_attempts"], 4);
    assert_eq!(second["state"], "pending");
    assert_eq!(failing.requests().len(), 2);
    let log = second["attempt_log"].as_array().unwrap();
    assert_eq!(log[1]["started_at"], now.as_str());
    // The owner's action is in the audit log.
    let r = s.manage(
        "GET",
        &format!("/api/v1/manage/endpoints/{slug}/audit"),
        None,
    );
    assert_status(&r, 200);
    let audit = r.json()["data"].to_string();
    assert!(audit.contains("delivery.retried"), "{audit}");
    // Only a pending delivery can be retried; a delivered one is a conflict.
    let r = s.manage(
        "POST",
        &format!("/api/v1/manage/endpoints/{slug}/deliveries/{caller}/retry"),
        None,
    );
    assert_error(&r, 409, "conflict");
    let r = s.manage(
        "POST",
        &format!("/api/v1/manage/endpoints/{slug}/deliveries/999999/retry"),
        None,
    );
    assert_error(&r, 404, "delivery_not_found");
    // A collaborator may see the log but not retry.
    let dev = add_collaborator(&s, slug, "dev@example.com", &["read"]);
    let cookie = format!("intake_session={}", dev.cookie);
    let r = s.request(
        "POST",
        &retry,
        &[("Cookie", cookie.as_str()), ("Origin", &s.base_url())],
        None,
    );
    assert_error(&r, 403, "owner_only");
}

/// "Retry now" while an attempt is in flight (the receiver holds its answer 2 s) is not lost:
/// answered 200, it is honoured once that attempt fails, the next attempt due at once rather
/// than after the schedule's 30 s (which the server's clock, not moving here, never reaches).
#[test]
fn retry_now_while_an_attempt_is_in_flight_is_honoured_when_the_attempt_ends() {
    use common::in_process::InProcessServer;
    use common::receiver::{Receiver, Reply};
    use intake::core::clock::{Clock, SystemClock};

    let s = InProcessServer::start(
        "[webhooks]\nallow_private_targets = true\n",
        SystemClock.now(),
    );
    let receiver = Receiver::start();
    receiver.script([Reply::status(503).delay(Duration::from_secs(2))]);
    receiver.always(Reply::status(204));
    let ep = s.create_endpoint("Orders", &[]);
    let slug = &ep.slug;
    let r = s.manage(
        "PUT",
        &format!("/api/v1/manage/endpoints/{slug}/webhooks/sandbox"),
        Some(&json!({ "url": receiver.url("/slow") })),
    );
    assert_status(&r, 200);
    s.create_record(slug, &ep.sandbox_key, &json!({ "n": 1 }));
    let id = delivery_ids(&deliveries(&s, slug, "environment=sandbox"))[0];

    // The first attempt has reached the receiver, which holds its answer.
    receiver.wait_for(1, Duration::from_secs(30));
    let retry = format!("/api/v1/manage/endpoints/{slug}/deliveries/{id}/retry");
    let r = s.manage("POST", &retry, None);
    assert_status(&r, 200);
    assert_eq!(r.json()["attempts"], 0, "the attempt was still in flight");

    // The held attempt ends in 503; the retry asked meanwhile follows at once.
    receiver.wait_for(2, Duration::from_secs(10));
    let done = wait_delivery(&s, slug, id, "the honoured retry", |v| {
        v["state"] == "delivered"
    });
    assert_eq!(done["attempts"], 2, "{done}");
    let log = done["attempt_log"].as_array().unwrap();
    assert_eq!(log[0]["status"], 503);
    assert_eq!(log[0]["outcome"], "retry");
    assert_eq!(log[1]["status"], 204);
}
