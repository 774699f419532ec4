//! Access holds for as long as a change stream is open (issue #37, docs/src/security.md,
//! "Change streams"): a stream is checked again, with the rule of a new data call, whenever
//! access changes and at every heartbeat, and ends with a `stream.error` event carrying the
//! code a data call with its key would get now.
//!
//! What is checked, on the real binary over loopback (and on PostgreSQL in CI's second run;
//! two nodes in `cluster.rs`):
//! - every change that takes a stream's access away ends it: the owner's rotation with no
//!   grace, revoke-previous, the owner rotating a collaborator's key, a collaborator's read
//!   permission removed, a collaborator removed, their account suspended, the endpoint
//!   deactivated, the endpoint deleted; nothing written after the change reaches it;
//! - under concurrent writes, no event committed after the revocation is sent (the bound);
//! - a replaced key's stream ends when its grace period ends by the server's clock;
//! - the slots: per key holder across rotations, and per server below `max_connections`.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use common::in_process::{InProcessServer, at};
use common::sse::{Reader, open};
use common::*;
use serde_json::{Value, json};

/// A short heartbeat: a stream whose wake-up was missed would still end within it.
const CONFIG: &str = "[stream]\nheartbeat = \"300ms\"\n";

fn endpoint_path(slug: &str, rest: &str) -> String {
    format!("/api/v1/manage/endpoints/{slug}{rest}")
}

/// Reads `reader` to its end: the record ids of its events, and the data of the
/// `stream.error` event that ended it.
#[track_caller]
fn read_to_end(reader: &mut Reader) -> (Vec<String>, Value) {
    let mut ids = Vec::new();
    loop {
        let event = reader
            .next()
            .expect("the stream closed without a stream.error event");
        if event.kind == "stream.error" {
            assert!(
                reader.next().is_none(),
                "the stream went on after its error"
            );
            return (ids, event.data);
        }
        ids.push(event.data["data"]["id"].as_str().expect("id").to_string());
    }
}

/// The code a data call with `key` gets now.
fn data_call_code(s: &ServerClient, slug: &str, key: &str) -> String {
    let r = s.list(slug, key, "");
    assert!(r.status >= 400, "the key still reads: {}", r.describe());
    r.error_code().expect("an error code")
}

/// The streams open on the server, from `GET /metrics`.
fn streams_open(s: &ServerClient) -> u64 {
    let text = s.request("GET", "/metrics", &[], None).text();
    text.lines()
        .find_map(|line| line.strip_prefix("intake_streams_open "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no intake_streams_open in /metrics: {text}"))
}

/// Waits (10 s at most) until `done` holds.
#[track_caller]
fn wait_until(done: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "timed out");
        thread::sleep(Duration::from_millis(20));
    }
}

fn id_of(r: &Resp) -> String {
    assert_status(r, 202);
    r.json()["id"].as_str().expect("id").to_string()
}

/// A management call with a collaborator's session cookie.
fn as_member(
    s: &ServerClient,
    member: &Collaborator,
    method: &str,
    path: &str,
    body: Value,
) -> Resp {
    let cookie = format!("intake_session={}", member.cookie);
    s.request_json(method, path, &[("Cookie", cookie.as_str())], Some(&body))
}

/// What a change left: whose stream it must end, and a key that may still write (`None` when
/// no key may).
struct Changed {
    ended: Whose,
    writer: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Whose {
    Owner,
    Member,
    Both,
}

fn new_key(r: &Resp) -> String {
    assert_status(r, 200);
    r.json()["key"].as_str().expect("key").to_string()
}

#[test]
fn every_change_that_takes_access_away_ends_the_stream_with_the_data_call_s_code() {
    let s = TestServer::start_with_config(CONFIG);
    type Change = fn(&ServerClient, &Endpoint, &Collaborator) -> Changed;
    let cases: [(&str, Change); 8] = [
        ("the owner's rotation without grace", |s, e, _| {
            let path = endpoint_path(&e.slug, "/keys/sandbox/rotate");
            let r = s.manage("POST", &path, Some(&json!({"grace_period_seconds": 0})));
            Changed {
                ended: Whose::Owner,
                writer: Some(new_key(&r)),
            }
        }),
        ("revoke-previous after a rotation with grace", |s, e, _| {
            let rotate = endpoint_path(&e.slug, "/keys/sandbox/rotate");
            let r = s.manage(
                "POST",
                &rotate,
                Some(&json!({"grace_period_seconds": 3600})),
            );
            let writer = new_key(&r);
            // The grace period keeps the old key working: no reason to end its stream yet.
            assert_status(&s.list(&e.slug, &e.sandbox_key, ""), 200);
            let revoke = endpoint_path(&e.slug, "/keys/sandbox/revoke-previous");
            assert_status(&s.manage("POST", &revoke, None), 200);
            Changed {
                ended: Whose::Owner,
                writer: Some(writer),
            }
        }),
        ("the owner rotating the collaborator's key", |s, e, m| {
            let path = endpoint_path(
                &e.slug,
                &format!("/collaborators/{}/keys/sandbox/rotate", m.id),
            );
            let r = s.manage("POST", &path, Some(&json!({"grace_period_seconds": 0})));
            new_key(&r);
            Changed {
                ended: Whose::Member,
                writer: Some(e.sandbox_key.clone()),
            }
        }),
        ("the read permission removed", |s, e, m| {
            let path = endpoint_path(&e.slug, &format!("/collaborators/{}", m.id));
            let r = s.manage("PATCH", &path, Some(&json!({"permissions": ["create"]})));
            assert_status(&r, 200);
            Changed {
                ended: Whose::Member,
                writer: Some(e.sandbox_key.clone()),
            }
        }),
        ("the collaborator removed", |s, e, m| {
            let path = endpoint_path(&e.slug, &format!("/collaborators/{}", m.id));
            let r = s.manage("DELETE", &path, None);
            assert!(matches!(r.status, 200 | 204), "{}", r.describe());
            Changed {
                ended: Whose::Member,
                writer: Some(e.sandbox_key.clone()),
            }
        }),
        ("the collaborator's account suspended", |s, e, m| {
            let path = format!("/api/v1/manage/accounts/{}", m.id);
            let r = s.manage("PATCH", &path, Some(&json!({"suspended": true})));
            assert_status(&r, 200);
            Changed {
                ended: Whose::Member,
                writer: Some(e.sandbox_key.clone()),
            }
        }),
        ("the endpoint deactivated", |s, e, _| {
            s.patch_endpoint(&e.slug, &json!({"active": false}));
            Changed {
                ended: Whose::Both,
                writer: None,
            }
        }),
        ("the endpoint deleted", |s, e, _| {
            assert_status(&s.manage("DELETE", &endpoint_path(&e.slug, ""), None), 200);
            Changed {
                ended: Whose::Both,
                writer: None,
            }
        }),
    ];
    for (n, (case, change)) in cases.iter().enumerate() {
        let e = s.create_endpoint(&format!("access {n}"), &[]);
        let email = format!("m{n}@example.com");
        let m = add_collaborator(&s, &e.slug, &email, &["read", "create"]);
        let mut owner = open(s.addr(), &e.slug, &e.sandbox_key, None, "").expect("stream");
        let mut member = open(s.addr(), &e.slug, &m.sandbox_key, None, "").expect("stream");
        let before = id_of(&s.post_record(&e.slug, &e.sandbox_key, &json!({"n": "before"})));
        for stream in [&mut owner, &mut member] {
            assert_eq!(
                stream.next().expect("an event").data["data"]["id"],
                before.as_str()
            );
        }
        let changed = change(&s, &e, &m);
        // A write after the change must not reach an ended stream, and reaches the other.
        let after = changed
            .writer
            .as_ref()
            .map(|key| id_of(&s.post_record(&e.slug, key, &json!({"n": "after"}))));
        let streams = [
            (Whose::Owner, &mut owner, e.sandbox_key.as_str()),
            (Whose::Member, &mut member, m.sandbox_key.as_str()),
        ];
        for (whose, stream, key) in streams {
            if changed.ended == whose || changed.ended == Whose::Both {
                let (ids, error) = read_to_end(stream);
                assert!(
                    ids.is_empty(),
                    "{case}: {whose:?} got {ids:?} after the change"
                );
                let code = data_call_code(&s, &e.slug, key);
                assert_eq!(
                    error["error"]["code"].as_str(),
                    Some(code.as_str()),
                    "{case}"
                );
                let message = error["error"]["message"].as_str().unwrap_or_default();
                assert!(!message.is_empty(), "{case}: {error}");
            } else {
                let after = after.as_deref().expect("a write after the change");
                let event = stream.next().expect("the stream that may read goes on");
                assert_eq!(event.data["data"]["id"], after, "{case}");
            }
        }
    }
}

#[test]
fn no_event_committed_after_a_revocation_reaches_the_revoked_stream() {
    let s = TestServer::start_with_config(CONFIG);
    let e = s.create_endpoint("bound", &[]);
    let m = add_collaborator(&s, &e.slug, "reader@example.com", &["read"]);
    let mut stream = open(s.addr(), &e.slug, &m.sandbox_key, None, "").expect("stream");
    // Writers run before, during and after the revocation; each write is marked by whether
    // it was sent after the revocation's answer (so it committed after the revocation did).
    let revoked = Arc::new(AtomicBool::new(false));
    let after_revocation = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..3)
        .map(|w| {
            let client = ServerClient::new(s.addr(), String::new());
            let (slug, key) = (e.slug.clone(), e.sandbox_key.clone());
            let (revoked, after, stop) = (revoked.clone(), after_revocation.clone(), stop.clone());
            thread::spawn(move || {
                let mut i = 0;
                while !stop.load(Ordering::SeqCst) {
                    let sent_after = revoked.load(Ordering::SeqCst);
                    let id = id_of(&client.post_record(&slug, &key, &json!({"w": w, "i": i})));
                    if sent_after {
                        after.lock().unwrap().push(id);
                    }
                    i += 1;
                }
            })
        })
        .collect();
    // Let the stream see some writes, then revoke while they go on.
    for _ in 0..20 {
        assert_eq!(stream.next().expect("an event").kind, "record.created");
    }
    let path = endpoint_path(&e.slug, &format!("/collaborators/{}", m.id));
    let r = s.manage("PATCH", &path, Some(&json!({"permissions": ["create"]})));
    assert_status(&r, 200);
    revoked.store(true, Ordering::SeqCst);
    let (ids, error) = read_to_end(&mut stream);
    // Enough writes after the revocation to have had a chance to leak.
    while after_revocation.lock().unwrap().len() < 30 {
        thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::SeqCst);
    for writer in writers {
        writer.join().expect("writer");
    }
    assert_eq!(error["error"]["code"], "missing_permission_read", "{error}");
    let after = after_revocation.lock().unwrap();
    let leaked: Vec<&String> = ids.iter().filter(|id| after.contains(id)).collect();
    assert!(leaked.is_empty(), "sent after the revocation: {leaked:?}");
}

#[test]
fn a_replaced_key_s_stream_ends_when_its_grace_period_ends_by_the_server_s_clock() {
    let s = InProcessServer::start(CONFIG, at("2026-01-01T00:00:00Z"));
    let e = s.create_endpoint("grace", &[]);
    let mut stream = open(s.addr(), &e.slug, &e.sandbox_key, None, "").expect("stream");
    let rotate = endpoint_path(&e.slug, "/keys/sandbox/rotate");
    let r = s.manage("POST", &rotate, Some(&json!({"grace_period_seconds": 60})));
    assert_status(&r, 200);
    let new_key = r.json()["key"].as_str().expect("key").to_string();
    // Within the grace period the old key's stream goes on, across heartbeats.
    let first = id_of(&s.post_record(&e.slug, &new_key, &json!({"n": 1})));
    assert_eq!(
        stream.next().expect("an event").data["data"]["id"],
        first.as_str()
    );
    s.clock.advance(Duration::from_secs(59));
    let second = id_of(&s.post_record(&e.slug, &new_key, &json!({"n": 2})));
    assert_eq!(
        stream.next().expect("an event").data["data"]["id"],
        second.as_str()
    );
    // Past it, the next heartbeat ends the stream (no change commits to wake it), and what is
    // written meanwhile is not sent.
    s.clock.advance(Duration::from_secs(1));
    let _late = id_of(&s.post_record(&e.slug, &new_key, &json!({"n": 3})));
    let (ids, error) = read_to_end(&mut stream);
    assert!(ids.is_empty(), "sent after the grace period: {ids:?}");
    assert_eq!(error["error"]["code"], "invalid_api_key", "{error}");
    assert_eq!(
        data_call_code(&s, &e.slug, &e.sandbox_key),
        "invalid_api_key"
    );
}

#[test]
fn stream_slots_follow_the_key_holder_across_rotations_and_the_server_keeps_room_for_calls() {
    let s = TestServer::start_with_config(
        "[http]\nmax_connections = 24\n[stream]\nmax_per_key = 3\nheartbeat = \"300ms\"\n",
    );
    let e = s.create_endpoint("slots", &[]);
    let m = add_collaborator(&s, &e.slug, "looper@example.com", &["read"]);
    let rotate = endpoint_path(&e.slug, "/keys/sandbox/rotate");
    // The loop of the review: open three streams, rotate one's own key, again and again. With
    // a grace period the replaced key (and its streams) stay valid, yet hold the holder's
    // slots; at no moment does the holder have more than three streams open.
    let mut key = m.sandbox_key.clone();
    let mut held = Vec::new();
    for _ in 0..8 {
        for _ in 0..3 {
            match open(s.addr(), &e.slug, &key, None, "") {
                Ok(reader) => held.push(reader),
                Err(r) => assert_error(&r, 429, "too_many_streams"),
            }
            let open_now = streams_open(&s);
            assert!(open_now <= 3, "{open_now} streams open for one holder");
        }
        let r = as_member(
            &s,
            &m,
            "POST",
            &rotate,
            json!({"grace_period_seconds": 3600}),
        );
        key = new_key(&r);
    }
    // Rotating without grace ends every replaced key's streams and gives their slots back.
    let r = as_member(&s, &m, "POST", &rotate, json!({"grace_period_seconds": 0}));
    key = new_key(&r);
    wait_until(|| streams_open(&s) == 0);
    for reader in &mut held {
        assert_eq!(read_to_end(reader).1["error"]["code"], "invalid_api_key");
    }
    drop(held);
    let reopened: Vec<Reader> = (0..3)
        .map(|_| open(s.addr(), &e.slug, &key, None, "").expect("a slot came back"))
        .collect();

    // The server holds at most half its 24 connections in streams (the owner's own cap per
    // holder is 3, so four more holders fill it).
    let mut others = Vec::new();
    let mut at_capacity = None;
    for n in 0..4 {
        let other = add_collaborator(&s, &e.slug, &format!("o{n}@example.com"), &["read"]);
        for _ in 0..3 {
            match open(s.addr(), &e.slug, &other.sandbox_key, None, "") {
                Ok(reader) => others.push(reader),
                Err(r) => at_capacity = Some(r),
            }
        }
    }
    assert_eq!(reopened.len() + others.len(), 12);
    let refusal = at_capacity.expect("a stream past the server's cap");
    assert_error(&refusal, 503, "streams_at_capacity");
    assert!(
        refusal.header("retry-after").is_some(),
        "{}",
        refusal.describe()
    );
    // Data calls and health checks are still answered.
    assert_status(&s.request("GET", "/healthz", &[], None), 200);
    assert_status(&s.list(&e.slug, &e.sandbox_key, ""), 200);
    id_of(&s.post_record(&e.slug, &e.sandbox_key, &json!({"still": "served"})));
}
