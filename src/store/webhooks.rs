//! Webhooks: the owner's settings, signing secrets, deliveries and their attempts.

pub trait WebhooksRead {}

pub trait WebhooksWrite {}

/// Units of work of their own transaction (the dispatcher's claims and outcomes).
pub trait WebhooksStore {}
