//! A payload's rules: the body must be one UTF-8 JSON document, at most [`MAX_DEPTH`] arrays and
//! objects deep. It is stored as sent but for this normalisation, and that text is the
//! record's *payload text*: what every read returns, webhooks carry and search matches against.
//!
//! - Insignificant whitespace (between tokens) is removed.
//! - A string with an escape is decoded and written again the way serde_json writes strings:
//!   only `"`, `\` and control characters escaped (`\b \f \n \r \t`, others as `\u00xx`), so
//!   `"\u00e9"` is stored as `"é"` and `"\/"` as `"/"`.
//! - Everything else is kept byte for byte: numbers with every digit and as written (`1E2`,
//!   `-0`, `1.000`, `123456789012345678901234567890`; none is converted, so none is too large),
//!   key order, duplicate keys, strings without escapes.
//!
//! Storing a stored payload again changes nothing. When the endpoint declares required fields,
//! the payload must be a JSON object in which each of them is present and not `null`; when it
//! has a JSON Schema, the payload must match it as well (`domain::schema`).

use std::collections::HashMap;

use serde::de::IgnoredAny;

use crate::domain::error::{Error, Result};
use crate::domain::schema::PayloadSchema;

/// The deepest nesting of arrays and objects a payload may have: serde_json's limit, so every
/// stored payload can be read back by parsers with one (and payloads were held to it when
/// they were parsed in full).
pub const MAX_DEPTH: usize = 127;

/// Checks a payload and returns its payload text (see the module doc).
///
/// No number is converted and no tree is built: serde_json validates the body, skipping over
/// values, then [`compact`] copies it without insignificant whitespace.
pub fn normalize_payload(body: &[u8], rules: &PayloadRules) -> Result<Vec<u8>> {
    let text = validate_json(body)?;
    let out = compact(text)?;
    if !rules.required_fields.is_empty() {
        check_required_fields(&out, rules.required_fields)?;
    }
    if let Some(schema) = rules.schema {
        schema.check(&out)?;
    }
    Ok(out)
}

/// What an endpoint asks of a payload beyond being JSON: its required fields (checked first),
/// then its schema.
#[derive(Clone, Copy, Default)]
pub struct PayloadRules<'a> {
    pub required_fields: &'a [String],
    pub schema: Option<&'a PayloadSchema>,
}

/// The body as text if it is one JSON document in UTF-8. Skipping it as `IgnoredAny` checks the
/// grammar (numbers such as `01` or `1.`, escapes, control characters in strings, trailing
/// text) but neither the depth nor what a `\u` escape stands for: [`compact`] checks those.
fn validate_json(body: &[u8]) -> Result<&str> {
    let text = std::str::from_utf8(body)
        .map_err(|e| Error::InvalidJson(format!("invalid UTF-8 at byte {}", e.valid_up_to())))?;
    serde_json::from_str::<IgnoredAny>(text).map_err(|e| Error::InvalidJson(e.to_string()))?;
    Ok(text)
}

/// What a byte outside strings is to [`compact`].
#[derive(Clone, Copy, PartialEq)]
enum ByteClass {
    /// Part of a number, `true`, `false` or `null`, or a `,` or `:`: kept.
    Kept,
    Whitespace,
    Quote,
    Open,
    Close,
}

const BYTE_CLASSES: [ByteClass; 256] = {
    let mut classes = [ByteClass::Kept; 256];
    classes[b' ' as usize] = ByteClass::Whitespace;
    classes[b'\t' as usize] = ByteClass::Whitespace;
    classes[b'\n' as usize] = ByteClass::Whitespace;
    classes[b'\r' as usize] = ByteClass::Whitespace;
    classes[b'"' as usize] = ByteClass::Quote;
    classes[b'[' as usize] = ByteClass::Open;
    classes[b'{' as usize] = ByteClass::Open;
    classes[b']' as usize] = ByteClass::Close;
    classes[b'}' as usize] = ByteClass::Close;
    classes
};

/// Writes validated JSON without insignificant whitespace, and with each string that has an
/// escape written again by [`push_unescaped`]. Everything else is kept, copied a run at a time:
/// a compact body without escapes is one copy.
fn compact(text: &str) -> Result<Vec<u8>> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    // `bytes[..copied]` is written out (or dropped); `bytes[copied..at]` is to be kept.
    let mut copied = 0;
    let mut at = 0;
    let mut depth = 0;
    while let Some(&byte) = bytes.get(at) {
        match BYTE_CLASSES[usize::from(byte)] {
            ByteClass::Kept => at += 1,
            ByteClass::Whitespace => {
                out.extend_from_slice(&bytes[copied..at]);
                at += 1;
                copied = at;
            }
            ByteClass::Quote => {
                let (token, escaped) = string_token(bytes, at)
                    .ok_or_else(|| invalid_at(text, at, "unterminated string"))?;
                if escaped {
                    out.extend_from_slice(&bytes[copied..at]);
                    push_unescaped(token, &mut out).map_err(|_| {
                        let problem = "a \\u escape that is not a Unicode character (a lone \
                                       surrogate) in the string";
                        invalid_at(text, at, problem)
                    })?;
                    copied = at + token.len();
                }
                at += token.len();
            }
            ByteClass::Open => {
                depth += 1;
                if depth > MAX_DEPTH {
                    let problem = format!("more than {MAX_DEPTH} nested arrays and objects");
                    return Err(invalid_at(text, at, &problem));
                }
                at += 1;
            }
            ByteClass::Close => {
                depth = depth.saturating_sub(1);
                at += 1;
            }
        }
    }
    out.extend_from_slice(&bytes[copied..]);
    Ok(out)
}

/// Decodes the string `token` (quotes included) and appends it the way serde_json writes
/// strings: only `"`, `\` and control characters escaped (the form search expects). Decoding
/// is also where a lone surrogate (`"\ud800"`) is refused.
fn push_unescaped(token: &[u8], out: &mut Vec<u8>) -> serde_json::Result<()> {
    let decoded: String = serde_json::from_slice(token)?;
    serde_json::to_writer(out, &decoded)
}

/// The string token whose opening quote is at `start`, quotes included, and whether it holds an
/// escape.
fn string_token(bytes: &[u8], start: usize) -> Option<(&[u8], bool)> {
    let mut at = start + 1;
    let mut escaped = false;
    loop {
        at += memchr::memchr2(b'"', b'\\', bytes.get(at..)?)?;
        if bytes.get(at) == Some(&b'"') {
            return Some((bytes.get(start..=at)?, escaped));
        }
        // Past the backslash and the character it escapes (a `\u`'s hex digits are neither a
        // quote nor a backslash).
        escaped = true;
        at += 2;
    }
}

/// `problem` found at byte `at` of `text`, which is placed by line and column the way
/// serde_json places its errors (from 1, columns in bytes).
fn invalid_at(text: &str, at: usize, problem: &str) -> Error {
    let before = text.as_bytes().get(..at).unwrap_or_default();
    let line = 1 + memchr::memchr_iter(b'\n', before).count();
    let line_start = memchr::memrchr(b'\n', before).map_or(0, |n| n + 1);
    let column = at - line_start + 1;
    Error::InvalidJson(format!("{problem} at line {line} column {column}"))
}

/// Each required field must be a top-level key of an object, with a value other than `null`.
fn check_required_fields(payload: &[u8], required_fields: &[String]) -> Result<()> {
    let fields: HashMap<String, Option<IgnoredAny>> =
        serde_json::from_slice(payload).map_err(|_| Error::PayloadNotObject)?;
    for field in required_fields {
        if !matches!(fields.get(field), Some(Some(_))) {
            return Err(Error::MissingRequiredField(field.clone()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The payload text of `body`, which must be accepted.
    fn stored(body: &str) -> String {
        let out = normalize_payload(body.as_bytes(), &PayloadRules::default()).unwrap();
        String::from_utf8(out).unwrap()
    }

    fn refused(body: &[u8]) -> bool {
        matches!(
            normalize_payload(body, &PayloadRules::default()),
            Err(Error::InvalidJson(_))
        )
    }

    #[test]
    fn payloads_are_normalised_compact_and_unescaped() {
        assert_eq!(
            stored(r#"{ "b" : 1, "a" : "\u00e9t\u00e9" }"#),
            r#"{"b":1,"a":"été"}"#
        );
        assert_eq!(stored("[1,2]"), "[1,2]");
        assert_eq!(stored(" 42 "), "42");
        assert_eq!(stored("\t[ true ,\r\nfalse,null ]\n"), "[true,false,null]");
        // Key order and duplicate keys as sent.
        assert_eq!(stored(r#"{"z":1, "a":2, "z":3}"#), r#"{"z":1,"a":2,"z":3}"#);
        // Whitespace inside strings is content.
        assert_eq!(stored(r#"{" a b ":" c d "}"#), r#"{" a b ":" c d "}"#);
    }

    #[test]
    fn numbers_are_stored_exactly_as_sent() {
        for number in [
            "123456789012345678901234567890",
            "18446744073709551616",
            "-18446744073709551617",
            "1E2",
            "1e+2",
            "-0",
            "-0.0",
            "1.000",
            "0.1e-7",
            "1.99769313486231543657890123456789012345678889",
            "1e400",
            "-1E-400",
        ] {
            assert_eq!(stored(number), number);
            assert_eq!(stored(&format!("[ {number} ]")), format!("[{number}]"));
            assert_eq!(
                stored(&format!("{{ \"n\" : {number} }}")),
                format!(r#"{{"n":{number}}}"#)
            );
        }
    }

    #[test]
    fn escapes_are_decoded_but_where_json_requires_one() {
        // Only `"`, `\` and control characters stay escaped, in serde_json's spelling (short
        // forms, else lower-case `\u00xx`); `\/`, `\u` escapes and surrogate pairs decode.
        assert_eq!(
            stored(r#""\"\\\/\b\f\n\r\t\u0001\u001F\u0041\u00E9\ud83d\uDE00""#),
            r#""\"\\/\b\f\n\r\t\u0001\u001fAé😀""#
        );
        // Keys are strings like any other.
        assert_eq!(stored(r#"{"\u006b":"v"}"#), r#"{"k":"v"}"#);
        // A string without escapes is copied, DEL and U+2028 included.
        assert_eq!(stored("\"a\u{7f}\u{2028}é\""), "\"a\u{7f}\u{2028}é\"");
    }

    #[test]
    fn invalid_documents_are_refused() {
        let bodies: [&[u8]; 26] = [
            b"",
            b" ",
            b"{",
            b"[1,]",
            b"{\"a\"}",
            b"{\"a\":1,}",
            b"{} x",
            b"1 2",
            b"NaN",
            b"tru",
            b"01",
            b"-01",
            b"1.",
            b".5",
            b"+1",
            b"-",
            b"1e",
            b"1e+",
            br#""\x""#,
            br#""\u12G4""#,
            br#""\ud800""#,
            br#""\udc00""#,
            br#""\ud800\u0041""#,
            b"\"a\nb\"",
            b"\"\xff\"",
            b"\xff\xfe{}",
        ];
        for body in bodies {
            assert!(
                refused(body),
                "accepted {:?}",
                String::from_utf8_lossy(body)
            );
        }
        let lone = normalize_payload(b"[\n \"ok\", \"\\ud800\"]", &PayloadRules::default());
        assert!(
            matches!(&lone, Err(Error::InvalidJson(m)) if m.contains("line 2 column 8")
                && m.contains("surrogate")),
            "{lone:?}"
        );
    }

    #[test]
    fn nesting_is_bounded_at_serde_jsons_limit() {
        let arrays = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let objects = |depth: usize| format!("{}1{}", r#"{"a":"#.repeat(depth), "}".repeat(depth));
        for nested in [arrays, objects] {
            assert!(
                normalize_payload(nested(MAX_DEPTH).as_bytes(), &PayloadRules::default()).is_ok()
            );
            assert!(refused(nested(MAX_DEPTH + 1).as_bytes()));
        }
        // Depth is counted by nesting, not by how many arrays there are.
        let siblings = vec![arrays(MAX_DEPTH - 1); 3].join(",");
        assert!(
            normalize_payload(format!("[{siblings}]").as_bytes(), &PayloadRules::default()).is_ok()
        );
        // Brackets in strings are text.
        let text = format!(r#"["{}"]"#, "[{".repeat(MAX_DEPTH));
        assert!(normalize_payload(text.as_bytes(), &PayloadRules::default()).is_ok());
    }

    #[test]
    fn normalising_a_normalised_payload_changes_nothing() {
        // Numbers keep their text, so the long mantissa that fuzzing (target `payload`) once
        // found changing on a second pass, when numbers went through f64, stays as sent.
        let once = normalize_payload(
            b"[1e5,0.1,1.99769313486231543657890123456789012345678889]",
            &PayloadRules::default(),
        )
        .unwrap();
        assert_eq!(
            once,
            b"[1e5,0.1,1.99769313486231543657890123456789012345678889]"
        );
        assert_eq!(
            normalize_payload(&once, &PayloadRules::default()).unwrap(),
            once
        );
        let escaped =
            stored("{ \"k\\u00e9\" : [ \"\\\"\\\\\\/\\n\\u0000\\ud83d\\ude00\" , -0 , 1E+2 ] }");
        assert_eq!(escaped, r#"{"ké":["\"\\/\n\u0000😀",-0,1E+2]}"#);
        assert_eq!(stored(&escaped), escaped);
    }

    #[test]
    fn required_fields_must_be_present_and_not_null() {
        let fields = vec!["email".to_string(), "name".to_string()];
        let req = PayloadRules {
            required_fields: &fields,
            schema: None,
        };
        assert!(normalize_payload(br#"{"email":"a","name":"b","x":1}"#, &req).is_ok());
        assert!(matches!(
            normalize_payload(br#"{"email":"a"}"#, &req),
            Err(Error::MissingRequiredField(f)) if f == "name"
        ));
        assert!(matches!(
            normalize_payload(br#"{"email":"a","name":null}"#, &req),
            Err(Error::MissingRequiredField(f)) if f == "name"
        ));
        assert!(matches!(
            normalize_payload(b"[1]", &req),
            Err(Error::PayloadNotObject)
        ));
        // Checked on the payload text, whose numbers no longer go through f64.
        let big = br#"{"email": 123456789012345678901234567890, "name": 1e400}"#;
        assert_eq!(
            normalize_payload(big, &req).unwrap(),
            br#"{"email":123456789012345678901234567890,"name":1e400}"#
        );
    }

    #[test]
    fn required_fields_are_checked_before_the_schema() {
        let fields = vec!["name".to_string()];
        let (schema, _) = PayloadSchema::parse(&serde_json::json!({
            "type": "object",
            "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}
        }))
        .unwrap();
        let rules = PayloadRules {
            required_fields: &fields,
            schema: Some(&schema),
        };
        assert!(matches!(
            normalize_payload(br#"{"age":"x"}"#, &rules),
            Err(Error::MissingRequiredField(f)) if f == "name"
        ));
        assert!(matches!(
            normalize_payload(br#"{"name":"a","age":"x"}"#, &rules),
            Err(Error::SchemaViolation(v)) if v.len() == 1 && v[0].instance_path == "/age"
        ));
        assert!(normalize_payload(br#"{"name":"a","age":3}"#, &rules).is_ok());
    }
}
