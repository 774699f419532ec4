//! Traces out of the process: the spans the server records, exported over OTLP/HTTP with the
//! JSON encoding to a collector (`[telemetry] otlp_endpoint`), by a thread of their own.
//!
//! Recording never waits: a span goes into a bounded queue, and when the queue is full (the
//! collector is down or slow) it is dropped and counted, so tracing can never hold up a
//! request. The exporter sends what is queued every second, or as soon as a batch is full,
//! and what is left when the server stops.
//!
//! What goes into a span is chosen where it is recorded; the rule is that no payload, key,
//! token, auth value, signature or URL path (which may carry a credential) is ever an
//! attribute: methods, route templates, statuses, record and request ids, receiver hosts.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::prelude::BASE64_STANDARD;
use serde_json::{Value, json};

use crate::core::config::TelemetryConfig;
use crate::core::crypto::hex;
use crate::core::metrics::Metrics;
use crate::core::trace::TraceContext;

/// Spans waiting for the exporter; beyond this they are dropped.
const QUEUE: usize = 8192;
/// Most spans in one export request.
const BATCH: usize = 512;
/// How often what is queued is sent.
const INTERVAL: Duration = Duration::from_secs(1);
/// How long one export request may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// What a span stands for (OTLP's `SpanKind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpanKind {
    Internal = 1,
    Server = 2,
    Client = 3,
}

/// One attribute's value.
#[derive(Clone, Debug, PartialEq)]
pub enum AttributeValue {
    Text(String),
    Int(i64),
}

impl From<&str> for AttributeValue {
    fn from(text: &str) -> Self {
        AttributeValue::Text(text.to_string())
    }
}

impl From<String> for AttributeValue {
    fn from(text: String) -> Self {
        AttributeValue::Text(text)
    }
}

impl From<i64> for AttributeValue {
    fn from(n: i64) -> Self {
        AttributeValue::Int(n)
    }
}

/// A finished span.
#[derive(Clone, Debug)]
pub struct Span {
    /// Its trace and its own id.
    pub context: TraceContext,
    /// The span it is part of; `None` for the root of a trace.
    pub parent: Option<[u8; 8]>,
    pub name: String,
    pub kind: SpanKind,
    pub start: SystemTime,
    pub end: SystemTime,
    pub attributes: Vec<(&'static str, AttributeValue)>,
    /// `Some(why)` when what it stands for failed.
    pub error: Option<String>,
}

impl Span {
    /// A span of `context` (a child of `parent`) from `start` to now.
    pub fn ended_now(
        context: TraceContext,
        parent: Option<[u8; 8]>,
        name: impl Into<String>,
        kind: SpanKind,
        start: SystemTime,
    ) -> Span {
        Span {
            context,
            parent,
            name: name.into(),
            kind,
            start,
            end: SystemTime::now(),
            attributes: Vec::new(),
            error: None,
        }
    }

    pub fn attribute(mut self, key: &'static str, value: impl Into<AttributeValue>) -> Span {
        self.attributes.push((key, value.into()));
        self
    }
}

enum Message {
    Span(Box<Span>),
    Stop,
}

/// Where spans are recorded: the exporter, or nowhere when telemetry is off. Cheap to clone.
#[derive(Clone, Default)]
pub struct Telemetry {
    exporter: Option<Arc<Exporter>>,
}

struct Exporter {
    queue: SyncSender<Message>,
    /// Counts the dropped spans (`intake_telemetry_spans_dropped_total`).
    metrics: Arc<Metrics>,
}

/// The exporter thread; joined at shutdown after [`Telemetry::shutdown`].
pub struct ExporterThread(std::thread::JoinHandle<()>);

impl ExporterThread {
    pub fn join(self) {
        if self.0.join().is_err() {
            log::error!("the telemetry exporter thread panicked");
        }
    }
}

impl Telemetry {
    /// Starts the exporter when `config` names a collector; otherwise spans go nowhere.
    pub fn start(
        config: &TelemetryConfig,
        metrics: Arc<Metrics>,
    ) -> std::io::Result<(Telemetry, Option<ExporterThread>)> {
        let Some(endpoint) = &config.otlp_endpoint else {
            return Ok((Telemetry::default(), None));
        };
        let collector = endpoint.collector().map_err(std::io::Error::other)?;
        let (queue, spans) = mpsc::sync_channel(QUEUE);
        let exporter = Arc::new(Exporter { queue, metrics });
        let target = Target {
            url: traces_url(&collector.url),
            authorization: collector.credentials.map(|(user, password)| {
                let pair = format!("{user}:{}", password.expose());
                format!("Basic {}", BASE64_STANDARD.encode(pair))
            }),
            resource: resource(&config.service_name),
            agent: ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(EXPORT_TIMEOUT))
                // The collector is the configured one: no proxy from the environment.
                .proxy(None)
                .build()
                .into(),
        };
        let thread = std::thread::Builder::new()
            .name("telemetry".into())
            .spawn({
                let exporter = exporter.clone();
                move || export_loop(&target, &spans, &exporter)
            })?;
        Ok((
            Telemetry {
                exporter: Some(exporter),
            },
            Some(ExporterThread(thread)),
        ))
    }

    /// Whether spans are recorded at all.
    pub fn enabled(&self) -> bool {
        self.exporter.is_some()
    }

    /// Queues `span` for export; drops it when the queue is full.
    pub fn record(&self, span: Span) {
        let Some(exporter) = &self.exporter else {
            return;
        };
        if !span.context.sampled {
            return;
        }
        match exporter.queue.try_send(Message::Span(Box::new(span))) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                exporter
                    .metrics
                    .telemetry_spans_dropped
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Sends what is queued and stops the exporter (join its thread afterwards).
    pub fn shutdown(&self) {
        if let Some(exporter) = &self.exporter {
            let _ = exporter.queue.send(Message::Stop);
        }
    }
}

/// Where the exporter sends, and what every request says about the process.
struct Target {
    /// The traces URL, without the endpoint's userinfo.
    url: String,
    /// `Basic …` from the endpoint's `user:password@`: the only header of ours besides
    /// `Content-Type`.
    authorization: Option<String>,
    resource: Value,
    agent: ureq::Agent,
}

/// The traces URL of an OTLP/HTTP endpoint: the base with `/v1/traces`, unless it names a
/// path of its own already; a query stays at the end.
fn traces_url(endpoint: &str) -> String {
    let (base, query) = match endpoint.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (endpoint, None),
    };
    let trimmed = base.trim_end_matches('/');
    let has_path = trimmed
        .split_once("://")
        .is_some_and(|(_, rest)| rest.contains('/'));
    let url = match has_path {
        true => trimmed.to_string(),
        false => format!("{trimmed}/v1/traces"),
    };
    match query {
        Some(query) => format!("{url}?{query}"),
        None => url,
    }
}

fn resource(service_name: &str) -> Value {
    json!({
        "attributes": [
            { "key": "service.name", "value": { "stringValue": service_name } },
            { "key": "service.version", "value": { "stringValue": env!("CARGO_PKG_VERSION") } },
        ]
    })
}

fn export_loop(target: &Target, spans: &Receiver<Message>, exporter: &Exporter) {
    let mut batch = Vec::new();
    let mut due = Instant::now() + INTERVAL;
    let mut reported_drops = 0;
    loop {
        let wait = due.saturating_duration_since(Instant::now());
        let stop = match spans.recv_timeout(wait) {
            Ok(Message::Span(span)) => {
                batch.push(*span);
                false
            }
            Ok(Message::Stop) | Err(RecvTimeoutError::Disconnected) => true,
            Err(RecvTimeoutError::Timeout) => false,
        };
        if stop {
            // What was queued before the stop is sent first.
            while let Ok(Message::Span(span)) = spans.try_recv() {
                batch.push(*span);
            }
        }
        if batch.len() >= BATCH || Instant::now() >= due || stop {
            for chunk in batch.chunks(BATCH) {
                export(target, chunk);
            }
            batch.clear();
            due = Instant::now() + INTERVAL;
            let dropped = exporter
                .metrics
                .telemetry_spans_dropped
                .load(Ordering::Relaxed);
            if dropped > reported_drops {
                log::warn!(
                    "telemetry: {} spans dropped (the exporter fell behind)",
                    dropped - reported_drops
                );
                reported_drops = dropped;
            }
        }
        if stop {
            return;
        }
    }
}

fn export(target: &Target, spans: &[Span]) {
    if spans.is_empty() {
        return;
    }
    let body = json!({
        "resourceSpans": [{
            "resource": target.resource,
            "scopeSpans": [{
                "scope": { "name": "intake", "version": env!("CARGO_PKG_VERSION") },
                "spans": spans.iter().map(span_json).collect::<Vec<_>>(),
            }],
        }],
    });
    let mut request = target
        .agent
        .post(&target.url)
        .header("Content-Type", "application/json");
    if let Some(authorization) = &target.authorization {
        request = request.header("Authorization", authorization);
    }
    let sent = request.send(body.to_string().as_bytes());
    match sent {
        Ok(response) if response.status().is_success() => {}
        Ok(response) => log::warn!(
            "telemetry: the collector answered {} to {} spans; they are dropped",
            response.status().as_u16(),
            spans.len()
        ),
        Err(err) => log::warn!(
            "telemetry: cannot reach the collector ({err}); {} spans dropped",
            spans.len()
        ),
    }
}

fn nanos(time: SystemTime) -> String {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
        .to_string()
}

/// One span in OTLP/JSON: ids in hex, times and integers as strings.
fn span_json(span: &Span) -> Value {
    let attributes: Vec<Value> = span
        .attributes
        .iter()
        .map(|(key, value)| {
            let value = match value {
                AttributeValue::Text(text) => json!({ "stringValue": text }),
                AttributeValue::Int(n) => json!({ "intValue": n.to_string() }),
            };
            json!({ "key": key, "value": value })
        })
        .collect();
    let mut out = json!({
        "traceId": hex(&span.context.trace_id),
        "spanId": hex(&span.context.span_id),
        "name": span.name,
        "kind": span.kind as u8,
        "startTimeUnixNano": nanos(span.start),
        "endTimeUnixNano": nanos(span.end),
        "attributes": attributes,
        "status": match &span.error {
            Some(why) => json!({ "code": 2, "message": why }),
            None => json!({ "code": 0 }),
        },
    });
    if let Some(parent) = span.parent {
        out["parentSpanId"] = json!(hex(&parent));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_traces_url_follows_the_otlp_rule() {
        assert_eq!(
            traces_url("http://127.0.0.1:4318"),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://collector:4318/"),
            "http://collector:4318/v1/traces"
        );
        assert_eq!(
            traces_url("https://otlp.example/custom/v1/traces"),
            "https://otlp.example/custom/v1/traces"
        );
        assert_eq!(
            traces_url("https://otlp.example?tenant=a"),
            "https://otlp.example/v1/traces?tenant=a"
        );
        assert_eq!(
            traces_url("https://otlp.example/?tenant=a"),
            "https://otlp.example/v1/traces?tenant=a"
        );
    }

    #[test]
    fn a_span_is_written_as_otlp_json() {
        let parent = TraceContext::root();
        let context = parent.child();
        let start = UNIX_EPOCH + Duration::from_nanos(1_500);
        let mut span = Span::ended_now(context, Some(parent.span_id), "x", SpanKind::Client, start)
            .attribute("http.response.status_code", 503_i64)
            .attribute("server.address", "hooks.example");
        span.end = UNIX_EPOCH + Duration::from_nanos(2_500);
        span.error = Some("HTTP 503".into());
        let value = span_json(&span);
        assert_eq!(value["traceId"], hex(&parent.trace_id));
        assert_eq!(value["parentSpanId"], hex(&parent.span_id));
        assert_eq!(value["kind"], 3);
        assert_eq!(value["startTimeUnixNano"], "1500");
        assert_eq!(value["endTimeUnixNano"], "2500");
        assert_eq!(value["attributes"][0]["value"]["intValue"], "503");
        assert_eq!(
            value["attributes"][1]["value"]["stringValue"],
            "hooks.example"
        );
        assert_eq!(value["status"]["code"], 2);
    }
}
