//! [`RecordsRead`] and [`RecordsStore`] on redb: the `RECORDS` scans, and the ingest batch and
//! retention purge, which are the only writers of the change log (`CHANGES`, `META`
//! `last_change_seq`).

use std::ops::Bound;

use redb::{ReadableTable, Table, WriteTransaction};

use super::deliveries::DeliveryTables;
use super::erased_leaves::ErasedKeys;
use super::payload::PayloadCodec;
use super::tx::Tables;
use super::{
    CHANGES, ERASURES, EVENTS, IDEMPOTENCY, IDEMPOTENCY_EXPIRY, LAST_CHANGE_SEQ, META, RECORDS,
    RedbStore, from_json, partitions_of, read_counter, to_json, write_counter,
};
use crate::core::clock::Timestamp;
use crate::core::ids::RecordId;
use crate::store::erasures::widen;
use crate::store::events::kind_code;
use crate::store::records::{
    AppliedBatch, BatchWrite, Change, DeliveryPlanner, IdempotencyClaim, RecordRef, RecordRow,
    RecordWrite, RecordsRead, RecordsStore, ScanOrder, SearchVisitor, WriteOutcome,
};
use crate::store::{Effects, ErasureRow, IdempotencyRow, Partition, StoreError, time_key};

impl<T: Tables> RecordsRead for T {
    fn record(&self, partition: Partition, id: RecordId) -> Result<Option<RecordRow>, StoreError> {
        match self.open(RECORDS)?.get((partition.raw(), id.0))? {
            Some(value) => {
                let mut scratch = Vec::new();
                let (updated_at, payload) = self.codec().decode(value.value(), &mut scratch)?;
                Ok(Some(RecordRow {
                    id,
                    updated_at,
                    payload: payload.to_vec(),
                }))
            }
            None => Ok(None),
        }
    }

    fn record_page(
        &self,
        partition: Partition,
        ids: (Bound<u128>, Bound<u128>),
        order: ScanOrder,
        limit: usize,
        visit: &mut dyn FnMut(RecordRef<'_>) -> Result<(), StoreError>,
    ) -> Result<bool, StoreError> {
        let records = self.open(RECORDS)?;
        // The keys are (partition, id): an unbounded end is the partition's first or last id,
        // never the next partition's records.
        let key = |bound: Bound<u128>, end: u128| match bound {
            Bound::Unbounded => Bound::Included((partition.raw(), end)),
            bound => bound.map(|id| (partition.raw(), id)),
        };
        let range = records.range::<(u64, u128)>((key(ids.0, 0), key(ids.1, u128::MAX)))?;
        match order {
            ScanOrder::OldestFirst => visit_page(self.codec(), range, limit, visit),
            ScanOrder::NewestFirst => visit_page(self.codec(), range.rev(), limit, visit),
        }
    }

    fn record_partitions(&self) -> Result<Vec<Partition>, StoreError> {
        partitions_of(&self.open(RECORDS)?)
    }

    fn visit_newest_first(
        &self,
        partition: Partition,
        lower: u128,
        upper: u128,
        visit: &mut SearchVisitor<'_>,
    ) -> Result<(), StoreError> {
        let records = self.open(RECORDS)?;
        let mut scratch = Vec::new();
        for entry in records
            .range((partition.raw(), lower)..=(partition.raw(), upper))?
            .rev()
        {
            let (key, value) = entry?;
            let (updated_at, payload) = self.codec().decode(value.value(), &mut scratch)?;
            if visit(key.value().1, updated_at, payload).is_break() {
                break;
            }
        }
        Ok(())
    }

    fn visit_records(
        &self,
        partition: Partition,
        ids: &[u128],
        visit: &mut SearchVisitor<'_>,
    ) -> Result<(), StoreError> {
        let records = self.open(RECORDS)?;
        let mut scratch = Vec::new();
        for &id in ids {
            let Some(value) = records.get((partition.raw(), id))? else {
                continue;
            };
            let (updated_at, payload) = self.codec().decode(value.value(), &mut scratch)?;
            if visit(id, updated_at, payload).is_break() {
                break;
            }
        }
        Ok(())
    }
}

/// Hands at most `limit` entries to `visit`; whether one more follows.
fn visit_page<'a>(
    codec: &PayloadCodec,
    entries: impl Iterator<
        Item = Result<
            (
                redb::AccessGuard<'a, (u64, u128)>,
                redb::AccessGuard<'a, &'static [u8]>,
            ),
            redb::StorageError,
        >,
    >,
    limit: usize,
    visit: &mut dyn FnMut(RecordRef<'_>) -> Result<(), StoreError>,
) -> Result<bool, StoreError> {
    let mut scratch = Vec::new();
    for (visited, entry) in entries.enumerate() {
        let (key, value) = entry?;
        if visited == limit {
            return Ok(true);
        }
        let (updated_at, payload) = codec.decode(value.value(), &mut scratch)?;
        visit(RecordRef {
            id: RecordId(key.value().1),
            updated_at,
            payload,
        })?;
    }
    Ok(false)
}

impl RecordsStore for RedbStore {
    fn apply_batch(&self, writes: &[BatchWrite<'_>]) -> Result<AppliedBatch, StoreError> {
        let txn = self.write()?;
        let (outcomes, effects) = {
            let mut batch = BatchTables::open(&txn, &self.codec)?;
            let outcomes = writes
                .iter()
                .map(|write| batch.apply(write))
                .collect::<Result<Vec<_>, StoreError>>()?;
            (outcomes, batch.finish(&txn)?)
        };
        txn.commit()?;
        Ok(AppliedBatch { outcomes, effects })
    }

    fn purge_partition_before(
        &self,
        partition: Partition,
        below: u128,
        limit: usize,
    ) -> Result<usize, StoreError> {
        let txn = self.write()?;
        let removed = {
            let mut records = txn.open_table(RECORDS)?;
            let ids: Vec<u128> = records
                .range((partition.raw(), 0)..(partition.raw(), below))?
                .take(limit)
                .map(|e| e.map(|(k, _)| k.value().1))
                .collect::<Result<_, _>>()?;
            let mut log = ChangeLog::open(&txn)?;
            for id in &ids {
                records.remove((partition.raw(), *id))?;
                log.append(partition, *id)?;
            }
            log.finish(&txn)?;
            ids.len()
        };
        txn.commit()?;
        Ok(removed)
    }

    fn purge_idempotency_before(
        &self,
        cutoff: Timestamp,
        limit: usize,
    ) -> Result<usize, StoreError> {
        let cutoff = time_key(cutoff);
        let txn = self.write()?;
        let mut purged = 0;
        {
            let mut expiry = txn.open_table(IDEMPOTENCY_EXPIRY)?;
            let mut keys = txn.open_table(IDEMPOTENCY)?;
            let mut doomed = Vec::new();
            for entry in expiry.range((0u64, 0u64, "")..(cutoff, 0u64, ""))? {
                let (key, _) = entry?;
                let (stored, partition, idem) = key.value();
                doomed.push((stored, partition, idem.to_string()));
                if doomed.len() >= limit {
                    break;
                }
            }
            for (stored, partition, idem) in &doomed {
                expiry.remove((*stored, *partition, idem.as_str()))?;
                // Only drop the claim if it is still the one this expiry entry describes.
                let current: Option<IdempotencyRow> = keys
                    .get((*partition, idem.as_str()))?
                    .map(|v| from_json(v.value()))
                    .transpose()?;
                if current.is_some_and(|row| time_key(row.created_at) == *stored) {
                    keys.remove((*partition, idem.as_str()))?;
                }
                purged += 1;
            }
        }
        txn.commit()?;
        Ok(purged)
    }
}

/// Appends to the change log within one write transaction.
struct ChangeLog<'txn> {
    changes: Table<'txn, u64, (u64, u128)>,
    /// The last change sequence written.
    last_seq: u64,
    first_seq: u64,
}

impl<'txn> ChangeLog<'txn> {
    fn open(txn: &'txn WriteTransaction) -> Result<ChangeLog<'txn>, StoreError> {
        let last_seq = read_counter(&txn.open_table(META)?, LAST_CHANGE_SEQ)?;
        Ok(ChangeLog {
            changes: txn.open_table(CHANGES)?,
            last_seq,
            first_seq: last_seq,
        })
    }

    fn append(&mut self, partition: Partition, id: u128) -> Result<(), StoreError> {
        self.last_seq += 1;
        self.changes.insert(self.last_seq, (partition.raw(), id))?;
        Ok(())
    }

    /// Saves the last sequence written; call before the commit.
    fn finish(self, txn: &WriteTransaction) -> Result<(), StoreError> {
        if self.last_seq != self.first_seq {
            write_counter(txn, LAST_CHANGE_SEQ, self.last_seq)?;
        }
        Ok(())
    }
}

/// The tables one ingest batch works on, each opened once.
struct BatchTables<'txn> {
    txn: &'txn WriteTransaction,
    codec: &'txn PayloadCodec,
    records: Table<'txn, (u64, u128), &'static [u8]>,
    idempotency: Table<'txn, (u64, &'static str), &'static [u8]>,
    idempotency_expiry: Table<'txn, (u64, u64, &'static str), ()>,
    log: ChangeLog<'txn>,
    events: Table<'txn, (u64, u64), (u8, u128, u64)>,
    deliveries: DeliveryTables<'txn>,
    erasures: Table<'txn, u64, &'static [u8]>,
    /// The partitions erasures' steps removed records of.
    erased: Vec<Partition>,
}

impl<'txn> BatchTables<'txn> {
    fn open(
        txn: &'txn WriteTransaction,
        codec: &'txn PayloadCodec,
    ) -> Result<BatchTables<'txn>, StoreError> {
        Ok(BatchTables {
            txn,
            codec,
            records: txn.open_table(RECORDS)?,
            idempotency: txn.open_table(IDEMPOTENCY)?,
            idempotency_expiry: txn.open_table(IDEMPOTENCY_EXPIRY)?,
            log: ChangeLog::open(txn)?,
            events: txn.open_table(EVENTS)?,
            deliveries: DeliveryTables::open(txn)?,
            erasures: txn.open_table(ERASURES)?,
            erased: Vec::new(),
        })
    }

    /// Saves the counters; returns what the commit requires.
    fn finish(self, txn: &WriteTransaction) -> Result<Effects, StoreError> {
        self.log.finish(txn)?;
        let erased = self.erased;
        drop(self.erasures);
        Ok(Effects {
            deliveries_due: self.deliveries.finish(txn)?,
            records_changed: erased.clone(),
            records_erased: erased,
            ..Effects::default()
        })
    }

    /// Applies one write; if it changed a record, logs it in the change log and the event log
    /// (under the same sequence) and creates its webhook deliveries.
    fn apply(&mut self, batch_write: &BatchWrite<'_>) -> Result<WriteOutcome, StoreError> {
        let write = batch_write.write;
        if let RecordWrite::Erase {
            partition,
            ids,
            at,
            notify,
            erasure,
            resume_below,
        } = write
        {
            let planner = notify.then_some(batch_write.webhooks);
            return self.erase(*partition, ids, *at, planner, *erasure, *resume_below);
        }
        let outcome = self.apply_to_records(write)?;
        for change in Change::of(write, &outcome) {
            self.log.append(change.partition, change.id.0)?;
            self.events.insert(
                (change.partition.raw(), self.log.last_seq),
                (kind_code(change.kind), change.id.0, time_key(change.at)),
            )?;
            self.deliveries.create_for(&change, batch_write.webhooks)?;
        }
        Ok(outcome)
    }

    /// An erasure's step (see [`RecordWrite::Erase`]); `planner` when it notifies.
    fn erase(
        &mut self,
        partition: Partition,
        ids: &[RecordId],
        at: Timestamp,
        planner: Option<&dyn DeliveryPlanner>,
        erasure: u64,
        resume_below: u128,
    ) -> Result<WriteOutcome, StoreError> {
        let (mut count, mut range) = (0, None);
        let mut erased_keys = ErasedKeys::open(self.txn)?;
        for id in ids {
            if self.records.remove((partition.raw(), id.0))?.is_none() {
                continue;
            }
            count += 1;
            range = widen(range, id.0);
            erased_keys.record(partition, *id)?;
            self.deliveries
                .erase_for(partition, *id, at, &mut erased_keys)?;
            self.log.append(partition, id.0)?;
            if let Some(planner) = planner {
                let change = Change::erased(partition, *id, at);
                self.events.insert(
                    (partition.raw(), self.log.last_seq),
                    (kind_code(change.kind), id.0, time_key(at)),
                )?;
                self.deliveries.create_for(&change, planner)?;
            }
        }
        let mut row: ErasureRow = match self.erasures.get(erasure)? {
            Some(value) => from_json(value.value())?,
            None => return Err(StoreError::Corrupt(format!("erasure {erasure} is missing"))),
        };
        row.count_step(count, range, resume_below);
        self.erasures.insert(erasure, to_json(&row)?.as_slice())?;
        if !self.erased.contains(&partition) {
            self.erased.push(partition);
            self.erased.sort_unstable();
        }
        Ok(WriteOutcome::Erased { count })
    }

    fn apply_to_records(&mut self, write: &RecordWrite) -> Result<WriteOutcome, StoreError> {
        match write {
            RecordWrite::Create {
                partition,
                records,
                idempotency,
            } => {
                let Some(created_at) = records.first().map(|r| r.id.created_at()) else {
                    return Ok(WriteOutcome::Created { ids: Vec::new() });
                };
                if let Some(claim) = idempotency {
                    if let Some(known) = self.claimed(*partition, claim, created_at)? {
                        return Ok(known);
                    }
                }
                for record in records {
                    self.records.insert(
                        (partition.raw(), record.id.0),
                        self.codec
                            .encode(record.id.created_at(), &record.payload)?
                            .as_slice(),
                    )?;
                }
                let ids: Vec<RecordId> = records.iter().map(|r| r.id).collect();
                if let Some(claim) = idempotency {
                    let row = claim.held_for(&ids, created_at);
                    self.idempotency.insert(
                        (partition.raw(), claim.key.as_str()),
                        to_json(&row)?.as_slice(),
                    )?;
                    self.idempotency_expiry.insert(
                        (time_key(created_at), partition.raw(), claim.key.as_str()),
                        (),
                    )?;
                }
                Ok(WriteOutcome::Created { ids })
            }
            RecordWrite::Replace {
                partition,
                id,
                updated_at,
                payload,
            } => {
                if self.records.get((partition.raw(), id.0))?.is_none() {
                    return Ok(WriteOutcome::NotFound);
                }
                self.records.insert(
                    (partition.raw(), id.0),
                    self.codec.encode(*updated_at, payload)?.as_slice(),
                )?;
                Ok(WriteOutcome::Replaced)
            }
            RecordWrite::Delete { partition, id, .. } => {
                if self.records.remove((partition.raw(), id.0))?.is_none() {
                    return Ok(WriteOutcome::NotFound);
                }
                Ok(WriteOutcome::Deleted)
            }
            RecordWrite::Erase { .. } => Err(StoreError::Corrupt(
                "an erasure's step is applied by BatchTables::erase".into(),
            )),
        }
    }

    /// Checks an Idempotency-Key by the rule of [`IdempotencyClaim::answer`]: `Some` outcome
    /// when the key answers the create; `None` when it goes ahead, its expired claim dropped.
    fn claimed(
        &mut self,
        partition: Partition,
        claim: &IdempotencyClaim,
        now: Timestamp,
    ) -> Result<Option<WriteOutcome>, StoreError> {
        let held: Option<IdempotencyRow> = match self
            .idempotency
            .get((partition.raw(), claim.key.as_str()))?
        {
            Some(v) => Some(from_json(v.value())?),
            None => None,
        };
        let answer = claim.answer(held.as_ref(), now)?;
        if let (None, Some(expired)) = (&answer, &held) {
            self.idempotency_expiry.remove((
                time_key(expired.created_at),
                partition.raw(),
                claim.key.as_str(),
            ))?;
            self.idempotency
                .remove((partition.raw(), claim.key.as_str()))?;
        }
        Ok(answer)
    }
}
