//! What an attempt leaves behind, and its commit: the attempt's row in the delivery log, the
//! delivery's next state (delivered, given up, or due again at the retry time), its
//! subscription's health, and the owner's failure e-mail.
//!
//! A worker turns what it saw into an [`Outcome`] ([`Outcome::of`], with the verdict of
//! `policy`); the result writer commits a group of them in one transaction ([`record`]). When
//! an owner webhook in production is given up, the endpoint owner is e-mailed in that same
//! transaction, at most once per endpoint per UTC day (the store notes each day's e-mail);
//! its commit wakes the mail worker.

use super::health::{self, Breaker, SubscriptionAttempt};
use super::policy::{self, Exchange, Verdict};
use super::subscriptions;
use crate::core::clock::Timestamp;
use crate::core::ids::RecordId;
use crate::domain::error::Result;
use crate::domain::handles::Handles;
use crate::domain::mail::{self, OutgoingMail};
use crate::store::webhooks::{AfterAttempt, AttemptOutcome};
use crate::store::{AttemptRow, DeliveryRow, WriteTx};

/// One attempt of a delivery as its worker saw it.
pub struct Attempt {
    /// The attempt's number (1 for the first).
    pub number: u32,
    pub started_at: Timestamp,
    pub duration_us: u64,
    /// The headers sent, as the log keeps them (`signing::redacted`).
    pub request_headers: Vec<(String, String)>,
    pub exchange: Exchange,
    /// When the answer (or failure) came, by the server's clock: a retry is due from here.
    pub answered_at: Timestamp,
}

/// An attempt's outcome on its way to the store.
pub struct Outcome {
    pub stored: AttemptOutcome,
    pub verdict: Verdict,
    /// The subscription its delivery was made for, if an owner's.
    pub subscription: Option<SubscriptionAttempt>,
}

impl Outcome {
    /// What `attempt` of `row`, sent to `receiver` (scheme, host and port), leaves behind,
    /// `verdict` being what the policy made of it.
    pub fn of(row: &DeliveryRow, receiver: &str, attempt: Attempt, verdict: Verdict) -> Outcome {
        let (status, error, response_body) = match attempt.exchange {
            Exchange::Answered { status, body, .. } => (Some(status), None, Some(body)),
            Exchange::Failed(error) | Exchange::Refused(error) => (None, Some(error), None),
        };
        let at = attempt.answered_at;
        let next = match verdict {
            Verdict::Delivered => AfterAttempt::Delivered { at },
            Verdict::GivenUp => AfterAttempt::GivenUp { at },
            Verdict::Retry(wait) => AfterAttempt::Retry {
                at: at.plus(wait),
                answered_at: at,
                receiver: receiver.to_string(),
            },
        };
        let subscription = row.owner_subscription().map(|id| SubscriptionAttempt {
            partition: row.partition,
            subscription: id,
            at: attempt.started_at,
            delivered: verdict == Verdict::Delivered,
        });
        Outcome {
            stored: AttemptOutcome {
                delivery_id: row.id,
                attempt: AttemptRow {
                    attempt: attempt.number,
                    started_at: attempt.started_at,
                    duration_us: attempt.duration_us,
                    url: row.url.clone(),
                    request_headers: attempt.request_headers,
                    status,
                    error,
                    response_body,
                    outcome: verdict.outcome().to_string(),
                },
                next,
                retry_requests: row.retry_requests,
            },
            verdict,
            subscription,
        }
    }
}

/// Writes a group of outcomes in one transaction, with the failure e-mails of the owner
/// webhooks in production it gave up, and the health of their subscriptions (which may
/// disable one: `health`). `public_url` is the base of the e-mails' links.
pub fn record(
    handles: &Handles,
    public_url: &str,
    breaker: &Breaker,
    outcomes: &[AttemptOutcome],
    subscriptions: &[SubscriptionAttempt],
) -> Result<()> {
    handles.write(|tx| {
        let given_up = tx.record_outcomes(outcomes)?;
        for row in given_up.iter().filter(|row| policy::mails_owner(row)) {
            if let Some(last) = outcomes.iter().find(|o| o.delivery_id == row.id) {
                failure_mail(tx, public_url, row, &last.attempt)?;
            }
        }
        for (partition, id) in health::record(tx, breaker, public_url, subscriptions)? {
            log::warn!(
                "webhooks: subscription {} of partition {partition} disabled: its deliveries \
                 have failed for {:?}",
                subscriptions::subscription_id(id),
                breaker.after
            );
        }
        Ok(())
    })
}

/// Queues the owner's e-mail about given-up `row` unless the endpoint had one today (UTC).
fn failure_mail(
    tx: &mut dyn WriteTx,
    public_url: &str,
    row: &DeliveryRow,
    last: &AttemptRow,
) -> Result<()> {
    let Some(now) = row.finished_at else {
        return Ok(());
    };
    let endpoint_id = row.partition.endpoint();
    let day = policy::mail_day(now);
    if tx.failure_mailed(endpoint_id, day)? {
        return Ok(());
    }
    let Some(endpoint) = tx.endpoint(endpoint_id)?.filter(|e| e.deleted_at.is_none()) else {
        return Ok(());
    };
    let Some(owner) = tx.account(endpoint.owner_id)? else {
        return Ok(());
    };
    tx.insert_failure_mail(endpoint_id, day)?;
    let last_result = match (&last.status, &last.error) {
        (Some(status), _) => format!("HTTP {status}"),
        (None, Some(error)) => error.clone(),
        (None, None) => "no answer".into(),
    };
    let page_url = format!(
        "{public_url}/dashboard/endpoints/{}/deliveries/{}",
        endpoint.slug, row.id
    );
    let api_url = format!(
        "{public_url}/api/v1/manage/endpoints/{}/deliveries/{}",
        endpoint.slug, row.id
    );
    let body = format!(
        "A webhook of your endpoint \"{name}\" ({slug}) in production was given up after \
         {attempts} attempt(s).\n\n\
         Endpoint:     {name} ({slug}), production\n\
         Subscription: {subscription}\n\
         Record id:    {record}\n\
         Receiver URL: {url}\n\
         Last result:  {last_result}\n\n\
         Every attempt, with the receiver's answers, is in the delivery log, where \
         \"Redeliver\" sends it again once the receiver works again:\n  {page_url}\n\n\
         With the management API: GET \
         {public_url}/api/v1/manage/endpoints/{slug}/deliveries?environment=production lists \
         them all, and POST {api_url}/redeliver sends this one again.\n\n\
         You get at most one such e-mail per endpoint per day, and no notice when deliveries \
         succeed again.\n",
        name = endpoint.name,
        slug = endpoint.slug,
        attempts = row.attempts,
        record = RecordId(row.record_id),
        url = row.url,
        subscription = row
            .owner_subscription()
            .map_or_else(String::new, subscriptions::subscription_id),
    );
    mail::enqueue(
        tx,
        now,
        OutgoingMail {
            kind: "webhook_failed",
            to: owner.email,
            subject: format!("Webhook delivery failed: {} (production)", endpoint.name),
            body,
        },
    )?;
    Ok(())
}
