//! A JSON Schema per endpoint: checked when saved (`invalid_schema`), applied to every create,
//! replace and batch record after `required_fields` (`schema_violation` with the violations in
//! document order), never applied to stored records, and tried on them first with the dry run
//! `POST …/schema/check`.

use crate::common;

use common::*;
use serde_json::{Value, json};

/// A payload sent as these exact bytes (a `Value` would pass its numbers through the test's
/// own serde_json).
fn post_raw(s: &TestServer, ep: &Endpoint, body: &str) -> Resp {
    let auth = format!("Bearer {}", ep.sandbox_key);
    s.request(
        "POST",
        &format!("/api/v1/data/{}", ep.slug),
        &[
            ("Authorization", auth.as_str()),
            ("Content-Type", "application/json"),
        ],
        Some(body.as_bytes()),
    )
}

fn patch(s: &TestServer, slug: &str, body: &Value) -> Resp {
    s.manage(
        "PATCH",
        &format!("/api/v1/manage/endpoints/{slug}"),
        Some(body),
    )
}

fn stored_schema(s: &TestServer, slug: &str) -> Value {
    let r = s.manage("GET", &format!("/api/v1/manage/endpoints/{slug}"), None);
    assert_status(&r, 200);
    r.json()["schema"].clone()
}

fn violations(r: &Resp) -> Vec<(String, String)> {
    r.json()["error"]["errors"]
        .as_array()
        .unwrap_or_else(|| panic!("no errors: {}", r.describe()))
        .iter()
        .map(|v| {
            assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
            (
                v["instance_path"].as_str().expect("path").to_string(),
                v["keyword"].as_str().expect("keyword").to_string(),
            )
        })
        .collect()
}

fn order_schema() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "required": ["email", "total"],
        "properties": {
            "email": { "type": "string", "format": "email" },
            "total": { "type": "integer", "minimum": 0, "maximum": 123456789012345678901234567890u128 },
            "items": { "type": "array", "items": { "$ref": "#/$defs/item" } }
        },
        "$defs": {
            "item": { "type": "object", "required": ["sku"],
                      "properties": { "sku": { "type": "string", "pattern": "^[A-Z]{3}-[0-9]+$" } } }
        }
    })
}

#[test]
fn a_schema_is_checked_when_saved_and_a_bad_one_changes_nothing() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &[]);
    assert_eq!(stored_schema(&s, &ep.slug), Value::Null);

    for (bad, names) in [
        (json!({ "type": "strng" }), "strng"),
        (
            json!({ "properties": { "n": { "minimum": "ten" } } }),
            "ten",
        ),
        (json!({ "format": "emial" }), "emial"),
        (
            json!({ "$ref": "https://example.com/schema.json" }),
            "never fetches",
        ),
        (
            json!({ "$schema": "http://json-schema.org/draft-07/schema#" }),
            "2020-12",
        ),
        (json!({ "pattern": "(?<=a)b" }), "(?<=a)b"),
        (json!([1, 2]), "JSON object"),
    ] {
        let r = patch(
            &s,
            &ep.slug,
            &json!({ "schema": bad, "description": "changed" }),
        );
        assert_error(&r, 400, "invalid_schema");
        let message = error_message(&r);
        assert!(message.contains(names), "{bad}: {message}");
        // Nothing of the request was applied, the description neither.
        let shown = s.manage(
            "GET",
            &format!("/api/v1/manage/endpoints/{}", ep.slug),
            None,
        );
        assert_eq!(shown.json()["schema"], Value::Null, "{bad}");
        assert_eq!(shown.json()["description"], Value::Null, "{bad}");
    }

    let view = s.patch_endpoint(&ep.slug, &json!({ "schema": order_schema() }));
    assert_eq!(view["schema"], order_schema());
    assert_eq!(stored_schema(&s, &ep.slug), order_schema());
    // The audit log says it changed, without its text.
    let audit = s.manage(
        "GET",
        &format!("/api/v1/manage/endpoints/{}/audit", ep.slug),
        None,
    );
    let entry = &audit.json()["data"][0];
    assert_eq!(entry["action"], "endpoint.updated", "{entry}");
    assert!(entry["details"]["schema"]["sha256"].is_string(), "{entry}");

    // `null` removes it; a new endpoint can be created with one.
    let view = s.patch_endpoint(&ep.slug, &json!({ "schema": null }));
    assert_eq!(view["schema"], Value::Null);
    let r = s.manage(
        "POST",
        "/api/v1/manage/endpoints",
        Some(&json!({ "name": "with schema", "schema": { "type": "object" } })),
    );
    assert_status(&r, 201);
    assert_eq!(r.json()["schema"], json!({ "type": "object" }));
    let r = s.manage(
        "POST",
        "/api/v1/manage/endpoints",
        Some(&json!({ "name": "bad schema", "schema": { "type": 5 } })),
    );
    assert_error(&r, 400, "invalid_schema");
    let names: Vec<Value> = s.manage("GET", "/api/v1/manage/endpoints", None).json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].clone())
        .collect();
    assert!(!names.contains(&json!("bad schema")), "{names:?}");
}

#[test]
fn writes_are_checked_against_the_schema_after_required_fields() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &["customer"]);
    s.patch_endpoint(&ep.slug, &json!({ "schema": order_schema() }));

    // required_fields first, with its own error.
    let r = post_raw(&s, &ep, r#"{"email":"x"}"#);
    assert_error(&r, 400, "missing_required_field");

    // Every violation, in document order, each with its path and keyword; nothing stored.
    let r = post_raw(
        &s,
        &ep,
        r#"{"customer":"ada","items":[{"sku":"ABC-1"},{"sku":"nope"},{}],"email":"not an address"}"#,
    );
    assert_error(&r, 400, "schema_violation");
    assert_eq!(
        violations(&r),
        [
            ("".to_string(), "required".to_string()),
            ("/items/1/sku".to_string(), "pattern".to_string()),
            ("/items/2".to_string(), "required".to_string()),
            ("/email".to_string(), "format".to_string()),
        ]
    );
    let message = error_message(&r);
    assert!(message.contains("schema"), "{message}");
    // The payload's values are never quoted back (nor kept in the request log).
    assert!(!r.text().contains("not an address"), "{}", r.text());
    assert!(s.list_ids(&ep.slug, &ep.sandbox_key).is_empty());

    // Numbers are judged by their exact text.
    let r = post_raw(
        &s,
        &ep,
        r#"{"customer":"ada","email":"ada@example.com","total":123456789012345678901234567891}"#,
    );
    assert_error(&r, 400, "schema_violation");
    assert_eq!(
        violations(&r),
        [("/total".to_string(), "maximum".to_string())]
    );
    let r = post_raw(
        &s,
        &ep,
        r#"{"customer":"ada","email":"ada@example.com","total":123456789012345678901234567890}"#,
    );
    assert_status(&r, 202);
    let id = r.json()["id"].as_str().unwrap().to_string();
    let stored = s.get_record(&ep.slug, &ep.sandbox_key, &id).text();
    assert!(
        stored.contains("123456789012345678901234567890}"),
        "{stored}"
    );

    // A replace is checked too and a refused one changes nothing.
    let r = s.put_record(
        &ep.slug,
        &ep.sandbox_key,
        &id,
        &json!({ "customer": "ada", "email": "ada@example.com", "total": -1 }),
    );
    assert_error(&r, 400, "schema_violation");
    assert_eq!(
        violations(&r),
        [("/total".to_string(), "minimum".to_string())]
    );
    assert_eq!(s.get_record(&ep.slug, &ep.sandbox_key, &id).text(), stored);

    // A batch stands or falls whole; each refused record carries its violations.
    let auth = format!("Bearer {}", ep.sandbox_key);
    let body = "{\"customer\":\"a\",\"email\":\"a@example.com\",\"total\":1}\n\
                {\"customer\":\"b\",\"email\":\"b@example.com\",\"total\":\"two\"}\n";
    let r = s.request(
        "POST",
        &format!("/api/v1/data/{}/batch", ep.slug),
        &[
            ("Authorization", auth.as_str()),
            ("Content-Type", "application/x-ndjson"),
        ],
        Some(body.as_bytes()),
    );
    assert_error(&r, 400, "batch_invalid");
    let refused = &r.json()["error"]["records"];
    assert_eq!(refused.as_array().map(Vec::len), Some(1), "{refused}");
    assert_eq!(refused[0]["index"], 1);
    assert_eq!(refused[0]["code"], "schema_violation");
    assert_eq!(refused[0]["errors"][0]["instance_path"], "/total");
    assert_eq!(refused[0]["errors"][0]["keyword"], "type");
    assert_eq!(s.list_ids(&ep.slug, &ep.sandbox_key), [id]);

    // Without the schema, anything goes again.
    s.patch_endpoint(&ep.slug, &json!({ "schema": null }));
    assert_status(
        &post_raw(&s, &ep, r#"{"customer":"x","total":"many"}"#),
        202,
    );
}

#[test]
fn a_new_schema_leaves_stored_records_alone_and_the_dry_run_counts_what_it_would_refuse() {
    let s = TestServer::start();
    let ep = s.create_endpoint("signups", &[]);
    let payloads = [
        json!({ "email": "a@example.com" }),
        json!({ "email": "b" }),
        json!({ "name": "no email" }),
        json!({ "email": "d@example.com" }),
        json!({ "email": 5 }),
    ];
    let ids: Vec<String> = payloads
        .iter()
        .map(|p| {
            let r = s.post_record(&ep.slug, &ep.sandbox_key, p);
            assert_status(&r, 202);
            r.json()["id"].as_str().unwrap().to_string()
        })
        .collect();
    let schema = json!({
        "type": "object",
        "required": ["email"],
        "properties": { "email": { "type": "string", "format": "email" } }
    });
    let check_path = format!("/api/v1/manage/endpoints/{}/schema/check", ep.slug);

    let r = s.manage("POST", &check_path, Some(&json!({ "schema": schema })));
    assert_status(&r, 200);
    let report = r.json();
    assert_eq!(report["environment"], "sandbox");
    assert_eq!(report["checked"], 5);
    assert_eq!(report["failed"], 3);
    let examples: Vec<&str> = report["examples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    // Newest first.
    assert_eq!(
        examples,
        [ids[4].as_str(), ids[2].as_str(), ids[1].as_str()]
    );
    assert_eq!(
        report["examples"][0]["errors"][0]["instance_path"],
        "/email"
    );
    assert_eq!(report["examples"][0]["errors"][0]["keyword"], "type");
    assert_eq!(report["examples"][1]["errors"][0]["keyword"], "required");

    // Only the newest `limit`.
    let r = s.manage(
        "POST",
        &check_path,
        Some(&json!({ "schema": schema, "limit": 2 })),
    );
    assert_eq!(
        (r.json()["checked"].clone(), r.json()["failed"].clone()),
        (json!(2), json!(1))
    );
    // Production holds nothing yet.
    let r = s.manage(
        "POST",
        &check_path,
        Some(&json!({ "schema": schema, "environment": "production" })),
    );
    assert_eq!(r.json()["checked"], 0);
    for bad_limit in [json!(0), json!(10_001)] {
        let r = s.manage(
            "POST",
            &check_path,
            Some(&json!({ "schema": schema, "limit": bad_limit })),
        );
        assert_error(&r, 400, "invalid_parameter");
    }
    let r = s.manage(
        "POST",
        &check_path,
        Some(&json!({ "schema": { "type": "nope" } })),
    );
    assert_error(&r, 400, "invalid_schema");
    // The dry run saved nothing.
    assert_eq!(stored_schema(&s, &ep.slug), Value::Null);

    // Saving it never touches what is stored: every record reads as before.
    let before: Vec<String> = ids
        .iter()
        .map(|id| s.get_record(&ep.slug, &ep.sandbox_key, id).text())
        .collect();
    s.patch_endpoint(&ep.slug, &json!({ "schema": schema }));
    let after: Vec<String> = ids
        .iter()
        .map(|id| s.get_record(&ep.slug, &ep.sandbox_key, id).text())
        .collect();
    assert_eq!(before, after);
    assert_eq!(s.list_ids(&ep.slug, &ep.sandbox_key).len(), 5);
    // From now on, writes are checked.
    let r = s.post_record(&ep.slug, &ep.sandbox_key, &json!({ "email": "b" }));
    assert_error(&r, 400, "schema_violation");
}
