//! Time: one injectable clock for the whole server, and the one timestamp format.
//!
//! Everything that depends on "now" (created_at stamps, retention, idempotency expiry, retry
//! schedules in later modules) asks a [`Clock`], never the OS directly, so tests can move time
//! with a [`ManualClock`] instead of sleeping.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Microseconds since the Unix epoch, UTC. The unit of every stored time.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct Timestamp(pub i64);

pub const MICROS_PER_SECOND: i64 = 1_000_000;

impl Timestamp {
    pub fn as_micros(self) -> i64 {
        self.0
    }

    pub fn as_millis(self) -> i64 {
        self.0.div_euclid(1000)
    }

    /// Saturating addition of a duration.
    pub fn plus(self, d: std::time::Duration) -> Timestamp {
        let micros = i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
        Timestamp(self.0.saturating_add(micros))
    }

    /// Saturating subtraction of a duration.
    pub fn minus(self, d: std::time::Duration) -> Timestamp {
        let micros = i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
        Timestamp(self.0.saturating_sub(micros))
    }

    /// RFC 3339 in UTC with exactly six fractional digits: `2026-11-22T03:04:05.123456Z`.
    pub fn to_rfc3339(self) -> String {
        let secs = self.0.div_euclid(MICROS_PER_SECOND);
        let micros = self.0.rem_euclid(MICROS_PER_SECOND);
        let days = secs.div_euclid(86_400);
        let secs_of_day = secs.rem_euclid(86_400);
        let (year, month, day) = civil_from_days(days);
        format!(
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{micros:06}Z",
            secs_of_day / 3600,
            (secs_of_day % 3600) / 60,
            secs_of_day % 60
        )
    }
}

/// Converts days since 1970-01-01 into (year, month, day) of the proleptic Gregorian calendar.
/// Howard Hinnant's `civil_from_days`, valid for every i64 day count we can store.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The source of "now".
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> Timestamp;
}

pub type SharedClock = Arc<dyn Clock>;

/// The real wall clock.
#[derive(Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let micros = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        Timestamp(micros)
    }
}

/// A clock that only moves when told to; for tests.
#[derive(Debug)]
pub struct ManualClock {
    micros: AtomicI64,
}

impl ManualClock {
    pub fn new(start: Timestamp) -> Self {
        ManualClock {
            micros: AtomicI64::new(start.0),
        }
    }

    pub fn set(&self, t: Timestamp) {
        self.micros.store(t.0, Ordering::SeqCst);
    }

    pub fn advance(&self, d: std::time::Duration) {
        let micros = i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
        self.micros.fetch_add(micros, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.micros.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_rfc3339_with_micros() {
        assert_eq!(Timestamp(0).to_rfc3339(), "1970-01-01T00:00:00.000000Z");
        // 2024-02-29T12:34:56.789012Z, a leap day.
        assert_eq!(
            Timestamp(1_709_210_096_789_012).to_rfc3339(),
            "2024-02-29T12:34:56.789012Z"
        );
        assert_eq!(Timestamp(-1).to_rfc3339(), "1969-12-31T23:59:59.999999Z");
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::new(Timestamp(10));
        assert_eq!(clock.now(), Timestamp(10));
        clock.advance(std::time::Duration::from_secs(1));
        assert_eq!(clock.now(), Timestamp(1_000_010));
    }
}
