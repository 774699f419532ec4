//! The retry policy: what an attempt's answer means for its delivery, when the next attempt is
//! due, how many attempts a delivery gets, and whose failures the owner hears of. Pure
//! functions of a delivery row and an answer; the dispatcher applies them.
//!
//! - **Verdict** ([`verdict`]): any 2xx is delivered. 5xx except 501 and 505, 429, 3xx
//!   (redirects are not followed), timeouts, connection, DNS and TLS errors are retried
//!   after [`RETRY_DELAYS`] (the spec's 30 s, 2 min, 10 min, 1 h, 4 h) until the delivery's
//!   `max_attempts`. Any other 4xx, 501 and 505 give up at once, and so does a target the
//!   SSRF guard refuses: a rule's answer does not change on a retry.
//! - **Budget** ([`max_attempts`]): production 6 attempts, sandbox 4; a manual redelivery
//!   adds a fresh budget and restarts the schedule.
//! - **Retry-After**: a 429's `Retry-After` only lengthens the wait, and values over
//!   [`RETRY_AFTER_CAP`] are ignored (the sender reads the header).
//! - **Failure e-mail** ([`mails_owner`], [`mail_day`]): when an owner webhook in production
//!   is given up, the endpoint owner is e-mailed, at most once per endpoint per UTC day, with
//!   no follow-up or recovery notice; never for caller webhooks or in sandbox.

use std::time::Duration;

use crate::core::clock::{MICROS_PER_SECOND, Timestamp};
use crate::store::{DeliveryRow, Environment, WebhookKind};

/// Waits after the 1st, 2nd… failed attempt of a budget (the spec's retry schedule).
pub const RETRY_DELAYS: [Duration; 5] = [
    Duration::from_secs(30),
    Duration::from_secs(120),
    Duration::from_secs(600),
    Duration::from_secs(3600),
    Duration::from_secs(4 * 3600),
];

/// Longest `Retry-After` honoured; a longer one is ignored (the spec's cap).
pub const RETRY_AFTER_CAP: Duration = Duration::from_secs(4 * 3600);

/// Attempts a delivery gets in all: the spec's production 6, sandbox 4.
pub fn max_attempts(environment: Environment) -> u32 {
    match environment {
        Environment::Production => 6,
        Environment::Sandbox => 4,
    }
}

/// What one attempt got.
#[derive(Debug)]
pub enum Exchange {
    /// The receiver answered.
    Answered {
        status: u16,
        /// A `Retry-After` of at most [`RETRY_AFTER_CAP`] (only read on a 429).
        retry_after: Option<Duration>,
        body: String,
    },
    /// No answer: timeout, connection, DNS or TLS error.
    Failed(String),
    /// Not sent: every address of the target is refused by the egress guard.
    Refused(String),
}

/// What an attempt means for its delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Delivered,
    Retry(Duration),
    GivenUp,
}

impl Verdict {
    /// The attempt's `outcome` as the delivery log shows it.
    pub fn outcome(self) -> &'static str {
        match self {
            Verdict::Delivered => "delivered",
            Verdict::Retry(_) => "retry",
            Verdict::GivenUp => "given_up",
        }
    }
}

/// What the `exchange` of the next attempt of `row` leads to.
pub fn verdict(row: &DeliveryRow, exchange: &Exchange) -> Verdict {
    attempt_verdict(
        row.partition.environment(),
        row.attempts,
        row.max_attempts,
        exchange,
    )
}

/// [`verdict`] from the only facts of the row it reads: the delivery's environment (whose
/// budget a redelivery adds), the attempts it has made, and the attempts `allowed` in all
/// (its `max_attempts`).
pub fn attempt_verdict(
    environment: Environment,
    attempts: u32,
    allowed: u32,
    exchange: &Exchange,
) -> Verdict {
    let retry_after = match exchange {
        Exchange::Answered {
            status,
            retry_after,
            ..
        } => match status {
            200..=299 => return Verdict::Delivered,
            501 | 505 => return Verdict::GivenUp,
            429 => *retry_after,
            400..=499 => return Verdict::GivenUp,
            _ => None,
        },
        Exchange::Failed(_) => None,
        Exchange::Refused(_) => return Verdict::GivenUp,
    };
    let attempts = attempts.saturating_add(1);
    if attempts >= allowed {
        return Verdict::GivenUp;
    }
    // A manual redelivery adds a budget: its schedule starts from the beginning.
    let budget = max_attempts(environment);
    let before_budget = allowed.saturating_sub(budget);
    let index = attempts.saturating_sub(before_budget).saturating_sub(1) as usize;
    let delay = RETRY_DELAYS[index.min(RETRY_DELAYS.len() - 1)];
    Verdict::Retry(retry_after.map_or(delay, |wait| wait.max(delay)))
}

/// Whether the owner hears of `row` being given up: an owner webhook in production.
pub fn mails_owner(row: &DeliveryRow) -> bool {
    row.kind == WebhookKind::Owner && row.partition.environment() == Environment::Production
}

/// The UTC day of `at` (days since the epoch): an endpoint's owner gets at most one failure
/// e-mail a day.
pub fn mail_day(at: Timestamp) -> u64 {
    u64::try_from(at.as_micros().div_euclid(MICROS_PER_SECOND * 86_400)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{DeliveryState, Partition};

    fn row(environment: Environment, attempts: u32, max_attempts: u32) -> DeliveryRow {
        DeliveryRow {
            id: 1,
            partition: Partition::new(7, environment),
            record_id: 1,
            kind: WebhookKind::Owner,
            event: None,
            subscription: None,
            url: "https://example.com/hook".into(),
            auth_header: None,
            auth_value_sealed: None,
            body: "{}".into(),
            sender: None,
            trace: None,
            state: DeliveryState::Pending,
            attempts,
            max_attempts,
            next_attempt_at: None,
            created_at: Timestamp(0),
            finished_at: None,
            retry_requests: 0,
            erased: false,
            test: false,
        }
    }

    fn answer(status: u16, retry_after: Option<u64>) -> Exchange {
        Exchange::Answered {
            status,
            retry_after: retry_after.map(Duration::from_secs),
            body: String::new(),
        }
    }

    #[test]
    fn statuses_map_to_the_spec_outcomes() {
        let first = row(Environment::Production, 0, 6);
        let retry = Verdict::Retry(RETRY_DELAYS[0]);
        for status in [200, 202, 204, 299] {
            assert_eq!(verdict(&first, &answer(status, None)), Verdict::Delivered);
        }
        for status in [500, 502, 503, 504, 599, 429, 301, 302, 307, 308] {
            assert_eq!(verdict(&first, &answer(status, None)), retry, "{status}");
        }
        for status in [400, 401, 403, 404, 409, 410, 422, 501, 505] {
            assert_eq!(
                verdict(&first, &answer(status, None)),
                Verdict::GivenUp,
                "{status}"
            );
        }
        let failed = Exchange::Failed("connection refused".into());
        assert_eq!(verdict(&first, &failed), retry);
        let refused = Exchange::Refused("target address 10.0.0.1 is not allowed".into());
        assert_eq!(verdict(&first, &refused), Verdict::GivenUp);
    }

    #[test]
    fn the_schedule_follows_the_budget_of_each_environment() {
        let failed = Exchange::Failed("timeout".into());
        for (environment, budget) in [(Environment::Production, 6), (Environment::Sandbox, 4)] {
            for attempts in 0..budget - 1 {
                let r = row(environment, attempts, budget);
                assert_eq!(
                    verdict(&r, &failed),
                    Verdict::Retry(RETRY_DELAYS[attempts as usize]),
                    "{environment:?} after attempt {}",
                    attempts + 1
                );
            }
            let last = row(environment, budget - 1, budget);
            assert_eq!(verdict(&last, &failed), Verdict::GivenUp);
        }
        // A redelivery's fresh budget restarts the schedule.
        let again = row(Environment::Sandbox, 4, 8);
        assert_eq!(verdict(&again, &failed), Verdict::Retry(RETRY_DELAYS[0]));
        let again = row(Environment::Sandbox, 7, 8);
        assert_eq!(verdict(&again, &failed), Verdict::GivenUp);
    }

    #[test]
    fn retry_after_only_lengthens_the_wait() {
        let first = row(Environment::Production, 0, 6);
        let wait = |secs| verdict(&first, &answer(429, Some(secs)));
        assert_eq!(wait(5), Verdict::Retry(Duration::from_secs(30)));
        assert_eq!(wait(90), Verdict::Retry(Duration::from_secs(90)));
        // Only a 429's Retry-After counts (send reads it only there).
        let later = row(Environment::Production, 3, 6);
        assert_eq!(
            verdict(&later, &answer(429, Some(60))),
            Verdict::Retry(RETRY_DELAYS[3])
        );
    }

    #[test]
    fn only_owner_webhooks_in_production_mail_the_owner_once_a_utc_day() {
        assert!(mails_owner(&row(Environment::Production, 5, 6)));
        assert!(!mails_owner(&row(Environment::Sandbox, 3, 4)));
        let caller = DeliveryRow {
            kind: WebhookKind::Caller,
            ..row(Environment::Production, 5, 6)
        };
        assert!(!mails_owner(&caller));
        let day = 86_400 * MICROS_PER_SECOND;
        assert_eq!(mail_day(Timestamp(0)), 0);
        assert_eq!(mail_day(Timestamp(day - 1)), 0);
        assert_eq!(mail_day(Timestamp(day)), 1);
    }
}
