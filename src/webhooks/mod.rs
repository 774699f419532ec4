//! Webhooks.
//!
//! - [`deliveries`]: creating deliveries in the commit of the write that causes them.
//! - [`owner`]: the owner webhook of each endpoint and environment.
//! - [`log`]: the delivery log with every attempt, and manual redelivery.

pub mod deliveries;
pub mod log;
pub mod owner;
