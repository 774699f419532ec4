//! Webhooks: the owner's settings, signing secrets, deliveries and their attempts.
//!
//! The dispatcher works through these traits inside its own transactions rather than through
//! store-level units: its scheduler reads the due list and the rows it claims from one snapshot
//! ([`WebhooksRead::due_deliveries`], [`WebhooksRead::deliveries`]), taken together with its
//! in-memory claims, and its result writer records a group of outcomes
//! ([`WebhooksWrite::record_outcomes`]) in the same transaction as the owners' failure e-mails
//! (`mail::enqueue` needs that [`crate::store::WriteTx`]), committed through the one
//! after-commit path.

use crate::core::clock::Timestamp;
use crate::store::{
    AttemptRow, DeliveryBrief, DeliveryRow, DeliveryState, Partition, StoreError,
    SubscriptionHealth, WebhookSecretRow, WebhookSettingsRow,
};

/// A pending delivery in the due list: when it is due, and what the dispatcher needs to pass
/// over it without reading its row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DueDelivery {
    pub due_at: Timestamp,
    pub id: u64,
    /// It was attempted before (the next attempt is a retry).
    pub retry: bool,
    /// The receiver its attempts count against: `scheme://host:port` of its URL.
    pub receiver: String,
}

impl DueDelivery {
    /// Its place in the due list, which is ordered by `(due_at, id)`.
    pub fn position(&self) -> (Timestamp, u64) {
        (self.due_at, self.id)
    }
}

/// The outcome of one attempt, as the dispatcher records it.
#[derive(Clone, Debug)]
pub struct AttemptOutcome {
    pub delivery_id: u64,
    /// The attempt as it went; `attempt.attempt` is its number.
    pub attempt: AttemptRow,
    pub next: AfterAttempt,
    /// The delivery's `retry_requests` in the row the attempt was made from.
    pub retry_requests: u32,
}

/// Where a delivery goes after an attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AfterAttempt {
    /// Delivered, finished at `at`.
    Delivered { at: Timestamp },
    /// Given up, finished at `at`.
    GivenUp { at: Timestamp },
    /// Still pending: due again at `at`, to `receiver` (see [`DueDelivery`]); the answer (or
    /// failure) came at `answered_at`.
    Retry {
        at: Timestamp,
        answered_at: Timestamp,
        receiver: String,
    },
}

/// What recording an attempt's outcome makes of its delivery.
#[derive(Debug, PartialEq, Eq)]
pub enum Settled<'a> {
    /// It ended, in this state, at this time.
    Finished(DeliveryState, Timestamp),
    /// It is due again at this time, listed under this receiver.
    Due(Timestamp, &'a str),
}

impl AttemptOutcome {
    /// The delivery's state machine, the one rule both backends follow: applies this outcome
    /// to `row` as stored when it is recorded and says where the delivery goes, or returns
    /// `None` and leaves `row` alone when the outcome does not apply (the delivery is no longer
    /// pending, or this attempt is not its next one: another node recorded it first). The
    /// backend then moves the row's place in its due list from the `next_attempt_at` it had to
    /// the one it has now, and stores the attempt.
    ///
    /// A delivery cancelled while this attempt was in flight keeps the attempt (it was sent)
    /// but not its sequel: it stays `cancelled`, never due again, unless the receiver took it
    /// (2xx), which makes it `delivered`, since a cancel cannot call a request back.
    pub fn apply(&self, row: &mut DeliveryRow) -> Option<Settled<'_>> {
        let number = self.attempt.attempt;
        if row.attempts.saturating_add(1) != number {
            return None;
        }
        match row.state {
            DeliveryState::Pending => {}
            DeliveryState::Cancelled => {
                row.attempts = number;
                if let AfterAttempt::Delivered { at } = self.next {
                    row.state = DeliveryState::Delivered;
                    row.finished_at = Some(at);
                }
                let finished_at = row.finished_at.unwrap_or(self.attempt.started_at);
                return Some(Settled::Finished(row.state, finished_at));
            }
            DeliveryState::Delivered | DeliveryState::GivenUp | DeliveryState::Skipped => {
                return None;
            }
        }
        row.attempts = number;
        let settled = self.settle(row);
        match settled {
            Settled::Finished(state, at) => {
                row.state = state;
                row.next_attempt_at = None;
                row.finished_at = Some(at);
            }
            Settled::Due(at, _) => row.next_attempt_at = Some(at),
        }
        Some(settled)
    }

    /// What this outcome makes of the delivery `row` as stored when it is recorded. A retry is
    /// due at the schedule's time, or at once (when the answer came) if "retry now" was asked
    /// for while the attempt was in flight (`row` counts a request the attempt's row did not),
    /// so that a request answered 200 is never dropped.
    fn settle(&self, row: &DeliveryRow) -> Settled<'_> {
        match &self.next {
            AfterAttempt::Delivered { at } => Settled::Finished(DeliveryState::Delivered, *at),
            AfterAttempt::GivenUp { at } => Settled::Finished(DeliveryState::GivenUp, *at),
            AfterAttempt::Retry {
                at,
                answered_at,
                receiver,
            } => {
                let asked_meanwhile = row.retry_requests != self.retry_requests;
                Settled::Due(if asked_meanwhile { *answered_at } else { *at }, receiver)
            }
        }
    }
}

pub trait WebhooksRead {
    /// The signing secret of one partition (endpoint and environment).
    fn webhook_secret(&self, partition: Partition) -> Result<Option<WebhookSecretRow>, StoreError>;

    /// The owner's webhook settings (subscriptions) of one partition.
    fn webhook_settings(
        &self,
        partition: Partition,
    ) -> Result<Option<WebhookSettingsRow>, StoreError>;

    fn delivery(&self, id: u64) -> Result<Option<DeliveryRow>, StoreError>;

    /// The deliveries with these ids that exist, in the order of `ids`.
    fn deliveries(&self, ids: &[u64]) -> Result<Vec<DeliveryRow>, StoreError>;

    /// [`WebhooksRead::delivery_page`] of the whole partition, reading of each delivery only
    /// what counting outcomes needs (a store may skip decoding the rest).
    fn delivery_briefs(
        &self,
        partition: Partition,
        before: u64,
        limit: usize,
    ) -> Result<Vec<DeliveryBrief>, StoreError> {
        Ok(self
            .delivery_page(partition, None, before, limit)?
            .iter()
            .map(DeliveryBrief::from)
            .collect())
    }

    /// The partition's deliveries (only those of `record` when given) with ids below
    /// `before`, newest first, at most `limit`.
    fn delivery_page(
        &self,
        partition: Partition,
        record: Option<u128>,
        before: u64,
        limit: usize,
    ) -> Result<Vec<DeliveryRow>, StoreError>;

    /// The partition's deliveries with ids above `after`, oldest first, at most `limit`.
    fn deliveries_after(
        &self,
        partition: Partition,
        after: u64,
        limit: usize,
    ) -> Result<Vec<DeliveryRow>, StoreError>;

    /// The webhook settings that have a recovery running ([`WebhookSettingsRow::recovering`]),
    /// with their partitions.
    fn recovering_settings(&self) -> Result<Vec<(Partition, WebhookSettingsRow)>, StoreError>;

    /// The partition's pending deliveries (those in the due list, in flight or not), in id
    /// order.
    fn pending_deliveries(&self, partition: Partition) -> Result<Vec<DeliveryRow>, StoreError>;

    /// Every attempt of a delivery, oldest first.
    fn delivery_attempts(&self, id: u64) -> Result<Vec<AttemptRow>, StoreError>;

    /// The due list up to `now`, in its order, starting just after `after` when given and
    /// going on from its start up to `after` (inclusive) once past `now`; at most `limit`.
    fn due_deliveries(
        &self,
        now: Timestamp,
        after: Option<(Timestamp, u64)>,
        limit: usize,
    ) -> Result<Vec<DueDelivery>, StoreError>;

    /// Whether the owner of `endpoint_id` was e-mailed about a given-up delivery on `day`
    /// (days since 1970-01-01, UTC).
    fn failure_mailed(&self, endpoint_id: u64, day: u64) -> Result<bool, StoreError>;
}

pub trait WebhooksWrite {
    fn put_webhook_secret(
        &mut self,
        partition: Partition,
        row: &WebhookSecretRow,
    ) -> Result<(), StoreError>;

    /// Removes the signing secret of a partition; whether there was one.
    fn delete_webhook_secret(&mut self, partition: Partition) -> Result<bool, StoreError>;

    /// Writes the settings of a partition; reports `recoveries` when a recovery of them is
    /// running.
    fn put_webhook_settings(
        &mut self,
        partition: Partition,
        row: &WebhookSettingsRow,
    ) -> Result<(), StoreError>;

    /// Removes the owner's webhook settings of a partition; whether there were any.
    fn delete_webhook_settings(&mut self, partition: Partition) -> Result<bool, StoreError>;

    /// Replaces the health of some of a partition's subscriptions (`(id, health)`; an id the
    /// settings no longer have is ignored), leaving the rest of the settings as they are.
    /// The dispatcher's result writer notes every attempt's health this way: on PostgreSQL the
    /// health is kept apart from the settings, which every ingest batch reads, so that noting
    /// it does not make each batch and each result write a serialisation conflict.
    fn put_subscription_health(
        &mut self,
        partition: Partition,
        health: &[(u32, SubscriptionHealth)],
    ) -> Result<(), StoreError>;

    /// Writes a delivery's row, listed in its partition's and its record's delivery log (a
    /// delivery keeps its partition and record; its place in the due list is
    /// [`WebhooksWrite::put_due`]'s).
    fn put_delivery(&mut self, row: &DeliveryRow) -> Result<(), StoreError>;

    /// A new delivery id, from the sequence the ingest batch takes its deliveries' ids from.
    fn next_delivery_id(&mut self) -> Result<u64, StoreError>;

    /// Stores one attempt of delivery `delivery_id`: a test event's (the dispatcher's attempts
    /// go with their outcomes, [`WebhooksWrite::record_outcomes`]).
    fn put_attempt(&mut self, delivery_id: u64, attempt: &AttemptRow) -> Result<(), StoreError>;

    /// Lists a delivery as due; reports `deliveries_due`.
    fn put_due(&mut self, due: &DueDelivery) -> Result<(), StoreError>;

    /// Takes delivery `id`, listed at `at`, off the due list (it is no longer pending). On a
    /// shared store a node's claim on it stays until that node records its attempt's outcome.
    fn unlist_due(&mut self, at: Timestamp, id: u64) -> Result<(), StoreError>;

    /// Moves a pending delivery listed at `from` (its `next_attempt_at`) to `due`, so it is
    /// listed once; reports `deliveries_due`.
    fn move_due(&mut self, from: Option<Timestamp>, due: &DueDelivery) -> Result<(), StoreError>;

    /// Records a group of attempts: each attempt's row, its delivery's attempts, state and
    /// next attempt time, and its place in the due list (removed, or moved to the retry).
    /// An outcome whose delivery is no longer pending, or whose attempt is not the next one,
    /// is skipped. Returns the deliveries this group gave up; reports `deliveries_due` when a
    /// retry was listed.
    fn record_outcomes(
        &mut self,
        outcomes: &[AttemptOutcome],
    ) -> Result<Vec<DeliveryRow>, StoreError>;

    /// Notes that the owner of `endpoint_id` was e-mailed on `day` (see
    /// [`WebhooksRead::failure_mailed`]).
    fn insert_failure_mail(&mut self, endpoint_id: u64, day: u64) -> Result<(), StoreError>;
}
