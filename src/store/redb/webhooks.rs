//! [`WebhooksRead`] and [`WebhooksWrite`] on redb.

use std::ops::Bound;

use redb::{ReadableTable, Table};

use super::deliveries::NEXT_DELIVERY_ID;
use super::tx::{RedbWrite, Tables};
use super::{
    DELIVERIES, DELIVERIES_DUE, DELIVERY_ATTEMPTS, FAILURE_MAILS, PARTITION_DELIVERIES,
    RECORD_DELIVERIES, WEBHOOK_SECRETS, WEBHOOK_SETTINGS, from_json, next_id, to_json,
};
use crate::core::clock::Timestamp;
use crate::store::webhooks::{AttemptOutcome, DueDelivery, Settled, WebhooksRead, WebhooksWrite};
use crate::store::{
    AttemptRow, DeliveryBrief, DeliveryRow, DeliveryState, Partition, StoreError,
    SubscriptionHealth, WebhookSecretRow, WebhookSettingsRow, time_from_key, time_key,
};

/// A `DELIVERIES_DUE` key: `(due_at_us, delivery id)`.
type DueKey = (u64, u64);

pub(super) fn due_key((due_at, id): (Timestamp, u64)) -> DueKey {
    (time_key(due_at), id)
}

/// Lists a delivery in the due list (`DELIVERIES_DUE`), with what the dispatcher needs to pass
/// over it without reading its row: every pending delivery is listed by this one function.
pub(super) fn list_due(
    due: &mut Table<'_, DueKey, (bool, &'static str)>,
    entry: &DueDelivery,
) -> Result<(), StoreError> {
    due.insert(
        due_key(entry.position()),
        (entry.retry, entry.receiver.as_str()),
    )?;
    Ok(())
}

impl<T: Tables> WebhooksRead for T {
    fn webhook_secret(&self, partition: Partition) -> Result<Option<WebhookSecretRow>, StoreError> {
        match self.open(WEBHOOK_SECRETS)?.get(partition.raw())? {
            Some(value) => Ok(Some(from_json(value.value())?)),
            None => Ok(None),
        }
    }

    fn webhook_settings(
        &self,
        partition: Partition,
    ) -> Result<Option<WebhookSettingsRow>, StoreError> {
        match self.open(WEBHOOK_SETTINGS)?.get(partition.raw())? {
            Some(value) => Ok(Some(from_json(value.value())?)),
            None => Ok(None),
        }
    }

    fn delivery(&self, id: u64) -> Result<Option<DeliveryRow>, StoreError> {
        Ok(self.deliveries(&[id])?.pop())
    }

    fn deliveries(&self, ids: &[u64]) -> Result<Vec<DeliveryRow>, StoreError> {
        let table = self.open(DELIVERIES)?;
        let mut rows = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(value) = table.get(*id)? {
                rows.push(from_json(value.value())?);
            }
        }
        Ok(rows)
    }

    fn delivery_briefs(
        &self,
        partition: Partition,
        before: u64,
        limit: usize,
    ) -> Result<Vec<DeliveryBrief>, StoreError> {
        let index = self.open(PARTITION_DELIVERIES)?;
        let table = self.open(DELIVERIES)?;
        let mut briefs = Vec::with_capacity(limit);
        for entry in index
            .range((partition.raw(), 0)..(partition.raw(), before))?
            .rev()
        {
            if briefs.len() == limit {
                break;
            }
            let id = entry?.0.value().1;
            if let Some(value) = table.get(id)? {
                // Only three fields are decoded; the body and the rest are skipped over.
                briefs.push(from_json(value.value())?);
            }
        }
        Ok(briefs)
    }

    fn delivery_page(
        &self,
        partition: Partition,
        record: Option<u128>,
        before: u64,
        limit: usize,
    ) -> Result<Vec<DeliveryRow>, StoreError> {
        let mut ids = Vec::with_capacity(limit);
        match record {
            None => {
                let index = self.open(PARTITION_DELIVERIES)?;
                for entry in index
                    .range((partition.raw(), 0)..(partition.raw(), before))?
                    .rev()
                {
                    if ids.len() == limit {
                        break;
                    }
                    ids.push(entry?.0.value().1);
                }
            }
            Some(record) => {
                let index = self.open(RECORD_DELIVERIES)?;
                let range = (partition.raw(), record, 0)..(partition.raw(), record, before);
                for entry in index.range(range)?.rev() {
                    if ids.len() == limit {
                        break;
                    }
                    ids.push(entry?.0.value().2);
                }
            }
        }
        self.deliveries(&ids)
    }

    fn deliveries_after(
        &self,
        partition: Partition,
        after: u64,
        limit: usize,
    ) -> Result<Vec<DeliveryRow>, StoreError> {
        let index = self.open(PARTITION_DELIVERIES)?;
        let mut ids = Vec::with_capacity(limit);
        for entry in
            index.range((partition.raw(), after.saturating_add(1))..=(partition.raw(), u64::MAX))?
        {
            if ids.len() == limit {
                break;
            }
            ids.push(entry?.0.value().1);
        }
        self.deliveries(&ids)
    }

    fn recovering_settings(&self) -> Result<Vec<(Partition, WebhookSettingsRow)>, StoreError> {
        let mut out = Vec::new();
        for entry in self.open(WEBHOOK_SETTINGS)?.iter()? {
            let (partition, value) = entry?;
            let settings: WebhookSettingsRow = from_json(value.value())?;
            if settings.recovering() {
                out.push((Partition::from_raw(partition.value()), settings));
            }
        }
        Ok(out)
    }

    fn pending_deliveries(&self, partition: Partition) -> Result<Vec<DeliveryRow>, StoreError> {
        // The due list holds every pending delivery, and none other: usually far fewer than
        // the partition's delivery log.
        let mut ids = Vec::new();
        for entry in self.open(DELIVERIES_DUE)?.iter()? {
            ids.push(entry?.0.value().1);
        }
        ids.sort_unstable();
        let mut rows = self.deliveries(&ids)?;
        rows.retain(|row| row.partition == partition && row.state == DeliveryState::Pending);
        Ok(rows)
    }

    fn delivery_attempts(&self, id: u64) -> Result<Vec<AttemptRow>, StoreError> {
        let table = self.open(DELIVERY_ATTEMPTS)?;
        let mut attempts = Vec::new();
        for entry in table.range((id, 0)..=(id, u32::MAX))? {
            attempts.push(from_json(entry?.1.value())?);
        }
        Ok(attempts)
    }

    fn due_deliveries(
        &self,
        now: Timestamp,
        after: Option<(Timestamp, u64)>,
        limit: usize,
    ) -> Result<Vec<DueDelivery>, StoreError> {
        let due = self.open(DELIVERIES_DUE)?;
        let last_due = (time_key(now), u64::MAX);
        let entries = match after.map(due_key) {
            Some(after) if after < last_due => due
                .range((Bound::Excluded(after), Bound::Included(last_due)))?
                .chain(due.range(..=after)?),
            // The empty second range only gives both arms one type.
            _ => due.range(..=last_due)?.chain(due.range(..(0, 0))?),
        };
        let mut out = Vec::new();
        for entry in entries.take(limit) {
            let (key, value) = entry?;
            let ((due_at, id), (retry, receiver)) = (key.value(), value.value());
            out.push(DueDelivery {
                due_at: time_from_key(due_at),
                id,
                retry,
                receiver: receiver.to_string(),
            });
        }
        Ok(out)
    }

    fn failure_mailed(&self, endpoint_id: u64, day: u64) -> Result<bool, StoreError> {
        Ok(self.open(FAILURE_MAILS)?.get((endpoint_id, day))?.is_some())
    }
}

impl WebhooksWrite for RedbWrite<'_> {
    fn put_webhook_secret(
        &mut self,
        partition: Partition,
        row: &WebhookSecretRow,
    ) -> Result<(), StoreError> {
        self.table(WEBHOOK_SECRETS)?
            .insert(partition.raw(), to_json(row)?.as_slice())?;
        Ok(())
    }

    fn delete_webhook_secret(&mut self, partition: Partition) -> Result<bool, StoreError> {
        Ok(self
            .table(WEBHOOK_SECRETS)?
            .remove(partition.raw())?
            .is_some())
    }

    fn put_webhook_settings(
        &mut self,
        partition: Partition,
        row: &WebhookSettingsRow,
    ) -> Result<(), StoreError> {
        self.table(WEBHOOK_SETTINGS)?
            .insert(partition.raw(), to_json(row)?.as_slice())?;
        self.effects.recoveries |= row.recovering();
        Ok(())
    }

    fn delete_webhook_settings(&mut self, partition: Partition) -> Result<bool, StoreError> {
        Ok(self
            .table(WEBHOOK_SETTINGS)?
            .remove(partition.raw())?
            .is_some())
    }

    fn put_subscription_health(
        &mut self,
        partition: Partition,
        health: &[(u32, SubscriptionHealth)],
    ) -> Result<(), StoreError> {
        // One writer at a time: the health stays inside the settings' row.
        let Some(mut settings) = self.webhook_settings(partition)? else {
            return Ok(());
        };
        for (id, health) in health {
            if let Some(row) = settings.subscription_mut(*id) {
                row.health = health.clone();
            }
        }
        self.table(WEBHOOK_SETTINGS)?
            .insert(partition.raw(), to_json(&settings)?.as_slice())?;
        Ok(())
    }

    fn put_delivery(&mut self, row: &DeliveryRow) -> Result<(), StoreError> {
        self.table(DELIVERIES)?
            .insert(row.id, to_json(row)?.as_slice())?;
        self.table(PARTITION_DELIVERIES)?
            .insert((row.partition.raw(), row.id), row.record_id)?;
        self.table(RECORD_DELIVERIES)?
            .insert((row.partition.raw(), row.record_id, row.id), ())?;
        Ok(())
    }

    fn next_delivery_id(&mut self) -> Result<u64, StoreError> {
        next_id(self.txn, NEXT_DELIVERY_ID)
    }

    fn put_attempt(&mut self, delivery_id: u64, attempt: &AttemptRow) -> Result<(), StoreError> {
        self.table(DELIVERY_ATTEMPTS)?
            .insert((delivery_id, attempt.attempt), to_json(attempt)?.as_slice())?;
        Ok(())
    }

    fn put_due(&mut self, due: &DueDelivery) -> Result<(), StoreError> {
        list_due(&mut self.table(DELIVERIES_DUE)?, due)?;
        self.effects.deliveries_due = true;
        Ok(())
    }

    fn unlist_due(&mut self, at: Timestamp, id: u64) -> Result<(), StoreError> {
        self.table(DELIVERIES_DUE)?.remove(due_key((at, id)))?;
        Ok(())
    }

    fn move_due(&mut self, from: Option<Timestamp>, due: &DueDelivery) -> Result<(), StoreError> {
        {
            let mut table = self.table(DELIVERIES_DUE)?;
            if let Some(at) = from {
                table.remove(due_key((at, due.id)))?;
            }
            list_due(&mut table, due)?;
        }
        self.effects.deliveries_due = true;
        Ok(())
    }

    fn record_outcomes(
        &mut self,
        outcomes: &[AttemptOutcome],
    ) -> Result<Vec<DeliveryRow>, StoreError> {
        let mut given_up = Vec::new();
        let mut retries = false;
        {
            let mut deliveries = self.table(DELIVERIES)?;
            let mut due = self.table(DELIVERIES_DUE)?;
            let mut attempts = self.table(DELIVERY_ATTEMPTS)?;
            for outcome in outcomes {
                let mut row: DeliveryRow = match deliveries.get(outcome.delivery_id)? {
                    Some(value) => from_json(value.value())?,
                    None => continue,
                };
                let listed_at = row.next_attempt_at;
                let Some(settled) = outcome.apply(&mut row) else {
                    continue;
                };
                if let Some(at) = listed_at {
                    due.remove(due_key((at, row.id)))?;
                }
                match settled {
                    Settled::Finished(..) => {}
                    Settled::Due(at, receiver) => {
                        list_due(
                            &mut due,
                            &DueDelivery {
                                due_at: at,
                                id: row.id,
                                retry: row.attempts > 0,
                                receiver: receiver.to_string(),
                            },
                        )?;
                        retries = true;
                    }
                }
                attempts.insert(
                    (row.id, outcome.attempt.attempt),
                    to_json(&outcome.attempt)?.as_slice(),
                )?;
                deliveries.insert(row.id, to_json(&row)?.as_slice())?;
                if row.state == DeliveryState::GivenUp {
                    given_up.push(row);
                }
            }
        }
        self.effects.deliveries_due |= retries;
        Ok(given_up)
    }

    fn insert_failure_mail(&mut self, endpoint_id: u64, day: u64) -> Result<(), StoreError> {
        self.table(FAILURE_MAILS)?.insert((endpoint_id, day), ())?;
        Ok(())
    }
}
