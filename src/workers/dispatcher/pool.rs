//! The workers: each takes a claimed delivery, signs it (`secrets::signed_headers`, which
//! only reads), sends it (`send`), judges the answer by the retry policy
//! (`policy::verdict`), records the attempt's span, and hands the outcome to the result
//! writer; one attempt at a time.

use std::sync::mpsc::{self, Receiver};
use std::sync::{Mutex, PoisonError};
use std::time::{Instant, SystemTime};

use super::{Context, Job};
use crate::core::ids::RecordId;
use crate::core::telemetry::{Span, SpanKind};
use crate::core::trace::TraceContext;
use crate::domain::webhooks::outcomes::{Attempt, Outcome};
use crate::domain::webhooks::policy::{Exchange, Verdict, verdict};
use crate::domain::webhooks::secrets;
use crate::domain::webhooks::signing::{Message, redacted};
use crate::store::{DeliveryRow, WebhookKind};

/// A worker's loop: one attempt at a time, until the scheduler is gone.
pub(super) fn work(ctx: &Context, jobs: &Mutex<Receiver<Job>>, results: &mpsc::Sender<Outcome>) {
    loop {
        let job = jobs.lock().unwrap_or_else(PoisonError::into_inner).recv();
        let Ok(job) = job else {
            return;
        };
        if ctx.shared.stopping() {
            // Not started: it stays due for the next start.
            ctx.shared.free_slot(&job);
            ctx.shared.release([job.row.id]);
            continue;
        }
        let attempted = attempt(ctx, &job);
        ctx.shared.free_slot(&job);
        if results.send(attempted).is_err() {
            return;
        }
        ctx.shared.wake();
    }
}

/// Signs and sends the next attempt of `job`'s delivery.
fn attempt(ctx: &Context, job: &Job) -> Outcome {
    let row = &job.row;
    let number = row.attempts.saturating_add(1);
    let started_at = ctx.parts.handles.now();
    let started = Instant::now();
    // The attempt is a span of the write's trace while telemetry is on (a trace of its own
    // for a delivery made without one); otherwise the write's trace is passed on as it came.
    let parent = row.trace.as_deref().and_then(TraceContext::parse);
    let span = ctx
        .parts
        .telemetry
        .enabled()
        .then(|| parent.map_or_else(TraceContext::root, |p| p.child()));
    let traceparent = span.or(parent).map(|c| c.header());
    let span_start = SystemTime::now();
    let message = Message {
        id: &RecordId(row.record_id).to_string(),
        body: row.body.as_bytes(),
        auth_header: row.auth_header.as_deref(),
        auth_value_sealed: row.auth_value_sealed.as_deref(),
    };
    let headers = secrets::signed_headers(
        &ctx.parts.handles,
        &ctx.parts.sealer,
        row.partition,
        &message,
        number,
        started_at,
        traceparent.as_deref(),
    );
    let (exchange, request_headers) = match headers {
        Ok(headers) => {
            let exchange = ctx
                .sender
                .send(&row.url, &headers, row.body.as_bytes(), started_at);
            (exchange, redacted(headers, row.auth_header.as_deref()))
        }
        Err(err) => (
            Exchange::Failed(format!("cannot prepare the request: {err}")),
            Vec::new(),
        ),
    };
    let verdict = verdict(row, &exchange);
    if let Some(context) = span {
        ctx.parts.telemetry.record(attempt_span(
            context,
            parent.map(|p| p.span_id),
            span_start,
            row,
            number,
            &exchange,
            verdict,
        ));
    }
    let attempt = Attempt {
        number,
        started_at,
        duration_us: u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
        request_headers,
        exchange,
        answered_at: ctx.parts.handles.now(),
    };
    Outcome::of(row, &job.target, attempt, verdict)
}

/// The span of one attempt: the webhook id, attempt number and kind, the receiver's host and
/// its status (never the URL's path, the body or a header value).
fn attempt_span(
    context: TraceContext,
    parent: Option<[u8; 8]>,
    start: SystemTime,
    row: &DeliveryRow,
    number: u32,
    exchange: &Exchange,
    verdict: Verdict,
) -> Span {
    let host = row
        .url
        .parse::<http::Uri>()
        .ok()
        .and_then(|uri| uri.host().map(str::to_string))
        .unwrap_or_default();
    let kind = match row.kind {
        WebhookKind::Owner => "owner",
        WebhookKind::Caller => "caller",
    };
    let mut span = Span::ended_now(context, parent, "webhook.attempt", SpanKind::Client, start)
        .attribute("webhook.id", RecordId(row.record_id).to_string())
        .attribute("webhook.attempt", i64::from(number))
        .attribute("intake.webhook.kind", kind)
        .attribute("server.address", host)
        .attribute("intake.webhook.outcome", verdict.outcome());
    match exchange {
        Exchange::Answered { status, .. } => {
            span = span.attribute("http.response.status_code", i64::from(*status));
            if verdict != Verdict::Delivered {
                span.error = Some(format!("HTTP {status}"));
            }
        }
        Exchange::Failed(error) | Exchange::Refused(error) => span.error = Some(error.clone()),
    }
    span
}
