//! Per-subscription rate limits: when each rate-limited subscription may start its next
//! delivery.
//!
//! A generic cell rate algorithm (GCRA): a subscription limited to `rate` deliveries a second
//! starts them `1/rate` apart on average, and at most a tenth of a second's worth (at least
//! one) may start together, so a scheduler that looks now and then still keeps up the rate
//! while any second sees at most `rate` starts plus that burst. Nothing waits here: a delivery
//! that may not start yet stays due, and the scheduler looks again when [`Pacing::start`]
//! says. Times are the injected clock's.

use std::collections::HashMap;

use crate::core::clock::{MICROS_PER_SECOND, Timestamp};
use crate::store::Partition;

/// A tenth of a second's deliveries may start together.
const BURST_DIVISOR: u32 = 10;
/// Beyond this many subscriptions remembered, those whose pacing has lapsed are dropped.
const TIDY_AT: usize = 1024;

/// A subscription: its partition and number.
pub type SubscriptionKey = (Partition, u32);

/// The pace of `rate` deliveries a second: the interval between starts and how far ahead of
/// it a start may be, in microseconds.
pub fn pace(rate: u32) -> (i64, i64) {
    let interval = MICROS_PER_SECOND / i64::from(rate.max(1));
    (
        interval,
        interval * i64::from((rate / BURST_DIVISOR).max(1) - 1),
    )
}

/// The pace of each subscription on one node. On a store shared by several nodes the
/// dispatcher books starts in the store instead (`ClusterStore::pace`, the same step).
#[derive(Default)]
pub struct Pacing {
    /// Each paced subscription's theoretical time of its next start (GCRA's TAT). One at or
    /// before now is the same as none.
    next: HashMap<SubscriptionKey, Timestamp>,
}

impl Pacing {
    /// Books a start of `subscription`, limited to `rate` deliveries a second, at `now`; or,
    /// when it may not start now, says when it may.
    pub fn start(
        &mut self,
        subscription: SubscriptionKey,
        rate: u32,
        now: Timestamp,
    ) -> Result<(), Timestamp> {
        let (interval, tolerance) = pace(rate);
        let next = self
            .next
            .get(&subscription)
            .map_or(now, |at| (*at).max(now));
        if next.as_micros() - now.as_micros() > tolerance {
            return Err(Timestamp(next.as_micros() - tolerance));
        }
        if self.next.len() >= TIDY_AT {
            self.next.retain(|_, at| *at > now);
        }
        self.next
            .insert(subscription, Timestamp(next.as_micros() + interval));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_795_000_000_000_000;

    fn at(ms: i64) -> Timestamp {
        Timestamp(T0 + ms * 1000)
    }

    /// The starts `pacing` allows for one subscription when asked every millisecond for
    /// `ms` milliseconds (each allowed start taken at once), as milliseconds from the start.
    fn starts(rate: u32, ms: i64) -> Vec<i64> {
        let mut pacing = Pacing::default();
        let mut out = Vec::new();
        for t in 0..ms {
            while pacing
                .start((Partition::from_raw(1), 1), rate, at(t))
                .is_ok()
            {
                out.push(t);
            }
        }
        out
    }

    #[test]
    fn a_slow_limit_spaces_every_start() {
        assert_eq!(starts(2, 2000), [0, 500, 1000, 1500]);
        assert_eq!(starts(10, 1000).len(), 10);
        let mut pacing = Pacing::default();
        assert_eq!(pacing.start((Partition::from_raw(1), 1), 4, at(0)), Ok(()));
        assert_eq!(
            pacing.start((Partition::from_raw(1), 1), 4, at(10)),
            Err(at(250))
        );
        // Another subscription has its own pace.
        assert_eq!(pacing.start((Partition::from_raw(1), 2), 4, at(10)), Ok(()));
        assert_eq!(pacing.start((Partition::from_raw(2), 1), 4, at(10)), Ok(()));
    }

    #[test]
    fn a_fast_limit_starts_a_tenth_of_a_second_at_once_and_keeps_its_rate() {
        let got = starts(1000, 1000);
        assert_eq!(got.iter().filter(|t| **t == 0).count(), 100);
        // Over a second, the rate plus one burst at most.
        assert!(got.len() <= 1100 && got.len() >= 1000, "{}", got.len());
        for window in 0..900 {
            let n = got
                .iter()
                .filter(|t| (window..window + 100).contains(*t))
                .count();
            assert!(n <= 200, "{n} starts from {window} ms");
        }
    }

    #[test]
    fn idle_time_is_not_saved_up() {
        let mut pacing = Pacing::default();
        assert!(pacing.start((Partition::from_raw(1), 1), 1, at(0)).is_ok());
        // A minute idle: still one start, then the pace again.
        assert!(
            pacing
                .start((Partition::from_raw(1), 1), 1, at(60_000))
                .is_ok()
        );
        assert_eq!(
            pacing.start((Partition::from_raw(1), 1), 1, at(60_001)),
            Err(at(61_000))
        );
    }
}
