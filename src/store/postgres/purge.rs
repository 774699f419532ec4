//! [`PurgeStore`] on PostgreSQL.

use super::records::partitions_of;
use super::{Patience, PgStore, PgTx, big, big_partition, count, micros, unbig};
use crate::core::clock::Timestamp;
use crate::store::purge::PurgeStore;
use crate::store::{Partition, StoreError};

/// One chunk of `purge_deliveries_before` (`$1` partition, `$2` cutoff in microseconds, `$3`
/// limit), answering how many deliveries it removed. A delivery is pending exactly while it is
/// listed (`due_at` set, claimed or not), so the finished ones are those without `due_at`. The
/// walk goes in id order along an index (`deliveries_by_partition`, or the primary key where
/// the partition holds most rows) and takes those before the first one made at or after the
/// cutoff (`created_at` is read from the row's JSON); `due_at` is checked again on delete, and
/// the attempts go in the same statement, by their primary key. The id lists are arrays, so
/// that both deletes probe by key however few rows the planner expects.
const PURGE_FINISHED_BEFORE: &str = "\
    WITH walk AS ( \
        SELECT id, (convert_from(data, 'UTF8')::json ->> 'created_at')::bigint AS created_at \
        FROM deliveries WHERE partition = $1 AND due_at IS NULL \
        ORDER BY id LIMIT $3 \
    ), gone AS ( \
        DELETE FROM deliveries WHERE due_at IS NULL AND id = ANY(ARRAY( \
            SELECT id FROM walk WHERE id < coalesce( \
                (SELECT min(id) FROM walk WHERE created_at >= $2), 9223372036854775807))) \
        RETURNING id \
    ), attempts AS ( \
        DELETE FROM delivery_attempts WHERE delivery_id = ANY(ARRAY(SELECT id FROM gone)) \
    ) SELECT count(*) FROM gone";

impl PurgeStore for PgStore {
    fn purge_partition_rows(
        &self,
        partition: Partition,
        limit: usize,
    ) -> Result<usize, StoreError> {
        let (removed, _) = self.write_unit_within(Patience::Maintenance, |tx| {
            let (p, n) = (big_partition(partition), count(limit));
            // Attempts first: they name their delivery.
            let mut removed = tx.execute(
                "DELETE FROM delivery_attempts WHERE delivery_id IN ( \
                     SELECT id FROM deliveries WHERE partition = $1 ORDER BY id LIMIT $2)",
                &[&p, &n],
            )?;
            removed += tx.execute(
                "DELETE FROM deliveries WHERE id IN ( \
                     SELECT id FROM deliveries WHERE partition = $1 ORDER BY id LIMIT $2)",
                &[&p, &n],
            )?;
            removed += tx.execute(
                "DELETE FROM idempotency WHERE (partition, key) IN ( \
                     SELECT partition, key FROM idempotency WHERE partition = $1 LIMIT $2)",
                &[&p, &n],
            )?;
            for table in ["usage_months", "usage_days", "subscription_pace"] {
                removed +=
                    tx.execute(&format!("DELETE FROM {table} WHERE partition = $1"), &[&p])?;
            }
            removed += tx.execute(
                "DELETE FROM failure_mails WHERE endpoint_id = $1",
                &[&big(partition.endpoint())],
            )?;
            Ok(removed)
        })?;
        Ok(usize::try_from(removed).unwrap_or(usize::MAX))
    }

    fn delivery_partitions(&self) -> Result<Vec<Partition>, StoreError> {
        partitions_of(&PgTx::read(self)?, "deliveries")
    }

    fn purge_deliveries_before(
        &self,
        partition: Partition,
        cutoff: Timestamp,
        limit: usize,
    ) -> Result<usize, StoreError> {
        let (removed, _) = self.write_unit_within(Patience::Maintenance, |tx| {
            let row = tx.query_opt(
                PURGE_FINISHED_BEFORE,
                &[&big_partition(partition), &micros(cutoff), &count(limit)],
            )?;
            match row {
                Some(row) => Ok(unbig(row.try_get(0)?)),
                None => Ok(0),
            }
        })?;
        usize::try_from(removed).map_err(|_| StoreError::Corrupt("purged delivery count".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Patience, test_store};
    use super::PURGE_FINISHED_BEFORE;

    /// A chunk reads deliveries and attempts through their indexes, never a whole table.
    #[test]
    fn a_chunk_of_the_delivery_purge_reads_by_index() {
        let store = test_store();
        let (plan, _) = store
            .write_unit_within(Patience::Maintenance, |tx| {
                // 40,000 deliveries of 4 partitions, one in ten pending, two attempts each.
                tx.execute(
                    "INSERT INTO deliveries (id, partition, record_id, due_at, data) \
                     SELECT g, g % 4, '\\x00'::bytea, CASE WHEN g % 10 = 0 THEN g END, \
                         convert_to(json_build_object('created_at', g, 'body', 'x')::text, \
                                    'UTF8') \
                     FROM generate_series(1, 40000) g",
                    &[],
                )?;
                tx.execute(
                    "INSERT INTO delivery_attempts (delivery_id, attempt, data) \
                     SELECT g / 2, g % 2, '\\x00'::bytea FROM generate_series(2, 80001) g",
                    &[],
                )?;
                tx.execute("ANALYZE deliveries", &[])?;
                tx.execute("ANALYZE delivery_attempts", &[])?;
                let rows = tx.query(
                    &format!("EXPLAIN {PURGE_FINISHED_BEFORE}"),
                    &[&1i64, &20_000i64, &2_000i64],
                )?;
                let lines: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
                Ok(lines.join("\n"))
            })
            .unwrap();
        assert!(!plan.contains("Seq Scan"), "{plan}");
        assert!(plan.contains("delivery_attempts_pkey"), "{plan}");
    }
}
