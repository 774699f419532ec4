//! Identifiers and secrets: record ids, slugs, API keys, tokens, request ids.
//!
//! Formats (documented in docs/src/errors.md):
//! - record id: `rec_` + 26 characters of lower-case Crockford base32 encoding 128 bits: the
//!   record's created_at in microseconds (64 bits) then 64 random bits. Ids sort by creation
//!   time, cannot be guessed, and tell the store where the record is (see `storage`).
//! - slug: a lower-case prefix derived from the endpoint name (at most 24 characters of
//!   `[a-z0-9-]`), a dash and 12 random base32 characters (60 bits), e.g. `orders-7k2m9x4q1w8p`.
//! - API keys: `tm_test_` / `tm_live_` + 32 random base32 characters (160 bits).
//! - account tokens: `itk_` + 32 random base32 characters (160 bits).
//! - test event ids (a test event's `webhook-id`): `test_` + 26 base32 characters of 128
//!   random bits, kept as that number.

use std::fmt;

use rand::RngCore;

use crate::core::clock::Timestamp;

/// Lower-case Crockford base32: no i, l, o, u.
const ALPHABET: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";

/// Random bytes from the thread-local CSPRNG (ChaCha, seeded and periodically reseeded from
/// the operating system), which spares a system call per id on the request path.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut buf = [0u8; N];
    rand::rng().fill_bytes(&mut buf);
    buf
}

/// `n` random characters from [`ALPHABET`] (5 bits each).
pub fn random_base32(n: usize) -> String {
    let mut out = String::with_capacity(n);
    while out.len() < n {
        let bytes: [u8; 32] = random_bytes();
        for b in bytes {
            if out.len() == n {
                break;
            }
            out.push(ALPHABET[usize::from(b & 31)] as char);
        }
    }
    out
}

fn decode_char(c: u8) -> Option<u8> {
    ALPHABET.iter().position(|&a| a == c).map(|p| p as u8)
}

/// A record's identifier: created_at in microseconds (high 64 bits), 64 random bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecordId(pub u128);

const RECORD_PREFIX: &str = "rec_";
const ULID_CHARS: usize = 26;

impl RecordId {
    /// A new id for a record created at `created_at` (clamped to the epoch). Records are
    /// given theirs by [`RecordId::generate_run`], a POST's as a run of one.
    #[cfg(test)]
    pub fn generate(created_at: Timestamp) -> RecordId {
        let random = u64::from_be_bytes(random_bytes());
        let micros = created_at.as_micros().max(0) as u128;
        RecordId((micros << 64) | u128::from(random))
    }

    /// `n` new ids for records created together at `created_at` (a batch), ascending: id
    /// order, which list and poll follow, is the order the records were sent in.
    pub fn generate_run(created_at: Timestamp, n: usize) -> Vec<RecordId> {
        // Drawn below u64::MAX - n, so making equal draws distinct (the later one takes the
        // next value up; about one batch in 10^13 has two) cannot overflow.
        let top = u64::MAX - n as u64;
        let mut randoms: Vec<u64> = (0..n)
            .map(|_| u64::from_be_bytes(random_bytes()) % top)
            .collect();
        randoms.sort_unstable();
        for i in 1..randoms.len() {
            randoms[i] = randoms[i].max(randoms[i - 1] + 1);
        }
        let micros = created_at.as_micros().max(0) as u128;
        randoms
            .into_iter()
            .map(|random| RecordId((micros << 64) | u128::from(random)))
            .collect()
    }

    /// The created_at this id was generated for.
    pub fn created_at(self) -> Timestamp {
        Timestamp((self.0 >> 64) as i64)
    }

    /// Parses `rec_` + 26 base32 characters; anything else is `None`.
    pub fn parse(s: &str) -> Option<RecordId> {
        let body = s.strip_prefix(RECORD_PREFIX)?.as_bytes();
        if body.len() != ULID_CHARS {
            return None;
        }
        // 26 characters carry 130 bits; the top two must be zero for a 128-bit value.
        if decode_char(body[0])? > 7 {
            return None;
        }
        let mut value: u128 = 0;
        for &c in body {
            value = (value << 5) | u128::from(decode_char(c)?);
        }
        Some(RecordId(value))
    }
}

impl RecordId {
    /// The 26 base32 characters after the `rec_` prefix.
    fn base32(self) -> [u8; ULID_CHARS] {
        let mut buf = [0u8; ULID_CHARS];
        for (i, slot) in buf.iter_mut().enumerate() {
            let shift = 5 * (ULID_CHARS - 1 - i);
            *slot = ALPHABET[((self.0 >> shift) & 31) as usize];
        }
        buf
    }

    /// The id of the test event numbered as this id (`test_` and the same 26 characters):
    /// a test event is logged like a delivery, under the number of its id.
    pub fn as_test_event(self) -> String {
        let mut id = String::from("test_");
        id.extend(self.base32().map(char::from));
        id
    }

    /// A new random test event number (see [`RecordId::as_test_event`]).
    pub fn random_test_event() -> RecordId {
        RecordId(u128::from_be_bytes(random_bytes()))
    }

    /// Appends the id's text to `out` (response bodies, without the formatting machinery).
    pub fn push_to(self, out: &mut String) {
        out.push_str(RECORD_PREFIX);
        out.extend(self.base32().map(char::from));
    }
}

impl fmt::Display for RecordId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(RECORD_PREFIX)?;
        // The buffer only holds ASCII from ALPHABET.
        f.write_str(std::str::from_utf8(&self.base32()).map_err(|_| fmt::Error)?)
    }
}

/// A new slug for an endpoint called `name`.
pub fn new_slug(name: &str) -> String {
    let mut prefix = String::new();
    for c in name.chars().flat_map(char::to_lowercase) {
        if prefix.len() >= 24 {
            break;
        }
        if c.is_ascii_alphanumeric() {
            prefix.push(c);
        } else if !prefix.is_empty() && !prefix.ends_with('-') {
            prefix.push('-');
        }
    }
    let prefix = prefix.trim_end_matches('-');
    let prefix = if prefix.is_empty() {
        "endpoint"
    } else {
        prefix
    };
    format!("{prefix}-{}", random_base32(12))
}

/// A new API key with the given environment prefix (`tm_test_` or `tm_live_`).
pub fn new_api_key(prefix: &str) -> String {
    format!("{prefix}{}", random_base32(32))
}

pub const TOKEN_PREFIX: &str = "itk_";

/// A new personal account token.
pub fn new_token() -> String {
    format!("{TOKEN_PREFIX}{}", random_base32(32))
}

const REQUEST_PREFIX: &str = "req_";
/// Characters of a request id that carry its time: 55 bits of microseconds (until 3111).
const REQUEST_TIME_CHARS: usize = 11;

/// A short id for correlating one request's log line, error body and request-log entry:
/// `req_`, the request's time in microseconds (11 characters, so ids sort by time), then 10
/// random characters (50 bits). The time lets a request-log search by id seek straight to
/// the entry instead of scanning the log.
pub fn new_request_id(at: Timestamp) -> String {
    let micros = at.as_micros().max(0) as u64;
    let mut id = String::with_capacity(REQUEST_PREFIX.len() + REQUEST_TIME_CHARS + 10);
    id.push_str(REQUEST_PREFIX);
    for i in (0..REQUEST_TIME_CHARS).rev() {
        id.push(ALPHABET[((micros >> (5 * i)) & 31) as usize] as char);
    }
    id.push_str(&random_base32(10));
    id
}

/// The time a request id was made at; `None` for anything else (including the wholly random
/// ids earlier builds made, which carry no time).
pub fn request_id_time(id: &str) -> Option<Timestamp> {
    let body = id.strip_prefix(REQUEST_PREFIX)?.as_bytes();
    if body.len() != REQUEST_TIME_CHARS + 10 {
        return None;
    }
    let mut micros: u64 = 0;
    for &c in &body[..REQUEST_TIME_CHARS] {
        micros = (micros << 5) | u64::from(decode_char(c)?);
    }
    // Every character must be of the alphabet, the random ones too.
    body[REQUEST_TIME_CHARS..]
        .iter()
        .try_for_each(|&c| decode_char(c).map(drop))?;
    Some(Timestamp(i64::try_from(micros).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_carry_their_time() {
        let at = Timestamp(1_795_000_000_123_456);
        let id = new_request_id(at);
        assert_eq!(id.len(), 25, "{id}");
        assert_eq!(request_id_time(&id), Some(at));
        assert!(new_request_id(Timestamp(1)) < new_request_id(Timestamp(2)));
        assert_ne!(new_request_id(at), id, "the random part differs");
        for other in [
            "req_0f3k9x2m4n8p1q7r",
            "req_",
            "rec_0000000000000000000000",
            &id[1..],
        ] {
            assert_eq!(request_id_time(other), None, "{other}");
        }
        assert_eq!(request_id_time(&format!("{}U", &id[..24])), None);
    }

    #[test]
    fn a_run_of_ids_ascends_and_carries_one_created_at() {
        let at = Timestamp(1_795_000_000_123_456);
        let run = RecordId::generate_run(at, 1000);
        assert_eq!(run.len(), 1000);
        assert!(run.windows(2).all(|w| w[0] < w[1]), "ascending, distinct");
        assert!(run.iter().all(|id| id.created_at() == at));
        assert!(RecordId::generate_run(at, 0).is_empty());
    }

    #[test]
    fn pushed_record_ids_read_like_displayed_ones() {
        for value in [0, 1, u128::MAX >> 1, u128::MAX, 0x0123_4567_89ab_cdef << 64] {
            let id = RecordId(value);
            let mut pushed = String::from("x");
            id.push_to(&mut pushed);
            assert_eq!(pushed, format!("x{id}"));
            assert_eq!(RecordId::parse(&pushed[1..]), Some(id));
        }
    }

    #[test]
    fn record_ids_round_trip_and_sort_by_time() {
        let a = RecordId::generate(Timestamp(1_700_000_000_000_000));
        let b = RecordId::generate(Timestamp(1_700_000_000_000_001));
        assert!(a < b);
        assert_eq!(a.created_at(), Timestamp(1_700_000_000_000_000));
        let text = a.to_string();
        assert_eq!(text.len(), 30);
        assert_eq!(RecordId::parse(&text), Some(a));
        assert_eq!(
            RecordId(u128::MAX).to_string(),
            "rec_7zzzzzzzzzzzzzzzzzzzzzzzzz"
        );
        assert_eq!(
            RecordId::parse("rec_7zzzzzzzzzzzzzzzzzzzzzzzzz"),
            Some(RecordId(u128::MAX))
        );
    }

    #[test]
    fn malformed_record_ids_are_refused() {
        for bad in [
            "",
            "rec_",
            "abc",
            "rec_abc",
            "rec_8zzzzzzzzzzzzzzzzzzzzzzzzz",
            "rec_0000000000000000000000000u",
            "REC_00000000000000000000000000",
            "rec_000000000000000000000000000",
        ] {
            assert_eq!(RecordId::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn slugs_are_url_safe_and_random() {
        let s = new_slug("Orders API / EU!");
        assert!(s.starts_with("orders-api-eu-"), "{s}");
        assert!(
            s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        );
        assert_ne!(new_slug("x"), new_slug("x"));
        assert!(new_slug("§§§").starts_with("endpoint-"));
    }
}
