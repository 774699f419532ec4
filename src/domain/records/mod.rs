//! The data operations on records: create, read one, list, replace, delete.
//!
//! Writes are validated here, then queued for the ingest writer (`domain::ingest`) and answered
//! once durable. Reads go straight to the store, one snapshot per request.
//!
//! The rules a payload must meet (normalisation, required fields, the endpoint's schema)
//! are in [`payload`].

use std::ops::Bound::{Excluded, Included};

use serde::Serialize;

use crate::core::clock::Timestamp;
use crate::core::crypto::{Sealer, hex, sha256};
use crate::core::cursor::{self, CursorKind, Position};
use crate::core::ids::RecordId;
use crate::domain::audit;
use crate::domain::endpoints::DataAccess;
use crate::domain::error::{Error, Result};
use crate::domain::handles::Handles;

mod payload;

use crate::domain::ingest::{IDEMPOTENCY_TTL, Ingest, Write};
use crate::domain::webhooks::deliveries::Hooks;
use crate::store::records::{
    IdempotencyClaim, KEYED_HASH_PREFIX, NewRecord, RecordWrite, ScanOrder, WriteOutcome,
};
use crate::store::{AccountRow, EndpointRow, Environment, Store, StoreError, time_key};
pub use payload::{MAX_DEPTH, PayloadRules, normalize_payload};

/// The largest payload a record may have, in bytes as sent (the body of a POST or PUT, a
/// record of a batch): 100 KB, as the spec says.
pub const MAX_PAYLOAD_BYTES: usize = 102_400;
pub const LIST_LIMIT_DEFAULT: usize = 10;
pub const LIST_LIMIT_MAX: usize = 30;
/// The longest `Idempotency-Key`, in characters (the OpenAPI document says it too).
pub const IDEMPOTENCY_KEY_MAX: usize = 255;
/// The label of the keyed hash an Idempotency-Key claim keeps (see [`Sealer::keyed_hash`]).
const IDEMPOTENCY_HASH_LABEL: &str = "idempotency payload";

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
/// the stored payloads (see [`push_record`]). One writer serves list, search and poll.
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

    /// Appends the record `id`, last written at `updated_at` with `payload`.
    pub fn push(
        &mut self,
        id: RecordId,
        updated_at: Timestamp,
        payload: &[u8],
    ) -> Result<(), StoreError> {
        if self.count > 0 {
            self.json.push(',');
        }
        push_record(&mut self.json, id, updated_at, payload)?;
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
pub fn record_json(id: RecordId, updated_at: Timestamp, payload: &[u8]) -> Result<String> {
    let mut json = String::with_capacity(payload.len() + 128);
    push_record(&mut json, id, updated_at, payload)?;
    Ok(json)
}

/// Appends `{"id","payload","created_at","updated_at"}` for a stored record.
///
/// The payload's bytes are copied as they are: the store only holds payloads that
/// [`normalize_payload`] wrote as compact JSON, so reading does not parse them again (that
/// parse, with the copies around it, was most of the cost of a poll page). Only the UTF-8
/// check stays, so a damaged value cannot put invalid text into a response: such a payload is
/// corrupt stored data.
pub fn push_record(
    out: &mut String,
    id: RecordId,
    updated_at: Timestamp,
    payload: &[u8],
) -> Result<(), StoreError> {
    let payload = std::str::from_utf8(payload)
        .map_err(|_| StoreError::Corrupt(format!("stored payload of {id} is not UTF-8")))?;
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

/// Stores `body` as a new record of `access`'s partition; `sealer` keys the hash its
/// Idempotency-Key claim keeps.
pub async fn create(
    ingest: &Ingest,
    sealer: &Sealer,
    access: &DataAccess,
    hooks: Hooks,
    body: &[u8],
    idempotency_key: Option<&str>,
) -> Result<Accepted> {
    let payload = normalize_payload(body, &access.payload_rules())?;
    let claim = idempotency_claim(sealer, idempotency_key, || sha256(&payload))?;
    let ids = create_records(ingest, access, hooks, vec![payload], claim).await?;
    let id = ids
        .first()
        .ok_or_else(|| Error::Internal("a create answered no record id".into()))?;
    Ok(Accepted {
        id: id.to_string(),
        created_at: Some(id.created_at().to_rfc3339()),
        status: "accepted",
    })
}

/// The claim of a create sent with `key` (checked), whose payloads have the SHA-256 `digest`.
/// It keeps a keyed hash of the digest under `sealer`'s key: one pass over the payloads gives
/// both the hash new rows keep and the plain one that rows of earlier versions are judged by.
pub fn idempotency_claim(
    sealer: &Sealer,
    key: Option<&str>,
    digest: impl FnOnce() -> [u8; 32],
) -> Result<Option<IdempotencyClaim>> {
    key.map(|key| {
        valid_idempotency_key(key).map(|key| {
            let digest = digest();
            let keyed = sealer.keyed_hash(IDEMPOTENCY_HASH_LABEL, &digest);
            IdempotencyClaim {
                key: key.to_string(),
                payload_hash: format!("{KEYED_HASH_PREFIX}{}", hex(&keyed)),
                legacy_payload_hash: hex(&digest),
                ttl: IDEMPOTENCY_TTL,
            }
        })
    })
    .transpose()
}

/// Stores `payloads` (checked) as new records of `access`'s partition, received at `hooks.at`,
/// all in one commit or none; answers their ids in the order given (for a replay, the
/// original ones).
pub async fn create_records(
    ingest: &Ingest,
    access: &DataAccess,
    hooks: Hooks,
    payloads: Vec<Vec<u8>>,
    idempotency: Option<IdempotencyClaim>,
) -> Result<Vec<RecordId>> {
    let ids = RecordId::generate_run(hooks.at, payloads.len());
    let records = ids
        .into_iter()
        .zip(payloads)
        .map(|(id, payload)| NewRecord { id, payload })
        .collect();
    let record = RecordWrite::Create {
        partition: access.partition,
        records,
        idempotency,
    };
    match ingest.submit(Write { record, hooks }).await? {
        WriteOutcome::Created { ids } | WriteOutcome::Replayed { ids } => Ok(ids),
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
    let payload = normalize_payload(body, &access.payload_rules())?;
    let record = RecordWrite::Replace {
        partition: access.partition,
        id,
        updated_at: hooks.at,
        payload,
    };
    ingest.submit(Write { record, hooks }).await?;
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
    let record = RecordWrite::Delete {
        partition: access.partition,
        id,
        at: hooks.at,
    };
    ingest.submit(Write { record, hooks }).await?;
    Ok(Accepted {
        id: id.to_string(),
        created_at: None,
        status: "accepted",
    })
}

/// A create a member of the endpoint made in the dashboard: the API's [`create`] (the same
/// payload rules, queue and webhooks), noted in the endpoint's audit log as `record.created`
/// with who made it (the request log only holds API calls).
pub async fn create_as_member(
    ingest: &Ingest,
    handles: &Handles,
    sealer: &Sealer,
    access: &DataAccess,
    member: &AccountRow,
    hooks: Hooks,
    body: &[u8],
) -> Result<Accepted> {
    member_may_write(&access.endpoint, access.environment)?;
    within_size(body)?;
    let accepted = create(ingest, sealer, access, hooks, body, None).await?;
    audit_member_write(handles, access, member, "record.created", &accepted.id)?;
    Ok(accepted)
}

/// A replace a member made in the dashboard: the API's [`replace`], audited as
/// `record.replaced`.
pub async fn replace_as_member(
    ingest: &Ingest,
    handles: &Handles,
    access: &DataAccess,
    member: &AccountRow,
    id: RecordId,
    hooks: Hooks,
    body: &[u8],
) -> Result<Accepted> {
    member_may_write(&access.endpoint, access.environment)?;
    within_size(body)?;
    let accepted = replace(ingest, access, id, hooks, body).await?;
    audit_member_write(handles, access, member, "record.replaced", &accepted.id)?;
    Ok(accepted)
}

/// A delete a member made in the dashboard: the API's [`delete`], audited as
/// `record.deleted`.
pub async fn delete_as_member(
    ingest: &Ingest,
    handles: &Handles,
    access: &DataAccess,
    member: &AccountRow,
    id: RecordId,
    hooks: Hooks,
) -> Result<Accepted> {
    member_may_write(&access.endpoint, access.environment)?;
    let accepted = delete(ingest, access, id, hooks).await?;
    audit_member_write(handles, access, member, "record.deleted", &accepted.id)?;
    Ok(accepted)
}

/// Whether a member's session may write to `environment` of `endpoint`: production only once
/// the endpoint is deployed, as a production key would (403 `endpoint_not_deployed`).
pub fn member_may_write(endpoint: &EndpointRow, environment: Environment) -> Result<()> {
    if environment == Environment::Production && !endpoint.deployed {
        return Err(Error::EndpointNotDeployed);
    }
    Ok(())
}

/// A payload typed in the dashboard, held to the API's body limit (413 past it).
fn within_size(body: &[u8]) -> Result<()> {
    if body.len() > MAX_PAYLOAD_BYTES {
        return Err(Error::RecordTooLarge(MAX_PAYLOAD_BYTES));
    }
    Ok(())
}

/// Notes a member's write of record `id` in the endpoint's audit log.
fn audit_member_write(
    handles: &Handles,
    access: &DataAccess,
    member: &AccountRow,
    action: &'static str,
    id: &str,
) -> Result<()> {
    let now = handles.now();
    let details = serde_json::json!({
        "record_id": id,
        "environment": access.environment,
    });
    handles
        .write(|tx| audit::record(tx, now, access.endpoint.id, member, action, details.clone()))?;
    Ok(())
}

/// The JSON of one record.
pub fn get(store: &dyn Store, access: &DataAccess, id: RecordId) -> Result<String> {
    let record = store
        .read()?
        .record(access.partition, id)?
        .ok_or(Error::RecordNotFound)?;
    record_json(record.id, record.updated_at, &record.payload)
}

/// Newest first, `limit` records after `cursor`: the JSON of the page (the API's list).
pub fn list(
    store: &dyn Store,
    access: &DataAccess,
    limit: usize,
    cursor: Option<&str>,
) -> Result<String> {
    browse(
        store,
        access,
        ScanOrder::NewestFirst,
        (0, u128::MAX),
        limit,
        cursor,
    )
}

/// The records with ids in `[lower, upper]` (a time window: an id carries its creation time)
/// in `order`, `limit` records after `cursor`: the JSON of the page, as the API's list
/// writes it. Each order has its own cursor kind, so a cursor is only read the way it was
/// handed out.
pub fn browse(
    store: &dyn Store,
    access: &DataAccess,
    order: ScanOrder,
    (lower, upper): (u128, u128),
    limit: usize,
    cursor: Option<&str>,
) -> Result<String> {
    let p = access.partition;
    let kind = match order {
        ScanOrder::NewestFirst => CursorKind::RecordList,
        ScanOrder::OldestFirst => CursorKind::RecordListOldest,
    };
    let after = cursor
        .map(|text| cursor::parse(kind, p.raw(), text).map(|pos| pos.tiebreak))
        .transpose()?;
    // The cursor narrows the window on the side the order walks from.
    let range = match (order, after) {
        (ScanOrder::NewestFirst, Some(id)) if id <= upper => (Included(lower), Excluded(id)),
        (ScanOrder::OldestFirst, Some(id)) if id >= lower => (Excluded(id), Included(upper)),
        _ => (Included(lower), Included(upper)),
    };
    let empty = match range {
        (Included(low), Included(high)) => low > high,
        (Included(low), Excluded(high)) | (Excluded(low), Included(high)) => low >= high,
        _ => false,
    };
    if empty {
        return RecordsBody::new(0).finish(&PageTail {
            pagination: Pagination { next_cursor: None },
        });
    }
    let mut body = RecordsBody::new(limit);
    let mut last = None;
    let more = store
        .read()?
        .record_page(p, range, order, limit, &mut |record| {
            body.push(record.id, record.updated_at, record.payload)?;
            last = Some(record.id);
            Ok(())
        })?;
    let next_cursor = match (more, last) {
        (true, Some(id)) => Some(cursor::encode(
            kind,
            p.raw(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_bodies_are_the_json_the_api_documents() {
        let created = Timestamp(1_700_000_000_000_001);
        let updated = Timestamp(1_700_000_100_000_000);
        let a = RecordId::generate(created);
        let b = RecordId::generate(updated);
        let payload = normalize_payload(
            br#"{"name":"J\u00fcrgen","n":[1,2.5,null]}"#,
            &PayloadRules::default(),
        )
        .unwrap();
        let expected = |id: RecordId| {
            serde_json::json!({
                "id": id.to_string(),
                "payload": {"name": "Jürgen", "n": [1, 2.5, null]},
                "created_at": id.created_at().to_rfc3339(),
                "updated_at": updated.to_rfc3339(),
            })
        };
        let one = record_json(a, updated, &payload).unwrap();
        let one: serde_json::Value = serde_json::from_str(&one).unwrap();
        assert_eq!(one, expected(a));

        let mut body = RecordsBody::new(2);
        for id in [a, b] {
            body.push(id, updated, &payload).unwrap();
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
        let id = RecordId::generate(Timestamp(1));
        let payload = b"\"\xff\"";
        assert!(matches!(
            record_json(id, Timestamp(1), payload),
            Err(Error::Internal(_))
        ));
        assert!(RecordsBody::new(1).push(id, Timestamp(1), payload).is_err());
    }

    #[test]
    fn idempotency_keys() {
        assert!(valid_idempotency_key("order-123").is_ok());
        assert!(valid_idempotency_key("").is_err());
        assert!(valid_idempotency_key(&"x".repeat(256)).is_err());
        assert!(valid_idempotency_key("tab\there").is_err());
    }
}
