//! Counters and histograms the server keeps while it runs, rendered for `GET /metrics` in the
//! Prometheus text format (version 0.0.4).
//!
//! Event metrics (requests, search latency, write batches, webhook outcomes) are counted where
//! they happen, into the [`Metrics`] every component shares through `App`. State metrics
//! (queue depth, retry backlog, outbox) are read from the live components and the store when
//! scraped, so they cannot drift from the truth. Everything counts since the process started.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (seconds) of the latency buckets: 0.5 ms to 10 s.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// Upper bounds of the write-batch-size buckets (writes per commit).
pub const BATCH_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0];

/// A cumulative histogram with fixed bucket bounds.
pub struct Histogram {
    bounds: &'static [f64],
    inner: Mutex<HistogramData>,
}

#[derive(Clone, Default)]
struct HistogramData {
    /// `counts[i]` observations fell at or below `bounds[i]` and above `bounds[i - 1]`;
    /// the last slot counts those above every bound.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl HistogramData {
    fn new(bounds: &[f64]) -> HistogramData {
        HistogramData {
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
            count: 0,
        }
    }

    fn observe(&mut self, bounds: &[f64], value: f64) {
        let slot = bounds.partition_point(|b| *b < value);
        self.counts[slot] += 1;
        self.sum += value;
        self.count += 1;
    }

    /// Writes the `_bucket`, `_sum` and `_count` lines; `labels` is `""` or `key="v",`.
    fn render(&self, out: &mut String, name: &str, labels: &str, bounds: &[f64]) {
        let mut cumulative = 0;
        for (bound, count) in bounds.iter().zip(&self.counts) {
            cumulative += count;
            let _ = writeln!(out, "{name}_bucket{{{labels}le=\"{bound}\"}} {cumulative}");
        }
        let _ = writeln!(out, "{name}_bucket{{{labels}le=\"+Inf\"}} {}", self.count);
        let labels = labels.trim_end_matches(',');
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braces} {}", self.sum);
        let _ = writeln!(out, "{name}_count{braces} {}", self.count);
    }
}

impl Histogram {
    pub fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            inner: Mutex::new(HistogramData::new(bounds)),
        }
    }

    pub fn observe(&self, value: f64) {
        let mut data = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        data.observe(self.bounds, value);
    }

    pub fn observe_duration(&self, elapsed: Duration) {
        self.observe(elapsed.as_secs_f64());
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        header(out, name, "histogram", help);
        let data = self.inner.lock().unwrap_or_else(|e| e.into_inner()).clone();
        data.render(out, name, "", self.bounds);
    }
}

/// Requests of one route: how many per method and status, and how long they took.
struct RouteStats {
    by_method_status: BTreeMap<(String, u16), u64>,
    latency: HistogramData,
}

/// What the server counts while it runs (see the module doc).
pub struct Metrics {
    routes: Mutex<BTreeMap<&'static str, RouteStats>>,
    /// Time of each data search, parsing to page.
    pub search_seconds: Histogram,
    /// Writes per group commit of the ingest writer.
    pub write_batch_size: Histogram,
    /// Time of each group commit, fsync included.
    pub write_commit_seconds: Histogram,
    /// Webhook attempts by verdict: delivered, retry, given up.
    pub webhook_delivered: AtomicU64,
    pub webhook_retry: AtomicU64,
    pub webhook_given_up: AtomicU64,
    /// Change-stream readers disconnected for leaving their buffer full.
    pub stream_slow_readers: AtomicU64,
    /// Spans dropped because the exporter's queue was full.
    pub telemetry_spans_dropped: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            routes: Mutex::new(BTreeMap::new()),
            search_seconds: Histogram::new(LATENCY_BUCKETS),
            write_batch_size: Histogram::new(BATCH_BUCKETS),
            write_commit_seconds: Histogram::new(LATENCY_BUCKETS),
            webhook_delivered: AtomicU64::new(0),
            webhook_retry: AtomicU64::new(0),
            webhook_given_up: AtomicU64::new(0),
            stream_slow_readers: AtomicU64::new(0),
            telemetry_spans_dropped: AtomicU64::new(0),
        }
    }
}

/// Gauges read from the live server at scrape time.
pub struct State {
    pub ingest_queue_depth: usize,
    /// Deliveries waiting for an attempt: due now, or scheduled for a retry.
    pub webhook_pending: u64,
    /// Of those, deliveries scheduled for a retry later than now.
    pub webhook_retry_backlog: u64,
    pub mail_queued: u64,
    pub mail_sent: u64,
    pub mail_failed: u64,
    /// Change-log entries the search index has not covered yet.
    pub search_index_lag: u64,
    /// KiB of `[http] body_memory_mb` request bodies hold now.
    pub request_body_kib: u64,
    /// zstd dictionaries the store has trained for stored payloads (0: payloads are stored
    /// as sent).
    pub payload_dictionaries: u64,
    /// Change streams open on this node.
    pub streams_open: u64,
}

impl Metrics {
    /// Counts one answered request under its path template.
    pub fn observe_request(
        &self,
        template: &'static str,
        method: &str,
        status: u16,
        elapsed: Duration,
    ) {
        let mut routes = self.routes.lock().unwrap_or_else(|e| e.into_inner());
        let stats = routes.entry(template).or_insert_with(|| RouteStats {
            by_method_status: BTreeMap::new(),
            latency: HistogramData::new(LATENCY_BUCKETS),
        });
        *stats
            .by_method_status
            .entry((method.to_string(), status))
            .or_insert(0) += 1;
        stats
            .latency
            .observe(LATENCY_BUCKETS, elapsed.as_secs_f64());
    }

    /// The whole exposition, event metrics and `state`.
    pub fn render(&self, state: &State) -> String {
        let mut out = String::with_capacity(8192);
        self.render_requests(&mut out);
        self.search_seconds.render(
            &mut out,
            "intake_search_duration_seconds",
            "Time of each data search.",
        );
        gauge(
            &mut out,
            "intake_search_index_lag",
            "Change-log entries not yet in the search index.",
            state.search_index_lag,
        );
        gauge(
            &mut out,
            "intake_request_body_kib",
            "KiB of the request-body memory budget ([http] body_memory_mb) held now.",
            state.request_body_kib,
        );
        gauge(
            &mut out,
            "intake_ingest_queue_depth",
            "Writes queued for the ingest writer.",
            state.ingest_queue_depth as u64,
        );
        self.write_batch_size.render(
            &mut out,
            "intake_ingest_batch_size",
            "Writes per group commit.",
        );
        self.write_commit_seconds.render(
            &mut out,
            "intake_ingest_commit_duration_seconds",
            "Time of each group commit, fsync included.",
        );
        header(
            &mut out,
            "intake_webhook_attempts_total",
            "counter",
            "Webhook delivery attempts by outcome.",
        );
        for (outcome, counter) in [
            ("delivered", &self.webhook_delivered),
            ("retry", &self.webhook_retry),
            ("given_up", &self.webhook_given_up),
        ] {
            let _ = writeln!(
                out,
                "intake_webhook_attempts_total{{outcome=\"{outcome}\"}} {}",
                counter.load(Ordering::Relaxed)
            );
        }
        gauge(
            &mut out,
            "intake_webhook_pending_deliveries",
            "Deliveries waiting for an attempt (due now or scheduled for a retry).",
            state.webhook_pending,
        );
        gauge(
            &mut out,
            "intake_webhook_retry_backlog",
            "Deliveries scheduled for a retry later than now.",
            state.webhook_retry_backlog,
        );
        gauge(
            &mut out,
            "intake_payload_dictionaries",
            "zstd dictionaries the store has trained to compress stored payloads.",
            state.payload_dictionaries,
        );
        gauge(
            &mut out,
            "intake_streams_open",
            "Change streams open on this node.",
            state.streams_open,
        );
        counter(
            &mut out,
            "intake_stream_slow_readers_total",
            "Change-stream readers disconnected for leaving their buffer full.",
            self.stream_slow_readers.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "intake_telemetry_spans_dropped_total",
            "Trace spans dropped because the exporter fell behind.",
            self.telemetry_spans_dropped.load(Ordering::Relaxed),
        );
        header(
            &mut out,
            "intake_mail_outbox",
            "gauge",
            "E-mails in the outbox by status.",
        );
        for (status, n) in [
            ("queued", state.mail_queued),
            ("sent", state.mail_sent),
            ("failed", state.mail_failed),
        ] {
            let _ = writeln!(out, "intake_mail_outbox{{status=\"{status}\"}} {n}");
        }
        out
    }

    fn render_requests(&self, out: &mut String) {
        let routes = self.routes.lock().unwrap_or_else(|e| e.into_inner());
        header(
            out,
            "intake_http_requests_total",
            "counter",
            "Answered HTTP requests by route template, method and status.",
        );
        for (route, stats) in routes.iter() {
            for ((method, status), n) in &stats.by_method_status {
                let _ = writeln!(
                    out,
                    "intake_http_requests_total{{route=\"{route}\",method=\"{method}\",status=\"{status}\"}} {n}"
                );
            }
        }
        header(
            out,
            "intake_http_request_duration_seconds",
            "histogram",
            "Time to answer an HTTP request, by route template.",
        );
        for (route, stats) in routes.iter() {
            stats.latency.render(
                out,
                "intake_http_request_duration_seconds",
                &format!("route=\"{route}\","),
                LATENCY_BUCKETS,
            );
        }
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn counter(out: &mut String, name: &str, help: &str, value: u64) {
    header(out, name, "counter", help);
    let _ = writeln!(out, "{name} {value}");
}

fn gauge(out: &mut String, name: &str, help: &str, value: u64) {
    header(out, name, "gauge", help);
    let _ = writeln!(out, "{name} {value}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_with_sum_and_count() {
        let h = Histogram::new(&[1.0, 2.0]);
        for v in [0.5, 1.0, 1.5, 3.0] {
            h.observe(v);
        }
        let mut out = String::new();
        h.render(&mut out, "x", "help");
        assert!(out.contains("x_bucket{le=\"1\"} 2\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"2\"} 3\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"+Inf\"} 4\n"), "{out}");
        assert!(out.contains("x_sum 6\n"), "{out}");
        assert!(out.contains("x_count 4\n"), "{out}");
    }

    #[test]
    fn requests_are_counted_by_route_method_and_status() {
        let m = Metrics::default();
        m.observe_request("/healthz", "GET", 200, Duration::from_millis(1));
        m.observe_request("/healthz", "GET", 200, Duration::from_millis(3));
        m.observe_request("/healthz", "POST", 405, Duration::from_millis(1));
        let state = State {
            ingest_queue_depth: 0,
            webhook_pending: 0,
            webhook_retry_backlog: 0,
            mail_queued: 1,
            mail_sent: 2,
            mail_failed: 3,
            search_index_lag: 0,
            request_body_kib: 0,
            payload_dictionaries: 2,
            streams_open: 4,
        };
        let out = m.render(&state);
        assert!(out.contains(
            "intake_http_requests_total{route=\"/healthz\",method=\"GET\",status=\"200\"} 2\n"
        ));
        assert!(out.contains(
            "intake_http_requests_total{route=\"/healthz\",method=\"POST\",status=\"405\"} 1\n"
        ));
        assert!(out.contains("intake_http_request_duration_seconds_count{route=\"/healthz\"} 3\n"));
        assert!(out.contains("intake_mail_outbox{status=\"failed\"} 3\n"));
        assert!(out.contains("intake_streams_open 4\n"));
        assert!(out.contains("# TYPE intake_stream_slow_readers_total counter\n"));
    }
}
