//! Creating webhook deliveries in the ingest batch's transaction, and the due index every
//! delivery is listed in while pending.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use redb::{ReadableTable, Table, WriteTransaction};

use super::erased_leaves::ErasedKeys;
use super::webhooks::{due_key, list_due};
use super::{
    DELIVERIES, DELIVERIES_DUE, DELIVERY_ATTEMPTS, META, PARTITION_DELIVERIES, RECORD_DELIVERIES,
    WEBHOOK_SETTINGS, from_json, read_counter, to_json, write_counter,
};
use crate::core::clock::Timestamp;
use crate::core::ids::RecordId;
use crate::store::records::{Change, DeliveryPlanner, NewDelivery};
use crate::store::webhooks::DueDelivery;
use crate::store::{AttemptRow, DeliveryRow, Partition, StoreError, WebhookSettingsRow};

/// `META` counter of the last delivery id handed out.
pub(super) const NEXT_DELIVERY_ID: &str = "next_delivery_id";

/// The delivery tables of one write transaction (the ingest batch), each opened once.
pub(super) struct DeliveryTables<'txn> {
    webhook_settings: Table<'txn, u64, &'static [u8]>,
    deliveries: Table<'txn, u64, &'static [u8]>,
    due: Table<'txn, (u64, u64), (bool, &'static str)>,
    by_partition: Table<'txn, (u64, u64), u128>,
    by_record: Table<'txn, (u64, u128, u64), ()>,
    attempts: Table<'txn, (u64, u32), &'static [u8]>,
    /// Each partition's webhook settings, read and decoded once per batch (nothing else
    /// writes them in its transaction).
    settings: HashMap<Partition, Option<WebhookSettingsRow>>,
    last_id: u64,
    first_id: u64,
}

impl<'txn> DeliveryTables<'txn> {
    pub(super) fn open(txn: &'txn WriteTransaction) -> Result<DeliveryTables<'txn>, StoreError> {
        let last_id = read_counter(&txn.open_table(META)?, NEXT_DELIVERY_ID)?;
        Ok(DeliveryTables {
            webhook_settings: txn.open_table(WEBHOOK_SETTINGS)?,
            deliveries: txn.open_table(DELIVERIES)?,
            due: txn.open_table(DELIVERIES_DUE)?,
            by_partition: txn.open_table(PARTITION_DELIVERIES)?,
            by_record: txn.open_table(RECORD_DELIVERIES)?,
            attempts: txn.open_table(DELIVERY_ATTEMPTS)?,
            settings: HashMap::new(),
            last_id,
            first_id: last_id,
        })
    }

    /// Saves the delivery id counter (call before the commit); returns whether deliveries were
    /// created (the dispatcher should look).
    pub(super) fn finish(self, txn: &WriteTransaction) -> Result<bool, StoreError> {
        let (last, first) = (self.last_id, self.first_id);
        // The tables close first: the counter is written through a table of its own.
        drop(self);
        if last != first {
            write_counter(txn, NEXT_DELIVERY_ID, last)?;
        }
        Ok(last != first)
    }

    /// Creates the deliveries `planner` decides for one applied write.
    pub(super) fn create_for(
        &mut self,
        change: &Change<'_>,
        planner: &dyn DeliveryPlanner,
    ) -> Result<(), StoreError> {
        let settings = match self.settings.entry(change.partition) {
            Entry::Occupied(known) => known.into_mut(),
            Entry::Vacant(unknown) => {
                let stored = match self.webhook_settings.get(change.partition.raw())? {
                    Some(v) => Some(from_json(v.value())?),
                    None => None,
                };
                unknown.insert(stored)
            }
        };
        for delivery in planner.deliveries(change, settings.as_ref())? {
            self.insert(change.partition, change.id, delivery)?;
        }
        Ok(())
    }

    /// Erases the deliveries of the record `record_id` of `partition` and their attempts
    /// (`DeliveryRow::erase`, `AttemptRow::erase`), at `at`, listing their keys in
    /// `erased_keys`.
    pub(super) fn erase_for(
        &mut self,
        partition: Partition,
        record_id: RecordId,
        at: Timestamp,
        erased_keys: &mut ErasedKeys<'_>,
    ) -> Result<(), StoreError> {
        let ids: Vec<u64> = self
            .by_record
            .range((partition.raw(), record_id.0, 0)..=(partition.raw(), record_id.0, u64::MAX))?
            .map(|entry| entry.map(|(key, _)| key.value().2))
            .collect::<Result<_, _>>()?;
        for id in ids {
            let mut row: DeliveryRow = match self.deliveries.get(id)? {
                Some(value) => from_json(value.value())?,
                None => continue,
            };
            if let Some(listed_at) = row.erase(at) {
                self.due.remove(due_key((listed_at, id)))?;
            }
            self.deliveries.insert(id, to_json(&row)?.as_slice())?;
            erased_keys.delivery(id)?;
            let attempts: Vec<(u32, AttemptRow)> = self
                .attempts
                .range((id, 0)..=(id, u32::MAX))?
                .map(|entry| {
                    let (key, value) = entry?;
                    Ok((key.value().1, from_json(value.value())?))
                })
                .collect::<Result<_, StoreError>>()?;
            for (number, mut attempt) in attempts {
                attempt.erase();
                self.attempts
                    .insert((id, number), to_json(&attempt)?.as_slice())?;
                erased_keys.attempt(id, number)?;
            }
        }
        Ok(())
    }

    fn insert(
        &mut self,
        partition: Partition,
        record_id: RecordId,
        mut new: NewDelivery,
    ) -> Result<(), StoreError> {
        self.last_id += 1;
        let due = DueDelivery {
            due_at: new.created_at,
            id: self.last_id,
            retry: false,
            receiver: std::mem::take(&mut new.receiver),
        };
        let skipped = new.skipped;
        let row = new.into_row(self.last_id, partition, record_id);
        self.deliveries.insert(row.id, to_json(&row)?.as_slice())?;
        if !skipped {
            list_due(&mut self.due, &due)?;
        }
        self.by_partition
            .insert((partition.raw(), row.id), record_id.0)?;
        self.by_record
            .insert((partition.raw(), record_id.0, row.id), ())?;
        Ok(())
    }
}
