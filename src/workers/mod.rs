//! Workers: the threads that do what no request waits for, each started and stopped by
//! `server`, each woken by the after-commit path or its own timer. Each is named for what it
//! is; the domain module it serves has the plain name (`domain::ingest`, the queue, is drained
//! by `ingest_writer`).
//!
//! - [`cluster`]: the heartbeat of a node on a shared store: its lease, its poll low-water
//!   mark, and access changes made on other nodes.
//! - [`compression`]: trains the store's payload dictionary when one is due.
//! - [`ingest_writer`]: the group-commit writer: one thread takes every queued write
//!   (`domain::ingest`), applies the batch in one transaction and commits with fsync; only
//!   then are the 202s sent.
//! - [`search_index`]: the tantivy index (`domain::search::SearchIndex`) and the indexer
//!   thread that follows the change log into it, at a lower CPU priority
//!   (`[search] indexer_nice`).
//! - [`dispatcher`]: the webhook dispatcher (a scheduler, a worker pool capped per receiver,
//!   group-committed attempt outcomes, the recovery walk), one HTTP attempt behind the SSRF
//!   guard (`send`), the explicit outbound proxy (`proxy`), a test event (`probe`).
//! - [`mailer`]: the mail thread sending the outbox over SMTP (`smtp`) and writing each
//!   outcome back.
//! - [`request_log`]: the per-endpoint log of data calls, written in batches and purged by
//!   retention.

pub mod cluster;
pub mod compression;
pub mod dispatcher;
pub mod ingest_writer;
pub mod mailer;
pub mod request_log;
pub mod search_index;
