//! Failover of the database (issue #38, docs/src/scale-out.md, "Failover"): three nodes (the
//! binary) whose URL names a primary and its synchronous streaming standby with
//! `target_session_attrs=read-write`, under writes with caller webhooks to a loopback
//! receiver, a poll consumer going through the nodes in turn and `/readyz` sampled on each,
//! and a change stream reader that resumes on the next node (`Last-Event-ID`) whenever its
//! stream ends, while the primary is killed (`kill -9` of all its processes) or frozen
//! (SIGSTOP: it keeps its connections and answers nothing) and the standby is promoted a
//! second later.
//!
//! Each test asserts what scale-out.md promises (nothing acknowledged lost, the documented
//! bound on a request's wait, the first 202 within two leases of the promotion, the poll feed
//! and the change stream complete and without repeats, the poll feed in id order and the
//! stream in each writer's order, every webhook delivered with duplicates bounded,
//! `Retry-After` on every 503, `/readyz` answering at once) with margin for a loaded machine,
//! and prints what it measured (`cargo test --test integration failover:: -- --nocapture`),
//! which the docs quote.

use crate::common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::nodes::{
    BinaryNodes, LEASE, Poller, Sample, Writes, assert_gap_free, clients, in_secs, wait_until,
    webhooks_of, write_load,
};
use common::postgres::Cluster;
use common::receiver::{Receiver, Reply};
use common::{Endpoint, ServerClient};
use serde_json::Value;

/// `[storage.postgres] request_timeout` (the default): the most a request waits for the
/// database (docs/src/scale-out.md).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// What a busy two-core machine may add to a documented bound before a test calls it broken.
const MARGIN: Duration = Duration::from_millis(1500);
/// Writers, each sending its writes in turn through the nodes.
const WRITERS: usize = 8;
/// A writer's pause between writes, which keeps the write rate (and the reading back) small.
const WRITE_PAUSE: Duration = Duration::from_millis(25);
/// `[webhooks] workers` (the default): a node has at most this many deliveries in flight.
const WEBHOOK_WORKERS: usize = 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// `kill -9` of the postmaster and all its processes: the connections close.
    Kill,
    /// SIGSTOP of the postmaster and all its processes: the connections stay open, unanswered.
    Freeze,
}

#[test]
fn a_killed_primary_fails_over_to_its_standby_without_losing_anything_acknowledged() {
    if common::postgres_only("a database failover; PostgreSQL only") {
        return;
    }
    fail_over(Fault::Kill);
}

#[test]
fn a_frozen_primary_fails_over_to_its_standby_without_a_request_waiting_past_the_bound() {
    if common::postgres_only("a database failover; PostgreSQL only") {
        return;
    }
    fail_over(Fault::Freeze);
}

/// What the load saw: every request's sample, and the writes acknowledged.
#[derive(Default)]
struct Seen {
    polls: Vec<Sample>,
    ready: Vec<(usize, Sample)>,
    /// The change stream: the records of its `record.created` events, in the order received,
    /// the refusals of its openings, and how many streams ended with an error event.
    streamed: Vec<String>,
    stream_refusals: Vec<Sample>,
    stream_errors: usize,
}

fn fail_over(fault: Fault) {
    let primary = Cluster::start_primary();
    let standby = primary.standby();
    let database = primary.database();
    let name = database.rsplit('/').next().expect("a database name");
    let url = format!(
        "postgresql://intake@127.0.0.1:{},127.0.0.1:{}/{name}?target_session_attrs=read-write",
        primary.port(),
        standby.port()
    );
    let receiver = Receiver::start();
    receiver.always(Reply::status(200));
    let nodes = BinaryNodes::start(
        3,
        &url,
        "[webhooks]\nallow_private_targets = true\ntimeout = \"2s\"\n",
    );
    let ep = nodes.node(0).create_endpoint("failover", &[]);
    let seen = Arc::new(Mutex::new(Seen::default()));
    let writes = Arc::new(Mutex::new(Writes::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let stop_polling = Arc::new(AtomicBool::new(false));
    let polled = Arc::new(AtomicUsize::new(0));

    stream_load(&nodes, &ep, &seen, &stop_polling);
    let writers: Vec<JoinHandle<()>> = (0..WRITERS)
        .map(|w| {
            let callback = receiver.url("/hook");
            write_load(w, &nodes, &ep, &callback, WRITE_PAUSE, &writes, &stop)
        })
        .collect();
    let poller = poll_load(&nodes, &ep, &seen, &polled, &stop_polling);
    let sampler = ready_load(&nodes, &seen, &stop_polling);

    // Load on a healthy database first.
    wait_until(
        in_secs(30),
        || "the first writes".into(),
        || writes.lock().unwrap().acknowledged.len() >= 100,
    );
    match fault {
        Fault::Kill => primary.kill9(),
        Fault::Freeze => primary.freeze(),
    }
    // From here no write can reach the old primary: a write sent later and acknowledged went
    // to the new one.
    let faulted = Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    // The standby takes writes somewhere between the request and pg_ctl's return; the first
    // 202 is measured from the request.
    let promoting = Instant::now();
    standby.promote();
    let promoted = Instant::now();
    // Writes go on until well after the first one acknowledged after the fault.
    let lease = Duration::from_secs(LEASE.trim_end_matches('s').parse().expect("lease"));
    wait_until(
        promoting + 4 * lease,
        || format!("a write acknowledged after the promotion\n{}", nodes.logs()),
        || {
            writes
                .lock()
                .unwrap()
                .first_ack_after(faulted, None)
                .is_some()
        },
    );
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        writer.join().expect("writer");
    }

    // The poll feed gets every acknowledged record, once each and in order.
    let acknowledged: BTreeSet<String> = writes
        .lock()
        .unwrap()
        .acknowledged
        .keys()
        .cloned()
        .collect();
    let expected = acknowledged.len();
    let behind = || {
        format!(
            "the poll feed ({} of {expected}) and the stream ({}) to catch up\n{}",
            polled.load(Ordering::Relaxed),
            seen.lock().unwrap().streamed.len(),
            nodes.logs()
        )
    };
    wait_until(in_secs(30), behind, || {
        polled.load(Ordering::Relaxed) >= expected
            && seen.lock().unwrap().streamed.len() >= expected
    });
    stop_polling.store(true, Ordering::Relaxed);
    let polled = poller.join().expect("poller");
    sampler.join().expect("readiness sampler");
    assert_gap_free(&polled, &acknowledged);

    let seen = seen.lock().unwrap();
    let writes = writes.lock().unwrap();
    // The stream brought every acknowledged write once, each writer's in its order.
    let streamed: BTreeSet<&String> = seen.streamed.iter().collect();
    assert_eq!(streamed.len(), seen.streamed.len(), "an event came twice");
    assert_eq!(
        streamed,
        acknowledged.iter().collect(),
        "the stream's records are not those acknowledged"
    );
    let place: HashMap<&String, usize> = seen
        .streamed
        .iter()
        .enumerate()
        .map(|(i, id)| (id, i))
        .collect();
    let mut writers_acks: BTreeMap<u64, Vec<(u64, usize)>> = BTreeMap::new();
    for (id, (payload, _)) in &writes.acknowledged {
        let (w, i) = (payload["writer"].as_u64(), payload["i"].as_u64());
        writers_acks
            .entry(w.expect("writer"))
            .or_default()
            .push((i.expect("i"), place[id]));
    }
    for (w, mut acks) in writers_acks {
        acks.sort();
        assert!(
            acks.windows(2).all(|pair| pair[0].1 < pair[1].1),
            "writer {w}'s writes came out of order in the stream"
        );
    }
    // Every acknowledged write is on every node with its exact payload.
    for node in nodes.live() {
        let (records, _) = node.list_all(&ep.slug, &ep.sandbox_key, 30);
        let stored: HashMap<&str, &Value> = records
            .iter()
            .map(|r| (r["id"].as_str().expect("id"), &r["payload"]))
            .collect();
        for (id, (payload, _)) in &writes.acknowledged {
            assert_eq!(
                stored.get(id.as_str()).copied(),
                Some(payload),
                "record {id} on {}",
                node.addr()
            );
        }
        assert_eq!(
            stored.len(),
            writes.acknowledged.len(),
            "records stored that no retry acknowledged"
        );
    }

    // Every acknowledged write's caller webhook arrives, duplicates counted.
    let deliveries = webhooks_of(&receiver, &acknowledged, &nodes);
    let duplicates: usize = deliveries.values().map(|n| n.len() - 1).sum();
    // A delivery is sent again only if its outcome could not be recorded: at most the
    // attempts in flight when the database went, on every node.
    let duplicate_bound = nodes.live().len() * WEBHOOK_WORKERS;

    let figures = Figures::of(&seen, &writes, faulted, promoting);
    println!(
        "failover ({fault:?}): {} writes acknowledged by {WRITERS} writers; first 202 {:.2} s \
         after the fault, {:.2} s after the promotion's request (pg_ctl promote took {:.2} s); write \
         answers {} (503: {}, no answer: {}), longest wait {:.2} s, p99 {:.2} s; polls {} \
         (longest {:.2} s); /readyz samples {} (503: {}), slowest {:.3} s, p99 {:.3} s, first \
         503 after the fault {}; stream: {} events, {} streams ended by an error, {} openings \
         refused; webhooks {} delivered, {duplicates} duplicates (bound {duplicate_bound})",
        writes.acknowledged.len(),
        figures.first_ack_after_fault,
        figures.first_ack_after_promotion,
        (promoted - promoting).as_secs_f64(),
        writes.samples.len(),
        figures.unavailable,
        figures.unanswered,
        figures.longest_write.as_secs_f64(),
        figures.write_p99.as_secs_f64(),
        seen.polls.len(),
        figures.longest_poll.as_secs_f64(),
        seen.ready.len(),
        figures.ready_unavailable,
        figures.slowest_ready.as_secs_f64(),
        figures.ready_p99.as_secs_f64(),
        figures
            .first_ready_503
            .map_or("none".to_string(), |s| format!("{s:.2} s")),
        seen.streamed.len(),
        seen.stream_errors,
        seen.stream_refusals.len(),
        deliveries.len(),
    );

    // Every refusal says when to try again, and is the one the docs name.
    for sample in writes
        .samples
        .iter()
        .map(|(_, s)| s)
        .chain(&seen.polls)
        .chain(&seen.stream_refusals)
    {
        assert_ne!(sample.status, 0, "a request got no answer: {sample:?}");
        if sample.status == 503 {
            assert_eq!(
                sample.code.as_deref(),
                Some("storage_unavailable"),
                "{sample:?}"
            );
            assert!(
                sample.retry_after.is_some(),
                "a 503 without Retry-After: {sample:?}"
            );
        }
    }
    let bound = REQUEST_TIMEOUT + MARGIN;
    assert!(
        figures.longest_write <= bound && figures.longest_poll <= bound,
        "a request waited {:.2} s (writes) / {:.2} s (polls), over the bound of {:.1} s",
        figures.longest_write.as_secs_f64(),
        figures.longest_poll.as_secs_f64(),
        bound.as_secs_f64()
    );
    assert!(
        figures.first_ack_after_promotion <= (2 * lease).as_secs_f64(),
        "the first 202 came {:.2} s after the promotion: over two leases",
        figures.first_ack_after_promotion
    );
    // `/readyz` answers from what the node knows and never waits for the database (it took
    // 35 s before the failover work): none waits as long as a request may wait for the
    // database plus the margin. Its p99 is only reported: it writes and syncs a file in the
    // data dir, and a CI machine running the whole suite once took 1.9 s at the 99th
    // percentile for that alone while an idle machine takes under 0.1 s.
    assert!(
        figures.slowest_ready <= bound,
        "/readyz took {:.2} s, over the bound of {:.1} s",
        figures.slowest_ready.as_secs_f64(),
        bound.as_secs_f64()
    );
    assert!(
        figures.first_ready_503.is_some(),
        "/readyz never reported the lost database"
    );
    assert!(
        duplicates <= duplicate_bound,
        "{duplicates} duplicate deliveries, over the bound of {duplicate_bound}"
    );
}

/// The poll consumer: polls through the nodes in turn from the start until `stop`, keeping
/// `polled` at the number of ids received; returns the ids in the order received.
fn poll_load(
    nodes: &BinaryNodes,
    ep: &Endpoint,
    seen: &Arc<Mutex<Seen>>,
    polled: &Arc<AtomicUsize>,
    stop: &Arc<AtomicBool>,
) -> JoinHandle<Vec<String>> {
    let clients = clients(nodes);
    let (slug, key) = (ep.slug.clone(), ep.sandbox_key.clone());
    let (seen, polled, stop) = (seen.clone(), polled.clone(), stop.clone());
    std::thread::spawn(move || {
        let refs: Vec<&ServerClient> = clients.iter().collect();
        let mut poller = Poller::new(&refs, &slug, &key, "2000-01-01", None);
        while !stop.load(Ordering::Relaxed) {
            let sent = Instant::now();
            let answer = poller.step();
            seen.lock()
                .unwrap()
                .polls
                .push(Sample::of(sent, answer.as_ref()));
            polled.store(poller.ids.len(), Ordering::Relaxed);
            if poller.caught_up() || answer.is_none_or(|r| r.status != 200) {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        poller.ids
    })
}

/// The change stream reader: reads `record.created` events from one node until its stream
/// ends (an error event when the database is lost, or the reader's own time limit), then
/// resumes on the next node from the last event id, until `stop`. Its first stream is open
/// when this returns, so that it brings every write made after.
fn stream_load(
    nodes: &BinaryNodes,
    ep: &Endpoint,
    seen: &Arc<Mutex<Seen>>,
    stop: &Arc<AtomicBool>,
) {
    let addrs: Vec<std::net::SocketAddr> = nodes.live().iter().map(|c| c.addr()).collect();
    let (slug, key) = (ep.slug.clone(), ep.sandbox_key.clone());
    let (seen, stop) = (seen.clone(), stop.clone());
    let mut first = Some(common::sse::open(addrs[0], &slug, &key, None, "").expect("a stream"));
    // Not joined: it may be waiting for an event that will not come; it ends with the nodes.
    std::thread::spawn(move || {
        let mut last_id: Option<String> = None;
        for turn in 1.. {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            let sent = Instant::now();
            let opened = match first.take() {
                Some(reader) => Ok(reader),
                None => common::sse::open(
                    addrs[turn % addrs.len()],
                    &slug,
                    &key,
                    last_id.as_deref(),
                    "",
                ),
            };
            let mut reader = match opened {
                Ok(reader) => reader,
                Err(refused) => {
                    seen.lock()
                        .unwrap()
                        .stream_refusals
                        .push(Sample::of(sent, Some(&refused)));
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            };
            while let Some(event) = reader.next() {
                let mut seen = seen.lock().unwrap();
                match event.kind.as_str() {
                    "record.created" => {
                        let id = event.data["data"]["id"].as_str().expect("an id");
                        seen.streamed.push(id.to_string());
                        last_id = event.id;
                    }
                    "stream.error" => {
                        seen.stream_errors += 1;
                        break;
                    }
                    other => panic!("an unexpected event {other}: {event:?}"),
                }
            }
        }
    });
}

/// Samples `/readyz` on every node every 100 ms until `stop`.
fn ready_load(
    nodes: &BinaryNodes,
    seen: &Arc<Mutex<Seen>>,
    stop: &Arc<AtomicBool>,
) -> JoinHandle<()> {
    let clients = clients(nodes);
    let (seen, stop) = (seen.clone(), stop.clone());
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            for (i, node) in clients.iter().enumerate() {
                let sent = Instant::now();
                let answer = common::try_send_json(
                    &node.agent,
                    &format!("{}/readyz", node.base_url()),
                    "GET",
                    &[],
                    None,
                )
                .ok();
                seen.lock()
                    .unwrap()
                    .ready
                    .push((i, Sample::of(sent, answer.as_ref())));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    })
}

/// The figures a run is judged and documented by.
struct Figures {
    first_ack_after_fault: f64,
    first_ack_after_promotion: f64,
    unavailable: usize,
    unanswered: usize,
    longest_write: Duration,
    write_p99: Duration,
    longest_poll: Duration,
    ready_unavailable: usize,
    slowest_ready: Duration,
    ready_p99: Duration,
    first_ready_503: Option<f64>,
}

impl Figures {
    fn of(seen: &Seen, writes: &Writes, faulted: Instant, promoting: Instant) -> Figures {
        let first_ack = writes
            .first_ack_after(faulted, None)
            .expect("a write acknowledged after the fault");
        let samples = || writes.samples.iter().map(|(_, s)| s);
        let mut writes: Vec<Duration> = samples().map(|s| s.took).collect();
        writes.sort();
        let mut ready: Vec<Duration> = seen.ready.iter().map(|(_, s)| s.took).collect();
        ready.sort();
        let p99 = |sorted: &[Duration]| sorted[(sorted.len() * 99 / 100).min(sorted.len() - 1)];
        Figures {
            first_ack_after_fault: first_ack.duration_since(faulted).as_secs_f64(),
            first_ack_after_promotion: first_ack.saturating_duration_since(promoting).as_secs_f64(),
            unavailable: samples().filter(|s| s.status == 503).count(),
            unanswered: samples().filter(|s| s.status == 0).count(),
            longest_write: writes.last().copied().unwrap_or_default(),
            write_p99: p99(&writes),
            longest_poll: seen.polls.iter().map(|s| s.took).max().unwrap_or_default(),
            ready_unavailable: seen.ready.iter().filter(|(_, s)| s.status == 503).count(),
            slowest_ready: ready.last().copied().unwrap_or_default(),
            ready_p99: p99(&ready),
            first_ready_503: seen
                .ready
                .iter()
                .filter(|(_, s)| s.sent > faulted && s.status == 503)
                .map(|(_, s)| (s.sent + s.took).duration_since(faulted).as_secs_f64())
                .reduce(f64::min),
        }
    }
}
