//! Each subscription's health, and the circuit breaker that disables a subscription whose
//! deliveries keep failing.
//!
//! The dispatcher's result writer hands every attempt of a subscription's delivery to
//! [`record`], in the transaction that records the attempt: a success clears the failure
//! streak; a failure (any attempt that is not delivered) starts or lengthens it. A
//! subscription whose attempts have all failed for [`Breaker::after`] (5 days by default, like
//! its peers), with at least [`Breaker::min_attempts`] of them, is disabled in that same
//! transaction, and the endpoint's owner gets one e-mail and one dashboard notification.
//! While it is disabled its writes' deliveries are logged as skipped (nothing is lost), and
//! switching it on again (`PATCH {"enabled": true}`) starts the count afresh. Deliveries made
//! before it was disabled keep their retry schedule.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::core::clock::Timestamp;
use crate::domain::error::Result;
use crate::domain::mail::{self, OutgoingMail};
use crate::domain::notifications;
use crate::domain::webhooks::subscriptions::subscription_id;
use crate::store::{Partition, SubscriptionRow, WriteTx};

/// When the circuit breaker disables a subscription (`[webhooks] disable_after` and
/// `disable_after_attempts`).
#[derive(Debug, Clone, Copy)]
pub struct Breaker {
    /// How long every attempt must have failed; zero turns the breaker off.
    pub after: Duration,
    /// How many failed attempts at least.
    pub min_attempts: u32,
}

/// One attempt of a delivery made for a subscription.
#[derive(Debug, Clone, Copy)]
pub struct SubscriptionAttempt {
    pub partition: Partition,
    pub subscription: u32,
    /// When it was made.
    pub at: Timestamp,
    pub delivered: bool,
}

impl Breaker {
    /// Whether `row`, enabled, is to be disabled at `now`.
    fn trips(&self, row: &SubscriptionRow, now: Timestamp) -> bool {
        !self.after.is_zero()
            && row.enabled
            && row.health.failed_attempts >= self.min_attempts
            && row
                .health
                .failing_since
                .is_some_and(|since| since <= now.minus(self.after))
    }
}

/// Notes `attempts` in their subscriptions' health and disables the ones `breaker` trips,
/// telling their owners; all in `tx`. Returns the subscriptions it disabled.
pub fn record(
    tx: &mut dyn WriteTx,
    breaker: &Breaker,
    public_url: &str,
    attempts: &[SubscriptionAttempt],
) -> Result<Vec<(Partition, u32)>> {
    let mut by_partition: BTreeMap<Partition, Vec<&SubscriptionAttempt>> = BTreeMap::new();
    for attempt in attempts {
        by_partition
            .entry(attempt.partition)
            .or_default()
            .push(attempt);
    }
    let mut disabled = Vec::new();
    for (partition, attempts) in by_partition {
        let Some(mut settings) = tx.webhook_settings(partition)? else {
            continue;
        };
        let mut tripped = Vec::new();
        let mut noted = BTreeMap::new();
        for attempt in attempts {
            let Some(row) = settings.subscription_mut(attempt.subscription) else {
                continue;
            };
            let health = &mut row.health;
            if attempt.delivered {
                health.last_success_at = Some(
                    health
                        .last_success_at
                        .map_or(attempt.at, |t| t.max(attempt.at)),
                );
                health.failing_since = None;
                health.failed_attempts = 0;
            } else {
                health.last_failure_at = Some(
                    health
                        .last_failure_at
                        .map_or(attempt.at, |t| t.max(attempt.at)),
                );
                health.failing_since.get_or_insert(attempt.at);
                health.failed_attempts = health.failed_attempts.saturating_add(1);
            }
            noted.insert(row.id, row.health.clone());
            if breaker.trips(row, attempt.at) {
                row.enabled = false;
                row.auto_disabled_at = Some(attempt.at);
                row.updated_at = attempt.at;
                tripped.push(row.clone());
            }
        }
        // The settings themselves change only when the breaker trips (rarely); the health
        // alone is written otherwise (see `put_subscription_health` for why it matters).
        if tripped.is_empty() {
            let noted: Vec<_> = noted.into_iter().collect();
            tx.put_subscription_health(partition, &noted)?;
        } else {
            tx.put_webhook_settings(partition, &settings)?;
        }
        for row in tripped {
            tell_owner(tx, public_url, partition, &row)?;
            disabled.push((partition, row.id));
        }
    }
    Ok(disabled)
}

/// The owner's e-mail and notification about `row`, disabled by the breaker.
fn tell_owner(
    tx: &mut dyn WriteTx,
    public_url: &str,
    partition: Partition,
    row: &SubscriptionRow,
) -> Result<()> {
    let Some(now) = row.auto_disabled_at else {
        return Ok(());
    };
    let Some(endpoint) = tx.endpoint(partition.endpoint())? else {
        return Ok(());
    };
    let Some(owner) = tx.account(endpoint.owner_id)? else {
        return Ok(());
    };
    let environment = partition.environment().as_str();
    let id = subscription_id(row.id);
    let since = row
        .health
        .failing_since
        .map_or_else(String::new, Timestamp::to_rfc3339);
    let subscription_url = format!(
        "{public_url}/api/v1/manage/endpoints/{}/webhooks/{environment}/subscriptions/{id}",
        endpoint.slug
    );
    let body = format!(
        "Webhook subscription {id} of your endpoint \"{name}\" ({slug}) in {environment} was \
         disabled: every attempt to deliver to it has failed since {since} ({attempts} \
         attempts).\n\n\
         Receiver URL: {url}\n\n\
         While it is disabled, the deliveries of new writes are kept in the delivery log as \
         skipped and nothing is sent. Once the receiver works again, switch the subscription \
         on and send what it missed, on the endpoint's webhook settings:\n{settings_url}\n\n\
         Or with the management API: PATCH {subscription_url} with {{\"enabled\": true}}, \
         then POST {subscription_url}/recover.\n",
        name = endpoint.name,
        slug = endpoint.slug,
        settings_url = format_args!(
            "{public_url}{}",
            notifications::page("webhook_disabled", &endpoint.slug)
        ),
        attempts = row.health.failed_attempts,
        url = row.url,
    );
    mail::enqueue(
        tx,
        now,
        OutgoingMail {
            kind: "webhook_disabled",
            to: owner.email,
            subject: format!(
                "Webhook subscription disabled: {} ({environment})",
                endpoint.name
            ),
            body,
        },
    )?;
    let message = format!(
        "Webhook subscription {id} ({environment}) was disabled after failing since {since}."
    );
    notifications::notify(
        tx,
        now,
        owner.id,
        "webhook_disabled",
        &endpoint.slug,
        message,
    )
}
