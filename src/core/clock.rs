//! Time: one injectable clock for the whole server, and the one timestamp format.
//!
//! Everything that depends on "now" (created_at stamps, retention, idempotency expiry, retry
//! schedules in later modules) asks a [`Clock`], never the OS directly, so tests can move time
//! with a [`ManualClock`] instead of sleeping.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Microseconds since the Unix epoch, UTC. The unit of every stored time.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
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

    /// The calendar month (UTC) this instant falls in, as `(year, month)`.
    pub fn year_month(self) -> (i64, u32) {
        let days = self.0.div_euclid(MICROS_PER_SECOND).div_euclid(86_400);
        let (year, month, _) = civil_from_days(days);
        (year, month)
    }

    /// Midnight UTC on the first day of the month after this instant's.
    pub fn start_of_next_month(self) -> Timestamp {
        let (year, month) = self.year_month();
        let (year, month) = if month == 12 {
            (year + 1, 1)
        } else {
            (year, month + 1)
        };
        let days = days_from_civil(year, i64::from(month), 1);
        Timestamp(days * 86_400 * MICROS_PER_SECOND)
    }

    /// The calendar date (UTC) this instant falls on, as `(year, month, day)`.
    pub fn date(self) -> (i64, u32, u32) {
        civil_from_days(self.0.div_euclid(MICROS_PER_SECOND).div_euclid(86_400))
    }

    /// Midnight UTC on the first day of this instant's month.
    pub fn start_of_month(self) -> Timestamp {
        let (year, month) = self.year_month();
        Timestamp(days_from_civil(year, i64::from(month), 1) * 86_400 * MICROS_PER_SECOND)
    }

    /// RFC 3339 in UTC with exactly six fractional digits: `2026-11-22T03:04:05.123456Z`.
    pub fn to_rfc3339(self) -> String {
        let mut out = String::with_capacity(27);
        self.push_rfc3339(&mut out);
        out
    }

    /// Appends [`Timestamp::to_rfc3339`]'s text to `out`. Response bodies write two of these
    /// per record, so this avoids the formatting machinery (a tenth of a poll page's cost).
    pub fn push_rfc3339(self, out: &mut String) {
        let secs = self.0.div_euclid(MICROS_PER_SECOND);
        let micros = self.0.rem_euclid(MICROS_PER_SECOND);
        let days = secs.div_euclid(86_400);
        let secs_of_day = secs.rem_euclid(86_400);
        let (year, month, day) = civil_from_days(days);
        if (0..=9999).contains(&year) {
            push_digits(out, year, 4);
        } else {
            // Writing to a String cannot fail.
            let _ = write!(out, "{year:04}");
        }
        out.push('-');
        push_digits(out, i64::from(month), 2);
        out.push('-');
        push_digits(out, i64::from(day), 2);
        out.push('T');
        push_digits(out, secs_of_day / 3600, 2);
        out.push(':');
        push_digits(out, (secs_of_day % 3600) / 60, 2);
        out.push(':');
        push_digits(out, secs_of_day % 60, 2);
        out.push('.');
        push_digits(out, micros, 6);
        out.push('Z');
    }
}

/// Appends the last `width` (at most 6) decimal digits of `value` (not negative), zero-padded.
fn push_digits(out: &mut String, value: i64, width: usize) {
    let mut digits = [b'0'; 6];
    let mut rest = value;
    for slot in digits[..width].iter_mut().rev() {
        *slot = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    out.extend(digits[..width].iter().map(|&d| char::from(d)));
}

/// Parses `YYYY-MM-DD` (UTC midnight) or RFC 3339 (`2026-11-22T03:04:05.123Z`, any offset,
/// `T`, `t` or a space between date and time, fractions truncated to microseconds).
pub fn parse_date_or_rfc3339(text: &str) -> Option<Timestamp> {
    let b = text.as_bytes();
    let digits = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = b.get(range)?;
        part.iter().all(u8::is_ascii_digit).then_some(())?;
        std::str::from_utf8(part).ok()?.parse().ok()
    };
    if b.len() < 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let (year, month, day) = (digits(0..4)?, digits(5..7)?, digits(8..10)?);
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    let midnight = days_from_civil(year, month, day) * 86_400;
    if b.len() == 10 {
        return Some(Timestamp(midnight * MICROS_PER_SECOND));
    }
    if !matches!(b[10], b'T' | b't' | b' ') || b.len() < 20 || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (hour, minute, second) = (digits(11..13)?, digits(14..16)?, digits(17..19)?);
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut i = 19;
    let mut micros = 0i64;
    if b[i] == b'.' {
        let start = i + 1;
        i = start;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let frac = &text[start..i];
        if frac.is_empty() {
            return None;
        }
        let six: String = frac.chars().chain(std::iter::repeat('0')).take(6).collect();
        micros = six.parse().ok()?;
    }
    let offset_secs = match b.get(i..)? {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let hm = [*h1, *h2, *m1, *m2];
            if !hm.iter().all(u8::is_ascii_digit) {
                return None;
            }
            let h = i64::from((h1 - b'0') * 10 + (h2 - b'0'));
            let m = i64::from((m1 - b'0') * 10 + (m2 - b'0'));
            if h > 23 || m > 59 {
                return None;
            }
            let secs = h * 3600 + m * 60;
            if *sign == b'+' { secs } else { -secs }
        }
        _ => return None,
    };
    let secs = midnight + hour * 3600 + minute * 60 + second - offset_secs;
    let micros = secs * MICROS_PER_SECOND + micros;
    RFC3339_RANGE.contains(&micros).then_some(Timestamp(micros))
}

/// The instants [`Timestamp::to_rfc3339`] writes with a four-digit year, from
/// 0000-01-01T00:00:00Z to 9999-12-31T23:59:59.999999Z. A parsed time must fall in it (an
/// offset or a leap second can carry a date just past either end), so that every time the
/// API accepts reads back the same after it is formatted.
const RFC3339_RANGE: std::ops::RangeInclusive<i64> =
    -62_167_219_200 * MICROS_PER_SECOND..=253_402_300_800 * MICROS_PER_SECOND - 1;

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
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
    fn hand_written_rfc3339_matches_the_formatting_machinery() {
        let reference = |t: Timestamp| {
            let secs = t.0.div_euclid(MICROS_PER_SECOND);
            let secs_of_day = secs.rem_euclid(86_400);
            let (year, month, day) = civil_from_days(secs.div_euclid(86_400));
            format!(
                "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
                secs_of_day / 3600,
                (secs_of_day % 3600) / 60,
                secs_of_day % 60,
                t.0.rem_euclid(MICROS_PER_SECOND)
            )
        };
        let mut samples = vec![
            0,
            -1,
            1,
            i64::MIN,
            i64::MAX,
            253_402_300_799_999_999, // 9999-12-31T23:59:59.999999Z
            253_402_300_800_000_000, // year 10000
            -62_167_219_200_000_000, // 0000-01-01
            -62_167_219_200_000_001, // year -1
        ];
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            samples.push((x % 400_000_000_000_000_000) as i64 - 100_000_000_000_000_000);
        }
        for micros in samples {
            let t = Timestamp(micros);
            assert_eq!(t.to_rfc3339(), reference(t), "{micros}");
        }
    }

    #[test]
    fn parses_dates_and_rfc3339() {
        let p = parse_date_or_rfc3339;
        assert_eq!(p("1970-01-01"), Some(Timestamp(0)));
        assert_eq!(p("2024-02-29"), Some(Timestamp(1_709_164_800_000_000)));
        assert_eq!(
            p("2024-02-29T12:34:56.789012Z"),
            Some(Timestamp(1_709_210_096_789_012))
        );
        assert_eq!(p("2020-01-01T02:00:00+02:00"), p("2020-01-01"));
        assert_eq!(p("2019-12-31T19:00:00-05:00"), p("2020-01-01"));
        assert_eq!(
            p("2020-01-01t00:00:00.5z"),
            Some(Timestamp(1_577_836_800_500_000))
        );
        assert_eq!(
            p("2020-01-01 00:00:00.1234567Z"),
            Some(Timestamp(1_577_836_800_123_456))
        );
        for bad in [
            "",
            "2020",
            "2020-13-01",
            "2023-02-29",
            "2020-01-32",
            "2020-01-01T",
            "2020-01-01T25:00:00Z",
            "2020-01-01T00:00:00",
            "2020-01-01T00:00:00+0200",
            "2020-01-01T00:00:00.Z",
            "20a0-01-01",
            "2020-01-01x",
            "2020-01-01T00:00:00+24:00",
        ] {
            assert_eq!(p(bad), None, "{bad}");
        }
        // Round trip with the formatter.
        let t = Timestamp(1_763_780_645_123_456);
        assert_eq!(p(&t.to_rfc3339()), Some(t));
    }

    #[test]
    fn parses_only_times_that_format_back_with_four_digit_years() {
        // Found by fuzzing (fuzz target `dates`): an offset or a leap second at either end of
        // the four-digit years gave an instant that `to_rfc3339` wrote as `10000-…` or
        // `-001-…`, text this parser refuses.
        let p = parse_date_or_rfc3339;
        for bad in [
            "0000-01-01 00:00:00.110000+23:59",
            "9999-12-31T23:59:59-00:01",
            "9999-12-31T23:59:60Z",
            "0000-01-01T00:00:00+00:01",
        ] {
            assert_eq!(p(bad), None, "{bad}");
        }
        for edge in [
            "0000-01-01",
            "0000-01-01T00:00:00Z",
            "9999-12-31T23:59:59.999999Z",
            "9999-12-31T23:59:59+23:59",
            "0000-01-01T23:59:00+23:59",
        ] {
            let t = p(edge).unwrap_or_else(|| panic!("{edge} refused"));
            assert_eq!(p(&t.to_rfc3339()), Some(t), "{edge}");
        }
        assert_eq!(
            p("0000-01-01").map(Timestamp::to_rfc3339).as_deref(),
            Some("0000-01-01T00:00:00.000000Z")
        );
    }

    #[test]
    fn months() {
        let t = parse_date_or_rfc3339("2026-12-31T23:59:59.999999Z").unwrap_or_default();
        assert_eq!(t.year_month(), (2026, 12));
        assert_eq!(
            t.start_of_next_month().to_rfc3339(),
            "2027-01-01T00:00:00.000000Z"
        );
        let t = parse_date_or_rfc3339("2028-02-10T00:00:00Z").unwrap_or_default();
        assert_eq!(
            t.start_of_next_month().to_rfc3339(),
            "2028-03-01T00:00:00.000000Z"
        );
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::new(Timestamp(10));
        assert_eq!(clock.now(), Timestamp(10));
        clock.advance(std::time::Duration::from_secs(1));
        assert_eq!(clock.now(), Timestamp(1_000_010));
    }
}
