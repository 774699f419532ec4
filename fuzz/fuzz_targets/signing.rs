//! Standard Webhooks signatures: secret parsing, signing and verification.
//!
//! Input: `secret\nmsg_id\ntimestamp\nbody`; a secret that `secret_key` refuses is used as raw
//! key bytes. Properties: an accepted secret is the canonical `whsec_` + base64 of its key; a
//! header signed with the current and a previous key verifies under both; changing the
//! body, the id or the timestamp, or any one byte of a signature entry, makes it refused.
#![no_main]

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use intake::domain::webhooks::signing::{
    SECRET_PREFIX, secret_key, sign, signature_header, verify,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(4, |b| *b == b'\n');
    let (Some(secret), Some(msg_id), Some(timestamp), Some(body)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return;
    };
    let Ok(msg_id) = std::str::from_utf8(msg_id) else {
        return;
    };
    let key = match std::str::from_utf8(secret).map(secret_key) {
        Ok(Ok(key)) => {
            let text = std::str::from_utf8(secret).unwrap();
            assert_eq!(format!("{SECRET_PREFIX}{}", STANDARD.encode(&key)), text);
            key
        }
        _ if secret.is_empty() => return,
        _ => secret.to_vec(),
    };
    let timestamp = std::str::from_utf8(timestamp)
        .ok()
        .and_then(|t| t.parse::<i64>().ok())
        .unwrap_or(1_649_367_553);
    let mut previous = key.clone();
    previous[0] ^= 0x80;

    let header = signature_header(&[key.clone(), previous.clone()], msg_id, timestamp, body);
    assert!(verify(&key, msg_id, timestamp, body, &header));
    assert!(verify(&previous, msg_id, timestamp, body, &header));
    assert!(!verify(
        &key,
        msg_id,
        timestamp.wrapping_add(1),
        body,
        &header
    ));
    assert!(!verify(
        &key,
        &format!("{msg_id}x"),
        timestamp,
        body,
        &header
    ));
    let mut other_body = body.to_vec();
    other_body.push(b'x');
    assert!(!verify(&key, msg_id, timestamp, &other_body, &header));
    if let Some(first) = body.first() {
        other_body = body.to_vec();
        other_body[0] = first ^ 1;
        assert!(!verify(&key, msg_id, timestamp, &other_body, &header));
    }

    // One byte of the entry changed (kept ASCII so the header stays text): refused.
    let entry = sign(&key, msg_id, timestamp, body);
    let at = data.len() % entry.len();
    let mut flipped = entry.clone().into_bytes();
    flipped[at] ^= 1;
    let flipped = String::from_utf8(flipped).unwrap();
    assert!(!verify(&key, msg_id, timestamp, body, &flipped));
    assert!(!verify(
        &key,
        msg_id,
        timestamp,
        body,
        &entry[..entry.len() - 1]
    ));
});
