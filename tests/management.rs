//! Management API: endpoints (create/list/get/patch/deploy), validation and
//! token errors, and the per-endpoint request log.

use crate::common;

use std::collections::HashSet;
use std::time::Duration;

use common::*;
use serde_json::{Value, json};

const ENDPOINTS: &str = "/api/v1/manage/endpoints";

fn ep_path(slug: &str) -> String {
    format!("{ENDPOINTS}/{slug}")
}

fn is_slug(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

// ---------------------------------------------------------------------------
// Endpoints
// ---------------------------------------------------------------------------

#[test]
fn create_endpoint_returns_201_with_every_documented_field() {
    let s = TestServer::start();
    let r = s.manage("POST", ENDPOINTS, Some(&json!({"name": "Orders"})));
    assert_status(&r, 201);
    assert!(!r.request_id().is_empty());
    let v = r.json();
    let slug = v["slug"].as_str().expect("slug");
    assert!(is_slug(slug), "slug must be URL-safe [a-z0-9-]: {slug:?}");
    assert_eq!(v["name"], "Orders");
    assert_eq!(v["description"], Value::Null);
    assert_eq!(v["required_fields"], json!([]));
    assert_eq!(v["active"], true);
    assert_eq!(v["deployed"], false);
    ts(&v["created_at"]);
    let sk = v["sandbox_key"].as_str().expect("sandbox_key");
    let pk = v["production_key"].as_str().expect("production_key");
    assert!(
        sk.starts_with("tm_test_") && sk.len() > "tm_test_".len(),
        "{sk}"
    );
    assert!(
        pk.starts_with("tm_live_") && pk.len() > "tm_live_".len(),
        "{pk}"
    );
    assert_ne!(sk["tm_test_".len()..], pk["tm_live_".len()..]);
}

#[test]
fn create_echoes_description_and_required_fields() {
    let s = TestServer::start();
    let body = json!({"name": "Signups", "description": "Newsletter sign-ups", "required_fields": ["email", "name"]});
    let r = s.manage("POST", ENDPOINTS, Some(&body));
    assert_status(&r, 201);
    let v = r.json();
    assert_eq!(v["name"], "Signups");
    assert_eq!(v["description"], "Newsletter sign-ups");
    assert_eq!(v["required_fields"], json!(["email", "name"]));
}

#[test]
fn slugs_are_unique_and_url_safe_for_similar_and_unusual_names() {
    let s = TestServer::start();
    let long = "a".repeat(100);
    // Names that make the same slug stem (one owner's names differ: see
    // one_owner_never_has_two_endpoints_of_the_same_name).
    let names = [
        "Orders",
        "Orders!",
        "orders?",
        "Ünïcode & spaces / slashes!",
        "???",
        long.as_str(),
    ];
    let mut slugs = HashSet::new();
    for name in names {
        let ep = s.create_endpoint(name, &[]);
        assert!(is_slug(&ep.slug), "{name:?} -> slug {:?}", ep.slug);
        assert_eq!(ep.json["name"], name);
        assert!(slugs.insert(ep.slug.clone()), "duplicate slug {}", ep.slug);
        // Every slug works in a data path.
        assert_status(&s.list(&ep.slug, &ep.sandbox_key, ""), 200);
    }
    let listed = s.manage("GET", ENDPOINTS, None).json();
    let keys: HashSet<&str> = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["sandbox_key"].as_str().unwrap())
        .collect();
    assert_eq!(keys.len(), names.len(), "sandbox keys must be distinct");
}

#[test]
fn one_owner_never_has_two_endpoints_of_the_same_name() {
    let s = TestServer::start();
    let orders = s.create_endpoint("Orders", &[]);
    let leads = s.create_endpoint("Leads", &[]);
    // Compared trimmed and case-insensitively; nothing is created.
    for name in ["Orders", "orders", "  ORDERS  "] {
        let r = s.manage("POST", ENDPOINTS, Some(&json!({ "name": name })));
        assert_error(&r, 409, "endpoint_name_taken");
        assert!(error_message(&r).contains(name.trim()), "{}", r.describe());
    }
    let listed = s.manage("GET", ENDPOINTS, None).json();
    assert_eq!(listed["data"].as_array().unwrap().len(), 2, "{listed}");

    // Renaming onto another endpoint's name is refused, and nothing of the change is kept.
    let r = s.manage(
        "PATCH",
        &ep_path(&leads.slug),
        Some(&json!({ "name": " orders ", "description": "changed" })),
    );
    assert_error(&r, 409, "endpoint_name_taken");
    let v = s.manage("GET", &ep_path(&leads.slug), None).json();
    assert_eq!(v["name"], "Leads");
    assert_eq!(v["description"], Value::Null);
    assert!(!s.audit_text(&leads.slug).contains("changed"));

    // An endpoint keeps its own name, in any case; a name given up is free again.
    let v = s.patch_endpoint(&orders.slug, &json!({ "name": "ORDERS" }));
    assert_eq!(v["name"], "ORDERS");
    s.patch_endpoint(&leads.slug, &json!({ "name": "Leads 2026" }));
    let again = s.create_endpoint("leads", &[]);
    assert_ne!(again.slug, leads.slug);
}

#[test]
fn list_returns_every_endpoint_under_data() {
    let s = TestServer::start();
    let r = s.manage("GET", ENDPOINTS, None);
    assert_status(&r, 200);
    assert_eq!(r.json(), json!({"data": []}));
    let a = s.create_endpoint("a", &[]);
    let b = s.create_endpoint("b", &["x"]);
    let v = s.manage("GET", ENDPOINTS, None).json();
    let data = v["data"].as_array().expect("data array");
    assert_eq!(data.len(), 2, "{v}");
    for ep in [&a, &b] {
        let found = data
            .iter()
            .find(|e| e["slug"] == ep.slug.as_str())
            .unwrap_or_else(|| panic!("{} missing from list {v}", ep.slug));
        assert_eq!(found, &ep.json, "listed endpoint differs from created one");
    }
}

#[test]
fn get_by_slug_returns_the_endpoint_and_unknown_slug_is_404() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &["id"]);
    let r = s.manage("GET", &ep_path(&ep.slug), None);
    assert_status(&r, 200);
    assert_eq!(r.json(), ep.json);
    let r = s.manage("GET", &ep_path("no-such-endpoint"), None);
    assert_error(&r, 404, "endpoint_not_found");
}

#[test]
fn patch_updates_each_field_and_keeps_the_rest() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &[]);
    let v = s.patch_endpoint(&ep.slug, &json!({"description": "All orders"}));
    assert_eq!(v["description"], "All orders");
    let v = s.patch_endpoint(&ep.slug, &json!({"required_fields": ["sku", "qty"]}));
    assert_eq!(v["required_fields"], json!(["sku", "qty"]));
    assert_eq!(v["description"], "All orders", "earlier patch lost");
    let v = s.patch_endpoint(&ep.slug, &json!({"name": "Orders v2", "active": false}));
    assert_eq!(v["name"], "Orders v2");
    assert_eq!(v["active"], false);
    for k in [
        "slug",
        "sandbox_key",
        "production_key",
        "created_at",
        "deployed",
    ] {
        assert_eq!(v[k], ep.json[k], "PATCH changed {k}");
    }
    let got = s.manage("GET", &ep_path(&ep.slug), None).json();
    assert_eq!(got, v, "GET after PATCH differs from PATCH response");
    let v = s.patch_endpoint(&ep.slug, &json!({"active": true}));
    assert_eq!(v["active"], true);
}

#[test]
fn patch_unknown_slug_is_404_and_bad_body_is_400_invalid_request() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &[]);
    let r = s.manage("PATCH", &ep_path("nope"), Some(&json!({"active": false})));
    assert_error(&r, 404, "endpoint_not_found");
    for body in [
        json!({"active": "yes"}),
        json!({"required_fields": "email"}),
        json!({"bogus": 1}),
        json!({"name": ""}),
    ] {
        let r = s.manage("PATCH", &ep_path(&ep.slug), Some(&body));
        assert_error(&r, 400, "invalid_request");
    }
    let got = s.manage("GET", &ep_path(&ep.slug), None).json();
    assert_eq!(got, ep.json, "refused PATCH changed the endpoint");
}

#[test]
fn deploy_sets_deployed_true_idempotently_and_enables_the_production_key() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &[]);
    let r = s.post_record(&ep.slug, &ep.production_key, &json!({"a": 1}));
    assert_error(&r, 403, "endpoint_not_deployed");
    let v = s.deploy(&ep.slug);
    assert_eq!(v["deployed"], true);
    assert_eq!(v["slug"], ep.slug.as_str());
    let again = s.deploy(&ep.slug);
    assert_eq!(again["deployed"], true);
    assert_eq!(
        s.manage("GET", &ep_path(&ep.slug), None).json()["deployed"],
        true
    );
    assert_status(
        &s.post_record(&ep.slug, &ep.production_key, &json!({"a": 1})),
        202,
    );
    let r = s.manage("POST", &format!("{}/deploy", ep_path("nope")), None);
    assert_error(&r, 404, "endpoint_not_found");
}

#[test]
fn create_validation_errors_are_400_invalid_request() {
    let s = TestServer::start();
    for body in [
        json!({}),
        json!({"name": ""}),
        json!({"name": null}),
        json!({"name": 5}),
        json!({"name": "ok", "unknown": true}),
        json!({"name": "ok", "required_fields": "email"}),
        json!({"name": "ok", "required_fields": [1]}),
    ] {
        let r = s.manage("POST", ENDPOINTS, Some(&body));
        assert_error(&r, 400, "invalid_request");
    }
    assert_eq!(s.manage("GET", ENDPOINTS, None).json()["data"], json!([]));
}

#[test]
fn create_with_malformed_json_is_400_invalid_json() {
    let s = TestServer::start();
    let auth = format!("Bearer {}", s.owner_token);
    for body in [&b"{\"name\":"[..], b"", b"name=x"] {
        let r = s.request(
            "POST",
            ENDPOINTS,
            &[
                ("Authorization", &auth),
                ("Content-Type", "application/json"),
            ],
            Some(body),
        );
        assert_error(&r, 400, "invalid_json");
    }
    assert_eq!(s.manage("GET", ENDPOINTS, None).json()["data"], json!([]));
}

#[test]
fn create_with_non_json_content_type_is_415() {
    let s = TestServer::start();
    let auth = format!("Bearer {}", s.owner_token);
    for ct in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        None,
    ] {
        let mut h = vec![("Authorization", auth.as_str())];
        if let Some(ct) = ct {
            h.push(("Content-Type", ct));
        }
        let r = s.request("POST", ENDPOINTS, &h, Some(br#"{"name":"x"}"#));
        assert_error(&r, 415, "unsupported_media_type");
    }
    assert_eq!(s.manage("GET", ENDPOINTS, None).json()["data"], json!([]));
}

#[test]
fn missing_token_is_401_missing_token_and_wrong_token_is_401_invalid_token() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &[]);
    let routes: Vec<(&str, String, Option<Value>)> = vec![
        ("GET", ENDPOINTS.to_string(), None),
        ("POST", ENDPOINTS.to_string(), Some(json!({"name": "x"}))),
        ("GET", ep_path(&ep.slug), None),
        ("PATCH", ep_path(&ep.slug), Some(json!({"active": false}))),
        ("POST", format!("{}/deploy", ep_path(&ep.slug)), None),
        ("GET", format!("{}/requests", ep_path(&ep.slug)), None),
    ];
    let wrong = [
        "Bearer not-the-token".to_string(),
        format!("Bearer {}x", s.owner_token),
        format!("Bearer {}", ep.sandbox_key),
        format!("Bearer {}", ep.production_key),
        format!("Bearer {}", s.password),
    ];
    for (method, path, body) in &routes {
        let r = s.manage_with(method, path, None, body.as_ref());
        assert_error(&r, 401, "missing_token");
        for auth in &wrong {
            let r = s.manage_with(method, path, Some(auth), body.as_ref());
            assert_error(&r, 401, "invalid_token");
        }
        // Malformed header: 401 with one of the two token codes.
        let r = s.manage_with(method, path, Some("Basic b3duZXI6cHc="), body.as_ref());
        assert_eq!(r.status, 401, "{method} {path}: {}", r.describe());
        let code = r.error_code().unwrap_or_default();
        assert!(
            code == "missing_token" || code == "invalid_token",
            "{}",
            r.describe()
        );
        assert_error(&r, 401, &code);
    }
    // Nothing changed.
    let v = s.manage("GET", ENDPOINTS, None).json();
    assert_eq!(v["data"].as_array().unwrap().len(), 1);
    assert_eq!(v["data"][0], ep.json);
}

#[test]
fn unknown_management_route_is_404_and_wrong_method_is_405() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &[]);
    let r = s.manage("GET", "/api/v1/manage/nothing", None);
    assert_error(&r, 404, "route_not_found");
    let r = s.manage("DELETE", ENDPOINTS, None);
    assert_error(&r, 405, "method_not_allowed");
    let allow = r
        .header("allow")
        .expect("Allow header")
        .to_ascii_uppercase();
    assert!(
        allow.contains("GET") && allow.contains("POST"),
        "Allow: {allow}"
    );
    let r = s.manage("GET", &format!("{}/deploy", ep_path(&ep.slug)), None);
    assert_error(&r, 405, "method_not_allowed");
    assert!(
        r.header("allow")
            .expect("Allow header")
            .to_ascii_uppercase()
            .contains("POST")
    );
}

// ---------------------------------------------------------------------------
// Request log
// ---------------------------------------------------------------------------

struct Call {
    request_id: String,
    method: &'static str,
    status: u16,
    single: bool,
}

fn call(r: &Resp, method: &'static str, single: bool) -> Call {
    Call {
        request_id: r.request_id(),
        method,
        status: r.status,
        single,
    }
}

#[track_caller]
fn check_entry(entry: &Value, c: &Call, env: &str, slug: &str) {
    assert_eq!(entry["method"], c.method, "{entry}");
    assert_eq!(entry["status"], c.status, "{entry}");
    assert_eq!(entry["environment"], env, "{entry}");
    ts(&entry["time"]);
    let lat = &entry["latency_ms"];
    assert!(
        lat.as_f64().is_some_and(|l| l >= 0.0),
        "latency_ms: {entry}"
    );
    let route = entry["route"].as_str().expect("route string");
    assert!(
        !route.contains(slug),
        "route must be a template, not the path: {route}"
    );
    if c.single {
        assert!(
            route.starts_with("/api/v1/data/{slug}/{") && route.ends_with('}'),
            "single-record route template: {route}"
        );
    } else {
        assert_eq!(route, "/api/v1/data/{slug}");
    }
}

#[test]
fn request_log_records_every_data_call_with_template_status_and_key_id_but_never_the_key() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &[]);
    s.deploy(&ep.slug);
    let marker = "payload-marker-7f3a";
    let sk = &ep.sandbox_key;
    let pk = &ep.production_key;

    let mut sandbox = Vec::new();
    let r = s.post_record(&ep.slug, sk, &json!({"m": marker}));
    let id = r.json()["id"].as_str().unwrap().to_string();
    sandbox.push(call(&r, "POST", false));
    sandbox.push(call(&s.get_record(&ep.slug, sk, &id), "GET", true));
    sandbox.push(call(
        &s.get_record(&ep.slug, sk, &unknown_record_id()),
        "GET",
        true,
    ));
    let r = s.request(
        "POST",
        &format!("/api/v1/data/{}", ep.slug),
        &[
            ("Authorization", &format!("Bearer {sk}")),
            ("Content-Type", "text/plain"),
        ],
        Some(marker.as_bytes()),
    );
    sandbox.push(call(&r, "POST", false));
    sandbox.push(call(&s.list(&ep.slug, sk, "limit=5"), "GET", false));
    sandbox.push(call(
        &s.put_record(&ep.slug, sk, &id, &json!({"m": marker, "v": 2})),
        "PUT",
        true,
    ));
    sandbox.push(call(&s.delete_record(&ep.slug, sk, &id), "DELETE", true));
    let statuses: Vec<u16> = sandbox.iter().map(|c| c.status).collect();
    assert_eq!(statuses, vec![202, 200, 404, 415, 200, 202, 202]);

    let mut production = Vec::new();
    let r = s.post_record(&ep.slug, pk, &json!({"m": marker}));
    production.push(call(&r, "POST", false));
    production.push(call(&s.list(&ep.slug, pk, ""), "GET", false));

    for (env, calls) in [("sandbox", &sandbox), ("production", &production)] {
        let want: HashSet<&str> = calls.iter().map(|c| c.request_id.as_str()).collect();
        let entries = s.wait_request_log(&ep.slug, env, Duration::from_secs(10), |d| {
            let have: HashSet<&str> = d.iter().filter_map(|e| e["request_id"].as_str()).collect();
            want.is_subset(&have)
        });
        assert_eq!(
            entries.len(),
            calls.len(),
            "{env}: unexpected extra entries: {entries:?}"
        );
        for c in calls.iter() {
            let e = entries
                .iter()
                .find(|e| e["request_id"] == c.request_id.as_str())
                .unwrap();
            check_entry(e, c, env, &ep.slug);
        }
        // Newest first.
        for w in entries.windows(2) {
            assert!(
                ts(&w[0]["time"]) >= ts(&w[1]["time"]),
                "log not newest first: {w:?}"
            );
        }
        // key_id: a string, the same for all calls with one key, never the key.
        let key_ids: HashSet<&str> = entries
            .iter()
            .map(|e| {
                e["key_id"]
                    .as_str()
                    .expect("key_id string for a keyed call")
            })
            .collect();
        assert_eq!(
            key_ids.len(),
            1,
            "{env}: key_id differs between calls: {key_ids:?}"
        );
    }
    let sb_kid = s.request_log(&ep.slug, "environment=sandbox").json()["data"][0]["key_id"].clone();
    let pr_kid =
        s.request_log(&ep.slug, "environment=production").json()["data"][0]["key_id"].clone();
    assert_ne!(sb_kid, pr_kid, "sandbox and production key ids must differ");

    // Not even a fragment of a key: no 8-character window of either key
    // body appears anywhere in the log.
    let all = format!(
        "{}{}",
        s.request_log(&ep.slug, "environment=sandbox&limit=100")
            .text(),
        s.request_log(&ep.slug, "environment=production&limit=100")
            .text()
    );
    for key in [sk, pk] {
        let body: Vec<char> = key[8..].chars().collect();
        for w in body.windows(8) {
            let frag: String = w.iter().collect();
            assert!(
                !all.contains(&frag),
                "request log contains key fragment {frag:?}"
            );
        }
    }
    for env in ["sandbox", "production"] {
        let text = s
            .request_log(&ep.slug, &format!("environment={env}&limit=100"))
            .text();
        for secret in [
            sk.as_str(),
            pk.as_str(),
            &sk["tm_test_".len()..],
            &pk["tm_live_".len()..],
            marker,
        ] {
            assert!(
                !text.contains(secret),
                "request log leaks {secret:?}: {text}"
            );
        }
    }
}

#[test]
fn request_log_includes_refused_data_calls_made_with_the_endpoints_keys() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &["email"]);
    let sk = &ep.sandbox_key;
    let path = format!("/api/v1/data/{}", ep.slug);
    let auth = format!("Bearer {sk}");
    let json_ct = ("Content-Type", "application/json");
    let mut sandbox = vec![
        (
            s.request(
                "POST",
                &path,
                &[("Authorization", &auth), json_ct],
                Some(b"{bad"),
            ),
            400,
        ),
        (
            s.post_record(&ep.slug, sk, &json!({"name": "no email"})),
            400,
        ),
        (s.get_record(&ep.slug, sk, "hello"), 400),
        (
            s.request(
                "POST",
                &path,
                &[("Authorization", &auth), json_ct],
                Some(&vec![b' '; 102_401]),
            ),
            413,
        ),
        (s.list(&ep.slug, sk, "limit=0"), 400),
    ];
    let production = vec![(
        s.post_record(&ep.slug, &ep.production_key, &json!({"email": "e"})),
        403,
    )];
    s.patch_endpoint(&ep.slug, &json!({"active": false}));
    sandbox.push((s.list(&ep.slug, sk, ""), 403));

    for (env, calls) in [("sandbox", &sandbox), ("production", &production)] {
        for (r, status) in calls.iter() {
            assert_eq!(r.status, *status, "{}", r.describe());
        }
        let want: HashSet<String> = calls.iter().map(|(r, _)| r.request_id()).collect();
        let entries = s.wait_request_log(&ep.slug, env, Duration::from_secs(10), |d| {
            let have: HashSet<String> = d
                .iter()
                .filter_map(|e| e["request_id"].as_str().map(str::to_string))
                .collect();
            want.is_subset(&have)
        });
        for (r, status) in calls.iter() {
            let e = entries
                .iter()
                .find(|e| e["request_id"] == r.request_id().as_str())
                .unwrap();
            assert_eq!(e["status"], *status, "{e}");
            assert_eq!(e["environment"], env, "{e}");
        }
    }
}

#[test]
fn request_log_paginates_newest_first_without_duplicates() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &[]);
    let mut ids = Vec::new();
    for _ in 0..25 {
        ids.push(s.list(&ep.slug, &ep.sandbox_key, "limit=1").request_id());
    }
    let want: HashSet<String> = ids.iter().cloned().collect();
    s.wait_request_log(&ep.slug, "sandbox", Duration::from_secs(10), |d| {
        d.len() >= 25
    });

    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut q = "environment=sandbox&limit=10".to_string();
        if let Some(c) = &cursor {
            q.push_str(&format!("&cursor={}", url_encode(c)));
        }
        let r = s.request_log(&ep.slug, &q);
        assert_status(&r, 200);
        let v = r.json();
        let data = v["data"].as_array().expect("data").clone();
        assert!(data.len() <= 10);
        pages += 1;
        seen.extend(data);
        match v.pointer("/pagination/next_cursor").and_then(Value::as_str) {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
        assert!(pages < 10, "request log pagination does not end");
    }
    assert_eq!(pages, 3);
    let got: Vec<String> = seen
        .iter()
        .map(|e| e["request_id"].as_str().unwrap().to_string())
        .collect();
    let unique: HashSet<String> = got.iter().cloned().collect();
    assert_eq!(unique.len(), got.len(), "duplicate entries across pages");
    assert_eq!(unique, want);
    for w in seen.windows(2) {
        assert!(
            ts(&w[0]["time"]) >= ts(&w[1]["time"]),
            "not newest first: {w:?}"
        );
    }
}

#[test]
fn request_log_bad_parameters_are_400_invalid_parameter_and_unknown_slug_404() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &[]);
    for (q, name) in [
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("limit=x", "limit"),
        ("cursor=garbage", "cursor"),
        ("environment=staging", "environment"),
        ("cursor=AAAA", "cursor"),
    ] {
        let r = s.request_log(&ep.slug, q);
        assert_error(&r, 400, "invalid_parameter");
        assert!(error_message(&r).contains(name), "{q}: {}", r.text());
    }
    for q in [
        "limit=1",
        "limit=100",
        "environment=sandbox",
        "environment=production",
    ] {
        assert_status(&s.request_log(&ep.slug, q), 200);
    }
    let r = s.manage("GET", &format!("{}/requests", ep_path("nope")), None);
    assert_error(&r, 404, "endpoint_not_found");
}
