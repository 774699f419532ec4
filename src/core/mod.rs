//! Core helpers: the bottom layer, which imports nothing else of the crate.
pub mod clock;
pub mod config;
pub mod crypto;
pub mod cursor;
pub mod ids;
pub mod log_output;
pub mod metrics;
pub mod private_dir;
pub mod quiet_panic;
pub mod ticker;
