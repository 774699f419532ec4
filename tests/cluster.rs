//! Scale-out (issue #21, docs/src/scale-out.md): several intake nodes on one PostgreSQL
//! database, and `intake migrate` from a redb install. Each test starts real nodes (the binary,
//! or the server in-process where clocks must be skewed) on a throwaway PostgreSQL cluster and
//! spreads its requests over them.

use crate::common;

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::nodes::{
    BinaryNodes, assert_gap_free, node_config, poll_through, sibling_data_dir, try_create,
};
use common::postgres::{self, Cluster};
use common::receiver::{Receiver, Reply};
use common::{
    Endpoint, LogBuffer, OWNER_EMAIL, ServerClient, assert_status, init_with_config, spawn_serve,
};
use intake::core::clock::{Clock, ManualClock, SharedClock, SystemClock, Timestamp};
use intake::core::config::Config;
use intake::server::RunningServer;
use serde_json::json;

/// `writers` threads, each creating `each` records of `ep` on the live nodes in turn; each
/// returns its record ids in the order they were acknowledged.
fn spread_writers(
    nodes: &BinaryNodes,
    ep: &Endpoint,
    writers: usize,
    each: usize,
) -> Vec<std::thread::JoinHandle<Vec<String>>> {
    (0..writers)
        .map(|w| {
            let clients: Vec<ServerClient> = nodes
                .live()
                .iter()
                .map(|c| ServerClient::new(c.addr(), nodes.token.clone()))
                .collect();
            let (slug, key) = (ep.slug.clone(), ep.sandbox_key.clone());
            std::thread::spawn(move || {
                (0..each)
                    .map(|i| {
                        let node = &clients[(w + i) % clients.len()];
                        node.create_record(&slug, &key, &json!({"writer": w, "i": i}))["id"]
                            .as_str()
                            .expect("id")
                            .to_string()
                    })
                    .collect()
            })
        })
        .collect()
}

#[test]
fn every_acknowledged_write_is_readable_on_every_node() {
    let url = postgres::shared().database();
    let nodes = BinaryNodes::start(3, &url, "");
    let ep: Endpoint = nodes.node(0).create_endpoint("spread", &[]);
    let writers = spread_writers(&nodes, &ep, 3, 30);
    let ids: Vec<String> = writers
        .into_iter()
        .flat_map(|w| w.join().expect("writer"))
        .collect();
    assert_eq!(ids.len(), 90);
    for node in nodes.live() {
        for id in &ids {
            assert_status(&node.get_record(&ep.slug, &ep.sandbox_key, id), 200);
        }
    }
}

#[test]
fn one_idempotency_key_raced_on_two_nodes_gives_one_record() {
    let url = postgres::shared().database();
    let nodes = BinaryNodes::start(2, &url, "");
    let ep = nodes.node(0).create_endpoint("raced", &[]);
    for round in 0..10 {
        let barrier = Arc::new(Barrier::new(2));
        let racers: Vec<_> = (0..2)
            .map(|i| {
                let node = ServerClient::new(nodes.node(i).addr(), nodes.token.clone());
                let (slug, key, barrier) =
                    (ep.slug.clone(), ep.sandbox_key.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    let r = node.data_with(
                        "POST",
                        &format!("/api/v1/data/{slug}"),
                        &key,
                        &[("Idempotency-Key", &format!("race-{round}"))],
                        Some(&json!({"round": round})),
                    );
                    assert_status(&r, 202);
                    r.json()["id"].as_str().expect("id").to_string()
                })
            })
            .collect();
        let ids: HashSet<String> = racers
            .into_iter()
            .map(|r| r.join().expect("racer"))
            .collect();
        assert_eq!(
            ids.len(),
            1,
            "round {round}: two records for one key: {ids:?}"
        );
    }
    let (records, _) = nodes.node(1).list_all(&ep.slug, &ep.sandbox_key, 30);
    assert_eq!(records.len(), 10);
}

#[test]
fn a_change_of_access_on_one_node_is_refused_on_another_within_a_second() {
    let url = postgres::shared().database();
    let nodes = BinaryNodes::start(2, &url, "");
    let ep = nodes.node(0).create_endpoint("revoked", &[]);
    // Node 1 has the key in its access cache.
    assert_status(&nodes.node(1).list(&ep.slug, &ep.sandbox_key, ""), 200);
    nodes
        .node(0)
        .patch_endpoint(&ep.slug, &json!({"active": false}));
    let changed = Instant::now();
    loop {
        let r = nodes.node(1).list(&ep.slug, &ep.sandbox_key, "");
        if r.status == 403 {
            break;
        }
        assert_status(&r, 200);
        assert!(
            changed.elapsed() < Duration::from_secs(1),
            "node 1 still accepts the key of a deactivated endpoint after 1 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// An in-process node whose clock the test moves.
struct ClockedNode {
    clock: Arc<ManualClock>,
    offset: Duration,
    behind: bool,
    client: ServerClient,
    running: Option<(tokio::runtime::Runtime, RunningServer)>,
    _dir: tempfile::TempDir,
}

impl ClockedNode {
    /// A node on the database at `url` with `extra` config and `clock` moved by `offset`
    /// (`behind` or ahead). The first node (`token` still `None`) provisions the owner, whose
    /// token it sets, and leaves its key in `first` for the others to copy.
    fn start(
        url: &str,
        extra: &str,
        first: &Path,
        clock: Arc<ManualClock>,
        (offset, behind): (Duration, bool),
        token: &mut Option<String>,
    ) -> ClockedNode {
        let dir = tempfile::tempdir().expect("tempdir");
        if token.is_some() {
            sibling_data_dir(&first.join("data"), dir.path());
        }
        let data = dir.path().join("data");
        let mut config = Config::parse(&node_config(url, &data, extra)).expect("config");
        config.data_dir = data.clone();
        let node_clock: SharedClock = clock.clone();
        if token.is_none() {
            let (store, _) = intake::server::open_data_dir(&config).expect("open store");
            let owner = intake::domain::accounts::provision_owner(
                store.as_ref(),
                clock.as_ref(),
                OWNER_EMAIL,
            )
            .expect("provision owner");
            *token = Some(owner.token);
            std::fs::create_dir_all(first.join("data")).expect("dir");
            std::fs::copy(data.join("master.key"), first.join("data/master.key"))
                .expect("copy key");
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let server = runtime
            .block_on(intake::server::start(config, node_clock))
            .expect("start node");
        ClockedNode {
            clock,
            offset,
            behind,
            client: ServerClient::new(server.addr(), token.clone().expect("token")),
            running: Some((runtime, server)),
            _dir: dir,
        }
    }

    /// Sets the node's clock to `base` moved by its offset.
    fn set(&self, base: Timestamp) {
        self.clock.set(if self.behind {
            base.minus(self.offset)
        } else {
            base.plus(self.offset)
        });
    }
}

impl Drop for ClockedNode {
    fn drop(&mut self) {
        if let Some((runtime, server)) = self.running.take() {
            runtime.block_on(server.shutdown());
        }
    }
}

#[test]
fn poll_is_gap_free_across_nodes_whose_clocks_disagree() {
    let url = postgres::shared().database();
    let base = SystemClock.now();
    // Node 0 on time, node 1 three seconds behind, node 2 two seconds ahead.
    let skews = [(0, false), (3, true), (2, false)];
    let first = tempfile::tempdir().expect("tempdir");
    let mut token = None;
    let nodes: Vec<ClockedNode> = skews
        .iter()
        .map(|&(secs, behind)| {
            let clock = Arc::new(ManualClock::new(base));
            let skew = (Duration::from_secs(secs), behind);
            let node = ClockedNode::start(&url, "", first.path(), clock, skew, &mut token);
            node.set(base);
            node
        })
        .collect();
    let ep = nodes[0].client.create_endpoint("skewed", &[]);
    let clients: Vec<&ServerClient> = nodes.iter().map(|n| &n.client).collect();
    let since = "2000-01-01";
    let mut acknowledged = BTreeSet::new();
    let mut received = Vec::new();
    let mut cursor: Option<String> = None;
    // Time moves in steps of 100 ms on every node at once; each step writes through every
    // node and polls once through the next.
    for step in 1..=30u32 {
        let now = base.plus(Duration::from_millis(100) * step);
        for node in &nodes {
            node.set(now);
        }
        for node in &clients {
            let id =
                try_create(node, &ep.slug, &ep.sandbox_key, &json!({"step": step})).expect("202");
            acknowledged.insert(id);
        }
        let node = clients[step as usize % clients.len()];
        let query = match &cursor {
            Some(c) => format!("cursor={c}"),
            None => format!("since={since}"),
        };
        let r = node.data(
            "GET",
            &format!("/api/v1/data/{}/poll?{query}", ep.slug),
            &ep.sandbox_key,
            None,
        );
        assert_status(&r, 200);
        let body = r.json();
        for record in body["data"].as_array().expect("data") {
            received.push(record["id"].as_str().expect("id").to_string());
        }
        cursor = body["next_cursor"]
            .as_str()
            .or(body["poll_cursor"].as_str())
            .map(str::to_string);
    }
    // Past every skew: the rest arrives once the marks have moved on.
    let later = base.plus(Duration::from_secs(60));
    for node in &nodes {
        node.set(later);
    }
    let rest = poll_through(
        &clients,
        &ep.slug,
        &ep.sandbox_key,
        since,
        cursor,
        Duration::from_secs(30),
        |ids| received.len() + ids.len() >= acknowledged.len(),
    );
    received.extend(rest);
    assert_gap_free(&received, &acknowledged);
}

#[test]
fn a_killed_node_loses_nothing_acknowledged_and_the_others_take_over_its_work() {
    let url = postgres::shared().database();
    let receiver = Receiver::start();
    receiver.always(Reply::status(200));
    let mut nodes = BinaryNodes::start(
        3,
        &url,
        "[webhooks]\nallow_private_targets = true\ntimeout = \"2s\"\n",
    );
    let ep = nodes.node(0).create_endpoint("survivor", &[]);
    let path = format!("/api/v1/manage/endpoints/{}/webhooks/sandbox", ep.slug);
    assert_status(
        &nodes
            .node(0)
            .manage("PUT", &path, Some(&json!({"url": receiver.url("/hook")}))),
        200,
    );
    let since = "2000-01-01";
    let clients: Vec<ServerClient> = (0..3)
        .map(|i| ServerClient::new(nodes.node(i).addr(), nodes.token.clone()))
        .collect();
    let mut acknowledged = BTreeSet::new();
    for i in 0..120 {
        if i == 60 {
            nodes.kill9(2);
        }
        let node = &clients[i % 3];
        if let Some(id) = try_create(node, &ep.slug, &ep.sandbox_key, &json!({"i": i})) {
            acknowledged.insert(id);
        } else if i < 60 || i % 3 != 2 {
            // Only the killed node may leave a write unanswered; a live one may answer 503
            // under load (a client retries that), never lose it.
            let retried = (0..2)
                .find_map(|n| try_create(&clients[n], &ep.slug, &ep.sandbox_key, &json!({"i": i})));
            acknowledged.insert(retried.unwrap_or_else(|| {
                panic!("write {i} was refused by the live nodes\n{}", nodes.logs())
            }));
        }
    }
    let survivors = nodes.live();
    for id in &acknowledged {
        assert_status(&survivors[0].get_record(&ep.slug, &ep.sandbox_key, id), 200);
    }
    // The feed goes on past the dead node's mark once its lease has lapsed.
    let polled = poll_through(
        &survivors,
        &ep.slug,
        &ep.sandbox_key,
        since,
        None,
        Duration::from_secs(30),
        |ids| ids.len() >= acknowledged.len(),
    );
    assert_gap_free(&polled, &acknowledged);
    // Every acknowledged record's webhook arrives at least once, the dead node's claims
    // included.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let delivered: HashSet<String> = receiver
            .requests()
            .iter()
            .filter_map(|r| r.header("webhook-id").map(str::to_string))
            .collect();
        let missing: Vec<&String> = acknowledged
            .iter()
            .filter(|id| !delivered.contains(*id))
            .collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} acknowledged records never reached the receiver, e.g. {}\n{}",
            missing.len(),
            missing[0],
            nodes.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_database_restart_mid_load_loses_nothing_acknowledged_and_the_nodes_recover() {
    let cluster = Cluster::start();
    let url = cluster.database();
    let nodes = BinaryNodes::start(2, &url, "");
    let ep = nodes.node(0).create_endpoint("restarted", &[]);
    let clients: Vec<ServerClient> = (0..2)
        .map(|i| ServerClient::new(nodes.node(i).addr(), nodes.token.clone()))
        .collect();
    let mut acknowledged = BTreeSet::new();
    let mut refused = 0;
    for i in 0..40 {
        if i == 20 {
            cluster.restart_immediate();
        }
        let node = &clients[i % 2];
        match try_create(node, &ep.slug, &ep.sandbox_key, &json!({"i": i})) {
            Some(id) => {
                acknowledged.insert(id);
            }
            None => refused += 1,
        }
    }
    // Writes succeed again without restarting the nodes.
    let deadline = Instant::now() + Duration::from_secs(30);
    for node in &clients {
        loop {
            if let Some(id) = try_create(
                node,
                &ep.slug,
                &ep.sandbox_key,
                &json!({"after": node.addr().to_string()}),
            ) {
                acknowledged.insert(id);
                break;
            }
            refused += 1;
            assert!(
                Instant::now() < deadline,
                "a node did not recover from the database restart\n{}",
                nodes.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    println!("{refused} writes refused while the database restarted");
    for id in &acknowledged {
        assert_status(&clients[1].get_record(&ep.slug, &ep.sandbox_key, id), 200);
    }
}

#[test]
fn the_quota_overshoot_stays_within_its_documented_bound() {
    let url = postgres::shared().database();
    let nodes = BinaryNodes::start(3, &url, "");
    let ep = nodes.node(0).create_endpoint("quota", &[]);
    const QUOTA: u64 = 60;
    nodes
        .node(0)
        .patch_endpoint(&ep.slug, &json!({"monthly_quota": QUOTA}));
    // Each writer is paced to at most 10 calls/s, so the run spans several of the nodes'
    // once-a-second flushes: unpaced on a busy machine, the writers' burst outran the flushes
    // they need to see each other's calls.
    const CALLS: u32 = 80;
    const SPACING: Duration = Duration::from_millis(100);
    let started = Instant::now();
    let writers: Vec<_> = (0..3)
        .map(|w| {
            let node = ServerClient::new(nodes.node(w).addr(), nodes.token.clone());
            let (slug, key) = (ep.slug.clone(), ep.sandbox_key.clone());
            std::thread::spawn(move || {
                let mut accepted = 0u64;
                for i in 0..CALLS {
                    let due = started + SPACING * i;
                    if let Some(wait) = due.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                    let r = node.post_record(&slug, &key, &json!({"i": i}));
                    match r.status {
                        202 => accepted += 1,
                        429 => {}
                        // A node whose lease ran short (a loaded machine can delay its
                        // heartbeat) refuses writes until it renews it: not accepted, as a
                        // client would retry after Retry-After.
                        503 if r.error_code().as_deref() == Some("storage_unavailable") => {}
                        other => panic!("unexpected status {other}: {}", r.describe()),
                    }
                }
                accepted
            })
        })
        .collect();
    let accepted: u64 = writers.into_iter().map(|w| w.join().expect("writer")).sum();
    let seconds = started.elapsed().as_secs_f64();
    // docs/src/scale-out.md: at most (nodes - 1) × calls per second per node × the time a
    // node's view lags: 2 s of flush intervals, and up to 2 s more on a machine busy enough
    // to run the flushes late (CI runs this beside three other tests: 2.6 s measured).
    let per_node_rate = f64::from(CALLS) / seconds;
    let bound = (2.0 * per_node_rate * 4.0).ceil() as u64;
    // Nodes that never saw each other's calls would accept the quota each: the bound must
    // stay below that, or this test could not fail.
    assert!(bound < 2 * QUOTA, "the writers ran too fast: bound {bound}");
    assert!(
        accepted >= QUOTA,
        "only {accepted} calls accepted under a quota of {QUOTA}"
    );
    assert!(
        accepted <= QUOTA + bound,
        "{accepted} calls accepted under a quota of {QUOTA}: more than the bound of {bound} over"
    );
}

/// SHA-256 of every file under `dir`, by relative path.
fn digest_tree(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    use sha2::Digest;
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).expect("read dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let bytes = std::fs::read(&path).expect("read file");
                let rel = path.strip_prefix(dir).expect("under dir").to_path_buf();
                out.push((rel, sha2::Sha256::digest(&bytes).to_vec()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn migrate_copies_a_redb_install_into_postgres_and_verifies_it() {
    if common::redb_only("the install it migrates from is a redb one (a TestServer)") {
        return;
    }
    // A single-node install with records (one replaced), an owner webhook and its secret.
    let mut server = common::TestServer::start();
    let ep = server.create_endpoint("moving", &[]);
    let mut ids = Vec::new();
    for i in 0..25 {
        let created = server.create_record(
            &ep.slug,
            &ep.sandbox_key,
            &json!({"n": i, "city": "Zürich"}),
        );
        ids.push(created["id"].as_str().expect("id").to_string());
    }
    assert_status(
        &server.put_record(
            &ep.slug,
            &ep.sandbox_key,
            &ids[3],
            &json!({"replaced": true}),
        ),
        202,
    );
    let secret_path = format!(
        "/api/v1/manage/endpoints/{}/webhook-secrets/sandbox",
        ep.slug
    );
    let secret = server.manage("GET", &secret_path, None).json()["secret"].clone();
    let before = server.list(&ep.slug, &ep.sandbox_key, "limit=30").json();
    let data_dir = server.data_dir();
    // A running server holds the file: refused.
    let url = postgres::shared().database();
    let migrate = |url: &str| {
        common::run_cli(
            common::intake_cmd()
                .arg("migrate")
                .arg("--from-redb")
                .arg(&data_dir)
                .args(["--to", url, "--tls", "disable"]),
            Duration::from_secs(120),
        )
    };
    let refused = migrate(&url);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("stop the server"));
    assert!(server.sigterm_and_wait().success());
    let untouched = digest_tree(&data_dir);

    let out = migrate(&url);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "migrate failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("records: 25"), "{stdout}");
    assert!(stdout.contains("endpoints: 1"), "{stdout}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("copied"));
    assert_eq!(digest_tree(&data_dir), untouched, "the data dir changed");
    // Into a database that is not empty any more: refused, nothing changed.
    let again = migrate(&url);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("empty database"));

    // A node on the database with the install's key serves the same data.
    let dir = tempfile::tempdir().expect("tempdir");
    let data = sibling_data_dir(&data_dir, dir.path());
    let config = dir.path().join("intake.toml");
    std::fs::write(&config, node_config(&url, &data, "")).expect("config");
    let log = LogBuffer::default();
    let mut node = spawn_serve(&["--config".as_ref(), config.as_os_str()], &[], &log);
    let client = ServerClient::new(node.addr, server.owner_token.clone());
    assert_eq!(
        client.list(&ep.slug, &ep.sandbox_key, "limit=30").json(),
        before
    );
    let replaced = client.get_record(&ep.slug, &ep.sandbox_key, &ids[3]).json();
    assert_eq!(replaced["payload"], json!({"replaced": true}));
    assert_eq!(
        client.manage("GET", &secret_path, None).json()["secret"],
        secret
    );
    let found = client.data(
        "GET",
        &format!("/api/v1/data/{}/search?q=zürich&limit=30", ep.slug),
        &ep.sandbox_key,
        None,
    );
    assert_eq!(found.json()["data"].as_array().expect("data").len(), 24);
    let _ = node.child.kill();
    let _ = node.child.wait();

    // A node with another key is refused before it writes anything.
    let stranger = tempfile::tempdir().expect("tempdir");
    let config = stranger.path().join("intake.toml");
    std::fs::write(
        &config,
        node_config(&url, &stranger.path().join("data"), ""),
    )
    .expect("config");
    let out = common::run_cli(
        common::intake_cmd()
            .args(["serve", "--config"])
            .arg(&config),
        Duration::from_secs(60),
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("master.key"));
}

#[test]
fn each_periodic_job_runs_on_one_node_per_period() {
    let url = postgres::shared().database();
    // Every node's schedule comes round at its start; only one node may run each job.
    let nodes = BinaryNodes::start_with_env(
        3,
        &url,
        "",
        &[("RUST_LOG", "info,intake::domain::jobs=debug")],
    );
    let jobs = ["expiry_sweep", "retention", "outbox_purge"];
    let runs = |job: &str| {
        nodes
            .nodes
            .iter()
            .flatten()
            .map(|n| {
                n.log
                    .lines()
                    .iter()
                    .filter(|l| l.contains(&format!("periodic job {job}:")))
                    .count()
            })
            .sum::<usize>()
    };
    // Each node's schedule has come round once it has served a request for a moment.
    let deadline = Instant::now() + Duration::from_secs(10);
    while jobs.iter().any(|job| runs(job) == 0) {
        assert!(
            Instant::now() < deadline,
            "a periodic job never ran\n{}",
            nodes.logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs(2));
    for job in jobs {
        assert_eq!(runs(job), 1, "{job} ran more than once\n{}", nodes.logs());
    }
}

#[test]
fn the_database_is_reached_over_verified_tls() {
    let ca = common::ca::Ca::new("database CA");
    let (chain, key) = ca.issue();
    let cluster = Cluster::start_tls(&chain, &key);
    let url = cluster.database();
    let dir = tempfile::tempdir().expect("tempdir");
    let ca_file = dir.path().join("db-ca.pem");
    std::fs::write(&ca_file, ca.pem()).expect("write CA");
    let tls = |ca_file: &Path| {
        format!(
            "listen = \"127.0.0.1:0\"\ndata_dir = {:?}\n[storage]\nbackend = \"postgres\"\n\
             [storage.postgres]\nurl = {url:?}\ntls = \"verify-full\"\nca_file = {ca_file:?}\n",
            dir.path().join("data")
        )
    };
    let config = dir.path().join("intake.toml");
    // Trusting the database's CA: every connection of the node is encrypted.
    std::fs::write(&config, tls(&ca_file)).expect("config");
    let init = init_with_config(&config, OWNER_EMAIL);
    let log = LogBuffer::default();
    let mut node = spawn_serve(&["--config".as_ref(), config.as_os_str()], &[], &log);
    let client = ServerClient::new(node.addr, init.token);
    let ep = client.create_endpoint("over-tls", &[]);
    client.create_record(&ep.slug, &ep.sandbox_key, &json!({"secure": true}));
    let encrypted = cluster.psql(
        "postgres",
        "SELECT count(*) FILTER (WHERE ssl) || '/' || count(*) FROM pg_stat_ssl \
         JOIN pg_stat_activity USING (pid) WHERE application_name = 'intake'",
    );
    let (over_tls, all) = encrypted.split_once('/').expect("two counts");
    assert!(
        all != "0" && over_tls == all,
        "intake's connections over TLS: {encrypted}"
    );
    let _ = node.child.kill();
    let _ = node.child.wait();
    // Trusting another CA: refused, saying why.
    let other = dir.path().join("other-ca.pem");
    std::fs::write(&other, common::ca::Ca::new("other CA").pem()).expect("write CA");
    std::fs::write(&config, tls(&other)).expect("config");
    let out = common::run_cli(
        common::intake_cmd()
            .args(["serve", "--config"])
            .arg(&config),
        Duration::from_secs(60),
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("certificate") || stderr.contains("UnknownIssuer"),
        "{stderr}"
    );
}

#[test]
fn a_subscription_rate_limit_holds_across_the_nodes() {
    let url = postgres::shared().database();
    let nodes = BinaryNodes::start(2, &url, "[webhooks]\nallow_private_targets = true\n");
    let ep: Endpoint = nodes.node(0).create_endpoint("paced", &[]);
    let receiver = Receiver::start();
    let path = format!(
        "/api/v1/manage/endpoints/{}/webhooks/sandbox/subscriptions",
        ep.slug
    );
    // Four a second, a tenth of a second's worth (at least one) at once: 1 + 3 more take at
    // least 0.75 s however many nodes send them.
    let body = json!({ "url": receiver.url("/in"), "rate_limit": 4 });
    assert_status(&nodes.node(0).manage("POST", &path, Some(&body)), 201);
    for i in 0..8 {
        nodes
            .node(i % 2)
            .create_record(&ep.slug, &ep.sandbox_key, &json!({ "i": i }));
    }
    let got = receiver.wait_for(8, Duration::from_secs(30));
    let span = got[7].at.duration_since(got[0].at);
    // Eight starts at four a second: the last at least 1.75 s after the first (one node each
    // pacing on its own would send them in half that).
    assert!(
        span >= Duration::from_millis(1_500),
        "8 deliveries in {span:?}"
    );
}

/// "Retry now" asked on one node while another node's attempt is in flight (the receiver
/// holds its answer 2 s) is honoured when that attempt ends: the outcome's commit sees the
/// request in the shared row, so the next attempt is due at once, not after the schedule's
/// 30 s, which the nodes' clock (not moving here) never reaches.
#[test]
fn retry_now_on_one_node_is_honoured_when_another_node_s_attempt_ends() {
    let url = postgres::shared().database();
    let clock = Arc::new(ManualClock::new(SystemClock.now()));
    let first = tempfile::tempdir().expect("tempdir");
    let mut token = None;
    let none = (Duration::ZERO, false);
    let config = "[webhooks]\nallow_private_targets = true\n";
    let sender = ClockedNode::start(&url, config, first.path(), clock.clone(), none, &mut token);
    let ep: Endpoint = sender.client.create_endpoint("retried", &[]);
    let receiver = Receiver::start();
    receiver.script([Reply::status(503).delay(Duration::from_secs(2))]);
    receiver.always(Reply::status(204));
    let path = format!("/api/v1/manage/endpoints/{}/webhooks/sandbox", ep.slug);
    let body = json!({ "url": receiver.url("/slow") });
    assert_status(&sender.client.manage("PUT", &path, Some(&body)), 200);
    sender
        .client
        .create_record(&ep.slug, &ep.sandbox_key, &json!({ "n": 1 }));
    // The only node holds the attempt; a second joins while the receiver holds its answer.
    receiver.wait_for(1, Duration::from_secs(30));
    let other = ClockedNode::start(&url, config, first.path(), clock, none, &mut token);
    let deliveries = format!("/api/v1/manage/endpoints/{}/deliveries", ep.slug);
    let listed = other.client.manage("GET", &deliveries, None).json();
    let id = listed["data"][0]["id"].as_u64().expect("delivery id");
    let r = other
        .client
        .manage("POST", &format!("{deliveries}/{id}/retry"), None);
    assert_status(&r, 200);
    assert_eq!(r.json()["attempts"], 0, "the attempt was still in flight");

    receiver.wait_for(2, Duration::from_secs(10));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let v = other
            .client
            .manage("GET", &format!("{deliveries}/{id}"), None)
            .json();
        if v["state"] == "delivered" {
            assert_eq!(v["attempts"], 2, "{v}");
            break;
        }
        assert!(Instant::now() < deadline, "{v}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

#[test]
fn a_change_stream_sees_every_node_s_writes_and_resumes_on_another_node() {
    let url = postgres::shared().database();
    let nodes = BinaryNodes::start(2, &url, "[stream]\ncluster_poll = \"50ms\"\n");
    let ep: Endpoint = nodes.node(0).create_endpoint("streamed", &[]);
    let (slug, key) = (ep.slug.clone(), ep.sandbox_key.clone());
    let first = common::sse::open(nodes.node(0).addr(), &slug, &key, None, "").expect("stream");
    // Two writers, each alternating between the nodes.
    let writers = spread_writers(&nodes, &ep, 2, 40);
    // Half the events from node 0, the rest from node 1, resumed with the last id seen.
    let mut seen = Vec::new();
    let mut last_id = None;
    let mut reader = first;
    for n in 0..80 {
        if n == 40 {
            reader = common::sse::open(nodes.node(1).addr(), &slug, &key, last_id.as_deref(), "")
                .expect("resume on the other node");
        }
        let event = reader
            .next()
            .unwrap_or_else(|| panic!("the stream ended: {}", nodes.logs()));
        assert_eq!(event.kind, "record.created");
        seen.push(event.data["data"]["id"].as_str().unwrap().to_string());
        last_id = event.id;
    }
    let written: Vec<Vec<String>> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    let unique: HashSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), 80, "an event came twice");
    for ids in &written {
        let places: Vec<usize> = ids
            .iter()
            .map(|id| {
                seen.iter()
                    .position(|s| s == id)
                    .expect("an acknowledged write is missing")
            })
            .collect();
        assert!(places.windows(2).all(|w| w[0] < w[1]), "{places:?}");
    }
}

#[test]
fn a_revocation_on_one_node_ends_a_stream_on_another_before_its_next_heartbeat() {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, Ordering};

    const HEARTBEAT: Duration = Duration::from_secs(5);
    let url = postgres::shared().database();
    let nodes = BinaryNodes::start(
        2,
        &url,
        "[stream]\ncluster_poll = \"50ms\"\nheartbeat = \"5s\"\n",
    );
    let ep: Endpoint = nodes.node(0).create_endpoint("revoked", &[]);
    let member = common::add_collaborator(nodes.node(0), &ep.slug, "far@example.com", &["read"]);
    let mut stream = common::sse::open(
        nodes.node(1).addr(),
        &ep.slug,
        &member.sandbox_key,
        None,
        "",
    )
    .expect("stream on node 1");
    // Writers on both nodes; each write is marked by whether it was sent after the
    // revocation's answer, so committed after it.
    let revoked = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let after = Arc::new(Mutex::new(Vec::new()));
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let client = ServerClient::new(nodes.node(w).addr(), nodes.token.clone());
            let (slug, key) = (ep.slug.clone(), ep.sandbox_key.clone());
            let (revoked, stop, after) = (revoked.clone(), stop.clone(), after.clone());
            std::thread::spawn(move || {
                let mut i = 0;
                while !stop.load(Ordering::SeqCst) {
                    let sent_after = revoked.load(Ordering::SeqCst);
                    let id = client.create_record(&slug, &key, &json!({"w": w, "i": i}))["id"]
                        .as_str()
                        .expect("id")
                        .to_string();
                    if sent_after {
                        after.lock().unwrap().push(id);
                    }
                    i += 1;
                }
            })
        })
        .collect();
    for _ in 0..10 {
        let event = stream
            .next()
            .unwrap_or_else(|| panic!("ended: {}", nodes.logs()));
        assert_eq!(event.kind, "record.created");
    }
    let path = format!(
        "/api/v1/manage/endpoints/{}/collaborators/{}",
        ep.slug, member.id
    );
    let r = nodes
        .node(0)
        .manage("PATCH", &path, Some(&json!({"permissions": ["create"]})));
    assert_status(&r, 200);
    revoked.store(true, Ordering::SeqCst);
    let revoked_at = Instant::now();
    let mut received = Vec::new();
    let error = loop {
        let event = stream
            .next()
            .unwrap_or_else(|| panic!("closed without stream.error: {}", nodes.logs()));
        if event.kind == "stream.error" {
            break event.data;
        }
        received.push(event.data["data"]["id"].as_str().expect("id").to_string());
    };
    let took = revoked_at.elapsed();
    assert!(
        stream.next().is_none(),
        "the stream went on after its error"
    );
    while after.lock().unwrap().len() < 20 {
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::SeqCst);
    for writer in writers {
        writer.join().expect("writer");
    }
    assert_eq!(error["error"]["code"], "missing_permission_read", "{error}");
    assert!(
        took < HEARTBEAT,
        "the stream ended {took:?} after the revocation"
    );
    let after = after.lock().unwrap();
    let leaked: Vec<&String> = received.iter().filter(|id| after.contains(id)).collect();
    assert!(leaked.is_empty(), "sent after the revocation: {leaked:?}");
    // Node 1's data calls follow once its heartbeat sees the change (its access cache); the
    // stream did not wait for that.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = nodes.node(1).list(&ep.slug, &member.sandbox_key, "");
        if r.status == 403 {
            common::assert_error(&r, 403, "missing_permission_read");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "node 1 still serves the key: {}",
            r.describe()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
