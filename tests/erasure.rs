//! Erasure: `POST /api/v1/manage/endpoints/{slug}/erasures` (owner only) removes every record
//! of one environment whose payload text contains a query from every copy intake keeps.
//!
//! On an in-process server with a loopback webhook receiver and an open change stream, one
//! marker is planted in a record, its webhook delivery (and the receiver's answer, which echoes
//! it), its stream event and the search index; after the erasure has finished the marker is
//! found nowhere: not through any API (record, search, delivery log, stream from the start,
//! audit log), and on the embedded store not in a backup taken afterwards nor in any file of
//! the data dir as plain bytes, `intake.redb` included. Other records stay; a retry of the
//! erased record's Idempotency-Key answers its id without storing it again. A payload
//! dictionary that learnt an erased address is patched so that it holds it no more.

use crate::common;

use std::time::{Duration, Instant};

use common::in_process::{InProcessServer, at};
use common::receiver::{Receiver, Reply};
use common::*;
use serde_json::{Value, json};

const CONFIG: &str = "[webhooks]\nallowed_cidrs = [\"127.0.0.0/8\"]\n";
const MARKER: &str = "ada.lovelace.q7z3@example.com";
/// What the checks look for: a part of [`MARKER`] that no id can hold. Ids are written in
/// `0-9a-z` without `i`, `l`, `o` and `u`, so `q7z3` alone turned up in the random request
/// and record ids a test's request log holds (about once in twenty runs).
const NEEDLE: &str = "lovelace.q7z3";
const WAIT: Duration = Duration::from_secs(30);

fn erasures_path(slug: &str) -> String {
    format!("/api/v1/manage/endpoints/{slug}/erasures")
}

/// Waits until erasure `id` of `slug` is no longer running; returns it.
#[track_caller]
fn wait_finished(s: &ServerClient, slug: &str, id: &str) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let r = s.manage("GET", &format!("{}/{id}", erasures_path(slug)), None);
        assert_status(&r, 200);
        let erasure = r.json();
        if erasure["state"] != "running" {
            return erasure;
        }
        assert!(Instant::now() < deadline, "still running: {erasure}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window.eq_ignore_ascii_case(needle.as_bytes()))
}

/// Every file under `dir` holding `needle` as plain bytes (ASCII case ignored).
fn files_holding(dir: &std::path::Path, needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).expect("read dir").flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(files_holding(&path, needle));
        } else if contains(&std::fs::read(&path).unwrap_or_default(), needle) {
            found.push(path.display().to_string());
        }
    }
    found
}

#[test]
fn an_erased_marker_is_found_nowhere_afterwards() {
    let mut s = InProcessServer::start(CONFIG, at("2026-03-01T00:00:00Z"));
    // Writes and deletes, as a store in use has had: the file has free pages for the scrub to
    // work with (a file with next to none is the documented exception).
    let churn = s.create_endpoint("Churn", &[]);
    let pad = "x".repeat(16_000);
    for n in 0..300 {
        let r = s.post_record(
            &churn.slug,
            &churn.sandbox_key,
            &json!({ "n": n, "pad": pad }),
        );
        let path = format!(
            "/api/v1/data/{}/{}",
            churn.slug,
            r.json()["id"].as_str().unwrap()
        );
        assert_status(&s.data("DELETE", &path, &churn.sandbox_key, None), 202);
    }
    let ep = s.create_endpoint("Sign-ups", &[]);
    let receiver = Receiver::start();
    let r = s.manage(
        "PUT",
        &format!("/api/v1/manage/endpoints/{}/webhooks/sandbox", ep.slug),
        Some(&json!({ "url": receiver.url("/hooks") })),
    );
    assert_status(&r, 200);
    let mut stream =
        common::sse::open(s.addr(), &ep.slug, &ep.sandbox_key, None, "").expect("stream");

    let first = s.post_record(
        &ep.slug,
        &ep.sandbox_key,
        &json!({ "email": "first@example.com" }),
    );
    assert_status(&first, 202);
    receiver.wait_for(1, WAIT);
    receiver.always(Reply::status(200).body(&format!("thanks for {MARKER}")));
    let payload = json!({ "email": MARKER.to_uppercase(), "plan": "pro" });
    let created = s.data_with(
        "POST",
        &format!("/api/v1/data/{}", ep.slug),
        &ep.sandbox_key,
        &[("Idempotency-Key", "signup-1")],
        Some(&payload),
    );
    assert_status(&created, 202);
    let id = created.json()["id"].as_str().unwrap().to_string();
    // The marker's copies: the receiver got it and echoed it, the stream carried it, search
    // finds it. Only the answer to its create echoes it.
    receiver.wait_for(2, WAIT);
    receiver.always(Reply::status(200).body("ok"));
    let kept = s.post_record(
        &ep.slug,
        &ep.sandbox_key,
        &json!({ "email": "grace@example.com" }),
    );
    assert_status(&kept, 202);
    receiver.wait_for(3, WAIT);
    let events: Vec<_> = (0..3).map(|_| stream.next().expect("event")).collect();
    assert!(events[1].data.to_string().contains(&MARKER.to_uppercase()));
    let search = |s: &ServerClient| {
        s.data(
            "GET",
            &format!("/api/v1/data/{}/search?q={NEEDLE}", ep.slug),
            &ep.sandbox_key,
            None,
        )
        .json()["data"]
            .as_array()
            .unwrap()
            .len()
    };
    assert_eq!(search(&s), 1);

    // A dry run counts and changes nothing.
    let r = s.manage(
        "POST",
        &erasures_path(&ep.slug),
        Some(&json!({ "environment": "sandbox", "q": MARKER, "dry_run": true })),
    );
    assert_status(&r, 200);
    assert_eq!(r.json(), json!({ "matched": 1, "newest": [id] }));
    assert_eq!(search(&s), 1);
    // A count that no longer holds starts nothing.
    let r = s.manage(
        "POST",
        &erasures_path(&ep.slug),
        Some(&json!({ "environment": "sandbox", "q": MARKER, "expected": 2 })),
    );
    assert_error(&r, 409, "conflict");
    let r = s.manage("GET", &erasures_path(&ep.slug), None);
    assert_eq!(r.json()["data"], json!([]));
    // Bad input: a clear error, nothing started.
    for (body, code) in [
        (
            json!({ "environment": "staging", "q": MARKER }),
            "invalid_parameter",
        ),
        (
            json!({ "environment": "sandbox", "q": "ab" }),
            "invalid_parameter",
        ),
        (
            json!({ "environment": "sandbox", "q": MARKER, "start": "2026-13-01" }),
            "invalid_parameter",
        ),
        (json!({ "environment": "sandbox" }), "invalid_request"),
        // The message names what was wrong, not the value (the request log keeps it).
        (
            json!({ "environment": "sandbox", "q": MARKER, "expected": MARKER }),
            "invalid_request",
        ),
    ] {
        let r = s.manage("POST", &erasures_path(&ep.slug), Some(&body));
        assert_error(&r, 400, code);
        assert!(!r.text().to_lowercase().contains(NEEDLE), "{}", r.text());
    }
    assert_error(
        &s.manage("GET", &format!("{}/era_99", erasures_path(&ep.slug)), None),
        404,
        "erasure_not_found",
    );

    let r = s.manage(
        "POST",
        &erasures_path(&ep.slug),
        Some(&json!({ "environment": "sandbox", "q": MARKER })),
    );
    assert_status(&r, 202);
    assert_eq!(r.json()["state"], "running");
    let erasure_id = r.json()["id"].as_str().unwrap().to_string();
    let erasure = wait_finished(&s, &ep.slug, &erasure_id);
    assert_eq!(erasure["state"], "finished", "{erasure}");
    assert_eq!(
        (erasure["matched"].clone(), erasure["erased"].clone()),
        (json!(1), json!(1))
    );

    // Through the API: gone.
    let r = s.data(
        "GET",
        &format!("/api/v1/data/{}/{id}", ep.slug),
        &ep.sandbox_key,
        None,
    );
    assert_status(&r, 404);
    assert_eq!(search(&s), 0);
    let r = s.data(
        "GET",
        &format!(
            "/api/v1/data/{}/{}",
            ep.slug,
            kept.json()["id"].as_str().unwrap()
        ),
        &ep.sandbox_key,
        None,
    );
    assert_status(&r, 200);
    // notify (the default): the usual record.deleted event and webhook.
    let deleted = stream.next().expect("the erasure's event");
    assert_eq!(
        (deleted.kind.as_str(), deleted.data["data"]["id"].as_str()),
        ("record.deleted", Some(id.as_str()))
    );
    let requests = receiver.wait_for(4, WAIT);
    assert_eq!(requests[3].json()["type"], "record.deleted");
    // The delivery log keeps the delivery, erased: no body, no answer.
    let r = s.manage(
        "GET",
        &format!(
            "/api/v1/manage/endpoints/{}/deliveries?environment=sandbox&record_id={id}",
            ep.slug
        ),
        None,
    );
    assert_status(&r, 200);
    let deliveries = r.json()["data"].as_array().unwrap().clone();
    let created_delivery = deliveries
        .iter()
        .find(|d| d["erased"] == true)
        .unwrap_or_else(|| panic!("no erased delivery in {deliveries:?}"));
    let r = s.manage(
        "GET",
        &format!(
            "/api/v1/manage/endpoints/{}/deliveries/{}",
            ep.slug, created_delivery["id"]
        ),
        None,
    );
    assert_status(&r, 200);
    assert_eq!(r.json()["body"], Value::Null);
    assert!(!r.text().to_lowercase().contains(NEEDLE), "{}", r.text());
    let r = s.manage(
        "POST",
        &format!(
            "/api/v1/manage/endpoints/{}/deliveries/{}/redeliver",
            ep.slug, created_delivery["id"]
        ),
        None,
    );
    assert_status(&r, 409);
    // A stream read from the start carries no payload of it.
    let after_first = events[0].id.as_deref();
    let mut replay =
        common::sse::open(s.addr(), &ep.slug, &ep.sandbox_key, after_first, "").expect("stream");
    let replayed = replay.next().expect("the create event");
    assert!(
        !replayed.data.to_string().to_lowercase().contains(NEEDLE),
        "{}",
        replayed.data
    );
    // The audit log has the erasure, never its query.
    let r = s.manage(
        "GET",
        &format!("/api/v1/manage/endpoints/{}/audit", ep.slug),
        None,
    );
    let audit = r.text();
    assert!(
        audit.contains("erasure.finished") && audit.contains("query_hash"),
        "{audit}"
    );
    assert!(!audit.to_lowercase().contains(NEEDLE), "{audit}");
    // A retry of its create answers its id and stores nothing.
    let retried = s.data_with(
        "POST",
        &format!("/api/v1/data/{}", ep.slug),
        &ep.sandbox_key,
        &[("Idempotency-Key", "signup-1")],
        Some(&payload),
    );
    assert_status(&retried, 202);
    assert_eq!(retried.json()["id"], id.as_str());
    let r = s.data(
        "GET",
        &format!("/api/v1/data/{}/{id}", ep.slug),
        &ep.sandbox_key,
        None,
    );
    assert_status(&r, 404);

    if on_postgres() {
        return;
    }
    // A backup taken afterwards holds none of it.
    let backup = s.manage("POST", "/api/v1/manage/backups", None);
    assert_status(&backup, 200);
    assert!(
        !contains(&backup.body, NEEDLE),
        "the backup holds the marker"
    );
    // Nor does any file of the data dir.
    drop(stream);
    drop(replay);
    s.stop();
    let holding = files_holding(s.data_dir(), NEEDLE);
    assert_eq!(holding, Vec::<String>::new());
}

/// On the embedded store, a payload dictionary learnt from records that held the address
/// erased keeps it in its content: the erasure patches the dictionary, and afterwards no file
/// of the data dir holds the address (the dictionary is kept, patched, not replaced).
#[test]
fn an_erasure_takes_the_address_out_of_the_payload_dictionary() {
    if redb_only("payload dictionaries are the embedded store's") {
        return;
    }
    const ADDRESS: &str = "zebedee.quartermaine.k8x@example.org";
    let mut s = InProcessServer::start("[poll]\nhold_back = \"0s\"\n", at("2026-03-01T00:00:00Z"));
    let ep = s.create_endpoint("Orders", &[]);
    let record = |n: usize| {
        let mut record = json!({
            "kind": "order",
            "seq": n,
            "customer": {"id": format!("cus-{}", n * 7919 % 1000), "city": "Köln"},
            "note": format!("order {n} packed by the quiet-{} team, all well", n % 7),
            "padding": "the same words in every record, as JSON records of one kind have them ".repeat(6),
        });
        if n % 10 == 0 {
            record["contact"] = json!(ADDRESS);
        }
        record
    };
    let dictionaries = |s: &InProcessServer| -> u64 {
        let m = s.request("GET", "/metrics", &[], None);
        assert_status(&m, 200);
        m.text()
            .lines()
            .find_map(|l| l.strip_prefix("intake_payload_dictionaries "))
            .and_then(|v| v.trim().parse().ok())
            .expect("intake_payload_dictionaries in /metrics")
    };
    // About 600 KB: enough for the store to learn a dictionary from, the address among it.
    for n in 0..700 {
        assert_status(&s.post_record(&ep.slug, &ep.sandbox_key, &record(n)), 202);
    }
    let deadline = Instant::now() + WAIT;
    while dictionaries(&s) == 0 {
        assert!(Instant::now() < deadline, "no payload dictionary");
        std::thread::sleep(Duration::from_millis(100));
    }
    for n in 700..800 {
        assert_status(&s.post_record(&ep.slug, &ep.sandbox_key, &record(n)), 202);
    }

    let r = s.manage(
        "POST",
        &erasures_path(&ep.slug),
        Some(&json!({ "environment": "sandbox", "q": ADDRESS.to_uppercase() })),
    );
    assert_status(&r, 202);
    let erasure = wait_finished(&s, &ep.slug, r.json()["id"].as_str().unwrap());
    assert_eq!(erasure["state"], "finished", "{erasure}");
    assert_eq!(erasure["erased"], 80);
    assert_eq!(dictionaries(&s), 1, "patched in place, not replaced");
    // The other records read as they were sent (the poll feed shows what is older than now).
    s.advance(Duration::from_secs(5));
    // Records made at the same instant of the test's clock come in no set order.
    let mut polled: Vec<Value> = s
        .poll_from_start(&ep.slug, &ep.sandbox_key)
        .into_iter()
        .map(|r| r["payload"].clone())
        .collect();
    polled.sort_by_key(|payload| payload["seq"].as_u64());
    let kept: Vec<Value> = (0..800).filter(|n| n % 10 != 0).map(record).collect();
    assert!(polled == kept, "poll returned {} records", polled.len());
    s.stop();
    assert_eq!(files_holding(s.data_dir(), ADDRESS), Vec::<String>::new());
}

#[test]
fn restoring_a_backup_taken_before_an_erasure_lists_it() {
    if redb_only("backup archives hold redb's file") {
        return;
    }
    let mut server = TestServer::start();
    let ep = server.create_endpoint("Sign-ups", &[]);
    server.create_record(&ep.slug, &ep.sandbox_key, &json!({ "email": MARKER }));
    let archives = tempfile::tempdir().unwrap();
    let archive = archives.path().join("backup.tar");
    common::backup::assert_success(&common::backup::backup(&server, &archive));

    let r = server.manage(
        "POST",
        &erasures_path(&ep.slug),
        Some(&json!({ "environment": "sandbox", "q": MARKER })),
    );
    assert_status(&r, 202);
    let id = r.json()["id"].as_str().unwrap().to_string();
    assert_eq!(wait_finished(&server, &ep.slug, &id)["erased"], 1);
    server.sigterm_and_wait();

    let out = common::backup::restore(&archive, server.dir.path(), true);
    common::backup::assert_success(&out);
    let warning = common::backup::stderr(&out);
    assert!(
        warning.contains("1 erasure(s) after this backup") && warning.contains(&id),
        "{warning}"
    );
    assert!(!warning.to_lowercase().contains(NEEDLE), "{warning}");
}

#[test]
fn on_a_shared_store_every_node_drops_its_stream_copies_before_the_erasure_finishes() {
    if postgres_only("nodes share a store only on PostgreSQL") {
        return;
    }
    let url = common::postgres::shared().database();
    let nodes = common::nodes::BinaryNodes::start(2, &url, "[stream]\ncluster_poll = \"50ms\"\n");
    let (a, b) = (nodes.node(0), nodes.node(1));
    let ep = a.create_endpoint("Sign-ups", &[]);
    let mut stream =
        common::sse::open(b.addr(), &ep.slug, &ep.sandbox_key, None, "").expect("stream");
    for email in ["first@example.com", MARKER, "grace@example.com"] {
        assert_status(
            &a.post_record(&ep.slug, &ep.sandbox_key, &json!({ "email": email })),
            202,
        );
    }
    // Node b's readers share what its stream read: the marker among it.
    let events: Vec<_> = (0..3).map(|_| stream.next().expect("event")).collect();
    assert!(events[1].data.to_string().contains(MARKER));

    let r = a.manage(
        "POST",
        &erasures_path(&ep.slug),
        Some(&json!({ "environment": "sandbox", "q": MARKER, "notify": false })),
    );
    assert_status(&r, 202);
    let erasure = wait_finished(a, &ep.slug, r.json()["id"].as_str().unwrap());
    assert_eq!(
        (erasure["state"].clone(), erasure["erased"].clone()),
        (json!("finished"), json!(1))
    );
    // A reader on node b that resumes before the marker's event gets it without its payload.
    let mut replay = common::sse::open(
        b.addr(),
        &ep.slug,
        &ep.sandbox_key,
        events[0].id.as_deref(),
        "",
    )
    .expect("stream");
    let replayed = replay.next().expect("the create event");
    assert_eq!(
        replayed.data["data"]["payload"],
        Value::Null,
        "{}",
        replayed.data
    );
    assert!(!replayed.data.to_string().to_lowercase().contains(NEEDLE));
}
