//! Intake nodes of one PostgreSQL database, each the binary with a data dir of its own
//! (`tests/cluster.rs`, `tests/failover.rs`), and what their tests ask of them.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::netns::Host;
use super::{
    Endpoint, LogBuffer, OWNER_EMAIL, ServeProcess, ServerClient, bin, init_with_config,
    intake_cmd, spawn_serve_with, with_test_env,
};

/// The lease of the nodes in these tests: short, so that a killed node is given up quickly.
pub const LEASE: &str = "3s";

/// The config of a node on `url` with its data dir `data_dir`, plus `extra` TOML.
pub fn node_config(url: &str, data_dir: &Path, extra: &str) -> String {
    node_config_on(Ipv4Addr::LOCALHOST, url, data_dir, extra)
}

/// [`node_config`] for a node listening on `listen`.
fn node_config_on(listen: Ipv4Addr, url: &str, data_dir: &Path, extra: &str) -> String {
    format!(
        "listen = \"{listen}:0\"\ndata_dir = {data_dir:?}\n\
         [storage]\nbackend = \"postgres\"\n\
         [storage.postgres]\nurl = {url:?}\ntls = \"disable\"\nlease = \"{LEASE}\"\n\
         [poll]\nhold_back = \"0s\"\n{extra}"
    )
}

/// A data dir for another node of the same store: the first node's key, nothing else.
pub fn sibling_data_dir(first: &Path, dir: &Path) -> PathBuf {
    let data = dir.join("data");
    std::fs::create_dir_all(&data).expect("create data dir");
    std::fs::copy(first.join("master.key"), data.join("master.key")).expect("copy master.key");
    data
}

/// Where a node runs and how it reaches the database.
pub struct Placement<'a> {
    /// The database's URL as the node reaches it.
    pub url: String,
    /// The address it listens on.
    pub listen: Ipv4Addr,
    /// The host of its own it runs in (`tests/partition.rs`); `None`: the test's own.
    pub host: Option<&'a Host>,
}

impl Placement<'_> {
    /// A node beside the test, on the loopback, reaching the database at `url`.
    pub fn here(url: &str) -> Placement<'static> {
        Placement {
            url: url.to_string(),
            listen: Ipv4Addr::LOCALHOST,
            host: None,
        }
    }
}

/// Nodes running the binary on one database.
pub struct BinaryNodes {
    pub nodes: Vec<Option<BinaryNode>>,
    pub token: String,
    _dirs: Vec<tempfile::TempDir>,
}

pub struct BinaryNode {
    pub process: ServeProcess,
    pub client: ServerClient,
    pub log: LogBuffer,
}

impl BinaryNodes {
    /// `n` nodes on the database at `url`, each with `extra` config.
    pub fn start(n: usize, url: &str, extra: &str) -> BinaryNodes {
        BinaryNodes::start_with_env(n, url, extra, &[])
    }

    /// [`BinaryNodes::start`] with `envs` in each node's environment.
    pub fn start_with_env(n: usize, url: &str, extra: &str, envs: &[(&str, &str)]) -> BinaryNodes {
        BinaryNodes::start_placed(n, extra, envs, |_| Placement::here(url))
    }

    /// `n` nodes with `extra` config and `envs` in their environment, node `i` where
    /// `place(i)` says.
    pub fn start_placed<'a>(
        n: usize,
        extra: &str,
        envs: &[(&str, &str)],
        place: impl Fn(usize) -> Placement<'a>,
    ) -> BinaryNodes {
        let dirs: Vec<tempfile::TempDir> = (0..n)
            .map(|_| tempfile::tempdir().expect("tempdir"))
            .collect();
        let placements: Vec<Placement> = (0..n).map(place).collect();
        let configs: Vec<PathBuf> = dirs
            .iter()
            .zip(&placements)
            .map(|(dir, placement)| {
                let config = dir.path().join("intake.toml");
                let data_dir = dir.path().join("data");
                let toml = node_config_on(placement.listen, &placement.url, &data_dir, extra);
                std::fs::write(&config, toml).expect("write config");
                config
            })
            .collect();
        // The first node's `init` creates the owner in the database and the key the others
        // copy.
        let init = init_with_config(&configs[0], OWNER_EMAIL);
        for dir in &dirs[1..] {
            sibling_data_dir(&dirs[0].path().join("data"), dir.path());
        }
        let nodes = configs
            .iter()
            .zip(&placements)
            .map(|(config, placement)| {
                let log = LogBuffer::default();
                let cmd = match placement.host {
                    Some(host) => with_test_env(host.command(bin().as_ref())),
                    None => intake_cmd(),
                };
                let args = ["--config".as_ref(), config.as_os_str()];
                let process = spawn_serve_with(cmd, &args, envs, &log);
                let client = ServerClient::new(process.addr, init.token.clone());
                Some(BinaryNode {
                    process,
                    client,
                    log,
                })
            })
            .collect();
        BinaryNodes {
            nodes,
            token: init.token,
            _dirs: dirs,
        }
    }

    pub fn node(&self, i: usize) -> &ServerClient {
        &self.nodes[i].as_ref().expect("node was killed").client
    }

    /// The live nodes' clients.
    pub fn live(&self) -> Vec<&ServerClient> {
        self.nodes.iter().flatten().map(|n| &n.client).collect()
    }

    /// SIGKILL node `i`.
    pub fn kill9(&mut self, i: usize) {
        if let Some(mut node) = self.nodes[i].take() {
            let _ = node.process.child.kill();
            let _ = node.process.child.wait();
        }
    }

    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .flatten()
            .enumerate()
            .map(|(i, n)| format!("--- node {i} ---\n{}", n.log.text()))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for BinaryNodes {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for (i, node) in self.nodes.iter().enumerate() {
                if let Some(node) = node {
                    super::print_problems(&format!("node {i}"), &node.log);
                }
            }
        }
        for i in 0..self.nodes.len() {
            self.kill9(i);
        }
    }
}

/// One POST with the client's agent, its `Idempotency-Key` derived from `payload` (so a retry
/// of the same payload is the same create): `Some(id)` for a 202, `None` for anything else (a
/// refusal or no answer at all).
pub fn try_create(node: &ServerClient, slug: &str, key: &str, payload: &Value) -> Option<String> {
    let r = super::try_send_json(
        &node.agent,
        &format!("{}/api/v1/data/{slug}", node.base_url()),
        "POST",
        &[
            ("Authorization", &format!("Bearer {key}")),
            ("Idempotency-Key", &payload.to_string()),
        ],
        Some(payload),
    )
    .ok()?;
    (r.status == 202).then(|| r.json()["id"].as_str().map(str::to_string))?
}

/// A poll consumer that goes through nodes in turn, one request a step.
pub struct Poller<'a> {
    nodes: &'a [&'a ServerClient],
    slug: &'a str,
    key: &'a str,
    since: &'a str,
    cursor: Option<String>,
    turn: usize,
    caught_up: bool,
    /// The ids received, in the order received.
    pub ids: Vec<String>,
}

impl<'a> Poller<'a> {
    /// Polls `slug` from `cursor`, or from `since` without one.
    pub fn new(
        nodes: &'a [&'a ServerClient],
        slug: &'a str,
        key: &'a str,
        since: &'a str,
        cursor: Option<String>,
    ) -> Poller<'a> {
        Poller {
            nodes,
            slug,
            key,
            since,
            cursor,
            turn: 0,
            caught_up: false,
            ids: Vec::new(),
        }
    }

    /// One poll through the next node; returns its answer (`None`: no answer at all). A
    /// 200's records are added to `ids` and its cursor is followed.
    pub fn step(&mut self) -> Option<super::Resp> {
        let node = self.nodes[self.turn % self.nodes.len()];
        self.turn += 1;
        let query = match &self.cursor {
            Some(c) => format!("cursor={c}"),
            None => format!("since={}", self.since),
        };
        let r = super::try_send_json(
            &node.agent,
            &format!("{}/api/v1/data/{}/poll?{query}", node.base_url(), self.slug),
            "GET",
            &[("Authorization", &format!("Bearer {}", self.key))],
            None,
        )
        .ok()?;
        if r.status == 200 {
            let body = r.json();
            for record in body["data"].as_array().expect("poll data") {
                self.ids
                    .push(record["id"].as_str().expect("id").to_string());
            }
            self.cursor = body["next_cursor"]
                .as_str()
                .or(body["poll_cursor"].as_str())
                .map(str::to_string);
            self.caught_up = body["poll_cursor"].is_string();
        }
        Some(r)
    }

    /// Whether the latest answer said the consumer has caught up for now.
    pub fn caught_up(&self) -> bool {
        self.caught_up
    }
}

/// Polls `slug` through `nodes` in turn from `cursor`, or from `since` without one, until `done`
/// says the collected ids are complete or `deadline` passes; returns the ids in the order
/// received.
pub fn poll_through(
    nodes: &[&ServerClient],
    slug: &str,
    key: &str,
    since: &str,
    cursor: Option<String>,
    deadline: Duration,
    done: impl Fn(&[String]) -> bool,
) -> Vec<String> {
    let started = Instant::now();
    let mut poller = Poller::new(nodes, slug, key, since, cursor);
    while !done(&poller.ids) && started.elapsed() < deadline {
        poller.step();
        if poller.caught_up() {
            // Caught up for now: give the writers' marks a moment to move on.
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    poller.ids
}

/// Asserts `received` is `expected` exactly, in increasing id order, each once.
pub fn assert_gap_free(received: &[String], expected: &BTreeSet<String>) {
    let sorted: Vec<&String> = expected.iter().collect();
    let got: Vec<&String> = received.iter().collect();
    assert!(
        got.windows(2).all(|w| w[0] < w[1]),
        "poll returned ids out of order or twice"
    );
    assert_eq!(
        got.len(),
        sorted.len(),
        "poll returned {} of {} acknowledged records",
        got.len(),
        sorted.len()
    );
    assert_eq!(
        got, sorted,
        "poll returned other ids than those acknowledged"
    );
}

/// One answer (or its absence) to a request of the test.
#[derive(Clone, Debug)]
pub struct Sample {
    /// When the request was sent.
    pub sent: Instant,
    /// How long its answer took (to the agent's timeout when none came).
    pub took: Duration,
    /// The status; 0 when no answer came.
    pub status: u16,
    pub code: Option<String>,
    pub retry_after: Option<String>,
}

impl Sample {
    pub fn of(sent: Instant, answer: Option<&super::Resp>) -> Sample {
        Sample {
            sent,
            took: sent.elapsed(),
            status: answer.map_or(0, |r| r.status),
            code: answer.and_then(super::Resp::error_code),
            retry_after: answer.and_then(|r| r.header("retry-after").map(str::to_string)),
        }
    }
}

/// A client of each live node, with an agent of its own.
pub fn clients(nodes: &BinaryNodes) -> Vec<ServerClient> {
    nodes
        .live()
        .iter()
        .map(|c| ServerClient::new(c.addr(), nodes.token.clone()))
        .collect()
}

/// Waits until `done`, at most until `deadline`; then fails with `what`.
pub fn wait_until(deadline: Instant, what: impl Fn() -> String, done: impl Fn() -> bool) {
    while !done() {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {}",
            what()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn in_secs(secs: u64) -> Instant {
    Instant::now() + Duration::from_secs(secs)
}

/// What the writers of [`write_load`] saw.
#[derive(Default)]
pub struct Writes {
    /// Every answer, with the index of the node that gave it.
    pub samples: Vec<(usize, Sample)>,
    /// Record id → (payload, when its 202 came).
    pub acknowledged: BTreeMap<String, (Value, Instant)>,
}

impl Writes {
    /// When the first write sent after `at` was acknowledged, by any node (`node: None`) or
    /// by node `node`.
    pub fn first_ack_after(&self, at: Instant, node: Option<usize>) -> Option<Instant> {
        self.samples
            .iter()
            .filter(|(n, s)| s.sent > at && s.status == 202 && node.is_none_or(|i| i == *n))
            .map(|(_, s)| s.sent + s.took)
            .min()
    }
}

/// Writer `w`: writes one record after another through the nodes in turn, each with its own
/// `Idempotency-Key` and a caller webhook to `callback`, `pause` apart; a write not
/// acknowledged is sent again unchanged (the same key) to the next node until it is, as a
/// client does. Stops after `stop`.
pub fn write_load(
    w: usize,
    nodes: &BinaryNodes,
    ep: &Endpoint,
    callback: &str,
    pause: Duration,
    writes: &Arc<Mutex<Writes>>,
    stop: &Arc<AtomicBool>,
) -> JoinHandle<()> {
    let clients = clients(nodes);
    let (slug, key, callback) = (
        ep.slug.clone(),
        ep.sandbox_key.clone(),
        callback.to_string(),
    );
    let (writes, stop) = (writes.clone(), stop.clone());
    std::thread::spawn(move || {
        let mut turn = w;
        for i in 0.. {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            let payload =
                json!({"writer": w, "i": i, "note": "naïve ✓", "big": 9007199254740993u64});
            let idempotency_key = format!("w{w}-{i}");
            let given_up = Instant::now() + Duration::from_secs(120);
            loop {
                let node = turn % clients.len();
                let client = &clients[node];
                turn += 1;
                let sent = Instant::now();
                let answer = super::try_send_json(
                    &client.agent,
                    &format!("{}/api/v1/data/{slug}", client.base_url()),
                    "POST",
                    &[
                        ("Authorization", &format!("Bearer {key}")),
                        ("Idempotency-Key", &idempotency_key),
                        ("X-Webhook-Callback", &callback),
                    ],
                    Some(&payload),
                )
                .ok();
                let sample = Sample::of(sent, answer.as_ref());
                let mut writes = writes.lock().unwrap();
                writes.samples.push((node, sample));
                if let Some(r) = answer.filter(|r| r.status == 202) {
                    let id = r.json()["id"].as_str().expect("id").to_string();
                    writes.acknowledged.insert(id, (payload, Instant::now()));
                    break;
                }
                drop(writes);
                assert!(
                    Instant::now() < given_up,
                    "write w{w}-{i} never acknowledged"
                );
                // A pause before the next node (a client would wait Retry-After; shorter
                // here, to see when writes are taken again).
                std::thread::sleep(Duration::from_millis(50));
            }
            std::thread::sleep(pause);
        }
    })
}

/// Every request `receiver` got, by `webhook-id`, in arrival order, once each of
/// `acknowledged` has arrived (within 60 s, or the test fails naming how many never did); a
/// webhook for a record not acknowledged fails the test too.
pub fn webhooks_of(
    receiver: &super::receiver::Receiver,
    acknowledged: &BTreeSet<String>,
    nodes: &BinaryNodes,
) -> std::collections::HashMap<String, Vec<super::receiver::Received>> {
    let deadline = in_secs(60);
    let receipts = loop {
        let mut receipts: std::collections::HashMap<String, Vec<super::receiver::Received>> =
            std::collections::HashMap::new();
        for request in receiver.requests() {
            if let Some(id) = request.header("webhook-id") {
                receipts
                    .entry(id.to_string())
                    .or_default()
                    .push(request.clone());
            }
        }
        let missing = acknowledged
            .iter()
            .filter(|id| !receipts.contains_key(*id))
            .count();
        if missing == 0 {
            break receipts;
        }
        assert!(
            Instant::now() < deadline,
            "{missing} acknowledged writes' webhooks never arrived\n{}",
            nodes.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        receipts.keys().all(|id| acknowledged.contains(id)),
        "a webhook for a record that is not stored"
    );
    receipts
}
