//! Workers.
pub mod ingest;
pub mod mail;
pub mod request_log;
pub mod search;
pub mod webhooks;
