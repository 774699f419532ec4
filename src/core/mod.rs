//! Core helpers: the bottom layer, which knows nothing of endpoints, records or requests and
//! imports nothing else of the crate.
//!
//! - [`background`]: threads of background work at a lower CPU priority than requests.
//! - [`clock`]: the injectable clock every time comes from, and the RFC 3339 format.
//! - [`ids`]: record ids, slugs, keys, tokens, request ids.
//! - [`crypto`]: hashes for key lookup, sealing of viewable secrets, password hashing.
//! - [`cursor`]: opaque, partition-checked pagination cursors and the `limit` rule.
//! - [`egress`]: which addresses webhooks may go to (the SSRF rule).
//! - [`config`]: the TOML file, defaults, duration syntax, `INTAKE_*` environment overrides,
//!   and the masked TOML printout of `intake check`.
//! - [`metrics`]: counters and histograms kept while running and the Prometheus rendering.
//! - [`log_output`]: where log lines go: a background thread writes them to stderr, so a
//!   request never waits on a `write` of its log line.
//! - [`text`]: a payload as text and the per-character case folding search matches with.
//! - [`ticker`]: the beat of the server's periodic tasks, ending when the server stops.
//! - [`private_dir`]: folders only their owner may read (data dir, backups).
//! - [`trace`]: W3C Trace Context (`traceparent`) and span ids.
//! - [`telemetry`]: spans recorded without waiting and exported over OTLP/HTTP (JSON) by a
//!   thread of their own, when `[telemetry] otlp_endpoint` names a collector.
//! - [`quiet_panic`]: runs code whose panic becomes an error (redb panics on some damaged
//!   pages; the store turns that into "restore a backup" at start).

pub mod background;
pub mod clock;
pub mod config;
pub mod crypto;
pub mod cursor;
pub mod egress;
pub mod ids;
pub mod log_output;
pub mod metrics;
pub mod private_dir;
pub mod quiet_panic;
pub mod telemetry;
pub mod text;
pub mod ticker;
pub mod trace;
