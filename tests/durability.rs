//! Durability: a 202 means the write is on disk. Crash (`kill -9`) and
//! graceful stop (SIGTERM) under concurrent writes, then restart on the same
//! data dir and check every acknowledged write.

use crate::common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

const THREADS: usize = 8;

/// Waits until `count` reaches `target` (or panics after `timeout`).
fn wait_for_count(count: &AtomicUsize, target: usize, timeout: Duration, what: &str) {
    let deadline = Instant::now() + timeout;
    while count.load(Ordering::SeqCst) < target {
        assert!(
            Instant::now() < deadline,
            "only {} of {target} {what} within {timeout:?}",
            count.load(Ordering::SeqCst)
        );
        thread::sleep(Duration::from_millis(5));
    }
}

fn post_json(
    agent: &ureq::Agent,
    url: &str,
    key: &str,
    payload: &Value,
) -> Result<Resp, ureq::Error> {
    let auth = format!("Bearer {key}");
    let body = serde_json::to_vec(payload).unwrap();
    try_send(
        agent,
        url,
        "POST",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        Some(&body),
    )
}

/// Every id in `acked` must be readable with exactly its payload.
fn verify_acked(s: &TestServer, slug: &str, key: &str, acked: &[(String, Value)]) {
    let mut missing = Vec::new();
    for (id, payload) in acked {
        let r = s.get_record(slug, key, id);
        if r.status != 200 {
            missing.push(format!("{id}: {}", r.describe()));
            continue;
        }
        assert_eq!(
            &r.json()["payload"],
            payload,
            "record {id} has the wrong payload after restart"
        );
    }
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged records lost after restart, e.g. {:?}",
        missing.len(),
        acked.len(),
        &missing[..missing.len().min(5)]
    );
}

#[test]
fn every_post_acknowledged_with_202_survives_kill_9_across_rounds() {
    let mut s = TestServer::start();
    let ep = s.create_endpoint("crash", &[]);
    let mut all_acked: Vec<(String, Value)> = Vec::new();

    for round in 0..3 {
        let url = format!("{}/api/v1/data/{}", s.base_url(), ep.slug);
        let stop = Arc::new(AtomicBool::new(false));
        let count = Arc::new(AtomicUsize::new(0));
        let acked = Arc::new(Mutex::new(Vec::<(String, Value)>::new()));
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (url, key) = (url.clone(), ep.sandbox_key.clone());
                let (stop, count, acked) = (stop.clone(), count.clone(), acked.clone());
                thread::spawn(move || {
                    let agent = new_agent(Duration::from_secs(10));
                    let mut i = 0usize;
                    while !stop.load(Ordering::SeqCst) {
                        let payload = json!({
                            "round": round, "thread": t, "i": i,
                            "pad": "x".repeat((i * 37) % 2000),
                        });
                        i += 1;
                        if let Ok(r) = post_json(&agent, &url, &key, &payload) {
                            if r.status == 202 {
                                let id = r.json()["id"].as_str().expect("id").to_string();
                                acked.lock().unwrap().push((id, payload));
                                count.fetch_add(1, Ordering::SeqCst);
                            } else {
                                assert!(r.status >= 500, "unexpected refusal: {}", r.describe());
                            }
                        }
                    }
                })
            })
            .collect();

        // Let writes flow, then pull the plug while they are in flight.
        wait_for_count(
            &count,
            60 + round * 20,
            Duration::from_secs(30),
            "acknowledged POSTs",
        );
        s.kill9();
        stop.store(true, Ordering::SeqCst);
        for w in workers {
            w.join().expect("writer thread panicked");
        }
        let round_acked = std::mem::take(&mut *acked.lock().unwrap());
        assert!(round_acked.len() >= 60);
        all_acked.extend(round_acked);

        s.restart();
        verify_acked(&s, &ep.slug, &ep.sandbox_key, &all_acked);
        let mut ids: Vec<&String> = all_acked.iter().map(|(id, _)| id).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(
            ids.len(),
            all_acked.len(),
            "the same id was acknowledged twice"
        );
    }
    // The list agrees: every acknowledged record is listed.
    let listed: std::collections::HashSet<String> =
        s.list_ids(&ep.slug, &ep.sandbox_key).into_iter().collect();
    for (id, _) in &all_acked {
        assert!(
            listed.contains(id),
            "{id} readable by id but missing from the list"
        );
    }
}

#[test]
fn every_acknowledged_batch_survives_kill_9_whole_and_no_batch_is_half_stored() {
    const RECORDS: usize = 40;
    let mut s = TestServer::start();
    let ep = s.create_endpoint("batch-crash", &[]);
    let url = format!("{}/api/v1/data/{}/batch", s.base_url(), ep.slug);
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicUsize::new(0));
    // (the batch's tag, its acknowledged ids in the order sent)
    let acked = Arc::new(Mutex::new(Vec::<(String, Vec<String>)>::new()));
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (url, key) = (url.clone(), ep.sandbox_key.clone());
            let (stop, count, acked) = (stop.clone(), count.clone(), acked.clone());
            thread::spawn(move || {
                let agent = new_agent(Duration::from_secs(10));
                let auth = format!("Bearer {key}");
                let mut i = 0usize;
                while !stop.load(Ordering::SeqCst) {
                    let tag = format!("t{t}-{i}");
                    i += 1;
                    let body: String = (0..RECORDS)
                        .map(|n| {
                            let pad = "x".repeat((n * 53 + i) % 900);
                            format!("{}\n", json!({ "tag": tag, "n": n, "pad": pad }))
                        })
                        .collect();
                    let headers = [
                        ("Authorization", auth.as_str()),
                        ("Content-Type", "application/x-ndjson"),
                    ];
                    let Ok(r) = try_send(&agent, &url, "POST", &headers, Some(body.as_bytes()))
                    else {
                        continue;
                    };
                    if r.status == 202 {
                        let ids = r.json()["data"]
                            .as_array()
                            .expect("data")
                            .iter()
                            .map(|e| e["id"].as_str().expect("id").to_string())
                            .collect();
                        acked.lock().unwrap().push((tag, ids));
                        count.fetch_add(1, Ordering::SeqCst);
                    } else {
                        assert!(r.status >= 500, "unexpected refusal: {}", r.describe());
                    }
                }
            })
        })
        .collect();
    wait_for_count(&count, 40, Duration::from_secs(60), "acknowledged batches");
    s.kill9();
    stop.store(true, Ordering::SeqCst);
    for w in workers {
        w.join().expect("writer thread panicked");
    }
    let acked = std::mem::take(&mut *acked.lock().unwrap());
    s.restart();

    // Every record of the store, by its batch's tag: each batch is there whole or not at all.
    let (records, _) = s.list_all(&ep.slug, &ep.sandbox_key, 30);
    let mut stored: HashMap<String, Vec<(u64, String)>> = HashMap::new();
    for record in &records {
        let tag = record["payload"]["tag"].as_str().expect("tag").to_string();
        let n = record["payload"]["n"].as_u64().expect("n");
        let id = record["id"].as_str().expect("id").to_string();
        stored.entry(tag).or_default().push((n, id));
    }
    for (tag, mut batch) in stored.clone() {
        assert_eq!(batch.len(), RECORDS, "batch {tag} is half stored");
        batch.sort();
        let ids: Vec<&String> = batch.iter().map(|(_, id)| id).collect();
        let mut ascending = ids.clone();
        ascending.sort();
        assert_eq!(ids, ascending, "batch {tag}: ids not in the order sent");
    }
    for (tag, ids) in &acked {
        let batch = stored
            .get(tag)
            .unwrap_or_else(|| panic!("acknowledged batch {tag} lost after kill -9"));
        let mut found: Vec<(u64, String)> = batch.clone();
        found.sort();
        let found: Vec<String> = found.into_iter().map(|(_, id)| id).collect();
        assert_eq!(&found, ids, "batch {tag}: not the acknowledged ids");
    }
    assert!(acked.len() >= 40);
}

/// The request certainly did not reach the server (connection refused).
fn never_reached_server(e: &ureq::Error) -> bool {
    matches!(e, ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused)
}

/// What a writer knows about one of its records. A writer stops at its
/// first transport error, so at most one write per writer is ambiguous.
#[derive(Clone, Debug)]
struct Tracked {
    /// Last state acknowledged with a 202: Some(payload) or None (deleted).
    acked: Option<Value>,
    /// A write whose outcome is unknown (no response): the state it would
    /// produce. The record is not touched again once this is set.
    unknown: Option<Option<Value>>,
}

#[test]
fn sigterm_during_writes_exits_0_and_every_acknowledged_write_is_reflected_after_restart() {
    let mut s = TestServer::start();
    let ep = s.create_endpoint("graceful", &[]);
    let base = s.base_url();
    let stop = Arc::new(AtomicBool::new(false));
    let acks = Arc::new(AtomicUsize::new(0));
    let mutations = Arc::new(AtomicUsize::new(0));

    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (base, slug, key) = (base.clone(), ep.slug.clone(), ep.sandbox_key.clone());
            let (stop, acks, mutations) = (stop.clone(), acks.clone(), mutations.clone());
            thread::spawn(move || {
                let agent = new_agent(Duration::from_secs(10));
                let auth = format!("Bearer {key}");
                let json_headers = [
                    ("Authorization", auth.as_str()),
                    ("Content-Type", "application/json"),
                ];
                let mut records: HashMap<String, Tracked> = HashMap::new();
                let mut i = 0usize;
                while !stop.load(Ordering::SeqCst) {
                    i += 1;
                    // A record this thread may still touch.
                    let target = records
                        .iter()
                        .filter(|(_, r)| r.unknown.is_none() && r.acked.is_some())
                        .map(|(id, _)| id.clone())
                        .nth(i % 3);
                    match (i % 4, target) {
                        (2, Some(id)) => {
                            let payload = json!({"thread": t, "i": i, "op": "put"});
                            let body = serde_json::to_vec(&payload).unwrap();
                            let url = format!("{base}/api/v1/data/{slug}/{id}");
                            let res = try_send(&agent, &url, "PUT", &json_headers, Some(&body));
                            let rec = records.get_mut(&id).unwrap();
                            match res {
                                Ok(r) if r.status == 202 => {
                                    rec.acked = Some(payload);
                                    acks.fetch_add(1, Ordering::SeqCst);
                                    mutations.fetch_add(1, Ordering::SeqCst);
                                }
                                Ok(r) => {
                                    assert!(r.status >= 500, "unexpected refusal: {}", r.describe())
                                }
                                Err(e) => {
                                    if !never_reached_server(&e) {
                                        rec.unknown = Some(Some(payload));
                                    }
                                    break;
                                }
                            }
                        }
                        (3, Some(id)) => {
                            let url = format!("{base}/api/v1/data/{slug}/{id}");
                            let res =
                                try_send(&agent, &url, "DELETE", &[("Authorization", &auth)], None);
                            let rec = records.get_mut(&id).unwrap();
                            match res {
                                Ok(r) if r.status == 202 => {
                                    rec.acked = None;
                                    acks.fetch_add(1, Ordering::SeqCst);
                                    mutations.fetch_add(1, Ordering::SeqCst);
                                }
                                Ok(r) => {
                                    assert!(r.status >= 500, "unexpected refusal: {}", r.describe())
                                }
                                Err(e) => {
                                    if !never_reached_server(&e) {
                                        rec.unknown = Some(None);
                                    }
                                    break;
                                }
                            }
                        }
                        _ => {
                            let payload = json!({"thread": t, "i": i, "op": "post"});
                            let url = format!("{base}/api/v1/data/{slug}");
                            let Ok(r) = post_json(&agent, &url, &key, &payload) else {
                                // Server gone or going: stop writing.
                                break;
                            };
                            if r.status == 202 {
                                let id = r.json()["id"].as_str().expect("id").to_string();
                                records.insert(
                                    id,
                                    Tracked {
                                        acked: Some(payload),
                                        unknown: None,
                                    },
                                );
                                acks.fetch_add(1, Ordering::SeqCst);
                            } else {
                                assert!(r.status >= 500, "unexpected refusal: {}", r.describe());
                            }
                        }
                    }
                }
                records
            })
        })
        .collect();

    wait_for_count(&acks, 100, Duration::from_secs(30), "acknowledged writes");
    wait_for_count(
        &mutations,
        20,
        Duration::from_secs(30),
        "acknowledged PUT/DELETEs",
    );
    let status = s.sigterm_and_wait();
    stop.store(true, Ordering::SeqCst);
    let mut records: HashMap<String, Tracked> = HashMap::new();
    for w in workers {
        records.extend(w.join().expect("writer thread panicked"));
    }
    assert_eq!(
        status.code(),
        Some(0),
        "SIGTERM must exit 0, got {status:?}\n{}",
        s.log.text()
    );
    // Every ingest writer drained its batch before the exit: a node on PostgreSQL commits
    // with several at once (`ingest_writers`, default 4), one on redb with one.
    let writers = if on_postgres() { 4 } else { 1 };
    let stopped = s
        .log
        .lines()
        .into_iter()
        .find(|line| line.contains("ingest writer stopped: "))
        .unwrap_or_else(|| panic!("no ingest writer's account in\n{}", s.log.text()));
    assert!(
        stopped.ends_with(&format!(", {writers} writer(s)")),
        "{stopped}"
    );

    s.restart();
    let mut checked = (0, 0, 0);
    for (id, rec) in &records {
        let r = s.get_record(&ep.slug, &ep.sandbox_key, id);
        let now = match r.status {
            200 => Some(r.json()["payload"].clone()),
            404 => None,
            _ => panic!("GET {id} after restart: {}", r.describe()),
        };
        let ok = now == rec.acked || rec.unknown.as_ref().is_some_and(|u| *u == now);
        assert!(
            ok,
            "record {id}: after restart {now:?}, last acknowledged {:?} (unacknowledged write: {:?})",
            rec.acked, rec.unknown
        );
        match (&rec.acked, rec.unknown.is_some()) {
            (_, true) => checked.2 += 1,
            (Some(_), false) => checked.0 += 1,
            (None, false) => checked.1 += 1,
        }
    }
    assert!(
        checked.0 > 0 && checked.1 > 0,
        "live/deleted/ambiguous records checked: {checked:?}"
    );

    let listed: std::collections::HashSet<String> =
        s.list_ids(&ep.slug, &ep.sandbox_key).into_iter().collect();
    for (id, rec) in &records {
        if rec.unknown.is_none() {
            assert_eq!(
                listed.contains(id),
                rec.acked.is_some(),
                "list disagrees with acknowledged state for {id}"
            );
        }
    }
}

/// The embedded store compresses payloads with a zstd dictionary it trains on its own records
/// once it holds enough of them (`intake_payload_dictionaries` counts the dictionaries).
/// Records written before it (stored plain) and after it (compressed) read back exactly, by
/// id, list, poll and search, and again after a restart.
#[test]
fn payloads_stored_before_and_after_the_dictionary_read_back_exactly_across_a_restart() {
    if redb_only("payload dictionaries are the embedded store's") {
        return;
    }
    const CONFIG: &str = "[poll]\nhold_back = \"0s\"\n";
    let mut s = TestServer::start_with_config(CONFIG);
    let e = s.create_endpoint("compressed", &[]);
    let record = |n: usize| {
        json!({
            "kind": "reading",
            "seq": n,
            "device": {"id": format!("dev-{}", n * 7919 % 1000), "site": {"city": "Köln", "room": "kitchen"}},
            "samples": [n % 97, n % 89, n % 83, n % 79, n % 73, n % 71],
            "note": format!("reading {n} of sensor {} taken by the quiet-{} unit, all well", n % 13, n % 7),
            "token": format!("tok{n:06}x"),
            "tags": ["eu", "summer", "indoor"],
            "padding": "the same words in every record, as JSON records of one kind have them ".repeat(6),
        })
    };
    let metric = |s: &TestServer| -> u64 {
        let m = s.request("GET", "/metrics", &[], None);
        assert_eq!(m.status, 200, "{}", m.describe());
        m.text()
            .lines()
            .find_map(|l| l.strip_prefix("intake_payload_dictionaries "))
            .and_then(|v| v.trim().parse().ok())
            .expect("intake_payload_dictionaries in /metrics")
    };
    assert_eq!(metric(&s), 0);
    let mut sent = Vec::new();
    // About 600 KB: enough for the store to learn a dictionary from.
    for n in 0..700 {
        let body = s.create_record(&e.slug, &e.sandbox_key, &record(n));
        sent.push((body["id"].as_str().unwrap().to_string(), record(n)));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while metric(&s) == 0 {
        assert!(
            Instant::now() < deadline,
            "no payload dictionary within 60 s"
        );
        thread::sleep(Duration::from_millis(100));
    }
    for n in 700..800 {
        let body = s.create_record(&e.slug, &e.sandbox_key, &record(n));
        sent.push((body["id"].as_str().unwrap().to_string(), record(n)));
    }
    let check = |s: &TestServer| {
        verify_acked(s, &e.slug, &e.sandbox_key, &sent);
        // Every record, oldest first, through poll.
        let polled: Vec<Value> = s
            .poll_from_start(&e.slug, &e.sandbox_key)
            .into_iter()
            .map(|r| r["payload"].clone())
            .collect();
        let expected: Vec<Value> = sent.iter().map(|(_, p)| p.clone()).collect();
        assert!(polled == expected, "poll returned {} records", polled.len());
        // The newest page of the list, and search, for a record of each layout.
        let list = s.data(
            "GET",
            &format!("/api/v1/data/{}?limit=3", e.slug),
            &e.sandbox_key,
            None,
        );
        assert_eq!(list.json()["data"][0]["payload"], record(799));
        for n in [5, 750] {
            let found = s.data(
                "GET",
                &format!("/api/v1/data/{}/search?q=tok{n:06}x", e.slug),
                &e.sandbox_key,
                None,
            );
            assert_eq!(found.status, 200, "{}", found.describe());
            let hits = found.json()["data"].as_array().unwrap().clone();
            assert_eq!(hits.len(), 1, "search for record {n}: {hits:?}");
            assert_eq!(hits[0]["payload"], record(n));
        }
    };
    check(&s);
    assert!(s.sigterm_and_wait().success());
    s.restart_with_config(CONFIG);
    assert_eq!(metric(&s), 1, "the dictionary is kept");
    check(&s);
}
