//! intake: a self-hosted data-intake API in one binary.
//!
//! The crate is six layers, each importing only those below it (`ARCHITECTURE.md` at the
//! repository root has the codemap, the invariants and the dependency rules, which
//! `tests/architecture.rs` checks):
//!
//! - [`cli`]: the command line (`serve`, `init`, `check`, `health`, `backup`, `restore`,
//!   `migrate`, `compact`, `endpoint`; completions and manual pages).
//! - [`server`]: wiring the store, the workers and the HTTP service; TLS, redirect, shutdown.
//! - [`http`]: the data and management API, the dashboard, the OpenAPI document.
//! - [`workers`]: background threads: ingest writer, search indexer, webhook dispatcher,
//!   mailer, request log, the cluster heartbeat, payload compression.
//! - [`domain`]: the services, given explicit handles (the store, the clock, the after-commit
//!   path), never the server's state.
//! - [`store`]: the storage seam (traits and rows) and its two backends: `store::redb` (one
//!   node, the default) and `store::postgres` (any number of nodes sharing one database),
//!   each the only code that names its database.
//! - [`core`]: clock, ids, crypto, cursors, config, metrics, log output, tracing and telemetry.

pub mod cli;
pub mod core;
pub mod domain;
pub mod http;
pub mod server;
pub mod store;
pub mod workers;
