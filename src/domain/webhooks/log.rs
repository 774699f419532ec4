//! The delivery log: every delivery of an endpoint (newest first, per environment or per
//! record) with every attempt, and manual redelivery of a given-up delivery.

use redb::ReadableTable;
use serde::Serialize;

use crate::core::clock::Timestamp;
use crate::core::cursor::{self, CursorKind, Position};
use crate::core::ids::RecordId;
use crate::domain::error::{Error, Missing, Result};
use crate::domain::webhooks::deliveries::displayed_url;
use crate::store::{
    AttemptRow, DELIVERIES, DELIVERIES_DUE, DELIVERY_ATTEMPTS, DeliveryRow, DeliveryState,
    PARTITION_DELIVERIES, RECORD_DELIVERIES, RedbStore, WebhookKind, from_json, to_json,
};

pub const LIST_LIMIT_DEFAULT: usize = 20;
pub const LIST_LIMIT_MAX: usize = 100;

/// A delivery as listed.
#[derive(Debug, Serialize)]
pub struct DeliveryView {
    pub id: u64,
    pub record_id: String,
    pub kind: WebhookKind,
    pub url: String,
    pub state: DeliveryState,
    pub attempts: u32,
    pub max_attempts: u32,
    pub next_attempt_at: Option<String>,
    pub created_at: String,
    pub finished_at: Option<String>,
}

/// One delivery with its body and every attempt, oldest attempt first.
#[derive(Debug, Serialize)]
pub struct DeliveryDetail {
    #[serde(flatten)]
    pub delivery: DeliveryView,
    pub body: String,
    pub attempt_log: Vec<AttemptView>,
}

#[derive(Debug, Serialize)]
pub struct AttemptView {
    pub attempt: u32,
    pub started_at: String,
    pub duration_ms: f64,
    pub url: String,
    pub request_headers: Vec<(String, String)>,
    pub status: Option<u16>,
    pub error: Option<String>,
    pub response_body: Option<String>,
    pub outcome: String,
}

#[derive(Debug, Serialize)]
pub struct DeliveryPage {
    pub data: Vec<DeliveryView>,
    pub pagination: crate::domain::records::Pagination,
}

fn view(row: &DeliveryRow) -> DeliveryView {
    DeliveryView {
        id: row.id,
        record_id: RecordId(row.record_id).to_string(),
        kind: row.kind,
        url: displayed_url(&row.url),
        state: row.state,
        attempts: row.attempts,
        max_attempts: row.max_attempts,
        next_attempt_at: row.next_attempt_at.map(Timestamp::to_rfc3339),
        created_at: row.created_at.to_rfc3339(),
        finished_at: row.finished_at.map(Timestamp::to_rfc3339),
    }
}

/// The deliveries of one partition (endpoint and environment), newest first; only those of
/// `record` when given.
pub fn list(
    store: &RedbStore,
    partition: u64,
    record: Option<RecordId>,
    limit: usize,
    cursor_text: Option<&str>,
) -> Result<DeliveryPage> {
    let before = match cursor_text {
        Some(text) => cursor::parse(CursorKind::Delivery, partition, text)?.tiebreak as u64,
        None => u64::MAX,
    };
    let txn = store.read()?;
    let deliveries = txn.open_table(DELIVERIES)?;
    let mut ids = Vec::with_capacity(limit + 1);
    match record {
        None => {
            for entry in txn
                .open_table(PARTITION_DELIVERIES)?
                .range((partition, 0)..(partition, before))?
                .rev()
                .take(limit + 1)
            {
                ids.push(entry?.0.value().1);
            }
        }
        Some(record) => {
            for entry in txn
                .open_table(RECORD_DELIVERIES)?
                .range((partition, record.0, 0)..(partition, record.0, before))?
                .rev()
                .take(limit + 1)
            {
                ids.push(entry?.0.value().2);
            }
        }
    }
    let more = ids.len() > limit;
    ids.truncate(limit);
    let mut data = Vec::with_capacity(ids.len());
    for id in &ids {
        if let Some(v) = deliveries.get(*id)? {
            data.push(view(&from_json(v.value())?));
        }
    }
    let next_cursor = match (more, ids.last()) {
        (true, Some(last)) => Some(cursor::encode(
            CursorKind::Delivery,
            partition,
            Position {
                time: 0,
                tiebreak: u128::from(*last),
            },
        )),
        _ => None,
    };
    Ok(DeliveryPage {
        data,
        pagination: crate::domain::records::Pagination { next_cursor },
    })
}

/// The delivery `id` of one of `partitions` (the endpoint's two environments).
fn delivery_in(
    table: &impl ReadableTable<u64, &'static [u8]>,
    partitions: [u64; 2],
    id: u64,
) -> Result<DeliveryRow> {
    let row: DeliveryRow = match table.get(id)? {
        Some(v) => from_json(v.value())?,
        None => return Err(Error::NotFound(Missing::Delivery)),
    };
    if !partitions.contains(&row.partition) {
        return Err(Error::NotFound(Missing::Delivery));
    }
    Ok(row)
}

/// One delivery of the endpoint with every attempt.
pub fn detail(store: &RedbStore, partitions: [u64; 2], id: u64) -> Result<DeliveryDetail> {
    let txn = store.read()?;
    let row = delivery_in(&txn.open_table(DELIVERIES)?, partitions, id)?;
    let mut attempt_log = Vec::new();
    for entry in txn
        .open_table(DELIVERY_ATTEMPTS)?
        .range((id, 0)..=(id, u32::MAX))?
    {
        let (_, value) = entry?;
        let a: AttemptRow = from_json(value.value())?;
        attempt_log.push(AttemptView {
            attempt: a.attempt,
            started_at: a.started_at.to_rfc3339(),
            duration_ms: a.duration_us as f64 / 1000.0,
            url: displayed_url(&a.url),
            request_headers: a.request_headers,
            status: a.status,
            error: a.error,
            response_body: a.response_body,
            outcome: a.outcome,
        });
    }
    Ok(DeliveryDetail {
        delivery: view(&row),
        body: row.body,
        attempt_log,
    })
}

/// Re-arms a given-up delivery: due at once, with a fresh budget of attempts. Returns it.
pub fn redeliver(
    store: &RedbStore,
    partitions: [u64; 2],
    id: u64,
    now: Timestamp,
) -> Result<DeliveryView> {
    let txn = store.write()?;
    let row = {
        let mut deliveries = txn.open_table(DELIVERIES)?;
        let mut row = delivery_in(&deliveries, partitions, id)?;
        if row.state != DeliveryState::GivenUp {
            return Err(Error::Conflict(
                "Only a given-up delivery can be redelivered.".into(),
            ));
        }
        let budget = crate::domain::webhooks::deliveries::max_attempts(
            crate::store::partition_environment(row.partition),
        );
        row.state = DeliveryState::Pending;
        row.max_attempts = row.attempts + budget;
        row.next_attempt_at = Some(now);
        row.finished_at = None;
        deliveries.insert(id, to_json(&row)?.as_slice())?;
        crate::store::redb::mark_due(&mut txn.open_table(DELIVERIES_DUE)?, &row, now)?;
        row
    };
    txn.commit()?;
    Ok(view(&row))
}

/// How the deliveries of one partition made since a time have ended (the dashboard's
/// webhook success rate).
#[derive(Debug, Default, Serialize)]
pub struct Outcomes {
    pub delivered: u64,
    pub given_up: u64,
    pub pending: u64,
    /// More deliveries were made in the period than were counted (the newest `cap`).
    pub capped: bool,
}

/// Counts the outcomes of the deliveries of `partition` created at or after `since`, newest
/// first, looking at no more than `cap` of them so a busy month stays cheap to show.
pub fn outcomes_since(
    store: &RedbStore,
    partition: u64,
    since: Timestamp,
    cap: usize,
) -> Result<Outcomes> {
    let txn = store.read()?;
    let deliveries = txn.open_table(DELIVERIES)?;
    let mut outcomes = Outcomes::default();
    let mut seen = 0;
    for entry in txn
        .open_table(PARTITION_DELIVERIES)?
        .range((partition, 0)..=(partition, u64::MAX))?
        .rev()
    {
        let id = entry?.0.value().1;
        let Some(value) = deliveries.get(id)? else {
            continue;
        };
        let row: DeliveryRow = from_json(value.value())?;
        if row.created_at < since {
            break;
        }
        if seen == cap {
            outcomes.capped = true;
            break;
        }
        seen += 1;
        match row.state {
            DeliveryState::Delivered => outcomes.delivered += 1,
            DeliveryState::GivenUp => outcomes.given_up += 1,
            DeliveryState::Pending => outcomes.pending += 1,
        }
    }
    Ok(outcomes)
}
