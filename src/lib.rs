//! intake: a self-hosted data-intake API in one binary.
//!
//! The crate is six layers, each importing only those below it (`ARCHITECTURE.md` at the
//! repository root has the codemap, the invariants and the dependency rules, which
//! `tests/architecture.rs` checks):
//!
//! - [`cli`]: the command line (`serve`, `init`, `check`, `backup`, `restore`, `endpoint`).
//! - [`server`]: wiring the store, the workers and the HTTP service; TLS, redirect, shutdown.
//! - [`http`]: the data and management API, the dashboard, the OpenAPI document.
//! - [`workers`]: background threads: ingest writer, search indexer, webhook dispatcher,
//!   mailer, request log.
//! - [`domain`]: the services, given explicit handles (the store, the clock, the after-commit
//!   path), never the server's state.
//! - [`store`]: the storage seam (traits and rows) and its redb backend, the only code that
//!   names redb.
//! - [`core`]: clock, ids, crypto, cursors, config, metrics, log output.

pub mod cli;
pub mod core;
pub mod domain;
pub mod http;
pub mod server;
pub mod store;
pub mod workers;
