//! The mail worker.
pub mod smtp;
pub mod worker;
