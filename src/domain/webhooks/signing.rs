//! Standard Webhooks signatures, as the spec's "Signature" section defines them.
//!
//! A secret is `whsec_` followed by standard base64 (with padding) of its key bytes. A
//! signature is `v1,` followed by base64 of HMAC-SHA256, under the key, of
//! `{webhook-id}.{webhook-timestamp}.{raw body}`. The `webhook-signature` header holds one
//! such entry per key, separated by single spaces: two during a secret changeover, so a
//! receiver that still has the previous secret keeps verifying.
//!
//! [`request_headers`] are every header of a webhook request, a delivery's or a test event's
//! alike, so that a receiver that verifies one verifies the other; [`redacted`] is how the
//! delivery log keeps them.
//!
//! Everything here is pure: which keys to sign with is decided by `webhooks::secrets`
//! (`secrets::signed_headers`), which reads them from a snapshot and never writes.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::core::clock::{MICROS_PER_SECOND, Timestamp};
use crate::core::ids::random_bytes;

/// Every secret begins with this.
pub const SECRET_PREFIX: &str = "whsec_";
/// The `User-Agent` of every webhook request; receivers may allowlist the `svc-Webhook/` prefix.
pub const USER_AGENT: &str = concat!("svc-Webhook/", env!("CARGO_PKG_VERSION"));
/// What the attempt log shows instead of the signature and the auth value.
pub const REDACTED: &str = "[redacted]";
/// Random bytes in a secret this server generates.
pub const SECRET_KEY_BYTES: usize = 32;
/// The scheme of each signature entry; receivers ignore entries of other schemes.
pub const SCHEME_PREFIX: &str = "v1,";

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum SigningError {
    #[error("a webhook signing secret must begin with {SECRET_PREFIX}")]
    MissingPrefix,
    #[error("a webhook signing secret must be standard base64 after {SECRET_PREFIX}")]
    NotBase64,
    #[error("a webhook signing secret must not be empty")]
    Empty,
}

/// A new secret: `whsec_` + base64 of 32 random bytes (44 characters after the prefix).
pub fn generate_secret() -> String {
    let key: [u8; SECRET_KEY_BYTES] = random_bytes();
    format!("{SECRET_PREFIX}{}", STANDARD.encode(key))
}

/// The key bytes of a secret: the prefix removed, the rest base64-decoded.
pub fn secret_key(secret: &str) -> Result<Vec<u8>, SigningError> {
    let encoded = secret
        .strip_prefix(SECRET_PREFIX)
        .ok_or(SigningError::MissingPrefix)?;
    let key = STANDARD
        .decode(encoded)
        .map_err(|_| SigningError::NotBase64)?;
    if key.is_empty() {
        return Err(SigningError::Empty);
    }
    Ok(key)
}

/// One signature entry, `v1,<base64>`, over `{msg_id}.{timestamp}.{body}`.
pub fn sign(key: &[u8], msg_id: &str, timestamp: i64, body: &[u8]) -> String {
    // HMAC takes a key of any length, so this cannot fail.
    let mut mac = match Hmac::<Sha256>::new_from_slice(key) {
        Ok(mac) => mac,
        Err(_) => unreachable!("HMAC accepts keys of any length"),
    };
    mac.update(msg_id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    let signature = mac.finalize().into_bytes();
    format!("{SCHEME_PREFIX}{}", STANDARD.encode(signature))
}

/// The `webhook-signature` header value: one entry per key, in the order given (the
/// current key first, as `secrets::signing_keys` returns them), separated by one space.
pub fn signature_header(keys: &[Vec<u8>], msg_id: &str, timestamp: i64, body: &[u8]) -> String {
    keys.iter()
        .map(|key| sign(key, msg_id, timestamp, body))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether `header` (a `webhook-signature` value) holds a `v1` entry made with `key` over
/// this message: what a receiver checks. Entries are compared as text in constant time, so
/// only the exact encoding `sign` produces is accepted.
pub fn verify(key: &[u8], msg_id: &str, timestamp: i64, body: &[u8], header: &str) -> bool {
    use subtle::ConstantTimeEq;
    let expected = sign(key, msg_id, timestamp, body);
    header
        .split(' ')
        .any(|entry| bool::from(entry.as_bytes().ct_eq(expected.as_bytes())))
}

/// What a webhook request says, whatever sends it (a delivery, or a test event).
pub struct Message<'a> {
    /// The `webhook-id` (and `X-svc-Record-Id`).
    pub id: &'a str,
    pub body: &'a [u8],
    pub auth_header: Option<&'a str>,
    pub auth_value_sealed: Option<&'a [u8]>,
}

/// Every header of attempt `number` of `message` at `now`: signed with `keys` (current
/// first), `traceparent` when given (unless the receiver's auth header has its name), and the
/// receiver's auth header with `auth_value`, its value unsealed.
pub fn request_headers(
    message: &Message<'_>,
    keys: &[Vec<u8>],
    auth_value: Option<String>,
    number: u32,
    now: Timestamp,
    traceparent: Option<&str>,
) -> Vec<(String, String)> {
    let timestamp = now.as_micros().div_euclid(MICROS_PER_SECOND);
    let signature = signature_header(keys, message.id, timestamp, message.body);
    let mut headers: Vec<(String, String)> = [
        ("User-Agent", USER_AGENT.to_string()),
        ("Content-Type", "application/json".to_string()),
        ("X-svc-Record-Id", message.id.to_string()),
        ("X-svc-Delivery-Attempt", number.to_string()),
        ("webhook-id", message.id.to_string()),
        ("webhook-timestamp", timestamp.to_string()),
        ("webhook-signature", signature),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_string(), value))
    .collect();
    let auth_named = |name: &str| {
        message
            .auth_header
            .is_some_and(|auth| auth.eq_ignore_ascii_case(name))
    };
    if let Some(traceparent) = traceparent
        && !auth_named("traceparent")
    {
        headers.push(("traceparent".to_string(), traceparent.to_string()));
    }
    if let (Some(name), Some(value)) = (message.auth_header, auth_value) {
        headers.push((name.to_string(), value));
    }
    headers
}

/// The headers as the attempt log keeps them: signature and auth value replaced.
pub fn redacted(
    headers: Vec<(String, String)>,
    auth_header: Option<&str>,
) -> Vec<(String, String)> {
    headers
        .into_iter()
        .map(|(name, value)| {
            let secret = name.eq_ignore_ascii_case("webhook-signature")
                || auth_header.is_some_and(|a| name.eq_ignore_ascii_case(a));
            let value = if secret { REDACTED.to_string() } else { value };
            (name, value)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    // The known-answer example of the spec (and of the Standard Webhooks reference
    // implementations).
    const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    const MSG_ID: &str = "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk";
    const TIMESTAMP: i64 = 1_649_367_553;
    const BODY: &[u8] = br#"{"email":"test@example.com","username":"test_user"}"#;
    const SIGNATURE: &str = "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=";

    #[test]
    fn signs_the_known_answer() {
        let key = secret_key(SECRET).unwrap();
        assert_eq!(sign(&key, MSG_ID, TIMESTAMP, BODY), SIGNATURE);
        // Any change to the signed content changes the signature.
        assert_ne!(sign(&key, MSG_ID, TIMESTAMP + 1, BODY), SIGNATURE);
        assert_ne!(sign(&key, "msg_other", TIMESTAMP, BODY), SIGNATURE);
        assert_ne!(sign(&key, MSG_ID, TIMESTAMP, b"{}"), SIGNATURE);
    }

    #[test]
    fn the_header_has_one_entry_per_key_newest_first() {
        let previous = secret_key(SECRET).unwrap();
        let current = secret_key(&generate_secret()).unwrap();
        let keys = [current.clone(), previous.clone()];
        let header = signature_header(&keys, MSG_ID, TIMESTAMP, BODY);
        let entries: Vec<&str> = header.split(' ').collect();
        assert_eq!(
            entries,
            [sign(&current, MSG_ID, TIMESTAMP, BODY).as_str(), SIGNATURE]
        );
        assert!(entries.iter().all(|e| e.starts_with(SCHEME_PREFIX)));
        assert_eq!(
            signature_header(&[previous], MSG_ID, TIMESTAMP, BODY),
            SIGNATURE
        );
        assert_eq!(signature_header(&[], MSG_ID, TIMESTAMP, BODY), "");
    }

    #[test]
    fn verify_accepts_each_key_of_the_header_and_nothing_altered() {
        let previous = secret_key(SECRET).unwrap();
        let current = secret_key(&generate_secret()).unwrap();
        let header = signature_header(
            &[current.clone(), previous.clone()],
            MSG_ID,
            TIMESTAMP,
            BODY,
        );
        assert!(verify(&current, MSG_ID, TIMESTAMP, BODY, &header));
        assert!(verify(&previous, MSG_ID, TIMESTAMP, BODY, SIGNATURE));
        assert!(!verify(&previous, MSG_ID, TIMESTAMP + 1, BODY, &header));
        assert!(!verify(&previous, MSG_ID, TIMESTAMP, b"{}", &header));
        assert!(!verify(&[1], MSG_ID, TIMESTAMP, BODY, &header));
        assert!(!verify(&previous, MSG_ID, TIMESTAMP, BODY, ""));
        // The last character of the base64 carries two unused bits: a variant that decodes to
        // the same bytes is still not the signature.
        let variant = SIGNATURE.replace("Kkw=", "Kkx=");
        assert!(!verify(&previous, MSG_ID, TIMESTAMP, BODY, &variant));
    }

    #[test]
    fn bad_secrets_are_refused() {
        assert_eq!(
            secret_key("C2FVsBQIhrscChlQIMV+b5sSYspob7oD"),
            Err(SigningError::MissingPrefix)
        );
        assert_eq!(secret_key("WHSEC_AAAA"), Err(SigningError::MissingPrefix));
        assert_eq!(secret_key("whsec_"), Err(SigningError::Empty));
        assert_eq!(
            secret_key("whsec_not base64!"),
            Err(SigningError::NotBase64)
        );
        assert_eq!(secret_key("whsec_AAA"), Err(SigningError::NotBase64));
        // URL-safe base64 is not the format.
        assert_eq!(secret_key("whsec_-_-_"), Err(SigningError::NotBase64));
    }

    #[test]
    fn generated_secrets_decode_to_32_random_bytes() {
        let a = generate_secret();
        let b = generate_secret();
        assert!(a.starts_with(SECRET_PREFIX), "{a}");
        assert_eq!(a.len(), SECRET_PREFIX.len() + 44, "{a}");
        assert_eq!(secret_key(&a).unwrap().len(), SECRET_KEY_BYTES);
        assert_ne!(a, b);
    }

    #[test]
    fn the_log_hides_the_signature_and_the_auth_value() {
        let headers = vec![
            ("webhook-id".to_string(), "rec_1".to_string()),
            ("webhook-signature".to_string(), "v1,abc".to_string()),
            ("x-api-key".to_string(), "s3cret".to_string()),
        ];
        let logged = redacted(headers, Some("X-Api-Key"));
        assert_eq!(logged[0].1, "rec_1");
        assert_eq!(logged[1].1, REDACTED);
        assert_eq!(logged[2], ("x-api-key".to_string(), REDACTED.to_string()));
    }
}
