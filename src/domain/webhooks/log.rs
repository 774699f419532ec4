//! The delivery log: every delivery of an endpoint (newest first, per environment or per
//! record, filtered by state, kind and URL) with every attempt; "retry now" of a pending one,
//! and manual redelivery of a given-up or skipped delivery.
//!
//! What a member sees of a delivery is decided here once, by [`DeliveryViewer::sight`], for
//! the API and the dashboard alike: the body and the receivers' answers (which carry or may
//! echo the record's payload) only with the `read` permission, as the records themselves; an
//! owner subscription's URL only to the owner (its subscriptions are the owner's alone); a
//! caller webhook's URL in full only to the owner and to whoever's key sent the write, its
//! origin to everyone else (URLs can carry capability paths and query tokens).

use serde::Serialize;

use crate::core::clock::Timestamp;
use crate::core::cursor::{self, CursorKind, Position};
use crate::core::ids::RecordId;
use crate::domain::audit;
use crate::domain::endpoints::{Endpoints, Membership};
use crate::domain::error::{Error, Missing, Result};
use crate::domain::handles::Handles;
use crate::domain::records::Pagination;
use crate::domain::webhooks::deliveries::{displayed_url, receiver_of};
use crate::domain::webhooks::policy::max_attempts;
use crate::domain::webhooks::subscriptions::subscription_id;
use crate::store::webhooks::DueDelivery;
use crate::store::{
    AccountRow, DeliveryRow, DeliveryState, EndpointRow, Environment, EventType, KeyHolder,
    Partition, Permission, ReadTx, Store, WebhookKind, WriteTx,
};

pub const LIST_LIMIT_DEFAULT: usize = 20;
pub const LIST_LIMIT_MAX: usize = 100;

/// A delivery as listed.
#[derive(Debug, Serialize)]
pub struct DeliveryView {
    pub id: u64,
    pub record_id: String,
    /// The event it announces (`record.created`, `record.replaced`, `record.deleted`): a
    /// record's deliveries share their `webhook-id`, and this tells them apart. `null` only
    /// for a delivery made before it was kept whose record was erased since.
    pub event: Option<EventType>,
    /// `sandbox` or `production`.
    pub environment: &'static str,
    pub kind: WebhookKind,
    /// The owner subscription it was made for (`sub_1`…); `null` for a caller webhook's.
    pub subscription: Option<String>,
    /// As far as the viewer may see it ([`Sight`]): in full (credentials masked), its origin,
    /// or `None`.
    pub url: Option<String>,
    pub state: DeliveryState,
    /// Pending after at least one failed attempt.
    pub failing: bool,
    /// Where it is as the log shows it.
    #[serde(skip)]
    pub shown: ShownState,
    /// It can be sent again ([`can_redeliver`]).
    #[serde(skip)]
    pub redeliverable: bool,
    pub attempts: u32,
    pub max_attempts: u32,
    pub next_attempt_at: Option<String>,
    pub created_at: String,
    pub finished_at: Option<String>,
    /// What the viewer is not shown of it (empty for those who see everything).
    pub withheld: Vec<Withheld>,
    /// Its record was erased (`domain::erasures`): its body and its attempts' response
    /// bodies are gone (`null`), and it is never sent again.
    pub erased: bool,
    /// A test event ("Send test event", `domain::webhooks::test_events`): `record_id` is its
    /// `test_…` id, and it is never sent again.
    pub test: bool,
}

/// A part of a delivery a viewer is not shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Withheld {
    /// The URL is cut to its origin (`https://host:port`), or is `null` for an owner
    /// subscription's, in the delivery and in every attempt.
    Url,
    /// The body is `null`, and so is every attempt's response body.
    Body,
}

/// What one viewer may see of one delivery.
#[derive(Debug)]
pub struct Sight {
    /// Its URL as shown: in full (credentials masked), its origin, or nothing.
    url: Option<String>,
    url_in_full: bool,
    /// The body and the receivers' answers.
    body: bool,
}

impl Sight {
    fn withheld(&self) -> Vec<Withheld> {
        let mut withheld = Vec::new();
        if !self.url_in_full {
            withheld.push(Withheld::Url);
        }
        if !self.body {
            withheld.push(Withheld::Body);
        }
        withheld
    }

    /// `url` (a delivery's, or one of its attempts') as this sight shows it.
    fn show(&self, url: &str) -> Option<String> {
        match self.url_in_full {
            true => Some(displayed_url(url)),
            false => self.url.as_ref().and(origin(url)),
        }
    }
}

/// `scheme://host[:port]` of a URL, without credentials; `None` when it does not parse.
fn origin(url: &str) -> Option<String> {
    let uri: http::Uri = url.parse().ok()?;
    let (scheme, host) = (uri.scheme_str()?, uri.host()?);
    let origin = match uri.port_u16() {
        Some(port) => format!("{scheme}://{host}:{port}"),
        None => format!("{scheme}://{host}"),
    };
    Some(origin.to_ascii_lowercase())
}

/// A member of an endpoint reading its delivery log, and so what of each delivery they see.
#[derive(Debug)]
pub struct DeliveryViewer {
    endpoint_id: u64,
    /// The viewer as the holder of a write's key: the owner, or the collaborator's account.
    holder: KeyHolder,
    /// May read the endpoint's records ([`Membership::permits`] `read`), and so bodies.
    reads_bodies: bool,
}

impl DeliveryViewer {
    /// `account` reading the delivery log of `slug`: its owner or a collaborator (404 for
    /// anyone else).
    pub fn member(endpoints: &Endpoints, account: &AccountRow, slug: &str) -> Result<Self> {
        let (endpoint, membership) = endpoints.member_row(account, slug)?;
        Ok(DeliveryViewer::of(&endpoint, &membership, account))
    }

    /// `account` acting on the delivery log of `slug` (retry, redeliver): its owner only (403
    /// `owner_only` for a collaborator, 404 for anyone else).
    pub fn owner(endpoints: &Endpoints, account: &AccountRow, slug: &str) -> Result<Self> {
        let endpoint = endpoints.owned_row(account, slug)?;
        Ok(DeliveryViewer::of(&endpoint, &Membership::Owner, account))
    }

    fn of(endpoint: &EndpointRow, membership: &Membership, account: &AccountRow) -> Self {
        DeliveryViewer {
            endpoint_id: endpoint.id,
            holder: match membership {
                Membership::Owner => KeyHolder::Owner,
                Membership::Collaborator(_) => KeyHolder::Collaborator(account.id),
            },
            reads_bodies: membership.permits(endpoint, Permission::Read).is_ok(),
        }
    }

    fn is_owner(&self) -> bool {
        self.holder == KeyHolder::Owner
    }

    /// The partition of the endpoint's deliveries in `environment`.
    pub fn partition(&self, environment: Environment) -> Partition {
        Partition::new(self.endpoint_id, environment)
    }

    fn partitions(&self) -> [Partition; 2] {
        [Environment::Sandbox, Environment::Production].map(|e| self.partition(e))
    }

    /// What this viewer may see of `row`: the one rule of the log (see the module's
    /// documentation).
    pub fn sight(&self, row: &DeliveryRow) -> Sight {
        let url_in_full =
            self.is_owner() || (row.kind == WebhookKind::Caller && row.sender == Some(self.holder));
        let url = match (url_in_full, row.kind) {
            (true, _) => Some(displayed_url(&row.url)),
            (false, WebhookKind::Caller) => origin(&row.url),
            (false, WebhookKind::Owner) => None,
        };
        Sight {
            url,
            url_in_full,
            body: self.reads_bodies,
        }
    }
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
    Cancelled,
}

impl ShownState {
    pub const ALL: [ShownState; 6] = [
        ShownState::Pending,
        ShownState::Failing,
        ShownState::Delivered,
        ShownState::GivenUp,
        ShownState::Skipped,
        ShownState::Cancelled,
    ];

    /// Its name in a filter parameter: `pending`, `failing`, `delivered`, `given_up`,
    /// `skipped`, `cancelled`.
    pub fn as_str(self) -> &'static str {
        match self {
            ShownState::Pending => "pending",
            ShownState::Failing => "failing",
            ShownState::Delivered => "delivered",
            ShownState::GivenUp => "given_up",
            ShownState::Skipped => "skipped",
            ShownState::Cancelled => "cancelled",
        }
    }

    fn of(row: &DeliveryRow) -> ShownState {
        match row.state {
            DeliveryState::Pending if row.attempts > 0 => ShownState::Failing,
            DeliveryState::Pending => ShownState::Pending,
            DeliveryState::Delivered => ShownState::Delivered,
            DeliveryState::GivenUp => ShownState::GivenUp,
            DeliveryState::Skipped => ShownState::Skipped,
            DeliveryState::Cancelled => ShownState::Cancelled,
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
    /// Part of the URL as the viewer is shown it (credentials masked), in any case.
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
                        reason: "it must be pending, failing, delivered, given_up, skipped or \
                                 cancelled"
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

    /// Whether `row` passes, its URL compared as `sight` shows it: a filter never finds
    /// what the viewer may not see.
    fn matches(&self, row: &DeliveryRow, sight: &Sight) -> bool {
        self.subscription
            .is_none_or(|id| row.owner_subscription() == Some(id))
            && self.state.is_none_or(|state| ShownState::of(row) == state)
            && self.kind.is_none_or(|kind| row.kind == kind)
            && self.url.as_deref().is_none_or(|part| {
                sight
                    .url
                    .as_ref()
                    .is_some_and(|url| url.to_lowercase().contains(part))
            })
    }
}

/// One delivery with its body and every attempt, oldest attempt first.
#[derive(Debug, Serialize)]
pub struct DeliveryDetail {
    #[serde(flatten)]
    pub delivery: DeliveryView,
    /// `None` when withheld from the viewer ([`Withheld::Body`]).
    pub body: Option<String>,
    pub attempt_log: Vec<AttemptView>,
}

#[derive(Debug, Serialize)]
pub struct AttemptView {
    pub attempt: u32,
    pub started_at: String,
    pub duration_ms: f64,
    /// As the delivery's (see [`DeliveryView::url`]).
    pub url: Option<String>,
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

/// `row` as `sight` shows it.
fn view(row: &DeliveryRow, sight: &Sight) -> DeliveryView {
    let shown = ShownState::of(row);
    DeliveryView {
        id: row.id,
        record_id: match row.test {
            true => RecordId(row.record_id).as_test_event(),
            false => RecordId(row.record_id).to_string(),
        },
        event: row.event_type(),
        environment: row.partition.environment().as_str(),
        kind: row.kind,
        subscription: row.owner_subscription().map(subscription_id),
        url: sight.url.clone(),
        state: row.state,
        failing: shown == ShownState::Failing,
        shown,
        redeliverable: can_redeliver(row),
        attempts: row.attempts,
        max_attempts: row.max_attempts,
        next_attempt_at: row.next_attempt_at.map(Timestamp::to_rfc3339),
        created_at: row.created_at.to_rfc3339(),
        finished_at: row.finished_at.map(Timestamp::to_rfc3339),
        withheld: sight.withheld(),
        erased: row.erased,
        test: row.test,
    }
}

/// Rows a filtered page reads at most before it returns what it found (with a cursor to go on
/// from): a subscription whose deliveries are rare costs each page a bounded read.
const FILTER_SCAN_LIMIT: usize = 10_000;

/// The deliveries of the viewer's endpoint in `environment` that pass `filter`, newest
/// first, as the viewer may see them. A page reads at most [`FILTER_SCAN_LIMIT`] deliveries,
/// so a rare match costs a bounded read; it then ends early, with a cursor to read on.
pub fn list(
    store: &dyn Store,
    viewer: &DeliveryViewer,
    environment: Environment,
    filter: &DeliveryFilter,
    limit: usize,
    cursor_text: Option<&str>,
) -> Result<DeliveryPage> {
    let partition = viewer.partition(environment);
    let mut position = match cursor_text {
        Some(text) => cursor::parse(CursorKind::Delivery, partition.raw(), text)?.tiebreak as u64,
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
            let sight = viewer.sight(&row);
            if filter.matches(&row, &sight) {
                rows.push(view(&row, &sight));
            }
        }
        if scanned >= FILTER_SCAN_LIMIT {
            break Some(position);
        }
    };
    let next_cursor = next.map(|last| {
        cursor::encode(
            CursorKind::Delivery,
            partition.raw(),
            Position {
                time: 0,
                tiebreak: u128::from(last),
            },
        )
    });
    Ok(DeliveryPage {
        data: rows,
        pagination: Pagination { next_cursor },
    })
}

/// The delivery `id` of one of `partitions` (the endpoint's two environments).
fn delivery_in(
    tx: &(impl ReadTx + ?Sized),
    partitions: [Partition; 2],
    id: u64,
) -> Result<DeliveryRow> {
    tx.delivery(id)?
        .filter(|row| partitions.contains(&row.partition))
        .ok_or(Error::NotFound(Missing::Delivery))
}

/// One delivery of the viewer's endpoint with every attempt, as the viewer may see it.
pub fn detail(store: &dyn Store, viewer: &DeliveryViewer, id: u64) -> Result<DeliveryDetail> {
    let snapshot = store.read()?;
    let row = delivery_in(snapshot.as_ref(), viewer.partitions(), id)?;
    let sight = viewer.sight(&row);
    let attempt_log = snapshot
        .delivery_attempts(id)?
        .into_iter()
        .map(|a| AttemptView {
            attempt: a.attempt,
            started_at: a.started_at.to_rfc3339(),
            duration_ms: a.duration_us as f64 / 1000.0,
            url: sight.show(&a.url),
            request_headers: a.request_headers,
            status: a.status,
            error: a.error,
            response_body: a.response_body.filter(|_| sight.body),
            outcome: a.outcome,
        })
        .collect();
    Ok(DeliveryDetail {
        delivery: view(&row, &sight),
        body: Some(row.body).filter(|_| sight.body && !row.erased),
        attempt_log,
    })
}

/// The viewer, if the owner (who alone may act on deliveries).
fn acting_owner(viewer: &DeliveryViewer) -> Result<&DeliveryViewer> {
    match viewer.is_owner() {
        true => Ok(viewer),
        false => Err(Error::OwnerOnly),
    }
}

/// Re-arms a given-up, skipped or cancelled delivery: due at once, with a fresh budget of attempts.
/// Owner only. Returns it.
pub fn redeliver(handles: &Handles, owner: &DeliveryViewer, id: u64) -> Result<DeliveryView> {
    let partitions = acting_owner(owner)?.partitions();
    let now = handles.now();
    let row = handles.write(|tx| {
        let mut row = delivery_in(tx, partitions, id)?;
        if !can_redeliver(&row) {
            return Err(Error::Conflict(
                "Only a given-up, skipped or cancelled delivery can be redelivered, never one \
                 whose record was erased, and never a test event."
                    .into(),
            ));
        }
        rearm(tx, &mut row, now)?;
        Ok(row)
    })?;
    Ok(view(&row, &owner.sight(&row)))
}

/// "Retry now": brings a pending delivery's next attempt forward to now (or leaves it when it
/// is due already). The attempt counts against the delivery's budget like any retry, so the
/// retry policy's number of attempts holds; a given-up or skipped delivery is redelivered
/// instead, with a fresh budget. The request is counted in the row: if an attempt is in
/// flight, its outcome then makes the next attempt due at once rather than on the schedule
/// (`AttemptOutcome::settle`). Owner only; audited as `delivery.retried`. Returns the
/// delivery.
pub fn retry_now(
    handles: &Handles,
    owner: &DeliveryViewer,
    actor: &AccountRow,
    id: u64,
) -> Result<DeliveryView> {
    let partitions = acting_owner(owner)?.partitions();
    let now = handles.now();
    let row = handles.write(|tx| {
        let mut row = delivery_in(tx, partitions, id)?;
        if row.state != DeliveryState::Pending {
            return Err(Error::Conflict(
                "Only a pending delivery can be retried now; redeliver a given-up, skipped or \
                 cancelled one."
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
            row.partition.endpoint(),
            actor,
            "delivery.retried",
            serde_json::json!({
                "delivery": row.id,
                "environment": row.partition.environment().as_str(),
                "attempts": row.attempts,
                "was_due_at": listed.map(Timestamp::to_rfc3339),
            }),
        )?;
        Ok(row)
    })?;
    Ok(view(&row, &owner.sight(&row)))
}

/// Whether `row` has ended without reaching its receiver (given up, skipped, or cancelled),
/// so that it can be sent again: not once its record was erased, since its body is gone, and
/// never a test event.
pub fn can_redeliver(row: &DeliveryRow) -> bool {
    matches!(
        row.state,
        DeliveryState::GivenUp | DeliveryState::Skipped | DeliveryState::Cancelled
    ) && !row.erased
        && !row.test
}

/// Makes `row` pending again in `tx`, due at `due` with a fresh budget of attempts.
pub fn rearm(tx: &mut dyn WriteTx, row: &mut DeliveryRow, due: Timestamp) -> Result<()> {
    let budget = max_attempts(row.partition.environment());
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

/// Cancels the pending deliveries of owner subscription `subscription` of `partition` in
/// `tx`, at `at`: each finished as `cancelled` and off the due list, so no dispatcher claims
/// it again (one in flight ends as `AttemptOutcome::apply` says). Returns how many.
pub fn cancel_pending(
    tx: &mut dyn WriteTx,
    partition: Partition,
    subscription: u32,
    at: Timestamp,
) -> Result<u64> {
    let mut cancelled = 0;
    for mut row in tx.pending_deliveries(partition)? {
        if row.owner_subscription() != Some(subscription) {
            continue;
        }
        if let Some(listed_at) = row.cancel(at) {
            tx.unlist_due(listed_at, row.id)?;
        }
        tx.put_delivery(&row)?;
        cancelled += 1;
    }
    Ok(cancelled)
}

/// How the deliveries of one partition made since a time have ended (the dashboard's
/// webhook success rate).
#[derive(Debug, Default, Serialize)]
pub struct Outcomes {
    pub delivered: u64,
    pub given_up: u64,
    pub pending: u64,
    pub skipped: u64,
    pub cancelled: u64,
    /// More deliveries were made in the period than were counted (the newest `cap`).
    pub capped: bool,
}

/// Deliveries read at a time while counting outcomes.
const OUTCOMES_PAGE: usize = 256;

/// Counts the outcomes of the deliveries of `partition` created at or after `since`, newest
/// first, looking at no more than `cap` of them so a busy month stays cheap to show.
pub fn outcomes_since(
    store: &dyn Store,
    partition: Partition,
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
            if row.test {
                // A test event says nothing of how the deliveries of writes go.
                before = row.id;
                continue;
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
                DeliveryState::Cancelled => outcomes.cancelled += 1,
            }
        }
        if last_page {
            return Ok(outcomes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::origin;

    #[test]
    fn an_origin_is_scheme_host_and_port_without_credentials() {
        assert_eq!(
            origin("https://user:s3cret@Hooks.Example.com:8443/in/abc?token=t").as_deref(),
            Some("https://hooks.example.com:8443")
        );
        assert_eq!(
            origin("http://[::1]/hook?x=1").as_deref(),
            Some("http://[::1]")
        );
        assert_eq!(origin("not a url"), None);
    }
}
