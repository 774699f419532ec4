//! Webhook delivery: the dispatcher against a real receiver on loopback (`common::receiver`).
//!
//! Every test runs `intake::server::start` in-process with a manual clock (set to the real
//! time at start, so signatures verify with today's timestamps) and `[webhooks]
//! allow_private_targets = true`, except where the SSRF guard itself is checked.
//!
//! What is checked:
//! - The owner webhook and a caller webhook both deliver one write; create, replace and delete
//!   events carry the documented bodies and every documented header; the custom auth headers
//!   arrive but are redacted in the attempt log; an invalid callback URL is refused with 400
//!   `invalid_webhook` and nothing is written.
//! - Signatures verify with the public `standardwebhooks` Python package
//!   (`tests/verify_webhooks.py`), including the spec's known-answer vector, two signatures
//!   during a secret changeover and one after 24 hours.
//! - The retry schedule exactly (production 6 attempts, sandbox 4), every status class,
//!   Retry-After, redirects, timeouts, refused connections, the SSRF guard (a refused target
//!   is given up at once).
//! - Fairness: one endpoint's receivers that never answer hold at most its share of the
//!   workers, and another endpoint's delivery still goes out at once.
//! - A restart in the middle of a schedule neither loses nor advances the pending retry.
//! - The owner failure e-mail: one per endpoint per UTC day, production owner webhooks only.
//! - Manual redelivery, and the delivery log per environment and per record.
//! - Retention of the delivery log: a finished delivery is gone (404) once its environment's
//!   window has passed, a pending one stays until it has finished, then goes with the next
//!   hourly purge.
//! - What a collaborator sees of the delivery log: bodies and receivers' answers only with
//!   `read` on an active endpoint, owner subscription URLs never, another's caller-webhook URL
//!   by its origin only, and a `url` filter that finds nothing more.
//!
//! Timings are never asserted: states are awaited with deadline-bounded polling.

use crate::common;

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::in_process::InProcessServer;
use common::receiver::{Probe, Receiver, Reply};
use common::smtp::SmtpServer;
use common::*;
use intake::core::clock::{Clock, SystemClock};
use intake::domain::webhooks::policy::RETRY_DELAYS;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);
const SECOND: Duration = Duration::from_secs(1);
const PRIVATE_OK: &str = "[webhooks]\nallow_private_targets = true\n";

/// The in-process server on `toml`, its clock at the system's time now; it can be stopped and
/// started again on the same data dir and clock.
fn server(toml: &str) -> InProcessServer {
    InProcessServer::start(toml, SystemClock.now())
}

impl ServerClient {
    fn owner_webhook(&self, slug: &str, env: &str, config: Value) {
        let path = format!("/api/v1/manage/endpoints/{slug}/webhooks/{env}");
        assert_status(&self.manage("PUT", &path, Some(&config)), 200);
    }

    /// Creates a record (asserts 202); returns its id.
    fn create(&self, slug: &str, key: &str, extra: &[(&str, &str)], payload: &Value) -> String {
        let r = self.data_with(
            "POST",
            &format!("/api/v1/data/{slug}"),
            key,
            extra,
            Some(payload),
        );
        assert_status(&r, 202);
        r.json()["id"].as_str().expect("record id").to_string()
    }

    /// The delivery log of `slug` for `query` (`environment=…&record_id=…`).
    fn deliveries(&self, slug: &str, query: &str) -> Vec<Value> {
        let path = format!("/api/v1/manage/endpoints/{slug}/deliveries?limit=100&{query}");
        let r = self.manage("GET", &path, None);
        assert_status(&r, 200);
        r.json()["data"].as_array().expect("data").clone()
    }

    fn delivery(&self, slug: &str, id: u64) -> Value {
        let r = self.manage(
            "GET",
            &format!("/api/v1/manage/endpoints/{slug}/deliveries/{id}"),
            None,
        );
        assert_status(&r, 200);
        r.json()
    }

    #[track_caller]
    fn wait_delivery(
        &self,
        slug: &str,
        id: u64,
        what: &str,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + WAIT;
        loop {
            let v = self.delivery(slug, id);
            if pred(&v) {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}: {v}"
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until delivery `id` of `slug` is gone from the log (404 `delivery_not_found`).
    #[track_caller]
    fn wait_purged(&self, slug: &str, id: u64) {
        let path = format!("/api/v1/manage/endpoints/{slug}/deliveries/{id}");
        let deadline = Instant::now() + WAIT;
        loop {
            let r = self.manage("GET", &path, None);
            if r.status == 404 {
                return assert_error(&r, 404, "delivery_not_found");
            }
            assert_status(&r, 200);
            assert!(
                Instant::now() < deadline,
                "delivery {id} not purged: {}",
                r.describe()
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until `slug`'s log (for `query`) lists `n` deliveries; returns their ids, oldest
    /// first.
    #[track_caller]
    fn wait_listed(&self, slug: &str, query: &str, n: usize) -> Vec<u64> {
        let deadline = Instant::now() + WAIT;
        loop {
            let listed = self.deliveries(slug, query);
            if listed.len() >= n {
                let mut ids: Vec<u64> = listed.iter().map(|d| d["id"].as_u64().unwrap()).collect();
                ids.reverse();
                return ids;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {n} deliveries"
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// The kinds of the queued and sent e-mails, newest first.
    fn mail_kinds(&self) -> Vec<Value> {
        let r = self.manage("GET", "/api/v1/manage/mail?limit=100", None);
        assert_status(&r, 200);
        r.json()["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["kind"].clone())
            .collect()
    }
}

fn attempts(v: &Value) -> u64 {
    v["attempts"]
        .as_u64()
        .unwrap_or_else(|| panic!("no attempts: {v}"))
}

fn micros(v: &Value) -> i64 {
    let (secs, nanos) = ts(v);
    secs * 1_000_000 + i64::from(nanos / 1000)
}

/// The request headers an attempt log entry shows, by lowercase name.
fn logged_header<'a>(attempt: &'a Value, name: &str) -> Option<&'a str> {
    attempt["request_headers"]
        .as_array()?
        .iter()
        .find(|pair| {
            pair[0]
                .as_str()
                .is_some_and(|n| n.eq_ignore_ascii_case(name))
        })
        .and_then(|pair| pair[1].as_str())
}

/// Runs `tests/verify_webhooks.py` on `cases`; panics with its output unless all pass.
fn python_verifies(cases: &[Value]) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cases.json");
    std::fs::write(&path, serde_json::to_vec(cases).unwrap()).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/verify_webhooks.py");
    let out = std::process::Command::new("python3")
        .arg(script)
        .arg(&path)
        .output()
        .expect("run python3 (install standardwebhooks: see .ci/run)");
    assert!(
        out.status.success(),
        "standardwebhooks refused: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn case(secret: &str, got: &common::receiver::Received, check: &str) -> Value {
    let headers: serde_json::Map<String, Value> =
        ["webhook-id", "webhook-timestamp", "webhook-signature"]
            .iter()
            .map(|n| (n.to_string(), json!(got.header(n).unwrap_or_default())))
            .collect();
    json!({ "secret": secret, "headers": headers, "body": got.body_text(), "check": check })
}

// ---------------------------------------------------------------------------
// Events, headers, signatures
// ---------------------------------------------------------------------------

#[test]
fn owner_and_caller_webhooks_deliver_every_event_with_every_header() {
    let s = server(PRIVATE_OK);
    let owner_rx = Receiver::start();
    let caller_rx = Receiver::start();
    let ep = s.create_endpoint("Orders", &[]);
    s.owner_webhook(
        &ep.slug,
        "sandbox",
        json!({ "url": owner_rx.url("/owner"), "auth_header": "X-Owner-Token",
                "auth_value": "owner-s3cret" }),
    );
    let callback = caller_rx.url("/caller?x=1");
    let caller_headers = [
        ("X-Webhook-Callback", callback.as_str()),
        ("X-Webhook-Auth", "Bearer caller-s3cret"),
    ];
    let id = s.create(
        &ep.slug,
        &ep.sandbox_key,
        &caller_headers,
        &json!({ "n": 1 }),
    );
    let path = format!("/api/v1/data/{}/{id}", ep.slug);
    let owner_got = owner_rx.wait_for(1, WAIT);
    let caller_got = caller_rx.wait_for(1, WAIT);

    let secret = s.webhook_signing_secret(&ep.slug, "sandbox");
    let mut cases = Vec::new();
    for (got, auth_name, auth_value, path_seen) in [
        (&owner_got[0], "x-owner-token", "owner-s3cret", "/owner"),
        (
            &caller_got[0],
            "authorization",
            "Bearer caller-s3cret",
            "/caller?x=1",
        ),
    ] {
        assert_eq!(got.method, "POST");
        assert_eq!(got.path, path_seen);
        let ua = got.header("user-agent").unwrap_or_default();
        assert_eq!(ua, format!("svc-Webhook/{}", env!("CARGO_PKG_VERSION")));
        assert_eq!(got.header("content-type"), Some("application/json"));
        assert_eq!(got.header("x-svc-record-id"), Some(id.as_str()));
        assert_eq!(got.header("webhook-id"), Some(id.as_str()));
        assert_eq!(got.header("x-svc-delivery-attempt"), Some("1"));
        let stamp: i64 = got.header("webhook-timestamp").unwrap().parse().unwrap();
        assert_eq!(stamp, s.clock.now().as_micros().div_euclid(1_000_000));
        let signature = got.header("webhook-signature").unwrap();
        assert!(
            signature.starts_with("v1,") && !signature.contains(' '),
            "{signature}"
        );
        assert_eq!(got.header(auth_name), Some(auth_value));
        let body = got.json();
        assert_eq!(body["type"], "record.created");
        assert_eq!(body["data"]["id"], id.as_str());
        assert_eq!(body["data"]["endpoint"], ep.slug.as_str());
        assert_eq!(body["data"]["environment"], "sandbox");
        assert_eq!(body["data"]["payload"], json!({ "n": 1 }));
        assert!(body["timestamp"].is_string() && body["data"]["created_at"].is_string());
        cases.push(case(&secret, got, "verify"));
    }

    // Replace and delete: the owner webhook reports both (no callback on these calls).
    let r = s.data("PUT", &path, &ep.sandbox_key, Some(&json!({ "n": 2 })));
    assert_status(&r, 202);
    let got = owner_rx.wait_for(2, WAIT);
    assert_eq!(got[1].json()["type"], "record.replaced");
    assert_eq!(got[1].json()["data"]["payload"], json!({ "n": 2 }));
    cases.push(case(&secret, &got[1], "verify"));
    let r = s.data("DELETE", &path, &ep.sandbox_key, None);
    assert!(
        r.status == 202 || r.status == 200 || r.status == 204,
        "{}",
        r.describe()
    );
    let got = owner_rx.wait_for(3, WAIT);
    let deleted = got[2].json();
    assert_eq!(deleted["type"], "record.deleted");
    assert_eq!(deleted["data"]["id"], id.as_str());
    assert!(deleted["data"].get("payload").is_none(), "{deleted}");
    cases.push(case(&secret, &got[2], "verify"));
    python_verifies(&cases);

    // The log: four deliveries of the record, all delivered; the auth values and signatures
    // are redacted, the header names shown.
    let ids = s.wait_listed(&ep.slug, &format!("record_id={id}"), 4);
    assert_eq!(ids.len(), 4);
    let mut kinds = Vec::new();
    for delivery in ids {
        let v = s.wait_delivery(&ep.slug, delivery, "delivered", |v| {
            v["state"] == "delivered"
        });
        kinds.push(v["kind"].as_str().unwrap().to_string());
        let log = &v["attempt_log"][0];
        assert_eq!(log["status"], 200);
        assert_eq!(log["outcome"], "delivered");
        assert_eq!(log["response_body"], "answer 200");
        assert_eq!(logged_header(log, "webhook-signature"), Some("[redacted]"));
        assert_eq!(logged_header(log, "webhook-id"), Some(id.as_str()));
        assert_eq!(logged_header(log, "x-svc-delivery-attempt"), Some("1"));
        let text = v.to_string();
        assert!(
            !text.contains("s3cret"),
            "an auth value is in the log: {text}"
        );
        if v["kind"] == "caller" {
            assert_eq!(logged_header(log, "authorization"), Some("[redacted]"));
        } else {
            assert_eq!(logged_header(log, "x-owner-token"), Some("[redacted]"));
        }
    }
    kinds.sort();
    assert_eq!(kinds, ["caller", "owner", "owner", "owner"]);
    assert_eq!(s.deliveries(&ep.slug, "environment=sandbox").len(), 4);
    assert!(s.deliveries(&ep.slug, "environment=production").is_empty());

    // An invalid callback URL: 400, nothing written, nothing delivered.
    for bad in ["not a url", "ftp://example.com/x", "/relative"] {
        let r = s.data_with(
            "POST",
            &format!("/api/v1/data/{}", ep.slug),
            &ep.sandbox_key,
            &[("X-Webhook-Callback", bad)],
            Some(&json!({ "n": 3 })),
        );
        assert_error(&r, 400, "invalid_webhook");
    }
    let list = s.data(
        "GET",
        &format!("/api/v1/data/{}", ep.slug),
        &ep.sandbox_key,
        None,
    );
    assert_eq!(
        list.json()["data"].as_array().unwrap().len(),
        0,
        "{}",
        list.text()
    );
    assert_eq!(s.deliveries(&ep.slug, "").len(), 4);
}

#[test]
fn the_spec_vector_verifies_with_standardwebhooks() {
    let secret = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    let key = intake::domain::webhooks::signing::secret_key(secret).unwrap();
    let body = r#"{"email":"test@example.com","username":"test_user"}"#;
    let header = intake::domain::webhooks::signing::signature_header(
        &[key],
        "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk",
        1_649_367_553,
        body.as_bytes(),
    );
    assert_eq!(header, "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=");
    let headers = json!({ "webhook-id": "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk",
                          "webhook-timestamp": "1649367553", "webhook-signature": header });
    python_verifies(&[
        json!({ "secret": secret, "headers": headers, "body": body, "check": "signed" }),
    ]);
}

#[test]
fn a_changeover_sends_two_signatures_for_24_hours_then_one() {
    let s = server(PRIVATE_OK);
    let rx = Receiver::start();
    let ep = s.create_endpoint("Orders", &[]);
    s.owner_webhook(&ep.slug, "sandbox", json!({ "url": rx.url("/h") }));
    let old = s.webhook_signing_secret(&ep.slug, "sandbox");
    s.create(&ep.slug, &ep.sandbox_key, &[], &json!({ "n": 1 }));
    // Signed at send time: let the first one go out before the reissue.
    rx.wait_for(1, WAIT);
    let reissue = format!(
        "/api/v1/manage/endpoints/{}/webhook-secrets/sandbox/reissue",
        ep.slug
    );
    assert_status(&s.manage("POST", &reissue, None), 200);
    let new = s.webhook_signing_secret(&ep.slug, "sandbox");
    s.create(&ep.slug, &ep.sandbox_key, &[], &json!({ "n": 2 }));
    let got = rx.wait_for(2, WAIT);
    assert_eq!(
        got[0]
            .header("webhook-signature")
            .unwrap()
            .split(' ')
            .count(),
        1
    );
    assert_eq!(
        got[1]
            .header("webhook-signature")
            .unwrap()
            .split(' ')
            .count(),
        2
    );

    // A caller webhook that fails inside the window is retried after it: signed at send time,
    // the retry carries the new signature only.
    let late_rx = Receiver::start();
    late_rx.script([Reply::status(503)]);
    let late_url = late_rx.url("/late");
    s.create(
        &ep.slug,
        &ep.sandbox_key,
        &[("X-Webhook-Callback", &late_url)],
        &json!({ "n": "late" }),
    );
    let late = late_rx.wait_for(1, WAIT);
    // The retry is due 30 s after the failed attempt's outcome: let it be committed before
    // the clock moves, or the retry would be scheduled from the later time.
    let late_id = s
        .deliveries(&ep.slug, "")
        .iter()
        .find(|d| d["url"] == late_url.as_str())
        .and_then(|d| d["id"].as_u64())
        .expect("the caller delivery is listed");
    s.wait_delivery(&ep.slug, late_id, "attempt 1", |v| attempts(v) == 1);
    s.clock.advance(Duration::from_secs(24 * 3600));
    s.create(&ep.slug, &ep.sandbox_key, &[], &json!({ "n": 3 }));
    let got = rx.wait_for(4, WAIT);
    let late_retry = &late_rx.wait_for(2, WAIT)[1];
    assert_eq!(late_retry.header("x-svc-delivery-attempt"), Some("2"));
    for (got, count) in [(&late[0], 2), (late_retry, 1)] {
        let entries = got.header("webhook-signature").unwrap().split(' ').count();
        assert_eq!(entries, count);
    }
    // The owner webhook saw the late write too: keep the numbered ones.
    let got: Vec<_> = got
        .into_iter()
        .filter(|r| r.json()["data"]["payload"]["n"] != "late")
        .collect();
    assert_eq!(got.len(), 3);
    assert_eq!(
        got[2]
            .header("webhook-signature")
            .unwrap()
            .split(' ')
            .count(),
        1
    );
    python_verifies(&[
        case(&old, &got[0], "verify"),
        case(&new, &got[0], "not_signed"),
        case(&new, &got[1], "verify"),
        case(&old, &got[1], "verify"),
        case(&new, &got[2], "signed"),
        case(&old, &got[2], "not_signed"),
        case(&new, &late[0], "verify"),
        case(&old, &late[0], "verify"),
        case(&new, late_retry, "signed"),
        case(&old, late_retry, "not_signed"),
    ]);
}

// ---------------------------------------------------------------------------
// Retry policy
// ---------------------------------------------------------------------------

#[test]
fn the_retry_schedule_is_exact_in_production_and_sandbox() {
    let s = server(PRIVATE_OK);
    let probe = Probe::new(&s);
    let rx = Receiver::start();
    rx.always(Reply::status(503));
    let ep = s.create_endpoint("Orders", &[]);
    s.deploy(&ep.slug);
    for env in ["sandbox", "production"] {
        s.owner_webhook(&ep.slug, env, json!({ "url": rx.url(&format!("/{env}")) }));
    }
    s.create(&ep.slug, &ep.sandbox_key, &[], &json!({ "env": "sandbox" }));
    s.create(
        &ep.slug,
        &ep.production_key,
        &[],
        &json!({ "env": "production" }),
    );
    let sandbox = s.wait_listed(&ep.slug, "environment=sandbox", 1)[0];
    let production = s.wait_listed(&ep.slug, "environment=production", 1)[0];
    let both = [(sandbox, 4u64), (production, 6u64)];
    for (id, _) in both {
        s.wait_delivery(&ep.slug, id, "attempt 1", |v| attempts(v) == 1);
    }
    for (i, delay) in RETRY_DELAYS.iter().enumerate() {
        let done = i as u64 + 1;
        // One second early: the scheduler looks, and nothing is sent.
        s.clock.advance(*delay - SECOND);
        probe.look(&s);
        for (id, budget) in both {
            if done < budget {
                let v = s.delivery(&ep.slug, id);
                assert_eq!(attempts(&v), done, "attempt before its time: {v}");
                assert_eq!(v["state"], "pending");
            }
        }
        s.clock.advance(SECOND);
        for (id, budget) in both {
            if done < budget {
                s.wait_delivery(&ep.slug, id, "the retry", |v| attempts(v) == done + 1);
            }
        }
    }
    for (id, budget) in both {
        let v = s.wait_delivery(&ep.slug, id, "given up", |v| v["state"] == "given_up");
        assert_eq!(attempts(&v), budget, "{v}");
        assert_eq!(v["next_attempt_at"], Value::Null);
        let log = v["attempt_log"].as_array().unwrap();
        assert_eq!(log.len() as u64, budget);
        for (n, (a, b)) in log.iter().zip(log.iter().skip(1)).enumerate() {
            let gap = micros(&b["started_at"]) - micros(&a["started_at"]);
            assert_eq!(
                gap,
                RETRY_DELAYS[n].as_micros() as i64,
                "gap after attempt {}",
                n + 1
            );
            assert_eq!(a["outcome"], "retry");
            assert_eq!(a["status"], 503);
            assert_eq!(
                logged_header(b, "x-svc-delivery-attempt"),
                Some((n + 2).to_string().as_str())
            );
        }
        assert_eq!(log.last().unwrap()["outcome"], "given_up");
    }
    // Every attempt reached the receiver with its number.
    let got = rx.requests();
    assert_eq!(got.iter().filter(|r| r.path == "/sandbox").count(), 4);
    assert_eq!(got.iter().filter(|r| r.path == "/production").count(), 6);
}

#[test]
fn every_status_class_leads_to_its_outcome() {
    let s = server("[webhooks]\nallow_private_targets = true\ntimeout = \"1s\"\n");
    let ep = s.create_endpoint("Orders", &[]);
    // An HTTP date has whole seconds: the retry is due exactly then, a little under 10 min.
    let now = s.clock.now().as_micros();
    let date_secs = now.div_euclid(1_000_000) as u64 + 600;
    let date = httpdate::fmt_http_date(std::time::UNIX_EPOCH + Duration::from_secs(date_secs));
    let until_date = date_secs as i64 * 1_000_000 - now;
    let refused_port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    // (reply, expected state, expected wait before the retry in microseconds)
    let secs = |n: i64| n * 1_000_000;
    let retry_after = |value: &str| Reply::status(429).header("Retry-After", value);
    let cases: Vec<(Option<Reply>, &str, i64)> = vec![
        (Some(Reply::status(500)), "pending", secs(30)),
        (Some(Reply::status(502)), "pending", secs(30)),
        (Some(Reply::status(503)), "pending", secs(30)),
        (Some(Reply::status(501)), "given_up", secs(0)),
        (Some(Reply::status(505)), "given_up", secs(0)),
        (Some(Reply::status(400)), "given_up", secs(0)),
        (Some(Reply::status(404)), "given_up", secs(0)),
        (Some(Reply::status(409)), "given_up", secs(0)),
        (Some(Reply::status(429)), "pending", secs(30)),
        (Some(retry_after("10")), "pending", secs(30)),
        (Some(retry_after("120")), "pending", secs(120)),
        (Some(retry_after(&date)), "pending", until_date),
        (Some(retry_after("20000")), "pending", secs(30)),
        (
            Some(Reply::status(503).header("Retry-After", "120")),
            "pending",
            secs(30),
        ),
        (
            Some(Reply::status(302).header("Location", "http://127.0.0.1:1/elsewhere")),
            "pending",
            secs(30),
        ),
        (
            Some(Reply::status(200).delay(Duration::from_secs(3))),
            "pending",
            secs(30),
        ),
        (None, "pending", secs(30)),
        (Some(Reply::status(202)), "delivered", secs(0)),
    ];
    let mut receivers = Vec::new();
    for (reply, _, _) in &cases {
        let url = match reply {
            Some(reply) => {
                let rx = Receiver::start();
                rx.always(reply.clone());
                let url = rx.url("/h");
                receivers.push(Some(rx));
                url
            }
            None => {
                receivers.push(None);
                format!("http://127.0.0.1:{refused_port}/h")
            }
        };
        s.create(
            &ep.slug,
            &ep.sandbox_key,
            &[("X-Webhook-Callback", &url)],
            &json!({}),
        );
    }
    let ids = s.wait_listed(&ep.slug, "", cases.len());
    for ((reply, state, wait), id) in cases.iter().zip(ids) {
        let v = s.wait_delivery(&ep.slug, id, "attempt 1", |v| attempts(v) == 1);
        let what = format!("{reply:?}: {v}");
        assert_eq!(v["state"], *state, "{what}");
        let a = &v["attempt_log"][0];
        if *state == "pending" {
            assert_eq!(a["outcome"], "retry", "{what}");
            let gap = micros(&v["next_attempt_at"]) - micros(&a["started_at"]);
            assert_eq!(gap, *wait, "{what}");
        } else {
            assert_eq!(
                a["outcome"],
                if *state == "delivered" {
                    "delivered"
                } else {
                    "given_up"
                }
            );
            assert_eq!(v["next_attempt_at"], Value::Null);
        }
        match reply {
            Some(r) if r.delay.is_zero() => {
                assert_eq!(a["status"], r.status, "{what}");
                assert_eq!(a["response_body"], format!("answer {}", r.status), "{what}");
            }
            Some(_) => {
                assert_eq!(a["status"], Value::Null, "{what}");
                assert!(a["error"].as_str().unwrap().contains("timed out"), "{what}");
            }
            None => {
                assert_eq!(a["status"], Value::Null, "{what}");
                assert!(
                    a["error"].as_str().unwrap().contains("connection"),
                    "{what}"
                );
            }
        }
    }
    // The redirect was not followed: its receiver saw exactly one request.
    let redirect = receivers[14].as_ref().unwrap();
    assert_eq!(redirect.requests().len(), 1);
}

#[test]
fn loopback_targets_are_refused_unless_allowed() {
    let s = server("");
    let rx = Receiver::start();
    let ep = s.create_endpoint("Orders", &[]);
    s.create(
        &ep.slug,
        &ep.sandbox_key,
        &[("X-Webhook-Callback", &rx.url("/h"))],
        &json!({}),
    );
    let id = s.wait_listed(&ep.slug, "", 1)[0];
    let v = s.wait_delivery(&ep.slug, id, "attempt 1", |v| attempts(v) == 1);
    assert_eq!(
        v["state"], "given_up",
        "a refused target is given up at once, not retried: {v}"
    );
    assert_eq!(v["attempt_log"][0]["outcome"], "given_up", "{v}");
    let error = v["attempt_log"][0]["error"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        error.starts_with("target address 127.0.0.1 is not allowed (private or loopback)")
            && error.contains("webhooks.allow_private_targets")
            && error.contains("webhooks.allowed_cidrs"),
        "{error}"
    );
    assert!(rx.requests().is_empty());

    // A listed range lets it through.
    let s = server("[webhooks]\nallowed_cidrs = [\"127.0.0.0/8\"]\n");
    let ep = s.create_endpoint("Orders", &[]);
    s.create(
        &ep.slug,
        &ep.sandbox_key,
        &[("X-Webhook-Callback", &rx.url("/h"))],
        &json!({}),
    );
    rx.wait_for(1, WAIT);
}

#[test]
fn a_restart_keeps_the_pending_retry_and_its_time() {
    let mut s = server(PRIVATE_OK);
    let rx = Receiver::start();
    rx.script([Reply::status(503)]);
    let ep = s.create_endpoint("Orders", &[]);
    s.owner_webhook(&ep.slug, "sandbox", json!({ "url": rx.url("/h") }));
    s.create(&ep.slug, &ep.sandbox_key, &[], &json!({}));
    let id = s.wait_listed(&ep.slug, "", 1)[0];
    let before = s.wait_delivery(&ep.slug, id, "attempt 1", |v| attempts(v) == 1);

    s.restart();
    let probe = Probe::new(&s);
    s.clock.advance(Duration::from_secs(29));
    probe.look(&s);
    let v = s.delivery(&ep.slug, id);
    assert_eq!(attempts(&v), 1, "sent early after the restart: {v}");
    assert_eq!(v["next_attempt_at"], before["next_attempt_at"]);
    s.clock.advance(SECOND);
    let v = s.wait_delivery(&ep.slug, id, "delivered", |v| v["state"] == "delivered");
    assert_eq!(attempts(&v), 2);
    assert_eq!(rx.requests().len(), 2);
}

// ---------------------------------------------------------------------------
// Failure e-mail, redelivery
// ---------------------------------------------------------------------------

#[test]
fn a_given_up_production_owner_webhook_mails_the_owner_once_a_day() {
    let smtp = SmtpServer::start();
    let toml = format!(
        "{PRIVATE_OK}{}",
        smtp.config_toml("Intake <intake@example.com>")
    );
    let s = server(&toml);
    let rx = Receiver::start();
    rx.always(Reply::status(400));
    let ep = s.create_endpoint("Orders", &[]);
    s.deploy(&ep.slug);
    for env in ["sandbox", "production"] {
        s.owner_webhook(&ep.slug, env, json!({ "url": rx.url("/owner") }));
    }
    let callback = rx.url("/caller");
    let given_up = |env: &str, n: usize| {
        let ids = s.wait_listed(&ep.slug, &format!("environment={env}"), n);
        for id in ids {
            s.wait_delivery(&ep.slug, id, "given up", |v| v["state"] == "given_up");
        }
    };
    // Sandbox owner webhook and production caller webhooks: no e-mail.
    s.create(&ep.slug, &ep.sandbox_key, &[], &json!({}));
    given_up("sandbox", 1);
    // Two production writes, each with an owner and a caller webhook: one e-mail.
    for _ in 0..2 {
        s.create(
            &ep.slug,
            &ep.production_key,
            &[("X-Webhook-Callback", &callback)],
            &json!({}),
        );
    }
    given_up("production", 4);
    assert_eq!(s.mail_kinds(), [json!("webhook_failed")]);
    let got = smtp.wait_for(1, WAIT);
    assert_eq!(got[0].to, [OWNER_EMAIL]);
    assert!(
        got[0].subject().contains("Webhook delivery failed"),
        "{}",
        got[0].subject()
    );
    let body = got[0].body_text();
    let first = &s
        .deliveries(&ep.slug, "environment=production&limit=100")
        .into_iter()
        .rev()
        .find(|d| d["kind"] == "owner")
        .unwrap();
    for needle in [
        ep.slug.as_str(),
        first["record_id"].as_str().unwrap(),
        rx.url("/owner").as_str(),
        "HTTP 400",
        "Subscription: sub_1",
        &format!(
            "{}/dashboard/endpoints/{}/deliveries/{}\n",
            s.base_url(),
            ep.slug,
            first["id"]
        ),
    ] {
        assert!(body.contains(needle), "{needle:?} not in {body}");
    }

    // The next UTC day, the next given-up delivery mails again.
    s.clock.advance(Duration::from_secs(86_400));
    s.create(&ep.slug, &ep.production_key, &[], &json!({}));
    given_up("production", 5);
    assert_eq!(
        s.mail_kinds(),
        [json!("webhook_failed"), json!("webhook_failed")]
    );
}

#[test]
fn a_slow_receiver_with_a_long_backlog_does_not_hold_up_another() {
    // More due deliveries to the slow receiver than one look of the scheduler passes over:
    // the fast receiver's delivery, due after all of them, must still go out at once.
    let s = server(
        "[webhooks]\nallow_private_targets = true\nper_target_concurrency = 2\ntimeout = \"10s\"\n",
    );
    let slow = Receiver::start();
    slow.always(Reply::status(200).delay(Duration::from_secs(2)));
    let fast = Receiver::start();
    let ep = s.create_endpoint("Orders", &[]);
    s.owner_webhook(&ep.slug, "sandbox", json!({ "url": slow.url("/slow") }));
    for n in 0..300 {
        s.create(&ep.slug, &ep.sandbox_key, &[], &json!({ "n": n }));
    }
    let fast_url = fast.url("/fast");
    s.create(
        &ep.slug,
        &ep.sandbox_key,
        &[("X-Webhook-Callback", &fast_url)],
        &json!({ "n": "fast" }),
    );
    let got = fast.wait_for(1, WAIT);
    assert_eq!(got[0].json()["data"]["payload"]["n"], "fast");
    assert!(
        slow.requests().len() < 100,
        "the fast delivery waited for the slow backlog"
    );
}

#[test]
fn a_given_up_delivery_is_delivered_by_a_manual_redelivery() {
    let s = server(PRIVATE_OK);
    let rx = Receiver::start();
    rx.script([Reply::status(404)]);
    let ep = s.create_endpoint("Orders", &[]);
    s.owner_webhook(&ep.slug, "sandbox", json!({ "url": rx.url("/h") }));
    s.create(&ep.slug, &ep.sandbox_key, &[], &json!({}));
    let id = s.wait_listed(&ep.slug, "", 1)[0];
    s.wait_delivery(&ep.slug, id, "given up", |v| v["state"] == "given_up");
    let redeliver = format!(
        "/api/v1/manage/endpoints/{}/deliveries/{id}/redeliver",
        ep.slug
    );
    let r = s.manage("POST", &redeliver, None);
    assert_status(&r, 200);
    let v = s.wait_delivery(&ep.slug, id, "delivered", |v| v["state"] == "delivered");
    assert_eq!(attempts(&v), 2);
    assert_eq!(v["attempt_log"][1]["outcome"], "delivered");
    let got = rx.wait_for(2, WAIT);
    assert_eq!(got[1].header("x-svc-delivery-attempt"), Some("2"));
    assert_eq!(got[0].header("webhook-id"), got[1].header("webhook-id"));
    assert_error(&s.manage("POST", &redeliver, None), 409, "conflict");
}

// ---------------------------------------------------------------------------
// Retention of the delivery log
// ---------------------------------------------------------------------------

#[test]
fn finished_deliveries_go_after_the_retention_window_and_pending_ones_once_finished() {
    const DAY: Duration = Duration::from_secs(86_400);
    let s = server(PRIVATE_OK);
    let rx = Receiver::start();
    let ep = s.create_endpoint("Orders", &[]);
    s.deploy(&ep.slug);
    for env in ["sandbox", "production"] {
        s.owner_webhook(&ep.slug, env, json!({ "url": rx.url(&format!("/{env}")) }));
    }
    // Delivered at once: one in sandbox (kept 30 days), one in production (kept 60).
    s.create(&ep.slug, &ep.sandbox_key, &[], &json!({ "n": 1 }));
    s.create(&ep.slug, &ep.production_key, &[], &json!({ "n": 2 }));
    let delivered = s.wait_listed(&ep.slug, "environment=sandbox", 1)[0];
    let production = s.wait_listed(&ep.slug, "environment=production", 1)[0];
    for id in [delivered, production] {
        s.wait_delivery(&ep.slug, id, "delivered", |v| v["state"] == "delivered");
    }
    // Failing from now on: this one stays pending with attempts left.
    rx.always(Reply::status(503));
    s.create(&ep.slug, &ep.sandbox_key, &[], &json!({ "n": 3 }));
    let pending = s.wait_listed(&ep.slug, "environment=sandbox", 2)[1];
    s.wait_delivery(&ep.slug, pending, "attempt 1", |v| attempts(v) == 1);

    // 31 days on, both sandbox deliveries are past the window: the delivered one goes with
    // its attempts, the pending one (tried again now) stays, and production keeps its own.
    s.clock.advance(31 * DAY);
    s.wait_purged(&ep.slug, delivered);
    let v = s.wait_delivery(&ep.slug, pending, "attempt 2", |v| attempts(v) == 2);
    assert_eq!(v["state"], "pending", "{v}");
    let listed = s.deliveries(&ep.slug, "environment=sandbox");
    assert_eq!(
        listed.iter().map(|d| &d["id"]).collect::<Vec<_>>(),
        [&json!(pending)]
    );
    assert_eq!(s.delivery(&ep.slug, production)["state"], "delivered");

    // Once given up (sandbox: 4 attempts), it goes with the next hourly purge.
    for (delay, done) in RETRY_DELAYS[1..3].iter().zip(3..) {
        s.clock.advance(*delay);
        s.wait_delivery(&ep.slug, pending, "the retry", |v| attempts(v) == done);
    }
    s.wait_delivery(&ep.slug, pending, "given up", |v| v["state"] == "given_up");
    s.clock.advance(Duration::from_secs(3600));
    s.wait_purged(&ep.slug, pending);
    assert!(s.deliveries(&ep.slug, "environment=sandbox").is_empty());
    assert_eq!(s.delivery(&ep.slug, production)["state"], "delivered");
}

/// A receiver that accepts connections and never answers; dropping it closes them all, so
/// the attempts it holds end at once.
struct SilentReceiver {
    addr: std::net::SocketAddr,
    held: Arc<std::sync::Mutex<Vec<std::net::TcpStream>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl SilentReceiver {
    fn start() -> SilentReceiver {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let held = Arc::new(std::sync::Mutex::new(Vec::new()));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (keep, stopped) = (held.clone(), stop.clone());
        thread::spawn(move || {
            while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => keep.lock().unwrap().push(stream),
                    // Polled, so that dropping the receiver also closes the listener.
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        SilentReceiver { addr, held, stop }
    }

    fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    fn held(&self) -> usize {
        self.held.lock().unwrap().len()
    }
}

impl Drop for SilentReceiver {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for stream in self.held.lock().unwrap().drain(..) {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    }
}

#[test]
fn one_endpoints_dead_receivers_leave_workers_for_the_others() {
    // 8 workers and 4 per receiver (the defaults): without a cap per endpoint, 24 deliveries
    // to 3 receivers that never answer take all 8 workers for the whole timeout.
    let s = server("[webhooks]\nallow_private_targets = true\ntimeout = \"5m\"\n");
    let dead: Vec<SilentReceiver> = (0..3).map(|_| SilentReceiver::start()).collect();
    let busy = s.create_endpoint("Busy tenant", &[]);
    for n in 0..24 {
        let url = dead[n % 3].url();
        s.create(
            &busy.slug,
            &busy.sandbox_key,
            &[("X-Webhook-Callback", &url)],
            &json!({ "n": n }),
        );
    }
    let held = || dead.iter().map(SilentReceiver::held).sum::<usize>();
    let deadline = Instant::now() + WAIT;
    while held() < 4 {
        assert!(
            Instant::now() < deadline,
            "only {} attempts started",
            held()
        );
        thread::sleep(Duration::from_millis(10));
    }

    let fast = Receiver::start();
    let other = s.create_endpoint("Other tenant", &[]);
    s.create(
        &other.slug,
        &other.sandbox_key,
        &[("X-Webhook-Callback", &fast.url("/fast"))],
        &json!({ "other": true }),
    );
    let got = fast.wait_for(1, WAIT);
    assert_eq!(got[0].json()["data"]["payload"]["other"], true);
    // The busy endpoint holds its share (half the workers) and no more, while all 8 workers
    // would fit its 24 deliveries.
    assert_eq!(
        held(),
        4,
        "the busy endpoint took more than half the workers"
    );
}

/// A GET of the management API with a member's dashboard session.
fn as_member(s: &ServerClient, cookie: &str, path: &str) -> Resp {
    let cookie = format!("intake_session={cookie}");
    s.request("GET", path, &[("Cookie", cookie.as_str())], None)
}

/// `slug`'s delivery log for `query` as the member with `cookie` reads it: each listed
/// delivery's detail, and every answer's text (the list's and the details').
fn member_log(s: &ServerClient, cookie: &str, slug: &str, query: &str) -> (Vec<Value>, String) {
    let path = format!("/api/v1/manage/endpoints/{slug}/deliveries?limit=100&{query}");
    let r = as_member(s, cookie, &path);
    assert_status(&r, 200);
    let listed = r.json()["data"].as_array().expect("data").clone();
    let mut text = r.text();
    let details = listed
        .iter()
        .map(|d| {
            let path = format!("/api/v1/manage/endpoints/{slug}/deliveries/{}", d["id"]);
            let r = as_member(s, cookie, &path);
            assert_status(&r, 200);
            text.push_str(&r.text());
            r.json()
        })
        .collect();
    (details, text)
}

/// The delivery of `record` of `kind` (`owner` or `caller`) among `details`.
fn find<'a>(details: &'a [Value], record: &str, kind: &str) -> &'a Value {
    details
        .iter()
        .find(|d| d["record_id"] == record && d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} delivery of {record} in {details:?}"))
}

#[test]
fn the_delivery_log_shows_bodies_only_with_read_and_urls_only_to_whom_they_belong() {
    let receiver = Receiver::start();
    // A receiver that echoes what it got, as many do: its answer is as secret as the body.
    receiver.always(Reply::status(200).body(r#"{"echo":"payload-secret"}"#));
    let s = server(PRIVATE_OK);
    let ep = s.create_endpoint("Orders", &[]);
    let slug = &ep.slug;
    s.deploy(slug);
    for env in ["sandbox", "production"] {
        s.owner_webhook(
            slug,
            env,
            json!({ "url": receiver.url("/owner?token=owner-capability") }),
        );
    }
    let writer = add_collaborator(&s, slug, "writer@example.com", &["create"]);
    let reader = add_collaborator(&s, slug, "reader@example.com", &["create", "read"]);
    let endpoint_path = format!("/api/v1/manage/endpoints/{slug}");
    let writer_production = s
        .manage_with("GET", &endpoint_path, Some(&writer.authorization(&s)), None)
        .json()["production_key"]
        .as_str()
        .expect("writer's production key")
        .to_string();
    let payload = json!({ "card": "payload-secret" });
    let callback = |who: &str| receiver.url(&format!("/{who}?token={who}-capability"));
    let by_writer = s.create(
        slug,
        &writer.sandbox_key,
        &[("X-Webhook-Callback", &callback("writer"))],
        &payload,
    );
    let by_reader = s.create(
        slug,
        &reader.sandbox_key,
        &[("X-Webhook-Callback", &callback("reader"))],
        &payload,
    );
    let in_production = s.create(
        slug,
        &writer_production,
        &[("X-Webhook-Callback", &callback("writer"))],
        &payload,
    );
    // Every delivery answered (so every attempt keeps the receiver's echo).
    for (query, n) in [("environment=sandbox", 4), ("environment=production", 2)] {
        for id in s.wait_listed(slug, query, n) {
            s.wait_delivery(slug, id, "delivered", |v| v["state"] == "delivered");
        }
    }

    // A collaborator with `create` only: no body, no receiver's answer, no owner subscription
    // URL, another's caller URL cut to its origin, their own in full; sandbox and production.
    let origin = format!("http://{}", receiver.addr);
    for (query, records) in [
        ("environment=sandbox", vec![&by_writer, &by_reader]),
        ("environment=production", vec![&in_production]),
    ] {
        let (details, text) = member_log(&s, &writer.cookie, slug, query);
        for secret in ["payload-secret", "owner-capability", "reader-capability"] {
            assert!(!text.contains(secret), "{secret} shown: {text}");
        }
        for record in records {
            let owner_hook = find(&details, record, "owner");
            assert_eq!(owner_hook["url"], Value::Null, "{owner_hook}");
            assert_eq!(owner_hook["withheld"], json!(["url", "body"]));
            assert_eq!(owner_hook["body"], Value::Null);
            assert_eq!(owner_hook["attempt_log"][0]["url"], Value::Null);
            assert_eq!(owner_hook["attempt_log"][0]["response_body"], Value::Null);
            assert_eq!(owner_hook["attempt_log"][0]["status"], 200);
        }
        if query == "environment=sandbox" {
            let own = find(&details, &by_writer, "caller");
            assert_eq!(own["url"], callback("writer"));
            assert_eq!(own["withheld"], json!(["body"]));
            let others = find(&details, &by_reader, "caller");
            assert_eq!(others["url"], origin.as_str());
            assert_eq!(others["attempt_log"][0]["url"], origin.as_str());
            assert_eq!(others["withheld"], json!(["url", "body"]));
        }
    }
    // The URL filter finds only what the viewer is shown.
    let count = |cookie: &str, query: &str| member_log(&s, cookie, slug, query).0.len();
    assert_eq!(count(&writer.cookie, "url=owner-capability"), 0);
    assert_eq!(count(&writer.cookie, "url=reader-capability"), 0);
    assert_eq!(count(&writer.cookie, "url=/reader"), 0);
    assert_eq!(count(&writer.cookie, "url=writer-capability"), 1);
    assert_eq!(count(&writer.cookie, &format!("url={}", receiver.addr)), 2);
    assert_eq!(s.deliveries(slug, "url=owner-capability").len(), 2);

    // With `read`: the bodies and answers, but still no owner URL and no other's caller URL.
    let (details, text) = member_log(&s, &reader.cookie, slug, "environment=sandbox");
    assert!(!text.contains("owner-capability") && !text.contains("writer-capability"));
    let own = find(&details, &by_reader, "caller");
    assert_eq!(own["withheld"], json!([]));
    assert!(own["body"].as_str().unwrap().contains("payload-secret"));
    assert_eq!(
        own["attempt_log"][0]["response_body"],
        r#"{"echo":"payload-secret"}"#
    );
    assert_eq!(
        find(&details, &by_writer, "caller")["withheld"],
        json!(["url"])
    );
    assert_eq!(
        find(&details, &by_writer, "owner")["withheld"],
        json!(["url"])
    );

    // The owner sees everything, in the shape as before, with nothing withheld.
    for query in ["environment=sandbox", "environment=production"] {
        for listed in s.deliveries(slug, query) {
            assert_eq!(listed["withheld"], json!([]), "{listed}");
            let d = s.delivery(slug, listed["id"].as_u64().unwrap());
            assert!(
                d["body"].as_str().unwrap().contains("payload-secret"),
                "{d}"
            );
            assert!(d["url"].as_str().unwrap().contains("-capability"), "{d}");
            let attempt = &d["attempt_log"][0];
            assert_eq!(attempt["url"], d["url"]);
            assert_eq!(attempt["response_body"], r#"{"echo":"payload-secret"}"#);
        }
    }

    // While the endpoint is inactive, read or not, a collaborator sees no body (their keys
    // read nothing either); the owner still does.
    s.patch_endpoint(slug, &json!({ "active": false }));
    let (details, text) = member_log(&s, &reader.cookie, slug, "environment=sandbox");
    assert!(!text.contains("payload-secret"), "{text}");
    assert_eq!(
        find(&details, &by_reader, "caller")["withheld"],
        json!(["body"])
    );
    let d = s.delivery(
        slug,
        find(&details, &by_reader, "caller")["id"].as_u64().unwrap(),
    );
    assert!(d["body"].as_str().unwrap().contains("payload-secret"));
    s.patch_endpoint(slug, &json!({ "active": true }));
    let (_, text) = member_log(&s, &reader.cookie, slug, "environment=sandbox");
    assert!(text.contains("payload-secret"));

    // Acting on a delivery stays the owner's.
    let path = format!(
        "/api/v1/manage/endpoints/{slug}/deliveries/{}/retry",
        find(&details, &by_reader, "caller")["id"]
    );
    let cookie = format!("intake_session={}", writer.cookie);
    let r = s.request("POST", &path, &[("Cookie", cookie.as_str())], None);
    assert_error(&r, 403, "owner_only");
}
