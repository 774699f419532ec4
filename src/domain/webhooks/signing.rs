//! Standard Webhooks signatures, as the spec's "Signature" section defines them.
//!
//! A secret is `whsec_` followed by standard base64 (with padding) of its key bytes. A
//! signature is `v1,` followed by base64 of HMAC-SHA256, under the key, of
//! `{webhook-id}.{webhook-timestamp}.{raw body}`. The `webhook-signature` header holds one
//! such entry per key, separated by single spaces: two during a secret changeover, so a
//! receiver that still has the previous secret keeps verifying.
//!
//! Everything here is pure: which keys to sign with is decided by `webhooks::secrets`.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::core::ids::random_bytes;

/// Every secret begins with this.
pub const SECRET_PREFIX: &str = "whsec_";
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
}
