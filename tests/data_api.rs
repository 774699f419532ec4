//! Data API: every operation and status code, both environments, ordering,
//! pagination, idempotency, check order, and "a refused request changes
//! nothing".

use crate::common;

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;
use intake::core::crypto::{hex, sha256};
use serde_json::{Value, json};

fn data_path(slug: &str) -> String {
    format!("/api/v1/data/{slug}")
}

fn record_path(slug: &str, id: &str) -> String {
    format!("/api/v1/data/{slug}/{id}")
}

/// POST with an explicit raw body and optional Content-Type.
fn post_raw(
    s: &TestServer,
    slug: &str,
    key: &str,
    content_type: Option<&str>,
    body: &[u8],
    extra: &[(&str, &str)],
) -> Resp {
    raw_call(
        s,
        "POST",
        &data_path(slug),
        key,
        content_type,
        Some(body),
        extra,
    )
}

fn raw_call(
    s: &TestServer,
    method: &str,
    path: &str,
    key: &str,
    content_type: Option<&str>,
    body: Option<&[u8]>,
    extra: &[(&str, &str)],
) -> Resp {
    let auth = format!("Bearer {key}");
    let mut h = vec![("Authorization", auth.as_str())];
    if let Some(ct) = content_type {
        h.push(("Content-Type", ct));
    }
    h.extend_from_slice(extra);
    s.request(method, path, &h, body)
}

/// A JSON object body of exactly `len` bytes: `{"p":"xxx..."}`.
fn json_body_of_len(len: usize) -> Vec<u8> {
    let overhead = br#"{"p":""}"#.len();
    assert!(len >= overhead);
    let mut v = br#"{"p":""#.to_vec();
    v.extend(std::iter::repeat_n(b'x', len - overhead));
    v.extend_from_slice(br#""}"#);
    assert_eq!(v.len(), len);
    v
}

fn ids_of(list: &[Value]) -> Vec<String> {
    list.iter()
        .map(|r| r["id"].as_str().expect("record id").to_string())
        .collect()
}

/// Asserts the listing is strictly newest first: (created_at, id) strictly
/// decreasing.
#[track_caller]
fn assert_strictly_newest_first(list: &[Value]) {
    for w in list.windows(2) {
        let a = (ts(&w[0]["created_at"]), w[0]["id"].as_str().unwrap());
        let b = (ts(&w[1]["created_at"]), w[1]["id"].as_str().unwrap());
        assert!(
            a > b,
            "list not strictly newest first (created_at desc, id desc): {} then {}",
            w[0],
            w[1]
        );
    }
}

// ---------------------------------------------------------------------------
// Create / read
// ---------------------------------------------------------------------------

#[test]
fn post_returns_202_with_record_id_created_at_and_status_accepted() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &[]);
    let r = s.post_record(&ep.slug, &ep.sandbox_key, &json!({"n": 1}));
    assert_status(&r, 202);
    assert!(!r.request_id().is_empty());
    let v = r.json();
    let id = v["id"].as_str().expect("id is a string");
    assert!(is_record_id(id), "malformed record id {id:?}");
    ts(&v["created_at"]);
    assert_eq!(v["status"], "accepted", "{v}");
}

#[test]
fn get_single_returns_exact_payload_and_timestamps() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &[]);
    let payload =
        json!({"name": "Ada", "n": 42, "nested": {"a": [1, 2.5, null, true]}, "u": "ünï"});
    let created = s.create_record(&ep.slug, &ep.sandbox_key, &payload);
    let id = created["id"].as_str().unwrap();
    let r = s.get_record(&ep.slug, &ep.sandbox_key, id);
    assert_status(&r, 200);
    let v = r.json();
    assert_eq!(v["id"], id);
    assert_eq!(v["payload"], payload);
    assert_eq!(ts(&v["created_at"]), ts(&created["created_at"]));
    ts(&v["updated_at"]);
}

#[test]
fn endpoint_without_required_fields_accepts_any_json() {
    let s = TestServer::start();
    let ep = s.create_endpoint("anything", &[]);
    for payload in [
        json!([1, 2, 3]),
        json!("just a string"),
        json!(12.5),
        json!(null),
        json!(true),
        json!({}),
        json!({"deep": {"deeper": {"deepest": [{"x": 1}]}}}),
    ] {
        let created = s.create_record(&ep.slug, &ep.sandbox_key, &payload);
        let got = s.expect_record(&ep.slug, &ep.sandbox_key, created["id"].as_str().unwrap());
        assert_eq!(got["payload"], payload);
    }
}

#[test]
fn get_unknown_well_formed_id_is_404_record_not_found() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &[]);
    let r = s.get_record(&ep.slug, &ep.sandbox_key, &unknown_record_id());
    assert_error(&r, 404, "record_not_found");
}

#[test]
fn malformed_record_ids_are_400_invalid_record_id_on_get_put_delete() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &[]);
    let real = s.create_record(&ep.slug, &ep.sandbox_key, &json!({"a": 0}))["id"]
        .as_str()
        .unwrap()
        .to_string();
    // A real id with one character swapped for `u` (not in the alphabet).
    let with_u = format!("{}u", &real[..real.len() - 1]);
    let all_u = format!("rec_{}", "u".repeat(26));
    let too_short = format!("rec_{}", "0".repeat(25));
    let too_long = format!("rec_{}", "0".repeat(27));
    let upper = real.to_ascii_uppercase();
    let wrong_prefix = format!("rex_{}", &real[4..]);
    for bad in [
        "rec_abc",
        "hello",
        with_u.as_str(),
        all_u.as_str(),
        too_short.as_str(),
        too_long.as_str(),
        upper.as_str(),
        wrong_prefix.as_str(),
    ] {
        let r = s.get_record(&ep.slug, &ep.sandbox_key, bad);
        assert_error(&r, 400, "invalid_record_id");
        let r = s.put_record(&ep.slug, &ep.sandbox_key, bad, &json!({"a": 1}));
        assert_error(&r, 400, "invalid_record_id");
        let r = s.delete_record(&ep.slug, &ep.sandbox_key, bad);
        assert_error(&r, 400, "invalid_record_id");
    }
    // The real record is untouched.
    assert_eq!(
        s.expect_record(&ep.slug, &ep.sandbox_key, &real)["payload"],
        json!({"a": 0})
    );
}

// ---------------------------------------------------------------------------
// List and pagination
// ---------------------------------------------------------------------------

#[test]
fn list_default_limit_is_10_newest_first_with_next_cursor() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &[]);
    let mut created = Vec::new();
    for i in 0..12 {
        created.push(s.create_record(&ep.slug, &ep.sandbox_key, &json!({"i": i})));
    }
    let r = s.list(&ep.slug, &ep.sandbox_key, "");
    assert_status(&r, 200);
    let v = r.json();
    let data = v["data"].as_array().expect("data array");
    assert_eq!(data.len(), 10, "default limit must be 10: {v}");
    assert!(
        v.pointer("/pagination/next_cursor")
            .and_then(Value::as_str)
            .is_some(),
        "next_cursor must be present when more records exist: {v}"
    );
    assert_strictly_newest_first(data);
    // Each listed record carries its payload.
    for rec in data {
        assert!(
            rec["payload"]["i"].is_i64(),
            "list entry lacks payload: {rec}"
        );
    }
}

#[test]
fn list_without_more_records_has_no_next_cursor() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &[]);
    let r = s.list(&ep.slug, &ep.sandbox_key, "");
    assert_status(&r, 200);
    let v = r.json();
    assert_eq!(v["data"], json!([]), "{v}");
    assert!(v.pointer("/pagination/next_cursor").is_none(), "{v}");
    for i in 0..3 {
        s.create_record(&ep.slug, &ep.sandbox_key, &json!({"i": i}));
    }
    let v = s.list(&ep.slug, &ep.sandbox_key, "limit=3").json();
    assert_eq!(v["data"].as_array().unwrap().len(), 3);
    assert!(
        v.pointer("/pagination/next_cursor").is_none(),
        "no next_cursor when exactly the last page is returned: {v}"
    );
}

#[test]
fn pagination_through_36_records_with_limit_30_and_7_has_no_gaps_or_duplicates() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &[]);
    let mut created: Vec<((i64, u32), String)> = Vec::new();
    for i in 0..36 {
        let v = s.create_record(&ep.slug, &ep.sandbox_key, &json!({"i": i}));
        created.push((ts(&v["created_at"]), v["id"].as_str().unwrap().to_string()));
    }
    // Expected order: created_at desc, then id desc.
    let mut expected = created.clone();
    expected.sort();
    expected.reverse();
    let expected_ids: Vec<String> = expected.into_iter().map(|(_, id)| id).collect();

    for (limit, pages) in [(30, 2), (7, 6)] {
        let (all, n_pages) = s.list_all(&ep.slug, &ep.sandbox_key, limit);
        let ids = ids_of(&all);
        let unique: HashSet<&String> = ids.iter().collect();
        assert_eq!(
            unique.len(),
            ids.len(),
            "duplicates with limit {limit}: {ids:?}"
        );
        assert_eq!(ids, expected_ids, "limit {limit}: wrong records or order");
        assert_eq!(n_pages, pages, "limit {limit}: page count");
        assert_strictly_newest_first(&all);
    }
}

#[test]
fn list_bad_limit_is_400_invalid_parameter_naming_limit() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &[]);
    for q in ["limit=0", "limit=31", "limit=x", "limit=-1", "limit="] {
        let r = s.list(&ep.slug, &ep.sandbox_key, q);
        assert_error(&r, 400, "invalid_parameter");
        assert!(
            error_message(&r).contains("limit"),
            "{q}: message must name the parameter: {}",
            r.text()
        );
    }
    for q in ["limit=1", "limit=30"] {
        assert_status(&s.list(&ep.slug, &ep.sandbox_key, q), 200);
    }
}

#[test]
fn garbage_or_foreign_cursor_is_400_invalid_parameter_naming_cursor() {
    let s = TestServer::start();
    let a = s.create_endpoint("a", &[]);
    let b = s.create_endpoint("b", &[]);
    s.deploy(&a.slug);
    for i in 0..3 {
        s.create_record(&a.slug, &a.sandbox_key, &json!({"i": i}));
        s.create_record(&a.slug, &a.production_key, &json!({"i": i}));
        s.create_record(&b.slug, &b.sandbox_key, &json!({"i": i}));
    }
    let cursor_of = |r: Resp| {
        r.json()
            .pointer("/pagination/next_cursor")
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no next_cursor: {}", r.text()))
            .to_string()
    };
    // Cursors of this endpoint's sandbox list work...
    let own = cursor_of(s.list(&a.slug, &a.sandbox_key, "limit=1"));
    let q = format!("limit=1&cursor={}", url_encode(&own));
    assert_status(&s.list(&a.slug, &a.sandbox_key, &q), 200);
    // ...but not those of another endpoint, the other environment, or the
    // request log.
    let other_endpoint = cursor_of(s.list(&b.slug, &b.sandbox_key, "limit=1"));
    let other_env = cursor_of(s.list(&a.slug, &a.production_key, "limit=1"));
    s.wait_request_log(&a.slug, "sandbox", Duration::from_secs(10), |d| {
        d.len() >= 3
    });
    let request_log = cursor_of(s.request_log(&a.slug, "environment=sandbox&limit=1"));
    let truncated = own[..own.len() - 2].to_string();
    let cases = [
        ("garbage", "garbage".to_string()),
        ("AAAA", "AAAA".to_string()),
        ("binary", "%00%01".to_string()),
        ("truncated", url_encode(&truncated)),
        ("another endpoint's", url_encode(&other_endpoint)),
        ("production's", url_encode(&other_env)),
        ("request log's", url_encode(&request_log)),
    ];
    for (what, cursor) in cases {
        let r = s.list(&a.slug, &a.sandbox_key, &format!("cursor={cursor}"));
        assert_eq!(r.status, 400, "{what} cursor: {}", r.describe());
        assert_error(&r, 400, "invalid_parameter");
        assert!(
            error_message(&r).contains("cursor"),
            "message must name the parameter: {}",
            r.text()
        );
    }
}

// ---------------------------------------------------------------------------
// PUT / DELETE
// ---------------------------------------------------------------------------

#[test]
fn put_replaces_payload_keeps_id_and_created_at_and_changes_updated_at() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &[]);
    let created = s.create_record(&ep.slug, &ep.sandbox_key, &json!({"a": 1, "b": 2}));
    let id = created["id"].as_str().unwrap();
    let before = s.expect_record(&ep.slug, &ep.sandbox_key, id);

    let r = s.put_record(&ep.slug, &ep.sandbox_key, id, &json!({"c": 3}));
    assert_status(&r, 202);
    let v = r.json();
    assert_eq!(v["id"], id, "{v}");
    assert_eq!(v["status"], "accepted", "{v}");

    let after = s.expect_record(&ep.slug, &ep.sandbox_key, id);
    assert_eq!(
        after["payload"],
        json!({"c": 3}),
        "PUT is a full replacement"
    );
    assert_eq!(after["id"], id);
    assert_eq!(ts(&after["created_at"]), ts(&before["created_at"]));
    assert!(
        ts(&after["updated_at"]) > ts(&before["updated_at"]),
        "updated_at must change: before {before} after {after}"
    );
    // The list shows the replaced payload too.
    let list = s.list(&ep.slug, &ep.sandbox_key, "").json();
    assert_eq!(list["data"][0]["id"], id);
    assert_eq!(list["data"][0]["payload"], json!({"c": 3}));
}

#[test]
fn put_unknown_id_is_404_record_not_found() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &[]);
    let r = s.put_record(
        &ep.slug,
        &ep.sandbox_key,
        &unknown_record_id(),
        &json!({"a": 1}),
    );
    assert_error(&r, 404, "record_not_found");
    assert!(
        s.list_ids(&ep.slug, &ep.sandbox_key).is_empty(),
        "PUT must not create"
    );
}

#[test]
fn delete_is_202_then_get_404_list_omits_and_second_delete_404() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &[]);
    let keep = s.create_record(&ep.slug, &ep.sandbox_key, &json!({"keep": true}));
    let gone = s.create_record(&ep.slug, &ep.sandbox_key, &json!({"keep": false}));
    let id = gone["id"].as_str().unwrap();

    let r = s.delete_record(&ep.slug, &ep.sandbox_key, id);
    assert_status(&r, 202);
    let v = r.json();
    assert_eq!(v["id"], id, "{v}");
    assert_eq!(v["status"], "accepted", "{v}");

    assert_error(
        &s.get_record(&ep.slug, &ep.sandbox_key, id),
        404,
        "record_not_found",
    );
    assert_eq!(
        s.list_ids(&ep.slug, &ep.sandbox_key),
        vec![keep["id"].as_str().unwrap().to_string()]
    );
    assert_error(
        &s.delete_record(&ep.slug, &ep.sandbox_key, id),
        404,
        "record_not_found",
    );
    assert_error(
        &s.put_record(&ep.slug, &ep.sandbox_key, id, &json!({"x": 1})),
        404,
        "record_not_found",
    );
}

// ---------------------------------------------------------------------------
// Environments
// ---------------------------------------------------------------------------

#[test]
fn production_key_before_deploy_is_403_endpoint_not_deployed_on_every_method() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &[]);
    let sandbox = s.create_record(&ep.slug, &ep.sandbox_key, &json!({"a": 1}));
    let id = sandbox["id"].as_str().unwrap();
    let live = &ep.production_key;
    assert_error(
        &s.post_record(&ep.slug, live, &json!({"a": 2})),
        403,
        "endpoint_not_deployed",
    );
    assert_error(&s.list(&ep.slug, live, ""), 403, "endpoint_not_deployed");
    assert_error(
        &s.get_record(&ep.slug, live, id),
        403,
        "endpoint_not_deployed",
    );
    assert_error(
        &s.get_record(&ep.slug, live, &unknown_record_id()),
        403,
        "endpoint_not_deployed",
    );
    assert_error(
        &s.put_record(&ep.slug, live, id, &json!({"a": 3})),
        403,
        "endpoint_not_deployed",
    );
    assert_error(
        &s.delete_record(&ep.slug, live, id),
        403,
        "endpoint_not_deployed",
    );
    // Nothing changed in sandbox.
    assert_eq!(s.list_ids(&ep.slug, &ep.sandbox_key), vec![id.to_string()]);
    assert_eq!(
        s.expect_record(&ep.slug, &ep.sandbox_key, id)["payload"],
        json!({"a": 1})
    );
}

#[test]
fn production_after_deploy_works_and_never_mixes_with_sandbox() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &[]);
    let sb = s.create_record(&ep.slug, &ep.sandbox_key, &json!({"env": "sandbox"}));
    let sb_id = sb["id"].as_str().unwrap().to_string();
    s.deploy(&ep.slug);
    let live = &ep.production_key;

    let pr = s.create_record(&ep.slug, live, &json!({"env": "production"}));
    let pr_id = pr["id"].as_str().unwrap().to_string();
    assert!(is_record_id(&pr_id));
    assert_eq!(
        s.expect_record(&ep.slug, live, &pr_id)["payload"],
        json!({"env": "production"})
    );

    assert_eq!(s.list_ids(&ep.slug, live), vec![pr_id.clone()]);
    assert_eq!(s.list_ids(&ep.slug, &ep.sandbox_key), vec![sb_id.clone()]);

    // Cross-environment access by id is a 404 for every method.
    assert_error(
        &s.get_record(&ep.slug, live, &sb_id),
        404,
        "record_not_found",
    );
    assert_error(
        &s.get_record(&ep.slug, &ep.sandbox_key, &pr_id),
        404,
        "record_not_found",
    );
    assert_error(
        &s.put_record(&ep.slug, live, &sb_id, &json!({"x": 1})),
        404,
        "record_not_found",
    );
    assert_error(
        &s.delete_record(&ep.slug, live, &sb_id),
        404,
        "record_not_found",
    );
    assert_error(
        &s.delete_record(&ep.slug, &ep.sandbox_key, &pr_id),
        404,
        "record_not_found",
    );

    // PUT and DELETE work in production.
    assert_status(
        &s.put_record(&ep.slug, live, &pr_id, &json!({"env": "prod2"})),
        202,
    );
    assert_eq!(
        s.expect_record(&ep.slug, live, &pr_id)["payload"],
        json!({"env": "prod2"})
    );
    assert_status(&s.delete_record(&ep.slug, live, &pr_id), 202);
    assert_error(
        &s.get_record(&ep.slug, live, &pr_id),
        404,
        "record_not_found",
    );
    // Sandbox record untouched by all of this.
    assert_eq!(
        s.expect_record(&ep.slug, &ep.sandbox_key, &sb_id)["payload"],
        json!({"env": "sandbox"})
    );
}

#[test]
fn inactive_endpoint_is_403_endpoint_inactive_until_reactivated() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &[]);
    let rec = s.create_record(&ep.slug, &ep.sandbox_key, &json!({"a": 1}));
    let id = rec["id"].as_str().unwrap();
    s.deploy(&ep.slug);
    let patched = s.patch_endpoint(&ep.slug, &json!({"active": false}));
    assert_eq!(patched["active"], false);
    for key in [&ep.sandbox_key, &ep.production_key] {
        assert_error(
            &s.post_record(&ep.slug, key, &json!({"a": 2})),
            403,
            "endpoint_inactive",
        );
        assert_error(&s.list(&ep.slug, key, ""), 403, "endpoint_inactive");
        assert_error(&s.get_record(&ep.slug, key, id), 403, "endpoint_inactive");
        assert_error(
            &s.put_record(&ep.slug, key, id, &json!({"a": 3})),
            403,
            "endpoint_inactive",
        );
        assert_error(
            &s.delete_record(&ep.slug, key, id),
            403,
            "endpoint_inactive",
        );
    }
    s.patch_endpoint(&ep.slug, &json!({"active": true}));
    assert_eq!(s.list_ids(&ep.slug, &ep.sandbox_key), vec![id.to_string()]);
    assert_eq!(
        s.expect_record(&ep.slug, &ep.sandbox_key, id)["payload"],
        json!({"a": 1})
    );
}

// ---------------------------------------------------------------------------
// Authentication and routing
// ---------------------------------------------------------------------------

#[test]
fn missing_or_malformed_authorization_is_401_missing_api_key() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &[]);
    let path = data_path(&ep.slug);
    let body = br#"{"a":1}"#.as_slice();
    let ct = ("Content-Type", "application/json");
    let r = s.request("POST", &path, &[ct], Some(body));
    assert_error(&r, 401, "missing_api_key");
    let r = s.request("GET", &path, &[], None);
    assert_error(&r, 401, "missing_api_key");
    let basic = "Basic dXNlcjpwYXNz".to_string();
    let bare_key = ep.sandbox_key.clone();
    for auth in [basic.as_str(), "Bearer", "Bearer ", bare_key.as_str()] {
        let r = s.request("POST", &path, &[("Authorization", auth), ct], Some(body));
        assert_error(&r, 401, "missing_api_key");
    }
    assert!(s.list_ids(&ep.slug, &ep.sandbox_key).is_empty());
}

#[test]
fn unknown_key_is_401_invalid_api_key() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &[]);
    let owner = s.owner_token.clone();
    let fake_test = format!("{}x", ep.sandbox_key);
    for key in [
        "tm_test_doesnotexist",
        "tm_live_doesnotexist",
        "nonsense",
        fake_test.as_str(),
        owner.as_str(),
    ] {
        assert_error(
            &s.post_record(&ep.slug, key, &json!({"a": 1})),
            401,
            "invalid_api_key",
        );
        assert_error(&s.list(&ep.slug, key, ""), 401, "invalid_api_key");
    }
}

#[test]
fn unknown_slug_or_key_of_another_endpoint_is_404_endpoint_not_found() {
    let s = TestServer::start();
    let a = s.create_endpoint("a", &[]);
    let b = s.create_endpoint("b", &[]);
    let rec = s.create_record(&b.slug, &b.sandbox_key, &json!({"b": 1}));
    let b_id = rec["id"].as_str().unwrap();
    assert_error(
        &s.post_record("no-such-slug", &a.sandbox_key, &json!({})),
        404,
        "endpoint_not_found",
    );
    assert_error(
        &s.list("no-such-slug", &a.sandbox_key, ""),
        404,
        "endpoint_not_found",
    );
    // A's key on B's slug.
    assert_error(
        &s.post_record(&b.slug, &a.sandbox_key, &json!({})),
        404,
        "endpoint_not_found",
    );
    assert_error(
        &s.list(&b.slug, &a.sandbox_key, ""),
        404,
        "endpoint_not_found",
    );
    assert_error(
        &s.get_record(&b.slug, &a.sandbox_key, b_id),
        404,
        "endpoint_not_found",
    );
    assert_error(
        &s.put_record(&b.slug, &a.sandbox_key, b_id, &json!({})),
        404,
        "endpoint_not_found",
    );
    assert_error(
        &s.delete_record(&b.slug, &a.sandbox_key, b_id),
        404,
        "endpoint_not_found",
    );
    assert_eq!(s.list_ids(&b.slug, &b.sandbox_key), vec![b_id.to_string()]);
    assert!(s.list_ids(&a.slug, &a.sandbox_key).is_empty());
}

#[test]
fn unknown_route_is_404_and_wrong_method_is_405_with_allow_header() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &[]);
    let rec = s.create_record(&ep.slug, &ep.sandbox_key, &json!({"a": 1}));
    let id = rec["id"].as_str().unwrap();
    for path in [
        "/",
        "/api/v1/nope",
        "/api/v2/data/x",
        &format!("/api/v1/data/{}/{id}/extra", ep.slug),
    ] {
        let r = s.data("GET", path, &ep.sandbox_key, None);
        assert_error(&r, 404, "route_not_found");
    }
    let cases: [(&str, String, &[&str]); 3] = [
        ("PATCH", data_path(&ep.slug), &["GET", "POST"]),
        ("DELETE", data_path(&ep.slug), &["GET", "POST"]),
        ("POST", record_path(&ep.slug, id), &["GET", "PUT", "DELETE"]),
    ];
    for (method, path, allowed) in cases {
        // Route check comes first: no Authorization header still gives 405.
        let r = s.request(method, &path, &[], None);
        assert_error(&r, 405, "method_not_allowed");
        let allow = r
            .header("allow")
            .unwrap_or_else(|| panic!("405 without Allow header: {:?}", r.headers))
            .to_ascii_uppercase();
        for m in allowed {
            assert!(
                allow.contains(m),
                "{method} {path}: Allow {allow:?} lacks {m}"
            );
        }
    }
    assert_eq!(s.list_ids(&ep.slug, &ep.sandbox_key), vec![id.to_string()]);
}

// ---------------------------------------------------------------------------
// Body validation
// ---------------------------------------------------------------------------

#[test]
fn non_json_content_type_is_415_unsupported_media_type() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &[]);
    let body = br#"{"a":1}"#;
    for ct in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        Some("application/xml"),
        None,
    ] {
        let r = post_raw(&s, &ep.slug, &ep.sandbox_key, ct, body, &[]);
        assert_error(&r, 415, "unsupported_media_type");
    }
    let rec = s.create_record(&ep.slug, &ep.sandbox_key, &json!({"a": 1}));
    let id = rec["id"].as_str().unwrap();
    let r = raw_call(
        &s,
        "PUT",
        &record_path(&ep.slug, id),
        &ep.sandbox_key,
        Some("text/plain"),
        Some(body),
        &[],
    );
    assert_error(&r, 415, "unsupported_media_type");
    assert_eq!(s.list_ids(&ep.slug, &ep.sandbox_key), vec![id.to_string()]);
}

#[test]
fn json_content_type_with_charset_parameter_is_accepted() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &[]);
    let r = post_raw(
        &s,
        &ep.slug,
        &ep.sandbox_key,
        Some("application/json; charset=utf-8"),
        br#"{"a":1}"#,
        &[],
    );
    assert_status(&r, 202);
}

#[test]
fn invalid_json_is_400_invalid_json() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &[]);
    let bodies: [&[u8]; 5] = [
        b"{\"a\":",
        b"",
        b"not json",
        b"{\"a\":1} trailing",
        b"\xff\xfe{}",
    ];
    for body in bodies {
        let r = post_raw(
            &s,
            &ep.slug,
            &ep.sandbox_key,
            Some("application/json"),
            body,
            &[],
        );
        assert_error(&r, 400, "invalid_json");
    }
    let rec = s.create_record(&ep.slug, &ep.sandbox_key, &json!({"a": 1}));
    let id = rec["id"].as_str().unwrap();
    let r = raw_call(
        &s,
        "PUT",
        &record_path(&ep.slug, id),
        &ep.sandbox_key,
        Some("application/json"),
        Some(b"{oops"),
        &[],
    );
    assert_error(&r, 400, "invalid_json");
    assert_eq!(
        s.expect_record(&ep.slug, &ep.sandbox_key, id)["payload"],
        json!({"a": 1})
    );
    assert_eq!(s.list_ids(&ep.slug, &ep.sandbox_key), vec![id.to_string()]);
}

#[test]
fn body_of_exactly_102400_bytes_is_accepted_and_one_more_byte_is_413() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &[]);
    let ok = json_body_of_len(BODY_LIMIT);
    let r = post_raw(
        &s,
        &ep.slug,
        &ep.sandbox_key,
        Some("application/json"),
        &ok,
        &[],
    );
    assert_status(&r, 202);
    let id = r.json()["id"].as_str().unwrap().to_string();
    let got = s.expect_record(&ep.slug, &ep.sandbox_key, &id);
    assert_eq!(got["payload"]["p"].as_str().unwrap().len(), BODY_LIMIT - 8);

    let too_big = json_body_of_len(BODY_LIMIT + 1);
    let r = post_raw(
        &s,
        &ep.slug,
        &ep.sandbox_key,
        Some("application/json"),
        &too_big,
        &[],
    );
    assert_error(&r, 413, "payload_too_large");
    let r = raw_call(
        &s,
        "PUT",
        &record_path(&ep.slug, &id),
        &ep.sandbox_key,
        Some("application/json"),
        Some(&too_big),
        &[],
    );
    assert_error(&r, 413, "payload_too_large");
    assert_eq!(s.list_ids(&ep.slug, &ep.sandbox_key), vec![id.clone()]);
    let got = s.expect_record(&ep.slug, &ep.sandbox_key, &id);
    assert_eq!(
        got["payload"]["p"].as_str().unwrap().len(),
        BODY_LIMIT - 8,
        "refused PUT changed the record"
    );
}

#[test]
fn huge_declared_content_length_gets_413_without_sending_the_body() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &[]);
    let req = format!(
        "POST /api/v1/data/{} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: 10000000\r\n\r\n",
        ep.slug,
        s.addr(),
        ep.sandbox_key
    );
    let (r, elapsed) = raw_exchange(s.addr(), req.as_bytes(), Duration::from_secs(5));
    assert_error(&r, 413, "payload_too_large");
    assert!(elapsed < Duration::from_secs(3), "413 took {elapsed:?}");
    assert!(s.list_ids(&ep.slug, &ep.sandbox_key).is_empty());
}

// ---------------------------------------------------------------------------
// Required fields
// ---------------------------------------------------------------------------

#[test]
fn missing_required_field_is_400_naming_the_field() {
    let s = TestServer::start();
    let ep = s.create_endpoint("signups", &["email", "name"]);
    let r = s.post_record(&ep.slug, &ep.sandbox_key, &json!({"name": "Ada"}));
    assert_error(&r, 400, "missing_required_field");
    assert!(
        error_message(&r).contains("email"),
        "message must name the field: {}",
        r.text()
    );
    let r = s.post_record(&ep.slug, &ep.sandbox_key, &json!({"email": "a@b.c"}));
    assert_error(&r, 400, "missing_required_field");
    assert!(
        error_message(&r).contains("name"),
        "message must name the field: {}",
        r.text()
    );
    assert!(s.list_ids(&ep.slug, &ep.sandbox_key).is_empty());
}

#[test]
fn null_required_field_is_400_missing_required_field() {
    let s = TestServer::start();
    let ep = s.create_endpoint("signups", &["email"]);
    let r = s.post_record(&ep.slug, &ep.sandbox_key, &json!({"email": null}));
    assert_error(&r, 400, "missing_required_field");
    assert!(error_message(&r).contains("email"), "{}", r.text());
    assert!(s.list_ids(&ep.slug, &ep.sandbox_key).is_empty());
}

#[test]
fn required_fields_allow_extra_fields() {
    let s = TestServer::start();
    let ep = s.create_endpoint("signups", &["email"]);
    let payload = json!({"email": "a@b.c", "extra": [1, 2], "more": {"x": null}});
    let created = s.create_record(&ep.slug, &ep.sandbox_key, &payload);
    let got = s.expect_record(&ep.slug, &ep.sandbox_key, created["id"].as_str().unwrap());
    assert_eq!(got["payload"], payload);
    // Falsy-but-present values are present.
    for v in [json!(""), json!(0), json!(false), json!([]), json!({})] {
        s.create_record(&ep.slug, &ep.sandbox_key, &json!({"email": v}));
    }
}

#[test]
fn required_fields_reject_non_object_payload_with_400() {
    let s = TestServer::start();
    let ep = s.create_endpoint("signups", &["email"]);
    for payload in [json!(["email"]), json!("email"), json!(42), json!(null)] {
        let r = s.post_record(&ep.slug, &ep.sandbox_key, &payload);
        assert_eq!(r.status, 400, "{payload}: {}", r.describe());
        let code = r.error_code().unwrap_or_default();
        assert!(
            code == "missing_required_field" || code == "invalid_json",
            "{payload}: unexpected code {}",
            r.text()
        );
        assert_error(&r, 400, &code);
    }
    assert!(s.list_ids(&ep.slug, &ep.sandbox_key).is_empty());
}

#[test]
fn put_enforces_required_fields_and_a_refused_put_changes_nothing() {
    let s = TestServer::start();
    let ep = s.create_endpoint("signups", &["email"]);
    let created = s.create_record(&ep.slug, &ep.sandbox_key, &json!({"email": "a@b.c"}));
    let id = created["id"].as_str().unwrap();
    let before = s.expect_record(&ep.slug, &ep.sandbox_key, id);
    let r = s.put_record(&ep.slug, &ep.sandbox_key, id, &json!({"name": "no email"}));
    assert_error(&r, 400, "missing_required_field");
    assert_eq!(s.expect_record(&ep.slug, &ep.sandbox_key, id), before);
}

#[test]
fn required_fields_added_later_apply_to_new_writes() {
    let s = TestServer::start();
    let ep = s.create_endpoint("signups", &[]);
    s.create_record(&ep.slug, &ep.sandbox_key, &json!({"x": 1}));
    s.patch_endpoint(&ep.slug, &json!({"required_fields": ["email"]}));
    let r = s.post_record(&ep.slug, &ep.sandbox_key, &json!({"x": 2}));
    assert_error(&r, 400, "missing_required_field");
    s.create_record(&ep.slug, &ep.sandbox_key, &json!({"email": "e"}));
    assert_eq!(s.list_ids(&ep.slug, &ep.sandbox_key).len(), 2);
}

// ---------------------------------------------------------------------------
// Idempotency
// ---------------------------------------------------------------------------

#[test]
fn idempotent_retry_returns_identical_202_and_creates_nothing() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &[]);
    let body = br#"{"order":1}"#;
    let key = [("Idempotency-Key", "order-1")];
    let first = post_raw(
        &s,
        &ep.slug,
        &ep.sandbox_key,
        Some("application/json"),
        body,
        &key,
    );
    assert_status(&first, 202);
    let second = post_raw(
        &s,
        &ep.slug,
        &ep.sandbox_key,
        Some("application/json"),
        body,
        &key,
    );
    assert_status(&second, 202);
    assert_eq!(
        first.json(),
        second.json(),
        "retry must return the identical body"
    );
    let id = first.json()["id"].as_str().unwrap().to_string();
    assert_eq!(s.list_ids(&ep.slug, &ep.sandbox_key), vec![id]);
    // A different key creates a new record.
    let other = post_raw(
        &s,
        &ep.slug,
        &ep.sandbox_key,
        Some("application/json"),
        body,
        &[("Idempotency-Key", "order-2")],
    );
    assert_status(&other, 202);
    assert_ne!(other.json()["id"], first.json()["id"]);
    assert_eq!(s.list_ids(&ep.slug, &ep.sandbox_key).len(), 2);
}

#[test]
fn same_idempotency_key_with_different_body_is_409_conflict() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &[]);
    let key = [("Idempotency-Key", "k-1")];
    let first = post_raw(
        &s,
        &ep.slug,
        &ep.sandbox_key,
        Some("application/json"),
        br#"{"n":1}"#,
        &key,
    );
    assert_status(&first, 202);
    let r = post_raw(
        &s,
        &ep.slug,
        &ep.sandbox_key,
        Some("application/json"),
        br#"{"n":2}"#,
        &key,
    );
    assert_error(&r, 409, "idempotency_key_conflict");
    let id = first.json()["id"].as_str().unwrap().to_string();
    assert_eq!(s.list_ids(&ep.slug, &ep.sandbox_key), vec![id.clone()]);
    assert_eq!(
        s.expect_record(&ep.slug, &ep.sandbox_key, &id)["payload"],
        json!({"n": 1})
    );
}

#[test]
fn an_idempotency_claim_keeps_a_keyed_hash_of_the_payload_not_a_plain_one() {
    if redb_only("it reads intake.redb") {
        return;
    }
    // A plain hash of a guessable payload (an e-mail address) would betray it after its
    // record is erased; the claim keeps a hash only the data dir's key can reproduce.
    let mut s = TestServer::start();
    let ep = s.create_endpoint("signups", &[]);
    let body = br#"{"email":"ann@example.com"}"#;
    let key = [("Idempotency-Key", "signup-ann")];
    let post = |s: &TestServer| {
        post_raw(
            s,
            &ep.slug,
            &ep.sandbox_key,
            Some("application/json"),
            body,
            &key,
        )
    };
    let first = post(&s);
    assert_status(&first, 202);
    assert!(s.sigterm_and_wait().success());
    let file = std::fs::read(s.data_dir().join("intake.redb")).unwrap();
    let holds = |needle: &[u8]| file.windows(needle.len()).any(|w| w == needle);
    // The body is already normalised: it is the payload the claim was made for.
    let plain = hex(&sha256(body));
    assert!(!holds(plain.as_bytes()), "the plain SHA-256 of the payload");
    assert!(holds(br#""payload_hash":"k1:"#), "the claim's keyed hash");
    s.restart();
    let retry = post(&s);
    assert_status(&retry, 202);
    assert_eq!(retry.json(), first.json(), "the retry answers the original");
    let id = first.json()["id"].as_str().unwrap().to_string();
    assert_eq!(s.list_ids(&ep.slug, &ep.sandbox_key), vec![id]);
}

#[test]
fn idempotency_key_length_must_be_1_to_255() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &[]);
    let long = "k".repeat(256);
    let max = "k".repeat(255);
    for bad in ["", long.as_str()] {
        let r = post_raw(
            &s,
            &ep.slug,
            &ep.sandbox_key,
            Some("application/json"),
            b"{}",
            &[("Idempotency-Key", bad)],
        );
        assert_error(&r, 400, "invalid_idempotency_key");
    }
    assert!(s.list_ids(&ep.slug, &ep.sandbox_key).is_empty());
    let r = post_raw(
        &s,
        &ep.slug,
        &ep.sandbox_key,
        Some("application/json"),
        b"{}",
        &[("Idempotency-Key", max.as_str())],
    );
    assert_status(&r, 202);
}

// ---------------------------------------------------------------------------
// Check order
// ---------------------------------------------------------------------------

#[test]
fn check_order_follows_the_documented_sequence() {
    let s = TestServer::start();
    let ep = s.create_endpoint("signups", &["email"]);
    let other = s.create_endpoint("other", &[]);
    let inactive = s.create_endpoint("inactive", &[]);
    s.patch_endpoint(&inactive.slug, &json!({"active": false}));
    let huge = json_body_of_len(BODY_LIMIT + 1);
    let huge_invalid = {
        let mut v = vec![b'{'; BODY_LIMIT + 10];
        v[0] = b'[';
        v
    };
    let json_ct = Some("application/json");
    let text_ct = Some("text/plain");

    // Route before auth.
    let r = s.request("PATCH", &data_path("no-such-slug"), &[], None);
    assert_error(&r, 405, "method_not_allowed");
    // Authorization present before slug.
    let r = s.request(
        "POST",
        &data_path("no-such-slug"),
        &[("Content-Type", "text/plain")],
        Some(b"x"),
    );
    assert_error(&r, 401, "missing_api_key");
    // Key known before content type / slug.
    let r = post_raw(&s, &ep.slug, "tm_test_bogus", text_ct, b"x", &[]);
    assert_error(&r, 401, "invalid_api_key");
    let r = post_raw(&s, "no-such-slug", "tm_test_bogus", json_ct, b"{}", &[]);
    assert_error(&r, 401, "invalid_api_key");
    // Slug before active / content type / record id.
    let r = post_raw(&s, &ep.slug, &other.sandbox_key, text_ct, b"x", &[]);
    assert_error(&r, 404, "endpoint_not_found");
    let r = raw_call(
        &s,
        "GET",
        &record_path(&ep.slug, "hello"),
        &other.sandbox_key,
        None,
        None,
        &[],
    );
    assert_error(&r, 404, "endpoint_not_found");
    // Active before deployment / record id / content type.
    let r = post_raw(
        &s,
        &inactive.slug,
        &inactive.production_key,
        text_ct,
        b"x",
        &[],
    );
    assert_error(&r, 403, "endpoint_inactive");
    let r = raw_call(
        &s,
        "GET",
        &record_path(&inactive.slug, "hello"),
        &inactive.sandbox_key,
        None,
        None,
        &[],
    );
    assert_error(&r, 403, "endpoint_inactive");
    // Deployment before record id / content type / JSON.
    let r = raw_call(
        &s,
        "PUT",
        &record_path(&ep.slug, "hello"),
        &ep.production_key,
        text_ct,
        Some(b"x"),
        &[],
    );
    assert_error(&r, 403, "endpoint_not_deployed");
    let r = post_raw(&s, &ep.slug, &ep.production_key, json_ct, b"{oops", &[]);
    assert_error(&r, 403, "endpoint_not_deployed");
    // Record id before content type / size.
    let r = raw_call(
        &s,
        "PUT",
        &record_path(&ep.slug, "hello"),
        &ep.sandbox_key,
        text_ct,
        Some(&huge),
        &[],
    );
    assert_error(&r, 400, "invalid_record_id");
    // Content type before size.
    let r = post_raw(&s, &ep.slug, &ep.sandbox_key, text_ct, &huge, &[]);
    assert_error(&r, 415, "unsupported_media_type");
    // Size before JSON.
    let r = post_raw(&s, &ep.slug, &ep.sandbox_key, json_ct, &huge_invalid, &[]);
    assert_error(&r, 413, "payload_too_large");
    // JSON before required fields.
    let r = post_raw(&s, &ep.slug, &ep.sandbox_key, json_ct, b"{\"name\":", &[]);
    assert_error(&r, 400, "invalid_json");
    // Required fields before idempotency.
    let idem = [("Idempotency-Key", "order-check")];
    let first = post_raw(
        &s,
        &ep.slug,
        &ep.sandbox_key,
        json_ct,
        br#"{"email":"a"}"#,
        &idem,
    );
    assert_status(&first, 202);
    let r = post_raw(
        &s,
        &ep.slug,
        &ep.sandbox_key,
        json_ct,
        br#"{"name":"x"}"#,
        &idem,
    );
    assert_error(&r, 400, "missing_required_field");
    let r = post_raw(
        &s,
        &ep.slug,
        &ep.sandbox_key,
        json_ct,
        br#"{"email":"b"}"#,
        &idem,
    );
    assert_error(&r, 409, "idempotency_key_conflict");

    let id = first.json()["id"].as_str().unwrap().to_string();
    assert_eq!(s.list_ids(&ep.slug, &ep.sandbox_key), vec![id]);
}

// ---------------------------------------------------------------------------
// Refused requests change nothing
// ---------------------------------------------------------------------------

#[test]
fn refused_requests_change_nothing_in_either_environment() {
    let s = TestServer::start();
    let ep = s.create_endpoint("signups", &["email"]);
    let sb = s.create_record(&ep.slug, &ep.sandbox_key, &json!({"email": "sandbox"}));
    let sb_id = sb["id"].as_str().unwrap().to_string();
    let sb_before = s.expect_record(&ep.slug, &ep.sandbox_key, &sb_id);

    // Refused before deployment: production is untouched by these too.
    assert_error(
        &s.post_record(&ep.slug, &ep.production_key, &json!({"email": "x"})),
        403,
        "endpoint_not_deployed",
    );
    s.deploy(&ep.slug);
    let pr = s.create_record(&ep.slug, &ep.production_key, &json!({"email": "prod"}));
    let pr_id = pr["id"].as_str().unwrap().to_string();
    let pr_before = s.expect_record(&ep.slug, &ep.production_key, &pr_id);

    let huge = json_body_of_len(BODY_LIMIT + 1);
    for (key, id) in [(&ep.sandbox_key, &sb_id), (&ep.production_key, &pr_id)] {
        let json_ct = Some("application/json");
        let rp = record_path(&ep.slug, id);
        let refused = [
            post_raw(&s, &ep.slug, key, json_ct, b"{bad", &[]),
            post_raw(&s, &ep.slug, key, json_ct, br#"{"name":"no email"}"#, &[]),
            post_raw(&s, &ep.slug, key, json_ct, &huge, &[]),
            post_raw(
                &s,
                &ep.slug,
                key,
                Some("text/plain"),
                br#"{"email":"t"}"#,
                &[],
            ),
            post_raw(
                &s,
                &ep.slug,
                "tm_test_bogus",
                json_ct,
                br#"{"email":"t"}"#,
                &[],
            ),
            raw_call(&s, "PUT", &rp, key, json_ct, Some(b"{bad"), &[]),
            raw_call(&s, "PUT", &rp, key, json_ct, Some(br#"{"x":1}"#), &[]),
            raw_call(
                &s,
                "PUT",
                &rp,
                key,
                Some("text/plain"),
                Some(br#"{"email":"t"}"#),
                &[],
            ),
            raw_call(&s, "PUT", &rp, key, json_ct, Some(&huge), &[]),
            raw_call(
                &s,
                "PUT",
                &rp,
                "tm_live_bogus",
                json_ct,
                Some(br#"{"email":"t"}"#),
                &[],
            ),
            raw_call(&s, "DELETE", &rp, "tm_live_bogus", None, None, &[]),
            raw_call(&s, "DELETE", &rp, "", None, None, &[]),
        ];
        for r in &refused {
            assert!(r.status >= 400, "expected a refusal, got {}", r.describe());
            assert!(
                r.error_code().is_some(),
                "refusal without error code: {}",
                r.describe()
            );
        }
    }
    assert_eq!(s.list_ids(&ep.slug, &ep.sandbox_key), vec![sb_id.clone()]);
    assert_eq!(
        s.list_ids(&ep.slug, &ep.production_key),
        vec![pr_id.clone()]
    );
    assert_eq!(
        s.expect_record(&ep.slug, &ep.sandbox_key, &sb_id),
        sb_before
    );
    assert_eq!(
        s.expect_record(&ep.slug, &ep.production_key, &pr_id),
        pr_before
    );
}

#[test]
fn writes_are_visible_to_reads_immediately_after_202() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &[]);
    for i in 0..10 {
        let created = s.create_record(&ep.slug, &ep.sandbox_key, &json!({"i": i}));
        let id = created["id"].as_str().unwrap().to_string();
        let r = s.get_record(&ep.slug, &ep.sandbox_key, &id);
        assert_status(&r, 200);
        assert_eq!(r.json()["payload"], json!({"i": i}));
        let first = s.list(&ep.slug, &ep.sandbox_key, "limit=1").json();
        assert_eq!(
            first["data"][0]["id"],
            id.as_str(),
            "newest record not first in list"
        );

        assert_status(
            &s.put_record(&ep.slug, &ep.sandbox_key, &id, &json!({"i": i, "v": 2})),
            202,
        );
        let r = s.get_record(&ep.slug, &ep.sandbox_key, &id);
        assert_eq!(
            r.json()["payload"],
            json!({"i": i, "v": 2}),
            "PUT not visible immediately"
        );

        if i % 2 == 0 {
            assert_status(&s.delete_record(&ep.slug, &ep.sandbox_key, &id), 202);
            let r = s.get_record(&ep.slug, &ep.sandbox_key, &id);
            assert_error(&r, 404, "record_not_found");
        }
    }
    assert_eq!(s.list_ids(&ep.slug, &ep.sandbox_key).len(), 5);
}

/// Many clients replacing neighbouring records at once: every write is answered 202 and
/// stands. On PostgreSQL a node's ingest writers commit side by side and their batches read
/// and write the same index pages, so under `SERIALIZABLE` they abort each other; a batch that
/// lost must still get through (it once spent all its attempts and answered 503).
#[test]
fn concurrent_replacements_of_neighbouring_records_all_succeed() {
    const CLIENTS: usize = 16;
    const OWNED: usize = 4;
    const ROUNDS: usize = 8;
    let s = TestServer::start();
    let ep = s.create_endpoint("neighbours", &[]);
    let ids: Vec<String> = (0..CLIENTS * OWNED)
        .map(|i| {
            let created = s.create_record(&ep.slug, &ep.sandbox_key, &json!({"i": i}));
            created["id"].as_str().unwrap().to_string()
        })
        .collect();
    // Client `c` owns records c, c + CLIENTS, …: the records in flight at once are
    // neighbours, and each record's last write is known.
    std::thread::scope(|scope| {
        for c in 0..CLIENTS {
            let (s, ep, ids) = (&s, &ep, &ids);
            scope.spawn(move || {
                for round in 0..ROUNDS {
                    for k in 0..OWNED {
                        let id = &ids[c + k * CLIENTS];
                        let payload = json!({"client": c, "round": round});
                        assert_status(&s.put_record(&ep.slug, &ep.sandbox_key, id, &payload), 202);
                    }
                }
            });
        }
    });
    for (i, id) in ids.iter().enumerate() {
        let r = s.get_record(&ep.slug, &ep.sandbox_key, id);
        assert_status(&r, 200);
        assert_eq!(
            r.json()["payload"],
            json!({"client": i % CLIENTS, "round": ROUNDS - 1}),
            "record {i}"
        );
    }
}

#[test]
fn every_response_carries_a_unique_x_request_id() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &[]);
    let mut seen = HashSet::new();
    let responses = [
        s.post_record(&ep.slug, &ep.sandbox_key, &json!({"a": 1})),
        s.list(&ep.slug, &ep.sandbox_key, ""),
        s.get_record(&ep.slug, &ep.sandbox_key, &unknown_record_id()),
        s.list(&ep.slug, "tm_test_bogus", ""),
        s.request("GET", "/nothing-here", &[], None),
        s.manage("GET", "/api/v1/manage/endpoints", None),
    ];
    for r in &responses {
        let rid = r.request_id();
        assert!(!rid.is_empty());
        assert!(seen.insert(rid.clone()), "request id {rid} reused");
        if r.status >= 400 {
            assert_eq!(r.json()["error"]["request_id"], rid.as_str());
        }
    }
}

// ---------------------------------------------------------------------------
// Connection handling
// ---------------------------------------------------------------------------

/// HTTP/1.1 connections are persistent by default. A server that closes one
/// after a response must say so with `Connection: close`; otherwise a client
/// that reuses connections (ureq, for one) sends its next request into a
/// closing socket and fails. Not in the contract; HTTP hygiene (RFC 9112
/// section 9.6).
#[test]
fn after_each_response_the_connection_stays_usable_or_close_is_announced() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &[]);
    let host = s.addr();
    let head = |method: &str, path: &str, auth: &str, extra: &str| {
        format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {auth}\r\n{extra}\r\n")
            .into_bytes()
    };
    let with_body = |mut h: Vec<u8>, body: &[u8]| {
        h.extend_from_slice(body);
        h
    };
    let path = data_path(&ep.slug);
    let key = ep.sandbox_key.as_str();
    let big = json_body_of_len(BODY_LIMIT + 1);
    let json_len = |n: usize| format!("Content-Type: application/json\r\nContent-Length: {n}\r\n");
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "202 POST",
            with_body(head("POST", &path, key, &json_len(7)), br#"{"a":1}"#),
        ),
        ("200 GET list", head("GET", &path, key, "")),
        (
            "413 POST with its full body",
            with_body(head("POST", &path, key, &json_len(big.len())), &big),
        ),
        (
            "415 POST",
            with_body(
                head(
                    "POST",
                    &path,
                    key,
                    "Content-Type: text/plain\r\nContent-Length: 7\r\n",
                ),
                br#"{"a":1}"#,
            ),
        ),
        (
            "400 POST invalid JSON",
            with_body(head("POST", &path, key, &json_len(4)), b"{bad"),
        ),
        (
            "200 deploy with an empty chunked body (what ureq sends)",
            head(
                "POST",
                &format!("/api/v1/manage/endpoints/{}/deploy", ep.slug),
                &s.owner_token,
                "Transfer-Encoding: chunked\r\n\r\n0\r\n",
            ),
        ),
        (
            "200 deploy, empty chunked body in a second write",
            Vec::new(),
        ),
    ];
    // Like ureq: the chunked terminator of an empty body goes out in a
    // separate write after the head.
    let deploy_head = head(
        "POST",
        &format!("/api/v1/manage/endpoints/{}/deploy", ep.slug),
        &s.owner_token,
        "Transfer-Encoding: chunked\r\n",
    );
    let follow_up = head("GET", &path, key, "");
    let mut failures = Vec::new();
    for (name, req) in cases {
        let mut c = TcpStream::connect(s.addr()).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c.set_nodelay(true).unwrap();
        if req.is_empty() {
            c.write_all(&deploy_head).unwrap();
            c.flush().unwrap();
            let _ = c.write_all(b"0\r\n\r\n");
        } else {
            let _ = c.write_all(&req);
        }
        let first = read_response(&mut c).unwrap_or_else(|e| panic!("{name}: {e}"));
        let announced = first
            .header("connection")
            .is_some_and(|v| v.to_ascii_lowercase().contains("close"));
        if announced {
            continue;
        }
        // Let a pending close surface (bounded), then reuse the connection.
        c.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut probe = [0u8; 1];
        match c.read(&mut probe) {
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Ok(0) => {
                failures.push(format!(
                    "{name}: answered {} without `Connection: close`, then closed the connection",
                    first.status
                ));
                continue;
            }
            other => {
                failures.push(format!(
                    "{name}: after the {} response: {other:?}",
                    first.status
                ));
                continue;
            }
        }
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let second = c
            .write_all(&follow_up)
            .map_err(|e| e.to_string())
            .and_then(|_| read_response(&mut c));
        match second {
            Ok(r) if r.status == 200 => {}
            Ok(r) => failures.push(format!("{name}: follow-up GET got {}", r.describe())),
            Err(e) => failures.push(format!(
                "{name}: follow-up GET on the same connection failed: {e}"
            )),
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// A client may shut down its sending side once its request is out (`Shutdown::Write`, what
/// `nc -N` does) and still wait for the answer: the server does not take the end of the
/// client's stream in the middle of a request as a hang-up. The write it answered 202 for is
/// stored.
#[test]
fn a_client_that_half_closes_after_its_request_still_gets_the_answer() {
    let s = TestServer::start();
    let ep = s.create_endpoint("halfclose", &[]);
    let body = br#"{"sent":"then half-closed"}"#;
    let request = format!(
        "POST {} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        data_path(&ep.slug),
        ep.sandbox_key,
        body.len()
    );
    let mut c = TcpStream::connect(s.addr()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(request.as_bytes()).unwrap();
    c.write_all(body).unwrap();
    c.shutdown(std::net::Shutdown::Write).unwrap();
    let r = read_response(&mut c).unwrap_or_else(|e| panic!("no answer after half-close: {e}"));
    assert_status(&r, 202);
    let id = r.json()["id"].as_str().expect("id").to_string();
    let stored = s.get_record(&ep.slug, &ep.sandbox_key, &id);
    assert_status(&stored, 200);
    assert_eq!(
        stored.json()["payload"],
        json!({"sent": "then half-closed"})
    );
}

/// The memory request bodies may hold is a setting: with `body_memory_mb = 1`, ten bodies that
/// declare 100 KB and are still arriving hold 1000 KiB, so an eleventh of 30 KB waits and, finding no
/// room within 5 s, is answered 503 `server_busy` with `Retry-After` without its
/// body being read; once the others go, a write goes through again. `/metrics` shows the
/// budget in use.
#[test]
fn request_bodies_wait_for_the_body_memory_budget() {
    // The holders' bodies may take 60 s: longer than the 5 s an eleventh waits for room.
    let s = TestServer::start_with_config("[http]\nbody_memory_mb = 1\nbody_timeout = \"60s\"\n");
    let ep = s.create_endpoint("budget", &[]);
    let path = format!("/api/v1/data/{}", ep.slug);
    let head = |length: usize| {
        format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\
             Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n",
            ep.sandbox_key
        )
    };
    let holders: Vec<TcpStream> = (0..10)
        .map(|_| {
            let mut c = TcpStream::connect(s.addr()).unwrap();
            c.write_all(head(102_400).as_bytes()).unwrap();
            c.write_all(b"{\"a\":").unwrap();
            c
        })
        .collect();
    let held = || {
        let metrics = s.request("GET", "/metrics", &[], None).text();
        metrics
            .lines()
            .find_map(|l| l.strip_prefix("intake_request_body_kib "))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .expect("intake_request_body_kib in /metrics")
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while held() < 1000 {
        assert!(
            Instant::now() < deadline,
            "the ten bodies never took their share"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    // 30 KB: more than the 24 KiB left.
    let pad = "x".repeat(30_000);
    let busy = s.post_record(&ep.slug, &ep.sandbox_key, &json!({"n": 1, "pad": pad}));
    assert_error(&busy, 503, "server_busy");
    assert_eq!(busy.header("retry-after"), Some("1"));
    drop(holders);
    let deadline = Instant::now() + Duration::from_secs(10);
    while held() > 0 {
        assert!(
            Instant::now() < deadline,
            "the bodies' shares were not given back"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_status(
        &s.post_record(&ep.slug, &ep.sandbox_key, &json!({"n": 2})),
        202,
    );
    let (listed, _) = s.list_all(&ep.slug, &ep.sandbox_key, 30);
    assert_eq!(
        listed.len(),
        1,
        "only the write after the budget freed up is stored"
    );
}
