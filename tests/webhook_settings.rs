//! Webhook settings and the creation of deliveries, against the real binary:
//!
//! - the owner webhook per endpoint and environment (`PUT`, `GET`, `PATCH`, `DELETE
//!   /api/v1/manage/endpoints/{slug}/webhooks/{environment}`): validation, the auth value never
//!   shown again, who may change it;
//! - `X-Webhook-Callback` / `X-Webhook-Auth` / `X-Webhook-Auth-Header` on writes: validation
//!   before anything is written;
//! - every applied write creates its deliveries (owner and caller, independently) with the
//!   documented event body, listed in the delivery log per environment and per record.
//!
//! Receivers here are unreachable (`.invalid` host names never resolve): these tests are about
//! what is created and shown, not about sending (see `tests/webhooks.rs`).

use crate::common;

use common::*;
use serde_json::{Value, json};

const OWNER_URL: &str = "https://owner-receiver.invalid/hooks";
const CALLER_URL: &str = "https://caller-receiver.invalid/cb";

fn webhook_path(slug: &str, environment: &str) -> String {
    format!("/api/v1/manage/endpoints/{slug}/webhooks/{environment}")
}

fn deliveries(s: &TestServer, slug: &str, query: &str) -> Value {
    let r = s.manage(
        "GET",
        &format!("/api/v1/manage/endpoints/{slug}/deliveries?{query}"),
        None,
    );
    assert_status(&r, 200);
    r.json()
}

fn delivery_detail(s: &TestServer, slug: &str, id: &Value) -> Value {
    let r = s.manage(
        "GET",
        &format!("/api/v1/manage/endpoints/{slug}/deliveries/{id}"),
        None,
    );
    assert_status(&r, 200);
    r.json()
}

/// POST with extra headers; returns the response.
fn post_with(
    s: &TestServer,
    slug: &str,
    key: &str,
    payload: &Value,
    extra: &[(&str, &str)],
) -> Resp {
    let auth = format!("Bearer {key}");
    let mut headers = vec![
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
    ];
    headers.extend_from_slice(extra);
    let body = serde_json::to_vec(payload).expect("json");
    s.request(
        "POST",
        &format!("/api/v1/data/{slug}"),
        &headers,
        Some(&body),
    )
}

#[test]
fn owner_webhook_is_set_shown_without_its_secret_switched_and_removed() {
    let s = TestServer::start();
    let ep = s.create_endpoint("Hooks", &[]);
    let path = webhook_path(&ep.slug, "production");

    assert_error(&s.manage("GET", &path, None), 404, "webhook_not_found");
    let r = s.manage(
        "PUT",
        &path,
        Some(&json!({ "url": OWNER_URL, "auth_header": "X-Receiver-Key", "auth_value": "s3cret-value" })),
    );
    assert_status(&r, 200);
    let v = r.json();
    assert_eq!(v["url"], OWNER_URL);
    assert_eq!(v["environment"], "production");
    assert_eq!(v["auth_header"], "x-receiver-key");
    assert_eq!(v["auth_value_set"], true);
    assert_eq!(v["enabled"], true);
    assert!(!r.text().contains("s3cret-value"), "{}", r.text());
    let got = s.manage("GET", &path, None);
    assert_eq!(got.json(), v);
    assert!(!got.text().contains("s3cret-value"));
    // The sandbox has its own (none yet).
    assert_error(
        &s.manage("GET", &webhook_path(&ep.slug, "sandbox"), None),
        404,
        "webhook_not_found",
    );

    let r = s.manage("PATCH", &path, Some(&json!({ "enabled": false })));
    assert_status(&r, 200);
    assert_eq!(r.json()["enabled"], false);
    assert_eq!(
        r.json()["auth_value_set"],
        true,
        "switching keeps the auth value"
    );

    assert_status(&s.manage("DELETE", &path, None), 200);
    assert_error(&s.manage("GET", &path, None), 404, "webhook_not_found");
    assert_error(&s.manage("DELETE", &path, None), 404, "webhook_not_found");

    // Every change is audited, and the auth value is not in the audit log.
    let audit = s.manage(
        "GET",
        &format!("/api/v1/manage/endpoints/{}/audit", ep.slug),
        None,
    );
    let text = audit.text();
    for action in ["webhook.configured", "webhook.disabled", "webhook.removed"] {
        assert!(text.contains(action), "{action} missing: {text}");
    }
    assert!(!text.contains("s3cret-value"));
    assert!(
        !s.log.text().contains("s3cret-value"),
        "auth value in the server log"
    );
}

#[test]
fn owner_webhook_settings_are_validated_and_owner_only() {
    let s = TestServer::start();
    let ep = s.create_endpoint("Hooks", &[]);
    let path = webhook_path(&ep.slug, "sandbox");
    for (body, what) in [
        (json!({ "url": "ftp://example.com/x" }), "non-http scheme"),
        (json!({ "url": "/relative/path" }), "relative URL"),
        (json!({ "url": "not a url" }), "garbage"),
        (
            json!({ "url": OWNER_URL, "auth_header": "X-Key" }),
            "auth header without value",
        ),
        (
            json!({ "url": OWNER_URL, "auth_header": "webhook-signature", "auth_value": "v" }),
            "reserved header",
        ),
        (
            json!({ "url": OWNER_URL, "auth_header": "bad header", "auth_value": "v" }),
            "invalid header name",
        ),
        (
            json!({ "url": "https://user:s3cret@hooks.example.com/in" }),
            "credentials in the URL",
        ),
        (
            json!({ "url": OWNER_URL, "auth_header": "Connection", "auth_value": "v" }),
            "hop-by-hop header",
        ),
        (
            json!({ "url": OWNER_URL, "auth_header": "Proxy-Authorization", "auth_value": "v" }),
            "proxy header",
        ),
    ] {
        let r = s.manage("PUT", &path, Some(&body));
        assert_error(&r, 400, "invalid_webhook");
        let message = error_message(&r);
        assert!(!message.is_empty(), "{what}");
        assert!(!message.contains("s3cret"), "{what}: {message}");
        if what == "credentials in the URL" {
            assert!(message.contains("auth_value"), "{message}");
        }
        if what == "hop-by-hop header" {
            assert!(message.contains("`connection`"), "{message}");
        }
    }
    let r = s.manage("PUT", &path, Some(&json!({ "url": OWNER_URL, "extra": 1 })));
    assert_error(&r, 400, "invalid_request");
    assert_error(&s.manage("GET", &path, None), 404, "webhook_not_found");

    let r = s.manage(
        "PUT",
        &webhook_path(&ep.slug, "staging"),
        Some(&json!({ "url": OWNER_URL })),
    );
    assert_eq!(r.status, 400, "{}", r.describe());
    let r = s.manage_with("GET", &path, None, None);
    assert_error(&r, 401, "missing_token");
    let r = s.manage(
        "PUT",
        &webhook_path("no-such-endpoint", "sandbox"),
        Some(&json!({ "url": OWNER_URL })),
    );
    assert_error(&r, 404, "endpoint_not_found");
}

#[test]
fn caller_webhook_headers_are_validated_before_anything_is_written() {
    let s = TestServer::start();
    let ep = s.create_endpoint("Hooks", &[]);
    let cases: Vec<Vec<(&str, &str)>> = vec![
        vec![("X-Webhook-Callback", "not a url")],
        vec![("X-Webhook-Callback", "ftp://example.com/")],
        vec![("X-Webhook-Callback", "/relative")],
        vec![("X-Webhook-Auth", "token-without-callback")],
        vec![("X-Webhook-Auth-Header", "X-Key")],
        vec![
            ("X-Webhook-Callback", CALLER_URL),
            ("X-Webhook-Auth", "v"),
            ("X-Webhook-Auth-Header", "Content-Type"),
        ],
        vec![
            ("X-Webhook-Callback", CALLER_URL),
            ("X-Webhook-Auth", "v"),
            ("X-Webhook-Auth-Header", "bad header"),
        ],
        vec![(
            "X-Webhook-Callback",
            "https://user:s3cret@hooks.example.com/in",
        )],
    ];
    let hop_by_hop = [
        "Connection",
        "Keep-Alive",
        "Upgrade",
        "TE",
        "Trailer",
        "Expect",
        "Proxy-Authorization",
        "Proxy-Foo",
    ];
    let cases = cases.into_iter().chain(hop_by_hop.iter().map(|name| {
        vec![
            ("X-Webhook-Callback", CALLER_URL),
            ("X-Webhook-Auth", "v"),
            ("X-Webhook-Auth-Header", *name),
        ]
    }));
    for headers in cases {
        let r = post_with(&s, &ep.slug, &ep.sandbox_key, &json!({ "n": 1 }), &headers);
        assert_error(&r, 400, "invalid_webhook");
        let message = error_message(&r);
        assert!(!message.contains("s3cret"), "{message}");
        if let Some((_, name)) = headers.iter().find(|(h, _)| *h == "X-Webhook-Auth-Header")
            && hop_by_hop.contains(name)
        {
            let named = format!("`{}`", name.to_ascii_lowercase());
            assert!(message.contains(&named), "{headers:?}: {message}");
        }
        if headers[0].1.contains('@') {
            assert!(message.contains("X-Webhook-Auth"), "{message}");
        }
    }
    assert!(
        s.list_ids(&ep.slug, &ep.sandbox_key).is_empty(),
        "a refused write stored a record"
    );
    assert_eq!(deliveries(&s, &ep.slug, "")["data"], json!([]));
}

#[test]
fn writes_create_owner_and_caller_deliveries_with_the_event_body() {
    let s = TestServer::start();
    let ep = s.create_endpoint("Hooks", &[]);
    let r = s.manage(
        "PUT",
        &webhook_path(&ep.slug, "sandbox"),
        Some(&json!({ "url": OWNER_URL })),
    );
    assert_status(&r, 200);

    // A create with a caller webhook: one owner and one caller delivery.
    let r = post_with(
        &s,
        &ep.slug,
        &ep.sandbox_key,
        &json!({ "email": "a@example.com" }),
        &[
            ("X-Webhook-Callback", CALLER_URL),
            ("X-Webhook-Auth", "caller-secret"),
        ],
    );
    assert_status(&r, 202);
    let id = r.json()["id"].as_str().unwrap_or_default().to_string();
    let created_at = r.json()["created_at"].clone();

    // A replace and a delete without caller webhook: owner deliveries only.
    assert_status(
        &s.put_record(
            &ep.slug,
            &ep.sandbox_key,
            &id,
            &json!({ "email": "b@example.com" }),
        ),
        202,
    );
    assert_status(&s.delete_record(&ep.slug, &ep.sandbox_key, &id), 202);
    // A refused write creates nothing.
    assert_error(
        &s.delete_record(&ep.slug, &ep.sandbox_key, &id),
        404,
        "record_not_found",
    );

    let list = deliveries(&s, &ep.slug, "environment=sandbox");
    let data = list["data"].as_array().cloned().unwrap_or_default();
    assert_eq!(data.len(), 4, "{list}");
    // Newest first: delete, replace, then the create's two.
    let kinds: Vec<(&str, &str)> = data
        .iter()
        .map(|d| {
            (
                d["kind"].as_str().unwrap_or(""),
                d["url"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("owner", OWNER_URL),
            ("owner", OWNER_URL),
            ("caller", CALLER_URL),
            ("owner", OWNER_URL),
        ]
    );
    for d in &data {
        assert_eq!(d["record_id"], id.as_str());
        assert_eq!(d["max_attempts"], 4, "sandbox: 4 attempts");
    }
    let types: Vec<String> = data
        .iter()
        .map(|d| {
            let body: Value = serde_json::from_str(
                delivery_detail(&s, &ep.slug, &d["id"])["body"]
                    .as_str()
                    .unwrap_or("null"),
            )
            .unwrap_or(Value::Null);
            body["type"].as_str().unwrap_or("").to_string()
        })
        .collect();
    assert_eq!(
        types,
        [
            "record.deleted",
            "record.replaced",
            "record.created",
            "record.created"
        ]
    );

    let created = delivery_detail(&s, &ep.slug, &data[3]["id"]);
    let body: Value =
        serde_json::from_str(created["body"].as_str().unwrap_or("null")).expect("body is JSON");
    assert_eq!(
        body,
        json!({
            "type": "record.created",
            "timestamp": created_at,
            "data": {
                "id": id,
                "endpoint": ep.slug,
                "environment": "sandbox",
                "created_at": created_at,
                "payload": { "email": "a@example.com" },
            }
        })
    );
    let deleted = delivery_detail(&s, &ep.slug, &data[0]["id"]);
    let body: Value =
        serde_json::from_str(deleted["body"].as_str().unwrap_or("null")).expect("body is JSON");
    assert!(
        body["data"].get("payload").is_none(),
        "a delete carries no payload: {body}"
    );
    let replaced = delivery_detail(&s, &ep.slug, &data[1]["id"]);
    let body: Value =
        serde_json::from_str(replaced["body"].as_str().unwrap_or("null")).expect("body is JSON");
    assert_eq!(body["data"]["payload"], json!({ "email": "b@example.com" }));
    // The caller's auth value is a secret: never in a listing or the detail.
    assert!(
        !deliveries(&s, &ep.slug, "environment=sandbox")
            .to_string()
            .contains("caller-secret")
    );
    assert!(
        !delivery_detail(&s, &ep.slug, &data[2]["id"])
            .to_string()
            .contains("caller-secret")
    );

    // Production is separate: nothing there.
    assert_eq!(
        deliveries(&s, &ep.slug, "environment=production")["data"],
        json!([])
    );
}

#[test]
fn delivery_log_pages_filters_by_record_and_checks_ownership() {
    let s = TestServer::start();
    let ep = s.create_endpoint("Hooks", &[]);
    let other = s.create_endpoint("Other", &[]);
    let mut ids = Vec::new();
    for i in 0..5 {
        let r = post_with(
            &s,
            &ep.slug,
            &ep.sandbox_key,
            &json!({ "i": i }),
            &[("X-Webhook-Callback", CALLER_URL)],
        );
        assert_status(&r, 202);
        ids.push(r.json()["id"].as_str().unwrap_or_default().to_string());
    }
    // Pages of two, newest first, no repeats or gaps.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let query = match &cursor {
            Some(c) => format!("limit=2&cursor={}", url_encode(c)),
            None => "limit=2".to_string(),
        };
        let page = deliveries(&s, &ep.slug, &query);
        for d in page["data"].as_array().cloned().unwrap_or_default() {
            seen.push(d["record_id"].as_str().unwrap_or_default().to_string());
        }
        match page["pagination"]["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    let mut expected = ids.clone();
    expected.reverse();
    assert_eq!(seen, expected);

    // Per record.
    let one = deliveries(&s, &ep.slug, &format!("record_id={}", ids[2]));
    assert_eq!(one["data"].as_array().map(Vec::len), Some(1), "{one}");
    assert_eq!(one["data"][0]["record_id"], ids[2].as_str());
    let r = s.manage(
        "GET",
        &format!(
            "/api/v1/manage/endpoints/{}/deliveries?record_id=nope",
            ep.slug
        ),
        None,
    );
    assert_error(&r, 400, "invalid_record_id");
    // A cursor of another endpoint is refused.
    let page = deliveries(&s, &ep.slug, "limit=1");
    let c = page["pagination"]["next_cursor"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let r = s.manage(
        "GET",
        &format!(
            "/api/v1/manage/endpoints/{}/deliveries?cursor={}",
            other.slug,
            url_encode(&c)
        ),
        None,
    );
    assert_error(&r, 400, "invalid_parameter");
    // A delivery of one endpoint is not visible through another.
    let id = &page["data"][0]["id"];
    let r = s.manage(
        "GET",
        &format!("/api/v1/manage/endpoints/{}/deliveries/{id}", other.slug),
        None,
    );
    assert_error(&r, 404, "delivery_not_found");
    let r = s.manage(
        "GET",
        &format!("/api/v1/manage/endpoints/{}/deliveries/999999", ep.slug),
        None,
    );
    assert_error(&r, 404, "delivery_not_found");
    // Only given-up deliveries can be redelivered.
    let r = s.manage(
        "POST",
        &format!(
            "/api/v1/manage/endpoints/{}/deliveries/{id}/redeliver",
            ep.slug
        ),
        None,
    );
    assert_error(&r, 409, "conflict");
}

#[test]
fn disabled_owner_webhook_logs_skipped_deliveries_and_a_removed_one_none() {
    let s = TestServer::start();
    let ep = s.create_endpoint("Hooks", &[]);
    let path = webhook_path(&ep.slug, "sandbox");
    assert_status(
        &s.manage(
            "PUT",
            &path,
            Some(&json!({ "url": OWNER_URL, "enabled": false })),
        ),
        200,
    );
    s.create_record(&ep.slug, &ep.sandbox_key, &json!({ "n": 1 }));
    let states = |s: &TestServer| -> Vec<Value> {
        deliveries(s, &ep.slug, "")["data"]
            .as_array()
            .expect("data")
            .iter()
            .map(|d| d["state"].clone())
            .collect()
    };
    assert_eq!(states(&s), [json!("skipped")]);
    assert_status(
        &s.manage("PATCH", &path, Some(&json!({ "enabled": true }))),
        200,
    );
    s.create_record(&ep.slug, &ep.sandbox_key, &json!({ "n": 2 }));
    assert_eq!(states(&s).len(), 2);
    assert_eq!(states(&s)[1], json!("skipped"));
    assert_status(&s.manage("DELETE", &path, None), 200);
    s.create_record(&ep.slug, &ep.sandbox_key, &json!({ "n": 3 }));
    assert_eq!(states(&s).len(), 2);
}
