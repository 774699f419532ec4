//! [`ErasuresRead`] and [`ErasuresWrite`] on PostgreSQL: `erasures` (migration 0006), whose
//! `endpoint_id`, `running` and `created_at` columns follow the row's; and what an ingest
//! batch's erasure steps write beside the records they remove (`records::Batch`).

use std::collections::HashMap;

use super::{PgTx, big, big_partition, from_json, id_bytes, micros, row_json, to_json};
use crate::core::clock::Timestamp;
use crate::store::erasures::{ErasuresRead, ErasuresWrite};
use crate::store::{
    AttemptRow, DeliveryRow, Effects, ErasureRow, ErasureState, Partition, StoreError,
};

impl ErasuresRead for PgTx<'_> {
    fn erasure(&self, id: u64) -> Result<Option<ErasureRow>, StoreError> {
        self.query_opt("SELECT data FROM erasures WHERE id = $1", &[&big(id)])?
            .map(|row| row_json(&row, 0))
            .transpose()
    }

    fn endpoint_erasures(&self, endpoint_id: u64) -> Result<Vec<ErasureRow>, StoreError> {
        self.query(
            "SELECT data FROM erasures WHERE endpoint_id = $1 ORDER BY id DESC",
            &[&big(endpoint_id)],
        )?
        .iter()
        .map(|row| row_json(row, 0))
        .collect()
    }

    fn running_erasures(&self) -> Result<Vec<ErasureRow>, StoreError> {
        self.query("SELECT data FROM erasures WHERE running ORDER BY id", &[])?
            .iter()
            .map(|row| row_json(row, 0))
            .collect()
    }

    fn erasures_to_follow(&self, after: u64) -> Result<Vec<ErasureRow>, StoreError> {
        self.query(
            "SELECT data FROM erasures WHERE running OR id > $1 ORDER BY id",
            &[&big(after)],
        )?
        .iter()
        .map(|row| row_json(row, 0))
        .collect()
    }

    fn erasures_since(&self, at: Timestamp) -> Result<Vec<ErasureRow>, StoreError> {
        self.query(
            "SELECT data FROM erasures WHERE created_at >= $1 ORDER BY id",
            &[&micros(at)],
        )?
        .iter()
        .map(|row| row_json(row, 0))
        .collect()
    }
}

impl ErasuresWrite for PgTx<'_> {
    fn put_erasure(&mut self, row: &ErasureRow) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO erasures (id, endpoint_id, running, created_at, data)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (id) DO UPDATE SET running = EXCLUDED.running, data = EXCLUDED.data",
            &[
                &big(row.id),
                &big(row.partition.endpoint()),
                &(row.state == ErasureState::Running),
                &micros(row.created_at),
                &to_json(row)?,
            ],
        )?;
        Ok(())
    }
}

/// What one erasure step of a batch removed, to count on its erasure's row.
pub(super) struct ErasureStepDone {
    pub(super) erasure: u64,
    pub(super) count: u64,
    pub(super) range: Option<(u128, u128)>,
    pub(super) resume_below: u128,
}

pub(super) fn count_erasure_steps(
    tx: &mut PgTx<'_>,
    steps: &[ErasureStepDone],
) -> Result<(), StoreError> {
    for step in steps {
        let ErasureStepDone {
            erasure,
            count,
            range,
            resume_below,
        } = *step;
        let mut row = tx
            .erasure(erasure)?
            .ok_or_else(|| StoreError::Corrupt(format!("erasure {erasure} is missing")))?;
        row.count_step(count, range, resume_below);
        tx.put_erasure(&row)?;
        tx.effects
            .merge(Effects::records_changed([row.partition]).and_erased());
    }
    Ok(())
}

/// Erases the deliveries of the records `erased` and their attempts (`DeliveryRow::erase`,
/// `AttemptRow::erase`), each at the time its record was erased.
pub(super) fn erase_deliveries(
    tx: &mut PgTx<'_>,
    erased: &HashMap<(Partition, u128), Timestamp>,
) -> Result<(), StoreError> {
    if erased.is_empty() {
        return Ok(());
    }
    let partitions: Vec<i64> = erased.keys().map(|(p, _)| big_partition(*p)).collect();
    let keys: Vec<[u8; 16]> = erased.keys().map(|(_, id)| id_bytes(*id)).collect();
    let keys: Vec<&[u8]> = keys.iter().map(|id| &id[..]).collect();
    let rows = tx.query(
        "SELECT d.data FROM deliveries d          WHERE (d.partition, d.record_id) IN (SELECT * FROM unnest($1::bigint[], $2::bytea[]))          ORDER BY d.id FOR UPDATE",
        &[&partitions, &keys],
    )?;
    let (mut ids, mut data) = (
        Vec::with_capacity(rows.len()),
        Vec::with_capacity(rows.len()),
    );
    for row in &rows {
        let mut delivery: DeliveryRow = from_json(row.try_get(0)?)?;
        let at = erased
            .get(&(delivery.partition, delivery.record_id))
            .copied()
            .ok_or_else(|| StoreError::Corrupt("a delivery of no erased record".into()))?;
        delivery.erase(at);
        ids.push(big(delivery.id));
        data.push(to_json(&delivery)?);
    }
    tx.execute(
        "UPDATE deliveries d SET due_at = NULL, data = u.data          FROM unnest($1::bigint[], $2::bytea[]) AS u (id, data) WHERE d.id = u.id",
        &[&ids, &data],
    )?;
    let attempts = tx.query(
        "SELECT delivery_id, attempt, data FROM delivery_attempts          WHERE delivery_id = ANY($1::bigint[]) ORDER BY delivery_id, attempt FOR UPDATE",
        &[&ids],
    )?;
    let (mut delivery_ids, mut numbers, mut data) = (Vec::new(), Vec::new(), Vec::new());
    for row in &attempts {
        let mut attempt: AttemptRow = from_json(row.try_get(2)?)?;
        attempt.erase();
        delivery_ids.push(row.try_get::<_, i64>(0)?);
        numbers.push(row.try_get::<_, i32>(1)?);
        data.push(to_json(&attempt)?);
    }
    tx.execute(
        "UPDATE delivery_attempts a SET data = u.data          FROM unnest($1::bigint[], $2::int[], $3::bytea[]) AS u (delivery_id, attempt, data)          WHERE a.delivery_id = u.delivery_id AND a.attempt = u.attempt",
        &[&delivery_ids, &numbers, &data],
    )?;
    Ok(())
}
