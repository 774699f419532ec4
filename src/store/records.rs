//! Records: the data operations' rows (records, idempotency keys), the batch apply of the
//! ingest writer, and the record scans of list, poll and retention.
//!
//! A record id begins with its created_at in microseconds ([`RecordId`]), so id order is
//! creation order and every page is a range of ids of one partition.
//!
//! Every applied create, replace and delete is appended to the change log in the same commit
//! (the search index follows it, see `store::changes`): only the store appends to it, in
//! [`RecordsStore::apply_batch`] and [`RecordsStore::purge_partition_before`].

use std::ops::{Bound, ControlFlow};
use std::time::Duration;

use crate::core::clock::Timestamp;
use crate::core::ids::RecordId;
use crate::core::text::{fold_case, payload_text};
use crate::store::{
    Effects, IdempotencyRow, Partition, StoreError, WebhookKind, WebhookSettingsRow,
};

/// A stored record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordRow {
    pub id: RecordId,
    /// When it was created or last replaced.
    pub updated_at: Timestamp,
    /// Its payload text: normalised JSON (see `domain::records`).
    pub payload: Vec<u8>,
}

/// The text a store that searches its records itself matches queries against: the folded
/// payload text, exactly as search folds it (`domain::search`), with NUL as a space (a
/// database's text cannot hold NUL; search checks every candidate against the payload itself,
/// so this only widens the candidates).
pub fn searchable_text(payload: &[u8]) -> String {
    let folded = fold_case(&payload_text(payload));
    if folded.contains('\0') {
        folded.replace('\0', " ")
    } else {
        folded
    }
}

/// A stored record as a scan hands it over, borrowed from the store (a page is written out
/// without copying each payload first).
#[derive(Clone, Copy, Debug)]
pub struct RecordRef<'a> {
    pub id: RecordId,
    pub updated_at: Timestamp,
    pub payload: &'a [u8],
}

/// The order of a scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScanOrder {
    OldestFirst,
    NewestFirst,
}

/// One data write.
#[derive(Debug)]
pub enum RecordWrite {
    Create {
        partition: Partition,
        /// One record for a POST, up to a batch's 1,000 for a batch, in the order they were
        /// sent. They are stored together or not at all, under one Idempotency-Key.
        records: Vec<NewRecord>,
        idempotency: Option<IdempotencyClaim>,
    },
    Replace {
        partition: Partition,
        id: RecordId,
        updated_at: Timestamp,
        payload: Vec<u8>,
    },
    Delete {
        partition: Partition,
        id: RecordId,
        /// When the delete was received (its event's time).
        at: Timestamp,
    },
    /// One step of an erasure (`domain::erasures`): removes those of the records `ids` that
    /// still exist, with the copies of their payloads the store keeps beside them (their
    /// webhook deliveries' bodies and their attempts' response bodies, see
    /// `DeliveryRow::erase`), adds them to the erasure's `erased` and moves its
    /// `resume_below`, all in one commit. With `notify` each removal is a delete like any
    /// other (its event and its `record.deleted` webhooks, made after the old deliveries are
    /// erased); without, only the change log records it (the search index follows that).
    Erase {
        partition: Partition,
        ids: Vec<RecordId>,
        at: Timestamp,
        notify: bool,
        erasure: u64,
        resume_below: u128,
    },
}

impl RecordWrite {
    /// How many records the write stores or changes: what the ingest writer's limit on one
    /// transaction counts.
    pub fn record_count(&self) -> usize {
        match self {
            RecordWrite::Create { records, .. } => records.len(),
            RecordWrite::Erase { ids, .. } => ids.len(),
            RecordWrite::Replace { .. } | RecordWrite::Delete { .. } => 1,
        }
    }

    /// How many bytes of payload the write stores.
    pub fn payload_bytes(&self) -> usize {
        match self {
            RecordWrite::Create { records, .. } => records.iter().map(|r| r.payload.len()).sum(),
            RecordWrite::Replace { payload, .. } => payload.len(),
            RecordWrite::Delete { .. } | RecordWrite::Erase { .. } => 0,
        }
    }

    /// The partition the write is to.
    pub fn partition(&self) -> Partition {
        match self {
            RecordWrite::Create { partition, .. }
            | RecordWrite::Replace { partition, .. }
            | RecordWrite::Delete { partition, .. }
            | RecordWrite::Erase { partition, .. } => *partition,
        }
    }
}

/// A record a create stores.
#[derive(Debug)]
pub struct NewRecord {
    /// Carries the record's created_at.
    pub id: RecordId,
    /// Normalised payload JSON.
    pub payload: Vec<u8>,
}

/// An `Idempotency-Key` sent with a create.
#[derive(Debug)]
pub struct IdempotencyClaim {
    pub key: String,
    /// What the claim's row keeps of what was sent (the normalised payload of a POST, the
    /// payloads of a batch): [`KEYED_HASH_PREFIX`] and the hex of a keyed hash of it
    /// (`domain::records::idempotency_claim` computes it; a POST's and a batch's never match).
    /// Keyed, so that a row does not betray a guessable payload, such as an e-mail address,
    /// once its record is erased.
    pub payload_hash: String,
    /// The plain SHA-256 (hex) of what was sent, which rows written by earlier versions hold
    /// (for at most their ttl after an upgrade): compared with such a row only, never stored.
    pub legacy_payload_hash: String,
    /// How long a claim holds: an older one is forgotten and the create goes ahead.
    pub ttl: Duration,
}

/// Begins the payload hash of an idempotency row that holds a keyed hash; a row without it
/// holds a plain SHA-256 ([`IdempotencyClaim::legacy_payload_hash`]).
pub const KEYED_HASH_PREFIX: &str = "k1:";

impl IdempotencyClaim {
    /// The Idempotency-Key rule, the one both backends apply: the claim `held` for this key
    /// (if any) answers a create made at `at` while it is fresh: with the original outcome for
    /// the same payload, with a conflict for another. `None`: no fresh claim, the create goes
    /// ahead and its claim replaces an expired one. A row of an earlier version, with a plain
    /// hash, is compared with the plain hash.
    pub fn answer(
        &self,
        held: Option<&IdempotencyRow>,
        at: Timestamp,
    ) -> Result<Option<WriteOutcome>, StoreError> {
        let Some(held) = held.filter(|held| held.created_at.plus(self.ttl) > at) else {
            return Ok(None);
        };
        let sent = if held.payload_hash.starts_with(KEYED_HASH_PREFIX) {
            &self.payload_hash
        } else {
            &self.legacy_payload_hash
        };
        if held.payload_hash != *sent {
            return Ok(Some(WriteOutcome::IdempotencyConflict));
        }
        let ids = held
            .record_id
            .split(',')
            .map(|id| {
                RecordId::parse(id)
                    .ok_or_else(|| StoreError::Corrupt("record id in an idempotency row".into()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Some(WriteOutcome::Replayed { ids }))
    }

    /// The claim a create with this key that went ahead as the records `ids` at `at` leaves
    /// (their ids, comma-separated).
    pub fn held_for(&self, ids: &[RecordId], at: Timestamp) -> IdempotencyRow {
        let mut record_id = String::with_capacity(ids.len() * 31);
        for (n, id) in ids.iter().enumerate() {
            if n > 0 {
                record_id.push(',');
            }
            id.push_to(&mut record_id);
        }
        IdempotencyRow {
            payload_hash: self.payload_hash.clone(),
            record_id,
            created_at: at,
        }
    }
}

/// What a committed batch did with one of its writes. A refused write (the last two) changed
/// nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The records of a create, in the order sent; each id carries its created_at.
    Created {
        ids: Vec<RecordId>,
    },
    /// A retry with a known Idempotency-Key: the original answer, nothing new written.
    Replayed {
        ids: Vec<RecordId>,
    },
    Replaced,
    Deleted,
    /// An erasure's step: how many of its records existed and were removed.
    Erased {
        count: u64,
    },
    /// A replace or delete of a record that does not exist.
    NotFound,
    /// A known Idempotency-Key sent with a different payload.
    IdempotencyConflict,
}

/// What an applied write changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeKind {
    Created,
    Replaced,
    Deleted,
}

/// An applied write, as its webhooks and its event report it.
#[derive(Clone, Copy, Debug)]
pub struct Change<'a> {
    pub partition: Partition,
    pub id: RecordId,
    pub kind: ChangeKind,
    /// When the write was received.
    pub at: Timestamp,
    /// The payload after the write (`None` for a delete).
    pub payload: Option<&'a [u8]>,
}

impl<'a> Change<'a> {
    /// What `write` changed, given its `outcome`, one change per record in the order sent:
    /// none for a refused or replayed write, nor for an erasure's step, whose store reports
    /// each removal itself ([`Change::erased`]) since only it knows which records existed.
    pub fn of(write: &'a RecordWrite, outcome: &WriteOutcome) -> impl Iterator<Item = Change<'a>> {
        let partition = write.partition();
        let (changed, created): (Option<Change<'a>>, &'a [NewRecord]) = match (write, outcome) {
            (RecordWrite::Create { records, .. }, WriteOutcome::Created { .. }) => (None, records),
            (
                RecordWrite::Replace {
                    id,
                    updated_at,
                    payload,
                    ..
                },
                WriteOutcome::Replaced,
            ) => (
                Some(Change {
                    partition,
                    id: *id,
                    kind: ChangeKind::Replaced,
                    at: *updated_at,
                    payload: Some(payload.as_slice()),
                }),
                &[],
            ),
            (RecordWrite::Delete { id, at, .. }, WriteOutcome::Deleted) => (
                Some(Change {
                    partition,
                    id: *id,
                    kind: ChangeKind::Deleted,
                    at: *at,
                    payload: None,
                }),
                &[],
            ),
            _ => (None, &[]),
        };
        changed
            .into_iter()
            .chain(created.iter().map(move |record| Change {
                partition,
                id: record.id,
                kind: ChangeKind::Created,
                at: record.id.created_at(),
                payload: Some(record.payload.as_slice()),
            }))
    }
}

impl Change<'static> {
    /// The delete an erasure's step makes of the record `id` of `partition` at `at`, when it
    /// notifies.
    pub fn erased(partition: Partition, id: RecordId, at: Timestamp) -> Change<'static> {
        Change {
            partition,
            id,
            kind: ChangeKind::Deleted,
            at,
            payload: None,
        }
    }
}

/// A webhook delivery to create with a change: pending, its first attempt due at once.
#[derive(Clone, Debug)]
pub struct NewDelivery {
    pub kind: WebhookKind,
    /// The event its body announces.
    pub event: crate::store::EventType,
    /// The owner subscription it is for (`None` for a caller webhook's).
    pub subscription: Option<u32>,
    /// Written as skipped (its subscription is disabled): never due, never attempted unless a
    /// recovery schedules it.
    pub skipped: bool,
    pub url: String,
    /// The receiver its attempts count against (see `webhooks::DueDelivery`).
    pub receiver: String,
    pub auth_header: Option<String>,
    pub auth_value_sealed: Option<Vec<u8>>,
    /// The finished JSON body.
    pub body: String,
    /// Whose key asked for a caller webhook (see `DeliveryRow::sender`).
    pub sender: Option<crate::store::KeyHolder>,
    /// The write's `traceparent` (see `DeliveryRow::trace`).
    pub trace: Option<String>,
    pub max_attempts: u32,
    /// When the write was received: the delivery's creation and first due time.
    pub created_at: Timestamp,
}

impl NewDelivery {
    /// Its stored row under `id`, for the write to `record_id` of `partition`: pending, due at
    /// its creation (or skipped).
    pub fn into_row(
        self,
        id: u64,
        partition: Partition,
        record_id: RecordId,
    ) -> crate::store::DeliveryRow {
        crate::store::DeliveryRow {
            id,
            partition,
            record_id: record_id.0,
            kind: self.kind,
            event: Some(self.event),
            subscription: self.subscription,
            url: self.url,
            auth_header: self.auth_header,
            auth_value_sealed: self.auth_value_sealed,
            body: self.body,
            sender: self.sender,
            trace: self.trace,
            state: match self.skipped {
                true => crate::store::DeliveryState::Skipped,
                false => crate::store::DeliveryState::Pending,
            },
            attempts: 0,
            max_attempts: self.max_attempts,
            next_attempt_at: Some(self.created_at).filter(|_| !self.skipped),
            created_at: self.created_at,
            finished_at: None,
            retry_requests: 0,
            erased: false,
            test: false,
        }
    }
}

/// Decides the webhook deliveries of an applied write: which receivers, and the body they get.
///
/// That is domain policy (`domain::webhooks::deliveries`), while the delivery rows must be
/// written in the commit of the write itself, so an acknowledged write never loses its
/// webhooks. The store therefore asks this, per applied write, inside the batch; it must only
/// compute (the batch may be applied again by a backend that retries it).
pub trait DeliveryPlanner {
    /// The deliveries of `change`, given the owner's webhook settings of its partition.
    fn deliveries(
        &self,
        change: &Change<'_>,
        settings: Option<&WebhookSettingsRow>,
    ) -> Result<Vec<NewDelivery>, StoreError>;
}

/// A planner that makes no deliveries: for tests of the batch apply that are not about
/// webhooks.
#[cfg(test)]
pub struct NoDeliveries;

#[cfg(test)]
impl DeliveryPlanner for NoDeliveries {
    fn deliveries(
        &self,
        _: &Change<'_>,
        _: Option<&WebhookSettingsRow>,
    ) -> Result<Vec<NewDelivery>, StoreError> {
        Ok(Vec::new())
    }
}

/// `writes` as a batch that makes no deliveries (tests).
#[cfg(test)]
pub fn plain_batch(writes: &[RecordWrite]) -> Vec<BatchWrite<'_>> {
    writes
        .iter()
        .map(|write| BatchWrite {
            write,
            webhooks: &NoDeliveries,
        })
        .collect()
}

/// One write of a batch with what decides its webhooks.
#[derive(Clone, Copy)]
pub struct BatchWrite<'a> {
    pub write: &'a RecordWrite,
    pub webhooks: &'a dyn DeliveryPlanner,
}

/// What a committed batch did: one outcome per write, in order, and what the commit requires
/// (`deliveries_due` when it created webhook deliveries).
#[derive(Debug)]
pub struct AppliedBatch {
    pub outcomes: Vec<WriteOutcome>,
    pub effects: Effects,
}

pub trait RecordsRead {
    /// The record `id` of `partition`.
    fn record(&self, partition: Partition, id: RecordId) -> Result<Option<RecordRow>, StoreError>;

    /// Hands the records of `partition` whose ids lie within `ids` to `visit`, in `order`, at
    /// most `limit` of them; returns whether another record lies within `ids` after them.
    fn record_page(
        &self,
        partition: Partition,
        ids: (Bound<u128>, Bound<u128>),
        order: ScanOrder,
        limit: usize,
        visit: &mut dyn FnMut(RecordRef<'_>) -> Result<(), StoreError>,
    ) -> Result<bool, StoreError>;

    /// Every partition holding at least one record, in ascending order.
    fn record_partitions(&self) -> Result<Vec<Partition>, StoreError>;

    // Search's reads (`domain::search`): a walk or a check of candidates examines many
    // records and keeps few, so each record is shown to a visitor where it is stored, to be
    // tested in place and copied only if kept, and the visitor can stop the scan.

    /// Shows the records of `partition` with ids in `[lower, upper]` to `visit`, newest first,
    /// until it breaks.
    fn visit_newest_first(
        &self,
        partition: Partition,
        lower: u128,
        upper: u128,
        visit: &mut SearchVisitor<'_>,
    ) -> Result<(), StoreError>;

    /// Shows those of `ids` that are records of `partition` to `visit`, in the order given,
    /// until it breaks.
    fn visit_records(
        &self,
        partition: Partition,
        ids: &[u128],
        visit: &mut SearchVisitor<'_>,
    ) -> Result<(), StoreError>;
}

/// How a store's own text search ended (see [`TextSearch`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextSearchEnd {
    /// Every candidate in the range was shown, or the visitor broke.
    Done,
    /// The query took longer than a search may: the caller falls back to a bounded walk.
    TooSlow,
}

/// A store that finds the records containing a text itself (PostgreSQL's trigram index over
/// the folded payload text), in the same snapshot as the other reads of its transaction.
pub trait TextSearch {
    /// Shows the records of `partition` with ids in `[lower, upper]` whose folded payload text
    /// may contain `folded_q` to `visit`, newest first, until it breaks. A store may show more
    /// than the matches (the visitor checks each), never fewer.
    fn search_text(
        &self,
        partition: Partition,
        folded_q: &str,
        lower: u128,
        upper: u128,
        visit: &mut SearchVisitor<'_>,
    ) -> Result<TextSearchEnd, StoreError>;
}

/// A visitor of search's reads: a record's id, updated_at and payload, borrowed for the call;
/// it answers whether to go on.
pub type SearchVisitor<'v> = dyn FnMut(u128, Timestamp, &[u8]) -> ControlFlow<()> + 'v;

/// Units of work of their own durable transaction.
pub trait RecordsStore {
    /// Applies `writes` in one durable transaction: the records, their idempotency claims,
    /// their change-log entries and their webhook deliveries. The outer error means nothing
    /// was written; each write's outcome (refusals included) is in the [`AppliedBatch`].
    fn apply_batch(&self, writes: &[BatchWrite<'_>]) -> Result<AppliedBatch, StoreError>;

    /// Deletes at most `limit` records of `partition` with ids below `below`, oldest first,
    /// logging each delete in the change log; returns how many.
    fn purge_partition_before(
        &self,
        partition: Partition,
        below: u128,
        limit: usize,
    ) -> Result<usize, StoreError>;

    /// Forgets at most `limit` Idempotency-Key claims made before `cutoff`; returns how many.
    fn purge_idempotency_before(
        &self,
        cutoff: Timestamp,
        limit: usize,
    ) -> Result<usize, StoreError>;
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{IdempotencyClaim, KEYED_HASH_PREFIX, WriteOutcome};
    use crate::core::clock::Timestamp;
    use crate::core::ids::RecordId;
    use crate::store::IdempotencyRow;

    const SECOND: i64 = 1_000_000;

    /// The claim of a payload `sent`: stand-ins for its keyed and its plain hash.
    fn claim(sent: &str) -> IdempotencyClaim {
        IdempotencyClaim {
            key: "k".into(),
            payload_hash: format!("{KEYED_HASH_PREFIX}keyed {sent}"),
            legacy_payload_hash: format!("plain {sent}"),
            ttl: Duration::from_secs(60),
        }
    }

    #[test]
    fn a_fresh_claim_answers_a_create_and_an_expired_one_lets_it_go_ahead() {
        let at = Timestamp(100 * SECOND);
        for ids in [vec![RecordId::generate(at)], RecordId::generate_run(at, 3)] {
            let held = claim("h1").held_for(&ids, at);
            assert_eq!(claim("h1").answer(None, at).unwrap(), None, "no claim");
            assert_eq!(
                claim("h1")
                    .answer(Some(&held), Timestamp(159 * SECOND))
                    .unwrap(),
                Some(WriteOutcome::Replayed { ids: ids.clone() }),
                "the same payload within the ttl: the original answer"
            );
            assert_eq!(
                claim("h2")
                    .answer(Some(&held), Timestamp(159 * SECOND))
                    .unwrap(),
                Some(WriteOutcome::IdempotencyConflict),
                "another payload within the ttl"
            );
            for payload in ["h1", "h2"] {
                assert_eq!(
                    claim(payload)
                        .answer(Some(&held), Timestamp(160 * SECOND))
                        .unwrap(),
                    None,
                    "expired at exactly the ttl"
                );
            }
            let corrupt = IdempotencyRow {
                record_id: format!("{},not an id", ids[0]),
                ..held
            };
            assert!(claim("h1").answer(Some(&corrupt), at).is_err());
        }
    }

    #[test]
    fn a_claim_keeps_the_keyed_hash_and_judges_a_legacy_row_by_the_plain_one() {
        let at = Timestamp(100 * SECOND);
        let ids = vec![RecordId::generate(at)];
        let held = claim("h1").held_for(&ids, at);
        assert_eq!(
            held.payload_hash,
            claim("h1").payload_hash,
            "the keyed hash"
        );
        // A row an earlier version wrote holds the plain hash; it answers until it expires.
        let legacy = IdempotencyRow {
            payload_hash: claim("h1").legacy_payload_hash,
            ..held.clone()
        };
        let later = Timestamp(159 * SECOND);
        assert_eq!(
            claim("h1").answer(Some(&legacy), later).unwrap(),
            Some(WriteOutcome::Replayed { ids: ids.clone() }),
            "the same payload"
        );
        assert_eq!(
            claim("h2").answer(Some(&legacy), later).unwrap(),
            Some(WriteOutcome::IdempotencyConflict),
            "another payload"
        );
        assert_eq!(
            claim("h1")
                .answer(Some(&legacy), Timestamp(160 * SECOND))
                .unwrap(),
            None,
            "expired"
        );
        // A keyed row is compared with the keyed hash only.
        let plain_as_keyed = IdempotencyClaim {
            legacy_payload_hash: held.payload_hash.clone(),
            ..claim("h2")
        };
        assert_eq!(
            plain_as_keyed.answer(Some(&held), later).unwrap(),
            Some(WriteOutcome::IdempotencyConflict)
        );
    }
}
