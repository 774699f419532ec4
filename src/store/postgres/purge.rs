//! [`PurgeStore`] on PostgreSQL.

use super::{Patience, PgStore, big, count};
use crate::store::purge::PurgeStore;
use crate::store::{StoreError, partition_endpoint};

impl PurgeStore for PgStore {
    fn purge_partition_rows(&self, partition: u64, limit: usize) -> Result<usize, StoreError> {
        let (removed, _) = self.write_unit_within(Patience::Maintenance, |tx| {
            let (p, n) = (big(partition), count(limit));
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
                &[&big(partition_endpoint(partition))],
            )?;
            Ok(removed)
        })?;
        Ok(usize::try_from(removed).unwrap_or(usize::MAX))
    }
}
