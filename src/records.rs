//! The data operations on records: create, read one, list, replace, delete.
//!
//! Writes are validated here, then handed to the ingest writer (`ingest`) and answered once
//! durable. Reads go straight to the store.
//!
//! Payload rules: the body must be UTF-8 JSON. It is stored normalised, as compact JSON with
//! the caller's key order kept and strings unescaped; that text is the record's *payload text*
//! (what search matches against later). When the endpoint declares required fields, the payload
//! must be a JSON object in which each of them is present and not `null`.

use std::collections::HashMap;

use serde::Serialize;
use serde::de::IgnoredAny;

use crate::crypto::sha256;
use crate::cursor::{self, CursorKind, Position};
use crate::endpoints::DataAccess;
use crate::error::{Error, Result};
use crate::ids::RecordId;
use crate::ingest::{IdempotencyClaim, Ingest, Write, WriteOp, WriteOutcome};
use crate::storage::{RECORDS, Store, decode_record, time_key};
use crate::webhooks::deliveries::Hooks;

pub const LIST_LIMIT_DEFAULT: usize = 10;
pub const LIST_LIMIT_MAX: usize = 30;
const IDEMPOTENCY_KEY_MAX: usize = 255;

/// The 202 body of a create.
#[derive(Debug, Serialize)]
pub struct Accepted {
    pub id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    pub status: &'static str,
}

/// One page of a newest-first listing (request log, mail, deliveries). Record pages are
/// written by [`RecordsBody`] instead, with the same shape.
#[derive(Debug, Serialize)]
pub struct Page<T> {
    pub data: Vec<T>,
    pub pagination: Pagination,
}

/// The part of a list or search page after `data`.
#[derive(Debug, Serialize)]
pub struct PageTail {
    pub pagination: Pagination,
}

#[derive(Debug, Serialize)]
pub struct Pagination {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// A response body listing records, `{"data":[record,...],...}`, written straight from
/// stored values (see [`push_record`]). One writer serves list, search and poll.
pub struct RecordsBody {
    json: String,
    count: usize,
    /// How many records the body will probably hold: sizes its buffer after the first.
    expected: usize,
}

/// The most [`RecordsBody`] reserves up front; a larger body grows as it is written.
const BODY_RESERVE_MAX: usize = 1 << 20;

impl RecordsBody {
    /// Opens the body of a page of (usually) `expected` records.
    pub fn new(expected: usize) -> RecordsBody {
        let mut json = String::with_capacity(256);
        json.push_str(r#"{"data":["#);
        RecordsBody {
            json,
            count: 0,
            expected,
        }
    }

    /// Appends the record stored under `id` as `value`.
    pub fn push(&mut self, id: RecordId, value: &[u8]) -> Result<()> {
        if self.count > 0 {
            self.json.push(',');
        }
        push_record(&mut self.json, id, value)?;
        self.count += 1;
        if self.count == 1 {
            // Room for the rest of the page at the first record's size, saving the copies
            // of growing a large body step by step.
            let rest = self.json.len() * self.expected.saturating_sub(1) + 128;
            self.json.reserve(rest.min(BODY_RESERVE_MAX));
        }
        Ok(())
    }

    /// How many records are in the body.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Closes `data` and appends the members of `rest`, which serialises as a JSON object.
    pub fn finish(mut self, rest: &impl Serialize) -> Result<String> {
        let rest = serde_json::to_string(rest)
            .map_err(|e| Error::Internal(format!("cannot serialise a page: {e}")))?;
        match rest.strip_prefix('{') {
            Some("}") => self.json.push_str("]}"),
            Some(members) => {
                self.json.push_str("],");
                self.json.push_str(members);
            }
            None => return Err(Error::Internal(format!("a page ends with {rest}"))),
        }
        Ok(self.json)
    }
}

/// The JSON of one stored record as the API shows it.
pub fn record_json(id: RecordId, value: &[u8]) -> Result<String> {
    let mut json = String::with_capacity(value.len() + 128);
    push_record(&mut json, id, value)?;
    Ok(json)
}

/// Appends `{"id","payload","created_at","updated_at"}` for a stored record.
///
/// The payload's bytes are copied as they are: the store only holds payloads that
/// [`normalize_payload`] wrote as compact JSON, so reading does not parse them again (that
/// parse, with the copies around it, was most of the cost of a poll page). Only the UTF-8
/// check stays, so a damaged value cannot put invalid text into a response.
fn push_record(out: &mut String, id: RecordId, value: &[u8]) -> Result<()> {
    let (updated_at, payload) = decode_record(value)?;
    let payload = std::str::from_utf8(payload)
        .map_err(|_| Error::Internal(format!("stored payload of {id} is not UTF-8")))?;
    out.push_str(r#"{"id":""#);
    id.push_to(out);
    out.push_str(r#"","payload":"#);
    out.push_str(payload);
    out.push_str(r#","created_at":""#);
    id.created_at().push_rfc3339(out);
    out.push_str(r#"","updated_at":""#);
    updated_at.push_rfc3339(out);
    out.push_str(r#""}"#);
    Ok(())
}

/// Parses and checks a payload, returning its normalised text.
///
/// The body is transcoded token by token from the parser to a compact serialiser (no tree is
/// built), which validates it, drops insignificant whitespace, unescapes strings and keeps the
/// caller's key order.
pub fn normalize_payload(body: &[u8], required_fields: &[String]) -> Result<Vec<u8>> {
    let invalid = |e: serde_json::Error| Error::InvalidJson(e.to_string());
    let mut out = Vec::with_capacity(body.len());
    let mut parser = serde_json::Deserializer::from_slice(body);
    serde_transcode::transcode(&mut parser, &mut serde_json::Serializer::new(&mut out))
        .map_err(invalid)?;
    parser.end().map_err(invalid)?;
    if !required_fields.is_empty() {
        check_required_fields(&out, required_fields)?;
    }
    Ok(out)
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

/// Checks an `Idempotency-Key` header value.
pub fn valid_idempotency_key(key: &str) -> Result<&str> {
    let ok = !key.is_empty()
        && key.len() <= IDEMPOTENCY_KEY_MAX
        && key.bytes().all(|b| (0x20..0x7f).contains(&b));
    if ok {
        Ok(key)
    } else {
        Err(Error::InvalidIdempotencyKey)
    }
}

pub fn parse_record_id(text: &str) -> Result<RecordId> {
    RecordId::parse(text).ok_or_else(|| Error::InvalidRecordId(text.chars().take(64).collect()))
}

pub async fn create(
    ingest: &Ingest,
    access: &DataAccess,
    hooks: Hooks,
    body: &[u8],
    idempotency_key: Option<&str>,
) -> Result<Accepted> {
    let payload = normalize_payload(body, &access.endpoint.required_fields)?;
    let idempotency = idempotency_key
        .map(|key| {
            valid_idempotency_key(key).map(|key| IdempotencyClaim {
                key: key.to_string(),
                payload_hash: hex(&sha256(&payload)),
            })
        })
        .transpose()?;
    let op = WriteOp::Create {
        partition: access.partition,
        id: RecordId::generate(hooks.at),
        payload,
        idempotency,
    };
    match ingest.submit(Write { op, hooks }).await? {
        WriteOutcome::Created { id, created_at } | WriteOutcome::Replayed { id, created_at } => {
            Ok(Accepted {
                id: id.to_string(),
                created_at: Some(created_at.to_rfc3339()),
                status: "accepted",
            })
        }
        other => Err(Error::Internal(format!("create answered {other:?}"))),
    }
}

pub async fn replace(
    ingest: &Ingest,
    access: &DataAccess,
    id: RecordId,
    hooks: Hooks,
    body: &[u8],
) -> Result<Accepted> {
    let payload = normalize_payload(body, &access.endpoint.required_fields)?;
    let op = WriteOp::Replace {
        partition: access.partition,
        id,
        updated_at: hooks.at,
        payload,
    };
    ingest.submit(Write { op, hooks }).await?;
    Ok(Accepted {
        id: id.to_string(),
        created_at: None,
        status: "accepted",
    })
}

pub async fn delete(
    ingest: &Ingest,
    access: &DataAccess,
    id: RecordId,
    hooks: Hooks,
) -> Result<Accepted> {
    let op = WriteOp::Delete {
        partition: access.partition,
        id,
    };
    ingest.submit(Write { op, hooks }).await?;
    Ok(Accepted {
        id: id.to_string(),
        created_at: None,
        status: "accepted",
    })
}

/// The JSON of one record.
pub fn get(store: &Store, access: &DataAccess, id: RecordId) -> Result<String> {
    let txn = store.read()?;
    let records = txn.open_table(RECORDS)?;
    let value = records
        .get((access.partition, id.0))?
        .ok_or(Error::RecordNotFound)?;
    record_json(id, value.value())
}

/// Newest first, `limit` records after `cursor`: the JSON of the page.
pub fn list(
    store: &Store,
    access: &DataAccess,
    limit: usize,
    cursor: Option<&str>,
) -> Result<String> {
    use std::ops::Bound::{Excluded, Included};
    let p = access.partition;
    let upper = match cursor {
        Some(text) => Excluded((p, cursor::parse(CursorKind::RecordList, p, text)?.tiebreak)),
        None => Included((p, u128::MAX)),
    };
    let txn = store.read()?;
    let records = txn.open_table(RECORDS)?;
    let mut body = RecordsBody::new(limit);
    let mut last = None;
    let mut more = false;
    for entry in records
        .range::<(u64, u128)>((Included((p, 0)), upper))?
        .rev()
    {
        let (key, value) = entry?;
        if body.len() == limit {
            more = true;
            break;
        }
        let id = RecordId(key.value().1);
        body.push(id, value.value())?;
        last = Some(id);
    }
    let next_cursor = match (more, last) {
        (true, Some(id)) => Some(cursor::encode(
            CursorKind::RecordList,
            p,
            Position {
                time: time_key(id.created_at()),
                tiebreak: id.0,
            },
        )),
        _ => None,
    };
    body.finish(&PageTail {
        pagination: Pagination { next_cursor },
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_are_normalised_compact_and_unescaped() {
        let out = normalize_payload(br#"{ "b" : 1, "a" : "\u00e9t\u00e9" }"#, &[]).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), r#"{"b":1,"a":"été"}"#);
        assert!(normalize_payload(b"[1,2]", &[]).is_ok());
        assert_eq!(normalize_payload(b" 42 ", &[]).unwrap(), b"42");
        assert!(matches!(
            normalize_payload(b"{} x", &[]),
            Err(Error::InvalidJson(_))
        ));
        assert!(matches!(
            normalize_payload(b"", &[]),
            Err(Error::InvalidJson(_))
        ));
        assert!(matches!(
            normalize_payload(b"{", &[]),
            Err(Error::InvalidJson(_))
        ));
    }

    #[test]
    fn normalising_a_normalised_payload_changes_nothing() {
        // Found by fuzzing (target `payload`): without serde_json's `float_roundtrip`, a
        // number with a long mantissa was read to a neighbour of the nearest double, whose
        // shortest form then read back as another number.
        let once = normalize_payload(
            b"[1e5,0.1,1.99769313486231543657890123456789012345678889]",
            &[],
        )
        .unwrap();
        assert_eq!(once, b"[100000.0,0.1,1.9976931348623155]");
        assert_eq!(normalize_payload(&once, &[]).unwrap(), once);
    }

    #[test]
    fn required_fields_must_be_present_and_not_null() {
        let req = vec!["email".to_string(), "name".to_string()];
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
    }

    #[test]
    fn record_bodies_are_the_json_the_api_documents() {
        use crate::clock::Timestamp;
        use crate::storage::encode_record;
        let created = Timestamp(1_700_000_000_000_001);
        let updated = Timestamp(1_700_000_100_000_000);
        let a = RecordId::generate(created);
        let b = RecordId::generate(updated);
        let payload =
            normalize_payload(br#"{"name":"J\u00fcrgen","n":[1,2.5,null]}"#, &[]).unwrap();
        let expected = |id: RecordId| {
            serde_json::json!({
                "id": id.to_string(),
                "payload": {"name": "Jürgen", "n": [1, 2.5, null]},
                "created_at": id.created_at().to_rfc3339(),
                "updated_at": updated.to_rfc3339(),
            })
        };
        let one = record_json(a, &encode_record(updated, &payload)).unwrap();
        let one: serde_json::Value = serde_json::from_str(&one).unwrap();
        assert_eq!(one, expected(a));

        let mut body = RecordsBody::new(2);
        for id in [a, b] {
            body.push(id, &encode_record(updated, &payload)).unwrap();
        }
        assert_eq!(body.len(), 2);
        let tail = PageTail {
            pagination: Pagination {
                next_cursor: Some("c".into()),
            },
        };
        let page: serde_json::Value = serde_json::from_str(&body.finish(&tail).unwrap()).unwrap();
        assert_eq!(
            page,
            serde_json::json!({
                "data": [expected(a), expected(b)],
                "pagination": {"next_cursor": "c"},
            })
        );

        // An empty page, and a tail with no members.
        let empty = RecordsBody::new(10).finish(&serde_json::json!({})).unwrap();
        assert_eq!(empty, r#"{"data":[]}"#);
        let tail = PageTail {
            pagination: Pagination { next_cursor: None },
        };
        let empty = RecordsBody::new(10).finish(&tail).unwrap();
        assert_eq!(empty, r#"{"data":[],"pagination":{}}"#);
    }

    #[test]
    fn a_stored_value_that_is_not_utf8_is_refused_not_sent() {
        let id = RecordId::generate(crate::clock::Timestamp(1));
        let value = crate::storage::encode_record(crate::clock::Timestamp(1), b"\"\xff\"");
        assert!(matches!(record_json(id, &value), Err(Error::Internal(_))));
        assert!(RecordsBody::new(1).push(id, &value).is_err());
    }

    #[test]
    fn idempotency_keys() {
        assert!(valid_idempotency_key("order-123").is_ok());
        assert!(valid_idempotency_key("").is_err());
        assert!(valid_idempotency_key(&"x".repeat(256)).is_err());
        assert!(valid_idempotency_key("tab\there").is_err());
    }
}
