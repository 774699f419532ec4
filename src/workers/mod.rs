//! Workers: the threads that do what no request waits for, each started and stopped by
//! `server`, each woken by the after-commit path or its own timer.
//!
//! - [`cluster`]: the heartbeat of a node on a shared store: its lease, its poll low-water
//!   mark, and access changes made on other nodes.
//! - [`compression`]: trains the store's payload dictionary when one is due.
//! - [`ingest`]: the group-commit writer: one thread takes every queued write, applies the
//!   batch in one transaction and commits with fsync; only then are the 202s sent.
//! - [`search`]: the tantivy index (`domain::search::SearchIndex`) and the indexer thread that
//!   follows the change log into it, at a lower CPU priority (`[search] indexer_nice`).
//! - [`webhooks`]: the dispatcher (`dispatch`: a scheduler, a worker pool capped per
//!   receiver, the retry policy, group-committed attempt outcomes and the owner failure
//!   e-mail), one HTTP attempt behind the SSRF guard (`send`), the explicit outbound proxy
//!   (`proxy`).
//! - [`mail`]: the mail thread sending the outbox over SMTP (`smtp`) and writing each outcome
//!   back.
//! - [`request_log`]: the per-endpoint log of data calls, written in batches and purged by
//!   retention.

pub mod cluster;
pub mod compression;
pub mod ingest;
pub mod mail;
pub mod request_log;
pub mod search;
pub mod webhooks;
