//! `GET /healthz`, `GET /readyz` and `GET /metrics` over real HTTP against the real binary.

use crate::common;

use std::time::{Duration, Instant};

use common::TestServer;
use serde_json::json;

/// The first 200 of `/readyz`. The server is ready once the search index has been opened,
/// which the start does in the background; until then the answer is 503 with the index check
/// failing.
fn wait_ready(s: &TestServer) -> common::Resp {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let ready = s.request("GET", "/readyz", &[], None);
        if ready.status == 200 {
            return ready;
        }
        assert_eq!(ready.status, 503, "{}", ready.describe());
        assert!(std::time::Instant::now() < deadline, "{}", ready.describe());
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn healthz_and_readyz_answer_without_authentication() {
    let s = TestServer::start();
    let health = s.request("GET", "/healthz", &[], None);
    assert_eq!(health.status, 200, "{}", health.describe());
    assert_eq!(health.json(), json!({"status": "ok"}));

    let ready = wait_ready(&s);
    let body = ready.json();
    assert_eq!(body["ready"], true, "{body}");
    let names: Vec<&str> = body["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            assert_eq!(c["ok"], true, "{c}");
            c["name"].as_str().unwrap()
        })
        .collect();
    assert_eq!(names, ["storage", "ingest_writer", "search_index"]);
    // The storage probe leaves nothing behind in the data dir.
    assert!(!s.data_dir().join(".readyz-probe").exists());

    let wrong_method = s.request("POST", "/readyz", &[], None);
    assert_eq!(wrong_method.status, 405);
}

#[test]
fn metrics_count_requests_writes_searches_and_show_the_state() {
    let s = TestServer::start();
    let e = s.create_endpoint("metrics", &[]);
    for i in 0..3 {
        s.create_record(&e.slug, &e.sandbox_key, &json!({"n": i, "text": "hello"}));
    }
    let found = s.data(
        "GET",
        &format!("/api/v1/data/{}/search?q=hello", e.slug),
        &e.sandbox_key,
        None,
    );
    assert_eq!(found.status, 200, "{}", found.describe());

    let m = s.request("GET", "/metrics", &[], None);
    assert_eq!(m.status, 200, "{}", m.describe());
    assert!(
        m.header("content-type")
            .unwrap()
            .starts_with("text/plain; version=0.0.4"),
        "{:?}",
        m.headers
    );
    let text = m.text();
    let value = |series: &str| -> f64 {
        let line = text
            .lines()
            .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
            .unwrap_or_else(|| panic!("no series {series} in\n{text}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert_eq!(
        value(
            "intake_http_requests_total{route=\"/api/v1/data/{slug}\",method=\"POST\",status=\"202\"}"
        ),
        3.0
    );
    assert_eq!(
        value("intake_http_request_duration_seconds_count{route=\"/api/v1/data/{slug}\"}"),
        3.0
    );
    assert_eq!(value("intake_search_duration_seconds_count"), 1.0);
    // Three creates: at least one commit, three writes in all.
    assert_eq!(value("intake_ingest_batch_size_sum"), 3.0);
    assert!(value("intake_ingest_commit_duration_seconds_count") >= 1.0);
    assert_eq!(value("intake_ingest_queue_depth"), 0.0);
    assert_eq!(
        value("intake_webhook_attempts_total{outcome=\"delivered\"}"),
        0.0
    );
    assert_eq!(value("intake_webhook_pending_deliveries"), 0.0);
    assert_eq!(value("intake_webhook_retry_backlog"), 0.0);
    assert_eq!(value("intake_mail_outbox{status=\"queued\"}"), 0.0);
    assert!(text.contains("# TYPE intake_http_request_duration_seconds histogram"));
    assert!(text.contains("intake_search_index_lag "));
}

#[test]
fn metrics_token_is_required_when_configured() {
    let s = TestServer::start_with_config("[operations]\nmetrics_token = \"scrape-secret\"\n");
    let none = s.request("GET", "/metrics", &[], None);
    assert_eq!(none.status, 401, "{}", none.describe());
    assert_eq!(none.error_code().as_deref(), Some("invalid_metrics_token"));
    let wrong = s.request("GET", "/metrics", &[("Authorization", "Bearer nope")], None);
    assert_eq!(wrong.status, 401);
    let right = s.request(
        "GET",
        "/metrics",
        &[("Authorization", "Bearer scrape-secret")],
        None,
    );
    assert_eq!(right.status, 200, "{}", right.describe());
    assert!(right.text().contains("intake_http_requests_total"));
    // Health and readiness stay open.
    assert_eq!(s.request("GET", "/healthz", &[], None).status, 200);
    wait_ready(&s);
    // The token never reaches the log.
    assert!(!s.log.text().contains("scrape-secret"));
}

/// `serve` opts out of transparent huge pages: where the kernel grants them, an allocator's
/// arenas made the idle server's memory more than double (docs/src/benchmarks.md).
#[test]
fn the_server_runs_without_transparent_huge_pages() {
    let s = TestServer::start();
    let status = std::fs::read_to_string(format!("/proc/{}/status", s.pid()))
        .expect("the server's /proc status");
    let flag = status
        .lines()
        .find_map(|line| line.strip_prefix("THP_enabled:"))
        .expect("the kernel reports THP_enabled");
    assert_eq!(flag.trim(), "0", "{status}");
}

/// Each thread of `pid` by name, with its nice value (Linux keeps one per thread).
fn thread_nice_values(pid: u32) -> Vec<(String, i32)> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the server's threads");
    let mut threads = Vec::new();
    for task in tasks {
        let path = task.expect("a thread entry").path();
        let (Ok(comm), Ok(stat)) = (
            std::fs::read_to_string(path.join("comm")),
            std::fs::read_to_string(path.join("stat")),
        ) else {
            continue; // the thread ended meanwhile
        };
        // Fields after the ")" that closes the name start at field 3 (state); nice is field 19.
        let after_name = &stat[stat.rfind(')').expect("stat names the thread") + 1..];
        let nice = after_name
            .split_whitespace()
            .nth(16)
            .and_then(|n| n.parse().ok())
            .expect("nice field");
        threads.push((comm.trim().to_string(), nice));
    }
    threads
}

/// [`thread_nice_values`] once every name in `required` is among the threads. A new thread
/// carries its parent's name until it names itself, so right after start tantivy's threads
/// may still be called `search-indexer`.
fn threads_once_named(pid: u32, required: &[&str]) -> Vec<(String, i32)> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let threads = thread_nice_values(pid);
        let missing: Vec<&&str> = required
            .iter()
            .filter(|r| !threads.iter().any(|(name, _)| name == *r))
            .collect();
        if missing.is_empty() {
            return threads;
        }
        assert!(
            Instant::now() < deadline,
            "no {missing:?} thread: {threads:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn search_indexing_runs_at_the_configured_lower_priority() {
    if common::redb_only("PostgreSQL searches in the database: there is no indexer") {
        return;
    }
    let is_indexing = |name: &str| {
        name == "search-indexer"
            || name == "segment_updater"
            || name.starts_with("thrd-tantivy")
            || name.starts_with("merge_thread")
    };
    let s = TestServer::start();
    let threads = threads_once_named(
        s.pid(),
        &[
            "search-indexer",
            "thrd-tantivy-in",
            "merge_thread_0",
            "tokio-rt-worker",
            "ingest-writer",
        ],
    );
    for (name, nice) in &threads {
        let expected = if is_indexing(name) { 10 } else { 0 };
        assert_eq!(*nice, expected, "{name}: {threads:?}");
    }

    let s = TestServer::start_with_config("[search]\nindexer_nice = 0\n");
    let threads = threads_once_named(s.pid(), &["search-indexer", "thrd-tantivy-in"]);
    assert!(threads.iter().all(|(_, nice)| *nice == 0), "{threads:?}");
}
