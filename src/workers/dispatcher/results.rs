//! The result writer: commits the workers' outcomes in groups (`outcomes::record`), then
//! releases their claims, logs and counts each attempt.
//!
//! It takes every outcome waiting at that moment and writes, in one transaction, each
//! attempt's `AttemptRow`, the delivery's new state, attempts and next attempt time, its
//! place in the due list (removed, or moved to the retry time), its subscription's health and
//! the owner's failure e-mail, whose commit wakes the mail worker. An outcome it cannot
//! commit leaves its delivery due as it was: it is attempted again.

use std::sync::mpsc::Receiver;

use super::Context;
use crate::core::metrics::Metrics;
use crate::domain::webhooks::health::SubscriptionAttempt;
use crate::domain::webhooks::outcomes::{self, Outcome};
use crate::domain::webhooks::policy::Verdict;
use crate::store::webhooks::AttemptOutcome;

/// Most outcomes committed in one transaction.
const MAX_BATCH: usize = 512;

/// The result writer's loop: commits outcomes in groups until every worker has stopped.
pub(super) fn write(ctx: &Context, results: &Receiver<Outcome>) {
    while let Ok(first) = results.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match results.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        let subscriptions: Vec<SubscriptionAttempt> =
            batch.iter().filter_map(|o| o.subscription).collect();
        let (outcomes, verdicts): (Vec<AttemptOutcome>, Vec<Verdict>) =
            batch.into_iter().map(|o| (o.stored, o.verdict)).unzip();
        let recorded = outcomes::record(
            &ctx.parts.handles,
            &ctx.parts.public_url,
            &ctx.breaker,
            &outcomes,
            &subscriptions,
        );
        match recorded {
            Ok(()) => {
                for (outcome, verdict) in outcomes.iter().zip(verdicts) {
                    log_attempt(outcome, verdict);
                    count_attempt(&ctx.parts.metrics, verdict);
                }
            }
            // The deliveries stay due as they were: they are attempted again.
            Err(err) => log::error!(
                "webhooks: cannot record {} attempt outcome(s); they will be attempted again: \
                 {err}",
                outcomes.len()
            ),
        }
        ctx.shared
            .release(outcomes.iter().map(|outcome| outcome.delivery_id));
    }
}

fn count_attempt(metrics: &Metrics, verdict: Verdict) {
    let counter = match verdict {
        Verdict::Delivered => &metrics.webhook_delivered,
        Verdict::Retry(_) => &metrics.webhook_retry,
        Verdict::GivenUp => &metrics.webhook_given_up,
    };
    counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

fn log_attempt(outcome: &AttemptOutcome, verdict: Verdict) {
    let answer = match (&outcome.attempt.status, &outcome.attempt.error) {
        (Some(status), _) => format!("HTTP {status}"),
        (None, Some(error)) => error.clone(),
        (None, None) => String::new(),
    };
    let (id, n) = (outcome.delivery_id, outcome.attempt.attempt);
    match verdict {
        Verdict::Delivered => log::debug!("webhook delivery {id} delivered (attempt {n})"),
        Verdict::Retry(wait) => {
            log::info!("webhook delivery {id} attempt {n}: {answer}; retry in {wait:?}")
        }
        Verdict::GivenUp => {
            log::warn!("webhook delivery {id} given up after attempt {n}: {answer}")
        }
    }
}
