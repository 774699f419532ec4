//! The change stream: `GET /api/v1/data/{slug}/stream` (Server-Sent Events).
//!
//! What is checked, on the real binary over loopback (and on PostgreSQL in CI's second run):
//! - Each applied create, replace and delete is one event with the webhook body; refused
//!   writes make none; a stream opened without `Last-Event-ID` starts from now.
//! - A reader that disconnects and resumes with `Last-Event-ID` (or `?cursor=`) while several
//!   writers work sees every write exactly once, each writer's writes in the order they were
//!   acknowledged.
//! - Heartbeats; the read permission; bad and foreign ids (400); the cap per key (429).
//! - A reader that stops reading is sent `stream_reader_too_slow` and disconnected, and the
//!   server's memory stays flat while it writes far more than the reader's buffer.
//! - SIGTERM ends open streams, so the server stops at once.

use crate::common;

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use common::in_process::{InProcessServer, at};
use common::sse::{Event, open};
use common::*;
use serde_json::json;

fn setup(toml: &str) -> (TestServer, Endpoint) {
    let server = TestServer::start_with_config(toml);
    let endpoint = server.create_endpoint("Stream", &[]);
    (server, endpoint)
}

fn record_id(resp: &Resp) -> String {
    assert_status(resp, 202);
    resp.json()["id"].as_str().expect("id").to_string()
}

/// On PostgreSQL an event is settled, and follows the log's head, only once every older
/// transaction of the database server has ended: a stream opened while one runs must still
/// leave out what committed before it opened, and send what commits after.
#[test]
fn a_stream_opened_while_an_older_transaction_runs_starts_from_now() {
    if postgres_only("redb commits one writer at a time: every committed event is settled") {
        return;
    }
    let (s, e) = setup("");
    let key = &e.sandbox_key;
    let older = postgres::shared().hold_transaction(&database_of(&s.data_dir()));
    let before = record_id(&s.post_record(&e.slug, key, &json!({"n": 0})));
    let mut reader = open(s.addr(), &e.slug, key, None, "").expect("stream");
    let after = record_id(&s.post_record(&e.slug, key, &json!({"n": 1})));
    older.commit();
    let first = reader.next().expect("an event");
    assert_eq!(
        first.data["data"]["id"].as_str(),
        Some(after.as_str()),
        "the record made before the stream opened ({before}) is not in it"
    );
}

#[test]
fn each_applied_write_is_one_event_with_the_webhook_body() {
    let (s, e) = setup("");
    let key = &e.sandbox_key;
    let before = record_id(&s.post_record(&e.slug, key, &json!({"n": 0})));
    let mut reader = open(s.addr(), &e.slug, key, None, "").expect("stream");
    let a = record_id(&s.post_record(&e.slug, key, &json!({"n": 1})));
    let b = record_id(&s.post_record(&e.slug, key, &json!({"n": 2})));
    // An event carries its record as it is when the stream reads the event: the two creates
    // are taken before the records change. (On PostgreSQL an event is read only once every
    // older transaction of the server has ended, which another test can delay.)
    let mut seen: Vec<Event> = (0..2).map(|_| reader.next().expect("an event")).collect();
    assert_status(&s.put_record(&e.slug, key, &a, &json!({"n": 10})), 202);
    assert_status(&s.delete_record(&e.slug, key, &b), 202);
    // Refused writes make no event.
    assert_status(&s.delete_record(&e.slug, key, &b), 404);
    assert_status(
        &s.put_record(&e.slug, key, &unknown_record_id(), &json!({})),
        404,
    );
    let c = record_id(&s.post_record(&e.slug, key, &json!({"n": 3})));
    seen.extend((0..3).map(|_| reader.next().expect("an event")));
    let kinds: Vec<(&str, &str)> = seen
        .iter()
        .map(|e| (e.kind.as_str(), e.data["data"]["id"].as_str().unwrap()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("record.created", a.as_str()),
            ("record.created", b.as_str()),
            ("record.replaced", a.as_str()),
            ("record.deleted", b.as_str()),
            ("record.created", c.as_str()),
        ],
        "the record made before the stream opened ({before}) is not in it"
    );
    for event in &seen {
        assert_eq!(event.data["type"], event.kind.as_str());
        assert_eq!(event.data["data"]["endpoint"], e.slug.as_str());
        assert_eq!(event.data["data"]["environment"], "sandbox");
        assert!(event.id.is_some(), "{event:?}");
    }
    assert_eq!(seen[0].data["data"]["payload"], json!({"n": 1}));
    assert_eq!(seen[2].data["data"]["payload"], json!({"n": 10}));
    assert!(seen[3].data["data"].get("payload").is_none());

    // Resuming after the first event replays the rest; a record deleted since has no payload
    // in its created event (its delete follows).
    let mut resumed = open(s.addr(), &e.slug, key, seen[0].id.as_deref(), "").expect("stream");
    let again: Vec<Event> = (0..4).map(|_| resumed.next().expect("an event")).collect();
    let ids: Vec<_> = again.iter().map(|e| e.id.clone()).collect();
    let want: Vec<_> = seen[1..].iter().map(|e| e.id.clone()).collect();
    assert_eq!(ids, want);
    assert_eq!(again[0].data["data"]["id"], b.as_str());

    // `?cursor=` does the same when the header is absent; the header wins over it.
    let query = format!("?cursor={}", seen[3].id.as_deref().unwrap());
    let mut by_query = open(s.addr(), &e.slug, key, None, &query).expect("stream");
    assert_eq!(by_query.next().unwrap().id, seen[4].id);
    let mut both = open(s.addr(), &e.slug, key, seen[2].id.as_deref(), &query).expect("stream");
    assert_eq!(both.next().unwrap().id, seen[3].id);
}

#[test]
fn a_resuming_reader_sees_every_write_once_in_order_under_concurrent_writes() {
    let (s, e) = setup("");
    let (addr, slug, key) = (s.addr(), e.slug.clone(), e.sandbox_key.clone());
    let first = open(addr, &slug, &key, None, "").expect("stream");
    const WRITERS: usize = 3;
    const PER_WRITER: usize = 60;
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let client = ServerClient::new(addr, String::new());
            let (slug, key) = (slug.clone(), key.clone());
            thread::spawn(move || {
                // (record id, kind) in the order each write was acknowledged.
                let mut acked = Vec::new();
                for i in 0..PER_WRITER {
                    let id = record_id(&client.post_record(&slug, &key, &json!({"w": w, "i": i})));
                    acked.push((id.clone(), "record.created"));
                    if i % 5 == 0 {
                        assert_status(&client.put_record(&slug, &key, &id, &json!({"r": i})), 202);
                        acked.push((id.clone(), "record.replaced"));
                    }
                    if i % 7 == 0 {
                        assert_status(&client.delete_record(&slug, &key, &id), 202);
                        acked.push((id, "record.deleted"));
                    }
                }
                acked
            })
        })
        .collect();
    let expected_total = WRITERS * (PER_WRITER + PER_WRITER.div_ceil(5) + PER_WRITER.div_ceil(7));
    // Read a few events at a time, dropping the connection after each batch and resuming
    // from the last id seen.
    let mut seen: Vec<(String, String)> = Vec::new();
    let mut last_id: Option<String> = None;
    let mut reader = Some(first);
    let mut reconnects = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    while seen.len() < expected_total {
        assert!(Instant::now() < deadline, "only {} events", seen.len());
        let mut current = match reader.take() {
            Some(r) => r,
            None => {
                reconnects += 1;
                open(addr, &slug, &key, last_id.as_deref(), "").expect("resume")
            }
        };
        for _ in 0..(7 + reconnects % 11) {
            let Some(event) = current.next() else { break };
            seen.push((
                event.data["data"]["id"].as_str().unwrap().to_string(),
                event.kind.clone(),
            ));
            last_id = event.id;
            if seen.len() == expected_total {
                break;
            }
        }
    }
    let acked: Vec<Vec<(String, &str)>> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    assert!(reconnects > 10, "{reconnects} reconnects");
    assert_eq!(seen.len(), expected_total);
    let unique: HashSet<_> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "an event came twice");
    let position: HashMap<(&str, &str), usize> = seen
        .iter()
        .enumerate()
        .map(|(i, (id, kind))| ((id.as_str(), kind.as_str()), i))
        .collect();
    for writes in &acked {
        let places: Vec<usize> = writes
            .iter()
            .map(|(id, kind)| position[&(id.as_str(), *kind)])
            .collect();
        assert!(
            places.windows(2).all(|w| w[0] < w[1]),
            "a writer's writes out of order: {places:?}"
        );
    }
}

#[test]
fn heartbeats_permissions_ids_and_the_cap_per_key() {
    let (s, e) = setup("[stream]\nheartbeat = \"100ms\"\nmax_per_key = 2\n");
    let key = &e.sandbox_key;
    // Heartbeats while nothing happens.
    let mut quiet = open(s.addr(), &e.slug, key, None, "").expect("stream");
    let started = Instant::now();
    let id = record_id(&s.post_record(&e.slug, key, &json!({})));
    thread::sleep(Duration::from_millis(450));
    assert_status(&s.delete_record(&e.slug, key, &id), 202);
    assert_eq!(quiet.next().unwrap().kind, "record.created");
    assert_eq!(quiet.next().unwrap().kind, "record.deleted");
    let beats = quiet.comments.iter().filter(|c| *c == "heartbeat").count();
    assert!(
        beats >= 2,
        "{beats} heartbeats in {:?}: {:?}",
        started.elapsed(),
        quiet.comments
    );

    // A second stream is allowed, a third refused while two are open; closing one frees it.
    let second = open(s.addr(), &e.slug, key, None, "").expect("second stream");
    let refused = open(s.addr(), &e.slug, key, None, "")
        .err()
        .expect("refused");
    assert_error(&refused, 429, "too_many_streams");
    drop(second);
    let deadline = Instant::now() + Duration::from_secs(10);
    let _third = loop {
        match open(s.addr(), &e.slug, key, None, "") {
            Ok(reader) => break reader,
            Err(resp) => {
                assert_error(&resp, 429, "too_many_streams");
                assert!(
                    Instant::now() < deadline,
                    "the closed stream's slot never came back"
                );
                thread::sleep(Duration::from_millis(50));
            }
        }
    };
    drop(quiet);

    // Ids: garbage, and ids of another endpoint or environment, are refused.
    let other = s.create_endpoint("Other", &[]);
    let mut other_reader = open(s.addr(), &other.slug, &other.sandbox_key, None, "").unwrap();
    record_id(&s.post_record(&other.slug, &other.sandbox_key, &json!({})));
    let foreign = other_reader.next().unwrap().id.unwrap();
    drop(other_reader);
    let wait_for_slot = |last: Option<&str>| loop {
        match open(s.addr(), &e.slug, key, last, "") {
            Err(resp) if resp.status == 429 => thread::sleep(Duration::from_millis(50)),
            other => break other,
        }
    };
    for bad in ["garbage", foreign.as_str()] {
        let resp = wait_for_slot(Some(bad)).err().expect("refused");
        assert_error(&resp, 400, "invalid_parameter");
    }
    let production = open(s.addr(), &e.slug, &e.production_key, None, "")
        .err()
        .unwrap();
    assert_error(&production, 403, "endpoint_not_deployed");
    let no_key = open(s.addr(), &e.slug, "tm_test_nope", None, "")
        .err()
        .unwrap();
    assert_error(&no_key, 401, "invalid_api_key");

    // A collaborator without the read permission may not open a stream; with it, they may.
    let writer = add_collaborator(&s, &e.slug, "writer@example.com", &["create"]);
    let resp = open(s.addr(), &e.slug, &writer.sandbox_key, None, "")
        .err()
        .unwrap();
    assert_error(&resp, 403, "missing_permission_read");
    let reader = add_collaborator(&s, &e.slug, "reader@example.com", &["read"]);
    assert!(open(s.addr(), &e.slug, &reader.sandbox_key, None, "").is_ok());
}

/// The server's resident memory, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

#[test]
fn a_reader_that_stops_reading_is_cut_off_and_memory_stays_flat() {
    let (s, e) = setup(
        "[stream]\nbuffer_kb = 128\nslow_reader_timeout = \"3s\"\n\
         [storage]\ncache_mb = 8\n[search]\nindex_memory_mb = 15\n",
    );
    let key = e.sandbox_key.clone();
    // Writing settles the server's caches and index buffers first (they grow with the first
    // tens of MB written whether or not anyone streams); then a reader that takes nothing
    // connects and about 40 MB more of events are written.
    let big = "x".repeat(90_000);
    for i in 0..450 {
        record_id(&s.post_record(&e.slug, &key, &json!({"i": i, "pad": big})));
    }
    // A raw connection with a small receive buffer that reads the head, then nothing.
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(16 * 1024).unwrap();
    socket.connect(&s.addr().into()).unwrap();
    let mut stuck: TcpStream = socket.into();
    write!(
        stuck,
        "GET /api/v1/data/{}/stream HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\r\n",
        e.slug
    )
    .unwrap();
    let mut head = [0u8; 64];
    let n = stuck.read(&mut head).unwrap();
    assert!(head[..n].starts_with(b"HTTP/1.1 200"), "{:?}", &head[..n]);

    // As soon as the stream gives up on the reader, reading finds the reason at the end of
    // what the connection still held, and then the connection closes.
    let log = s.log.clone();
    let taker = thread::spawn(move || {
        log.wait_for(
            0,
            Duration::from_secs(60),
            |line| line.contains("was disconnected: its reader took nothing"),
            || false,
        )
        .expect("the slow reader is disconnected");
        stuck
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut rest = Vec::new();
        let _ = stuck.read_to_end(&mut rest);
        rest
    });
    let before = rss_kib(s.pid());
    for i in 0..450 {
        record_id(&s.post_record(&e.slug, &key, &json!({"i": i, "pad": big})));
    }
    let after = rss_kib(s.pid());
    assert!(
        after < before + 16 * 1024,
        "the server grew from {before} KiB to {after} KiB while a reader took nothing"
    );
    let rest = taker.join().unwrap();
    let text = String::from_utf8_lossy(&rest);
    assert!(
        text.contains("event: stream.error") && text.contains("stream_reader_too_slow"),
        "the reader was not told why: {} bytes, ending {:?}",
        rest.len(),
        &text[text.len().saturating_sub(300)..]
    );
    // Far less than what was written reached the reader: the rest was never queued for it.
    assert!(rest.len() < 8 * 1024 * 1024, "{} bytes", rest.len());
}

#[test]
fn sigterm_ends_open_streams_and_the_server_stops_at_once() {
    let (mut s, e) = setup("[shutdown]\ngrace = \"30s\"\n");
    let mut reader = open(s.addr(), &e.slug, &e.sandbox_key, None, "").expect("stream");
    let started = Instant::now();
    let status = s.sigterm_and_wait();
    assert!(status.success(), "{status:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "shutdown waited {:?} for an open stream",
        started.elapsed()
    );
    assert!(reader.next().is_none());
    assert!(
        reader
            .comments
            .iter()
            .any(|c| c.contains("server is stopping")),
        "{:?}",
        reader.comments
    );
}

#[test]
fn an_id_older_than_the_events_kept_is_refused_with_410() {
    let t0 = at("2025-03-01T00:00:00Z");
    // Each try below that finds the events still there leaves a stream behind: a short
    // heartbeat finds it gone and frees its slot.
    let s = InProcessServer::start("[stream]\nheartbeat = \"50ms\"\n", t0);
    let e = s.create_endpoint("kept", &[]);
    let key = &e.sandbox_key;
    let mut reader = open(s.addr(), &e.slug, key, None, "").expect("stream");
    record_id(&s.post_record(&e.slug, key, &json!({"n": 0})));
    record_id(&s.post_record(&e.slug, key, &json!({"n": 1})));
    let first = reader.next().unwrap().id.unwrap();
    let second = reader.next().unwrap().id.unwrap();
    drop(reader);
    // Sandbox events go with the records, after 30 days; the hourly purge runs on the
    // server's clock.
    s.clock
        .set(t0.plus(Duration::from_secs(30 * 86_400 + 3_600)));
    let deadline = Instant::now() + Duration::from_secs(30);
    let refused = loop {
        match open(s.addr(), &e.slug, key, Some(&first), "") {
            Err(resp) if resp.status == 410 => break resp,
            Ok(_) | Err(Resp { status: 429, .. }) => {
                assert!(Instant::now() < deadline, "the events were never purged");
                thread::sleep(Duration::from_millis(50));
            }
            Err(resp) => panic!("{}", resp.describe()),
        }
    };
    assert_error(&refused, 410, "stream_cursor_expired");
    // The last event purged is where the log now starts: nothing after it is missing.
    let mut resumed = open(s.addr(), &e.slug, key, Some(&second), "").expect("resume");
    let third = record_id(&s.post_record(&e.slug, key, &json!({"n": 2})));
    assert_eq!(resumed.next().unwrap().data["data"]["id"], third.as_str());
}
