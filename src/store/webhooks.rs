//! Webhooks: the owner's settings, signing secrets, deliveries and their attempts.
