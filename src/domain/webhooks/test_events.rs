//! A test event in the delivery log: "Send test event" sends one `webhook.test` event at once,
//! outside the queue (`workers::dispatcher::probe`), and then logs it here like a delivery of
//! its subscription, marked as a test (`DeliveryRow::test`), with its one attempt.
//!
//! It is finished as it is logged, delivered on a 2xx and given up otherwise, and is never sent
//! again: no retry, no redelivery or recovery ([`super::log::can_redeliver`]), no failure
//! e-mail, no part in the subscription's health or in the webhook success rate. Its row's
//! `record_id` is the number of its `test_…` id (`RecordId::as_test_event`), which names no
//! record.

use super::policy::Verdict;
use crate::core::clock::Timestamp;
use crate::core::ids::RecordId;
use crate::domain::error::Result;
use crate::domain::handles::Handles;
use crate::store::{AttemptRow, DeliveryRow, DeliveryState, EventType, Partition, WebhookKind};

/// A test event as it was sent, and what came of it.
pub struct SentTest {
    pub partition: Partition,
    pub subscription: u32,
    /// Its id's number (`test_…`).
    pub number: RecordId,
    pub url: String,
    pub body: String,
    pub sent_at: Timestamp,
    pub answered_at: Timestamp,
    pub duration_us: u64,
    /// The headers sent, as the log keeps them (`signing::redacted`).
    pub request_headers: Vec<(String, String)>,
    pub status: Option<u16>,
    pub error: Option<String>,
    pub response_body: Option<String>,
}

/// Logs `sent` in the delivery log of its partition, in one commit; returns its delivery id.
pub fn record(handles: &Handles, sent: SentTest) -> Result<u64> {
    let verdict = match sent.status {
        Some(status) if (200..300).contains(&status) => Verdict::Delivered,
        _ => Verdict::GivenUp,
    };
    let state = match verdict {
        Verdict::Delivered => DeliveryState::Delivered,
        Verdict::Retry(_) | Verdict::GivenUp => DeliveryState::GivenUp,
    };
    let attempt = AttemptRow {
        attempt: 1,
        started_at: sent.sent_at,
        duration_us: sent.duration_us,
        url: sent.url.clone(),
        request_headers: sent.request_headers,
        status: sent.status,
        error: sent.error,
        response_body: sent.response_body,
        outcome: verdict.outcome().to_string(),
    };
    let template = DeliveryRow {
        id: 0,
        partition: sent.partition,
        record_id: sent.number.0,
        kind: WebhookKind::Owner,
        event: Some(EventType::WebhookTest),
        subscription: Some(sent.subscription),
        url: sent.url,
        auth_header: None,
        auth_value_sealed: None,
        body: sent.body,
        sender: None,
        trace: None,
        state,
        attempts: 1,
        max_attempts: 1,
        next_attempt_at: None,
        created_at: sent.sent_at,
        finished_at: Some(sent.answered_at),
        retry_requests: 0,
        erased: false,
        test: true,
    };
    handles.write(|tx| {
        let row = DeliveryRow {
            id: tx.next_delivery_id()?,
            ..template.clone()
        };
        tx.put_delivery(&row)?;
        tx.put_attempt(row.id, &attempt)?;
        Ok(row.id)
    })
}
