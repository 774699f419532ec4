//! Mail: the outbox, delivery over SMTP, and `/api/v1/manage/mail`.
//!
//! What is checked:
//! - The test e-mail reaches a real SMTP server (`common::smtp`, on loopback) with the right
//!   envelope, `From`, `To`, `Subject`, `Date`, `Message-ID` and body, and shows `sent`;
//!   the default recipient is the calling account; SMTP AUTH is used when configured.
//! - A permanent refusal (550) is `failed` with the server's answer after one attempt; a
//!   temporary one (451) stays `queued` with the answer and a retry a minute later.
//! - Without `[smtp]` the message stays `queued`, the log names its recipient and subject
//!   (never its body), and it goes out after a restart with `[smtp]`.
//! - Authentication, validation, 404 for unknown ids, and the listing with cursors.
//! - On an in-process server with a manual clock: the retry waits for its time, six
//!   transient failures give up, and finished messages are purged after 30 days.

use crate::common;

use std::thread;
use std::time::{Duration, Instant};

use common::in_process::{InProcessServer, at};
use common::smtp::SmtpServer;
use common::*;
use intake::domain::mail::OutgoingMail;
use serde_json::{Value, json};

const MAIL: &str = "/api/v1/manage/mail";
const TEST: &str = "/api/v1/manage/mail/test";
const FROM: &str = "Intake <intake@example.com>";
const PUBLIC_URL: &str = "https://intake.example.test";
const WAIT: Duration = Duration::from_secs(30);

/// A config with a recognisable `public_url` and `[smtp]` pointing at `smtp`.
fn config(smtp: &SmtpServer) -> String {
    format!("public_url = \"{PUBLIC_URL}\"\n{}", smtp.config_toml(FROM))
}

fn mail_path(id: u64) -> String {
    format!("{MAIL}/{id}")
}

fn id_of(v: &Value) -> u64 {
    v["id"]
        .as_u64()
        .unwrap_or_else(|| panic!("no numeric id in {v}"))
}

/// `POST /mail/test` with `{"to": to}`; asserts the 202 and returns the message id.
#[track_caller]
fn send_test(s: &ServerClient, to: &str) -> u64 {
    let r = s.manage("POST", TEST, Some(&json!({ "to": to })));
    assert_status(&r, 202);
    let v = r.json();
    assert_eq!(v["status"], "queued", "{v}");
    id_of(&v)
}

/// Calls `get` until `pred` holds for its answer, with a deadline; returns that answer.
#[track_caller]
fn wait_until(what: &str, get: impl Fn() -> Value, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let v = get();
        if pred(&v) {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {WAIT:?} waiting for {what}; last: {v}"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

fn get_mail(s: &ServerClient, id: u64) -> Value {
    let r = s.manage("GET", &mail_path(id), None);
    assert_status(&r, 200);
    r.json()
}

#[track_caller]
fn wait_mail(s: &ServerClient, id: u64, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    wait_until(what, || get_mail(s, id), pred)
}

fn micros(v: &Value) -> i64 {
    let (secs, nanos) = ts(v);
    secs * 1_000_000 + i64::from(nanos / 1000)
}

// ---------------------------------------------------------------------------
// Delivery
// ---------------------------------------------------------------------------

#[test]
fn test_email_arrives_with_its_headers_and_shows_sent() {
    let smtp = SmtpServer::start();
    let s = TestServer::start_with_config(&config(&smtp));
    let id = send_test(&s, "ada@example.com");

    let got = smtp.wait_for(1, WAIT);
    let m = &got[0];
    assert_eq!(m.from, "intake@example.com");
    assert_eq!(m.to, ["ada@example.com"]);
    let from = m.header("From").expect("From header");
    assert!(
        from.contains("Intake") && from.contains("<intake@example.com>"),
        "{from}"
    );
    assert_eq!(m.header("To").as_deref(), Some("ada@example.com"));
    assert_eq!(m.subject(), "intake test e-mail");
    assert!(m.header("Date").is_some(), "no Date header: {}", m.data);
    let message_id = m.header("Message-ID").expect("Message-ID header");
    assert!(
        message_id.starts_with('<') && message_id.contains('@'),
        "{message_id}"
    );
    let content_type = m.header("Content-Type").unwrap_or_default();
    assert!(
        content_type.starts_with("text/plain") && content_type.contains("utf-8"),
        "{content_type}"
    );
    let body = m.body_text();
    assert!(
        body.contains(PUBLIC_URL),
        "body does not name the server: {body:?}"
    );
    assert!(body.contains("test e-mail"), "{body:?}");
    assert_eq!(m.auth, None);

    let v = wait_mail(&s, id, "status sent", |v| v["status"] == "sent");
    assert_eq!(v["id"], id);
    assert_eq!(v["kind"], "test");
    assert_eq!(v["to"], "ada@example.com");
    assert_eq!(v["subject"], "intake test e-mail");
    assert_eq!(v["attempts"], 1);
    assert_eq!(v["last_error"], Value::Null);
    assert_eq!(v["next_attempt_at"], Value::Null);
    assert!(micros(&v["sent_at"]) >= micros(&v["created_at"]), "{v}");
    assert_eq!(v["body"].as_str(), Some(body.as_str()));

    let list = s.manage("GET", MAIL, None);
    assert_status(&list, 200);
    let list = list.json();
    assert_eq!(list["smtp_configured"], true);
    assert_eq!(list["pagination"], json!({}));
    let data = list["data"].as_array().expect("data array");
    assert_eq!(data.len(), 1, "{list}");
    let listed = &data[0];
    assert!(
        listed.get("body").is_none(),
        "the list must not carry bodies: {listed}"
    );
    for key in [
        "id",
        "kind",
        "to",
        "subject",
        "status",
        "attempts",
        "last_error",
        "created_at",
        "next_attempt_at",
        "sent_at",
    ] {
        assert_eq!(listed[key], v[key], "{key} differs between list and detail");
    }
}

#[test]
fn test_email_goes_to_the_calling_account_by_default() {
    let smtp = SmtpServer::start();
    let s = TestServer::start_with_config(&config(&smtp));
    // No body at all, then an empty JSON object.
    let auth = format!("Bearer {}", s.owner_token);
    let r = s.request("POST", TEST, &[("Authorization", &auth)], None);
    assert_status(&r, 202);
    let first = id_of(&r.json());
    let r = s.manage("POST", TEST, Some(&json!({})));
    assert_status(&r, 202);
    let second = id_of(&r.json());
    assert!(second > first);
    let got = smtp.wait_for(2, WAIT);
    for m in &got {
        assert_eq!(m.to, [OWNER_EMAIL]);
    }
    for id in [first, second] {
        let v = wait_mail(&s, id, "status sent", |v| v["status"] == "sent");
        assert_eq!(v["to"], OWNER_EMAIL);
    }
}

#[test]
fn smtp_auth_is_used_when_configured_and_the_password_is_never_logged() {
    let smtp = SmtpServer::start_with_auth("intake-user", "s3cret-pa55");
    let s = TestServer::start_with_config(&config(&smtp));
    let id = send_test(&s, "ada@example.com");
    let got = smtp.wait_for(1, WAIT);
    assert_eq!(got[0].auth.as_deref(), Some("intake-user"));
    wait_mail(&s, id, "status sent", |v| v["status"] == "sent");
    assert!(
        !s.log.text().contains("s3cret-pa55"),
        "the SMTP password appears in the log"
    );
}

#[test]
fn permanent_refusal_fails_at_once_with_the_servers_answer() {
    let smtp = SmtpServer::start();
    smtp.fail_with(Some((550, "5.1.1 mailbox unavailable".into())));
    let s = TestServer::start_with_config(&config(&smtp));
    let id = send_test(&s, "nobody@example.com");
    let v = wait_mail(&s, id, "status failed", |v| v["status"] != "queued");
    assert_eq!(v["status"], "failed", "{v}");
    assert_eq!(v["attempts"], 1);
    assert_eq!(v["last_error"], "550 5.1.1 mailbox unavailable");
    assert_eq!(v["next_attempt_at"], Value::Null);
    assert_eq!(v["sent_at"], Value::Null);
    assert!(smtp.messages().is_empty());
}

#[test]
fn temporary_refusal_stays_queued_with_a_retry_a_minute_later() {
    let smtp = SmtpServer::start();
    smtp.fail_with(Some((451, "4.3.0 try again later".into())));
    let s = TestServer::start_with_config(&config(&smtp));
    let id = send_test(&s, "ada@example.com");
    let v = wait_mail(&s, id, "a first attempt", |v| v["attempts"] != 0);
    assert_eq!(v["status"], "queued", "{v}");
    assert_eq!(v["attempts"], 1);
    assert_eq!(v["last_error"], "451 4.3.0 try again later");
    let wait = micros(&v["next_attempt_at"]) - micros(&v["created_at"]);
    assert!(
        (60_000_000..120_000_000).contains(&wait),
        "the retry is not about a minute after the attempt: {v}"
    );
    assert!(smtp.messages().is_empty());
}

#[test]
fn without_smtp_mail_stays_queued_and_goes_out_after_a_restart_with_smtp() {
    let mut s = TestServer::start();
    let id = send_test(&s, "ada@example.com");
    let line = s
        .log
        .wait_for(
            0,
            WAIT,
            |l| l.contains(&format!("mail {id} not sent")),
            || false,
        )
        .expect("no log line about the unsent e-mail");
    assert!(line.contains("INFO"), "{line}");
    assert!(
        line.contains("to ada@example.com") && line.contains("subject \"intake test e-mail\""),
        "{line}"
    );
    assert!(
        !s.log.text().contains("This is a test e-mail"),
        "the body was logged"
    );
    let v = wait_mail(&s, id, "the no-SMTP note", |v| !v["last_error"].is_null());
    assert_eq!(v["status"], "queued");
    assert_eq!(v["attempts"], 0);
    assert!(
        v["last_error"]
            .as_str()
            .unwrap()
            .contains("no SMTP server is configured"),
        "{v}"
    );
    let list = s.manage("GET", MAIL, None).json();
    assert_eq!(list["smtp_configured"], false);
    assert_eq!(list["data"][0]["status"], "queued");

    assert!(s.sigterm_and_wait().success());
    let smtp = SmtpServer::start();
    s.restart_with_config(&config(&smtp));
    let got = smtp.wait_for(1, WAIT);
    assert_eq!(got[0].to, ["ada@example.com"]);
    assert_eq!(got[0].subject(), "intake test e-mail");
    let v = wait_mail(&s, id, "status sent", |v| v["status"] == "sent");
    assert_eq!(v["attempts"], 1);
    assert_eq!(v["last_error"], Value::Null);
    assert_eq!(s.manage("GET", MAIL, None).json()["smtp_configured"], true);
}

// ---------------------------------------------------------------------------
// The management calls
// ---------------------------------------------------------------------------

#[test]
fn mail_calls_require_a_valid_token() {
    let s = TestServer::start();
    for (method, path) in [
        ("GET", MAIL),
        ("GET", "/api/v1/manage/mail/1"),
        ("POST", TEST),
    ] {
        let r = s.manage_with(method, path, None, None);
        assert_error(&r, 401, "missing_token");
        let r = s.manage_with(method, path, Some("Bearer itk_not_a_token"), None);
        assert_error(&r, 401, "invalid_token");
    }
    assert_eq!(s.manage("GET", MAIL, None).json()["data"], json!([]));
}

#[test]
fn bad_requests_are_refused_and_queue_nothing() {
    let s = TestServer::start();
    for body in [
        json!({"to": "not an address"}),
        json!({"to": "ada@example.com, bob@example.com"}),
        json!({"to": "ada@example.com\r\nBcc: eve@example.com"}),
        json!({"to": ""}),
        json!({"to": 5}),
        json!({"recipient": "ada@example.com"}),
    ] {
        let r = s.manage("POST", TEST, Some(&body));
        assert_error(&r, 400, "invalid_request");
    }
    let auth = format!("Bearer {}", s.owner_token);
    let r = s.request(
        "POST",
        TEST,
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        Some(b"{\"to\":"),
    );
    assert_error(&r, 400, "invalid_json");
    let r = s.request(
        "POST",
        TEST,
        &[("Authorization", &auth)],
        Some(b"to=ada@example.com"),
    );
    assert_error(&r, 415, "unsupported_media_type");
    assert_eq!(s.manage("GET", MAIL, None).json()["data"], json!([]));

    assert_error(
        &s.manage("GET", &mail_path(999), None),
        404,
        "mail_not_found",
    );
    for bad in ["abc", "-1", "1.5"] {
        let r = s.manage("GET", &format!("{MAIL}/{bad}"), None);
        assert_error(&r, 400, "invalid_parameter");
    }
    assert_error(&s.manage("GET", TEST, None), 405, "method_not_allowed");
    assert_error(&s.manage("DELETE", MAIL, None), 405, "method_not_allowed");
    for q in ["limit=0", "limit=101", "limit=x", "cursor=nonsense"] {
        let r = s.manage("GET", &format!("{MAIL}?{q}"), None);
        assert_error(&r, 400, "invalid_parameter");
    }
}

#[test]
fn the_outbox_lists_newest_first_in_pages() {
    let s = TestServer::start();
    let ids: Vec<u64> = (0..5)
        .map(|i| send_test(&s, &format!("user{i}@example.com")))
        .collect();
    let v = s.manage("GET", MAIL, None).json();
    let all: Vec<u64> = v["data"].as_array().unwrap().iter().map(id_of).collect();
    let mut newest_first = ids.clone();
    newest_first.reverse();
    assert_eq!(all, newest_first, "default page (limit 20)");

    let mut paged = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let q = match &cursor {
            Some(c) => format!("limit=2&cursor={}", url_encode(c)),
            None => "limit=2".to_string(),
        };
        let r = s.manage("GET", &format!("{MAIL}?{q}"), None);
        assert_status(&r, 200);
        let v = r.json();
        let data = v["data"].as_array().unwrap();
        assert!(data.len() <= 2);
        paged.extend(data.iter().map(id_of));
        pages += 1;
        match v.pointer("/pagination/next_cursor") {
            Some(Value::String(c)) => cursor = Some(c.clone()),
            None => break,
            Some(other) => panic!("next_cursor is not a string: {other}"),
        }
        assert!(pages < 10, "pagination does not end");
    }
    assert_eq!(paged, newest_first);
    assert_eq!(pages, 3);

    // A cursor of another listing is refused.
    let ep = s.create_endpoint("orders", &[]);
    for i in 0..3 {
        s.create_record(&ep.slug, &ep.sandbox_key, &json!({ "i": i }));
    }
    let list = s.list(&ep.slug, &ep.sandbox_key, "limit=1").json();
    let foreign = list["pagination"]["next_cursor"].as_str().unwrap();
    let r = s.manage(
        "GET",
        &format!("{MAIL}?cursor={}", url_encode(foreign)),
        None,
    );
    assert_error(&r, 400, "invalid_parameter");
}

// ---------------------------------------------------------------------------
// In-process server on a manual clock
// ---------------------------------------------------------------------------

/// When the in-process servers' clocks start.
const START: &str = "2026-01-01T00:00:00Z";

/// The ids in the outbox, newest first.
fn mail_ids(s: &ServerClient) -> Vec<u64> {
    let r = s.manage("GET", &format!("{MAIL}?limit=100"), None);
    assert_status(&r, 200);
    r.json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(id_of)
        .collect()
}

#[test]
fn a_temporary_failure_is_retried_only_once_its_minute_has_passed() {
    let smtp = SmtpServer::start();
    smtp.fail_with(Some((451, "4.3.0 try again later".into())));
    let s = InProcessServer::start(&config(&smtp), at(START));
    let first = send_test(&s, "ada@example.com");
    let v = wait_mail(&s, first, "the first attempt", |v| v["attempts"] == 1);
    assert_eq!(v["status"], "queued");
    assert_eq!(v["last_error"], "451 4.3.0 try again later");

    // 59 s later the retry is not due. A second message wakes the worker, which scans the
    // whole outbox: once that message has arrived, the first one has been passed over.
    smtp.fail_with(None);
    s.clock.advance(Duration::from_secs(59));
    let second = send_test(&s, "bob@example.com");
    let got = smtp.wait_for(1, WAIT);
    assert_eq!(got[0].to, ["bob@example.com"]);
    wait_mail(&s, second, "the second message sent", |v| {
        v["status"] == "sent"
    });
    let v = get_mail(&s, first);
    assert_eq!(v["status"], "queued", "retried before its time: {v}");
    assert_eq!(v["attempts"], 1);

    // Past the minute, the worker retries it on its own.
    s.clock.advance(Duration::from_secs(2));
    let v = wait_mail(&s, first, "the retry", |v| v["status"] != "queued");
    assert_eq!(v["status"], "sent", "{v}");
    assert_eq!(v["attempts"], 2);
    assert_eq!(v["last_error"], Value::Null);
    let got = smtp.wait_for(2, WAIT);
    assert_eq!(got[1].to, ["ada@example.com"]);
}

#[test]
fn six_temporary_failures_give_up() {
    let smtp = SmtpServer::start();
    smtp.fail_with(Some((421, "4.7.0 too busy".into())));
    let s = InProcessServer::start(&config(&smtp), at(START));
    let id = send_test(&s, "ada@example.com");
    wait_mail(&s, id, "attempt 1", |v| v["attempts"] == 1);
    for (i, delay) in intake::domain::mail::RETRY_DELAYS.iter().enumerate() {
        let attempt = i as u64 + 2;
        let before = get_mail(&s, id);
        assert_eq!(before["status"], "queued", "{before}");
        s.clock.advance(*delay);
        wait_mail(&s, id, &format!("attempt {attempt}"), |v| {
            v["attempts"] == attempt
        });
    }
    let v = get_mail(&s, id);
    assert_eq!(v["status"], "failed", "{v}");
    assert_eq!(v["attempts"], 6);
    assert_eq!(v["last_error"], "421 4.7.0 too busy");
    assert_eq!(v["next_attempt_at"], Value::Null);
    assert!(smtp.messages().is_empty());
}

#[test]
fn sent_and_failed_mail_is_purged_after_30_days_queued_mail_is_kept() {
    let smtp = SmtpServer::start();
    let s = InProcessServer::start(&config(&smtp), at(START));
    let sent = send_test(&s, "ada@example.com");
    wait_mail(&s, sent, "sent", |v| v["status"] == "sent");
    smtp.fail_with(Some((550, "5.1.1 mailbox unavailable".into())));
    let failed = send_test(&s, "nobody@example.com");
    wait_mail(&s, failed, "failed", |v| v["status"] == "failed");
    smtp.fail_with(Some((451, "4.3.0 try again later".into())));
    let queued = send_test(&s, "later@example.com");
    wait_mail(&s, queued, "a first attempt", |v| v["attempts"] == 1);

    // At 29 days nothing is old enough. (The retry of `queued`, long due, shows that the
    // worker has seen the new time.)
    s.clock.advance(Duration::from_secs(29 * 86_400));
    wait_mail(&s, queued, "a retry", |v| v["attempts"] == 2);
    assert_eq!(mail_ids(&s), [queued, failed, sent]);

    s.clock.advance(Duration::from_secs(2 * 86_400));
    wait_until(
        "the purge",
        || json!(mail_ids(&s)),
        |ids| ids == &json!([queued]),
    );
    assert_error(
        &s.manage("GET", &mail_path(sent), None),
        404,
        "mail_not_found",
    );
}

#[test]
fn mail_queued_before_the_start_is_sent_with_non_ascii_text_intact() {
    let smtp = SmtpServer::start();
    let subject = "Einladung für Zoë — intake ✓";
    let body = "Grüße, Zoë!\n.a line that starts with a dot\n\n".to_string()
        + &"long line ".repeat(120)
        + "\nend\n";
    let now = at(START);
    let s = InProcessServer::start_with(&config(&smtp), now, |store, _| {
        let mail = OutgoingMail {
            kind: "invitation",
            to: "Zoë Example <zoe@example.com>".into(),
            subject: subject.into(),
            body: body.clone(),
        };

        let bad = OutgoingMail {
            kind: "invitation",
            to: "not an address".into(),
            subject: "x".into(),
            body: "x".into(),
        };
        intake::store::write(store, |tx| {
            intake::domain::mail::enqueue(tx, now, mail.clone())?;
            // Refused before anything is written.
            assert!(intake::domain::mail::enqueue(tx, now, bad.clone()).is_err());
            Ok::<_, intake::domain::error::Error>(())
        })
        .unwrap();
    });
    let got = smtp.wait_for(1, WAIT);
    let m = &got[0];
    assert_eq!(m.to, ["zoe@example.com"]);
    assert_eq!(m.subject(), subject);
    assert_eq!(
        m.header("To").as_deref(),
        Some("Zoë Example <zoe@example.com>")
    );
    assert_eq!(m.body_text(), body);
    assert!(m.data.is_ascii(), "the message is not 7-bit clean");
    let v = wait_until("sent", || json!(mail_ids(&s)), |ids| ids == &json!([1]));
    assert_eq!(v, json!([1]));
    let v = wait_mail(&s, 1, "sent", |v| v["status"] == "sent");
    assert_eq!(v["kind"], "invitation");
    assert_eq!(v["to"], "Zoë Example <zoe@example.com>");
    assert_eq!(v["subject"], subject);
    assert_eq!(v["body"], body.as_str());
}
