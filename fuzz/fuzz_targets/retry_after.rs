//! The `Retry-After` header of a receiver's 429 and the retry schedule it feeds.
//!
//! Input: 8 bytes of "now" (microseconds, any value), then the header value. Properties:
//! parsing never panics; a wait is never over the 4-hour cap; plain seconds are taken as
//! they are; and the retry the dispatcher schedules is never sooner than the schedule's own
//! gap for that attempt, nor longer than the cap.
#![no_main]

use std::time::Duration;

use intake::core::clock::Timestamp;
use intake::domain::webhooks::policy::{
    Exchange, RETRY_AFTER_CAP, RETRY_DELAYS, Verdict, attempt_verdict, max_attempts,
};
use intake::store::Environment;
use intake::workers::dispatcher::send::retry_after;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((now, value)) = data.split_first_chunk::<8>() else {
        return;
    };
    let Ok(value) = std::str::from_utf8(value) else {
        return;
    };
    let now = Timestamp(i64::from_le_bytes(*now));
    let wait = retry_after(value, now);
    if let Some(wait) = wait {
        assert!(wait <= RETRY_AFTER_CAP, "{value:?} gave {wait:?}");
    }
    let trimmed = value.trim();
    if !trimmed.is_empty() && trimmed.bytes().all(|b| b.is_ascii_digit()) {
        let expected = trimmed
            .parse::<u64>()
            .ok()
            .map(Duration::from_secs)
            .filter(|w| *w <= RETRY_AFTER_CAP);
        assert_eq!(wait, expected, "{value:?}");
    }

    let exchange = Exchange::Answered {
        status: 429,
        retry_after: wait,
        body: String::new(),
    };
    for environment in [Environment::Production, Environment::Sandbox] {
        // A first budget: attempt n waits at least the schedule's n-th gap.
        let max_attempts = max_attempts(environment);
        for attempts in 0..max_attempts {
            if let Verdict::Retry(delay) =
                attempt_verdict(environment, attempts, max_attempts, &exchange)
            {
                let gap = RETRY_DELAYS[(attempts as usize).min(RETRY_DELAYS.len() - 1)];
                assert!(
                    delay >= gap,
                    "retry after {delay:?}, the schedule says {gap:?}"
                );
                assert!(delay <= RETRY_AFTER_CAP.max(gap), "retry after {delay:?}");
            }
        }
    }
});
