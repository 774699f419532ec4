//! [`StoreGauges`] on redb: counted from `DELIVERIES_DUE` and `OUTBOX` in one snapshot.

use redb::{ReadableTable, ReadableTableMetadata};

use super::{DELIVERIES_DUE, OUTBOX, PAYLOAD_DICTIONARIES, RedbStore, from_json};
use crate::core::clock::Timestamp;
use crate::store::{MailRow, MailStatus, StoreError, StoreGauges, time_key};

impl RedbStore {
    pub(super) fn read_gauges(&self, now: Timestamp) -> Result<StoreGauges, StoreError> {
        let now = time_key(now);
        let txn = self.read()?;
        let due = txn.open_table(DELIVERIES_DUE)?;
        let mut gauges = StoreGauges {
            webhook_pending: due.len()?,
            payload_dictionaries: txn.open_table(PAYLOAD_DICTIONARIES)?.len()?,
            ..StoreGauges::default()
        };
        for entry in due.range((now.saturating_add(1), 0)..)? {
            entry?;
            gauges.webhook_retry_backlog += 1;
        }
        for entry in txn.open_table(OUTBOX)?.iter()? {
            let (_, row) = entry?;
            let row: MailRow = from_json(row.value())?;
            match row.status {
                MailStatus::Queued => gauges.mail_queued += 1,
                MailStatus::Sent => gauges.mail_sent += 1,
                MailStatus::Failed => gauges.mail_failed += 1,
            }
        }
        Ok(gauges)
    }
}
