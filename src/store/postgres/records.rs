//! [`RecordsRead`] and [`RecordsStore`] on PostgreSQL: the `records` scans, the ingest batch
//! and the retention purges.
//!
//! No change log is kept (`Store::change_log` is `None`): the `folded` column beside each
//! record is what a search of this store matches against.
//!
//! The ingest batch takes few round trips whatever its size: one statement reads everything
//! the batch depends on (its Idempotency-Key claims, the records its replaces and deletes
//! touch, the owner webhooks of its partitions), the writes are then applied in order in
//! memory, and one statement writes the net result (records, deletes, claims, and the ids of
//! the new deliveries), one more the deliveries.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::ops::Bound;

use super::erasures::{ErasureStepDone, count_erasure_steps, erase_deliveries};
use super::{
    Patience, PgStore, PgTx, big, big_partition, from_json, id_bytes, id_from_bytes, micros,
    to_json, unbig, unbig_partition,
};
use crate::core::clock::Timestamp;
use crate::core::ids::RecordId;
use crate::store::erasures::widen;
use crate::store::events::kind_code;
use crate::store::records::{
    AppliedBatch, BatchWrite, Change, NewDelivery, RecordRef, RecordRow, RecordWrite, RecordsRead,
    RecordsStore, ScanOrder, SearchVisitor, WriteOutcome, searchable_text,
};
use crate::store::{IdempotencyRow, Partition, StoreError, WebhookSettingsRow, time_key};

/// Records a visitor's scan reads per statement: a visitor usually stops early, so a scan
/// never reads far ahead of it.
const VISIT_CHUNK: usize = 256;

/// A row count as a `LIMIT` parameter.
pub(super) fn sql_limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The partitions holding a row of `table` (`records`, `record_events`, `deliveries`: each
/// has an index led by `partition`), in ascending order: one index probe per partition (a
/// loose index scan), not a scan of every row.
pub(super) fn partitions_of(
    tx: &PgTx<'_>,
    table: &'static str,
) -> Result<Vec<Partition>, StoreError> {
    let rows = tx.query(
        &format!(
            "WITH RECURSIVE p (partition) AS ( \
                 (SELECT partition FROM {table} ORDER BY partition LIMIT 1) \
                 UNION ALL \
                 SELECT (SELECT t.partition FROM {table} t WHERE t.partition > p.partition \
                         ORDER BY t.partition LIMIT 1) \
                 FROM p WHERE p.partition IS NOT NULL \
             ) \
             SELECT partition FROM p WHERE partition IS NOT NULL"
        ),
        &[],
    )?;
    rows.iter()
        .map(|row| Ok(unbig_partition(row.try_get(0)?)))
        .collect()
}

/// `ids` as an inclusive range of ids; `None` when it holds none.
fn inclusive((lower, upper): (Bound<u128>, Bound<u128>)) -> Option<(u128, u128)> {
    let lower = match lower {
        Bound::Included(id) => id,
        Bound::Excluded(id) => id.checked_add(1)?,
        Bound::Unbounded => 0,
    };
    let upper = match upper {
        Bound::Included(id) => id,
        Bound::Excluded(id) => id.checked_sub(1)?,
        Bound::Unbounded => u128::MAX,
    };
    (lower <= upper).then_some((lower, upper))
}

/// Shows the rows of a `SELECT id, updated_at, payload` to `visit`; the last id shown, or
/// `None` when the visitor broke.
fn visit_rows(
    rows: &[tokio_postgres::Row],
    visit: &mut SearchVisitor<'_>,
) -> Result<Option<Option<u128>>, StoreError> {
    let mut last = None;
    for row in rows {
        let id = id_from_bytes(row.try_get(0)?)?;
        if visit(id, Timestamp(row.try_get(1)?), row.try_get(2)?).is_break() {
            return Ok(None);
        }
        last = Some(id);
    }
    Ok(Some(last))
}

impl RecordsRead for PgTx<'_> {
    fn record(&self, partition: Partition, id: RecordId) -> Result<Option<RecordRow>, StoreError> {
        let row = self.query_opt(
            "SELECT updated_at, payload FROM records WHERE partition = $1 AND id = $2",
            &[&big_partition(partition), &&id_bytes(id.0)[..]],
        )?;
        match row {
            Some(row) => Ok(Some(RecordRow {
                id,
                // updated_at is kept as the Timestamp's own microseconds.
                updated_at: Timestamp(row.try_get(0)?),
                payload: row.try_get(1)?,
            })),
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
        let Some((lower, upper)) = inclusive(ids) else {
            return Ok(false);
        };
        let sql = match order {
            ScanOrder::OldestFirst => {
                "SELECT id, updated_at, payload FROM records \
                 WHERE partition = $1 AND id BETWEEN $2 AND $3 ORDER BY id LIMIT $4"
            }
            ScanOrder::NewestFirst => {
                "SELECT id, updated_at, payload FROM records \
                 WHERE partition = $1 AND id BETWEEN $2 AND $3 ORDER BY id DESC LIMIT $4"
            }
        };
        // One row past the page answers whether more follow.
        let rows = self.query(
            sql,
            &[
                &big_partition(partition),
                &&id_bytes(lower)[..],
                &&id_bytes(upper)[..],
                &sql_limit(limit.saturating_add(1)),
            ],
        )?;
        for (index, row) in rows.iter().enumerate() {
            if index == limit {
                return Ok(true);
            }
            visit(RecordRef {
                id: RecordId(id_from_bytes(row.try_get(0)?)?),
                updated_at: Timestamp(row.try_get(1)?),
                payload: row.try_get(2)?,
            })?;
        }
        Ok(false)
    }

    fn record_partitions(&self) -> Result<Vec<Partition>, StoreError> {
        partitions_of(self, "records")
    }

    fn visit_newest_first(
        &self,
        partition: Partition,
        lower: u128,
        upper: u128,
        visit: &mut SearchVisitor<'_>,
    ) -> Result<(), StoreError> {
        let mut upper = upper;
        while lower <= upper {
            let rows = self.query(
                "SELECT id, updated_at, payload FROM records \
                 WHERE partition = $1 AND id BETWEEN $2 AND $3 ORDER BY id DESC LIMIT $4",
                &[
                    &big_partition(partition),
                    &&id_bytes(lower)[..],
                    &&id_bytes(upper)[..],
                    &sql_limit(VISIT_CHUNK),
                ],
            )?;
            let Some(last) = visit_rows(&rows, visit)? else {
                return Ok(());
            };
            match last.and_then(|last| last.checked_sub(1)) {
                Some(below) if rows.len() == VISIT_CHUNK => upper = below,
                _ => return Ok(()),
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
        for chunk in ids.chunks(VISIT_CHUNK) {
            let keys: Vec<[u8; 16]> = chunk.iter().map(|id| id_bytes(*id)).collect();
            let keys: Vec<&[u8]> = keys.iter().map(|key| &key[..]).collect();
            let rows = self.query(
                "SELECT r.id, r.updated_at, r.payload \
                 FROM unnest($2::bytea[]) WITH ORDINALITY AS u (id, n) \
                 JOIN records r ON r.partition = $1 AND r.id = u.id \
                 ORDER BY u.n",
                &[&big_partition(partition), &keys],
            )?;
            if visit_rows(&rows, visit)?.is_none() {
                return Ok(());
            }
        }
        Ok(())
    }
}

impl RecordsStore for PgStore {
    fn apply_batch(&self, writes: &[BatchWrite<'_>]) -> Result<AppliedBatch, StoreError> {
        if writes.is_empty() {
            return Ok(AppliedBatch {
                outcomes: Vec::new(),
                effects: Default::default(),
            });
        }
        // Creates are stamped on this node's clock: the fence keeps a node whose lease lapsed
        // from committing them below a poll bound the others have passed (`store::cluster`).
        let oldest_create = writes
            .iter()
            .filter_map(|w| match w.write {
                RecordWrite::Create { records, .. } => {
                    records.iter().map(|r| r.id.created_at()).min()
                }
                _ => None,
            })
            .min();
        let bytes = writes.iter().map(|w| w.write.payload_bytes()).sum();
        let (outcomes, effects) = self.write_ingest_batch(bytes, |tx| {
            self.check_fence(tx, oldest_create)?;
            Batch::read(tx, writes)?.apply(tx)
        })?;
        Ok(AppliedBatch { outcomes, effects })
    }

    fn purge_partition_before(
        &self,
        partition: Partition,
        below: u128,
        limit: usize,
    ) -> Result<usize, StoreError> {
        let (removed, _) = self.write_unit_within(Patience::Maintenance, |tx| {
            tx.execute(
                "DELETE FROM records WHERE partition = $1 AND id IN ( \
                     SELECT id FROM records WHERE partition = $1 AND id < $2 \
                     ORDER BY id LIMIT $3)",
                &[
                    &big_partition(partition),
                    &&id_bytes(below)[..],
                    &sql_limit(limit),
                ],
            )
        })?;
        count(removed)
    }

    fn purge_idempotency_before(
        &self,
        cutoff: Timestamp,
        limit: usize,
    ) -> Result<usize, StoreError> {
        let (purged, _) = self.write_unit_within(Patience::Maintenance, |tx| {
            tx.execute(
                "DELETE FROM idempotency WHERE (partition, key) IN ( \
                     SELECT partition, key FROM idempotency WHERE created_at < $1 \
                     ORDER BY created_at, partition, key LIMIT $2)",
                &[&big(time_key(cutoff)), &sql_limit(limit)],
            )
        })?;
        count(purged)
    }
}

/// A count of rows the database changed.
fn count(rows: u64) -> Result<usize, StoreError> {
    usize::try_from(rows).map_err(|_| StoreError::Corrupt(format!("{rows} rows changed")))
}

/// What a batch leaves of one record: `Some((updated_at, payload))` to write, `None` to delete.
type RecordChange<'w> = Option<(Timestamp, &'w [u8])>;

/// One ingest batch being applied: what the database held when it was read, changed in memory
/// write by write, so that a write sees the batch's earlier writes.
struct Batch<'w> {
    writes: &'w [BatchWrite<'w>],
    /// The Idempotency-Key claims of the batch's creates that the database holds.
    claims: HashMap<(Partition, String), IdempotencyRow>,
    /// The claims the batch made (replacing any of `claims`), to be written.
    new_claims: BTreeMap<(Partition, String), IdempotencyRow>,
    /// Of the records the batch replaces or deletes, those that exist now.
    existing: HashSet<(Partition, u128)>,
    /// The records the batch changed, ordered, so that concurrent batches lock rows in one
    /// order.
    changed: BTreeMap<(Partition, u128), RecordChange<'w>>,
    webhook_settings: HashMap<Partition, WebhookSettingsRow>,
    /// The deliveries of the applied writes, in the order they were made.
    deliveries: Vec<(Partition, RecordId, NewDelivery)>,
    /// The events of the applied writes, in order (`store::events`).
    events: EventColumns,
    /// The records erasures' steps removed (their deliveries are erased before the batch's
    /// new ones are made), and each step's erasure with its count and resume point.
    erased: HashMap<(Partition, u128), Timestamp>,
    erasure_steps: Vec<ErasureStepDone>,
}

impl<'w> Batch<'w> {
    /// Reads what `writes` depend on, in one statement.
    fn read(tx: &PgTx<'_>, writes: &'w [BatchWrite<'w>]) -> Result<Batch<'w>, StoreError> {
        let (mut claim_partitions, mut claim_keys) = (Vec::new(), Vec::new());
        let (mut record_partitions, mut record_ids) = (Vec::new(), Vec::new());
        let mut partitions = BTreeSet::new();
        for write in writes {
            match write.write {
                RecordWrite::Create {
                    partition,
                    idempotency,
                    ..
                } => {
                    partitions.insert(big_partition(*partition));
                    if let Some(claim) = idempotency {
                        claim_partitions.push(big_partition(*partition));
                        claim_keys.push(claim.key.as_str());
                    }
                }
                RecordWrite::Replace { partition, id, .. }
                | RecordWrite::Delete { partition, id, .. } => {
                    partitions.insert(big_partition(*partition));
                    record_partitions.push(big_partition(*partition));
                    record_ids.push(id_bytes(id.0));
                }
                RecordWrite::Erase { partition, ids, .. } => {
                    partitions.insert(big_partition(*partition));
                    for id in ids {
                        record_partitions.push(big_partition(*partition));
                        record_ids.push(id_bytes(id.0));
                    }
                }
            }
        }
        let record_ids: Vec<&[u8]> = record_ids.iter().map(|id| &id[..]).collect();
        let partitions: Vec<i64> = partitions.into_iter().collect();
        let rows = tx.query(
            "SELECT 0 AS what, partition, NULL::bytea AS id, key, data FROM idempotency \
                 WHERE (partition, key) IN (SELECT * FROM unnest($1::bigint[], $2::text[])) \
             UNION ALL \
             SELECT 1, partition, id, NULL, NULL FROM records \
                 WHERE (partition, id) IN (SELECT * FROM unnest($3::bigint[], $4::bytea[])) \
             UNION ALL \
             SELECT 2, partition, NULL, NULL, data FROM owner_webhooks \
                 WHERE partition = ANY($5::bigint[])",
            &[
                &claim_partitions,
                &claim_keys,
                &record_partitions,
                &record_ids,
                &partitions,
            ],
        )?;
        let mut batch = Batch {
            writes,
            claims: HashMap::new(),
            new_claims: BTreeMap::new(),
            existing: HashSet::new(),
            changed: BTreeMap::new(),
            webhook_settings: HashMap::new(),
            deliveries: Vec::new(),
            events: EventColumns::default(),
            erased: HashMap::new(),
            erasure_steps: Vec::new(),
        };
        for row in &rows {
            let partition = unbig_partition(row.try_get(1)?);
            match row.try_get::<_, i32>(0)? {
                0 => {
                    batch
                        .claims
                        .insert((partition, row.try_get(3)?), from_json(row.try_get(4)?)?);
                }
                1 => {
                    batch
                        .existing
                        .insert((partition, id_from_bytes(row.try_get(2)?)?));
                }
                2 => {
                    batch
                        .webhook_settings
                        .insert(partition, from_json(row.try_get(4)?)?);
                }
                what => return Err(StoreError::Corrupt(format!("a batch read of kind {what}"))),
            }
        }
        Ok(batch)
    }

    /// Applies the writes in order and writes the result; one outcome per write.
    fn apply(mut self, tx: &mut PgTx<'_>) -> Result<Vec<WriteOutcome>, StoreError> {
        let writes = self.writes;
        let mut outcomes = Vec::with_capacity(writes.len());
        for write in writes {
            outcomes.push(self.apply_one(write)?);
        }
        self.save(tx)?;
        Ok(outcomes)
    }

    /// Applies one write in memory; if it changed a record, plans its deliveries.
    fn apply_one(&mut self, batch_write: &BatchWrite<'w>) -> Result<WriteOutcome, StoreError> {
        if let RecordWrite::Erase {
            partition,
            ids,
            at,
            notify,
            erasure,
            resume_below,
        } = batch_write.write
        {
            let (mut count, mut range) = (0, None);
            for id in ids {
                if !self.exists((*partition, id.0)) {
                    continue;
                }
                count += 1;
                range = widen(range, id.0);
                self.changed.insert((*partition, id.0), None);
                self.erased.insert((*partition, id.0), *at);
                if *notify {
                    self.plan(batch_write, &Change::erased(*partition, *id, *at))?;
                }
            }
            self.erasure_steps.push(ErasureStepDone {
                erasure: *erasure,
                count,
                range,
                resume_below: *resume_below,
            });
            return Ok(WriteOutcome::Erased { count });
        }
        let outcome = self.apply_to_records(batch_write.write)?;
        for change in Change::of(batch_write.write, &outcome) {
            self.plan(batch_write, &change)?;
        }
        Ok(outcome)
    }

    /// Logs an applied change's event and plans its deliveries.
    fn plan(
        &mut self,
        batch_write: &BatchWrite<'w>,
        change: &Change<'_>,
    ) -> Result<(), StoreError> {
        self.events.push(change);
        let settings = self.webhook_settings.get(&change.partition);
        for delivery in batch_write.webhooks.deliveries(change, settings)? {
            self.deliveries
                .push((change.partition, change.id, delivery));
        }
        Ok(())
    }

    fn exists(&self, key: (Partition, u128)) -> bool {
        match self.changed.get(&key) {
            Some(change) => change.is_some(),
            None => self.existing.contains(&key),
        }
    }

    fn apply_to_records(&mut self, write: &'w RecordWrite) -> Result<WriteOutcome, StoreError> {
        match write {
            RecordWrite::Create {
                partition,
                records,
                idempotency,
            } => {
                let Some(created_at) = records.first().map(|r| r.id.created_at()) else {
                    return Ok(WriteOutcome::Created { ids: Vec::new() });
                };
                let ids: Vec<RecordId> = records.iter().map(|r| r.id).collect();
                if let Some(claim) = idempotency {
                    let key = (*partition, claim.key.clone());
                    // The claim this batch made for the key, else the database's; the create
                    // below replaces an expired one (the upsert at the end).
                    let held = self.new_claims.get(&key).or_else(|| self.claims.get(&key));
                    if let Some(answer) = claim.answer(held, created_at)? {
                        return Ok(answer);
                    }
                    self.new_claims
                        .insert(key, claim.held_for(&ids, created_at));
                }
                for record in records {
                    self.changed.insert(
                        (*partition, record.id.0),
                        Some((record.id.created_at(), record.payload.as_slice())),
                    );
                }
                Ok(WriteOutcome::Created { ids })
            }
            RecordWrite::Replace {
                partition,
                id,
                updated_at,
                payload,
            } => {
                if !self.exists((*partition, id.0)) {
                    return Ok(WriteOutcome::NotFound);
                }
                self.changed
                    .insert((*partition, id.0), Some((*updated_at, payload.as_slice())));
                Ok(WriteOutcome::Replaced)
            }
            RecordWrite::Delete { partition, id, .. } => {
                if !self.exists((*partition, id.0)) {
                    return Ok(WriteOutcome::NotFound);
                }
                self.changed.insert((*partition, id.0), None);
                Ok(WriteOutcome::Deleted)
            }
            RecordWrite::Erase { .. } => Err(StoreError::Corrupt(
                "an erasure's step is applied by Batch::apply_one".into(),
            )),
        }
    }

    /// Writes the net result of the batch: one statement for the records, deletes and claims
    /// (handing out the delivery ids), one for the deliveries.
    fn save(self, tx: &mut PgTx<'_>) -> Result<(), StoreError> {
        count_erasure_steps(tx, &self.erasure_steps)?;
        if self.changed.is_empty() {
            // Nothing was applied (replays and refusals only): nothing to write.
            return Ok(());
        }
        let mut put = RecordColumns::default();
        let (mut gone_partitions, mut gone_ids) = (Vec::new(), Vec::new());
        for (&(partition, id), change) in &self.changed {
            match change {
                Some((updated_at, payload)) => put.push(partition, id, *updated_at, payload),
                None => {
                    gone_partitions.push(big_partition(partition));
                    gone_ids.push(id_bytes(id));
                }
            }
        }
        let gone_ids: Vec<&[u8]> = gone_ids.iter().map(|id| &id[..]).collect();
        let put_ids: Vec<&[u8]> = put.ids.iter().map(|id| &id[..]).collect();
        let (mut claim_partitions, mut claim_keys) = (Vec::new(), Vec::new());
        let (mut claim_times, mut claim_data) = (Vec::new(), Vec::new());
        for (key, row) in &self.new_claims {
            claim_partitions.push(big_partition(key.0));
            claim_keys.push(key.1.as_str());
            claim_times.push(big(time_key(row.created_at)));
            claim_data.push(to_json(row)?);
        }
        let event_ids: Vec<&[u8]> = self.events.record_ids.iter().map(|id| &id[..]).collect();
        let new_deliveries = i32::try_from(self.deliveries.len())
            .map_err(|_| StoreError::Corrupt("too many deliveries in one batch".into()))?;
        let rows = tx.query(
            "WITH put AS ( \
                 INSERT INTO records (partition, id, updated_at, payload, folded) \
                 SELECT * FROM unnest($1::bigint[], $2::bytea[], $3::bigint[], $4::bytea[], \
                                      $5::text[]) \
                 ON CONFLICT (partition, id) DO UPDATE SET updated_at = EXCLUDED.updated_at, \
                     payload = EXCLUDED.payload, folded = EXCLUDED.folded \
             ), gone AS ( \
                 DELETE FROM records \
                 WHERE (partition, id) IN (SELECT * FROM unnest($6::bigint[], $7::bytea[])) \
             ), claims AS ( \
                 INSERT INTO idempotency (partition, key, created_at, data) \
                 SELECT * FROM unnest($8::bigint[], $9::text[], $10::bigint[], $11::bytea[]) \
                 ON CONFLICT (partition, key) DO UPDATE SET created_at = EXCLUDED.created_at, \
                     data = EXCLUDED.data \
             ), events AS ( \
                 INSERT INTO record_events (partition, kind, record_id, at) \
                 SELECT partition, kind, record_id, at \
                 FROM unnest($13::bigint[], $14::smallint[], $15::bytea[], $16::bigint[]) \
                     WITH ORDINALITY AS e(partition, kind, record_id, at, n) \
                 ORDER BY n \
             ) \
             SELECT nextval('delivery_ids') FROM generate_series(1, $12::int)",
            &[
                &put.partitions,
                &put_ids,
                &put.updated_at,
                &put.payloads,
                &put.folded,
                &gone_partitions,
                &gone_ids,
                &claim_partitions,
                &claim_keys,
                &claim_times,
                &claim_data,
                &new_deliveries,
                &self.events.partitions,
                &self.events.kinds,
                &event_ids,
                &self.events.at,
            ],
        )?;
        erase_deliveries(tx, &self.erased)?;
        if self.deliveries.is_empty() {
            return Ok(());
        }
        let mut ids = rows
            .iter()
            .map(|row| Ok(unbig(row.try_get(0)?)))
            .collect::<Result<Vec<u64>, StoreError>>()?;
        // Ids in the order the deliveries were made, as on redb.
        ids.sort_unstable();
        insert_deliveries(tx, ids, self.deliveries)
    }
}

/// Adds each erasure step's count to its erasure's row and moves its resume point.
/// The columns of the events a batch writes.
#[derive(Default)]
struct EventColumns {
    partitions: Vec<i64>,
    kinds: Vec<i16>,
    record_ids: Vec<[u8; 16]>,
    at: Vec<i64>,
}

impl EventColumns {
    fn push(&mut self, change: &Change<'_>) {
        self.partitions.push(big_partition(change.partition));
        self.kinds.push(i16::from(kind_code(change.kind)));
        self.record_ids.push(id_bytes(change.id.0));
        self.at.push(micros(change.at));
    }
}

/// The columns of the records a batch writes.
#[derive(Default)]
struct RecordColumns<'w> {
    partitions: Vec<i64>,
    ids: Vec<[u8; 16]>,
    updated_at: Vec<i64>,
    payloads: Vec<&'w [u8]>,
    folded: Vec<String>,
}

impl<'w> RecordColumns<'w> {
    fn push(&mut self, partition: Partition, id: u128, updated_at: Timestamp, payload: &'w [u8]) {
        self.partitions.push(big_partition(partition));
        self.ids.push(id_bytes(id));
        self.updated_at.push(updated_at.as_micros());
        self.payloads.push(payload);
        self.folded.push(searchable_text(payload));
    }
}

/// Inserts the deliveries of a batch with `ids`, each pending and due at its creation (or
/// skipped, and not due).
fn insert_deliveries(
    tx: &mut PgTx<'_>,
    ids: Vec<u64>,
    deliveries: Vec<(Partition, RecordId, NewDelivery)>,
) -> Result<(), StoreError> {
    if ids.len() != deliveries.len() {
        return Err(StoreError::Corrupt(format!(
            "{} delivery ids for {} deliveries",
            ids.len(),
            deliveries.len()
        )));
    }
    let (mut partitions, mut record_ids, mut due_at) = (Vec::new(), Vec::new(), Vec::new());
    let (mut receivers, mut data) = (Vec::new(), Vec::new());
    for (&id, (partition, record_id, mut new)) in ids.iter().zip(deliveries) {
        partitions.push(big_partition(partition));
        record_ids.push(id_bytes(record_id.0));
        due_at.push(Some(big(time_key(new.created_at))).filter(|_| !new.skipped));
        receivers.push(std::mem::take(&mut new.receiver));
        data.push(to_json(&new.into_row(id, partition, record_id))?);
    }
    let ids: Vec<i64> = ids.into_iter().map(big).collect();
    let record_ids: Vec<&[u8]> = record_ids.iter().map(|id| &id[..]).collect();
    tx.execute(
        "INSERT INTO deliveries (id, partition, record_id, due_at, receiver, data) \
         SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bytea[], $4::bigint[], \
                              $5::text[], $6::bytea[])",
        &[&ids, &partitions, &record_ids, &due_at, &receivers, &data],
    )?;
    tx.effects.deliveries_due = true;
    Ok(())
}

#[cfg(test)]
mod tests;
