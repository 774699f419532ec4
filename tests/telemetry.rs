//! OpenTelemetry: traces exported over OTLP/HTTP (JSON) to a collector on loopback (a real
//! HTTP receiver standing in for one), and W3C `traceparent` carried from a caller's request
//! into its webhook deliveries.
//!
//! What is checked, on the real binary:
//! - A data call sent with a `traceparent` is a server span under the caller's span, with
//!   `ingest.queue` and `ingest.commit` spans under it; its owner and caller webhook attempts
//!   are client spans in the same trace, and each receiver gets a `traceparent` naming its
//!   attempt's span.
//! - Attributes are methods, routes, statuses, ids and hosts: no payload, auth value, key or
//!   URL path reaches the collector.
//! - A request without `traceparent` starts a trace of its own; an unsampled one is not
//!   recorded; without `[telemetry]` nothing is exported, but a caller's `traceparent` is still
//!   passed on to its webhook deliveries.
//! - Credentials in `otlp_endpoint` (`user:password@`, percent-encoded) reach the collector as
//!   HTTP Basic auth, decoded, and the URL's query stays on `/v1/traces`; `intake check` and
//!   the server's log never show the password or the query.

use crate::common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::prelude::BASE64_STANDARD;
use common::receiver::Receiver;
use common::receiver::Reply;
use common::*;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(20);
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

/// Every span the collector received so far, by span id.
fn spans(collector: &Receiver) -> HashMap<String, Value> {
    let mut spans = HashMap::new();
    for request in collector.requests() {
        assert_eq!(request.header("content-type"), Some("application/json"));
        let body = request.json();
        for resource in body["resourceSpans"].as_array().unwrap() {
            let service = &resource["resource"]["attributes"][0];
            assert_eq!(service["key"], "service.name");
            assert_eq!(service["value"]["stringValue"], "intake-test");
            for scope in resource["scopeSpans"].as_array().unwrap() {
                for span in scope["spans"].as_array().unwrap() {
                    spans.insert(span["spanId"].as_str().unwrap().to_string(), span.clone());
                }
            }
        }
    }
    spans
}

/// Waits until the collector holds a span that `found` picks.
fn wait_for_span(collector: &Receiver, found: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(span) = spans(collector).into_values().find(|s| found(s)) {
            return span;
        }
        assert!(Instant::now() < deadline, "{:#?}", spans(collector));
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn attribute<'a>(span: &'a Value, key: &str) -> &'a Value {
    span["attributes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["key"] == key)
        .map_or(&Value::Null, |a| &a["value"])
}

fn named<'a>(name: &'a str, parent: &'a str) -> impl Fn(&Value) -> bool + 'a {
    move |s: &Value| s["name"] == name && s["parentSpanId"] == parent
}

/// A server with telemetry to `collector` (if any) and an owner webhook to `hooks`.
fn setup(collector: Option<&Receiver>, hooks: &Receiver) -> (TestServer, Endpoint) {
    let telemetry = collector.map_or(String::new(), |c| {
        format!(
            "[telemetry]\notlp_endpoint = \"{}\"\nservice_name = \"intake-test\"\n",
            c.url("")
        )
    });
    let s = TestServer::start_with_config(&format!(
        "[webhooks]\nallow_private_targets = true\n{telemetry}"
    ));
    let ep = s.create_endpoint("Traced", &[]);
    let path = format!("/api/v1/manage/endpoints/{}/webhooks/sandbox", ep.slug);
    let config = json!({ "url": hooks.url("/owner/secret-path"), "auth_header": "X-Owner-Token",
                         "auth_value": "owner-s3cret" });
    assert_status(&s.manage("PUT", &path, Some(&config)), 200);
    (s, ep)
}

#[test]
fn a_traced_write_and_its_webhook_attempts_are_spans_of_the_callers_trace() {
    let collector = Receiver::start();
    let hooks = Receiver::start();
    let (s, ep) = setup(Some(&collector), &hooks);
    let traceparent = format!("00-{TRACE}-{CALLER_SPAN}-01");
    let callback = hooks.url("/caller");
    let r = s.data_with(
        "POST",
        &format!("/api/v1/data/{}", ep.slug),
        &ep.sandbox_key,
        &[
            ("traceparent", &traceparent),
            ("X-Webhook-Callback", &callback),
            ("X-Webhook-Auth", "Bearer caller-s3cret"),
        ],
        Some(&json!({"card": "PAYLOAD-MARKER-4242"})),
    );
    assert_status(&r, 202);
    let record_id = r.json()["id"].as_str().unwrap().to_string();

    // The server's span, under the caller's.
    let server = wait_for_span(&collector, named("POST /api/v1/data/{slug}", CALLER_SPAN));
    assert_eq!(server["traceId"], TRACE);
    assert_eq!(server["kind"], 2);
    assert_eq!(
        attribute(&server, "http.route")["stringValue"],
        "/api/v1/data/{slug}"
    );
    assert_eq!(
        attribute(&server, "http.response.status_code")["intValue"],
        "202"
    );
    assert_eq!(
        attribute(&server, "intake.request_id")["stringValue"],
        r.request_id().as_str()
    );
    let server_id = server["spanId"].as_str().unwrap().to_string();
    // Queue wait, then commit, inside the request.
    let queue = wait_for_span(&collector, named("ingest.queue", &server_id));
    let commit = wait_for_span(&collector, named("ingest.commit", &server_id));
    let time = |s: &Value, k: &str| s[k].as_str().unwrap().parse::<u128>().unwrap();
    assert!(time(&queue, "endTimeUnixNano") <= time(&commit, "startTimeUnixNano"));
    assert!(time(&server, "startTimeUnixNano") <= time(&queue, "startTimeUnixNano"));
    assert!(time(&commit, "endTimeUnixNano") <= time(&server, "endTimeUnixNano"));
    assert_eq!(commit["traceId"], TRACE);

    // One attempt span per receiver, in the same trace, each named in the receiver's
    // traceparent.
    let received = hooks.wait_for(2, WAIT);
    for got in &received {
        let header = got.header("traceparent").expect("a traceparent");
        let parts: Vec<&str> = header.split('-').collect();
        assert_eq!(
            (parts[0], parts[1], parts[3]),
            ("00", TRACE, "01"),
            "{header}"
        );
        let attempt = wait_for_span(&collector, |s| s["spanId"] == parts[2]);
        assert_eq!(attempt["name"], "webhook.attempt");
        assert_eq!(attempt["kind"], 3);
        assert_eq!(attempt["traceId"], TRACE);
        assert_eq!(attempt["parentSpanId"], server_id.as_str());
        assert_eq!(
            attribute(&attempt, "webhook.id")["stringValue"],
            record_id.as_str()
        );
        assert_eq!(
            attribute(&attempt, "server.address")["stringValue"],
            "127.0.0.1"
        );
        assert_eq!(
            attribute(&attempt, "http.response.status_code")["intValue"],
            "200"
        );
        assert_eq!(attribute(&attempt, "webhook.attempt")["intValue"], "1");
    }
    let kinds: Vec<String> = spans(&collector)
        .values()
        .filter(|s| s["name"] == "webhook.attempt")
        .map(|s| attribute(s, "intake.webhook.kind")["stringValue"].to_string())
        .collect();
    assert!(kinds.contains(&"\"owner\"".into()) && kinds.contains(&"\"caller\"".into()));

    // Nothing secret or private reached the collector.
    let exported: String = collector.requests().iter().map(|r| r.body_text()).collect();
    for secret in [
        "PAYLOAD-MARKER-4242",
        "owner-s3cret",
        "caller-s3cret",
        "secret-path",
        ep.sandbox_key.as_str(),
    ] {
        assert!(!exported.contains(secret), "{secret} was exported");
    }
}

#[test]
fn untraced_calls_start_a_trace_and_unsampled_ones_are_not_recorded() {
    let collector = Receiver::start();
    let hooks = Receiver::start();
    let (s, ep) = setup(Some(&collector), &hooks);
    // Without a traceparent: a trace of the server's own, its root the server span.
    let r = s.data_with(
        "GET",
        &format!("/api/v1/data/{}", ep.slug),
        &ep.sandbox_key,
        &[],
        None,
    );
    assert_status(&r, 200);
    let root = wait_for_span(&collector, |s| {
        s["name"] == "GET /api/v1/data/{slug}" && s.get("parentSpanId").is_none()
    });
    assert_eq!(root["traceId"].as_str().unwrap().len(), 32);
    assert_ne!(root["traceId"], TRACE);
    // Unsampled (flags 00): passed on, not recorded.
    let unsampled = format!("00-{TRACE}-{CALLER_SPAN}-00");
    let r = s.data_with(
        "POST",
        &format!("/api/v1/data/{}", ep.slug),
        &ep.sandbox_key,
        &[("traceparent", &unsampled)],
        Some(&json!({"n": 1})),
    );
    assert_status(&r, 202);
    let got = hooks.wait_for(1, WAIT);
    let header = got[0].header("traceparent").unwrap();
    assert!(header.starts_with(&format!("00-{TRACE}-")) && header.ends_with("-00"));
    // A sampled call after it is exported; the unsampled one before it never was.
    let after = s.data_with(
        "GET",
        &format!("/api/v1/data/{}", ep.slug),
        &ep.sandbox_key,
        &[(
            "traceparent",
            &format!("00-{TRACE}-{}-01", "1111111111111111"),
        )],
        None,
    );
    assert_status(&after, 200);
    wait_for_span(&collector, |s| s["parentSpanId"] == "1111111111111111");
    assert!(
        spans(&collector)
            .values()
            .all(|s| s["traceId"] != TRACE || s["parentSpanId"] == "1111111111111111"),
        "an unsampled request was recorded"
    );
    // Health checks are not traced.
    assert_status(&s.request("GET", "/healthz", &[], None), 200);
}

#[test]
fn without_telemetry_a_callers_traceparent_still_reaches_its_webhooks() {
    let hooks = Receiver::start();
    let (s, ep) = setup(None, &hooks);
    let traceparent = format!("00-{TRACE}-{CALLER_SPAN}-01");
    let r = s.data_with(
        "POST",
        &format!("/api/v1/data/{}", ep.slug),
        &ep.sandbox_key,
        &[("traceparent", &traceparent)],
        Some(&json!({"n": 1})),
    );
    assert_status(&r, 202);
    let traced = r.json()["id"].as_str().unwrap().to_string();
    // And a write without one sends none.
    let plain = s.post_record(&ep.slug, &ep.sandbox_key, &json!({"n": 2}));
    assert_status(&plain, 202);
    let plain = plain.json()["id"].as_str().unwrap().to_string();
    let got = hooks.wait_for(2, WAIT);
    let header_of = |id: &str| {
        got.iter()
            .find(|g| g.header("webhook-id") == Some(id))
            .expect("a delivery")
            .header("traceparent")
    };
    assert_eq!(header_of(&traced), Some(traceparent.as_str()));
    assert_eq!(header_of(&plain), None);
}

#[test]
fn the_collectors_credentials_go_as_basic_auth_and_are_never_printed() {
    let collector = Receiver::start();
    // Refused once (the exporter logs it), then taken.
    collector.script([Reply::status(401)]);
    let endpoint = format!(
        "http://intake%40team:p%40ss%3Aw0rd@{}/?tenant=t0ken",
        collector.addr
    );
    let toml =
        format!("[telemetry]\notlp_endpoint = \"{endpoint}\"\nservice_name = \"intake-test\"\n");
    let s = TestServer::start_with_config_env(&toml, &[("RUST_LOG", "debug")]);
    let ep = s.create_endpoint("Traced", &[]);
    let mut exports = Vec::new();
    for n in 0..2 {
        assert_status(&s.list(&ep.slug, &ep.sandbox_key, ""), 200);
        exports = collector.wait_for(n + 1, WAIT);
    }
    let basic = format!("Basic {}", BASE64_STANDARD.encode("intake@team:p@ss:w0rd"));
    for export in &exports {
        assert_eq!(export.header("authorization"), Some(basic.as_str()));
        assert_eq!(export.path, "/v1/traces?tenant=t0ken");
        assert_eq!(
            export.header("host"),
            Some(collector.addr.to_string().as_str())
        );
    }
    s.log
        .wait_for(
            0,
            WAIT,
            |line| line.contains("the collector answered 401"),
            || false,
        )
        .expect("the refused export is logged");

    let config = s.dir.path().join("intake.toml").display().to_string();
    let out = run_cli(
        intake_cmd().args(["check", "--config", &config]),
        Duration::from_secs(60),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        printed.contains(&format!(
            "otlp_endpoint = \"http://intake%40team:***@{}/?***\"",
            collector.addr
        )),
        "{printed}"
    );
    let log = s.log.text();
    for shown in [&printed, &log] {
        for secret in [
            "w0rd",
            "p%40ss",
            "t0ken",
            BASE64_STANDARD.encode("intake@team:p@ss:w0rd").as_str(),
        ] {
            assert!(!shown.contains(secret), "{secret} shown:\n{shown}");
        }
    }
}
