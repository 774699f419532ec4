//! Batch ingest (`POST /api/v1/data/{slug}/batch`): NDJSON and JSON array bodies stored in
//! order, all or nothing, the limits, one Idempotency-Key for the batch, the quota counting
//! records, and each record's own webhooks and change-stream event in the order sent.

use crate::common;

use std::time::Duration;

use common::in_process::InProcessServer;
use common::receiver::Receiver;
use common::*;
use intake::core::clock::{Clock, SystemClock};
use serde_json::{Value, json};

const NDJSON: &str = "application/x-ndjson";
const JSON: &str = "application/json";

impl ServerClient {
    /// Sends `body` to the batch route of `slug` as `content_type`, with `extra` headers.
    fn batch(
        &self,
        slug: &str,
        key: &str,
        content_type: &str,
        body: &[u8],
        extra: &[(&str, &str)],
    ) -> Resp {
        let auth = format!("Bearer {key}");
        let mut headers = vec![
            ("Authorization", auth.as_str()),
            ("Content-Type", content_type),
        ];
        headers.extend_from_slice(extra);
        self.request(
            "POST",
            &format!("/api/v1/data/{slug}/batch"),
            &headers,
            Some(body),
        )
    }
}

/// The ids of an accepted batch's answer, checking each entry's index and created_at.
fn accepted_ids(r: &Resp) -> Vec<String> {
    assert_status(r, 202);
    let body = r.json();
    let data = body["data"].as_array().expect("data");
    data.iter()
        .enumerate()
        .map(|(n, entry)| {
            assert_eq!(entry["index"], n, "{body}");
            let id = entry["id"].as_str().expect("id");
            assert!(is_record_id(id), "{id}");
            assert!(entry["created_at"].is_string(), "{body}");
            id.to_string()
        })
        .collect()
}

fn ndjson(payloads: &[Value]) -> Vec<u8> {
    let mut body = String::new();
    for payload in payloads {
        body.push_str(&payload.to_string());
        body.push('\n');
    }
    body.into_bytes()
}

#[test]
fn a_batch_in_ndjson_or_a_json_array_is_stored_in_the_order_sent() {
    let s = TestServer::start();
    let ep = s.create_endpoint("bulk", &[]);
    // Numbers, key order and text kept as sent; a blank line and CRLF line ends ignored.
    let body = "{\"n\":1,\"big\":12345678901234567890123,\"x\":1.50}\r\n\n  \n\
                {\"n\":2,\"b\":1,\"a\":2}\n\"text \\u00e9\"\n";
    let r = s.batch(&ep.slug, &ep.sandbox_key, NDJSON, body.as_bytes(), &[]);
    let first = accepted_ids(&r);
    assert_eq!(first.len(), 3, "{}", r.describe());
    let created: Vec<Value> = r.json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["created_at"].clone())
        .collect();
    assert!(created.windows(2).all(|w| w[0] == w[1]), "one created_at");
    let stored: Vec<String> = first
        .iter()
        .map(|id| {
            let record = s.get_record(&ep.slug, &ep.sandbox_key, id);
            assert_status(&record, 200);
            let text = record.text();
            let start = text.find("\"payload\":").expect("payload") + 10;
            let end = text.find(",\"created_at\"").expect("created_at");
            text[start..end].to_string()
        })
        .collect();
    assert_eq!(
        stored,
        vec![
            r#"{"n":1,"big":12345678901234567890123,"x":1.50}"#,
            r#"{"n":2,"b":1,"a":2}"#,
            "\"text é\"",
        ]
    );

    let array = br#"[ {"n": 3}, [4], null ]"#;
    let second = accepted_ids(&s.batch(&ep.slug, &ep.sandbox_key, JSON, array, &[]));
    assert_eq!(second.len(), 3);
    // Ids follow the order sent, so the list (newest first) shows it reversed.
    let sent: Vec<String> = first.iter().chain(&second).cloned().collect();
    let mut listed = s.list_ids(&ep.slug, &ep.sandbox_key);
    listed.reverse();
    assert_eq!(listed, sent);
    assert_eq!(
        s.get_record(&ep.slug, &ep.sandbox_key, &second[1]).json()["payload"],
        json!([4])
    );
    // The charset parameter is accepted as for a single POST.
    let r = s.batch(
        &ep.slug,
        &ep.sandbox_key,
        "application/x-ndjson; charset=utf-8",
        b"{}\n",
        &[],
    );
    assert_eq!(accepted_ids(&r).len(), 1);
}

#[test]
fn one_bad_record_refuses_the_whole_batch_naming_every_bad_one() {
    let s = TestServer::start();
    let ep = s.create_endpoint("strict", &["email"]);
    let too_large = format!("{{\"email\":\"a\",\"pad\":\"{}\"}}", "x".repeat(102_400));
    let body = format!(
        "{{\"email\":\"ok@example.com\"}}\n\nnot json\n{{\"email\":null}}\n[1]\n{too_large}\n\
         {{\"email\":\"fine@example.com\"}}\n"
    );
    let r = s.batch(&ep.slug, &ep.sandbox_key, NDJSON, body.as_bytes(), &[]);
    assert_error(&r, 400, "batch_invalid");
    let error = &r.json()["error"];
    let records = error["records"].as_array().expect("records");
    let named: Vec<(u64, &str)> = records
        .iter()
        .map(|e| (e["index"].as_u64().unwrap(), e["code"].as_str().unwrap()))
        .collect();
    assert_eq!(
        named,
        vec![
            (1, "invalid_json"),
            (2, "missing_required_field"),
            (3, "missing_required_field"),
            (4, "payload_too_large"),
        ]
    );
    assert!(
        records
            .iter()
            .all(|e| e["message"].as_str().is_some_and(|m| !m.is_empty()))
    );
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("nothing was stored"),
        "{error}"
    );
    // One bad record: the message names it.
    let r = s.batch(
        &ep.slug,
        &ep.sandbox_key,
        JSON,
        br#"[{"email":"a"},{"name":"b"}]"#,
        &[],
    );
    assert_error(&r, 400, "batch_invalid");
    let message = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(message.contains("index 1"), "{message}");
    assert!(message.contains("`email`"), "{message}");
    // Nothing of either batch was stored.
    assert!(s.list_ids(&ep.slug, &ep.sandbox_key).is_empty());
}

#[test]
fn empty_oversized_and_mistyped_batches_are_refused_and_change_nothing() {
    let s = TestServer::start();
    let ep = s.create_endpoint("limits", &[]);
    let (slug, key) = (ep.slug.as_str(), ep.sandbox_key.as_str());
    assert_error(&s.batch(slug, key, NDJSON, b"", &[]), 400, "batch_empty");
    assert_error(
        &s.batch(slug, key, NDJSON, b"\n \n", &[]),
        400,
        "batch_empty",
    );
    assert_error(&s.batch(slug, key, JSON, b"[]", &[]), 400, "batch_empty");
    assert_error(
        &s.batch(slug, key, JSON, br#"{"a":1}"#, &[]),
        400,
        "invalid_request",
    );
    assert_error(&s.batch(slug, key, JSON, b"[1,", &[]), 400, "invalid_json");
    let r = s.batch(slug, key, "text/plain", b"{}\n", &[]);
    assert_error(&r, 415, "unsupported_media_type");
    assert!(error_message(&r).contains("application/x-ndjson"));
    // 1,000 records pass; 1,001 are refused naming the limit.
    let thousand = "{}\n".repeat(1000);
    let r = s.batch(slug, key, NDJSON, thousand.as_bytes(), &[]);
    assert_eq!(accepted_ids(&r).len(), 1000);
    let r = s.batch(slug, key, NDJSON, "{}\n".repeat(1001).as_bytes(), &[]);
    assert_error(&r, 413, "batch_too_large");
    assert!(error_message(&r).contains("1000"), "{}", error_message(&r));
    // 5 MiB pass (the limit is on the body); one byte more is refused before any record.
    let line = format!("\"{}\"\n", "y".repeat(5240 - 3));
    let mut body = line.repeat(999);
    body.push_str(&format!(
        "\"{}\"",
        "z".repeat(5 * 1024 * 1024 - body.len() - 2)
    ));
    assert_eq!(body.len(), 5 * 1024 * 1024);
    assert_eq!(
        accepted_ids(&s.batch(slug, key, NDJSON, body.as_bytes(), &[])).len(),
        1000
    );
    // Declared one byte longer: refused from the headers, before the body is sent.
    let request = format!(
        "POST /api/v1/data/{slug}/batch HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: {NDJSON}\r\nContent-Length: {}\r\n\r\n",
        s.addr(),
        body.len() + 1
    );
    let (r, _) = raw_exchange(s.addr(), request.as_bytes(), Duration::from_secs(5));
    assert_error(&r, 413, "payload_too_large");
    assert!(
        error_message(&r).contains("5242880"),
        "{}",
        error_message(&r)
    );
    assert_eq!(s.list_ids(slug, key).len(), 2000);
}

#[test]
fn a_retried_batch_answers_the_same_ids_and_other_records_conflict() {
    let s = TestServer::start();
    let ep = s.create_endpoint("retries", &[]);
    let (slug, key) = (ep.slug.as_str(), ep.sandbox_key.as_str());
    let body = ndjson(&[json!({"n": 1}), json!({"n": 2})]);
    let first = s.batch(slug, key, NDJSON, &body, &[("Idempotency-Key", "flush-1")]);
    let ids = accepted_ids(&first);
    // The same records again, even sent as an array with other whitespace: the same answer.
    let again = s.batch(
        slug,
        key,
        JSON,
        br#"[{"n": 1}, {"n": 2}]"#,
        &[("Idempotency-Key", "flush-1")],
    );
    assert_eq!(again.json(), first.json());
    assert_eq!(s.list_ids(slug, key).len(), 2);
    // Other records, or a single POST with the key: 409.
    let other = ndjson(&[json!({"n": 1})]);
    let r = s.batch(slug, key, NDJSON, &other, &[("Idempotency-Key", "flush-1")]);
    assert_error(&r, 409, "idempotency_key_conflict");
    let r = s.data_with(
        "POST",
        &format!("/api/v1/data/{slug}"),
        key,
        &[("Idempotency-Key", "flush-1")],
        Some(&json!({"n": 1})),
    );
    assert_error(&r, 409, "idempotency_key_conflict");
    // A key first used by a single POST conflicts with a batch too.
    let r = s.data_with(
        "POST",
        &format!("/api/v1/data/{slug}"),
        key,
        &[("Idempotency-Key", "single-1")],
        Some(&json!({"n": 1})),
    );
    assert_status(&r, 202);
    let r = s.batch(
        slug,
        key,
        NDJSON,
        &other,
        &[("Idempotency-Key", "single-1")],
    );
    assert_error(&r, 409, "idempotency_key_conflict");
    let r = s.batch(slug, key, NDJSON, &other, &[("Idempotency-Key", "")]);
    assert_error(&r, 400, "invalid_idempotency_key");
    let mut listed = s.list_ids(slug, key);
    assert_eq!(listed.len(), 3, "the batch and the single POST");
    listed.reverse();
    assert_eq!(listed[..2], ids[..]);
}

#[test]
fn the_quota_counts_records_and_a_batch_that_would_cross_it_is_refused_whole() {
    let s = InProcessServer::start("[usage]\nmonthly_quota = 6\n", SystemClock.now());
    let ep = s.create_endpoint("metered", &[]);
    let (slug, key) = (ep.slug.as_str(), ep.sandbox_key.as_str());
    let records = |n: usize| ndjson(&(0..n).map(|i| json!(i)).collect::<Vec<_>>());
    let keyed = [("Idempotency-Key", "flush-1")];
    assert_eq!(
        accepted_ids(&s.batch(slug, key, NDJSON, &records(3), &keyed)).len(),
        3
    );
    // A refused batch counts nothing (nor one the commit refuses for its reused key); one
    // that would pass the quota is refused whole.
    let r = s.batch(slug, key, NDJSON, &records(2), &keyed);
    assert_error(&r, 409, "idempotency_key_conflict");
    let r = s.batch(slug, key, NDJSON, b"nope\n", &[]);
    assert_error(&r, 400, "batch_invalid");
    let r = s.batch(slug, key, NDJSON, &records(4), &[]);
    assert_error(&r, 429, "usage_limit_exceeded");
    assert!(r.header("retry-after").is_some());
    // The list is one call (3 + 1), and shows that nothing of the refused batch was stored.
    assert_eq!(s.list_ids(slug, key).len(), 3);
    assert_eq!(
        accepted_ids(&s.batch(slug, key, NDJSON, &records(2), &[])).len(),
        2
    );
    let r = s.batch(slug, key, NDJSON, &records(1), &[]);
    assert_error(&r, 429, "usage_limit_exceeded");
    let usage = s.manage(
        "GET",
        &format!("/api/v1/manage/endpoints/{slug}/usage"),
        None,
    );
    assert_status(&usage, 200);
    let sandbox: u64 = usage.json()["months"]
        .as_array()
        .expect("months")
        .iter()
        .map(|m| m["sandbox"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(sandbox, 6, "{}", usage.text());
}

#[test]
fn every_record_gets_its_own_webhooks_and_event_in_the_order_sent() {
    let s = InProcessServer::start(
        "[webhooks]\nallow_private_targets = true\n",
        SystemClock.now(),
    );
    let owner_rx = Receiver::start();
    let caller_rx = Receiver::start();
    let ep = s.create_endpoint("hooked", &[]);
    let path = format!("/api/v1/manage/endpoints/{}/webhooks/sandbox", ep.slug);
    let config = json!({ "url": owner_rx.url("/owner") });
    assert_status(&s.manage("PUT", &path, Some(&config)), 200);
    let mut stream =
        common::sse::open(s.addr(), &ep.slug, &ep.sandbox_key, None, "").expect("stream");
    let callback = caller_rx.url("/caller");
    let payloads: Vec<Value> = (0..5).map(|n| json!({ "n": n })).collect();
    let r = s.batch(
        &ep.slug,
        &ep.sandbox_key,
        NDJSON,
        &ndjson(&payloads),
        &[("X-Webhook-Callback", callback.as_str())],
    );
    let ids = accepted_ids(&r);
    for event in ids.iter().zip(&payloads) {
        let got = stream.next().expect("an event");
        assert_eq!(got.kind, "record.created");
        assert_eq!(got.data["data"]["id"], event.0.as_str());
        assert_eq!(got.data["data"]["payload"], *event.1);
    }
    for rx in [&owner_rx, &caller_rx] {
        let got = rx.wait_for(ids.len(), Duration::from_secs(30));
        let mut delivered: Vec<(String, Value)> = got
            .iter()
            .map(|request| {
                let body = request.json();
                assert_eq!(body["type"], "record.created");
                (
                    body["data"]["id"].as_str().unwrap().to_string(),
                    body["data"]["payload"].clone(),
                )
            })
            .collect();
        // Deliveries run in parallel: each record once, whatever the order of arrival.
        delivered.sort_by(|a, b| a.0.cmp(&b.0));
        let expected: Vec<(String, Value)> = ids.iter().cloned().zip(payloads.clone()).collect();
        assert_eq!(delivered, expected);
    }
}
