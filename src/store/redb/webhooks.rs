//! [`WebhooksRead`], [`WebhooksWrite`] and [`WebhooksStore`] on redb.

use redb::ReadableTable;

use super::tx::{RedbWrite, Tables};
use super::{RedbStore, WEBHOOK_SECRETS, from_json, to_json};
use crate::store::webhooks::{WebhooksRead, WebhooksStore, WebhooksWrite};
use crate::store::{StoreError, WebhookSecretRow};

impl<T: Tables> WebhooksRead for T {
    fn webhook_secret(&self, partition: u64) -> Result<Option<WebhookSecretRow>, StoreError> {
        match self.open(WEBHOOK_SECRETS)?.get(partition)? {
            Some(value) => Ok(Some(from_json(value.value())?)),
            None => Ok(None),
        }
    }
}

impl WebhooksWrite for RedbWrite<'_> {
    fn put_webhook_secret(
        &mut self,
        partition: u64,
        row: &WebhookSecretRow,
    ) -> Result<(), StoreError> {
        self.table(WEBHOOK_SECRETS)?
            .insert(partition, to_json(row)?.as_slice())?;
        Ok(())
    }
}

impl WebhooksStore for RedbStore {}
