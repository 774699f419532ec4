//! webhooks on PostgreSQL: unimplemented stubs, replaced by the real implementation.

#![allow(unused_variables, unused_imports)]

use crate::core::clock::Timestamp;
use crate::store::postgres::{PgStore, PgTx};
use crate::store::webhooks::*;
use crate::store::*;

impl WebhooksRead for PgTx<'_> {
    fn webhook_secret(&self, partition: u64) -> Result<Option<WebhookSecretRow>, StoreError> {
        unimplemented!()
    }
    fn owner_webhook(&self, partition: u64) -> Result<Option<OwnerWebhookRow>, StoreError> {
        unimplemented!()
    }
    fn delivery(&self, id: u64) -> Result<Option<DeliveryRow>, StoreError> {
        unimplemented!()
    }
    fn deliveries(&self, ids: &[u64]) -> Result<Vec<DeliveryRow>, StoreError> {
        unimplemented!()
    }
    fn delivery_page(
        &self,
        partition: u64,
        record: Option<u128>,
        before: u64,
        limit: usize,
    ) -> Result<Vec<DeliveryRow>, StoreError> {
        unimplemented!()
    }
    fn delivery_attempts(&self, id: u64) -> Result<Vec<AttemptRow>, StoreError> {
        unimplemented!()
    }
    fn due_deliveries(
        &self,
        now: Timestamp,
        after: Option<(Timestamp, u64)>,
        limit: usize,
    ) -> Result<Vec<DueDelivery>, StoreError> {
        unimplemented!()
    }
    fn failure_mailed(&self, endpoint_id: u64, day: u64) -> Result<bool, StoreError> {
        unimplemented!()
    }
}

impl WebhooksWrite for PgTx<'_> {
    fn put_webhook_secret(
        &mut self,
        partition: u64,
        row: &WebhookSecretRow,
    ) -> Result<(), StoreError> {
        unimplemented!()
    }
    fn delete_webhook_secret(&mut self, partition: u64) -> Result<bool, StoreError> {
        unimplemented!()
    }
    fn put_owner_webhook(
        &mut self,
        partition: u64,
        row: &OwnerWebhookRow,
    ) -> Result<(), StoreError> {
        unimplemented!()
    }
    fn delete_owner_webhook(&mut self, partition: u64) -> Result<bool, StoreError> {
        unimplemented!()
    }
    fn put_delivery(&mut self, row: &DeliveryRow) -> Result<(), StoreError> {
        unimplemented!()
    }
    fn put_due(&mut self, due: &DueDelivery) -> Result<(), StoreError> {
        unimplemented!()
    }
    fn record_outcomes(
        &mut self,
        outcomes: &[AttemptOutcome],
    ) -> Result<Vec<DeliveryRow>, StoreError> {
        unimplemented!()
    }
    fn insert_failure_mail(&mut self, endpoint_id: u64, day: u64) -> Result<(), StoreError> {
        unimplemented!()
    }
}

impl WebhooksStore for PgStore {}

impl PgStore {
    pub(super) fn read_gauges(&self, now: Timestamp) -> Result<StoreGauges, StoreError> {
        unimplemented!()
    }
}
