//! Webhooks: the owner's settings, signing secrets, deliveries and their attempts.

use crate::store::{StoreError, WebhookSecretRow};

pub trait WebhooksRead {
    /// The signing secret of one partition (endpoint and environment).
    fn webhook_secret(&self, partition: u64) -> Result<Option<WebhookSecretRow>, StoreError>;
}

pub trait WebhooksWrite {
    fn put_webhook_secret(
        &mut self,
        partition: u64,
        row: &WebhookSecretRow,
    ) -> Result<(), StoreError>;
}

/// Units of work of their own transaction (the dispatcher's claims and outcomes).
pub trait WebhooksStore {}
