//! The delivery log: every delivery of an endpoint (newest first, per environment or per
//! record, filtered by state, kind and URL) with every attempt; "retry now" of a pending one,
//! and manual redelivery of a given-up or skipped delivery.

use serde::Serialize;

use crate::core::clock::Timestamp;
use crate::core::cursor::{self, CursorKind, Position};
use crate::core::ids::RecordId;
use crate::domain::audit;
use crate::domain::error::{Error, Missing, Result};
use crate::domain::handles::Handles;
use crate::domain::records::Pagination;
use crate::domain::webhooks::deliveries::{displayed_url, max_attempts, receiver_of};
use crate::domain::webhooks::subscriptions::subscription_id;
use crate::store::webhooks::DueDelivery;
use crate::store::{
    AccountRow, DeliveryRow, DeliveryState, ReadTx, Store, WebhookKind, WriteTx,
    partition_endpoint, partition_environment,
};

pub const LIST_LIMIT_DEFAULT: usize = 20;
pub const LIST_LIMIT_MAX: usize = 100;

/// A delivery as listed.
#[derive(Debug, Serialize)]
pub struct DeliveryView {
    pub id: u64,
    pub record_id: String,
    /// `sandbox` or `production`.
    pub environment: &'static str,
    pub kind: WebhookKind,
    /// The owner subscription it was made for (`sub_1`…); `null` for a caller webhook's.
    pub subscription: Option<String>,
    pub url: String,
    pub state: DeliveryState,
    /// Pending after at least one failed attempt.
    pub failing: bool,
    /// Where it is as the log shows it.
    #[serde(skip)]
    pub shown: ShownState,
    pub attempts: u32,
    pub max_attempts: u32,
    pub next_attempt_at: Option<String>,
    pub created_at: String,
    pub finished_at: Option<String>,
}

/// A delivery's state as the log shows and filters it: a pending delivery is "failing" once
/// an attempt has failed, which the stored state does not tell apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShownState {
    /// Not attempted yet.
    Pending,
    Failing,
    Delivered,
    GivenUp,
    Skipped,
}

impl ShownState {
    pub const ALL: [ShownState; 5] = [
        ShownState::Pending,
        ShownState::Failing,
        ShownState::Delivered,
        ShownState::GivenUp,
        ShownState::Skipped,
    ];

    /// Its name in a filter parameter: `pending`, `failing`, `delivered`, `given_up`,
    /// `skipped`.
    pub fn as_str(self) -> &'static str {
        match self {
            ShownState::Pending => "pending",
            ShownState::Failing => "failing",
            ShownState::Delivered => "delivered",
            ShownState::GivenUp => "given_up",
            ShownState::Skipped => "skipped",
        }
    }

    fn of(row: &DeliveryRow) -> ShownState {
        match row.state {
            DeliveryState::Pending if row.attempts > 0 => ShownState::Failing,
            DeliveryState::Pending => ShownState::Pending,
            DeliveryState::Delivered => ShownState::Delivered,
            DeliveryState::GivenUp => ShownState::GivenUp,
            DeliveryState::Skipped => ShownState::Skipped,
        }
    }
}

/// Which deliveries of a partition a page lists: those that pass every condition given.
#[derive(Clone, Debug, Default)]
pub struct DeliveryFilter {
    pub record: Option<RecordId>,
    /// The owner subscription (`sub_N`'s N).
    pub subscription: Option<u32>,
    pub state: Option<ShownState>,
    pub kind: Option<WebhookKind>,
    /// Part of the URL as shown (credentials masked), in any case.
    pub url: Option<String>,
}

/// Longest `url` filter, in bytes.
const URL_FILTER_MAX: usize = 2_048;

impl DeliveryFilter {
    /// The filter of the parameters `state`, `kind` and `url` (an empty value is no
    /// condition); `record` and `subscription` are the caller's to set.
    pub fn from_params(params: &std::collections::HashMap<String, String>) -> Result<Self> {
        let given = |name: &str| params.get(name).map(|v| v.trim()).filter(|v| !v.is_empty());
        let state = given("state")
            .map(|text| {
                ShownState::ALL
                    .into_iter()
                    .find(|s| s.as_str() == text)
                    .ok_or_else(|| Error::InvalidParameter {
                        name: "state",
                        reason: "it must be pending, failing, delivered, given_up or skipped"
                            .into(),
                    })
            })
            .transpose()?;
        let kind = given("kind")
            .map(|text| match text {
                "owner" => Ok(WebhookKind::Owner),
                "caller" => Ok(WebhookKind::Caller),
                _ => Err(Error::InvalidParameter {
                    name: "kind",
                    reason: "it must be owner or caller".into(),
                }),
            })
            .transpose()?;
        let url = given("url")
            .map(|text| match text.len() <= URL_FILTER_MAX {
                true => Ok(text.to_lowercase()),
                false => Err(Error::InvalidParameter {
                    name: "url",
                    reason: format!("it must be at most {URL_FILTER_MAX} bytes"),
                }),
            })
            .transpose()?;
        Ok(DeliveryFilter {
            state,
            kind,
            url,
            ..DeliveryFilter::default()
        })
    }

    fn matches(&self, row: &DeliveryRow) -> bool {
        self.subscription
            .is_none_or(|id| row.owner_subscription() == Some(id))
            && self.state.is_none_or(|state| ShownState::of(row) == state)
            && self.kind.is_none_or(|kind| row.kind == kind)
            && self
                .url
                .as_deref()
                .is_none_or(|part| displayed_url(&row.url).to_lowercase().contains(part))
    }
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
    pub pagination: Pagination,
}

fn view(row: &DeliveryRow) -> DeliveryView {
    let shown = ShownState::of(row);
    DeliveryView {
        id: row.id,
        record_id: RecordId(row.record_id).to_string(),
        environment: partition_environment(row.partition).as_str(),
        kind: row.kind,
        subscription: row.owner_subscription().map(subscription_id),
        url: displayed_url(&row.url),
        state: row.state,
        failing: shown == ShownState::Failing,
        shown,
        attempts: row.attempts,
        max_attempts: row.max_attempts,
        next_attempt_at: row.next_attempt_at.map(Timestamp::to_rfc3339),
        created_at: row.created_at.to_rfc3339(),
        finished_at: row.finished_at.map(Timestamp::to_rfc3339),
    }
}

/// Rows a filtered page reads at most before it returns what it found (with a cursor to go on
/// from): a subscription whose deliveries are rare costs each page a bounded read.
const FILTER_SCAN_LIMIT: usize = 10_000;

/// The deliveries of one partition (endpoint and environment) that pass `filter`, newest
/// first. A page reads at most [`FILTER_SCAN_LIMIT`] deliveries, so a rare match costs a
/// bounded read; it then ends early, with a cursor to read on.
pub fn list(
    store: &dyn Store,
    partition: u64,
    filter: &DeliveryFilter,
    limit: usize,
    cursor_text: Option<&str>,
) -> Result<DeliveryPage> {
    let mut position = match cursor_text {
        Some(text) => cursor::parse(CursorKind::Delivery, partition, text)?.tiebreak as u64,
        None => u64::MAX,
    };
    let snapshot = store.read()?;
    let record = filter.record;
    let page_size = limit.saturating_add(1).max(64);
    let mut rows = Vec::new();
    let mut scanned = 0;
    // Where the next page goes on from, if there may be more.
    let next = 'scan: loop {
        let page = snapshot.delivery_page(partition, record.map(|r| r.0), position, page_size)?;
        if page.is_empty() {
            break None;
        }
        for row in page {
            if rows.len() == limit {
                break 'scan Some(position);
            }
            position = row.id;
            scanned += 1;
            if filter.matches(&row) {
                rows.push(row);
            }
        }
        if scanned >= FILTER_SCAN_LIMIT {
            break Some(position);
        }
    };
    let next_cursor = next.map(|last| {
        cursor::encode(
            CursorKind::Delivery,
            partition,
            Position {
                time: 0,
                tiebreak: u128::from(last),
            },
        )
    });
    Ok(DeliveryPage {
        data: rows.iter().map(view).collect(),
        pagination: Pagination { next_cursor },
    })
}

/// The delivery `id` of one of `partitions` (the endpoint's two environments).
fn delivery_in(tx: &(impl ReadTx + ?Sized), partitions: [u64; 2], id: u64) -> Result<DeliveryRow> {
    tx.delivery(id)?
        .filter(|row| partitions.contains(&row.partition))
        .ok_or(Error::NotFound(Missing::Delivery))
}

/// One delivery of the endpoint with every attempt.
pub fn detail(store: &dyn Store, partitions: [u64; 2], id: u64) -> Result<DeliveryDetail> {
    let snapshot = store.read()?;
    let row = delivery_in(snapshot.as_ref(), partitions, id)?;
    let attempt_log = snapshot
        .delivery_attempts(id)?
        .into_iter()
        .map(|a| AttemptView {
            attempt: a.attempt,
            started_at: a.started_at.to_rfc3339(),
            duration_ms: a.duration_us as f64 / 1000.0,
            url: displayed_url(&a.url),
            request_headers: a.request_headers,
            status: a.status,
            error: a.error,
            response_body: a.response_body,
            outcome: a.outcome,
        })
        .collect();
    Ok(DeliveryDetail {
        delivery: view(&row),
        body: row.body,
        attempt_log,
    })
}

/// Re-arms a given-up or skipped delivery: due at once, with a fresh budget of attempts.
/// Returns it.
pub fn redeliver(handles: &Handles, partitions: [u64; 2], id: u64) -> Result<DeliveryView> {
    let now = handles.now();
    let row = handles.write(|tx| {
        let mut row = delivery_in(tx, partitions, id)?;
        if !can_redeliver(&row) {
            return Err(Error::Conflict(
                "Only a given-up or skipped delivery can be redelivered.".into(),
            ));
        }
        rearm(tx, &mut row, now)?;
        Ok(row)
    })?;
    Ok(view(&row))
}

/// "Retry now": brings a pending delivery's next attempt forward to now (or leaves it when it
/// is due already). The attempt counts against the delivery's budget like any retry, so the
/// retry policy's number of attempts holds; a given-up or skipped delivery is redelivered
/// instead, with a fresh budget. The request is counted in the row: if an attempt is in
/// flight, its outcome then makes the next attempt due at once rather than on the schedule
/// (`AttemptOutcome::settle`). Audited as `delivery.retried`. Returns the delivery.
pub fn retry_now(
    handles: &Handles,
    actor: &AccountRow,
    partitions: [u64; 2],
    id: u64,
) -> Result<DeliveryView> {
    let now = handles.now();
    let row = handles.write(|tx| {
        let mut row = delivery_in(tx, partitions, id)?;
        if row.state != DeliveryState::Pending {
            return Err(Error::Conflict(
                "Only a pending delivery can be retried now; redeliver a given-up or skipped \
                 one."
                    .into(),
            ));
        }
        let listed = row.next_attempt_at;
        let due_at = listed.map_or(now, |at| at.min(now));
        row.next_attempt_at = Some(due_at);
        row.retry_requests = row.retry_requests.wrapping_add(1);
        tx.put_delivery(&row)?;
        tx.move_due(
            listed,
            &DueDelivery {
                due_at,
                id: row.id,
                retry: row.attempts > 0,
                receiver: receiver_of(&row.url),
            },
        )?;
        audit::record(
            tx,
            now,
            partition_endpoint(row.partition),
            actor,
            "delivery.retried",
            serde_json::json!({
                "delivery": row.id,
                "environment": partition_environment(row.partition).as_str(),
                "attempts": row.attempts,
                "was_due_at": listed.map(Timestamp::to_rfc3339),
            }),
        )?;
        Ok(row)
    })?;
    Ok(view(&row))
}

/// Whether `row` has ended without reaching its receiver (given up, or skipped), so that it
/// can be sent again.
pub fn can_redeliver(row: &DeliveryRow) -> bool {
    matches!(row.state, DeliveryState::GivenUp | DeliveryState::Skipped)
}

/// Makes `row` pending again in `tx`, due at `due` with a fresh budget of attempts.
pub fn rearm(tx: &mut dyn WriteTx, row: &mut DeliveryRow, due: Timestamp) -> Result<()> {
    let budget = max_attempts(partition_environment(row.partition));
    row.state = DeliveryState::Pending;
    row.max_attempts = row.attempts + budget;
    row.next_attempt_at = Some(due);
    row.finished_at = None;
    tx.put_delivery(row)?;
    tx.put_due(&DueDelivery {
        due_at: due,
        id: row.id,
        retry: row.attempts > 0,
        receiver: receiver_of(&row.url),
    })?;
    Ok(())
}

/// How the deliveries of one partition made since a time have ended (the dashboard's
/// webhook success rate).
#[derive(Debug, Default, Serialize)]
pub struct Outcomes {
    pub delivered: u64,
    pub given_up: u64,
    pub pending: u64,
    pub skipped: u64,
    /// More deliveries were made in the period than were counted (the newest `cap`).
    pub capped: bool,
}

/// Deliveries read at a time while counting outcomes.
const OUTCOMES_PAGE: usize = 256;

/// Counts the outcomes of the deliveries of `partition` created at or after `since`, newest
/// first, looking at no more than `cap` of them so a busy month stays cheap to show.
pub fn outcomes_since(
    store: &dyn Store,
    partition: u64,
    since: Timestamp,
    cap: usize,
) -> Result<Outcomes> {
    let snapshot = store.read()?;
    let mut outcomes = Outcomes::default();
    let mut seen = 0;
    let mut before = u64::MAX;
    loop {
        let page = snapshot.delivery_briefs(partition, before, OUTCOMES_PAGE)?;
        let last_page = page.len() < OUTCOMES_PAGE;
        for row in page {
            if row.created_at < since {
                return Ok(outcomes);
            }
            if seen == cap {
                outcomes.capped = true;
                return Ok(outcomes);
            }
            seen += 1;
            before = row.id;
            match row.state {
                DeliveryState::Delivered => outcomes.delivered += 1,
                DeliveryState::GivenUp => outcomes.given_up += 1,
                DeliveryState::Pending => outcomes.pending += 1,
                DeliveryState::Skipped => outcomes.skipped += 1,
            }
        }
        if last_page {
            return Ok(outcomes);
        }
    }
}
