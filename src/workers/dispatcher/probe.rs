//! "Send test event": one signed `webhook.test` request to a subscription's URL, sent at
//! once and outside the queue, its answer returned to whoever asked (the dashboard shows it
//! beside the subscription; the management API returns it).
//!
//! It is signed and sent exactly like a delivery (the same headers, the same secret, the same
//! egress guard and timeout), so a receiver that verifies a test event verifies real ones.
//! Once answered it is logged in the delivery log, marked as a test (`domain::webhooks::
//! test_events`); it is no record's delivery, is never retried, and leaves the subscription's
//! health and circuit breaker alone. Its `webhook-id` starts with `test_`.

use std::time::Instant;

use serde::Serialize;

use super::send::Sender;
use crate::core::config::WebhooksConfig;
use crate::core::crypto::Sealer;
use crate::core::ids::RecordId;
use crate::domain::error::{Error, Result};
use crate::domain::handles::Handles;
use crate::domain::webhooks::policy::Exchange;
use crate::domain::webhooks::secrets::signed_headers;
use crate::domain::webhooks::signing::{Message, redacted};
use crate::domain::webhooks::test_events::{self, SentTest};
use crate::store::{Environment, EventType, Partition, SubscriptionRow};

/// Where a test event goes.
pub struct TestTarget<'a> {
    pub partition: Partition,
    pub endpoint_slug: &'a str,
    pub environment: Environment,
    pub subscription: &'a SubscriptionRow,
}

/// What the receiver made of a test event.
#[derive(Debug, Serialize)]
pub struct TestResult {
    /// The `webhook-id` it carried.
    pub webhook_id: String,
    /// Its entry in the delivery log.
    pub delivery_id: u64,
    /// Whether the receiver answered 2xx.
    pub delivered: bool,
    /// The receiver's status; `null` when it did not answer.
    pub status: Option<u16>,
    /// The start of the receiver's response body.
    pub response_body: Option<String>,
    /// Why there was no answer: timeout, connection, TLS, or the egress rule.
    pub error: Option<String>,
    pub duration_ms: f64,
    /// The body sent.
    pub request_body: String,
}

/// Signs and sends a test event to `target` now, waiting for the answer (at most
/// `[webhooks] timeout`). Blocking: run it off the async workers.
pub fn send(
    handles: &Handles,
    sealer: &Sealer,
    config: &WebhooksConfig,
    target: &TestTarget<'_>,
) -> Result<TestResult> {
    let now = handles.now();
    let number = RecordId::random_test_event();
    let webhook_id = number.as_test_event();
    let body = serde_json::json!({
        "type": EventType::WebhookTest.as_str(),
        "timestamp": now.to_rfc3339(),
        "data": {
            "id": webhook_id,
            "endpoint": target.endpoint_slug,
            "environment": target.environment,
            "created_at": now.to_rfc3339(),
            "payload": {
                "message": "A test event from intake: your receiver is reachable and can verify the signature.",
            },
        },
    })
    .to_string();
    let sub = target.subscription;
    let message = Message {
        id: &webhook_id,
        body: body.as_bytes(),
        auth_header: sub.auth_header.as_deref(),
        auth_value_sealed: sub.auth_value_sealed.as_deref(),
    };
    let headers = signed_headers(handles, sealer, target.partition, &message, 1, now, None)?;
    let sender = Sender::new(config).map_err(Error::Internal)?;
    let started = Instant::now();
    let exchange = sender.send(&sub.url, &headers, body.as_bytes(), now);
    let elapsed = started.elapsed();
    let (status, response_body, error) = match exchange {
        Exchange::Answered { status, body, .. } => (Some(status), Some(body), None),
        Exchange::Failed(error) | Exchange::Refused(error) => (None, None, Some(error)),
    };
    let delivery_id = test_events::record(
        handles,
        SentTest {
            partition: target.partition,
            subscription: sub.id,
            number,
            url: sub.url.clone(),
            body: body.clone(),
            sent_at: now,
            answered_at: handles.now(),
            duration_us: u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX),
            request_headers: redacted(headers, sub.auth_header.as_deref()),
            status,
            error: error.clone(),
            response_body: response_body.clone(),
        },
    )?;
    Ok(TestResult {
        webhook_id,
        delivery_id,
        delivered: status.is_some_and(|s| (200..300).contains(&s)),
        status,
        response_body,
        error,
        duration_ms: elapsed.as_secs_f64() * 1000.0,
        request_body: body,
    })
}

/// [`send`] on a blocking thread, for async callers.
pub async fn send_off_runtime(
    handles: Handles,
    sealer: Sealer,
    config: WebhooksConfig,
    endpoint_slug: String,
    environment: Environment,
    (partition, subscription): (Partition, SubscriptionRow),
) -> Result<TestResult> {
    tokio::task::spawn_blocking(move || {
        let target = TestTarget {
            partition,
            endpoint_slug: &endpoint_slug,
            environment,
            subscription: &subscription,
        };
        send(&handles, &sealer, &config, &target)
    })
    .await
    .map_err(|e| Error::Internal(format!("the test event's thread failed: {e}")))?
}
