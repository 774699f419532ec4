//! The request body path of a create or replace: reading the body under the 100 KB limit,
//! then JSON normalisation, the required-field rules and (for some inputs) a JSON Schema,
//! whose check reads the payload text as a tape.
//!
//! Properties: a body over `MAX_DATA_BODY` is refused whatever its declared length and
//! however it is chunked; text that is not JSON is never accepted; an accepted payload is JSON
//! with every required field present and not null, normalising it again changes nothing, it
//! means what the body means (the same `serde_json::Value` whenever its numbers fit one), a
//! body without escapes is stored as sent less the whitespace between tokens (so numbers keep
//! their text), and re-serialised through `Value` it is accepted again.
#![no_main]

use std::collections::HashMap;
use std::sync::LazyLock;

use futures_util::FutureExt;
use intake::domain::records::PayloadRules;
use intake::domain::schema::PayloadSchema;
use intake::http::error::HttpError;
use intake::http::reply::read_limited;
use intake::http::request::MAX_DATA_BODY;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use serde_json::value::RawValue;

/// A schema that reaches most keywords: types, bounds on numbers and strings, patterns,
/// formats, enums, nested objects and arrays, and a local `$ref`.
static SCHEMA: LazyLock<PayloadSchema> = LazyLock::new(|| {
    let schema = serde_json::json!({
        "type": ["object", "array", "string", "number", "boolean", "null"],
        "properties": {
            "a": { "type": ["string", "integer"], "minLength": 1, "maximum": 1000000000000000000000u128 },
            "b": { "$ref": "#/$defs/item" },
            "c": { "type": "array", "uniqueItems": true, "items": { "$ref": "#/$defs/item" } },
            "d": { "type": "string", "format": "date-time" },
            "e": { "enum": [1, "x", null, [1, 2]] }
        },
        "items": { "type": "number", "multipleOf": 0.5 },
        "pattern": "^[a-z]*$",
        "$defs": { "item": { "type": "object", "additionalProperties": { "type": "string" },
                             "propertyNames": { "maxLength": 8 } } }
    });
    match PayloadSchema::parse(&schema) {
        Ok((schema, _)) => schema,
        Err(e) => panic!("the fuzz schema is refused: {e}"),
    }
});

fuzz_target!(|data: &[u8]| {
    // Input: flags, a chunk size, then the body.
    let [flags, chunk, body @ ..] = data else {
        return;
    };
    let required: Vec<String> = match flags % 3 {
        0 => vec![],
        1 => vec!["a".into()],
        _ => vec!["a".into(), "b".into()],
    };
    // With the high bit, the endpoint's schema too: the payload text is read as a tape and
    // walked by the validator (a refusal is an answer like any other).
    let rules = PayloadRules {
        required_fields: &required,
        schema: (flags & 0x80 != 0).then(|| &*SCHEMA),
    };
    // Padding with JSON whitespace lets small inputs reach the limit with bodies that are
    // otherwise valid, so only the size can refuse them.
    let mut body = body.to_vec();
    if flags & 0x04 != 0 {
        let pad = MAX_DATA_BODY - 64 + usize::from(flags >> 3) * 8;
        body.resize(body.len() + pad, b' ');
    }
    let mut headers = http::HeaderMap::new();
    if flags & 0x08 != 0 {
        // A declared length at or below the truth: the limit must also hold while streaming.
        let declared = body.len().saturating_sub(usize::from(flags >> 4));
        headers.insert(http::header::CONTENT_LENGTH, declared.into());
    }
    let chunks: Vec<bytes::Bytes> = body
        .chunks(usize::from(*chunk).max(1) * 512)
        .map(bytes::Bytes::copy_from_slice)
        .collect();
    let mut stream: intake::http::request::BodyStream =
        Box::pin(futures_util::stream::iter(chunks.into_iter().map(Ok)));
    let read = read_limited(&headers, &mut stream, MAX_DATA_BODY)
        .now_or_never()
        .expect("a body from memory is read without waiting");
    let read = match read {
        Ok(read) => read,
        Err(HttpError::PayloadTooLarge(limit)) => {
            assert_eq!(limit, MAX_DATA_BODY);
            assert!(
                body.len() > MAX_DATA_BODY,
                "refused a body of {} bytes",
                body.len()
            );
            return;
        }
        Err(other) => panic!("unexpected error reading a body: {other:?}"),
    };
    assert!(
        body.len() <= MAX_DATA_BODY,
        "accepted a body of {} bytes",
        body.len()
    );
    assert_eq!(&read[..], &body[..], "the body read is the body sent");

    let is_json = serde_json::from_slice::<serde::de::IgnoredAny>(&read).is_ok();
    let Ok(normalized) = intake::domain::records::normalize_payload(&read, &rules) else {
        return;
    };
    assert!(is_json, "accepted a body that is not JSON");
    // Members as raw text: numbers are not converted, so `1e400` is fine here.
    if !required.is_empty() {
        let members: HashMap<String, &RawValue> =
            serde_json::from_slice(&normalized).expect("a normalised payload is an object");
        for field in &required {
            assert!(
                members.get(field).is_some_and(|v| v.get() != "null"),
                "required field {field} missing"
            );
        }
    }
    let again = intake::domain::records::normalize_payload(&normalized, &rules)
        .expect("a normalised payload must be accepted again");
    assert_eq!(again, normalized, "normalisation must be idempotent");
    if !read.contains(&b'\\') {
        assert_eq!(
            normalized,
            without_whitespace_between_tokens(&read),
            "a body without escapes is stored as sent, less whitespace between tokens"
        );
    }
    // `Value` holds a number in f64 (or refuses one past its range): compare where it can.
    let Ok(value) = serde_json::from_slice::<Value>(&normalized) else {
        return;
    };
    let sent: Value = serde_json::from_slice(&read).expect("the body parses as the payload does");
    assert_eq!(value, sent, "the payload means what the body means");
    // Re-serialised, the payload is still accepted with the same rules.
    let reserialised = serde_json::to_vec(&value).expect("a JSON value serialises");
    intake::domain::records::normalize_payload(&reserialised, &rules)
        .expect("the re-serialised payload must be accepted");
});

/// An independent model for bodies without escapes: every quote opens or closes a string, and
/// JSON whitespace outside strings goes.
fn without_whitespace_between_tokens(body: &[u8]) -> Vec<u8> {
    let mut in_string = false;
    let mut out = Vec::with_capacity(body.len());
    for &b in body {
        if b == b'"' {
            in_string = !in_string;
        }
        if in_string || !matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
            out.push(b);
        }
    }
    out
}
